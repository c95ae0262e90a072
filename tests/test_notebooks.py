"""The notebooks run top to bottom (nbclient, headless) on a small study table made here, and
`python -m sweeps.report` writes one HTML page holding every figure."""

import base64
import os
import re
import shutil
import subprocess
import sys

import jax
import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

import train
from sweeps import collect, figures, report
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
  figure = figures.fig_ppl_vs_length(frame)
  lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
  for scheme, growth in GROWTH.items():  # mean over seeds 0 and 1: 4.05 x growth per doubling
    assert list(lines[scheme].get_ydata()) == pytest.approx(
        [4.05, 4.05, 4.05 * growth, 4.05 * growth ** 2, 4.05 * growth ** 3])
  assert "rope + yarn x4" not in lines
  assert "rope + yarn x4" in {
      l.get_label() for l in figures.fig_extensions(frame).axes[0].get_lines()}
  summary = figures.summary_table(frame)
  # ppl(8x) / ppl(1x): alibi 1, rope + YaRN 1, none 1.5^3, rope 2^3
  assert list(zip(summary["scheme"], summary["extension"])) == [
      ("alibi", "none"), ("rope", "yarn"), ("none", "none"), ("rope", "none")]
  assert list(summary["ratio_8x_1x_mean"]) == pytest.approx([1.0, 1.0, 3.375, 8.0])
  with pytest.raises(ValueError, match="not a summary column"):
    figures.summary_table(frame, "no_such_column")
  grid = figures.fig_retrieval_grid(frame)
  assert [a.get_title() for a in grid.axes[:4]] == ["alibi", "none", "rope", "rope + yarn x4"]
  assert figures.fig_algorithmic(frame).axes[0].get_title().startswith("copy")
  assert figures.fig_retrieval_grid(frame, "needle") is None  # no needle results


def test_report_embeds_every_figure(study, tmp_path):
  out = str(tmp_path / "report.html")
  result = subprocess.run([sys.executable, "-m", "sweeps.report", study, f"--out={out}"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr
  with open(out) as f:
    page = f.read()
  want = ["ppl_vs_length_non_overlapping", "extensions_non_overlapping",
          "loss_by_position_non_overlapping", "passkey_heatmaps", "passkey_vs_length",
          "attention_vs_length", "algorithmic"]
  assert f"({len(want)} figures: {', '.join(want)})" in result.stdout
  for fig_id in want:
    match = re.search(rf"<figure id='fig-{fig_id}'><img alt='{fig_id}' "
                      r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", page)
    assert match, fig_id
    assert base64.b64decode(match.group(1))[:8] == b"\x89PNG\r\n\x1a\n"
  assert page.count("<figure") == len(want)
  assert "class=\"dataframe sortable\"" in page and "ratio_8x_1x_mean" in page
  # A study folder without a table is collected first; a bad path is one line, exit 2.
  bare = shutil.copytree(study, str(tmp_path / "bare"),
                         ignore=shutil.ignore_patterns("results.*", "summary.csv"))
  path, ids = report.write_report(bare)
  assert path == os.path.join(bare, "report.html") and ids == want
  bad = subprocess.run([sys.executable, "-m", "sweeps.report", str(tmp_path / "nothing.txt")],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
  assert bad.returncode == 2 and bad.stderr.strip().startswith("error: ")
  assert len(bad.stderr.strip().splitlines()) == 1 and "does not exist" in bad.stderr
  bare_call = subprocess.run([sys.executable, "-m", "sweeps.report"], cwd=REPO, capture_output=True,
                             text=True, timeout=600)
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
  assert figures.fig_algorithmic(text) is None
  assert len(figures.summary_table(text)) == 4
  tasks = frame[frame["suite"] == "algorithmic"].dropna(axis=1, how="all")
  assert "ppl" not in tasks.columns and "accuracy" not in tasks.columns
  assert [i for i, _, _ in figures.study_figures(tasks)] == ["algorithmic"]
  assert figures.fig_attention_vs_length(tasks) is None


def test_bad_arguments_and_tables_are_one_clear_line(study, tmp_path):
  frame = figures.read_table(study)
  for call, message in [
      (lambda: figures.fig_ppl_vs_length(frame, "slidng"),
       "protocol='slidng' is not one of 'non_overlapping', 'sliding'"),
      (lambda: figures.summary_table(frame, protocol="slidng"), "protocol='slidng'"),
      (lambda: figures.fig_loss_by_position(frame, 300),
       "length=300 is not one of 16, 32, 64, 128, 256"),
      (lambda: figures.fig_retrieval_grid(frame, "passkeys"), "suite='passkeys'"),
      (lambda: figures.fig_algorithmic(frame, "accuracy"), "metric='accuracy'")]:
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
    bad = subprocess.run([sys.executable, "-m", "sweeps.report", path], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert message in bad.stderr
  with pytest.raises(report.ConfigError, match="must be an .html file path"):
    report.write_report(study, str(tmp_path))


def test_one_colour_per_scheme_and_readable_log_ticks(study):
  frame = figures.read_table(study)
  by_position = frame[~((frame["suite"] == "loss_by_position") & (frame["scheme"] == "alibi"))]
  colours = {}
  for fig in (figures.fig_ppl_vs_length(frame), figures.fig_loss_by_position(by_position),
              figures.fig_accuracy_vs_length(frame)):
    for line in fig.axes[0].get_lines():
      if not line.get_label().startswith(("train_len", "_")):
        colours.setdefault(line.get_label(), set()).add(line.get_color())
  assert {k: len(v) for k, v in colours.items()} == {
      "alibi": 1, "none": 1, "rope": 1, "rope + yarn x4": 1}
  assert len({next(iter(v)) for v in colours.values()}) == 4
  narrow = frame[frame["scheme"] == "alibi"]  # ppl 4.0..4.1 at every length
  ax = figures.fig_ppl_vs_length(narrow).axes[0]
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


def test_every_registered_scheme_has_its_own_style():
  """No two registered schemes share a (colour, line style) pair or a marker, and no scheme is
  drawn in the grey/black of the train_len markers."""
  from models import positions
  styles = {kind: figures.scheme_style(kind) for kind in positions.REGISTRY}
  assert set(styles) <= set(figures.SCHEME_ORDER)  # a new scheme gets a fixed style
  assert len({(s["color"], s["linestyle"]) for s in styles.values()}) == len(styles)
  assert len({s["marker"] for s in styles.values()}) == len(styles)
  assert not {s["color"].lower() for s in styles.values()} & {"gray", "grey", "black", "#000000"}
  assert figures.scheme_style("my_new_scheme") == figures.scheme_style("my_new_scheme")


def test_the_report_of_a_folder_collects_again_when_runs_are_newer(study, tmp_path):
  copy = shutil.copytree(study, str(tmp_path / "study"))
  run = os.path.join(copy, "kind=alibi,seed=0", "eval", "passkey.json")
  os.utime(run, (os.path.getmtime(run) + 100, os.path.getmtime(run) + 100))
  with pytest.warns(UserWarning, match="older than the results of 1 run"):
    figures.read_table(copy)
  with open(os.path.join(copy, "kind=alibi,seed=1", "eval", "ppl_vs_length.json"), "w") as f:
    f.write("{half")  # a half-written file: left out with a warning
  result = subprocess.run([sys.executable, "-m", "sweeps.report", copy], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr
  assert "collecting" in result.stderr and "again" in result.stderr
  assert "warning: left out 1 file(s) of run kind=alibi,seed=1" in result.stderr


@pytest.mark.parametrize("name,pictures", [("extrapolation", 3), ("retrieval", 2),
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
    run_notebook(name, "WORKDIRS = []", tmp_path)
