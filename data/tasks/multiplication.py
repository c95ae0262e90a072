"""Multiplication of two n-digit numbers, digits least-significant first.

The multiplication task of McLeish et al., "Transformers Can Do Arithmetic with the Right
Embeddings", arXiv 2405.17399 (operands and product written least-significant digit first, as
their addition and data/tasks/addition.py). Size n = digits per operand: both operands uniform
in [0, 10^n), written with exactly n digits (zero-padded), reversed; the product with exactly 2n
digits (zero-padded), reversed. Example (n = 2, 57 x 68 = 3876): BOS "75*86=" -> "6783" EOS.
Sequence length 4n + 3 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.addition import little_endian
from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class Multiplication(Task):
  """n-digit x n-digit, reversed digits: prompt `a*b=` (2n + 2 bytes), answer the reversed
  2n-digit product (2n bytes)."""

  name = "multiplication"
  size_unit = "digits per operand"

  def prompt_length(self, size: int) -> int:
    return 2 * size + 2

  def answer_length(self, size: int) -> int:
    return 2 * size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    a_digits, b_digits = symbols(rng, DIGITS, size), symbols(rng, DIGITS, size)  # little-endian
    a, b = int(a_digits[::-1].tobytes()), int(b_digits[::-1].tobytes())
    prompt = a_digits.tobytes() + b"*" + b_digits.tobytes() + SEPARATOR
    return prompt, little_endian(a * b, 2 * size)
