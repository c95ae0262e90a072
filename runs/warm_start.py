"""Warm starts: `train.init_from=<workdir>[@<step>]` begins a run from another run's parameters.

Context-extension methods are defined as "pretrain at L, change the positions, continue training
briefly at the target length" (PI, Chen et al., arXiv 2306.15595, Sec. 3.1; YaRN, Peng et al.,
arXiv 2309.00071, Sec. 4.1; ABF, Xiong et al., arXiv 2309.16039, Sec. 3; PoSE, Zhu et al., arXiv
2309.10400; LongRoPE, Ding et al., arXiv 2402.13753). A warm start loads the parent's parameters
only (the params-only restore of `runs.checkpoint.restore_params`, as eval.run does) and starts
a fresh optimizer, step counter, learning-rate schedule and data iterator for the new config.
The new run's own checkpoints take precedence: once it has saved one, a rerun resumes from it as
any run does, and the parent is not read again (it may even be gone).

What may differ from the parent: anything that keeps every parameter's shape -- `data.*` (but
not `data.tokenizer`: the embeddings index the parent's token ids), `train.*`, `seed`, the
compute options (`model.dtype`, `attention_impl`, `attention_chunk`, ...), and the position
fields that add no parameter (`rope_theta` (ABF), `rope_scaling*`, `yarn_*`, `rotary_fraction`,
`kind` where both schemes have the same parameters, e.g. `rope` -> `none` for DroPE). The one
shape change allowed is the row count of a `learned` table (`model.position.max_len`, or
`data.train_len` when max_len = -1), filled by `train.init_from_learned`:

  "interpolate"  position interpolation for absolute positions (Chen et al., Eq. (4) applied to a
                 table): new row j = the parent's table at position j * n / n', linearly
                 interpolated between its integer rows and held at the last row beyond it
                 (n, n' = the parent's and the new row counts);
  "copy"         rows 0..n-1 are the parent's, rows n..n'-1 are freshly initialised
                 (normal(model.init_std), seed `seed`): extrapolation fine-tuning of the table.

Anything else that changes a parameter's shape or adds/removes one is refused before
compilation, with one line naming the field and the parent's value.

The parent's checkpoint is chosen and checked before anything compiles: a parent that a live
process still trains (its lock, runs/run_lock.py) is refused, since its `train.max_to_keep` could
delete the step under the warm start; without `@<step>` the newest readable step is used, a
damaged newer one named in a warning and left in place (runs/checkpoint.py `readable_step`, the
reading path of training resumes and eval.run); an unreadable `<workdir>@<step>` is refused.

`train.init_from=hf:<folder>` starts from a Hugging Face model folder instead (config.json and
safetensors weights; runs/hf_import.py): the parent's config is the one its config.json
describes, checked against the child's shapes and, from the safetensors headers, against the
weights; the record adds its hub name, revision and the weights' sha256.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from configs.errors import ConfigError, flatten
from models.spec import ModelSpec, model_spec
from runs import hf_import
from runs.checkpoint import committed_steps, readable_step, restore_params
from runs.distributed import chief_print
from runs.run_lock import holder
from configs.stored import CONFIG_FILE, load_run_config
from runs.workdir import config_hash



@dataclasses.dataclass(frozen=True)
class Parent:
  """The run a warm start begins from.

  Attributes:
    workdir: its folder (absolute path).
    step: the checkpoint step whose parameters are loaded.
    config: its experiment config (config.json on top of today's defaults).
    config_hash: the hash config.json recorded for it (identifies the parent's config).
    hf: for a Hugging Face parent ("hf:<folder>", runs/hf_import.py): its name, revision and
      weights' sha256 (`hf_import.record`); None for a run.
  """

  workdir: str
  step: int
  config: Any
  config_hash: str
  hf: dict | None = None

  def record(self) -> dict:
    """What the child's config.json records under "parent": {workdir, step, config_hash}, and
    "hf" for a Hugging Face parent."""
    out = {"workdir": self.workdir, "step": self.step, "config_hash": self.config_hash}
    return out if self.hf is None else {**out, "hf": self.hf}


def parse_init_from(value: str) -> tuple[str, int | None]:
  """`train.init_from` -> (workdir, step or None for the latest checkpoint).

  "w/base" -> ("w/base", None); "w/base@600" -> ("w/base", 600). An "@" followed by anything
  but digits is part of the path only if that path exists.

  Raises:
    ConfigError: not a string, or "@<step>" that is not a non-negative integer.
  """
  if not isinstance(value, str):
    raise ConfigError(f"train.init_from must be a run's workdir, optionally <workdir>@<step> "
                      f"(\"\" = train from scratch); got {value!r}")
  match = re.fullmatch(r"(.+)@(\d+)", value)
  if match and not os.path.isdir(value):
    return match.group(1), int(match.group(2))
  if "@" in value and not os.path.isdir(value):
    raise ConfigError(f"train.init_from={value!r}: the part after '@' must be a checkpoint step "
                      "(a non-negative integer), as in <workdir>@600")
  return value, None


def _shapes(spec: ModelSpec) -> dict[str, tuple]:
  leaves = jax.tree_util.tree_leaves_with_path(spec.abstract_params)
  return {jax.tree_util.keystr(path): tuple(x.shape) for path, x in leaves}


def _culprit(parent_config, config, mesh, parent_shapes: dict, table: str | None) -> tuple:
  """The model field (or data.train_len) whose new value alone changes the parent's parameter
  shapes (but for a learned `table`'s rows): (field, parent value, new value); the first
  changed field if no single one does; (None, None, None) if none changed."""
  old = flatten(parent_config.to_dict())
  new = flatten(config.to_dict())
  changed = [f for f in sorted(new) if f.startswith(("model.", "data.train_len"))
             and old.get(f) != new[f]]
  for field in changed:
    trial = ml_collections.ConfigDict(parent_config.to_dict())
    *path, leaf = field.split(".")
    node = trial
    for key in path:
      node = node[key]
    with node.ignore_type():
      node[leaf] = new[field]
    try:
      shapes = _shapes(model_spec(trial, mesh))
      if table in shapes and table in parent_shapes:
        shapes[table] = parent_shapes[table]
      if shapes != parent_shapes:
        return field, old.get(field), new[field]
    except (ConfigError, ValueError, TypeError):
      return field, old.get(field), new[field]
  return (changed[0], old.get(changed[0]), new[changed[0]]) if changed else (None, None, None)


def learned_table_path(config, spec: ModelSpec) -> str | None:
  """The parameter path of a `learned` scheme's table (`keystr` form), or None for other kinds."""
  if config.model.position.kind != "learned":
    return None
  return next(p for p in _shapes(spec) if p.endswith("['position']['table']"))


def check_shapes(parent: Parent, config, spec: ModelSpec, parent_spec: ModelSpec, mesh) -> None:
  """Refuses a child config whose parameters do not match the parent's (module docstring).

  Raises:
    ConfigError: naming the first model field set differently from the parent, and its value
      there: a parameter missing, added or reshaped; a learned table with fewer rows than the
      parent's.
  """
  old, new = _shapes(parent_spec), _shapes(spec)
  table = learned_table_path(config, spec)
  if table is not None and table in old:
    if new[table][0] < old[table][0]:
      raise ConfigError(f"train.init_from: model.position.max_len gives the learned table "
                        f"{new[table][0]} rows, fewer than the parent's {old[table][0]} "
                        f"(parent {parent.workdir}); use max_len >= {old[table][0]}")
    old[table] = new[table]  # its rows are filled by init_from_learned
  if old == new:
    return
  bad = sorted(set(old) ^ set(new)) or sorted(p for p in new if old[p] != new[p])
  field, was, now = _culprit(parent.config, config, mesh, _shapes(parent_spec), table)
  what = (f"it adds parameter {bad[0]}" if bad[0] not in old else
          f"it drops parameter {bad[0]}" if bad[0] not in new else
          f"parameter {bad[0]} has shape {old[bad[0]]} in the parent and {new[bad[0]]} here")
  if field is None:
    raise ConfigError(f"train.init_from={parent.workdir}: the model's parameters differ from the "
                      f"parent's ({what})")
  raise ConfigError(f"train.init_from: {field}={now!r} changes the model's parameters ({what}); "
                    f"the parent {parent.workdir} has {field}={was!r}")


def check_init_from(config, workdir: str, mesh) -> Parent | None:
  """The pre-flight of a warm start: the parent of `config`, checked, or None without one.

  When `workdir` already holds committed checkpoints, the run resumes from its own state: the
  parent recorded in its config.json is returned (not read again) and nothing is checked.

  Args:
    config: the new run's experiment config (reads train.init_from, train.init_from_learned).
    workdir: the new run's folder.
    mesh: the device mesh (the parent's shapes are built for it; nothing is allocated).

  Raises:
    ConfigError: train.init_from is not a training run's workdir (nor an "hf:<folder>" whose
      config.json and weights import: `_check_hf_parent`), is the new run's own workdir,
      is not the parent a resumed run's config.json records,
      has no checkpoint (or none at <step>, listing those it has), is held by a live process
      (`check_parent_idle`), has no readable checkpoint (or <step> is unreadable: damaged newer
      steps are named in a warning and left in place, runs/checkpoint.py `readable_step`), or
      the configs are incompatible (`check_shapes`; a different data.tokenizer).
  """
  value = config.train.get("init_from", "")
  if value == "":
    return None
  hf = hf_import.is_hf(value)
  parent_dir, step = (hf_import.HF_PREFIX + hf_import.folder_of(value), None) if hf else (
      parse_init_from(value))
  own = os.path.join(workdir, CONFIG_FILE)
  if os.path.isfile(own) and committed_steps(workdir):  # resumes its own state
    with open(own) as f:
      recorded = json.load(f).get("parent")
    if recorded is not None:
      if (parent_dir if hf else os.path.abspath(parent_dir)) != recorded["workdir"]:
        raise ConfigError(f"train.init_from={value!r}: this run's config.json records its parent "
                          f"as {recorded['workdir']} (it resumes from its own checkpoints); give "
                          "that train.init_from, or a new --workdir")
      return Parent(recorded["workdir"], recorded["step"], None, recorded["config_hash"],
                    recorded.get("hf"))
  if hf:
    return _check_hf_parent(value, config, mesh)
  if os.path.abspath(parent_dir) == os.path.abspath(workdir):
    raise ConfigError(f"train.init_from={value!r} is this run's own --workdir; name another run")
  if not os.path.isfile(os.path.join(parent_dir, CONFIG_FILE)):
    raise ConfigError(f"train.init_from={value!r}: {parent_dir} has no config.json (give the "
                      "workdir of a training run)")
  steps = committed_steps(parent_dir)
  if not steps:
    raise ConfigError(f"train.init_from={value!r}: {parent_dir} holds no checkpoint yet")
  if step is not None and step not in steps:
    raise ConfigError(f"train.init_from={value!r}: {parent_dir} has no checkpoint at step {step}; "
                      f"available steps: {steps}")
  check_parent_idle(value, parent_dir, steps[-1] if step is None else step)
  parent_config = load_run_config(parent_dir)
  with open(os.path.join(parent_dir, CONFIG_FILE)) as f:
    stored_hash = json.load(f).get("config_hash") or config_hash(parent_config)
  parent = Parent(os.path.abspath(parent_dir), steps[-1] if step is None else step,
                  parent_config, stored_hash)
  if parent_config.data.tokenizer != config.data.tokenizer:
    raise ConfigError(f"train.init_from: data.tokenizer={config.data.tokenizer!r} differs from the "
                      f"parent's {parent_config.data.tokenizer!r} (its embeddings index that "
                      "tokenizer's ids); keep the parent's tokenizer")
  parent_spec = model_spec(parent_config, mesh)
  check_shapes(parent, config, model_spec(config, mesh), parent_spec, mesh)
  chosen = readable_step(parent_dir, parent_spec, step, **_names(value, parent.workdir))
  return dataclasses.replace(parent, step=chosen)


def _names(value: str, parent_dir: str) -> dict:
  """How a warm start's messages name the parent and a step of it (the `<workdir>@<step>`
  syntax of train.init_from, not eval.run's --step)."""
  return {"source": f"train.init_from={value!r}",
          "step_name": lambda s: f"train.init_from={parent_dir}@{s}"}


def check_parent_idle(value: str, parent_dir: str, step: int) -> None:
  """Refuses a parent that a live process holds (runs/run_lock.py): its train.max_to_keep could
  delete the chosen step while the warm start reads it.

  Raises:
    ConfigError: one line naming the holder, the step, and what to do (wait, or copy the step).
  """
  try:
    who = holder(parent_dir)
  except OSError as e:
    raise ConfigError(f"train.init_from={value!r}: the lock file of {parent_dir} cannot be read "
                      f"({e.strerror}); make it readable") from e
  if who:
    raise ConfigError(
        f"train.init_from={value!r}: {parent_dir} is still being trained by {who[:120]}, whose "
        f"train.max_to_keep may delete step {step} while this run reads it; wait for it to "
        f"finish, or copy its config.json and checkpoints/{step}/ into a new folder <copy> (as "
        f"<copy>/checkpoints/{step}/) and give train.init_from=<copy>@{step}")


def _same_tokenizer(a: str, b: str) -> bool:
  """Whether two data.tokenizer values name the same tokenizer: equal strings, or two "hf:"
  tokenizers whose tokenizer.json files hold the same bytes."""
  if a == b:
    return True
  if not (hf_import.is_hf(a) and hf_import.is_hf(b)):
    return False
  from runs.files import file_sha256
  paths = [p if p.endswith(".json") else os.path.join(p, "tokenizer.json")
           for p in (a[len("hf:"):], b[len("hf:"):])]
  return all(os.path.isfile(p) for p in paths) and len({file_sha256(p) for p in paths}) == 1


def _check_hf_parent(value: str, config, mesh) -> Parent:
  """`check_init_from` of "hf:<folder>": the model config its config.json describes
  (runs/hf_import.py `parent_config`), the child's shapes against it, the tokenizer, and the
  weights' names, shapes and dtypes from their headers; nothing is read or compiled.

  Raises:
    ConfigError: as `hf_import.parent_config` / `check_weights`; a child whose parameters
      differ (`check_shapes`, naming the field); another tokenizer than the folder's.
  """
  try:
    parent_config = hf_import.parent_config(value)
  except ConfigError as e:
    raise ConfigError(f"train.init_from: {e}") from e
  folder = hf_import.HF_PREFIX + hf_import.folder_of(value)
  tokenizer = parent_config.data.tokenizer
  if hf_import.is_hf(tokenizer) and not _same_tokenizer(tokenizer, config.data.tokenizer):
    raise ConfigError(f"train.init_from={value}: data.tokenizer={config.data.tokenizer!r} is not "
                      f"the model's tokenizer; set data.tokenizer={tokenizer!r}")
  parent = Parent(folder, 0, parent_config, config_hash(parent_config))
  check_shapes(parent, config, model_spec(config, mesh), model_spec(parent_config, mesh), mesh)
  try:
    hf_import.check_weights(value, parent_config)
  except ConfigError as e:
    raise ConfigError(f"train.init_from: {e}") from e
  return dataclasses.replace(parent, hf=hf_import.record(value, parent_config)["hf"])


def interpolate_table(table: jax.Array, rows: int) -> jax.Array:
  """A learned position table resized to `rows` by position interpolation (module docstring).

  Args:
    table: float [n, d_model], the parent's rows.
    rows: n' >= n.

  Returns:
    float [n', d_model] (table's dtype): row j = table at position j * n / n', linear between the
    neighbouring integer rows, the last row beyond n - 1; rows = n gives the table unchanged.
  """
  n = table.shape[0]
  x = np.arange(rows, dtype=np.float64) * n / rows
  lo = np.minimum(np.floor(x).astype(np.int32), n - 1)
  hi = np.minimum(lo + 1, n - 1)
  w = jnp.asarray((x - lo)[:, None], jnp.float32)
  t = table.astype(jnp.float32)
  return ((1.0 - w) * t[lo] + w * t[hi]).astype(table.dtype)


def load_params(parent: Parent, config, spec: ModelSpec, mesh):
  """The parent's parameters at `parent.step`, in the new run's shapes and shardings.

  Args:
    parent: from `check_init_from`.
    config: the new run's config.
    spec: the new run's ModelSpec.
    mesh: the device mesh.

  Returns:
    Pure dict of arrays like `spec.abstract_params` (a learned table resized by
    train.init_from_learned, on device; every other parameter exactly the parent's).

  Raises:
    ConfigError: the checkpoint cannot be restored into the parent's model.
  """
  if parent.hf is not None:  # a Hugging Face folder: its safetensors weights
    chief_print(f"warm start: the weights of {parent.workdir} ({parent.hf['name']}, revision "
                f"{parent.hf['revision'] or 'unknown'}; fresh optimizer, schedule and data)")
    return hf_import.load_params(parent.workdir, parent.config, spec)
  parent_spec = model_spec(parent.config, mesh)
  params, _ = restore_params(parent.workdir, parent.config, parent_spec, parent.step,
                             checked=True, **_names(parent.workdir, parent.workdir))
  chief_print(f"warm start: the parameters of {parent.workdir} at step {parent.step} "
              "(fresh optimizer, schedule and data)")
  table = learned_table_path(config, spec)
  if table is None or _shapes(parent_spec)[table] == _shapes(spec)[table]:
    return params
  rows = _shapes(spec)[table][0]
  interpolate = config.train.get("init_from_learned", "interpolate") == "interpolate"

  def resize(old):
    if interpolate:
      return interpolate_table(old, rows)
    fresh = config.model.init_std * jax.random.normal(
        jax.random.key(config.seed), (rows - old.shape[0], old.shape[1]), jnp.float32)
    return jnp.concatenate([old, fresh.astype(old.dtype)])

  params["position"]["table"] = jax.jit(
      resize, out_shardings=spec.param_shardings["position"]["table"])(params["position"]["table"])
  return params
