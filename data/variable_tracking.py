"""RULER's variable tracking (Hsieh et al., arXiv 2404.06654, Section 3.2, "vt"; NVIDIA/RULER
scripts/data/synthetic/variable_tracking.py): chains of VAR assignments hidden in held-out text,
whose answer is every variable of the queried chain (`VariableTrackingPrompts`, suite
variable_tracking, settings eval.variable_tracking). data/ruler.py `builder` makes it by suite
name; the prompt's data model is data/retrieval_prompt.py's.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.corpora import Document
from data.passkey import NeedlePrompts
from data.retrieval_prompt import (VT_NAME_LETTERS, RetrievalPrompt, _ids, _snap, cell_rng,
                                   probe_numbers, widest)
from data.tokenizers import ByteTokenizer

# RULER's variable tracking (scripts/data/synthetic/variable_tracking.py of NVIDIA/RULER): the
# task description, the statements and the question with its answer prefix ("assigned" spelled
# correctly; RULER's template has "assgined").
VT_PREAMBLE = "Memorize and track the chain(s) of variable assignment hidden in the following text."
VT_VALUE_STATEMENT = "VAR {name} = {value}"
VT_ALIAS_STATEMENT = "VAR {name} = VAR {previous}"
VT_QUESTION = ("Question: Find all variables that are assigned the value {value} in the text "
               "above. Answer: According to the chain(s) of variable assignment in the text "
               "above, {count} variables are assigned the value {value}, they are: ")
VT_VALUE_DIGITS = 5  # RULER: a value in 10000..99998


def variable_names(rng: np.random.Generator, count: int) -> list[str]:
  """`count` distinct names of VT_NAME_LETTERS random upper-case ASCII letters."""
  names: list[str] = []
  while len(names) < count:
    name = "".join(chr(ord("A") + int(i)) for i in rng.integers(0, 26, VT_NAME_LETTERS))
    if name not in names:
      names.append(name)
  return names


class VariableTrackingPrompts(NeedlePrompts):
  """RULER's variable tracking (Hsieh et al., arXiv 2404.06654, Section 3.2, "vt"): chains of
  assignments hidden in held-out text; the answer is every variable of the queried chain.

  A chain is `VAR X1 = v`, then `VAR X2 = VAR X1`, ..., `VAR X{h+1} = VAR X{h}` (num_hops
  aliases), each statement followed by a newline. The queried chain's first statement is
  inserted at the line or sentence start nearest to depth * F (F = haystack tokens), its later
  statements at
  sorted uniform depths in [depth, 1] (so the chain reads in order); num_chains - 1 distractor
  chains, with other names and other values, at sorted uniform depths in [0, 1]. The question
  (VT_QUESTION) names the value and the number of variables. Scoring is RULER's
  string_match_all: the share of the chain's names found in the continuation (eval/needle.py).

  Differences from RULER, stated: RULER hides the statements between repeats of a noise
  sentence at uniform random positions and has no depth axis; here the haystack is held-out text
  of eval.split (as for niah_multikey) and the first statement's depth is the grid's depth, so
  the heatmap shows how far back the chain starts. RULER's 'assgined' typo is corrected.

  Args:
    tokenizer: the tokenizer.
    docs: held-out documents (the haystack).
    num_chains: chains per prompt, the queried one included, >= 1 (RULER: 1).
    num_hops: aliases per chain, >= 1 (RULER: 4; a chain has num_hops + 1 variables).
    preamble: start with VT_PREAMBLE and a newline.

  Raises:
    ValueError: num_chains or num_hops < 1 (or not integers); no non-empty document.
  """

  def __init__(self, tokenizer: ByteTokenizer, docs: Sequence[Document], *, num_chains: int = 1,
               num_hops: int = 4, preamble: bool = True):
    for name, value in (("num_chains", num_chains), ("num_hops", num_hops)):
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    super().__init__(tokenizer, docs, preamble=False, value_digits=VT_VALUE_DIGITS)
    self.preamble = bool(preamble)
    self.num_chains, self.num_hops = num_chains, num_hops
    bos = np.array([tokenizer.bos_id], np.int32)
    self._head = np.concatenate([bos] + ([_ids(tokenizer, VT_PREAMBLE), self._newline]
                                         if self.preamble else []))
    # the widest name and value of fixed probes ("AAAAA" and "99999" first: with a tokenizer
    # that gives every name, or every value, the same width, min_length is exact)
    probes = ["A" * VT_NAME_LETTERS] + variable_names(np.random.default_rng(89), 64)
    self._widest_name = widest(probes, lambda n: len(_ids(tokenizer, f"VAR {n} = VAR {n}")))
    self._widest_vt_value = widest(probe_numbers(VT_VALUE_DIGITS), lambda v: len(
        self._statements([self._widest_name], v)[0]) + len(self._question(v)))

  def _statements(self, names: Sequence[str], value: str) -> list[np.ndarray]:
    texts = [VT_VALUE_STATEMENT.format(name=names[0], value=value)] + [
        VT_ALIAS_STATEMENT.format(name=n, previous=p) for p, n in zip(names, names[1:])]
    return [np.concatenate([_ids(self.tokenizer, t), self._newline]) for t in texts]

  def _question(self, value: str) -> np.ndarray:
    return np.concatenate([self._newline, _ids(self.tokenizer, VT_QUESTION.format(
        value=value, count=self.num_hops + 1))])

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack, every name and value as wide as the widest probe
    (exact when names and values have fixed widths in tokens, as with the byte tokenizer)."""
    names = [self._widest_name] * (self.num_hops + 1)
    statements = self._statements(names, self._widest_vt_value) * self.num_chains
    return (len(self._head) + sum(map(len, statements))
            + len(self._question(self._widest_vt_value)))

  def build_chains(self, length: int, depth: float, chains: Sequence[Sequence[str]],
                   values: Sequence[str], start: int, depths: Sequence[Sequence[float]]
                   ) -> RetrievalPrompt:
    """A prompt of exactly `length` tokens asking for the variables of `chains[0]`.

    Args:
      length: prompt length, tokens, BOS included.
      depth: depth in [0, 1] of the queried chain's first statement (snapped).
      chains: num_chains lists of num_hops + 1 distinct names (no name in two chains).
      values: one VT_VALUE_DIGITS-digit value per chain, the queried one differing from all.
      start: token offset in the haystack stream where the haystack begins.
      depths: per chain, the num_hops + 1 statement depths in [0, 1], non-decreasing (the
        queried chain's first is replaced by `depth`).

    Returns:
      A RetrievalPrompt: answers = chains[0], answer = the names joined by spaces, key = the
      queried value, needle_start/end the first statement's span.

    Raises:
      ValueError: wrong counts, a repeated name, a bad value, a depth outside [0, 1], or a
        length too short for the statements.
    """
    h, c = self.num_hops + 1, self.num_chains
    if len(chains) != c or len(values) != c or len(depths) != c or any(
        len(n) != h for n in chains) or any(len(d) != h for d in depths):
      raise ValueError(f"need {c} chains of {h} names, {c} values and {c} depth lists")
    flat = [n for names in chains for n in names]
    if len(set(flat)) != len(flat):
      raise ValueError(f"variable names must be distinct; got {flat}")
    for v in values:
      self._check_value(v)
    if values[0] in values[1:]:
      raise ValueError(f"the queried value {values[0]} must differ from the others' {values[1:]}")
    depths = [[float(depth), *map(float, depths[0][1:])],
              *[list(map(float, d)) for d in depths[1:]]]
    if not all(0.0 <= d <= 1.0 for ds in depths for d in ds):
      raise ValueError(f"depths must lie in [0, 1]; got {depths}")
    statements = [self._statements(names, v) for names, v in zip(chains, values)]
    tail = self._question(values[0])
    hay_len = length - len(self._head) - sum(len(x) for st in statements for x in st) - len(tail)
    if hay_len < 0:
      raise ValueError(f"a variable_tracking prompt ({c} chains of {h} statements, preamble="
                       f"{self.preamble}) needs at least {length - hay_len} tokens; got {length}")
    hay, starts = self.haystack.window(start, hay_len)
    candidates = np.concatenate([[0], starts])
    # Each chain's statements in order: its points are non-decreasing (running maximum).
    items = []
    for ci, ds in enumerate(depths):
      points = np.maximum.accumulate([_snap(candidates, d * hay_len) for d in ds])
      items += [(int(pt), ci, j) for j, pt in enumerate(points)]
    parts, lo, first = [self._head], 0, 0
    for pt, ci, j in sorted(items):  # at a tie: the queried chain first, then statement order
      parts.append(hay[lo:pt])
      lo = pt
      if (ci, j) == (0, 0):
        first = sum(map(len, parts))
      parts.append(statements[ci][j])
    tokens = np.concatenate(parts + [hay[lo:], tail]).astype(np.int32)
    assert len(tokens) == length, (len(tokens), length)
    first_point = min(pt for pt, ci, j in items if (ci, j) == (0, 0))
    return RetrievalPrompt(tokens, " ".join(chains[0]), values[0], float(depth),
                           first_point / hay_len if hay_len else 0.0, first,
                           first + len(statements[0][0]) - len(self._newline),
                           answers=tuple(chains[0]))

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one grid cell's trial, drawn from `cell_rng(seed, "variable_tracking",
    length, depth, trial)` in this order: all names, the values (distractor chains' redrawn
    until they differ from the queried one), the haystack start (a line start), the queried
    chain's later statement depths (uniform in [depth, 1], sorted), each distractor chain's
    depths (uniform in [0, 1], sorted)."""
    rng = cell_rng(seed, "variable_tracking", length, depth, trial)
    h, c = self.num_hops + 1, self.num_chains
    names = variable_names(rng, h * c)
    chains = [names[i * h:(i + 1) * h] for i in range(c)]
    values = [str(int(rng.integers(10000, 99999)))]
    while len(values) < c:
      v = str(int(rng.integers(10000, 99999)))
      if v not in values:
        values.append(v)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    depths = [[depth, *np.sort(rng.uniform(depth, 1.0, h - 1)).tolist()]]
    depths += [np.sort(rng.random(h)).tolist() for _ in range(c - 1)]
    return self.build_chains(length, depth, chains, values, start, depths)
