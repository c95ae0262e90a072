"""Config validation: bad input fails before any compilation, with one line naming the field.

(This module is not an experiment config; `--config` files are the others in this folder.)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from configs import base as base_config
from configs.errors import ConfigError, choice, eval_lengths, mesh_shape, name_list
from configs.field_ranges import check_ranges
from data import corpora, corpus_sources, position_coupling, position_samplers, tasks
from data import passkey_training, retrieval_mix, ruler_words
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
EVAL_SPLITS = corpora.HELD_OUT
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
  check_ranges(config)  # every numeric field against its range (configs/field_ranges.py)
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
  check_applicable(config)  # fields the chosen scheme, sampler or task would ignore
  position_samplers.check_config(config.data.position_sampler, config.data.train_len, m.position)
  if config.data.get("task") is not None:  # data.task: the algorithmic task, if any
    tasks.check_config(config.data.task, config.data.train_len)
    position_coupling.check_config(config)  # data.task.position_coupling (Cho et al.)
  check_retrieval(config)  # data.passkey, eval.passkey, eval.needle (data/retrieval_checks.py, eval/needle.py)
  ruler_words.check_config(config)  # eval.common_words, eval.frequent_words (data/ruler_words.py)
  retrieval_mix.check_mix(config)  # data.retrieval_mix (data/retrieval_mix.py)
  t = config.train
  if not isinstance(t.get("init_from", ""), str):
    raise ConfigError(f"train.init_from must be a run's workdir, optionally <workdir>@<step> "
                      f"(\"\" = train from scratch); got {t.init_from!r}")
  choice(t.get("init_from_learned", "interpolate"), "train.init_from_learned", INIT_FROM_LEARNED)
  if m.global_every and not m.sliding_window:
    raise ConfigError("model.global_every only applies with model.sliding_window > 0")
  if t.warmup_steps > t.num_steps:
    raise ConfigError(f"train.warmup_steps={t.warmup_steps} must be <= train.num_steps="
                      f"{t.num_steps} (the learning rate would never reach its peak)")
  if m.logn_scaling and config.data.train_len < 2:
    raise ConfigError("model.logn_scaling needs data.train_len >= 2 (it divides by log(train_len))")
  choice(m.get("remat", "none"), "model.remat", REMAT_MODES)
  wandb_log.check_config(config)  # train.wandb_project / wandb_entity / wandb_mode
  check_evaluation(config)  # the held-out splits and eval.* lengths and protocol
  data, fsdp, _, _ = mesh_shape(config.mesh, num_devices)
  micro = config.data.batch_size // t.grad_accum_steps
  if config.data.batch_size % t.grad_accum_steps or micro % (data * fsdp):
    raise ConfigError(
        f"data.batch_size={config.data.batch_size} must split into train.grad_accum_steps="
        f"{t.grad_accum_steps} microbatches whose size is divisible by the batch-parallel "
        f"devices mesh.data*mesh.fsdp={data * fsdp}")
  check_sink_token(config, num_devices)  # model.sink_token and what cannot hold a global key


def check_sink_token(config, num_devices: int) -> None:
  """model.sink_token (models/decoder.py): True or False, and not with a layout that would hide
  the sink from some queries or has no global key: sliding windows, the fused kernel, context
  parallelism, the attention-statistics suite.

  Raises:
    ConfigError: naming model.sink_token and the field it cannot be combined with.
  """
  m = config.model
  sink = m.get("sink_token", False)
  if not isinstance(sink, bool):
    raise ConfigError(f"model.sink_token must be True or False; got {sink!r}")
  if not sink:
    return
  clashes = {"model.sliding_window > 0 (the sink would leave the window)": m.sliding_window > 0,
             "model.attention_impl='pallas' (the kernel has no global key)":
                 m.attention_impl == "pallas",
             "mesh.context > 1": mesh_shape(config.mesh, num_devices)[2] > 1,
             "eval.suites=attention": "attention" in eval_suites(config)}
  for what, clash in clashes.items():
    if clash:
      raise ConfigError(f"model.sink_token=True cannot be combined with {what}; set "
                        "model.sink_token=False (allowed: True, False) or change that field")


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
  choice(m.mlp_activation, "model.mlp_activation", ACTIVATIONS)
  choice(m.dtype, "model.dtype", DTYPES)
  choice(m.param_dtype, "model.param_dtype", DTYPES)
  choice(m.attention_impl, "model.attention_impl", ATTENTION_IMPLS)
  kv = m.get("num_kv_heads", -1)
  if kv != -1 and m.num_heads % kv:
    raise ConfigError(f"model.num_kv_heads must be -1 (= model.num_heads) or a divisor of "
                      f"model.num_heads={m.num_heads} (1 = multi-query); got {kv!r}")
  choice(m.get("qk_norm", "none"), "model.qk_norm", QK_NORMS)
  if not isinstance(m.get("qkv_bias", False), bool):
    raise ConfigError(f"model.qkv_bias must be True or False; got {m.qkv_bias!r}")
  choice(m.get("norm_position", "pre"), "model.norm_position", NORM_POSITIONS)


# Eval-time position-id transform fields (models/position_transforms.py CONFIG_FIELDS) -> the
# model.position.position_transform that reads them; the attention temperature's form and layers
# are read only with model.position.attention_temperature on.
_TRANSFORM_OF = {"self_extend_": "self_extend", "string_": "string", "lm_infinite_": "lm_infinite",
                 "streaming_llm_": "streaming_llm", "blockwise_": "blockwise", "dca_": "dca"}
# data.position_sampler fields -> the samplers that read them (data/position_samplers.py).
_SAMPLER_FIELDS = {"max_position": ("randomized", "pose", "cream", "endprompt"),
                   "num_chunks": ("pose",), "seed": ("randomized", "pose", "cream", "endprompt"),
                   "cream_k": ("cream",), "cream_sigma": ("cream",), "cream_truncation": ("cream",),
                   "endprompt_length": ("endprompt",), "endprompt_anchor": ("endprompt",)}


def _ignored_position_field(pos, name: str, extension: str) -> bool:
  """Whether `model.position.<name>` is read by neither the scheme, nor an active transform, nor
  the eval-time `extension` (eval.extension: its params and window field, models/extensions.py)."""
  if name in positions.scheme_class(pos.kind).config_fields or name == "position_transform":
    return False
  spec = extensions.EXTENSIONS.get(extension)
  if spec is not None and name in spec.params + spec.optional_params + (spec.window_field,):
    return False
  if name in position_transforms.CONFIG_FIELDS:
    prefix = next(p for p in _TRANSFORM_OF if name.startswith(p))
    return pos.get("position_transform", "none") != _TRANSFORM_OF[prefix]
  if name in position_transforms.EVAL_POSITION_FIELDS:
    return name != "randomized_positions" and not pos.get("randomized_positions", False)
  if name in position_transforms.TEMPERATURE_FIELDS:
    return name != "attention_temperature" and not pos.get("attention_temperature", False)
  return True


def check_applicable(config) -> None:
  """Refuses a field set away from its default that the run would ignore (and yet record in its
  config.json): a `model.position` field the chosen scheme does not read (e.g. a RoPE scaling on
  an ALiBi run; each scheme declares its fields, models/positions/<scheme>.py `config_fields`),
  an eval-time transform's field without that transform or eval.extension reading it, the
  attention temperature's form or layers without the temperature, a `data.position_sampler` field its sampler does not read, a
  `data.task` field without a task, `data.bos_anchor` with a task.

  Raises:
    ConfigError: naming the field, its value, what would ignore it and its default.
  """
  pos = config.model.position
  if pos.kind not in positions.REGISTRY:
    return  # positions.build names the unknown kind
  extension = config.eval.get("extension", "none")
  for name, (default, _) in positions.config_fields().items():
    value = pos.get(name, default)
    if value != default and _ignored_position_field(pos, name, extension):
      readers = [k for k, cls in positions.REGISTRY.items() if name in cls.config_fields]
      raise ConfigError(
          f"model.position.{name}={value!r} does not apply to model.position.kind={pos.kind!r}"
          + (f" (read by {', '.join(readers)})" if readers else " without the transform or "
             "temperature that reads it") + f"; leave it at its default {default!r}")
  sampler, base = config.data.position_sampler, _base_defaults()
  for name, kinds in _SAMPLER_FIELDS.items():
    default = base["data"]["position_sampler"][name]
    if sampler.get(name, default) != default and sampler.kind not in kinds:
      raise ConfigError(f"data.position_sampler.{name}={sampler[name]!r} is not read by "
                        f"data.position_sampler.kind={sampler.kind!r} (only by {', '.join(kinds)});"
                        f" leave it at its default {default!r}")
  task = config.data.get("task")
  if task is not None and task.get("name") and config.data.get("bos_anchor", False):
    raise ConfigError(f"data.bos_anchor=True applies to the text corpus, not to "
                      f"data.task.name={task.name!r} (its rows are whole examples); leave it False")
  if task is not None and not task.get("name"):
    for name, default in base["data"]["task"].items():
      if name != "name" and task.get(name, default) != default:
        raise ConfigError(f"data.task.{name}={task[name]!r} applies only to an algorithmic task, "
                          f"and data.task.name is '' (the text corpus): set data.task.name (one "
                          f"of {sorted(tasks.REGISTRY)}) or leave data.task.{name} at {default!r}")


@functools.cache
def _base_defaults() -> dict:
  return base_config.get_config().to_dict()  # the schema's defaults


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
    passkey_training.check_filler_room(config)  # the training prompts' filler and depth vary
    if config.eval.get("step", -1) != -1:
      raise ConfigError(f"eval.step={config.eval.step}: train.py evaluates its final checkpoint; "
                        "eval.step (-1, or a checkpoint step >= 0) is for python -m eval.run")
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
