"""`flash_attention`: causal flash attention with RoPE and a positional bias computed in-kernel.

The function is models/kernels/reference.py `reference_attention` (formula in
models/kernels/spec.py), computed blockwise without materializing the [L, L] logits or bias:
memory is linear in the sequence length. Forward: online softmax over key blocks, blocks above
the diagonal skipped (FlashAttention, Dao et al., arXiv 2205.14135; FlashAttention-2, arXiv
2307.08691). Backward (`jax.custom_vjp`): recomputes each tile from the saved log-sum-exp, no
[L, L] residual; returns gradients for q, k, v and the bias parameters (ALiBi slopes, KERPLE
r1/r2, the T5 table); none for position ids, segment ids or inverse frequencies.

Grouped-query attention (GQA, Ainslie et al., arXiv 2305.13245; multi-query attention when
num_kv_heads = 1): k and v carry num_kv_heads heads, a divisor of the query heads, and query
head h attends with KV head h // group, group = heads // num_kv_heads (consecutive query heads
share one KV head: the `repeat_kv` convention of Llama / transformers). The forward and dq
kernels read that KV head through their BlockSpec index maps (no copy of K/V per query head).
The dk/dv kernel runs per query head, as without GQA, and writes float32 partials
[B, H, L, D]; `_flash_bwd` sums each group's partials into its KV head and casts to k's dtype
(FlashAttention-2's own GQA backward does the same). RoPE of the keys depends on positions only
and the bias parameters are per query head, so neither changes. With num_kv_heads = heads
nothing of this runs: the program is the one without GQA.

Backends (`backend`): "gpu" (models/kernels/gpu.py, Triton lowering) and "tpu"
(models/kernels/tpu.py, Mosaic lowering); both use the tile math of models/kernels/blocks.py.
Default: "tpu" on TPU, else "gpu"; `interpret` defaults to True off GPU/TPU (CPU runs the
Pallas interpreter; the "tpu" kernels then run in the Pallas TPU interpret mode,
`pltpu.InterpretParams`). Sequence lengths that are not a multiple of the blocks are padded at
the end: padded keys lie after every real query, so the causal mask hides them. This function
runs on one device; on a mesh, models/kernels/partition.py runs it per device in `shard_map`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from models.kernels import blocks, gpu, tpu
from models.kernels.spec import KernelSpec
from models.sharding import trace_platform

BACKENDS = ("gpu", "tpu")
DEFAULT_BLOCKS = {"gpu": gpu.DEFAULT_BLOCKS, "tpu": tpu.DEFAULT_BLOCKS}


@dataclasses.dataclass(frozen=True)
class BlockSizes:
  """Tile sizes in tokens (powers of two >= 8); 0 = the backend's default (`DEFAULT_BLOCKS`).

  Attributes:
    block_q, block_k: forward query / key tile.
    block_q_bwd, block_k_bwd: backward query / key tile.
  """

  block_q: int = 0
  block_k: int = 0
  block_q_bwd: int = 0
  block_k_bwd: int = 0


def resolve_backend(backend: str | None = None,
                    interpret: bool | None = None) -> tuple[str, bool]:
  """(backend, interpret) with defaults from the platform of the trace (`trace_platform`: the
  mesh's devices under models/sharding.py `mesh_platform`, else `jax.default_backend()`).

  "tpu" kernels on TPU, "gpu" kernels otherwise; interpret unless the platform is the
  kernel's own (so on CPU both kernels run in the Pallas interpreter; "cuda" and "rocm" devices
  are the "gpu" kernel's own).

  Raises:
    ValueError: an unknown backend.
  """
  platform = trace_platform()
  platform = "gpu" if platform in ("cuda", "rocm") else platform
  if backend is None:
    backend = "tpu" if platform == "tpu" else "gpu"
  if backend not in BACKENDS:
    raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
  if interpret is None:
    interpret = platform != backend
  return backend, bool(interpret)


def _pow2(n: int) -> bool:
  return n >= 1 and n & (n - 1) == 0


BLOCK_FIELDS = ("block_q", "block_k", "block_q_bwd", "block_k_bwd")  # BlockSizes, in order


def tile_sizes(length: int, backend: str,
               block_sizes: BlockSizes = BlockSizes()) -> tuple[tuple[int, ...], int]:
  """The tiles the kernels will use at `length` tokens, and the padded sequence length.

  A tile, requested (`block_sizes`) or the backend's default (`DEFAULT_BLOCKS`), is capped at
  max(16, `length` rounded up to a power of two); the sequence is padded at the end to a
  multiple of the largest tile.

  Args:
    length: sequence length, tokens (>= 1).
    backend: "gpu" | "tpu".
    block_sizes: requested tiles (0 = default); not checked here (see `unsupported_reason`).

  Returns:
    ((block_q, block_k, block_q_bwd, block_k_bwd), padded length), in tokens.
  """
  cap = max(16, 1 << (length - 1).bit_length())
  sizes = tuple(min(getattr(block_sizes, f) or d, cap)
                for f, d in zip(BLOCK_FIELDS, DEFAULT_BLOCKS[backend]))
  return sizes, -(-length // max(sizes)) * max(sizes)


def unsupported_reason(spec: KernelSpec, head_dim: int, backend: str | None = None,
                       interpret: bool | None = None, *, seq_len: int | None = None,
                       block_sizes: BlockSizes = BlockSizes(), num_heads: int | None = None,
                       num_kv_heads: int | None = None) -> str | None:
  """Why the kernel cannot compute `spec` with these sizes on this backend, or None if it can.

  Args:
    spec: the positional part (models/kernels/spec.py).
    head_dim: per-head width D.
    backend, interpret: as in `resolve_backend` (None = from the trace's platform).
    seq_len: sequence length in tokens; None skips the limits that depend on it (the TPU key
      tiles below).
    block_sizes: requested tiles in tokens (0 = the backend's default).
    num_heads, num_kv_heads: query and key/value heads; None (either) skips the head check.

  Returns:
    None, or a one-line reason (the caller logs it and takes the XLA path, or raises it):
    - num_kv_heads not a positive divisor of num_heads (grouped-query attention needs whole
      groups);
    - bias parameters beyond one row of `blocks.PARAM_LANES` lanes, or rot_dim > head_dim;
    - a requested tile that is not 0 or a power of two >= 8;
    - compiled Triton ("gpu", not interpreted): head_dim, rot_dim / 2 and head_dim - rot_dim
      (unless 0) not powers of two, or a tile below 16 (`tl.dot` needs 16);
    - compiled Mosaic ("tpu", not interpreted): block_k or block_k_bwd, after the cap of
      `tile_sizes`, not a multiple of 128 (the lane width) while shorter than the padded
      sequence.
    The interpreter has only the first two limits.

  Raises:
    ValueError: an unknown backend.
  """
  backend, interpret = resolve_backend(backend, interpret)
  if num_heads is not None and num_kv_heads is not None and (
      num_kv_heads < 1 or num_heads % num_kv_heads):
    return (f"num_kv_heads {num_kv_heads} does not divide num_heads {num_heads} (grouped-query "
            f"attention needs whole groups)")
  if spec.num_params > blocks.PARAM_LANES:
    return f"{spec.num_params} bias parameters per head exceed {blocks.PARAM_LANES}"
  if 2 * spec.rot_half > head_dim:
    return f"rot_dim {2 * spec.rot_half} exceeds head_dim {head_dim}"
  for field in BLOCK_FIELDS:
    size = getattr(block_sizes, field)
    if size != 0 and not (isinstance(size, int) and _pow2(size) and size >= 8):
      return f"block sizes must be powers of two >= 8 (or 0 = default); got {field}={size!r}"
  if backend == "gpu" and not interpret:
    half, rest = spec.rot_half, head_dim - 2 * spec.rot_half
    if not _pow2(head_dim) or (half and not _pow2(half)) or (half and rest and not _pow2(rest)):
      return (f"the Triton kernel needs power-of-two head_dim, rot_dim/2 and head_dim - rot_dim; "
              f"got head_dim={head_dim}, rot_dim={2 * half}")
    small = [f"{f}={getattr(block_sizes, f)}" for f in BLOCK_FIELDS
             if 0 < getattr(block_sizes, f) < 16]  # a tile's cap is >= 16
    if small:
      return f"the Triton kernels need blocks >= 16 (tl.dot); got {', '.join(small)}"
  if backend == "tpu" and not interpret and seq_len is not None:
    sizes, padded = tile_sizes(seq_len, backend, block_sizes)
    for field in ("block_k", "block_k_bwd"):
      size = sizes[BLOCK_FIELDS.index(field)]
      if size < padded and size % 128:
        return (f"the TPU (Mosaic) kernels need {field} a multiple of 128 (lanes) unless it "
                f"covers the whole padded sequence; got {size} for length {padded}")
  return None


def _static(spec: KernelSpec, head_dim: int, length: int, backend: str, interpret: bool,
            block_sizes: BlockSizes) -> blocks.Static:
  """The kernels' static parameters; the sizes were checked by `unsupported_reason`."""
  sizes, padded = tile_sizes(length, backend, block_sizes)
  return blocks.Static(
      head_dim=head_dim, rot_half=spec.rot_half, position_scale=float(spec.position_scale),
      q_scale=float(spec.qk_scale) * head_dim ** -0.5, k_scale=float(spec.qk_scale),
      bias=spec.bias,
      t5_starts=(blocks.t5_bucket_starts(spec.num_buckets, spec.max_distance)
                 if spec.bias == "t5" else ()),
      alibi_interpolation_len=int(spec.alibi_interpolation_len),
      block_q=sizes[0], block_k=sizes[1], block_q_bwd=sizes[2], block_k_bwd=sizes[3],
      seq_len=padded, interpret=interpret)


def check_qkv(q: jax.Array, k: jax.Array, v: jax.Array) -> int:
  """Checks q, k, v for `flash_attention` and returns the group size heads // num_kv_heads.

  Args:
    q: [batch, seq, heads, head_dim]; k, v: [batch, seq, num_kv_heads, head_dim], num_kv_heads
      a divisor of heads; one float dtype.

  Raises:
    ValueError: arrays not 4-D, k and v of different shapes, k of another batch, length or
      head_dim than q, num_kv_heads not dividing heads, or different dtypes.
  """
  if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or not (q.dtype == k.dtype == v.dtype):
    raise ValueError(f"q [batch, seq, heads, head_dim] and k, v [batch, seq, kv_heads, "
                     f"head_dim] of one shape and dtype; got {q.shape} {q.dtype}, {k.shape} "
                     f"{k.dtype}, {v.shape} {v.dtype}")
  (b, length, h, d), kv_heads = q.shape, k.shape[2]
  if (k.shape[0], k.shape[1], k.shape[3]) != (b, length, d) or not kv_heads or h % kv_heads:
    raise ValueError(f"k, v must be [batch, seq, kv_heads, head_dim] with kv_heads dividing the "
                     f"{h} query heads and q's batch, seq and head_dim; got q {q.shape}, k, v "
                     f"{k.shape}")
  return h // kv_heads


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, q_positions: jax.Array,
                    k_positions: jax.Array, q_segment_ids: jax.Array, k_segment_ids: jax.Array,
                    spec: KernelSpec = KernelSpec(), *, backend: str | None = None,
                    interpret: bool | None = None,
                    block_sizes: BlockSizes = BlockSizes()) -> jax.Array:
  """Causal self-attention over packed documents with in-kernel RoPE and positional bias.

  Computes `reference_attention(q, k, v, ...)` (models/kernels/reference.py) with memory linear
  in the sequence length; differentiable w.r.t. q, k, v and `spec.bias_params`. Grouped-query
  attention when k and v have fewer heads than q (see the module docstring): query head h uses
  KV head h // (heads // kv_heads).

  Args:
    q: [batch, seq, heads, head_dim], float32 or bfloat16.
    k, v: [batch, seq, kv_heads, head_dim] in q's dtype, kv_heads a divisor of heads (= heads:
      multi-head attention; 1: multi-query attention).
    q_positions, k_positions: int32 [batch, seq] position ids (RoPE angles and bias distances).
    q_segment_ids, k_segment_ids: int32 [batch, seq] document ids; query i sees key j iff
      j <= i and the ids match.
    spec: the positional part (models/kernels/spec.py).
    backend: "gpu" | "tpu" | None (from the trace's platform, see `resolve_backend`).
    interpret: run the Pallas interpreter; None = unless on the backend's own platform.
    block_sizes: tiles in tokens (powers of two >= 8, >= 16 for compiled Triton, key tiles a
      multiple of 128 for compiled Mosaic unless they cover the sequence; 0 = the backend's
      default); a tile, requested or default, is capped at max(16, the sequence length rounded
      up to a power of two) (`tile_sizes`).

  Returns:
    [batch, seq, heads, head_dim] in q's dtype. The gradients w.r.t. k and v are
    [batch, seq, kv_heads, head_dim], each the sum over its group of query heads.

  Raises:
    ValueError: shapes or dtypes `check_qkv` refuses (kv_heads not dividing heads among them),
      an inconsistent spec (bias_params not [heads, P], see `KernelSpec.check`), a spec the
      backend cannot compute (see `unsupported_reason`), or bad block sizes.
  """
  check_qkv(q, k, v)
  b, length, h, d = q.shape
  spec.check(h)
  backend, interpret = resolve_backend(backend, interpret)
  reason = unsupported_reason(spec, d, backend, interpret, seq_len=length,
                              block_sizes=block_sizes)
  if reason:
    raise ValueError(reason)
  st = _static(spec, d, length, backend, interpret, block_sizes)
  pad = st.seq_len - length

  def heads_major(x):  # [b, L, heads, d] -> [b, heads, Lp, d]
    return jnp.pad(x.transpose(0, 2, 1, 3), ((0, 0), (0, 0), (0, pad), (0, 0)))

  def ids(x):
    return jnp.pad(x.astype(jnp.int32), ((0, 0), (0, pad)))

  inv = None
  if spec.inv_freq is not None:
    inv = jnp.broadcast_to(jnp.asarray(spec.inv_freq, jnp.float32), (b, spec.rot_half))
    inv = jax.lax.stop_gradient(inv)
  prm = None
  if spec.bias != "none":
    prm = jnp.pad(spec.bias_params.astype(jnp.float32),
                  ((0, 0), (0, blocks.PARAM_LANES - spec.num_params)))
  out = _flash(st, backend, heads_major(q), heads_major(k), heads_major(v), prm, inv,
               ids(q_positions), ids(q_segment_ids), ids(k_positions), ids(k_segment_ids))
  return out[:, :, :length].transpose(0, 2, 1, 3)


def _kernels(backend: str):
  return gpu if backend == "gpu" else tpu


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _flash(st, backend, q, k, v, prm, inv, q_pos, q_seg, k_pos, k_seg):
  """Kernel call on padded heads-major arrays: q [B, H, Lp, D], k, v [B, KVH, Lp, D] (see
  `flash_attention`)."""
  out, _ = _kernels(backend).forward(st, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm)
  return out


def _flash_fwd(st, backend, q, k, v, prm, inv, q_pos, q_seg, k_pos, k_seg):
  out, lse = _kernels(backend).forward(st, q, k, v, q_pos, q_seg, k_pos, k_seg, inv, prm)
  return out, (q, k, v, prm, inv, q_pos, q_seg, k_pos, k_seg, out, lse)


def _flash_bwd(st, backend, residuals, do):
  q, k, v, prm, inv, q_pos, q_seg, k_pos, k_seg, out, lse = residuals
  # delta_i = sum_d dO_id O_id = sum_j P_ij dP_ij (FlashAttention-2, arXiv 2307.08691, Alg. 2).
  delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
  dq, dk, dv, dprm = _kernels(backend).backward(st, q, k, v, q_pos, q_seg, k_pos, k_seg, inv,
                                                prm, do.astype(q.dtype), lse, delta)
  if k.shape[1] != q.shape[1]:  # GQA: float32 partials per query head, summed per group
    b, kv_heads, length, d = k.shape
    group_sum = lambda x: jnp.sum(x.reshape(b, kv_heads, -1, length, d), axis=2)
    dk, dv = group_sum(dk).astype(k.dtype), group_sum(dv).astype(v.dtype)
  if prm is not None:
    dprm = jnp.sum(dprm, axis=(0, 2)).astype(prm.dtype)
  dinv = None if inv is None else jnp.zeros_like(inv)
  return dq, dk, dv, dprm, dinv, None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def causal_attention_flops(batch: int, seq: int, heads: int, head_dim: int,
                           backward: bool = False) -> float:
  """Matmul FLOPs of causal attention, the masked half not counted (the usual convention).

  Forward: 2 matmuls (q k^T and p v) of 2 * seq^2 * head_dim FLOPs per head, halved for
  causality: 2 * batch * heads * seq^2 * head_dim. Backward: 2.5x the forward (5 matmuls:
  dv, dp, dq, dk and the recomputed q k^T), as FlashAttention-2 counts it (arXiv 2307.08691,
  Sec. 4.1). RoPE, bias and softmax are not counted. `heads` are the query heads: grouped-query
  attention does the same matmuls (only K/V are shared).
  """
  forward = 2.0 * batch * heads * seq * seq * head_dim
  return forward * (3.5 if backward else 1.0)


__all__ = ["BACKENDS", "BLOCK_FIELDS", "BlockSizes", "causal_attention_flops", "check_qkv",
           "flash_attention", "resolve_backend", "tile_sizes", "unsupported_reason"]
