"""Position coupling for addition (Cho et al., "Position Coupling: Improving Length Generalization
of Arithmetic Transformers Using Task Structure", NeurIPS 2024, arXiv 2405.20671, Sec. 3).

Instead of one position id per token, the digits of the same significance in both operands and
in the answer share one id; the scheme (the paper: a learned absolute table, `learned`) then
reads these ids as `positions`. With n digits per operand and a start s >= 1, the released code
(github.com/HanseulJo/position-coupling, src/data/addition.py, AdditionDatasetWithCoupledPositions,
with its decoder collator's BOS at id 0) gives:

  BOS                                   0
  a digit of significance 10^i          s + n - i     (operands and answer alike, i = 0..n)
  "+" and "="                           s + n + 1
  anything after the n + 1 answer digits 0 (the collator's padding ids; EOS is only a target here)

so the answer's final carry (10^n) gets s and the units digits s + n. For our reversed addition
`BOS 75+86= 521` (57 + 68 = 125, n = 2, s = 1): 0, 3 2, 4, 3 2, 4, 3 2 1; for the paper's format
(`addition_reversed_answer`: operands most significant first) `BOS 57+68= 521`: 0, 2 3, 4, 2 3, 4,
3 2 1. Each token's id is the same in both formats; only the order of the operand digits differs.

Training draws s = 1 + k per example, k uniform in {0, ..., max_position - (n + 2)} (the released
code's `randint(1, max_position - n)` for s, so the largest id s + n + 1 never exceeds
max_position), from the example window's own generator (deterministic per example and resumed
exactly, as data/position_layouts.py's offsets). Evaluation uses s = 1 (the released code's
validation and long-length test sets set `randomize: False`), so a model evaluates n digits with
ids up to n + 2: max_position >= eval_max_size + 2 (the paper: 202 for 200 digits), which is the
default (`data.task.coupling_max_position = -1`).

n and each token's role come from the document's first "+" (its index - 1 is n, the tokens being
BOS, n digits, "+", n digits, "=", n + 1 answer digits); a document without "+" gets ids 0. The
ids of a document's first operand thus depend on its "+", which the prompt always holds before
any answer is produced, so teacher forcing, greedy decoding over a token buffer
(models/decoding.py) and the training pipeline agree. Written once for numpy and jax.numpy, as
data/position_layouts.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from configs.errors import ConfigError
from data.array_ops import array_module, cummax, cummin_reversed

KINDS = ("", "addition")
TASKS = {"addition": True, "addition_reversed_answer": False}  # name -> reversed operands
LAYOUT_SCHEMES = ("abacus", "bipe_rope", "bipe_alibi")  # schemes whose positions come from a layout


def coupled_positions(tokens, segment_ids, plus_id: int, reverse_operands: bool, starts=None):
  """Coupled position ids of addition examples (module docstring).

  Args:
    tokens, segment_ids: int [..., seq] (numpy or jax arrays); documents are runs of equal
      segment ids (a packed row holds several examples).
    plus_id: the token id of "+".
    reverse_operands: the operands are written least-significant digit first (`addition`);
      False: most-significant first (`addition_reversed_answer`).
    starts: the start s of each token's document, int [..., seq] (broadcastable), or None (1,
      the evaluation rule).

  Returns:
    int32 [..., seq] ids: 0 at BOS, at tokens past the answer and in documents without "+".
  """
  xp = array_module(tokens)
  length = tokens.shape[-1]
  index = xp.broadcast_to(xp.arange(length, dtype=xp.int32), tokens.shape)
  prev = xp.concatenate([segment_ids[..., :1] - 1, segment_ids[..., :-1]], axis=-1)
  doc_start = cummax(xp.where(segment_ids != prev, index, 0))
  is_plus = tokens == plus_id
  last_plus = cummax(xp.where(is_plus, index, -1))
  before = xp.concatenate([xp.full_like(last_plus[..., :1], -1), last_plus[..., :-1]], axis=-1)
  first_plus = is_plus & (before < doc_start)  # no "+" earlier in the document
  behind = cummax(xp.where(first_plus, index, -1))
  ahead = cummin_reversed(xp.where(first_plus, index, length))
  plus = xp.where(behind >= doc_start, behind, ahead)
  found = xp.take_along_axis(segment_ids, xp.clip(plus, 0, length - 1), axis=-1) == segment_ids
  valid = (plus < length) & found
  n = plus - doc_start - 1
  r = index - doc_start
  s = 1 if starts is None else xp.asarray(starts, xp.int32)
  first = (r >= 1) & (r <= n)
  second = (r >= n + 2) & (r <= 2 * n + 1)
  j = xp.where(first, r - 1, r - n - 2)  # written index inside an operand
  significance = j if reverse_operands else n - 1 - j
  ids = xp.where(first | second, s + n - significance, 0)
  ids = xp.where((r == n + 1) | (r == 2 * n + 2), s + n + 1, ids)  # "+" and "="
  answer = (r >= 2 * n + 3) & (r <= 3 * n + 3)
  ids = xp.where(answer, s + n - (r - 2 * n - 3), ids)  # the sum, reversed: 10^0 first
  return xp.where(valid & (n >= 1), ids, 0).astype(xp.int32)


@dataclasses.dataclass(frozen=True)
class CoupledAddition:
  """The coupled layout of an addition task (static, hashable), with the interface of
  data/position_layouts.py's `PositionLayout` (`streams`, `apply`): the ids go to both streams,
  so any one-stream scheme reads them as `positions`.

  Attributes:
    plus_id: token id of "+".
    reverse_operands: the task's operand order (True: `addition`).
    max_position: training starts keep every id <= max_position.
    seed: seed of the per-example start generators.
  """

  plus_id: int
  reverse_operands: bool
  max_position: int
  seed: int = 0
  name: str = "coupled_addition"

  def streams(self, tokens, positions, segment_ids, starts=None) -> tuple[Any, Any]:
    """(ids, ids), int32 [..., seq]: the coupled ids (starts None: s = 1, evaluation)."""
    del positions
    ids = coupled_positions(tokens, segment_ids, self.plus_id, self.reverse_operands, starts)
    return ids, ids

  def rng(self, index: int, stream: int = 0) -> np.random.Generator:
    return np.random.default_rng([self.seed, stream, index])

  def apply(self, index: int, example: dict[str, np.ndarray], *,
            stream: int = 0) -> dict[str, np.ndarray]:
    """Grain `map_with_index` transform of one training window: `positions` and `aux_positions`
    become the coupled ids, each document shifted by its own k in {0..max_position - (n + 2)}
    drawn from `default_rng([seed, stream, index])`."""
    tokens, segment_ids = example["inputs"], example["segment_ids"]
    base = coupled_positions(tokens, segment_ids, self.plus_id, self.reverse_operands)
    starts = np.concatenate([[True], segment_ids[1:] != segment_ids[:-1]])
    document = np.cumsum(starts) - 1
    needed = np.zeros(document[-1] + 1, np.int64)
    np.maximum.at(needed, document, base)  # n + 2 per addition document (0 otherwise)
    high = np.maximum(self.max_position - needed, 0)
    k = self.rng(index, stream).integers(0, high + 1)
    ids = np.where(base > 0, base + k[document], 0).astype(np.int32)
    out = dict(example)
    out["positions"], out["aux_positions"] = ids, ids.copy()
    return out


def _task(config):
  return config.data.get("task")


def kind_of(config) -> str:
  """`data.task.position_coupling` ("" when the field or the task section is absent)."""
  task = _task(config)
  return "" if task is None else task.get("position_coupling", "")


def resolved_max_position(config) -> int:
  """data.task.coupling_max_position, -1 resolved to eval_max_size + 2."""
  task = _task(config)
  value = task.get("coupling_max_position", -1)
  return int(task.eval_max_size) + 2 if value == -1 else int(value)


def from_config(config, tokenizer, seed: int = 0) -> CoupledAddition | None:
  """The coupled layout of a run with data.task.position_coupling='addition', else None."""
  if kind_of(config) != "addition":
    return None
  plus = int(np.asarray(tokenizer.encode("+"))[0])
  return CoupledAddition(plus, TASKS.get(config.data.task.name, True),
                         resolved_max_position(config), seed)


def check_config(config) -> None:
  """Validates data.task.position_coupling and coupling_max_position before anything runs.

  Raises:
    ConfigError: one line naming the field and the allowed values: an unknown kind, a task that
      is not an addition task, coupling_max_position without coupling or below
      eval_max_size + 2, a scheme that takes its positions from a layout, a position sampler,
      or a learned table with fewer than max_position + 1 rows.
  """
  task = _task(config)
  if task is None or not task.get("name"):
    return  # check_applicable refuses data.task fields without a task
  kind = task.get("position_coupling", "")
  if kind not in KINDS:
    raise ConfigError(f"data.task.position_coupling={kind!r} is not supported; choose one of "
                      f"{list(KINDS)} ('addition': Cho et al.'s coupled position ids)")
  maximum = task.get("coupling_max_position", -1)
  if not kind:
    if maximum != -1:
      raise ConfigError(f"data.task.coupling_max_position={maximum!r} applies only with "
                        "data.task.position_coupling='addition'; leave it at -1")
    return
  if task.name not in TASKS:
    raise ConfigError(f"data.task.position_coupling='addition' needs an addition task, one of "
                      f"{sorted(TASKS)}; got data.task.name={task.name!r}")
  need = int(task.eval_max_size) + 2
  if maximum != -1 and (isinstance(maximum, bool) or not isinstance(maximum, int)
                        or maximum < need):
    raise ConfigError(f"data.task.coupling_max_position must be -1 (= eval_max_size + 2 = "
                      f"{need}) or an integer >= {need} (ids up to n + 2 at evaluation); "
                      f"got {maximum!r}")
  pos = config.model.position
  if pos.kind in LAYOUT_SCHEMES:
    raise ConfigError(f"data.task.position_coupling='addition' cannot be combined with "
                      f"model.position.kind={pos.kind!r}, whose positions come from its own "
                      "layout; choose a one-stream scheme (e.g. learned, as the paper)")
  sampler = config.data.position_sampler.kind
  if sampler != "none":
    raise ConfigError(f"data.task.position_coupling='addition' draws its own training starts; "
                      f"set data.position_sampler.kind='none' (got {sampler!r})")
  if pos.kind == "learned" and not pos.get("clamp", False):
    rows = config.data.train_len if pos.get("max_len", -1) == -1 else pos.max_len
    top = resolved_max_position(config)
    if rows <= top:
      raise ConfigError(f"data.task.position_coupling='addition' uses ids up to "
                        f"coupling_max_position={top}, beyond the learned table's {rows} rows; "
                        f"set model.position.max_len >= {top + 1}")
