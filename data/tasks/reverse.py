"""Reverse: write the input string backwards (Kazemnejad et al., arXiv 2305.19466, "Reverse";
Ruoss et al., arXiv 2305.16843, `reverse_string`).

Size n = input symbols, uniform digits "0".."9". Example (n = 4): BOS "3142=" -> "2413" EOS.
Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class Reverse(Task):
  """Reverse n digits: prompt `x=` (n + 1 bytes), answer `x[::-1]` (n bytes)."""

  name = "reverse"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, DIGITS, size)
    return x.tobytes() + SEPARATOR, x[::-1].tobytes()
