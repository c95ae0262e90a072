"""Copy: repeat the input string (Kazemnejad et al., arXiv 2305.19466, "Copy"; Ruoss et al.,
arXiv 2305.16843, have the close relative `duplicate_string`, the input written twice).

Size n = input symbols, uniform digits "0".."9". Example (n = 4): BOS "3142=" -> "3142" EOS.
Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DigitTransformTask


class Copy(DigitTransformTask):
  """Copy n digits: prompt `x=` (n + 1 bytes), answer `x` (n bytes)."""

  name = "copy"

  def transform(self, x: np.ndarray) -> np.ndarray:
    return x
