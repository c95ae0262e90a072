"""Every numeric config field has a range in configs/field_ranges.py, and NaN, inf and an
out-of-range value of each are refused by `validate` in one line naming the field, before
anything is compiled; fields the chosen scheme, sampler or task would ignore are refused."""

import math
import os

import pytest

from configs import base
from configs.errors import ConfigError, flatten
from configs.field_ranges import FIELD_RANGES, INT32_MAX, Range, check_ranges, is_numeric, range_of
from configs.validate import validate
from test_configs import CONFIG_FILES, load



def config_files() -> list[str]:
  """The stand-alone experiment config files (test_configs.CONFIG_FILES) but stored.py, which
  re-exports the schema's get_config, and presets.py."""
  return [p for p in CONFIG_FILES if os.path.basename(p) not in ("stored.py", "presets.py")]


def numeric_fields(config) -> dict:
  """{path: value} of the fields the table must cover: numbers and the tuple-of-number fields
  (empty tuples included, by their table entry)."""
  return {k: v for k, v in flatten(config.to_dict()).items()
          if is_numeric(v) or (isinstance(v, tuple) and range_of(k) is not None)}


def test_every_numeric_field_of_every_config_file_has_a_range():
  missing = {}
  for path in config_files():
    for field, value in flatten(load(path).to_dict()).items():
      if (is_numeric(value) or isinstance(value, tuple)) and range_of(field) is None:
        missing[field] = os.path.basename(path)
  assert not missing, f"numeric fields without a range in configs/field_ranges.py: {missing}"


def test_every_table_entry_names_a_field():
  fields = flatten(base.get_config().to_dict())
  import fnmatch
  dead = [p for p in FIELD_RANGES if not any(fnmatch.fnmatchcase(f, p) for f in fields)]
  assert not dead, dead


def out_of_range(rng: Range):
  """A finite value of the field's type that `rng` refuses (below, above, or past int32)."""
  step = 1 if rng.kind == "int" else 0.5
  candidates = []
  if rng.low is not None:
    candidates += [rng.low, rng.low - step, rng.low - 7 * step]
  if rng.high is not None:
    candidates += [rng.high, rng.high + step]
  candidates += [INT32_MAX + 1] if rng.kind == "int" else []
  for value in candidates:
    value = int(value) if rng.kind == "int" else float(value)
    if not rng.admits(value):
      return value
  raise AssertionError(f"no out-of-range value for {rng}")


def bad_values(field: str, value) -> list:
  rng = range_of(field)
  bad = [float("nan"), float("inf"), out_of_range(rng)]
  if rng.each:  # a tuple field: one bad element among good ones (the default's, if any)
    good = list(value[:1]) if value else []
    return [tuple(good + [b]) for b in bad]
  return bad


def set_field(config, field: str, value) -> None:
  *parents, leaf = field.split(".")
  node = config
  for p in parents:
    node = node[p]
  with node.ignore_type():  # an int field given NaN: what a study point or a JSON can hold
    node[leaf] = value


BASE_FIELDS = sorted(numeric_fields(base.get_config()))


@pytest.mark.parametrize("field", BASE_FIELDS)
def test_nan_inf_and_out_of_range_are_refused_naming_the_field(field):
  default = flatten(base.get_config().to_dict())[field]
  for value in bad_values(field, default):
    c = base.get_config()
    set_field(c, field, value)
    with pytest.raises(ConfigError) as error:
      validate(c, 1)
    message = str(error.value)
    assert message.startswith(f"{field} must be "), (field, value, message)
    assert "\n" not in message and repr(value) in message, message


def test_the_defaults_and_the_sentinels_pass():
  check_ranges(base.get_config())
  for field in BASE_FIELDS:
    rng = range_of(field)
    for sentinel, meaning in rng.also:
      assert rng.admits(sentinel) and meaning, field


def test_range_words_on_hand_made_ranges():
  from configs.field_ranges import Float, Int
  assert Int(1).describe() == "an integer >= 1"
  assert Float(0, 1, low_open=True).describe() == "a finite number in (0, 1]"
  assert Int(1, also=((-1, "num_heads"),)).describe() == "-1 (num_heads) or an integer >= 1"
  assert Float(0, 1, each=True).describe() == "a tuple of finite numbers in [0, 1]"
  rng = Int(0, 2**31 - 1)
  assert rng.admits(0) and rng.admits(2**31 - 1) and not rng.admits(2**31)
  assert not rng.admits(True) and not rng.admits(1.0) and not rng.admits(-1)
  assert not Float(0).admits(math.inf) and not Float(0).admits(math.nan) and Float(0).admits(3)


@pytest.mark.parametrize("fields,match", [
    ({"model.position.kind": "alibi", "model.position.rope_scaling": "yarn"},
     r"model.position.rope_scaling='yarn' does not apply to model.position.kind='alibi' \(read by "
     r"rope, .*\); leave it at its default 'none'"),
    ({"model.position.kind": "t5", "model.position.rope_theta": 5e5},
     r"model.position.rope_theta=500000.0 does not apply to model.position.kind='t5'"),
    ({"model.position.kind": "rope", "model.position.self_extend_group": 8},
     r"model.position.self_extend_group=8 does not apply .* without the transform"),
    ({"model.position.kind": "rope", "model.position.attention_temperature_form": "yarn"},
     r"attention_temperature_form='yarn' does not apply"),
    ({"data.position_sampler.num_chunks": 3, "data.position_sampler.kind": "randomized"},
     r"data.position_sampler.num_chunks=3 is not read by data.position_sampler.kind='randomized' "
     r"\(only by pose\)"),
    ({"data.task.train_max_size": 9},
     r"data.task.train_max_size=9 applies only to an algorithmic task"),
    ({"data.task.name": "copy", "data.train_len": 64, "data.bos_anchor": True},
     r"data.bos_anchor=True applies to the text corpus, not to data.task.name='copy'"),
])
def test_fields_the_run_would_ignore_are_refused(fields, match):
  c = base.get_config()
  for field, value in fields.items():
    set_field(c, field, value)
  with pytest.raises(ConfigError, match=match):
    validate(c, 1)


def test_fields_of_the_scheme_and_its_active_transform_pass():
  c = base.get_config()
  for field, value in {"model.position.kind": "rope", "model.position.rope_scaling": "yarn",
                       "model.position.rope_scaling_factor": 4.0,
                       "model.position.position_transform": "self_extend",
                       "model.position.self_extend_group": 8,
                       "model.position.attention_temperature": True,
                       "model.position.attention_temperature_form": "yarn"}.items():
    set_field(c, field, value)
  validate(c, 1)


def test_a_field_read_by_the_eval_time_extension_passes_and_is_refused_without_it():
  """STRING's shift on a RoPE run is read by eval.extension='string' (models/extensions.py
  params), and by nothing without it."""
  c = base.get_config()
  set_field(c, "model.position.kind", "rope")
  set_field(c, "model.position.string_shift", 5)
  with pytest.raises(ConfigError, match=r"model.position.string_shift=5 does not apply to "
                                        r"model.position.kind='rope'"):
    validate(c, 1)
  set_field(c, "eval.extension", "string")
  validate(c, 1)
