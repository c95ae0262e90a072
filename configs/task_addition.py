"""Addition (data/tasks/addition.py: two n-digit numbers, digits least-significant first) on 2 CPU
cores: train on 1..5 digits per operand, evaluate exact match at 1..20 digits.

A 3-layer, d_model 128 decoder trained for 2,000 steps of 64 examples, one example per row
(data.train_len = 19 = the length of a 5-digit example: 3 * 5 + 4), a few minutes on 2 cores.
Measured (README): 2,000 steps are not enough to learn addition with ALiBi or RoPE (exact match
about 0 from 3 digits on; validation loss still near 1 nat per answer token), so raise
--config.train.num_steps for a converged model. Any scheme: --config.model.position.kind=rope.
"""

from configs import task_copy


def get_config():
  """Reversed-digit addition, train 1..5 digits, eval 1..20 digits (4x), 3 layers, 2000 steps."""
  c = task_copy.get_config()
  c.data.task.name = "addition"
  c.data.task.train_max_size = 5
  c.data.task.eval_max_size = 20
  c.data.train_len = 19  # 3 * 5 + 4: one 5-digit example per row
  c.model.num_layers = 3
  c.train.num_steps = 2000
  c.train.eval_every_steps = 500
  return c
