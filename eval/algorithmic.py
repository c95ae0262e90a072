"""Algorithmic length generalization: exact-match accuracy per instance size (suite "algorithmic").

The protocol of Kazemnejad et al. ("The Impact of Positional Encoding on Length Generalization in
Transformers", arXiv 2305.19466) and Ruoss et al. ("Randomized Positional Encodings Boost Length
Generalization of Transformers", arXiv 2305.16843): train on instance sizes
train_min_size..train_max_size (n), then score `data.task.eval_examples_per_size` held-out
examples at every size 1..eval_max_size (k * n) and report, per size,

  exact_match     share of examples whose whole answer (answer bytes and the final EOS) is right
                  under greedy decoding;
  token_accuracy  share of answer tokens predicted right under teacher forcing (token-weighted).

Exact match in one forward pass. Greedy decoding emits y^_t = argmax p(. | prompt, y^_<t) and
stops at EOS; the example is right iff y^ = y, the answer followed by EOS. Under teacher forcing
one causal forward pass over (BOS, prompt, answer) gives a_t = argmax p(. | prompt, y_<t) at
every answer position. Claim: y^ = y iff a_t = y_t for every t. If all a_t = y_t, induction on t
shows y^_<t = y_<t, so greedy decoding conditions on exactly the teacher-forced context and
y^_t = a_t = y_t (including the EOS, so it stops at the right place). If t is the first position
with a_t != y_t, the same induction gives y^_<t = y_<t, hence y^_t = a_t != y_t and the output is
wrong. So one jitted forward pass per batch gives the exact greedy exact match. The argument needs
causal logits (the logits at position t depend on tokens 0..t and their positions only), which
holds for every scheme here at a fixed row, except the per-row length of the `dynamic_ntk`
extension (models/rope_scaling.py), whose frequencies depend on the whole row's length; argmax
ties break to the lowest token id in both passes. Rows are right-padded to a multiple of
`BUCKET` tokens so that few shapes are compiled: causal attention, a separate padding segment and
padding positions 0 leave every real token's logits unchanged.

Sizes whose sequence (task.sequence_length(size) tokens, positions 0..T-1) exceeds the positions
the scheme represents (`ModelSpec.max_position`, e.g. `learned` without clamping) are recorded as
skipped. Results: `<workdir>/eval/algorithmic.json` and `algorithmic.png` (accuracy vs size, the
training maximum marked), both written atomically.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

from data import tasks
from data.tasks import dataset
from data.tokenizers import ByteTokenizer
from eval import plots
from eval.perplexity import batch_parallelism
from models.sharding import batch_sharding, replicated


SUITE = "algorithmic"
BUCKET = 32  # evaluation rows are right-padded to a multiple of this many tokens


def answer_scores(logits: jax.Array, targets: jax.Array, weights: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """Answer tokens predicted right (argmax = target) and answer tokens, per row.

  Args:
    logits: float [batch, seq, vocab] teacher-forced next-token logits.
    targets: int32 [batch, seq] next tokens.
    weights: float32 [batch, seq], > 0 at answer targets (data/tasks/dataset.py).

  Returns:
    (correct, total): int32 [batch] each. A row is an exact match iff total > 0 and
    correct == total (module docstring); predictions at non-answer positions do not count.
  """
  answer = weights > 0
  hit = (jnp.argmax(logits, axis=-1) == targets) & answer
  return hit.sum(axis=-1, dtype=jnp.int32), answer.sum(axis=-1, dtype=jnp.int32)


def accuracy(correct: np.ndarray, total: np.ndarray) -> dict:
  """Exact-match and token accuracy of scored rows.

  Args:
    correct: int [examples] answer tokens predicted right per example.
    total: int [examples] answer tokens per example (> 0).

  Returns:
    dict: examples, exact_match (share of examples with correct == total), answer_tokens,
    token_accuracy (sum correct / sum total, i.e. token-weighted).

  Raises:
    ValueError: no examples, a shape mismatch, or an example without answer tokens.
  """
  correct, total = np.asarray(correct, np.int64), np.asarray(total, np.int64)
  if correct.shape != total.shape or correct.ndim != 1 or len(total) == 0:
    raise ValueError(f"need two equal 1-D arrays of examples; got {correct.shape}, {total.shape}")
  if (total <= 0).any():
    raise ValueError("every scored example needs at least one answer token")
  return {"examples": int(len(total)), "exact_match": float(np.mean(correct == total)),
          "answer_tokens": int(total.sum()), "token_accuracy": float(correct.sum() / total.sum())}


def make_score_fn(graphdef: nnx.GraphDef, mesh) -> Callable:
  """Compiles `(params, batch) -> (correct, total)` of `answer_scores` in one forward pass.

  Args:
    graphdef: the Decoder's NNX graph definition.
    mesh: device mesh; the batch axis is sharded over ("data", "fsdp").

  Returns:
    A jitted function of (params pure dict, batch of [batch, seq] arrays: int32 inputs,
    targets, positions, segment_ids and float32 weights) returning two replicated int32 [batch].
  """
  def score(params, batch):
    model = nnx.merge(graphdef, params)
    logits = model(batch["inputs"], batch["positions"], batch["segment_ids"])
    return answer_scores(logits, batch["targets"], batch["weights"])

  return jax.jit(score, out_shardings=(replicated(mesh), replicated(mesh)))


def score_rows(score_fn: Callable, params, rows: dict[str, np.ndarray], *, batch_tokens: int,
               mesh, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  """Scores rows of one length in batches (right-padded to a multiple of `BUCKET` tokens).

  Args:
    score_fn: from `make_score_fn`; params: parameter pure dict.
    rows: dict of [n, T] arrays (data.tasks.dataset.examples_of_size).
    batch_tokens: tokens per forward pass (eval.batch_tokens); rows per batch =
      min(n, max(1, batch_tokens // padded length)), rounded up to the batch parallelism.
    mesh: device mesh.
    pad_id: PAD token id.

  Returns:
    (correct, total): int64 [n] each, per row.
  """
  n, t = rows["inputs"].shape
  length = -(-t // BUCKET) * BUCKET
  rows = dataset.pad_rows(rows, length, pad_id)
  par = batch_parallelism(mesh)
  batch_size = -(-min(n, max(1, batch_tokens // length)) // par) * par
  sharding = batch_sharding(mesh)
  correct, total = [], []
  for lo in range(0, n, batch_size):
    count = min(batch_size, n - lo)
    batch = {k: v[lo:lo + count] for k, v in rows.items()}
    if count < batch_size:  # whole padding rows (weight 0), dropped below
      batch = {k: np.concatenate([v, np.full((batch_size - count, length),
                                             pad_id if k in ("inputs", "targets") else 0, v.dtype)])
               for k, v in batch.items()}
    c, s = score_fn(params, {k: jax.device_put(v, sharding) for k, v in batch.items()})
    correct.append(np.asarray(c)[:count])
    total.append(np.asarray(s)[:count])
  return np.concatenate(correct).astype(np.int64), np.concatenate(total).astype(np.int64)


def evaluate_sizes(score_fn: Callable, params, task: tasks.Task, sizes, *,
                   examples_per_size: int, seed: int, tokenizer: ByteTokenizer,
                   batch_tokens: int, mesh, max_position: int | None = None,
                   skip_reason: str = "", train_sizes: tuple[int, int] = (1, 1)) -> list[dict]:
  """Accuracy at each instance size on held-out examples (module docstring).

  Args:
    score_fn: from `make_score_fn`; params: parameter pure dict.
    task: the task.
    sizes: instance sizes to evaluate (>= 1).
    examples_per_size: examples drawn per size (`default_rng([seed, EVALUATION, size])`).
    seed: data.task.eval_seed.
    tokenizer: the byte tokenizer.
    batch_tokens: tokens per forward pass.
    mesh: device mesh.
    max_position: positions the scheme represents (None = any); longer sequences are skipped.
    skip_reason: the text recorded for skipped sizes.
    train_sizes: (train_min_size, train_max_size), to mark rows in distribution.

  Returns:
    One dict per size: size, sequence_length (tokens), in_distribution (train_min <= size <=
    train_max), examples, exact_match, answer_tokens, token_accuracy; skipped sizes have
    examples 0, accuracies None and `skipped`.
  """
  out = []
  for size in tqdm(list(sizes), desc=f"{task.name} accuracy by size", leave=False,
                   disable=jax.process_index() != 0):
    length = task.sequence_length(size)
    row = {"size": int(size), "sequence_length": int(length),
           "in_distribution": bool(train_sizes[0] <= size <= train_sizes[1])}
    if max_position is not None and length > max_position:
      out.append(row | {"examples": 0, "exact_match": None, "answer_tokens": 0,
                        "token_accuracy": None, "skipped": skip_reason})
      continue
    rows = dataset.examples_of_size(task, size, examples_per_size, seed, dataset.EVALUATION,
                                    tokenizer)
    correct, total = score_rows(score_fn, params, rows, batch_tokens=batch_tokens, mesh=mesh,
                                pad_id=tokenizer.pad_id)
    out.append(row | accuracy(correct, total))
  return out


def summarize(rows: list[dict], train_max_size: int) -> dict:
  """Mean exact match in distribution and beyond `train_max_size` (over evaluated sizes).

  Returns:
    dict: in_distribution_exact_match, beyond_exact_match (mean over sizes > train_max_size
    that were evaluated; None if none), largest_size_exact_match_1 (the largest size s such
    that every evaluated size <= s scored exact match 1.0; 0 if size 1 did not).
  """
  def mean(rs):
    rs = [r["exact_match"] for r in rs if r["exact_match"] is not None]
    return float(np.mean(rs)) if rs else None

  largest = 0
  for r in sorted(rows, key=lambda r: r["size"]):
    if r["exact_match"] is None:
      continue
    if r["exact_match"] < 1.0:
      break
    largest = r["size"]
  return {"in_distribution_exact_match": mean([r for r in rows if r["in_distribution"]]),
          "beyond_exact_match": mean([r for r in rows if r["size"] > train_max_size]),
          "largest_size_exact_match_1": largest}


def plot(result: dict, path: str) -> None:
  """Exact match and token accuracy vs instance size, the largest training size marked.

  Args:
    result: an algorithmic result dict (eval/suites/algorithmic.py): "rows" with size, exact_match,
      token_accuracy; "task", "scheme", "train_max_size", "step".
    path: output .png path (written atomically).
  """
  rows = [r for r in result["rows"] if r["exact_match"] is not None]
  fig, ax = plots.subplots(figsize=(6, 4), dpi=120)
  ax.plot([r["size"] for r in rows], [r["exact_match"] for r in rows], marker="o", markersize=3,
          label="exact match")
  ax.plot([r["size"] for r in rows], [r["token_accuracy"] for r in rows], linestyle="--",
          label="token accuracy")
  ax.axvline(result["train_max_size"], color="gray", linestyle=":",
             label=f"train max size = {result['train_max_size']}")
  skipped = [r["size"] for r in result["rows"] if r["exact_match"] is None]
  if skipped:
    ax.axvspan(min(skipped) - 0.5, max(skipped) + 0.5, color="gray", alpha=0.15,
               label="skipped (positions not representable)")
  ax.set_ylim(-0.03, 1.03)
  ax.set_xlabel(f"instance size ({result.get('size_unit', 'input symbols')})")
  ax.set_ylabel("accuracy")
  extension = result.get("extension", "none")
  scheme = result.get("scheme", "model") + ("" if extension == "none" else
                                            f" + {extension} x{result['extension_factor']:g}")
  ax.set_title(f"{result['task']}: {scheme} (step {result.get('step', '?')})")
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  plots.save_png(fig, path)


__all__ = ["BUCKET", "SUITE", "accuracy", "answer_scores", "evaluate_sizes", "make_score_fn",
           "plot", "score_rows", "summarize"]
