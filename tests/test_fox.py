"""FoX (Lin et al., arXiv 2503.02130): the forget-gate decay bias against hand-computed values,
against ALiBi with constant gates, and through packed documents and cached decoding."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs import base
from configs.validate import ConfigError
from conftest import sample_tokens, tiny_config
from models import positions
from models.decoder import Decoder
from models.positions.alibi import alibi_slopes
from models.positions.fox import FoX, segmented_cumsum

DIMS = positions.Dims(num_heads=2, head_dim=8, d_model=4, num_layers=1, train_len=8)


def position_cfg(**kw):
  c = ml_collections.ConfigDict(base.get_config().model.position.to_dict())
  c.kind = "fox"
  c.update(kw)
  return c


def logit(p):
  return math.log(p / (1 - p))


def test_decay_bias_by_hand():
  """4 tokens, one-hot inputs, gates f = (0.9, 0.5, 0.25, 0.8) on head 0 and 1/2 on head 1:
  D_ij = log prod_{l=j+1..i} f_l, written out."""
  scheme = FoX(position_cfg(), DIMS, rngs=nnx.Rngs(0))
  gates = [0.9, 0.5, 0.25, 0.8]
  w = np.zeros((1, 4, 2), np.float32)
  w[0, :, 0] = [logit(f) for f in gates]  # token t is e_t: its logit is w[t]
  scheme.gate_w[...] = jnp.asarray(w)
  scheme.gate_b[...] = jnp.zeros((1, 2))
  x = jnp.eye(4, dtype=jnp.float32)[None]
  one_doc = jnp.ones((1, 4), jnp.int32)
  c = scheme.sequence_context(scheme.token_context(x, 0), one_doc)
  d = np.asarray(scheme.bias(None, None, 0, q_context=c, k_context=c))[0]
  log = math.log
  expected0 = np.array([[0, 0, 0, 0],  # entries above the diagonal are masked later
                        [log(.5), 0, 0, 0],
                        [log(.125), log(.25), 0, 0],
                        [log(.1), log(.2), log(.8), 0]])
  lower = np.tril(np.ones((4, 4), bool))
  np.testing.assert_allclose(d[0][lower], expected0[lower], rtol=1e-6, atol=1e-6)
  distance = np.arange(4)[:, None] - np.arange(4)[None]
  np.testing.assert_allclose(d[1][lower], (log(.5) * distance)[lower], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.asarray(c)[0, :, 0], np.log([.9, .45, .1125, .09]), rtol=1e-6)
  # Two packed documents [0, 1] [2, 3]: the sum restarts at the second.
  packed = segmented_cumsum(scheme.token_context(x, 0), jnp.array([[1, 1, 2, 2]]))
  np.testing.assert_allclose(np.asarray(packed)[0, :, 0], np.log([.9, .45, .25, .2]), rtol=1e-6)
  packed = segmented_cumsum(scheme.token_context(x, 0), jnp.array([[1, 2, 2, 2]]))
  np.testing.assert_allclose(np.asarray(packed)[0, :, 0], np.log([.9, .5, .125, .1]), rtol=1e-6)


def fox_as_alibi(config):
  """(alibi model, fox model) with equal parameters except FoX's gates: w = 0 and
  b_h = -log(expm1(m_h)), so that log sigmoid(b_h) = -m_h, ALiBi's slopes."""
  config.model.position.kind = "alibi"
  alibi = Decoder(config, rngs=nnx.Rngs(0))
  config.model.position.kind = "fox"
  fox = Decoder(config, rngs=nnx.Rngs(0))
  shared = nnx.to_pure_dict(nnx.state(alibi, nnx.Param))
  state = nnx.to_pure_dict(nnx.state(fox, nnx.Param))
  state.update({k: v for k, v in shared.items() if k != "position"})
  slopes = alibi_slopes(config.model.num_heads)
  layers = config.model.num_layers
  state["position"]["gate_w"] = jnp.zeros_like(state["position"]["gate_w"])
  state["position"]["gate_b"] = jnp.broadcast_to(
      jnp.asarray(-np.log(np.expm1(slopes)), jnp.float32), (layers, len(slopes)))
  nnx.update(fox, state)
  return alibi, fox


def test_constant_gates_reproduce_alibi():
  """Logits and every layer's attention probabilities equal ALiBi's, on two packed documents."""
  c = tiny_config("unused", "alibi")
  alibi, fox = fox_as_alibi(c)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(sample_tokens(rng, (2, 24)), jnp.int32)
  pos = jnp.asarray(np.concatenate([np.arange(10), np.arange(14)])[None].repeat(2, 0))
  seg = jnp.asarray(np.concatenate([np.ones(10), 2 * np.ones(14)])[None].repeat(2, 0), jnp.int32)
  np.testing.assert_allclose(np.asarray(fox(tokens, pos, seg)), np.asarray(alibi(tokens, pos, seg)),
                             rtol=1e-5, atol=1e-5)
  probs = lambda m: m.attention_statistics(tokens, pos, seg, lambda p: p)  # noqa: E731
  for a, f in zip(probs(alibi), probs(fox)):
    np.testing.assert_allclose(np.asarray(f), np.asarray(a), rtol=0, atol=1e-6)


def test_gates_depend_on_the_input_and_get_gradients():
  c = tiny_config("unused", "fox")
  c.model.num_layers = 1
  model = Decoder(c, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model, nnx.Param)
  tokens = jnp.asarray(sample_tokens(np.random.default_rng(1), (1, 12)), jnp.int32)
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)

  def loss(state):
    return nnx.merge(graphdef, state)(tokens, pos, seg).sum()

  grads = nnx.to_pure_dict(jax.grad(loss)(state))["position"]
  assert grads["gate_w"].shape == (1, 64, 4) and float(jnp.abs(grads["gate_w"]).sum()) > 0
  assert float(jnp.abs(grads["gate_b"]).sum()) > 0


def test_cached_decoding_across_packed_documents():
  """A prefill ending inside the first document, then one token at a time into the second: the
  cache's log gates and segment ids restart the sum where a full forward does."""
  c = tiny_config("unused", "fox")
  model = Decoder(c, rngs=nnx.Rngs(0))
  tokens = jnp.asarray(sample_tokens(np.random.default_rng(2), (2, 14)), jnp.int32)
  pos = jnp.asarray(np.concatenate([np.arange(6), np.arange(8)])[None].repeat(2, 0))
  seg = jnp.asarray(np.concatenate([np.ones(6), 2 * np.ones(8)])[None].repeat(2, 0), jnp.int32)
  full = np.asarray(model(tokens, pos, seg))
  cache = model.init_cache(2, 14)
  out, cache = model.decode(tokens[:, :4], pos[:, :4], seg[:, :4], cache)
  outs = [out]
  for t in range(4, 14):
    out, cache = model.decode(tokens[:, t:t + 1], pos[:, t:t + 1], seg[:, t:t + 1], cache)
    outs.append(out)
  np.testing.assert_allclose(np.concatenate(outs, axis=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("field,value", [("fox_gate_bias_init", "big"),
                                         ("fox_gate_bias_init", True), ("per_layer", 1)])
def test_bad_fields(field, value):
  # A fresh ConfigDict: assigning to a typed field of an existing one would raise TypeError.
  cfg = ml_collections.ConfigDict({**position_cfg().to_dict(), field: value})
  with pytest.raises(ConfigError, match=f"model.position.{field}"):
    positions.build(cfg, DIMS, check_only=True)


@pytest.mark.parametrize("per_layer", [True, False])
def test_parameters_follow_the_released_init(per_layer):
  """Gate weight normal(init_std) per layer (or shared), gate bias fox_gate_bias_init (0)."""
  scheme = FoX(position_cfg(per_layer=per_layer), DIMS, rngs=nnx.Rngs(0))
  lead = (1,) if per_layer else ()
  assert scheme.gate_w[...].shape == lead + (4, 2) and scheme.gate_b[...].shape == lead + (2,)
  assert float(jnp.abs(scheme.gate_b[...]).max()) == 0.0
  shifted = FoX(position_cfg(fox_gate_bias_init=3.0), DIMS, rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(np.asarray(shifted.gate_b[...]), 3.0)
