"""Trains a decoder with a pluggable positional scheme, then runs the evaluation suites:
`python train.py --config=configs/alibi_tiny.py --workdir=/tmp/alibi_tiny`.

Top to bottom: flags and `main`; the train state; the loss and `train_step`; the jitted step
function; `train_loop`; `train_and_evaluate` (pre-flight -> data -> restore -> loop -> suites).
The workdir (runs/) gets run.lock, config.json, metrics.jsonl, training_curves.png, tensorboard/,
checkpoints/ and the suites' eval/<suite>.{json,png} (eval/suites/: perplexity and loss by
position for text, accuracy per size for an algorithmic task, and what `eval.suites` names)."""

from __future__ import annotations

import functools
import sys
import time

import jax
import jax.numpy as jnp
import optax
from absl import app, flags
from ml_collections import config_flags
from tqdm import tqdm

from configs.errors import ConfigError, config_from_flag, parse_flags
from configs.validate import preflight, validate
from data import inputs as data_inputs
from data.tokenizers import get_tokenizer
from eval import perplexity
from eval.suites import Context
from models import sharding
from models.spec import (ModelSpec, abstract_with_shardings, init_params, measure_peak_flops,
                         train_flops_per_token)
from runs import distributed, memory, run_guard, startup, wandb_log, warm_start, workdir as run_dir
from runs.checkpoint import TrainCheckpoints
from runs.distributed import Preemption, chief_print
from runs.metrics import MetricsWriter, NonFiniteLossError, NonFiniteSteps, step_record
from runs.optimizer import make_lr_schedule, make_optimizer

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a script, so `import train` defines none)."""
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Directory for config, metrics, checkpoints and eval results.")
  distributed.define_distributed_flags()


def main(argv):
  """`python train.py --config=... --workdir=...`: exit 2 on bad input (a workdir another process
  writes included), 1 on a non-finite loss or a full device."""
  if len(argv) > 1:  # every setting is a flag (absl would print its whole usage, exit 1)
    print(f"error: unexpected arguments {argv[1:]}; give every setting as a flag "
          "(--config=..., --workdir=..., --config.<field>=...)", file=sys.stderr)
    sys.exit(2)
  distributed.quiet_library_logs()
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  try:
    config = config_from_flag(FLAGS.config)
    distributed.initialize_from_flags()  # before any device is used
    train_and_evaluate(config, FLAGS.workdir)
  except Exception as e:  # one line: bad input (status 2), non-finite loss or full device (1)
    line, status = (str(e), 1) if isinstance(e, NonFiniteLossError) else run_guard.failure(e)
    if line is None:
      raise
    print(f"error: {line}", file=sys.stderr)
    sys.exit(status)


# ---------------------------------------------------------------------------- the train state


def state_shardings(tx, spec: ModelSpec, mesh):
  """Shardings of the train state {params, opt_state, step} (optimizer moments like parameters),
  and the abstract state (ShapeDtypeStructs carrying them) that checkpoints restore onto; nothing
  runs eagerly (abstract TPU devices, bench/tpu_compile.py)."""
  abstract_opt = jax.eval_shape(tx.init, spec.abstract_params)
  opt_shardings = sharding.opt_state_shardings(abstract_opt, spec.param_shardings, mesh)
  shardings = {"params": spec.param_shardings, "opt_state": opt_shardings,
               "step": sharding.replicated(mesh)}
  abstract = {"params": spec.abstract_params, "opt_state": abstract_opt,
              "step": jax.ShapeDtypeStruct((), jnp.int32)}
  return shardings, abstract_with_shardings(abstract, shardings)


def initial_state(config, spec: ModelSpec, tx, shardings, parent=None, mesh=None) -> dict:
  """A fresh training state {params, opt_state, step = 0} in `shardings`: parameters initialised
  (seed config.seed) or, for a warm start, the `parent`'s (runs/warm_start.py) on `mesh`."""
  params = warm_start.load_params(parent, config, spec, mesh) if parent else init_params(config, spec)
  opt_state = jax.jit(tx.init, out_shardings=shardings["opt_state"])(params)
  return {"params": params, "opt_state": opt_state,
          "step": jax.device_put(jnp.zeros((), jnp.int32), shardings["step"])}


# ---------------------------------------------------------------------------- loss and step


def loss_sum(params, graphdef, batch, pad_id: int):
  """Summed weighted next-token NLL (nats), and the summed weights (tokens trained on).

  batch: int32 [batch, seq] inputs, targets, positions, segment_ids, and optionally float32
  [batch, seq] weights (algorithmic tasks: 1 at answer targets only, data/tasks/dataset.py);
  without weights, every non-PAD target has weight 1 (text). Context-parallel under a mesh
  with mesh.context > 1 (`perplexity.model_token_nll`).
  """
  if "weights" in batch:
    weights = batch["weights"].astype(jnp.float32)
  else:
    weights = (batch["targets"] != pad_id).astype(jnp.float32)
  nll = perplexity.model_token_nll(params, graphdef, batch, train=True)
  return (nll * weights).sum(), weights.sum()


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


def make_step_fn(config, spec: ModelSpec, tx, shardings, mesh, pad_id: int):
  """The jitted `train_step` of `config`: (state, batch) -> (state, metrics), state donated,
  batch sharded over ("data", "fsdp"), metrics replicated."""
  t = config.train
  return jax.jit(
      sharding.trace_under_mesh(mesh, functools.partial(  # the kernel's shard_map reads the mesh
          train_step, graphdef=spec.graphdef, tx=tx, pad_id=pad_id,
          grad_accum_steps=t.grad_accum_steps, skip_nonfinite=t.skip_nonfinite_batches)),
      in_shardings=(shardings, sharding.batch_sharding(mesh)),
      out_shardings=(shardings, sharding.replicated(mesh)), donate_argnums=0)


def compile_step_fn(config, spec: ModelSpec, tx, shardings, abstract, mesh, pad_id: int):
  """`make_step_fn` compiled ahead for the `abstract` state (`state_shardings`) and a global
  batch (data.inputs.train_batch_spec): the executable the loop runs, whose memory analysis the
  pre-flight reads (one compilation for both)."""
  batch = sharding.abstract_batch(data_inputs.train_batch_spec(config, spec.layout), mesh)
  return make_step_fn(config, spec, tx, shardings, mesh, pad_id).lower(abstract, batch).compile()


# ---------------------------------------------------------------------------- the loop


def train_loop(config, state, step: int, step_fn, inputs, ckpt: TrainCheckpoints,
               writer: MetricsWriter, validate_fn, mesh) -> tuple[dict, int, str | None]:
  """Runs steps `step`..num_steps (or train.stop_after_step): metrics every log_every_steps,
  validation every eval_every_steps, checkpoints every checkpoint_every_steps, at the last step
  and on SIGTERM (runs.distributed.Preemption: saved, then the next start resumes).

  Returns:
    (state, step reached, None when num_steps was reached, else why it stopped: preempted or
    train.stop_after_step).

  Raises:
    NonFiniteLossError: a NaN/inf loss or gradient without train.skip_nonfinite_batches
      (nothing is saved after it; the message names the last good checkpoint).
  """
  t = config.train
  last_step = t.num_steps if t.stop_after_step < 0 else min(t.num_steps, t.stop_after_step)
  tokens = config.data.batch_size * config.data.train_len  # per step
  flops = train_flops_per_token(config) * tokens
  peak = (t.peak_flops_per_device or measure_peak_flops()) * mesh.devices.size
  # One compiled program for the logged rate (eagerly, optax's schedule is a dozen small ones).
  schedule, batch_sharding = jax.jit(make_lr_schedule(t)), sharding.batch_sharding(mesh)
  bar = tqdm(total=t.num_steps, initial=step, desc="train", disable=jax.process_index() > 0,
             dynamic_ncols=True)
  interval_start, interval_steps = time.perf_counter(), 0
  nonfinite = NonFiniteSteps(t.skip_nonfinite_batches)

  def check_finite(at_step: int) -> int:  # non-finite steps so far; raises unless skipped
    try:
      return nonfinite.check(at_step, ckpt.latest_step(), ckpt.directory)
    except NonFiniteLossError:
      for resource in (bar, ckpt, writer):
        resource.close()
      raise

  with Preemption() as preemption, bar:  # the bar is closed however the loop ends
    while step < last_step:
      batch = {k: jax.make_array_from_process_local_data(batch_sharding, v)
               for k, v in next(inputs.train).items()}
      state, metrics = step_fn(state, batch)
      step += 1
      nonfinite.note(metrics["nonfinite"], step)
      interval_steps += 1
      if step % t.log_every_steps == 0 or step == last_step:
        metrics = jax.device_get(metrics)  # the only host sync of the loop
        bar.update(step - bar.n)  # steps done, not dispatched: a steady rate and ETA
        nonfinite_steps = check_finite(step)
        record = step_record(
            step, metrics, step_time=(time.perf_counter() - interval_start) / interval_steps,
            learning_rate=schedule(step - 1), tokens_per_step=tokens, flops_per_step=flops,
            peak_flops=peak, skipped_batches=nonfinite_steps if t.skip_nonfinite_batches else None)
        writer.log(record)
        bar.set_postfix(loss=f"{metrics['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
        interval_start, interval_steps = time.perf_counter(), 0
      if t.eval_every_steps and step % t.eval_every_steps == 0 and step < t.num_steps:
        check_finite(step)
        bar.write(f"step {step}: {inputs.describe(validate_fn(step, state['params']))}")
        interval_start, interval_steps = time.perf_counter(), 0
      stop = preemption.requested(step, ckpt)
      if step % t.checkpoint_every_steps == 0 or step == last_step or stop:
        check_finite(step)  # never save non-finite parameters over good ones
        ckpt.save(step, state)
      if stop:
        break
  ckpt.close()
  if preemption.signalled.is_set() or step < last_step:
    return state, step, (f"preempted (SIGTERM) at step {step} of {t.num_steps}: checkpoint saved "
                         f"in {ckpt.directory}")
  return state, step, (None if step == t.num_steps else
                       f"stopped after step {step} of {t.num_steps} (train.stop_after_step)")


# ---------------------------------------------------------------------------- the run


def train_and_evaluate(config, workdir: str, devices=None) -> dict:
  """Runs (or resumes) the training run of `config` in `workdir`, then its evaluation suites.

  Args:
    config: experiment ConfigDict (configs/base.py); train.init_from: a warm start.
    workdir: output directory (created; resumed from if it holds checkpoints).
    devices: devices of the mesh (default: all, `jax.devices()`).

  Returns:
    {"step", "val_loss" (nats per token; per answer token for a task), each suite's primary
    result by name (ppl_vs_length, passkey, needle, attention; algorithmic for a task), and
    "val_passkey_answer_nll" for a passkey run, "val_retrieval_answer_nll" for a
    retrieval-mix run}; {"step", "preempted": True} after SIGTERM.

  Raises:
    ConfigError: bad config field, workdir (another live process writing it included), mesh or
      data (window counts included; or train.wandb_project without the wandb package), before
      anything is compiled; a step that does not fit in memory (runs/memory.py): all before the
      workdir is made. A start that fails later leaves nothing that binds the next one.
    NonFiniteLossError: see `train_loop`.
    OutOfSpaceError: a checkpoint or metrics write found its device full (runs/run_guard.py).
  """
  # --- pre-flight: every check (the data's window counts included), then the compiled step's
  # memory; nothing is written before the workdir is made and claimed (runs/run_guard.py)
  devices = jax.devices() if devices is None else list(devices)
  validate(config, len(devices))
  wandb_log.check_installed(config)  # train.wandb_project needs the `wandb` extra
  run_dir.check_workdir(workdir)
  run_guard.check_not_in_use(workdir)  # another live process writes it: refused
  mesh = sharding.make_mesh(config.mesh, devices)
  tokenizer = get_tokenizer(config.data.tokenizer)
  docs = data_inputs.load_splits(config)
  plan = preflight(config, purpose="train", mesh=mesh, docs=docs, tokenizer=tokenizer)
  spec = plan.evaluations[0].spec
  for warning in plan.warnings:
    chief_print(f"warning: {warning}")
  changed = run_dir.check_resume(workdir, config)  # refuses another model; says what changed
  if changed:
    chief_print(f"warning: --workdir={workdir} holds a run started with other values; it "
                f"resumes with the new ones: {'; '.join(changed)}")
  parent = warm_start.check_init_from(config, workdir, mesh)  # train.init_from
  inputs = data_inputs.make_inputs(config, docs, tokenizer, process_index=jax.process_index(),
                                   process_count=jax.process_count(), layout=spec.layout)
  tx = make_optimizer(config.train)
  shardings, abstract = state_shardings(tx, spec, mesh)
  step_fn = compile_step_fn(config, spec, tx, shardings, abstract, mesh, tokenizer.pad_id)
  chief_print(memory.check_train_step(step_fn, config, mesh))  # ConfigError when it cannot fit
  run_dir.make_workdir(workdir)  # every check above has passed
  with run_guard.claim(workdir, warn=lambda line: chief_print(line, file=sys.stderr)):
    run_dir.write_run_config(workdir, config, num_params=spec.num_params, mesh=dict(mesh.shape),
                             num_devices=len(devices), eval_lengths=plan.eval_lengths,
                             parent=parent.record() if parent else None,
                             split_documents=data_inputs.split_names(docs))
    chief_print(f"model: {spec.num_params:,} parameters, scheme {config.model.position.kind!r}, "
                f"mesh {dict(mesh.shape)}, data: {inputs.description}")
    ckpt = TrainCheckpoints(workdir, config, abstract, inputs.train)
    state, resumed = ckpt.restore_latest()  # --- state: the latest readable checkpoint, else new
    if resumed is None:
      state = initial_state(config, spec, tx, shardings, parent, mesh)
    writer = MetricsWriter(workdir, resumed_from=resumed, config=config)
    # --- the loop
    nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)

    def validate_fn(step: int, params) -> dict:
      record = {"step": step, **perplexity.score_validation(
          nll_fn, params, inputs.validation, batch_tokens=config.eval.batch_tokens, mesh=mesh,
          tokenizer=tokenizer)}
      writer.log(record)
      return record

    state, step, stopped = train_loop(config, state, int(state["step"]), step_fn, inputs, ckpt,
                                      writer, validate_fn, mesh)
    if stopped:
      writer.close()
      chief_print(f"{stopped}; run again to resume")
      return {"step": step, **({"preempted": True} if stopped.startswith("preempted") else {})}
    # --- final validation, then the suites on the model as trained
    final = validate_fn(step, state["params"])
    writer.close()
    chief_print(f"final {inputs.describe_final(final)}")
    ctx = Context(config, workdir, spec, mesh, state["params"], step, docs, tokenizer,
                  extra={"final_validation_loss": final["val_loss"]})
    results = {}
    for suite in plan.suites:
      for name, result in suite.run(ctx).items():
        results[name] = result
        for line in suite.summary(result):
          chief_print(f"  {line}")
    return {"step": step, "val_loss": final["val_loss"], **results,
            **{k: v for k, v in final.items() if k.endswith("_answer_nll")}}


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=parse_flags)
