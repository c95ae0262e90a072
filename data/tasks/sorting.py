"""Sorting: write the input digits in ascending order (Kazemnejad et al., arXiv 2305.19466,
"Sort"; Ruoss et al., arXiv 2305.16843, `bucket_sort` is the same task on a small alphabet).

Size n = input symbols, uniform digits "0".."9" (repeats allowed). Example (n = 5):
BOS "31412=" -> "11234" EOS. Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class Sorting(Task):
  """Sort n digits ascending: prompt `x=` (n + 1 bytes), answer `sorted(x)` (n bytes)."""

  name = "sorting"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, DIGITS, size)
    return x.tobytes() + SEPARATOR, np.sort(x).tobytes()
