"""LEGO (data/tasks/lego.py: n shuffled sign clauses, resolve every variable) on 2 CPU cores: train on sizes 1..6, evaluate exact match at 1..24.

task_copy's small decoder (2 layers, d_model 128), 3000 steps of 64 examples, one example per
row (data.train_len = 39 = 6 * 6 + 3, the length of a size-6 example). Any scheme:
--config.model.position.kind=rope (or none, alibi, fire, ...); randomized positions:
--config.data.position_sampler.kind=randomized.
"""

from configs import task_copy


def get_config():
  """lego, train sizes 1..6, eval sizes 1..24 (4x), task_copy's decoder."""
  c = task_copy.get_config()
  c.data.task.name = "lego"
  c.data.task.train_min_size = 1
  c.data.task.train_max_size = 6
  c.data.task.eval_max_size = 24
  c.data.train_len = 39  # 6 * 6 + 3: one size-6 example per row
  c.train.num_steps = 3000
  c.train.eval_every_steps = 500
  return c
