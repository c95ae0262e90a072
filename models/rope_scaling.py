"""RoPE frequency scaling (context extension): the methods of `model.position.rope_scaling`.

The methods are selected by `model.position.rope_scaling` and read by `models/positions/rope.py`
(at training and at evaluation alike); ALiBi interpolation by `model.position.alibi_interpolation`
in `models/positions/alibi.py`. As eval-time extensions (`eval.extension`) they are applied to a
trained run's config by `models.extensions.apply_extension`, which keeps the registry of names.

This module is the entry callers use: the names of the methods and their `model.position` fields
(`CONFIG_FIELDS`, `DEFAULTS`), what a RoPE layer applies under the configured method
(`scaled_rope` -> `ScaledRope`) and the checks of those fields (`check_config`). The methods'
frequency maths, with their papers and equations, are in `models/rope_frequencies.py`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from configs.errors import ConfigError
from models.rope_frequencies import (YARN_RAMPS, _base_inv_freq, abf_inv_freq, llama3_inv_freq,
                                     longrope_attention_factor, longrope_inv_freq, ntk_inv_freq,
                                     pi_position_scale, yarn_attention_factor, yarn_index_ramp,
                                     yarn_inv_freq, yarn_ramp)

# model.position.rope_scaling values (method names as in models/rope_frequencies.py's docstring).
ROPE_SCALINGS = ("none", "pi", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn", "abf", "llama3",
                 "longrope")
# Methods that read rope_scaling_factor (dynamic_ntk and dynamic_yarn take s from the length, abf
# has a base).
USES_FACTOR = ("pi", "ntk", "yarn", "llama3", "longrope")
# The schemes built on RoPE's frequencies (models/positions/rope.py and its subclasses p_rope,
# hope, resonance_rope): every RoPE scaling applies to them, at training and at evaluation.
ROPE_FAMILY = ("rope", "p_rope", "hope", "resonance_rope")
# Where the long-factor search lives (named by the error for missing LongRoPE factors).
LONGROPE_SEARCH = "python -m sweeps.longrope_search"
# The model.position fields of RoPE scaling (read by models/positions/rope.py, which declares
# them as its own), name -> (default, comment); configs/base.py gathers them.
CONFIG_FIELDS = {
    "rope_scaling": ("none", '"none"|"pi"|"ntk"|"dynamic_ntk"|"yarn"|"dynamic_yarn"|"abf"|"llama3"'
                             '|"longrope" (models/rope_scaling.py).'),
    "rope_scaling_factor": (1.0, "factor s >= 1 of pi/ntk/yarn/llama3/longrope (e.g. eval_len / "
                                 "train_len)."),
    "rope_scaling_train_len": (-1, "original context L of dynamic_ntk/yarn/dynamic_yarn/llama3/"
                                   "longrope, tokens; -1 = data.train_len."),
    "dynamic_ntk_alpha": (1.0, "dynamic_ntk: 1 = the paper's max(1, l/L); a > 1 = HF's "
                               "a*l/L - (a-1) for l > L."),
    "yarn_alpha": (1.0, "yarn: pairs with < alpha rotations over L are divided by s."),
    "yarn_beta": (32.0, "yarn: pairs with > beta rotations over L keep their frequency."),
    "yarn_ramp": ("index", 'yarn: "index" (authors\' code, HF) | "ratio" (the paper\'s Eq. 18).'),
    "yarn_truncate": (True, "yarn, index ramp: floor/ceil the correction dimensions (HF "
                            "truncate)."),
    "yarn_attention_factor": (-1.0, "yarn: q and k times this; -1 = derived from s, yarn_mscale "
                                    "and yarn_mscale_all_dim."),
    "yarn_mscale": (1.0, "yarn: m of the derived factor (0.1 m ln s + 1) / (0.1 m_all ln s + 1)."),
    "yarn_mscale_all_dim": (0.0, "yarn: m_all of the derived factor (DeepSeek); 0 = 0.1 m ln s + "
                                 "1."),
    "abf_theta": (500000.0, "abf: the base that replaces rope_theta (Xiong et al.)."),
    "llama3_low_freq_factor": (1.0, "llama3: wavelengths > L / this are divided by s."),
    "llama3_high_freq_factor": (4.0, "llama3: wavelengths < L / this keep their frequency."),
    "longrope_short_factors": ((), "longrope: rot_dim/2 rescale factors >= 1 for rows <= L; () = "
                                   "all 1."),
    "longrope_long_factors": ((), "longrope: rot_dim/2 rescale factors >= 1 for rows > L "
                                  "(python -m sweeps.longrope_search)."),
    "longrope_attention_factor": (-1.0, "longrope: q and k times this; -1 = sqrt(1 + ln s / ln L) "
                                        "(1 for s = 1)."),
    "longrope_keep_first": (0, "longrope: positions below this rotate as plain RoPE (n-hat); 0 = "
                               "off."),
}
# Fields whose default changed, with the value runs made before the change used: a stored
# config.json that lacks such a field means this value (configs/stored.load_run_config fills them).
LEGACY_DEFAULTS = {"yarn_ramp": "ratio"}
# Defaults of the RoPE-scaling fields where a config lacks them (a run's config.json that predates
# them): the fields above, LEGACY_DEFAULTS where a default changed, and ALiBi interpolation's
# (declared by models/positions/alibi.py).
DEFAULTS = {**{name: default for name, (default, _) in CONFIG_FIELDS.items()},
            **LEGACY_DEFAULTS, "alibi_interpolation": False}


@dataclasses.dataclass(frozen=True)
class ScaledRope:
  """What a RoPE layer applies under one scaling method (static Python values).

  Attributes:
    inv_freq: float32 [rot_dim/2] inverse frequencies, radians per position (for dynamic_ntk the
      plain ones, rescaled per call; for longrope the short-factor ones).
    position_scale: factor on the positions before rotation (PI: 1/s; else 1).
    qk_scale: factor on q and k after rotation (YaRN, LongRoPE; else 1).
    dynamic_train_len: L of dynamic NTK, tokens; 0 = static frequencies.
    dynamic_alpha: a of dynamic NTK (`rope_frequencies.dynamic_ntk_factor`; 1 = the paper's form).
    long_inv_freq: LongRoPE: float32 [rot_dim/2] long-factor frequencies for rows with l > L;
      None otherwise.
    long_train_len: LongRoPE's L, tokens (rows with l > L use `long_inv_freq`); 0 = none.
    keep_first: LongRoPE's n-hat: positions < n-hat are rotated with the plain frequencies and
      no qk_scale; 0 = off.
    dynamic_yarn: Dynamic-YaRN: (gamma, the ramp per pair as a tuple of floats; yarn_mscale;
      yarn_mscale_all_dim; yarn_attention_factor, -1 = derived), applied per row with s' =
      max(1, l / dynamic_train_len); None otherwise.
  """

  inv_freq: np.ndarray
  position_scale: float = 1.0
  qk_scale: float = 1.0
  dynamic_train_len: int = 0
  dynamic_alpha: float = 1.0
  long_inv_freq: np.ndarray | None = None
  long_train_len: int = 0
  keep_first: int = 0
  dynamic_yarn: tuple | None = None


def resolve_train_len(cfg, train_len: int) -> int:
  """`model.position.rope_scaling_train_len`, with -1 (or absent) meaning `train_len`.

  The original context L of dynamic NTK (Peng et al., arXiv 2309.00071, Sec. 3.3), of YaRN's
  ramp (Eq. (17)), of the Llama 3.1 rule and of LongRoPE's switch and attention factor.

  Args:
    cfg: the `model.position` ConfigDict.
    train_len: `data.train_len`, tokens.

  Returns:
    L, tokens.
  """
  value = cfg.get("rope_scaling_train_len", DEFAULTS["rope_scaling_train_len"])
  return train_len if value == -1 else int(value)


def _yarn(get, rot_dim, rope_theta, length, s) -> ScaledRope:
  inv = yarn_inv_freq(rot_dim, rope_theta, length, s, float(get("yarn_alpha")),
                      float(get("yarn_beta")), get("yarn_ramp"), bool(get("yarn_truncate")))
  override = float(get("yarn_attention_factor"))
  qk = override if override != -1 else yarn_attention_factor(
      s, float(get("yarn_mscale")), float(get("yarn_mscale_all_dim")))
  return ScaledRope(inv, qk_scale=qk)


def _dynamic_yarn(get, rot_dim, rope_theta, length) -> ScaledRope:
  alpha, beta = float(get("yarn_alpha")), float(get("yarn_beta"))
  if get("yarn_ramp") == "ratio":
    gamma = yarn_ramp(rot_dim, rope_theta, length, alpha, beta)
  else:
    gamma = yarn_index_ramp(rot_dim, rope_theta, length, alpha, beta, bool(get("yarn_truncate")))
  return ScaledRope(_base_inv_freq(rot_dim, rope_theta).astype(np.float32),
                    dynamic_train_len=length,
                    dynamic_yarn=(tuple(float(g) for g in gamma), float(get("yarn_mscale")),
                                  float(get("yarn_mscale_all_dim")),
                                  float(get("yarn_attention_factor"))))


def _longrope(get, rot_dim, rope_theta, length, s) -> ScaledRope:
  override = float(get("longrope_attention_factor"))
  qk = override if override != -1 else longrope_attention_factor(s, length)
  return ScaledRope(longrope_inv_freq(rot_dim, rope_theta, tuple(get("longrope_short_factors"))),
                    qk_scale=qk,
                    long_inv_freq=longrope_inv_freq(rot_dim, rope_theta,
                                                    tuple(get("longrope_long_factors"))),
                    long_train_len=length, keep_first=int(get("longrope_keep_first")))


def scaled_rope(cfg, rot_dim: int, rope_theta: float, train_len: int) -> ScaledRope:
  """The `ScaledRope` of `cfg.rope_scaling` for one base (one layer's `rope_theta`).

  Dispatches to the functions of models/rope_frequencies.py (papers and equations in their
  docstrings): "pi" `pi_position_scale`, "ntk" `ntk_inv_freq`, "dynamic_ntk" (per call)
  `dynamic_ntk_inv_freq`, "yarn" `yarn_inv_freq` and `yarn_attention_factor` (or
  `yarn_attention_factor` the field), "dynamic_yarn" (per call) `dynamic_yarn_inv_freq` and
  `dynamic_yarn_attention_factor`, "abf" `abf_inv_freq`, "llama3" `llama3_inv_freq`,
  "longrope" `longrope_inv_freq` (short and long) and `longrope_attention_factor` (or the field).

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
  get = lambda name: cfg.get(name, DEFAULTS[name])  # noqa: E731
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
    return ScaledRope(plain, dynamic_train_len=length,
                      dynamic_alpha=float(get("dynamic_ntk_alpha")))
  if method == "yarn":
    return _yarn(get, rot_dim, rope_theta, length, s)
  if method == "dynamic_yarn":
    return _dynamic_yarn(get, rot_dim, rope_theta, length)
  if method == "abf":
    return ScaledRope(abf_inv_freq(rot_dim, float(get("abf_theta"))))
  if method == "llama3":
    return ScaledRope(llama3_inv_freq(rot_dim, rope_theta, length, s,
                                      float(get("llama3_low_freq_factor")),
                                      float(get("llama3_high_freq_factor"))))
  if method == "longrope":
    return _longrope(get, rot_dim, rope_theta, length, s)
  raise ValueError(f"unknown rope_scaling {method!r}; choose one of {list(ROPE_SCALINGS)}")


def is_number(x) -> bool:
  """A finite int or float (not a bool): inf and nan are refused as factors and parameters."""
  return (isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
          and math.isfinite(float(x)))


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_factor_override(get, name: str, method: str) -> None:
  value = get(name)
  if not (is_number(value) and (value == -1 or value > 0)):
    raise ConfigError(f"model.position.{name} must be -1 (derived) or a number > 0 for "
                      f"rope_scaling={method!r}; got {value!r}")


def _check_yarn(get) -> None:
  alpha, beta = get("yarn_alpha"), get("yarn_beta")
  if not (is_number(alpha) and is_number(beta) and 0 < alpha < beta):
    raise ConfigError(f"model.position.yarn_alpha and yarn_beta must satisfy "
                      f"0 < yarn_alpha < yarn_beta; got {alpha!r}, {beta!r}")
  ramp, truncate = get("yarn_ramp"), get("yarn_truncate")
  if ramp not in YARN_RAMPS:
    raise ConfigError(f"model.position.yarn_ramp must be one of {list(YARN_RAMPS)} (index: the "
                      f"authors' code and HF; ratio: the paper's Eq. 18); got {ramp!r}")
  if not isinstance(truncate, bool):
    raise ConfigError(f"model.position.yarn_truncate must be True or False; got {truncate!r}")
  if ramp == "ratio" and not truncate:
    raise ConfigError("model.position.yarn_truncate=False applies to yarn_ramp='index' only (the "
                      "paper's 'ratio' ramp rounds nothing); set yarn_ramp='index' or "
                      "yarn_truncate=True")
  _check_factor_override(get, "yarn_attention_factor", "yarn")
  for name in ("yarn_mscale", "yarn_mscale_all_dim"):
    if not (is_number(get(name)) and get(name) >= 0):
      raise ConfigError(f"model.position.{name} must be a number >= 0; got {get(name)!r}")
  if get("yarn_attention_factor") != -1 and (get("yarn_mscale") != DEFAULTS["yarn_mscale"] or
                                             get("yarn_mscale_all_dim") != 0):
    raise ConfigError("model.position.yarn_attention_factor (set) overrides yarn_mscale and "
                      "yarn_mscale_all_dim; set yarn_attention_factor=-1 or leave the mscales at "
                      "1 and 0")


def _check_longrope(get, rot_dim: int) -> None:
  half = rot_dim // 2
  for name, required in (("longrope_long_factors", True), ("longrope_short_factors", False)):
    f = get(name)
    ok = (isinstance(f, (tuple, list)) and (len(f) == half or (not required and len(f) == 0))
          and all(is_number(x) and x >= 1 for x in f))
    if not ok:
      allowed = f"a tuple of rot_dim/2 = {half} numbers >= 1" + ("" if required else " or ()")
      where = (f"; search them with {LONGROPE_SEARCH}" if required else " (() = all 1)")
      got = (f"{len(f)} value" + ("s" if len(f) > 1 else "")
             if isinstance(f, (tuple, list)) and f else repr(f))
      raise ConfigError(f"model.position.{name} must be {allowed} (the per-pair rescale factors "
                        f"lambda_i) for rope_scaling='longrope'{where}; got {got}")
  _check_factor_override(get, "longrope_attention_factor", "longrope")
  n = get("longrope_keep_first")
  if not (_is_int(n) and n >= 0):
    raise ConfigError(f"model.position.longrope_keep_first must be an integer >= 0 (LongRoPE's "
                      f"n-hat, positions; 0 = off); got {n!r}")


def check_config(cfg, rot_dim: int) -> None:
  """Validates the RoPE-scaling fields of `model.position` (called by `RoPE.check_config`).

  The bounds are the methods' domains (models/rope_frequencies.py's docstring): s >= 1, L >= 1,
  0 < alpha < beta (Peng et al., arXiv 2309.00071, Eq. (18)), d >= 4 for the exponent d/(d-2) of
  Eq. (16).

  Args:
    cfg: the `model.position` ConfigDict; absent fields take `DEFAULTS`.
    rot_dim: d, rotated features per head.

  Raises:
    ConfigError: naming the field: an unknown `rope_scaling`; a scaling on a kind other than
      "rope"; `rope_scaling_factor` not a number >= 1 (pi, ntk, yarn, llama3, longrope);
      `rope_scaling_train_len` not -1 or a positive integer; `dynamic_ntk_alpha` not >= 1;
      `yarn_alpha`/`yarn_beta` not 0 < alpha < beta, `yarn_ramp` not "index"/"ratio",
      `yarn_truncate` not a bool or False with the ratio ramp, `yarn_attention_factor` not -1 or
      > 0 or set together with other mscales, `yarn_mscale`/`yarn_mscale_all_dim` < 0;
      `abf_theta` not > 1, or abf with `rope_theta_per_layer`; `llama3_low_freq_factor` /
      `llama3_high_freq_factor` not 0 < low < high; `longrope_long_factors` missing or not
      rot_dim/2 numbers >= 1, `longrope_short_factors` not () or such, `longrope_attention_factor`
      not -1 or > 0, `longrope_keep_first` not an integer >= 0, a derived LongRoPE attention factor
      with rope_scaling_train_len=1 (ln L = 0); ntk/dynamic_ntk with fewer than 4 rotated
      features.
  """
  get = lambda name: cfg.get(name, DEFAULTS[name])  # noqa: E731
  method = get("rope_scaling")
  if method not in ROPE_SCALINGS:
    raise ConfigError(f"model.position.rope_scaling={method!r} is not supported; "
                      f"choose one of {list(ROPE_SCALINGS)}")
  if method == "none":
    return
  if cfg.get("kind") not in ROPE_FAMILY:
    raise ConfigError(f"model.position.rope_scaling={method!r} applies to the kinds "
                      f"{list(ROPE_FAMILY)} only; got kind={cfg.get('kind')!r} (use "
                      f"rope_scaling='none')")
  s = get("rope_scaling_factor")
  if method in USES_FACTOR and not (is_number(s) and s >= 1):
    raise ConfigError(f"model.position.rope_scaling_factor must be a number >= 1 "
                      f"(1 = no change) for rope_scaling={method!r}; got {s!r}")
  length = get("rope_scaling_train_len")
  if not (_is_int(length) and (length == -1 or length >= 1)):
    raise ConfigError(f"model.position.rope_scaling_train_len must be a positive integer or -1 "
                      f"(= data.train_len); got {length!r}")
  if method == "dynamic_ntk":
    a = get("dynamic_ntk_alpha")
    if not (is_number(a) and a >= 1):
      raise ConfigError(f"model.position.dynamic_ntk_alpha must be a number >= 1 (1 = the "
                        f"paper's max(1, l/L), a > 1 = HF's a*l/L - (a-1)); got {a!r}")
  if method in ("yarn", "dynamic_yarn"):
    _check_yarn(get)
  if method == "dynamic_yarn" and cfg.get("rope_theta_per_layer", ()):
    raise ConfigError("model.position.rope_scaling='dynamic_yarn' is defined for one rope_theta "
                      "(its ramp depends on the base); set rope_theta_per_layer=()")
  if method == "abf":
    theta = get("abf_theta")
    if not (is_number(theta) and theta > 1):
      raise ConfigError(f"model.position.abf_theta must be a number > 1; got {theta!r}")
    if cfg.get("rope_theta_per_layer", ()):
      raise ConfigError("model.position.rope_scaling='abf' replaces the single rope_theta; it is "
                        "not defined with rope_theta_per_layer (set rope_theta_per_layer=())")
  if method == "llama3":
    low, high = get("llama3_low_freq_factor"), get("llama3_high_freq_factor")
    if not (is_number(low) and is_number(high) and 0 < low < high):
      raise ConfigError(f"model.position.llama3_low_freq_factor and llama3_high_freq_factor must "
                        f"satisfy 0 < low < high; got {low!r}, {high!r}")
  if method == "longrope":
    _check_longrope(get, rot_dim)
    if length == 1 and s > 1 and get("longrope_attention_factor") == -1:
      raise ConfigError("model.position.rope_scaling_train_len=1 leaves LongRoPE's derived "
                        "attention factor sqrt(1 + ln s / ln L) undefined; set "
                        "rope_scaling_train_len >= 2 or longrope_attention_factor > 0")
  if method in ("ntk", "dynamic_ntk") and rot_dim < 4:
    raise ConfigError(f"model.position.rope_scaling={method!r} needs at least 4 rotated features "
                      f"(it raises s to d/(d-2)); rotary_fraction gives {rot_dim}")
