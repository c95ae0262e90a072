"""ConfigError and the small field checks shared by configs/, data/, models/ and eval/.

This module imports nothing of the project (data/ and models/ import it; the whole-config
checks that import them are in configs/validate.py).
"""

from __future__ import annotations

import ast
import difflib
import math
import os
import re
import sys


class ConfigError(ValueError):
  """A config field (or a path/input it names) has a value that cannot work.

  The message is one line that names the field and the allowed values.
  """


def what_exists(path: str, suffix: str, default_dir: str = ".", limit: int = 16,
                holds: str = "") -> str:
  """The tail of a "no such file" message for `path`: among the files (with suffix "/", the
  folders) ending in `suffix` in the folder `path` names (`default_dir` when it names none),
  and, with `holds`, only the files whose text contains it (e.g. "def get_config": the configs,
  not their helper modules), "; did you mean <the closest names>?" when some are close
  (difflib), else "; <folder> holds: a, b, ..." (sorted, at most `limit`, then a count); "" when
  there are none or the folder does not exist.

  E.g. what_exists("configs/alibi_tinyy.py", ".py") -> "; did you mean configs/alibi_tiny.py?"
  """
  folder = os.path.dirname(path.rstrip("/")) or default_dir
  try:
    entries = sorted(os.listdir(folder))
  except OSError:
    return ""
  if suffix == "/":
    names = [e + "/" for e in entries
             if os.path.isdir(os.path.join(folder, e)) and not e.startswith((".", "_"))]
  else:
    names = [e for e in entries if e.endswith(suffix) and not e.startswith((".", "_"))
             and (not holds or _contains(os.path.join(folder, e), holds))]
  if not names:
    return ""
  wanted = os.path.basename(path.rstrip("/")) + ("/" if suffix == "/" else "")
  close = difflib.get_close_matches(wanted, names, n=3, cutoff=0.75)
  if close:
    return "; did you mean " + " or ".join(os.path.join(folder, c) for c in close) + "?"
  more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
  return f"; {os.path.join(folder, '')} holds: " + ", ".join(names[:limit]) + more


def _contains(path: str, text: str) -> bool:
  """Whether the file at `path` contains `text` (False when it cannot be read)."""
  try:
    with open(path, encoding="utf-8") as f:
      return text in f.read()
  except (OSError, UnicodeDecodeError):
    return False


def flatten(d: dict, prefix: str = "") -> dict:
  """A nested dict (a config's `to_dict()` or its JSON) as dotted paths: {"a": {"b": 1}} ->
  {"a.b": 1}; lists become tuples (hashable, comparable with a config's tuples)."""
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(flatten(v, key + "."))
    else:
      out[key] = tuple(v) if isinstance(v, list) else v
  return out


def choice(value, path: str, allowed) -> None:
  """Raises ConfigError unless `value` (the field at `path`) is one of `allowed`."""
  if value not in allowed:
    raise ConfigError(f"{path}={value!r} is not supported; choose one of {list(allowed)}")


def mesh_shape(mesh, num_devices: int) -> tuple[int, int, int, int]:
  """Resolves `config.mesh` (data, fsdp, context, tensor; at most one -1) against `num_devices`.

  `mesh.context` may be absent (configs made before it existed): 1.

  Returns:
    (data, fsdp, context, tensor) sizes, in the order of `models.sharding.MESH_AXES`.

  Raises:
    ConfigError: a size is 0 or below -1, more than one -1, or the product differs from
      `num_devices`.
  """
  sizes = {"data": mesh.data, "fsdp": mesh.fsdp, "context": mesh.get("context", 1),
           "tensor": mesh.tensor}
  for name, size in sizes.items():
    if not isinstance(size, int) or size == 0 or size < -1:
      raise ConfigError(f"mesh.{name} must be a positive integer or -1 (fill); got {size!r}")
  fill = [n for n, s in sizes.items() if s == -1]
  if len(fill) > 1:
    raise ConfigError(f"at most one mesh axis may be -1; got -1 for {fill}")
  known = math.prod(s for s in sizes.values() if s != -1)
  if fill:
    if num_devices % known:
      raise ConfigError(f"mesh {sizes} does not divide the {num_devices} devices: "
                        f"the fixed axes multiply to {known}")
    sizes[fill[0]] = num_devices // known
  elif known != num_devices:
    raise ConfigError(f"mesh (data, fsdp, context, tensor) = {tuple(sizes.values())} needs "
                      f"{known} devices; this run has {num_devices}")
  return sizes["data"], sizes["fsdp"], sizes["context"], sizes["tensor"]


def name_list(value, path: str, allowed) -> list[str]:
  """Splits a comma-separated string of names and checks each against `allowed`."""
  if not isinstance(value, str):
    raise ConfigError(f"{path} must be a comma-separated string of names from "
                      f"{', '.join(allowed)}; got {value!r}")
  names = [n.strip() for n in value.split(",") if n.strip()]
  if not names:
    raise ConfigError(f"{path} is empty; choose from {', '.join(allowed)}")
  for n in names:
    if n not in allowed:
      raise ConfigError(f"{path}: {n!r} is not one of {', '.join(allowed)}")
  if len(set(names)) != len(names):
    raise ConfigError(f"{path} names a method twice: {value!r}")
  return names


def eval_lengths(config) -> list[int]:
  """Evaluation lengths in tokens: `round(m * train_len)` for each multiplier, sorted, unique."""
  return sorted({max(1, round(x * config.data.train_len)) for x in config.eval.length_multipliers})


OVERRIDE_ERRORS = (AttributeError, KeyError, TypeError, ValueError)  # what ml_collections raises


def exit_bad_override(error: Exception, argv: list[str], config=None):
  """Prints one line for a `--config.<field>` override ml_collections refused, and exits 2.

  ml_collections raises AttributeError/KeyError (a field that does not exist, with a "did you
  mean" hint wrapped in a KeyError's repr) from deep inside flag definition or parsing; the user
  sees the overrides they gave and the hint, not a traceback.

  Args:
    error: the exception (one of OVERRIDE_ERRORS or an absl flags.Error).
    argv: sys.argv (its `--config.*` arguments are named in the message).
    config: the ConfigDict the overrides apply to, if the caller has it; otherwise the parsed
      --config flag's, or its file loaded again. A field it lacks, with no "did you mean" hint,
      is reported with the fields that do exist at that level.

  Raises:
    SystemExit: always, with status 2.
  """
  detail = str(error.args[0] if error.args else error)
  if len(detail) > 1 and detail[0] == detail[-1] and detail[0] in "'\"":
    try:  # a KeyError's repr: unquote it
      detail = str(ast.literal_eval(detail))
    except (ValueError, SyntaxError):
      pass
  lines = [line.strip() for line in detail.splitlines() if line.strip()]
  refused = [line for line in lines if line.startswith("configs.errors.ConfigError: ")]
  if refused:  # the --config file's get_config refused its argument (configs/extend_*.py)
    print(f"error: {refused[-1].removeprefix('configs.errors.ConfigError: ')}", file=sys.stderr)
    sys.exit(2)
  detail = "; ".join(lines)
  if detail.startswith("flag --config.") and ": (" in detail:
    try:  # absl wraps a parser's ValueError args as a tuple: ('Non-boolean argument ...', 'x')
      head, _, tail = detail.partition(": ")
      parts = ast.literal_eval(tail)
      if isinstance(parts, tuple) and all(isinstance(p, str) for p in parts):
        detail = f"{head}: {parts[0]}: {', '.join(map(repr, parts[1:]))}"
    except (ValueError, SyntaxError):
      pass
  overrides = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
  prefix = (f"a --config override does not match the config ({', '.join(overrides)}): "
            if overrides and not detail.startswith("flag --config.") else "")
  fields = []
  if "Did you mean" not in detail:
    config = config if config is not None else _parsed_config(argv)
    fields = [f for f in (_unknown_field(o, config) for o in overrides) if f]
    if detail.startswith("flag --config."):  # a value of the wrong type: say what it takes
      fields.append(_takes(detail.removeprefix("flag --").partition("=")[0], config))
  print(f"error: {prefix}{detail}{''.join(fields)}", file=sys.stderr)
  sys.exit(2)


# What a value of each type takes, in words (the flag errors of runs.command_line use it too).
TAKES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
         tuple: "a comma-separated list (e.g. 0.5,1,2)"}


def _takes(flag: str, config) -> str:
  """"; --config.<field> takes <what>" from the type of the field's value in `config` (the value
  a wrong-typed override failed to replace); "" when the field or its type is unknown."""
  value = config
  try:
    for key in flag.removeprefix("config.").split("."):
      value = value[key]
  except (KeyError, TypeError, AttributeError):
    return ""
  what = next((text for kind, text in TAKES.items() if isinstance(value, kind)), "")  # bool first
  return f"; --{flag} takes {what}" if what else ""


def _parsed_config(argv: list[str]):
  """The --config flag's ConfigDict: absl's value if it parsed one before the override failed,
  else the `--config=<file>[:<arg>]` of argv loaded again (its `get_config`); None if neither."""
  import importlib.util  # noqa: PLC0415

  from absl import flags  # noqa: PLC0415

  try:
    if flags.FLAGS["config"].value is not None:
      return flags.FLAGS["config"].value
  except (KeyError, AttributeError, flags.Error):
    pass
  files = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")]
  if not files:
    return None
  path, _, arg = files[-1].partition(":")
  try:
    spec = importlib.util.spec_from_file_location("_config_for_error", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()
  except Exception:  # noqa: BLE001 -- only a hint for a message that is printed anyway
    return None


def _unknown_field(override: str, config) -> str:
  """For `--config.a.b.c` naming a field that `config` lacks: "; config.a.b has no field 'c'
  (its fields: x, y, z)", else "" (the field exists, or config is not a mapping)."""
  node, path = config, ["config"]
  for name in override.removeprefix("--").split(".")[1:]:
    if not hasattr(node, "keys"):
      return ""
    if name not in node.keys():
      return (f"; {'.'.join(path)} has no field {name!r} "
              f"(its fields: {', '.join(sorted(node.keys()))})")
    node, path = node[name], path + [name]
  return ""


def last_override_wins(argv: list[str]) -> list[str]:
  """`argv` with only the last of repeated `--config.<field>` overrides (`=value` or ` value`).

  absl keeps the last value of a repeated scalar flag, but ml_collections' tuple fields are
  multi-valued flags that concatenate repeats (`--config.eval.length_multipliers=1,2` then `=4`
  gave (1, 2, 4)); dropping the earlier ones makes every field take its last value.
  """
  spans, i = [], 1
  while i < len(argv):
    arg = argv[i]
    if arg.startswith("--config.") and "=" not in arg and i + 1 < len(argv) and not (
        argv[i + 1].startswith("--")):
      spans.append((arg, argv[i:i + 2]))
      i += 2
    else:
      spans.append((arg.split("=", 1)[0] if arg.startswith("--config.") else None, [arg]))
      i += 1
  last = {key: n for n, (key, _) in enumerate(spans) if key}
  return argv[:1] + [a for n, (key, args) in enumerate(spans) if not key or last[key] == n
                     for a in args]


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flags parser for scripts that take `--config.<field>=value` overrides.

  Pass as `app.run(main, flags_parser=parse_flags)`: a misspelt field (`--config.eval.suitez`),
  a value of the wrong type or an unknown flag ends in one line on stderr and exit status 2
  (`exit_bad_override`), before any JAX work.

  Args:
    argv: sys.argv.

  Returns:
    The arguments that are not flags (argv[0] first), as absl's default parser does.

  Raises:
    SystemExit: on any flag error.
  """
  from absl import flags  # noqa: PLC0415

  try:
    return flags.FLAGS(last_override_wins(argv))
  except (flags.Error, *OVERRIDE_ERRORS) as e:
    exit_bad_override(e, argv)
  except (SyntaxError, ImportError, NameError) as e:  # executing the --config file failed
    where = f" ({e.filename}, line {e.lineno})" if isinstance(e, SyntaxError) else ""
    print(f"error: the --config file does not run: {type(e).__name__}: "
          f"{e.msg if isinstance(e, SyntaxError) else e}{where}", file=sys.stderr)
    sys.exit(2)


def config_from_flag(config):
  """The experiment config of a `--config=<file>` flag (ml_collections config_flags).

  config_flags defers a file that failed to load (missing, or raising in get_config) to the
  first access; this reads it once so that the failure is one line naming --config.

  Args:
    config: the flag's value (FLAGS.config), or None when the flag was not given.

  Raises:
    ConfigError: no --config, or its file could not be loaded (the last line of the reason).
  """
  if config is None:
    raise ConfigError("--config is required, e.g. --config=configs/alibi_tiny.py")
  try:
    config.to_dict()
  except OSError as e:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    named = re.search(r"No such file or directory: '([^']+)'", str(e))
    hint = (what_exists(named.group(1), ".py", default_dir="configs", holds="\ndef get_config(")
            if named else "")
    raise ConfigError(f"--config could not be loaded: {lines[-1] if lines else e}{hint}") from None
  return config
