"""A Llama-family decoder at the README's CPU budget: the shape PE research runs on, made tiny.

SwiGLU MLP, RMSNorm, an untied output head, grouped-query attention (4 query heads sharing 2
key/value heads; Ainslie et al., arXiv 2305.13245) and RoPE (rope_theta 10,000), i.e. Llama 2/3
(Touvron et al., arXiv 2307.09288; Grattafiori et al., arXiv 2407.21783) at 4 layers and
d_model 128 on Shakespeare bytes, with `configs/alibi_tiny.py`'s budget: train_len 256, 900
steps of 16 x 256 tokens, evaluated to 8x. The SwiGLU width 352 (about 8/3 x d_model, a multiple
of 32, as Llama sizes it) keeps the MLP's parameters near alibi_tiny's GELU MLP of 512: 0.80M
parameters in all (alibi_tiny: 0.82M).

  python train.py --config=configs/llama_tiny.py --workdir=workdirs/llama_tiny

Any scheme plugs in as usual (--config.model.position.kind=alibi, ...).
"""

from configs import alibi_tiny


def get_config():
  """Tiny Llama-shaped decoder (GQA 4/2, SwiGLU, untied head, RoPE) on Shakespeare bytes."""
  c = alibi_tiny.get_config()
  c.model.position.kind = "rope"
  c.model.position.rope_theta = 10_000.0
  c.model.num_kv_heads = 2
  c.model.mlp_activation = "swiglu"
  c.model.mlp_dim = 352
  c.model.tie_embeddings = False
  c.model.norm_eps = 1e-5  # Llama's rms_norm_eps
  return c
