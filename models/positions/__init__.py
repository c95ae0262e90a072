"""Registry of positional schemes: `config.model.position.kind` -> class.

Adding a scheme:
  1. write `models/positions/<name>.py` with a `PositionalScheme` subclass (models/positions/
     base.py; its docstring cites the paper) that overrides the hooks it uses (`embed`, `rotate`,
     `bias`) and declares
       - `config_fields`: the `model.position` fields it reads, name -> (default, one-line
         comment). configs/base.py gathers them from the registry (`config_fields()` below), so
         `--config.model.position.<field>=...` works with no edit there; a field another scheme
         also reads (per_layer, rope_theta, ...) is declared with the same default;
       - `check_config(cfg, dims)`: raises `ConfigError` (configs/errors.py) naming a bad field,
         in one line; configs/validate.py calls it through `build(..., check_only=True)`;
       - `relative = True` if its positions reach attention only as ids through `rotate` /
         `bias`, so the eval-time position-id transforms (self_extend, string, lm_infinite;
         models/extensions.py) apply to it;
       - optionally `kernel_spec` (the fused kernel; without it attention falls back to XLA)
         and `max_position` / `max_position_hint` (a limit on the position ids it can represent);
  2. add one line to `REGISTRY`;
  3. add its reference-value test. The parametrized tests (causality, document masking,
     training) pick it up from the registry; tests/test_toy_scheme.py shows a scheme defined and
     registered in a test alone being configured, validated and trained.
"""

from __future__ import annotations

from flax import nnx

from configs.errors import ConfigError
from models import position_transforms
from models.positions.abacus import Abacus
from models.positions.alibi import ALiBi
from models.positions.base import Dims, PositionalScheme
from models.positions.bipe import BiPEALiBi, BiPERoPE
from models.positions.cope import CoPE
from models.positions.dape import DAPE
from models.positions.fire import FIRE
from models.positions.fope import FoPE
from models.positions.fox import FoX
from models.positions.hope import HoPE
from models.positions.kerple import KerpleLog, KerplePower
from models.positions.learned import Learned
from models.positions.lerope import LeRoPE
from models.positions.none import NoPE
from models.positions.p_rope import PRoPE
from models.positions.pope import PoPE
from models.positions.resonance_rope import ResonanceRoPE
from models.positions.rope import RoPE
from models.positions.sandwich import Sandwich
from models.positions.sinusoidal import Sinusoidal
from models.positions.t5 import T5Bias
from models.positions.transformer_xl import TransformerXL
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
    "p_rope": PRoPE,
    "lerope": LeRoPE,
    "hope": HoPE,
    "resonance_rope": ResonanceRoPE,
    "transformer_xl": TransformerXL,
    "dape": DAPE,
    "fope": FoPE,
    "pope": PoPE,
    "fox": FoX,
    "abacus": Abacus,
    "bipe_rope": BiPERoPE,
    "bipe_alibi": BiPEALiBi,
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


def legacy_defaults() -> dict[str, object]:
  """Every registered scheme's `legacy_defaults` (fields whose default changed -> the value
  runs made before the change used), merged."""
  return {k: v for cls in REGISTRY.values() for k, v in cls.legacy_defaults.items()}


def config_fields() -> dict[str, tuple[object, str]]:
  """Every `model.position` field but `kind`, name -> (default, comment), in registry order.

  Each registered scheme's `config_fields` (RoPE's include RoPE scaling's, from
  models/rope_scaling.py), then the eval-time position-id transforms' (models/
  position_transforms.py CONFIG_FIELDS, which every relative scheme reads). A field declared by
  several schemes appears once, with the first declaration's comment.

  Raises:
    ValueError: two declarations of one field disagree on its default (value or type: the type
      locks `--config.model.position.<field>` overrides), or a scheme declares `kind`.
  """
  fields: dict[str, tuple[object, str]] = {}
  owner: dict[str, str] = {}
  sources = [(f"scheme {kind!r}", cls.config_fields) for kind, cls in REGISTRY.items()]
  sources.append(("models/position_transforms.py", position_transforms.CONFIG_FIELDS))
  sources.append(("models/position_transforms.py", position_transforms.TEMPERATURE_FIELDS))
  sources.append(("models/position_transforms.py", position_transforms.EVAL_POSITION_FIELDS))
  for source, declared in sources:
    for name, (default, comment) in declared.items():
      if name == "kind":
        raise ValueError(f"{source} declares model.position.kind, which selects the scheme")
      if name in fields:
        first = fields[name][0]
        if type(first) is not type(default) or first != default:
          raise ValueError(f"model.position.{name} has default {first!r} in {owner[name]} but "
                           f"{default!r} in {source}; a shared field needs one default")
        continue
      fields[name], owner[name] = (default, comment), source
  return fields


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


__all__ = ["REGISTRY", "Dims", "PositionalScheme", "build", "config_fields", "scheme_class"]
