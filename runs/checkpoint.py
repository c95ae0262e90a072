"""A run's checkpoints: `<workdir>/checkpoints/<step>/` written by Orbax (params, optimizer
state, step and the grain iterator), and the one path that reads them, `read_checkpoint`: a
training resume (`restore_latest`), `python -m eval.run` and warm starts (`restore_params`,
`readable_step`).

Orbax commits a checkpoint by renaming its temporary folder, so a save cut by a kill is never a
step here. A committed step whose files were damaged afterwards (missing, truncated, corrupt) is
found before Orbax reads it: `check_arrays` decodes its arrays with TensorStore, waiting for every
read it starts, so the step is called unreadable in one line and no Orbax read is left in flight
(an Orbax restore that fails part-way leaves reads pending on an event loop it has closed, which
print "Event loop is closed" tracebacks). A reader of parameters first compares the stored shapes
with the configured model's (`shape_mismatch`): another model is named as such, never as damage.

Without an explicit step the newest readable step is read, and a warning names each damaged newer
step; only the run's owner (a training resume, which holds the run's lock) moves a damaged step
aside, to `<workdir>/checkpoints_unreadable/<step>` (never deleted). An explicitly requested step
that is unreadable is refused in one line, with no fallback. The check reads the arrays once more
than Orbax does (page-cached on a local disk): the parameters for eval.run and warm starts, the
whole training state for a resume.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from typing import Any, Callable

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from etils import epath
from jax.experimental import multihost_utils

from configs.errors import ConfigError
from models.spec import ModelSpec
from runs import run_guard
from runs.distributed import chief_print

UNREADABLE = "checkpoints_unreadable"
CHECK_BATCH_BYTES = 1 << 30  # bytes of arrays `check_arrays` decodes at once (host memory)


def checkpoint_manager(workdir: str, config) -> ocp.CheckpointManager:
  """Orbax manager for `workdir/checkpoints` (keeps `train.max_to_keep`; async saves)."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      options=ocp.CheckpointManagerOptions(max_to_keep=config.train.max_to_keep, create=True))


class Unreadable(Exception):
  """A committed checkpoint step whose files cannot be read (its message: one line, why)."""


def _short(error: BaseException, limit: int = 160) -> str:
  text = " ".join(str(error).split())
  return (text[:limit] + "...") if len(text) > limit else text


def _open_item(step_dir: str, item: str = "state") -> tuple[Any, dict[str, str]]:
  """(TensorStore kvstore spec, {array name: zarr driver}) of the Orbax item `<step_dir>/<item>`
  (OCDBT or one folder per array; a local folder or a bucket path).

  Raises:
    Unreadable: the item's folder, manifest or array index cannot be read.
  """
  folder = epath.Path(step_dir) / item
  url = (str(folder) if "://" in str(folder) else "file://" + os.path.abspath(str(folder)))
  url = url.rstrip("/") + "/"
  try:
    if not folder.is_dir():
      raise Unreadable(f"{folder} is missing")
    ocdbt = (folder / "manifest.ocdbt").exists()
    kvstore = {"driver": "ocdbt", "base": url} if ocdbt else url
    keys = ts.KvStore.open(kvstore).result().list().result()
  except Unreadable:
    raise
  except Exception as e:  # noqa: BLE001 -- TensorStore and file errors: the files are damaged
    raise Unreadable(f"its array index cannot be read: {_short(e)}") from e
  arrays = {}
  for key in keys:
    name, _, leaf = key.decode(errors="replace").rpartition("/")
    if leaf in (".zarray", "zarr.json") and name:
      arrays[name] = "zarr" if leaf == ".zarray" else "zarr3"
  if not arrays:
    raise Unreadable(f"{folder} lists no array")
  return kvstore, arrays


def _array_spec(kvstore, name: str, driver: str) -> dict:
  store = {**kvstore, "path": name + "/"} if isinstance(kvstore, dict) else kvstore + name + "/"
  return {"driver": driver, "kvstore": store}


def _wait_all(futures: list[tuple[str, Any]], what: str
              ) -> tuple[dict[str, Any], Unreadable | None]:
  """Waits for every (name, TensorStore future): {name: result}, and the first failure."""
  results, failed = {}, None
  for name, future in futures:
    try:
      results[name] = future.result()
    except Exception as e:  # noqa: BLE001 -- any reader error: the files are damaged
      failed = failed or Unreadable(f"{what} of {name} cannot be read: {_short(e)}")
  return results, failed


def orbax_names(tree, prefix: str = "") -> dict[str, tuple]:
  """{Orbax array name (e.g. "params.blocks.0.mlp.wi"): shape} of a pytree of arrays or
  ShapeDtypeStructs: its keys joined by "." after `prefix`."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    keys = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
    out[prefix + ".".join(keys)] = tuple(leaf.shape)
  return out


def stored_shapes(step_dir: str, prefix: str = "") -> dict[str, tuple]:
  """{array name: shape} of the arrays of `<step_dir>/state` whose names start with `prefix`,
  from their metadata (no data read).

  Raises:
    Unreadable: the item's index or an array's metadata cannot be read.
  """
  kvstore, arrays = _open_item(step_dir)
  opened, failed = _wait_all([(n, ts.open(_array_spec(kvstore, n, d), open=True))
                              for n, d in sorted(arrays.items()) if n.startswith(prefix)],
                             "the metadata")
  if failed:
    raise failed
  return {name: tuple(store.shape) for name, store in opened.items()}


def check_arrays(step_dir: str, prefix: str = "", batch_bytes: int = CHECK_BATCH_BYTES) -> None:
  """Decodes every array of `<step_dir>/state` whose name starts with `prefix` ("params." for
  the parameters, "" for the whole training state), about `batch_bytes` at a time, waiting for
  every read it starts: nothing is left in flight when one fails.

  Raises:
    Unreadable: a file is missing, truncated or corrupt (one line naming the first array).
  """
  kvstore, arrays = _open_item(step_dir)
  opened, failed = _wait_all([(n, ts.open(_array_spec(kvstore, n, d), open=True))
                              for n, d in sorted(arrays.items()) if n.startswith(prefix)],
                             "the metadata")
  batch, size = [], 0
  for i, (name, store) in enumerate(sorted(opened.items())):
    batch.append((name, store.read()))
    size += int(np.prod(store.shape)) * store.dtype.numpy_dtype.itemsize
    if size >= batch_bytes or i == len(opened) - 1:
      failed = failed or _wait_all(batch, "the data")[1]
      batch, size = [], 0
  if failed:
    raise failed


def shape_mismatch(step_dir: str, abstract_params) -> str | None:
  """How the parameters stored in `<step_dir>` differ from `abstract_params` (the configured
  model's), or None when every parameter of the model is stored with its shape.

  Raises:
    Unreadable: the step's metadata cannot be read.
  """
  want = orbax_names(abstract_params, "params.")
  have = stored_shapes(step_dir, "params.")
  for name in sorted(want):
    if name not in have:
      return f"the model's parameter {name} is not in the checkpoint"
    if have[name] != want[name]:
      return f"parameter {name} has shape {have[name]} there and {want[name]} in the model"
  return None


def _move_aside(workdir: str, checkpoints: str, steps: list[int]) -> str:
  """Moves `steps` from `checkpoints` to `<workdir>/checkpoints_unreadable/` (process 0)."""
  moved = os.path.join(workdir, UNREADABLE)
  if jax.process_index() == 0:
    os.makedirs(moved, exist_ok=True)
    for bad in steps:
      target = os.path.join(moved, str(bad))
      if os.path.exists(target):
        target += f".{int(time.time())}"
      shutil.move(os.path.join(checkpoints, str(bad)), target)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices("moved unreadable checkpoints")
  return moved


def read_checkpoint(workdir: str, read: Callable[[int], Any], *, step: int | None = None,
                    check: Callable[[str], None] | None = None, owner: bool = False,
                    source: str | None = None, step_name: Callable[[int], str] | None = None,
                    purpose: str = "using") -> tuple[Any, int | None]:
  """The one checkpoint-reading path: `read(step)` of the newest readable step, or of `step`.

  Args:
    workdir: the run's folder (its steps: `committed_steps`).
    read: step -> what was read; raises when the step cannot be read (Unreadable or any reader
      error: damage), or ConfigError (a genuine refusal such as another model: passed on).
    step: an explicit step (None = the newest readable one).
    check: step folder -> None, raising Unreadable before `read` is called (`check_arrays`).
    owner: the caller holds the run (a training resume): damaged steps newer than the one read
      are moved to `<workdir>/checkpoints_unreadable/`; else they are left in place.
    source: how the user named the run, for messages (default "--workdir=<workdir>").
    step_name: step -> how the user names that step (default "--step=<step>").
    purpose: the verb of the fallback warning ("resuming from", "using").

  Returns:
    (what `read` returned, step), or (None, None) when `workdir` holds no checkpoint.

  Raises:
    ConfigError: `step` is not a committed step (listing those there) or is unreadable; or no
      step is readable (each named with its reason). One line each.
  """
  source = source or f"--workdir={workdir}"
  step_name = step_name or (lambda s: f"--step={s}")
  folder = os.path.join(str(workdir), "checkpoints")
  steps = sorted(committed_steps(workdir), reverse=True)
  if step is not None and step not in steps:
    raise ConfigError(f"{step_name(step)}: {source} has no such checkpoint; available steps: "
                      f"{sorted(steps)}")
  failures: list[tuple[int, str]] = []
  for candidate in ([step] if step is not None else steps):
    try:
      if check is not None:
        check(os.path.join(folder, str(candidate)))
      restored = read(candidate)
    except ConfigError:
      raise
    except Exception as e:  # noqa: BLE001 -- any reader error means "this step is unreadable"
      failures.append((candidate, str(e) if isinstance(e, Unreadable)
                       else f"{type(e).__name__}: {_short(e)}"))
      continue
    moved = _move_aside(workdir, folder, [s for s, _ in failures]) if owner and failures else ""
    for bad, why in failures:
      where = (f"step {bad} was moved to {moved}/" if owner else f"step {bad} is left in place")
      chief_print(f"warning: the checkpoint at step {bad} could not be restored, its files in "
                  f"{folder}/{bad} are unreadable ({why[:300]}); {purpose} the checkpoint at step "
                  f"{candidate}; {where}", file=sys.stderr)
    return restored, candidate
  if step is not None:
    raise ConfigError(f"{step_name(step)}: the checkpoint at step {step} in {folder} is "
                      f"unreadable, files missing, truncated or corrupt ({failures[0][1][:300]}); "
                      f"other steps: {sorted(s for s in steps if s != step)}")
  if failures:
    listing = "; ".join(f"step {s}: {why[:200]}" for s, why in failures[:2])
    more = f"; and {len(failures) - 2} more" if len(failures) > 2 else ""
    raise ConfigError(f"{source}: no checkpoint in {folder} can be restored, every one is "
                      f"unreadable (files missing, truncated or corrupt): {listing}{more}")
  return None, None


def restore_latest(mngr: ocp.CheckpointManager, workdir: str,
                   restore: Callable[[int], Any]) -> tuple[Any, int | None]:
  """A training resume: `read_checkpoint` of the newest readable step, as the run's owner.

  Every array of a step's training state is decoded first (`check_arrays`); a step that fails
  (files truncated, corrupted or missing after it was committed) or whose `restore` fails is
  moved, not deleted, to `<workdir>/checkpoints_unreadable/<step>` so that training can write
  that step again, and a warning names it and the step resumed from.

  Args:
    mngr: the run's checkpoint manager (its steps are the workdir's committed steps).
    workdir: the run's directory.
    restore: step -> restored checkpoint (raises if unreadable).

  Returns:
    (restored, step), or (None, None) when there is no checkpoint.

  Raises:
    ConfigError: checkpoints exist but none can be restored (all are left in place).
  """
  del mngr  # the steps are read from the workdir, as every reader reads them
  return read_checkpoint(workdir, restore, check=check_arrays, owner=True,
                         purpose="resuming from")


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
    """Saves `state` and the iterator as checkpoint `step` (asynchronously), once the previous
    save has finished and the filesystem has room for it (the state's bytes; `_check_space`).

    Raises:
      OutOfSpaceError (runs/run_guard.py): no room for the checkpoint, before Orbax writes any
        of it, or a write of it (or of the previous one) that ran out of space: one line naming
        the folder and the bytes needed; the committed checkpoints stay.
    """
    with self._space_errors(state):
      self.manager.wait_until_finished()
      _check_space(self.directory, state)
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
    """Waits for pending saves, then closes the manager.

    Raises:
      OutOfSpaceError: the last save ran out of space (see `save`).
    """
    with self._space_errors(self.abstract_state):
      self.manager.wait_until_finished()
      self.manager.close()

  @contextlib.contextmanager
  def _space_errors(self, state):
    """Turns an Orbax error caused by a full device (raised from its writer threads, several
    tracebacks long) into one OutOfSpaceError line, after closing the manager (so no writer
    thread is left to fail again at exit)."""
    try:
      yield
    except Exception as e:  # noqa: BLE001 -- only a full device is translated; others re-raised
      if not run_guard.is_out_of_space(e) or isinstance(e, run_guard.OutOfSpaceError):
        raise
      with contextlib.suppress(Exception):
        self.manager.close()
      raise run_guard.out_of_space(self.directory, run_guard.tree_bytes(state)) from None


def restore_params(workdir: str, config, spec: ModelSpec, step: int | None = None, *,
                   source: str | None = None, step_name: Callable[[int], str] | None = None,
                   checked: bool = False):
  """Restores only the parameters of a checkpoint in `workdir`: of `step`, or of the newest
  readable step (`read_checkpoint`: a damaged newer step is named in a warning and left in
  place). eval.run and warm starts read through it.

  Args:
    workdir: the run's folder; config: its config (unused but kept for callers); spec: the
      configured model's ModelSpec (its abstract params give the shapes and shardings).
    step: an explicit step (None = the newest readable).
    source, step_name: how the user named the run and a step, for messages ("--workdir=...",
      "--step=N" by default; a warm start names train.init_from).
    checked: `step` was just checked (`readable_step`): its arrays are not decoded again.

  Returns:
    (params pure dict with the spec's shardings, the step restored).

  Raises:
    ConfigError: no checkpoint in workdir; no checkpoint at `step` (listing those there), or it
      is unreadable; every checkpoint unreadable; or one whose parameters differ from the
      configured model's ("does not match", naming the parameter). One line each.
  """
  del config
  target = {"params": spec.abstract_params}

  # Orbax restores from absolute paths only: a relative --workdir (the README's commands) is
  # made absolute here; a URL (gs://...) is left as it is.
  root = str(workdir) if "://" in str(workdir) else os.path.abspath(str(workdir))

  def read(s: int):
    folder = os.path.join(root, "checkpoints", str(s))
    _check_model(folder, spec, source or f"--workdir={workdir}", s)
    if not (checked and s == step):
      check_arrays(folder, "params.")
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler()) as reader:
      return reader.restore(os.path.join(folder, "state"), args=ocp.args.PyTreeRestore(
          item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
          partial_restore=True))["params"]

  params, step = read_checkpoint(workdir, read, step=step, source=source, step_name=step_name)
  if step is None:
    raise ConfigError(f"{source or f'--workdir={workdir}'} holds no checkpoint")
  return params, step


def _check_model(folder: str, spec: ModelSpec, source: str, step: int) -> None:
  """Refuses (ConfigError) a step whose stored parameters are not the configured model's.

  Raises:
    Unreadable: its metadata cannot be read (then it is damage, not another model).
  """
  mismatch = shape_mismatch(folder, spec.abstract_params)
  if mismatch:
    raise ConfigError(f"{source}: the checkpoint at step {step} does not match the configured "
                      f"model: {mismatch}")


def readable_step(workdir: str, spec: ModelSpec, step: int | None = None, *,
                  source: str | None = None,
                  step_name: Callable[[int], str] | None = None) -> int:
  """The step whose parameters `restore_params` would read (the newest readable one, or
  `step`), checked without restoring anything: the configured model's shapes, then every
  parameter array decoded on the host. A warm start's pre-flight, before anything compiles.

  Raises:
    ConfigError: as `restore_params`.
  """
  def check(s: int) -> int:
    folder = os.path.join(str(workdir), "checkpoints", str(s))
    _check_model(folder, spec, source or f"--workdir={workdir}", s)
    check_arrays(folder, "params.")
    return s

  _, found = read_checkpoint(workdir, check, step=step, source=source, step_name=step_name)
  if found is None:
    raise ConfigError(f"{source or f'--workdir={workdir}'} holds no checkpoint")
  return found


def committed_steps(workdir: str) -> list[int]:
  """Steps of the committed Orbax checkpoints in `<workdir>/checkpoints` ([] if none), for a
  local or a bucket (`gs://...`) workdir, without opening a checkpoint manager.

  Raises:
    OSError (or the bucket library's error): the workdir cannot be read.
  """
  path = epath.Path(workdir) / "checkpoints"
  return sorted(ocp.utils.checkpoint_steps(path)) if path.exists() else []


def _check_space(directory: str, state) -> None:
  """Raises OutOfSpaceError (one line: the folder, the bytes needed and free) when the
  filesystem of `directory` has less room than the state's bytes plus 5% and 256 KiB (Orbax's
  metadata, the iterator), so a checkpoint that cannot fit is refused before it is written."""
  needed = run_guard.tree_bytes(state)
  if run_guard.free_bytes(directory) < needed * 1.05 + (1 << 18):
    raise run_guard.out_of_space(directory, int(needed * 1.05) + (1 << 18))
