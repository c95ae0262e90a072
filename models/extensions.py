"""Eval-time context extensions: the registry of `eval.extension` names.

An extension is a change of the trained model's `model.position` config, made before the eval
model is built, so the trained parameters restore into it unchanged (no method adds a parameter):
`apply_extension(config, "yarn", 4.0)` returns such a copy. The methods themselves live with
the code that computes them:

  pi, ntk, dynamic_ntk, yarn, dynamic_yarn, abf, llama3, longrope
               `model.position.rope_scaling` (models/rope_frequencies.py: the frequency maths and
               papers; models/rope_scaling.py: the fields and their checks; read by
               models/positions/rope.py).
  alibi_interpolation
               `model.position.alibi_interpolation` (models/positions/alibi.py).
  self_extend, string, lm_infinite, streaming_llm, blockwise, dca
               `model.position.position_transform`, position-id transforms of relative schemes
               (models/position_transforms.py); string also STRING's optional attention factor
               (`string_attention_factor`, RoPE only).
  attention_temperature
               `model.position.attention_temperature`: queries times max(1, log n / log L) (or
               YaRN's form) beyond train_len, any scheme (models/position_transforms.py; applied
               by models/attention.py).

Adding an extension: one `Extension` entry in `EXTENSIONS` (with a new `apply` function if no
existing one sets its fields), and a test.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import ml_collections

from configs.errors import ConfigError
import zlib

from models import position_transforms, positions, rope_scaling
from models.rope_scaling import DEFAULTS, ROPE_FAMILY, USES_FACTOR, is_number

__all__ = ["EXTENSIONS", "EXTENSION_PARAMS", "TRANSFORM_WINDOWS", "USES_FACTOR", "Extension",
           "applied_factor", "applied_window", "apply_extension", "check_param_overrides",
           "extension_header", "extension_params", "extension_suffix", "relative_kinds"]


def relative_kinds() -> tuple[str, ...]:
  """The registered schemes whose positions reach attention only through the rotate/bias hooks as
  ids (`PositionalScheme.relative`), so that the position-id transforms apply to them."""
  return tuple(kind for kind, cls in positions.REGISTRY.items() if cls.relative)


# apply(pos, extension, factor, window, train_len): sets the extension's fields on an unlocked,
# type-unchecked copy of `model.position`; raises ConfigError naming eval.factor / eval.window.
Apply = Callable[[ml_collections.ConfigDict, str, float, int, int], None]


@dataclasses.dataclass(frozen=True)
class Extension:
  """One eval-time extension (an entry of `EXTENSIONS`).

  Attributes:
    apply: sets its `model.position` fields (see `Apply`); None = changes nothing.
    kinds: the model.position.kinds it applies to (besides the relative ones); None = any.
    relative: it also applies to every relative scheme (`relative_kinds()`).
    records_factor: it reads eval.factor (s of pi / ntk / yarn, G of self_extend): results
      record the factor and file names carry `_x<factor>`.
    window_field: position-id transforms: the model.position field that eval.window sets.
    params: model.position fields that only this extension reads (when the run was trained
      without RoPE scaling and position transform), so eval.run may set them; results record
      them (`extension_params`).
    optional_params: such fields that switch on an option added to an existing extension
      (dynamic_ntk's HF form, STRING's attention factor): settable like `params`, recorded only
      when they differ from their default (off), so results computed without the option keep the
      records they had before it existed.
  """

  apply: Apply | None
  kinds: tuple[str, ...] | None = ()
  relative: bool = False
  records_factor: bool = False
  window_field: str | None = None
  params: tuple[str, ...] = ()
  optional_params: tuple[str, ...] = ()

  def applies_to(self) -> tuple[str, ...] | None:
    """The model.position.kinds this extension applies to; None = any."""
    if self.kinds is None:
      return None
    return (relative_kinds() if self.relative else ()) + self.kinds


def _rope_scaling(pos, extension: str, factor: float, window: int, train_len: int) -> None:
  """pi / ntk / yarn / llama3 / longrope: rope_scaling=<name>, rope_scaling_factor=factor;
  dynamic_ntk, abf: the name. Fields absent from the run's config take `DEFAULTS` (for yarn_ramp
  the value runs made before the field used, `rope_scaling.LEGACY_DEFAULTS`)."""
  del window, train_len
  trained = pos.get("rope_scaling", "none")
  # LongRoPE on a LongRoPE-trained run is LongRoPE again with other factors (its short-factor
  # readjustment and progressive extension, sweeps/longrope_search.py): the factors replace the
  # trained ones, eval.factor the trained s.
  if trained != "none" and not trained == extension == "longrope":
    raise ConfigError(f"eval.extension={extension!r} cannot be applied to a run trained with "
                      f"model.position.rope_scaling={trained!r} (the scalings do not stack)")
  if extension in USES_FACTOR and not (is_number(factor) and factor >= 1):
    raise ConfigError(f"eval.extension={extension!r} needs a finite factor s >= 1 "
                      f"(eval length / train length); got {factor!r}")
  pos.rope_scaling = extension
  if extension in USES_FACTOR:
    pos.rope_scaling_factor = float(factor)
  for name in rope_scaling.CONFIG_FIELDS:
    if name not in pos:
      pos[name] = DEFAULTS[name]


def _alibi_interpolation(pos, extension: str, factor: float, window: int, train_len: int) -> None:
  """alibi_interpolation=True; with alibi_interpolation_rule="window" also the position transform
  "window_interpolation" (the paper's one factor per window)."""
  del extension, factor, window, train_len
  pos.alibi_interpolation = True
  if pos.get("alibi_interpolation_rule", "query") == "window":
    pos.position_transform = "window_interpolation"


def _attention_temperature(pos, extension: str, factor: float, window: int,
                           train_len: int) -> None:
  """attention_temperature=True, with the configured form and layers."""
  del extension, factor, window
  for name, default in position_transforms.TEMPERATURE_DEFAULTS.items():
    if name not in pos:
      pos[name] = default
  pos.attention_temperature = True
  position_transforms.check_config(pos, train_len)


def _randomized_positions(pos, extension: str, factor: float, window: int,
                          train_len: int) -> None:
  """randomized_positions=True: perplexity averages `randomized_draws` draws of positions from
  the run's training range (Ruoss et al., arXiv 2305.16843; eval/perplexity.py)."""
  del extension, factor, window, train_len
  for name, default in position_transforms.EVAL_POSITION_DEFAULTS.items():
    if name not in pos:
      pos[name] = default
  draws = pos.randomized_draws
  if not (isinstance(draws, int) and not isinstance(draws, bool) and draws >= 1):
    raise ConfigError(f"model.position.randomized_draws must be an integer >= 1 (draws of "
                      f"positions averaged per window); got {draws!r}")
  pos.randomized_positions = True


def _position_transform(pos, extension: str, factor: float, window: int, train_len: int) -> None:
  """position_transform=<name>; eval.window sets its window; self_extend's G is eval.factor."""
  for name, default in position_transforms.DEFAULTS.items():
    if name not in pos:
      pos[name] = default
  pos.position_transform = extension
  if window != -1:
    if not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
      raise ConfigError(f"eval.window must be a positive number of tokens or -1 (the "
                        f"method's default); got {window!r}")
    pos[EXTENSIONS[extension].window_field] = window
  if extension == "self_extend":
    if not (is_number(factor) and factor >= 1 and float(factor).is_integer()):
      raise ConfigError(f"eval.extension='self_extend' takes its group size G from "
                        f"eval.factor, which must be an integer >= 1; got {factor!r}")
    pos.self_extend_group = int(factor)
  position_transforms.check_config(pos, train_len)


# eval.extension values (the order in which error messages list them).
EXTENSIONS: dict[str, Extension] = {
    "none": Extension(None, kinds=None),
    "pi": Extension(_rope_scaling, ROPE_FAMILY, records_factor=True),
    "ntk": Extension(_rope_scaling, ROPE_FAMILY, records_factor=True),
    "dynamic_ntk": Extension(_rope_scaling, ROPE_FAMILY, optional_params=("dynamic_ntk_alpha",)),
    "yarn": Extension(_rope_scaling, ROPE_FAMILY, records_factor=True,
                      params=("yarn_alpha", "yarn_beta", "yarn_ramp", "yarn_truncate",
                              "yarn_attention_factor", "yarn_mscale", "yarn_mscale_all_dim")),
    "dynamic_yarn": Extension(_rope_scaling, ROPE_FAMILY,
                              params=("yarn_alpha", "yarn_beta", "yarn_ramp", "yarn_truncate",
                                      "yarn_attention_factor", "yarn_mscale",
                                      "yarn_mscale_all_dim")),
    "abf": Extension(_rope_scaling, ROPE_FAMILY, params=("abf_theta",)),
    "llama3": Extension(_rope_scaling, ROPE_FAMILY, records_factor=True,
                        params=("llama3_low_freq_factor", "llama3_high_freq_factor")),
    "longrope": Extension(_rope_scaling, ROPE_FAMILY, records_factor=True,
                          params=("longrope_short_factors", "longrope_long_factors",
                                  "longrope_attention_factor", "longrope_keep_first")),
    "alibi_interpolation": Extension(_alibi_interpolation, ("alibi",),
                                     optional_params=("alibi_interpolation_rule",)),
    "self_extend": Extension(_position_transform, relative=True, records_factor=True,
                             window_field="self_extend_window"),
    "string": Extension(_position_transform, relative=True, window_field="string_window",
                        params=("string_shift",), optional_params=("string_attention_factor",)),
    "lm_infinite": Extension(_position_transform, ("none",),  # NoPE: the Lambda mask alone
                             relative=True, window_field="lm_infinite_window",
                             params=("lm_infinite_global", "lm_infinite_distance")),
    "dca": Extension(_position_transform, relative=True, window_field="dca_local_window",
                     params=("dca_chunk_size",)),
    "blockwise": Extension(_position_transform, ("none",), relative=True,
                           window_field="blockwise_block"),
    "streaming_llm": Extension(_position_transform, ("none",),  # NoPE: the cache's mask alone
                               relative=True, window_field="streaming_llm_window",
                               params=("streaming_llm_sinks",)),
    "randomized_positions": Extension(_randomized_positions, kinds=None,
                                      params=("randomized_draws",)),
    "attention_temperature": Extension(_attention_temperature, kinds=None,
                                       params=("attention_temperature_form",
                                               "attention_temperature_layers"),
                                       optional_params=("attention_temperature_c",
                                                        "attention_temperature_l0",
                                                        "attention_temperature_per")),
}
# Fields of model.position that only an eval-time extension reads (when the run was trained
# without RoPE scaling and without a position transform), so eval.run may set them:
# `--config.model.position.string_shift=100 --config.eval.extension=string`.
EXTENSION_PARAMS = {name: e.params + e.optional_params for name, e in EXTENSIONS.items()
                    if e.params or e.optional_params}
# Position-id transforms (models/position_transforms.py) and the model.position field of
# their window W / n_local that eval.window sets.
TRANSFORM_WINDOWS = {name: e.window_field for name, e in EXTENSIONS.items() if e.window_field}


def _records_factor(extension: str) -> bool:
  return extension in EXTENSIONS and EXTENSIONS[extension].records_factor


def applied_factor(extension: str, factor: float) -> float:
  """The eval.factor an extension actually uses: `factor` for the methods that read it (pi, ntk,
  yarn, llama3, longrope: the scale s, arXiv 2306.15595 / 2309.00071 / 2402.13753; self_extend:
  the group size G, arXiv 2401.01325), else 1.0 (results record this value)."""
  return float(factor) if _records_factor(extension) else 1.0


def extension_params(extension: str, position_config) -> dict:
  """The model.position parameters `extension` reads (EXTENSION_PARAMS) and their values in
  `position_config` (defaults where the field is absent; `Extension.optional_params` only where
  they differ from the default); results record them."""
  defaults = {**DEFAULTS, **position_transforms.DEFAULTS,
              **position_transforms.TEMPERATURE_DEFAULTS,
              **position_transforms.EVAL_POSITION_DEFAULTS}
  spec = EXTENSIONS.get(extension)
  if spec is None:
    return {}
  values = {name: position_config.get(name, defaults[name])
            for name in spec.params + spec.optional_params}
  return {name: v for name, v in values.items()
          if name in spec.params or v != defaults[name]}


def check_param_overrides(run_position, position, extensions) -> dict[str, dict]:
  """The model.position fields an evaluation changes from the run's, per extension that reads them.

  Args:
    run_position: the trained run's `model.position`.
    position: the evaluation's `model.position` (the run's plus --config overrides).
    extensions: the eval.extension names of this evaluation.

  Returns:
    {extension: {field: new value}} for the extensions whose parameters were changed.

  Raises:
    ConfigError: a changed field that is not an eval-time parameter (EXTENSION_PARAMS), one the run
      trained with (it had a RoPE scaling, a position transform or the attention temperature), or
      one that no extension of this evaluation reads.
  """
  changed = {k for k in set(position) | set(run_position)
             if position.get(k) != run_position.get(k)}
  if not changed:
    return {}
  readers: dict[str, list[str]] = {}
  for ext, fields in EXTENSION_PARAMS.items():
    for f in fields:
      readers.setdefault(f, []).append(ext)
  trained_with = (run_position.get("rope_scaling", "none") != "none"
                  or run_position.get("position_transform", "none") != "none"
                  or run_position.get("attention_temperature", False) is True)
  # A LongRoPE-trained run evaluated with eval.extension=longrope takes other LongRoPE factors
  # (`_rope_scaling`).
  relongrope = (run_position.get("rope_scaling", "none") == "longrope"
                and "longrope" in extensions)
  for field in sorted(changed):
    if field not in readers or (trained_with and not (
        relongrope and "longrope" in readers[field])):
      allowed = sorted(readers) if not trained_with else []
      raise ConfigError(f"--config.model.position.{field} must stay as trained (the checkpoint's "
                        f"model); eval-time parameters that may change: {allowed}")
    if not set(readers[field]) & set(extensions):
      names = " or ".join(repr(e) for e in readers[field])
      raise ConfigError(f"model.position.{field} is read by eval.extension={names} only; this "
                        f"evaluation runs {list(extensions)}")
  out: dict[str, dict] = {}
  for field in sorted(changed):
    for ext in readers[field]:
      out.setdefault(ext, {})[field] = position[field]
  return out


def applied_window(extension: str, window: int) -> int:
  """The eval.window an extension actually uses: `window` for the position-id transforms
  (self_extend, string, lm_infinite, streaming_llm) when set, else -1 (the default / not used)."""
  return int(window) if extension in TRANSFORM_WINDOWS and window != -1 else -1


def extension_header(config, extension: str | None = None) -> dict:
  """The fields every evaluation result records about its eval-time extension.

  Args:
    config: the evaluation's config (reads eval.extension, eval.factor, eval.window and the
      model.position parameters the extension reads).
    extension: overrides eval.extension (e.g. "none" for a result computed as trained).

  Returns:
    {"extension": name, "extension_factor": applied_factor, "extension_window": applied_window,
     "extension_params": extension_params}; "none", 1.0, -1 and {} without an extension.
  """
  e = config.eval
  extension = e.get("extension", "none") if extension is None else extension
  return {"extension": extension,
          "extension_factor": applied_factor(extension, e.get("factor", 1.0)),
          "extension_window": applied_window(extension, e.get("window", -1)),
          "extension_params": extension_params(extension, config.model.position)}


def _param_text(value) -> str:
  """A parameter value in a file name: numbers as %g, strings and bools as they are, tuples of up
  to 4 values joined by "-", longer ones (LongRoPE's factors) as <n>h<crc32 of their repr>."""
  if isinstance(value, (tuple, list)):
    if len(value) <= 4:
      return "-".join(_param_text(v) for v in value) or "none"
    return f"{len(value)}h{zlib.crc32(repr(tuple(float(v) for v in value)).encode()):08x}"
  if isinstance(value, (bool, str)):
    return str(value)
  return f"{value:g}"


def extension_suffix(extension: str, factor: float, window: int = -1,
                     params: dict | None = None) -> str:
  """File-name suffix of results under an eval-time extension: "" for "none", "_<name>_x<s>" for
  the methods that read eval.factor (pi, ntk, yarn, llama3, longrope, self_extend), else
  "_<name>"; then "_w<W>" when a position-id transform runs with a window other than its default
  (eval.window), and "_<field><value>" for each model.position parameter changed at evaluation
  (`params`, from `check_param_overrides`; values as `_param_text`), so results of different
  settings do not overwrite each other."""
  if extension == "none":
    return ""
  used = _records_factor(extension)
  w = applied_window(extension, window)
  return (f"_{extension}" + (f"_x{applied_factor(extension, factor):g}" if used else "")
          + (f"_w{w}" if w != -1 else "")
          + "".join(f"_{k}{_param_text(v)}" for k, v in sorted((params or {}).items())))


def apply_extension(config: ml_collections.ConfigDict, extension: str,
                    factor: float = 1.0, window: int = -1) -> ml_collections.ConfigDict:
  """A copy of the experiment `config` whose `model.position` applies an eval-time extension.

  The parameters of a model trained with `config` restore into the returned config's model
  unchanged (no extension adds or reshapes a parameter). `config` itself is not modified. The
  methods and their papers (arXiv 2306.15595, 2309.00071, 2309.16039, 2310.13017) are listed in
  the docstring of models/rope_frequencies.py.

    "none"                 an unchanged copy (the model as trained);
    "pi", "ntk", "yarn", "llama3", "longrope"
                           rope_scaling=<name>, rope_scaling_factor=factor (s >= 1); longrope
                           needs `longrope_long_factors` (python -m sweeps.longrope_search);
    "dynamic_ntk", "dynamic_yarn"
                           rope_scaling=<name> (s follows the length; factor unused);
    "abf"                  rope_scaling="abf" with the config's abf_theta (default 500000;
                           factor unused);
    "alibi_interpolation"  alibi_interpolation=True (the scale follows the length; factor unused).
    "self_extend"          position_transform="self_extend", self_extend_group = factor (an
                           integer G >= 1); any relative scheme (`relative_kinds()`).
    "string", "lm_infinite", "streaming_llm"
                           position_transform=<name> (factor unused); any relative scheme, and
                           lm_infinite and streaming_llm also NoPE (kind "none": the mask alone).
    "attention_temperature"
                           attention_temperature=True (queries times max(1, log n / log L), or
                           the configured form, on the configured layers); any scheme, not with
                           model.logn_scaling=True.
  For the position-id transforms (models/position_transforms.py), `window` > 0 sets the
  window W (self_extend_window, string_window, streaming_llm_window) or n_local
  (lm_infinite_window), tokens.

  The RoPE methods keep rope_scaling_train_len and every method parameter as the config has them
  (added with their `DEFAULTS` where the run's config.json predates these fields: yarn_ramp is then
  "ratio", the ramp of runs made before the field existed). Only pi, ntk, yarn, llama3 and
  longrope record the factor (rope_scaling_factor), so the config describes exactly the model that
  is evaluated. The resulting model.position is validated as a whole (the scheme's check_config,
  the transforms' and the temperature's), so a bad eval-time parameter is refused here.

  Args:
    config: the run's experiment ConfigDict (configs/base.py).
    extension: one of `EXTENSIONS`.
    factor: s (dimensionless, >= 1; typically eval length / train length); self_extend: G.
    window: tokens, or -1 for the method's default (position-id transforms only).

  Returns:
    A new ConfigDict.

  Raises:
    ConfigError: naming `eval.extension`: an unknown name (listing the allowed ones), an
      extension that does not apply to the run's `model.position.kind` (e.g. yarn on alibi), a
      run already trained with a RoPE scaling, or a factor that is not a number >= 1 for a method
      that uses it; attention_temperature with model.logn_scaling; or, naming the field, a
      model.position field the extended model cannot take (e.g. missing longrope_long_factors).
  """
  if extension not in EXTENSIONS:
    raise ConfigError(f"eval.extension={extension!r} is not supported; "
                      f"choose one of {list(EXTENSIONS)}")
  out = config.copy_and_resolve_references()
  spec = EXTENSIONS[extension]
  if spec.apply is None:
    return out
  kind = out.model.position.kind
  kinds = spec.applies_to()
  if kinds is not None and kind not in kinds:
    fits = [name for name, e in EXTENSIONS.items()
            if e.applies_to() is None or kind in e.applies_to()]
    raise ConfigError(f"eval.extension={extension!r} applies to model.position.kind in "
                      f"{list(kinds)} only; this run's kind is {kind!r} "
                      f"(choose one of {fits})")
  pos = out.model.position
  with pos.unlocked(), pos.ignore_type():
    spec.apply(pos, extension, factor, window, out.data.train_len)
  if pos.get("attention_temperature", False) and out.model.get("logn_scaling", False):
    raise ConfigError(f"eval.extension={extension!r} cannot be applied to a run trained with "
                      f"model.logn_scaling=True: its queries are log-n scaled already")
  dims = positions.Dims.from_config(out)
  positions.build(pos, dims, check_only=True)
  position_transforms.check_config(pos, dims.train_len, dims.num_layers)
  return out
