"""Hugging Face tokenizers: `data.tokenizer = "hf:<tokenizer.json, or a folder holding one>"`.

`HFTokenizer` loads a `tokenizer.json` with the `tokenizers` library, offline (GPT-2, Llama 3,
Qwen, Mistral, SmolLM and other BPE tokenizers), behind the interface of data/tokenizers.py:
`vocab_size`, `bos_id`, `eos_id`, `pad_id`, `encode`, `decode_bytes`, `decode`, `byte_lengths`.

Text in, text out, exactly:
  * encode never adds special tokens (no post-processor template) and never produces one from the
    text: a literal "<|endoftext|>" or "<s>" in a document is encoded as ordinary text
    (`encode_special_tokens`), so no special token can sit inside a haystack or a document;
  * the dummy prefix some tokenizers add (a space or U+2581 before the text: Llama 2 / Mistral's
    Prepend normalizer or Metaspace `prepend_scheme`, ByteLevel `add_prefix_space`) is turned
    off, as in the SentencePiece models `python -m data.prepare` trains, so every part of a prompt
    encodes to itself and token counts add up;
  * the tokenizer.json's truncation and padding are ignored;
  * each id's bytes come from the vocabulary itself: byte-level pieces (GPT-2's byte-to-unicode
    alphabet) back to their bytes, byte-fallback pieces `<0x..>` to one byte, U+2581 to a space,
    added tokens that are not special to their text, special tokens to nothing. `decode_bytes`
    concatenates them, so a byte-level token that holds part of a UTF-8 character gives exactly
    that part, and `byte_lengths[encode(text)].sum() == len(text.encode())`;
  * a literal U+2581 in the text of a Metaspace tokenizer with byte fallback (Mistral) is
    spelled in its three byte pieces, as data/tokenizers.py does for SentencePiece (otherwise it
    would decode as a space);
  * at load, a probe text (ASCII, digits, whitespace runs, CRLF, accents, CJK, an emoji, literal
    special-token strings) must encode and decode back to its exact bytes, without a special id;
    a tokenizer that cannot (WordPiece's "##", lowercasing, an unknown token for characters
    outside its vocabulary) is refused. A normalizer that rewrites text (Qwen's NFC) still loads:
    its tokens stand for the normalized text, which is what bits per byte then count.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re

import numpy as np

from configs.errors import ConfigError
from runs.files import atomic_write

HF_PREFIX = "hf:"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
ROLES = ("bos", "eos", "pad")
# Special tokens recognised by name when tokenizer_config.json does not name the role, in order.
KNOWN_SPECIAL = {
    "bos": ("<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>", "<|bos|>", "[BOS]"),
    "eos": ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>", "<|eos|>", "[EOS]"),
    "pad": ("<pad>", "<|pad|>", "<|padding|>", "[PAD]", "<|finetune_right_pad_id|>"),
}
SP_SPACE = "\u2581"  # SentencePiece's / Metaspace's whitespace symbol
PROBE_TEXT = ("The pass key is 71432. Remember it.\n  Indented\tline, tabs\t\tand   spaces;\r\n"
              "x = 3.14159 * (1024 + 65536) - 2024-01-02\n\nnaïve café — Ünïcödé, 東京, 🙂!\n"
              "literal specials: <s> </s> <|endoftext|> <|begin_of_text|> <pad> [PAD]\n ")
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
  """GPT-2's byte-level alphabet, inverted: {unicode character: the byte it stands for}
  (Radford et al. 2019, `bytes_to_unicode` in their encoder.py; the `tokenizers` library's
  ByteLevel uses the same map). Printable bytes stand for themselves; the others are shifted to
  U+0100 onwards (the space 0x20 is "Ġ", the newline 0x0A is "Ċ")."""
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
               + list(range(0xAE, 0xFF + 1)))
  chars, extra = {}, 0
  for b in range(256):
    if b in printable:
      chars[chr(b)] = b
    else:
      chars[chr(256 + extra)] = b
      extra += 1
  return chars


def _one_line(error: Exception) -> str:
  return " ".join(str(error).split())[:200]


def _types(node) -> list[dict]:
  """A normalizer / pre-tokenizer / decoder and, for a Sequence, its members, flattened."""
  if not isinstance(node, dict):
    return []
  members = node.get("normalizers") or node.get("pretokenizers") or node.get("decoders")
  if node.get("type") == "Sequence" and isinstance(members, list):
    return [t for m in members for t in _types(m)]
  return [node]


def without_prefix_space(spec: dict) -> dict:
  """tokenizer.json `spec` (parsed) with its dummy prefix off: Prepend normalizers removed,
  ByteLevel `add_prefix_space` False, Metaspace `prepend_scheme` "never" (and the older
  `add_prefix_space` False). Returns a modified copy; the rest is unchanged."""
  spec = json.loads(json.dumps(spec))

  def drop_prepend(node):
    if not isinstance(node, dict):
      return node
    if node.get("type") == "Prepend":
      return None
    if node.get("type") == "Sequence" and isinstance(node.get("normalizers"), list):
      node["normalizers"] = [m for m in map(drop_prepend, node["normalizers"]) if m is not None]
    return node

  spec["normalizer"] = drop_prepend(spec.get("normalizer"))
  for node in _types(spec.get("pre_tokenizer")):
    if node.get("type") == "ByteLevel":
      node["add_prefix_space"] = False
    elif node.get("type") == "Metaspace":
      if "prepend_scheme" in node:
        node["prepend_scheme"] = "never"
      if "add_prefix_space" in node:
        node["add_prefix_space"] = False
  return spec


def _config_token(value):
  """A tokenizer_config.json `<role>_token` value: a string, an AddedToken dict or null."""
  if isinstance(value, dict):
    return value.get("content")
  return value


def _stamp(path: str):
  try:
    st = os.stat(path)
  except OSError:
    return None
  return st.st_mtime_ns, st.st_size


_LOADED: dict[tuple, "HFTokenizer"] = {}


def load(path: str) -> "HFTokenizer":
  """`HFTokenizer(path)`, reused while its tokenizer.json and tokenizer_config.json are unchanged
  (same modification time and size): a run resolves `data.tokenizer` several times, and a large
  vocabulary (Llama 3's 128,256 ids) takes a second or two to load.

  Raises:
    configs.errors.ConfigError: see `HFTokenizer`.
  """
  file = os.path.expanduser(path)
  file = os.path.join(file, TOKENIZER_FILE) if os.path.isdir(file) else file
  key = (os.path.abspath(file), _stamp(file),
         _stamp(os.path.join(os.path.dirname(file), CONFIG_FILE)))
  if key[1] is None or key not in _LOADED:
    tok = HFTokenizer(path)
    if len(_LOADED) >= 4:
      _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = tok
  return _LOADED[key]


class HFTokenizer:
  """A Hugging Face `tokenizer.json` (the `tokenizers` library), lossless (module docstring).

  Special ids. For each of BOS, EOS and PAD, in this order:
    1. `tokenizer_config.json` beside tokenizer.json, where it has the key `bos_token` /
       `eos_token` / `pad_token` (a string or an AddedToken {"content": ...}): that token, as
       transformers' AutoTokenizer would give it; null there means the tokenizer has none.
    2. Else, for BOS, the special token the post-processor's template puts before a sequence
       (Llama 3's <|begin_of_text|>, Mistral's <s>); then, for each role, the first special
       added token of tokenizer.json named in KNOWN_SPECIAL (BOS: <|begin_of_text|>, <s>, ...;
       EOS: <|end_of_text|>, </s>, <|endoftext|>, ...; PAD: <pad>, <|pad|>, [PAD], ...).
    3. Still none: BOS is the EOS token (GPT-2 and Qwen separate documents with <|endoftext|>;
       a BOS here only marks where a document starts) and PAD is the EOS token (transformers'
       `pad_token = eos_token`). Training masks targets equal to PAD: when PAD is also BOS
       (GPT-2, Qwen) the BOS targets between packed documents are not trained on; they stand for
       no text, so bits per byte do not change.
  Every run needs all three (BOS starts every document and prompt, PAD fills and masks rows,
  EOS ends generated continuations), so a tokenizer left without one is refused.

  Attributes:
    path: the tokenizer.json file.
    model_sha256: hex sha256 of tokenizer.json's bytes and the three special ids; tokenizers are
      equal when these are equal.
    bos_id, eos_id, pad_id: int special ids; special_tokens: {role: token text}.
  """

  def __init__(self, path: str, files: tuple[bytes, bytes | None] | None = None, *,
               field: str = "data.tokenizer"):
    """Loads `path` (a tokenizer.json, or a folder holding one and maybe tokenizer_config.json).

    Args:
      path: as in `data.tokenizer = "hf:<path>"` (a leading ~ is expanded).
      files: the bytes of (tokenizer.json, tokenizer_config.json or None) instead of reading
        them (`path` then only names them).
      field: the setting the error messages name (data.prepare: "--tokenizer").

    Raises:
      configs.errors.ConfigError: one line naming data.tokenizer: a missing file, a file that is
        not JSON or not a tokenizer the `tokenizers` library loads, a tokenizer_config.json token
        outside the vocabulary, no BOS / EOS / PAD (after the rules above), or a tokenizer that
        does not encode text losslessly.
    """
    path = os.path.expanduser(path)
    if os.path.isdir(path):
      path = os.path.join(path, TOKENIZER_FILE)
    self.path = path
    self._name = f"{field}='{HF_PREFIX}{path}'"
    if files is None:
      files = self._read_files(path)
    self._load(*files)

  def _read_files(self, path: str) -> tuple[bytes, bytes | None]:
    try:
      with open(path, "rb") as f:
        data = f.read()
    except OSError as e:
      raise ConfigError(f"{self._name}: cannot read {path} ({e.strerror}); give a tokenizer.json "
                        "file or a folder holding one") from None
    config_path = os.path.join(os.path.dirname(path), CONFIG_FILE)
    config = None
    if os.path.exists(config_path):
      with open(config_path, "rb") as f:
        config = f.read()
    return data, config

  def _load(self, data: bytes, config: bytes | None) -> None:
    from tokenizers import Tokenizer  # optional at import time: byte-level runs never load it
    self._files = (data, config)
    try:
      spec = json.loads(data)
      if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise ValueError("no 'model' object")
      tok = Tokenizer.from_str(json.dumps(without_prefix_space(spec)))
    except Exception as e:  # json, the library's own exceptions (a malformed spec)
      raise ConfigError(f"{self._name} is not a Hugging Face tokenizer.json ({_one_line(e)})") from None
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = True
    self._tok = tok
    vocab = tok.get_vocab(with_added_tokens=True)
    self._vocab_size = max(vocab.values()) + 1 if vocab else 0
    added = {a["id"]: a for a in spec.get("added_tokens") or []}
    model_vocab = tok.get_vocab(with_added_tokens=False)
    self._pieces = self._piece_bytes(spec, model_vocab, added)
    # Metaspace tokenizers read spaces as U+2581: a literal one is spelled in byte pieces
    space_pieces = [f"<0x{b:02X}>" for b in SP_SPACE.encode("utf-8")]
    self._space_ids = ([model_vocab[p] for p in space_pieces] if self._metaspace
                       and spec["model"].get("byte_fallback")
                       and all(p in model_vocab for p in space_pieces) else None)
    self._byte_lengths = np.array([len(p) for p in self._pieces], np.int64)
    self._special = np.zeros(self._vocab_size, bool)
    self._special[[i for i, a in added.items() if a.get("special") and i < self._vocab_size]] = True
    ids = self._special_ids(spec, config, added)
    self.special_tokens = {role: tok.id_to_token(i) for role, i in ids.items()}
    self.bos_id, self.eos_id, self.pad_id = ids["bos"], ids["eos"], ids["pad"]
    for i in ids.values():
      self._special[i] = True
      self._pieces[i] = b""
      self._byte_lengths[i] = 0
    digest = hashlib.sha256(data)
    digest.update(json.dumps(ids, sort_keys=True).encode())
    self.model_sha256 = digest.hexdigest()
    self._check_lossless()

  def _piece_bytes(self, spec: dict, vocab: dict[str, int], added: dict) -> list[bytes]:
    """The bytes each id stands for (special added tokens: b"")."""
    parts = _types(spec.get("decoder")) + _types(spec.get("pre_tokenizer"))
    byte_level = any(t.get("type") == "ByteLevel" for t in parts)
    metaspace = self._metaspace = any(t.get("type") == "Metaspace" or (
        t.get("type") == "Replace" and t.get("pattern", {}).get("String") == SP_SPACE)
        for t in parts)
    byte_fallback = bool(spec["model"].get("byte_fallback"))
    alphabet = byte_level_alphabet()
    pieces = [b""] * self._vocab_size
    for piece, i in vocab.items():
      if byte_level and all(c in alphabet for c in piece):
        pieces[i] = bytes(alphabet[c] for c in piece)
      elif byte_fallback and (m := _BYTE_PIECE.fullmatch(piece)):
        pieces[i] = bytes((int(m.group(1), 16),))
      else:
        pieces[i] = (piece.replace(SP_SPACE, " ") if metaspace else piece).encode("utf-8")
    unk = spec["model"].get("unk_token")
    if unk is not None and unk in vocab:
      pieces[vocab[unk]] = b""  # stands for text it lost: no bytes (the probe refuses losing text)
    for i, a in added.items():
      if i < self._vocab_size:
        pieces[i] = b"" if a.get("special") else str(a.get("content", "")).encode("utf-8")
    return pieces

  def _special_ids(self, spec: dict, config: bytes | None, added: dict) -> dict[str, int]:
    """{role: id} for BOS, EOS and PAD by the class docstring's rules."""
    settings = {}
    if config is not None:
      try:
        settings = json.loads(config)
        if not isinstance(settings, dict):
          raise ValueError("not a JSON object")
      except ValueError as e:
        raise ConfigError(f"{self._name}: {CONFIG_FILE} beside it is not valid JSON "
                          f"({_one_line(e)})") from None
    specials = {a.get("content"): i for i, a in added.items() if a.get("special")}
    template = (spec.get("post_processor") or {})
    firsts = [item["SpecialToken"]["id"] for t in [template, *(template.get("processors") or [])]
              if isinstance(t, dict) and t.get("type") == "TemplateProcessing"
              for item in (t.get("single") or [])[:1] if "SpecialToken" in item]
    ids: dict[str, int | None] = {}
    for role in ROLES:
      key = f"{role}_token"
      if key in settings:
        text = _config_token(settings[key])
        ids[role] = None if text is None else self._tok.token_to_id(text)
        if text is not None and ids[role] is None:
          raise ConfigError(f"{self._name}: {CONFIG_FILE} names {key}={text!r}, which is not in "
                            "tokenizer.json's vocabulary")
        continue
      names = (firsts if role == "bos" else []) + list(KNOWN_SPECIAL[role])
      ids[role] = next((specials[n] for n in names if n in specials), None)
    for role in ("bos", "pad"):
      if ids[role] is None:
        ids[role] = ids["eos"]
    missing = [role.upper() for role in ROLES if ids[role] is None]
    if missing:
      raise ConfigError(
          f"{self._name} has no {' / '.join(missing)} token (none named in {CONFIG_FILE}, no "
          f"special token {' or '.join(KNOWN_SPECIAL['eos'][:3])} in tokenizer.json); every run "
          f"starts documents with BOS and masks PAD: add an EOS token (or set eos_token in "
          f"{CONFIG_FILE})")
    return ids

  def _check_lossless(self) -> None:
    ids = self.encode(PROBE_TEXT)
    back = b"".join(self._pieces[i] for i in ids.tolist())
    if back != PROBE_TEXT.encode("utf-8") or self._special[ids].any():
      got = back.decode("utf-8", errors="replace")
      at = next((i for i, (a, b) in enumerate(zip(got, PROBE_TEXT)) if a != b),
                min(len(got), len(PROBE_TEXT)))
      raise ConfigError(
          f"{self._name} does not encode text losslessly: decoding its tokens of a probe text "
          f"differs at character {at} ({PROBE_TEXT[at:at + 12]!r} became {got[at:at + 12]!r}); "
          "use a byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM) or one with byte fallback (Mistral)")

  def __getstate__(self):  # picklable (grain / multiprocessing workers): the files' bytes
    return {"path": self.path, "files": self._files}

  def __setstate__(self, state):
    self.path = state["path"]
    self._name = f"data.tokenizer='{HF_PREFIX}{self.path}'"
    self._load(*state["files"])

  def __eq__(self, other) -> bool:
    return isinstance(other, HFTokenizer) and other.model_sha256 == self.model_sha256

  def __hash__(self) -> int:
    return hash(self.model_sha256)

  def __repr__(self) -> str:
    return f"HFTokenizer({self.path!r}, vocab_size={self.vocab_size})"

  def save(self, directory: str) -> "HFTokenizer":
    """Writes the tokenizer.json it was loaded from, and its tokenizer_config.json (or removes a
    stale one), into `directory` (crash-safe: runs.files.atomic_write), so that
    `data.tokenizer='hf:<directory>'` loads this same tokenizer. Returns self."""
    for name, data in zip((TOKENIZER_FILE, CONFIG_FILE), self._files):
      path = os.path.join(directory, name)
      if data is None:
        if os.path.exists(path):
          os.remove(path)
        continue

      def write(tmp, data=data):
        with open(tmp, "wb") as f:
          f.write(data)
      atomic_write(path, write)
    return self

  @property
  def vocab_size(self) -> int:
    """Number of token ids: the largest id of the vocabulary and added tokens, plus one."""
    return self._vocab_size

  @property
  def byte_lengths(self) -> np.ndarray:
    """int64 [vocab_size]: the UTF-8 bytes of text each id stands for (its piece's bytes: a
    byte-level piece's bytes, 1 for `<0x..>`, U+2581 as a space; 0 for special tokens and ids
    outside the vocabulary). `byte_lengths[encode(text)].sum() == len(text.encode())` for text
    the normalizer keeps (the load-time probe checks it)."""
    return self._byte_lengths

  def encode(self, text: str | bytes) -> np.ndarray:
    """Encodes text to ids, without special tokens (literal special-token text is plain text).

    Args:
      text: a `str`, or `bytes` holding UTF-8 text.

    Returns:
      int32 array `[num_tokens]`.

    Raises:
      ValueError: `text` is bytes that are not valid UTF-8.
    """
    if not isinstance(text, str):
      try:
        text = bytes(text).decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"HFTokenizer encodes UTF-8 text; got invalid bytes ({e})") from e
    if self._space_ids is None or SP_SPACE not in text:
      return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, np.int32)
    ids: list[int] = []
    for i, part in enumerate(text.split(SP_SPACE)):  # a literal U+2581: its three byte pieces
      ids.extend(self._space_ids if i else [])
      ids.extend(self._tok.encode(part, add_special_tokens=False).ids if part else [])
    return np.asarray(ids, np.int32)

  def decode_bytes(self, ids) -> bytes:
    """Returns the bytes of `ids` ([n] ints): each id's piece bytes concatenated, special ids
    dropped; a byte-level piece holding part of a UTF-8 character gives exactly that part.

    Raises:
      ValueError: if an id is outside [0, vocab_size).
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= self._vocab_size):
      raise ValueError(f"token ids must lie in [0, {self._vocab_size}); got min {ids.min()}, "
                       f"max {ids.max()}")
    pieces = self._pieces
    return b"".join([pieces[i] for i in ids.tolist()])

  def decode(self, ids) -> str:
    """Decodes ids ([n] ints) to text; invalid UTF-8 becomes U+FFFD, never an error."""
    return self.decode_bytes(ids).decode("utf-8", errors="replace")
