"""KERPLE: kernelized relative position biases with learned per-head shapes.

Chi, Fan, Ramadge & Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for Length
Extrapolation", arXiv 2205.09921 (NeurIPS 2022). A conditionally positive definite (CPD) kernel of
the distance |m - n| becomes an additive logit bias (the constant offset that makes it positive
definite cancels in the softmax). The paper's two variants, with learned per-head r1, r2:

  logarithmic: bias = -r1 * log(1 + r2 * |m - n|),  r1, r2 > 0          (`KerpleLog`)
  power:       bias = -r1 * |m - n|^r2,             r1 > 0, 0 < r2 <= 2 (`KerplePower`)

(ALiBi is the power variant with r2 = 1 and fixed r1.) The paper reports its best extrapolation
with the logarithmic variant.

Constraints and initialisation follow the released code (github.com/chijames/KERPLE,
megatron/mpu/layers.py, `ParallelKerpleLog` / `ParallelKerplePower`):
  * every parameter is clamped to >= eps = 1e-2 (and the power exponent to <= 2) before use. The
    reference clamps the stored parameter in place at each forward and differentiates at the
    clamped value; here the clamp is applied to the value used and its gradient is passed
    straight through to the stored parameter (`_clamp`), so a parameter at a bound is not frozen
    and can move back inside. Unlike the reference, the stored value is not overwritten, so it may
    sit beyond the bound while the gradient keeps pushing outwards; the value used always obeys
    the constraint.
  * init uniform, per head: log variant r1 (the code's `bias_p`) ~ U(0, 2), r2 (`bias_a`) ~ U(0, 1);
    power variant r1 (`bias_a`) ~ U(0, 1), r2 (`bias_p`) ~ U(0, 2); then clamped as above (the
    reference clamps on its first forward; we clamp the stored initial values).

Sharing: the released code builds one module passed to every layer (parameters shared,
`per_layer=False`); `per_layer=True` gives each layer its own r1, r2. Either way each parameter is
a 1-D [heads] array (per layer: a list of num_layers of them), so the train loop's AdamW, which
decays only ndim >= 2 parameters, never decays them, with or without per_layer.

Distances are |q_pos - k_pos| from the given positions (float32), so packed documents and
shifted positions are handled; keys after the query (masked) get the mirrored value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from models.kernels.spec import KernelSpec
from models.positions.base import PositionalScheme, check_per_layer

EPS = 1e-2  # lower bound of every KERPLE parameter (the released code's `self.eps`).
MAX_POWER = 2.0  # upper bound of the power variant's exponent r2 (CPD for 0 < r2 <= 2).


def _clamp(x: jax.Array, lo: float, hi: float | None = None) -> jax.Array:
  """`clip(x, lo, hi)` in value with an identity gradient (straight-through).

  The value is exactly the clipped one (`x - stop_gradient(x)` is exactly 0 for finite x); the
  derivative with respect to x is 1 everywhere, as for the reference's in-place clamp (also at
  x == lo or hi, where differentiating `clip` itself would add a tie-split 1/2).
  """
  return jax.lax.stop_gradient(jnp.clip(x, lo, hi)) + (x - jax.lax.stop_gradient(x))


def _distance(q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
  """|q_pos - k_pos| as float32 [batch, 1, q_len, k_len] (tokens)."""
  d = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :])
  return d.astype(jnp.float32)[:, None]


def kerple_log_bias(distance: jax.Array, r1: jax.Array, r2: jax.Array) -> jax.Array:
  """`-r1 * log(1 + r2 * distance)`, float32.

  Args:
    distance: float32 [..., H, q, k] (or broadcastable) non-negative distances, tokens.
    r1, r2: float32 [H] positive per-head parameters (already constrained).

  Returns:
    float32 broadcast of the inputs: [batch, H, q, k] for distance [batch, 1, q, k].
  """
  r1 = r1.astype(jnp.float32)[:, None, None]
  r2 = r2.astype(jnp.float32)[:, None, None]
  return -r1 * jnp.log1p(r2 * distance)


def kerple_power_bias(distance: jax.Array, r1: jax.Array, r2: jax.Array) -> jax.Array:
  """`-r1 * distance^r2`, float32, with 0^r2 = 0 and finite gradients at distance 0.

  Args:
    distance: float32 [..., H, q, k] (or broadcastable) non-negative integer-valued distances.
    r1: float32 [H] > 0; r2: float32 [H] in (0, 2] (already constrained).

  Returns:
    float32 broadcast of the inputs: [batch, H, q, k] for distance [batch, 1, q, k].
  """
  r1 = r1.astype(jnp.float32)[:, None, None]
  r2 = r2.astype(jnp.float32)[:, None, None]
  # distance^r2 = exp(r2 * log d) for d >= 1; the max keeps log and d/dr2 finite at d = 0.
  powered = jnp.where(distance > 0, jnp.exp(r2 * jnp.log(jnp.maximum(distance, 1.0))), 0.0)
  return -r1 * powered


class _Kerple(PositionalScheme):
  """Shared parts: parameters r1, r2 [heads] (one pair, or one per layer) and their clamping."""

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own r1, r2 per layer; False = one pair shared by all layers "
                          "(as in the KERPLE paper)."),
  }

  # Set by subclasses: maxval of the U(0, maxval) init of r1 and of r2; upper bound of r2 (None:
  # unbounded; lower bounds are EPS); `kernel(distance, r1, r2)`, the bias function.
  R1_INIT, R2_INIT, R2_MAX = 1.0, 1.0, None

  @classmethod
  def check_config(cls, cfg, dims):
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (per_layer); dims: see `Dims`."""
    self.per_layer = bool(cfg.per_layer)

    def param(scale, hi):
      value = jax.random.uniform(rngs.params(), (dims.num_heads,), jnp.float32, 0.0, scale)
      value = jnp.clip(value, EPS, hi).astype(dims.param_dtype)
      return nnx.Param(value, logical_axes=(None,))

    def params(scale, hi):
      if self.per_layer:
        return nnx.List([param(scale, hi) for _ in range(dims.num_layers)])
      return param(scale, hi)

    self.r1 = params(self.R1_INIT, None)
    self.r2 = params(self.R2_INIT, self.R2_MAX)

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [b, q_len], k_positions: int32 [b, k_len] -> float32 [b, H, q, k]."""
    del unused
    r1, r2 = self.constrained(layer)
    return self.kernel(_distance(q_positions, k_positions), r1, r2)

  def constrained(self, layer: int) -> tuple[jax.Array, jax.Array]:
    """(r1, r2) used by `layer`: float32 [heads] each, clamped (straight-through) to the bounds."""
    r1 = self.r1[layer] if self.per_layer else self.r1
    r2 = self.r2[layer] if self.per_layer else self.r2
    return (_clamp(r1[...].astype(jnp.float32), EPS),
            _clamp(r2[...].astype(jnp.float32), EPS, self.R2_MAX))

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  KERNEL_BIAS = ""  # the kernel's bias family ("kerple_log" | "kerple_power"), set by subclasses

  def kernel_spec(self, layer, q_positions, k_positions):
    """`bias` as kernel parameters: the constrained (r1, r2) stacked as [heads, 2]; their
    gradient reaches the stored parameters through `constrained`'s straight-through clamp.
    See PositionalScheme.kernel_spec."""
    del q_positions, k_positions
    r1, r2 = self.constrained(layer)
    return KernelSpec(bias=self.KERNEL_BIAS, bias_params=jnp.stack([r1, r2], axis=1))
  # ---- end fused-kernel capability ----


class KerpleLog(_Kerple):
  """Adds `-r1_h * log(1 + r2_h * |q_pos - k_pos|)`; init r1 ~ U(0, 2), r2 ~ U(0, 1); both clamped
  to >= 0.01.

  Parameters: r1, r2 float (param_dtype) [heads] each (per_layer: a list of num_layers each).
  """

  R1_INIT, R2_INIT, R2_MAX = 2.0, 1.0, None
  kernel = staticmethod(kerple_log_bias)
  KERNEL_BIAS = "kerple_log"


class KerplePower(_Kerple):
  """Adds `-r1_h * |q_pos - k_pos|^r2_h`; init r1 ~ U(0, 1), r2 ~ U(0, 2); clamped to r1 >= 0.01
  and 0.01 <= r2 <= 2.

  Parameters: r1, r2 float (param_dtype) [heads] each (per_layer: a list of num_layers each).
  """

  R1_INIT, R2_INIT, R2_MAX = 1.0, 2.0, MAX_POWER
  kernel = staticmethod(kerple_power_bias)
  KERNEL_BIAS = "kerple_power"
