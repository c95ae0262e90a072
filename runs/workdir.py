"""A run's folder: checks before it is made, `config.json`, the config hash, resume checks.

`config.json` holds {"config": the resolved experiment config, "config_hash", "num_params",
"mesh", "num_devices", "eval_lengths", "split_documents"}; a run's config is loaded on top of
today's `configs/base.py` defaults (configs/stored.py), so runs trained before a field existed
stay loadable.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import jax
from etils import epath

from configs.errors import ConfigError, flatten
from configs.stored import CONFIG_FILE, load_run_config
from runs.files import write_json
from runs.checkpoint import committed_steps

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


# Config fields about one process of a run, expected to differ between its starts.
PER_PROCESS_FIELDS = frozenset({"train.stop_after_step"})


def check_resume(workdir: str, config, limit: int = 8) -> list[str]:
  """Checks that `config` can resume the run in `workdir`, and says what it changes.

  Reads `workdir/config.json` once. A run may resume with another schedule, evaluation or
  logging (the run continues with the new values), or another `model.remat` (memory and
  compute, not the checkpoint).

  Returns:
    [] for a workdir without a config.json or without a committed checkpoint (a new run: a
    start that failed or was killed before its first checkpoint binds nothing; train.py
    rewrites its config.json and empties its metrics); else the fields whose value differs,
    as "path: old -> new" (at most `limit`, then "... and N more"), for train.py's warning.
    Fields added to configs/base.py since that run count as their defaults (`load_run_config`);
    PER_PROCESS_FIELDS (where one process stops) are not the run's and are left out.

  Raises:
    ConfigError: its `model` section (but `remat`), `data.train_len` or `data.tokenizer` differ
      from `config`'s (the checkpoint could not be restored; names the first differing field),
      or `train.num_steps` is below the step of the last committed checkpoint (no step to
      train and none to reach).
  """
  done = committed_steps(workdir) if os.path.exists(os.path.join(workdir, CONFIG_FILE)) else []
  if not done:
    return []
  old = json.loads(load_run_config(workdir).to_json())
  new = json.loads(config.to_json())
  was_model, now_model = flatten(old["model"], "model."), flatten(new["model"], "model.")
  pairs = [(k, was_model.get(k), v) for k, v in now_model.items()
           if k != "model.remat"]  # remat changes memory and compute, not the checkpoint
  pairs += [(f"data.{k}", old["data"].get(k), new["data"][k]) for k in ("train_len", "tokenizer")]
  changed = [(field, was, now) for field, was, now in pairs if was != now]
  if changed:  # each changed field by its full name (model.position.kind), not whole sections
    listing = "; ".join(f"{field}={was!r}, not {now!r}" for field, was, now in changed[:4])
    more = f"; and {len(changed) - 4} more" if len(changed) > 4 else ""
    raise ConfigError(f"--workdir={workdir} holds a run with {listing}{more}; use a new "
                      "--workdir (or the old values) to resume")
  if done[-1] > config.train.num_steps:
    raise ConfigError(f"train.num_steps={config.train.num_steps} is below the step of the last "
                      f"checkpoint in --workdir={workdir} ({done[-1]}); raise it to resume, or "
                      "evaluate that run with `python -m eval.run`")
  old, new = flatten(old), flatten(new)
  changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(old.keys() | new.keys())
             if old.get(k) != new.get(k) and k not in PER_PROCESS_FIELDS]
  more = len(changed) - limit
  return changed[:limit] + ([f"... and {more} more"] if more > 0 else [])


def write_run_config(workdir: str, config, **fields) -> None:
  """Writes `<workdir>/config.json` (process 0 only, atomically): the config, its hash and
  `fields` (num_params, mesh, num_devices, eval_lengths, split_documents, ...)."""
  if jax.process_index() == 0:
    write_json(os.path.join(workdir, CONFIG_FILE),
               {"config": config.to_dict(), "config_hash": config_hash(config), **fields})


def read_results(workdir: str, skipped: list[str] | None = None
                 ) -> list[tuple[str, dict[str, Any]]]:
  """Every result JSON in `<workdir>/eval/` as (file name, parsed dict), sorted by name.

  Files that are not JSON objects with a `suite` (half-written by another tool, or foreign) are
  left out, and their names appended to `skipped` if given; train.py and eval.run write theirs
  atomically (runs/files.py). Local and bucket (`gs://...`) workdirs alike.
  """
  folder = epath.Path(workdir) / "eval"
  if not folder.exists():
    return []
  out = []
  for path in sorted(folder.glob("*.json"), key=lambda p: p.name):
    try:
      result = json.loads(path.read_text())
    except (OSError, ValueError):
      result = None
    if isinstance(result, dict) and isinstance(result.get("suite"), str):
      out.append((path.name, result))
    elif skipped is not None:
      skipped.append(path.name)
  return out
