"""Block math shared by the GPU (Triton) and TPU (Mosaic) flash-attention kernels.

Every function here works on the values of one (query block, key block) tile inside a Pallas
kernel: 2-D arrays only, row statistics as [rows, 1] columns, per-key quantities as [1, cols]
rows, so the same code lowers to Triton and to Mosaic. The two kernels differ only in how they
walk the tiles (gpu.py: a key loop inside each program; tpu.py: keys on the grid) and in how a
block is rotated (halves loaded as separate slices on GPU, lane rolls on TPU).

Notation: bq x bk tile; D = head_dim; R = rotated features (2 * half); PL = PARAM_LANES.
Sources: online softmax and the blockwise backward of FlashAttention (Dao et al., arXiv
2205.14135, Alg. 1 and 4) and FlashAttention-2 (arXiv 2307.08691, Alg. 1 and 2); RoPE arXiv
2104.09864; ALiBi arXiv 2108.12409; KERPLE arXiv 2205.09921; T5 arXiv 1910.10683.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from models.positions.t5 import relative_position_bucket

MASKED = -1e30  # logit of a masked pair: finite, so exp(MASKED - MASKED) is 1, never NaN
PARAM_LANES = 128  # bias parameters of a head travel as one [1, PARAM_LANES] float32 row


@dataclasses.dataclass(frozen=True)
class Static:
  """Static (hashable) configuration of one kernel call; all lengths in tokens.

  Attributes:
    head_dim: D.
    rot_half: rotated feature pairs (R / 2); 0 = no rotation.
    position_scale: factor on position ids before rotation.
    q_scale: factor on the rotated q (qk_scale / sqrt(D)); k_scale: on the rotated k (qk_scale).
    bias: "none" | "alibi" | "kerple_log" | "kerple_power" | "t5".
    t5_starts: smallest distance of each t5 bucket 1 .. num_buckets - 1.
    alibi_interpolation_len: ALiBi interpolation L; 0 = off.
    block_q, block_k: forward tile; block_q_bwd, block_k_bwd: backward tile.
    seq_len: padded sequence length (a multiple of every block size).
    interpret: run the Pallas interpreter (CPU) instead of compiling.
  """

  head_dim: int
  rot_half: int
  position_scale: float
  q_scale: float
  k_scale: float
  bias: str
  t5_starts: tuple[int, ...]
  alibi_interpolation_len: int
  block_q: int
  block_k: int
  block_q_bwd: int
  block_k_bwd: int
  seq_len: int
  interpret: bool


@functools.lru_cache(maxsize=None)
def t5_bucket_starts(num_buckets: int, max_distance: int) -> tuple[int, ...]:
  """Smallest distance n = q_pos - k_pos of each T5 bucket b = 1 .. num_buckets - 1.

  Read off models/positions/t5.py `relative_position_bucket` (not re-derived), which is
  non-decreasing in n and constant from max_distance on: bucket(n) = #{b >= 1: n >= start_b}.
  An empty bucket repeats the next bucket's start.

  Returns:
    num_buckets - 1 Python ints, non-decreasing, each <= max_distance.
  """
  n = np.arange(max_distance + 1)
  buckets = relative_position_bucket(-n, num_buckets, max_distance)
  return tuple(int(np.argmax(buckets >= b)) for b in range(1, num_buckets))


def kv_head(group: int):
  """The KV head of query head h in a BlockSpec index map: h // group (grouped-query attention:
  `group` consecutive query heads share a KV head). For group 1 the identity, so multi-head
  attention traces the index maps it traced before grouped-query attention was added."""
  if group == 1:
    return lambda h: h
  return lambda h: h // group


def iota(shape: tuple[int, int], dim: int) -> jax.Array:
  """int32 indices along `dim` of a 2-D tile."""
  return lax.broadcasted_iota(jnp.int32, shape, dim)


def dot_nt(a: jax.Array, b: jax.Array) -> jax.Array:
  """a [m, d] @ b[n, d]^T in float32 [m, n]."""
  return lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def dot_tn(a: jax.Array, b: jax.Array) -> jax.Array:
  """a [m, n]^T @ b [m, d] in float32 [n, d]."""
  return lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def dot_nn(a: jax.Array, b: jax.Array) -> jax.Array:
  """a [m, n] @ b [n, d] in float32 [m, d]."""
  return lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _sum(x: jax.Array) -> jax.Array:
  """Sum of a 2-D tile as a [1, 1] array."""
  return jnp.sum(jnp.sum(x, axis=1, keepdims=True), axis=0, keepdims=True)


# ------------------------------------------------------------------ RoPE


def rope_angles(pos_col: jax.Array, freq_row: jax.Array, st: Static) -> jax.Array:
  """Rotation angles (radians) float32 [n, f]: position ids [n, 1] (int32) times the
  frequencies [1, f] (float32), the ids first multiplied by position_scale."""
  p = pos_col.astype(jnp.float32)
  if st.position_scale != 1.0:
    p = p * jnp.float32(st.position_scale)
  return p * freq_row


def rotate_halves(parts: list[jax.Array], cos: jax.Array | None, sin: jax.Array | None,
                  scale: float, dtype) -> list[jax.Array]:
  """Rotates a block given as feature slices [x1, x2, rest...], then scales it.

  x1 = features [0, half), x2 = [half, R) (rotated pairwise: x1 c - x2 s, x2 c + x1 s), rest =
  [R, D) unrotated; without rotation (cos None) `parts` is the whole block. Computed in float32,
  returned in `dtype`.
  """
  xs = [x.astype(jnp.float32) for x in parts]
  if cos is not None:
    x1, x2 = xs[0], xs[1]
    xs = [x1 * cos - x2 * sin, x2 * cos + x1 * sin] + xs[2:]
  if scale != 1.0:
    xs = [x * jnp.float32(scale) for x in xs]
  return [x.astype(dtype) for x in xs]


def unrotate_halves(grads: list[jax.Array], cos: jax.Array | None, sin: jax.Array | None,
                    scale: float) -> list[jax.Array]:
  """Gradient through `rotate_halves`: float32 grads of the rotated slices -> of the inputs."""
  if scale != 1.0:
    grads = [g * jnp.float32(scale) for g in grads]
  if cos is None:
    return grads
  g1, g2 = grads[0], grads[1]
  return [g1 * cos + g2 * sin, g2 * cos - g1 * sin] + grads[2:]


def rotate_lanes(x: jax.Array, cos: jax.Array | None, sin: jax.Array | None, st: Static,
                 roll, *, inverse: bool = False) -> jax.Array:
  """Half-split rotation of a full-width float32 block [n, D] with lane rolls (TPU layout).

  cos/sin are [n, D] of the per-lane angles (lane i < R has pair frequency i mod half, lanes
  >= R have frequency 0, so cos = 1 and sin = 0 there). Lane i < half takes its partner from
  lane i + half, lane half <= i < R from lane i - half: rolled copies of x.
  `roll(x, shift)` is jnp.roll along lanes (pltpu.roll on TPU). inverse=True applies the
  transpose (the gradient). Without rotation (cos None) returns x.
  """
  if cos is None:
    return x
  half, d = st.rot_half, st.head_dim
  lane = iota(x.shape, 1)
  from_above = roll(x, d - half)  # lane i holds x[i + half]
  from_below = from_above if 2 * half == d else roll(x, half)  # lane i holds x[i - half]
  partner = jnp.where(lane < half, -from_above, from_below)
  if inverse:
    partner = -partner
  return x * cos + partner * sin


# ------------------------------------------------------------------ mask and bias


def mask_tile(q_index: jax.Array, k_index: jax.Array, q_seg: jax.Array,
              k_seg: jax.Array) -> jax.Array:
  """bool [bq, bk]: causal by index (k_index <= q_index) and the same segment id.

  q_index, q_seg: int32 [bq, 1]; k_index, k_seg: int32 [1, bk].
  """
  return (q_index >= k_index) & (q_seg == k_seg)


def param(prm_row: jax.Array, i: int) -> jax.Array:
  """Parameter i of a head's [1, PARAM_LANES] row as a [1, 1] float32 array."""
  lane = iota(prm_row.shape, 1)
  return jnp.sum(jnp.where(lane == i, prm_row, 0.0), axis=1, keepdims=True)


def params_row(values: list[jax.Array]) -> jax.Array:
  """[1, 1] values -> one [1, PARAM_LANES] float32 row (value i at lane i, zeros after)."""
  lane = iota((1, PARAM_LANES), 1)
  row = jnp.zeros((1, PARAM_LANES), jnp.float32)
  for i, v in enumerate(values):
    row = jnp.where(lane == i, v, row)
  return row


def _alibi_factor(st: Static, q_pos: jax.Array) -> jax.Array | float:
  """ALiBi interpolation factor L / max(L, q_pos + 1), float32 [bq, 1]; 1.0 when off."""
  if not st.alibi_interpolation_len:
    return 1.0
  length = jnp.float32(st.alibi_interpolation_len)
  return length / jnp.maximum(length, q_pos.astype(jnp.float32) + 1.0)


def bias_tile(st: Static, prm_row: jax.Array, q_pos: jax.Array,
              k_pos: jax.Array) -> jax.Array | None:
  """The positional bias of one tile, float32 [bq, bk] (None for bias "none").

  Args:
    st: static config (bias family, t5 bucket starts, ALiBi interpolation).
    prm_row: float32 [1, PARAM_LANES], this head's parameters.
    q_pos: int32 [bq, 1] query position ids; k_pos: int32 [1, bk] key position ids.
  """
  if st.bias == "none":
    return None
  d = q_pos - k_pos  # [bq, bk] int32
  if st.bias == "alibi":
    return -(param(prm_row, 0) * _alibi_factor(st, q_pos)) * d.astype(jnp.float32)
  if st.bias == "t5":
    n = jnp.maximum(d, 0)
    out = jnp.broadcast_to(param(prm_row, 0), d.shape)
    for b, start in enumerate(st.t5_starts, start=1):
      out = jnp.where(n >= start, param(prm_row, b), out)
    return out
  a = jnp.abs(d).astype(jnp.float32)
  r1, r2 = param(prm_row, 0), param(prm_row, 1)
  if st.bias == "kerple_log":
    return -r1 * jnp.log1p(r2 * a)
  # kerple_power: a^r2 = exp(r2 log a) for a >= 1, 0 at a = 0.
  return -r1 * jnp.where(a > 0, jnp.exp(r2 * jnp.log(jnp.maximum(a, 1.0))), 0.0)


def bias_param_grads(st: Static, prm_row: jax.Array, q_pos: jax.Array, k_pos: jax.Array,
                     ds: jax.Array) -> list[jax.Array]:
  """Gradients of the loss w.r.t. this head's bias parameters from one tile.

  Args:
    st, prm_row, q_pos, k_pos: as `bias_tile`.
    ds: float32 [bq, bk], the loss gradient w.r.t. the tile's logits (0 at masked pairs).

  Returns:
    num_params arrays [1, 1] float32: sum over the tile of ds * d bias / d parameter.
  """
  d = q_pos - k_pos
  if st.bias == "alibi":
    return [_sum(-ds * (_alibi_factor(st, q_pos) * d.astype(jnp.float32)))]
  if st.bias == "t5":
    n = jnp.maximum(d, 0)
    bounds = (0,) + st.t5_starts
    grads = []
    for b in range(len(bounds)):
      inside = n >= bounds[b]
      if b + 1 < len(bounds):
        inside = inside & (n < bounds[b + 1])
      grads.append(_sum(jnp.where(inside, ds, 0.0)))
    return grads
  a = jnp.abs(d).astype(jnp.float32)
  r1, r2 = param(prm_row, 0), param(prm_row, 1)
  if st.bias == "kerple_log":
    return [_sum(-ds * jnp.log1p(r2 * a)), _sum(-ds * r1 * a / (1.0 + r2 * a))]
  log_a = jnp.log(jnp.maximum(a, 1.0))
  powered = jnp.where(a > 0, jnp.exp(r2 * log_a), 0.0)
  return [_sum(-ds * powered), _sum(-ds * r1 * powered * log_a)]


# ------------------------------------------------------------------ online softmax


def softmax_step(s: jax.Array, mask: jax.Array, v: jax.Array, m: jax.Array, l: jax.Array,
                 acc: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One key block of the online softmax (FlashAttention-2, arXiv 2307.08691, Alg. 1).

  Args:
    s: float32 [bq, bk] logits (bias included); mask: bool [bq, bk].
    v: [bk, D] values; m, l: float32 [bq, 1] running max and sum; acc: float32 [bq, D].

  Returns:
    Updated (m, l, acc); masked pairs get exactly zero weight.
  """
  s = jnp.where(mask, s, MASKED)
  m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
  alpha = jnp.exp(m - m_new)
  p = jnp.where(mask, jnp.exp(s - m_new), 0.0)
  l_new = alpha * l + jnp.sum(p, axis=1, keepdims=True)
  acc_new = alpha * acc + dot_nn(p.astype(v.dtype), v)
  return m_new, l_new, acc_new


def finish(m: jax.Array, l: jax.Array, acc: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(acc / l, log-sum-exp m + log l), float32 [bq, D] and [bq, 1]; rows without keys give 0."""
  l_safe = jnp.where(l == 0.0, 1.0, l)
  return acc / l_safe, m + jnp.log(l_safe)


def probs(s: jax.Array, mask: jax.Array, lse: jax.Array) -> jax.Array:
  """Backward recomputation of the softmax from the saved log-sum-exp lse [bq, 1]: float32."""
  return jnp.where(mask, jnp.exp(s - lse), 0.0)
