"""No O(L^2) host constants: the train step and perplexity scoring lower at long lengths
without capturing large numpy arrays into the program (issue 18; JAX warns "A large amount of
constants were captured during lowering" above `jax_captured_constants_warn_bytes`).

Lowering only (no compilation): tracing a 2-layer model costs about a second per program
whatever the length, because attention runs its query chunks in one `lax.map` body."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from runs import optimizer
import train
from conftest import tiny_config
from eval import perplexity
from models import positions, sharding
from models.spec import model_spec

WARN_BYTES = 100_000  # the JAX_CAPTURED_CONSTANTS_WARN_BYTES
# Schemes whose optional parts add their own arrays (T5 buckets, FIRE's MLP, CoPE's counts ...)
# are covered by the registry sweep below; lengths: a multiple of model.attention_chunk and not.
LENGTHS = (8192, 8192 + 100)


def lowered_constants(fn, *args) -> list[str]:
  """The "constants were captured" warnings raised while lowering `fn(*args)`."""
  old = jax.config.jax_captured_constants_warn_bytes
  jax.config.update("jax_captured_constants_warn_bytes", WARN_BYTES)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      fn.lower(*args)
  finally:
    jax.config.update("jax_captured_constants_warn_bytes", old)
  return [str(w.message) for w in caught if "constants were captured" in str(w.message)]


def _programs(config, length: int):
  """(train step, its abstract args), (perplexity scoring, its abstract args) at `length`."""
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  spec = model_spec(config, mesh)
  tx = optimizer.make_optimizer(config.train)
  shardings, abstract = train.state_shardings(tx, spec, mesh)
  step_fn = train.make_step_fn(config, spec, tx, shardings, mesh, pad_id=0)
  ints = jax.ShapeDtypeStruct((1, length), jnp.int32)
  batch = {k: ints for k in ("inputs", "targets", "positions", "segment_ids")}
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  scored = {**batch, "weights": jax.ShapeDtypeStruct((1, length), jnp.float32)}
  return (step_fn, (abstract, batch)), (nll_fn, (abstract["params"], scored))


@pytest.mark.parametrize("length", LENGTHS)
def test_train_and_eval_capture_no_large_constants(text_corpus, length):
  config = tiny_config(text_corpus, "alibi")
  config.data.train_len = length
  config.data.batch_size = 1
  for fn, args in _programs(config, length):
    assert lowered_constants(fn, *args) == []


def test_every_scheme_captures_no_large_constants(text_corpus):
  # Evaluation far beyond train_len (32): biases, tables and counts at 8,292 tokens.
  for kind in sorted(positions.REGISTRY):
    config = tiny_config(text_corpus, kind)
    if kind == "learned":
      config.model.position.max_len = LENGTHS[1]
    (_, _), (nll_fn, args) = _programs(config, LENGTHS[1])
    assert lowered_constants(nll_fn, *args) == [], kind


def test_the_check_sees_a_captured_mask():
  # The check itself: a numpy causal mask inside a traced function is reported.

  def masked(x):
    n = x.shape[-1]
    return jnp.where(np.arange(n)[:, None] >= np.arange(n)[None, :], x, 0.0)

  caught = lowered_constants(jax.jit(masked), jax.ShapeDtypeStruct((1024, 1024), jnp.float32))
  assert len(caught) == 1
