"""DAPE: data-adaptive positional encoding, an MLP over the attention logits and a static bias.

Zheng, Gao, Shi, Xiong, Sun, Li, Li, Ma, Huang, Zhang, Li & Li, "DAPE: Data-Adaptive Positional
Encoding for Length Extrapolation", arXiv 2405.14722 (NeurIPS 2024), Section 3 (the final form,
Eq. 5 of the arXiv v4 numbering; the paper first calls it CAPE). For query i, key j and the H
heads of one layer:

  A_ij = q_i . k_j / sqrt(D) + B_ij + f([q_i . k_j / sqrt(D); B_ij])      (all vectors over heads)

where `q_i . k_j / sqrt(D)` is the H-vector of the heads' scaled logits, B_ij the H-vector of a
static positional bias (ALiBi, KERPLE-log or FIRE: `dape_base`), and f: R^2H -> R^H a two-layer
MLP, Linear(2H, W) -> LeakyReLU -> Linear(W, H), with W = `dape_mlp_width` (the paper's D_DAPE =
32), applied to every (i, j) pair alone. The scheme returns `B + f(...)` as the attention bias;
attention adds it to its own logits, so the result is A above.

Choices, each as in the authors' released code (github.com/chuanyang-Zheng/DAPE,
megatron/model/positional_embeddings.py, `AliBi_C`, `ParallelKerpleLog_C`, `FIRE_C`; the
"DAPE V1" of their follow-up):
  - the logits f sees are the scaled `q k^T / sqrt(D)` of the queries and keys attention hands to
    `bias` (after `rotate`, which no base scheme here uses, and after log-n or temperature query
    scaling when enabled), before the mask: masked pairs get an arbitrary value that attention
    then removes, and no pair's value depends on another pair's, so the bias of a block of keys
    is that block of the whole bias (`bias_blockwise`: long sequences run over key blocks);
  - the residual `B +` is kept (the code returns `x + a + mlp(cat(x, a))`);
  - LeakyReLU with PyTorch's default negative slope 0.01; both linear layers with
    `torch.nn.Linear`'s default init, weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
  - with `dape_base="fire"`, the FIRE bias as the authors' `FIRE_C` computes it
    (`dape_fire_form="released"`, the default): its MLP with LeakyReLU (slope 0.01) instead of
    FIRE's ReLU, and the threshold L0 = floor(fire_init_threshold / 2) (its `init_L // 2`: 256
    for the default 512); `dape_fire_form="fire"` uses FIRE exactly as kind="fire" (Li et al.,
    arXiv 2310.04418), what runs made before the field used (`legacy_defaults`);
  - one MLP per layer (the code builds one per attention layer; `per_layer=True`), or one shared
    by all layers (`per_layer=False`); the base bias follows the same `per_layer` (KERPLE's r1, r2;
    FIRE's MLP), ALiBi has no parameters.
The MLP reads every head's logits, so DAPE couples heads; the fused kernel has no such term and
attention runs the XLA path (`kernel_spec` says why). Memory: f's hidden activations are float32
[batch, q_len, k_len, W] (W / H times the logits); attention's query chunks and key blocks
bound them at long lengths. Time: the MLP runs once per (query, key) pair, so a training step costs
several ALiBi steps; measure it with `python bench/train_throughput.py --configs=tiny
--kinds=alibi,dape`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.alibi import ALiBi
from models.positions.base import PositionalScheme, check_per_layer, require_queries_and_keys
from models.positions.fire import FIRE
from models.positions.kerple import KerpleLog

# The static biases DAPE can adapt: `dape_base` -> scheme class (its own fields configure it).
BASES: dict[str, type[PositionalScheme]] = {"alibi": ALiBi, "kerple_log": KerpleLog, "fire": FIRE}
LEAKY_SLOPE = 0.01  # torch.nn.LeakyReLU's default negative slope (the authors' code)
FIRE_FORMS = ("released", "fire")  # dape_fire_form


def dape_mlp(logits: jax.Array, static: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array,
             b2: jax.Array) -> jax.Array:
  """f([logits; static]) of DAPE, per (i, j) pair, heads as the feature axis.

  Args:
    logits: float32 [batch, H, q_len, k_len] scaled attention logits.
    static: float32 [batch or 1, H, q_len, k_len] static positional bias.
    w1: [2H, W] (rows 0..H-1 read the logits, rows H..2H-1 the bias); b1: [W];
    w2: [W, H]; b2: [H] (any float dtype; cast to float32).

  Returns:
    float32 [batch, H, q_len, k_len]: `leaky_relu([logits; static] w1 + b1) w2 + b2`.
  """
  f32 = jnp.float32
  static = jnp.broadcast_to(static, logits.shape)
  # Pairs as rows, heads as the last (feature) axis: two plain matmuls, about twice as fast on
  # XLA:CPU as contracting the heads axis in place (measured, bench/RESULTS.md).
  x = jnp.concatenate([logits, static], axis=1).transpose(0, 2, 3, 1)  # [b, q, k, 2H]
  hidden = jax.nn.leaky_relu(x @ w1.astype(f32) + b1.astype(f32), LEAKY_SLOPE)  # [b, q, k, W]
  return (hidden @ w2.astype(f32) + b2.astype(f32)).transpose(0, 3, 1, 2)


def _linear_init(key: jax.Array, shape: tuple[int, ...], fan_in: int, dtype) -> jax.Array:
  """`torch.nn.Linear`'s default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  bound = 1.0 / math.sqrt(fan_in)
  return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)


class DapeMLP(nnx.Module):
  """One layer's f (or all layers' when shared): w1 [2H, W], b1 [W], w2 [W, H], b2 [H]
  (nnx.Param, `param_dtype`, replicated; the biases have ndim 1, so AdamW's "matrices only"
  weight decay skips them)."""

  def __init__(self, width: int, num_heads: int, param_dtype, *, rngs: nnx.Rngs):
    pd, h2 = param_dtype, 2 * num_heads
    self.w1 = nnx.Param(_linear_init(rngs.params(), (h2, width), h2, pd), logical_axes=(None, None))
    self.b1 = nnx.Param(_linear_init(rngs.params(), (width,), h2, pd), logical_axes=(None,))
    self.w2 = nnx.Param(_linear_init(rngs.params(), (width, num_heads), width, pd),
                        logical_axes=(None, None))
    self.b2 = nnx.Param(_linear_init(rngs.params(), (num_heads,), width, pd), logical_axes=(None,))


class DAPE(PositionalScheme):
  """Bias `B + f([q.k / sqrt(D); B])` with B the `dape_base` scheme's bias and f a per-layer MLP.

  Config (`model.position`): dape_base ("alibi" | "kerple_log" | "fire"; that scheme's own
  fields configure B), dape_mlp_width, per_layer.
  """

  relative = True  # positions reach attention only as ids, through B (the `bias` hook)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own MLP (and base parameters) per layer, as the authors' code; False "
                          "= shared by all layers."),
      "dape_base": ("alibi", "DAPE's static bias B: alibi | kerple_log | fire (configured by "
                             "that scheme's fields)."),
      "dape_mlp_width": (32, "hidden width W of DAPE's MLP over [logits; bias] (D_DAPE)."),
      "dape_fire_form": ("released", 'dape_base=fire: "released" (FIRE_C: LeakyReLU, threshold '
                                     'floor(L0/2)) | "fire" (as kind=fire).'),
  }
  legacy_defaults = {"dape_fire_form": "fire"}

  @classmethod
  def check_config(cls, cfg, dims):
    base = cfg.get("dape_base", "alibi")
    if base not in BASES:
      raise ConfigError(f"model.position.dape_base must be one of {sorted(BASES)}; got {base!r}")
    width = cfg.get("dape_mlp_width", 32)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
      raise ConfigError(f"model.position.dape_mlp_width must be a positive integer; got {width!r}")
    check_per_layer(cfg)
    form = cfg.get("dape_fire_form", "released")
    if form not in FIRE_FORMS:
      raise ConfigError(f"model.position.dape_fire_form must be one of {list(FIRE_FORMS)}; "
                        f"got {form!r}")
    BASES[base].check_config(cfg, dims)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (dape_base and its fields, dape_mlp_width, per_layer,
    dape_fire_form); dims: see
    `Dims` (num_heads, head_dim, num_layers, param_dtype)."""
    self.per_layer = bool(cfg.per_layer)
    self.scale = float(dims.head_dim) ** -0.5  # Vaswani et al., Eq. 1, as attention's logits
    self.base = BASES[cfg.get("dape_base", "alibi")](cfg, dims, rngs=rngs)
    if isinstance(self.base, FIRE) and cfg.get("dape_fire_form", "released") == "released":
      self.base.negative_slope = LEAKY_SLOPE  # the authors' FIRE_C
      self.base.init_threshold = float(self.base.init_threshold // 2)  # its init_L // 2
    sets = dims.num_layers if self.per_layer else 1
    self.mlps = nnx.List([DapeMLP(int(cfg.get("dape_mlp_width", 32)), dims.num_heads,
                                  dims.param_dtype, rngs=rngs) for _ in range(sets)])

  def bias(self, q_positions, k_positions, layer, *, q=None, k=None, mask=None):
    """DAPE's bias for one layer.

    Args:
      q_positions: int32 [b, q_len]; k_positions: int32 [b, k_len] (position ids, tokens).
      layer: static layer index (selects the MLP when per_layer).
      q: [b, q_len, H, D] queries as attention scores them (unscaled by 1/sqrt(D));
      k: [b, k_len, H, D] keys.
      mask: unused (every pair is computed alone; attention removes masked ones).

    Returns:
      float32 [b, H, q_len, k_len].

    Raises:
      ValueError: if q or k is missing.
    """
    del mask
    require_queries_and_keys(self, q, k)
    static = self.base.bias(q_positions, k_positions, layer, q=q, k=k)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * self.scale
    f = self.mlps[layer if self.per_layer else 0]
    return static + dape_mlp(logits, static, f.w1[...], f.b1[...], f.w2[...], f.b2[...])

  def kernel_spec(self, layer, q_positions, k_positions):
    """No fused form: the reason string (DAPE's MLP mixes every head's logits per pair)."""
    del layer, q_positions, k_positions
    return ("DAPE's bias is an MLP over all heads' logits of each (query, key) pair; the fused "
            "kernel adds only closed-form per-head biases")
