"""Passkey and needle retrieval prompts of an exact token length.

Two prompt families. Each prompt has exactly `length` tokens, BOS first; the needle sits at a
requested depth (the fraction of the filler or haystack tokens placed before it), snapped to the
nearest sentence or line boundary, and the depth actually used is recorded. Every part is
tokenized on its own, without special tokens, so the needle starts and ends at token boundaries.
A prompt depends only on (seed, length, depth, trial) and the format fields (and, for the needle,
on the held-out documents): it is byte-identical for every positional scheme.

passkey  The prompt of Mohtashami & Jaggi (Landmark Attention, arXiv 2305.16300, Appendix; their
         `llama/run_test.py`), the one Position Interpolation uses (Chen et al., arXiv 2306.15595,
         Section 3.3 "Measuring effective context window size through passkey retrieval",
         Figure 3: "a random 5-digit number"). Lines joined by "\\n" as in their code:

           [PASSKEY_PREAMBLE "\\n"] filler[:b] "\\n" needle "\\n" filler[:F - b] "\\n" question

         where filler = the five PASSKEY_FILLER sentences repeated and joined by single spaces
         (their `" ".join([garbage] * n)`), F = the filler tokens that make the prompt exactly
         `length` tokens, and b = the filler tokens before the needle: a sentence end of the
         filler (or 0) nearest to depth * F. As in their code the part after the needle restarts
         the filler, and its end is the only place a sentence may be cut. The pass key is a random
         number of `key_digits` digits with a non-zero first digit (PI: 5 digits; their code draws
         1..50000).

needle   The single-needle "niah" task of RULER (Hsieh et al., arXiv 2404.06654, Section 3.1,
         key-value needle): the needle "One of the special magic numbers for {key} is: {value}."
         is inserted, as its own line, into real held-out text (the haystack: the given documents
         concatenated, starting at a seeded random line), at the line or sentence start nearest to
         depth * F; keys are RULER-style adjective-noun words, values `value_digits`-digit numbers
         (RULER: 7). Layout:

           [NEEDLE_PREAMBLE "\\n"] haystack[:b] needle "\\n" haystack[b:F] "\\n" question

         The question asks for the key in the singular: RULER's template asks "What are all the
         special magic numbers for {key} ...?" and prefills the answer with "The special magic
         number for {key} mentioned in the provided text is" for one needle; here both form one
         question (NEEDLE_QUESTION).

The prompts' data model and per-cell generator are in data/retrieval_prompt.py, the passkey
training documents in data/passkey_training.py and the checks of the retrieval fields in
data/retrieval_checks.py.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from data.corpora import Document
from data.retrieval_prompt import (MAX_DIGITS, UUID_LENGTH, VALUE_KINDS, RetrievalPrompt, _ids,
                                   _snap, cell_rng, probe_numbers, probe_values, random_digits,
                                   random_value, widest)
from data.tokenizers import ByteTokenizer

PASSKEY_PREAMBLE = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
                    "memorize them. I will quiz you about the important information there.")
PASSKEY_FILLER = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                  "There and back again.")
PASSKEY_NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
PASSKEY_QUESTION = "What is the pass key? The pass key is"

NEEDLE_PREAMBLE = ("Some special magic numbers are hidden within the following text. Make sure to "
                   "memorize it. I will quiz you about the numbers afterwards.")
NEEDLE_TEMPLATE = "One of the special magic numbers for {key} is: {value}."
NEEDLE_QUESTION = ("What is the special magic number for {key} mentioned in the provided text? "
                   "The special magic number for {key} mentioned in the provided text is")

# RULER draws needle keys as "adjective-noun" word pairs (wonderwords lists); these 24 x 24 pairs
# play that role without a dependency.
KEY_ADJECTIVES = ("amber", "brave", "calm", "crimson", "eager", "fancy", "gentle", "golden",
                  "happy", "icy", "jolly", "kind", "lively", "mellow", "nimble", "odd", "proud",
                  "quiet", "rapid", "silver", "tidy", "vast", "witty", "young")
KEY_NOUNS = ("apple", "badger", "cactus", "canyon", "dolphin", "engine", "falcon", "garden",
             "harbor", "island", "jacket", "kettle", "lantern", "meadow", "orchard", "pepper",
             "quarry", "river", "saddle", "tiger", "umbrella", "violin", "walnut", "zebra")


class PasskeyPrompts:
  """Builds passkey prompts (Mohtashami & Jaggi, arXiv 2305.16300; PI, arXiv 2306.15595, Fig. 3).

  See the module docstring for the layout. The encoded parts are cached, so building many prompts
  (the training documents) is cheap.

  Args:
    tokenizer: the tokenizer (ids must not include special tokens for plain text).
    preamble: start with PASSKEY_PREAMBLE and a newline (the paper's prompt; 148 bytes).
    key_digits: digits of the pass key, in [1, MAX_DIGITS] (PI: 5).

  Raises:
    ValueError: key_digits outside [1, MAX_DIGITS].
  """

  def __init__(self, tokenizer: ByteTokenizer, *, preamble: bool = True, key_digits: int = 5):
    if not isinstance(key_digits, int) or not 1 <= key_digits <= MAX_DIGITS:
      raise ValueError(f"key_digits must be an integer in [1, {MAX_DIGITS}]; got {key_digits!r}")
    self.tokenizer = tokenizer
    self.preamble = bool(preamble)
    self.key_digits = key_digits
    self._bos = np.array([tokenizer.bos_id], np.int32)
    self._newline = _ids(tokenizer, "\n")
    self._head = np.concatenate([self._bos] + ([_ids(tokenizer, PASSKEY_PREAMBLE), self._newline]
                                               if self.preamble else []))
    self._question = _ids(tokenizer, PASSKEY_QUESTION)
    pieces, ends, offset = [], [], 0
    space = _ids(tokenizer, " ")
    for sentence in PASSKEY_FILLER:
      ids = _ids(tokenizer, sentence)
      pieces += [ids, space]
      offset += len(ids)
      ends.append(offset)
      offset += len(space)
    self._cycle = np.concatenate(pieces)  # the five sentences and their joining spaces
    self._cycle_ends = np.array(ends, np.int64)  # offsets just after each sentence's period
    self._filler = self._cycle
    self._filler_ends = self._cycle_ends
    # the key whose needle is widest (all keys are, unless the tokenizer merges digits)
    self._widest_key = widest(probe_numbers(key_digits), lambda k: len(self.needle_ids(k)))

  def needle_ids(self, key: str) -> np.ndarray:
    """int32 [n] tokens of the needle line for `key` (no newline)."""
    return _ids(self.tokenizer, PASSKEY_NEEDLE.format(key=key))

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no filler (BOS, preamble, needle, question, newlines), for the
    widest of the probe keys (`probe_numbers`: exact when every key is equally wide)."""
    return (len(self._head) + len(self.needle_ids(self._widest_key)) + len(self._question)
            + 3 * len(self._newline))

  def _filler_prefix(self, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first n filler tokens and the sentence-end offsets <= n."""
    if len(self._filler) < n:
      reps = -(-n // len(self._cycle)) + 1
      self._filler = np.tile(self._cycle, reps)
      self._filler_ends = (self._cycle_ends[None, :]
                           + len(self._cycle) * np.arange(reps)[:, None]).ravel()
    return self._filler[:n], self._filler_ends[self._filler_ends <= n]

  def build(self, length: int, depth: float, key: str) -> RetrievalPrompt:
    """A passkey prompt of exactly `length` tokens with `key`'s needle at `depth`.

    Args:
      length: prompt length, tokens, BOS included (>= `min_length`).
      depth: fraction in [0, 1] of the filler tokens to place before the needle; snapped to the
        nearest sentence end of the filler (or 0); the result's `actual_depth` is the value used.
      key: the pass key, `key_digits` decimal digits.

    Returns:
      A RetrievalPrompt with int32 [length] tokens and answer = key.

    Raises:
      ValueError: length < min_length, depth outside [0, 1], or a key that is not `key_digits`
        digits.
    """
    if not (isinstance(key, str) and len(key) == self.key_digits and key.isascii() and key.isdigit()):
      raise ValueError(f"key must be a string of {self.key_digits} ASCII digits; got {key!r}")
    if not 0.0 <= depth <= 1.0:
      raise ValueError(f"depth must lie in [0, 1]; got {depth}")
    needle = self.needle_ids(key)
    filler_len = length - (len(self._head) + len(needle) + len(self._question)
                           + 3 * len(self._newline))  # length - min_length for the widest key
    if filler_len < 0:
      raise ValueError(f"a passkey prompt (preamble={self.preamble}, {self.key_digits}-digit key) "
                       f"needs at least {length - filler_len} tokens; got length {length}")
    filler, ends = self._filler_prefix(filler_len)
    b = _snap(np.concatenate([[0], ends]), depth * filler_len)
    nl = self._newline
    before = np.concatenate([self._head, filler[:b], nl])
    tokens = np.concatenate([before, needle, nl, filler[:filler_len - b], nl, self._question])
    assert len(tokens) == length, (len(tokens), length)
    return RetrievalPrompt(tokens.astype(np.int32), key, "", float(depth),
                           b / filler_len if filler_len else 0.0, len(before),
                           len(before) + len(needle))

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one grid cell's trial: its key is drawn from `cell_rng(seed, "passkey", ...)`.

    Raises:
      ValueError: see `build` and `cell_rng`.
    """
    rng = cell_rng(seed, "passkey", length, depth, trial)
    return self.build(length, depth, random_digits(rng, self.key_digits))


class Haystack:
  """Held-out text as one cyclic token stream cut into units at line and sentence starts.

  The documents are concatenated in the given order (a newline appended to any that lacks one).
  A unit ends after each "\\n" and after each ". ", "! " or "? "; units are tokenized one by one,
  so unit starts are token boundaries (the needle's insertion points).

  Args:
    docs: held-out documents (e.g. the validation split).
    tokenizer: the tokenizer.

  Raises:
    ValueError: no document has any text.
  """

  def __init__(self, docs: Sequence[Document], tokenizer: ByteTokenizer):
    stream = b"".join(d.data if d.data.endswith(b"\n") else d.data + b"\n" for d in docs if d.data)
    if not stream:
      raise ValueError("the needle haystack needs at least one non-empty document")
    units = [u for u in re.split(rb"(?<=\n)|(?<=[.!?] )", stream) if u]
    ids = [_ids(tokenizer, u) for u in units]
    lengths = np.array([len(x) for x in ids], np.int64)
    self.tokens = np.concatenate(ids)
    self.unit_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    # units that begin a line (the first unit, or one after a unit ending in a newline)
    after_newline = np.array([True] + [u.endswith(b"\n") for u in units[:-1]])
    self.line_starts = self.unit_starts[after_newline]

  def window(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n tokens from token offset `start` (wrapping around the end) and the unit starts in [0, n].

    Returns:
      (int32 [n] tokens, int64 sorted offsets in [0, n], relative to `start`, that begin a unit;
      0 is included when `start` begins a unit).
    """
    total = len(self.tokens)
    idx = (start + np.arange(n)) % total
    rel = (self.unit_starts - start) % total
    laps = np.arange(n // total + 1)
    starts = (rel[None, :] + total * laps[:, None]).ravel()
    return self.tokens[idx], np.unique(starts[starts <= n])


class NeedlePrompts:
  """Builds RULER-style needle prompts (Hsieh et al., arXiv 2404.06654) in real held-out text.

  See the module docstring for the layout.

  Args:
    tokenizer: the tokenizer.
    docs: held-out documents: the haystack (never training documents).
    preamble: start with NEEDLE_PREAMBLE and a newline (RULER's template).
    value_digits: digits of the needle's value, in [1, MAX_DIGITS] (RULER: 7).
    value_kind: "digits" (a `value_digits`-digit number) or "uuid" (RULER's UUID needles,
      niah_single_3 / niah_multikey_3: a version-4 UUID, scored by substring match).

  Raises:
    ValueError: value_digits outside [1, MAX_DIGITS]; an unknown value_kind; no non-empty
      document.
  """

  def __init__(self, tokenizer: ByteTokenizer, docs: Sequence[Document], *, preamble: bool = True,
               value_digits: int = 7, value_kind: str = "digits"):
    if not isinstance(value_digits, int) or not 1 <= value_digits <= MAX_DIGITS:
      raise ValueError(f"value_digits must be an integer in [1, {MAX_DIGITS}]; got {value_digits!r}")
    if value_kind not in VALUE_KINDS:
      raise ValueError(f"value_kind must be one of {VALUE_KINDS}; got {value_kind!r}")
    self.value_kind = value_kind
    self.tokenizer = tokenizer
    self.preamble = bool(preamble)
    self.value_digits = value_digits
    self.haystack = Haystack(docs, tokenizer)
    self._newline = _ids(tokenizer, "\n")
    bos = np.array([tokenizer.bos_id], np.int32)
    self._head = np.concatenate([bos] + ([_ids(tokenizer, NEEDLE_PREAMBLE), self._newline]
                                         if self.preamble else []))
    probes = probe_values(value_kind, value_digits)
    self._longest_key = max((f"{a}-{n}" for a in KEY_ADJECTIVES for n in KEY_NOUNS),
                            key=lambda k: self._fixed(k, probes[0]))
    # the widest value (all are, unless the tokenizer merges characters: `probe_values`)
    self._widest_value = widest(probes, lambda v: self._fixed(self._longest_key, v))

  def _check_value(self, value: str) -> None:
    """Raises ValueError unless `value` is a string of `value_digits` ASCII digits (or, for
    value_kind "uuid", a 36-character UUID)."""
    if self.value_kind == "uuid":
      if not (isinstance(value, str) and len(value) == UUID_LENGTH and value.count("-") == 4):
        raise ValueError(f"value must be a 36-character UUID; got {value!r}")
      return
    if not (isinstance(value, str) and len(value) == self.value_digits and value.isascii()
            and value.isdigit()):
      raise ValueError(f"value must be a string of {self.value_digits} ASCII digits; got {value!r}")

  def _fixed(self, key: str, value: str) -> int:
    needle = _ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=key, value=value))
    question = _ids(self.tokenizer, NEEDLE_QUESTION.format(key=key))
    return len(needle) + len(question) + 2 * len(self._newline)

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack for the longest key and the widest probe value
    (every trial fits from here on)."""
    return len(self._head) + self._fixed(self._longest_key, self._widest_value)

  def build(self, length: int, depth: float, key: str, value: str, start: int) -> RetrievalPrompt:
    """A needle prompt of exactly `length` tokens.

    Args:
      length: prompt length, tokens, BOS included.
      depth: fraction in [0, 1] of the haystack tokens to place before the needle; snapped to
        the nearest line or sentence start; the result's `actual_depth` is the value used.
      key: the needle's key (any text without newlines).
      value: the needle's value, `value_digits` decimal digits (the answer).
      start: token offset in the haystack stream where the haystack begins.

    Returns:
      A RetrievalPrompt with int32 [length] tokens, answer = value and key = key.

    Raises:
      ValueError: length too short for this key, depth outside [0, 1], or a bad value.
    """
    self._check_value(value)
    if not 0.0 <= depth <= 1.0:
      raise ValueError(f"depth must lie in [0, 1]; got {depth}")
    nl = self._newline
    needle = np.concatenate([_ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=key, value=value)), nl])
    tail = np.concatenate([nl, _ids(self.tokenizer, NEEDLE_QUESTION.format(key=key))])
    hay_len = length - len(self._head) - len(needle) - len(tail)
    if hay_len < 0:
      raise ValueError(f"a needle prompt (preamble={self.preamble}, key {key!r}) needs at least "
                       f"{length - hay_len} tokens; got length {length}")
    hay, starts = self.haystack.window(start, hay_len)
    b = _snap(np.concatenate([[0], starts]), depth * hay_len)
    before = np.concatenate([self._head, hay[:b]])
    tokens = np.concatenate([before, needle, hay[b:], tail])
    assert len(tokens) == length, (len(tokens), length)
    return RetrievalPrompt(tokens.astype(np.int32), value, key, float(depth),
                           b / hay_len if hay_len else 0.0, len(before),
                           len(before) + len(needle) - len(nl))

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one grid cell's trial: key, value and haystack start (a line start) are
    drawn, in that order, from `cell_rng(seed, "needle", length, depth, trial)`.

    Raises:
      ValueError: see `build` and `cell_rng`.
    """
    rng = cell_rng(seed, "needle", length, depth, trial)
    key = f"{KEY_ADJECTIVES[rng.integers(len(KEY_ADJECTIVES))]}-{KEY_NOUNS[rng.integers(len(KEY_NOUNS))]}"
    value = random_value(rng, self.value_kind, self.value_digits)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    return self.build(length, depth, key, value, start)
