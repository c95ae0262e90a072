"""Modular arithmetic: evaluate a chain of + - * on numbers mod 5 (Deletang et al., arXiv
2207.02098, "Modular Arithmetic (Simple)", a regular task: no brackets).

Size n = numbers, uniform in 0..4, joined by n - 1 operators uniform over "+", "-", "*"; the answer
is the value mod 5, one digit. The chain is evaluated **left to right** (((x1 op x2) op x3) ...,
the reading that keeps the task regular: a finite automaton over the 5 residues), not with the
usual precedence of * over + and -. Example (n = 3): BOS "3+4*2=" -> "4" EOS ((3 + 4) * 2 = 14
= 4 mod 5). Sequence length 2n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import SEPARATOR, Task

MODULUS = 5
OPERATORS = b"+-*"


class ModularArithmetic(Task):
  """n numbers in 0..4 with n - 1 operators, `=`: prompt 2n bytes; answer the value mod 5."""

  name = "modular_arithmetic"
  size_unit = "numbers"

  def prompt_length(self, size: int) -> int:
    return 2 * size

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    numbers = rng.integers(0, MODULUS, size=size)
    ops = rng.integers(0, len(OPERATORS), size=size - 1)
    value, text = int(numbers[0]), [str(int(numbers[0]))]
    for op, number in zip(ops, numbers[1:]):
      symbol = OPERATORS[int(op)]
      value = {ord("+"): value + int(number), ord("-"): value - int(number),
               ord("*"): value * int(number)}[symbol] % MODULUS
      text += [chr(symbol), str(int(number))]
    return "".join(text).encode() + SEPARATOR, str(value).encode()
