"""Passkey and needle retrieval prompts of an exact token length, and passkey training documents.

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

Training documents (`training_documents`): passkey prompts of random lengths (up to
`data.train_len` tokens with the answer), random depths and keys, each followed by its answer
(" " + key + "."), so that a small model learns retrieval in distribution. They are laid out so
that every one lies wholly inside one training window (see `passkey_documents`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from configs.errors import ConfigError
from data.corpora import Document
from data.tokenizers import ByteTokenizer, get_tokenizer

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

MAX_DIGITS = 18  # keys are drawn as int64 numbers
MAX_NEEDLE_KEYS = 64  # needles per niah_multikey prompt (data/ruler.py; RULER uses 4)
# separate seed streams for the prompt families (data/ruler.py adds the multi-key needle's)
_SUITE_IDS = {"passkey": 0, "needle": 1, "niah_multikey": 2, "variable_tracking": 3,
              "niah_multivalue": 4, "niah_multiquery": 5, "common_words": 6,
              "frequent_words": 7}


@dataclasses.dataclass(frozen=True)
class RetrievalPrompt:
  """One retrieval prompt and its answer.

  Attributes:
    tokens: int32 [length] token ids, BOS first, positions 0..length-1 when fed to a model.
    answer: the digits the model must produce (the pass key or the needle's value).
    key: the needle's key word pair ("" for passkey prompts).
    depth: requested depth, fraction in [0, 1] of the filler/haystack tokens before the needle.
    actual_depth: b / F, the filler/haystack tokens before the needle over all of them (0.0 when
      F = 0), after snapping to a sentence or line boundary.
    needle_start: index in `tokens` of the needle's first token.
    needle_end: index in `tokens` one past the needle's last token.
    distractors: the other needles of a multi-key prompt (data/ruler.py), as (key, value,
      needle_start) triples in prompt order; () for passkey and single-needle prompts.
    answers: every reference a recall-all prompt asks for (variable tracking's variable names,
      data/ruler.py), scored by RULER's string_match_all (eval/needle.py `recall_all`); () for
      the digit-answer prompts, scored by exact match of `answer`.
  """

  tokens: np.ndarray
  answer: str
  key: str
  depth: float
  actual_depth: float
  needle_start: int
  needle_end: int
  distractors: tuple[tuple[str, str, int], ...] = ()
  answers: tuple[str, ...] = ()

  @property
  def length(self) -> int:
    """Prompt length, tokens (BOS included)."""
    return int(self.tokens.shape[0])


def cell_rng(seed: int, suite: str, length: int, depth: float, trial: int) -> np.random.Generator:
  """The generator of one grid cell's trial: a function of (seed, suite, length, depth, trial) only.

  Depth enters as round(depth * 1e6), so depths equal to 6 decimals give the same prompt.

  Raises:
    ValueError: unknown suite (not one of _SUITE_IDS: passkey, needle, niah_multikey,
      variable_tracking, niah_multivalue, niah_multiquery, common_words, frequent_words), or a
      negative seed/length/trial.
  """
  if suite not in _SUITE_IDS:
    raise ValueError(f"suite must be one of {sorted(_SUITE_IDS)}; got {suite!r}")
  parts = [int(seed), _SUITE_IDS[suite], int(length), int(round(float(depth) * 1_000_000)), int(trial)]
  if min(parts) < 0:
    raise ValueError(f"seed, length, depth and trial must be >= 0; got {parts}")
  return np.random.default_rng(parts)


def random_digits(rng: np.random.Generator, digits: int) -> str:
  """A uniformly random `digits`-digit decimal number with a non-zero first digit, as a string.

  Raises:
    ValueError: digits outside [1, MAX_DIGITS].
  """
  if not 1 <= digits <= MAX_DIGITS:
    raise ValueError(f"digits must lie in [1, {MAX_DIGITS}]; got {digits}")
  return str(int(rng.integers(10 ** (digits - 1), 10 ** digits)))


def _snap(candidates: np.ndarray, target: float) -> int:
  """The candidate offset nearest to `target` (ties: the smaller)."""
  return int(candidates[np.argmin(np.abs(candidates - target))])


def _ids(tokenizer: ByteTokenizer, text: str | bytes) -> np.ndarray:
  return np.asarray(tokenizer.encode(text), np.int32)


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

  def needle_ids(self, key: str) -> np.ndarray:
    """int32 [n] tokens of the needle line for `key` (no newline)."""
    return _ids(self.tokenizer, PASSKEY_NEEDLE.format(key=key))

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no filler (BOS, preamble, needle, question, newlines)."""
    return (len(self._head) + len(self.needle_ids("9" * self.key_digits)) + len(self._question)
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
    filler_len = length - self.min_length
    if filler_len < 0:
      raise ValueError(f"a passkey prompt (preamble={self.preamble}, {self.key_digits}-digit key) "
                       f"needs at least {self.min_length} tokens; got length {length}")
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

  Raises:
    ValueError: value_digits outside [1, MAX_DIGITS]; no non-empty document.
  """

  def __init__(self, tokenizer: ByteTokenizer, docs: Sequence[Document], *, preamble: bool = True,
               value_digits: int = 7):
    if not isinstance(value_digits, int) or not 1 <= value_digits <= MAX_DIGITS:
      raise ValueError(f"value_digits must be an integer in [1, {MAX_DIGITS}]; got {value_digits!r}")
    self.tokenizer = tokenizer
    self.preamble = bool(preamble)
    self.value_digits = value_digits
    self.haystack = Haystack(docs, tokenizer)
    self._newline = _ids(tokenizer, "\n")
    bos = np.array([tokenizer.bos_id], np.int32)
    self._head = np.concatenate([bos] + ([_ids(tokenizer, NEEDLE_PREAMBLE), self._newline]
                                         if self.preamble else []))
    self._longest_key = max((f"{a}-{n}" for a in KEY_ADJECTIVES for n in KEY_NOUNS),
                            key=lambda k: self._fixed(k, "9" * value_digits))

  def _check_value(self, value: str) -> None:
    """Raises ValueError unless `value` is a string of `value_digits` ASCII digits."""
    if not (isinstance(value, str) and len(value) == self.value_digits and value.isascii()
            and value.isdigit()):
      raise ValueError(f"value must be a string of {self.value_digits} ASCII digits; got {value!r}")

  def _fixed(self, key: str, value: str) -> int:
    needle = _ids(self.tokenizer, NEEDLE_TEMPLATE.format(key=key, value=value))
    question = _ids(self.tokenizer, NEEDLE_QUESTION.format(key=key))
    return len(needle) + len(question) + 2 * len(self._newline)

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with no haystack for the longest key (every trial fits from here on)."""
    return len(self._head) + self._fixed(self._longest_key, "9" * self.value_digits)

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
    value = random_digits(rng, self.value_digits)
    start = int(self.haystack.line_starts[rng.integers(len(self.haystack.line_starts))])
    return self.build(length, depth, key, value, start)


# ---------------------------------------------------------------------------- training documents


def answer_suffix(key: str) -> str:
  """What follows a passkey prompt in a training document: " " + key + "."."""
  return f" {key}."


def min_document_len(tokenizer: ByteTokenizer, *, preamble: bool, key_digits: int) -> int:
  """Tokens (BOS included) of the shortest passkey training document: no filler, plus the answer.

  Raises:
    ValueError: key_digits outside [1, MAX_DIGITS].
  """
  prompts = PasskeyPrompts(tokenizer, preamble=preamble, key_digits=key_digits)
  return prompts.min_length + len(_ids(tokenizer, answer_suffix("9" * key_digits)))


def _document_format(tokenizer: ByteTokenizer, train_len: int, preamble: bool,
                     key_digits: int) -> tuple[PasskeyPrompts, int, int]:
  """(prompts, answer tokens, shortest document in tokens) of passkey documents in train_len.

  Raises:
    ValueError: a document longer than train_len even without filler.
  """
  prompts = PasskeyPrompts(tokenizer, preamble=preamble, key_digits=key_digits)
  answer_len = len(_ids(tokenizer, answer_suffix("9" * key_digits)))
  n_min = prompts.min_length + answer_len
  if n_min > train_len:
    raise ValueError(f"a passkey training document needs at least {n_min} tokens "
                     f"(preamble={preamble}, key_digits={key_digits}); train_len is {train_len}")
  return prompts, answer_len, n_min


def _draw_document(prompts: PasskeyPrompts, rng: np.random.Generator, n_min: int, n_max: int,
                   answer_len: int) -> tuple[RetrievalPrompt, str]:
  """One document's prompt and key: length uniform in [n_min, n_max] tokens (answer included),
  then the key, then the depth uniform in [0, 1] (this draw order keeps documents reproducible)."""
  n = int(rng.integers(n_min, n_max + 1))
  key = random_digits(rng, prompts.key_digits)
  return prompts.build(n - answer_len, float(rng.random()), key), key


def passkey_documents(text_docs: Sequence[Document], tokenizer: ByteTokenizer, *, train_len: int,
                      fraction: float, seed: int, preamble: bool,
                      key_digits: int) -> list[Document]:
  """Passkey training documents to append after `text_docs` in the packed training stream.

  The training stream (data/pipeline.py) concatenates documents (BOS + tokens) in list order and
  cuts it into windows whose inputs are stream tokens [i * L, (i + 1) * L), L = train_len. The
  documents returned here tile whole blocks of L tokens that start where the text of `text_docs`
  ends rounded up to a multiple of L, so each one lies inside one window (the first block is the
  gap up to that multiple). Within a block, passkey documents (prompt + " " + key + ".") are
  drawn while they fit: length uniform in [min_document_len, min(L, tokens left)], depth uniform
  in [0, 1], key uniform over `key_digits`-digit numbers; the remainder of the block, shorter than
  a passkey document, is a snippet of a random `text_docs` document (so block boundaries never
  cut a passkey document). With the window shuffle, about `fraction` of the training windows are
  passkey blocks. The last block has no target after its last token, so the pipeline drops it.

  Args:
    text_docs: the training split's text documents (non-empty).
    tokenizer: the byte tokenizer.
    train_len: L, tokens.
    fraction: share of training windows made of passkey documents, in [0, 1).
    seed: seed of the lengths, depths, keys and snippets.
    preamble, key_digits: the passkey prompt format (see PasskeyPrompts).

  Returns:
    Documents named "passkey-%06d" (passkey) and "passkey-text-%06d" (snippets), in stream order;
    [] when fraction is 0.

  Raises:
    ValueError: fraction outside [0, 1), no non-empty text document, a passkey document longer
      than train_len even without filler, or a tokenizer that is not one token per byte (the
      block layout counts bytes).
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"fraction must lie in [0, 1); got {fraction}")
  if fraction == 0.0:
    return []
  prompts, answer_len, n_min = _document_format(tokenizer, train_len, preamble, key_digits)

  def draw(rng, left):
    prompt, key = _draw_document(prompts, rng, n_min, left, answer_len)
    return (tokenizer.decode_bytes(prompt.tokens[1:]) + answer_suffix(key).encode(),
            prompt.length + answer_len)

  return block_documents(text_docs, tokenizer, train_len=train_len, fraction=fraction,
                         rng=np.random.default_rng([int(seed), 7]), n_min=n_min, draw=draw,
                         name="passkey")


def block_documents(text_docs: Sequence[Document], tokenizer: ByteTokenizer, *, train_len: int,
                    fraction: float, rng: np.random.Generator, n_min: int, draw,
                    name: str) -> list[Document]:
  """Synthetic training documents tiling whole blocks of train_len tokens after the text (the
  layout `passkey_documents` describes), for any prompt format.

  Args:
    text_docs: the training split's text documents (non-empty); snippets fill block ends.
    tokenizer: a tokenizer of one token per byte (the layout counts bytes).
    train_len: L, tokens.
    fraction: share of training windows made of synthetic documents, in (0, 1).
    rng: the generator of every draw.
    n_min: tokens (BOS included) of the shortest synthetic document.
    draw: (rng, tokens left in the block, >= n_min) -> (document bytes, its tokens with BOS).
    name: documents are named "<name>-%06d" and the snippets "<name>-text-%06d".

  Raises:
    ValueError: no non-empty text document, or a tokenizer that is not one token per byte.
  """
  sources = [d.data for d in text_docs if d.data]
  if not sources:
    raise ValueError(f"{name} training documents need at least one non-empty text document")
  text_tokens = sum(len(tokenizer.encode(d.data)) + 1 for d in text_docs)
  gap = -text_tokens % train_len
  blocks = round(fraction / (1.0 - fraction) * (text_tokens + gap) / train_len)
  docs: list[Document] = []
  counts = {name: 0, f"{name}-text": 0}

  def add(kind: str, data: bytes) -> None:
    docs.append(Document(f"{kind}-{counts[kind]:06d}", data))
    counts[kind] += 1

  for size in ([gap] if gap else []) + [train_len] * blocks:
    left = size
    while left >= n_min:
      data, tokens = draw(rng, left)
      add(name, data)
      left -= tokens
    if left:  # a snippet of left - 1 bytes (+ BOS), read cyclically from a random offset
      source = np.frombuffer(sources[int(rng.integers(len(sources)))], np.uint8)
      idx = (int(rng.integers(len(source))) + np.arange(left - 1)) % len(source)
      add(f"{name}-text", source[idx].tobytes())
  laid_out = sum(len(tokenizer.encode(d.data)) + 1 for d in docs)
  if laid_out != gap + blocks * train_len:
    raise ValueError(f"{name} documents take {laid_out} tokens, not the "
                     f"{gap + blocks * train_len} of their blocks: the tokenizer does not map one "
                     "byte to one token")
  return docs


def answer_windows(tokenizer: ByteTokenizer, *, train_len: int, preamble: bool, key_digits: int,
                   count: int, seed: int) -> dict[str, np.ndarray]:
  """Held-out passkey documents scored on the key's digits only: is the lookup learned yet?

  The documents are Mohtashami & Jaggi's passkey prompt (arXiv 2305.16300, Appendix) followed by
  the answer, as in training; scoring only the answer's digits is this project's diagnostic.

  `count` documents drawn like the training ones (`passkey_documents`: length uniform in
  [min_document_len, train_len], depth uniform in [0, 1], a random key) from their own seed, one
  per row, each row padded to train_len. Only the targets that are the answer's digits have
  weight 1, so the weighted mean NLL is nats per answer digit: ln 10 = 2.303 while the model
  only knows the answer's format, near 0 once it copies the key from the needle. train.py logs it
  as `val_passkey_answer_nll` at each evaluation of a run with data.passkey.fraction > 0.

  Args:
    tokenizer: the byte tokenizer.
    train_len: row length, tokens.
    preamble, key_digits: the passkey prompt format (see PasskeyPrompts).
    count: documents (rows), >= 1.
    seed: seed of the lengths, depths and keys.

  Returns:
    dict of [count, train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on the
    document, 0 on padding) and float32 weights (1 on the `key_digits` answer targets).

  Raises:
    ValueError: count < 1, or a document that cannot fit train_len (as passkey_documents).
  """
  if count < 1:
    raise ValueError(f"count must be >= 1; got {count}")
  prompts, answer_len, n_min = _document_format(tokenizer, train_len, preamble, key_digits)
  rng = np.random.default_rng([int(seed), 11])
  rows = []
  for _ in range(count):
    prompt, key = _draw_document(prompts, rng, n_min, train_len, answer_len)
    # the answer " 71432.": its digits are its tokens 1 .. key_digits
    rows.append((prompt.tokens, _ids(tokenizer, answer_suffix(key)), 1, 1 + key_digits))
  return answer_rows(tokenizer, train_len, rows)


def answer_rows(tokenizer: ByteTokenizer, train_len: int,
                rows: Sequence[tuple[np.ndarray, np.ndarray, int, int]]) -> dict[str, np.ndarray]:
  """Validation windows scored on part of each prompt's answer: one row per (prompt tokens,
  answer tokens, first, stop), the prompt followed by its answer, padded to train_len, with
  weight 1 on the targets that are answer tokens first..stop-1 (0-based in the answer).

  Returns:
    dict of [len(rows), train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on
    the prompt and answer, 0 on padding) and float32 weights.

  Raises:
    ValueError: a prompt and answer longer than train_len + 1 tokens.
  """
  out = {k: np.zeros((len(rows), train_len), np.int32)
         for k in ("inputs", "targets", "positions", "segment_ids")}
  out["inputs"][:], out["targets"][:] = tokenizer.pad_id, tokenizer.pad_id
  out["weights"] = np.zeros((len(rows), train_len), np.float32)
  for row, (prompt, answer, first, stop) in enumerate(rows):
    tokens = np.concatenate([prompt, answer])
    m = len(tokens) - 1  # inputs tokens[:-1], targets tokens[1:]
    if m > train_len:
      raise ValueError(f"a {len(tokens)}-token prompt and answer exceed train_len={train_len}")
    out["inputs"][row, :m], out["targets"][row, :m] = tokens[:-1], tokens[1:]
    out["positions"][row, :m] = np.arange(m)
    out["segment_ids"][row, :m] = 1
    # answer token j is tokens[len(prompt) + j]: the target at len(prompt) - 1 + j
    out["weights"][row, len(prompt) - 1 + first:len(prompt) - 1 + stop] = 1.0
  return out


def training_documents(train_docs: Sequence[Document], data_config,
                       tokenizer: ByteTokenizer) -> list[Document]:
  """The training split's documents followed by the passkey documents of `data_config.passkey`.

  The hook between corpus and pipeline (train.py): with `data.passkey.fraction` = 0 it returns
  the documents unchanged; otherwise it appends `passkey_documents` (Mohtashami & Jaggi's prompt
  format, arXiv 2305.16300). Only training data goes through it.

  Args:
    train_docs: the training split.
    data_config: `config.data` (train_len and the passkey section).
    tokenizer: the byte tokenizer.

  Raises:
    ValueError: see `passkey_documents` (configs/validate.py rejects such configs earlier).
  """
  p = data_config.passkey
  return list(train_docs) + passkey_documents(
      train_docs, tokenizer, train_len=data_config.train_len, fraction=p.fraction, seed=p.seed,
      preamble=p.preamble, key_digits=p.key_digits)


# ---------------------------------------------------------------------------- field checks


def _integer(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def check_retrieval(config) -> None:
  """Checks the retrieval fields: data.passkey and eval.passkey, needle, niah_multikey,
  niah_multivalue, niah_multiquery and variable_tracking.

  Sections absent from an older config are skipped (configs.stored.load_run_config fills them
  from configs/base.py anyway).

  Raises:
    ConfigError: naming the first bad field and its allowed values: data.passkey.fraction
      outside [0, 1); a seed that is not an integer >= 0; a preamble that is not a bool;
      key_digits / value_digits outside 1..18; num_keys / num_values / num_queries outside
      2..64; num_chains / num_hops outside 1..64; fewshot outside 0..MAX_FEWSHOT; depths not a
      non-empty
      list of numbers in [0, 1]; trials < 1; threshold outside (0, 1]; max_new_tokens < digits + 2 (room for a leading
      space and the character after the number); or, with data.passkey.fraction > 0, a passkey
      training document that cannot fit in data.train_len tokens, or an algorithmic task.
  """
  p = config.data.get("passkey")
  if p is not None:
    if isinstance(p.fraction, bool) or not isinstance(p.fraction, (int, float)) or not 0 <= p.fraction < 1:
      raise ConfigError(f"data.passkey.fraction must lie in [0, 1) (share of training windows; "
                        f"0 = none); got {p.fraction!r}")
    _retrieval_common(p, "data.passkey", digits_field="key_digits", max_digits=MAX_DIGITS)
    task = config.data.get("task")
    if p.fraction > 0 and task is not None and task.get("name"):
      raise ConfigError(f"data.passkey.fraction={p.fraction} mixes passkey documents into text "
                        f"training; it must be 0 with an algorithmic task "
                        f"(data.task.name={task.name!r})")
    if p.fraction > 0:
      need = min_document_len(get_tokenizer(config.data.tokenizer), preamble=p.preamble,
                              key_digits=p.key_digits)
      if need > config.data.train_len:
        raise ConfigError(
            f"data.passkey.fraction > 0 needs data.train_len >= {need} tokens for a passkey "
            f"document with data.passkey.preamble={p.preamble} and key_digits={p.key_digits}; "
            f"got data.train_len={config.data.train_len} (set data.passkey.preamble=False, "
            "or fraction=0)")
  for suite in ("passkey", "needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
                "variable_tracking"):
    e = config.eval.get(suite)
    if e is None:
      continue
    prefix = f"eval.{suite}"
    if suite != "passkey" and e.get("haystack", "text") not in ("text", "noise"):
      raise ConfigError(f"{prefix}.haystack must be 'text' (held-out text of eval.split) or "
                        f"'noise' (RULER's noise sentences); got {e.haystack!r}")
    if suite != "passkey":
      check_fewshot(e, prefix)
    if suite == "variable_tracking":
      _check_variable_tracking(e, prefix)
      digits, digits_name = None, ""
    elif suite != "passkey":
      _retrieval_common(e, prefix, digits_field="value_digits", max_digits=MAX_DIGITS)
      digits, digits_name = e.value_digits, f"{prefix}.value_digits"
    else:
      digits, digits_name = (p.key_digits if p is not None else 5), "data.passkey.key_digits"
    if suite == "niah_multikey" and (not _integer(e.num_keys)
                                     or not 2 <= e.num_keys <= MAX_NEEDLE_KEYS):
      raise ConfigError(f"{prefix}.num_keys must be an integer in [2, {MAX_NEEDLE_KEYS}] (needles "
                        f"per prompt, the target included); got {e.num_keys!r}")
    count_field = {"niah_multivalue": "num_values", "niah_multiquery": "num_queries"}.get(suite)
    if count_field:
      count = e[count_field]
      if not _integer(count) or not 2 <= count <= MAX_NEEDLE_KEYS:
        raise ConfigError(f"{prefix}.{count_field} must be an integer in [2, {MAX_NEEDLE_KEYS}] "
                          f"(needles per prompt, every one asked for); got {count!r}")
      need = 5 + count * (e.value_digits + 2)  # " v1, v2, ..., and vN."
      if not _integer(e.max_new_tokens) or e.max_new_tokens < need:
        raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {need} (5 + "
                          f"{count_field} x (value_digits + 2): room for every value); got "
                          f"{e.max_new_tokens!r}")
    depths = e.depths
    if (not isinstance(depths, (tuple, list)) or not depths
        or any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1
               for d in depths)):
      raise ConfigError(f"{prefix}.depths must be a non-empty list of numbers in [0, 1] (share of "
                        f"the filler before the needle); got {depths!r}")
    check_trials(e, prefix, score="accuracy")
    if suite == "passkey":  # the others' seeds were checked with their preamble above
      check_seed(e, prefix, preamble=False)
    if digits is None:  # variable tracking: a leading space, then every name and ", " after it
      need = (e.num_hops + 1) * (VT_NAME_LETTERS + 2) + 1
      if not _integer(e.max_new_tokens) or e.max_new_tokens < need:
        raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {need} (1 + (num_hops "
                          f"+ 1) x {VT_NAME_LETTERS + 2}: a leading space, then every variable "
                          f"name and ', '); got {e.max_new_tokens!r}")
    elif not _integer(e.max_new_tokens) or e.max_new_tokens < digits + 2:
      raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {digits + 2} "
                        f"({digits_name} + 2: a leading space, the digits and the character "
                        f"after them); got {e.max_new_tokens!r}")


MAX_FEWSHOT = 8  # demonstrations before a retrieval prompt (data/ruler.py FewShotPrompts)


def check_fewshot(section, prefix: str) -> None:
  """Checks <prefix>.fewshot (absent in older configs: 0).

  Raises:
    ConfigError: not an integer in [0, MAX_FEWSHOT].
  """
  shots = section.get("fewshot", 0)
  if not _integer(shots) or not 0 <= shots <= MAX_FEWSHOT:
    raise ConfigError(f"{prefix}.fewshot must be an integer in [0, {MAX_FEWSHOT}] (solved "
                      f"demonstrations before each prompt); got {shots!r}")


VT_NAME_LETTERS = 5  # letters per variable name of variable tracking (data/ruler.py)


def check_seed(section, prefix: str, *, preamble: bool = True) -> None:
  """Checks <prefix>.seed and, with `preamble`, <prefix>.preamble of a prompt section.

  Raises:
    ConfigError: a seed that is not an integer >= 0; a preamble that is not a bool.
  """
  if not _integer(section.seed) or section.seed < 0:
    raise ConfigError(f"{prefix}.seed must be an integer >= 0; got {section.seed!r}")
  if preamble and not isinstance(section.preamble, bool):
    raise ConfigError(f"{prefix}.preamble must be True or False; got {section.preamble!r}")


def check_trials(section, prefix: str, *, score: str) -> None:
  """Checks <prefix>.trials and <prefix>.threshold of an evaluation suite's section.

  Args:
    score: what the threshold is compared with, for the message ("accuracy", "mean recall").

  Raises:
    ConfigError: trials not a positive integer; threshold outside (0, 1].
  """
  if not _integer(section.trials) or section.trials < 1:
    raise ConfigError(f"{prefix}.trials must be a positive integer; got {section.trials!r}")
  t = section.threshold
  if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1:
    raise ConfigError(f"{prefix}.threshold must lie in (0, 1] ({score} a length needs); "
                      f"got {t!r}")


def _check_variable_tracking(section, prefix: str) -> None:
  """Checks the seed, preamble, num_chains and num_hops of eval.variable_tracking."""
  check_seed(section, prefix)
  for name in ("num_chains", "num_hops"):
    if not _integer(section[name]) or not 1 <= section[name] <= 64:
      raise ConfigError(f"{prefix}.{name} must be an integer in [1, 64]; got {section[name]!r}")


def _retrieval_common(section, prefix: str, *, digits_field: str, max_digits: int) -> None:
  """Checks the seed, preamble and digit count of a passkey / needle section."""
  check_seed(section, prefix)
  digits = section[digits_field]
  if not _integer(digits) or not 1 <= digits <= max_digits:
    raise ConfigError(f"{prefix}.{digits_field} must be an integer in [1, {max_digits}]; "
                      f"got {digits!r}")
