"""Eval-time context extension (models/rope_scaling.py, RoPE scaling, ALiBi interpolation) against
values computed by hand from each paper's formula, for d = 8, theta = 10000, s = 4, L = 16."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs.validate import ConfigError, validate
from conftest import tiny_config
from models import extensions, positions, rope_frequencies, rope_scaling
from models.decoder import Decoder
from models.positions.alibi import alibi_interpolation_scale, alibi_slopes
from models.positions.rope import apply_rope, rope_inv_freq

D, THETA, S, L = 8, 10000.0, 4.0, 16
PLAIN = [1.0, THETA ** -0.25, THETA ** -0.5, THETA ** -0.75]  # theta_i = b^(-2i/d), d = 8
DIMS = positions.Dims(num_heads=2, head_dim=D, d_model=16, num_layers=3, train_len=L)


def rope_cfg(**kw):
  c = ml_collections.ConfigDict(dict(kind="rope", rope_theta=THETA, rotary_fraction=1.0,
                                     nope_every=0, rope_theta_per_layer=(),
                                     **rope_scaling.DEFAULTS))
  c.update(kw)
  return c


def qk(seed=0, b=2, s=6, positions_high=12):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, s, 2, D)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(b, s, 2, D)), jnp.float32)
  pos = jnp.asarray(np.sort(rng.integers(0, positions_high, size=(b, s)), axis=1), jnp.int32)
  return q, k, pos


def same(a, b):
  return np.array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ frequencies by hand

def test_base_frequencies_are_ropes_bit_for_bit():
  np.testing.assert_array_equal(rope_frequencies._base_inv_freq(D, THETA).astype(np.float32),
                                rope_inv_freq(D, THETA))
  np.testing.assert_allclose(rope_inv_freq(D, THETA), PLAIN, rtol=1e-7)


def test_pi_scales_positions_and_equals_rope_at_m_over_s():
  """Chen et al. Eq. (4): f'(x, m) = f(x, m L / L') = f(x, m / s)."""
  assert rope_frequencies.pi_position_scale(S) == 0.25
  scheme = positions.build(rope_cfg(rope_scaling="pi", rope_scaling_factor=S), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk(positions_high=64)
  got_q, got_k = scheme.rotate(q, k, pos, pos, 0)
  inv = jnp.asarray(rope_inv_freq(D, THETA))
  assert same(got_q, apply_rope(q, pos.astype(jnp.float32) / S, inv))
  assert same(got_k, apply_rope(k, pos.astype(jnp.float32) / S, inv))
  # Positions s*m under PI are plain RoPE's integer positions m, bit for bit.
  want_q, want_k = plain.rotate(q, k, pos, pos, 0)
  got_q, got_k = scheme.rotate(q, k, pos * 4, pos * 4, 0)
  assert same(got_q, want_q) and same(got_k, want_k)


def test_ntk_aware_base_change_by_hand():
  """Peng et al. Eq. (16): b' = b s^(d/(d-2)) = 10000 * 4^(4/3)."""
  b2 = THETA * 4.0 ** (8 / 6)
  assert rope_frequencies.ntk_theta(D, THETA, S) == pytest.approx(b2, rel=1e-12)
  inv = rope_frequencies.ntk_inv_freq(D, THETA, S)
  assert inv.dtype == np.float32 and inv.shape == (4,)
  np.testing.assert_allclose(inv, [1.0, b2 ** -0.25, b2 ** -0.5, b2 ** -0.75], rtol=1e-6)
  # Highest frequency unchanged, lowest divided by exactly s.
  assert inv[0] == 1.0
  np.testing.assert_allclose(inv[-1], PLAIN[-1] / S, rtol=1e-6)
  scheme = positions.build(rope_cfg(rope_scaling="ntk", rope_scaling_factor=S), DIMS)
  q, k, pos = qk()
  assert same(scheme.rotate(q, k, pos, pos, 0)[0], apply_rope(q, pos, jnp.asarray(inv)))


def test_abf_is_rope_with_the_new_base():
  """Xiong et al. Sec. 3.1: base 10,000 -> 500,000."""
  np.testing.assert_allclose(rope_frequencies.abf_inv_freq(D, 5e5),
                             [1.0, 5e5 ** -0.25, 5e5 ** -0.5, 5e5 ** -0.75], rtol=1e-7)
  scheme = positions.build(rope_cfg(rope_scaling="abf"), DIMS)  # abf_theta default 500000
  plain = positions.build(rope_cfg(rope_theta=5e5), DIMS)
  q, k, pos = qk(1)
  for got, want in zip(scheme.rotate(q, k, pos, pos, 0), plain.rotate(q, k, pos, pos, 0)):
    assert same(got, want)


# ------------------------------------------------------------------ dynamic NTK

def test_dynamic_ntk_factor_and_frequencies_by_hand():
  """Peng et al. Sec. 3.3: s' = max(1, l/L); at l = 4L it is NTK-aware with s = 4."""
  np.testing.assert_allclose(rope_frequencies.dynamic_ntk_factor(jnp.array([1, 8, 16, 17, 64]), L),
                             [1, 1, 1, 17 / 16, 4])
  plain = jnp.asarray(rope_inv_freq(D, THETA))
  inv = np.asarray(rope_frequencies.dynamic_ntk_inv_freq(plain, jnp.array([16, 17, 64]), L))
  assert inv.shape == (3, 4) and inv.dtype == np.float32
  assert same(inv[0], plain)  # l <= L: the given frequencies, selected not recomputed
  s17 = 17 / 16
  np.testing.assert_allclose(inv[1], [PLAIN[i] * s17 ** (-2 * i / 6) for i in range(4)], rtol=1e-6)
  np.testing.assert_allclose(inv[2], rope_frequencies.ntk_inv_freq(D, THETA, 4.0), rtol=1e-6)


def test_dynamic_ntk_is_plain_rope_bit_for_bit_up_to_train_len():
  scheme = positions.build(rope_cfg(rope_scaling="dynamic_ntk"), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk(2, positions_high=L)
  pos = pos.at[:, -1].set(L - 1)  # length exactly L
  for jit in (lambda f: f, jax.jit):
    got = jit(lambda *a: scheme.rotate(*a, 0))(q, k, pos, pos)
    want = jit(lambda *a: plain.rotate(*a, 0))(q, k, pos, pos)
    assert same(got[0], want[0]) and same(got[1], want[1])
  # Row 1 reaches 4L: it differs, and equals NTK-aware with s = 4; row 0 is untouched.
  long_pos = pos.at[1, -1].set(4 * L - 1)
  got_q, _ = scheme.rotate(q, k, long_pos, long_pos, 0)
  want_q, _ = plain.rotate(q, k, long_pos, long_pos, 0)
  assert same(got_q[0], want_q[0]) and not np.allclose(got_q[1], want_q[1])
  ntk = positions.build(rope_cfg(rope_scaling="ntk", rope_scaling_factor=4.0), DIMS)
  np.testing.assert_allclose(got_q[1], ntk.rotate(q, k, long_pos, long_pos, 0)[0][1], atol=1e-5)


def test_dynamic_ntk_uses_the_configured_train_len():
  scheme = positions.build(rope_cfg(rope_scaling="dynamic_ntk", rope_scaling_train_len=64), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk(3, positions_high=64)
  assert same(scheme.rotate(q, k, pos, pos, 0)[0], plain.rotate(q, k, pos, pos, 0)[0])


def test_dynamic_yarn_is_plain_rope_up_to_train_len_and_yarn_at_s_beyond():
  """Dynamic-YaRN (Peng et al., arXiv 2309.00071, Sec. 3.3): rows with l <= L rotate bit for bit
  as plain RoPE (factor exactly 1); a row of length 4L equals static YaRN with s = 4 (its
  frequencies and q/k factor 0.1 ln 4 + 1), a row of length 2L YaRN with s = 2, in one batch."""
  dyn = positions.build(rope_cfg(rope_scaling="dynamic_yarn"), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk(4, positions_high=L)
  pos = pos.at[:, -1].set(L - 1)
  for jit in (lambda f: f, jax.jit):
    got = jit(lambda *a: dyn.rotate(*a, 0))(q, k, pos, pos)
    want = jit(lambda *a: plain.rotate(*a, 0))(q, k, pos, pos)
    assert same(got[0], want[0]) and same(got[1], want[1])
  long_pos = pos.at[0, -1].set(2 * L - 1).at[1, -1].set(4 * L - 1)
  got_q, got_k = dyn.rotate(q, k, long_pos, long_pos, 0)
  for row, s in ((0, 2.0), (1, 4.0)):
    yarn = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=s), DIMS)
    want_q, want_k = yarn.rotate(q, k, long_pos, long_pos, 0)
    np.testing.assert_allclose(got_q[row], want_q[row], rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_k[row], want_k[row], rtol=2e-6, atol=2e-6)
  # By hand: the factor per row, and the frequencies from YaRN's ramp at L.
  np.testing.assert_allclose(rope_frequencies.dynamic_yarn_attention_factor(
      jnp.array([8, 16, 32, 64]), L), [1, 1, 0.1 * math.log(2) + 1, 0.1 * math.log(4) + 1],
      rtol=1e-6)
  gamma = rope_frequencies.yarn_index_ramp(D, THETA, L)
  inv = rope_frequencies.dynamic_yarn_inv_freq(jnp.asarray(PLAIN, jnp.float32), gamma,
                                               jnp.array([16, 64]), L)
  assert same(inv[0], jnp.asarray(PLAIN, jnp.float32))
  np.testing.assert_allclose(inv[1], [(1 - g) * p / 4 + g * p for g, p in zip(gamma, PLAIN)],
                             rtol=1e-6)
  assert extensions.apply_extension(tiny_config("unused", "rope"), "dynamic_yarn"
                                    ).model.position.rope_scaling == "dynamic_yarn"
  with pytest.raises(ConfigError, match="dynamic_yarn' is defined for one rope_theta"):
    rope_scaling.check_config(rope_cfg(rope_scaling="dynamic_yarn",
                                       rope_theta_per_layer=(1e4, 1e4, 1e4)), D)


# ------------------------------------------------------------------ YaRN

def test_yarn_frequencies_by_hand():
  """Peng et al. Eq. (17)-(20) for d=8, b=1e4, L=16, s=4, alpha=1, beta=32.

  r(i) = L / (2 pi b^(2i/d)) = [2.546, 0.2546, 0.02546, 0.002546]: pair 0 is on the ramp, the
  others below alpha (divided by s)."""
  r = [L / (2 * math.pi / PLAIN[i]) for i in range(4)]
  gamma = [min(1.0, max(0.0, (x - 1) / 31)) for x in r]
  assert gamma[0] == pytest.approx((2.5464790894703255 - 1) / 31) and gamma[1:] == [0, 0, 0]
  np.testing.assert_allclose(rope_frequencies.yarn_ramp(D, THETA, L), gamma, rtol=1e-12)
  want = [(1 - g) * t / S + g * t for g, t in zip(gamma, PLAIN)]
  got = rope_frequencies.yarn_inv_freq(D, THETA, L, S)
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_yarn_ramp_endpoints():
  """L = 1024: r = [163, 16.3, 1.63, 0.163] -> pair 0 kept, pair 3 divided by s, 1 and 2 blended."""
  inv = rope_frequencies.yarn_inv_freq(D, THETA, 1024, S)
  plain = rope_inv_freq(D, THETA)
  assert inv[0] == plain[0]  # r > beta: unchanged
  np.testing.assert_allclose(inv[3], plain[3] / S, rtol=1e-6)  # r < alpha: exactly PI
  for i in (1, 2):
    r = 1024 * PLAIN[i] / (2 * math.pi)
    g = (r - 1) / 31
    assert 0 < g < 1
    np.testing.assert_allclose(inv[i], (1 - g) * PLAIN[i] / S + g * PLAIN[i], rtol=1e-6)
  # Other alpha/beta move the ramp: with beta = 10 pair 1 (r = 16.3) is kept as well.
  assert rope_frequencies.yarn_inv_freq(D, THETA, 1024, S, alpha=1, beta=10)[1] == plain[1]


def test_yarn_temperature_and_rotation():
  """Eq. (22): sqrt(1/t) = 0.1 ln(s) + 1 multiplies both q and k, so logits scale by its square."""
  m = rope_frequencies.yarn_attention_factor(S)
  assert m == pytest.approx(0.1 * math.log(4) + 1) and m == pytest.approx(1.1386294361119891)
  assert rope_frequencies.yarn_attention_factor(1.0) == 1.0
  scheme = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=S), DIMS)
  q, k, pos = qk(4)
  got_q, got_k = scheme.rotate(q, k, pos, pos, 0)
  inv = jnp.asarray(rope_frequencies.yarn_inv_freq(D, THETA, L, S))
  np.testing.assert_allclose(got_q, apply_rope(q, pos, inv) * m, rtol=1e-6)
  np.testing.assert_allclose(got_k, apply_rope(k, pos, inv) * m, rtol=1e-6)
  logits = jnp.einsum("bqhd,bkhd->bhqk", got_q, got_k)
  ref = jnp.einsum("bqhd,bkhd->bhqk", apply_rope(q, pos, inv), apply_rope(k, pos, inv))
  np.testing.assert_allclose(logits, ref * m * m, rtol=1e-5, atol=1e-5)


def test_scaling_follows_each_layer_and_skips_nope_layers():
  thetas = (100.0, 1e4, 5e5)
  cfg = rope_cfg(rope_scaling="yarn", rope_scaling_factor=S, rope_theta_per_layer=thetas,
                 nope_every=3)
  scheme = positions.build(cfg, DIMS)
  q, k, pos = qk(5)
  for layer, theta in enumerate(thetas):
    got = scheme.rotate(q, k, pos, pos, layer)
    if layer == 2:
      assert got[0] is q and got[1] is k
    else:
      want = positions.build(rope_cfg(rope_theta=theta, rope_scaling="yarn", rope_scaling_factor=S),
                             DIMS).rotate(q, k, pos, pos, layer)
      assert same(got[0], want[0]) and same(got[1], want[1])


def test_none_is_plain_rope_bit_for_bit():
  q, k, pos = qk(6, positions_high=500)
  old_style = ml_collections.ConfigDict(dict(kind="rope", rope_theta=THETA, rotary_fraction=1.0))
  want = positions.build(old_style, DIMS).rotate(q, k, pos, pos, 0)
  scheme = positions.build(rope_cfg(rope_scaling="none", rope_scaling_factor=8.0), DIMS)
  assert (scheme.position_scale, scheme.qk_scale, scheme.dynamic_train_len) == (1.0, 1.0, 0)
  got = scheme.rotate(q, k, pos, pos, 0)
  assert same(got[0], want[0]) and same(got[1], want[1])
  inv = jnp.asarray(rope_inv_freq(D, THETA))
  assert same(got[0], apply_rope(q, pos, inv))


# ------------------------------------------------------------------ ALiBi interpolation

def test_alibi_interpolation_scale_by_hand():
  """Al-Khateeb et al.: slopes times L / n for n > L (n = position + 1 per query)."""
  pos = jnp.array([[0, 15, 16, 31, 63]], jnp.int32)
  np.testing.assert_allclose(alibi_interpolation_scale(pos, L), [[1, 1, 16 / 17, 0.5, 0.25]],
                             rtol=1e-7)
  cfg = ml_collections.ConfigDict(dict(kind="alibi", alibi_interpolation=True))
  scheme = positions.build(cfg, DIMS)
  plain = positions.build(ml_collections.ConfigDict(dict(kind="alibi")), DIMS)
  bias = np.asarray(scheme.bias(pos, pos, 0))
  slopes = alibi_slopes(2)
  for h in range(2):
    for qi, p in enumerate([0, 15, 16, 31, 63]):
      for kj, pk in enumerate([0, 15, 16, 31, 63][: qi + 1]):
        want = -slopes[h] * (L / max(L, p + 1)) * (p - pk)
        assert bias[0, h, qi, kj] == pytest.approx(want, rel=1e-6, abs=1e-7)
  # Up to L the bias is plain ALiBi bit for bit; beyond it the largest penalty stays below m*L.
  short = jnp.arange(L, dtype=jnp.int32)[None]
  assert same(scheme.bias(short, short, 0), plain.bias(short, short, 0))
  long = jnp.arange(4 * L, dtype=jnp.int32)[None]
  assert np.all(-np.asarray(scheme.bias(long, long, 0))[0, :, -1, 0] < slopes * L)


# ------------------------------------------------------------------ config validation

@pytest.mark.parametrize("fields,match", [
    (dict(rope_scaling="linear"), r"model\.position\.rope_scaling='linear' is not supported"),
    (dict(rope_scaling="pi", rope_scaling_factor=0.5), r"rope_scaling_factor must be a number >= 1"),
    (dict(rope_scaling="yarn", rope_scaling_factor="4"), r"rope_scaling_factor must be a number"),
    (dict(rope_scaling="yarn", rope_scaling_train_len=0), r"rope_scaling_train_len must be"),
    (dict(rope_scaling="yarn", yarn_alpha=32.0, yarn_beta=1.0), r"yarn_alpha and yarn_beta"),
    (dict(rope_scaling="abf", abf_theta=1.0), r"abf_theta must be a number > 1"),
    (dict(rope_scaling="abf", rope_theta_per_layer=(1e4,) * 3), r"not defined with rope_theta_per"),
    (dict(rope_scaling="ntk", rope_scaling_factor=2.0, rotary_fraction=0.25), r"at least 4 rotated"),
    (dict(rope_scaling="dynamic_ntk", rotary_fraction=0.25), r"needs at least 4 rotated"),
    (dict(kind="xpos", xpos_scale_base=512.0, rope_scaling="yarn", rope_scaling_factor=2.0),
     r"applies to the kinds \['rope', 'p_rope', 'hope', 'resonance_rope'\] only"),
    (dict(kind="alibi", alibi_interpolation=1), r"alibi_interpolation must be True or False"),
])
def test_bad_fields_name_themselves(fields, match):
  assert_refused_in_one_line(fields, match)


def assert_refused_in_one_line(fields: dict, match: str) -> None:
  """RoPE's model.position with `fields` set is refused by the scheme's check, in one line."""
  cfg = rope_cfg()
  with cfg.ignore_type():
    cfg.update(fields)
  with pytest.raises(ConfigError, match=match) as e:
    positions.build(cfg, DIMS, check_only=True)
  assert "\n" not in str(e.value)


# ------------------------------------------------------------------ apply_extension

def test_apply_extension_sets_fields_on_a_copy():
  config = tiny_config("unused", "rope")
  before = config.to_json()
  out = extensions.apply_extension(config, "yarn", 4)
  assert config.to_json() == before and out is not config
  assert out.model.position.rope_scaling == "yarn" and out.model.position.rope_scaling_factor == 4.0
  validate(out, 1)
  assert extensions.apply_extension(config, "none", 4).to_json() == before
  dyn = extensions.apply_extension(config, "dynamic_ntk", 4.0)
  assert dyn.model.position.rope_scaling == "dynamic_ntk"
  assert dyn.model.position.rope_scaling_factor == 1.0  # unused by dynamic_ntk: not recorded
  alibi = extensions.apply_extension(tiny_config("unused", "alibi"), "alibi_interpolation", 4.0)
  assert alibi.model.position.alibi_interpolation is True
  validate(alibi, 1)


def test_apply_extension_on_a_config_that_predates_the_fields():
  """A run's config.json written before these fields existed (and a locked ConfigDict)."""
  config = tiny_config("unused", "rope")
  d = config.to_dict()
  for name in rope_scaling.DEFAULTS:
    del d["model"]["position"][name]
  old = ml_collections.ConfigDict(d)
  old.lock()
  out = extensions.apply_extension(old, "abf", 1.0)
  assert out.model.position.rope_scaling == "abf" and out.model.position.abf_theta == 5e5
  validate(out, 1)


@pytest.mark.parametrize("kind,extension,factor,match", [
    ("rope", "linear", 4.0,
     r"eval\.extension='linear' is not supported; choose one of \['none', 'pi', 'ntk'"),
    ("alibi", "yarn", 4.0, r"eval\.extension='yarn' applies to model\.position\.kind in "
     r"\['rope', 'p_rope', 'hope', 'resonance_rope'\] only; this run's kind is 'alibi' "
     r"\(choose one of \['none', "
     r"'alibi_interpolation', 'self_extend', 'string', 'lm_infinite', 'dca', 'blockwise', "
     r"'streaming_llm', 'randomized_positions', 'attention_temperature'\]\)"),
    ("rope", "longrope", 4.0, r"model\.position\.longrope_long_factors must be a tuple of "
     r"rot_dim/2 = 8 numbers >= 1 .*python -m sweeps\.longrope_search; got \(\)"),
    ("rope", "llama3", 0.5, r"eval\.extension='llama3' needs a finite factor s >= 1"),
    ("rope", "alibi_interpolation", 4.0, r"eval\.extension='alibi_interpolation' applies to "
                                         r"model\.position\.kind in \['alibi'\] only"),
    ("xpos", "pi", 4.0, r"eval\.extension='pi' applies to model\.position\.kind in "
                        r"\['rope', 'p_rope', 'hope', 'resonance_rope'\] only"),
    ("rope", "pi", 0.5, r"eval\.extension='pi' needs a finite factor s >= 1"),
    ("rope", "yarn", None, r"eval\.extension='yarn' needs a finite factor s >= 1"),
    ("rope", "ntk", float("inf"), r"eval\.extension='ntk' needs a finite factor s >= 1 .*; got inf"),
    ("rope", "self_extend", float("nan"), r"G from eval\.factor, which must be an integer >= 1"),
])
def test_apply_extension_errors(kind, extension, factor, match):
  with pytest.raises(ConfigError, match=match) as e:
    extensions.apply_extension(tiny_config("unused", kind), extension, factor)
  assert "\n" not in str(e.value)


def test_apply_extension_refuses_to_stack_on_a_trained_scaling():
  config = extensions.apply_extension(tiny_config("unused", "rope"), "abf", 1.0)
  with pytest.raises(ConfigError, match=r"eval\.extension='pi' cannot be applied to a run trained "
                                        r"with model\.position\.rope_scaling='abf'"):
    extensions.apply_extension(config, "pi", 2.0)


# ------------------------------------------------------------------ the whole model at 4x

@pytest.mark.parametrize("extension", ["none", "pi", "ntk", "dynamic_ntk", "yarn", "abf",
                                       "llama3", "longrope", "alibi_interpolation",
                                       "attention_temperature"])
def test_decoder_with_extension_restores_the_trained_parameters_and_runs_at_4x(extension):
  kind = "alibi" if extension == "alibi_interpolation" else "rope"
  trained = tiny_config("unused", kind)  # train_len 32
  trained.model.attention_chunk = 0
  trained.model.position.longrope_long_factors = (1.0, 1.0, 1.5, 2.0, 3.0, 4.0, 4.0, 4.0)
  params = nnx.state(Decoder(trained, rngs=nnx.Rngs(0)))
  ext = extensions.apply_extension(trained, extension, 4.0)
  shapes = lambda state: jax.tree.map(lambda x: (x.shape, x.dtype), nnx.to_pure_dict(state))
  model = Decoder(ext, rngs=nnx.Rngs(1))
  assert shapes(nnx.state(model)) == shapes(params)  # same parameters: a checkpoint restores
  nnx.update(model, params)
  ext.model.attention_chunk = 32
  chunked = Decoder(ext, rngs=nnx.Rngs(1))
  nnx.update(chunked, params)
  n = 4 * trained.data.train_len
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 256, size=(2, n)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (2, n))
  seg = jnp.ones((2, n), jnp.int32)
  logits = np.asarray(model(tokens, pos, seg))
  assert logits.shape == (2, n, trained.model.vocab_size) and np.isfinite(logits).all()
  # Query chunking (attention_chunk=32) changes nothing: dynamic NTK sees the whole window's
  # length, ALiBi interpolation is per query.
  np.testing.assert_allclose(np.asarray(chunked(tokens, pos, seg)), logits, rtol=2e-5, atol=2e-5)
  base = Decoder(trained, rngs=nnx.Rngs(1))
  nnx.update(base, params)
  base_logits = np.asarray(base(tokens, pos, seg))
  if extension == "none":
    assert same(logits, base_logits)
  else:
    assert not np.allclose(logits, base_logits, atol=1e-4)
  if extension in ("dynamic_ntk", "alibi_interpolation", "attention_temperature"):
    # Within train_len these are the trained model, bit for bit.
    short = slice(0, trained.data.train_len)
    assert same(model(tokens[:, short], pos[:, short], seg[:, short]),
                base(tokens[:, short], pos[:, short], seg[:, short]))


def test_defaults_match_the_base_config_but_for_the_legacy_ones():
  """New configs take CONFIG_FIELDS' defaults; a stored config that lacks a field whose default
  changed means the value runs used before (LEGACY_DEFAULTS: YaRN's paper ramp)."""
  from configs import base
  position = base.get_config().model.position
  assert rope_scaling.LEGACY_DEFAULTS == {"yarn_ramp": "ratio"}
  assert position.yarn_ramp == "index" and rope_scaling.DEFAULTS["yarn_ramp"] == "ratio"
  assert ({name: position[name] for name in rope_scaling.DEFAULTS}
          == {**rope_scaling.DEFAULTS, "yarn_ramp": "index"})


def test_a_window_other_than_the_default_names_its_files():
  assert extensions.extension_suffix("self_extend", 8.0, 100) == "_self_extend_x8_w100"
  assert extensions.extension_suffix("string", 8.0, 32) == "_string_w32"
  assert extensions.extension_suffix("yarn", 4.0, 32) == "_yarn_x4"  # yarn has no window
  assert extensions.applied_window("lm_infinite", -1) == -1


@pytest.mark.parametrize("extension,suffix,recorded", [
    ("none", "", 1.0), ("pi", "_pi_x8", 8.0), ("yarn", "_yarn_x8", 8.0),
    ("self_extend", "_self_extend_x8", 8.0), ("dynamic_ntk", "_dynamic_ntk", 1.0),
    ("string", "_string", 1.0), ("lm_infinite", "_lm_infinite", 1.0),
])
def test_results_record_the_factor_the_extension_uses(extension, suffix, recorded):
  """eval.factor=8 with STRING or dynamic NTK is not a factor of theirs: files and JSON say so."""
  assert extensions.extension_suffix(extension, 8.0) == suffix
  assert extensions.applied_factor(extension, 8.0) == recorded


def test_the_extension_header_of_results():
  c = tiny_config("unused", "rope")
  c.eval.extension, c.eval.factor, c.eval.window = "yarn", 4.0, 16
  c.model.position.yarn_alpha = 2.0
  assert extensions.extension_header(c) == {
      "extension": "yarn", "extension_factor": 4.0, "extension_window": -1,
      "extension_params": {"yarn_alpha": 2.0, "yarn_beta": 32.0, "yarn_ramp": "index",
                           "yarn_truncate": True, "yarn_attention_factor": -1.0,
                           "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0}}
  c.eval.extension = "self_extend"  # reads the factor (group size) and the window
  assert extensions.extension_header(c) == {
      "extension": "self_extend", "extension_factor": 4.0, "extension_window": 16,
      "extension_params": {}}
  assert extensions.extension_header(c, "none") == {
      "extension": "none", "extension_factor": 1.0, "extension_window": -1, "extension_params": {}}


def test_eval_time_parameters_may_change_only_for_the_extension_that_reads_them():
  run = tiny_config("unused", "rope").model.position
  ev = tiny_config("unused", "rope").model.position
  assert extensions.check_param_overrides(run, ev, ["yarn"]) == {}
  ev.string_shift, ev.abf_theta = 100, 1e6
  assert extensions.check_param_overrides(run, ev, ["string", "abf"]) == {
      "string": {"string_shift": 100}, "abf": {"abf_theta": 1e6}}
  assert extensions.extension_suffix("string", 1.0, -1, {"string_shift": 100}) == \
      "_string_string_shift100"
  with pytest.raises(ConfigError, match=r"model\.position\.abf_theta is read by "
                                        r"eval\.extension='abf' only; this evaluation runs"):
    extensions.check_param_overrides(run, ev, ["string"])
  ev.abf_theta, ev.rope_theta = run.abf_theta, 500.0  # a trained parameter: refused
  with pytest.raises(ConfigError, match=r"model\.position\.rope_theta must stay as trained"):
    extensions.check_param_overrides(run, ev, ["string"])
  trained = tiny_config("unused", "rope").model.position
  trained.rope_scaling = "yarn"  # trained with YaRN: its alpha/beta are the model's
  changed = tiny_config("unused", "rope").model.position
  changed.rope_scaling, changed.yarn_alpha = "yarn", 2.0
  with pytest.raises(ConfigError, match=r"yarn_alpha must stay as trained"):
    extensions.check_param_overrides(trained, changed, ["none"])
  assert extensions.extension_params("lm_infinite", run) == {
      "lm_infinite_global": 10, "lm_infinite_distance": -1}


# ================================================================== the catalogue at parity
# Each reference below is an independent numpy transcription of the published definition (the
# paper's equation or the authors' / Hugging Face's code as named), in float64, written for this
# test from reading those sources (transformers src/transformers/modeling_rope_utils.py,
# jquesnelle/yarn scaled_rope/LlamaYaRNScaledRotaryEmbedding.py, DeepSeek-V2's yarn_get_mscale,
# Meta's Llama 3.1 apply_scaling, microsoft/LongRoPE rope/longrope.py); literal numbers were
# computed once with the same transcriptions (python float64) and checked by hand where noted.

def hf_dynamic_inv_freq(dim, base, train_len, a, seq_len):
  """HF _compute_dynamic_ntk_parameters: seq_len = max(seq_len, L);
  base' = base * (a * seq_len / L - (a - 1)) ** (dim / (dim - 2)); inv = 1 / base'^(2i/dim)."""
  seq_len = max(seq_len, train_len)
  b2 = base * ((a * seq_len / train_len) - (a - 1)) ** (dim / (dim - 2))
  return 1.0 / b2 ** (np.arange(0, dim, 2) / dim)


def hf_yarn_inv_freq(dim, base, train_len, factor, beta_fast=32, beta_slow=1, truncate=True):
  """HF _compute_yarn_parameters (and jquesnelle/yarn for truncate=True): the correction
  dimensions of beta_fast / beta_slow rotations, floor/ceil when truncating, clamped to
  [0, dim - 1]; ramp = clip((j - low) / (high - low), 0, 1) over the dim/2 pairs;
  inv = inv_interp * ramp + inv_extrap * (1 - ramp)."""
  def corr(rot):
    return dim * math.log(train_len / (rot * 2 * math.pi)) / (2 * math.log(base))
  low, high = corr(beta_fast), corr(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  if low == high:
    high += 0.001
  ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
  pos_freqs = base ** (np.arange(0, dim, 2) / dim)
  extrap, interp = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
  extrap_factor = 1 - ramp
  return interp * (1 - extrap_factor) + extrap * extrap_factor


def meta_llama3_inv_freq(dim, base, factor, low, high, old_len):
  """Meta's apply_scaling (Llama 3.1), loop form: wavelen < old/high keep; > old/low divide by
  factor; else smooth = (old / wavelen - low) / (high - low), (1 - smooth) f / factor + smooth f."""
  out = []
  for f in 1.0 / base ** (np.arange(0, dim, 2) / dim):
    wavelen = 2 * math.pi / f
    if wavelen < old_len / high:
      out.append(f)
    elif wavelen > old_len / low:
      out.append(f / factor)
    else:
      smooth = (old_len / wavelen - low) / (high - low)
      out.append((1 - smooth) * f / factor + smooth * f)
  return np.array(out)


def hf_longrope(dim, base, factors, factor, original_len):
  """HF _compute_longrope_parameters / LongRoPE rope/longrope.py: inv = 1 / (lambda * base^(2i/d)),
  attention factor sqrt(1 + ln(factor) / ln(original)) for factor > 1, else 1."""
  inv = 1.0 / (np.asarray(factors, np.float64) * base ** (np.arange(0, dim, 2) / dim))
  att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_len))
  return inv, att


# ------------------------------------------------------------------ dynamic NTK, HF's alpha

def test_dynamic_ntk_hf_form_by_hand_and_against_hf():
  """s' = a l/L - (a - 1) for l > L: a = 2, L = 16 -> l = 16, 17, 32, 64: 1, 1.125, 3, 7."""
  np.testing.assert_allclose(rope_frequencies.dynamic_ntk_factor(jnp.array([8, 16, 17, 32, 64]), L, 2.0),
                             [1, 1, 1.125, 3, 7], rtol=1e-7)
  plain = jnp.asarray(rope_inv_freq(D, THETA))
  lengths = [16, 17, 32, 64]
  got = np.asarray(rope_frequencies.dynamic_ntk_inv_freq(plain, jnp.array(lengths), L, 2.0))
  for row, l in zip(got, lengths):
    np.testing.assert_allclose(row, hf_dynamic_inv_freq(D, THETA, L, 2.0, l), rtol=2e-6)
  # alpha = 1 is the paper's form, bit for bit the values before the field existed.
  assert same(rope_frequencies.dynamic_ntk_inv_freq(plain, jnp.array(lengths), L, 1.0),
              rope_frequencies.dynamic_ntk_inv_freq(plain, jnp.array(lengths), L))
  # a l/L - (a - 1) = l'/L at l' = a l - (a - 1) L: the paper's form at 18, 48 and 112 tokens.
  np.testing.assert_allclose(got[1:], rope_frequencies.dynamic_ntk_inv_freq(
      plain, jnp.array([18, 48, 112]), L, 1.0), rtol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_dynamic_ntk_is_plain_rope_up_to_train_len_for_both_forms(alpha):
  scheme = positions.build(rope_cfg(rope_scaling="dynamic_ntk", dynamic_ntk_alpha=alpha), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  q, k, pos = qk(7, positions_high=L)
  pos = pos.at[:, -1].set(L - 1)  # length exactly L
  for jit in (lambda f: f, jax.jit):
    got = jit(lambda *a: scheme.rotate(*a, 0))(q, k, pos, pos)
    want = jit(lambda *a: plain.rotate(*a, 0))(q, k, pos, pos)
    assert same(got[0], want[0]) and same(got[1], want[1])
  long_pos = pos.at[1, -1].set(4 * L - 1)  # row 1 at 4L: NTK with s' = a * 4 - (a - 1)
  got_q, _ = scheme.rotate(q, k, long_pos, long_pos, 0)
  ntk = positions.build(rope_cfg(rope_scaling="ntk", rope_scaling_factor=3 * alpha + 1), DIMS)
  np.testing.assert_allclose(got_q[1], ntk.rotate(q, k, long_pos, long_pos, 0)[0][1], atol=1e-5)


# ------------------------------------------------------------------ YaRN: the authors' ramp

def test_yarn_correction_range_literals():
  """d = 64, b = 1e4, L = 4096: i(32) = 64 ln(4096 / (64 pi)) / (2 ln 1e4) = 10.4722,
  i(1) = 64 ln(4096 / (2 pi)) / (2 ln 1e4) = 22.5134 (by hand); floor / ceil: 10 and 23."""
  assert rope_frequencies.yarn_correction_range(64, 1e4, 4096) == (10.0, 23.0)
  lo, hi = rope_frequencies.yarn_correction_range(64, 1e4, 4096, truncate=False)
  assert lo == pytest.approx(10.472240810318025, rel=1e-12)
  assert hi == pytest.approx(22.513440636877274, rel=1e-12)
  assert rope_frequencies.yarn_correction_range(16, 1e4, 4096) == (2.0, 6.0)
  # Clamped to [0, d - 1]: at L = 16 with d = 8 the beta index is negative.
  assert rope_frequencies.yarn_correction_range(D, THETA, L)[0] == 0.0


@pytest.mark.parametrize("dim", [16, 64])
@pytest.mark.parametrize("factor", [4.0, 8.0])
@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_index_ramp_matches_hf(dim, factor, truncate):
  want = hf_yarn_inv_freq(dim, 1e4, 4096, factor, truncate=truncate)
  got = rope_frequencies.yarn_inv_freq(dim, 1e4, 4096, factor, ramp="index", truncate=truncate)
  assert got.dtype == np.float32 and got.shape == (dim // 2,)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  half = positions.Dims(num_heads=1, head_dim=dim, d_model=dim, num_layers=1, train_len=4096)
  scheme = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=factor,
                                    yarn_ramp="index", yarn_truncate=truncate), half)
  np.testing.assert_array_equal(np.asarray(scheme.inv_freq, np.float32), got)
  assert scheme.qk_scale == pytest.approx(0.1 * math.log(factor) + 1, rel=1e-15)


def test_yarn_ramps_differ_between_the_correction_dimensions_only():
  """d = 64, L = 4096, s = 8: pairs 0..10 kept and 23..31 divided by s in both ramps; the ratio
  ramp (the paper's, today's values) and the index ramp differ on pairs 11..22."""
  theta = rope_frequencies._base_inv_freq(64, 1e4)
  ratio = rope_frequencies.yarn_inv_freq(64, 1e4, 4096, 8.0)  # the function's default: "ratio"
  index = rope_frequencies.yarn_inv_freq(64, 1e4, 4096, 8.0, ramp="index")
  np.testing.assert_allclose(ratio[:10], theta[:10], rtol=1e-6)
  np.testing.assert_allclose(index[:11], theta[:11], rtol=1e-6)
  np.testing.assert_allclose(index[23:], theta[23:] / 8, rtol=1e-6)
  np.testing.assert_allclose(ratio[23:], theta[23:] / 8, rtol=1e-6)
  assert not np.allclose(ratio[11:23], index[11:23], rtol=1e-3)
  r = 4096 * theta / (2 * math.pi)  # the paper's Eq. (17)-(18) by hand
  gamma = np.clip((r - 1) / 31, 0, 1)
  np.testing.assert_allclose(ratio, (1 - gamma) * theta / 8 + gamma * theta, rtol=1e-6)


def test_yarn_ramp_field_selects_the_ramp_and_old_configs_keep_the_paper_ramp():
  new = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=S, yarn_ramp="index"),
                        DIMS)
  np.testing.assert_array_equal(np.asarray(new.inv_freq, np.float32),
                                rope_frequencies.yarn_inv_freq(D, THETA, L, S, ramp="index"))
  old = ml_collections.ConfigDict(dict(kind="rope", rope_theta=THETA, rotary_fraction=1.0,
                                       rope_scaling="yarn", rope_scaling_factor=S))
  old_scheme = positions.build(old, DIMS)  # no yarn_ramp: a run made before the field
  np.testing.assert_array_equal(np.asarray(old_scheme.inv_freq, np.float32),
                                rope_frequencies.yarn_inv_freq(D, THETA, L, S))
  assert not np.array_equal(old_scheme.inv_freq, new.inv_freq)


def test_yarn_attention_factor_forms():
  """Default m = 1, m_all = 0: 0.1 ln s + 1 bit for bit (Eq. 22). DeepSeek-V2 (s = 40,
  mscale = mscale_all_dim = 0.707): 1. m = 1, m_all = 0.707: (0.1 ln 40 + 1) / (0.0707 ln 40 + 1)
  = 1.36889 / 1.26080 = 1.08573 (by hand)."""
  for s in (1.0, 2.0, 4.0, 40.0):
    assert rope_frequencies.yarn_attention_factor(s) == 0.1 * math.log(s) + 1.0
  assert rope_frequencies.yarn_attention_factor(40.0, 0.707, 0.707) == 1.0
  assert rope_frequencies.yarn_attention_factor(40.0, 1.0, 0.707) == pytest.approx(1.085732, rel=1e-5)
  assert rope_frequencies.yarn_get_mscale(0.5, 3.0) == 1.0  # s <= 1
  got = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=40.0, yarn_mscale=1.0,
                                 yarn_mscale_all_dim=0.707), DIMS).qk_scale
  assert got == rope_frequencies.yarn_attention_factor(40.0, 1.0, 0.707)
  override = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=S,
                                      yarn_attention_factor=1.5), DIMS)
  assert override.qk_scale == 1.5
  np.testing.assert_array_equal(override.inv_freq, positions.build(
      rope_cfg(rope_scaling="yarn", rope_scaling_factor=S), DIMS).inv_freq)


# ------------------------------------------------------------------ Llama 3.1

def test_llama3_literals_at_the_published_setting():
  """head_dim 16, b = 5e5, s = 8, low 1, high 4, L = 8192. Wavelengths 2 pi 5e5^(i/8) = 6.28,
  32.4, 167, 862, 4443, 22911, 118143, 609226: pairs 0-3 below L/4 = 2048 (kept), pair 4 in
  [2048, 8192] (blended: g = (8192 / 4442.88 - 1) / 3 = 0.28128, (1 - g) 1.41421e-3 / 8 +
  g 1.41421e-3 = 5.24846e-4 by hand), pairs 5-7 above 8192 (divided by 8)."""
  got = rope_frequencies.llama3_inv_freq(16, 5e5, 8192, 8.0, 1.0, 4.0)
  literal = [1.0, 1.9392274475e-01, 3.7606030931e-02, 7.2926647372e-03, 5.2484616099e-04,
             3.4281021960e-05, 6.6478698712e-06, 1.2891731722e-06]
  np.testing.assert_allclose(got, literal, rtol=1e-7)
  np.testing.assert_allclose(got, meta_llama3_inv_freq(16, 5e5, 8.0, 1.0, 4.0, 8192), rtol=1e-6)
  plain = rope_inv_freq(16, 5e5)
  np.testing.assert_array_equal(got[:4], plain[:4])
  np.testing.assert_allclose(got[5:], plain[5:] / 8, rtol=1e-6)


def test_llama3_blend_at_a_tiny_context():
  """d = 8, b = 1e4, L = 64, s = 8: wavelengths 6.28, 62.8, 628, 6283 against L/4 = 16 and
  L/1 = 64: pair 0 kept, pair 1 blended (g = (64 / 62.83 - 1) / 3 = 0.0061973, 0.0125 (1 - g) +
  0.1 g = 0.0130423 by hand), pairs 2, 3 divided by 8."""
  got = rope_frequencies.llama3_inv_freq(D, THETA, 64, 8.0)
  np.testing.assert_allclose(got, [1.0, 1.3042256044e-02, 1.25e-03, 1.25e-04], rtol=1e-7)
  np.testing.assert_allclose(got, meta_llama3_inv_freq(D, THETA, 8.0, 1.0, 4.0, 64), rtol=1e-6)
  cfg = rope_cfg(rope_scaling="llama3", rope_scaling_factor=8.0, rope_scaling_train_len=64)
  scheme = positions.build(cfg, DIMS)
  np.testing.assert_array_equal(np.asarray(scheme.inv_freq, np.float32), got)
  assert (scheme.position_scale, scheme.qk_scale) == (1.0, 1.0)
  q, k, pos = qk(8, positions_high=200)
  assert same(scheme.rotate(q, k, pos, pos, 0)[0], apply_rope(q, pos, jnp.asarray(got)))
  # Other low / high move the bands: with high = 2 (L/2 = 32) pair 1 (62.8) is still blended.
  other = rope_frequencies.llama3_inv_freq(D, THETA, 64, 8.0, 1.0, 2.0)
  np.testing.assert_allclose(other, meta_llama3_inv_freq(D, THETA, 8.0, 1.0, 2.0, 64), rtol=1e-6)


# ------------------------------------------------------------------ LongRoPE

LAMBDA = (1.0, 1.5, 3.0, 4.0)


def test_longrope_frequencies_and_attention_factor_literals():
  """d = 8, b = 1e4, lambda = (1, 1.5, 3, 4): theta / lambda = 1, 0.1/1.5, 0.01/3, 0.001/4;
  s = 4, L = 16: sqrt(1 + ln 4 / ln 16) = sqrt(1.5) = 1.2247449 (by hand)."""
  got = rope_frequencies.longrope_inv_freq(D, THETA, LAMBDA)
  np.testing.assert_allclose(got, [1.0, 6.6666666667e-02, 3.3333333333e-03, 2.5e-04], rtol=1e-7)
  want, att = hf_longrope(D, THETA, LAMBDA, 4.0, 16)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert rope_frequencies.longrope_attention_factor(4.0, 16) == pytest.approx(math.sqrt(1.5), rel=1e-15)
  assert att == pytest.approx(1.224744871391589, rel=1e-15)
  assert rope_frequencies.longrope_attention_factor(1.0, 16) == 1.0
  np.testing.assert_array_equal(rope_frequencies.longrope_inv_freq(D, THETA, ()),
                                rope_inv_freq(D, THETA))


def test_longrope_switches_rows_at_the_original_length():
  """Row 0 (l <= L) uses the short factors, row 1 (l > L) the long ones; q and k times the
  attention factor sqrt(1 + ln s / ln L) in both (as HF)."""
  short = (1.0, 1.0, 1.2, 1.3)
  cfg = rope_cfg(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
                 longrope_short_factors=short)
  scheme = positions.build(cfg, DIMS)
  assert scheme.qk_scale == pytest.approx(math.sqrt(1.5), rel=1e-15)
  q, k, pos = qk(9, positions_high=L)
  pos = pos.at[0, -1].set(L - 1).at[1, -1].set(4 * L - 1)
  got_q, got_k = scheme.rotate(q, k, pos, pos, 0)
  m = scheme.qk_scale
  for row, factors in ((0, short), (1, LAMBDA)):
    inv = jnp.asarray(hf_longrope(D, THETA, factors, S, L)[0], jnp.float32)
    np.testing.assert_allclose(got_q[row], apply_rope(q, pos, inv)[row] * m, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_k[row], apply_rope(k, pos, inv)[row] * m, rtol=1e-6, atol=1e-6)
  override = positions.build(rope_cfg(rope_scaling="longrope", rope_scaling_factor=S,
                                      longrope_long_factors=LAMBDA,
                                      longrope_attention_factor=1.25), DIMS)
  assert override.qk_scale == 1.25
  # The kernel form: per-row frequencies and the attention factor.
  spec = scheme.kernel_spec(0, pos, pos)
  assert spec.inv_freq.shape == (2, 4) and spec.qk_scale == m
  np.testing.assert_allclose(spec.inv_freq[1], hf_longrope(D, THETA, LAMBDA, S, L)[0], rtol=1e-6)


def test_longrope_keep_first_rotates_the_first_positions_as_plain_rope():
  """LongRoPE's n-hat (Ding et al., Sec. 3.2; the authors' start-token embedding copies plain
  RoPE's cos/sin, without the attention factor, into positions < n-hat)."""
  cfg = rope_cfg(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
                 longrope_keep_first=4)
  scheme = positions.build(cfg, DIMS)
  no_keep = positions.build(rope_cfg(rope_scaling="longrope", rope_scaling_factor=S,
                                     longrope_long_factors=LAMBDA), DIMS)
  plain = positions.build(rope_cfg(), DIMS)
  pos = jnp.asarray([[0, 1, 3, 4, 20, 63], [0, 2, 5, 6, 7, 9]], jnp.int32)
  q, k, _ = qk(10)
  got = scheme.rotate(q, k, pos, pos, 0)
  want_kept = plain.rotate(q, k, pos, pos, 0)
  want_rest = no_keep.rotate(q, k, pos, pos, 0)
  kept = np.asarray(pos < 4)
  for g, wk, wr in zip(got, want_kept, want_rest):
    assert same(np.asarray(g)[kept], np.asarray(wk)[kept])
    assert same(np.asarray(g)[~kept], np.asarray(wr)[~kept])
  reason = scheme.kernel_spec(0, pos, pos)
  assert isinstance(reason, str) and "longrope_keep_first=4" in reason


def test_longrope_per_layer_bases():
  thetas = (100.0, 1e4, 5e5)
  cfg = rope_cfg(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
                 rope_theta_per_layer=thetas, nope_every=3)
  scheme = positions.build(cfg, DIMS)
  q, k, pos = qk(11, positions_high=4 * L)
  for layer, theta in enumerate(thetas[:2]):
    want = positions.build(rope_cfg(rope_theta=theta, rope_scaling="longrope",
                                    rope_scaling_factor=S, longrope_long_factors=LAMBDA),
                           DIMS).rotate(q, k, pos, pos, layer)
    got = scheme.rotate(q, k, pos, pos, layer)
    assert same(got[0], want[0]) and same(got[1], want[1])
  assert scheme.rotate(q, k, pos, pos, 2)[0] is q


# ------------------------------------------------------------------ the LongRoPE search interface

def _search_config(factors):
  c = tiny_config("unused", "rope")  # head_dim 16: 8 pairs; train_len 32
  c.model.attention_chunk = 0
  c.model.position.rope_scaling = "longrope"
  c.model.position.rope_scaling_factor = 4.0
  c.model.position.longrope_long_factors = tuple(factors)
  return c


def test_set_search_frequencies_equals_a_model_built_with_the_factors():
  from models.positions.rope import base_frequencies
  lam_a = (1.0, 1.0, 1.2, 1.8, 2.5, 3.5, 4.0, 4.0)
  lam_b = (1.0, 1.1, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0)
  placeholder = _search_config((4.0,) * 8)
  graphdef, params = nnx.split(Decoder(placeholder, rngs=nnx.Rngs(0)))
  theta = jnp.asarray(base_frequencies(placeholder))
  np.testing.assert_array_equal(theta, rope_inv_freq(16, 1e4))
  n = 4 * placeholder.data.train_len
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, n)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (2, n))
  seg = jnp.ones((2, n), jnp.int32)

  @jax.jit
  def score(params, long_inv_freq):
    model = nnx.merge(graphdef, params)
    model.position.set_search_frequencies(long_inv_freq)  # the Decoder's scheme object
    return model(tokens, pos, seg)

  for lam in (lam_a, lam_b):
    got = score(params, theta / jnp.asarray(lam, jnp.float32))
    built = Decoder(_search_config(lam), rngs=nnx.Rngs(1))
    nnx.update(built, params)
    np.testing.assert_allclose(got, built(tokens, pos, seg), rtol=1e-5, atol=1e-5)
  assert score._cache_size() == 1  # one compilation served both candidates
  # Within L the short factors (all 1 here) are used: the search frequencies do not matter.
  short = slice(0, placeholder.data.train_len)
  model = nnx.merge(graphdef, params)
  model.position.set_search_frequencies(theta / 7.0)
  np.testing.assert_array_equal(model(tokens[:, short], pos[:, short], seg[:, short]),
                                nnx.merge(graphdef, params)(tokens[:, short], pos[:, short],
                                                            seg[:, short]))


def test_set_search_frequencies_refuses_other_models_and_shapes():
  scheme = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=S), DIMS)
  with pytest.raises(ValueError, match="rope_scaling='longrope'"):
    scheme.set_search_frequencies(jnp.ones(4))
  lr = positions.build(rope_cfg(rope_scaling="longrope", rope_scaling_factor=S,
                                longrope_long_factors=LAMBDA), DIMS)
  with pytest.raises(ValueError, match=r"shape \(4,\) or \(3, 4\)"):
    lr.set_search_frequencies(jnp.ones(5))
  lr.set_search_frequencies(jnp.ones((3, 4)))  # one row per layer is accepted


# ------------------------------------------------------------------ new fields' errors

@pytest.mark.parametrize("fields,match", [
    (dict(rope_scaling="dynamic_ntk", dynamic_ntk_alpha=0.5),
     r"model\.position\.dynamic_ntk_alpha must be a number >= 1"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_ramp="linear"),
     r"model\.position\.yarn_ramp must be one of \['index', 'ratio'\]"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_truncate=1),
     r"model\.position\.yarn_truncate must be True or False"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_ramp="ratio", yarn_truncate=False),
     r"model\.position\.yarn_truncate=False applies to yarn_ramp='index' only"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_attention_factor=0.0),
     r"model\.position\.yarn_attention_factor must be -1 \(derived\) or a number > 0"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_mscale_all_dim=-1.0),
     r"model\.position\.yarn_mscale_all_dim must be a number >= 0"),
    (dict(rope_scaling="yarn", rope_scaling_factor=S, yarn_attention_factor=1.2, yarn_mscale=0.7),
     r"model\.position\.yarn_attention_factor \(set\) overrides yarn_mscale"),
    (dict(rope_scaling="llama3", rope_scaling_factor=8.0, llama3_low_freq_factor=4.0),
     r"model\.position\.llama3_low_freq_factor and llama3_high_freq_factor must satisfy "
     r"0 < low < high"),
    (dict(rope_scaling="llama3", rope_scaling_factor=0.5),
     r"model\.position\.rope_scaling_factor must be a number >= 1 .*'llama3'"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S),
     r"model\.position\.longrope_long_factors must be a tuple of rot_dim/2 = 4 numbers >= 1 "
     r"\(the per-pair rescale factors lambda_i\) for rope_scaling='longrope'; search them with "
     r"python -m sweeps\.longrope_search; got \(\)"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=(1.0, 2.0)),
     r"longrope_long_factors must be a tuple of rot_dim/2 = 4 numbers.*got 2 values"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=(1, 2, 0.5, 3)),
     r"longrope_long_factors must be a tuple of rot_dim/2 = 4 numbers >= 1"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
          longrope_short_factors=(1.0,)),
     r"model\.position\.longrope_short_factors must be a tuple of rot_dim/2 = 4 numbers >= 1 "
     r"or \(\)"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
          longrope_attention_factor=-2.0),
     r"model\.position\.longrope_attention_factor must be -1 \(derived\) or a number > 0"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
          longrope_keep_first=-1), r"model\.position\.longrope_keep_first must be an integer >= 0"),
    (dict(rope_scaling="longrope", rope_scaling_factor=S, longrope_long_factors=LAMBDA,
          rope_scaling_train_len=1), r"rope_scaling_train_len=1 leaves LongRoPE's derived"),
    (dict(kind="xpos", xpos_scale_base=512.0, rope_scaling="llama3", rope_scaling_factor=2.0),
     r"rope_scaling='llama3' applies to the kinds \['rope', 'p_rope', 'hope', "
     r"'resonance_rope'\] only"),
])
def test_new_fields_are_refused_in_one_line_naming_the_field(fields, match):
  assert_refused_in_one_line(fields, match)


def test_new_fields_are_refused_by_validate_before_compilation():
  c = tiny_config("unused", "rope")
  c.model.position.rope_scaling = "longrope"
  with pytest.raises(ConfigError, match=r"longrope_long_factors must be a tuple of rot_dim/2 = 8"):
    validate(c, 1)


# ------------------------------------------------------------------ the new extensions

def test_llama3_and_longrope_extensions_and_their_records():
  c = tiny_config("unused", "rope")
  out = extensions.apply_extension(c, "llama3", 8.0)
  assert (out.model.position.rope_scaling, out.model.position.rope_scaling_factor) == ("llama3", 8.0)
  validate(out, 1)
  assert extensions.extension_suffix("llama3", 8.0) == "_llama3_x8"
  c.model.position.longrope_long_factors = (1.0,) * 4 + (2.0,) * 4
  lr = extensions.apply_extension(c, "longrope", 4.0)
  validate(lr, 1)
  lr.eval.extension, lr.eval.factor = "longrope", 4.0
  assert extensions.extension_header(lr)["extension_params"] == {
      "longrope_short_factors": (), "longrope_long_factors": (1.0,) * 4 + (2.0,) * 4,
      "longrope_attention_factor": -1.0, "longrope_keep_first": 0}
  assert extensions.extension_header(lr)["extension_factor"] == 4.0


def test_yarn_extension_on_an_old_config_uses_the_paper_ramp_and_records_it():
  config = tiny_config("unused", "rope")
  d = config.to_dict()
  for name in rope_scaling.CONFIG_FIELDS:
    if name not in ("rope_scaling", "rope_scaling_factor", "rope_scaling_train_len", "yarn_alpha",
                    "yarn_beta", "abf_theta"):
      del d["model"]["position"][name]  # a config.json written before the new fields
  old = extensions.apply_extension(ml_collections.ConfigDict(d), "yarn", 4.0)
  assert old.model.position.yarn_ramp == "ratio"
  assert extensions.extension_params("yarn", old.model.position)["yarn_ramp"] == "ratio"
  new = extensions.apply_extension(config, "yarn", 4.0)
  assert new.model.position.yarn_ramp == "index"
  assert extensions.extension_params("yarn", new.model.position)["yarn_ramp"] == "index"


def test_changed_non_numeric_parameters_name_their_files():
  run = tiny_config("unused", "rope").model.position
  ev = tiny_config("unused", "rope").model.position
  ev.yarn_ramp, ev.yarn_truncate = "ratio", False
  ev.longrope_long_factors = (1.0,) * 8
  changed = extensions.check_param_overrides(run, ev, ["yarn", "longrope"])
  assert changed == {"yarn": {"yarn_ramp": "ratio", "yarn_truncate": False},
                     "dynamic_yarn": {"yarn_ramp": "ratio", "yarn_truncate": False},  # shares them
                     "longrope": {"longrope_long_factors": (1.0,) * 8}}
  assert extensions.extension_suffix("yarn", 4.0, -1, changed["yarn"]) == \
      "_yarn_x4_yarn_rampratio_yarn_truncateFalse"
  suffix = extensions.extension_suffix("longrope", 4.0, -1, changed["longrope"])
  assert suffix.startswith("_longrope_x4_longrope_long_factors8h") and len(suffix) == 44
  assert extensions.extension_suffix("attention_temperature", 1.0, -1,
                                     {"attention_temperature_layers": (2, 3)}) == \
      "_attention_temperature_attention_temperature_layers2-3"


def test_optional_switches_are_recorded_only_when_on():
  """dynamic_ntk_alpha and string_attention_factor extend existing extensions: results computed
  without them keep the records they had (dynamic_ntk: {}, string: string_shift only)."""
  position = tiny_config("unused", "rope").model.position
  assert extensions.extension_params("dynamic_ntk", position) == {}
  assert extensions.extension_params("string", position) == {"string_shift": -1}
  position.dynamic_ntk_alpha, position.string_attention_factor = 2.0, -1.0
  assert extensions.extension_params("dynamic_ntk", position) == {"dynamic_ntk_alpha": 2.0}
  assert extensions.extension_params("string", position) == {
      "string_shift": -1, "string_attention_factor": -1.0}
  run = tiny_config("unused", "rope").model.position
  assert extensions.check_param_overrides(run, position, ["dynamic_ntk", "string"]) == {
      "dynamic_ntk": {"dynamic_ntk_alpha": 2.0}, "string": {"string_attention_factor": -1.0}}
