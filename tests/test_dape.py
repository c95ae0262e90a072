"""DAPE (arXiv 2405.14722) against its definition written out pair by pair."""

import math

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs.errors import ConfigError
from models import positions
from tests.conftest import position_config
from models.positions.alibi import alibi_slopes

DIMS = positions.Dims(num_heads=4, head_dim=8, d_model=32, num_layers=2, train_len=16)


def dape_cfg(**kw):
  return position_config("dape", **kw)


def leaky_relu(x):
  return x if x >= 0 else 0.01 * x


def test_dape_alibi_bias_is_alibi_plus_the_mlp_of_logits_and_bias():
  """bias_ij = B_ij + W2 leaky(W1 [q_i.k_j / sqrt(D); B_ij] + b1) + b2 (heads as features), with
  B the ALiBi bias -m_h (i - j): Eq. 5 and the authors' `AliBi_C` (x + a + mlp(cat(x, a)))."""
  scheme = positions.build(dape_cfg(), DIMS, rngs=nnx.Rngs(3))
  rng = np.random.default_rng(0)
  q = rng.normal(size=(2, 3, 4, 8)).astype(np.float32)
  k = rng.normal(size=(2, 5, 4, 8)).astype(np.float32)
  qp = np.array([[2, 3, 4], [7, 8, 30]], np.int32)
  kp = np.array([[0, 1, 2, 3, 4], [0, 6, 7, 8, 30]], np.int32)
  got = np.asarray(scheme.bias(jnp.asarray(qp), jnp.asarray(kp), 1, q=jnp.asarray(q),
                               k=jnp.asarray(k)))
  assert got.shape == (2, 4, 3, 5) and got.dtype == np.float32
  f = scheme.mlps[1]
  w1, b1, w2, b2 = (np.asarray(p[...], np.float64) for p in (f.w1, f.b1, f.w2, f.b2))
  assert w1.shape == (8, 32) and w2.shape == (32, 4)
  slopes = alibi_slopes(4)
  for b in range(2):
    for i in range(3):
      for j in range(5):
        logits = [q[b, i, h] @ k[b, j, h] / math.sqrt(8) for h in range(4)]
        static = [-slopes[h] * (qp[b, i] - kp[b, j]) for h in range(4)]
        hidden = [leaky_relu(v) for v in np.array(logits + static) @ w1 + b1]
        want = np.array(static) + np.array(hidden) @ w2 + b2
        np.testing.assert_allclose(got[b, :, i, j], want, rtol=1e-5, atol=1e-5)
  # Layer 0 has its own MLP (per_layer, as the authors' code builds one per attention layer).
  assert not np.allclose(np.asarray(scheme.mlps[0].w1[...]), w1)
  assert isinstance(scheme.kernel_spec(0, jnp.asarray(qp), jnp.asarray(kp)), str)


def test_dape_init_is_torch_linear_and_a_zero_mlp_leaves_the_base_bias():
  scheme = positions.build(dape_cfg(dape_base="kerple_log", per_layer=False), DIMS,
                           rngs=nnx.Rngs(0))
  f = scheme.mlps[0]
  assert len(scheme.mlps) == 1
  assert np.abs(np.asarray(f.w1[...])).max() <= 1 / math.sqrt(8)  # fan_in 2H
  assert np.abs(np.asarray(f.w2[...])).max() <= 1 / math.sqrt(32)  # fan_in W
  assert np.abs(np.asarray(f.w1[...])).max() > 0.8 / math.sqrt(8)  # uniform, not a small normal
  for p in (f.w2, f.b2):
    p[...] = jnp.zeros_like(p[...])
  pos = jnp.asarray([[0, 1, 2, 9]], jnp.int32)
  q = jnp.ones((1, 4, 4, 8))
  got = np.asarray(scheme.bias(pos, pos, 1, q=q, k=q))
  want = np.asarray(scheme.base.bias(pos, pos, 1))  # KERPLE-log's -r1 log(1 + r2 |i - j|)
  np.testing.assert_array_equal(got, want)
  r1, r2 = (np.asarray(x) for x in scheme.base.constrained(0))
  np.testing.assert_allclose(want[0, :, 3, 0], -r1 * np.log1p(r2 * 9), rtol=1e-6)


@pytest.mark.parametrize("field,value,allowed", [
    ("dape_base", "t5", r"one of \['alibi', 'fire', 'kerple_log'\]"),
    ("dape_mlp_width", 0, "a positive integer"),
    ("dape_fire_form", "paper", r"one of \['released', 'fire'\]"),
    ("fire_mlp_width", -1, "a positive integer"),  # the fire base's own fields are checked too
])
def test_bad_dape_fields_name_the_field(field, value, allowed):
  cfg = dape_cfg(dape_base="fire") if field == "fire_mlp_width" else dape_cfg()
  cfg[field] = value
  with pytest.raises(ConfigError, match=f"model.position.{field} must be {allowed}"):
    positions.build(cfg, DIMS, check_only=True)


def test_dape_needs_the_queries_and_keys():
  scheme = positions.build(ml_collections.ConfigDict(dict(kind="dape", per_layer=True)), DIMS,
                           rngs=nnx.Rngs(0))
  pos = jnp.zeros((1, 2), jnp.int32)
  with pytest.raises(ValueError, match="needs the queries and keys"):
    scheme.bias(pos, pos, 0)


@pytest.mark.parametrize("form", ["released", "fire"])
def test_dape_fire_base_is_the_authors_fire_c_or_fire_itself(form):
  """dape_base=fire: the base bias is FIRE's f(psi(i - j) / psi(max(L, i))) with, as the authors'
  FIRE_C (the default), LeakyReLU(0.01) in FIRE's MLP and L0 = 512 // 2 = 256; "fire" is
  kind=fire's ReLU and L0 = 512. Written out for one head pair by hand (c = 0.1)."""
  scheme = positions.build(dape_cfg(dape_base="fire", dape_fire_form=form), DIMS,
                           rngs=nnx.Rngs(2))
  f = scheme.base.function(0)
  w1, b1, w2, b2 = (np.asarray(p[...], np.float64) for p in (f.w1, f.b1, f.w2, f.b2))
  threshold, act = (256.0, leaky_relu) if form == "released" else (512.0, lambda v: max(v, 0.0))
  qp = np.array([[3, 600]], np.int32)
  kp = np.array([[0, 1, 2, 3, 590, 600]], np.int32)
  got = np.asarray(scheme.base.bias(jnp.asarray(qp), jnp.asarray(kp), 0))
  psi = lambda x: math.log(0.1 * x + 1)  # noqa: E731
  for a, i in enumerate(qp[0]):
    for b, j in enumerate(kp[0]):
      if j > i:
        continue
      x = psi(i - j) / (psi(max(threshold, i)) + 1e-6)
      want = np.array([act(v) for v in x * w1[0] + b1]) @ w2 + b2
      np.testing.assert_allclose(got[0, :, a, b], want, rtol=1e-5, atol=1e-6)
