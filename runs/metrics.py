"""Training metrics of a run: `metrics.jsonl` (one JSON record a line), TensorBoard and, with
`train.wandb_project`, Weights & Biases (runs/wandb_log.py), all written by process 0 only; every
start drops the lines logged after the restored step, all of them for a start without a
checkpoint (they are computed again), so a kill at any point leaves no step logged twice. (The
unit of a run's losses is `data.inputs.token_unit`.)"""

from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp

from configs.errors import flatten
from runs import plots
from runs.files import atomic_write
from runs import run_guard, wandb_log

METRICS_FILE = "metrics.jsonl"
TRAINING_CURVES_FILE = "training_curves.png"


def truncate_metrics(path: str, step: int) -> None:
  """Drops metrics.jsonl lines logged after `step` (they are recomputed by this start): the
  restored checkpoint's step, 0 for a start without one. A line that is not a whole record (cut
  by a kill mid-write) is dropped too. Rewrites the file (atomically) only when that changes it.

  Raises:
    OSError: the file cannot be read or rewritten (out of space included).
  """
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = f.readlines()
  kept = [line.rstrip("\n") + "\n" for line in lines
          if (s := _step_of(line)) is not None and s <= step]
  if kept != lines:
    def write(tmp):
      with open(tmp, "w") as f:
        f.writelines(kept)
    atomic_write(path, write)


def _step_of(line: str) -> int | None:
  """The step of a metrics.jsonl line, or None for a line that is not a whole record."""
  try:
    record = json.loads(line)
  except ValueError:
    return None
  step = record.get("step") if isinstance(record, dict) else None
  return step if isinstance(step, int) else None


def read_metrics(workdir: str) -> list[dict]:
  """The records of `<workdir>/metrics.jsonl` in order ([] if absent); a line cut by a kill is
  left out."""
  records = []
  try:
    with open(os.path.join(workdir, METRICS_FILE)) as f:
      for line in f:
        try:
          records.append(json.loads(line))
        except ValueError:
          continue
  except OSError:
    pass
  return records


def validation_loss_at(workdir: str, step: int) -> dict:
  """{"final_validation_loss": the val_loss train.py logged at `step` (nats per token)}, or {}
  if none was logged (so ppl_vs_length.json carries it whoever writes the file)."""
  found = {}
  for record in read_metrics(workdir):
    if record.get("step") == step and "val_loss" in record:
      found = {"final_validation_loss": record["val_loss"]}
  return found


def step_record(step: int, metrics: dict, *, step_time: float, learning_rate: float,
                tokens_per_step: int, flops_per_step: float, peak_flops: float,
                skipped_batches: int | None = None) -> dict:
  """The metrics.jsonl record of a logged training step.

  Args:
    step: the step just taken; metrics: its host scalars (loss in nats per token, grad_norm).
    step_time: mean seconds per step since the last record; learning_rate: the rate used.
    tokens_per_step: batch_size x train_len; flops_per_step: analytic training FLOPs of a step
      (models.spec.train_flops_per_token); peak_flops: FLOP/s of all devices (for MFU).
    skipped_batches: with train.skip_nonfinite_batches, the non-finite steps so far (then a
      non-finite grad_norm is logged as None too).

  Returns:
    {step, loss, perplexity (None when the loss is not finite), grad_norm, learning_rate,
    step_time_s, tokens_per_s, mfu[, skipped_batches]}.
  """
  loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
  record = {"step": step, "loss": loss if math.isfinite(loss) else None,
            "perplexity": math.exp(min(loss, 50.0)) if math.isfinite(loss) else None,
            "grad_norm": grad_norm, "learning_rate": float(learning_rate),
            "step_time_s": step_time, "tokens_per_s": tokens_per_step / step_time,
            "mfu": flops_per_step / step_time / peak_flops}
  if skipped_batches is not None:
    record["skipped_batches"] = skipped_batches
    record["grad_norm"] = grad_norm if math.isfinite(grad_norm) else None
  return record


# The scalars TensorBoard's HPARAMS tab shows beside a run's hyperparameters.
HPARAM_METRICS = ("loss", "val_loss")


def hparams(config) -> dict[str, int | float | str | bool]:
  """The config as TensorBoard hyperparameters: {"model.position.kind": "rope", ...}, one entry
  per leaf field; tuples and None become their repr (TensorBoard takes numbers, text, booleans)."""
  return {k: v if isinstance(v, (bool, int, float, str)) else repr(v)
          for k, v in flatten(config.to_dict()).items()}


class MetricsWriter:
  """Appends records to `<workdir>/metrics.jsonl`, TensorBoard scalars and, when the config sets
  `train.wandb_project`, the workdir's W&B run (process 0 only).

  A fresh run also writes the config to TensorBoard: as text (tag `config`, the JSON) and as
  hyperparameters (the HPARAMS tab, with `HPARAM_METRICS`). Every start writes a purge marker
  (tensorboardX `purge_step`) at `resumed_from + 1`, or at 0 for a start without a checkpoint
  (one killed before its first checkpoint may have logged), so TensorBoard drops what earlier
  starts logged after the restored checkpoint, as `metrics.jsonl` does.

  With `train.wandb_project`, every start opens the workdir's W&B run (runs/wandb_log.py: one
  run id per workdir, resumed by later starts), logs the config to it, flattened as the
  hyperparameters are, and logs each record there too, at its step.

  Args:
    workdir: the run's folder (exists).
    resumed_from: the step a resume restored, or None for a start without a checkpoint; lines
      logged after it (all of them when None) are dropped first.
    config: the run's ConfigDict (written to TensorBoard by a fresh run, to W&B by every start),
      or None.

  Raises:
    ConfigError: train.wandb_project is set and the wandb package is not installed (train.py's
      pre-flight says so before compilation: wandb_log.check_installed).
    OutOfSpaceError (runs/run_guard.py, `log`): metrics.jsonl cannot grow (one line naming it
      and the bytes of the record).

  `close` draws the training curves of the whole run (this start and the ones before it) into
  `<workdir>/training_curves.png` (runs.plots.plot_training_curves), unless the config's
  `train.write_plots` is False.
  """

  def __init__(self, workdir: str, resumed_from: int | None = None, config=None):
    self.chief = jax.process_index() == 0
    if not self.chief:
      return
    self._workdir = workdir
    name = os.path.basename(os.path.abspath(workdir))
    self._title = f"{config.model.position.kind}: {name}" if config is not None else name
    self._plots = config is None or config.train.get("write_plots", True)
    path = os.path.join(workdir, METRICS_FILE)
    truncate_metrics(path, 0 if resumed_from is None else resumed_from)
    # imported here: tensorboardX imports PyTorch when it is installed (1.6 s), which a command
    # that refuses its input or only reads metrics should not pay
    from tensorboardX import SummaryWriter  # noqa: PLC0415
    from tensorboardX.summary import hparams as tensorboard_hparams  # noqa: PLC0415
    # tensorboardX names event files by the second they are opened in; a suffix in nanoseconds
    # keeps a resume started within the same second from overwriting the earlier start's file.
    self._writer = SummaryWriter(
        os.path.join(workdir, "tensorboard"),
        purge_step=0 if resumed_from is None else resumed_from + 1,
        filename_suffix=f".{time.time_ns()}")
    if config is not None and resumed_from is None:
      self._writer.add_text("config", "```\n" + config.to_json(indent=2) + "\n```", 0)
      for summary in tensorboard_hparams(hparams(config), {m: 0.0 for m in HPARAM_METRICS}):
        self._writer.file_writer.add_summary(summary)
    self._file = open(path, "ab", buffering=0)  # unbuffered: a failed write leaves nothing behind
    self._wandb = (wandb_log.WandbRun(workdir, config, hparams(config))
                   if config is not None and wandb_log.enabled(config) else None)

  def log(self, record: dict) -> None:
    """Writes one record {"step": int, name: float or None, ...} (None: not a TensorBoard
    scalar, e.g. a non-finite loss)."""
    if not self.chief:
      return
    line = (json.dumps(record) + "\n").encode()
    try:
      rest = memoryview(line)
      while rest:  # a full device may take part of a write before refusing the rest
        rest = rest[self._file.write(rest):]
    except OSError as e:
      if e.errno not in run_guard.NO_SPACE:
        raise
      raise run_guard.out_of_space(self._file.name, len(line)) from None
    for k, v in record.items():
      if k != "step" and v is not None:
        self._writer.add_scalar(k, v, record["step"])
    self._writer.flush()
    if self._wandb is not None:
      self._wandb.log(record)

  def close(self) -> None:
    """Closes the file, the TensorBoard writer and the W&B run, then writes training_curves.png
    (idempotent)."""
    if self.chief and not self._file.closed:
      self._writer.close()
      self._file.close()
      if self._wandb is not None:
        self._wandb.close()
      if self._plots:
        plots.plot_training_curves(read_metrics(self._workdir),
                                   os.path.join(self._workdir, TRAINING_CURVES_FILE), self._title)


class NonFiniteLossError(FloatingPointError):
  """Training produced a NaN/inf loss or gradient (train.skip_nonfinite_batches=False)."""


@jax.jit
def _note_nonfinite(first: jax.Array, count: jax.Array, nonfinite: jax.Array, step: jax.Array):
  """(first non-finite step so far or -1, non-finite steps so far) after `step` (int32 scalars)."""
  bad = nonfinite > 0
  return jnp.where((first < 0) & bad, step, first), count + bad.astype(jnp.int32)


class NonFiniteSteps:
  """Counts the steps whose loss or gradient norm was NaN/inf, on device (so the training loop
  never waits for the host), and checks them where the loop syncs anyway.

  Args:
    skip: train.skip_nonfinite_batches: such steps were skipped by the step function (counted
      only); False: the first one stops training.
  """

  def __init__(self, skip: bool):
    self.skip = skip
    self.first = jnp.asarray(-1, jnp.int32)  # first non-finite step, -1 = none
    self.count = jnp.asarray(0, jnp.int32)

  def note(self, nonfinite: jax.Array, step: int) -> None:
    """Records a step's `nonfinite` metric (float32 scalar, 1.0 when non-finite)."""
    self.first, self.count = _note_nonfinite(self.first, self.count, nonfinite, step)

  def check(self, at_step: int, last_good: int | None, directory: str) -> int:
    """The non-finite steps so far.

    Args:
      at_step: the step reached; last_good: the newest committed checkpoint (or None) in
        `directory` (for the message).

    Raises:
      NonFiniteLossError: a non-finite step happened and `skip` is False; names the step and
        the last good checkpoint that a rerun resumes from.
    """
    bad, count = (int(x) for x in jax.device_get((self.first, self.count)))
    if bad >= 0 and not self.skip:
      raise NonFiniteLossError(
          f"non-finite loss or gradient at step {bad} (stopped at step {at_step}, nothing saved "
          f"after it); last good checkpoint: "
          + (f"step {last_good} in {directory}" if last_good is not None else "none")
          + "; rerun resumes from it (lower train.learning_rate, or set "
          "train.skip_nonfinite_batches=True to skip such batches)")
    return count
