"""Corpus files in the formats they ship in: UTF-8 text, JSON lines (plain, gzip or zstandard
compressed) and parquet (as the Hugging Face hub stores datasets).

One rule turns a file into documents, whatever its format, so that one corpus gives the same
documents, and so the same split (`data.corpora.split_names`: sha256 of the names), in every
format, on the text path (`data.source = "text_files"`) and in `python -m data.prepare`:

- a text file (`.txt`) is one document, named by its file stem;
- a record file holds one document per record: the string field `text_field` of the JSON object
  on each non-blank line (`.jsonl` / `.json`, `.jsonl.gz` / `.json.gz`, `.jsonl.zst` /
  `.json.zst`), or the `text_field` column of each row (`.parquet`). A record is named by its
  `id_field` (converted with `str`) when one is given, else `<file stem>:<number>`: the 1-based
  line number (blank lines count) or row number. The stem drops the whole extension
  (`dump.jsonl.gz` -> `dump`), so `dump.jsonl`, `dump.jsonl.gz`, `dump.jsonl.zst` and a
  `dump.parquet` of the same rows name their documents alike. Records with an empty text are
  skipped (and counted).

Files are streamed: gzip through the standard library, zstandard frames one chunk at a time (a
truncated frame is an error, not a silent end), parquet one batch of rows of one row group at a
time (`PARQUET_BATCH_ROWS`), so a file never has to fit in memory. For `data.prepare`, which
reads documents again later in any order, plain JSON lines are read where they lie (a document
is a byte offset); the texts of compressed JSON lines and of parquet files are copied once into
an uncompressed spill file (`list_documents`, `spill_dir`).

Bad input is one `CorpusError` line naming the file (and line or row), the option and what it
holds: a record without the text field (listing the keys or columns it has), a file that cannot
be read or decompressed, an unknown extension (listing the supported ones).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import zlib
from typing import Any, Iterator, NamedTuple, Sequence

from configs.errors import ConfigError
from data import corpora
from data.corpora import CorpusError, Document, DocumentRef

TEXT, JSONL, JSONL_GZ, JSONL_ZST, PARQUET = "text", "jsonl", "jsonl.gz", "jsonl.zst", "parquet"
FORMATS = (TEXT, JSONL, JSONL_GZ, JSONL_ZST, PARQUET)
RECORD_FORMATS = FORMATS[1:]
# File name endings (lower case) and their formats; the longest ending that matches wins.
EXTENSIONS = {".txt": TEXT, ".jsonl": JSONL, ".json": JSONL, ".jsonl.gz": JSONL_GZ,
              ".json.gz": JSONL_GZ, ".jsonl.zst": JSONL_ZST, ".json.zst": JSONL_ZST,
              ".parquet": PARQUET}
PARQUET_BATCH_ROWS = 1024  # rows per parquet read (within one row group)
ZSTD_READ_BYTES = 1 << 20  # compressed bytes per zstandard read


@dataclasses.dataclass(frozen=True)
class Options:
  """What the user calls the options, for error messages.

  Attributes:
    source: the glob's flag or field ("--source", "data.text_glob").
    text_field, id_field: the record fields' flags or fields.
    source_format: the format flag, "" where there is none (the config has none).
  """

  source: str
  text_field: str
  id_field: str
  source_format: str = ""


PREPARE = Options("--source", "--text_field", "--id_field", "--source_format")
CONFIG = Options("data.text_glob", "data.text_field", "data.id_field")


def extension(path: str) -> str:
  """The longest ending of `path`'s file name (lower case) in `EXTENSIONS`, "" when none."""
  name = os.path.basename(path).lower()
  found = [e for e in EXTENSIONS if name.endswith(e) and len(name) > len(e)]
  return max(found, key=len) if found else ""


def file_format(path: str) -> str | None:
  """The format `path`'s extension stands for (one of `FORMATS`), None for another extension."""
  return EXTENSIONS.get(extension(path))


def file_stem(path: str) -> str:
  """`path`'s file name without its whole extension (`a/dump.jsonl.gz` -> `dump`); for an
  unknown extension, without the last one (`os.path.splitext`)."""
  name = os.path.basename(path)
  ext = extension(path)
  return name[:-len(ext)] if ext else os.path.splitext(name)[0]


def supported_extensions() -> str:
  """The supported extensions, for error messages."""
  by_format = {f: [e for e, g in EXTENSIONS.items() if g == f] for f in FORMATS}
  return (f"{by_format[TEXT][0]} (one document per file); "
          + ", ".join("/".join(by_format[f]) for f in RECORD_FORMATS) + " (one per record)")


def file_formats(paths: Sequence[str], source_format: str = "auto",
                 options: Options = PREPARE) -> list[str]:
  """The format of each of `paths`: `source_format` for all, or each file's by its extension
  ("auto").

  Raises:
    ConfigError: `source_format` is not "auto" or one of `FORMATS`; CorpusError ("auto"): a
      file with an unknown extension (naming it and listing the supported ones), or text files
      mixed with record files (a text file is one document, a record file many).
  """
  if source_format != "auto" and source_format not in FORMATS:
    raise ConfigError(f"{options.source_format or 'source_format'}={source_format!r} is not "
                      f"supported; choose one of {['auto', *FORMATS]}")
  if source_format != "auto":
    return [source_format] * len(paths)
  formats = [file_format(p) for p in paths]
  for path, fmt in zip(paths, formats):
    if fmt is None:
      escape = (f", or set {options.source_format}=text to read every file as UTF-8 text"
                if options.source_format else "")
      raise CorpusError(f"{options.source}: {path} has an unknown extension; supported: "
                        f"{supported_extensions()}; narrow the glob{escape}")
  text = [p for p, f in zip(paths, formats) if f == TEXT]
  if text and len(text) < len(paths):
    other = next(p for p, f in zip(paths, formats) if f != TEXT)
    raise CorpusError(f"{options.source} matches both text files (one document each, e.g. "
                      f"{text[0]}) and record files (e.g. {other}); narrow the glob")
  return formats


class Record(NamedTuple):
  """One record of a record file.

  Attributes:
    number: 1-based line (JSON lines; blank lines count) or row (parquet) in its file.
    text: the `text_field` value ("" for an empty text).
    ident: the `id_field` value, None without an id field.
    offset: plain JSON lines: byte offset of the line in its file; -1 otherwise.
  """

  number: int
  text: str
  ident: Any
  offset: int


def _zstd_chunks(f) -> Iterator[bytes]:
  """Decompressed chunks of the zstandard frames of the binary file `f`.

  Raises:
    zstandard.ZstdError: corrupt data; EOFError: the last frame is cut short.
  """
  import zstandard
  decompressor = zstandard.ZstdDecompressor()
  frame, inside = decompressor.decompressobj(), False
  while True:
    data = f.read(ZSTD_READ_BYTES)
    if not data:
      break
    while data:
      inside = True
      out = frame.decompress(data)
      if out:
        yield out
      if not frame.eof:
        break
      data, frame, inside = frame.unused_data, decompressor.decompressobj(), False
  if inside and not frame.eof:
    raise EOFError("the zstandard stream ends inside a frame (a truncated file?)")


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
  """The lines (with their newline) of a stream given as chunks of bytes; a line longer than a
  chunk is joined once (no quadratic copying)."""
  pending: list[bytes] = []
  for chunk in chunks:
    start = 0
    while (end := chunk.find(b"\n", start)) >= 0:
      pending.append(chunk[start:end + 1])
      yield b"".join(pending)
      pending, start = [], end + 1
    if start < len(chunk):
      pending.append(chunk[start:])
  if pending:
    yield b"".join(pending)


def _json_lines(path: str, fmt: str) -> Iterator[tuple[int, int, bytes]]:
  """(1-based line number, byte offset or -1, line) of a JSON-lines file of format `fmt`."""
  if fmt == JSONL:
    offset = 0
    with open(path, "rb") as f:
      for number, line in enumerate(f, start=1):
        yield number, offset, line
        offset += len(line)
  elif fmt == JSONL_GZ:
    with gzip.open(path, "rb") as f:
      for number, line in enumerate(f, start=1):
        yield number, -1, line
  else:
    with open(path, "rb") as f:
      for number, line in enumerate(_lines(_zstd_chunks(f)), start=1):
        yield number, -1, line


def _json_records(path: str, fmt: str, text_field: str, id_field: str,
                  options: Options) -> Iterator[Record]:
  """The records of a JSON-lines file (see `iter_records`)."""
  import zstandard
  lines = _json_lines(path, fmt)
  while True:
    try:
      number, offset, line = next(lines)
    except StopIteration:
      return
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
      kind = {JSONL: "", JSONL_GZ: " gzip", JSONL_ZST: " zstandard"}[fmt]
      raise CorpusError(f"{options.source}: {path} is not a readable{kind} JSON-lines file "
                        f"({_first_line(e)})") from None
    if not line.strip():
      continue
    try:
      obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise CorpusError(f"{options.source}: {path}:{number} is not a JSON object ({e})") from e
    if not isinstance(obj, dict) or not isinstance(obj.get(text_field), str):
      keys = sorted(obj)[:20] if isinstance(obj, dict) else type(obj).__name__
      raise CorpusError(f"{options.source}: {path}:{number} has no string field {text_field!r} "
                        f"({options.text_field} names it); its keys: {keys}")
    if id_field and id_field not in obj:
      raise CorpusError(f"{options.source}: {path}:{number} has no field {id_field!r} "
                        f"({options.id_field}); its keys: {sorted(obj)[:20]}")
    text = obj[text_field]
    try:
      text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate escape such as "\ud800"
      raise CorpusError(f"{options.source}: {path}:{number}: {text_field!r} is not valid Unicode "
                        f"({e})") from e
    yield Record(number, text, obj[id_field] if id_field else None, offset)


def _first_line(e: BaseException) -> str:
  """The first line of an exception's message (a one-line error), else its type's name."""
  text = str(e).strip()
  return text.splitlines()[0] if text else type(e).__name__


def _parquet_file(path: str, text_field: str, id_field: str, options: Options):
  """Opens a parquet file and checks its columns: (pyarrow.parquet.ParquetFile, columns to read)."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  try:
    pf = pq.ParquetFile(path)
  except (pa.ArrowException, OSError) as e:
    raise CorpusError(f"{options.source}: {path} is not a readable parquet file "
                      f"({_first_line(e)})") from None
  schema = pf.schema_arrow
  for name, option in ((text_field, options.text_field), (id_field, options.id_field)):
    if name and name not in schema.names:
      raise CorpusError(f"{options.source}: {path} has no column {name!r} ({option} names it); "
                        f"its columns: {schema.names}")
  kind = schema.field(text_field).type
  is_view = getattr(pa.types, "is_string_view", lambda t: False)
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_view(kind)):
    raise CorpusError(f"{options.source}: {path}: column {text_field!r} holds {kind}, not text "
                      f"({options.text_field} names the text column); its columns: "
                      f"{schema.names}")
  return pf, [text_field] + ([id_field] if id_field and id_field != text_field else [])


def _parquet_records(path: str, text_field: str, id_field: str,
                     options: Options) -> Iterator[Record]:
  """The rows of a parquet file, `PARQUET_BATCH_ROWS` at a time (see `iter_records`)."""
  import pyarrow as pa
  pf, columns = _parquet_file(path, text_field, id_field, options)
  batches = pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
  number = 0
  while True:
    try:
      batch = next(batches, None)
      if batch is None:
        return
      texts = batch.column(0).to_pylist()
      ids = batch.column(columns.index(id_field)).to_pylist() if id_field else None
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
      raise CorpusError(f"{options.source}: {path} is not a readable parquet file (after row "
                        f"{number}: {_first_line(e)})") from None
    for i, text in enumerate(texts):
      number += 1
      if text is None:
        raise CorpusError(f"{options.source}: {path} row {number}: {text_field!r} is null "
                          f"({options.text_field} names the text column)")
      yield Record(number, text, ids[i] if ids is not None else None, -1)


def iter_records(path: str, fmt: str, text_field: str = "text", id_field: str = "",
                 options: Options = PREPARE) -> Iterator[Record]:
  """Streams the records of one record file (empty texts included: the caller skips them).

  Args:
    path: the file.
    fmt: one of `RECORD_FORMATS`.
    text_field: the JSON key or parquet column holding the text (a string).
    id_field: the JSON key or parquet column naming the record; "" = none.
    options: the option names for error messages.

  Raises:
    CorpusError: the file cannot be read, decompressed or parsed (a corrupt or truncated file,
      a line that is not a JSON object); a record lacks `text_field` (naming the file, line or
      row, and the keys or columns it has), its text is not a string (null, a number, ...) or
      not valid Unicode; `id_field` is missing.
  """
  if fmt == PARQUET:
    return _parquet_records(path, text_field, id_field, options)
  if fmt not in RECORD_FORMATS:
    raise ValueError(f"{fmt!r} is not a record format {RECORD_FORMATS}")
  return _json_records(path, fmt, text_field, id_field, options)


def record_name(record: Record, stem: str, id_field: str) -> str:
  """A record's document name: `str(id)` with an `id_field`, else `<stem>:<number>`."""
  return str(record.ident) if id_field else f"{stem}:{record.number}"


def _check_fields(formats: Sequence[str], text_field: str, id_field: str, options: Options) -> None:
  """Raises ConfigError for an empty `text_field`, or an `id_field` with text files only."""
  if not isinstance(text_field, str) or not text_field:
    raise ConfigError(f"{options.text_field} must name the text field (e.g. 'text'); got "
                      f"{text_field!r}")
  if id_field and all(f == TEXT for f in formats):
    raise ConfigError(f"{options.id_field} applies to JSON-lines and parquet sources; text "
                      "files are named by file stem")


def _parquet_rows(paths: Sequence[str], formats: Sequence[str]) -> int | None:
  """Rows of all files when every file is parquet (from the footers), else None."""
  if any(f != PARQUET for f in formats):
    return None
  import pyarrow.parquet as pq
  try:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
  except Exception:  # a corrupt file is reported, with its name, when it is read
    return None


def list_documents(pattern: str, source_format: str = "auto", text_field: str = "text",
                   id_field: str = "", *, spill_dir: str | None = None,
                   options: Options = PREPARE,
                   show_progress: bool = False) -> tuple[list[DocumentRef], str, int]:
  """One `DocumentRef` per document of the files matching the glob `pattern`, to be read later
  in any order and in any process on this machine (`DocumentRef.read`).

  Text files and plain JSON lines are referenced where they lie. The texts of compressed JSON
  lines and parquet files are written, UTF-8, to `<spill_dir>/texts.bin` (one pass; as many
  bytes as their texts), which must outlive the references.

  Args:
    pattern: a glob (`**` recurses).
    source_format: "auto" (by extension, `file_formats`) or one of `FORMATS` for every file.
    text_field, id_field: see `iter_records` (id_field: record files only).
    spill_dir: an existing directory; required when a file is compressed or parquet.
    options: the option names for error messages.
    show_progress: a tqdm bar over the records read (stderr).

  Returns:
    (references in file order then record order, the format: one of `FORMATS` or several
    joined by "+", the number of skipped empty texts).

  Raises:
    ConfigError: see `file_formats`; an empty `text_field`, or an `id_field` with text files;
    CorpusError: no file matches, see `file_formats` and `iter_records`, an empty text file,
      or names that repeat.
  """
  paths = corpora.list_text_files(pattern, options.source)
  formats = file_formats(paths, source_format, options)
  _check_fields(formats, text_field, id_field, options)
  if all(f == TEXT for f in formats):
    return corpora.list_text_file_documents(pattern, options.source), TEXT, 0
  if spill_dir is None and any(f not in (JSONL,) for f in formats):
    raise ValueError("spill_dir is required for compressed JSON lines and parquet files")
  from tqdm import tqdm
  refs, skipped = [], 0
  spill_path = os.path.join(spill_dir, "texts.bin") if spill_dir else ""
  bar = tqdm(total=_parquet_rows(paths, formats), desc="read", unit="doc",
             disable=not show_progress, dynamic_ncols=True)
  spill = open(spill_path, "wb") if spill_path else None
  try:
    for i, (path, fmt) in enumerate(zip(paths, formats), start=1):
      bar.set_postfix(file=f"{i}/{len(paths)}", refresh=False)
      stem = file_stem(path)
      for record in iter_records(path, fmt, text_field, id_field, options):
        bar.update(1)
        if not record.text:
          skipped += 1
          continue
        name = record_name(record, stem, id_field)
        if fmt == JSONL:
          refs.append(DocumentRef(name, path, record.offset, text_field))
        else:
          data = record.text.encode("utf-8")
          refs.append(DocumentRef(name, spill_path, spill.tell(), text_field, len(data)))
          spill.write(data)
  except BaseException:
    bar.leave = False  # the error's one line, without a half-drawn bar above it
    raise
  finally:
    bar.close()
    if spill is not None:
      spill.close()
  corpora.check_unique_names([r.name for r in refs], options.source,
                             f"document ids ({id_field!r})" if id_field else "file stems")
  return refs, "+".join(sorted(set(formats), key=FORMATS.index)), skipped


def read_documents(pattern: str, text_field: str = "text", id_field: str = "",
                   options: Options = CONFIG) -> list[Document]:
  """Reads every document of the files matching `pattern` into memory (the text path,
  `data.source = "text_files"`): the documents `list_documents` lists, with their bytes.

  Formats are told by extension (`file_formats`, "auto"). Text files only: exactly
  `data.corpora.read_text_files`.

  Raises:
    ConfigError / CorpusError: as `list_documents` (naming `options`' fields), or a text file
      that is not UTF-8.
  """
  paths = corpora.list_text_files(pattern, options.source)
  formats = file_formats(paths, "auto", options)
  _check_fields(formats, text_field, id_field, options)
  if all(f == TEXT for f in formats):
    return corpora.read_text_files(pattern, options.source)
  docs = []
  for path, fmt in zip(paths, formats):
    stem = file_stem(path)
    docs.extend(Document(record_name(r, stem, id_field), r.text.encode("utf-8"))
                for r in iter_records(path, fmt, text_field, id_field, options) if r.text)
  corpora.check_unique_names([d.name for d in docs], options.source,
                             f"document ids ({id_field!r})" if id_field else "file stems")
  return docs
