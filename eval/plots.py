"""PNG figures of one run's results, written beside its eval/*.json (matplotlib).

Figures are `matplotlib.figure.Figure` objects made without pyplot: no global figure state, no
backend to choose (PNG through Agg), and a notebook shows a returned figure once. The figures of
a study, drawn from its results table, are in sweeps/figures.py (which reuses `length_axis` and
`accuracy_cmap` from here); the basics every figure shares and the training curves are in
runs/plots.py.
"""

from __future__ import annotations

from runs.plots import LEGEND_FONTSIZE, log_axis, save_png, subplots, ticker


def accuracy_cmap():
  """The colour map of accuracy heatmaps (retrieval grids, the addition grid): the
  colour-blind-safe cividis map, dark blue (0) -> yellow (1), skipped cells grey; cell labels
  are white below 0.6, black above. Made on use, so that importing this module (every entry
  point does, through the suites) does not import matplotlib."""
  import matplotlib  # noqa: PLC0415
  return matplotlib.colormaps["cividis"].with_extremes(bad="#d9d9d9")



def curve_label(result: dict) -> str:
  """Legend label of a result: its scheme, plus the eval-time extension when there is one."""
  label = result.get("scheme", "model")
  ext = result.get("extension", "none")
  if ext and ext != "none":
    factor = result.get("extension_factor")
    label += f" + {ext}" + (f" (x{factor:g})" if factor not in (None, 1, 1.0) else "")
  return label


def plot_ppl_vs_length(results: dict | list[dict], path: str) -> None:
  """Log perplexity vs evaluation length (log2 x axis), one curve per result, train length marked.

  Args:
    results: a `ppl_vs_length` result dict (see eval/perplexity.py), or a list of them (e.g. the
      model as trained and under eval-time extensions, all at one checkpoint step): each needs
      "rows" with "length" and "ppl", "train_len", and optionally "scheme", "extension",
      "extension_factor", "split" and "step" (the title uses the first result's).
    path: output .png path (written atomically).
  """
  results = [results] if isinstance(results, dict) else list(results)
  result = results[0]
  fig, ax = subplots(figsize=(6, 4), dpi=120)
  for one in results:
    rows = [r for r in one["rows"] if r.get("ppl") is not None]
    ax.plot([r["length"] for r in rows], [r["ppl"] for r in rows], marker="o",
            label=curve_label(one))
  ax.axvline(result["train_len"], color="gray", linestyle="--",
             label=f"train_len={result['train_len']}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
  ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
  ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%.3g"))
  ax.set_xlabel("evaluation length (tokens)")
  per = "byte" if "byte" in str(result.get("unit", "byte")) else "token"  # the run's token unit
  ax.set_ylabel(f"perplexity (per {per})")
  protocol = result.get("protocol", "non_overlapping")
  if protocol == "sliding":
    protocol += f", stride {result.get('stride') or 'L/2'}"
  ax.set_title(f"Perplexity vs length ({protocol}; {result.get('split', '')}, "
               f"step {result.get('step', '?')})", fontsize=9)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=LEGEND_FONTSIZE)
  fig.tight_layout()
  save_png(fig, path)


def plot_loss_by_position(result: dict, path: str) -> None:
  """Mean NLL vs token position in the window, one line per evaluation length, train_len marked.

  The x axis is the context a token is predicted from, position + 1 tokens (log2 scale); each
  bin is drawn at the geometric mean of its first and last context size. Under the sliding
  protocol (Press et al., arXiv 2108.12409, Section 4) with stride S < L, positions below L - S
  come from each document's first window only.

  Args:
    result: a `loss_by_position` result dict (eval/suites/perplexity.py): needs "rows", each with
      "length" and "bins" (start, end exclusive, tokens, nll in nats per token), "train_len", and
      optionally "scheme", "protocol", "stride", "split" and "step".
    path: output .png path (written atomically).
  """
  fig, ax = subplots(figsize=(6, 4), dpi=120)
  for row in result["rows"]:
    bins = [b for b in row.get("bins", []) if b.get("nll") is not None and b["tokens"] > 0]
    if not bins:
      continue
    x = [((b["start"] + 1) * b["end"]) ** 0.5 for b in bins]
    stride = row.get("stride")
    label = f"L={row['length']}" + (f", S={stride}" if stride not in (None, row["length"]) else "")
    ax.plot(x, [b["nll"] for b in bins], marker=".", label=label)
  ax.axvline(result["train_len"], color="gray", linestyle="--",
             label=f"train_len={result['train_len']}")
  ax.set_xscale("log", base=2)
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.set_xlabel("context tokens (position in window + 1)")
  ax.set_ylabel("NLL (nats per token)")
  ax.set_title(f"Loss by position: {curve_label(result)}, {result.get('protocol', '')} "
               f"({result.get('split', '')}, step {result.get('step', '?')})", fontsize=9)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=LEGEND_FONTSIZE)
  fig.tight_layout()
  save_png(fig, path)


def plot_retrieval_heatmap(result: dict, path: str) -> None:
  """Retrieval accuracy heatmap: context length (x, tokens) x needle depth (y, 0% at the top).

  The layout of Kamradt's needle-in-a-haystack plots (depth rows, length columns); colour is the
  cell's accuracy on a fixed 0..1 scale (cividis, `accuracy_cmap`), written in each cell (for
  variable_tracking the mean recall of the chain's names); skipped lengths
  are grey and marked "skip"; a dashed line follows the last column at or below train_len.

  A suite without a depth axis ("depths" None: common_words, frequent_words) is drawn as mean
  recall vs length instead, skipped lengths marked on the axis.

  Args:
    result: a passkey / needle result dict (eval/needle.py): needs "suite", "lengths",
      "depths", "accuracy" ([length][depth], None = skipped), "train_len", and optionally
      "scheme", "step", "threshold", "max_length_passing".
    path: output .png path (written atomically).
  """
  import numpy as np  # local: this module otherwise needs matplotlib only

  if result.get("depths") is None:  # a suite without a needle (common_words, frequent_words)
    _plot_accuracy_vs_length(result, path)
    return
  lengths, depths = result["lengths"], result["depths"]
  acc = np.array([[np.nan if a is None else a for a in row] for row in result["accuracy"]],
                 dtype=float).reshape(len(lengths), len(depths)).T  # [depth, length]
  fig, ax = subplots(figsize=(max(5.5, 1.6 + 0.8 * len(lengths)), 1.8 + 0.3 * len(depths)),
                         dpi=120)
  cmap = accuracy_cmap()
  image = ax.imshow(np.ma.masked_invalid(acc), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
  for i in range(len(depths)):
    for j in range(len(lengths)):
      text = "skip" if np.isnan(acc[i, j]) else f"{acc[i, j]:.2f}"
      ax.text(j, i, text, ha="center", va="center", fontsize=7,
              color="black" if np.isnan(acc[i, j]) or acc[i, j] >= 0.6 else "white")
  ax.set_xticks(range(len(lengths)), [str(L) for L in lengths])
  ax.set_yticks(range(len(depths)), [f"{100 * d:g}%" for d in depths])
  inside = [j for j, L in enumerate(lengths) if L <= result["train_len"]]
  if inside:
    ax.axvline(max(inside) + 0.5, color="black", linestyle="--", linewidth=1.2)
  ax.set_xlabel("context length (tokens incl. BOS); "
                + (f"dashed: train_len={result['train_len']}" if inside else
                   f"every length > train_len={result['train_len']}"), fontsize=8)
  ax.set_ylabel(f"{result['suite']} depth", fontsize=8)
  passing = result.get("max_length_passing")
  ax.set_title(f"{result['suite']}: {curve_label(result)}, step {result.get('step', '?')}\n"
               f"largest length with accuracy >= {result.get('threshold', '?')} (and all shorter): "
               f"{passing if passing is not None else 'none'}", fontsize=8)
  fig.colorbar(image, ax=ax, label=("mean recall of the chain's names"
                                    if result["suite"] == "variable_tracking" else "accuracy"),
               fraction=0.04)
  fig.tight_layout()
  save_png(fig, path)


def _plot_accuracy_vs_length(result: dict, path: str) -> None:
  """Mean recall per length of a depthless retrieval result, with its threshold; skipped
  lengths are marked "skip" on the x axis."""
  rows = result["rows"]
  fig, ax = subplots(figsize=(5.5, 3.4), dpi=120)
  done = [r for r in rows if r["accuracy"] is not None]
  ax.plot([r["length"] for r in done], [r["accuracy"] for r in done], "o-", color="C0",
          label=f"{curve_label(result)} ({result.get('trials', '?')} prompts per length)")
  for r in rows:
    if r["accuracy"] is None:
      ax.annotate("skip", (r["length"], 0.0), ha="center", va="bottom", fontsize=7, color="gray")
  if result.get("threshold") is not None:
    ax.axhline(result["threshold"], color="black", linestyle=":", linewidth=1,
               label=f"threshold {result['threshold']}")
  length_axis(ax, result.get("train_len"))
  ax.set_xticks([r["length"] for r in rows], [str(r["length"]) for r in rows])
  ax.set_ylim(-0.02, 1.02)
  ax.set_ylabel("mean recall of the references")
  passing = result.get("max_length_passing")
  ax.set_title(f"{result['suite']}: {curve_label(result)}, step {result.get('step', '?')}\n"
               f"largest length with recall >= {result.get('threshold', '?')} (and all shorter): "
               f"{passing if passing is not None else 'none'}", fontsize=8)
  ax.legend(fontsize=7)
  fig.tight_layout()
  save_png(fig, path)


def plot_attention_statistics(result: dict, path: str) -> None:
  """Attention entropy and sink mass vs evaluation length, one line per layer, train_len marked.

  Left: mean attention entropy (nats) per layer, with the uniform-attention ceiling
  (mean log(i + 1), eval/attention_stats.uniform_entropy) dotted. Right: mean attention
  probability on the window's BOS (the sink) per layer.

  Args:
    result: an `attention` result dict (eval/suites/attention.py): "rows" with "length",
      "entropy_by_layer", "sink_mass_by_layer", "entropy_uniform" (skipped rows have
      "skipped"), "train_len", and optionally "scheme", "extension", "split", "step".
    path: output .png path (written atomically).
  """
  rows = [r for r in result["rows"] if not r.get("skipped")]
  fig, (ax_e, ax_s) = subplots(1, 2, figsize=(10, 4), dpi=120)
  lengths = [r["length"] for r in rows]
  layers = len(rows[0]["entropy_by_layer"]) if rows else 0
  for layer in range(layers):
    ax_e.plot(lengths, [r["entropy_by_layer"][layer] for r in rows], marker="o",
              label=f"layer {layer}")
    ax_s.plot(lengths, [r["sink_mass_by_layer"][layer] for r in rows], marker="o",
              label=f"layer {layer}")
  ax_e.plot(lengths, [r["entropy_uniform"] for r in rows], color="black", linestyle=":",
            label="uniform over visible keys")
  for ax, ylabel in ((ax_e, "attention entropy (nats, mean over queries)"),
                     (ax_s, "attention on the BOS (sink mass)")):
    length_axis(ax, result["train_len"])
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=LEGEND_FONTSIZE)
  ax_s.set_yscale("log")  # sink mass spans decades (about 1/L), far below 1
  fig.suptitle(f"Attention diagnostics: {curve_label(result)} ({result.get('split', '')}, "
               f"step {result.get('step', '?')})", fontsize=9)
  fig.tight_layout()
  save_png(fig, path)


def length_axis(ax, train_len: int | None) -> None:
  """log2 length axis with plain tick labels, a dashed train_len marker and a light grid."""
  if train_len:
    ax.axvline(train_len, color="gray", linestyle="--", label=f"train_len={train_len}")
  ax.set_xscale("log", base=2)
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.set_xlabel("evaluation length (tokens)")
  ax.grid(True, which="both", alpha=0.3)
