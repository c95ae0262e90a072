"""Config validation: bad input fails before any compilation, with one line naming the field.

(This module is not an experiment config; `--config` files are the others in this folder.)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from configs.errors import ConfigError, choice, eval_lengths, mesh_shape, name_list, positive_int
from data import corpus_sources, position_samplers, tasks
from data import retrieval_mix, ruler_words
from data.retrieval_checks import check_retrieval
from data.tokenizers import get_tokenizer
from eval import suites as suites_registry
from models import extensions, position_transforms, positions
from models.attention import QK_NORMS
from models.decoder import NORM_POSITIONS
from models.positions.base import KERNEL_BLOCK_FIELDS
from models.spec import model_spec
from runs import wandb_log

DTYPES = ("float32", "bfloat16")
ACTIVATIONS = ("gelu", "swiglu")
ATTENTION_IMPLS = ("xla", "pallas")  # models/attention.py; "pallas": models/kernels/flash.py
EVAL_SPLITS = ("validation", "test")
EVAL_PROTOCOLS = ("non_overlapping", "sliding")  # eval/perplexity.py PROTOCOLS
INIT_FROM_LEARNED = ("interpolate", "copy")  # train.init_from_learned (runs/warm_start.py)
REMAT_MODES = ("none", "block", "full")  # model.remat (models/decoder.py REMAT_POLICIES)


def validate(config, num_devices: int) -> None:
  """Checks every field that can be checked without data or compilation.

  Args:
    config: the experiment ConfigDict (see configs/base.py).
    num_devices: devices in the mesh (`jax.device_count()`).

  Raises:
    ConfigError: on the first bad field, naming it and the allowed values.
  """
  for path in ("model.num_layers", "model.d_model", "model.num_heads", "model.mlp_dim",
               "model.vocab_size", "data.train_len", "data.batch_size", "train.num_steps",
               "train.log_every_steps", "train.checkpoint_every_steps", "train.max_to_keep",
               "train.eval_tokens", "eval.batch_tokens"):
    positive_int(config, path)
  m = config.model
  check_model(config)  # the decoder's shape: heads, KV heads, QK-norm, dtypes
  for field in KERNEL_BLOCK_FIELDS:  # models/kernels/flash.py BlockSizes
    size = m.get(f"kernel_{field}", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not (
        size == 0 or (size >= 8 and size & (size - 1) == 0)):
      raise ConfigError(f"model.kernel_{field} must be 0 (the backend's default) or a power of "
                        f"two >= 8 (tokens: 8, 16, 32, ...); got {size!r}")
  choice(config.eval.split, "eval.split", EVAL_SPLITS)
  eval_extensions(config)
  eval_suites(config)
  vocab = get_tokenizer(config.data.tokenizer).vocab_size
  if m.vocab_size < vocab:
    raise ConfigError(f"model.vocab_size={m.vocab_size} is smaller than the {config.data.tokenizer!r} "
                      f"tokenizer's {vocab} ids")
  check_data_source(config)  # data.source, data.array_record_dir (data/corpora.py, data/prepare.py)
  positions.build(m.position, positions.Dims.from_config(config), check_only=True)
  position_transforms.check_config(m.position, config.data.train_len, m.num_layers)
  position_samplers.check_config(config.data.position_sampler, config.data.train_len, m.position)
  if config.data.get("task") is not None:  # data.task: the algorithmic task, if any
    tasks.check_config(config.data.task, config.data.train_len)
  check_retrieval(config)  # data.passkey, eval.passkey, eval.needle (data/retrieval_checks.py, eval/needle.py)
  ruler_words.check_config(config)  # eval.common_words, eval.frequent_words (data/ruler_words.py)
  retrieval_mix.check_mix(config)  # data.retrieval_mix (data/retrieval_mix.py)
  t = config.train
  if not t.learning_rate > 0:
    raise ConfigError(f"train.learning_rate must be > 0; got {t.learning_rate}")
  if not 0 <= t.final_lr_ratio <= 1:
    raise ConfigError(f"train.final_lr_ratio must lie in [0, 1]; got {t.final_lr_ratio}")
  for field in ("weight_decay", "grad_clip"):
    if t[field] < 0:
      raise ConfigError(f"train.{field} must be >= 0 (0 disables it); got {t[field]}")
  if not isinstance(t.get("init_from", ""), str):
    raise ConfigError(f"train.init_from must be a run's workdir, optionally <workdir>@<step> "
                      f"(\"\" = train from scratch); got {t.init_from!r}")
  choice(t.get("init_from_learned", "interpolate"), "train.init_from_learned", INIT_FROM_LEARNED)
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
  choice(m.get("remat", "none"), "model.remat", REMAT_MODES)
  headroom = t.get("memory_headroom", 0.9)
  if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 < headroom <= 1:
    raise ConfigError(f"train.memory_headroom must be a fraction in (0, 1] of the memory limit; "
                      f"got {headroom!r}")
  cap = t.get("memory_limit_gib", 0.0)
  if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap >= 0:
    raise ConfigError(f"train.memory_limit_gib must be a number of GiB >= 0 (0 = the device's "
                      f"own limit); got {cap!r}")
  if t.eval_every_steps < 0:
    raise ConfigError(f"train.eval_every_steps must be >= 0; got {t.eval_every_steps}")
  wandb_log.check_config(config)  # train.wandb_project / wandb_entity / wandb_mode
  check_evaluation(config)  # the held-out splits and eval.* lengths and protocol
  positive_int(config, "train.grad_accum_steps")
  data, fsdp, _, _ = mesh_shape(config.mesh, num_devices)
  micro = config.data.batch_size // t.grad_accum_steps
  if config.data.batch_size % t.grad_accum_steps or micro % (data * fsdp):
    raise ConfigError(
        f"data.batch_size={config.data.batch_size} must split into train.grad_accum_steps="
        f"{t.grad_accum_steps} microbatches whose size is divisible by the batch-parallel "
        f"devices mesh.data*mesh.fsdp={data * fsdp}")


def check_model(config) -> None:
  """The decoder's shape fields: head_dim, num_kv_heads (grouped-query attention), qk_norm,
  qkv_bias, norm_eps, norm_position, the MLP activation, dtypes and the attention implementation.

  Raises:
    ConfigError: the first bad field, naming it and the allowed values; also a positional
      scheme that cannot run with num_kv_heads < num_heads (none today: every scheme runs under
      grouped-query attention, models/attention.py).
  """
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
  kv = m.get("num_kv_heads", -1)
  if isinstance(kv, bool) or not isinstance(kv, int) or not (
      kv == -1 or (kv >= 1 and m.num_heads % kv == 0)):
    raise ConfigError(f"model.num_kv_heads must be -1 (= model.num_heads) or a divisor of "
                      f"model.num_heads={m.num_heads} (1 = multi-query); got {kv!r}")
  choice(m.get("qk_norm", "none"), "model.qk_norm", QK_NORMS)
  if not isinstance(m.get("qkv_bias", False), bool):
    raise ConfigError(f"model.qkv_bias must be True or False; got {m.qkv_bias!r}")
  eps = m.get("norm_eps", 1e-6)
  if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
    raise ConfigError(f"model.norm_eps must be a number in (0, 1), e.g. 1e-6; got {eps!r}")
  choice(m.get("norm_position", "pre"), "model.norm_position", NORM_POSITIONS)


def check_evaluation(config) -> None:
  """The fields of the held-out evaluation: data.validation_fraction / test_fraction against
  eval.split, eval.length_multipliers (lengths of >= 1 token), eval.protocol, stride and
  position_bins (`validate` calls it; the order of its checks is the order of their errors).

  Raises:
    ConfigError: on the first bad field, naming it and the allowed values.
  """
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


def check_data_source(config) -> None:
  """Checks data.source and data.array_record_dir (the prepared directory itself is read and
  checked against data.tokenizer and the split fractions when it is loaded:
  data.corpora.load_prepared_splits, still before compilation).

  Raises:
    ConfigError: an unknown data.source; data.array_record_dir set with another source, or a
      URL (ArrayRecord reads local or mounted paths); data.passkey.fraction > 0 with
      source="array_record" (passkey training documents are made from the training text);
      data.text_field not a non-empty string or data.id_field not a string, or either changed
      from its default with a source other than "text_files" (data/corpus_formats.py reads them).
  """
  d = config.data
  choice(d.source, "data.source", corpus_sources.SOURCES)
  text_field, id_field = d.get("text_field", "text"), d.get("id_field", "")
  if not isinstance(text_field, str) or not text_field:
    raise ConfigError(f"data.text_field must name the JSON key / parquet column of the text "
                      f"(default 'text'); got {text_field!r}")
  if not isinstance(id_field, str):
    raise ConfigError(f"data.id_field must be a key / column name or '' ('' = <file stem>:<line "
                      f"or row number>); got {id_field!r}")
  for name, value, default in (("text_field", text_field, "text"), ("id_field", id_field, "")):
    if value != default and d.source != "text_files":
      raise ConfigError(f"data.{name}={value!r} is only read with data.source='text_files' (record "
                        f"files of data.text_glob); got data.source={d.source!r}")
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


def eval_extensions(config) -> list[str]:
  """`eval.extension` as a list: comma-separated names from models.extensions.EXTENSIONS.

  Raises:
    ConfigError: an unknown or repeated name, or an empty list.
  """
  return name_list(config.eval.extension, "eval.extension", tuple(extensions.EXTENSIONS))


def eval_suites(config) -> list[str]:
  """`eval.suites` as a list (comma-separated names of the registry, eval/suites/).

  Raises:
    ConfigError: an unknown or repeated name, or an empty list.
  """
  return suites_registry.requested_names(config)


# ---------------------------------------------------------------------------- the pre-flight


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """One model to evaluate: the run's config with an eval-time extension applied.

  Attributes:
    extension: the `eval.extension` name ("none" = the model as trained).
    config: the experiment config with the extension applied (models/extensions.py).
    spec: its ModelSpec (models/spec.py), or None when `preflight` was given no mesh.
  """

  extension: str
  config: Any
  spec: Any


@dataclasses.dataclass(frozen=True)
class Plan:
  """What `preflight` found a run will evaluate.

  Attributes:
    suites: the eval.suites.Suite objects to run, in registry order.
    evaluations: one `Evaluation` per eval-time extension (train.py: the model as trained only).
    warnings: lines to print before starting (fields that will not be applied, skipped lengths).
    eval_lengths: the evaluation lengths, tokens (eval.length_multipliers x data.train_len).
  """

  suites: list
  evaluations: list[Evaluation]
  warnings: list[str]
  eval_lengths: list[int]


def preflight(config, *, purpose: str, mesh=None, docs=None, tokenizer=None,
              explicit_lengths: bool = False) -> Plan:
  """The one pre-flight of train.py ("train"), eval.run and a study's evaluation points
  ("eval"): every rule on what a run evaluates, checked before anything compiles.

  Run after `validate` (the fields one by one). It chooses the suites (eval.suites.for_run: the
  run's kind of data decides), applies every eval-time extension of `eval.extension` to the
  config (each must fit the scheme; train.py checks them and leaves them to eval.run), builds
  each resulting model's spec when a mesh is given, and runs every suite's `check` on every
  resulting config (lengths against the scheme, the retrieval prompts against the lengths, the
  needle's haystack when `docs` is given).

  Args:
    config: the experiment config.
    purpose: "train" | "eval".
    mesh: the device mesh, or None (sweeps.launch: no spec is built).
    docs: the corpus splits (data.inputs.load_splits), or None where not loaded.
    tokenizer: the run's tokenizer, or None (then the configured one is loaded).
    explicit_lengths: the eval lengths were asked for explicitly (eval.run's
      --length_multipliers): each must be representable, instead of being skipped.

  Raises:
    ConfigError: the first rule broken, naming the field and the allowed values.
  """
  suites, warnings = suites_registry.for_run(config, purpose)
  names = eval_extensions(config)
  window = config.eval.get("window", -1)
  applied = []
  for ext in names:
    cfg = extensions.apply_extension(config, ext, config.eval.factor, window)
    cfg.eval.extension = ext  # the results record the one extension they were computed with
    applied.append((ext, cfg))
  if purpose == "train":
    if names != ["none"]:
      warnings.append(f"not applied: eval.extension={config.eval.extension!r}: train.py "
                      "evaluates the model as trained; run eval-time extensions with python -m "
                      f"eval.run --workdir=... --config.eval.extension={config.eval.extension}")
    applied = [("none", config)]
  tokenizer = tokenizer if tokenizer is not None else get_tokenizer(config.data.tokenizer)
  evaluations = []
  for ext, cfg in applied:
    spec = model_spec(cfg, mesh) if mesh is not None else None
    for suite in suites:
      for warning in suite.check(cfg, spec=spec, docs=docs, tokenizer=tokenizer,
                                 explicit_lengths=explicit_lengths):
        if warning not in warnings:
          warnings.append(warning)
    evaluations.append(Evaluation(ext, cfg, spec))
  return Plan(suites, evaluations, warnings, eval_lengths(config))
