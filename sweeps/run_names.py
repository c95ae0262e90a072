"""Run names: a run's name from its own training fields (`run_name`), each field written by its
short name (`short_names`: its alias, else the shortest unambiguous dotted suffix of its path);
the naming rules are in sweeps/study.py's docstring, "Run names".
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

import ml_collections

from sweeps.overrides import StudyError, get_field, leaf_paths

NAME_MAX = 120  # characters of a run name (a path component; file systems allow 255 bytes).


# ---------------------------------------------------------------------------- run names


def short_names(config: ml_collections.ConfigDict, aliases: Mapping[str, str]) -> dict[str, str]:
  """Short name of every field of `config` for run names (sweeps/study.py docstring).

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
  """The run name of a run's training fields (sweeps/study.py docstring); "base" when there are
  none.

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


__all__ = ["run_name", "short_names"]
