"""The range of every numeric config field, in one table, checked before anything is compiled or
written (`check_ranges`, the first check of configs.validate.validate: train.py, eval.run and every
planned point of a study).

Every number must be finite (NaN and inf are refused everywhere); integers lie in int32 (what
positions, step counters and the data library's seeds accept: grain takes seeds in [0, 2**32 - 1],
JAX positions are int32); each field then has its own bounds and the sentinel values its comment
in configs/base.py (or its scheme's `config_fields`) gives a meaning, such as -1 = "derived" or
0 = "off". Rules between fields (num_heads divides d_model, warmup_steps <= num_steps, ...) stay
in configs/validate.py and the schemes' checks, which run after this table.

A numeric field with no entry here is a programming error that tests/test_field_ranges.py
reports (it walks every config file's fields and tries NaN, inf and an out-of-range value on
each).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math

from configs.errors import ConfigError, flatten

INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Range:
  """The allowed values of one numeric field (or of each element of a tuple field).

  Attributes:
    kind: "int" (an integer, not a bool) or "float" (any finite real; integers accepted).
    low, high: bounds (None = unbounded on that side; ints are always within int32).
    low_open, high_open: the bound itself is excluded.
    also: values allowed outside the bounds, with their meaning (e.g. ((-1, "derived"),)).
    each: the field is a tuple, every element of which must lie in the range (may be empty).
    note: what else the field's own check requires, said with the range (e.g. "a power of two").
  """

  kind: str
  low: float | None = None
  high: float | None = None
  low_open: bool = False
  high_open: bool = False
  also: tuple[tuple[float, str], ...] = ()
  each: bool = False
  note: str = ""

  def admits(self, value) -> bool:
    """Whether one (scalar) value is allowed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      return False
    if self.kind == "int" and not isinstance(value, int):
      return False
    if not math.isfinite(value):
      return False
    if any(value == v for v, _ in self.also):
      return True
    if self.kind == "int" and not -INT32_MAX - 1 <= value <= INT32_MAX:
      return False
    if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
      return False
    if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
      return False
    return True

  def describe(self) -> str:
    """The allowed values in words: "an integer >= 1", "-1 (derived) or a number in (0, 1]"."""
    noun = "an integer" if self.kind == "int" else "a finite number"
    low, high = self.low, self.high
    if low is not None and high is not None:
      text = (f"{noun} in {'(' if self.low_open else '['}{_num(low)}, {_num(high)}"
              f"{')' if self.high_open else ']'}")
    elif low is not None:
      text = f"{noun} {'>' if self.low_open else '>='} {_num(low)}"
    elif high is not None:
      text = f"{noun} {'<' if self.high_open else '<='} {_num(high)}"
    else:
      text = noun
    if self.also:
      text = " or ".join(f"{_num(v)} ({meaning})" for v, meaning in self.also) + " or " + text
    if self.note:
      text += f" ({self.note})"
    if self.each:
      text = "a tuple of " + text.replace("an integer", "integers").replace(
          "a finite number", "finite numbers")
    return text


def _num(x) -> str:
  return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


def Int(low=None, high=None, *, also=(), each=False, note="") -> Range:  # noqa: N802 -- table shorthand
  """An integer field: [low, high] (ends included), plus the sentinels `also`."""
  return Range("int", low, high, also=tuple(also), each=each, note=note)


def Float(low=None, high=None, *, low_open=False, high_open=False, also=(), each=False) -> Range:  # noqa: N802
  """A real field: finite, within the bounds, plus the sentinels `also`."""
  return Range("float", low, high, low_open, high_open, tuple(also), each)


POSITIVE = Int(1)
COUNT = Int(0)  # >= 0
SEED = Int(0, 2**31 - 1)
FRACTION_OPEN = Float(0, 1, high_open=True)  # [0, 1)
SHARE = Float(0, 1)  # [0, 1]
THRESHOLD = Float(0, 1, low_open=True)  # (0, 1]
DERIVED = (-1, "derived: see the field's comment")
AUTO_LEN = Int(1, also=(DERIVED,))
BASE = Float(1, low_open=True)  # the base of geometric frequencies (> 1)
POSITIVE_REAL = Float(0, low_open=True)
NONNEG_REAL = Float(0)

# Dotted path (fnmatch patterns allowed; an exact path wins over a pattern) -> range.
FIELD_RANGES: dict[str, Range] = {
    "seed": SEED,
    # data
    "data.train_len": Int(1, 2**24),
    "data.batch_size": POSITIVE,
    "data.validation_fraction": FRACTION_OPEN,
    "data.test_fraction": FRACTION_OPEN,
    "data.shuffle_seed": SEED,
    "data.prefetch_batches": Int(0, 1024),
    "data.position_sampler.max_position": AUTO_LEN,
    "data.position_sampler.num_chunks": POSITIVE,
    "data.position_sampler.seed": SEED,
    "data.position_sampler.cream_k": Int(0, also=((-1, "4 x the factor, the released code"),)),
    "data.position_sampler.cream_sigma": POSITIVE_REAL,
    "data.position_sampler.endprompt_length": POSITIVE,
    "data.task.train_min_size": POSITIVE,
    "data.task.train_max_size": POSITIVE,
    "data.task.eval_max_size": POSITIVE,
    "data.task.eval_examples_per_size": POSITIVE,
    "data.task.seed": SEED,
    "data.task.eval_seed": SEED,
    "data.task.coupling_max_position": AUTO_LEN,
    "data.passkey.fraction": FRACTION_OPEN,
    "data.passkey.seed": SEED,
    "data.passkey.key_digits": Int(1, 18),
    "data.retrieval_mix.fraction": FRACTION_OPEN,
    "data.retrieval_mix.seed": SEED,
    # model
    "model.vocab_size": POSITIVE,
    "model.num_layers": POSITIVE,
    "model.d_model": POSITIVE,
    "model.num_heads": POSITIVE,
    "model.head_dim": Int(1, also=((-1, "d_model // num_heads"),)),
    "model.num_kv_heads": Int(1, also=((-1, "num_heads"),)),
    "model.mlp_dim": POSITIVE,
    "model.norm_eps": Float(0, 1, low_open=True, high_open=True),
    "model.init_std": Float(0, 1, low_open=True),
    "model.kernel_block_*": Int(8, also=((0, "the backend's default"),),
                               note="a power of two: 8, 16, 32, ... tokens"),
    "model.attention_chunk": COUNT,
    "model.sliding_window": COUNT,
    "model.global_every": COUNT,
    # model.position: the schemes' fields (models/positions/<scheme>.py config_fields)
    "model.position.max_len": AUTO_LEN,
    "model.position.sinusoid_base": BASE,
    "model.position.rope_theta": BASE,
    "model.position.rotary_fraction": Float(0, 1, low_open=True),
    "model.position.nope_every": COUNT,
    "model.position.rope_theta_per_layer": Float(1, low_open=True, each=True),
    "model.position.rope_heads": Int(0, also=((-1, "every head"),)),
    "model.position.rope_position_period": Int(0),  # tokens; 0 = plain positions
    "model.position.rope_scaling_factor": Float(1),
    "model.position.rope_scaling_train_len": AUTO_LEN,
    "model.position.dynamic_ntk_alpha": Float(1),
    "model.position.yarn_alpha": NONNEG_REAL,
    "model.position.yarn_beta": POSITIVE_REAL,
    "model.position.yarn_attention_factor": Float(0, low_open=True, also=(DERIVED,)),
    "model.position.yarn_mscale": NONNEG_REAL,
    "model.position.yarn_mscale_all_dim": NONNEG_REAL,
    "model.position.abf_theta": BASE,
    "model.position.llama3_low_freq_factor": POSITIVE_REAL,
    "model.position.llama3_high_freq_factor": POSITIVE_REAL,
    "model.position.longrope_short_factors": Float(0, low_open=True, each=True),
    "model.position.longrope_long_factors": Float(0, low_open=True, each=True),
    "model.position.longrope_attention_factor": Float(0, low_open=True, also=(DERIVED,)),
    "model.position.longrope_keep_first": COUNT,
    "model.position.alibi_heads": Int(0, also=((-1, "every head"),)),
    "model.position.num_buckets": POSITIVE,
    "model.position.max_distance": POSITIVE,
    "model.position.fire_mlp_width": POSITIVE,
    "model.position.fire_init_c": POSITIVE_REAL,
    "model.position.fire_init_threshold": POSITIVE_REAL,
    "model.position.sandwich_dim": AUTO_LEN,
    "model.position.xpos_scale_base": POSITIVE_REAL,
    "model.position.cope_npos_max": POSITIVE,
    "model.position.p_rope_fraction": SHARE,
    "model.position.hope_train_len": AUTO_LEN,
    "model.position.dape_mlp_width": POSITIVE,
    "model.position.fope_train_len": AUTO_LEN,
    "model.position.fope_init_gain": NONNEG_REAL,
    "model.position.fope_seed": SEED,
    "model.position.fox_gate_bias_init": Float(-30, 30),  # sigmoid saturates in float32 beyond
    "model.position.abacus_max_offset": COUNT,
    "model.position.abacus_num_embeddings": POSITIVE,
    "model.position.self_extend_group": POSITIVE,
    "model.position.self_extend_window": AUTO_LEN,
    "model.position.string_shift": Int(0, also=(DERIVED,)),
    "model.position.string_window": AUTO_LEN,
    "model.position.lm_infinite_global": COUNT,
    "model.position.lm_infinite_window": AUTO_LEN,
    "model.position.lm_infinite_distance": AUTO_LEN,
    "model.position.streaming_llm_sinks": COUNT,
    "model.position.blockwise_block": AUTO_LEN,
    "model.position.randomized_draws": POSITIVE,
    "model.position.dca_chunk_size": AUTO_LEN,
    "model.position.dca_local_window": AUTO_LEN,
    "model.position.bipe_alibi_slope_scale": POSITIVE_REAL,
    "model.position.streaming_llm_window": AUTO_LEN,
    "model.position.string_attention_factor": Float(
        0, low_open=True, also=((-1, "0.1 ln 2 + 1, STRING's code"),)),
    "model.position.attention_temperature_layers": Int(0, each=True),
    "model.position.attention_temperature_c": NONNEG_REAL,
    "model.position.attention_temperature_l0": AUTO_LEN,
    # train
    "train.num_steps": POSITIVE,
    "train.grad_accum_steps": POSITIVE,
    "train.stop_after_step": Int(1, also=((-1, "run to num_steps"),)),
    "train.learning_rate": Float(0, 1, low_open=True),
    "train.warmup_steps": COUNT,
    "train.final_lr_ratio": SHARE,
    "train.b1": FRACTION_OPEN,
    "train.b2": FRACTION_OPEN,
    "train.weight_decay": Float(0, 10),
    "train.grad_clip": NONNEG_REAL,
    "train.log_every_steps": POSITIVE,
    "train.eval_every_steps": COUNT,
    "train.eval_tokens": POSITIVE,
    "train.checkpoint_every_steps": POSITIVE,
    "train.max_to_keep": POSITIVE,
    "train.peak_flops_per_device": NONNEG_REAL,
    "train.memory_headroom": THRESHOLD,
    "train.memory_limit_gib": NONNEG_REAL,
    # mesh
    "mesh.*": Int(1, also=((-1, "the devices left over"),)),
    # eval
    "eval.length_multipliers": Float(0, low_open=True, each=True),
    "eval.max_tokens_per_length": COUNT,
    "eval.batch_tokens": POSITIVE,
    "eval.factor": POSITIVE_REAL,
    "eval.window": AUTO_LEN,
    "eval.stride": COUNT,
    "eval.step": Int(0, also=((-1, "the latest checkpoint"),)),
    "eval.position_bins": COUNT,
    "eval.*.depths": Float(0, 1, each=True),
    "eval.*.trials": POSITIVE,
    "eval.*.seed": SEED,
    "eval.*.threshold": THRESHOLD,
    "eval.*.max_new_tokens": POSITIVE,
    "eval.*.fewshot": Int(0, 8),
    "eval.*.value_digits": Int(1, 18),
    "eval.niah_multikey.num_keys": Int(2, 64),
    "eval.niah_multivalue.num_values": Int(2, 64),
    "eval.niah_multiquery.num_queries": Int(2, 64),
    "eval.variable_tracking.num_chains": Int(1, 64),
    "eval.variable_tracking.num_hops": Int(1, 64),
    "eval.common_words.num_common": Int(1, 32),
    "eval.common_words.common_repeats": Int(2),
    "eval.common_words.uncommon_repeats": POSITIVE,
    "eval.frequent_words.alpha": Float(1, low_open=True),
    "eval.frequent_words.word_letters": Int(2, 12),
    "eval.attention.windows": POSITIVE,
}


def range_of(path: str) -> Range | None:
  """The table's range of the field at dotted `path` (an exact entry, else the first matching
  pattern), or None."""
  if path in FIELD_RANGES:
    return FIELD_RANGES[path]
  for pattern, rng in FIELD_RANGES.items():
    if "*" in pattern and fnmatch.fnmatchcase(path, pattern):
      return rng
  return None


def is_numeric(value) -> bool:
  """A number (not a bool), or a non-empty tuple/list of them: the fields the table covers."""
  if isinstance(value, (list, tuple)):
    return bool(value) and all(is_numeric(v) for v in value)
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_value(path: str, value, rng: Range) -> None:
  """Raises ConfigError (one line: the field, the allowed values, the value) unless `value` is in
  `rng`."""
  if rng.each:
    ok = isinstance(value, (list, tuple)) and all(rng.admits(v) for v in value)
  else:
    ok = rng.admits(value)
  if not ok:
    values = value if isinstance(value, (list, tuple)) else [value]
    big = [v for v in values
           if isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT32_MAX]
    limit = " (int32: |value| <= 2147483647)" if big else ""
    text = [v for v in values if isinstance(v, str)]  # a flag value not read as numbers
    how = ", written as numbers separated by commas (e.g. 0.5,1,2)" if rng.each and text else ""
    raise ConfigError(f"{path} must be {rng.describe()}{limit}{how}; got {value!r}")


def check_ranges(config) -> None:
  """Checks every field of `config` that the table covers (numbers, and the tuple fields).

  Args:
    config: an experiment ConfigDict (configs/base.py), or its `to_dict()`.

  Raises:
    ConfigError: the first field (in the config's order) out of its range, NaN or infinite,
      naming it and its allowed values.
  """
  values = flatten(config if isinstance(config, dict) else config.to_dict())
  for path, value in values.items():
    rng = range_of(path)
    if rng is not None and (rng.each or is_numeric(value) or value is None
                            or isinstance(value, (bool, str))):
      check_value(path, value, rng)
