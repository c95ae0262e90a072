"""The data model and shared helpers of every retrieval prompt suite: passkey and needle
(data/passkey.py), RULER's multi-needle suites (data/ruler.py), variable tracking
(data/variable_tracking.py) and word extraction (data/ruler_words.py).

`RetrievalPrompt` is one prompt and its answer; `cell_rng` is the generator of one grid cell's
trial (a seed stream per suite, so that a prompt depends only on seed, suite, length, depth and
trial); `random_digits` draws a number, `_snap` snaps a depth to the nearest boundary and `_ids`
tokenizes one part of a prompt; `probe_numbers` and `widest` make a builder's min_length an upper
bound under tokenizers that merge digits, `covering_tokens` finds the tokens that spell part of
a text. The checks of the fields that every suite's section shares (seed,
preamble, trials, threshold, fewshot) are here too: data/retrieval_checks.py and
data/ruler_words.py use them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from configs.errors import ConfigError
from data.tokenizers import ByteTokenizer

MAX_DIGITS = 18  # keys are drawn as int64 numbers
MAX_NEEDLE_KEYS = 64  # needles per niah_multikey prompt (data/ruler.py; RULER uses 4)
VT_NAME_LETTERS = 5  # letters per variable name of variable tracking (data/variable_tracking.py)
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
      data/variable_tracking.py), scored by RULER's string_match_all (eval/needle.py
      `recall_all`); () for the digit-answer prompts, scored by exact match of `answer`.
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


VALUE_KINDS = ("digits", "uuid")  # eval.<needle suite>.value_kind
UUID_LENGTH = 36  # characters of "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"


def random_uuid(rng: np.random.Generator) -> str:
  """A random UUID in RFC 4122 version-4 form (lowercase hex, 8-4-4-4-12), drawn from `rng`
  (RULER's UUID needles use Python's uuid.uuid4(); this is the same form, reproducible)."""
  b = bytearray(rng.integers(0, 256, size=16, dtype=np.uint8).tobytes())
  b[6] = (b[6] & 0x0F) | 0x40  # version 4
  b[8] = (b[8] & 0x3F) | 0x80  # variant 10
  h = b.hex()
  return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def random_value(rng: np.random.Generator, kind: str, digits: int) -> str:
  """A needle's value: `random_digits(rng, digits)` ("digits") or `random_uuid(rng)` ("uuid").

  Raises:
    ValueError: an unknown kind, or digits outside [1, MAX_DIGITS] for "digits".
  """
  if kind == "digits":
    return random_digits(rng, digits)
  if kind == "uuid":
    return random_uuid(rng)
  raise ValueError(f"value kind must be one of {VALUE_KINDS}; got {kind!r}")


def value_length(kind: str, digits: int) -> int:
  """Characters of a value of `kind` (`digits` for "digits", UUID_LENGTH for "uuid")."""
  return digits if kind == "digits" else UUID_LENGTH


def _snap(candidates: np.ndarray, target: float) -> int:
  """The candidate offset nearest to `target` (ties: the smaller)."""
  return int(candidates[np.argmin(np.abs(candidates - target))])


def _ids(tokenizer: ByteTokenizer, text: str | bytes) -> np.ndarray:
  return np.asarray(tokenizer.encode(text), np.int32)


PROBES = 64  # random values besides "9...9" whose widest sets a builder's min_length


def probe_values(kind: str, digits: int) -> list[str]:
  """`probe_numbers(digits)` for "digits"; for "uuid", PROBES UUIDs of a fixed generator (all
  36 characters; a BPE tokenizer splits them differently, so the widest sets min_length)."""
  if kind == "digits":
    return probe_numbers(digits)
  rng = np.random.default_rng([36, 97])
  return [random_uuid(rng) for _ in range(PROBES)]


def probe_numbers(digits: int) -> list[str]:
  """Candidate `digits`-digit numbers for an upper bound of a prompt's tokens: "9" * digits
  first, then PROBES numbers from a fixed generator. Tokenizers that split digits (bytes,
  data.prepare's SentencePiece) give every number the same width; BPE tokenizers that merge
  digits (GPT-2's runs, Llama 3's groups of up to three) do not, so a builder's min_length takes
  the widest (`widest`)."""
  rng = np.random.default_rng([digits, 97])
  return ["9" * digits] + [random_digits(rng, digits) for _ in range(PROBES)]


def widest(candidates, width) -> str:
  """The candidate of largest `width(candidate)` (tokens); the first one on ties, so a tokenizer
  for which all are equally wide keeps the first (e.g. "9" * digits)."""
  best, best_width = None, -1
  for c in candidates:
    w = width(c)
    if w > best_width:
      best, best_width = c, w
  return best


def covering_tokens(tokenizer: ByteTokenizer, ids: np.ndarray, start: int, stop: int
                    ) -> tuple[int, int]:
  """(first, stop): the tokens of `ids` that hold any of the text's bytes [start, stop), by the
  tokenizer's `byte_lengths`. With the byte tokenizer, (start, stop); a BPE token that merges a
  digit with a space or other digits is included whole (the answer's digits are scored on the
  tokens that spell them).

  Raises:
    ValueError: an empty or out-of-range byte span.
  """
  ends = np.cumsum(tokenizer.byte_lengths[np.asarray(ids, np.int64)])
  if not 0 <= start < stop <= (ends[-1] if len(ends) else 0):
    raise ValueError(f"byte span [{start}, {stop}) is empty or outside the {len(ids)} tokens' text")
  first = int(np.searchsorted(ends, start, side="right"))
  last = int(np.searchsorted(ends, stop, side="left"))
  return first, last + 1


# ---------------------------------------------------------------------------- field checks


def _integer(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


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
