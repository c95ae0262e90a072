"""Findings pages whose tables come from committed data: `python -m sweeps.findings results/*.md`.

A page (`results/<study>.md`) is hand-written prose around table blocks. Each block is an HTML
comment naming a committed table and what to show, then the table this module renders from it,
then an end marker:

    <!-- table pe_extrapolation_cpu.parquet kind=pivot suite=ppl_vs_length protocol=non_overlapping rows=scheme,extension columns=length value=ppl digits=2 -->
    | scheme | 128 (0.5x) | ... |
    <!-- end table -->

The first word after `table` is the table's path relative to the page: a `sweeps.collect`
parquet, or a study folder holding `results.parquet`. The other words are `key=value` pairs:

  kind      pivot (the default): `value` per `rows` x `columns`, pooled over seeds;
            tasks: per `rows` of an algorithmic-task study, exact match over the trained sizes,
            at n and n+1, beyond (sizes n+1..4n, or to the largest size evaluated, which the
            header then names) and token accuracy at n / 2n / 4n (n is the
            largest trained size);
            grid: per `rows` of a two-size task (addition_grid), exact match on the training
            square, chosen cells and the cells beyond it;
            runs: per `rows`, the runs' seeds, parameters, steps and final losses;
            paired: per `rows` x `columns`, `value` minus the `baseline` row's, paired by seed
            (a child shares its parent's seed): the mean difference and, with 3 or more
            pairs, the half-width of its 95% t-interval ("too few" below 3 pairs);
            baseline=<the first row key's value> names the row compared against
            (baseline=<v1>,<v2>: the values of the first two row keys, and so on; an
            empty field is written none);
            context_use: per `rows` x evaluation length l, the ratio ppl(l) / ppl(l / 2) of
            each run (under 1: the model uses the extra context; use it with
            protocol=sliding, where every scored token sees about a window of context), pooled
            over seeds.
  ruler     per `rows`, one line per RULER suite the runs were evaluated on (needle,
            niah_multikey, niah_multivalue, niah_multiquery, variable_tracking, common_words,
            frequent_words; Hsieh et al., arXiv 2404.06654) and their average, by evaluation
            length, then RULER's two weighted averages over the lengths (Sec. 5: weights growing
            linearly with the length, "wAvg (inc)", or shrinking, "wAvg (dec)"), each run's
            scores pooled over seeds. The average line averages a run's suites at each length
            where every one of them has a score.
  curve     per `rows` x each training step of `steps` (comma-separated), the runs' `value`
            (default val_loss; any key of metrics.jsonl: loss, learning_rate,
            val_passkey_answer_nll, ...) logged at that step in their metrics.jsonl (the run folders
            beside the table: results/<study>/<run>/), pooled over seeds: where a training curve
            flattens. A step a run did not log is an empty cell.
  rows      comma-separated columns whose values make a row (`scheme`, `extension`, `method`, ...).
  columns   the column whose values make the table's columns (pivot; `length`, `size`, ...).
  value     the column shown in the cells (pivot).
  digits    decimals of the cells (default 2).
  any other key is a filter: keep the rows whose column equals the value (numbers compare as
  numbers; `method=` keeps rows with an empty method, runs from scratch), or one of the
  comma-separated values (`size=1,10,30,31,50,100`: a pivot's columns restricted to those).

A cell pools the runs that differ only in their seed: one run gives its value; two give
"mean (low-high)", the range of the two seeds, which is no interval of anything; three or more give
"mean ± h", h the half-width of the 95% t-interval of the mean (Student's t, n - 1 degrees of
freedom). A line under each table says which of these it holds. A skipped evaluation (a length
beyond a learned table) reads "skipped".

`python -m sweeps.findings PAGE...` rewrites every block of the pages; `--check` rewrites nothing,
prints each page whose tables differ from what the committed data give, and exits 1 if any does
(tests/test_findings.py runs it on every page of results/). A block that cannot be rendered (a
missing table or column, a filter that keeps nothing) stops with one line naming the page and the
block, exit 2.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
from absl import flags

from configs.errors import ConfigError, what_exists
from runs import command_line
from runs.files import atomic_write
from eval import needle
from sweeps import collect
from sweeps.figure_style import field_text
from sweeps.table_filters import select

BLOCK = re.compile(r"(<!-- table (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(<!-- end table -->)", re.S)
KINDS = ("pivot", "tasks", "grid", "runs", "paired", "context_use", "curve", "ruler")
OPTIONS = {"kind", "rows", "columns", "value", "digits", "baseline", "steps"}


def parse_spec(spec: str) -> tuple[str, dict[str, str], dict[str, str]]:
  """(table path, options, filters) of a block's `table ...` words.

  Raises:
    ConfigError: no table path, a word that is not key=value, or an unknown kind.
  """
  words = spec.split()
  if not words or "=" in words[0]:
    raise ConfigError(f"table block {spec!r}: the first word must be the table's path")
  options, filters = {}, {}
  for word in words[1:]:
    key, eq, value = word.partition("=")
    if not eq:
      raise ConfigError(f"table block {spec!r}: {word!r} is not key=value")
    (options if key in OPTIONS else filters)[key] = value
  if options.setdefault("kind", "pivot") not in KINDS:
    raise ConfigError(f"table block {spec!r}: kind={options['kind']!r}; choose one of {KINDS}")
  return words[0], options, filters


def read_table(path: str) -> pd.DataFrame:
  """A collected table: a parquet file, or a study folder's results.parquet.

  Raises:
    ConfigError: neither exists.
  """
  file = os.path.join(path, "results.parquet") if os.path.isdir(path) else path
  if not os.path.isfile(file):
    raise ConfigError(f"no collected table at {path} (python -m sweeps.collect writes one)")
  return pd.read_parquet(file)


def pooled(values, digits: int) -> tuple[str, int]:
  """(cell text, n) of one cell's values over seeds: see the module docstring."""
  v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
  if len(v) == 0:
    return "", 0
  if len(v) == 1:
    return f"{v[0]:.{digits}f}", 1
  if len(v) == 2:
    return f"{v.mean():.{digits}f} ({v.min():.{digits}f}-{v.max():.{digits}f})", 2
  half = collect.mean_interval(v)[1] - v.mean()
  return f"{v.mean():.{digits}f} ± {half:.{digits}f}", len(v)


def spread_note(counts: set[int]) -> str:
  """The line under a table saying what its cells pool."""
  parts = []
  if 1 in counts:
    parts.append("one run: its value")
  if 2 in counts:
    parts.append("two seeds: mean (the range of the 2 seeds; not an interval)")
  if any(n >= 3 for n in counts):
    ns = ", ".join(str(n) for n in sorted(n for n in counts if n >= 3))
    parts.append(f"n = {ns} seeds: mean ± half-width of the 95% t-interval of the mean")
  return "Cells: " + "; ".join(parts) + "." if parts else ""


def row_label(keys: dict) -> str:
  """A row's label from its key columns: `scheme` in code font, `extension` as "+ pi x4",
  `method` as "pi, fine-tuned" ("as trained" for a run from scratch), a config field
  `cfg.a.b.name` as name=value (name=none where the field is empty), others as col=value."""
  parts = []
  for column, value in keys.items():
    if column == "extension_factor":
      continue
    if column == "scheme":
      parts.append(f"`{value}`")
    elif column == "extension":
      if value not in ("none", "", None):
        factor = keys.get("extension_factor")
        parts.append(f"+ {value}" + (f" x{factor:g}" if factor not in (None, 1, 1.0) else ""))
    elif column == "method":
      parts.append(f"{value}, fine-tuned" if value else "as trained")
    elif column == "task":
      parts.append(str(value).replace("_", " "))
    elif column.startswith("cfg."):
      parts.append(f"{column.rsplit('.', 1)[1]}={field_text(value)}")
    else:
      parts.append(f"{column}={value:g}" if isinstance(value, float) else f"{column}={value}")
  return " ".join(parts)


def row_header(keys: list[str]) -> str:
  """The first column's header: the row keys ("extension_factor" folded into "extension", a
  config field `cfg.a.b.name` by its name)."""
  return " / ".join(k.rsplit(".", 1)[1] if k.startswith("cfg.") else k
                    for k in keys if k != "extension_factor")


def column_label(frame: pd.DataFrame, column: str, value) -> str:
  if column == "length" and "multiplier" in frame.columns:
    mult = frame.loc[frame["length"] == value, "multiplier"].dropna().unique()
    return f"{int(value):,}" + (f" ({mult[0]:g}x)" if len(mult) == 1 else "")
  return f"{value:g}" if isinstance(value, float) else str(value)


def markdown(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def _rows_of(frame: pd.DataFrame, options: dict) -> tuple[list[str], list]:
  keys = [k for k in options.get("rows", "scheme").split(",") if k]
  missing = [k for k in keys if k not in frame.columns]
  if missing:
    raise ConfigError(f"rows={options.get('rows')}: the table has no column {missing[0]!r}")
  if "extension" in keys and "extension_factor" not in keys:
    keys.append("extension_factor")
  groups = frame.fillna({k: "" for k in keys if frame[k].dtype == object}).groupby(
      keys, sort=False, dropna=False)
  return keys, list(groups)


def render_pivot(frame: pd.DataFrame, options: dict) -> str:
  value, column = options.get("value"), options.get("columns")
  for name, what in ((value, "value"), (column, "columns")):
    if not name or name not in frame.columns:
      raise ConfigError(f"kind=pivot needs {what}=<a column of the table>, not {name!r}")
  digits = int(options.get("digits", 2))
  keys, groups = _rows_of(frame, options)
  order = sorted(frame[column].dropna().unique())
  counts, body = set(), []
  for key, rows in groups:
    cells = [row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))]
    for c in order:
      at = rows[rows[column] == c]
      text, n = pooled(at[value].tolist(), digits)
      if n == 0 and "skipped" in at and at["skipped"].notna().any():
        text = "skipped"
      counts.add(n) if n else None
      cells.append(text)
    body.append(cells)
  header = [row_header(keys)]
  header += [column_label(frame, column, c) for c in order]
  return markdown(header, body) + "\n" + spread_note(counts) + "\n"


def _task_stats(rows: pd.DataFrame) -> dict[str, float]:
  """One run's task statistics (see the module docstring); n from its in-distribution sizes."""
  rows = rows.sort_values("size")
  n = int(rows.loc[rows["in_distribution"].astype(bool), "size"].max())
  at = rows.set_index("size")
  inside = rows[rows["size"] <= n]["exact_match"]
  beyond = rows[(rows["size"] > n) & (rows["size"] <= 4 * n)]["exact_match"]

  def get(size, col):
    return float(at[col].get(size, np.nan))
  return {"n": n, "last": int(rows[rows["size"] <= 4 * n]["size"].max()),
          "train": inside.mean(), "at_n": get(n, "exact_match"),
          "at_n1": get(n + 1, "exact_match"), "beyond": beyond.mean(),
          "tok_n": get(n, "token_accuracy"), "tok_2n": get(2 * n, "token_accuracy"),
          "tok_4n": get(4 * n, "token_accuracy")}


def render_tasks(frame: pd.DataFrame, options: dict) -> str:
  digits = int(options.get("digits", 3))
  frame = frame[frame["suite"] == "algorithmic"]
  keys, groups = _rows_of(frame, options)
  counts, body, last = set(), [], set()
  for key, rows in groups:
    per_run = [_task_stats(r) for _, r in rows.groupby("run")]
    last |= {(s["n"], s["last"]) for s in per_run}
    label = row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))
    ns = sorted({s["n"] for s in per_run})
    cells = [label, "/".join(str(n) for n in ns)]
    for stat in ("train", "at_n", "at_n1", "beyond", "tok_n", "tok_2n", "tok_4n"):
      text, n = pooled([s[stat] for s in per_run], digits)
      counts.add(n) if n else None
      cells.append(text)
    body.append(cells)
  # the sizes evaluated may stop short of 4n: then the header names where they end
  beyond = ("n+1..4n" if len(last) != 1 or min(last)[1] >= 4 * min(last)[0]
            else f"n+1..{min(last)[1]}")
  header = [row_header(keys), "n", "exact match 1..n (mean)",
            "at n", "at n+1", f"beyond: {beyond} (mean)", "token accuracy at n", "at 2n", "at 4n"]
  return markdown(header, body) + "\n" + spread_note(counts) + "\n"


GRID_CELLS = ((1, 1), (2, 2), (3, 3), (1, 2), (2, 1), (1, 5), (5, 1))


def _grid(rows: pd.DataFrame) -> tuple[np.ndarray, int]:
  """One run's exact-match grid [a, b] (1-based, NaN outside) and its largest trained size."""
  size = int(rows["size"].max())
  grid = np.full((size + 1, size + 1), np.nan)
  for a, detail in zip(rows["size"], rows["detail"]):
    for b, accuracy in json.loads(detail).items():
      grid[int(a), int(b)] = accuracy
  n = int(rows.loc[rows["in_distribution"].astype(bool), "size"].max())
  return grid, n


def render_grid(frame: pd.DataFrame, options: dict) -> str:
  digits = int(options.get("digits", 3))
  frame = frame[(frame["suite"] == "algorithmic") & frame["detail"].notna()]
  keys, groups = _rows_of(frame, options)
  counts, body, n_all = set(), [], set()
  for key, rows in groups:
    stats_ = []
    for _, run in rows.groupby("run"):
      grid, n = _grid(run)
      n_all.add(n)
      beyond = grid[1:, 1:].copy()
      beyond[:n, :n] = np.nan
      one = np.concatenate([grid[1:n + 1, n + 1:].ravel(), grid[n + 1:, 1:n + 1].ravel()])
      stats_.append([np.nanmean(grid[1:n + 1, 1:n + 1])] + [grid[a, b] for a, b in GRID_CELLS]
                    + [np.nanmean(one), np.nanmean(beyond)])
    cells = [row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))]
    for i in range(len(stats_[0])):
      text, n = pooled([s[i] for s in stats_], digits if i in (0, 8, 9) else 2)
      counts.add(n) if n else None
      cells.append(text)
    body.append(cells)
  n = "/".join(str(v) for v in sorted(n_all))
  header = ([row_header(keys),
             f"training square 1..{n} (mean)"] + [f"({a},{b})" for a, b in GRID_CELLS]
            + [f"one operand beyond {n} (mean)", "all cells beyond (mean)"])
  return markdown(header, body) + "\n" + spread_note(counts) + "\n"


def render_runs(frame: pd.DataFrame, options: dict) -> str:
  keys, groups = _rows_of(frame, options)
  body = []
  for key, rows in groups:
    runs = rows.drop_duplicates("run").sort_values("seed")
    label = row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))
    seeds = ", ".join(str(int(s)) for s in runs["seed"].dropna())
    params = ", ".join(sorted({f"{p / 1e6:.2f}M" for p in runs["num_params"].dropna()}))
    steps = ", ".join(sorted({f"{int(s):,}" for s in runs["final_step"].dropna()}))
    loss = lambda col: ", ".join(f"{v:.3f}" for v in runs[col])  # noqa: E731
    body.append([label, seeds, params, steps, loss("final_train_loss"), loss("final_val_loss")])
  header = [row_header(keys), "seeds", "parameters",
            "steps", "final training loss (per seed)", "final validation loss (per seed)"]
  return markdown(header, body)


def _by_seed(rows: pd.DataFrame, column: str, value: str) -> dict:
  """{column value: {seed: value}} of one row group (a run per seed)."""
  out = {}
  for c, at in rows.groupby(column):
    out[c] = {int(s): float(v) for s, v in zip(at["seed"], at[value]) if pd.notna(v)}
  return out


def render_paired(frame: pd.DataFrame, options: dict) -> str:
  """kind=paired (module docstring)."""
  value, column, baseline = options.get("value"), options.get("columns"), options.get("baseline")
  for name, what in ((value, "value"), (column, "columns")):
    if not name or name not in frame.columns:
      raise ConfigError(f"kind=paired needs {what}=<a column of the table>, not {name!r}")
  digits = int(options.get("digits", 2))
  keys, groups = _rows_of(frame, options)
  wanted = str(baseline).split(",")

  def is_base(key) -> bool:
    key = key if isinstance(key, tuple) else (key,)
    return [field_text(k) for k in key][:len(wanted)] == wanted
  base = [rows for key, rows in groups if is_base(key)]
  if len(base) != 1:
    raise ConfigError(f"kind=paired needs baseline=<one value of {keys[0]}> (or values of the "
                      f"first row keys, comma-separated); got {baseline!r}, which names "
                      f"{len(base)} rows")
  reference = _by_seed(base[0], column, value)
  order = sorted(frame[column].dropna().unique())
  counts, body = set(), []
  for key, rows in groups:
    if rows is base[0]:
      continue
    mine = _by_seed(rows, column, value)
    cells = [row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))]
    for c in order:
      d = collect.paired_difference(mine.get(c, {}), reference.get(c, {}))
      counts.add(d["n"]) if d["n"] else None
      cells.append("" if not d["n"] else
                   f"{d['mean']:+.{digits}f} ± {d['high'] - d['mean']:.{digits}f}" if d["n"] >= 3
                   else f"{d['mean']:+.{digits}f} (n={d['n']}, too few)")
    body.append(cells)
  header = [row_header(keys)] + [column_label(frame, column, c) for c in order]
  ns = ", ".join(str(n) for n in sorted(n for n in counts if n >= 3))
  note = (f"Cells: {value} minus `{baseline}`'s, paired by seed: mean difference"
          + (f" ± half-width of its 95% t-interval (n = {ns} pairs)" if ns else "")
          + ("; rows with fewer than 3 pairs give the mean only" if any(n < 3 for n in counts)
             else "") + ".")
  return markdown(header, body) + "\n" + note + "\n"


def render_context_use(frame: pd.DataFrame, options: dict) -> str:
  """kind=context_use (module docstring)."""
  digits = int(options.get("digits", 3))
  frame = frame[frame["suite"] == "ppl_vs_length"]
  keys, groups = _rows_of(frame, options)
  lengths = sorted(int(x) for x in frame["length"].dropna().unique())
  order = [l for l in lengths if l % 2 == 0 and l // 2 in lengths]
  if not order:
    raise ConfigError("kind=context_use needs lengths l and l/2 in the table")
  counts, body = set(), []
  for key, rows in groups:
    cells = [row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))]
    for l in order:
      ratios = []
      for _, run in rows.groupby("run"):
        ppl = dict(zip(run["length"].astype(int), run["ppl"]))
        if pd.notna(ppl.get(l)) and pd.notna(ppl.get(l // 2)):
          ratios.append(ppl[l] / ppl[l // 2])
      text, n = pooled(ratios, digits)
      counts.add(n) if n else None
      cells.append(text)
    body.append(cells)
  header = [row_header(keys)] + [f"{l:,} / {l // 2:,}" for l in order]
  return (markdown(header, body) + "\nppl at length l / ppl at l/2 per run (under 1: the "
          "extra context lowers the loss). " + spread_note(counts) + "\n")


def render_curve(frame: pd.DataFrame, options: dict, table: str) -> str:
  """kind=curve (module docstring): `value` at each of `steps`, from the metrics.jsonl of the
  runs in the folder of `table` (the block's table path)."""
  from sweeps.training_figures import read_training_curves, runs_folder
  study_dir = runs_folder(table)
  value = options.get("value", "val_loss")
  try:
    steps = [int(s) for s in options.get("steps", "").split(",")]
  except ValueError:
    steps = []
  if not steps or min(steps) < 0:
    raise ConfigError(f"kind=curve needs steps=<comma-separated training steps>, not "
                      f"{options.get('steps')!r}")
  curves = read_training_curves(study_dir, frame, keys=(value,))
  if curves.empty:
    raise ConfigError(f"kind=curve: no run of the table has a metrics.jsonl under {study_dir}")
  if curves[value].isna().all():
    raise ConfigError(f"kind=curve: value={value!r}: no run of the table logged it (keys of "
                      "metrics.jsonl: loss, val_loss, learning_rate, grad_norm, tokens_per_s, ...)")
  digits = int(options.get("digits", 3))
  keys, groups = _rows_of(frame, options)
  counts, body = set(), []
  for key, rows in groups:
    at_run = curves[curves["run"].isin(set(rows["run"])) & curves[value].notna()]
    cells = [row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))]
    for step in steps:
      text, n = pooled(at_run[at_run["step"] == step][value].tolist(), digits)
      counts.add(n) if n else None
      cells.append(text)
    body.append(cells)
  header = [row_header(keys)] + [f"step {s:,}" for s in steps]
  return markdown(header, body) + "\n" + spread_note(counts) + "\n"


RULER_SUITES = needle.SUITES[1:]  # RULER's tasks that eval/needle.py scores (passkey is not one)


def weighted_averages(scores: list[float]) -> tuple[float, float]:
  """RULER's wAvg (inc) and wAvg (dec) of scores ordered by length (Hsieh et al., arXiv
  2404.06654, Sec. 5): weights 1..k growing, or k..1 shrinking, with the length."""
  w = np.arange(1, len(scores) + 1, dtype=float)
  s = np.asarray(scores, dtype=float)
  return float((w * s).sum() / w.sum()), float((w[::-1] * s).sum() / w.sum())


def _ruler_run(rows: pd.DataFrame, suites: list[str], lengths: list) -> dict[str, list]:
  """One run's accuracy per length for each suite and their average (NaN where missing)."""
  out = {}
  for suite in suites:
    at = rows[rows["suite"] == suite].groupby("length")["accuracy"].mean()
    out[suite] = [float(at.get(length, np.nan)) for length in lengths]
  table = np.asarray([out[s] for s in suites])
  out["average"] = [float(c.mean()) if np.isfinite(c).all() else np.nan for c in table.T]
  return out


def render_ruler(frame: pd.DataFrame, options: dict) -> str:
  """kind=ruler (module docstring)."""
  frame = frame[frame["suite"].isin(RULER_SUITES)]
  if frame.empty:
    raise ConfigError(f"kind=ruler: the table has no RULER suite ({', '.join(RULER_SUITES)})")
  suites = [s for s in RULER_SUITES if s in set(frame["suite"])]
  lengths = sorted(frame["length"].dropna().unique())
  digits = int(options.get("digits", 2))
  keys, groups = _rows_of(frame, options)
  counts, body = set(), []
  for key, rows in groups:
    label = row_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))
    per_run = [_ruler_run(r, suites, lengths) for _, r in rows.groupby("run")]
    for line in suites + ["average"]:
      cells = [label, line]
      columns = [[run[line][i] for run in per_run] for i in range(len(lengths))]
      weighted = [weighted_averages(run[line]) if np.isfinite(run[line]).all() else (np.nan,) * 2
                  for run in per_run]
      columns += [[w[0] for w in weighted], [w[1] for w in weighted]]
      for values in columns:
        text, n = pooled(values, digits)
        counts.add(n) if n else None
        cells.append(text)
      body.append(cells)
  header = [row_header(keys), "suite"] + [f"{int(length):,}" for length in lengths] + [
      "wAvg (inc)", "wAvg (dec)"]
  return markdown(header, body) + "\n" + spread_note(counts) + "\n"


RENDER = {"pivot": render_pivot, "tasks": render_tasks, "grid": render_grid, "runs": render_runs,
          "paired": render_paired, "context_use": render_context_use, "ruler": render_ruler}


def render_block(page: str, spec: str) -> str:
  """The markdown of one block of `page` (see the module docstring).

  Raises:
    ConfigError: the block cannot be rendered (one line naming what is wrong).
  """
  path, options, filters = parse_spec(spec)
  table = os.path.join(os.path.dirname(os.path.abspath(page)), path)
  frame = select(read_table(table), filters)
  if options["kind"] == "curve":  # the one kind that reads the run folders beside the table
    return render_curve(frame, options, table)
  return RENDER[options["kind"]](frame, options)


def render_page(page: str) -> str:
  """The text of `page` with every table block rendered from its committed table.

  Raises:
    ConfigError: a block cannot be rendered; the message names the page and the block.
  """
  text = open(page, encoding="utf-8").read()

  def one(match):
    try:
      table = render_block(page, match.group("spec"))
    except ConfigError as e:
      raise ConfigError(f"{page}: <!-- table {match.group('spec')} -->: {e}") from e
    return match.group(1) + table + match.group(4)
  return BLOCK.sub(one, text)


def stale_pages(pages: list[str]) -> list[str]:
  """The pages whose table blocks differ from what their committed tables give now."""
  return [p for p in pages if render_page(p) != open(p, encoding="utf-8").read()]


_CHECK = flags.DEFINE_bool("check", False, "rewrite nothing; list the pages whose tables are "
                           "not what the committed data give, and exit 1 if any")


USAGE = "python -m sweeps.findings [--check] results/<page>.md ..."


def main(argv):
  """`python -m sweeps.findings PAGE...`: rewrites (or, --check, checks) the pages' tables; exit 2
  with one line on bad input (runs.command_line.run: flag errors too)."""
  pages = argv[1:]
  if not pages:
    raise ConfigError(f"no page given; usage: {USAGE}")
  for page in pages:
    if not os.path.isfile(page):
      raise ConfigError(f"{page}: no such page (a findings page is a .md file)"
                        + what_exists(page if page.endswith(".md") else page.rstrip("/") + ".md",
                                      ".md", default_dir="results"))
    if not page.endswith(".md"):
      raise ConfigError(f"{page}: not a findings page (a .md file with <!-- table ... --> "
                        "blocks); nothing written")
    if not _CHECK.value:  # rewritten in place: every page's folder checked before any is
      command_line.check_writable(page, "page", folder=False)
  if _CHECK.value:
    tables = {page: len(BLOCK.findall(open(page, encoding="utf-8").read())) for page in pages}
    for page in [p for p, n in tables.items() if not n]:
      print(f"note: {page} has no table block (<!-- table ... -->): nothing in it to check")
    stale = stale_pages(pages)
    for page in stale:
      print(f"stale: {page} (python -m sweeps.findings {page} rewrites its tables)")
    if not stale:
      print(f"{len(pages)} page(s), {sum(tables.values())} table(s) current: every table is what "
            "the committed data give")
    return 1 if stale else 0
  for page in pages:
    text = render_page(page)
    if not BLOCK.search(text):  # nothing rendered: the page is left as it is, not rewritten
      print(f"note: {page} has no table block (<!-- table ... -->): left unchanged")
      continue

    def write(tmp, text=text):
      with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    atomic_write(page, write)
    print(f"wrote {page} ({len(BLOCK.findall(text))} tables)")
  return 0


if __name__ == "__main__":
  command_line.run(main, usage=USAGE, arguments=None)
