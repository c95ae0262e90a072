"""RULER's multi-key needle (data/ruler.py, suite niah_multikey): exact-length prompts with
num_keys needles in held-out text, no special token inside, reproducible, scored on the target
only (an oracle of the target scores 1, one of a distractor 0), and the suite's JSON, PNG and
collected rows from a tiny model."""

import json
import os
import re

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import inputs as data_inputs
from data import passkey, ruler
from data.corpora import read_text_files
from data.tokenizers import ByteTokenizer
from eval import needle, suites
from eval.suites import Context
from models import spec as specs

TOK = ByteTokenizer()
NEEDLE = re.compile(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d+)\.\n")


def text(ids) -> str:
  return TOK.decode(ids)


@pytest.mark.parametrize("num_keys", [2, 4])
def test_prompts_hold_num_keys_needles_in_held_out_text(text_corpus, num_keys):
  docs = read_text_files(text_corpus)[:3]
  stream = b"".join(d.data if d.data.endswith(b"\n") else d.data + b"\n" for d in docs)
  builder = ruler.MultiKeyNeedlePrompts(TOK, docs, num_keys=num_keys, preamble=True,
                                        value_digits=7)
  special = [TOK.bos_id, TOK.eos_id, TOK.pad_id]
  for length in (builder.min_length, 700, 2048):
    for depth in (0.0, 0.5, 1.0):
      for trial in range(3):
        p = builder.cell(length, depth, trial, seed=3)
        assert p.tokens.shape == (length,) and p.tokens[0] == TOK.bos_id
        assert not np.isin(p.tokens[1:], special).any()  # no BOS/EOS/PAD inside
        prompt = text(p.tokens[1:])
        found = NEEDLE.findall(prompt)
        keys = [k for k, _ in found]
        assert len(found) == num_keys and len(set(keys)) == num_keys and p.key in keys
        assert dict(found)[p.key] == p.answer and len(p.answer) == 7
        assert sum(v == p.answer for _, v in found) == 1  # the answer is unambiguous
        assert text(p.tokens[p.needle_start:p.needle_end]) == passkey.NEEDLE_TEMPLATE.format(
            key=p.key, value=p.answer)
        assert sorted((k, v) for k, v, _ in p.distractors) == sorted(
            (k, v) for k, v in found if k != p.key)
        for k, v, start in p.distractors:  # each distractor's recorded offset is its needle
          assert text(p.tokens[start:]).startswith(passkey.NEEDLE_TEMPLATE.format(key=k, value=v))
        question = passkey.NEEDLE_QUESTION.format(key=p.key)
        assert prompt.endswith("\n" + question)
        body = prompt[len(passkey.NEEDLE_PREAMBLE) + 1:-len(question) - 1]
        hay = NEEDLE.sub("", body).encode()
        assert hay in stream + stream  # the haystack is contiguous held-out text
        before = NEEDLE.sub("", text(p.tokens[1 + len(passkey.NEEDLE_PREAMBLE) + 1:
                                                p.needle_start])).encode()
        assert p.actual_depth == pytest.approx(len(before) / len(hay) if hay else 0.0)
  a, b = builder.cell(900, 0.5, 1, seed=3), builder.cell(900, 0.5, 1, seed=3)
  assert a.tokens.tobytes() == b.tokens.tobytes()
  assert builder.cell(900, 0.5, 2, seed=3).tokens.tobytes() != a.tokens.tobytes()
  single = passkey.NeedlePrompts(TOK, docs, preamble=True, value_digits=7)
  assert builder.min_length > single.min_length
  with pytest.raises(ValueError, match="needs at least"):
    builder.cell(single.min_length, 0.5, 0, seed=3)
  with pytest.raises(ValueError, match="num_keys"):
    ruler.MultiKeyNeedlePrompts(TOK, docs, num_keys=1)


def _reader(pick):
  """A model that reads one needle's value off each prompt: `pick(target_key, needles)`."""
  def for_length(length):
    def generate(prompts):
      out = []
      for row in prompts:
        s = text(row)
        target = re.search(r"special magic number for ([a-z]+-[a-z]+) mentioned", s).group(1)
        out.append(TOK.encode(f" {pick(target, NEEDLE.findall(s))}.\nxxxxxxx")[:10])
      return np.stack(out)
    return generate
  return for_length


def grid_config(text_corpus):
  c = tiny_config(text_corpus)
  c.data.train_len = 128
  c.eval.length_multipliers = (1.0, 8.0, 16.0)  # 128 (too short for 4 needles), 1024, 2048
  c.eval.niah_multikey.depths = (0.0, 1.0)
  c.eval.niah_multikey.trials = 2
  return c


def test_scoring_counts_the_target_only(text_corpus):
  """An oracle of the target scores 1.0 everywhere; a reader of the first distractor 0.0."""
  c = grid_config(text_corpus)
  docs = data_inputs.load_splits(c)
  builder = needle.check_suite(c, "niah_multikey", docs, TOK)
  skip = needle.skip_reasons([128, 1024, 2048], min_length=builder.min_length, max_new_tokens=10,
                             max_position=None, kind="alibi")
  assert list(skip) == [128]
  right = needle.evaluate_grid("niah_multikey", c, builder, TOK,
                               _reader(lambda t, found: dict(found)[t]), skip=skip)
  assert right["accuracy"] == [[None, None], [1.0, 1.0], [1.0, 1.0]]
  assert right["max_length_passing"] == 2048
  wrong = needle.evaluate_grid("niah_multikey", c, builder, TOK, _reader(
      lambda t, found: next(v for k, v in found if k != t)), skip=skip)
  assert wrong["accuracy"] == [[None, None], [0.0, 0.0], [0.0, 0.0]]
  for ok, bad in zip(right["cells"][2:], wrong["cells"][2:]):  # the evaluated lengths
    assert ok["answered_distractor"] == 0 and bad["answered_distractor"] == bad["trials"] == 2
    for o in bad["outputs"]:
      values = {d["value"] for d in o["distractors"]}
      assert len(o["distractors"]) == 3 and o["answer"] not in values
      assert o["answered_distractor"] == next(d["key"] for d in o["distractors"])


def test_suite_writes_json_png_and_collected_rows(text_corpus, tmp_path):
  c = grid_config(text_corpus)
  c.train.write_plots = True
  c.eval.length_multipliers = (4.0,)
  c.eval.niah_multikey.num_keys = 2
  c.eval.niah_multikey.trials = 1
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  docs = data_inputs.load_splits(c)
  suite = suites.REGISTRY["niah_multikey"]
  result = suite.run(Context(c, str(tmp_path), spec, mesh, params, 5, docs, TOK))["niah_multikey"]
  saved = json.load(open(tmp_path / "eval" / "niah_multikey.json"))
  assert saved == json.loads(json.dumps(result))
  assert os.path.getsize(tmp_path / "eval" / "niah_multikey.png") > 0
  assert saved["suite"] == "niah_multikey" and saved["prompt"]["num_keys"] == 2
  assert saved["split"] == "validation" and "niah_multikey" in saved["source"]
  assert saved["lengths"] == [512] and len(saved["cells"]) == 2
  rows = suite.rows(saved, c.data.train_len)
  assert [r["length"] for r in rows] == [512] and rows[0]["prompts"] == 2
  assert set(json.loads(rows[0]["detail"])) == {"0", "1"}


@pytest.mark.parametrize("value,match", [
    (1, "eval.niah_multikey.num_keys must be an integer in \\[2, 64\\]"),
    (65, "eval.niah_multikey.num_keys"), (True, "eval.niah_multikey.num_keys")])
def test_bad_num_keys_is_refused_in_one_line(text_corpus, value, match):
  c = tiny_config(text_corpus)
  c.eval.niah_multikey.num_keys = value
  with pytest.raises(ConfigError, match=match):
    validate(c, 8)


@pytest.mark.parametrize("mode", ["niah_multivalue", "niah_multiquery"])
def test_multi_value_and_multi_query_prompts_ask_for_every_value(text_corpus, mode):
  docs = read_text_files(text_corpus)[:3]
  builder = ruler.MultiNeedlePrompts(TOK, docs, mode=mode, count=4)
  special = [TOK.bos_id, TOK.eos_id, TOK.pad_id]
  for length in (builder.min_length, 1500):
    for depth in (0.0, 1.0):
      p = builder.cell(length, depth, 0, seed=1)
      assert p.tokens.shape == (length,) and not np.isin(p.tokens[1:], special).any()
      prompt = text(p.tokens[1:])
      found = NEEDLE.findall(prompt)
      assert len(found) == 4 and sorted(v for _, v in found) == sorted(p.answers)
      keys = [k for k, _ in found]
      asked = keys if mode == "niah_multiquery" else [p.key]
      assert len(set(keys)) == (4 if mode == "niah_multiquery" else 1)
      assert prompt.endswith(ruler.MULTI_QUESTION.format(keys=ruler.key_list(
          [k for k, _ in sorted(found, key=lambda f: p.answers.index(f[1]))]
          if mode == "niah_multiquery" else asked)))
      assert text(p.tokens[p.needle_start:p.needle_end]) == passkey.NEEDLE_TEMPLATE.format(
          key=p.key, value=p.answers[0])
  assert builder.cell(900, 0.5, 0, seed=1).tokens.tobytes() == builder.cell(
      900, 0.5, 0, seed=1).tokens.tobytes()
  assert ruler.key_list(["a", "b", "c"]) == "a, b, and c" and ruler.key_list(["a"]) == "a"


@pytest.mark.parametrize("mode", ["niah_multivalue", "niah_multiquery"])
def test_multi_needle_scoring_is_the_recall_of_every_value(text_corpus, mode):
  c = grid_config(text_corpus)
  c.eval.length_multipliers = (8.0,)
  c.eval[mode].depths = (0.0, 1.0)
  c.eval[mode].trials = 2
  builder = needle.prompt_builder(c, mode, TOK, read_text_files(text_corpus)[:3])
  for share in (1.0, 0.5):
    def for_length(length, share=share):
      def generate(prompts):
        out = []
        for row in prompts:
          values = [v for _, v in NEEDLE.findall(text(row))]
          said = ", ".join(values[:int(share * len(values))]) + "." + "x" * 48
          out.append(TOK.encode(" " + said)[:48])
        return np.stack(out)
      return generate
    result = needle.evaluate_grid(mode, c, builder, TOK, for_length)
    assert result["rows"][0]["accuracy"] == pytest.approx(share)
    assert result["rows"][0]["correct"] == (4 if share == 1.0 else 0)


@pytest.mark.parametrize("suite", ["needle", "niah_multikey", "niah_multivalue",
                                   "variable_tracking"])
def test_the_noise_haystack_needs_no_held_out_text(suite):
  c = tiny_config("unused")
  c.data.train_len = 128
  c.eval.length_multipliers = (8.0,)
  c.eval[suite].haystack = "noise"
  builder = needle.check_suite(c, suite, {}, TOK)  # no documents at all
  p = builder.cell(1024, 0.5, 0, seed=0)
  body = text(p.tokens[1:])
  assert p.tokens.shape == (1024,) and "The grass is green. The sky is blue." in body
  before = text(p.tokens[1:p.needle_start]).split("\n", 1)[-1]  # after the preamble line
  before = re.sub(r"VAR [A-Z]{5} = [^\n]*\n", "", NEEDLE.sub("", before))  # other needles
  assert before.replace("\n", " ").strip() in (needle.NOISE_HAYSTACK.strip() + " ") * 40
  c.eval[suite].haystack = "essays"
  with pytest.raises(ConfigError, match=f"eval.{suite}.haystack must be 'text'"):
    validate(c, 8)


def test_uuid_needles_hold_a_version_4_uuid_and_are_scored_by_substring(text_corpus):
  """value_kind="uuid" (RULER's UUID needles): every value is a version-4 UUID in the prompt's
  needle lines, the target's answer is scored by case-insensitive substring (a distractor's UUID
  is no answer), and a section whose max_new_tokens cannot hold a UUID is refused in one line."""
  from data.retrieval_prompt import random_uuid
  form = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
  rng = np.random.default_rng(0)
  assert all(form.match(random_uuid(rng)) for _ in range(50))
  assert random_uuid(np.random.default_rng(3)) == random_uuid(np.random.default_rng(3))
  docs = read_text_files(text_corpus)[:3]
  builder = ruler.MultiKeyNeedlePrompts(TOK, docs, num_keys=3, value_kind="uuid")
  p = builder.cell(1024, 0.5, 0, seed=0)
  assert len(p.tokens) == 1024 and form.match(p.answer)
  lines = re.findall(r"One of the special magic numbers for [a-z]+-[a-z]+ is: ([0-9a-f-]{36})\.",
                     text(p.tokens))
  assert len(lines) == 3 and p.answer in lines
  distractor = next(v for _, v, _ in p.distractors)
  assert needle.is_correct(f" {p.answer.upper()}.", p.answer)
  assert not needle.is_correct(f" {distractor}.", p.answer)
  assert needle.answered_value(f" it is {distractor}", [distractor]) == distractor
  assert needle.is_correct(" 71432.", "71432") and not needle.is_correct(" 714321", "71432")
  c = tiny_config(text_corpus, "rope")
  c.eval.suites, c.eval.niah_multikey.value_kind = "niah_multikey", "uuid"
  with pytest.raises(ConfigError, match=r"eval.niah_multikey.max_new_tokens must be an integer "
                                        r">= 38 \(a UUID's 36 characters \+ 2"):
    validate(c, 1)
  c.eval.niah_multikey.max_new_tokens = 40
  validate(c, 1)
  c.eval.niah_multikey.value_kind = "guid"
  with pytest.raises(ConfigError, match=r"value_kind must be one of \['digits', 'uuid'\]"):
    validate(c, 1)


def test_the_needle_haystack_is_made_of_distractor_needles_of_other_keys():
  """haystack="needles" (RULER's niah_multikey_2): the haystack is needle lines whose keys are
  never a prompt's (HAYSTACK_KEYS vs TARGET_KEYS), so the target's key occurs once; no held-out
  text is needed; any other suite refuses it in one line."""
  section = tiny_config("unused", "rope").eval.niah_multikey
  section.haystack = "needles"
  builder = ruler.builder("niah_multikey", section, TOK, ())
  p = builder.cell(2048, 0.5, 0, seed=0)
  lines = NEEDLE.findall(text(p.tokens))
  keys = [k for k, _ in lines]
  assert len(lines) > 20 and keys.count(p.key) == 1 and p.key in ruler.TARGET_KEYS
  assert set(keys) - {k for k, _, _ in p.distractors} - {p.key} <= set(ruler.HAYSTACK_KEYS)
  assert not set(ruler.TARGET_KEYS) & set(ruler.HAYSTACK_KEYS)
  assert dict(lines)[p.key] == p.answer
  c = tiny_config("unused", "rope")
  c.eval.suites, c.eval.needle.haystack = "needle", "needles"
  with pytest.raises(ConfigError, match=r"eval.needle.haystack='needles' .* applies to "
                                        r"eval.niah_multikey only"):
    validate(c, 1)
