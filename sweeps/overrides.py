"""Dotted config fields of a study: loading a config file, reading and setting (type-checked)
its fields, and writing them as train.py / eval.run `--config.<field>=<value>` flags; and
`StudyError`, the error of every study module (sweeps/study.py, run_plan.py, child_runs.py,
run_names.py, result_keys.py).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
from typing import Any, Mapping

import ml_collections

from configs.errors import ConfigError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StudyError(ConfigError):
  """A study, one of its points, or an override is invalid; the message names the study field
  or the dotted config field, and the allowed values."""


# ---------------------------------------------------------------------------- config files


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


__all__ = ["StudyError", "apply_overrides", "config_flags", "flag_value", "load_config_file"]
