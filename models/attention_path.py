"""Which attention path a layer's call takes: the fused flash kernel, or the XLA path.

`model.attention_impl="pallas"` asks the scheme for a `kernel_spec` and runs the fused flash
kernel (models/kernels/flash.py); where the scheme or the layer's options rule the kernel out,
the call falls back to the XLA path (models/attention.py) after logging the reason once.
"""

from __future__ import annotations

import jax
from absl import logging

from models import context_parallel
from models.kernels import flash
from models.kernels.spec import KernelSpec
from models.positions import PositionalScheme

_FALLBACKS_LOGGED: set[str] = set()  # reasons already logged by `kernel_spec`


def kernel_spec(attn, scheme: PositionalScheme, positions: jax.Array, cache,
                head_dim: int) -> KernelSpec | None:
  """The kernel's spec for this call of the layer `attn` (a models.attention.Attention), or None
  for the XLA path.

  None when attention_impl is "xla"; otherwise, when the kernel cannot compute this call, None
  after logging the reason once per process (absl warning): a KV cache (queries and keys of
  different lengths), a sliding window, log-n scaling, the attention temperature (a per-query
  scale the kernel has no field for), an eval-time position transform, a scheme without a kernel
  form or with options it cannot take, e.g. LongRoPE's keep_first (its `kernel_spec` returns a
  reason), context parallelism (a "context" axis of size > 1 in the trace's mesh,
  `jax.sharding.get_abstract_mesh()`: the kernel does not split the sequence), or a spec or
  tile sizes (model.kernel_block_*) the backend's kernel cannot take at this sequence length
  (`flash.unsupported_reason`, e.g. Mosaic's key tiles of 128 lanes).
  """
  if attn.impl != "pallas":
    return None
  context = dict(jax.sharding.get_abstract_mesh().shape).get(context_parallel.AXIS, 1)
  if cache is not None:
    reason = "KV-cache decoding"
  elif context > 1:
    reason = (f"context parallelism (mesh axis 'context' of size {context}; the kernel does "
              f"not split the sequence)")
  elif attn.window:
    reason = f"sliding-window layer (window {attn.window})"
  elif attn.logn_train_len:
    reason = "model.logn_scaling"
  elif attn.temperature.form:
    reason = (f"the attention temperature (model.position.attention_temperature, form "
              f"{attn.temperature.form!r}: a per-query scale)")
  elif attn.transform.kind != "none":
    reason = f"position transform {attn.transform.kind!r}"
  else:
    spec = scheme.kernel_spec(attn.layer, positions, positions)
    kv_heads = attn.num_heads if scheme.per_head_rotation else attn.wk.shape[1]
    reason = spec if isinstance(spec, str) else flash.unsupported_reason(
        spec, head_dim, seq_len=positions.shape[-1], block_sizes=attn.kernel_blocks,
        num_heads=attn.num_heads, num_kv_heads=kv_heads)
    if reason is None:
      return spec
  if reason not in _FALLBACKS_LOGGED:
    _FALLBACKS_LOGGED.add(reason)
    logging.warning("model.attention_impl='pallas': using the 'xla' attention path for %s",
                    reason)
  return None
