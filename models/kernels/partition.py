"""`partitioned_flash_attention`: the fused kernel on any device mesh, per device in `shard_map`.

A compiled Pallas kernel is a custom call that XLA's SPMD partitioner cannot split, so on a
mesh of more than one device the kernel (models/kernels/flash.py `flash_attention`, a
`pallas_call` in a `jax.custom_vjp`) runs inside `jax.shard_map`: each device attends over its
own rows of the batch and its own heads. Attention is independent per (row, head), so no
communication is needed in the forward pass; in the backward pass the shard_map transpose sums
the bias-parameter gradients over the devices that hold other rows of the batch.

Layout (`KernelPartition`):
  q, output            [batch, seq, heads, head_dim]  P(batch axes, None, head axis, None)
  k, v                 [batch, seq, kv_heads, head_dim]
                                                       the same, or P(batch axes, None, None,
                                                       None) if the head axis does not divide
                                                       kv_heads (grouped-query, below)
  positions, segments  int32 [batch, seq]              P(batch axes, None)
  inv_freq             [rot_dim / 2] replicated; [batch, rot_dim / 2] P(batch axes, None)
  bias_params          float32 [heads, P]              P(head axis, None) (ALiBi slopes, KERPLE
                                                       r1/r2, the T5 table: per head)
The batch axes are `models.sharding.BATCH` ("data", "fsdp"), the head axis that of the "heads"
logical axis ("tensor"). The sequence is never split. A mesh axis this module does not name
(e.g. "context") is replicated: every device along it computes the same values. A dimension a
mesh axis does not divide (heads=4 on tensor=8, a batch of 1) is replicated over that axis:
correct, but the devices along it repeat the work; the first time per shape this is logged
(absl info), with the axes replicated.

Grouped-query attention (k, v with kv_heads dividing heads, query head h on KV head h // group):
when the head axis (size t) divides kv_heads, the KV heads are split with the query heads and a
device's heads keep their grouping (its query head i uses its KV head i // group). When t divides
heads but not kv_heads, K and V are replicated over the head axis; if each device's heads / t
query heads share one KV head (group a multiple of heads / t, i.e. kv_heads divides t: MQA, or 2
KV heads on tensor=8), the device slices that KV head, index axis_index // (t / kv_heads), and
runs the kernel with it (the shard_map transpose sums the K/V gradients over the head axis);
otherwise (e.g. 3 KV heads of 24 query heads on tensor=8) a device's query heads would span KV
heads and the heads are replicated over the head axis (the fallback above). Either replication
is logged once (absl info), like the others.

Where the mesh comes from: `jax.sharding.get_abstract_mesh()`, the abstract mesh of the trace
(set by the jitted callers with `models.sharding.trace_under_mesh`). With no mesh, or a mesh of
one device, the kernel is called directly: the same program as without this module.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
from absl import logging
from jax.sharding import PartitionSpec as P

from models.kernels import flash
from models.kernels.spec import KernelSpec
from models.sharding import BATCH, LOGICAL_RULES

HEAD_AXIS = LOGICAL_RULES["heads"]  # "tensor"


@dataclasses.dataclass(frozen=True)
class KernelPartition:
  """How the kernel's inputs are split over a mesh.

  Attributes:
    batch_axes: mesh axes that split the batch (() = replicated).
    head_axis: mesh axis that splits the query heads (None = replicated), and the KV heads
      unless `kv_replicated`.
    replicated: one line per dimension a mesh axis could not split ("" if none).
    kv_replicated: K and V are replicated over `head_axis` (it does not divide kv_heads) and each
      device takes the one KV head its query heads share.
  """

  batch_axes: tuple[str, ...]
  head_axis: str | None
  replicated: str = ""
  kv_replicated: bool = False


def kernel_partition(mesh_shape, batch: int, heads: int, *, kv_heads: int | None = None,
                     batch_axes=BATCH, head_axis: str | None = HEAD_AXIS) -> KernelPartition:
  """Chooses the mesh axes that split the batch and the heads.

  The batch takes all of `batch_axes` (those of the mesh with size > 1) if their product
  divides it, else the first single one that does, else none; the heads take `head_axis` if its
  size t divides them. With grouped-query attention (kv_heads < heads) the KV heads are split
  too if t divides kv_heads; else they are replicated (`kv_replicated`) if each device's heads / t
  query heads share one KV head (kv_heads divides t), else the query heads are replicated as
  well (head_axis None). Axes of size 1 and axes absent from the mesh are left out.

  Args:
    mesh_shape: {axis name: size} of the mesh (`mesh.shape`).
    batch: batch rows; heads: query heads; kv_heads: key/value heads, a divisor of heads
      (None = heads).
    batch_axes, head_axis: the candidate mesh axes.

  Returns:
    A `KernelPartition`.

  Raises:
    ValueError: kv_heads not a positive divisor of heads.
  """
  kv_heads = heads if kv_heads is None else kv_heads
  if kv_heads < 1 or heads % kv_heads:
    raise ValueError(f"kv_heads {kv_heads} must divide heads {heads}")
  shape = dict(mesh_shape)
  present = tuple(a for a in batch_axes if shape.get(a, 1) > 1)
  candidates = [present] + ([(a,) for a in present] if len(present) > 1 else [])
  chosen = next((axes for axes in candidates
                 if batch % math.prod(shape[a] for a in axes) == 0), ())
  notes = []
  if chosen != present:
    left = [a for a in present if a not in chosen]
    notes.append(f"batch {batch} is not divisible by mesh axes "
                 f"{', '.join(f'{a}={shape[a]}' for a in left)}: replicated over them")
  split_heads = head_axis if shape.get(head_axis, 1) > 1 else None
  if split_heads and heads % shape[head_axis]:
    notes.append(f"heads {heads} are not divisible by mesh axis {head_axis}="
                 f"{shape[head_axis]}: replicated over it")
    split_heads = None
  kv_replicated = False
  if split_heads and kv_heads % shape[head_axis]:
    size = shape[head_axis]
    if size % kv_heads == 0:  # each device's heads / size query heads share one KV head
      kv_replicated = True
      notes.append(f"kv_heads {kv_heads} are not divisible by mesh axis {head_axis}={size}: "
                   f"K and V replicated over it (each device uses its query heads' KV head)")
    else:
      notes.append(f"kv_heads {kv_heads} are not divisible by mesh axis {head_axis}={size} and "
                   f"a device's {heads // size} query heads would span KV heads: heads "
                   f"replicated over it")
      split_heads = None
  return KernelPartition(chosen, split_heads, "; ".join(notes), kv_replicated)


_REPLICATIONS_LOGGED: set[str] = set()  # KernelPartition.replicated lines already logged


def partitioned_flash_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                                q_positions: jax.Array, k_positions: jax.Array,
                                q_segment_ids: jax.Array, k_segment_ids: jax.Array,
                                spec: KernelSpec = KernelSpec(), *, mesh=None,
                                backend: str | None = None, interpret: bool | None = None,
                                block_sizes: flash.BlockSizes = flash.BlockSizes()
                                ) -> jax.Array:
  """`flash.flash_attention` on the mesh of the trace, per device in `jax.shard_map`.

  Args:
    q: [batch, seq, heads, head_dim], float32 or bfloat16.
    k, v: [batch, seq, kv_heads, head_dim] in q's dtype, kv_heads a divisor of heads (grouped-
      query attention; see the module docstring for how they are split).
    q_positions, k_positions: int32 [batch, seq] position ids.
    q_segment_ids, k_segment_ids: int32 [batch, seq] document ids.
    spec: the positional part (models/kernels/spec.py); `spec.bias_params` [heads, P] is split
      over the head axis with the heads, a per-row `spec.inv_freq` [batch or 1, rot_dim / 2]
      over the batch axes with the rows.
    mesh: a `Mesh` or `AbstractMesh`; None = `jax.sharding.get_abstract_mesh()`. Empty or of
      one device: `flash.flash_attention` is called directly.
    backend, interpret, block_sizes: as in `flash.flash_attention`.

  Returns:
    [batch, seq, heads, head_dim] in q's dtype, equal to `flash.flash_attention`'s (up to the
    order of the sums of the bias-parameter gradients). Differentiable w.r.t. q, k, v and
    `spec.bias_params`; the k, v gradients [batch, seq, kv_heads, head_dim].

  Raises:
    ValueError: as `flash.flash_attention` (shapes, kv_heads not dividing heads, spec, a spec
      the backend cannot compute).
  """
  mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
  kernel = functools.partial(flash.flash_attention, backend=backend, interpret=interpret,
                             block_sizes=block_sizes)
  if mesh.empty or mesh.size == 1:
    return kernel(q, k, v, q_positions, k_positions, q_segment_ids, k_segment_ids, spec)
  flash.check_qkv(q, k, v)
  b, _, h, _ = q.shape
  kv_heads = k.shape[2]
  part = kernel_partition(mesh.shape, b, h, kv_heads=kv_heads)
  if part.replicated and part.replicated not in _REPLICATIONS_LOGGED:
    _REPLICATIONS_LOGGED.add(part.replicated)
    logging.info("fused attention kernel on mesh %s: %s", dict(mesh.shape), part.replicated)
  rows = part.batch_axes or None
  x_spec, id_spec = P(rows, None, part.head_axis, None), P(rows, None)
  kv_spec = P(rows, None, None, None) if part.kv_replicated else x_spec
  inv = spec.inv_freq
  if inv is not None and inv.ndim == 2:  # per-row frequencies travel with their rows
    inv = jax.numpy.broadcast_to(inv, (b, inv.shape[-1]))
  inv_spec = None if inv is None else (P(None) if inv.ndim == 1 else id_spec)
  prm = spec.bias_params
  prm_spec = None if prm is None else P(part.head_axis, None)

  def local(q, k, v, q_pos, k_pos, q_seg, k_seg, inv, prm):
    if part.kv_replicated:  # this device's query heads share KV head axis_index // (t / kv)
      kv = jax.lax.axis_index(part.head_axis) // (mesh.shape[part.head_axis] // kv_heads)
      k, v = (jax.lax.dynamic_slice_in_dim(x, kv, 1, axis=2) for x in (k, v))
    return kernel(q, k, v, q_pos, k_pos, q_seg, k_seg,
                  dataclasses.replace(spec, inv_freq=inv, bias_params=prm))

  return jax.shard_map(
      local, mesh=mesh,
      in_specs=(x_spec, kv_spec, kv_spec, id_spec, id_spec, id_spec, id_spec, inv_spec,
                prm_spec),
      out_specs=x_spec, check_vma=False)(
          q, k, v, q_positions, k_positions, q_segment_ids, k_segment_ids, inv, prm)


__all__ = ["HEAD_AXIS", "KernelPartition", "kernel_partition", "partitioned_flash_attention"]
