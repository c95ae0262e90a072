"""Sorting (data/tasks/sorting.py: digits in ascending order) on 2 CPU cores: train on sizes
1..10, evaluate exact match at 1..40.

The decoder and schedule of configs/task_copy.py (2 layers, d_model 128, 1,500 steps of 64
examples, one example per row: data.train_len = 22 = the length of a size-10 example), a few
minutes on 2 cores. Any scheme: --config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """Sorting, train sizes 1..10, eval sizes 1..40 (4x), small decoder: task_copy's settings."""
  c = task_copy.get_config()
  c.data.task.name = "sorting"
  return c
