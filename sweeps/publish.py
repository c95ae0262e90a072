"""Copies a study's finished run folders, without checkpoints, into a results folder to commit.

  python -m sweeps.publish workdirs/sweeps/<study> results/<study>
  python -m sweeps.collect results/<study>

Long studies run over several sessions and machines; what a later session needs to resume the
findings (not the training) is each finished run's record: its `config.json`, `metrics.jsonl`,
the result files of `eval/` (JSON and PNG; not `eval/earlier/`) and a LongRoPE search's
`longrope_search/x<s>/factors.json`, plus the study's `study.json` and a tuning stage's
`selection.json`. This copies exactly those, for every run folder (a folder with a config.json)
of the study and of its tuning stage (`search/`, the same rule), and nothing else: never
`checkpoints/`, `tensorboard/`, `run.lock` or `launch.log`.

A run is finished when its metrics.jsonl has a record at its config's `train.num_steps` and no
live process holds it (runs/run_lock.py); unfinished runs are listed and skipped, so publishing
again later adds them. Each file is written to a temporary name and renamed (runs/files.py
`atomic_write`): a kill leaves the old file or the new one. Files already in the destination and
not in the source are left alone. The last lines list the runs copied and skipped.

Exit status 2 with one line: the source is not a study folder, or the destination is inside it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys

from configs.errors import ConfigError
from runs.files import atomic_write
from runs.metrics import read_metrics
from runs.run_lock import holder

RUN_FILES = ("config.json", "metrics.jsonl")
EVAL_SUFFIXES = (".json", ".png")
STUDY_FILES = ("study.json", "selection.json")
SEARCH = "search"  # sweeps/search.py's folder of the tuning stage's runs


def finished(run_dir: str) -> str | None:
  """None when the run folder is finished (see the module docstring), else why not (a phrase)."""
  try:
    with open(os.path.join(run_dir, "config.json")) as f:
      steps = int(json.load(f)["config"]["train"]["num_steps"])
  except (OSError, ValueError, KeyError, TypeError) as e:
    return f"its config.json cannot be read ({type(e).__name__})"
  who = holder(run_dir)
  if who:
    return f"held by {who[:80]}"
  logged = [r.get("step") for r in read_metrics(run_dir)]
  if steps not in logged:
    last = max((s for s in logged if isinstance(s, int)), default=0)
    return f"at step {last} of {steps}"
  return None


def _files(run_dir: str) -> list[str]:
  """The files of a finished run to copy, relative to the run folder."""
  out = [name for name in RUN_FILES if os.path.isfile(os.path.join(run_dir, name))]
  out += sorted(os.path.join("eval", os.path.basename(p))
                for p in glob.glob(os.path.join(run_dir, "eval", "*"))
                if os.path.isfile(p) and p.endswith(EVAL_SUFFIXES))
  out += sorted(os.path.relpath(p, run_dir)
                for p in glob.glob(os.path.join(run_dir, "longrope_search", "*", "factors.json")))
  return out


def _copy(src: str, dst: str) -> None:
  os.makedirs(os.path.dirname(dst), exist_ok=True)
  atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))


def publish_study_files(folder: str, target: str) -> list[str]:
  """Copies a study (or tuning-stage) folder's STUDY_FILES that exist into `target`, each
  renamed into place; returns their names.

  Raises:
    OSError: a file cannot be read or written.
  """
  names = [n for n in STUDY_FILES if os.path.isfile(os.path.join(folder, n))]
  for name in names:
    _copy(os.path.join(folder, name), os.path.join(target, name))
  return names


def publish_run(run_dir: str, target: str) -> str | None:
  """Copies one run folder's files (see the module docstring) into `target` when the run is
  finished; returns None, or why it was not copied (`finished`).

  Raises:
    OSError: a file cannot be read or written (what was copied stays whole: each file is
      renamed into place).
  """
  why = finished(run_dir)
  if why:
    return why
  for rel in _files(run_dir):
    _copy(os.path.join(run_dir, rel), os.path.join(target, rel))
  return None


def publish(study_dir: str, out_dir: str) -> tuple[list[str], list[str]]:
  """Copies the finished runs of `study_dir` (and of its `search/` stage) into `out_dir`.

  Returns:
    (runs copied, "run: why not" for each run skipped), run names relative to `study_dir`.

  Raises:
    ConfigError: `study_dir` has no run folder and no study.json, or `out_dir` lies inside it.
  """
  study_dir, out_dir = os.path.abspath(study_dir), os.path.abspath(out_dir)
  if not os.path.isdir(study_dir):
    raise ConfigError(f"{study_dir}: no such study folder")
  if os.path.commonpath([study_dir, out_dir]) == study_dir:
    raise ConfigError(f"the destination {out_dir} is inside the study folder {study_dir}; give a "
                      "folder outside it (e.g. results/<study>)")
  copied, skipped, found = [], [], False
  for folder, prefix in ((study_dir, ""), (os.path.join(study_dir, SEARCH), SEARCH + "/")):
    if not os.path.isdir(folder):
      continue
    target = os.path.join(out_dir, prefix)
    found |= bool(publish_study_files(folder, target))
    for run_dir in sorted(glob.glob(os.path.join(folder, "*", "config.json"))):
      run_dir = os.path.dirname(run_dir)
      found = True
      run = prefix + os.path.basename(run_dir)
      why = publish_run(run_dir, os.path.join(target, os.path.basename(run_dir)))
      if why:
        skipped.append(f"{run}: {why}")
      else:
        copied.append(run)
  if not found:
    raise ConfigError(f"{study_dir} holds no run folder (a folder with a config.json) and no "
                      "study.json: is it <root>/<study>?")
  return copied, skipped


def main(argv: list[str]) -> int:
  """`python -m sweeps.publish <study folder> <results folder>`; exit 2 on bad input."""
  if len(argv) != 2:
    print("usage: python -m sweeps.publish <root>/<study> results/<study>", file=sys.stderr)
    return 2
  try:
    copied, skipped = publish(*argv)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for line in skipped:
    print(f"skipped {line}")
  print(f"copied {len(copied)} finished run(s) to {argv[1]} (no checkpoints); "
        f"{len(skipped)} skipped; then: python -m sweeps.collect {argv[1]}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
