"""Every committed results folder opens: sweeps.collect collects it without a warning, its
committed table is what collecting gives today (so the notebooks, which read the table, and
sweeps.report agree), and its numbers are the ones docs/retrieval.md states."""

import json
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from sweeps import collect, figures, report

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def _study_folders(root: str) -> list[str]:
  """Every committed study folder under `root`, relative to it: a folder holding a collected
  table (results.parquet); a study committed as it runs (sweeps/publish.py) may hold only its
  tuning stage so far (`<study>/search/`)."""
  return sorted(os.path.relpath(d, root) for d, _, files in os.walk(root)
                if "results.parquet" in files)


FOLDERS = _study_folders(RESULTS)


def test_there_are_results_folders():
  assert "passkey_tiny" in FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_every_results_folder_opens_and_its_table_is_current(name):
  folder = os.path.join(RESULTS, name)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no file left out, no stale table
    frame = collect.collect(folder)
    table = figures.read_table(folder)  # what the notebooks open
    loaded, study = report.load_study_table(folder)  # what the report opens
  assert len(frame) > 0 and frame["run"].nunique() >= 1 and study == os.path.basename(name)
  # python -m sweeps.collect wrote it from these files (a missing value is missing: an object
  # column of a table mixing text and task runs reads None where collect has NaN)
  def same(f):
    return f.astype(object).where(f.notna(), None)
  pd.testing.assert_frame_equal(same(table), same(frame))
  pd.testing.assert_frame_equal(same(loaded), same(frame))


def test_passkey_tiny_holds_the_documented_runs():
  """docs/retrieval.md's rows: RoPE (1500 steps) and ALiBi (3000 steps), each as trained and
  with Self-Extend (G = 8), 55 prompts per length."""
  frame = collect.collect(os.path.join(RESULTS, "passkey_tiny"))
  assert set(frame["suite"]) == {"passkey"} and (frame["prompts"] == 55).all()
  runs = frame.drop_duplicates(["run", "extension"]).set_index(["run", "extension"])
  assert runs[["scheme", "step", "train_len", "extension_factor", "file"]].to_dict("index") == {
      ("alibi3000", "none"): {"scheme": "alibi", "step": 3000, "train_len": 256,
                              "extension_factor": 1.0, "file": "alibi3000_passkey.json"},
      ("alibi3000", "self_extend"): {"scheme": "alibi", "step": 3000, "train_len": 256,
                                     "extension_factor": 8.0,
                                     "file": "alibi3000_passkey_self_extend_x8.json"},
      ("rope", "none"): {"scheme": "rope", "step": 1500, "train_len": 256,
                         "extension_factor": 1.0, "file": "rope_passkey.json"},
      ("rope", "self_extend"): {"scheme": "rope", "step": 1500, "train_len": 256,
                                "extension_factor": 8.0, "file": "rope_passkey_self_extend_x8.json"}}
  correct = {k: rows.sort_values("length")["correct"].tolist()
             for k, rows in frame.groupby(["run", "extension"])}
  assert correct == {("alibi3000", "none"): [37, 35, 13, 8, 3],  # 0.67 0.64 0.24 0.15 0.05
                     ("alibi3000", "self_extend"): [38, 37, 40, 33, 15],  # 0.69 .. 0.27
                     ("rope", "none"): [55, 53, 0, 0, 0],  # 1.00 0.96 0 0 0
                     ("rope", "self_extend"): [55, 52, 48, 27, 0]}  # 1.00 0.95 0.87 0.49 0
  passing = frame.groupby("run")["max_length_passing"].first()
  assert passing["rope"] == 256 and pd.isna(passing["alibi3000"])
  # No config.json: of the runs only what their result files record is known.
  assert frame[["num_params", "seed", "final_val_loss"]].isna().all().all()


def test_a_folder_of_result_files_is_collected_by_file_name_prefix(tmp_path):
  """`<run>_<suite><suffix>.json` names the run; a file named after its suite alone (a copied
  eval/ folder) belongs to a run named after the folder; other JSON is left out with a warning."""
  import shutil
  source = os.path.join(RESULTS, "passkey_tiny")
  folder = tmp_path / "copied_eval"
  folder.mkdir()
  shutil.copy(os.path.join(source, "rope_passkey_self_extend_x8.json"),
              folder / "passkey_self_extend_x8.json")
  shutil.copy(os.path.join(source, "alibi3000_passkey.json"), folder / "my_run_passkey.json")
  (folder / "notes.json").write_text('{"note": "not a result"}')
  with pytest.warns(UserWarning, match=r"left out 1 file\(s\) of .*copied_eval that are not "
                                       r"result JSON \(half-written or foreign\): notes.json"):
    frame = collect.collect(str(folder))
  runs = frame.drop_duplicates("run").set_index("run")[["scheme", "step", "extension", "file"]]
  assert runs.to_dict("index") == {
      "copied_eval": {"scheme": "rope", "step": 1500, "extension": "self_extend",
                      "file": "passkey_self_extend_x8.json"},
      "my_run": {"scheme": "alibi", "step": 3000, "extension": "none",
                 "file": "my_run_passkey.json"}}
  (folder / "passkey_self_extend_x8.json").unlink()
  (folder / "my_run_passkey.json").unlink()
  with pytest.raises(collect.CollectError, match="holds no run folder with a config.json and no "
                                                 "result JSON"):
    collect.collect(str(folder))


def page_row(page: str, prefix: str) -> list[str]:
  """The cells of the first table row of results/<page> that starts with `prefix`."""
  text = open(os.path.join(RESULTS, page)).read()
  row = next(line for line in text.splitlines() if line.startswith(prefix))
  return [c.strip() for c in row.split("|")[1:-1]]


def test_addition_grid_page_states_what_the_committed_grids_hold():
  """results/addition_grid_cpu.md's grid table (rendered by sweeps.findings from the collected
  table) equals what the committed eval JSONs hold, read here directly."""
  import json
  for scheme in ("alibi", "rope", "none", "abacus"):
    grid = json.load(open(os.path.join(RESULTS, "addition_grid_cpu", f"kind={scheme}", "eval",
                                       "algorithmic.json")))["grid"]
    m = grid["exact_match"]
    cells = page_row("addition_grid_cpu.md", f"| `{scheme}` | 0.")
    assert cells[1] == f"{grid['in_distribution_exact_match']:.3f}"
    assert cells[2:9] == [f"{m[a - 1][b - 1]:.2f}"
                          for a, b in ((1, 1), (2, 2), (3, 3), (1, 2), (2, 1), (1, 5), (5, 1))]
    assert cells[9] == f"{grid['one_operand_beyond_exact_match']:.3f}"
    assert cells[10] == f"{grid['beyond_exact_match']:.3f}"


def test_a_task_study_summary_gives_exact_match_inside_and_beyond_the_trained_sizes():
  import json
  summary = collect.summarize(collect.collect(os.path.join(RESULTS, "addition_grid_cpu")))
  summary = summary.set_index("scheme")
  assert sorted(summary.index) == ["abacus", "alibi", "none", "rope"]
  for scheme in summary.index:
    rows = json.load(open(os.path.join(RESULTS, "addition_grid_cpu", f"kind={scheme}", "eval",
                                       "algorithmic.json")))["rows"]
    inside = [r["exact_match"] for r in rows if r["in_distribution"]]
    beyond = [r["exact_match"] for r in rows if not r["in_distribution"]]
    assert summary.loc[scheme, "exact_match_train_sizes_mean"] == pytest.approx(np.mean(inside))
    assert summary.loc[scheme, "exact_match_beyond_mean"] == pytest.approx(np.mean(beyond))


def test_intervals_and_paired_differences_on_hand_made_runs():
  assert all(np.isnan(collect.mean_interval([5.0])))  # one run: no interval
  assert collect.mean_interval([3.0, 1.0]) == (1.0, 3.0)  # two: their range, named so
  assert [collect.interval_name(n) for n in (1, 2, 3)] == [
      "", "range of 2", "95% t-interval (n=3)"]
  # 1, 2, 3: mean 2, s = 1, t(0.975, 2 dof) = 4.302653 -> 2 -+ 4.302653 / sqrt(3)
  np.testing.assert_allclose(collect.mean_interval([1.0, 2.0, 3.0]),
                             [2 - 4.302653 / 3 ** 0.5, 2 + 4.302653 / 3 ** 0.5], rtol=1e-6)
  # paired by seed: differences 1, 2, 3 (seed 3 has no partner and is dropped)
  d = collect.paired_difference({0: 11.0, 1: 12.0, 2: 13.0, 3: 9.0}, {0: 10.0, 1: 10.0, 2: 10.0})
  assert d["n"] == 3 and d["mean"] == 2.0
  np.testing.assert_allclose([d["low"], d["high"]], collect.mean_interval([1.0, 2.0, 3.0]))
  two = collect.paired_difference({0: 2.0, 1: 3.0}, {0: 1.0, 1: 1.0})
  assert two["n"] == 2 and two["mean"] == 1.5 and np.isnan(two["low"])  # too few for a claim
  # The summary's columns on a hand-made table: 3 seeds of a and b (b = a + 1, 2, 3 per seed),
  # 2 seeds of c.
  rows = []
  for scheme, values in (("a", [10.0, 20.0, 30.0]), ("b", [11.0, 22.0, 33.0]), ("c", [5.0, 6.0])):
    for seed, v in enumerate(values):
      for length, ppl in ((8, v / 2), (64, v)):
        rows.append({"run": f"{scheme}{seed}", "scheme": scheme, "seed": seed, "train_len": 8,
                     "num_params": 1, "suite": "ppl_vs_length", "extension": "none",
                     "extension_factor": 1.0, "protocol": "non_overlapping",
                     "multiplier": length / 8, "ppl": ppl, "final_val_loss": 1.0})
  summary = collect.summarize(pd.DataFrame(rows)).set_index("scheme")
  assert summary.loc["a", "interval"] == "95% t-interval (n=3)"
  assert summary.loc["c", "interval"] == "range of 2"
  assert (summary.loc["c", "ppl_8x_low"], summary.loc["c", "ppl_8x_high"]) == (5.0, 6.0)
  np.testing.assert_allclose([summary.loc["a", "ppl_8x_low"], summary.loc["a", "ppl_8x_high"]],
                             collect.mean_interval([10.0, 20.0, 30.0]))
  low, high = collect.mean_interval([-1.0, -2.0, -3.0])
  assert summary.loc["a", "ppl_8x_paired"] == (
      f"b: -2 [{low:+.4g}, {high:+.4g}]; c: n=2 pairs, too few")


def test_synthetic_study_page_states_what_the_committed_jsons_hold():
  """results/synthetic_tasks_cpu.md's tables (rendered by sweeps.findings from the collected
  table) equal what the committed eval JSONs hold, read here directly."""
  import json
  folder = os.path.join(RESULTS, "synthetic_tasks_cpu")
  for task, name, n in (("task_mqar", "mqar", 8), ("task_flip_flop", "flip flop", 16)):
    for scheme in ("none", "alibi", "rope"):
      rows = json.load(open(os.path.join(folder, f"config={task},kind={scheme}", "eval",
                                         "algorithmic.json")))["rows"]
      em = {r["size"]: r["exact_match"] for r in rows}
      tok = {r["size"]: r["token_accuracy"] for r in rows}
      cells = page_row("synthetic_tasks_cpu.md", f"| {name} `{scheme}` |")
      assert cells[1] == str(n)
      assert cells[2] == f"{np.mean([v for s, v in em.items() if s <= n]):.3f}"
      assert cells[3:5] == [f"{em[n]:.3f}", f"{em[n + 1]:.3f}"]
      assert cells[5] == f"{np.mean([v for s, v in em.items() if n < s <= 4 * n]):.3f}"
      assert cells[6:9] == [f"{tok[n]:.3f}", f"{tok[2 * n]:.3f}", f"{tok[4 * n]:.3f}"]
  for scheme in ("none", "alibi", "rope"):
    grid = json.load(open(os.path.join(folder, f"config=task_addition_grid,kind={scheme}",
                                       "eval", "algorithmic.json")))["grid"]
    m = grid["exact_match"]
    cells = page_row("synthetic_tasks_cpu.md", f"| `{scheme}` | 0.")
    assert cells[1:4] == [f"{grid['in_distribution_exact_match']:.3f}", f"{m[0][0]:.2f}",
                          f"{m[1][1]:.2f}"]
    assert cells[9:] == [f"{grid['one_operand_beyond_exact_match']:.3f}",
                         f"{grid['beyond_exact_match']:.3f}"]
    needle = json.load(open(os.path.join(folder, f"config=niah_multikey_tiny,kind={scheme}",
                                         "eval", "niah_multikey.json")))
    assert [r["accuracy"] for r in needle["rows"]] == [0.0, 0.0, 0.0]
    assert page_row("synthetic_tasks_cpu.md", f"| `{scheme}` | 0.00 |")[1:] == ["0.00"] * 3


def test_the_ngram_reference_quoted_in_the_index_is_the_committed_json():
  """results/README.md's n-gram perplexities at 256 bytes are ngram_reference_alibi_tiny.json's
  (eval/ngram.py), to 2 decimals, and the setup it states is the file's."""
  ref = json.load(open(os.path.join(RESULTS, "ngram_reference_alibi_tiny.json")))
  at = {r["order"]: r["ppl"] for r in ref["rows"] if r["length"] == 256}
  text = " ".join(open(os.path.join(RESULTS, "README.md")).read().split())
  quoted = ", ".join(f"order {k}{' (unigram)' if k == 1 else ''} {at[k]:.2f}" for k in range(1, 7))
  assert quoted in text
  assert (ref["train_documents"], ref["split"], ref["max_tokens_per_length"]) == (
      34, "validation", 65536) and f"{ref['train_bytes'] / 1e6:.2f}M" == "4.05M"


PAGES = sorted(os.path.join(RESULTS, n) for n in os.listdir(RESULTS) if n.endswith(".md"))


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_every_decimal_of_each_findings_page_is_in_its_committed_data(page):
  """sweeps/prose_numbers.py: each decimal of the prose equals, at its written precision, a cell of
  the page's rendered tables or a number of a committed file it links to."""
  from sweeps import prose_numbers
  assert prose_numbers.unsourced(page) == []


def test_the_prose_check_flags_a_hand_computed_number_and_nothing_else(tmp_path):
  """A hand-made page: table cells and a linked JSON source numbers; a difference computed by hand,
  a number beyond rounding and a number in prose but not in the data are flagged; code, arXiv ids,
  comments and integers are not checked."""
  from sweeps import prose_numbers
  (tmp_path / "ref.json").write_text(json.dumps({"rows": [{"ppl": 28.6171}, {"ok": True}]}))
  page = tmp_path / "page.md"
  page.write_text(
      "# p\n\n<!-- table x.parquet rows=scheme -->\n| s | 1x |\n|---|---|\n"
      "| `rope` | 4.2336 (4.10-4.37) |\n<!-- end table -->\n\n"
      "RoPE 4.23 (4.10-4.37), bigram 28.62 ([ref](ref.json)); arXiv 2108.12409; `lr 3.5e-3`, "
      "`4.5 tokens`; <!-- 9.99 --> 3,600 steps, 53 of 55.\n"
      "The gap is 0.13; RoPE 4.24; NoPE 5.34.\n")
  assert prose_numbers.unsourced(str(page)) == [f"{page}:10: 0.13", f"{page}:10: 4.24",
                                                f"{page}:10: 5.34"]
  assert prose_numbers.matches("1.464", [1.46374]) and prose_numbers.matches("1.464", [-1.4641])
  assert not prose_numbers.matches("1.464", [1.4626])
