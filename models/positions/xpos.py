"""xPos: RoPE with a per-dimension exponential decay of the query-key product.

Sun et al., "A Length-Extrapolatable Transformer", arXiv 2212.10554 (ACL 2023), Section 3.2
("Improve Resolution by Position Encoding"), and its reference implementation (torchscale,
`torchscale/component/xpos_relative_position.py`, class `XPOS`). Each rotated feature pair i gets,
on top of RoPE's rotation by `n * theta_i`, a scale

    zeta_i = (2i + 0.4 d) / (1.4 d),   i = 0 .. d/2 - 1        (the paper: (i/(d/2) + g)/(1 + g), g = 0.4)

raised to `n / scale_base` on the query and to `-n / scale_base` on the key, so that

    <xpos_q(q, m), xpos_k(k, n)> = sum_i zeta_i^((m - n) / scale_base) * <RoPE pair i>,

a function of m - n only that decays with distance (zeta_i in [2/7, 1)): the fastest-rotating
pairs (small i, large theta_i) decay fastest, the slow ones hardly at all.

Which features share a zeta: in torchscale's interleaved layout, features (2i, 2i+1) form the
i-th rotated pair and share both theta_i and zeta_i (`duplicate_interleave`). This codebase uses
RoPE's half-split layout (`models/positions/rope.py`), where feature i pairs with i + d_rot/2; so
features i and i + d_rot/2 share theta_i = rope_theta^(-2i/d_rot) and zeta_i. It is the same
scheme up to a fixed permutation of the head features (which the learned projections absorb).
With partial rotation (`rotary_fraction` < 1), d = d_rot (the rotated width, as for theta_i) and
the features >= d_rot are neither rotated nor scaled (returned bit-identical).

Float range. The factors zeta^(+-n / scale_base) overflow (keys) and underflow (queries) in
float32/bfloat16 once |n| * ln(3.5) / scale_base exceeds about 88 (n ~ 36k tokens for
scale_base 512), although their product zeta^((m - n) / scale_base) does not. Since only m - n
matters, `rotate` uses positions relative to a per-batch-row offset c shared by queries and keys:
q gets zeta^((m - c) / scale_base), k gets zeta^(-(n - c) / scale_base), and both are rotated by
(position - c) * theta_i (the same relative rotation; more accurate float32 angles at large
positions). c is the midpoint of the smallest and largest position of the row over *both*
`q_positions` and `k_positions` (the torchscale code likewise centres the scale's positions on
the middle of the sequence). The logits are unchanged in exact arithmetic. This is exact whenever
every query-key product is formed between a q and a k rotated in the same `rotate` call, which is
how `models/attention.py` uses it: `rotate` is applied once to the full q and k, before query
chunking, so every chunk's logits combine a q and a k that share the row's c. (Were `rotate`
called per chunk, the offset would still be shared within each call, so it would stay exact.) It
would NOT be valid for a key cache that stores keys rotated by an earlier call; this codebase has
none. Positions restart per document under packing, so a row's span is at most its longest
document and the factors stay moderate. With the centring, a row is safe while its span is below
`xpos_max_length(scale_base)` (about 52k tokens for scale_base 512), where the per-side factor
reaches e^64 (leaving ~1e10 of headroom below the float32 maximum for the q/k values, and keeping
the small factor e^-64 well above the smallest normal float); `XPos.max_position` is set to it,
so longer evaluation lengths are refused before compilation rather than producing inf/NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.positions.base import PositionalScheme
from models.positions.rope import RoPE, apply_rope, is_nope_layer, rope_inv_freq, rotary_dim

# Largest |log| of a per-side scale factor that `XPos.max_position` allows (e^64 ~ 6e27).
MAX_LOG_SCALE = 64.0


def xpos_zeta(rot_dim: int) -> np.ndarray:
  """The paper's per-pair decay bases `zeta_i = (2i + 0.4 d) / (1.4 d)`, d = rot_dim.

  Args:
    rot_dim: rotated width d (even, >= 2).

  Returns:
    float32 [rot_dim / 2], increasing from 2/7 (i = 0) towards 1 (exclusive).
  """
  i = np.arange(0, rot_dim, 2, dtype=np.float64)  # = 2i, as torchscale's arange(0, head_dim, 2)
  return ((i + 0.4 * rot_dim) / (1.4 * rot_dim)).astype(np.float32)


def xpos_max_length(scale_base: float) -> int:
  """Longest window L (positions 0..L-1, tokens) that `rotate` represents without overflow.

  With positions centred on the row's midpoint c, |position - c| <= L / 2, so the largest
  per-side factor is at most (1/zeta_0)^(L / 2 / scale_base) with 1/zeta_0 = 3.5 (for any d);
  this keeps it <= e^MAX_LOG_SCALE. Any row whose positions span fewer than L ids is safe too.
  """
  return int(math.floor(2.0 * MAX_LOG_SCALE * scale_base / math.log(3.5)))


def apply_xpos(x: jax.Array, positions: jax.Array, inv_freq: jax.Array, zeta: jax.Array,
               scale_base: float, offset: jax.Array | int = 0, *, downscale: bool) -> jax.Array:
  """RoPE-rotates the first `2 * len(inv_freq)` features of x and scales pair i by zeta_i^(+-t).

  t = (positions - offset) / scale_base; the exponent is +t for queries (downscale=False) and
  -t for keys (downscale=True), so the product of a query at m and a key at n carries
  zeta_i^((m - n) / scale_base) whatever the offset, provided q and k share it. The rotation
  angle is also taken relative to the offset, `(positions - offset) * theta_i`: the product
  still depends on (m - n) theta_i only, and float32 angles stay accurate at large positions.
  Scale and rotation are applied in float32 and the result is rounded once to x's dtype.

  Args:
    x: [batch, seq, heads, head_dim], any float dtype.
    positions: int32 [batch, seq] position ids.
    inv_freq: float32 [rot_dim / 2] RoPE inverse frequencies (radians per position).
    zeta: float32 [rot_dim / 2] decay bases (`xpos_zeta`).
    scale_base: the decay's length scale, tokens (> 0).
    offset: int32 [batch, 1] (or a scalar) subtracted from the positions (scale and angle).
    downscale: False for queries (zeta^t), True for keys (zeta^-t).

  Returns:
    Array like x; features >= rot_dim are returned unchanged (bit-identical).
  """
  half = inv_freq.shape[-1]
  rot = 2 * half
  relative = positions - offset  # [b, s]
  t = relative.astype(jnp.float32) / scale_base
  if downscale:
    t = -t
  scale = jnp.exp(t[..., None] * jnp.log(zeta))  # [b, s, half]
  scale = jnp.concatenate([scale, scale], axis=-1)[:, :, None, :]  # half-split: i and i + half
  scaled = x[..., :rot].astype(jnp.float32) * scale
  rotated = apply_rope(scaled, relative, inv_freq).astype(x.dtype)
  if rot == x.shape[-1]:
    return rotated
  return jnp.concatenate([rotated, x[..., rot:]], axis=-1)


def row_offset(q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
  """int32 [batch, 1]: the midpoint of each row's smallest and largest position (q and k)."""
  lo = jnp.minimum(q_positions.min(axis=-1), k_positions.min(axis=-1))
  hi = jnp.maximum(q_positions.max(axis=-1), k_positions.max(axis=-1))
  return (lo + (hi - lo) // 2)[:, None].astype(jnp.int32)


class XPos(PositionalScheme):
  """xPos with `rope_theta`, `rotary_fraction`, `xpos_scale_base`, `nope_every` (`model.position`).

  No parameters. `max_position` is `xpos_max_length(xpos_scale_base)` (see the module docstring).
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "rope_theta": (10000.0, "base of the inverse frequencies (as RoPE)."),
      "rotary_fraction": (1.0, "share of head_dim that rotates (as RoPE)."),
      "nope_every": (0, "layers N-1, 2N-1, ... use no rotation; 0 = none (as RoPE)."),
      "xpos_scale_base": (512.0, "the decay's length scale, tokens."),
  }

  max_position_hint = "raise model.position.xpos_scale_base"

  @classmethod
  def check_config(cls, cfg, dims):
    RoPE.check_config(cfg, dims)  # rotary_fraction, rope_theta, nope_every
    sb = cfg.xpos_scale_base
    if isinstance(sb, bool) or not isinstance(sb, (int, float)) or not sb > 0:
      raise ConfigError(f"model.position.xpos_scale_base must be a positive number of tokens; got {sb!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (rope_theta, rotary_fraction, xpos_scale_base, nope_every)."""
    del rngs
    rot = rotary_dim(dims.head_dim, cfg.rotary_fraction)
    self.inv_freq = tuple(float(f) for f in rope_inv_freq(rot, cfg.rope_theta))  # static, hashable
    self.zeta = tuple(float(z) for z in xpos_zeta(rot))
    self.scale_base = float(cfg.xpos_scale_base)
    self.nope_every = int(cfg.get("nope_every", 0))
    self.max_position = xpos_max_length(self.scale_base)

  def rotate(self, q, k, q_positions, k_positions, layer):
    """q: [b, q_len, H, D], k: [b, k_len, H, D]; positions int32 [b, len] -> (q, k) like them.

    Layers `nope_every - 1, 2 * nope_every - 1, ...` (when nope_every > 0) return q, k unchanged.
    """
    if is_nope_layer(layer, self.nope_every):
      return q, k
    inv_freq = jnp.asarray(self.inv_freq, jnp.float32)
    zeta = jnp.asarray(self.zeta, jnp.float32)
    offset = row_offset(q_positions, k_positions)
    return (apply_xpos(q, q_positions, inv_freq, zeta, self.scale_base, offset, downscale=False),
            apply_xpos(k, k_positions, inv_freq, zeta, self.scale_base, offset, downscale=True))
