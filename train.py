"""Trains a decoder with a pluggable positional scheme, then evaluates perplexity vs length.

  python train.py --config=configs/alibi_tiny.py --workdir=/tmp/alibi_tiny \
      [--config.model.position.kind=rope]

The whole run, top to bottom: validate the config (before any compilation) -> mesh -> data ->
model and optimizer state, sharded by logical axis rules -> resume from the latest checkpoint in
`workdir` -> one jitted train step per batch -> metrics, validation, checkpoints -> perplexity
vs length. What lands in `workdir`: config.json, metrics.jsonl, tensorboard/, checkpoints/,
eval/ppl_vs_length.{json,png}. With `data.task.name` set (an algorithmic task, data/tasks/), the
model trains on the task's answer tokens instead of text and ends with eval/algorithmic.{json,png}
(accuracy per instance size, eval/algorithmic.py) instead of perplexity vs length.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from typing import Any

import grain
import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from absl import app, flags, logging
from flax import nnx
from ml_collections import config_flags
from tqdm import tqdm

from configs import base as base_config
from configs.validate import (ConfigError, eval_extensions, eval_lengths, eval_suites, parse_flags,
                              validate)
from data import corpora, passkey, pipeline, position_samplers
from data.tasks import dataset as task_dataset
from data.tokenizers import get_tokenizer
from eval import algorithmic, attention_stats, needle, perplexity, plots
from eval.files import atomic_write, write_json
from models import extensions, sharding
from models.decoder import Decoder
from models.positions import Dims

# ---------------------------------------------------------------------------- setup helpers


def chief_print(*args, **kwargs) -> None:
  """`print` on process 0 only: a pod of N hosts reports a run once, not N times.

  Args: as `print` (`file=sys.stderr` included).
  """
  if jax.process_index() == 0:
    print(*args, **kwargs)


def token_unit(config) -> str:
  """What one token of the run is: "byte" (data.tokenizer='byte') or "token" (SentencePiece),
  the unit of its losses (nats per ...) in reports."""
  return "byte" if config.data.tokenizer == "byte" else "token"


def check_workdir(workdir: str) -> None:
  """Checks that `workdir` can be used, without creating it (`make_workdir` does, once every
  other check has passed, so a refused run leaves nothing behind).

  Raises:
    ConfigError: `workdir` is empty, a URL (gs://...), a file, or neither it nor (when it does not
      exist yet) its nearest existing parent is a writable directory.
  """
  if not workdir:
    raise ConfigError("--workdir is required")
  if "://" in workdir:  # config.json, metrics and eval files are written with local file I/O
    raise ConfigError(f"--workdir={workdir}: give a path every host sees (NFS, or the bucket "
                      "mounted with gcsfuse), not a URL")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(f"--workdir={workdir} is a file, not a directory")
  existing = os.path.abspath(workdir)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ConfigError(f"--workdir={workdir} cannot be created: {existing} is a file")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ConfigError(f"--workdir={workdir} is not writable" + (
        "" if existing == os.path.abspath(workdir) else f" (cannot create it in {existing})"))


def make_workdir(workdir: str) -> None:
  """Creates `workdir` (after `check_workdir`).

  Raises:
    ConfigError: the directory cannot be created.
  """
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise ConfigError(f"--workdir={workdir} cannot be created: {e.strerror}") from e


def config_hash(config) -> str:
  """First 12 hex digits of the sha256 of the config's canonical JSON (identifies a run)."""
  return hashlib.sha256(config.to_json(sort_keys=True).encode()).hexdigest()[:12]


def load_splits(config) -> dict[str, list[corpora.Document]]:
  """Loads the configured corpus and splits it by document (see data.corpora.split_documents).

  With `data.source = "array_record"` the corpus was split when prepared (python -m
  data.prepare): held-out splits come as TokenizedDocuments, the training split as a
  PreparedSplit read from its shards on demand (data.corpora.load_prepared_splits).
  """
  d = config.data
  if d.source == "array_record":
    return corpora.load_prepared_splits(d.array_record_dir, get_tokenizer(d.tokenizer),
                                        d.validation_fraction, d.test_fraction)
  docs = corpora.load_documents(d.source, d.text_glob, d.cache_dir or None)
  return corpora.split_documents(docs, d.validation_fraction, d.test_fraction)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The model's static structure and shardings, built without allocating parameters.

  Attributes:
    graphdef: NNX graph definition (static structure) of the Decoder.
    abstract_params: pure dict of ShapeDtypeStructs carrying their target shardings.
    param_shardings: pure dict of NamedShardings (same structure).
    max_position: positions the scheme can represent (None = unbounded).
    max_position_hint: how to evaluate beyond max_position (the scheme's advice).
    num_params: total parameter count.
  """

  graphdef: nnx.GraphDef
  abstract_params: Any
  param_shardings: Any
  max_position: int | None
  max_position_hint: str
  num_params: int


def model_spec(config, mesh) -> ModelSpec:
  """Traces the Decoder abstractly (`nnx.eval_shape`) and derives its parameter shardings."""
  abstract_model = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract_model)
  shardings = sharding.param_shardings(state, mesh)
  pure = nnx.to_pure_dict(state)
  abstract = abstract_with_shardings(pure, shardings)
  num_params = sum(math.prod(x.shape) for x in jax.tree.leaves(pure))
  scheme = abstract_model.position
  return ModelSpec(graphdef, abstract, shardings, scheme.max_position, scheme.max_position_hint,
                   num_params)


def init_params(config, spec: ModelSpec):
  """Initialises parameters directly into their shardings (seed `config.seed`)."""
  def init():
    return nnx.to_pure_dict(nnx.state(Decoder(config, rngs=nnx.Rngs(config.seed))))
  return jax.jit(init, out_shardings=spec.param_shardings)()


def make_optimizer(train_config) -> optax.GradientTransformation:
  """AdamW (Loshchilov & Hutter, arXiv 1711.05101) with linear warmup + cosine decay.

  The learning rate rises linearly from 0 to `learning_rate` over `warmup_steps`, then follows a
  cosine to `learning_rate * final_lr_ratio` at `num_steps`. Gradients are clipped to global norm
  `grad_clip` (if > 0); weight decay applies to matrices only (ndim >= 2: no norms, no biases).
  """
  t = train_config
  adamw = optax.adamw(make_lr_schedule(t), b1=t.b1, b2=t.b2, weight_decay=t.weight_decay,
                      mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params))
  if t.grad_clip > 0:
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), adamw)
  return adamw


def state_shardings(tx, spec: ModelSpec, mesh):
  """Shardings of the train state {params, opt_state, step}: optimizer moments like parameters."""
  abstract_opt = jax.eval_shape(tx.init, spec.abstract_params)
  opt_shardings = optax.tree_map_params(
      tx, lambda _, s: s, abstract_opt, spec.param_shardings,
      transform_non_params=lambda _: sharding.replicated(mesh))
  return {"params": spec.param_shardings, "opt_state": opt_shardings,
          "step": sharding.replicated(mesh)}


# ---------------------------------------------------------------------------- step functions


def loss_sum(params, graphdef, batch, pad_id: int):
  """Summed weighted next-token NLL (nats), and the summed weights (tokens trained on).

  batch: int32 [batch, seq] inputs, targets, positions, segment_ids, and optionally float32
  [batch, seq] weights (algorithmic tasks: 1 at answer targets only, data/tasks/dataset.py);
  without weights, every non-PAD target has weight 1 (text).
  """
  model = nnx.merge(graphdef, params)
  logits = model(batch["inputs"], batch["positions"], batch["segment_ids"])
  if "weights" in batch:
    weights = batch["weights"].astype(jnp.float32)
  else:
    weights = (batch["targets"] != pad_id).astype(jnp.float32)
  return (perplexity.token_nll(logits, batch["targets"]) * weights).sum(), weights.sum()


def train_step(state, batch, *, graphdef, tx, pad_id: int, grad_accum_steps: int = 1,
               skip_nonfinite: bool = False):
  """One optimizer step: state {params, opt_state, step} -> new state, scalar metrics.

  Metrics: loss (mean NLL, nats per token), grad_norm, nonfinite (1.0 when the loss or the
  gradient norm is NaN/inf, else 0.0). With `skip_nonfinite` such a step leaves params and
  opt_state unchanged (the step counter still advances past the batch).

  The loss is the token-weighted mean NLL over the whole batch. With grad_accum_steps > 1 the
  batch is processed as that many microbatches (rows i, i + n, i + 2n, ... form microbatch i, so
  each device's shard contributes to every microbatch) and their summed gradients are divided by
  the batch's token count: the same update as one pass, with a fraction of the activation memory.
  """
  grad_fn = jax.value_and_grad(loss_sum, has_aux=True)
  params = state["params"]
  if grad_accum_steps == 1:
    (total, count), grads = grad_fn(params, graphdef, batch, pad_id)
  else:
    micro = jax.tree.map(
        lambda x: x.reshape(x.shape[0] // grad_accum_steps, grad_accum_steps, *x.shape[1:])
        .swapaxes(0, 1), batch)

    def accumulate(carry, microbatch):
      (s, c), g = grad_fn(params, graphdef, microbatch, pad_id)
      return jax.tree.map(jnp.add, carry, (s, c, g)), None

    zeros = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32),
             jax.tree.map(jnp.zeros_like, params))
    (total, count, grads), _ = jax.lax.scan(accumulate, zeros, micro)
  count = jnp.maximum(count, 1.0)
  grads = jax.tree.map(lambda g: g / count, grads)
  updates, opt_state = tx.update(grads, state["opt_state"], params)
  new_params = optax.apply_updates(params, updates)
  loss, grad_norm = total / count, optax.tree.norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  if skip_nonfinite:
    keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
    new_params = jax.tree.map(keep, new_params, params)
    opt_state = jax.tree.map(keep, opt_state, state["opt_state"])
  metrics = {"loss": loss, "grad_norm": grad_norm,
             "nonfinite": jnp.logical_not(finite).astype(jnp.float32)}
  return {"params": new_params, "opt_state": opt_state, "step": state["step"] + 1}, metrics


@jax.jit
def _note_nonfinite(first: jax.Array, skipped: jax.Array, nonfinite: jax.Array, step: jax.Array):
  """(first non-finite step so far or -1, non-finite steps so far) after `step` (int32 scalars;
  on device, so the loop never waits for the host)."""
  bad = nonfinite > 0
  return jnp.where((first < 0) & bad, step, first), skipped + bad.astype(jnp.int32)


class NonFiniteLossError(FloatingPointError):
  """Training produced a NaN/inf loss or gradient (train.skip_nonfinite_batches=False)."""


def restore_latest(mngr: ocp.CheckpointManager, workdir: str, restore) -> tuple[Any, int | None]:
  """Restores the newest checkpoint that can be read, falling back past unreadable ones.

  A checkpoint that fails to restore (files truncated, corrupted or missing after it was
  committed) is moved, not deleted, to `<workdir>/checkpoints_unreadable/<step>` so that training
  can write that step again, and a warning names it and the step resumed from. Orbax commits a
  checkpoint by renaming its temporary folder, so a save cut by a kill is never a step here.

  Args:
    mngr: the run's checkpoint manager.
    workdir: the run's directory.
    restore: step -> restored checkpoint (raises if unreadable).

  Returns:
    (restored, step), or (None, None) when there is no checkpoint.

  Raises:
    ConfigError: checkpoints exist but none can be restored (all are left in place).
  """
  steps = sorted(mngr.all_steps(), reverse=True)
  failures = []
  for step in steps:
    try:
      restored = restore(step)
    except Exception as e:  # noqa: BLE001 -- any reader error means "this step is unreadable"
      failures.append((step, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
      continue
    if failures:
      moved = os.path.join(workdir, "checkpoints_unreadable")
      if jax.process_index() == 0:
        os.makedirs(moved, exist_ok=True)
        for bad, _ in failures:
          target = os.path.join(moved, str(bad))
          if os.path.exists(target):
            target += f".{int(time.time())}"
          shutil.move(os.path.join(mngr.directory, str(bad)), target)
      if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("moved unreadable checkpoints")
      for bad, error in failures:
        chief_print(f"warning: the checkpoint at step {bad} could not be restored ({error}); "
                    f"resuming from the checkpoint at step {step}; step {bad} was moved to "
                    f"{moved}/",
                    file=sys.stderr)
    return restored, step
  if failures:
    raise ConfigError(f"no checkpoint in {mngr.directory} can be restored: "
                      + "; ".join(f"step {s}: {e}" for s, e in failures))
  return None, None


def initial_state(config, spec: ModelSpec, tx, shardings) -> dict:
  """A fresh training state {params, opt_state, step = 0} in `shardings` (seed config.seed)."""
  params = init_params(config, spec)
  opt_state = jax.jit(tx.init, out_shardings=shardings["opt_state"])(params)
  return {"params": params, "opt_state": opt_state,
          "step": jax.device_put(jnp.zeros((), jnp.int32), shardings["step"])}


def make_step_fn(config, spec: ModelSpec, tx, shardings, mesh, pad_id: int):
  """The jitted `train_step` of `config`: (state, batch) -> (state, metrics), state donated,
  batch sharded over ("data", "fsdp"), metrics replicated."""
  t = config.train
  return jax.jit(
      functools.partial(train_step, graphdef=spec.graphdef, tx=tx, pad_id=pad_id,
                        grad_accum_steps=t.grad_accum_steps,
                        skip_nonfinite=t.skip_nonfinite_batches),
      in_shardings=(shardings, sharding.batch_sharding(mesh)),
      out_shardings=(shardings, sharding.replicated(mesh)), donate_argnums=0)


# ---------------------------------------------------------------------------- FLOPs and MFU


def train_flops_per_token(config) -> float:
  """Analytic training FLOPs per token (forward + backward = 3 x forward).

  6 x (parameters in matmuls: q/k/v/o, MLP, output head) plus attention scores and values:
  forward 4 * T * H * D per layer for full attention, counted as half (2 * T * H * D) because
  attention is causal, times 3 for the backward pass (the PaLM convention, Chowdhery et al.,
  arXiv 2204.02311, Appendix B, with the causal half). Embedding lookups count 0.
  """
  m = config.model
  dims = Dims.from_config(config)
  attn_width = m.num_heads * dims.head_dim
  mlp = (3 if m.mlp_activation == "swiglu" else 2) * m.d_model * m.mlp_dim
  matmul_params = m.num_layers * (4 * m.d_model * attn_width + mlp) + m.d_model * m.vocab_size
  attention = m.num_layers * 2 * config.data.train_len * attn_width
  return 6.0 * matmul_params + 3.0 * attention


def measure_peak_flops(n: int = 2048, repeats: int = 5) -> float:
  """Measured dense float32 matmul rate of one device, FLOP/s (best of `repeats`)."""
  x = jax.device_put(jnp.ones((n, n), jnp.float32), jax.local_devices()[0])
  f = jax.jit(lambda a: a @ a)
  f(x).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    f(x).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best


# ---------------------------------------------------------------------------- checkpoints


def checkpoint_manager(workdir: str, config) -> ocp.CheckpointManager:
  """Orbax manager for `workdir/checkpoints` (keeps `train.max_to_keep`; async saves)."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(max_to_keep=config.train.max_to_keep, create=True))


def abstract_with_shardings(shapes, shardings):
  """ShapeDtypeStructs that carry the target shardings (what `StandardRestore` restores onto)."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings)


def restore_params(workdir: str, config, spec: ModelSpec, step: int | None = None):
  """Restores only the parameters of a checkpoint in `workdir` (latest if `step` is None).

  Returns:
    (params pure dict with the spec's shardings, the step restored).

  Raises:
    ConfigError: no checkpoint in workdir, no checkpoint at `step` (listing those there), or one
      whose shapes differ from the config's model.
  """
  mngr = checkpoint_manager(workdir, config)
  step = mngr.latest_step() if step is None else step
  if step is None:
    raise ConfigError(f"--workdir={workdir} holds no checkpoint")
  if step not in mngr.all_steps():
    available = sorted(mngr.all_steps())
    mngr.close()
    raise ConfigError(f"--step={step}: {workdir} has no such checkpoint; available steps: {available}")
  target = {"params": spec.abstract_params}
  try:
    restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=True)))
  except (ValueError, KeyError) as e:
    raise ConfigError(f"checkpoint {step} in {workdir} does not match the configured model: {e}") from e
  finally:
    mngr.close()
  return restored["state"]["params"], step


# ---------------------------------------------------------------------------- the run

# Held-out passkey documents whose answer digits are scored at each evaluation of a passkey run
# (data/passkey.py answer_windows): 32 x 5 digits, a few milliseconds of compute.
PASSKEY_ANSWER_DOCUMENTS = 32


def load_run_config(workdir: str):
  """The config a training run wrote to `<workdir>/config.json`, on top of today's defaults.

  Fields added to configs/base.py since the run was trained keep their defaults, so old runs
  stay loadable; JSON lists become the config's tuples again.

  Raises:
    ConfigError: workdir or its config.json is missing or unreadable.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    raise ConfigError(f"--workdir={workdir} has no config.json (is it a training run's workdir?)")
  try:
    with open(path) as f:
      stored = json.load(f)["config"]
  except (json.JSONDecodeError, KeyError) as e:
    raise ConfigError(f"{path} is not a config written by train.py: {e}") from e

  def as_tuples(x):
    if isinstance(x, dict):
      return {k: as_tuples(v) for k, v in x.items()}
    return tuple(as_tuples(v) for v in x) if isinstance(x, list) else x

  config = base_config.get_config()
  config.update(as_tuples(stored))
  return config


def check_same_model(workdir: str, config) -> None:
  """Refuses to resume a workdir whose run had another model or data layout.

  Raises:
    ConfigError: `workdir/config.json` exists and its `model` section, `data.train_len` or
      `data.tokenizer` differ from `config`'s (the checkpoint could not be restored); names the
      first differing field.
  """
  if not os.path.exists(os.path.join(workdir, "config.json")):
    return
  old = json.loads(load_run_config(workdir).to_json())
  new = json.loads(config.to_json())
  pairs = [(f"model.{k}", old["model"].get(k), v) for k, v in new["model"].items()]
  pairs += [(f"data.{k}", old["data"].get(k), new["data"][k]) for k in ("train_len", "tokenizer")]
  for field, was, now in pairs:
    if was != now:
      raise ConfigError(f"--workdir={workdir} holds a run with {field}={was!r}, not {now!r}; "
                        "use a new --workdir (or the old value) to resume")


def truncate_metrics(path: str, step: int) -> None:
  """Drops metrics.jsonl lines logged after `step` (they are recomputed after a resume)."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  atomic_write(path, lambda tmp: open(tmp, "w").writelines(kept))


def skipped_lengths(config, spec: ModelSpec) -> tuple[list[int], str]:
  """Configured eval lengths the scheme cannot represent (e.g. `learned` beyond its table),
  and the reason recorded for them in the results."""
  skip = perplexity.unrepresentable(eval_lengths(config), spec.max_position)
  reason = (f"model.position.kind={config.model.position.kind!r} represents positions < "
            f"{spec.max_position} only ({spec.max_position_hint})")
  return skip, reason


def evaluate_ppl(config, workdir: str, spec: ModelSpec, mesh, params, step: int, docs,
                 tokenizer, extra: dict | None = None, suffix: str = "") -> dict:
  """Runs perplexity vs length and writes workdir/eval/ppl_vs_length.{json,png} and, from the
  same forward passes, workdir/eval/loss_by_position.{json,png}.

  The protocol is `eval.protocol` / `eval.stride` (eval/perplexity.py; Press et al., arXiv
  2108.12409, Section 4). Lengths the scheme cannot represent are recorded as skipped (see
  `skipped_lengths`). `suffix` is appended to the file names (e.g. "_yarn_x4" for an eval-time
  extension), and then `perplexity.protocol_suffix` (e.g. "_sliding_s64"), so results of several
  extensions and protocols sit side by side.

  Returns:
    The ppl_vs_length result dict (as written to the JSON).

  Raises:
    ConfigError: bad eval.protocol / eval.stride, before compilation.
  """
  e = config.eval
  protocol = e.get("protocol", "non_overlapping")  # absent in configs written before the field
  stride = e.get("stride", 0)
  position_bins = e.get("position_bins", 32)
  lengths = eval_lengths(config)
  skip, reason = skipped_lengths(config, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  split_docs = docs[e.split]
  rows = perplexity.ppl_vs_length(
      nll_fn, params, split_docs, tokenizer, lengths,
      max_tokens_per_length=e.max_tokens_per_length, batch_tokens=e.batch_tokens, mesh=mesh,
      skip=skip, skip_reason=reason, protocol=protocol, stride=stride, position_bins=position_bins)
  by_position = []
  for row in rows:
    row["multiplier"] = row["length"] / config.data.train_len
    by_position.append({k: row[k] for k in ("length", "multiplier", "stride", "tokens", "nll")}
                       | {"bins": row.pop("loss_by_position")})
  common = {
      "protocol": protocol, "stride": stride, "windows_start": "document_start",
      "scheme": config.model.position.kind, "step": int(step), "config_hash": config_hash(config),
      **extensions.extension_header(config),
      "train_len": config.data.train_len, "split": e.split, "documents": len(split_docs),
      "max_tokens_per_length": e.max_tokens_per_length,
      "tokens_scored": sum(r["tokens"] for r in rows), "unit": f"nats per {token_unit(config)}"}
  result = {
      "suite": "ppl_vs_length", **common,
      # The splits held in memory: a prepared corpus's training split (read lazily from its
      # shards) would be read and decoded whole, at pod scale for hours, so it is left out.
      "unigram_entropy_nats": perplexity.unigram_entropy(
          [d for split in docs.values() if not isinstance(split, corpora.PreparedSplit)
           for d in split]),
      "rows": rows, **(extra or {})}
  positions = {
      "suite": "loss_by_position", **common, "position_bins": position_bins,
      "binning": "position 0 alone, then log-spaced (perplexity.position_bin_edges); "
                 "end exclusive; a token at position p has p + 1 tokens of context",
      "rows": by_position}
  suffix += perplexity.protocol_suffix(protocol, stride)
  if jax.process_index() == 0:
    out = os.path.join(workdir, "eval")
    write_json(os.path.join(out, f"ppl_vs_length{suffix}.json"), result)
    plots.plot_ppl_vs_length(result, os.path.join(out, f"ppl_vs_length{suffix}.png"))
    write_json(os.path.join(out, f"loss_by_position{suffix}.json"), positions)
    plots.plot_loss_by_position(positions, os.path.join(out, f"loss_by_position{suffix}.png"))
  return result


def train_and_evaluate(config, workdir: str, devices=None) -> dict:
  """Runs (or resumes) the training run of `config` in `workdir`, then evaluates it.

  Args:
    config: experiment ConfigDict (configs/base.py).
    workdir: output directory (created; resumed from if it holds checkpoints).
    devices: devices of the mesh (default: all, `jax.devices()`).

  Returns:
    The final metrics: step, final validation loss (nats per byte token; per answer token for a
    task) and the ppl_vs_length result (for a task: the algorithmic result instead).

  Raises:
    ConfigError: bad config field, workdir, mesh or data, before anything is compiled.
  """
  # --- validate everything that can be validated before data or compilation
  devices = jax.devices() if devices is None else list(devices)
  validate(config, len(devices))
  check_workdir(workdir)
  mesh = sharding.make_mesh(config.mesh, devices)
  tokenizer = get_tokenizer(config.data.tokenizer)
  task = config.data.task.name  # "" = text; else an algorithmic task (data/tasks/)
  docs = {} if task else load_splits(config)
  spec = model_spec(config, mesh)
  # Suites run at the end on the model as trained (eval.run adds eval-time extensions); a task
  # run has the algorithmic suite only.
  suites = ["algorithmic"] if task else eval_suites(config)
  asked = eval_suites(config)
  if "algorithmic" in asked and not task:
    raise ConfigError("eval.suites='algorithmic' needs an algorithmic task (data.task.name, "
                      "e.g. --config=configs/task_copy.py); this run trains on text")
  notes = []
  if task and asked != ["algorithmic"]:
    notes.append(f"eval.suites={config.eval.suites!r}: a task run (data.task.name={task!r}) "
                 "evaluates the algorithmic suite only")
  for extension in eval_extensions(config):  # must fit the scheme: eval.run reads config.json
    extensions.apply_extension(config, extension, config.eval.factor,
                               config.eval.get("window", -1))
  if eval_extensions(config) != ["none"]:
    notes.append(f"eval.extension={config.eval.extension!r}: train.py evaluates the model as "
                 "trained; run eval-time extensions with python -m eval.run --workdir=... "
                 f"--config.eval.extension={config.eval.extension}")
  for note in notes:
    chief_print(f"warning: not applied: {note}")
  if not task:
    perplexity.check_lengths(eval_lengths(config), None, config.model.position.kind)
    skip, reason = skipped_lengths(config, spec)
    if skip:
      chief_print(f"warning: eval lengths {skip} will be skipped: {reason}")
    for suite in ("passkey", "needle"):
      if suite in suites:
        needle.check_suite(config, suite, docs, tokenizer)
    if "attention" in suites:
      attention_stats.check_settings(config)
  check_same_model(workdir, config)
  make_workdir(workdir)  # every check above has passed
  tx = make_optimizer(config.train)
  t = config.train
  is_chief = jax.process_index() == 0
  if is_chief:
    resolved = {"config": config.to_dict(), "config_hash": config_hash(config),
                "num_params": spec.num_params, "mesh": dict(mesh.shape),
                "num_devices": len(devices), "eval_lengths": eval_lengths(config),
                "split_documents": {k: [d.name for d in v] for k, v in docs.items()  # a prepared
                                    if not isinstance(v, corpora.PreparedSplit)}}  # split: *.names.jsonl
    write_json(os.path.join(workdir, "config.json"), resolved)
    data = (f"task {task!r}, sizes {config.data.task.train_min_size}.."
            f"{config.data.task.train_max_size}" if task else
            f"{len(docs['train'])} train / {len(docs['validation'])} validation / "
            f"{len(docs['test'])} test documents")
    print(f"model: {spec.num_params:,} parameters, scheme {config.model.position.kind!r}, "
          f"mesh {dict(mesh.shape)}, data: {data}")

  # --- data (each process reads its own share of the windows: pipeline.train_dataset)
  if config.data.batch_size % jax.process_count():
    raise ConfigError(f"data.batch_size={config.data.batch_size} must be divisible by the "
                      f"{jax.process_count()} processes (each feeds an equal share)")
  process_batch = config.data.batch_size // jax.process_count()
  sampler = position_samplers.make_sampler(config.data.position_sampler, config.data.train_len)
  if task:  # task rows (answer-only weights); validation: held-out examples of the train sizes
    train_iter = iter(task_dataset.train_dataset(
        config.data.task, tokenizer, train_len=config.data.train_len, batch_size=process_batch,
        process_index=jax.process_index(), sampler=sampler))
    val_windows = task_dataset.validation_rows(config.data.task, tokenizer, config.data.train_len)
  else:
    train_docs = (docs["train"] if isinstance(docs["train"], corpora.PreparedSplit)  # lazy shards
                  else passkey.training_documents(docs["train"], config.data, tokenizer))
    train_iter = iter(pipeline.train_dataset(  # + passkey documents if data.passkey.fraction > 0
        train_docs, tokenizer,
        train_len=config.data.train_len, batch_size=process_batch,
        seed=config.data.shuffle_seed, process_index=jax.process_index(),
        process_count=jax.process_count(), sampler=sampler,
        prefetch=config.data.get("prefetch_batches", 4)))
    val_windows = pipeline.document_windows(
        docs["validation"], tokenizer, config.data.train_len,
        -(-t.eval_tokens // max(1, len(docs["validation"]))))
  if len(val_windows["inputs"]) == 0:
    raise ConfigError(f"no validation document is longer than data.train_len={config.data.train_len} "
                      "tokens; raise data.validation_fraction or shorten train_len")
  answer_windows = None  # passkey training: is the lookup learned yet? (loss on the key's digits)
  if not task and config.data.passkey.fraction > 0:
    p = config.data.passkey
    answer_windows = passkey.answer_windows(
        tokenizer, train_len=config.data.train_len, preamble=p.preamble,
        key_digits=p.key_digits, count=PASSKEY_ANSWER_DOCUMENTS, seed=config.eval.passkey.seed)

  # --- state: resume from the latest checkpoint, else initialise
  shardings = state_shardings(tx, spec, mesh)
  mngr = checkpoint_manager(workdir, config)
  abstract = abstract_with_shardings(
      {"params": spec.abstract_params, "opt_state": jax.eval_shape(tx.init, spec.abstract_params),
       "step": jax.ShapeDtypeStruct((), jnp.int32)}, shardings)
  restored, latest = restore_latest(mngr, workdir, lambda s: mngr.restore(
      s, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                 data=grain.checkpoint.CheckpointRestore(train_iter))))
  if latest is not None:
    mngr.close()
    mngr = checkpoint_manager(workdir, config)  # sees the steps moved aside, if any
    state = restored["state"]
    chief_print(f"resumed from the checkpoint at step {latest} in {workdir}")
    if is_chief:
      truncate_metrics(os.path.join(workdir, "metrics.jsonl"), latest)
  else:
    state = initial_state(config, spec, tx, shardings)
  step = int(state["step"])

  def save(step: int):
    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(train_iter)))

  # --- compiled functions
  batch_sharding = sharding.batch_sharding(mesh)
  step_fn = make_step_fn(config, spec, tx, shardings, mesh, tokenizer.pad_id)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  eval_batch = max(1, config.eval.batch_tokens // config.data.train_len)

  def validation_loss(params) -> float:
    total, count = perplexity.score_windows(nll_fn, params, val_windows, batch_size=eval_batch,
                                            mesh=mesh)
    return total / count

  def validation_record(step: int, params) -> dict:
    val_loss = validation_loss(params)
    record = {"step": step, "val_loss": val_loss, "val_bits_per_byte": val_loss / math.log(2)}
    if answer_windows is not None:
      total, count = perplexity.score_windows(nll_fn, params, answer_windows,
                                              batch_size=eval_batch, mesh=mesh)
      record["val_passkey_answer_nll"] = total / count
    log(record)
    return record

  flops_per_step = train_flops_per_token(config) * config.data.batch_size * config.data.train_len
  peak = (t.peak_flops_per_device or measure_peak_flops()) * len(devices)
  schedule_lr = make_lr_schedule(t)
  if is_chief:
    from tensorboardX import SummaryWriter
    writer = SummaryWriter(os.path.join(workdir, "tensorboard"))
    metrics_file = open(os.path.join(workdir, "metrics.jsonl"), "a")

  def log(record: dict):
    if is_chief:
      metrics_file.write(json.dumps(record) + "\n")
      metrics_file.flush()
      for k, v in record.items():
        if k != "step" and v is not None:
          writer.add_scalar(k, v, record["step"])
      writer.flush()

  def close_outputs():
    if is_chief:
      writer.close()
      metrics_file.close()

  # --- the loop
  last_step = t.num_steps if t.stop_after_step < 0 else min(t.num_steps, t.stop_after_step)
  bar = tqdm(total=t.num_steps, initial=step, desc="train", disable=not is_chief,
             dynamic_ncols=True)
  interval_start, interval_steps = time.perf_counter(), 0
  first_bad = jnp.asarray(-1, jnp.int32)  # first non-finite step (device scalar), -1 = none
  skipped = jnp.asarray(0, jnp.int32)  # non-finite steps (skipped when skip_nonfinite_batches)

  def check_finite(at_step: int) -> int:
    """Non-finite steps so far; raises NonFiniteLossError unless they are skipped."""
    bad, count = (int(x) for x in jax.device_get((first_bad, skipped)))
    if bad >= 0 and not t.skip_nonfinite_batches:
      bar.close()
      good = mngr.latest_step()
      mngr.wait_until_finished()
      close_outputs()
      raise NonFiniteLossError(
          f"non-finite loss or gradient at step {bad} (stopped at step {at_step}, nothing saved "
          f"after it); last good checkpoint: "
          + (f"step {good} in {mngr.directory}" if good is not None else "none")
          + "; rerun resumes from it (lower train.learning_rate, or set "
          "train.skip_nonfinite_batches=True to skip such batches)")
    return count

  # Preemption: SIGTERM saves a checkpoint at the current step and ends the process with status
  # 0 (the next start resumes). Several processes agree on the step through JAX's preemption
  # sync point (Orbax reached_preemption), which handles the signal itself.
  preempted = threading.Event()
  own_handler = jax.process_count() == 1 and threading.current_thread() is threading.main_thread()
  previous_handler = (signal.signal(signal.SIGTERM, lambda *_: preempted.set())
                      if own_handler else None)
  try:
    while step < last_step:
      batch = next(train_iter)
      batch = {k: jax.make_array_from_process_local_data(batch_sharding, v)
               for k, v in batch.items()}
      state, metrics = step_fn(state, batch)
      step += 1
      first_bad, skipped = _note_nonfinite(first_bad, skipped, metrics["nonfinite"], step)
      interval_steps += 1
      bar.update(1)
      if step % t.log_every_steps == 0 or step == last_step:
        metrics = jax.device_get(metrics)  # the only host sync of the loop
        nonfinite_steps = check_finite(step)
        elapsed = time.perf_counter() - interval_start
        step_time = elapsed / interval_steps
        loss = float(metrics["loss"])
        record = {"step": step, "loss": loss if math.isfinite(loss) else None,
                  "perplexity": math.exp(min(loss, 50.0)) if math.isfinite(loss) else None,
                  "grad_norm": float(metrics["grad_norm"]),
                  "learning_rate": float(schedule_lr(step - 1)),
                  "step_time_s": step_time,
                  "tokens_per_s": config.data.batch_size * config.data.train_len / step_time,
                  "mfu": flops_per_step / step_time / peak}
        if t.skip_nonfinite_batches:
          record["skipped_batches"] = nonfinite_steps
          record["grad_norm"] = record["grad_norm"] if math.isfinite(record["grad_norm"]) else None
        log(record)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
        interval_start, interval_steps = time.perf_counter(), 0
      if t.eval_every_steps and step % t.eval_every_steps == 0 and step < t.num_steps:
        check_finite(step)
        record = validation_record(step, state["params"])
        bar.write(f"step {step}: validation loss {record['val_loss']:.4f} "
                  f"{'nats/answer token' if task else 'nats/' + token_unit(config)}"
                  + (f"; passkey answer digits {record['val_passkey_answer_nll']:.3f} nats "
                     f"(chance {math.log(10):.3f})" if answer_windows is not None else ""))
        interval_start, interval_steps = time.perf_counter(), 0
      stop = (preempted.is_set() if own_handler else
              jax.process_count() > 1 and mngr.reached_preemption(step))
      if step % t.checkpoint_every_steps == 0 or step == last_step or stop:
        check_finite(step)  # never save non-finite parameters over good ones
        save(step)
      if stop:
        break
  finally:
    if own_handler:
      signal.signal(signal.SIGTERM, previous_handler)
  if preempted.is_set() or (step < last_step):
    bar.close()
    mngr.wait_until_finished()
    mngr.close()
    close_outputs()
    chief_print(f"preempted (SIGTERM) at step {step} of {t.num_steps}: checkpoint saved in "
                f"{mngr.directory}; run again to resume")
    return {"step": step, "preempted": True}
  bar.close()
  mngr.wait_until_finished()
  mngr.close()
  if step < t.num_steps:
    close_outputs()
    chief_print(f"stopped after step {step} of {t.num_steps} (train.stop_after_step); "
                "run again to resume")
    return {"step": step}

  # --- final validation and perplexity vs length (for a task: accuracy per instance size)
  final = validation_record(step, state["params"])
  val_loss = final["val_loss"]
  if task:
    result = algorithmic.run_suite(config, workdir, spec, mesh, state["params"], step)
    close_outputs()
    chief_print(f"final validation loss: {val_loss:.4f} nats per answer token; "
                "exact match by size:")
    for row in result["rows"]:
      if row["exact_match"] is not None:
        train = " (train)" if row["in_distribution"] else ""
        chief_print(f"  {task} size {row['size']:>4}{train:8}: exact match "
                    f"{row['exact_match']:.3f}, token accuracy {row['token_accuracy']:.3f}")
    return {"step": step, "val_loss": val_loss, "algorithmic": result}
  result = evaluate_ppl(config, workdir, spec, mesh, state["params"], step, docs, tokenizer,
                        extra={"final_validation_loss": val_loss})
  retrieval = {suite: needle.run_suite(suite, config, workdir, spec, mesh, state["params"], step,
                                       docs, tokenizer, "")
               for suite in ("passkey", "needle") if suite in suites}
  attention = (attention_stats.run_suite(config, workdir, spec, mesh, state["params"], step, docs,
                                         tokenizer) if "attention" in suites else None)
  close_outputs()
  unit = token_unit(config)
  chief_print(f"final validation loss: {val_loss:.4f} nats/{unit} "
              f"({val_loss / math.log(2):.4f} bits/{unit}); "
              f"unigram byte entropy of the corpus: {result['unigram_entropy_nats']:.4f} nats")
  if answer_windows is not None:
    chief_print(f"  passkey answer digits: {final['val_passkey_answer_nll']:.4f} nats per digit "
                f"(chance {math.log(10):.4f}; near 0 once the key is copied from the needle)")
  for row in result["rows"]:
    if row["nll"] is not None:
      chief_print(f"  ppl at {row['length']:>6} tokens ({row['multiplier']:g}x train_len): "
                  f"{row['ppl']:.4f} ({row['tokens']} tokens)")
  for suite, r in retrieval.items():
    chief_print(f"  {suite}: accuracy by length "
                + ", ".join(f"{row['length']}: {row['accuracy']:.2f}" for row in r["rows"]
                            if row["accuracy"] is not None)
                + f"; largest length passing {r['threshold']}: {r['max_length_passing']}")
  if attention is not None:
    chief_print("  attention entropy (nats) / sink mass by length: "
                + ", ".join(f"{row['length']}: {row['entropy']:.3f} / {row['sink_mass']:.3f}"
                            for row in attention["rows"] if not row.get("skipped")))
  extra = ({"val_passkey_answer_nll": final["val_passkey_answer_nll"]}
           if answer_windows is not None else {})
  extra |= {"attention": attention} if attention is not None else {}
  return {"step": step, "val_loss": val_loss, "ppl_vs_length": result, **retrieval, **extra}


def make_lr_schedule(train_config):
  """The learning-rate schedule used by `make_optimizer` (for logging)."""
  t = train_config
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=t.learning_rate, warmup_steps=t.warmup_steps,
      decay_steps=max(t.num_steps, t.warmup_steps + 1), end_value=t.learning_rate * t.final_lr_ratio)


# ---------------------------------------------------------------------------- multi-host start-up


def distributed_launcher(environ=None) -> str | None:
  """Which multi-process launch started this process, or None for a single process.

  Read from environment variables and device files only (no JAX device is touched), in order:
    "slurm"  an `srun` step of several tasks: SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_PROCID,
             SLURM_LOCALID set and SLURM_NTASKS > 1 (what JAX's SLURM cluster reads);
    "mpi"    Open MPI's `mpirun` of several processes: OMPI_COMM_WORLD_SIZE > 1 (with
             OMPI_MCA_orte_hnp_uri, what JAX's Open MPI cluster reads);
    "tpu"    a Cloud TPU VM: libtpu is installed and the host has TPU chips (/dev/accel* or
             /dev/vfio/<n>); JAX reads the slice's workers from the TPU metadata (GCE) or
             TPU_WORKER_HOSTNAMES / TPU_PROCESS_ADDRESSES (GKE): a single-host slice becomes
             a one-process cluster.
  Launchers JAX cannot detect pass --coordinator_address, --num_processes and --process_id.
  """
  import glob
  import importlib.util
  env = os.environ if environ is None else environ
  slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
  if all(k in env for k in slurm) and int(env["SLURM_NTASKS"]) > 1:
    return "slurm"
  if int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1 and "OMPI_MCA_orte_hnp_uri" in env:
    return "mpi"
  tpu_chips = glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*")
  if tpu_chips and importlib.util.find_spec("libtpu") is not None:
    return "tpu"
  return None


def initialize_distributed(mode: str = "auto", coordinator_address: str = "",
                           num_processes: int = 0, process_id: int = -1) -> None:
  """Calls `jax.distributed.initialize()` for a multi-process run, before any device is used.

  With a coordinator address (`--coordinator_address`, `--num_processes`, `--process_id`) it is
  called with them; else, with mode "auto", only when `distributed_launcher()` detects a launch
  (JAX then reads the cluster from the environment); "on" always calls it, "off" never. Each
  process then sees all devices (`jax.devices()`) and feeds its own share of every batch; only
  process 0 writes config.json, metrics, TensorBoard and eval files; Orbax checkpoints are
  written by all processes together, so `--workdir` must be one directory every host sees (a
  shared or mounted file system).

  Raises:
    ConfigError: --coordinator_address, --num_processes and --process_id not given together
      (an address, a count >= 1 and an index in [0, count)).
  """
  explicit = bool(coordinator_address) or num_processes > 0 or process_id >= 0
  if explicit:
    if not coordinator_address or num_processes < 1 or not 0 <= process_id < num_processes:
      raise ConfigError(
          f"--coordinator_address={coordinator_address!r}, --num_processes={num_processes} and "
          f"--process_id={process_id} go together: host:port of process 0, the number of "
          "processes >= 1 and this process's index in [0, num_processes)")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif mode == "on" or (mode == "auto" and distributed_launcher() is not None):
    jax.distributed.initialize()


def initialize_from_flags() -> None:
  """`initialize_distributed` with the flags of `define_distributed_flags`."""
  initialize_distributed(FLAGS.distributed, FLAGS.coordinator_address, FLAGS.num_processes,
                         FLAGS.process_id)


# ---------------------------------------------------------------------------- entry point

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a script, so `import train` defines none)."""
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory for config, metrics, checkpoints and eval results.")
  define_distributed_flags()


def define_distributed_flags() -> None:
  """--distributed, --coordinator_address, --num_processes, --process_id (train.py, eval.run):
  the arguments of `initialize_distributed`."""
  flags.DEFINE_enum("distributed", "auto", ["auto", "on", "off"],
                    "jax.distributed.initialize(): auto = when a multi-process launch is detected "
                    "(see distributed_launcher), on = always (JAX detects the cluster), off = never.")
  flags.DEFINE_string("coordinator_address", "", "Multi-process: host:port of process 0 "
                      "(with --num_processes and --process_id; for launchers JAX cannot detect).")
  flags.DEFINE_integer("num_processes", 0, "Multi-process: number of processes (with --coordinator_address).")
  flags.DEFINE_integer("process_id", -1, "Multi-process: this process's index, 0..num_processes-1.")


def quiet_library_logs() -> None:
  """Shows warnings and errors only (Orbax logs every save at INFO), unless --verbosity is given."""
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  try:
    config = FLAGS.config
    if config is not None:
      config.to_dict()  # config_flags defers a file that failed to load to the first access
  except OSError as e:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    print(f"error: --config could not be loaded: {lines[-1] if lines else e}", file=sys.stderr)
    sys.exit(2)
  if config is None:
    raise app.UsageError("--config is required, e.g. --config=configs/alibi_tiny.py")
  try:
    initialize_from_flags()  # before any device is used
    train_and_evaluate(config, FLAGS.workdir)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=parse_flags)
