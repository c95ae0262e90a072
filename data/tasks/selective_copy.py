"""Selective copying: copy the digits scattered among noise, in order, skipping the noise.

Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", arXiv 2312.00752,
Sec. 3.1 (after Arjovsky et al.'s copying task): data tokens at random positions among noise
tokens; the model must output the data tokens in order. Size n = data digits: n uniform digits
placed at n random slots (without replacement, in order) of a region of 4n slots filled with the
noise byte `.`; the answer is the n digits. Example (n = 2): BOS ".3..1...=" -> "31" EOS.
Sequence length 5n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols

NOISE = ord(".")
REGION = 4  # slots per data digit


class SelectiveCopy(Task):
  """A region of 4n slots (n digits among `.` noise), `=`: prompt 4n + 1 bytes; answer the n
  digits in order (n bytes)."""

  name = "selective_copy"
  size_unit = "data digits"

  def prompt_length(self, size: int) -> int:
    return REGION * size + 1

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    digits = symbols(rng, DIGITS, size)
    slots = np.sort(rng.choice(REGION * size, size=size, replace=False))
    region = np.full(REGION * size, NOISE, np.uint8)
    region[slots] = digits
    return region.tobytes() + SEPARATOR, digits.tobytes()
