"""FIRE: Functional Interpolation for Relative positions Encoding, a learned additive logit bias.

Li et al., "Functional Interpolation for Relative Positions Improves Long Context Transformers",
arXiv 2310.04418 (ICLR 2024), Section 3 (the final definition `b_FIRE`): query i and key j <= i
get, per head h,

  b_h(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),   psi(x) = log(c x + 1),

with f_theta an MLP from one input to one output per head (one hidden layer of `fire_mlp_width`
ReLU units, linear output), c > 0 a learnable log-transform slope that amplifies differences among
nearby positions, and L > 0 a learnable threshold on the normaliser ("progressive interpolation":
the MLP input stays in [0, 1] at any length, and short contexts are not over-stretched).

Positivity and initialisation follow the paper's reference implementation (its appendix PyTorch
listing): c is an unconstrained scalar used through |c| (psi(x) = log(|c x| + 1)); L is
`|l * L0|` with a learnable multiplier l initialised to 1 and the fixed L0 = `fire_init_threshold`;
eps = 1e-6 is added to the normaliser psi(max(L, i)). The listing's defaults are c = 0.1,
L0 = 512 tokens and MLP width 32 (the `model.position` defaults here), and its MLP layers are
`torch.nn.Linear`, whose default init (weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
is reproduced here. The paper's main FIRE has its own parameters in every layer; "FIRE-S" shares
one set across layers. `per_layer=True` is FIRE, `per_layer=False` is FIRE-S.

Positions i and j are the position ids (0-based, as the listing's `arange(seq_len)`), whatever
they are (packing restarts them, samplers transform them). Entries with j > i are masked by
attention; they hold the mirrored value (psi uses |i - j|).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme, check_per_layer

FIRE_EPS = 1e-6  # added to the normaliser psi(max(L, i)), as in the paper's listing.


def fire_psi(x: jax.Array, c: jax.Array) -> jax.Array:
  """The log transform psi(x) = log(|c x| + 1) (float32, same shape as x)."""
  return jnp.log(jnp.abs(c * x) + 1.0)


def fire_normalized_distance(q_positions: jax.Array, k_positions: jax.Array, c: jax.Array,
                             threshold: jax.Array, eps: float = FIRE_EPS) -> jax.Array:
  """The MLP input `psi(i - j) / (psi(max(L, i)) + eps)`.

  Args:
    q_positions: int or float [batch, q_len] query positions i (tokens).
    k_positions: int or float [batch, k_len] key positions j (tokens).
    c: float32 scalar, the log-transform slope (used as |c|).
    threshold: float32 scalar L > 0, the normaliser's threshold (tokens).
    eps: added to the normaliser.

  Returns:
    float32 [batch, q_len, k_len]; in [0, 1) where j <= i (up to eps).
  """
  i = q_positions.astype(jnp.float32)[:, :, None]
  j = k_positions.astype(jnp.float32)[:, None, :]
  normaliser = fire_psi(jnp.maximum(i, threshold), c) + eps
  return fire_psi(i - j, c) / normaliser


def fire_mlp(x: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array,
             b2: jax.Array, negative_slope: float = 0.0) -> jax.Array:
  """f_theta applied elementwise, heads first: `relu(x w1 + b1) w2 + b2` (FIRE's paper), or
  with `negative_slope` > 0 a LeakyReLU of that slope (the FIRE inside DAPE's released code).

  Args:
    x: float32 [batch, q_len, k_len] MLP inputs.
    w1: [1, width]; b1: [width]; w2: [width, heads]; b2: [heads] (cast to float32).
    negative_slope: 0 = ReLU; > 0 = LeakyReLU's slope for negative inputs.

  Returns:
    float32 [batch, heads, q_len, k_len].
  """
  f32 = jnp.float32
  pre = x[..., None] * w1.astype(f32)[0] + b1.astype(f32)  # [b, q, k, width]
  hidden = jax.nn.leaky_relu(pre, negative_slope) if negative_slope else jax.nn.relu(pre)
  out = jnp.einsum("bqkw,wh->bhqk", hidden, w2.astype(f32), precision=jax.lax.Precision.HIGHEST,
                   preferred_element_type=f32)
  return out + b2.astype(f32)[None, :, None, None]


def _linear_init(key: jax.Array, shape: tuple[int, ...], fan_in: int, dtype) -> jax.Array:
  """`torch.nn.Linear`'s default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  bound = 1.0 / math.sqrt(fan_in)
  return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)


class FireFunction(nnx.Module):
  """One set of FIRE parameters (one layer's, or all layers' when shared).

  Attributes (nnx.Param, `param_dtype`):
    c: scalar log-transform slope, init `fire_init_c`.
    threshold_scale: scalar multiplier l of the threshold L = |l| * fire_init_threshold, init 1.
    w1 [1, width], b1 [width], w2 [width, heads], b2 [heads]: the MLP. Scalars and biases have
      ndim < 2, so the optimizer's "matrices only" weight decay skips them.
  """

  def __init__(self, width: int, num_heads: int, init_c: float, param_dtype, *, rngs: nnx.Rngs):
    pd = param_dtype
    self.c = nnx.Param(jnp.full((), init_c, pd), logical_axes=())
    self.threshold_scale = nnx.Param(jnp.ones((), pd), logical_axes=())
    self.w1 = nnx.Param(_linear_init(rngs.params(), (1, width), 1, pd), logical_axes=(None, None))
    self.b1 = nnx.Param(_linear_init(rngs.params(), (width,), 1, pd), logical_axes=(None,))
    self.w2 = nnx.Param(_linear_init(rngs.params(), (width, num_heads), width, pd),
                        logical_axes=(None, "heads"))
    self.b2 = nnx.Param(_linear_init(rngs.params(), (num_heads,), width, pd),
                        logical_axes=("heads",))


def _positive_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and value > 0)


class FIRE(PositionalScheme):
  """Learned bias `f_theta(psi(i - j) / psi(max(L, i)))` per head; parameters per layer or shared.

  Config (`model.position`): fire_mlp_width, fire_init_c, fire_init_threshold, per_layer.
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own parameters per layer (FIRE); False = shared by all layers (FIRE-S)."),
      "fire_mlp_width": (32, "hidden width of the position MLP."),
      "fire_init_c": (0.1, "initial c of psi(x) = log(c x + 1)."),
      "fire_init_threshold": (512.0, "initial L_thr of the normaliser, tokens."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    width = cfg.fire_mlp_width
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
      raise ConfigError(f"model.position.fire_mlp_width must be a positive integer; got {width!r}")
    if not _positive_number(cfg.fire_init_c):
      raise ConfigError(f"model.position.fire_init_c must be a finite number > 0; "
                        f"got {cfg.fire_init_c!r}")
    if not _positive_number(cfg.fire_init_threshold):
      raise ConfigError(f"model.position.fire_init_threshold must be a finite number > 0 "
                        f"(tokens); got {cfg.fire_init_threshold!r}")
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (fire_mlp_width, fire_init_c, fire_init_threshold, per_layer);
    dims: see `Dims` (num_heads, num_layers, param_dtype)."""
    self.per_layer = bool(cfg.per_layer)
    self.init_threshold = float(cfg.fire_init_threshold)  # L0, tokens (fixed, not learned)
    self.negative_slope = 0.0  # ReLU in the MLP; DAPE's released FIRE sets LeakyReLU's 0.01
    sets = dims.num_layers if self.per_layer else 1
    self.functions = nnx.List([
        FireFunction(int(cfg.fire_mlp_width), dims.num_heads, float(cfg.fire_init_c),
                     dims.param_dtype, rngs=rngs)
        for _ in range(sets)])

  def function(self, layer: int) -> FireFunction:
    """The parameter set of `layer` (the shared one when not per_layer).

    Raises:
      IndexError: per_layer and layer >= num_layers.
    """
    return self.functions[layer if self.per_layer else 0]

  def threshold(self, layer: int) -> jax.Array:
    """The learned threshold L = |l| * fire_init_threshold of `layer`: float32 scalar, tokens."""
    return jnp.abs(self.function(layer).threshold_scale[...].astype(jnp.float32) *
                   self.init_threshold)

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [b, q_len], k_positions: int32 [b, k_len] -> float32 [b, H, q, k].

    Memory: the MLP's hidden activations are float32 [b, q_len, k_len, fire_mlp_width]
    (width / heads times the logits); attention's query chunking bounds both.
    """
    del unused
    f = self.function(layer)
    x = fire_normalized_distance(q_positions, k_positions, f.c[...].astype(jnp.float32),
                                 self.threshold(layer))
    return fire_mlp(x, f.w1[...], f.b1[...], f.w2[...], f.b2[...], self.negative_slope)
