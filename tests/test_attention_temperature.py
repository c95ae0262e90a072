"""The eval-time attention temperature (models/position_transforms.py, applied by models/attention.py,
eval.extension=attention_temperature): queries times max(1, log n / log L) ("logn": log-n scaling,
Chiang & Cholak arXiv 2202.12172, with entropy-aware ABF's lower bound 1, Zhang et al. arXiv
2401.07004 and their code GAIR-NLP/Entropy-ABF patch/EABF.py) or (0.1 ln max(1, n/L) + 1)^2
("yarn": YaRN's Eq. (21)-(22) temperature with s = n / L per query), n = position + 1, on a chosen
subset of layers. Reference values are worked out by hand from those formulas."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.validate import ConfigError, validate
from conftest import tiny_config
from models import attention, attention_path, extensions, position_transforms, positions
from models.decoder import Decoder


def test_scale_values_by_hand():
  """L = 256: n = 1, 256 -> 1 (never below 1); n = 257 -> ln 257 / ln 256; n = 1024 -> 10/8;
  n = 65536 -> 16/8. yarn: n/L = 4 -> (0.1 ln 4 + 1)^2 = 1.1386294^2; n/L = 256 ->
  (0.1 ln 256 + 1)^2 = 1.5545177^2."""
  pos = jnp.array([[0, 255, 256, 1023, 65535]], jnp.int32)
  logn = position_transforms.attention_temperature_scale(pos, 256, "logn")
  assert logn.dtype == jnp.float32 and logn.shape == (1, 5)
  np.testing.assert_allclose(logn[0], [1.0, 1.0, math.log(257) / math.log(256), 1.25, 2.0],
                             rtol=1e-6)
  yarn = position_transforms.attention_temperature_scale(pos, 256, "yarn")
  np.testing.assert_allclose(yarn[0], [1.0, 1.0, (0.1 * math.log(257 / 256) + 1) ** 2,
                                       1.1386294361119891 ** 2, 1.5545177444479562 ** 2],
                             rtol=1e-6)
  # The training-time model.logn_scaling is log n / log L everywhere (below 1 before L).
  assert float(attention.logn_scale(pos, 256)[0, 0]) == 0.0
  with pytest.raises(ValueError, match="form must be one of"):
    position_transforms.attention_temperature_scale(pos, 256, "sqrt")


def test_layer_subsets():
  """() = every layer; EABF leaves the first two layers unscaled."""
  c = tiny_config("unused", "rope").model.position
  assert position_transforms.temperature_forms(c, 4, 32) == ("",) * 4
  c.attention_temperature = True
  assert position_transforms.temperature_forms(c, 4, 32) == ("logn",) * 4
  c.attention_temperature_layers, c.attention_temperature_form = (2, 3), "yarn"
  assert position_transforms.temperature_forms(c, 4, 32) == ("", "", "yarn", "yarn")


def _layer_and_inputs(temperature, seq=48, impl="xla"):
  c = tiny_config("unused", "none")  # NoPE: rotate is the identity, so q is the projection
  c.model.attention_impl = impl
  dims = positions.Dims.from_config(c)  # train_len 32
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1), temperature=temperature)
  x = jax.random.normal(jax.random.key(2), (2, seq, dims.d_model))
  pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (2, seq))
  return layer, scheme, x, pos, jnp.ones((2, seq), jnp.int32), dims


@pytest.mark.parametrize("form", ["logn", "yarn"])
def test_attention_scales_the_logits_of_queries_beyond_train_len(form):
  layer, scheme, x, pos, seg, dims = _layer_and_inputs(form)
  got = layer.weights(x, pos, seg, scheme)
  q, k, _ = layer._project(x)
  scale = position_transforms.attention_temperature_scale(pos, dims.train_len, form)
  logits = attention.attention_logits(q * scale[:, :, None, None], k)
  mask = attention.attention_mask(48, 48, seg, seg)
  want = jnp.where(mask, jax.nn.softmax(jnp.where(mask, logits, jnp.finfo(jnp.float32).min)), 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  plain_layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1))
  plain = plain_layer.weights(x, pos, seg, scheme)
  # Queries at n <= train_len are untouched, bit for bit; beyond, attention is sharper.
  assert np.array_equal(got[:, :, :dims.train_len], plain[:, :, :dims.train_len])
  assert not np.allclose(got[:, :, dims.train_len:], plain[:, :, dims.train_len:])


def test_the_fused_kernel_falls_back_with_a_reason(caplog, monkeypatch):
  monkeypatch.setattr(attention_path, "_FALLBACKS_LOGGED", set())
  layer, scheme, x, pos, seg, _ = _layer_and_inputs("logn", seq=12, impl="pallas")
  with caplog.at_level("WARNING"):
    jaxpr = jax.make_jaxpr(lambda x: layer(x, pos, seg, scheme))(x)
  assert "pallas_call" not in str(jaxpr)
  messages = [r.getMessage() for r in caplog.records if "attention_impl" in r.getMessage()]
  assert len(messages) == 1 and "attention temperature" in messages[0]


@pytest.mark.parametrize("kind", ["alibi", "rope", "none", "learned"])
def test_the_extension_applies_to_any_scheme(kind):
  c = tiny_config("unused", kind)
  out = extensions.apply_extension(c, "attention_temperature", 8.0)
  assert out.model.position.attention_temperature is True and not c.model.position.attention_temperature
  validate(out, 1)
  out.eval.extension = "attention_temperature"
  assert extensions.extension_header(out) == {
      "extension": "attention_temperature", "extension_factor": 1.0, "extension_window": -1,
      "extension_params": {"attention_temperature_form": "logn",
                           "attention_temperature_layers": ()}}
  assert extensions.extension_suffix("attention_temperature", 8.0) == "_attention_temperature"
  model = Decoder(out, rngs=nnx.Rngs(0))
  assert [b.attention.temperature.form for b in model.blocks] == ["logn", "logn"]


def test_eval_time_form_and_layers_may_change_for_the_extension_only():
  run = tiny_config("unused", "rope").model.position
  ev = tiny_config("unused", "rope").model.position
  ev.attention_temperature_form, ev.attention_temperature_layers = "yarn", (1,)
  assert extensions.check_param_overrides(run, ev, ["attention_temperature"]) == {
      "attention_temperature": {"attention_temperature_form": "yarn",
                                "attention_temperature_layers": (1,)}}
  with pytest.raises(ConfigError, match=r"read by eval\.extension='attention_temperature' only"):
    extensions.check_param_overrides(run, ev, ["yarn"])


def test_a_run_with_logn_scaling_is_refused():
  c = tiny_config("unused", "alibi")
  c.model.logn_scaling = True
  with pytest.raises(ConfigError, match=r"eval\.extension='attention_temperature' cannot be "
                                        r"applied to a run trained with model\.logn_scaling=True"):
    extensions.apply_extension(c, "attention_temperature")
  c.model.position.attention_temperature = True  # both set by hand
  with pytest.raises(ConfigError, match=r"attention_temperature cannot be combined with "
                                        r"model\.logn_scaling=True"):
    Decoder(c, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("fields,match", [
    (dict(attention_temperature=1), r"model\.position\.attention_temperature must be True or False"),
    (dict(attention_temperature_form="sqrt"),
     r"model\.position\.attention_temperature_form must be one of \['logn', 'yarn', 'log'\]"),
    (dict(attention_temperature_layers=(1, 1)),
     r"model\.position\.attention_temperature_layers must be a tuple of distinct layer indices"),
    (dict(attention_temperature_layers=(-1,)),  # configs/field_ranges.py, before the scheme
     r"model\.position\.attention_temperature_layers must be a tuple of integers >= 0; got \(-1,\)"),
])
def test_bad_fields_are_refused_by_validate(fields, match):
  c = tiny_config("unused", "alibi")
  with c.model.position.ignore_type():
    c.model.position.update(fields)
  with pytest.raises(ConfigError, match=match) as e:
    validate(c, 1)
  assert "\n" not in str(e.value)


def test_layers_beyond_the_model_are_refused_before_compilation():
  c = tiny_config("unused", "alibi")  # 2 layers
  c.model.position.attention_temperature_layers = (1, 2)
  with pytest.raises(ConfigError, match=r"attention_temperature_layers=\(1, 2\) names layers "
                                        r"beyond model\.num_layers=2 \(indices 0\.\.1\)"):
    extensions.apply_extension(c, "attention_temperature")
  c.model.position.attention_temperature = True
  with pytest.raises(ConfigError, match=r"beyond model\.num_layers=2"):
    Decoder(c, rngs=nnx.Rngs(0))


def test_the_log_form_with_explicit_constants_per_query_and_per_sequence():
  """beta = 1 + c ln max(1, n / L0): by hand for c = 0.3, L0 = 16, per query (n = position + 1)
  and per sequence (n = the row's length, every query alike); 1 up to L0."""
  pos = jnp.asarray([[0, 15, 16, 31, 63], [0, 1, 2, 3, 4]], jnp.int32)
  got = np.asarray(position_transforms.attention_temperature_scale(pos, 32, "log", c=0.3, l0=16))
  n = np.asarray(pos) + 1.0
  np.testing.assert_allclose(got, 1 + 0.3 * np.log(np.maximum(1, n / 16)), rtol=1e-6)
  assert (got[:, :2] == 1).all() and got[0, 4] == pytest.approx(1 + 0.3 * math.log(4))
  seq = np.asarray(position_transforms.attention_temperature_scale(pos, 32, "log", c=0.3, l0=-1,
                                                                    per="sequence"))
  np.testing.assert_allclose(seq[0], [1 + 0.3 * math.log(64 / 32)] * 5, rtol=1e-6)
  assert (seq[1] == 1).all()  # a row of 5 tokens, below L0 = train_len = 32
  c = tiny_config("unused", "rope")
  c.model.position.update(attention_temperature=True, attention_temperature_form="log",
                          attention_temperature_c=0.3, attention_temperature_l0=16,
                          attention_temperature_per="sequence")
  model = Decoder(c, rngs=nnx.Rngs(0))
  assert model.blocks[0].attention.temperature == position_transforms.Temperature(
      "log", 0.3, 16, "sequence")
  for field, value, match in (("attention_temperature_c", -1.0, "finite number >= 0"),
                              ("attention_temperature_l0", 0, "positive number of tokens or -1"),
                              ("attention_temperature_per", "token", r"one of \['query', 'sequence'\]")):
    bad = tiny_config("unused", "rope").model.position
    bad[field] = value
    with pytest.raises(ConfigError, match=f"model.position.{field} must be .*{match}"):
      position_transforms.check_config(bad, 32)


def test_the_drope_recipe_constants_by_hand():
  """DroPE's beta* = 1 + c ln(s), s = C_test / C_train (arXiv 2512.12167, App. C.2), as the
  recipe sets it (configs/extend_drope.py): c = 0.412, one value per sequence, L0 = L = 32. A row
  of 128 tokens: 1 + 0.412 ln 4 = 1.5711533 for every query; a row of 32 (s = 1): exactly 1."""
  from configs import extend_drope
  assert (extend_drope.C_FROM_SCRATCH, extend_drope.C_SMOLLM) == (0.412, 0.103)
  long = jnp.arange(128, dtype=jnp.int32)[None]
  got = np.asarray(position_transforms.attention_temperature_scale(
      long, 32, "log", c=extend_drope.C_FROM_SCRATCH, l0=32, per="sequence"))
  np.testing.assert_allclose(got, np.full((1, 128), 1.5711533), rtol=1e-6)
  short = np.asarray(position_transforms.attention_temperature_scale(
      long[:, :32], 32, "log", c=extend_drope.C_FROM_SCRATCH, l0=32, per="sequence"))
  assert (short == 1).all()
