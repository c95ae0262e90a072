"""Parity (data/tasks/parity.py: is the number of "1"s odd?) on 2 CPU cores: train on 1..10 bits,
evaluate exact match at 1..40 bits.

A 2-layer, d_model 128 decoder trained for 2,000 steps of 64 examples, one example per row
(data.train_len = 13 = the length of a 10-bit example: 10 + 3), a few minutes on 2 cores.
The answer is one bit, so chance-level exact match is 0.5; the README lists what this config
reaches.
Any scheme: --config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import base


def get_config():
  """Parity, train 1..10 bits, eval 1..40 bits (4x), small decoder."""
  c = base.get_config()
  c.data.task.name = "parity"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 10
  c.data.task.eval_max_size = 40
  c.data.task.eval_examples_per_size = 100
  c.data.train_len = 13  # 10 + 3: one 10-bit example per row
  c.data.batch_size = 64
  c.model.position.kind = "alibi"
  c.model.num_layers = 2
  c.model.d_model = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512
  c.train.num_steps = 2000
  c.train.warmup_steps = 100
  c.train.learning_rate = 3e-3
  c.train.log_every_steps = 50
  c.train.eval_every_steps = 500
  c.train.checkpoint_every_steps = 500
  c.eval.suites = "algorithmic"  # python -m eval.run: accuracy per size (eval/algorithmic.py)
  return c
