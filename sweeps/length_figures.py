"""Study figures of a metric against evaluation length, one curve per scheme (mean over seeds,
band named in each title by `band_text`): perplexity (as trained, with eval-time extensions, loss
by position in the window),
retrieval accuracy, attention diagnostics, any registered suite's headline metric; the
algorithmic tasks' accuracy against instance size; and the extrapolation ratio (ppl at 8x /
1x train_len) against model size or train_len.
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import pandas as pd

from eval import suites as suites_registry
from eval.plots import length_axis
from runs.plots import subplots
from sweeps.figure_style import ALGORITHMIC_METRICS, PROTOCOLS, RETRIEVAL_SUITES, _any_table, \
    _check, _legend, _log_ppl_axis, _mean_band, _plot_bands, _suite, _train_len, band_stats, \
    band_text, curve_labels, scheme_style


def reference_levels(reference: Mapping, length: int, protocol: str = "non_overlapping"
                     ) -> dict[int, float]:
  """The n-gram reference's perplexity per order at one evaluation length: {order: ppl}.

  Args:
    reference: eval/ngram.py's JSON (`python -m eval.ngram ... --out=<file>`): "rows" of
      {"order", "length", "ppl", ...} and its "protocol".
    length: the evaluation length (tokens) to read, e.g. train_len.
    protocol: the figure's protocol; the reference must have been scored with it.

  Raises:
    ValueError: a reference scored with another protocol, or with no row at `length` (the
      lengths it has are named).
  """
  if reference.get("protocol") != protocol:
    raise ValueError(f"the n-gram reference was scored with protocol "
                     f"{reference.get('protocol')!r}, the figure draws {protocol!r}")
  rows = [r for r in reference["rows"] if r["length"] == length]
  if not rows:
    have = sorted({r["length"] for r in reference["rows"]})
    raise ValueError(f"the n-gram reference has no row at length {length}; it has {have}")
  return {int(r["order"]): float(r["ppl"]) for r in sorted(rows, key=lambda r: r["order"])}


@_any_table
def fig_ppl_vs_length(frame, protocol: str = "non_overlapping", with_extensions: bool = False,
                      reference: Mapping | None = None):
  """Perplexity vs evaluation length per scheme (log-log), mean over seeds with its band
  (`band_stats`, named in the title), optionally over the horizontal lines of what byte n-gram
  models reach on the same windows.

  Args:
    frame: the results table; protocol: "non_overlapping" | "sliding" (perplexity protocol,
      Press et al., arXiv 2108.12409, Section 4).
    with_extensions: also draw every eval-time extension's curve (else the models as trained).
    reference: eval/ngram.py's JSON (results/ngram_reference_alibi_tiny.json): one grey
      horizontal line per n-gram order at its perplexity at the runs' train_len
      (`reference_levels`; an n-gram model's perplexity hardly depends on the window length),
      labelled "<k>-gram" at the left edge. A curve below the k-gram line has learned more from
      its context than a table of k - 1 preceding bytes gives.

  Returns:
    A Figure, or None if the table has no ppl_vs_length rows for `protocol`.

  Raises:
    ValueError: `protocol` is not one of PROTOCOLS; a `reference` for runs of several
      train_len, or see `reference_levels`.
  """
  _check("protocol", protocol, PROTOCOLS)
  rows = _suite(frame, "ppl_vs_length", protocol, None if with_extensions else False)
  if rows.empty:
    return None
  levels, train_len = {}, _train_len(rows)
  if reference is not None:
    if train_len is None:
      raise ValueError("an n-gram reference is drawn at one train_len; the runs have several")
    levels = reference_levels(reference, train_len, protocol)
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  for order, ppl in levels.items():
    ax.axhline(ppl, color="#888888", linewidth=0.8, linestyle=(0, (1, 2)), zorder=0)
    ax.annotate(f"{order}-gram", (0.0, ppl), xycoords=("axes fraction", "data"),
                xytext=(3, 1), textcoords="offset points", fontsize=7, color="#555555",
                va="bottom", ha="left")
  ns = _plot_bands(ax, _mean_band(rows, "length", "ppl"))
  length_axis(ax, train_len)
  _log_ppl_axis(ax)
  lines = ("\ngrey dotted: byte n-gram models (Kneser-Ney), same windows, at train_len"
           if levels else "")
  ax.set_title(f"Perplexity vs length ({protocol})\nmean over seeds, {band_text(ns)}{lines}",
               fontsize=9)
  _legend(fig)
  return fig


@_any_table
def fig_extensions(frame, protocol: str = "non_overlapping"):
  """Eval-time extensions beside their base scheme: one panel per scheme that has any, the model
  as trained and each (extension, factor) as curves of perplexity vs length.

  Returns:
    A Figure, or None if no run has an eval-time extension result for `protocol`.

  Raises:
    ValueError: `protocol` is not one of PROTOCOLS.
  """
  _check("protocol", protocol, PROTOCOLS)
  rows = _suite(frame, "ppl_vs_length", protocol, None)
  extended = sorted(rows.loc[rows["extension"].fillna("none") != "none", "scheme"].unique())
  if not extended:
    return None
  fig, axes = subplots(1, len(extended), figsize=(1.4 + 5 * len(extended), 4.2), dpi=110,
                       squeeze=False, layout="constrained")
  for ax, scheme in zip(axes[0], extended):
    _plot_bands(ax, _mean_band(rows[rows["scheme"] == scheme], "length", "ppl"))
    length_axis(ax, _train_len(rows))
    _log_ppl_axis(ax)
    ax.set_title(f"{scheme}: eval-time extensions ({protocol})", fontsize=9)
  _legend(fig)
  return fig


@_any_table
def fig_loss_by_position(frame, length: int | None = None, protocol: str = "non_overlapping"):
  """Mean NLL vs token position in the window at one evaluation length, one curve per scheme
  (mean over seeds of the per-bin NLL; loss_by_position rows' `detail` bins).

  Args:
    frame: the results table.
    length: the evaluation length, tokens (default: the longest with results).
    protocol: perplexity protocol of the rows to use.

  Returns:
    A Figure, or None if the table has no loss_by_position rows for `protocol`.

  Raises:
    ValueError: `protocol` is not one of PROTOCOLS, or no row was evaluated at `length` (the
      message lists the lengths that were).
  """
  _check("protocol", protocol, PROTOCOLS)
  rows = _suite(frame, "loss_by_position", protocol).dropna(subset=["detail", "nll"])
  if rows.empty:
    return None
  evaluated = sorted(int(x) for x in rows["length"].unique())
  length = evaluated[-1] if length is None else length
  _check("length", length, evaluated)
  rows = rows[rows["length"] == length]
  bins = []
  for _, row in rows.assign(label=curve_labels(rows)).iterrows():
    for b in json.loads(row["detail"]):
      if b.get("nll") is not None and b.get("tokens"):
        bins.append({"label": row["label"], "x": ((b["start"] + 1) * b["end"]) ** 0.5,
                     "nll": b["nll"]})
  if not bins:
    return None
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  ns = _plot_bands(ax, _mean_band(pd.DataFrame(bins).assign(scheme=lambda d: d["label"]), "x",
                                  "nll"))
  length_axis(ax, _train_len(rows))
  ax.set_xlabel("context tokens (position in window + 1)")
  ax.set_ylabel("NLL (nats per token)")
  ax.set_title(f"Loss by position at length {length} ({protocol}); mean over seeds,\n"
               f"{band_text(ns)}", fontsize=9)
  _legend(fig)
  return fig


@_any_table
def fig_accuracy_vs_length(frame, suite: str = "passkey"):
  """Retrieval accuracy (all depths) vs context length per scheme and extension, mean over
  seeds with its band (`band_stats`, named in the title).

  Returns:
    A Figure, or None if the table has no `suite` rows with an accuracy.

  Raises:
    ValueError: `suite` is not one of RETRIEVAL_SUITES.
  """
  _check("suite", suite, RETRIEVAL_SUITES)
  rows = _suite(frame, suite, None, None)
  bands = _mean_band(rows, "length", "accuracy") if not rows.empty else {}
  if not bands:
    return None
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  ns = _plot_bands(ax, bands)
  length_axis(ax, _train_len(rows))
  ax.set_ylim(-0.02, 1.02)
  ax.set_ylabel(f"{suite} accuracy")
  ax.set_title(f"{suite} accuracy vs length\nmean over seeds, {band_text(ns)}", fontsize=9)
  _legend(fig)
  return fig


@_any_table
def fig_algorithmic(frame, metric: str = "exact_match"):
  """Accuracy per instance size on the algorithmic tasks: one panel per task, one curve per
  scheme (mean over seeds with its band, `band_stats`, named in the figure's title), the largest
  trained size marked.

  Args:
    frame: the results table; metric: "exact_match" | "token_accuracy".

  Returns:
    A Figure, or None if the table has no algorithmic rows.

  Raises:
    ValueError: `metric` is not one of ALGORITHMIC_METRICS.
  """
  _check("metric", metric, ALGORITHMIC_METRICS)
  rows = frame[frame["suite"] == "algorithmic"].dropna(subset=[metric])
  if rows.empty:
    return None
  task_col = "task" if "task" in rows else None
  tasks = sorted(rows[task_col].fillna("").unique()) if task_col else [""]
  fig, axes = subplots(1, len(tasks), figsize=(1.4 + 5 * len(tasks), 4), dpi=110, squeeze=False,
                       layout="constrained")
  ns = []
  for ax, task in zip(axes[0], tasks):
    sub = rows[rows[task_col].fillna("") == task] if task_col else rows
    ns += _plot_bands(ax, _mean_band(sub, "size", metric))
    trained = sub.loc[sub["in_distribution"].astype(bool), "size"]
    if not trained.empty:
      ax.axvline(trained.max(), color="gray", linestyle="--",
                 label=f"largest trained size {int(trained.max())}")
    ax.set_xlabel("instance size")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task or 'algorithmic'}: {metric.replace('_', ' ')} by size", fontsize=9)
    ax.grid(True, alpha=0.3)
  fig.suptitle(f"{metric.replace('_', ' ')} by instance size\nmean over seeds, {band_text(ns)}",
               fontsize=9)
  _legend(fig)
  return fig



@_any_table
def fig_attention_vs_length(frame):
  """Attention entropy (with the uniform ceiling) and sink mass vs length per scheme, mean over
  layers, heads and seeds (the band over seeds: `band_stats`, named in the title): the
  attention suite's rows.

  Returns:
    A Figure, or None if the table has no attention rows.
  """
  rows = _suite(frame, "attention", None, None)
  if rows.empty or rows["entropy"].dropna().empty:
    return None
  fig, (ax_e, ax_s) = subplots(1, 2, figsize=(12, 4.5), dpi=110, layout="constrained")
  ns = _plot_bands(ax_e, _mean_band(rows, "length", "entropy"))
  ceiling = rows.dropna(subset=["entropy_uniform"]).groupby("length")["entropy_uniform"].first()
  ax_e.plot(ceiling.index, ceiling.values, color="black", linestyle=":",
            label="uniform over visible keys")
  ns += _plot_bands(ax_s, _mean_band(rows, "length", "sink_mass"))
  for ax, ylabel in ((ax_e, "attention entropy (nats)"), (ax_s, "attention on the BOS (sink)")):
    length_axis(ax, _train_len(rows))
    ax.set_ylabel(ylabel)
  ax_s.set_yscale("log")  # sink mass spans decades (about 1/L), far below 1
  fig.suptitle("Attention diagnostics vs length (mean over layers, heads, windows, seeds; "
               f"{band_text(ns)})", fontsize=10)
  _legend(fig)
  return fig


@_any_table
def fig_metric_vs_length(frame, suite: str):
  """A registered suite's headline metric (its `Suite.metric` column) vs length per scheme and
  extension, mean over seeds with its band (`band_stats`): the report's figure of a suite that has
  no
  figure of its own.

  Returns:
    A Figure, or None if the suite declares no metric or the table has no such rows.

  Raises:
    ValueError: `suite` is not registered (eval/suites/).
  """
  _check("suite", suite, list(suites_registry.REGISTRY))
  metric = suites_registry.REGISTRY[suite].metric
  rows = _suite(frame, suite, None, None)
  if metric is None or rows.empty or metric not in rows:
    return None
  bands = _mean_band(rows, "length", metric)
  if not bands:
    return None
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  ns = _plot_bands(ax, bands)
  length_axis(ax, _train_len(rows))
  ax.set_ylabel(suites_registry.REGISTRY[suite].metric_label or metric)
  ax.set_title(f"{suite}: {metric} vs length\nmean over seeds, {band_text(ns)}", fontsize=9)
  _legend(fig)
  return fig


RATIO_AXES = {"num_params": "parameters", "train_len": "train_len (tokens)"}


def extrapolation_ratios(frame, multiplier: float = 8.0) -> pd.DataFrame:
  """Per run (non-overlapping perplexity, no eval-time extension): ppl at `multiplier` x
  train_len over ppl at 1x, with the run's scheme, seed, num_params and train_len; runs without
  both lengths are left out."""
  rows = _suite(frame, "ppl_vs_length", "non_overlapping")
  out = []
  for run, group in rows.groupby("run", sort=True):
    by_mult = group.groupby("multiplier")["ppl"].mean()
    at = {m: by_mult[m] for m in by_mult.index if np.isclose(m, multiplier) or np.isclose(m, 1)}
    long = next((v for m, v in at.items() if np.isclose(m, multiplier)), None)
    short = next((v for m, v in at.items() if np.isclose(m, 1.0)), None)
    if long is None or short is None or not short > 0:
      continue
    first = group.iloc[0]
    out.append({"run": run, "scheme": first.get("scheme"), "seed": first.get("seed"),
                "num_params": first.get("num_params"), "train_len": first.get("train_len"),
                "ratio": long / short})
  return pd.DataFrame(out, columns=["run", "scheme", "seed", "num_params", "train_len", "ratio"])


@_any_table
def fig_extrapolation_ratio(frame, axis: str = "num_params", multiplier: float = 8.0):
  """Extrapolation ratio (ppl at `multiplier` x train_len / ppl at train_len, non-overlapping
  windows) against model size or training length, one line per scheme: mean over seeds with its
  band (`band_stats`, named in the title); the size and length axes of a study (sweeps/study.py
  model_sizes,
  train_lengths).

  Args:
    frame: the results table; axis: "num_params" | "train_len"; multiplier: the long length.

  Returns:
    A Figure, or None when the table has fewer than two values of `axis`.

  Raises:
    ValueError: `axis` is not one of RATIO_AXES.
  """
  _check("axis", axis, RATIO_AXES)
  ratios = extrapolation_ratios(frame, multiplier).dropna(subset=[axis])
  if ratios[axis].nunique() < 2:
    return None
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  ns = []
  for scheme, group in ratios.groupby("scheme", sort=True):
    stats = band_stats(group, axis, "ratio")
    ns += list(stats["n"])
    style = scheme_style(str(scheme))
    line, = ax.plot(stats.index, stats["mean"], label=str(scheme), markersize=5, **style)
    if (stats["max"] > stats["min"]).any():
      ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.2)
  ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
  ax.set_xscale("log", base=10 if axis == "num_params" else 2)
  ax.set_yscale("log")
  ax.set_xlabel(RATIO_AXES[axis])
  ax.set_ylabel(f"ppl at {multiplier:g}x train_len / ppl at 1x")
  ax.set_title(f"Extrapolation ratio vs {RATIO_AXES[axis]}\nmean over seeds, {band_text(ns)}",
               fontsize=9)
  ax.grid(True, which="both", alpha=0.3)
  _legend(fig)
  return fig
