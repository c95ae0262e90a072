"""ALiBi: a linear distance penalty on the attention logits.

Press, Smith & Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation", arXiv 2108.12409 (ICLR 2022), Section 3: head h adds `-m_h * (i - j)` to the
logit of query i and key j <= i, with head-specific slopes m_h in a geometric sequence.

Interpolation (`model.position.alibi_interpolation`, an eval-time extension; Al-Khateeb et al.,
"Position Interpolation Improves ALiBi Extrapolation", arXiv 2310.13017): beyond the training
length L the slopes are multiplied by L / n, n the length seen, so that the largest penalty,
m_h * L * (n - 1) / n, stays below m_h * L (the trained range ends at m_h * (L - 1)). Here n is
per query by default: n = q_position + 1, the keys a causal query sees (its in-document position +
1 under packing); see `alibi_interpolation_scale`. `alibi_interpolation_rule="window"` applies the
paper's rule instead, one factor L / l for every query of a window of l tokens (the position
transform "window_interpolation", models/position_transforms.py, which eval.extension=
alibi_interpolation sets for that rule).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.kernels.spec import KernelSpec
from models.positions.base import PositionalScheme


INTERPOLATION_RULES = ("query", "window")  # alibi_interpolation_rule


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


def alibi_interpolation_scale(q_positions: jax.Array, train_len: int) -> jax.Array:
  """Slope multiplier of ALiBi position interpolation: L / max(L, n), n = q_position + 1.

  Al-Khateeb et al., arXiv 2310.13017, scale the slopes by L_train / L_eval when L_eval > L_train
  (no numbered equation). Here L_eval is taken per query as the number of keys it sees causally,
  n = position + 1, rather than once per window: the scale of a query then does not depend on how
  far the window extends past it, nor on query chunking (`models/attention.py` calls `bias` per
  chunk with the chunk's positions), and it is exactly what token-by-token decoding with the
  paper's rule computes (where the current length is the newest query's position + 1). For the
  last query of a window of n tokens it is the paper's L / n; queries at positions < L are not
  changed at all.

  Args:
    q_positions: int32 [batch, q_len] query positions (in-document under packing).
    train_len: L >= 1, the training context length, tokens.

  Returns:
    float32 [batch, q_len] factors in (0, 1] (exactly 1 where position + 1 <= L).
  """
  n = q_positions.astype(jnp.float32) + 1.0
  return jnp.float32(train_len) / jnp.maximum(jnp.float32(train_len), n)


class ALiBi(PositionalScheme):
  """Adds `-slope_h * (q_pos - k_pos)` to the logits (masked entries are removed later); with
  `model.position.alibi_interpolation`, slopes times `alibi_interpolation_scale` (arXiv 2310.13017).
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "alibi_interpolation": (False, "slopes times L/n for a query seeing n > L keys "
                                     "(eval.extension=alibi_interpolation)."),
      "alibi_heads": (-1, "ALiBi on the first N heads only (the N-head slopes), the rest NoPE; "
                          "-1 = every head."),
      "alibi_interpolation_rule": ("query", 'alibi_interpolation: "query" (L/n per query) | '
                                            '"window" (L/l for the whole window, the paper).'),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    interpolation = cfg.get("alibi_interpolation", False)
    if not isinstance(interpolation, bool):
      raise ConfigError(f"model.position.alibi_interpolation must be True or False; "
                        f"got {interpolation!r}")
    rule = cfg.get("alibi_interpolation_rule", "query")
    if rule not in INTERPOLATION_RULES:
      raise ConfigError(f"model.position.alibi_interpolation_rule must be one of "
                        f"{list(INTERPOLATION_RULES)}; got {rule!r}")
    heads = cfg.get("alibi_heads", -1)
    if isinstance(heads, bool) or not isinstance(heads, int) or not (
        heads == -1 or 0 <= heads <= dims.num_heads):
      raise ConfigError(f"model.position.alibi_heads must be -1 (every head) or a head count in "
                        f"0..model.num_heads={dims.num_heads}; got {heads!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: the `model.position` section (alibi_interpolation, alibi_heads); dims: see `Dims`
    (train_len is the L of interpolation).

    With `alibi_heads` = N < num_heads, heads 0..N-1 take the slopes of an N-head ALiBi and
    the other heads slope 0: no positional bias (NoPE heads), as in the hybrid position/NoPE
    heads of recent long-context models."""
    del rngs
    heads = int(cfg.get("alibi_heads", -1))
    if heads == -1 or heads == dims.num_heads:
      slopes = alibi_slopes(dims.num_heads)
    else:
      slopes = np.concatenate([alibi_slopes(heads) if heads else np.zeros(0),
                               np.zeros(dims.num_heads - heads)])
    self.slopes = tuple(float(m) for m in slopes)  # static, hashable
    # Interpolation per query: L in tokens; 0 = off (the plain bias, bit for bit). The window rule
    # is a position transform instead (the scheme sees the scaled positions).
    per_query = cfg.get("alibi_interpolation_rule", "query") == "query"
    self.interpolation_len = (dims.train_len if cfg.get("alibi_interpolation", False) and per_query
                              else 0)

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [batch, q_len], k_positions: [batch, k_len] -> float32 [b, H, q, k].

    With interpolation, query i's slopes are multiplied by L / max(L, q_positions[i] + 1).
    """
    del layer, unused
    distance = (q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(jnp.float32)
    slopes = jnp.asarray(self.slopes, jnp.float32)[None, :, None, None]
    if not self.interpolation_len:
      return -slopes * distance
    scale = alibi_interpolation_scale(q_positions, self.interpolation_len)[:, None, :, None]
    return -(slopes * scale) * distance

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  def kernel_spec(self, layer, q_positions, k_positions):
    """`bias` as kernel parameters: slopes [heads, 1] and the interpolation length (0 = off).
    See PositionalScheme.kernel_spec."""
    del layer, q_positions, k_positions
    return KernelSpec(bias="alibi", bias_params=jnp.asarray(self.slopes, jnp.float32)[:, None],
                      alibi_interpolation_len=self.interpolation_len)
  # ---- end fused-kernel capability ----
