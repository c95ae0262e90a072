"""RULER's variable tracking (data/ruler.py VariableTrackingPrompts, suite variable_tracking):
exact-length prompts whose chains read in order inside held-out text, reproducible, scored by
recall of all the chain's names (RULER's string_match_all), and `eval.run` with
niah_multikey,variable_tracking writing JSON + PNG per suite that sweeps.collect tabulates."""

import json
import os
import re

import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import retrieval_mix, variable_tracking
from data.corpora import read_text_files
from data.tokenizers import ByteTokenizer
from eval import needle
from eval import run as eval_run
from sweeps import collect

TOK = ByteTokenizer()
STATEMENT = re.compile(r"VAR ([A-Z]{5}) = (?:VAR ([A-Z]{5})|(\d{5}))\n")


def chains_of(prompt: str) -> dict[str, list[str]]:
  """{value: the names assigned it, in statement order}, by following the statements."""
  value_of, order = {}, {}
  for name, previous, value in STATEMENT.findall(prompt):
    value_of[name] = value if value else value_of[previous]  # a name is defined before its use
    order.setdefault(value_of[name], []).append(name)
  return order


@pytest.mark.parametrize("num_chains", [1, 3])
def test_prompts_hide_chains_in_order_in_held_out_text(text_corpus, num_chains):
  docs = read_text_files(text_corpus)[:3]
  builder = variable_tracking.VariableTrackingPrompts(TOK, docs, num_chains=num_chains, num_hops=4)
  special = [TOK.bos_id, TOK.eos_id, TOK.pad_id]
  for length in (builder.min_length, 900, 2048):
    for depth in (0.0, 0.5, 1.0):
      p = builder.cell(length, depth, 1, seed=2)
      assert p.tokens.shape == (length,) and p.tokens[0] == TOK.bos_id
      assert not np.isin(p.tokens[1:], special).any()
      prompt = TOK.decode(p.tokens[1:])
      assert prompt.startswith(variable_tracking.VT_PREAMBLE + "\n")
      question = variable_tracking.VT_QUESTION.format(value=p.key, count=5)
      assert prompt.endswith("\n" + question)
      chains = chains_of(prompt)
      assert len(chains) == num_chains and all(len(n) == 5 for n in chains.values())
      assert chains[p.key] == list(p.answers) and p.answer == " ".join(p.answers)
      assert TOK.decode(p.tokens[p.needle_start:p.needle_end]) == f"VAR {p.answers[0]} = {p.key}"
      assert len({n for names in chains.values() for n in names}) == 5 * num_chains
  a, b = builder.cell(900, 0.5, 0, seed=2), builder.cell(900, 0.5, 0, seed=2)
  assert a.tokens.tobytes() == b.tokens.tobytes() and a.answers == b.answers
  assert builder.cell(900, 0.5, 1, seed=2).tokens.tobytes() != a.tokens.tobytes()
  with pytest.raises(ValueError, match="needs at least"):
    builder.cell(builder.min_length - 1, 0.5, 0, seed=2)


def test_the_queried_chain_starts_at_the_depth(text_corpus):
  docs = read_text_files(text_corpus)[:3]
  builder = variable_tracking.VariableTrackingPrompts(TOK, docs, num_chains=1, num_hops=2, preamble=False)
  early, late = builder.cell(2048, 0.1, 0, seed=0), builder.cell(2048, 0.9, 0, seed=0)
  assert early.actual_depth < 0.2 < 0.8 < late.actual_depth
  assert early.needle_start < 0.3 * 2048 < 0.7 * 2048 < late.needle_start


def test_recall_of_all_references_on_hand_made_outputs():
  refs = ["ABCDE", "FGHIJ", "KLMNO"]
  assert needle.recall_all("ABCDE FGHIJ KLMNO", refs) == 1.0
  assert needle.recall_all(" they are: abcde, fghij", refs) == pytest.approx(2 / 3)
  assert needle.recall_all("ABCD EFGHIJ", refs) == pytest.approx(1 / 3)  # FGHIJ inside EFGHIJ
  assert needle.recall_all("", refs) == 0.0
  with pytest.raises(ValueError):
    needle.recall_all("x", [])


def test_an_oracle_scores_one_and_half_an_answer_half(text_corpus):
  c = tiny_config(text_corpus)
  c.data.train_len = 128
  c.eval.length_multipliers = (8.0,)
  c.eval.variable_tracking.depths = (0.0, 1.0)
  c.eval.variable_tracking.trials = 2
  docs = read_text_files(text_corpus)[:3]
  builder = needle.prompt_builder(c, "variable_tracking", TOK, docs)

  def reader(share):
    def for_length(length):
      def generate(prompts):
        out = []
        for row in prompts:
          s = TOK.decode(row)
          value = re.search(r"assigned the value (\d+) in the text above", s).group(1)
          names = chains_of(s)[value]
          answer = " " + ", ".join(names[:round(share * len(names))]) + "\n" + "x" * 36
          out.append(TOK.encode(answer)[:36])
        return np.stack(out)
      return generate
    return for_length

  full = needle.evaluate_grid("variable_tracking", c, builder, TOK, reader(1.0))
  assert [r["accuracy"] for r in full["rows"]] == [1.0] and full["max_length_passing"] == 1024
  assert "string_match_all" in full["scoring"]
  part = needle.evaluate_grid("variable_tracking", c, builder, TOK, reader(0.4))
  assert part["rows"][0]["accuracy"] == pytest.approx(0.4) and part["rows"][0]["correct"] == 0
  assert all(o["score"] == pytest.approx(0.4) for cell in part["cells"] for o in cell["outputs"])


@pytest.mark.parametrize("field,value,match", [
    ("num_hops", 0, "eval.variable_tracking.num_hops must be an integer in \\[1, 64\\]"),
    ("num_chains", True, "eval.variable_tracking.num_chains"),
    ("max_new_tokens", 35, "eval.variable_tracking.max_new_tokens must be an integer >= 36"),
])
def test_bad_fields_are_refused_in_one_line(text_corpus, field, value, match):
  c = tiny_config(text_corpus)
  c.eval.variable_tracking[field] = value
  with pytest.raises(ConfigError, match=match):
    validate(c, 8)


def test_eval_run_writes_both_suites_and_collect_tabulates_them(text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.train.write_plots = True
  c.data.train_len = 64
  c.train.num_steps = 2
  c.eval.suites = "ppl_vs_length"
  c.eval.length_multipliers = (1.0,)
  workdir = str(tmp_path / "study" / "kind=alibi")
  train.train_and_evaluate(c, workdir, devices=train.jax.devices()[:1])
  c.eval.suites = "niah_multikey,variable_tracking"
  c.eval.length_multipliers = (8.0,)
  for suite in ("niah_multikey", "variable_tracking"):
    c.eval[suite].depths = (0.0, 1.0)
    c.eval[suite].trials = 1
  c.eval.niah_multikey.num_keys = 2
  results = eval_run.evaluate(workdir, config=c)
  assert set(results) == {"niah_multikey", "variable_tracking"}
  for suite in results:
    saved = json.load(open(os.path.join(workdir, "eval", f"{suite}.json")))
    assert saved["suite"] == suite and saved["lengths"] == [512]
    assert os.path.getsize(os.path.join(workdir, "eval", f"{suite}.png")) > 0
  frame = collect.collect(str(tmp_path / "study"))
  rows = frame[frame["suite"].isin(["niah_multikey", "variable_tracking"])]
  assert sorted(rows["suite"]) == ["niah_multikey", "variable_tracking"]
  assert (rows["length"] == 512).all() and rows["accuracy"].between(0, 1).all()


@pytest.mark.parametrize("suite", ["needle", "niah_multikey", "niah_multivalue",
                                   "niah_multiquery", "variable_tracking"])
def test_the_retrieval_training_mix_tiles_blocks_of_prompts_with_their_answers(text_corpus,
                                                                               suite):
  c = tiny_config(text_corpus)
  c.data.train_len = 1024
  c.data.retrieval_mix.suite = suite
  c.data.retrieval_mix.fraction = 0.25
  validate(c, 1)
  docs = read_text_files(text_corpus)
  out = retrieval_mix.training_documents(docs, c, TOK)
  assert out[:len(docs)] == docs
  mixed = out[len(docs):]
  prompts = [d for d in mixed if d.name.startswith(f"{suite}-0")]
  text_tokens = sum(len(d.data) + 1 for d in docs)
  assert sum(len(d.data) + 1 for d in mixed) % 1024 == -text_tokens % 1024  # whole blocks
  blocks = (sum(len(d.data) + 1 for d in mixed) - (-text_tokens % 1024)) // 1024
  assert blocks == round(0.25 / 0.75 * (text_tokens + (-text_tokens % 1024)) / 1024)
  builder = needle.prompt_builder(c, suite, TOK, docs)
  assert len(prompts) > 20
  for d in prompts[:20]:
    text = d.data.decode()
    assert builder.min_length <= len(d.data) + 1 <= 1024
    if suite == "variable_tracking":  # the answer is the queried chain's names
      value = re.search(r"assigned the value (\d+) in the text above", text).group(1)
      assert text.endswith("they are: " + ", ".join(chains_of(text)[value]))
    else:
      assert re.search(r"(is|are) \d{7}(, \d{7})*(, and \d{7})?\.$", text)
  c.data.train_len = 256  # shorter than the shortest prompt: refused before anything runs
  with pytest.raises(ConfigError, match=f"data.retrieval_mix: a {suite} training document "
                                        "needs at least"):
    validate(c, 1)
  c.data.train_len, c.data.retrieval_mix.suite = 1024, "passkey"
  with pytest.raises(ConfigError, match="data.retrieval_mix.suite='passkey' must be one of"):
    validate(c, 1)


def test_training_windows_carry_the_mixed_prompts(text_corpus):
  from data import inputs as data_inputs
  c = tiny_config(text_corpus)
  c.data.train_len = 512
  c.data.retrieval_mix.suite = "needle"
  c.data.retrieval_mix.fraction = 0.5
  c.eval.needle.preamble = False
  validate(c, 1)
  inputs = data_inputs.make_inputs(c, data_inputs.load_splits(c), TOK)
  windows = [TOK.decode(row) for _ in range(4) for row in next(inputs.train)["inputs"]]
  with_needle = [w for w in windows if "One of the special magic numbers for" in w]
  assert 0.2 < len(with_needle) / len(windows) < 0.8  # about half the windows
  assert all(re.search(r"mentioned in the provided text is \d{7}\.", w) for w in with_needle)
  # held-out prompts scored on their answers only (train.py's val_retrieval_answer_nll)
  held = inputs.validation["val_retrieval_answer_nll"]
  assert held["inputs"].shape == (data_inputs.PASSKEY_ANSWER_DOCUMENTS, 512)
  for row in range(data_inputs.PASSKEY_ANSWER_DOCUMENTS):
    weighted = held["targets"][row][held["weights"][row] == 1]
    assert re.fullmatch(r" \d{7}\.", TOK.decode(weighted)), TOK.decode(weighted)
    end = int(np.flatnonzero(held["weights"][row])[0])  # the answer follows the question
    assert TOK.decode(held["inputs"][row][:end + 1]).endswith("mentioned in the provided text is")
    assert (held["segment_ids"][row] == (np.arange(512) < held["segment_ids"][row].sum())).all()
  lengths = held["segment_ids"].sum(axis=1)
  assert len(set(lengths.tolist())) > 10  # lengths drawn up to train_len, as in training
