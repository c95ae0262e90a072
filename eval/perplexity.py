"""Perplexity vs length, and loss by token position, on held-out documents.

Every held-out document (BOS + bytes) is evaluated on its own, from its BOS: windows never cross
documents, and positions run 0..L-1 in every window of length L. Two protocols
(`eval.protocol`):

  non_overlapping  The "nonoverlapping" evaluation of Press et al. (ALiBi, arXiv 2108.12409,
                   Section 4): the document is cut into windows of L + 1 tokens side by side and
                   every window scores all its L targets, so a token's context ranges from 1 to L
                   tokens depending on where it falls in its window.
  sliding          Their sliding-window evaluation (same paper, Section 4 and the appendix on
                   sliding window evaluation): windows of L tokens advance by the stride S
                   (`eval.stride`; 0 = L // 2; S = 1 is the paper's protocol, L times the compute
                   of non_overlapping): the first window scores all L targets, each later window
                   only its last S (the ones not scored before). Every target of the document
                   prefix is scored exactly once, with the most context the window allows (at
                   least L - S + 1 tokens after the first window). S = L is non_overlapping.

Final partial stretch: windows stop at the last one that fits inside the document. With
non_overlapping, the final partial window (fewer than L targets) is dropped; with sliding, the
final stretch of fewer than S targets after the last full window is not scored. So every scored
token has a full window, S = L reproduces non_overlapping exactly, and a document with fewer than
L targets (L + 1 tokens with BOS) contributes nothing at length L.

Budget: `eval.max_tokens_per_length` scored targets per length, split evenly over the documents
(ceil(budget / documents) each) and taken from their starts; each document scores whole windows
(non_overlapping) or whole strides (sliding) up to the first count >= its share. So the lengths
score the same text only where every document gives its share, rounded to the same count, at
every length: a document shorter than a length, or than its share in whole windows, gives less
(or nothing). `eval.suites.perplexity.scored_text` says whether they do (`same_text`, recorded
in the result with the targets common to every length), and a length that no document reaches
is skipped with that reason (`ppl_vs_length`), never left as an empty row.

Both protocols score with per-token weights (windows["weights"], float32, 0 = not scored; all
ones when absent), in one jitted pass that returns per-position sums: the NLL is averaged over
scored tokens (token-weighted across documents), and the same pass gives the loss by token
position (the position index 0..L-1 within the window, i.e. position + 1 context tokens), which
is reported in log-spaced bins (`position_bin_edges`). With sliding and S < L, positions below
L - S are scored only in each document's first window.

Units: the NLL is the mean over scored tokens, nats per token (per byte with the byte
tokenizer). Bits per byte divide the summed NLL by the bytes of text the scored tokens stand
for (`scored_bytes`: the tokenizer's `byte_lengths` of the scored targets) and by ln 2, so they
compare across tokenizers: NLL / ln 2 with the byte tokenizer, (nats per token x tokens /
bytes) / ln 2 under SentencePiece.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

from configs.errors import ConfigError, eval_lengths
from data.corpora import Document
from data.pipeline import document_ids, document_windows, sliding_document_windows
from data.tokenizers import ByteTokenizer
from models import context_parallel
from models.sharding import BATCH, abstract_batch, batch_sharding, replicated, trace_under_mesh

FIELDS = ("inputs", "targets", "positions", "segment_ids")
PROTOCOLS = ("non_overlapping", "sliding")


def protocol_suffix(protocol: str, stride: int) -> str:
  """File-name suffix of a protocol: "" for non_overlapping, "_sliding" (stride 0 = L // 2) or
  "_sliding_s<stride>", so results of both protocols sit side by side in <workdir>/eval/."""
  if protocol == "non_overlapping":
    return ""
  return "_sliding" + (f"_s{stride}" if stride else "")


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


def model_token_nll(params, graphdef: nnx.GraphDef, batch: dict, *, train: bool = False
                    ) -> jax.Array:
  """Per-token next-token NLL of the model (nats): float32 [batch, seq].

  The one forward pass of training (train.py `loss_sum`) and scoring (`make_nll_fn`). When the
  trace's mesh has a "context" axis of size > 1 (mesh.context; set by
  `models.sharding.trace_under_mesh`), each sequence is split over it
  (models/context_parallel.py): same values, per-device activations 1/context as long.

  Args:
    params: the Decoder's parameters (pure dict); graphdef: its NNX graph definition.
    batch: int32 [batch, seq] `inputs`, `targets`, `positions`, `segment_ids` and, for a scheme
      with a position layout, optionally `aux_positions` (a training batch's, with its drawn
      offsets; without it the layout is applied to the whole sequence here, before any split
      over "context": data/position_layouts.py). Other keys are ignored.
    train: True in the training step (the call is differentiated; `Decoder.__call__`).
  """
  def forward(params, fields):
    model = nnx.merge(graphdef, params)
    logits = model(fields["inputs"], fields["positions"], fields["segment_ids"],
                   aux_positions=fields.get("aux_positions"), train=train)
    return token_nll(logits.astype(jnp.float32), fields["targets"])

  fields = {k: batch[k] for k in FIELDS}
  layout = nnx.merge(graphdef, params).layout
  if layout is not None:
    if "aux_positions" in batch:
      fields["aux_positions"] = batch["aux_positions"]
    else:
      fields["positions"], fields["aux_positions"] = layout.streams(
          batch["inputs"], batch["positions"], batch["segment_ids"])
  return context_parallel.over_sequence(forward)(params, fields)


def make_nll_fn(graphdef: nnx.GraphDef, mesh) -> Callable:
  """Compiles `(params, batch) -> (NLL sum per position, scored tokens per position)`.

  One forward pass gives both the perplexity (sum over positions) and the loss by position.

  Args:
    graphdef: the Decoder's NNX graph definition.
    mesh: device mesh; the batch axis is sharded over ("data", "fsdp"), each sequence over
      "context" (`model_token_nll`).

  Returns:
    A jitted function of (params pure dict, batch), where `batch` holds int32 [batch, seq]
    `inputs`, `targets`, `positions`, `segment_ids` and float32 [batch, seq] `weights` (0 for
    tokens not scored and padding rows), returning two replicated float32 [seq] arrays: the
    weighted NLL summed over the batch at each window position (nats) and the weights summed
    at each position (tokens).
  """
  def nll(params, batch):
    per_token = model_token_nll(params, graphdef, batch) * batch["weights"]
    return per_token.sum(axis=0), batch["weights"].sum(axis=0)

  # trace_under_mesh: the fused kernel's shard_map reads the mesh (models/kernels/partition.py)
  return jax.jit(trace_under_mesh(mesh, nll), out_shardings=(replicated(mesh), replicated(mesh)))


def batch_parallelism(mesh) -> int:
  """Number of devices the batch axis is split over (mesh data * fsdp)."""
  return math.prod(mesh.shape[a] for a in BATCH)


def scoring_rows(batch_size: int, mesh) -> int:
  """Windows per scoring batch: `batch_size` (at least 1) rounded up to a multiple of the batch
  parallelism (`score_windows_by_position` pads the last batch with weight-0 rows)."""
  par = batch_parallelism(mesh)
  return -(-max(1, batch_size) // par) * par


def compile_scoring(nll_fn: Callable, params, length: int, batch_size: int, mesh):
  """`nll_fn` (`make_nll_fn`) compiled ahead for one scoring batch of `scoring_rows(batch_size)`
  windows of `length` tokens, as `score_windows_by_position` forms it: the executable that
  scores (pass it as `nll_fn`), whose `memory_analysis()` is that of the real program.

  Args:
    nll_fn: the jitted scoring function; params: the parameter pure dict (on the devices).
    length: window length L, tokens; batch_size: windows per batch before rounding.
    mesh: device mesh (the batch is sharded over ("data", "fsdp")).

  Returns:
    A `jax.stages.Compiled` of (params, batch) -> the same two float32 [L] sums as `nll_fn`.
  """
  shape = (scoring_rows(batch_size, mesh), length)
  fields = {**{k: (shape, jnp.int32) for k in FIELDS}, "weights": (shape, jnp.float32)}
  return nll_fn.lower(params, abstract_batch(fields, mesh)).compile()


@dataclasses.dataclass(frozen=True)
class WindowScores:
  """NLL sums of one scoring pass over windows of length L.

  Attributes:
    position_nll: float64 [L], NLL summed at each window position, nats.
    position_tokens: int64 [L], tokens scored at each window position.
  """

  position_nll: np.ndarray
  position_tokens: np.ndarray

  @property
  def nll_sum(self) -> float:
    """Total NLL, nats (float64 sum of `position_nll`)."""
    return float(self.position_nll.sum())

  @property
  def tokens(self) -> int:
    """Total tokens scored."""
    return int(self.position_tokens.sum())


def score_windows_by_position(nll_fn: Callable, params, windows: dict[str, np.ndarray], *,
                              batch_size: int, mesh, desc: str | None = None) -> WindowScores:
  """Scores all windows in batches and sums the NLL per window position (one forward pass each).

  Args:
    nll_fn: from `make_nll_fn`.
    params: the model's parameter pure dict.
    windows: dict of [num_windows, length] arrays: int32 inputs, targets, positions,
      segment_ids, and optionally float32 weights (0 = not scored; default all ones), as made
      by data.pipeline.document_windows / sliding_document_windows.
    batch_size: windows per forward pass; rounded up to a multiple of the batch parallelism.
      Padding rows get weight 0.
    mesh: device mesh.
    desc: tqdm label; None hides the progress bar.

  Returns:
    WindowScores with float64 [length] NLL sums (nats) and int64 [length] token counts.
  """
  n, length = windows["inputs"].shape
  batch_size = scoring_rows(batch_size, mesh)
  sharding = batch_sharding(mesh)
  position_nll = np.zeros(length, np.float64)
  position_tokens = np.zeros(length, np.int64)
  given = windows.get("weights")
  for lo in tqdm(range(0, n, batch_size), desc=desc, leave=False,
                 disable=desc is None or jax.process_index() != 0):
    rows = min(batch_size, n - lo)
    batch = {}
    for key in FIELDS:
      arr = np.zeros((batch_size, length), np.int32)
      arr[:rows] = windows[key][lo:lo + rows]
      batch[key] = arr
    weights = np.zeros((batch_size, length), np.float32)
    weights[:rows] = 1.0 if given is None else given[lo:lo + rows]
    batch["weights"] = weights
    batch = {k: jax.device_put(v, sharding) for k, v in batch.items()}
    s, c = nll_fn(params, batch)
    position_nll += np.asarray(s, np.float64)
    position_tokens += np.rint(np.asarray(c)).astype(np.int64)
  return WindowScores(position_nll, position_tokens)


def scored_bytes(windows: dict[str, np.ndarray], tokenizer) -> int:
  """The bytes of text the scored targets of `windows` stand for (the denominator of bits per
  byte): the tokenizer's `byte_lengths` of every target, weighted by `weights` (0 = not scored;
  all scored when absent). Equals the tokens scored with the byte tokenizer.

  Args:
    windows: int32 [n, L] targets (+ float32 [n, L] weights), as `score_windows` takes.
    tokenizer: the tokenizer the windows were made with (data/tokenizers.py).
  """
  targets = np.asarray(windows["targets"])
  lengths = tokenizer.byte_lengths[targets]
  weights = windows.get("weights")
  return int(round(float((lengths * (1.0 if weights is None else np.asarray(weights))).sum())))


def bits_per_byte(nll_sum: float, num_bytes: int) -> float | None:
  """Bits per byte of a summed NLL (nats) over `num_bytes` bytes of text; None without bytes."""
  return nll_sum / num_bytes / math.log(2) if num_bytes else None


def score_windows(nll_fn: Callable, params, windows: dict[str, np.ndarray], *, batch_size: int,
                  mesh, desc: str | None = None) -> tuple[float, int]:
  """Sums the NLL over all scored tokens of all windows (see `score_windows_by_position`).

  Returns:
    (sum of NLL in nats, tokens scored).
  """
  scores = score_windows_by_position(nll_fn, params, windows, batch_size=batch_size, mesh=mesh,
                                     desc=desc)
  return scores.nll_sum, scores.tokens


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


def skipped_lengths(config, spec) -> tuple[list[int], str]:
  """Configured eval lengths the scheme cannot represent (e.g. `learned` beyond its table),
  and the reason recorded for them in the results.

  Args:
    config: the experiment config (eval.length_multipliers, data.train_len, model.position.kind).
    spec: its models.spec.ModelSpec (max_position, max_position_hint).
  """
  skip = unrepresentable(eval_lengths(config), spec.max_position)
  return skip, unrepresentable_reason(config, spec)


def unrepresentable_reason(config, spec) -> str:
  """Why a length or size beyond `spec.max_position` positions is skipped (the scheme's hint)."""
  return (f"model.position.kind={config.model.position.kind!r} represents positions < "
          f"{spec.max_position} only ({spec.max_position_hint})")


def resolve_stride(length: int, protocol: str, stride: int) -> int:
  """The window advance, tokens, that `protocol` uses at evaluation length `length`.

  Args:
    length: evaluation length L, tokens.
    protocol: "non_overlapping" (always L) | "sliding" (Press et al., arXiv 2108.12409).
    stride: `eval.stride`, tokens; 0 = L // 2 (at least 1). Ignored by non_overlapping.

  Returns:
    S in [1, L].

  Raises:
    ConfigError: unknown protocol (names eval.protocol), or a sliding stride that is not an
      integer in [0, L] (names eval.stride).
  """
  if protocol not in PROTOCOLS:
    raise ConfigError(f"eval.protocol={protocol!r} is not supported; choose one of {list(PROTOCOLS)}")
  if protocol == "non_overlapping":
    return int(length)
  if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or not 0 <= stride <= length:
    raise ConfigError(f"eval.stride must be an integer in [0, {length}] (the evaluation length; "
                      f"0 = length // 2) for eval.protocol='sliding'; got {stride!r}")
  return int(stride) if stride else max(1, length // 2)


def evaluation_windows(docs: Sequence[Document], tokenizer: ByteTokenizer, length: int, *,
                       protocol: str = "non_overlapping", stride: int = 0,
                       max_tokens_per_doc: int | None = None) -> dict[str, np.ndarray]:
  """The windows (with per-token weights) of `protocol` at length `length` (module docstring).

  Args:
    docs: held-out documents.
    tokenizer: the byte tokenizer.
    length: evaluation length L, tokens.
    protocol: "non_overlapping" | "sliding" (Press et al., arXiv 2108.12409, Section 4).
    stride: sliding window advance, tokens (0 = L // 2).
    max_tokens_per_doc: scored targets per document, rounded up to whole windows / strides
      (None = all).

  Returns:
    dict of [num_windows, L] arrays: int32 inputs, targets, positions, segment_ids and float32
    weights (0 = not scored).

  Raises:
    ConfigError: bad protocol or stride (see `resolve_stride`).
  """
  step = resolve_stride(length, protocol, stride)
  if protocol == "sliding":
    return sliding_document_windows(docs, tokenizer, length, step, max_tokens_per_doc)
  windows = document_windows(docs, tokenizer, length, max_tokens_per_doc)
  windows["weights"] = np.ones(windows["inputs"].shape, np.float32)
  return windows


def tokens_per_document(max_tokens_per_length: int, num_docs: int) -> int | None:
  """The targets `ppl_vs_length` scores per document at each length (evaluation_windows'
  `max_tokens_per_doc`): the budget `max_tokens_per_length` split evenly over `num_docs`
  documents, rounded up; None (every window) when the budget is 0 or less."""
  return None if max_tokens_per_length <= 0 else -(-max_tokens_per_length // max(1, num_docs))


def document_lengths(docs: Sequence[Document], tokenizer) -> list[int]:
  """Tokens of each document (its targets: BOS not counted), in order."""
  return [len(document_ids(d, tokenizer)) for d in docs]


def position_bin_edges(length: int, num_bins: int) -> np.ndarray:
  """Bin edges over window positions 0..length-1 for the loss by position.

  Position 0 is a bin of its own; positions 1..length-1 are split at round(length ** (k / (B-1)))
  for k = 0..B-1 (log-spaced: the loss changes fastest with the first tokens of context), with
  duplicate edges removed, so short lengths get fewer, one-position bins.

  Args:
    length: window length L, tokens (>= 1).
    num_bins: B, at most this many bins; 0 = one bin per position.

  Returns:
    int64 [num_edges] strictly increasing edges, first 0 and last L; bin i covers positions
    edges[i] .. edges[i + 1] - 1.

  Raises:
    ValueError: length < 1 or num_bins < 0.
  """
  if length < 1 or num_bins < 0:
    raise ValueError(f"need length >= 1 and num_bins >= 0; got {length}, {num_bins}")
  if num_bins == 0 or num_bins >= length:
    return np.arange(length + 1, dtype=np.int64)
  if num_bins == 1:
    return np.array([0, length], np.int64)
  inner = np.rint(np.geomspace(1, length, max(2, num_bins))).astype(np.int64)
  return np.unique(np.concatenate([[0], inner, [length]]))


def loss_by_position(scores: WindowScores, num_bins: int) -> list[dict]:
  """Mean NLL per bin of window positions (see `position_bin_edges`).

  Args:
    scores: per-position sums of one pass (`score_windows_by_position`), length L.
    num_bins: at most this many log-spaced bins; 0 = one per position.

  Returns:
    One dict per bin: start, end (positions, end exclusive; a token at position p has p + 1
    tokens of context), tokens (scored in the bin), nll (mean, nats per token; None when no
    token was scored). The token-weighted mean of the bins' nll is the overall NLL.
  """
  edges = position_bin_edges(len(scores.position_nll), num_bins)
  bins = []
  for lo, hi in zip(edges[:-1], edges[1:]):
    tokens = int(scores.position_tokens[lo:hi].sum())
    total = float(scores.position_nll[lo:hi].sum())
    bins.append({"start": int(lo), "end": int(hi), "tokens": tokens,
                 "nll": total / tokens if tokens else None})
  return bins


def ppl_vs_length(nll_fn: Callable, params, docs: Sequence[Document], tokenizer: ByteTokenizer,
                  lengths: Sequence[int], *, max_tokens_per_length: int, batch_tokens: int,
                  mesh, skip: Sequence[int] = (), skip_reason: str = "",
                  protocol: str = "non_overlapping", stride: int = 0,
                  position_bins: int | None = None,
                  memory_check: Callable | None = None,
                  doc_tokens: Sequence[int] | None = None,
                  scorer: Callable | None = None) -> list[dict]:
  """Perplexity at each evaluation length (see the module docstring for the protocols).

  Follows Press et al. (ALiBi, arXiv 2108.12409, Section 4): non-overlapping or sliding windows
  from every document start.

  Args:
    nll_fn: from `make_nll_fn`; params: parameter pure dict.
    docs: held-out documents.
    tokenizer: the tokenizer of the run (byte or SentencePiece).
    lengths: evaluation lengths, tokens.
    max_tokens_per_length: scoring budget per length, tokens (0 = every window of every
      document); the budget is split evenly over documents and taken from their starts, so every
      length scores the same text up to rounding to whole windows (strides, for sliding).
    batch_tokens: tokens per forward pass (memory bound); batch = max(1, batch_tokens // length).
    mesh: device mesh.
    skip: lengths not to evaluate (e.g. `unrepresentable` ones); their rows carry `skipped`.
    skip_reason: the text of `skipped`.
    protocol: "non_overlapping" | "sliding".
    stride: sliding window advance, tokens (0 = length // 2); ignored by non_overlapping.
    position_bins: when not None, each row also gets "loss_by_position", the `loss_by_position`
      bins (at most this many, log-spaced; 0 = one per position) from the same forward pass.
    memory_check: `(compiled, length, rows) -> None | reason`: each length's scoring program is
      compiled ahead (`compile_scoring`, the executable then used to score) and given to it; a
      length with a reason (it does not fit in memory, runs/memory.py `eval_checker`) is
      skipped with that reason. None = no check.
    doc_tokens: `document_lengths(docs, tokenizer)` when the caller has it (else computed).
    scorer: `(score_fn, params, windows, length, *, batch_size, mesh) -> WindowScores` in place of
      `score_windows_by_position` (eval/randomized_positions.py: positions drawn as in training,
      averaged over draws); None = the windows' true positions.

  Returns:
    One dict per length: length, stride (tokens; = length for non_overlapping), windows,
    documents (that contributed a window), tokens (scored), bytes (of text those tokens stand
    for, `scored_bytes`), nll (nats per token), ppl (per token), bits_per_byte (the summed NLL
    / bytes / ln 2) [, loss_by_position]. Lengths longer than every document, or skipped, give
    tokens = bytes = 0, nll = None and `skipped`, the reason ("no held-out document reaches
    ..." for the former).

  Raises:
    ConfigError: unknown protocol, or a stride outside [0, length] (see `resolve_stride`); or
      `memory_check` refused every length that has windows to score (one line, the shortest's
      reason).
  """
  for length in lengths:
    if length not in skip:
      resolve_stride(length, protocol, stride)  # fail before any compilation
  per_doc = tokens_per_document(max_tokens_per_length, len(docs))
  doc_tokens = document_lengths(docs, tokenizer) if doc_tokens is None else doc_tokens
  longest = max(doc_tokens, default=0)
  rows = []
  refused, attempted = [], 0  # lengths memory_check refused; lengths with windows to score
  for length in tqdm(list(lengths), desc="ppl vs length", leave=False,
                     disable=jax.process_index() != 0):
    windows = (None if length in skip else evaluation_windows(
        docs, tokenizer, length, protocol=protocol, stride=stride, max_tokens_per_doc=per_doc))
    score_fn, reason = nll_fn, skip_reason
    if windows is not None and not len(windows["inputs"]):
      reason = (f"no held-out document reaches length {length} (the longest of the {len(docs)} "
                f"has {longest} tokens)")
      windows = None
    if windows is not None and len(windows["inputs"]):
      attempted += 1
      score_fn = compile_scoring(nll_fn, params, length, batch_tokens // length, mesh)
      reason = memory_check(score_fn, length, scoring_rows(batch_tokens // length, mesh)) \
          if memory_check is not None else None
      if reason is not None:
        refused.append(reason)
        windows = None
    if windows is None:
      row = {"length": int(length), "stride": None, "windows": 0, "documents": 0, "tokens": 0,
             "bytes": 0, "nll": None, "ppl": None, "bits_per_byte": None, "skipped": reason}
      if position_bins is not None:
        row["loss_by_position"] = []
      rows.append(row)
      continue
    scores = (score_windows_by_position(score_fn, params, windows,
                                        batch_size=batch_tokens // length, mesh=mesh)
              if scorer is None else
              scorer(score_fn, params, windows, length, batch_size=batch_tokens // length,
                     mesh=mesh))
    count = scores.tokens
    nll = scores.nll_sum / count if count else None
    num_bytes = scored_bytes(windows, tokenizer) if count else 0
    row = {
        "length": int(length),
        "stride": resolve_stride(length, protocol, stride),
        "windows": int(windows["inputs"].shape[0]),
        "documents": sum(n >= length for n in doc_tokens) if count else 0,
        "tokens": count,
        "bytes": num_bytes,
        "nll": nll,
        "ppl": math.exp(nll) if nll is not None else None,
        "bits_per_byte": bits_per_byte(scores.nll_sum, num_bytes) if count else None,
    }
    if position_bins is not None:
      row["loss_by_position"] = loss_by_position(scores, position_bins)
    rows.append(row)
  if attempted and len(refused) == attempted:
    raise ConfigError(f"no evaluation length fits in memory; the shortest: {refused[0]}")
  return rows


def unigram_entropy(docs: Sequence[Document]) -> float:
  """Entropy of the byte unigram distribution of `docs`, nats (the no-context baseline)."""
  counts = np.zeros(256, np.int64)
  for doc in docs:
    counts += np.bincount(np.frombuffer(doc.data, np.uint8), minlength=256)
  p = counts[counts > 0] / counts.sum()
  return float(-(p * np.log(p)).sum())


__all__ = ["PROTOCOLS", "WindowScores", "bits_per_byte", "check_lengths", "evaluation_windows",
           "loss_by_position", "make_nll_fn", "position_bin_edges", "ppl_vs_length",
           "resolve_stride", "score_windows", "score_windows_by_position", "scored_bytes",
           "token_nll", "tokens_per_document", "unigram_entropy"]


def score_validation(nll_fn: Callable, params, validation: dict[str, dict[str, np.ndarray]], *,
                     batch_tokens: int, mesh, tokenizer) -> dict[str, float]:
  """Mean NLL of every named validation set (data.inputs.Inputs.validation), nats per weighted
  target, and `val_bits_per_byte`: val_loss's summed NLL / the bytes its scored targets stand
  for (`scored_bytes`) / ln 2 (val_loss / ln 2 with the byte tokenizer).

  Args:
    nll_fn: `make_nll_fn`'s function; params: the parameter pure dict.
    validation: {name: windows, int32 [n, train_len] inputs, targets, positions, segment_ids
      (+ float32 weights)}.
    batch_tokens: tokens per forward batch (eval.batch_tokens; at least one window);
    mesh: the device mesh.
    tokenizer: the tokenizer the windows were made with (its `byte_lengths`).
  """
  record = {}
  for name, windows in validation.items():
    batch_size = max(1, batch_tokens // windows["inputs"].shape[1])
    total, count = score_windows(nll_fn, params, windows, batch_size=batch_size, mesh=mesh)
    record[name] = total / count
    if name == "val_loss":
      record["val_bits_per_byte"] = bits_per_byte(total, scored_bytes(windows, tokenizer))
  return record
