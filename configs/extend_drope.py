"""DroPE: drop RoPE after pretraining, recalibrate briefly at the original length, evaluate long
with the paper's attention temperature.

Gelberg et al., "Extending the Context of Pretrained LLMs by Dropping Their Positional
Embeddings", arXiv 2512.12167 (code: github.com/SakanaAI/DroPE): the positional embedding is
removed from every layer of a RoPE model (kind "none", NoPE: no parameter changes) and the model
recalibrated at its original context length (Sec. 5); long contexts are then handled zero-shot,
with a softmax temperature at lengths beyond the original one. Here train_len stays L, with the
shared recipe of configs/extension_recipes.py (the same tokens as the other methods), and:

  temperature  every query of every layer times beta = 1 + c ln(s), s = n / L, n = the evaluated
               sequence's length, L = the parent's train_len (`attention_temperature`, form
               "log", per "sequence", layers () = all, l0 = L); beta = 1 for n <= L. Paper,
               App. C.2 "Long-context evaluations": following Wang et al. (arXiv 2404.12224),
               one scalar logit scale (inverse temperature) beta* = 1 + c ln(s), s = C_test /
               C_train, fitted by minimising perplexity at the target length; c = 0.412 for the
               DroPE model trained from scratch (`C_FROM_SCRATCH`, the default: that model is this
               recipe's case, a RoPE run recalibrated without QK-norm, Table 4 left column) and
               c = 0.103 for SmolLM-360M-DroPE (`C_SMOLLM`, recalibrated with QK-norm):
               `--config.model.position.attention_temperature_c=0.103`.
  QK-norm      none. The paper adds QKNorm only to the long SmolLM-360M recalibrations (Sec. 5.1;
               App. C.1; Table 4: "QK-norm False" for the from-scratch model, "True" for
               SmolLM), as a stabiliser for its 1e-3 learning rate (App. D.3, Table 11: without
               it the loss is comparable at 3e-4 and 3e-5). The release's `qk_norm_nope`
               (custom_models/attention.py, `qk_norm`, lines 122-151, and
               `llama_qk_norm_nope_attn_forward`, lines 170-179) adds RMSNorms with a learned
               scale over the whole q and k projections (heads x head_dim; model.qk_norm="full"
               here) after the projections, before the (nulled) rotation. Those are new
               parameters, which a child of train.init_from cannot add, so this recipe leaves
               them out.

Remaining differences from the paper and release:
  - budget and optimiser: the shared recipe's 10% of the parent's tokens at the parent's peak /
    15, constant after warmup, no weight decay. The paper's from-scratch DroPE recalibrates the
    14B-token checkpoint of a 16.8B-token run for the last 2.10B tokens (12.5%) at 1e-3 (above
    the 3e-4 pretraining peak), 70 warmup steps, cosine decay, weight decay 0.1 (Sec. 5.1,
    App. C.1, Table 4); SmolLM-360M 30/60/120B tokens of 600B (Table 4: 31.46B/62.9B/125.8B),
    SmolLM-1.7B and Llama2-7B 20B tokens, 2% and 0.5% (Sec. 5.1). The release's configs differ
    again (cfgs/run_cfg/llama2_7b_drope.yaml: 5,000 steps x 512 x 4,096 tokens, about 10B, at
    1e-4; llama2_7b_drope_qk_norm.yaml: 15,000 steps, about 30B, at 3e-4; smollm_360m_drope.yaml:
    120,000 steps at 3e-4), and App. D.3 calls 3e-4 the default of every experiment but the long
    SmolLM-360M ones.
  - the temperature: the paper fits c per model; 0.412 is their 0.5B model's, not refitted for
    this one. It sets s from the target length C_test; here s = the row's length / L (the same in
    fixed-length perplexity evaluation; under KV-cache decoding the cache's length, which grows).
    The paper applies beta only beyond C_train (ln s < 0 is never used); here beta = 1 there.
    The release contains no length-dependent temperature: its code only lets a fixed
    `softmax_scale` config attribute replace 1/sqrt(d_k) (custom_models/attention.py, lines
    95-97 and 148-150), which no released config sets.

  python train.py --config=configs/extend_drope.py:<parent> --workdir=<child>
"""

from configs import extension_recipes

# beta* = 1 + c ln(s), arXiv 2512.12167 App. C.2 ("Long-context evaluations").
C_FROM_SCRATCH = 0.412  # the DroPE model trained from scratch (0.5B, RoPE -> NoPE, no QK-norm)
C_SMOLLM = 0.103  # SmolLM-360M-DroPE (recalibrated with QK-norm)


def get_config(arg=None):
  """The DroPE child of the RoPE run `arg` = `<parent workdir>[,<s>]` (s sets only the eval
  lengths' range, 0.5 L .. 16 L as for every recipe)."""
  c, length, _ = extension_recipes.child_config(arg, "configs/extend_drope.py", target_len=False)
  pos = c.model.position
  pos.kind = "none"
  pos.attention_temperature = True
  pos.attention_temperature_form = "log"
  pos.attention_temperature_c = C_FROM_SCRATCH
  pos.attention_temperature_per = "sequence"
  pos.attention_temperature_layers = ()
  pos.attention_temperature_l0 = int(length)  # C_train: the parent's length
  return c
