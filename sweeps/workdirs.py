"""What is left to run of a study's run, from what its workdir holds: committed checkpoints
(runs.checkpoint.committed_steps) and result JSONs (runs.workdir.read_results); and, where the
workdir is gone, from the run's published folder (sweeps/publish.py: config, metrics and result
files, no checkpoints), so that a study resumes on a machine that has only the committed results.

Those read paths through `etils.epath` (Orbax's path library), so local folders and `gs://`
buckets are read alike (a bucket needs gcsfs or TensorFlow installed, as for Orbax).
"""

from __future__ import annotations

import dataclasses
import json
import os

import ml_collections

from runs.checkpoint import committed_steps
from runs.metrics import read_metrics
from runs.workdir import read_results
from sweeps.overrides import StudyError, get_field
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
    published: complete only in its published folder (no checkpoint here): its results are
      read there, and a warm-started child cannot start from it.
  """

  trained: bool
  missing: tuple[ResultKey, ...]
  train: bool
  evals: tuple[EvalCommand, ...]
  published: bool = False

  @property
  def complete(self) -> bool:
    """True when the final checkpoint and every result are there."""
    return not self.train and not self.evals

  def describe(self) -> str:
    """One phrase: complete / not trained / N results missing."""
    if self.complete:
      return "complete (published)" if self.published else "complete"
    if not self.trained:
      return "to train"
    return f"trained, {len(self.missing)} result(s) to evaluate"


def published_mismatch(run: Run, folder: str) -> str | None:
  """None when `folder` holds `run` finished: a config.json whose every field the run sets
  (`run.overrides`, compared as JSON) has the run's value, a metrics record at `run.num_steps`,
  and every result of `run.results` in `<folder>/eval/` at that step; else why not (a phrase).
  A local folder only (published runs are committed files)."""
  try:
    with open(os.path.join(folder, "config.json")) as f:
      config = ml_collections.ConfigDict(json.load(f)["config"])
  except (OSError, ValueError, KeyError, TypeError):
    return "no readable config.json"
  for key, value in run.overrides.items():
    try:
      got = get_field(config, key)
    except StudyError:
      continue  # a field the run's code did not have yet: nothing to compare
    if json.loads(json.dumps(value, default=list)) != json.loads(json.dumps(got, default=list)):
      return f"{key} is {got!r} there, {value!r} in the study"
  if run.num_steps not in {r.get("step") for r in read_metrics(folder)}:
    return f"no metrics record at step {run.num_steps}"
  present = present_results(folder, run.num_steps)
  missing = [k for k in run.results if k not in present]
  return f"{len(missing)} result(s) missing" if missing else None


def run_state(run: Run, workdir: str, published: str | None = None) -> RunState:
  """Compares `workdir` with what `run` must produce.

  A run is complete when its final checkpoint (step `run.num_steps`) is finalized and every
  result it asks for (`run.results`) is in `<workdir>/eval/` with that step. Otherwise train.py
  runs if the final checkpoint or one of its own results is missing (it resumes from the latest
  checkpoint, or only re-evaluates when training is done), and each eval.run invocation runs
  that has a missing result (all of them after a (re)training).

  With `published` (the run's published folder, e.g. results/<study>/<run>), a run without its
  final checkpoint here is also complete when that folder holds it finished
  (`published_mismatch` is None): state `published`.
  """
  trained = run.num_steps in committed_steps(workdir)
  if not trained and published and os.path.isdir(published) \
      and published_mismatch(run, published) is None:
    return RunState(True, (), False, (), published=True)
  present = present_results(workdir, run.num_steps) if trained else set()
  missing = tuple(k for k in run.results if k not in present)
  train = not trained or any(k in missing for k in run.train_results)
  evals = tuple(e for e in run.evals if train or any(k in missing for k in e.results))
  return RunState(trained, missing, train, evals)


def retrain(run: Run) -> RunState:
  """The state of a run that must train again from scratch with every evaluation (a published
  run whose checkpoint a pending warm-started child needs)."""
  return RunState(False, run.results, True, run.evals)


__all__ = ["RunState", "is_remote", "join", "present_results", "published_mismatch", "retrain",
           "run_state"]
