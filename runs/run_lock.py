"""One writer per run: an exclusive lock on `<workdir>/run.lock`, held for a process's life.

The lock is a POSIX advisory lock (`fcntl.flock`) on the file, so the operating system releases it
when its holder dies, however it dies (SIGKILL, OOM, a lost host): a dead holder never blocks a
run. The file also holds who took it ({"pid", "host", "command", "started"}), so a refusal names
the holder, and a file left with a holder's record but no lock on it is a *stale* lock: the holder
died without releasing it, and the next start takes it over with a warning naming the dead holder.

Where the filesystem offers no flock (some FUSE mounts of buckets), the record alone decides: a
holder on this host whose process is alive blocks the run; one whose process is gone, or one on
another host (whose liveness this host cannot see), is taken over with a warning.

train.py takes the lock when it makes (or resumes in) its workdir and keeps it to the end;
eval.run takes it to write a run's evaluation files; `holder` reads it without taking it
(pre-flight checks, warm starts from a run that is still training).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time

from configs.errors import ConfigError

LOCK_FILE = "run.lock"


def _record() -> dict:
  return {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
          "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _describe(record: dict | None) -> str:
  if not record:
    return "another process (it has not written its name yet)"
  return (f"pid {record.get('pid')} on {record.get('host')} since {record.get('started')} "
          f"({record.get('command', '')!s})")


def _read(fd: int) -> dict | None:
  os.lseek(fd, 0, os.SEEK_SET)
  text = os.read(fd, 1 << 16).decode(errors="replace").strip()
  try:
    record = json.loads(text) if text else None
  except ValueError:
    return None
  return record if isinstance(record, dict) else None


def _alive_here(record: dict) -> bool:
  """Whether `record`'s process runs on this host (False when it names another host)."""
  if record.get("host") != socket.gethostname() or not isinstance(record.get("pid"), int):
    return False
  try:
    os.kill(record["pid"], 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # alive, another user's
    return True
  return True


def _flock(fd: int, operation: int) -> bool | None:
  """True: locked; False: held by another process; None: this filesystem has no flock."""
  try:
    fcntl.flock(fd, operation | fcntl.LOCK_NB)
    return True
  except BlockingIOError:
    return False
  except OSError as e:
    if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
      return None
    raise


def holder(workdir: str) -> str | None:
  """Who holds `workdir`'s lock now, as "pid N on host since T (command)", or None (no lock file,
  or nobody holds it). Writes nothing.

  Raises:
    OSError: the lock file exists but cannot be read.
  """
  path = os.path.join(workdir, LOCK_FILE)
  if not os.path.exists(path):
    return None
  fd = os.open(path, os.O_RDONLY)
  try:
    for _ in range(20):  # a shared probe by another reader makes LOCK_SH fail only briefly
      got = _flock(fd, fcntl.LOCK_SH)
      if got is None:
        record = _read(fd)
        return _describe(record) if record and _alive_here(record) else None
      if got:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
      record = _read(fd)
      if record:
        return _describe(record)
      time.sleep(0.05)
    return _describe(_read(fd))
  finally:
    os.close(fd)


class RunLock:
  """The exclusive lock of `<workdir>/run.lock` (the workdir must exist).

  Use as a context manager, or `acquire()` ... `release()`. Release truncates the record, so
  the next start finds no stale holder; a holder that dies leaves its record, which the next
  `acquire` reports as a stale lock taken over.

  Args:
    workdir: the run's folder.
    warn: prints a warning line (default: to stderr).

  Raises (acquire):
    ConfigError: another live process holds the lock (one line naming it: pid, host, since,
      command), or the lock file cannot be created (the workdir is not writable).
  """

  def __init__(self, workdir: str, warn=None):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE)
    self._warn = warn or (lambda line: print(line, file=sys.stderr))
    self._fd: int | None = None

  def acquire(self) -> "RunLock":
    try:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
      raise ConfigError(f"--workdir={self.workdir}: cannot create its lock file {self.path}: "
                        f"{e.strerror}") from e
    got = False
    for _ in range(20):
      got = _flock(fd, fcntl.LOCK_EX)
      if got is not False or _read(fd):
        break
      time.sleep(0.05)  # an empty record: a probe (`holder`) or a holder still writing its name
    previous = _read(fd)
    if got is False or (got is None and previous and _alive_here(previous)):
      os.close(fd)
      raise ConfigError(f"--workdir={self.workdir} is in use by {_describe(previous)}: one "
                        "process writes a run at a time; wait for it to finish or stop it, then "
                        "run again")
    if previous:
      self._warn(f"warning: taking over the stale lock {self.path} of {_describe(previous)}, "
                 "which is no longer running")
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(_record()) + "\n").encode())
    os.fsync(fd)
    self._fd = fd
    return self

  def release(self) -> None:
    """Clears the record and releases the lock (idempotent)."""
    if self._fd is None:
      return
    try:
      os.ftruncate(self._fd, 0)
    except OSError:
      pass
    try:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
    except OSError:
      pass
    os.close(self._fd)
    self._fd = None

  def __enter__(self) -> "RunLock":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()
