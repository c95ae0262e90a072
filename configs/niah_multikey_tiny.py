"""The CPU multi-key needle model: a tiny RoPE decoder trained on Shakespeare mixed with RULER's
multi-key needle prompts (niah_multikey, Hsieh et al., arXiv 2404.06654), evaluated on their
length x depth grid.

configs/passkey_tiny.py's recipe with the multi-key format in place of the passkey: the model of
configs/alibi_tiny.py (0.82M parameters, byte-level), three quarters of the training windows
blocks of niah_multikey prompts (data.retrieval_mix: data/retrieval_mix.py), each followed by its
answer, so that the format is in distribution. Two needles per prompt (the target and one
distractor of another key), 5-digit values (passkey_tiny's key length), no task preamble, and
RULER's noise haystack ("The grass is green. The sky is blue. ..."), the filler the passkey
model learns its lookup on in 1,500 steps. A byte-level prompt with two needles needs at least
290 tokens, so train_len is 512; the batch is 8 x 512, the same 4,096 tokens per step as
passkey_tiny, for 1,500 steps (6.1M tokens). Training ends with the niah_multikey grid at 1x, 2x
and 4x train_len (512, 1,024, 2,048 tokens; 0.5x is shorter than a prompt) x 5 depths x 5
trials, and perplexity at the same lengths. Any scheme:
  python train.py --config=configs/niah_multikey_tiny.py --workdir=workdirs/niah_alibi \\
      --config.model.position.kind=alibi
Measured per scheme in results/README.md ("Schemes on four synthetic tasks").
"""

from configs import alibi_tiny


def get_config():
  """alibi_tiny with RoPE, niah_multikey prompts in 3/4 of the windows, 8 x 512, 1500 steps."""
  c = alibi_tiny.get_config()
  c.model.position.kind = "rope"
  c.data.train_len = 512
  c.data.batch_size = 8
  c.train.num_steps = 1500
  c.train.eval_every_steps = 500
  c.train.checkpoint_every_steps = 500
  c.data.retrieval_mix.suite = "niah_multikey"
  c.data.retrieval_mix.fraction = 0.75
  c.data.retrieval_mix.seed = 0
  c.eval.niah_multikey.num_keys = 2
  c.eval.niah_multikey.value_digits = 5
  c.eval.niah_multikey.preamble = False
  c.eval.niah_multikey.haystack = "noise"
  c.eval.length_multipliers = (1.0, 2.0, 4.0)
  c.eval.suites = "ppl_vs_length,niah_multikey"  # training ends with the multi-key grid
  return c
