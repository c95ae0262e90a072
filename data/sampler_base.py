"""The base of the training-time position samplers: per-segment redraws of `positions`.

`PositionSampler` and `segment_bounds` live here, below data/position_samplers.py (which
describes the samplers, checks their config and builds them) and the samplers in their own
modules (data/cream.py, data/endprompt.py), so that those modules and the dispatcher import one
base without importing each other.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def segment_bounds(segment_ids: np.ndarray) -> list[tuple[int, int]]:
  """Half-open token ranges [lo, hi) of the runs of equal `segment_ids` (one per document).

  Args:
    segment_ids: int [L] segment id per token (see data/pipeline.py), L >= 1.

  Returns:
    list of (lo, hi) index pairs covering 0..L in order.
  """
  cuts = (np.flatnonzero(np.diff(segment_ids) != 0) + 1).tolist()
  edges = [0, *cuts, len(segment_ids)]
  return list(zip(edges[:-1], edges[1:]))


@dataclasses.dataclass(frozen=True)
class PositionSampler:
  """Base: redraws `positions` per document segment of a packed example (see module docstring).

  Attributes:
    max_position: positions are drawn below this (tokens; >= train_len).
    seed: non-negative seed of the per-example generators.
  """

  max_position: int
  seed: int

  def segment_positions(self, n: int, rng: np.random.Generator) -> np.ndarray:
    """int32 [n] positions for one segment of n tokens. Subclasses implement."""
    raise NotImplementedError

  def rng(self, index: int, stream: int = 0) -> np.random.Generator:
    """The generator of example `index` of process `stream` (both >= 0)."""
    return np.random.default_rng([self.seed, stream, index])

  def positions(self, segment_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sampled positions of one example.

    Args:
      segment_ids: int [L] segment id per token.
      rng: the example's generator.

    Returns:
      int32 [L]; each segment gets its own draw, starting afresh.
    """
    out = np.empty(len(segment_ids), np.int32)
    for lo, hi in segment_bounds(segment_ids):
      out[lo:hi] = self.segment_positions(hi - lo, rng)
    return out

  def apply(self, index: int, example: dict[str, np.ndarray], *,
            stream: int = 0) -> dict[str, np.ndarray]:
    """Grain `map_with_index` transform: a copy of `example` with sampled `positions`.

    Args:
      index: the example's index in this process's stream (>= 0).
      example: dict of int32 [L] arrays with at least `segment_ids` and `positions`.
      stream: the process index, so that hosts draw independently.

    Returns:
      A new dict; only `positions` (int32 [L]) differs.
    """
    out = dict(example)
    out["positions"] = self.positions(example["segment_ids"], self.rng(index, stream))
    return out
