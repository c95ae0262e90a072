"""Study figures: from a study's tidy results table (sweeps/collect.py), one curve per scheme
(mean over seeds, band = the bootstrap 95% interval of the mean: `BAND`); the training curves,
one line per run, from the runs' metrics.jsonl (`read_training_curves`, `fig_training_curves`:
they need the run folders).

Each figure function returns a matplotlib Figure, or None when the table holds nothing for it;
the notebooks display them and sweeps/report.py embeds them. The figures of a single run, written
beside its eval/*.json, are in eval/plots.py.
"""

from __future__ import annotations

import functools
import io
import json
import os
import warnings
import zlib

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D

from eval import suites as suites_registry
from eval.plots import ACCURACY_CMAP, RETRIEVAL_CMAP, length_axis
from runs.plots import LEGEND_FONTSIZE, log_axis, subplots
from configs.extension_recipes import RECIPES
from runs.metrics import read_metrics
from sweeps.collect import (bootstrap_high, bootstrap_low, configuration_columns, stale_runs,
                            summarize)


def study_table_path(study_dir: str) -> str | None:
  """The results table sweeps.collect wrote in `study_dir`: results.parquet, else results.csv,
  else None."""
  for name in ("results.parquet", "results.csv"):
    if os.path.exists(os.path.join(study_dir, name)):
      return os.path.join(study_dir, name)
  return None


def read_table(path: str):
  """A study's results table: `results.parquet` / `results.csv` (sweeps.collect), or a study
  folder holding one (parquet preferred). A warning names the runs whose results changed since
  the folder's table was collected (sweeps.collect.stale_runs; collect it again to include
  them).

  Raises:
    FileNotFoundError: no such file, or a folder without a results table.
    ValueError: the file is not a .parquet / .csv results table (unreadable, or without the
      `run` and `suite` columns sweeps.collect writes; e.g. its summary.csv).
  """
  if os.path.isdir(path):
    table = study_table_path(path)
    if table is not None:
      newer = stale_runs(path, table)
      if newer:
        warnings.warn(f"{table} predates the results of {len(newer)} run(s) "
                      f"({', '.join(newer[:3])}{', ...' if len(newer) > 3 else ''}); run "
                      f"python -m sweeps.collect {path} to include them", stacklevel=2)
      return read_table(table)
    raise FileNotFoundError(f"{path} holds no results.parquet or results.csv "
                            "(run python -m sweeps.collect on the study folder first)")
  if not os.path.exists(path):
    raise FileNotFoundError(f"no results table at {path}")
  if os.path.isdir(path) or not path.endswith((".parquet", ".csv")):
    raise ValueError(f"{path} is not a results .parquet / .csv file (sweeps.collect writes "
                     "<study>/results.parquet and results.csv)")
  try:
    frame = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
  except Exception as e:  # pyarrow / pandas parser errors: one line, naming the file
    raise ValueError(f"{path} is not a readable results table: {type(e).__name__}: "
                     f"{str(e).splitlines()[0] if str(e) else ''}") from None
  missing = [c for c in ("run", "suite") if c not in frame.columns]
  if missing:
    raise ValueError(f"{path} is not a results table: no {' or '.join(missing)} column "
                     "(sweeps.collect's results.parquet / results.csv, not its summary.csv)")
  for column in frame.columns[frame.dtypes == object]:
    # Parquet gives a list-valued config field (eval.length_multipliers, LongRoPE's factors) back
    # as numpy arrays; collect's frame holds tuples, which compare and group like the configs.
    if frame[column].map(lambda v: isinstance(v, np.ndarray)).any():
      frame[column] = frame[column].map(lambda v: tuple(v.tolist()) if isinstance(v, np.ndarray)
                                        else v)
  return frame


# Every column the study figures read. A table lacks the columns of suites it has no results for
# (a study without algorithmic runs has no `exact_match`); figures see them as empty.
TABLE_COLUMNS = ("run", "scheme", "seed", "train_len", "task", "suite", "extension",
                 "extension_factor", "protocol", "length", "multiplier", "ppl", "nll", "detail",
                 "accuracy", "entropy", "entropy_uniform", "sink_mass", "size", "exact_match",
                 "token_accuracy", "in_distribution")


def _any_table(fig_fn):
  """Lets `fig_fn(frame, ...)` take a results table that lacks some of TABLE_COLUMNS."""
  @functools.wraps(fig_fn)
  def wrapper(frame, *args, **kwargs):
    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
      frame = frame.assign(**{c: None for c in missing})
    return fig_fn(frame, *args, **kwargs)
  return wrapper


def curve_labels(frame) -> pd.Series:
  """Legend label of every row: the scheme, the config fields that vary between runs apart from
  seeds and eval settings (the `cfg.*` columns sweeps.collect.configuration_columns groups the
  summary by, e.g. model size), and the eval-time extension with its factor. A warm-started
  child (a `method` column, the context-extension recipes) is named by its method; the fields
  shown are those that vary among the from-scratch runs (a recipe's own fields, its learning
  rate or factors, would otherwise fill the legend)."""
  methods = (frame["method"].fillna("").astype(str) if "method" in frame
             else pd.Series("", index=frame.index))
  scratch = frame[methods == ""] if (methods == "").any() else frame
  varying = [c for c in configuration_columns(frame.columns) if c.startswith("cfg.")
             and scratch[c].nunique(dropna=False) > 1]

  def label(row) -> str:
    parts = [str(row.get("scheme", "model"))]
    method = row.get("method")
    if isinstance(method, str) and method:
      parts.append(f"[{method}]")
    parts += [f"{c.rsplit('.', 1)[-1]}={row[c]}" for c in varying]
    ext = row.get("extension")
    if isinstance(ext, str) and ext != "none":
      factor = row.get("extension_factor")
      parts.append(f"+ {ext}" + (f" x{factor:g}" if pd.notna(factor) and factor != 1 else ""))
    return " ".join(parts)

  if frame.empty:
    return pd.Series([], dtype=str)
  return frame.apply(label, axis=1)


# What a figure's band is: the percentile bootstrap 95% interval of the mean over runs
# (sweeps/collect.py `bootstrap_interval`, the summary's `_ci_low` / `_ci_high`), which with two
# seeds is their min..max.
BAND = "band = bootstrap 95% CI of the mean (2 seeds: min..max)"


def _mean_band(frame, x: str, y: str):
  """Per label: x values, the mean of y over runs (seeds) and the band ("min", "max": the
  bootstrap 95% interval of the mean, `BAND`; mean..mean for one run), sorted by x."""
  rows = frame.dropna(subset=[y]).assign(label=curve_labels(frame))
  out = {}
  for label, group in rows.groupby("label", sort=True):
    stats = group.groupby(x)[y].agg(["mean", bootstrap_low, bootstrap_high]).sort_index()
    stats.columns = ["mean", "min", "max"]
    one = stats["min"].isna()
    stats.loc[one, "min"] = stats.loc[one, "max"] = stats.loc[one, "mean"]
    out[label] = stats
  return out


# One style per scheme in every figure, the same in all of them: the registry's schemes in a
# fixed order, each a distinct (colour, line style) pair and its own marker. Colours are the
# Okabe-Ito colour-blind-safe set without its yellow (too pale on white) and black (the
# `train_len` markers are grey and black), plus a saddle brown and Paul Tol's indigo and olive,
# so that the first nine schemes (those of the committed CPU study) each have a colour of their
# own; the second round of colours is dash-dotted, the third dotted. Eval-time extensions of a scheme are dashed,
# in Dark2 colours without its orange, gold and grey (too close to the vermillion of RoPE, the
# scheme most extensions apply to, to learned's orange and to the train_len marker).
SCHEME_ORDER = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "kerple_log", "fire",
                "xpos", "kerple_power", "sandwich", "cope", "rope_mixed", "p_rope", "hope",
                "resonance_rope", "transformer_xl", "dape", "fope", "pope", "abacus", "bipe_rope",
                "bipe_alibi")
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9")
PALETTE = OKABE_ITO + ("#8B4513", "#332288", "#999933")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p", "d", "8", "H", "+", "x", "1",
           "2", "3", "4", "$\\alpha$", "$\\beta$")
EXTENSION_COLOURS = ("#7570B3", "#E7298A", "#66A61E", "#1B9E77", "#A6761D")
_STYLES = [{"color": PALETTE[i % len(PALETTE)],
            "linestyle": ("-", "-.", ":")[i // len(PALETTE) % 3], "marker": MARKERS[i]}
           for i in range(len(MARKERS))]


def scheme_style(scheme: str) -> dict:
  """Matplotlib style {color, linestyle, marker} of a scheme: fixed for the schemes in
  SCHEME_ORDER (no two alike), a stable pick (crc32 of the name) for any other."""
  if scheme in SCHEME_ORDER:
    return dict(_STYLES[SCHEME_ORDER.index(scheme)])
  return dict(_STYLES[zlib.crc32(scheme.encode()) % len(_STYLES)])


def _style(label: str, extensions: list[str]) -> dict:
  """Matplotlib line style of a curve label ("<scheme> [<method>] [cfg...] [+ <extension>
  x<factor>]"): the scheme's `scheme_style`; a warm-started child's in its recipe's colour
  (METHOD_COLOURS, solid, as the context-extension figures draw it); the curves of eval-time
  extensions dashed, in EXTENSION_COLOURS taken in the order of `extensions` (the sorted
  extension labels of the axes)."""
  base, plus, _ = label.partition(" + ")
  if plus:
    return {"color": EXTENSION_COLOURS[extensions.index(label) % len(EXTENSION_COLOURS)],
            "linestyle": "--", "marker": "o"}
  scheme, bracket, rest = base.partition(" [")
  if bracket:  # a warm-started child "<scheme> [<method>] ...": its recipe's colour
    method = rest.partition("]")[0]
    return {"color": METHOD_COLOURS.get(method, "#555555"), "linestyle": "-", "marker": "o"}
  return scheme_style(scheme)


def _plot_bands(ax, bands: dict) -> None:
  extensions = sorted(label for label in bands if " + " in label)
  for label, stats in bands.items():
    line, = ax.plot(stats.index, stats["mean"], markersize=4, label=label,
                    **_style(label, extensions))
    if (stats["max"] > stats["min"]).any():
      ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.2)


def _legend(fig) -> None:
  """One legend for the figure at LEGEND_FONTSIZE, the labelled artists of all its axes (each
  label once), outside the axes: to the right of the top row's rightmost panel, from its top
  down, so that no title runs into it (the figure must use layout="constrained")."""
  handles = {}
  for ax in fig.axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      handles.setdefault(label, handle)
  if not handles:
    return
  top = max(ax.get_position().y1 for ax in fig.axes)
  anchor = max((ax for ax in fig.axes if ax.get_position().y1 >= top - 1e-6),
               key=lambda ax: ax.get_position().x1)
  anchor.legend(list(handles.values()), list(handles), loc="upper left",
                bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=LEGEND_FONTSIZE)


def _train_len(frame) -> int | None:
  values = frame["train_len"].dropna().unique() if "train_len" in frame else []
  return int(values[0]) if len(values) == 1 else None


def _log_ppl_axis(ax) -> None:
  """`log_axis` labelled as perplexity."""
  log_axis(ax)
  ax.set_ylabel("perplexity (per token)")


PROTOCOLS = ("non_overlapping", "sliding")
RETRIEVAL_SUITES = ("passkey", "needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
                    "variable_tracking", "common_words", "frequent_words")  # eval/needle.py SUITES
ALGORITHMIC_METRICS = ("exact_match", "token_accuracy")


def _check(name: str, value, allowed) -> None:
  """Raises ValueError naming the argument and its allowed values."""
  if value not in allowed:
    raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")


def _suite(frame, suite: str, protocol: str | None = None, extensions: bool | None = False):
  rows = frame[frame["suite"] == suite]
  if protocol is not None and "protocol" in rows:
    rows = rows[rows["protocol"] == protocol]
  if extensions is False:
    rows = rows[rows["extension"].fillna("none") == "none"]
  return rows


@_any_table
def fig_ppl_vs_length(frame, protocol: str = "non_overlapping", with_extensions: bool = False):
  """Perplexity vs evaluation length per scheme (log-log), mean over seeds with its bootstrap
  band (`BAND`).

  Args:
    frame: the results table; protocol: "non_overlapping" | "sliding" (perplexity protocol,
      Press et al., arXiv 2108.12409, Section 4).
    with_extensions: also draw every eval-time extension's curve (else the models as trained).

  Returns:
    A Figure, or None if the table has no ppl_vs_length rows for `protocol`.

  Raises:
    ValueError: `protocol` is not one of PROTOCOLS.
  """
  _check("protocol", protocol, PROTOCOLS)
  rows = _suite(frame, "ppl_vs_length", protocol, None if with_extensions else False)
  if rows.empty:
    return None
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  _plot_bands(ax, _mean_band(rows, "length", "ppl"))
  length_axis(ax, _train_len(rows))
  _log_ppl_axis(ax)
  ax.set_title(f"Perplexity vs length ({protocol}); mean over seeds, {BAND}",
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
  _plot_bands(ax, _mean_band(pd.DataFrame(bins).assign(scheme=lambda d: d["label"]), "x", "nll"))
  length_axis(ax, _train_len(rows))
  ax.set_xlabel("context tokens (position in window + 1)")
  ax.set_ylabel("NLL (nats per token)")
  ax.set_title(f"Loss by position at length {length} ({protocol}); mean over seeds", fontsize=9)
  _legend(fig)
  return fig


@_any_table
def summary_table(frame, sort_by: str = "ratio_8x_1x_mean", protocol: str | None = None):
  """The study summary (sweeps.collect.summarize: per scheme x extension x protocol, over seeds:
  ppl at 1x..16x train_len, extrapolation ratio ppl(8x)/ppl(1x), passkey length reached, final
  validation loss), sorted by `sort_by` (ascending, stable; missing values last).

  Args:
    frame: the results table.
    sort_by: a summary column. Note that the extrapolation ratio ranks flatness, not quality: an
      extension that is bad at every length can be flat.
    protocol: keep only this perplexity protocol's rows (and the protocol-free passkey rows).

  Raises:
    ValueError: `sort_by` is not a column of the summary (the message lists them).
    ValueError: `protocol` is not None or one of PROTOCOLS.
  """
  if protocol is not None:
    _check("protocol", protocol, PROTOCOLS)
  summary = summarize(frame)
  if protocol is not None:
    summary = summary[summary["protocol"].isna() | (summary["protocol"] == protocol)]
  if sort_by not in summary.columns:
    raise ValueError(f"sort_by={sort_by!r} is not a summary column; choose one of "
                   f"{list(summary.columns)}")
  return summary.sort_values(sort_by, na_position="last", kind="stable").reset_index(drop=True)


def _depth_grid(rows):
  """{label: (lengths, depths, mean accuracy [depth, length])} from retrieval rows' detail."""
  cells = []
  for _, row in rows.assign(label=curve_labels(rows)).iterrows():
    if isinstance(row.get("detail"), str):
      for depth, acc in json.loads(row["detail"]).items():
        cells.append({"label": row["label"], "length": int(row["length"]),
                      "depth": float(depth), "accuracy": acc})
  out = {}
  if not cells:
    return out
  cells = pd.DataFrame(cells)
  for label, group in cells.groupby("label", sort=True):
    table = group.groupby(["depth", "length"])["accuracy"].mean().unstack("length")
    out[label] = (list(table.columns), list(table.index), table.to_numpy(dtype=float))
  return out


@_any_table
def fig_retrieval_grid(frame, suite: str = "passkey", with_extensions: bool = True):
  """Retrieval heatmaps (depth x length, accuracy mean over seeds) for every scheme in a grid.

  Args:
    frame: the results table; suite: one of RETRIEVAL_SUITES.
    with_extensions: include eval-time extensions as their own panels.

  Returns:
    A Figure, or None if the table has no `suite` rows.

  Raises:
    ValueError: `suite` is not one of RETRIEVAL_SUITES.
  """
  _check("suite", suite, RETRIEVAL_SUITES)
  rows = _suite(frame, suite, None, None if with_extensions else False)
  grids = _depth_grid(rows)
  if not grids:
    return None
  cols = min(3, len(grids))
  nrows = -(-len(grids) // cols)
  fig, axes = subplots(nrows, cols, figsize=(1.2 + 3.8 * cols, 0.8 + 2.6 * nrows), dpi=110,
                       squeeze=False, layout="constrained")
  cmap = RETRIEVAL_CMAP
  train_len = _train_len(rows)
  image = None
  for ax, (label, (lengths, depths, acc)) in zip(axes.flat, grids.items()):
    image = ax.imshow(np.ma.masked_invalid(acc), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(L) for L in lengths], fontsize=8)
    ax.set_yticks(range(len(depths)), [f"{100 * d:g}%" for d in depths], fontsize=8)
    inside = [j for j, L in enumerate(lengths) if train_len and L <= train_len]
    if inside:
      ax.axvline(max(inside) + 0.5, color="black", linestyle="--", linewidth=1)
    ax.set_title(label, fontsize=9)
  for ax in list(axes.flat)[len(grids):]:
    ax.axis("off")
  # Constrained layout puts the suptitle, axis labels and colour bar right against the panels
  # (the default layout left a blank band under the title and above the x label).
  fig.supxlabel(f"context length (tokens); dashed: train_len={train_len}", fontsize=9)
  fig.supylabel(f"{suite} depth (grey: length skipped)", fontsize=9)
  fig.suptitle(f"{suite} accuracy (mean over seeds)", fontsize=10)
  fig.colorbar(image, ax=axes, label="accuracy", fraction=0.03)
  return fig


@_any_table
def fig_accuracy_vs_length(frame, suite: str = "passkey"):
  """Retrieval accuracy (all depths) vs context length per scheme and extension, mean over
  seeds with its bootstrap band (`BAND`).

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
  _plot_bands(ax, bands)
  length_axis(ax, _train_len(rows))
  ax.set_ylim(-0.02, 1.02)
  ax.set_ylabel(f"{suite} accuracy")
  ax.set_title(f"{suite} accuracy vs length; mean over seeds, {BAND}", fontsize=9)
  _legend(fig)
  return fig


@_any_table
def fig_algorithmic(frame, metric: str = "exact_match"):
  """Accuracy per instance size on the algorithmic tasks: one panel per task, one curve per
  scheme (mean over seeds, `BAND`), the largest trained size marked.

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
  for ax, task in zip(axes[0], tasks):
    sub = rows[rows[task_col].fillna("") == task] if task_col else rows
    _plot_bands(ax, _mean_band(sub, "size", metric))
    trained = sub.loc[sub["in_distribution"].astype(bool), "size"]
    if not trained.empty:
      ax.axvline(trained.max(), color="gray", linestyle="--",
                 label=f"largest trained size {int(trained.max())}")
    ax.set_xlabel("instance size")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task or 'algorithmic'}: {metric.replace('_', ' ')} by size", fontsize=9)
    ax.grid(True, alpha=0.3)
  _legend(fig)
  return fig


@_any_table
def fig_algorithmic_grid(frame):
  """Exact-match heatmaps of the grid tasks (addition on a grid of operand lengths, McLeish et
  al., arXiv 2405.17399, Figure 1's layout): one panel per (task, scheme), first operand's size
  on y, second's on x, in percent, mean over seeds, the training square outlined; colour-blind
  safe (cividis). Read from the algorithmic rows' `detail` ({second size: exact match} per first
  size, eval/suites/algorithmic.py).

  Returns:
    A Figure, or None if the table has no grid rows.
  """
  from matplotlib.patches import Rectangle  # local: as eval/algorithmic.py
  rows = frame[frame["suite"] == "algorithmic"] if "suite" in frame else frame.iloc[:0]
  if "detail" not in rows:
    return None
  rows = rows[rows["detail"].apply(lambda d: isinstance(d, str) and d.startswith("{"))]
  if rows.empty:
    return None
  cells = []
  for _, row in rows.assign(label=curve_labels(rows)).iterrows():
    task = row["task"] if "task" in rows and isinstance(row["task"], str) else "grid"
    for b, v in json.loads(row["detail"]).items():
      cells.append({"panel": f"{task}: {row['label']}", "a": int(row["size"]), "b": int(b),
                    "v": np.nan if v is None else 100 * v,
                    "trained": bool(row["in_distribution"]) if row["in_distribution"] is not None
                    else False})
  cells = pd.DataFrame(cells)
  panels = sorted(cells["panel"].unique())
  cols = min(3, len(panels))
  nrows = -(-len(panels) // cols)
  fig, axes = subplots(nrows, cols, figsize=(1.2 + 3.9 * cols, 0.9 + 3.4 * nrows), dpi=110,
                       squeeze=False, layout="constrained")
  image = None
  for ax, panel in zip(axes.flat, panels):
    sub = cells[cells["panel"] == panel]
    table = sub.groupby(["a", "b"])["v"].mean().unstack("b")
    sizes = list(table.columns)
    image = ax.imshow(np.ma.masked_invalid(table.to_numpy(dtype=float)), cmap=ACCURACY_CMAP,
                      vmin=0, vmax=100, origin="lower", aspect="auto",
                      extent=(min(sizes) - 0.5, max(sizes) + 0.5, min(table.index) - 0.5,
                              max(table.index) + 0.5))
    trained = sorted(sub.loc[sub["trained"], "a"].unique())
    if trained:
      lo, hi = trained[0], trained[-1]
      ax.add_patch(Rectangle((lo - 0.5, lo - 0.5), hi - lo + 1, hi - lo + 1, fill=False,
                             edgecolor="white", linestyle="--", linewidth=1.2))
    ax.set_title(panel, fontsize=9)
    ax.tick_params(labelsize=7)
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.supxlabel("second operand's size (digits)", fontsize=9)
  fig.supylabel("first operand's size (digits)", fontsize=9)
  fig.suptitle("exact match (%) on the grid of operand sizes, mean over seeds; dashed: the "
               "training square", fontsize=10)
  fig.colorbar(image, ax=axes, label="exact match (%)", fraction=0.03)
  return fig


@_any_table
def fig_attention_vs_length(frame):
  """Attention entropy (with the uniform ceiling) and sink mass vs length per scheme, mean over
  layers, heads and seeds (`BAND`, over seeds): the attention suite's rows.

  Returns:
    A Figure, or None if the table has no attention rows.
  """
  rows = _suite(frame, "attention", None, None)
  if rows.empty or rows["entropy"].dropna().empty:
    return None
  fig, (ax_e, ax_s) = subplots(1, 2, figsize=(12, 4.5), dpi=110, layout="constrained")
  _plot_bands(ax_e, _mean_band(rows, "length", "entropy"))
  ceiling = rows.dropna(subset=["entropy_uniform"]).groupby("length")["entropy_uniform"].first()
  ax_e.plot(ceiling.index, ceiling.values, color="black", linestyle=":",
            label="uniform over visible keys")
  _plot_bands(ax_s, _mean_band(rows, "length", "sink_mass"))
  for ax, ylabel in ((ax_e, "attention entropy (nats)"), (ax_s, "attention on the BOS (sink)")):
    length_axis(ax, _train_len(rows))
    ax.set_ylabel(ylabel)
  ax_s.set_yscale("log")  # sink mass spans decades (about 1/L), far below 1
  fig.suptitle("Attention diagnostics vs length (mean over layers, heads, windows, seeds)",
               fontsize=10)
  _legend(fig)
  return fig


def fig_attention_maps(maps: dict, layer: int = -1, max_tokens: int = 256):
  """Head-averaged attention maps of one layer, one panel per model, on a log colour scale.

  Args:
    maps: {label: float [num_layers, num_heads, L, L]} (eval/attention_stats.attention_maps).
    layer: the layer to show (Python indexing).
    max_tokens: show at most the first `max_tokens` queries and keys.

  Returns:
    A Figure.
  """
  fig, axes = subplots(1, len(maps), figsize=(1 + 4 * len(maps), 3.8), dpi=110, squeeze=False,
                       layout="constrained")
  image = None
  for ax, (label, m) in zip(axes[0], maps.items()):
    probs = np.asarray(m[layer]).mean(axis=0)[:max_tokens, :max_tokens]
    image = ax.imshow(np.where(probs > 0, probs, np.nan), cmap="viridis",
                      norm=LogNorm(vmin=1e-4, vmax=1), interpolation="nearest")
    ax.set_title(f"{label}: layer {layer % len(m)}", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
  fig.colorbar(image, ax=axes, label="attention probability (head mean)", fraction=0.03)
  return fig


# Suites drawn by the figures above; any other registered suite with a `metric` gets
# `fig_metric_vs_length` in the report.
DRAWN_SUITES = ("ppl_vs_length", "loss_by_position", *RETRIEVAL_SUITES, "attention",
                "algorithmic")


@_any_table
def fig_metric_vs_length(frame, suite: str):
  """A registered suite's headline metric (its `Suite.metric` column) vs length per scheme and
  extension, mean over seeds with its bootstrap band: the report's figure of a suite that has no
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
  _plot_bands(ax, bands)
  length_axis(ax, _train_len(rows))
  ax.set_ylabel(suites_registry.REGISTRY[suite].metric_label or metric)
  ax.set_title(f"{suite}: {metric} vs length; mean over seeds, {BAND}", fontsize=9)
  _legend(fig)
  return fig


# Panels of the study's training curves: (metrics.jsonl key, y label, log y axis).
TRAINING_PANELS = (("loss", "training loss (nats per token)", True),
                   ("val_loss", "validation loss (nats per token)", True),
                   ("learning_rate", "learning rate", False),
                   ("grad_norm", "gradient norm (before clipping)", True),
                   ("tokens_per_s", "throughput (tokens/s)", False))
TRAINING_KEYS = tuple(key for key, _, _ in TRAINING_PANELS)


def runs_folder(path: str) -> str:
  """The folder that holds the run folders of a study given as `path`: the folder itself, or the
  folder of a results .parquet / .csv file (sweeps.collect writes it in the study folder)."""
  return path if os.path.isdir(path) else (os.path.dirname(path) or ".")


def read_training_curves(study_dir: str, frame) -> pd.DataFrame:
  """The per-step training metrics of the table's runs, read from
  `<study_dir>/<run>/metrics.jsonl` (runs/metrics.py `read_metrics`).

  Args:
    study_dir: the folder holding the run folders (see `runs_folder`).
    frame: the results table; its runs (column `run`) are the runs read, their legend label is
      `curve_labels` of the model as trained among the runs that have metrics.

  Returns:
    One row per metrics.jsonl record with a step: run, label, scheme, seed, step and
    TRAINING_KEYS (NaN where the record lacks one: validation records carry only val_loss), in
    the order of the labels, then runs, then steps. A run without metrics.jsonl there has no
    rows (when no run has one: an empty frame with those columns).
  """
  columns = ["run", "label", "scheme", "seed", "step", *TRAINING_KEYS]
  logged = {}
  for run in dict.fromkeys(frame["run"]):
    records = [r for r in read_metrics(os.path.join(study_dir, str(run)))
               if r.get("step") is not None]
    if records:
      logged[run] = records
  runs = frame.drop_duplicates("run")
  runs = runs[runs["run"].isin(list(logged))].assign(extension="none")
  records = []
  if not runs.empty:
    for _, run in runs.assign(label=curve_labels(runs)).sort_values(["label", "run"]).iterrows():
      records += [{"run": run["run"], "label": run["label"], "scheme": run.get("scheme"),
                   "seed": run.get("seed"), "step": r["step"],
                   **{k: r.get(k) for k in TRAINING_KEYS}} for r in logged[run["run"]]]
  curves = pd.DataFrame.from_records(records, columns=columns)
  for key in TRAINING_KEYS:
    curves[key] = pd.to_numeric(curves[key], errors="coerce")
  return curves


def training_curves_note(frame, curves, study_dir: str | None = None) -> str:
  """One plain sentence on the runs of the table that have no training curves in `curves`
  (read_training_curves from `study_dir`, named in the sentence when given), "" when every run
  has them."""
  runs = list(dict.fromkeys(frame["run"]))
  missing = [r for r in runs if r not in set(curves["run"])]
  if not missing:
    return ""
  where = f" (looked in {study_dir})" if study_dir else ""
  if len(missing) == len(runs):
    return ("No training curves: they are drawn from each run's metrics.jsonl, which needs the "
            f"run folders, <root>/<study>/<run>/{where}, and this table holds only each run's "
            "final losses (final_train_loss, final_val_loss). Give the study folder where the "
            "run folders are: to python -m sweeps.report as its argument or as --runs, to the "
            "notebook as RESULTS or RUNS.")
  return (f"No metrics.jsonl for {len(missing)} of the {len(runs)} runs{where}, so no training "
          f"curves for them: {', '.join(map(str, missing))}.")


def fig_training_curves(curves, mean: bool = False):
  """The study's training curves: training loss, validation loss, learning rate, gradient norm
  and throughput against the optimizer step, one panel each, the legend in the sixth.

  Args:
    curves: read_training_curves's frame.
    mean: one line per scheme (label): the mean over its runs (seeds) at each step, band =
      the bootstrap interval (`BAND`); else (the default) one line per run, the seeds of a
      scheme in its colour, line style and marker (`scheme_style`).

  Returns:
    A Figure, or None if `curves` has no training loss. Every line's gid is its run (its label
    with `mean`); a panel no run logged says so.
  """
  if curves.empty or curves["loss"].dropna().empty:
    return None
  labels = list(dict.fromkeys(curves["label"]))
  fig, axes = subplots(2, 3, figsize=(12, 6.5), dpi=110, sharex=True, layout="constrained")
  panels = list(axes.flat)
  for ax, (key, ylabel, log) in zip(panels, TRAINING_PANELS):
    points = curves.dropna(subset=[key])
    for label in labels:
      style = _style(label, [])
      rows = points[points["label"] == label]
      groups = ([(label, rows.groupby("step")[key].agg(["mean", "min", "max"]))] if mean else
                [(run, one.set_index("step")[key].sort_index().to_frame("mean"))
                 for run, one in rows.groupby("run", sort=False)])
      for gid, line in groups:
        if line.empty:
          continue
        every = 1 if key == "val_loss" else max(1, len(line) // 6)
        drawn, = ax.plot(line.index, line["mean"], color=style["color"],
                         linestyle=style["linestyle"], marker=style["marker"], markersize=4,
                         markevery=every, linewidth=1.1, alpha=0.9, label=label, gid=gid)
        if mean and (line["max"] > line["min"]).any():
          ax.fill_between(line.index, line["min"], line["max"], color=drawn.get_color(),
                          alpha=0.2)
    if points.empty:
      ax.text(0.5, 0.5, f"no {key} in metrics.jsonl", transform=ax.transAxes, ha="center",
              va="center", fontsize=9, color="gray")
    elif log and (points[key] > 0).all():
      log_axis(ax)
    elif key == "tokens_per_s":
      ax.set_ylim(0, 1.1 * points[key].max())
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
  for ax in (*axes[1][:2], axes[0][2]):  # the panel above the legend's slot labels its steps
    ax.set_xlabel("optimizer step")
  axes[0][2].tick_params(labelbottom=True)
  legend_ax = panels[-1]
  legend_ax.axis("off")
  handles = [Line2D([], [], markersize=5, **_style(label, []))
             for label in labels]
  what = f"mean over seeds, {BAND}" if mean else "one line per run, seeds share a style"
  legend_ax.legend(handles, labels, loc="center", fontsize=LEGEND_FONTSIZE,
                   ncol=1 if len(labels) <= 12 else 2, title=what,
                   title_fontsize=LEGEND_FONTSIZE)
  fig.suptitle(f"Training curves of {curves['run'].nunique()} runs (metrics.jsonl)", fontsize=10)
  return fig


# Context extension (warm-started children, `method` column): one colour per recipe, the same
# for the fine-tuned child (solid) and for the method applied to the parent at evaluation only
# (dashed); the parent black, references from scratch of other schemes grey and dotted.
METHOD_COLOURS = dict(zip(RECIPES, PALETTE[1:] + PALETTE[:1]))
EVAL_ONLY = {"pi": "pi", "ntk": "ntk", "yarn": "yarn", "abf": "abf", "longrope": "longrope"}


def _families(frame):
  """Rows of the children (`method` set), their parents and the from-scratch runs of other
  schemes, labelled: (rows, {label: style}) or (None, None) without children."""
  if "method" not in frame or not (frame["method"].fillna("") != "").any():
    return None, None
  children = frame[frame["method"].fillna("") != ""]
  parents = set(children["parent"].str.rpartition("@")[0])
  parent_rows = frame[frame["run"].isin(parents)]
  parent_schemes = set(parent_rows["scheme"])
  refs = frame[(frame["parent"].fillna("") == "") & ~frame["run"].isin(parents)
               & ~frame["scheme"].isin(parent_schemes)
               & (frame["extension"].fillna("none") == "none")]
  labels, styles = [], {}
  def add(rows, label, style):
    labels.append(rows.assign(family=label))
    styles.setdefault(label, style)
  for (method,), rows in children.groupby(["method"]):
    add(rows[rows["extension"].fillna("none") == "none"], f"{method} (fine-tuned)",
        {"color": METHOD_COLOURS.get(method, "#555555"), "linestyle": "-", "marker": "o"})
  for (scheme, ext, factor), rows in parent_rows.groupby(
      ["scheme", "extension", "extension_factor"], dropna=False):
    if ext in (None, "none") or pd.isna(ext):
      add(rows, f"{scheme} parent (as trained)",
          {"color": "#000000", "linestyle": "-", "marker": "s"})
    else:
      size = f" x{factor:g}" if pd.notna(factor) and factor != 1 else ""
      add(rows, f"{ext}{size} (eval-only)",
          {"color": METHOD_COLOURS.get(EVAL_ONLY.get(ext, ext), "#555555"), "linestyle": "--",
           "marker": "x"})
  for (scheme,), rows in refs.groupby(["scheme"]):
    add(rows, f"{scheme} (from scratch, reference)",
        {"color": "#777777", "linestyle": ":", "marker": "D"})
  return pd.concat(labels), styles


def _training_mixes(frame) -> list[tuple[str, object]]:
  """The table split by training mix (`train_passkey_fraction`, the share of training windows
  that are passkey documents): [(panel title, rows)], text-only first; one entry, titled "",
  when every run has the same mix. Runs of different mixes are never averaged together."""
  if "train_passkey_fraction" not in frame:
    return [("", frame)]
  share = pd.to_numeric(frame["train_passkey_fraction"], errors="coerce").fillna(0.0)
  values = sorted(set(share))
  if len(values) < 2:
    return [("", frame)]
  return [("training mix: text only" if v == 0 else
           f"training mix: {100 * v:g}% passkey windows", frame[share == v]) for v in values]


@_any_table
def fig_context_extension(frame, protocol: str = "non_overlapping"):
  """Context extension: perplexity vs length of the parents as trained, each recipe's
  fine-tuned children (solid), each method applied to the parents at evaluation only (dashed,
  in its recipe's colour) and the from-scratch references of other schemes (grey, dotted); mean
  over seeds (parents), `BAND`; the parents' train_len and the fine-tuning length
  marked. One panel per training mix (`_training_mixes`).

  Returns:
    A Figure, or None when the table has no warm-started child with ppl_vs_length rows for
    `protocol`.

  Raises:
    ValueError: `protocol` is not one of PROTOCOLS.
  """
  _check("protocol", protocol, PROTOCOLS)
  panels = []
  for title, part in _training_mixes(_suite(frame, "ppl_vs_length", protocol, None)):
    rows, styles = _families(part)
    if rows is not None and not rows.empty:
      panels.append((title, rows, styles))
  if not panels:
    return None
  fig, axes = subplots(1, len(panels), figsize=(1.6 + 5.8 * len(panels), 4.6), dpi=110,
                       layout="constrained", squeeze=False, sharey=True)
  for ax, (title, rows, styles) in zip(axes[0], panels):
    for label, group in rows.groupby("family", sort=False):
      stats = group.groupby("length")["ppl"].agg(["mean", "min", "max"]).sort_index()
      line, = ax.plot(stats.index, stats["mean"], markersize=4, label=label, **styles[label])
      if (stats["max"] > stats["min"]).any():
        ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(),
                        alpha=0.15)
    parent_len = _train_len(rows[rows["method"].fillna("") == ""])
    length_axis(ax, parent_len)
    tuned = rows.loc[rows["method"].fillna("") != "", "train_len"].dropna()
    for t in sorted(set(int(t) for t in tuned) - {parent_len}):
      ax.axvline(t, color="black", linestyle=(0, (1, 3)), linewidth=1.2,
                 label=f"fine-tuning length={t}")
    _log_ppl_axis(ax)
    if title:
      ax.set_title(title, fontsize=9)
  fig.suptitle(f"Context extension ({protocol}): parents, fine-tuned children, eval-only "
               f"controls; mean over seeds, {BAND}", fontsize=9)
  _legend(fig)
  return fig


def fig_fine_tuning_curves(curves, frame):
  """Training loss of the warm-started children against their fine-tuning step, one line per
  recipe (`method`), mean over its children (one per parent seed), `BAND`; one panel
  per training mix (`_training_mixes`).

  Args:
    curves: read_training_curves's frame; frame: the results table (its `method` column).

  Returns:
    A Figure, or None without children's curves.
  """
  if curves is None or curves.empty or "method" not in frame:
    return None
  panels = []
  for title, part in _training_mixes(frame.drop_duplicates("run")):
    methods = part.set_index("run")["method"].fillna("")
    rows = curves[curves["run"].isin(methods.index)]
    rows = rows.assign(method=rows["run"].map(methods)).dropna(subset=["loss"])
    rows = rows[rows["method"] != ""]
    if not rows.empty:
      panels.append((title, rows))
  if not panels:
    return None
  fig, axes = subplots(1, len(panels), figsize=(1.4 + 5.2 * len(panels), 4.2), dpi=110,
                       layout="constrained", squeeze=False)
  for ax, (title, rows) in zip(axes[0], panels):
    for method, group in rows.groupby("method"):
      stats = group.groupby("step")["loss"].agg(["mean", "min", "max"]).sort_index()
      colour = METHOD_COLOURS.get(method, "#555555")
      ax.plot(stats.index, stats["mean"], color=colour, linewidth=1.3, label=method)
      if (stats["max"] > stats["min"]).any():
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.15)
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("training loss (nats per token)")
    ax.grid(True, alpha=0.3)
    if title:
      ax.set_title(title, fontsize=9)
  fig.suptitle(f"Fine-tuning curves per recipe; mean over parents' seeds, {BAND}",
               fontsize=9)
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
  windows) against model size or training length, one line per scheme: mean over seeds with the
  bootstrap band (`BAND`); the size and length axes of a study (sweeps/study.py model_sizes,
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
  for scheme, group in ratios.groupby("scheme", sort=True):
    stats = group.groupby(axis)["ratio"].agg(["mean", bootstrap_low, bootstrap_high]).sort_index()
    stats.columns = ["mean", "lo", "hi"]
    style = scheme_style(str(scheme))
    line, = ax.plot(stats.index, stats["mean"], label=str(scheme), markersize=5, **style)
    band = stats.dropna()
    if len(band) and (band["hi"] > band["lo"]).any():
      ax.fill_between(band.index, band["lo"], band["hi"], color=line.get_color(), alpha=0.2)
  ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
  ax.set_xscale("log", base=10 if axis == "num_params" else 2)
  ax.set_yscale("log")
  ax.set_xlabel(RATIO_AXES[axis])
  ax.set_ylabel(f"ppl at {multiplier:g}x train_len / ppl at 1x")
  ax.set_title(f"Extrapolation ratio vs {RATIO_AXES[axis]}; mean over seeds, {BAND}", fontsize=9)
  ax.grid(True, which="both", alpha=0.3)
  _legend(fig)
  return fig


def fig_search(selection: dict):
  """The tuning stage of a study (sweeps/search.py): every candidate's score (validation loss at
  train_len after its last step, nats per token) against the first searched field, one line per
  group in its scheme's style, the selected candidate starred; diverged candidates (infinite
  score) are left out and counted in the legend. With successive halving, the lines are the
  last rung's candidates and the earlier rungs' (shorter budgets) are hollow markers.

  Args:
    selection: a `selection.json` (sweeps.search.selection).

  Returns:
    A Figure, or None without candidates.
  """
  groups = selection.get("groups", [])
  if not groups or not selection.get("grid"):
    return None
  field = next(iter(selection["grid"]))
  fig, ax = subplots(figsize=(6.4, 4.2), dpi=110, layout="constrained")
  values = []
  for g in groups:
    label = ", ".join(f"{v}" for k, v in g["group"].items() if k != "@base") or "all runs"
    style = scheme_style(str(g["group"].get("model.position.kind", label)))
    last = max(c.get("rung", 0) for c in g["candidates"])  # successive halving: rungs
    earlier = [c for c in g["candidates"] if c.get("rung", 0) < last and np.isfinite(c["score"])]
    if earlier:
      ax.plot([c["fields"][field] for c in earlier], [c["score"] for c in earlier], marker="o",
              markerfacecolor="none", color=style.get("color"), alpha=0.6, linestyle="none")
      values += [c["fields"][field] for c in earlier]
    final = [c for c in g["candidates"] if c.get("rung", 0) == last]
    cands = [c for c in final if np.isfinite(c["score"])]
    diverged = len(final) - len(cands)
    others = [k for k in selection["grid"] if k != field]
    for key in sorted({tuple(c["fields"][k] for k in others) for c in cands}):
      line = sorted((c["fields"][field], c["score"]) for c in cands
                    if tuple(c["fields"][k] for k in others) == key)
      extra = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(others, key))
      ax.plot(*zip(*line), marker="o", color=style.get("color"),
              linestyle=style.get("linestyle", "-"),
              label=label + (f" ({extra})" if extra else "")
              + (f"; {diverged} diverged" if diverged else ""))
      values += [x for x, _ in line]
    best = next(c for c in final if c["fields"] == g["selected"])
    if np.isfinite(best["score"]):
      ax.plot([best["fields"][field]], [best["score"]], marker="*", markersize=14,
              color=style.get("color"), markeredgecolor="black", linestyle="none")
  numeric = [v for v in values if isinstance(v, (int, float))]
  if numeric and min(numeric) > 0 and max(numeric) / min(numeric) >= 10:
    ax.set_xscale("log")
  ax.set_xlabel(field)
  ax.set_ylabel("validation loss at train_len (nats per token)")
  halving = selection.get("halving")
  ax.set_title(f"{selection.get('study', 'study')}: tuning stage, one line per group; star: "
               "selected" + (f"\nsuccessive halving, eta {halving['eta']}: lines the last of "
                             f"{halving['rungs']} rungs (full budget), hollow the earlier"
                             if halving else ""), fontsize=9)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=LEGEND_FONTSIZE)
  return fig


@_any_table
def study_figures(frame) -> list[tuple[str, str, object]]:
  """Every study figure the table has data for, as (id, caption, Figure): perplexity vs length
  per protocol (models as trained, then with eval-time extensions beside their base scheme),
  loss by position at the longest length, passkey / needle heatmap grids and accuracy vs
  length, attention diagnostics, algorithmic accuracy by size, and the metric of any other
  registered suite (`fig_metric_vs_length`). sweeps/report.py embeds them."""
  protocols = [p for p in ("non_overlapping", "sliding")
               if ((frame["suite"] == "ppl_vs_length") & (frame.get("protocol") == p)).any()]
  figures = []
  for p in protocols:
    figures.append((f"context_extension_{p}", "Context extension: parents, fine-tuned children "
                    f"and eval-only controls ({p} windows)", fig_context_extension(frame, p)))
  for p in protocols:
    figures += [(f"ppl_vs_length_{p}", f"Perplexity vs length per scheme ({p} windows)",
                 fig_ppl_vs_length(frame, p)),
                (f"extensions_{p}", f"Eval-time extensions beside their base scheme ({p})",
                 fig_extensions(frame, p)),
                (f"loss_by_position_{p}", f"Loss by token position at the longest length ({p})",
                 fig_loss_by_position(frame, protocol=p))]
  for suite in RETRIEVAL_SUITES:
    figures += [(f"{suite}_heatmaps", f"{suite}: accuracy by length and depth, every scheme",
                 fig_retrieval_grid(frame, suite)),
                (f"{suite}_vs_length", f"{suite}: accuracy vs length",
                 fig_accuracy_vs_length(frame, suite))]
  figures += [("attention_vs_length", "Attention entropy and sink mass vs length",
               fig_attention_vs_length(frame)),
              ("algorithmic", "Algorithmic tasks: exact match by instance size",
               fig_algorithmic(frame)),
              ("algorithmic_grid", "Grid tasks: exact match by both operands' sizes",
               fig_algorithmic_grid(frame)),
              ("extrapolation_vs_size", "Extrapolation ratio (8x / 1x) vs model size",
               fig_extrapolation_ratio(frame, "num_params")),
              ("extrapolation_vs_train_len", "Extrapolation ratio (8x / 1x) vs train_len",
               fig_extrapolation_ratio(frame, "train_len"))]
  for suite in suites_registry.REGISTRY:
    if suite not in DRAWN_SUITES and (frame["suite"] == suite).any():
      figures.append((f"{suite}_vs_length", f"{suite}: {suites_registry.REGISTRY[suite].metric} "
                      "vs length", fig_metric_vs_length(frame, suite)))
  return [(i, caption, fig) for i, caption, fig in figures if fig is not None]


def png_bytes(fig, dpi: float | None = None) -> bytes:
  """`fig` as PNG bytes (for an HTML report), at `dpi` (default: the figure's own)."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=dpi if dpi is not None else "figure")
  return buffer.getvalue()
