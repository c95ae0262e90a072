"""Sweeps: points and run names, overrides and their flags, planning, the launcher end to end
(run, resume, a failing run), the tpu/slurm dry runs, and the collected table."""

import concurrent.futures
import dataclasses
import glob
import itertools
import json
import os
import re
import shutil
import sys

import pandas as pd
import pytest

import forked

from conftest import FAST_COMPILE, tiny_config, write_config_file
from configs import base
from configs.validate import ConfigError
from sweeps import collect, overrides, run_names, run_plan, study as study_lib
from sweeps import launch_exec, launch_local, launch_plan, launch_tpu
from sweeps.overrides import StudyError
from sweeps.study import Study, cross, product, zip_
from runs import checkpoint as run_ckpt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The launcher's children must see one CPU device (the tests' XLA_FLAGS ask for 8).
ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu",
                                                                    "XLA_FLAGS": FAST_COMPILE}


def launch_cli(*args, env=None, timeout=600):
  """`python -m sweeps.launch <args>` from the repository root; returns the CompletedProcess."""
  return forked.run(["-m", "sweeps.launch", *args], cwd=ROOT, env=env or ENV, timeout=timeout)


# ---------------------------------------------------------------------------- points and names


def test_product_zip_cross_build_points():
  points = product(**{"model.position.kind": ["rope", "alibi"]}, seed=[0, 1])
  assert points == [{"model.position.kind": "rope", "seed": 0},
                    {"model.position.kind": "rope", "seed": 1},
                    {"model.position.kind": "alibi", "seed": 0},
                    {"model.position.kind": "alibi", "seed": 1}]
  seeds = zip_(seed=[0, 1], **{"data.shuffle_seed": [5, 6]})
  assert seeds == [{"seed": 0, "data.shuffle_seed": 5}, {"seed": 1, "data.shuffle_seed": 6}]
  assert len(cross(seeds, product(**{"model.position.kind": ["rope", "alibi", "t5"]}))) == 6
  with pytest.raises(StudyError, match="equal lengths"):
    zip_(seed=[0, 1], **{"data.shuffle_seed": [0]})
  with pytest.raises(StudyError, match="non-empty list"):
    product(seed=3)
  with pytest.raises(StudyError, match=r"\['seed'\] are set by two"):
    cross([{"seed": 0}], [{"seed": 1}])


def test_run_names_are_short_stable_safe_and_unique():
  shorts = run_names.short_names(base.get_config(), study_lib.DEFAULT_ALIASES)
  assert shorts["model.position.kind"] == "kind"
  assert shorts["data.train_len"] == "train_len"
  assert shorts["seed"] == "seed"  # also the end of data.passkey.seed etc., but a whole path
  assert shorts["data.passkey.seed"] == "data.passkey.seed"  # eval.passkey.seed exists too
  assert shorts["data.position_sampler.kind"] == "position_sampler.kind"
  name = run_names.run_name({"seed": 1, "model.position.kind": "rope", "data.train_len": 256,
                             "eval.length_multipliers": (0.5, 1.0), "data.text_glob": "a/b*.txt",
                             "eval.extension": "pi,yarn", "model.position.clamp": True},
                            shorts)
  assert name == ("clamp=True,extension=pi+yarn,kind=rope,length_multipliers=0.5-1,seed=1,"
                  "text_glob=a_b_.txt,train_len=256")
  long = run_names.run_name({"data.text_glob": "x" * 300}, shorts)
  assert len(long) == run_names.NAME_MAX and long != run_names.run_name(
      {"data.text_glob": "x" * 299}, shorts)
  assert run_names.run_name({}, shorts) == "base"
  clash = Study("clash", "configs/alibi_tiny.py",
                lambda: product(**{"data.text_glob": ["a/b", "a_b"]}))
  with pytest.raises(StudyError, match="the same name 'text_glob=a_b'"):
    clash.runs()


def test_overrides_name_the_bad_field():
  config = base.get_config()
  with pytest.raises(StudyError, match=r"model.position has no field 'knd'; did you mean "
                                       r"'model.position.kind'"):
    overrides.apply_overrides(config, {"model.position.knd": "rope"})
  with pytest.raises(StudyError, match=r"model.num_layers='4': the field is an int"):
    overrides.apply_overrides(config, {"model.num_layers": "4"})
  with pytest.raises(StudyError, match="names a section"):
    overrides.apply_overrides(config, {"model.position": "rope"})
  with pytest.raises(StudyError, match="a bool"):
    overrides.apply_overrides(config, {"model.position.clamp": 1})
  out = overrides.apply_overrides(config, {"eval.factor": 4, "eval.length_multipliers": [1, 2]})
  assert out.eval.factor == 4.0 and isinstance(out.eval.factor, float)
  assert out.eval.length_multipliers == (1, 2) and config.eval.factor == 1.0  # a copy
  bad = Study("bad", "configs/alibi_tiny.py", lambda: [{"model.positoin.kind": "rope"}])
  with pytest.raises(StudyError, match=r"point 0 .*model has no field 'positoin'; did you mean "
                                       r"'model.position'( or 'model.norm_position')?\?"):
    bad.runs()


def test_commands_round_trip_to_the_same_config(monkeypatch):
  """Every value type, strings with commas, empty strings and tuples included, is written so
  that ml_collections' config_flags give back the exact config (train.py and eval.run)."""
  tricky = {"data.text_glob": "corpus/{a,b}/*.txt", "data.cache_dir": "",
            "model.position.clamp": True, "train.learning_rate": 1e-05,
            "model.position.rope_theta_per_layer": (), "model.position.kind": "rope",
            "train.num_steps": 7}
  common = {"eval.length_multipliers": (0.5,), "eval.passkey.depths": (0.0, 0.5, 1.0)}
  s = Study("rt", "configs/alibi_tiny.py", lambda: [
      tricky, {**tricky, "eval.extension": "pi,yarn", "eval.factor": 4,
               "eval.passkey.depths": (0.25,)}], common=common)
  [run] = s.runs()
  argv = run.train_argv("python", s.config_arg(), "w")
  assert "--config.data.text_glob=corpus/{a,b}/*.txt" in argv
  assert "--config.eval.length_multipliers=(0.5,)" in argv
  parsed = run_plan.parse_flags(argv[2:])
  assert parsed.to_dict() == run.config.to_dict()
  assert parsed.data.cache_dir == "" and parsed.model.position.rope_theta_per_layer == ()
  [command] = run.evals
  parsed = run_plan.parse_flags(run.eval_argv(command, "python", "w")[3:], run.config)
  assert parsed.eval.extension == "pi,yarn" and parsed.eval.factor == 4.0
  assert parsed.eval.passkey.depths == (0.25,)
  run_plan.check_commands([run], s.base_config())  # the launcher's own check: passes
  writer = overrides.flag_value
  monkeypatch.setattr(run_plan, "flag_value",  # a wrong writer of tuples
                      lambda v: "(2.0,)" if isinstance(v, tuple) else writer(v))
  with pytest.raises(StudyError, match=r"length_multipliers=\(2.0,\) parses to \(2.0,\) "
                                       r"\(tuple\), not \(0.5,\)"):
    run_plan.check_commands([run], s.base_config())
  monkeypatch.setattr(run_plan, "flag_value", lambda v: "yes please")
  with pytest.raises(StudyError, match="run '.*': config_flags cannot parse --config.*yes please"):
    run_plan.check_commands([run], s.base_config())


def test_the_budget_study_trains_rope_and_nope_long_on_plain_text():
  from sweeps import budget_cpu
  runs = budget_cpu.STUDY.runs()
  assert [r.name for r in runs] == ["kind=rope,seed=0,shuffle_seed=0",
                                    "kind=none,seed=0,shuffle_seed=0"]
  c = runs[0].config
  assert (c.train.num_steps, c.train.eval_every_steps, c.data.passkey.fraction) == (3600, 150, 0)
  assert [k.suite for k in runs[0].train_results] == ["ppl_vs_length", "loss_by_position"]


def test_points_group_into_runs_and_evaluation_points():
  from sweeps import pe_extrapolation_cpu
  runs = pe_extrapolation_cpu.STUDY.runs()
  assert len(runs) == 18
  assert runs[0].name == "kind=none,seed=0,shuffle_seed=0"
  assert {r.name for r in runs} >= {"kind=rope,seed=1,shuffle_seed=1",
                                    "kind=kerple_log,seed=0,shuffle_seed=0"}
  rope = next(r for r in runs if r.name == "kind=rope,seed=0,shuffle_seed=0")
  alibi = next(r for r in runs if r.name == "kind=alibi,seed=0,shuffle_seed=0")
  assert "--config.eval.extension" not in " ".join(alibi.train_argv("p", "c", "w"))
  assert alibi.config.train.num_steps == 600
  # train.py gives non-overlapping perplexity and passkey; eval.run the sliding pass.
  assert [k.suite for k in alibi.train_results] == ["ppl_vs_length", "loss_by_position",
                                                    "passkey"]
  sliding, attention = alibi.evals
  assert dict(sliding.overrides)["eval.protocol"] == "sliding"
  assert dict(sliding.overrides)["eval.suites"] == "ppl_vs_length,loss_by_position"
  assert dict(attention.overrides)["eval.suites"] == "attention"
  # train.py 3, sliding 2, attention 1, {pi, yarn} x {4, 16} x (ppl, loss by position, passkey)
  assert len(rope.evals) == 4 and len(rope.results) == 3 + 2 + 1 + 2 * 2 * 3
  # Two evaluation points asking for one result with different settings are refused.
  conflict = Study("c", "configs/alibi_tiny.py", lambda: [
      {"seed": 0}, {"seed": 0, "eval.max_tokens_per_length": 100}])
  with pytest.raises(StudyError, match="ppl_vs_length .* different eval settings"):
    conflict.runs()


def test_bad_runs_are_refused_before_launching(tmp_path):
  bad_kind = Study("b", "configs/alibi_tiny.py", lambda: [{"model.position.kind": "rotary"}])
  with pytest.raises(ConfigError, match="run 'kind=rotary': model.position.kind='rotary'"):
    launch_plan.plan(bad_kind, str(tmp_path), num_devices=1, read_state=False)
  bad_ext = Study("b", "configs/alibi_tiny.py", lambda: [{"eval.extension": "yarn"}])
  with pytest.raises(ConfigError, match="eval.extension='yarn' applies to"):
    launch_plan.plan(bad_ext, str(tmp_path), num_devices=1, read_state=False)


# ---------------------------------------------------------------------------- dry runs


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
  """The three backends' dry runs of the CPU study, run side by side."""
  root = str(tmp_path_factory.mktemp("dry"))
  args = {
      "local": ["--backend=local", f"--root={root}"],
      "tpu": ["--backend=tpu", "--root=/mnt/pe-bucket/sweeps", "--tpu_bucket=gs://pe-bucket",
              "--tpu_name=pe-v4", "--tpu_zone=us-central2-b", "--tpu_accelerator_type=v4-32",
              "--tpu_repo=https://example.org/pe-sweeps.git", "--tpu_git_ref=0123abc",
              "--notpu_compile_check"],  # the compile check: tests/test_tpu_preflight.py
      "slurm": ["--backend=slurm", f"--root={root}", "--slurm_nodes=2",
                "--slurm_setup=module load cuda/12.4"]}
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    done = {k: pool.submit(launch_cli, "sweeps/pe_extrapolation_cpu.py", *a, "--dry-run")
            for k, a in args.items()}
    out = {k: f.result() for k, f in done.items()}
  for k, p in out.items():
    assert p.returncode == 0, (k, p.stderr[-2000:])
  return root, {k: p.stdout for k, p in out.items()}


def test_local_dry_run_lists_every_run(dry_runs):
  root, out = dry_runs
  lines = out["local"].splitlines()
  assert lines[0].startswith("# study pe_extrapolation_cpu: 18 runs, 18 to run")
  assert sum(l.startswith("# run ") for l in lines) == 18
  train = [l for l in lines if " train.py " in l]
  assert len(train) == 18 and all("--config=configs/passkey_tiny.py" in l for l in train)
  rope = f"--workdir={root}/pe_extrapolation_cpu/kind=rope,seed=1,shuffle_seed=1"
  assert any(rope in l and "--config.model.position.kind=rope" in l for l in train)
  assert sum(" -m eval.run " in l for l in lines) == 18 + 18 + 2 * 2  # sliding, attention, rope
  assert not os.path.exists(os.path.join(root, "pe_extrapolation_cpu"))  # nothing written


def test_tpu_dry_run_has_worker_flag_install_run_and_workdir(dry_runs):
  _, out = dry_runs
  lines = out["tpu"].splitlines()
  assert any("gcloud compute tpus tpu-vm describe pe-v4 --zone=us-central2-b" in l
             and "|| gcloud compute tpus tpu-vm create pe-v4" in l
             and "--accelerator-type=v4-32" in l for l in lines)
  assert "gs://pe-bucket/sweeps not read in a dry run" in lines[0]
  install = [l for l in lines if "pip install" in l]
  assert len(install) == 1 and "--worker=all" in install[0]
  # gcsfuse lets Orbax rename a finished checkpoint's folder on a flat bucket
  assert "gcsfuse --implicit-dirs --rename-dir-limit=200000 pe-bucket /mnt/pe-bucket" in install[0]
  assert "command -v gcsfuse >/dev/null || {" in install[0]  # installed when the image lacks it
  assert "git clone --quiet https://example.org/pe-sweeps.git pe-sweeps" in install[0]
  assert "remote set-url origin https://example.org/pe-sweeps.git" in install[0]
  assert "checkout --quiet --detach 0123abc" in install[0]
  # TPU VM images ship Python 3.10; the code needs 3.11 (pyproject.toml): a uv venv
  assert "uv\" venv --quiet --python 3.11 .venv" in install[0]
  assert "pip install --quiet --python .venv/bin/python -e '\"'\"'.[tpu]'\"'\"'" in install[0]
  train = [l for l in lines if "train.py" in l]
  assert len(train) == 18 and all(l.startswith("gcloud compute tpus tpu-vm ssh pe-v4 ")
                                  and "--worker=all" in l
                                  and "cd pe-sweeps && .venv/bin/python train.py" in l
                                  for l in train)
  evals = [l for l in lines if " -m eval.run " in l]
  assert len(evals) == 18 + 18 + 2 * 2 and all("--worker=all" in l for l in evals)
  assert any("--workdir=/mnt/pe-bucket/sweeps/pe_extrapolation_cpu/kind=alibi,seed=0,"
             "shuffle_seed=0 " in l for l in train)


def test_slurm_dry_run_has_srun_install_run_and_workdir(dry_runs):
  root, out = dry_runs
  scripts = out["slurm"].split("#!/bin/bash")[1:]
  assert len(scripts) == 18 + 1  # a script per run, then the job array over them
  script = next(s for s in scripts if "--job-name=pe_extrapolation_cpu/kind=xpos,seed=1" in s)
  workdir = f"{root}/pe_extrapolation_cpu/kind=xpos,seed=1,shuffle_seed=1"
  assert "#SBATCH --nodes=2" in script and f"#SBATCH --output={workdir}/launch.log" in script
  assert "module load cuda/12.4" in script
  assert "pip install --quiet -e" in script and "flock" in script
  install = next(l for l in script.splitlines() if l.startswith("flock "))
  assert "sys.version_info < (3, 11)" in install  # the nodes' python3 is checked
  assert "/.venv/.installed -nt " in install  # pip runs again only when pyproject.toml changed
  srun = [l for l in script.splitlines() if l.startswith("run_step ")
          and " srun --nodes=2 --ntasks-per-node=1 " in l]
  assert len(srun) == 3 and " train.py --config=configs/passkey_tiny.py" in srun[0]
  assert f"--workdir={workdir} " in srun[0] and " -m eval.run " in srun[1]
  array = scripts[-1].splitlines()
  assert "#SBATCH --array=0-17" in array and "#SBATCH --nodes=2" in array
  assert f"  {workdir}  # 17" in array  # task 17 runs that run's script
  assert array[-1] == f"sbatch {root}/pe_extrapolation_cpu/slurm_array.sbatch"
  assert out["slurm"].count("\nsbatch ") == 1  # one submission


def test_launcher_flags_are_checked_before_anything_runs(tmp_path):
  assert [launch_tpu.tpu_devices(t) for t in ("v2-8", "v3-32", "v4-8", "v4-64", "v5p-128",
                                              "v5litepod-16", "v6e-8", "v7x-8", "v4")] == [
      8, 32, 4, 32, 64, 16, 8, None, None]
  assert launch_tpu.is_remote_git_url("https://github.com/o/r.git")
  assert launch_tpu.is_remote_git_url("git@github.com:o/r.git")
  assert not launch_tpu.is_remote_git_url("/home/me/pe-sweeps")
  assert not launch_tpu.is_remote_git_url("file:///home/me/pe-sweeps")
  study, root = "sweeps/pe_extrapolation_cpu.py", f"--root={tmp_path}"
  tpu = ["--backend=tpu", "--root=/mnt/b/sweeps", "--tpu_bucket=b", "--tpu_name=t",
         "--tpu_zone=z", "--tpu_git_ref=0123abc", "--dry-run"]
  cases = {
      (): "usage: python -m sweeps.launch <study file or module>",
      (study, root, "--bogus"): "Unknown command line flag 'bogus'",
      (study, root, "--backend=k8s"): "--backend=k8s: value should be one of <local|tpu|slurm>",
      (study, root, "--num_devices=-3", "--dry-run"): "--num_devices must be >= 1",
      (study, root, "--backend=slurm", "--slurm_time=banana", "--dry-run"):
          "--slurm_time='banana' is not a SLURM time limit",
      (study, *tpu, "--tpu_repo=/home/me/pe-sweeps"): "is a local path the TPU workers cannot",
      # a v5p-64 slice has 32 devices: the study's batch of 16 cannot be split over them
      (study, *tpu, "--tpu_repo=https://example.org/r.git", "--tpu_accelerator_type=v5p-64"):
          "mesh.data*mesh.fsdp=32",
      # 4 nodes x 8 GPUs = 32 devices likewise
      (study, root, "--backend=slurm", "--slurm_nodes=4", "--slurm_gpus_per_node=8",
       "--dry-run"): "mesh.data*mesh.fsdp=32"}
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    done = {args: pool.submit(launch_cli, *args) for args in cases}
  for args, match in cases.items():
    result = done[args].result()
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and match in errors[0], (args, result.stderr)
    assert "Traceback" not in result.stderr and not result.stdout.strip(), args


# ---------------------------------------------------------------------------- end to end


def write_mini_study(folder, text_glob: str, *, more: bool) -> str:
  """A study of the tests' tiny model (conftest.tiny_config, 4 steps, lengths 1x and 2x): RoPE
  with seeds 0 and 1. `more` adds an evaluation point, seed 1 with YaRN (x2), and a run whose
  corpus glob matches nothing (train.py fails on it, after the launcher's checks)."""
  tiny = tiny_config(text_glob, "rope")
  tiny.train.write_plots = True
  tiny.train.num_steps = tiny.train.checkpoint_every_steps = 4
  tiny.eval.length_multipliers = (1.0, 2.0)
  tiny.eval.max_tokens_per_length = 256
  config = write_config_file(os.path.join(folder, "tiny_config.py"), tiny)
  extra = ('\n    {"seed": 1, "eval.extension": "yarn", "eval.factor": 2.0},'
           '\n    {"seed": 2, "data.text_glob": "/nonexistent/*.txt"},') if more else ""
  path = os.path.join(folder, f"mini_{'more' if more else 'first'}.py")
  with open(path, "w") as f:
    f.write(f'''from sweeps.study import Study, product

STUDY = Study(name="mini", config={config!r}, points=lambda: product(seed=[0, 1]) + [{extra}
])
''')
  return path


def test_mini_study_runs_resumes_survives_a_failure_and_collects(text_corpus, tmp_path,
                                                                  capsys):
  root = str(tmp_path / "root")
  # Runs share compiled programs through JAX's persistent cache (the same model, other seeds).
  env = ENV | {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  first_study = write_mini_study(str(tmp_path), text_corpus, more=False)
  first = launch_cli(first_study, f"--root={root}", "--num_devices=1", env=env)
  assert first.returncode == 0, first.stdout + first.stderr
  assert "2 runs, 2 to run" in first.stdout and "2 of 2 launched runs succeeded" in first.stdout
  seed0, seed1 = (os.path.join(root, "mini", f"seed={i}") for i in (0, 1))
  for workdir in (seed0, seed1):
    assert run_ckpt.committed_steps(workdir) == [4]
    assert sorted(os.listdir(os.path.join(workdir, "eval"))) == [
        "loss_by_position.json", "loss_by_position.png", "ppl_vs_length.json",
        "ppl_vs_length.png"]

  # Again, with seed 0's workdir deleted, an evaluation point (YaRN) added to seed 1 and a run
  # that fails (its corpus glob matches nothing): seed 0 trains again, seed 1 is only
  # evaluated, and the failure does not stop the others.
  shutil.rmtree(seed0)
  seed1_metrics = os.path.getmtime(os.path.join(seed1, "metrics.jsonl"))
  more_study = write_mini_study(str(tmp_path), text_corpus, more=True)
  second = launch_cli(more_study, f"--root={root}", "--parallel=2", "--num_devices=1", env=env)
  assert second.returncode == 1, second.stdout + second.stderr
  assert "3 runs, 3 to run" in second.stdout
  failed_name = "seed=2,text_glob=_nonexistent__.txt"
  table = second.stdout[re.search(r"^ *run +status", second.stdout, re.M).start():
                        second.stdout.index("FAILED ")]
  assert {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]} == {
      "seed=0": "ok", "seed=1": "ok", failed_name: "failed"}
  assert f"FAILED {failed_name}: train exited 2: " in second.stdout
  with open(os.path.join(root, "mini", failed_name, "launch.log")) as f:
    assert "matches no file" in f.read()
  with open(os.path.join(seed1, "launch.log")) as f:
    log = f.read()
  assert log.count(": train\n") == 1 and log.count(": eval 0\n") == 1  # no retraining
  assert os.path.getmtime(os.path.join(seed1, "metrics.jsonl")) == seed1_metrics
  assert os.path.exists(os.path.join(seed1, "eval", "ppl_vs_length_yarn_x2.json"))

  frame = collect.collect(os.path.join(root, "mini"))
  assert len(frame) == 2 * 2 + 2 * 2 * 2  # runs x suites x lengths x extensions
  counts = frame.groupby(["run", "suite", "extension"]).size().to_dict()
  assert counts == {("seed=0", "ppl_vs_length", "none"): 2,
                    ("seed=0", "loss_by_position", "none"): 2,
                    ("seed=1", "ppl_vs_length", "none"): 2,
                    ("seed=1", "loss_by_position", "none"): 2,
                    ("seed=1", "ppl_vs_length", "yarn"): 2,
                    ("seed=1", "loss_by_position", "yarn"): 2}
  ppl = frame[frame["suite"] == "ppl_vs_length"]
  assert set(ppl["length"]) == {32, 64} and (ppl["ppl"] > 1).all()
  assert set(frame["scheme"]) == {"rope"} and set(frame["seed"]) == {0, 1}
  assert (frame["step"] == 4).all() and (frame["train_len"] == 32).all()
  assert frame["final_val_loss"].notna().all()
  summary = collect.summarize(frame).set_index("extension")
  assert len(summary) == 2 and summary.loc["none", "runs"] == 2 and summary.loc["yarn", "runs"] == 1
  assert summary.loc["none", "ppl_1x_std"] > 0  # two seeds
  assert summary.loc["yarn", "extension_factor"] == 2.0 and summary.loc["yarn", "ppl_1x_mean"] > 1
  assert pd.isna(summary.loc["yarn", "ppl_8x_mean"])  # not evaluated at 8x

  collect.main(["collect", os.path.join(root, "mini")])  # the CLI, in this process
  assert "run(s) of study.json without results yet: " + failed_name in capsys.readouterr().out
  back = pd.read_parquet(os.path.join(root, "mini", "results.parquet"))
  assert len(back) == len(frame) and set(back.columns) == set(frame.columns)
  assert len(pd.read_csv(os.path.join(root, "mini", "results.csv"))) == len(frame)
  assert len(pd.read_csv(os.path.join(root, "mini", "summary.csv"))) == 2


def test_a_field_missing_from_older_runs_does_not_split_their_seeds(tmp_path):
  """Runs trained before a field was added to the config lack it in config.json: it takes its
  configs/base.py default, so the summary still pools every seed of a scheme."""
  from tests.fake_study import GROWTH, write_fake_study
  study = write_fake_study(str(tmp_path), algorithmic=False)
  for scheme in GROWTH:
    path = os.path.join(study, f"kind={scheme},seed=0", "config.json")
    with open(path) as f:
      stored = json.load(f)
    del stored["config"]["eval"]["attention"]
    del stored["config"]["data"]["prefetch_batches"]  # a field added later, at its default
    stored["config"]["train"]["skip_nonfinite_batches"] = None  # likewise, written as null
    with open(path, "w") as f:
      json.dump(stored, f)
  frame = collect.collect(study)
  assert "cfg.eval.attention.windows" not in frame.columns  # absent = the default: no column
  assert "cfg.data.prefetch_batches" not in frame.columns
  assert "cfg.train.skip_nonfinite_batches" in frame.columns  # null is a value, not absence
  summary = collect.summarize(frame)
  assert "cfg.train.skip_nonfinite_batches" in summary.columns
  for scheme in GROWTH:
    path = os.path.join(study, f"kind={scheme},seed=0", "config.json")
    with open(path) as f:
      stored = json.load(f)
    del stored["config"]["train"]["skip_nonfinite_batches"]
    with open(path, "w") as f:
      json.dump(stored, f)
  summary = collect.summarize(collect.collect(study))
  assert not [c for c in summary.columns if c.startswith("cfg.")]
  runs = summary.set_index(["scheme", "extension"])["runs"].to_dict()
  assert runs == {("alibi", "none"): 2, ("none", "none"): 2, ("rope", "none"): 2,
                  ("rope", "yarn"): 2}


def test_collect_leaves_out_unreadable_files_with_a_warning_and_refuses_a_run_folder(tmp_path):
  from tests.fake_study import write_fake_study
  study = write_fake_study(str(tmp_path), algorithmic=False)
  with open(os.path.join(study, "kind=none,seed=1", "config.json"), "w") as f:
    f.write('{"config": ')  # cut by a kill of another tool
  with open(os.path.join(study, "kind=rope,seed=0", "eval", "passkey.json"), "w") as f:
    f.write("[]")  # foreign
  result = forked.run(["-m", "sweeps.collect", study], cwd=ROOT, timeout=600)
  assert result.returncode == 0, result.stderr
  assert ("warning: left out run kind=none,seed=1: its config.json is not readable JSON"
          in result.stderr)
  assert ("warning: left out 1 file(s) of run kind=rope,seed=0 that are not result JSON "
          "(half-written or foreign): passkey.json" in result.stderr)
  frame = pd.read_parquet(os.path.join(study, "results.parquet"))
  assert frame["run"].nunique() == 5
  assert frame[(frame["run"] == "kind=rope,seed=0") & (frame["file"] == "eval/passkey.json")].empty
  for args, message in [([os.path.join(study, "kind=rope,seed=0")], "is a run folder; collect "
                         f"its study folder {study}"), ([], "usage: python -m sweeps.collect")]:
    bad = forked.run(["-m", "sweeps.collect", *args], cwd=ROOT, timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert message in bad.stderr


def test_collect_leaves_out_a_result_with_a_non_number_in_a_number_field(tmp_path):
  """A hand-edited or foreign result (a word where a number is due) is left out with a warning
  naming its file and field; the tables are still written (pyarrow refused the mixed column)."""
  import warnings
  from tests.fake_study import write_fake_study
  study = write_fake_study(str(tmp_path), algorithmic=False)
  for run, name, change in [("kind=rope,seed=0", "ppl_vs_length.json", ("rows", 2, "ppl", "n/a")),
                            ("kind=alibi,seed=1", "passkey.json", ("step", "final")),
                            ("kind=none,seed=0", "loss_by_position.json",
                             ("rows", 0, "tokens", [1, 2]))]:
    path = os.path.join(study, run, "eval", name)
    with open(path) as f:
      result = json.load(f)
    *where, field, value = change
    node = result
    for key in where:
      node = node[key]
    node[field] = value
    with open(path, "w") as f:
      json.dump(result, f)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    frame = collect.collect(study)
  said = sorted(str(w.message) for w in caught)
  assert said == [
      "left out kind=alibi,seed=1/eval/passkey.json: field 'step' holds 'final', not a number",
      "left out kind=none,seed=0/eval/loss_by_position.json: field 'tokens' holds [1, 2], not a "
      "number",
      "left out kind=rope,seed=0/eval/ppl_vs_length.json: field 'ppl' holds 'n/a', not a number"]
  left = set(zip(frame["run"], frame["file"]))
  assert ("kind=rope,seed=0", "eval/ppl_vs_length.json") not in left
  assert ("kind=rope,seed=1", "eval/ppl_vs_length.json") in left
  collect.write_frame(frame, str(tmp_path / "results.parquet"))
  assert len(pd.read_parquet(tmp_path / "results.parquet")) == len(frame)
  assert not collect.summarize(frame).empty


# ---------------------------------------------------------------------------- warm-started children


def test_run_all_starts_a_child_after_its_parent_and_not_after_a_failed_one():
  import threading
  import time
  order, lock = [], threading.Lock()

  def job(name, status, seconds):
    def fn():
      with lock:
        order.append(("start", name))
      time.sleep(seconds)
      with lock:
        order.append(("end", name))
      return launch_exec.Outcome(name, status, seconds, "", "")
    return fn

  jobs = [("p1", job("p1", "ok", 0.3)), ("p2", job("p2", "failed", 0.05)),
          ("c1", job("c1", "ok", 0.0)), ("c2", job("c2", "ok", 0.0)),
          ("free", job("free", "ok", 0.0))]
  outcomes = launch_exec.run_all(jobs, 2, "test", after={"c1": "p1", "c2": "p2", "free": "done_before"})
  status = {o.run: o.status for o in outcomes}
  assert status == {"p1": "ok", "p2": "failed", "c1": "ok", "c2": "failed", "free": "ok"}
  assert [o.detail for o in outcomes if o.run == "c2"] == ["not run: its parent p2 failed"]
  assert ("start", "c2") not in order
  assert order.index(("start", "c1")) > order.index(("end", "p1"))
  # While p1 runs, the slot p2 freed goes to "free" (its prerequisite is not a job here).
  assert order.index(("start", "free")) < order.index(("end", "p1"))


def test_recipe_arguments_accept_a_parent_path_with_commas(tmp_path):
  from configs import extension_recipes
  parent = tmp_path / "kind=rope,seed=0"
  parent.mkdir()
  assert extension_recipes.parse_arg(str(parent), "f") == (str(parent), 4.0)
  assert extension_recipes.parse_arg(f"{parent},8", "f") == (str(parent), 8.0)
  with pytest.raises(ConfigError, match="must be a number > 1"):
    extension_recipes.parse_arg(f"{parent},x", "f")


def test_context_extension_study_lists_every_child_with_its_parent(tmp_path):
  # The command as written: the local backend's root defaults to workdirs/sweeps.
  default = launch_cli("sweeps/context_extension_cpu.py", "--backend=local", "--dry-run",
                       "--num_devices=1")
  assert default.returncode == 0, default.stderr[-3000:]
  assert f"root {os.path.join(ROOT, 'workdirs', 'sweeps')}\n" in default.stdout
  # The plan of a root with nothing in it (workdirs/sweeps may hold this machine's runs).
  root = str(tmp_path / "sweeps")
  dry = launch_cli("sweeps/context_extension_cpu.py", "--backend=local", "--dry-run",
                   "--num_devices=1", f"--root={root}")
  assert dry.returncode == 0, dry.stderr[-3000:]
  runs = [line for line in dry.stdout.splitlines() if line.startswith("# run ")]
  parents = [r for r in runs if "warm start" not in r]
  children = [r for r in runs if "warm start" in r]
  # RoPE and ALiBi parents (2 seeds); the retrieval track's RoPE parents and ALiBi parents of
  # 1,500 and 3,000 steps (3 seeds)
  assert len(parents) == 2 * 2 + 3 * 3 and len(children) == 2 * 8 + 3 * 3, runs
  for seed in (0, 1, 2):
    for kind, steps in (("rope", 1500), ("alibi", 1500), ("alibi", 3000)):
      name = (f"kind={kind},num_steps={steps},passkey.fraction=0.75,passkey.preamble=False,"
              f"seed={seed},shuffle_seed={seed}")
      assert f"# run {name} (to train)" in runs, (kind, steps, seed)
      # the parents the retrieval table shows are scored as trained and with Self-Extend x8
      workdir = f"--workdir={root}/context_extension_cpu/{name} "
      self_extend = [l for l in dry.stdout.splitlines()
                     if workdir in l and "--config.eval.extension=self_extend" in l]
      assert len(self_extend) == (0 if (kind, steps) == ("alibi", 1500) else 1), name
  for method in ("extrapolation", "pi", "ntk", "yarn", "abf", "pose", "longrope", "drope"):
    for seed in (0, 1):
      name = f"extend_{method}_4--kind=rope,seed={seed},shuffle_seed={seed}"
      assert (f"# run {name} (to train); warm start from kind=rope,seed={seed},"
              f"shuffle_seed={seed}") in runs
      assert (f"--config=configs/extend_{method}.py:{root}/context_extension_cpu/"
              f"kind=rope,seed={seed},shuffle_seed={seed},4 ") in dry.stdout
  # LongRoPE's factor search runs on the parent before its child trains.
  lines = dry.stdout.splitlines()
  search = next(i for i, l in enumerate(lines) if "sweeps.longrope_search" in l)
  assert lines[search].startswith("# before training: ")
  assert f"--workdir={root}/context_extension_cpu/kind=rope,seed=0,shuffle_seed=0" in lines[search]
  assert "extend_longrope.py" in lines[search + 1]
  slurm = launch_cli("sweeps/context_extension_cpu.py", "--backend=slurm", "--dry-run")
  assert slurm.returncode != 0 and "--root is required with --backend=slurm" in slurm.stderr


def test_a_parent_and_its_child_run_in_order_and_collect_with_the_parent_column(text_corpus,
                                                                                 tmp_path):
  tiny = tiny_config(text_corpus, "rope")
  tiny.train.num_steps = tiny.train.checkpoint_every_steps = 4
  tiny.train.warmup_steps = 1
  tiny.eval.length_multipliers = (1.0, 2.0)
  tiny.eval.max_tokens_per_length = 256
  config = write_config_file(str(tmp_path / "tiny_config.py"), tiny)
  path = tmp_path / "family.py"
  path.write_text(f'''from sweeps.study import Study
PARENT = {{"seed": 0}}
STUDY = Study(name="family", config={config!r}, points=lambda: [
    PARENT, {{"@parent": PARENT, "@config": "configs/extend_pi.py:{{parent}},2",
             "train.num_steps": 3, "train.warmup_steps": 1}}])
''')
  root = str(tmp_path / "root")
  env = ENV | {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  done = launch_cli(str(path), f"--root={root}", "--num_devices=1", "--parallel=2", env=env)
  assert done.returncode == 0, done.stdout + done.stderr
  assert "2 of 2 launched runs succeeded" in done.stdout
  child = os.path.join(root, "family", "extend_pi_2,num_steps=3,warmup_steps=1--seed=0")
  assert run_ckpt.committed_steps(child) == [3]
  with open(os.path.join(child, "config.json")) as f:
    stored = json.load(f)
  assert stored["config"]["train"]["init_from"] == os.path.join(root, "family", "seed=0")
  assert stored["config"]["model"]["position"]["rope_scaling"] == "pi"
  assert stored["config"]["data"]["train_len"] == 2 * tiny.data.train_len
  frame = collect.collect(os.path.join(root, "family"))
  parents = frame.groupby("run")["parent"].first().to_dict()
  assert parents == {"seed=0": "", os.path.basename(child): "seed=0@4"}
  # The child is evaluated at the recipe's lengths, 0.5 L .. 16 L of the parent's L.
  from configs.extension_recipes import EVAL_MULTIPLIERS
  ppl = frame[frame["suite"] == "ppl_vs_length"]
  L = tiny.data.train_len
  assert set(ppl[ppl["run"] == "seed=0"]["length"]) == {L, 2 * L}
  assert set(ppl[ppl["run"] != "seed=0"]["length"]) == {int(m * L) for m in EVAL_MULTIPLIERS}
  again = launch_cli(str(path), f"--root={root}", "--num_devices=1", env=env)
  assert again.returncode == 0 and "2 runs, 0 to run" in again.stdout, again.stdout


def test_bad_children_are_refused_with_the_point_named():
  parent = {"model.position.kind": "rope"}
  def study(*children):
    return Study(name="kids", config="configs/alibi_tiny.py",
                 points=lambda: [parent, *children])
  cases = [
      ({"@parent": {"model.position.kind": "alibi"}, "@config": "configs/extend_pi.py:{parent}"},
       "is not a run of the study"),
      ({"@parent": parent}, "a child point needs '@parent'"),
      ({"@parent": parent, "@config": "configs/extend_pi.py:{parent}", "@after": 1},
       "unknown keys ['@after']"),
      ({"@parent": parent, "@config": "configs/extend_pi.py"}, "must be a config file with {parent}"),
      ({"@parent": parent, "@config": "configs/extend_pi.py:{parent},0.5"},
       "the factor after ',' must be a number > 1"),
      ({"@parent": parent, "@config": "configs/extend_pi.py:{parent}", "@before": "ls"},
       "'@before' must be a list of commands"),
  ]
  for point, message in cases:
    with pytest.raises(StudyError, match="point 1") as e:
      study(point).runs()
    assert message in str(e.value), str(e.value)
  # An ALiBi parent is refused by the recipe itself (RoPE parents only).
  with pytest.raises(StudyError, match="the parent must be a RoPE run"):
    Study(name="kids", config="configs/alibi_tiny.py", points=lambda: [
        {"seed": 0}, {"@parent": {"seed": 0}, "@config": "configs/extend_pi.py:{parent}"}]).runs()


def test_children_follow_their_parent_in_the_launch_order():
  def planned(name, parent=None):
    run = run_plan.Run(name, {}, None, (), (), (), parent=parent)
    return launch_plan.Planned(run, f"/r/s/{name}", f"/r/s/{name}", None)
  runs = [planned("a"), planned("b"), planned("c"), planned("a1", "a"), planned("b1", "b"),
          planned("a2", "a"), planned("x1", "done_earlier")]
  assert [p.run.name for p in launch_local.children_first(runs)] == ["a", "a1", "a2", "b", "b1", "c",
                                                                     "x1"]


def test_context_extension_figure_pairs_each_method_with_its_eval_only_control():
  from sweeps import extension_figures, figure_style
  rows = []
  def add(run, scheme, parent="", method="", ext="none", factor=1.0, train_len=32, growth=1.0,
          seed=0):
    for length in (16, 32, 64, 128):
      rows.append({"run": run, "scheme": scheme, "seed": seed, "parent": parent,
                   "method": method, "suite": "ppl_vs_length", "extension": ext,
                   "extension_factor": factor, "protocol": "non_overlapping",
                   "train_len": train_len, "length": length,
                   "ppl": 4.0 * growth ** max(0, length // 32 - 1) + 0.1 * seed})
  for seed in (0, 1):
    add(f"p{seed}", "rope", growth=3.0, seed=seed)
    add(f"p{seed}", "rope", ext="pi", factor=4.0, growth=1.5, seed=seed)
    add(f"pi{seed}", "rope", parent=f"p{seed}@4", method="pi", train_len=128, growth=1.1,
        seed=seed)
    add(f"drope{seed}", "none", parent=f"p{seed}@4", method="drope", growth=1.3, seed=seed)
  add("alibi", "alibi", growth=1.0)
  fig = extension_figures.fig_context_extension(pd.DataFrame(rows))
  ax = fig.axes[0]
  lines = {l.get_label(): l for l in ax.get_lines()}
  assert {"pi (fine-tuned)", "drope (fine-tuned)", "rope parent (as trained)",
          "pi x4 (eval-only)", "alibi (from scratch, reference)", "train_len=32",
          "fine-tuning length=128"} <= set(lines)
  assert lines["pi (fine-tuned)"].get_color() == lines["pi x4 (eval-only)"].get_color()
  assert lines["pi (fine-tuned)"].get_linestyle() == "-"
  assert lines["pi x4 (eval-only)"].get_linestyle() == "--"
  assert lines["drope (fine-tuned)"].get_color() != lines["pi (fine-tuned)"].get_color()
  # The mean over the parents' seeds (their ppl differ by 0.1): 4.05 at 32 tokens.
  x, y = lines["pi (fine-tuned)"].get_data()
  assert list(x) == [16, 32, 64, 128]
  assert y[1] == pytest.approx(4.05) and y[3] == pytest.approx(4.0 * 1.1 ** 3 + 0.05)
  assert extension_figures.fig_context_extension(pd.DataFrame(rows).assign(method="")) is None
  # The fine-tuning curves: one line per recipe, the mean of its two children per step.
  curves = pd.DataFrame([{"run": f"{m}{seed}", "step": step, "loss": 2.0 - 0.1 * step + seed}
                         for m in ("pi", "drope") for seed in (0, 1) for step in (1, 2, 3)]
                        + [{"run": "p0", "step": 1, "loss": 3.0}])
  fig = extension_figures.fig_fine_tuning_curves(curves, pd.DataFrame(rows))
  lines = {l.get_label(): l for l in fig.axes[0].get_lines()}
  assert set(lines) == {"pi", "drope"}
  assert list(lines["pi"].get_data()[1]) == pytest.approx([2.4, 2.3, 2.2])
  assert lines["pi"].get_color() == figure_style.METHOD_COLOURS["pi"]
  # Runs of another training mix (a passkey share) get their own panel, never the same mean.
  mixed = pd.DataFrame(rows).assign(train_passkey_fraction=0.0)
  other = mixed[mixed["run"].isin(["p0", "pi0"])].assign(
      run=lambda f: "pk_" + f["run"], parent=lambda f: f["parent"].str.replace("p0@", "pk_p0@"),
      train_passkey_fraction=0.25, ppl=lambda f: f["ppl"] + 10.0)
  fig = extension_figures.fig_context_extension(pd.concat([mixed, other]))
  assert [ax.get_title() for ax in fig.axes[:2]] == ["training mix: text only",
                                                     "training mix: 25% passkey windows"]
  text_only = {l.get_label(): l for l in fig.axes[0].get_lines()}
  assert text_only["pi (fine-tuned)"].get_data()[1][1] == pytest.approx(4.05)  # as before
  passkey = {l.get_label(): l for l in fig.axes[1].get_lines()}
  assert passkey["pi (fine-tuned)"].get_data()[1][1] == pytest.approx(14.0)
  assert "alibi (from scratch, reference)" not in passkey



def test_fine_tuning_budget_figure_pairs_recipes_with_extrapolation_by_seed():
  """fig_fine_tuning_budget on a hand-made table of checkpoints evaluated with eval.step: the
  parents' eval-only results are each recipe's step 0; the bottom panel is pi minus extrapolation
  per seed (differences 1, 2, 3 at every step: mean 2, the t-interval's half-width 2.48)."""
  from sweeps import extension_figures
  rows = []
  for seed in (0, 1, 2):
    for ext, ppl in (("none", 20.0), ("pi", 40.0)):
      rows.append({"run": f"p{seed}", "method": "", "extension": ext, "seed": seed,
                   "suite": "ppl_vs_length", "step_tag": 900, "length": 1024, "ppl": ppl + seed})
    for method, offset in (("extrapolation", 0.0), ("pi", 1.0 + seed)):
      for step in (45, 90):
        rows.append({"run": f"{method}{seed}", "method": method, "extension": "none",
                     "seed": seed, "suite": "ppl_vs_length", "step_tag": step, "length": 1024,
                     "ppl": 10.0 - step / 45 + offset})
  rows.append({"run": "p0", "method": "", "extension": "none", "seed": 0,
               "suite": "ppl_vs_length", "step_tag": None, "length": 1024, "ppl": 99.0})
  # a child of another factor evaluated at one step only: no point of pi's budget curve
  rows.append({"run": "pi_x8", "method": "pi", "extension": "none", "seed": 0,
               "suite": "ppl_vs_length", "step_tag": 90, "length": 1024, "ppl": 77.0})
  frame = pd.DataFrame(rows)
  table = extension_figures.budget_rows(frame)
  assert sorted(table["step"].unique()) == [0, 45, 90] and not {99.0, 77.0} & set(table["ppl"])
  fig = extension_figures.fig_fine_tuning_budget(frame)
  top = {l.get_label(): l for l in fig.axes[0].get_lines()}
  assert list(top["pi"].get_data()[0]) == [0, 45, 90]
  assert list(top["pi"].get_data()[1]) == pytest.approx([41.0, 11.0, 10.0])
  diff = fig.axes[1].get_lines()[0].get_data()
  assert list(diff[1]) == pytest.approx([20.0, 2.0, 2.0])  # step 0: 40+s - (20+s)
  assert "95% t-interval of the mean (n=3 seeds)" in fig._suptitle.get_text()
  assert extension_figures.fig_fine_tuning_budget(frame.drop(columns="step_tag")) is None


def test_points_with_their_own_base_config_train_from_that_file(tmp_path):
  from sweeps import synthetic_tasks_cpu
  runs = synthetic_tasks_cpu.STUDY.runs()
  assert [r.name for r in runs[:4]] == [
      "config=niah_multikey_tiny,kind=none", "config=niah_multikey_tiny,kind=alibi",
      "config=niah_multikey_tiny,kind=rope", "config=task_addition_grid,kind=none"]
  assert len(runs) == 12 and len({r.name for r in runs}) == 12
  by_name = {r.name: r for r in runs}
  mqar = by_name["config=task_mqar,kind=rope"]
  assert mqar.train_argv("py", "configs/unused.py", "w") == [
      "py", "train.py", "--config=configs/task_mqar.py", "--workdir=w",
      "--config.model.position.kind=rope"]
  # Each run's config is its own file's, with the point's fields on top.
  assert (mqar.config.data.task.name, mqar.config.data.train_len) == ("mqar", 35)
  niah = by_name["config=niah_multikey_tiny,kind=alibi"]
  assert niah.config.model.position.kind == "alibi" and niah.config.data.train_len == 512
  assert [k.suite for k in niah.train_results] == ["ppl_vs_length", "loss_by_position",
                                                   "niah_multikey"]
  grid = by_name["config=task_addition_grid,kind=none"]
  assert grid.config.data.task.name == "addition_grid" and grid.base == "configs/task_addition_grid.py"
  assert by_name["config=task_flip_flop,kind=alibi"].config.train.num_steps == 1500
  # Every run passes the pre-flight of train.py, and the manifest names each run's file.
  planned = launch_plan.plan(synthetic_tasks_cpu.STUDY, str(tmp_path), num_devices=1,
                             read_state=False)
  assert launch_plan.manifest(synthetic_tasks_cpu.STUDY, planned)["runs"][-1]["config"] == \
      "configs/task_flip_flop.py"
  # The same fields on two bases are two runs; on one base, one run with two evaluation points.
  two = Study("two", "configs/alibi_tiny.py", lambda: [
      {"seed": 1}, {"@base": "configs/passkey_tiny.py", "seed": 1},
      {"@base": "configs/passkey_tiny.py", "seed": 1, "eval.protocol": "sliding"}]).runs()
  assert [r.name for r in two] == ["seed=1", "config=passkey_tiny,seed=1"]
  assert two[0].base is None and two[0].config.data.passkey.fraction == 0
  assert two[1].config.data.passkey.fraction == 0.75 and len(two[1].eval_points) == 2
  # A child's parent with its own base is found through the same "@base".
  kids = Study("kids", "configs/alibi_tiny.py", lambda: [
      {"@base": "configs/passkey_tiny.py", "seed": 0},
      {"@parent": {"@base": "configs/passkey_tiny.py", "seed": 0},
       "@config": "configs/extend_pi.py:{parent},2"}]).runs()
  assert kids[1].parent == "config=passkey_tiny,seed=0"
  for bad, message in (("configs/nope.py", "'@base' config file 'configs/nope.py' does not exist"),
                       (3, "'@base' must be a config file path")):
    with pytest.raises(StudyError, match="point 0") as e:
      Study("b", "configs/alibi_tiny.py", lambda: [{"@base": bad, "seed": 0}]).runs()
    assert message in str(e.value)


# ---------------------------------------------------------------------------- tune, then compare


def write_tuned_study(folder, text_glob: str) -> str:
  """Two schemes of the tests' tiny model (one seed), with a search stage over two learning
  rates per scheme (2 steps each); the final runs train 3 steps."""
  tiny = tiny_config(text_glob, "rope")
  tiny.train.num_steps = tiny.train.checkpoint_every_steps = 3
  tiny.train.warmup_steps = 1
  tiny.eval.length_multipliers = (1.0,)
  tiny.eval.max_tokens_per_length = 128
  tiny.mesh.data = -1  # every device the run sees
  config = write_config_file(os.path.join(folder, "tiny_config.py"), tiny)
  path = os.path.join(folder, "tuned.py")
  with open(path, "w") as f:
    f.write(f'''from sweeps.study import Search, Study, product

STUDY = Study(name="tuned", config={config!r},
              points=lambda: product(**{{"model.position.kind": ["alibi", "rope"]}},
                                     seed=[0]),
              search=Search(grid={{"train.learning_rate": [1e-4, 3e-2]}},
                            common={{"train.num_steps": 2, "train.checkpoint_every_steps": 2}}))
''')
  return path


def test_a_search_stage_selects_per_scheme_and_the_final_runs_use_it(text_corpus, tmp_path):
  root = str(tmp_path / "root")
  env = ENV | {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  path = write_tuned_study(str(tmp_path), text_corpus)
  dry = launch_cli(path, f"--root={root}", "--num_devices=1", "--dry-run", env=env)
  assert dry.returncode == 0, dry.stderr[-3000:]
  assert "# study search: 4 runs, 4 to run" in dry.stdout
  assert "# final stage of tuned: after the search" in dry.stdout
  assert f"--workdir={root}/tuned/search/kind=rope,learning_rate=0.03 " in dry.stdout
  # Four emulated devices split into two slots of two: each run is a separate process that
  # sees two CPU devices (the launcher's own environment has one), one run per slot at a time.
  done = launch_cli(path, f"--root={root}", "--num_devices=4", "--devices_per_run=2", env=env)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  assert "6 of 6 launched runs succeeded" in done.stdout
  spans = {}  # run -> (slot, start, end) from its launch.log
  for workdir in glob.glob(os.path.join(root, "tuned", "search", "kind=*")) + glob.glob(
      os.path.join(root, "tuned", "kind=*")):
    with open(os.path.join(workdir, "config.json")) as f:
      assert json.load(f)["num_devices"] == 2, workdir
    with open(os.path.join(workdir, "launch.log")) as f:
      log = f.read()
    assert "--distributed=off" in log and "XLA_FLAGS=" in log
    marks = re.findall(r"^=== (\S+) \S+: (?:train|done) on slot (\d) \(devices (\S+)\)", log, re.M)
    assert len(marks) == 2 and marks[0][1:] == marks[1][1:], log[-2000:]
    slot, devices = marks[0][1:]
    assert devices == {"0": "0,1", "1": "2,3"}[slot]
    spans[workdir] = (slot, marks[0][0], marks[1][0])
  assert len(spans) == 6 and {s for s, _, _ in spans.values()} == {"0", "1"}
  for a, b in itertools.combinations(spans.values(), 2):  # one run per slot at a time
    if a[0] == b[0]:
      assert a[2] <= b[1] or b[2] <= a[1], (a, b)
  firsts = [min((s for s in spans.values() if s[0] == slot), key=lambda s: s[1])
            for slot in "01"]
  assert firsts[0][1] < firsts[1][2] and firsts[1][1] < firsts[0][2]  # side by side
  with open(os.path.join(root, "tuned", "selection.json")) as f:
    selection = json.load(f)
  by_scheme = {g["group"]["model.position.kind"]: g for g in selection["groups"]}
  assert sorted(by_scheme) == ["alibi", "rope"]
  for kind, group in by_scheme.items():
    scores = {c["fields"]["train.learning_rate"]: c["score"] for c in group["candidates"]}
    for c in group["candidates"]:  # each candidate's score is its run's last val_loss
      workdir = os.path.join(root, "tuned", "search", c["run"])
      with open(os.path.join(workdir, "metrics.jsonl")) as f:
        last = [json.loads(l) for l in f if '"val_loss"' in l][-1]
      assert last["step"] == 2 and c["score"] == pytest.approx(last["val_loss"])
    best = min(scores, key=scores.get)
    assert group["selected"] == {"train.learning_rate": best}
    for seed in (0,):  # the final runs trained with the selected value, named with it
      name = f"kind={kind},learning_rate={best:g},seed={seed}"
      with open(os.path.join(root, "tuned", name, "config.json")) as f:
        config = json.load(f)["config"]
      assert config["train"]["learning_rate"] == best and config["train"]["num_steps"] == 3
      assert run_ckpt.committed_steps(os.path.join(root, "tuned", name)) == [3]
  again = launch_cli(path, f"--root={root}", "--num_devices=1", env=env)
  assert again.returncode == 0 and "2 runs, 0 to run" in again.stdout, again.stdout
  assert again.stdout.count("# selected for kind=") == 2
  frame = collect.collect(os.path.join(root, "tuned"))
  assert frame["run"].nunique() == 2  # the search's runs are not the study's
  from sweeps import report
  out, ids = report.write_report(os.path.join(root, "tuned"))
  assert ids[0] == "search"
  with open(out) as f:
    page = f.read()
  assert "Tuning stage (selection.json)" in page and page.count(">yes<") == 2


def test_search_studies_and_selections_are_checked_and_applied(tmp_path):
  from sweeps import search
  base = dict(name="t", config="configs/alibi_tiny.py",
              points=lambda: product(**{"model.position.kind": ["alibi", "rope"]}, seed=[0, 1])
              + [{"@parent": {"model.position.kind": "rope", "seed": 0},
                  "@config": "configs/extend_pi.py:{parent},2"}])
  bad = [(study_lib.Search(grid={}), "Search.grid must be a non-empty dict"),
         (study_lib.Search(grid={"model.position.kind": ["rope"]}), "also group_by fields"),
         (study_lib.Search(grid={"train.learning_rate": [1e-3]}, group_by="model"),
          "group_by must be a list"),
         (study_lib.Search(grid={"train.learning_rate": [1e-3, 1e-3]}),
          r"Search.grid\['train.learning_rate'\] lists a value twice")]
  for s, message in bad:
    with pytest.raises(StudyError, match=message):
      search.search_study(Study(**base, search=s))
  study = Study(**base, search=study_lib.Search(grid={"train.learning_rate": [1e-3, 1e-2]},
                                                common={"train.num_steps": 50}))
  runs = search.search_study(study).runs()
  assert [r.name for r in runs] == ["kind=alibi,learning_rate=0.001",
                                    "kind=alibi,learning_rate=0.01",
                                    "kind=rope,learning_rate=0.001", "kind=rope,learning_rate=0.01"]
  assert all(r.config.train.num_steps == 50 and r.config.eval.length_multipliers == (1.0,)
             for r in runs)
  # Scores from metrics.jsonl: the lower wins; a diverged (null) loss never does.
  root = str(tmp_path)
  for run, loss in zip(runs, (2.0, 1.5, None, 3.0)):
    workdir = os.path.join(root, "t", "search", run.name)
    os.makedirs(os.path.join(workdir, "checkpoints", "50"))
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
      f.write(json.dumps({"step": 50, "val_loss": loss}) + "\n")
  import unittest.mock
  with unittest.mock.patch.object(launch_plan.workdirs, "run_state",
                                  lambda run, workdir, published=None:
                                  launch_plan.workdirs.RunState(True, (), False, ())):
    chosen = search.selection(study, root)
  assert [g["selected"] for g in chosen["groups"]] == [{"train.learning_rate": 0.01},
                                                       {"train.learning_rate": 0.01}]
  assert chosen["groups"][1]["candidates"][0]["score"] == float("inf")
  final = search.final_study(study, chosen)
  names = [r.name for r in final.runs()]
  assert names[:4] == ["kind=alibi,learning_rate=0.01,seed=0", "kind=alibi,learning_rate=0.01,seed=1",
                       "kind=rope,learning_rate=0.01,seed=0", "kind=rope,learning_rate=0.01,seed=1"]
  assert names[4] == "extend_pi_2--kind=rope,learning_rate=0.01,seed=0"  # its parent, tuned
  assert final.search is None


def test_the_cost_estimate_counts_training_flops_and_scales_a_given_throughput(
    dry_runs, text_corpus, tmp_path):
  from models.spec import train_flops_per_token
  from sweeps import cost, pe_extrapolation_cpu
  runs = pe_extrapolation_cpu.STUDY.runs()
  c = cost.run_cost(runs[0])
  assert c.tokens == 600 * 16 * 256  # num_steps x batch x train_len
  assert c.flops == c.tokens * train_flops_per_token(runs[0].config)
  # 6 x matmul parameters + causal attention, per token, for the 0.82M-parameter model:
  # 4 layers x (4 x 128 x 128 + 2 x 128 x 512) + 128 x 259 = 819,584; attention 4 x 2 x 256 x 128
  assert c.flops_per_token == 6 * 819_584 + 3 * 4 * 2 * 256 * 128
  fire = next(r for r in runs if r.name.startswith("kind=fire"))
  rate = cost.rate_from_tokens_per_s(1000.0, c)
  lines = cost.estimate_lines([c, cost.run_cost(fire)], rate, parallel=2)
  assert lines[0].startswith("# cost: 2 run(s) to train, 4.92 Mtokens")
  assert f"~{cost.duration(c.tokens / 1000.0)}" in lines[1]  # its own tokens at 1,000 tokens/s
  assert "with 2 side by side" in lines[0]
  assert "no time estimate" in cost.estimate_lines([c], None)[0]
  # Printed by every dry run before its commands.
  root, out = dry_runs
  for backend in ("local", "tpu", "slurm"):
    assert "# cost: 18 run(s) to train, 44.2 Mtokens, 252 TFLOP" in out[backend], backend
  # A short timing here: train.py on the tests' tiny model until 3 records are logged.
  tiny = tiny_config(text_corpus, "rope")
  config = write_config_file(str(tmp_path / "tiny_config.py"), tiny)
  probe = Study("p", config, lambda: [{"seed": 0}]).runs()[0]
  tokens_per_s = cost.time_probe(probe, config, sys.executable, env=ENV)
  assert tokens_per_s > 0


def test_packed_tpu_runs_get_disjoint_chips_of_one_worker_each():
  from sweeps import tpu_pack
  # (workers, chips per worker, JAX devices per chip) from the accelerator type
  assert tpu_pack.topology("v4-32") == (4, 4, 1) and tpu_pack.topology("v4-8") == (1, 4, 1)
  assert tpu_pack.topology("v5litepod-8") == (1, 8, 1) and tpu_pack.topology("v6e-16") == (4, 4, 1)
  assert tpu_pack.topology("v3-8") == (1, 4, 2) and tpu_pack.topology("v5p-64") == (8, 4, 1)
  assert tpu_pack.devices_per_run("v3-32", 2) == 4
  two = tpu_pack.slots("v4-32", 2)
  assert [(s.worker, s.chips, s.port) for s in two[:3]] == [(0, (0, 1), 8476), (0, (2, 3), 8477),
                                                            (1, (0, 1), 8476)]
  with pytest.raises(ConfigError, match=r"--tpu_chips_per_run=8 must be one of \[1, 2, 4\]"):
    tpu_pack.slots("v4-32", 8)
  with pytest.raises(ConfigError, match="--tpu_accelerator_type=v9-8"):
    tpu_pack.topology("v9-8")
  args = ["--backend=tpu", "--root=/mnt/b/sweeps", "--tpu_name=pe-v4", "--tpu_zone=z",
          "--tpu_accelerator_type=v4-32", "--tpu_repo=https://example.org/pe.git",
          "--tpu_git_ref=0123abc", "--tpu_chips_per_run=1", "--tokens_per_s=20000", "--dry-run",
          "--notpu_compile_check"]
  dry = launch_cli("sweeps/pe_extrapolation_cpu.py", *args)
  assert dry.returncode == 0, dry.stderr[-2000:]
  out = dry.stdout
  assert "# TPU pe-v4: 16 runs side by side, 1 chip(s) each" in out
  assert out.index("# cost: 18 run(s)") < out.index("gcloud compute tpus tpu-vm ssh")
  assert "with 16 side by side" in out
  runs = re.findall(r"# run (\S+) on pe-v4 \(worker (\d), chip (\d)\)", out)
  assert len(runs) == 18 and len({(w, c) for _, w, c in runs}) == 16  # every chip of the slice
  lines = [l for l in out.splitlines() if " train.py " in l or " -m eval.run " in l]
  for line in lines:
    worker, chips, port = re.search(
        r"--worker=(\d) '--command=cd pe-sweeps && TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 "
        r"TPU_PROCESS_BOUNDS=1,1,1 TPU_VISIBLE_DEVICES=(\d) TPU_MESH_CONTROLLER_ADDRESS="
        r"localhost:(\d+) TPU_MESH_CONTROLLER_PORT=\3 ", line).groups()
    assert int(port) == 8476 + int(chips) and line.rstrip("'").endswith("--distributed=off")
  by_run = dict((name, (w, c)) for name, w, c in runs)
  assert by_run["kind=none,seed=0,shuffle_seed=0"] == ("0", "0")
  assert by_run["kind=sinusoidal,seed=1,shuffle_seed=1"] == ("2", "3")  # run 11: worker 2, chip 3
  bad = launch_cli("sweeps/pe_extrapolation_cpu.py", *args[:-3], "--tpu_chips_per_run=3",
                   "--dry-run")
  assert bad.returncode == 2 and "--tpu_chips_per_run=3 must be one of [1, 2, 4]" in bad.stderr


def test_local_slots_confine_each_run_to_its_devices():
  from sweeps import local_pack
  from sweeps.local_pack import Machine
  gpus = local_pack.slots(Machine("cuda", 8), 2)
  assert [(s.devices, s.env) for s in gpus[:2]] == [
      ((0, 1), (("CUDA_VISIBLE_DEVICES", "0,1"),)), ((2, 3), (("CUDA_VISIBLE_DEVICES", "2,3"),))]
  assert len(gpus) == 4 and local_pack.slots(Machine("rocm", 3), 1)[2].env == (
      ("HIP_VISIBLE_DEVICES", "2"),)
  cpu = local_pack.slots(Machine("cpu", 4), 2, xla_flags="--a=1 "
                         "--xla_force_host_platform_device_count=8 --b=2")
  assert len(cpu) == 2 and dict(cpu[1].env) == {
      "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--a=1 --b=2 --xla_force_host_platform_device_count=2"}
  tpu = local_pack.slots(Machine("tpu", 4), 1)  # a v4-8 VM: 4 chips, one JAX device each
  assert dict(tpu[3].env)["TPU_VISIBLE_DEVICES"] == "3"
  assert dict(tpu[3].env)["TPU_MESH_CONTROLLER_PORT"] == "8479"
  v3 = local_pack.slots(Machine("tpu", 8, per_chip=2), 4)  # a v3-8: two cores per chip
  assert [dict(s.env)["TPU_VISIBLE_DEVICES"] for s in v3] == ["0,1", "2,3"]
  assert dict(v3[0].env)["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
  with pytest.raises(ConfigError, match=r"--devices_per_run=3 must be one of \[2, 4, 8\]"):
    local_pack.slots(Machine("tpu", 8, per_chip=2), 3)
  with pytest.raises(ConfigError, match="--devices_per_run=5 must be between 1 and this "
                                        "machine's 4 cuda device"):
    local_pack.slots(Machine("cuda", 4), 5)
  bad = launch_cli("sweeps/pe_extrapolation_cpu.py", "--backend=slurm", "--root=/tmp/x",
                   "--devices_per_run=1", "--dry-run")
  assert bad.returncode == 2 and "--devices_per_run applies to --backend=local" in bad.stderr


def fake_complete(run, workdir: str, val_loss: float) -> None:
  """Makes `workdir` hold `run` complete without training: its final checkpoint folder, every
  result train.py writes (at the final step) and a metrics record with `val_loss` there."""
  n = run.num_steps
  os.makedirs(os.path.join(workdir, "checkpoints", str(n)))
  os.makedirs(os.path.join(workdir, "eval"))
  for i, k in enumerate(run.train_results):
    with open(os.path.join(workdir, "eval", f"r{i}.json"), "w") as f:
      json.dump({"suite": k.suite, "extension": k.extension, "extension_factor": k.factor,
                 "protocol": k.protocol, "stride": k.stride, "step": n}, f)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": n, "val_loss": val_loss}) + "\n")


def test_successive_halving_keeps_the_best_third_per_rung_and_selects_from_the_last(tmp_path):
  from sweeps import search
  lrs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
  study = Study("sh", "configs/alibi_tiny.py",
                lambda: product(**{"model.position.kind": ["alibi", "rope"]}, seed=[0, 1]),
                search=study_lib.Search(grid={"train.learning_rate": lrs}, halving_eta=3,
                                        halving_rungs=2, common={"train.num_steps": 9,
                                                                 "train.warmup_steps": 3}))
  assert search.rung_budgets(study) == [[{"train.num_steps": 3, "train.warmup_steps": 1},
                                         {"train.num_steps": 9, "train.warmup_steps": 3}]] * 2
  first = search.search_study(study).runs()
  assert len(first) == 12 and {r.num_steps for r in first} == {3}
  assert first[0].name == "kind=alibi,learning_rate=0.0001,num_steps=3,warmup_steps=1"
  root = str(tmp_path)
  assert search.rung_study(study, 1, root) is None and search.selection(study, root) is None
  # rung 1: a made-up loss per candidate, lowest at 1e-3 for ALiBi and 3e-2 / 3e-3 for RoPE
  loss = {("alibi", 1e-3): 2.0, ("alibi", 3e-4): 2.1, ("rope", 3e-2): 2.2, ("rope", 3e-3): 2.2}
  for run in first:
    key = (run.config.model.position.kind, run.config.train.learning_rate)
    fake_complete(run, os.path.join(root, "sh", "search", run.name), loss.get(key, 3.0))
  second = search.rung_study(study, 1, root).runs()  # ceil(6 / 3) = 2 per group, in grid order
  assert [(r.config.model.position.kind, r.config.train.learning_rate, r.num_steps,
           r.config.train.warmup_steps) for r in second] == [
      ("alibi", 3e-4, 9, 3), ("alibi", 1e-3, 9, 3), ("rope", 3e-3, 9, 3), ("rope", 3e-2, 9, 3)]
  assert search.selection(study, root) is None  # the last rung has not run
  path = tmp_path / "sh.py"  # the launcher goes on to the next rung once one is complete
  path.write_text("from sweeps.study import Search, Study, product\n"
                  "STUDY = Study('sh', 'configs/alibi_tiny.py', lambda: product(**{'model.position"
                  ".kind': ['alibi', 'rope']}, seed=[0, 1]), search=Search(grid={'train.learning_"
                  f"rate': {lrs!r}}}, halving_eta=3, halving_rungs=2, common={{'train.num_steps': "
                  "9, 'train.warmup_steps': 3}))\n")
  dry = launch_cli(str(path), f"--root={root}", "--num_devices=1", "--dry-run")
  assert dry.returncode == 0, dry.stderr[-2000:]
  assert "# study search: 12 runs, 0 to run" in dry.stdout
  assert "# study search: 4 runs, 4 to run" in dry.stdout and "rung 2 of 2" in dry.stdout
  assert f"--workdir={root}/sh/search/kind=rope,learning_rate=0.03,num_steps=9,warmup_steps=3 " \
      in dry.stdout
  assert "# final stage of sh: after the search" in dry.stdout
  for run, value in zip(second, [2.5, 1.9, 1.8, 1.7]):
    fake_complete(run, os.path.join(root, "sh", "search", run.name), value)
  chosen = search.selection(study, root)
  assert chosen["halving"] == {"eta": 3, "rungs": 2}
  by = {g["group"]["model.position.kind"]: g for g in chosen["groups"]}
  assert by["alibi"]["selected"] == {"train.learning_rate": 1e-3}  # best of the last rung
  assert by["rope"]["selected"] == {"train.learning_rate": 3e-2}
  assert [(c["rung"], c["num_steps"]) for c in by["rope"]["candidates"]] == [(0, 3)] * 6 + [(1, 9)] * 2
  final = search.final_study(study, chosen).runs()
  assert {(r.config.model.position.kind, r.config.train.learning_rate) for r in final} == {
      ("alibi", 1e-3), ("rope", 3e-2)}
  assert "at 9 steps: 1.7000" in search.describe(chosen)[1]
  from sweeps import report, training_figures
  assert training_figures.fig_search(chosen) is not None
  parts, _ = report._search_html(chosen)
  table = parts[-1]
  assert table.count(">yes<") == 2 and "num_steps" in table  # the last rung's best per group
  bad = study_lib.Search(grid={"train.learning_rate": lrs}, halving_eta=3, halving_rungs=4,
                         common={"train.num_steps": 9})
  with pytest.raises(StudyError, match=r"needs train.num_steps >= 27"):
    search.search_study(dataclasses.replace(study, search=bad))
  for kw, message in (({"halving_eta": 1}, "halving_eta must be 0"),
                      ({"halving_eta": 2, "halving_rungs": 1}, "halving_rungs must be an integer"),
                      ({"halving_eta": 2, "grid": {"train.num_steps": [1, 2]}},
                       "cannot be Search.grid fields")):
    s = study_lib.Search(**({"grid": {"train.learning_rate": lrs}} | kw))
    with pytest.raises(StudyError, match=message):
      search.search_study(dataclasses.replace(study, search=s))


def test_publish_copies_finished_runs_without_checkpoints(tmp_path, capsys):
  """sweeps/publish.py: a finished run (metrics at train.num_steps) and the tuning stage's are
  copied as config.json, metrics.jsonl, eval/*.json|png and factors.json only; an unfinished run
  is skipped with its step; publishing again adds it once it has finished; bad input exits 2."""
  import json
  from sweeps import publish
  study = tmp_path / "workdirs" / "s"

  def run(folder, steps_logged, num_steps=4):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"config": {"train": {"num_steps": num_steps}}}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n"
                                                  for s in steps_logged))
    for sub in ("checkpoints/4", "tensorboard", "eval/earlier", "longrope_search/x4"):
      (folder / sub).mkdir(parents=True)
    (folder / "checkpoints/4/state").write_text("x")
    (folder / "eval/ppl_vs_length.json").write_text("{}")
    (folder / "eval/ppl_vs_length.png").write_bytes(b"png")
    (folder / "eval/earlier/old.json").write_text("{}")
    (folder / "longrope_search/x4/factors.json").write_text("{}")
    (folder / "launch.log").write_text("log")

  run(study / "a", [2, 4])
  run(study / "b", [2])
  run(study / "search" / "a,learning_rate=0.1", [4])
  (study / "study.json").write_text("{}")
  (study / "search" / "selection.json").write_text("{}")
  out = tmp_path / "results" / "s"
  assert publish.main([str(study), str(out)]) == 0
  assert "skipped b: at step 2 of 4" in capsys.readouterr().out
  files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
  assert files == ["a/config.json", "a/eval/ppl_vs_length.json", "a/eval/ppl_vs_length.png",
                   "a/longrope_search/x4/factors.json", "a/metrics.jsonl",
                   "search/a,learning_rate=0.1/config.json",
                   "search/a,learning_rate=0.1/eval/ppl_vs_length.json",
                   "search/a,learning_rate=0.1/eval/ppl_vs_length.png",
                   "search/a,learning_rate=0.1/longrope_search/x4/factors.json",
                   "search/a,learning_rate=0.1/metrics.jsonl", "search/selection.json",
                   "study.json"]
  with open(study / "b" / "metrics.jsonl", "a") as f:
    f.write(json.dumps({"step": 4}) + "\n")
  assert publish.publish(str(study), str(out)) == (["a", "b", "search/a,learning_rate=0.1"], [])
  assert (out / "b" / "metrics.jsonl").read_text().count("\n") == 2
  assert publish.main([str(study), str(study / "copy")]) == 2
  assert publish.main([str(tmp_path / "nothing"), str(out)]) == 2
  assert "no such study folder" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sweeps", "*_cpu.py"))),
    ids=os.path.basename)
def test_every_committed_study_plans_and_checks_its_runs(path, tmp_path):
  """Each CPU study of sweeps/ passes the launcher's checks (every run's and evaluation point's
  config, commands parsed back), as `--dry-run` would, without training anything."""
  from sweeps import launch_plan
  from sweeps.study import load_study
  study = load_study(path)
  planned = launch_plan.plan(study, str(tmp_path), num_devices=1, read_state=False)
  assert planned and len({p.run.name for p in planned}) == len(planned)
