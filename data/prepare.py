"""Prepares a corpus for training at scale: text -> (SentencePiece model) -> ArrayRecord token shards.

  python -m data.prepare --source='corpus/**/*.txt' --tokenizer=byte --out=/data/corpus_byte
  python -m data.prepare --source='dump/*.jsonl' --tokenizer=sentencepiece:32000 --out=/data/corpus_sp32k
  python -m data.prepare --source='fineweb-edu/sample/10BT/*.parquet' --text_field=text \\
      --id_field=id --tokenizer=sentencepiece:32768 --out=/data/fineweb_edu_sp32k

Steps, all before anything is written to `--out` but the tokenizer model:
  1. List the documents of `--source` (data/corpus_formats.py, as `data.source = "text_files"`
     does; a tqdm bar over the records): one per `.txt` file (named by file stem), or one per
     record of JSON-lines files (`.jsonl`/`.json`, gzip `.jsonl.gz`, zstandard `.jsonl.zst`: the
     string `--text_field` of each object) or of parquet files (the `--text_field` column of
     each row), named by `--id_field` or `<file stem>:<line or row>`. Every record is checked
     here: a file without the text field, a corrupt file or an unknown extension stops the run
     with one line (exit 2). Compressed and parquet files are streamed once and their texts
     spilled, uncompressed, under `--tmp_dir` (removed at the end).
  2. Split them by document with the rule of `data.corpora.split_documents` (sha256 of the name;
     `--validation_fraction`, `--test_fraction`), so the prepared splits are the ones the text
     path would make from the same documents.
  3. With `--tokenizer=sentencepiece:VOCAB`, train a SentencePiece model (Kudo & Richardson,
     arXiv 1808.06226; BPE or unigram, `--sp_model_type`) on the training split only: byte
     fallback, identity normalization, whitespace kept, digits split (as LLaMA, arXiv 2302.13971,
     Section 2.1), so `decode(encode(text)) == text` and no text is lost. Saved as
     `<out>/tokenizer.model`. With `--tokenizer=hf:<tokenizer.json or its folder>`, a Hugging
     Face tokenizer (data/hf_tokenizer.py; checked lossless when loaded) is copied, with the
     tokenizer_config.json beside it if any, to `<out>/tokenizer.json`; train with
     `data.tokenizer='hf:<out>'`.
  4. Tokenize every document in parallel (`--workers` processes, a tqdm progress bar) and write
     one ArrayRecord record per document: its token ids, without BOS/EOS, as a little-endian
     uint16 array (int32 when the vocabulary exceeds 65,536), into `<split>-NNNNN.array_record`
     shards of about `--shard_mb` MB, in name order, with `<split>.lengths.npy` (tokens per
     document) and `<split>.names.jsonl` (document names).
  5. Write `<out>/manifest.json` last: format, source, tokenizer (spec, vocabulary, special ids,
     sha256 of the model), split rule, per split the documents, tokens, bytes and shards.

Every file is written under a temporary name and renamed into place, and the manifest comes last,
so a directory with a manifest is complete. Train on it with
`--config.data.source=array_record --config.data.array_record_dir=<out>` (and the
`data.tokenizer` / `model.vocab_size` the command prints); see docs/pod_scale_data.md.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import multiprocessing
import os
import random
import re
import tempfile
from typing import Iterator, Sequence

import numpy as np
from absl import flags
from tqdm import tqdm

from configs.errors import ConfigError
from data import corpora, corpus_formats
from data.corpora import DocumentRef
from data.tokenizers import HF_PREFIX, ByteTokenizer, HFTokenizer, SentencePieceTokenizer, Tokenizer
from runs.command_line import check_writable, run
from runs.files import atomic_write, write_json

SOURCE_FORMATS = ("auto", *corpus_formats.FORMATS)
SP_MODEL_TYPES = ("bpe", "unigram")
SP_SPECIAL = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": 3}  # ids of the trained models
MIN_SP_VOCAB = len(SP_SPECIAL) + 256 + 1  # special pieces + 256 byte pieces + at least one more
SP_SENTENCE_CHARS = 4096  # training "sentences": runs of whole lines up to this many characters
MODEL_FILE = "tokenizer.model"


# ---------------------------------------------------------------------------- arguments


def parse_tokenizer_spec(spec: str) -> tuple[str, int]:
  """Parses `--tokenizer`: "byte" -> ("byte", 259); "sentencepiece:VOCAB" -> ("sentencepiece",
  VOCAB); "hf:<path>" -> ("hf", 0) (its vocabulary is read when `prepare` loads it).

  Raises:
    ConfigError: another form, a vocabulary that is not an integer, or one smaller than
      MIN_SP_VOCAB (4 special + 256 byte pieces + 1) or larger than 2**31 - 1.
  """
  if spec == "byte":
    return "byte", ByteTokenizer().vocab_size
  if isinstance(spec, str) and spec.startswith(HF_PREFIX):
    return "hf", 0
  m = re.fullmatch(r"sentencepiece:(\S+)", spec or "")
  if not m:
    raise ConfigError(f"--tokenizer={spec!r} is not supported; choose 'byte' or "
                      "'sentencepiece:VOCAB_SIZE' (e.g. sentencepiece:32000), or "
                      "'hf:<tokenizer.json or its folder>' (a Hugging Face tokenizer)")
  try:
    vocab = int(m.group(1))
  except ValueError:
    raise ConfigError(f"--tokenizer={spec!r}: VOCAB_SIZE must be an integer, e.g. "
                      "sentencepiece:32000") from None
  if not MIN_SP_VOCAB <= vocab < 2 ** 31:
    raise ConfigError(f"--tokenizer={spec!r}: the vocabulary must hold {len(SP_SPECIAL)} special "
                      f"and 256 byte pieces (byte fallback); choose VOCAB_SIZE >= {MIN_SP_VOCAB}")
  return "sentencepiece", vocab


def check_out_dir(out: str, overwrite: bool) -> None:
  """Checks that `out` can take a prepared corpus, creating nothing (`make_out_dir` creates it).

  Raises:
    ConfigError: `out` is empty or a URL, is a file, is not writable (or cannot be created: its
      nearest existing parent is a file or not writable), or already holds a prepared corpus
      (manifest.json) and `overwrite` is False.
  """
  if not out:
    raise ConfigError("--out is required: the directory to write the prepared corpus to")
  if "://" in out:
    raise ConfigError(f"--out={out!r}: write to a local directory, then copy it to the bucket "
                      "(gcloud storage cp -r); see docs/pod_scale_data.md")
  check_writable(out, "--out")
  if os.path.exists(os.path.join(out, corpora.MANIFEST)) and not overwrite:
    raise ConfigError(f"--out={out} already holds a prepared corpus ({corpora.MANIFEST}); "
                      "pass --overwrite to replace it, or choose another --out")


def make_out_dir(out: str) -> None:
  """Creates `out` (after `check_out_dir`).

  Raises:
    ConfigError: the file system refuses (naming --out and the reason).
  """
  try:
    os.makedirs(out, exist_ok=True)
  except OSError as e:
    raise ConfigError(f"--out={out} cannot be created: {e.strerror}") from e


# ---------------------------------------------------------------------------- SentencePiece


def training_sentences(text: str, max_chars: int = SP_SENTENCE_CHARS) -> Iterator[str]:
  """Cuts a document into SentencePiece training "sentences": runs of whole lines (newlines
  kept inside, so that newline pieces can be learned) of at most `max_chars` characters; a
  longer line is cut into slices of `max_chars`. Blank runs are dropped."""
  run, size = [], 0
  for line in text.splitlines(keepends=True):
    while len(line) > max_chars:
      yield line[:max_chars]
      line = line[max_chars:]
    if size + len(line) > max_chars and run:
      chunk = "".join(run)
      if chunk.strip():
        yield chunk
      run, size = [], 0
    run.append(line)
    size += len(line)
  chunk = "".join(run)
  if chunk.strip():
    yield chunk


def sample_sentences(refs: Sequence[DocumentRef], max_sentences: int, seed: int = 0) -> Iterator[str]:
  """Training sentences of `refs`, documents in a seeded random order, at most `max_sentences`
  of them (0 = all): a sample of the training split that bounds SentencePiece's memory and time."""
  order = list(range(len(refs)))
  random.Random(seed).shuffle(order)
  count = 0
  for i in order:
    for sentence in training_sentences(refs[i].read().decode("utf-8")):
      yield sentence
      count += 1
      if max_sentences and count >= max_sentences:
        return


def train_sentencepiece(sentences: Iterator[str], vocab_size: int, *, model_type: str = "bpe",
                        character_coverage: float = 0.9995, num_threads: int = 1) -> bytes:
  """Trains a lossless SentencePiece model (see module docstring, step 3) and returns its bytes.

  Args:
    sentences: training text, one "sentence" (a run of lines) per item.
    vocab_size: pieces in the model, special (unk 0, BOS 1, EOS 2, PAD 3) and byte pieces included.
    model_type: "bpe" (Sennrich et al., arXiv 1508.07909) or "unigram" (Kudo, arXiv 1804.10959).
    character_coverage: share of the characters of the text that get pieces of their own; the
      rest are spelled in byte pieces.
    num_threads: trainer threads.

  Returns:
    The serialized model (a `.model` file's bytes).

  Raises:
    ConfigError: bad `model_type` or `character_coverage`, or SentencePiece refuses the
      vocabulary for this corpus (too small for the required characters, or too large), naming
      the flag to change.
  """
  import sentencepiece as spm
  if model_type not in SP_MODEL_TYPES:
    raise ConfigError(f"--sp_model_type={model_type!r} is not supported; choose one of "
                      f"{list(SP_MODEL_TYPES)}")
  if not 0 < character_coverage <= 1:
    raise ConfigError(f"--sp_character_coverage must lie in (0, 1]; got {character_coverage}")
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=sentences, model_writer=model, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage, byte_fallback=True,
        normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
        max_sentence_length=4 * SP_SENTENCE_CHARS, num_threads=max(1, num_threads),
        minloglevel=2, **SP_SPECIAL)
  except RuntimeError as e:
    msg = str(e)
    need = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
    if need:
      raise ConfigError(
          f"--tokenizer=sentencepiece:{vocab_size} is too small for this corpus: it needs at "
          f"least {need.group(2)} pieces ({len(SP_SPECIAL)} special + 256 bytes + the characters "
          f"covering --sp_character_coverage={character_coverage} of the text); raise VOCAB_SIZE "
          "or lower --sp_character_coverage") from e
    raise ConfigError(f"--tokenizer=sentencepiece:{vocab_size}: SentencePiece could not train on "
                      f"this corpus ({msg.strip().splitlines()[-1]}); for a small corpus choose a "
                      "smaller VOCAB_SIZE") from e
  return model.getvalue()


# ---------------------------------------------------------------------------- tokenization workers

_WORKER: dict = {}


def _init_worker(tokenizer_state: bytes | None) -> None:
  """Builds the tokenizer once per worker process (`tokenizer_state`: a model's bytes, or None = byte)."""
  _WORKER["tokenizer"] = _build_tokenizer(tokenizer_state)
  _WORKER["dtype"] = corpora.record_dtype(_WORKER["tokenizer"].vocab_size)


def _build_tokenizer(model_bytes: bytes | HFTokenizer | None) -> Tokenizer:
  if isinstance(model_bytes, HFTokenizer):  # a Hugging Face tokenizer (pickled to each worker)
    return model_bytes
  return ByteTokenizer() if model_bytes is None else SentencePieceTokenizer(MODEL_FILE, model_bytes)


def _encode(ref: DocumentRef) -> tuple[bytes, int, int]:
  """Reads and tokenizes one document: (record bytes, tokens, text bytes)."""
  data = ref.read()
  ids = _WORKER["tokenizer"].encode(data)
  return np.asarray(ids).astype(_WORKER["dtype"]).tobytes(), len(ids), len(data)


# ---------------------------------------------------------------------------- writing


def _readable(tmp: str) -> None:
  os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the files from other users of a shared disk


class ShardWriter:
  """Writes one split's records into ArrayRecord shards of about `shard_bytes` bytes each.

  Each shard is written under a temporary name in `out` and renamed when complete.
  """

  def __init__(self, out: str, split: str, shard_bytes: int):
    self.out, self.split, self.shard_bytes = out, split, shard_bytes
    self.shards: list[dict] = []
    self._writer, self._tmp, self._current = None, None, None

  def write(self, record: bytes, tokens: int) -> None:
    """Appends one record (a document's token ids) of `tokens` tokens."""
    from array_record.python.array_record_module import ArrayRecordWriter
    if self._writer is None:
      name = f"{self.split}-{len(self.shards):05d}.array_record"
      fd, self._tmp = tempfile.mkstemp(dir=self.out, prefix=f".{name}.", suffix=".tmp")
      os.close(fd)
      self._current = {"file": name, "documents": 0, "tokens": 0, "record_bytes": 0}
      self._writer = ArrayRecordWriter(self._tmp, "group_size:1")  # grain reads group size 1 fastest
    self._writer.write(record)
    c = self._current
    c["documents"] += 1
    c["tokens"] += tokens
    c["record_bytes"] += len(record)
    if c["record_bytes"] >= self.shard_bytes:
      self._finish()

  def _finish(self) -> None:
    self._writer.close()
    self._writer = None
    _readable(self._tmp)
    os.replace(self._tmp, os.path.join(self.out, self._current["file"]))
    self.shards.append(self._current)

  def close(self) -> list[dict]:
    """Finishes the last shard; returns the shard list [{file, documents, tokens, record_bytes}]."""
    if self._writer is not None:
      self._finish()
    return self.shards

  def abort(self) -> None:
    """Drops the shard being written (after an error)."""
    if self._writer is not None:
      self._writer.close()
      self._writer = None
      if os.path.exists(self._tmp):
        os.remove(self._tmp)


def _write_lengths(path: str, lengths: Sequence[int]) -> None:
  def write(tmp):
    with open(tmp, "wb") as f:
      np.save(f, np.asarray(lengths, np.int64))
    _readable(tmp)
  atomic_write(path, write)


def _write_names(path: str, names: Sequence[str]) -> None:
  def write(tmp):
    with open(tmp, "w", encoding="utf-8") as f:
      f.writelines(json.dumps(n, ensure_ascii=False) + "\n" for n in names)
    _readable(tmp)
  atomic_write(path, write)


def _tokenize_split(refs: Sequence[DocumentRef], split: str, out: str, pool, workers: int,
                    shard_bytes: int, progress: tqdm) -> dict:
  """Tokenizes one split's documents in order (in `pool`, or here when None) and writes its files."""
  writer = ShardWriter(out, split, shard_bytes)
  lengths, tokens, text_bytes = [], 0, 0
  if pool is None:
    results = map(_encode, refs)
  else:  # ordered results; chunks amortise the inter-process traffic of small documents
    results = pool.imap(_encode, refs, chunksize=max(1, min(64, len(refs) // (4 * workers))))
  try:
    for record, n, b in results:
      writer.write(record, n)
      lengths.append(n)
      tokens += n
      text_bytes += b
      progress.update(1)
      progress.set_postfix(split=split, tokens=f"{tokens:,}", refresh=False)
    shards = writer.close()
  except BaseException:
    writer.abort()
    raise
  _write_lengths(os.path.join(out, f"{split}.lengths.npy"), lengths)
  _write_names(os.path.join(out, f"{split}.names.jsonl"), [r.name for r in refs])
  return {"documents": len(refs), "tokens": tokens, "text_bytes": text_bytes, "shards": shards,
          "lengths": f"{split}.lengths.npy", "names": f"{split}.names.jsonl"}


def _sha256(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _check_flags(validation_fraction: float, test_fraction: float, shard_mb: float, workers: int,
                sp_input_sentences: int, tmp_dir: str) -> None:
  """Checks `prepare`'s numeric flags and --tmp_dir.

  Raises:
    ConfigError: a fraction outside [0, 1), shard_mb <= 0, workers or sp_input_sentences not an
      integer >= 0, a tmp_dir that is not an existing directory.
  """
  for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
    if not 0 <= value < 1:
      raise ConfigError(f"--{name} must lie in [0, 1); got {value}")
  if not shard_mb > 0:
    raise ConfigError(f"--shard_mb must be > 0; got {shard_mb}")
  if not isinstance(workers, int) or workers < 0:
    raise ConfigError(f"--workers must be an integer >= 0 (0 = one per CPU); got {workers!r}")
  if not isinstance(sp_input_sentences, int) or sp_input_sentences < 0:
    raise ConfigError(f"--sp_input_sentences must be an integer >= 0 (0 = all); got {sp_input_sentences!r}")
  if tmp_dir and not os.path.isdir(tmp_dir):
    raise ConfigError(f"--tmp_dir={tmp_dir} is not a directory (it holds the texts of compressed "
                      "and parquet sources while preparing; '' = $TMPDIR)")
  if tmp_dir:
    check_writable(tmp_dir, "--tmp_dir")


def _drop_old_manifest(out: str) -> set[str]:
  """--overwrite: removes `out`'s manifest (the old corpus is incomplete from here on) and
  returns the shard files it listed (removed once the new manifest is written)."""
  old_manifest = os.path.join(out, corpora.MANIFEST)
  old_files = set()
  if os.path.exists(old_manifest):
    try:
      with open(old_manifest) as f:
        old = json.load(f)
      old_files = {s["file"] for v in old["splits"].values() for s in v["shards"]}
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
      pass
    os.remove(old_manifest)
  return old_files


def _tokenize_all(splits: dict[str, list[DocumentRef]], out: str, model_bytes: bytes | None,
                  workers: int, shard_bytes: int, show_progress: bool) -> dict:
  """Tokenizes and writes every split (`_tokenize_split`), in `workers` processes (1 = here),
  under one tqdm bar; returns {split: its manifest entry}."""
  progress = tqdm(total=sum(len(v) for v in splits.values()), desc="tokenize", unit="doc",
                  disable=not show_progress, dynamic_ncols=True)
  split_info = {}
  if workers == 1:
    _init_worker(model_bytes)
    for split in corpora.SPLITS:
      split_info[split] = _tokenize_split(splits[split], split, out, None, 1, shard_bytes, progress)
  else:
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
    with ctx.Pool(workers, initializer=_init_worker, initargs=(model_bytes,)) as pool:
      for split in corpora.SPLITS:
        split_info[split] = _tokenize_split(splits[split], split, out, pool, workers, shard_bytes,
                                            progress)
  progress.close()
  return split_info


def prepare(source: str, tokenizer: str, out: str, *, source_format: str = "auto",
            text_field: str = "text", id_field: str = "", validation_fraction: float = 0.1,
            test_fraction: float = 0.1, sp_model_type: str = "bpe",
            sp_character_coverage: float = 0.9995, sp_input_sentences: int = 2_000_000,
            workers: int = 0, shard_mb: float = 512.0, overwrite: bool = False,
            tmp_dir: str = "", show_progress: bool = True) -> dict:
  """Prepares `source` into `out` (see the module docstring for the steps and the files).

  Args:
    source: glob of UTF-8 text files (one document each), or of JSON-lines (.jsonl, .jsonl.gz,
      .jsonl.zst) or parquet files (one document per record; data/corpus_formats.py).
    tokenizer: "byte", "sentencepiece:VOCAB_SIZE" (a model is trained, VOCAB_SIZE pieces) or
      "hf:<tokenizer.json or its folder>" (copied into `out`).
    out: output directory (local; created).
    source_format: "auto" (each file's format by its extension) or one of
      `corpus_formats.FORMATS` for every file ("text", "jsonl", "jsonl.gz", "jsonl.zst",
      "parquet").
    text_field, id_field: records (JSON lines, parquet): the key or column of the text, and of
      the document name ("" = file stem and line or row number).
    validation_fraction, test_fraction: the split (`data.corpora.split_documents`); keep them
      equal to the config's `data.validation_fraction` / `data.test_fraction` (checked at load).
    sp_model_type: "bpe" or "unigram".
    sp_character_coverage: SentencePiece's character coverage, (0, 1].
    sp_input_sentences: training sentences sampled from the training split (0 = all).
    workers: tokenization processes (0 = os.cpu_count(); 1 = in this process).
    shard_mb: target shard size, MB (10**6 bytes) of records.
    overwrite: replace a prepared corpus already in `out`.
    tmp_dir: where the texts of compressed and parquet files are spilled while preparing (as
      many bytes as their texts; removed at the end); "" = the system's ($TMPDIR).
    show_progress: show the tqdm progress bars (reading, tokenizing).

  Returns:
    The manifest (as written to `out/manifest.json`).

  Raises:
    ConfigError (CorpusError): bad flags or input, each naming the flag and the allowed values;
      a bad source file (no text field, corrupt, unknown extension, repeated names:
      `corpus_formats.list_documents`), all before anything is written to `out`.
  """
  kind, vocab = parse_tokenizer_spec(tokenizer)
  hf_tok = HFTokenizer(tokenizer[len(HF_PREFIX):], field="--tokenizer") if kind == "hf" else None
  _check_flags(validation_fraction, test_fraction, shard_mb, workers, sp_input_sentences, tmp_dir)
  check_out_dir(out, overwrite)
  with tempfile.TemporaryDirectory(prefix="pe_sweeps_prepare_", dir=tmp_dir or None) as spill:
    refs, source_format, skipped = corpus_formats.list_documents(  # step 1; CorpusError
        source, source_format, text_field, id_field, spill_dir=spill, show_progress=show_progress)
    parts = corpora.split_names([r.name for r in refs], validation_fraction, test_fraction)
    splits = {k: [refs[i] for i in v] for k, v in parts.items()}
    make_out_dir(out)
    workers = workers or os.cpu_count() or 1
    old_files = _drop_old_manifest(out)

    tokenizer_info = {"spec": tokenizer, "kind": kind, "model": None, "sha256": None}
    model_bytes = None
    if kind == "sentencepiece":
      model_bytes = train_sentencepiece(
          sample_sentences(splits["train"], sp_input_sentences), vocab, model_type=sp_model_type,
          character_coverage=sp_character_coverage, num_threads=workers)
      def write_model(tmp):
        with open(tmp, "wb") as f:
          f.write(model_bytes)
        _readable(tmp)
      atomic_write(os.path.join(out, MODEL_FILE), write_model)
      tokenizer_info.update(model=MODEL_FILE, sha256=_sha256(model_bytes), model_type=sp_model_type,
                            character_coverage=sp_character_coverage, byte_fallback=True,
                            normalization="identity", split_digits=True)
    if kind == "hf":
      model_bytes = hf_tok.save(out)
      tokenizer_info.update(model="tokenizer.json", sha256=hf_tok.model_sha256,
                            special_tokens=hf_tok.special_tokens)
    tok = _build_tokenizer(model_bytes)
    tokenizer_info.update(vocab_size=tok.vocab_size, bos_id=tok.bos_id, eos_id=tok.eos_id,
                          pad_id=tok.pad_id)
    config_tokenizer = ("byte" if kind == "byte" else f"{HF_PREFIX}{os.path.abspath(out)}"
                        if kind == "hf"
                        else f"sentencepiece:{os.path.join(os.path.abspath(out), MODEL_FILE)}")
    tokenizer_info["config"] = config_tokenizer
    dtype = corpora.record_dtype(tok.vocab_size)

    split_info = _tokenize_all(splits, out, model_bytes, workers, int(shard_mb * 1e6),
                               show_progress)

  manifest = {
      "format": corpora.PREPARED_FORMAT,
      "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "source": source, "source_format": source_format,
      "text_field": text_field if source_format != "text" else None,
      "id_field": (id_field or None) if source_format != "text" else None,
      "skipped_empty_documents": skipped,
      "tokenizer": tokenizer_info, "vocab_size": tok.vocab_size,
      "record_dtype": dtype.str,
      "record_format": (f"one ArrayRecord record per document: its token ids without BOS/EOS, a "
                        f"little-endian {dtype.name} array"),
      "split": {"rule": "data.corpora.split_documents (sha256 of the document name)",
                "validation_fraction": validation_fraction, "test_fraction": test_fraction},
      "documents": len(refs), "tokens": sum(v["tokens"] for v in split_info.values()),
      "splits": split_info,
  }
  write_json(os.path.join(out, corpora.MANIFEST), manifest)
  os.chmod(os.path.join(out, corpora.MANIFEST), 0o644)
  new_files = {s["file"] for v in split_info.values() for s in v["shards"]}
  for stale in old_files - new_files:
    if os.path.exists(os.path.join(out, stale)):
      os.remove(os.path.join(out, stale))
  return manifest


# ---------------------------------------------------------------------------- command line

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("source", None, "Glob of UTF-8 .txt files (one document each), or of "
                      "JSON-lines (.jsonl/.json, .jsonl.gz, .jsonl.zst) or parquet files (one "
                      "document per record).")
  flags.DEFINE_string("tokenizer", None, "'byte', 'sentencepiece:VOCAB_SIZE' (trains a model) or "
                      "'hf:<tokenizer.json or its folder>' (a Hugging Face tokenizer).")
  flags.DEFINE_string("out", None, "Output directory (local).")
  flags.DEFINE_enum("source_format", "auto", SOURCE_FORMATS,
                    "auto: each file's format by its extension (an unknown one is refused); "
                    "else this format for every file.")
  flags.DEFINE_string("text_field", "text", "JSON lines: the key holding a document's text; "
                      "parquet: the column.")
  flags.DEFINE_string("id_field", "", "JSON lines / parquet: the key or column naming a "
                      "document; '' = <file stem>:<line or row number>.")
  flags.DEFINE_float("validation_fraction", 0.1, "Share of documents held out for validation "
                     "(must equal the config's data.validation_fraction).")
  flags.DEFINE_float("test_fraction", 0.1, "Share of documents held out for test (must equal "
                     "the config's data.test_fraction).")
  flags.DEFINE_enum("sp_model_type", "bpe", SP_MODEL_TYPES, "SentencePiece algorithm.")
  flags.DEFINE_float("sp_character_coverage", 0.9995, "SentencePiece character coverage; the "
                     "remaining characters are spelled in byte pieces.")
  flags.DEFINE_integer("sp_input_sentences", 2_000_000, "Training sentences (runs of lines) "
                       "sampled from the training split for SentencePiece; 0 = all.")
  flags.DEFINE_integer("workers", 0, "Tokenization processes; 0 = one per CPU, 1 = no pool.")
  flags.DEFINE_float("shard_mb", 512.0, "Target ArrayRecord shard size, MB of records.")
  flags.DEFINE_bool("overwrite", False, "Replace a prepared corpus already in --out.")
  flags.DEFINE_string("tmp_dir", "", "Where the texts of compressed and parquet sources are "
                      "spilled while preparing (room for their text); '' = $TMPDIR.")


USAGE = ("python -m data.prepare --source=GLOB --tokenizer=byte|sentencepiece:VOCAB_SIZE|hf:PATH "
         "--out=DIR")


def main(argv) -> None:
  """`python -m data.prepare`: runs `prepare` on the flags; exits 2 with one line on bad input
  (runs.command_line.run: stray arguments and flag errors too)."""
  del argv  # none (runs.command_line.run refuses them)
  for name in ("source", "tokenizer", "out"):
    if not FLAGS[name].value:
      raise ConfigError(f"--{name} is required ({USAGE})")
  m = prepare(FLAGS.source, FLAGS.tokenizer, FLAGS.out, source_format=FLAGS.source_format,
              text_field=FLAGS.text_field, id_field=FLAGS.id_field,
              validation_fraction=FLAGS.validation_fraction, test_fraction=FLAGS.test_fraction,
              sp_model_type=FLAGS.sp_model_type,
              sp_character_coverage=FLAGS.sp_character_coverage,
              sp_input_sentences=FLAGS.sp_input_sentences, workers=FLAGS.workers,
              shard_mb=FLAGS.shard_mb, overwrite=FLAGS.overwrite, tmp_dir=FLAGS.tmp_dir)
  for split, info in m["splits"].items():
    print(f"{split:>10}: {info['documents']:,} documents, {info['tokens']:,} tokens "
          f"({info['text_bytes'] / max(1, info['tokens']):.2f} bytes/token), {len(info['shards'])} shards")
  print(f"wrote {FLAGS.out}; train on it with\n  --config.data.source=array_record "
        f"--config.data.array_record_dir={os.path.abspath(FLAGS.out)} "
        f"--config.data.tokenizer={m['tokenizer']['config']} "
        f"--config.model.vocab_size={m['vocab_size']}  (or any larger vocab_size)")


if __name__ == "__main__":
  define_flags()
  run(main, usage=USAGE)
