"""Fixed sinusoidal absolute position encoding.

Vaswani et al., "Attention Is All You Need", arXiv 1706.03762, Section 3.5:
PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)), base 10000; the
embeddings are multiplied by sqrt(d_model) before the encoding is added (Section 3.4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.positions.base import PositionalScheme


def sinusoidal_encoding(positions: jax.Array, d_model: int, base: float = 10000.0) -> jax.Array:
  """PE of the paper, interleaved sin/cos.

  Args:
    positions: int or float [batch, seq] positions (tokens).
    d_model: even width.
    base: wavelength base (10000 in the paper).

  Returns:
    float32 [batch, seq, d_model].
  """
  inv = jnp.asarray(base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model), jnp.float32)
  angles = positions.astype(jnp.float32)[..., None] * inv  # [b, s, d/2]
  return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*positions.shape, d_model)


class Sinusoidal(PositionalScheme):
  """`x * sqrt(d_model) + PE(positions)`."""

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "sinusoid_base": (10000.0, "wavelength base (Vaswani et al.)."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    if dims.d_model % 2:
      raise ConfigError(f"sinusoidal positions need an even model.d_model; got {dims.d_model}")
    if not cfg.sinusoid_base > 1:
      raise ConfigError(f"model.position.sinusoid_base must be > 1; got {cfg.sinusoid_base}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (sinusoid_base); dims: see `Dims`."""
    del rngs
    self.d_model = dims.d_model
    self.base = float(cfg.sinusoid_base)

  def embed(self, x, positions):
    """x: [b, s, d_model], positions: int32 [b, s] -> x * sqrt(d_model) + PE."""
    pe = sinusoidal_encoding(positions, self.d_model, self.base)
    return (x.astype(jnp.float32) * np.sqrt(self.d_model) + pe).astype(x.dtype)
