"""LeRoPE (kind='lerope'): learned RoPE frequencies, the 1-D case of RoPE-Mixed (arXiv 2403.13298)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs.validate import ConfigError, validate
from conftest import tiny_config
from models import positions
from models.positions.lerope import LeRoPE, apply_rope_per_head
from models.positions.rope import RoPE, apply_rope, rope_inv_freq

DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=3, train_len=32)


def cfg(**kw):
  c = ml_collections.ConfigDict(dict(kind="lerope", rope_theta=10000.0, rotary_fraction=1.0,
                                     nope_every=0, rope_theta_per_layer=(), rope_heads=-1,
                                     rope_scaling="none", lerope_per_head=True,
                                     lerope_log_space=True))
  c.update(kw)
  return c


def qk_pos(seed=0, b=2, s=7, heads=4, d=16):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, s, heads, d)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(b, s, heads, d)), jnp.float32)
  pos = jnp.asarray(rng.integers(0, 500, size=(b, s)), jnp.int32)
  return q, k, pos


@pytest.mark.parametrize("per_head,log_space", [(True, True), (False, True), (True, False)])
def test_an_untrained_lerope_rotates_as_rope(per_head, log_space):
  scheme = LeRoPE(cfg(lerope_per_head=per_head, lerope_log_space=log_space), DIMS,
                  rngs=nnx.Rngs(0))
  q, k, pos = qk_pos()
  freq = rope_inv_freq(16, 10000.0)
  for layer in range(3):
    qr, kr = scheme.rotate(q, k, pos, pos, layer)
    np.testing.assert_allclose(qr, apply_rope(q, pos, jnp.asarray(freq)), atol=2e-5)
    np.testing.assert_allclose(kr, apply_rope(k, pos, jnp.asarray(freq)), atol=2e-5)


def test_per_head_frequencies_rotate_each_head_with_its_own_vector():
  rng = np.random.default_rng(1)
  inv = jnp.asarray(rng.uniform(1e-3, 1.0, size=(4, 8)), jnp.float32)
  q, _, pos = qk_pos(2)
  out = apply_rope_per_head(q, pos, inv)
  for h in range(4):
    np.testing.assert_allclose(out[:, :, h], apply_rope(q[:, :, h:h + 1], pos, inv[h])[:, :, 0],
                               atol=1e-5)


def test_the_gradient_in_a_log_frequency_is_the_analytic_one():
  # head_dim 2, one pair, q = k = (1, 0): the score is cos((m - n) theta), so
  # d score / d ln theta = -(m - n) theta sin((m - n) theta).
  dims = positions.Dims(num_heads=1, head_dim=2, d_model=2, num_layers=1, train_len=32)
  scheme = LeRoPE(cfg(), dims, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(scheme, nnx.Param)
  x = jnp.asarray([[[[1.0, 0.0]], [[1.0, 0.0]]]], jnp.float32)  # [1, 2, 1, 2]
  pos = jnp.asarray([[3, 10]], jnp.int32)

  def score(p):
    model = nnx.merge(graphdef, p)
    qr, kr = model.rotate(x, x, pos, pos, 0)
    return jnp.sum(qr[0, 1, 0] * kr[0, 0, 0])

  grad = jax.grad(score)(params)
  theta = 1.0  # rope_inv_freq(2, .)[0] = theta^0
  want = -(10 - 3) * theta * np.sin((10 - 3) * theta)
  np.testing.assert_allclose(float(score(params)), np.cos(7.0), atol=1e-6)
  np.testing.assert_allclose(float(grad["freq"][0][...][0]), want, rtol=1e-5)


def test_parameters_are_one_dimensional_and_nope_layers_own_none():
  scheme = LeRoPE(cfg(nope_every=3), DIMS, rngs=nnx.Rngs(0))
  shapes = [p[...].shape for p in scheme.freq]
  assert shapes == [(4 * 8,), (4 * 8,)]  # layers 0, 1 rotary; layer 2 NoPE
  q, k, pos = qk_pos()
  qr, kr = scheme.rotate(q, k, pos, pos, 2)
  assert qr is q and kr is k
  assert not RoPE(cfg(kind="rope"), DIMS, rngs=nnx.Rngs(0)).per_head_rotation
  assert scheme.per_head_rotation


def test_per_layer_bases_start_each_layer_from_its_base():
  scheme = LeRoPE(cfg(rope_theta_per_layer=(100.0, 1e4, 1e6), lerope_per_head=False), DIMS,
                  rngs=nnx.Rngs(0))
  for layer, theta in enumerate((100.0, 1e4, 1e6)):
    np.testing.assert_allclose(scheme.learned_inv_freq(layer), rope_inv_freq(16, theta), rtol=1e-6)


@pytest.mark.parametrize("field,value,message", [
    ("rope_scaling", "yarn", r"model.position.rope_scaling='yarn' applies to the kinds .* got kind='lerope'"),
    ("rope_heads", 2, "model.position.rope_heads must be -1 with kind='lerope'"),
])
def test_bad_lerope_fields_are_refused_by_name(field, value, message):
  config = tiny_config("unused", "lerope")
  config.model.position[field] = value
  with pytest.raises(ConfigError, match=message):
    validate(config, 1)


def test_a_lerope_decoder_learns_its_frequencies():
  from models.decoder import Decoder
  config = tiny_config("unused", "lerope")
  validate(config, 1)
  model = Decoder(config, rngs=nnx.Rngs(0))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 16)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (2, 16))
  graphdef, params = nnx.split(model, nnx.Param)

  def loss(p):
    logits = nnx.merge(graphdef, p)(tokens, pos, jnp.ones_like(tokens))
    return -jnp.mean(jax.nn.log_softmax(logits)[:, :-1].max(-1))

  grads = jax.grad(loss)(params)
  g = grads["position"]["freq"][0][...]
  assert g.shape == (config.model.num_heads * 8,) and float(jnp.abs(g).max()) > 0
