"""Randomized positions at evaluation: perplexity from positions drawn as in training.

Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers", arXiv
2305.16843, Sec. 3, train on sorted distinct positions drawn from [0, max_position) instead of
0..n-1; their released code samples positions at test time too. `eval.extension=
randomized_positions` (models/extensions.py; `model.position.randomized_positions` and
`randomized_draws`) scores every perplexity window `randomized_draws` times with such positions,
drawn from the run's own training range (`data.position_sampler.max_position`, -1 = 4 x
train_len) and its sampler seed, and averages the NLL of each window position over the draws; the
result sits beside the true-position one (its file carries the extension's suffix). Draw d of
length L uses `RandomizedPositions(max_position, seed).rng(L, d)` (data/position_samplers.py),
so every scheme and checkpoint sees the same positions. A length above max_position cannot hold
L distinct positions and is skipped with that reason; a scheme that represents fewer positions
than max_position is refused (eval/suites/perplexity.py).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from configs.errors import eval_lengths
from data.position_samplers import RandomizedPositions, resolved_max_position
from eval.perplexity import WindowScores, score_windows_by_position


def setting(config) -> tuple[int, int, int] | None:
  """(draws, max_position, seed) of randomized positions at evaluation, or None (the true
  positions): `model.position.randomized_draws`, data.position_sampler's max_position (-1 = 4 x
  train_len) and seed."""
  pos = config.model.position
  if not pos.get("randomized_positions", False):
    return None
  sampler = config.data.position_sampler
  return (int(pos.get("randomized_draws", 4)),
          resolved_max_position(sampler, config.data.train_len), int(sampler.get("seed", 0)))


def extend_skips(config, skip: list[int], reason: str) -> tuple[list[int], str]:
  """`skip` and `reason` (eval/perplexity.py skipped_lengths) plus the eval lengths above the
  range, which cannot hold L distinct positions (unchanged without randomized positions)."""
  drawn = setting(config)
  if drawn is None:
    return skip, reason
  beyond = [n for n in eval_lengths(config) if n > drawn[1] and n not in skip]
  if not beyond:
    return skip, reason
  why = (f"randomized positions draw L distinct positions from [0, {drawn[1]}) (the training "
         f"range, data.position_sampler.max_position), so L <= {drawn[1]}")
  return sorted(skip + beyond), "; ".join(r for r in (reason if skip else "", why) if r)


def scorer(drawn: tuple[int, int, int]) -> Callable:
  """eval/perplexity.py ppl_vs_length's `scorer` for `setting`'s (draws, max_position, seed):
  each window scored `draws` times, the NLL of each position averaged, one draw's counts."""
  draws, max_position, seed = drawn
  sampler = RandomizedPositions(max_position=max_position, seed=seed)

  def score(score_fn, params, windows: dict[str, np.ndarray], length: int, *, batch_size: int,
            mesh) -> WindowScores:
    total = None
    for d in range(draws):
      rng = sampler.rng(length, d)
      sampled = np.stack([sampler.positions(row, rng) for row in windows["segment_ids"]])
      s = score_windows_by_position(score_fn, params, dict(windows, positions=sampled),
                                    batch_size=batch_size, mesh=mesh)
      total = s if total is None else WindowScores(total.position_nll + s.position_nll,
                                                   total.position_tokens)
    return WindowScores(total.position_nll / draws, total.position_tokens)
  return score


def record(config) -> dict:
  """What a result records of the setting ({} with the true positions)."""
  drawn = setting(config)
  if drawn is None:
    return {}
  draws, max_position, seed = drawn
  return {"randomized_positions": {"draws": draws, "max_position": max_position, "seed": seed}}
