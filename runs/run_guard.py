"""A run's writer: one process writes a workdir at a time, what killed starts left is cleared by
the next one, and a full disk ends a run in one line.

- `check_not_in_use` (pre-flight, writes nothing): a workdir whose lock (runs/run_lock.py) a live
  process holds is refused before anything is compiled.
- `claim`: on process 0, takes the lock of the workdir (once made) for the rest of the run, then
  removes the temporary files of interrupted writes (`remove_leftovers`): only the lock holder
  does, so it never removes a file another writer is still writing.
- `OutOfSpaceError` and `failure`: a write that runs out of space (a checkpoint, metrics, a
  result) is reported as one line naming the path and the bytes it needed, exit status 1 (a
  fault of the machine, not of the input: the same command resumes once space is freed).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import Callable, Iterator

import jax

from configs.errors import ConfigError
from runs import run_lock

# runs/files.atomic_write's temporary names: ".<name>.<32 hex digits>.tmp".
ATOMIC_TMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
# Orbax writes a checkpoint to "<step>.orbax-checkpoint-tmp-<n>" and renames it when committed.
ORBAX_TMP = ".orbax-checkpoint-tmp"
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class OutOfSpaceError(OSError):
  """A write ran out of space on its device (or quota); the message is one line naming the path
  and the bytes needed."""


def check_not_in_use(workdir: str) -> None:
  """Refuses a workdir another live process is writing (process 0 checks; writes nothing).

  Raises:
    ConfigError: `<workdir>/run.lock` is held (one line naming the holder: pid, host, since,
      command), or cannot be read.
  """
  if jax.process_index() != 0 or not os.path.isdir(workdir):
    return
  try:
    holder = run_lock.holder(workdir)
  except OSError as e:
    raise ConfigError(f"--workdir={workdir}: cannot read its lock file "
                      f"{os.path.join(workdir, run_lock.LOCK_FILE)}: {e.strerror}") from e
  if holder:
    raise ConfigError(f"--workdir={workdir} is in use by {holder}: one process writes a run at "
                      "a time; wait for it to finish or stop it, then run again")


@contextlib.contextmanager
def claim(workdir: str, warn: Callable[[str], None] | None = None) -> Iterator[None]:
  """Holds the lock of `workdir` (process 0; the other processes of a multi-process run write
  under process 0's) for the body of the `with`, released however the body ends; the lock
  holder first removes the leftovers of interrupted writes (`remove_leftovers`).

  Args:
    workdir: the run's folder (made by runs.workdir.make_workdir).
    warn: prints the warning for a stale lock taken over (a holder that died without releasing).

  Raises:
    ConfigError: another live process took the lock since the pre-flight (`check_not_in_use`),
      or the lock file cannot be created.
  """
  lock = run_lock.RunLock(workdir, warn).acquire() if jax.process_index() == 0 else None
  try:
    if lock is not None:
      remove_leftovers(workdir)
    yield
  finally:
    if lock is not None:
      lock.release()


def remove_leftovers(workdir: str) -> list[str]:
  """Removes the temporary files of writes cut by a kill: atomic_write's `.<name>.<hex>.tmp`
  files anywhere under `workdir` and Orbax's uncommitted `checkpoints/*.orbax-checkpoint-tmp*`
  folders (Orbax leaves them). Only the lock holder may call it.

  Returns:
    the paths removed.
  """
  removed = []
  checkpoints = os.path.join(workdir, "checkpoints")
  for folder, dirs, files in os.walk(workdir):
    if folder == checkpoints:
      for name in [d for d in dirs if ORBAX_TMP in d]:
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        removed.append(os.path.join(folder, name))
      dirs[:] = []  # committed steps hold no atomic_write files
    for name in files:
      if ATOMIC_TMP.match(name):
        with contextlib.suppress(FileNotFoundError):
          os.remove(os.path.join(folder, name))
          removed.append(os.path.join(folder, name))
  return removed


def tree_bytes(tree) -> int:
  """Bytes of the arrays of `tree` (global shapes): the size a checkpoint of it needs."""
  return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))


def free_bytes(path: str) -> int:
  """Bytes free for this user on the filesystem of `path` (or of its nearest existing parent)."""
  path = os.path.abspath(path)
  while not os.path.exists(path):
    path = os.path.dirname(path)
  return shutil.disk_usage(path).free


def is_out_of_space(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from (causes, contexts, exception groups), is a
  full device or quota: an OSError ENOSPC/EDQUOT, or a library's error quoting its message."""
  seen, todo = set(), [error]
  while todo:
    e = todo.pop()
    if e is None or id(e) in seen:
      continue
    seen.add(id(e))
    if isinstance(e, OutOfSpaceError) or (isinstance(e, OSError) and e.errno in NO_SPACE):
      return True
    if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
      return True
    todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
  return False


def out_of_space(path: str, needed: int) -> OutOfSpaceError:
  """The one-line error of a write of `needed` bytes to `path` that found no space."""
  return OutOfSpaceError(errno.ENOSPC, f"no space left on the device of {path}: writing it needs "
                         f"about {_size(needed)}, {_size(free_bytes(path))} free; free some "
                         "space (or move the run) and run again to resume", path)


def _size(n: int) -> str:
  for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
    if n >= scale:
      return f"{n / scale:.2f} {unit} ({n:,} bytes)"
  return f"{n:,} bytes"


def failure(error: BaseException) -> tuple[str | None, int | None]:
  """(the one line train.py prints, its exit status) for an error reported without a traceback:
  bad input (ConfigError, 2) or a full device (1); (None, None) for any other error."""
  if isinstance(error, ConfigError):
    return str(error), 2
  if isinstance(error, OutOfSpaceError):
    return error.strerror, 1
  if is_out_of_space(error):
    where = getattr(error, "filename", None)
    first = str(error).splitlines()[0][:200] if str(error) else ""
    return (f"no space left on the device{f' of {where}' if where else ''} "
            f"({type(error).__name__}: {first}); free some space and run again to resume"), 1
  return None, None
