"""One HTML page with every figure and table of a study: `python -m sweeps.report <root>/<study>`.

Reads the study's results table (`results.parquet`, else `results.csv`; collecting the study
folder again, in memory, with sweeps.collect if it has neither or if some run's results are
newer), draws every figure of `sweeps.figures.study_figures` (the ones the notebooks show) as
embedded PNG images, then the training curves of every run
(`sweeps.training_figures.fig_training_curves`, from the runs' metrics.jsonl: in the study folder,
the folder of the results file, or --runs; a table without its run folders gets a sentence saying
so instead), and adds the summary table
(sweeps.collect.summarize; mean ± std over seeds in one cell; click a column header to sort;
blanks last) and the runs. A figure of one panel is shown at half the page's width (two to a
row), a grid of panels at the page's width; a click enlarges a figure to the page's width and
back. The page needs no other file, so it can be mailed or attached as is.

  python -m sweeps.report workdirs/sweeps/pe_extrapolation_cpu        # -> <study>/report.html
  python -m sweeps.report results/pe_extrapolation_cpu.parquet --out=/tmp/report.html
  python -m sweeps.report <results>.parquet --runs=<root>/<study>     # run folders elsewhere
"""

from __future__ import annotations

import base64
import datetime
import html
import os
import sys
import warnings

import pandas as pd
from absl import flags

from configs.errors import ConfigError
from runs import command_line
from runs.files import atomic_write
from sweeps import collect, search
from sweeps.extension_figures import fig_fine_tuning_curves
from sweeps.figures import png_bytes, read_table, study_figures, study_table_path
from sweeps.training_figures import fig_search, fig_training_curves, read_training_curves, \
    runs_folder, training_curves_note

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "output .html path (default: <study>/report.html, or "
                    "<table stem>_report.html beside a results file)")
flags.DEFINE_string("runs", None, "folder holding the run folders (<root>/<study>) whose "
                    "metrics.jsonl the training curves are drawn from (default: the study folder "
                    "given, or the folder of the results file)")

# The page's style: figures of one panel at half the page's width, two to a row, figures wider
# than WIDE_INCHES (grids of panels) at the page's width; a click enlarges a figure to the page's
# width and back. Table headers wrap; a table still wider than the page scrolls in its box.
STYLE = """<style>
body{font-family:sans-serif;margin:2em auto;padding:0 1.5em;max-width:1200px;color:#222}
.figures{display:flex;flex-wrap:wrap;gap:1.5em 2%;align-items:flex-start}
figure{margin:0;flex:0 0 49%}
figure.wide,figure.enlarged{flex-basis:100%}
figure img{display:block;width:100%;height:auto;cursor:zoom-in}
figure.enlarged img{cursor:zoom-out}
figcaption{font-size:14px;color:#444;margin-top:.3em}
.table-box{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 5px;text-align:right}
td{white-space:nowrap}
th{background:#f4f4f4;vertical-align:bottom}
p.note{background:#fff8e1;border-left:4px solid #e69f00;padding:.5em .8em}
</style>"""
# Click a figure to enlarge it to the page's width, again to shrink it back.
ZOOM_SCRIPT = """
<script>
document.querySelectorAll("figure img").forEach(img => {
  img.title = "click to enlarge / shrink";
  img.addEventListener("click", () => img.closest("figure").classList.toggle("enlarged"));
});
</script>
"""
# A figure wider than this (inches) is a grid of panels: shown at the page's width, not half.
WIDE_INCHES = 8.0
# The embedded PNGs' resolution: sharp at half the page's width and when enlarged.
PNG_DPI = 144

# Click-to-sort for the summary table (no library: the page must stand alone).
SORT_SCRIPT = """
<script>
document.querySelectorAll("table.sortable th").forEach((th, col) => {
  th.style.cursor = "pointer";
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const asc = th.dataset.asc !== "1"; th.dataset.asc = asc ? "1" : "0";
    const number = /^-?[0-9.]+(e[-+]?[0-9]+)?( ± .*)?$/i;  // "mean ± std" sorts by its mean
    const key = r => { const t = r.cells[col].innerText.trim();
                       const n = number.test(t) ? parseFloat(t) : NaN;
                       return t === "" ? null : isNaN(n) ? t : n; };
    [...body.rows].sort((a, b) => { const x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);  // blanks last
        return (x > y ? 1 : x < y ? -1 : 0) * (asc ? 1 : -1); })
      .forEach(r => body.appendChild(r));
  });
});
</script>
"""


def load_study_table(path: str) -> tuple[pd.DataFrame, str]:
  """The results table at `path` and the study's name.

  Args:
    path: a study folder (<root>/<study>) or a results .parquet / .csv file. A folder whose
      results table is missing, or predates some run's results (sweeps.collect.stale_runs), is
      collected again (in memory,
      sweeps.collect.collect; a note on stderr says so; the folder's files are left as they are).

  Raises:
    ConfigError: nothing there, a file that is not a results table, or a folder with neither a
      table nor a run to collect.
  """
  if os.path.isdir(path):
    name = os.path.basename(os.path.normpath(path))
    table = study_table_path(path)
    if table is not None and not collect.stale_runs(path, table):
      return _read(table), name
    if table is not None:
      print(f"note: {table} predates some runs' results; collecting {path} again "
            "(in memory; python -m sweeps.collect updates the files)", file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      frame = collect.collect(path)  # raises CollectError (a ConfigError) if empty
    for w in caught:
      print(f"warning: {w.message}", file=sys.stderr)
    return frame, name
  if not os.path.exists(path):
    raise ConfigError(f"{path} does not exist; expected a study folder (<root>/<study>) or a "
                      "results .parquet / .csv file")
  frame = _read(path)
  name = str(frame["study"].iloc[0]) if "study" in frame and len(frame) else \
      os.path.splitext(os.path.basename(path))[0]
  return frame, name


def _read(path: str) -> pd.DataFrame:
  try:
    return read_table(path)
  except ValueError as e:  # not a results table: one line
    raise ConfigError(str(e)) from None


def split_constant_columns(table: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
  """(table without the columns that hold one value in every row, {column: that value}).

  Columns that are empty in every row are dropped and not reported. A table of one row is kept
  whole (every column is constant there)."""
  if len(table) < 2:
    return table, {}
  empty = [c for c in table.columns if table[c].isna().all()]
  constant = {c: table[c].iloc[0] for c in table.columns
              if c not in empty and table[c].notna().all() and table[c].astype(str).nunique() == 1}
  return table.drop(columns=empty + list(constant)), constant


def _cell(value) -> str:
  """A constant column's value as the table would show it ('' for an empty string)."""
  if isinstance(value, float):
    return f"{value:.4g}"
  return "''" if value == "" else str(value)


def mean_std_columns(table: pd.DataFrame) -> pd.DataFrame:
  """`table` with each pair of columns `<m>_mean`, `<m>_std` shown as one column
  `<m> (mean ± std)` of text "4.05 ± 0.071" (4 significant digits, 2 for the std; the mean alone
  where the std is empty, e.g. one seed), in the place of `<m>_mean`."""
  out = table.copy()
  for column in list(out.columns):
    base = column[:-len("_mean")]
    if not column.endswith("_mean") or f"{base}_std" not in out:
      continue
    text = [("" if pd.isna(m) else f"{m:.4g}" if pd.isna(s) else f"{m:.4g} ± {s:.2g}")
            for m, s in zip(pd.to_numeric(out[column], errors="coerce"),
                            pd.to_numeric(out[f"{base}_std"], errors="coerce"))]
    out[column] = text
    out = out.drop(columns=f"{base}_std").rename(columns={column: f"{base} (mean ± std)"})
  return out


def _table_html(table: pd.DataFrame) -> str:
  """A sortable HTML table of the varying columns (mean and std in one cell,
  `mean_std_columns`), the constant ones said once above it, in a box that scrolls sideways
  if the table is wider than the page."""
  varying, constant = split_constant_columns(table)
  same = ("<p class='constants'>Same in every row: " + ", ".join(
      f"{html.escape(str(k))} = {html.escape(_cell(v))}"
      for k, v in constant.items()) + "</p>") if constant else ""
  return same + "<div class='table-box'>" + mean_std_columns(varying).to_html(
      index=False, float_format="{:.4g}".format, na_rep="", classes="sortable") + "</div>"


def _figure_html(fig_id: str, caption: str, fig) -> str:
  """A figure as an embedded PNG (PNG_DPI), of class `wide` if wider than WIDE_INCHES."""
  data = base64.b64encode(png_bytes(fig, dpi=PNG_DPI)).decode("ascii")
  wide = " class='wide'" if fig.get_size_inches()[0] > WIDE_INCHES else ""
  return (f"<figure id='fig-{fig_id}'{wide}><img alt='{fig_id}' "
          f"src='data:image/png;base64,{data}'><figcaption>{html.escape(caption)} (click to "
          "enlarge)</figcaption></figure>")


def training_mix_note(frame: pd.DataFrame) -> str:
  """One sentence on the training data where passkey documents are part of it (else "")."""
  if "train_passkey_fraction" not in frame:
    return ""
  runs = frame.drop_duplicates("run")
  shares = sorted({float(x) for x in runs["train_passkey_fraction"].dropna() if float(x) > 0})
  if not shares:
    return ""
  share = " to ".join(f"{100 * x:g}%" for x in sorted({shares[0], shares[-1]}))
  return (f"Training data: {share} of the training windows are synthetic passkey documents "
          "(data.passkey.fraction), the rest text: final_train_loss is over that mix, "
          "final_val_loss and the perplexities are on held-out text only.")


TRAINING_CURVES_CAPTION = ("Training loss, validation loss, learning rate, gradient norm and "
                           "throughput against the optimizer step, one line per run (its "
                           "metrics.jsonl), the seeds of a scheme in its colour")


def _search_html(selection: dict) -> tuple[list[str], tuple | None]:
  """The tuning stage's section (its figure and every candidate with its score) of a
  selection.json, and the figure's (id, caption, figure) or None."""
  fig = fig_search(selection)
  rungs = selection.get("halving", {}).get("rungs", 1)
  rows = [{"group": ", ".join(f"{k}={v}" for k, v in g["group"].items()),
           **{k: c["fields"][k] for k in selection["grid"]},
           **({"rung": c["rung"] + 1, "num_steps": c["num_steps"]} if "rung" in c else {}),
           "score": c["score"],
           "selected": "yes" if c["fields"] == g["selected"] and c.get("rung", 0) == rungs - 1
           else ""}
          for g in selection["groups"] for c in g["candidates"]]
  parts = ["<h2 id='search'>Tuning stage (selection.json)</h2>",
           f"<p>Selected per group on {html.escape(str(selection.get('metric', '')))}; the "
           "study's runs trained with the selected values.</p>"]
  figure = ("search", "Tuning stage: every candidate's score, the selected starred", fig) \
      if fig is not None else None
  if figure:
    parts.append("<div class='figures'>" + _figure_html(*figure) + "</div>")
  parts.append(_table_html(pd.DataFrame(rows)))
  return parts, figure


def build_report(frame: pd.DataFrame, title: str, curves: pd.DataFrame | None = None,
                 runs_dir: str | None = None,
                 selection: dict | None = None) -> tuple[str, list[str]]:
  """The HTML page of a results table and the ids of the figures it embeds.

  Args:
    frame: the results table.
    title: the page's title.
    curves: the runs' training curves (sweeps.training_figures.read_training_curves), drawn after
      the study figures as figure `training_curves` in the section "Training curves"; a note there
      names the runs without curves, or says plainly that the curves need the run folders when
      no run has any (or `curves` is None).
    runs_dir: the folder `curves` were read from, named in that note.
    selection: the study's selection.json (a tuning stage, sweeps/search.py): its figure and
      candidates in the section "Tuning stage", before the results.

  Every figure is `<figure id='fig-<id>'><img alt='<id>' src='data:image/png;base64,...' ...>`.
  """
  figures = study_figures(frame)
  if curves is None:
    curves = read_training_curves("", frame.iloc[:0])  # no run folder: no curves
  curves_fig = fig_training_curves(curves)
  fine_tuning_fig = fig_fine_tuning_curves(curves, frame)
  curves_note = training_curves_note(frame, curves, runs_dir)
  parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           STYLE, "</head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f"<p>{frame['run'].nunique()} runs, {len(frame)} result rows; schemes: "
           f"{html.escape(', '.join(sorted(map(str, frame['scheme'].dropna().unique()))))}. "
           f"Generated {datetime.datetime.now():%Y-%m-%d %H:%M} by python -m sweeps.report.</p>",
           "<h2>Contents</h2><ul>"]
  parts += [f"<li><a href='#fig-{i}'>{html.escape(c)}</a></li>" for i, c, _ in figures]
  parts.append("<li><a href='#training-curves'>Training curves</a></li>"
               "<li><a href='#summary'>Summary table</a></li><li><a href='#runs'>Runs</a></li>"
               "</ul>")
  if selection:
    search_parts, search_fig = _search_html(selection)
    parts[-1] = "<li><a href='#search'>Tuning stage</a></li>" + parts[-1]
    parts += search_parts
    if search_fig:
      figures.insert(0, search_fig)
  parts += ["<div class='figures'>",
            *[_figure_html(*f) for f in figures if f[0] != "search"], "</div>"]
  parts.append("<h2 id='training-curves'>Training curves</h2>")
  if curves_fig is not None:
    figures.append(("training_curves", TRAINING_CURVES_CAPTION, curves_fig))
    parts.append("<div class='figures'>" + _figure_html(*figures[-1]) + "</div>")
  if fine_tuning_fig is not None:
    figures.append(("fine_tuning_curves", "Fine-tuning curves of the warm-started children, "
                    "per recipe", fine_tuning_fig))
    parts.append("<div class='figures'>" + _figure_html(*figures[-1]) + "</div>")
  if curves_note:
    parts.append(f"<p class='note training-curves-note'>{html.escape(curves_note)}</p>")
  summary = collect.summarize(frame) if (frame["suite"].isin(["ppl_vs_length", "passkey"])).any() \
      else pd.DataFrame()
  parts.append("<h2 id='summary'>Summary (mean and sample std over seeds; click a header to "
               "sort)</h2>")
  mix = training_mix_note(frame)
  if mix:
    parts.append(f"<p class='training-mix'>{html.escape(mix)}</p>")
  parts.append(_table_html(summary) if not summary.empty else
               "<p>No perplexity or passkey results.</p>")
  run_cols = [c for c in ("run", "scheme", "seed", "train_len", "task", "train_passkey_fraction",
                          "num_params", "parent", "method", "final_step", "final_train_loss",
                          "final_val_loss") if c in frame]
  parts.append("<h2 id='runs'>Runs</h2>")
  if mix:
    parts.append(f"<p class='training-mix'>{html.escape(mix)}</p>")
  parts.append(_table_html(frame.drop_duplicates("run")[run_cols]))
  parts.append(SORT_SCRIPT + ZOOM_SCRIPT + "</body></html>")
  return "\n".join(parts), [i for i, _, _ in figures]


def write_report(path: str, out: str | None = None,
                 runs: str | None = None) -> tuple[str, list[str]]:
  """Writes the report of the study or table at `path` (see `load_study_table`) to `out`
  atomically; returns (the output path, the figure ids).

  Args:
    path: a study folder or a results .parquet / .csv file.
    out: the .html path (default: <study>/report.html, or <table stem>_report.html).
    runs: the folder holding the run folders whose metrics.jsonl give the training curves
      (default: `path`'s, sweeps.training_figures.runs_folder).

  Raises:
    ConfigError: see `load_study_table`; `out` is a folder, does not end in .html or cannot be
      written (runs.command_line.check_writable); `runs` is not a folder.
  """
  if out is not None and (os.path.isdir(out) or not out.endswith(".html")):
    raise ConfigError(f"--out={out} must be an .html file path (not a folder)")
  if runs is not None and not os.path.isdir(runs):
    raise ConfigError(f"--runs={runs} is not a folder (expected <root>/<study>, holding the "
                      "run folders)")
  if out is None and os.path.exists(path):
    out = (os.path.join(path, "report.html") if os.path.isdir(path)
           else os.path.splitext(path)[0] + "_report.html")
  if out is not None:  # where the page goes, before anything is read (a missing `path`: below)
    command_line.check_writable(out, "--out", folder=False)
  frame, name = load_study_table(path)
  runs_dir = runs if runs is not None else runs_folder(path)
  selection = search.read_selection(os.path.join(runs_dir, search.SELECTION)) if runs_dir else None
  page, ids = build_report(frame, f"Study {name}", read_training_curves(runs_dir, frame), runs_dir,
                           selection)

  def write(tmp):
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(page)
  atomic_write(out, write)
  return out, ids


USAGE = "python -m sweeps.report <root>/<study> | <results.parquet|csv> [--out=report.html]"


def main(argv):
  """`python -m sweeps.report <study or table>`: writes the page; exit 2 with one line on bad
  input (runs.command_line.run: stray arguments and flag errors too)."""
  out, ids = write_report(argv[1], FLAGS.out, FLAGS.runs)
  print(f"wrote {out} ({len(ids)} figures: {', '.join(ids)})"
        + ("" if "training_curves" in ids else "; no training curves (no run folder with a "
           "metrics.jsonl; see the report)"))


if __name__ == "__main__":
  command_line.run(main, usage=USAGE, arguments=1)
