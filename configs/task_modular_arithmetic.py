"""Modular arithmetic (data/tasks/modular_arithmetic.py: n numbers mod 5 with + - *, left to right) on 2 CPU cores: train on sizes 1..10, evaluate exact match at 1..40.

task_copy's small decoder (2 layers, d_model 128), 2000 steps of 64 examples, one example per
row (data.train_len = 22 = 2 * 10 + 2, the length of a size-10 example). Any scheme:
--config.model.position.kind=rope (or none, alibi, fire, ...); randomized positions:
--config.data.position_sampler.kind=randomized.
"""

from configs import task_copy


def get_config():
  """modular_arithmetic, train sizes 1..10, eval sizes 1..40 (4x), task_copy's decoder."""
  c = task_copy.get_config()
  c.data.task.name = "modular_arithmetic"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 10
  c.data.task.eval_max_size = 40
  c.data.train_len = 22  # 2 * 10 + 2: one size-10 example per row
  c.train.num_steps = 2000
  c.train.eval_every_steps = 500
  return c
