"""Configs: every file loads and validates; the 350M config has 330M-370M parameters."""

import glob
import os
import re

import jax
import pytest
from flax import nnx

from configs.validate import ConfigError, mesh_shape, validate
from conftest import config_file_module
from models.decoder import Decoder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The experiment configs that stand alone; configs/extend_*.py need a parent run (their
# argument) and are built and trained from one in test_extend_recipes.py.
CONFIG_FILES = [p for p in sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))
                if os.path.basename(p) not in ("__init__.py", "errors.py", "validate.py",
                                               "field_ranges.py", "extension_recipes.py")
                and not os.path.basename(p).startswith("extend_")]


def load(path):
  return config_file_module(path).get_config()


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_config_validates(path):
  validate(load(path), 8)


def test_350m_parameter_count_without_allocating():
  c = load(os.path.join(ROOT, "configs", "alibi_350m.py"))
  model = nnx.eval_shape(lambda: Decoder(c, rngs=nnx.Rngs(0)))
  n = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  assert 330e6 <= n <= 370e6, n
  assert (c.model.num_layers, c.model.d_model, c.model.num_heads, c.data.train_len) == (24, 1024, 16, 1024)


def test_passkey_documents_must_fit_train_len():
  """The paper's preamble leaves no room in a 128-token window: refused, naming the fields."""
  c = load(os.path.join(ROOT, "configs", "passkey_tiny.py"))
  c.data.train_len = 128
  validate(c, 8)  # without the preamble a passkey document needs 106 tokens
  c.data.passkey.preamble = True
  with pytest.raises(ConfigError, match="data.passkey.preamble"):
    validate(c, 8)


def test_mesh_resolution():
  import ml_collections

  def m(data, fsdp, tensor, context=None):  # a mesh section; context absent in old configs
    d = {"data": data, "fsdp": fsdp, "tensor": tensor}
    return ml_collections.ConfigDict(d if context is None else {**d, "context": context})

  assert mesh_shape(m(-1, 1, 1), 8) == (8, 1, 1, 1)
  assert mesh_shape(m(2, -1, 2), 8) == (2, 2, 1, 2)
  assert mesh_shape(m(2, 1, 1, -1), 8) == (2, 1, 4, 1)
  assert mesh_shape(m(1, 2, 2, 2), 8) == (1, 2, 2, 2)
  for bad in (m(3, 1, 1), m(-1, -1, 1), m(0, 1, 1), m(-1, 3, 1), m(-1, 1, 1, 0), m(2, 2, 1, 3)):
    with pytest.raises(ConfigError, match="mesh"):
      mesh_shape(bad, 8)


@pytest.mark.parametrize("field,value,match", [
    ("model.d_model", 0, "model.d_model"),
    ("model.num_layers", -2, "model.num_layers"),
    ("model.mlp_activation", "relu2", "model.mlp_activation"),
    ("model.dtype", "float16", "model.dtype"),
    ("data.batch_size", 12, "data.batch_size"),
    ("data.source", "c4", "data.source"),
    ("eval.length_multipliers", (), "eval.length_multipliers"),
    ("eval.length_multipliers", (1.0, float("nan")), "eval.length_multipliers must be a tuple of finite numbers > 0; got \\(1.0, nan\\)"),
    ("eval.length_multipliers", (float("inf"),), "eval.length_multipliers must be a tuple of finite numbers > 0; got \\(inf,\\)"),
    ("eval.split", "train", "eval.split"),
    ("model.vocab_size", 100, "model.vocab_size"),
    ("train.final_lr_ratio", -3.0, "train.final_lr_ratio"),
    ("train.weight_decay", -1.0, "train.weight_decay"),
    ("train.grad_clip", -1.0, "train.grad_clip"),
    ("train.stop_after_step", -7, "train.stop_after_step"),
    ("eval.max_tokens_per_length", -5, "eval.max_tokens_per_length"),
    ("model.global_every", 2, "model.global_every"),
    # data.task (algorithmic tasks)
    ("data.task.name", "multiply", "data.task.name"),
    ("data.task.train_min_size", 0, "data.task.train_min_size"),
    ("data.task.train_max_size", 0, "data.task.train_max_size"),
    ("data.task.eval_max_size", 8, "data.task.eval_max_size"),
    ("data.task.eval_examples_per_size", 0, "data.task.eval_examples_per_size"),
    ("data.task.seed", -1, "data.task.seed"),
    ("data.task.eval_seed", -3, "data.task.eval_seed"),
    ("data.train_len", 21, "data.train_len=21 cannot hold"),
    # passkey / needle retrieval (data/passkey.py, eval/needle.py)
    ("data.passkey.fraction", 1.0, "data.passkey.fraction"),
    ("data.passkey.key_digits", 0, "data.passkey.key_digits"),
    ("data.passkey.seed", -1, "data.passkey.seed"),
    ("eval.passkey.depths", (0.0, 1.5), "eval.passkey.depths"),
    ("eval.passkey.depths", (), "eval.passkey.depths"),
    ("eval.passkey.trials", 0, "eval.passkey.trials"),
    ("eval.passkey.threshold", 0.0, "eval.passkey.threshold"),
    ("eval.passkey.max_new_tokens", 6, "eval.passkey.max_new_tokens"),
    ("eval.needle.value_digits", 19, "eval.needle.value_digits"),
    ("eval.needle.max_new_tokens", 8, "eval.needle.max_new_tokens"),
    ("eval.needle.threshold", 1.5, "eval.needle.threshold"),
    # eval suites and eval-time extensions (lists), position-id transforms
    ("eval.suites", "ppl_vs_length,perplexity", "eval.suites: 'perplexity' is not one of"),
    ("eval.suites", "", "eval.suites is empty"),
    ("eval.extension", "yarn,yarn", "eval.extension names a method twice"),
    ("eval.extension", "none,rerope", "eval.extension: 'rerope' is not one of"),
    ("model.position.position_transform", "rerope", "model.position.position_transform"),
])
def test_bad_fields_name_themselves(field, value, match):
  # Task fields other than the name (and train_len vs. the task) only matter with a task set.
  on_task = field.startswith("data.task.") and field != "data.task.name" or "cannot hold" in match
  c = load(os.path.join(ROOT, "configs", "task_copy.py" if on_task else "alibi_tiny.py"))
  *sections, name = field.split(".")
  target = c
  for section in sections:
    target = target[section]
  with c.unlocked():
    setattr(target, name, value)
  with pytest.raises(ConfigError, match=match):
    validate(c, 8)



@pytest.mark.parametrize("train_max, eval_max, field", [(8, 53, "eval_max_size=53"),
                                                        (53, 60, "train_max_size=53")])
def test_mqar_sizes_above_its_52_keys_are_refused_before_training(train_max, eval_max, field):
  """MQAR draws n distinct keys from 52 letters: a larger size is a config error, named at
  validation, not a crash in the sampler after training."""
  c = load(os.path.join(ROOT, "configs", "task_mqar.py"))
  c.data.task.train_max_size, c.data.task.eval_max_size = train_max, eval_max
  c.data.train_len = 4 * train_max + 3
  with pytest.raises(ConfigError, match=f"data.task.{field} is above the largest 'mqar' "
                                        "instance, 52 key-value pairs"):
    validate(c, 8)
  c.data.task.train_max_size, c.data.task.eval_max_size = 8, 52
  validate(c, 8)


def test_a_repeated_override_takes_its_last_value_tuples_too():
  # ml_collections' tuple fields are multi-valued absl flags: repeats used to be concatenated.
  import subprocess
  import sys
  script = ("import sys\nfrom absl import flags\nfrom ml_collections import config_flags\n"
            "from configs.errors import parse_flags\n"
            "config_flags.DEFINE_config_file('config', None, '', lock_config=True)\n"
            "parse_flags(sys.argv)\nc = flags.FLAGS.config\n"
            "print(c.eval.length_multipliers, c.data.train_len)\n")
  out = subprocess.run(
      [sys.executable, "-c", script, "--config=configs/alibi_tiny.py",
       "--config.eval.length_multipliers=1,2", "--config.data.train_len", "32",
       "--config.eval.length_multipliers=4,8", "--config.data.train_len=48"],
      cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
  assert out.returncode == 0, out.stderr
  assert out.stdout.split() == ["(4,", "8)", "48"]  # not (1, 2, 4, 8)


def _assignment_comment(source: str, field: str) -> str:
  """The text of configs/base.py from `c.<field> = ` to the next `c.` assignment."""
  start = source.index(f"  c.{field} = ")
  end = source.index("\n  c.", start + 1)
  return source[start:end]


def test_the_comments_and_docs_name_every_registered_suite_and_extension():
  from eval import suites
  from models import extensions
  source = open(os.path.join(ROOT, "configs", "base.py")).read()
  docs = open(os.path.join(ROOT, "docs", "evaluation.md")).read()
  section = docs[docs.index("## Suites and result files"):docs.index("## Protocols")]
  for name in suites.REGISTRY:
    assert name in _assignment_comment(source, "eval.suites"), name
    assert f"`{name}`" in section, name
  for name in extensions.EXTENSIONS:
    assert re.search(rf"\b{name}\b", _assignment_comment(source, "eval.extension")), name
    assert f"`{name}`" in section, name
  for name, ext in extensions.EXTENSIONS.items():  # the methods that read eval.factor
    if ext.records_factor:
      assert re.search(rf"\b{name}\b", _assignment_comment(source, "eval.factor")), name
      assert re.search(rf"\b{name}\b", section[section.index("`_x<s>`"):][:200]), name
