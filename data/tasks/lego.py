"""LEGO: resolve a chain of sign assignments given in shuffled order (Zhang, Backurs, Bubeck,
Eldan, Gunasekar & Wagner, "Unveiling Transformers with LEGO", arXiv 2206.04301; Kazemnejad et
al., arXiv 2305.19466, "LEGO").

Size n = variables (distinct letters a..z, so n <= 26), linked in a chain: the first is +1 or -1,
each next one is + or - the one before, e.g. a = +1, b = -a, c = +b. The n clauses are written in a
random order, each as 4 bytes `<variable>:<sign><operand>` (":" for "=", which
ends every prompt here) (the operand "1" for the first
variable) and ended by ",", then "|" closes the prompt before "="; the answer gives each
variable's value as "+" or "-", in the order the clauses were written. Example (n = 3, chain
a = +1, b = -a, c = +b, written c, a, b): BOS "c:+b,a:+1,b:-a,|=" -> "-+-" EOS. Sequence length
6n + 3 tokens. (The byte format is this codebase's; the clause structure and the shuffled order,
which makes the model follow the chain by content rather than by position, are the paper's.)
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import SEPARATOR, Task

VARIABLES = b"abcdefghijklmnopqrstuvwxyz"


class Lego(Task):
  """n shuffled clauses of 5 bytes, then `|=`: prompt 5n + 2 bytes; answer n signs."""

  name = "lego"
  size_unit = "variables"
  max_size = len(VARIABLES)

  def prompt_length(self, size: int) -> int:
    return 5 * size + 2

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    if size > len(VARIABLES):
      raise ValueError(f"lego: at most {len(VARIABLES)} variables; got {size}")
    names = rng.permutation(np.frombuffer(VARIABLES, np.uint8))[:size]
    signs = rng.integers(0, 2, size=size)  # 0 = "+", 1 = "-"
    values, clauses = [], []
    for i in range(size):
      sign = b"+-"[int(signs[i]):int(signs[i]) + 1]
      operand = b"1" if i == 0 else bytes([names[i - 1]])
      value = (1 if signs[i] == 0 else -1) * (1 if i == 0 else values[-1])
      values.append(value)
      clauses.append(bytes([names[i]]) + b":" + sign + operand + b",")
    order = rng.permutation(size)
    prompt = b"".join(clauses[j] for j in order) + b"|" + SEPARATOR
    return prompt, bytes(ord("+") if values[j] > 0 else ord("-") for j in order)
