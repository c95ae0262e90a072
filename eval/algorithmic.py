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
training maximum marked), both written atomically; for a two-size task (data/tasks/base.py
GridTask) also the exact match of every cell of the grid of sizes (`evaluate_grid`, the JSON's
"grid") and its heatmap `algorithmic_grid.png` (`plot_grid`).
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
from runs.plots import save_png, subplots
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
    examples_per_size: examples drawn per size (`default_rng([seed, EVALUATION, size])`; a
      GridTask's rows come from its grid instead, `diagonal_rows`).
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


def evaluate_grid(score_fn: Callable, params, task: tasks.GridTask, max_size: int, *,
                  examples_per_cell: int, seed: int, tokenizer: ByteTokenizer,
                  batch_tokens: int, mesh, max_position: int | None = None,
                  train_sizes: tuple[int, int] = (1, 1)) -> dict:
  """Exact match on every cell (a, b), 1 <= a, b <= max_size, of a two-size task (McLeish et
  al., arXiv 2405.17399, Figure 1: accuracy over a grid of operand lengths).

  Cells are scored as `evaluate_sizes` scores sizes (teacher-forced argmax = greedy decoding),
  with the cells whose rows pad to the same multiple of `BUCKET` tokens stacked into one set of
  batches (a few compiled shapes for the whole grid).

  Args:
    score_fn: from `make_score_fn`; params: parameter pure dict.
    task: the grid task.
    max_size: the grid's largest size per axis (data.task.eval_max_size).
    examples_per_cell: examples per cell (data/tasks/dataset.py `examples_of_cell`).
    seed: data.task.eval_seed.
    tokenizer, batch_tokens, mesh: as `evaluate_sizes`.
    max_position: positions the scheme represents (None = any); longer cells are skipped.
    train_sizes: (train_min_size, train_max_size): the training square on both axes.

  Returns:
    dict: sizes ([1..max_size]), exact_match and token_accuracy ([a - 1][b - 1] -> float, None
    for a skipped cell), sequence_length ([a - 1][b - 1] tokens), examples_per_cell,
    train_min_size, train_max_size, and the means `in_distribution_exact_match` (cells with
    both sizes in the training range), `beyond_exact_match` (cells with max(a, b) >
    train_max_size, evaluated) and `one_operand_beyond_exact_match` (exactly one size beyond).
  """
  sizes = list(range(1, max_size + 1))
  exact = [[None] * max_size for _ in sizes]
  token = [[None] * max_size for _ in sizes]
  seq = [[task.cell_sequence_length(a, b) for b in sizes] for a in sizes]
  groups: dict[int, list[tuple[int, int]]] = {}
  for a in sizes:
    for b in sizes:
      if max_position is None or seq[a - 1][b - 1] <= max_position:
        groups.setdefault(-(-seq[a - 1][b - 1] // BUCKET) * BUCKET, []).append((a, b))
  with tqdm(total=sum(map(len, groups.values())), desc=f"{task.name} grid", leave=False,
            disable=jax.process_index() != 0) as bar:
    for length, cells in sorted(groups.items()):
      parts = [dataset.pad_rows(dataset.examples_of_cell(task, a, b, examples_per_cell, seed,
                                                         tokenizer), length, tokenizer.pad_id)
               for a, b in cells]
      rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
      correct, total = score_rows(score_fn, params, rows, batch_tokens=batch_tokens, mesh=mesh,
                                  pad_id=tokenizer.pad_id)
      for i, (a, b) in enumerate(cells):
        sl = slice(i * examples_per_cell, (i + 1) * examples_per_cell)
        acc = accuracy(correct[sl], total[sl])
        exact[a - 1][b - 1], token[a - 1][b - 1] = acc["exact_match"], acc["token_accuracy"]
      bar.update(len(cells))
  lo, hi = train_sizes

  def mean(keep):
    vals = [exact[a - 1][b - 1] for a in sizes for b in sizes
            if keep(a, b) and exact[a - 1][b - 1] is not None]
    return float(np.mean(vals)) if vals else None

  return {"sizes": sizes, "exact_match": exact, "token_accuracy": token, "sequence_length": seq,
          "examples_per_cell": int(examples_per_cell), "train_min_size": int(lo),
          "train_max_size": int(hi),
          "in_distribution_exact_match": mean(lambda a, b: lo <= a <= hi and lo <= b <= hi),
          "beyond_exact_match": mean(lambda a, b: max(a, b) > hi),
          "one_operand_beyond_exact_match": mean(lambda a, b: (a > hi) != (b > hi))}


def diagonal_rows(grid: dict, task: tasks.GridTask, *, skip_reason: str = "") -> list[dict]:
  """The per-size rows of a grid task, read off the diagonal cells (n, n) of `evaluate_grid`'s
  result (the same examples, so the curve and the heatmap agree; nothing is scored again).

  Args:
    grid: `evaluate_grid`'s result.
    task: the grid task (answer lengths, for the answer-token counts).
    skip_reason: the text recorded for skipped (None) cells.

  Returns:
    One dict per size, as `evaluate_sizes` returns: size, sequence_length (tokens),
    in_distribution, examples, exact_match, answer_tokens (examples x (answer bytes + EOS)),
    token_accuracy; skipped sizes have examples 0, accuracies None and `skipped`.
  """
  lo, hi, count = grid["train_min_size"], grid["train_max_size"], grid["examples_per_cell"]
  out = []
  for n in grid["sizes"]:
    row = {"size": n, "sequence_length": grid["sequence_length"][n - 1][n - 1],
           "in_distribution": lo <= n <= hi}
    exact = grid["exact_match"][n - 1][n - 1]
    if exact is None:
      out.append(row | {"examples": 0, "exact_match": None, "answer_tokens": 0,
                        "token_accuracy": None, "skipped": skip_reason})
    else:
      out.append(row | {"examples": count, "exact_match": exact,
                        "answer_tokens": count * (task.answer_length(n) + 1),
                        "token_accuracy": grid["token_accuracy"][n - 1][n - 1]})
  return out


def plot_grid(result: dict, path: str) -> None:
  """Exact-match heatmap over the grid of sizes (first operand's on y, second's on x), in percent,
  the training square outlined (McLeish et al., arXiv 2405.17399, Figure 1's layout), on the
  colour-blind-safe `cividis` map (eval/plots.py `accuracy_cmap`).

  Args:
    result: an algorithmic result dict with "grid" (`evaluate_grid`), "task", "scheme", "step".
    path: output .png path (written atomically).
  """
  from matplotlib.patches import Rectangle  # local: as eval/plots.py, matplotlib on use

  grid = result["grid"]
  sizes = grid["sizes"]
  acc = 100 * np.array([[np.nan if v is None else v for v in row] for row in grid["exact_match"]])
  fig, ax = subplots(figsize=(2.2 + 0.32 * len(sizes), 1.6 + 0.3 * len(sizes)), dpi=120)
  image = ax.imshow(np.ma.masked_invalid(acc), cmap=plots.accuracy_cmap(), vmin=0.0, vmax=100.0,
                    origin="lower", extent=(0.5, len(sizes) + 0.5, 0.5, len(sizes) + 0.5))
  if len(sizes) <= 24:
    for a in sizes:
      for b in sizes:
        v = acc[a - 1, b - 1]
        ax.text(b, a, "skip" if np.isnan(v) else f"{v:.0f}", ha="center", va="center",
                fontsize=6, color="black" if not np.isnan(v) and v >= 60 else "white")
  lo, hi = grid["train_min_size"], grid["train_max_size"]
  ax.add_patch(Rectangle((lo - 0.5, lo - 0.5), hi - lo + 1, hi - lo + 1, fill=False,
                         edgecolor="white", linestyle="--", linewidth=1.4))
  ticks = sizes if len(sizes) <= 20 else sizes[::max(1, len(sizes) // 10)]
  ax.set_xticks(ticks)
  ax.set_yticks(ticks)
  ax.tick_params(labelsize=8)
  unit = result.get("size_unit", "digits per operand").removesuffix(" per operand")
  ax.set_xlabel(f"second operand ({unit})", fontsize=8)
  ax.set_ylabel(f"first operand ({unit})", fontsize=8)

  def pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"

  ax.set_title(f"{result['task']}: {result.get('scheme', 'model')}, step {result.get('step', '?')}"
               f", {grid['examples_per_cell']} problems per cell\nexact match (%); dashed: "
               f"training sizes {lo}..{hi}, mean {pct(grid['in_distribution_exact_match'])}; "
               f"cells beyond: mean {pct(grid['beyond_exact_match'])}", fontsize=8)
  fig.colorbar(image, ax=ax, label="exact match (%)", fraction=0.04)
  fig.tight_layout()
  save_png(fig, path)


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
  fig, ax = subplots(figsize=(6, 4), dpi=120)
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
  save_png(fig, path)


__all__ = ["BUCKET", "SUITE", "accuracy", "answer_scores", "diagonal_rows", "evaluate_grid",
           "evaluate_sizes",
           "make_score_fn", "plot", "plot_grid", "score_rows", "summarize"]
