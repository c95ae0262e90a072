"""Perplexity vs length on held-out documents (non-overlapping windows from document starts).

Protocol (the "nonoverlapping" evaluation of Press et al., arXiv 2108.12409, Section 4): each
held-out document (BOS + bytes) is cut into windows of L + 1 tokens starting at its BOS; every
window is scored independently with positions 0..L-1 (partial final windows are dropped, so each
scored token has the context the window allows). The NLL is averaged over scored tokens
(token-weighted across documents). With the byte tokenizer one token is one byte, so the mean NLL
is in nats per byte and bits per byte = NLL / ln 2.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

from configs.validate import ConfigError
from data.corpora import Document
from data.pipeline import document_windows
from data.tokenizers import ByteTokenizer
from models.sharding import BATCH, batch_sharding, replicated

FIELDS = ("inputs", "targets", "positions", "segment_ids")


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Per-token negative log-likelihood, nats.

  Args:
    logits: float32 [batch, seq, vocab]; targets: int32 [batch, seq].

  Returns:
    float32 [batch, seq].
  """
  logz = jax.nn.logsumexp(logits, axis=-1)
  picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  return logz - picked


def make_nll_fn(graphdef: nnx.GraphDef, mesh) -> Callable:
  """Compiles `(params, batch) -> (sum of NLL in nats, number of scored tokens)`.

  `batch` holds int32 [batch, seq] `inputs`, `targets`, `positions`, `segment_ids` and float32
  `weights` (0 for padding rows); the batch axis is sharded over ("data", "fsdp").
  """
  def nll(params, batch):
    model = nnx.merge(graphdef, params)
    logits = model(batch["inputs"], batch["positions"], batch["segment_ids"])
    per_token = token_nll(logits, batch["targets"]) * batch["weights"]
    return per_token.sum(), batch["weights"].sum()

  return jax.jit(nll, out_shardings=(replicated(mesh), replicated(mesh)))


def batch_parallelism(mesh) -> int:
  """Number of devices the batch axis is split over (mesh data * fsdp)."""
  return math.prod(mesh.shape[a] for a in BATCH)


def score_windows(nll_fn: Callable, params, windows: dict[str, np.ndarray], *, batch_size: int,
                  mesh, desc: str | None = None) -> tuple[float, int]:
  """Sums the NLL over all windows, in batches (padding rows get weight 0).

  Args:
    nll_fn: from `make_nll_fn`.
    params: the model's parameter pure dict.
    windows: dict of int32 [num_windows, length] arrays (see data.pipeline.document_windows).
    batch_size: windows per forward pass; rounded up to a multiple of the batch parallelism.
    mesh: device mesh.
    desc: tqdm label; None hides the progress bar.

  Returns:
    (sum of NLL in nats, tokens scored).
  """
  n, length = windows["inputs"].shape
  par = batch_parallelism(mesh)
  batch_size = -(-max(1, batch_size) // par) * par
  sharding = batch_sharding(mesh)
  total, count = 0.0, 0
  for lo in tqdm(range(0, n, batch_size), desc=desc, disable=desc is None, leave=False):
    rows = min(batch_size, n - lo)
    batch = {}
    for key in FIELDS:
      arr = np.zeros((batch_size, length), np.int32)
      arr[:rows] = windows[key][lo:lo + rows]
      batch[key] = arr
    weights = np.zeros((batch_size, length), np.float32)
    weights[:rows] = 1.0
    batch["weights"] = weights
    batch = {k: jax.device_put(v, sharding) for k, v in batch.items()}
    s, c = nll_fn(params, batch)
    total += float(s)
    count += int(round(float(c)))
  return total, count


def check_lengths(lengths: Sequence[int], max_position: int | None, kind: str,
                  hint: str = "") -> None:
  """Refuses, before compilation, lengths the positional scheme cannot represent.

  Raises:
    ConfigError: a length < 1, or above `max_position` (e.g. `learned` without clamping).
  """
  if any(L < 1 for L in lengths):
    raise ConfigError(f"evaluation lengths must be >= 1 token; got {sorted(lengths)}")
  if max_position is not None and max(lengths) > max_position:
    raise ConfigError(
        f"evaluation length {max(lengths)} exceeds the {max_position} positions that "
        f"model.position.kind={kind!r} can represent; {hint + ', or ' if hint else ''}"
        "lower eval.length_multipliers")


def unrepresentable(lengths: Sequence[int], max_position: int | None) -> list[int]:
  """The lengths (tokens) above `max_position`, which the scheme cannot evaluate."""
  return [] if max_position is None else [L for L in lengths if L > max_position]


def ppl_vs_length(nll_fn: Callable, params, docs: Sequence[Document], tokenizer: ByteTokenizer,
                  lengths: Sequence[int], *, max_tokens_per_length: int, batch_tokens: int,
                  mesh, skip: Sequence[int] = (), skip_reason: str = "") -> list[dict]:
  """Perplexity at each evaluation length (see the module docstring for the protocol).

  Args:
    nll_fn: from `make_nll_fn`; params: parameter pure dict.
    docs: held-out documents.
    lengths: evaluation lengths, tokens.
    max_tokens_per_length: scoring budget per length (0 = every window of every document); the
      budget is split evenly over documents and taken from their starts, so every length scores
      the same text up to rounding to whole windows.
    batch_tokens: tokens per forward pass (memory bound); batch = max(1, batch_tokens // length).
    mesh: device mesh.
    skip: lengths not to evaluate (e.g. `unrepresentable` ones); their rows carry `skipped`.
    skip_reason: the text of `skipped`.

  Returns:
    One dict per length: length, windows, tokens (scored), nll (nats per token), ppl,
    bits_per_byte. Lengths longer than every document, or skipped, give tokens = 0 and nll = None.
  """
  per_doc = None if max_tokens_per_length <= 0 else -(-max_tokens_per_length // len(docs))
  rows = []
  for length in tqdm(list(lengths), desc="ppl vs length", leave=False):
    if length in skip:
      rows.append({"length": int(length), "windows": 0, "tokens": 0, "nll": None, "ppl": None,
                   "bits_per_byte": None, "skipped": skip_reason})
      continue
    windows = document_windows(docs, tokenizer, length, per_doc)
    total, count = score_windows(nll_fn, params, windows, batch_size=batch_tokens // length,
                                 mesh=mesh)
    nll = total / count if count else None
    rows.append({
        "length": int(length),
        "windows": int(windows["inputs"].shape[0]),
        "tokens": count,
        "nll": nll,
        "ppl": math.exp(nll) if nll is not None else None,
        "bits_per_byte": nll / math.log(2) if nll is not None else None,
    })
  return rows


def unigram_entropy(docs: Sequence[Document]) -> float:
  """Entropy of the byte unigram distribution of `docs`, nats (the no-context baseline)."""
  counts = np.zeros(256, np.int64)
  for doc in docs:
    counts += np.bincount(np.frombuffer(doc.data, np.uint8), minlength=256)
  p = counts[counts > 0] / counts.sum()
  return float(-(p * np.log(p)).sum())


__all__ = ["check_lengths", "make_nll_fn", "ppl_vs_length", "score_windows", "token_nll",
           "unigram_entropy"]
