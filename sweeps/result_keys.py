"""The results of a study's runs, identified by their content (`ResultKey`: suite, extension,
factor, protocol, stride): the key of a result JSON, the results train.py's final evaluation
writes, those an evaluation point asks for, and the eval settings that shape each one (to tell
two evaluation points that would write one result differently; sweeps/run_plan.py).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple

import ml_collections

from configs.errors import ConfigError
from eval import suites as suites_registry
from models.extensions import applied_factor
from sweeps.overrides import StudyError

# eval.* fields that only change the results of suites with `per_protocol` (perplexity; so they
# do not make two passkey/needle/algorithmic results differ), and fields that change no result.
PPL_ONLY_FIELDS = ("protocol", "stride", "position_bins", "max_tokens_per_length", "split")
NO_RESULT_FIELDS = ("suites", "extension", "batch_tokens")


def _per_protocol(suite: str) -> bool:
  """Whether results named `suite` depend on eval.protocol and stride (eval/suites/)."""
  return suite in suites_registry.REGISTRY and suites_registry.REGISTRY[suite].per_protocol


# ---------------------------------------------------------------------------- results


class ResultKey(NamedTuple):
  """What identifies one result JSON of a run (its content, not its file name).

  suite: ppl_vs_length | loss_by_position | passkey | needle | algorithmic.
  extension: eval-time extension ("none" = the model as trained).
  factor: eval.factor of the extension (1.0 for "none").
  protocol: perplexity suites: "non_overlapping" | "sliding"; None for the others.
  stride: sliding protocol: eval.stride (0 = length // 2); None otherwise.
  step: the checkpoint step of a result tagged by `eval.step` (files `*_step<N>.json`, the
    JSON's `step_tag`); None for the results of the final checkpoint.
  """

  suite: str
  extension: str
  factor: float
  protocol: str | None
  stride: int | None
  step: int | None = None

  def describe(self) -> str:
    """e.g. `ppl_vs_length (extension yarn x4, protocol sliding, stride 0)`."""
    parts = [f"extension {self.extension}" + (f" x{self.factor:g}" if self.extension != "none"
                                              else "")]
    if self.protocol:
      parts.append(f"protocol {self.protocol}")
    if self.stride is not None:
      parts.append(f"stride {self.stride}")
    if self.step is not None:
      parts.append(f"checkpoint {self.step}")
    return f"{self.suite} ({', '.join(parts)})"


def make_key(suite: str, extension: str, factor: float, protocol: str | None,
             stride: int | None, step: int | None = None) -> ResultKey:
  """A ResultKey with the fields that do not apply to `suite` / `extension` cleared (`step`:
  the eval.step tag, None or a negative value for none)."""
  ppl = _per_protocol(suite)
  protocol = (protocol or "non_overlapping") if ppl else None
  return ResultKey(suite, extension, applied_factor(extension, factor), protocol,
                   int(stride or 0) if protocol == "sliding" else None,
                   int(step) if step is not None and step >= 0 else None)


def result_key(result: Mapping[str, Any]) -> ResultKey | None:
  """The key of a result JSON written by train.py or eval.run (None if it has no `suite`)."""
  suite = result.get("suite")
  if not isinstance(suite, str):
    return None
  return make_key(suite, result.get("extension", "none"), result.get("extension_factor", 1.0),
                  result.get("protocol"), result.get("stride"), result.get("step_tag"))


def _settings(config: ml_collections.ConfigDict, key: ResultKey) -> str:
  """The eval settings that shape the result `key` (canonical JSON), to tell two evaluation
  points that would write different results under one key."""
  e = config.eval.to_dict()
  drop = set(NO_RESULT_FIELDS) | {"step"}  # the key holds the step
  if key.extension == "none":
    drop |= {"factor", "window"}
  if not _per_protocol(key.suite):
    drop |= set(PPL_ONLY_FIELDS)
  drop |= {s.section for s in suites_registry.unique(suites_registry.REGISTRY.values())
           if s.section and s.section != key.suite}
  return json.dumps({k: v for k, v in e.items() if k not in drop}, sort_keys=True, default=str)


def train_results(config: ml_collections.ConfigDict) -> list[ResultKey]:
  """The results train.py's final evaluation writes for `config` (the model as trained): the
  suites eval.suites.for_run chooses for training (perplexity and loss by position for text,
  the algorithmic suite for a task, and those `eval.suites` names)."""
  chosen, _ = suites_registry.for_run(config, "train")
  return [make_key(name, "none", 1.0, config.eval.protocol, config.eval.stride)
          for name in suites_registry.result_names(chosen)]


def eval_point_suites(config: ml_collections.ConfigDict) -> list[str]:
  """The result names an evaluation point asks for (all names of each suite `eval.suites`
  names: loss_by_position and ppl_vs_length come together), chosen as eval.run chooses them.

  Raises:
    StudyError: an unknown suite, or one for the other kind of data (eval.suites.for_run).
  """
  try:
    chosen, _ = suites_registry.for_run(config, "eval")
  except ConfigError as e:
    raise StudyError(str(e)) from None
  return suites_registry.result_names(chosen)


__all__ = ["ResultKey", "result_key"]
