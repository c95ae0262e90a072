"""RoPE's frequency variants: p-RoPE (arXiv 2410.06205), HoPE (arXiv 2410.21216) and Resonance
RoPE (arXiv 2403.00071), against their papers' definitions computed here from scratch."""

import math

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs.validate import ConfigError, validate
from conftest import tiny_config
from models import positions

HEAD_DIM, THETA, L = 16, 10000.0, 32
DIMS = positions.Dims(num_heads=4, head_dim=HEAD_DIM, d_model=64, num_layers=2, train_len=L)
# RoPE's theta_i = 10000^(-2i/16), i = 0..7, written out (Su et al., Eq. (15)).
ROPE_FREQS = [10000.0 ** (-2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]


def cfg(kind, **kw):
  c = ml_collections.ConfigDict(dict(kind=kind, rope_theta=THETA, rotary_fraction=1.0,
                                     nope_every=0, rope_theta_per_layer=()))
  c.update(kw)
  return c


def rotate_by_hand(x, pos, freqs):
  """The half-split rotation of x [b, s, h, d] by angle pos * freqs[i] per pair (i, i + d/2)."""
  x = np.asarray(x, np.float64)
  half = x.shape[-1] // 2
  angle = np.asarray(pos, np.float64)[:, :, None, None] * np.asarray(freqs)[None, None, None, :]
  a, b = x[..., :half], x[..., half:]
  return np.concatenate([a * np.cos(angle) - b * np.sin(angle),
                         a * np.sin(angle) + b * np.cos(angle)], axis=-1)


def qk(seed=0):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(2, 9, 4, HEAD_DIM)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(2, 9, 4, HEAD_DIM)), jnp.float32)
  pos = jnp.asarray(rng.integers(0, 3 * L, size=(2, 9)), jnp.int32)
  return q, k, pos


@pytest.mark.parametrize("p,kept", [(0.75, 6), (0.25, 2), (1.0, 8), (0.0, 0), (0.5, 4)])
def test_p_rope_keeps_the_highest_frequencies_and_zeroes_the_rest(p, kept):
  scheme = positions.build(cfg("p_rope", p_rope_fraction=p), DIMS)
  want = ROPE_FREQS[:kept] + [0.0] * (8 - kept)
  np.testing.assert_allclose(scheme.inv_freq, want, rtol=1e-6)
  q, k, pos = qk()
  got_q, _ = scheme.rotate(q, k, pos, pos, 0)
  np.testing.assert_allclose(np.asarray(got_q), rotate_by_hand(q, pos, want), atol=2e-5)
  # The zeroed pairs are not rotated at all, bit for bit.
  half = HEAD_DIM // 2
  for i in range(kept, half):
    for j in (i, i + half):
      assert np.array_equal(np.asarray(got_q)[..., j], np.asarray(q)[..., j])


def test_p_rope_is_not_partial_rotary():
  """GPT-NeoX partial rotary at 0.5 rotates 8 features with 10000^(-2j/8), j < 4; p-RoPE at 0.5
  keeps 10000^(-2j/16), j < 4: the same only with the partial rotary's base 10000^0.5."""
  p_rope = positions.build(cfg("p_rope", p_rope_fraction=0.5), DIMS)
  partial = positions.build(cfg("rope", rotary_fraction=0.5), DIMS)
  assert not np.allclose(p_rope.inv_freq[:4], partial.inv_freq)
  rebased = positions.build(cfg("rope", rotary_fraction=0.5, rope_theta=100.0), DIMS)
  np.testing.assert_allclose(p_rope.inv_freq[:4], rebased.inv_freq, rtol=1e-6)


def test_hope_removes_the_components_without_a_full_period_in_train_len():
  # Wavelengths 2 pi / theta_i of the 8 pairs: 6.28, 19.9, 62.8, 199, 628, 1987, 6283, 19869.
  wavelengths = [2 * math.pi / f for f in ROPE_FREQS]
  assert [round(w, 1) for w in wavelengths[:3]] == [6.3, 19.9, 62.8]
  scheme = positions.build(cfg("hope"), DIMS)  # L = train_len = 32: pairs 0 and 1 stay
  np.testing.assert_allclose(scheme.inv_freq, ROPE_FREQS[:2] + [0.0] * 6, rtol=1e-6)
  longer = positions.build(cfg("hope", hope_train_len=1000), DIMS)  # pairs 0..4 (628 <= 1000)
  np.testing.assert_allclose(longer.inv_freq, ROPE_FREQS[:5] + [0.0] * 3, rtol=1e-6)
  q, k, pos = qk(1)
  got_q, got_k = longer.rotate(q, k, pos, pos, 1)
  want = ROPE_FREQS[:5] + [0.0] * 3
  np.testing.assert_allclose(np.asarray(got_k), rotate_by_hand(k, pos, want), atol=2e-5)


def test_resonance_rope_rounds_every_wavelength_to_whole_tokens():
  scheme = positions.build(cfg("resonance_rope"), DIMS)
  want = [2 * math.pi / max(1, round(2 * math.pi / f)) for f in ROPE_FREQS]
  # 6.283 -> 6 tokens, 19.87 -> 20, 62.83 -> 63, ...
  assert [round(2 * math.pi / w) for w in want[:3]] == [6, 20, 63]
  np.testing.assert_allclose(scheme.inv_freq, want, rtol=1e-6)
  # A whole number of wavelengths later, the scheme turns the first three pairs (halves 0-2 and
  # 8-10) exactly as before (the resonance property); plain RoPE does not.
  q, k, pos = qk(2)
  period = 6 * 20 * 63  # a common multiple of the first three wavelengths
  pairs = [0, 1, 2, 8, 9, 10]
  got_q, _ = scheme.rotate(q, k, pos, pos, 0)
  later_q, _ = scheme.rotate(q, k, pos + period, pos + period, 0)
  np.testing.assert_allclose(np.asarray(later_q)[..., pairs], np.asarray(got_q)[..., pairs],
                             atol=3e-3)  # float32 angles near 7,560 rad: ulp 5e-4
  rope = positions.build(cfg("rope"), DIMS)
  plain, plain_later = (np.asarray(rope.rotate(q, k, p, p, 0)[0]) for p in (pos, pos + period))
  assert np.abs(plain_later[..., pairs] - plain[..., pairs]).max() > 0.1
  np.testing.assert_allclose(np.asarray(got_q), rotate_by_hand(q, pos, want), atol=2e-5)


def test_rope_scaling_composes_with_the_variants():
  """PI divides positions by s; the variant's frequencies are then the ones rotated with."""
  scheme = positions.build(cfg("p_rope", p_rope_fraction=0.5, rope_scaling="pi",
                               rope_scaling_factor=4.0, rope_scaling_train_len=L), DIMS)
  q, k, pos = qk(3)
  got_q, _ = scheme.rotate(q, k, pos, pos, 0)
  want = ROPE_FREQS[:4] + [0.0] * 4
  np.testing.assert_allclose(np.asarray(got_q), rotate_by_hand(q, np.asarray(pos) / 4.0, want),
                             atol=2e-5)


@pytest.mark.parametrize("field,value,match", [
    ("p_rope_fraction", 1.5, "p_rope_fraction must be a finite number in \\[0, 1\\]"),
    ("p_rope_fraction", -0.1, "p_rope_fraction must be a finite number in \\[0, 1\\]"),
])
def test_bad_p_rope_fields_name_themselves(field, value, match):
  c = tiny_config("unused", "p_rope")
  c.model.position[field] = value
  with pytest.raises(ConfigError, match=match):
    validate(c, 1)


def test_bad_hope_length_names_itself():
  c = tiny_config("unused", "hope")
  c.model.position.hope_train_len = 0
  with pytest.raises(ConfigError, match="hope_train_len must be -1"):
    validate(c, 1)


def test_rope_heads_rotates_the_first_heads_only():
  scheme = positions.build(cfg("rope", rope_heads=3), DIMS)
  full = positions.build(cfg("rope"), DIMS)
  q, k, pos = qk(4)
  got_q, got_k = scheme.rotate(q, k, pos, pos, 0)
  want_q, want_k = full.rotate(q, k, pos, pos, 0)
  assert np.array_equal(np.asarray(got_q)[:, :, :3], np.asarray(want_q)[:, :, :3])
  assert np.array_equal(np.asarray(got_k)[:, :, :3], np.asarray(want_k)[:, :, :3])
  assert np.array_equal(np.asarray(got_q)[:, :, 3], np.asarray(q)[:, :, 3])  # a NoPE head
  assert isinstance(scheme.kernel_spec(0, pos, pos), str)  # falls back to XLA, says why
  every = positions.build(cfg("rope", rope_heads=4), DIMS)  # = num_heads: plain RoPE
  assert np.array_equal(np.asarray(every.rotate(q, k, pos, pos, 0)[0]), np.asarray(want_q))


def test_alibi_heads_gives_the_first_heads_the_n_head_slopes_and_the_rest_none():
  from models.positions.alibi import alibi_slopes
  alibi = lambda **kw: positions.build(ml_collections.ConfigDict(dict(kind="alibi", **kw)), DIMS)
  assert alibi(alibi_heads=2).slopes == (2 ** -4, 2 ** -8, 0.0, 0.0)  # 2 heads: 2^(-8h/2)
  assert alibi(alibi_heads=-1).slopes == tuple(alibi_slopes(4))
  assert alibi(alibi_heads=0).slopes == (0.0,) * 4
  pos = jnp.asarray([[0, 1, 5]], jnp.int32)
  bias = np.asarray(alibi(alibi_heads=2).bias(pos, pos, 0))
  assert bias[0, 0, 2, 0] == -5 * 2 ** -4 and not bias[0, 2:].any()


@pytest.mark.parametrize("kind,field,value", [("rope", "rope_heads", 5), ("alibi", "alibi_heads", -2)])
def test_bad_head_counts_name_the_field(kind, field, value):
  c = tiny_config("unused", kind)
  c.model.position[field] = value
  with pytest.raises(ConfigError, match=f"model.position.{field} must be -1"):
    validate(c, 1)


def test_transformer_xl_bias_is_the_papers_relative_terms():
  """A_ij - q.k = q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}, all over sqrt(D) (arXiv
  1901.02860, Sec. 3.3; the authors' code scales the whole score), with R_t = [sin(t w),
  cos(t w)], w_f = 10000^(-2f/d_model), written out here."""
  dims = positions.Dims(num_heads=2, head_dim=4, d_model=8, num_layers=2, train_len=16)
  from flax import nnx
  scheme = positions.build(ml_collections.ConfigDict(dict(kind="transformer_xl", per_layer=True,
                                                          txl_untie_r=False)), dims,
                           rngs=nnx.Rngs(0))
  rng = np.random.default_rng(5)
  q = rng.normal(size=(1, 5, 2, 4)).astype(np.float32)
  k = rng.normal(size=(1, 6, 2, 4)).astype(np.float32)
  qp = np.array([[1, 2, 3, 40, 41]], np.int32)
  kp = np.array([[0, 1, 2, 3, 40, 41]], np.int32)
  got = np.asarray(scheme.bias(jnp.asarray(qp), jnp.asarray(kp), 1, q=jnp.asarray(q),
                               k=jnp.asarray(k)))
  w_r = np.asarray(scheme.w_r[...])[1]  # layer 1's [d_model, H, D]
  u, v = np.asarray(scheme.u[...])[0], np.asarray(scheme.v[...])[0]
  freqs = [10000.0 ** (-2 * f / 8) for f in range(4)]
  want = np.zeros((1, 2, 5, 6))
  for h in range(2):
    for i in range(5):
      for j in range(6):
        t = qp[0, i] - kp[0, j]
        r = np.array([math.sin(t * w) for w in freqs] + [math.cos(t * w) for w in freqs])
        p = r @ w_r[:, h, :]  # W_R R_t for head h: [D]
        want[0, h, i, j] = (q[0, i, h] @ p + u[h] @ k[0, j, h] + v[h] @ p) / 2.0  # sqrt(4)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  # Layer 0 has its own W_R (per_layer), u and v are shared (untie_r False).
  assert scheme.w_r[...].shape == (2, 8, 2, 4) and scheme.u[...].shape == (1, 2, 4)
  assert isinstance(scheme.kernel_spec(0, jnp.asarray(qp), jnp.asarray(kp)), str)
