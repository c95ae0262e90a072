"""Duplicate string: write the input twice (Deletang et al., "Neural Networks and the Chomsky
Hierarchy", arXiv 2207.02098, "Duplicate String", a context-sensitive task; Ruoss et al., arXiv
2305.16843, use it with randomized positions).

Size n = input bits, uniform "0"/"1" (the binary alphabet of both papers); the answer is the input
followed by itself, 2n bytes. Example (n = 3): BOS "101=" -> "101101" EOS. Sequence length
3n + 2 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import BITS, SEPARATOR, Task, symbols


class DuplicateString(Task):
  """n bits, `=`: prompt n + 1 bytes; answer the bits twice, 2n bytes."""

  name = "duplicate_string"
  size_unit = "input bits"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return 2 * size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, BITS, size).tobytes()
    return x + SEPARATOR, x + x
