"""HoPE: high-frequency RoPE, the components with no full period in the training length removed.

Chen et al., "HoPE: A Novel Positional Encoding Without Long-Term Decay for Enhanced Context
Awareness and Extrapolation", arXiv 2410.21216, Sec. 4: RoPE's components whose wavelength
2 pi / theta_i exceeds the training length L never complete a period in training and act as
position-dependent noise beyond it; HoPE replaces them with position-independent components and
keeps only the high frequencies. Here: theta_i = 0 (the pair is not rotated) where
2 pi / theta_i > L, with L = `hope_train_len` (-1: the run's data.train_len). The paper also
studies removing the top components; this file implements the main form only.

RoPE's other fields apply unchanged (models/positions/rope.py `RoPE.frequency_transform`): with
`rope_scaling`, the cut is made on the scaled frequencies, against the same L.
"""

from __future__ import annotations

import numpy as np

from configs.errors import ConfigError
from models.positions.rope import RoPE


def hope_inv_freq(inv_freq: np.ndarray, train_len: int) -> np.ndarray:
  """RoPE's inverse frequencies [rot_dim/2] with every theta_i whose wavelength 2 pi / theta_i
  is longer than `train_len` tokens set to 0 (float32; arXiv 2410.21216, Sec. 4)."""
  freqs = np.asarray(inv_freq, np.float64)
  wavelength = np.where(freqs > 0, 2 * np.pi / np.maximum(freqs, 1e-300), np.inf)
  return np.where(wavelength > train_len, 0.0, freqs).astype(np.float32)


class HoPE(RoPE):
  """HoPE (Chen et al., arXiv 2410.21216): RoPE without its components of wavelength > L."""

  config_fields = {
      **RoPE.config_fields,
      "hope_train_len": (-1, "HoPE: L of the cut (wavelength > L removed); -1 = data.train_len."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    super().check_config(cfg, dims)
    length = cfg.get("hope_train_len", -1)
    if isinstance(length, bool) or not isinstance(length, int) or not (length == -1 or length > 0):
      raise ConfigError(f"model.position.hope_train_len must be -1 (data.train_len) or a length "
                        f"> 0 in tokens; got {length!r}")

  @classmethod
  def frequency_transform(cls, cfg, dims, inv_freq):
    """`hope_inv_freq` with L = hope_train_len, or the run's train_len."""
    length = int(cfg.get("hope_train_len", -1))
    return hope_inv_freq(inv_freq, dims.train_len if length == -1 else length)
