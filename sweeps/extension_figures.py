"""Context-extension figures (warm-started children, the results table's `method` column):
perplexity vs length of the parents, their fine-tuned children, the eval-only controls and the
references from scratch (`fig_context_extension`), the children's fine-tuning curves
(`fig_fine_tuning_curves`), one panel per training mix, and perplexity against fine-tuning steps
from checkpoints evaluated with `eval.step` (`fig_fine_tuning_budget`).
"""

from __future__ import annotations

import pandas as pd

from eval.plots import length_axis
from runs.plots import subplots
from sweeps.figure_style import METHOD_COLOURS, PROTOCOLS, _any_table, _check, _legend, \
    _log_ppl_axis, _suite, _train_len, band_stats, band_text

# An eval-time extension's recipe, whose colour (METHOD_COLOURS) its eval-only curve is drawn in.
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
  over seeds (parents) with its band (`band_stats`); the parents' train_len and the fine-tuning
  length
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
  ns = []
  for ax, (title, rows, styles) in zip(axes[0], panels):
    for label, group in rows.groupby("family", sort=False):
      stats = band_stats(group, "length", "ppl")
      ns += list(stats["n"])
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
               f"controls\nmean over seeds, {band_text(ns)}", fontsize=9)
  _legend(fig)
  return fig


def fig_fine_tuning_curves(curves, frame):
  """Training loss of the warm-started children against their fine-tuning step, one line per
  recipe (`method`), mean over its children (one per parent seed) with its band
  (`band_stats`); one panel
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
  ns = []
  for ax, (title, rows) in zip(axes[0], panels):
    for method, group in rows.groupby("method"):
      stats = band_stats(group, "step", "loss")
      ns += list(stats["n"])
      colour = METHOD_COLOURS.get(method, "#555555")
      ax.plot(stats.index, stats["mean"], color=colour, linewidth=1.3, label=method)
      if (stats["max"] > stats["min"]).any():
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.15)
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("training loss (nats per token)")
    ax.grid(True, alpha=0.3)
    if title:
      ax.set_title(title, fontsize=9)
  fig.suptitle(f"Fine-tuning curves per recipe\nmean over parents' seeds, {band_text(ns)}",
               fontsize=9)
  _legend(fig)
  return fig


# A parent's eval-only result stands for a recipe's step 0: its extension -> the recipe.
STEP_ZERO = {"none": "extrapolation", "pi": "pi", "yarn": "yarn", "ntk": "ntk", "abf": "abf"}


def budget_rows(frame) -> pd.DataFrame:
  """The perplexities of checkpoints evaluated with `eval.step` (the `step_tag` column), as rows
  (method, seed, step, length, ppl): the children's at their tagged steps, and each parent's
  eval-only result (extension none / pi / yarn ...) as its recipe's step 0. Only children with
  two or more tagged steps (a budget curve) count: a child evaluated at one step (a YaRN child of
  another factor, say) is no point of the curves of its method. Empty without tags."""
  if "step_tag" not in frame:
    return pd.DataFrame(columns=["method", "seed", "step", "length", "ppl"])
  rows = frame[(frame["suite"] == "ppl_vs_length") & frame["step_tag"].notna()
               & frame["ppl"].notna()]
  method = rows["method"].fillna("").astype(str)
  children = rows[method != ""].assign(method=method[method != ""], step=rows["step_tag"])
  children = children[children.groupby("run")["step_tag"].transform("nunique") > 1]
  parents = rows[method == ""]
  parents = parents[parents["extension"].isin(list(STEP_ZERO))].assign(
      method=lambda r: r["extension"].map(STEP_ZERO), step=0)
  out = pd.concat([children, parents])[["method", "seed", "step", "length", "ppl"]]
  return out.astype({"step": int, "length": int}).reset_index(drop=True)


def fig_fine_tuning_budget(frame, baseline: str = "extrapolation"):
  """Perplexity at each evaluated length against fine-tuning steps, one line per recipe (top
  row), and each recipe's difference to `baseline`, paired by seed (a child and its parent share
  a seed), below; means over seeds with their bands (`band_stats`: the 95% t-interval with 3 or
  more seeds). The data are `budget_rows` (checkpoints evaluated with eval.step).

  Returns:
    A Figure, or None without tagged results.
  """
  rows = budget_rows(frame)
  if rows.empty:
    return None
  lengths = sorted(rows["length"].unique())
  fig, axes = subplots(2, len(lengths), figsize=(1.4 + 5.0 * len(lengths), 7.6), dpi=110,
                       layout="constrained", squeeze=False)
  ns = []
  for col, length in enumerate(lengths):
    at = rows[rows["length"] == length]
    base = at[at["method"] == baseline].set_index(["seed", "step"])["ppl"]
    for method, group in at.groupby("method"):
      colour = METHOD_COLOURS.get(method, "#555555")
      stats = band_stats(group, "step", "ppl")
      ns += list(stats["n"])
      axes[0, col].plot(stats.index, stats["mean"], color=colour, marker="o", linewidth=1.3,
                        label=method)
      if (stats["max"] > stats["min"]).any():
        axes[0, col].fill_between(stats.index, stats["min"], stats["max"], color=colour,
                                  alpha=0.15)
      if method == baseline:
        continue
      paired = group.set_index(["seed", "step"])["ppl"] - base
      paired = paired.dropna().reset_index(name="difference")
      if not paired.empty:
        diff = band_stats(paired, "step", "difference")
        axes[1, col].plot(diff.index, diff["mean"], color=colour, marker="o", linewidth=1.3)
        if (diff["max"] > diff["min"]).any():
          axes[1, col].fill_between(diff.index, diff["min"], diff["max"], color=colour,
                                    alpha=0.15)
    axes[0, col].set_title(f"evaluated at {length:,} tokens", fontsize=9)
    _log_ppl_axis(axes[0, col])  # step 0 of an eval-only scaling can be 10x the rest
    axes[1, col].axhline(0.0, color="#333333", linewidth=0.8)
    axes[1, col].set_yscale("symlog", linthresh=1.0)
    axes[1, col].set_ylabel(f"perplexity minus {baseline}'s (same seed;\nlinear within ±1, "
                            "log beyond)")
    steps = sorted(at["step"].unique())
    linthresh = max(steps[1] if len(steps) > 1 else 1, 1)
    for ax in axes[:, col]:
      ax.set_xscale("symlog", linthresh=linthresh)  # doublings of the budget evenly spaced
      ax.set_xticks(steps, [str(s) for s in steps])
      ax.set_xlim(-0.2 * linthresh, steps[-1] * 1.2)
      ax.set_xlabel("fine-tuning steps (0 = the parent, eval-time scaling only)")
      ax.grid(True, alpha=0.3)
  fig.suptitle("Perplexity against fine-tuning steps per recipe (top) and paired by seed against "
               f"{baseline} (bottom)\nmean over seeds, {band_text(ns)}", fontsize=9)
  _legend(fig)
  return fig
