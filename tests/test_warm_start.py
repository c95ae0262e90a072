"""Warm starts (`train.init_from`, runs/warm_start.py): a child run begins from its parent's
parameters with a fresh optimizer, step counter, schedule and data iterator; resumes like any
run; records its parent; refuses shape changes naming the field."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config, train_rope_parent
from configs.errors import ConfigError
from data import inputs as data_inputs
from data.tokenizers import get_tokenizer
from models import sharding
from models.spec import model_spec
from runs import optimizer, warm_start
from runs.checkpoint import restore_params
from configs.stored import load_run_config

def _devices():
  return jax.devices()[:1]


@pytest.fixture(scope="module")
def parent(text_corpus, tmp_path_factory) -> str:
  """A 4-step RoPE run (train_len 32) with checkpoints at steps 2 and 4."""
  return train_rope_parent(text_corpus, str(tmp_path_factory.mktemp("parent") / "rope"),
                           num_steps=4, checkpoint_every=2)


def child_config(text_corpus, parent_dir, **fields):
  """A YaRN fine-tune at 2x the parent's train_len (batch halved: the same tokens per step);
  `fields` with model.position.rope_scaling='none' leave YaRN's factor and length unset (a
  field no part of the run reads is refused)."""
  c = tiny_config(text_corpus, "rope")
  c.train.init_from = parent_dir
  c.data.train_len, c.data.batch_size = 64, 4
  c.train.num_steps, c.train.warmup_steps, c.train.checkpoint_every_steps = 4, 1, 2
  c.eval.length_multipliers = (1.0,)
  yarn = {"model.position.rope_scaling": "yarn", "model.position.rope_scaling_factor": 2.0,
          "model.position.rope_scaling_train_len": 32}
  if fields.get("model.position.rope_scaling") == "none":
    yarn = {}
  for path, value in {**yarn, **fields}.items():
    node = c
    *keys, leaf = path.split(".")
    for key in keys:
      node = node[key]
    node[leaf] = value
  return c


def params_of(workdir, step=None):
  config = load_run_config(workdir)
  mesh = sharding.make_mesh(config.mesh, _devices())
  params, _ = restore_params(workdir, config, model_spec(config, mesh), step)
  return jax.device_get(params)


def assert_trees_equal(a, b):
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


def test_warm_start_is_restore_params_and_fresh_optimizer(text_corpus, parent, tmp_path):
  """The child's parameters after 3 steps equal those of: the parent's parameters at step 2, a
  fresh AdamW state and step 0, then the child's own jitted step on the child's batches."""
  c = child_config(text_corpus, parent + "@2", **{"train.num_steps": 3,
                                                  "train.checkpoint_every_steps": 3})
  out = train.train_and_evaluate(c, str(tmp_path / "child"), devices=_devices())
  assert out["step"] == 3
  stored = json.load(open(tmp_path / "child" / "config.json"))
  assert stored["parent"] == {"workdir": os.path.abspath(parent), "step": 2,
                              "config_hash": json.load(open(os.path.join(parent, "config.json")))
                              ["config_hash"]}
  # By hand: restore the parent's step-2 parameters, fresh optimizer, three steps.
  mesh = sharding.make_mesh(c.mesh, _devices())
  spec = model_spec(c, mesh)
  parent_config = load_run_config(parent)
  params, _ = restore_params(parent, parent_config, model_spec(parent_config, mesh), 2)
  start = jax.device_get(params)  # the step donates the state
  tx = optimizer.make_optimizer(c.train)
  shardings, _ = train.state_shardings(tx, spec, mesh)
  fresh = train.initial_state(c, spec, tx, shardings)
  state = {**fresh, "params": params, "opt_state": jax.jit(tx.init)(params)}
  tokenizer = get_tokenizer(c.data.tokenizer)
  inputs = data_inputs.make_inputs(c, data_inputs.load_splits(c), tokenizer)
  step_fn = train.make_step_fn(c, spec, tx, shardings, mesh, tokenizer.pad_id)
  batch_sharding = sharding.batch_sharding(mesh)
  for _ in range(3):
    batch = {k: jax.make_array_from_process_local_data(batch_sharding, v)
             for k, v in next(inputs.train).items()}
    state, _ = step_fn(state, batch)
  assert int(state["step"]) == 3
  assert_trees_equal(params_of(str(tmp_path / "child")), jax.device_get(state["params"]))
  # and it moved away from the parent (the optimizer did run)
  assert not np.array_equal(np.asarray(params_of(str(tmp_path / "child"))["embedding"]),
                            np.asarray(start["embedding"]))


def test_resume_of_a_fine_tune_is_bitwise_and_does_not_read_the_parent(text_corpus, parent,
                                                                         tmp_path):
  straight = str(tmp_path / "straight")
  train.train_and_evaluate(child_config(text_corpus, parent), straight, devices=_devices())
  # The same run cut after step 2, its parent then moved away: the rerun resumes from its own
  # checkpoint and reaches bitwise the same parameters.
  moved = str(tmp_path / "parent_copy")
  shutil.copytree(parent, moved)
  cut = str(tmp_path / "cut")
  out = train.train_and_evaluate(child_config(text_corpus, moved, **{"train.stop_after_step": 2}),
                                 cut, devices=_devices())
  assert out["step"] == 2
  shutil.rmtree(moved)
  out = train.train_and_evaluate(child_config(text_corpus, moved), cut, devices=_devices())
  assert out["step"] == 4
  assert_trees_equal(params_of(cut), params_of(straight))
  assert json.load(open(os.path.join(cut, "config.json")))["parent"]["step"] == 4


@pytest.mark.parametrize("fields, message", [
    ({"model.d_model": 32}, r"model.d_model=32 changes the model's parameters .*the parent .* "
                            r"has model.d_model=64"),
    ({"model.num_layers": 3}, r"model.num_layers=3 .*it adds parameter \['blocks'\]\[2\].*"
                              r"has model.num_layers=2"),
    ({"model.position.kind": "t5", "model.position.rope_scaling": "none"},
     r"model.position.kind='t5' changes the model's parameters \(it adds parameter "
     r"\['position'\].*has model.position.kind='rope'"),
    ({"train.init_from": "PARENT@3"}, r"no checkpoint at step 3; available steps: \[2, 4\]"),
    ({"train.init_from": "PARENT@last"}, r"the part after '@' must be a checkpoint step"),
    ({"train.init_from": "/nonexistent/run"}, r"/nonexistent/run has no config.json"),
    ({"train.init_from_learned": "zero"}, r"train.init_from_learned='zero'.*interpolate"),
])
def test_refused_changes_name_the_field(text_corpus, parent, tmp_path, fields, message):
  fields = {k: v.replace("PARENT", parent) if isinstance(v, str) else v
            for k, v in fields.items()}
  c = child_config(text_corpus, parent, **fields)
  with pytest.raises(ConfigError, match=message):
    train.train_and_evaluate(c, str(tmp_path / "child"), devices=_devices())
  assert not os.path.exists(tmp_path / "child")


def test_own_workdir_and_another_tokenizer_are_refused(text_corpus, parent, tmp_path):
  mesh = sharding.make_mesh(tiny_config(text_corpus).mesh, _devices())
  with pytest.raises(ConfigError, match="is this run's own --workdir"):
    warm_start.check_init_from(child_config(text_corpus, parent), parent, mesh)
  c = child_config(text_corpus, parent, **{"data.tokenizer": "sentencepiece:/x/tok.model"})
  with pytest.raises(ConfigError, match=r"data.tokenizer='sentencepiece:/x/tok.model' differs "
                                        r"from the parent's 'byte'"):
    warm_start.check_init_from(c, str(tmp_path / "child"), mesh)


def test_drope_and_abf_keep_the_parameters(text_corpus, parent, tmp_path):
  """rope -> none (DroPE: positions dropped) and a new rope_theta (ABF) load the parent as is."""
  for name, fields in [("drope", {"model.position.kind": "none",
                                  "model.position.rope_scaling": "none"}),
                       ("abf", {"model.position.rope_theta": 500000.0,
                                "model.position.rope_scaling": "none"})]:
    c = child_config(text_corpus, parent + "@4", **fields, **{"train.num_steps": 1,
                                                              "train.checkpoint_every_steps": 1,
                                                              "train.learning_rate": 1e-12,
                                                              "train.warmup_steps": 0})
    train.train_and_evaluate(c, str(tmp_path / name), devices=_devices())
    # one step at a negligible learning rate: the parameters are the parent's to ~1e-9
    child, mother = params_of(str(tmp_path / name)), params_of(parent, 4)
    for x, y in zip(jax.tree.leaves(child), jax.tree.leaves(mother)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-8)


def test_interpolate_table_is_position_interpolation():
  """Row j of the grown table is the old table at position j * n / n' (Chen et al., Eq. (4))."""
  old = np.arange(4 * 2, dtype=np.float32).reshape(4, 2) ** 2
  new = np.asarray(warm_start.interpolate_table(jax.numpy.asarray(old), 8))
  np.testing.assert_array_equal(new[0::2], old)  # j = 2m -> position m exactly
  np.testing.assert_allclose(new[1:7:2], (old[:-1] + old[1:]) / 2)  # midpoints
  np.testing.assert_array_equal(new[7], old[3])  # beyond the last row: held
  np.testing.assert_array_equal(np.asarray(warm_start.interpolate_table(old, 4)), old)


@pytest.mark.parametrize("rule", ["interpolate", "copy"])
def test_learned_table_grows(text_corpus, tmp_path, rule):
  mother = str(tmp_path / "learned")
  c = tiny_config(text_corpus, "learned")
  c.train.num_steps = c.train.checkpoint_every_steps = 2
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, mother, devices=_devices())
  table = np.asarray(params_of(mother)["position"]["table"])  # [32, 64]
  child = tiny_config(text_corpus, "learned")
  child.train.init_from, child.train.init_from_learned = mother, rule
  child.data.train_len, child.data.batch_size = 64, 4
  mesh = sharding.make_mesh(child.mesh, _devices())
  parent = warm_start.check_init_from(child, str(tmp_path / "child"), mesh)
  grown = np.asarray(jax.device_get(
      warm_start.load_params(parent, child, model_spec(child, mesh), mesh))["position"]["table"])
  assert grown.shape == (64, 64)
  if rule == "interpolate":
    np.testing.assert_array_equal(grown[0::2], table)
    np.testing.assert_allclose(grown[1:63:2], (table[:-1] + table[1:]) / 2, rtol=1e-6, atol=1e-7)
  else:
    np.testing.assert_array_equal(grown[:32], table)
    assert 0.5 * child.model.init_std < grown[32:].std() < 2 * child.model.init_std
  # fewer rows than the parent's are refused, naming max_len
  child.data.train_len = child.model.position.max_len = 16
  with pytest.raises(ConfigError, match=r"model.position.max_len .* 16 rows, fewer than the "
                                        r"parent's 32"):
    warm_start.check_init_from(child, str(tmp_path / "child"), mesh)


def test_collect_and_report_name_the_parent(text_corpus, parent):
  from sweeps import collect, report
  study = os.path.dirname(parent)
  c = child_config(text_corpus, parent, **{"train.num_steps": 1, "train.warmup_steps": 0,
                                           "train.checkpoint_every_steps": 1})
  train.train_and_evaluate(c, os.path.join(study, "yarn_child"), devices=_devices())
  frame = collect.collect(study)
  by_run = frame.drop_duplicates("run").set_index("run")["parent"]
  assert by_run["yarn_child"] == f"{os.path.basename(parent)}@4" and by_run["rope"] == ""
  assert "cfg.train.init_from" not in collect.configuration_columns(frame.columns)
  page, _ = report.build_report(frame, "warm starts")
  assert f"{os.path.basename(parent)}@4" in page


def test_a_rerun_naming_another_parent_is_refused(text_corpus, parent, tmp_path):
  child = str(tmp_path / "child")
  c = child_config(text_corpus, parent, **{"train.num_steps": 1, "train.warmup_steps": 0,
                                           "train.checkpoint_every_steps": 1})
  train.train_and_evaluate(c, child, devices=_devices())
  other = str(tmp_path / "other")
  shutil.copytree(parent, other)
  c.train.init_from = other
  with pytest.raises(ConfigError, match=r"this run's config.json records its parent as .*rope "
                                        r"\(it resumes from its own checkpoints\)"):
    train.train_and_evaluate(c, child, devices=_devices())
