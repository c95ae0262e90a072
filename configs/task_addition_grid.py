"""Addition on a two-dimensional grid of operand lengths (data/tasks/addition_grid.py; McLeish et
al., arXiv 2405.17399): train on every pair of operand lengths 1..5, evaluate exact match on
every cell (a, b) of 1..15 x 1..15 digits, drawn as the heatmap `eval/algorithmic_grid.png`.

A 3-layer, d_model 128 decoder (the addition config's), one problem per row (data.train_len =
19 = the diagonal cell (5, 5): 3 * 5 + 4 tokens), digits least-significant first;
`--config.data.task.name=addition_grid_plain` writes them most-significant first. Any scheme:
--config.model.position.kind=rope. Measured time and accuracy: results/README.md.
"""

from configs import task_addition


def get_config():
  """addition_grid: operand lengths 1..5 in training, grid 1..15 x 1..15, 3 layers."""
  c = task_addition.get_config()
  c.data.task.name = "addition_grid"
  c.data.task.train_max_size = 5
  c.data.task.eval_max_size = 15
  c.data.task.eval_examples_per_size = 50  # per grid cell: 225 cells x 50 problems
  c.data.train_len = 19  # 3 * 5 + 4: the diagonal cell (5, 5), the longest training problem
  c.train.num_steps = 3000
  return c
