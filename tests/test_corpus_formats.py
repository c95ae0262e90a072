"""Corpora in the formats they ship in (data/corpus_formats.py): parquet, .jsonl.gz and .jsonl.zst
give the documents, the split and the token counts of the equivalent .jsonl, in python -m
data.prepare and on the text path (data.source="text_files"); a file without the text field, a
corrupt file and an unknown extension are refused with one line (exit 2) before anything is
written.
"""

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import forked
import zstandard

from configs import base
from configs.errors import ConfigError
from configs.validate import check_data_source
from data import corpora, corpus_formats, corpus_sources, prepare
from data import inputs as data_inputs
from data.corpora import CorpusError
from data.tokenizers import ByteTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ("jsonl.gz", "jsonl.zst", "parquet")


def rows():
  """30 known documents (one with an empty text, skipped in every format), of varied lengths
  and characters."""
  out = []
  for i in range(30):
    words = ["Ophelia", "nymph", "“orisons”", "日本語", "🎭", "71432.", "\n", "\t", "—"]
    text = f"document {i}: " + " ".join(words[(i + j) % len(words)] for j in range(8 + 3 * i))
    out.append({"id": f"doc-{i:02d}", "text": "" if i == 7 else text, "year": 1900 + i})
  return out


def jsonl_bytes(records, blank_line=False) -> bytes:
  lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
  if blank_line:
    lines.insert(5, "\n")
  return "".join(lines).encode("utf-8")


def write(folder, fmt, records, name="dump", *, blank_line=False, text_key="text"):
  """Writes `records` as `<folder>/<name>.<fmt>`; returns the path."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f"{name}.{fmt}")
  records = [{text_key if k == "text" else k: v for k, v in r.items()} for r in records]
  if fmt == "parquet":
    table = pa.table({k: [r[k] for r in records] for k in records[0]})
    pq.write_table(table, path, row_group_size=7)  # several row groups
  else:
    data = jsonl_bytes(records, blank_line)
    if fmt == "jsonl.gz":
      data = gzip.compress(data)
    elif fmt == "jsonl.zst":  # two frames: a file made by concatenating zstd files
      half = len(data) // 2
      c = zstandard.ZstdCompressor()
      data = c.compress(data[:half]) + c.compress(data[half:])
    with open(path, "wb") as f:
      f.write(data)
  return path


def prepared_contents(out):
  """{split: (names, lengths, [ids])} of a prepared directory, and its manifest."""
  with open(os.path.join(out, corpora.MANIFEST)) as f:
    m = json.load(f)
  contents = {}
  for split in corpora.SPLITS:
    s = corpora.PreparedSplit(out, split, m["splits"][split], m["record_dtype"], ByteTokenizer())
    contents[split] = (s.names, s.lengths.tolist(), [d.ids.tolist() for d in s])
  return contents, m


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The corpus as plain .jsonl, prepared with the byte tokenizer: (source dir, out dir)."""
  root = tmp_path_factory.mktemp("reference")
  write(str(root / "src"), "jsonl", rows())
  prepare.prepare(str(root / "src" / "*.jsonl"), "byte", str(root / "out"), workers=1,
                  show_progress=False)
  return str(root / "src"), str(root / "out")


# ------------------------------------------------------------------ same documents, split, tokens

@pytest.mark.parametrize("fmt", FORMATS)
def test_prepare_gives_the_jsonl_documents_split_and_tokens(reference, tmp_path, fmt, monkeypatch):
  monkeypatch.setattr(corpus_formats, "PARQUET_BATCH_ROWS", 5)  # batches cross row groups
  src = write(str(tmp_path / "src"), fmt, rows())
  m = prepare.prepare(src, "byte", str(tmp_path / "out"), workers=1, show_progress=False,
                      tmp_dir=str(tmp_path))
  got, _ = prepared_contents(str(tmp_path / "out"))
  want, want_manifest = prepared_contents(reference[1])
  assert got == want  # names (so the split), tokens per document, every token id
  assert m["source_format"] == fmt and m["text_field"] == "text"
  assert m["skipped_empty_documents"] == 1 and m["documents"] == 29
  for split in corpora.SPLITS:
    for key in ("documents", "tokens", "text_bytes"):
      assert m["splits"][split][key] == want_manifest["splits"][split][key]
  assert sorted(os.listdir(tmp_path)) == ["out", "src"]  # the spill under tmp_dir is gone
  # the split is the text path's rule on the same names
  names = [f"dump:{i + 1}" for i, r in enumerate(rows()) if r["text"]]
  parts = corpora.split_names(names, 0.1, 0.1)
  assert {k: [names[i] for i in v] for k, v in parts.items()} == {k: v[0] for k, v in got.items()}


def test_documents_by_id_in_worker_processes(reference, tmp_path):
  """--id_field names documents alike in every format; spawned workers read the spill file."""
  outs = {}
  for fmt in ("jsonl", "parquet", "jsonl.zst"):
    src = write(str(tmp_path / fmt), fmt, rows(), blank_line=True)
    out = str(tmp_path / f"out_{fmt}")
    prepare.prepare(src, "byte", out, id_field="id", workers=2 if fmt == "parquet" else 1,
                    show_progress=False)
    outs[fmt] = prepared_contents(out)[0]
  assert outs["parquet"] == outs["jsonl"] == outs["jsonl.zst"]
  assert outs["parquet"]["train"][0][0].startswith("doc-")


def test_blank_lines_count_in_compressed_json_lines(tmp_path):
  """A blank line numbers the same in .jsonl, .jsonl.gz and .jsonl.zst (names <stem>:<line>)."""
  names = {}
  for fmt in ("jsonl", "jsonl.gz", "jsonl.zst"):
    path = write(str(tmp_path / fmt), fmt, rows(), blank_line=True)
    refs, used, skipped = corpus_formats.list_documents(path, spill_dir=str(tmp_path))
    names[fmt] = [(r.name, r.read()) for r in refs]
    assert used == fmt and skipped == 1
  assert names["jsonl"] == names["jsonl.gz"] == names["jsonl.zst"]
  assert names["jsonl"][5][0] == "dump:7"  # line 6 is blank


def test_sentencepiece_trains_on_the_same_text(reference, tmp_path):
  """The tokenizer is trained on the spilled texts: the same model as from the .jsonl."""
  shas = []
  for fmt in ("jsonl", "parquet"):
    src = write(str(tmp_path / fmt), fmt, rows())
    m = prepare.prepare(src, "sentencepiece:300", str(tmp_path / f"out_{fmt}"), workers=1,
                        show_progress=False)
    shas.append((m["tokenizer"]["sha256"], m["tokens"]))
  assert shas[0] == shas[1]


# ------------------------------------------------------------------ the text path (training)

@pytest.mark.parametrize("fmt", FORMATS)
def test_text_path_reads_the_same_documents(reference, tmp_path, fmt):
  src = write(str(tmp_path / "src"), fmt, rows(), text_key="body")
  docs = corpus_sources.load_documents("text_files", src, text_field="body")
  want = corpus_sources.load_documents("text_files", os.path.join(reference[0], "*.jsonl"))
  assert docs == want and len(docs) == 29
  c = base.get_config()
  c.data.source, c.data.text_glob, c.data.text_field = "text_files", src, "body"
  check_data_source(c)
  splits = data_inputs.load_splits(c)
  prepared, _ = prepared_contents(reference[1])
  for split in corpora.SPLITS:  # the prepared corpus's split, document for document
    assert [d.name for d in splits[split]] == prepared[split][0]
    assert [len(d.data) for d in splits[split]] == prepared[split][1]


def test_config_fields_are_checked():
  c = base.get_config()
  c.data.source, c.data.text_glob = "text_files", "x/*.parquet"
  c.data.text_field = ""
  with pytest.raises(ConfigError, match="data.text_field must name"):
    check_data_source(c)
  c = base.get_config()
  c.data.id_field = "id"  # source is the embedded Shakespeare corpus
  with pytest.raises(ConfigError, match="data.id_field='id' is only read with data.source='text_files'"):
    check_data_source(c)


def test_formats_by_extension():
  assert corpus_formats.file_format("a/b/dump.JSONL.ZST") == "jsonl.zst"
  assert corpus_formats.file_format("x.json.gz") == "jsonl.gz"
  assert corpus_formats.file_format("000_00000.parquet") == "parquet"
  assert corpus_formats.file_format("notes.md") is None
  assert corpus_formats.file_stem("a/dump.jsonl.gz") == "dump"
  assert corpus_formats.file_stem("a/book.txt") == "book"
  assert corpus_formats.file_stem("a/x.tar.gz") == "x.tar"


# ------------------------------------------------------------------ refusals: one line, exit 2

def run_prepare(source, out, *flags):
  return forked.run(["-m", "data.prepare", f"--source={source}", "--tokenizer=byte", f"--out={out}",
                    *flags], cwd=ROOT, timeout=120)


def one_error_line(proc) -> str:
  """The error of a refused run: exit 2, one line `error: ...` (after the cleared progress bar),
  no traceback."""
  assert proc.returncode == 2, proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  errors = [line for line in lines if "error" in line.lower()]
  assert len(errors) == 1 and lines[-1] == errors[0] and errors[0].startswith("error: ")
  assert "Traceback" not in proc.stderr
  return errors[0]


def truncated(path, keep):
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:keep] if keep > 0 else data[:len(data) + keep])
  return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_text_field_is_one_line(tmp_path, fmt):
  src = write(str(tmp_path / "src"), fmt, rows(), text_key="content")
  out = tmp_path / "out"
  error = one_error_line(run_prepare(src, out))
  assert src in error and "'text'" in error and "--text_field" in error
  assert ("its columns: ['id', 'content', 'year']" in error if fmt == "parquet"
          else "its keys: ['content', 'id', 'year']" in error)
  assert not out.exists()


@pytest.mark.parametrize("fmt,keep,why", [
    ("jsonl.gz", 60, "is not a readable gzip JSON-lines file"),
    ("jsonl.zst", -5, "is not a readable zstandard JSON-lines file"),
    ("parquet", 200, "is not a readable parquet file"),
])
def test_corrupt_file_is_one_line(tmp_path, fmt, keep, why):
  src = truncated(write(str(tmp_path / "src"), fmt, rows()), keep)
  out = tmp_path / "out"
  error = one_error_line(run_prepare(src, out))
  assert error.startswith(f"error: --source: {src} {why} (")
  assert not out.exists()


@pytest.mark.parametrize("data,why", [
    (b"not gzip at all", "is not a readable gzip JSON-lines file (Not a gzipped file"),
    (gzip.compress(b'{"text": "a"}\n[1, 2]\n', mtime=0), ":2 has no string field 'text'"),
    (gzip.compress(b'{"text": "a"}\n{"text": \n', mtime=0), ":2 is not a JSON object"),
], ids=["not_gzip", "not_an_object", "bad_json"])
def test_bad_records_are_corpus_errors(tmp_path, data, why):
  (tmp_path / "d.jsonl.gz").write_bytes(data)
  with pytest.raises(CorpusError, match=why.replace("(", r"\(").replace("[", r"\[")):
    prepare.prepare(str(tmp_path / "d.jsonl.gz"), "byte", str(tmp_path / "out"), workers=1,
                    show_progress=False)
  assert not (tmp_path / "out").exists()


def test_zstd_garbage_and_null_parquet_text(tmp_path):
  (tmp_path / "a.jsonl.zst").write_bytes(b"garbage" * 10)
  with pytest.raises(CorpusError, match="a.jsonl.zst is not a readable zstandard JSON-lines file"):
    corpus_formats.list_documents(str(tmp_path / "a.jsonl.zst"), spill_dir=str(tmp_path))
  pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "n.parquet")
  with pytest.raises(CorpusError, match=r"n.parquet row 2: 'text' is null"):
    corpus_sources.load_documents("text_files", str(tmp_path / "n.parquet"))
  pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "i.parquet")
  with pytest.raises(CorpusError, match=r"data.text_glob: .*i.parquet: column 'text' holds int64"):
    corpus_sources.load_documents("text_files", str(tmp_path / "i.parquet"))


def test_unknown_extension_lists_the_supported_ones(tmp_path):
  (tmp_path / "a.txt").write_text("a document")
  (tmp_path / "b.csv").write_text("x,y")
  error = one_error_line(run_prepare(str(tmp_path / "*"), tmp_path / "out"))
  assert "b.csv has an unknown extension; supported: .txt" in error
  assert ".jsonl.gz" in error and ".jsonl.zst" in error and ".parquet" in error
  assert "--source_format=text" in error
  with pytest.raises(CorpusError, match="b.csv has an unknown extension"):
    corpus_sources.load_documents("text_files", str(tmp_path / "*"))
  (tmp_path / "b.csv").unlink()
  write(str(tmp_path), "parquet", rows())
  with pytest.raises(CorpusError, match="matches both text files"):
    corpus_sources.load_documents("text_files", str(tmp_path / "*"))
