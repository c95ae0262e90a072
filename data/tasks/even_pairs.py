"""Even pairs: is the number of "ab" and "ba" substrings even? (Deletang et al., arXiv 2207.02098,
"Even Pairs", a regular task.)

Size n = input symbols, uniform over {"a", "b"}; the answer is "1" when the count of adjacent
unequal pairs ("ab" or "ba") is even, else "0". That count is even exactly when the first and last
symbols are equal (every change of symbol must be undone to return), which is why the task is
regular; the test checks both definitions. Example (n = 4): BOS "abba=" -> "1" EOS (ab, ba: 2).
Sequence length n + 3 tokens.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import SEPARATOR, Task, symbols

LETTERS = np.frombuffer(b"ab", np.uint8)


class EvenPairs(Task):
  """n letters of {a, b}, `=`: prompt n + 1 bytes; answer "1" (even) or "0", one byte."""

  name = "even_pairs"
  size_unit = "input symbols"

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return 1

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, LETTERS, size)
    changes = int(np.count_nonzero(x[1:] != x[:-1]))
    return x.tobytes() + SEPARATOR, b"1" if changes % 2 == 0 else b"0"
