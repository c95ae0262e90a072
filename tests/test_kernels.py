"""Fused attention kernels (models/kernels): values and gradients equal the reference, the
reference equals the model's XLA attention, training is the same with either attention_impl,
and both kernels lower for their hardware (Triton for GPU, Mosaic for TPU).

On CPU the kernels run in the Pallas interpreter ("gpu" layout) and the Pallas TPU interpret
mode ("tpu" layout). Shapes are small and odd on purpose: lengths that are not multiples of
the blocks, several blocks per axis, packed documents, partial rotation.
"""

import contextlib
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import forked

import train
from conftest import FAST_COMPILE, tiny_config
from configs.validate import ConfigError, validate
from models import attention, attention_path, positions
from models.kernels import flash
from models.kernels.reference import reference_attention
from models.kernels.spec import KernelSpec
from models.positions.rope import rope_inv_freq


def packed(batch, length, heads, head_dim, seed=0, kv_heads=None):
  """Random q [b, L, h, d], k, v [b, L, kv_heads (default h), d] and packed-document ids:
  positions restart at a random offset (as PoSE-style samplers produce) in each document;
  segment ids int32 [b, L]."""
  rng = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(rng.normal(size=(batch, length, n, head_dim)), jnp.float32)
             for n in (heads, kv_heads or heads, kv_heads or heads))
  seg = np.sort(rng.integers(0, 3, size=(batch, length)), axis=1)
  pos = np.zeros((batch, length), np.int64)
  for b in range(batch):
    for t in range(length):
      new_doc = t == 0 or seg[b, t] != seg[b, t - 1]
      pos[b, t] = rng.integers(0, 50) if new_doc else pos[b, t - 1] + 1
  return q, k, v, jnp.asarray(pos, jnp.int32), jnp.asarray(seg, jnp.int32)


def random_params(bias, heads, num_buckets=8, seed=1):
  rng = np.random.default_rng(seed)
  size = {"alibi": 1, "kerple_log": 2, "kerple_power": 2, "t5": num_buckets}[bias]
  low = -1.0 if bias == "t5" else 0.05
  return jnp.asarray(rng.uniform(low, 1.5, size=(heads, size)), jnp.float32)


def assert_kernel_matches_reference(backend, spec, batch, length, heads, head_dim, blocks,
                                    kv_heads=None):
  """One compiled program: the kernel's and the reference's outputs and vector-Jacobian
  products (random cotangent) w.r.t. q, k, v (kv_heads heads, default heads) and the bias
  parameters."""
  q, k, v, pos, seg = packed(batch, length, heads, head_dim, kv_heads=kv_heads)
  cotangent = jnp.asarray(np.random.default_rng(2).normal(size=q.shape), jnp.float32)

  def run(attend, q, k, v, prm):
    def f(q, k, v, prm):
      s = spec if prm is None else dataclasses.replace(spec, bias_params=prm)
      return attend(q, k, v, pos, pos, seg, seg, s)
    out, vjp = jax.vjp(f, q, k, v, prm)
    return out, vjp(cotangent)

  kernel = lambda *a: flash.flash_attention(*a, backend=backend, interpret=True,
                                            block_sizes=flash.BlockSizes(*blocks))
  both = lambda *a: (run(kernel, *a), run(reference_attention, *a))
  compiled = jax.jit(both).lower(q, k, v, spec.bias_params).compile()
  (out, grads), (want, want_grads) = compiled(q, k, v, spec.bias_params)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=2e-6)
  for name, g, w in zip(("dq", "dk", "dv", "dbias_params"), grads, want_grads):
    if w is None:
      continue
    scale = float(jnp.max(jnp.abs(w)))
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, scale), err_msg=name)


INV16 = jnp.asarray(rope_inv_freq(16, 10000.0))
GPU_CASES = {
    # partial rotation (8 of 16 features), PI positions x 1/2, a YaRN-like q/k scale, and ALiBi
    # slopes with interpolation below the positions used.
    "rope_partial_pi_yarn+alibi_interp": (
        KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(8, 10000.0)), position_scale=0.5,
                   qk_scale=1.2, bias="alibi", bias_params=random_params("alibi", 2),
                   alibi_interpolation_len=8), 37, 16, (16, 8, 8, 16)),
    "rope_full+kerple_log": (
        KernelSpec(inv_freq=INV16, bias="kerple_log", bias_params=random_params("kerple_log", 2)),
        29, 16, (8, 16, 16, 8)),
    # per-row frequencies (as dynamic NTK gives) over 12 of 16 features, KERPLE power.
    "rope_per_row_partial+kerple_power": (
        KernelSpec(inv_freq=jnp.stack([jnp.asarray(rope_inv_freq(12, 1e4)),
                                       jnp.asarray(rope_inv_freq(12, 3e4))]),
                   bias="kerple_power", bias_params=random_params("kerple_power", 2)),
        40, 16, (16, 16, 8, 8)),
    "no_rope+t5": (
        KernelSpec(bias="t5", bias_params=random_params("t5", 2), num_buckets=8, max_distance=20),
        33, 8, (16, 16, 16, 16)),
}


@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpu_kernel_matches_reference(case):
  spec, length, head_dim, blocks = GPU_CASES[case]
  assert_kernel_matches_reference("gpu", spec, 2, length, 2, head_dim, blocks)


def test_tpu_kernel_matches_reference():
  """The Mosaic-layout kernels (lane-roll RoPE, keys on the grid, VMEM scratch) in the Pallas
  TPU interpret mode: partial rotation of 12 of 16 features, PI and YaRN scales, T5 buckets."""
  spec = KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(12, 10000.0)), position_scale=0.5,
                    qk_scale=1.2, bias="t5", bias_params=random_params("t5", 2), num_buckets=8,
                    max_distance=20)
  assert_kernel_matches_reference("tpu", spec, 1, 37, 2, 16, (16, 16, 16, 16))


GQA_SPEC = {  # partial RoPE (12 of 16 features: lane rolls and slices) + ALiBi slopes per head
    heads: KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(12, 10000.0)), qk_scale=1.2,
                      bias="alibi", bias_params=random_params("alibi", heads))
    for heads in (2, 3, 4)}


@pytest.mark.parametrize("backend,heads,kv_heads", [
    ("gpu", 4, 2), ("gpu", 3, 1), ("tpu", 4, 2), ("tpu", 2, 1)])
def test_grouped_query_kernel_matches_reference(backend, heads, kv_heads):
  """Grouped-query (group 2) and multi-query attention (one KV head for all query heads) on
  both layouts: k, v with kv_heads heads, RoPE on q and the shared k, ALiBi per query head;
  output and gradients (dk, dv summed over each group) equal the reference, which repeats
  each KV head over its group."""
  assert_kernel_matches_reference(backend, GQA_SPEC[heads], 1, 21, heads, 16, (8, 8, 8, 8),
                                  kv_heads=kv_heads)


def _pallas_calls(jaxpr):
  """{kernel name: [output avals]} of the pallas_calls anywhere in a jaxpr (nested ones in
  custom_vjp, pjit and the like included; a pallas_call's own kernel body is not entered)."""
  found = {}
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "pallas_call":
      found[str(eqn.params["name"])] = [x.aval for x in eqn.outvars]
      continue
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's jaxpr
        if hasattr(sub, "eqns"):
          found.update(_pallas_calls(sub))
  return found


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_grouped_query_is_multi_head_on_repeated_kv(backend):
  """GQA with k, v of 2 heads for 4 query heads is multi-head attention on k, v repeated over
  each group: the same output, dq and bias gradients, and dk, dv the group sums of multi-head
  attention's (the kernels read the shared KV head by index, and sum float32 per-query-head
  partials), to float32 rounding (1e-6). Under XLA's default CPU code generation they are equal
  bit for bit; under the tests' element emitters (conftest.py FAST_COMPILE), which choose how to
  loop over a dot by its shapes, the repeated-KV program may sum in another order (up to 2.4e-7
  apart). With kv_heads == heads nothing of GQA runs: the dk/dv kernel
  writes k's dtype directly (bfloat16 here), as before GQA; with groups it writes float32
  partials per query head."""
  spec = GQA_SPEC[4]
  q, k, v, pos, seg = packed(1, 13, 4, 16, kv_heads=2)  # 2 tiles of 8 per axis
  cotangent = jnp.asarray(np.random.default_rng(2).normal(size=q.shape), jnp.float32)

  def vjp(q, k, v, prm):
    attend = lambda q, k, v, prm: flash.flash_attention(
        q, k, v, pos, pos, seg, seg, dataclasses.replace(spec, bias_params=prm),
        backend=backend, interpret=True, block_sizes=flash.BlockSizes(8, 8, 8, 8))
    out, f = jax.vjp(attend, q, k, v, prm)
    return out, f(cotangent.astype(q.dtype))

  repeat = lambda x: jnp.repeat(x, 2, axis=2)
  both = jax.jit(lambda q, k, v, prm: (vjp(q, k, v, prm), vjp(q, repeat(k), repeat(v), prm)))
  (out, (dq, dk, dv, dprm)), (want, (want_dq, want_dk, want_dv, want_dprm)) = both(
      q, k, v, spec.bias_params)
  group_sum = lambda x: jnp.sum(x.reshape(1, 13, 2, 2, 16), axis=3)
  for got, expected in ((out, want), (dq, want_dq), (dprm, want_dprm),
                        (dk, group_sum(want_dk)), (dv, group_sum(want_dv))):
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
  for kv_heads, dtype in ((4, jnp.bfloat16), (2, jnp.float32)):
    args = (q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16),
            spec.bias_params)
    if kv_heads == 4:
      args = (args[0], repeat(args[1]), repeat(args[2]), args[3])
    calls = _pallas_calls(jax.make_jaxpr(vjp)(*args).jaxpr)
    dk_out, dv_out = calls[f"rope_flash_dkdv_{backend}"][:2]
    assert dk_out.dtype == dv_out.dtype == dtype and dk_out.shape == (1, 4, 16, 16)


MODEL_CASES = [
    ("none", {}), ("learned", {}), ("rope", {"rotary_fraction": 0.5}),
    ("rope", {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}),
    ("rope", {"rope_scaling": "pi", "rope_scaling_factor": 2.0}),
    ("rope", {"rope_scaling": "dynamic_ntk"}), ("rope", {"nope_every": 1}),
    ("rope", {"rope_scaling": "dynamic_ntk", "dynamic_ntk_alpha": 2.0}),
    # Llama 3.1 at L = 16: pair 0 (wavelength 6.3) blended, the rest divided by s.
    ("rope", {"rope_scaling": "llama3", "rope_scaling_factor": 4.0, "rope_scaling_train_len": 16}),
    ("rope", {"rope_scaling": "yarn", "rope_scaling_factor": 4.0, "yarn_ramp": "index",
              "yarn_mscale_all_dim": 0.5}),
    # LongRoPE: rows longer than train_len 32 take the long factors (per-row frequencies).
    ("rope", {"rope_scaling": "longrope", "rope_scaling_factor": 4.0,
              "longrope_short_factors": (1.0,) * 4 + (1.1,) * 4,
              "longrope_long_factors": (1.0, 1.0, 1.5, 2.0, 3.0, 4.0, 4.0, 4.0)}),
    ("alibi", {}), ("alibi", {"alibi_interpolation": True}),
    ("kerple_log", {}), ("kerple_power", {}), ("t5", {}),
    # BiPE: RoPE / ALiBi over the attention stream (segment indices here stand in as `pos`).
    ("bipe_rope", {}), ("bipe_alibi", {}),
]


@pytest.mark.parametrize("kind,fields", MODEL_CASES, ids=[
    "-".join([k] + [f"{n}={v}" for n, v in f.items()]) for k, f in MODEL_CASES])
def test_reference_equals_the_model_attention(kind, fields):
  """The reference (hence the kernel) computes the function the model trains: the scheme's
  rotate + bias hooks and models/attention.py's dot_product_attention."""
  c = tiny_config("unused", kind)
  for name, value in fields.items():
    c.model.position[name] = value
  dims = positions.Dims.from_config(c)  # train_len 32; positions below reach 80
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  if kind == "t5":  # a table far from its 0.02-std init, so that the bias matters
    scheme.table[...] = jax.random.normal(jax.random.key(3), scheme.table.shape)
  q, k, v, pos, seg = packed(2, 40, dims.num_heads, dims.head_dim)
  qr, kr = scheme.rotate(q, k, pos, pos, 0)
  mask = attention.attention_mask(40, 40, seg, seg)
  bias = scheme.bias(pos, pos, 0, q=qr, k=kr, mask=mask)
  want = attention.dot_product_attention(qr, kr, v, bias=bias, mask=mask)
  spec = scheme.kernel_spec(0, pos, pos)
  assert isinstance(spec, KernelSpec)
  got = reference_attention(q, k, v, pos, pos, seg, seg, spec)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_schemes_without_a_kernel_form_say_why():
  c = tiny_config("unused")
  dims = positions.Dims.from_config(c)
  pos = jnp.zeros((1, 4), jnp.int32)
  build = lambda: positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  for kind in ("fire", "sandwich", "xpos", "cope"):
    c.model.position.kind = kind
    scheme = nnx.eval_shape(build)  # parameters are not needed to say why
    reason = scheme.kernel_spec(0, pos, pos)
    assert isinstance(reason, str) and type(scheme).__name__ in reason
  for kind in ("none", "learned", "sinusoidal", "abacus"):  # positions act on embeddings only
    c.model.position.kind = kind
    spec = nnx.eval_shape(build).kernel_spec(0, pos, pos)
    assert spec.inv_freq is None and spec.bias == "none"


def test_attention_routes_to_the_kernel_or_falls_back_with_a_logged_reason(caplog, monkeypatch):
  """attention_impl="pallas": a plain ALiBi layer calls the kernel; a sliding-window layer takes
  the XLA path and says why in the log (once)."""
  monkeypatch.setattr(attention_path, "_FALLBACKS_LOGGED", set())
  c = tiny_config("unused", "alibi")
  c.model.attention_impl = "pallas"
  dims = positions.Dims.from_config(c)
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  x = jnp.zeros((1, 12, dims.d_model))
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)
  uses_kernel = []
  with caplog.at_level("WARNING"):
    for window in (0, 4):
      layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1), window=window)
      for _ in range(2):  # the reason is logged once
        jaxpr = jax.make_jaxpr(lambda x: layer(x, pos, seg, scheme))(x)
        uses_kernel.append("pallas_call" in str(jaxpr))
  assert uses_kernel == [True, True, False, False]
  messages = [r.getMessage() for r in caplog.records if "attention_impl" in r.getMessage()]
  assert len(messages) == 1 and "sliding-window" in messages[0] and "'xla'" in messages[0]


def test_longrope_keep_first_falls_back_to_xla_with_its_reason(caplog, monkeypatch):
  """LongRoPE's n-hat rotates the first positions with other frequencies than the rest: no
  KernelSpec says that, so the layer takes the XLA path and logs why."""
  monkeypatch.setattr(attention_path, "_FALLBACKS_LOGGED", set())
  c = tiny_config("unused", "rope")
  c.model.attention_impl = "pallas"
  c.model.position.rope_scaling, c.model.position.rope_scaling_factor = "longrope", 4.0
  c.model.position.longrope_long_factors = (2.0,) * 8
  dims = positions.Dims.from_config(c)
  x = jnp.zeros((1, 12, dims.d_model))
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)
  uses_kernel = []
  with caplog.at_level("WARNING"):
    for keep_first in (0, 4):
      c.model.position.longrope_keep_first = keep_first
      scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
      layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1))
      jaxpr = jax.make_jaxpr(lambda x: layer(x, pos, seg, scheme))(x)
      uses_kernel.append("pallas_call" in str(jaxpr))
  assert uses_kernel == [True, False]
  messages = [r.getMessage() for r in caplog.records if "attention_impl" in r.getMessage()]
  assert len(messages) == 1 and "longrope_keep_first=4" in messages[0]


def test_bad_attention_impl_and_block_sizes_are_refused():
  c = tiny_config("unused")
  c.model.attention_impl = "cuda"
  with pytest.raises(ConfigError, match=r"model\.attention_impl.*'xla', 'pallas'"):
    validate(c, 1)
  q, k, v, pos, seg = packed(1, 8, 1, 8)
  with pytest.raises(ValueError, match="powers of two"):
    flash.flash_attention(q, k, v, pos, pos, seg, seg, block_sizes=flash.BlockSizes(block_q=12))
  with pytest.raises(ValueError, match="bias_params"):
    flash.flash_attention(q, k, v, pos, pos, seg, seg, KernelSpec(bias="alibi"))
  odd = KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(6, 1e4)))  # 3 pairs: not for Triton
  assert "power-of-two" in flash.unsupported_reason(odd, 8, "gpu", interpret=False)
  assert flash.unsupported_reason(odd, 8, "gpu", interpret=True) is None
  # grouped-query attention needs kv_heads dividing heads, and k, v of one shape
  q, k, v, pos, seg = packed(1, 8, 4, 8, kv_heads=3)
  with pytest.raises(ValueError, match="kv_heads dividing the 4 query heads"):
    flash.flash_attention(q, k, v, pos, pos, seg, seg)
  with pytest.raises(ValueError, match="of one shape and dtype"):
    flash.flash_attention(q, k, v[:, :, :1], pos, pos, seg, seg)
  with pytest.raises(ValueError, match="dividing the 4 query heads"):
    reference_attention(q, k, v, pos, pos, seg, seg)
  reason = flash.unsupported_reason(KernelSpec(), 8, num_heads=4, num_kv_heads=3)
  assert reason.startswith("num_kv_heads 3 does not divide num_heads 4")
  assert flash.unsupported_reason(KernelSpec(), 8, num_heads=4, num_kv_heads=1) is None


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_kernels_lower_for_their_hardware(backend, kv_heads):
  """Forward and backward lower through Pallas's Triton (GPU) and Mosaic (TPU, a v5e as the
  abstract target) pipelines on this CPU-only machine: bfloat16, default blocks, padding,
  partial rotation, T5 buckets; 4 query heads on 4 (multi-head) or 2 (grouped-query) KV heads.
  (Compiling the lowered kernels needs the hardware.)"""
  spec = KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(32, 1e4)), qk_scale=1.1, bias="t5",
                    bias_params=jnp.ones((4, 32)), num_buckets=32, max_distance=128)
  x = jax.ShapeDtypeStruct((1, 1000, 4, 64), jnp.bfloat16)
  kv = jax.ShapeDtypeStruct((1, 1000, kv_heads, 64), jnp.bfloat16)
  ids = jax.ShapeDtypeStruct((1, 1000), jnp.int32)

  def f(q, k, v, pos, seg, prm):
    def attend(q, k, v, prm):
      return flash.flash_attention(q, k, v, pos, pos, seg, seg,
                                   dataclasses.replace(spec, bias_params=prm),
                                   backend=backend, interpret=False)
    out, vjp = jax.vjp(attend, q, k, v, prm)
    return out, vjp(out)

  platform, target = {"gpu": ("cuda", "__gpu$xla.gpu.triton"),
                      "tpu": ("tpu", "tpu_custom_call")}[backend]
  mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=jax.sharding.AbstractDevice(
      device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
  with jax.sharding.use_abstract_mesh(mesh) if backend == "tpu" else contextlib.nullcontext():
    exported = jax.export.export(
        jax.jit(f), platforms=[platform],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)])(
            x, kv, kv, ids, ids, jax.ShapeDtypeStruct((4, 32), jnp.float32))
  assert exported.mlir_module().count(f"@{target}(") == 3  # forward, dq, dk/dv


def test_training_with_the_kernel_matches_xla(text_corpus, tmp_path):
  """train_and_evaluate with attention_impl="pallas" (interpreted) and "xla": the same losses
  within 1e-4 over the first steps, with learned KERPLE parameters (their gradients come from
  the kernel). train.stop_after_step ends the runs before the final evaluation, which the
  kernel tests above cover."""
  losses = {}
  for impl in ("xla", "pallas"):
    c = tiny_config(text_corpus, "kerple_log")
    c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.mlp_dim = 1, 32, 2, 64
    c.data.train_len, c.data.batch_size = 24, 2
    c.train.num_steps, c.train.stop_after_step, c.train.warmup_steps = 4, 3, 1
    c.model.attention_impl = impl
    train.train_and_evaluate(c, str(tmp_path / impl), devices=jax.devices()[:1])
    with open(os.path.join(tmp_path, impl, "metrics.jsonl")) as f:
      losses[impl] = [r["loss"] for r in map(json.loads, f) if "loss" in r]
  assert len(losses["pallas"]) == 3
  np.testing.assert_allclose(losses["pallas"], losses["xla"], rtol=0, atol=1e-4)


def _bench(*args):
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  return forked.run([os.path.join(root, "bench", "attention.py"), *args], cwd=root, env=env,
                    timeout=300)


BENCH_BAD_FLAGS = [
    ("--impls=foo", "--impls takes a non-empty list from ['kernel', 'xla', 'cudnn']"),
    ("--seq_lens=0", "--seq_lens takes positive integers"),
    ("--head_dims=abc", "--head_dims takes positive integers"),
    ("--blocks=64", "--blocks takes four powers of two >= 8"),
    ("--iters=0", "--iters takes positive integers"),
]


def test_bench_refuses_bad_flags_in_one_line():
  # The command line end to end for one bad flag (exit 2, one line, nothing measured) ...
  proc = _bench(BENCH_BAD_FLAGS[0][0])
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert proc.stderr.strip().startswith(f"error: {BENCH_BAD_FLAGS[0][1]}"), proc.stderr
  assert "|" not in proc.stdout  # nothing was measured
  # ... and every bad flag through the bench's own check, in one process (one JAX start-up).
  import subprocess
  import sys
  script = (
      "import sys; sys.argv = ['attention.py']; sys.path.insert(0, 'bench')\n"
      "import attention\n"
      f"for flag in {[f for f, _ in BENCH_BAD_FLAGS]!r}:\n"
      "  attention.FLAGS.unparse_flags(); attention.FLAGS(['attention.py', flag])\n"
      "  try:\n"
      "    attention.check_flags(); print('accepted', flag)\n"
      "  except ValueError as e:\n"
      "    print(str(e).splitlines()[0])\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  checked = forked.run(["-c", script], cwd=root, env=env, timeout=300)
  assert checked.returncode == 0, checked.stderr[-2000:]
  lines = checked.stdout.strip().splitlines()
  assert len(lines) == len(BENCH_BAD_FLAGS)
  for line, (flag, message) in zip(lines, BENCH_BAD_FLAGS):
    assert line.startswith(message), (flag, line)


def test_bench_prints_its_table_on_cpu():
  proc = _bench("--seq_lens=64", "--head_dims=16", "--num_heads=2", "--matmul_size=64",
                "--iters=1", "--warmup=0")
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = [l for l in proc.stdout.splitlines() if l.startswith("| xla |")]
  assert len(rows) == 1
  cells = [c.strip() for c in rows[0].strip("|").split("|")]
  assert cells[:3] == ["xla", "16", "64"] and float(cells[3]) > 0 and float(cells[7]) > 0
