"""Polynomial evaluation modulo 10 (Kazemnejad et al., arXiv 2305.19466, "Polynomial Evaluation").

Size n = coefficients c_0 .. c_{n-1}, digits uniform in 0..9, then the point x, a digit; the
answer is p(x) = sum_i c_i x^i mod 10, one digit. Format: the coefficients lowest degree first,
"@", x, "=". Example (n = 3, p = 2 + 0 x + 3 x^2 at x = 4: 2 + 48 = 50): BOS "203@4=" -> "0" EOS.
Sequence length n + 5 tokens. (The paper's own serialisation of the polynomial is not followed
byte for byte: this one keeps one symbol per byte like every task here, data/tasks/base.py.)
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


class PolynomialEvaluation(Task):
  """n coefficient digits, `@`, x, `=`: prompt n + 3 bytes; answer p(x) mod 10, one byte."""

  name = "polynomial_evaluation"
  size_unit = "coefficients"

  def prompt_length(self, size: int) -> int:
    return size + 3

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    coefficients = symbols(rng, DIGITS, size)
    x = symbols(rng, DIGITS, 1)
    point = int(x[0]) - ord("0")
    value = 0
    for c in coefficients[::-1]:  # Horner, mod 10 at every step
      value = (value * point + int(c) - ord("0")) % 10
    return coefficients.tobytes() + b"@" + x.tobytes() + SEPARATOR, str(value).encode()
