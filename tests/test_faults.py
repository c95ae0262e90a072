"""Faults: SIGKILL anywhere (checkpoint writes included), two processes on one workdir, a start
that failed before its first checkpoint, a full and a read-only disk, SIGTERM preemption, an
unreadable latest checkpoint, NaN losses, and a killed evaluation; train.py runs as a real
process where the fault is a signal or another process."""

import contextlib
import fcntl
import hashlib
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

import forked

import train
from configs import field_ranges
from conftest import FAST_COMPILE, no_compilation, tiny_config, write_config_file
from runs import checkpoint as run_ckpt, run_guard
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


def start(config_path: str, workdir: str, env: dict) -> forked.Process:
  """`python train.py --config=... --workdir=...` as a process of its own (forked from a warm
  server, tests/forked.py: the kills below hit a real process, without paying its imports)."""
  return forked.Process(["train.py", f"--config={config_path}", f"--workdir={workdir}"],
                        cwd=ROOT, env=env)


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


def wait_for_steps(proc: forked.Process, workdir: str, steps: int, timeout: float = 300) -> None:
  """Polls until metrics.jsonl logs `steps` training steps (or the process ends)."""
  deadline = time.monotonic() + timeout
  while logged_steps(workdir) < steps and proc.poll() is None:
    assert time.monotonic() < deadline, "training did not start"
    time.sleep(0.01)


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
  # One folder per corpus path (one per test session): a run of another session's code, or on a
  # corpus since removed, is never taken for this one's; the compilation cache is shared.
  root = tmp_path_factory.getbasetemp().parent
  shared = root / f"fault_reference_{hashlib.sha256(text_corpus.encode()).hexdigest()[:10]}"
  shared.mkdir(exist_ok=True)
  cache = str(root / "fault_reference_jax_cache")
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


def metric_steps(workdir: str) -> list[tuple[int, str]]:
  """(step, "loss" or "val") of every metrics.jsonl record, in file order."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [(r["step"], "loss" if "loss" in r else "val") for r in map(json.loads, f)]


def writing_checkpoint(workdir: str, first: int = 0) -> bool:
  """Whether an Orbax checkpoint of step >= `first` of `workdir` is being written (its temporary
  folder exists)."""
  try:
    names = os.listdir(os.path.join(workdir, "checkpoints"))
  except FileNotFoundError:
    return False
  steps = [n.split(".")[0] for n in names if run_guard.ORBAX_TMP in n]
  return any(step.isdigit() and int(step) >= first for step in steps)


def poll(proc: forked.Process, ready, timeout: float = 300, every: float = 0.01) -> None:
  """Polls `ready()` every `every` seconds until it holds or the process ends (a tight loop
  would take CPU time from the process it watches)."""
  deadline = time.monotonic() + timeout
  while not ready() and proc.poll() is None:
    assert time.monotonic() < deadline, "timed out"
    time.sleep(every)


def kill_during(proc: forked.Process, workdir: str, mode: str, rng) -> bool:
  """SIGKILLs `proc` once it holds the run's lock and has logged steps of its own: "first" as
  soon as it logs one (before or while that step's checkpoint is written), "write" inside the
  checkpoint write after 1-3 steps, "random" after 1-3 steps plus up to 0.2 s. Returns whether
  the kill cut a checkpoint write."""
  lock = os.path.join(workdir, "run.lock")
  poll(proc, lambda: os.path.exists(lock) and f'"pid": {proc.pid},' in open(lock).read())
  done = max([logged_steps(workdir)] + run_ckpt.committed_steps(workdir))  # what it resumes
  target = min(STEPS, done + (1 if mode == "first" else int(rng.integers(1, 4))))
  poll(proc, lambda: logged_steps(workdir) >= target)  # past the lines a killed start left
  if mode == "write":
    poll(proc, lambda: writing_checkpoint(workdir, target), every=0.001)  # a write is short
  elif mode == "random":
    time.sleep(float(rng.uniform(0, 0.2)))
  proc.send_signal(signal.SIGKILL)
  proc.communicate(timeout=60)
  return writing_checkpoint(workdir)


@pytest.mark.parametrize("devices,modes", [(1, ("first", "write", "random", "write")),
                                           (8, ("write", "random"))])
def test_sigkill_anywhere_then_resume_is_exact(devices, modes, reference, tmp_path):
  """6 SIGKILLs in all (4 on one device, 2 on 8 devices), with a checkpoint written every step:
  right after step 1 is logged (before its checkpoint commits, or while it is written), inside
  checkpoint writes, at seeded random points. Each restart resumes from what the previous kill
  left (a line cut mid-write appended to metrics.jsonl, and the temporary files of cut writes
  planted, on the way) and is killed again; the run that finally completes matches the
  uninterrupted one: bitwise on one device, within 1e-6 on 8; metrics.jsonl holds each step's
  records once, as the uninterrupted run's; the last start took the killed one's lock over and
  removed the leftovers."""
  path, ref_dir, env = reference[devices]
  workdir = str(tmp_path / "killed")
  rng = np.random.default_rng(devices)
  kill_points, cut_writes = [], 0
  for round_, mode in enumerate(modes):
    proc = start(path, workdir, env)
    cut_writes += kill_during(proc, workdir, mode, rng)
    kill_points.append((mode, logged_steps(workdir)))
    if round_ == 0:  # a kill inside a metrics write (one write call: simulated)
      with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 99, "loss": 1.')
  leftovers = [os.path.join(workdir, f".training_curves.png.{'ab' * 16}.tmp"),
               os.path.join(workdir, "checkpoints", "98.orbax-checkpoint-tmp-5", "state")]
  open(leftovers[0], "w").close()
  os.makedirs(leftovers[1])
  done = finish(path, workdir, env)
  assert f"taking over the stale lock {workdir}/run.lock of pid {proc.pid} " in done.stderr, (
      done.stderr[:1000])
  assert not any(os.path.exists(p) for p in leftovers)
  assert os.path.getsize(os.path.join(workdir, "run.lock")) == 0  # released
  assert metric_steps(workdir) == metric_steps(ref_dir), kill_points  # no step twice
  got, want = losses(workdir), losses(ref_dir)
  assert sorted(got) == list(range(1, STEPS + 1)), kill_points
  if devices == 1:
    assert cut_writes >= 1, kill_points  # at least one kill cut a checkpoint write
    assert got == want, kill_points
    jax.tree.map(np.testing.assert_array_equal, params_at(workdir), params_at(ref_dir))
  else:
    np.testing.assert_allclose([got[s] for s in sorted(got)], [want[s] for s in sorted(want)],
                               rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6),
                 params_at(workdir), params_at(ref_dir))


def test_a_second_process_on_a_workdir_is_refused_naming_the_first(reference, tmp_path):
  """Two train.py on one workdir: the second (started while the first is stopped mid-run, its
  lock held) exits 2 with one line naming the first's pid, before compiling and writing
  nothing; the first then finishes as an uninterrupted run."""
  path, ref_dir, env = reference[1]
  workdir = str(tmp_path / "shared")
  first = start(path, workdir, env)
  wait_for_steps(first, workdir, 2)
  first.send_signal(signal.SIGSTOP)
  try:
    before = {n: os.stat(os.path.join(workdir, n)).st_mtime_ns for n in os.listdir(workdir)}
    second = forked.run(["train.py", f"--config={path}", f"--workdir={workdir}"], cwd=ROOT, env=env,
                        timeout=300)
    assert {n: os.stat(os.path.join(workdir, n)).st_mtime_ns
            for n in os.listdir(workdir)} == before
  finally:
    first.send_signal(signal.SIGCONT)
  out, err = first.communicate(timeout=300)
  assert first.returncode == 0, err[-3000:]
  assert second.returncode == 2, second.stderr[-3000:]
  assert second.stderr.startswith(f"error: --workdir={workdir} is in use by pid {first.pid} on ")
  assert second.stderr.count("\n") == 1 and "one process writes a run at a time" in second.stderr
  assert "memory:" not in second.stdout  # refused before compiling
  assert metric_steps(workdir) == metric_steps(ref_dir)
  jax.tree.map(np.testing.assert_array_equal, params_at(workdir), params_at(ref_dir))


def purge_steps(folder: str) -> list[int]:
  """The steps of the TensorBoard purge markers (SessionLog START events) in `folder`'s event
  files (TFRecords: length, its CRC, the Event, its CRC)."""
  from tensorboardX.proto import event_pb2
  steps = []
  for name in sorted(os.listdir(folder)):
    data = open(os.path.join(folder, name), "rb").read()
    at = 0
    while at < len(data):
      size = int.from_bytes(data[at:at + 8], "little")
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + size])
      at += 16 + size
      if event.HasField("session_log") and event.session_log.status == event.session_log.START:
        steps.append(event.step)
  return steps


def test_a_start_that_failed_before_its_first_checkpoint_binds_nothing(text_corpus, tmp_path):
  """A workdir left by a start that wrote config.json and some metrics, then failed or was
  killed before its first checkpoint: the next start, with another model, is a new run (no
  refusal, no warning), and it empties metrics.jsonl (the cut last line included) and marks
  TensorBoard to purge from step 0; a resume keeps the lines up to its step."""
  from runs import metrics as run_metrics, workdir as run_dir
  workdir = str(tmp_path / "run")
  failed = tiny_config(text_corpus, "rope")
  failed.data.train_len = 512
  os.makedirs(workdir)
  run_dir.write_run_config(workdir, failed)
  path = os.path.join(workdir, "metrics.jsonl")
  records = "".join(json.dumps({"step": s, "loss": 5.0}) + "\n" for s in (1, 2, 3))
  with open(path, "w") as f:
    f.write(records + '{"step": 4, "lo')
  again = tiny_config(text_corpus, "rope")
  assert run_dir.check_resume(workdir, again) == []
  run_metrics.truncate_metrics(path, 2)  # a resume from step 2: the cut line is tolerated
  assert [r["step"] for r in run_metrics.read_metrics(workdir)] == [1, 2]
  writer = run_metrics.MetricsWriter(workdir, resumed_from=None, config=again)
  writer.close()
  assert open(path).read() == ""
  assert purge_steps(os.path.join(workdir, "tensorboard")) == [0]
  os.makedirs(os.path.join(workdir, "checkpoints", "1"))  # once a checkpoint is committed, it binds
  with pytest.raises(train.ConfigError, match="holds a run with data.train_len=512, not 32"):
    run_dir.check_resume(workdir, again)
  again.data.train_len = 512  # a nested field: named by its full path, not the whole section
  again.model.position.kind = "alibi"
  with pytest.raises(train.ConfigError, match=r"holds a run with model.position.kind='rope', "
                     r"not 'alibi'; use a new --workdir") as error:
    run_dir.check_resume(workdir, again)
  assert len(str(error.value)) < 300


def mount_tmpfs(folder, options: str) -> None:
  """Mounts a tmpfs on `folder` with `options`, or skips the test saying why it cannot."""
  if not hasattr(os, "geteuid") or os.geteuid() != 0:
    pytest.skip("mounting a small tmpfs (a full or read-only disk) needs root")
  os.makedirs(folder, exist_ok=True)
  proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                        capture_output=True, text=True)
  if proc.returncode:
    pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")


def test_full_disk_ends_the_run_in_one_line(reference, tmp_path):
  """A 1.6 MB filesystem holds the run's first checkpoint (about 1 MB) but not a second: the run
  stops before writing it, with one line naming the checkpoint folder and the bytes needed, exit
  status 1, no traceback; the committed checkpoint stays and the lock is released."""
  path, _, env = reference[1]
  disk = tmp_path / "disk"
  mount_tmpfs(disk, "size=1600k")
  try:
    workdir = str(disk / "run")
    proc = forked.run(["train.py", f"--config={path}", f"--workdir={workdir}"], cwd=ROOT, env=env,
                      timeout=300)
    lines = [l for l in proc.stderr.replace("\r", "\n").splitlines()
             if l.strip() and not l.startswith("train:")]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: no space left on the device of {workdir}/checkpoints: "
                               "writing it needs about "), lines
    assert run_ckpt.committed_steps(workdir) == [1]
    assert os.path.getsize(os.path.join(workdir, "run.lock")) == 0
  finally:
    subprocess.run(["umount", str(disk)], check=False)


def test_full_disk_while_logging_metrics_is_one_line(tmp_path):
  """metrics.jsonl on a full filesystem: one OutOfSpaceError line naming it and the record's
  bytes, and the records written before it intact."""
  from runs import metrics as run_metrics
  disk = tmp_path / "disk"
  mount_tmpfs(disk, "size=256k")
  try:
    writer = run_metrics.MetricsWriter(str(disk))
    writer.log({"step": 1, "loss": 5.0})
    with open(disk / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
      while f.write(b"\0" * 4096):  # fills the disk
        pass
    with pytest.raises(run_guard.OutOfSpaceError) as e:
      writer.log({"step": 2, "loss": 4.0, "note": "x" * 8192})
    assert e.value.strerror.startswith(f"no space left on the device of {disk}/metrics.jsonl: "
                                       "writing it needs about 8.")
    assert "\n" not in e.value.strerror
    os.remove(disk / "filler")
    writer.close()
    assert [r["step"] for r in run_metrics.read_metrics(str(disk))] == [1]
  finally:
    subprocess.run(["umount", "--lazy", str(disk)], check=False)


def test_read_only_workdir_is_refused_before_anything(text_corpus, tmp_path):
  """A run folder (and a parent for a new one) on a read-only filesystem: refused in one line
  before anything is compiled (a read-only tmpfs as root, whom permissions do not bind; else
  a folder without write permission)."""
  disk = tmp_path / "disk"
  if hasattr(os, "geteuid") and os.geteuid() == 0:
    mount_tmpfs(disk, "size=64k")
    (disk / "run").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
  else:
    (disk / "run").mkdir(parents=True)
    os.chmod(disk / "run", 0o500)
    os.chmod(disk, 0o500)
  try:
    c = tiny_config(text_corpus, "rope")
    for workdir, message in ((disk / "run", "is not writable$"),
                             (disk / "new", r"is not writable \(cannot create it in")):
      with no_compilation(), pytest.raises(train.ConfigError, match=message):
        train.train_and_evaluate(c, str(workdir), devices=jax.devices()[:1])
  finally:
    if os.path.ismount(disk):
      subprocess.run(["umount", str(disk)], check=False)
    else:
      os.chmod(disk, 0o700)
      os.chmod(disk / "run", 0o700)


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


def nan_config(text_corpus, monkeypatch):
  """A learning rate so large that the first update overflows: the loss of step 2 is not finite.

  configs/field_ranges.py refuses learning rates above 1 before anything runs, so the fault is
  injected by widening that one range for the test: the guard under test exists for the NaNs no
  range can foresee (a bad batch, an unstable scheme), which a huge step reproduces at will.
  """
  monkeypatch.setitem(field_ranges.FIELD_RANGES, "train.learning_rate",
                      field_ranges.Float(0, low_open=True))
  c = tiny_config(text_corpus, "rope")
  c.train.num_steps = 6
  c.train.warmup_steps = 0
  c.train.learning_rate = 1e38
  c.train.checkpoint_every_steps = 1
  c.train.max_to_keep = 5
  return c


def test_nan_loss_stops_naming_the_step_and_the_last_good_checkpoint(text_corpus, tmp_path,
                                                                     monkeypatch):
  workdir = str(tmp_path / "nan")
  with pytest.raises(train.NonFiniteLossError) as e:
    train.train_and_evaluate(nan_config(text_corpus, monkeypatch), workdir,
                             devices=jax.devices()[:1])
  message = str(e.value)
  assert "non-finite loss or gradient at step 2" in message
  assert "last good checkpoint: step 1 in " in message
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1"]  # no NaN saved
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    text = f.read()
  assert "NaN" not in text and "Infinity" not in text


def test_nan_batches_can_be_skipped(text_corpus, tmp_path, monkeypatch):
  workdir = str(tmp_path / "skip")
  c = nan_config(text_corpus, monkeypatch)
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
  cmd = ["-m", "eval.run", f"--workdir={ref_dir}",
         "--config.eval.length_multipliers=(0.5, 1.0, 2.0)",
         "--config.eval.suites=ppl_vs_length,attention"]
  started = time.monotonic()
  done = forked.run(cmd, cwd=ROOT, env=env, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  duration = time.monotonic() - started
  for _ in range(2):
    proc = forked.Process(cmd, cwd=ROOT, env=env)
    time.sleep(float(rng.uniform(0.5, 1.0)) * duration)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for name in os.listdir(os.path.join(ref_dir, "eval")):
      if name.endswith(".json") and not name.startswith("."):
        with open(os.path.join(ref_dir, "eval", name)) as f:
          assert json.load(f)["suite"]
