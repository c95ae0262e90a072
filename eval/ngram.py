"""What context alone is worth on a corpus: smoothed byte n-gram models, scored like the decoders.

`python -m eval.ngram --config=configs/alibi_tiny.py --out=results/<study>/ngram_reference.json`
fits interpolated Kneser-Ney byte n-gram models of orders 1..`--max_order` (default 6) on the
config's training split and scores them on the validation windows `ppl_vs_length` scores at each
evaluation length (the same documents, windows, protocol and stride, the same token cap), so that
a study's perplexity curves can be read against what a bigram, a trigram, ... model of the same
bytes achieves: a decoder above the bigram line has learned less from its context than two bytes
of it give.

The model (Kneser & Ney, ICASSP 1995; the interpolated form of Chen & Goodman, "An empirical study
of smoothing techniques for language modeling", Computer Speech & Language 13, 1999, eq. (26),
with one discount per order):

    P_k(w | h) = (max(c_k(h w) - D_k, 0) + D_k * T_k(h) * P_{k-1}(w | h')) / c_k(h)

for a context h of k - 1 bytes (h' = h without its first byte); where c_k(h) = 0, P_k(w | h) =
P_{k-1}(w | h'). At the highest order used, c_k are the raw counts of k-grams in the training
documents; at every lower order, the continuation counts N1+(. h w), the number of distinct bytes
seen before h w (Kneser-Ney's marginal constraint). c_k(h) = sum_w c_k(h w), T_k(h) the number of
bytes w with c_k(h w) > 0, D_k = n1 / (n1 + 2 n2) from the counts-of-counts of c_k (Ney, Essen &
Kneser 1994). The recursion ends in P_0(w) = 1/256.

Context and documents: n-grams are counted inside documents (none spans two). A scored byte sees
the bytes before it in its evaluation window (not across a document boundary, not the BOS), at
most `order - 1` of them; where fewer exist (a window's first bytes) the highest order its context
allows is used, with raw counts: the n-gram model has the same context limits as the decoder it
is drawn beside. The k-grams at a document's start have no preceding byte, so they add no
continuation count (one per document: negligible on a corpus of thousands of bytes per document).
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np
from absl import flags
from tqdm import tqdm

from configs.errors import ConfigError, choice, config_from_flag, eval_lengths
from configs.field_ranges import check_ranges
from data import corpora, inputs as data_inputs
from data.tokenizers import ByteTokenizer, get_tokenizer
from eval import perplexity
from runs import command_line
from runs.files import write_json

BYTES = 256


def _kgram_keys(data: np.ndarray, k: int) -> np.ndarray:
  """int64 keys of the k-grams of one document's bytes (big-endian base 256), in order."""
  if len(data) < k:
    return np.zeros(0, np.int64)
  keys = np.zeros(len(data) - k + 1, np.int64)
  for i in range(k):
    keys = keys * BYTES + data[i:len(data) - k + 1 + i].astype(np.int64)
  return keys


def _discount(counts: np.ndarray) -> float:
  """D = n1 / (n1 + 2 n2) of positive counts (0.5 when the counts have no 1 or 2)."""
  n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
  return n1 / (n1 + 2 * n2) if n1 + n2 > 0 and n1 > 0 else 0.5


class _Table:
  """Counts of one order's k-grams (raw or continuation): sorted keys with their counts, and per
  context (key // 256) its total and its number of distinct continuations."""

  def __init__(self, keys: np.ndarray, counts: np.ndarray):
    self.keys, self.counts = keys, counts.astype(np.float64)
    self.discount = _discount(counts)
    contexts, start = np.unique(keys // BYTES, return_index=True)
    self.contexts = contexts
    self.totals = np.add.reduceat(self.counts, start) if len(keys) else np.zeros(0)
    self.types = np.diff(np.r_[start, len(keys)]).astype(np.float64)

  def lookup(self, keys: np.ndarray) -> np.ndarray:
    """The counts of `keys` (0 for unseen)."""
    return _find(self.keys, self.counts, keys)

  def context(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(totals, distinct continuations) of `contexts` (0, 0 for unseen)."""
    return _find(self.contexts, self.totals, contexts), _find(self.contexts, self.types, contexts)


def _find(sorted_keys: np.ndarray, values: np.ndarray, keys: np.ndarray) -> np.ndarray:
  if len(sorted_keys) == 0:
    return np.zeros(len(keys))
  i = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
  return np.where(sorted_keys[i] == keys, values[i], 0.0)


class KneserNey:
  """Interpolated Kneser-Ney byte n-gram model of orders 1..`max_order` (module docstring).

  Args:
    documents: the training documents' bytes.
    max_order: the highest order, 1..7 (a 7-gram key still fits an int64).

  Raises:
    ValueError: `max_order` outside 1..7, or no byte in `documents`.
  """

  def __init__(self, documents: Sequence[bytes], max_order: int = 6):
    if not 1 <= max_order <= 7:
      raise ValueError(f"max_order must be 1..7, got {max_order}")
    arrays = [np.frombuffer(d, np.uint8) for d in documents if len(d)]
    if not arrays:
      raise ValueError("no training bytes to fit an n-gram model on")
    self.max_order = max_order
    self.train_bytes = sum(len(a) for a in arrays)
    self.raw, self.continuation = {}, {}  # per order (continuation: orders below max_order)
    unique_next = None  # the distinct (k+1)-grams, for order k's continuation counts
    for k in range(max_order, 0, -1):
      keys, counts = np.unique(np.concatenate([_kgram_keys(a, k) for a in arrays]),
                               return_counts=True)
      self.raw[k] = _Table(keys, counts)
      if unique_next is not None:
        suffixes, n = np.unique(unique_next % BYTES ** k, return_counts=True)
        self.continuation[k] = _Table(suffixes, n)
      unique_next = keys

  def log_prob(self, contexts: np.ndarray, lengths: np.ndarray, targets: np.ndarray,
               order: int) -> np.ndarray:
    """ln P(target | context) under the order-`order` model, float64 [n].

    Args:
      contexts: int64 [n, >= order - 1], the bytes before each target, the nearest last; only
        the last `lengths[i]` of row i are context (the rest is ignored).
      lengths: int [n], each target's available context, bytes (used up to order - 1).
      targets: int [n], bytes 0..255.
      order: 1..max_order.
    """
    if not 1 <= order <= self.max_order:
      raise ValueError(f"order must be 1..{self.max_order}, got {order}")
    n = len(targets)
    used = np.minimum(np.asarray(lengths), order - 1)  # context bytes used per target
    targets = np.asarray(targets, np.int64)
    p = np.full(n, 1.0 / BYTES)  # order 0: uniform
    for k in range(1, order + 1):
      active = used >= k - 1  # targets whose context reaches order k
      h = np.zeros(n, np.int64)
      for j in range(k - 1):  # the k - 1 bytes before the target, oldest first
        col = contexts[:, contexts.shape[1] - (k - 1) + j]
        h = h * BYTES + np.where(active, col, 0).astype(np.int64)
      top = used == k - 1  # the highest order this target uses: raw counts
      next_p = p.copy()
      for table, rows in ((self.raw[k], active & top),
                          (self.continuation.get(k), active & ~top)):
        if not rows.any():  # (no target uses the top order's continuation counts)
          continue
        c_hw = table.lookup(h[rows] * BYTES + targets[rows])
        total, types = table.context(h[rows])
        d = table.discount
        seen = total > 0
        mixed = (np.maximum(c_hw - d, 0.0) + d * types * p[rows]) / np.where(seen, total, 1.0)
        next_p[rows] = np.where(seen, mixed, p[rows])
      p = next_p
    return np.log(p)


def window_contexts(windows: dict[str, np.ndarray], width: int) -> tuple[np.ndarray, ...]:
  """The scored targets of evaluation windows with their byte contexts inside the window.

  Args:
    windows: `eval.perplexity.evaluation_windows`'s dict (inputs, targets, segment_ids,
      weights; byte ids 0..255 and BOS 256).
    width: context bytes kept per target (order - 1 of the highest order).

  Returns:
    (contexts int64 [n, width], lengths int64 [n], targets int64 [n]) for the targets of weight
    > 0 that are bytes: a target's context is the input bytes of its window from its own
    position back, within its segment (document), BOS excluded.
  """
  inputs, targets = windows["inputs"].astype(np.int64), windows["targets"].astype(np.int64)
  segments, weights = windows["segment_ids"], windows["weights"]
  rows, cols = np.nonzero((weights > 0) & (targets < BYTES))
  contexts = np.zeros((len(rows), width), np.int64)
  lengths = np.zeros(len(rows), np.int64)
  alive = np.ones(len(rows), bool)
  for back in range(width):  # input position cols - back is the context byte nearest-first
    pos = cols - back
    ok = alive & (pos >= 0)
    ok[ok] &= (segments[rows[ok], pos[ok]] == segments[rows[ok], cols[ok]]) & (
        inputs[rows[ok], pos[ok]] < BYTES)
    contexts[ok, width - 1 - back] = inputs[rows[ok], pos[ok]]
    lengths += ok
    alive = ok
  return contexts, lengths, targets[rows, cols]


def score(model: KneserNey, windows: dict[str, np.ndarray], orders: Sequence[int]) -> dict:
  """{order: {"nll": nats per byte, "ppl": exp(nll), "tokens": targets scored}} on `windows`."""
  contexts, lengths, targets = window_contexts(windows, max(orders) - 1)
  out = {}
  for k in orders:  # log_prob reads the last k - 1 columns
    nll = float(-model.log_prob(contexts, lengths, targets, k).mean())
    out[k] = {"nll": nll, "ppl": math.exp(nll), "tokens": int(len(targets))}
  return out


def reference(config, max_order: int = 6) -> dict:
  """The n-gram reference of a text config (module docstring): orders 1..max_order fitted on
  the training split, scored on `config.eval.split`'s windows at every evaluation length with
  the config's protocol, stride and token cap (the windows `ppl_vs_length` scores).

  Returns:
    {"suite": "ngram_reference", ..., "rows": [{length, order, nll (nats per byte), ppl,
    bits_per_byte, tokens}]}.

  Raises:
    ConfigError: not a byte-tokenized text corpus held in memory (a task, SentencePiece, or a
      prepared array_record corpus whose training split is read from shards).
  """
  d, e = config.data, config.eval
  if d.task.name or d.source == "array_record":
    raise ConfigError(f"the n-gram reference needs a text corpus held in memory; got "
                      f"data.task.name={d.task.name!r}, data.source={d.source!r}")
  tokenizer = get_tokenizer(d.tokenizer)
  if not isinstance(tokenizer, ByteTokenizer):
    raise ConfigError(f"the n-gram reference is over bytes: data.tokenizer must be 'byte', got "
                      f"{d.tokenizer!r}")
  splits = data_inputs.load_splits(config)
  model = KneserNey([doc.data for doc in splits["train"]], max_order)
  docs = splits[e.split]
  per_doc = perplexity.tokens_per_document(e.max_tokens_per_length, len(docs))
  orders = list(range(1, max_order + 1))
  rows = []
  for length in tqdm(eval_lengths(config), desc="n-gram reference", leave=False):
    windows = perplexity.evaluation_windows(docs, tokenizer, length, protocol=e.protocol,
                                            stride=e.stride, max_tokens_per_doc=per_doc)
    if not len(windows["inputs"]):
      continue
    for order, r in score(model, windows, orders).items():
      rows.append({"length": int(length), "order": order, "nll": r["nll"], "ppl": r["ppl"],
                   "bits_per_byte": r["nll"] / math.log(2), "tokens": r["tokens"]})
  return {"suite": "ngram_reference", "method": "interpolated Kneser-Ney, one discount per order "
          "(eval/ngram.py)", "corpus": d.text_glob or d.source, "split": e.split,
          "train_documents": len(splits["train"]), "train_bytes": model.train_bytes,
          "protocol": e.protocol, "stride": e.stride, "train_len": d.train_len,
          "max_tokens_per_length": e.max_tokens_per_length, "orders": orders,
          "unit": "nats per byte", "rows": rows}


def main(argv):
  """`python -m eval.ngram --config=... --out=FILE.json [--max_order=6]`."""
  del argv
  if not FLAGS.out:
    raise ConfigError("--out is required (the JSON file to write)")
  if not 1 <= FLAGS.max_order <= 7:
    raise ConfigError(f"--max_order must be 1..7, got {FLAGS.max_order}")
  command_line.check_writable(FLAGS.out, "--out", folder=False)
  config = config_from_flag(FLAGS.config)
  check_ranges(config)  # the fields used: data.*, eval.* (no model, no devices)
  choice(config.eval.split, "eval.split", corpora.HELD_OUT)
  result = reference(config, FLAGS.max_order)
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  write_json(FLAGS.out, result)
  for row in result["rows"]:
    print(f"length {row['length']:>6}  order {row['order']}  ppl {row['ppl']:.3f}  "
          f"({row['bits_per_byte']:.3f} bits/byte, {row['tokens']:,} bytes)")
  print(f"wrote {FLAGS.out}")


FLAGS = flags.FLAGS

if __name__ == "__main__":
  from ml_collections import config_flags  # noqa: PLC0415
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).",
                                  lock_config=True)
  flags.DEFINE_string("out", None, "The JSON file to write.")
  flags.DEFINE_integer("max_order", 6, "The highest n-gram order (1..7).")
  command_line.run(main, usage="python -m eval.ngram --config=CONFIG --out=FILE.json")
