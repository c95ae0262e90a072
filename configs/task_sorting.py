"""Sorting (data/tasks/sorting.py: digits in ascending order) on 2 CPU cores: train on sizes
1..10, evaluate exact match at 1..40.

The decoder and schedule of configs/task_copy.py (2 layers, d_model 128, 1,500 steps of 64
examples, one example per row: data.train_len = 22 = the length of a size-10 example), a few
minutes on 2 cores. Any scheme: --config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import base


def get_config():
  """Sorting, train sizes 1..10, eval sizes 1..40 (4x), small decoder."""
  c = base.get_config()
  c.data.task.name = "sorting"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 10
  c.data.task.eval_max_size = 40
  c.data.task.eval_examples_per_size = 100
  c.data.train_len = 22  # 2 * 10 + 2: one size-10 example per row
  c.data.batch_size = 64
  c.model.position.kind = "alibi"
  c.model.num_layers = 2
  c.model.d_model = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512
  c.train.num_steps = 1500
  c.train.warmup_steps = 100
  c.train.learning_rate = 3e-3
  c.train.log_every_steps = 50
  c.train.eval_every_steps = 250
  c.train.checkpoint_every_steps = 500
  c.eval.suites = "algorithmic"  # python -m eval.run: accuracy per size (eval/algorithmic.py)
  return c
