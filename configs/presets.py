"""Shape presets of the published small decoders PE research starts from.

Each preset sets the model section to a released checkpoint's shape, read from its
`config.json` on the Hugging Face hub (layers, widths, heads, KV heads, head_dim, rope_theta,
tied embeddings, QK-norm, QKV biases, RMSNorm epsilon, vocabulary) on top of
`configs/alibi_tiny.py`'s data and training fields; tests/test_presets.py checks each parameter
count (`nnx.eval_shape`, nothing allocated) against the published figure.

  python train.py --config=configs/presets.py:smollm2_135m --workdir=... \
      --config.data.tokenizer=hf:<folder with the model's tokenizer.json>

| preset | source | published parameters |
|---|---|---|
| `smollm2_135m` | HuggingFaceTB/SmolLM2-135M (Allal et al., arXiv 2502.02737) | 134,515,008 |
| `qwen2_5_0_5b` | Qwen/Qwen2.5-0.5B (Qwen team, arXiv 2412.15115) | 494,032,768 (0.49B) |
| `olmo2_1b` | allenai/OLMo-2-0425-1B (OLMo team, arXiv 2501.00656) | 1,484,916,736 (1.48B) |

What a preset does not carry: the weights (`train.init_from=hf:<folder>` reads them, and then
config.json gives the model: docs/pretrained.md) and the tokenizer (set
`data.tokenizer=hf:<path>` and keep `model.vocab_size` at least its size). OLMo 2 normalises
each sublayer's output, x + norm(f(x)): `model.norm_position="post"`.
"""

from configs import alibi_tiny
from configs.errors import ConfigError

# name -> model fields (model.position.* under "position"), from each model's config.json.
PRESETS = {
    "smollm2_135m": dict(num_layers=30, d_model=576, num_heads=9, num_kv_heads=3, head_dim=64,
                         mlp_dim=1536, vocab_size=49152, tie_embeddings=True, qk_norm="none",
                         qkv_bias=False, norm_eps=1e-5, position=dict(rope_theta=100_000.0)),
    "qwen2_5_0_5b": dict(num_layers=24, d_model=896, num_heads=14, num_kv_heads=2, head_dim=64,
                         mlp_dim=4864, vocab_size=151936, tie_embeddings=True, qk_norm="none",
                         qkv_bias=True, norm_eps=1e-6, position=dict(rope_theta=1_000_000.0)),
    "olmo2_1b": dict(num_layers=16, d_model=2048, num_heads=16, num_kv_heads=16, head_dim=128,
                     mlp_dim=8192, vocab_size=100352, tie_embeddings=False, qk_norm="full",
                     qkv_bias=False, norm_eps=1e-6, norm_position="post",
                     position=dict(rope_theta=500_000.0)),
}

# The published parameter counts (the model cards' figures, exact where the hub lists them).
PUBLISHED_PARAMS = {"smollm2_135m": 134_515_008, "qwen2_5_0_5b": 494_032_768,
                    "olmo2_1b": 1_484_916_736}


def get_config(name: str = "smollm2_135m"):
  """The preset `name` (a key of PRESETS): SwiGLU, RMSNorm, RoPE, the released model's shape.

  Raises:
    ConfigError: an unknown preset name (the message lists them).
  """
  if name not in PRESETS:
    raise ConfigError(f"--config=configs/presets.py:{name}: unknown preset; choose one of "
                      f"{sorted(PRESETS)}")
  c = alibi_tiny.get_config()
  fields = dict(PRESETS[name])
  c.model.position.kind = "rope"
  for key, value in fields.pop("position").items():
    c.model.position[key] = value
  for key, value in fields.items():
    c.model[key] = value
  c.model.mlp_activation = "swiglu"
  return c
