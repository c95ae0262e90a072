"""LongRoPE's evolutionary factor search, model-free: the search space and its constraints, the
seeded population, mutation and crossover, the generations, and the search state a run resumes from.

Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753,
Sec. 3.2 and Algorithm 1. The algorithm (search space, generation 0, generations g >= 1, random
draws) is described under "Search" in the docstring of sweeps/longrope_search.py, the command
that runs it (and its --help). Candidates are scored by any function of (factors, n-hat) ->
(NLL, perplexity): `run_generations`' `score`, on the parent's model `longrope_scoring.Scorer`;
the seeds (`seed_factors`) read the parent's config only, no parameters.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Sequence

import jax
import numpy as np
from tqdm import tqdm

from configs.errors import ConfigError
from models import rope_frequencies, rope_scaling
from models.positions import Dims
from models.positions.rope import rotary_dim

GRID = 0.01  # granularity of mutated lambda_i (the paper's step size)
UPPER = 1.25  # lambda_i <= UPPER * s (the paper's search space)
CROSSOVER_TRIES = 20  # uniform crossovers tried before falling back to a mutation
MUTATION_TRIES = 200  # mutations tried before giving up on a new child
STATE_FORMAT = "longrope_search_state/1"
SEEDS = ("none", "pi", "ntk", "yarn")  # generation 0's methods (the baselines), in this order


@dataclasses.dataclass(frozen=True)
class Settings:
  """What a search is asked for (the CLI's flags; `search`'s arguments).

  Attributes:
    target_len: L' = s L, tokens (> the parent's data.train_len).
    population: candidates per generation (>= 2).
    generations: evolved generations after generation 0 (>= 0).
    parents: survivors per generation, 1 <= parents < population.
    mutation_prob: probability of resampling each lambda_i and n-hat in a mutation, (0, 1].
    keep_first_candidates: n-hat values mutations draw from (ints in [0, target_len)).
    eval_tokens: scored tokens per candidate (>= target_len: at least one window).
    seed: of the search's random draws.
    attention_factor: LongRoPE's factor on q and k; -1 = sqrt(1 + ln s / ln L).
    factors_for: "long" (the factors of rows longer than the original length L; a parent trained
      without RoPE scaling, or progressively one trained with LongRoPE) or "short" (the factors of
      rows up to L, on a LongRoPE-trained parent: the paper's short-context readjustment).
  """

  target_len: int
  population: int = 16
  generations: int = 6
  parents: int = 4
  mutation_prob: float = 0.3
  keep_first_candidates: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32)
  eval_tokens: int = 8192
  seed: int = 0
  attention_factor: float = -1.0
  factors_for: str = "long"

  def fingerprint(self) -> dict:
    """The settings a state file must share to be continued (all but `generations`; factors_for
    only when "short", so state files made before the field continue)."""
    d = dataclasses.asdict(self)
    d.pop("generations")
    if d["factors_for"] == "long":
      d.pop("factors_for")
    d["keep_first_candidates"] = list(self.keep_first_candidates)
    return d


def _int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_settings(settings: Settings, train_len: int, original_len: int | None = None) -> None:
  """Refuses bad settings before anything is loaded or compiled.

  Args:
    settings: the search's settings.
    train_len: the parent's data.train_len.
    original_len: L, the length up to which the short factors serve (factors_for="short").

  Raises:
    ConfigError: one line naming the flag: factors_for not "long" or "short"; target_len not an
      integer > train_len (long), or not in [2, L] (short); population <
      2; parents not in [1, population); generations < 0; mutation_prob not in (0, 1];
      keep_first_candidates empty, not integers in [0, target_len) or repeated; eval_tokens <
      target_len; attention_factor not -1 or > 0; seed not an integer >= 0.
  """
  s = settings
  if s.factors_for not in ("long", "short"):
    raise ConfigError(f"--factors_for must be 'long' or 'short'; got {s.factors_for!r}")
  if s.factors_for == "short":
    if not (_int(s.target_len) and 2 <= s.target_len <= (original_len or 0)):
      raise ConfigError(f"--target_len must be an integer in [2, {original_len}] with "
                        f"--factors_for=short (the short factors serve rows up to the original "
                        f"length L={original_len}); got {s.target_len!r}")
  elif not (_int(s.target_len) and s.target_len > train_len):
    raise ConfigError(f"--target_len must be an integer > the run's data.train_len={train_len} "
                      f"(LongRoPE extends the context); got {s.target_len!r}")
  if not (_int(s.population) and s.population >= 2):
    raise ConfigError(f"--population must be an integer >= 2; got {s.population!r}")
  if not (_int(s.parents) and 1 <= s.parents < s.population):
    raise ConfigError(f"--parents must be an integer in [1, --population={s.population}) (the "
                      f"survivors; the rest are new children); got {s.parents!r}")
  if not (_int(s.generations) and s.generations >= 0):
    raise ConfigError(f"--generations must be an integer >= 0; got {s.generations!r}")
  if not (isinstance(s.mutation_prob, (int, float)) and 0 < s.mutation_prob <= 1):
    raise ConfigError(f"--mutation_prob must lie in (0, 1]; got {s.mutation_prob!r}")
  ks = s.keep_first_candidates
  if (not ks or not all(_int(k) and 0 <= k < s.target_len for k in ks)
      or len(set(ks)) != len(ks)):
    raise ConfigError(f"--keep_first_candidates must be distinct integers in [0, --target_len="
                      f"{s.target_len}) (LongRoPE's n-hat, positions); got {list(ks)!r}")
  if not (_int(s.eval_tokens) and s.eval_tokens >= s.target_len):
    raise ConfigError(f"--eval_tokens must be an integer >= --target_len={s.target_len} (at least "
                      f"one window); got {s.eval_tokens!r}")
  a = s.attention_factor
  if not (rope_scaling.is_number(a) and (a == -1 or a > 0)):
    raise ConfigError(f"--attention_factor must be -1 (sqrt(1 + ln s / ln L)) or a number > 0; "
                      f"got {a!r}")
  if not (_int(s.seed) and s.seed >= 0):
    raise ConfigError(f"--seed must be an integer >= 0; got {s.seed!r}")



# ---------------------------------------------------------------------------------------------
# The search space and the seeds.


@dataclasses.dataclass(frozen=True)
class Space:
  """The search space: `half` = rot_dim/2 factors in [1, hi] on `grid`, n-hat from `keep_first`.

  Attributes:
    half: number of factors (RoPE feature pairs).
    hi: the upper bound UPPER * s.
    grid: float64 [K] the values a mutation draws from, 1, 1 + GRID, ... <= hi.
    keep_first: the n-hat candidates.
  """

  half: int
  hi: float
  grid: np.ndarray
  keep_first: tuple[int, ...]

  @classmethod
  def make(cls, half: int, s: float, keep_first: Sequence[int],
           hi: float | None = None) -> "Space":
    """`hi` = None: UPPER * s (the paper's space)."""
    hi = UPPER * s if hi is None else float(hi)
    count = int(math.floor((hi - 1.0) / GRID + 1e-9)) + 1
    grid = np.round(1.0 + GRID * np.arange(count), 10)
    return cls(half, hi, grid, tuple(int(k) for k in keep_first))

  def valid(self, factors: np.ndarray) -> bool:
    """Within [1, hi] and non-decreasing (the paper's constraint)."""
    f = np.asarray(factors, np.float64)
    return (f.shape == (self.half,) and bool(np.all(f >= 1.0)) and bool(np.all(f <= self.hi + 1e-9))
            and bool(np.all(np.diff(f) >= 0)))


def seed_factors(config, s: float, train_len: int | None = None) -> dict[str, np.ndarray]:
  """The rescale factors of the seeded methods: theta_i / theta'_i per RoPE pair.

  none: 1 (plain RoPE); pi: s (Chen et al., arXiv 2306.15595: positions m/s = frequencies
  theta_i/s); ntk: s^(2i/(d-2)) (the base b s^(d/(d-2)), Peng et al., arXiv 2309.00071, Eq. 16;
  left out for d < 4); yarn: theta_i / h(theta_i) of "NTK-by-parts" (Eq. 17-20) with the config's
  yarn_alpha, yarn_beta, yarn_ramp and yarn_truncate and L = data.train_len, from rope_theta. YaRN's
  attention factor is not part of its seed: every candidate gets the search's attention factor.

  Args:
    config: the parent's experiment config.
    s: target_len / train_len.
    train_len: YaRN's L (None = data.train_len; a LongRoPE-trained parent's original length).

  Returns:
    {name: float64 [rot_dim/2] factors >= 1, non-decreasing}, in `SEEDS` order.
  """
  pos = config.model.position
  d = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction)
  theta = float(pos.rope_theta)
  base = rope_frequencies.base_inv_freq(d, theta).astype(np.float64)
  i = np.arange(d // 2, dtype=np.float64)
  out = {"none": np.ones(d // 2), "pi": np.full(d // 2, float(s))}
  if d >= 4:
    out["ntk"] = float(s) ** (2.0 * i / (d - 2))
  get = lambda name: pos.get(name, rope_scaling.DEFAULTS[name])  # noqa: E731
  yarn = rope_frequencies.yarn_inv_freq(d, theta, train_len or config.data.train_len, float(s),
                                        float(get("yarn_alpha")), float(get("yarn_beta")),
                                        get("yarn_ramp"), bool(get("yarn_truncate")))
  out["yarn"] = base / yarn.astype(np.float64)
  # float32 rounding can put a ratio a hair outside [1, s] or out of order: clip, then sort.
  return {k: np.maximum.accumulate(np.clip(v, 1.0, float(s))) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# Evolution (model-free: `score` is any function of a candidate).


def mutate(rng: np.random.Generator, factors: np.ndarray, keep_first: int, space: Space,
           prob: float) -> tuple[np.ndarray, int]:
  """One mutation (sweeps/longrope_search.py's docstring): each lambda_i with probability `prob`
  redrawn uniformly from the grid values in [lambda_{i-1} (new), lambda_{i+1} (old)] (1 and hi at
  the ends), so the child stays non-decreasing and in bounds; n-hat with probability `prob`
  redrawn from the candidates.

  Args:
    rng: the generation's generator.
    factors: float64 [half] a valid (non-decreasing, in bounds) parent.
    keep_first: the parent's n-hat.
    space: the search space.
    prob: per-gene probability, (0, 1].

  Returns:
    (float64 [half] factors, n-hat); may equal the parent (the caller draws again).
  """
  new = np.array(factors, np.float64)
  for i in range(space.half):
    if rng.random() >= prob:
      continue
    lo = new[i - 1] if i else 1.0
    hi = new[i + 1] if i + 1 < space.half else space.hi
    options = space.grid[(space.grid >= lo - 1e-12) & (space.grid <= hi + 1e-12)]
    if len(options):
      new[i] = options[rng.integers(len(options))]
  n = keep_first
  if rng.random() < prob:
    n = space.keep_first[rng.integers(len(space.keep_first))]
  return new, int(n)


def crossover(rng: np.random.Generator, a: tuple[np.ndarray, int], b: tuple[np.ndarray, int],
              space: Space) -> tuple[np.ndarray, int] | None:
  """Uniform crossover: each lambda_i and n-hat from parent a or b with probability 1/2; a child
  that is not non-decreasing is rejected (LongRoPE's monotone constraint).

  Returns:
    (float64 [half] factors, n-hat), or None if the draw was rejected.
  """
  take_b = rng.random(space.half) < 0.5
  factors = np.where(take_b, b[0], a[0])
  n = b[1] if rng.random() < 0.5 else a[1]
  return (factors, int(n)) if space.valid(factors) else None


def _key(factors, keep_first) -> tuple:
  return tuple(float(x) for x in factors), int(keep_first)


def _child(rng, parents, space: Space, prob: float, seen: set, by_crossover: bool):
  """A new (unseen) child of `parents` [(factors, n-hat, id)], or None after MUTATION_TRIES."""
  if by_crossover and len(parents) >= 2:
    for _ in range(CROSSOVER_TRIES):
      i, j = sorted(rng.choice(len(parents), 2, replace=False))
      child = crossover(rng, parents[i][:2], parents[j][:2], space)
      if child is not None and _key(*child) not in seen:
        return child, f"crossover {parents[i][2]} x {parents[j][2]}"
  first = int(rng.integers(len(parents)))
  for _ in range(MUTATION_TRIES):
    child = mutate(rng, parents[first][0], parents[first][1], space, prob)
    if _key(*child) not in seen:
      return child, f"mutation of {parents[first][2]}"
  return None


def _rank(candidates: list[dict]) -> list[dict]:
  """Best first: by ppl (None = not finite, last), ties to the earlier id."""
  return sorted(candidates, key=lambda c: (c["ppl"] is None, c["ppl"] or 0.0, c["id"]))


def _new_children(state: dict, generation: int, count: int, seeds: dict, space: Space,
                  prob: float, seed: int, seed_keep_first: dict | None = None) -> list[tuple]:
  """The `count` children of `generation` as [(factors, n-hat, origin)] (sweeps/longrope_search.py's
  docstring): for generation 0 the seeds and mutations of them; later, mutations then crossovers of
  the best `parents` so far. Draws from default_rng([seed, generation]) only."""
  rng = np.random.default_rng([seed, generation])
  seen = {_key(c["factors"], c["keep_first"]) for c in state["candidates"]}
  out = []
  keep = seed_keep_first or {}
  if generation == 0:
    for name, f in seeds.items():
      if len(out) < count and _key(f, keep.get(name, 0)) not in seen:
        out.append((f, keep.get(name, 0), name))
        seen.add(_key(f, keep.get(name, 0)))
    pool = ([(seeds[n], keep.get(n, 0), n) for n in seeds if n != "none"]
            or [(seeds["none"], keep.get("none", 0), "none")])
  else:
    ranked = _rank([state["candidates"][i] for i in state["population"]])
    pool = [(np.asarray(c["factors"]), c["keep_first"], c["id"]) for c in ranked[:state["parents"]]]
  mutations = -(-count // 2)  # later generations: mutations first, then crossovers
  while len(out) < count:
    k = len(out)
    by_crossover = generation > 0 and k >= mutations
    parents = [pool[k % len(pool)]] if generation == 0 else pool
    made = _child(rng, parents, space, prob, seen, by_crossover)
    if made is None:
      break  # the neighbourhood is exhausted (tiny spaces only)
    (f, n), origin = made
    out.append((f, n, origin))
    seen.add(_key(f, n))
  return out


def run_generations(state: dict, score: Callable[[np.ndarray, int], tuple[float, float]],
                    settings: Settings, seeds: dict, space: Space, *,
                    stop_after_generation: int | None = None,
                    save: Callable[[dict], None] = lambda state: None,
                    progress: bool = True, seed_keep_first: dict | None = None) -> dict:
  """Runs generations state["generation"] + 1 .. settings.generations (0 first for a new state).

  Args:
    state: a new state (`new_state`) or one loaded to continue; modified in place.
    score: (float64 [half] factors, n-hat) -> (NLL in nats per token, perplexity); non-finite
      values mark a failed candidate (ranked last).
    settings: the search's settings.
    seeds: `seed_factors`.
    space: the search space.
    stop_after_generation: return once this generation is done (None = all).
    save: called with the state after every generation (writes search_state.json).
    progress: show a tqdm bar over the candidates still to score.
    seed_keep_first: {seed name: its n-hat} (absent: 0), e.g. a LongRoPE parent's own n-hat.

  Returns:
    The state.
  """
  last = settings.generations if stop_after_generation is None else min(
      settings.generations, stop_after_generation)
  todo = range(state["generation"] + 1, last + 1)
  children = settings.population - settings.parents
  total = sum(settings.population if g == 0 else children for g in todo)
  bar = tqdm(total=total, desc="longrope search", leave=False,
             disable=not progress or jax.process_index() != 0)
  for g in todo:
    count = settings.population if g == 0 else children
    made = _new_children(state, g, count, seeds, space, settings.mutation_prob, settings.seed,
                         seed_keep_first)
    for factors, n, origin in made:
      nll, ppl = score(factors, n)
      ok = math.isfinite(nll) and math.isfinite(ppl)
      state["candidates"].append({
          "id": len(state["candidates"]), "factors": [float(x) for x in factors],
          "keep_first": int(n), "nll": nll if ok else None, "ppl": ppl if ok else None,
          "origin": origin, "generation": g})
      bar.update(1)
    new_ids = [c["id"] for c in state["candidates"][-len(made):]] if made else []
    survivors = [] if g == 0 else [c["id"] for c in _rank(
        [state["candidates"][i] for i in state["population"]])[:settings.parents]]
    state["population"] = survivors + new_ids
    best = _rank([state["candidates"][i] for i in state["population"]])[0]
    state["best_per_generation"].append({"generation": g, "ppl": best["ppl"], "id": best["id"],
                                         "scored": len(made)})
    state["generation"] = g
    bar.set_postfix(generation=g, best_ppl=f"{best['ppl']:.4f}" if best["ppl"] else "nan")
    save(state)
  bar.close()
  return state


def new_state(settings: Settings, parent: dict, windows: dict) -> dict:
  """An empty search state: nothing scored (generation -1)."""
  return {"format": STATE_FORMAT, "settings": settings.fingerprint(), "parent": parent,
          "windows": windows, "parents": settings.parents, "generation": -1, "population": [],
          "candidates": [], "best_per_generation": [], "search_s": 0.0,
          "rng": "generation g draws from numpy.random.default_rng([seed, g]) only"}


def load_state(path: str, settings: Settings, parent: dict) -> dict | None:
  """The state to continue from `path`, or None if there is none.

  Raises:
    ConfigError: the file is not a search state, or was made with other settings (all but
      --generations) or another parent checkpoint (workdir config hash or step).
  """
  if not os.path.isfile(path):
    return None
  import json  # noqa: PLC0415 -- read only here
  try:
    with open(path) as f:
      state = json.load(f)
    assert state["format"] == STATE_FORMAT
  except (ValueError, KeyError, AssertionError, TypeError) as e:
    raise ConfigError(f"{path} is not a search state of sweeps.longrope_search ({e}); delete it "
                      "or choose another --out") from e
  for field, now in settings.fingerprint().items():
    if state["settings"].get(field) != now:
      raise ConfigError(f"{path} was made with {field}={state['settings'].get(field)!r}, not "
                        f"{now!r}; rerun with the same settings or choose another --out")
  for field in ("config_hash", "step"):
    if state["parent"].get(field) != parent[field]:
      raise ConfigError(f"{path} was made on another parent checkpoint ({field} "
                        f"{state['parent'].get(field)!r}, now {parent[field]!r}); choose "
                        "another --out (or --step)")
  return state
