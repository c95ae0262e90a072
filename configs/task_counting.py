"""Counting (data/tasks/counting.py: the number of ones among n bits, in decimal) on 2 CPU cores:
train on 1..16 input bits, evaluate exact match at 1..64 (4x).

A 2-layer, d_model 128 decoder trained for 1,500 steps of 64 examples, one example per row
(data.train_len = 20 = the length of a size-16 example: 16 + 2 + 2); measured time and accuracy per
scheme in results/README.md ("Recall and state tasks"). Any scheme:
--config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """counting: train sizes 1..16, eval sizes 1..64, 2 layers, 1500 steps."""
  c = task_copy.get_config()
  c.data.task.name = "counting"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 16
  c.data.task.eval_max_size = 64
  c.data.train_len = 20  # 16 + 2 + 2: one size-16 example per row
  c.model.num_layers = 2
  c.train.num_steps = 1500
  c.train.eval_every_steps = 500
  return c
