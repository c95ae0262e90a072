"""Faults: SIGKILL anywhere (checkpoint writes included), SIGTERM preemption, an unreadable latest
checkpoint, NaN losses, and a killed evaluation; train.py runs as a real process where the fault
is a signal."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import train
from conftest import FAST_COMPILE, tiny_config, write_config_file
from runs import checkpoint as run_ckpt
from models import spec as specs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 12


def env_for(devices: int, cache: str) -> dict:
  """The children's environment: `devices` CPU devices, a shared compilation cache."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {
      "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": cache,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  env["XLA_FLAGS"] = FAST_COMPILE + (
      f" --xla_force_host_platform_device_count={devices}" if devices > 1 else "")
  return env


def fault_config(text_corpus, devices: int = 1):
  """The tiny model, a checkpoint after every step (so kills land in checkpoint writes too)."""
  c = tiny_config(text_corpus, "rope")
  c.train.num_steps = STEPS
  c.train.checkpoint_every_steps = 1
  c.train.max_to_keep = 2
  c.eval.length_multipliers = (1.0,)
  c.eval.max_tokens_per_length = 256
  if devices == 8:
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 2, 2, 2
  return c


def start(config_path: str, workdir: str, env: dict) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "train.py", f"--config={config_path}",
                           f"--workdir={workdir}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def finish(config_path: str, workdir: str, env: dict) -> subprocess.CompletedProcess:
  proc = start(config_path, workdir, env)
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err[-3000:]
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def logged_steps(workdir: str) -> int:
  try:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      return sum(1 for line in f if '"loss"' in line)
  except FileNotFoundError:
    return 0


def wait_for_steps(proc: subprocess.Popen, workdir: str, steps: int, timeout: float = 300) -> None:
  """Polls until metrics.jsonl logs `steps` training steps (or the process ends)."""
  deadline = time.monotonic() + timeout
  while logged_steps(workdir) < steps and proc.poll() is None:
    assert time.monotonic() < deadline, "training did not start"
    time.sleep(0.002)


def losses(workdir: str) -> dict[int, float]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def params_at(workdir: str, step: int = STEPS):
  """The parameters of the checkpoint at `step`, on one device (numpy)."""
  c = tiny_config("unused", "rope")
  spec = specs.model_spec(c, train.sharding.make_mesh(c.mesh, jax.devices()[:1]))
  return jax.tree.map(np.asarray, run_ckpt.restore_params(workdir, c, spec, step)[0])


@pytest.fixture(scope="module")
def reference(text_corpus, tmp_path_factory):
  """Uninterrupted runs on 1 and on 8 devices: (config path, workdir, env) per device count.

  Built once per test session: pytest-xdist workers share them through a folder beside their
  own temporary roots, under a file lock (each is a real train.py process, ~15 s).
  """
  shared = tmp_path_factory.getbasetemp().parent / "fault_reference"
  shared.mkdir(exist_ok=True)
  cache = str(shared / "jax_cache")
  with open(shared / "lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    out = {}
    for devices in (1, 8):
      path = str(shared / f"config{devices}.py")
      workdir = str(shared / f"reference{devices}")
      if not os.path.exists(workdir + ".done"):
        write_config_file(path, fault_config(text_corpus, devices))
        finish(path, workdir, env_for(devices, cache))
        open(workdir + ".done", "w").close()
      out[devices] = (path, workdir, env_for(devices, cache))
    fcntl.flock(lock, fcntl.LOCK_UN)
  return out


@pytest.mark.parametrize("devices,kills", [(1, 3), (8, 2)])
def test_sigkill_anywhere_then_resume_is_exact(devices, kills, reference, tmp_path):
  """5 SIGKILLs in all (3 on one device, 2 on 8 devices), at seeded random points: after a
  random number of logged steps plus a random delay, with a checkpoint written every step, so
  many kills cut a checkpoint write (or the final evaluation). Each restart resumes from what the
  previous kill left and is killed again; the run that finally completes matches the
  uninterrupted one: bitwise on one device, within 1e-6 on 8."""
  path, ref_dir, env = reference[devices]
  workdir = str(tmp_path / "killed")
  rng = np.random.default_rng(devices)
  kill_points = []
  for _ in range(kills):
    proc = start(path, workdir, env)
    wait_for_steps(proc, workdir, int(rng.integers(1, STEPS + 1)))
    time.sleep(float(rng.uniform(0, 0.2)))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    kill_points.append(logged_steps(workdir))
  finish(path, workdir, env)
  got, want = losses(workdir), losses(ref_dir)
  assert sorted(got) == list(range(1, STEPS + 1)), kill_points
  if devices == 1:
    assert got == want, kill_points
    jax.tree.map(np.testing.assert_array_equal, params_at(workdir), params_at(ref_dir))
  else:
    np.testing.assert_allclose([got[s] for s in sorted(got)], [want[s] for s in sorted(want)],
                               rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                 params_at(workdir), params_at(ref_dir))


def test_sigterm_saves_the_current_step_and_exits_zero(reference, text_corpus, tmp_path):
  path, ref_dir, env = reference[1]
  workdir = str(tmp_path / "preempted")
  proc = start(path, workdir, env)
  wait_for_steps(proc, workdir, 3)
  proc.send_signal(signal.SIGTERM)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err[-2000:]
  stopped = int(out.split("preempted (SIGTERM) at step ")[1].split()[0])
  assert 3 <= stopped < STEPS
  steps = sorted(int(n) for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.isdigit())
  assert steps[-1] == stopped  # saved at the step it was at, not at the next interval
  assert not os.path.exists(os.path.join(workdir, "eval"))
  resumed = finish(path, workdir, env)
  assert f"resumed from the checkpoint at step {stopped}" in resumed.stdout
  assert losses(workdir) == losses(ref_dir)
  jax.tree.map(np.testing.assert_array_equal, params_at(workdir), params_at(ref_dir))


def corrupt(step_dir: str) -> int:
  """Overwrites the files of a committed Orbax checkpoint's state (arrays, manifests, metadata)
  with garbage, keeping its commit marker: a checkpoint damaged after it was written."""
  count = 0
  for folder, _, files in os.walk(os.path.join(step_dir, "state")):
    for name in files:
      if name != "commit_success.txt":
        with open(os.path.join(folder, name), "wb") as f:
          f.write(b"not a checkpoint")
        count += 1
  return count


def test_unreadable_latest_checkpoint_falls_back_to_the_previous(text_corpus, tmp_path, capsys):
  def config(stop=-1):
    c = tiny_config(text_corpus, "rope")
    c.train.num_steps, c.train.checkpoint_every_steps, c.train.max_to_keep = 4, 1, 3
    c.train.stop_after_step = stop
    c.eval.length_multipliers = (1.0,)
    return c

  train.train_and_evaluate(config(), str(tmp_path / "straight"), devices=jax.devices()[:1])
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(config(stop=3), workdir, devices=jax.devices()[:1])
  assert corrupt(os.path.join(workdir, "checkpoints", "3")) > 0
  capsys.readouterr()
  train.train_and_evaluate(config(), workdir, devices=jax.devices()[:1])
  captured = capsys.readouterr()
  assert "the checkpoint at step 3 could not be restored" in captured.err
  assert "resuming from the checkpoint at step 2" in captured.err
  assert "resumed from the checkpoint at step 2" in captured.out
  assert os.path.isdir(os.path.join(workdir, "checkpoints_unreadable", "3"))  # kept, not deleted
  jax.tree.map(np.testing.assert_array_equal, params_at(str(tmp_path / "straight"), 4),
               params_at(workdir, 4))


def nan_config(text_corpus):
  """A learning rate so large that the first update overflows: the loss of step 2 is not finite."""
  c = tiny_config(text_corpus, "rope")
  c.train.num_steps = 6
  c.train.warmup_steps = 0
  c.train.learning_rate = 1e38
  c.train.checkpoint_every_steps = 1
  c.train.max_to_keep = 5
  return c


def test_nan_loss_stops_naming_the_step_and_the_last_good_checkpoint(text_corpus, tmp_path):
  workdir = str(tmp_path / "nan")
  with pytest.raises(train.NonFiniteLossError) as e:
    train.train_and_evaluate(nan_config(text_corpus), workdir, devices=jax.devices()[:1])
  message = str(e.value)
  assert "non-finite loss or gradient at step 2" in message
  assert "last good checkpoint: step 1 in " in message
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1"]  # no NaN saved
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    text = f.read()
  assert "NaN" not in text and "Infinity" not in text


def test_nan_batches_can_be_skipped(text_corpus, tmp_path):
  workdir = str(tmp_path / "skip")
  c = nan_config(text_corpus)
  c.train.skip_nonfinite_batches = True
  c.eval.length_multipliers = (1.0,)
  out = train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  assert out["step"] == 6
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f if '"skipped_batches"' in line]
  assert [r["skipped_batches"] for r in records] == [0, 1, 2, 3, 4, 5]
  # Every skipped step left the parameters as step 1 made them.
  after_one, final = params_at(workdir, 2), params_at(workdir, 6)
  jax.tree.map(np.testing.assert_array_equal, after_one, final)


def test_killed_evaluation_leaves_no_half_written_json(reference, tmp_path):
  """eval.run SIGKILLed at random moments: every result JSON there parses (old or new)."""
  _, reference_dir, env = reference[1]
  ref_dir = shutil.copytree(reference_dir, str(tmp_path / "run"))  # the shared one stays as is
  rng = np.random.default_rng(0)
  cmd = [sys.executable, "-m", "eval.run", f"--workdir={ref_dir}",
         "--config.eval.length_multipliers=(0.5, 1.0, 2.0)",
         "--config.eval.suites=ppl_vs_length,attention"]
  started = time.monotonic()
  subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=600, check=True)
  duration = time.monotonic() - started
  for _ in range(2):
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(float(rng.uniform(0.5, 1.0)) * duration)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for name in os.listdir(os.path.join(ref_dir, "eval")):
      if name.endswith(".json") and not name.startswith("."):
        with open(os.path.join(ref_dir, "eval", name)) as f:
          assert json.load(f)["suite"]
