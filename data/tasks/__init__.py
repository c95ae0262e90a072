"""Registry of algorithmic length-generalization tasks: `config.data.task.name` -> task.

Tasks follow Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
Transformers" (arXiv 2305.19466) and Ruoss et al., "Randomized Positional Encodings Boost Length
Generalization of Transformers" (arXiv 2305.16843): train on instance sizes <= n, measure
exact-match accuracy at every size up to k * n (eval/algorithmic.py). One file per task; the
byte format shared by all is in data/tasks/base.py, the training and evaluation data in
data/tasks/dataset.py.

Adding a task: write `data/tasks/<name>.py` with a `Task` subclass (prompt/answer lengths and
`sample`), add one line to `REGISTRY`, and a known-string test in tests/test_tasks.py.
"""

from __future__ import annotations

import numpy as np

from configs.errors import ConfigError
from data.tasks.addition import Addition
from data.tasks.addition_grid import AdditionGrid
from data.tasks.base import Example, GridTask, Task, encode
from data.tasks.copy import Copy
from data.tasks.counting import Counting
from data.tasks.duplicate_string import DuplicateString
from data.tasks.even_pairs import EvenPairs
from data.tasks.flip_flop import FlipFlop
from data.tasks.lego import Lego
from data.tasks.modular_arithmetic import ModularArithmetic
from data.tasks.mqar import MQAR
from data.tasks.multiplication import Multiplication
from data.tasks.parity import Parity
from data.tasks.polynomial import PolynomialEvaluation
from data.tasks.reverse import Reverse
from data.tasks.scan import Scan
from data.tasks.selective_copy import SelectiveCopy
from data.tasks.sorting import Sorting
from data.tasks.summation import Summation

REGISTRY: dict[str, Task] = {
    "copy": Copy(),
    "reverse": Reverse(),
    "addition": Addition(),
    "addition_reversed_answer": Addition(reverse_operands=False),
    "parity": Parity(),
    "sorting": Sorting(),
    "mqar": MQAR(),
    "flip_flop": FlipFlop(),
    "selective_copy": SelectiveCopy(),
    "counting": Counting(),
    "multiplication": Multiplication(),
    "addition_grid": AdditionGrid(reverse=True),
    "addition_grid_plain": AdditionGrid(reverse=False),
    "summation": Summation(),
    "polynomial_evaluation": PolynomialEvaluation(),
    "lego": Lego(),
    "duplicate_string": DuplicateString(),
    "modular_arithmetic": ModularArithmetic(),
    "even_pairs": EvenPairs(),
    "scan": Scan(),
}


def get_task(name: str) -> Task:
  """Returns the task registered as `name`.

  Raises:
    ConfigError: unknown name (names data.task.name and lists the tasks).
  """
  if name not in REGISTRY:
    raise ConfigError(f"data.task.name={name!r} is not a task; choose one of {sorted(REGISTRY)} "
                      "(or '' for the text corpus)")
  return REGISTRY[name]


def _is_int(value) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_config(cfg, train_len: int) -> None:
  """Validates `data.task` (configs/base.py) before anything is compiled.

  Nothing is checked beyond the name when `cfg.name` is "" (text training).

  Args:
    cfg: the `data.task` ConfigDict.
    train_len: `data.train_len`, tokens (the training row length).

  Raises:
    ConfigError: one line naming the field and the allowed values: an unknown name, sizes that
      are not integers with 1 <= train_min_size <= train_max_size <= eval_max_size,
      eval_examples_per_size < 1, sizes above the task's `max_size` (MQAR: 52 distinct keys),
      a negative seed, or a train_len that cannot hold one example of train_max_size.
  """
  if cfg.name == "":
    return
  task = get_task(cfg.name)
  for field in ("train_min_size", "train_max_size", "eval_max_size", "eval_examples_per_size"):
    if not _is_int(cfg[field]) or cfg[field] < 1:
      raise ConfigError(f"data.task.{field} must be an integer >= 1; got {cfg[field]!r}")
  if cfg.train_min_size > cfg.train_max_size:
    raise ConfigError(f"data.task.train_min_size={cfg.train_min_size} must be <= "
                      f"data.task.train_max_size={cfg.train_max_size}")
  if cfg.eval_max_size < cfg.train_max_size:
    raise ConfigError(f"data.task.eval_max_size={cfg.eval_max_size} must be >= "
                      f"data.task.train_max_size={cfg.train_max_size} (sizes beyond it measure "
                      "length generalization)")
  if task.max_size is not None and cfg.eval_max_size > task.max_size:
    field = "train_max_size" if cfg.train_max_size > task.max_size else "eval_max_size"
    raise ConfigError(f"data.task.{field}={cfg[field]} is above the largest {cfg.name!r} "
                      f"instance, {task.max_size} {task.size_unit}; set data.task.{field} <= "
                      f"{task.max_size}")
  for field in ("seed", "eval_seed"):
    if not _is_int(cfg[field]) or cfg[field] < 0:
      raise ConfigError(f"data.task.{field} must be an integer >= 0; got {cfg[field]!r}")
  need = task.sequence_length(cfg.train_max_size)
  if train_len < need:
    raise ConfigError(f"data.train_len={train_len} cannot hold one {cfg.name!r} example of "
                      f"data.task.train_max_size={cfg.train_max_size} ({need} tokens); set "
                      f"data.train_len >= {need} or lower data.task.train_max_size")


__all__ = ["REGISTRY", "Example", "GridTask", "Task", "check_config", "encode", "get_task"]
