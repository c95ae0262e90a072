"""Launches a study's runs: `python -m sweeps.launch <study> --backend=local|tpu|slurm --root=<dir>`
(local: --root defaults to workdirs/sweeps).

  python -m sweeps.launch sweeps/pe_extrapolation_cpu.py --backend=local --root=workdirs/sweeps
  python -m sweeps.launch sweeps.pe_extrapolation_cpu --backend=local --root=workdirs/sweeps --dry-run

`<study>` is a study file or module defining `STUDY` (sweeps/study.py). Every run's workdir is
`<root>/<study name>/<run name>`. Before anything is launched, every run's configs are checked as
train.py and eval.run check them (configs/validate.py, eval-time extensions, lengths), and every
command is parsed back with ml_collections' config_flags to the exact config the study means; a
bad study fails here with one line naming the run and the field (exit status 2).

A run is complete when its final checkpoint (train.num_steps) and every result it asks for are
in its workdir (sweeps/workdirs.py); complete runs are skipped, so launching again resumes a
study: a deleted or half-finished run re-runs (train.py resumes from its latest checkpoint), a
run whose training finished but some evaluation did not runs only those evaluations.

Backends:
  local   runs each pending run here as subprocesses (train.py, then `python -m eval.run` for
          each further evaluation), --parallel at a time, with one log per run
          (<root>/<study>/<run>/launch.log) and a progress bar over runs; a failed run does not
          stop the others; at the end a table of every run launched, and exit status 1 if any
          failed. With --devices_per_run=N this machine's devices are split into slots of N
          and each run executes on the first free slot, a one-process job that sees only its
          slot's devices (GPUs through CUDA_VISIBLE_DEVICES, a TPU VM's chips through libtpu's
          variables, and on CPU an emulation with N devices per process;
          sweeps/local_pack.py); the slot is named in the run's log.
  tpu     a TPU VM (or --parallel of them, named <tpu_name>-<i>) through `gcloud compute tpus
          tpu-vm`: create it unless it exists; on --worker=all install gcsfuse if missing and
          mount --tpu_bucket at --tpu_mount (--rename-dir-limit, so that Orbax's rename of a
          finished checkpoint works on a flat bucket), clone or fetch the code at --tpu_git_ref,
          make a Python 3.11 virtual environment with uv (TPU VM images ship Python 3.10, and
          JAX needs 3.11) and `uv pip install -e '.[tpu]'` into it (it has no pip and needs
          none: the default corpus is fetched with the standard library, data/corpora.py);
          then run each pending run's commands
          on --worker=all, one run at a time per TPU (one process per host; train.py's and
          eval.run's jax.distributed start-up joins them). --root is the
          workdirs' folder on the workers, an absolute path under the mount (train.py writes
          with file I/O, so no gs:// URL); this machine reads the runs' state through
          gs://<bucket>/... (etils.epath: needs gcsfs, `pip install -e '.[gcs]'`), or, without a
          bucket, at --root itself (a shared file system mounted here too). Logs:
          --log_root/<study>/<run>.log here.
  slurm   writes <root>/<study>/<run>/slurm.sbatch per pending run (the install of
          `-e <code>[cuda12]`, under flock, only when the venv is new or pyproject.toml changed;
          then `srun` train.py and eval.run on --slurm_nodes nodes, one process per node) and
          submits them with one `sbatch` as a job array (<root>/<study>/slurm_array.sbatch):
          each task gets one run's resources, --slurm_nodes x --slurm_gpus_per_node (by default
          one GPU), and runs that run's script; --slurm_array_max_running caps the tasks at
          once; --noslurm_array submits one job per run. --slurm_signal_grace seconds
          (default 120) before the time limit the tasks get SIGTERM (train.py saves a checkpoint) and the job requeues itself;
          a preempted job is requeued by SLURM (#SBATCH --requeue); a requeued job resumes from
          the checkpoint and skips the steps already done. --root and
          --slurm_code_dir must be folders every node sees, and the nodes' python3 must be
          >= 3.11 (e.g. --slurm_setup='module load python/3.11').

The mesh and batch checks before launching assume the devices a run gets: --num_devices, else
this machine's (local; --devices_per_run when given), the chips of --tpu_accelerator_type (tpu:
v2/v3 cores, v4/v5p chips = half the number in the name, v5e/v6e chips), or --slurm_nodes x
--slurm_gpus_per_node (slurm).

`--dry-run` prints exactly the commands (local, tpu) or scripts (slurm) that would run, for the
runs not yet complete, and launches nothing. (A dry run does not read a bucket: it lists every
run.)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import importlib.util
import json
import math
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

from absl import app, flags, logging

from configs.errors import ConfigError, parse_flags
from runs.files import atomic_write
from runs.checkpoint import committed_steps
from sweeps import cost
from sweeps import local_pack
from sweeps import search as search_lib
from sweeps import tpu_pack
from sweeps import workdirs
from sweeps.study import REPO_ROOT, ResultKey, Run, Study, check_commands, load_study, \
    validate_run

BACKENDS = ("local", "tpu", "slurm")
SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}")  # sbatch --time formats
PYTHON_VERSION = "3.11"  # pyproject.toml's requires-python; the tpu backend's venv has it
TPU_VENV_PYTHON = ".venv/bin/python"  # the tpu backend's interpreter, in the code folder
GCSFUSE_RENAME_DIR_LIMIT = 200_000  # files per renamed folder gcsfuse allows (Orbax's commit)
SLURM_SIGNAL_GRACE_S = 120  # default seconds between the time-limit notice and the limit
SLURM_MAX_SIGNAL_S = 65535  # the largest sig_time sbatch --signal accepts
LOG_NAME = "launch.log"
MANIFEST = "study.json"
SBATCH_NAME = "slurm.sbatch"
ARRAY_NAME = "slurm_array.sbatch"  # <root>/<study>/: the job array of a launch's pending runs
ARRAY_LOG = "slurm_array.log"  # beside it: the array tasks' dispatch lines


class LaunchError(ConfigError):
  """A launcher flag or the environment it needs is wrong; the message names the flag."""


# ---------------------------------------------------------------------------- planning


@dataclasses.dataclass(frozen=True)
class Step:
  """One command of a run.

  Attributes:
    label: "train" or "eval <i>".
    argv: what is executed (no shell for local runs; `bash -c <line>` for tpu).
    line: the same as one shell line (what --dry-run prints).
    results: the results it writes (checked after it ran).
  """

  label: str
  argv: tuple[str, ...]
  line: str
  results: tuple[ResultKey, ...] = ()


@dataclasses.dataclass(frozen=True)
class Planned:
  """A run of the study with its workdir and state.

  Attributes:
    run: the run.
    workdir: its workdir as its commands see it (<root>/<study>/<run>).
    state_dir: the same folder as this machine reads it (a gs:// URL for a TPU bucket).
    state: where it stands (None: not read, e.g. a dry run on a bucket).
  """

  run: Run
  workdir: str
  state_dir: str
  state: workdirs.RunState | None

  @property
  def pending(self) -> bool:
    """True unless the run is known to be complete."""
    return self.state is None or not self.state.complete


def tpu_devices(accelerator_type: str) -> int | None:
  """JAX devices of a Cloud TPU slice, from its accelerator type; None if not recognised.

  v2-N and v3-N count TensorCores, one device each; v4-N and v5p-N count TensorCores too, but
  two make one device (megacore), so N/2; v5litepod-N, v5e-N and v6e-N count chips, one device
  each. (Cloud TPU docs, "TPU versions".)

  Args:
    accelerator_type: e.g. "v4-32", "v5p-64", "v5litepod-16", "v6e-8".
  """
  family, _, count = accelerator_type.lower().partition("-")
  if not count.isdigit() or int(count) < 1:
    return None
  n = int(count)
  if family in ("v2", "v3", "v5litepod", "v5e", "v6e"):
    return n
  if family in ("v4", "v5p"):
    return max(1, n // 2)
  return None


def default_num_devices(run: Run) -> int:
  """Devices assumed for a remote run's checks when the launcher cannot tell: the product of
  the fixed mesh axes."""
  m = run.config.mesh
  return math.prod(s for s in (m.data, m.fsdp, m.tensor) if s != -1)


def plan(study: Study, root: str, *, num_devices: int | None, read_state: bool,
         state_root: str | None = None) -> list[Planned]:
  """Checks every run of `study` and reads where each stands under `root`.

  Args:
    study: the study.
    root: the sweep root as the runs see it.
    num_devices: devices each run sees (None: `default_num_devices` of each run).
    read_state: read each workdir (False: every run is listed as pending).
    state_root: the sweep root as this machine reads it (None: `root`; a gs:// URL for a
      bucket that the TPU workers mount).

  Returns:
    One Planned per run, in the study's order.

  Raises:
    ConfigError: a bad study, run config or command (before anything is launched).
    LaunchError: a root that cannot be read, or a gs:// root to read without gcsfs installed
      (the message says `pip install -e '.[gcs]'`).
  """
  state_root = state_root or root
  if read_state and workdirs.is_remote(state_root) and state_root.startswith("gs://") \
      and importlib.util.find_spec("gcsfs") is None:
    raise LaunchError(f"reading the runs' state at {state_root} needs gcsfs here: "
                      "pip install -e '.[gcs]' (and gcloud auth application-default login)")
  runs = study.runs()
  check_commands(runs, study.base_config())
  out = []
  for run in runs:
    validate_run(run, num_devices or default_num_devices(run))
  for run in runs:
    workdir = workdirs.join(root, study.name, run.name)
    state_dir = workdirs.join(state_root, study.name, run.name)
    state = None
    if read_state:
      try:
        state = workdirs.run_state(run, state_dir)
      except Exception as e:  # epath raises the bucket library's own errors
        raise LaunchError(f"cannot read {state_dir}: {e}"
                          + (" (gs:// needs `pip install -e '.[gcs]'` and `gcloud auth "
                             "application-default login`)" if workdirs.is_remote(state_root)
                             else "")) from None
    out.append(Planned(run, workdir, state_dir, state))
  return out


def parent_workdir(planned: Planned) -> str | None:
  """A child run's parent's workdir (its sibling under <root>/<study>); None for other runs."""
  if planned.run.parent is None:
    return None
  return workdirs.join(os.path.dirname(planned.workdir.rstrip("/")), planned.run.parent)


def run_steps(planned: Planned, python: str, config_arg: str) -> list[Step]:
  """The commands a pending run needs: train.py unless only evaluations are missing, then the
  eval.run invocations with missing results (all of them when the state is unknown)."""
  run, state = planned.run, planned.state
  steps = []
  if state is None or state.train:
    parent = parent_workdir(planned)
    for i, argv in enumerate(run.before_argv(python, planned.workdir, parent or "")):
      steps.append(Step(f"before {i}", tuple(argv), shlex.join(argv)))
    argv = run.train_argv(python, config_arg, planned.workdir, parent)
    steps.append(Step("train", tuple(argv), shlex.join(argv), run.train_results))
  for i, command in enumerate(run.evals):
    if state is None or command in state.evals:
      argv = run.eval_argv(command, python, planned.workdir)
      steps.append(Step(f"eval {i}", tuple(argv), shlex.join(argv), command.results))
  return steps


def manifest(study: Study, planned: Sequence[Planned]) -> dict:
  """The study as launched (read by sweeps.collect): config, common fields, and per run its
  training fields, evaluation points, eval.run fields and expected results."""
  return {
      "study": study.name, "description": study.description, "config": study.config_arg(),
      "common": dict(study.common), "written": datetime.datetime.now().isoformat(timespec="seconds"),
      "runs": [{"name": p.run.name, "parent": p.run.parent,
                "config": p.run.child_config or p.run.base,
                "overrides": dict(p.run.overrides),
                "eval_points": [dict(e) for e in p.run.eval_points],
                "evals": [dict(e.overrides) for e in p.run.evals],
                "results": [k._asdict() for k in p.run.results]} for p in planned]}


def write_text(path: str, text: str) -> None:
  """Writes `text` to a local path atomically (runs/files.py) or to a bucket object (objects
  appear whole when the upload completes)."""
  if workdirs.is_remote(path):
    from etils import epath
    epath.Path(path).write_text(text)
    return
  def write(tmp):
    with open(tmp, "w") as f:
      f.write(text)
  atomic_write(path, write)


# ---------------------------------------------------------------------------- execution


@dataclasses.dataclass
class Outcome:
  """How a launched run ended: status "ok" | "failed" | "submitted" (slurm)."""

  run: str
  status: str
  seconds: float
  detail: str
  log: str


def _tail(path: str, lines: int = 3) -> str:
  """The last non-empty lines of a log, joined with ' | ' (progress-bar carriage returns cut)."""
  try:
    with open(path, errors="replace") as f:
      text = f.read()[-20000:]
  except OSError:
    return ""
  rows = [r.split("\r")[-1].strip() for r in text.splitlines()]
  return " | ".join([r for r in rows if r][-lines:])


def execute(name: str, steps: Sequence[Step], log_path: str,
            check: Callable[[int], str] | None = None,
            slot: local_pack.LocalSlot | None = None) -> Outcome:
  """Runs `steps` in order from the repository root, appending their output to `log_path`;
  stops at the first that fails. `check(i)` (if given) is called after step i succeeded and
  returns what is wrong ('' = nothing), which fails the run too. With a `slot` (the local
  backend's --devices_per_run), every step runs with the slot's variables added to this
  process's environment, and the log names the slot.

  Returns:
    The run's Outcome ("ok" or "failed", with the failed command's exit status and the log's
    last lines, or what `check` found).
  """
  os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
  start = time.perf_counter()
  env = None if slot is None else os.environ | dict(slot.env)
  where = "" if slot is None else f" on {slot.describe()}"
  prefix = "" if slot is None else slot.assignments() + " "
  with open(log_path, "a") as log:
    for i, step in enumerate(steps):
      log.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} {name}: "
                f"{step.label}{where}\n$ {prefix}{step.line}\n")
      log.flush()
      rc = subprocess.run(list(step.argv), cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, env=env).returncode
      problem = f"{step.label} exited {rc}" if rc else (check(i) if check else "")
      if problem:
        log.write(f"=== {problem}\n")
        log.flush()
        detail = f"{problem}: {_tail(log_path)}" if rc else problem
        return Outcome(name, "failed", time.perf_counter() - start, detail, log_path)
    seconds = time.perf_counter() - start
    log.write(f"=== {datetime.datetime.now().isoformat(timespec='seconds')} {name}: done"
              f"{where} ({_duration(seconds)})\n")
  return Outcome(name, "ok", seconds, "", log_path)


def _checker(planned: Planned, steps: Sequence[Step]) -> Callable[[int], str]:
  """A `check` for `execute`: after step i, every result of steps 0..i must be in eval/ at the
  final step (a later eval.run that writes an earlier result's file name is caught here), and
  after the last step the run must be complete."""
  def check(i: int) -> str:
    run = planned.run
    if i < len(steps) - 1:
      present = workdirs.present_results(planned.state_dir, run.num_steps)
      lost = [k for s in steps[:i + 1] for k in s.results if k not in present]
      if not lost:
        return ""
    else:
      state = workdirs.run_state(run, planned.state_dir)
      if state.complete:
        return ""
      if not state.trained:
        return f"no finalized checkpoint at step {run.num_steps} in {planned.workdir}/checkpoints"
      lost = list(state.missing)
    return (f"after {steps[i].label}, results missing in eval/: "
            + "; ".join(k.describe() for k in lost)
            + (" (a later eval.run wrote the same file name over them)" if i else ""))
  return check


def run_all(jobs: Sequence[tuple[str, Callable[[], Outcome]]], parallel: int, desc: str,
            after: dict[str, str] | None = None) -> list[Outcome]:
  """Runs `jobs` ((name, fn() -> Outcome)) `parallel` at a time with a progress bar over jobs;
  a job that raises is a failed Outcome. `after` maps a job to the job that must end "ok"
  before it starts (a child after its parent; a name not among the jobs is already done); a
  job whose prerequisite failed fails without running. Jobs start in their order as soon as a
  slot is free and their prerequisite is done. Returns the outcomes in the jobs' order."""
  from tqdm import tqdm
  after = after or {}
  names = {name for name, _ in jobs}
  outcomes: dict[str, Outcome] = {}
  bar = tqdm(total=len(jobs), desc=desc, unit="run", dynamic_ncols=True)
  failed = 0

  def finish(name: str, outcome: Outcome) -> None:
    nonlocal failed
    outcomes[name] = outcome
    failed += outcome.status == "failed"
    bar.set_postfix(failed=failed)
    bar.write(f"{outcome.status:>9}  {name}  ({_duration(outcome.seconds)})")
    bar.update(1)

  waiting = list(jobs)
  with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
    running: dict[concurrent.futures.Future, str] = {}
    while waiting or running:
      for name, fn in list(waiting):
        first = after.get(name)
        if first in names and first not in outcomes:
          continue  # its prerequisite has not ended yet
        if first in outcomes and outcomes[first].status != "ok":
          waiting.remove((name, fn))
          finish(name, Outcome(name, "failed", 0.0, f"not run: its parent {first} "
                               f"{outcomes[first].status}", ""))
          continue
        if len(running) < parallel:
          waiting.remove((name, fn))
          running[pool.submit(fn)] = name
      if not running:
        continue  # everything left was just failed for a failed prerequisite
      done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
      for future in done:
        name = running.pop(future)
        try:
          outcome = future.result()
        except Exception as e:  # a launcher-side error in one run must not stop the others
          outcome = Outcome(name, "failed", 0.0, f"{type(e).__name__}: {e}", "")
        finish(name, outcome)
  bar.close()
  return [outcomes[name] for name, _ in jobs]


def _duration(seconds: float) -> str:
  """e.g. 11m32s."""
  m, s = divmod(int(round(seconds)), 60)
  return f"{m}m{s:02d}s" if m else f"{s}s"


def summary_table(outcomes: Sequence[Outcome]) -> str:
  """The outcomes as a fixed-width table (run, status, time, detail cut to 100 characters,
  log), then each failure's whole detail."""
  import pandas as pd
  frame = pd.DataFrame([{"run": o.run, "status": o.status, "time": _duration(o.seconds),
                         "detail": o.detail if len(o.detail) <= 100 else o.detail[:97] + "...",
                         "log": o.log} for o in outcomes])
  with pd.option_context("display.max_colwidth", 200, "display.width", 250):
    table = frame.to_string(index=False)
  failures = [f"FAILED {o.run}: {o.detail}\n  log: {o.log}" for o in outcomes
              if o.status == "failed"]
  return "\n".join([table, *failures])


# ---------------------------------------------------------------------------- backends


def one_process_steps(steps: Sequence[Step]) -> list[Step]:
  """`steps` as one-process jobs: train.py and eval.run get `--distributed=off` (a run packed
  on some of this machine's devices is not a member of a cluster)."""
  out = []
  for step in steps:
    tail = tpu_pack.one_process_tail(step.label)
    out.append(dataclasses.replace(step, argv=step.argv + tuple(tail.split()),
                                   line=step.line + tail))
  return out


def launch_local(study: Study, planned: Sequence[Planned], *, python: str, parallel: int,
                 dry_run: bool, slots: Sequence[local_pack.LocalSlot] = ()) -> list[Outcome]:
  """Runs (or, dry, prints) the pending runs here, `parallel` at a time; with `slots`
  (--devices_per_run, sweeps/local_pack.py), each run on the first free slot, confined to its
  devices (`parallel` <= len(slots))."""
  config_arg = study.config_arg()
  todo = [p for p in planned if p.pending]
  steps_of = ((lambda p: one_process_steps(run_steps(p, python, config_arg))) if slots
              else (lambda p: run_steps(p, python, config_arg)))
  if dry_run:
    print(f"# the commands run in {REPO_ROOT}")
    if slots:
      print(f"# {len(slots)} slot{'s' * (len(slots) > 1)} of {len(slots[0].devices)} device(s), "
            f"{parallel} used: each run starts on the first free slot, every command with that "
            "slot's variables:")
      for slot in slots[:parallel]:
        print(f"#   {slot.describe()}: {slot.assignments()}")
    for p in todo:
      print(f"# run {p.run.name}" + (f" ({p.state.describe()})" if p.state else "")
            + (f"; warm start from {p.run.parent}" if p.run.parent else ""))
      for step in steps_of(p):
        print(("# before training: " if step.label.startswith("before") else "") + step.line)
    return []
  free: "queue.SimpleQueue[local_pack.LocalSlot]" = queue.SimpleQueue()
  for slot in slots[:parallel]:
    free.put(slot)

  def job(p: Planned) -> Outcome:
    steps = steps_of(p)
    slot = free.get() if slots else None  # run_all starts at most `parallel` jobs at once
    try:
      return execute(p.run.name, steps, os.path.join(p.workdir, LOG_NAME), _checker(p, steps),
                     slot)
    finally:
      if slot is not None:
        free.put(slot)
  jobs = [(p.run.name, lambda p=p: job(p)) for p in children_first(todo)]
  outcomes = {o.run: o for o in run_all(jobs, parallel, study.name,
                                        after={p.run.name: p.run.parent for p in todo
                                               if p.run.parent})}
  return [outcomes[p.run.name] for p in todo]


def children_first(planned: Sequence[Planned]) -> list[Planned]:
  """`planned` with each run's children right after it (depth first, otherwise in order): a
  slot freed when a parent ends goes to its children before the runs listed after them, so a
  study stopped early has whole families rather than parents alone."""
  kids: dict[str, list[Planned]] = {}
  for p in planned:
    if p.run.parent:
      kids.setdefault(p.run.parent, []).append(p)
  names = {p.run.name for p in planned}
  out: list[Planned] = []

  def visit(p: Planned) -> None:
    out.append(p)
    for child in kids.get(p.run.name, []):
      visit(child)

  for p in planned:
    if not p.run.parent or p.run.parent not in names:
      visit(p)
  return out


@dataclasses.dataclass(frozen=True)
class TpuOptions:
  """gcloud settings of the tpu backend (see the --tpu_* flags)."""

  name: str
  zone: str
  project: str
  accelerator_type: str
  runtime_version: str
  spot: bool
  repo: str
  git_ref: str
  code_dir: str
  jax_requirement: str
  python: str
  bucket: str
  mount: str
  chips_per_run: int = 0  # 0: each run takes the whole slice; N: packed runs (sweeps/tpu_pack.py)


def _gcloud(opts: TpuOptions, verb: str, tpu: str, *extra: str) -> str:
  """`gcloud compute tpus tpu-vm <verb> <tpu> --zone=... [--project=...] <extra>` as a line."""
  argv = ["gcloud", "compute", "tpus", "tpu-vm", verb, tpu, f"--zone={opts.zone}"]
  if opts.project:
    argv.append(f"--project={opts.project}")
  return shlex.join(argv + list(extra))


# gcsfuse from Google's apt repository, when the image lacks it (Cloud Storage FUSE docs).
GCSFUSE_INSTALL = (
    "command -v gcsfuse >/dev/null || { "
    "curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg "
    "| sudo tee /usr/share/keyrings/cloud.google.asc >/dev/null && "
    "echo \"deb [signed-by=/usr/share/keyrings/cloud.google.asc] "
    "https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -cs) main\" "
    "| sudo tee /etc/apt/sources.list.d/gcsfuse.list >/dev/null && "
    "sudo apt-get update -qq && sudo apt-get install -y -qq gcsfuse; }; ")
# uv (Astral's installer), which makes a venv with a Python the image does not have.
UV_INSTALL = ("[ -x \"$HOME/.local/bin/uv\" ] || curl -LsSf https://astral.sh/uv/install.sh "
              "| sh -s -- --quiet; ")


def tpu_setup_lines(opts: TpuOptions, tpu: str) -> list[str]:
  """Shell lines that create the TPU VM `tpu` unless it exists, then on every worker install
  gcsfuse if missing and mount the bucket (if any), put the code at `opts.git_ref` in
  `opts.code_dir` (cloned from `opts.repo`, or fetched after pointing `origin` at it) and
  install it with its `tpu` extra (jax[tpu]; plus `opts.jax_requirement` if set): into a Python
  `PYTHON_VERSION` venv made with uv (`TPU_VENV_PYTHON`; it has no pip, and needs none: the
  default corpus is fetched with the standard library, data/corpora.py), or with
  `opts.python -m pip` when --python names an interpreter.

  Returns:
    Two shell lines: `gcloud ... describe || gcloud ... create`, then the `gcloud ... ssh
    --worker=all` that sets every worker up.
  """
  create = [f"--accelerator-type={opts.accelerator_type}", f"--version={opts.runtime_version}"]
  if opts.spot:
    create.append("--spot")
  code = shlex.quote(opts.code_dir)
  mount = ""
  if opts.bucket:
    m = shlex.quote(opts.mount)
    mount = (f"{GCSFUSE_INSTALL}sudo mkdir -p {m} && sudo chown \"$(id -u)\" {m}; "
             f"mountpoint -q {m} || gcsfuse --implicit-dirs "
             f"--rename-dir-limit={GCSFUSE_RENAME_DIR_LIMIT} {shlex.quote(opts.bucket)} {m}; ")
  repo = shlex.quote(opts.repo)
  code_lines = (f"if [ -d {code}/.git ]; then git -C {code} remote set-url origin {repo} && "
                f"git -C {code} fetch --quiet origin; else git clone --quiet {repo} {code}; fi; "
                f"git -C {code} checkout --quiet --detach {shlex.quote(opts.git_ref)}; ")
  # the code with its `tpu` extra (jax[tpu]), and --jax_requirement if given
  what = shlex.join(["-e", ".[tpu]"] + ([opts.jax_requirement] if opts.jax_requirement else []))
  if opts.python == TPU_VENV_PYTHON:
    uv = '"$HOME/.local/bin/uv"'
    install = (f"{UV_INSTALL}cd {code} && {{ [ -x {TPU_VENV_PYTHON} ] || {uv} venv --quiet "
               f"--python {PYTHON_VERSION} .venv; }} && {uv} pip install --quiet "
               f"--python {TPU_VENV_PYTHON} {what}")
  else:
    install = f"cd {code} && {shlex.quote(opts.python)} -m pip install --quiet {what}"
  remote = f"set -e; {mount}{code_lines}{install}"
  return [f"{_gcloud(opts, 'describe', tpu)} >/dev/null 2>&1 || {_gcloud(opts, 'create', tpu, *create)}",
          _gcloud(opts, "ssh", tpu, "--worker=all", f"--command={remote}")]


def tpu_run_steps(opts: TpuOptions, tpu: str, planned: Planned, config_arg: str,
                  slot: tpu_pack.Slot | None = None) -> list[Step]:
  """A run's commands from the code folder: on every worker of `tpu` (the whole slice), or, for
  a packed run, on its `slot`'s worker confined to the slot's chips (sweeps/tpu_pack.py)."""
  steps = []
  for step in run_steps(planned, opts.python, config_arg):
    line = step.line if slot is None else tpu_pack.packed_line(step.line, slot, step.label)
    remote = f"cd {shlex.quote(opts.code_dir)} && {line}"
    worker = "--worker=all" if slot is None else f"--worker={slot.worker}"
    line = _gcloud(opts, "ssh", tpu, worker, f"--command={remote}")
    steps.append(Step(step.label, ("bash", "-c", line), line, step.results))
  return steps


def launch_tpu(study: Study, planned: Sequence[Planned], opts: TpuOptions, *, parallel: int,
               dry_run: bool, log_root: str) -> list[Outcome]:
  """Runs (or, dry, prints) the pending runs on `parallel` TPU VMs: one run at a time on each
  whole slice, or, with `opts.chips_per_run`, one run at a time on each slot of
  `opts.chips_per_run` chips of every worker (sweeps/tpu_pack.py), side by side."""
  config_arg = study.config_arg()
  todo = [p for p in planned if p.pending]
  tpus = [opts.name] if parallel == 1 else [f"{opts.name}-{i}" for i in range(parallel)]
  lanes = [(tpu, slot) for tpu in tpus for slot in (
      tpu_pack.slots(opts.accelerator_type, opts.chips_per_run) if opts.chips_per_run
      else [None])]
  assigned = {i: todo[i::len(lanes)] for i in range(len(lanes))}
  if dry_run:
    for tpu in tpus:
      print(f"# TPU {tpu}: create unless it exists, fetch the code, install (every worker)")
      for line in tpu_setup_lines(opts, tpu):
        print(line)
      mine = [i for i, (t, _) in enumerate(lanes) if t == tpu]
      if opts.chips_per_run:
        print(f"# TPU {tpu}: {len(mine)} runs side by side, {opts.chips_per_run} chip(s) each "
              f"(--tpu_chips_per_run), one at a time per slot")
      for i in mine:
        slot = lanes[i][1]
        for p in assigned[i]:
          print(f"# run {p.run.name} on {tpu}" + (f" ({slot.describe()})" if slot else "")
                + (f" ({p.state.describe()})" if p.state else ""))
          for step in tpu_run_steps(opts, tpu, p, config_arg, slot):
            print(step.line)
    return []
  lock = threading.Lock()
  results: list[Outcome] = []
  from tqdm import tqdm
  bar = tqdm(total=len(todo), desc=study.name, unit="run", dynamic_ncols=True)

  def setup(tpu: str) -> Outcome:
    steps = [Step("setup", ("bash", "-c", line), line) for line in tpu_setup_lines(opts, tpu)]
    return execute(f"setup {tpu}", steps, os.path.join(log_root, study.name, f"_setup_{tpu}.log"))

  def lane(i: int, ready: Outcome) -> None:
    tpu, slot = lanes[i]
    for p in assigned[i]:
      if ready.status != "ok":
        done = Outcome(p.run.name, "failed", 0.0, f"TPU {tpu} setup failed: {ready.detail}",
                       ready.log)
      else:
        steps = tpu_run_steps(opts, tpu, p, config_arg, slot)
        done = execute(p.run.name, steps, os.path.join(log_root, study.name, f"{p.run.name}.log"),
                       _checker(p, steps))
      with lock:
        results.append(done)
        bar.write(f"{done.status:>9}  {done.run}  ({_duration(done.seconds)})")
        bar.update(1)

  with concurrent.futures.ThreadPoolExecutor(max_workers=len(tpus)) as pool:
    ready = dict(zip(tpus, pool.map(setup, tpus)))
  with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
    for future in [pool.submit(lane, i, ready[lanes[i][0]]) for i in range(len(lanes))]:
      future.result()
  bar.close()
  order = {p.run.name: i for i, p in enumerate(todo)}
  return sorted(results, key=lambda o: order[o.run])


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
  """sbatch settings of the slurm backend (see the --slurm_* flags).

  Attributes:
    signal_grace: seconds before the time limit at which the job is told to stop
      (`#SBATCH --signal=B:USR1@<signal_grace>`): time for train.py to save a checkpoint.
    jax_requirement: an extra pip requirement installed with the code ('' = none; the code's
      `cuda12` extra is installed when gpus_per_node > 0).
    array: submit a launch's pending runs as one job array, each task one run's resources
      (`array_script`); False: one job per run.
    array_max_running: the array's `%` limit on tasks at once (0: none).
  """

  nodes: int
  gpus_per_node: int
  cpus_per_task: int
  time: str
  partition: str
  account: str
  setup: tuple[str, ...]
  code_dir: str
  venv: str
  jax_requirement: str
  signal_grace: int = SLURM_SIGNAL_GRACE_S
  array: bool = True
  array_max_running: int = 0


def slurm_time_seconds(limit: str) -> int:
  """An sbatch --time limit in seconds.

  Args:
    limit: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes or
      days-hours:minutes:seconds (SLURM's formats, `SLURM_TIME`).

  Raises:
    LaunchError: `limit` is in none of those formats.
  """
  if not SLURM_TIME.fullmatch(limit):
    raise LaunchError(f"--slurm_time={limit!r} is not a SLURM time limit: minutes, "
                      "minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes or "
                      "days-hours:minutes:seconds")
  days, dash, rest = limit.rpartition("-")
  parts = [int(x) for x in rest.split(":")]
  if dash:  # days-hours[:minutes[:seconds]]
    h, m, sec = (parts + [0, 0])[:3]
    return ((int(days) * 24 + h) * 60 + m) * 60 + sec
  if len(parts) == 1:
    return parts[0] * 60
  if len(parts) == 2:
    return parts[0] * 60 + parts[1]
  return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def check_signal_grace(grace: int, limit: str) -> int:
  """Checks --slurm_signal_grace against --slurm_time; returns `grace` (seconds).

  Raises:
    LaunchError: `limit` is not a SLURM time limit, or `grace` is < 1 s, > 65535 s (sbatch's
      largest) or not shorter than `limit`.
  """
  seconds = slurm_time_seconds(limit)
  if not 1 <= grace <= SLURM_MAX_SIGNAL_S or grace >= seconds:
    raise LaunchError(f"--slurm_signal_grace={grace} must be >= 1 s, <= {SLURM_MAX_SIGNAL_S} s "
                      f"and shorter than --slurm_time={limit} ({seconds} s)")
  return grace


def steps_in_place(workdir: str, num_steps: int | str, results: str) -> list[int]:
  """The steps of a run that need not run again: those whose every result is in
  `<workdir>/eval/` at the final checkpoint (`num_steps`), which must be committed (none when it
  is not). A requeued slurm job's script asks this once, before its steps (`sbatch_script`).

  Args:
    workdir: the run's workdir.
    num_steps: train.num_steps (an int, or its decimal string from the command line).
    results: JSON list, per step in order, of the list of its ResultKeys as dicts
      (`ResultKey._asdict()`).

  Returns:
    The indices (0-based, in `results`' order) of the steps whose results are in place.

  Raises:
    OSError: the workdir cannot be read; ValueError / TypeError: malformed arguments.
  """
  step = int(num_steps)
  if step not in committed_steps(workdir):
    return []
  present = workdirs.present_results(workdir, step)
  return [i for i, keys in enumerate(json.loads(results))
          if all(ResultKey(**k) in present for k in keys)]


# The part of every sbatch script that handles the time limit, preemption and requeues.
SLURM_STEPS = r"""# Time limit: SLURM sends SIGUSR1 to this script {grace} s before it (--signal=B:USR1@{grace});
# the trap passes SIGTERM to every task of the running step (scancel --signal=TERM signals the
# steps, not this script: train.py on each node saves a checkpoint and exits 0), runs no further
# step and requeues the job, so the script starts again from the top and train.py resumes from
# that checkpoint. Preemption: SLURM sends SIGTERM to every process itself and requeues the job
# (--requeue); this script waits for the step to stop and runs no further step. A requeued start
# (SLURM_RESTART_COUNT > 0) skips each step whose results are already in the workdir.
stop=""
trap 'stop=timelimit; echo "sweeps.launch: time limit in {grace} s: SIGTERM to the tasks; the job will be requeued" >&2; scancel --signal=TERM "$SLURM_JOB_ID" || true' USR1
trap 'stop=${{stop:-terminated}}; echo "sweeps.launch: SIGTERM (preempted or cancelled): waiting for the step to stop" >&2' TERM
in_place=""
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then
  in_place=$({python} -c 'import sys; from sweeps.launch import steps_in_place; print(*steps_in_place(*sys.argv[1:]))' {workdir} {num_steps} {results}) || in_place=""  # unread: run them
fi
run_step() {{  # run_step <index> <label> <command...>
  local index=$1 label=$2 pid rc=0
  shift 2
  [ -z "$stop" ] || return 0
  case " $in_place " in *" $index "*)
    echo "sweeps.launch: $label: its results are in place; skipped (restart $SLURM_RESTART_COUNT)" >&2
    return 0;;
  esac
  "$@" &  # in the background, so that the traps run at once, not when the step ends
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
  wait "$pid" || rc=$?
  [ -z "$stop" ] || return 0  # stopped by a signal: its exit status is the signal's
  return "$rc"
}}"""


def sbatch_script(opts: SlurmOptions, study: Study, planned: Planned) -> str:
  """The sbatch script of one run: resources, setup lines, the install step (once per venv,
  serialized by flock), then each command through srun, one process per node, each under
  `run_step` (SLURM_STEPS): `--signal_grace` seconds before the time limit the tasks get
  SIGTERM (train.py saves a checkpoint) and the job requeues itself; a preempted job is
  requeued by SLURM (`#SBATCH --requeue`); a requeued start skips the steps already done.
  Running the script again is safe at any point: the install runs only when needed, train.py
  resumes from its latest checkpoint, results are written atomically."""
  python = os.path.join(opts.venv, "bin", "python")
  directives = [f"--job-name={study.name}/{planned.run.name}",
                f"--output={os.path.join(planned.workdir, LOG_NAME)}", "--open-mode=append",
                *resource_directives(opts)]
  venv, code = shlex.quote(opts.venv), shlex.quote(opts.code_dir)
  stamp = shlex.quote(os.path.join(opts.venv, ".installed"))
  version = tuple(int(x) for x in PYTHON_VERSION.split("."))
  what = shlex.join(["-e", opts.code_dir + ("[cuda12]" if opts.gpus_per_node else "")]
                    + ([opts.jax_requirement] if opts.jax_requirement else []))
  install = (f"[ -x {shlex.quote(python)} ] || {{ python3 -c 'import sys; "
             f"sys.exit(sys.version_info < {version})' || {{ echo \"error: python3 on $(hostname) "
             f"is $(python3 -V 2>&1); the runs need >= {PYTHON_VERSION}: load one with "
             f"--slurm_setup\" >&2; exit 2; }}; python3 -m venv {venv}; }}; "
             f"{{ [ {stamp} -nt {code}/pyproject.toml ] && [ \"$(cat {stamp})\" = "
             f"{shlex.quote(what)} ]; }} || {{ {shlex.quote(python)} -m pip install --quiet "
             f"{what} && printf '%s\\n' {shlex.quote(what)} > {stamp}; }}")
  srun = f"srun --nodes={opts.nodes} --ntasks-per-node=1 --kill-on-bad-exit=1"
  lines = ["#!/bin/bash"] + [f"#SBATCH {d}" for d in directives] + [
      f"# study {study.name}, run {planned.run.name}: written by sweeps.launch", "set -euo pipefail",
      *opts.setup, f"cd {shlex.quote(opts.code_dir)}",
      "# install: when the venv is new, pyproject.toml changed or the install line did (the "
      "code is installed editable); flock keeps concurrent jobs from installing at once",
      f"flock {shlex.quote(opts.venv + '.lock')} bash -c {shlex.quote(install)}",
  ]
  steps = run_steps(planned, python, study.config_arg())
  results = json.dumps([[k._asdict() for k in s.results] for s in steps], separators=(",", ":"))
  lines.append(SLURM_STEPS.format(grace=opts.signal_grace, python=shlex.quote(python),
                                  workdir=shlex.quote(planned.workdir),
                                  num_steps=planned.run.num_steps, results=shlex.quote(results)))
  for i, step in enumerate(steps):
    lines.append(f"run_step {i} {shlex.quote(step.label)} {srun} {step.line}")
  lines += ['if [ "$stop" = timelimit ]; then scontrol requeue "$SLURM_JOB_ID"; fi']
  return "\n".join(lines) + "\n"


def resource_directives(opts: SlurmOptions) -> list[str]:
  """The #SBATCH options of one run's resources, limits and requeueing (without the job's name
  and output): the same for a run's own job and for each task of a job array."""
  out = [f"--nodes={opts.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={opts.cpus_per_task}",
         f"--time={opts.time}", f"--signal=B:USR1@{opts.signal_grace}", "--requeue"]
  if opts.gpus_per_node:
    out.append(f"--gpus-per-node={opts.gpus_per_node}")
  if opts.partition:
    out.append(f"--partition={opts.partition}")
  if opts.account:
    out.append(f"--account={opts.account}")
  return out


def array_script(opts: SlurmOptions, study: Study, runs: Sequence[Planned], folder: str) -> str:
  """The sbatch script of a job array over `runs` (their slurm.sbatch written beside each
  workdir): task i takes the resources of one run (--slurm_nodes x --slurm_gpus_per_node,
  by default one GPU), sends its output to run i's launch.log and becomes run i's script
  (`exec`, so the time-limit signal and the requeue of `SLURM_STEPS` act on this task alone:
  in an array task SLURM_JOB_ID is the task's own job id). At most
  `opts.array_max_running` tasks run at once (0: as many as the cluster gives). The
  dispatcher's own lines go to `<folder>/slurm_array.log`."""
  limit = f"%{opts.array_max_running}" if opts.array_max_running else ""
  directives = [f"--job-name={study.name}", f"--array=0-{len(runs) - 1}{limit}",
                f"--output={os.path.join(folder, ARRAY_LOG)}", "--open-mode=append",
                *resource_directives(opts)]
  table = "\n".join(f"  {shlex.quote(p.workdir)}  # {i}" for i, p in enumerate(runs))
  return "\n".join(["#!/bin/bash"] + [f"#SBATCH {d}" for d in directives] + [
      f"# study {study.name}: {len(runs)} runs as one job array, written by sweeps.launch",
      "set -euo pipefail",
      f"workdirs=(\n{table}\n)",
      'workdir=${workdirs[$SLURM_ARRAY_TASK_ID]}',
      'echo "sweeps.launch: array task $SLURM_ARRAY_TASK_ID (job $SLURM_JOB_ID, restart '
      '${SLURM_RESTART_COUNT:-0}) on $(hostname): $workdir" >&2',
      f'exec bash "$workdir/{SBATCH_NAME}" >> "$workdir/{LOG_NAME}" 2>&1']) + "\n"


def launch_slurm(study: Study, planned: Sequence[Planned], opts: SlurmOptions, *,
                 dry_run: bool, folder: str) -> list[Outcome]:
  """Writes and submits (or, dry, prints) one sbatch script per pending run, and, with
  `opts.array` and more than one run, submits them as one job array (`array_script`, written
  to `<folder>/slurm_array.sbatch`) instead of one job each."""
  todo = [p for p in planned if p.pending]
  array = opts.array and len(todo) > 1
  outcomes = []
  for p in todo:
    script = sbatch_script(opts, study, p)
    path = os.path.join(p.workdir, SBATCH_NAME)
    if dry_run:
      print(f"# run {p.run.name}" + (f" ({p.state.describe()})" if p.state else "") + f": {path}")
      print(script, end="")
      if not array:
        print(shlex.join(["sbatch", path]))
      continue
    write_text(path, script)
    if not array:
      outcomes += _submit(path, [p])
  if not array:
    return outcomes
  script, path = array_script(opts, study, todo, folder), os.path.join(folder, ARRAY_NAME)
  if dry_run:
    print(f"# the job array: task i runs run i above ({len(todo)} tasks): {path}")
    print(script, end="")
    print(shlex.join(["sbatch", path]))
    return []
  write_text(path, script)
  return _submit(path, todo)


def _submit(path: str, runs: Sequence[Planned]) -> list[Outcome]:
  """`sbatch <path>`: the Outcome of each run it submits (all of an array's: the detail names
  each one's task)."""
  start = time.perf_counter()
  done = subprocess.run(["sbatch", path], capture_output=True, text=True)
  detail = (done.stdout.strip() or done.stderr.strip())[-300:]
  return [Outcome(p.run.name, "submitted" if done.returncode == 0 else "failed",
                  time.perf_counter() - start,
                  detail + (f" (array task {i})" if len(runs) > 1 else ""),
                  os.path.join(p.workdir, LOG_NAME)) for i, p in enumerate(runs)]


# ---------------------------------------------------------------------------- entry point

FLAGS = flags.FLAGS


LOCAL_ROOT = "workdirs/sweeps"  # --root of the local backend when none is given


def define_flags() -> None:
  """Command-line flags (defined only when run as a script)."""
  flags.DEFINE_enum("backend", "local", BACKENDS, "Where runs execute.")
  flags.DEFINE_string("root", None, "Sweep root: workdirs are <root>/<study>/<run> (local: "
                      f"default {LOCAL_ROOT}; tpu: an absolute path on the workers, under "
                      "--tpu_mount; slurm: a folder every node sees; both required).")
  flags.DEFINE_integer("parallel", 1, "local: runs at once; tpu: TPU VMs used (<tpu_name>-<i> "
                       "when > 1), one run at a time each.")
  flags.DEFINE_integer("devices_per_run", 0, "local: 0 = each run sees all of this machine's "
                       "devices; N = split them into slots of N and run one run per slot side by "
                       "side, each process seeing only its slot's devices (GPUs: "
                       "CUDA_VISIBLE_DEVICES; a TPU VM's chips; on CPU an emulation: N devices "
                       "per process; sweeps/local_pack.py). --num_devices is then the devices "
                       "to split (default: this machine's).")
  flags.DEFINE_bool("dry_run", False, "Print the commands / scripts; launch nothing.")
  flags.DEFINE_float("tokens_per_s", 0.0, "Training tokens/s of the study's first pending run on "
                     "the target, for the time estimate printed before launching (sweeps/cost.py; "
                     "other runs scale by their FLOPs per token); 0 = measured here when the "
                     "study's runs logged some, else FLOPs only.")
  flags.DEFINE_bool("measure_throughput", False, "local: time the first pending run's training "
                    "here for a few steps before launching (the time estimate's rate).")
  flags.DEFINE_alias("dry-run", "dry_run")
  flags.DEFINE_integer("num_devices", 0, "Devices each run sees, for the mesh and batch checks "
                       "before launching (local with --devices_per_run: the devices split into "
                       "slots); 0 = this machine's (local), the slice's "
                       "(tpu: from --tpu_accelerator_type) or --slurm_nodes x "
                       "--slurm_gpus_per_node (slurm).")
  flags.DEFINE_string("python", None, "Interpreter of the runs; default: this one (local), "
                      f"{TPU_VENV_PYTHON} in the code folder, a Python {PYTHON_VERSION} venv "
                      "made with uv (tpu), <slurm_venv>/bin/python (slurm).")
  flags.DEFINE_string("log_root", "workdirs/sweep_logs", "tpu: local folder for per-run logs "
                      "(<log_root>/<study>/<run>.log).")
  flags.DEFINE_string("jax_requirement", "", "An extra pip requirement installed with the code "
                      "(e.g. a pinned jax[tpu]==...); the code's extras already bring jax[tpu] "
                      "(tpu: `-e .[tpu]`) or jax[cuda12] (slurm with GPUs: `-e <code>[cuda12]`).")
  flags.DEFINE_string("tpu_name", None, "tpu: TPU VM name (created if it does not exist).")
  flags.DEFINE_string("tpu_zone", None, "tpu: zone, e.g. us-central2-b.")
  flags.DEFINE_string("tpu_project", "", "tpu: GCP project; '' = gcloud's default.")
  flags.DEFINE_string("tpu_accelerator_type", "v4-8", "tpu: accelerator type, e.g. v4-32, v5p-64.")
  flags.DEFINE_string("tpu_runtime_version", "tpu-ubuntu2204-base", "tpu: TPU VM runtime version.")
  flags.DEFINE_bool("tpu_spot", False, "tpu: create a spot TPU VM.")
  flags.DEFINE_integer("tpu_chips_per_run", 0, "tpu: 0 = each run on the whole slice (all "
                       "workers); N = pack runs: each a one-process job on N chips of one worker, "
                       "as many side by side as the slice holds (sweeps/tpu_pack.py).")
  flags.DEFINE_string("tpu_repo", None, "tpu: git URL the workers clone; default: this "
                      "checkout's `origin` remote.")
  flags.DEFINE_string("tpu_git_ref", None, "tpu: commit the workers check out; default: this "
                      "checkout's HEAD (push it first).")
  flags.DEFINE_string("tpu_code_dir", "pe-sweeps", "tpu: code folder on each worker (relative "
                      "to the home folder).")
  flags.DEFINE_string("tpu_bucket", "", "tpu: GCS bucket (gs://NAME or NAME) that every worker "
                      "mounts with gcsfuse at --tpu_mount for the workdirs; this machine reads "
                      "the runs' state through gs:// (gcsfs). '' = --root is a shared file system "
                      "(NFS) that this machine mounts too.")
  flags.DEFINE_string("tpu_mount", "", "tpu: where the workers mount --tpu_bucket; default "
                      "/mnt/<bucket>.")
  flags.DEFINE_integer("slurm_nodes", 1, "slurm: nodes per run (one process per node).")
  flags.DEFINE_integer("slurm_gpus_per_node", 1, "slurm: GPUs per node.")
  flags.DEFINE_integer("slurm_cpus_per_task", 8, "slurm: CPUs per process.")
  flags.DEFINE_string("slurm_time", "24:00:00", "slurm: time limit per run.")
  flags.DEFINE_integer("slurm_signal_grace", SLURM_SIGNAL_GRACE_S, "slurm: seconds before "
                       "--slurm_time at which train.py is told (SIGTERM) to save a checkpoint "
                       "and the job requeues itself (#SBATCH --signal=B:USR1@<seconds>); leave "
                       "time for the save.")
  flags.DEFINE_bool("slurm_array", True, "slurm: submit the pending runs as one job array, "
                    "each task one run with one run's resources (--slurm_nodes x "
                    "--slurm_gpus_per_node: by default one GPU); --noslurm_array: one job per run.")
  flags.DEFINE_integer("slurm_array_max_running", 0, "slurm: at most this many array tasks at "
                       "once (sbatch --array=...%N); 0 = no limit.")
  flags.DEFINE_string("slurm_partition", "", "slurm: partition ('' = the cluster's default).")
  flags.DEFINE_string("slurm_account", "", "slurm: account ('' = none).")
  flags.DEFINE_multi_string("slurm_setup", [], "slurm: shell lines run before the install "
                            "(repeatable), e.g. 'module load cuda/12.4'.")
  flags.DEFINE_string("slurm_code_dir", REPO_ROOT, "slurm: the code folder on the shared file "
                      "system.")
  flags.DEFINE_string("slurm_venv", None, "slurm: virtual environment; default "
                      "<slurm_code_dir>/.venv.")


def _git(*args: str) -> str:
  """Output of `git <args>` in the repository root ('' if git fails)."""
  done = subprocess.run(["git", "-C", REPO_ROOT, *args], capture_output=True, text=True)
  return done.stdout.strip() if done.returncode == 0 else ""


def tpu_options() -> TpuOptions:
  """TpuOptions from the flags.

  Raises:
    LaunchError: --tpu_name or --tpu_zone missing; no --tpu_repo and no origin remote; no
      --tpu_git_ref and no commit.
  """
  for name in ("tpu_name", "tpu_zone"):
    if not FLAGS[name].value:
      raise LaunchError(f"--backend=tpu needs --{name}")
  repo = FLAGS.tpu_repo or _git("remote", "get-url", "origin")
  if not repo:
    raise LaunchError("--backend=tpu needs --tpu_repo (this checkout has no `origin` remote)")
  if not is_remote_git_url(repo):
    source = "" if FLAGS.tpu_repo else " (this checkout's origin)"
    raise LaunchError(f"--tpu_repo={repo}{source} is a local path the TPU workers cannot "
                      "clone; push the code and give its URL (https://..., ssh://..., or "
                      "git@host:path)")
  ref = FLAGS.tpu_git_ref or _git("rev-parse", "HEAD")
  if not ref:
    raise LaunchError("--backend=tpu needs --tpu_git_ref (this checkout has no commit)")
  bucket = FLAGS.tpu_bucket.removeprefix("gs://").strip("/")
  if "/" in bucket:
    raise LaunchError(f"--tpu_bucket takes a bucket (gs://NAME), not a path; got "
                      f"{FLAGS.tpu_bucket} (put the path in --root, under --tpu_mount)")
  mount = FLAGS.tpu_mount or (f"/mnt/{bucket}" if bucket else "")
  if mount and not os.path.isabs(mount):
    raise LaunchError(f"--tpu_mount must be an absolute path; got {mount}")
  if FLAGS.tpu_chips_per_run < 0:
    raise LaunchError(f"--tpu_chips_per_run must be >= 0 (0: the whole slice per run); got "
                      f"{FLAGS.tpu_chips_per_run}")
  if FLAGS.tpu_chips_per_run:
    tpu_pack.slots(FLAGS.tpu_accelerator_type, FLAGS.tpu_chips_per_run)  # names a bad value
  return TpuOptions(FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.tpu_project, FLAGS.tpu_accelerator_type,
                    FLAGS.tpu_runtime_version, FLAGS.tpu_spot, repo, ref, FLAGS.tpu_code_dir,
                    FLAGS.jax_requirement, FLAGS.python or TPU_VENV_PYTHON, bucket,
                    mount, FLAGS.tpu_chips_per_run)


def is_remote_git_url(repo: str) -> bool:
  """True for a git URL another machine can clone: scheme://... or scp-like user@host:path."""
  if "://" in repo:
    return not repo.startswith("file://")
  head, sep, _ = repo.partition(":")
  return bool(sep) and "@" in head and "/" not in head


def tpu_state_root(opts: TpuOptions, root: str) -> str:
  """--root (a path on the workers) as this machine reads it: through gs:// when it lies in the
  mounted bucket, else the same path (a shared file system mounted here too).

  Raises:
    LaunchError: a bucket is given and --root is not under its mount.
  """
  if not opts.bucket:
    return root
  rel = os.path.relpath(root, opts.mount)
  if rel.startswith(".."):
    raise LaunchError(f"--root={root} must lie under --tpu_mount={opts.mount}, where the workers "
                      f"mount gs://{opts.bucket}")
  return f"gs://{opts.bucket}" + ("" if rel == "." else f"/{rel}")


def slurm_options() -> SlurmOptions:
  """SlurmOptions from the flags.

  Raises:
    LaunchError: a node, GPU or CPU count < 1 (0 GPUs is allowed), a relative code folder, a
      time limit not in one of SLURM's formats, or a --slurm_signal_grace outside
      1..min(65535, the time limit - 1) seconds.
  """
  for name, low, note in (("slurm_nodes", 1, ""), ("slurm_gpus_per_node", 0, " (0: CPU only)"),
                          ("slurm_cpus_per_task", 1, ""),
                          ("slurm_array_max_running", 0, " (0: no limit)")):
    if FLAGS[name].value < low:
      raise LaunchError(f"--{name} must be >= {low}{note}; got {FLAGS[name].value}")
  grace = check_signal_grace(FLAGS.slurm_signal_grace, FLAGS.slurm_time)
  if not os.path.isabs(FLAGS.slurm_code_dir):
    raise LaunchError(f"--slurm_code_dir must be an absolute path; got {FLAGS.slurm_code_dir}")
  venv = FLAGS.slurm_venv or os.path.join(FLAGS.slurm_code_dir, ".venv")
  if FLAGS.python:
    raise LaunchError("--backend=slurm runs <slurm_venv>/bin/python; set --slurm_venv, "
                      "not --python")
  return SlurmOptions(FLAGS.slurm_nodes, FLAGS.slurm_gpus_per_node, FLAGS.slurm_cpus_per_task,
                      FLAGS.slurm_time, FLAGS.slurm_partition, FLAGS.slurm_account,
                      tuple(FLAGS.slurm_setup), FLAGS.slurm_code_dir, venv,
                      FLAGS.jax_requirement, grace, FLAGS.slurm_array,
                      FLAGS.slurm_array_max_running)


def launch(study_spec: str) -> int:
  """Checks the flags and the study, then launches (or prints) the pending runs.

  Returns:
    0 when every launched run succeeded (or was submitted), 1 when one failed.

  Raises:
    ConfigError (StudyError, LaunchError): a bad flag, study or run config, before launching.
  """
  backend, root, dry_run = FLAGS.backend, FLAGS.root, FLAGS.dry_run
  if not root and backend == "local":
    root = LOCAL_ROOT
  if not root:
    raise LaunchError(f"--root is required with --backend={backend}: the folder that holds "
                      "<study>/<run> (tpu: a path on the workers, e.g. under the --tpu_bucket "
                      "mount; slurm: a folder every node sees)")
  if FLAGS.parallel < 1:
    raise LaunchError(f"--parallel must be >= 1; got {FLAGS.parallel}")
  if FLAGS.tokens_per_s < 0:
    raise LaunchError(f"--tokens_per_s must be > 0, or 0 (the default: the study's own logged "
                      f"tokens/s here, if any); got {FLAGS.tokens_per_s}")
  if FLAGS.num_devices < 0:
    raise LaunchError(f"--num_devices must be >= 1, or 0 for the backend's count; got "
                      f"{FLAGS.num_devices}")
  if workdirs.is_remote(root):
    raise LaunchError(f"--root={root}: train.py writes with file I/O, so give a folder (for a "
                      "bucket on TPU workers: --tpu_bucket, mounted at --tpu_mount, and a --root "
                      "under the mount)")
  if backend == "tpu" and not os.path.isabs(root):
    raise LaunchError(f"--backend=tpu: --root={root} must be an absolute path on the workers")
  root = os.path.abspath(root)
  if backend == "slurm" and any(c.isspace() for c in root):
    raise LaunchError(f"--backend=slurm: --root={root!r} contains white space, which #SBATCH "
                      "lines cannot hold")
  tpu = tpu_options() if backend == "tpu" else None
  state_root = tpu_state_root(tpu, root) if tpu else root
  slurm = slurm_options() if backend == "slurm" else None
  if backend == "slurm" and FLAGS.parallel != 1:
    raise LaunchError("--parallel does not apply to --backend=slurm (the scheduler runs jobs "
                      "side by side)")
  study = load_study(study_spec)
  if backend == "tpu" and os.path.isabs(study.config_arg()):
    raise LaunchError(f"--backend=tpu: Study.config {study.config_arg()} is outside the "
                      f"repository, so the TPU workers' checkout does not have it")
  slots = local_slots(backend, FLAGS.num_devices or None)
  num_devices = devices_per_run(backend, tpu, slurm, slots)
  # A dry run does not read a bucket, nor a TPU root that this machine does not mount.
  read_state = not (dry_run and backend == "tpu" and (workdirs.is_remote(state_root)
                                                       or not os.path.isdir(state_root)))
  stage = functools.partial(run_stage, backend=backend, num_devices=num_devices,
                            read_state=read_state, dry_run=dry_run, tpu=tpu, slurm=slurm,
                            slots=slots)
  planned, outcomes = [], []
  if study.search is not None:  # the tuning stage first (sweeps/search.py)
    study, planned, outcomes = search_stage(study, stage, root=root, state_root=state_root,
                                            read_state=read_state, dry_run=dry_run)
  if study is not None:
    final_planned, final_outcomes = stage(study, root, state_root)
    planned, outcomes = planned + final_planned, outcomes + final_outcomes
  todo = [p for p in planned if p.pending]
  if dry_run:
    return 0
  if outcomes:
    print(summary_table(outcomes))
  failed = [o for o in outcomes if o.status == "failed"]
  print(f"# {len(outcomes) - len(failed)} of {len(outcomes)} launched runs "
        f"{'submitted' if backend == 'slurm' else 'succeeded'}; "
        f"{len(planned) - len(todo)} were already complete"
        + (f"; {len(failed)} FAILED (details and logs above)" if failed else ""))
  return 1 if failed else 0


def run_stage(study: Study, root: str, state_root: str, *, backend: str, num_devices: int | None,
              read_state: bool, dry_run: bool, tpu: "TpuOptions | None",
              slurm: "SlurmOptions | None",
              slots: Sequence[local_pack.LocalSlot] = ()) -> tuple[list[Planned], list[Outcome]]:
  """Plans `study` under `root`, prints its header, writes its manifest (not in a dry run) and
  runs (or, dry, prints) its pending runs on `backend`.

  Raises:
    ConfigError: see `plan`; warm-started children on a backend that cannot order them.
  """
  planned = plan(study, root, num_devices=num_devices, read_state=read_state,
                 state_root=state_root)
  todo = [p for p in planned if p.pending]
  children = [p.run.name for p in todo if p.run.parent]
  if children and (backend == "slurm" or (backend == "tpu" and (
      FLAGS.parallel > 1 or FLAGS.tpu_chips_per_run))):
    raise LaunchError(f"study {study.name} has warm-started children ({children[0]}, ...): they "
                      f"start after their parent on --backend=local, or --backend=tpu with "
                      f"--parallel=1 and whole-slice runs (runs in order); not on "
                      f"--backend={backend}" + (f" --parallel={FLAGS.parallel} "
                                                f"--tpu_chips_per_run={FLAGS.tpu_chips_per_run}"
                                                if backend == "tpu" else ""))
  print(f"# study {study.name}: {len(planned)} run{'s' * (len(planned) != 1)}, {len(todo)} to run"
        + ("" if read_state else f" ({state_root} not read in a dry run: every run listed)")
        + f"; backend {backend}, root {root}"
        + (f"\n# {study.description}" if study.description else ""))
  if todo:
    print("\n".join(cost_estimate(study, planned, backend, local_parallel(slots),
                                   slots[0] if slots else None)))
  if not dry_run:
    write_text(workdirs.join(state_root, study.name, MANIFEST), json.dumps(
        manifest(study, planned), indent=2, sort_keys=True, default=str) + "\n")
  if backend == "local":
    outcomes = launch_local(study, planned, python=FLAGS.python or sys.executable,
                            parallel=local_parallel(slots), dry_run=dry_run, slots=slots)
  elif backend == "tpu":
    outcomes = launch_tpu(study, planned, tpu, parallel=FLAGS.parallel, dry_run=dry_run,
                          log_root=os.path.abspath(FLAGS.log_root))
  else:
    outcomes = launch_slurm(study, planned, slurm, dry_run=dry_run,
                            folder=workdirs.join(root, study.name))
  return planned, outcomes


def devices_per_run(backend: str, tpu: TpuOptions | None, slurm: SlurmOptions | None,
                    slots: Sequence[local_pack.LocalSlot]) -> int | None:
  """The devices each run sees, for the mesh and batch checks: a slot's (--devices_per_run),
  else --num_devices, else this machine's (local, listed in a child process), a packed run's
  chips or the slice's (tpu; None when the accelerator type is unknown: the checks then take
  each config's fixed mesh axes), or --slurm_nodes x --slurm_gpus_per_node (slurm)."""
  if slots:
    return len(slots[0].devices)
  if FLAGS.num_devices:
    return FLAGS.num_devices
  if backend == "local":
    return local_pack.probe(FLAGS.python or sys.executable).count
  if backend == "slurm":
    return slurm.nodes * max(1, slurm.gpus_per_node)
  if tpu.chips_per_run:
    return tpu_pack.devices_per_run(tpu.accelerator_type, tpu.chips_per_run)
  found = tpu_devices(tpu.accelerator_type)
  if found is None:
    print(f"warning: --tpu_accelerator_type={tpu.accelerator_type}: device count unknown; the "
          "checks assume the product of each config's fixed mesh axes (set --num_devices)",
          file=sys.stderr)
  return found


def local_slots(backend: str, num_devices: int | None) -> list[local_pack.LocalSlot]:
  """The local backend's slots (--devices_per_run; [] without): this machine's devices, or
  --num_devices of them (on CPU, any number: an emulation), split into slots.

  Raises:
    ConfigError: --devices_per_run < 0, given to another backend, or not fitting the devices;
      --num_devices above the GPUs or TPU devices this machine has.
  """
  n = FLAGS.devices_per_run
  if n < 0:
    raise LaunchError(f"--devices_per_run must be >= 1, or 0 for every device per run; got {n}")
  if not n:
    return []
  if backend != "local":
    raise LaunchError(f"--devices_per_run applies to --backend=local (tpu: "
                      f"--tpu_chips_per_run; slurm: --slurm_gpus_per_node); got --backend={backend}")
  machine = local_pack.probe(FLAGS.python or sys.executable)
  if num_devices and machine.platform != "cpu" and num_devices > machine.count:
    raise LaunchError(f"--num_devices={num_devices}: this machine has {machine.count} "
                      f"{machine.platform} devices")
  if num_devices:
    machine = dataclasses.replace(machine, count=num_devices)
  slots = local_pack.slots(machine, n)
  if machine.count % n:
    print(f"warning: --devices_per_run={n} leaves {machine.count % n} of this machine's "
          f"{machine.count} devices unused", file=sys.stderr)
  return slots


def local_parallel(slots: Sequence[local_pack.LocalSlot]) -> int:
  """Runs at once on the local backend: --parallel, or with slots every slot (at most
  --parallel when it is given)."""
  if not slots:
    return FLAGS.parallel
  return min(FLAGS.parallel, len(slots)) if FLAGS["parallel"].present else len(slots)


def cost_estimate(study: Study, planned: Sequence[Planned], backend: str, parallel: int,
                  slot: local_pack.LocalSlot | None = None) -> list[str]:
  """The cost lines printed before launching the pending runs of `planned` (sweeps/cost.py):
  the rate from --tokens_per_s, else from the study's runs' own logs here, else (local,
  --measure_throughput) from a short timing of the first pending run (on `slot`'s devices when
  runs are packed, --devices_per_run); FLOPs only without any."""
  todo = [p for p in planned if p.pending]
  costs = [cost.run_cost(p.run) for p in todo]
  rate = None
  if FLAGS.tokens_per_s > 0:
    rate = cost.rate_from_tokens_per_s(FLAGS.tokens_per_s, costs[0])
  elif backend == "local":
    rate = cost.measured_flops_per_s(planned)
    if rate is None and FLAGS.measure_throughput:
      first = todo[0].run
      print(f"# timing {first.name} here for the estimate (--measure_throughput) ...", flush=True)
      tps = cost.time_probe(first, study.config_arg(), FLAGS.python or sys.executable,
                            env=None if slot is None else os.environ | dict(slot.env))
      rate = (tps * costs[0].flops_per_token, f"a short timing of {first.name} here: "
                                              f"{tps:,.0f} tokens/s")
  side_by_side = parallel if backend != "slurm" else 1
  if backend == "tpu" and FLAGS.tpu_chips_per_run:
    side_by_side *= len(tpu_pack.slots(FLAGS.tpu_accelerator_type, FLAGS.tpu_chips_per_run))
  return cost.estimate_lines(costs, rate, side_by_side)


def search_stage(study: Study, stage: Callable, *, root: str, state_root: str, read_state: bool,
                 dry_run: bool) -> tuple[Study | None, list[Planned], list[Outcome]]:
  """Runs the tuning stage of `study` (sweeps/search.py) in `<root>/<study>/search/` (with
  successive halving, rung after rung as long as each is complete), then, when every search
  run is complete, writes `<root>/<study>/selection.json` (not in a dry run)
  and returns the final stage's study; None instead when the search is not done.

  Raises:
    ConfigError: a bad search (sweeps.search.check), or a group whose candidates all diverged.
  """
  search = search_lib.search_study(study)  # checks the search; its first rung with halving
  planned, outcomes = stage(search, workdirs.join(root, study.name),
                            workdirs.join(state_root, study.name))
  rungs = search_lib.num_rungs(study)
  for rung in range(1, rungs):  # successive halving: each rung once the one before is complete
    search = search_lib.rung_study(study, rung, state_root if read_state else None)
    if search is None:
      print(f"# rung {rung + 1} of {rungs} of {study.name}'s search: after rung {rung} (its runs "
            "are not all complete yet)")
      break
    more, done = stage(search, workdirs.join(root, study.name),
                       workdirs.join(state_root, study.name))
    planned, outcomes = planned + more, outcomes + done
  path = search_lib.selection_path(state_root, study)
  chosen = search_lib.selection(study, state_root) if read_state else None
  if chosen is None and dry_run:
    chosen = search_lib.read_selection(path)
  if chosen is None:
    print(f"# final stage of {study.name}: after the search (its runs are not all complete "
          f"yet); launch again to select {sorted(study.search.grid)} per group and train the "
          "study's runs")
    return None, planned, outcomes
  if not dry_run:
    write_text(path, json.dumps(chosen, indent=2, sort_keys=True) + "\n")
  print("\n".join(search_lib.describe(chosen)) + f"\n# selection: {path}")
  return search_lib.final_study(study, chosen), planned, outcomes


def main(argv):
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # JAX's backend probing logs at INFO
  if len(argv) != 2:
    print("error: usage: python -m sweeps.launch <study file or module> --root=<dir> "
          "[--backend=local|tpu|slurm] [--parallel=N] [--dry-run]; got "
          f"{len(argv) - 1} arguments", file=sys.stderr)
    sys.exit(2)
  try:
    code = launch(argv[1])
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  sys.exit(code)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=parse_flags)
