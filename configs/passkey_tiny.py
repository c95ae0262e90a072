"""The CPU passkey model: configs/alibi_tiny.py trained on Shakespeare mixed with passkey documents.

Half of the training windows hold passkey documents (data/passkey.py: Mohtashami & Jaggi's
prompt, arXiv 2305.16300, as used by PI, arXiv 2306.15595) of 106..256 tokens, each followed by
its answer, so that for the 0.82M-parameter byte-level model retrieval is in distribution at
train_len = 256. The paper's 148-token preamble is dropped (data.passkey.preamble=False): with it
a prompt needs 248 of the 256 tokens and would leave almost no filler, no depth to vary and no
0.5x (128-token) cell. Keys keep PI's 5 digits. Training is alibi_tiny's (900 steps of 16 x 256
tokens, about 11 minutes on 2 CPU cores, plus about 3 s to build the passkey documents); the
passkey suite (eval/needle.py: lengths 0.5x..8x train_len x depths 0..100% in 10% steps, 5
trials per cell) then shows where each scheme still retrieves. Any scheme:
  python train.py --config=configs/passkey_tiny.py --workdir=workdirs/passkey_rope \
      --config.model.position.kind=rope
"""

from configs import alibi_tiny


def get_config():
  """alibi_tiny + passkey documents in half the training windows, no preamble."""
  c = alibi_tiny.get_config()
  c.data.passkey.fraction = 0.5
  c.data.passkey.preamble = False
  c.data.passkey.key_digits = 5
  c.data.passkey.seed = 0
  return c
