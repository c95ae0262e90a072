"""FIRE (arXiv 2310.04418) and Sandwich (arXiv 2212.10356) against values from their definitions."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs import base
from configs.validate import ConfigError
from models import positions
from models.positions.fire import (FIRE, FIRE_EPS, fire_mlp, fire_normalized_distance, fire_psi)
from models.positions.sandwich import (Sandwich, sandwich_frequencies, sandwich_head_ratios,
                                       sandwich_inner_product)

DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=2, train_len=32)


def position_cfg(kind, **kw):
  """The real `model.position` section (its field names and defaults), with overrides of any
  type (bad values included)."""
  c = ml_collections.ConfigDict(base.get_config().model.position.to_dict(), type_safe=False)
  c.kind = kind
  c.update(kw)
  return c


def fire(**kw):
  return FIRE(position_cfg("fire", **kw), DIMS, rngs=nnx.Rngs(0))


# Arbitrary, packed positions: row 0 jumps (transformed ids), row 1 restarts (two documents).
POS = np.array([[3, 4, 100, 101, 700, 2000],
                [0, 1, 2, 0, 1, 2]], np.int32)


# ------------------------------------------------------------------ FIRE (arXiv 2310.04418)

def reference_normalized(i, j, c, L):
  """psi(i - j) / psi(max(L, i)), psi(x) = log(c x + 1), plus the listing's eps."""
  return math.log(c * (i - j) + 1) / (math.log(c * max(L, i) + 1) + FIRE_EPS)


@pytest.mark.parametrize("i,j,c,L", [
    (5, 2, 0.1, 512.0),      # short context: the threshold L normalises
    (1000, 10, 0.1, 512.0),  # beyond L: the query position normalises
    (7, 7, 0.5, 3.0),        # zero distance -> 0
    (3, 0, 2.0, 10.0),
    (64, 0, 1.0, 16.0),      # j = 0 beyond L -> psi(i) / psi(i) ~ 1
    (0, 0, 0.1, 512.0),
])
def test_fire_normalized_distance_by_hand(i, j, c, L):
  got = fire_normalized_distance(jnp.array([[i]]), jnp.array([[j]]), jnp.float32(c), jnp.float32(L))
  assert got.shape == (1, 1, 1) and got.dtype == jnp.float32
  assert float(got[0, 0, 0]) == pytest.approx(reference_normalized(i, j, c, L), rel=1e-5, abs=1e-7)


def test_fire_normalized_distance_literal_values():
  # i=5, j=2, c=0.1, L=512: log(1.3) / log(52.2).
  got = fire_normalized_distance(jnp.array([[5]]), jnp.array([[2]]), jnp.float32(0.1),
                                 jnp.float32(512.0))
  assert float(got[0, 0, 0]) == pytest.approx(0.26236426 / 3.95508249, rel=1e-5)
  # psi uses |c x|: a negative c gives the same values (c is kept positive through |c|).
  neg = fire_normalized_distance(jnp.array([[5]]), jnp.array([[2]]), jnp.float32(-0.1),
                                 jnp.float32(512.0))
  assert float(neg[0, 0, 0]) == pytest.approx(float(got[0, 0, 0]), rel=1e-6)
  assert float(fire_psi(jnp.float32(9.0), jnp.float32(1.0))) == pytest.approx(math.log(10.0))


def numpy_fire_bias(scheme, layer, q_pos, k_pos):
  """The definition, in numpy float64 from the scheme's parameter values."""
  f = scheme.function(layer)
  c = float(f.c[...])
  L = abs(float(f.threshold_scale[...])) * scheme.init_threshold
  w1, b1 = np.asarray(f.w1[...], np.float64), np.asarray(f.b1[...], np.float64)
  w2, b2 = np.asarray(f.w2[...], np.float64), np.asarray(f.b2[...], np.float64)
  out = np.empty((q_pos.shape[0], w2.shape[1], q_pos.shape[1], k_pos.shape[1]))
  for b in range(q_pos.shape[0]):
    for qi, i in enumerate(q_pos[b]):
      for kj, j in enumerate(k_pos[b]):
        x = math.log(abs(c * (i - j)) + 1) / (math.log(abs(c * max(L, i)) + 1) + FIRE_EPS)
        out[b, :, qi, kj] = np.maximum(x * w1[0] + b1, 0.0) @ w2 + b2
  return out


@pytest.mark.parametrize("threshold", [512.0, 4.0])
def test_fire_bias_is_the_mlp_of_the_normalized_distance(threshold):
  scheme = fire(fire_init_threshold=threshold, fire_init_c=0.3)
  pos = jnp.asarray(POS)
  for layer in (0, 1):
    bias = scheme.bias(pos, pos, layer)
    assert bias.shape == (2, 4, 6, 6) and bias.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(bias), numpy_fire_bias(scheme, layer, POS, POS),
                               rtol=1e-5, atol=1e-5)
  # And via the module's own pieces, for a query chunk against keys [0, c1) (as attention calls).
  f = scheme.function(1)
  x = fire_normalized_distance(pos[:, 2:4], pos[:, :4], f.c[...], scheme.threshold(1))
  np.testing.assert_allclose(np.asarray(scheme.bias(pos[:, 2:4], pos[:, :4], 1)),
                             np.asarray(fire_mlp(x, f.w1[...], f.b1[...], f.w2[...], f.b2[...])),
                             rtol=1e-6, atol=1e-6)


def test_fire_chunked_queries_match_the_full_bias():
  scheme = fire()
  pos = jnp.asarray(POS)
  full = np.asarray(scheme.bias(pos, pos, 0))
  chunk = np.asarray(scheme.bias(pos[:, 2:4], pos[:, :4], 0))
  np.testing.assert_allclose(chunk, full[:, :, 2:4, :4], rtol=1e-6, atol=1e-6)


def test_fire_initial_values_follow_the_config():
  scheme = fire(fire_init_c=0.25, fire_init_threshold=100.0, fire_mlp_width=8)
  f = scheme.function(0)
  assert float(f.c[...]) == 0.25 and float(f.threshold_scale[...]) == 1.0
  assert float(scheme.threshold(0)) == 100.0
  # torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  for name, bound in (("w1", 1.0), ("b1", 1.0), ("w2", 8 ** -0.5), ("b2", 8 ** -0.5)):
    value = np.asarray(getattr(f, name)[...])
    assert np.all(np.abs(value) <= bound) and np.std(value) > 0, name


def test_fire_per_layer_and_shared_shapes():
  per_layer = fire(per_layer=True, fire_mlp_width=32)
  assert len(per_layer.functions) == DIMS.num_layers
  f = per_layer.function(1)
  assert f.c[...].shape == () and f.threshold_scale[...].shape == ()
  assert f.w1[...].shape == (1, 32) and f.b1[...].shape == (32,)
  assert f.w2[...].shape == (32, 4) and f.b2[...].shape == (4,)
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(per_layer, nnx.Param)))
  assert n_params == DIMS.num_layers * (2 + 32 + 32 + 32 * 4 + 4)
  pos = jnp.asarray(POS)
  assert not np.allclose(per_layer.bias(pos, pos, 0), per_layer.bias(pos, pos, 1))

  shared = fire(per_layer=False, fire_mlp_width=32)
  assert len(shared.functions) == 1
  assert shared.function(0) is shared.function(1)
  n_params = sum(x.size for x in jax.tree.leaves(nnx.state(shared, nnx.Param)))
  assert n_params == 2 + 32 + 32 + 32 * 4 + 4
  np.testing.assert_array_equal(shared.bias(pos, pos, 0), shared.bias(pos, pos, 1))


def test_fire_gradients_reach_c_threshold_and_mlp():
  # L = 4 tokens: queries at positions < 4 use the threshold, later ones their own position.
  scheme = fire(fire_init_threshold=4.0, per_layer=True)
  pos = jnp.broadcast_to(jnp.arange(10, dtype=jnp.int32), (2, 10))
  weights = jnp.asarray(np.random.default_rng(0).normal(size=(2, 4, 10, 10)), jnp.float32)
  causal = jnp.tril(jnp.ones((10, 10), bool))
  graphdef, params = nnx.split(scheme, nnx.Param)

  def loss(params):
    bias = nnx.merge(graphdef, params).bias(pos, pos, 0)
    return jnp.sum(jnp.where(causal, bias * weights, 0.0))

  grads = nnx.merge(graphdef, jax.jit(jax.grad(loss))(params))  # a FIRE holding the gradients
  used, unused = grads.function(0), grads.function(1)
  for name in ("c", "threshold_scale", "w1", "b1", "w2", "b2"):
    g = np.asarray(getattr(used, name)[...])
    assert np.all(np.isfinite(g)), name
    assert np.any(g != 0), name
    # Layer 1's parameter set is not used by layer 0's bias.
    np.testing.assert_array_equal(np.asarray(getattr(unused, name)[...]), 0.0)


@pytest.mark.parametrize("field,value", [
    ("fire_mlp_width", 0), ("fire_mlp_width", 2.5), ("fire_init_c", 0.0), ("fire_init_c", -0.1),
    ("fire_init_threshold", 0.0), ("fire_init_threshold", float("inf")), ("per_layer", "yes")])
def test_fire_bad_fields(field, value):
  with pytest.raises(ConfigError, match=f"model.position.{field}"):
    FIRE.check_config(position_cfg("fire", **{field: value}), DIMS)
  FIRE.check_config(position_cfg("fire"), DIMS)  # the defaults are valid


# ------------------------------------------------------------------ Sandwich (arXiv 2212.10356)

def test_sandwich_frequencies_and_head_ratios():
  # i = 1..d'/2: 10000^(-2i/d').
  np.testing.assert_allclose(sandwich_frequencies(4), [1e-2, 1e-4], rtol=1e-12)
  np.testing.assert_allclose(sandwich_frequencies(8), [1e-1, 1e-2, 1e-3, 1e-4], rtol=1e-12)
  # ALiBi's ratios 8h/H.
  np.testing.assert_allclose(sandwich_head_ratios(4), [2, 4, 6, 8])
  np.testing.assert_allclose(sandwich_head_ratios(8), [1, 2, 3, 4, 5, 6, 7, 8])


def test_sandwich_inner_product_is_the_dot_product_of_sinusoids():
  """p_m . p_n with p_m = [sin(m w_i), cos(m w_i)]_i equals sum_i cos((m - n) w_i)."""
  d = 8
  w = sandwich_frequencies(d)
  for m, n in [(0, 0), (5, 2), (40, 3), (1000, 999), (7, 300)]:
    p_m = np.concatenate([np.sin(m * w), np.cos(m * w)])
    p_n = np.concatenate([np.sin(n * w), np.cos(n * w)])
    got = sandwich_inner_product(jnp.float32(m - n), jnp.asarray(w, jnp.float32))
    assert float(got) == pytest.approx(float(p_m @ p_n), abs=1e-5)
  assert float(sandwich_inner_product(jnp.float32(0), jnp.asarray(w, jnp.float32))) == d / 2


def test_sandwich_bias_by_hand():
  dims = positions.Dims(num_heads=2, head_dim=16, d_model=32, num_layers=1, train_len=32)
  scheme = Sandwich(position_cfg("sandwich", sandwich_dim=4), dims, rngs=None)
  assert scheme.dim == 4
  pos = np.array([[0, 1, 2, 5, 9]], np.int32)
  bias = np.asarray(scheme.bias(jnp.asarray(pos), jnp.asarray(pos), layer=0))
  assert bias.shape == (1, 2, 5, 5) and bias.dtype == np.float32
  for h, ratio in enumerate([4.0, 8.0]):  # 8h/H for H = 2
    for a in range(5):
      for b in range(5):
        dist = float(pos[0, a] - pos[0, b])
        expected = (math.cos(dist / 100) + math.cos(dist / 10000) - 2) / ratio
        assert bias[0, h, a, b] == pytest.approx(expected, abs=1e-6)
  # Distance 1, head 0 (ratio 8 * 1 / 2 = 4): (cos(0.01) + cos(0.0001) - 2) / 4.
  assert bias[0, 0, 1, 0] == pytest.approx((0.99995000042 + 0.999999995 - 2) / 4, abs=1e-7)


def test_sandwich_zero_distance_and_sign():
  scheme = Sandwich(position_cfg("sandwich"), DIMS, rngs=None)
  assert scheme.dim == DIMS.head_dim  # -1 = head_dim
  pos = jnp.asarray(POS)
  bias = np.asarray(scheme.bias(pos, pos, 0))
  assert bias.shape == (2, 4, 6, 6)
  for h in range(4):
    np.testing.assert_array_equal(np.diagonal(bias[:, h], axis1=1, axis2=2), 0.0)
  assert np.all(bias <= 1e-6)
  # Row 1 restarts positions: equal positions in two documents give zero bias too.
  np.testing.assert_array_equal(bias[1, :, 3, 0], 0.0)


@pytest.mark.parametrize("offset", [1, 37, 1000])
def test_sandwich_depends_only_on_relative_position(offset):
  scheme = Sandwich(position_cfg("sandwich", sandwich_dim=8), DIMS, rngs=None)
  pos = jnp.asarray(POS)
  base_bias = np.asarray(scheme.bias(pos, pos, 0))
  shifted = np.asarray(scheme.bias(pos + offset, pos + offset, 1))
  np.testing.assert_allclose(shifted, base_bias, atol=2e-4)
  # Even in m - n; heads differ only by their ratio.
  np.testing.assert_allclose(base_bias, np.swapaxes(base_bias, 2, 3), atol=1e-6)
  np.testing.assert_allclose(base_bias[:, 0] / base_bias[:, 0].min(),
                             base_bias[:, 3] / base_bias[:, 3].min(), atol=1e-5)


def test_sandwich_chunked_queries_and_no_parameters():
  scheme = Sandwich(position_cfg("sandwich"), DIMS, rngs=None)
  pos = jnp.asarray(POS)
  full = np.asarray(scheme.bias(pos, pos, 0))
  np.testing.assert_allclose(np.asarray(scheme.bias(pos[:, 3:], pos, 0)), full[:, :, 3:],
                             atol=1e-6)
  assert not jax.tree.leaves(nnx.state(scheme, nnx.Param))
  assert scheme.max_position is None


@pytest.mark.parametrize("value", [0, 3, -2, 2.0, True])
def test_sandwich_bad_dim(value):
  with pytest.raises(ConfigError, match="model.position.sandwich_dim"):
    Sandwich.check_config(position_cfg("sandwich", sandwich_dim=value), DIMS)
  Sandwich.check_config(position_cfg("sandwich", sandwich_dim=6), DIMS)
  odd = positions.Dims(num_heads=3, head_dim=5, d_model=15, num_layers=1, train_len=8)
  with pytest.raises(ConfigError, match="model.position.sandwich_dim"):
    Sandwich.check_config(position_cfg("sandwich"), odd)
