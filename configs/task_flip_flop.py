"""Flip-flop (data/tasks/flip_flop.py: the last written bit across FFL(0.8) instructions) on 2 CPU
cores: train on 1..16 instructions, evaluate exact match at 1..64 (4x).

A 2-layer, d_model 128 decoder trained for 1,500 steps of 64 examples, one example per row
(data.train_len = 36 = the length of a size-16 example: 2 * 16 + 4); measured time and accuracy per
scheme in results/README.md ("Recall and state tasks"). Any scheme:
--config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """flip_flop: train sizes 1..16, eval sizes 1..64, 2 layers, 1500 steps."""
  c = task_copy.get_config()
  c.data.task.name = "flip_flop"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 16
  c.data.task.eval_max_size = 64
  c.data.train_len = 36  # 2 * 16 + 4: one size-16 example per row
  c.model.num_layers = 2
  c.train.num_steps = 1500
  c.train.eval_every_steps = 500
  return c
