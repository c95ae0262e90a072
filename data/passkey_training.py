"""Passkey training documents: Mohtashami & Jaggi's passkey prompt (Landmark Attention, arXiv
2305.16300, Appendix; data/passkey.py PasskeyPrompts) followed by its answer, laid out in whole
training windows, and held-out answer windows that score the key's digits only.

Training documents (`training_documents`): passkey prompts of random lengths (up to
`data.train_len` tokens with the answer), random depths and keys, each followed by its answer
(" " + key + "."), so that a small model learns retrieval in distribution. They are laid out so
that every one lies wholly inside one training window (see `passkey_documents`).

`block_documents` (the block layout) and `answer_rows` (windows scored on part of each answer)
serve any prompt format: the retrieval training mix (data/retrieval_mix.py) uses them too.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from configs.errors import ConfigError
from data.corpora import Document
from data.passkey import PasskeyPrompts
from data.retrieval_prompt import RetrievalPrompt, _ids, covering_tokens, random_digits
from data.tokenizers import ByteTokenizer


# ---------------------------------------------------------------------------- training documents


def answer_suffix(key: str) -> str:
  """What follows a passkey prompt in a training document: " " + key + "."."""
  return f" {key}."


def min_document_len(tokenizer: ByteTokenizer, *, preamble: bool, key_digits: int) -> int:
  """Tokens (BOS included) of the shortest passkey training document: no filler, plus the answer.

  Raises:
    ValueError: key_digits outside [1, MAX_DIGITS].
  """
  prompts = PasskeyPrompts(tokenizer, preamble=preamble, key_digits=key_digits)
  return prompts.min_length + len(_ids(tokenizer, answer_suffix("9" * key_digits)))


MIN_FILLER_SHARE = 0.25  # of train_len: the least room for filler a training document may leave


def check_filler_room(config) -> None:
  """Refuses passkey training whose documents leave too little room for filler.

  A training document is at most `data.train_len` tokens and at least `min_document_len`: the
  filler (hence the document's length and the needle's depth in tokens) can vary only over the
  difference. With the preamble at train_len 256 that is 1 token (255 of 256 are fixed): every
  training prompt then has the same layout and the needle the same position, and a model that
  fails to retrieve beyond it says nothing about its positional scheme (the retrieval track of
  results/context_extension_cpu.md was trained so). Required: room >= MIN_FILLER_SHARE x train_len.

  Raises:
    ConfigError: data.passkey.fraction > 0 with less room, naming the room and the fixes.
  """
  p, L = config.data.get("passkey"), config.data.train_len
  if p is None or not p.fraction > 0:
    return
  room = L - min_document_len(ByteTokenizer(), preamble=p.preamble, key_digits=p.key_digits)
  if room < MIN_FILLER_SHARE * L:
    raise ConfigError(
        f"data.passkey.fraction={p.fraction}: a passkey training document with "
        f"data.passkey.preamble={p.preamble} and key_digits={p.key_digits} leaves {max(room, 0)} of "
        f"data.train_len={L} tokens for filler, under a quarter ({MIN_FILLER_SHARE * L:g}): its "
        "length and needle depth would hardly vary; set data.passkey.preamble=False, fewer "
        "key_digits or a longer train_len")


def _document_format(tokenizer: ByteTokenizer, train_len: int, preamble: bool,
                     key_digits: int) -> tuple[PasskeyPrompts, int, int]:
  """(prompts, answer tokens, shortest document in tokens) of passkey documents in train_len.

  Raises:
    ValueError: a document longer than train_len even without filler.
  """
  prompts = PasskeyPrompts(tokenizer, preamble=preamble, key_digits=key_digits)
  answer_len = len(_ids(tokenizer, answer_suffix("9" * key_digits)))
  n_min = prompts.min_length + answer_len
  if n_min > train_len:
    raise ValueError(f"a passkey training document needs at least {n_min} tokens "
                     f"(preamble={preamble}, key_digits={key_digits}); train_len is {train_len}")
  return prompts, answer_len, n_min


def _draw_document(prompts: PasskeyPrompts, rng: np.random.Generator, n_min: int, n_max: int,
                   answer_len: int) -> tuple[RetrievalPrompt, str]:
  """One document's prompt and key: length uniform in [n_min, n_max] tokens (answer included),
  then the key, then the depth uniform in [0, 1] (this draw order keeps documents reproducible)."""
  n = int(rng.integers(n_min, n_max + 1))
  key = random_digits(rng, prompts.key_digits)
  return prompts.build(n - answer_len, float(rng.random()), key), key


def passkey_documents(text_docs: Sequence[Document], tokenizer: ByteTokenizer, *, train_len: int,
                      fraction: float, seed: int, preamble: bool,
                      key_digits: int) -> list[Document]:
  """Passkey training documents to append after `text_docs` in the packed training stream.

  The training stream (data/pipeline.py) concatenates documents (BOS + tokens) in list order and
  cuts it into windows whose inputs are stream tokens [i * L, (i + 1) * L), L = train_len. The
  documents returned here tile whole blocks of L tokens that start where the text of `text_docs`
  ends rounded up to a multiple of L, so each one lies inside one window (the first block is the
  gap up to that multiple). Within a block, passkey documents (prompt + " " + key + ".") are
  drawn while they fit: length uniform in [min_document_len, min(L, tokens left)], depth uniform
  in [0, 1], key uniform over `key_digits`-digit numbers; the remainder of the block, shorter than
  a passkey document, is a snippet of a random `text_docs` document (so block boundaries never
  cut a passkey document). With the window shuffle, about `fraction` of the training windows are
  passkey blocks. The last block has no target after its last token, so the pipeline drops it.

  Args:
    text_docs: the training split's text documents (non-empty).
    tokenizer: the byte tokenizer.
    train_len: L, tokens.
    fraction: share of training windows made of passkey documents, in [0, 1).
    seed: seed of the lengths, depths, keys and snippets.
    preamble, key_digits: the passkey prompt format (see PasskeyPrompts).

  Returns:
    Documents named "passkey-%06d" (passkey) and "passkey-text-%06d" (snippets), in stream order;
    [] when fraction is 0.

  Raises:
    ValueError: fraction outside [0, 1), no non-empty text document, a passkey document longer
      than train_len even without filler, or a tokenizer that is not one token per byte (the
      block layout counts bytes).
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"fraction must lie in [0, 1); got {fraction}")
  if fraction == 0.0:
    return []
  prompts, answer_len, n_min = _document_format(tokenizer, train_len, preamble, key_digits)

  def draw(rng, left):
    prompt, key = _draw_document(prompts, rng, n_min, left, answer_len)
    return (tokenizer.decode_bytes(prompt.tokens[1:]) + answer_suffix(key).encode(),
            prompt.length + answer_len)

  return block_documents(text_docs, tokenizer, train_len=train_len, fraction=fraction,
                         rng=np.random.default_rng([int(seed), 7]), n_min=n_min, draw=draw,
                         name="passkey")


def block_documents(text_docs: Sequence[Document], tokenizer: ByteTokenizer, *, train_len: int,
                    fraction: float, rng: np.random.Generator, n_min: int, draw,
                    name: str) -> list[Document]:
  """Synthetic training documents tiling whole blocks of train_len tokens after the text (the
  layout `passkey_documents` describes), for any prompt format.

  Args:
    text_docs: the training split's text documents (non-empty); snippets fill block ends.
    tokenizer: a tokenizer of one token per byte (the layout counts bytes).
    train_len: L, tokens.
    fraction: share of training windows made of synthetic documents, in (0, 1).
    rng: the generator of every draw.
    n_min: tokens (BOS included) of the shortest synthetic document.
    draw: (rng, tokens left in the block, >= n_min) -> (document bytes, its tokens with BOS).
    name: documents are named "<name>-%06d" and the snippets "<name>-text-%06d".

  Raises:
    ValueError: no non-empty text document, or a tokenizer that is not one token per byte.
  """
  sources = [d.data for d in text_docs if d.data]
  if not sources:
    raise ValueError(f"{name} training documents need at least one non-empty text document")
  text_tokens = sum(len(tokenizer.encode(d.data)) + 1 for d in text_docs)
  gap = -text_tokens % train_len
  blocks = round(fraction / (1.0 - fraction) * (text_tokens + gap) / train_len)
  docs: list[Document] = []
  counts = {name: 0, f"{name}-text": 0}

  def add(kind: str, data: bytes) -> None:
    docs.append(Document(f"{kind}-{counts[kind]:06d}", data))
    counts[kind] += 1

  for size in ([gap] if gap else []) + [train_len] * blocks:
    left = size
    while left >= n_min:
      data, tokens = draw(rng, left)
      add(name, data)
      left -= tokens
    if left:  # a snippet of left - 1 bytes (+ BOS), read cyclically from a random offset
      source = np.frombuffer(sources[int(rng.integers(len(sources)))], np.uint8)
      idx = (int(rng.integers(len(source))) + np.arange(left - 1)) % len(source)
      add(f"{name}-text", source[idx].tobytes())
  laid_out = sum(len(tokenizer.encode(d.data)) + 1 for d in docs)
  if laid_out != gap + blocks * train_len:
    raise ValueError(f"{name} documents take {laid_out} tokens, not the "
                     f"{gap + blocks * train_len} of their blocks: the tokenizer does not map one "
                     "byte to one token")
  return docs


def answer_windows(tokenizer: ByteTokenizer, *, train_len: int, preamble: bool, key_digits: int,
                   count: int, seed: int) -> dict[str, np.ndarray]:
  """Held-out passkey documents scored on the key's digits only: is the lookup learned yet?

  The documents are Mohtashami & Jaggi's passkey prompt (arXiv 2305.16300, Appendix) followed by
  the answer, as in training; scoring only the answer's digits is this project's diagnostic.

  `count` documents drawn like the training ones (`passkey_documents`: length uniform in
  [min_document_len, train_len], depth uniform in [0, 1], a random key) from their own seed, one
  per row, each row padded to train_len. Only the targets that are the answer's digits have
  weight 1, so the weighted mean NLL is nats per answer digit: ln 10 = 2.303 while the model
  only knows the answer's format, near 0 once it copies the key from the needle. (Under a
  tokenizer that merges digits, the tokens that spell the digits have weight 1: nats per such
  token.) train.py logs it as `val_passkey_answer_nll` at each evaluation of a run with
  data.passkey.fraction > 0.

  Args:
    tokenizer: the byte tokenizer.
    train_len: row length, tokens.
    preamble, key_digits: the passkey prompt format (see PasskeyPrompts).
    count: documents (rows), >= 1.
    seed: seed of the lengths, depths and keys.

  Returns:
    dict of [count, train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on the
    document, 0 on padding) and float32 weights (1 on the `key_digits` answer targets).

  Raises:
    ValueError: count < 1, or a document that cannot fit train_len (as passkey_documents).
  """
  if count < 1:
    raise ValueError(f"count must be >= 1; got {count}")
  prompts, answer_len, n_min = _document_format(tokenizer, train_len, preamble, key_digits)
  rng = np.random.default_rng([int(seed), 11])
  rows = []
  for _ in range(count):
    prompt, key = _draw_document(prompts, rng, n_min, train_len, answer_len)
    # the answer " 71432.": its digits are bytes 1 .. key_digits (tokens 1 .. key_digits with
    # the byte tokenizer; the tokens that hold them with one that merges digits)
    answer = _ids(tokenizer, answer_suffix(key))
    rows.append((prompt.tokens, answer, *covering_tokens(tokenizer, answer, 1, 1 + key_digits)))
  return answer_rows(tokenizer, train_len, rows)


def answer_rows(tokenizer: ByteTokenizer, train_len: int,
                rows: Sequence[tuple[np.ndarray, np.ndarray, int, int]]) -> dict[str, np.ndarray]:
  """Validation windows scored on part of each prompt's answer: one row per (prompt tokens,
  answer tokens, first, stop), the prompt followed by its answer, padded to train_len, with
  weight 1 on the targets that are answer tokens first..stop-1 (0-based in the answer).

  Returns:
    dict of [len(rows), train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on
    the prompt and answer, 0 on padding) and float32 weights.

  Raises:
    ValueError: a prompt and answer longer than train_len + 1 tokens.
  """
  out = {k: np.zeros((len(rows), train_len), np.int32)
         for k in ("inputs", "targets", "positions", "segment_ids")}
  out["inputs"][:], out["targets"][:] = tokenizer.pad_id, tokenizer.pad_id
  out["weights"] = np.zeros((len(rows), train_len), np.float32)
  for row, (prompt, answer, first, stop) in enumerate(rows):
    tokens = np.concatenate([prompt, answer])
    m = len(tokens) - 1  # inputs tokens[:-1], targets tokens[1:]
    if m > train_len:
      raise ValueError(f"a {len(tokens)}-token prompt and answer exceed train_len={train_len}")
    out["inputs"][row, :m], out["targets"][row, :m] = tokens[:-1], tokens[1:]
    out["positions"][row, :m] = np.arange(m)
    out["segment_ids"][row, :m] = 1
    # answer token j is tokens[len(prompt) + j]: the target at len(prompt) - 1 + j
    out["weights"][row, len(prompt) - 1 + first:len(prompt) - 1 + stop] = 1.0
  return out


def training_documents(train_docs: Sequence[Document], data_config,
                       tokenizer: ByteTokenizer) -> list[Document]:
  """The training split's documents followed by the passkey documents of `data_config.passkey`.

  The hook between corpus and pipeline (train.py): with `data.passkey.fraction` = 0 it returns
  the documents unchanged; otherwise it appends `passkey_documents` (Mohtashami & Jaggi's prompt
  format, arXiv 2305.16300). Only training data goes through it.

  Args:
    train_docs: the training split.
    data_config: `config.data` (train_len and the passkey section).
    tokenizer: the byte tokenizer.

  Raises:
    ValueError: see `passkey_documents` (configs/validate.py rejects such configs earlier).
  """
  p = data_config.passkey
  return list(train_docs) + passkey_documents(
      train_docs, tokenizer, train_len=data_config.train_len, fraction=p.fraction, seed=p.seed,
      preamble=p.preamble, key_digits=p.key_digits)
