"""What a LongRoPE factor search searches, from its parent: the three modes of
sweeps/longrope_search.py, their search space, seeds and scoring model.

  long         a RoPE parent trained without RoPE scaling: long factors for target_len > L =
               data.train_len, s = target_len / L (Ding et al., arXiv 2402.13753, Sec. 3.2).
  progressive  a parent trained with rope_scaling="longrope" (a LongRoPE child, fine-tuned at
               L1 = its data.train_len with long factors lambda^(1) for s1 = L1 / L0): new long
               factors for target_len > L1. The factors stay relative to the original RoPE
               frequencies and the original length L0 (the parent's rope_scaling_train_len), so
               s = target_len / L0 (as Phi-3's config: factor = max_position_embeddings /
               original_max_position_embeddings), the attention factor is derived from that s and
               L0, the row switch stays at L0 and the parent's short factors are kept. The search
               starts from the parent's factors: the paper's progressive extension (Sec. 3.3;
               abstract: "a second positional interpolation on the fine-tuned extended LLM").
  short        factors_for="short" on a LongRoPE-trained parent: short factors, for the rows of
               length <= L0, scored at target_len <= L0 (default L0): the paper's readjustment
               "on 8k length to recover the short context window performance" (Sec. 3.3), as
               Phi-3 ships short_factor beside long_factor. Everything the trained model has
               (long factors, n-hat, attention factor, s) stays as trained: in transformers and
               here one attention factor and one n-hat serve both rows.

Seeds (generation 0), by mode:
  long         none, pi, ntk, yarn at s (`longrope_evolution.seed_factors`), n-hat 0.
  progressive  first, with the parent's n-hat: "parent" (lambda^(1) unchanged), "parent_pi"
               (lambda^(1) times
               target_len / L1: PI on top of the extended model) and "parent_rescaled" (the
               authors' `rescale` in evolution/search.py of microsoft/LongRoPE, which maps factors
               found for scale s1 to scale s: 1 + (lambda^(1) - 1)(s - 1)/(s1 - 1); for s1 > 1);
               then none, pi, ntk, yarn at s = target_len / L0 (YaRN's ramp from L0), n-hat 0.
  short        none (all 1, plain RoPE up to L0), "trained" (the parent's short factors, when set
               and not all 1) and "long" (the parent's long factors), with the parent's n-hat.
Upper bound of lambda_i: long and progressive 1.25 s (the paper's space); short the largest of the
parent's long factors (the paper: "reduce the maximum allowed searched lambda" for short lengths;
here the space spans plain RoPE to the factors the model was fine-tuned with).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from configs.errors import ConfigError
from models import rope_scaling
from sweeps.longrope_evolution import UPPER, Settings, seed_factors

MODES = ("long", "progressive", "short")
LONGROPE_FIELDS = ("rope_scaling", "rope_scaling_factor", "rope_scaling_train_len",
                   "longrope_long_factors", "longrope_short_factors", "longrope_keep_first",
                   "longrope_attention_factor")


@dataclasses.dataclass(frozen=True)
class Plan:
  """One search's mode and what follows from the parent (module docstring).

  Attributes:
    mode: one of MODES.
    s: rope_scaling_factor of the scored model (long, progressive: target_len / L0; short: the
      parent's).
    original_len: L0, the scored model's rope_scaling_train_len (its row switch), tokens.
    step: target_len / the parent's data.train_len (the recipe's factor and the output folder's
      name); None for short.
    hi: upper bound of lambda_i.
    keep_first: the n-hat candidates mutations draw from.
    parent_position: the parent's LongRoPE fields (progressive, short), else {}.
  """

  mode: str
  s: float
  original_len: int
  step: float | None
  hi: float
  keep_first: tuple[int, ...]
  parent_position: dict

  @property
  def rows(self) -> str:
    """Which frequency set the candidates replace: "short" or "long"."""
    return "short" if self.mode == "short" else "long"


def _parent_position(pos, train_len: int) -> dict:
  get = lambda name: pos.get(name, rope_scaling.DEFAULTS[name])  # noqa: E731
  out = {name: get(name) for name in LONGROPE_FIELDS}
  out["rope_scaling_train_len"] = rope_scaling.resolve_train_len(pos, train_len)
  out["rope_scaling_factor"] = float(out["rope_scaling_factor"])
  for name in ("longrope_long_factors", "longrope_short_factors"):
    out[name] = tuple(float(x) for x in out[name])
  out["longrope_keep_first"] = int(out["longrope_keep_first"])
  out["longrope_attention_factor"] = float(out["longrope_attention_factor"])
  return out


def check_parent(config, workdir: str, factors_for: str = "long") -> None:
  """Refuses a parent this search cannot use.

  Raises:
    ConfigError: model.position.kind is not "rope"; the run was trained with a RoPE scaling other
      than LongRoPE; factors_for="short" on a run not trained with LongRoPE.
  """
  pos = config.model.position
  if pos.kind != "rope":
    raise ConfigError(f"--workdir={workdir} is a model.position.kind={pos.kind!r} run; the "
                      "LongRoPE search rescales RoPE frequencies (kind='rope' only)")
  scaling = pos.get("rope_scaling", "none")
  if scaling not in ("none", "longrope"):
    raise ConfigError(f"--workdir={workdir} was trained with model.position.rope_scaling="
                      f"{scaling!r}; search on a run trained without RoPE scaling, or with "
                      "'longrope' (progressive extension, --factors_for=short)")
  if factors_for == "short" and scaling != "longrope":
    raise ConfigError(f"--factors_for=short searches the short factors of a LongRoPE-extended "
                      f"run; --workdir={workdir} was trained with rope_scaling={scaling!r} "
                      "(extend it first: python -m sweeps.longrope_search, then "
                      "configs/extend_longrope.py)")


def original_len(config) -> int:
  """L0: the parent's original length (rope_scaling_train_len resolved), tokens."""
  return rope_scaling.resolve_train_len(config.model.position, config.data.train_len)


def make_plan(config, settings: Settings, workdir: str, half: int,
              keep_first_given: bool = True) -> Plan:
  """The mode of a search on `config` (the parent's) and what follows (module docstring).

  Args:
    config: the parent's experiment config.
    settings: the search's settings (checked here too, `longrope_evolution.check_settings`).
    workdir: the parent, for messages.
    half: rot_dim / 2.
    keep_first_given: settings.keep_first_candidates were asked for (short: only the parent's
      n-hat is allowed then).

  Raises:
    ConfigError: `check_parent`, `check_settings`; with factors_for="short" an --attention_factor
      other than -1 or --keep_first_candidates other than the parent's n-hat (the trained model
      has one of each for both rows).
  """
  from sweeps.longrope_evolution import check_settings  # noqa: PLC0415

  check_parent(config, workdir, settings.factors_for)
  pos = config.model.position
  trained = pos.get("rope_scaling", "none") == "longrope"
  base = _parent_position(pos, config.data.train_len) if trained else {}
  length = original_len(config)
  check_settings(settings, config.data.train_len, length)
  if settings.factors_for == "short":
    n = base["longrope_keep_first"]
    if settings.attention_factor != -1:
      raise ConfigError("--attention_factor must stay -1 with --factors_for=short: the short "
                        "factors share the trained model's attention factor (one for both rows, "
                        "as transformers' LongRoPE)")
    if keep_first_given and tuple(settings.keep_first_candidates) != (n,):
      raise ConfigError(f"--keep_first_candidates must be the trained longrope_keep_first={n} "
                        f"with --factors_for=short (one n-hat serves both rows); got "
                        f"{list(settings.keep_first_candidates)}")
    hi = max([1.0, *base["longrope_long_factors"]])
    return Plan("short", base["rope_scaling_factor"], length, None, hi, (n,), base)
  s = settings.target_len / length
  step = settings.target_len / config.data.train_len
  return Plan("progressive" if trained else "long", s, length, step, UPPER * s,
              tuple(settings.keep_first_candidates), base)


def plan_seeds(config, plan: Plan) -> tuple[dict[str, np.ndarray], dict[str, int]]:
  """Generation 0's seeds of `plan` (module docstring).

  Returns:
    ({name: float64 [rot_dim/2] factors in [1, plan.hi], non-decreasing}, {name: n-hat} for the
    seeds whose n-hat is not 0).
  """
  clip = lambda f: np.maximum.accumulate(np.clip(np.asarray(f, np.float64), 1.0, plan.hi))  # noqa: E731
  base = plan.parent_position
  if plan.mode == "long":
    return seed_factors(config, plan.s), {}
  n = base["longrope_keep_first"]
  long = np.asarray(base["longrope_long_factors"], np.float64)
  if plan.mode == "short":
    seeds = {"none": np.ones(len(long))}
    short = base["longrope_short_factors"]
    if short and not np.all(np.asarray(short) == 1.0):
      seeds["trained"] = clip(short)
    seeds["long"] = clip(long)
    return seeds, {k: n for k in seeds}
  seeds = seed_factors(config, plan.s, plan.original_len)
  s1 = base["rope_scaling_factor"]
  parent = {"parent": clip(long),
            "parent_pi": clip(long * plan.step)}
  if s1 > 1:
    parent["parent_rescaled"] = clip(1.0 + (long - 1.0) * (plan.s - 1.0) / (s1 - 1.0))
  return {**parent, **seeds}, {k: n for k in parent}  # the parent's first (population < 7)


def search_position(plan: Plan, settings: Settings, keep_first: int, half: int) -> dict:
  """The model.position fields of the scored model for n-hat `keep_first`: placeholders where the
  candidates enter (`RoPE.set_search_frequencies`), the rest as `plan` says."""
  if plan.mode == "long":
    return {"rope_scaling_factor": plan.s, "rope_scaling_train_len": plan.original_len,
            "longrope_long_factors": (plan.s,) * half, "longrope_short_factors": (),
            "longrope_keep_first": int(keep_first),
            "longrope_attention_factor": float(settings.attention_factor)}
  out = dict(plan.parent_position)
  if plan.mode == "progressive":
    out.update(rope_scaling_factor=plan.s, longrope_long_factors=(plan.s,) * half,
               longrope_keep_first=int(keep_first),
               longrope_attention_factor=float(settings.attention_factor))
  out.pop("rope_scaling")
  return out


def result_position(plan: Plan, settings: Settings, best: dict) -> dict:
  """factors.json's model_position: the LongRoPE fields of the model the best candidate makes."""
  pos = {"rope_scaling": "longrope",
         **search_position(plan, settings, best["keep_first"], len(best["factors"]))}
  key = "longrope_short_factors" if plan.mode == "short" else "longrope_long_factors"
  pos[key] = [float(x) for x in best["factors"]]
  return {k: list(v) if isinstance(v, tuple) else v for k, v in pos.items()}
