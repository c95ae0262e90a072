"""T5 relative bias (arXiv 1910.10683) and KERPLE (arXiv 2205.09921) against their definitions."""

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
from models.attention import attention_mask, dot_product_attention
from models.positions.kerple import EPS, KerpleLog, KerplePower
from models.positions.t5 import T5Bias, relative_position_bucket

DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=2, train_len=32)

# Arbitrary (not arange) positions: two packed documents restarting at 0, a gap, a large jump.
POS = np.array([[0, 1, 2, 3, 0, 1, 50, 51, 300, 2000],
                [9, 10, 11, 12, 13, 200, 201, 0, 1, 2]], np.int32)


def position_cfg(kind, **kw):
  c = ml_collections.ConfigDict(base.get_config().model.position.to_dict())
  c.kind = kind
  c.update(kw)
  return c


def grads_of_bias_sum(scheme, q_pos, k_pos, layer):
  """d/dparams of sum(bias) (a pure dict shaped like the scheme's nnx.State)."""
  graphdef, state = nnx.split(scheme)

  def total(state):
    return nnx.merge(graphdef, state).bias(q_pos, k_pos, layer).sum()

  return nnx.to_pure_dict(jax.grad(total)(state))


# ------------------------------------------------------------------ T5 buckets (Raffel et al.)

def reference_bucket(n, num_buckets, max_distance):
  """Mesh-TF `_relative_position_bucket(-n, bidirectional=False, ...)` for a distance n = i - j."""
  n = max(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return n
  large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                          * (num_buckets - max_exact))
  return min(large, num_buckets - 1)


def test_t5_buckets_by_hand():
  """num_buckets=32, max_distance=128: bucket 16 + floor(16 ln(n/16) / ln 8) for n >= 16."""
  nb, md = 32, 128
  # The first half: exact distances.
  for n in range(16):
    assert relative_position_bucket(-n, nb, md) == n
  # Log-spaced: 16 ln(2)/ln(8) = 16/3 -> 21; 16 ln(4)/ln(8) = 32/3 -> 26; 16 ln(6.25)/ln(8) = 14.1
  # -> 30; 16 ln(7)/ln(8) = 14.97 -> 30; 16 ln(113/16)/ln(8) = 15.02 -> 31; n = 128 -> 16, capped.
  by_hand = {16: 16, 18: 16, 19: 17, 20: 17, 32: 21, 64: 26, 100: 30, 112: 30, 113: 31, 127: 31,
             128: 31, 129: 31, 1000: 31, 10 ** 6: 31}
  for n, bucket in by_hand.items():
    assert relative_position_bucket(-n, nb, md) == bucket, n
  # First distance of each upper bucket (ln-spacing: 16 * 8^(k/16) rounded up).
  starts = [16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113]
  for k, n in enumerate(starts):
    assert relative_position_bucket(-n, nb, md) == 16 + k
    assert relative_position_bucket(-(n - 1), nb, md) == 15 + k
  # Causal: keys after the query (positive relative position) all fall in bucket 0.
  for rp in (1, 5, 1000):
    assert relative_position_bucket(rp, nb, md) == 0


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (2, 2), (8, 20), (16, 64),
                                                      (64, 1000), (32, 17)])
def test_t5_buckets_match_reference_formula(num_buckets, max_distance):
  rel = np.arange(-3 * max_distance - 50, 20)  # key - query
  expected = np.array([reference_bucket(-r, num_buckets, max_distance) for r in rel])
  got_np = relative_position_bucket(rel, num_buckets, max_distance)
  got_jnp = jax.jit(lambda r: relative_position_bucket(r, num_buckets, max_distance))(
      jnp.asarray(rel, jnp.int32))
  np.testing.assert_array_equal(got_np, expected)
  np.testing.assert_array_equal(np.asarray(got_jnp), expected)
  assert np.asarray(got_jnp).dtype == np.int32
  assert expected.min() == 0 and expected.max() == num_buckets - 1


def test_t5_buckets_match_float32_reference_at_default_sizes():
  """The PyTorch/TF references take the logarithm in float32; at T5's sizes they agree with ours."""
  n = np.arange(0, 20000)
  with np.errstate(divide="ignore"):
    val = np.log(n.astype(np.float32) / np.float32(16)) / np.float32(math.log(128 / 16)) * 16
  large = np.minimum(16 + np.where(n >= 16, val, 0).astype(np.int32), 31)
  expected = np.where(n < 16, n, large)
  np.testing.assert_array_equal(relative_position_bucket(-n, 32, 128), expected)


def test_t5_bucket_argument_errors():
  with pytest.raises(ValueError, match="num_buckets"):
    relative_position_bucket(np.array([0]), 7, 128)
  with pytest.raises(ValueError, match="max_distance"):
    relative_position_bucket(np.array([0]), 32, 16)


# ------------------------------------------------------------------ T5 bias

@pytest.mark.parametrize("per_layer", [True, False])
def test_t5_parameter_shapes(per_layer):
  scheme = T5Bias(position_cfg("t5", per_layer=per_layer), DIMS, rngs=nnx.Rngs(0))
  expected = (2, 32, 4) if per_layer else (32, 4)
  assert scheme.table[...].shape == expected
  assert scheme.table.logical_axes == (None,) * len(expected)
  assert scheme.max_position is None
  # Small normal init (std init_std = 0.02), not all equal.
  table = np.asarray(scheme.table[...])
  assert 0.005 < table.std() < 0.05 and np.abs(table).max() < 0.2


@pytest.mark.parametrize("per_layer", [True, False])
def test_t5_bias_is_table_at_bucket_of_distance(per_layer):
  scheme = T5Bias(position_cfg("t5", per_layer=per_layer, num_buckets=8, max_distance=20), DIMS,
                  rngs=nnx.Rngs(0))
  shape = scheme.table[...].shape
  scheme.table[...] = jnp.arange(math.prod(shape), dtype=jnp.float32).reshape(shape)
  q_pos, k_pos = POS[:, 3:9], POS  # a query chunk against all keys
  for layer in range(2):
    bias = np.asarray(scheme.bias(jnp.asarray(q_pos), jnp.asarray(k_pos), layer))
    assert bias.shape == (2, 4, 6, 10) and bias.dtype == np.float32
    table = np.asarray(scheme.table[...])
    table = table[layer] if per_layer else table
    for b in range(2):
      for h in range(4):
        for i in range(6):
          for j in range(10):
            bucket = reference_bucket(int(q_pos[b, i] - k_pos[b, j]), 8, 20)
            assert bias[b, h, i, j] == table[bucket, h]
  same = np.array_equal(scheme.bias(jnp.asarray(POS), jnp.asarray(POS), 0),
                        scheme.bias(jnp.asarray(POS), jnp.asarray(POS), 1))
  assert same != per_layer


def test_t5_bias_is_relative_and_chunkable():
  scheme = T5Bias(position_cfg("t5"), DIMS, rngs=nnx.Rngs(1))
  pos = jnp.asarray(POS)
  full = scheme.bias(pos, pos, 1)
  np.testing.assert_array_equal(scheme.bias(pos + 1234, pos + 1234, 1), full)
  # Attention calls the hook on query chunk [c0, c1) with keys [0, c1).
  np.testing.assert_array_equal(scheme.bias(pos[:, 4:8], pos[:, :8], 1), full[:, :, 4:8, :8])


def test_t5_gradient_counts_pairs_per_bucket():
  """d sum(bias) / d table[l, bucket, h] = number of (batch, i, j) pairs in that bucket."""
  scheme = T5Bias(position_cfg("t5", per_layer=True), DIMS, rngs=nnx.Rngs(0))
  grads = grads_of_bias_sum(scheme, jnp.asarray(POS), jnp.asarray(POS), 1)["table"]
  assert grads.shape == (2, 32, 4) and np.all(np.isfinite(grads))
  counts = np.zeros(32)
  for b in range(2):
    for i in range(10):
      for j in range(10):
        counts[reference_bucket(int(POS[b, i] - POS[b, j]), 32, 128)] += 1
  np.testing.assert_array_equal(grads[0], 0)  # layer 0 is not used by layer 1's bias
  np.testing.assert_array_equal(grads[1], np.repeat(counts[:, None], 4, axis=1))


def test_t5_bfloat16_params_give_float32_bias():
  dims = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=2, train_len=32,
                        param_dtype="bfloat16")
  scheme = T5Bias(position_cfg("t5"), dims, rngs=nnx.Rngs(0))
  assert scheme.table[...].dtype == jnp.bfloat16
  assert scheme.bias(jnp.asarray(POS), jnp.asarray(POS), 0).dtype == jnp.float32


@pytest.mark.parametrize("field,value", [
    ("num_buckets", 31), ("num_buckets", 0), ("num_buckets", 1), ("num_buckets", 32.0),
    ("max_distance", 16), ("max_distance", 3), ("max_distance", 128.5), ("per_layer", "yes")])
def test_t5_bad_fields(field, value):
  # A fresh ConfigDict: assigning to a typed field of an existing one would raise TypeError.
  cfg = ml_collections.ConfigDict({**position_cfg("t5").to_dict(), field: value})
  with pytest.raises(ConfigError, match=f"model.position.{field}"):
    T5Bias.check_config(cfg, DIMS)


# ------------------------------------------------------------------ KERPLE (Chi et al.)

R1 = np.array([0.5, 1.0, 2.0, 0.01], np.float32)
R2_LOG = np.array([0.1, 1.0, 0.5, 3.0], np.float32)
R2_POW = np.array([0.1, 1.0, 0.5, 2.0], np.float32)


def set_params(scheme, r1, r2, layer=None):
  p1 = scheme.r1 if layer is None else scheme.r1[layer]
  p2 = scheme.r2 if layer is None else scheme.r2[layer]
  p1[...] = jnp.asarray(r1, p1[...].dtype)
  p2[...] = jnp.asarray(r2, p2[...].dtype)


def reference_kerple(kind, r1, r2, q_pos, k_pos):
  """The paper's kernels in float64: -r1 log(1 + r2 |m-n|) or -r1 |m-n|^r2, [b, H, q, k]."""
  d = np.abs(q_pos[:, None, :, None].astype(np.float64) - k_pos[:, None, None, :])
  r1 = np.asarray(r1, np.float64)[None, :, None, None]
  r2 = np.asarray(r2, np.float64)[None, :, None, None]
  return -r1 * np.log1p(r2 * d) if kind == "log" else -r1 * d ** r2


def test_kerple_literal_values():
  # log: r1 = 1, r2 = 1, |m-n| = 1 -> -ln 2; r1 = 2, r2 = 0.5, |m-n| = 6 -> -2 ln 4.
  # power: r1 = 1, r2 = 0.5, |m-n| = 4 -> -2; r1 = 0.5, r2 = 2, |m-n| = 3 -> -4.5; d = 0 -> 0.
  log = KerpleLog(position_cfg("kerple_log", per_layer=False), DIMS, rngs=nnx.Rngs(0))
  set_params(log, [1.0, 2.0, 1.0, 1.0], [1.0, 0.5, 1.0, 1.0])
  pos = jnp.array([[0, 1, 6, 6]])
  bias = np.asarray(log.bias(pos, pos, 0))
  assert bias[0, 0, 1, 0] == pytest.approx(-math.log(2), rel=1e-6)
  assert bias[0, 1, 2, 0] == pytest.approx(-2 * math.log(4), rel=1e-6)
  assert bias[0, 0, 3, 2] == 0.0
  power = KerplePower(position_cfg("kerple_power", per_layer=False), DIMS, rngs=nnx.Rngs(0))
  set_params(power, [1.0, 0.5, 1.0, 1.0], [0.5, 2.0, 1.0, 1.0])
  pos = jnp.array([[0, 3, 4, 4]])
  bias = np.asarray(power.bias(pos, pos, 0))
  assert bias[0, 0, 2, 0] == pytest.approx(-2.0, rel=1e-6)
  assert bias[0, 1, 1, 0] == pytest.approx(-4.5, rel=1e-6)
  assert bias[0, 0, 3, 2] == 0.0 and bias[0, 1, 0, 0] == 0.0


@pytest.mark.parametrize("cls,kind,r2", [(KerpleLog, "log", R2_LOG),
                                         (KerplePower, "power", R2_POW)])
@pytest.mark.parametrize("per_layer", [True, False])
def test_kerple_bias_matches_the_kernel(cls, kind, r2, per_layer):
  scheme = cls(position_cfg("kerple_" + kind, per_layer=per_layer), DIMS, rngs=nnx.Rngs(0))
  set_params(scheme, R1, r2, layer=1 if per_layer else None)
  q_pos, k_pos = POS[:, 2:7], POS
  bias = np.asarray(scheme.bias(jnp.asarray(q_pos), jnp.asarray(k_pos), 1))
  assert bias.shape == (2, 4, 5, 10) and bias.dtype == np.float32
  np.testing.assert_allclose(bias, reference_kerple(kind, R1, r2, q_pos, k_pos),
                             rtol=1e-5, atol=1e-6)
  other = np.asarray(scheme.bias(jnp.asarray(q_pos), jnp.asarray(k_pos), 0))
  assert np.allclose(other, bias) != per_layer
  # Relative: a common shift of all positions changes nothing; chunks are slices of the whole.
  pos = jnp.asarray(POS)
  full = scheme.bias(pos, pos, 1)
  np.testing.assert_allclose(scheme.bias(pos + 999, pos + 999, 1), full, rtol=1e-6)
  np.testing.assert_array_equal(scheme.bias(pos[:, 4:8], pos[:, :8], 1), full[:, :, 4:8, :8])


@pytest.mark.parametrize("cls,r1_max,r2_max", [(KerpleLog, 2.0, 1.0), (KerplePower, 1.0, 2.0)])
@pytest.mark.parametrize("per_layer", [True, False])
def test_kerple_init_as_released_code(cls, r1_max, r2_max, per_layer):
  """log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2); all clamped to >= 1e-2."""
  dims = positions.Dims(num_heads=64, head_dim=16, d_model=1024, num_layers=3, train_len=32)
  scheme = cls(position_cfg("kerple", per_layer=per_layer), dims, rngs=nnx.Rngs(0))
  r1s = list(scheme.r1) if per_layer else [scheme.r1]
  r2s = list(scheme.r2) if per_layer else [scheme.r2]
  assert len(r1s) == len(r2s) == (3 if per_layer else 1)
  for params, hi in ((r1s, r1_max), (r2s, r2_max)):
    for p in params:
      v = np.asarray(p[...])
      assert v.shape == (64,) and v.dtype == np.float32 and p.logical_axes == (None,)
      assert v.min() >= EPS and v.max() <= hi
      assert v.max() > 0.6 * hi and v.std() > 0.15 * hi  # spread over the range, not constant
  if per_layer:
    assert not np.allclose(r1s[0][...], r1s[1][...])


@pytest.mark.parametrize("per_layer", [True, False])
def test_kerple_parameters_are_vectors(per_layer):
  """Every parameter is 1-D, so AdamW's ndim >= 2 mask never decays it, per layer or shared."""
  scheme = KerpleLog(position_cfg("kerple_log", per_layer=per_layer), DIMS, rngs=nnx.Rngs(0))
  leaves = jax.tree.leaves(nnx.to_pure_dict(nnx.state(scheme, nnx.Param)))
  assert len(leaves) == (4 if per_layer else 2)
  assert all(x.shape == (4,) for x in leaves)


def test_kerple_constraints_hold_for_out_of_range_parameters():
  pos = jnp.asarray(POS)
  raw_r1 = np.array([-1.0, 0.0, 0.005, 3.0], np.float32)
  raw_r2 = np.array([-5.0, 0.001, 2.5, 10.0], np.float32)
  log = KerpleLog(position_cfg("kerple_log", per_layer=False), DIMS, rngs=nnx.Rngs(0))
  set_params(log, raw_r1, raw_r2)
  r1, r2 = (np.asarray(x) for x in log.constrained(0))
  np.testing.assert_array_equal(r1, np.array([EPS, EPS, EPS, 3.0], np.float32))
  np.testing.assert_array_equal(r2, np.array([EPS, EPS, 2.5, 10.0], np.float32))
  np.testing.assert_allclose(log.bias(pos, pos, 0), reference_kerple("log", r1, r2, POS, POS),
                             rtol=1e-5, atol=1e-6)
  power = KerplePower(position_cfg("kerple_power", per_layer=False), DIMS, rngs=nnx.Rngs(0))
  set_params(power, raw_r1, raw_r2)
  r1, r2 = (np.asarray(x) for x in power.constrained(0))
  np.testing.assert_array_equal(r1, np.array([EPS, EPS, EPS, 3.0], np.float32))
  np.testing.assert_array_equal(r2, np.array([EPS, EPS, 2.0, 2.0], np.float32))
  bias = np.asarray(power.bias(pos, pos, 0))
  np.testing.assert_allclose(bias, reference_kerple("power", r1, r2, POS, POS),
                             rtol=1e-5, atol=1e-6)
  assert np.all(bias <= 0) and np.all(np.isfinite(bias))
  # The gradient passes straight through the clamp (as the reference, which differentiates at the
  # clamped value): it equals the gradient at the clamped values, nonzero even out of range.
  grads = grads_of_bias_sum(power, pos, pos, 0)
  at_bounds = KerplePower(position_cfg("kerple_power", per_layer=False), DIMS, rngs=nnx.Rngs(1))
  set_params(at_bounds, r1, r2)
  expected = grads_of_bias_sum(at_bounds, pos, pos, 0)
  for name in ("r1", "r2"):
    np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6)
    assert np.all(grads[name] != 0)


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
@pytest.mark.parametrize("per_layer", [True, False])
def test_kerple_gradients_flow(cls, per_layer):
  scheme = cls(position_cfg("kerple", per_layer=per_layer), DIMS, rngs=nnx.Rngs(0))
  pos = jnp.asarray(POS)
  grads = grads_of_bias_sum(scheme, pos, pos, 1)
  for name in ("r1", "r2"):
    g = grads[name][1] if per_layer else grads[name]
    assert np.all(np.isfinite(g)) and np.all(g != 0), (name, g)
    # Larger r1 or r2 -> larger distance penalty -> smaller (more negative) bias sum.
    assert np.all(g < 0)
    if per_layer:
      np.testing.assert_array_equal(grads[name][0], 0)


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower, T5Bias])
def test_gradients_through_masked_attention_are_finite(cls):
  """Masked entries (keys after the query, other documents) must not leak NaN into gradients."""
  scheme = cls(position_cfg("any", per_layer=False), DIMS, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 10, 4, 16)), jnp.float32) for _ in range(3))
  segments = jnp.asarray(np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1, 1], [0] * 7 + [1] * 3]))
  mask = attention_mask(10, 10, segments, segments)
  pos = jnp.asarray(POS)
  graphdef, state = nnx.split(scheme)

  def loss(state):
    bias = nnx.merge(graphdef, state).bias(pos, pos, 0, q=q, k=k, mask=mask)
    return dot_product_attention(q, k, v, bias=bias, mask=mask).sum()

  grads = jax.tree.leaves(nnx.to_pure_dict(jax.jit(jax.grad(loss))(state)))
  assert grads and all(np.all(np.isfinite(g)) for g in grads)
  assert any(np.any(g != 0) for g in grads)


def test_kerple_bad_per_layer():
  cfg = ml_collections.ConfigDict({**position_cfg("kerple_log").to_dict(), "per_layer": 1})
  for cls in (KerpleLog, KerplePower):
    with pytest.raises(ConfigError, match="model.position.per_layer"):
      cls.check_config(cfg, DIMS)
    cls.check_config(position_cfg("kerple_log"), DIMS)


# ------------------------------------------------------------------ registry (once registered)

@pytest.mark.parametrize("kind,cls", [("t5", T5Bias), ("kerple_log", KerpleLog),
                                      ("kerple_power", KerplePower)])
def test_registered_kinds_build(kind, cls):
  if kind not in positions.REGISTRY:
    pytest.skip(f"{kind!r} is not registered yet")
  assert positions.REGISTRY[kind] is cls
  scheme = positions.build(position_cfg(kind), DIMS, rngs=nnx.Rngs(0))
  assert isinstance(scheme, cls) and cls.__doc__
  assert scheme.bias(jnp.asarray(POS), jnp.asarray(POS), 1).shape == (2, 4, 10, 10)
