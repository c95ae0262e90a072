"""A study's runs as planned: `Run` (one train.py process: its fields, config, evaluation points
and results) and `EvalCommand` (one eval.run invocation of it); how a run's eval.run commands
are worked out from its evaluation points (`_plan_run`) and a point's own base config
(`_point_base`, "@base"); and the checks made before anything is launched (`check_commands`:
every --config flag parses back to its value; `validate_run`: the config checks and pre-flight
of train.py and eval.run).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Mapping, Sequence

import ml_collections

from configs.errors import ConfigError
from configs.validate import eval_extensions, preflight, validate
from sweeps.overrides import REPO_ROOT, StudyError, apply_overrides, config_flags, flag_value, \
    get_field, load_config_file
from sweeps.result_keys import ResultKey, _settings, eval_point_suites, make_key, train_results

EVAL_PREFIX = "eval."
BASE = "@base"  # a from-scratch point's own base config (sweeps/study.py, "Per-point base configs")


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
    parent: a child's parent run name (sweeps/study.py, "Warm-started children"); None for a
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


def check_kept_step(name: str, cfg: ml_collections.ConfigDict) -> None:
  """An evaluation point's `eval.step` = N must be a checkpoint the run writes and still holds
  when its evaluations run (after training): N <= train.num_steps, a multiple of
  train.checkpoint_every_steps (or the last step), and among the train.max_to_keep newest
  checkpoints.

  Raises:
    StudyError: one line naming the run, the fields and the values that would keep it.
  """
  step = int(cfg.eval.get("step", -1))
  if step < 0:
    return
  t = cfg.train
  last, every = int(t.num_steps), int(t.checkpoint_every_steps)
  if step > last or (step % every and step != last):
    raise StudyError(f"run {name!r}: eval.step={step} is not a checkpoint of the run (steps "
                     f"{every}, {2 * every}, ... and {last}: train.checkpoint_every_steps={every}, "
                     f"train.num_steps={last})")
  kept = sorted({*range(every, last + 1, every), last})[-int(t.max_to_keep):]
  if step not in kept:
    need = len([s for s in {*range(every, last + 1, every), last} if s >= step])
    raise StudyError(f"run {name!r}: eval.step={step} is deleted before the evaluations run "
                     f"(train.max_to_keep={t.max_to_keep} keeps steps {kept[0]}..{last}); set "
                     f"train.max_to_keep >= {need} in the study's common fields")


def _plan_run(name: str, overrides: dict, config: ml_collections.ConfigDict,
              common_eval: dict, eval_points: list[dict]) -> Run:
  """Works out the eval.run invocations a run needs beyond train.py's own final evaluation.

  Per evaluation point, each (suite, extension) is a result; those train.py or an earlier point
  already give with the same settings are dropped; the rest become one eval.run per set of
  suites (extensions needing the same suites share one invocation).

  Raises:
    StudyError: two evaluation points ask for one result with different settings (they would
      overwrite each other), or a point's eval.step names a checkpoint the run will not keep
      (`check_kept_step`).
  """
  given: dict[ResultKey, tuple[str, str]] = {}
  for key in train_results(config):
    given[key] = (_settings(config, key), "train.py's final evaluation")
  commands = []
  for index, point in enumerate(eval_points):
    fields = {**common_eval, **point}
    cfg = apply_overrides(config, fields)
    check_kept_step(name, cfg)
    suites = eval_point_suites(cfg)
    needed: dict[tuple[str, ...], list[str]] = {}
    keys: dict[tuple[str, ...], list[ResultKey]] = {}
    for extension in eval_extensions(cfg):
      todo = []
      for suite in suites:
        key = make_key(suite, extension, cfg.eval.factor, cfg.eval.protocol, cfg.eval.stride,
                       cfg.eval.get("step", -1))
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
            make_key(s, extension, cfg.eval.factor, cfg.eval.protocol, cfg.eval.stride,
                     cfg.eval.get("step", -1)) for s in todo)
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


__all__ = ["EvalCommand", "Run"]
