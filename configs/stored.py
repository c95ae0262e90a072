"""A stored run's config: `<workdir>/config.json` read on top of today's schema (configs/base.py).

This sits in the config schema's layer, below `runs/` (docs/architecture.md): resuming, warm
starts, `eval.run`, the fine-tuning recipes and the sweeps all read a run's config through it.
"""

from __future__ import annotations

import json
import os

from configs.base import get_config
from configs.errors import ConfigError
from models import positions, rope_scaling

# The file a training run writes its resolved config to (runs/workdir.py write_run_config).
CONFIG_FILE = "config.json"


def legacy_defaults() -> dict:
  """`model.position` fields whose default changed -> the value runs made before the change used
  (`models.rope_scaling.LEGACY_DEFAULTS`: YaRN's ramp; the schemes' `legacy_defaults`: FoPE's
  normalisation, BiPE's separators and slope factor, DAPE's FIRE form). A stored config without
  such a field means this value."""
  return {**rope_scaling.LEGACY_DEFAULTS, **positions.legacy_defaults()}


def load_run_config(workdir: str):
  """The config a training run wrote to `<workdir>/config.json`, on top of today's defaults.

  Fields added to configs/base.py since the run was trained keep their defaults, so old runs
  stay loadable, except those whose default changed (`models.rope_scaling.LEGACY_DEFAULTS`:
  YaRN's ramp; the schemes' `legacy_defaults`: FoPE's normalisation), which take the value the run used; JSON lists become the config's tuples again.

  Raises:
    ConfigError: workdir or its config.json is missing or unreadable.
  """
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise ConfigError(f"--workdir={workdir} has no config.json (is it a training run's workdir?)")
  try:
    with open(path) as f:
      stored = json.load(f)["config"]
  except (json.JSONDecodeError, KeyError) as e:
    raise ConfigError(f"{path} is not a config written by train.py: {e}") from e

  def as_tuples(x):
    if isinstance(x, dict):
      return {k: as_tuples(v) for k, v in x.items()}
    return tuple(as_tuples(v) for v in x) if isinstance(x, list) else x

  config = get_config()
  position = stored.get("model", {}).get("position", {})
  for name, value in legacy_defaults().items():  # a default changed since the run
    if name not in position:
      config.model.position[name] = value
  config.update(as_tuples(stored))
  return config
