"""Passkey and needle retrieval: exact-length prompts, depths, seeds, scoring, training documents
and the grid's JSON from a tiny model (data/passkey.py, eval/needle.py)."""

import json
import os
import re

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.validate import ConfigError
from data import passkey, passkey_training, pipeline
from data.corpora import read_text_files
from data.tokenizers import ByteTokenizer
from eval import needle
from runs import workdir as run_dir
from data import inputs as data_inputs
from models import spec as specs
from eval import suites
from eval.suites import Context

TOK = ByteTokenizer()


def text(ids) -> str:
  return TOK.decode(ids)


# ---------------------------------------------------------------------------- passkey prompts


@pytest.mark.parametrize("preamble", [False, True])
def test_passkey_prompt_has_exact_length_and_the_needle_at_the_recorded_depth(preamble):
  builder = passkey.PasskeyPrompts(TOK, preamble=preamble, key_digits=5)
  head = 1 + (len(passkey.PASSKEY_PREAMBLE) + 1 if preamble else 0)
  filler = " ".join([" ".join(passkey.PASSKEY_FILLER)] * 200)
  for length in (builder.min_length, builder.min_length + 1, 256, 300, 1000, 2048):
    fixed = length - builder.min_length
    sentence_ends = np.array([0] + [m.end() for m in re.finditer(r"\.", filler[:fixed])])
    for depth in (0.0, 0.1, 0.37, 0.5, 0.9, 1.0):
      p = builder.cell(length, depth, trial=3, seed=11)
      assert p.tokens.dtype == np.int32 and p.tokens.shape == (length,)
      assert p.tokens[0] == TOK.bos_id and (p.tokens[1:] < 256).all()
      prompt = text(p.tokens)
      needle_text = passkey.PASSKEY_NEEDLE.format(key=p.answer)
      assert text(p.tokens[p.needle_start:p.needle_end]) == needle_text
      assert prompt.count(p.answer) == 2 and len(p.answer) == 5 and p.answer[0] != "0"
      assert prompt.endswith("\n" + passkey.PASSKEY_QUESTION)
      assert prompt.startswith(passkey.PASSKEY_PREAMBLE + "\n" if preamble else "")
      # b filler tokens before the needle (its line starts after "\n"), at a sentence end
      b = p.needle_start - head - 1
      assert text(p.tokens[head:head + b]) == filler[:b]
      assert p.actual_depth == pytest.approx(b / fixed if fixed else 0.0)
      assert b in sentence_ends  # snapped to the nearest sentence end (or 0)
      assert abs(b - depth * fixed) == pytest.approx(np.abs(sentence_ends - depth * fixed).min())
      # after the needle the filler restarts (Mohtashami & Jaggi's garbage_suffix)
      assert prompt[len(text(p.tokens[:p.needle_end])):].startswith(
          "\n" + filler[:fixed - b] + "\n" + passkey.PASSKEY_QUESTION)


def test_passkey_prompt_is_reproducible_and_seeded():
  builder = passkey.PasskeyPrompts(TOK, preamble=False)
  a = builder.cell(512, 0.5, trial=0, seed=0)
  np.testing.assert_array_equal(a.tokens, passkey.PasskeyPrompts(TOK, preamble=False)
                                .cell(512, 0.5, trial=0, seed=0).tokens)
  keys = {builder.cell(512, 0.5, trial=t, seed=s).answer for t in range(4) for s in range(4)}
  assert len(keys) == 16  # trials and seeds draw their own keys
  with pytest.raises(ValueError, match="at least 99 tokens"):
    builder.cell(98, 0.5, trial=0, seed=0)
  with pytest.raises(ValueError, match="depth"):
    builder.build(200, 1.5, "12345")
  with pytest.raises(ValueError, match="5 ASCII digits"):
    builder.build(200, 0.5, "1234")


def test_prompts_are_byte_identical_across_schemes(text_corpus):
  grids = []
  for kind in ("alibi", "rope"):
    c = tiny_config(text_corpus, kind)
    c.model.num_layers = 3 if kind == "rope" else 2  # other model fields must not matter either
    docs = data_inputs.load_splits(c)["validation"]
    grids.append([
        needle.grid_prompts(needle.prompt_builder(c, suite, TOK, docs), [400, 700],
                            c.eval[suite].depths, 2, c.eval[suite].seed)
        for suite in ("passkey", "needle")])
  for grid_a, grid_b in zip(*grids):
    for length in grid_a:
      for row_a, row_b in zip(grid_a[length], grid_b[length]):
        for a, b in zip(row_a, row_b):
          assert a.tokens.tobytes() == b.tokens.tobytes() and a.answer == b.answer


# ---------------------------------------------------------------------------- needle prompts


def test_needle_prompt_in_held_out_text(text_corpus):
  docs = read_text_files(text_corpus)[:3]
  stream = b"".join(d.data if d.data.endswith(b"\n") else d.data + b"\n" for d in docs)
  builder = passkey.NeedlePrompts(TOK, docs, preamble=True, value_digits=7)
  for length in (builder.min_length, 400, 1000, 4096):
    for depth in (0.0, 0.25, 0.5, 1.0):
      p = builder.cell(length, depth, trial=1, seed=5)
      assert p.tokens.shape == (length,) and p.tokens[0] == TOK.bos_id
      prompt = text(p.tokens)
      assert text(p.tokens[p.needle_start:p.needle_end]) == passkey.NEEDLE_TEMPLATE.format(
          key=p.key, value=p.answer)
      assert prompt.endswith("\n" + passkey.NEEDLE_QUESTION.format(key=p.key))
      head = 1 + len(passkey.NEEDLE_PREAMBLE) + 1
      before = TOK.decode_bytes(p.tokens[head:p.needle_start])
      after = TOK.decode_bytes(p.tokens[p.needle_end + 1:length - len(
          passkey.NEEDLE_QUESTION.format(key=p.key)) - 1])
      hay = before + after
      assert hay in stream + stream  # contiguous held-out text (the stream is cyclic)
      assert p.actual_depth == pytest.approx(len(before) / len(hay) if hay else 0.0)
      assert before == b"" or before.endswith((b"\n", b". ", b"! ", b"? "))  # a unit start
  a, b = builder.cell(1000, 0.5, 0, seed=5), builder.cell(1000, 0.5, 0, seed=5)
  assert a.tokens.tobytes() == b.tokens.tobytes()
  with pytest.raises(ValueError, match="needs at least"):
    builder.cell(builder.min_length - 60, 0.5, 0, seed=5)


# ---------------------------------------------------------------------------- scoring


@pytest.mark.parametrize("continuation,correct", [
    (" 71432.", True), (" 71432", True), (" is 71432, yes", True), ("71432 71432", True),
    (" 7143", False), (" 714321", False), (" 71 432", False), ("", False), (" abc", False),
    (" 071432", False), (" 12345 71432", False),
])
def test_scoring_on_known_strings(continuation, correct):
  assert needle.is_correct(continuation, "71432") is correct


def test_continuation_stops_at_the_first_special_token():
  ids = list(TOK.encode(" 71432.")) + [TOK.bos_id] + list(TOK.encode("9"))
  assert needle.continuation_text(TOK, ids) == " 71432."
  cut = needle.continuation_text(TOK, list(TOK.encode(" 7143")) + [TOK.eos_id, ord("2")])
  assert cut == " 7143" and not needle.is_correct(cut, "71432")


def test_max_length_passing_needs_every_shorter_length():
  rows = [{"length": 64, "accuracy": None}, {"length": 128, "accuracy": 1.0},
          {"length": 256, "accuracy": 0.95}, {"length": 512, "accuracy": 0.5},
          {"length": 1024, "accuracy": 1.0}]
  assert needle.max_length_passing(rows, 0.9) == 256
  assert needle.max_length_passing(rows, 0.4) == 1024
  assert needle.max_length_passing(rows[:1], 0.9) is None
  assert needle.max_length_passing([{"length": 8, "accuracy": 0.1}] + rows, 0.9) is None


def test_skip_reasons():
  reasons = needle.skip_reasons([64, 128, 256, 512], min_length=99, max_new_tokens=8,
                                max_position=256, kind="learned", hint="or clamp")
  assert sorted(reasons) == [64, 256, 512]  # 256 + 8 - 1 positions > 256
  assert "99 tokens" in reasons[64] and "learned" in reasons[256]


# ---------------------------------------------------------------------------- training documents


def test_training_documents_fill_whole_windows(text_corpus):
  c = tiny_config(text_corpus)
  c.data.train_len = 128
  c.data.passkey.preamble = False
  c.data.passkey.fraction = 0.5
  train_docs = data_inputs.load_splits(c)["train"]
  docs = passkey_training.training_documents(train_docs, c.data, TOK)
  assert docs[:len(train_docs)] == train_docs
  extra = docs[len(train_docs):]
  again = passkey_training.training_documents(train_docs, c.data, TOK)
  assert [d.data for d in again[len(train_docs):]] == [d.data for d in extra]
  c.data.passkey.fraction = 0.0
  assert passkey_training.training_documents(train_docs, c.data, TOK) == train_docs

  tokens, starts = pipeline.pack_stream(docs, TOK)
  windows = pipeline.PackedWindows(tokens, starts, c.data.train_len)
  doc_starts = np.flatnonzero(starts)
  first = len(train_docs)
  keyed = 0
  for doc, lo in zip(extra, doc_starts[first:]):
    hi = lo + len(doc.data) + 1  # BOS + bytes: stream tokens [lo, hi)
    if lo // c.data.train_len >= len(windows):
      continue  # the last block has no final target (dropped by the pipeline)
    assert lo // c.data.train_len == (hi - 1) // c.data.train_len, doc.name  # one window's inputs
    if doc.name.startswith("passkey-text"):
      continue
    body = doc.data.decode()
    key = re.fullmatch(r"(?s).*\nWhat is the pass key\? The pass key is (\d{5})\.", body).group(1)
    assert f"The pass key is {key}. Remember it. {key} is the pass key." in body
    assert 106 <= len(doc.data) + 1 <= c.data.train_len
    keyed += 1
  text_windows = (doc_starts[first]) // c.data.train_len
  share = (len(windows) - text_windows) / len(windows)
  assert keyed > 50 and 0.45 < share < 0.55
  # the window that holds a passkey document is the whole document, from its BOS
  w = windows[doc_starts[first + 1] // c.data.train_len]
  assert w["positions"][0] == 0 and w["inputs"][0] == TOK.bos_id


def test_answer_windows_weigh_exactly_the_key_digits_of_the_answer():
  w = passkey_training.answer_windows(TOK, train_len=256, preamble=False, key_digits=5, count=6, seed=3)
  assert all(v.shape == (6, 256) for v in w.values())
  assert w["weights"].sum() == 6 * 5
  for row in range(6):
    m = int(w["segment_ids"][row].sum())
    assert 106 <= m + 1 <= 256 and (w["positions"][row, :m] == np.arange(m)).all()
    assert (w["inputs"][row, 1:m] == w["targets"][row, :m - 1]).all()  # shifted by one
    assert (w["targets"][row, m:] == TOK.pad_id).all() and w["inputs"][row, 0] == TOK.bos_id
    text = TOK.decode_bytes(w["inputs"][row, 1:m]) + TOK.decode_bytes(w["targets"][row, m - 1:m])
    key = re.fullmatch(rb"(?s).*The pass key is (\d{5})\. Remember it\..*"
                       rb"\nWhat is the pass key\? The pass key is \1\.", text).group(1)
    scored = w["targets"][row][w["weights"][row] > 0]
    assert TOK.decode_bytes(scored) == key  # the answer's digits, and only those
  again = passkey_training.answer_windows(TOK, train_len=256, preamble=False, key_digits=5, count=6, seed=3)
  assert all((again[k] == w[k]).all() for k in w)
  with pytest.raises(ValueError, match="train_len is 64"):
    passkey_training.answer_windows(TOK, train_len=64, preamble=False, key_digits=5, count=1, seed=0)


# ---------------------------------------------------------------------------- the grid


def grid_config(text_corpus):
  c = tiny_config(text_corpus)
  c.data.train_len = 64
  c.eval.length_multipliers = (1.0, 2.0, 4.0)  # 64 (too short for a prompt), 128, 256
  c.data.passkey.preamble = False
  c.eval.passkey.depths = (0.0, 0.5, 1.0)
  c.eval.passkey.trials = 3
  c.eval.batch_tokens = 300  # 2 prompts per call at 128 tokens: several batches, one padded
  return c


def oracle(length):
  """A model that reads the pass key off each prompt row (tests batching and row order)."""
  def generate(prompts):
    assert prompts.shape[1] == length
    out = []
    for row in prompts:
      key = re.search(r"pass key is (\d+)\.", text(row)).group(1)
      out.append(TOK.encode(f" {key}.\nxx")[:8])
    return np.stack(out)
  return generate


def test_grid_scores_an_oracle_perfectly(text_corpus):
  c = grid_config(text_corpus)
  builder = needle.prompt_builder(c, "passkey", TOK)
  skip = needle.skip_reasons([64, 128, 256], min_length=builder.min_length, max_new_tokens=8,
                             max_position=None, kind="alibi")
  result = needle.evaluate_grid("passkey", c, builder, TOK, oracle, skip=skip, parallelism=2)
  assert result["accuracy"] == [[None] * 3, [1.0] * 3, [1.0] * 3]
  assert result["max_length_passing"] == 256
  wrong = needle.evaluate_grid("passkey", c, builder, TOK, lambda L: lambda p: np.zeros(
      (len(p), 8), np.int32) + ord("7"), skip=skip)
  assert wrong["rows"][1]["accuracy"] == 0.0 and wrong["max_length_passing"] is None


def test_grid_json_and_heatmap_from_a_tiny_model(text_corpus, tmp_path):
  c = grid_config(text_corpus)
  c.train.write_plots = True  # the heatmap is checked
  c.eval.needle.preamble = False
  c.eval.needle.depths = (0.5,)
  c.eval.needle.trials = 1
  c.eval.length_multipliers = (1.0, 2.0)  # 64 (too short for a prompt) and 128
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  docs = data_inputs.load_splits(c)
  result = suites.REGISTRY["passkey"].run(Context(c, str(tmp_path), spec, mesh, params, 7, docs, TOK))["passkey"]
  saved = json.load(open(tmp_path / "eval" / "passkey.json"))
  assert saved == json.loads(json.dumps(result))
  assert os.path.getsize(tmp_path / "eval" / "passkey.png") > 0
  assert saved["suite"] == "passkey" and saved["step"] == 7 and saved["scheme"] == "alibi"
  assert saved["config_hash"] == run_dir.config_hash(c)
  assert saved["lengths"] == [64, 128] and saved["depths"] == [0.0, 0.5, 1.0]
  assert saved["trials"] == 3 and saved["threshold"] == 0.9
  assert "99 tokens" in saved["rows"][0]["skipped"] and saved["accuracy"][0] == [None] * 3
  assert [r["prompts"] for r in saved["rows"]] == [0, 9]
  assert len(saved["cells"]) == 6 and len(saved["accuracy"][1]) == 3
  for cell in saved["cells"][3:]:
    assert cell["trials"] == 3 and len(cell["outputs"]) == 3 and 0 <= cell["accuracy"] <= 1
    for o in cell["outputs"]:
      assert len(o["answer"]) == 5 and needle.is_correct(o["output"], o["answer"]) == o["correct"]
  assert saved["prompt"]["preamble"] is False and saved["prompt"]["min_length"] == 99

  # the needle suite at 256 tokens (128 cannot hold its prompt)
  c.eval.length_multipliers = (2.0, 4.0)
  result = suites.REGISTRY["needle"].run(Context(c, str(tmp_path), spec, mesh, params, 7, docs, TOK))["needle"]
  assert [r.get("skipped") is None for r in result["rows"]] == [False, True]
  assert result["split"] == "validation" and result["cells"][-1]["outputs"][0]["key"]
  assert os.path.getsize(tmp_path / "eval" / "needle.png") > 0


def test_learned_positions_skip_lengths_beyond_the_table(text_corpus, tmp_path):
  c = grid_config(text_corpus)
  c.model.position.kind = "learned"
  c.model.position.max_len = 128
  c.eval.passkey.depths = (1.0,)
  c.eval.passkey.trials = 1
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  result = suites.REGISTRY["passkey"].run(Context(c, str(tmp_path), spec, mesh, None, 0, data_inputs.load_splits(c), TOK))["passkey"]
  assert [bool(r.get("skipped")) for r in result["rows"]] == [True, True, True]
  assert "learned" in result["rows"][1]["skipped"]  # 128 + 8 - 1 positions > 128
  assert result["max_length_passing"] is None  # nothing ran (no parameters were needed)


def test_a_prompt_longer_than_every_length_is_refused_before_compiling(text_corpus, tmp_path):
  c = grid_config(text_corpus)
  c.eval.length_multipliers = (1.0,)
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  with pytest.raises(ConfigError, match="eval.length_multipliers"):
    suites.REGISTRY["passkey"].run(Context(c, str(tmp_path), spec, mesh, None, 0, {"validation": []}, TOK))["passkey"]
  c.eval.passkey.trials = 0
  with pytest.raises(ConfigError, match="eval.passkey.trials"):
    suites.REGISTRY["passkey"].run(Context(c, str(tmp_path), spec, mesh, None, 0, {"validation": []}, TOK))["passkey"]
