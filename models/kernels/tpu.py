"""Flash attention with in-kernel RoPE and positional bias, laid out for the Mosaic (TPU) lowering.

Both sequence axes are on the grid, the reduction axis last and sequential ("arbitrary"), with
the running statistics in VMEM scratch (the FlashAttention tiling, Dao et al., arXiv 2205.14135,
Alg. 1; FlashAttention-2's work split, arXiv 2307.08691, Sec. 3):

  forward   grid (B, H, L / block_q, L / block_k): online softmax; tiles above the diagonal are
            skipped and their key blocks are not even fetched (the index map repeats the
            diagonal block, so Pallas elides the copy).
  dq        grid (B, H, L / block_q_bwd, L / block_k_bwd), keys innermost.
  dk, dv    grid (B, H, L / block_k_bwd, L / block_q_bwd), queries innermost; also the partial
            gradients of the bias parameters of its key block (summed by the caller).

Grouped-query attention (k, v with KVH = H / group heads): the grids run over the query heads
and the K/V BlockSpecs read KV head h // group (`blocks.kv_head`), so no K/V copy per query
head. dk, dv are computed per query head as float32 partials [B, H, L, D] (k's dtype when
group = 1), summed over each group by the caller (models/kernels/flash.py), as in gpu.py.

RoPE works on full-width [rows, head_dim] blocks: each lane's partner of the half-split rotation
comes from a lane roll (`pltpu.roll`, the XLU), so the q k^T product keeps the full head_dim
contraction on the MXU. The rotated query block is computed once per row of the grid and kept
in VMEM scratch. Vectors are laid out for the (8, 128) tiling: query-side ids as [rows, 1]
columns, key-side ids as [1, cols] rows (key position ids also as a column, for the rotation),
bias parameters as a [1, PARAM_LANES] row per head, the log-sum-exp as [rows, 1]. The tile math
is models/kernels/blocks.py, shared with the GPU kernels.

Inputs (prepared by models/kernels/flash.py): q, do [B, H, L, D] and k, v [B, KVH, L, D] with L
a multiple of the blocks and KVH a divisor of H; position and segment ids int32 [B, L]; inverse
frequencies float32 [B, half]; bias parameters float32 [H, PARAM_LANES] (per query head); lse
and delta float32 [B, H, L, 1].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from models.kernels import blocks
from models.kernels.blocks import Static

# Default tiles (tokens): forward (block_q, block_k), backward (block_q_bwd, block_k_bwd); key
# tiles are multiples of the 128 lanes. Unmeasured here (no TPU was available).
DEFAULT_BLOCKS = (256, 512, 256, 512)
_SEMANTICS = ("parallel", "parallel", "parallel", "arbitrary")


def _pallas(kernel, st: Static, **kwargs):
  """pallas_call with Mosaic compiler params, or the Pallas TPU interpret mode (CPU)."""
  params = pltpu.CompilerParams(dimension_semantics=_SEMANTICS)
  interpret = pltpu.InterpretParams() if st.interpret else False
  return pl.pallas_call(kernel, compiler_params=params, interpret=interpret, **kwargs)


def _roll(x: jax.Array, shift: int) -> jax.Array:
  return pltpu.roll(x, shift, 1)


def _cos_sin(st: Static, freq_ref, pos_col):
  """cos, sin [n, D] of the per-lane angles of positions [n, 1]; (None, None) without RoPE."""
  if not st.rot_half:
    return None, None
  angles = blocks.rope_angles(pos_col, freq_ref[...], st)
  return jnp.cos(angles), jnp.sin(angles)


def _rotated(st: Static, x_ref, cos, sin, scale: float) -> jax.Array:
  """The block of x_ref rotated and scaled, in x_ref's dtype."""
  x = blocks.rotate_lanes(x_ref[...].astype(jnp.float32), cos, sin, st, _roll)
  if scale != 1.0:
    x = x * jnp.float32(scale)
  return x.astype(x_ref.dtype)


def _unrotated(st: Static, g: jax.Array, cos, sin, scale: float) -> jax.Array:
  """Gradient through `_rotated`: float32 [n, D]."""
  if scale != 1.0:
    g = g * jnp.float32(scale)
  return blocks.rotate_lanes(g, cos, sin, st, _roll, inverse=True)


def _unpack(st: Static, refs):
  """(five id refs, freq_ref or None, prm_ref or None, rest) of a kernel's reference list."""
  ids, refs = refs[:5], refs[5:]
  freq_ref, refs = (refs[0], refs[1:]) if st.rot_half else (None, refs)
  prm_ref, refs = (refs[0], refs[1:]) if st.bias != "none" else (None, refs)
  return ids, freq_ref, prm_ref, refs


def _logits(st: Static, prm_ref, qr, kr, q_pos, k_pos):
  s = blocks.dot_nt(qr, kr)
  if st.bias != "none":
    s = s + blocks.bias_tile(st, prm_ref[...], q_pos, k_pos)
  return s


def _masked_logits(st: Static, prm_ref, qr, kr, ids, i, j, bq: int, bk: int):
  """(logits with the in-kernel bias, visibility mask) of the tile of query block i and key
  block j, both [bq, bk]; `ids` = (q_pos, q_seg, k_pos_col, k_pos, k_seg) references."""
  q_pos_ref, q_seg_ref, _, k_pos_ref, k_seg_ref = ids
  s = _logits(st, prm_ref, qr, kr, q_pos_ref[...], k_pos_ref[...])
  mask = blocks.mask_tile(i * bq + blocks.iota((bq, 1), 0), j * bk + blocks.iota((1, bk), 1),
                          q_seg_ref[...], k_seg_ref[...])
  return s, mask


def _rotate_into(st: Static, freq_ref, pos_col_ref, x_ref, out_ref, scale: float) -> None:
  """Writes the rotated block of q or k (positions [n, 1]) to the scratch `out_ref`."""
  cos, sin = _cos_sin(st, freq_ref, pos_col_ref[...])
  out_ref[...] = _rotated(st, x_ref, cos, sin, scale)


def _fwd_kernel(*refs, st: Static):
  ids, freq_ref, prm_ref, rest = _unpack(st, refs)
  q_pos_ref, q_seg_ref, k_pos_col_ref, k_pos_ref, k_seg_ref = ids
  q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, qr_ref = rest
  bq, bk = st.block_q, st.block_k
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    m_ref[...] = jnp.full(m_ref.shape, blocks.MASKED, jnp.float32)
    l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
    _rotate_into(st, freq_ref, q_pos_ref, q_ref, qr_ref, st.q_scale)

  @pl.when(j * bk < (i + 1) * bq)  # causal: some key of block j is visible from block i
  def _step():
    cos, sin = _cos_sin(st, freq_ref, k_pos_col_ref[...])
    kr = _rotated(st, k_ref, cos, sin, st.k_scale)
    s, mask = _masked_logits(st, prm_ref, qr_ref[...], kr, ids, i, j, bq, bk)
    m, l, acc = blocks.softmax_step(s, mask, v_ref[...], m_ref[...], l_ref[...], acc_ref[...])
    m_ref[...], l_ref[...], acc_ref[...] = m, l, acc

  @pl.when(j == pl.num_programs(3) - 1)
  def _finish():
    out, lse = blocks.finish(m_ref[...], l_ref[...], acc_ref[...])
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse


def _dq_kernel(*refs, st: Static):
  ids, freq_ref, prm_ref, rest = _unpack(st, refs)
  q_pos_ref, q_seg_ref, k_pos_col_ref, k_pos_ref, k_seg_ref = ids
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_acc_ref, qr_ref = rest
  bq, bk = st.block_q_bwd, st.block_k_bwd
  i, j = pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _init():
    dq_acc_ref[...] = jnp.zeros(dq_acc_ref.shape, jnp.float32)
    _rotate_into(st, freq_ref, q_pos_ref, q_ref, qr_ref, st.q_scale)

  @pl.when(j * bk < (i + 1) * bq)
  def _step():
    cos, sin = _cos_sin(st, freq_ref, k_pos_col_ref[...])
    kr = _rotated(st, k_ref, cos, sin, st.k_scale)
    s, mask = _masked_logits(st, prm_ref, qr_ref[...], kr, ids, i, j, bq, bk)
    p = blocks.probs(s, mask, lse_ref[...])
    ds = p * (blocks.dot_nt(do_ref[...], v_ref[...]) - delta_ref[...])
    dq_acc_ref[...] += blocks.dot_nn(ds.astype(kr.dtype), kr)

  @pl.when(j == pl.num_programs(3) - 1)
  def _finish():
    cos, sin = _cos_sin(st, freq_ref, q_pos_ref[...])
    dq_ref[...] = _unrotated(st, dq_acc_ref[...], cos, sin, st.q_scale).astype(dq_ref.dtype)


def _dkdv_kernel(*refs, st: Static):
  ids, freq_ref, prm_ref, rest = _unpack(st, refs)
  q_pos_ref, q_seg_ref, k_pos_col_ref, k_pos_ref, k_seg_ref = ids
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = rest[:6]
  rest = rest[6:]
  dk_ref, dv_ref = rest[:2]
  dprm_ref, rest = (rest[2], rest[3:]) if st.bias != "none" else (None, rest[2:])
  dk_acc_ref, dv_acc_ref, kr_ref, dprm_acc_ref = rest
  bq, bk = st.block_q_bwd, st.block_k_bwd
  j, i = pl.program_id(2), pl.program_id(3)

  @pl.when(i == 0)
  def _init():
    dk_acc_ref[...] = jnp.zeros(dk_acc_ref.shape, jnp.float32)
    dv_acc_ref[...] = jnp.zeros(dv_acc_ref.shape, jnp.float32)
    dprm_acc_ref[...] = jnp.zeros(dprm_acc_ref.shape, jnp.float32)
    _rotate_into(st, freq_ref, k_pos_col_ref, k_ref, kr_ref, st.k_scale)

  @pl.when((i + 1) * bq > j * bk)  # causal: some query of block i sees a key of block j
  def _step():
    q_pos = q_pos_ref[...]
    cos, sin = _cos_sin(st, freq_ref, q_pos)
    qr = _rotated(st, q_ref, cos, sin, st.q_scale)
    s, mask = _masked_logits(st, prm_ref, qr, kr_ref[...], ids, i, j, bq, bk)
    p = blocks.probs(s, mask, lse_ref[...])
    do = do_ref[...]
    dv_acc_ref[...] += blocks.dot_tn(p.astype(do.dtype), do)
    ds = p * (blocks.dot_nt(do, v_ref[...]) - delta_ref[...])
    if prm_ref is not None:
      dprm_acc_ref[...] += blocks.params_row(
          blocks.bias_param_grads(st, prm_ref[...], q_pos, k_pos_ref[...], ds))
    dk_acc_ref[...] += blocks.dot_tn(ds.astype(qr.dtype), qr)

  @pl.when(i == pl.num_programs(3) - 1)
  def _finish():
    cos, sin = _cos_sin(st, freq_ref, k_pos_col_ref[...])
    dk_ref[...] = _unrotated(st, dk_acc_ref[...], cos, sin, st.k_scale).astype(dk_ref.dtype)
    dv_ref[...] = dv_acc_ref[...].astype(dv_ref.dtype)
    if dprm_ref is not None:
      dprm_ref[...] = dprm_acc_ref[...]


def _layouts(st: Static, q_pos, q_seg, k_pos, k_seg, inv, prm):
  """Ids as [B, L, 1] columns / [B, 1, L] rows, per-lane frequencies [B, 1, D] (pair
  frequencies at lanes i and i + half, 0 beyond the rotated features), parameters [H, 1, PL]."""
  col = lambda x: x[:, :, None]
  row = lambda x: x[:, None, :]
  arrays = [col(q_pos), col(q_seg), col(k_pos), row(k_pos), row(k_seg)]
  if st.rot_half:
    zeros = jnp.zeros((inv.shape[0], st.head_dim - 2 * st.rot_half), jnp.float32)
    arrays.append(row(jnp.concatenate([inv, inv, zeros], axis=1)))
  if st.bias != "none":
    arrays.append(prm[:, None, :])
  return arrays


def _specs(st: Static, q_block: int, k_block: int, q_index, k_index) -> list:
  """BlockSpecs of `_layouts`' arrays; q_index / k_index map the grid to the (clamped) query /
  key block index."""
  specs = [pl.BlockSpec((None, q_block, 1), lambda *g: (g[0], q_index(*g), 0))] * 2
  specs.append(pl.BlockSpec((None, k_block, 1), lambda *g: (g[0], k_index(*g), 0)))
  specs += [pl.BlockSpec((None, 1, k_block), lambda *g: (g[0], 0, k_index(*g)))] * 2
  if st.rot_half:
    specs.append(pl.BlockSpec((None, 1, st.head_dim), lambda *g: (g[0], 0, 0)))
  if st.bias != "none":
    specs.append(pl.BlockSpec((None, 1, blocks.PARAM_LANES), lambda *g: (g[1], 0, 0)))
  return specs


def _tile(block: int, d: int, index, head=lambda h: h) -> pl.BlockSpec:
  """[block, d] tiles of a [B, heads, L, d] array at the block `index(*grid)` of head
  `head(grid head)` (`blocks.kv_head` for k and v)."""
  return pl.BlockSpec((None, None, block, d), lambda *g: (g[0], head(g[1]), index(*g), 0))


def forward(st: Static, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm):
  """Forward kernel: (out [B, H, L, D] in q's dtype, lse float32 [B, H, L, 1]); k, v
  [B, KVH, L, D], query head h reading KV head h // (H / KVH)."""
  b, h, length, d = q.shape
  bq, bk = st.block_q, st.block_k
  kv = blocks.kv_head(h // k.shape[1])
  q_index = lambda b_, h_, i, j: i
  # Key blocks above the diagonal repeat the diagonal block: no copy, and _step skips them.
  k_index = lambda b_, h_, i, j: jnp.minimum(j, ((i + 1) * bq - 1) // bk)
  return _pallas(
      lambda *refs: _fwd_kernel(*refs, st=st), st,
      grid=(b, h, length // bq, length // bk),
      in_specs=(_specs(st, bq, bk, q_index, k_index)
                + [_tile(bq, d, q_index), _tile(bk, d, k_index, kv), _tile(bk, d, k_index, kv)]),
      out_specs=[_tile(bq, d, q_index), _tile(bq, 1, q_index)],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, length, 1), jnp.float32)],
      scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                      pltpu.VMEM((bq, d), jnp.float32), pltpu.VMEM((bq, d), q.dtype)],
      name="rope_flash_fwd_tpu",
  )(*_layouts(st, q_pos, q_seg, k_pos, k_seg, inv, prm), q, k, v)


def backward(st: Static, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm, do, lse, delta):
  """Backward kernels: dq like q; dk, dv like k, v when KVH = H, else per query head, float32
  [B, H, L, D] (the caller sums each group); the bias-parameter gradient partials float32
  [B, H, L / block_k_bwd, PARAM_LANES] (None without bias)."""
  b, h, length, d = q.shape
  bq, bk = st.block_q_bwd, st.block_k_bwd
  group = h // k.shape[1]
  kv = blocks.kv_head(group)
  nq, nk = length // bq, length // bk
  layouts = _layouts(st, q_pos, q_seg, k_pos, k_seg, inv, prm)

  # dq: grid (b, h, i, j), keys innermost; key blocks above the diagonal are not fetched.
  q_index = lambda b_, h_, i, j: i
  k_index = lambda b_, h_, i, j: jnp.minimum(j, ((i + 1) * bq - 1) // bk)
  dq = _pallas(
      lambda *refs: _dq_kernel(*refs, st=st), st,
      grid=(b, h, nq, nk),
      in_specs=(_specs(st, bq, bk, q_index, k_index)
                + [_tile(bq, d, q_index), _tile(bk, d, k_index, kv), _tile(bk, d, k_index, kv),
                   _tile(bq, d, q_index), _tile(bq, 1, q_index), _tile(bq, 1, q_index)]),
      out_specs=_tile(bq, d, q_index),
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      scratch_shapes=[pltpu.VMEM((bq, d), jnp.float32), pltpu.VMEM((bq, d), q.dtype)],
      name="rope_flash_dq_tpu",
  )(*layouts, q, k, v, do, lse, delta)

  # dk, dv: grid (b, h, j, i), queries innermost; query blocks before the diagonal not fetched.
  kq_index = lambda b_, h_, j, i: jnp.maximum(i, (j * bk) // bq)
  kk_index = lambda b_, h_, j, i: j
  out_specs = [_tile(bk, d, kk_index), _tile(bk, d, kk_index)]
  if group == 1:
    out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
  else:  # per query head, float32: summed over each group by the caller
    out_shape = [jax.ShapeDtypeStruct(q.shape, jnp.float32)] * 2
  if st.bias != "none":
    out_specs.append(pl.BlockSpec((None, None, None, 1, blocks.PARAM_LANES),
                                  lambda b_, h_, j, i: (b_, h_, j, 0, 0)))
    out_shape.append(jax.ShapeDtypeStruct((b, h, nk, 1, blocks.PARAM_LANES), jnp.float32))
  outs = _pallas(
      lambda *refs: _dkdv_kernel(*refs, st=st), st,
      grid=(b, h, nk, nq),
      in_specs=(_specs(st, bq, bk, kq_index, kk_index)
                + [_tile(bq, d, kq_index), _tile(bk, d, kk_index, kv), _tile(bk, d, kk_index, kv),
                   _tile(bq, d, kq_index), _tile(bq, 1, kq_index), _tile(bq, 1, kq_index)]),
      out_specs=out_specs,
      out_shape=out_shape,
      scratch_shapes=[pltpu.VMEM((bk, d), jnp.float32), pltpu.VMEM((bk, d), jnp.float32),
                      pltpu.VMEM((bk, d), k.dtype),
                      pltpu.VMEM((1, blocks.PARAM_LANES), jnp.float32)],
      name="rope_flash_dkdv_tpu",
  )(*layouts, q, k, v, do, lse, delta)
  dprm = outs[2][:, :, :, 0, :] if st.bias != "none" else None
  return dq, outs[0], outs[1], dprm
