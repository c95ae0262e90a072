"""The benchmark shapes and our real training step at one of them, shared by bench/vs_pytorch.py
(timing against PyTorch) and bench/profile_step.py (where the time goes).

Shapes (4 layers each, train_len = the sequence length, the byte vocabulary of 259 ids):
  default  d_model 128, 4 heads, mlp 512, batch 16 x 256   (configs/alibi_tiny.py)
  wide     d_model 512, 8 heads, mlp 2048, batch 8 x 256
  long     d_model 256, 4 heads, mlp 1024, batch 4 x 1024
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import train  # noqa: E402
from configs import alibi_tiny  # noqa: E402
from models import sharding, spec as specs  # noqa: E402
from runs import optimizer  # noqa: E402

SHAPES = {  # name: (d_model, num_heads, mlp_dim, batch_size, seq_len)
    "default": (128, 4, 512, 16, 256),
    "wide": (512, 8, 2048, 8, 256),
    "long": (256, 4, 1024, 4, 1024),
}
SCHEMES = ("learned", "alibi", "rope")
NUM_LAYERS, VOCAB = 4, 259  # the byte tokenizer's vocabulary: 256 bytes + BOS, EOS, PAD


def our_config(shape: str, scheme: str):
  """configs/alibi_tiny.py resized to `shape` (a key of SHAPES) with model.position.kind =
  `scheme`; everything else (float32, AdamW, warmup/cosine, clipping 1.0) as that config."""
  d_model, heads, mlp, batch, seq = SHAPES[shape]
  c = alibi_tiny.get_config()
  c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.mlp_dim = (
      NUM_LAYERS, d_model, heads, mlp)
  c.model.position.kind = scheme
  c.data.batch_size, c.data.train_len = batch, seq
  return c


def refuse(message: str) -> NoReturn:
  """Ends a bench script on a bad flag as train.py ends on bad input: one line "error: ..." on
  stderr, exit status 2 (absl's UsageError would print the whole help first, and exit 1)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def check_devices(devices: int, shapes) -> str | None:
  """None if `devices` can run our step at every one of `shapes` (keys of SHAPES) in this
  process, else the one-line reason for a `--devices` flag: not a positive integer, not a
  divisor of a shape's batch size, or more devices than JAX has (with the XLA flag that makes
  CPU devices)."""
  if devices < 1:
    return f"--devices takes a positive integer; got {devices}"
  uneven = [s for s in shapes if SHAPES[s][3] % devices]
  if uneven:
    return (f"--devices={devices} must divide the batch size of every shape "
            f"({', '.join(f'{s}: {SHAPES[s][3]}' for s in uneven)})")
  if devices > jax.device_count():
    return (f"--devices={devices} but this process has {jax.device_count()} JAX device(s); on "
            f"CPU start it with XLA_FLAGS=--xla_force_host_platform_device_count={devices}")
  return None


class Ours:
  """train.py's step (`train.make_step_fn`) for one (shape, scheme), fed random tokens.

  Args:
    shape: a key of SHAPES; scheme: a model.position.kind.
    devices: the first `devices` JAX devices form the mesh (all on its data axis: the batch is
      split between them, the parameters replicated); the batch size must divide by it.

  Attributes:
    num_params: the model's parameter count; step_fn, state, batch: the jit'd step, its state
    and one batch on the mesh (inputs, targets, positions, segment_ids: int32 [batch, seq]).
  """

  def __init__(self, shape: str, scheme: str, devices: int = 1):
    config = our_config(shape, scheme)
    self.mesh = sharding.make_mesh(config.mesh, jax.devices()[:devices])
    spec = specs.model_spec(config, self.mesh)
    tx = optimizer.make_optimizer(config.train)
    shardings, _ = train.state_shardings(tx, spec, self.mesh)
    self.num_params = spec.num_params
    self.state = train.initial_state(config, spec, tx, shardings)
    self.step_fn = train.make_step_fn(config, spec, tx, shardings, self.mesh, pad_id=-1)
    b, n = config.data.batch_size, config.data.train_len
    tokens = np.random.default_rng(0).integers(0, VOCAB, (b, n + 1), dtype=np.int32)
    host = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
            "positions": np.broadcast_to(np.arange(n, dtype=np.int32), (b, n)).copy(),
            "segment_ids": np.ones((b, n), np.int32)}
    put = sharding.batch_sharding(self.mesh)
    self.batch = {k: jax.make_array_from_process_local_data(put, v) for k, v in host.items()}

  def step(self) -> float:
    """Runs one step (the state advances), blocked on its results; wall seconds."""
    t0 = time.perf_counter()
    self.state, metrics = self.step_fn(self.state, self.batch)
    jax.block_until_ready((self.state, metrics))
    return time.perf_counter() - t0
