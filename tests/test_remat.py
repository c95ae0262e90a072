"""model.remat: values and gradients as without it, and less memory in the compiled train step."""

import os
import re

import jax
import numpy as np
from flax import nnx

import train
from conftest import tiny_config
from models.decoder import Decoder
import forked

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loss_and_grads(config, batch):
  model = Decoder(config, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)
  fn = jax.jit(jax.value_and_grad(lambda p: train.loss_sum(p, graphdef, batch, 0)[0]))
  return jax.tree.map(np.asarray, fn(params))


def test_remat_keeps_the_loss_and_the_gradients(text_corpus):
  c = tiny_config(text_corpus, "rope")
  rng = np.random.default_rng(0)
  batch = {"inputs": rng.integers(3, 259, (4, 32)).astype(np.int32),
           "targets": rng.integers(3, 259, (4, 32)).astype(np.int32),
           "positions": np.tile(np.arange(32, dtype=np.int32), (4, 1)),
           "segment_ids": np.ones((4, 32), np.int32)}
  reference = loss_and_grads(c, batch)
  for mode in ("block", "full"):
    c.model.remat = mode
    loss, grads = loss_and_grads(c, batch)
    np.testing.assert_allclose(loss, reference[0], rtol=1e-6)
    flat, ref_flat = jax.tree.leaves(grads), jax.tree.leaves(reference[1])
    assert len(flat) == len(ref_flat)
    for g, r in zip(flat, ref_flat):  # float32 rounding: the recomputed forward's fusions
      np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)  # may sum in another order


def test_remat_lowers_the_train_steps_temporaries():
  """bench/remat_memory.py at 4 layers x 256 tokens: temporaries none > block >= full (XLA's
  memory analysis of the compiled step; CPU with its memory-ordering scheduler, see the bench)."""
  env = dict(os.environ, XLA_FLAGS="--xla_cpu_enable_concurrency_optimized_scheduler=false",
             JAX_PLATFORMS="cpu")
  out = forked.run(["bench/remat_memory.py", "--batch_size=2", "--d_model=64"], cwd=ROOT, env=env,
                   timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  temps = {m: float(t) for m, t in re.findall(r"^\| (none|block|full) \| ([\d.]+) \|",
                                               out.stdout, re.M)}
  assert set(temps) == {"none", "block", "full"}, out.stdout
  assert temps["none"] > temps["block"] >= temps["full"], temps
