"""LongRoPE's short and long factors against transformers itself (not a transcription): the
inverse frequencies and attention factor of `modeling_rope_utils._compute_longrope_parameters`
and the rotation Phi-3's `Phi3RotaryEmbedding` applies (short factors for sequences up to
original_max_position_embeddings, long beyond, the attention factor on cos and sin in both),
for a small config: head_dim 16, theta 10000, L = 16, max_position_embeddings 64 (s = 4).

Skipped where transformers or torch is missing (the dev extra installs them)."""

import math

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from models import positions, rope_scaling

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

HEAD_DIM, THETA, L, MAX_POS = 16, 10000.0, 16, 64
SHORT = (1.0, 1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.7)
LONG = (1.0, 1.3, 1.9, 2.6, 3.4, 4.0, 4.6, 5.0)
DIMS = positions.Dims(num_heads=2, head_dim=HEAD_DIM, d_model=32, num_layers=1, train_len=L)


def _phi3_config(attention_factor=None):
  rope = {"rope_type": "longrope", "rope_theta": THETA, "short_factor": list(SHORT),
          "long_factor": list(LONG), "original_max_position_embeddings": L}
  if attention_factor is not None:
    rope["attention_factor"] = attention_factor
  return transformers.Phi3Config(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                                 intermediate_size=64, num_hidden_layers=1, vocab_size=32,
                                 max_position_embeddings=MAX_POS, rope_parameters=rope,
                                 original_max_position_embeddings=L)


def _ours_cfg(**kw):
  c = ml_collections.ConfigDict(dict(kind="rope", rope_theta=THETA, rotary_fraction=1.0,
                                     nope_every=0, rope_theta_per_layer=(),
                                     **rope_scaling.DEFAULTS))
  c.update(dict(rope_scaling="longrope", rope_scaling_factor=MAX_POS / L,
                rope_scaling_train_len=L, longrope_short_factors=SHORT,
                longrope_long_factors=LONG, **kw))
  return c


def _ours(**kw):
  return positions.build(_ours_cfg(**kw), DIMS)


def _hf_rotate(config, x, position_ids):
  """q rotated as Phi-3 does: x cos + rotate_half(x) sin with Phi3RotaryEmbedding's cos, sin
  (which pick short or long factors from max(position_ids) + 1)."""
  from transformers.models.phi3 import modeling_phi3  # noqa: PLC0415
  emb = modeling_phi3.Phi3RotaryEmbedding(config)
  xt = torch.tensor(np.asarray(x)).transpose(1, 2)  # [b, heads, seq, d]
  cos, sin = emb(xt, torch.tensor(np.asarray(position_ids)))
  out = xt * cos[:, None] + modeling_phi3.rotate_half(xt) * sin[:, None]
  return out.transpose(1, 2).numpy()


def test_inverse_frequencies_and_attention_factor_equal_transformers():
  config = _phi3_config()
  short_inv, att = rope_utils._compute_longrope_parameters(config, "cpu")  # noqa: SLF001
  long_inv, att_long = rope_utils._compute_longrope_parameters(config, "cpu", seq_len=L + 1)  # noqa: SLF001
  scaled = rope_scaling.scaled_rope(_ours_cfg(), HEAD_DIM, THETA, L)
  np.testing.assert_allclose(scaled.inv_freq, short_inv.numpy(), rtol=1e-6)
  np.testing.assert_allclose(scaled.long_inv_freq, long_inv.numpy(), rtol=1e-6)
  # Phi-3's rule: factor = max_position_embeddings / original_max_position_embeddings = 4,
  # attention factor sqrt(1 + ln 4 / ln 16) = sqrt(1.5), for both rows.
  assert att == att_long == pytest.approx(math.sqrt(1.5), rel=1e-12)
  assert scaled.qk_scale == pytest.approx(att, rel=1e-12)
  # An explicit attention_factor overrides the rule in both.
  _, explicit = rope_utils._compute_longrope_parameters(_phi3_config(attention_factor=1.1), "cpu")  # noqa: SLF001
  assert explicit == 1.1 == _ours(longrope_attention_factor=1.1).qk_scale


@pytest.mark.parametrize("length", [5, L, L + 1, 40])
def test_rotation_equals_phi3_short_up_to_original_length_long_beyond(length):
  """One sequence of `length` tokens: transformers switches on max(position_ids) + 1 > L for the
  whole call, this model per batch row on the same length; both multiply by the attention
  factor."""
  rng = np.random.default_rng(length)
  q = rng.normal(size=(1, length, 2, HEAD_DIM)).astype(np.float32)
  k = rng.normal(size=(1, length, 2, HEAD_DIM)).astype(np.float32)
  pos = np.arange(length, dtype=np.int32)[None]
  got_q, got_k = _ours().rotate(jnp.asarray(q), jnp.asarray(k), jnp.asarray(pos),
                                jnp.asarray(pos), 0)
  config = _phi3_config()
  np.testing.assert_allclose(np.asarray(got_q), _hf_rotate(config, q, pos), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(got_k), _hf_rotate(config, k, pos), rtol=1e-5, atol=1e-5)


def test_rows_of_one_batch_each_take_their_own_factors():
  """A short and a long row in one batch: each equals transformers' result for that row alone
  (transformers would pick one set for the whole batch; per row is per sequence)."""
  rng = np.random.default_rng(0)
  n = 24
  q = rng.normal(size=(2, n, 2, HEAD_DIM)).astype(np.float32)
  pos = np.stack([np.minimum(np.arange(n), L - 1), np.arange(n)]).astype(np.int32)  # l = 16, 24
  got, _ = _ours().rotate(jnp.asarray(q), jnp.asarray(q), jnp.asarray(pos), jnp.asarray(pos), 0)
  config = _phi3_config()
  for row in range(2):
    want = _hf_rotate(config, q[row:row + 1], pos[row:row + 1])
    np.testing.assert_allclose(np.asarray(got)[row:row + 1], want, rtol=1e-5, atol=1e-5)
