"""Perplexity protocols (Press et al., arXiv 2108.12409, Sec. 4): sliding windows score every
token of the document prefixes once, with the most context; stride = length is non-overlapping;
the loss by position (same pass) adds up to the perplexity. A random-init tiny model suffices."""

import glob
import json
import os
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import pipeline
from data.corpora import Document
from data.tokenizers import get_tokenizer
from eval import perplexity
from runs import workdir as run_dir
from models import spec as specs
from eval import suites
from eval.suites import Context

TOK = get_tokenizer("byte")
TEXT = open(json.__file__, "rb").read()  # real text, no network
BATCH_TOKENS = 64


def ids_of(doc):
  return np.concatenate([[TOK.bos_id], TOK.encode(doc.data)]).astype(np.int32)


def docs_of(*sizes, offset=0):
  out = []
  for i, n in enumerate(sizes):
    out.append(Document(f"d{i}", TEXT[offset:offset + n]))
    offset += n
  return out


def sliding_scored(num_targets, length, stride, per_doc=None):
  """Targets the sliding protocol scores in one document (the docstring's formula)."""
  if num_targets < length:
    return 0
  n = (num_targets - length) // stride + 1
  if per_doc is not None:
    n = min(n, 1 + max(0, -(-(per_doc - length) // stride)))
  return length + (n - 1) * stride


@pytest.fixture(scope="module")
def model(text_corpus):
  c = tiny_config(text_corpus)
  c.model.init_std = 0.3  # a random model whose predictions clearly depend on the context
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)

  @jax.jit
  def last_nll(params, ids):  # ids: int32 [1, n + 1]; NLL of the last token given the rest
    m = nnx.merge(spec.graphdef, params)
    inputs = ids[:, :-1]
    logits = m(inputs, jnp.arange(inputs.shape[1])[None], jnp.ones_like(inputs))[0, -1]
    return jax.nn.logsumexp(logits) - logits[ids[0, -1]]

  return types.SimpleNamespace(config=c, mesh=mesh, spec=spec, params=params, last_nll=last_nll,
                               nll_fn=perplexity.make_nll_fn(spec.graphdef, mesh))


def ppl(model, docs, lengths, budget=0, **kw):
  return perplexity.ppl_vs_length(model.nll_fn, model.params, docs, TOK, lengths,
                                  max_tokens_per_length=budget, batch_tokens=BATCH_TOKENS,
                                  mesh=model.mesh, **kw)


def test_sliding_windows_score_each_target_once_in_order():
  docs = docs_of(37, 10, 5, 23)
  for length in (1, 4, 10):
    for stride in range(1, length + 1):
      for per_doc in (None, 7):
        w = pipeline.sliding_document_windows(docs, TOK, length, stride, per_doc)
        assert w["weights"].dtype == np.float32 and w["inputs"].dtype == np.int32
        assert (w["positions"] == np.arange(length)).all() and (w["segment_ids"] == 1).all()
        row = 0
        for doc in docs:
          ids = ids_of(doc)
          expected = sliding_scored(len(ids) - 1, length, stride, per_doc)
          n = 0 if not expected else (expected - length) // stride + 1
          scored = []
          for r in range(row, row + n):
            np.testing.assert_array_equal(w["inputs"][r], ids[(r - row) * stride:][:length])
            np.testing.assert_array_equal(w["targets"][r], ids[(r - row) * stride + 1:][:length])
            cols = np.flatnonzero(w["weights"][r])
            # first window: every target; later ones: their last `stride` (most context)
            assert cols.tolist() == list(range(0 if r == row else length - stride, length))
            scored.extend(w["targets"][r, cols])
          # every target of the document prefix once, in order, none skipped
          assert scored == ids[1:1 + expected].tolist()
          row += n
        assert row == len(w["inputs"])
  # stride == length is the non-overlapping windows, all weights 1
  for per_doc in (None, 9):
    nonov = pipeline.document_windows(docs, TOK, 4, per_doc)
    slid = pipeline.sliding_document_windows(docs, TOK, 4, 4, per_doc)
    for key in ("inputs", "targets", "positions", "segment_ids"):
      np.testing.assert_array_equal(slid[key], nonov[key])
    assert (slid["weights"] == 1).all()
  assert pipeline.sliding_document_windows(docs, TOK, 64, 3)["weights"].shape == (0, 64)
  for bad in (0, 5):
    with pytest.raises(ValueError, match="stride"):
      pipeline.sliding_document_windows(docs, TOK, 4, bad)


def test_sliding_total_nll_matches_a_per_token_reference(model):
  """Every target scored once, from the full prefix (t <= L) or the window the protocol gives."""
  doc = Document("d", TEXT[300:320])
  ids = ids_of(doc)
  length = 8
  num_targets = len(ids) - 1

  def reference(last, context_start):
    return sum(float(model.last_nll(model.params, ids[None, context_start(t):t + 1]))
               for t in range(1, last + 1))

  for stride in (1, 3):
    scores = perplexity.score_windows_by_position(
        model.nll_fn, model.params,
        perplexity.evaluation_windows([doc], TOK, length, protocol="sliding", stride=stride),
        batch_size=4, mesh=model.mesh)
    last = sliding_scored(num_targets, length, stride)
    assert scores.tokens == last
    ref = reference(last, lambda t: 0 if t <= length else -(-(t - length) // stride) * stride)
    assert scores.nll_sum == pytest.approx(ref, rel=1e-5, abs=1e-5)
    if stride == 1:
      assert last == num_targets  # S = 1: the whole document
  # non-overlapping: the context restarts at each window; the difference shows context matters
  nonov = perplexity.score_windows_by_position(
      model.nll_fn, model.params, perplexity.evaluation_windows([doc], TOK, length),
      batch_size=4, mesh=model.mesh)
  last = num_targets // length * length
  ref = reference(last, lambda t: (t - 1) // length * length)
  assert nonov.tokens == last and nonov.nll_sum == pytest.approx(ref, rel=1e-5, abs=1e-5)
  # the same targets with S = 1 contexts: the model's predictions depend on the context, so the
  # reference comparison above has power
  more_context = reference(last, lambda t: max(0, t - length))
  assert abs(ref - more_context) > 1e-2 * abs(ref)


def test_short_document_protocols_agree_exactly(model):
  docs = docs_of(12)  # 12 targets after BOS
  nonov = ppl(model, docs, [12, 16], position_bins=0)
  for stride in (0, 1, 5):
    slid = ppl(model, docs, [12, 16], protocol="sliding", stride=stride, position_bins=0)
    for a, b in zip(slid, nonov):
      assert {k: v for k, v in a.items() if k != "stride"} == \
             {k: v for k, v in b.items() if k != "stride"}
  assert nonov[0]["tokens"] == 12 and nonov[0]["windows"] == 1 and nonov[0]["documents"] == 1
  assert nonov[1]["tokens"] == 0 and nonov[1]["nll"] is None  # longer than the document


def test_stride_equal_to_length_is_non_overlapping_and_budget_counts(model):
  docs = docs_of(30, 75, 6, 52, 90)
  budget = 100  # 20 targets per document
  for length in (8, 16, 32):
    slid = ppl(model, docs, [length], budget, protocol="sliding", stride=length, position_bins=4)
    nonov = ppl(model, docs, [length], budget, position_bins=4)
    assert slid == nonov
    half = ppl(model, docs, [length], budget, protocol="sliding")[0]
    assert half["stride"] == length // 2
    assert half["tokens"] == sum(sliding_scored(len(d.data), length, length // 2, 20) for d in docs)
    assert half["documents"] == sum(len(d.data) >= length for d in docs)
  everything = ppl(model, docs, [8], 0, protocol="sliding", stride=3)[0]
  assert everything["tokens"] == sum(sliding_scored(len(d.data), 8, 3) for d in docs)


def test_loss_by_position_adds_up_to_the_perplexity(model):
  docs = docs_of(40, 61, 33)
  length, stride = 16, 3
  for protocol in ("sliding", "non_overlapping"):
    for bins in (0, 5):
      row = ppl(model, docs, [length], protocol=protocol, stride=stride, position_bins=bins)[0]
      parts = row["loss_by_position"]
      assert [b["start"] for b in parts][0] == 0 and parts[-1]["end"] == length
      assert all(a["end"] == b["start"] for a, b in zip(parts, parts[1:]))
      assert len(parts) == (length if bins == 0 else bins)
      assert sum(b["tokens"] for b in parts) == row["tokens"]
      mean = sum(b["nll"] * b["tokens"] for b in parts) / row["tokens"]
      assert mean == pytest.approx(row["nll"], rel=1e-12)
      if bins == 0:
        counts = [b["tokens"] for b in parts]
        if protocol == "sliding":  # early positions only in the first window of each document
          assert counts == [row["documents"]] * (length - stride) + [row["windows"]] * stride
        else:
          assert counts == [row["windows"]] * length
  edges = perplexity.position_bin_edges(2048, 32)
  assert edges[0] == 0 and edges[1] == 1 and edges[-1] == 2048 and len(edges) <= 33
  assert (np.diff(edges) > 0).all()
  assert perplexity.position_bin_edges(1, 32).tolist() == [0, 1]
  assert perplexity.position_bin_edges(8, 1).tolist() == [0, 8]


def test_evaluate_ppl_writes_loss_by_position(model, text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.train.write_plots = True
  c.model.init_std = 0.3
  c.eval.protocol, c.eval.stride, c.eval.position_bins = "sliding", 4, 6
  c.eval.length_multipliers = (0.5, 1.0)
  c.eval.max_tokens_per_length = 128
  c.eval.batch_tokens = BATCH_TOKENS
  validate(c, 1)
  docs = {"train": [], "validation": docs_of(50, 70, 20, 90), "test": []}
  result = suites.REGISTRY["ppl_vs_length"].run(Context(
      c, str(tmp_path), model.spec, model.mesh, model.params, 7, docs, TOK))["ppl_vs_length_sliding_s4"]
  on_disk = json.load(open(tmp_path / "eval" / "ppl_vs_length_sliding_s4.json"))  # protocol's own
  assert on_disk == json.loads(json.dumps(result))
  positions = json.load(open(tmp_path / "eval" / "loss_by_position_sliding_s4.json"))
  for r in (on_disk, positions):
    assert (r["protocol"], r["stride"], r["step"], r["documents"]) == ("sliding", 4, 7, 4)
    assert r["config_hash"] == run_dir.config_hash(c)
    assert r["tokens_scored"] == sum(row["tokens"] for row in on_disk["rows"]) > 0
  assert [r["length"] for r in on_disk["rows"]] == [16, 32]
  assert all("loss_by_position" not in r for r in on_disk["rows"])
  for row, pos in zip(on_disk["rows"], positions["rows"]):
    assert row["stride"] == pos["stride"] == 4 and row["tokens"] > 0
    assert sum(b["tokens"] for b in pos["bins"]) == row["tokens"]
    assert math.isclose(sum(b["nll"] * b["tokens"] for b in pos["bins"]) / row["tokens"],
                        row["nll"], rel_tol=1e-12)
  for name in ("ppl_vs_length_sliding_s4.png", "loss_by_position_sliding_s4.png"):
    assert (tmp_path / "eval" / name).stat().st_size > 0


@pytest.mark.parametrize("field,value", [
    ("protocol", "strided"), ("protocol", "nonoverlapping"), ("stride", -1), ("stride", 1.5),
    ("stride", True), ("stride", 17), ("position_bins", -2)])
def test_bad_protocol_and_stride_name_the_field(text_corpus, field, value):
  c = tiny_config(text_corpus)  # eval lengths 16, 32, 64
  c.eval.protocol = "sliding"
  c.eval.stride = 16
  validate(c, 1)  # a stride equal to the shortest length is fine
  with c.eval.ignore_type():
    setattr(c.eval, field, value)
  with pytest.raises(ConfigError, match=f"eval.{field}"):
    validate(c, 1)


def test_library_refuses_bad_protocol_and_stride(model):
  docs = docs_of(40)
  with pytest.raises(ConfigError, match="eval.protocol"):
    ppl(model, docs, [8], protocol="strided")
  for bad in (-1, 9):
    with pytest.raises(ConfigError, match="eval.stride"):
      ppl(model, docs, [8], protocol="sliding", stride=bad)
  assert perplexity.resolve_stride(1, "sliding", 0) == 1
  assert perplexity.resolve_stride(9, "non_overlapping", 3) == 9


def test_result_files_get_the_umask_permissions_and_no_temporary_is_left(tmp_path):
  from runs.files import atomic_write, write_json
  old = os.umask(0o022)
  try:
    write_json(str(tmp_path / "r.json"), {"a": 1})
  finally:
    os.umask(old)
  assert (os.stat(tmp_path / "r.json").st_mode & 0o777) == 0o644
  assert json.load(open(tmp_path / "r.json")) == {"a": 1}

  def fail(tmp):
    with open(tmp, "w") as f:
      f.write("half")
    raise KeyboardInterrupt  # a kill mid-write keeps the old file
  with pytest.raises(KeyboardInterrupt):
    atomic_write(str(tmp_path / "r.json"), fail)
  assert json.load(open(tmp_path / "r.json")) == {"a": 1}
  assert os.listdir(tmp_path) == ["r.json"]


def test_bits_per_byte_divide_by_the_bytes_of_the_scored_text_under_sentencepiece(
    text_corpus, tmp_path):
  """Under SentencePiece the NLL is per token; bits per byte are (nats per token x tokens /
  bytes of the scored text) / ln 2 (one token is several bytes), for ppl_vs_length rows and
  val_bits_per_byte alike; with the byte tokenizer they stay NLL / ln 2."""
  from data import prepare
  from eval.suites import perplexity as perplexity_suite
  texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(text_corpus))]
  model_path = tmp_path / "tiny.model"
  model_path.write_bytes(prepare.train_sentencepiece(iter(texts), 1000))
  sp = get_tokenizer(f"sentencepiece:{model_path}")
  docs = [Document(f"d{i}", t.encode()) for i, t in enumerate(texts[:3])]
  c = tiny_config(text_corpus)
  c.model.vocab_size = sp.vocab_size
  c.model.init_std = 0.3
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  length, stride, budget = 32, 8, 96

  def text_bytes(tokenizer, scored):  # the scored prefix of each document, decoded
    return sum(len(tokenizer.decode_bytes(tokenizer.encode(d.data)[:scored(d, tokenizer)]))
               for d in docs)

  for protocol, scored in (
      ("non_overlapping", lambda d, t: min(len(t.encode(d.data)) // length,
                                           -(-budget // length)) * length),
      ("sliding", lambda d, t: sliding_scored(len(t.encode(d.data)), length, stride, budget))):
    for tokenizer in (sp, TOK):  # byte ids (< 259) are ids of the 1000-id model too
      [row] = perplexity.ppl_vs_length(nll_fn, params, docs, tokenizer, [length],
                                       max_tokens_per_length=budget * len(docs),
                                       batch_tokens=BATCH_TOKENS, mesh=mesh, protocol=protocol,
                                       stride=stride)
      num_bytes = text_bytes(tokenizer, scored)
      assert row["tokens"] == sum(scored(d, tokenizer) for d in docs)
      assert row["bytes"] == num_bytes
      assert row["bits_per_byte"] == pytest.approx(
          row["nll"] * row["tokens"] / num_bytes / math.log(2), rel=1e-6)
      if tokenizer is TOK:
        assert num_bytes == row["tokens"] and row["bits_per_byte"] == row["nll"] / math.log(2)
      else:  # 2.23 bytes per token: NLL / ln 2 (bits per token) would read 2.23x too high
        assert 2.0 < num_bytes / row["tokens"] < 4.0
        assert row["bits_per_byte"] < 0.5 * row["nll"] / math.log(2)
        line = perplexity_suite.describe_bits({"unit": "nats per token"}, row)
        assert line.startswith(f"{row['bits_per_byte']:.4f} bits/byte ({row['tokens']} tokens, "
                               f"{num_bytes} bytes: ")

  # Validation (metrics.jsonl's val_bits_per_byte): the same conversion on its windows.
  windows = pipeline.document_windows(docs, sp, length, 64)
  record = perplexity.score_validation(nll_fn, params, {"val_loss": windows},
                                       batch_tokens=BATCH_TOKENS, mesh=mesh, tokenizer=sp)
  tokens = windows["targets"].size
  num_bytes = sum(len(sp.decode_bytes(row)) for row in windows["targets"])
  assert num_bytes == perplexity.scored_bytes(windows, sp) and num_bytes > 2 * tokens
  assert record["val_bits_per_byte"] == pytest.approx(
      record["val_loss"] * tokens / num_bytes / math.log(2), rel=1e-6)

  # Results written before rows counted bytes: a SentencePiece row's NLL / ln 2 was bits per
  # token, so the collected table leaves bits_per_byte empty; byte-level rows keep theirs.
  old = {"length": 32, "nll": 2.0, "bits_per_byte": 2.0 / math.log(2), "tokens": 10}
  assert perplexity_suite.bits_per_byte({"unit": "nats per token"}, old) is None
  assert perplexity_suite.bits_per_byte({"unit": "nats per byte"}, old) == 2.0 / math.log(2)
