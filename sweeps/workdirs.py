"""What is left to run of a study's run, from what its workdir holds: committed checkpoints
(runs.checkpoint.committed_steps) and result JSONs (runs.workdir.read_results).

Those read paths through `etils.epath` (Orbax's path library), so local folders and `gs://`
buckets are read alike (a bucket needs gcsfs or TensorFlow installed, as for Orbax).
"""

from __future__ import annotations

import dataclasses
import os

from runs.checkpoint import committed_steps
from runs.workdir import read_results
from sweeps.result_keys import ResultKey, result_key
from sweeps.run_plan import EvalCommand, Run


def is_remote(path: str) -> bool:
  """True for a bucket path (`gs://...` or any other `<scheme>://`)."""
  return "://" in path


def join(root: str, *parts: str) -> str:
  """`root/part/...` for local and bucket paths alike (bucket paths keep their `//`)."""
  return "/".join([root.rstrip("/"), *parts]) if is_remote(root) else os.path.join(root, *parts)


def present_results(workdir: str, step: int) -> set[ResultKey]:
  """Keys of the results in `<workdir>/eval/` computed at checkpoint `step`, and of those
  tagged by `eval.step` (computed at the checkpoint their tag names)."""
  return {result_key(r) for _, r in read_results(workdir)
          if r.get("step") == (step if r.get("step_tag") is None else r["step_tag"])}


@dataclasses.dataclass(frozen=True)
class RunState:
  """Where a run stands.

  Attributes:
    trained: the final checkpoint (step train.num_steps) is in the workdir.
    missing: results of the run not present at that step.
    train: train.py must run (train or resume, then its final evaluation).
    evals: the eval.run invocations that must run (all of them when train.py runs).
  """

  trained: bool
  missing: tuple[ResultKey, ...]
  train: bool
  evals: tuple[EvalCommand, ...]

  @property
  def complete(self) -> bool:
    """True when the final checkpoint and every result are there."""
    return not self.train and not self.evals

  def describe(self) -> str:
    """One phrase: complete / not trained / N results missing."""
    if self.complete:
      return "complete"
    if not self.trained:
      return "to train"
    return f"trained, {len(self.missing)} result(s) to evaluate"


def run_state(run: Run, workdir: str) -> RunState:
  """Compares `workdir` with what `run` must produce.

  A run is complete when its final checkpoint (step `run.num_steps`) is finalized and every
  result it asks for (`run.results`) is in `<workdir>/eval/` with that step. Otherwise train.py
  runs if the final checkpoint or one of its own results is missing (it resumes from the latest
  checkpoint, or only re-evaluates when training is done), and each eval.run invocation runs
  that has a missing result (all of them after a (re)training).
  """
  trained = run.num_steps in committed_steps(workdir)
  present = present_results(workdir, run.num_steps) if trained else set()
  missing = tuple(k for k in run.results if k not in present)
  train = not trained or any(k in missing for k in run.train_results)
  evals = tuple(e for e in run.evals if train or any(k in missing for k in e.results))
  return RunState(trained, missing, train, evals)


__all__ = ["RunState", "is_remote", "join", "present_results", "run_state"]
