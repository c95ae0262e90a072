"""docs/pod_readiness.md's table is the rendering of the committed compile reports
(bench/tpu_compile_reports/*.json, from bench/tpu_compile.py), and the rendering reads a
report's fields as they are."""

import json

from bench import pod_readiness


def test_the_page_table_is_the_rendering_of_the_committed_reports():
  with open(pod_readiness.PAGE) as f:
    text = f.read()
  table = text.split(pod_readiness.BEGIN)[1].split(pod_readiness.END)[0].strip().splitlines()
  rows = pod_readiness.render()
  assert len(rows) > 2, "no committed report in bench/tpu_compile_reports/"
  assert table == rows


def test_a_report_renders_as_one_row(tmp_path):
  gib = 2 ** 30
  report = {"devices": 16, "hbm_per_chip_bytes": 16 * gib, "train": {
      "memory": {"total": 8 * gib, "argument": gib, "temporary": 7 * gib}, "fits": True,
      "compile_s": 12.4, "collectives": {"all-gather": {"count": 5, "bytes": 10},
                                         "all-reduce": {"count": 2, "bytes": 4}},
      "estimate": {"step_s": 0.1234, "mfu": 0.456}}}
  with open(tmp_path / "alibi_350m_xla__v5e_4x4.json", "w") as f:
    json.dump(report, f)
  rows = pod_readiness.render(str(tmp_path))
  assert rows[2] == ("| alibi_350m_xla | v5litepod-16 (v5e:4x4) | 16 | 8.00 (1.00 + 7.00) | 50% | "
                     "yes | 12 | 5 | 2 | 0 | 0.123 | 46% |")
