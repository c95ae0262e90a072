"""Prepared corpora: python -m data.prepare -> ArrayRecord shards -> the grain pipeline and train.py.

A tiny real-text corpus (conftest.text_corpus) is prepared with the byte tokenizer and with a
small SentencePiece vocabulary; the manifest must count what the text path counts, documents
must round-trip, the training stream must equal the text path's (so a run's first losses are
identical), and bad input must fail with one line naming the flag or field.
"""

import hashlib
import json
import os
import pickle

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import corpora, pipeline, prepare
from data.corpora import CorpusError, TokenizedDocument
from data.tokenizers import ByteTokenizer, get_tokenizer
from runs import distributed
from runs import workdir as run_dir
from data import inputs as data_inputs

SP_VOCAB = 400  # small, yet above the 4 special + 256 byte pieces + this corpus's characters


@pytest.fixture(scope="module")
def prepared(text_corpus, tmp_path_factory):
  """{"byte": dir, "sp": dir}: the corpus prepared both ways (in-process, no worker pool)."""
  root = tmp_path_factory.mktemp("prepared")
  out = {"byte": str(root / "byte"), "sp": str(root / "sp")}
  prepare.prepare(text_corpus, "byte", out["byte"], workers=1, show_progress=False)
  prepare.prepare(text_corpus, f"sentencepiece:{SP_VOCAB}", out["sp"], workers=1,
                  show_progress=False)
  return out


def manifest(directory):
  with open(os.path.join(directory, "manifest.json")) as f:
    return json.load(f)


def sp_tokenizer(directory):
  return get_tokenizer(f"sentencepiece:{directory}/tokenizer.model")


# ------------------------------------------------------------------ the manifest and the shards

@pytest.mark.parametrize("kind", ["byte", "sp"])
def test_manifest_counts_match_the_text_split(prepared, text_corpus, kind):
  m = manifest(prepared[kind])
  tok = ByteTokenizer() if kind == "byte" else sp_tokenizer(prepared[kind])
  text = corpora.split_documents(corpora.read_text_files(text_corpus), 0.1, 0.1)
  assert m["format"] == corpora.PREPARED_FORMAT and m["vocab_size"] == tok.vocab_size
  assert m["record_dtype"] == "<u2" and m["split"]["validation_fraction"] == 0.1
  for split, docs in text.items():
    info = m["splits"][split]
    tokens = [len(tok.encode(d.data)) for d in docs]
    assert info["documents"] == len(docs) and info["tokens"] == sum(tokens)
    assert info["text_bytes"] == sum(len(d.data) for d in docs)
    assert sum(s["documents"] for s in info["shards"]) == len(docs)
    assert np.load(os.path.join(prepared[kind], info["lengths"])).tolist() == tokens
    names = [json.loads(line) for line in open(os.path.join(prepared[kind], info["names"]))]
    assert names == [d.name for d in docs]
  assert m["documents"] == sum(len(v) for v in text.values())
  leftovers = [f for f in os.listdir(prepared[kind]) if f.endswith(".tmp")]
  assert not leftovers
  if kind == "sp":
    model = open(os.path.join(prepared[kind], "tokenizer.model"), "rb").read()
    assert m["tokenizer"]["sha256"] == hashlib.sha256(model).hexdigest()
    assert m["tokenizer"]["spec"] == f"sentencepiece:{SP_VOCAB}"
    assert m["tokenizer"]["config"] == f"sentencepiece:{os.path.abspath(prepared[kind])}/tokenizer.model"
    assert m["splits"]["train"]["tokens"] < m["splits"]["train"]["text_bytes"]  # it compresses
  else:
    assert m["tokenizer"]["sha256"] is None and m["tokenizer"]["config"] == "byte"


def test_parallel_workers_write_the_same_records(text_corpus, prepared, tmp_path):
  out = str(tmp_path / "parallel")
  prepare.prepare(text_corpus, "byte", out, workers=2, shard_mb=0.05, show_progress=False)
  a, b = manifest(out), manifest(prepared["byte"])
  assert len(a["splits"]["train"]["shards"]) > 1  # shards roll over at shard_mb
  tok = ByteTokenizer()
  for split in corpora.SPLITS:
    assert a["splits"][split]["tokens"] == b["splits"][split]["tokens"]
    one = corpora.PreparedSplit(out, split, a["splits"][split], "<u2", tok)
    two = corpora.PreparedSplit(prepared["byte"], split, b["splits"][split], "<u2", tok)
    for x, y in zip(one, two):
      assert x.name == y.name and np.array_equal(x.ids, y.ids)


# ------------------------------------------------------------------ round trips

@pytest.mark.parametrize("text", ["", "hello  world", "  lead and trail  \n", "a\r\n\tb\n\n",
                                  "x ▁ y ▁▁z", "Ophelia — “nymph”, 日本語 🎭", "pass key 71432."])
def test_sentencepiece_round_trip(prepared, text):
  tok = sp_tokenizer(prepared["sp"])
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and (ids < tok.vocab_size).all()
  assert tok.decode(ids) == text and tok.decode_bytes(ids) == text.encode("utf-8")
  assert tok.encode(text.encode("utf-8")).tolist() == ids.tolist()
  specials = [tok.bos_id, *ids.tolist(), tok.eos_id, tok.pad_id]
  assert tok.decode(specials) == text  # BOS / EOS / PAD are dropped


def test_sentencepiece_tokenizer_interface(prepared):
  tok = sp_tokenizer(prepared["sp"])
  assert tok.vocab_size == SP_VOCAB and (tok.unk_id, tok.bos_id, tok.eos_id, tok.pad_id) == (0, 1, 2, 3)
  assert tok == pickle.loads(pickle.dumps(tok)) and tok != ByteTokenizer()
  assert tok.decode_bytes(tok.encode("日本")[:2])  # byte pieces decode to their bytes
  with pytest.raises(ValueError, match="token ids"):
    tok.decode([SP_VOCAB])
  with pytest.raises(ValueError, match="UTF-8"):
    tok.encode(b"\xff\xfe")


def test_held_out_documents_decode_to_the_text(prepared, text_corpus):
  text = corpora.split_documents(corpora.read_text_files(text_corpus), 0.1, 0.1)
  for kind in ("byte", "sp"):
    tok = ByteTokenizer() if kind == "byte" else sp_tokenizer(prepared[kind])
    splits = corpora.load_prepared_splits(prepared[kind], tok, 0.1, 0.1)
    for split in ("validation", "test"):
      got = splits[split]
      assert all(isinstance(d, TokenizedDocument) for d in got)
      assert [d.name for d in got] == [d.name for d in text[split]]
      assert [d.data for d in got] == [d.data for d in text[split]]
    assert splits["train"][0].data == text["train"][0].data
    # The evaluation windows of tokenized documents are those of the text.
    held = pipeline.document_windows(splits["validation"], tok, 16, 64)
    want = pipeline.document_windows(text["validation"], tok, 16, 64)
    for k in held:
      np.testing.assert_array_equal(held[k], want[k])


# ------------------------------------------------------------------ the training stream

def test_prepared_windows_and_batches_equal_the_text_path(prepared, text_corpus):
  tok = ByteTokenizer()
  train_split = corpora.load_prepared_splits(prepared["byte"], tok, 0.1, 0.1)["train"]
  text_train = corpora.split_documents(corpora.read_text_files(text_corpus), 0.1, 0.1)["train"]
  lazy, eager = (pipeline.packed_windows(d, tok, 32) for d in (train_split, text_train))
  assert len(lazy) == len(eager)
  for i in (0, 1, len(lazy) // 2, len(lazy) - 1):
    for k, v in eager[i].items():
      np.testing.assert_array_equal(lazy[i][k], v)
  for p in range(2):  # each of two hosts reads the same windows either way
    kw = dict(train_len=32, batch_size=4, seed=5, process_index=p, process_count=2)
    a = iter(pipeline.train_dataset(train_split, tok, **kw))
    b = iter(pipeline.train_dataset(text_train, tok, **kw))
    for _ in range(3):
      x, y = next(a), next(b)
      for k in y:
        np.testing.assert_array_equal(x[k], y[k])


def test_train_py_reads_the_same_first_batches_from_array_record(prepared, text_corpus):
  """data_inputs.load_splits + pipeline.train_dataset, called as train.py calls them: the same
  documents give the same batches from the text files and from their byte-level shards."""
  text = tiny_config(text_corpus)
  arec = tiny_config(text_corpus)
  arec.data.source, arec.data.text_glob = "array_record", ""
  arec.data.array_record_dir = prepared["byte"]
  tok = get_tokenizer("byte")
  text_docs, arec_docs = data_inputs.load_splits(text), data_inputs.load_splits(arec)
  assert isinstance(arec_docs["train"], corpora.PreparedSplit)
  assert [d.name for d in arec_docs["validation"]] == [d.name for d in text_docs["validation"]]
  kw = dict(train_len=text.data.train_len, batch_size=text.data.batch_size,
            seed=text.data.shuffle_seed, process_index=0, process_count=1)
  a = iter(pipeline.train_dataset(arec_docs["train"], tok, **kw))
  b = iter(pipeline.train_dataset(text_docs["train"], tok, **kw))
  for _ in range(2):
    x, y = next(a), next(b)
    for k in y:
      np.testing.assert_array_equal(x[k], y[k])


def test_sentencepiece_run_trains_and_evaluates(prepared, text_corpus, tmp_path, capsys):
  """A few steps from SentencePiece shards, then validation and perplexity on TokenizedDocuments;
  losses are reported per token, not per byte."""
  c = tiny_config(text_corpus)
  c.data.source, c.data.text_glob = "array_record", ""
  c.data.array_record_dir = prepared["sp"]
  c.data.tokenizer = f"sentencepiece:{prepared['sp']}/tokenizer.model"
  c.model.vocab_size = SP_VOCAB
  c.train.num_steps = 3
  c.eval.length_multipliers = (1.0,)
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  with open(tmp_path / "metrics.jsonl") as f:
    steps = [r["step"] for r in map(json.loads, f) if "loss" in r]
  assert steps == [1, 2, 3] and np.isfinite(out["val_loss"])
  assert out["ppl_vs_length"]["rows"][0]["tokens"] > 0
  resolved = json.load(open(tmp_path / "config.json"))
  assert "train" not in resolved["split_documents"] and resolved["split_documents"]["validation"]
  assert out["ppl_vs_length"]["unit"] == "nats per token"
  assert "nats/token" in capsys.readouterr().out


# ------------------------------------------------------------------ JSON lines

def test_jsonl_source(tmp_path):
  src = tmp_path / "dump.jsonl"
  rows = [{"id": f"doc{i}", "text": f"document {i}: " + "lorem ipsum " * (5 + i)} for i in range(12)]
  rows.insert(3, {"id": "blank", "text": ""})
  src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
  m = prepare.prepare(str(src), "byte", str(tmp_path / "out"), id_field="id", workers=1,
                      show_progress=False)
  assert m["source_format"] == "jsonl" and m["skipped_empty_documents"] == 1
  assert m["documents"] == 12
  splits = corpora.load_prepared_splits(str(tmp_path / "out"), ByteTokenizer(), 0.1, 0.1)
  by_name = {d.name: d.data for s in splits.values() for d in s}
  assert by_name == {r["id"]: r["text"].encode() for r in rows if r["text"]}
  m = prepare.prepare(str(src), "byte", str(tmp_path / "lines"), workers=1, show_progress=False)
  assert corpora.PreparedSplit(str(tmp_path / "lines"), "train", m["splits"]["train"], "<u2",
                               ByteTokenizer()).names[0].startswith("dump:")
  src.write_text(json.dumps({"id": "a", "body": "x"}) + "\n")
  with pytest.raises(CorpusError, match="--text_field"):
    prepare.prepare(str(src), "byte", str(tmp_path / "bad"), workers=1, show_progress=False)
  src.write_text(json.dumps({"id": "a", "text": "x"}) + "\n" + json.dumps({"id": "a", "text": "y"}) + "\n")
  with pytest.raises(CorpusError, match="unique"):
    prepare.prepare(str(src), "byte", str(tmp_path / "bad"), id_field="id", workers=1,
                    show_progress=False)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("kwargs,match", [
    (dict(tokenizer="bpe"), "--tokenizer='bpe' is not supported; choose 'byte' or 'sentencepiece:VOCAB_SIZE'"),
    (dict(tokenizer="sentencepiece:lots"), "VOCAB_SIZE must be an integer"),
    (dict(tokenizer="sentencepiece:100"), "choose VOCAB_SIZE >= 261"),
    (dict(tokenizer="sentencepiece:300"), r"too small for this corpus: it needs at least \d+ pieces"),
    (dict(source="/nonexistent/*.txt"), "--source='/nonexistent/\\*.txt' matches no file"),
    (dict(source_format="csv"), "--source_format='csv' is not supported"),
    (dict(validation_fraction=1.5), "--validation_fraction must lie in"),
    (dict(sp_model_type="wordpiece", tokenizer="sentencepiece:400"), "--sp_model_type='wordpiece'"),
    (dict(id_field="id"), "--id_field applies to JSON-lines"),
    (dict(out="gs://bucket/corpus"), "--out='gs://bucket/corpus': write to a local directory"),
])
def test_bad_prepare_input_names_the_flag(text_corpus, tmp_path, kwargs, match):
  args = dict(source=text_corpus, tokenizer="byte", out=str(tmp_path / "out"))
  args.update(kwargs)
  with pytest.raises(ConfigError, match=match):
    prepare.prepare(args.pop("source"), args.pop("tokenizer"), args.pop("out"), workers=1,
                    show_progress=False, **args)


def test_out_dir_must_be_a_writable_new_directory(text_corpus, prepared, tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(ConfigError, match="is a file"):
    prepare.prepare(text_corpus, "byte", str(tmp_path / "file"), workers=1, show_progress=False)
  with pytest.raises(ConfigError, match="cannot be created"):
    prepare.prepare(text_corpus, "byte", str(tmp_path / "file" / "sub"), workers=1,
                    show_progress=False)
  with pytest.raises(ConfigError, match="--overwrite"):
    prepare.prepare(text_corpus, "byte", prepared["byte"], workers=1, show_progress=False)


def test_bad_config_for_a_prepared_corpus(prepared, text_corpus, tmp_path):
  byte, sp = ByteTokenizer(), sp_tokenizer(prepared["sp"])
  cases = [
      (lambda: corpora.load_prepared_splits("", byte, 0.1, 0.1), "data.array_record_dir must be set"),
      (lambda: corpora.load_prepared_splits(str(tmp_path), byte, 0.1, 0.1), "has no manifest.json"),
      (lambda: corpora.load_prepared_splits(prepared["sp"], byte, 0.1, 0.1),
       f"set data.tokenizer='sentencepiece:{prepared['sp']}/tokenizer.model'"),
      (lambda: corpora.load_prepared_splits(prepared["byte"], sp, 0.1, 0.1), "set data.tokenizer='byte'"),
      (lambda: corpora.load_prepared_splits(prepared["byte"], byte, 0.2, 0.1),
       "data.validation_fraction=0.2 differs"),
      (lambda: get_tokenizer("sentencepiece:/nonexistent.model"), "data.tokenizer='sentencepiece:/nonexistent.model'"),
      (lambda: get_tokenizer("sentencepiece:"), "needs the path of a .model file"),
  ]
  for fn, match in cases:
    with pytest.raises(ConfigError, match=match):
      fn()

  c = tiny_config(text_corpus)
  c.data.source, c.data.array_record_dir = "array_record", prepared["sp"]
  c.data.tokenizer = f"sentencepiece:{prepared['sp']}/tokenizer.model"
  with pytest.raises(ConfigError, match=f"model.vocab_size=259 is smaller than .* {SP_VOCAB} ids"):
    validate(c, 1)
  c.model.vocab_size = SP_VOCAB
  validate(c, 1)
  c.data.array_record_dir = "gs://bucket/corpus"
  with pytest.raises(ConfigError, match="gcsfuse"):
    validate(c, 1)
  c.data.array_record_dir = prepared["sp"]
  c.data.passkey.fraction = 0.5
  with pytest.raises(ConfigError, match="data.passkey.fraction"):
    validate(c, 1)
  c = tiny_config(text_corpus)
  c.data.array_record_dir = prepared["byte"]
  with pytest.raises(ConfigError, match="only read with data.source='array_record'"):
    validate(c, 1)


# ------------------------------------------------------------------ multi-host start-up

def test_distributed_launch_detection_and_workdir():
  slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0"}
  assert distributed.distributed_launcher({**slurm, "SLURM_NTASKS": "2"}) == "slurm"
  assert distributed.distributed_launcher({**slurm, "SLURM_NTASKS": "1"}) is None
  assert distributed.distributed_launcher({"OMPI_COMM_WORLD_SIZE": "4",
                                     "OMPI_MCA_orte_hnp_uri": "1.2.3.4:5"}) == "mpi"
  assert distributed.distributed_launcher({}) is None  # this machine: no TPU chips
  distributed.initialize_distributed("auto")  # a single process: nothing to initialize
  with pytest.raises(ConfigError, match="not a URL"):
    run_dir.check_workdir("gs://bucket/runs/alibi")  # train.py writes with local file I/O
  for args in (dict(coordinator_address="10.0.0.1:1234"),
               dict(coordinator_address="10.0.0.1:1234", num_processes=2, process_id=2),
               dict(num_processes=2, process_id=0)):
    with pytest.raises(ConfigError, match="--coordinator_address"):
      distributed.initialize_distributed("auto", **args)
