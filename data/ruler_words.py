"""RULER's aggregation tasks (Hsieh et al., arXiv 2404.06654, Section 3.3): common words
extraction (cwe) and frequent words extraction (fwe), sized for byte-level models.

Neither has a needle or a depth: the whole context is the evidence, and the model must count.
A prompt is a function of (seed, length, trial), the format fields and the tokenizer only
(`cell`; the depth argument of the grid is ignored), so every scheme and checkpoint sees the
same tokens; both are scored by recall of every reference (RULER's string_match_all,
eval/needle.py `recall_all`).

common_words (cwe)::

  [CWE_PREAMBLE "\\n"] "1. w 2. w ... n. w" ["\\n" x pad] "\\n" CWE_QUESTION

  `num_common` words appear `common_repeats` times each, the others `uncommon_repeats` times
  each, in a shuffled numbered list; as many uncommon words as fit the length. The answer is the
  `num_common` common words (in any order). RULER (scripts/data/synthetic/
  common_words_extraction.py of NVIDIA/RULER) uses 10 common words, 30 and 3 repeats at 4K
  tokens and more, 6 and 1 below; the defaults here are 3 common words, 6 and 1 repeats (RULER's
  short-context setting with fewer words, so that a prompt of a few hundred bytes holds them).

frequent_words (fwe)::

  [FWE_PREAMBLE " "] "w w w ..." ["\\n" x pad] "\\n" FWE_QUESTION

  A vocabulary of max(5, L // 50) coded words of `word_letters` random lower-case letters (RULER:
  6 letters, L // 50 words), the first replaced by "..." (noise, the most frequent); the word of
  rank k appears floor(N k^-alpha / zeta(alpha)) times (a Zipf law, RULER's alpha = 2), in
  shuffled order, N the largest that fits. The answer is the words of ranks 2, 3 and 4.
  Prompts whose ranks 4 and 5 would tie are made with a smaller N (the answer is always
  unambiguous).

Differences from RULER, stated: cwe's words are pseudo-words (consonant-vowel patterns of
`CWE_WORD_LETTERS` letters drawn from the cell's generator), not the `wonderwords` English lists
(a dependency and a vocabulary a byte model has not seen either way); a prompt is exactly L
tokens (the list stops at the last whole entry that fits, and the rest of the budget is
newlines before the question), where RULER searches for the longest list within L.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from configs.errors import ConfigError
from data.retrieval_prompt import (RetrievalPrompt, _ids, cell_rng, check_fewshot, check_seed,
                                   check_trials, widest)
from data.tokenizers import ByteTokenizer

CWE_PREAMBLE = ("Below is a numbered list of words. In these words, some appear more often than "
                "others. Memorize the ones that appear most often.")
CWE_QUESTION = ("Question: What are the {count} most common words in the above list? Answer: The "
                "top {count} words that appear most often in the list are:")
FWE_PREAMBLE = ("Read the following coded text and track the frequency of each coded word. Find "
                "the three most frequently appeared coded words.")
FWE_QUESTION = ("Question: Do not provide any explanation. Please ignore the dots '....'. What are "
                "the three most frequently appeared words in the above coded text? Answer: "
                "According to the coded text above, the three most frequently appeared words "
                "are:")
CWE_WORD_LETTERS = 5  # consonant-vowel-consonant-vowel-consonant pseudo-words
CONSONANTS, VOWELS = "bdfghklmnprstvz", "aeiou"
FWE_NOISE = "..."  # the rank-1 word of frequent_words (RULER: noise the question says to ignore)
FWE_ANSWER_RANKS = 3  # ranks 2..4 are the answer


def pseudo_words(rng: np.random.Generator, count: int) -> list[str]:
  """`count` distinct pseudo-words of CWE_WORD_LETTERS letters, consonants and vowels
  alternating ("bakot"), drawn from `rng`."""
  words: list[str] = []
  seen: set[str] = set()
  while len(words) < count:
    w = "".join((CONSONANTS if i % 2 == 0 else VOWELS)[int(rng.integers(
        len(CONSONANTS) if i % 2 == 0 else len(VOWELS)))] for i in range(CWE_WORD_LETTERS))
    if w not in seen:
      seen.add(w)
      words.append(w)
  return words


def coded_words(rng: np.random.Generator, count: int, letters: int) -> list[str]:
  """`count` distinct words of `letters` random lower-case ASCII letters (RULER's coded words)."""
  words: list[str] = []
  seen: set[str] = set()
  while len(words) < count:
    w = "".join(chr(ord("a") + int(i)) for i in rng.integers(0, 26, letters))
    if w not in seen:
      seen.add(w)
      words.append(w)
  return words


def zeta(alpha: float, terms: int = 1000) -> float:
  """Riemann zeta(alpha) for alpha > 1: a partial sum and its Euler-Maclaurin tail (relative
  error below 1e-9 for alpha >= 1.1); zeta(2) = pi^2 / 6."""
  if alpha <= 1:
    raise ValueError(f"zeta needs alpha > 1; got {alpha}")
  k = np.arange(1, terms + 1, dtype=np.float64)
  n = float(terms)
  return float(np.sum(k ** -alpha) + n ** (1 - alpha) / (alpha - 1) - 0.5 * n ** -alpha
               + alpha / 12 * n ** (-alpha - 1))


def zipf_counts(num_words: int, vocab_size: int, alpha: float) -> list[int]:
  """RULER fwe's counts: floor(num_words k^-alpha / zeta(alpha)) for ranks k = 1..vocab_size."""
  z = zeta(alpha)
  return [int(num_words * k ** -alpha / z) for k in range(1, vocab_size + 1)]


class _WordPrompts:
  """Shared assembly of the word-extraction prompts: BOS, optional preamble, the word entries,
  newlines up to the exact length, the question."""

  suite = ""
  needs_depth = False  # no needle: the grid has no depth axis (eval/needle.py)

  def __init__(self, tokenizer: ByteTokenizer, *, preamble: bool, preamble_text: str,
               preamble_sep: str):
    self.tokenizer = tokenizer
    self.preamble = bool(preamble)
    self._newline = _ids(tokenizer, "\n")
    if len(self._newline) != 1:
      raise ValueError(f"the {self.suite} prompts need a tokenizer that encodes '\\n' as one "
                       f"token; got {len(self._newline)}")
    bos = np.array([tokenizer.bos_id], np.int32)
    self._head = np.concatenate([bos] + ([_ids(tokenizer, preamble_text + preamble_sep)]
                                         if self.preamble else []))

  def _assemble(self, length: int, entries: Sequence[np.ndarray], tail: np.ndarray,
                answers: Sequence[str], key: str) -> RetrievalPrompt:
    body = np.concatenate(list(entries)) if entries else np.zeros(0, np.int32)
    pad = length - len(self._head) - len(body) - len(tail)
    if pad < 0:
      raise ValueError(f"a {self.suite} prompt of {len(entries)} entries needs "
                       f"{length - pad} tokens; got length {length}")
    tokens = np.concatenate([self._head, body, np.repeat(self._newline, pad), tail])
    tokens = tokens.astype(np.int32)
    assert len(tokens) == length, (len(tokens), length)
    start = len(self._head)
    return RetrievalPrompt(tokens, " ".join(answers), key, 0.0, 0.0, start, start + len(body),
                           answers=tuple(answers))


class CommonWordsPrompts(_WordPrompts):
  """Builds common_words prompts (module docstring).

  Args:
    tokenizer: the tokenizer (one token for "\\n").
    num_common: words to report, >= 1 (RULER: 10).
    common_repeats: times each common word is listed, >= 2 (RULER: 30, or 6 below 4K tokens).
    uncommon_repeats: times each other word is listed, in [1, common_repeats) (RULER: 3 or 1).
    preamble: start with CWE_PREAMBLE and a newline.

  Raises:
    ValueError: a count outside its range; a tokenizer with a multi-token newline.
  """

  suite = "common_words"

  def __init__(self, tokenizer: ByteTokenizer, *, num_common: int = 3, common_repeats: int = 6,
               uncommon_repeats: int = 1, preamble: bool = True):
    for name, value, lo in (("num_common", num_common, 1), ("common_repeats", common_repeats, 2),
                            ("uncommon_repeats", uncommon_repeats, 1)):
      if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}; got {value!r}")
    if uncommon_repeats >= common_repeats:
      raise ValueError(f"uncommon_repeats ({uncommon_repeats}) must be below common_repeats "
                       f"({common_repeats}): the common words must be the most frequent")
    super().__init__(tokenizer, preamble=preamble, preamble_text=CWE_PREAMBLE, preamble_sep="\n")
    self.num_common, self.common_repeats = num_common, common_repeats
    self.uncommon_repeats = uncommon_repeats
    self._question = np.concatenate([self._newline, _ids(tokenizer, CWE_QUESTION.format(
        count=num_common))])
    self._min_entry = min(map(len, self._entries(["a", "b"])))  # tokens of the shortest entry
    # the widest of fixed probe words ("zzzzz" first: exact when all are equally wide)
    probes = ["z" * CWE_WORD_LETTERS] + pseudo_words(np.random.default_rng(83), 64)
    self._widest_word = widest(probes, lambda w: len(_ids(tokenizer, f" 1. {w}")))

  def _entries(self, words: Sequence[str]) -> list[np.ndarray]:
    return [_ids(self.tokenizer, f"{' ' if i else ''}{i + 1}. {w}") for i, w in enumerate(words)]

  @property
  def min_length(self) -> int:
    """Tokens of a prompt with the common words only (no uncommon word), each as wide as the
    widest probe word."""
    n = self.num_common * self.common_repeats
    words = [self._widest_word] * n
    return len(self._head) + sum(map(len, self._entries(words))) + len(self._question)

  def build(self, length: int, common: Sequence[str], uncommon: Sequence[str],
            order: np.ndarray) -> RetrievalPrompt:
    """The prompt of exactly `length` tokens listing `common` and as many of `uncommon` (in
    their order) as fit, shuffled by `order`.

    Args:
      length: prompt length, tokens, BOS included.
      common: num_common distinct words (the answer).
      uncommon: candidate other words, distinct and none of `common`; a prefix is used.
      order: a permutation of range(len(common) * common_repeats + len(uncommon) *
        uncommon_repeats); the list for a prefix of u uncommon words keeps the relative order
        of its entries' indices in `order`.

    Returns:
      A RetrievalPrompt: answers = common, key = "" , needle_start/end the list's span.

    Raises:
      ValueError: wrong counts, repeated words, or a length too short for the common words.
    """
    if len(common) != self.num_common or len(set(common) | set(uncommon)) != len(common) + len(
        uncommon):
      raise ValueError(f"need {self.num_common} common words and distinct uncommon words")
    pool = [w for w in common for _ in range(self.common_repeats)]
    pool += [w for w in uncommon for _ in range(self.uncommon_repeats)]
    order = np.asarray(order)
    if sorted(order.tolist()) != list(range(len(pool))):
      raise ValueError(f"order must be a permutation of range({len(pool)})")
    budget = length - len(self._head) - len(self._question)

    def listed(u: int) -> list[str]:
      keep = len(common) * self.common_repeats + u * self.uncommon_repeats
      return [pool[i] for i in order if i < keep]

    def size(u: int) -> int:
      return sum(map(len, self._entries(listed(u))))

    lo, hi = 0, len(uncommon)  # the largest u with size(u) <= budget (size grows with u)
    if size(0) > budget:
      raise ValueError(f"a common_words prompt ({self.num_common} words x "
                       f"{self.common_repeats}, preamble={self.preamble}) needs at least "
                       f"{length - budget + size(0)} tokens; got length {length}")
    while lo < hi:
      mid = (lo + hi + 1) // 2
      lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid - 1)
    return self._assemble(length, self._entries(listed(lo)), self._question, list(common), "")

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one trial at `length`, from `cell_rng(seed, "common_words", length, 0,
    trial)` (depth is ignored: the task has none): the words (the first num_common common), then
    the shuffle of every candidate entry."""
    del depth
    rng = cell_rng(seed, self.suite, length, 0.0, trial)
    most = length // self._min_entry // self.uncommon_repeats + 1  # more than can fit
    words = pseudo_words(rng, self.num_common + most)
    common, uncommon = words[:self.num_common], words[self.num_common:]
    order = rng.permutation(self.num_common * self.common_repeats
                            + len(uncommon) * self.uncommon_repeats)
    return self.build(length, common, uncommon, order)


class FrequentWordsPrompts(_WordPrompts):
  """Builds frequent_words prompts (module docstring).

  Args:
    tokenizer: the tokenizer (one token for "\\n").
    alpha: the Zipf exponent, > 1 (RULER: 2.0).
    word_letters: letters per coded word, 2..12 (RULER: 6).
    preamble: start with FWE_PREAMBLE and a space.

  Raises:
    ValueError: alpha <= 1 or word_letters outside 2..12; a multi-token newline.
  """

  suite = "frequent_words"

  def __init__(self, tokenizer: ByteTokenizer, *, alpha: float = 2.0, word_letters: int = 6,
               preamble: bool = True):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 1:
      raise ValueError(f"alpha must be a number > 1 (the Zipf exponent); got {alpha!r}")
    if not isinstance(word_letters, int) or isinstance(word_letters, bool) or not (
        2 <= word_letters <= 12):
      raise ValueError(f"word_letters must be an integer in [2, 12]; got {word_letters!r}")
    super().__init__(tokenizer, preamble=preamble, preamble_text=FWE_PREAMBLE, preamble_sep=" ")
    self.alpha, self.word_letters = float(alpha), word_letters
    self._question = np.concatenate([self._newline, _ids(tokenizer, FWE_QUESTION)])
    probes = ["z" * word_letters] + coded_words(np.random.default_rng(79), 64, word_letters)
    self._widest_word = widest(probes, lambda w: len(_ids(tokenizer, " " + w)))

  @staticmethod
  def vocab_size(length: int) -> int:
    """Coded words of a prompt of `length` tokens: max(5, length // 50) (RULER: length // 50)."""
    return max(FWE_ANSWER_RANKS + 2, length // 50)

  def counts(self, num_words: int, vocab_size: int) -> list[int] | None:
    """Zipf counts for N = num_words, or None when ranks 2..4 are not strictly more frequent
    than rank 5 (an ambiguous answer) or the noise is not the most frequent."""
    c = zipf_counts(num_words, vocab_size, self.alpha)
    top = FWE_ANSWER_RANKS + 1
    if c[top - 1] <= c[top] or c[0] <= c[1]:
      return None
    return c

  def _entries(self, words: Sequence[str]) -> list[np.ndarray]:
    return [_ids(self.tokenizer, f"{' ' if i else ''}{w}") for i, w in enumerate(words)]

  def _fit(self, budget: int, vocab: Sequence[str]) -> list[int] | None:
    """The counts of the largest N whose text (at each word's width with a leading space)
    fits `budget` tokens with an unambiguous answer; None when none does."""
    widths = [len(_ids(self.tokenizer, " " + w)) for w in vocab]

    def size(n: int) -> int:
      return sum(k * w for k, w in zip(zipf_counts(n, len(vocab), self.alpha), widths))

    lo, hi = 0, max(1, budget)
    while hi > 0 and size(hi) <= budget:
      hi *= 2
    while lo < hi:  # the largest n with size(n) <= budget (size grows with n)
      mid = (lo + hi + 1) // 2
      lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid - 1)
    for n in range(lo, 0, -1):  # then the largest of those with an unambiguous answer
      if (c := self.counts(n, len(vocab))) is not None:
        return c
    return None

  @functools.cached_property
  def min_length(self) -> int:
    """Tokens of the shortest prompt with an unambiguous answer, at the longest word width."""
    fixed = len(self._head) + len(self._question)
    length = fixed + 1
    while True:
      vocab = [FWE_NOISE] + [self._widest_word] * (self.vocab_size(length) - 1)
      if self._fit(length - fixed, vocab) is not None:
        return length
      length += 1

  def build(self, length: int, vocab: Sequence[str], rng: np.random.Generator) -> RetrievalPrompt:
    """The prompt of exactly `length` tokens over `vocab` (rank order; vocab[0] is replaced by
    the noise "..."), with the largest N whose Zipf counts fit and give an unambiguous answer,
    the words shuffled by `rng`.

    Returns:
      A RetrievalPrompt: answers = vocab[1:4], needle_start/end the text's span.

    Raises:
      ValueError: fewer than 5 distinct words in `vocab`, or a length too short.
    """
    if len(vocab) < FWE_ANSWER_RANKS + 2 or len(set(vocab)) != len(vocab):
      raise ValueError(f"vocab needs at least {FWE_ANSWER_RANKS + 2} distinct words")
    vocab = [FWE_NOISE, *vocab[1:]]
    counts = self._fit(length - len(self._head) - len(self._question), vocab)
    if counts is None:
      raise ValueError(f"a frequent_words prompt (word_letters={self.word_letters}, preamble="
                       f"{self.preamble}) needs at least {self.min_length} tokens; got length "
                       f"{length}")
    words = [w for w, k in zip(vocab, counts) for _ in range(k)]
    words = [words[i] for i in rng.permutation(len(words))]
    return self._assemble(length, self._entries(words), self._question,
                          list(vocab[1:1 + FWE_ANSWER_RANKS]), "")

  def cell(self, length: int, depth: float, trial: int, seed: int) -> RetrievalPrompt:
    """The prompt of one trial at `length`, from `cell_rng(seed, "frequent_words", length, 0,
    trial)` (depth is ignored): the coded vocabulary, then the shuffle."""
    del depth
    rng = cell_rng(seed, self.suite, length, 0.0, trial)
    vocab = coded_words(rng, self.vocab_size(length), self.word_letters)
    return self.build(length, vocab, rng)


def answer_text(prompt: RetrievalPrompt, suite: str) -> str:
  """What follows a word-extraction prompt in a training document: " 1. a 2. b 3. c" for
  common_words (RULER's demonstration answers), " a b c" for frequent_words."""
  if suite == "common_words":
    return "".join(f" {i + 1}. {w}" for i, w in enumerate(prompt.answers))
  return "".join(f" {w}" for w in prompt.answers)


SUITES = ("common_words", "frequent_words")
MAX_COMMON = 32  # common words per prompt


def _integer(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def check_config(config) -> None:
  """Checks eval.common_words and eval.frequent_words (sections absent from an older config are
  skipped).

  Raises:
    ConfigError: naming the first bad field and its allowed values: trials < 1; a seed that is
      not an integer >= 0; threshold outside (0, 1]; a preamble that is not a bool; num_common
      outside 1..MAX_COMMON; fewshot outside 0..8; common_repeats < 2; uncommon_repeats outside 1..common_repeats - 1;
      alpha <= 1; word_letters outside 2..12; max_new_tokens too small for the answer.
  """
  for suite in SUITES:
    e = config.eval.get(suite)
    if e is None:
      continue
    prefix = f"eval.{suite}"
    check_trials(e, prefix, score="mean recall")
    check_seed(e, prefix)
    check_fewshot(e, prefix)
    if suite == "common_words":
      if not _integer(e.num_common) or not 1 <= e.num_common <= MAX_COMMON:
        raise ConfigError(f"{prefix}.num_common must be an integer in [1, {MAX_COMMON}] (words "
                          f"to report); got {e.num_common!r}")
      if not _integer(e.common_repeats) or e.common_repeats < 2:
        raise ConfigError(f"{prefix}.common_repeats must be an integer >= 2; got "
                          f"{e.common_repeats!r}")
      if not _integer(e.uncommon_repeats) or not 1 <= e.uncommon_repeats < e.common_repeats:
        raise ConfigError(f"{prefix}.uncommon_repeats must be an integer in [1, common_repeats "
                          f"- 1 = {e.common_repeats - 1}]; got {e.uncommon_repeats!r}")
      need = 1 + sum(3 + len(str(k)) + CWE_WORD_LETTERS for k in range(1, e.num_common + 1))
      what = f"' k. word' for k = 1..num_common={e.num_common}, and one more"
    else:
      if isinstance(e.alpha, bool) or not isinstance(e.alpha, (int, float)) or not e.alpha > 1:
        raise ConfigError(f"{prefix}.alpha must be a number > 1 (the Zipf exponent); got "
                          f"{e.alpha!r}")
      if not _integer(e.word_letters) or not 2 <= e.word_letters <= 12:
        raise ConfigError(f"{prefix}.word_letters must be an integer in [2, 12]; got "
                          f"{e.word_letters!r}")
      need = FWE_ANSWER_RANKS * (e.word_letters + 1) + 2
      what = f"' word' x {FWE_ANSWER_RANKS} and two more"
    if not _integer(e.max_new_tokens) or e.max_new_tokens < need:
      raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {need} ({what}); got "
                        f"{e.max_new_tokens!r}")


def builder(suite: str, section, tokenizer: ByteTokenizer):
  """The prompt builder of `suite` (one of SUITES) with its section's format fields."""
  if suite == "common_words":
    return CommonWordsPrompts(tokenizer, num_common=section.num_common,
                              common_repeats=section.common_repeats,
                              uncommon_repeats=section.uncommon_repeats, preamble=section.preamble)
  if suite == "frequent_words":
    return FrequentWordsPrompts(tokenizer, alpha=section.alpha, word_letters=section.word_letters,
                                preamble=section.preamble)
  raise ValueError(f"suite must be one of {SUITES}; got {suite!r}")


def prompt_format(suite: str, section, prompts) -> dict:
  """The format fields and template strings of a word-extraction suite (recorded in results)."""
  if suite == "common_words":
    return {"preamble": section.preamble, "num_common": section.num_common,
            "common_repeats": section.common_repeats,
            "uncommon_repeats": section.uncommon_repeats, "min_length": prompts.min_length,
            "preamble_text": CWE_PREAMBLE, "question": CWE_QUESTION,
            "words": f"pseudo-words of {CWE_WORD_LETTERS} letters, consonant-vowel alternating",
            "layout": "[preamble\\n]1. w 2. w ... n. w[\\n x pad]\\nquestion"}
  return {"preamble": section.preamble, "alpha": section.alpha,
          "word_letters": section.word_letters, "min_length": prompts.min_length,
          "preamble_text": FWE_PREAMBLE, "question": FWE_QUESTION, "noise_word": FWE_NOISE,
          "vocab_size": "max(5, length // 50)",
          "layout": "[preamble ]w w ... w[\\n x pad]\\nquestion"}


__all__ = ["CWE_PREAMBLE", "CWE_QUESTION", "SUITES", "check_config", "builder", "prompt_format",
           "CommonWordsPrompts", "FWE_PREAMBLE", "FWE_QUESTION",
           "FrequentWordsPrompts", "answer_text", "coded_words", "pseudo_words", "zeta",
           "zipf_counts"]
