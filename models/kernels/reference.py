"""The fused kernel's function in plain jnp: the tests' oracle and the benchmark's XLA baseline.

`reference_attention` computes exactly what models/kernels/flash.py `flash_attention` computes
(see models/kernels/spec.py for the formula), materializing the [batch, heads, q, k] logits and
bias. Causal attention over packed documents: query i sees key j iff j <= i and both carry the
same segment id. Softmax in float32, masked logits set to the float32 minimum, the
probabilities cast to v's dtype before the product with v (as models/attention.py `attend`).
Grouped-query attention (Ainslie et al., arXiv 2305.13245): k and v may have fewer heads than
q; each is repeated per group (query head h uses KV head h // group, transformers' `repeat_kv`).

Sources: FlashAttention computes this function blockwise (Dao et al., arXiv 2205.14135;
FlashAttention-2, arXiv 2307.08691); RoPE arXiv 2104.09864; ALiBi arXiv 2108.12409; KERPLE arXiv
2205.09921; T5 arXiv 1910.10683.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.kernels.spec import KernelSpec
from models.positions.kerple import kerple_log_bias, kerple_power_bias
from models.positions.t5 import relative_position_bucket


def rope_positions(positions: jax.Array, position_scale: float) -> jax.Array:
  """float32 [batch, seq] positions that RoPE rotates by: ids * position_scale (PI)."""
  p = positions.astype(jnp.float32)
  return p if position_scale == 1.0 else p * jnp.float32(position_scale)


def rotate(x: jax.Array, positions: jax.Array, inv_freq: jax.Array | None,
           position_scale: float = 1.0) -> jax.Array:
  """Half-split RoPE of the first 2 * inv_freq.shape[-1] features, in float32.

  The layout and formula of models/positions/rope.py `apply_rope` (Su et al., arXiv 2104.09864,
  Eq. 34): feature i < rot_dim/2 pairs with i + rot_dim/2; the rest pass unchanged.

  Args:
    x: [batch, seq, heads, head_dim], any float dtype.
    positions: int32 [batch, seq] position ids.
    inv_freq: None (no rotation) or float32 [rot_dim/2] or [batch, rot_dim/2], radians per
      position.
    position_scale: factor on the ids before rotation.

  Returns:
    float32 [batch, seq, heads, head_dim].
  """
  x = x.astype(jnp.float32)
  if inv_freq is None:
    return x
  half = inv_freq.shape[-1]
  inv = inv_freq if inv_freq.ndim == 1 else inv_freq[:, None, :]
  angles = rope_positions(positions, position_scale)[..., None] * inv  # [b, s, half]
  cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
  x1, x2 = x[..., :half], x[..., half:2 * half]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * half:]], axis=-1)


def reference_bias(spec: KernelSpec, q_positions: jax.Array,
                   k_positions: jax.Array) -> jax.Array | None:
  """The additive bias of `spec`, materialized.

  Args:
    spec: its bias family and float32 bias_params [heads, P].
    q_positions: int32 [batch, q_len]; k_positions: int32 [batch, k_len].

  Returns:
    float32 [batch, heads, q_len, k_len], or None for bias "none".
  """
  if spec.bias == "none":
    return None
  prm = spec.bias_params.astype(jnp.float32)
  d = q_positions[:, None, :, None] - k_positions[:, None, None, :]  # [b, 1, q, k], int32
  if spec.bias == "alibi":
    slopes = prm[:, 0][None, :, None, None]
    if spec.alibi_interpolation_len:
      n = q_positions.astype(jnp.float32) + 1.0
      length = jnp.float32(spec.alibi_interpolation_len)
      slopes = slopes * (length / jnp.maximum(length, n))[:, None, :, None]
    return -slopes * d.astype(jnp.float32)
  if spec.bias in ("kerple_log", "kerple_power"):
    kernel = kerple_log_bias if spec.bias == "kerple_log" else kerple_power_bias
    return kernel(jnp.abs(d).astype(jnp.float32), prm[:, 0], prm[:, 1])
  buckets = relative_position_bucket(-d[:, 0], spec.num_buckets, spec.max_distance)  # [b, q, k]
  return jnp.take(prm, buckets, axis=1).transpose(1, 0, 2, 3)


def reference_mask(q_segment_ids: jax.Array, k_segment_ids: jax.Array) -> jax.Array:
  """bool [batch, 1, q_len, k_len]: key j <= query i (by index, q_len == k_len) in the same
  segment. Segment ids: int32 [batch, len]."""
  q_len, k_len = q_segment_ids.shape[1], k_segment_ids.shape[1]
  causal = jnp.arange(q_len)[:, None] >= jnp.arange(k_len)[None, :]
  same = q_segment_ids[:, :, None] == k_segment_ids[:, None, :]
  return (causal[None] & same)[:, None]


def reference_attention(q: jax.Array, k: jax.Array, v: jax.Array, q_positions: jax.Array,
                        k_positions: jax.Array, q_segment_ids: jax.Array,
                        k_segment_ids: jax.Array, spec: KernelSpec = KernelSpec()) -> jax.Array:
  """Causal attention with in-kernel-style RoPE and bias, computed by XLA.

  q' = rope(q) * qk_scale / sqrt(head_dim) and k' = rope(k) * qk_scale are computed in float32
  and cast to the input dtype; logits q'k'^T are accumulated in float32, the bias added, masked
  entries set to the float32 minimum, softmax in float32.

  Args:
    q: [batch, seq, heads, head_dim].
    k, v: [batch, seq, kv_heads, head_dim] in q's dtype, kv_heads a divisor of heads (grouped-
      query attention: query head h attends with KV head h // (heads // kv_heads), k and v
      repeated per group); q and k of the same length (self-attention).
    q_positions, k_positions: int32 [batch, seq] position ids.
    q_segment_ids, k_segment_ids: int32 [batch, seq] document ids.
    spec: the positional part (models/kernels/spec.py); bias_params per query head.

  Returns:
    [batch, seq, heads, head_dim] in q's dtype.

  Raises:
    ValueError: q and k of different lengths, kv_heads not dividing heads, or an inconsistent
      spec.
  """
  b, length, h, d = q.shape
  if k.shape[1] != length:
    raise ValueError(f"self-attention needs q and k of one length; got {length}, {k.shape[1]}")
  if not k.shape[2] or h % k.shape[2] or v.shape[2] != k.shape[2]:
    raise ValueError(f"k and v need kv_heads dividing the {h} query heads; got {k.shape[2]}, "
                     f"{v.shape[2]}")
  if k.shape[2] != h:  # grouped-query attention: repeat each KV head over its group
    k, v = (jnp.repeat(x, h // k.shape[2], axis=2) for x in (k, v))
  spec.check(h)
  scale = spec.qk_scale * d ** -0.5
  qr = (rotate(q, q_positions, spec.inv_freq, spec.position_scale) * scale).astype(q.dtype)
  kr = rotate(k, k_positions, spec.inv_freq, spec.position_scale)
  kr = (kr if spec.qk_scale == 1.0 else kr * spec.qk_scale).astype(k.dtype)
  logits = jnp.einsum("bqhd,bkhd->bhqk", qr, kr, preferred_element_type=jnp.float32)
  bias = reference_bias(spec, q_positions, k_positions)
  if bias is not None:
    logits = logits + bias
  mask = reference_mask(q_segment_ids, k_segment_ids)
  logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v).astype(q.dtype)
