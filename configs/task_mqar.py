"""MQAR (data/tasks/mqar.py: n key-value pairs, then every key asked once) on 2 CPU cores: train on
1..8 key-value pairs, evaluate exact match at 1..32 (4x).

A 2-layer, d_model 128 decoder trained for 2,000 steps of 64 examples, one example per row
(data.train_len = 35 = the length of a size-8 example: 4 * 8 + 3); measured time and accuracy per
scheme in results/README.md ("Recall and state tasks"). Any scheme:
--config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """mqar: train sizes 1..8, eval sizes 1..32, 2 layers, 2000 steps."""
  c = task_copy.get_config()
  c.data.task.name = "mqar"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 8
  c.data.task.eval_max_size = 32
  c.data.train_len = 35  # 4 * 8 + 3: one size-8 example per row
  c.model.num_layers = 2
  c.train.num_steps = 2000
  c.train.eval_every_steps = 500
  return c
