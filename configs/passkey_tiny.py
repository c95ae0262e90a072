"""The CPU passkey model: a tiny RoPE decoder trained on Shakespeare mixed with passkey documents.

configs/alibi_tiny.py's model (0.82M parameters, byte-level, train_len 256) with RoPE, three
quarters of the training windows holding passkey documents (data/passkey.py: Mohtashami &
Jaggi's prompt, arXiv 2305.16300, as used by PI, arXiv 2306.15595) of 106..256 tokens, each
followed by its answer, so that retrieval is in distribution. The paper's 148-token preamble is
dropped (data.passkey.preamble=False): with it a prompt needs 248 of the 256 tokens and would leave
almost no filler, no depth to vary and no 0.5x (128-token) cell. Keys keep PI's 5 digits.
Training is 1500 steps of 16 x 256 tokens (about 20 minutes on 2 CPU cores); it ends with the
passkey suite (eval/needle.py: lengths 0.5x..8x train_len x depths 0..100% in 10% steps, 5 trials
per cell).

Why RoPE: measured on 2026-11-30 (README, "Passkey and needle retrieval"), RoPE learns the lookup
in this budget (the loss of the answer's digits falls from 2.27 nats, chance, at step 750 to 0.03
at step 1500, and 96-100% of the keys are retrieved at 0.5x and 1x), while ALiBi and NoPE do not,
so only RoPE gives an in-distribution baseline to measure extrapolation against. Any scheme:
  python train.py --config=configs/passkey_tiny.py --workdir=workdirs/passkey_alibi \
      --config.model.position.kind=alibi
"""

from configs import alibi_tiny


def get_config():
  """alibi_tiny with RoPE, passkey documents in 3/4 of the training windows, 1500 steps."""
  c = alibi_tiny.get_config()
  c.model.position.kind = "rope"
  c.data.passkey.fraction = 0.75
  c.train.num_steps = 1500
  c.train.eval_every_steps = 500
  c.train.checkpoint_every_steps = 500
  c.data.passkey.preamble = False
  c.data.passkey.key_digits = 5
  c.data.passkey.seed = 0
  c.eval.suites = "ppl_vs_length,loss_by_position,passkey"  # training ends with the passkey grid
  return c
