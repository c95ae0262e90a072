"""p-RoPE: RoPE with its lowest frequencies removed.

Barbero et al., "Round and Round We Go! What makes Rotary Positional Encodings useful?", arXiv
2410.06205, Sec. 6 ("p-RoPE"): of RoPE's frequencies theta_i = rope_theta^(-2i/d),
i = 0..d/2-1 (pair 0 the highest), keep the p * d/2 highest and set the rest to 0, so that
those feature pairs carry no position ("semantic channels"); p = 1 is RoPE, p = 0 NoPE. The
paper's Gemma runs use p = 0.25 and 0.75; here `p_rope_fraction` (default 0.75), and the number
of kept pairs is round(p * d/2) (the paper does not say how p * d/2 is rounded).

Not GPT-NeoX partial rotary (`rotary_fraction` of kind "rope"), which rotates fewer features
but spreads the whole frequency range over them: with d_rot = p * d, its pair j gets
theta^(-2j/d_rot) = theta^(-2j/(p d)), a faster-decaying series than RoPE's first p * d/2
frequencies (equal only with the base changed to theta^p).

Everything else (rope_theta, rope_scaling, nope_every, rope_theta_per_layer, the fused kernel) is
RoPE's: the zeroed frequencies are applied after any `rope_scaling` (models/positions/rope.py,
`RoPE.frequency_transform`).
"""

from __future__ import annotations

import numpy as np

from configs.errors import ConfigError
from models.positions.rope import RoPE


def p_rope_inv_freq(inv_freq: np.ndarray, p: float) -> np.ndarray:
  """RoPE's inverse frequencies [rot_dim/2] with all but the round(p * rot_dim/2) highest set to 0
  (float32; Barbero et al., arXiv 2410.06205, Sec. 6)."""
  keep = int(round(p * len(inv_freq)))
  out = np.array(inv_freq, np.float32)
  out[keep:] = 0.0
  return out


class PRoPE(RoPE):
  """p-RoPE (Barbero et al., arXiv 2410.06205): RoPE whose lowest 1 - p of frequencies are 0."""

  config_fields = {
      **RoPE.config_fields,
      "p_rope_fraction": (0.75, "p-RoPE: share p of RoPE's frequencies kept, the highest."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    super().check_config(cfg, dims)
    p = cfg.get("p_rope_fraction", 0.75)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
      raise ConfigError(f"model.position.p_rope_fraction must lie in [0, 1] (the share of RoPE's "
                        f"frequencies kept; 1 = RoPE, 0 = NoPE); got {p!r}")

  @classmethod
  def frequency_transform(cls, cfg, dims, inv_freq):
    """`p_rope_inv_freq` with p = model.position.p_rope_fraction."""
    return p_rope_inv_freq(inv_freq, float(cfg.get("p_rope_fraction", 0.75)))
