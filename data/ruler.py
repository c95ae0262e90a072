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

import dataclasses
from typing import Sequence

import numpy as np

from configs.errors import ConfigError
from data.corpora import Document
from data.passkey import (KEY_ADJECTIVES, KEY_NOUNS, MAX_NEEDLE_KEYS, NEEDLE_QUESTION,
                          NEEDLE_TEMPLATE, PASSKEY_FILLER, VT_NAME_LETTERS, NeedlePrompts,
                          RetrievalPrompt, _ids, _snap, answer_rows, block_documents, cell_rng,
                          random_digits)
from data import ruler_words
from data.tokenizers import ByteTokenizer, get_tokenizer

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
    return self._assemble(length, depth, keys, values, start, distractor_depths,
                          NEEDLE_QUESTION.format(key=keys[0]), "niah_multikey")

  def _assemble(self, length: int, depth: float, keys: Sequence[str], values: Sequence[str],
                start: int, other_depths: Sequence[float], question: str, name: str,
                answers: tuple[str, ...] = ()) -> RetrievalPrompt:
    """The prompt with needle i = (keys[i], values[i]): needle 0 at `depth`, the others at
    `other_depths`, then `question`; answer = values[0] (or `answers`, scored by recall)."""
    k = len(keys)
    for v in values:
      self._check_value(v)
    depths = [float(depth), *map(float, other_depths)]
    if not all(0.0 <= d <= 1.0 for d in depths):
      raise ValueError(f"depths must lie in [0, 1]; got {depths}")
    nl = self._newline
    needles = [np.concatenate([_ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=kk, value=v)), nl])
               for kk, v in zip(keys, values)]
    tail = np.concatenate([nl, _ids(self.tokenizer, question)])
    hay_len = length - len(self._head) - sum(map(len, needles)) - len(tail)
    if hay_len < 0:
      raise ValueError(f"a {name} prompt ({k} needles, preamble={self.preamble}) needs at "
                       f"least {length - hay_len} tokens; got length {length}")
    hay, starts = self.haystack.window(start, hay_len)
    candidates = np.concatenate([[0], starts])
    points = [_snap(candidates, d * hay_len) for d in depths]
    parts, lo, needle_starts = [self._head], 0, {}  # needle index -> its offset in the prompt
    for i in sorted(range(k), key=lambda i: (points[i], i)):  # needle 0 first at a tie
      parts.append(hay[lo:points[i]])
      lo = points[i]
      needle_starts[i] = sum(map(len, parts))
      parts.append(needles[i])
    tokens = np.concatenate(parts + [hay[lo:], tail]).astype(np.int32)
    assert len(tokens) == length, (len(tokens), length)
    others = tuple((keys[i], values[i], needle_starts[i]) for i in needle_starts if i != 0)
    return RetrievalPrompt(tokens, " ".join(answers) if answers else values[0], keys[0],
                           float(depth), points[0] / hay_len if hay_len else 0.0,
                           needle_starts[0], needle_starts[0] + len(needles[0]) - len(nl),
                           () if answers else others, answers)

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


MULTI_QUESTION = ("What are all the special magic numbers for {keys} mentioned in the provided "
                  "text? The special magic numbers for {keys} mentioned in the provided text are")
MULTI_MODES = ("niah_multivalue", "niah_multiquery")


def key_list(keys: Sequence[str]) -> str:
  """RULER's query of several keys: "a, b, and c" (one key: "a"; two: "a, and b")."""
  return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + ", and " + keys[-1]


class MultiNeedlePrompts(MultiKeyNeedlePrompts):
  """RULER's niah_multivalue and niah_multiquery (Hsieh et al., arXiv 2404.06654, Section 3.1):
  `count` needles whose values all make the answer, scored by recall of every value (RULER's
  string_match_all, eval/needle.py `recall_all`).

    niah_multivalue  `count` needles of ONE key with distinct values; the question
                     (MULTI_QUESTION) asks for all numbers of that key.
    niah_multiquery  `count` needles of distinct keys and values; the question asks for all
                     numbers of all `count` keys at once.

  Needle 0 sits at the grid's depth, the others at the unit starts nearest to independent
  uniform depths (as niah_multikey's distractors). The haystack is held-out text of eval.split,
  as for needle and niah_multikey (RULER also offers noise and essays).

  Args:
    tokenizer, docs, preamble, value_digits: as `MultiKeyNeedlePrompts`.
    mode: "niah_multivalue" or "niah_multiquery".
    count: needles per prompt, in [2, MAX_NEEDLE_KEYS] (RULER: 4).

  Raises:
    ValueError: an unknown mode or a count outside [2, MAX_NEEDLE_KEYS].
  """

  def __init__(self, tokenizer: ByteTokenizer, docs: Sequence[Document], *, mode: str,
               count: int = 4, preamble: bool = True, value_digits: int = 7):
    if mode not in MULTI_MODES:
      raise ValueError(f"mode must be one of {MULTI_MODES}; got {mode!r}")
    super().__init__(tokenizer, docs, num_keys=count, preamble=preamble,
                     value_digits=value_digits)
    self.mode = mode

  def _question(self, keys: Sequence[str]) -> str:
    return MULTI_QUESTION.format(keys=key_list(keys if self.mode == "niah_multiquery"
                                               else keys[:1]))

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack for the longest keys."""
    longest = max(KEYS, key=self._needle_len)
    nl = len(self._newline)
    needles = self.num_keys * (self._needle_len(longest) + nl)
    asked = [longest] * (self.num_keys if self.mode == "niah_multiquery" else 1)
    return len(self._head) + needles + nl + len(_ids(self.tokenizer, self._question(asked)))

  def build_values(self, length: int, depth: float, keys: Sequence[str], values: Sequence[str],
                   start: int, other_depths: Sequence[float]) -> RetrievalPrompt:
    """A prompt of exactly `length` tokens asking for every value.

    Args:
      length: prompt length, tokens, BOS included.
      depth: needle 0's depth in [0, 1] (snapped; the result's `actual_depth`).
      keys: `count` keys: one key repeated (multivalue) or distinct keys (multiquery).
      values: `count` distinct values of `value_digits` digits.
      start: token offset in the haystack stream where the haystack begins.
      other_depths: count - 1 depths in [0, 1] of the other needles.

    Returns:
      A RetrievalPrompt with answers = values (in needle order), key = keys[0].

    Raises:
      ValueError: wrong counts, keys that do not fit the mode, repeated values, bad depths or a
        length too short.
    """
    k = self.num_keys
    if len(keys) != k or len(values) != k or len(other_depths) != k - 1:
      raise ValueError(f"need {k} keys and values and {k - 1} other depths")
    distinct = len(set(keys))
    if distinct != (k if self.mode == "niah_multiquery" else 1):
      need = "distinct keys" if self.mode == "niah_multiquery" else "one key repeated"
      raise ValueError(f"{self.mode} needs {need}; got {list(keys)}")
    if len(set(values)) != k:
      raise ValueError(f"values must be distinct; got {list(values)}")
    return self._assemble(length, depth, keys, values, start, other_depths,
                          self._question(keys), self.mode, answers=tuple(values))

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one grid cell's trial, drawn from `cell_rng(seed, mode, length, depth,
    trial)`: the keys (one, or `count` distinct), `count` distinct values, the haystack start (a
    line start), the other needles' depths."""
    rng = cell_rng(seed, self.mode, length, depth, trial)
    order = rng.permutation(len(KEYS))
    keys = ([KEYS[i] for i in order[:self.num_keys]] if self.mode == "niah_multiquery"
            else [KEYS[order[0]]] * self.num_keys)
    values: list[str] = []
    while len(values) < self.num_keys:
      v = random_digits(rng, self.value_digits)
      if v not in values:
        values.append(v)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    return self.build_values(length, depth, keys, values, start,
                             rng.random(self.num_keys - 1).tolist())


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

  def _statements(self, names: Sequence[str], value: str) -> list[np.ndarray]:
    texts = [VT_VALUE_STATEMENT.format(name=names[0], value=value)] + [
        VT_ALIAS_STATEMENT.format(name=n, previous=p) for p, n in zip(names, names[1:])]
    return [np.concatenate([_ids(self.tokenizer, t), self._newline]) for t in texts]

  def _question(self, value: str) -> np.ndarray:
    return np.concatenate([self._newline, _ids(self.tokenizer, VT_QUESTION.format(
        value=value, count=self.num_hops + 1))])

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack (names and values have fixed widths)."""
    names = ["A" * VT_NAME_LETTERS] * (self.num_hops + 1)
    statements = self._statements(names, "9" * VT_VALUE_DIGITS) * self.num_chains
    return (len(self._head) + sum(map(len, statements))
            + len(self._question("9" * VT_VALUE_DIGITS)))

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


# ---------------------------------------------------------------------------- builders by suite

# RULER's noise haystack ("noise" in its niah and vt configs): the passkey filler's sentences.
NOISE_HAYSTACK = " ".join(PASSKEY_FILLER) + "\n"
MULTI_COUNT_FIELD = {"niah_multivalue": "num_values", "niah_multiquery": "num_queries"}
BUILDER_SUITES = ("needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
                  "variable_tracking", *ruler_words.SUITES)


def uses_noise(section) -> bool:
  """True when a suite's section (eval.<suite>) asks for the noise haystack."""
  return section.get("haystack", "text") == "noise"


def builder(suite: str, section, tokenizer: ByteTokenizer, docs: Sequence[Document]):
  """The prompt builder of a haystack suite with its format fields.

  Args:
    suite: one of BUILDER_SUITES.
    section: its settings (eval.<suite>: preamble, value_digits, num_keys / num_values /
      num_queries, num_chains / num_hops, haystack).
    tokenizer: the tokenizer.
    docs: the haystack's documents (ignored with haystack = "noise").

  Raises:
    ValueError: an unknown suite or a bad field (the builders' own checks).
  """
  if uses_noise(section):
    docs = [Document("noise", NOISE_HAYSTACK.encode())]
  n = section
  if suite == "needle":
    prompts = NeedlePrompts(tokenizer, docs, preamble=n.preamble, value_digits=n.value_digits)
  elif suite == "niah_multikey":
    prompts = MultiKeyNeedlePrompts(tokenizer, docs, num_keys=n.num_keys, preamble=n.preamble,
                                    value_digits=n.value_digits)
  elif suite in MULTI_COUNT_FIELD:
    prompts = MultiNeedlePrompts(tokenizer, docs, mode=suite, count=n[MULTI_COUNT_FIELD[suite]],
                                 preamble=n.preamble, value_digits=n.value_digits)
  elif suite == "variable_tracking":
    prompts = VariableTrackingPrompts(tokenizer, docs, num_chains=n.num_chains,
                                      num_hops=n.num_hops, preamble=n.preamble)
  elif suite in ruler_words.SUITES:  # no haystack: the word list is the context
    prompts = ruler_words.builder(suite, section, tokenizer)
  else:
    raise ValueError(f"suite must be one of {BUILDER_SUITES}; got {suite!r}")
  return _with_fewshot(prompts, suite, section, tokenizer)


def _with_fewshot(prompts, suite: str, section, tokenizer: ByteTokenizer):
  """`prompts`, or FewShotPrompts over them when eval.<suite>.fewshot > 0."""
  shots = int(section.get("fewshot", 0))
  return FewShotPrompts(prompts, suite, tokenizer, shots) if shots else prompts


FEWSHOT_SEED = 1_000_033  # the demonstrations' seed offset, apart from the prompts' own


class FewShotPrompts:
  """Prompts of any builder preceded by `shots` solved demonstrations of the same format (RULER's
  few-shot examples for base models: the task template filled in, with its answer, before the
  real prompt; its cwe and vt use one).

  Layout, exactly `length` tokens::

    BOS demo_1 answer_1 "\n" ... demo_s answer_s "\n" prompt (its BOS dropped)

  Demonstration i of a cell is `prompts.cell(prompts.min_length, 0.5, trial, seed +
  FEWSHOT_SEED + i)` (the shortest prompt of the format, so no haystack, with other keys, values
  or words) followed by its answer (`answer_text`) and a newline; the prompt is
  `prompts.cell(length - D, depth, trial, seed)` with D the demonstrations' tokens. The answer
  spans (needle_start/end, distractors) are shifted by D; actual_depth stays the depth inside
  the prompt's own haystack.

  Args:
    prompts: a builder (cell, min_length; other attributes are forwarded).
    suite: its suite (for the answers' format).
    tokenizer: the tokenizer.
    shots: demonstrations, >= 1.

  Raises:
    ValueError: shots < 1.
  """

  def __init__(self, prompts, suite: str, tokenizer: ByteTokenizer, shots: int):
    if not isinstance(shots, int) or isinstance(shots, bool) or shots < 1:
      raise ValueError(f"shots must be an integer >= 1; got {shots!r}")
    self.prompts, self.suite, self.tokenizer, self.shots = prompts, suite, tokenizer, shots
    self._newline = _ids(tokenizer, "\n")
    self._demo_len = len(self._demo(0, 0, 0))

  def __getattr__(self, name):  # haystack, preamble, ... of the wrapped builder
    return getattr(self.prompts, name)

  def _demo(self, trial: int, seed: int, i: int) -> np.ndarray:
    demo = self.prompts.cell(self.prompts.min_length, 0.5, trial, seed + FEWSHOT_SEED + i)
    return np.concatenate([demo.tokens[1:], _ids(self.tokenizer, answer_text(demo, self.suite)),
                           self._newline])

  @property
  def min_length(self) -> int:
    """The wrapped builder's min_length plus the demonstrations' tokens."""
    return self.prompts.min_length + self.shots * self._demo_len

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one cell's trial with its demonstrations first (class docstring).

    Raises:
      ValueError: a length below min_length.
    """
    demos = [self._demo(trial, seed, i) for i in range(self.shots)]
    shift = sum(map(len, demos))
    if length - shift < self.prompts.min_length:
      raise ValueError(f"a {self.suite} prompt with {self.shots} demonstration(s) needs at "
                       f"least {self.min_length} tokens; got length {length}")
    inner = self.prompts.cell(length - shift, depth, trial, seed)
    tokens = np.concatenate([inner.tokens[:1], *demos, inner.tokens[1:]]).astype(np.int32)
    return dataclasses.replace(
        inner, tokens=tokens, needle_start=inner.needle_start + shift,
        needle_end=inner.needle_end + shift,
        distractors=tuple((k, v, start + shift) for k, v, start in inner.distractors))


def answer_text(prompt: RetrievalPrompt, suite: str = "") -> str:
  """What follows a prompt of `suite` in a training document: " v." for one number, " a, b, and
  c." for several values (the multi-needle suites), "A, B, C" for variable names (variable
  tracking, whose answer prefix already ends with "they are: "), the word suites' answers as
  data/ruler_words.py `answer_text` writes them."""
  if suite in ruler_words.SUITES:
    return ruler_words.answer_text(prompt, suite)
  if not prompt.answers:
    return f" {prompt.answer}."
  if prompt.answers[0].isdigit():
    return " " + key_list(list(prompt.answers)) + "."
  return ", ".join(prompt.answers)


# ---------------------------------------------------------------------------- the training mix


def mix_format(config, tokenizer: ByteTokenizer, docs: Sequence[Document]):
  """(builder over `docs`, answer tokens, shortest document in tokens) of the training mix
  `data.retrieval_mix` (the format of eval.<suite>, so training and evaluation prompts agree).

  Raises:
    ValueError: a document longer than data.train_len even without haystack.
  """
  suite = config.data.retrieval_mix.suite
  prompts = builder(suite, config.eval[suite], tokenizer, docs)
  answer_len = len(_ids(tokenizer, answer_text(prompts.cell(prompts.min_length, 0.0, 0, 0),
                                                suite)))
  n_min = prompts.min_length + answer_len
  if n_min > config.data.train_len:
    raise ValueError(f"a {suite} training document needs at least {n_min} tokens; "
                     f"data.train_len is {config.data.train_len}")
  return prompts, answer_len, n_min


def training_documents(train_docs: Sequence[Document], config,
                       tokenizer: ByteTokenizer) -> list[Document]:
  """`train_docs` followed by the retrieval prompts of `data.retrieval_mix` (answer included).

  With data.retrieval_mix.fraction = f > 0, about f of the training windows are blocks of
  prompts of the suite data.retrieval_mix.suite, in its evaluation format (eval.<suite>: preamble,
  value digits, needle counts, haystack), each followed by its answer (`answer_text`), laid out
  as the passkey documents are (data/passkey.py `block_documents`: whole blocks of train_len
  tokens, a text snippet at each block's end). The haystack is the training split itself (or
  RULER's noise with eval.<suite>.haystack = "noise"), never held-out text. A document's length
  is uniform in [shortest, tokens left in its block], its depth uniform in [0, 1], its keys and
  values from `cell_rng(data.retrieval_mix.seed + 1_000_003, suite, length, depth, trial)` with
  a random trial, so no training prompt is an evaluation prompt. Only training data goes
  through it.

  Raises:
    ValueError: see `mix_format` and `block_documents`.
  """
  mix = config.data.get("retrieval_mix")
  if mix is None or mix.fraction == 0:
    return list(train_docs)
  prompts, answer_len, n_min = mix_format(config, tokenizer, train_docs)
  seed = int(mix.seed) + 1_000_003  # apart from the evaluation seeds

  def draw(rng, left):
    n = int(rng.integers(n_min, left + 1))
    depth, trial = float(rng.random()), int(rng.integers(2 ** 31))
    prompt = prompts.cell(n - answer_len, depth, trial, seed)
    return (tokenizer.decode_bytes(prompt.tokens[1:]) + answer_text(prompt, mix.suite).encode(),
            prompt.length + answer_len)

  return list(train_docs) + block_documents(
      train_docs, tokenizer, train_len=config.data.train_len, fraction=float(mix.fraction),
      rng=np.random.default_rng([int(mix.seed), 13]), n_min=n_min, draw=draw, name=mix.suite)


def answer_windows(config, tokenizer: ByteTokenizer, docs: Sequence[Document], *, count: int
                   ) -> dict[str, np.ndarray]:
  """Held-out prompts of the training mix `data.retrieval_mix`, scored on their answers only: is
  the retrieval learned yet? train.py logs the weighted mean NLL as `val_retrieval_answer_nll`
  (nats per answer token) at each evaluation of a run with data.retrieval_mix.fraction > 0, as
  it logs `val_passkey_answer_nll` for a passkey run (data/passkey.py `answer_windows`).

  `count` prompts drawn like the training ones (`training_documents`: length uniform in
  [shortest, train_len], depth uniform in [0, 1]), one per row, padded to train_len, with
  their haystack from `docs` (the validation split: held-out text) and their keys and values
  from `cell_rng(data.retrieval_mix.seed + 2_000_003, ...)`, a seed of neither the training
  prompts nor the evaluation suites. Every token of the answer text (`answer_text`: the values
  with their separators, or the variable names) has weight 1, the rest 0.

  Args:
    config: the experiment config (data.retrieval_mix, data.train_len, eval.<suite>).
    tokenizer: the byte tokenizer.
    docs: the haystack documents (held-out text).
    count: prompts (rows), >= 1.

  Returns:
    dict of [count, train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on the
    prompt and answer, 0 on padding) and float32 weights (1 on the answer's targets).

  Raises:
    ValueError: count < 1, or see `mix_format`.
  """
  if count < 1:
    raise ValueError(f"count must be >= 1; got {count}")
  mix, train_len = config.data.retrieval_mix, config.data.train_len
  prompts, answer_len, n_min = mix_format(config, tokenizer, docs)
  seed = int(mix.seed) + 2_000_003  # apart from the training prompts and the evaluation seeds
  rng = np.random.default_rng([int(mix.seed), 17])
  rows = []
  for row in range(count):
    n = int(rng.integers(n_min, train_len + 1))
    prompt = prompts.cell(n - answer_len, float(rng.random()), row, seed)
    answer = _ids(tokenizer, answer_text(prompt, mix.suite))
    rows.append((prompt.tokens, answer, 0, len(answer)))
  return answer_rows(tokenizer, train_len, rows)


def check_mix(config) -> None:
  """Checks data.retrieval_mix (skipped when an older config lacks it).

  Raises:
    ConfigError: fraction outside [0, 1); a fraction > 0 without a suite of BUILDER_SUITES; a
      seed that is not an integer >= 0; a mix with an algorithmic task, with
      data.passkey.fraction > 0 (one synthetic format at a time) or with a prepared corpus; or
      a document that cannot fit data.train_len.
  """
  mix = config.data.get("retrieval_mix")
  if mix is None:
    return
  f = mix.fraction
  if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
    raise ConfigError(f"data.retrieval_mix.fraction must lie in [0, 1) (share of training "
                      f"windows; 0 = none); got {f!r}")
  if not isinstance(mix.seed, int) or isinstance(mix.seed, bool) or mix.seed < 0:
    raise ConfigError(f"data.retrieval_mix.seed must be an integer >= 0; got {mix.seed!r}")
  if f == 0:
    return
  if mix.suite not in BUILDER_SUITES:
    raise ConfigError(f"data.retrieval_mix.suite={mix.suite!r} must be one of "
                      f"{list(BUILDER_SUITES)} when data.retrieval_mix.fraction > 0")
  if config.data.task.name:
    raise ConfigError(f"data.retrieval_mix.fraction={f} mixes retrieval prompts into text "
                      f"training; it must be 0 with an algorithmic task "
                      f"(data.task.name={config.data.task.name!r})")
  if config.data.passkey.fraction > 0:
    raise ConfigError("data.retrieval_mix.fraction > 0 and data.passkey.fraction > 0: mix one "
                      "synthetic format at a time (set one of them to 0)")
  if config.data.source == "array_record":
    raise ConfigError("data.retrieval_mix needs the training text as documents; a prepared "
                      "corpus (data.source='array_record') is read as shards: set "
                      "data.retrieval_mix.fraction=0 or data.source='text_files'")
  noise = [Document("noise", NOISE_HAYSTACK.encode())]  # min_length does not depend on it
  try:
    mix_format(config, get_tokenizer(config.data.tokenizer), noise)
  except ValueError as e:
    raise ConfigError(f"data.retrieval_mix: {e} (raise data.train_len, or set "
                      f"eval.{mix.suite}.preamble=False)") from None
