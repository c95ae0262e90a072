"""Sequence (context) parallelism (models/context_parallel.py): with each sequence split over a
"context" mesh axis, training losses and gradients and evaluation NLLs equal the one-device
model's, for every positional scheme, with several documents per sequence and lengths that are
not a multiple of the 2 x context chunks (8 fake CPU devices, tests/conftest.py)."""

import jax
import numpy as np
import pytest

from runs import optimizer
import train
from conftest import tiny_config
from eval import perplexity
from models import context_parallel, positions, sharding
from models.spec import model_spec

TRAIN_LEN = 16
ONE_DEVICE = (1, 1, 1, 1)  # (data, fsdp, context, tensor)


def _config(text_corpus, kind: str, **model_fields):
  c = tiny_config(text_corpus, kind)
  c.data.train_len = TRAIN_LEN
  c.data.batch_size = 4
  c.model.attention_chunk = 8  # several query chunks per device at 4x
  if kind == "learned":
    c.model.position.max_len = 4 * TRAIN_LEN
  for name, value in model_fields.items():
    target = c.model.position if name in c.model.position else c.model
    setattr(target, name, value)
  return c


def _mesh(config, sizes):
  config.mesh.data, config.mesh.fsdp, config.mesh.context, config.mesh.tensor = sizes
  return sharding.make_mesh(config.mesh, jax.devices()[:int(np.prod(sizes))])


def _batch(length: int, seed: int = 0) -> dict:
  """4 rows of `length` tokens, two documents each (segment 1 then 2, positions restarting)."""
  rng = np.random.default_rng(seed)
  cut = length // 2 - 3
  positions_row = np.concatenate([np.arange(cut), np.arange(length - cut)]).astype(np.int32)
  segments_row = np.where(np.arange(length) < cut, 1, 2).astype(np.int32)
  return {"inputs": rng.integers(3, 250, (4, length)).astype(np.int32),
          "targets": rng.integers(3, 250, (4, length)).astype(np.int32),
          "positions": np.tile(positions_row, (4, 1)), "segment_ids": np.tile(segments_row, (4, 1)),
          "weights": np.ones((4, length), np.float32)}


def _random_params(spec) -> dict:
  """Random host values for every parameter (norm scales near 1, the rest N(0, 0.1^2)): no
  initialiser to compile, and zero-initialised tables (CoPE's) take part in the comparison."""
  rng = np.random.default_rng(0)
  return jax.tree.map(
      lambda a: ((1.0 if a.ndim == 1 else 0.0) + 0.1 * rng.standard_normal(a.shape)).astype(
          a.dtype), spec.abstract_params)


def _loss_grads_and_nll(config, sizes, train_batch, eval_batch, params=None):
  """(loss sum, gradients, per-position NLL sums at the eval length) on the mesh `sizes`, from
  one jitted program (train.loss_sum's value and gradient; make_nll_fn's scoring), and the
  parameters (`_random_params` unless given)."""
  mesh = _mesh(config, sizes)
  spec = model_spec(config, mesh)
  params = jax.device_put(_random_params(spec) if params is None else params,
                          spec.param_shardings)

  def run(params, train_batch, eval_batch):
    (total, _), grads = jax.value_and_grad(train.loss_sum, has_aux=True)(
        params, spec.graphdef, train_batch, 0)
    nll = perplexity.model_token_nll(params, spec.graphdef, eval_batch) * eval_batch["weights"]
    return total, grads, nll.sum(axis=0)

  fn = jax.jit(sharding.trace_under_mesh(mesh, run), in_shardings=(
      spec.param_shardings, sharding.batch_sharding(mesh), sharding.batch_sharding(mesh)))
  return jax.device_get(fn(params, train_batch, eval_batch)), params


def _assert_equal(reference, other, what: str):
  (t1, g1, n1), (t2, g2, n2) = reference, other
  np.testing.assert_allclose(t2, t1, rtol=2e-6, err_msg=f"{what}: loss")
  for path, a in jax.tree_util.tree_leaves_with_path(g1):
    b = g2
    for key in path:
      b = b[key.key]
    # float32 sums in another order: an absolute error on the scale of the leaf's largest entry
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=max(2e-6, 1e-5 * float(np.abs(a).max())),
                               err_msg=f"{what}: gradient {jax.tree_util.keystr(path)}")
  np.testing.assert_allclose(n2, n1, rtol=2e-5, atol=2e-5, err_msg=f"{what}: 4x NLL")


# Schemes whose positional code path is another's, with the one that covers it: the RoPE-family
# variants change only the inverse frequencies RoPE.rotate uses (models/positions/p_rope.py, hope,
# resonance_rope), KERPLE's power form differs from the log form only in its kernel, and NoPE and
# sinusoidal reach the model, like learned positions, only through the embedding of the position
# ids. BiPE's attention is RoPE's or ALiBi's over other position ids, and its second stream is
# derived before the split exactly as Abacus's (eval/perplexity.py `model_token_nll`), which is
# run. The others each have their own path through context parallelism, and each is run.
SAME_PATH_AS = {"p_rope": "rope", "hope": "rope", "resonance_rope": "rope",
                "kerple_power": "kerple_log", "none": "learned", "sinusoidal": "learned",
                "bipe_rope": "rope", "bipe_alibi": "alibi"}
DISTINCT_PATHS = sorted(set(positions.REGISTRY) - set(SAME_PATH_AS))


def test_every_scheme_is_run_or_shares_a_run_schemes_path():
  assert set(SAME_PATH_AS) <= set(positions.REGISTRY)
  assert set(SAME_PATH_AS.values()) <= set(DISTINCT_PATHS)
  for kind, covered_by in SAME_PATH_AS.items():  # the attention hooks are the cover's own
    cls, cover = positions.REGISTRY[kind], positions.REGISTRY[covered_by]
    assert (cls.rotate, cls.bias) == (cover.rotate, cover.bias), kind


@pytest.mark.parametrize("kind", DISTINCT_PATHS)
def test_context_parallel_equals_one_device_for_every_scheme(text_corpus, kind):
  # Training at 29 tokens (padded to 32 = 2 x 4 chunks of 4 on context 4) on data 2 x
  # context 4; evaluation at 4 x train_len = 64 tokens. One layer, unchunked: the layer and
  # chunk options have their own test below.
  config = _config(text_corpus, kind, num_layers=1, attention_chunk=0)
  train_batch, eval_batch = _batch(TRAIN_LEN * 2 - 3), _batch(4 * TRAIN_LEN, seed=1)
  reference, params = _loss_grads_and_nll(config, ONE_DEVICE, train_batch, eval_batch)
  split, _ = _loss_grads_and_nll(config, (2, 1, 4, 1), train_batch, eval_batch, params)
  _assert_equal(reference, split, kind)


def test_context_parallel_equals_one_device_with_layer_options(text_corpus):
  # Two layers, query chunks of 8 (several per device), evaluation at 69 tokens (4 x 16 + 5,
  # padded to 72), on fsdp 2 x context 2 x tensor 2:
  # - sliding windows by global index (layer 0; layer 1 global: global_every 2);
  # - log-n scaling from the global query positions;
  # - dynamic NTK, whose length is 1 + the largest global position;
  # - Self-Extend's piecewise branches from the gathered key positions.
  config = _config(text_corpus, "rope", sliding_window=6, global_every=2, logn_scaling=True,
                   rope_scaling="dynamic_ntk", position_transform="self_extend",
                   self_extend_group=2, self_extend_window=4)
  train_batch, eval_batch = _batch(TRAIN_LEN * 2), _batch(4 * TRAIN_LEN + 5, seed=2)
  reference, params = _loss_grads_and_nll(config, ONE_DEVICE, train_batch, eval_batch)
  split, _ = _loss_grads_and_nll(config, (1, 2, 2, 2), train_batch, eval_batch, params)
  _assert_equal(reference, split, "layer options")


def test_train_step_with_context_parallelism_equals_one_device(text_corpus):
  # The jitted train_step of train.py (donation, optimizer update) on data 2 x context 4.
  results = []
  for sizes in (ONE_DEVICE, (2, 1, 4, 1)):
    config = _config(text_corpus, "rope", num_layers=1)
    mesh = _mesh(config, sizes)
    spec = model_spec(config, mesh)
    tx = optimizer.make_optimizer(config.train)
    shardings, _ = train.state_shardings(tx, spec, mesh)
    state = train.initial_state(config, spec, tx, shardings)
    step_fn = train.make_step_fn(config, spec, tx, shardings, mesh, pad_id=0)
    batch = {k: v for k, v in _batch(TRAIN_LEN).items() if k != "weights"}
    state, metrics = step_fn(state, jax.device_put(batch, sharding.batch_sharding(mesh)))
    results.append(jax.device_get((metrics, state["params"])))
  (m1, p1), (m2, p2) = results
  np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=2e-6)
  np.testing.assert_allclose(m2["grad_norm"], m1["grad_norm"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_zigzag_layout_balances_the_causal_work():
  # Device i holds chunks i and 2c-1-i; its first chunk needs keys [0, (i+1) n) <= c n (the
  # first half), its second [0, (2c-i) n): 1 + 2 = 3 half-sequences of keys per device.
  np.testing.assert_array_equal(context_parallel.zigzag_order(4), [0, 7, 1, 6, 2, 5, 3, 4])
  np.testing.assert_array_equal(context_parallel.zigzag_order(1), [0, 1])
  x = np.arange(2 * 24).reshape(2, 24)
  laid_out = context_parallel._reorder_chunks(x, context_parallel.zigzag_order(3))
  np.testing.assert_array_equal(laid_out[0, :8], [0, 1, 2, 3, 20, 21, 22, 23])  # device 0
  back = context_parallel._reorder_chunks(laid_out, np.argsort(context_parallel.zigzag_order(3)))
  np.testing.assert_array_equal(back, x)
  assert context_parallel.context_size() == 1  # outside any shard_map


@pytest.mark.parametrize("kind,kv", [("rope", 2), ("cope", 1)])
def test_context_parallel_equals_one_device_under_gqa(text_corpus, kind, kv):
  """Grouped-query (2 KV heads) and multi-query attention with QK-norm and QKV biases, the KV
  heads' sequence gathered over `context`: RoPE (rotation on the KV heads) and CoPE (a
  contextual bias over every query head's group key), on data 2 x context 2 x tensor 2."""
  config = _config(text_corpus, kind, num_layers=1, attention_chunk=0, num_kv_heads=kv,
                   qk_norm="head", qkv_bias=True)
  train_batch, eval_batch = _batch(TRAIN_LEN * 2 - 3), _batch(4 * TRAIN_LEN, seed=3)
  reference, params = _loss_grads_and_nll(config, ONE_DEVICE, train_batch, eval_batch)
  split, _ = _loss_grads_and_nll(config, (2, 1, 2, 2), train_batch, eval_batch, params)
  _assert_equal(reference, split, f"{kind} with {kv} KV heads")
