"""Parity (data/tasks/parity.py: is the number of "1"s odd?) on 2 CPU cores: train on 1..10 bits,
evaluate exact match at 1..40 bits.

A 2-layer, d_model 128 decoder trained for 2,000 steps of 64 examples, one example per row
(data.train_len = 13 = the length of a 10-bit example: 10 + 3), a few minutes on 2 cores.
The answer is one bit, so chance-level exact match is 0.5; the README lists what this config
reaches.
Any scheme: --config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """Parity, train 1..10 bits, eval 1..40 bits (4x), small decoder: task_copy's, 2000 steps."""
  c = task_copy.get_config()
  c.data.task.name = "parity"
  c.data.train_len = 13  # 10 + 3: one 10-bit example per row
  c.train.num_steps = 2000
  c.train.eval_every_steps = 500
  return c
