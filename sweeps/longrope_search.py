"""LongRoPE's rescale-factor search: `python -m sweeps.longrope_search --workdir=<rope run> --target_len=<tokens>`.

Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753,
Sec. 3.2 and Algorithm 1: an evolutionary search, on the trained (parent) model itself, for
per-pair rescale factors lambda_i (RoPE pair i rotates with theta_i / lambda_i) and for n-hat,
the number of initial positions that keep the original frequencies, scored by the perplexity of
held-out text at the target length L' = s L. The result feeds LongRoPE fine-tuning
(configs/extend_longrope.py) or eval-time LongRoPE (`eval.extension=longrope`):

  python -m sweeps.longrope_search --workdir=<parent> --target_len=1024
  python train.py --config=configs/extend_longrope.py:<parent>,4 --workdir=<child>

Search (this file; the names in brackets are the paper's):
  space       lambda_i in [1, 1.25 s] on a grid of `GRID` = 0.01 (the paper's "step size 0.01"
              up to "1.25 x s"), non-decreasing in i ("monotonically non-decreasing
              constraint": lower frequencies, larger i, are interpolated at least as much), the
              same vector for every rotary layer; n-hat from --keep_first_candidates.
  generation 0 ("optimized initial population"): the factors of four methods, as the per-pair
              ratio theta_i / theta'_i of their frequencies, with n-hat = 0: none (all 1, plain
              RoPE), PI (all s), NTK-aware (s^(2i/(d-2)), `rope_scaling.ntk_inv_freq`) and YaRN
              (`rope_scaling.yarn_inv_freq` with the parent's YaRN fields), then mutations of PI,
              NTK and YaRN in turn up to --population candidates. Their scores are the baselines.
  generation g >= 1: the --parents best so far survive ("top-k"); the rest of the population
              are new children, half (rounded up) by mutation of a random parent, half by
              crossover of two ("mutation / crossover with mono constraint"). A mutation
              resamples each lambda_i with probability --mutation_prob uniformly from the grid
              values between its neighbours (so the child is non-decreasing by construction) and
              n-hat with the same probability from the candidates; a crossover takes each lambda_i
              and n-hat from either parent with probability 1/2 and is rejected when not
              non-decreasing (up to `CROSSOVER_TRIES` tries, then a mutation of the first parent,
              as the authors' code). A child already scored is rejected and drawn again.
  random      generation g draws from numpy `default_rng([seed, g])` only, so a resumed search
              draws what the uninterrupted one would have; ties in perplexity go to the
              candidate scored first.

Scoring: negative log-likelihood (nats per token) -> perplexity of the parent's checkpoint at
exactly --target_len tokens, on the non-overlapping windows of `eval/perplexity.py` from the
starts of the run's eval.split documents (--eval_tokens scored tokens split over the documents:
the windows eval.run scores with eval.max_tokens_per_length = --eval_tokens), the same windows
for every candidate. The model is the parent's with rope_scaling="longrope" (short factors all
1, LongRoPE's attention factor sqrt(1 + ln s / ln L) on q and k unless --attention_factor is set;
the authors' search applies the same "su" factor), compiled once per n-hat (keep_first is static):
the candidate's inverse frequencies theta_i / lambda_i enter the jitted scoring function as an
argument (`RoPE.set_search_frequencies`).

Files, in --out (default `<workdir>/longrope_search/x<s:g>`):
  search_state.json  rewritten atomically after every generation: settings, parent (workdir,
                     step, config hash), the windows scored, the last generation done, the
                     population (ids), every scored candidate {id, factors, keep_first, nll,
                     ppl, origin, generation} and the best per generation. Running the same
                     command again continues from it (a larger --generations extends a finished
                     search); one made with other settings or another parent checkpoint is
                     refused.
  factors.json       when the search is complete: {"model_position": the model.position fields
                     of LongRoPE, "parent", "target_len", "val_ppl" (best), "baselines" (ppl of
                     the seeds none / pi / ntk / yarn, scored as search candidates), "methods"
                     (ppl of the eval-time methods as published: plain RoPE, PI, NTK without
                     an attention factor, YaRN with its own), "population", "generations",
                     ...}, read by configs/extend_longrope.py.
  factors.png        the best lambda_i per pair against PI's constant s, and the best perplexity
                     per generation against the baselines.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx
from tqdm import tqdm

from configs.errors import ConfigError, mesh_shape, parse_flags
from configs.validate import validate
from data.inputs import load_splits
from data.tokenizers import get_tokenizer
from eval import perplexity
from runs.plots import save_png, subplots
from runs.files import write_json
from models import extensions, rope_scaling, sharding
from models.positions import Dims
from models.positions.rope import rotary_dim
from models.sharding import replicated
from models.spec import model_spec
from runs.checkpoint import restore_params
from runs import distributed
from configs.stored import load_run_config
from runs.workdir import config_hash

GRID = 0.01  # granularity of mutated lambda_i (the paper's step size)
UPPER = 1.25  # lambda_i <= UPPER * s (the paper's search space)
CROSSOVER_TRIES = 20  # uniform crossovers tried before falling back to a mutation
MUTATION_TRIES = 200  # mutations tried before giving up on a new child
STATE_FILE, FACTORS_FILE, FIGURE_FILE = "search_state.json", "factors.json", "factors.png"
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

  def fingerprint(self) -> dict:
    """The settings a state file must share to be continued (all but `generations`)."""
    d = dataclasses.asdict(self)
    d.pop("generations")
    d["keep_first_candidates"] = list(self.keep_first_candidates)
    return d


def _int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_settings(settings: Settings, train_len: int) -> None:
  """Refuses bad settings before anything is loaded or compiled.

  Raises:
    ConfigError: one line naming the flag: target_len not an integer > train_len; population <
      2; parents not in [1, population); generations < 0; mutation_prob not in (0, 1];
      keep_first_candidates empty, not integers in [0, target_len) or repeated; eval_tokens <
      target_len; attention_factor not -1 or > 0; seed not an integer >= 0.
  """
  s = settings
  if not (_int(s.target_len) and s.target_len > train_len):
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


def check_parent(config, workdir: str) -> None:
  """Refuses a parent LongRoPE cannot extend.

  Raises:
    ConfigError: model.position.kind is not "rope", or the run was trained with a RoPE scaling.
  """
  pos = config.model.position
  if pos.kind != "rope":
    raise ConfigError(f"--workdir={workdir} is a model.position.kind={pos.kind!r} run; the "
                      "LongRoPE search rescales RoPE frequencies (kind='rope' only)")
  if pos.get("rope_scaling", "none") != "none":
    raise ConfigError(f"--workdir={workdir} was trained with model.position.rope_scaling="
                      f"{pos.rope_scaling!r}; search on a run trained without RoPE scaling")


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
  def make(cls, half: int, s: float, keep_first: Sequence[int]) -> "Space":
    hi = UPPER * s
    count = int(math.floor((hi - 1.0) / GRID + 1e-9)) + 1
    grid = np.round(1.0 + GRID * np.arange(count), 10)
    return cls(half, hi, grid, tuple(int(k) for k in keep_first))

  def valid(self, factors: np.ndarray) -> bool:
    """Within [1, hi] and non-decreasing (the paper's constraint)."""
    f = np.asarray(factors, np.float64)
    return (f.shape == (self.half,) and bool(np.all(f >= 1.0)) and bool(np.all(f <= self.hi + 1e-9))
            and bool(np.all(np.diff(f) >= 0)))


def seed_factors(config, s: float) -> dict[str, np.ndarray]:
  """The rescale factors of the seeded methods: theta_i / theta'_i per RoPE pair.

  none: 1 (plain RoPE); pi: s (Chen et al., arXiv 2306.15595: positions m/s = frequencies
  theta_i/s); ntk: s^(2i/(d-2)) (the base b s^(d/(d-2)), Peng et al., arXiv 2309.00071, Eq. 16;
  left out for d < 4); yarn: theta_i / h(theta_i) of "NTK-by-parts" (Eq. 17-20) with the config's
  yarn_alpha, yarn_beta, yarn_ramp and yarn_truncate and L = data.train_len, from rope_theta. YaRN's
  attention factor is not part of its seed: every candidate gets the search's attention factor.

  Args:
    config: the parent's experiment config.
    s: target_len / train_len.

  Returns:
    {name: float64 [rot_dim/2] factors >= 1, non-decreasing}, in `SEEDS` order.
  """
  pos = config.model.position
  d = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction)
  theta = float(pos.rope_theta)
  base = rope_scaling.base_inv_freq(d, theta).astype(np.float64)
  i = np.arange(d // 2, dtype=np.float64)
  out = {"none": np.ones(d // 2), "pi": np.full(d // 2, float(s))}
  if d >= 4:
    out["ntk"] = float(s) ** (2.0 * i / (d - 2))
  get = lambda name: pos.get(name, rope_scaling.DEFAULTS[name])  # noqa: E731
  yarn = rope_scaling.yarn_inv_freq(d, theta, config.data.train_len, float(s),
                                    float(get("yarn_alpha")), float(get("yarn_beta")),
                                    get("yarn_ramp"), bool(get("yarn_truncate")))
  out["yarn"] = base / yarn.astype(np.float64)
  # float32 rounding can put a ratio a hair outside [1, s] or out of order: clip, then sort.
  return {k: np.maximum.accumulate(np.clip(v, 1.0, float(s))) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# Evolution (model-free: `score` is any function of a candidate).


def mutate(rng: np.random.Generator, factors: np.ndarray, keep_first: int, space: Space,
           prob: float) -> tuple[np.ndarray, int]:
  """One mutation (module docstring): each lambda_i with probability `prob` redrawn uniformly from
  the grid values in [lambda_{i-1} (new), lambda_{i+1} (old)] (1 and hi at the ends), so the child
  stays non-decreasing and in bounds; n-hat with probability `prob` redrawn from the candidates.

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
                  prob: float, seed: int) -> list[tuple]:
  """The `count` children of `generation` as [(factors, n-hat, origin)] (module docstring): for
  generation 0 the seeds and mutations of them; later, mutations then crossovers of the best
  `parents` so far. Draws from default_rng([seed, generation]) only."""
  rng = np.random.default_rng([seed, generation])
  seen = {_key(c["factors"], c["keep_first"]) for c in state["candidates"]}
  out = []
  if generation == 0:
    for name, f in seeds.items():
      if len(out) < count and _key(f, 0) not in seen:
        out.append((f, 0, name))
        seen.add(_key(f, 0))
    pool = [(seeds[n], 0, n) for n in seeds if n != "none"] or [(seeds["none"], 0, "none")]
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
                    progress: bool = True) -> dict:
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
    made = _new_children(state, g, count, seeds, space, settings.mutation_prob, settings.seed)
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


# ---------------------------------------------------------------------------------------------
# Scoring with the parent's model.


def search_config(config, s: float, keep_first: int, attention_factor: float,
                  factors: Sequence[float] | None = None):
  """The parent's config as eval-time LongRoPE (`extensions.apply_extension`), factor s.

  Args:
    config: the parent's experiment config.
    s: rope_scaling_factor.
    keep_first: longrope_keep_first (n-hat).
    attention_factor: longrope_attention_factor (-1 = derived).
    factors: longrope_long_factors (None = all s, PI, the placeholder the search replaces).

  Returns:
    A new, validated ConfigDict with rope_scaling="longrope" and rope_scaling_train_len = the
    parent's data.train_len.
  """
  c = ml_collections.ConfigDict(config.to_dict())
  pos = c.model.position
  half = rotary_dim(Dims.from_config(c).head_dim, pos.rotary_fraction) // 2
  with pos.unlocked(), pos.ignore_type():
    pos.longrope_long_factors = tuple(float(x) for x in (factors if factors is not None
                                                         else (s,) * half))
    pos.longrope_short_factors = ()
    pos.longrope_keep_first = int(keep_first)
    pos.longrope_attention_factor = float(attention_factor)
    pos.rope_scaling_train_len = int(config.data.train_len)
  return extensions.apply_extension(c, "longrope", s)


def make_score_fn(graphdef: nnx.GraphDef, mesh) -> Callable:
  """Compiles `(params, long_inv_freq, batch) -> (NLL sum per position, tokens per position)`.

  `eval.perplexity.make_nll_fn` with the long-row inverse frequencies as an argument: the merged
  model's RoPE takes them through `set_search_frequencies`, so one compilation scores every
  candidate (of one n-hat; keep_first is static).

  Args:
    graphdef: the LongRoPE Decoder's graph definition.
    mesh: device mesh.

  Returns:
    A jitted function of (params, float32 [rot_dim/2] or [num_layers, rot_dim/2], batch as
    `eval.perplexity.score_windows_by_position` builds it) -> two replicated float32 [seq].
  """
  def nll(params, long_inv_freq, batch):
    model = nnx.merge(graphdef, params)
    model.position.set_search_frequencies(long_inv_freq)
    logits = model(batch["inputs"], batch["positions"], batch["segment_ids"])
    per_token = perplexity.token_nll(logits.astype(jnp.float32), batch["targets"]) * batch["weights"]
    return per_token.sum(axis=0), batch["weights"].sum(axis=0)

  return jax.jit(nll, out_shardings=(replicated(mesh), replicated(mesh)))


class Scorer:
  """Perplexity of the parent at target_len for a candidate (factors, n-hat).

  One jitted function per n-hat (`make_score_fn`), made on first use and kept; the windows and
  parameters are fixed. `compilations()` reports how often each was compiled.
  """

  def __init__(self, config, settings: Settings, s: float, params, windows, mesh):
    self.config, self.settings, self.s = config, settings, s
    self.params, self.windows, self.mesh = params, windows, mesh
    pos = config.model.position
    self.rot = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction)
    self.thetas = tuple(float(t) for t in (pos.get("rope_theta_per_layer", ()) or ()))
    self.theta = float(pos.rope_theta)
    # Windows per forward pass: eval.batch_tokens' worth, but no more than there are (padding
    # rows would cost as much as scored ones).
    self.batch = max(1, min(config.eval.batch_tokens // settings.target_len,
                            len(windows["inputs"])))
    self.fns: dict[int, Callable] = {}

  def inv_freq(self, factors) -> np.ndarray:
    """theta_i / lambda_i as the model built from these factors computes them
    (`rope_scaling.longrope_inv_freq`): float32 [rot_dim/2], or [num_layers, rot_dim/2] with
    rope_theta_per_layer."""
    f = tuple(float(x) for x in factors)
    if self.thetas:
      return np.stack([rope_scaling.longrope_inv_freq(self.rot, t, f) for t in self.thetas])
    return rope_scaling.longrope_inv_freq(self.rot, self.theta, f)

  def _fn(self, keep_first: int) -> Callable:
    if keep_first not in self.fns:
      c = search_config(self.config, self.s, keep_first, self.settings.attention_factor)
      self.fns[keep_first] = make_score_fn(model_spec(c, self.mesh).graphdef, self.mesh)
    return self.fns[keep_first]

  def __call__(self, factors, keep_first: int) -> tuple[float, float]:
    """(NLL, nats per token; perplexity) of the candidate on the fixed windows."""
    fn = self._fn(int(keep_first))
    inv = jax.device_put(jnp.asarray(self.inv_freq(factors)), replicated(self.mesh))
    scores = perplexity.score_windows_by_position(lambda p, b: fn(p, inv, b), self.params,
                                                  self.windows, batch_size=self.batch,
                                                  mesh=self.mesh)
    nll = scores.nll_sum / scores.tokens
    return nll, math.exp(nll) if nll < 700 else math.inf

  def compilations(self) -> dict[int, int]:
    """{n-hat: times its scoring function was compiled} (1 each when the cache works)."""
    return {n: int(fn._cache_size()) for n, fn in self.fns.items()}  # noqa: SLF001


METHODS = ("none", "pi", "ntk", "yarn")  # eval-time methods scored for comparison


def method_scores(config, s: float, scorer: Scorer) -> dict[str, dict | None]:
  """The eval-time methods themselves (`extensions.apply_extension`, factor s) on the search's
  windows: none = plain RoPE (no attention factor), pi, ntk and yarn with its own attention factor
  0.1 ln s + 1 -- unlike the seeds (`SEEDS`), which share the search's attention factor. One
  compilation each (`perplexity.make_nll_fn`).

  Returns:
    {name: {"nll": nats per token, "ppl"}, or None where the method does not apply (ntk with
    fewer than 4 rotated features)}.
  """
  out = {}
  for name in METHODS:
    try:
      c = extensions.apply_extension(config, name, s)
    except ConfigError:
      out[name] = None
      continue
    fn = perplexity.make_nll_fn(model_spec(c, scorer.mesh).graphdef, scorer.mesh)
    scores = perplexity.score_windows_by_position(fn, scorer.params, scorer.windows,
                                                  batch_size=scorer.batch, mesh=scorer.mesh)
    nll = scores.nll_sum / scores.tokens
    out[name] = {"nll": nll, "ppl": math.exp(nll) if nll < 700 else None}
  return out


def search_windows(config, settings: Settings) -> tuple[dict, dict]:
  """The fixed windows every candidate is scored on (module docstring).

  Returns:
    (windows: dict of [num_windows, target_len] arrays as `perplexity.evaluation_windows`,
     info: {"split", "documents" (that gave a window), "windows", "tokens" (scored)}).

  Raises:
    ConfigError: the corpus cannot be read, or no document of eval.split holds target_len + 1
      tokens.
  """
  split = config.eval.split
  docs = load_splits(config).get(split, [])
  tokenizer = get_tokenizer(config.data.tokenizer)
  per_doc = -(-settings.eval_tokens // max(1, len(docs)))
  windows = perplexity.evaluation_windows(docs, tokenizer, settings.target_len,
                                          max_tokens_per_doc=per_doc)
  if len(windows["inputs"]) == 0:
    raise ConfigError(f"no {split} document holds --target_len + 1 = {settings.target_len + 1} "
                      "tokens; lower --target_len")
  used = sum(len(tokenizer.encode(d.data)) > settings.target_len for d in docs)
  return windows, {"split": split, "documents": int(used), "windows": int(len(windows["inputs"])),
                   "tokens": int(windows["weights"].sum()), "protocol": "non_overlapping",
                   "max_tokens_per_length": settings.eval_tokens}


def _stored_hash(workdir: str, config) -> str:
  """The config hash config.json records (the run's identity), else that of the loaded config."""
  import json  # noqa: PLC0415
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      return str(json.load(f)["config_hash"])
  except (OSError, ValueError, KeyError):
    return config_hash(config)


def _mesh(config, devices):
  """The run's mesh if it fits `devices`, else data-parallel over them (as eval.run)."""
  try:
    mesh_shape(config.mesh, len(devices))
  except ConfigError:
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
  return sharding.make_mesh(config.mesh, devices)


def result_record(state: dict, settings: Settings, s: float, train_len: int) -> dict:
  """The content of factors.json for the state's population (module docstring)."""
  population = _rank([state["candidates"][i] for i in state["population"]])
  best = population[0]
  baselines = {c["origin"]: c["ppl"] for c in state["candidates"]
               if c["generation"] == 0 and c["origin"] in SEEDS}
  return {
      "model_position": {
          "rope_scaling": "longrope", "rope_scaling_factor": float(s),
          "rope_scaling_train_len": int(train_len),
          "longrope_long_factors": list(best["factors"]), "longrope_short_factors": [],
          "longrope_keep_first": int(best["keep_first"]),
          "longrope_attention_factor": float(settings.attention_factor)},
      "parent": state["parent"], "target_len": settings.target_len,
      "val_ppl": best["ppl"], "val_nll": best["nll"], "best_id": best["id"],
      "baselines": {k: baselines.get(k) for k in SEEDS},
      "methods": {k: (state["methods"][k] or {}).get("ppl") for k in METHODS
                  if k in state.get("methods", {})},
      "population": [{k: c[k] for k in ("id", "factors", "keep_first", "nll", "ppl", "origin",
                                         "generation")} for c in population],
      "generations": state["best_per_generation"], "eval": state["windows"],
      "search": {**dataclasses.asdict(settings), "grid": GRID, "upper": UPPER * s,
                 "scored": len(state["candidates"])},
      "search_s": state["search_s"], "unit": "ppl = exp(nats per token) at target_len",
      "source": "LongRoPE, Ding et al., arXiv 2402.13753, Sec. 3.2 and Algorithm 1"}


def plot_factors(result: dict, seeds: dict, path: str) -> None:
  """factors.png: (left) the best lambda_i per RoPE pair vs PI's constant s and the other seeds;
  (right) the best perplexity after each generation vs the baselines. Written atomically."""
  fig, (left, right) = subplots(1, 2, figsize=(11, 4), dpi=120)
  pos = result["model_position"]
  best = np.asarray(pos["longrope_long_factors"])
  pairs = np.arange(len(best))
  styles = {"pi": ("PI (all s)", "--"), "ntk": ("NTK-aware", ":"), "yarn": ("YaRN", "-.")}
  for name, (label, style) in styles.items():
    if name in seeds:
      left.plot(pairs, seeds[name], style, color="gray", label=label)
  left.plot(pairs, best, marker="o", color="C0",
            label=f"searched (n-hat = {pos['longrope_keep_first']})")
  left.set_xlabel("RoPE feature pair i (0 = highest frequency)")
  left.set_ylabel("rescale factor lambda_i (theta_i / theta'_i)")
  left.set_title(f"s = {pos['rope_scaling_factor']:g}, target {result['target_len']} tokens")
  left.legend(fontsize=8)
  left.grid(True, alpha=0.3)
  gens = result["generations"]
  ppls = [g["ppl"] for g in gens]
  right.plot([g["generation"] for g in gens], ppls, marker="o", color="C0", label="best so far")
  finite = {k: v for k, v in result["baselines"].items() if v is not None and math.isfinite(v)}
  near = sorted(finite.values())[:2]  # the y range: the best curve and the two best seeds
  top = max([p for p in ppls if p] + near)
  low = min([p for p in ppls if p] + near)
  pad = 0.05 * (top - low) or 0.01 * top
  right.set_ylim(low - pad, top + pad)
  for k, (name, value) in enumerate(finite.items()):
    off = " (off scale)" if value > top + pad else ""
    right.axhline(value, color=f"C{k + 1}", linestyle="--", label=f"seed {name}: {value:.3f}{off}")
  right.set_xlabel("generation (0 = seeded population)")
  right.set_ylabel(f"perplexity at {result['target_len']} tokens (per token)")
  right.legend(fontsize=8)
  right.grid(True, which="both", alpha=0.3)
  fig.tight_layout()
  save_png(fig, path)


def default_out(workdir: str, s: float) -> str:
  """`<workdir>/longrope_search/x<s:g>`: where configs/extend_longrope.py looks for factors.json."""
  return os.path.join(workdir, "longrope_search", f"x{s:g}")


def commands(result: dict, out: str) -> dict[str, str]:
  """The commands that use a finished search: LongRoPE fine-tuning (configs/extend_longrope.py)
  and eval-time LongRoPE (`eval.run`, the factors as --config.model.position overrides)."""
  workdir, pos = result["parent"]["workdir"], result["model_position"]
  s = pos["rope_scaling_factor"]
  arg = f"{workdir},{s:g}"
  if os.path.abspath(out) != os.path.abspath(default_out(workdir, s)):
    arg += "," + os.path.join(out, FACTORS_FILE)
  factors = "(" + ", ".join(repr(float(x)) for x in pos["longrope_long_factors"]) + ")"
  evaluate = [f"--workdir={workdir}", "--config.eval.extension=longrope",
              f"--config.eval.factor={s:g}",
              f"--config.model.position.longrope_long_factors={factors}",
              f"--config.model.position.longrope_keep_first={pos['longrope_keep_first']}"]
  if pos["longrope_attention_factor"] != -1:
    evaluate.append(f"--config.model.position.longrope_attention_factor="
                    f"{pos['longrope_attention_factor']:g}")
  evaluate += [f"--length_multipliers=1,{s:g}",
               f"--config.eval.max_tokens_per_length={result['eval']['max_tokens_per_length']}"]
  return {"finetune": "python train.py " + shlex.join(
              [f"--config=configs/extend_longrope.py:{arg}", f"--workdir={workdir}_longrope_x{s:g}"]),
          "evaluate": "python -m eval.run " + shlex.join(evaluate)}


def _prepare(workdir: str, settings: Settings, step: int | None, devices):
  """Everything checked and loaded before the first compilation: (config, s, out-independent
  parent record, scorer, windows info). Raises ConfigError (see `search`)."""
  config = load_run_config(workdir)
  check_parent(config, workdir)
  check_settings(settings, config.data.train_len)
  if step is not None and not (_int(step) and step >= 0):
    raise ConfigError(f"--step must be a checkpoint step >= 0, or -1 for the latest; got {step!r}")
  s = settings.target_len / config.data.train_len
  config = ml_collections.ConfigDict(config.to_dict())
  mesh = _mesh(config, devices)
  first = search_config(config, s, 0, settings.attention_factor)
  validate(first, len(devices))
  windows, info = search_windows(config, settings)
  params, step = restore_params(workdir, first, model_spec(first, mesh), step)
  parent = {"workdir": os.path.abspath(workdir), "step": int(step),
            "config_hash": _stored_hash(workdir, config)}
  return config, s, parent, Scorer(config, settings, s, params, windows, mesh), info


def search(workdir: str, target_len: int, *, step: int | None = None, population: int = 16,
           generations: int = 6, parents: int = 4, mutation_prob: float = 0.3,
           keep_first_candidates: Sequence[int] = (0, 1, 2, 4, 8, 16, 32),
           eval_tokens: int = 8192, seed: int = 0, attention_factor: float = -1.0,
           out: str | None = None, stop_after_generation: int | None = None,
           devices=None, progress: bool = True) -> dict:
  """Runs (or continues) LongRoPE's factor search on a trained RoPE run (module docstring).

  Args:
    workdir: the parent run (config.json and checkpoints/).
    target_len: L' tokens (> data.train_len); s = target_len / train_len.
    step: checkpoint step (None = the latest).
    population, generations, parents, mutation_prob, keep_first_candidates, eval_tokens, seed,
      attention_factor: see `Settings`.
    out: output folder (None = `default_out(workdir, s)`).
    stop_after_generation: return once this generation is done and saved (None = run to
      --generations); the same call without it continues.
    devices: the devices to score on (None = all).
    progress: show the progress bar.

  Returns:
    The factors.json record (`result_record`) of the current population, plus "complete"
    (True once generation `generations` is done: then factors.json and factors.png are written),
    "out", "commands" and "compilations" ({n-hat: compilations of its scoring function}).

  Raises:
    ConfigError: before any compilation: no run or checkpoint at workdir/step, a parent of another
      kind or trained with a RoPE scaling, a bad setting (`check_settings`), no held-out document
      of target_len + 1 tokens, or a state file in `out` made with other settings or another
      parent checkpoint.
  """
  start = time.perf_counter()
  settings = Settings(target_len, population, generations, parents, mutation_prob,
                      tuple(keep_first_candidates), eval_tokens, seed, attention_factor)
  devices = list(jax.devices() if devices is None else devices)
  config, s, parent, scorer, info = _prepare(workdir, settings, step, devices)
  out = out or default_out(workdir, s)
  state_path = os.path.join(out, STATE_FILE)
  state = load_state(state_path, settings, parent) or new_state(settings, parent, info)
  state["parents"] = settings.parents
  seeds = seed_factors(config, s)
  space = Space.make(scorer.rot // 2, s, settings.keep_first_candidates)
  before, clock = state["search_s"], time.perf_counter()

  def save(st):
    st["search_s"] = round(before + time.perf_counter() - clock, 3)
    if jax.process_index() == 0:
      write_json(state_path, st)

  run_generations(state, scorer, settings, seeds, space,
                  stop_after_generation=stop_after_generation, save=save, progress=progress)
  complete = state["generation"] >= settings.generations
  if complete and "methods" not in state:
    state["methods"] = method_scores(config, s, scorer)
    save(state)
  result = result_record(state, settings, s, config.data.train_len)
  if complete and jax.process_index() == 0:
    write_json(os.path.join(out, FACTORS_FILE), result)
    plot_factors(result, seeds, os.path.join(out, FIGURE_FILE))
  return {**result, "complete": complete, "out": out, "commands": commands(result, out),
          "compilations": scorer.compilations(), "wall_s": time.perf_counter() - start}


# ---------------------------------------------------------------------------------------------
# Command line.

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("workdir", None, "A trained RoPE run's workdir (config.json, checkpoints/).")
  flags.DEFINE_integer("target_len", None, "Target context length L' = s x train_len, tokens.")
  flags.DEFINE_integer("step", -1, "Checkpoint step of the parent; -1 = the latest.")
  flags.DEFINE_integer("population", 16, "Candidates per generation.")
  flags.DEFINE_integer("generations", 6, "Evolved generations after the seeded one.")
  flags.DEFINE_integer("parents", 4, "Survivors (top-k) per generation.")
  flags.DEFINE_float("mutation_prob", 0.3, "Probability of resampling each factor and n-hat.")
  flags.DEFINE_list("keep_first_candidates", ["0", "1", "2", "4", "8", "16", "32"],
                    "LongRoPE's n-hat values to search (positions kept unscaled).")
  flags.DEFINE_integer("eval_tokens", 8192, "Tokens scored per candidate (held-out windows).")
  flags.DEFINE_integer("seed", 0, "Seed of the search's random draws.")
  flags.DEFINE_float("attention_factor", -1.0, "q and k factor; -1 = sqrt(1 + ln s / ln L).")
  flags.DEFINE_integer("stop_after_generation", -1, "Stop once this generation is saved "
                       "(rerun to continue); -1 = run all.")
  flags.DEFINE_string("out", None, "Output folder; default <workdir>/longrope_search/x<s>.")


def _report(result: dict) -> None:
  """Prints the outcome: baselines, best, time, files and the commands that use them."""
  unit = f"ppl at {result['target_len']} tokens"
  print("seeds (the search's attention factor, n-hat 0):")
  for name, value in result["baselines"].items():
    if value is not None:
      print(f"  {name:>5}: {unit} {value:.4f}")
  if result["methods"]:
    print("eval-time methods as published (no attention factor; yarn's own 0.1 ln s + 1):")
  for name, value in result["methods"].items():
    if value is not None:
      print(f"  {name:>5}: {unit} {value:.4f}")
  best = result["model_position"]
  print(f"  best : {unit} {result['val_ppl']:.4f} (candidate {result['best_id']}, n-hat "
        f"{best['longrope_keep_first']}); {result['search']['scored']} candidates scored, "
        f"{result['search_s']:.0f} s of search in all")
  if not result["complete"]:
    print(f"stopped after generation {result['generations'][-1]['generation']}; run the same "
          f"command again to continue ({os.path.join(result['out'], STATE_FILE)})")
    return
  print(f"wrote {os.path.join(result['out'], FACTORS_FILE)} and {FIGURE_FILE}")
  print(f"fine-tune:\n  {result['commands']['finetune']}")
  print(f"evaluate at eval time:\n  {result['commands']['evaluate']}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  distributed.quiet_library_logs()
  try:
    if not FLAGS.workdir or FLAGS.target_len is None:
      raise ConfigError("--workdir (a trained RoPE run) and --target_len (tokens) are required")
    try:
      keep = [int(k) for k in FLAGS.keep_first_candidates]
    except ValueError as e:
      raise ConfigError(f"--keep_first_candidates must be integers; got "
                        f"{FLAGS.keep_first_candidates}") from e
    result = search(FLAGS.workdir, FLAGS.target_len, step=None if FLAGS.step == -1 else FLAGS.step,
                    population=FLAGS.population, generations=FLAGS.generations,
                    parents=FLAGS.parents, mutation_prob=FLAGS.mutation_prob,
                    keep_first_candidates=keep, eval_tokens=FLAGS.eval_tokens, seed=FLAGS.seed,
                    attention_factor=FLAGS.attention_factor, out=FLAGS.out,
                    stop_after_generation=None if FLAGS.stop_after_generation == -1
                    else FLAGS.stop_after_generation)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if jax.process_index() == 0:
    _report(result)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=parse_flags)
