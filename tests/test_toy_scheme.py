"""A positional scheme defined in a test alone: registering it is the only step.

The toy scheme (a fixed per-head linear bias with its own config field) is inserted into
models.positions.REGISTRY for one test (monkeypatch undoes it); with no other edit, the base
config carries its field, validation checks it and the trainer trains it.
"""

import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from configs import base
from configs.errors import ConfigError
from configs.validate import validate
from conftest import tiny_config
from models import extensions, positions
from models.decoder import Decoder
from models.positions.base import PositionalScheme


class ToyBias(PositionalScheme):
  """Adds `-toy_slope * (h + 1) / H * (i - j)` to head h's logits: ALiBi with linear slopes."""

  relative = True  # positions reach attention only through `bias`
  config_fields = {
      "toy_slope": (0.5, "logit penalty per token of distance of the last head."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    slope = cfg.toy_slope
    if isinstance(slope, bool) or not isinstance(slope, (int, float)) or not slope >= 0:
      raise ConfigError(f"model.position.toy_slope must be a number >= 0; got {slope!r}")

  def __init__(self, cfg, dims, *, rngs):
    del rngs  # no parameters
    self.slopes = tuple(cfg.toy_slope * (h + 1) / dims.num_heads for h in range(dims.num_heads))

  def bias(self, q_positions, k_positions, layer, **unused):
    del layer, unused
    distance = (q_positions[:, None, :, None] - k_positions[:, None, None, :]).astype(jnp.float32)
    return -jnp.asarray(self.slopes, jnp.float32)[None, :, None, None] * distance


@pytest.fixture
def toy(monkeypatch):
  monkeypatch.setitem(positions.REGISTRY, "toy", ToyBias)


def toy_config(text_glob, **position):
  c = tiny_config(text_glob, "toy")
  c.model.position.update(position)
  return c


def test_the_base_config_gathers_the_field_from_the_registry(toy):
  position = base.get_config().model.position
  assert position.toy_slope == 0.5
  position.toy_slope = 2  # type-locked like any field: an int widens to the float default
  assert position.toy_slope == 2.0 and isinstance(position.toy_slope, float)
  with pytest.raises(TypeError):
    position.toy_slope = "steep"


def test_without_registration_the_field_and_kind_are_unknown(text_corpus):
  assert "toy_slope" not in base.get_config().model.position
  with pytest.raises(ConfigError, match=r"kind='toy' is not a registered scheme"):
    validate(tiny_config(text_corpus, "toy"), 1)


def test_validate_accepts_the_kind_and_rejects_a_bad_field(toy, text_corpus):
  validate(toy_config(text_corpus), 1)
  with pytest.raises(ConfigError, match=r"model\.position\.toy_slope must be a number >= 0") as e:
    validate(toy_config(text_corpus, toy_slope=-1.0), 1)
  assert "\n" not in str(e.value)


def test_a_relative_toy_takes_the_position_id_transforms(toy, text_corpus):
  assert "toy" in extensions.relative_kinds()
  out = extensions.apply_extension(toy_config(text_corpus), "string")
  assert out.model.position.position_transform == "string"


def test_the_bias_reaches_the_logits(toy, text_corpus):
  """Same seed, no parameters of its own: toy differs from NoPE, and equals it at slope 0."""
  def logits(kind, **position):
    c = tiny_config(text_corpus, kind)
    c.model.position.update(position)
    model = Decoder(c, rngs=nnx.Rngs(0))
    n = c.data.train_len
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, size=(2, n)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (2, n))
    return np.asarray(model(tokens, pos, jnp.ones((2, n), jnp.int32)))

  nope = logits("none")
  assert not np.allclose(logits("toy"), nope, atol=1e-4)
  np.testing.assert_allclose(logits("toy", toy_slope=0.0), nope, rtol=1e-6, atol=1e-6)


def test_train_and_evaluate_trains_the_toy(toy, text_corpus, tmp_path):
  c = toy_config(text_corpus)
  c.mesh.data = -1  # every device: train_and_evaluate(config, workdir) chooses them
  c.train.num_steps, c.train.warmup_steps = 2, 1
  c.train.checkpoint_every_steps = 2
  c.train.eval_tokens = 64
  c.eval.length_multipliers = (1.0,)
  c.eval.max_tokens_per_length = 64
  train.train_and_evaluate(c, str(tmp_path))
  with open(os.path.join(tmp_path, "metrics.jsonl")) as f:
    curve = [r["loss"] for r in map(json.loads, f) if "loss" in r]
  assert len(curve) == 2 and all(math.isfinite(x) for x in curve)
  with open(os.path.join(tmp_path, "config.json")) as f:
    written = json.load(f)["config"]["model"]["position"]
  assert written["kind"] == "toy" and written["toy_slope"] == 0.5
