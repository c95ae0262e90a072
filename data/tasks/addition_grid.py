"""Addition of an a-digit and a b-digit number, on a two-dimensional grid of operand lengths.

The protocol of McLeish et al., "Transformers Can Do Arithmetic with the Right Embeddings", arXiv
2405.17399 (Section 3 and Figure 1): train on every pair of operand lengths (a, b) up to n, then
draw exact-match accuracy as a heatmap over (a, b) up to k * n, so that generalization in the
longer operand and in the shorter one, and the role of carries across the length mismatch, show
separately (eval/algorithmic.py `evaluate_grid`).

Cell (a, b): the first operand has exactly a digits and the second exactly b (the leading digit
uniform in 1..9 when the operand has more than one digit, so the length is the number's own; a
one-digit operand is uniform in 0..9; every other digit uniform in 0..9). The sum is written
with exactly max(a, b) + 1 digits, zero-padded (the extra digit is the final carry, 0 or 1), so
the answer length is fixed per cell and the model is not scored on guessing it. Two digit orders
are registered:

  addition_grid        operands and sum least-significant digit first (the reversed format of
                       McLeish et al. and of data/tasks/addition.py): cell (2, 3), 57 + 468 = 525:
                       BOS "75+864=" -> "5250" EOS
  addition_grid_plain  operands and sum most-significant digit first, as written by hand:
                       BOS "57+468=" -> "0525" EOS

Sequence length of cell (a, b): a + b + max(a, b) + 4 tokens. Training draws a and b
independently and uniformly in [train_min_size, train_max_size] (data/tasks/base.py GridTask), so
train_len must hold the diagonal cell (n, n): 3n + 4 tokens. The task's one-size interface
(size n, the algorithmic suite's rows and the validation loss) is the diagonal a = b = n.
Difference from McLeish et al., stated: they pack several problems per row with no BOS and
train on operand lengths up to 20; here one problem is one segment, and the size is set by the
config.
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, GridTask, symbols

NONZERO = DIGITS[1:]


class AdditionGrid(GridTask):
  """a-digit + b-digit addition: prompt `x+y=` (a + b + 2 bytes), answer the (max(a, b) + 1)-digit
  sum, zero-padded; digits least-significant first when `reverse`, else most-significant first.

  Args:
    reverse: write every number least-significant digit first (registered as `addition_grid`);
      False writes them as usual (`addition_grid_plain`).
  """

  size_unit = "digits per operand"

  def __init__(self, reverse: bool = True):
    self.reverse = bool(reverse)
    self.name = "addition_grid" if self.reverse else "addition_grid_plain"

  def cell_prompt_length(self, a: int, b: int) -> int:
    return a + b + 2

  def cell_answer_length(self, a: int, b: int) -> int:
    return max(a, b) + 1

  def _operand(self, digits: int, rng: np.random.Generator) -> int:
    if digits == 1:
      return int(symbols(rng, DIGITS, 1).tobytes())
    head = symbols(rng, NONZERO, 1).tobytes()
    return int(head + symbols(rng, DIGITS, digits - 1).tobytes())

  def _write(self, value: int, digits: int) -> bytes:
    text = str(value).zfill(digits)
    return (text[::-1] if self.reverse else text).encode()

  def sample_cell(self, a: int, b: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x, y = self._operand(a, rng), self._operand(b, rng)
    prompt = self._write(x, a) + b"+" + self._write(y, b) + SEPARATOR
    return prompt, self._write(x + y, max(a, b) + 1)
