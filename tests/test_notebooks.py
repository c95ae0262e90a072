"""The notebooks run top to bottom (nbclient, headless) on a small study table made here, and
`python -m sweeps.report` writes one HTML page holding every figure."""

import base64
import json
import os
import re
import shutil
import warnings

import jax
import numpy as np
import nbformat
import pandas as pd
import pytest

import forked
from nbclient import NotebookClient

import train
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sweeps import collect, figure_style, figures, heatmap_figures, length_figures, report, \
    training_figures
from tests.conftest import tiny_config
from tests.fake_study import GROWTH, write_fake_study

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = ("extrapolation", "retrieval", "algorithmic", "attention")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> str:
  """The synthetic study folder, collected into results.parquet / results.csv."""
  folder = write_fake_study(str(tmp_path_factory.mktemp("study")))
  collect.main(["collect", folder])
  return folder


def run_notebook(name: str, parameters: str, tmp_path) -> nbformat.NotebookNode:
  """Executes notebooks/<name>.ipynb with its first (parameters) cell replaced; returns it."""
  nb = nbformat.read(os.path.join(REPO, "notebooks", f"{name}.ipynb"), as_version=4)
  assert "parameters" in nb.cells[0].metadata.get("tags", [])
  assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
      f"{name}.ipynb is stored with outputs"
  nb.cells[0].source += "\n" + parameters
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": os.path.join(REPO, "notebooks")}}).execute()
  nbformat.write(nb, str(tmp_path / f"{name}.ipynb"))
  return nb


def images(nb) -> int:
  return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
             for o in c.outputs)


def test_figures_follow_the_table(study):
  frame = figures.read_table(study)
  figure = length_figures.fig_ppl_vs_length(frame)
  lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
  for scheme, growth in GROWTH.items():  # mean over seeds 0 and 1: 4.05 x growth per doubling
    assert list(lines[scheme].get_ydata()) == pytest.approx(
        [4.05, 4.05, 4.05 * growth, 4.05 * growth ** 2, 4.05 * growth ** 3])
  assert "rope + yarn x4" not in lines
  assert "rope + yarn x4" in {
      l.get_label() for l in length_figures.fig_extensions(frame).axes[0].get_lines()}
  summary = figures.summary_table(frame)
  # ppl(8x) / ppl(1x): alibi 1, rope + YaRN 1, none 1.5^3, rope 2^3
  assert list(zip(summary["scheme"], summary["extension"])) == [
      ("alibi", "none"), ("rope", "yarn"), ("none", "none"), ("rope", "none")]
  assert list(summary["ratio_8x_1x_mean"]) == pytest.approx([1.0, 1.0, 3.375, 8.0])
  with pytest.raises(ValueError, match="not a summary column"):
    figures.summary_table(frame, "no_such_column")
  grid = heatmap_figures.fig_retrieval_grid(frame)
  assert [a.get_title() for a in grid.axes[:4]] == ["alibi", "none", "rope", "rope + yarn x4"]
  assert length_figures.fig_algorithmic(frame).axes[0].get_title().startswith("copy")
  assert heatmap_figures.fig_retrieval_grid(frame, "needle") is None  # no needle results


def test_report_embeds_every_figure(study, tmp_path):
  out = str(tmp_path / "report.html")
  result = forked.run(["-m", "sweeps.report", study, f"--out={out}"], cwd=REPO, timeout=600)
  assert result.returncode == 0, result.stderr
  with open(out) as f:
    page = f.read()
  # the fake study's text runs log metrics.jsonl: the training curves come last
  want = ["ppl_vs_length_non_overlapping", "extensions_non_overlapping",
          "loss_by_position_non_overlapping", "passkey_heatmaps", "passkey_vs_length",
          "attention_vs_length", "algorithmic", "training_curves"]
  assert f"({len(want)} figures: {', '.join(want)})" in result.stdout
  for fig_id in want:
    match = re.search(rf"<figure id='fig-{fig_id}'( class='wide')?><img alt='{fig_id}' "
                      r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", page)
    assert match, fig_id
    assert base64.b64decode(match.group(2))[:8] == b"\x89PNG\r\n\x1a\n"
  assert page.count("<figure") == len(want)
  assert "class=\"dataframe sortable\"" in page and "ratio_8x_1x" in page
  assert "No metrics.jsonl for 2 of the 8 runs" in page and "kind=rope,task=copy" in page
  # A study folder without a table is collected first; a bad path is one line, exit 2.
  bare = shutil.copytree(study, str(tmp_path / "bare"),
                         ignore=shutil.ignore_patterns("results.*", "summary.csv"))
  path, ids = report.write_report(bare)
  assert path == os.path.join(bare, "report.html") and ids == want
  bad = forked.run(["-m", "sweeps.report", str(tmp_path / "nothing.txt")], cwd=REPO, timeout=600)
  assert bad.returncode == 2 and bad.stderr.strip().startswith("error: ")
  assert len(bad.stderr.strip().splitlines()) == 1 and "does not exist" in bad.stderr
  bare_call = forked.run(["-m", "sweeps.report"], cwd=REPO, timeout=600)
  assert bare_call.returncode == 2 and len(bare_call.stderr.strip().splitlines()) == 1


def test_a_table_with_only_some_suites_gives_their_figures(study):
  """A text study has no algorithmic columns, a task study no perplexity columns (as collected):
  each gets its own figures and summary, and no error for the others."""
  frame = figures.read_table(study)
  text = frame[frame["suite"] != "algorithmic"].dropna(axis=1, how="all")
  assert "exact_match" not in text.columns
  assert [i for i, _, _ in figures.study_figures(text)] == [
      "ppl_vs_length_non_overlapping", "extensions_non_overlapping",
      "loss_by_position_non_overlapping", "passkey_heatmaps", "passkey_vs_length",
      "attention_vs_length"]
  assert length_figures.fig_algorithmic(text) is None
  assert len(figures.summary_table(text)) == 4
  tasks = frame[frame["suite"] == "algorithmic"].dropna(axis=1, how="all")
  assert "ppl" not in tasks.columns and "accuracy" not in tasks.columns
  assert [i for i, _, _ in figures.study_figures(tasks)] == ["algorithmic"]
  assert length_figures.fig_attention_vs_length(tasks) is None


def test_ngram_reference_lines_sit_at_each_orders_perplexity_at_train_len(study):
  frame = figures.read_table(study)
  train_len = int(frame["train_len"].dropna().unique()[0])
  rows = [{"order": k, "length": length, "ppl": ppl, "protocol": "non_overlapping"}
          for k, at_l, elsewhere in [(1, 30.0, 31.0), (2, 12.5, 12.0), (6, 4.5, 4.25)]
          for length, ppl in [(train_len, at_l), (2 * train_len, elsewhere)]]
  reference = {"protocol": "non_overlapping", "rows": rows}
  fig = length_figures.fig_ppl_vs_length(frame, reference=reference)
  ax = fig.axes[0]
  flat = [line.get_ydata()[0] for line in ax.get_lines()
          if len(set(line.get_ydata())) == 1 and line.get_linestyle() != "-"
          and line.get_label().startswith("_")]
  assert sorted(flat) == [4.5, 12.5, 30.0]  # the values at train_len, not at 2 x train_len
  assert [t.get_text() for t in ax.texts] == ["1-gram", "2-gram", "6-gram"]
  assert "byte n-gram models" in ax.get_title()
  plain = length_figures.fig_ppl_vs_length(frame)
  assert not plain.axes[0].texts and "n-gram" not in plain.axes[0].get_title()
  with pytest.raises(ValueError, match="scored with protocol 'non_overlapping', the figure "
                                       "draws 'sliding'"):
    length_figures.reference_levels(reference, train_len, "sliding")
  with pytest.raises(ValueError, match=re.escape(f"no row at length 3; it has "
                                                 f"{[train_len, 2 * train_len]}")):
    length_figures.reference_levels(reference, 3)


def test_one_figure_is_written_as_a_png_by_its_id(study, tmp_path):
  """`python -m sweeps.figures`: the figure study_figures gives under that id, as a PNG; a wrong
  id or a missing --out is one line naming what is allowed."""
  out = tmp_path / "ppl.png"
  done = forked.run(["-m", "sweeps.figures", study, "--figure=ppl_vs_length_non_overlapping",
                     f"--out={out}"], cwd=REPO, timeout=600)
  assert done.returncode == 0, done.stderr
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  bad = forked.run(["-m", "sweeps.figures", study, "--figure=ppl", f"--out={out}"], cwd=REPO,
                   timeout=600)
  assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
  assert "--figure=ppl is not a figure of" in bad.stderr
  assert "ppl_vs_length_non_overlapping, " in bad.stderr
  bad = forked.run(["-m", "sweeps.figures", study, "--figure=ppl"], cwd=REPO, timeout=600)
  assert bad.returncode == 2 and "--out=<file>.png are required" in bad.stderr


def test_bad_arguments_and_tables_are_one_clear_line(study, tmp_path):
  frame = figures.read_table(study)
  for call, message in [
      (lambda: length_figures.fig_ppl_vs_length(frame, "slidng"),
       "protocol='slidng' is not one of 'non_overlapping', 'sliding'"),
      (lambda: figures.summary_table(frame, protocol="slidng"), "protocol='slidng'"),
      (lambda: length_figures.fig_loss_by_position(frame, 300),
       "length=300 is not one of 16, 32, 64, 128, 256"),
      (lambda: heatmap_figures.fig_retrieval_grid(frame, "passkeys"), "suite='passkeys'"),
      (lambda: length_figures.fig_algorithmic(frame, "accuracy"), "metric='accuracy'")]:
    with pytest.raises(ValueError, match=re.escape(message)):
      call()
  summary_csv = os.path.join(study, "summary.csv")
  with pytest.raises(ValueError, match="not a results table: no run or suite column"):
    figures.read_table(summary_csv)
  (tmp_path / "empty.csv").write_text("")
  (tmp_path / "notes.txt").write_text("run,suite\n")
  for path, message in [(summary_csv, "not its summary.csv"),
                        (str(tmp_path / "empty.csv"), "not a readable results table"),
                        (str(tmp_path / "notes.txt"), "not a results .parquet / .csv file")]:
    bad = forked.run(["-m", "sweeps.report", path], cwd=REPO, timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert message in bad.stderr
  with pytest.raises(report.ConfigError, match="must be an .html file path"):
    report.write_report(study, str(tmp_path))


def test_one_colour_per_scheme_and_readable_log_ticks(study):
  frame = figures.read_table(study)
  by_position = frame[~((frame["suite"] == "loss_by_position") & (frame["scheme"] == "alibi"))]
  colours = {}
  for fig in (length_figures.fig_ppl_vs_length(frame),
              length_figures.fig_loss_by_position(by_position),
              length_figures.fig_accuracy_vs_length(frame)):
    for line in fig.axes[0].get_lines():
      if not line.get_label().startswith(("train_len", "_")):
        colours.setdefault(line.get_label(), set()).add(line.get_color())
  assert {k: len(v) for k, v in colours.items()} == {
      "alibi": 1, "none": 1, "rope": 1, "rope + yarn x4": 1}
  assert len({next(iter(v)) for v in colours.values()}) == 4
  narrow = frame[frame["scheme"] == "alibi"]  # ppl 4.0..4.1 at every length
  ax = length_figures.fig_ppl_vs_length(narrow).axes[0]
  ax.figure.canvas.draw()
  low, high = ax.get_ylim()
  assert len([t for t in ax.get_yticks() if low <= t <= high]) >= 1
  labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
  assert labels and all(float(x) > 0 for x in labels)


def test_report_tables_say_constant_columns_once_and_the_training_mix():
  table = pd.DataFrame({"scheme": ["rope", "alibi"], "train_len": [256, 256],
                        "ppl_1x_mean": [5.3, 5.6], "extension_factor": [None, None]})
  varying, constant = report.split_constant_columns(table)
  assert list(varying.columns) == ["scheme", "ppl_1x_mean"] and constant == {"train_len": 256}
  assert report.split_constant_columns(table.iloc[:1])[0].shape == (1, 4)  # one row: kept whole
  page = report._table_html(table)
  assert page.startswith("<p class='constants'>Same in every row: train_len = 256</p>")
  runs = pd.DataFrame({"run": ["a", "a", "b"], "train_passkey_fraction": [0.75, 0.75, 0.75]})
  assert report.training_mix_note(runs).startswith(
      "Training data: 75% of the training windows are synthetic passkey documents")
  assert report.training_mix_note(runs.assign(train_passkey_fraction=0.0)) == ""
  assert report.training_mix_note(pd.DataFrame({"run": ["a"]})) == ""  # older tables


def test_warm_started_children_are_labelled_by_method_not_by_their_recipe_fields():
  """The context-extension table: children named by `method`; the legend shows only the fields
  that vary among the from-scratch runs (here the passkey share), in the recipe's colour."""
  frame = pd.DataFrame({
      "scheme": ["rope", "rope", "rope", "rope", "alibi"],
      "method": [None, None, "pi", "yarn", None],
      "cfg.data.passkey.fraction": [0.0, 0.25, 0.0, 0.0, 0.0],
      "cfg.train.learning_rate": [3e-3, 3e-3, 2e-4, 2e-4, 3e-3],
      "cfg.data.train_len": [256, 256, 1024, 1024, 256],
      "extension": ["none", "none", "none", "none", "none"]})
  assert list(figure_style.curve_labels(frame)) == [
      "rope fraction=0.0", "rope fraction=0.25", "rope [pi] fraction=0.0",
      "rope [yarn] fraction=0.0", "alibi fraction=0.0"]
  coupled = pd.DataFrame({"scheme": ["rope", "rope"], "extension": ["none", "none"],
                          "cfg.data.task.position_coupling": ["", "addition"]})
  assert list(figure_style.curve_labels(coupled)) == [  # an empty field reads none
      "rope position_coupling=none", "rope position_coupling=addition"]
  # Two budgets (or sizes) of one scheme are two curves, never pooled; num_params, which a
  # learned table changes with the scheme, names no choice.
  budgets = pd.DataFrame({"scheme": ["alibi", "alibi", "rope", "learned"],
                          "num_steps": [1500, 3000, 1500, 1500],
                          "num_params": [820_000, 820_000, 820_000, 853_000],
                          "extension": ["none", "self_extend", "none", "none"],
                          "extension_factor": [1.0, 8.0, 1.0, 1.0]})
  assert list(figure_style.curve_labels(budgets)) == [
      "alibi num_steps=1500", "alibi num_steps=3000 + self_extend x8", "rope num_steps=1500",
      "learned num_steps=1500"]
  styles = figure_style.curve_styles(list(figure_style.curve_labels(budgets)) + ["rope [yarn]"])
  assert styles["alibi num_steps=1500"]["color"] == figure_style.scheme_style("alibi")["color"]
  assert len({(s["color"], str(s["linestyle"])) for s in styles.values()}) == len(styles)
  # yarn's recipe colour is ALiBi's scheme colour: the child gets a colour of its own
  assert len({styles[k]["color"] for k in ("alibi num_steps=1500", "rope num_steps=1500",
                                           "learned num_steps=1500", "rope [yarn]")}) == 4
  assert (figure_style.band_text([3, 3, 2]) == "band = range of 2 seeds (not an interval);\n"
          "band = 95% t-interval of the mean (n=3 seeds)")
  assert figure_style.band_text([1, 1]) == "one run per point (no band)"
  pi = figure_style._style("rope [pi] fraction=0.0", [])
  assert pi["color"] == figure_style.METHOD_COLOURS["pi"] and pi["linestyle"] == "-"
  assert figure_style._style("alibi fraction=0.0", []) != pi


def test_every_registered_scheme_has_its_own_style():
  """No two registered schemes share a (colour, line style) pair or a marker, and no scheme is
  drawn in the grey/black of the train_len markers."""
  from models import positions
  styles = {kind: figure_style.scheme_style(kind) for kind in positions.REGISTRY}
  assert set(styles) <= set(figure_style.SCHEME_ORDER)  # a new scheme gets a fixed style
  assert len({(s["color"], s["linestyle"]) for s in styles.values()}) == len(styles)
  assert len({s["marker"] for s in styles.values()}) == len(styles)
  assert not {s["color"].lower() for s in styles.values()} & {"gray", "grey", "black", "#000000"}
  assert figure_style.scheme_style("my_new_scheme") == figure_style.scheme_style("my_new_scheme")


def test_every_recipe_has_its_own_colour():
  """Each context-extension recipe is drawn in a colour no other recipe has (not the grey of an
  unknown method)."""
  from configs.extension_recipes import RECIPES
  colours = [figure_style.METHOD_COLOURS.get(name) for name in RECIPES]
  assert None not in colours and len(set(colours)) == len(RECIPES)


def test_collect_writes_its_tables_where_out_says(study, tmp_path):
  out = tmp_path / "tables"
  done = forked.run(["-m", "sweeps.collect", study, f"--out={out}"], cwd=REPO, timeout=300)
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(out)) == ["results.csv", "results.parquet", "summary.csv"]
  assert pd.read_parquet(out / "results.parquet").equals(
      pd.read_parquet(os.path.join(study, "results.parquet")))
  assert f"-> {out}/results.parquet" in done.stdout
  (tmp_path / "a_file").write_text("")
  bad = forked.run(["-m", "sweeps.collect", study, f"--out={tmp_path / 'a_file'}"], cwd=REPO,
                   timeout=300)
  assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
      f"error: --out={tmp_path / 'a_file'} is a file; give a folder for results.parquet, "
      "results.csv and summary.csv"]


def test_the_report_of_a_folder_collects_again_when_runs_changed(study, tmp_path):
  copy = shutil.copytree(study, str(tmp_path / "study"))
  run = os.path.join(copy, "kind=alibi,seed=0", "eval", "passkey.json")
  later = (os.path.getmtime(run) + 100,) * 2
  os.utime(run, later)  # a new modification time alone (a fresh clone) changes nothing
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    figures.read_table(copy)
  assert collect.stale_runs(copy, os.path.join(copy, "results.parquet")) == []
  with open(run) as f:
    text = f.read()
  with open(run, "w") as f:
    f.write(text + "\n")  # new content: the table may not hold it
  with pytest.warns(UserWarning, match="predates the results of 1 run"):
    figures.read_table(copy)
  os.remove(os.path.join(copy, collect.SOURCES))  # a table collected before SOURCES existed
  other = os.path.join(copy, "kind=rope,seed=1", "metrics.jsonl")
  os.utime(other, later)
  assert collect.stale_runs(copy, os.path.join(copy, "results.parquet")) == [
      "kind=alibi,seed=0", "kind=rope,seed=1"]  # by modification times
  with open(os.path.join(copy, "kind=alibi,seed=1", "eval", "ppl_vs_length.json"), "w") as f:
    f.write("{half")  # a half-written file: left out with a warning
  result = forked.run(["-m", "sweeps.report", copy], cwd=REPO, timeout=600)
  assert result.returncode == 0, result.stderr
  assert "collecting" in result.stderr and "again" in result.stderr
  assert "warning: left out 1 file(s) of run kind=alibi,seed=1" in result.stderr


@pytest.mark.parametrize("name,pictures", [("extrapolation", 4), ("retrieval", 2),
                                          ("algorithmic", 1)])
def test_table_notebooks_run_headless(name, pictures, study, tmp_path):
  nb = run_notebook(name, f"RESULTS = {os.path.join(study, 'results.parquet')!r}", tmp_path)
  assert images(nb) == pictures


def test_attention_notebook_runs_on_checkpoints(study, text_corpus, tmp_path):
  workdirs = []
  for kind in ("alibi", "rope"):
    c = tiny_config(text_corpus, kind)
    c.train.num_steps = c.train.checkpoint_every_steps = 2
    c.eval.length_multipliers = (1.0,)
    workdirs.append(str(tmp_path / kind))
    train.train_and_evaluate(c, workdirs[-1], devices=jax.devices()[:1])
  nb = run_notebook("attention", f"RESULTS = {os.path.join(study, 'results.csv')!r}\n"
                    f"WORKDIRS = {workdirs!r}\nLENGTH_MULTIPLIERS = (0.5, 1.0, 2.0)\n"
                    "WINDOWS = 2", tmp_path)
  assert images(nb) == 3  # the table's figure, the checkpoints' figure, the maps
  table_output = nb.cells[4].outputs[0]["data"]["text/plain"]
  assert "alibi" in table_output and "rope" in table_output


def test_notebooks_run_on_the_committed_study_results(tmp_path):
  """The README's claim: each notebook runs top to bottom on results/pe_extrapolation_cpu.*."""
  committed = os.path.join(REPO, "results", "pe_extrapolation_cpu.parquet")
  if not os.path.exists(committed):
    pytest.skip("results/pe_extrapolation_cpu.parquet is not committed yet")
  frame = pd.read_parquet(committed)
  assert frame["run"].nunique() >= 9
  for name in NOTEBOOKS:
    nb = run_notebook(name, "WORKDIRS = []", tmp_path)
    if name == "extrapolation":  # the table alone: the curves need the run folders, and say so
      printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                        for o in c.outputs)
      assert "No training curves: they are drawn from each run's metrics.jsonl" in printed
      assert images(nb) == 3


SCHEMES = ("alibi", "none", "rope")  # the fake study's text runs; its copy-task runs log nothing


def write_training_metrics(study: str) -> None:
  """Known training curves in the text runs' metrics.jsonl: every 10 steps to 100, scheme k of
  SCHEMES and seed s logging loss 3 + k + 0.1 s - 0.01 step, learning rate 1e-5 step, gradient
  norm 1 + k, 1000 (k + 1) + s tokens/s, and every 50 steps a validation loss 2 + k + 0.1 s."""
  for k, scheme in enumerate(SCHEMES):
    for seed in (0, 1):
      with open(os.path.join(study, f"kind={scheme},seed={seed}", "metrics.jsonl"), "w") as f:
        for step in range(0, 101, 10):
          f.write(json.dumps({"step": step, "loss": 3 + k + 0.1 * seed - 0.01 * step,
                              "learning_rate": 1e-5 * step, "grad_norm": 1.0 + k,
                              "tokens_per_s": 1000.0 * (k + 1) + seed}) + "\n")
          if step % 50 == 0:
            f.write(json.dumps({"step": step, "val_loss": 2 + k + 0.1 * seed}) + "\n")


def test_study_training_curves_have_one_line_per_run_in_its_schemes_colour(study, tmp_path):
  copy = shutil.copytree(study, str(tmp_path / "study"))
  write_training_metrics(copy)
  frame = figures.read_table(os.path.join(copy, "results.parquet"))
  curves = training_figures.read_training_curves(copy, frame)
  runs = [f"kind={scheme},seed={seed}" for scheme in SCHEMES for seed in (0, 1)]
  assert list(dict.fromkeys(curves["run"])) == runs  # the copy-task runs have no metrics.jsonl
  fig = training_figures.fig_training_curves(curves)
  panels = fig.axes[:5]
  assert [a.get_ylabel().split(" (")[0] for a in panels] == [
      "training loss", "validation loss", "learning rate", "gradient norm", "throughput"]
  for ax in panels:
    lines = [l for l in ax.get_lines() if l.get_gid()]
    assert [l.get_gid() for l in lines] == runs
    assert [l.get_color() for l in lines] == [
        figure_style.scheme_style(run.split(",")[0][len("kind="):])["color"] for run in runs]
  assert len({l.get_color() for l in panels[0].get_lines()}) == 3  # seeds share their colour
  lines = {l.get_gid(): l for l in panels[0].get_lines()}
  assert list(lines["kind=rope,seed=1"].get_xdata()) == list(range(0, 101, 10))
  assert list(lines["kind=rope,seed=1"].get_ydata()) == pytest.approx(
      [5.1 - 0.01 * step for step in range(0, 101, 10)])
  val = {l.get_gid(): l for l in panels[1].get_lines()}["kind=none,seed=0"]
  assert list(val.get_xdata()) == [0, 50, 100] and list(val.get_ydata()) == pytest.approx([3] * 3)
  speed = {l.get_gid(): l for l in panels[4].get_lines()}["kind=alibi,seed=1"]
  assert set(speed.get_ydata()) == {1001.0}
  legend = fig.axes[5].get_legend()
  assert [t.get_text() for t in legend.get_texts()] == list(SCHEMES)
  assert {t.get_fontsize() for t in legend.get_texts()} == {9.0}
  # mean over seeds: one line per scheme, the seeds' mean, band = min..max
  mean = training_figures.fig_training_curves(curves, mean=True)
  lines = {l.get_gid(): l for l in mean.axes[0].get_lines()}
  assert list(lines) == list(SCHEMES)
  assert list(lines["none"].get_ydata())[:2] == pytest.approx([4.05, 3.95])
  # metrics.jsonl without some keys: the panel says so; no loss at all: no figure
  # the fake study logs loss and val_loss
  sparse = training_figures.read_training_curves(study, frame)
  text = [t.get_text() for t in training_figures.fig_training_curves(sparse).axes[2].texts]
  assert text == ["no learning_rate in metrics.jsonl"]
  assert training_figures.fig_training_curves(curves.iloc[:0]) is None


def test_report_has_the_training_curves_or_says_they_need_the_run_folders(study, tmp_path):
  copy = shutil.copytree(study, str(tmp_path / "study"))
  write_training_metrics(copy)
  out, ids = report.write_report(copy, str(tmp_path / "with_runs.html"))
  assert ids[-1] == "training_curves"
  page = open(out).read()
  assert re.search(r"<h2 id='training-curves'>Training curves</h2>\n<div class='figures'>"
                   r"<figure id='fig-training_curves' class='wide'><img alt='training_curves' "
                   r"src='data:image/png;base64,[A-Za-z0-9+/=]+'>", page)
  assert "No metrics.jsonl for 2 of the 8 runs" in page
  # The table alone (as results/ holds the committed study): one plain sentence, no figure.
  alone = tmp_path / "table"
  alone.mkdir()
  table = shutil.copy(os.path.join(copy, "results.parquet"), str(alone / "fake.parquet"))
  result = forked.run(["-m", "sweeps.report", table], cwd=REPO, timeout=600)
  assert result.returncode == 0, result.stderr
  assert "training_curves" not in result.stdout and "no training curves" in result.stdout
  page = open(str(alone / "fake_report.html")).read()
  assert "fig-training_curves" not in page and page.count("<figure") == 7
  assert ("<p class='note training-curves-note'>No training curves: they are drawn from each "
          "run&#x27;s metrics.jsonl") in page
  # ... and with --runs naming the study folder, the curves again.
  _, ids = report.write_report(table, str(tmp_path / "runs.html"), runs=copy)
  assert ids[-1] == "training_curves"
  with pytest.raises(report.ConfigError, match="--runs=.* is not a folder"):
    report.write_report(table, str(tmp_path / "x.html"), runs=str(tmp_path / "nowhere"))


def test_figures_read_at_half_the_page_width(study):
  """Legends at 9 points outside the axes, the heatmap grid without a blank band under its
  title, single panels at half the page's width and grids of panels at its width (a click
  enlarges), mean and std in one cell."""
  frame = figures.read_table(study)
  for fig in (length_figures.fig_ppl_vs_length(frame), length_figures.fig_accuracy_vs_length(frame),
              length_figures.fig_attention_vs_length(frame), length_figures.fig_algorithmic(frame)):
    (legend,) = [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert {t.get_fontsize() for t in legend.get_texts()} == {9.0}
    assert legend.get_bbox_to_anchor().x0 > legend.axes.get_window_extent().x1  # outside
  assert max(_gaps(heatmap_figures.fig_retrieval_grid(frame))) < 0.15  # inches; it was 0.38 here
  page, _ = report.build_report(frame, "t")
  assert page.count("<figure id") == 7
  assert re.findall(r"<figure id='fig-(\w+)' class='wide'>", page) == [
      "passkey_heatmaps", "attention_vs_length"]
  assert "figure{margin:0;flex:0 0 49%}" in page and 'classList.toggle("enlarged")' in page
  table = report.mean_std_columns(pd.DataFrame(
      {"scheme": ["a", "b"], "ppl_1x_mean": [4.05, 7.0], "ppl_1x_std": [0.0707, None]}))
  assert list(table.columns) == ["scheme", "ppl_1x (mean ± std)"]
  assert list(table["ppl_1x (mean ± std)"]) == ["4.05 ± 0.071", "7"]


def _gaps(fig) -> tuple[float, float]:
  """Inches between a grid figure's suptitle and its top panel, and between its bottom panel
  and its x label."""
  canvas = FigureCanvasAgg(fig)
  canvas.draw()
  renderer = canvas.get_renderer()
  panels = [ax for ax in fig.axes[:-1] if ax.axison]  # not the colour bar, not blank slots
  top = max(ax.get_tightbbox(renderer).y1 for ax in panels)
  bottom = min(ax.get_tightbbox(renderer).y0 for ax in panels)
  return ((fig._suptitle.get_window_extent(renderer).y0 - top) / fig.dpi,
          (bottom - fig._supxlabel.get_window_extent(renderer).y1) / fig.dpi)


def test_grid_task_heatmaps_come_from_the_committed_addition_grid_table():
  frame = figures.read_table(os.path.join(REPO, "results", "addition_grid_cpu", "results.csv"))
  fig = heatmap_figures.fig_algorithmic_grid(frame)
  panels = [a for a in fig.axes if a.get_title()]
  assert [a.get_title() for a in panels] == [f"addition_grid: {s}" for s in
                                              ("abacus", "alibi", "none", "rope")]
  # Each panel's image is the run's grid in percent (first operand's size on y), as its JSON.
  with open(os.path.join(REPO, "results", "addition_grid_cpu", "kind=rope", "eval",
                         "algorithmic.json")) as f:
    grid = json.load(f)["grid"]
  rope = panels[3].get_images()[0].get_array()
  assert np.allclose(np.ma.filled(rope, np.nan), 100 * np.array(grid["exact_match"], float),
                     equal_nan=True)
  square = [p for p in panels[3].patches]  # the training square, sizes 1..5
  assert len(square) == 1 and square[0].get_width() == 5
  assert heatmap_figures.fig_algorithmic_grid(frame[frame["suite"] != "algorithmic"]) is None


def test_extrapolation_ratio_against_model_size_and_train_len():
  from sweeps.overrides import StudyError
  from sweeps.study import model_sizes, param_counts, train_lengths
  from configs import alibi_tiny
  sizes = model_sizes([(64, 2), (128, 4)])
  assert sizes[1] == {"model.d_model": 128, "model.num_layers": 4, "model.num_heads": 4,
                      "model.mlp_dim": 512}
  assert param_counts(alibi_tiny.get_config(), sizes)[1] == 820_736  # alibi_tiny's own size
  assert train_lengths([128, 256], tokens_per_step=4096) == [
      {"data.train_len": 128, "data.batch_size": 32}, {"data.train_len": 256, "data.batch_size": 16}]
  with pytest.raises(StudyError, match="multiple of head_dim=32"):
    model_sizes([(100, 2)])
  rows = []  # ppl at 8x / 1x: alibi 1.0 everywhere; rope 2.0 at the small size, 4.0 at the large
  for scheme, size, seed, ratio in [("alibi", 1e5, 0, 1.0), ("alibi", 1e6, 0, 1.0),
                                    ("rope", 1e5, 0, 2.0), ("rope", 1e5, 1, 2.0),
                                    ("rope", 1e6, 0, 3.0), ("rope", 1e6, 1, 5.0)]:
    run = f"{scheme}-{size:g}-{seed}"
    for m, ppl in ((1.0, 5.0), (8.0, 5.0 * ratio)):
      rows.append({"run": run, "scheme": scheme, "seed": seed, "num_params": size,
                   "train_len": 256, "suite": "ppl_vs_length", "protocol": "non_overlapping",
                   "extension": "none", "multiplier": m, "length": int(256 * m), "ppl": ppl})
  frame = pd.DataFrame(rows)
  fig = length_figures.fig_extrapolation_ratio(frame, "num_params")
  lines = {l.get_label(): l for l in fig.axes[0].get_lines() if not l.get_label().startswith("_")}
  assert list(lines["alibi"].get_ydata()) == [1.0, 1.0]
  assert list(lines["rope"].get_xdata()) == [1e5, 1e6]
  assert list(lines["rope"].get_ydata()) == pytest.approx([2.0, 4.0])  # mean over seeds
  assert length_figures.fig_extrapolation_ratio(frame, "train_len") is None  # one train_len only
  with pytest.raises(ValueError, match="axis"):
    length_figures.fig_extrapolation_ratio(frame, "d_model")
