"""Flip-flop language modelling: remember the bit of the last write across ignores and reads.

Liu, Ash, Goel, Krishnamurthy & Zhang, "Exposing Attention Glitches with Flip-Flop Language
Modeling", arXiv 2306.00946, Sec. 3: a sequence of instruction-bit pairs over {w, r, i} x {0, 1};
`w b` writes b, `i b` is ignored, and `r b` must read the most recent write. FFL(p_i) draws the
instructions i.i.d. with P(i) = p_i and P(w) = P(r) = (1 - p_i) / 2, the first one a write; the
paper trains on FFL(0.8). Here, size n = instruction pairs before the final read: the first is
`w`, the others follow FFL(0.8) (reads inside the prompt carry their correct bit); the prompt
ends with the final `r`, and the answer is its bit. Example (n = 3): BOS "w1i0r1r=" -> "1" EOS.
Sequence length 2n + 4 tokens.

Difference from the paper, stated: there every read's bit is predicted; here only the final one
is a target (data/tasks/base.py trains the answer only), so a size-n instance asks for one
long-range read whose distance to the last write grows with n.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import SEPARATOR, Task

P_IGNORE = 0.8  # FFL(0.8), the paper's training distribution


class FlipFlop(Task):
  """n instruction-bit pairs then `r=`: prompt 2n + 2 bytes; answer the last written bit."""

  name = "flip_flop"
  size_unit = "instructions before the final read"

  def prompt_length(self, size: int) -> int:
    return 2 * size + 2

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    ops = rng.choice(np.frombuffer(b"iwr", np.uint8), size=size,
                     p=[P_IGNORE, (1 - P_IGNORE) / 2, (1 - P_IGNORE) / 2])
    ops[0] = ord("w")
    bits = rng.integers(0, 2, size=size)
    memory = 0
    for j in range(size):  # reads carry the memory's bit, writes set it
      if ops[j] == ord("w"):
        memory = int(bits[j])
      elif ops[j] == ord("r"):
        bits[j] = memory
    pairs = np.stack([ops, (bits + ord("0")).astype(np.uint8)], axis=1).reshape(-1)
    return pairs.astype(np.uint8).tobytes() + b"r" + SEPARATOR, str(memory).encode()
