"""Summation: the sum of n digits modulo 10 (Kazemnejad et al., arXiv 2305.19466, "Summation").

Size n = input digits, uniform in 0..9; the answer is one digit, their sum mod 10. Like parity
(data/tasks/parity.py, the same sum over bits mod 2) the answer depends on every input symbol.
Example (n = 4): BOS "3142=" -> "0" EOS (3 + 1 + 4 + 2 = 10). Sequence length n + 3 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class Summation(Task):
  """n digits, `=`: prompt n + 1 bytes; answer (sum of the digits) mod 10, one byte."""

  name = "summation"
  size_unit = "input digits"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, DIGITS, size)
    total = int((x - ord("0")).astype(np.int64).sum()) % 10
    return x.tobytes() + SEPARATOR, str(total).encode()
