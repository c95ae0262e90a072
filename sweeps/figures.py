"""Study figures: from a study's tidy results table (sweeps/collect.py), one curve per scheme
(mean over seeds with its band: `figure_style.band_stats`, named by `band_text`); the training
curves,
one line per run, from the runs' metrics.jsonl (`read_training_curves`, `fig_training_curves`:
they need the run folders).

Each figure function returns a matplotlib Figure, or None when the table holds nothing for it;
the notebooks display them and sweeps/report.py embeds them. The figures of a single run, written
beside its eval/*.json, are in eval/plots.py.

**Modules.** This one reads the results table (`read_table`), summarizes it (`summary_table`)
and lists every figure it has data for (`study_figures`, `png_bytes`); the figures are in
sweeps/length_figures.py (metrics vs length, algorithmic accuracy by size, the extrapolation
ratio), sweeps/heatmap_figures.py (retrieval and grid-task heatmaps, attention maps),
sweeps/extension_figures.py (context extension, fine-tuning curves) and
sweeps/training_figures.py (training curves, the tuning stage); sweeps/figure_style.py holds
what they share (`band_stats`, `band_text`, `curve_labels`, `scheme_style`, ...).
"""

from __future__ import annotations

import io
import json
import os
import warnings

import numpy as np
import pandas as pd

from configs.errors import ConfigError, what_exists
from eval import suites as suites_registry
from runs import command_line
from runs.files import atomic_write
from sweeps.collect import stale_runs, summarize
from sweeps.extension_figures import fig_context_extension, fig_fine_tuning_budget
from sweeps.figure_style import PROTOCOLS, RETRIEVAL_SUITES, _any_table, _check
from sweeps.heatmap_figures import fig_algorithmic_grid, fig_retrieval_grid
from sweeps.length_figures import fig_accuracy_vs_length, fig_algorithmic, \
    fig_attention_vs_length, fig_extensions, fig_extrapolation_ratio, fig_loss_by_position, \
    fig_metric_vs_length, fig_ppl_vs_length
from sweeps.table_filters import parse_filters, select


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
    raise FileNotFoundError(f"no results table at {path}" + what_exists(path, "/"))
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


# Suites drawn by the figures of study_figures; any other registered suite with a `metric` gets
# `fig_metric_vs_length` in the report.
DRAWN_SUITES = ("ppl_vs_length", "loss_by_position", *RETRIEVAL_SUITES, "attention",
                "algorithmic")


@_any_table
def figure_builders(frame, reference: dict | None = None) -> list[tuple[str, str, object]]:
  """Every study figure `study_figures` can draw, as (id, caption, builder): `builder()` draws
  it (a Figure, or None when the table holds nothing for it). Nothing is drawn here, so one
  figure can be drawn alone (`python -m sweeps.figures --figure=<id>`)."""
  builders = []
  if "step_tag" in frame:  # checkpoints evaluated with eval.step: their own figure
    budget = frame
    builders.append(("fine_tuning_budget", "Perplexity against fine-tuning steps (checkpoints "
                     "evaluated with eval.step)", lambda: fig_fine_tuning_budget(budget)))
    frame = frame[frame["step_tag"].isna()]
  protocols = [p for p in ("non_overlapping", "sliding")
               if ((frame["suite"] == "ppl_vs_length") & (frame.get("protocol") == p)).any()]
  for p in protocols:
    builders.append((f"context_extension_{p}", "Context extension: parents, fine-tuned children "
                     f"and eval-only controls ({p} windows)",
                     lambda p=p: fig_context_extension(frame, p)))
  for p in protocols:
    lines = reference if reference and reference.get("protocol") == p else None
    builders += [(f"ppl_vs_length_{p}", f"Perplexity vs length per scheme ({p} windows)",
                  lambda p=p, lines=lines: fig_ppl_vs_length(frame, p, reference=lines)),
                 (f"extensions_{p}", f"Eval-time extensions beside their base scheme ({p})",
                  lambda p=p: fig_extensions(frame, p)),
                 (f"loss_by_position_{p}", f"Loss by token position at the longest length ({p})",
                  lambda p=p: fig_loss_by_position(frame, protocol=p))]
  for suite in RETRIEVAL_SUITES:
    builders += [(f"{suite}_heatmaps", f"{suite}: accuracy by length and depth, every scheme",
                  lambda suite=suite: fig_retrieval_grid(frame, suite)),
                 (f"{suite}_vs_length", f"{suite}: accuracy vs length",
                  lambda suite=suite: fig_accuracy_vs_length(frame, suite))]
  builders += [("attention_vs_length", "Attention entropy and sink mass vs length",
                lambda: fig_attention_vs_length(frame)),
               ("algorithmic", "Algorithmic tasks: exact match by instance size",
                lambda: fig_algorithmic(frame)),
               ("algorithmic_grid", "Grid tasks: exact match by both operands' sizes",
                lambda: fig_algorithmic_grid(frame)),
               ("extrapolation_vs_size", "Extrapolation ratio (8x / 1x) vs model size",
                lambda: fig_extrapolation_ratio(frame, "num_params")),
               ("extrapolation_vs_train_len", "Extrapolation ratio (8x / 1x) vs train_len",
                lambda: fig_extrapolation_ratio(frame, "train_len"))]
  for suite in suites_registry.REGISTRY:
    if suite not in DRAWN_SUITES and (frame["suite"] == suite).any():
      builders.append((f"{suite}_vs_length", f"{suite}: {suites_registry.REGISTRY[suite].metric} "
                       "vs length", lambda suite=suite: fig_metric_vs_length(frame, suite)))
  return builders


def study_figures(frame, reference: dict | None = None) -> list[tuple[str, str, object]]:
  """Every study figure the table has data for, as (id, caption, Figure): perplexity vs length
  per protocol (models as trained, then with eval-time extensions beside their base scheme),
  loss by position at the longest length, passkey / needle heatmap grids and accuracy vs
  length, attention diagnostics, algorithmic accuracy by size, and the metric of any other
  registered suite (`fig_metric_vs_length`). sweeps/report.py embeds them. `reference`:
  eval/ngram.py's JSON, drawn as lines in the perplexity figure of its protocol
  (`fig_ppl_vs_length`)."""
  figures = [(i, caption, build()) for i, caption, build in figure_builders(frame, reference)]
  return [(i, caption, fig) for i, caption, fig in figures if fig is not None]


def png_bytes(fig, dpi: float | None = None) -> bytes:
  """`fig` as PNG bytes (for an HTML report), at `dpi` (default: the figure's own)."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=dpi if dpi is not None else "figure")
  return buffer.getvalue()


USAGE = ("python -m sweeps.figures <results.parquet|csv or study folder> --figure=<id> "
         "--out=<file>.png [--where=column=value ...] [--ngram_reference=<eval/ngram.py JSON>]")


def define_flags() -> None:
  """The command line's flags (defined only when run as a script)."""
  from absl import flags  # noqa: PLC0415
  flags.DEFINE_string("figure", None, "the figure's id (study_figures; e.g. "
                      "ppl_vs_length_non_overlapping); a wrong one lists those the table has")
  flags.DEFINE_string("out", None, "the .png file to write")
  flags.DEFINE_string("ngram_reference", None, "eval/ngram.py's JSON: its n-gram models as "
                      "horizontal lines in the perplexity figure of its protocol")
  flags.DEFINE_float("dpi", 110.0, "resolution of the PNG")
  flags.DEFINE_multi_string("where", [], "draw only the rows with column=value (column=a,b,c: "
                            "any of them; column= an empty cell), as a findings table's filters; "
                            "repeat for several columns, e.g. --where=train_passkey_fraction=0.75")


def main(argv):
  """`python -m sweeps.figures <table> --figure=<id> --out=<png>`: one study figure as a PNG
  (a committed figure, redrawn from its committed table by one command); exit 2 with one line
  on bad input (the figure ids the table has are named)."""
  from absl import flags  # noqa: PLC0415
  opts = flags.FLAGS
  if not opts.figure or not opts.out or not opts.out.endswith(".png"):
    raise ConfigError(f"--figure and --out=<file>.png are required; usage: {USAGE}")
  command_line.check_writable(opts.out, "--out", folder=False)  # before anything is read
  try:
    frame = select(read_table(argv[1]), parse_filters(opts.where))
    reference = None
    if opts.ngram_reference:
      with open(opts.ngram_reference) as f:
        reference = json.load(f)
    builders = {i: build for i, _, build in figure_builders(frame, reference=reference)}
    fig = builders[opts.figure]() if opts.figure in builders else None
    if fig is None:  # the ids the table has data for: drawn only to name them
      has = [i for i, _, _ in study_figures(frame, reference=reference)]
      raise ConfigError(f"--figure={opts.figure} is not a figure of {argv[1]}; it has: "
                        + ", ".join(has))
  except (OSError, ValueError) as e:
    raise ConfigError(str(e)) from None
  atomic_write(opts.out, lambda tmp: fig.savefig(tmp, dpi=opts.dpi, format="png"))
  print(f"wrote {opts.out}")


if __name__ == "__main__":
  define_flags()
  command_line.run(main, usage=USAGE, arguments=1)
