"""Task data for training, validation and evaluation: examples -> rows with answer-only weights.

A row is what the model sees, `row_len` tokens (data.train_len for training), as a dict of arrays:

  inputs      int32 [row_len]   BOS, prompt, answer of each example; PAD after the last one
  targets     int32 [row_len]   prompt, answer, EOS of each example; PAD after the last one
  positions   int32 [row_len]   0..T-1 within each example (restart at 0 per example); 0 on padding
  segment_ids int32 [row_len]   1, 2, ... per example; 0 on padding (attention stays inside one)
  weights     float32 [row_len] 1.0 at answer targets (answer bytes and EOS), else 0.0

Training rows (`TaskRows`) pack k = train_len // sequence_length(train_max_size) examples, each
whole inside the row, whose sizes are drawn independently and uniformly from
[train_min_size, train_max_size]. Because k is fixed in advance (always enough room), no drawn
example is ever dropped, so the trained size distribution is exactly uniform (greedy packing
would under-represent large sizes). Set data.train_len = sequence_length(train_max_size) for one
example per row.

Determinism: training row i of process p is drawn from `numpy.random.default_rng([seed, 0, p,
i])`, so it is a pure function of (seed, p, i): grain's iterator state (the next index) resumes
it exactly. Validation examples of size s come from `default_rng([eval_seed, 1, s])`, evaluation
examples of size s from `default_rng([eval_seed, 2, s])`, and the evaluation examples of grid cell
(a, b) of a two-size task (data/tasks/base.py GridTask) from `default_rng([eval_seed, 3, a, b])`:
disjoint streams (the tag in the second place differs even when seed == eval_seed), identical
for every positional scheme. They
are held out in the sense of independent draws: at small sizes the instance space is tiny (copy
of size 1 has 10 instances), so the same instance also occurs in training.
"""

from __future__ import annotations

import dataclasses
import functools

import grain
import numpy as np

from data.position_layouts import PositionLayout
from data.sampler_base import PositionSampler
from data.tasks import GridTask, Task, encode, get_task
from data.tokenizers import ByteTokenizer

TRAIN, VALIDATION, EVALUATION, GRID_EVALUATION = 0, 1, 2, 3  # stream tags (module docstring)
FIELDS = ("inputs", "targets", "positions", "segment_ids", "weights")
NUM_RECORDS = 2 ** 62  # training rows per process: an endless stream in practice


def pack(encoded: list[dict[str, np.ndarray]], row_len: int, pad_id: int) -> dict[str, np.ndarray]:
  """Places encoded examples (data.tasks.encode) side by side in one row, then padding.

  Args:
    encoded: examples, each a dict of [T_j] arrays (inputs, targets, positions, weights).
    row_len: row length, tokens (>= sum of T_j).
    pad_id: the PAD token id.

  Returns:
    dict of [row_len] arrays (module docstring): int32 inputs, targets, positions, segment_ids
    and float32 weights.

  Raises:
    ValueError: the examples do not fit in `row_len`.
  """
  used = sum(len(e["inputs"]) for e in encoded)
  if used > row_len:
    raise ValueError(f"{len(encoded)} examples of {used} tokens do not fit in a row of {row_len}")
  row = {"inputs": np.full(row_len, pad_id, np.int32),
         "targets": np.full(row_len, pad_id, np.int32),
         "positions": np.zeros(row_len, np.int32), "segment_ids": np.zeros(row_len, np.int32),
         "weights": np.zeros(row_len, np.float32)}
  lo = 0
  for j, e in enumerate(encoded):
    hi = lo + len(e["inputs"])
    for key in ("inputs", "targets", "positions", "weights"):
      row[key][lo:hi] = e[key]
    row["segment_ids"][lo:hi] = j + 1
    lo = hi
  return row


@dataclasses.dataclass(frozen=True)
class TaskRows:
  """Random-access source of packed training rows (a grain `RandomAccessDataSource`).

  Row i is `examples_per_row` examples of uniform sizes in [min_size, max_size], drawn from
  `default_rng([seed, TRAIN, stream, i])` (module docstring).

  Attributes:
    task: the task.
    tokenizer: the byte tokenizer.
    row_len: tokens per row (data.train_len).
    min_size, max_size: training sizes, inclusive.
    seed: data.task.seed.
    stream: this process's index (hosts draw disjoint streams).
  """

  task: Task
  tokenizer: ByteTokenizer
  row_len: int
  min_size: int
  max_size: int
  seed: int
  stream: int = 0

  @property
  def examples_per_row(self) -> int:
    """k = row_len // sequence_length(max_size), >= 1 for a valid config."""
    return self.row_len // self.task.sequence_length(self.max_size)

  def __len__(self) -> int:
    return NUM_RECORDS

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([self.seed, TRAIN, self.stream, int(i)])
    examples = [encode(e, self.tokenizer) for e in
                self.task.training_examples(self.examples_per_row, self.min_size, self.max_size,
                                            rng)]
    return pack(examples, self.row_len, self.tokenizer.pad_id)


def train_dataset(task_config, tokenizer: ByteTokenizer, *, train_len: int, batch_size: int,
                  process_index: int = 0, sampler: PositionSampler | None = None,
                  layout: PositionLayout | None = None) -> grain.IterDataset:
  """Endless batches of training rows of `data.task` for this process.

  With `sampler` (data/position_samplers.py, e.g. randomized positions, Ruoss et al., arXiv
  2305.16843), each example's positions are redrawn per segment, as for text
  (data/pipeline.py); evaluation always uses true positions.

  Args:
    task_config: the `data.task` ConfigDict (validated: data.tasks.check_config).
    tokenizer: the byte tokenizer.
    train_len: row length, tokens.
    batch_size: rows per batch on this process.
    process_index: this process's index (its own stream of rows).
    sampler: optional training-time position sampler.
    layout: optional position layout (data/position_layouts.py; Abacus digit indices with their
      per-example training offsets): adds `aux_positions` to every row.

  Returns:
    A grain `IterDataset` of dicts of `[batch_size, train_len]` arrays (FIELDS; int32, weights
    float32); its iterator's `get_state()` / `set_state()` resume the exact rows.
  """
  source = TaskRows(get_task(task_config.name), tokenizer, train_len,
                    int(task_config.train_min_size), int(task_config.train_max_size),
                    int(task_config.seed), process_index)
  ds = grain.MapDataset.source(source)
  if sampler is not None:
    ds = ds.map_with_index(functools.partial(sampler.apply, stream=process_index))
  if layout is not None:
    ds = ds.map_with_index(functools.partial(layout.apply, stream=process_index))
  return ds.batch(batch_size, drop_remainder=True).to_iter_dataset()


def examples_of_size(task: Task, size: int, count: int, seed: int, tag: int,
                     tokenizer: ByteTokenizer) -> dict[str, np.ndarray]:
  """`count` held-out examples of one size, one per row, unpadded.

  Args:
    task: the task.
    size: instance size (>= 1).
    count: examples (>= 1).
    seed: data.task.eval_seed.
    tag: VALIDATION or EVALUATION (module docstring).
    tokenizer: the byte tokenizer.

  Returns:
    dict of [count, T] arrays, T = task.sequence_length(size): int32 inputs, targets,
    positions, segment_ids (all 1) and float32 weights; example j is the j-th draw of
    `default_rng([seed, tag, size])`.
  """
  rng = np.random.default_rng([seed, tag, size])
  return _one_per_row([task.example(size, rng) for _ in range(count)], tokenizer)


def examples_of_cell(task: GridTask, a: int, b: int, count: int, seed: int,
                     tokenizer: ByteTokenizer) -> dict[str, np.ndarray]:
  """`count` held-out examples of grid cell (a, b) of a two-size task, one per row, unpadded.

  Args:
    task: the grid task; a, b: the cell's sizes (>= 1).
    count: examples (>= 1).
    seed: data.task.eval_seed.
    tokenizer: the byte tokenizer.

  Returns:
    dict of [count, T] arrays, T = task.cell_sequence_length(a, b) (as `examples_of_size`);
    example j is the j-th draw of `default_rng([seed, GRID_EVALUATION, a, b])`.
  """
  rng = np.random.default_rng([seed, GRID_EVALUATION, a, b])
  return _one_per_row([task.cell_example(a, b, rng) for _ in range(count)], tokenizer)


def _one_per_row(examples, tokenizer: ByteTokenizer) -> dict[str, np.ndarray]:
  """Equal-length examples encoded one per row: [count, T] arrays, segment_ids all 1."""
  rows = [encode(e, tokenizer) for e in examples]
  out = {key: np.stack([r[key] for r in rows])
         for key in ("inputs", "targets", "positions", "weights")}
  out["segment_ids"] = np.ones_like(out["inputs"])
  return out


def pad_rows(rows: dict[str, np.ndarray], length: int, pad_id: int) -> dict[str, np.ndarray]:
  """Right-pads [n, T] rows to [n, length] (PAD tokens, position 0, segment 0, weight 0).

  Right padding changes no prediction at a real token: attention is causal, padding has its own
  segment, and padded positions are 0, so no row's largest position grows.

  Raises:
    ValueError: length < T.
  """
  n, t = rows["inputs"].shape
  if length < t:
    raise ValueError(f"cannot pad rows of {t} tokens to {length}")
  fill = {"inputs": pad_id, "targets": pad_id, "positions": 0, "segment_ids": 0, "weights": 0}
  return {k: np.pad(v, ((0, 0), (0, length - t)), constant_values=fill[k]) for k, v in rows.items()}


def validation_rows(task_config, tokenizer: ByteTokenizer, row_len: int) -> dict[str, np.ndarray]:
  """Held-out rows for the periodic validation loss: `eval_examples_per_size` examples of each
  training size (train_min_size..train_max_size), one per row, padded to `row_len`.

  Returns:
    dict of [num_sizes * eval_examples_per_size, row_len] arrays (FIELDS); weights mark answer
    targets, so the NLL averages over answer tokens only.
  """
  task = get_task(task_config.name)
  parts = [pad_rows(examples_of_size(task, s, int(task_config.eval_examples_per_size),
                                     int(task_config.eval_seed), VALIDATION, tokenizer),
                    row_len, tokenizer.pad_id)
           for s in range(int(task_config.train_min_size), int(task_config.train_max_size) + 1)]
  return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}
