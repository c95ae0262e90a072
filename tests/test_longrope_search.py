"""LongRoPE's factor search (sweeps/longrope_search.py; Ding et al., arXiv 2402.13753, Sec. 3.2):
the evolution on a placeholder objective (constraints, elitism, determinism, resume), and on a
tiny trained RoPE parent: the seeded methods score exactly what eval-time PI / LongRoPE / plain
RoPE score on the same windows, one compilation per n-hat, the same factors from an interrupted
and an uninterrupted search, factors.json that configures a valid LongRoPE model (and the printed
eval.run command that reproduces the best score), and bad input refused before compilation."""

import json
import math
import os
import shlex

import jax
import numpy as np
import pytest

import forked

from conftest import no_compilation, tiny_config, train_rope_parent
from configs.errors import ConfigError
from configs.validate import validate
from eval import run as eval_run
from models import positions
from configs.stored import load_run_config
from runs.workdir import write_run_config
from sweeps import longrope_evolution as lre
from sweeps import longrope_search as lrs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 64  # 2 x the tiny config's train_len
SMALL = dict(population=5, generations=3, parents=2, keep_first_candidates=(0, 2, 4),
             eval_tokens=512)


def _devices():
  return jax.devices()[:1]


@pytest.fixture(scope="module")
def parent(text_corpus, tmp_path_factory) -> str:
  """A 3-step tiny RoPE run (train_len 32, head_dim 16: 8 feature pairs)."""
  return train_rope_parent(text_corpus, str(tmp_path_factory.mktemp("lr_parent") / "rope"),
                           num_steps=3, checkpoint_every=3)


@pytest.fixture(scope="module")
def full(parent) -> dict:
  """An uninterrupted search in the default folder (<parent>/longrope_search/x2)."""
  return lrs.search(parent, TARGET, devices=_devices(), progress=False, **SMALL)


def _strip(state: dict) -> dict:
  return {k: v for k, v in state.items() if k != "search_s"}


# ---- the evolution on a placeholder objective -------------------------------------------------

def _placeholder(target: np.ndarray):
  calls = []

  def score(factors, n):
    calls.append((tuple(factors), n))
    nll = float(np.sum((np.asarray(factors) - target) ** 2)) + 0.01 * abs(n - 4)
    return nll, math.exp(nll)
  return score, calls


def _evolve(seed=0, stop=None, state=None, generations=8):
  s, half = 4.0, 8
  settings = lre.Settings(target_len=1024, population=8, generations=generations, parents=3,
                          keep_first_candidates=(0, 1, 2, 4, 8), seed=seed)
  space = lre.Space.make(half, s, settings.keep_first_candidates)
  seeds = {"none": np.ones(half), "pi": np.full(half, s),
           "ntk": s ** (2 * np.arange(half) / (2 * half - 2))}
  score, calls = _placeholder(np.linspace(1.5, 4.5, half))
  state = state or lre.new_state(settings, {"workdir": "w", "step": 1, "config_hash": "h"}, {})
  lre.run_generations(state, score, settings, seeds, space, stop_after_generation=stop,
                      progress=False)
  return state, calls, space


def test_evolution_keeps_constraints_and_improves():
  state, calls, space = _evolve()
  cands = state["candidates"]
  assert len(cands) == 8 + 8 * (8 - 3) == len(calls)
  assert len({(tuple(c["factors"]), c["keep_first"]) for c in cands}) == len(cands)  # no repeats
  for c in cands:
    f = np.asarray(c["factors"])
    assert np.all(np.diff(f) >= 0) and f.min() >= 1 and f.max() <= 1.25 * 4 + 1e-9, c
    assert c["keep_first"] in (0, 1, 2, 4, 8)
  assert [c["origin"] for c in cands[:3]] == ["none", "pi", "ntk"]
  best = [g["ppl"] for g in state["best_per_generation"]]
  assert [g["generation"] for g in state["best_per_generation"]] == list(range(9))
  assert all(b <= a for a, b in zip(best, best[1:])) and best[-1] < best[0]
  ranked = lre._rank(cands)
  assert ranked[0]["id"] in state["population"]  # the best overall survives
  mutated = [c for c in cands if c["origin"].startswith("mutation")]
  assert mutated and all(np.allclose(np.asarray(c["factors"]) / lre.GRID,
                                     np.round(np.asarray(c["factors"]) / lre.GRID))
                         or c["generation"] == 0 for c in mutated[-5:])
  assert any(c["origin"].startswith("crossover") for c in cands)


def test_evolution_deterministic_and_resumable():
  first, _, _ = _evolve(seed=3)
  again, _, _ = _evolve(seed=3)
  assert _strip(first) == _strip(again)
  other, _, _ = _evolve(seed=4)
  assert other["candidates"][8:] != first["candidates"][8:]
  cut, _, _ = _evolve(seed=3, stop=2)
  assert cut["generation"] == 2
  cut = json.loads(json.dumps(cut))  # as search_state.json keeps it
  resumed, calls, _ = _evolve(seed=3, state=cut)
  assert len(calls) == 6 * 5  # generations 3..8 only
  assert _strip(resumed) == _strip(first)
  longer, _, _ = _evolve(seed=3, state=json.loads(json.dumps(first)), generations=10)
  assert longer["candidates"][:len(first["candidates"])] == first["candidates"]


def test_mutation_respects_neighbours():
  space = lre.Space.make(6, 2.0, (0, 3))
  rng = np.random.default_rng(0)
  parent = np.array([1.0, 1.2, 1.2, 1.8, 2.0, 2.4])
  for _ in range(200):
    child, n = lre.mutate(rng, parent, 0, space, 1.0)
    assert space.valid(child) and n in (0, 3)
  a, b = (np.array([1.0, 1.0, 2.5, 2.5]), 0), (np.array([1.0, 2.0, 2.0, 2.0]), 3)
  small = lre.Space.make(4, 2.0, (0, 3))
  children = [lre.crossover(rng, a, b, small) for _ in range(100)]
  assert None in children  # e.g. (1, 1, 2.5, 2) breaks the order: rejected
  assert all(small.valid(c[0]) and c[1] in (0, 3) for c in children if c is not None)
  assert not space.valid(np.array([1.0, 1.3, 1.2, 1.8, 2.0, 2.4]))
  assert not space.valid(np.full(6, 2.6))


def test_seed_factors(text_corpus):
  c = tiny_config(text_corpus, "rope")
  seeds = lre.seed_factors(c, 4.0)
  assert list(seeds) == list(lre.SEEDS)
  np.testing.assert_array_equal(seeds["pi"], 4.0)
  np.testing.assert_array_equal(seeds["none"], 1.0)
  assert seeds["ntk"][0] == 1.0 and seeds["ntk"][-1] == pytest.approx(4.0)
  assert seeds["yarn"][0] == pytest.approx(1.0) and seeds["yarn"][-1] == pytest.approx(4.0)
  for f in seeds.values():
    assert np.all(np.diff(f) >= 0) and f.shape == (8,)


# ---- on a trained parent ----------------------------------------------------------------------

def _eval_time_ppl(parent, extension, s, **position):
  """eval.run's ppl at TARGET under `extension` on the windows the search scored."""
  config = load_run_config(parent)
  config.eval.extension, config.eval.factor = extension, float(s)
  config.eval.suites, config.eval.max_tokens_per_length = "ppl_vs_length", SMALL["eval_tokens"]
  for k, v in position.items():
    config.model.position[k] = v
  results = eval_run.evaluate(parent, length_multipliers=[TARGET / config.data.train_len],
                              config=config)
  (result,) = results.values()
  return result["rows"][0]["ppl"], result["rows"][0]["tokens"]


def test_seeds_score_as_eval_time_methods(parent, full, tmp_path):
  plain = lrs.search(parent, TARGET, population=4, generations=0, parents=2,
                     keep_first_candidates=(0,), eval_tokens=SMALL["eval_tokens"],
                     attention_factor=1.0, out=str(tmp_path / "plain"), devices=_devices(),
                     progress=False)
  pi, tokens = _eval_time_ppl(parent, "pi", 2.0)
  assert tokens == plain["eval"]["tokens"]
  assert plain["baselines"]["pi"] == pytest.approx(pi, rel=1e-5)
  none, _ = _eval_time_ppl(parent, "none", 1.0)
  assert plain["baselines"]["none"] == pytest.approx(none, rel=1e-5)
  yarn, _ = _eval_time_ppl(parent, "yarn", 2.0)
  for name, value in (("none", none), ("pi", pi), ("yarn", yarn)):  # the methods as published
    assert plain["methods"][name] == full["methods"][name] == pytest.approx(value, rel=1e-5)
  longrope, _ = _eval_time_ppl(parent, "longrope", 2.0, longrope_long_factors=(2.0,) * 8)
  assert full["baselines"]["pi"] == pytest.approx(longrope, rel=1e-5)  # with the attention factor


def test_search_result(parent, full):
  out = os.path.join(parent, "longrope_search", "x2")
  assert full["complete"] and full["out"] == out
  assert full["compilations"] and set(full["compilations"].values()) == {1}
  with open(os.path.join(out, lrs.FACTORS_FILE)) as f:
    written = json.load(f)
  assert written["val_ppl"] == full["val_ppl"] == full["population"][0]["ppl"]
  assert os.path.getsize(os.path.join(out, lrs.FIGURE_FILE)) > 1000
  pos = written["model_position"]
  assert pos["rope_scaling"] == "longrope" and pos["rope_scaling_factor"] == 2.0
  assert pos["rope_scaling_train_len"] == 32 and pos["longrope_short_factors"] == []
  assert written["parent"]["workdir"] == os.path.abspath(parent) and written["parent"]["step"] == 3
  assert set(written["baselines"]) == {"none", "pi", "ntk", "yarn"}
  assert written["val_ppl"] <= min(written["baselines"].values())
  best = [g["ppl"] for g in written["generations"]]
  assert len(best) == 4 and all(b <= a for a, b in zip(best, best[1:]))
  with open(os.path.join(out, lrs.STATE_FILE)) as f:
    state = json.load(f)
  assert len(state["candidates"]) == 5 + 3 * 3
  for c in state["candidates"]:
    f = np.asarray(c["factors"])
    assert f.shape == (8,) and np.all(np.diff(f) >= 0) and 1 <= f.min() and f.max() <= 2.5
    assert c["keep_first"] in (0, 2, 4) and c["ppl"] > 1


def test_factors_configure_longrope(parent, full):
  config = load_run_config(parent)
  for k, v in full["model_position"].items():
    config.model.position[k] = tuple(v) if isinstance(v, list) else v
  validate(config, 1)
  positions.build(config.model.position, positions.Dims.from_config(config), check_only=True)
  try:
    from configs import extend_longrope  # noqa: PLC0415 -- the fine-tuning recipe
  except ImportError:
    return
  child = extend_longrope.get_config(f"{parent},2")
  assert child.model.position.longrope_long_factors == tuple(full["model_position"][
      "longrope_long_factors"])
  assert child.data.train_len == TARGET
  validate(child, 1)


def test_resume_gives_the_same_factors(parent, full, tmp_path):
  out = str(tmp_path / "cut")
  cut = lrs.search(parent, TARGET, out=out, stop_after_generation=1, devices=_devices(),
                   progress=False, **SMALL)
  assert not cut["complete"] and not os.path.exists(os.path.join(out, lrs.FACTORS_FILE))
  resumed = lrs.search(parent, TARGET, out=out, devices=_devices(), progress=False, **SMALL)
  assert resumed["complete"]
  assert resumed["model_position"] == full["model_position"]
  assert resumed["val_ppl"] == full["val_ppl"]
  with open(os.path.join(out, lrs.STATE_FILE)) as f, open(
      os.path.join(full["out"], lrs.STATE_FILE)) as g:
    assert _strip(json.load(f)) == _strip(json.load(g))


def test_state_of_other_settings_refused(parent, full, tmp_path):
  with no_compilation(), pytest.raises(ConfigError, match="seed=0, not 1"):
    lrs.search(parent, TARGET, devices=_devices(), progress=False, **{**SMALL, "seed": 1})
  path = os.path.join(full["out"], lrs.STATE_FILE)
  with open(path) as f:
    state = json.load(f)
  state["parent"]["step"] = 1
  moved = tmp_path / "moved"
  moved.mkdir()
  (moved / lrs.STATE_FILE).write_text(json.dumps(state))
  with no_compilation(), pytest.raises(ConfigError, match="another parent checkpoint"):
    lrs.search(parent, TARGET, out=str(moved), devices=_devices(), progress=False, **SMALL)


def _fake_run(tmp_path, name, **position) -> str:
  c = tiny_config("unused", position.pop("kind", "rope"))
  for k, v in position.items():
    c.model.position[k] = v
  workdir = str(tmp_path / name)
  os.makedirs(workdir)
  write_run_config(workdir, c)
  return workdir


@pytest.mark.parametrize("case, match", [
    ("alibi", "kind='alibi' run"),
    ("yarn", "trained with model.position.rope_scaling='yarn'"),
    ("short", "--target_len must be an integer > the run's data.train_len=32"),
    ("population", "--population must be an integer >= 2"),
    ("parents", r"--parents must be an integer in \[1, --population=4\)"),
    ("prob", r"--mutation_prob must lie in \(0, 1\]"),
    ("keep", "--keep_first_candidates must be distinct integers"),
    ("tokens", "--eval_tokens must be an integer >= --target_len=64"),
    ("attention", "--attention_factor must be -1"),
    ("missing", "has no config.json"),
    ("step", "--step=7: .* has no such checkpoint"),
    ("long", "no validation document holds --target_len"),
])
def test_bad_input_refused_before_compilation(parent, tmp_path, case, match):
  workdir, target, kw = parent, TARGET, {}
  if case == "alibi":
    workdir = _fake_run(tmp_path, "alibi", kind="alibi")
  elif case == "yarn":
    workdir = _fake_run(tmp_path, "yarn", rope_scaling="yarn", rope_scaling_factor=2.0)
  elif case == "missing":
    workdir = str(tmp_path / "nothing")
  target = {"short": 32, "long": 10 ** 7}.get(case, target)
  kw = {"population": {"population": 1}, "parents": {"population": 4, "parents": 4},
        "prob": {"mutation_prob": 0.0}, "keep": {"keep_first_candidates": (0, 0)},
        "tokens": {"eval_tokens": 10}, "attention": {"attention_factor": 0.0},
        "step": {"step": 7}, "long": {"keep_first_candidates": (0,), "eval_tokens": 10 ** 7}}.get(case, {})
  with no_compilation(), pytest.raises(ConfigError, match=match) as e:
    lrs.search(workdir, target, out=str(tmp_path / "out"), devices=_devices(), progress=False,
               **kw)
  assert "\n" not in str(e.value)
  assert not os.path.exists(tmp_path / "out")


def test_command_line(parent, full, tmp_path):
  """The CLI refuses in one line with status 2, and its printed eval.run command scores the best
  candidate again."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                              if "device_count" not in f)  # one device
  bad = forked.run(["-m", "sweeps.longrope_search", f"--workdir={parent}", "--target_len=16"],
                   cwd=ROOT, env=env)
  assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
  assert "--target_len must be an integer > the run's data.train_len=32" in bad.stderr
  ok = forked.run(["-m", "sweeps.longrope_search", f"--workdir={parent}", f"--target_len={TARGET}",
                  "--population=5", "--generations=3", "--parents=2",
                  "--keep_first_candidates=0,2,4", "--eval_tokens=512"], cwd=ROOT, env=env)
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert f"best : ppl at {TARGET} tokens {full['val_ppl']:.4f}" in ok.stdout
  assert full["commands"]["finetune"] in ok.stdout
  command = full["commands"]["evaluate"]
  assert command in ok.stdout
  args = shlex.split(command)[3:]
  ev = forked.run(["-m", "eval.run", *args], cwd=ROOT, env=env)
  assert ev.returncode == 0, ev.stderr[-2000:]
  line = next(x for x in ev.stdout.splitlines() if f"length {TARGET:>6}: ppl" in x)
  assert float(line.split("ppl ")[1].split(",")[0]) == pytest.approx(full["val_ppl"], abs=1e-4)
