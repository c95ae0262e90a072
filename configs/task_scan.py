"""SCAN's length split (data/tasks/scan.py; Lake & Baroni, ICML 2018) on 2 CPU cores: train on
every command of at most 22 output actions (sizes 1..22), evaluate exact match at all 33 output
lengths (sizes 23..33 are the split's test lengths 24..48 actions).

task_copy's small decoder (2 layers, d_model 128), 3000 steps of 64 commands drawn uniformly from
the 16,990 training commands, one example per row (data.train_len = 33 = 1 + 10 + 22, the length
of a 22-action example). Any scheme: --config.model.position.kind=rope (or none, alibi, ...).
"""

from configs import task_copy


def get_config():
  """scan, length split: train sizes 1..22 (<= 22 actions), eval sizes 1..33 (up to 48)."""
  c = task_copy.get_config()
  c.data.task.name = "scan"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 22  # output lengths 1..22 actions
  c.data.task.eval_max_size = 33  # every SCAN output length, up to 48 actions
  c.data.train_len = 33  # 1 + 10 + 22: one 22-action example per row
  c.train.num_steps = 3000
  c.train.eval_every_steps = 500
  return c
