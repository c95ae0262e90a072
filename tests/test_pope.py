"""PoPE (arXiv 2509.10534) against its definition: scores from the complex form, per feature."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.errors import ConfigError
from models import positions
from tests.conftest import position_config
from models.attention import attention_logits

DIMS = positions.Dims(num_heads=2, head_dim=8, d_model=16, num_layers=2, train_len=32)


def pope_cfg(**kw):
  return position_config("pope", **kw)


def softplus(x):
  return math.log1p(math.exp(x))


def test_pope_scores_are_the_papers_polar_form():
  """logit = sum_c softplus(q_c) softplus(k_c) cos((t - s) theta_c - delta_hc) / sqrt(D), with
  theta_c = 10000^(-c/D) and delta clamped to [-2 pi, 0] (Sec. 3)."""
  scheme = positions.build(pope_cfg(pope_bias_init="uniform"), DIMS, rngs=nnx.Rngs(1))
  delta = np.array(scheme.delta[...])
  delta[1, 0, :2] = [0.5, -7.0]  # outside the interval: used clamped to 0 and -2 pi
  scheme.delta[...] = jnp.asarray(delta)
  rng = np.random.default_rng(0)
  q = rng.normal(size=(1, 3, 2, 8)).astype(np.float32)
  k = rng.normal(size=(1, 4, 2, 8)).astype(np.float32)
  qp, kp = np.array([[3, 4, 90]], np.int32), np.array([[0, 2, 3, 90]], np.int32)
  qr, kr = scheme.rotate(jnp.asarray(q), jnp.asarray(k), jnp.asarray(qp), jnp.asarray(kp), 1)
  assert qr.shape == (1, 3, 2, 16) and kr.shape == (1, 4, 2, 16)
  got = np.asarray(attention_logits(qr, kr))  # attention's own scale, 1/sqrt(width = 16)
  theta = [10000.0 ** (-c / 8) for c in range(8)]
  used = np.clip(delta[1], -2 * math.pi, 0.0)
  for h in range(2):
    for i in range(3):
      for j in range(4):
        want = sum(softplus(q[0, i, h, c]) * softplus(k[0, j, h, c])
                   * math.cos((qp[0, i] - kp[0, j]) * theta[c] - used[h, c])
                   for c in range(8)) / math.sqrt(8)
        np.testing.assert_allclose(got[0, h, i, j], want, rtol=1e-4, atol=1e-5)
  assert isinstance(scheme.kernel_spec(0, jnp.asarray(qp), jnp.asarray(kp)), str)


def test_pope_bias_init_and_sharing():
  zeros = positions.build(pope_cfg(per_layer=False), DIMS, rngs=nnx.Rngs(0))
  assert zeros.delta[...].shape == (1, 2, 8) and not np.asarray(zeros.delta[...]).any()
  uniform = positions.build(pope_cfg(pope_bias_init="uniform"), DIMS, rngs=nnx.Rngs(0))
  d = np.asarray(uniform.delta[...])
  assert d.shape == (2, 2, 8) and d.min() >= -2 * math.pi and d.max() <= 0 and d.std() > 1


def test_bad_pope_field_names_the_field():
  with pytest.raises(ConfigError, match=r"model.position.pope_bias_init must be one of "
                                        r"\['zeros', 'uniform'\]"):
    positions.build(pope_cfg(pope_bias_init="normal"), DIMS, check_only=True)
