"""A study resumes from its published (committed) run folders when its workdirs are gone:
`python -m sweeps.launch <study> --published=results` (sweeps/workdirs.py, launch_plan.plan,
sweeps/search.py)."""

import json
import os
import shutil

import forked
from conftest import FAST_COMPILE, tiny_config, write_config_file
from forked import ROOT
from sweeps import launch_plan, search, workdirs
from sweeps.study import Search, Study, product

# The launcher's children must see one CPU device (the tests' XLA_FLAGS ask for 8).
ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu",
                                                                    "XLA_FLAGS": FAST_COMPILE}


def publish_fake(run, folder: str, val_loss: float = 2.0, *, config=None, results=None) -> None:
  """Writes what sweeps.publish copies of a finished run, without training: config.json (the
  run's config, as train.py writes it), metrics.jsonl with a record at the final step, and one
  result JSON per result key (all of `run.results` unless `results` says which)."""
  n = run.num_steps
  os.makedirs(os.path.join(folder, "eval"))
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"config": config or json.loads(json.dumps(run.config.to_dict(), default=list))},
              f)
  with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": n // 2, "loss": 9.0}) + "\n")
    f.write(json.dumps({"step": n, "val_loss": val_loss}) + "\n")
  for i, k in enumerate(run.results if results is None else results):
    with open(os.path.join(folder, "eval", f"r{i}.json"), "w") as f:
      json.dump({"suite": k.suite, "extension": k.extension, "extension_factor": k.factor,
                 "protocol": k.protocol, "stride": k.stride, "step": n}, f)


def test_a_published_run_is_complete_only_when_finished_with_every_result(tmp_path):
  study = Study("pub", "configs/alibi_tiny.py",
                lambda: [{"model.position.kind": "rope", "train.num_steps": 6}])
  (run,) = study.runs()
  workdir, folder = str(tmp_path / "work" / run.name), str(tmp_path / "pub" / run.name)
  assert workdirs.run_state(run, workdir, folder).train  # nothing anywhere: to train
  publish_fake(run, folder)
  state = workdirs.run_state(run, workdir, folder)
  assert state.complete and state.published and state.describe() == "complete (published)"
  assert workdirs.run_state(run, workdir).train  # without the flag the workdir alone counts
  # A published run whose config differs in a field the study sets is not this run.
  other = json.loads(json.dumps(run.config.to_dict(), default=list))
  other["model"]["position"]["kind"] = "alibi"
  publish_fake(run, str(tmp_path / "other"), config=other)
  assert workdirs.published_mismatch(run, str(tmp_path / "other")) == (
      "model.position.kind is 'alibi' there, 'rope' in the study")
  assert workdirs.run_state(run, workdir, str(tmp_path / "other")).train
  # A result missing, or training that stopped before the last step, is not finished.
  publish_fake(run, str(tmp_path / "short"), results=run.results[:-1])
  assert workdirs.published_mismatch(run, str(tmp_path / "short")) == "1 result(s) missing"
  cut = str(tmp_path / "cut")
  publish_fake(run, cut)
  with open(os.path.join(cut, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 3, "loss": 9.0}) + "\n{\"step\": 6, \"val")  # killed mid-line
  assert workdirs.published_mismatch(run, cut) == "no metrics record at step 6"


def test_a_published_parent_trains_again_only_for_a_pending_child(tmp_path):
  parent = {"model.position.kind": "rope", "train.num_steps": 6, "train.warmup_steps": 2}
  points = [parent, {"@parent": parent, "@config": "configs/extend_pi.py:{parent},2",
                     "train.num_steps": 3, "train.warmup_steps": 1}]
  study = Study("fam", "configs/alibi_tiny.py", lambda: points)
  root, published = str(tmp_path / "root"), str(tmp_path / "results")
  p_run, c_run = study.runs()
  publish_fake(p_run, os.path.join(published, "fam", p_run.name))
  planned = launch_plan.plan(study, root, num_devices=1, read_state=True,
                             published_root=published)
  # The child needs the parent's checkpoint, which a published folder does not hold.
  assert [(p.run.name, p.state.describe()) for p in planned] == [
      (p_run.name, "to train"), (c_run.name, "to train")]
  assert planned[0].state.evals == p_run.evals
  publish_fake(c_run, os.path.join(published, "fam", c_run.name))
  planned = launch_plan.plan(study, root, num_devices=1, read_state=True,
                             published_root=published)
  assert [p.state.describe() for p in planned] == ["complete (published)"] * 2
  assert not any(p.pending for p in planned)
  # Without --published the same root has everything to run.
  planned = launch_plan.plan(study, root, num_devices=1, read_state=True)
  assert [p.pending for p in planned] == [True, True]


def test_a_tuning_stage_selects_from_published_scores_and_the_launcher_says_so(tmp_path):
  study_text = ("from sweeps.study import Search, Study, product\n"
                "STUDY = Study('tune', 'configs/alibi_tiny.py', lambda: product(**{'model.position"
                ".kind': ['alibi', 'rope']}), search=Search(grid={'train.learning_rate': [1e-3, "
                "1e-2]}, common={'train.num_steps': 4, 'train.warmup_steps': 2}))\n")
  study = Study("tune", "configs/alibi_tiny.py",
                lambda: product(**{"model.position.kind": ["alibi", "rope"]}),
                search=Search(grid={"train.learning_rate": [1e-3, 1e-2]},
                              common={"train.num_steps": 4, "train.warmup_steps": 2}))
  root, published = str(tmp_path / "root"), str(tmp_path / "results")
  runs = search.search_study(study).runs()
  losses = {("alibi", 1e-3): 2.5, ("alibi", 1e-2): 2.25, ("rope", 1e-3): 2.0, ("rope", 1e-2): 3.0}
  for run in runs[:3]:  # three of four published; the workdirs are gone
    key = (run.config.model.position.kind, run.config.train.learning_rate)
    publish_fake(run, os.path.join(published, "tune", "search", run.name), losses[key])
  assert search.selection(study, root, published) is None
  last = runs[3]
  publish_fake(last, os.path.join(published, "tune", "search", last.name), losses[("rope", 1e-2)])
  chosen = search.selection(study, root, published)
  assert {g["group"]["model.position.kind"]: g["selected"]["train.learning_rate"]
          for g in chosen["groups"]} == {"alibi": 1e-2, "rope": 1e-3}
  assert search.selection(study, root) is None  # the workdirs alone hold nothing
  path = tmp_path / "tune.py"
  path.write_text(study_text)
  dry = forked.run(["-m", "sweeps.launch", str(path), f"--root={root}", "--num_devices=1",
                    f"--published={published}", "--dry-run"], cwd=ROOT, env=ENV, timeout=600)
  assert dry.returncode == 0, dry.stderr[-2000:]
  assert "# study search: 4 runs, 0 to run" in dry.stdout
  assert f"# 4 run(s) complete in their published folders ({published}/tune)" in dry.stdout
  assert "# study tune: 2 runs, 2 to run" in dry.stdout
  bad = forked.run(["-m", "sweeps.launch", str(path), f"--root={root}",
                    f"--published={tmp_path}/nowhere", "--dry-run"], cwd=ROOT, env=ENV,
                   timeout=600)
  assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == (
      f"error: --published={tmp_path}/nowhere: no such folder (give the folder that holds "
      "<study>/<run>, e.g. results)")


def test_a_launched_run_is_published_as_it_finishes_and_a_new_machine_skips_it(text_corpus,
                                                                               tmp_path):
  tiny = tiny_config(text_corpus, "rope")
  tiny.train.num_steps = tiny.train.checkpoint_every_steps = 4
  tiny.eval.length_multipliers = (1.0, 2.0)
  tiny.eval.max_tokens_per_length = 256
  config = write_config_file(str(tmp_path / "tiny_config.py"), tiny)
  path = tmp_path / "one.py"
  path.write_text("from sweeps.study import Study\n"
                  f"STUDY = Study(name='one', config={config!r}, points=lambda: [{{'seed': 3}}], "
                  "common={'eval.length_multipliers': (1.0,)})\n")
  root, published = tmp_path / "root", tmp_path / "results"
  published.mkdir()
  args = [str(path), f"--root={root}", "--num_devices=1", f"--published={published}"]
  first = forked.run(["-m", "sweeps.launch", *args], cwd=ROOT, env=ENV, timeout=900)
  assert first.returncode == 0, first.stdout + first.stderr
  run = published / "one" / "seed=3"
  assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) == [
      "config.json", "eval/loss_by_position.json", "eval/ppl_vs_length.json", "metrics.jsonl"]
  assert (published / "one" / "study.json").is_file()
  # A new machine: the workdirs are gone; the published run (its real config.json, with
  # lists for tuples) agrees with the study, so nothing trains.
  shutil.rmtree(root)
  again = forked.run(["-m", "sweeps.launch", *args], cwd=ROOT, env=ENV, timeout=900)
  assert again.returncode == 0, again.stdout + again.stderr
  assert "# study one: 1 run, 0 to run" in again.stdout
  assert f"# 1 run(s) complete in their published folders ({published})" in again.stdout
