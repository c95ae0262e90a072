"""Position coupling for addition (Cho et al., arXiv 2405.20671; data/position_coupling.py) on 2
CPU cores: train on 1..30 digits per operand, evaluate exact match at 1..100 digits.

The paper's format (`addition_reversed_answer`: operands most-significant digit first, zero-
padded to n digits, the (n + 1)-digit sum reversed) with coupled position ids read by a learned
absolute table, as the paper's small experiments (1 layer; they use 4 heads, d_model 512, 50,000
steps of 1,000 examples, learning rate 1e-4). Here a 1-layer, d_model 128 decoder, 3,000 steps of
64 examples, one example per row (data.train_len = 94 = 3 * 30 + 4); training starts are drawn
so ids stay <= coupling_max_position = eval_max_size + 2 = 102 (the paper: 202 for 200 digits),
evaluation starts at 1. Measured against plain ids by sweeps/coupled_addition_cpu.py
(results/coupled_addition_cpu.md); raise --config.train.num_steps toward the paper's budget.
Our reversed-operand format: --config.data.task.name=addition.
"""

from configs import task_copy


def get_config():
  """Coupled addition, train 1..30 digits, eval 1..100 digits, 1-layer decoder, learned ids."""
  c = task_copy.get_config()
  c.data.task.name = "addition_reversed_answer"
  c.data.task.position_coupling = "addition"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 30
  c.data.task.eval_max_size = 100
  c.data.task.eval_examples_per_size = 50
  c.data.train_len = 94  # 3 * 30 + 4: one 30-digit example per row
  c.model.position.kind = "learned"
  c.model.position.max_len = 103  # coupled ids 0..102 (coupling_max_position -1 = 100 + 2)
  c.model.num_layers = 1
  c.train.num_steps = 3000
  c.train.eval_every_steps = 500
  return c
