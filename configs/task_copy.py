"""Copy (data/tasks/copy.py) on 2 CPU cores: train on sizes 1..16, evaluate exact match at 1..64.

A 2-layer, d_model 128 decoder (0.41M parameters) trained for 2,000 steps of 64 examples, one
example per row (data.train_len = 34 = the length of a size-16 example); the README lists the
measured accuracy and wall time. Any scheme: --config.model.position.kind=rope (or none, ...).
"""

from configs import base


def get_config():
  """Copy, train sizes 1..16, eval sizes 1..64 (4x), small decoder."""
  c = base.get_config()
  c.data.task.name = "copy"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 16
  c.data.task.eval_max_size = 64
  c.data.task.eval_examples_per_size = 100
  c.data.train_len = 34  # 2 * 16 + 2: one size-16 example per row
  c.data.batch_size = 64
  c.model.position.kind = "alibi"
  c.model.num_layers = 2
  c.model.d_model = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512
  c.train.num_steps = 2000
  c.train.warmup_steps = 100
  c.train.learning_rate = 1e-3
  c.train.log_every_steps = 50
  c.train.eval_every_steps = 500
  c.train.checkpoint_every_steps = 1000
  return c
