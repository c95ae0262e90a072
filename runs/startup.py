"""What every entry point does before JAX touches a device (`prepare`).

1. The platform. With libtpu installed (the `tpu` extra, or the `dev` extra that the TPU compile
   tests need) JAX probes for TPU chips at start-up, and on a host without them libtpu prints
   warnings about its missing metadata. Where the host has no TPU chips (no /dev/accel* or
   /dev/vfio/<n>, runs/distributed.py `distributed_launcher`) and no GPU plugin is installed,
   `pin_platform` sets JAX's platform to "cpu": the run is what it was without libtpu, as quiet
   and as fast. JAX_PLATFORMS, when given, is never changed.
2. The persistent compilation cache (`enable_compilation_cache`): compiled programs are kept on
   disk and reused by the next process that compiles the same program (the same HLO, flags,
   devices and versions: JAX's cache key), so a rerun, a resume or the next point of a sweep
   skips most compilation. Folder: `$PE_SWEEPS_COMPILATION_CACHE`, else JAX's own
   `$JAX_COMPILATION_CACHE_DIR`, else `<the corpus cache>/jax_compilation_cache`
   (data/corpus_sources.py `default_cache_dir`: $PE_SWEEPS_CACHE or ~/.cache/pe_sweeps);
   `PE_SWEEPS_COMPILATION_CACHE=off` disables it. Every program that took at least
   `$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` (default here 0: all) to compile is written.
   Several processes may share the folder: with a size limit (`jax_compilation_cache_max_size`,
   CACHE_MAX_BYTES unless $JAX_COMPILATION_CACHE_MAX_SIZE is given; least recently used entries
   are evicted beyond it) JAX reads and writes every entry under a file lock (the `filelock`
   package), so no process reads an entry another is writing (tests/test_startup.py runs
   three at once). An entry JAX cannot read is recompiled, with a warning.
"""

from __future__ import annotations

import importlib.util
import os

import jax

from data.corpus_sources import default_cache_dir
from runs.distributed import tpu_chips_present

CACHE_ENV = "PE_SWEEPS_COMPILATION_CACHE"
OFF = ("off", "0", "false", "no")
CACHE_MAX_BYTES = 4 * 2**30  # the cache's size limit unless $JAX_COMPILATION_CACHE_MAX_SIZE
GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def pin_platform(environ=None) -> str | None:
  """Sets JAX's platform to "cpu" where libtpu is installed but the host has neither TPU chips
  nor a GPU plugin (see the module docstring); returns the platform set, or None (unchanged).
  Call before any device is used."""
  env = os.environ if environ is None else environ
  if env.get("JAX_PLATFORMS") or jax.config.jax_platforms:
    return None
  if importlib.util.find_spec("libtpu") is None or tpu_chips_present():
    return None
  if any(importlib.util.find_spec(p) is not None for p in GPU_PLUGINS):
    return None
  jax.config.update("jax_platforms", "cpu")
  return "cpu"


def compilation_cache_dir(environ=None) -> str | None:
  """The persistent compilation cache's folder (module docstring), or None when disabled."""
  env = os.environ if environ is None else environ
  chosen = env.get(CACHE_ENV)
  if chosen is not None and chosen.strip().lower() in OFF + ("",):
    return None
  return chosen or env.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(
      default_cache_dir(), "jax_compilation_cache")


def enable_compilation_cache(environ=None) -> str | None:
  """Turns JAX's persistent compilation cache on in `compilation_cache_dir()` (creating it);
  returns the folder, or None when disabled or when the folder cannot be created (then the run
  compiles as without a cache: a cache is never a reason to fail)."""
  env = os.environ if environ is None else environ
  folder = compilation_cache_dir(env)
  if folder is None:
    return None
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError:
    return None
  jax.config.update("jax_compilation_cache_dir", folder)
  if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in env:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  if "JAX_COMPILATION_CACHE_MAX_SIZE" not in env:  # > 0: JAX locks each read and write
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
  if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in env:
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return folder


def prepare() -> None:
  """`pin_platform`, then `enable_compilation_cache`: the first lines of every entry point."""
  pin_platform()
  enable_compilation_cache()
