"""Sequence (context) parallelism: the tokens of every sequence split over the mesh's "context"
axis, keys and values all-gathered per layer, the causal work balanced by a zigzag layout.

`over_sequence(fn, mesh)` runs a per-token function of a batch (the forward pass and its NLL)
with each sequence cut into 2c chunks of n tokens (c = mesh.context): device i holds chunks i
and 2c-1-i ("zigzag", as in the load-balanced ring attention of Brandon et al., arXiv
2311.09431, and Llama 3's context parallelism, arXiv 2407.21783 Sec. 3.3.2). Inside, every
attention layer gathers the keys and values of all devices (`gather_sequence`: one all-gather
along "context", then the chunks put back in sequence order), and its queries attend to them in
two segments (`query_segments`): chunk i needs keys [0, (i+1) n), at most the first half of the
sequence, and chunk 2c-1-i keys [0, (2c-i) n). Computing the first segment against the first
half only is a static shape, so every device does 3/4 of the dense work and all do the same;
with a contiguous split the device holding the end would need all keys and the one holding the
start almost none.

Every scheme sees **global** positions: positions and document (segment) ids are data and
travel with their tokens; the keys' are gathered with the keys, so RoPE rotations, ALiBi/KERPLE/
T5/FIRE biases, CoPE's counts over keys (in sequence order), dynamic NTK's length (1 + the
largest position) and the position transforms are computed as on one device. Causality and
sliding windows use the tokens' global indices.

Choice of all-gather over ring attention (key/value blocks passed with `ppermute`, online
softmax): the gathered keys and values of one layer are [batch, seq, heads, head_dim] per
device, small next to the O(seq/c x chunk) logits that the query chunks bound, and an
all-gather is one collective XLA schedules well on every backend, whereas a ring needs a
custom online-softmax loop (and its backward) outside the fused kernel. Per-device memory vs
length is measured in bench/context_memory.py.

With mesh.context = 1 (the default) `over_sequence` returns `fn` itself: programs are
unchanged.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from models.sharding import BATCH

AXIS = "context"
PAD_SEGMENT = -1  # segment id of padding tokens: no real token (ids >= 0) attends to them


def zigzag_order(num_devices: int) -> np.ndarray:
  """Chunk order of the zigzag layout: [0, 2c-1, 1, 2c-2, ...] for c devices (2c chunks).

  Device i holds positions 2i and 2i+1 of this order, i.e. chunks i and 2c-1-i.
  """
  c = num_devices
  return np.stack([np.arange(c), 2 * c - 1 - np.arange(c)], axis=1).reshape(-1)


def _reorder_chunks(x: jax.Array, order: np.ndarray, axis: int = 1) -> jax.Array:
  """x with its `axis` cut into len(order) equal chunks, taken in `order` (a tiny constant)."""
  shape = x.shape
  k = len(order)
  chunked = x.reshape(*shape[:axis], k, shape[axis] // k, *shape[axis + 1:])
  return jnp.take(chunked, jnp.asarray(order, jnp.int32), axis=axis).reshape(shape)


def context_size() -> int:
  """Devices the sequence is split over at this point of the trace: mesh.context inside
  `over_sequence` (a shard_map manual over "context"), else 1."""
  mesh = jax.sharding.get_abstract_mesh()
  if AXIS in getattr(mesh, "manual_axes", ()) and AXIS in mesh.axis_names:
    return int(mesh.shape[AXIS])
  return 1


def gather_sequence(x: jax.Array) -> jax.Array:
  """This device's tokens -> the whole sequence, in sequence order (inside `over_sequence`).

  Args:
    x: [batch, 2n, ...], this device's two zigzag chunks.

  Returns:
    [batch, 2cn, ...] every device's tokens, chunk j at tokens [j n, (j+1) n).
  """
  gathered = jax.lax.all_gather(x, AXIS, axis=1, tiled=True)  # chunks in zigzag order
  return _reorder_chunks(gathered, np.argsort(zigzag_order(context_size())))


def sequence_max(x: jax.Array) -> jax.Array:
  """The maximum of `x` over the devices the sequence is split over (inside `over_sequence`;
  elsewhere `x`): a per-row statistic of the queries, e.g. dynamic NTK's length 1 + the largest
  query position, is then that of the whole sequence, not of this device's tokens."""
  return jax.lax.pmax(x, AXIS) if context_size() > 1 else x


def query_segments(local_len: int) -> list[tuple[int, int, jax.Array, int]]:
  """How this device's queries attend to the gathered keys (inside `over_sequence`).

  Args:
    local_len: this device's tokens, 2n.

  Returns:
    [(local start, rows, global index of the first row (traced int32), keys needed)] for its
    two chunks: chunk i (rows [0, n)) against keys [0, c n), chunk 2c-1-i (rows [n, 2n))
    against all 2c n keys.
  """
  c, n = context_size(), local_len // 2
  i = jax.lax.axis_index(AXIS)
  return [(0, n, i * n, c * n), (n, n, (2 * c - 1 - i) * n, 2 * c * n)]


def over_sequence(fn: Callable, mesh=None) -> Callable:
  """`fn(params, batch) -> [batch, seq] per-token values`, computed context-parallel.

  With a "context" mesh axis of size c > 1: every [batch, seq] array of `batch` is padded at
  the end to a multiple of 2c tokens (inputs/targets/positions 0, segment ids `PAD_SEGMENT`,
  weights 0: padding lies after every real token, in a document of its own, so no real token
  sees it), laid out zigzag, and split over "context" inside a `jax.shard_map` manual over
  "context" and the batch axes ("data", "fsdp"; the batch split as everywhere else), with
  "tensor" left to XLA. Parameters enter replicated over the manual axes, so their gradients
  are summed over them by shard_map's transpose; parameters sharded over "fsdp" are therefore
  all-gathered whole at the boundary (FSDP's per-layer gathering does not apply inside). Manual
  over "context" alone would keep it, but XLA 0.10's SPMD partitioner aborts on that program
  when fsdp, context and tensor are all > 1 (a failed check in spmd_partitioner_util.cc).
  The output is put back in sequence order and the padding cut off.

  Args:
    fn: (params, batch dict of [batch, seq] arrays) -> [batch, seq] array; it must act on the
      tokens it is given plus what the attention layers gather (`gather_sequence`).
    mesh: the device mesh (`models.sharding.make_mesh`) or its abstract mesh; default the
      trace's (`jax.sharding.get_abstract_mesh()`, set by `models.sharding.trace_under_mesh`).

  Returns:
    A function with fn's signature and outputs (equal to fn's up to float summation order).
  """
  mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
  c = dict(mesh.shape).get(AXIS, 1)
  if c == 1:
    return fn
  order, inverse = zigzag_order(c), np.argsort(zigzag_order(c))
  batch_axes = tuple(a for a in BATCH if a in mesh.axis_names)
  sharded = jax.shard_map(fn, mesh=mesh, in_specs=(P(), P(batch_axes, AXIS)),
                          out_specs=P(batch_axes, AXIS), axis_names={AXIS, *batch_axes})

  def run(params, batch):
    seq = next(iter(batch.values())).shape[1]
    pad = -seq % (2 * c)

    def layout(name, x):
      if pad:
        value = PAD_SEGMENT if name == "segment_ids" else 0
        x = jnp.pad(x, ((0, 0), (0, pad)), constant_values=value)
      return _reorder_chunks(x, order)

    out = sharded(params, {k: layout(k, v) for k, v in batch.items()})
    return _reorder_chunks(out, inverse)[:, :seq]

  return run
