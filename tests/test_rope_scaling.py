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
from models import extensions, positions, rope_scaling
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
  np.testing.assert_array_equal(rope_scaling._base_inv_freq(D, THETA).astype(np.float32),
                                rope_inv_freq(D, THETA))
  np.testing.assert_allclose(rope_inv_freq(D, THETA), PLAIN, rtol=1e-7)


def test_pi_scales_positions_and_equals_rope_at_m_over_s():
  """Chen et al. Eq. (4): f'(x, m) = f(x, m L / L') = f(x, m / s)."""
  assert rope_scaling.pi_position_scale(S) == 0.25
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
  assert rope_scaling.ntk_theta(D, THETA, S) == pytest.approx(b2, rel=1e-12)
  inv = rope_scaling.ntk_inv_freq(D, THETA, S)
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
  np.testing.assert_allclose(rope_scaling.abf_inv_freq(D, 5e5),
                             [1.0, 5e5 ** -0.25, 5e5 ** -0.5, 5e5 ** -0.75], rtol=1e-7)
  scheme = positions.build(rope_cfg(rope_scaling="abf"), DIMS)  # abf_theta default 500000
  plain = positions.build(rope_cfg(rope_theta=5e5), DIMS)
  q, k, pos = qk(1)
  for got, want in zip(scheme.rotate(q, k, pos, pos, 0), plain.rotate(q, k, pos, pos, 0)):
    assert same(got, want)


# ------------------------------------------------------------------ dynamic NTK

def test_dynamic_ntk_factor_and_frequencies_by_hand():
  """Peng et al. Sec. 3.3: s' = max(1, l/L); at l = 4L it is NTK-aware with s = 4."""
  np.testing.assert_allclose(rope_scaling.dynamic_ntk_factor(jnp.array([1, 8, 16, 17, 64]), L),
                             [1, 1, 1, 17 / 16, 4])
  plain = jnp.asarray(rope_inv_freq(D, THETA))
  inv = np.asarray(rope_scaling.dynamic_ntk_inv_freq(plain, jnp.array([16, 17, 64]), L))
  assert inv.shape == (3, 4) and inv.dtype == np.float32
  assert same(inv[0], plain)  # l <= L: the given frequencies, selected not recomputed
  s17 = 17 / 16
  np.testing.assert_allclose(inv[1], [PLAIN[i] * s17 ** (-2 * i / 6) for i in range(4)], rtol=1e-6)
  np.testing.assert_allclose(inv[2], rope_scaling.ntk_inv_freq(D, THETA, 4.0), rtol=1e-6)


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


# ------------------------------------------------------------------ YaRN

def test_yarn_frequencies_by_hand():
  """Peng et al. Eq. (17)-(20) for d=8, b=1e4, L=16, s=4, alpha=1, beta=32.

  r(i) = L / (2 pi b^(2i/d)) = [2.546, 0.2546, 0.02546, 0.002546]: pair 0 is on the ramp, the
  others below alpha (divided by s)."""
  r = [L / (2 * math.pi / PLAIN[i]) for i in range(4)]
  gamma = [min(1.0, max(0.0, (x - 1) / 31)) for x in r]
  assert gamma[0] == pytest.approx((2.5464790894703255 - 1) / 31) and gamma[1:] == [0, 0, 0]
  np.testing.assert_allclose(rope_scaling.yarn_ramp(D, THETA, L), gamma, rtol=1e-12)
  want = [(1 - g) * t / S + g * t for g, t in zip(gamma, PLAIN)]
  got = rope_scaling.yarn_inv_freq(D, THETA, L, S)
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_yarn_ramp_endpoints():
  """L = 1024: r = [163, 16.3, 1.63, 0.163] -> pair 0 kept, pair 3 divided by s, 1 and 2 blended."""
  inv = rope_scaling.yarn_inv_freq(D, THETA, 1024, S)
  plain = rope_inv_freq(D, THETA)
  assert inv[0] == plain[0]  # r > beta: unchanged
  np.testing.assert_allclose(inv[3], plain[3] / S, rtol=1e-6)  # r < alpha: exactly PI
  for i in (1, 2):
    r = 1024 * PLAIN[i] / (2 * math.pi)
    g = (r - 1) / 31
    assert 0 < g < 1
    np.testing.assert_allclose(inv[i], (1 - g) * PLAIN[i] / S + g * PLAIN[i], rtol=1e-6)
  # Other alpha/beta move the ramp: with beta = 10 pair 1 (r = 16.3) is kept as well.
  assert rope_scaling.yarn_inv_freq(D, THETA, 1024, S, alpha=1, beta=10)[1] == plain[1]


def test_yarn_temperature_and_rotation():
  """Eq. (22): sqrt(1/t) = 0.1 ln(s) + 1 multiplies both q and k, so logits scale by its square."""
  m = rope_scaling.yarn_attention_factor(S)
  assert m == pytest.approx(0.1 * math.log(4) + 1) and m == pytest.approx(1.1386294361119891)
  assert rope_scaling.yarn_attention_factor(1.0) == 1.0
  scheme = positions.build(rope_cfg(rope_scaling="yarn", rope_scaling_factor=S), DIMS)
  q, k, pos = qk(4)
  got_q, got_k = scheme.rotate(q, k, pos, pos, 0)
  inv = jnp.asarray(rope_scaling.yarn_inv_freq(D, THETA, L, S))
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
     r"applies to kind='rope' only"),
    (dict(kind="alibi", alibi_interpolation=1), r"alibi_interpolation must be True or False"),
])
def test_bad_fields_name_themselves(fields, match):
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
    ("rope", "longrope", 4.0,
     r"eval\.extension='longrope' is not supported; choose one of \['none', 'pi', 'ntk'"),
    ("alibi", "yarn", 4.0, r"eval\.extension='yarn' applies to model\.position\.kind in "
     r"\['rope'\] only; this run's kind is 'alibi' \(choose one of \['none', "
     r"'alibi_interpolation', 'self_extend', 'string', 'lm_infinite'\]\)"),
    ("rope", "alibi_interpolation", 4.0, r"eval\.extension='alibi_interpolation' applies to "
                                         r"model\.position\.kind in \['alibi'\] only"),
    ("xpos", "pi", 4.0, r"eval\.extension='pi' applies to model\.position\.kind in \['rope'\] only"),
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
                                       "alibi_interpolation"])
def test_decoder_with_extension_restores_the_trained_parameters_and_runs_at_4x(extension):
  kind = "alibi" if extension == "alibi_interpolation" else "rope"
  trained = tiny_config("unused", kind)  # train_len 32
  trained.model.attention_chunk = 0
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
  if extension in ("dynamic_ntk", "alibi_interpolation"):
    # Within train_len both are the trained model, bit for bit.
    short = slice(0, trained.data.train_len)
    assert same(model(tokens[:, short], pos[:, short], seg[:, short]),
                base(tokens[:, short], pos[:, short], seg[:, short]))


def test_defaults_match_the_base_config():
  from configs import base
  position = base.get_config().model.position
  assert {name: position[name] for name in rope_scaling.DEFAULTS} == rope_scaling.DEFAULTS


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
      "extension_params": {"yarn_alpha": 2.0, "yarn_beta": c.model.position.yarn_beta}}
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
