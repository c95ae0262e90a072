"""Crash-safe result files: write to a temporary name in the same folder, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable


def atomic_write(path: str, write: Callable[[str], None]) -> None:
  """Calls `write(tmp_path)`, then renames tmp_path to `path` (atomic on POSIX).

  A crash or kill leaves either the old file or the new one, never half of one.
  """
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
  os.close(fd)
  try:
    write(tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json(path: str, obj: Any) -> None:
  """Writes `obj` as indented JSON to `path` atomically."""
  def write(tmp):
    with open(tmp, "w") as f:
      json.dump(obj, f, indent=2, sort_keys=True)
      f.write("\n")
  atomic_write(path, write)
