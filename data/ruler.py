"""RULER's multi-key needle (Hsieh et al., arXiv 2404.06654, Section 3.1, "niah_multikey"):
one needle to retrieve among distractor needles of other keys, in real held-out text.

Prompt (as the single needle of data/passkey.py, with num_keys needles instead of one):

  [NEEDLE_PREAMBLE "\\n"] haystack with num_keys needle lines inserted "\\n" question

Every needle is "One of the special magic numbers for {key} is: {value}." on its own line; the
keys are distinct adjective-noun pairs (data/passkey.py KEY_ADJECTIVES x KEY_NOUNS), every value
a `value_digits`-digit number with a non-zero first digit. The question asks for the first key,
the target: its needle is inserted at the line or sentence start nearest to depth * F (F =
haystack tokens), the num_keys - 1 distractors at the unit starts nearest to independent uniform
depths. A distractor's value is never the target's (the answer is unambiguous). Needles that
land at the same point keep their drawn order. The answer is the target's value, scored as the
single needle is (eval/needle.py: the first run of digits of the greedy continuation).

Difference from RULER, stated: RULER's niah_multikey_1 puts the distractors in a noise haystack
("The grass is green..." repeated) and niah_multikey_2/3 in essays or with UUID keys; here they
are in held-out text of eval.split (the needle suite's haystack), with RULER's key-value needle,
so that one variable, the number of needles, separates this suite from `needle`.

A prompt is a function of (seed, length, depth, trial), the format fields and the held-out
documents only (`cell`): byte-identical for every scheme and checkpoint.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.corpora import Document
from data.passkey import (KEY_ADJECTIVES, KEY_NOUNS, MAX_NEEDLE_KEYS, NEEDLE_QUESTION,
                          NEEDLE_TEMPLATE, NeedlePrompts, RetrievalPrompt, _ids, _snap, cell_rng,
                          random_digits)
from data.tokenizers import ByteTokenizer

KEYS = tuple(f"{a}-{n}" for a in KEY_ADJECTIVES for n in KEY_NOUNS)  # 576 distinct keys


class MultiKeyNeedlePrompts(NeedlePrompts):
  """Builds niah_multikey prompts (module docstring).

  Args:
    tokenizer: the tokenizer.
    docs: held-out documents (the haystack).
    num_keys: needles per prompt, the target included, in [2, MAX_NEEDLE_KEYS].
    preamble: start with RULER's task description and a newline.
    value_digits: digits of every needle's value, in [1, 18] (RULER: 7).

  Raises:
    ValueError: num_keys outside [2, MAX_NEEDLE_KEYS]; see NeedlePrompts.
  """

  def __init__(self, tokenizer: ByteTokenizer, docs: Sequence[Document], *, num_keys: int = 4,
               preamble: bool = True, value_digits: int = 7):
    if (not isinstance(num_keys, int) or isinstance(num_keys, bool)
        or not 2 <= num_keys <= MAX_NEEDLE_KEYS):
      raise ValueError(f"num_keys must be an integer in [2, {MAX_NEEDLE_KEYS}]; got {num_keys!r}")
    super().__init__(tokenizer, docs, preamble=preamble, value_digits=value_digits)
    self.num_keys = num_keys
    self._longest_needle = max(map(self._needle_len, KEYS))

  def _needle_len(self, key: str) -> int:
    return len(_ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=key, value="9" * self.value_digits)))

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack for the longest keys (every trial fits from here on)."""
    return super().min_length + (self.num_keys - 1) * (self._longest_needle + len(self._newline))

  def build_multi(self, length: int, depth: float, keys: Sequence[str], values: Sequence[str],
                  start: int, distractor_depths: Sequence[float]) -> RetrievalPrompt:
    """A prompt of exactly `length` tokens asking for `keys[0]`.

    Args:
      length: prompt length, tokens, BOS included.
      depth: the target needle's depth in [0, 1] (snapped; the result's `actual_depth`).
      keys, values: num_keys distinct keys and their values (`value_digits` digits each).
      start: token offset in the haystack stream where the haystack begins.
      distractor_depths: num_keys - 1 depths in [0, 1] of the other needles.

    Returns:
      A RetrievalPrompt: answer = values[0], key = keys[0], needle_start/end the target's.

    Raises:
      ValueError: wrong counts, repeated keys, a bad value, depth outside [0, 1], or a length
        too short for these needles.
    """
    k = self.num_keys
    if len(keys) != k or len(values) != k or len(distractor_depths) != k - 1:
      raise ValueError(f"need {k} keys and values and {k - 1} distractor depths; got "
                       f"{len(keys)}, {len(values)}, {len(distractor_depths)}")
    if len(set(keys)) != k:
      raise ValueError(f"keys must be distinct; got {list(keys)}")
    for v in values:
      self._check_value(v)
    depths = [float(depth), *map(float, distractor_depths)]
    if not all(0.0 <= d <= 1.0 for d in depths):
      raise ValueError(f"depths must lie in [0, 1]; got {depths}")
    nl = self._newline
    needles = [np.concatenate([_ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=kk, value=v)), nl])
               for kk, v in zip(keys, values)]
    tail = np.concatenate([nl, _ids(self.tokenizer, NEEDLE_QUESTION.format(key=keys[0]))])
    hay_len = length - len(self._head) - sum(map(len, needles)) - len(tail)
    if hay_len < 0:
      raise ValueError(f"a niah_multikey prompt ({k} needles, preamble={self.preamble}) needs at "
                       f"least {length - hay_len} tokens; got length {length}")
    hay, starts = self.haystack.window(start, hay_len)
    candidates = np.concatenate([[0], starts])
    points = [_snap(candidates, d * hay_len) for d in depths]
    parts, lo, needle_starts = [self._head], 0, {}  # needle index -> its offset in the prompt
    for i in sorted(range(k), key=lambda i: (points[i], i)):  # the target first at a tie
      parts.append(hay[lo:points[i]])
      lo = points[i]
      needle_starts[i] = sum(map(len, parts))
      parts.append(needles[i])
    tokens = np.concatenate(parts + [hay[lo:], tail]).astype(np.int32)
    assert len(tokens) == length, (len(tokens), length)
    distractors = tuple((keys[i], values[i], needle_starts[i]) for i in needle_starts if i != 0)
    return RetrievalPrompt(tokens, values[0], keys[0], float(depth),
                           points[0] / hay_len if hay_len else 0.0, needle_starts[0],
                           needle_starts[0] + len(needles[0]) - len(nl), distractors)

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one grid cell's trial, drawn from `cell_rng(seed, "niah_multikey", length,
    depth, trial)` in this order: num_keys distinct keys (the first is the target), their values
    (each distractor's redrawn until it differs from the target's), the haystack start (a line
    start), the distractors' depths.

    Raises:
      ValueError: see `build_multi` and `cell_rng`.
    """
    rng = cell_rng(seed, "niah_multikey", length, depth, trial)
    keys = [KEYS[i] for i in rng.permutation(len(KEYS))[:self.num_keys]]
    values = [random_digits(rng, self.value_digits)]
    while len(values) < self.num_keys:
      v = random_digits(rng, self.value_digits)
      if v != values[0]:
        values.append(v)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    return self.build_multi(length, depth, keys, values, start,
                            rng.random(self.num_keys - 1).tolist())
