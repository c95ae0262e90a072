"""The model's static structure, shardings and analytic FLOPs, built without allocating
parameters (what training, evaluation and the sweeps' cost estimates share), and the measured
peak matmul rate MFU is reported against."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from models import sharding
from models.decoder import Decoder
from models.positions import Dims


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The model's static structure and shardings, built without allocating parameters.

  Attributes:
    graphdef: NNX graph definition (static structure) of the Decoder.
    abstract_params: pure dict of ShapeDtypeStructs carrying their target shardings.
    param_shardings: pure dict of NamedShardings (same structure).
    max_position: positions the scheme can represent (None = unbounded).
    max_position_hint: how to evaluate beyond max_position (the scheme's advice).
    num_params: total parameter count.
    layout: the scheme's position layout (data/position_layouts.py; None for one stream), its
      training offsets seeded by `config.seed` (what the training pipeline applies).
  """

  graphdef: nnx.GraphDef
  abstract_params: Any
  param_shardings: Any
  max_position: int | None
  max_position_hint: str
  num_params: int
  layout: Any = None


def abstract_with_shardings(shapes, shardings):
  """ShapeDtypeStructs that carry the target shardings (what `StandardRestore` restores onto).

  Args:
    shapes: a pytree of arrays or ShapeDtypeStructs.
    shardings: the same pytree of `jax.sharding.Sharding`s.
  """
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings)


def model_spec(config, mesh) -> ModelSpec:
  """Traces the Decoder abstractly (`nnx.eval_shape`) and derives its parameter shardings.

  Args:
    config: the experiment ConfigDict (configs/base.py).
    mesh: the device Mesh (axes data, fsdp, tensor).
  """
  abstract_model = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract_model)
  shardings = sharding.param_shardings(state, mesh)
  pure = nnx.to_pure_dict(state)
  abstract = abstract_with_shardings(pure, shardings)
  num_params = sum(math.prod(x.shape) for x in jax.tree.leaves(pure))
  scheme = abstract_model.position
  layout = abstract_model.layout
  if layout is not None:
    layout = dataclasses.replace(layout, seed=int(config.seed))
  return ModelSpec(graphdef, abstract, shardings, scheme.max_position, scheme.max_position_hint,
                   num_params, layout)


def init_params(config, spec: ModelSpec):
  """Initialises parameters directly into their shardings (seed `config.seed`)."""
  def init():
    return nnx.to_pure_dict(nnx.state(Decoder(config, rngs=nnx.Rngs(config.seed))))
  return jax.jit(init, out_shardings=spec.param_shardings)()


def count_params(config) -> int:
  """The Decoder's parameter count for `config`, from `nnx.eval_shape` (nothing allocated, no
  mesh): what the sweeps' size axes and cost estimates use."""
  state = nnx.state(nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0))))
  return int(sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.to_pure_dict(state))))


def train_flops_per_token(config) -> float:
  """Analytic training FLOPs per token (forward + backward = 3 x forward).

  6 x (parameters in matmuls: q/k/v/o, with k and v of num_kv_heads heads, MLP, output head)
  plus attention scores and values (every query head's):
  forward 4 * T * H * D per layer for full attention, counted as half (2 * T * H * D) because
  attention is causal, times 3 for the backward pass (the PaLM convention, Chowdhery et al.,
  arXiv 2204.02311, Appendix B, with the causal half). Embedding lookups count 0.
  """
  m = config.model
  dims = Dims.from_config(config)
  attn_width = m.num_heads * dims.head_dim
  kv_width = dims.kv_heads * dims.head_dim
  mlp = (3 if m.mlp_activation == "swiglu" else 2) * m.d_model * m.mlp_dim
  projections = 2 * m.d_model * attn_width + 2 * m.d_model * kv_width  # q, o; k, v
  matmul_params = m.num_layers * (projections + mlp) + m.d_model * m.vocab_size
  attention = m.num_layers * 2 * config.data.train_len * attn_width
  return 6.0 * matmul_params + 3.0 * attention


def measure_peak_flops(n: int = 2048, repeats: int = 5) -> float:
  """Measured dense float32 matmul rate of one device, FLOP/s (best of `repeats`), for MFU."""
  x = jax.device_put(jnp.ones((n, n), jnp.float32), jax.local_devices()[0])
  f = jax.jit(lambda a: a @ a)
  f(x).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    f(x).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best
