"""The one data entry point of a run: the corpus splits, the training iterator and the named
validation sets, whatever the run trains on (text, text with passkey documents mixed in, or an
algorithmic task). The training loop scores every validation set the same way and never asks
which kind of data it has."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

import numpy as np

from configs.errors import ConfigError
from data import (corpora, corpus_sources, passkey_training, pipeline, position_layouts,
                  position_samplers, retrieval_mix)
from data.tasks import dataset as task_dataset
from data.tokenizers import get_tokenizer

# Held-out passkey documents whose answer digits are scored at each evaluation of a passkey run
# (data/passkey_training.py answer_windows): 32 x 5 digits, a few milliseconds of compute.
PASSKEY_ANSWER_DOCUMENTS = 32


def load_splits(config) -> dict[str, list[corpora.Document]]:
  """Loads the configured corpus and splits it by document (see data.corpora.split_documents).

  With `data.source = "array_record"` the corpus was split when prepared (python -m
  data.prepare): held-out splits come as TokenizedDocuments, the training split as a
  PreparedSplit read from its shards on demand (data.corpora.load_prepared_splits). A run on an
  algorithmic task (data.task.name) has no corpus: {}.

  Raises:
    ConfigError: the corpus cannot be read (data/corpora.py, data/corpus_sources.py).
  """
  d = config.data
  if d.task.name:
    return {}
  if d.source == "array_record":
    return corpora.load_prepared_splits(d.array_record_dir, get_tokenizer(d.tokenizer),
                                        d.validation_fraction, d.test_fraction)
  docs = corpus_sources.load_documents(d.source, d.text_glob, d.cache_dir or None,
                                      d.get("text_field", "text"), d.get("id_field", ""))
  return corpora.split_documents(docs, d.validation_fraction, d.test_fraction)


def split_names(docs) -> dict[str, list[str]]:
  """{split: its document names} of `load_splits`'s splits held in memory, for config.json; a
  prepared split (a `PreparedSplit`) is left out: its names are in its *.names.jsonl."""
  return {k: [d.name for d in v] for k, v in docs.items()
          if not isinstance(v, corpora.PreparedSplit)}


def token_unit(config) -> str:
  """What one token of the run is: "byte" (data.tokenizer='byte') or "token" (SentencePiece),
  the unit of its losses (nats per ...) in reports."""
  return "byte" if config.data.tokenizer == "byte" else "token"


def train_batch_spec(config, layout: position_layouts.PositionLayout | None = None
                     ) -> dict[str, tuple[tuple[int, int], Any]]:
  """{name: (shape, numpy dtype)} of a global training batch, all processes' shares of
  `Inputs.train` together: int32 [data.batch_size, data.train_len] inputs, targets, positions,
  segment_ids (+ aux_positions with a position `layout`, data/position_layouts.py), and float32
  weights for an algorithmic task (what train.py compiles its step for before any data is
  read)."""
  shape = (config.data.batch_size, config.data.train_len)
  spec = {k: (shape, np.dtype(np.int32)) for k in ("inputs", "targets", "positions", "segment_ids")}
  if layout is not None:
    spec["aux_positions"] = (shape, np.dtype(np.int32))
  if config.data.task.name:
    spec["weights"] = (shape, np.dtype(np.float32))
  return spec


@dataclasses.dataclass
class Inputs:
  """What a training run reads.

  Attributes:
    train: iterator of this process's share of each global batch: int32 [batch_size /
      process_count, train_len] inputs, targets, positions, segment_ids (+ float32 weights for a
      task: 1 at answer targets only); a grain DatasetIterator, checkpointed with the run.
    validation: {metric name: windows (the same arrays, [n, train_len])}, scored at every
      evaluation as the mean NLL of their weighted targets: "val_loss" (held-out text windows, or
      held-out task examples of the training sizes) and, for a passkey run,
      "val_passkey_answer_nll" (the key digits of held-out passkey documents), for a
      retrieval-mix run "val_retrieval_answer_nll" (the answers of held-out prompts of
      data.retrieval_mix.suite, data/retrieval_mix.py `answer_windows`).
    loss_unit: what val_loss is per: "byte" or "token" (text), "answer token" (a task).
    description: one line on the data, for the run's start-up report.
  """

  train: Iterator[dict[str, np.ndarray]]
  validation: dict[str, dict[str, np.ndarray]]
  loss_unit: str
  description: str

  def describe(self, record: dict) -> str:
    """One line of a validation `record` ({name: mean NLL} of `validation`): "validation loss X
    nats/<loss_unit>" and, for a passkey run, the answer digits' loss against chance (ln 10),
    for a retrieval-mix run the answers' loss."""
    passkey = record.get("val_passkey_answer_nll")
    mix = record.get("val_retrieval_answer_nll")
    return (f"validation loss {record['val_loss']:.4f} nats/{self.loss_unit}"
            + (f"; passkey answer digits {passkey:.3f} nats (chance {math.log(10):.3f}; near 0 "
               "once the key is copied from the needle)" if passkey is not None else "")
            + (f"; retrieval answers {mix:.3f} nats/token (near 0 once the answers are copied "
               "from the needles)" if mix is not None else ""))

  def describe_final(self, record: dict) -> str:
    """`describe` plus val_loss in bits per byte (per answer byte for a task) and the number of
    targets it scored (train.eval_tokens of held-out text: other text than the evaluation
    suites score, so its figures differ from theirs)."""
    windows = self.validation["val_loss"]
    scored = int((windows["weights"] > 0).sum()) if "weights" in windows else windows["targets"].size
    per = "answer byte" if self.loss_unit == "answer token" else "byte"
    return (f"{self.describe(record)} ({record['val_bits_per_byte']:.4f} bits/{per}; "
            f"{scored:,} targets, train.eval_tokens)")


def make_inputs(config, docs, tokenizer, *, process_index: int = 0, process_count: int = 1,
                layout: position_layouts.PositionLayout | None = None) -> Inputs:
  """The training iterator and validation sets of `config` (see `Inputs`).

  Args:
    config: the experiment config (data.*, train.eval_tokens, eval.passkey.seed).
    docs: `load_splits(config)`.
    tokenizer: the run's tokenizer.
    process_index, process_count: this process among the job's (each reads its own share).
    layout: the scheme's position layout (`ModelSpec.layout`; None for a scheme that reads one
      position stream). With it, every training example gets its `aux_positions` (and, for
      BiPE, intra-segment `positions`), digit offsets drawn per document from the layout's seed
      (data/position_layouts.py). Validation windows go without: the model applies the layout
      itself, with no offset.

  Builds no batch yet (the iterator reads on its first `next`), so train.py calls it in its
  pre-flight: its refusals come before the workdir is made.

  Raises:
    ConfigError: data.batch_size not divisible by the processes, fewer training windows of
      data.train_len than one batch (data/pipeline.py `train_dataset`), or no validation
      document longer than data.train_len.
  """
  d = config.data
  if d.batch_size % process_count:
    raise ConfigError(f"data.batch_size={d.batch_size} must be divisible by the "
                      f"{process_count} processes (each feeds an equal share)")
  batch = d.batch_size // process_count
  sampler = position_samplers.make_sampler(d.position_sampler, d.train_len)
  validation: dict[str, Any] = {}
  if d.task.name:  # task rows (answer-only weights); validation: held-out examples of train sizes
    train = task_dataset.train_dataset(d.task, tokenizer, train_len=d.train_len, batch_size=batch,
                                       process_index=process_index, sampler=sampler,
                                       layout=layout)
    validation["val_loss"] = task_dataset.validation_rows(d.task, tokenizer, d.train_len)
    unit = "answer token"
    description = f"task {d.task.name!r}, sizes {d.task.train_min_size}..{d.task.train_max_size}"
  else:
    train_docs = (docs["train"] if isinstance(docs["train"], corpora.PreparedSplit)  # lazy shards
                  else retrieval_mix.training_documents(  # + passkey / retrieval-format prompts
                      passkey_training.training_documents(docs["train"], d, tokenizer), config,
                      tokenizer))
    train = pipeline.train_dataset(  # + passkey documents if data.passkey.fraction > 0
        train_docs, tokenizer, train_len=d.train_len, batch_size=batch, seed=d.shuffle_seed,
        process_index=process_index, process_count=process_count, sampler=sampler,
        prefetch=d.get("prefetch_batches", 4), layout=layout, bos_anchor=d.get("bos_anchor", False))
    validation["val_loss"] = pipeline.document_windows(
        docs["validation"], tokenizer, d.train_len,
        -(-config.train.eval_tokens // max(1, len(docs["validation"]))))
    unit = token_unit(config)
    description = (f"{len(docs['train'])} train / {len(docs['validation'])} validation / "
                   f"{len(docs['test'])} test documents")
  if len(validation["val_loss"]["inputs"]) == 0:
    raise ConfigError(f"no validation document is longer than data.train_len={d.train_len} "
                      "tokens; raise data.validation_fraction or shorten train_len")
  if not d.task.name and d.passkey.fraction > 0:  # is the lookup learned yet? (the key's digits)
    p = d.passkey
    validation["val_passkey_answer_nll"] = passkey_training.answer_windows(
        tokenizer, train_len=d.train_len, preamble=p.preamble, key_digits=p.key_digits,
        count=PASSKEY_ANSWER_DOCUMENTS, seed=config.eval.passkey.seed)
  mix = d.get("retrieval_mix")
  if not d.task.name and mix is not None and mix.fraction > 0:  # the same, for the retrieval mix
    validation["val_retrieval_answer_nll"] = retrieval_mix.answer_windows(
        config, tokenizer, docs["validation"], count=PASSKEY_ANSWER_DOCUMENTS)
  return Inputs(iter(train), validation, unit, description)
