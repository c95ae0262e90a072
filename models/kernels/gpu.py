"""Flash attention with in-kernel RoPE and positional bias, laid out for the Triton lowering.

One program per (batch, head, block of rows); the other sequence axis is walked by a loop inside
the program over blocks of a full-length reference (the FlashAttention-2 work split, Dao, arXiv
2307.08691, Sec. 3.1-3.2):

  forward   grid (B, H, L / block_q): keys 0 .. the diagonal block (causal block skipping),
            online softmax, output and log-sum-exp.
  dq        grid (B, H, L / block_q_bwd): recomputes each tile from the log-sum-exp.
  dk, dv    grid (B, H, L / block_k_bwd): queries from the diagonal block to the end; also the
            partial gradients of the bias parameters of its key block (summed by the caller).

Grouped-query attention (k, v with KVH = H / group heads): every kernel's grid runs over the
query heads and the K/V BlockSpecs read KV head h // group (`blocks.kv_head`), so no K/V copy
per query head. dk, dv are computed per query head as float32 partials [B, H, L, D] (k's dtype
when group = 1); the caller (models/kernels/flash.py) sums each group. Looping over a group
inside one program instead would leave only B * KVH * L / block_k_bwd programs (MQA: B * L /
block_k_bwd), too few to fill a GPU.

RoPE: each program loads the two rotated halves (and the unrotated rest) of a q/k block as
separate slices of its reference and rotates them elementwise; logits are the sum of the slices'
products, so no concatenation is needed (Triton has none) and Triton's power-of-two shapes need
half, R - half and D - R to be powers of two (or 0 for the last). The tile math is
models/kernels/blocks.py, shared with the TPU kernels.

Inputs (prepared by models/kernels/flash.py): q, do [B, H, L, D] and k, v [B, KVH, L, D] with L
a multiple of the blocks and KVH a divisor of H; position and segment ids int32 [B, L]; inverse
frequencies float32 [B, half]; bias parameters float32 [H, PARAM_LANES] (per query head); lse
and delta float32 [B, H, L, 1].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from models.kernels import blocks
from models.kernels.blocks import Static

# Default tiles (tokens): forward (block_q, block_k), backward (block_q_bwd, block_k_bwd). The
# FlashAttention-2 Triton tutorial's choices for head_dim 64-128 on A100/H100 class GPUs
# (unmeasured here: no GPU was available; see bench/RESULTS.md).
DEFAULT_BLOCKS = (128, 64, 64, 64)
NUM_WARPS = 4
NUM_STAGES = 2


def _pallas(kernel, st: Static, **kwargs):
  """pallas_call with the Triton compiler params, or the CPU interpreter."""
  if st.interpret:
    return pl.pallas_call(kernel, interpret=True, **kwargs)
  return pl.pallas_call(kernel, compiler_params=pltriton.CompilerParams(
      num_warps=NUM_WARPS, num_stages=NUM_STAGES), **kwargs)


def _load(ref, rows, st: Static) -> list[jax.Array]:
  """Rows of a [rows, D] reference as the slices [x1, x2, rest] of blocks.rotate_halves."""
  half, d = st.rot_half, st.head_dim
  if not half:
    return [ref[rows, :]]
  parts = [ref[rows, pl.ds(0, half)], ref[rows, pl.ds(half, half)]]
  if 2 * half < d:
    parts.append(ref[rows, pl.ds(2 * half, d - 2 * half)])
  return parts


def _store(ref, parts: list[jax.Array], st: Static) -> None:
  """Writes slices laid out as `_load` returns them into a [rows, D] reference."""
  offset = 0
  for x in parts:
    ref[:, pl.ds(offset, x.shape[1])] = x.astype(ref.dtype)
    offset += x.shape[1]


def _cos_sin(st: Static, inv_ref, pos_col):
  """cos, sin [n, half] of the angles of positions [n, 1]; (None, None) without rotation."""
  if not st.rot_half:
    return None, None
  angles = blocks.rope_angles(pos_col, inv_ref[...][None, :], st)
  return jnp.cos(angles), jnp.sin(angles)


def _logits(st: Static, prm_ref, q_parts, k_parts, q_pos, k_pos):
  s = sum(blocks.dot_nt(a, b) for a, b in zip(q_parts, k_parts))
  if st.bias != "none":
    s = s + blocks.bias_tile(st, prm_ref[...][None, :], q_pos, k_pos)
  return s


def _rotated_rows(st: Static, inv_ref, pos_ref, seg_ref, x_ref, rows, scale):
  """Rows `rows` of q or k, rotated: (position ids [n], segment ids [n], cos, sin [n, half],
  the rotated slices of `_load`), as every kernel needs them for its tiles."""
  ids = pos_ref[rows]
  cos, sin = _cos_sin(st, inv_ref, ids[:, None])
  parts = blocks.rotate_halves(_load(x_ref, rows, st), cos, sin, scale, x_ref.dtype)
  return ids, seg_ref[rows], cos, sin, parts


def _unpack(st: Static, refs, n_ids: int):
  """(ids, inv_ref or None, prm_ref or None, rest) from a kernel's reference list."""
  ids, refs = refs[:n_ids], refs[n_ids:]
  inv_ref, refs = (refs[0], refs[1:]) if st.rot_half else (None, refs)
  prm_ref, refs = (refs[0], refs[1:]) if st.bias != "none" else (None, refs)
  return ids, inv_ref, prm_ref, refs


def _fwd_kernel(*refs, st: Static):
  (q_pos_ref, q_seg_ref, k_pos_ref, k_seg_ref), inv_ref, prm_ref, rest = _unpack(st, refs, 4)
  q_ref, k_ref, v_ref, o_ref, lse_ref = rest
  bq, bk, d = st.block_q, st.block_k, st.head_dim
  i = pl.program_id(2)
  q_pos, q_seg, cos, sin, q_parts = _rotated_rows(st, inv_ref, q_pos_ref, q_seg_ref, q_ref,
                                                  slice(None), st.q_scale)
  q_pos, q_seg = q_pos[:, None], q_seg[:, None]
  q_index = i * bq + blocks.iota((bq, 1), 0)

  def body(j, carry):
    m, l, acc = carry
    start = pl.multiple_of(j * bk, bk)
    rows = pl.ds(start, bk)
    k_pos, k_seg, _, _, k_parts = _rotated_rows(st, inv_ref, k_pos_ref, k_seg_ref, k_ref, rows,
                                                st.k_scale)
    k_pos, k_seg = k_pos[None, :], k_seg[None, :]
    s = _logits(st, prm_ref, q_parts, k_parts, q_pos, k_pos)
    mask = blocks.mask_tile(q_index, start + blocks.iota((1, bk), 1), q_seg, k_seg)
    return blocks.softmax_step(s, mask, v_ref[rows, :], m, l, acc)

  init = (jnp.full((bq, 1), blocks.MASKED, jnp.float32), jnp.zeros((bq, 1), jnp.float32),
          jnp.zeros((bq, d), jnp.float32))
  num_k = lax.div((i + 1) * bq + bk - 1, bk)  # causal: key blocks up to the diagonal
  m, l, acc = lax.fori_loop(0, num_k, body, init)
  out, lse = blocks.finish(m, l, acc)
  o_ref[...] = out.astype(o_ref.dtype)
  lse_ref[...] = lse


def _dq_kernel(*refs, st: Static):
  (q_pos_ref, q_seg_ref, k_pos_ref, k_seg_ref), inv_ref, prm_ref, rest = _unpack(st, refs, 4)
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref = rest
  bq, bk = st.block_q_bwd, st.block_k_bwd
  i = pl.program_id(2)
  q_pos, q_seg, cos, sin, q_parts = _rotated_rows(st, inv_ref, q_pos_ref, q_seg_ref, q_ref,
                                                  slice(None), st.q_scale)
  q_pos, q_seg = q_pos[:, None], q_seg[:, None]
  q_index = i * bq + blocks.iota((bq, 1), 0)
  do, lse, delta = do_ref[...], lse_ref[...], delta_ref[...]

  def body(j, dq_parts):
    start = pl.multiple_of(j * bk, bk)
    rows = pl.ds(start, bk)
    k_pos, k_seg, _, _, k_parts = _rotated_rows(st, inv_ref, k_pos_ref, k_seg_ref, k_ref, rows,
                                                st.k_scale)
    k_pos, k_seg = k_pos[None, :], k_seg[None, :]
    s = _logits(st, prm_ref, q_parts, k_parts, q_pos, k_pos)
    mask = blocks.mask_tile(q_index, start + blocks.iota((1, bk), 1), q_seg, k_seg)
    p = blocks.probs(s, mask, lse)
    ds = (p * (blocks.dot_nt(do, v_ref[rows, :]) - delta)).astype(k_ref.dtype)
    return tuple(g + blocks.dot_nn(ds, kp) for g, kp in zip(dq_parts, k_parts))

  init = tuple(jnp.zeros(x.shape, jnp.float32) for x in q_parts)
  num_k = lax.div((i + 1) * bq + bk - 1, bk)
  dq_parts = lax.fori_loop(0, num_k, body, init)
  _store(dq_ref, blocks.unrotate_halves(list(dq_parts), cos, sin, st.q_scale), st)


def _dkdv_kernel(*refs, st: Static):
  (q_pos_ref, q_seg_ref, k_pos_ref, k_seg_ref), inv_ref, prm_ref, rest = _unpack(st, refs, 4)
  q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref = rest[:6]
  dk_ref, dv_ref = rest[6:8]
  dprm_ref = rest[8] if st.bias != "none" else None
  bq, bk, d = st.block_q_bwd, st.block_k_bwd, st.head_dim
  j = pl.program_id(2)
  k_pos, k_seg, k_cos, k_sin, k_parts = _rotated_rows(st, inv_ref, k_pos_ref, k_seg_ref, k_ref,
                                                      slice(None), st.k_scale)
  k_pos, k_seg = k_pos[None, :], k_seg[None, :]
  k_index = j * bk + blocks.iota((1, bk), 1)
  v = v_ref[...]
  prm = None if prm_ref is None else prm_ref[...][None, :]

  def body(i, carry):
    dk_parts, dv, dprm = carry
    start = pl.multiple_of(i * bq, bq)
    rows = pl.ds(start, bq)
    q_pos, q_seg, _, _, q_parts = _rotated_rows(st, inv_ref, q_pos_ref, q_seg_ref, q_ref, rows,
                                                st.q_scale)
    q_pos, q_seg = q_pos[:, None], q_seg[:, None]
    s = _logits(st, prm_ref, q_parts, k_parts, q_pos, k_pos)
    mask = blocks.mask_tile(start + blocks.iota((bq, 1), 0), k_index, q_seg, k_seg)
    p = blocks.probs(s, mask, lse_ref[rows, :])
    do = do_ref[rows, :]
    dv = dv + blocks.dot_tn(p.astype(do.dtype), do)
    ds = p * (blocks.dot_nt(do, v) - delta_ref[rows, :])
    if prm is not None:
      dprm = dprm + blocks.params_row(blocks.bias_param_grads(st, prm, q_pos, k_pos, ds))
    ds = ds.astype(q_ref.dtype)
    dk_parts = tuple(g + blocks.dot_tn(ds, qp) for g, qp in zip(dk_parts, q_parts))
    return dk_parts, dv, dprm

  init = (tuple(jnp.zeros(x.shape, jnp.float32) for x in k_parts),
          jnp.zeros((bk, d), jnp.float32), jnp.zeros((1, blocks.PARAM_LANES), jnp.float32))
  first = lax.div(j * bk, bq)  # causal: query blocks from the diagonal on
  dk_parts, dv, dprm = lax.fori_loop(first, st.seq_len // bq, body, init)
  _store(dk_ref, blocks.unrotate_halves(list(dk_parts), k_cos, k_sin, st.k_scale), st)
  dv_ref[...] = dv.astype(dv_ref.dtype)
  if dprm_ref is not None:
    dprm_ref[...] = dprm[0]


def _id_specs(st: Static, q_block: int, k_block: int) -> list:
  """BlockSpecs of (q_pos, q_seg, k_pos, k_seg) [B, L]: a block of `q_block` (`k_block`) ids
  along the grid's row axis, or the full length where the block is 0."""
  def spec(block):
    if not block:
      return pl.BlockSpec((None, st.seq_len), lambda b, h, r: (b, 0))
    return pl.BlockSpec((None, block), lambda b, h, r: (b, r))
  return [spec(q_block)] * 2 + [spec(k_block)] * 2


def _extra(st: Static, inv, prm):
  """(arrays, specs) of the optional inverse frequencies and bias parameters."""
  arrays, specs = [], []
  if st.rot_half:
    arrays.append(inv)
    specs.append(pl.BlockSpec((None, st.rot_half), lambda b, h, r: (b, 0)))
  if st.bias != "none":
    arrays.append(prm)
    specs.append(pl.BlockSpec((None, blocks.PARAM_LANES), lambda b, h, r: (h, 0)))
  return arrays, specs


def forward(st: Static, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm):
  """Forward kernel: (out [B, H, L, D] in q's dtype, lse float32 [B, H, L, 1]); k, v
  [B, KVH, L, D], query head h reading KV head h // (H / KVH)."""
  b, h, length, d = q.shape
  bq = st.block_q
  kv = blocks.kv_head(h // k.shape[1])
  rows = pl.BlockSpec((None, None, bq, d), lambda b_, h_, i: (b_, h_, i, 0))
  full = pl.BlockSpec((None, None, length, d), lambda b_, h_, i: (b_, kv(h_), 0, 0))
  extra, extra_specs = _extra(st, inv, prm)
  return _pallas(
      lambda *refs: _fwd_kernel(*refs, st=st), st,
      grid=(b, h, length // bq),
      in_specs=_id_specs(st, bq, 0) + extra_specs + [rows, full, full],
      out_specs=[rows, pl.BlockSpec((None, None, bq, 1), lambda b_, h_, i: (b_, h_, i, 0))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, length, 1), jnp.float32)],
      name="rope_flash_fwd_gpu",
  )(q_pos, q_seg, k_pos, k_seg, *extra, q, k, v)


def backward(st: Static, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm, do, lse, delta):
  """Backward kernels: dq like q; dk, dv like k, v when KVH = H, else per query head, float32
  [B, H, L, D] (the caller sums each group); the bias-parameter gradient partials float32
  [B, H, L / block_k_bwd, PARAM_LANES] (None without bias)."""
  b, h, length, d = q.shape
  bq, bk = st.block_q_bwd, st.block_k_bwd
  group = h // k.shape[1]
  kv = blocks.kv_head(group)
  extra, extra_specs = _extra(st, inv, prm)
  full = pl.BlockSpec((None, None, length, d), lambda b_, h_, r: (b_, h_, 0, 0))
  kv_full = pl.BlockSpec((None, None, length, d), lambda b_, h_, r: (b_, kv(h_), 0, 0))
  full1 = pl.BlockSpec((None, None, length, 1), lambda b_, h_, r: (b_, h_, 0, 0))
  q_rows = pl.BlockSpec((None, None, bq, d), lambda b_, h_, r: (b_, h_, r, 0))
  q_rows1 = pl.BlockSpec((None, None, bq, 1), lambda b_, h_, r: (b_, h_, r, 0))
  dq = _pallas(
      lambda *refs: _dq_kernel(*refs, st=st), st,
      grid=(b, h, length // bq),
      in_specs=(_id_specs(st, bq, 0) + extra_specs
                + [q_rows, kv_full, kv_full, q_rows, q_rows1, q_rows1]),
      out_specs=q_rows,
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      name="rope_flash_dq_gpu",
  )(q_pos, q_seg, k_pos, k_seg, *extra, q, k, v, do, lse, delta)

  k_rows = pl.BlockSpec((None, None, bk, d), lambda b_, h_, r: (b_, h_, r, 0))
  kv_rows = pl.BlockSpec((None, None, bk, d), lambda b_, h_, r: (b_, kv(h_), r, 0))
  out_specs = [k_rows, k_rows]
  if group == 1:
    out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
  else:  # per query head, float32: summed over each group by the caller
    out_shape = [jax.ShapeDtypeStruct(q.shape, jnp.float32)] * 2
  if st.bias != "none":
    out_specs.append(pl.BlockSpec((None, None, None, blocks.PARAM_LANES),
                                  lambda b_, h_, r: (b_, h_, r, 0)))
    out_shape.append(jax.ShapeDtypeStruct((b, h, length // bk, blocks.PARAM_LANES), jnp.float32))
  outs = _pallas(
      lambda *refs: _dkdv_kernel(*refs, st=st), st,
      grid=(b, h, length // bk),
      in_specs=(_id_specs(st, 0, bk) + extra_specs
                + [full, kv_rows, kv_rows, full, full1, full1]),
      out_specs=out_specs,
      out_shape=out_shape,
      name="rope_flash_dkdv_gpu",
  )(q_pos, q_seg, k_pos, k_seg, *extra, q, k, v, do, lse, delta)
  dk, dv = outs[0], outs[1]
  return dq, dk, dv, (outs[2] if st.bias != "none" else None)
