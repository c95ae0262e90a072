"""RULER's word extraction (data/ruler_words.py: common_words and frequent_words) and the
few-shot demonstrations of every RULER-style suite (data/ruler.py FewShotPrompts): exact
lengths, no special token inside, determinism, the answers against brute-force counts of the
prompt's own words (byte tokenizer and SentencePiece), the scoring rules on hand-made outputs,
the config checks in one line, and the suites end to end."""

import collections
import glob
import json
import math
import os
import re

import numpy as np
import pytest

from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import retrieval_mix, ruler, ruler_words
from data.corpora import Document, read_text_files
from data.tokenizers import ByteTokenizer, get_tokenizer
from eval import needle

TOK = ByteTokenizer()
SPECIAL = lambda tok: [tok.bos_id, tok.eos_id, tok.pad_id]  # noqa: E731
ENTRY = re.compile(r"(\d+)\. ([a-z]+)")


@pytest.fixture(scope="module")
def sp_tok(text_corpus, tmp_path_factory):
  """A lossless SentencePiece model trained on the test corpus (data.prepare's trainer)."""
  from data import prepare
  texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(text_corpus))]
  path = tmp_path_factory.mktemp("sp") / "tiny.model"
  path.write_bytes(prepare.train_sentencepiece(iter(texts), 1000))
  return get_tokenizer(f"sentencepiece:{path}")


def common_words_body(tok, p, builder):
  """The numbered list of a common_words prompt, parsed: [(number, word)]."""
  text = tok.decode(p.tokens[1:])
  if builder.preamble:
    assert text.startswith(ruler_words.CWE_PREAMBLE + "\n")
    text = text[len(ruler_words.CWE_PREAMBLE) + 1:]
  question = ruler_words.CWE_QUESTION.format(count=builder.num_common)
  assert text.endswith("\n" + question)
  body = text[:-len(question) - 1].rstrip("\n")
  assert "\n" not in body
  return [(int(n), w) for n, w in ENTRY.findall(body)], body


@pytest.mark.parametrize("tokenizer", ["byte", "sp"])
def test_common_words_are_the_most_listed_words_by_count(tokenizer, sp_tok):
  tok = TOK if tokenizer == "byte" else sp_tok
  for num_common, common_repeats, uncommon_repeats, preamble in ((3, 6, 1, True),
                                                                 (5, 4, 2, False)):
    builder = ruler_words.CommonWordsPrompts(tok, num_common=num_common,
                                             common_repeats=common_repeats,
                                             uncommon_repeats=uncommon_repeats, preamble=preamble)
    for length in (builder.min_length, 700, 2048):
      for trial in range(3):
        p = builder.cell(length, 0.5, trial, seed=4)
        assert p.tokens.shape == (length,) and p.tokens[0] == tok.bos_id
        assert not np.isin(p.tokens[1:], SPECIAL(tok)).any()
        entries, body = common_words_body(tok, p, builder)
        assert body == " ".join(f"{n}. {w}" for n, w in entries)  # nothing else in the list
        assert [n for n, _ in entries] == list(range(1, len(entries) + 1))
        counts = collections.Counter(w for _, w in entries)
        assert sorted(w for w, c in counts.items() if c == common_repeats) == sorted(p.answers)
        assert len(p.answers) == num_common
        assert all(c == uncommon_repeats for w, c in counts.items() if w not in p.answers)
        if tokenizer == "byte":  # the list is as long as fits: one more entry would not
          pad = len(text := tok.decode(p.tokens[1:])) - len(text.rstrip("\n").rstrip(
              ruler_words.CWE_QUESTION.format(count=num_common)).rstrip("\n")) - len(
                  ruler_words.CWE_QUESTION.format(count=num_common)) - 1
          assert 0 <= pad < len(f" {len(entries) + 1}. zzzzz") * uncommon_repeats
    if tokenizer == "byte":  # min_length is exact in bytes (under SentencePiece, an upper bound)
      with pytest.raises(ValueError, match="needs at least"):
        builder.cell(builder.min_length - 1, 0.0, 0, 0)


@pytest.mark.parametrize("tokenizer", ["byte", "sp"])
def test_frequent_words_answer_is_ranks_two_to_four_of_the_prompts_own_counts(tokenizer, sp_tok):
  tok = TOK if tokenizer == "byte" else sp_tok
  for alpha, letters, preamble in ((2.0, 6, True), (1.5, 4, False)):
    builder = ruler_words.FrequentWordsPrompts(tok, alpha=alpha, word_letters=letters,
                                               preamble=preamble)
    for length in (builder.min_length, 900, 4096):
      for trial in range(3):
        p = builder.cell(length, 0.0, trial, seed=1)
        assert p.tokens.shape == (length,) and p.tokens[0] == tok.bos_id
        assert not np.isin(p.tokens[1:], SPECIAL(tok)).any()
        text = tok.decode(p.tokens[1:])
        if preamble:
          assert text.startswith(ruler_words.FWE_PREAMBLE + " ")
          text = text[len(ruler_words.FWE_PREAMBLE) + 1:]
        assert text.endswith("\n" + ruler_words.FWE_QUESTION)
        words = text[:-len(ruler_words.FWE_QUESTION) - 1].rstrip("\n").split(" ")
        counts = collections.Counter(words)
        ranked = [w for w, _ in counts.most_common()]
        assert ranked[0] == "..." and len(p.answers) == 3
        # The answer is the three most frequent coded words, strictly ahead of every other.
        assert set(ranked[1:4]) == set(p.answers)
        rest = [counts[w] for w in ranked[4:]]
        assert min(counts[w] for w in p.answers) > max(rest, default=0)
        assert all(len(w) == letters and w.isalpha() for w in counts if w != "...")
        # The counts are RULER's Zipf counts of one N.
        vocab = builder.vocab_size(length)
        nz = sorted(counts.values(), reverse=True)
        assert any(sorted((c for c in ruler_words.zipf_counts(n, vocab, alpha) if c), reverse=True)
                   == nz for n in range(1, 4 * length))


def test_prompts_are_a_function_of_seed_length_and_trial():
  for builder in (ruler_words.CommonWordsPrompts(TOK), ruler_words.FrequentWordsPrompts(TOK)):
    a = builder.cell(1024, 0.3, 2, seed=7)
    assert np.array_equal(a.tokens, builder.cell(1024, 0.9, 2, seed=7).tokens)  # no depth
    assert not np.array_equal(a.tokens, builder.cell(1024, 0.3, 3, seed=7).tokens)
    assert not np.array_equal(a.tokens, builder.cell(1024, 0.3, 2, seed=8).tokens)


def test_zeta_and_zipf_counts_match_their_definitions():
  assert math.isclose(ruler_words.zeta(2.0), math.pi ** 2 / 6, rel_tol=1e-12)
  assert math.isclose(ruler_words.zeta(3.0), 1.2020569031595942, rel_tol=1e-12)  # Apery
  assert math.isclose(ruler_words.zeta(4.0), math.pi ** 4 / 90, rel_tol=1e-12)
  # floor(N k^-2 / zeta(2)) for N = 100: 60.79 / 15.19 / 6.75 / 3.79 / 2.43 / 1.68
  assert ruler_words.zipf_counts(100, 6, 2.0) == [60, 15, 6, 3, 2, 1]


def test_word_answers_are_scored_by_recall_of_every_word():
  builder = ruler_words.CommonWordsPrompts(TOK)
  p = builder.cell(800, 0.0, 0, 0)
  a, b, c = p.answers
  assert ruler.answer_text(p, "common_words") == f" 1. {a} 2. {b} 3. {c}"
  assert needle.recall_all(ruler.answer_text(p, "common_words"), p.answers) == 1.0
  assert needle.recall_all(f" {c.upper()}, {a} and xyzzy", p.answers) == pytest.approx(2 / 3)
  assert needle.recall_all(" nothing here", p.answers) == 0.0
  q = ruler_words.FrequentWordsPrompts(TOK).cell(800, 0.0, 0, 0)
  assert ruler.answer_text(q, "frequent_words") == " " + " ".join(q.answers)
  assert needle.recall_all(" ... " + q.answers[2], q.answers) == pytest.approx(1 / 3)


@pytest.mark.parametrize("suite,field,value,match", [
    ("common_words", "num_common", 0, r"eval.common_words.num_common must be an integer in \[1, 32\]"),
    ("common_words", "uncommon_repeats", 6, r"uncommon_repeats must be an integer in \[1, common_repeats - 1 = 5\]"),
    ("common_words", "max_new_tokens", 10, r"eval.common_words.max_new_tokens must be an integer >= 28"),
    ("frequent_words", "alpha", 1.0, r"eval.frequent_words.alpha must be a finite number > 1"),
    ("frequent_words", "word_letters", 13, r"word_letters must be an integer in \[2, 12\]"),
    ("frequent_words", "max_new_tokens", 8, r"max_new_tokens must be an integer >= 23"),
    ("frequent_words", "fewshot", 9, r"eval.frequent_words.fewshot must be an integer in \[0, 8\]"),
    ("niah_multikey", "fewshot", -1, r"eval.niah_multikey.fewshot must be an integer in \[0, 8\]"),
])
def test_bad_word_and_fewshot_fields_are_refused_in_one_line(text_corpus, suite, field, value,
                                                             match):
  c = tiny_config(text_corpus)
  c.eval[suite][field] = value
  with pytest.raises(ConfigError, match=match) as e:
    validate(c, 1)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("suite", ["needle", "niah_multikey", "variable_tracking",
                                   "common_words", "frequent_words"])
def test_fewshot_demonstrations_precede_an_unchanged_prompt(text_corpus, suite):
  from configs import base
  docs = read_text_files(text_corpus)[:3]
  section = base.get_config().eval[suite]
  plain = ruler.builder(suite, section, TOK, docs)
  section.fewshot = 2
  shots = ruler.builder(suite, section, TOK, docs)
  assert isinstance(shots, ruler.FewShotPrompts)
  demo = shots.min_length - plain.min_length
  assert demo % 2 == 0 and demo > 0
  length = shots.min_length + 300
  p = shots.cell(length, 0.5, 1, seed=2)
  q = plain.cell(length - demo, 0.5, 1, seed=2)
  assert p.tokens.shape == (length,) and p.tokens[0] == TOK.bos_id
  assert not np.isin(p.tokens[1:], SPECIAL(TOK)).any()
  assert np.array_equal(p.tokens[1 + demo:], q.tokens[1:])  # the prompt itself is unchanged
  assert (p.answers, p.answer, p.key) == (q.answers, q.answer, q.key)
  assert np.array_equal(p.tokens[p.needle_start:p.needle_end], q.tokens[q.needle_start:q.needle_end])
  assert [d[:2] for d in p.distractors] == [d[:2] for d in q.distractors]
  assert [d[2] - demo for d in p.distractors] == [d[2] for d in q.distractors]
  # Each demonstration is the shortest prompt of another draw, solved, then a newline.
  first = plain.cell(plain.min_length, 0.5, 1, 2 + ruler.FEWSHOT_SEED)
  solved = TOK.decode(first.tokens[1:]) + ruler.answer_text(first, suite) + "\n"
  assert TOK.decode(p.tokens[1:]).startswith(solved)
  assert needle.recall_all(ruler.answer_text(first, suite), first.answers) == 1.0 if \
      first.answers else ruler.answer_text(first, suite).strip(" .") == first.answer
  with pytest.raises(ValueError, match="with 2 demonstration"):
    shots.cell(shots.min_length - 1, 0.5, 0, 0)


def test_word_suites_train_in_the_mix_and_run_end_to_end(text_corpus, tmp_path):
  import jax
  import train
  from data import inputs as data_inputs
  from eval import suites
  from eval.suites import Context
  from models import spec as specs
  c = tiny_config(text_corpus)
  c.train.write_plots = True
  c.data.train_len = 512
  c.data.retrieval_mix.suite, c.data.retrieval_mix.fraction = "common_words", 0.5
  c.eval.length_multipliers = (0.5, 1.0, 2.0)
  c.eval.common_words.trials = c.eval.frequent_words.trials = 2
  c.eval.frequent_words.fewshot = 1  # 2 x 471 + 20 tokens: only 1024 is long enough
  validate(c, 1)
  docs = data_inputs.load_splits(c)
  train_docs = retrieval_mix.training_documents(docs["train"], c, TOK)
  mixed = [d.data.decode() for d in train_docs if re.fullmatch(r"common_words-\d+", d.name)]
  assert mixed and all(ruler_words.CWE_QUESTION.format(count=3) in t for t in mixed)
  assert all(re.search(r"are: 1\. [a-z]{5} 2\. [a-z]{5} 3\. [a-z]{5}", t) for t in mixed)
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  ctx = Context(c, str(tmp_path), spec, mesh, specs.init_params(c, spec), 0, docs, TOK)
  for suite in ("common_words", "frequent_words"):
    result = suites.REGISTRY[suite].run(ctx)[suite]
    shots = int(suite == "frequent_words")
    assert result["depths"] is None and result["prompt"]["fewshot"] == shots
    assert [r["length"] for r in result["rows"]] == [256, 512, 1024]
    assert [r["prompts"] for r in result["rows"]] == [0, 0, 2] if shots else [0, 2, 2]
    assert result["rows"][0]["skipped"] and result["rows"][0]["accuracy"] is None  # too short
    assert os.path.exists(tmp_path / "eval" / f"{suite}.png")
    with open(tmp_path / "eval" / f"{suite}.json") as f:
      assert json.load(f)["suite"] == suite
    rows = suites.REGISTRY[suite].rows(result, c.data.train_len)
    assert [r["detail"] for r in rows] == ["{}"] * 3  # no depth cells
