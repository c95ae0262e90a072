"""Warm-started children of a study (context extension: pretrain at L, change the positions,
fine-tune briefly): a point with "@parent" and "@config" becomes a child `Run` of its parent
(`child_run`), its config built by its recipe from the parent's planned config
(`_child_config`). The keys and what they mean are in sweeps/study.py's docstring,
"Warm-started children".
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from typing import Any, Mapping, Sequence

import ml_collections

from configs.errors import ConfigError
from sweeps.overrides import REPO_ROOT, StudyError, apply_overrides, get_field, load_config_file
from sweeps.run_names import NAME_MAX, run_name
from sweeps.run_plan import BASE, EVAL_PREFIX, Run, _ident, _plan_run, _point_base

PARENT, CHILD_CONFIG, PLAN_CONFIG, BEFORE = "@parent", "@config", "@plan_config", "@before"
CHILD_KEYS = (PARENT, CHILD_CONFIG, PLAN_CONFIG, BEFORE)


def child_run(study_name: str, members: list[tuple[int, Mapping[str, Any]]],
              base: ml_collections.ConfigDict, common: dict, by_ident: dict[str, Run],
              shorts: dict[str, str]) -> Run:
  """The Run of a child's points ((index, point), equal but for their eval.* fields, each
  an evaluation point; sweeps/study.py, "Warm-started children").

  Raises:
    StudyError: no "@config" or "@parent", a parent that is not a run of the study from
      scratch, an unknown "@" key, or a child config that cannot be built.
  """
  i, point = members[0]
  where = f"study {study_name!r}, point {i}"
  unknown = [k for k in point if k.startswith("@") and k not in CHILD_KEYS]
  if unknown or PARENT not in point or CHILD_CONFIG not in point:
    raise StudyError(f"{where}: a child point needs {PARENT!r} (the parent's point) and "
                     f"{CHILD_CONFIG!r} (its --config, with {{parent}}); optional "
                     f"{PLAN_CONFIG!r}, {BEFORE!r}" + (f"; unknown keys {unknown}" if unknown
                                                       else ""))
  parent_point = point[PARENT]
  if not isinstance(parent_point, Mapping) or any(k in parent_point for k in CHILD_KEYS):
    raise StudyError(f"{where}: {PARENT!r} must be the parent's point (a dict of its training "
                     f"fields, the parent a run from scratch); got {parent_point!r}")
  base_arg, parent_base = _point_base(parent_point, {None: (None, base)}, where)
  parent_fields = {k: v for k, v in parent_point.items() if k != BASE}
  resolved = apply_overrides(parent_base, {**common, **parent_fields})
  parent = by_ident.get(_ident(base_arg, {k: get_field(resolved, k) for k in parent_fields
                                          if not k.startswith(EVAL_PREFIX)}))
  if parent is None:
    raise StudyError(f"{where}: its parent {dict(parent_point)} is not a run of the study "
                     f"(add its point)")
  for key in (CHILD_CONFIG, PLAN_CONFIG):
    if key in point and (not isinstance(point[key], str) or "{parent}" not in point[key]):
      raise StudyError(f"{where}: {key!r} must be a config file with {{parent}} in its "
                       f"argument, e.g. 'configs/extend_yarn.py:{{parent}},4'; got "
                       f"{point[key]!r}")
  before = point.get(BEFORE, ())
  if isinstance(before, (str, bytes)) or not all(
      isinstance(c, Sequence) and not isinstance(c, str) and all(isinstance(a, str) for a in c)
      for c in before):
    raise StudyError(f"{where}: {BEFORE!r} must be a list of commands, each a list of "
                     f"arguments (with {{parent}}, {{workdir}}, {{python}}); got {before!r}")
  fields = {k: v for k, v in point.items()
            if k not in CHILD_KEYS and not k.startswith(EVAL_PREFIX)}
  config = _child_config(point[CHILD_CONFIG], point.get(PLAN_CONFIG), parent, where)
  try:
    config = apply_overrides(config, fields)
    eval_points = []
    for _, member in members:
      evals = {k: v for k, v in member.items() if k.startswith(EVAL_PREFIX)}
      resolved = apply_overrides(config, evals)
      evals = {k: get_field(resolved, k) for k in evals}
      if evals not in eval_points:
        eval_points.append(evals)
  except StudyError as e:
    raise StudyError(f"{where}: {e}") from None
  config.train.init_from = "{parent}"
  train = {k: get_field(config, k) for k in fields}
  file_part, _, arg = point[CHILD_CONFIG].partition(":")
  extra = [a for a in arg.split(",") if a and "{parent}" not in a]
  stem = "_".join([os.path.splitext(os.path.basename(file_part))[0], *extra])
  own = run_name(train, shorts) if train else ""
  name = f"{stem}{',' + own if own else ''}--{parent.name}"
  if len(name) > NAME_MAX:
    name = f"{name[:NAME_MAX - 9]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"
  name = re.sub(r"[^A-Za-z0-9._+=,-]", "_", name)
  run = _plan_run(name, train, config, {}, eval_points)
  return dataclasses.replace(run, parent=parent.name, child_config=point[CHILD_CONFIG],
                             before=tuple(tuple(c) for c in before))


def _child_config(template: str, plan_template: str | None, parent: Run,
                  where: str) -> ml_collections.ConfigDict:
  """A child's config as its recipe builds it from the parent's planned config (written to a
  temporary workdir); `plan_template` when the recipe needs files that do not exist yet.

  Raises:
    StudyError: neither template builds a config (naming the recipe's own error).
  """
  from runs.workdir import write_run_config  # noqa: PLC0415 -- jax, only for child studies

  with tempfile.TemporaryDirectory() as tmp:
    write_run_config(tmp, parent.config)
    errors = []
    for t in (template, plan_template):
      if t is None:
        continue
      file_part, _, arg = t.partition(":")
      path = file_part if os.path.isabs(file_part) else os.path.join(REPO_ROOT, file_part)
      try:
        return load_config_file(path, arg.replace("{parent}", tmp))
      except (ConfigError, StudyError) as e:
        errors.append(f"{t}: {str(e).replace(tmp, '{parent}')}")
    raise StudyError(f"{where}: the child's config cannot be built: " + "; ".join(errors))
