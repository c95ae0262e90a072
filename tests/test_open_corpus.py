"""The open-world path end to end: a BPE tokenizer.json built here with `tokenizers` (Llama 3's
digit grouping), the test corpus shipped as parquet and as .jsonl.zst, both prepared with it
(`python -m data.prepare`), a Llama-shaped model (grouped-query attention, QK-norm) trained a few
steps on the prepared shards, then perplexity (bits per byte equal to the UTF-8 bytes of the
scored text, counted here by decoding) and the passkey and niah_multikey suites."""

import glob
import json
import math
import os

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import train
from conftest import tiny_config
from data import corpora, prepare
from data.tokenizers import get_tokenizer
from eval import perplexity
from test_hf_tokenizer import NUMBERS, build, corpus_texts


@pytest.fixture(scope="module")
def shipped(text_corpus, tmp_path_factory):
  """(tokenizer folder, {"parquet" | "zst": corpus file}) of the test corpus's documents."""
  root = tmp_path_factory.mktemp("open")
  texts = corpus_texts(text_corpus)
  folder = build("llama3", texts + [NUMBERS], root / "tok", vocab=1200,
                 config={"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})
  names = [os.path.splitext(os.path.basename(p))[0] for p in sorted(glob.glob(text_corpus))]
  pq.write_table(pa.table({"id": names, "text": texts}), root / "corpus.parquet", row_group_size=2)
  lines = "".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in zip(names, texts))
  (root / "corpus.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
  return folder, {"parquet": str(root / "corpus.parquet"), "zst": str(root / "corpus.jsonl.zst")}


def test_parquet_and_zst_prepare_to_the_same_shards_and_a_gqa_model_trains_and_evaluates(
    shipped, tmp_path):
  folder, files = shipped
  manifests = {fmt: prepare.prepare(path, f"hf:{folder}", str(tmp_path / fmt), workers=1,
                                    show_progress=False, id_field="id")
               for fmt, path in files.items()}
  tokenizer = get_tokenizer(manifests["parquet"]["tokenizer"]["config"])
  splits = {fmt: corpora.load_prepared_splits(str(tmp_path / fmt), tokenizer, 0.1, 0.1)
            for fmt in files}
  assert [d.name for d in splits["parquet"]["validation"]] == [
      d.name for d in splits["zst"]["validation"]]
  assert (splits["parquet"]["train"].lengths == splits["zst"]["train"].lengths).all()

  c = tiny_config("unused", "rope")
  c.data.source, c.data.array_record_dir = "array_record", str(tmp_path / "parquet")
  c.data.tokenizer = manifests["parquet"]["tokenizer"]["config"]
  c.model.vocab_size = tokenizer.vocab_size
  c.model.num_kv_heads, c.model.qk_norm, c.model.mlp_activation = 2, "head", "swiglu"
  c.model.tie_embeddings = False
  c.data.train_len = 64
  c.train.num_steps = 3
  c.eval.length_multipliers = (1.0, 4.0)  # the prompts need more than 64 tokens
  c.eval.max_tokens_per_length = 0  # every window of every held-out document
  c.eval.suites = "ppl_vs_length,passkey,niah_multikey"
  c.eval.passkey.trials = c.eval.niah_multikey.trials = 1
  c.eval.passkey.depths = c.eval.niah_multikey.depths = (0.0, 1.0)
  c.eval.niah_multikey.value_digits, c.eval.niah_multikey.num_keys = 4, 2
  c.eval.niah_multikey.preamble = False
  out = train.train_and_evaluate(c, str(tmp_path / "run"), devices=jax.devices()[:1])

  row = out["ppl_vs_length"]["rows"][0]
  windows = perplexity.evaluation_windows(splits["parquet"][c.eval.split], tokenizer, 64)
  by_decoding = sum(len(tokenizer.decode_bytes([int(t) for t in targets]))
                    for targets in windows["targets"])
  assert row["tokens"] == windows["targets"].size and row["bytes"] == by_decoding > row["tokens"]
  assert row["bits_per_byte"] == pytest.approx(
      row["nll"] * row["tokens"] / row["bytes"] / math.log(2), rel=1e-6)
  for suite in ("passkey", "niah_multikey"):
    result = json.load(open(tmp_path / "run" / "eval" / f"{suite}.json"))
    assert result["rows"] and all(r["prompts"] == 2 for r in result["rows"] if not r.get("skipped"))
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in result["rows"] if not r.get("skipped"))
