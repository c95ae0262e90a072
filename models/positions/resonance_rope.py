"""Resonance RoPE: every RoPE wavelength rounded to a whole number of tokens.

Wang et al., "Resonance RoPE: Improving Context Length Generalization of Large Language
Models", arXiv 2403.00071, Sec. 3 (Eq. (4)-(5), Algorithm 1): the wavelength of pair i,
lambda_i = 2 pi / theta_i, becomes round(lambda_i), so theta~_i = 2 pi / round(lambda_i); each
feature then repeats exactly every round(lambda_i) positions, and a position beyond the training
length maps to one seen in training for every feature of wavelength <= L. Pairs are rounded to
at least 1 token. The paper's analysis concerns the pre-critical pairs (lambda_i <= L); Algorithm 1
rounds every pair, as here (for lambda_i >> 1 the change is below 0.5 / lambda_i relatively).
RoPE's other fields apply unchanged (after any `rope_scaling`: Resonance YaRN rounds YaRN's
frequencies, as the paper's "Resonance YaRN").
"""

from __future__ import annotations

import numpy as np

from models.positions.rope import RoPE


def resonance_inv_freq(inv_freq: np.ndarray) -> np.ndarray:
  """theta~_i = 2 pi / max(1, round(2 pi / theta_i)) (float32 [rot_dim/2]; 0 stays 0)."""
  freqs = np.asarray(inv_freq, np.float64)
  safe = np.where(freqs > 0, freqs, 1.0)
  rounded = 2 * np.pi / np.maximum(1.0, np.round(2 * np.pi / safe))
  return np.where(freqs > 0, rounded, 0.0).astype(np.float32)


class ResonanceRoPE(RoPE):
  """Resonance RoPE (Wang et al., arXiv 2403.00071): RoPE with integer wavelengths."""

  @classmethod
  def frequency_transform(cls, cfg, dims, inv_freq):
    """`resonance_inv_freq`."""
    del cfg, dims
    return resonance_inv_freq(inv_freq)
