"""A study's tuning stage (sweeps/study.py `Search`): its runs, the selection, the final stage.

Tune, then compare: a learning rate tuned for one positional scheme is a known confound when
schemes are compared. A study with `search=Search(grid={"train.learning_rate": [...]})` runs in
two stages, both launched by `python -m sweeps.launch <study>` (and both resumed by running it
again):

  1. the search: for every group of the study's from-scratch points (default: each scheme),
     every combination of the grid, trained on the search's budget, in
     `<root>/<study>/search/<run>` (a study of its own, `search_study`; collect it with
     `python -m sweeps.collect <root>/<study>/search`); or, with successive halving
     (`Search(halving_eta=3, halving_rungs=3)`), in rungs: every candidate at 1/eta^(rungs-1)
     of the search's train.num_steps, then the best 1/eta of each group at eta times that,
     and so on up to the full budget (`rung_study`; names carry `num_steps`; each rung starts
     when the one before is complete, in the same launch on the local and TPU backends, at
     the next launch on Slurm), the selection being the best of the last rung;
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
from typing import Any, Mapping, NamedTuple, Sequence

from runs.metrics import METRICS_FILE
from sweeps import workdirs
from sweeps.child_runs import CHILD_KEYS, PARENT
from sweeps.overrides import StudyError
from sweeps.run_plan import BASE, Run
from sweeps.study import Study, product

SEARCH_FOLDER = "search"  # <root>/<study>/search/<run>
SELECTION = "selection.json"  # <root>/<study>/selection.json
METRIC = "val_loss"  # train.py's validation loss at train_len (nats per token), lower is better
DEFAULT_COMMON = {"eval.length_multipliers": (1.0,)}  # the search needs train_len only
STEPS, WARMUP = "train.num_steps", "train.warmup_steps"  # set per rung by successive halving


def groups(study: Study) -> list[dict[str, Any]]:
  """The distinct groups of the study's from-scratch points, in order: each a dict of the
  point's `Search.group_by` fields (and its "@base") that it sets."""
  out: list[dict[str, Any]] = []
  for point in study.point_list():
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
  if isinstance(s.halving_eta, bool) or not isinstance(s.halving_eta, int) or (
      s.halving_eta != 0 and s.halving_eta < 2):
    raise StudyError(f"study {study.name!r}: Search.halving_eta must be 0 (the whole grid at "
                     f"one budget) or an integer >= 2 (successive halving: keep 1/eta per "
                     f"rung); got {s.halving_eta!r}")
  if s.halving_eta and (isinstance(s.halving_rungs, bool) or not isinstance(s.halving_rungs, int)
                        or s.halving_rungs < 2):
    raise StudyError(f"study {study.name!r}: Search.halving_rungs must be an integer >= 2 with "
                     f"successive halving; got {s.halving_rungs!r}")
  if s.halving_eta and {STEPS, WARMUP} & set(s.grid):
    raise StudyError(f"study {study.name!r}: successive halving sets {STEPS} and {WARMUP} per "
                     "rung; they cannot be Search.grid fields")
  both = sorted(set(s.grid) & set(s.group_by))
  if both:
    raise StudyError(f"study {study.name!r}: Search.grid field(s) {both} are also group_by "
                     "fields (a group is what one selection is made for)")


def search_study(study: Study) -> Study:
  """The search stage as a study of its own, named SEARCH_FOLDER (its runs live in
  `<root>/<study>/search/`): groups x the grid's product, with the study's common fields, then
  DEFAULT_COMMON, then `Search.common`. With successive halving, its first rung (`rung_study`).

  Raises:
    StudyError: see `check`.
  """
  check(study)
  return _walk(study, None)[0].search


def _entries(study: Study) -> list[tuple[dict, dict]]:
  """(group, grid values) of every candidate: groups x the grid's product, in that order."""
  values = product(**{k: list(v) for k, v in study.search.grid.items()})
  return [(g, v) for g in groups(study) for v in values]


def _study_of(study: Study, entries: Sequence[tuple[dict, dict]],
              budgets: Sequence[Mapping[str, int]] | None, rung: int | None = None) -> Study:
  """The search study of `entries` (one run each, in order); with `budgets` (one per entry) each
  point sets its budget's fields (a rung of successive halving: train.num_steps and
  train.warmup_steps)."""
  points = [{**g, **v} for g, v in entries]
  if budgets is not None:
    points = [{**p, **b} for p, b in zip(points, budgets)]
  where = "" if rung is None else (f", rung {rung + 1} of {study.search.halving_rungs} of "
                                   f"successive halving (eta {study.search.halving_eta})")
  return Study(name=SEARCH_FOLDER, config=study.config, points=lambda: points,
               common={**study.common, **DEFAULT_COMMON, **study.search.common},
               aliases=study.aliases,
               description=f"the tuning stage of {study.name}: {len(points)} runs{where}")


def num_rungs(study: Study) -> int:
  """The search's stages: Search.halving_rungs with successive halving, else 1 (the grid)."""
  return study.search.halving_rungs if study.search.halving_eta else 1


def rung_budgets(study: Study) -> list[list[dict[str, int]]]:
  """Successive halving's budget per group and rung, {train.num_steps, train.warmup_steps}:
  the group's full search budget (its run's train.num_steps with the search's common fields)
  divided by eta^(rungs-1-r) at rung r, so that the last rung trains the full budget, and the
  warmup scaled alike (rounded), so that every rung's schedule has the full one's shape.

  Raises:
    StudyError: a first rung of fewer than one step (raise train.num_steps, or use fewer rungs
      or a smaller eta).
  """
  s = study.search
  full = _study_of(study, [(g, {}) for g in groups(study)], None).runs()
  out = []
  for g, run in zip(groups(study), full):
    steps = [run.num_steps // s.halving_eta ** (s.halving_rungs - 1 - r)
             for r in range(s.halving_rungs)]
    if steps[0] < 1:
      raise StudyError(f"study {study.name!r}: successive halving over {s.halving_rungs} rungs "
                       f"(eta {s.halving_eta}) needs train.num_steps >= "
                       f"{s.halving_eta ** (s.halving_rungs - 1)} in the search of group {g}; "
                       f"got {run.num_steps}")
    warmup = int(run.config.train.warmup_steps)
    out.append([{STEPS: b, WARMUP: round(warmup * b / run.num_steps)} for b in steps])
  return out


def rung_study(study: Study, rung: int, state_root: str | None,
               published_root: str | None = None) -> Study | None:
  """Rung `rung` (0-based) of successive halving (Jamieson & Talwalkar 2016, arXiv
  1502.07943; Li et al., Hyperband, arXiv 1603.06560): rung 0 trains every candidate of every
  group at the group's budget / eta^(rungs-1); rung r trains the best ceil(n / eta) of the n
  candidates rung r-1 trained (lowest METRIC; ties to the earlier grid entry) at eta times the
  budget, each from scratch (its schedule spans its own num_steps, `rung_budgets`). Run names
  carry `num_steps` and `warmup_steps`. None when rung r-1 is not complete in `state_root` (or
  `state_root` is None and rung > 0). `published_root`: see `selection`.
  """
  walked = _walk(study, state_root, until=rung, published_root=published_root)
  return walked[rung].search if len(walked) > rung else None


class _Stage(NamedTuple):
  """One stage of the search: its study, its candidates' (group, grid values) in the study's
  order, and each run with its score (None until every run is complete)."""

  search: Study
  entries: list[tuple[dict, dict]]
  scored: list[tuple[Run, float]] | None


def _walk(study: Study, state_root: str | None, until: int | None = None,
          published_root: str | None = None) -> list[_Stage]:
  """The search's stages in order: the whole grid in one stage, or the rungs of successive
  halving, each built from the scores of the one before. Stops after the first stage without
  scores, or at stage `until` (its scores unread); no scores are read without a `state_root`."""
  s = study.search
  entries = _entries(study)
  budgets = ({json.dumps(g, sort_keys=True): b for g, b in zip(groups(study), rung_budgets(study))}
             if s.halving_eta else None)
  walked: list[_Stage] = []
  for rung in range(num_rungs(study)):
    steps = None if budgets is None else [budgets[json.dumps(g, sort_keys=True)][rung]
                                          for g, _ in entries]
    search = _study_of(study, entries, steps, None if budgets is None else rung)
    scored = (None if state_root is None or rung == until
              else _scores(study, search, entries, state_root, published_root))
    walked.append(_Stage(search, entries, scored))
    if scored is None or rung == num_rungs(study) - 1:
      break
    survivors = []
    for g in groups(study):
      mine = [(e, value) for e, (_, value) in zip(entries, scored) if e[0] == g]
      keep = math.ceil(len(mine) / s.halving_eta)
      ranked = sorted(range(len(mine)), key=lambda i: mine[i][1])[:keep]  # ties: the earlier
      survivors += [mine[i][0] for i in sorted(ranked)]
    entries = survivors
  return walked


def _scores(study: Study, search: Study, entries: Sequence[tuple[dict, dict]],
            state_root: str, published_root: str | None = None
            ) -> list[tuple[Run, float]] | None:
  """Each entry's run and its METRIC after its last step (`score`), in order; None when a run
  is not complete or logged none. A run complete only in its published folder
  (<published_root>/<study>/search/<run>) is scored from that folder's metrics.

  Raises:
    StudyError: the search's runs do not follow its entries (an internal inconsistency).
  """
  out = []
  for (group, values), run in zip(entries, search.runs(), strict=True):
    if not all((run.base if k == BASE else run.overrides.get(k)) == v
               for k, v in {**group, **values}.items()):
      raise StudyError(f"study {study.name!r}: the search's runs do not follow its points "
                       f"(at {group} x {values}: {run.name})")
    workdir = workdirs.join(state_root, study.name, SEARCH_FOLDER, run.name)
    published = (os.path.join(published_root, study.name, SEARCH_FOLDER, run.name)
                 if published_root else None)
    state = workdirs.run_state(run, workdir, published)
    if state.train:
      return None
    value = score(published if state.published else workdir, run.num_steps)
    if value is None:
      return None
    out.append((run, value))
  return out


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


def selection(study: Study, state_root: str, published_root: str | None = None) -> dict | None:
  """Reads every search run under `<state_root>/<study>/search/` (or, for a run whose workdir
  is gone, its published folder `<published_root>/<study>/search/<run>`: sweeps/publish.py); the
  selection when each is complete with a score, else None (the search is not done).

  Returns:
    {"study", "metric", "grid", "group_by", "written", "groups": [{"group": {...}, "selected":
    {grid field: value}, "candidates": [{"run", "fields", "score"}, ...]}, ...]}; with
    successive halving also "halving": {"eta", "rungs"}, and each candidate's "rung" (0-based)
    and "num_steps"; the selection is the best of the last rung.

  Raises:
    StudyError: a group whose every candidate has a non-finite score (diverged).
  """
  s = study.search
  rungs = num_rungs(study)
  walked = _walk(study, state_root, published_root=published_root)
  if len(walked) < rungs or walked[-1].scored is None:
    return None
  by_group: dict[str, list[dict]] = {json.dumps(g, sort_keys=True): [] for g in groups(study)}
  for r, stage in enumerate(walked):
    for (group, values), (run, value) in zip(stage.entries, stage.scored):
      c = {"run": run.name, "fields": values, "score": value}
      if s.halving_eta:
        c |= {"rung": r, "num_steps": run.num_steps}
      by_group[json.dumps(group, sort_keys=True)].append(c)
  out_groups = []
  for group in groups(study):
    candidates = by_group[json.dumps(group, sort_keys=True)]
    last = [c for c in candidates if c.get("rung", 0) == rungs - 1]
    best = min(last, key=lambda c: c["score"])  # the first of equal scores
    if not math.isfinite(best["score"]):
      raise StudyError(f"study {study.name!r}: every search run of group {group} diverged "
                       f"(non-finite {METRIC}); widen Search.grid")
    out_groups.append({"group": group, "selected": dict(best["fields"]),
                       "candidates": candidates})
  return {"study": study.name, "metric": f"{METRIC} at train_len after the last step (nats per "
          "token, lower is better)", "grid": {k: list(v) for k, v in study.search.grid.items()},
          "group_by": list(study.search.group_by),
          **({"halving": {"eta": s.halving_eta, "rungs": s.halving_rungs}}
             if s.halving_eta else {}),
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
    for point in study.point_list():
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
    scores = ", ".join(f"{_fmt(c['fields'])}"
                       + (f" at {c['num_steps']} steps" if "num_steps" in c else "")
                       + f": {c['score']:.4f}" for c in g["candidates"])
    lines.append(f"# selected for {_fmt(g['group']) or 'every point'}: {_fmt(g['selected'])} "
                 f"({scores})")
  return lines


def _fmt(fields: Mapping[str, Any]) -> str:
  return ", ".join(f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else
                   f"{k.split('.')[-1]}={v}" for k, v in fields.items())


__all__ = ["DEFAULT_COMMON", "METRIC", "SEARCH_FOLDER", "SELECTION", "check", "describe",
           "final_study", "groups", "num_rungs", "read_selection", "rung_budgets", "rung_study",
           "score", "search_study", "selection", "selection_path"]
