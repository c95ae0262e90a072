"""Test setup: 8 fake CPU devices (before JAX is imported) and small, real-text fixtures."""

import contextlib
import glob
import os
import shutil
import sys
import tempfile

# Faster compilation of the tests' tiny programs, which run no slower that matters: LLVM's
# optimisation level 0 (about a fifth less compile time), and XLA's CPU element emitters instead of
# its MLIR fusion emitters (the newer code generator: half of the remaining compile time of a
# training step, train_and_evaluate of a one-layer model 9-15 s -> 5-10 s here). Neither changes
# arithmetic (no fast-math; XLA's HLO passes, which decide fusion and buffers, are untouched), and
# every process the tests start gets them too (FAST_COMPILE in their XLA_FLAGS).
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count=8 {FAST_COMPILE}").strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tests run on CPU devices (the 8 above) whatever the host has: with libtpu installed (the dev
# extra, for tests/test_tpu_compile.py) JAX would otherwise probe for TPU chips at start-up, slower
# and with warnings; the processes the tests start inherit it.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache per test session, shared by the xdist workers: many tests
# compile the same tiny-model programs (cache keys are the programs, so results are unchanged).
# Removed when the session ends, unless the caller chose the folder.
SESSION_CACHE = os.path.join(tempfile.gettempdir(), "pe_sweeps_test_jax_cache", str(os.getpid()))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", SESSION_CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax import monitoring  # noqa: E402  (after XLA_FLAGS above)

from configs import base  # noqa: E402


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> str:
  """A glob of real English text that needs no network: the Python standard library's
  `json`, `email` and `logging` modules, one document per file (about 30 files)."""
  stdlib = os.path.dirname(os.__file__)
  out = tmp_path_factory.mktemp("corpus")
  for pkg in ("json", "email", "logging"):
    for path in sorted(glob.glob(os.path.join(stdlib, pkg, "*.py"))):
      if os.path.getsize(path) > 2000:
        shutil.copy(path, out / f"{pkg}_{os.path.basename(path)}.txt")
  return str(out / "*.txt")


@contextlib.contextmanager
def no_compilation():
  """Fails if XLA compiles anything inside the block (or fetches a program from the persistent
  compilation cache the tests share, which stands for a compilation)."""
  compiled = []

  def listener(event, duration, **_):
    if event in ("/jax/core/compile/backend_compile_duration",
                 "/jax/compilation_cache/cache_retrieval_time_sec"):
      compiled.append(duration)

  monitoring.register_event_duration_secs_listener(listener)
  try:
    yield
  finally:
    monitoring.unregister_event_duration_listener(listener)
  assert not compiled, f"{len(compiled)} compilation(s) before the error"


def sample_tokens(rng, shape):
  """Random bytes, 40% of them digits and 10% '.' or newline, so that the position layouts
  (Abacus digit runs, BiPE segments; data/position_layouts.py) get runs and segments to index."""
  tokens = rng.integers(0, 256, size=shape)
  u = rng.random(shape)
  tokens = np.where(u < 0.4, rng.integers(ord("0"), ord("9") + 1, size=shape), tokens)
  return np.where(u > 0.9, rng.choice([ord("."), ord("\n")], size=shape), tokens)


def position_config(kind: str, **overrides):
  """The real `model.position` section (every registered scheme's fields and defaults) with
  `kind` and `overrides` of any type (bad values included, for the validation tests)."""
  import ml_collections
  c = ml_collections.ConfigDict(base.get_config().model.position.to_dict(), type_safe=False)
  c.kind = kind
  c.update(overrides)
  return c


def tiny_config(text_glob: str, kind: str = "alibi"):
  """A seconds-scale config: 2 layers, d_model 64, 4 heads, train_len 32, batch 8; no PNG
  figures (train.write_plots=False)."""
  c = base.get_config()
  c.data.source = "text_files"
  c.data.text_glob = text_glob
  c.data.train_len = 32
  c.data.batch_size = 8
  c.model.num_layers = 2
  c.model.d_model = 64
  c.model.num_heads = 4
  c.model.mlp_dim = 128
  c.model.position.kind = kind
  c.train.num_steps = 10
  c.train.warmup_steps = 2
  c.train.learning_rate = 3e-3
  c.train.log_every_steps = 1
  c.train.write_plots = False  # ~1.4 s of drawing per run; the tests of the figures turn it on
  c.train.eval_every_steps = 0
  c.train.eval_tokens = 512
  c.train.checkpoint_every_steps = 5
  c.train.peak_flops_per_device = 1e11
  c.eval.length_multipliers = (0.5, 1.0, 2.0)
  c.eval.max_tokens_per_length = 512
  c.eval.batch_tokens = 256
  c.mesh.data = 1
  return c


def train_rope_parent(text_glob: str, workdir: str, *, num_steps: int,
                      checkpoint_every: int, write_plots: bool = False) -> str:
  """Trains a tiny RoPE run (`tiny_config`, train_len 32, head_dim 16) on one device, evaluated
  at 1x only: a parent for warm starts and LongRoPE's search. Returns `workdir`."""
  import jax

  import train
  c = tiny_config(text_glob, "rope")
  c.train.num_steps, c.train.checkpoint_every_steps = num_steps, checkpoint_every
  c.train.write_plots = write_plots
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  return workdir


def config_file_module(name: str):
  """The module of configs/<name>.py (or of a path ending in .py), loaded from its file: its
  get_config(...) builds the config as train.py's --config would."""
  import importlib.util  # noqa: PLC0415
  path = name if name.endswith(".py") else os.path.join(ROOT, "configs", f"{name}.py")
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def write_config_file(path: str, config) -> str:
  """Writes a `--config` file whose get_config() returns `config`: configs/base.py with the
  fields where `config` differs assigned (for train.py and the launcher run as processes)."""
  from sweeps import overrides
  default = base.get_config()
  fields = {p: overrides.get_field(config, p) for p in overrides.leaf_paths(config)
            if overrides.get_field(config, p) != overrides.get_field(default, p)}
  with open(path, "w") as f:
    f.write("from configs import base\n\n\ndef get_config():\n  c = base.get_config()\n"
            + "".join(f"  c.{p} = {v!r}\n" for p, v in fields.items()) + "  return c\n")
  return path


def pytest_sessionfinish(session, exitstatus):
  """The controller (not an xdist worker) removes the session's compilation cache."""
  if not hasattr(session.config, "workerinput"):
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


def damage_checkpoint(workdir: str, step: int) -> list[str]:
  """Cuts every array data file of `<workdir>/checkpoints/<step>/state` (the files of its `d/`
  folders: parameters and optimizer state, however Orbax grouped them) to 100 bytes, as a disk
  or a copy cut short would; returns their paths."""
  state = os.path.join(workdir, "checkpoints", str(step), "state")
  data = [os.path.join(r, n) for r, _, names in os.walk(state) for n in names
          if os.path.basename(r) == "d" and os.path.getsize(os.path.join(r, n)) > 100]
  assert data, f"no array data file under {state}"
  for path in data:
    with open(path, "r+b") as f:
      f.truncate(100)
  return data
