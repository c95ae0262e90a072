"""What every command-line entry point shares: one line and exit status 2 for each mistake.

`run(main, usage=...)` is `absl.app.run` with three changes: a flag absl refuses (unknown, a
value of the wrong type or range, a required one missing) is one line, with what the flag takes
(`--config.<field>` overrides through `configs.errors.parse_flags`), instead of absl's "FATAL
Flags parsing error" and help hint (exit 1); a stray positional argument
is one line naming the arguments and the usage instead of absl's whole help (exit 1); and a
ConfigError that reaches it is printed as one line, exit 2.

`check_writable(path, flag)` checks a place the command will write (an output folder or file)
before any work, leaving nothing: a read-only folder, or a path that is (or lies under) a file,
is refused in one line naming the flag. `numbers` reads a comma-separated list flag of numbers.

This module sits just above `runs.files` in the layer order (docs/architecture.md): `data`
(data/prepare.py) uses it, so it imports only `configs.errors` and the standard library (absl
inside `run`).
"""

from __future__ import annotations

import ast
import math
import os
import sys
import tempfile
from typing import Callable, NoReturn

from configs.errors import TAKES as VALUE_TAKES, ConfigError, parse_flags


def check_writable(path: str, flag: str, *, folder: bool = True) -> None:
  """Raises ConfigError unless `path` can be written here; creates nothing that stays (one
  empty probe file, removed at once, `writable`).

  Args:
    path: the folder (folder=True) or file (folder=False) the command will write; a file is
      written beside itself and renamed (runs.files.atomic_write), so its folder must be
      writable. A path that does not exist yet must be creatable: its nearest existing parent
      is a writable folder.
    flag: the flag that gave it (`--out`), for the message.
    folder: whether `path` is a folder or a file.

  Raises:
    ConfigError: `path` is empty or a URL; a file where a folder is due, or a folder where a
      file is due; its folder (or nearest existing parent) is a file or not writable (read-only
      file system, or no write permission).
  """
  if not path:
    raise ConfigError(f"{flag} is empty; give a {'folder' if folder else 'file'} path to write")
  if "://" in path:
    raise ConfigError(f"{flag}={path}: give a local {'folder' if folder else 'file'} path "
                      "(a bucket is written through its mount)")
  full = os.path.abspath(path)
  if os.path.exists(full):
    if folder and not os.path.isdir(full):
      raise ConfigError(f"{flag}={path} is a file; give a folder to write to")
    if not folder and os.path.isdir(full):
      raise ConfigError(f"{flag}={path} is a folder; give a file path to write")
    where = full if folder else os.path.dirname(full)
    if not writable(where):
      raise ConfigError(f"{flag}={path}: {where} is not writable (read-only file system or no "
                        "write permission); give a place you can write")
    return
  parent = os.path.dirname(full)
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ConfigError(f"{flag}={path} cannot be created: {parent} is a file")
  if not writable(parent):
    raise ConfigError(f"{flag}={path} cannot be created: {parent} is not writable (read-only "
                      "file system or no write permission)")


def numbers(values, flag: str, kind: type = int, least: float | None = None) -> list:
  """A comma-separated list flag's values as `kind` (int or float), each >= `least`.

  Raises:
    ConfigError: the list is empty, or a value is not a `kind` or below `least` (one line naming
      the flag and what it takes).
  """
  what = ("integers" if kind is int else "numbers") + (f" >= {least:g}" if least is not None
                                                       else "")
  try:
    out = [kind(v) for v in values]
  except (TypeError, ValueError):
    out = []
  if not out or not all(math.isfinite(v) and (least is None or v >= least) for v in out):
    raise ConfigError(f"{flag} takes a comma-separated list of {what}; got {list(values)}")
  return out


def writable(folder: str) -> bool:
  """Whether this process can create a file in `folder`: access(2) first (a read-only mount is
  refused even to root), then a real probe, an empty temporary file made and removed at once
  (root passes access(2) on /sys and /proc, where creating a file still fails)."""
  effective = os.access in os.supports_effective_ids
  if not os.access(folder, os.W_OK | os.X_OK, effective_ids=effective):
    return False
  try:
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write_probe.", delete=True):
      return True
  except OSError:
    return False


def refuse(message: str) -> NoReturn:
  """Ends the command with `error: <message>` on stderr (one line: line breaks become "; ") and
  exit status 2."""
  lines = [line.strip() for line in str(message).splitlines() if line.strip()]
  print(f"error: {'; '.join(lines)}", file=sys.stderr)
  sys.exit(2)


def run(main: Callable[[list[str]], int | None], *, usage: str,
        arguments: int | None = 0) -> None:
  """`absl.app.run(main)` with one line and exit status 2 for every command-line mistake.

  Args:
    main: the entry point's main(argv); argv[0] is the program.
    usage: the command line, shown after a stray argument
      (`python -m data.prepare --source=GLOB --tokenizer=... --out=DIR`).
    arguments: the number of positional arguments the command takes; None: `main` checks them.

  Raises:
    SystemExit: always (main's return value, or 2 on a mistake).
  """
  from absl import app  # noqa: PLC0415

  def checked(argv: list[str]):
    if arguments is not None and len(argv) - 1 != arguments:
      given = (f"unexpected argument(s) {argv[1 + arguments:]}" if len(argv) - 1 > arguments
               else f"{arguments - len(argv) + 1} argument(s) missing")
      refuse(f"{given}; usage: {usage}")
    try:
      return main(argv)
    except ConfigError as e:
      refuse(str(e))
  app.run(checked, flags_parser=_parse_flags)


TAKES = {"int": VALUE_TAKES[int], "float": VALUE_TAKES[float],
         "bool": VALUE_TAKES[bool] + " (--{0} or --no{0})"}  # by absl's flag_type()


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flags parser, a refused flag ending in one line and exit 2: `--config.<field>`
  overrides through `configs.errors.parse_flags`, other flags here, with what a flag of the
  wrong type takes (`flag --parallel=x: invalid literal ...; --parallel takes an integer`)."""
  from absl import flags  # noqa: PLC0415

  if any(a.startswith("--config") for a in argv[1:]):
    return parse_flags(argv)
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
    named = message.removeprefix("flag --").partition("=")[0]
    if message.startswith("flag --") and named in flags.FLAGS:
      head, _, reason = message.partition(": ")
      if reason.startswith("("):  # a parser's ValueError args, as a tuple
        try:
          reason = ": ".join(map(str, ast.literal_eval(reason)))
        except (ValueError, SyntaxError, TypeError):
          pass
      takes = TAKES.get(flags.FLAGS[named].flag_type())
      message = f"{head}: {reason}" + (f"; --{named} takes {takes.format(named)}" if takes else "")
    refuse(message)
