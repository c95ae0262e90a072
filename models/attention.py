"""Causal multi-head attention with document (segment) masking and positional-scheme hooks.

The attention module knows nothing of any scheme: it calls `scheme.rotate` on q/k and
`scheme.bias` for an additive logit bias (models/positions/base.py), then softmax attention
(`attention_logits` + `attend`, as `dot_product_attention`).
With `model.attention_impl="pallas"` it instead asks the scheme for a `kernel_spec` and runs the
fused flash kernel (models/kernels/flash.py), falling back to the XLA path, with a logged reason,
where the scheme or the layer's options rule the kernel out (models/attention_path.py).
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models import attention_path, context_parallel, token_context
from models.kernels import flash, partition
from models.norms import RMSNorm
from models.position_transforms import PositionTransform, Temperature, attention_temperature_scale
from models.positions import Dims, PositionalScheme


@flax.struct.dataclass
class KVCache:
  """One layer's key/value cache for incremental decoding (a pytree).

  Keys are stored before the scheme's `rotate`, so every step re-applies the scheme to all keys
  with their positions: the result equals full recomputation for every scheme, at the cost of
  one rotation of the cache per step.

  Attributes:
    k, v: [batch, max_len, kv_heads, head_dim] in the compute dtype (kv_heads = model.num_kv_heads:
      a grouped-query cache holds each shared key/value head once); slots >= index are unused.
    positions: int32 [batch, max_len] position ids of the cached slots (shared by all layers).
    segment_ids: int32 [batch, max_len] document ids of the cached slots.
    index: int32 scalar, the slot of the first token of the current call.
    context: float32 [batch, max_len, C] token contexts (models/token_context.py) or None.
  """

  k: jax.Array
  v: jax.Array
  positions: jax.Array
  segment_ids: jax.Array
  index: jax.Array
  context: jax.Array | None = None


# The segment id of a global key (model.sink_token's sink): every query of any document sees it.
GLOBAL_SEGMENT = -1


def attention_mask(q_len: int, k_len: int, q_segment_ids: jax.Array | None = None,
                   k_segment_ids: jax.Array | None = None, window: int = 0,
                   q_offset: jax.Array | None = None) -> jax.Array:
  """Boolean mask, True where query i may attend to key j.

  Causality is by index: query i sees keys j <= i + offset, where the offset is `q_offset` (the
  slot of the first query in a KV cache of k_len slots) or, by default, k_len - q_len (the
  queries are the last q_len of the k_len positions). With segment ids, only keys of the same
  document or of GLOBAL_SEGMENT (model.sink_token's sink). With `window` > 0 (sliding-window
  attention, Beltagy et al., arXiv 2004.05150), only the `window` most recent keys, the query's
  own included.

  Args:
    q_len, k_len: lengths, tokens.
    q_segment_ids: int32 [batch, q_len] or None; k_segment_ids: int32 [batch, k_len] or None.
    window: keys visible per query, tokens; 0 = unlimited.
    q_offset: int32 scalar (may be traced) or None.

  Returns:
    bool [batch or 1, 1, q_len, k_len].
  """
  # Built from iotas, on device: a numpy mask here would be captured into the compiled program
  # as a constant of q_len x k_len bytes (20 GB at 100,000 tokens).
  offset = k_len - q_len if q_offset is None else q_offset
  query_index = jax.lax.broadcasted_iota(jnp.int32, (q_len, k_len), 0) + offset
  distance = query_index - jax.lax.broadcasted_iota(jnp.int32, (q_len, k_len), 1)
  causal = distance >= 0
  if window > 0:
    causal &= distance < window
  mask = causal[None, None]
  if q_segment_ids is not None:
    same = ((q_segment_ids[:, None, :, None] == k_segment_ids[:, None, None, :])
            | (k_segment_ids == GLOBAL_SEGMENT)[:, None, None, :])
    mask = mask & same
  return mask


# Query chunks per segment up to which evaluation unrolls a loop with exact key ranges (the
# fastest form); more run in lax.map over key blocks (memory flat in the number of chunks).
UNROLLED_CHUNKS = 2
# Query chunks per segment that training unrolls at most: beyond, the chunks widen (a multiple
# of model.attention_chunk) so that the program stays this size (compiling 782 chunks of 128 at
# 100,000 tokens took minutes; 16 chunks still skip 15/32 of the logits).
TRAIN_UNROLLED_CHUNKS = 16


def _concat(parts: list[jax.Array]) -> jax.Array:
  """Concatenates heads-major [batch, heads, len_i, head_dim] parts along the sequence."""
  return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=2)


def _heads(x: jax.Array) -> jax.Array:
  """[batch, seq, heads, head_dim] -> heads-major [batch, heads, seq, head_dim]: the layout of
  the batched matmuls (faster on XLA:CPU than "bqhd,bkhd"); attention transposes q, k and v
  once per layer, not once per query chunk."""
  return x.transpose(0, 2, 1, 3)


def _scores(qh: jax.Array, kh: jax.Array) -> jax.Array:
  """float32 [batch, heads, q_len, k_len] = qh kh^T of heads-major (scaled) queries and keys."""
  return jnp.einsum("bhqd,bhkd->bhqk", qh, kh, preferred_element_type=jnp.float32)


def _softmax_values(logits: jax.Array, mask: jax.Array, vh: jax.Array) -> jax.Array:
  """`attend` on heads-major values vh [batch, heads, k_len, head_dim]: heads-major
  [batch, heads, q_len, head_dim] in vh's dtype."""
  logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  top = jax.lax.stop_gradient(logits.max(axis=-1, keepdims=True))
  weights = jnp.exp(logits - top)  # masked entries: exp(min - top) = 0 exactly
  total = weights.sum(axis=-1)  # [batch, heads, q_len], >= 1
  out = jnp.einsum("bhqk,bhkd->bhqd", weights.astype(vh.dtype), vh,
                   preferred_element_type=jnp.float32)
  return (out / total[..., None]).astype(vh.dtype)


def attention_logits(q: jax.Array, k: jax.Array, scale: float | None = None) -> jax.Array:
  """float32 logits `scale * q k^T` [batch, heads, q_len, k_len].

  Args:
    q: [batch, q_len, heads, head_dim]; k: [batch, k_len, heads, head_dim].
    scale: default 1 / sqrt(head_dim) (Vaswani et al., arXiv 1706.03762, Eq. 1).
  """
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  return _scores(_heads(q) * jnp.asarray(scale, q.dtype), _heads(k))


def attend(logits: jax.Array, mask: jax.Array, v: jax.Array) -> jax.Array:
  """`softmax(logits + mask) v`: masked entries get weight exactly 0, softmax in float32.

  The exponentials are normalised after the product with v, on [.., q_len, head_dim] rather
  than [.., q_len, k_len] (as flash attention does, Dao et al., arXiv 2205.14135, Alg. 1), and
  the row maximum that keeps them finite is a constant to autodiff (softmax does not depend on
  the shift): fewer passes over the logits, forward and backward. Every row must allow at least
  one key (causal attention always allows the diagonal).

  Args:
    logits: float32 [batch, heads, q_len, k_len]; mask: bool [batch or 1, 1, q_len, k_len];
    v: [batch, k_len, heads, head_dim].

  Returns:
    [batch, q_len, heads, head_dim] in v's dtype.
  """
  return _heads(_softmax_values(logits, mask, _heads(v)))


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, *,
                          bias: jax.Array | None = None, q_segment_ids: jax.Array | None = None,
                          k_segment_ids: jax.Array | None = None,
                          mask: jax.Array | None = None, scale: float | None = None) -> jax.Array:
  """Causal softmax attention, the pure-jnp ("xla") reference.

  `softmax(scale * q k^T + bias + mask) v` with the logits, bias and softmax in float32 and
  masked entries set to the float32 minimum (every row keeps its diagonal, so no row is empty).

  Args:
    q: [batch, q_len, heads, head_dim]; k, v: [batch, k_len, heads, head_dim].
    bias: float32 [batch or 1, heads, q_len, k_len] additive logit bias, or None.
    q_segment_ids / k_segment_ids: int32 [batch, len] document ids, or None.
    mask: bool [batch or 1, 1, q_len, k_len] from `attention_mask`; default: causal with the
      segment ids.
    scale: logit scale; default 1 / sqrt(head_dim) (Vaswani et al., arXiv 1706.03762, Eq. 1).

  Returns:
    [batch, q_len, heads, head_dim] in q's dtype.
  """
  logits = attention_logits(q, k, scale)
  if bias is not None:
    logits = logits + bias
  if mask is None:
    mask = attention_mask(q.shape[1], k.shape[1], q_segment_ids, k_segment_ids)
  return attend(logits, mask, v).astype(q.dtype)


def logn_scale(positions: jax.Array, train_len: int) -> jax.Array:
  """Log-n attention temperature: log(n) / log(train_len) with n = position + 1 keys in view.

  Multiplying the logits by log n keeps attention from flattening as n grows beyond what was
  trained (Chiang & Cholak, arXiv 2202.12172, Sec. 5.3; normalised here to 1 at n = train_len).

  Args:
    positions: int32 [batch, seq] position ids; train_len: tokens (> 1).

  Returns:
    float32 [batch, seq] factors (0 at position 0, 1 at position train_len - 1).
  """
  return jnp.log(positions.astype(jnp.float32) + 1.0) / np.log(train_len)


# model.qk_norm: where queries and keys are RMS-normalised (before any positional hook).
QK_NORMS = ("none", "head", "full")


def repeat_kv(x: jax.Array, heads: int) -> jax.Array:
  """[batch, len, kv_heads, head_dim] -> [batch, len, heads, head_dim]: each KV head repeated for
  its group of heads // kv_heads consecutive query heads (query head h reads KV head
  h // group; the convention of Llama's `repeat_kv`). The input itself when kv_heads == heads."""
  group = heads // x.shape[2]
  return x if group == 1 else jnp.repeat(x, group, axis=2)


class Attention(nnx.Module):
  """Causal self-attention (one layer): multi-head, grouped-query or multi-query.

  Parameters: wq [d_model, heads, head_dim] ("embed", "heads", "head_dim"), wk and wv
  [d_model, kv_heads, head_dim] ("embed", "kv_heads", "head_dim"; kv_heads = model.num_kv_heads,
  grouped-query attention, Ainslie et al., arXiv 2305.13245), wo [heads, head_dim, d_model]; init
  normal(init_std), wo scaled by 1/sqrt(2 * num_layers) (GPT-2, Radford et al. 2019). With
  `qkv_bias` (Qwen2): bq [heads, head_dim], bk and bv [kv_heads, head_dim], zeros. With
  `qk_norm`: q_norm and k_norm, RMSNorms with a learned scale, over each head's head_dim
  ("head": scale [head_dim], shared by the heads; Qwen3, Gemma 3) or over the whole projection
  ("full": scale [heads x head_dim] / [kv_heads x head_dim]; OLMo 2, arXiv 2501.00656).

  Order of operations, and where each positional hook sits: projections (+ biases) -> QK-norm ->
  `scheme.rotate` (on the normalised q and k) -> log-n / temperature scaling of the queries ->
  logits + `scheme.bias` (contextual biases see the normalised, rotated q and k, each query
  head with its group's key) -> softmax -> values. `scheme.embed` acts before the block, on the
  token embeddings.
  """

  def __init__(self, dims: Dims, layer: int, *, dtype, rngs: nnx.Rngs, chunk: int = 0,
               window: int = 0, logn_scaling: bool = False,
               transform: PositionTransform = PositionTransform(),
               temperature: Temperature | str = Temperature(),
               qk_norm: str = "none", qkv_bias: bool = False, norm_eps: float = 1e-6):
    """Args:
      dims: model sizes (num_heads, kv_heads, head_dim, ...); layer: this block's index (passed
        to the scheme's hooks).
      chunk: query chunk length in tokens for long sequences (0 = never chunk).
      window: sliding-window size in tokens for this layer (0 = full causal attention).
      logn_scaling: scale queries by log(n) / log(train_len), n = position + 1 (see `logn_scale`).
      transform: eval-time position-id transform (models/position_transforms.py); default none.
      temperature: eval-time attention temperature of this layer, a
        `position_transforms.Temperature` (or just its form, a string; "" = none): queries times
        `attention_temperature_scale(positions, train_len, ...)`, 1 up to train_len.
      qk_norm: one of QK_NORMS (model.qk_norm); qkv_bias: biases on q, k, v (model.qkv_bias);
      norm_eps: the QK-norms' epsilon (model.norm_eps).

    Raises:
      ValueError: an unknown qk_norm, or kv_heads not dividing num_heads (configs/validate.py
        refuses both first, naming the field).
    """
    if qk_norm not in QK_NORMS:
      raise ValueError(f"qk_norm must be one of {QK_NORMS}; got {qk_norm!r}")
    h, kv, hd = dims.num_heads, dims.kv_heads, dims.head_dim
    if h % kv:
      raise ValueError(f"num_kv_heads={kv} must divide num_heads={h}")
    init = nnx.initializers.normal(dims.init_std)
    out_init = nnx.initializers.normal(dims.init_std / np.sqrt(2 * dims.num_layers))
    pd = dims.param_dtype
    self.wq = nnx.Param(init(rngs.params(), (dims.d_model, h, hd), pd),
                        logical_axes=("embed", "heads", "head_dim"))
    kv_axes = ("embed", "kv_heads", "head_dim")
    self.wk = nnx.Param(init(rngs.params(), (dims.d_model, kv, hd), pd), logical_axes=kv_axes)
    self.wv = nnx.Param(init(rngs.params(), (dims.d_model, kv, hd), pd), logical_axes=kv_axes)
    if qkv_bias:
      self.bq = nnx.Param(jnp.zeros((h, hd), pd), logical_axes=("heads", "head_dim"))
      self.bk = nnx.Param(jnp.zeros((kv, hd), pd), logical_axes=("kv_heads", "head_dim"))
      self.bv = nnx.Param(jnp.zeros((kv, hd), pd), logical_axes=("kv_heads", "head_dim"))
    if qk_norm != "none":
      q_width, k_width = (hd, hd) if qk_norm == "head" else (h * hd, kv * hd)
      self.q_norm = RMSNorm(q_width, epsilon=norm_eps, param_dtype=pd)
      self.k_norm = RMSNorm(k_width, epsilon=norm_eps, param_dtype=pd)
    self.qk_norm = qk_norm
    self.qkv_bias = qkv_bias
    self.num_heads = h
    self.wo = nnx.Param(out_init(rngs.params(), (dims.num_heads, dims.head_dim, dims.d_model), pd),
                        logical_axes=("heads", "head_dim", "embed"))
    self.layer = layer
    self.dtype = dtype
    self.chunk = chunk
    self.window = window
    self.logn_train_len = dims.train_len if logn_scaling else 0
    self.transform = transform
    self.temperature = Temperature(temperature) if isinstance(temperature, str) else temperature
    self.temperature_train_len = dims.train_len
    self.impl = dims.attention_impl  # "xla" | "pallas" (model.attention_impl)
    self.kernel_blocks = flash.BlockSizes(*dims.kernel_blocks)  # model.kernel_block_* (tokens)

  def __call__(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array,
               scheme: PositionalScheme, cache: KVCache | None = None, *, train: bool = False):
    """One attention layer, over a whole sequence or a step of decoding with a KV cache.

    Args:
      x: [batch, seq, d_model]; positions, segment_ids: int32 [batch, seq].
      scheme: the model's positional scheme.
      cache: None, or this layer's `KVCache` whose `positions`/`segment_ids` already hold the
        new tokens' entries at slots index .. index + seq - 1 (see `models.decoder`). Keys and
        values are cached before rotation, and the scheme's hooks see every cached key each
        call, so cached decoding equals full recomputation for every scheme (dynamic NTK, xPos,
        STRING included).
      train: the call is differentiated (the training step); chooses the form of the chunk
        loop (`_attend_segment`), not the values.

    Returns:
      [batch, seq, d_model], or ([batch, seq, d_model], the updated KVCache) with a cache.
    """
    b, s, d = x.shape
    q, k, v = self._project(x)
    context = context_parallel.context_size()  # > 1: this device holds 2 chunks of the sequence
    if cache is None and context > 1:
      k, v, k_positions, k_segment_ids = map(context_parallel.gather_sequence,
                                             (k, v, positions, segment_ids))
      segments = context_parallel.query_segments(s)
    elif cache is None:
      k_positions, k_segment_ids = positions, segment_ids
      segments = [(0, s, 0, s)]  # (first row, rows, its index in the keys, keys needed)
    else:
      at = (0, cache.index, 0, 0)
      k = jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), at)
      v = jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), at)
      k_positions, k_segment_ids = cache.positions, cache.segment_ids
      segments = [(0, s, cache.index, k.shape[1])]
      cache = cache.replace(k=k, v=v)
    # ---- fused kernel (model.attention_impl="pallas"; models/kernels/flash.py) ----
    spec = attention_path.kernel_spec(self, scheme, positions, cache, q.shape[-1])
    if spec is not None:  # per device in shard_map on the trace's mesh (kernels/partition.py)
      # The kernel maps each query head to its KV head (models/kernels/blocks.py kv_head); a
      # scheme with per-head rotation gets each query head's own copy of the keys.
      if scheme.per_head_rotation:
        k = repeat_kv(k, self.num_heads)
      out = partition.partitioned_flash_attention(q, k, repeat_kv(v, k.shape[2]), positions,
                                                  positions, segment_ids, segment_ids, spec,
                                                  block_sizes=self.kernel_blocks)
      wo = self.wo[...].astype(self.dtype)
      return (out.reshape(b * s, -1) @ wo.reshape(-1, d)).reshape(b, s, d)
    # ---- end fused kernel ----
    k_context, cache = token_context.key_context(scheme, x, self.layer, k_segment_ids, cache)
    rotated = self._rotate(q, k, positions, k_positions, scheme, k_context)
    vh = _heads(repeat_kv(v, self.num_heads))
    out = _concat([self._attend_segment(rotated, vh, scheme, positions, k_positions, segment_ids,
                                        k_segment_ids, *segment, train=train)
                   for segment in segments])
    wo = self.wo[...].astype(self.dtype)
    out = _heads(out.astype(q.dtype)).reshape(b * s, -1)  # [batch x seq, heads x head_dim]
    out = (out @ wo.reshape(-1, d)).reshape(b, s, d)
    return out if cache is None else (out, cache)

  def weights(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array,
              scheme: PositionalScheme) -> jax.Array:
    """This layer's attention probabilities, as the XLA path of `__call__` computes them.

    The same projections, scheme hooks, position transform, window, log-n scaling and masks as
    `__call__` without a cache, unchunked: memory O(heads x seq^2) (for diagnostics such as
    eval/attention_stats.py, not for training).

    Args:
      x: [batch, seq, d_model] (the block's normed input); positions, segment_ids: int32
        [batch, seq].
      scheme: the model's positional scheme.

    Returns:
      float32 [batch, heads, seq (query), seq (key)]; each row sums to 1 over the keys it may
      attend to and is exactly 0 elsewhere (masked keys).
    """
    s = x.shape[1]
    q, k, _ = self._project(x)
    k_context, _ = token_context.key_context(scheme, x, self.layer, segment_ids, None)
    rotated = self._rotate(q, k, positions, positions, scheme, k_context)
    logits, mask = self._logits(rotated, scheme, positions, positions, segment_ids, segment_ids,
                                0, s, 0, s, 0)
    probs = jax.nn.softmax(jnp.where(mask, logits, jnp.finfo(jnp.float32).min), axis=-1)
    return jnp.where(mask, probs, 0.0)

  def _project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q [batch, seq, heads, head_dim] and k, v [batch, seq, kv_heads, head_dim] in the compute
    dtype from x [batch, seq, d_model]: the projections, their biases (qkv_bias) and the
    QK-norm (qk_norm), before any positional hook.

    Three matmuls: one of wq, wk and wv stacked was slower on XLA:CPU (its gradient's slices
    became pads and copies; bench/RESULTS.md, "Profile of the step")."""
    b, s, d = x.shape
    x2 = x.reshape(b * s, d)  # 2-D matmuls are much faster than 3-D einsums on XLA:CPU

    def project(w, bias):
      w = w[...].astype(self.dtype)
      y = x2 @ w.reshape(d, -1)
      if bias is not None:
        y = y + bias[...].astype(self.dtype).reshape(-1)
      return y.reshape(b, s, w.shape[1], w.shape[2])

    biases = (self.bq, self.bk, self.bv) if self.qkv_bias else (None, None, None)
    q, k, v = (project(w, bias) for w, bias in zip((self.wq, self.wk, self.wv), biases))
    if self.qk_norm == "head":  # over each head's head_dim
      q, k = self.q_norm(q).astype(self.dtype), self.k_norm(k).astype(self.dtype)
    elif self.qk_norm == "full":  # over the whole projection
      q = self.q_norm(q.reshape(b, s, -1)).reshape(q.shape).astype(self.dtype)
      k = self.k_norm(k.reshape(b, s, -1)).reshape(k.shape).astype(self.dtype)
    return q, k, v

  def _rotate(self, q, k, positions, k_positions, scheme, k_context=None):
    """[(q, k rotated by the scheme, its branch, the scaled queries and the keys heads-major
    [batch, heads, len, head_dim], k_context)] per branch of the position transform; k arrives with its
    kv_heads and leaves repeated to the query heads (`repeat_kv`: after `scheme.rotate`, or
    before it for a scheme with `per_head_rotation`),
    queries log-n scaled (model.logn_scaling) and temperature scaled (the eval-time attention
    temperature) when configured, both from the true query positions."""
    out = []
    if scheme.per_head_rotation:  # each query head rotates its copy of the shared key
      k = repeat_kv(k, self.num_heads)
    for br in self.transform.branches(positions, k_positions):
      qr, kr = scheme.rotate(q, k, br.q_positions, br.k_positions, self.layer)
      kr = repeat_kv(kr, self.num_heads)  # grouped-query keys, one per query head from here
      if self.logn_train_len:
        qr = qr * logn_scale(positions, self.logn_train_len)[:, :, None, None].astype(qr.dtype)
      if self.temperature.form:
        t = self.temperature
        lengths = (jnp.maximum(context_parallel.sequence_max(positions.max(axis=-1)),
                               k_positions.max(axis=-1)) + 1) if t.per == "sequence" else None
        scale = attention_temperature_scale(positions, self.temperature_train_len, t.form,
                                            c=t.c, l0=t.l0, per=t.per, lengths=lengths)
        qr = qr * scale[:, :, None, None].astype(qr.dtype)
      scale = jnp.asarray(qr.shape[-1] ** -0.5, qr.dtype)  # Vaswani et al., Eq. 1
      out.append((qr, kr, br, _heads(qr) * scale, _heads(kr), k_context))
    return out

  def _attend_segment(self, rotated, vh, scheme, positions, k_positions, segment_ids,
                      k_segment_ids, first: int, rows: int, index, k_end: int, *,
                      train: bool = False) -> jax.Array:
    """Attention of the queries [first, first + rows) against the keys [0, k_end), whose first
    query has slot `index` among the keys (causal by index; a Python int, or traced with a KV
    cache or context parallelism). vh: heads-major values [batch, heads, keys, head_dim].

    Queries run in chunks of `self.chunk` tokens (model.attention_chunk), and no chunk computes
    the logits of keys none of its queries may see where the form allows it: those past its
    last query (causal) and, in a sliding-window layer, those before its first query's window.
    - With a static `index` in training (`train`), or with at most `UNROLLED_CHUNKS` chunks: an
      unrolled loop, each chunk against exactly its key range, (n + 1) / 2n of the logits of
      the full matrix at n chunks. The fastest differentiable form; in training the backward
      pass keeps every chunk's probabilities anyway. Training widens its chunks beyond
      `TRAIN_UNROLLED_CHUNKS` of them.
    - Otherwise in evaluation: the whole chunks in `lax.map` (one loop body whatever the
      length, so the program does not grow with seq and one chunk's values are alive at a
      time), each over key blocks of `self.chunk` tokens with an online softmax (flash
      attention's recurrence, Dao et al., arXiv 2205.14135, Alg. 1), a block no query of the
      chunk can see skipped by `lax.cond`: memory O(rows x chunk) per head, and the triangle
      above the diagonal is never computed. Schemes whose bias is not blockwise
      (`bias_blockwise`, CoPE) take each chunk against its whole key range instead, and so
      does a segment of one chunk (a decoding step on a KV cache: one product with the cache).
    - In training with a traced `index` (context parallelism): the whole chunks in `lax.map`,
      each against all k_end keys (the key-block loop's backward pass is slow on CPU).
    Then the last rows % chunk queries, against their exact key range when `index` is static.

    Returns:
      heads-major [batch, heads, rows, head_dim] in vh's dtype.
    """
    chunk = self.chunk if 0 < self.chunk < rows else rows
    static = isinstance(index, (int, np.integer))
    if train and static and -(-rows // chunk) > TRAIN_UNROLLED_CHUNKS:
      # Wider chunks (a multiple of the configured one) keep the unrolled program, and its
      # compile time, bounded at long lengths.
      chunk *= -(-rows // (chunk * TRAIN_UNROLLED_CHUNKS))
    whole = rows - rows % chunk  # queries in whole chunks
    attend_range = functools.partial(self._attend_range, rotated, vh, scheme, positions,
                                     k_positions, segment_ids, k_segment_ids)
    if static and (train or -(-rows // chunk) <= UNROLLED_CHUNKS):
      return _concat([attend_range(first + c0, min(chunk, rows - c0),
                                   *self._key_range(index + c0, min(chunk, rows - c0), k_end),
                                   index + c0)
                      for c0 in range(0, rows, chunk)])
    parts = []
    if whole:
      # Key blocks when the segment has several chunks; a single short one (a decoding step
      # or short prefill on a KV cache) takes its keys at once, one product with the cache.
      if scheme.bias_blockwise and not train and whole > chunk:
        one = lambda c0: self._attend_blocks(rotated, vh, scheme, positions, k_positions,  # noqa
                                             segment_ids, k_segment_ids, first + c0, chunk,
                                             k_end, index + c0)
      else:
        one = lambda c0: attend_range(first + c0, chunk, 0, k_end, index + c0)  # noqa: E731
      if whole == chunk:
        parts.append(one(0))
      else:
        out = jax.lax.map(one, jnp.arange(0, whole, chunk, dtype=jnp.int32))
        b, heads, hd = vh.shape[0], vh.shape[1], vh.shape[3]
        parts.append(out.transpose(1, 2, 0, 3, 4).reshape(b, heads, whole, hd))
    if whole < rows:
      length = rows - whole
      k_lo, k_hi = self._key_range(index + whole, length, k_end) if static else (0, k_end)
      parts.append(attend_range(first + whole, length, k_lo, k_hi, index + whole))
    return _concat(parts)

  def _key_range(self, slot: int, length: int, k_end: int) -> tuple[int, int]:
    """[lo, hi): the keys that queries at slots [slot, slot + length) may see (causal, and this
    layer's window); static ints."""
    lo = max(0, slot - self.window + 1) if self.window else 0
    return lo, min(k_end, slot + length)

  def _attend_range(self, rotated, vh, scheme, positions, k_positions, segment_ids,
                    k_segment_ids, c0, length: int, k_lo: int, k_hi: int, slot) -> jax.Array:
    """Softmax attention of queries [c0, c0 + length) (first at key slot `slot`) against the
    keys [k_lo, k_hi) at once: heads-major [batch, heads, length, head_dim] in vh's dtype."""
    logits, mask = self._logits(rotated, scheme, positions, k_positions, segment_ids,
                                k_segment_ids, c0, length, k_lo, k_hi - k_lo, slot - k_lo)
    return _softmax_values(logits, mask, vh[:, :, k_lo:k_hi])

  def _attend_blocks(self, rotated, vh, scheme, positions, k_positions, segment_ids,
                     k_segment_ids, c0, length: int, k_end: int, slot) -> jax.Array:
    """Queries [c0, c0 + length) (first at key slot `slot`, both may be traced) against the keys
    [0, k_end) in blocks of `length` keys with an online softmax (flash attention's recurrence,
    Dao et al., arXiv 2205.14135, Alg. 1), in float32; a block that no query sees is skipped
    (`lax.cond`). Keys are padded to whole blocks; the padding lies past every query (causal),
    so it is never seen. Returns heads-major [batch, heads, length, head_dim] in vh's dtype."""
    block = length
    num_blocks = -(-k_end // block)
    pad = num_blocks * block - k_end
    if pad:
      def widen(x, axis=1):
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, pad)
        return jnp.pad(jax.lax.slice_in_dim(x, 0, k_end, axis=axis), widths)

      rotated = [(qr, widen(kr), dataclasses.replace(br, k_positions=widen(br.k_positions)), qh,
                  widen(kh, 2), kc if kc is None else widen(kc))
                 for qr, kr, br, qh, kh, kc in rotated]
      vh, k_positions, k_segment_ids = widen(vh, 2), widen(k_positions), widen(k_segment_ids)
    b, heads, hd = vh.shape[0], vh.shape[1], vh.shape[3]
    lo = jnp.maximum(slot - self.window + 1, 0) if self.window else 0  # first key seen
    hi = jnp.minimum(slot + length, k_end)  # one past the last key seen

    def step(carry, k0):
      def visit(carry):
        top, total, acc = carry  # running max, sum of exp and weighted values, float32
        logits, mask = self._logits(rotated, scheme, positions, k_positions, segment_ids,
                                    k_segment_ids, c0, length, k0, block, slot - k0)
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
        # The result does not depend on the running maximum (it scales total and acc alike),
        # so it is a constant to autodiff, as in `attend` (its gradient also came out NaN
        # through XLA:CPU's compiled max for KERPLE and Sandwich).
        new_top = jax.lax.stop_gradient(jnp.maximum(top, logits.max(axis=-1)))
        p = jnp.where(mask, jnp.exp(logits - new_top[..., None]), 0.0)
        rescale = jnp.exp(top - new_top)
        values = jax.lax.dynamic_slice_in_dim(vh, k0, block, axis=2)
        update = jnp.einsum("bhqk,bhkd->bhqd", p.astype(vh.dtype), values,
                            preferred_element_type=jnp.float32)
        return (new_top, total * rescale + p.sum(axis=-1),
                acc * rescale[..., None] + update)

      seen = (k0 < hi) & (k0 + block > lo)
      return jax.lax.cond(seen, visit, lambda c: c, carry), None

    init = (jnp.full((b, heads, length), jnp.finfo(jnp.float32).min, jnp.float32),
            jnp.zeros((b, heads, length), jnp.float32),
            jnp.zeros((b, heads, length, hd), jnp.float32))
    varying = tuple(sorted(jax.typeof(vh).manual_axis_type.varying))  # in shard_map: the manual
    if varying:  # axes the values vary over, which the carry must share for lax.cond
      init = jax.tree.map(lambda x: jax.lax.pcast(x, varying, to="varying"), init)
    starts = jnp.arange(0, num_blocks * block, block, dtype=jnp.int32)
    (_, total, acc), _ = jax.lax.scan(step, init, starts)
    # Every query sees its own key, so total >= 1 after the block holding its diagonal.
    return (acc / total[..., None]).astype(vh.dtype)

  def _logits(self, rotated, scheme, positions, k_positions, segment_ids, k_segment_ids,
              c0, length: int, k0, k_len: int, offset):
    """float32 logits [batch, heads, length, k_len] of queries [c0, c0 + length) against keys
    [k0, k0 + k_len), scheme bias included, and the bool mask they hold under: causal (by index:
    query i sees key j <= i + `offset`, the first query's slot minus k0), the document, this
    layer's window and, with several branches of the position transform, each logit taken from
    the branch whose region holds it. `c0`, `k0` and `offset` may be traced (inside `lax.map`
    and the key-block scan)."""
    rows = lambda x, axis=1: jax.lax.dynamic_slice_in_dim(x, c0, length, axis)  # noqa: E731
    keys = lambda x, axis=1: jax.lax.dynamic_slice_in_dim(x, k0, k_len, axis)  # noqa: E731
    mask = attention_mask(length, k_len, rows(segment_ids), keys(k_segment_ids), self.window,
                          offset)
    logits, covered = None, None
    plain = len(rotated) == 1 and rotated[0][2].region is None  # one branch, every pair
    if not plain:
      distance = (rows(positions)[:, :, None] - keys(k_positions)[:, None, :])[:, None]
      k_pos = keys(k_positions)[:, None, None, :]
    for qr, kr, br, qh, kh, kc in rotated:
      branch_logits = _scores(rows(qh, 2), keys(kh, 2))
      # q and k in [batch, len, heads, head_dim] for contextual schemes (dead code otherwise).
      context = {} if kc is None else {"k_context": keys(kc), "q_context": token_context.
                                       query_context(kc, k0 + offset, length)}
      bias = scheme.bias(rows(br.q_positions), keys(br.k_positions), self.layer,
                         q=rows(qr), k=keys(kr), mask=mask, **context)
      if bias is not None:
        branch_logits = branch_logits + bias
      if plain:
        return branch_logits, mask
      region = br.region(distance, k_pos)
      logits = branch_logits if logits is None else jnp.where(region, branch_logits, logits)
      covered = region if covered is None else covered | region
    return logits, mask & covered
