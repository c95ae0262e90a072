"""The evaluation-suite contract: one small interface that train.py, eval.run, the sweeps and the
report call without knowing which suite they hold.

A suite answers one or more result names of `eval.suites` (perplexity answers ppl_vs_length and
loss_by_position from one pass). It is checked before anything compiles (`check`), run on a
trained model (`run`, on a `Context`), reports a few lines (`summary`) and turns each of its
result JSONs into rows of a study's table (`rows`, read by sweeps.collect). Results are written
by `write_result`: `<workdir>/eval/<name><suffix>.json` and `.png`, atomically, by process 0.

A result never silently replaces one computed under other settings: the file names hold the
eval-time extension, its factor and the protocol, and the other settings a result records
(`SETTINGS`: step, split, lengths, token budget, ...) are compared with the file already there;
when they differ, the earlier file (and its figure) is kept under `eval/earlier/`, named by the
old values of what differs (`keep_earlier`), and the new result takes the usual name, which the
study tools read (sweeps.collect reads the files of eval/ itself, not eval/earlier/).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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

  def figure(self, plot: Callable[[dict, str], None]) -> Callable[[dict, str], None] | None:
    """`plot`, or None when the run's `train.write_plots` is False (`write_result` then writes
    the JSON only)."""
    return plot if self.config.train.get("write_plots", True) else None

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


# The settings a result records that change what it measures, beyond those its file name holds
# (the extension, factor and protocol): {field: its short form in a kept file's name}. "lengths"
# stands for the lengths (or task sizes) of its rows.
SETTINGS = {"step": "step", "split": "split", "lengths": "lengths",
            "max_tokens_per_length": "max_tokens", "position_bins": "bins",
            "train_len": "train_len",
            "extension_params": "params", "prompt": "prompt",
            "haystack": "haystack", "trials": "trials", "seed": "seed", "threshold": "threshold",
            "max_new_tokens": "max_new_tokens", "task": "task", "windows": "windows"}
EARLIER = "earlier"  # <workdir>/eval/earlier/: results kept when a result computed otherwise
# replaces them
KEPT: list[str] = []  # the names whose earlier file `write_result` kept (eval.run reports them)


def settings(result: dict) -> dict:
  """The `SETTINGS` a result records (those it has), "lengths" from its rows."""
  out = {k: result[k] for k in SETTINGS if k in result and k != "lengths"}
  if isinstance(out.get("windows"), list):
    del out["windows"]
  rows = result.get("rows")
  if isinstance(rows, list):
    out["lengths"] = [r.get("length", r.get("size")) for r in rows if isinstance(r, dict)]
  return out


def differences(old: dict, new: dict) -> dict:
  """{setting: (old value, new value)} for the `settings` both results record and that differ."""
  a, b = settings(old), settings(new)
  return {k: (a[k], b[k]) for k in SETTINGS if k in a and k in b and a[k] != b[k]}


def _tag(field: str, value) -> str:
  text = "-".join(str(v) for v in value) if isinstance(value, list) else str(value)
  text = "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
  if len(text) > 40:  # a prompt or a long list: a digest
    text = hashlib.sha256(str(value).encode()).hexdigest()[:8]
  return f"{SETTINGS[field]}-{text}"


def keep_earlier(out: str, name: str, result: dict) -> str | None:
  """Before `<out>/<name>.json` is replaced by `result`: when the file there was computed under
  other settings (`differences`), moves it and its PNG to `<out>/earlier/<name>.<what
  differs, the old values>.json` (e.g. `ppl_vs_length.step-2.lengths-16-32-64.json`; `.2`,
  `.3`, ... when taken) and returns a line saying so; else (no file, the same settings, or a file
  that is not a result) None, and the file is replaced.
  """
  path = os.path.join(out, f"{name}.json")
  try:
    with open(path) as f:
      old = json.load(f)
  except (OSError, ValueError):
    return None
  changed = differences(old, result) if isinstance(old, dict) else {}
  if not changed:
    return None
  folder = os.path.join(out, EARLIER)
  os.makedirs(folder, exist_ok=True)
  stem = name + "." + ".".join(_tag(k, old_value) for k, (old_value, _) in changed.items())
  kept, n = stem, 1
  while os.path.exists(os.path.join(folder, kept + ".json")):
    n += 1
    kept = f"{stem}.{n}"
  for ext in (".png", ".json"):  # the JSON last: a kill in between leaves it where it was
    if os.path.exists(os.path.join(out, name + ext)):
      os.replace(os.path.join(out, name + ext), os.path.join(folder, kept + ext))
  what = ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in changed.items())
  return (f"kept the earlier {out}/{name}.json, computed with other settings ({what[:300]}), as "
          f"{folder}/{kept}.json")


def write_result(workdir: str, name: str, result: dict,
                 plot: Callable[[dict, str], None] | None = None) -> None:
  """Writes `<workdir>/eval/<name>.json` and, with `plot`, `<name>.png` (process 0 only; each
  file atomically: a kill leaves the old file or the new one). A file there computed under other
  settings is kept first (`keep_earlier`: `<workdir>/eval/earlier/`), and a line says so."""
  if jax.process_index() != 0:
    return
  out = os.path.join(workdir, "eval")
  kept = keep_earlier(out, name, result)
  if kept:
    print(kept)
    KEPT.append(name)
  write_json(os.path.join(out, f"{name}.json"), result)
  if plot is not None:
    plot(result, os.path.join(out, f"{name}.png"))


def step_tag(config) -> int | None:
  """The checkpoint step that tags result files (`eval.step` >= 0), or None (the latest)."""
  step = int(config.eval.get("step", -1))
  return step if step >= 0 else None


def recorded_step(ctx: Context) -> dict:
  """The step fields of every result: `step` (the checkpoint's), and `step_tag` when the files
  are tagged by `eval.step` (`_step<N>` in their names; sweeps/result_keys.py reads it)."""
  tag = step_tag(ctx.config)
  return {"step": int(ctx.step), **({"step_tag": tag} if tag is not None else {})}


def multiplier(row: dict, train_len: int) -> float:
  """A row's length as a multiple of train_len (the row's own `multiplier` if it has one)."""
  return row.get("multiplier", row["length"] / train_len)
