"""`partitioned_flash_attention`: the fused kernel on any device mesh, per device in `shard_map`.

A compiled Pallas kernel is a custom call that XLA's SPMD partitioner cannot split, so on a
mesh of more than one device the kernel (models/kernels/flash.py `flash_attention`, a
`pallas_call` in a `jax.custom_vjp`) runs inside `jax.shard_map`: each device attends over its
own rows of the batch and its own heads. Attention is independent per (row, head), so no
communication is needed in the forward pass; in the backward pass the shard_map transpose sums
the bias-parameter gradients over the devices that hold other rows of the batch.

Layout (`KernelPartition`):
  q, k, v, output      [batch, seq, heads, head_dim]  P(batch axes, None, head axis, None)
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
    head_axis: mesh axis that splits the heads (None = replicated).
    replicated: one line per dimension a mesh axis could not split ("" if none).
  """

  batch_axes: tuple[str, ...]
  head_axis: str | None
  replicated: str = ""


def kernel_partition(mesh_shape, batch: int, heads: int, *, batch_axes=BATCH,
                     head_axis: str | None = HEAD_AXIS) -> KernelPartition:
  """Chooses the mesh axes that split the batch and the heads.

  The batch takes all of `batch_axes` (those of the mesh with size > 1) if their product
  divides it, else the first single one that does, else none; the heads take `head_axis` if its
  size divides them. Axes of size 1 and axes absent from the mesh are left out.

  Args:
    mesh_shape: {axis name: size} of the mesh (`mesh.shape`).
    batch: batch rows; heads: attention heads.
    batch_axes, head_axis: the candidate mesh axes.

  Returns:
    A `KernelPartition`.
  """
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
  return KernelPartition(chosen, split_heads, "; ".join(notes))


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
    q, k, v: [batch, seq, heads, head_dim], one float dtype (float32 or bfloat16).
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
    `spec.bias_params`.

  Raises:
    ValueError: as `flash.flash_attention` (shapes, spec, a spec the backend cannot compute).
  """
  mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
  kernel = functools.partial(flash.flash_attention, backend=backend, interpret=interpret,
                             block_sizes=block_sizes)
  if mesh.empty or mesh.size == 1:
    return kernel(q, k, v, q_positions, k_positions, q_segment_ids, k_segment_ids, spec)
  b, _, h, _ = q.shape
  part = kernel_partition(mesh.shape, b, h)
  if part.replicated and part.replicated not in _REPLICATIONS_LOGGED:
    _REPLICATIONS_LOGGED.add(part.replicated)
    logging.info("fused attention kernel on mesh %s: %s", dict(mesh.shape), part.replicated)
  rows = part.batch_axes or None
  x_spec, id_spec = P(rows, None, part.head_axis, None), P(rows, None)
  inv = spec.inv_freq
  if inv is not None and inv.ndim == 2:  # per-row frequencies travel with their rows
    inv = jax.numpy.broadcast_to(inv, (b, inv.shape[-1]))
  inv_spec = None if inv is None else (P(None) if inv.ndim == 1 else id_spec)
  prm = spec.bias_params
  prm_spec = None if prm is None else P(part.head_axis, None)

  def local(q, k, v, q_pos, k_pos, q_seg, k_seg, inv, prm):
    return kernel(q, k, v, q_pos, k_pos, q_seg, k_seg,
                  dataclasses.replace(spec, inv_freq=inv, bias_params=prm))

  return jax.shard_map(
      local, mesh=mesh,
      in_specs=(x_spec, x_spec, x_spec, id_spec, id_spec, id_spec, id_spec, inv_spec, prm_spec),
      out_specs=x_spec, check_vma=False)(
          q, k, v, q_positions, k_positions, q_segment_ids, k_segment_ids, inv, prm)


__all__ = ["HEAD_AXIS", "KernelPartition", "kernel_partition", "partitioned_flash_attention"]
