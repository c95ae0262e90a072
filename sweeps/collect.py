"""Collects a study's results into one tidy table: `python -m sweeps.collect <root>/<study>`.

Reads every run folder of the study (a folder with a config.json written by train.py): its
config, its final metrics (metrics.jsonl: the last training loss and validation loss) and every
result JSON in its eval/ folder (train.py's and eval.run's: ppl_vs_length*, loss_by_position*,
passkey*, needle*, niah_multikey*, variable_tracking*, algorithmic*), and
writes, atomically (runs/files.py):

  <study>/results.parquet, results.csv
      one row per run x suite x length x extension (x protocol for the perplexity suites):
      run, scheme, seed, train_len, task ("" for text), train_passkey_fraction (the share of
      training windows that are passkey documents, data.passkey.fraction), num_params, parent (a
      warm start's parent: `<run folder>@<step>`, "" for a run from scratch), method (a warm
      start's recipe, configs/extension_recipes.py `recipe_of`: pi, yarn, ..., drope; ""
      for a run from scratch), the config fields
      that vary between runs
      (`cfg.<dotted field>`), the final losses, then per result suite, extension,
      extension_factor, protocol, stride (eval.stride of a sliding evaluation), step, file (and,
      in a study with results tagged by `eval.step`, step_tag and split: the tagged results of
      several checkpoints, which the summary leaves out) and per length:
        ppl_vs_length     length, multiplier, nll (nats/token), ppl, bits_per_byte (summed
                          NLL / bytes / ln 2; empty for SentencePiece results written before
                          rows counted bytes), tokens, bytes (of text the scored tokens stand
                          for), windows, window_stride (tokens), skipped (the reason, if skipped)
        loss_by_position  length, multiplier, nll, tokens, detail = JSON list of the position
                          bins ({start, end, nll, tokens}; end exclusive)
        passkey / needle / niah_multikey / variable_tracking
                          length, multiplier, accuracy (variable_tracking: mean recall of
                          the chain's names), correct, prompts, skipped,
                          max_length_passing and threshold (of the whole grid), detail = JSON
                          {depth: accuracy} of the length's cells
        algorithmic       size (length = the example's tokens, multiplier = size / the largest
                          trained size), exact_match, token_accuracy, examples, in_distribution;
                          for a two-size task (addition_grid) detail = JSON {second operand's
                          size: exact match} of the grid row whose first operand has `size`
        attention         length, multiplier, entropy (nats) and sink_mass (means over layers,
                          heads, queries and windows), entropy_uniform (the uniform-attention
                          ceiling), windows, skipped, detail = JSON {entropy_by_layer,
                          sink_mass_by_layer}
      If a run holds one result (same suite, extension, factor, protocol, stride) at several
      checkpoint steps, the latest step is kept.
  <study>/summary.csv (and printed)
      per scheme (and model size, train_len, the other varying fields except seeds) x extension
      x factor x protocol, over seeds (and any other field left out): ppl at 1x/2x/4x/8x/16x
      train_len, the extrapolation ratio ppl(8x)/ppl(1x) (computed per run, then averaged),
      passkey_max_length (max_length_passing; 0 when even the shortest length fails), for a task
      study exact_match_train_sizes and exact_match_beyond (the mean exact match over the
      trained sizes and over the sizes beyond them: a grid task's diagonal), the final
      validation loss: `<metric>_mean`, `<metric>_std` (sample std, NaN for one run) and
      `<metric>_low` / `_high` (`mean_interval`: with 3 or more runs the 95% t-interval of the
      mean; with 2 the range of the two, which is no interval; NaN for one run), `runs` (the
      number of runs averaged) and `interval` (what `_low` / `_high` are: "95% t-interval
      (n=3)", "range of 2" or empty), and `ppl_8x_paired`: this row's perplexity at 8x minus
      each other scheme's of the same configuration, paired by seed, with the 95% t-interval of
      the mean difference when 3 or more seeds pair up ("too few" below 3; an interval holding
      0 is a difference the data do not show). Passkey values belong to an extension and
      factor, not to a protocol: they appear on every protocol's row.

A folder of result files instead (no run folder: result JSONs lying in the folder itself, named
`<run>_<suite><suffix>.json` when copied out of runs' eval/ folders)
is collected too (`result_file_runs`): each `<run>` prefix is one run, and what a result file
records of its run (scheme, train_len; step per row) is all that is known of it, so the other
run columns are empty.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from typing import Any, Iterable

import numpy as np
import pandas as pd
from absl import flags

from configs import base as base_config, extension_recipes, stored as stored_config
from configs.errors import ConfigError, flatten
from eval import suites as suites_registry
from runs import command_line
from runs.files import atomic_write, write_json
from runs.metrics import read_metrics
from runs.workdir import read_results
from sweeps.result_keys import result_key

SUMMARY_MULTIPLIERS = (1, 2, 4, 8, 16)
STANDARD_FIELDS = {"model.position.kind": "scheme", "seed": "seed", "data.train_len": "train_len",
                   "model.num_layers": "num_layers", "model.d_model": "d_model",
                   "model.num_heads": "num_heads", "train.num_steps": "num_steps",
                   "data.task.name": "task", "data.passkey.fraction": "train_passkey_fraction"}
MANIFEST = "study.json"
SOURCES = "results.sources.json"  # beside the tables: the SHA-256 of each file read


class CollectError(ConfigError):
  """The study folder cannot be collected (missing, or holds no run)."""


def run_dirs(study_dir: str) -> list[str]:
  """The run folders of a study folder (those with a config.json), sorted by name."""
  return sorted(os.path.join(study_dir, n) for n in os.listdir(study_dir)
                if os.path.isfile(os.path.join(study_dir, n, "config.json")))


def result_file_runs(folder: str, skipped: list[str] | None = None
                     ) -> dict[str, list[tuple[str, dict[str, Any]]]]:
  """The result JSONs lying directly in `folder`, by run: {run: [(file name, result), ...]}.

  A file `<run>_<suite><suffix>.json` (the run's eval/<suite><suffix>.json with the run's name
  in front; `suite` is the one the file records) belongs to run `<run>`; a file named after its
  suite alone (`passkey.json`: a copied eval/ folder) to a run named after `folder`. Files that
  are not JSON objects with a `suite` are left out, and their names appended to `skipped`
  (except the launcher's study.json and selection.json and collect's own SOURCES).
  """
  runs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
  for name in sorted(os.listdir(folder)):
    path = os.path.join(folder, name)
    if not name.endswith(".json") or not os.path.isfile(path):
      continue
    try:
      with open(path) as f:
        result = json.load(f)
    except (OSError, ValueError):
      result = None
    if not isinstance(result, dict) or not isinstance(result.get("suite"), str):
      if skipped is not None and name not in (MANIFEST, SOURCES, "selection.json"):
        skipped.append(name)
      continue
    stem, marker = name[:-len(".json")], "_" + result["suite"]
    cut = stem.rfind(marker)
    run = stem[:cut] if cut > 0 else os.path.basename(os.path.normpath(folder))
    runs.setdefault(run, []).append((name, result))
  return runs


def final_metrics(workdir: str | None) -> dict[str, Any]:
  """The last logged step, training loss and validation loss of metrics.jsonl (None if absent,
  or for no workdir: a run known from its result files only)."""
  out = {"final_step": None, "final_train_loss": None, "final_val_loss": None}
  for record in read_metrics(workdir) if workdir is not None else []:  # a cut line is left out
    out["final_step"] = max(out["final_step"] or 0, record.get("step", 0))
    if record.get("loss") is not None:
      out["final_train_loss"] = record["loss"]
    if record.get("val_loss") is not None:
      out["final_val_loss"] = record["val_loss"]
  return out


def _result_rows(result: dict, train_len: int) -> list[dict[str, Any]]:
  """The per-length (per-size) rows of one result JSON, in the table's columns: the `rows` of
  the suite that wrote it (eval/suites/); none for a suite no longer registered."""
  suite = suites_registry.REGISTRY.get(result["suite"])
  return suite.rows(result, train_len) if suite is not None else []


# Columns that hold numbers in every result (the summary computes with them); any other column
# in which some result holds a number must hold numbers (or nothing) in every result.
NUMBER_FIELDS = ("step", "extension_factor", "length", "multiplier", "nll", "ppl", "tokens",
                 "accuracy", "max_length_passing", "exact_match", "size")


def _is_number(value) -> bool:
  """A JSON number (int or float, not bool) or null."""
  return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _warn_malformed(run: str, name: str, reason) -> None:
  """The warning for a result file of `run` left out because it is malformed."""
  warnings.warn(f"left out {run}/{name}: {reason}", stacklevel=3)


def _drop_malformed(records: list[dict[str, Any]], columns: set[str]) -> list[dict[str, Any]]:
  """`records` without those of a result file that holds a non-number in one of its `columns`
  (those read from result files) that holds numbers: NUMBER_FIELDS, or a column another file
  fills with numbers; with a warning naming the file and the field (a hand-edited or foreign
  result would otherwise stop the tables' writing)."""
  numeric = columns & (set(NUMBER_FIELDS) | {k for r in records for k, v in r.items()
                                             if v is not None and _is_number(v)})
  bad: dict[tuple[str, str], str] = {}
  for r in records:
    where = (r["run"], r["file"])
    for k in sorted(numeric & r.keys()):
      if where not in bad and not _is_number(r[k]):
        bad[where] = f"field {k!r} holds {r[k]!r}, not a number"
  for (run, name), reason in bad.items():
    _warn_malformed(run, name, reason)
  return [r for r in records if (r["run"], r["file"]) not in bad]


def collect(study_dir: str) -> pd.DataFrame:
  """The tidy results table of a study folder (module docstring).

  A run whose config.json is unreadable, result files that are not result JSON, and result files
  holding a non-number in a number field (`_drop_malformed`) are left out with a warning
  (warnings.warn) naming them.

  Raises:
    CollectError: the folder does not exist, is a run folder, or holds neither a run with a
      config.json nor result JSON files (`result_file_runs`).
  """
  if not os.path.isdir(study_dir):
    raise CollectError(f"{study_dir} is not a folder (expected <root>/<study>)")
  if os.path.isfile(os.path.join(study_dir, "config.json")):
    raise CollectError(f"{study_dir} is a run folder; collect its study folder "
                       f"{os.path.dirname(os.path.abspath(study_dir))}")
  dirs = run_dirs(study_dir)
  skipped_files: list[str] = []
  files = {} if dirs else result_file_runs(study_dir, skipped_files)
  if files and skipped_files:
    warnings.warn(f"left out {len(skipped_files)} file(s) of {study_dir} that are not result "
                  f"JSON (half-written or foreign): {', '.join(skipped_files)}", stacklevel=2)
  if not dirs and not files:
    studies = sorted(d for d in os.listdir(study_dir) if os.path.isdir(os.path.join(study_dir, d))
                     and run_dirs(os.path.join(study_dir, d)))
    raise CollectError(f"{study_dir} holds no run folder with a config.json and no result JSON"
                       + (f"; it looks like a sweep root: collect one of its study folders "
                          f"({', '.join(os.path.join(study_dir, d) for d in studies)})"
                          if studies else " (nothing trained yet?)"))
  # (run name, workdir or None, config.json, flattened config, results as (file column, JSON))
  runs = []
  for workdir in dirs:
    try:
      with open(os.path.join(workdir, "config.json")) as f:
        stored = json.load(f)
    except (OSError, ValueError) as e:
      warnings.warn(f"left out run {os.path.basename(workdir)}: its config.json is not readable "
                    f"JSON ({e})", stacklevel=2)
      continue
    skipped: list[str] = []
    results = [(f"eval/{name}", result) for name, result in read_results(workdir, skipped)]
    if skipped:
      warnings.warn(f"left out {len(skipped)} file(s) of run {os.path.basename(workdir)} that "
                    f"are not result JSON (half-written or foreign): {', '.join(skipped)}",
                    stacklevel=2)
    runs.append((os.path.basename(workdir), workdir, stored, flatten(stored.get("config", {})),
                 results))
  for run, results in files.items():  # no config.json: what the result files record of the run
    known = {}
    for _, result in results:
      for path, field in (("model.position.kind", "scheme"), ("data.train_len", "train_len")):
        if result.get(field) is not None:
          known.setdefault(path, result[field])
    runs.append((run, None, {}, known, results))
  if not runs:
    raise CollectError(f"{study_dir}: no run folder has a readable config.json")
  fields = sorted({k for _, w, _, flat, _ in runs if w is not None for k in flat})
  # A field added to the code after a run trained is absent from its config.json: it takes the
  # field's configs/base.py default (new fields default to the old behaviour), so that it splits
  # no configuration's seeds unless some run set it to something else; a field whose default
  # changed takes the value old runs used (configs/stored.py legacy_defaults).
  defaults = flatten(base_config.get_config().to_dict())
  defaults.update({f"model.position.{k}": v for k, v in stored_config.legacy_defaults().items()})
  runs = [(run, w, stored, {k: flat[k] if k in flat else defaults.get(k) for k in fields}
           if w is not None else flat, results) for run, w, stored, flat, results in runs]
  varying = [k for k in fields if k not in STANDARD_FIELDS
             and len({repr(flat.get(k)) for _, _, _, flat, _ in runs}) > 1]
  study = os.path.basename(os.path.normpath(study_dir))
  flats = {run: flat for run, _, _, flat, _ in runs}
  records, result_columns = [], set()
  for run, workdir, stored, flat, results in runs:
    base = {"study": study, "run": run}
    base.update({name: flat.get(path) for path, name in STANDARD_FIELDS.items()})
    base["num_params"] = stored.get("num_params")
    parent = stored.get("parent") or {}  # a warm start (train.init_from, runs/warm_start.py)
    parent_run = os.path.basename(os.path.normpath(parent["workdir"])) if parent else ""
    base["parent"] = f"{parent_run}@{parent['step']}" if parent else ""
    base["method"] = (extension_recipes.recipe_of(flat, flats.get(parent_run)) if parent
                      else "")
    base.update({f"cfg.{k}": flat.get(k) for k in varying})
    base.update(final_metrics(workdir))
    latest: dict[Any, tuple[str, dict]] = {}
    for name, result in results:
      try:
        key = result_key(result)
        if not _is_number(result.get("step", -1)):
          raise TypeError(f"field 'step' holds {result['step']!r}, not a number")
      except (TypeError, ValueError, AttributeError) as e:
        _warn_malformed(run, name, e)
        continue
      if key not in latest or result.get("step", -1) > latest[key][1].get("step", -1):
        latest[key] = (name, result)
    for key, (name, result) in sorted(latest.items(), key=lambda kv: kv[1][0]):
      head = {"suite": key.suite, "extension": key.extension, "extension_factor": key.factor,
              "protocol": key.protocol, "stride": key.stride, "step": result.get("step"),
              "file": name}
      if key.step is not None:  # a checkpoint's result tagged by eval.step (eval/run.py)
        head.update(step_tag=key.step, split=result.get("split"))
      try:
        rows = _result_rows(result, flat.get("data.train_len") or 1)
      except (KeyError, TypeError, ValueError, AttributeError) as e:
        _warn_malformed(run, name, f"its rows cannot be read ({type(e).__name__}: {e})")
        continue
      records += [{**base, **head, **row} for row in rows]
      result_columns |= set(head).union(*rows)
  frame = pd.DataFrame.from_records(_drop_malformed(records, result_columns))
  if frame.empty:
    raise CollectError(f"no result JSON in any {study_dir}/<run>/eval/ (runs still training?)")
  return frame


def configuration_columns(columns: Iterable[str]) -> list[str]:
  """Run-level columns that define a configuration apart from seeds (the summary's groups).

  `cfg.eval.*` fields are left out: they are the settings of train.py's own final evaluation, and
  what an evaluation did is in its rows (extension, extension_factor, protocol, stride); a field
  added to the eval config after some runs trained (absent from their config.json) must not split
  one configuration's seeds into two groups. `cfg.train.init_from` is left out too: the children
  of parents that differ by seed are one configuration's seeds (the `parent` column names each).
  """
  return [c for c in columns if c in ("scheme", "method", "train_len", "num_params",
                                      "num_layers", "d_model", "num_heads", "num_steps",
                                      "train_passkey_fraction")
          or (c.startswith("cfg.") and not c.endswith("seed") and not c.startswith("cfg.eval.")
              and c != "cfg.train.init_from")]


def summarize(frame: pd.DataFrame, compare_multiplier: int = 8) -> pd.DataFrame:
  """The per-configuration summary over seeds (module docstring): every metric's mean, sample
  std and `mean_interval` (95% t-interval of the mean with n >= 3 runs, the range with 2; the
  `interval` column names which), and `ppl_<m>x_paired`, for m = compare_multiplier, the row's
  perplexity at m x train_len against every other scheme's, paired by seed
  (`paired_comparisons`)."""
  config_cols = configuration_columns(frame.columns)
  ppl = frame[frame["suite"] == "ppl_vs_length"]
  if "step_tag" in ppl:  # the final checkpoint's results; tagged ones are curves over steps
    ppl = ppl[ppl["step_tag"].isna()]
  per_run = []
  for (run, ext, factor, protocol), rows in ppl.groupby(
      ["run", "extension", "extension_factor", "protocol"], dropna=False):
    values = {"run": run, "extension": ext, "extension_factor": factor, "protocol": protocol}
    by_mult = {round(m, 6): p for m, p in zip(rows["multiplier"], rows["ppl"])}
    for m in SUMMARY_MULTIPLIERS:
      values[f"ppl_{m}x"] = by_mult.get(m)
    one, eight = values["ppl_1x"], values["ppl_8x"]
    values["ratio_8x_1x"] = eight / one if one and eight and not math.isnan(one) \
        and not math.isnan(eight) else None
    per_run.append(values)
  per_run = pd.DataFrame(per_run, columns=["run", "extension", "extension_factor", "protocol",
                                           *[f"ppl_{m}x" for m in SUMMARY_MULTIPLIERS],
                                           "ratio_8x_1x"])
  passkey_rows = frame[frame["suite"] == "passkey"]
  if passkey_rows.empty:
    passkey = pd.DataFrame(columns=["run", "extension", "extension_factor", "passkey_max_length"])
  else:
    passkey = passkey_rows.groupby(["run", "extension", "extension_factor"], dropna=False)[
        "max_length_passing"].first().fillna(0).rename("passkey_max_length").reset_index()
  if per_run.empty:  # a passkey-only or task study: one row per extension, no protocol
    per_run = passkey.assign(protocol=None)
  else:
    per_run = per_run.merge(passkey, on=["run", "extension", "extension_factor"], how="left")
  task_rows = frame[frame["suite"] == "algorithmic"]
  if not task_rows.empty:  # exact match over the trained sizes and over the sizes beyond them
    task_rows = task_rows.assign(exact_match=pd.to_numeric(task_rows["exact_match"]),
                                 inside=task_rows["in_distribution"].astype(bool))
    task = task_rows.groupby(["run", "extension", "extension_factor"], dropna=False).apply(
        lambda g: pd.Series({
            "exact_match_train_sizes": g.loc[g["inside"], "exact_match"].mean(),
            "exact_match_beyond": g.loc[~g["inside"], "exact_match"].mean()}),
        include_groups=False).reset_index()
    if per_run.empty:
      per_run = task.assign(protocol=None)
    else:
      per_run = per_run.merge(task, on=["run", "extension", "extension_factor"], how="left")
  runs = frame.drop_duplicates("run").set_index("run")[
      config_cols + ["final_val_loss"] + (["seed"] if "seed" in frame else [])]
  per_run = per_run.join(runs, on="run")
  metrics = [c for c in per_run.columns
             if c.startswith(("ppl_", "ratio_", "passkey_", "exact_match_"))] + ["final_val_loss"]
  for c in metrics:
    per_run[c] = pd.to_numeric(per_run[c], errors="coerce")
  keys = config_cols + ["extension", "extension_factor", "protocol"]
  grouped = per_run.groupby(keys, dropna=False, sort=True)
  summary = grouped[metrics].agg(["mean", "std", interval_low, interval_high])
  summary.columns = [f"{metric}_{stat}" for metric, stat in summary.columns]
  summary.insert(0, "runs", grouped["run"].nunique())
  summary.insert(1, "interval", summary["runs"].map(interval_name))
  summary = summary.reset_index()
  column = f"ppl_{compare_multiplier}x"
  if column in per_run.columns and "scheme" in summary.columns:
    summary[f"{column}_paired"] = paired_comparisons(per_run, summary, column, keys)
  return summary


def mean_interval(values, level: float = 0.95) -> tuple[float, float]:
  """The spread drawn and tabled around a mean over runs (seeds), (low, high).

  n >= 3 runs: the Student-t interval of the mean, mean -+ t_{(1+level)/2, n-1} s / sqrt(n), s
  the sample standard deviation (a normal model of the per-seed values; Student, Biometrika 6,
  1908). n = 2: the range of the two values, (min, max), which is no interval of anything: the
  range of two draws covers their distribution's median only half the time (`interval_name` says
  "range of 2"). n < 2: (NaN, NaN).

  Args:
    values: the per-run values (NaN and non-numbers ignored).
    level: coverage of the t-interval, in (0, 1).
  """
  from scipy import stats  # noqa: PLC0415  (on use: scipy takes a while to import)
  v = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), float)
  if len(v) < 2:
    return math.nan, math.nan
  if len(v) == 2:
    return float(v.min()), float(v.max())
  half = float(stats.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
  return float(v.mean()) - half, float(v.mean()) + half


def interval_name(n: int) -> str:
  """What `mean_interval` gives for n runs: "" (one run), "range of 2", "95% t-interval (n=N)"."""
  return "" if n < 2 else "range of 2" if n == 2 else f"95% t-interval (n={n})"


def interval_low(values) -> float:
  """`mean_interval(values)[0]` (a pandas aggregation; column suffix `_low`)."""
  return mean_interval(values)[0]


def interval_high(values) -> float:
  """`mean_interval(values)[1]` (column suffix `_high`)."""
  return mean_interval(values)[1]


interval_low.__name__, interval_high.__name__ = "low", "high"


def paired_difference(a: dict, b: dict, level: float = 0.95) -> dict:
  """The mean over seeds of a - b, paired by seed (children share their parent's seed), with the
  Student-t interval of that mean at `level` when n >= 3 pairs (NaN bounds below 3).

  Args:
    a, b: {seed: value} of two configurations; seeds missing from either or non-finite dropped.
  Returns:
    {"n": pairs, "mean": mean difference, "low": ..., "high": ...}.
  """
  seeds = sorted(s for s in set(a) & set(b)
                 if np.isfinite(float(a[s])) and np.isfinite(float(b[s])))
  d = [float(a[s]) - float(b[s]) for s in seeds]
  low, high = mean_interval(d, level) if len(d) >= 3 else (math.nan, math.nan)
  return {"n": len(d), "mean": float(np.mean(d)) if d else math.nan, "low": low, "high": high}


def paired_comparisons(per_run: pd.DataFrame, summary: pd.DataFrame, column: str,
                       keys: list[str]) -> list:
  """Per summary row, its `column` against every other scheme of the same configuration (every
  key but the scheme and its parameter count), paired by seed (`paired_difference`): "<other>:
  <mean difference> [low, high]" with n >= 3 pairs, "<other>: n=<pairs> pairs, too few" below;
  "; "-joined, NaN when the row has no other scheme. A difference whose interval holds 0 is one
  the data do not tell apart."""
  others = [k for k in keys if k not in ("scheme", "num_params")]

  def same(frame: pd.DataFrame, row, columns) -> np.ndarray:
    """The rows of `frame` equal to `row` in every one of `columns` it has (NaN equal to NaN)."""
    mask = np.ones(len(frame), bool)
    for k in columns:
      if k in frame:
        mask &= ((frame[k] == row[k]) | (frame[k].isna() & pd.isna(row[k]))).to_numpy()
    return mask

  def values(row) -> dict:
    rows = per_run[same(per_run, row, keys)]
    return dict(zip(rows["seed"], rows[column]))

  out = []
  for i, row in summary.iterrows():
    mine, parts = values(row), []
    for j in summary.index[same(summary, row, others)]:
      if j == i:
        continue
      d = paired_difference(mine, values(summary.loc[j]))
      name = summary.loc[j, "scheme"]
      parts.append(f"{name}: {d['mean']:+.4g} [{d['low']:+.4g}, {d['high']:+.4g}]" if d["n"] >= 3
                   else f"{name}: n={d['n']} pairs, too few")
    out.append("; ".join(sorted(parts)) if parts else math.nan)
  return out


def write_frame(frame: pd.DataFrame, path: str) -> None:
  """Writes `frame` to `path` (.parquet or .csv) atomically."""
  if path.endswith(".parquet"):
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))
  else:
    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


def missing_runs(study_dir: str, frame: pd.DataFrame) -> list[str]:
  """Runs the launcher's study.json lists that have no results in `frame` yet."""
  path = os.path.join(study_dir, MANIFEST)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    names = [r["name"] for r in json.load(f).get("runs", [])]
  have = set(frame["run"])
  return [n for n in names if n not in have]


def _source_files(workdir: str) -> list[str]:
  """The files of a run folder that its rows are read from: config.json, metrics.jsonl and
  eval/*.json (those that exist)."""
  eval_dir = os.path.join(workdir, "eval")
  files = [os.path.join(workdir, "config.json"), os.path.join(workdir, "metrics.jsonl")]
  if os.path.isdir(eval_dir):
    files += sorted(os.path.join(eval_dir, n) for n in os.listdir(eval_dir) if n.endswith(".json"))
  return [f for f in files if os.path.exists(f)]


def fingerprints(study_dir: str) -> dict[str, str]:
  """{path relative to `study_dir`: SHA-256 of its bytes} for every source file of every run
  folder of `study_dir` (`_source_files`): what sweeps.collect records in SOURCES."""
  out = {}
  for workdir in run_dirs(study_dir):
    for path in _source_files(workdir):
      with open(path, "rb") as f:
        out[os.path.relpath(path, study_dir)] = hashlib.sha256(f.read()).hexdigest()
  return out


def stale_runs(study_dir: str, table: str) -> list[str]:
  """Names of the runs of `study_dir` whose results `table` (a results table sweeps.collect
  wrote there) may not include: runs with a source file added, removed or changed since, judged
  by the SHA-256s collect recorded in SOURCES beside the table (so a fresh clone, whose files
  all get new modification times, is not stale); a table without SOURCES (written before they
  were recorded) falls back to modification times: runs with a file newer than the table.
  """
  sources = os.path.join(os.path.dirname(table), SOURCES)
  if not os.path.exists(sources):
    mtime = os.path.getmtime(table)
    return [os.path.basename(w) for w in run_dirs(study_dir)
            if any(os.path.getmtime(f) > mtime for f in _source_files(w))]
  with open(sources) as f:
    recorded = json.load(f)
  current = fingerprints(study_dir)
  changed = {k for k in set(recorded) | set(current) if recorded.get(k) != current.get(k)}
  return sorted({k.split(os.sep)[0] for k in changed})


USAGE = "python -m sweeps.collect <root>/<study> [--out=<folder>]"


def main(argv):
  """`python -m sweeps.collect <root>/<study>`: writes the tables; exit 2 with one line on bad
  input (runs.command_line.run: stray arguments and flag errors too)."""
  study_dir = os.path.normpath(argv[1])
  out = (FLAGS["out"].value if "out" in FLAGS else None) or study_dir  # defined under __main__
  try:
    if not os.path.isdir(study_dir):
      raise CollectError(f"{study_dir} is not a folder (expected <root>/<study>)")
    # where the tables go, before reading anything: the study folder itself by default
    if os.path.exists(out) and not os.path.isdir(out):
      raise CollectError(f"--out={out} is a file; give a folder for results.parquet, results.csv "
                         "and summary.csv")
    command_line.check_writable(out, "--out")
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      # what the tables are read from, recorded first: a file that changes while they are
      # collected then makes them stale (stale_runs), not silently current
      sources = (fingerprints(study_dir) if out == study_dir and os.path.isdir(study_dir)
                 else None)  # not a folder: collect says so
      frame = collect(study_dir)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  for w in caught:
    print(f"warning: {w.message}", file=sys.stderr)
  summary = summarize(frame)
  os.makedirs(out, exist_ok=True)
  for name in ("results.parquet", "results.csv"):
    write_frame(frame, os.path.join(out, name))
  write_frame(summary, os.path.join(out, "summary.csv"))
  if sources is not None:
    write_json(os.path.join(out, SOURCES), sources)
  with pd.option_context("display.width", 250, "display.max_columns", 60,
                         "display.float_format", "{:.4g}".format):
    shown = summary.apply(lambda col: col.map(  # a value holding a newline stays on its row
        lambda v: v.replace("\n", "\\n") if isinstance(v, str) else v))
    print(shown.to_string(index=False))
  absent = missing_runs(study_dir, frame)
  print(f"# {frame['run'].nunique()} runs, {len(frame)} rows -> {out}/results.parquet, "
        f"results.csv, summary.csv"
        + (f"; {len(absent)} run(s) of study.json without results yet: {', '.join(absent)}"
           if absent else ""))


FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("out", None, "Folder for results.parquet, results.csv and summary.csv; "
                      "default: the study folder itself (where sweeps.report and the notebooks "
                      "look for them).")


if __name__ == "__main__":
  define_flags()
  command_line.run(main, usage=USAGE, arguments=1)
