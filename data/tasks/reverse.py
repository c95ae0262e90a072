"""Reverse: write the input string backwards (Kazemnejad et al., arXiv 2305.19466, "Reverse";
Ruoss et al., arXiv 2305.16843, `reverse_string`).

Size n = input symbols, uniform digits "0".."9". Example (n = 4): BOS "3142=" -> "2413" EOS.
Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DigitTransformTask


class Reverse(DigitTransformTask):
  """Reverse n digits: prompt `x=` (n + 1 bytes), answer `x[::-1]` (n bytes)."""

  name = "reverse"

  def transform(self, x: np.ndarray) -> np.ndarray:
    return x[::-1]
