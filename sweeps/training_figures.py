"""The study's training, one line per run (or per scheme, mean over seeds): the training
curves read from the runs' metrics.jsonl (`read_training_curves`, `fig_training_curves`: they
need the run folders, `runs_folder`) and the tuning stage's candidates (`fig_search`).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from runs.metrics import read_metrics
from runs.plots import LEGEND_FONTSIZE, log_axis, subplots
from sweeps.figure_style import band_stats, band_text, curve_labels, curve_styles, scheme_style

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


def read_training_curves(study_dir: str, frame, keys: tuple[str, ...] = TRAINING_KEYS
                         ) -> pd.DataFrame:
  """The per-step training metrics of the table's runs, read from
  `<study_dir>/<run>/metrics.jsonl` (runs/metrics.py `read_metrics`).

  Args:
    study_dir: the folder holding the run folders (see `runs_folder`).
    frame: the results table; its runs (column `run`) are the runs read, their legend label is
      `curve_labels` of the model as trained among the runs that have metrics.
    keys: the metrics.jsonl keys read (default the figure's panels, TRAINING_KEYS).

  Returns:
    One row per metrics.jsonl record with a step: run, label, scheme, seed, step and
    `keys` (NaN where the record lacks one: validation records carry only val_loss), in
    the order of the labels, then runs, then steps. A run without metrics.jsonl there has no
    rows (when no run has one: an empty frame with those columns).
  """
  columns = ["run", "label", "scheme", "seed", "step", *keys]
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
                   **{k: r.get(k) for k in keys}} for r in logged[run["run"]]]
  curves = pd.DataFrame.from_records(records, columns=columns)
  for key in keys:
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
    mean: one line per scheme (label): the mean over its runs (seeds) at each step with its
      band (`band_stats`, named in the legend's title); else (the default) one line per run, the
      seeds of a
      scheme in its colour, line style and marker (`scheme_style`).

  Returns:
    A Figure, or None if `curves` has no training loss. Every line's gid is its run (its label
    with `mean`); a panel no run logged says so.
  """
  if curves.empty or curves["loss"].dropna().empty:
    return None
  labels = list(dict.fromkeys(curves["label"]))
  styles = curve_styles(labels)
  fig, axes = subplots(2, 3, figsize=(12, 6.5), dpi=110, sharex=True, layout="constrained")
  panels = list(axes.flat)
  ns = []
  for ax, (key, ylabel, log) in zip(panels, TRAINING_PANELS):
    points = curves.dropna(subset=[key])
    for label in labels:
      style = styles[label]
      rows = points[points["label"] == label]
      groups = ([(label, band_stats(rows, "step", key))] if mean else
                [(run, one.set_index("step")[key].sort_index().to_frame("mean"))
                 for run, one in rows.groupby("run", sort=False)])
      for gid, line in groups:
        if line.empty:
          continue
        every = 1 if key == "val_loss" else max(1, len(line) // 6)
        drawn, = ax.plot(line.index, line["mean"], color=style["color"],
                         linestyle=style["linestyle"], marker=style["marker"], markersize=4,
                         markevery=every, linewidth=1.1, alpha=0.9, label=label, gid=gid)
        if mean:
          ns += list(line["n"])
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
  handles = [Line2D([], [], markersize=5, **styles[label]) for label in labels]
  what = f"mean over seeds, {band_text(ns)}" if mean else "one line per run, seeds share a style"
  legend_ax.legend(handles, labels, loc="center", fontsize=LEGEND_FONTSIZE,
                   ncol=1 if len(labels) <= 12 else 2, title=what,
                   title_fontsize=LEGEND_FONTSIZE)
  fig.suptitle(f"Training curves of {curves['run'].nunique()} runs (metrics.jsonl)", fontsize=10)
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
