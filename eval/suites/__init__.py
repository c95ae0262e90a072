"""Registry of evaluation suites: `eval.suites` names -> the Suite that writes them.

Adding a suite: write `eval/suites/<name>.py` with a `Suite` subclass (eval/suites/base.py:
`check`, `run`, `summary`, `rows`), add its instance to `REGISTRY` below, and add a test.
train.py, eval.run, configs.validate.preflight, the studies (sweeps.result_keys), sweeps.collect and the report read
this registry; none of them names a suite.
"""

from __future__ import annotations

from configs.errors import ConfigError, name_list
from eval.suites.algorithmic import Algorithmic
from eval.suites.attention import Attention
from eval.suites.base import TASK, TEXT, Context, Suite, write_result
from eval.suites.needle import Needle
from eval.suites.niah_multikey import NiahMultikey
from eval.suites.niah_multiquery import NiahMultiquery
from eval.suites.niah_multivalue import NiahMultivalue
from eval.suites.passkey import Passkey
from eval.suites.perplexity import Perplexity
from eval.suites.common_words import CommonWords
from eval.suites.frequent_words import FrequentWords
from eval.suites.variable_tracking import VariableTracking

REGISTRY: dict[str, Suite] = {name: suite for suite in (
    Perplexity(), Passkey(), Needle(), NiahMultikey(), NiahMultivalue(), NiahMultiquery(),
    VariableTracking(), CommonWords(), FrequentWords(), Attention(), Algorithmic(),
) for name in suite.names}


def unique(suites) -> list[Suite]:
  """`suites` without repeats (perplexity answers two names), in order."""
  out = []
  for s in suites:
    if all(s is not t for t in out):
      out.append(s)
  return out


def requested_names(config) -> list[str]:
  """The names of `eval.suites` (comma-separated), checked against the registry.

  Raises:
    ConfigError: an unknown or repeated name, or none (configs/errors.py name_list).
  """
  return name_list(config.eval.get("suites", "ppl_vs_length,loss_by_position"), "eval.suites",
                   list(REGISTRY))


def data_kind(config) -> str:
  """TASK for a run trained on an algorithmic task (data.task.name set), else TEXT."""
  return TASK if config.data.get("task") is not None and config.data.task.name else TEXT


def for_run(config, purpose: str) -> tuple[list[Suite], list[str]]:
  """The suites to run on `config`'s model, and warnings, by the one rule for every caller.

  A suite runs on the kind of data it was written for (Suite.data). train.py ("train") runs the
  suites of its data kind that it always runs (Suite.in_training) and those `eval.suites` names,
  and warns that it leaves out suites named for the other kind; eval.run and the sweeps'
  evaluation points ("eval") run exactly `eval.suites`. Either way in registry order.

  Args:
    config: the experiment config.
    purpose: "train" | "eval".

  Raises:
    ConfigError: an unknown suite name; a task suite (algorithmic) for a run trained on text;
      for "eval", a text suite for a run trained on a task.
  """
  if purpose not in ("train", "eval"):
    raise ValueError(f"purpose must be 'train' or 'eval'; got {purpose!r}")
  asked = unique(REGISTRY[n] for n in requested_names(config))
  kind, warnings = data_kind(config), []
  other = [s for s in asked if s.data != kind]
  if other and kind == TEXT:
    raise ConfigError(f"eval.suites={','.join(s.names[0] for s in other)!r} needs an algorithmic "
                      "task (data.task.name, e.g. --config=configs/task_copy.py); this run "
                      "trains on text")
  if other:
    message = (f"not applied: eval.suites={config.eval.suites!r}: a task run (data.task.name="
               f"{config.data.task.name!r}) evaluates the "
               f"{', '.join(s.names[0] for s in unique(REGISTRY.values()) if s.data == TASK)} "
               "suite only")
    if purpose == "eval":
      raise ConfigError(message.removeprefix("not applied: ") + "; set eval.suites='algorithmic'")
    warnings.append(message)
  return [s for s in unique(REGISTRY.values()) if s.data == kind and (
      any(s is t for t in asked) or (purpose == "train" and s.in_training))], warnings


def result_names(suites) -> list[str]:
  """Every result name the `suites` write (e.g. ppl_vs_length and loss_by_position)."""
  return [name for s in suites for name in s.names]


__all__ = ["REGISTRY", "TASK", "TEXT", "Context", "Suite", "data_kind", "for_run",
           "requested_names", "result_names", "unique", "write_result"]
