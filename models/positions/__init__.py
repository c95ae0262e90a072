"""Registry of positional schemes: `config.model.position.kind` -> class.

Adding a scheme: write `models/positions/<name>.py` with a `PositionalScheme` subclass (its
docstring cites the paper), add one line to `REGISTRY`, and add its reference-value test; the
parametrized tests (causality, document masking, training) pick it up from the registry.
"""

from __future__ import annotations

from flax import nnx

from configs.errors import ConfigError
from models.positions.alibi import ALiBi
from models.positions.base import Dims, PositionalScheme
from models.positions.cope import CoPE
from models.positions.fire import FIRE
from models.positions.kerple import KerpleLog, KerplePower
from models.positions.learned import Learned
from models.positions.none import NoPE
from models.positions.rope import RoPE
from models.positions.sandwich import Sandwich
from models.positions.sinusoidal import Sinusoidal
from models.positions.t5 import T5Bias
from models.positions.xpos import XPos

REGISTRY: dict[str, type[PositionalScheme]] = {
    "none": NoPE,
    "learned": Learned,
    "sinusoidal": Sinusoidal,
    "rope": RoPE,
    "alibi": ALiBi,
    "t5": T5Bias,
    "kerple_log": KerpleLog,
    "kerple_power": KerplePower,
    "fire": FIRE,
    "sandwich": Sandwich,
    "xpos": XPos,
    "cope": CoPE,
}


def scheme_class(kind: str) -> type[PositionalScheme]:
  """Returns the class registered as `kind`.

  Raises:
    ConfigError: unknown kind, with the list of valid kinds.
  """
  if kind not in REGISTRY:
    raise ConfigError(f"model.position.kind={kind!r} is not a registered scheme; "
                      f"choose one of {sorted(REGISTRY)}")
  return REGISTRY[kind]


def build(cfg, dims: Dims, *, rngs: nnx.Rngs | None = None,
          check_only: bool = False) -> PositionalScheme | None:
  """Validates `cfg` (the `model.position` section) and builds the scheme.

  Args:
    cfg: ConfigDict with `kind` and the scheme's fields.
    dims: model sizes (see `Dims`).
    rngs: parameter RNGs (required unless check_only).
    check_only: only validate; return None.

  Raises:
    ConfigError: unknown kind or an invalid field of the scheme.
  """
  cls = scheme_class(cfg.kind)
  cls.check_config(cfg, dims)
  if check_only:
    return None
  return cls(cfg, dims, rngs=rngs)


__all__ = ["REGISTRY", "Dims", "PositionalScheme", "build", "scheme_class"]
