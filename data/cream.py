"""CREAM positions: head and tail at the ends of the target range, a Gaussian-placed middle.

Wu, Zhao and Zheng, "Never Miss A Beat: An Efficient Recipe for Context Window Extension of Large
Language Models with Consistent 'Middle' Enhancement" (CREAM: Continuity-Relativity indExing with
gAussian Middle), arXiv 2406.07138, Sec. 3 (NeurIPS 2024). Config: data.position_sampler.kind =
"cream" (configs/base.py); dispatched from data/position_samplers.py, whose docstring gives the
determinism and packed-window rules every sampler follows (a draw per document segment, from
`np.random.default_rng([seed, stream, index])`).

The rule. A sequence of N tokens is fine-tuned for a target length L' = max_position (the paper:
N = the pre-trained window, e.g. 4K, L' = s N). It is cut into a head of h tokens, a middle of
m = N - 2h tokens and a tail of h tokens:

  head    positions 0 .. h-1                        (the first positions of the target range)
  middle  positions e-m+1 .. e                      (consecutive; e drawn as below)
  tail    positions L'-h .. L'-1                    (the last positions of the target range)

  h       with probability 1/2 "continuity": k (data.position_sampler.cream_k; -1 = 4 s, the
          released value), else "relativity": floor(N / 3);
  r       floor(X) / 2 with X drawn from a Gaussian of mean mu = 1 + s and standard deviation
          sigma (cream_sigma, 3) restricted to [2, 2s], s = floor(L' / N): r is one of
          1, 1.5, ..., s and lies near (1 + s) / 2 on average;
  e       uniform integer in [floor(h + (m-1) r), floor(r N) - h - 1].

So the middle ends at about r N, its centre near L' / 2 on average: the middle of the target
context is seen most ("Gaussian middle"). Every segment is strictly increasing and disjoint from
the others: e - (m-1) >= h (the middle starts after the head) and e <= s N - h - 1 <= L' - h - 1
(it ends before the tail), so all positions lie in [0, L').

What we followed. Of the paper we could read the abstract and Fig. 2's caption, not the full
Sec. 3: head and tail of a small length k for continuity, N/3 for relativity, the middle's indices
from a truncated Gaussian. The numbers above are those of the authors' released code
(github.com/bigai-nlco/CREAM, src/train.py, function `CREAM`; run with scripts/run_CREAM.sh:
4K -> s x 4K, sigma left at its default 3.0, learning rate 2e-5, 10 warmup steps, 1,000 steps).
Where the code is more specific than that description, this module does what the code does
unless noted:

  * The Gaussian. The code inverts the CDF of the *untruncated* normal on a 1,000-point grid of
    [2, 2s] (`np.interp(u, cdf, x)`): a uniform draw below the grid's first CDF value gives 2,
    above its last gives 2s, so the tails' mass piles onto the ends (a clipped, not a truncated,
    Gaussian). cream_truncation = "clip" (default) does exactly that; "renormalize" draws the
    uniform variable inside [cdf(2), cdf(2s)] instead, a true truncated Gaussian as the paper's
    wording says. Either way X is floored (`.astype(int)`), so r = floor(X) / 2.
  * The continuity length. The paper calls it a small k; the code uses k = 4 s. cream_k = -1
    gives 4 s; any other value is k itself.
  * Granularity. The code draws the head/tail choice once per `datasets.map` batch of 3,000
    examples (all of them share it) and X, e per example. We draw all three per example and per
    document segment (more independent draws, the same distribution per sequence).
  * Content. When e falls inside the document, the code feeds the middle the document's tokens
    at those very positions (text skipped with the positions). Its training set holds documents
    of N tokens, so for r > 1 the input is the window's contiguous text. Ours always keeps the
    window's contiguous tokens and rewrites positions only: a packed window has no text beyond
    it (as for PoSE, data/position_samplers.py).
  * Short sequences. The code assumes N = the full window and L' = s N exactly. Per document
    segment of n tokens we take s = floor(L' / n) (>= 1; a segment longer than L' is refused),
    the tail still ends at L' - 1, and h is capped at floor((n - 1) / 2) so that the middle keeps
    >= 1 token. With s = 1 the grid is the single point 2 (r = 1).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from data.sampler_base import PositionSampler

TRUNCATIONS = ("clip", "renormalize")
GRID_POINTS = 1000  # the released code's grid of [2, 2s]


@functools.lru_cache(maxsize=256)
def _grid_cdf(s: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """The released code's grid x of [2, 2s] and the normal CDF (mean 1 + s, std sigma) on it."""
  x = np.linspace(2.0, 2.0 * s, GRID_POINTS)
  erf = np.vectorize(math.erf, otypes=[np.float64])
  cdf = 0.5 * (1.0 + erf((x - (1.0 + s)) / (sigma * math.sqrt(2.0))))
  x.setflags(write=False)
  cdf.setflags(write=False)
  return x, cdf


def gaussian_factor(s: int, sigma: float, u: float, truncation: str = "clip") -> int:
  """floor(X) for X the Gaussian draw of uniform `u` in [0, 1): an integer in [2, 2s].

  Args:
    s: the integer extension factor floor(L' / N), >= 1.
    sigma: the Gaussian's standard deviation (in units of X, i.e. of half-factors).
    u: the uniform draw.
    truncation: "clip" (the released code: the inverse CDF of the untruncated normal on the grid,
      so draws beyond either end give the end) or "renormalize" (u mapped into [cdf(2), cdf(2s)]:
      a truncated normal).
  """
  if s <= 1:
    return 2
  x, cdf = _grid_cdf(int(s), float(sigma))
  if truncation == "renormalize":
    u = cdf[0] + u * (cdf[-1] - cdf[0])
  return int(np.interp(u, cdf, x))


def cream_segment(n: int, max_position: int, rng: np.random.Generator, *, k: int = -1,
                  sigma: float = 3.0, truncation: str = "clip") -> tuple[np.ndarray, dict]:
  """CREAM positions for one sequence of n tokens (arXiv 2406.07138, Sec. 3; module docstring).

  Args:
    n: tokens in the sequence (1 <= n <= max_position).
    max_position: L', the target length; every position stays below it.
    rng: the example's generator. Draws, in order: the head/tail mode (integers(2)), u
      (random()), the middle's end e (integers(lo, hi, endpoint=True)).
    k: the continuity head/tail length; -1 = 4 s (the released code).
    sigma: standard deviation of the Gaussian over X in [2, 2s].
    truncation: "clip" or "renormalize" (see `gaussian_factor`).

  Returns:
    positions: int32 [n], strictly increasing, in [0, max_position).
    info: {"mode": "continuity" | "relativity", "head": h, "factor": s, "x": floor(X),
      "end": e}: the draw, for tests and inspection.

  Raises:
    ValueError: n < 1, n > max_position, or an unknown truncation.
  """
  if n < 1 or n > max_position:
    raise ValueError(f"cream needs 1 <= n <= max_position; got n={n}, max_position={max_position}")
  if truncation not in TRUNCATIONS:
    raise ValueError(f"cream truncation must be one of {list(TRUNCATIONS)}; got {truncation!r}")
  s = max_position // n
  continuity = int(rng.integers(2)) == 1  # the code's rand_num: 0 = relativity, 1 = continuity
  head = (4 * s if k == -1 else k) if continuity else n // 3
  head = min(head, (n - 1) // 2)
  m = n - 2 * head
  x = gaussian_factor(s, sigma, float(rng.random()), truncation)
  r = x / 2
  lo = math.floor(head + (m - 1) * r)
  hi = math.floor(r * n) - head - 1
  end = int(rng.integers(lo, hi, endpoint=True))
  positions = np.concatenate([
      np.arange(head), np.arange(end - m + 1, end + 1),
      np.arange(max_position - head, max_position)]).astype(np.int32)
  info = {"mode": "continuity" if continuity else "relativity", "head": head, "factor": s,
          "x": x, "end": end}
  return positions, info


@dataclasses.dataclass(frozen=True)
class CREAMPositions(PositionSampler):
  """CREAM (Wu et al., arXiv 2406.07138, Sec. 3): per segment, head and tail at the two ends of
  [0, max_position), the middle's place drawn from a Gaussian centred on the target's middle.

  Attributes:
    k: the continuity head/tail length (-1 = 4 s, the released code).
    sigma: the Gaussian's standard deviation (3, the released default).
    truncation: "clip" (released) or "renormalize" (a true truncated Gaussian).
  """

  k: int = -1
  sigma: float = 3.0
  truncation: str = "clip"

  def segment_positions(self, n, rng):
    return cream_segment(n, self.max_position, rng, k=self.k, sigma=self.sigma,
                         truncation=self.truncation)[0]
