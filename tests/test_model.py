"""Decoder and attention: exact causal masking and document masking, for every scheme."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import sample_tokens, tiny_config
from models import positions
from models.attention import attention_mask, dot_product_attention
from models.decoder import Decoder

KINDS = sorted(positions.REGISTRY)


def make_model(kind, **model_overrides):
  """The tests' tiny decoder of scheme `kind` at one layer (attention's properties hold per
  layer: a second layer doubles the compile time, not the coverage) unless overridden."""
  c = tiny_config("unused", kind)
  c.model.num_layers = 1
  for k, v in model_overrides.items():
    setattr(c.model, k, v)
  return Decoder(c, rngs=nnx.Rngs(0)), c


def jitted(model):
  """`model` called through one jax.jit program per input shape: the same numbers as calling it
  eagerly, compiled once instead of op by op (several times faster on CPU)."""
  graphdef, state = nnx.split(model)
  fn = jax.jit(lambda state, *args, **kw: nnx.merge(graphdef, state)(*args, **kw),
               static_argnames=("train",))
  return lambda *args, **kw: fn(state, *args, **kw)


def test_attention_mask_is_exactly_causal_and_per_document():
  seg = jnp.array([[1, 1, 2, 2, 2]])
  mask = np.asarray(attention_mask(5, 5, seg, seg))[0, 0]
  expected = np.array([[1, 0, 0, 0, 0],
                       [1, 1, 0, 0, 0],
                       [0, 0, 1, 0, 0],
                       [0, 0, 1, 1, 0],
                       [0, 0, 1, 1, 1]], bool)
  np.testing.assert_array_equal(mask, expected)


def test_masked_keys_get_exactly_zero_weight():
  """A value placed on a masked (future) key must not leak at all, even if huge."""
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 4, 1, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 4, 1, 8)), jnp.float32)
  v = jnp.zeros((1, 4, 1, 8)).at[0, 3].set(1e30)
  out = np.asarray(dot_product_attention(q, k, v))
  assert np.all(out[0, :3] == 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_causality(kind):
  """Changing tokens after position t leaves the logits at positions <= t unchanged."""
  model = jitted(make_model(kind)[0])
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(sample_tokens(rng, (2, 24)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(24, dtype=jnp.int32), (2, 24))
  seg = jnp.ones((2, 24), jnp.int32)
  t = 11
  changed = tokens.at[:, t + 1:].set(jnp.asarray(sample_tokens(rng, (2, 24 - t - 1)), jnp.int32))
  a = np.asarray(model(tokens, pos, seg))
  b = np.asarray(model(changed, pos, seg))
  np.testing.assert_allclose(a[:, :t + 1], b[:, :t + 1], rtol=0, atol=1e-6)
  assert not np.allclose(a[:, t + 1:], b[:, t + 1:])


@pytest.mark.parametrize("kind", KINDS)
def test_document_masking(kind):
  """A document's logits do not depend on the previous document in the packed window."""
  model = jitted(make_model(kind)[0])
  rng = np.random.default_rng(2)
  doc_a = sample_tokens(rng, 9)  # digits and separators: the position layouts' runs cross it
  doc_b = sample_tokens(rng, 15)
  doc_a2 = sample_tokens(rng, 9)  # a different previous document
  packed = lambda a: jnp.asarray(np.concatenate([a, doc_b])[None], jnp.int32)
  pos = jnp.asarray(np.concatenate([np.arange(9), np.arange(15)])[None], jnp.int32)
  seg = jnp.asarray(np.concatenate([np.ones(9), 2 * np.ones(15)])[None], jnp.int32)
  one = np.asarray(model(packed(doc_a), pos, seg))[0, 9:]
  two = np.asarray(model(packed(doc_a2), pos, seg))[0, 9:]
  alone = np.asarray(model(jnp.asarray(doc_b[None], jnp.int32), jnp.arange(15)[None],
                           jnp.ones((1, 15), jnp.int32)))[0]
  np.testing.assert_allclose(one, two, rtol=0, atol=1e-6)
  np.testing.assert_allclose(one, alone, rtol=0, atol=2e-5)


@pytest.mark.parametrize("activation,tie", [("gelu", True), ("swiglu", False)])
def test_decoder_options(activation, tie):
  model, c = make_model("rope", mlp_activation=activation, tie_embeddings=tie)
  params = nnx.state(model, nnx.Param)
  names = {"/".join(map(str, p)) for p, _ in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))[0]}
  assert any("wi_up" in n for n in names) == (activation == "swiglu")
  assert any(n.startswith("'head'") or "head" in n.split("/")[0] for n in names) == (not tie)
  out = model(jnp.zeros((1, 4), jnp.int32), jnp.arange(4)[None], jnp.ones((1, 4), jnp.int32))
  assert out.shape == (1, 4, c.model.vocab_size) and out.dtype == jnp.float32


def test_bfloat16_compute_keeps_float32_logits():
  model, _ = make_model("alibi", dtype="bfloat16")
  out = model(jnp.zeros((1, 4), jnp.int32), jnp.arange(4)[None], jnp.ones((1, 4), jnp.int32))
  assert out.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(out)))


def _packed_batch(seq=21, first_doc=6, seed=3):
  rng = np.random.default_rng(seed)
  tokens = jnp.asarray(rng.integers(0, 256, size=(2, seq)), jnp.int32)
  pos = np.concatenate([np.arange(first_doc), np.arange(seq - first_doc)])
  seg = np.concatenate([np.ones(first_doc), 2 * np.ones(seq - first_doc)])
  return (tokens, jnp.asarray(pos[None].repeat(2, 0), jnp.int32),
          jnp.asarray(seg[None].repeat(2, 0), jnp.int32))


@pytest.mark.parametrize("kind", KINDS)
def test_query_chunked_attention_matches_full(kind):
  """Chunks of 8 queries (3 chunks, the last partial) and of 2 (11), both more than evaluation
  unrolls (UNROLLED_CHUNKS): lax.map over key blocks with the online softmax, keys padded to
  whole blocks (CoPE: whole key ranges), give the logits of full attention, two packed
  documents."""
  batch = _packed_batch()
  full = np.asarray(jitted(make_model(kind, attention_chunk=0)[0])(*batch))
  for chunk in (8, 2):
    chunked = jitted(make_model(kind, attention_chunk=chunk)[0])
    np.testing.assert_allclose(np.asarray(chunked(*batch)), full, rtol=0, atol=2e-5,
                               err_msg=f"attention_chunk={chunk}")


@pytest.mark.parametrize("kind,window,train,chunk", [(kind, 0, True, 8) for kind in KINDS] + [
    ("rope", 0, True, 2), ("rope", 5, True, 2), ("alibi", 0, False, 2),
    ("kerple_log", 0, False, 2), ("sandwich", 0, False, 2), ("rope", 5, False, 2),
    ("cope", 5, False, 2)])
def test_chunked_attention_has_the_gradients_of_full_attention(kind, window, train, chunk):
  """Gradients through query chunks equal those of unchunked attention, with and without a
  sliding window: in training form (train=True: the unrolled loop over exact key ranges) and
  in evaluation form (lax.map + the key-block scan with lax.cond, also differentiable). Every
  scheme through 3 chunks of 8 (the last partial: 21 queries); a few through 11 chunks of 2
  (each unrolled chunk costs compile time, not coverage)."""
  tokens, pos, seg = _packed_batch()

  def grads(chunk):
    model, _ = make_model(kind, attention_chunk=chunk, sliding_window=window)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
      logits = nnx.merge(graphdef, p, rest)(tokens, pos, seg, train=train)
      return jnp.mean(jax.nn.logsumexp(logits, -1) - logits[..., 0])

    return jax.jit(jax.grad(loss))(params)

  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               grads(chunk), grads(0))


def test_sliding_window_mask():
  mask = np.asarray(attention_mask(5, 5, window=2))[0, 0]
  expected = np.array([[1, 0, 0, 0, 0],
                       [1, 1, 0, 0, 0],
                       [0, 1, 1, 0, 0],
                       [0, 0, 1, 1, 0],
                       [0, 0, 0, 1, 1]], bool)
  np.testing.assert_array_equal(mask, expected)
  # A query chunk [3, 5) against keys [0, 5): the same rows.
  np.testing.assert_array_equal(np.asarray(attention_mask(2, 5, window=2))[0, 0], expected[3:])


def test_sliding_window_layers_and_locality():
  from models.decoder import layer_window
  _, c = make_model("rope", sliding_window=4, global_every=2)
  assert [layer_window(c.model, i) for i in range(4)] == [4, 0, 4, 0]
  model, _ = make_model("rope", sliding_window=4, global_every=0, num_layers=1)
  rng = np.random.default_rng(4)
  tokens = jnp.asarray(rng.integers(0, 256, size=(1, 12)), jnp.int32)
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)
  changed = tokens.at[0, 0].set((tokens[0, 0] + 1) % 256)
  a, b = np.asarray(model(tokens, pos, seg)), np.asarray(model(changed, pos, seg))
  # One windowed layer: token 0 is out of reach from position 4 on.
  np.testing.assert_allclose(a[0, 4:], b[0, 4:], rtol=0, atol=1e-6)
  assert not np.allclose(a[0, :4], b[0, :4])


def test_logn_scale_values():
  from models.attention import logn_scale
  got = np.asarray(logn_scale(jnp.array([[0, 1, 255, 1023]]), 256))
  np.testing.assert_allclose(got[0], [0.0, np.log(2) / np.log(256), 1.0, np.log(1024) / np.log(256)],
                             rtol=1e-6)
  plain, _ = make_model("alibi")
  scaled, _ = make_model("alibi", logn_scaling=True)
  tokens = jnp.zeros((1, 8), jnp.int32).at[0, 3].set(7)
  pos, seg = jnp.arange(8)[None], jnp.ones((1, 8), jnp.int32)
  assert not np.allclose(np.asarray(plain(tokens, pos, seg)), np.asarray(scaled(tokens, pos, seg)))


def test_training_unrolls_at_most_a_bounded_number_of_chunks():
  """Training unrolls its query chunks, widening them beyond TRAIN_UNROLLED_CHUNKS, so the
  program does not grow with the length (782 chunks of 128 at 100,000 tokens compiled for
  minutes): 32 and 64 chunks of 2 trace to as many products as 16; the values stay exact."""
  from models.attention import TRAIN_UNROLLED_CHUNKS
  model, _ = make_model("alibi", attention_chunk=2, num_layers=1)
  full, _ = make_model("alibi", attention_chunk=0, num_layers=1)

  def products(seq):
    tokens = jnp.zeros((1, seq), jnp.int32)
    pos, seg = jnp.arange(seq)[None], jnp.ones((1, seq), jnp.int32)
    jaxpr = jax.make_jaxpr(lambda t: model(t, pos, seg, train=True))(tokens)
    return sum(e.primitive.name == "dot_general" for e in jaxpr.eqns)

  assert TRAIN_UNROLLED_CHUNKS == 16
  assert products(2 * 16) == products(2 * 32) == products(2 * 64)
  tokens, pos, seg = _packed_batch(seq=64, first_doc=20)
  np.testing.assert_allclose(np.asarray(jitted(model)(tokens, pos, seg, train=True)),
                             np.asarray(jitted(full)(tokens, pos, seg)), rtol=0, atol=2e-5)
