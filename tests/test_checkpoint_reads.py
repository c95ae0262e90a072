"""One checkpoint-reading path (runs/checkpoint.py `read_checkpoint`) under eval.run and warm
starts: a damaged latest step falls back to the previous with a warning naming it (left in
place), an explicit damaged step is refused, the only checkpoint damaged gives one line and no
Orbax event-loop tracebacks; a parent or run held by a live process is refused; eval.run keeps
results computed under other settings, and refuses a results folder it cannot write."""

import json
import re
import os
import shutil
import subprocess

import jax
import numpy as np
import pytest

import forked

from conftest import FAST_COMPILE, damage_checkpoint, no_compilation, train_rope_parent, tiny_config
from configs.stored import load_run_config
from configs.validate import ConfigError
from eval import run as eval_run
from eval.suites import perplexity as perplexity_suite
from models import sharding
from runs import warm_start
from runs.run_lock import RunLock, holder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def parent(text_corpus, tmp_path_factory) -> str:
  """A 4-step tiny RoPE run with checkpoints at steps 2 and 4."""
  return train_rope_parent(text_corpus, str(tmp_path_factory.mktemp("reads") / "parent"),
                           num_steps=4, checkpoint_every=2, write_plots=True)


def copy_of(parent: str, tmp_path, name: str = "run") -> str:
  return shutil.copytree(parent, str(tmp_path / name))


def test_eval_falls_back_past_a_damaged_latest_step_and_keeps_other_results(parent, tmp_path,
                                                                            capsys):
  run = copy_of(parent, tmp_path)
  damage_checkpoint(run, 4)
  config = load_run_config(run)
  config.eval.length_multipliers = (1.0, 20000.0)  # 640000 tokens: no document reaches it
  result = eval_run.evaluate(run, config=config)["ppl_vs_length"]
  err = capsys.readouterr()
  assert "the checkpoint at step 4" in err.err and "using the checkpoint at step 2" in err.err
  assert "step 4 is left in place" in err.err and os.path.isdir(f"{run}/checkpoints/4")
  assert result["step"] == 2 and {"same_text", "common_tokens"} <= set(result)
  beyond = result["rows"][1]
  assert beyond["nll"] is None and beyond["skipped"].startswith("no held-out document reaches")
  assert "will be skipped: no held-out document" in err.out
  # The training run's own result (step 4, length 32 only) was kept, named by what differs.
  kept = json.load(open(f"{run}/eval/earlier/ppl_vs_length.step-4.lengths-32.json"))
  assert kept["step"] == 4 and json.load(open(f"{run}/eval/ppl_vs_length.json"))["step"] == 2
  assert os.path.isfile(f"{run}/eval/earlier/ppl_vs_length.step-4.lengths-32.png")
  # The same settings again: replaced, nothing more kept.
  eval_run.evaluate(run, config=config)
  assert len(os.listdir(f"{run}/eval/earlier")) == 4  # ppl_vs_length and loss_by_position
  # An explicit damaged step is refused, in one line, with no fallback.
  with no_compilation(), pytest.raises(ConfigError, match=r"^--step=4: the checkpoint at step "
                                       r"4 in .* is unreadable.*; other steps: \[2\]$") as e:
    eval_run.evaluate(run, step=4, config=config)
  assert "\n" not in str(e.value) and len(str(e.value)) < 600


def test_eval_reads_a_workdir_named_by_a_relative_path(parent, tmp_path, monkeypatch):
  """The README's `python -m eval.run --workdir=workdirs/<run>`: Orbax restores from absolute
  paths only, so a relative workdir is made absolute (it was refused as "unreadable")."""
  copy_of(parent, tmp_path)
  monkeypatch.chdir(tmp_path)
  config = load_run_config("run")
  config.eval.length_multipliers = (1.0,)
  result = eval_run.evaluate("run", config=config)["ppl_vs_length"]
  assert result["step"] == 4 and result["rows"][0]["nll"] is not None


def test_warm_start_falls_back_past_a_damaged_step_and_refuses_an_explicit_one(
    parent, text_corpus, tmp_path, capsys):
  run = copy_of(parent, tmp_path)
  damage_checkpoint(run, 4)
  mesh = sharding.make_mesh(tiny_config(text_corpus, "rope").mesh, jax.devices()[:1])

  def child(init_from):
    c = tiny_config(text_corpus, "rope")
    c.train.init_from = init_from
    return c

  chosen = warm_start.check_init_from(child(run), str(tmp_path / "child"), mesh)
  assert chosen.step == 2
  err = capsys.readouterr().err
  assert "the checkpoint at step 4" in err and "using the checkpoint at step 2" in err
  assert os.path.isdir(f"{run}/checkpoints/4")  # not the warm start's run: left in place
  with pytest.raises(ConfigError, match=rf"^train.init_from={run}@4: the checkpoint at step 4 "
                     r".* is unreadable") as e:
    warm_start.check_init_from(child(f"{run}@4"), str(tmp_path / "child"), mesh)
  assert "--step" not in str(e.value) and "\n" not in str(e.value)


def test_the_only_checkpoint_damaged_gives_one_line_and_no_event_loop_tracebacks(parent,
                                                                                 tmp_path):
  run = copy_of(parent, tmp_path)
  shutil.rmtree(f"{run}/checkpoints/2")
  damage_checkpoint(run, 4)
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}")
  proc = forked.run(["-m", "eval.run", f"--workdir={run}"], cwd=ROOT, env=env, timeout=120)
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
  assert "no checkpoint in" in errors[0] and "unreadable" in errors[0], errors[0]
  assert "Event loop is closed" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_parent_or_run_held_by_a_live_process_is_refused(parent, text_corpus, tmp_path):
  run = copy_of(parent, tmp_path)
  mesh = sharding.make_mesh(tiny_config(text_corpus, "rope").mesh, jax.devices()[:1])
  c = tiny_config(text_corpus, "rope")
  c.train.init_from = run
  with RunLock(run):
    assert holder(run) is not None  # per open file description: seen from this process too
    with no_compilation():
      with pytest.raises(ConfigError, match=rf"^train.init_from='{run}': {run} is still being "
                         r"trained by pid \d+ .*give train.init_from=<copy>@4$"):
        warm_start.check_init_from(c, str(tmp_path / "child"), mesh)
      with pytest.raises(ConfigError, match=rf"^--workdir={run} is in use by pid \d+"):
        eval_run.evaluate(run, length_multipliers=["1"])
  assert holder(run) is None


def _read_only_mount(folder: str):
  """Makes `folder` read-only for this process: a read-only bind mount as root (where chmod
  does not bind), else chmod 0o555. Returns an undo function, or None (with pytest.skip)."""
  if os.geteuid() != 0:
    os.chmod(folder, 0o555)
    return lambda: os.chmod(folder, 0o755)
  if shutil.which("mount") is None:
    pytest.skip("running as root without `mount`: a read-only folder cannot be made")
  bind = subprocess.run(["mount", "--bind", folder, folder], capture_output=True, text=True)
  if bind.returncode != 0:
    pytest.skip(f"running as root and a bind mount is not permitted here: {bind.stderr.strip()}")
  ro = subprocess.run(["mount", "-o", "remount,ro,bind", folder], capture_output=True, text=True)
  if ro.returncode != 0:
    subprocess.run(["umount", folder], check=False)
    pytest.skip(f"running as root and a read-only remount is not permitted: {ro.stderr.strip()}")
  return lambda: subprocess.run(["umount", folder], check=False)


def test_a_read_only_results_folder_is_refused_before_evaluating(parent, tmp_path):
  run = copy_of(parent, tmp_path)
  undo = _read_only_mount(f"{run}/eval")
  try:
    with no_compilation(), pytest.raises(ConfigError, match=r"the results folder .*/eval is not "
                                         r"writable") as e:
      eval_run.evaluate(run, length_multipliers=["1"])
  finally:
    undo()
  assert "\n" not in str(e.value)


def test_scored_text_says_when_the_lengths_score_other_text():
  same = perplexity_suite.scored_text([100, 40], [16, 32], protocol="non_overlapping", stride=0,
                                      max_tokens_per_length=64)
  assert same == {"same_text": True, "common_tokens": 64}
  other = perplexity_suite.scored_text([100, 40], [16, 64], protocol="non_overlapping",
                                       stride=0, max_tokens_per_length=64)
  assert other == {"same_text": False, "common_tokens": 32}  # the 40-token document drops out
  note = perplexity_suite.text_note({**other, "max_tokens_per_length": 64, "rows": [
      {"length": 16, "tokens": 64, "nll": 1.0}, {"length": 64, "tokens": 64, "nll": 1.0}]})
  assert note.startswith("note: the lengths do not score the same text")


@pytest.mark.parametrize("args,message", [
    (["stray"], r"^error: unexpected arguments \['stray'\]; give every setting as a flag"),
    (["--step=3"], r"^error: --step=3: --workdir=.* has no such checkpoint; available steps: "
                   r"\[2, 4\]$"),
])
def test_eval_cli_mistakes_give_one_line(parent, args, message):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  proc = forked.run(["-m", "eval.run", f"--workdir={parent}", *args], cwd=ROOT, env=env,
                    timeout=120)
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
  assert re.match(message, proc.stderr.strip()), proc.stderr


def test_eval_step_tags_the_files_so_several_checkpoints_results_sit_side_by_side(parent,
                                                                                 tmp_path):
  """eval.step = 2 evaluates checkpoint 2 into `*_step2.json` (step_tag 2), beside the final
  checkpoint's untagged results (nothing moved to earlier/); the launcher's completeness check
  finds both; --step naming another checkpoint, and train.py, refuse it; a study point naming a
  checkpoint the run will not keep is refused before launch."""
  from sweeps import workdirs
  from sweeps.overrides import StudyError
  from sweeps.result_keys import make_key
  from sweeps.run_plan import check_kept_step
  from configs.validate import preflight
  run = copy_of(parent, tmp_path)
  config = load_run_config(run)
  config.eval.step = 2
  out = eval_run.evaluate(run, config=config)
  assert list(out) == ["ppl_vs_length_step2"]
  tagged = json.load(open(f"{run}/eval/ppl_vs_length_step2.json"))
  assert (tagged["step"], tagged["step_tag"]) == (2, 2)
  assert json.load(open(f"{run}/eval/loss_by_position_step2.json"))["step_tag"] == 2
  final = json.load(open(f"{run}/eval/ppl_vs_length.json"))
  assert final["step"] == 4 and "step_tag" not in final and not os.path.exists(f"{run}/eval/earlier")
  assert tagged["rows"][0]["nll"] != final["rows"][0]["nll"]  # another checkpoint's parameters
  present = workdirs.present_results(run, 4)
  for step in (None, 2):
    assert make_key("ppl_vs_length", "none", 1.0, "non_overlapping", 0, step) in present
  assert make_key("ppl_vs_length", "none", 1.0, None, None, 2).describe() == (
      "ppl_vs_length (extension none, protocol non_overlapping, checkpoint 2)")
  # Collected: the tagged rows carry step_tag and split; the summary is the final checkpoint's.
  from sweeps import collect
  frame = collect.collect(str(tmp_path))
  ppl = frame[frame["suite"] == "ppl_vs_length"]
  assert sorted(ppl["step"]) == [2, 4] and ppl.set_index("step")["step_tag"].fillna(-1).to_dict(
      ) == {2: 2, 4: -1} and ppl.set_index("step").loc[2, "split"] == "validation"
  summary = collect.summarize(frame)
  assert summary["ppl_1x_mean"].tolist() == [final["rows"][0]["ppl"]]
  with no_compilation(), pytest.raises(ConfigError, match=r"^--step=4 and eval.step=2 name "
                                       "different checkpoints; give one$"):
    eval_run.evaluate(run, step=4, config=config)
  with pytest.raises(ConfigError, match=r"^eval.step=2: train.py evaluates its final checkpoint"):
    preflight(config, purpose="train")
  plan = load_run_config(run)
  plan.train.num_steps, plan.train.checkpoint_every_steps, plan.train.max_to_keep = 720, 45, 2
  for step, message in ((50, r"eval.step=50 is not a checkpoint of the run \(steps 45, 90, ..."),
                        (900, r"eval.step=900 is not a checkpoint"),
                        (630, r"eval.step=630 is deleted .* keeps steps 675..720\); set "
                              r"train.max_to_keep >= 3 in the study's common fields$")):
    plan.eval.step = step
    with pytest.raises(StudyError, match=message):
      check_kept_step("r", plan)
  plan.eval.step, plan.train.max_to_keep = 45, 16
  check_kept_step("r", plan)


def test_randomized_positions_at_evaluation_average_draws_of_training_positions(parent, tmp_path):
  """eval.extension=randomized_positions (Ruoss et al., arXiv 2305.16843): perplexity from
  positions drawn as in training (sorted, distinct, from [0, 4 x train_len) here), the NLL
  averaged over draws, written beside the true-position result; the same draws every time; by
  hand for one length from the draws themselves; lengths above the range skipped."""
  from data.position_samplers import RandomizedPositions
  from eval import perplexity
  run = copy_of(parent, tmp_path)
  config = load_run_config(run)
  config.eval.extension = "randomized_positions"
  config.model.position.randomized_draws = 2
  config.eval.length_multipliers = (1.0, 8.0)  # 32 and 256 > 4 x 32 = 128: skipped
  out = eval_run.evaluate(run, config=config)
  assert list(out) == ["ppl_vs_length_randomized_positions_randomized_draws2"]  # a changed param
  result = out["ppl_vs_length_randomized_positions_randomized_draws2"]
  assert result["randomized_positions"] == {"draws": 2, "max_position": 128, "seed": 0}
  assert result["extension_params"] == {"randomized_draws": 2}
  row, beyond = result["rows"]
  assert beyond["nll"] is None and "L <= 128" in beyond["skipped"]
  true = json.load(open(f"{run}/eval/ppl_vs_length.json"))["rows"][0]
  assert row["nll"] != true["nll"] and row["tokens"] == true["tokens"]
  again = eval_run.evaluate(run, config=config)[
      "ppl_vs_length_randomized_positions_randomized_draws2"]
  assert again["rows"][0]["nll"] == row["nll"]
  # By hand: the same windows and draws, each scored with true-position machinery.
  from configs.stored import load_run_config as load
  from data.inputs import load_splits
  from models import sharding
  from models.spec import model_spec
  from runs.checkpoint import restore_params
  from data.tokenizers import get_tokenizer
  c = load(run)
  mesh = sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = model_spec(c, mesh)
  params, _ = restore_params(run, c, spec, None)
  docs = load_splits(c)[c.eval.split]
  tok = get_tokenizer(c.data.tokenizer)
  windows = perplexity.evaluation_windows(
      docs, tok, 32, protocol="non_overlapping", stride=0,
      max_tokens_per_doc=perplexity.tokens_per_document(c.eval.max_tokens_per_length, len(docs)))
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  sampler = RandomizedPositions(max_position=128, seed=0)
  sums = []
  for d in range(2):
    rng = sampler.rng(32, d)
    pos = np.stack([sampler.positions(r, rng) for r in windows["segment_ids"]])
    assert (np.diff(pos, axis=1) > 0).all() and pos.max() < 128
    s = perplexity.score_windows_by_position(nll_fn, params, dict(windows, positions=pos),
                                             batch_size=8, mesh=mesh)
    sums.append(s.nll_sum / s.tokens)
  assert row["nll"] == pytest.approx(np.mean(sums), rel=1e-5)
