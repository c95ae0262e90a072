"""The per-token context a scheme reads from the attention layer's input (FoX's forget gates).

A scheme with `context_width` C > 0 (models/positions/base.py) maps each attention layer's input
to C numbers per token (`token_context`), which travel like the keys: cached per slot in cached
decoding (`KVCache.context`), gathered over the sequence under context parallelism. Over every
key slot, in sequence order, `sequence_context` turns them into what `bias` reads (FoX: the
cumulative sum of log gates); the queries read theirs at their own slots (`query_context`).
"""

from __future__ import annotations

import jax

from models import context_parallel
from models.positions import PositionalScheme


def key_context(scheme: PositionalScheme, x: jax.Array, layer: int, k_segment_ids: jax.Array,
                cache):
  """The sequence context of every key slot, and the cache with this call's tokens' context.

  Args:
    scheme: the model's positional scheme; x: [batch, seq, d_model] the layer's attention input;
    layer: static layer index; k_segment_ids: int32 [batch, k_len] of every key slot (the cache's
    with a cache, gathered under context parallelism).
    cache: the layer's KVCache (models/attention.py) or None.

  Returns:
    (float32 [batch, k_len, C] or None when the scheme reads no context, the cache (None if
    None) with `context` holding the new tokens' token context at slots index .. index + seq).
  """
  if not scheme.context_width:
    return None, cache
  context = scheme.token_context(x, layer)
  if cache is not None:
    context = jax.lax.dynamic_update_slice(cache.context, context.astype(cache.context.dtype),
                                           (0, cache.index, 0))
    cache = cache.replace(context=context)
  elif context_parallel.context_size() > 1:
    context = context_parallel.gather_sequence(context)
  return scheme.sequence_context(context, k_segment_ids), cache


def query_context(k_context: jax.Array, slot, length: int) -> jax.Array:
  """The context of `length` queries whose first sits at key slot `slot` (may be traced):
  float32 [batch, length, C], a slice of k_context [batch, k_len, C]."""
  return jax.lax.dynamic_slice_in_dim(k_context, slot, length, axis=1)
