"""Tokenizers. The default is byte-level: every UTF-8 text round-trips exactly."""

from __future__ import annotations

import dataclasses

import numpy as np


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
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
      raise ValueError(
          f"token ids must lie in [0, {self.vocab_size}); got min {ids.min()}, max {ids.max()}")
    return ids[ids < 256].astype(np.uint8).tobytes()

  def decode(self, ids) -> str:
    """Decodes ids ([n] ints) to text; invalid UTF-8 becomes U+FFFD, never an error."""
    return self.decode_bytes(ids).decode("utf-8", errors="replace")


TOKENIZERS = {"byte": ByteTokenizer}


def get_tokenizer(name: str) -> ByteTokenizer:
  """Returns the tokenizer named `name` (one of `TOKENIZERS`).

  Raises:
    configs.validate.ConfigError: for an unknown name, listing the valid ones.
  """
  from configs.validate import ConfigError  # local import: configs imports nothing from data
  if name not in TOKENIZERS:
    raise ConfigError(f"data.tokenizer={name!r} is not supported; choose one of {sorted(TOKENIZERS)}")
  return TOKENIZERS[name]()
