"""The README default: an ALiBi byte-level decoder that trains on 2 CPU cores in about 11 minutes.

0.82M parameters (4 layers, d_model 128, 4 heads of 32), train_len 256, 900 steps of
16 x 256 tokens (3.7M tokens, about 0.8 epochs of the training plays). Measured results are in
the README; the validation loss ends near 1.75 nats per byte (unigram entropy: 3.33 nats).
Swap the scheme with --config.model.position.kind=rope (or any kind in models/positions/).
"""

from configs import base


def get_config():
  """Tiny ALiBi decoder on Shakespeare bytes."""
  c = base.get_config()
  c.model.position.kind = "alibi"
  c.model.num_layers = 4
  c.model.d_model = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512
  c.data.train_len = 256
  c.data.batch_size = 16
  c.train.num_steps = 900
  c.train.warmup_steps = 50
  c.train.learning_rate = 3e-3
  c.train.log_every_steps = 25
  c.train.eval_every_steps = 300
  c.train.checkpoint_every_steps = 300
  return c
