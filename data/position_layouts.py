"""Position layouts: a second position stream per token, derived from the tokens themselves.

Most schemes read one position id per token (`positions`, int32 [batch, seq]). Two read a
second stream that only the text can tell (the hooks of models/positions/base.py then see it
through the scheme's `embed_stream` / `attention_stream`):

  digits    Abacus embeddings (McLeish et al., "Transformers Can Do Arithmetic with the Right
            Embeddings", arXiv 2405.17399, Sec. 3.1): `aux_positions` is the 1-based index of a
            digit inside its run of consecutive digits (0 for every other token), so the i-th
            digit of every number shares one embedding. At training time every digit index of an
            example is shifted by one offset k drawn uniformly from {0, ..., max_offset} (the
            paper's random offset, k <= 100 there), so indices beyond the longest trained number
            are trained too; evaluation uses k = 0. Ours vs. the released code
            (github.com/mcleish7/arithmetic, abacus.py): it draws one k per forward pass for the
            whole batch; we draw one per document of each window (a packed task row holds many
            examples; same distribution per example, more draws per step), from the window's own
            generator (resumption is exact, as for data/position_samplers.py).
  segments  BiPE (He et al., "Two Stones Hit One Bird: Bilevel Positional Encoding for Better
            Length Extrapolation", arXiv 2401.16421, Sec. 3): the text is cut into segments
            (sentences) that end at a separator token; `positions` becomes the intra-segment
            index (0 at each segment's first token) and `aux_positions` the segment index
            (0 for a document's first segment). The separator itself ends its segment, so the
            token after it starts the next one (the released code's `get_bilevel_ids`,
            github.com/zhenyuhe00/BiPE). Ours restarts both counts at every document start of a
            packed window (the released code packs without resets).

Both are pure functions of (tokens, segment_ids) plus, for `digits`, the training offsets, and are
written once for numpy and jax.numpy alike (`xp`): the data pipeline runs them per example
(numpy, grain), the model runs them inside jit when a batch comes without `aux_positions`
(evaluation: offset 0; models/decoder.py `Decoder.position_streams`), and greedy decoding runs
them over its token buffer (models/decoding.py). So a prompt's streams never depend on which
path built them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from configs.errors import ConfigError
from data.array_ops import array_module, cummax
from data import position_coupling
from data.tokenizers import get_tokenizer

DIGITS = "digits"
SEGMENTS = "segments"
LAYOUTS = (DIGITS, SEGMENTS)


def _document_starts(segment_ids, xp):
  """bool [..., seq]: True at the first token of each document (and at index 0)."""
  prev = xp.concatenate([segment_ids[..., :1] - 1, segment_ids[..., :-1]], axis=-1)
  return segment_ids != prev


def _run_index(starts, xp):
  """int32 [..., seq]: index of each token minus the index of the last True of `starts` at or
  before it (0 at a start). starts[..., 0] must be True."""
  index = xp.broadcast_to(xp.arange(starts.shape[-1], dtype=xp.int32), starts.shape)
  return (index - cummax(xp.where(starts, index, 0))).astype(xp.int32)


def digit_positions(tokens, segment_ids, digit_ids: tuple[int, ...]):
  """Abacus digit indices (arXiv 2405.17399, Sec. 3.1), without the training offset.

  Args:
    tokens, segment_ids: int [..., seq] (numpy or jax arrays).
    digit_ids: the token ids that are single digits.

  Returns:
    int32 [..., seq]: 1, 2, 3, ... along each run of consecutive digit tokens (a run never
    crosses a document start), 0 for every other token.
  """
  xp = array_module(tokens)
  is_digit = xp.isin(tokens, xp.asarray(digit_ids, dtype=tokens.dtype))
  doc = _document_starts(segment_ids, xp)
  prev_digit = xp.concatenate([xp.zeros_like(is_digit[..., :1]), is_digit[..., :-1]], axis=-1)
  starts = doc | (is_digit & ~prev_digit) | ~is_digit
  return xp.where(is_digit, _run_index(starts, xp) + 1, 0).astype(xp.int32)


def segment_positions(tokens, segment_ids, separator_ids: tuple[int, ...]):
  """BiPE's two indices (arXiv 2401.16421, Sec. 3): (intra-segment index, segment index).

  Args:
    tokens, segment_ids: int [..., seq].
    separator_ids: the token ids that end a segment (e.g. '.', '!', '?', newline).

  Returns:
    (intra, segment), int32 [..., seq] each: `intra` counts tokens from the segment's first
    token (0); `segment` counts the segments of the document before this one (0 in its first).
    A separator belongs to the segment it ends; both restart at each document start.
  """
  xp = array_module(tokens)
  is_sep = xp.isin(tokens, xp.asarray(separator_ids, dtype=tokens.dtype))
  doc = _document_starts(segment_ids, xp)
  after_sep = xp.concatenate([xp.zeros_like(is_sep[..., :1]), is_sep[..., :-1]], axis=-1)
  starts = doc | after_sep
  count = xp.cumsum(starts.astype(xp.int32), axis=-1)
  segment = count - cummax(xp.where(doc, count, 0))
  return _run_index(starts, xp), segment.astype(xp.int32)


@functools.lru_cache(maxsize=8)
def _token_classes(tokenizer) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
  """(digit ids, {character: ids whose text ends with it}) of a tokenizer (cached)."""
  digits, last = [], {}
  for i in range(tokenizer.vocab_size):
    text = tokenizer.decode_bytes([i])
    stripped = text.strip()
    if len(stripped) == 1 and stripped.isdigit():  # '7' (or SentencePiece's ' 7')
      digits.append(i)
    chars = text.decode("utf-8", errors="ignore")  # a lone non-ASCII byte is no character
    if chars:
      last.setdefault(chars[-1], []).append(i)
  return tuple(digits), {c: tuple(ids) for c, ids in last.items()}


@dataclasses.dataclass(frozen=True)
class PositionLayout:
  """One layout, its token classes resolved for a tokenizer (static, hashable).

  Attributes:
    name: "digits" or "segments".
    token_ids: the digit ids ("digits") or the separator ids ("segments").
    max_offset: training offsets are drawn from {0, ..., max_offset} ("digits"; 0 otherwise).
    seed: seed of the per-example offset generators.
  """

  name: str
  token_ids: tuple[int, ...]
  max_offset: int = 0
  seed: int = 0

  def streams(self, tokens, positions, segment_ids, offsets=None) -> tuple[Any, Any]:
    """(positions, aux_positions) the scheme reads, int32 [..., seq] each.

    Args:
      tokens, positions, segment_ids: int32 [..., seq] (numpy or jax arrays).
      offsets: int [...] training offsets per sequence or [..., seq] per token ("digits"), or
        None (evaluation: 0).

    Returns:
      "digits": (positions unchanged, digit indices + offset at digits);
      "segments": (intra-segment indices, segment indices).
    """
    if self.name == DIGITS:
      aux = digit_positions(tokens, segment_ids, self.token_ids)
      if offsets is not None:
        xp = array_module(aux)
        offsets = xp.asarray(offsets, xp.int32)
        offsets = offsets if offsets.ndim == aux.ndim else offsets[..., None]
        aux = xp.where(aux > 0, aux + offsets, 0)
      return positions, aux.astype(array_module(aux).int32)
    return segment_positions(tokens, segment_ids, self.token_ids)

  def rng(self, index: int, stream: int = 0) -> np.random.Generator:
    """The generator of example `index` of process `stream` (as data/position_samplers.py)."""
    return np.random.default_rng([self.seed, stream, index])

  def apply(self, index: int, example: dict[str, np.ndarray], *,
            stream: int = 0) -> dict[str, np.ndarray]:
    """Grain `map_with_index` transform of one training window (int32 [L] arrays): a copy with
    the layout's `positions` and `aux_positions`. Each document of the window (a run of equal
    `segment_ids`: a packed task row holds many examples) draws its own digit offset, from the
    window's generator (a pure function of seed, stream and index: resumption reproduces it)."""
    offsets = None
    if self.name == DIGITS and self.max_offset > 0:
      segment_ids = example["segment_ids"]
      document = np.cumsum(_document_starts(segment_ids, np)) - 1  # 0, 1, ... per document
      draws = self.rng(index, stream).integers(0, self.max_offset + 1, size=document[-1] + 1)
      offsets = draws[document]
    out = dict(example)
    out["positions"], out["aux_positions"] = self.streams(
        example["inputs"], example["positions"], example["segment_ids"], offsets)
    return out


def build(name: str, cfg, tokenizer, seed: int = 0) -> PositionLayout | None:
  """The layout `name` for `tokenizer`, or None for "" (a scheme that reads one stream).

  Args:
    name: a scheme's `position_layout` ("", "digits" or "segments").
    cfg: the `model.position` section (abacus_max_offset; bipe_separators).
    tokenizer: the run's tokenizer (data/tokenizers.py).
    seed: seed of the training offsets.

  Raises:
    ConfigError: an unknown layout, or a tokenizer without digit / separator tokens.
  """
  if not name:
    return None
  if name not in LAYOUTS:
    raise ConfigError(f"position layout {name!r} is unknown; choose one of {LAYOUTS}")
  digits, by_last = _token_classes(tokenizer)
  if name == DIGITS:
    if not digits:
      raise ConfigError("model.position.kind='abacus' needs single-digit tokens; this tokenizer "
                        "has none")
    return PositionLayout(DIGITS, digits, int(cfg.abacus_max_offset), seed)
  separators = tuple(sorted({i for c in cfg.bipe_separators for i in by_last.get(c, ())}))
  if not separators:
    raise ConfigError(f"model.position.bipe_separators={cfg.bipe_separators!r} matches no token "
                      "of this tokenizer")
  return PositionLayout(SEGMENTS, separators, 0, seed)


def from_config(config, name: str) -> PositionLayout | None:
  """`build` for an experiment config: the layout `name` (a scheme's `position_layout`) for the
  run's own tokenizer (`data.tokenizer`), seed 0; None for "". The model derives a scheme's
  second position stream from the tokens with it (models/decoder.py). A run with
  data.task.position_coupling='addition' gets the coupled layout instead (data/
  position_coupling.py: its ids are the `positions` of any one-stream scheme; validation refuses
  coupling with a scheme that has a layout of its own).

  Raises:
    ConfigError: as `build`, or for a tokenizer that cannot be loaded (data/tokenizers.py).
  """
  if position_coupling.kind_of(config):
    return position_coupling.from_config(config, get_tokenizer(config.data.tokenizer))
  return build(name, config.model.position, get_tokenizer(config.data.tokenizer)) if name else None
