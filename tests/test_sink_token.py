"""model.sink_token (Xiao et al., arXiv 2309.17453, Sec. 3.3): a learned sink before every window,
seen by every query, never scored; with every scheme, packed documents and cached decoding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from conftest import sample_tokens, tiny_config
from configs.validate import ConfigError, validate
from models import positions
from models.decoder import Decoder

KINDS = sorted(positions.REGISTRY)


def sink_model(kind="alibi", num_layers=1, **model_fields):
  c = tiny_config("unused", kind)
  c.model.sink_token, c.model.num_layers = True, num_layers
  for k, v in model_fields.items():
    c.model[k] = v
  return Decoder(c, rngs=nnx.Rngs(0)), c


def inputs(seq=16, batch=2, seed=0):
  tokens = jnp.asarray(sample_tokens(np.random.default_rng(seed), (batch, seq)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))
  return tokens, pos, jnp.ones((batch, seq), jnp.int32)


def test_logits_keep_their_shape_and_the_sink_is_a_parameter():
  model, c = sink_model()
  tokens, pos, seg = inputs()
  out = model(tokens, pos, seg)
  assert out.shape == (2, 16, c.model.vocab_size) and out.dtype == jnp.float32
  assert model.sink[...].shape == (c.model.d_model,)
  model.sink[...] = model.sink[...] + 1.0  # the sink reaches every position's logits
  changed = np.asarray(model(tokens, pos, seg))
  assert np.all(np.abs(changed - np.asarray(out)).max(axis=-1) > 0)


def test_the_sink_gets_gradient_and_the_loss_counts_the_same_tokens():
  model, c = sink_model()
  graphdef, params = nnx.split(model, nnx.Param)
  tokens, pos, seg = inputs()
  batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1), "positions": pos,
           "segment_ids": seg}
  batch["targets"] = batch["targets"].at[0, -3:].set(0)  # three PAD targets: not counted
  (total, count), grads = jax.value_and_grad(train.loss_sum, has_aux=True)(
      params, graphdef, batch, 0)
  expected = float((np.asarray(batch["targets"]) != 0).sum())
  assert float(count) == expected
  assert np.isfinite(float(total))
  sink_grad = nnx.to_pure_dict(grads)["sink"]
  assert sink_grad.shape == (c.model.d_model,) and float(jnp.abs(sink_grad).sum()) > 0
  c.model.sink_token = False  # the same count without the sink
  plain = Decoder(c, rngs=nnx.Rngs(0))
  g2, p2 = nnx.split(plain, nnx.Param)
  assert float(train.loss_sum(p2, g2, batch, 0)[1]) == expected


@pytest.mark.parametrize("kind", ["alibi", "rope", "learned", "fox"])
def test_causality(kind):
  """Changing token t leaves the logits before t unchanged (the sink comes first)."""
  model, _ = sink_model(kind, num_layers=2)
  tokens, pos, seg = inputs(seq=20, seed=1)
  t = 9
  changed = tokens.at[:, t].set((tokens[:, t] + 1) % 256)
  a, b = np.asarray(model(tokens, pos, seg)), np.asarray(model(changed, pos, seg))
  np.testing.assert_allclose(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
  assert not np.allclose(a[:, t:], b[:, t:])


def test_the_sink_is_global_and_documents_stay_apart():
  """In a packed window the second document sees the sink (its logits equal the document
  alone, with its sink) and not the first document."""
  model, _ = sink_model("alibi", num_layers=2)
  rng = np.random.default_rng(2)
  doc_a, doc_a2, doc_b = sample_tokens(rng, 7), sample_tokens(rng, 7), sample_tokens(rng, 11)
  pos = jnp.asarray(np.concatenate([np.arange(7), np.arange(11)])[None], jnp.int32)
  seg = jnp.asarray(np.concatenate([np.ones(7), 2 * np.ones(11)])[None], jnp.int32)
  packed = lambda a: jnp.asarray(np.concatenate([a, doc_b])[None], jnp.int32)  # noqa: E731
  one = np.asarray(model(packed(doc_a), pos, seg))[0, 7:]
  two = np.asarray(model(packed(doc_a2), pos, seg))[0, 7:]
  alone = np.asarray(model(jnp.asarray(doc_b[None], jnp.int32), jnp.arange(11)[None],
                           jnp.ones((1, 11), jnp.int32)))[0]
  np.testing.assert_allclose(one, two, rtol=0, atol=1e-6)
  np.testing.assert_allclose(one, alone, rtol=0, atol=2e-5)
  model.sink[...] = model.sink[...] * 3.0
  assert not np.allclose(np.asarray(model(packed(doc_a), pos, seg))[0, 7:], one)


@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_the_full_forward(kind):
  """init_cache puts the sink in slot 0; a prefill then one token at a time gives the logits
  of one forward over the whole sequence (with its sink), for every scheme."""
  model, _ = sink_model(kind, attention_chunk=0)
  tokens, pos, seg = inputs(seq=12, seed=3)
  aux = None
  if model.layout is not None:
    pos, aux = model.layout.streams(tokens, pos, seg)
  full = np.asarray(model(tokens, pos, seg, aux_positions=aux))
  cut = lambda a, lo, hi: None if a is None else a[:, lo:hi]  # noqa: E731
  decode = nnx.jit(lambda m, *a, aux: m.decode(*a, aux_positions=aux))
  cache = model.init_cache(2, 12)
  assert int(cache[0].index) == 1 and cache[0].k.shape[1] == 13
  out, cache = decode(model, tokens[:, :5], pos[:, :5], seg[:, :5], cache, aux=cut(aux, 0, 5))
  outs = [out]
  for t in range(5, 12):
    out, cache = decode(model, tokens[:, t:t + 1], pos[:, t:t + 1], seg[:, t:t + 1], cache,
                        aux=cut(aux, t, t + 1))
    outs.append(out)
  np.testing.assert_allclose(np.concatenate(outs, axis=1), full, rtol=1e-5, atol=1e-5)


def test_a_sink_model_trains(text_corpus, tmp_path):
  c = tiny_config(text_corpus, "rope")
  c.model.sink_token, c.model.num_layers = True, 1
  c.train.num_steps = c.train.checkpoint_every_steps = 10
  c.eval.length_multipliers = (1.0,)
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  import json
  curve = [json.loads(line)["loss"] for line in open(tmp_path / "metrics.jsonl")
           if "loss" in json.loads(line)]
  assert np.mean(curve[-3:]) < np.mean(curve[:3]) and np.isfinite(out["val_loss"])


@pytest.mark.parametrize("fields,clash", [
    ({"model.sliding_window": 8}, "model.sliding_window > 0"),
    ({"model.attention_impl": "pallas"}, "model.attention_impl='pallas'"),
    ({"eval.suites": "ppl_vs_length,attention"}, "eval.suites=attention"),
])
def test_what_cannot_hold_a_global_key_is_refused(fields, clash):
  c = tiny_config("unused")
  c.model.sink_token = True
  for path, value in fields.items():
    section, name = path.split(".")
    c[section][name] = value
  with pytest.raises(ConfigError, match=r"^model.sink_token=True cannot be combined with "
                     + clash.replace("(", r"\(").replace(")", r"\)")):
    validate(c, 1)


def test_hugging_face_export_is_refused():
  """transformers' Llama family has no sink: exporting would drop it silently."""
  from runs import hf_llama
  c = tiny_config("unused", "rope")
  c.model.mlp_activation, c.model.sink_token = "swiglu", True
  with pytest.raises(ConfigError, match=r"model.sink_token=True has no transformers equivalent"):
    hf_llama.export_arch(c)
