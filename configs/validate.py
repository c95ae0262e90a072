"""Config validation: bad input fails before any compilation, with one line naming the field.

(This module is not an experiment config; `--config` files are the others in this folder.)
"""

from __future__ import annotations

import math


class ConfigError(ValueError):
  """A config field (or a path/input it names) has a value that cannot work.

  The message is one line that names the field and the allowed values.
  """


DTYPES = ("float32", "bfloat16")
ACTIVATIONS = ("gelu", "swiglu")
ATTENTION_IMPLS = ("xla",)
EVAL_SPLITS = ("validation", "test")
EVAL_PROTOCOLS = ("non_overlapping", "sliding")  # eval/perplexity.py PROTOCOLS


def _positive_int(config, path: str) -> None:
  value = config
  for part in path.split("."):
    value = value[part]
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ConfigError(f"{path} must be a positive integer; got {value!r}")


def _choice(value, path: str, allowed) -> None:
  if value not in allowed:
    raise ConfigError(f"{path}={value!r} is not supported; choose one of {list(allowed)}")


def mesh_shape(mesh, num_devices: int) -> tuple[int, int, int]:
  """Resolves `config.mesh` (data, fsdp, tensor; at most one -1) against `num_devices`.

  Raises:
    ConfigError: a size is 0 or below -1, more than one -1, or the product differs from
      `num_devices`.
  """
  sizes = {"data": mesh.data, "fsdp": mesh.fsdp, "tensor": mesh.tensor}
  for name, size in sizes.items():
    if not isinstance(size, int) or size == 0 or size < -1:
      raise ConfigError(f"mesh.{name} must be a positive integer or -1 (fill); got {size!r}")
  fill = [n for n, s in sizes.items() if s == -1]
  if len(fill) > 1:
    raise ConfigError(f"at most one mesh axis may be -1; got -1 for {fill}")
  known = math.prod(s for s in sizes.values() if s != -1)
  if fill:
    if num_devices % known:
      raise ConfigError(f"mesh {sizes} does not divide the {num_devices} devices: "
                        f"the fixed axes multiply to {known}")
    sizes[fill[0]] = num_devices // known
  elif known != num_devices:
    raise ConfigError(f"mesh (data, fsdp, tensor) = {tuple(sizes.values())} needs {known} devices; "
                      f"this run has {num_devices}")
  return sizes["data"], sizes["fsdp"], sizes["tensor"]


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
    _positive_int(config, path)
  m = config.model
  if m.head_dim == -1 and m.d_model % m.num_heads:
    raise ConfigError(f"model.num_heads={m.num_heads} must divide model.d_model={m.d_model} "
                      "(or set model.head_dim)")
  if m.head_dim != -1 and (not isinstance(m.head_dim, int) or m.head_dim < 1):
    raise ConfigError(f"model.head_dim must be a positive integer or -1; got {m.head_dim!r}")
  _choice(m.mlp_activation, "model.mlp_activation", ACTIVATIONS)
  _choice(m.dtype, "model.dtype", DTYPES)
  _choice(m.param_dtype, "model.param_dtype", DTYPES)
  _choice(m.attention_impl, "model.attention_impl", ATTENTION_IMPLS)
  _choice(config.eval.split, "eval.split", EVAL_SPLITS)
  from models.rope_scaling import EXTENSIONS
  _choice(config.eval.extension, "eval.extension", EXTENSIONS)
  from data.tokenizers import get_tokenizer
  vocab = get_tokenizer(config.data.tokenizer).vocab_size
  if m.vocab_size < vocab:
    raise ConfigError(f"model.vocab_size={m.vocab_size} is smaller than the {config.data.tokenizer!r} "
                      f"tokenizer's {vocab} ids")
  from data.corpora import SOURCES
  _choice(config.data.source, "data.source", SOURCES)
  positions.build(m.position, positions.Dims.from_config(config), check_only=True)
  from data.position_samplers import check_config as check_position_sampler
  check_position_sampler(config.data.position_sampler, config.data.train_len, m.position)
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
  if not isinstance(t.warmup_steps, int) or t.warmup_steps < 0:
    raise ConfigError(f"train.warmup_steps must be an integer >= 0; got {t.warmup_steps!r}")
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
  if not config.eval.length_multipliers or any(x <= 0 for x in config.eval.length_multipliers):
    raise ConfigError(f"eval.length_multipliers must be a non-empty list of numbers > 0; "
                      f"got {config.eval.length_multipliers}")
  e = config.eval  # .get: configs written before these fields existed (eval.run) still load
  _choice(e.get("protocol", "non_overlapping"), "eval.protocol", EVAL_PROTOCOLS)
  for field in ("stride", "position_bins"):
    value = e.get(field, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
      raise ConfigError(f"eval.{field} must be an integer >= 0 (stride 0 = length // 2, "
                        f"position_bins 0 = one bin per position); got {value!r}")
  if e.get("protocol") == "sliding" and e.get("stride", 0) > min(eval_lengths(config)):
    raise ConfigError(f"eval.stride={e.stride} exceeds the shortest evaluation length "
                      f"{min(eval_lengths(config))} tokens (windows would skip tokens); use a stride "
                      "<= every length, or 0 (= length // 2)")
  _positive_int(config, "train.grad_accum_steps")
  data, fsdp, _ = mesh_shape(config.mesh, num_devices)
  micro = config.data.batch_size // t.grad_accum_steps
  if config.data.batch_size % t.grad_accum_steps or micro % (data * fsdp):
    raise ConfigError(
        f"data.batch_size={config.data.batch_size} must split into train.grad_accum_steps="
        f"{t.grad_accum_steps} microbatches whose size is divisible by the batch-parallel "
        f"devices mesh.data*mesh.fsdp={data * fsdp}")


def eval_lengths(config) -> list[int]:
  """Evaluation lengths in tokens: `round(m * train_len)` for each multiplier, sorted, unique."""
  return sorted({max(1, round(x * config.data.train_len)) for x in config.eval.length_multipliers})
