"""The retrieval training mix `data.retrieval_mix`: prompts of one evaluation suite (data/ruler.py
`builder`: RULER's needle suites, variable tracking, word extraction), each followed by its
answer, mixed into text training as whole blocks of train_len tokens (data/passkey_training.py
`block_documents`); held-out windows of such prompts scored on their answers (`answer_windows`,
logged as val_retrieval_answer_nll); and the checks of data.retrieval_mix (`check_mix`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from configs.errors import ConfigError
from data.corpora import Document
from data.passkey_training import answer_rows, block_documents
from data.retrieval_prompt import _ids
from data.ruler import BUILDER_SUITES, NOISE_HAYSTACK, answer_text, builder
from data.tokenizers import ByteTokenizer, get_tokenizer


# ---------------------------------------------------------------------------- the training mix


def mix_format(config, tokenizer: ByteTokenizer, docs: Sequence[Document]):
  """(builder over `docs`, answer tokens, shortest document in tokens) of the training mix
  `data.retrieval_mix` (the format of eval.<suite>, so training and evaluation prompts agree).

  Raises:
    ValueError: a document longer than data.train_len even without haystack.
  """
  suite = config.data.retrieval_mix.suite
  prompts = builder(suite, config.eval[suite], tokenizer, docs)
  answer_len = len(_ids(tokenizer, answer_text(prompts.cell(prompts.min_length, 0.0, 0, 0),
                                                suite)))
  n_min = prompts.min_length + answer_len
  if n_min > config.data.train_len:
    raise ValueError(f"a {suite} training document needs at least {n_min} tokens; "
                     f"data.train_len is {config.data.train_len}")
  return prompts, answer_len, n_min


def training_documents(train_docs: Sequence[Document], config,
                       tokenizer: ByteTokenizer) -> list[Document]:
  """`train_docs` followed by the retrieval prompts of `data.retrieval_mix` (answer included).

  With data.retrieval_mix.fraction = f > 0, about f of the training windows are blocks of
  prompts of the suite data.retrieval_mix.suite, in its evaluation format (eval.<suite>: preamble,
  value digits, needle counts, haystack), each followed by its answer (`answer_text`), laid out
  as the passkey documents are (data/passkey_training.py `block_documents`: whole blocks of
  train_len tokens, a text snippet at each block's end). The haystack is the training split itself (or
  RULER's noise with eval.<suite>.haystack = "noise"), never held-out text. A document's length
  is uniform in [shortest, tokens left in its block], its depth uniform in [0, 1], its keys and
  values from `cell_rng(data.retrieval_mix.seed + 1_000_003, suite, length, depth, trial)` with
  a random trial, so no training prompt is an evaluation prompt. Only training data goes
  through it.

  Raises:
    ValueError: see `mix_format` and `block_documents`.
  """
  mix = config.data.get("retrieval_mix")
  if mix is None or mix.fraction == 0:
    return list(train_docs)
  prompts, answer_len, n_min = mix_format(config, tokenizer, train_docs)
  seed = int(mix.seed) + 1_000_003  # apart from the evaluation seeds

  def draw(rng, left):
    n = int(rng.integers(n_min, left + 1))
    depth, trial = float(rng.random()), int(rng.integers(2 ** 31))
    prompt = prompts.cell(n - answer_len, depth, trial, seed)
    return (tokenizer.decode_bytes(prompt.tokens[1:]) + answer_text(prompt, mix.suite).encode(),
            prompt.length + answer_len)

  return list(train_docs) + block_documents(
      train_docs, tokenizer, train_len=config.data.train_len, fraction=float(mix.fraction),
      rng=np.random.default_rng([int(mix.seed), 13]), n_min=n_min, draw=draw, name=mix.suite)


def answer_windows(config, tokenizer: ByteTokenizer, docs: Sequence[Document], *, count: int
                   ) -> dict[str, np.ndarray]:
  """Held-out prompts of the training mix `data.retrieval_mix`, scored on their answers only: is
  the retrieval learned yet? train.py logs the weighted mean NLL as `val_retrieval_answer_nll`
  (nats per answer token) at each evaluation of a run with data.retrieval_mix.fraction > 0, as
  it logs `val_passkey_answer_nll` for a passkey run (data/passkey_training.py `answer_windows`).

  `count` prompts drawn like the training ones (`training_documents`: length uniform in
  [shortest, train_len], depth uniform in [0, 1]), one per row, padded to train_len, with
  their haystack from `docs` (the validation split: held-out text) and their keys and values
  from `cell_rng(data.retrieval_mix.seed + 2_000_003, ...)`, a seed of neither the training
  prompts nor the evaluation suites. Every token of the answer text (`answer_text`: the values
  with their separators, or the variable names) has weight 1, the rest 0.

  Args:
    config: the experiment config (data.retrieval_mix, data.train_len, eval.<suite>).
    tokenizer: the byte tokenizer.
    docs: the haystack documents (held-out text).
    count: prompts (rows), >= 1.

  Returns:
    dict of [count, train_len] arrays: int32 inputs, targets, positions, segment_ids (1 on the
    prompt and answer, 0 on padding) and float32 weights (1 on the answer's targets).

  Raises:
    ValueError: count < 1, or see `mix_format`.
  """
  if count < 1:
    raise ValueError(f"count must be >= 1; got {count}")
  mix, train_len = config.data.retrieval_mix, config.data.train_len
  prompts, answer_len, n_min = mix_format(config, tokenizer, docs)
  seed = int(mix.seed) + 2_000_003  # apart from the training prompts and the evaluation seeds
  rng = np.random.default_rng([int(mix.seed), 17])
  rows = []
  for row in range(count):
    n = int(rng.integers(n_min, train_len + 1))
    prompt = prompts.cell(n - answer_len, float(rng.random()), row, seed)
    answer = _ids(tokenizer, answer_text(prompt, mix.suite))
    rows.append((prompt.tokens, answer, 0, len(answer)))
  return answer_rows(tokenizer, train_len, rows)


def check_mix(config) -> None:
  """Checks data.retrieval_mix (skipped when an older config lacks it).

  Raises:
    ConfigError: fraction outside [0, 1); a fraction > 0 without a suite of BUILDER_SUITES; a
      seed that is not an integer >= 0; a mix with an algorithmic task, with
      data.passkey.fraction > 0 (one synthetic format at a time), with a tokenizer other than
      the byte tokenizer (the layout counts bytes) or with a prepared corpus; or a document that
      cannot fit data.train_len.
  """
  mix = config.data.get("retrieval_mix")
  if mix is None:
    return
  f = mix.fraction
  if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
    raise ConfigError(f"data.retrieval_mix.fraction must lie in [0, 1) (share of training "
                      f"windows; 0 = none); got {f!r}")
  if not isinstance(mix.seed, int) or isinstance(mix.seed, bool) or mix.seed < 0:
    raise ConfigError(f"data.retrieval_mix.seed must be an integer >= 0; got {mix.seed!r}")
  if f == 0:
    return
  if mix.suite not in BUILDER_SUITES:
    raise ConfigError(f"data.retrieval_mix.suite={mix.suite!r} must be one of "
                      f"{list(BUILDER_SUITES)} when data.retrieval_mix.fraction > 0")
  if config.data.task.name:
    raise ConfigError(f"data.retrieval_mix.fraction={f} mixes retrieval prompts into text "
                      f"training; it must be 0 with an algorithmic task "
                      f"(data.task.name={config.data.task.name!r})")
  if config.data.passkey.fraction > 0:
    raise ConfigError("data.retrieval_mix.fraction > 0 and data.passkey.fraction > 0: mix one "
                      "synthetic format at a time (set one of them to 0)")
  if config.data.tokenizer != "byte":
    raise ConfigError(f"data.retrieval_mix.fraction={f} lays prompts out in whole windows by "
                      f"counting bytes: it needs data.tokenizer='byte'; got "
                      f"{config.data.tokenizer!r} (set data.retrieval_mix.fraction=0)")
  if config.data.source == "array_record":
    raise ConfigError("data.retrieval_mix needs the training text as documents; a prepared "
                      "corpus (data.source='array_record') is read as shards: set "
                      "data.retrieval_mix.fraction=0 or data.source='text_files'")
  noise = [Document("noise", NOISE_HAYSTACK.encode())]  # min_length does not depend on it
  try:
    mix_format(config, get_tokenizer(config.data.tokenizer), noise)
  except ValueError as e:
    raise ConfigError(f"data.retrieval_mix: {e} (raise data.train_len, or set "
                      f"eval.{mix.suite}.preamble=False)") from None
