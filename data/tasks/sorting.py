"""Sorting: write the input digits in ascending order (Kazemnejad et al., arXiv 2305.19466,
"Sort"; Ruoss et al., arXiv 2305.16843, `bucket_sort` is the same task on a small alphabet).

Size n = input symbols, uniform digits "0".."9" (repeats allowed). Example (n = 5):
BOS "31412=" -> "11234" EOS. Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DigitTransformTask


class Sorting(DigitTransformTask):
  """Sort n digits ascending: prompt `x=` (n + 1 bytes), answer `sorted(x)` (n bytes)."""

  name = "sorting"

  def transform(self, x: np.ndarray) -> np.ndarray:
    return np.sort(x)
