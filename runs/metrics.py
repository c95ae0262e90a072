"""Training metrics of a run: `metrics.jsonl` (one JSON record a line) and TensorBoard, both
written by process 0 only; on resume the lines logged after the restored step are dropped (they
are computed again). (The unit of a run's losses is `data.inputs.token_unit`.)"""

from __future__ import annotations

import json
import os

import jax
from tensorboardX import SummaryWriter

from eval.files import atomic_write

METRICS_FILE = "metrics.jsonl"


def truncate_metrics(path: str, step: int) -> None:
  """Drops metrics.jsonl lines logged after `step` (they are recomputed after a resume)."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  atomic_write(path, lambda tmp: open(tmp, "w").writelines(kept))


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


class MetricsWriter:
  """Appends records to `<workdir>/metrics.jsonl` and TensorBoard scalars (process 0 only).

  Args:
    workdir: the run's folder (exists).
    resumed_from: the step a resume restored, or None for a fresh run; lines logged after it
      are dropped first.
  """

  def __init__(self, workdir: str, resumed_from: int | None = None):
    self.chief = jax.process_index() == 0
    if not self.chief:
      return
    path = os.path.join(workdir, METRICS_FILE)
    if resumed_from is not None:
      truncate_metrics(path, resumed_from)
    self._writer = SummaryWriter(os.path.join(workdir, "tensorboard"))
    self._file = open(path, "a")

  def log(self, record: dict) -> None:
    """Writes one record {"step": int, name: float or None, ...} (None: not a TensorBoard
    scalar, e.g. a non-finite loss)."""
    if not self.chief:
      return
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()
    for k, v in record.items():
      if k != "step" and v is not None:
        self._writer.add_scalar(k, v, record["step"])
    self._writer.flush()

  def close(self) -> None:
    """Closes the file and the TensorBoard writer (idempotent)."""
    if self.chief and not self._file.closed:
      self._writer.close()
      self._file.close()
