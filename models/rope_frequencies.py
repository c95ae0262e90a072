"""RoPE frequency scaling, per method: the inverse frequencies and q/k factors of each
`model.position.rope_scaling` method (PI, NTK, dynamic NTK, YaRN, dynamic YaRN, ABF, llama3,
LongRoPE).

Pure functions of the method's parameters, used at training and at evaluation alike through
`models.rope_scaling.scaled_rope` (which selects the method from the config and validates its
fields, `models.rope_scaling.check_config`) and `models/positions/rope.py`; LongRoPE's factor
search (sweeps/longrope_search.py) calls them directly.

Notation: d = rot_dim (rotated features of a head), theta_i = b^(-2i/d), i = 0 .. d/2 - 1, the
inverse frequencies of RoPE with base b = `rope_theta` (Su et al., arXiv 2104.09864, Sec. 3.2),
L = the original (training) context length, tokens (`rope_scaling_train_len`, -1 = train_len),
s = the scale factor (`rope_scaling_factor`), l = the current length of a batch row, tokens
(1 + its largest position id).

  pi           Position Interpolation, Chen et al., arXiv 2306.15595, Sec. 2.3, Eq. (4): m -> m/s,
               frequencies unchanged (`pi_position_scale`).
  ntk          "NTK-aware" interpolation (bloc97, 2023; Peng et al., arXiv 2309.00071, Sec. 3.1,
               Eq. (14)-(16)): a new base b' = b * s^(d/(d-2)) (`ntk_inv_freq`).
  dynamic_ntk  "Dynamic NTK" (Peng et al., Sec. 3.3): `ntk` with a factor recomputed from l
               (`dynamic_ntk_inv_freq`): the paper's s' = max(1, l/L) (`dynamic_ntk_alpha` = 1,
               the default) or Hugging Face's s' = a l/L - (a - 1) for l > L (a =
               `dynamic_ntk_alpha`, HF's `factor`); plain RoPE, bit for bit, for l <= L.
  yarn         YaRN (Peng et al., Sec. 3.2 and 3.4): "NTK-by-parts" frequencies, Eq. (17)-(20)
               (`yarn_inv_freq`), with the ramp of the paper (`yarn_ramp="ratio"`, linear in the
               rotations r = L / lambda) or of the authors' code and Hugging Face
               (`yarn_ramp="index"`, linear in the pair index between the rounded correction
               dimensions, `yarn_index_ramp`); q and k both multiplied by sqrt(1/t) =
               0.1 ln(s) + 1, Eq. (21)-(22), or DeepSeek's ratio of two such "mscale" values, or an
               explicit factor (`yarn_attention_factor`).
  dynamic_yarn "Dynamic-YaRN" (Peng et al., Sec. 3.3 and 5.2, where it extends Llama 2 without
               fine-tuning; the authors' `LlamaDynamicYaRNScaledRotaryEmbedding`): `yarn` with s
               recomputed from the current length, s' = max(1, l/L) (`dynamic_yarn_inv_freq`,
               `dynamic_yarn_attention_factor`): the ramp gamma is YaRN's (it depends on L only),
               the frequencies (1 - gamma) theta / s' + gamma theta and q, k times
               (0.1 m ln s' + 1) / (0.1 m_all ln s' + 1) per row; plain RoPE, bit for bit, for
               l <= L.
  abf          Adjusted base frequency, Xiong et al., arXiv 2309.16039, Sec. 3.1: a new base
               (`abf_theta`, the paper's 500,000) in place of `rope_theta` (`abf_inv_freq`).
  llama3       The Llama 3.1 rule (Meta's reference `apply_scaling`; HF
               `_compute_llama3_parameters`): wavelengths above L/low divided by s, below L/high
               kept, a smooth blend between (`llama3_inv_freq`).
  longrope     LongRoPE, Ding et al., arXiv 2402.13753, Sec. 3: searched per-pair rescale factors
               lambda_i, theta_i / lambda_i, short factors for rows with l <= L and long ones
               beyond (as HF / Phi-3), attention factor sqrt(1 + ln s / ln L), and optionally the
               first n-hat positions rotated as plain RoPE (`longrope_inv_freq`,
               `longrope_attention_factor`).
  alibi_interpolation
               ALiBi slopes times L/n for a query with n > L visible keys (Al-Khateeb et al.,
               arXiv 2310.13017; see `models.positions.alibi.alibi_interpolation_scale`).

Equation numbers of arXiv 2309.00071 are those of its v2 (Nov. 2023).

Reference code read for the definitions (none of it copied): Hugging Face transformers
`src/transformers/modeling_rope_utils.py` (`_compute_dynamic_ntk_parameters`,
`_compute_yarn_parameters`, `_compute_longrope_parameters`, `_compute_llama3_parameters`),
jquesnelle/yarn `scaled_rope/LlamaYaRNScaledRotaryEmbedding.py`, DeepSeek-V2's
`DeepseekV2YarnRotaryEmbedding` (`yarn_get_mscale`), Meta's Llama 3.1 `apply_scaling`, and
microsoft/LongRoPE `rope/longrope.py` and `rope/LlamaLongRoPEScaledStartTokenRotaryEmbedding.py`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

YARN_RAMPS = ("index", "ratio")  # model.position.yarn_ramp (see `yarn_inv_freq`)


def _base_inv_freq(rot_dim: int, theta: float) -> np.ndarray:
  """theta^(-2i/rot_dim), float64 [rot_dim/2]: the formula of `models.positions.rope.rope_inv_freq`,
  which casts the same float64 values to float32 (this module must not import models.positions)."""
  return 1.0 / theta ** (np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)


def base_inv_freq(rot_dim: int, rope_theta: float) -> np.ndarray:
  """RoPE's inverse frequencies theta_i = b^(-2i/d) (Su et al., arXiv 2104.09864, Sec. 3.2).

  The values every method here starts from, bit for bit those of plain RoPE
  (`models.positions.rope.rope_inv_freq`); LongRoPE's factor search divides them by its
  candidate lambda_i (`longrope_inv_freq`, `RoPE.set_search_frequencies`).

  Args:
    rot_dim: d, even, >= 2 (rotated features of a head).
    rope_theta: b > 1.

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: rot_dim odd or < 2.
  """
  _check_rot_dim(rot_dim)
  return _base_inv_freq(rot_dim, rope_theta).astype(np.float32)


def _check_rot_dim(rot_dim: int) -> None:
  if rot_dim < 2 or rot_dim % 2:
    raise ValueError(f"rot_dim must be an even number >= 2; got {rot_dim}")


def _check_factor(factor: float) -> None:
  if not factor >= 1:
    raise ValueError(f"factor must be >= 1; got {factor}")


def pi_position_scale(factor: float) -> float:
  """Position Interpolation (Chen et al., arXiv 2306.15595, Sec. 2.3, Eq. (4)): 1/s on positions.

  RoPE then rotates feature pair i of position m by (m/s) * theta_i; the inverse frequencies are
  unchanged (the plain `rope_inv_freq`).

  Args:
    factor: s >= 1 (dimensionless; s = L'/L, the extended over the trained context length).

  Returns:
    1/s as a Python float (multiplies float32 positions).

  Raises:
    ValueError: factor < 1.
  """
  if not factor >= 1:
    raise ValueError(f"factor must be >= 1; got {factor}")
  return 1.0 / factor


def ntk_theta(rot_dim: int, rope_theta: float, factor: float) -> float:
  """The "NTK-aware" base b' = b * s^(d/(d-2)) (Peng et al., arXiv 2309.00071, Eq. (16)).

  With it the highest frequency (i = 0) is unchanged and the lowest (i = d/2 - 1) is divided by
  exactly s.

  Args:
    rot_dim: d, even, >= 4 (d = 2 would divide by zero).
    rope_theta: b > 1.
    factor: s >= 1.

  Returns:
    b' as a Python float.

  Raises:
    ValueError: rot_dim odd or < 4, or factor < 1.
  """
  _check_rot_dim(rot_dim)
  if rot_dim < 4:
    raise ValueError(f"NTK-aware scaling needs rot_dim >= 4 (s is raised to d/(d-2)); "
                     f"got {rot_dim}")
  if not factor >= 1:
    raise ValueError(f"factor must be >= 1; got {factor}")
  return float(rope_theta * factor ** (rot_dim / (rot_dim - 2)))


def ntk_inv_freq(rot_dim: int, rope_theta: float, factor: float) -> np.ndarray:
  """"NTK-aware" inverse frequencies b'^(-2i/d), b' = `ntk_theta` (Peng et al., Eq. (15)-(16)).

  Args / Raises: as `ntk_theta`.

  Returns:
    float32 [rot_dim/2], radians per position.
  """
  return _base_inv_freq(rot_dim, ntk_theta(rot_dim, rope_theta, factor)).astype(np.float32)


def dynamic_ntk_factor(length: jax.Array, train_len: int, alpha: float = 1.0) -> jax.Array:
  """Dynamic scale factor s' of the current length l (Peng et al., arXiv 2309.00071, Sec. 3.3).

  alpha = 1 (the default): the paper's s' = max(1, l/L). alpha = a != 1: Hugging Face's
  `_compute_dynamic_ntk_parameters`, s' = a l/L - (a - 1) for l > L (HF's `factor` is a) and 1
  for l <= L; both equal 1 at l = L and grow linearly beyond, with slope a/L.

  Args:
    length: int or float array [...] of current sequence lengths l, tokens.
    train_len: L >= 1, tokens.
    alpha: a >= 1 (dimensionless).

  Returns:
    float32 [...] factors >= 1 (exactly 1 where l <= L).
  """
  ratio = jnp.asarray(length, jnp.float32) / jnp.float32(train_len)
  if alpha == 1.0:
    return jnp.maximum(1.0, ratio)
  a = jnp.float32(alpha)
  return jnp.where(ratio > 1.0, a * ratio - (a - 1.0), jnp.float32(1.0))


def dynamic_ntk_inv_freq(inv_freq: jax.Array, length: jax.Array, train_len: int,
                         alpha: float = 1.0) -> jax.Array:
  """"Dynamic NTK" inverse frequencies for sequences of current length l (Peng et al., Sec. 3.3).

  The NTK-aware base change (Eq. (16)) with s' = `dynamic_ntk_factor(l, L, alpha)`, written as
  theta_i' = b'^(-2i/d) = theta_i * s'^(-2i/(d-2)), where theta_i are the given (unscaled)
  frequencies and d = 2 * len(inv_freq). Where l <= L the given `inv_freq` is returned as is
  (selected, not recomputed), so the rotation is bit-identical to plain RoPE there, for every
  alpha.

  Args:
    inv_freq: float32 [rot_dim/2] plain inverse frequencies (radians per position), rot_dim >= 4.
    length: int32 [batch] current sequence lengths l, tokens.
    train_len: L >= 1, tokens.
    alpha: a >= 1 of `dynamic_ntk_factor` (1 = the paper's form).

  Returns:
    float32 [batch, rot_dim/2].

  Raises:
    ValueError: rot_dim = 2 * len(inv_freq) < 4.
  """
  half = inv_freq.shape[-1]
  if half < 2:
    raise ValueError(f"dynamic NTK scaling needs rot_dim >= 4; got {2 * half}")
  inv_freq = jnp.asarray(inv_freq, jnp.float32)
  length = jnp.asarray(length)
  scale = dynamic_ntk_factor(length, train_len, alpha)[:, None]  # [batch, 1]
  exponent = jnp.asarray(np.arange(half) * 2.0 / (2 * half - 2), jnp.float32)  # 2i/(d-2)
  scaled = inv_freq * scale ** -exponent
  return jnp.where((length > train_len)[:, None], scaled, inv_freq)


def yarn_ramp(rot_dim: int, rope_theta: float, train_len: int, alpha: float = 1.0,
              beta: float = 32.0) -> np.ndarray:
  """YaRN's ramp gamma(r(d)) per feature pair (Peng et al., arXiv 2309.00071, Eq. (17)-(18)).

  r(d) = L / lambda_d with lambda_d = 2 pi / theta_d = 2 pi b^(2d/|D|) (Eq. (13)) the wavelength
  of pair d in positions: how many full rotations the pair makes over the training context.
  gamma(r) = 0 for r < alpha, 1 for r > beta, (r - alpha)/(beta - alpha) in between. (Eq. (17)
  as printed in v2 writes the NTK base b'; Eq. (13), the prose and the authors' code use the
  original base b, as here.) This is `yarn_ramp="ratio"`. The authors' code (jquesnelle/yarn,
  `_yarn_linear_ramp_mask`) and HF ramp linearly in the pair index between floor/ceil of the
  indices where r = beta and r = alpha, a slightly different curve in between
  (`yarn_index_ramp`, `yarn_ramp="index"`); both agree outside [alpha, beta].

  Args:
    rot_dim: d, even, >= 2.
    rope_theta: b > 1.
    train_len: L >= 1, tokens.
    alpha, beta: 0 < alpha < beta, rotations over L (Llama: 1 and 32).

  Returns:
    float64 [rot_dim/2] values in [0, 1]: 1 = keep the frequency, 0 = divide it by s.

  Raises:
    ValueError: rot_dim odd or < 2, or not 0 < alpha < beta.
  """
  _check_rot_dim(rot_dim)
  if not 0 < alpha < beta:
    raise ValueError(f"need 0 < alpha < beta; got alpha={alpha}, beta={beta}")
  wavelength = 2 * math.pi / _base_inv_freq(rot_dim, rope_theta)
  r = train_len / wavelength
  return np.clip((r - alpha) / (beta - alpha), 0.0, 1.0)


def yarn_correction_range(rot_dim: int, rope_theta: float, train_len: int, alpha: float = 1.0,
                          beta: float = 32.0, truncate: bool = True) -> tuple[float, float]:
  """The pair indices (low, high) between which the authors' YaRN ramp runs.

  The pair index with r rotations over L solves L / (2 pi b^(2i/d)) = r:
  i(r) = d ln(L / (2 pi r)) / (2 ln b) (jquesnelle/yarn `_yarn_find_correction_dim`, HF
  `find_correction_dim`). low = i(beta) (floor with `truncate`), high = i(alpha) (ceil), then
  clamped to [0, d - 1] as in both codes (d - 1, not d/2 - 1: the ramp is clipped to [0, 1]
  anyway). HF's `truncate=False` (e.g. gpt-oss) keeps the unrounded values.

  Args:
    rot_dim, rope_theta, train_len, alpha, beta: as `yarn_ramp`.
    truncate: floor low and ceil high (the authors' code; HF's default).

  Returns:
    (low, high) as Python floats, pair indices.

  Raises:
    ValueError: as `yarn_ramp`.
  """
  _check_rot_dim(rot_dim)
  if not 0 < alpha < beta:
    raise ValueError(f"need 0 < alpha < beta; got alpha={alpha}, beta={beta}")

  def index(rotations):
    return rot_dim * math.log(train_len / (rotations * 2 * math.pi)) / (2 * math.log(rope_theta))

  low, high = index(beta), index(alpha)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  return float(max(low, 0)), float(min(high, rot_dim - 1))


def yarn_index_ramp(rot_dim: int, rope_theta: float, train_len: int, alpha: float = 1.0,
                    beta: float = 32.0, truncate: bool = True) -> np.ndarray:
  """gamma per feature pair as the YaRN authors' code computes it (`yarn_ramp="index"`).

  jquesnelle/yarn `LlamaYaRNScaledRotaryEmbedding` (`_yarn_linear_ramp_mask`) and HF
  `_compute_yarn_parameters` (`linear_ramp_factor`): with (low, high) =
  `yarn_correction_range`, the interpolation weight ramp_i = clip((i - low) / (high - low), 0, 1)
  (high + 0.001 if low == high), linear in the pair index i; gamma_i = 1 - ramp_i is the weight
  of the unchanged frequency (their `inv_freq_extrapolation_factor` / `inv_freq_mask`). It agrees
  with the paper's ramp (`yarn_ramp`) where r < alpha or r > beta, up to the rounding of the
  range, and differs in between: the paper is linear in r, this linear in i ~ log r.

  Args:
    rot_dim, rope_theta, train_len, alpha, beta, truncate: as `yarn_correction_range`.

  Returns:
    float64 [rot_dim/2] values in [0, 1]: 1 = keep the frequency, 0 = divide it by s.

  Raises:
    ValueError: as `yarn_ramp`.
  """
  low, high = yarn_correction_range(rot_dim, rope_theta, train_len, alpha, beta, truncate)
  if low == high:
    high += 0.001  # as both codes: no division by zero
  ramp = np.clip((np.arange(rot_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
  return 1.0 - ramp


def yarn_inv_freq(rot_dim: int, rope_theta: float, train_len: int, factor: float,
                  alpha: float = 1.0, beta: float = 32.0, ramp: str = "ratio",
                  truncate: bool = True) -> np.ndarray:
  """"NTK-by-parts" inverse frequencies used by YaRN (Peng et al., arXiv 2309.00071, Eq. (20)).

  h(theta_d) = (1 - gamma_d) * theta_d / s + gamma_d * theta_d: pairs that rotate more than beta
  times over L keep their frequency, pairs that rotate less than alpha times are interpolated
  exactly like PI (divided by s), the ones between are blended. gamma is
    ramp="ratio": the paper's Eq. (17)-(18), linear in r = L / lambda (`yarn_ramp`); this
      function's default, the only form before `yarn_ramp` existed (runs without the field);
    ramp="index": the authors' code and HF, linear in the pair index (`yarn_index_ramp`); the
      default of new configs (`models.rope_scaling.CONFIG_FIELDS`).

  Args:
    rot_dim, rope_theta, train_len, alpha, beta: as `yarn_ramp`.
    factor: s >= 1.
    ramp: "ratio" | "index".
    truncate: ramp="index" only (`yarn_correction_range`).

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: as `yarn_ramp`, factor < 1, or an unknown ramp.
  """
  _check_factor(factor)
  theta = _base_inv_freq(rot_dim, rope_theta)
  if ramp == "ratio":
    gamma = yarn_ramp(rot_dim, rope_theta, train_len, alpha, beta)
  elif ramp == "index":
    gamma = yarn_index_ramp(rot_dim, rope_theta, train_len, alpha, beta, truncate)
  else:
    raise ValueError(f"ramp must be one of {YARN_RAMPS}; got {ramp!r}")
  return ((1.0 - gamma) * theta / factor + gamma * theta).astype(np.float32)


def dynamic_yarn_inv_freq(inv_freq: jax.Array, gamma: jax.Array, length: jax.Array,
                          train_len: int) -> jax.Array:
  """"Dynamic-YaRN" inverse frequencies for rows of current length l (Peng et al., arXiv
  2309.00071, Sec. 3.3): YaRN's Eq. (20) with s' = max(1, l/L) per row.

  h(theta_i) = (1 - gamma_i) theta_i / s' + gamma_i theta_i, gamma the ramp of `yarn_ramp` /
  `yarn_index_ramp` at L (independent of s). Where l <= L the given `inv_freq` is returned as is
  (selected, not recomputed): bit-identical to plain RoPE there. At l = s L it equals
  `yarn_inv_freq(..., factor=s)` up to float32 rounding (this computes in float32 on device).

  Args:
    inv_freq: float32 [rot_dim/2] plain inverse frequencies, radians per position.
    gamma: float32 [rot_dim/2] ramp values in [0, 1] (1 = keep the frequency).
    length: int32 [batch] current lengths l, tokens.
    train_len: L >= 1, tokens.

  Returns:
    float32 [batch, rot_dim/2].
  """
  inv_freq = jnp.asarray(inv_freq, jnp.float32)
  gamma = jnp.asarray(gamma, jnp.float32)
  length = jnp.asarray(length)
  s = dynamic_ntk_factor(length, train_len)[:, None]  # [batch, 1], max(1, l/L)
  scaled = (1.0 - gamma) * inv_freq / s + gamma * inv_freq
  return jnp.where((length > train_len)[:, None], scaled, inv_freq)


def dynamic_yarn_attention_factor(length: jax.Array, train_len: int, mscale: float = 1.0,
                                  mscale_all_dim: float = 0.0, fixed: float = -1.0) -> jax.Array:
  """Dynamic-YaRN's factor on q and k per row: `yarn_attention_factor` at s' = max(1, l/L),
  i.e. (0.1 m ln s' + 1) / (0.1 m_all ln s' + 1) (m_all = 0: the denominator is 1); `fixed` > 0
  replaces it beyond L (`yarn_attention_factor` set); exactly 1 where l <= L.

  Args:
    length: int32 [batch] current lengths l, tokens.
    train_len: L >= 1, tokens.
    mscale, mscale_all_dim: m, m_all >= 0.
    fixed: -1 (derived) or a factor > 0.

  Returns:
    float32 [batch].
  """
  length = jnp.asarray(length)
  s = dynamic_ntk_factor(length, train_len)
  if fixed != -1:
    value = jnp.full(s.shape, fixed, jnp.float32)
  else:
    mscale_of = lambda m: jnp.where(s > 1, 0.1 * m * jnp.log(s) + 1.0, 1.0)  # noqa: E731
    value = mscale_of(jnp.float32(mscale)) / mscale_of(jnp.float32(mscale_all_dim))
  return jnp.where(length > train_len, value, jnp.float32(1.0))


def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
  """0.1 m ln(s) + 1 for s > 1, else 1 (DeepSeek-V2/V3 and HF `get_mscale`; jquesnelle/yarn
  `_yarn_get_mscale` is m = 1). Dimensionless Python float; m >= 0."""
  return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(factor: float, mscale: float = 1.0, mscale_all_dim: float = 0.0) -> float:
  """YaRN's factor on q and k: get_mscale(s, m) / get_mscale(s, m_all) (`yarn_get_mscale`).

  With the defaults m = 1, m_all = 0 it is the paper's sqrt(1/t) = 0.1 ln(s) + 1 (Peng et al.,
  arXiv 2309.00071, Eq. (22)), bit for bit the value used before these fields existed. Queries and
  keys are both multiplied by it, so the logits q.k / sqrt(D) are multiplied by its square
  (Eq. (21)). Other m, m_all: DeepSeek-V2/V3's `DeepseekV2YarnRotaryEmbedding` (defaults m = 1,
  m_all = 0, the same formula), which multiplies cos and sin by this ratio; DeepSeek's attention
  also multiplies its softmax scale by get_mscale(s, m_all)^2, which is not applied here. HF's
  `_compute_yarn_parameters` uses the ratio only when both m and m_all are set (non-zero) and
  0.1 ln(s) + 1 otherwise: it agrees with this function except when exactly one of them is 0 and
  m != 1. 1 for s = 1.

  Args:
    factor: s >= 1.
    mscale, mscale_all_dim: m, m_all >= 0 (dimensionless).

  Returns:
    The multiplier (dimensionless Python float, > 0).

  Raises:
    ValueError: factor < 1.
  """
  _check_factor(factor)
  return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)


def abf_inv_freq(rot_dim: int, abf_theta: float) -> np.ndarray:
  """Adjusted base frequency (Xiong et al., arXiv 2309.16039, Sec. 3.1): abf_theta^(-2i/d).

  The paper raises Llama 2's base from 10,000 to 500,000 (with continued training; here the base
  is changed at evaluation only).

  Args:
    rot_dim: d, even, >= 2.
    abf_theta: the new base (> 1).

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: rot_dim odd or < 2, or abf_theta <= 1.
  """
  _check_rot_dim(rot_dim)
  if not abf_theta > 1:
    raise ValueError(f"abf_theta must be > 1; got {abf_theta}")
  return _base_inv_freq(rot_dim, abf_theta).astype(np.float32)


def llama3_inv_freq(rot_dim: int, rope_theta: float, train_len: int, factor: float,
                    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> np.ndarray:
  """The Llama 3.1 frequency rule (Meta's reference `apply_scaling`; HF
  `_compute_llama3_parameters`).

  With wavelength lambda_i = 2 pi / theta_i (positions per rotation): lambda_i < L / high keeps
  theta_i; lambda_i > L / low gives theta_i / s; in between (L/high <= lambda_i <= L/low) the blend
  (1 - g) theta_i / s + g theta_i with g = (L / lambda_i - low) / (high - low), continuous at both
  ends. Llama 3.1: s = 8, low = 1, high = 4, L = 8192, b = 500,000. The rule was published as code
  with the Llama 3.1 release (July 2024); the Llama 3 paper (arXiv 2407.21783) gives the base but
  not this rule. It is YaRN's NTK-by-parts (Eq. (20)) with alpha = low, beta = high, the ramp
  linear in r = L / lambda_i as the paper's, without YaRN's attention factor.

  Args:
    rot_dim: d, even, >= 2.
    rope_theta: b > 1.
    train_len: L >= 1, the original context, tokens.
    factor: s >= 1.
    low_freq_factor, high_freq_factor: 0 < low < high (dimensionless).

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: rot_dim odd or < 2, factor < 1, or not 0 < low < high.
  """
  _check_rot_dim(rot_dim)
  _check_factor(factor)
  if not 0 < low_freq_factor < high_freq_factor:
    raise ValueError(f"need 0 < low_freq_factor < high_freq_factor; got {low_freq_factor}, "
                     f"{high_freq_factor}")
  theta = _base_inv_freq(rot_dim, rope_theta)
  wavelength = 2 * math.pi / theta
  g = (train_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
  blend = (1.0 - g) * theta / factor + g * theta
  out = np.where(wavelength > train_len / low_freq_factor, theta / factor, blend)
  out = np.where(wavelength < train_len / high_freq_factor, theta, out)
  return out.astype(np.float32)


def longrope_inv_freq(rot_dim: int, rope_theta: float, factors) -> np.ndarray:
  """LongRoPE's rescaled inverse frequencies theta_i / lambda_i (Ding et al., arXiv 2402.13753,
  Sec. 3; the authors' `LongRoPEScaledRotaryEmbedding._calc_inv_freq` and HF
  `_compute_longrope_parameters`: 1 / (lambda_i b^(2i/d))).

  Args:
    rot_dim: d, even, >= 2.
    rope_theta: b > 1.
    factors: d/2 rescale factors lambda_i >= 1 (dimensionless), or () for all 1 (plain RoPE).

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: rot_dim odd or < 2, or factors not () nor d/2 numbers >= 1.
  """
  _check_rot_dim(rot_dim)
  lam = np.ones(rot_dim // 2) if len(factors) == 0 else np.asarray(factors, np.float64)
  if lam.shape != (rot_dim // 2,) or not np.all(lam >= 1):
    raise ValueError(f"need {rot_dim // 2} rescale factors >= 1; got {tuple(factors)}")
  return (_base_inv_freq(rot_dim, rope_theta) / lam).astype(np.float32)


def longrope_attention_factor(factor: float, train_len: int) -> float:
  """LongRoPE's factor on q and k: sqrt(1 + ln s / ln L) for s > 1, else 1.

  The authors' code (`_calc_mscale_su`, the "su" policy of rope/longrope.py) and HF
  `_compute_longrope_parameters` (Phi-3); not an equation of the paper. cos and sin are multiplied
  by it, i.e. q and k each are, so the logits are multiplied by its square.

  Args:
    factor: s >= 1.
    train_len: L >= 2, the original context, tokens.

  Returns:
    The multiplier (dimensionless Python float, >= 1).

  Raises:
    ValueError: factor < 1, or L < 2 with s > 1 (ln L would be 0).
  """
  _check_factor(factor)
  if factor <= 1:
    return 1.0
  if train_len < 2:
    raise ValueError(f"the LongRoPE attention factor needs L >= 2; got {train_len}")
  return math.sqrt(1.0 + math.log(factor) / math.log(train_len))


def longrope_row_inv_freq(short_inv_freq: jax.Array, long_inv_freq: jax.Array,
                          length: jax.Array, train_len: int) -> jax.Array:
  """Per batch row: the long-factor frequencies where l > L, else the short ones (as HF, which
  switches on the current length; Phi-3's `_longrope_frequency_update`).

  Args:
    short_inv_freq, long_inv_freq: float32 [rot_dim/2] (may be traced: the factor search).
    length: int32 [batch] current lengths l = 1 + the row's largest position, tokens.
    train_len: L, tokens.

  Returns:
    float32 [batch, rot_dim/2].
  """
  short = jnp.asarray(short_inv_freq, jnp.float32)
  long = jnp.asarray(long_inv_freq, jnp.float32)
  return jnp.where((jnp.asarray(length) > train_len)[:, None], long, short)
