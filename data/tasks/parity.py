"""Parity: is the number of ones in a bit string odd? (Kazemnejad et al., arXiv 2305.19466,
"Parity"; Ruoss et al., arXiv 2305.16843, `parity_check`.)

Size n = input bits, uniform "0"/"1". The answer is one byte: "1" when the count of "1"s is odd,
"0" when it is even. Example (n = 4): BOS "1101=" -> "1" EOS. Sequence length n + 3 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import BITS, SEPARATOR, Task, symbols


class Parity(Task):
  """Parity of n bits: prompt `x=` (n + 1 bytes), answer "0" or "1" (1 byte)."""

  name = "parity"
  size_unit = "input bits"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, BITS, size)
    odd = int(np.count_nonzero(x == ord("1")) % 2)
    return x.tobytes() + SEPARATOR, b"01"[odd:odd + 1]
