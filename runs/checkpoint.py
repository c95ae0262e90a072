"""A run's checkpoints: `<workdir>/checkpoints/<step>/` written by Orbax (params, optimizer
state, step and the grain iterator), restored with a fallback past unreadable steps, or as
parameters only (evaluation, warm starts).

Orbax commits a checkpoint by renaming its temporary folder, so a save cut by a kill is never a
step here; a committed step that later fails to read is moved aside, never deleted.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Callable

import grain
import jax
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from configs.errors import ConfigError
from models.spec import ModelSpec
from runs.distributed import chief_print

UNREADABLE = "checkpoints_unreadable"


def checkpoint_manager(workdir: str, config) -> ocp.CheckpointManager:
  """Orbax manager for `workdir/checkpoints` (keeps `train.max_to_keep`; async saves)."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(max_to_keep=config.train.max_to_keep, create=True))


def restore_latest(mngr: ocp.CheckpointManager, workdir: str,
                   restore: Callable[[int], Any]) -> tuple[Any, int | None]:
  """Restores the newest checkpoint that can be read, falling back past unreadable ones.

  A checkpoint that fails to restore (files truncated, corrupted or missing after it was
  committed) is moved, not deleted, to `<workdir>/checkpoints_unreadable/<step>` so that training
  can write that step again, and a warning names it and the step resumed from.

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
      moved = os.path.join(workdir, UNREADABLE)
      if jax.process_index() == 0:
        os.makedirs(moved, exist_ok=True)
        for bad, _ in failures:
          target = os.path.join(moved, str(bad))
          if os.path.exists(target):
            target += f".{int(time.time())}"
          shutil.move(os.path.join(mngr.directory, str(bad)), target)
      if jax.process_count() > 1:
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


class TrainCheckpoints:
  """The training state {params, opt_state, step} and the data iterator of a run, saved and
  resumed together (the iterator's position is part of the checkpoint, so a resume reads the
  same batches the interrupted run would have read next).

  Args:
    workdir: the run's folder.
    config: its experiment config (train.max_to_keep).
    abstract_state: ShapeDtypeStructs with shardings of {params, opt_state, step}.
    data_iter: the grain training iterator (its state is saved and restored).
  """

  def __init__(self, workdir: str, config, abstract_state, data_iter):
    self.workdir, self.config = workdir, config
    self.abstract_state, self.data_iter = abstract_state, data_iter
    self.manager = checkpoint_manager(workdir, config)

  def restore_latest(self) -> tuple[Any, int | None]:
    """(state, step) of the newest readable checkpoint (see `restore_latest`), the iterator
    restored in place (and a line saying so printed); (None, None) for a fresh run."""
    restored, step = restore_latest(self.manager, self.workdir, lambda s: self.manager.restore(
        s, args=ocp.args.Composite(state=ocp.args.StandardRestore(self.abstract_state),
                                   data=grain.checkpoint.CheckpointRestore(self.data_iter))))
    if step is None:
      return None, None
    chief_print(f"resumed from the checkpoint at step {step} in {self.workdir}")
    self.manager.close()
    self.manager = checkpoint_manager(self.workdir, self.config)  # sees the steps moved aside
    return restored["state"], step

  def save(self, step: int, state) -> None:
    """Saves `state` and the iterator as checkpoint `step` (asynchronously)."""
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(self.data_iter)))

  def latest_step(self) -> int | None:
    """The newest committed step, or None."""
    return self.manager.latest_step()

  def reached_preemption(self, step: int) -> bool:
    """Whether the processes of a multi-process run agreed to stop at `step` (SIGTERM)."""
    return self.manager.reached_preemption(step)

  @property
  def directory(self) -> str:
    """`<workdir>/checkpoints`."""
    return str(self.manager.directory)

  def close(self) -> None:
    """Waits for pending saves, then closes the manager."""
    self.manager.wait_until_finished()
    self.manager.close()


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


def committed_steps(workdir: str) -> list[int]:
  """Steps of the committed Orbax checkpoints in `<workdir>/checkpoints` ([] if none), for a
  local or a bucket (`gs://...`) workdir, without opening a checkpoint manager.

  Raises:
    OSError (or the bucket library's error): the workdir cannot be read.
  """
  path = epath.Path(workdir) / "checkpoints"
  return sorted(ocp.utils.checkpoint_steps(path)) if path.exists() else []
