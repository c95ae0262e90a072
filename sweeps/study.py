"""A study as data: a base config, a list of override dicts, a name; and what each run must do.

A study file (sweeps/<study>.py) defines one module-level `STUDY`:

  STUDY = Study(
      name="pe_small",
      config="configs/alibi_tiny.py",                  # train.py's --config
      points=lambda: product(**{"model.position.kind": ["rope", "alibi"], "seed": [0, 1]}),
      common={"train.num_steps": 600},                 # every point; not in run names
  )

Each point is a dict of dotted config fields (`"model.position.kind"`, `"seed"`, ...) -> values.

**Runs and evaluation points.** Fields under `eval.` only change how a trained model is
evaluated, not how it is trained. Points whose other fields are equal are therefore one *run*
(one train.py process, one workdir `<root>/<study>/<run name>`), and each point's `eval.*` fields
are an *evaluation point* of that run: eval-time extensions (`eval.extension="pi,yarn"`,
`eval.factor=4`), other suites (`eval.suites=...,passkey`) or another protocol
(`eval.protocol="sliding"`) need no retraining. A run is trained by

  python train.py --config=<config> --workdir=<root>/<study>/<run> --config.<field>=<value> ...

with the point's training fields and the study's `common` fields (all of them except
`eval.extension`), and train.py's final evaluation gives ppl_vs_length and loss_by_position, and
passkey / needle if `eval.suites` names them (an algorithmic task run: the algorithmic suite), for
the model as trained, with the study's common eval settings. Every result an evaluation point
asks for beyond that is computed afterwards from the final checkpoint by

  python -m eval.run --workdir=<root>/<study>/<run> --config.eval.suites=... \\
      --config.eval.extension=... --config.eval.<field>=<value> ...

(`eval.run` reads the run's config.json, so the command carries the eval fields only). This keeps
train.py's results labelled as what they are (train.py evaluates the model as trained; it does not
apply `eval.extension`), and an extension or suite added to a finished study costs one eval.run
per run, not a retraining. Results are identified by their content (`ResultKey`: suite,
extension, factor, protocol, stride), which is also how a run is found complete.

**Warm-started children** (context extension: pretrain at L, change the positions, fine-tune
briefly). A point with the key `"@parent"` is a *child*: its value is the parent's point (the
parent's training fields, as in the parent's own point), and `"@config"` is the child's train.py
--config, a config file whose argument names the parent's workdir as `{parent}`:

  {"@parent": {"model.position.kind": "rope", "seed": 0},
   "@config": "configs/extend_yarn.py:{parent},4"}

The child is trained by `python train.py --config=configs/extend_yarn.py:<root>/<study>/<parent>,4
--workdir=<root>/<study>/<child> --config.<field>=...` with the child point's own fields only (the
recipe's config is complete; the study's `common` fields are the parents'), after its parent is
complete. `"@before"` (optional) lists commands run before the child's training, with `{parent}`,
`{workdir}` (the child's) and `{python}` filled in (a LongRoPE factor search on the parent); when
the child's config cannot be built before they ran (the search's factors.json), `"@plan_config"`
names the config the plan checks instead (same shapes, steps and evaluations). The plan builds
each child's config from its parent's planned config (written to a temporary workdir), so a dry
run lists every child before any parent has trained. The child's name is the recipe's file stem
and its arguments after the parent (`_4`), its own fields, then `--` and the parent's name
(`extend_yarn_4--kind=rope,seed=0`).

**Per-point base configs** (one study over several tasks, each with its own config file). A
from-scratch point may carry `"@base": "configs/task_mqar.py"`: that file, not `Study.config`, is
the run's train.py --config, and the study's `common` fields and the point's fields are applied
to it. The run's name starts with `config=<file stem>`:

  {"@base": "configs/task_mqar.py", "model.position.kind": "rope"}  ->  config=task_mqar,kind=rope

A child's `"@parent"` names such a parent with the same `"@base"` key in the parent's point.

**Run names** are derived from the run's own training fields only, so they are stable when points
are added: `kind=rope,seed=1`, fields sorted by their short name. A field's short name is its
alias (`Study.aliases`; `model.position.kind` -> `kind` by default), else the shortest dotted
suffix of its path that no other config field ends with (`data.train_len` -> `train_len`,
`data.passkey.seed` -> `data.passkey.seed`); values are written `0.5`, `True`, tuples as
`0.5-1-2`, commas in strings as `+`; characters other than `A-Za-z0-9._+-` become `_`. Names
longer than `NAME_MAX` characters are cut and end in an 8-digit hash of the whole name. Two
different runs with one name are an error (`StudyError`).

**Modules.** This one holds `Study`, `Search`, the point builders (`product`, `zip_`, `cross`,
`model_sizes`, `train_lengths`) and `load_study`; a study's runs are planned and checked in
sweeps/run_plan.py (`Run`, `EvalCommand`, `check_commands`, `validate_run`), its children in
sweeps/child_runs.py, named in sweeps/run_names.py; sweeps/result_keys.py identifies results
(`ResultKey`) and sweeps/overrides.py sets dotted config fields (`apply_overrides`,
`StudyError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import itertools
import json
import os
import re
import traceback
import types
from typing import Any, Callable, Mapping, Sequence

import ml_collections

from configs.errors import what_exists
from sweeps.child_runs import CHILD_KEYS, child_run
from sweeps.overrides import REPO_ROOT, StudyError, apply_overrides, get_field, load_config_file
from sweeps.run_names import run_name, short_names
from sweeps.run_plan import BASE, EVAL_PREFIX, Run, _ident, _plan_run, _point_base

STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
DEFAULT_ALIASES = {"model.position.kind": "kind"}
NOT_FOR_TRAIN = ("eval.extension",)  # train.py evaluates the model as trained: never given these


# ---------------------------------------------------------------------------- building points


def _axes(axes: Mapping[str, Sequence[Any]], helper: str) -> tuple[list[str], list[list[Any]]]:
  """Checks `axes` (field -> non-empty list of values) and returns names and value lists."""
  if not axes:
    raise StudyError(f"{helper}() needs at least one axis, e.g. {helper}(seed=[0, 1])")
  names, values = [], []
  for name, vals in axes.items():
    if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence) or not vals:
      raise StudyError(f"{helper}(): axis {name!r} must be a non-empty list of values; "
                       f"got {vals!r}")
    names.append(name)
    values.append(list(vals))
  return names, values


def product(**axes: Sequence[Any]) -> list[dict[str, Any]]:
  """The Cartesian product of axes: one point per combination, the last axis varying fastest.

  Dotted fields are passed by unpacking a dict: `product(**{"model.position.kind": ["rope",
  "alibi"]}, seed=[0, 1])` gives 4 points.

  Args:
    **axes: dotted config field -> non-empty list of its values.

  Returns:
    list of {field: value} dicts, len = product of the axes' lengths.

  Raises:
    StudyError: no axis, or an axis that is not a non-empty list.
  """
  names, values = _axes(axes, "product")
  return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def zip_(**axes: Sequence[Any]) -> list[dict[str, Any]]:
  """Axes taken together, element by element: `zip_(seed=[0, 1], **{"data.shuffle_seed":
  [0, 1]})` gives {seed: 0, data.shuffle_seed: 0} and {seed: 1, data.shuffle_seed: 1}.

  Args:
    **axes: dotted config field -> list of values; all lists of one length.

  Returns:
    list of {field: value} dicts, one per position.

  Raises:
    StudyError: no axis, an axis that is not a non-empty list, or lists of different lengths.
  """
  names, values = _axes(axes, "zip_")
  lengths = {name: len(v) for name, v in zip(names, values)}
  if len(set(lengths.values())) > 1:
    raise StudyError(f"zip_(): axes must have equal lengths; got {lengths}")
  return [dict(zip(names, combo)) for combo in zip(*values)]


def cross(*point_lists: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """The Cartesian product of lists of points, each combination merged into one point:
  `cross(product(kind=...), zip_(seed=..., lr=...))`.

  Raises:
    StudyError: no list, an empty list, or two lists that set the same field.
  """
  if not point_lists or any(not points for points in point_lists):
    raise StudyError("cross() needs one or more non-empty lists of points")
  out = []
  for combo in itertools.product(*point_lists):
    merged: dict[str, Any] = {}
    for point in combo:
      both = set(merged) & set(point)
      if both:
        raise StudyError(f"cross(): fields {sorted(both)} are set by two of the lists")
      merged.update(point)
    out.append(merged)
  return out


def model_sizes(shapes: Sequence[tuple[int, int]], *, head_dim: int = 32,
                mlp_ratio: int = 4) -> list[dict[str, Any]]:
  """Points of a model-size axis: for each (d_model, num_layers), model.d_model, num_layers,
  num_heads = d_model // head_dim and mlp_dim = mlp_ratio x d_model (GPT-2's shape ladder).
  Cross them with schemes: `cross(product(**{"model.position.kind": [...]}), model_sizes(...))`;
  `param_counts` gives each size's parameters without allocating any.

  Raises:
    StudyError: a d_model that head_dim does not divide, or a non-positive size.
  """
  out = []
  for d_model, num_layers in shapes:
    if d_model < 1 or num_layers < 1 or d_model % head_dim:
      raise StudyError(f"model_sizes(): ({d_model}, {num_layers}) needs d_model, num_layers >= 1 "
                       f"and d_model a multiple of head_dim={head_dim}")
    out.append({"model.d_model": d_model, "model.num_layers": num_layers,
                "model.num_heads": d_model // head_dim, "model.mlp_dim": mlp_ratio * d_model})
  return out


def train_lengths(lengths: Sequence[int], *, tokens_per_step: int | None = None
                  ) -> list[dict[str, Any]]:
  """Points of a training-length axis (data.train_len); with `tokens_per_step`, data.batch_size
  = tokens_per_step // train_len too, so every length trains on the same tokens per step (and,
  at equal steps, the same tokens).

  Raises:
    StudyError: a length < 1, or one that does not divide tokens_per_step.
  """
  out = []
  for n in lengths:
    if n < 1 or (tokens_per_step and tokens_per_step % n):
      raise StudyError(f"train_lengths(): {n} must be >= 1" + (
          f" and divide tokens_per_step={tokens_per_step}" if tokens_per_step else ""))
    out.append({"data.train_len": n} | ({"data.batch_size": tokens_per_step // n}
                                        if tokens_per_step else {}))
  return out


def param_counts(config: ml_collections.ConfigDict, points: Sequence[Mapping[str, Any]]
                 ) -> list[int]:
  """Parameters of the model of each point's fields over `config` (nnx.eval_shape: nothing is
  allocated; models.spec.count_params)."""
  from models.spec import count_params  # noqa: PLC0415 -- jax, only when sizes are counted
  return [count_params(apply_overrides(config, p)) for p in points]


@dataclasses.dataclass(frozen=True)
class Search:
  """A study's tuning stage: tune, then compare (sweeps/search.py runs it).

  Before the study's own runs, every group of its from-scratch points (the distinct values of
  `group_by`, and of a point's "@base") trains once per combination of `grid` with the study's
  common fields and then `common` (a short budget); the candidate with the lowest validation
  loss at train_len after its last step (train.py's final `val_loss`, nats per token) is the
  group's selection, recorded with every candidate's score in `<root>/<study>/selection.json`;
  the study's runs (the final stage) then train with their group's selected fields, which
  become part of their names. A per-scheme learning rate is the usual use (McGill's
  length-generalization code tunes each PE, then runs the best config over seeds).

  Attributes:
    grid: dotted field -> candidate values, e.g. {"train.learning_rate": [1e-3, 3e-3, 1e-2]}; the
      Cartesian product is searched.
    group_by: the fields one selection is made for, default the scheme; the other fields of the
      study's points (seeds, ...) take the base config's values in the search.
    common: fields of every search run (after the study's common fields), e.g. a shorter
      train.num_steps; by default the search evaluates at train_len only (eval.suites =
      "ppl_vs_length", eval.length_multipliers = (1.0,)).
    halving_eta: 0 = every candidate at the search's budget; an integer >= 2 = successive
      halving (Jamieson & Talwalkar, arXiv 1502.07943) over `halving_rungs` rungs: rung r
      trains its candidates for train.num_steps / eta^(rungs-1-r) steps, each from scratch,
      and the best ceil(n / eta) of each group go on to the next rung (sweeps/search.py).
    halving_rungs: rungs of successive halving (>= 2; unused with halving_eta = 0).
  """

  grid: Mapping[str, Sequence[Any]]
  group_by: Sequence[str] = ("model.position.kind",)
  common: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  halving_eta: int = 0
  halving_rungs: int = 3


@dataclasses.dataclass(frozen=True)
class Study:
  """A sweep: a base config, its points, a name.

  Attributes:
    name: the study's folder under --root; letters, digits, `_`, `-`, `.`.
    config: the base config: a config file path (relative to the repository root, or
      absolute), a config module (e.g. `configs.alibi_tiny`), or its `get_config` function.
      It is train.py's --config for every run.
    points: returns the list of points (dicts of dotted field -> value); see the module
      docstring for how they become runs and evaluation points.
    common: fields set in every point, not part of run names (e.g. a shorter train.num_steps).
    aliases: dotted field -> short name used in run names (default: model.position.kind ->
      kind); aliases must be unique and contain no `=` or `,`.
    description: one line shown by the launcher.
    search: an optional tuning stage run before the study's runs (`Search`).
  """

  name: str
  config: str | types.ModuleType | Callable[[], ml_collections.ConfigDict]
  points: Callable[[], Sequence[Mapping[str, Any]]]
  common: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  aliases: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(DEFAULT_ALIASES))
  description: str = ""
  search: Search | None = None

  def config_path(self) -> str:
    """Absolute path of the base config file.

    Raises:
      StudyError: `config` is not a file path, module or get_config function, or the file
        does not exist.
    """
    c = self.config
    if isinstance(c, str):
      path = c if os.path.isabs(c) else os.path.join(REPO_ROOT, c)
    elif isinstance(c, types.ModuleType) and getattr(c, "__file__", None):
      path = c.__file__
    elif callable(c) and getattr(c, "__name__", "") == "get_config":
      path = importlib.import_module(c.__module__).__file__
    else:
      raise StudyError(f"Study.config of {self.name!r} must be a config file path, a config "
                       f"module or its get_config function; got {c!r}")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
      raise StudyError(f"Study.config of {self.name!r}: {path} does not exist")
    return path

  def config_arg(self) -> str:
    """train.py's --config value: the path relative to the repository root when the file is in
    it (so remote checkouts find it), else absolute."""
    path = self.config_path()
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith("..") else rel

  def base_config(self) -> ml_collections.ConfigDict:
    """The base config, as train.py builds it from --config before any override."""
    return load_config_file(self.config_path())

  def point_list(self) -> list:
    """`points()`, called once, as a list.

    Raises:
      StudyError: points() raised (anything: one line naming the study, the file and line where
        it raised, and the exception) or returned something that is not a sequence.
    """
    try:
      return list(self.points())
    except PointsError:
      raise
    except Exception as e:  # noqa: BLE001 -- any error of the user's points function
      detail = " ".join(str(e).split())
      detail = detail if len(detail) <= 300 else detail[:297] + "..."
      raise PointsError(f"study {self.name!r}{_raised_at(e, self.points)}: points() raised "
                        f"{type(e).__name__}" + (f": {detail}" if detail else "")) from None

  def runs(self) -> list[Run]:
    """The study's runs: points grouped by their training fields, in the points' order.

    Raises:
      StudyError: a bad study name, no points, a point that is not a dict, a field that does
        not exist or whose value does not fit (naming the dotted field), two runs with the same
        name, or two evaluation points of a run that would write one result differently.
      ConfigError: an unknown eval suite or extension name.
    """
    if not isinstance(self.name, str) or not STUDY_NAME.fullmatch(self.name):
      raise StudyError(f"Study.name={self.name!r} must match {STUDY_NAME.pattern} (it is a "
                       "folder name)")
    base = self.base_config()
    points = self.point_list()
    if not points:
      raise StudyError(f"study {self.name!r}: points() returned no point")
    common = dict(self.common)
    apply_overrides(base, common)  # names a bad common field before any point
    common_train = {k: v for k, v in common.items() if k not in NOT_FOR_TRAIN}
    common_eval = {k: v for k, v in common.items() if k.startswith(EVAL_PREFIX)}
    shorts = short_names(base, self.aliases)
    bases: dict[str | None, tuple[str | None, ml_collections.ConfigDict]] = {None: (None, base)}
    groups: dict[str, dict] = {}
    children = []
    for i, point in enumerate(points):
      if not isinstance(point, Mapping):
        raise StudyError(f"study {self.name!r}: point {i} is a {type(point).__name__}, "
                         "not a dict of dotted field -> value")
      if any(k in point for k in CHILD_KEYS):
        children.append((i, point))
        continue
      base_arg, point_base = _point_base(point, bases, f"study {self.name!r}, point {i}")
      fields = {k: v for k, v in point.items() if k != BASE}
      try:
        resolved = apply_overrides(point_base, {**common, **fields})
      except StudyError as e:
        raise StudyError(f"study {self.name!r}, point {i} {dict(point)}: {e}") from None
      train = {k: get_field(resolved, k) for k in fields if not k.startswith(EVAL_PREFIX)}
      evals = {k: get_field(resolved, k) for k in fields if k.startswith(EVAL_PREFIX)}
      ident = _ident(base_arg, train)
      group = groups.setdefault(ident, {"train": train, "evals": [], "base": base_arg})
      if evals not in group["evals"]:
        group["evals"].append(evals)
    runs, names = [], {}
    for group in groups.values():
      name = run_name(group["train"], shorts)
      if group["base"] is not None:
        stem = os.path.splitext(os.path.basename(group["base"]))[0]
        name = f"config={stem}" + (f",{name}" if group["train"] else "")
        name = re.sub(r"[^A-Za-z0-9._+=,-]", "_", name)
      if name in names:
        raise StudyError(f"study {self.name!r}: runs {names[name]} and {group['train']} have "
                         f"the same name {name!r}; change a value or Study.aliases")
      names[name] = group["train"]
      overrides = {**common_train, **group["train"]}
      config = apply_overrides(bases[group["base"]][1], overrides)
      run = _plan_run(name, overrides, config, common_eval, group["evals"])
      runs.append(dataclasses.replace(run, base=group["base"]))
    by_ident = {ident: run for ident, run in zip(groups, runs)}
    child_groups: dict[str, list] = {}  # a child's points that differ only in eval.* fields
    for i, point in children:
      ident = json.dumps({k: v for k, v in point.items() if not k.startswith(EVAL_PREFIX)},
                         sort_keys=True, default=repr)
      child_groups.setdefault(ident, []).append((i, point))
    for members in child_groups.values():
      child = child_run(self.name, members, base, common, by_ident, shorts)
      if child.name in names:
        raise StudyError(f"study {self.name!r}: two runs have the same name {child.name!r}")
      names[child.name] = members[0][1]
      runs.append(child)
    return runs


class PointsError(StudyError):
  """A study's points() raised; the message names the study file and line."""


def _raised_at(error: BaseException, points: Callable) -> str:
  """" (<file>, line <n>)": where `error` was raised in the file that defines `points` (its
  deepest frame there), else that file; "" when `points` has no source file."""
  code = getattr(points, "__code__", None)
  if code is None:
    return ""
  frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == code.co_filename]
  line = frames[-1].lineno if frames else code.co_firstlineno
  rel = os.path.relpath(code.co_filename)
  return f" ({code.co_filename if rel.startswith('..') else rel}, line {line})"


# ---------------------------------------------------------------------------- loading studies


def load_study(spec: str) -> Study:
  """The `STUDY` of a study file (`sweeps/pe_extrapolation_cpu.py`) or module
  (`sweeps.pe_extrapolation_cpu`).

  Raises:
    StudyError: the file or module does not exist, does not parse or raises while it loads, or
      defines no `STUDY` of type Study.
  """
  if os.path.isfile(spec) and not spec.endswith(".py"):
    raise StudyError(f"{spec} is not a study file (a .py file defining STUDY = Study(...))"
                     + what_exists(os.path.splitext(spec)[0] + ".py", ".py", default_dir="sweeps",
                                   holds="\nSTUDY = Study("))
  if spec.endswith(".py") or os.sep in spec:
    path = os.path.abspath(spec)
    if not os.path.isfile(path):
      raise StudyError(f"study file {spec!r} does not exist"
                       + what_exists(spec if spec.endswith(".py") else spec + ".py", ".py",
                                     default_dir="sweeps", holds="\nSTUDY = Study("))
    mod_spec = importlib.util.spec_from_file_location(
        "_sweep_study_" + hashlib.sha1(path.encode()).hexdigest()[:8], path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
      mod_spec.loader.exec_module(module)
    except SyntaxError as e:
      raise StudyError(f"study file {spec}, line {e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 -- any error while running the user's study file
      raise StudyError(f"study file {spec} failed to load: {type(e).__name__}: {e}") from None
  else:
    try:
      module = importlib.import_module(spec)
    except ModuleNotFoundError as e:
      raise StudyError(f"study module {spec!r} cannot be imported: {e}") from None
  study = getattr(module, "STUDY", None)
  if not isinstance(study, Study):
    raise StudyError(f"study {spec!r} must define STUDY = sweeps.study.Study(...); "
                     f"found {type(study).__name__}")
  return study


__all__ = ["Search", "Study", "cross", "load_study", "model_sizes", "param_counts", "product",
           "train_lengths", "zip_"]
