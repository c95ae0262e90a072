"""Copy: repeat the input string (Kazemnejad et al., arXiv 2305.19466, "Copy"; Ruoss et al.,
arXiv 2305.16843, have the close relative `duplicate_string`, the input written twice).

Size n = input symbols, uniform digits "0".."9". Example (n = 4): BOS "3142=" -> "3142" EOS.
Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class Copy(Task):
  """Copy n digits: prompt `x=` (n + 1 bytes), answer `x` (n bytes)."""

  name = "copy"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, DIGITS, size).tobytes()
    return x + SEPARATOR, x
