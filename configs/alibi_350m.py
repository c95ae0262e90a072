"""GPT-style 350M decoder with ALiBi (24 layers, d_model 1024, 16 heads, train_len 1024).

For TPU/GPU. GPT-2 medium reaches 355M parameters with a 51M-parameter BPE embedding; with the
byte tokenizer the embedding is 0.27M, so the MLP is 5 x d_model wide (mlp_dim 5120) to keep the
model in the 350M class: 352.6M parameters, checked with `jax.eval_shape` (nothing allocated) in
tests/test_configs.py.

Data: a corpus prepared as ArrayRecord token shards (`data.source = "array_record"`), byte-level
by default; `data.array_record_dir` has no default and must be given:

  python -m data.prepare --source='corpus/**/*.txt' --tokenizer=byte --out=/data/corpus_byte
  python train.py --config=configs/alibi_350m.py --config.data.array_record_dir=/data/corpus_byte \
      --workdir=/shared/runs/alibi_350m

The directory (manifest.json, *.array_record shards, *.lengths.npy, *.names.jsonl) must be
readable at the same path on every host (a copy on each, or a bucket mounted with gcsfuse), and
its split must be the config's (validation_fraction = test_fraction = 0.1, the prepare defaults).
Held-out documents should be long: perplexity vs length scores windows up to 8 x 1024 tokens
from each document's start. A SentencePiece corpus (`--tokenizer=sentencepiece:32768`) needs
`--config.data.tokenizer=sentencepiece:<dir>/tokenizer.model --config.model.vocab_size=32768`
(the embedding then adds 33M parameters). docs/pod_scale_data.md shows the whole path.
"""

from configs import base


def get_config():
  """350M-class ALiBi decoder (GPT-3 "Medium" shape, Brown et al. 2020, arXiv 2005.14165)."""
  c = base.get_config()
  c.model.num_layers = 24
  c.model.d_model = 1024
  c.model.num_heads = 16
  c.model.mlp_dim = 5120
  c.model.position.kind = "alibi"
  c.model.dtype = "bfloat16"
  c.data.source = "array_record"  # token shards written by python -m data.prepare (see above)
  c.data.array_record_dir = ""  # required: --config.data.array_record_dir=<prepared dir>
  c.data.tokenizer = "byte"  # must be the tokenizer the directory was prepared with
  c.data.train_len = 1024
  c.data.batch_size = 256  # 262,144 tokens per step
  # 16 microbatches of 16 sequences bound activation memory (a 2-layer smoke test of this config
  # fits a 24 GB CPU machine); on a pod whose batch-parallel size exceeds 16, set it to 1.
  c.train.grad_accum_steps = 16
  c.train.num_steps = 100_000
  c.train.warmup_steps = 2000
  c.train.learning_rate = 3e-4
  c.train.eval_every_steps = 2000
  c.train.checkpoint_every_steps = 2000
  c.train.log_every_steps = 50
  c.mesh.data = 1
  c.mesh.fsdp = -1
  return c
