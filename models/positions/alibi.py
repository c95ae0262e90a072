"""ALiBi: a linear distance penalty on the attention logits.

Press, Smith & Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation", arXiv 2108.12409 (ICLR 2022), Section 3: head h adds `-m_h * (i - j)` to the
logit of query i and key j <= i, with head-specific slopes m_h in a geometric sequence.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from models.positions.base import PositionalScheme


def alibi_slopes(num_heads: int) -> np.ndarray:
  """The paper's slopes for any head count.

  For a power of two n: `m_h = 2^(-8h/n)`, h = 1..n (start 2^(-8/n), ratio 2^(-8/n)). Otherwise,
  with p the largest power of two below n: the p slopes for p heads, followed by every other
  slope of the 2p-head sequence (indices 0, 2, 4, ...) until n slopes are reached (the rule of the
  paper's reference implementation, ofirpress/attention_with_linear_biases).

  Args:
    num_heads: H >= 1.

  Returns:
    float64 [H] slopes, all in (0, 1).

  Raises:
    ValueError: if num_heads < 1.
  """
  if num_heads < 1:
    raise ValueError(f"num_heads must be >= 1; got {num_heads}")

  def power_of_two(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (h + 1) for h in range(n)]

  if math.log2(num_heads).is_integer():
    return np.array(power_of_two(num_heads))
  p = 2 ** math.floor(math.log2(num_heads))
  return np.array(power_of_two(p) + power_of_two(2 * p)[0::2][: num_heads - p])


class ALiBi(PositionalScheme):
  """Adds `-slope_h * (q_pos - k_pos)` to the logits (masked entries are removed later)."""

  def __init__(self, cfg, dims, *, rngs):
    """cfg: the `model.position` section (no ALiBi-specific fields); dims: see `Dims`."""
    del cfg, rngs
    self.slopes = tuple(float(m) for m in alibi_slopes(dims.num_heads))  # static, hashable

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [batch, q_len], k_positions: [batch, k_len] -> float32 [b, H, q, k]."""
    del layer, unused
    distance = (q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(jnp.float32)
    return -jnp.asarray(self.slopes, jnp.float32)[None, :, None, None] * distance
