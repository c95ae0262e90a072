"""Mixed RoPE: interleaved NoPE layers (SWAN-GPT, arXiv 2504.08719) and one base per layer."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs.validate import ConfigError, validate
from conftest import tiny_config
from models import positions
from models.positions.rope import apply_rope, is_nope_layer, rope_inv_freq

DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=6, train_len=32)


def rope_cfg(**kw):
  c = ml_collections.ConfigDict(dict(kind="rope", rope_theta=10000.0, rotary_fraction=1.0,
                                     nope_every=0, rope_theta_per_layer=()))
  c.update(kw)
  return c


def qk_pos(seed=0, b=2, s=7):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, s, 4, 16)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(b, s, 4, 16)), jnp.float32)
  pos = jnp.asarray(rng.integers(0, 500, size=(b, s)), jnp.int32)
  return q, k, pos


def test_nope_layer_indices():
  assert [is_nope_layer(i, 3) for i in range(7)] == [False, False, True, False, False, True, False]
  assert [is_nope_layer(i, 1) for i in range(3)] == [True, True, True]
  assert not any(is_nope_layer(i, 0) for i in range(10))


def test_nope_layers_return_q_k_unchanged_bit_identically():
  scheme = positions.build(rope_cfg(nope_every=3), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk_pos()
  for layer in range(DIMS.num_layers):
    q2, k2 = scheme.rotate(q, k, pos, pos, layer)
    if layer in (2, 5):
      assert q2 is q and k2 is k
      assert np.array_equal(np.asarray(q2), np.asarray(q)) and np.array_equal(np.asarray(k2), np.asarray(k))
    else:  # the other layers are plain RoPE, bit for bit
      q3, k3 = plain.rotate(q, k, pos, pos, layer)
      assert np.array_equal(np.asarray(q2), np.asarray(q3)) and np.array_equal(np.asarray(k2), np.asarray(k3))
      assert not np.allclose(np.asarray(q2), np.asarray(q))


def test_per_layer_theta_equals_plain_rope_with_that_theta():
  thetas = (100.0, 1e4, 5e5, 2.0, 1e6, 31.5)
  scheme = positions.build(rope_cfg(rope_theta_per_layer=thetas), DIMS)
  q, k, pos = qk_pos(1)
  for layer, theta in enumerate(thetas):
    got_q, got_k = scheme.rotate(q, k, pos, pos, layer)
    want_q, want_k = positions.build(rope_cfg(rope_theta=theta), DIMS).rotate(q, k, pos, pos, layer)
    assert np.array_equal(np.asarray(got_q), np.asarray(want_q))
    assert np.array_equal(np.asarray(got_k), np.asarray(want_k))
    inv = jnp.asarray(rope_inv_freq(16, theta))
    np.testing.assert_array_equal(np.asarray(got_q), np.asarray(apply_rope(q, pos, inv)))
  # Different bases really differ.
  a = np.asarray(scheme.rotate(q, k, pos, pos, 0)[0])
  b = np.asarray(scheme.rotate(q, k, pos, pos, 2)[0])
  assert not np.allclose(a, b)


def test_both_together_and_partial_rotation():
  thetas = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0)
  scheme = positions.build(rope_cfg(rope_theta_per_layer=thetas, nope_every=2, rotary_fraction=0.5), DIMS)
  q, k, pos = qk_pos(2)
  for layer, theta in enumerate(thetas):
    got_q, _ = scheme.rotate(q, k, pos, pos, layer)
    if layer % 2 == 1:
      assert got_q is q
    else:
      want_q, _ = positions.build(rope_cfg(rope_theta=theta, rotary_fraction=0.5), DIMS).rotate(
          q, k, pos, pos, layer)
      assert np.array_equal(np.asarray(got_q), np.asarray(want_q))
      assert np.array_equal(np.asarray(got_q)[..., 8:], np.asarray(q)[..., 8:])


def test_defaults_are_plain_rope():
  """Both off (or the fields absent, as in older configs): every layer is the same plain RoPE."""
  q, k, pos = qk_pos(3)
  inv = jnp.asarray(rope_inv_freq(16, 10000.0))
  old_style = ml_collections.ConfigDict(dict(kind="rope", rope_theta=10000.0, rotary_fraction=1.0))
  for cfg in (rope_cfg(), old_style):
    scheme = positions.build(cfg, DIMS)
    assert scheme.layer_inv_freq is None
    for layer in range(DIMS.num_layers):
      got_q, got_k = scheme.rotate(q, k, pos, pos, layer)
      assert np.array_equal(np.asarray(got_q), np.asarray(apply_rope(q, pos, inv)))
      assert np.array_equal(np.asarray(got_k), np.asarray(apply_rope(k, pos, inv)))


@pytest.mark.parametrize("field,value,match", [
    ("rope_theta_per_layer", (1e4, 1e4), r"rope_theta_per_layer needs exactly model\.num_layers=6"),
    ("rope_theta_per_layer", (1e4,) * 7, r"rope_theta_per_layer needs exactly model\.num_layers=6"),
    ("rope_theta_per_layer", (1e4,) * 5 + (0.5,), r"rope_theta_per_layer\[5\] must be a number > 1"),
    ("rope_theta_per_layer", 1e4, r"model\.position\.rope_theta_per_layer must be a tuple"),
    ("nope_every", -1, r"model\.position\.nope_every must be an integer >= 0"),
    ("nope_every", 1.5, r"model\.position\.nope_every must be an integer >= 0"),
])
def test_bad_mixed_fields_name_themselves(field, value, match):
  cfg = rope_cfg()
  with cfg.ignore_type():
    cfg[field] = value
  with pytest.raises(ConfigError, match=match) as e:
    positions.build(cfg, DIMS, check_only=True)
  assert "\n" not in str(e.value)


def test_validate_rejects_a_wrong_length_theta_tuple():
  c = tiny_config("unused", "rope")
  c.model.position.rope_theta_per_layer = (1e4, 5e5)
  validate(c, 1)  # tiny_config has 2 layers
  c.model.position.rope_theta_per_layer = (1e4, 5e5, 1e6)
  with pytest.raises(ConfigError, match="model.position.rope_theta_per_layer"):
    validate(c, 1)
  c.model.position.rope_theta_per_layer = ()
  c.model.position.nope_every = -2
  with pytest.raises(ConfigError, match="model.position.nope_every"):
    validate(c, 1)


def test_decoder_with_mixed_rope_runs_under_jit():
  """The per-layer tables are static module data: split/merge and jit work, NoPE layers included."""
  import jax
  from flax import nnx
  from models.decoder import Decoder
  c = tiny_config("unused", "rope")
  c.model.position.nope_every = 2
  c.model.position.rope_theta_per_layer = (500.0, 1e4)
  model = Decoder(c, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, 16)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (2, 16))
  seg = jnp.ones((2, 16), jnp.int32)
  logits = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t, pos, seg))(state, tokens)
  assert logits.shape == (2, 16, c.model.vocab_size) and bool(jnp.all(jnp.isfinite(logits)))
  eager = model(tokens, pos, seg)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(eager), rtol=1e-5, atol=1e-5)
