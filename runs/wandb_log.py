"""Optional Weights & Biases logging of a run (`train.wandb_project`; the `wandb` extra).

`runs.metrics.MetricsWriter` owns one `WandbRun` when `train.wandb_project` is set and hands it
every record it writes to metrics.jsonl, so W&B gets the same scalars at the same step numbers
(process 0 only). The run's config goes to W&B flattened as TensorBoard's hyperparameters
(`runs.metrics.hparams`: {"model.position.kind": "rope", ...}).

One workdir is one W&B run: its id is drawn on the first start and kept in `<workdir>/wandb_id`,
so a resume continues the same W&B run (`wandb.init(id=..., resume="allow")`); the run's name is
the workdir's basename. W&B's own files go to `$WANDB_DIR` if set, else `<workdir>/wandb/`.

W&B keeps a run's history in step order and ignores a step below one it already holds: after a
resume, the steps the earlier start logged past its checkpoint keep the values it logged (on one
device they are recomputed bitwise identical, except the timings), and this start's records of
those steps are left out before W&B would refuse them.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import string

from configs.errors import ConfigError, choice
from runs.files import atomic_write

# train.wandb_mode: "" = W&B's default (the WANDB_MODE environment variable, else "online").
MODES = ("", "online", "offline", "disabled")
RUN_ID_FILE = "wandb_id"  # in the workdir: the W&B run id of every start of the run
INSTALL_HINT = "pip install -e '.[wandb]'"


def enabled(config) -> bool:
  """True when `config.train.wandb_project` names a W&B project ("", None or absent: off) and
  train.wandb_mode is not "disabled" (which logs nothing, so needs no wandb package)."""
  t = config.train
  return bool(t.get("wandb_project", "")) and t.get("wandb_mode", "") != "disabled"


def check_config(config) -> None:
  """Checks the fields train.wandb_project, wandb_entity and wandb_mode (configs/validate.py;
  whether the package is installed is `check_installed`'s, for training only: eval.run reads a
  run's config without logging to W&B).

  Args:
    config: the experiment ConfigDict (configs/base.py; configs written before these fields
      existed have none: W&B off).

  Raises:
    ConfigError: a field that is not a string, or an unknown wandb_mode (naming the modes).
  """
  t = config.train
  for field, empty in (("wandb_project", "no W&B logging"), ("wandb_entity", "your default")):
    value = t.get(field, "")
    if value is not None and not isinstance(value, str):
      raise ConfigError(f"train.{field} must be a string (\"\" or None = {empty}); "
                        f"got {value!r}")
  choice(t.get("wandb_mode", "") or "", "train.wandb_mode", MODES)


def check_installed(config) -> None:
  """Refuses, before compilation (train.py's pre-flight), a run that would log to W&B without the
  `wandb` package; looks the package up without importing it.

  Raises:
    ConfigError: train.wandb_project is set and wandb is not installed (one line naming
      train.wandb_project and the install command).
  """
  if enabled(config) and importlib.util.find_spec("wandb") is None:
    raise ConfigError(f"train.wandb_project={config.train.wandb_project!r} needs the wandb "
                      f"package, which is not installed: {INSTALL_HINT} (or set "
                      "train.wandb_project='' to log to metrics.jsonl and TensorBoard only)")


def run_id(workdir: str) -> str:
  """The W&B run id of `workdir`: read from `<workdir>/wandb_id`, else drawn (8 random lowercase
  letters and digits, as W&B draws its own) and written there (atomically)."""
  path = os.path.join(workdir, RUN_ID_FILE)
  if os.path.exists(path):
    with open(path) as f:
      stored = f.read().strip()
    if stored:
      return stored
  new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
  atomic_write(path, lambda tmp: open(tmp, "w").write(new + "\n"))
  return new


class WandbRun:
  """The W&B run of a workdir (process 0 only; `runs.metrics.MetricsWriter` makes it).

  Args:
    workdir: the run's folder (exists).
    config: the run's ConfigDict (train.wandb_project / wandb_entity / wandb_mode; the whole
      config is logged as W&B config, flattened).
    hyperparameters: the flattened config ({dotted field: value}, runs.metrics.hparams).

  Raises:
    ConfigError: the wandb package is not installed (`check_installed` says so before
      compilation).
  """

  def __init__(self, workdir: str, config, hyperparameters: dict):
    try:
      import wandb
    except ImportError as e:
      raise ConfigError(f"train.wandb_project={config.train.wandb_project!r} needs the wandb "
                        f"package: {INSTALL_HINT}") from e
    t = config.train
    self.id = run_id(workdir)
    self._run = wandb.init(
        project=t.wandb_project, entity=t.get("wandb_entity") or None,
        mode=t.get("wandb_mode") or None, id=self.id, resume="allow",
        name=os.path.basename(os.path.abspath(workdir)),
        dir=os.environ.get("WANDB_DIR") or workdir)
    # After init (not as its config=): a resumed start may change fields such as
    # train.stop_after_step, which W&B refuses for a resumed run's config unless allowed.
    self._run.config.update(hyperparameters, allow_val_change=True)

  def log(self, record: dict) -> None:
    """Logs one metrics.jsonl record {"step": int, name: float or None, ...} at its step; None
    values are left out, and so is a record whose step W&B already passed (a resume's re-logged
    steps, module docstring)."""
    step = record["step"]
    if step < self._run.step:
      return
    values = {k: v for k, v in record.items() if k != "step" and v is not None}
    if values:
      self._run.log(values, step=step)

  def close(self) -> None:
    """Finishes the W&B run (its files are flushed; an offline run can then be synced)."""
    self._run.finish()
