"""What a launch runs, shared by every backend of `python -m sweeps.launch` (sweeps/launch.py):
each run of a study checked and its state read under the sweep root (`plan` -> `Planned`), the
commands a pending run still needs (`run_steps` -> `Step`), the study's manifest (study.json,
read by sweeps.collect), and the launchers' shared names (`LaunchError`, the log and manifest
file names, the Python version the remote backends install).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import math
import os
import shlex
from typing import Sequence

from configs.errors import ConfigError
from runs.files import atomic_write
from sweeps import workdirs
from sweeps.result_keys import ResultKey
from sweeps.run_plan import Run, check_commands, validate_run
from sweeps.study import Study

PYTHON_VERSION = "3.11"  # pyproject.toml's requires-python; the tpu backend's venv has it
LOG_NAME = "launch.log"
MANIFEST = "study.json"


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


def default_num_devices(run: Run) -> int:
  """Devices assumed for a remote run's checks when the launcher cannot tell: the product of
  the fixed mesh axes."""
  m = run.config.mesh
  return math.prod(s for s in (m.data, m.fsdp, m.tensor) if s != -1)


def plan(study: Study, root: str, *, num_devices: int | None, read_state: bool,
         state_root: str | None = None, published_root: str | None = None) -> list[Planned]:
  """Checks every run of `study` and reads where each stands under `root`.

  Args:
    study: the study.
    root: the sweep root as the runs see it.
    num_devices: devices each run sees (None: `default_num_devices` of each run).
    read_state: read each workdir (False: every run is listed as pending).
    state_root: the sweep root as this machine reads it (None: `root`; a gs:// URL for a
      bucket that the TPU workers mount).
    published_root: a folder of published run folders (<published_root>/<study>/<run>,
      sweeps/publish.py), or None: a run finished there counts as complete without its
      workdir (`workdirs.run_state`), unless a pending warm-started child needs its checkpoint,
      in which case it trains again (`workdirs.retrain`).

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
    published = (os.path.join(published_root, study.name, run.name) if published_root
                 else None)
    state = None
    if read_state:
      try:
        state = workdirs.run_state(run, state_dir, published)
      except Exception as e:  # epath raises the bucket library's own errors
        raise LaunchError(f"cannot read {state_dir}: {e}"
                          + (" (gs:// needs `pip install -e '.[gcs]'` and `gcloud auth "
                             "application-default login`)" if workdirs.is_remote(state_root)
                             else "")) from None
    out.append(Planned(run, workdir, state_dir, state))
  while True:  # a published parent of a pending child trains again (and so, in turn, its own)
    needed = {p.run.parent for p in out if p.run.parent and p.pending}
    again = [i for i, p in enumerate(out)
             if p.state is not None and p.state.published and p.run.name in needed]
    if not again:
      return out
    for i in again:
      out[i] = dataclasses.replace(out[i], state=workdirs.retrain(out[i].run))


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
