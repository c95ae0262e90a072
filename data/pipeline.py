"""The grain input pipeline: documents -> token ids -> packed windows -> shuffled batches.

Training data is one stream: each document's tokens, preceded by BOS, concatenated in name
order. The stream is cut into non-overlapping windows of `train_len + 1` tokens (consecutive
windows share one boundary token, so every token is a target exactly once per epoch). Each window
becomes one example:

  inputs      int32 [train_len]  tokens 0..L-1 of the window
  targets     int32 [train_len]  tokens 1..L of the window
  positions   int32 [train_len]  position ids: 0 at the window start, restarting at 0 at each BOS
  segment_ids int32 [train_len]  1 for the first document in the window, +1 at every BOS

so attention never crosses documents and positional schemes see true in-document positions.

Documents come as text (`Document`: tokenized here) or as token ids (`TokenizedDocument`, and
the training split of a prepared corpus, `PreparedSplit`: `data.source = "array_record"`). A
`PreparedSplit` is packed lazily (`RecordTokens`, `RecordStarts`): window i reads only the
records it overlaps, so the training split never has to fit in memory, and the same documents
give the same windows either way.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import grain
import numpy as np

from configs.errors import ConfigError
from data.corpora import Document, PreparedSplit, TokenizedDocument
from data.position_layouts import PositionLayout
from data.sampler_base import PositionSampler
from data.tokenizers import ByteTokenizer


def document_ids(doc: Document | TokenizedDocument, tokenizer: ByteTokenizer) -> np.ndarray:
  """A document's token ids (without BOS): `doc.ids` if it is already tokenized, else encoded.

  Returns:
    int32 [num_tokens].

  Raises:
    ValueError: a `TokenizedDocument` made by another tokenizer than `tokenizer`.
  """
  if isinstance(doc, TokenizedDocument):
    if doc.tokenizer != tokenizer:
      raise ValueError(f"document {doc.name!r} was tokenized by {doc.tokenizer!r}, not {tokenizer!r}")
    return doc.ids
  return tokenizer.encode(doc.data)


def pack_stream(docs: Sequence[Document], tokenizer: ByteTokenizer) -> tuple[np.ndarray, np.ndarray]:
  """Concatenates documents into one token stream, BOS before each document.

  Returns:
    tokens: int32 [total] token ids.
    doc_start: bool [total], True at each BOS.
  """
  parts, starts = [], []
  for doc in docs:
    ids = document_ids(doc, tokenizer)
    parts.append(np.concatenate([[tokenizer.bos_id], ids]).astype(np.int32))
    flag = np.zeros(len(ids) + 1, dtype=bool)
    flag[0] = True
    starts.append(flag)
  return np.concatenate(parts), np.concatenate(starts)


def window_fields(window: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
  """Builds one example from a window of `L + 1` tokens.

  Args:
    window: int32 [L + 1] token ids.
    starts: bool [L + 1], True where a document starts (a BOS).

  Returns:
    dict of int32 [L] arrays: inputs, targets, positions, segment_ids (see module docstring).
  """
  inp_starts = starts[:-1]
  seg = np.cumsum(inp_starts) + (0 if inp_starts[0] else 1)
  idx = np.arange(len(inp_starts))
  last_start = np.maximum.accumulate(np.where(inp_starts, idx, 0))
  return {
      "inputs": window[:-1].astype(np.int32),
      "targets": window[1:].astype(np.int32),
      "positions": (idx - last_start).astype(np.int32),
      "segment_ids": seg.astype(np.int32),
  }


@dataclasses.dataclass(frozen=True)
class PackedWindows:
  """A random-access source of packed training windows (a grain `RandomAccessDataSource`).

  Window `i` covers stream tokens `[i * train_len, (i + 1) * train_len]` (inclusive): its
  inputs are tokens `i L .. (i + 1) L - 1` and its targets `i L + 1 .. (i + 1) L`. With
  `anchor_id` (data.bos_anchor), window `i` is that token (BOS) followed by stream tokens
  `[i L, (i + 1) L)`: inputs `BOS, i L .. (i + 1) L - 2`, targets `i L .. (i + 1) L - 1`, so every
  window opens with the anchor at position 0 (Kazemnejad et al., arXiv 2305.19466, Section 4:
  NoPE's first layer can recover absolute positions from a known first token; without it, 99.8%
  of the default corpus's windows start mid-document) and every stream token is still a target
  exactly once per epoch. The anchor starts the window's first segment: positions count from it.

  Attributes:
    tokens: int32 [total] token stream: an array (`pack_stream`) or a lazy `RecordTokens`.
    doc_start: bool [total], True at each BOS: an array or a lazy `RecordStarts`.
    train_len: window length L, tokens.
    anchor_id: the token put before every window (the tokenizer's BOS), or None (no anchor).
  """

  tokens: np.ndarray | RecordTokens
  doc_start: np.ndarray | RecordStarts
  train_len: int
  anchor_id: int | None = None

  def __len__(self) -> int:
    if self.anchor_id is not None:
      return len(self.tokens) // self.train_len
    return (len(self.tokens) - 1) // self.train_len

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    if not 0 <= i < len(self):
      raise IndexError(i)
    lo = i * self.train_len
    if self.anchor_id is not None:
      hi = lo + self.train_len
      return window_fields(
          np.concatenate([[self.anchor_id], self.tokens[lo:hi]]).astype(np.int32),
          np.concatenate([[True], self.doc_start[lo:hi]]))
    hi = lo + self.train_len + 1
    return window_fields(self.tokens[lo:hi], self.doc_start[lo:hi])


def record_offsets(lengths: np.ndarray) -> np.ndarray:
  """Stream offset of each document's BOS when documents of `lengths` tokens are packed.

  Returns:
    int64 [documents + 1]: offsets[k] is document k's BOS; offsets[-1] the stream length.
  """
  return np.concatenate([[0], np.cumsum(np.asarray(lengths, np.int64) + 1)])


@dataclasses.dataclass(frozen=True)
class RecordStarts:
  """`doc_start` of the stream of a `PreparedSplit`, computed from document lengths alone.

  Slicing `[lo:hi]` gives bool [hi - lo], True at each BOS, as `pack_stream`'s `doc_start`.
  """

  offsets: np.ndarray  # int64 [documents + 1], from `record_offsets`

  def __len__(self) -> int:
    return int(self.offsets[-1])

  def __getitem__(self, window: slice) -> np.ndarray:
    lo, hi, _ = window.indices(len(self))
    flags = np.zeros(max(0, hi - lo), bool)
    first, last = np.searchsorted(self.offsets[:-1], [lo, hi])
    flags[self.offsets[first:last] - lo] = True
    return flags


@dataclasses.dataclass(frozen=True)
class RecordTokens:
  """The token stream of a `PreparedSplit` (BOS + ids per document, in record order), lazily.

  Slicing `[lo:hi]` gives int32 [hi - lo], the tokens `pack_stream` would give for the same
  documents, reading only the records that overlap the slice.
  """

  split: PreparedSplit
  offsets: np.ndarray  # int64 [documents + 1], from `record_offsets`
  bos_id: int

  def __len__(self) -> int:
    return int(self.offsets[-1])

  def __getitem__(self, window: slice) -> np.ndarray:
    lo, hi, _ = window.indices(len(self))
    if hi <= lo:
      return np.zeros(0, np.int32)
    first = int(np.searchsorted(self.offsets, lo, side="right")) - 1
    last = int(np.searchsorted(self.offsets, hi, side="left"))
    parts = []
    for ids in self.split.read_ids(range(first, last)):
      parts += [np.array([self.bos_id], np.int32), ids]
    base = int(self.offsets[first])
    return np.concatenate(parts)[lo - base:hi - base]


def packed_windows(docs: Sequence[Document] | PreparedSplit, tokenizer: ByteTokenizer,
                   train_len: int, bos_anchor: bool = False) -> PackedWindows:
  """Packs documents (BOS before each, in order) into windows of `train_len + 1` tokens.

  Documents in memory are tokenized and concatenated (`pack_stream`); a `PreparedSplit` is
  packed lazily from its records (`RecordTokens`, `RecordStarts`), giving the same windows.
  `bos_anchor`: every window opens with the tokenizer's BOS (`PackedWindows.anchor_id`).

  Raises:
    ValueError: a `PreparedSplit` prepared with another tokenizer than `tokenizer`.
  """
  anchor = tokenizer.bos_id if bos_anchor else None
  if isinstance(docs, PreparedSplit):
    if docs.tokenizer != tokenizer:
      raise ValueError(f"{docs!r} was tokenized by {docs.tokenizer!r}, not {tokenizer!r}")
    offsets = record_offsets(docs.lengths)
    return PackedWindows(RecordTokens(docs, offsets, tokenizer.bos_id), RecordStarts(offsets),
                         train_len, anchor)
  return PackedWindows(*pack_stream(docs, tokenizer), train_len, anchor)


def train_dataset(docs: Sequence[Document] | PreparedSplit, tokenizer: ByteTokenizer, *, train_len: int,
                  batch_size: int, seed: int, process_index: int = 0,
                  process_count: int = 1,
                  sampler: PositionSampler | None = None, prefetch: int | None = 4,
                  layout: PositionLayout | None = None,
                  bos_anchor: bool = False) -> grain.IterDataset:
  """Infinite, shuffled, batched training data for this process.

  `docs` are text documents, tokenized documents, or the training split of a prepared corpus
  (`PreparedSplit`, read lazily; see `packed_windows`). Windows are sharded across processes
  (`process_index::process_count`, i.e. `jax.process_index()` / `jax.process_count()`) before
  shuffling, so each host reads a disjoint part; `batch_size` is the per-process batch. The shuffle is a fresh
  permutation every epoch (grain's `MapDataset.shuffle` reseeds per epoch under `repeat`).
  With `sampler` (data/position_samplers.py: randomized positions, arXiv 2305.16843, or PoSE,
  arXiv 2309.10400), each example's `positions` are redrawn from the sampler's seed, this
  process's index and the example's index in the repeated stream, so resumption reproduces them
  and every epoch draws afresh; evaluation data never goes through it. With `layout`
  (data/position_layouts.py: Abacus digits, BiPE segments), each example then gets its
  `aux_positions` (offsets drawn the same way). With `bos_anchor` (data.bos_anchor) every
  window opens with BOS (`PackedWindows`). `prefetch` batches are
  read ahead by one background thread (grain ReadOptions; 0 = read in the caller's thread):
  the batches are numpy slices of memory, so one thread keeps next() under a millisecond, and
  grain's default (None here: 16 threads, 500 batches ahead) measured up to 4% slower per step
  on 2 CPU cores (bench/RESULTS.md, "Training throughput").

  Returns:
    A grain `IterDataset` of dicts of int32 `[batch_size, train_len]` arrays (see module doc);
    its iterator's `get_state()` / `set_state()` resume the exact order.

  Raises:
    ConfigError: if the documents give fewer windows than one batch.
  """
  source = packed_windows(docs, tokenizer, train_len, bos_anchor)
  ds = grain.MapDataset.source(source)[process_index::process_count]
  if len(ds) < batch_size:
    raise ConfigError(f"the training split gives {len(ds)} windows of data.train_len={train_len} "
                      f"on this process, fewer than one batch of {batch_size} (data.batch_size); "
                      "use more text, a shorter train_len or a smaller batch")
  ds = ds.shuffle(seed=seed).repeat(None)
  if sampler is not None:
    ds = ds.map_with_index(functools.partial(sampler.apply, stream=process_index))
  if layout is not None:
    ds = ds.map_with_index(functools.partial(layout.apply, stream=process_index))
  ds = ds.batch(batch_size, drop_remainder=True)
  if prefetch is None:
    return ds.to_iter_dataset()
  return ds.to_iter_dataset(grain.ReadOptions(num_threads=1 if prefetch > 0 else 0,
                                              prefetch_buffer_size=max(prefetch, 1)))


def document_windows(docs: Sequence[Document], tokenizer: ByteTokenizer, length: int,
                     max_tokens_per_doc: int | None = None) -> dict[str, np.ndarray]:
  """Non-overlapping evaluation windows that start at each document start.

  Each document (BOS + its tokens, `document_ids`) is cut into windows of `length + 1` tokens starting at its BOS;
  each window holds one document only, its positions run 0..length-1, and a final partial window
  is dropped so that every scored token has the same context budget. With `max_tokens_per_doc`,
  only the first `ceil(max_tokens_per_doc / length)` windows of each document are kept, so every
  length scores the same document prefixes (up to rounding to whole windows).

  Returns:
    dict of int32 [num_windows, length] arrays: inputs, targets, positions, segment_ids (all 1).
    Empty ([0, length]) when no document is long enough.
  """
  rows = []
  for doc in docs:
    ids = np.concatenate([[tokenizer.bos_id], document_ids(doc, tokenizer)]).astype(np.int32)
    n = (len(ids) - 1) // length
    if max_tokens_per_doc is not None:
      n = min(n, -(-max_tokens_per_doc // length))
    rows.extend(ids[w * length: w * length + length + 1] for w in range(n))
  if not rows:
    empty = np.zeros((0, length), np.int32)
    return {k: empty for k in ("inputs", "targets", "positions", "segment_ids")}
  windows = np.stack(rows)
  return {
      "inputs": windows[:, :-1],
      "targets": windows[:, 1:],
      "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (len(rows), length)).copy(),
      "segment_ids": np.ones((len(rows), length), np.int32),
  }


def sliding_document_windows(docs: Sequence[Document], tokenizer: ByteTokenizer, length: int,
                             stride: int, max_tokens_per_doc: int | None = None
                             ) -> dict[str, np.ndarray]:
  """Overlapping (sliding) evaluation windows from each document start, with per-token weights.

  The sliding-window evaluation of Press et al. (ALiBi, arXiv 2108.12409, Section 4 and their
  appendix on sliding window evaluation): window w of a document (BOS + bytes) holds tokens
  w*stride .. w*stride + length (length + 1 tokens: inputs and shifted targets). The first window
  scores all `length` targets; every later window scores only its last `stride` targets (the
  ones no earlier window scored), so each scored target is scored exactly once and with the most
  context the window allows: the target at document index t (BOS = index 0) sees all t tokens
  before it when t <= L, else the L - S + 1 + ((t - L - 1) mod S) tokens before it. Windows stop
  at the last one that fits in the document: the final stretch of fewer than `stride` targets
  after it is not scored (as the partial final window of `document_windows` is dropped), so
  `stride == length` gives exactly `document_windows`, and a document with fewer than `length`
  targets gives no window. Each document contributes `length + (n - 1) * stride` scored targets for its n windows.

  With `max_tokens_per_doc` (scored targets per document), only the first
  n = 1 + ceil(max(0, max_tokens_per_doc - length) / stride) windows of each document are kept
  (the fewest that score at least that many targets; none when it is <= 0), so every length scores
  the same document prefixes up to rounding to whole strides.

  Memory: about 12 bytes per window token on the host (inputs, targets, weights;
  positions and segment_ids are read-only broadcast views), i.e. ~12 * length * tokens / stride.

  Args:
    docs: documents (text, or tokenized: `document_ids`).
    tokenizer: the tokenizer (BOS is prepended to every document).
    length: window length L, tokens (>= 1).
    stride: window advance S, tokens (1 <= S <= L).
    max_tokens_per_doc: scored targets per document (None = all windows).

  Returns:
    dict of [num_windows, length] arrays: int32 inputs, targets, positions (0..L-1), segment_ids
    (all 1), and float32 weights (1 for scored targets, 0 for targets an earlier window of the
    same document scored). Empty ([0, length]) when no document has `length` targets.

  Raises:
    ValueError: length < 1, or stride outside [1, length].
  """
  if not isinstance(length, (int, np.integer)) or length < 1:
    raise ValueError(f"window length must be a positive integer; got {length!r}")
  if not isinstance(stride, (int, np.integer)) or not 1 <= stride <= length:
    raise ValueError(f"stride must be an integer in [1, length={length}]; got {stride!r}")
  rows, first_scored = [], []
  for doc in docs:
    ids = np.concatenate([[tokenizer.bos_id], document_ids(doc, tokenizer)]).astype(np.int32)
    num_targets = len(ids) - 1
    if num_targets < length:
      continue
    n = (num_targets - length) // stride + 1
    if max_tokens_per_doc is not None:
      n = min(n, 0 if max_tokens_per_doc <= 0
              else 1 + max(0, -(-(max_tokens_per_doc - length) // stride)))
    if n == 0:
      continue
    rows.append(np.lib.stride_tricks.sliding_window_view(ids, length + 1)[np.arange(n) * stride])
    first_scored.append(np.r_[0, np.full(n - 1, length - stride)])
  if not rows:
    empty = np.zeros((0, length), np.int32)
    return {"inputs": empty, "targets": empty, "positions": empty, "segment_ids": empty,
            "weights": np.zeros((0, length), np.float32)}
  windows = np.concatenate(rows)
  first = np.concatenate(first_scored)
  num = len(windows)
  return {
      "inputs": windows[:, :-1],
      "targets": windows[:, 1:],
      "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (num, length)),
      "segment_ids": np.broadcast_to(np.int32(1), (num, length)),
      "weights": (np.arange(length)[None, :] >= first[:, None]).astype(np.float32),
  }
