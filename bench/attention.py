"""Attention benchmark: the fused RoPE + bias flash kernel against XLA and cuDNN.

Usage (from the repository root):
  python bench/attention.py                      # defaults for this platform (CPU: small, xla)
  python bench/attention.py --seq_lens=1024,2048,4096,8192,16384 --head_dims=64,128 \
      --impls=kernel,xla,cudnn --dtype=bfloat16   # the issue's GPU grid (an H200)

Implementations (`--impls`):
  kernel  models/kernels/flash.py `flash_attention`: RoPE and the bias computed inside the
          tiles (Pallas: Triton on GPU, Mosaic on TPU; on CPU always the Pallas interpreter, slow;
          --interpret forces the interpreter on an accelerator too).
  xla     RoPE applied by XLA (models/positions/rope.py `apply_rope`), the bias materialized as
          [batch, heads, L, L] float32 (models/kernels/reference.py `reference_bias`), then
          `jax.nn.dot_product_attention(implementation="xla")` with a causal document mask.
  cudnn   as xla, with `jax.nn.dot_product_attention(implementation="cudnn")` (GPU only;
          is_causal=True, one document; cuDNN needs float16/bfloat16).

Per (impl, head_dim, seq_len): forward time and forward+backward time (gradients w.r.t. q, k, v
and the bias parameters; median of --iters timed calls after a compile and --warmup calls),
achieved TFLOP/s, and memory.

FLOP convention: matmul FLOPs of causal attention with the masked half not counted:
forward 2 * batch * heads * L^2 * head_dim (q k^T and p v, 2 L^2 D each, halved), backward 2.5x
the forward (FlashAttention-2, arXiv 2307.08691, Sec. 4.1), so fwd+bwd = 3.5x. RoPE, bias and
softmax FLOPs are not counted, for any implementation.

Memory: XLA's compiled memory analysis of the jitted function (arguments + outputs +
temporaries, bytes), the same measure on every backend; it grows as L^2 where a [L, L] array is
materialized and linearly otherwise.

The first line printed is the platform's measured dense matmul rate (--matmul_size, --dtype),
against which the forward rate is also given in percent ("% mm").
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from models.kernels import flash  # noqa: E402
from models.kernels.reference import reference_bias, reference_mask  # noqa: E402
from models.kernels.spec import KernelSpec  # noqa: E402
from models.positions.alibi import alibi_slopes  # noqa: E402
from models.positions.rope import apply_rope, rope_inv_freq  # noqa: E402
from runs import command_line  # noqa: E402

_ON_ACCELERATOR = jax.default_backend() in ("gpu", "tpu")
FLAGS = flags.FLAGS
flags.DEFINE_list("seq_lens", ["1024", "2048", "4096", "8192", "16384"] if _ON_ACCELERATOR
                  else ["256", "512", "1024"], "sequence lengths, tokens")
flags.DEFINE_list("head_dims", ["64", "128"], "head dimensions")
flags.DEFINE_integer("batch", 1, "sequences per call")
flags.DEFINE_integer("num_heads", 16 if _ON_ACCELERATOR else 4, "attention heads")
flags.DEFINE_list("impls", ["kernel", "xla"] + (["cudnn"] if jax.default_backend() == "gpu"
                                                else []) if _ON_ACCELERATOR else ["xla"],
                  "implementations: kernel, xla, cudnn")
flags.DEFINE_enum("dtype", "bfloat16" if _ON_ACCELERATOR else "float32",
                  ["float32", "bfloat16"], "q, k, v dtype")
flags.DEFINE_enum("bias", "alibi", ["none", "alibi", "kerple_log", "kerple_power", "t5"],
                  "positional bias family (with RoPE on all features unless --norope)")
flags.DEFINE_bool("rope", True, "rotate q and k (RoPE, theta 10000, all features)")
flags.DEFINE_bool("interpret", False, "run the kernel in the Pallas interpreter even on a "
                  "GPU/TPU (on CPU it always is)")
flags.DEFINE_list("blocks", [], "kernel tiles block_q,block_k,block_q_bwd,block_k_bwd "
                  "(empty: the backend's defaults)")
flags.DEFINE_integer("iters", 5, "timed calls per measurement (median reported)")
flags.DEFINE_integer("warmup", 1, "untimed calls after compilation")
flags.DEFINE_integer("matmul_size", 8192 if _ON_ACCELERATOR else 2048,
                     "n of the n x n x n matmul that measures the dense rate")


def make_spec(heads: int, head_dim: int) -> KernelSpec:
  """The benchmarked positional part: RoPE (all features) and the chosen bias family."""
  inv = jnp.asarray(rope_inv_freq(head_dim, 10000.0)) if FLAGS.rope else None
  rng = np.random.default_rng(0)
  if FLAGS.bias == "none":
    return KernelSpec(inv_freq=inv)
  if FLAGS.bias == "alibi":
    params = jnp.asarray(alibi_slopes(heads), jnp.float32)[:, None]
    return KernelSpec(inv_freq=inv, bias="alibi", bias_params=params)
  if FLAGS.bias == "t5":
    params = jnp.asarray(rng.normal(size=(heads, 32)), jnp.float32)
    return KernelSpec(inv_freq=inv, bias="t5", bias_params=params, num_buckets=32,
                      max_distance=128)
  params = jnp.asarray(rng.uniform(0.1, 1.0, size=(heads, 2)), jnp.float32)
  return KernelSpec(inv_freq=inv, bias=FLAGS.bias, bias_params=params)


def attention_fn(impl: str, spec: KernelSpec, pos, seg):
  """f(q, k, v, bias_params) -> out for one implementation."""
  blocks = flash.BlockSizes(*map(int, FLAGS.blocks)) if FLAGS.blocks else flash.BlockSizes()

  def with_params(prm):
    return spec if prm is None else dataclasses.replace(spec, bias_params=prm)

  if impl == "kernel":
    interpret = True if FLAGS.interpret else None
    return lambda q, k, v, prm: flash.flash_attention(
        q, k, v, pos, pos, seg, seg, with_params(prm), interpret=interpret, block_sizes=blocks)

  def unfused(q, k, v, prm):
    s = with_params(prm)
    if s.inv_freq is not None:
      q, k = apply_rope(q, pos, s.inv_freq), apply_rope(k, pos, s.inv_freq)
    bias = reference_bias(s, pos, pos)  # [b, h, L, L] float32, materialized
    if impl == "cudnn":
      bias = None if bias is None else bias.astype(q.dtype)
      return jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True,
                                          implementation="cudnn")
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=reference_mask(seg, seg),
                                        implementation="xla")
  return unfused


def measure(fn, *args) -> tuple[float, int]:
  """(median seconds per call, compiled memory footprint in bytes) of jit(fn)(*args)."""
  compiled = jax.jit(fn).lower(*args).compile()
  mem = compiled.memory_analysis()
  footprint = -1
  if mem is not None:
    footprint = (mem.argument_size_in_bytes + mem.output_size_in_bytes
                 + mem.temp_size_in_bytes - mem.alias_size_in_bytes)
  for _ in range(FLAGS.warmup):
    jax.block_until_ready(compiled(*args))
  times = []
  for _ in range(FLAGS.iters):
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times), footprint


def matmul_rate(dtype) -> float:
  """Measured FLOP/s of an n x n x n matmul in `dtype`."""
  n = FLAGS.matmul_size
  a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype)
  seconds, _ = measure(lambda x: x @ x, a)
  return 2.0 * n ** 3 / seconds


def run_one(impl: str, head_dim: int, length: int, dtype) -> dict:
  """Measures one table row: forward and forward+backward of `impl` at (head_dim, length) on
  random q, k, v [batch, length, heads, head_dim] in `dtype`, one document, positions 0..L-1.

  Returns:
    {"impl", "head_dim", "seq_len", "fwd", "fwd_bwd"}: each measurement {"ms", "tflops",
    "mem_mb"}, or None with a "<name>_error" entry when it failed (e.g. out of memory).
  """
  b, h = FLAGS.batch, FLAGS.num_heads
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.normal(size=(b, length, h, head_dim)), dtype) for _ in range(3))
  pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (b, length))
  seg = jnp.zeros((b, length), jnp.int32)
  spec = make_spec(h, head_dim)
  prm = spec.bias_params
  f = attention_fn(impl, spec, pos, seg)
  cot = jnp.asarray(rng.normal(size=q.shape), dtype)

  def fwd_bwd(q, k, v, prm):
    out, vjp = jax.vjp(f, q, k, v, prm)
    return vjp(cot)

  row = {"impl": impl, "head_dim": head_dim, "seq_len": length}
  for name, fn in (("fwd", f), ("fwd_bwd", fwd_bwd)):
    try:
      seconds, footprint = measure(fn, q, k, v, prm)
    except Exception as e:  # noqa: BLE001 - OOM or an unsupported configuration is a result
      row[name] = None
      row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
      continue
    flops = flash.causal_attention_flops(b, length, h, head_dim, backward=name == "fwd_bwd")
    row[name] = {"ms": seconds * 1e3, "tflops": flops / seconds / 1e12, "mem_mb": footprint / 2**20}
  return row


def fmt(cell: dict | None, key: str, spec: str) -> str:
  """A table cell: cell[key] formatted, or "-" for a failed measurement."""
  return "-" if cell is None else format(cell[key], spec)


IMPLS = ("kernel", "xla", "cudnn")


def check_flags() -> tuple[list[int], list[int]]:
  """The sequence lengths and head dims, after checking every flag (before anything compiles).

  Raises:
    ValueError: naming the flag and its allowed values: an unknown implementation, a size that
      is not a positive integer, or --blocks that is not four powers of two >= 8.
  """
  unknown = [i for i in FLAGS.impls if i not in IMPLS]
  if unknown or not FLAGS.impls:
    raise ValueError(f"--impls takes a non-empty list from {list(IMPLS)}; got {FLAGS.impls}")

  def positive_ints(name: str, values) -> list[int]:
    try:
      out = [int(v) for v in values]
    except ValueError:
      out = []
    if not out or min(out) < 1:
      raise ValueError(f"--{name} takes positive integers; got {list(values)}")
    return out

  seq_lens = positive_ints("seq_lens", FLAGS.seq_lens)
  head_dims = positive_ints("head_dims", FLAGS.head_dims)
  for name in ("batch", "num_heads", "iters", "matmul_size"):
    positive_ints(name, [FLAGS[name].value])
  if FLAGS.warmup < 0:
    raise ValueError(f"--warmup takes an integer >= 0; got {FLAGS.warmup}")
  if FLAGS.blocks:
    blocks = positive_ints("blocks", FLAGS.blocks)
    if len(blocks) != 4 or any(b < 8 or b & (b - 1) for b in blocks):
      raise ValueError("--blocks takes four powers of two >= 8 (block_q,block_k,block_q_bwd,"
                       f"block_k_bwd), or nothing for the backend's defaults; got {FLAGS.blocks}")
  return seq_lens, head_dims


def main(argv):
  """Prints the matmul rate, the conventions and the markdown table (see the module docstring)."""
  del argv
  try:
    seq_lens, head_dims = check_flags()
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  dtype = jnp.dtype(FLAGS.dtype)
  device = jax.devices()[0]
  print(f"# attention benchmark: {device.platform} ({device.device_kind}), jax {jax.__version__}, "
        f"{FLAGS.dtype}, batch {FLAGS.batch}, heads {FLAGS.num_heads}, "
        f"RoPE {'on' if FLAGS.rope else 'off'}, bias {FLAGS.bias}, "
        f"{time.strftime('%Y-%m-%d')}")
  peak = matmul_rate(dtype)
  print(f"# dense {FLAGS.matmul_size}^3 matmul: {peak / 1e12:.3f} TFLOP/s")
  print("# FLOPs: causal, masked half not counted; fwd = 2 B H L^2 D, fwd+bwd = 3.5x fwd. "
        "mem: XLA compiled footprint (args + outputs + temps).")
  print()
  print("| impl | head_dim | seq | fwd ms | fwd TFLOP/s | fwd % mm | fwd mem MB "
        "| fwd+bwd ms | fwd+bwd TFLOP/s | fwd+bwd mem MB |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  errors = []
  for impl in FLAGS.impls:
    for head_dim in head_dims:
      for length in seq_lens:
        r = run_one(impl, head_dim, length, dtype)
        f, fb = r.get("fwd"), r.get("fwd_bwd")
        pct = "-" if f is None else f"{100 * f['tflops'] * 1e12 / peak:.1f}"
        print(f"| {impl} | {head_dim} | {length} | {fmt(f, 'ms', '.2f')} "
              f"| {fmt(f, 'tflops', '.3g')} | {pct} | {fmt(f, 'mem_mb', '.1f')} "
              f"| {fmt(fb, 'ms', '.2f')} | {fmt(fb, 'tflops', '.3g')} "
              f"| {fmt(fb, 'mem_mb', '.1f')} |", flush=True)
        errors += [f"{impl} D={head_dim} L={length} {k[:-6]}: {v}" for k, v in r.items()
                   if k.endswith("_error")]
  for e in errors:
    print(f"# not measured: {e}")


if __name__ == "__main__":
  command_line.run(main, usage="python bench/attention.py [--seq_lens=1024,2048] "
                   "[--head_dims=64,128] [--impls=kernel,xla] ...")
