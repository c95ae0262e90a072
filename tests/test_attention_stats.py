"""Attention diagnostics (eval/attention_stats.py): entropy and sink mass against closed forms,
the probabilities against the layer's own output, and the `attention` suite end to end."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from configs.stored import load_run_config
from configs.validate import ConfigError
from eval import attention_stats
from eval import run as eval_run
from models import positions
from models.attention import Attention
from models.decoder import Decoder
from models.position_transforms import PositionTransform
from models.positions.alibi import alibi_slopes
from sweeps import collect
from tests.conftest import tiny_config


def zero_queries_and_keys(model: Decoder) -> None:
  """q = k = 0 in every layer: the logits are the scheme's bias alone."""
  for block in model.blocks:
    block.attention.wq[...] = jnp.zeros_like(block.attention.wq[...])
    block.attention.wk[...] = jnp.zeros_like(block.attention.wk[...])


def stats_of(model: Decoder, n: int):
  tokens = jnp.asarray(np.random.default_rng(0).integers(3, 200, size=(2, n)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (2, n))
  seg = jnp.ones((2, n), jnp.int32)
  return model.attention_statistics(
      tokens, pos, seg, lambda p: (p, attention_stats.attention_entropy(p),
                                   attention_stats.sink_mass(p)))


def test_uniform_attention_has_entropy_log_n_and_sink_one_over_n():
  """NoPE with q = k = 0: query i attends uniformly to its i + 1 keys, so H_i = log(i + 1) and
  the mass on the BOS is 1 / (i + 1), in every layer and head; masked keys are exactly 0."""
  c = tiny_config("unused", "none")
  model = Decoder(c, rngs=nnx.Rngs(0))
  zero_queries_and_keys(model)
  n = 24
  for probs, entropy, sink in stats_of(model, n):
    i = np.arange(n)
    np.testing.assert_allclose(np.asarray(entropy), np.broadcast_to(np.log(i + 1.0), entropy.shape),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(sink), np.broadcast_to(1.0 / (i + 1), sink.shape),
                               rtol=1e-6)
    p = np.asarray(probs)
    assert (p[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0).all()
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
  assert attention_stats.uniform_entropy(n) == pytest.approx(np.mean(np.log(np.arange(1, n + 1))))


def test_alibi_attention_entropy_matches_its_closed_form():
  """ALiBi with q = k = 0 (Press et al., arXiv 2108.12409, Sec. 3): p_ij is proportional to
  exp(-m_h (i - j)) over j <= i, a truncated geometric distribution per head slope m_h."""
  c = tiny_config("unused", "alibi")
  model = Decoder(c, rngs=nnx.Rngs(0))
  zero_queries_and_keys(model)
  n = 20
  slopes = alibi_slopes(c.model.num_heads)
  want_entropy = np.zeros((c.model.num_heads, n))
  want_sink = np.zeros((c.model.num_heads, n))
  for h, m in enumerate(slopes):
    for i in range(n):
      w = np.exp(-m * (i - np.arange(i + 1)))
      p = w / w.sum()
      want_entropy[h, i] = -(p * np.log(p)).sum()
      want_sink[h, i] = p[0]
  for _, entropy, sink in stats_of(model, n):
    np.testing.assert_allclose(np.asarray(entropy)[0], want_entropy, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sink)[0], want_sink, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind,transform", [("rope", "none"), ("alibi", "self_extend"),
                                            ("t5", "none")])
def test_weights_are_the_probabilities_the_layer_attends_with(kind, transform):
  """softmax weights @ v, projected by wo, equals the layer's output (chunked, with a position
  transform's branches): the diagnostics see exactly what the model computes."""
  c = tiny_config("unused", kind)
  c.model.position.position_transform = transform
  c.model.position.self_extend_group = 2
  dims = positions.Dims.from_config(c)
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  t = PositionTransform.from_config(c.model.position, c.data.train_len)
  attn = Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1), chunk=8, transform=t)
  n = 40
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, n, dims.d_model)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (2, n))
  seg = jnp.asarray(np.repeat([[1] * 25 + [2] * 15], 2, axis=0), jnp.int32)  # two documents
  probs = attn.weights(x, pos, seg, scheme)
  assert probs.shape == (2, dims.num_heads, n, n)
  assert float(probs[:, :, 30, :25].max()) == 0.0  # no attention across documents
  v = jnp.einsum("bsd,dhk->bshk", x, attn.wv[...])
  want = jnp.einsum("bhqk,bkhd,hdm->bqm", probs, v, attn.wo[...])
  np.testing.assert_allclose(np.asarray(attn(x, pos, seg, scheme)), np.asarray(want),
                             rtol=2e-5, atol=2e-5)


def test_bad_windows_setting_is_refused():
  c = tiny_config("unused")
  for bad in (0, -1):
    c.eval.attention.windows = bad
    with pytest.raises(ConfigError, match="eval.attention.windows must be an integer >= 1"):
      attention_stats.check_settings(c)


def test_attention_suite_end_to_end(text_corpus, tmp_path):
  """train.py writes attention.json/png for the model as trained; eval.run adds an extension's;
  collect turns them into rows; the maps of a checkpoint come back per layer and head."""
  c = tiny_config(text_corpus, "rope")
  c.train.write_plots = True
  c.train.num_steps = 4
  c.eval.suites = "ppl_vs_length,attention"
  c.eval.attention.windows = 3
  workdir = str(tmp_path / "run")
  out = train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  rows = out["attention"]["rows"]
  assert [r["length"] for r in rows] == [16, 32, 64]
  for r in rows:
    assert r["windows"] == 3
    assert len(r["entropy_by_layer"]) == 2 and len(r["entropy_by_head"][0]) == 4
    assert 0 < r["entropy"] <= r["entropy_uniform"] + 1e-6  # at most uniform over visible keys
    assert 0 < r["sink_mass"] <= 1
  assert rows[0]["entropy"] < rows[2]["entropy"]  # more keys to spread over
  with open(os.path.join(workdir, "eval", "attention.json")) as f:
    assert json.load(f)["rows"] == rows
  assert os.path.getsize(os.path.join(workdir, "eval", "attention.png")) > 0

  cfg = load_run_config(workdir)
  cfg.eval.extension = "yarn"
  cfg.eval.factor = 2.0
  cfg.eval.suites = "attention"
  results = eval_run.evaluate(workdir, config=cfg)
  assert set(results) == {"attention_yarn_x2"}
  assert results["attention_yarn_x2"]["extension_factor"] == 2.0

  frame = collect.collect(str(tmp_path))
  att = frame[frame["suite"] == "attention"]
  assert len(att) == 6 and set(att["extension"]) == {"none", "yarn"}
  assert att["entropy"].between(0, 5).all() and att["sink_mass"].between(0, 1).all()
  assert json.loads(att.iloc[0]["detail"])["entropy_by_layer"]

  table = attention_stats.checkpoint_table([workdir], (0.5, 1.0, 2.0), windows=3)
  assert list(table["length"]) == [16, 32, 64] and set(table["scheme"]) == {"rope"}
  np.testing.assert_allclose(table["entropy"], [r["entropy"] for r in rows], rtol=1e-6)
  np.testing.assert_allclose(table["sink_mass"], [r["sink_mass"] for r in rows], rtol=1e-6)

  config, spec, _, params, step = attention_stats.load_checkpoint(workdir)
  window = attention_stats.window_for(config, 32)
  maps = attention_stats.attention_maps(spec.graphdef, params, window)
  assert step == 4 and maps.shape == (2, 4, 32, 32)
  np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-5)
  with pytest.raises(ConfigError, match="documents of >= 100000 tokens"):
    attention_stats.window_for(config, 100_000)
