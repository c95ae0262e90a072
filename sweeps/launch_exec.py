"""How the local and tpu backends of `python -m sweeps.launch` run a planned run: its commands
in order as subprocesses from the repository root, appended to one log (`execute`), its results
checked after each command (`result_checker`), many runs at once with a progress bar and
parent-before-child ordering (`run_all`), and the table of how each launched run ended
(`Outcome`, `summary_table`; slurm's submissions are Outcomes too).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import os
import subprocess
import time
from typing import Callable, Sequence

from sweeps import local_pack
from sweeps import workdirs
from sweeps.launch_plan import Planned, Step
from sweeps.overrides import REPO_ROOT


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
              f"{where} ({duration(seconds)})\n")
  return Outcome(name, "ok", seconds, "", log_path)


def result_checker(planned: Planned, steps: Sequence[Step]) -> Callable[[int], str]:
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
    bar.write(f"{outcome.status:>9}  {name}  ({duration(outcome.seconds)})")
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


def duration(seconds: float) -> str:
  """e.g. 11m32s."""
  m, s = divmod(int(round(seconds)), 60)
  return f"{m}m{s:02d}s" if m else f"{s}s"


def summary_table(outcomes: Sequence[Outcome]) -> str:
  """The outcomes as a fixed-width table (run, status, time, detail cut to 100 characters,
  log), then each failure's whole detail."""
  import pandas as pd
  frame = pd.DataFrame([{"run": o.run, "status": o.status, "time": duration(o.seconds),
                         "detail": o.detail if len(o.detail) <= 100 else o.detail[:97] + "...",
                         "log": o.log} for o in outcomes])
  with pd.option_context("display.max_colwidth", 200, "display.width", 250):
    table = frame.to_string(index=False)
  failures = [f"FAILED {o.run}: {o.detail}\n  log: {o.log}" for o in outcomes
              if o.status == "failed"]
  return "\n".join([table, *failures])
