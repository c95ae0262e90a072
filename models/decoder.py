"""A pre-norm decoder-only Transformer that knows nothing of any positional scheme.

token embedding -> scheme.embed -> num_layers x [RMSNorm -> attention -> +, RMSNorm -> MLP -> +]
-> RMSNorm -> output projection (tied to the embedding, or its own matrix).
RMSNorm: Zhang & Sennrich, arXiv 1910.07467. Pre-norm: Xiong et al., arXiv 2002.04745.
`model.norm_position="post"` moves each block's norms onto the sublayers' outputs instead,
x + norm(f(x)), as OLMo 2 does (arXiv 2501.00656); "pre" (the default) is bitwise the old block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from data import position_layouts
from models import position_transforms, positions
from models.attention import GLOBAL_SEGMENT, Attention, KVCache
from models.norms import RMSNorm
from models.position_transforms import PositionTransform
from models.positions import Dims


def layer_window(model_config, layer: int) -> int:
  """Sliding-window size of `layer` (tokens; 0 = full attention).

  `model.sliding_window` > 0 windows every layer except, when `model.global_every` = N > 0,
  layers N-1, 2N-1, ... which keep full attention (interleaved local/global layouts such as
  Gemma 2/3 and SWAN-GPT, arXiv 2504.08719).
  """
  m = model_config
  if m.sliding_window <= 0:
    return 0
  if m.global_every > 0 and (layer + 1) % m.global_every == 0:
    return 0
  return m.sliding_window


# model.remat: what the backward pass keeps of each block's forward pass (the rest is recomputed).
#   "block": the outputs of matmuls without batch dimensions (q/k/v/o projections and the MLP's;
#            not attention scores) -- jax.checkpoint_policies.dots_with_no_batch_dims_saveable.
#   "full":  nothing but the block's input (jax.checkpoint_policies.nothing_saveable): the whole
#            block's forward pass runs again in the backward pass.
REMAT_POLICIES = {"block": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                  "full": jax.checkpoint_policies.nothing_saveable}


def remat_block(mode: str, train: bool = False):
  """`(block, x, positions, segment_ids, scheme) -> block(x, ...)` under `model.remat` = mode:
  "none" (every activation kept for the backward pass) or a key of REMAT_POLICIES (`nnx.remat`
  of the block call with that policy); `train` is passed to the block (`Decoder.__call__`).
  Values and gradients are unchanged; only what is kept between the forward and the backward
  pass (and so the training step's temporary memory) is.

  Raises:
    KeyError: an unknown mode (configs/validate.py refuses it first, naming model.remat).
  """
  def call(block, x, positions, segment_ids, scheme):
    return block(x, positions, segment_ids, scheme, train=train)

  if mode == "none":
    return call
  return nnx.remat(call, policy=REMAT_POLICIES[mode])


class MLP(nnx.Module):
  """Position-wise MLP: GELU (GPT-2) or SwiGLU (Shazeer, arXiv 2002.05202, Eq. 5).

  Parameters: wi [d_model, mlp_dim] (SwiGLU: wi_gate and wi_up), wo [mlp_dim, d_model].
  """

  def __init__(self, dims: Dims, mlp_dim: int, activation: str, *, dtype, rngs: nnx.Rngs):
    init = nnx.initializers.normal(dims.init_std)
    out_init = nnx.initializers.normal(dims.init_std / np.sqrt(2 * dims.num_layers))
    pd = dims.param_dtype
    self.activation = activation
    self.dtype = dtype
    shape = (dims.d_model, mlp_dim)
    self.wi = nnx.Param(init(rngs.params(), shape, pd), logical_axes=("embed", "mlp"))
    if activation == "swiglu":
      self.wi_up = nnx.Param(init(rngs.params(), shape, pd), logical_axes=("embed", "mlp"))
    self.wo = nnx.Param(out_init(rngs.params(), (mlp_dim, dims.d_model), pd),
                        logical_axes=("mlp", "embed"))

  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [batch, seq, d_model] -> [batch, seq, d_model]."""
    # 2-D matmuls: XLA:CPU runs [tokens, d] @ [d, f] (and its gradients) about 1.6x faster than
    # the batched 3-D form (measured on a 2-core CPU at d=256, f=1024, 4096 tokens).
    x2 = x.reshape(-1, x.shape[-1])
    h = x2 @ self.wi[...].astype(self.dtype)
    if self.activation == "swiglu":
      h = jax.nn.silu(h) * (x2 @ self.wi_up[...].astype(self.dtype))
    else:
      h = jax.nn.gelu(h)
    return (h @ self.wo[...].astype(self.dtype)).reshape(x.shape)


# model.norm_position: where each block's two RMSNorms sit.
#   "pre":  x + f(norm(x)) (pre-norm; Llama, Qwen, Mistral, SmolLM; Xiong et al., arXiv 2002.04745);
#   "post": x + norm(f(x)) (each sublayer's output normalised, inside the residual: OLMo 2,
#           arXiv 2501.00656, Sec. 3.2; transformers' Olmo2DecoderLayer).
NORM_POSITIONS = ("pre", "post")


class Block(nnx.Module):
  """One decoder block: x + attn(norm(x)), then x + mlp(norm(x)) (norm_position "pre"), or
  x + norm(attn(x)), then x + norm(mlp(x)) ("post", OLMo 2). The norms are `attn_norm` and
  `mlp_norm` in both placements (the same parameters, [d_model] each)."""

  def __init__(self, dims: Dims, layer: int, mlp_dim: int, activation: str, *, dtype, rngs,
               attention_chunk: int = 0, window: int = 0, logn_scaling: bool = False,
               transform: PositionTransform = PositionTransform(),
               temperature: position_transforms.Temperature = position_transforms.Temperature(),
               qk_norm: str = "none", qkv_bias: bool = False, norm_eps: float = 1e-6,
               norm_position: str = "pre"):
    if norm_position not in NORM_POSITIONS:
      raise ValueError(f"norm_position must be one of {NORM_POSITIONS}; got {norm_position!r}")
    self.post_norm = norm_position == "post"
    self.attn_norm = RMSNorm(dims.d_model, epsilon=norm_eps, param_dtype=dims.param_dtype)
    self.attention = Attention(dims, layer, dtype=dtype, rngs=rngs, chunk=attention_chunk,
                               window=window, logn_scaling=logn_scaling, transform=transform,
                               temperature=temperature, qk_norm=qk_norm, qkv_bias=qkv_bias,
                               norm_eps=norm_eps)
    self.mlp_norm = RMSNorm(dims.d_model, epsilon=norm_eps, param_dtype=dims.param_dtype)
    self.mlp = MLP(dims, mlp_dim, activation, dtype=dtype, rngs=rngs)
    self.dtype = dtype

  def __call__(self, x, positions, segment_ids, scheme, cache: KVCache | None = None, *,
               train: bool = False):
    """x: [batch, seq, d_model]; positions, segment_ids: int32 [batch, seq]; train: see
    `Attention.__call__`.

    Returns [batch, seq, d_model], or (that, the updated KVCache) when `cache` is given.
    """
    if self.post_norm:  # OLMo 2: x + norm(f(x))
      attended = self.attention(x.astype(self.dtype), positions, segment_ids, scheme, cache,
                                train=train)
      if cache is not None:
        attended, cache = attended
      x = x + self.attn_norm(attended).astype(self.dtype)
      x = x + self.mlp_norm(self.mlp(x.astype(self.dtype))).astype(self.dtype)
      return x if cache is None else (x, cache)
    h = self.attn_norm(x).astype(self.dtype)
    attended = self.attention(h, positions, segment_ids, scheme, cache, train=train)
    if cache is not None:
      attended, cache = attended
    x = x + attended
    h = self.mlp_norm(x).astype(self.dtype)
    x = x + self.mlp(h)
    return x if cache is None else (x, cache)

  def attention_input(self, x: jax.Array) -> jax.Array:
    """What the attention sublayer reads of the block input x [batch, seq, d_model]: norm(x)
    (pre-norm) or x itself (post-norm), in the compute dtype."""
    return (x if self.post_norm else self.attn_norm(x)).astype(self.dtype)


class Decoder(nnx.Module):
  """Decoder-only language model over `config.model` with a pluggable positional scheme.

  Call with tokens, positions and segment ids (all int32 [batch, seq]); returns float32 logits
  [batch, seq, vocab_size].
  """

  def __init__(self, config, *, rngs: nnx.Rngs):
    """config: the experiment ConfigDict (model section + data.train_len).

    The positional scheme is kept as `self.position` (the one object every layer's attention
    calls; e.g. `RoPE.set_search_frequencies` is called on it).

    Raises:
      ConfigError: for an unknown or invalid positional scheme (see `positions.build`), a bad
        position transform or attention temperature (models/position_transforms.py), or the
        attention temperature together with model.logn_scaling (both scale the queries).
    """
    m = config.model
    dims = Dims.from_config(config)
    self.dtype = jnp.dtype(m.dtype)
    self.position = positions.build(m.position, dims, rngs=rngs)
    # The scheme's second position stream, if it reads one (data/position_layouts.py): static.
    self.layout = position_layouts.from_config(config, self.position.position_layout)
    transform = PositionTransform.from_config(m.position, dims.train_len)
    temperature = position_transforms.temperature_forms(m.position, m.num_layers, dims.train_len)
    if any(temperature) and m.logn_scaling:
      raise ConfigError("model.position.attention_temperature cannot be combined with "
                        "model.logn_scaling=True (both scale the queries by log n)")
    self.embedding = nnx.Param(
        nnx.initializers.normal(m.init_std)(rngs.params(), (m.vocab_size, m.d_model), m.param_dtype),
        logical_axes=("vocab", "embed"))
    eps = m.get("norm_eps", 1e-6)  # configs written before the field: the old constant
    self.blocks = nnx.List([
        Block(dims, i, m.mlp_dim, m.mlp_activation, dtype=self.dtype, rngs=rngs,
              attention_chunk=m.attention_chunk, window=layer_window(m, i),
              logn_scaling=m.logn_scaling, transform=transform,
              temperature=position_transforms.temperature_of(m.position, temperature[i]),
              qk_norm=m.get("qk_norm", "none"), qkv_bias=m.get("qkv_bias", False), norm_eps=eps,
              norm_position=m.get("norm_position", "pre"))  # configs before the field: "pre"
        for i in range(m.num_layers)])
    self.num_kv_heads, self.head_dim = dims.kv_heads, dims.head_dim
    self.final_norm = RMSNorm(m.d_model, epsilon=eps, param_dtype=m.param_dtype)
    self.tie_embeddings = m.tie_embeddings
    # model.sink_token (Xiao et al., arXiv 2309.17453, Sec. 3.3): a learned vector before every
    # window, at position 0 in segment GLOBAL_SEGMENT (seen by every query), never scored.
    self.sink_token = bool(m.get("sink_token", False))  # configs before the field: none
    if self.sink_token:
      self.sink = nnx.Param(nnx.initializers.normal(m.init_std)(
          rngs.params(), (m.d_model,), m.param_dtype))
    self.remat = m.get("remat", "none")  # configs written before the field: no remat
    if not m.tie_embeddings:
      self.head = nnx.Param(
          nnx.initializers.normal(m.init_std)(rngs.params(), (m.d_model, m.vocab_size), m.param_dtype),
          logical_axes=("embed", "vocab"))

  def __call__(self, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array, *,
               aux_positions: jax.Array | None = None, train: bool = False) -> jax.Array:
    """tokens, positions, segment_ids: int32 [batch, seq] -> float32 logits [batch, seq, vocab].

    aux_positions: int32 [batch, seq], the second position stream of a scheme that reads one
      (`position_streams`); None: derived from the tokens (the evaluation rule, offset 0).
    train: the call is differentiated (the training step): attention then runs every query
      chunk in an unrolled loop over its exact key range, the fastest differentiable form; False
      (evaluation): many chunks run in a loop over key blocks whose memory does not grow with the
      number of chunks (models/attention.py, `Attention._attend_segment`). Same values either way.
    """
    streams = self.position_streams(tokens, positions, segment_ids, aux_positions)
    return self._forward(tokens, *streams, segment_ids, None, train)[0]

  def position_streams(self, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array,
                       aux_positions: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """(positions for the `embed` hook, positions for attention), int32 [batch, seq] each.

    A scheme with one stream gets `positions` twice (aux_positions is ignored). A scheme with a
    position layout (data/position_layouts.py: Abacus "digits", BiPE "segments") gets its
    `embed_stream` and `attention_stream`: from (positions, aux_positions) as given (a training
    batch, whose pipeline drew the layout's offsets), or, when aux_positions is None, from the
    layout applied to (tokens, positions, segment_ids) here with no offset (evaluation).

    Args:
      tokens, positions, segment_ids: int32 [batch, seq]; aux_positions: int32 [batch, seq] or None.
    """
    if self.layout is None:
      return positions, positions
    if aux_positions is None:
      positions, aux_positions = self.layout.streams(tokens, positions, segment_ids)
    chosen = {"positions": positions, "aux": aux_positions}
    return chosen[self.position.embed_stream], chosen[self.position.attention_stream]

  def init_cache(self, batch: int, max_len: int) -> list[KVCache]:
    """An empty KV cache: one `KVCache` per layer, max_len slots (tokens), compute dtype, with
    the model's num_kv_heads key/value heads (a grouped-query cache is num_heads / num_kv_heads
    times smaller than a multi-head one). With model.sink_token the cache has max_len + 1 slots
    and the sink already in slot 0 (index 1): the first cached key, as in `__call__`."""
    max_len += self.sink_token
    shape = (batch, max_len, self.num_kv_heads, self.head_dim)
    zeros = jnp.zeros(shape, self.dtype)
    ids = jnp.zeros((batch, max_len), jnp.int32)
    width = self.position.context_width  # a scheme reading the layer input (FoX): C per slot
    context = jnp.zeros((batch, max_len, width), jnp.float32) if width else None
    cache = [KVCache(zeros, zeros, ids, ids, jnp.zeros((), jnp.int32), context)
             for _ in self.blocks]
    if not self.sink_token:
      return cache
    x, positions, segment_ids = self._sink(batch)
    cache = [c.replace(positions=c.positions.at[:, :1].set(positions),
                       segment_ids=c.segment_ids.at[:, :1].set(segment_ids)) for c in cache]
    _, cache = self._blocks(self.position.embed(x, positions), positions, segment_ids, cache)
    return [c.replace(index=c.index + 1) for c in cache]

  def _sink(self, batch: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The sink token of `batch` rows: its vector [batch, 1, d_model] (compute dtype), position
    0 and segment GLOBAL_SEGMENT (int32 [batch, 1] each)."""
    x = jnp.broadcast_to(self.sink[...].astype(self.dtype), (batch, 1, self.sink.shape[0]))
    return (x, jnp.zeros((batch, 1), jnp.int32),
            jnp.full((batch, 1), GLOBAL_SEGMENT, jnp.int32))

  def decode(self, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array,
             cache: list[KVCache], *, aux_positions: jax.Array | None = None
             ) -> tuple[jax.Array, list[KVCache]]:
    """Runs `tokens` on top of the cache (a prompt's prefill or one decoding step).

    Args:
      tokens, positions, segment_ids: int32 [batch, seq], the next seq tokens; positions carry on
        from the cached ones (e.g. prompt_len + t at step t).
      cache: from `init_cache` or a previous `decode`; needs index + seq <= max_len slots.
      aux_positions: int32 [batch, seq], required by a scheme with a position layout: the
        layout's streams of these tokens, computed on the whole sequence so far
        (`self.layout.streams` of it, sliced: a layout's indices depend on earlier tokens). For
        BiPE `positions` are then the intra-segment indices.

    Returns:
      (float32 logits [batch, seq, vocab], the cache with these tokens appended). The logits
      equal those of `__call__` on the whole sequence so far at the same positions.

    Raises:
      ValueError: the scheme has a position layout and aux_positions is None.
    """
    if self.layout is not None and aux_positions is None:
      raise ValueError(f"{type(self.position).__name__} reads a second position stream "
                       f"({self.layout.name!r}): pass decode(..., aux_positions=) computed on "
                       "the whole sequence (Decoder.layout.streams)")
    positions, attention_positions = self.position_streams(tokens, positions, segment_ids,
                                                           aux_positions)
    index = cache[0].index
    at = (0, index)
    k_positions = jax.lax.dynamic_update_slice(cache[0].positions, attention_positions, at)
    k_segment_ids = jax.lax.dynamic_update_slice(cache[0].segment_ids, segment_ids, at)
    cache = [c.replace(positions=k_positions, segment_ids=k_segment_ids) for c in cache]
    logits, cache = self._forward(tokens, positions, attention_positions, segment_ids, cache)
    seq = tokens.shape[1]
    return logits, [c.replace(index=c.index + seq) for c in cache]

  def attention_statistics(self, tokens: jax.Array, positions: jax.Array,
                           segment_ids: jax.Array, reduce, *,
                           aux_positions: jax.Array | None = None) -> list:
    """`reduce(probs)` of every layer's attention probabilities on one forward pass.

    Args:
      tokens, positions, segment_ids: int32 [batch, seq].
      reduce: a function of one layer's float32 probabilities [batch, heads, seq (query),
        seq (key)] (`Attention.weights`: masked keys exactly 0), e.g. entropies per query; it
        runs layer by layer, so only one layer's [heads, seq, seq] is alive at a time.

    Returns:
      [reduce(probs of layer 0), ..., reduce(probs of layer num_layers - 1)].
    """
    if self.sink_token:
      raise ValueError("attention statistics are not defined with model.sink_token=True")
    x = jnp.take(self.embedding[...], tokens, axis=0).astype(self.dtype)
    embed_positions, positions = self.position_streams(tokens, positions, segment_ids,
                                                       aux_positions)
    x = self.position.embed(x, embed_positions)
    out = []
    for block in self.blocks:
      h = block.attention_input(x)
      out.append(reduce(block.attention.weights(h, positions, segment_ids, self.position)))
      x = block(x, positions, segment_ids, self.position)
    return out

  def _forward(self, tokens, embed_positions, positions, segment_ids, cache, train=False):
    """float32 logits [batch, seq, vocab] of `tokens` and the updated cache (a list, empty
    without one). With model.sink_token and no cache, the sink runs before the tokens (the
    cache holds it from `init_cache` on) and its output is dropped before the head."""
    x = jnp.take(self.embedding[...], tokens, axis=0).astype(self.dtype)
    sink = self.sink_token and cache is None
    if sink:
      sink_x, zero, global_segment = self._sink(tokens.shape[0])
      x = jnp.concatenate([sink_x, x], axis=1)
      embed_positions, positions = (jnp.concatenate([zero, p], axis=1)
                                    for p in (embed_positions, positions))
      segment_ids = jnp.concatenate([global_segment, segment_ids], axis=1)
    x, new_cache = self._blocks(self.position.embed(x, embed_positions), positions, segment_ids,
                                cache, train)
    x = self.final_norm(x[:, 1:] if sink else x).astype(self.dtype)
    head = self.embedding[...].T if self.tie_embeddings else self.head[...]
    logits = jnp.dot(x.reshape(-1, x.shape[-1]), head.astype(self.dtype),
                     preferred_element_type=jnp.float32)
    return logits.reshape(*tokens.shape, -1), new_cache

  def _blocks(self, x, positions, segment_ids, cache, train=False):
    """Every block over x [batch, seq, d_model]: (the last block's output, the new cache)."""
    new_cache = []
    run_block = remat_block(self.remat, train)
    for i, block in enumerate(self.blocks):
      if cache is None:
        x = run_block(block, x, positions, segment_ids, self.position)
      else:
        x, layer_cache = block(x, positions, segment_ids, self.position, cache[i])
        new_cache.append(layer_cache)
    return x, new_cache
