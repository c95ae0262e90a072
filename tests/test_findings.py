"""sweeps.findings: the findings pages' tables are what the committed data give, and the renderer
pools seeds as it says (hand-made tables with hand-computed cells)."""

import glob
import json
import os

import pandas as pd
import pytest

import forked

from configs.errors import ConfigError
from sweeps import findings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(glob.glob(os.path.join(ROOT, "results", "*.md")))
# docs pages that render a table from committed results (docs/retrieval.md's passkey table)
DOC_PAGES = sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
                   if findings.BLOCK.search(open(p, encoding="utf-8").read()))


def test_every_findings_page_is_rendered_from_the_committed_data():
  with_tables = [p for p in PAGES if findings.BLOCK.search(open(p).read())]
  assert len(with_tables) >= 4  # the studies with committed run folders
  assert findings.stale_pages(PAGES) == []


def test_the_docs_tables_are_rendered_from_the_committed_data():
  assert os.path.join(ROOT, "docs", "retrieval.md") in DOC_PAGES
  assert findings.stale_pages(DOC_PAGES) == []


def test_check_flags_a_page_whose_table_was_edited_by_hand(tmp_path):
  page = tmp_path / "study.md"
  source = open(os.path.join(ROOT, "results", "addition_grid_cpu.md")).read()
  page.write_text(source.replace(  # the same tables, the page in another folder
      "<!-- table addition_grid_cpu", f"<!-- table {os.path.join(ROOT, 'results', 'addition_grid_cpu')}"))
  assert findings.stale_pages([str(page)]) == []
  page.write_text(page.read_text().replace("| `rope` | 0.275", "| `rope` | 0.975"))
  cli = ["-m", "sweeps.findings", "--check", str(page)]
  proc = forked.run(cli, cwd=ROOT, timeout=300)
  assert proc.returncode == 1 and f"stale: {page}" in proc.stdout, proc.stdout + proc.stderr
  proc = forked.run(cli[:2] + [str(page)], cwd=ROOT, timeout=300)
  assert proc.returncode == 0 and "| `rope` | 0.275" in page.read_text()
  plain = tmp_path / "prose.md"  # a page without tables is named, not counted as checked
  plain.write_text("# prose only\n")
  proc = forked.run(cli[:3] + [str(page), str(plain)], cwd=ROOT, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert f"note: {plain} has no table block" in proc.stdout
  assert "2 page(s), 2 table(s) current" in proc.stdout
  before = os.stat(plain).st_mtime_ns  # rewriting: a page without tables is left untouched
  proc = forked.run(cli[:2] + [str(plain)], cwd=ROOT, timeout=300)
  assert proc.returncode == 0 and "left unchanged" in proc.stdout, proc.stdout + proc.stderr
  assert os.stat(plain).st_mtime_ns == before


def ppl_table(values_by_scheme):
  rows = []
  for scheme, per_seed in values_by_scheme.items():
    for seed, values in enumerate(per_seed):
      for length, ppl in zip((256, 512), values):
        rows.append({"run": f"{scheme}{seed}", "scheme": scheme, "seed": seed, "length": length,
                     "multiplier": length / 256, "ppl": ppl, "suite": "ppl_vs_length",
                     "extension": "none", "extension_factor": 1.0, "skipped": None})
  return pd.DataFrame(rows)


def test_pivot_cells_pool_seeds_as_stated(tmp_path):
  frame = ppl_table({"one": [(5.0, 6.0)], "two": [(5.0, 7.0), (6.0, 9.0)],
                     "three": [(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)]})
  path = tmp_path / "t.parquet"
  frame.to_parquet(path)
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet rows=scheme columns=length value=ppl -->\n"
                  "<!-- end table -->\n")
  text = findings.render_page(str(page))
  lines = text.splitlines()
  assert lines[1] == "| scheme | 256 (1x) | 512 (2x) |"
  assert lines[3] == "| `one` | 5.00 | 6.00 |"
  assert lines[4] == "| `two` | 5.50 (5.00-6.00) | 8.00 (7.00-9.00) |"
  # 1, 2, 3: mean 2, sample sd 1, t(0.975, 2 df) = 4.3027 -> half-width 4.3027 / sqrt(3) = 2.48
  assert lines[5] == "| `three` | 2.00 ± 2.48 | 2.00 ± 0.00 |"
  assert ("Cells: one run: its value; two seeds: mean (the range of the 2 seeds; not an "
          "interval); n = 3 seeds: mean ± half-width of the 95% t-interval of the mean.") in text


def test_paired_differences_and_context_use_by_hand(tmp_path):
  # three seeds of a and b (b - a = 1, 2, 3 at length 256; 0, 0, 3 at 512), two of c
  frame = ppl_table({"a": [(5.0, 6.0), (5.0, 7.0), (5.0, 8.0)],
                     "b": [(6.0, 6.0), (7.0, 7.0), (8.0, 11.0)],
                     "c": [(4.0, 4.5), (5.0, 5.0)]})
  frame.to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet kind=paired baseline=a rows=scheme columns=length "
                  "value=ppl -->\n<!-- end table -->\n"
                  "<!-- table t.parquet kind=context_use rows=scheme -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[1] == "| scheme | 256 (1x) | 512 (2x) |"
  # differences 1, 2, 3: mean 2, half-width 4.3027 / sqrt(3) = 2.48; 0, 0, 3: mean 1,
  # sd sqrt(3), half-width 4.3027 x sqrt(3) / sqrt(3) = 4.30
  assert lines[3] == "| `b` | +2.00 ± 2.48 | +1.00 ± 4.30 |"
  assert lines[4] == "| `c` | -0.50 (n=2, too few) | -1.75 (n=2, too few) |"
  assert "paired by seed" in lines[6] and "n = 3 pairs" in lines[6]
  # ppl(512) / ppl(256) per run, pooled: a 1.2, 1.4, 1.6 -> 1.400 ± 0.497; c 1.125, 1.0
  at = lines.index("| scheme | 512 / 256 |")
  assert lines[at + 2] == "| `a` | 1.400 ± 0.497 |"
  assert lines[at + 4] == "| `c` | 1.062 (1.000-1.125) |"


def test_curve_cells_are_the_logged_validation_losses_by_hand(tmp_path):
  # runs a0, a1 (scheme a, seeds 0 and 1) and b0 log val_loss at steps 150 and 300; b0 stops
  # before step 450, where the a runs log 1.0 and 1.5
  logged = {"a0": {150: 2.0, 300: 1.5, 450: 1.0}, "a1": {150: 3.0, 300: 2.5, 450: 1.5},
            "b0": {150: 4.0, 300: 3.0}}
  for run, losses in logged.items():
    os.makedirs(tmp_path / run)
    with open(tmp_path / run / "metrics.jsonl", "w") as f:
      for step, loss in losses.items():
        f.write(json.dumps({"step": step - 1, "loss": 9.0}) + "\n")  # a training record
        f.write(json.dumps({"step": step, "val_loss": loss}) + "\n")
  frame = ppl_table({"a": [(5.0, 6.0), (5.0, 6.0)], "b": [(5.0, 6.0)]})
  frame.to_parquet(tmp_path / "results.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table . kind=curve rows=scheme steps=150,450 -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[1] == "| scheme | step 150 | step 450 |"
  assert lines[3] == "| `a` | 2.500 (2.000-3.000) | 1.250 (1.000-1.500) |"
  assert lines[4] == "| `b` | 4.000 |  |"
  for spec, message in [(". kind=curve rows=scheme", "needs steps="),
                        (". kind=curve steps=150 value=ppl", "value='ppl'")]:
    page.write_text(f"<!-- table {spec} -->\n<!-- end table -->\n")
    with pytest.raises(ConfigError, match=message):
      findings.render_page(str(page))


def test_filters_and_bad_blocks_are_one_line_errors(tmp_path):
  frame = ppl_table({"rope": [(5.0, 6.0)]})
  frame.to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  for spec, message in [("t.parquet rows=scheme columns=length value=ppl scheme=alibi",
                         "keep no row"),
                        ("t.parquet rows=scheme columns=length value=nll", "value=<a column"),
                        ("t.parquet rows=seeds columns=length value=ppl", "no column 'seeds'"),
                        ("t.parquet kind=histogram", "kind='histogram'"),
                        ("missing.parquet", "no collected table"),
                        ("rows=scheme", "first word must be the table's path")]:
    page.write_text(f"<!-- table {spec} -->\n<!-- end table -->\n")
    with pytest.raises(ConfigError, match=message) as info:
      findings.render_page(str(page))
    assert "\n" not in str(info.value) and str(page) in str(info.value)
  proc = forked.run(["-m", "sweeps.findings", str(page)], cwd=ROOT, timeout=300)
  assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_comma_list_filter_keeps_any_of_its_values_and_cfg_rows_read_short(tmp_path):
  frame = ppl_table({"rope": [(5.0, 6.0)], "alibi": [(4.0, 4.5)]})
  frame["cfg.data.task.position_coupling"] = ["addition" if s == "rope" else None
                                              for s in frame["scheme"]]
  frame = pd.concat([frame, frame[frame["length"] == 256].assign(length=1024, multiplier=4.0,
                                                                  ppl=9.0)])
  frame.to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet rows=scheme,cfg.data.task.position_coupling "
                  "columns=length value=ppl length=256,1024 -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[1] == "| scheme / position_coupling | 256 (1x) | 1,024 (4x) |"
  assert lines[3] == "| `rope` position_coupling=addition | 5.00 | 9.00 |"
  assert lines[4] == "| `alibi` position_coupling=none | 4.00 | 9.00 |"
  # a baseline named by its two row keys, the empty field written none
  page.write_text("<!-- table t.parquet kind=paired baseline=alibi,none "
                  "rows=scheme,cfg.data.task.position_coupling columns=length value=ppl "
                  "length=256,1024 -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[3] == ("| `rope` position_coupling=addition | +1.00 (n=1, too few) "
                      "| +0.00 (n=1, too few) |")
  page.write_text(page.read_text().replace("baseline=alibi,none", "baseline=alibi,addition"))
  with pytest.raises(ConfigError, match="which names 0 rows"):
    findings.render_page(str(page))


def test_task_statistics_by_hand(tmp_path):
  """n = 2 trained sizes; sizes 1..8: exact match 1..n = mean(1.0, 0.8), beyond = mean over
  3..8, token accuracy at n, 2n, 4n."""
  exact = [1.0, 0.8, 0.5, 0.3, 0.1, 0.0, 0.0, 0.0]
  rows = [{"run": "r", "scheme": "alibi", "seed": 0, "suite": "algorithmic", "task": "copy",
           "size": s, "exact_match": e, "token_accuracy": 1 - s / 10, "in_distribution": s <= 2}
          for s, e in zip(range(1, 9), exact)]
  pd.DataFrame(rows).to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet kind=tasks rows=task,scheme -->\n<!-- end table -->\n")
  line = findings.render_page(str(page)).splitlines()[3]
  assert line == "| copy `alibi` | 2 | 0.900 | 0.800 | 0.500 | 0.150 | 0.800 | 0.600 | 0.200 |"
  assert "| beyond: n+1..4n (mean) |" in findings.render_page(str(page))
  # sizes evaluated only to 5 (< 4n = 8): beyond is the mean over 3..5, and the header says so
  pd.DataFrame(rows[:5]).to_parquet(tmp_path / "t.parquet")
  text = findings.render_page(str(page))
  assert "| beyond: n+1..5 (mean) |" in text
  assert text.splitlines()[3] == ("| copy `alibi` | 2 | 0.900 | 0.800 | 0.500 | 0.300 | 0.800 "
                                  "| 0.600 |  |")


def test_grid_statistics_by_hand(tmp_path):
  """A 6 x 6 grid trained on 1..2 digits: cell (a, b) = a / 10 + b / 100."""
  rows = [{"run": "r", "scheme": "abacus", "seed": 0, "suite": "algorithmic", "size": a,
           "in_distribution": a <= 2, "exact_match": a / 10 + a / 100,
           "detail": json.dumps({str(b): a / 10 + b / 100 for b in range(1, 7)})}
          for a in range(1, 7)]
  pd.DataFrame(rows).to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet kind=grid rows=scheme -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[1].startswith("| scheme | training square 1..2 (mean) | (1,1) | (2,2) | (3,3) |")
  cells = [c.strip() for c in lines[3].strip("|").split("|")]
  square = (0.11 + 0.12 + 0.21 + 0.22) / 4
  one_beyond = [a / 10 + b / 100 for a in (1, 2) for b in range(3, 7)]
  one_beyond += [a / 10 + b / 100 for a in range(3, 7) for b in (1, 2)]
  beyond = [a / 10 + b / 100 for a in range(1, 7) for b in range(1, 7) if a > 2 or b > 2]
  assert cells == ["`abacus`", f"{square:.3f}", "0.11", "0.22", "0.33", "0.12", "0.21", "0.15",
                   "0.51", f"{sum(one_beyond) / len(one_beyond):.3f}",
                   f"{sum(beyond) / len(beyond):.3f}"]


def test_ruler_table_averages_suites_and_weights_lengths_by_hand(tmp_path):
  """kind=ruler: per run, each suite's accuracy by length, their average where every suite has a
  score, and RULER's wAvg (inc) / (dec) with weights 1, 2, 3 / 3, 2, 1 over the lengths."""
  rows = []
  for run, needle, multikey in (("r0", (1.0, 0.5, 0.0), (1.0, 1.0, 0.5)),
                                ("r1", (1.0, 1.0, 0.5), (0.5, 0.5, 0.0))):
    for length, a, b in zip((128, 256, 512), needle, multikey):
      rows += [{"run": run, "scheme": "rope", "suite": "needle", "length": length, "accuracy": a},
               {"run": run, "scheme": "rope", "suite": "niah_multikey", "length": length,
                "accuracy": b},
               {"run": run, "scheme": "rope", "suite": "ppl_vs_length", "length": length,
                "accuracy": None}]
  pd.DataFrame(rows).to_parquet(tmp_path / "t.parquet")
  page = tmp_path / "p.md"
  page.write_text("<!-- table t.parquet kind=ruler rows=scheme -->\n<!-- end table -->\n")
  lines = findings.render_page(str(page)).splitlines()
  assert lines[1] == "| scheme | suite | 128 | 256 | 512 | wAvg (inc) | wAvg (dec) |"
  # needle r0: inc (1 + 1 + 0) / 6 = 0.333, dec (3 + 1 + 0) / 6 = 0.667; r1: inc (1 + 2 + 1.5) / 6
  # = 0.75, dec (3 + 2 + 0.5) / 6 = 0.917
  assert lines[3] == ("| `rope` | needle | 1.00 (1.00-1.00) | 0.75 (0.50-1.00) | 0.25 (0.00-0.50) "
                      "| 0.54 (0.33-0.75) | 0.79 (0.67-0.92) |")
  # average of the two suites per run: r0 1.0, 0.75, 0.25; r1 0.75, 0.75, 0.25
  assert lines[5].startswith("| `rope` | average | 0.88 (0.75-1.00) | 0.75 (0.75-0.75) | "
                             "0.25 (0.25-0.25) |")
  assert findings.weighted_averages([1.0, 0.5, 0.0]) == pytest.approx((1 / 3, 2 / 3))
