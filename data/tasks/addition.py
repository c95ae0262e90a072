"""Addition of two n-digit numbers, digits least-significant first (the reversed format of
Kazemnejad et al., arXiv 2305.19466, "Addition"; Ruoss et al., arXiv 2305.16843, write
`binary_addition` little-endian the same way). Written this way, each answer digit depends
only on the operand digits at the same place and the carry from the digit before it.

Size n = digits per operand. Both operands are uniform in [0, 10^n) and written with exactly n
digits (zero-padded), reversed; the sum is written with exactly n + 1 digits (zero-padded: the
last digit is the final carry, 0 or 1), reversed. Example (n = 2, 57 + 68 = 125):
BOS "75+86=" -> "521" EOS. Sequence length 3n + 4 tokens.

`addition_reversed_answer` (Addition(reverse_operands=False)) writes the operands most
significant digit first and only the sum reversed, the format of Cho et al., "Position
Coupling" (arXiv 2405.20671; released code's `reverse_output` with zero padding): BOS "57+68="
-> "521" EOS. Either format takes coupled position ids (data.task.position_coupling,
data/position_coupling.py).
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols


def little_endian(value: int, digits: int) -> bytes:
  """`value` (>= 0, < 10**digits) as exactly `digits` decimal digits, least significant first.

  Raises:
    ValueError: value < 0 or value needs more than `digits` digits.
  """
  text = str(value)
  if value < 0 or len(text) > digits:
    raise ValueError(f"{value} does not fit in {digits} digits")
  return text.zfill(digits)[::-1].encode()


class Addition(Task):
  """n-digit + n-digit addition: prompt `a+b=` (2n + 2 bytes), answer the reversed (n + 1)-digit
  sum (n + 1 bytes).

  Args:
    reverse_operands: write the operands least-significant digit first too (registered as
      `addition`); False: most-significant first (`addition_reversed_answer`).
  """

  size_unit = "digits per operand"

  def __init__(self, reverse_operands: bool = True):
    self.reverse_operands = bool(reverse_operands)
    self.name = "addition" if self.reverse_operands else "addition_reversed_answer"

  def prompt_length(self, size: int) -> int:
    return 2 * size + 2

  def answer_length(self, size: int) -> int:
    return size + 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    a_digits, b_digits = symbols(rng, DIGITS, size), symbols(rng, DIGITS, size)  # little-endian
    a = int(a_digits[::-1].tobytes())
    b = int(b_digits[::-1].tobytes())
    if not self.reverse_operands:
      a_digits, b_digits = a_digits[::-1], b_digits[::-1]
    prompt = a_digits.tobytes() + b"+" + b_digits.tobytes() + SEPARATOR
    return prompt, little_endian(a + b, size + 1)
