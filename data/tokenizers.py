"""Tokenizers: byte-level (the default), SentencePiece and Hugging Face tokenizer.json files.
Every UTF-8 text round-trips exactly.

`data.tokenizer` names one (`get_tokenizer`):

  "byte"                        ByteTokenizer: ids 0..255 are bytes, then BOS, EOS, PAD (vocab 259).
  "sentencepiece:<path.model>"  SentencePieceTokenizer: a SentencePiece model (Kudo & Richardson,
                                arXiv 1808.06226), e.g. the `tokenizer.model` that
                                `python -m data.prepare --tokenizer=sentencepiece:VOCAB` trains.
  "hf:<tokenizer.json | dir>"   HFTokenizer (data/hf_tokenizer.py): a Hugging Face tokenizer.json
                                (GPT-2, Llama 3, Qwen, Mistral, SmolLM, ...), loaded offline with
                                the `tokenizers` library; special ids from tokenizer_config.json
                                beside it or the tokenizer's own special tokens.

All have the same interface: `vocab_size`, `bos_id`, `eos_id`, `pad_id`, `encode(text)` ->
int32 ids, `decode_bytes(ids)` -> bytes (special ids dropped), `decode(ids)` -> str, and
`byte_lengths` (the UTF-8 bytes each id stands for: bits per byte of scored tokens,
eval/perplexity.py `scored_bytes`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np

from configs.errors import ConfigError
from data import hf_tokenizer
from data.hf_tokenizer import HF_PREFIX, HFTokenizer


def checked_ids(ids, vocab_size: int) -> np.ndarray:
  """`ids` ([n] ints, any shape) as int64 [n], checked to lie in [0, vocab_size).

  Raises:
    ValueError: if an id is outside [0, vocab_size).
  """
  ids = np.asarray(ids, dtype=np.int64).reshape(-1)
  if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
    raise ValueError(
        f"token ids must lie in [0, {vocab_size}); got min {ids.min()}, max {ids.max()}")
  return ids


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
  """Byte-level tokenizer: ids 0..255 are the byte values, then BOS, EOS and PAD.

  Any byte string (valid UTF-8 or not) encodes; decoding returns the exact bytes, and text
  decoding replaces invalid UTF-8 sequences rather than failing. One token is one byte, so
  nats per token are nats per byte.
  """

  bos_id: int = 256
  eos_id: int = 257
  pad_id: int = 258

  @property
  def vocab_size(self) -> int:
    """Number of token ids (259): 256 byte values + BOS + EOS + PAD."""
    return 259

  @property
  def byte_lengths(self) -> np.ndarray:
    """int64 [vocab_size]: the bytes of text each id stands for: 1 for ids 0..255, 0 for BOS,
    EOS and PAD."""
    return np.r_[np.ones(256, np.int64), np.zeros(3, np.int64)]

  def encode(self, text: str | bytes) -> np.ndarray:
    """Encodes text to ids.

    Args:
      text: a `str` (encoded as UTF-8) or raw `bytes` (taken as they are).

    Returns:
      int32 array `[num_bytes]` with values in [0, 256).
    """
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int32)

  def decode_bytes(self, ids) -> bytes:
    """Returns the bytes of `ids` ([n] ints), dropping BOS/EOS/PAD.

    Raises:
      ValueError: if an id is outside [0, vocab_size).
    """
    ids = checked_ids(ids, self.vocab_size)
    return ids[ids < 256].astype(np.uint8).tobytes()

  def decode(self, ids) -> str:
    """Decodes ids ([n] ints) to text; invalid UTF-8 becomes U+FFFD, never an error."""
    return self.decode_bytes(ids).decode("utf-8", errors="replace")


# U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's whitespace meta symbol. Text that contains it
# literally would decode as a space, so `SentencePieceTokenizer.encode` spells it in byte pieces.
SP_SPACE = "\u2581"


class SentencePieceTokenizer:
  """A SentencePiece model (the `sentencepiece` library; Kudo & Richardson, arXiv 1808.06226).

  Models trained by `python -m data.prepare` (see `data.prepare.train_sentencepiece`) are
  lossless: identity normalization, no dummy prefix, whitespace kept, byte fallback (any
  character outside the vocabulary becomes its UTF-8 byte pieces `<0x..>`), digits split, as in
  LLaMA (Touvron et al., arXiv 2302.13971, Section 2.1). For them `decode(encode(text)) == text`
  for every `str`. The literal character U+2581, which SentencePiece uses for spaces, is encoded
  as its three byte pieces so that it survives too. Other SentencePiece models load as well
  (they need BOS, EOS and PAD ids), but may normalize text (e.g. NFKC, a dummy prefix).

  Attributes:
    model_path: the `.model` file it was loaded from.
    model_sha256: hex sha256 of that file; tokenizers are equal when these are equal.
    bos_id, eos_id, pad_id, unk_id: special ids (from the model).
  """

  def __init__(self, model_path: str, model_proto: bytes | None = None):
    """Loads a `.model` file (or its bytes, `model_proto`, which `model_path` then only names).

    Raises:
      configs.errors.ConfigError: the file is missing or not a SentencePiece model, or the
        model lacks a BOS, EOS or PAD id (naming `data.tokenizer`).
    """
    self.model_path = model_path
    try:
      if model_proto is None:
        with open(model_path, "rb") as f:
          model_proto = f.read()
    except OSError as e:
      raise ConfigError(f"data.tokenizer='sentencepiece:{model_path}': cannot read the model "
                        f"({e.strerror}); give the path of a SentencePiece .model file, e.g. "
                        "<prepared dir>/tokenizer.model") from e
    self._load(model_proto)
    ids = {"bos": self.bos_id, "eos": self.eos_id, "pad": self.pad_id}
    if min(ids.values()) < 0 or len(set(ids.values())) < 3:
      raise ConfigError(f"data.tokenizer='sentencepiece:{model_path}': the model needs distinct "
                        f"BOS, EOS and PAD ids (got {ids}); train it with python -m data.prepare "
                        "(or SentencePieceTrainer with bos_id, eos_id and pad_id set)")

  def _load(self, proto: bytes) -> None:
    import sentencepiece as spm  # optional at import time: byte-level runs never load it
    sp = spm.SentencePieceProcessor()
    try:
      sp.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError) as e:
      raise ConfigError(f"data.tokenizer='sentencepiece:{self.model_path}' is not a SentencePiece "
                        f"model: {e}") from e
    self._proto = proto
    self._sp = sp
    self.model_sha256 = hashlib.sha256(proto).hexdigest()
    self.bos_id, self.eos_id = sp.bos_id(), sp.eos_id()
    self.pad_id, self.unk_id = sp.pad_id(), sp.unk_id()
    self._byte_id = np.full(256, -1, np.int64)  # byte value -> id of its <0x..> piece, or -1
    self._id_byte = np.full(sp.get_piece_size(), -1, np.int64)  # id -> byte value, or -1
    for i in range(sp.get_piece_size()):
      if sp.is_byte(i):
        value = int(sp.id_to_piece(i)[3:5], 16)
        self._byte_id[value], self._id_byte[i] = i, value
    self._special = np.zeros(sp.get_piece_size(), bool)
    for i in (self.bos_id, self.eos_id, self.pad_id):
      if 0 <= i < sp.get_piece_size():
        self._special[i] = True
    self._space_ids = [int(self._byte_id[b]) for b in SP_SPACE.encode("utf-8")]
    lengths = np.zeros(sp.get_piece_size(), np.int64)  # `byte_lengths`
    for i in range(sp.get_piece_size()):
      if self._id_byte[i] >= 0:
        lengths[i] = 1
      elif not (self._special[i] or sp.is_control(i)):  # unknown: the text it decodes to
        piece = sp.decode([i]) if sp.is_unknown(i) else sp.id_to_piece(i).replace(SP_SPACE, " ")
        lengths[i] = len(piece.encode("utf-8"))
    self._byte_lengths = lengths

  def __getstate__(self):  # picklable (grain / multiprocessing workers): the model's bytes
    return {"model_path": self.model_path, "proto": self._proto}

  def __setstate__(self, state):
    self.model_path = state["model_path"]
    self._load(state["proto"])

  def __eq__(self, other) -> bool:
    return isinstance(other, SentencePieceTokenizer) and other.model_sha256 == self.model_sha256

  def __hash__(self) -> int:
    return hash(self.model_sha256)

  def __repr__(self) -> str:
    return f"SentencePieceTokenizer({self.model_path!r}, vocab_size={self.vocab_size})"

  @property
  def vocab_size(self) -> int:
    """Number of token ids (the model's pieces, special and byte pieces included)."""
    return self._sp.get_piece_size()

  @property
  def byte_lengths(self) -> np.ndarray:
    """int64 [vocab_size]: the UTF-8 bytes of text each id stands for: 1 for a byte piece
    `<0x..>`, the piece's text (U+2581 as the space it decodes to) for the others, 0 for BOS,
    EOS, PAD and control pieces. For the lossless models of data.prepare,
    `byte_lengths[encode(text)].sum() == len(text.encode())`."""
    return self._byte_lengths

  def encode(self, text: str | bytes) -> np.ndarray:
    """Encodes text to ids, without BOS/EOS.

    Args:
      text: a `str`, or `bytes` holding UTF-8 text.

    Returns:
      int32 array `[num_tokens]`.

    Raises:
      ValueError: `text` is bytes that are not valid UTF-8 (the byte tokenizer takes any bytes;
        SentencePiece encodes text).
    """
    if not isinstance(text, str):
      try:
        text = bytes(text).decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"SentencePieceTokenizer encodes UTF-8 text; got invalid bytes ({e})") from e
    parts = text.split(SP_SPACE)
    if len(parts) == 1:
      return np.asarray(self._sp.encode(text), np.int32)
    if min(self._space_ids) < 0:
      raise ValueError(f"{self.model_path} has no byte pieces for U+2581 (no byte_fallback): "
                       "text containing it cannot be encoded losslessly")
    ids: list[int] = []
    for i, piece_ids in enumerate(self._sp.encode(parts)):
      if i:
        ids.extend(self._space_ids)
      ids.extend(piece_ids)
    return np.asarray(ids, np.int32)

  def decode_bytes(self, ids) -> bytes:
    """Returns the bytes of `ids` ([n] ints), dropping BOS/EOS/PAD.

    Byte pieces give their exact byte (so a truncated multi-byte character stays truncated
    bytes, as with the byte tokenizer); runs of other pieces are decoded by SentencePiece.

    Raises:
      ValueError: if an id is outside [0, vocab_size).
    """
    ids = checked_ids(ids, self.vocab_size)
    ids = ids[~self._special[ids]]
    byte_values = self._id_byte[ids]
    out, start = [], 0
    for i in np.flatnonzero(byte_values >= 0).tolist():
      if i > start:
        out.append(self._sp.decode(ids[start:i].tolist()).encode("utf-8"))
      out.append(bytes((byte_values[i],)))
      start = i + 1
    if start < len(ids):
      out.append(self._sp.decode(ids[start:].tolist()).encode("utf-8"))
    return b"".join(out)

  def decode(self, ids) -> str:
    """Decodes ids ([n] ints) to text; invalid UTF-8 becomes U+FFFD, never an error."""
    return self.decode_bytes(ids).decode("utf-8", errors="replace")


Tokenizer = ByteTokenizer | SentencePieceTokenizer | HFTokenizer
TOKENIZERS = {"byte": ByteTokenizer}
SENTENCEPIECE_PREFIX = "sentencepiece:"


def get_tokenizer(name: str) -> Tokenizer:
  """Returns the tokenizer `data.tokenizer` names: "byte", "sentencepiece:<path to .model>" or
  "hf:<tokenizer.json, or a folder holding one>".

  Raises:
    configs.errors.ConfigError: an unknown name (listing the valid forms), or a SentencePiece
      model or tokenizer.json that cannot be used (see `SentencePieceTokenizer`, `HFTokenizer`).
  """
  if isinstance(name, str) and name.startswith(HF_PREFIX):
    if not name[len(HF_PREFIX):]:
      raise ConfigError("data.tokenizer='hf:' needs the path of a tokenizer.json or of a folder "
                        "holding one, e.g. 'hf:/models/llama3'")
    return hf_tokenizer.load(name[len(HF_PREFIX):])
  if isinstance(name, str) and name.startswith(SENTENCEPIECE_PREFIX):
    path = name[len(SENTENCEPIECE_PREFIX):]
    if not path:
      raise ConfigError("data.tokenizer='sentencepiece:' needs the path of a .model file, e.g. "
                        "'sentencepiece:/data/corpus/tokenizer.model'")
    return SentencePieceTokenizer(os.path.expanduser(path))
  if name not in TOKENIZERS:
    raise ConfigError(f"data.tokenizer={name!r} is not supported; choose one of "
                      f"{sorted(TOKENIZERS)}, 'sentencepiece:<path to .model>' or "
                      "'hf:<tokenizer.json or its folder>'")
  return TOKENIZERS[name]()
