"""Multi-query associative recall (MQAR): n key-value pairs, then every key asked once.

Arora, Eyuboglu, Timalsina, Johnson, Poli, Zou, Rudra & Ré, "Zoology: Measuring and Improving
Recall in Efficient Language Models", arXiv 2312.04927 (its MQAR task): a context of key-value pairs
followed by queries of its keys, each to be answered with its value. Size n = key-value pairs:
n distinct keys drawn without replacement from the 52 letters `a`..`z`, `A`..`Z` (so n <= 52),
each with a uniform digit value; then the n keys again in a fresh random order after `|`. The
answer is the n values in query order. Example (n = 3): BOS "a3b7c1|cab=" -> "137" EOS.
Sequence length 4n + 3 tokens.

Difference from Zoology, stated: there each query is followed by its value inside the sequence
(`... c 1 a 3 ...`); here every answer byte is a training target (data/tasks/base.py), so the
queries sit in the prompt and the values form the answer. Recalling the i-th value needs the i-th
query (an offset lookup) and then its key among the pairs (content recall).
"""

from __future__ import annotations

import numpy as np

from data.tasks.base import DIGITS, SEPARATOR, Task, symbols

KEYS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)
QUERY_MARK = b"|"


class MQAR(Task):
  """n pairs `k v`, `|`, the n keys permuted, `=`: prompt 3n + 2 bytes; answer the n values in
  query order (n bytes). Sizes up to len(KEYS) = 52."""

  name = "mqar"
  size_unit = "key-value pairs"
  max_size = len(KEYS)

  def prompt_length(self, size: int) -> int:
    return 3 * size + 2

  def answer_length(self, size: int) -> int:
    return size

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    if size > self.max_size:
      raise ValueError(f"mqar: size {size} needs {size} distinct keys; at most {self.max_size}")
    keys = KEYS[rng.permutation(len(KEYS))[:size]]
    values = symbols(rng, DIGITS, size)
    order = rng.permutation(size)
    pairs = np.stack([keys, values], axis=1).reshape(-1)
    prompt = pairs.tobytes() + QUERY_MARK + keys[order].tobytes() + SEPARATOR
    return prompt, values[order].tobytes()
