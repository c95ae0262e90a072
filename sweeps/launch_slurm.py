"""The slurm backend of `python -m sweeps.launch` (--backend=slurm): one sbatch script per pending
run (`sbatch_script`: the install under flock, then each command through srun under the
time-limit, preemption and requeue handling of `SLURM_STEPS`), submitted as one job array
(`array_script`) or one job per run (`launch_slurm`); the --slurm_time and --slurm_signal_grace
checks (`slurm_time_seconds`, `check_signal_grace`). A requeued script asks
`sweeps.launch.steps_in_place` which steps are done (sweeps/launch.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import time
from typing import Sequence

from sweeps.launch_exec import Outcome
from sweeps.launch_plan import LOG_NAME, PYTHON_VERSION, LaunchError, Planned, run_steps, \
    write_text
from sweeps.study import Study

SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}")  # sbatch --time formats
SLURM_SIGNAL_GRACE_S = 120  # default seconds between the time-limit notice and the limit
SLURM_MAX_SIGNAL_S = 65535  # the largest sig_time sbatch --signal accepts
SBATCH_NAME = "slurm.sbatch"
ARRAY_NAME = "slurm_array.sbatch"  # <root>/<study>/: the job array of a launch's pending runs
ARRAY_LOG = "slurm_array.log"  # beside it: the array tasks' dispatch lines


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
