"""EndPrompt positions: the sequence's last tokens moved to the far end of the target range.

"EndPrompt: Efficient Long-Context Extension via Terminal Anchoring", arXiv 2605.14589 (May
2026). Config: data.position_sampler.kind = "endprompt"
(configs/base.py); dispatched from data/position_samplers.py, whose docstring gives the
determinism and packed-window rules every sampler follows (one draw per document segment, from
`np.random.default_rng([seed, stream, index])`).

The rule. A training sequence of n tokens keeps its text and is split in two: the first n - c
tokens (the "intact first segment") keep positions 0 .. n-c-1; the last c tokens (the "terminal
prompt", c = data.position_sampler.endprompt_length) get consecutive positions that end near the
target length L' = max_position:

  anchor "end"     positions L'-c .. L'-1 (the last position is exactly L' - 1);
  anchor "random"  positions t .. t+c-1, t uniform in {n - c, ..., L' - c} (t = n - c: no jump).

The model then sees relative distances up to L' - 1 in a short sequence: every terminal token
attends to the whole first segment from about L' away. A segment of c tokens or fewer keeps its
true positions 0 .. n-1 (nothing to split).

What we followed. The paper's abstract (the method: "preserve the original short context as an
intact first segment and append a brief terminal prompt as a second segment" whose position
indices lie near the target length). The numbers are those of the repository that presents itself as the
paper's experimental code (github.com/clx1415926/EndPrompt; its README names the paper and ships
its PDF; we could not read the PDF's method section, so the code is the reference here):
  * "end" = fine_tune_suffix.py, `preprocess_fixed_split_pose` (data_processing_mode
    "pose_fixed_split"), the main entry point finetune_main_suffix.sh: c = CHUNK_2_LENGTH = 20,
    the last position pose_final_position_id = 65535 = L' - 1 for L' = 64K, Llama-3-8B (8K)
    with linear interpolation (PI) at factor ceil(L' / 8K) = 8, learning rate 2e-5, 20 warmup
    steps then constant, weight decay 0, one epoch. The split and its fallback (c >= n: the
    true positions) are that function's. It draws nothing: with "end" every example of a given
    length gets the same positions.
  * "random" = finetune_suffix_random.py, `DataCollatorForFixedSuffixRandomPos`: the suffix's
    start uniform in [n - c, L' - c] (`random.randint`, both ends included).
Differences:
  * Content. Both released variants take the terminal tokens from the same token sequence as the
    first segment. The fixed variant's tokens are the window's own contiguous text (as here); the
    random variant skips the text between the first segment and the document's last c tokens.
    A packed window has no text beyond it, so ours keeps the contiguous window in both (as for
    PoSE, data/position_samplers.py). Its loss covers every token, as the code's labels do.
  * Packed windows. The released rows are 8K-token sequences with positions 0..n-1 across
    documents; here each document segment is its own sequence (the project's rule), so a window
    of several documents has a terminal prompt per document of more than c tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from data.sampler_base import PositionSampler

ANCHORS = ("end", "random")


def endprompt_segment(n: int, length: int, max_position: int, rng: np.random.Generator | None,
                      anchor: str = "end") -> np.ndarray:
  """EndPrompt positions for one sequence of n tokens (module docstring).

  Args:
    n: tokens in the sequence (1 <= n <= max_position).
    length: c, the terminal prompt's tokens (>= 1).
    max_position: L'; every position stays below it.
    rng: the example's generator (read by anchor "random" only: one integers(lo, hi,
      endpoint=True) draw per split segment).
    anchor: "end" (last position L' - 1) or "random" (start uniform in [n - c, L' - c]).

  Returns:
    int32 [n], strictly increasing, in [0, max_position).

  Raises:
    ValueError: n < 1, n > max_position, length < 1 or an unknown anchor.
  """
  if n < 1 or n > max_position or length < 1:
    raise ValueError(f"endprompt needs 1 <= n <= max_position and length >= 1; got n={n}, "
                     f"length={length}, max_position={max_position}")
  if anchor not in ANCHORS:
    raise ValueError(f"endprompt anchor must be one of {list(ANCHORS)}; got {anchor!r}")
  positions = np.arange(n, dtype=np.int32)
  if length >= n:
    return positions
  first = n - length
  start = (max_position - length if anchor == "end"
           else int(rng.integers(first, max_position - length, endpoint=True)))
  positions[first:] = np.arange(start, start + length, dtype=np.int32)
  return positions


@dataclasses.dataclass(frozen=True)
class EndPromptPositions(PositionSampler):
  """EndPrompt (arXiv 2605.14589): per segment, the last `length` tokens moved to the end of
  [0, max_position) ("end") or to a uniform place before it ("random"); the rest keep 0..n-c-1.

  Attributes:
    length: c, the terminal prompt's tokens (20 in the released script).
    anchor: "end" (released main script) or "random" (released random variant).
  """

  length: int = 20
  anchor: str = "end"

  def segment_positions(self, n, rng):
    return endprompt_segment(n, self.length, self.max_position, rng, self.anchor)
