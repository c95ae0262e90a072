"""Root-mean-square normalisation, the decoder's norm and attention's QK-norm."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class RMSNorm(nnx.Module):
  """Root-mean-square layer norm (Zhang & Sennrich, arXiv 1910.07467, Eq. 4):
  `x / sqrt(mean(x^2) + epsilon) * scale`, computed in float32 over the last axis.

  Parameter: `scale` [d_model], ones (the name and shape of `nnx.RMSNorm`'s, so checkpoints of
  either load). Ours rather than `nnx.RMSNorm` for speed alone: it normalises the
  [tokens, d_model] matrix, and XLA:CPU runs that form, forward and backward, in about half
  the time of the 3-D broadcast of `nnx.RMSNorm` (bench/RESULTS.md, "Profile of the step").
  """

  def __init__(self, d_model: int, *, epsilon: float = 1e-6, param_dtype="float32"):
    self.scale = nnx.Param(jnp.ones((d_model,), param_dtype))
    self.epsilon = epsilon

  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., d_model] in any float dtype -> float32, same shape."""
    x2 = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    y = x2 * jax.lax.rsqrt(jnp.mean(x2 * x2, axis=-1, keepdims=True) + self.epsilon)
    return (y * self.scale[...].astype(jnp.float32)).reshape(x.shape)
