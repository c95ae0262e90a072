"""LongRoPE's rescale-factor search: `python -m sweeps.longrope_search --workdir=<rope run> --target_len=<tokens>`.

Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753,
Sec. 3.2 and Algorithm 1: an evolutionary search, on the trained (parent) model itself, for
per-pair rescale factors lambda_i (RoPE pair i rotates with theta_i / lambda_i) and for n-hat,
the number of initial positions that keep the original frequencies, scored by the perplexity of
held-out text at the target length L' = s L. The result feeds LongRoPE fine-tuning
(configs/extend_longrope.py) or eval-time LongRoPE (`eval.extension=longrope`):

  python -m sweeps.longrope_search --workdir=<parent> --target_len=1024
  python train.py --config=configs/extend_longrope.py:<parent>,4 --workdir=<child>

On a parent trained with rope_scaling="longrope" (a LongRoPE child) the same command runs the
paper's later steps (Sec. 3.3; sweeps/longrope_modes.py): --factors_for=short searches the short
factors (rows up to the original length L0, scored at --target_len <= L0, default L0), and a
--target_len beyond its train_len searches new long factors from its own (progressive
extension; factors relative to the original RoPE and L0, s = target_len / L0).

Search (sweeps/longrope_evolution.py; the names in brackets are the paper's):
  space       lambda_i in [1, 1.25 s] on a grid of `GRID` = 0.01 (the paper's "step size 0.01"
              up to "1.25 x s"), non-decreasing in i ("monotonically non-decreasing
              constraint": lower frequencies, larger i, are interpolated at least as much), the
              same vector for every rotary layer; n-hat from --keep_first_candidates.
  generation 0 ("optimized initial population"): the factors of four methods, as the per-pair
              ratio theta_i / theta'_i of their frequencies, with n-hat = 0: none (all 1, plain
              RoPE), PI (all s), NTK-aware (s^(2i/(d-2)), `rope_frequencies.ntk_inv_freq`) and
              YaRN (`rope_frequencies.yarn_inv_freq` with the parent's YaRN fields), then
              mutations of PI, NTK and YaRN in turn up to --population candidates. Their scores
              are the baselines.
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
import time
from typing import Sequence

import jax
import ml_collections
import numpy as np
from absl import flags

from configs.errors import ConfigError, mesh_shape
from configs.validate import validate
from runs.plots import save_png, subplots
from runs.files import write_json
from models import sharding
from models.spec import model_spec
from runs.checkpoint import restore_params
from runs import command_line, distributed, startup
from configs.stored import load_run_config
from models.positions import Dims
from models.positions.rope import rotary_dim
from runs.workdir import config_hash
from sweeps.longrope_evolution import (GRID, Settings, Space, _int, _rank, load_state,
                                       new_state, run_generations)
from sweeps.longrope_modes import (Plan, check_parent, make_plan, original_len, plan_seeds,
                                   result_position, search_position)
from sweeps.longrope_scoring import (METHODS, Scorer, method_scores, search_config,
                                     search_windows)

STATE_FILE, FACTORS_FILE, FIGURE_FILE = "search_state.json", "factors.json", "factors.png"


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


def result_record(state: dict, settings: Settings, plan: Plan, seeds: dict) -> dict:
  """The content of factors.json for the state's population (module docstring)."""
  population = _rank([state["candidates"][i] for i in state["population"]])
  best = population[0]
  baselines = {c["origin"]: c["ppl"] for c in state["candidates"]
               if c["generation"] == 0 and c["origin"] in seeds}
  return {
      "model_position": result_position(plan, settings, best),
      "factors_for": settings.factors_for, "mode": plan.mode, "recipe_factor": plan.step,
      "parent": state["parent"], "target_len": settings.target_len,
      "val_ppl": best["ppl"], "val_nll": best["nll"], "best_id": best["id"],
      "baselines": {k: baselines.get(k) for k in seeds},
      "methods": {k: (v or {}).get("ppl") for k, v in state.get("methods", {}).items()},
      "population": [{k: c[k] for k in ("id", "factors", "keep_first", "nll", "ppl", "origin",
                                         "generation")} for c in population],
      "generations": state["best_per_generation"], "eval": state["windows"],
      "search": {**dataclasses.asdict(settings), "grid": GRID, "upper": plan.hi,
                 "scored": len(state["candidates"])},
      "search_s": state["search_s"], "unit": "ppl = exp(nats per token) at target_len",
      "source": "LongRoPE, Ding et al., arXiv 2402.13753, Sec. 3.2 and Algorithm 1"
                + ("" if plan.mode == "long" else "; Sec. 3.3 (" + (
                    "short-context readjustment)" if plan.mode == "short"
                    else "progressive extension)"))}


def plot_factors(result: dict, seeds: dict, path: str) -> None:
  """factors.png: (left) the best lambda_i per RoPE pair vs PI's constant s and the other seeds;
  (right) the best perplexity after each generation vs the baselines. Written atomically."""
  fig, (left, right) = subplots(1, 2, figsize=(11, 4), dpi=120)
  pos = result["model_position"]
  rows = "short" if result.get("factors_for") == "short" else "long"
  best = np.asarray(pos[f"longrope_{rows}_factors"])
  pairs = np.arange(len(best))
  styles = {"pi": ("PI (all s)", "--"), "ntk": ("NTK-aware", ":"), "yarn": ("YaRN", "-."),
            "parent": ("parent's long factors", "-"), "parent_pi": ("parent x L'/L1", "--"),
            "parent_rescaled": ("parent rescaled to s", ":"), "trained": ("trained short", "-."),
            "long": ("trained long", "--")}
  for name, (label, style) in styles.items():
    if name in seeds:
      left.plot(pairs, seeds[name], style, color="gray", label=label)
  left.plot(pairs, best, marker="o", color="C0",
            label=f"searched {rows} (n-hat = {pos['longrope_keep_first']})")
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


def default_out(workdir: str, s: float, factors_for: str = "long",
                target_len: int | None = None) -> str:
  """`<workdir>/longrope_search/x<s:g>` (s = target_len / the parent's train_len): where
  configs/extend_longrope.py looks for factors.json; `.../short<target_len>` for short factors."""
  if factors_for == "short":
    return os.path.join(workdir, "longrope_search", f"short{target_len}")
  return os.path.join(workdir, "longrope_search", f"x{s:g}")


def _tuple(values) -> str:
  return "(" + ", ".join(repr(float(x)) for x in values) + ")"


def commands(result: dict, out: str, train_len: int) -> dict[str, str]:
  """The commands that use a finished search: LongRoPE fine-tuning (configs/extend_longrope.py;
  not for short factors, which the paper applies without fine-tuning) and eval-time LongRoPE
  (`eval.run`, the factors as --config.model.position overrides; on a LongRoPE-trained parent
  eval.extension=longrope replaces its factors)."""
  workdir, pos = result["parent"]["workdir"], result["model_position"]
  s = pos["rope_scaling_factor"]
  short = result.get("factors_for") == "short"
  evaluate = [f"--workdir={workdir}", "--config.eval.extension=longrope",
              f"--config.eval.factor={s:g}"]
  if short:
    evaluate.append(f"--config.model.position.longrope_short_factors="
                    f"{_tuple(pos['longrope_short_factors'])}")
  else:
    evaluate += [f"--config.model.position.longrope_long_factors="
                 f"{_tuple(pos['longrope_long_factors'])}",
                 f"--config.model.position.longrope_keep_first={pos['longrope_keep_first']}"]
    if pos["longrope_attention_factor"] != -1:
      evaluate.append(f"--config.model.position.longrope_attention_factor="
                      f"{pos['longrope_attention_factor']:g}")
  lengths = f"{result['target_len'] / train_len:g}" if short else (
      f"1,{result['target_len'] / train_len:g}")
  evaluate += [f"--length_multipliers={lengths}",
               f"--config.eval.max_tokens_per_length={result['eval']['max_tokens_per_length']}"]
  out_cmds = {"evaluate": "python -m eval.run " + shlex.join(evaluate)}
  if not short:
    step = result["recipe_factor"]
    arg = f"{workdir},{step:g}"
    if os.path.abspath(out) != os.path.abspath(default_out(workdir, step)):
      arg += "," + os.path.join(out, FACTORS_FILE)
    out_cmds["finetune"] = "python train.py " + shlex.join(
        [f"--config=configs/extend_longrope.py:{arg}", f"--workdir={workdir}_longrope_x{step:g}"])
  return out_cmds


DEFAULT_KEEP_FIRST = (0, 1, 2, 4, 8, 16, 32)


def _prepare(workdir: str, settings: dict, step: int | None, devices, out: str | None):
  """Everything checked and loaded before the first compilation: (config, settings, plan,
  out-independent parent record, scorer, windows info). `settings` are `Settings`' fields, with
  target_len and keep_first_candidates None where not asked for (short: the original length and
  the parent's n-hat; long: `DEFAULT_KEEP_FIRST`). Raises ConfigError (see `search`; an `out`, or
  default output folder, that cannot be written too)."""
  config = load_run_config(workdir)
  check_parent(config, workdir, settings["factors_for"])
  short = settings["factors_for"] == "short"
  keep_given = settings["keep_first_candidates"] is not None
  if not keep_given:
    keep = (int(config.model.position.get("longrope_keep_first", 0)),) if short else (
        DEFAULT_KEEP_FIRST)
    settings = {**settings, "keep_first_candidates": keep}
  if settings["target_len"] is None:
    if not short:
      raise ConfigError(f"--target_len (tokens) is required: {USAGE}")
    settings = {**settings, "target_len": original_len(config)}
  settings = Settings(**{**settings, "keep_first_candidates": tuple(
      settings["keep_first_candidates"])})
  pos = config.model.position
  half = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction) // 2
  plan = make_plan(config, settings, workdir, half, keep_given)
  if step is not None and not (_int(step) and step >= 0):
    raise ConfigError(f"--step must be a checkpoint step >= 0, or -1 for the latest; got {step!r}")
  command_line.check_writable(out or default_out(workdir, plan.step, settings.factors_for,
                                                 settings.target_len), "--out")
  config = ml_collections.ConfigDict(config.to_dict())
  mesh = _mesh(config, devices)
  position = None if plan.mode == "long" else (
      lambda n: search_position(plan, settings, n, half))
  first = search_config(config, plan.s, plan.keep_first[0], settings.attention_factor,
                        position=None if position is None else position(plan.keep_first[0]))
  validate(first, len(devices))
  windows, info = search_windows(config, settings)
  params, step = restore_params(workdir, first, model_spec(first, mesh), step)
  parent = {"workdir": os.path.abspath(workdir), "step": int(step),
            "config_hash": _stored_hash(workdir, config)}
  scorer = Scorer(config, settings, plan.s, params, windows, mesh, position, plan.rows)
  return config, settings, plan, parent, scorer, info


def search(workdir: str, target_len: int | None, *, step: int | None = None,
           population: int = 16, generations: int = 6, parents: int = 4,
           mutation_prob: float = 0.3, keep_first_candidates: Sequence[int] | None = None,
           eval_tokens: int = 8192, seed: int = 0, attention_factor: float = -1.0,
           factors_for: str = "long", out: str | None = None,
           stop_after_generation: int | None = None, devices=None, progress: bool = True) -> dict:
  """Runs (or continues) LongRoPE's factor search on a trained RoPE run (module docstring).

  Args:
    workdir: the parent run (config.json and checkpoints/).
    target_len: L' tokens (> data.train_len); s = target_len / L0 (L0 = train_len for a parent
      without RoPE scaling). factors_for="short": <= L0 (None = L0).
    step: checkpoint step (None = the latest).
    population, generations, parents, mutation_prob, keep_first_candidates, eval_tokens, seed,
      attention_factor, factors_for: see `Settings` (keep_first_candidates None = `DEFAULT_
      KEEP_FIRST`, or the parent's n-hat for short factors).
    out: output folder (None = `default_out`).
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
      kind or trained with a RoPE scaling other than LongRoPE, a bad setting or combination
      (`longrope_modes.make_plan`), no held-out document of target_len + 1 tokens, or a state
      file in `out` made with other settings or another parent checkpoint.
  """
  start = time.perf_counter()
  asked = dict(target_len=target_len, population=population, generations=generations,
               parents=parents, mutation_prob=mutation_prob,
               keep_first_candidates=keep_first_candidates, eval_tokens=eval_tokens, seed=seed,
               attention_factor=attention_factor, factors_for=factors_for)
  devices = list(jax.devices() if devices is None else devices)
  config, settings, plan, parent, scorer, info = _prepare(workdir, asked, step, devices, out)
  out = out or default_out(workdir, plan.step, settings.factors_for, settings.target_len)
  state_path = os.path.join(out, STATE_FILE)
  state = load_state(state_path, settings, parent) or new_state(settings, parent, info)
  state["parents"] = settings.parents
  seeds, seed_keep = plan_seeds(config, plan)
  space = Space.make(scorer.rot // 2, plan.s, plan.keep_first, hi=plan.hi)
  before, clock = state["search_s"], time.perf_counter()

  def save(st):
    st["search_s"] = round(before + time.perf_counter() - clock, 3)
    if jax.process_index() == 0:
      write_json(state_path, st)

  run_generations(state, scorer, settings, seeds, space,
                  stop_after_generation=stop_after_generation, save=save, progress=progress,
                  seed_keep_first=seed_keep)
  complete = state["generation"] >= settings.generations
  if complete and "methods" not in state:
    state["methods"] = method_scores(config, plan.s, scorer,
                                     METHODS if plan.mode == "long" else ("none",))
    save(state)
  result = result_record(state, settings, plan, seeds)
  if complete and jax.process_index() == 0:
    write_json(os.path.join(out, FACTORS_FILE), result)
    plot_factors(result, seeds, os.path.join(out, FIGURE_FILE))
  return {**result, "complete": complete, "out": out,
          "commands": commands(result, out, config.data.train_len),
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
  flags.DEFINE_list("keep_first_candidates", None,
                    "LongRoPE's n-hat values to search (positions kept unscaled); default "
                    "0,1,2,4,8,16,32 (--factors_for=short: the parent's).")
  flags.DEFINE_integer("eval_tokens", 8192, "Tokens scored per candidate (held-out windows).")
  flags.DEFINE_integer("seed", 0, "Seed of the search's random draws.")
  flags.DEFINE_float("attention_factor", -1.0, "q and k factor; -1 = sqrt(1 + ln s / ln L).")
  flags.DEFINE_integer("stop_after_generation", -1, "Stop once this generation is saved "
                       "(rerun to continue); -1 = run all.")
  flags.DEFINE_enum("factors_for", "long", ["long", "short"],
                    "long: factors for rows > the original length (on a RoPE run, or "
                    "progressively on a LongRoPE-trained one); short: rows <= it (a "
                    "LongRoPE-trained run; --target_len <= its original length, default it).")
  flags.DEFINE_string("out", None, "Output folder; default <workdir>/longrope_search/x<s> "
                      "(short: .../short<target_len>).")


def _report(result: dict) -> None:
  """Prints the outcome: baselines, best, time, files and the commands that use them."""
  unit = f"ppl at {result['target_len']} tokens"
  print(f"seeds ({result['mode']} search; the search's attention factor):")
  for name, value in result["baselines"].items():
    if value is not None:
      print(f"  {name:>5}: {unit} {value:.4f}")
  if result["methods"] and result["mode"] != "long":
    print("the parent as trained:")
  elif result["methods"]:
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
  if "finetune" in result["commands"]:
    print(f"fine-tune:\n  {result['commands']['finetune']}")
  print(f"evaluate at eval time:\n  {result['commands']['evaluate']}")


USAGE = "python -m sweeps.longrope_search --workdir=<rope run> --target_len=<tokens>"


def main(argv):
  """`python -m sweeps.longrope_search`: exit 2 with one line on bad input
  (runs.command_line.run: stray arguments and flag errors too)."""
  del argv  # none (runs.command_line.run refuses them)
  distributed.quiet_library_logs()
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  if not FLAGS.workdir or (FLAGS.target_len is None and FLAGS.factors_for == "long"):
    raise ConfigError(f"--workdir (a trained RoPE run) and --target_len (tokens) are required: "
                      f"{USAGE}")
  try:
    keep = (None if FLAGS.keep_first_candidates is None
            else [int(k) for k in FLAGS.keep_first_candidates])
  except ValueError as e:
    raise ConfigError(f"--keep_first_candidates must be integers; got "
                      f"{FLAGS.keep_first_candidates}") from e
  result = search(FLAGS.workdir, FLAGS.target_len, step=None if FLAGS.step == -1 else FLAGS.step,
                  population=FLAGS.population, generations=FLAGS.generations,
                  parents=FLAGS.parents, mutation_prob=FLAGS.mutation_prob,
                  keep_first_candidates=keep, eval_tokens=FLAGS.eval_tokens, seed=FLAGS.seed,
                  factors_for=FLAGS.factors_for,
                  attention_factor=FLAGS.attention_factor, out=FLAGS.out,
                  stop_after_generation=None if FLAGS.stop_after_generation == -1
                  else FLAGS.stop_after_generation)
  if jax.process_index() == 0:
    _report(result)


if __name__ == "__main__":
  define_flags()
  command_line.run(main, usage=USAGE)
