"""Grouped-query attention, QK-norm, QKV biases and norm_eps (models/attention.py).

- Off, they are the model as it was before they existed: logits, loss and gradients of tiny
  models equal, to 1e-5 of their scale on any CPU, what commit bf42dc0 (the code before these
  fields) gives (bitwise on one machine: checked on 2026-12-06, AMD EPYC with AVX2).
- GQA equals multi-head attention whose K/V weights are repeated per group, for every scheme.
- QK-norm equals RMSNorm written out by hand, in both forms; biases add to the projections.
- Cached decoding keeps only the KV heads and equals full recomputation (tests/test_decoding.py
  runs every scheme under GQA); 8 devices equal one (training).
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from conftest import sample_tokens, tiny_config
from models import positions
from models.attention import Attention
from models.decoder import Decoder

TOKENS = jnp.asarray(sample_tokens(np.random.default_rng(0), (2, 24)), jnp.int32)
POS = jnp.broadcast_to(jnp.arange(24, dtype=jnp.int32), (2, 24))
SEG = jnp.ones((2, 24), jnp.int32)

# Fingerprints (mean, root mean square, projection on a fixed Gaussian vector / sqrt(size); see
# `fingerprint`) of the logits, the loss and the gradients in float32 of `tiny_config` models
# (Rngs(0)), computed with the code of commit bf42dc0, before num_kv_heads, qk_norm, qkv_bias and
# norm_eps existed. Bitwise digests were machine-dependent (XLA:CPU's code differs with the
# CPU's vector units: AVX-512 against AVX2), so the check is to 1e-5 of the array's scale: any
# change of the model's arithmetic moves the projection by far more.
BEFORE = {
    "alibi/gelu": ((0.004349461459, 0.178022037, -0.07714174287),
                     5.4938097,
                     (-6.851914307e-05, 0.009627090857, 0.003898905677)),
    "alibi/swiglu": ((-0.0004342338722, 0.1592645802, -0.1417437016),
                       5.588424683,
                       (-6.706971658e-06, 0.00631154921, 0.01178709556)),
    "cope/gelu": ((0.004799840823, 0.1784440869, -0.08862010241),
                    5.4930439,
                    (-6.429151028e-05, 0.009600105648, 0.003804167797)),
    "fope/gelu": ((0.004790788813, 0.1784524858, -0.09003320516),
                    5.49342823,
                    (-6.584079736e-05, 0.009723224415, 0.003828520204)),
    "pope/swiglu": ((-0.0006863376175, 0.1592567992, -0.1480781331),
                      5.58607769,
                      (-5.639208885e-06, 0.006282378924, 0.009684123314)),
    "rope/gelu": ((0.004792935589, 0.1784415128, -0.08824081417),
                    5.493143082,
                    (-6.589756291e-05, 0.009720100147, 0.003853765693)),
    "rope/swiglu": ((-0.0004545124654, 0.1592312148, -0.1537140338),
                      5.585334778,
                      (-4.650467303e-06, 0.006362271808, 0.009974966296)),
    "t5/swiglu": ((0.001050668511, 0.1593024977, 0.02297004661),
                    5.567835331,
                    (3.597595346e-05, 0.007089901083, -0.002462221635)),
}


def fingerprint(x) -> np.ndarray:
  """(mean, RMS, <x, g> / sqrt(size)) of `x` in float64, g ~ N(0, 1) from seed 1."""
  x = np.asarray(x, np.float64).ravel()
  g = np.random.default_rng(1).standard_normal(x.size)
  return np.array([x.mean(), np.sqrt(np.mean(x**2)), x @ g / np.sqrt(x.size)])


def assert_same(x, want) -> None:
  want = np.asarray(want)
  np.testing.assert_allclose(fingerprint(x), want, rtol=1e-5, atol=1e-5 * want[1])


def loss_and_grads(model):
  graph, params = nnx.split(model)

  def loss(p):
    logits = nnx.merge(graph, p)(TOKENS, POS, SEG, train=True)
    logp = jax.nn.log_softmax(logits[:, :-1])
    return -jnp.mean(logp[jnp.arange(2)[:, None], jnp.arange(23), TOKENS[:, 1:]])
  value, grads = jax.jit(jax.value_and_grad(loss))(params)
  return value, jnp.concatenate([g.ravel() for g in jax.tree.leaves(grads)])


@pytest.mark.parametrize("name,explicit", [(name, False) for name in sorted(BEFORE)]
                         + [(name, True) for name in ("rope/gelu", "pope/swiglu")])
def test_off_is_bitwise_the_model_before_these_fields(name, explicit):
  kind, act = name.split("/")
  c = tiny_config("unused", kind)
  c.model.mlp_activation, c.model.tie_embeddings = act, act == "gelu"
  if kind == "fope":  # FoPE's default changed since to the released code's: the listing's form
    c.model.position.fope_normalize = "column_sum"
  if explicit:  # every new field at the value that means "as before"
    c.model.num_kv_heads, c.model.qk_norm, c.model.qkv_bias = 4, "none", False
    c.model.norm_eps = 1e-6
  model = Decoder(c, rngs=nnx.Rngs(0))
  value, grads = loss_and_grads(model)
  logits, loss, gradients = BEFORE[name]
  assert_same(model(TOKENS, POS, SEG), logits)
  assert float(value) == pytest.approx(loss, rel=1e-6)
  assert_same(grads, gradients)


def config(kind, **model):
  c = tiny_config("unused", kind)
  for key, value in model.items():
    c.model[key] = value
  return c


def repeated_to_heads(gqa_state: dict, group: int) -> dict:
  """The GQA model's parameters as a multi-head model's: wk, wv (and bk, bv) of each layer
  repeated per group along their head axis."""
  def one(path, leaf):
    name = path[-1].key if hasattr(path[-1], "key") else str(path[-1])
    if name in ("wk", "wv"):
      return jnp.repeat(leaf, group, axis=1)
    if name in ("bk", "bv"):
      return jnp.repeat(leaf, group, axis=0)
    return leaf
  return jax.tree_util.tree_map_with_path(one, gqa_state)


def set_params(model, pure: dict) -> None:
  state = nnx.state(model)
  nnx.replace_by_pure_dict(state, pure)
  nnx.update(model, state)


@pytest.mark.parametrize("kind,kv", [(kind, 2) for kind in sorted(positions.REGISTRY)]
                         + [("rope", 1), ("alibi", 1), ("cope", 1), ("pope", 1)])
def test_gqa_equals_multi_head_attention_with_repeated_kv_weights(kind, kv):
  """Every scheme with 2 KV heads for 4 query heads; multi-query (1 KV head) for a rotation, a
  bias, a contextual bias and a per-head rotation."""
  extra = {"qk_norm": "head", "qkv_bias": True} if kind in ("rope", "alibi") else {}
  gqa = Decoder(config(kind, num_kv_heads=kv, **extra), rngs=nnx.Rngs(1))
  graph, state = nnx.split(gqa)
  state = jax.tree.map(lambda x: x + 0.01 * jnp.sin(jnp.arange(x.size).reshape(x.shape) + 1.0),
                       nnx.to_pure_dict(state))  # nonzero biases, norm scales away from 1
  set_params(gqa, state)
  mha = Decoder(config(kind, num_kv_heads=-1, **extra), rngs=nnx.Rngs(1))
  set_params(mha, repeated_to_heads(state, 4 // kv))
  np.testing.assert_allclose(np.asarray(gqa(TOKENS, POS, SEG)), np.asarray(mha(TOKENS, POS, SEG)),
                             rtol=1e-5, atol=1e-5)


def test_gqa_parameters_and_cache_hold_only_the_kv_heads():
  model = Decoder(config("rope", num_kv_heads=2, qkv_bias=True), rngs=nnx.Rngs(0))
  attn = model.blocks[0].attention
  assert attn.wq.shape == (64, 4, 16) and attn.wk.shape == attn.wv.shape == (64, 2, 16)
  assert attn.bq.shape == (4, 16) and attn.bk.shape == attn.bv.shape == (2, 16)
  assert attn.wk.logical_axes == ("embed", "kv_heads", "head_dim")
  cache = model.init_cache(3, 10)
  assert cache[0].k.shape == cache[0].v.shape == (3, 10, 2, 16)
  full = Decoder(config("rope"), rngs=nnx.Rngs(0)).init_cache(3, 10)
  assert full[0].k.size == 2 * cache[0].k.size


def rms(x, scale, eps):
  x = np.asarray(x, np.float64)
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(scale)


@pytest.mark.parametrize("form", ["head", "full"])
def test_qk_norm_is_rmsnorm_written_out(form):
  dims = positions.Dims(num_heads=4, head_dim=8, d_model=32, num_layers=1, train_len=16,
                        num_kv_heads=2)
  attn = Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(0), qk_norm=form, qkv_bias=True,
                   norm_eps=1e-5)
  rng = np.random.default_rng(0)
  for p in (attn.bq, attn.bk, attn.bv, attn.q_norm.scale, attn.k_norm.scale):
    p[...] = jnp.asarray(rng.normal(size=p.shape), jnp.float32)
  x = jnp.asarray(rng.normal(size=(2, 5, 32)), jnp.float32)
  q, k, v = attn._project(x)
  x64 = np.asarray(x, np.float64)
  q_lin = np.einsum("bsd,dhe->bshe", x64, np.asarray(attn.wq[...])) + np.asarray(attn.bq[...])
  k_lin = np.einsum("bsd,dhe->bshe", x64, np.asarray(attn.wk[...])) + np.asarray(attn.bk[...])
  v_lin = np.einsum("bsd,dhe->bshe", x64, np.asarray(attn.wv[...])) + np.asarray(attn.bv[...])
  if form == "head":  # one scale of head_dim, each head normalised over its head_dim
    want_q = rms(q_lin, attn.q_norm.scale[...], 1e-5)
    want_k = rms(k_lin, attn.k_norm.scale[...], 1e-5)
  else:  # the whole projection normalised at once (OLMo 2)
    want_q = rms(q_lin.reshape(2, 5, 32), attn.q_norm.scale[...], 1e-5).reshape(q_lin.shape)
    want_k = rms(k_lin.reshape(2, 5, 16), attn.k_norm.scale[...], 1e-5).reshape(k_lin.shape)
  assert attn.q_norm.scale.shape == ((8,) if form == "head" else (32,))
  assert attn.k_norm.scale.shape == ((8,) if form == "head" else (16,))
  np.testing.assert_allclose(np.asarray(q), want_q, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(k), want_k, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(v), v_lin, rtol=1e-5, atol=1e-5)


def test_norm_eps_reaches_every_norm():
  model = Decoder(config("rope", qk_norm="head", norm_eps=1e-3), rngs=nnx.Rngs(0))
  block = model.blocks[0]
  assert {block.attn_norm.epsilon, block.mlp_norm.epsilon, model.final_norm.epsilon,
          block.attention.q_norm.epsilon, block.attention.k_norm.epsilon} == {1e-3}


def losses(workdir):
  import json
  with open(f"{workdir}/metrics.jsonl") as f:
    return [(r["step"], r["loss"]) for r in map(json.loads, f) if "loss" in r]


def test_kv_heads_are_split_over_tensor_when_it_divides_them_else_replicated():
  from models import sharding
  from models.spec import model_spec
  for kv, spec in ((2, ("fsdp", "tensor", None)), (1, ("fsdp", None, None))):
    c = config("rope", num_kv_heads=kv)
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 2, 2, 2
    mesh = sharding.make_mesh(c.mesh)
    layer = model_spec(c, mesh).param_shardings["blocks"][0]["attention"]
    assert tuple(layer["wk"].spec) == tuple(layer["wv"].spec) == spec
    assert tuple(layer["wq"].spec) == ("fsdp", "tensor", None)


def test_gqa_eight_devices_match_one_device(text_corpus, tmp_path):
  """KV heads split over `tensor` (2 of 2), with QK-norm and QKV biases: the same losses as one
  device (the replicated layout's kernel path: tests/test_kernel_sharding.py)."""
  kv = 2

  def make():
    c = tiny_config(text_corpus, "rope")
    c.model.num_kv_heads, c.model.qk_norm, c.model.qkv_bias = kv, "head", True
    c.train.num_steps = 4
    c.eval.length_multipliers = (1.0,)
    return c
  train.train_and_evaluate(make(), str(tmp_path / "one"), devices=jax.devices()[:1])
  eight = make()
  eight.mesh.data, eight.mesh.fsdp, eight.mesh.tensor = 2, 2, 2
  train.train_and_evaluate(eight, str(tmp_path / "eight"))
  a, b = losses(tmp_path / "one"), losses(tmp_path / "eight")
  assert [s for s, _ in a] == [s for s, _ in b] == [1, 2, 3, 4]
  np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=1e-5)


@pytest.mark.parametrize("kind", ["rope", "alibi", "kerple_log"])
def test_fused_kernel_equals_xla_under_gqa(kind, caplog):
  """model.attention_impl="pallas" (the Pallas interpreter on CPU) against the XLA path: the
  kernel reads each query head's KV head, with in-kernel RoPE or a per-query-head bias (ALiBi,
  learned KERPLE); logits and gradients. (The schemes with per-head rotation, PoPE, FoPE and
  RoPE on some heads, have no kernel form and fall back with their reason.)"""
  def model(impl):
    c = config(kind, num_kv_heads=2, qk_norm="head", attention_impl=impl)
    c.model.attention_chunk = 0
    return Decoder(c, rngs=nnx.Rngs(2))
  fused, xla = model("pallas"), model("xla")
  with caplog.at_level("WARNING"):
    got, got_grads = fused(TOKENS, POS, SEG), loss_and_grads(fused)[1]
  assert "using the 'xla' attention path" not in caplog.text  # the kernel ran
  np.testing.assert_allclose(np.asarray(got), np.asarray(xla(TOKENS, POS, SEG)), rtol=2e-5,
                             atol=2e-5)
  np.testing.assert_allclose(np.asarray(got_grads), np.asarray(loss_and_grads(xla)[1]),
                             rtol=1e-4, atol=1e-5)
