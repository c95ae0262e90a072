"""Sandwich: the parameter-free relative bias p_m . p_n of sinusoidal position embeddings.

Chi, Fan, Rudnicky & Ramadge, "Dissecting Transformer Length Extrapolation via the Lens of
Receptive Field Analysis", arXiv 2212.10356 (ACL 2023), the Sandwich section: keep only the
position-position term of the sinusoidal attention logit,

  p_m . p_n = sum_{i=1}^{d'/2} cos((m - n) / 10000^(2i/d')),

which depends on m - n only, equals d'/2 at m = n and decays with a logarithmic-like temporal
pattern, and compress it per head with ALiBi's head ratios r_h = 8h/H, h = 1..H (the paper's
ALiBi figure: "the range of h is n * 8/H, n = 1..H"), dividing head h's bias by r_h (as do NVIDIA
NeMo's `SandwichRelativePositionEmbedding` and PyTorch attn-gym's Sandwich score_mod). Head h of
query m and key n <= m gets

  bias_h(m, n) = (p_m . p_n - d'/2) / r_h.

The shift by d'/2 (as in NeMo) makes the bias 0 at distance 0 and <= 0 everywhere, like ALiBi;
it is one constant per head, so softmax is unchanged by it. d' = `sandwich_dim` (-1: head_dim)
must be even. The cos arguments (m - n) w_i are float32 (relative error ~1e-7, so ~1e-2 rad at
distances ~1e5 tokens).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.positions.base import PositionalScheme

SANDWICH_BASE = 10000.0  # wavelength base of the sinusoids (Vaswani et al.), as in the paper.


def sandwich_width(cfg, dims) -> int:
  """d': `cfg.sandwich_dim`, or `dims.head_dim` when it is -1."""
  return dims.head_dim if cfg.sandwich_dim == -1 else cfg.sandwich_dim


def sandwich_frequencies(dim: int) -> np.ndarray:
  """w_i = 10000^(-2i/d'), i = 1..d'/2: float64 [d'/2], radians per token."""
  i = np.arange(1, dim // 2 + 1, dtype=np.float64)
  return SANDWICH_BASE ** (-2.0 * i / dim)


def sandwich_head_ratios(num_heads: int) -> np.ndarray:
  """ALiBi's compression ratios r_h = 8h/H, h = 1..H: float64 [H]."""
  return 8.0 * np.arange(1, num_heads + 1, dtype=np.float64) / num_heads


def sandwich_inner_product(distance: jax.Array, frequencies: jax.Array) -> jax.Array:
  """p_m . p_n = sum_i cos((m - n) w_i).

  Args:
    distance: float32 [...] m - n, tokens.
    frequencies: float32 [d'/2] w_i.

  Returns:
    float32 [...]; d'/2 at distance 0.
  """
  return jnp.sum(jnp.cos(distance[..., None] * frequencies), axis=-1)


class Sandwich(PositionalScheme):
  """Adds `(p_m . p_n - d'/2) / r_h` (sinusoids of width d' = sandwich_dim); no parameters."""

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "sandwich_dim": (-1, "sinusoid width d'; -1 = head_dim."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    d = cfg.sandwich_dim
    if d == -1:
      if dims.head_dim % 2:
        raise ConfigError(f"model.position.sandwich_dim=-1 means head_dim={dims.head_dim}, which "
                          f"is odd; set an even positive sandwich_dim")
      return
    if not isinstance(d, int) or isinstance(d, bool) or d < 2 or d % 2:
      raise ConfigError(f"model.position.sandwich_dim must be -1 (= head_dim) or a positive even "
                        f"integer; got {d!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (sandwich_dim); dims: see `Dims` (num_heads, head_dim)."""
    del rngs
    self.dim = int(sandwich_width(cfg, dims))
    self.frequencies = tuple(float(w) for w in sandwich_frequencies(self.dim))  # static, hashable
    self.inv_ratios = tuple(float(1.0 / r) for r in sandwich_head_ratios(dims.num_heads))

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [b, q_len], k_positions: int32 [b, k_len] -> float32 [b, H, q, k]."""
    del layer, unused
    distance = (q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(jnp.float32)
    inner = sandwich_inner_product(distance, jnp.asarray(self.frequencies, jnp.float32))
    return (inner - self.dim / 2) * jnp.asarray(self.inv_ratios, jnp.float32)[None, :, None, None]
