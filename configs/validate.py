"""Config validation: bad input fails before any compilation, with one line naming the field.

(This module is not an experiment config; `--config` files are the others in this folder.)
"""

from __future__ import annotations

import math

# The field checks live in configs/errors.py (data/ and models/ import them from there); the
# names are re-exported so `from configs.validate import ConfigError, parse_flags` keeps working.
from configs.errors import (OVERRIDE_ERRORS, ConfigError, choice, eval_lengths,  # noqa: F401
                            exit_bad_override, mesh_shape, name_list, parse_flags, positive_int)

DTYPES = ("float32", "bfloat16")
ACTIVATIONS = ("gelu", "swiglu")
ATTENTION_IMPLS = ("xla", "pallas")  # models/attention.py; "pallas": models/kernels/flash.py
EVAL_SPLITS = ("validation", "test")
EVAL_PROTOCOLS = ("non_overlapping", "sliding")  # eval/perplexity.py PROTOCOLS


def validate(config, num_devices: int) -> None:
  """Checks every field that can be checked without data or compilation.

  Args:
    config: the experiment ConfigDict (see configs/base.py).
    num_devices: devices in the mesh (`jax.device_count()`).

  Raises:
    ConfigError: on the first bad field, naming it and the allowed values.
  """
  from models import positions  # local import: keeps this module importable without JAX
  for path in ("model.num_layers", "model.d_model", "model.num_heads", "model.mlp_dim",
               "model.vocab_size", "data.train_len", "data.batch_size", "train.num_steps",
               "train.log_every_steps", "train.checkpoint_every_steps", "train.max_to_keep",
               "train.eval_tokens", "eval.batch_tokens"):
    positive_int(config, path)
  m = config.model
  if m.head_dim == -1 and m.d_model % m.num_heads:
    raise ConfigError(f"model.num_heads={m.num_heads} must divide model.d_model={m.d_model} "
                      "(or set model.head_dim)")
  if m.head_dim != -1 and (not isinstance(m.head_dim, int) or m.head_dim < 1):
    raise ConfigError(f"model.head_dim must be a positive integer or -1; got {m.head_dim!r}")
  choice(m.mlp_activation, "model.mlp_activation", ACTIVATIONS)
  choice(m.dtype, "model.dtype", DTYPES)
  choice(m.param_dtype, "model.param_dtype", DTYPES)
  choice(m.attention_impl, "model.attention_impl", ATTENTION_IMPLS)
  choice(config.eval.split, "eval.split", EVAL_SPLITS)
  eval_extensions(config)
  eval_suites(config)
  from data.tokenizers import get_tokenizer
  vocab = get_tokenizer(config.data.tokenizer).vocab_size
  if m.vocab_size < vocab:
    raise ConfigError(f"model.vocab_size={m.vocab_size} is smaller than the {config.data.tokenizer!r} "
                      f"tokenizer's {vocab} ids")
  check_data_source(config)  # data.source, data.array_record_dir (data/corpora.py, data/prepare.py)
  positions.build(m.position, positions.Dims.from_config(config), check_only=True)
  from models import position_transforms
  position_transforms.check_config(m.position, config.data.train_len)
  from data.position_samplers import check_config as check_position_sampler
  check_position_sampler(config.data.position_sampler, config.data.train_len, m.position)
  if config.data.get("task") is not None:  # data.task: the algorithmic task, if any
    from data.tasks import check_config as check_task
    check_task(config.data.task, config.data.train_len)
  check_retrieval(config)  # data.passkey, eval.passkey, eval.needle (data/passkey.py, eval/needle.py)
  t = config.train
  if not t.learning_rate > 0:
    raise ConfigError(f"train.learning_rate must be > 0; got {t.learning_rate}")
  if not 0 <= t.final_lr_ratio <= 1:
    raise ConfigError(f"train.final_lr_ratio must lie in [0, 1]; got {t.final_lr_ratio}")
  for field in ("weight_decay", "grad_clip"):
    if t[field] < 0:
      raise ConfigError(f"train.{field} must be >= 0 (0 disables it); got {t[field]}")
  if t.stop_after_step != -1 and (not isinstance(t.stop_after_step, int) or t.stop_after_step < 1):
    raise ConfigError(f"train.stop_after_step must be -1 (run to num_steps) or >= 1; "
                      f"got {t.stop_after_step!r}")
  if config.eval.max_tokens_per_length < 0:
    raise ConfigError(f"eval.max_tokens_per_length must be >= 0 (0 = all); "
                      f"got {config.eval.max_tokens_per_length}")
  if m.global_every and not m.sliding_window:
    raise ConfigError("model.global_every only applies with model.sliding_window > 0")
  prefetch = config.data.get("prefetch_batches", 4)
  if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
    raise ConfigError(f"data.prefetch_batches must be an integer >= 0 (0 = no read-ahead); "
                      f"got {prefetch!r}")
  if not isinstance(t.warmup_steps, int) or t.warmup_steps < 0:
    raise ConfigError(f"train.warmup_steps must be an integer >= 0; got {t.warmup_steps!r}")
  if t.warmup_steps > t.num_steps:
    raise ConfigError(f"train.warmup_steps={t.warmup_steps} must be <= train.num_steps="
                      f"{t.num_steps} (the learning rate would never reach its peak)")
  for field in ("sliding_window", "global_every"):
    if not isinstance(m[field], int) or m[field] < 0:
      raise ConfigError(f"model.{field} must be an integer >= 0 (0 = off); got {m[field]!r}")
  if m.logn_scaling and config.data.train_len < 2:
    raise ConfigError("model.logn_scaling needs data.train_len >= 2 (it divides by log(train_len))")
  if not isinstance(m.attention_chunk, int) or m.attention_chunk < 0:
    raise ConfigError(f"model.attention_chunk must be an integer >= 0 (0 = off); "
                      f"got {m.attention_chunk!r}")
  if t.eval_every_steps < 0:
    raise ConfigError(f"train.eval_every_steps must be >= 0; got {t.eval_every_steps}")
  if not 0 <= config.data.validation_fraction < 1 or not 0 <= config.data.test_fraction < 1:
    raise ConfigError("data.validation_fraction and data.test_fraction must lie in [0, 1)")
  if config.eval.split == "validation" and config.data.validation_fraction <= 0:
    raise ConfigError("eval.split='validation' needs data.validation_fraction > 0")
  if config.eval.split == "test" and config.data.test_fraction <= 0:
    raise ConfigError("eval.split='test' needs data.test_fraction > 0")
  if not config.eval.length_multipliers or not all(
      isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
      for x in config.eval.length_multipliers):
    raise ConfigError(f"eval.length_multipliers must be a non-empty list of finite numbers > 0; "
                      f"got {config.eval.length_multipliers}")
  too_short = [x for x in config.eval.length_multipliers if round(x * config.data.train_len) < 1]
  if too_short:
    raise ConfigError(f"eval.length_multipliers {too_short} x data.train_len="
                      f"{config.data.train_len} give lengths below 1 token; every eval length "
                      f"must be >= 1 token (multiplier >= {1 / config.data.train_len:.3g})")
  e = config.eval  # .get: configs written before these fields existed (eval.run) still load
  choice(e.get("protocol", "non_overlapping"), "eval.protocol", EVAL_PROTOCOLS)
  for field in ("stride", "position_bins"):
    value = e.get(field, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
      raise ConfigError(f"eval.{field} must be an integer >= 0 (stride 0 = length // 2, "
                        f"position_bins 0 = one bin per position); got {value!r}")
  if e.get("protocol") == "sliding" and e.get("stride", 0) > min(eval_lengths(config)):
    raise ConfigError(f"eval.stride={e.stride} exceeds the shortest evaluation length "
                      f"{min(eval_lengths(config))} tokens (windows would skip tokens); use a stride "
                      "<= every length, or 0 (= length // 2)")
  positive_int(config, "train.grad_accum_steps")
  data, fsdp, _ = mesh_shape(config.mesh, num_devices)
  micro = config.data.batch_size // t.grad_accum_steps
  if config.data.batch_size % t.grad_accum_steps or micro % (data * fsdp):
    raise ConfigError(
        f"data.batch_size={config.data.batch_size} must split into train.grad_accum_steps="
        f"{t.grad_accum_steps} microbatches whose size is divisible by the batch-parallel "
        f"devices mesh.data*mesh.fsdp={data * fsdp}")


def check_data_source(config) -> None:
  """Checks data.source and data.array_record_dir (the prepared directory itself is read and
  checked against data.tokenizer and the split fractions when it is loaded:
  data.corpora.load_prepared_splits, still before compilation).

  Raises:
    ConfigError: an unknown data.source; data.array_record_dir set with another source, or a
      URL (ArrayRecord reads local or mounted paths); data.passkey.fraction > 0 with
      source="array_record" (passkey training documents are made from the training text).
  """
  from data.corpora import SOURCES  # local import: numpy only
  d = config.data
  choice(d.source, "data.source", SOURCES)
  directory = d.get("array_record_dir", "")
  if not isinstance(directory, str):
    raise ConfigError(f"data.array_record_dir must be a path (a string); got {directory!r}")
  if directory and d.source != "array_record":
    raise ConfigError(f"data.array_record_dir={directory!r} is only read with "
                      f"data.source='array_record'; got data.source={d.source!r}")
  if "://" in directory:
    raise ConfigError(f"data.array_record_dir={directory!r}: ArrayRecord files are read from a "
                      "local path; mount the bucket (e.g. gcsfuse) on every host and give the "
                      "mount's path, or copy the directory to each host's disk")
  p = d.get("passkey")
  if d.source == "array_record" and p is not None and p.fraction > 0:
    raise ConfigError(f"data.passkey.fraction={p.fraction} needs the training text, which "
                      "data.source='array_record' holds as token ids only; set it to 0, or train "
                      "from data.source='text_files'")


def _integer(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def check_retrieval(config) -> None:
  """Checks the passkey / needle retrieval fields: data.passkey, eval.passkey, eval.needle.

  Sections absent from an older config are skipped (train.load_run_config fills them from
  configs/base.py anyway).

  Raises:
    ConfigError: naming the first bad field and its allowed values: data.passkey.fraction
      outside [0, 1); a seed that is not an integer >= 0; a preamble that is not a bool;
      key_digits / value_digits outside 1..18; depths not a non-empty list of numbers in [0, 1];
      trials < 1; threshold outside (0, 1]; max_new_tokens < digits + 2 (room for a leading
      space and the character after the number); or, with data.passkey.fraction > 0, a passkey
      training document that cannot fit in data.train_len tokens, or an algorithmic task.
  """
  from data.passkey import MAX_DIGITS, min_document_len  # local import: numpy only
  from data.tokenizers import get_tokenizer
  p = config.data.get("passkey")
  if p is not None:
    if isinstance(p.fraction, bool) or not isinstance(p.fraction, (int, float)) or not 0 <= p.fraction < 1:
      raise ConfigError(f"data.passkey.fraction must lie in [0, 1) (share of training windows; "
                        f"0 = none); got {p.fraction!r}")
    _retrieval_common(p, "data.passkey", digits_field="key_digits", max_digits=MAX_DIGITS)
    task = config.data.get("task")
    if p.fraction > 0 and task is not None and task.get("name"):
      raise ConfigError(f"data.passkey.fraction={p.fraction} mixes passkey documents into text "
                        f"training; it must be 0 with an algorithmic task "
                        f"(data.task.name={task.name!r})")
    if p.fraction > 0:
      need = min_document_len(get_tokenizer(config.data.tokenizer), preamble=p.preamble,
                              key_digits=p.key_digits)
      if need > config.data.train_len:
        raise ConfigError(
            f"data.passkey.fraction > 0 needs data.train_len >= {need} tokens for a passkey "
            f"document with data.passkey.preamble={p.preamble} and key_digits={p.key_digits}; "
            f"got data.train_len={config.data.train_len} (set data.passkey.preamble=False, "
            "or fraction=0)")
  for suite in ("passkey", "needle"):
    e = config.eval.get(suite)
    if e is None:
      continue
    prefix = f"eval.{suite}"
    if suite == "needle":
      _retrieval_common(e, prefix, digits_field="value_digits", max_digits=MAX_DIGITS)
      digits, digits_name = e.value_digits, "eval.needle.value_digits"
    else:
      digits, digits_name = (p.key_digits if p is not None else 5), "data.passkey.key_digits"
    depths = e.depths
    if (not isinstance(depths, (tuple, list)) or not depths
        or any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1
               for d in depths)):
      raise ConfigError(f"{prefix}.depths must be a non-empty list of numbers in [0, 1] (share of "
                        f"the filler before the needle); got {depths!r}")
    if not _integer(e.trials) or e.trials < 1:
      raise ConfigError(f"{prefix}.trials must be a positive integer; got {e.trials!r}")
    if not _integer(e.seed) or e.seed < 0:
      raise ConfigError(f"{prefix}.seed must be an integer >= 0; got {e.seed!r}")
    if isinstance(e.threshold, bool) or not isinstance(e.threshold, (int, float)) or not 0 < e.threshold <= 1:
      raise ConfigError(f"{prefix}.threshold must lie in (0, 1] (accuracy a length needs); "
                        f"got {e.threshold!r}")
    if not _integer(e.max_new_tokens) or e.max_new_tokens < digits + 2:
      raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {digits + 2} "
                        f"({digits_name} + 2: a leading space, the digits and the character "
                        f"after them); got {e.max_new_tokens!r}")


def _retrieval_common(section, prefix: str, *, digits_field: str, max_digits: int) -> None:
  """Checks the seed, preamble and digit count of a passkey / needle section."""
  if not _integer(section.seed) or section.seed < 0:
    raise ConfigError(f"{prefix}.seed must be an integer >= 0; got {section.seed!r}")
  if not isinstance(section.preamble, bool):
    raise ConfigError(f"{prefix}.preamble must be True or False; got {section.preamble!r}")
  digits = section[digits_field]
  if not _integer(digits) or not 1 <= digits <= max_digits:
    raise ConfigError(f"{prefix}.{digits_field} must be an integer in [1, {max_digits}]; "
                      f"got {digits!r}")


# eval.suites names (eval/run.py): ppl_vs_length and loss_by_position come from one pass.
SUITES = ("ppl_vs_length", "loss_by_position", "passkey", "needle", "attention", "algorithmic")


def eval_extensions(config) -> list[str]:
  """`eval.extension` as a list: comma-separated names from models.extensions.EXTENSIONS.

  Raises:
    ConfigError: an unknown or repeated name, or an empty list.
  """
  from models.extensions import EXTENSIONS
  return name_list(config.eval.extension, "eval.extension", tuple(EXTENSIONS))


def eval_suites(config) -> list[str]:
  """`eval.suites` as a list (comma-separated names from `SUITES`).

  Raises:
    ConfigError: an unknown or repeated name, or an empty list.
  """
  return name_list(config.eval.get("suites", "ppl_vs_length,loss_by_position"), "eval.suites",
                    SUITES)


