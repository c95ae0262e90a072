"""A SWAN-GPT-style decoder at the tiny scale: NoPE global layers among sliding-window RoPE layers.

SWAN-GPT (Puvvada et al., "SWAN-GPT: An Efficient and Scalable Approach for Long-Context Language
Modeling", arXiv 2504.08719) interleaves global-attention layers without positional encoding
(NoPE) with sliding-window attention layers that use RoPE, so that no layer sees a relative
distance it was not trained on (the windowed RoPE layers never see more than their window; the
NoPE layers see no position at all), and scales the attention logits of the global layers with the
length at inference. Here, on configs/alibi_tiny.py's data and budget:

  * 4 layers: layers 0-2 RoPE with a sliding window of `WINDOW` = 64 tokens, layer 3 global NoPE
    (`model.position.nope_every` = 4 with `model.global_every` = 4: the same layer is both);
  * at evaluation beyond train_len, the global layer's queries times max(1, ln n / ln L) (the
    attention temperature, form "logn", `attention_temperature_layers` = (3,)): add
    `--config.eval.extension=attention_temperature --config.model.position.attention_temperature_layers='(3,)'`
    to `python -m eval.run` (or set the "log" form with your own c: docs/evaluation.md).

The layer ratio (1 global per 4), the window and the log-n form are this preset's choices, sized
for 4 layers and train_len 256; the paper's are for billion-parameter models and its own scaling
constants are not reproduced here.

  python train.py --config=configs/swan_gpt_tiny.py --workdir=workdirs/swan_tiny
"""

from configs import alibi_tiny

WINDOW = 64  # tokens seen by the RoPE layers' sliding window (a quarter of train_len)
GLOBAL_EVERY = 4  # layer 3 of 4: global attention, no positional encoding


def get_config():
  """The tiny decoder with SWAN-GPT's layout: 3 sliding-window RoPE layers, 1 global NoPE layer."""
  c = alibi_tiny.get_config()
  c.model.position.kind = "rope"
  c.model.position.nope_every = GLOBAL_EVERY
  c.model.sliding_window = WINDOW
  c.model.global_every = GLOBAL_EVERY
  return c
