"""runs/startup.py: the CPU pinned on a host with libtpu and no TPU chip; the persistent
compilation cache on by default, moved or turned off by environment variables, shared by
processes running at once."""

import importlib.util
import os
import subprocess
import sys

import pytest

from runs import startup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """
import sys
from jax import monitoring
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(1) if event == "/jax/compilation_cache/cache_hits" else None)
from runs import startup
print("folder", startup.enable_compilation_cache())
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() * %d)
print("value", float(f(jnp.ones((64, 64)))))
print("hits", len(hits))
"""


def run_program(env: dict, scale: int = 3, wait: bool = True):
  full = {k: v for k, v in os.environ.items()
          if k not in ("JAX_COMPILATION_CACHE_DIR", startup.CACHE_ENV,
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
  full.update(env, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  args = [sys.executable, "-c", PROGRAM % scale]
  if not wait:
    return subprocess.Popen(args, cwd=ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  return subprocess.run(args, cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)


def parse(stdout: str) -> dict:
  return dict(line.split(" ", 1) for line in stdout.strip().splitlines())


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
  assert startup.compilation_cache_dir({startup.CACHE_ENV: "off"}) is None
  assert startup.compilation_cache_dir({startup.CACHE_ENV: ""}) is None
  assert startup.compilation_cache_dir({startup.CACHE_ENV: "/x/y"}) == "/x/y"
  assert startup.compilation_cache_dir({"JAX_COMPILATION_CACHE_DIR": "/j"}) == "/j"
  monkeypatch.setenv("PE_SWEEPS_CACHE", str(tmp_path))  # the corpus cache: the default's parent
  assert startup.compilation_cache_dir({}) == os.path.join(str(tmp_path), "jax_compilation_cache")


def test_a_second_process_reads_the_first_ones_compilation(tmp_path):
  cache = tmp_path / "cache"
  first = run_program({"PE_SWEEPS_CACHE": str(tmp_path / "corpus_cache"),
                       startup.CACHE_ENV: str(cache)})
  assert first.returncode == 0, first.stderr
  out1 = parse(first.stdout)
  assert out1["folder"] == str(cache) and out1["hits"] == "0"
  assert any(name.endswith("-cache") for name in os.listdir(cache))
  second = parse(run_program({startup.CACHE_ENV: str(cache)}).stdout)
  assert int(second["hits"]) >= 1 and second["value"] == out1["value"]


def test_processes_at_once_share_the_cache(tmp_path):
  cache = str(tmp_path / "cache")
  procs = [run_program({startup.CACHE_ENV: cache}, scale=5, wait=False) for _ in range(3)]
  outs = [p.communicate(timeout=180) for p in procs]
  assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
  assert len({parse(out)["value"] for out, _ in outs}) == 1
  assert "Error reading persistent compilation cache" not in "".join(err for _, err in outs)


def test_off_writes_nothing(tmp_path):
  done = run_program({startup.CACHE_ENV: "off", "PE_SWEEPS_CACHE": str(tmp_path)})
  assert done.returncode == 0, done.stderr
  assert parse(done.stdout)["folder"] == "None"
  assert not os.path.exists(tmp_path / "jax_compilation_cache")


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed: "
                    "nothing probes for TPU chips")
def test_a_host_without_tpu_chips_stays_on_cpu_quietly():
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS" and not k.startswith("TPU_")}
  done = subprocess.run(
      [sys.executable, "-c", "from runs import startup; print(startup.pin_platform()); "
       "import jax; print(jax.devices()[0].platform)"],
      cwd=ROOT, env={**env, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  if startup.tpu_chips_present():
    pytest.skip("this host has TPU chips")
  assert done.stdout.split() == ["cpu", "cpu"]
  assert "TPU" not in done.stderr, done.stderr
