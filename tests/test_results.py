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
  assert "context_extension_cpu" in FOLDERS and "passkey_tiny" not in FOLDERS


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


def test_the_retrieval_track_holds_the_runs_docs_retrieval_shows():
  """docs/retrieval.md's table: the retrieval track's parents (75% passkey windows, no preamble),
  RoPE at 1,500 steps and ALiBi at 1,500 and 3,000, 3 seeds each, as trained and (RoPE, ALiBi
  3,000) with Self-Extend x8; 33 prompts per length; keys answered, by seed, 128..4,096 tokens."""
  frame = collect.collect(os.path.join(RESULTS, "context_extension_cpu"))
  parents = frame[(frame["suite"] == "passkey") & (frame["train_passkey_fraction"] == 0.75)
                  & (frame["method"].fillna("") == "")]
  assert (parents["prompts"] == 33).all() and (parents["train_len"] == 256).all()
  correct = {k: [int(c) for c in rows.sort_values("length")["correct"]]
             for k, rows in parents.groupby(["scheme", "num_steps", "extension", "seed"])}
  assert correct == {
      **{("alibi", 1500, "none", seed): [0] * 6 for seed in (0, 1, 2)},
      ("alibi", 3000, "none", 0): [33, 33, 11, 6, 3, 3],  # 1.00 1.00 0.33 0.18 0.09 0.09
      ("alibi", 3000, "none", 1): [33, 33, 29, 18, 9, 5],
      ("alibi", 3000, "none", 2): [6, 4, 1, 2, 2, 2],  # had not learned the lookup
      ("alibi", 3000, "self_extend", 0): [33, 33, 32, 32, 14, 6],
      ("alibi", 3000, "self_extend", 1): [33, 33, 33, 21, 6, 3],
      ("alibi", 3000, "self_extend", 2): [5, 4, 3, 7, 4, 2],
      ("rope", 1500, "none", 0): [33, 31, 0, 0, 0, 0],
      ("rope", 1500, "none", 1): [33, 32, 0, 0, 0, 0],
      ("rope", 1500, "none", 2): [33, 33, 0, 0, 0, 0],
      ("rope", 1500, "self_extend", 0): [28, 28, 31, 24, 0, 0],
      ("rope", 1500, "self_extend", 1): [33, 33, 30, 0, 0, 0],
      ("rope", 1500, "self_extend", 2): [33, 32, 30, 31, 0, 0]}
  assert set(parents.loc[parents["extension"] == "self_extend", "extension_factor"]) == {8.0}


def test_a_folder_of_result_files_is_collected_by_file_name_prefix(tmp_path):
  """`<run>_<suite><suffix>.json` names the run; a file named after its suite alone (a copied
  eval/ folder) belongs to a run named after the folder; other JSON is left out with a warning."""
  import shutil
  track = os.path.join(RESULTS, "context_extension_cpu",
                       "kind={},num_steps={},passkey.fraction=0.75,passkey.preamble=False,"
                       "seed=0,shuffle_seed=0", "eval")
  folder = tmp_path / "copied_eval"
  folder.mkdir()
  shutil.copy(os.path.join(track.format("alibi", 3000), "passkey_self_extend_x8.json"),
              folder / "passkey_self_extend_x8.json")
  shutil.copy(os.path.join(track.format("rope", 1500), "passkey.json"),
              folder / "my_run_passkey.json")
  (folder / "notes.json").write_text('{"note": "not a result"}')
  with pytest.warns(UserWarning, match=r"left out 1 file\(s\) of .*copied_eval that are not "
                                       r"result JSON \(half-written or foreign\): notes.json"):
    frame = collect.collect(str(folder))
  runs = frame.drop_duplicates("run").set_index("run")[["scheme", "step", "extension", "file"]]
  assert runs.to_dict("index") == {
      "copied_eval": {"scheme": "alibi", "step": 3000, "extension": "self_extend",
                      "file": "passkey_self_extend_x8.json"},
      "my_run": {"scheme": "rope", "step": 1500, "extension": "none",
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
