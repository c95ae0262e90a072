"""Multiplication (data/tasks/multiplication.py: two n-digit numbers, digits least-significant
first) on 2 CPU cores: train on 1..4 digits per operand, evaluate exact match at 1..16 (4x).

A 3-layer, d_model 128 decoder trained for 3,000 steps of 64 examples, one example per row
(data.train_len = 19 = the length of a size-4 example: 4 * 4 + 3); measured time and accuracy per
scheme in results/README.md ("Recall and state tasks"). Any scheme:
--config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """multiplication: train sizes 1..4, eval sizes 1..16, 3 layers, 3000 steps."""
  c = task_copy.get_config()
  c.data.task.name = "multiplication"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 4
  c.data.task.eval_max_size = 16
  c.data.train_len = 19  # 4 * 4 + 3: one size-4 example per row
  c.model.num_layers = 3
  c.train.num_steps = 3000
  c.train.eval_every_steps = 500
  return c
