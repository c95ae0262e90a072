"""The evaluation-suite contract: one small interface that train.py, eval.run, the sweeps and the
report call without knowing which suite they hold.

A suite answers one or more result names of `eval.suites` (perplexity answers ppl_vs_length and
loss_by_position from one pass). It is checked before anything compiles (`check`), run on a
trained model (`run`, on a `Context`), reports a few lines (`summary`) and turns each of its
result JSONs into rows of a study's table (`rows`, read by sweeps.collect). Results are written
by `write_result`: `<workdir>/eval/<name><suffix>.json` and `.png`, atomically, by process 0.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

import jax

from data.tokenizers import get_tokenizer
from runs.files import write_json

TEXT, TASK = "text", "task"  # what a run trains on: the text corpus, or an algorithmic task


@dataclasses.dataclass(frozen=True)
class Context:
  """What a suite runs on: one trained model (after any eval-time extension).

  Attributes:
    config: the run's experiment ConfigDict, the extension applied (configs/base.py).
    workdir: the run's folder; results go to `<workdir>/eval/`.
    spec: models.spec.ModelSpec (graphdef, shardings, max_position).
    mesh: the device Mesh.
    params: the parameter pure dict, in the spec's shardings.
    step: the checkpoint's training step (recorded in every result).
    docs: the corpus splits {"train", "validation", "test"} ({} for a task run, the default).
    tokenizer: the run's tokenizer (data/tokenizers.py); None = the one `config` names.
    suffix: appended to file names: "" as trained, `models.extensions.extension_suffix` for an
      eval-time extension.
    extra: fields added to the primary result (e.g. final_validation_loss, nats per token).
  """

  config: Any
  workdir: str
  spec: Any
  mesh: Any
  params: Any
  step: int
  docs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  tokenizer: Any = None
  suffix: str = ""
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.tokenizer is None:
      object.__setattr__(self, "tokenizer", get_tokenizer(self.config.data.tokenizer))


class Suite:
  """Base class of an evaluation suite (one instance per suite in `eval.suites.REGISTRY`).

  Class attributes:
    names: the `eval.suites` names (and result `suite` fields) this suite writes; the first is
      its primary result.
    data: TEXT (runs trained on the corpus) or TASK (algorithmic-task runs).
    in_training: train.py's final evaluation runs it even when `eval.suites` does not name it.
    per_protocol: its results depend on eval.protocol / eval.stride / eval.split /
      eval.max_tokens_per_length / eval.position_bins (the perplexity suites).
    section: the `eval.<section>` settings it reads (passkey, needle, attention), or None.
    metric: the column of its `rows` that a study report plots against length for a suite
      without a figure of its own (sweeps/figures.py), or None; metric_label: its axis label,
      with the unit.
  """

  names: tuple[str, ...] = ()
  data: str = TEXT
  in_training: bool = False
  per_protocol: bool = False
  section: str | None = None
  metric: str | None = None
  metric_label: str = ""

  def check(self, config, *, spec=None, docs=None, tokenizer=None,
            explicit_lengths: bool = False) -> list[str]:
    """Checks everything that can be checked before compilation; returns warnings.

    Args:
      config: the experiment config (an eval-time extension applied, if any).
      spec: the ModelSpec, or None where it is not built yet (sweeps.launch).
      docs: the corpus splits, or None where they are not loaded (sweeps.launch).
      tokenizer: the run's tokenizer, or None.
      explicit_lengths: the eval lengths were asked for explicitly (eval.run's
        --length_multipliers): lengths the scheme cannot represent are an error, not skipped.

    Raises:
      ConfigError: a bad field of this suite, naming it and the allowed values.
    """
    return []

  def run(self, ctx: Context) -> dict[str, dict]:
    """Runs the suite and writes its results; returns {names[0] + suffix: result dict}, the
    primary result (secondary ones, such as loss_by_position beside ppl_vs_length, are written
    to their files only)."""
    raise NotImplementedError

  def summary(self, result: dict) -> list[str]:
    """Lines that report `result` (one of this suite's results) on the terminal."""
    return []

  def rows(self, result: dict, train_len: int) -> list[dict]:
    """The rows of a study table from one result JSON: one per length (or instance size), with
    at least `length` and `multiplier`; sweeps.collect adds the run's and result's columns."""
    return [{"length": r.get("length"),
             "multiplier": r.get("multiplier", (r.get("length") or 0) / train_len),
             **{k: v for k, v in r.items() if k not in ("length", "multiplier")
                and isinstance(v, (int, float, str, bool, type(None)))}}
            for r in result.get("rows", [])]


def write_result(workdir: str, name: str, result: dict,
                 plot: Callable[[dict, str], None] | None = None) -> None:
  """Writes `<workdir>/eval/<name>.json` and, with `plot`, `<name>.png` (process 0 only; each
  file atomically: a kill leaves the old file or the new one)."""
  if jax.process_index() != 0:
    return
  out = os.path.join(workdir, "eval")
  write_json(os.path.join(out, f"{name}.json"), result)
  if plot is not None:
    plot(result, os.path.join(out, f"{name}.png"))


def multiplier(row: dict, train_len: int) -> float:
  """A row's length as a multiple of train_len (the row's own `multiplier` if it has one)."""
  return row.get("multiplier", row["length"] / train_len)
