"""Entry points run as the tests' command lines, without paying Python's start-up each time.

A command such as `python -m eval.run --workdir=...` or `python train.py --config=... ` spends
3-5 s importing JAX, Flax, grain and the model code before it reads its first flag; a test that
checks one refused flag pays that for one line. Here one server process per pytest worker
imports what the entry points import, once, then forks one child per command: the child takes the
command's environment, working folder and argv, runs the entry point's `__main__` code with
`runpy` (as `python -m <module>` or `python <file>.py` would), its stdout and stderr going to
files, and exits with the entry point's status. A child is a real process (its own exit status,
flags, devices and JAX backend: the server never starts a backend), so what the tests assert of a
command holds as for a fresh one; tests that start an entry point as a plain process as well
(e.g. tests/test_cli_one_line.py) check that the two answer alike.

JAX reads its `JAX_*` environment variables when it is imported, so a server serves only the
commands whose `JAX_*` variables are the ones it started with (others get a server of their own),
except the compilation cache's (RESET_IN_CHILD), which each child sets from its own environment.

`python tests/forked.py serve` is the server (requests and answers are JSON lines on its stdin and
stdout); tests call `run`.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")

# The entry points whose imports the server loads before serving (the commands the tests run).
ENTRY_POINTS = ["train.py", "eval.run", "sweeps.launch", "sweeps.collect", "sweeps.report",
                "sweeps.findings", "sweeps.longrope_search", "data.prepare", "runs.hf_import",
                "runs.hf_export", "bench.tpu_compile", "bench/attention.py",
                "bench/context_memory.py", "bench/eval_memory.py", "bench/profile_step.py",
                "bench/remat_memory.py", "bench/train_throughput.py", "bench/vs_pytorch.py"]
# JAX settings read from the environment at import that a child sets again from its own (the
# tests give many commands a compilation cache folder of their own), with their types.
RESET_IN_CHILD = {"JAX_COMPILATION_CACHE_DIR": str,
                  "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": float,
                  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": int}


# ---------------------------------------------------------------------------- the server


def _imports(path: str) -> list[str]:
  """The modules a source file imports (any depth), `from a import b` as a and a.b."""
  names = []
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
    if isinstance(node, ast.Import):
      names += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
  return names


def _source(entry: str) -> str:
  return (os.path.join(ROOT, entry) if entry.endswith(".py")
          else os.path.join(ROOT, *entry.split(".")) + ".py")


def prewarm(entries: list[str]) -> None:
  """Imports what the entry points import (not the entry points: their flags are defined when
  they run), so that each forked command starts warm. Starts no JAX backend."""
  import importlib  # noqa: PLC0415
  sys.path[:0] = [ROOT, BENCH]
  own = {e.removesuffix(".py").replace("/", ".") for e in entries} | {
      os.path.basename(e).removesuffix(".py") for e in entries}
  for entry in entries:
    for name in _imports(_source(entry)):
      if name.split(".")[0] == "__future__" or name in own:
        continue
      try:
        importlib.import_module(name)
      except ImportError:  # `from a import b` of a name that is not a module
        pass


def _child(entry: str, argv: list[str], out: str, err: str, cwd: str | None = None,
           env: dict | None = None) -> None:
  """In the forked child: environment and folder set, stdin empty, stdout and stderr to files,
  the entry point's `__main__` code with argv; exits with its status (1 on a traceback)."""
  import runpy  # noqa: PLC0415
  import traceback  # noqa: PLC0415
  code = 1
  try:
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, out), (2, err)):
      os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    if env is not None:
      os.environ.clear()
      os.environ.update(env)
      import jax  # noqa: PLC0415  (imported by the server already)
      for name, kind in RESET_IN_CHILD.items():
        if name in env:
          jax.config.update(name.lower(), kind(env[name]))
    os.chdir(cwd or ROOT)
    if entry == "-c":
      sys.argv = ["-c", *argv[1:]]
      sys.path[0] = ""
      exec(compile(argv[0], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    elif entry.endswith(".py"):
      sys.argv = [os.path.join(ROOT, entry) if not os.path.isabs(entry) else entry, *argv]
      sys.path[0] = os.path.dirname(sys.argv[0])
      runpy.run_path(sys.argv[0], run_name="__main__")
    else:
      sys.argv = [entry, *argv]
      sys.path[0] = os.getcwd()
      sys.modules.pop(entry, None)  # imported by another entry point's import: run it afresh
      runpy.run_module(entry, run_name="__main__", alter_sys=True)
    code = 0
  except SystemExit as e:
    if isinstance(e.code, str):
      print(e.code, file=sys.stderr)
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException:  # noqa: BLE001 -- reported as the traceback a user would see
    traceback.print_exc()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _wait(pid: int, timeout: float | None, kill: bool = True) -> int | None:
  """The child's exit status; None when it ran past `timeout` seconds (then killed, if `kill`).
  timeout None: wait as long as it takes; 0: only look."""
  deadline = None if timeout is None else time.monotonic() + timeout
  delay = 0.001
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      return os.waitstatus_to_exitcode(status)
    if deadline is not None and time.monotonic() >= deadline:
      if kill:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
      return None
    time.sleep(delay)
    delay = min(2 * delay, 0.05)


def serve() -> None:
  """Reads one request per stdin line and answers one line:

    {"op": "run", entry, argv, cwd, env, out, err, timeout} runs the command in a forked child
        and waits for it: {"rc": ..., "seconds": ...} (rc null: timed out, and killed);
    {"op": "start", ...the same} starts it and answers at once: {"pid": ...};
    {"op": "wait", "pid": ..., "timeout": seconds or null} waits for a started child (timeout 0:
        only looks): {"rc": ...} (null: still running).
  """
  prewarm(ENTRY_POINTS)
  answers = os.fdopen(os.dup(1), "w")
  os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing but answers on the answer pipe
  print("ready", file=answers, flush=True)
  finished: dict[int, int] = {}  # started children already reaped: their status
  for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "wait":
      pid = req["pid"]
      rc = finished.get(pid)
      if rc is None:
        rc = _wait(pid, req["timeout"], kill=False)
        if rc is not None:
          finished[pid] = rc
      print(json.dumps({"rc": rc}), file=answers, flush=True)
      continue
    start = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      _child(req["entry"], req["argv"], req["out"], req["err"], req["cwd"], req["env"])
    if req["op"] == "start":
      print(json.dumps({"pid": pid}), file=answers, flush=True)
      continue
    rc = _wait(pid, req["timeout"])
    print(json.dumps({"rc": rc, "seconds": time.monotonic() - start}), file=answers, flush=True)


# ---------------------------------------------------------------------------- the client

_servers: dict[tuple, subprocess.Popen] = {}
# One request at a time on a server's pipes (a test may call `run` from several threads; the
# server answers in order, so a request and its answer must not interleave with another's).
_pipe_lock = threading.Lock()


def _server(env: dict) -> subprocess.Popen:
  key = tuple(sorted((k, None if k in RESET_IN_CHILD else v) for k, v in env.items()
                     if k.startswith("JAX_")))
  proc = _servers.get(key)
  if proc is None or proc.poll() is not None:
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve"], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", "the fork server did not start"
    _servers[key] = proc
  return proc


@atexit.register
def _stop_servers() -> None:
  for proc in _servers.values():
    proc.stdin.close()
    proc.wait(timeout=30)


def _request(args: list[str], op: str, cwd, env, timeout, folder: str) -> tuple[subprocess.Popen,
                                                                         dict]:
  """Sends a run or start request for `args` to the server of `env`; (server, answer)."""
  entry, argv = (args[1], args[2:]) if args[0] == "-m" else (
      ("-c", args[1:]) if args[0] == "-c" else (args[0], args[1:]))
  entry, argv, cwd = str(entry), [str(a) for a in argv], None if cwd is None else str(cwd)
  if entry.endswith(".py") and not os.path.isabs(entry):
    entry = os.path.join(cwd or ROOT, entry)
  env = dict(os.environ if env is None else env)
  with _pipe_lock:
    server = _server(env)
    server.stdin.write(json.dumps({
        "op": op, "entry": entry, "argv": list(argv), "cwd": cwd or ROOT, "env": env,
        "out": os.path.join(folder, "out"), "err": os.path.join(folder, "err"),
        "timeout": timeout}) + "\n")
    server.stdin.flush()
    return server, json.loads(server.stdout.readline())


def run(args: list[str], *, cwd: str | None = None, env: dict | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
  """`subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env,
  timeout=timeout)` for `args` = ["-m", module, ...], ["-c", code, ...] or [script.py, ...], run
  by a warm server.

  Raises:
    subprocess.TimeoutExpired: the command ran past `timeout` seconds (it was killed).
  """
  with tempfile.TemporaryDirectory() as folder:
    _, answer = _request(args, "run", cwd, env, timeout, folder)
    stdout = open(os.path.join(folder, "out")).read()
    stderr = open(os.path.join(folder, "err")).read()
  if answer["rc"] is None:
    raise subprocess.TimeoutExpired([sys.executable, *args], timeout, stdout, stderr)
  return subprocess.CompletedProcess([sys.executable, *args], answer["rc"], stdout, stderr)


class Process:
  """`subprocess.Popen([sys.executable, *args], stdout=PIPE, stderr=PIPE, text=True, cwd=cwd,
  env=env)` started by a warm server (`run` for the arguments): pid, poll, wait, send_signal,
  kill, communicate and returncode as Popen's. Its output goes to files, read by
  `communicate` once it has ended."""

  def __init__(self, args: list[str], *, cwd: str | None = None, env: dict | None = None):
    self.args = [sys.executable, *args]
    self._folder = tempfile.TemporaryDirectory()
    self._server, answer = _request(args, "start", cwd, env, None, self._folder.name)
    self.pid: int = answer["pid"]
    self.returncode: int | None = None

  def wait(self, timeout: float | None = None) -> int:
    """The exit status, once the process has ended.

    Raises:
      subprocess.TimeoutExpired: still running after `timeout` seconds."""
    if self.returncode is None:
      with _pipe_lock:
        self._server.stdin.write(json.dumps({"op": "wait", "pid": self.pid,
                                             "timeout": timeout}) + "\n")
        self._server.stdin.flush()
        self.returncode = json.loads(self._server.stdout.readline())["rc"]
      if self.returncode is None:
        raise subprocess.TimeoutExpired(self.args, timeout)
    return self.returncode

  def poll(self) -> int | None:
    """The exit status, or None while it runs."""
    try:
      return self.wait(0)
    except subprocess.TimeoutExpired:
      return None

  def send_signal(self, sig: int) -> None:
    if self.returncode is None:
      os.kill(self.pid, sig)

  def kill(self) -> None:
    self.send_signal(9)

  def communicate(self, timeout: float | None = None) -> tuple[str, str]:
    """(stdout, stderr) once the process has ended (`wait(timeout)` first)."""
    self.wait(timeout)
    return tuple(open(os.path.join(self._folder.name, n)).read() for n in ("out", "err"))


if __name__ == "__main__":
  if sys.argv[1:] == ["serve"]:
    serve()
