"""Figure basics shared by every figure of the project, and a run's training curves.

Figures are `matplotlib.figure.Figure` objects made without pyplot: no global figure state, no
backend to choose (PNG through Agg), and a notebook shows a returned figure once. The training
loop draws `training_curves.png` (runs/metrics.py); evaluation figures (eval/plots.py) and study
figures (sweeps/figures.py) reuse `subplots`, `log_axis`, `save_png` and `LEGEND_FONTSIZE`.
"""

from __future__ import annotations

import importlib

from runs.files import atomic_write


class _Ticker:
  """`matplotlib.ticker`, imported on first use: matplotlib takes a third of a second to import
  and most processes that import this module (train.py, eval.run) draw only at their end."""

  def __getattr__(self, name: str):
    return getattr(importlib.import_module("matplotlib.ticker"), name)


ticker = _Ticker()


# Legend text size of every figure here and in sweeps/figures.py (points): readable in a report
# at half the page width.
LEGEND_FONTSIZE = 9


def subplots(*args, figsize: tuple[float, float], dpi: int, layout: str | None = None,
             **kwargs):
  """(Figure, axes) like `pyplot.subplots`, without pyplot's global state.

  `layout="constrained"` lets matplotlib place titles, suptitles, colour bars and legends outside
  the axes without gaps or overlaps (no `tight_layout` needed)."""
  from matplotlib.figure import Figure  # noqa: PLC0415  (see _Ticker)
  fig = Figure(figsize=figsize, dpi=dpi, layout=layout)
  return fig, fig.subplots(*args, **kwargs)


def log_axis(ax) -> None:
  """Log y axis labelled at 1, 2 and 5 times powers of ten, or at evenly spaced round values
  when the curves span less than a factor of 10 (else one tick, e.g. "10"); plain numbers.
  Call after plotting (it reads the axis' limits)."""
  ax.set_yscale("log")
  low, high = ax.get_ylim()
  if high / max(low, 1e-12) > 10:
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
  else:  # within a decade: evenly spaced round values
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
  ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
  ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def save_png(fig, path: str) -> None:
  """Writes `fig` as a PNG to `path` atomically."""
  atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


# Panels of a run's training curves: (metrics.jsonl key, y label, log y axis).
TRAINING_PANELS = (("loss", "loss (nats per token)", True),
                   ("learning_rate", "learning rate", False),
                   ("grad_norm", "gradient norm (before clipping)", True),
                   ("tokens_per_s", "throughput (tokens/s)", False))


def plot_training_curves(records: list[dict], path: str, title: str = "") -> bool:
  """Training loss with validation loss, learning rate, gradient norm and throughput against the
  optimizer step, one panel each (2 x 2).

  Args:
    records: metrics.jsonl records in order (runs/metrics.py `step_record` and validation
      records {step, val_loss, ...}); None values (non-finite steps) are left out.
    path: output .png path (written atomically).
    title: the figure's title (e.g. the run's scheme and workdir).

  Returns:
    False, writing nothing, when no record has a training loss.
  """
  train = [r for r in records if r.get("loss") is not None]
  if not train:
    return False
  fig, axes = subplots(2, 2, figsize=(9, 5.5), dpi=100, sharex=True)
  for ax, (key, label, log) in zip(axes.flat, TRAINING_PANELS):
    points = [(r["step"], r[key]) for r in train if r.get(key) is not None]
    ax.plot([p[0] for p in points], [p[1] for p in points], color="#0072B2", linewidth=1.2,
            marker="o" if len(points) < 3 else None, markersize=4,  # 1 point draws no line
            label="training batch" if key == "loss" else None)
    if key == "loss":
      val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
      if val:
        ax.plot([p[0] for p in val], [p[1] for p in val], color="#D55E00", marker="o",
                markersize=4, label="validation")
      ax.legend(fontsize=LEGEND_FONTSIZE)
    if log and all(p[1] > 0 for p in points):
      log_axis(ax)
    elif key == "tokens_per_s" and points:
      ax.set_ylim(0, 1.1 * max(p[1] for p in points))
    ax.set_ylabel(label, fontsize=8)
    ax.grid(True, alpha=0.3)
  for ax in axes[1]:
    ax.set_xlabel("optimizer step")
  if title:
    fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  save_png(fig, path)
  return True
