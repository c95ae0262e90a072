"""bench/vs_pytorch.py: bad flags refused in one line; a one-step run prints our row (and the
PyTorch reference's, with the ratio, where PyTorch is installed). bench/profile_step.py: a real
trace read back into kinds of op and source lines."""

import os
import re
import sys

import pytest

import forked

from conftest import FAST_COMPILE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def vs_pytorch(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  return forked.run([os.path.join(ROOT, "bench", "vs_pytorch.py"), *args], cwd=ROOT, env=env,
                    timeout=300)


def test_vs_pytorch_refuses_bad_flags_and_prints_its_rows():
  for args, message in (
      (["--shapes=wide,huge"], "--shapes takes a non-empty list from ['default', 'wide', "
                               "'long']; got ['huge']"),
      (["--devices=3"], "--devices=3 must divide the batch size of every shape (default: 16, "
                        "wide: 8, long: 4)"),
      (["--devices=2"], "--devices=2 but this process has 1 JAX device(s); on CPU start it "
                        "with XLA_FLAGS=--xla_force_host_platform_device_count=2")):
    bad = vs_pytorch(*args)
    assert (bad.returncode, bad.stderr.strip(), bad.stdout) == (2, f"error: {message}", ""), (
        bad.stderr[-2000:])
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  # refused before the machine's matmul rate is measured
  bad = forked.run([os.path.join(ROOT, "bench", "train_throughput.py"), "--prefetch=4,abc"],
                   cwd=ROOT, env=env, timeout=300)
  assert (bad.returncode, bad.stderr.strip(), bad.stdout) == (
      2, "error: --prefetch takes integers >= 0 or 'grain'; got ['4', 'abc']", "")
  run = vs_pytorch("--shapes=default", "--schemes=alibi", "--steps=1", "--warmup=0", "--rounds=1")
  assert run.returncode == 0, run.stderr[-2000:]
  ours = re.search(r"^\| default \(16 x 256\) \| ours, `alibi` \| ([\d,]+) \| ([\d.]+) \| "
                   r"([\d,]+) \|", run.stdout, re.M)
  assert ours, run.stdout
  # 259 x 128 tied embedding + 4 x (4 x 128^2 + 2 x 128 x 512 + 2 RMSNorms of 128) + 128
  assert int(ours.group(1).replace(",", "")) == 820_736
  tokens_per_s = 16 * 256 / (float(ours.group(2)) / 1e3)  # from ms/step, printed to 0.1 ms
  assert abs(tokens_per_s / float(ours.group(3).replace(",", "")) - 1) < 2e-3
  try:
    import torch  # noqa: F401
    # the same + nanoGPT's 256 x 128 position table
    assert re.search(r"^\| default \(16 x 256\) \| PyTorch \(nanoGPT\) \| 853,504 \|", run.stdout,
                     re.M) and "x |" in run.stdout
  except ImportError:
    assert "PyTorch is not installed" in run.stdout


def test_profile_step_maps_traced_ops_to_their_kind_and_source_line(tmp_path):
  """bench/profile_step.py's reading of a real trace: the batched einsum and the 2-D matmul of
  a small jit'd function are found once per call, with their kinds and this file's lines."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  sys.path.insert(0, os.path.join(ROOT, "bench"))
  import profile_step

  def f(x, w, q, k):
    y = x @ w  # the 2-D matmul
    s = jnp.einsum("bqd,bkd->bqk", q, k)  # the batched one
    return jnp.tanh(y).sum() + jnp.exp(s).max()

  first = f.__code__.co_firstlineno
  lines = {"2-D matmul": first + 1, "batched matmul": first + 2}
  r = np.random.default_rng(0)
  args = [jnp.asarray(r.standard_normal(s), jnp.float32)
          for s in ((64, 32), (32, 48), (4, 16, 8), (4, 24, 8))]
  jitted = jax.jit(f)
  ops = profile_step.parse_hlo(jitted.lower(*args).compile().as_text(), ROOT)
  dots = {op.kind: op.source for op in ops.values() if op.op_name.endswith("dot_general")}
  assert dots == {kind: f"tests/test_bench.py:{line}" for kind, line in lines.items()}, ops
  jax.block_until_ready(jitted(*args))
  with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
    for _ in range(3):
      jax.block_until_ready(jitted(*args))
  kinds, by_op = profile_step.breakdown(ops, profile_step.trace_times(str(tmp_path)), steps=3)
  assert set(kinds) == set(profile_step.KINDS)
  for kind in lines:  # each matmul ran once per call, and took time
    assert kinds[kind][1] == 1 and kinds[kind][0] > 0, kinds
  sources = {source for (_, _, source) in by_op}
  assert {f"tests/test_bench.py:{line}" for line in lines.values()} <= sources, by_op
  assert ("transpose(jvp())/dot_general", "all-reduce of 2 combined operations") == tuple(
      profile_step.Op("other", op, name, "").operation for op, name in (
          ("fusion", "jit(train_step)/transpose(jvp())/dot_general"),
          ("all-reduce", "jit(t)/(transpose(jvp())/dot_general:jvp()/reduce_sum)")))
  combined = profile_step.parse_hlo(
      "HloModule m\n\nFileNames\n1 \"/r/models/attention.py\"\n\nFileLocations\n"
      "1 {file_name_id=1 function_name_id=1 line=9 end_line=9}\n\nStackFrames\n"
      "1 {file_location_id=1 parent_frame_id=1}\n\n"
      "ENTRY %main (p: f32[2]) -> f32[2] {\n"
      "  %p = f32[2]{0} parameter(0)\n"
      "  %all-reduce = f32[2]{0} all-reduce(%p), to_apply=%add, metadata={op_name=\"jit(t)/("
      "transpose(jvp())/dot_general:jvp()/reduce_sum)\" stack_frame_id=1}\n"
      "  ROOT %exp = f32[2]{0} exponential(%all-reduce), metadata={op_name=\"jit(t)/exp\" "
      "stack_frame_id=1}\n}\n", "/r")
  assert combined["all-reduce"].source == "" and combined["exp"].source == "models/attention.py:9"
  assert (combined["all-reduce"].kind, combined["all-reduce"].operation) == (
      "other", "all-reduce of 2 combined operations")
  assert (combined["exp"].kind, combined["exp"].operation) == ("elementwise", "exp")
  with pytest.raises(FileNotFoundError, match="no perfetto_trace.json.gz under"):
    profile_step.trace_times(str(tmp_path / "empty"))
