"""A study's tuning stage (sweeps/study.py `Search`): its runs, the selection, the final stage.

Tune, then compare: a learning rate tuned for one positional scheme is a known confound when
schemes are compared. A study with `search=Search(grid={"train.learning_rate": [...]})` runs in
two stages, both launched by `python -m sweeps.launch <study>` (and both resumed by running it
again):

  1. the search: for every group of the study's from-scratch points (default: each scheme),
     every combination of the grid, trained on the search's budget, in
     `<root>/<study>/search/<run>` (a study of its own, `search_study`; collect it with
     `python -m sweeps.collect <root>/<study>/search`);
  2. once every search run is complete: `<root>/<study>/selection.json` (written atomically)
     records every candidate's score, the validation loss at train_len after its last step
     (train.py's final `val_loss`, nats per token; lower is better, ties to the earlier grid
     entry), and each group's selected fields; then the study's own runs train with their
     group's selected fields (`final_study`), which appear in their names
     (`kind=rope,learning_rate=0.003,seed=0`).

A run of the search that failed, or has not finished (a dry run, jobs still queued on Slurm),
leaves the final stage for the next launch; a group whose every candidate diverged (no finite
score) is an error naming it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from typing import Any, Mapping, Sequence

from runs.metrics import METRICS_FILE
from sweeps import workdirs
from sweeps.study import BASE, CHILD_KEYS, PARENT, Study, StudyError, cross, product

SEARCH_FOLDER = "search"  # <root>/<study>/search/<run>
SELECTION = "selection.json"  # <root>/<study>/selection.json
METRIC = "val_loss"  # train.py's validation loss at train_len (nats per token), lower is better
DEFAULT_COMMON = {"eval.length_multipliers": (1.0,)}  # the search needs train_len only


def groups(study: Study) -> list[dict[str, Any]]:
  """The distinct groups of the study's from-scratch points, in order: each a dict of the
  point's `Search.group_by` fields (and its "@base") that it sets."""
  out: list[dict[str, Any]] = []
  for point in study.points():
    if any(k in point for k in CHILD_KEYS):
      continue
    group = _group_of(point, study.search.group_by)
    if group not in out:
      out.append(group)
  return out


def _group_of(point: Mapping[str, Any], group_by: Sequence[str]) -> dict[str, Any]:
  """The group of a from-scratch point: its "@base" and `group_by` fields, those it sets."""
  return {k: point[k] for k in (BASE, *group_by) if k in point}


def check(study: Study) -> None:
  """Checks `study.search` before anything is planned.

  Raises:
    StudyError: a grid that is not a non-empty dict of non-empty lists of distinct values, a
      grid field that is also a group field, or group_by that is not a list of field names.
  """
  s = study.search
  if not isinstance(s.grid, Mapping) or not s.grid:
    raise StudyError(f"study {study.name!r}: Search.grid must be a non-empty dict of dotted "
                     f"field -> candidate values, e.g. {{'train.learning_rate': [1e-3, 3e-3]}}; "
                     f"got {s.grid!r}")
  for field, values in s.grid.items():
    if isinstance(values, (list, tuple)) and len({repr(v) for v in values}) < len(values):
      raise StudyError(f"study {study.name!r}: Search.grid[{field!r}] lists a value twice; "
                       f"give distinct candidates; got {list(values)!r}")
  if isinstance(s.group_by, str) or not all(isinstance(f, str) for f in s.group_by):
    raise StudyError(f"study {study.name!r}: Search.group_by must be a list of dotted fields; "
                     f"got {s.group_by!r}")
  both = sorted(set(s.grid) & set(s.group_by))
  if both:
    raise StudyError(f"study {study.name!r}: Search.grid field(s) {both} are also group_by "
                     "fields (a group is what one selection is made for)")


def search_study(study: Study) -> Study:
  """The search stage as a study of its own, named SEARCH_FOLDER (its runs live in
  `<root>/<study>/search/`): groups x the grid's product, with the study's common fields, then
  DEFAULT_COMMON, then `Search.common`.

  Raises:
    StudyError: see `check`.
  """
  check(study)
  s = study.search
  points = cross(groups(study), product(**{k: list(v) for k, v in s.grid.items()}))
  return Study(name=SEARCH_FOLDER, config=study.config, points=lambda: points,
               common={**study.common, **DEFAULT_COMMON, **s.common}, aliases=study.aliases,
               description=f"the tuning stage of {study.name}: {len(points)} runs")


def _metrics_records(workdir: str) -> list[dict]:
  """The records of `<workdir>/metrics.jsonl` (a local folder or a bucket), [] if absent."""
  if workdirs.is_remote(workdir):
    from etils import epath  # noqa: PLC0415 -- buckets only
    path = epath.Path(workdirs.join(workdir, METRICS_FILE))
    text = path.read_text() if path.exists() else ""
  else:
    try:
      with open(os.path.join(workdir, METRICS_FILE)) as f:
        text = f.read()
    except OSError:
      text = ""
  records = []
  for line in text.splitlines():
    try:
      records.append(json.loads(line))
    except ValueError:
      continue  # a line cut by a kill
  return records


def score(workdir: str, step: int) -> float | None:
  """The run's METRIC logged at `step` (its last), or None when none was logged; a diverged
  run's non-finite loss (logged as null) is +inf."""
  found: float | None = None
  for record in _metrics_records(workdir):
    if record.get("step") == step and METRIC in record:
      value = record[METRIC]
      found = math.inf if value is None or not math.isfinite(value) else float(value)
  return found


def selection(study: Study, state_root: str) -> dict | None:
  """Reads every search run under `<state_root>/<study>/search/`; the selection when each is
  complete with a score, else None (the search is not done).

  Returns:
    {"study", "metric", "grid", "group_by", "written", "groups": [{"group": {...}, "selected":
    {grid field: value}, "candidates": [{"run", "fields", "score"}, ...]}, ...]}.

  Raises:
    StudyError: a group whose every candidate has a non-finite score (diverged).
  """
  search = search_study(study)
  runs = iter(search.runs())  # one per point, in the points' order: groups x the grid
  out_groups = []
  for group in groups(study):
    candidates = []
    for values in product(**{k: list(v) for k, v in study.search.grid.items()}):
      run = next(runs)
      if not all((run.base if k == BASE else run.overrides.get(k)) == v
                 for k, v in {**group, **values}.items()):
        raise StudyError(f"study {study.name!r}: the search's runs do not follow its points "
                         f"(at {group} x {values}: {run.name})")
      name = run.name
      workdir = workdirs.join(state_root, study.name, SEARCH_FOLDER, name)
      if workdirs.run_state(run, workdir).train:
        return None
      value = score(workdir, run.num_steps)
      if value is None:
        return None
      candidates.append({"run": name, "fields": values, "score": value})
    best = min(candidates, key=lambda c: c["score"])  # the first of equal scores
    if not math.isfinite(best["score"]):
      raise StudyError(f"study {study.name!r}: every search run of group {group} diverged "
                       f"(non-finite {METRIC}); widen Search.grid")
    out_groups.append({"group": group, "selected": dict(best["fields"]),
                       "candidates": candidates})
  return {"study": study.name, "metric": f"{METRIC} at train_len after the last step (nats per "
          "token, lower is better)", "grid": {k: list(v) for k, v in study.search.grid.items()},
          "group_by": list(study.search.group_by),
          "written": datetime.datetime.now().isoformat(timespec="seconds"),
          "groups": out_groups}


def _selected(sel: Mapping, point: Mapping[str, Any]) -> dict[str, Any]:
  """The selected fields of the group `point` belongs to ({} when none matches); groups are
  compared as selection.json holds them (JSON: tuples as lists)."""
  group = json.loads(json.dumps(_group_of(point, sel["group_by"])))
  for g in sel["groups"]:
    if g["group"] == group:
      return dict(g["selected"])
  return {}


def final_study(study: Study, sel: Mapping) -> Study:
  """The study's own runs with each from-scratch point's group's selected fields added (a
  child's "@parent" too, so that it still finds its parent); the search is dropped."""
  def points() -> list[dict]:
    out = []
    for point in study.points():
      point = dict(point)
      if PARENT in point:
        point[PARENT] = {**point[PARENT], **_selected(sel, point[PARENT])}
      elif not any(k in point for k in CHILD_KEYS):
        point = {**point, **_selected(sel, point)}
      out.append(point)
    return out
  return dataclasses.replace(study, points=points, search=None)


def read_selection(path: str) -> dict | None:
  """A selection.json (local or bucket), or None if absent."""
  if workdirs.is_remote(path):
    from etils import epath  # noqa: PLC0415 -- buckets only
    p = epath.Path(path)
    return json.loads(p.read_text()) if p.exists() else None
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def selection_path(state_root: str, study: Study) -> str:
  """`<state_root>/<study>/selection.json`."""
  return workdirs.join(state_root, study.name, SELECTION)


def describe(sel: Mapping) -> list[str]:
  """One line per group: its selected fields and every candidate's score."""
  lines = []
  for g in sel["groups"]:
    scores = ", ".join(f"{_fmt(c['fields'])}: {c['score']:.4f}" for c in g["candidates"])
    lines.append(f"# selected for {_fmt(g['group']) or 'every point'}: {_fmt(g['selected'])} "
                 f"({scores})")
  return lines


def _fmt(fields: Mapping[str, Any]) -> str:
  return ", ".join(f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else
                   f"{k.split('.')[-1]}={v}" for k, v in fields.items())


__all__ = ["DEFAULT_COMMON", "METRIC", "SEARCH_FOLDER", "SELECTION", "check", "describe",
           "final_study", "groups", "read_selection", "score", "search_study", "selection",
           "selection_path"]
