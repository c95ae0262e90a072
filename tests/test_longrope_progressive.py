"""LongRoPE after the first extension (sweeps/longrope_search.py, sweeps/longrope_modes.py; Ding
et al., arXiv 2402.13753, Sec. 3.3): on a tiny LongRoPE child fine-tuned from the long search's
factors (test_longrope_search.py's parent and search), the short-factor search (--factors_for=
short, scored at the original length) and the progressive search (a longer target from the
child's factors), each scoring what eval.run scores with its factors, the progressive recipe
configs/extend_longrope.py on the child, and bad combinations refused before compilation."""

import json
import os

import jax
import numpy as np
import pytest

import forked
import train
from conftest import no_compilation
from configs.errors import ConfigError
from configs.stored import load_run_config
from configs.validate import validate
from eval import run as eval_run
from sweeps import longrope_search as lrs
from test_longrope_search import ROOT, full, parent  # noqa: F401 -- the shared fixtures

TINY = dict(population=4, generations=1, parents=2, eval_tokens=256)


def _devices():
  return jax.devices()[:1]


@pytest.fixture(scope="module")
def extended(parent, full, tmp_path_factory) -> str:  # noqa: F811
  """The parent fine-tuned for 2 steps at 64 tokens with the searched factors (s = 2, L0 = 32)."""
  from configs import extend_longrope  # noqa: PLC0415
  c = extend_longrope.get_config(f"{parent},2")
  c.train.num_steps = c.train.checkpoint_every_steps = 2
  c.train.warmup_steps = 1
  c.data.batch_size = 8  # the recipe's 4 would not split over the 8 test devices eval.run uses
  c.eval.length_multipliers = (1.0,)
  workdir = str(tmp_path_factory.mktemp("lr_child") / "longrope_x2")
  train.train_and_evaluate(c, workdir, devices=_devices())
  return workdir


def _eval_ppl(workdir, length, s, **position):
  """eval.run's ppl at `length` tokens with eval.extension=longrope and these factors."""
  config = load_run_config(workdir)
  config.eval.extension, config.eval.factor = "longrope", float(s)
  config.eval.suites, config.eval.max_tokens_per_length = "ppl_vs_length", TINY["eval_tokens"]
  for k, v in position.items():
    config.model.position[k] = v
  results = eval_run.evaluate(workdir, length_multipliers=[length / config.data.train_len],
                              config=config)
  (result,) = results.values()
  return result["rows"][0]["ppl"]


def test_short_factor_search(extended):
  trained = load_run_config(extended).model.position
  r = lrs.search(extended, None, factors_for="short", devices=_devices(), progress=False, **TINY)
  assert r["complete"] and r["mode"] == "short" and r["target_len"] == 32
  assert r["out"] == os.path.join(extended, "longrope_search", "short32")
  assert os.path.isfile(os.path.join(r["out"], lrs.FACTORS_FILE))
  assert set(r["compilations"].values()) == {1}
  pos = r["model_position"]
  # Everything but the short factors is the trained model's.
  assert pos["longrope_long_factors"] == list(trained.longrope_long_factors)
  assert pos["longrope_keep_first"] == trained.longrope_keep_first
  assert pos["rope_scaling_factor"] == 2.0 and pos["rope_scaling_train_len"] == 32
  short = np.asarray(pos["longrope_short_factors"])
  assert short.shape == (8,) and np.all(np.diff(short) >= 0) and short.min() >= 1
  assert short.max() <= max(trained.longrope_long_factors) + 1e-9
  assert set(r["baselines"]) == {"none", "long"} and r["val_ppl"] <= min(r["baselines"].values())
  # The seed "none" is the model as trained (its short factors are all 1).
  assert r["baselines"]["none"] == pytest.approx(r["methods"]["trained"], rel=1e-5)
  assert "finetune" not in r["commands"]
  assert "--config.model.position.longrope_short_factors=" in r["commands"]["evaluate"]
  # eval.run with the printed overrides scores what the search scored.
  got = _eval_ppl(extended, 32, 2.0, longrope_short_factors=tuple(short))
  assert got == pytest.approx(r["val_ppl"], rel=1e-5)


def test_progressive_search_and_recipe(extended):
  trained = load_run_config(extended).model.position
  r = lrs.search(extended, 128, keep_first_candidates=(0, 2), devices=_devices(),
                 progress=False, **{**TINY, "population": 8})  # all 7 seeds
  assert r["complete"] and r["mode"] == "progressive" and r["recipe_factor"] == 2.0
  assert r["out"] == os.path.join(extended, "longrope_search", "x2")
  pos = r["model_position"]
  # Relative to the original RoPE and length: s = 128 / 32, the switch at 32, short kept.
  assert pos["rope_scaling_factor"] == 4.0 and pos["rope_scaling_train_len"] == 32
  assert pos["longrope_short_factors"] == list(trained.longrope_short_factors)
  long = np.asarray(pos["longrope_long_factors"])
  assert np.all(np.diff(long) >= 0) and long.min() >= 1 and long.max() <= 5.0 + 1e-9
  assert list(r["baselines"]) == ["parent", "parent_pi", "parent_rescaled", "none", "pi", "ntk",
                                  "yarn"]
  assert all(v is not None for v in r["baselines"].values())
  with open(os.path.join(r["out"], lrs.STATE_FILE)) as f:
    seeds = {c["origin"]: c for c in json.load(f)["candidates"] if c["generation"] == 0}
  np.testing.assert_allclose(seeds["parent"]["factors"], trained.longrope_long_factors)
  np.testing.assert_allclose(seeds["parent_pi"]["factors"], np.minimum(
      np.asarray(trained.longrope_long_factors) * 2, 5.0))
  assert seeds["parent_pi"]["keep_first"] == trained.longrope_keep_first
  assert seeds["pi"]["keep_first"] == 0 and seeds["pi"]["factors"] == [4.0] * 8
  assert r["val_ppl"] <= min(r["baselines"].values())
  assert "trained" in r["methods"]
  got = _eval_ppl(extended, 128, 4.0, longrope_long_factors=tuple(long),
                  longrope_keep_first=pos["longrope_keep_first"])
  assert got == pytest.approx(r["val_ppl"], rel=1e-5)
  # The recipe fine-tunes the child from the extended run at 128 tokens with these factors.
  from configs import extend_longrope  # noqa: PLC0415
  child = extend_longrope.get_config(f"{extended},2")
  assert child.data.train_len == 128 and child.train.init_from == os.path.abspath(extended)
  assert child.model.position.rope_scaling_factor == 4.0
  assert child.model.position.rope_scaling_train_len == 32
  assert child.model.position.longrope_long_factors == tuple(long)
  validate(child, 1)
  with pytest.raises(ConfigError, match="holds short factors"):
    extend_longrope.get_config(f"{extended},2," + os.path.join(extended, "longrope_search",
                                                                "short32", "factors.json"))


@pytest.mark.parametrize("case, match", [
    ("short_on_plain", "--factors_for=short searches the short factors of a LongRoPE-extended"),
    ("short_too_long", r"--target_len must be an integer in \[2, 32\] with --factors_for=short"),
    ("short_attention", "--attention_factor must stay -1 with --factors_for=short"),
    ("short_keep", "--keep_first_candidates must be the trained longrope_keep_first="),
    ("mode", "--factors_for must be 'long' or 'short'"),
    ("progressive_short", "--target_len must be an integer > the run's data.train_len=64"),
])
def test_bad_combinations_refused_before_compilation(parent, extended, tmp_path, case, match):  # noqa: F811
  workdir = parent if case == "short_on_plain" else extended
  kw = {"short_on_plain": dict(factors_for="short"),
        "short_too_long": dict(factors_for="short", target_len=64),
        "short_attention": dict(factors_for="short", attention_factor=1.0),
        "short_keep": dict(factors_for="short", keep_first_candidates=(0, 1)),
        "mode": dict(factors_for="middle", target_len=128),
        "progressive_short": dict(target_len=64)}[case]
  target = kw.pop("target_len", None)
  with no_compilation(), pytest.raises(ConfigError, match=match) as e:
    lrs.search(workdir, target, out=str(tmp_path / "out"), devices=_devices(), progress=False,
               **kw)
  assert "\n" not in str(e.value)
  assert not os.path.exists(tmp_path / "out")


def test_command_line_refuses_short_on_a_plain_run(parent):  # noqa: F811
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                              if "device_count" not in f)
  bad = forked.run(["-m", "sweeps.longrope_search", f"--workdir={parent}", "--factors_for=short"],
                   cwd=ROOT, env=env)
  assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
  assert "--factors_for=short searches the short factors" in bad.stderr
