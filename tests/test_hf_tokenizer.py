"""Hugging Face tokenizers (data/hf_tokenizer.py, `data.tokenizer = "hf:<path>"`), on small BPE
tokenizer.json files trained here with the `tokenizers` library (no network): a GPT-2-style
byte-level BPE, a Llama-3-style one whose pre-tokenizer groups digits by up to three, and a
Mistral-style Metaspace BPE with byte fallback and a dummy prefix. Round trips, special ids,
the vocabulary check, bits per byte against a hand count, exact-length retrieval prompts scored
on their digits, data.prepare, and a few training steps."""

import glob
import json
import math
import os
import pickle

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.validate import ConfigError, validate
from data import corpora, passkey, passkey_training, pipeline, prepare, ruler
from data.corpora import Document, read_text_files
from data.hf_tokenizer import HFTokenizer
from data.tokenizers import get_tokenizer
from eval import needle, perplexity
from models import spec as specs

# Llama 3's pre-tokenizer pattern: letters, digit groups of 1..3, punctuation, whitespace.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
NUMBERS = (" ".join(str(i) for i in range(1000)) + "\n") * 30  # so that digits get merged
TRICKY = ["", "hello  world", "  lead and trail  \n", "a\r\n\tb\n\n", "x \u2581 y \u2581\u2581z",
          "Ophelia \u2014 \u201cnymph\u201d, \u65e5\u672c\u8a9e \U0001f3ad", "pass key 71432.",
          "literal <|endoftext|> <s></s> <pad> <|begin_of_text|> text"]


def corpus_texts(text_corpus):
  return [open(p, encoding="utf-8").read() for p in sorted(glob.glob(text_corpus))]


def build(kind: str, texts, folder, *, config: dict | None = None, specials=None, vocab=800):
  """Trains a small tokenizer of `kind` ("gpt2", "llama3", "mistral") and saves
  `folder/tokenizer.json` (and `tokenizer_config.json` with `config`); returns the folder."""
  from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                          processors, trainers)
  os.makedirs(folder, exist_ok=True)
  if kind == "mistral":
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  special_tokens=specials or ["<unk>", "<s>", "</s>"])
  else:
    tok = Tokenizer(models.BPE())
    if kind == "llama3":
      tok.pre_tokenizer = pre_tokenizers.Sequence([
          pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
      tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    default = (["<|begin_of_text|>", "<|end_of_text|>"] if kind == "llama3"
               else ["<|endoftext|>", "<pad>"])
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  special_tokens=default if specials is None else specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(texts, trainer)
  if kind in ("llama3", "mistral"):
    bos = "<|begin_of_text|>" if kind == "llama3" else "<s>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
  spec = json.loads(tok.to_str())
  if kind == "mistral":  # the 256 byte pieces <0x00>..<0xFF> of byte fallback, as in Mistral's
    v = spec["model"]["vocab"]
    n = max(v.values()) + 1
    for b in range(256):
      v.setdefault(f"<0x{b:02X}>", n + b)
  with open(os.path.join(folder, "tokenizer.json"), "w") as f:
    json.dump(spec, f)
  if config is not None:
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
      json.dump(config, f)
  return str(folder)


@pytest.fixture(scope="module")
def hf(text_corpus, tmp_path_factory):
  """{"gpt2" | "llama3" | "mistral": folder holding a tokenizer.json}."""
  texts = corpus_texts(text_corpus) + [NUMBERS]
  root = tmp_path_factory.mktemp("hf")
  return {
      "gpt2": build("gpt2", texts, root / "gpt2"),
      # transformers' tokenizer_config.json: BOS as an AddedToken dict, no PAD (null)
      "llama3": build("llama3", texts, root / "llama3", vocab=1200, config={
          "bos_token": {"content": "<|begin_of_text|>", "special": True},
          "eos_token": "<|end_of_text|>", "pad_token": None}),
      "mistral": build("mistral", texts, root / "mistral"),
  }


def load(hf, kind) -> HFTokenizer:
  return get_tokenizer(f"hf:{hf[kind]}")


# ------------------------------------------------------------------ the tokenizer


@pytest.mark.parametrize("kind", ["gpt2", "llama3", "mistral"])
def test_round_trip_bytes_and_no_special_token_from_text(hf, text_corpus, kind):
  tok = load(hf, kind)
  for text in TRICKY + corpus_texts(text_corpus)[:3]:
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ((0 <= ids) & (ids < tok.vocab_size)).all()
    assert tok.decode(ids) == text and tok.decode_bytes(ids) == text.encode("utf-8")
    assert tok.encode(text.encode("utf-8")).tolist() == ids.tolist()
    assert tok.byte_lengths[ids].sum() == len(text.encode("utf-8"))
    assert not np.isin(ids, [tok.bos_id, tok.eos_id, tok.pad_id]).any()  # literal specials: text
    assert tok.decode([tok.bos_id, *ids.tolist(), tok.eos_id, tok.pad_id]) == text
  # Part of a character: a byte-level or byte-fallback token gives exactly its bytes.
  ids = tok.encode("\u65e5\u672c")
  assert b"".join(tok.decode_bytes([i]) for i in ids) == "\u65e5\u672c".encode()
  assert tok.decode_bytes(ids[:1]) == "\u65e5\u672c".encode()[:tok.byte_lengths[ids[0]]]
  assert tok == pickle.loads(pickle.dumps(tok)) and hash(tok) == hash(pickle.loads(pickle.dumps(tok)))
  with pytest.raises(ValueError, match="token ids"):
    tok.decode([tok.vocab_size])
  with pytest.raises(ValueError, match="UTF-8"):
    tok.encode(b"\xff\xfe")


def test_the_dummy_prefix_is_off_so_parts_encode_to_themselves(hf):
  tok = load(hf, "mistral")  # Prepend("\u2581") in its normalizer, Strip in its decoder
  assert tok.decode(tok.encode("Hello")) == "Hello"
  parts = ["The pass key is", " 71432", ".", "\n", " Remember it."]
  ids = np.concatenate([tok.encode(p) for p in parts])
  assert tok.decode(ids) == "".join(parts)


def test_special_ids_from_tokenizer_config_then_tokenizer_json(hf, text_corpus, tmp_path):
  gpt2, llama3, mistral = load(hf, "gpt2"), load(hf, "llama3"), load(hf, "mistral")
  # No tokenizer_config.json: EOS by name, BOS = EOS (GPT-2's one separator), PAD by name.
  assert gpt2.special_tokens == {"bos": "<|endoftext|>", "eos": "<|endoftext|>", "pad": "<pad>"}
  # tokenizer_config.json decides (pad_token null: none), then PAD = EOS.
  assert llama3.special_tokens == {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>",
                                   "pad": "<|end_of_text|>"}
  # BOS from the post-processor's template, EOS by name, no PAD: EOS.
  assert mistral.special_tokens == {"bos": "<s>", "eos": "</s>", "pad": "</s>"}
  for tok in (gpt2, llama3, mistral):
    ids = {r: getattr(tok, f"{r}_id") for r in ("bos", "eos", "pad")}
    assert ids == {r: tok._tok.token_to_id(t) for r, t in tok.special_tokens.items()}
    assert all(tok.byte_lengths[i] == 0 for i in ids.values())
  texts = corpus_texts(text_corpus)[:2]
  # A tokenizer_config.json token outside the vocabulary; a tokenizer with no special token.
  bad = build("gpt2", texts, tmp_path / "bad", vocab=300, config={"eos_token": "<|im_end|>"})
  with pytest.raises(ConfigError, match=r"names eos_token='<\|im_end\|>', which is not in"):
    get_tokenizer(f"hf:{bad}")
  bare = build("gpt2", texts, tmp_path / "bare", vocab=300, specials=[])
  with pytest.raises(ConfigError, match=rf"data.tokenizer='hf:{bare}/tokenizer.json' has no "
                                        r"BOS / EOS / PAD token"):
    get_tokenizer(f"hf:{bare}")
  # Another tokenizer_config.json over the same tokenizer.json: other special ids, not equal.
  other = build("gpt2", texts, tmp_path / "other", vocab=300, config={"pad_token": "<|endoftext|>"})
  assert get_tokenizer(f"hf:{other}").pad_id == get_tokenizer(f"hf:{other}").eos_id


def test_llama3_style_digits_merge_in_groups_of_at_most_three(hf):
  tok = load(hf, "llama3")
  pieces = [tok.decode_bytes([i]).decode() for i in tok.encode("1234567 and 42")]
  digits = [p for p in pieces if p.isdigit()]
  assert "".join(digits) == "123456742" and max(map(len, digits)) > 1
  assert all(len(p) <= 3 for p in digits) and len(digits) < 9
  # GPT-2 style: a number and its leading space can be one token
  gpt2 = load(hf, "gpt2")
  assert any(len(gpt2.decode_bytes([i]).strip()) > 1 for i in gpt2.encode(" 42 71432 999"))


@pytest.mark.parametrize("content,match", [
    (None, r"cannot read .*No such file"),
    ("{not json", r"is not a Hugging Face tokenizer.json"),
    ('{"version": "1.0"}', r"is not a Hugging Face tokenizer.json \(no 'model' object\)"),
    ('{"model": {"type": "Nonsense"}}', r"is not a Hugging Face tokenizer.json"),
])
def test_missing_or_malformed_tokenizer_json_is_one_line(tmp_path, content, match):
  if content is not None:
    (tmp_path / "tokenizer.json").write_text(content)
  with pytest.raises(ConfigError, match=r"data.tokenizer='hf:.*tokenizer.json'.*" + match) as e:
    get_tokenizer(f"hf:{tmp_path}")
  assert "\n" not in str(e.value)
  with pytest.raises(ConfigError, match="needs the path of a tokenizer.json"):
    get_tokenizer("hf:")


def test_a_lossy_tokenizer_is_refused(text_corpus, tmp_path):
  from tokenizers import Tokenizer, normalizers
  folder = build("gpt2", corpus_texts(text_corpus)[:2], tmp_path / "lower", vocab=300)
  tok = Tokenizer.from_file(f"{folder}/tokenizer.json")
  tok.normalizer = normalizers.Lowercase()
  tok.save(f"{folder}/tokenizer.json")
  with pytest.raises(ConfigError, match=r"does not encode text losslessly: .* \('The pass key"):
    get_tokenizer(f"hf:{folder}")


def test_vocab_size_below_the_tokenizers_is_refused_before_compilation(hf, text_corpus):
  tok = load(hf, "llama3")
  c = tiny_config(text_corpus)
  c.data.tokenizer = f"hf:{hf['llama3']}"
  c.model.vocab_size = tok.vocab_size - 1
  with pytest.raises(ConfigError, match=rf"model.vocab_size={tok.vocab_size - 1} is smaller than "
                                        rf"the 'hf:.*' tokenizer's {tok.vocab_size} ids"):
    validate(c, 1)
  c.model.vocab_size = tok.vocab_size
  validate(c, 1)


# ------------------------------------------------------------------ bits per byte


def test_bits_per_byte_count_the_utf8_bytes_of_the_scored_text(hf):
  tok = load(hf, "gpt2")
  text = "Ophelia \u2014 \u201cnymph, in thy orisons\u201d \u65e5\u672c\u8a9e \U0001f3ad 71432.\n" * 3
  ids = tok.encode(text)
  n = len(ids)
  docs = [Document("d", text.encode("utf-8"))]
  # One window of all n targets (BOS is the first input): the scored text is the whole text.
  windows = pipeline.document_windows(docs, tok, n)
  assert windows["targets"].shape == (1, n)
  assert perplexity.scored_bytes(windows, tok) == len(text.encode("utf-8")) > n
  # Windows that cut a character: each counts the bytes its tokens hold, partial ones included.
  half = pipeline.document_windows(docs, tok, n // 3)
  cut = [len(tok.decode_bytes(row)) for row in half["targets"]]
  assert sum(cut) == perplexity.scored_bytes(half, tok)
  assert sum(cut) == len(tok.decode_bytes(ids[:3 * (n // 3)]))
  # val_bits_per_byte = summed NLL / those bytes / ln 2 (a tiny random model).
  c = tiny_config("unused")
  c.model.vocab_size = tok.vocab_size
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  record = perplexity.score_validation(nll_fn, params, {"val_loss": windows}, batch_tokens=4 * n,
                                       mesh=mesh, tokenizer=tok)
  assert record["val_bits_per_byte"] == pytest.approx(
      record["val_loss"] * n / len(text.encode("utf-8")) / math.log(2), rel=1e-6)


# ------------------------------------------------------------------ retrieval prompts


def haystack_docs(text_corpus):
  docs = read_text_files(text_corpus)[:4]
  literal = Document("specials", b"A line with <|endoftext|> and <s> and <|begin_of_text|>.\n" * 5)
  return docs + [literal]


@pytest.mark.parametrize("kind", ["gpt2", "llama3"])
def test_passkey_prompts_have_exact_lengths_and_answers_scored_on_digits(hf, kind):
  tok = load(hf, kind)
  special = [tok.bos_id, tok.eos_id, tok.pad_id]
  prompts = passkey.PasskeyPrompts(tok, key_digits=5)
  merged = False
  for length in (prompts.min_length, prompts.min_length + 1, 333):
    for trial in range(12):
      p = prompts.cell(length, trial / 11, trial, seed=3)
      assert p.tokens.shape == (length,) and p.tokens[0] == tok.bos_id
      assert not np.isin(p.tokens[1:], special).any()
      needle_text = tok.decode(p.tokens[p.needle_start:p.needle_end])
      assert needle_text == passkey.PASSKEY_NEEDLE.format(key=p.answer)
      # The model's continuation " 71432." in this tokenizer's tokens (digits merged) is right.
      answer = tok.encode(f" {p.answer}.")
      merged |= any(len(tok.decode_bytes([i]).strip(b" .")) > 1 for i in answer)
      out = np.concatenate([answer, [tok.eos_id], tok.encode(" 99")])
      assert needle.is_correct(needle.continuation_text(tok, out), p.answer)
      assert not needle.is_correct(needle.continuation_text(tok, answer[:-2]), p.answer)
  assert merged
  with pytest.raises(ValueError, match="needs at least"):
    prompts.build(prompts.min_length - 1, 0.5, prompts._widest_key)
  # Held-out answer windows weigh the tokens that spell the key's digits, nothing else.
  w = passkey_training.answer_windows(tok, train_len=256, preamble=False, key_digits=5, count=6,
                                      seed=1)
  for targets, weights in zip(w["targets"], w["weights"]):
    scored = tok.decode(targets[weights > 0])
    assert scored.strip().isdigit() and len(scored.strip()) == 5


@pytest.mark.parametrize("kind", ["gpt2", "llama3"])
@pytest.mark.parametrize("suite", ["niah_multikey", "niah_multivalue", "variable_tracking",
                                   "common_words", "frequent_words"])
def test_ruler_prompts_have_exact_lengths_and_no_special_token(hf, text_corpus, kind, suite):
  from configs import base
  tok = load(hf, kind)
  special = [tok.bos_id, tok.eos_id, tok.pad_id]
  section = base.get_config().eval[suite]
  for shots in (0, 1):
    section.fewshot = shots
    builder = ruler.builder(suite, section, tok, haystack_docs(text_corpus))
    for length in (builder.min_length, builder.min_length + 2, builder.min_length + 150):
      for trial in range(6):
        p = builder.cell(length, 0.4, trial, seed=5)
        assert p.tokens.shape == (length,) and p.tokens[0] == tok.bos_id
        assert not np.isin(p.tokens[1:], special).any()
        answer = tok.encode(ruler.answer_text(p, suite))
        text = needle.continuation_text(tok, np.concatenate([answer, [tok.eos_id]]))
        if p.answers:
          assert needle.recall_all(text, p.answers) == 1.0
        else:
          assert needle.is_correct(text, p.answer)
        if suite == "niah_multikey":  # every needle, distractors included, spelled whole
          body = tok.decode(p.tokens)
          for k, v, _ in p.distractors:
            assert f"One of the special magic numbers for {k} is: {v}." in body
          assert tok.decode(p.tokens[p.needle_start:p.needle_end]) == (
              f"One of the special magic numbers for {p.key} is: {p.answer}.")


# ------------------------------------------------------------------ data.prepare and training


def test_prepare_copies_the_tokenizer_and_the_corpus_loads_with_it(hf, text_corpus, tmp_path):
  out = str(tmp_path / "prepared")
  m = prepare.prepare(text_corpus, f"hf:{hf['llama3']}", out, workers=2, show_progress=False)
  t = m["tokenizer"]
  assert t["kind"] == "hf" and t["config"] == f"hf:{os.path.abspath(out)}"
  assert os.path.exists(os.path.join(out, "tokenizer_config.json"))
  tok = get_tokenizer(t["config"])
  assert tok == load(hf, "llama3") and (t["bos_id"], t["pad_id"]) == (tok.bos_id, tok.pad_id)
  splits = corpora.load_prepared_splits(out, tok, 0.1, 0.1)
  text = corpora.split_documents(read_text_files(text_corpus), 0.1, 0.1)
  assert [d.data for d in splits["validation"]] == [d.data for d in text["validation"]]
  assert splits["train"].lengths.sum() == sum(len(tok.encode(d.data)) for d in text["train"])
  with pytest.raises(ConfigError, match=rf"set data.tokenizer='hf:{out}'"):
    corpora.load_prepared_splits(out, load(hf, "gpt2"), 0.1, 0.1)
  with pytest.raises(ConfigError, match=r"--tokenizer='hf:/nonexistent/tokenizer.json': cannot"):
    prepare.prepare(text_corpus, "hf:/nonexistent/tokenizer.json", str(tmp_path / "x"), workers=1,
                    show_progress=False)


def test_a_tiny_model_trains_with_a_hf_tokenizer(hf, text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.data.tokenizer = f"hf:{hf['llama3']}"
  c.model.vocab_size = load(hf, "llama3").vocab_size
  c.train.num_steps = 3
  c.eval.length_multipliers = (1.0,)
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  with open(tmp_path / "metrics.jsonl") as f:
    steps = [r["step"] for r in map(json.loads, f) if "loss" in r]
  assert steps == [1, 2, 3] and np.isfinite(out["val_loss"])
  row = out["ppl_vs_length"]["rows"][0]
  assert row["tokens"] > 0 and row["bytes"] > row["tokens"]  # several bytes per token
