"""Study heatmaps, one panel per scheme (mean over seeds): retrieval accuracy by context length
and needle depth, exact match on the grid of operand sizes of the grid tasks, and head-averaged
attention maps.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from eval.plots import accuracy_cmap
from runs.plots import subplots
from sweeps.figure_style import RETRIEVAL_SUITES, _any_table, _check, _suite, _train_len, \
    curve_labels


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
  cmap = accuracy_cmap()
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
    image = ax.imshow(np.ma.masked_invalid(table.to_numpy(dtype=float)), cmap=accuracy_cmap(),
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
