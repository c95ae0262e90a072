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

Also here: RULER's niah_multivalue and niah_multiquery (`MultiNeedlePrompts`), the prompt
builder of every haystack suite by name (`builder`) and few-shot demonstrations
(`FewShotPrompts`, `answer_text`). Variable tracking is in data/variable_tracking.py, the
training mix of these formats in data/retrieval_mix.py.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from data.corpora import Document
from data.passkey import (KEY_ADJECTIVES, KEY_NOUNS, NEEDLE_QUESTION, NEEDLE_TEMPLATE,
                          PASSKEY_FILLER, NeedlePrompts)
from data.retrieval_prompt import (MAX_NEEDLE_KEYS, RetrievalPrompt, _ids, _snap, cell_rng,
                                   random_value)
from data import ruler_words
from data.tokenizers import ByteTokenizer
from data.variable_tracking import VariableTrackingPrompts

KEYS = tuple(f"{a}-{n}" for a in KEY_ADJECTIVES for n in KEY_NOUNS)  # 576 distinct keys
# With the needle haystack (niah_multikey_2), a prompt's needles use TARGET_KEYS and the haystack's
# lines HAYSTACK_KEYS, so that no haystack line asks the target's key.
TARGET_KEYS, HAYSTACK_KEYS = KEYS[0::2], KEYS[1::2]


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
               preamble: bool = True, value_digits: int = 7, value_kind: str = "digits",
               keys: Sequence[str] = KEYS):
    if (not isinstance(num_keys, int) or isinstance(num_keys, bool)
        or not 2 <= num_keys <= MAX_NEEDLE_KEYS):
      raise ValueError(f"num_keys must be an integer in [2, {MAX_NEEDLE_KEYS}]; got {num_keys!r}")
    super().__init__(tokenizer, docs, preamble=preamble, value_digits=value_digits,
                     value_kind=value_kind)
    self.num_keys = num_keys
    self.keys = tuple(keys)  # the keys a prompt's needles draw from
    self._longest_needle = max(map(self._needle_len, KEYS))

  def _needle_len(self, key: str) -> int:
    return len(_ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=key, value=self._widest_value)))

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
    keys = [self.keys[i] for i in rng.permutation(len(self.keys))[:self.num_keys]]
    values = [random_value(rng, self.value_kind, self.value_digits)]
    while len(values) < self.num_keys:
      v = random_value(rng, self.value_kind, self.value_digits)
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
               count: int = 4, preamble: bool = True, value_digits: int = 7,
               value_kind: str = "digits"):
    if mode not in MULTI_MODES:
      raise ValueError(f"mode must be one of {MULTI_MODES}; got {mode!r}")
    super().__init__(tokenizer, docs, num_keys=count, preamble=preamble,
                     value_digits=value_digits, value_kind=value_kind)
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
      v = random_value(rng, self.value_kind, self.value_digits)
      if v not in values:
        values.append(v)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    return self.build_values(length, depth, keys, values, start,
                             rng.random(self.num_keys - 1).tolist())


# ---------------------------------------------------------------------------- builders by suite

# RULER's noise haystack ("noise" in its niah and vt configs): the passkey filler's sentences.
NOISE_HAYSTACK = " ".join(PASSKEY_FILLER) + "\n"
MULTI_COUNT_FIELD = {"niah_multivalue": "num_values", "niah_multiquery": "num_queries"}
BUILDER_SUITES = ("needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
                  "variable_tracking", *ruler_words.SUITES)


HAYSTACKS = ("text", "noise", "needles")  # eval.<suite>.haystack ("needles": niah_multikey only)
NEEDLE_HAYSTACK_LINES = 4096  # lines of the needle haystack (about 60 tokens each with bytes)
NEEDLE_HAYSTACK_SEED = 20_240_406  # its keys and values: one fixed document for every prompt


def uses_noise(section) -> bool:
  """True when a suite's section (eval.<suite>) asks for a synthetic haystack (RULER's noise
  sentences, or its needle haystack): no held-out text is read."""
  return section.get("haystack", "text") in ("noise", "needles")


def needle_haystack(value_digits: int, value_kind: str = "digits") -> Document:
  """RULER's niah_multikey_2 haystack (Hsieh et al., arXiv 2404.06654, Sec. 3.1: "the haystack
  is filled with distractor needles"): NEEDLE_HAYSTACK_LINES needle lines ("One of the special
  magic numbers for {key} is: {value}.") with keys from HAYSTACK_KEYS (every other key, so that
  no haystack line shares a key with a prompt's needles, drawn from TARGET_KEYS) and random
  values, one fixed document (NEEDLE_HAYSTACK_SEED). The prompt's own needles are inserted into
  it as into text, so every distractor asks a different key than the target."""
  rng = np.random.default_rng(NEEDLE_HAYSTACK_SEED)
  lines = [NEEDLE_TEMPLATE.format(key=HAYSTACK_KEYS[int(rng.integers(len(HAYSTACK_KEYS)))],
                                  value=random_value(rng, value_kind, value_digits))
           for _ in range(NEEDLE_HAYSTACK_LINES)]
  return Document("needles", ("\n".join(lines) + "\n").encode())


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
  n = section
  if n.get("haystack", "text") == "needles":
    if suite != "niah_multikey":
      raise ValueError(f"haystack='needles' is RULER's niah_multikey_2 and applies to "
                       f"niah_multikey only; got suite {suite!r}")
    docs = [needle_haystack(n.value_digits, n.get("value_kind", "digits"))]
  elif uses_noise(section):
    docs = [Document("noise", NOISE_HAYSTACK.encode())]
  if suite == "needle":
    prompts = NeedlePrompts(tokenizer, docs, preamble=n.preamble, value_digits=n.value_digits,
                            value_kind=n.get("value_kind", "digits"))
  elif suite == "niah_multikey":
    prompts = MultiKeyNeedlePrompts(tokenizer, docs, num_keys=n.num_keys, preamble=n.preamble,
                                    value_digits=n.value_digits,
                                    value_kind=n.get("value_kind", "digits"),
                                    keys=TARGET_KEYS if n.get("haystack") == "needles" else KEYS)
  elif suite in MULTI_COUNT_FIELD:
    prompts = MultiNeedlePrompts(tokenizer, docs, mode=suite, count=n[MULTI_COUNT_FIELD[suite]],
                                 preamble=n.preamble, value_digits=n.value_digits,
                                 value_kind=n.get("value_kind", "digits"))
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
    # An upper bound of a demonstration's tokens: the prompt is min_length tokens, and every
    # demonstration's answer has the same bytes (fixed digits, letters), each token at least one
    # byte (exact with the byte tokenizer; BPE answers that merge digits take fewer tokens).
    answer = answer_text(prompts.cell(prompts.min_length, 0.5, 0, FEWSHOT_SEED), suite)
    self._demo_len = prompts.min_length - 1 + len(answer.encode("utf-8")) + len(self._newline)

  def __getattr__(self, name):  # haystack, preamble, ... of the wrapped builder
    return getattr(self.prompts, name)

  def _demo(self, trial: int, seed: int, i: int) -> np.ndarray:
    demo = self.prompts.cell(self.prompts.min_length, 0.5, trial, seed + FEWSHOT_SEED + i)
    return np.concatenate([demo.tokens[1:], _ids(self.tokenizer, answer_text(demo, self.suite)),
                           self._newline])

  @property
  def min_length(self) -> int:
    """The wrapped builder's min_length plus the demonstrations' tokens (an upper bound of them:
    the answers' bytes; exact with the byte tokenizer)."""
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
