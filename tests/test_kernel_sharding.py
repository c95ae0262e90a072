"""The fused kernel on a device mesh (models/kernels/partition.py): per device in shard_map over
the batch axes and the heads, equal to one device in values and gradients (q, k, v, the bias
parameters), with dimensions the mesh does not divide replicated, grouped-query and multi-query
attention included (KV heads split with the query heads, or replicated and sliced per device);
a training step on 8 devices equals one device; tile sizes the compiled backends cannot take, and context parallelism, fall
back to the XLA path with a logged reason.

The session has 8 fake CPU devices (tests/conftest.py); the kernels run in the Pallas
interpreter. Shapes are tiny: the interpreter is slow on CPU.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from runs import optimizer
import train
from conftest import tiny_config
from data.tokenizers import get_tokenizer
from models import attention, attention_path, positions, sharding
from models.kernels import flash, partition
from models.kernels.spec import KernelSpec
from models.positions.rope import rope_inv_freq
from models.spec import model_spec
from test_kernels import packed, random_params

AXES = ("data", "fsdp", "tensor")


def mesh_of(shape, names=AXES):
  return Mesh(np.asarray(jax.devices()[:int(np.prod(shape))]).reshape(shape), names)


def test_kernel_partition_splits_what_the_axes_divide():
  shape = {"data": 2, "fsdp": 2, "tensor": 2}
  assert partition.kernel_partition(shape, 4, 4) == partition.KernelPartition(
      ("data", "fsdp"), "tensor", "")
  two = partition.kernel_partition(shape, 2, 3)  # batch: data only; 3 heads on tensor 2
  assert (two.batch_axes, two.head_axis) == (("data",), None)
  assert "fsdp=2" in two.replicated and "heads 3" in two.replicated
  one = partition.kernel_partition({"data": 1, "fsdp": 8, "tensor": 1}, 1, 4)
  assert (one.batch_axes, one.head_axis) == ((), None) and "batch 1" in one.replicated
  wide = partition.kernel_partition({"data": 1, "fsdp": 1, "tensor": 8}, 2, 4)
  assert (wide.batch_axes, wide.head_axis) == ((), None) and "tensor=8" in wide.replicated
  # an axis the kernel does not name (sequence parallelism's "context") stays replicated
  ctx = partition.kernel_partition({"data": 2, "context": 2, "tensor": 2}, 4, 2)
  assert ctx == partition.KernelPartition(("data",), "tensor", "")
  # grouped-query attention: KV heads split with the query heads when the axis divides them ...
  assert partition.kernel_partition(shape, 4, 4, kv_heads=2) == partition.KernelPartition(
      ("data", "fsdp"), "tensor", "")
  # ... else replicated, each device slicing the one KV head its query heads share (MQA; 2 KV
  # heads on tensor=8) ...
  for kv_heads, tensor in ((1, 2), (2, 8)):
    gqa = partition.kernel_partition({"data": 1, "fsdp": 1, "tensor": tensor}, 1, 8,
                                     kv_heads=kv_heads)
    assert (gqa.head_axis, gqa.kv_replicated) == ("tensor", True)
    assert f"kv_heads {kv_heads} are not divisible" in gqa.replicated
  # ... and where a device's query heads would span KV heads (3 of 24 on tensor=8), the heads are
  # replicated as a whole
  span = partition.kernel_partition({"tensor": 8}, 1, 24, kv_heads=3)
  assert (span.head_axis, span.kv_replicated) == (None, False) and "span" in span.replicated
  with pytest.raises(ValueError, match="kv_heads 3 must divide heads 4"):
    partition.kernel_partition(shape, 4, 4, kv_heads=3)


INV16 = jnp.asarray(rope_inv_freq(16, 10000.0))
ROPE_ALIBI4 = KernelSpec(inv_freq=INV16, bias="alibi", bias_params=random_params("alibi", 4))
SHARDED_CASES = {  # (spec, batch, heads, kv_heads)
    # everything divides: batch 4 over data x fsdp, 4 heads over tensor; RoPE + ALiBi slopes
    "rope+alibi": (ROPE_ALIBI4, 4, 4, 4),
    # batch 2 on data x fsdp = 4 (split over data only), 3 heads on tensor 2 (replicated);
    # per-row RoPE frequencies (as dynamic NTK gives) and the T5 table
    "per_row_rope+t5_undivided": (
        KernelSpec(inv_freq=jnp.stack([jnp.asarray(rope_inv_freq(8, 1e4)),
                                       jnp.asarray(rope_inv_freq(8, 3e4))]),
                   bias="t5", bias_params=random_params("t5", 3), num_buckets=8,
                   max_distance=20), 2, 3, 3),
    # grouped-query attention: 4 query heads on 2 KV heads, both split over tensor
    "rope+alibi_gqa": (ROPE_ALIBI4, 4, 4, 2),
    # multi-query attention: one KV head, replicated over tensor and sliced per device
    "rope+alibi_mqa": (ROPE_ALIBI4, 2, 4, 1),
}


@pytest.mark.parametrize("case", sorted(SHARDED_CASES))
def test_sharded_kernel_equals_one_device(case):
  """On the (data 2, fsdp 2, tensor 2) mesh: the shard_map'd kernel's output and its
  vector-Jacobian products w.r.t. q, k, v (kv_heads heads) and the bias parameters equal one
  device's."""
  spec, batch, heads, kv_heads = SHARDED_CASES[case]
  q, k, v, pos, seg = packed(batch, 32, heads, 16, kv_heads=kv_heads)
  cotangent = jnp.asarray(np.random.default_rng(2).normal(size=q.shape), jnp.float32)
  mesh = mesh_of((2, 2, 2))

  def run(attend):
    def f(q, k, v, prm):
      out, vjp = jax.vjp(lambda q, k, v, prm: attend(
          q, k, v, pos, pos, seg, seg, dataclasses.replace(spec, bias_params=prm)), q, k, v, prm)
      return out, vjp(cotangent)
    return f

  args = (q, k, v, spec.bias_params)
  want = jax.jit(run(flash.flash_attention)).lower(*args).compile()(*args)
  sharded = sharding.trace_under_mesh(mesh, run(partition.partitioned_flash_attention))
  part = partition.kernel_partition(mesh.shape, batch, heads, kv_heads=kv_heads)
  x = NamedSharding(mesh, P(part.batch_axes or None, None, part.head_axis))
  kv = NamedSharding(mesh, P(part.batch_axes or None, None,
                             None if part.kv_replicated else part.head_axis))
  shardings = (x, kv, kv, NamedSharding(mesh, P(part.head_axis)))
  traced = jax.jit(sharded, in_shardings=shardings).trace(*args)
  # the kernel runs per device on its shard of rows and heads (heads-major [rows, heads, L, D])
  jaxpr = str(traced.jaxpr)
  rows = batch // int(np.prod([mesh.shape[a] for a in part.batch_axes]))
  local = heads // (2 if part.head_axis else 1)
  local_kv = 1 if part.kv_replicated else kv_heads // (2 if part.head_axis else 1)
  assert "shard_map" in jaxpr and f"f32[{rows},{local},32,16]" in jaxpr
  assert f"f32[{rows},{local_kv},32,16]" in jaxpr
  assert part.kv_replicated == (case == "rope+alibi_mqa") == ("dynamic_slice" in jaxpr)
  got = traced.lower().compile()(*args)
  (out, grads), (want_out, want_grads) = got, want
  np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
  for name, g, w in zip(("dq", "dk", "dv", "dbias_params"), grads, want_grads):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(jnp.max(abs(w)))),
                               err_msg=name)


def test_one_device_mesh_traces_the_same_program():
  """A mesh of one device (or none) calls the kernel directly: the same jaxpr as without it."""
  c = tiny_config("unused", "rope")
  c.model.attention_impl = "pallas"
  dims = positions.Dims.from_config(c)
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1))
  x = jnp.zeros((2, 16, dims.d_model))
  pos, seg = jnp.broadcast_to(jnp.arange(16), (2, 16)), jnp.ones((2, 16), jnp.int32)
  f = lambda x: layer(x, pos, seg, scheme)  # noqa: E731
  plain = str(jax.make_jaxpr(f)(x))
  assert "pallas_call" in plain and "shard_map" not in plain
  assert str(jax.make_jaxpr(sharding.trace_under_mesh(mesh_of((1, 1, 1)), f))(x)) == plain
  assert sharding.trace_under_mesh(None, f) is f


def _one_step(c, devices, batch, host_state=None):
  """One `train.make_step_fn` step on `devices`, from `host_state` (numpy) or a fresh state;
  returns (metrics, new params, the starting state as numpy)."""
  mesh = sharding.make_mesh(c.mesh, devices)
  spec = model_spec(c, mesh)
  tx = optimizer.make_optimizer(c.train)
  shardings, _ = train.state_shardings(tx, spec, mesh)
  if host_state is None:
    state = train.initial_state(c, spec, tx, shardings)
    host_state = jax.device_get(state)  # the step donates the state
  else:
    state = jax.device_put(host_state, shardings)
  step_fn = train.make_step_fn(c, spec, tx, shardings, mesh, get_tokenizer(c.data.tokenizer).pad_id)
  batch = {k: jax.device_put(v, sharding.batch_sharding(mesh)) for k, v in batch.items()}
  lowered = step_fn.lower(state, batch)
  # on the mesh, the kernel runs in shard_map (a manual computation); on one device, directly
  assert ("sdy.manual_computation" in lowered.as_text()) == (len(devices) > 1)
  state, metrics = lowered.compile()(state, batch)
  return jax.device_get(metrics), jax.device_get(state["params"]), host_state


def test_train_step_with_the_kernel_on_8_devices_equals_one_device():
  """train.make_step_fn with attention_impl="pallas": loss, gradient norm and updated
  parameters (KERPLE's r1, r2 per head included: their gradients come from the kernel, split
  over tensor) on the (data 2, fsdp 2, tensor 2) mesh equal one device's, from one state."""
  c = tiny_config("unused", "kerple_log")
  c.model.attention_impl = "pallas"
  c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.mlp_dim = 1, 32, 2, 64
  c.data.train_len, c.data.batch_size = 32, 4
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, 200, size=(4, 33))
  batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
           "positions": np.broadcast_to(np.arange(32), (4, 32)),
           "segment_ids": np.ones((4, 32))}
  batch = {k: np.asarray(v, np.int32) for k, v in batch.items()}
  one, one_params, start = _one_step(c, jax.devices()[:1], batch)
  c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 2, 2, 2
  eight, eight_params, _ = _one_step(c, jax.devices(), batch, start)
  assert one["nonfinite"] == eight["nonfinite"] == 0
  np.testing.assert_allclose(eight["loss"], one["loss"], rtol=1e-5)
  np.testing.assert_allclose(eight["grad_norm"], one["grad_norm"], rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               one_params, eight_params)


def test_tiles_the_compiled_kernels_cannot_take_give_a_reason():
  spec = KernelSpec(inv_freq=INV16)
  tpu = lambda length, **b: flash.unsupported_reason(  # noqa: E731
      spec, 16, backend="tpu", interpret=False, seq_len=length, block_sizes=flash.BlockSizes(**b))
  reason = tpu(1000, block_k=64)
  assert "block_k a multiple of 128" in reason and "got 64 for length 1024" in reason
  assert "block_k_bwd" in tpu(1000, block_k_bwd=256 // 4)
  assert tpu(64, block_k=64) is None  # one key tile covers the sequence
  assert tpu(1000) is None and tpu(1000, block_k=256, block_k_bwd=128) is None
  assert flash.unsupported_reason(spec, 16, backend="tpu", interpret=True, seq_len=1000,
                                  block_sizes=flash.BlockSizes(block_k=64)) is None
  triton = flash.unsupported_reason(spec, 16, backend="gpu", interpret=False,
                                    block_sizes=flash.BlockSizes(block_q_bwd=8))
  assert triton == "the Triton kernels need blocks >= 16 (tl.dot); got block_q_bwd=8"
  assert "powers of two" in flash.unsupported_reason(spec, 16, block_sizes=flash.BlockSizes(
      block_q=24))
  assert positions.base.KERNEL_BLOCK_FIELDS == flash.BLOCK_FIELDS  # config field order


def test_bad_tpu_tile_and_context_parallelism_fall_back_with_the_reason(caplog, monkeypatch):
  """Attention with model.kernel_block_k=64 on a (compiled) TPU at 300 tokens takes the XLA
  path and logs the Mosaic limit; so does a mesh with a "context" axis of size 2."""
  monkeypatch.setattr(attention_path, "_FALLBACKS_LOGGED", set())
  c = tiny_config("unused", "alibi")
  c.model.attention_impl, c.model.kernel_block_k = "pallas", 64
  dims = positions.Dims.from_config(c)
  assert dims.kernel_blocks == (0, 64, 0, 0)
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  layer = attention.Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1))
  traced = lambda n: str(jax.make_jaxpr(lambda x: layer(  # noqa: E731
      x, jnp.arange(n)[None], jnp.ones((1, n), jnp.int32), scheme))(jnp.zeros((1, n, 64))))
  assert "pallas_call" in traced(300)  # interpreted here: no Mosaic limit
  with caplog.at_level("WARNING"):
    with monkeypatch.context() as m:
      m.setattr(flash, "resolve_backend", lambda backend=None, interpret=None: ("tpu", False))
      assert "pallas_call" not in traced(300)
    context = jax.sharding.AbstractMesh((2, 4), ("data", "context"))
    with jax.sharding.use_abstract_mesh(context):
      assert "pallas_call" not in traced(16)
  messages = [r.getMessage() for r in caplog.records if "attention_impl" in r.getMessage()]
  assert len(messages) == 2 and all("'xla'" in m for m in messages)
  assert "block_k a multiple of 128" in messages[0] and "length 512" in messages[0]
  assert "context parallelism" in messages[1] and "size 4" in messages[1]
