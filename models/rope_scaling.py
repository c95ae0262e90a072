"""RoPE frequency scaling (context extension): the maths of `model.position.rope_scaling`.

The methods are selected by `model.position.rope_scaling` and read by `models/positions/rope.py`;
ALiBi interpolation by `model.position.alibi_interpolation` in `models/positions/alibi.py`. As
eval-time extensions (`eval.extension`) they are applied to a trained run's config by
`models.extensions.apply_extension`, which keeps the registry of extension names.

Notation: d = rot_dim (rotated features of a head), theta_i = b^(-2i/d), i = 0 .. d/2 - 1, the
inverse frequencies of RoPE with base b = `rope_theta` (Su et al., arXiv 2104.09864, Sec. 3.2),
L = the training context length (tokens), s = the scale factor (`rope_scaling_factor`).

  pi           Position Interpolation, Chen et al., arXiv 2306.15595, Sec. 2.3, Eq. (4): m -> m/s,
               frequencies unchanged (`pi_position_scale`).
  ntk          "NTK-aware" interpolation (bloc97, 2023; Peng et al., arXiv 2309.00071, Sec. 3.1,
               Eq. (14)-(16)): a new base b' = b * s^(d/(d-2)) (`ntk_inv_freq`).
  dynamic_ntk  "Dynamic NTK" (Peng et al., Sec. 3.3): `ntk` with s' = max(1, l/L) recomputed for
               the current sequence length l (`dynamic_ntk_inv_freq`); plain RoPE for l <= L.
  yarn         YaRN (Peng et al., Sec. 3.2 and 3.4): "NTK-by-parts" frequencies, Eq. (17)-(20)
               (`yarn_inv_freq`), and q and k both multiplied by sqrt(1/t) = 0.1 ln(s) + 1,
               Eq. (21)-(22) (`yarn_attention_factor`).
  abf          Adjusted base frequency, Xiong et al., arXiv 2309.16039, Sec. 3.1: a new base
               (`abf_theta`, the paper's 500,000) in place of `rope_theta` (`abf_inv_freq`).
  alibi_interpolation
               ALiBi slopes times L/n for a query with n > L visible keys (Al-Khateeb et al.,
               arXiv 2310.13017; see `models.positions.alibi.alibi_interpolation_scale`).

Equation numbers of arXiv 2309.00071 are those of its v2 (Nov. 2023).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError

# model.position.rope_scaling values (method names as in the module docstring).
ROPE_SCALINGS = ("none", "pi", "ntk", "dynamic_ntk", "yarn", "abf")
# Methods that read rope_scaling_factor (dynamic_ntk takes s from the length, abf has a base).
USES_FACTOR = ("pi", "ntk", "yarn")
# The model.position fields of RoPE scaling (read by models/positions/rope.py, which declares
# them as its own), name -> (default, comment); configs/base.py gathers them.
CONFIG_FIELDS = {
    "rope_scaling": ("none", '"none"|"pi"|"ntk"|"dynamic_ntk"|"yarn"|"abf" (this module).'),
    "rope_scaling_factor": (1.0, "factor s >= 1 of pi/ntk/yarn (e.g. eval_len / train_len)."),
    "rope_scaling_train_len": (-1, "context L of dynamic_ntk/yarn, tokens; -1 = data.train_len."),
    "yarn_alpha": (1.0, "yarn: pairs with < alpha rotations over L are divided by s."),
    "yarn_beta": (32.0, "yarn: pairs with > beta rotations over L keep their frequency."),
    "abf_theta": (500000.0, "abf: the base that replaces rope_theta (Xiong et al.)."),
}
# Defaults of the eval-time frequency changes, used when a run's config.json predates them: the
# fields above and ALiBi interpolation's (declared by models/positions/alibi.py).
DEFAULTS = {**{name: default for name, (default, _) in CONFIG_FIELDS.items()},
            "alibi_interpolation": False}


def _base_inv_freq(rot_dim: int, theta: float) -> np.ndarray:
  """theta^(-2i/rot_dim), float64 [rot_dim/2]: the formula of `models.positions.rope.rope_inv_freq`,
  which casts the same float64 values to float32 (this module must not import models.positions)."""
  return 1.0 / theta ** (np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)


def _check_rot_dim(rot_dim: int) -> None:
  if rot_dim < 2 or rot_dim % 2:
    raise ValueError(f"rot_dim must be an even number >= 2; got {rot_dim}")


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


def dynamic_ntk_factor(length: jax.Array, train_len: int) -> jax.Array:
  """Dynamic scale factor s' = max(1, l/L) (Peng et al., arXiv 2309.00071, Sec. 3.3).

  This is the paper's form; Hugging Face's `_compute_dynamic_ntk_parameters` uses
  s' = alpha * l/L - (alpha - 1) for l > L with a configured alpha, which equals it for alpha = 1.

  Args:
    length: int or float array [...] of current sequence lengths l, tokens.
    train_len: L >= 1, tokens.

  Returns:
    float32 [...] factors >= 1 (exactly 1 where l <= L).
  """
  return jnp.maximum(1.0, jnp.asarray(length, jnp.float32) / jnp.float32(train_len))


def dynamic_ntk_inv_freq(inv_freq: jax.Array, length: jax.Array, train_len: int) -> jax.Array:
  """"Dynamic NTK" inverse frequencies for sequences of current length l (Peng et al., Sec. 3.3).

  The NTK-aware base change (Eq. (16)) with s' = `dynamic_ntk_factor(l, L)`, written as
  theta_i' = b'^(-2i/d) = theta_i * s'^(-2i/(d-2)), where theta_i are the given (unscaled)
  frequencies and d = 2 * len(inv_freq). Where l <= L the given `inv_freq` is returned as is
  (selected, not recomputed), so the rotation is bit-identical to plain RoPE there.

  Args:
    inv_freq: float32 [rot_dim/2] plain inverse frequencies (radians per position), rot_dim >= 4.
    length: int32 [batch] current sequence lengths l, tokens.
    train_len: L >= 1, tokens.

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
  scale = dynamic_ntk_factor(length, train_len)[:, None]  # [batch, 1]
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
  original base b, as here.) The authors' code (jquesnelle/yarn, `_yarn_linear_ramp_mask`) ramps
  linearly in the pair index between floor/ceil of the indices where r = beta and r = alpha, a
  slightly different curve in between; both agree outside [alpha, beta].

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


def yarn_inv_freq(rot_dim: int, rope_theta: float, train_len: int, factor: float,
                  alpha: float = 1.0, beta: float = 32.0) -> np.ndarray:
  """"NTK-by-parts" inverse frequencies used by YaRN (Peng et al., arXiv 2309.00071, Eq. (20)).

  h(theta_d) = (1 - gamma(r(d))) * theta_d / s + gamma(r(d)) * theta_d, with gamma = `yarn_ramp`:
  pairs that rotate more than beta times over L keep their frequency, pairs that rotate less than
  alpha times are interpolated exactly like PI (divided by s), the ones between are blended.

  Args:
    rot_dim, rope_theta, train_len, alpha, beta: as `yarn_ramp`.
    factor: s >= 1.

  Returns:
    float32 [rot_dim/2], radians per position.

  Raises:
    ValueError: as `yarn_ramp`, or factor < 1.
  """
  if not factor >= 1:
    raise ValueError(f"factor must be >= 1; got {factor}")
  theta = _base_inv_freq(rot_dim, rope_theta)
  gamma = yarn_ramp(rot_dim, rope_theta, train_len, alpha, beta)
  return ((1.0 - gamma) * theta / factor + gamma * theta).astype(np.float32)


def yarn_attention_factor(factor: float) -> float:
  """YaRN's sqrt(1/t) = 0.1 ln(s) + 1 (Peng et al., arXiv 2309.00071, Eq. (22)).

  Queries and keys are both multiplied by it, so the logits q.k / sqrt(D) are multiplied by
  1/t = (0.1 ln(s) + 1)^2 (Eq. (21)). 1 for s = 1.

  Args:
    factor: s >= 1.

  Returns:
    The multiplier (dimensionless Python float, >= 1).

  Raises:
    ValueError: factor < 1.
  """
  if not factor >= 1:
    raise ValueError(f"factor must be >= 1; got {factor}")
  return 0.1 * math.log(factor) + 1.0


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


@dataclasses.dataclass(frozen=True)
class ScaledRope:
  """What a RoPE layer applies under one scaling method (static Python values).

  Attributes:
    inv_freq: float32 [rot_dim/2] inverse frequencies, radians per position (for dynamic_ntk the
      plain ones, rescaled per call).
    position_scale: factor on the positions before rotation (PI: 1/s; else 1).
    qk_scale: factor on q and k after rotation (YaRN: sqrt(1/t); else 1).
    dynamic_train_len: L of dynamic NTK, tokens; 0 = static frequencies.
  """

  inv_freq: np.ndarray
  position_scale: float = 1.0
  qk_scale: float = 1.0
  dynamic_train_len: int = 0


def resolve_train_len(cfg, train_len: int) -> int:
  """`model.position.rope_scaling_train_len`, with -1 (or absent) meaning `train_len`.

  The original context L of dynamic NTK (Peng et al., arXiv 2309.00071, Sec. 3.3) and of YaRN's
  ramp (Eq. (17)).

  Args:
    cfg: the `model.position` ConfigDict.
    train_len: `data.train_len`, tokens.

  Returns:
    L, tokens.
  """
  value = cfg.get("rope_scaling_train_len", DEFAULTS["rope_scaling_train_len"])
  return train_len if value == -1 else int(value)


def scaled_rope(cfg, rot_dim: int, rope_theta: float, train_len: int) -> ScaledRope:
  """The `ScaledRope` of `cfg.rope_scaling` for one base (one layer's `rope_theta`).

  Dispatches to the functions above (papers and equations in their docstrings): "pi"
  `pi_position_scale`, "ntk" `ntk_inv_freq`, "dynamic_ntk" (per call) `dynamic_ntk_inv_freq`,
  "yarn" `yarn_inv_freq` and `yarn_attention_factor`, "abf" `abf_inv_freq`.

  Args:
    cfg: the `model.position` ConfigDict (validated by `check_config`); absent fields take
      `DEFAULTS`.
    rot_dim: d, rotated features per head.
    rope_theta: b, this layer's base.
    train_len: `data.train_len`, tokens (`rope_scaling_train_len` = -1 resolves to it).

  Returns:
    ScaledRope; for "none" the plain frequencies and unit scales.

  Raises:
    ValueError: an unknown method (check_config reports it as a ConfigError first).
  """
  get = lambda name: cfg.get(name, DEFAULTS[name])
  method, s = get("rope_scaling"), float(get("rope_scaling_factor"))
  length = resolve_train_len(cfg, train_len)
  plain = _base_inv_freq(rot_dim, rope_theta).astype(np.float32)
  if method == "none":
    return ScaledRope(plain)
  if method == "pi":
    return ScaledRope(plain, position_scale=pi_position_scale(s))
  if method == "ntk":
    return ScaledRope(ntk_inv_freq(rot_dim, rope_theta, s))
  if method == "dynamic_ntk":
    return ScaledRope(plain, dynamic_train_len=length)
  if method == "yarn":
    return ScaledRope(yarn_inv_freq(rot_dim, rope_theta, length, s, float(get("yarn_alpha")),
                                    float(get("yarn_beta"))),
                      qk_scale=yarn_attention_factor(s))
  if method == "abf":
    return ScaledRope(abf_inv_freq(rot_dim, float(get("abf_theta"))))
  raise ValueError(f"unknown rope_scaling {method!r}; choose one of {list(ROPE_SCALINGS)}")


def is_number(x) -> bool:
  """A finite int or float (not a bool): inf and nan are refused as factors and parameters."""
  return (isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
          and math.isfinite(float(x)))


def check_config(cfg, rot_dim: int) -> None:
  """Validates the RoPE-scaling fields of `model.position` (called by `RoPE.check_config`).

  The bounds are the methods' domains (module docstring): s >= 1, L >= 1, 0 < alpha < beta
  (Peng et al., arXiv 2309.00071, Eq. (18)), d >= 4 for the exponent d/(d-2) of Eq. (16).

  Args:
    cfg: the `model.position` ConfigDict; absent fields take `DEFAULTS`.
    rot_dim: d, rotated features per head.

  Raises:
    ConfigError: naming the field: an unknown `rope_scaling`; a scaling on a kind other than
      "rope"; `rope_scaling_factor` not a number >= 1 (pi, ntk, yarn); `rope_scaling_train_len`
      not -1 or a positive integer; `yarn_alpha`/`yarn_beta` not 0 < alpha < beta; `abf_theta`
      not > 1, or abf with `rope_theta_per_layer`; ntk/dynamic_ntk with fewer than 4 rotated
      features.
  """
  get = lambda name: cfg.get(name, DEFAULTS[name])
  method = get("rope_scaling")
  if method not in ROPE_SCALINGS:
    raise ConfigError(f"model.position.rope_scaling={method!r} is not supported; "
                      f"choose one of {list(ROPE_SCALINGS)}")
  if method == "none":
    return
  if cfg.get("kind") != "rope":
    raise ConfigError(f"model.position.rope_scaling={method!r} applies to kind='rope' only; "
                      f"got kind={cfg.get('kind')!r} (use rope_scaling='none')")
  s = get("rope_scaling_factor")
  if method in USES_FACTOR and not (is_number(s) and s >= 1):
    raise ConfigError(f"model.position.rope_scaling_factor must be a number >= 1 "
                      f"(1 = no change) for rope_scaling={method!r}; got {s!r}")
  length = get("rope_scaling_train_len")
  if not (isinstance(length, (int, np.integer)) and not isinstance(length, bool)
          and (length == -1 or length >= 1)):
    raise ConfigError(f"model.position.rope_scaling_train_len must be a positive integer or -1 "
                      f"(= data.train_len); got {length!r}")
  if method == "yarn":
    alpha, beta = get("yarn_alpha"), get("yarn_beta")
    if not (is_number(alpha) and is_number(beta) and 0 < alpha < beta):
      raise ConfigError(f"model.position.yarn_alpha and yarn_beta must satisfy "
                        f"0 < yarn_alpha < yarn_beta; got {alpha!r}, {beta!r}")
  if method == "abf":
    theta = get("abf_theta")
    if not (is_number(theta) and theta > 1):
      raise ConfigError(f"model.position.abf_theta must be a number > 1; got {theta!r}")
    if cfg.get("rope_theta_per_layer", ()):
      raise ConfigError("model.position.rope_scaling='abf' replaces the single rope_theta; it is "
                        "not defined with rope_theta_per_layer (set rope_theta_per_layer=())")
  if method in ("ntk", "dynamic_ntk") and rot_dim < 4:
    raise ConfigError(f"model.position.rope_scaling={method!r} needs at least 4 rotated features "
                      f"(it raises s to d/(d-2)); rotary_fraction gives {rot_dim}")

