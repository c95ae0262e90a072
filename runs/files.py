"""Crash-safe result files: write to a temporary name in the same folder, then rename."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any, Callable


def atomic_write(path: str, write: Callable[[str], None]) -> None:
  """Calls `write(tmp_path)`, then renames tmp_path to `path` (atomic on POSIX).

  A crash or kill leaves either the old file or the new one, never half of one. The file gets
  the permissions a plain `open(path, "w")` would give (0666 less the umask), not mkstemp's 0600,
  so results stay readable by the collaborators who share a workdir.

  Args:
    path: the file to (re)write.
    write: writes the whole content to the path it is given.

  Raises:
    Whatever `write` raises (the temporary file is removed first).
  """
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
  os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # the umask applies
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


def file_sha256(path: str) -> str:
  """The sha256 hex digest of a file's bytes, read in 1 MiB blocks (what the Hugging Face hub lists
  for an LFS file, and what a corpus archive is verified against).

  Raises:
    OSError: the file cannot be read.
  """
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()
