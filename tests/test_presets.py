"""Shape presets (configs/presets.py, configs/llama_tiny.py): each parameter count, from
`nnx.eval_shape` (nothing allocated), equals the published figure, and equals the count written
out by hand from the released config.json (the formula below, independent of the model code)."""

import pytest

from configs import llama_tiny, presets
from configs.errors import ConfigError
from configs.validate import validate
from models.spec import count_params


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
