"""Shape presets (configs/presets.py, configs/llama_tiny.py): each parameter count, from
`nnx.eval_shape` (nothing allocated), equals the published figure, and equals the count written
out by hand from the released config.json (the formula below, independent of the model code)."""

import os

import pytest
from flax import nnx

from configs import llama_tiny, presets
from configs.errors import ConfigError
from configs.validate import validate
from conftest import config_file_module
from models.spec import count_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def by_hand(m) -> int:
  """Embedding + per layer (q, k, v, o, their biases, SwiGLU MLP, 2 RMSNorms, QK-norm scales)
  + final RMSNorm (+ untied head)."""
  head_dim = m.head_dim if m.head_dim > 0 else m.d_model // m.num_heads
  kv = m.num_heads if m.num_kv_heads == -1 else m.num_kv_heads
  q, k = m.num_heads * head_dim, kv * head_dim
  layer = m.d_model * (2 * q + 2 * k) + 3 * m.d_model * m.mlp_dim + 2 * m.d_model
  layer += (q + 2 * k) if m.qkv_bias else 0
  layer += {"none": 0, "head": 2 * head_dim, "full": q + k}[m.qk_norm]
  embed = m.vocab_size * m.d_model
  return embed * (1 if m.tie_embeddings else 2) + m.num_layers * layer + m.d_model


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_preset_parameter_count_is_the_published_one(name):
  config = presets.get_config(name)
  validate(config, num_devices=1)
  assert by_hand(config.model) == presets.PUBLISHED_PARAMS[name]
  assert count_params(config) == presets.PUBLISHED_PARAMS[name]


def test_llama_tiny_shape():
  config = llama_tiny.get_config()
  validate(config, num_devices=1)
  m = config.model
  assert (m.num_heads, m.num_kv_heads, m.mlp_activation, m.tie_embeddings,
          m.position.kind) == (4, 2, "swiglu", False, "rope")
  assert count_params(config) == by_hand(m) == 804_736  # alibi_tiny: 820,736


def test_unknown_preset_is_one_line():
  with pytest.raises(ConfigError, match=r"unknown preset; choose one of \['olmo2_1b', "):
    presets.get_config("llama_7b")


def test_the_swan_gpt_preset_puts_global_attention_on_the_nope_layers():
  """configs/swan_gpt_tiny.py: RoPE with a 64-token window on layers 0-2, layer 3 global and NoPE;
  the eval-time temperature on that layer only; it validates."""
  from configs.validate import validate
  from models import extensions
  from models.decoder import Decoder, layer_window
  from models.positions.rope import is_nope_layer
  c = config_file_module("swan_gpt_tiny").get_config()
  validate(c, 1)
  assert [layer_window(c.model, i) for i in range(4)] == [64, 64, 64, 0]
  assert [is_nope_layer(i, c.model.position.nope_every) for i in range(4)] == [False] * 3 + [True]
  c.model.position.attention_temperature_layers = (3,)
  ev = extensions.apply_extension(c, "attention_temperature")
  model = Decoder(ev, rngs=nnx.Rngs(0))
  assert [b.attention.temperature.form for b in model.blocks] == ["", "", "", "logn"]


def test_the_miniwin_preset_rotates_its_window_layers_by_position_mod_the_window():
  """configs/miniwin_tiny.py: layers 0-2 a 64-token window with RoPE at position mod 64, layer 3
  global NoPE; a query at 70 is rotated as one at 6 (70 mod 64)."""
  import jax.numpy as jnp
  import numpy as np

  from models.decoder import layer_window
  from models.positions.rope import RoPE, apply_rope, is_nope_layer, rope_inv_freq
  from models.positions import Dims
  c = config_file_module("miniwin_tiny").get_config()
  validate(c, 1)
  assert [layer_window(c.model, i) for i in range(4)] == [64, 64, 64, 0]
  assert [is_nope_layer(i, c.model.position.nope_every) for i in range(4)] == [False] * 3 + [True]
  dims = Dims.from_config(c)
  scheme = RoPE(c.model.position, dims, rngs=nnx.Rngs(0))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 3, dims.num_heads, dims.head_dim)),
                  jnp.float32)
  pos = jnp.asarray([[70, 63, 200]], jnp.int32)
  q, _ = scheme.rotate(x, x, pos, pos, 0)
  want = apply_rope(x, jnp.asarray([[6, 63, 8]], jnp.int32),
                    jnp.asarray(rope_inv_freq(dims.head_dim, 1e6)))
  np.testing.assert_allclose(q, want, atol=1e-5)
  assert isinstance(scheme.kernel_spec(0, pos, pos), str)  # no fused-kernel form: XLA


def test_a_rope_position_period_with_a_rope_scaling_is_refused():
  from conftest import tiny_config
  c = tiny_config("unused", "rope")
  c.model.position.rope_position_period = 64
  c.model.position.rope_scaling = "pi"
  c.model.position.rope_scaling_factor = 2.0
  with pytest.raises(ConfigError, match="model.position.rope_position_period=64 needs "
                                        "rope_scaling='none'"):
    validate(c, 1)
  c = tiny_config("unused", "rope")
  c.model.position.rope_position_period = -1
  with pytest.raises(ConfigError, match="model.position.rope_position_period"):
    validate(c, 1)
