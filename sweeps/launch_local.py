"""The local backend of `python -m sweeps.launch` (--backend=local): the pending runs here as
subprocesses, --parallel at a time, one log per run, children right after their parent; with
--devices_per_run each run on the first free slot of this machine's devices (the slots
themselves: sweeps/local_pack.py).
"""

from __future__ import annotations

import dataclasses
import os
import queue
from typing import Sequence

from sweeps import local_pack
from sweeps import tpu_pack
from sweeps.launch_exec import Outcome, execute, result_checker, run_all
from sweeps.launch_plan import LOG_NAME, Planned, Step, run_steps
from sweeps.publish import publish_run, publish_study_files
from sweeps.overrides import REPO_ROOT
from sweeps.study import Study


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
                 dry_run: bool, slots: Sequence[local_pack.LocalSlot] = (),
                 publish_to: str | None = None) -> list[Outcome]:
  """Runs (or, dry, prints) the pending runs here, `parallel` at a time; with `slots`
  (--devices_per_run, sweeps/local_pack.py), each run on the first free slot, confined to its
  devices (`parallel` <= len(slots)). With `publish_to` (--published), each run that finishes
  is copied to `<publish_to>/<study>/<run>` as sweeps.publish copies it (no checkpoints), with
  the study's study.json (and selection.json); a copy that fails makes the run's outcome
  "failed" with the reason."""
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
      outcome = execute(p.run.name, steps, os.path.join(p.workdir, LOG_NAME),
                        result_checker(p, steps), slot)
    finally:
      if slot is not None:
        free.put(slot)
    return outcome if outcome.status != "ok" or not publish_to else published(p, outcome)

  def published(p: Planned, outcome: Outcome) -> Outcome:
    target = os.path.join(publish_to, study.name)
    try:
      why = publish_run(p.workdir, os.path.join(target, p.run.name))
      if not why:
        publish_study_files(os.path.dirname(p.workdir), target)
    except OSError as e:
      why = f"{type(e).__name__}: {e}"
    if why:
      return dataclasses.replace(outcome, status="failed",
                                 detail=f"finished, but not published to {target}: {why}")
    return outcome
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
