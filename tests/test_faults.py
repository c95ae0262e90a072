"""Faults: SIGKILL anywhere (checkpoint writes included), SIGTERM preemption, an unreadable latest
checkpoint, NaN losses, and a killed evaluation; train.py runs as a real process where the fault
is a signal."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config, write_config_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 16


def env_for(devices: int, cache: str) -> dict:
  """The children's environment: `devices` CPU devices, a shared compilation cache."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {
      "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": cache,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  if devices > 1:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
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
  spec = train.model_spec(c, train.sharding.make_mesh(c.mesh, jax.devices()[:1]))
  return jax.tree.map(np.asarray, train.restore_params(workdir, c, spec, step)[0])


@pytest.fixture(scope="module")
def reference(text_corpus, tmp_path_factory):
  """Uninterrupted runs on 1 and on 8 devices: (config path, workdir, env) per device count."""
  folder = tmp_path_factory.mktemp("faults")
  cache = str(folder / "jax_cache")
  out = {}
  for devices in (1, 8):
    path = write_config_file(str(folder / f"config{devices}.py"), fault_config(text_corpus, devices))
    workdir = str(folder / f"reference{devices}")
    finish(path, workdir, env_for(devices, cache))
    out[devices] = (path, workdir, env_for(devices, cache))
  return out


@pytest.mark.parametrize("devices,trials", [(1, range(8)), (8, range(8, 10))])
def test_sigkill_anywhere_then_resume_is_exact(devices, trials, reference, text_corpus,
                                               tmp_path):
  """10 trials (fixed seeds): SIGKILL after a random number of logged steps plus a random delay
  (checkpoints are written every step, so many kills cut a write); the resumed run matches the
  uninterrupted one: bitwise on one device, within 1e-6 on 8."""
  path, ref_dir, env = reference[devices]
  ref_losses, ref_params = losses(ref_dir), params_at(ref_dir)
  for trial in trials:
    rng = np.random.default_rng(trial)
    workdir = str(tmp_path / f"trial{trial}")
    proc = start(path, workdir, env)
    wait_for_steps(proc, workdir, int(rng.integers(1, STEPS)))
    time.sleep(float(rng.uniform(0, 0.05)))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    killed_at = logged_steps(workdir)
    finish(path, workdir, env)
    got_losses, got_params = losses(workdir), params_at(workdir)
    assert sorted(got_losses) == list(range(1, STEPS + 1)), (trial, killed_at)
    if devices == 1:
      assert got_losses == ref_losses, (trial, killed_at)
      jax.tree.map(np.testing.assert_array_equal, got_params, ref_params)
    else:
      np.testing.assert_allclose([got_losses[s] for s in sorted(got_losses)],
                                 [ref_losses[s] for s in sorted(ref_losses)], rtol=1e-6)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                   got_params, ref_params)


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
  straight = tiny_config(text_corpus, "rope")
  straight.train.num_steps = 8
  straight.train.checkpoint_every_steps = 2
  train.train_and_evaluate(straight, str(tmp_path / "straight"), devices=jax.devices()[:1])

  workdir = str(tmp_path / "run")
  first = tiny_config(text_corpus, "rope")
  first.train.num_steps, first.train.checkpoint_every_steps, first.train.max_to_keep = 8, 2, 3
  first.train.stop_after_step = 6
  train.train_and_evaluate(first, workdir, devices=jax.devices()[:1])
  assert corrupt(os.path.join(workdir, "checkpoints", "6")) > 0
  capsys.readouterr()
  second = tiny_config(text_corpus, "rope")
  second.train.num_steps, second.train.checkpoint_every_steps, second.train.max_to_keep = 8, 2, 3
  train.train_and_evaluate(second, workdir, devices=jax.devices()[:1])
  captured = capsys.readouterr()
  assert "the checkpoint at step 6 could not be restored" in captured.err
  assert "resuming from the checkpoint at step 4" in captured.err
  assert "resumed from the checkpoint at step 4" in captured.out
  assert os.path.isdir(os.path.join(workdir, "checkpoints_unreadable", "6"))  # kept, not deleted
  a, b = params_at(str(tmp_path / "straight"), 8), params_at(workdir, 8)
  jax.tree.map(np.testing.assert_array_equal, a, b)


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
  path, ref_dir, env = reference[1]
  rng = np.random.default_rng(0)
  cmd = [sys.executable, "-m", "eval.run", f"--workdir={ref_dir}",
         "--config.eval.length_multipliers=(0.5, 1.0, 2.0, 4.0)",
         "--config.eval.suites=ppl_vs_length,attention"]
  started = time.monotonic()
  subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=600, check=True)
  duration = time.monotonic() - started
  for _ in range(3):
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(float(rng.uniform(0.5, 1.0)) * duration)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for name in os.listdir(os.path.join(ref_dir, "eval")):
      if name.endswith(".json") and not name.startswith("."):
        with open(os.path.join(ref_dir, "eval", name)) as f:
          assert json.load(f)["suite"]
