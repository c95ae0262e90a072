"""FoPE: Fourier position embedding, RoPE with each pair's phase a Fourier series and the
under-trained low frequencies removed.

Hua, Jiang, Lv, Zhang, Ding, Sun, Qi, Fan, Zhu & Zhou, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", arXiv 2412.17739, Sec. 4 (Eqs. 11-13)
and the listing of its appendix. Two changes to RoPE, for head_dim D, RoPE's frequencies
w_m = rope_theta^(-2m/D), m = 0..D/2-1, and the training length L:

  1. frequencies that do not complete a period within L, w_m < 2 pi / L, are removed (the paper's
     "clip the floor frequencies to zero"): M' frequencies remain (the highest ones);
  2. each rotated pair d = 0..P-1 (P = min(M', D/4), the listing's `output_dim`) is turned by a
     mixture of the M' frequencies instead of a single one, per head h:

       c_d(t) = sum_m cos(w_m t) C[h, m, d]  [/ sum_m C[h, m, d]],
       s_d(t) = sum_m sin(w_m t) S[h, m, d]  [/ sum_m S[h, m, d]],
       (x1, x2) -> (x1 c_d - x2 s_d, x2 c_d + x1 s_d)       (half-split layout, as `apply_rope`);

     the other D/2 - P pairs get c = s = 1 (the listing pads both with the value 1), a
     position-independent map (x1 - x2, x2 + x1), i.e. NoPE pairs whose logits count twice.

The division in brackets is the appendix listing's normalisation by the column sum; the authors'
released code does not divide by default (its `fourier_norm` is off). `fope_normalize` chooses:
"none" (the released default, the default here) or "column_sum" (the listing; what runs made
before the field used: `LEGACY_DEFAULTS`, filled in by configs/stored.py for their config.json).
The column sum can be 0 or near it (with gain 0 a pair d whose column holds no eye, d *
ceil(M'/P) >= M', e.g. M' = 5, P = 4, d = 3, divides 0 by 0; with gain > 0 such a column's sum
is a small random number), so the factors |c_d|, |s_d| are bounded only by
sum_m |C[h, m, d]| / |sum_m C[h, m, d]| (`factor_bound`). Every accepted configuration has that
bound <= `MAX_FACTOR` (3: RoPE's factors are cos and sin, <= 1): a configuration above it (a
large gain, or a column sum near 0) is refused by `check_config`, naming the fields, before
anything is built.

Coefficients, as the authors' released OLMo-based code (its `FourierEmbedding` with
`fourier_init="eye_xavier_norm"`, `fourier_separate_basis`, `fourier_separate_head`,
`fourier_learnable=False`): C and S are separate
[H, M', P] arrays, each `torch.nn.init.xavier_normal_` with gain `fope_init_gain` (0.3; torch's
fans of a 3-D tensor: fan_in = M' P, fan_out = H P, std = gain sqrt(2 / (fan_in + fan_out))) plus an
"eye": 1 at [.., m, m] when M' = P, else at [.., d * ceil(M'/P), d] (the code's `get_step_eye`).
They are not trained (requires_grad=False there); here they are drawn from numpy with
`fope_seed`, a pure function of the config, so no state is stored and a resumed or warm-started
run rebuilds the same ones. The sign of the rotation is the authors' forward one
(`t cos + rotate_half(t) sin`), RoPE's; the paper's listing has the inverse sign, which gives the
same logits with t - s mirrored.

The mixture makes c_d(t) c_d(u) + s_d(t) s_d(u) depend on t and u, not only on t - u (C and S are
distinct random matrices), so FoPE is not exactly relative; its positions still reach attention
only as ids through `rotate`, so the eval-time position-id transforms apply (`relative`). No fused
kernel form (the kernel rotates by single frequencies): attention runs the XLA path.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.positions.base import PositionalScheme
from models.positions.rope import rope_inv_freq


def fope_frequencies(head_dim: int, rope_theta: float, train_len: int) -> np.ndarray:
  """RoPE's w_m = rope_theta^(-2m/head_dim) that complete a period in `train_len` tokens
  (w_m >= 2 pi / train_len): float64 [M'], highest first (arXiv 2412.17739, Sec. 4)."""
  freqs = rope_inv_freq(head_dim, rope_theta).astype(np.float64)
  return freqs[freqs >= 2 * np.pi / train_len]


NORMALIZE = ("none", "column_sum")  # fope_normalize: the released code's default | the listing
MAX_FACTOR = 3.0  # the largest |c_d(t)|, |s_d(t)| an accepted configuration can give
# Fields whose default changed, with the value runs made before the change used (configs/stored.py).
LEGACY_DEFAULTS = {"fope_normalize": "column_sum"}


def fope_tables(num_heads: int, head_dim: int, rope_theta: float, train_len: int, gain: float,
                seed: int, normalize: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(frequencies float64 [M'], C, S float64 [H, M', P]) as the scheme uses them: drawn from
  `seed` (C first, then S) and, with normalize="column_sum", divided by their column sums."""
  freqs = fope_frequencies(head_dim, rope_theta, train_len)
  pairs = min(len(freqs), head_dim // 4)  # the listing's output_dim
  rng = np.random.default_rng(seed)
  out = []
  for _ in ("cos", "sin"):  # the code draws C, then S
    c = fope_coefficients(num_heads, len(freqs), pairs, gain, rng)
    if normalize == "column_sum":
      with np.errstate(divide="ignore", invalid="ignore"):  # 0 / 0: refused by factor_bound
        c = c / c.sum(axis=1, keepdims=True)
    out.append(c)
  return freqs, out[0], out[1]


def factor_bound(cos_coef: np.ndarray, sin_coef: np.ndarray) -> float:
  """max over heads and pairs of sum_m |C[h, m, d]| and sum_m |S[h, m, d]| (of the tables as
  used): the largest |c_d(t)|, |s_d(t)| can be at any position; inf where a table is not finite."""
  tables = [np.abs(x).sum(axis=1) for x in (cos_coef, sin_coef) if x.size]
  if not tables:
    return 0.0
  bound = max(float(t.max()) for t in tables)
  return bound if math.isfinite(bound) else math.inf


def fope_coefficients(num_heads: int, num_freqs: int, num_pairs: int, gain: float,
                      rng: np.random.Generator) -> np.ndarray:
  """One of C, S: float64 [num_heads, num_freqs, num_pairs], xavier-normal (torch's fans of a 3-D
  tensor) with `gain`, plus the (step) eye of the authors' code; not yet normalised."""
  fan_in, fan_out = num_freqs * num_pairs, num_heads * num_pairs
  std = gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
  coef = rng.normal(0.0, 1.0, (num_heads, num_freqs, num_pairs)) * std
  step = math.ceil(num_freqs / num_pairs) if num_pairs else 1
  for d in range(num_pairs):
    if d * step < num_freqs:
      coef[:, d * step, d] += 1.0
  return coef


class FoPE(PositionalScheme):
  """Fourier position embedding (arXiv 2412.17739) on every head's queries and keys.

  Config (`model.position`): rope_theta, fope_train_len, fope_init_gain, fope_seed,
  fope_normalize.
  """

  relative = True  # positions reach attention only as ids (the rotate hook)
  per_head_rotation = True  # per-head parameters: under GQA each query head rotates its key copy

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "rope_theta": (10000.0, "base of the inverse frequencies."),
      "fope_train_len": (-1, "FoPE: L of the frequency floor 2 pi / L; -1 = data.train_len."),
      "fope_init_gain": (0.3, "FoPE: xavier-normal gain of the Fourier coefficients."),
      "fope_seed": (0, "FoPE: seed of the (fixed, untrained) Fourier coefficients."),
      "fope_normalize": ("none", 'FoPE: "none" (the released code) | "column_sum" (the '
                                 "paper's listing)."),
  }
  legacy_defaults = LEGACY_DEFAULTS

  @classmethod
  def check_config(cls, cfg, dims):
    length = cfg.get("fope_train_len", -1)
    if isinstance(length, bool) or not isinstance(length, int) or not (length == -1 or length > 0):
      raise ConfigError(f"model.position.fope_train_len must be -1 (data.train_len) or a length "
                        f"> 0 in tokens; got {length!r}")
    gain = cfg.get("fope_init_gain", 0.3)
    if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not (
        math.isfinite(gain) and gain >= 0):
      raise ConfigError(f"model.position.fope_init_gain must be a finite number >= 0; "
                        f"got {gain!r}")
    seed = cfg.get("fope_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
      raise ConfigError(f"model.position.fope_seed must be an integer >= 0; got {seed!r}")
    theta = cfg.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
      raise ConfigError(f"model.position.rope_theta must be a number > 1; got {theta!r}")
    if dims.head_dim % 2:
      raise ConfigError(f"FoPE rotates pairs: the head dimension must be even; got "
                        f"{dims.head_dim}")
    normalize = cfg.get("fope_normalize", "none")
    if normalize not in NORMALIZE:
      raise ConfigError(f"model.position.fope_normalize must be one of {list(NORMALIZE)}; "
                        f"got {normalize!r}")
    _, cos_coef, sin_coef = fope_tables(dims.num_heads, dims.head_dim, float(theta),
                                        dims.train_len if length == -1 else length, float(gain),
                                        seed, normalize)
    bound = factor_bound(cos_coef, sin_coef)
    if bound > MAX_FACTOR:
      raise ConfigError(
          f"model.position.fope_init_gain={gain!r} with fope_seed={seed}, "
          f"fope_normalize={normalize!r}: FoPE's cos/sin factors could reach {bound:.3g} "
          f"(limit {MAX_FACTOR:g}; RoPE's are <= 1)"
          + (": a pair's coefficients sum to about 0, and the listing divides by that sum; use "
             "fope_normalize='none' (the released code) or another fope_seed"
             if normalize == "column_sum" else "; lower fope_init_gain"))

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (rope_theta, fope_train_len, fope_init_gain, fope_seed,
    fope_normalize); dims: see `Dims` (num_heads, head_dim, train_len).

    Raises:
      ConfigError: through `check_config` (positions.build checks first): a bad field, or a
        configuration whose factors could exceed MAX_FACTOR.
    """
    del rngs  # the coefficients are fixed, drawn from fope_seed
    length = int(cfg.get("fope_train_len", -1))
    freqs, *coefs = fope_tables(dims.num_heads, dims.head_dim, float(cfg.rope_theta),
                                dims.train_len if length == -1 else length,
                                float(cfg.get("fope_init_gain", 0.3)),
                                int(cfg.get("fope_seed", 0)), cfg.get("fope_normalize", "none"))
    self.half = dims.head_dim // 2
    self.num_pairs = coefs[0].shape[2]  # the listing's output_dim
    # Static (hashable) constants: frequencies [M'] and normalised C, S [H, M', P], flattened.
    self.freqs = tuple(float(f) for f in freqs)
    self.coef_shape = (dims.num_heads, len(freqs), self.num_pairs)
    self.cos_coef = tuple(float(v) for v in coefs[0].ravel())
    self.sin_coef = tuple(float(v) for v in coefs[1].ravel())

  def cos_sin(self, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(c, s): float32 [batch, seq, heads, head_dim/2] per-pair factors at `positions` (int32 or
    float32 [batch, seq], tokens); pairs >= P are 1 in both."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(self.freqs, jnp.float32)
    out = []
    for coef, fn in ((self.cos_coef, jnp.cos), (self.sin_coef, jnp.sin)):
      table = jnp.asarray(np.asarray(coef, np.float32).reshape(self.coef_shape))
      mixed = jnp.einsum("bsm,hmd->bshd", fn(angles), table,
                         precision=jax.lax.Precision.HIGHEST)
      pad = self.half - self.num_pairs
      out.append(jnp.pad(mixed, ((0, 0), (0, 0), (0, 0), (0, pad)), constant_values=1.0))
    return out[0], out[1]

  def _apply(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    c, s = self.cos_sin(positions)
    x1 = x[..., :self.half].astype(jnp.float32)
    x2 = x[..., self.half:].astype(jnp.float32)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)

  def rotate(self, q, k, q_positions, k_positions, layer):
    """q: [b, q_len, H, D], k: [b, k_len, H, D]; positions int32 [b, len] -> (q, k) in their
    dtypes, every layer alike."""
    del layer
    return self._apply(q, q_positions), self._apply(k, k_positions)

  def kernel_spec(self, layer, q_positions, k_positions):
    """No fused form: the reason string (the kernel rotates by single frequencies)."""
    del layer, q_positions, k_positions
    return ("FoPE turns each pair by a mixture of frequencies with non-unit cos/sin factors; the "
            "fused kernel rotates by single frequencies only")
