"""One HTML page with every figure and table of a study: `python -m sweeps.report <root>/<study>`.

Reads the study's results table (`results.parquet`, else `results.csv`; collecting the study
folder again, in memory, with sweeps.collect if it has neither or if some run's results are
newer), draws every figure of `sweeps.figures.study_figures` (the ones the notebooks show) as
embedded PNG images, and adds the summary table (sweeps.collect.summarize; click a column header
to sort; blanks last) and the runs. The page needs no other file, so it can be mailed or
attached as is.

  python -m sweeps.report workdirs/sweeps/pe_extrapolation_cpu        # -> <study>/report.html
  python -m sweeps.report results/pe_extrapolation_cpu.parquet --out=/tmp/report.html
"""

from __future__ import annotations

import base64
import datetime
import html
import os
import sys
import warnings

import pandas as pd
from absl import app, flags

from configs.errors import ConfigError, parse_flags
from eval.files import atomic_write
from sweeps import collect
from sweeps.figures import png_bytes, read_table, study_figures, study_table_path

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "output .html path (default: <study>/report.html, or "
                    "<table stem>_report.html beside a results file)")

# Click-to-sort for the summary table (no library: the page must stand alone).
SORT_SCRIPT = """
<script>
document.querySelectorAll("table.sortable th").forEach((th, col) => {
  th.style.cursor = "pointer";
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const asc = th.dataset.asc !== "1"; th.dataset.asc = asc ? "1" : "0";
    const key = r => { const t = r.cells[col].innerText.trim(); const n = Number(t);
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
      results table is missing, or older than some run's results, is collected again (in memory,
      sweeps.collect.collect; a note on stderr says so; the folder's files are left as they are).

  Raises:
    ConfigError: nothing there, a file that is not a results table, or a folder with neither a
      table nor a run to collect.
  """
  if os.path.isdir(path):
    name = os.path.basename(os.path.normpath(path))
    table = study_table_path(path)
    if table is not None and not collect.runs_newer_than(path, os.path.getmtime(table)):
      return _read(table), name
    if table is not None:
      print(f"note: {table} is older than some runs' results; collecting {path} again "
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


def _table_html(table: pd.DataFrame) -> str:
  """A sortable HTML table of the varying columns, the constant ones said once above it."""
  varying, constant = split_constant_columns(table)
  same = ("<p class='constants'>Same in every row: " + ", ".join(
      f"{html.escape(str(k))} = {html.escape(_cell(v))}"
      for k, v in constant.items()) + "</p>") if constant else ""
  return same + varying.to_html(index=False, float_format="{:.4g}".format, na_rep="",
                                classes="sortable")


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


def build_report(frame: pd.DataFrame, title: str) -> tuple[str, list[str]]:
  """The HTML page of a results table and the ids of the figures it embeds.

  Every figure is `<figure id="fig-<id>"><img alt="<id>" src="data:image/png;base64,...">`.
  """
  figures = study_figures(frame)
  parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
           "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
           "padding:2px 6px;text-align:right}img{max-width:100%}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f"<p>{frame['run'].nunique()} runs, {len(frame)} result rows; schemes: "
           f"{html.escape(', '.join(sorted(map(str, frame['scheme'].dropna().unique()))))}. "
           f"Generated {datetime.datetime.now():%Y-%m-%d %H:%M} by python -m sweeps.report.</p>",
           "<h2>Contents</h2><ul>"]
  parts += [f"<li><a href='#fig-{i}'>{html.escape(c)}</a></li>" for i, c, _ in figures]
  parts.append("<li><a href='#summary'>Summary table</a></li><li><a href='#runs'>Runs</a></li>"
               "</ul>")
  for i, caption, fig in figures:
    data = base64.b64encode(png_bytes(fig)).decode("ascii")
    parts.append(f"<figure id='fig-{i}'><img alt='{i}' src='data:image/png;base64,{data}'>"
                 f"<figcaption>{html.escape(caption)}</figcaption></figure>")
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
                          "num_params", "parent", "final_step", "final_train_loss",
                          "final_val_loss") if c in frame]
  parts.append("<h2 id='runs'>Runs</h2>")
  if mix:
    parts.append(f"<p class='training-mix'>{html.escape(mix)}</p>")
  parts.append(_table_html(frame.drop_duplicates("run")[run_cols]))
  parts.append(SORT_SCRIPT + "</body></html>")
  return "\n".join(parts), [i for i, _, _ in figures]


def write_report(path: str, out: str | None = None) -> tuple[str, list[str]]:
  """Writes the report of the study or table at `path` (see `load_study_table`) to `out`
  atomically; returns (the output path, the figure ids).

  Raises:
    ConfigError: see `load_study_table`; `out` is a folder or does not end in .html.
  """
  if out is not None and (os.path.isdir(out) or not out.endswith(".html")):
    raise ConfigError(f"--out={out} must be an .html file path (not a folder)")
  frame, name = load_study_table(path)
  if out is None:
    out = (os.path.join(path, "report.html") if os.path.isdir(path)
           else os.path.splitext(path)[0] + "_report.html")
  page, ids = build_report(frame, f"Study {name}")

  def write(tmp):
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(page)
  atomic_write(out, write)
  return out, ids


def main(argv):
  if len(argv) != 2:
    print("error: usage: python -m sweeps.report <root>/<study> | <results.parquet|csv> "
          f"[--out=report.html]; got {len(argv) - 1} arguments", file=sys.stderr)
    sys.exit(2)
  try:
    out, ids = write_report(argv[1], FLAGS.out)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(f"wrote {out} ({len(ids)} figures: {', '.join(ids)})")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
