"""Counting: how many of n bits are 1, in decimal.

A bit-counting task: the answer needs a sum over the whole input, not a local rule (parity,
data/tasks/parity.py, is this count mod 2). Size n = input bits; the answer is the count of
`1`s written with exactly len(str(n)) digits, zero-padded, most significant first. Example (n = 12, five ones): BOS "101100010100="
-> "05" EOS. Sequence length n + len(str(n)) + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import BITS, SEPARATOR, Task, symbols


class Counting(Task):
  """n bits, `=`: prompt n + 1 bytes; answer the number of ones, len(str(n)) digits."""

  name = "counting"
  size_unit = "input bits"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return len(str(size))

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, BITS, size)
    ones = int((x == ord("1")).sum())
    return x.tobytes() + SEPARATOR, str(ones).zfill(len(str(size))).encode()
