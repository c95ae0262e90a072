"""What every study figure shares: the results table's columns (`_any_table`), each row's
legend label (`curve_labels`), the mean over seeds with its band (`band_stats`, `_mean_band`;
named in titles by `band_text`), one fixed style per scheme (`scheme_style`) and per
context-extension recipe (`METHOD_COLOURS`), bands and the figure's one legend (`_plot_bands`,
`_legend`), and the selection of a suite's rows and the check of a figure's arguments (`_suite`,
`_check`).
"""

from __future__ import annotations

import functools
import math
import zlib

import pandas as pd

from configs.extension_recipes import RECIPES
from runs.plots import LEGEND_FONTSIZE, log_axis
from sweeps.collect import configuration_columns, interval_high, interval_low

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


def field_text(value) -> str:
  """A configuration column's value as a table or legend shows it: an empty or missing field
  (None, "", NaN: a run whose config leaves it unset) reads "none"."""
  missing = value is None or value == "" or (isinstance(value, float) and math.isnan(value))
  return "none" if missing else str(value)


def curve_labels(frame) -> pd.Series:
  """Legend label of every row: the scheme, the config fields that vary between runs apart from
  seeds and eval settings (the columns sweeps.collect.configuration_columns groups the summary
  by, e.g. num_steps, train_len or a `cfg.*` field, so that runs of two budgets or sizes are
  never pooled into one curve), and the eval-time extension with its factor. A warm-started
  child (a `method` column, the context-extension recipes) is named by its method; the fields
  shown are those that vary among the from-scratch runs (a recipe's own fields, its learning
  rate or factors, would otherwise fill the legend); an empty field reads "none"."""
  methods = (frame["method"].astype(object).fillna("").astype(str) if "method" in frame
             else pd.Series("", index=frame.index))
  scratch = frame[methods == ""] if (methods == "").any() else frame
  # num_params follows the scheme (a learned table adds parameters): it names no choice
  varying = [c for c in configuration_columns(frame.columns)
             if c not in ("scheme", "method", "num_params")
             and scratch[c].astype(str).nunique() > 1]  # str: a list field reads as an array

  def label(row) -> str:
    parts = [str(row.get("scheme", "model"))]
    method = row.get("method")
    if isinstance(method, str) and method:
      parts.append(f"[{method}]")
    parts += [f"{c.rsplit('.', 1)[-1]}={field_text(row[c])}" for c in varying]
    ext = row.get("extension")
    if isinstance(ext, str) and ext != "none":
      factor = row.get("extension_factor")
      parts.append(f"+ {ext}" + (f" x{factor:g}" if pd.notna(factor) and factor != 1 else ""))
    return " ".join(parts)

  if frame.empty:
    return pd.Series([], dtype=str)
  return frame.apply(label, axis=1)


def band_stats(rows, x: str, y: str) -> pd.DataFrame:
  """Per value of `x` (sorted): the mean of `y` over the rows (runs, i.e. seeds), the band around
  it ("min", "max": `sweeps.collect.mean_interval`, the 95% t-interval of the mean with n >= 3
  runs, the range with 2; mean..mean for one) and "n", the runs."""
  stats = rows.groupby(x)[y].agg(["mean", interval_low, interval_high, "count"]).sort_index()
  stats.columns = ["mean", "min", "max", "n"]
  one = stats["min"].isna()
  stats.loc[one, "min"] = stats.loc[one, "max"] = stats.loc[one, "mean"]
  return stats


def band_text(ns) -> str:
  """What a figure's bands are, for its title, from the run counts `ns` of its points: "band =
  95% t-interval of the mean (n=3 seeds)", "band = range of 2 seeds (not an interval)", both, or
  "one run per point (no band)"; both on two lines, so that a title over a narrow axes stays
  inside the figure."""
  ns = {int(n) for n in ns if n >= 2}
  parts = []
  if 2 in ns:
    parts.append("band = range of 2 seeds (not an interval)")
  big = sorted(n for n in ns if n >= 3)
  if big:
    parts.append(f"band = 95% t-interval of the mean (n={','.join(map(str, big))} seeds)")
  return ";\n".join(parts) or "one run per point (no band)"


def _mean_band(frame, x: str, y: str):
  """Per label: `band_stats` of its rows (x values, the mean of y over runs, the band, n)."""
  rows = frame.dropna(subset=[y]).assign(label=curve_labels(frame))
  return {label: band_stats(group, x, y) for label, group in rows.groupby("label", sort=True)}


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
                "bipe_alibi", "fox", "lerope")
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9")
PALETTE = OKABE_ITO + ("#8B4513", "#332288", "#999933")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p", "d", "8", "H", "+", "x", "1",
           "2", "3", "4", "$\\alpha$", "$\\beta$", "$\\phi$", "$\\gamma$")
EXTENSION_COLOURS = ("#7570B3", "#E7298A", "#66A61E", "#1B9E77", "#A6761D")
_STYLES = [{"color": PALETTE[i % len(PALETTE)],
            "linestyle": ("-", "-.", ":")[i // len(PALETTE) % 3], "marker": MARKERS[i]}
           for i in range(len(MARKERS))]

# Context extension (warm-started children, `method` column): one colour per recipe, the same
# for the fine-tuned child (solid) and for the method applied to the parent at evaluation only
# (dashed); the parent black, references from scratch of other schemes grey and dotted.
# Paul Tol's green and wine after the palette: 11 recipes, no two alike (a test).
METHOD_COLOURS = dict(zip(RECIPES, PALETTE[1:] + PALETTE[:1] + ("#117733", "#882255")))


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
  return scheme_style(scheme.split(" ")[0])  # "<scheme> num_steps=3000": the scheme's style


SPARE_COLOURS = ("#117733", "#882255", "#44AA99", "#AA4499", "#661100", "#6699CC", "#888888")
VARIANT_LINESTYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3)))


def curve_styles(labels: list[str]) -> dict[str, dict]:
  """{label: matplotlib style} for the curves of one figure, no two alike: each label's `_style`,
  then, in the order given, a curve that only varies a config field of an earlier one (the
  same scheme or recipe and extension, e.g. "alibi num_steps=1500" and "alibi num_steps=3000")
  keeps its colour in the next free line style, and a curve of another scheme or recipe whose
  colour is taken (a recipe shares the scheme palette) gets the first colour no curve has."""
  extensions = sorted(label for label in labels if " + " in label)
  styles, owner = {}, {}  # colour -> the group that drew it first

  def group(label: str) -> str:  # the label without its config fields ("name=value" words)
    base, plus, ext = label.partition(" + ")
    return " ".join(w for w in base.split(" ") if "=" not in w) + plus + ext

  for label in labels:
    style = _style(label, extensions)
    colour, mine = style["color"], group(label)
    if owner.setdefault(colour, mine) != mine:
      taken = set(owner)
      colour = next((c for c in PALETTE + SPARE_COLOURS if c not in taken), colour)
      owner[colour] = mine
      style["color"] = colour
    same = {str(s["linestyle"]) for s in styles.values() if s["color"] == colour}
    if str(style["linestyle"]) in same:
      style["linestyle"] = next((ls for ls in VARIANT_LINESTYLES if str(ls) not in same),
                                style["linestyle"])
    styles[label] = style
  return styles


def _plot_bands(ax, bands: dict) -> list[int]:
  """Draws `_mean_band`'s curves and bands on `ax`; returns the run counts of the points drawn
  (for `band_text`)."""
  styles = curve_styles(list(bands))
  for label, stats in bands.items():
    line, = ax.plot(stats.index, stats["mean"], markersize=4, label=label, **styles[label])
    if (stats["max"] > stats["min"]).any():
      ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.2)
  return [int(n) for stats in bands.values() for n in stats["n"]]


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
