"""Positional schemes against values from their papers' definitions."""

import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from configs.validate import ConfigError
from eval.perplexity import check_lengths
from models import positions
from tests.conftest import position_config
from models.positions.alibi import ALiBi, alibi_slopes
from models.positions.rope import apply_rope, rope_inv_freq, rotary_dim
from models.positions.sinusoidal import sinusoidal_encoding


position_cfg = position_config


DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=2, train_len=32)


# ------------------------------------------------------------------ ALiBi (arXiv 2108.12409)

def reference_slopes(n):
  """Section 3 of the paper: geometric sequence starting at 2^(-8/n); for n not a power of two,
  the closest lower power p, then every other slope of the 2p sequence."""
  if n & (n - 1) == 0:
    return [2 ** (-8 * h / n) for h in range(1, n + 1)]
  p = 2 ** int(math.log2(n))
  return [2 ** (-8 * h / p) for h in range(1, p + 1)] + \
      [2 ** (-8 * h / (2 * p)) for h in range(1, 2 * p + 1, 2)][: n - p]


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 8, 12, 16])
def test_alibi_slopes_follow_the_paper(num_heads):
  np.testing.assert_allclose(alibi_slopes(num_heads), reference_slopes(num_heads), rtol=0, atol=1e-15)


def test_alibi_slopes_literal_values():
  # The paper: 8 heads -> 1/2, 1/4, ..., 1/256.
  np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])
  np.testing.assert_allclose(alibi_slopes(3), [2 ** -4, 2 ** -8, 2 ** -2])
  np.testing.assert_allclose(alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
  np.testing.assert_allclose(alibi_slopes(12)[8:], [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5])
  with pytest.raises(ValueError):
    alibi_slopes(0)


def test_alibi_bias_is_minus_slope_times_distance():
  scheme = ALiBi(position_cfg("alibi"), DIMS, rngs=None)
  pos = np.array([[0, 1, 2, 5]], np.int32)
  bias = np.asarray(scheme.bias(jnp.asarray(pos), jnp.asarray(pos), layer=0))
  assert bias.shape == (1, 4, 4, 4) and bias.dtype == np.float32
  slopes = alibi_slopes(4)
  for h in range(4):
    for i in range(4):
      for j in range(i + 1):
        assert bias[0, h, i, j] == pytest.approx(-slopes[h] * float(pos[0, i] - pos[0, j]), rel=1e-6)


# ------------------------------------------------------------------ RoPE (arXiv 2104.09864)

def test_rope_inverse_frequencies():
  np.testing.assert_allclose(rope_inv_freq(8, 10000.0), [1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75],
                             rtol=1e-6)
  assert rotary_dim(64, 0.25) == 16 and rotary_dim(10, 0.5) == 4


@pytest.mark.parametrize("offset", [0, 3, 17, 250])
def test_rope_scores_depend_only_on_relative_position(offset):
  rng = np.random.default_rng(offset)
  d = 32
  q = jnp.asarray(rng.normal(size=(1, 1, 1, d)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, d)), jnp.float32)
  inv = jnp.asarray(rope_inv_freq(d, 10000.0))

  def score(m, n):
    qm = apply_rope(q, jnp.array([[m]]), inv)
    kn = apply_rope(k, jnp.array([[n]]), inv)
    return float(jnp.sum(qm * kn))

  for delta in (0, 1, 5, 40):
    assert score(offset + delta, offset) == pytest.approx(score(delta, 0), abs=2e-4)
  # And rotation preserves the norm (it is a rotation).
  np.testing.assert_allclose(np.linalg.norm(apply_rope(q, jnp.array([[offset]]), inv)),
                             np.linalg.norm(q), rtol=1e-5)


def test_rope_matches_explicit_rotation_matrix():
  """Half-split layout: feature i pairs with i + d/2, rotated by angle m * theta_i (Eq. 34)."""
  d, m = 8, 7
  x = np.arange(1, d + 1, dtype=np.float32)
  inv = rope_inv_freq(d, 100.0)
  expected = np.empty(d)
  for i in range(d // 2):
    a = m * inv[i]
    expected[i] = x[i] * math.cos(a) - x[i + d // 2] * math.sin(a)
    expected[i + d // 2] = x[i + d // 2] * math.cos(a) + x[i] * math.sin(a)
  got = apply_rope(jnp.asarray(x)[None, None, None], jnp.array([[m]]), jnp.asarray(inv))
  np.testing.assert_allclose(np.asarray(got)[0, 0, 0], expected, rtol=1e-5)


@pytest.mark.parametrize("kind", ["rope", "xpos"])
def test_partial_rotation_leaves_other_features_bit_identical(kind):
  scheme = positions.build(position_cfg(kind, rotary_fraction=0.25, xpos_scale_base=4.0), DIMS,
                           rngs=None)
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(2, 5, 4, 16)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(2, 5, 4, 16)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5)) + 3
  q2, k2 = scheme.rotate(q, k, pos, pos, layer=0)
  assert np.array_equal(np.asarray(q2)[..., 4:], np.asarray(q)[..., 4:])
  assert np.array_equal(np.asarray(k2)[..., 4:], np.asarray(k)[..., 4:])
  assert not np.allclose(np.asarray(q2)[..., :4], np.asarray(q)[..., :4])


def test_rope_bfloat16_keeps_dtype():
  q = jnp.ones((1, 3, 2, 8), jnp.bfloat16)
  out = apply_rope(q, jnp.array([[0, 1, 2]]), jnp.asarray(rope_inv_freq(8, 1e4)))
  assert out.dtype == jnp.bfloat16


# ------------------------------------------------------------------ sinusoidal (arXiv 1706.03762)

def test_sinusoidal_values():
  pe = np.asarray(sinusoidal_encoding(jnp.array([[0, 1, 50]]), 8))
  for p_idx, pos in enumerate([0, 1, 50]):
    for i in range(4):
      angle = pos / 10000 ** (2 * i / 8)
      assert pe[0, p_idx, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
      assert pe[0, p_idx, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)


# ------------------------------------------------------------------ learned and the registry

def test_learned_refuses_positions_beyond_table_unless_clamped():
  from flax import nnx
  scheme = positions.build(position_cfg("learned"), DIMS, rngs=nnx.Rngs(0))
  assert scheme.max_position == 32
  check_lengths([16, 32], scheme.max_position, "learned")
  with pytest.raises(ConfigError, match="max_len"):
    check_lengths([64], scheme.max_position, "learned", scheme.max_position_hint)
  clamped = positions.build(position_cfg("learned", clamp=True), DIMS, rngs=nnx.Rngs(0))
  assert clamped.max_position is None
  x = jnp.zeros((1, 3, 64))
  out = clamped.embed(x, jnp.array([[31, 32, 1000]]))
  np.testing.assert_array_equal(out[0, 1], out[0, 0])
  np.testing.assert_array_equal(out[0, 2], clamped.table[...][31])


def test_unknown_kind_lists_the_registry():
  with pytest.raises(ConfigError) as e:
    positions.build(position_cfg("bogus"), DIMS)
  for kind in positions.REGISTRY:
    assert kind in str(e.value)
  assert "model.position.kind" in str(e.value)


@pytest.mark.parametrize("field,value", [("rotary_fraction", 0.0), ("rotary_fraction", 1.5),
                                         ("rope_theta", 0.5)])
def test_rope_bad_fields(field, value):
  with pytest.raises(ConfigError, match=field):
    positions.build(position_cfg("rope", **{field: value}), DIMS, check_only=True)


def test_registry_has_the_foundation_schemes():
  assert {"none", "learned", "sinusoidal", "rope", "alibi"} <= set(positions.REGISTRY)
  for cls in positions.REGISTRY.values():
    assert cls.__doc__ and cls.__module__.startswith("models.positions.")


# ------------------------------------------------------------------ config fields from the registry

# configs/base.py's model.position as it was written out by hand before the schemes declared
# their fields (commit ac36d01): the gathered section must equal it, key for key and type for type.
FROZEN_POSITION = {
    "kind": "alibi", "rope_theta": 10000.0, "rotary_fraction": 1.0, "max_len": -1,
    "clamp": False, "sinusoid_base": 10000.0, "per_layer": True, "num_buckets": 32,
    "max_distance": 128, "fire_mlp_width": 32, "fire_init_c": 0.1, "fire_init_threshold": 512.0,
    "sandwich_dim": -1, "xpos_scale_base": 512.0, "cope_npos_max": 64, "nope_every": 0,
    "rope_theta_per_layer": (), "rope_scaling": "none", "rope_scaling_factor": 1.0,
    "rope_scaling_train_len": -1, "yarn_alpha": 1.0, "yarn_beta": 32.0, "abf_theta": 500000.0,
    "alibi_interpolation": False, "position_transform": "none", "self_extend_group": 4,
    "self_extend_window": -1, "string_shift": -1, "string_window": -1, "lm_infinite_global": 10,
    "lm_infinite_window": -1, "lm_infinite_distance": -1,
    "dynamic_ntk_alpha": 1.0, "yarn_ramp": "index", "yarn_truncate": True,
    "yarn_attention_factor": -1.0, "yarn_mscale": 1.0, "yarn_mscale_all_dim": 0.0,
    "llama3_low_freq_factor": 1.0, "llama3_high_freq_factor": 4.0, "longrope_short_factors": (),
    "longrope_long_factors": (), "longrope_attention_factor": -1.0, "longrope_keep_first": 0,
    "string_attention_factor": 1.0, "attention_temperature": False,
    "attention_temperature_form": "logn", "attention_temperature_layers": (),
}
# Fields declared by the schemes registered since (issue 22), with their defaults.
ADDED_POSITION = {
    "p_rope_fraction": 0.75, "hope_train_len": -1, "rope_heads": -1, "alibi_heads": -1,
    "txl_untie_r": False, "dape_base": "alibi", "dape_mlp_width": 32,
    "fope_train_len": -1, "fope_init_gain": 0.3, "fope_seed": 0, "fope_normalize": "none",
    "pope_bias_init": "zeros",
    "fox_gate_bias_init": 0.0, "lerope_per_head": True, "lerope_log_space": True,
    "rope_position_period": 0,
    "abacus_max_offset": 99, "abacus_num_embeddings": 256, "bipe_separators": ".\n",
    "bipe_alibi_slope_scale": 96.0,
    "streaming_llm_sinks": 4, "streaming_llm_window": -1,
    "attention_temperature_c": 0.1, "attention_temperature_l0": -1,
    "attention_temperature_per": "query", "dape_fire_form": "released",
    "alibi_interpolation_rule": "query", "blockwise_block": -1,
    "dca_chunk_size": -1, "dca_local_window": -1,
    "randomized_positions": False, "randomized_draws": 4,
}


def test_the_gathered_position_section_is_the_hand_written_one():
  from configs import base
  position = base.get_config().model.position.to_dict()
  expected = {**FROZEN_POSITION, **ADDED_POSITION}
  assert position == expected
  assert {k: type(v) for k, v in position.items()} == {k: type(v) for k, v in expected.items()}


def test_every_field_is_declared_with_a_one_line_comment():
  fields = positions.config_fields()
  assert set(fields) == (set(FROZEN_POSITION) | set(ADDED_POSITION)) - {"kind"}
  for name, (_, comment) in fields.items():
    assert isinstance(comment, str) and comment and "\n" not in comment, name


def test_the_relative_schemes():
  from models import extensions
  assert set(extensions.relative_kinds()) == {"rope", "xpos", "alibi", "t5", "kerple_log",
                                              "kerple_power", "fire", "sandwich", "p_rope", "hope",
                                              "resonance_rope", "transformer_xl", "dape", "fope", "pope",
                                              "lerope"}


def test_a_shared_field_with_two_defaults_is_refused(monkeypatch):
  class Disagrees(positions.PositionalScheme):
    config_fields = {"per_layer": (False, "shared by all layers.")}

  monkeypatch.setitem(positions.REGISTRY, "disagrees", Disagrees)
  with pytest.raises(ValueError, match=r"model\.position\.per_layer has default True in scheme "
                                       r"'t5' but False in scheme 'disagrees'"):
    positions.config_fields()
  Disagrees.config_fields = {"rope_theta": (10000, "an int where RoPE has a float.")}
  with pytest.raises(ValueError, match=r"rope_theta has default 10000\.0"):
    positions.config_fields()


def test_command_line_overrides_keep_their_types():
  from absl import flags
  from ml_collections import config_flags
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "alibi_tiny.py")

  def parse(*overrides):
    argv = ["prog", f"--config={path}", *overrides]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
    values(argv)
    return values.config.model.position

  p = parse("--config.model.position.rope_theta=20000", "--config.model.position.kind=rope",
            "--config.model.position.per_layer=False", "--config.model.position.nope_every=2")
  assert (p.kind, p.rope_theta, p.per_layer, p.nope_every) == ("rope", 20000.0, False, 2)
  assert isinstance(p.rope_theta, float)
  with pytest.raises(flags.IllegalFlagValueError):
    parse("--config.model.position.nope_every=1.5")


def test_runs_stored_before_a_default_changed_keep_the_values_they_used(tmp_path):
  """A config.json without fields whose default changed (the schemes' legacy_defaults: FoPE's
  normalisation, BiPE's separators and BiPE-ALiBi's slope factor; YaRN's ramp) loads with the
  values those runs used; today's defaults are the released codes'."""
  import json
  from configs.base import get_config
  from configs.stored import load_run_config
  c = get_config().to_dict()
  legacy = {"fope_normalize": "column_sum", "bipe_separators": ".!?\n",
            "bipe_alibi_slope_scale": 1.0, "yarn_ramp": "ratio", "dape_fire_form": "fire"}
  for name in legacy:
    del c["model"]["position"][name]
  (tmp_path / "config.json").write_text(json.dumps({"config": c}))
  stored = load_run_config(str(tmp_path)).model.position
  assert {k: stored[k] for k in legacy} == legacy
  today = get_config().model.position
  assert {k: today[k] for k in legacy} == {"fope_normalize": "none", "bipe_separators": ".\n",
                                          "bipe_alibi_slope_scale": 96.0, "yarn_ramp": "index",
                                          "dape_fire_form": "released"}
