"""`KernelSpec`: the positional part of attention in a form the fused kernel evaluates per block.

A positional scheme (models/positions/) returns one from `PositionalScheme.kernel_spec` for a
layer, or a string saying why it cannot. The kernel (models/kernels/flash.py) and its reference
(models/kernels/reference.py) then compute, for query i and key j of one head h,

  q'_i = rope(q_i, p_i) * qk_scale / sqrt(head_dim),   k'_j = rope(k_j, p_j) * qk_scale
  logit_ij = q'_i . k'_j + bias_h(p_i, p_j),            p = position ids * position_scale (RoPE)

with `rope` the half-split rotation of models/positions/rope.py `apply_rope` (Su et al., arXiv
2104.09864, Eq. 34) of the first 2 * len(inv_freq) features, and the bias one of:

  "none"          0
  "alibi"         -m_h (p_i - p_j), times L / max(L, p_i + 1) with interpolation length L > 0
                  (Press et al., arXiv 2108.12409, Sec. 3; Al-Khateeb et al., arXiv 2310.13017)
  "kerple_log"    -r1_h log(1 + r2_h |p_i - p_j|)         (Chi et al., arXiv 2205.09921)
  "kerple_power"  -r1_h |p_i - p_j|^r2_h, 0 at distance 0  (Chi et al., arXiv 2205.09921)
  "t5"            table[bucket(p_j - p_i), h], causal buckets of models/positions/t5.py
                  (Raffel et al., arXiv 1910.10683, Sec. 2.1)

The bias uses the position ids as given (integers), never position_scale.
"""

from __future__ import annotations

import dataclasses

import jax

BIAS_FAMILIES = ("none", "alibi", "kerple_log", "kerple_power", "t5")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
  """The positional part of one attention layer, as the fused kernel computes it.

  Attributes:
    inv_freq: None (no rotation) or float32 [rot_dim / 2] inverse frequencies (radians per
      position), or [batch, rot_dim / 2] for frequencies per batch row (dynamic NTK). No gradient
      flows to it.
    position_scale: factor on the position ids before rotation (Position Interpolation: 1/s).
    qk_scale: factor on the rotated q and k, all features (YaRN: 0.1 ln(s) + 1).
    bias: one of BIAS_FAMILIES.
    bias_params: None for "none", else float32 [num_heads, P]: alibi P = 1 (slopes m),
      kerple_* P = 2 (r1, r2, already constrained), t5 P = num_buckets (the table, transposed).
      The kernel returns its gradient.
    num_buckets, max_distance: t5 bucketing (see models/positions/t5.py); 0 otherwise.
    alibi_interpolation_len: L of ALiBi interpolation in tokens; 0 = off.
  """

  inv_freq: jax.Array | None = None
  position_scale: float = 1.0
  qk_scale: float = 1.0
  bias: str = "none"
  bias_params: jax.Array | None = None
  num_buckets: int = 0
  max_distance: int = 0
  alibi_interpolation_len: int = 0

  @property
  def num_params(self) -> int:
    """P, the bias parameters per head (0 for no bias)."""
    return {"none": 0, "alibi": 1, "kerple_log": 2, "kerple_power": 2,
            "t5": self.num_buckets}[self.bias]

  def check(self, num_heads: int) -> None:
    """Checks the fields against each other and the head count.

    Raises:
      ValueError: an unknown bias family, bias_params missing or not [num_heads, P], t5 without
        valid bucket sizes, an odd rotation, or non-positive scales.
    """
    if self.bias not in BIAS_FAMILIES:
      raise ValueError(f"bias must be one of {BIAS_FAMILIES}; got {self.bias!r}")
    if self.bias == "t5" and (self.num_buckets < 2 or self.num_buckets % 2
                              or self.max_distance <= self.num_buckets // 2):
      raise ValueError(f"t5 needs an even num_buckets >= 2 and max_distance > num_buckets / 2; "
                       f"got {self.num_buckets}, {self.max_distance}")
    if self.bias == "none":
      if self.bias_params is not None:
        raise ValueError("bias='none' takes no bias_params")
    elif self.bias_params is None or tuple(self.bias_params.shape) != (num_heads, self.num_params):
      shape = None if self.bias_params is None else tuple(self.bias_params.shape)
      raise ValueError(f"bias={self.bias!r} needs bias_params of shape "
                       f"({num_heads}, {self.num_params}); got {shape}")
    if self.inv_freq is not None and self.inv_freq.ndim not in (1, 2):
      raise ValueError(f"inv_freq must be [rot_dim/2] or [batch, rot_dim/2]; got shape "
                       f"{self.inv_freq.shape}")
    if not (self.position_scale > 0 and self.qk_scale > 0):
      raise ValueError(f"position_scale and qk_scale must be > 0; got {self.position_scale}, "
                       f"{self.qk_scale}")
    if self.alibi_interpolation_len and self.bias != "alibi":
      raise ValueError("alibi_interpolation_len applies to bias='alibi' only")

  @property
  def rot_half(self) -> int:
    """rot_dim / 2, the rotated feature pairs (0 without rotation)."""
    return 0 if self.inv_freq is None else int(self.inv_freq.shape[-1])
