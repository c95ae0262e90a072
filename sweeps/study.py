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
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import itertools
import json
import os
import re
import tempfile
import types
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import ml_collections

from configs.errors import ConfigError
from configs.validate import eval_extensions, preflight, validate
from eval import suites as suites_registry
from models.extensions import applied_factor

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME_MAX = 120  # characters of a run name (a path component; file systems allow 255 bytes).
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
DEFAULT_ALIASES = {"model.position.kind": "kind"}
EVAL_PREFIX = "eval."
PARENT, CHILD_CONFIG, PLAN_CONFIG, BEFORE = "@parent", "@config", "@plan_config", "@before"
CHILD_KEYS = (PARENT, CHILD_CONFIG, PLAN_CONFIG, BEFORE)
BASE = "@base"  # a from-scratch point's own base config (module docstring, "Per-point base configs")
NOT_FOR_TRAIN = ("eval.extension",)  # train.py evaluates the model as trained: never given these
# eval.* fields that only change the results of suites with `per_protocol` (perplexity; so they
# do not make two passkey/needle/algorithmic results differ), and fields that change no result.
PPL_ONLY_FIELDS = ("protocol", "stride", "position_bins", "max_tokens_per_length", "split")
NO_RESULT_FIELDS = ("suites", "extension", "batch_tokens")


def _per_protocol(suite: str) -> bool:
  """Whether results named `suite` depend on eval.protocol and stride (eval/suites/)."""
  return suite in suites_registry.REGISTRY and suites_registry.REGISTRY[suite].per_protocol


class StudyError(ConfigError):
  """A study, one of its points, or an override is invalid; the message names the study field
  or the dotted config field, and the allowed values."""


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


# ---------------------------------------------------------------------------- config files


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


def load_config_file(path: str, arg: str = "") -> ml_collections.ConfigDict:
  """Calls `get_config()` of the config file at `path`, or `get_config(arg)` for a non-empty
  `arg` (as train.py's `--config=<path>[:<arg>]` does).

  Raises:
    StudyError: the file does not exist or has no get_config().
  """
  if not os.path.isfile(path):
    raise StudyError(f"Study.config: config file {path!r} does not exist")
  spec = importlib.util.spec_from_file_location(
      "_sweep_config_" + hashlib.sha1(path.encode()).hexdigest()[:8], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not callable(getattr(module, "get_config", None)):
    raise StudyError(f"Study.config: {path} defines no get_config()")
  return module.get_config(arg) if arg else module.get_config()


def leaf_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
  """Dotted paths of every non-section field of `config`, in definition order."""
  out = []
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
      out += leaf_paths(value, path + ".")
    else:
      out.append(path)
  return out


def get_field(config: ml_collections.ConfigDict, path: str) -> Any:
  """The value of dotted field `path` of `config`.

  Raises:
    StudyError: a part of the path is not a field (names the closest fields).
  """
  node = config
  parts = path.split(".")
  for i, part in enumerate(parts):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      where = ".".join(parts[:i]) or "the config"
      fields = list(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
      close = difflib.get_close_matches(part, fields, n=3)
      hint = f"; did you mean {' or '.join(repr('.'.join(parts[:i] + [c])) for c in close)}?" \
          if close else (f"; {where} has fields {fields}" if fields else
                         f"; {where} is a value, not a section")
      raise StudyError(f"override {path!r}: {where} has no field {part!r}{hint}")
    node = node[part]
  return node


def _literal(value: Any) -> bool:
  """True for values that round-trip through repr + ast.literal_eval (tuple elements)."""
  if isinstance(value, (tuple, list)):
    return all(_literal(v) for v in value)
  return value is None or isinstance(value, (bool, int, float, str))


def coerce(path: str, current: Any, value: Any) -> Any:
  """`value` converted to the type of field `path` (whose current value is `current`).

  bool fields take bools; int fields ints (not bools); float fields ints or floats (as float);
  str fields strings; tuple fields lists or tuples of literals (as a tuple).

  Raises:
    StudyError: the value does not fit the field's type, or the field is a section or of a type
      that cannot be written as a --config flag.
  """
  def bad(kind: str) -> StudyError:
    return StudyError(f"override {path}={value!r}: the field is {kind}; got a "
                      f"{type(value).__name__}")
  if isinstance(current, ml_collections.ConfigDict):
    raise StudyError(f"override {path!r} names a section ({sorted(current.keys())}); "
                     f"override its fields, e.g. {path}.{next(iter(current.keys()), 'x')}")
  if isinstance(current, bool):
    if not isinstance(value, bool):
      raise bad("a bool (True or False)")
    return value
  if isinstance(current, int):
    if isinstance(value, bool) or not isinstance(value, int):
      raise bad("an int")
    return value
  if isinstance(current, float):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise bad("a float")
    return float(value)
  if isinstance(current, str):
    if not isinstance(value, str):
      raise bad("a str")
    return value
  if isinstance(current, tuple):
    if not isinstance(value, (tuple, list)) or not _literal(value):
      raise bad("a tuple of numbers, strings or bools")
    return tuple(value)
  raise StudyError(f"override {path!r}: fields of type {type(current).__name__} cannot be set "
                   "from a study (bool, int, float, str and tuple fields can)")


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A copy of `config` with each dotted field of `overrides` set (type-checked, see `coerce`).

  Raises:
    StudyError: naming the first dotted field that does not exist or whose value does not fit.
  """
  out = ml_collections.ConfigDict(config.to_dict())
  for path, value in overrides.items():
    if not isinstance(path, str) or not path:
      raise StudyError(f"override keys must be dotted field names; got {path!r}")
    current = get_field(out, path)
    parent, _, leaf = path.rpartition(".")
    section = get_field(out, parent) if parent else out
    section[leaf] = coerce(path, current, value)
  return out


def flag_value(value: Any) -> str:
  """`value` as ml_collections config_flags parse it back for a field of the value's type.

  bool -> True/False (absl's boolean parser); int -> 12; float -> repr (1e-05, 0.5); str -> as
  is, commas included (one argv element; shells need it quoted, see `shlex.join`); tuple ->
  its repr, e.g. (0.5, 1.0) (the tuple parser reads it with ast.literal_eval, so strings in it
  are quoted and `(x,)` keeps one element).
  """
  if isinstance(value, bool):
    return str(value)
  if isinstance(value, float):
    return repr(value)
  if isinstance(value, tuple):
    return repr(value)
  return str(value)


def config_flags(overrides: Mapping[str, Any]) -> list[str]:
  """`--config.<field>=<value>` arguments for `overrides` (sorted by field)."""
  return [f"--config.{path}={flag_value(overrides[path])}" for path in sorted(overrides)]


# ---------------------------------------------------------------------------- results


class ResultKey(NamedTuple):
  """What identifies one result JSON of a run (its content, not its file name).

  suite: ppl_vs_length | loss_by_position | passkey | needle | algorithmic.
  extension: eval-time extension ("none" = the model as trained).
  factor: eval.factor of the extension (1.0 for "none").
  protocol: perplexity suites: "non_overlapping" | "sliding"; None for the others.
  stride: sliding protocol: eval.stride (0 = length // 2); None otherwise.
  """

  suite: str
  extension: str
  factor: float
  protocol: str | None
  stride: int | None

  def describe(self) -> str:
    """e.g. `ppl_vs_length (extension yarn x4, protocol sliding, stride 0)`."""
    parts = [f"extension {self.extension}" + (f" x{self.factor:g}" if self.extension != "none"
                                              else "")]
    if self.protocol:
      parts.append(f"protocol {self.protocol}")
    if self.stride is not None:
      parts.append(f"stride {self.stride}")
    return f"{self.suite} ({', '.join(parts)})"


def make_key(suite: str, extension: str, factor: float, protocol: str | None,
             stride: int | None) -> ResultKey:
  """A ResultKey with the fields that do not apply to `suite` / `extension` cleared."""
  ppl = _per_protocol(suite)
  protocol = (protocol or "non_overlapping") if ppl else None
  return ResultKey(suite, extension, applied_factor(extension, factor), protocol,
                   int(stride or 0) if protocol == "sliding" else None)


def result_key(result: Mapping[str, Any]) -> ResultKey | None:
  """The key of a result JSON written by train.py or eval.run (None if it has no `suite`)."""
  suite = result.get("suite")
  if not isinstance(suite, str):
    return None
  return make_key(suite, result.get("extension", "none"), result.get("extension_factor", 1.0),
                  result.get("protocol"), result.get("stride"))


def _settings(config: ml_collections.ConfigDict, key: ResultKey) -> str:
  """The eval settings that shape the result `key` (canonical JSON), to tell two evaluation
  points that would write different results under one key."""
  e = config.eval.to_dict()
  drop = set(NO_RESULT_FIELDS)
  if key.extension == "none":
    drop |= {"factor", "window"}
  if not _per_protocol(key.suite):
    drop |= set(PPL_ONLY_FIELDS)
  drop |= {s.section for s in suites_registry.unique(suites_registry.REGISTRY.values())
           if s.section and s.section != key.suite}
  return json.dumps({k: v for k, v in e.items() if k not in drop}, sort_keys=True, default=str)


def train_results(config: ml_collections.ConfigDict) -> list[ResultKey]:
  """The results train.py's final evaluation writes for `config` (the model as trained): the
  suites eval.suites.for_run chooses for training (perplexity and loss by position for text,
  the algorithmic suite for a task, and those `eval.suites` names)."""
  chosen, _ = suites_registry.for_run(config, "train")
  return [make_key(name, "none", 1.0, config.eval.protocol, config.eval.stride)
          for name in suites_registry.result_names(chosen)]


def eval_point_suites(config: ml_collections.ConfigDict) -> list[str]:
  """The result names an evaluation point asks for (all names of each suite `eval.suites`
  names: loss_by_position and ppl_vs_length come together), chosen as eval.run chooses them.

  Raises:
    StudyError: an unknown suite, or one for the other kind of data (eval.suites.for_run).
  """
  try:
    chosen, _ = suites_registry.for_run(config, "eval")
  except ConfigError as e:
    raise StudyError(str(e)) from None
  return suites_registry.result_names(chosen)


# ---------------------------------------------------------------------------- runs


@dataclasses.dataclass(frozen=True)
class EvalCommand:
  """One `python -m eval.run` invocation of a run.

  Attributes:
    overrides: the eval.* fields given as --config.eval.<field>=... (suites and extension set).
    results: the results it writes.
    point: index of the evaluation point (in the run's `eval_points`) it comes from.
  """

  overrides: Mapping[str, Any]
  results: tuple[ResultKey, ...]
  point: int


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run of a study and its evaluations.

  Attributes:
    name: the run's name (its workdir's name under <root>/<study>).
    overrides: dotted fields given to train.py (the study's `common` except eval.extension,
      then the point's training fields).
    config: the resolved training config (train.py's config for this run).
    eval_points: each evaluation point's eval.* fields ({} = the study's eval settings), in
      the order of the study's points.
    train_results: the results train.py's final evaluation writes.
    evals: the eval.run invocations that give every other result of the evaluation points.
    parent: a child's parent run name (module docstring, "Warm-started children"); None for a
      run from scratch.
    child_config: a child's train.py --config with `{parent}` for the parent's workdir.
    before: a child's commands before training (templates of `{parent}`, `{workdir}`,
      `{python}`), each a tuple of arguments.
    base: a run's own base config file (its point's "@base", as written there), train.py's
      --config instead of the study's; None = the study's.
  """

  name: str
  overrides: Mapping[str, Any]
  config: ml_collections.ConfigDict
  eval_points: tuple[Mapping[str, Any], ...]
  train_results: tuple[ResultKey, ...]
  evals: tuple[EvalCommand, ...]
  parent: str | None = None
  child_config: str | None = None
  before: tuple[tuple[str, ...], ...] = ()
  base: str | None = None

  @property
  def num_steps(self) -> int:
    """train.num_steps: the step of the final checkpoint and of every result."""
    return int(self.config.train.num_steps)

  @property
  def results(self) -> tuple[ResultKey, ...]:
    """Every result the run must have to be complete."""
    return self.train_results + tuple(k for e in self.evals for k in e.results)

  def train_argv(self, python: str, config_arg: str, workdir: str,
                 parent_workdir: str | None = None) -> list[str]:
    """`python train.py --config=<config_arg> --workdir=<workdir> --config.<field>=...`; a
    child's --config is its `child_config` with `parent_workdir` for `{parent}`; a run with its
    own `base` uses that file instead of `config_arg`."""
    if self.base is not None:
      config_arg = self.base
    if self.child_config is not None:
      config_arg = self.child_config.replace("{parent}", parent_workdir or "{parent}")
    return [python, "train.py", f"--config={config_arg}", f"--workdir={workdir}",
            *config_flags(self.overrides)]

  def before_argv(self, python: str, workdir: str, parent_workdir: str) -> list[list[str]]:
    """A child's `before` commands with `{python}`, `{workdir}` and `{parent}` filled in."""
    fill = {"{python}": python, "{workdir}": workdir, "{parent}": parent_workdir}
    return [[functools.reduce(lambda a, kv: a.replace(*kv), fill.items(), arg) for arg in argv]
            for argv in self.before]

  def eval_argv(self, command: EvalCommand, python: str, workdir: str) -> list[str]:
    """`python -m eval.run --workdir=<workdir> --config.eval.<field>=...` for `command`."""
    return [python, "-m", "eval.run", f"--workdir={workdir}", *config_flags(command.overrides)]

  def eval_config(self, command: EvalCommand) -> ml_collections.ConfigDict:
    """The config eval.run evaluates with for `command` (the run's config + its overrides)."""
    return apply_overrides(self.config, command.overrides)


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
    points = list(self.points())
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
      child = self._child_run(members, base, common, by_ident, shorts)
      if child.name in names:
        raise StudyError(f"study {self.name!r}: two runs have the same name {child.name!r}")
      names[child.name] = members[0][1]
      runs.append(child)
    return runs

  def _child_run(self, members: list[tuple[int, Mapping[str, Any]]],
                 base: ml_collections.ConfigDict, common: dict, by_ident: dict[str, Run],
                 shorts: dict[str, str]) -> Run:
    """The Run of a child's points ((index, point), equal but for their eval.* fields, each
    an evaluation point; module docstring, "Warm-started children").

    Raises:
      StudyError: no "@config" or "@parent", a parent that is not a run of the study from
        scratch, an unknown "@" key, or a child config that cannot be built.
    """
    i, point = members[0]
    where = f"study {self.name!r}, point {i}"
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


def _ident(base_arg: str | None, train: Mapping[str, Any]) -> str:
  """What makes two from-scratch points one run: their base config and training fields."""
  return json.dumps({BASE: base_arg, **train}, sort_keys=True, default=repr)


def _point_base(point: Mapping[str, Any], cache: dict, where: str
                ) -> tuple[str | None, ml_collections.ConfigDict]:
  """(train.py's --config for the point's "@base", that config) or (None, the study's base
  config, `cache[None]`); `cache` maps --config values to (value, config) and is filled here.

  Raises:
    StudyError: an "@base" that is not a string naming an existing config file, or whose
      get_config fails.
  """
  if BASE not in point:
    return cache[None]
  value = point[BASE]
  if not isinstance(value, str) or not value.endswith(".py"):
    raise StudyError(f"{where}: {BASE!r} must be a config file path (e.g. "
                     f"'configs/task_mqar.py'); got {value!r}")
  path = os.path.abspath(value if os.path.isabs(value) else os.path.join(REPO_ROOT, value))
  rel = os.path.relpath(path, REPO_ROOT)
  arg = path if rel.startswith("..") else rel  # relative in the repository: remote checkouts
  if arg not in cache:
    if not os.path.isfile(path):
      raise StudyError(f"{where}: {BASE!r} config file {value!r} does not exist")
    cache[arg] = (arg, load_config_file(path))
  return cache[arg]


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


def _plan_run(name: str, overrides: dict, config: ml_collections.ConfigDict,
              common_eval: dict, eval_points: list[dict]) -> Run:
  """Works out the eval.run invocations a run needs beyond train.py's own final evaluation.

  Per evaluation point, each (suite, extension) is a result; those train.py or an earlier point
  already give with the same settings are dropped; the rest become one eval.run per set of
  suites (extensions needing the same suites share one invocation).

  Raises:
    StudyError: two evaluation points ask for one result with different settings (they would
      overwrite each other).
  """
  given: dict[ResultKey, tuple[str, str]] = {}
  for key in train_results(config):
    given[key] = (_settings(config, key), "train.py's final evaluation")
  commands = []
  for index, point in enumerate(eval_points):
    fields = {**common_eval, **point}
    cfg = apply_overrides(config, fields)
    suites = eval_point_suites(cfg)
    needed: dict[tuple[str, ...], list[str]] = {}
    keys: dict[tuple[str, ...], list[ResultKey]] = {}
    for extension in eval_extensions(cfg):
      todo = []
      for suite in suites:
        key = make_key(suite, extension, cfg.eval.factor, cfg.eval.protocol, cfg.eval.stride)
        settings = _settings(cfg, key)
        where = f"evaluation point {point or '{}'}"
        if key in given:
          if given[key][0] != settings:
            raise StudyError(
                f"run {name!r}: {where} and {given[key][1]} both write {key.describe()} with "
                f"different eval settings, so one would overwrite the other; put eval fields "
                f"meant for every evaluation in Study.common (train.py's final evaluation "
                f"uses them), or set eval.suites so that each result is asked for once")
          continue
        given[key] = (settings, where)
        todo.append(suite)
      if todo:
        needed.setdefault(tuple(todo), []).append(extension)
        keys.setdefault(tuple(todo), []).extend(
            make_key(s, extension, cfg.eval.factor, cfg.eval.protocol, cfg.eval.stride)
            for s in todo)
    for suites_needed, extensions in needed.items():
      cmd_fields = {**fields, "eval.suites": ",".join(suites_needed),
                    "eval.extension": ",".join(extensions)}
      commands.append(EvalCommand(cmd_fields, tuple(keys[suites_needed]), index))
  return Run(name, overrides, config, tuple(eval_points), tuple(train_results(config)),
             tuple(commands))


# ---------------------------------------------------------------------------- checks


def parse_flags(argv: Sequence[str], config: ml_collections.ConfigDict | None = None
                ) -> ml_collections.ConfigDict:
  """The config that ml_collections' config_flags build from `argv`, as train.py / eval.run do.

  Args:
    argv: arguments after the program name: `--config=<file>` and `--config.<field>=...`
      (train.py), or only `--config.<field>=...` overrides of `config` (eval.run, whose config
      is the run's); other flags (--workdir) are ignored.
    config: eval.run's starting config (the run's config.json); None = train.py's form.

  Raises:
    absl.flags.Error (or ValueError): a flag that config_flags cannot parse.
  """
  from absl import flags
  from ml_collections import config_flags as mlc_flags
  argv = ["prog"] + [a for a in argv if a.startswith("--config")]
  values = flags.FlagValues()
  if config is None:
    mlc_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True,
                                 sys_argv=argv)
  else:
    mlc_flags.DEFINE_config_dict("config", ml_collections.ConfigDict(config.to_dict()), "",
                                 flag_values=values, lock_config=True, sys_argv=argv)
  values(argv)
  return values.config


def check_commands(runs: Sequence[Run], base: ml_collections.ConfigDict) -> None:
  """Checks that every `--config.<field>=<value>` argument of the runs' train.py and eval.run
  commands parses back, with ml_collections' config_flags, to exactly the value (and type) the
  study means.

  Each field's flag is parsed independently of the others, so each distinct flag is checked
  once, many per config_flags parse (flags of different fields together).

  Args:
    runs: the study's runs.
    base: the study's base config (train.py's --config; eval.run starts from the run's
      config.json, whose fields have the same types).

  Raises:
    StudyError: naming the run, the flag and what it parses to.
  """
  wanted: dict[str, tuple[str, Any, str]] = {}  # flag -> (field, value, run name)
  for run in runs:
    for path in run.overrides:
      value = get_field(run.config, path)
      wanted.setdefault(f"--config.{path}={flag_value(value)}", (path, value, run.name))
    for command in run.evals:
      config = run.eval_config(command)
      for path in command.overrides:
        value = get_field(config, path)
        wanted.setdefault(f"--config.{path}={flag_value(value)}", (path, value, run.name))
  batches: list[dict[str, str]] = []  # field -> flag, one flag per field and parse
  for flag, (path, _, _) in wanted.items():
    batch = next((b for b in batches if path not in b), None)
    if batch is None:
      batch = {}
      batches.append(batch)
    batch[path] = flag
  for batch in batches:
    try:
      parsed = parse_flags(list(batch.values()), base)
    except Exception:  # absl and ml_collections raise several types; find the flag at fault
      for flag in batch.values():
        try:
          parse_flags([flag], base)
        except Exception as e:  # as above
          raise StudyError(f"run {wanted[flag][2]!r}: config_flags cannot parse {flag}: "
                           f"{e}") from None
      raise
    for path, flag in batch.items():
      _, value, name = wanted[flag]
      got = get_field(parsed, path)
      if got != value or type(got) is not type(value):
        raise StudyError(f"run {name!r}: {flag} parses to {got!r} ({type(got).__name__}), not "
                         f"{value!r} ({type(value).__name__})")


def validate_run(run: Run, num_devices: int) -> None:
  """Checks a run as train.py and eval.run would, before anything is launched: every config
  field (configs/validate.py `validate`) and the pre-flight (`preflight`: suites, eval-time
  extensions against the scheme, evaluation lengths, retrieval prompts) of the training config
  and of each eval.run config.

  Args:
    run: the run.
    num_devices: devices each run's process will see (for the mesh and batch checks).

  Raises:
    ConfigError: the first bad field, with the run's name in front.
  """
  try:
    validate(run.config, num_devices)
    if run.config.eval.extension != "none":
      raise StudyError(f"the base config sets eval.extension={run.config.eval.extension!r}; "
                       "set eval-time extensions in the study's points or common fields")
    preflight(run.config, purpose="train")
    for command in run.evals:
      config = run.eval_config(command)
      validate(config, num_devices)
      eval_point_suites(config)
      preflight(config, purpose="eval")
  except ConfigError as e:
    raise type(e)(f"run {run.name!r}: {e}") from None


# ---------------------------------------------------------------------------- run names


def short_names(config: ml_collections.ConfigDict, aliases: Mapping[str, str]) -> dict[str, str]:
  """Short name of every field of `config` for run names (module docstring).

  Raises:
    StudyError: an alias of a field that does not exist, a repeated alias, or one containing
      `=`, `,` or `/`.
  """
  paths = leaf_paths(config)
  for path, alias in aliases.items():
    get_field(config, path)
    if not alias or any(c in alias for c in "=,/") or list(aliases.values()).count(alias) > 1:
      raise StudyError(f"Study.aliases[{path!r}]={alias!r} must be a unique non-empty name "
                       "without '=', ',' or '/'")
  out = {}
  for path in paths:
    if path in aliases:
      out[path] = aliases[path]
      continue
    parts = path.split(".")
    out[path] = path
    for n in range(1, len(parts) + 1):
      suffix = ".".join(parts[-n:])
      if not any(p != path and (p == suffix or p.endswith("." + suffix)) for p in paths) \
          and suffix not in aliases.values():
        out[path] = suffix
        break
  return out


def _name_value(value: Any) -> str:
  """A value as written in run names: 0.5, True, rope, 0.5-1-2 (tuples), pi+yarn (commas)."""
  if isinstance(value, bool):
    return str(value)
  if isinstance(value, float):
    return f"{value:g}"
  if isinstance(value, (tuple, list)):
    return "-".join(_name_value(v) for v in value) if value else "empty"
  return str(value).replace(",", "+")


def run_name(fields: Mapping[str, Any], shorts: Mapping[str, str]) -> str:
  """The run name of a run's training fields (module docstring); "base" when there are none.

  Args:
    fields: dotted field -> value (typed as in the config).
    shorts: `short_names` of the study's base config.

  Returns:
    `short=value` pairs joined by `,`, sorted by short name; at most NAME_MAX characters.
  """
  if not fields:
    return "base"
  pairs = sorted((shorts.get(path, path), _name_value(value)) for path, value in fields.items())
  name = ",".join(f"{k}={re.sub(r'[^A-Za-z0-9._+-]', '_', v)}" for k, v in pairs)
  if len(name) > NAME_MAX:
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    name = f"{name[:NAME_MAX - 9]}_{digest}"
  return name


# ---------------------------------------------------------------------------- loading studies


def load_study(spec: str) -> Study:
  """The `STUDY` of a study file (`sweeps/pe_extrapolation_cpu.py`) or module
  (`sweeps.pe_extrapolation_cpu`).

  Raises:
    StudyError: the file or module does not exist, does not parse or raises while it loads, or
      defines no `STUDY` of type Study.
  """
  if spec.endswith(".py") or os.sep in spec:
    path = os.path.abspath(spec)
    if not os.path.isfile(path):
      raise StudyError(f"study file {spec!r} does not exist")
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


__all__ = ["EvalCommand", "ResultKey", "Run", "Search", "Study", "StudyError", "apply_overrides",
           "config_flags", "cross", "flag_value", "load_config_file", "load_study", "model_sizes",
           "param_counts", "product", "train_lengths",
           "result_key", "run_name", "short_names", "zip_"]
