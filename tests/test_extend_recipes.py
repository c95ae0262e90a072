"""The context-extension recipes (configs/extend_*.py): each builds its child config from a
parent RoPE run, trains a few steps from the parent's parameters, and records the parent."""

import json
import os

import jax
import numpy as np
import pytest

import train
from conftest import config_file_module, tiny_config
from configs import extension_recipes
from configs.errors import ConfigError
from eval import run as eval_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = extension_recipes.RECIPES


def recipe(name: str):
  """The get_config of configs/extend_<name>.py."""
  return config_file_module(f"extend_{name}").get_config


@pytest.fixture(scope="module")
def parent(text_corpus, tmp_path_factory) -> str:
  """A 6-step RoPE run at train_len 32, batch 8, with a LongRoPE factors.json beside it in the
  format sweeps/longrope_search.py writes (rot_dim/2 = 8 monotone factors for s = 4)."""
  workdir = str(tmp_path_factory.mktemp("parent") / "rope")
  c = tiny_config(text_corpus, "rope")
  c.model.num_layers = 3  # EABF scales layers 2.. only
  c.train.num_steps, c.train.checkpoint_every_steps = 6, 6
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  folder = os.path.join(workdir, "longrope_search", "x4")
  os.makedirs(folder)
  with open(os.path.join(folder, "factors.json"), "w") as f:
    json.dump({"model_position": {
        "rope_scaling": "longrope", "rope_scaling_factor": 4.0, "rope_scaling_train_len": 32,
        "longrope_long_factors": [1.0, 1.0, 1.2, 1.6, 2.2, 3.0, 4.0, 4.6],
        "longrope_short_factors": [], "longrope_keep_first": 2}}, f)
  return workdir


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_trains_from_its_parent(parent, tmp_path, name):
  parent_steps_tokens = 6 * 8 * 32
  c = recipe(name)(parent)
  pos, d, t = c.model.position, c.data, c.train
  long = name not in ("pose", "drope", "cream", "endprompt")
  assert d.train_len == (128 if long else 32), name
  assert d.batch_size == (2 if long else 8), name  # the parent's 256 tokens per step
  assert t.init_from == os.path.abspath(parent)
  assert t.num_steps == max(10, round(0.1 * parent_steps_tokens / (d.train_len * d.batch_size)))
  np.testing.assert_allclose(t.learning_rate, 3e-3 / 15)
  assert (t.final_lr_ratio, t.weight_decay) == (1.0, 0.0)
  assert [round(m * d.train_len) for m in c.eval.length_multipliers] == [16, 32, 64, 128, 256,
                                                                         512]
  expected = {"extrapolation": ("rope", "none"), "pi": ("rope", "pi"), "ntk": ("rope", "ntk"),
              "yarn": ("rope", "yarn"), "abf": ("rope", "none"), "pose": ("rope", "pi"),
              "longrope": ("rope", "longrope"), "drope": ("none", "none"),
              "eabf": ("rope", "none"), "cream": ("rope", "pi"),
              "endprompt": ("rope", "pi")}[name]
  assert (pos.kind, pos.rope_scaling) == expected, name
  if name in ("pi", "ntk", "yarn", "pose", "longrope", "cream", "endprompt"):
    assert pos.rope_scaling_factor == 4.0
  if name == "yarn":
    assert pos.rope_scaling_train_len == 32 and pos.yarn_ramp == "index"
  if name in ("abf", "eabf"):
    assert pos.rope_theta == 500000.0
  # EABF (arXiv 2401.07004): log_L n on every layer but the first two, L = the parent's 32.
  # DroPE (arXiv 2512.12167, App. C.2): every layer, beta = 1 + 0.412 ln(n / L) per sequence.
  assert (pos.attention_temperature, pos.attention_temperature_layers,
          pos.attention_temperature_l0) == {"eabf": (True, (2,), 32), "drope": (True, (), 32)}.get(
              name, (False, (), -1)), name
  if name == "drope":
    assert (pos.attention_temperature_form, pos.attention_temperature_c,
            pos.attention_temperature_per) == ("log", 0.412, "sequence")
  if name in ("pose", "cream", "endprompt"):
    assert (d.position_sampler.kind, d.position_sampler.max_position) == (name, 128)
  if name == "endprompt":
    assert (d.position_sampler.endprompt_length, d.position_sampler.endprompt_anchor) == (20, "end")
  if name == "longrope":
    assert pos.longrope_long_factors[-1] == 4.6 and pos.longrope_keep_first == 2
  # two steps, then the child's config.json names its parent
  t.num_steps, t.warmup_steps, t.checkpoint_every_steps = 2, 1, 2
  c.eval.length_multipliers = (1.0,)
  out = train.train_and_evaluate(c, str(tmp_path / name), devices=jax.devices()[:1])
  assert out["step"] == 2 and np.isfinite(out["val_loss"]), name
  stored = json.load(open(tmp_path / name / "config.json"))
  assert stored["parent"]["workdir"] == os.path.abspath(parent)
  assert stored["parent"]["step"] == 6


def test_yarn_child_evaluates_to_16x_the_parent(parent, tmp_path):
  c = recipe("yarn")(parent + ",4")
  c.data.batch_size = 8  # eval.run uses every device (8 in the tests)
  c.train.num_steps, c.train.warmup_steps, c.train.checkpoint_every_steps = 1, 0, 1
  c.eval.length_multipliers = (1.0,)
  child = str(tmp_path / "yarn")
  train.train_and_evaluate(c, child, devices=jax.devices()[:1])
  results = eval_run.evaluate(child, length_multipliers=[0.125, 1, 4])
  rows = results["ppl_vs_length"]["rows"]
  assert [r["length"] for r in rows] == [16, 128, 512]  # 0.5 L, 4 L and 16 L of the parent
  assert all(np.isfinite(r["ppl"]) for r in rows)


@pytest.mark.parametrize("arg, message", [
    (None, r"configs/extend_yarn.py needs the parent run"),
    ("PARENT,1", r"the factor after ',' must be a number > 1"),
    ("PARENT,four", r"the factor after ',' must be a number > 1"),
    ("/nonexistent/run", r"/nonexistent/run is not a training run's workdir"),
])
def test_bad_recipe_arguments(parent, arg, message):
  with pytest.raises(ConfigError, match=message):
    recipe("yarn")(arg.replace("PARENT", parent) if arg else arg)


def test_longrope_needs_the_search_and_a_rope_parent(parent, text_corpus, tmp_path):
  with pytest.raises(ConfigError, match=r"x8/factors.json does not exist: run python -m "
                                        r"sweeps.longrope_search"):
    recipe("longrope")(parent + ",8")
  with pytest.raises(ConfigError, match=r"holds factors for s=4.0, not the recipe's s=2"):
    recipe("longrope")(parent + ",2," + os.path.join(parent, "longrope_search", "x4",
                                                      "factors.json"))
  alibi = str(tmp_path / "alibi")
  c = tiny_config(text_corpus, "alibi")
  c.train.num_steps = c.train.checkpoint_every_steps = 1
  c.train.warmup_steps = 0
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, alibi, devices=jax.devices()[:1])
  with pytest.raises(ConfigError, match=r"the parent must be a RoPE run without RoPE scaling; it "
                                        r"has model.position.kind='alibi'"):
    recipe("pi")(alibi)
  assert extension_recipes.BUDGET == 0.10


def test_recipe_of_names_every_recipe_from_its_childs_config(parent):
  from configs.errors import flatten
  from configs.stored import load_run_config
  parent_flat = flatten(load_run_config(parent).to_dict())
  for name in RECIPES:
    child = flatten(recipe(name)(f"{parent},4").to_dict())
    assert extension_recipes.recipe_of(child, parent_flat) == name
    assert extension_recipes.recipe_of(child, None) == name  # the parent's base is the default
  raised = dict(parent_flat, **{"model.position.rope_theta": 20000.0})
  assert extension_recipes.recipe_of(raised, parent_flat) == "abf"
  assert extension_recipes.recipe_of(parent_flat, raised) == "extrapolation"  # base lowered
