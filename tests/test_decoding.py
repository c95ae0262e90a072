"""KV-cache decoding equals full recomputation, for every scheme and eval-time extension.

"Full recomputation" is generation without a cache: the logits of position t come from a forward
pass over tokens 0..t. For most schemes that equals one forward over the whole sequence
(causality); for length-dependent extensions (dynamic NTK, STRING's automatic shift) it does not,
and the cache must match the per-prefix recomputation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import sample_tokens, tiny_config
from models import decoding, positions, sharding
from models.decoder import Decoder

KINDS = sorted(positions.REGISTRY)


@nnx.jit
def decode_step(model, tokens, positions, segment_ids, cache, aux_positions=None):
  return model.decode(tokens, positions, segment_ids, cache, aux_positions=aux_positions)


@nnx.jit
def forward(model, tokens):
  b, s = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  return model(tokens, pos, jnp.ones((b, s), jnp.int32))


def cached_logits(model, tokens, prefill):
  """Prefill `prefill` tokens, then decode the rest one at a time; float32 [b, seq, vocab]."""
  b, s = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  seg = jnp.ones((b, s), jnp.int32)
  aux = None
  if model.layout is not None:  # the layout's streams of the whole sequence, sliced per call
    pos, aux = model.layout.streams(tokens, pos, seg)
  cut = lambda a, lo, hi: None if a is None else a[:, lo:hi]  # noqa: E731
  cache = model.init_cache(b, s)
  out, cache = decode_step(model, tokens[:, :prefill], pos[:, :prefill], seg[:, :prefill], cache,
                           cut(aux, 0, prefill))
  outs = [out]
  for t in range(prefill, s):
    out, cache = decode_step(model, tokens[:, t:t + 1], pos[:, t:t + 1], seg[:, t:t + 1], cache,
                             cut(aux, t, t + 1))
    outs.append(out)
  assert int(cache[0].index) == s
  return np.asarray(jnp.concatenate(outs, axis=1))


def recomputed_logits(model, tokens, prefill, per_prefix):
  """Full recomputation, as generation without a cache does it: the prefill block from a forward
  over the first `prefill` tokens, then each later position from a forward over its prefix.

  Without `per_prefix`, one causal forward over the whole sequence stands for it (equal by
  causality, which tests/test_model.py checks exactly); length-dependent extensions need it.
  """
  if not per_prefix:
    return np.asarray(forward(model, tokens))
  outs = [np.asarray(forward(model, tokens[:, :prefill]))]
  outs += [np.asarray(forward(model, tokens[:, :t + 1]))[:, -1:]
           for t in range(prefill, tokens.shape[1])]
  return np.concatenate(outs, axis=1)


def check_cached_equals_full(config, seq=20, prefill=7, per_prefix=False):
  model = Decoder(config, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(sample_tokens(rng, (2, seq)), jnp.int32)
  np.testing.assert_allclose(cached_logits(model, tokens, prefill),
                             recomputed_logits(model, tokens, prefill, per_prefix),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_full_recomputation(kind):
  check_cached_equals_full(tiny_config("unused", kind))


@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_full_recomputation_under_gqa(kind):
  """Grouped-query attention (4 query heads, 2 KV heads; the cache holds the 2), with QK-norm
  and QKV biases on the RoPE model; one layer (the test above checks the cache across layers)."""
  config = tiny_config("unused", kind)
  config.model.num_kv_heads, config.model.num_layers = 2, 1
  if kind == "rope":
    config.model.qk_norm, config.model.qkv_bias = "full", True
  check_cached_equals_full(config, seq=12, prefill=5)


@pytest.mark.parametrize("field,value", [
    ("rope_scaling", "dynamic_ntk"), ("rope_scaling", "dynamic_yarn"), ("rope_scaling", "yarn"),
    ("rope_scaling", "pi"),
    ("position_transform", "self_extend"), ("position_transform", "string"),
    ("position_transform", "lm_infinite"), ("position_transform", "streaming_llm"),
    ("position_transform", "blockwise"), ("position_transform", "dca")])
def test_cached_decoding_with_extensions(field, value):
  """Beyond train_len (8 tokens here), where the extensions act, with query chunking.

  Dynamic NTK and STRING's automatic shift depend on the current length, and a cache keeps the
  hidden states of earlier tokens as they were computed (so does every cached implementation),
  so they match recomputation exactly with one layer, where the cache holds projections of the
  embeddings only; STRING with a fixed shift is also checked with two layers.
  """
  c = tiny_config("unused", "rope")
  c.data.train_len = 8
  c.model.attention_chunk = 4
  c.model.position[field] = value
  c.model.position.rope_scaling_factor = 2.0
  c.model.position.self_extend_group = 2
  c.model.position.lm_infinite_global = 2
  c.model.position.streaming_llm_sinks, c.model.position.streaming_llm_window = 2, 4
  c.model.position.blockwise_block = 3
  c.model.position.dca_chunk_size, c.model.position.dca_local_window = 4, 1
  if value in ("dynamic_ntk", "dynamic_yarn", "string"):  # one compile per prefix: 4 beyond L
    c.model.num_layers = 1
    check_cached_equals_full(c, seq=12, prefill=8, per_prefix=True)
  else:  # a prefill of 2 chunks (lax.map over the cache), then single steps
    check_cached_equals_full(c, prefill=8)
  if value == "string":  # a fixed shift does not depend on the length: one causal forward
    c.model.num_layers = 2
    c.model.position.string_shift = 5
    check_cached_equals_full(c)


def test_cached_decoding_with_sliding_window_and_alibi_transform():
  c = tiny_config("unused", "alibi")
  c.data.train_len = 8
  c.model.sliding_window = 5
  check_cached_equals_full(c)
  c.model.sliding_window = 0
  c.model.position.position_transform = "self_extend"
  check_cached_equals_full(c)


def test_cached_decoding_with_periodic_rope_in_window_layers():
  """MiniWin's layout (configs/miniwin_tiny.py) at a small size: window and period 5 on layer 0,
  layer 1 global NoPE; 20 tokens cross the period's wrap three times."""
  c = tiny_config("unused", "rope")
  c.data.train_len = 8
  c.model.sliding_window, c.model.global_every = 5, 2
  c.model.position.nope_every, c.model.position.rope_position_period = 2, 5
  check_cached_equals_full(c)


def test_decoding_without_the_second_stream_is_refused():
  model = Decoder(tiny_config("unused", "abacus"), rngs=nnx.Rngs(0))
  tokens = jnp.ones((1, 4), jnp.int32)
  with pytest.raises(ValueError, match="aux_positions"):
    model.decode(tokens, tokens, tokens, model.init_cache(1, 4))


@pytest.mark.parametrize("kind", ["rope", "abacus", "bipe_alibi"])
def test_generate_matches_argmax_of_full_forward(kind):
  """Greedy generation: token t is the argmax of a full forward over prompt + tokens < t (for a
  scheme with a position layout, the layout's streams of the sequence so far)."""
  c = tiny_config("unused", kind)
  model = Decoder(c, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)
  c.mesh.data = -1
  mesh = sharding.make_mesh(c.mesh, jax.devices())
  rng = np.random.default_rng(3)
  prompts = sample_tokens(rng, (8, 9)).astype(np.int32)
  generate = decoding.make_generate_fn(graphdef, mesh, prompt_len=9, max_new_tokens=4)
  got = np.asarray(generate(params, prompts))
  seq = prompts
  for t in range(4):
    logits = forward(model, jnp.asarray(seq))
    nxt = np.asarray(jnp.argmax(logits[:, -1], axis=-1)).astype(np.int32)
    np.testing.assert_array_equal(got[:, t], nxt)
    seq = np.concatenate([seq, nxt[:, None]], axis=1)
