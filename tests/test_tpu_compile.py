"""TPU programs compiled on this CPU host (bench/tpu_compile.py): libtpu's compile-only devices of
real topologies, XLA's TPU compiler and Mosaic on the Pallas kernels.

The fused kernel compiles, forward and backward, for v4 and v5e chips in every positional form it
has (NoPE, RoPE, partial rotary, ALiBi, T5, KERPLE log and power; grouped-query attention), at
the default tiles in bfloat16. FIRE has no kernel form (models/positions/fire.py: the XLA path).
The 350M config's training step with attention_impl=pallas, at 2 of its 24 layers, compiles for
v5e:4x4 with the config's own mesh (fsdp 16), holds the Mosaic kernels and fits a v5e chip's 16
GiB; a context-parallel step (mesh.context 4) compiles at 32,768 tokens; the refusals are one
line. Skipped, with the reason, where libtpu is not installed (the dev extra installs it on Linux
x86-64).
"""

import importlib.util
import os

import jax.numpy as jnp
import numpy as np
import pytest

import forked

from bench import tpu_compile
from configs import alibi_350m
from configs.errors import ConfigError
from models.kernels.spec import KernelSpec
from models.positions.rope import rope_inv_freq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -e '.[dev]' installs it on Linux x86-64): no TPU "
           "compiler on this host")

HEADS, HEAD_DIM, LENGTH = 4, 128, 1024
FORMS = {
    "nope": KernelSpec(),
    "rope": KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(HEAD_DIM, 1e4))),
    "partial_rotary": KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(HEAD_DIM // 4, 1e4))),
    "alibi": KernelSpec(bias="alibi", bias_params=jnp.ones((HEADS, 1))),
    "t5": KernelSpec(bias="t5", bias_params=jnp.ones((HEADS, 32)), num_buckets=32,
                     max_distance=128),
    "kerple_log": KernelSpec(bias="kerple_log", bias_params=jnp.ones((HEADS, 2))),
    "kerple_power": KernelSpec(bias="kerple_power", bias_params=jnp.ones((HEADS, 2))),
    "rope_gqa": KernelSpec(inv_freq=jnp.asarray(rope_inv_freq(HEAD_DIM, 1e4))),
}


@pytest.mark.parametrize("chip", ["v4:2x2x1", "v5e:2x2"])
@pytest.mark.parametrize("form", list(FORMS))
def test_the_fused_kernel_compiles_for_tpu_in_every_form(chip, form):
  _, devices = tpu_compile.topology_devices(chip)
  compiled, _ = tpu_compile.compile_kernel(
      FORMS[form], devices[0], batch=2, length=LENGTH, heads=HEADS,
      kv_heads=1 if form.endswith("gqa") else HEADS, head_dim=HEAD_DIM, dtype=jnp.bfloat16)
  assert tpu_compile.mosaic_kernels(compiled.as_text()) == 3  # forward, dq, dk/dv
  assert compiled.memory_analysis().argument_size_in_bytes >= 3 * 2 * LENGTH * HEAD_DIM * 2


def two_layer_350m():
  """configs/alibi_350m.py at 2 of its 24 layers (the same widths, batch and mesh)."""
  c = alibi_350m.get_config()
  c.model.num_layers = 2
  c.model.attention_impl = "pallas"
  return c


def test_the_350m_step_with_the_kernel_compiles_for_v5e_4x4_and_fits():
  c = two_layer_350m()
  rep = tpu_compile.report(c, "v5e:4x4", evaluate=False)
  assert rep["devices"] == 16 and rep["device_kind"] == "TPU v5 lite"
  assert rep["mesh"] == {"data": 1, "fsdp": 16, "context": 1, "tensor": 1}
  train = rep["train"]
  # forward, dq and dk/dv per layer, in the scan over the 16 microbatches (one program each)
  assert train["mosaic_kernels"] == 3 * c.model.num_layers
  assert 0 < train["memory"]["total"] <= 16 * 2**30 and train["fits"]
  assert train["collectives"]["all-gather"]["count"] > 0  # FSDP gathers the parameters
  assert rep["kernel"]["mosaic_kernels"] == 3
  text = "\n".join(tpu_compile.lines(rep))
  assert "ESTIMATE" in text and "not a measurement" in text


def test_a_context_parallel_step_compiles_at_32k_tokens():
  """One layer of the 350M model's heads of 128 (two heads: compile time grows with the widths,
  not what is checked) at 32,768 tokens, each sequence split over 4 chips (mesh.context 4) of a
  v5p-8: XLA's attention path (the kernel does not split the sequence), unchunked and without
  remat (the TPU compiler takes a third less time over it; the 8,192 local queries' scores
  against 32,768 keys fit), keys and values all-gathered per layer. (The full widths compile in
  bench/tpu_compile.py: two layers on a v5e chip's 16 GiB need 22 GiB, which the compiler
  refuses, reported as in the test below.)"""
  c = two_layer_350m()
  c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.mlp_dim = 1, 256, 2, 1024
  c.model.attention_impl, c.model.remat, c.model.attention_chunk = "xla", "none", 0
  c.data.train_len, c.data.batch_size, c.train.grad_accum_steps = 32768, 1, 1
  c.mesh.data, c.mesh.fsdp, c.mesh.context = 1, 1, 4
  rep = tpu_compile.report(c, "v5p:2x2x1", evaluate=False)
  assert rep["mesh"]["context"] == 4 and rep["devices"] == 4
  train = rep["train"]
  assert train["fits"] and 0 < train["memory"]["total"] <= 95 * 2**30
  assert train["collectives"]["all-gather"]["count"] >= 2 * c.model.num_layers  # k and v


def test_a_step_the_chip_cannot_hold_is_reported_not_raised():
  rep = {"hbm_per_chip_bytes": 16 * 2**30}
  msg = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
         "temporaries (22.44G) exceeds available HBM (15.75G).")
  p = tpu_compile.program_report(None, 7.5, tpu_compile.CHIPS["v5e"], msg)
  assert not p["fits"] and p["memory"]["total"] == int(22.44 * 2**30)
  rep["train"] = {**p, "estimate": tpu_compile.roofline(0, 0, tpu_compile.CHIPS["v5e"])}
  rep.update(topology="v5e:4x4", devices=16, device_kind="TPU v5 lite", mesh={}, jax="", libtpu="")
  assert "refused by the TPU compiler: RESOURCE_EXHAUSTED" in "\n".join(tpu_compile.lines(rep))


def test_hlo_collectives_are_counted_with_their_bytes():
  hlo = ("  %ag = bf16[16,1024]{1,0} all-gather(bf16[1,1024]{1,0} %p), dimensions={0}\n"
         "  %ags = (bf16[1,64]{1,0}, bf16[4,64]{1,0}) all-gather-start(bf16[1,64]{1,0} %q)\n"
         "  %agd = bf16[4,64]{1,0} all-gather-done((bf16[1,64]{1,0}, bf16[4,64]{1,0}) %ags)\n"
         "  %ar = (f32[8]{0}, f32[3,5]{1,0}, bf16[2]{0}) all-reduce(f32[8]{0} %x, f32[3,5]{1,0} "
         "%y, bf16[2]{0} %z), to_apply=%add\n"
         '  %k = bf16[2]{0} custom-call(%a), custom_call_target="tpu_custom_call"\n')
  # a synchronous tuple (combined all-reduce) counts every element; a start its result
  assert tpu_compile.collectives(hlo) == {
      "all-gather": {"count": 2, "bytes": 16 * 1024 * 2 + 4 * 64 * 2},
      "all-reduce": {"count": 1, "bytes": 8 * 4 + 15 * 4 + 2 * 2}}
  assert tpu_compile.mosaic_kernels(hlo) == 1


def test_the_roofline_estimate():
  chip = tpu_compile.CHIPS["v5e"]
  est = tpu_compile.roofline(197e12 * 0.5, 819e9 * 0.25, chip)  # 0.5 s compute, 0.25 s HBM
  np.testing.assert_allclose([est["step_s"], est["mfu"]], [0.5, 1.0])
  est = tpu_compile.roofline(197e12 * 0.5, 819e9 * 1.0, chip)
  np.testing.assert_allclose([est["step_s"], est["mfu"]], [1.0, 0.5])


@pytest.mark.parametrize("name", ["v9:2x2", "v5e:4", "v5e:0x4", "", "v5e:4x4x4x4"])
def test_a_malformed_topology_is_refused(name):
  with pytest.raises(ConfigError, match="must be <generation>:AxB"):
    tpu_compile.parse_topology(name)


def test_libtpu_missing_is_one_line(monkeypatch):
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
  with pytest.raises(ConfigError, match=r"libtpu is not installed.*pip install"):
    tpu_compile.require_libtpu()


@pytest.mark.parametrize("args,message", [
    (["--topology=v9:2x2"], "--topology='v9:2x2' must be"),
    (["--topology=v5e:3x3"], "--topology=v5e:3x3: libtpu refuses it"),
    (["--topology=v5e:2x2", "--config.mesh.fsdp=3"], "mesh"),
])
def test_refusals_are_one_line_exit_2(args, message):
  out = forked.run(["-m", "bench.tpu_compile", "--config=configs/alibi_tiny.py", *args], cwd=ROOT,
                   timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT})
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr[-2000:]
  assert message in out.stderr
  assert out.stdout == ""


def test_the_mesh_platform_picks_the_kernel_backend():
  """Traced for a TPU mesh, the kernel is Mosaic's even though this host's backend is CPU."""
  from models import sharding
  from models.kernels import flash
  assert flash.resolve_backend() == ("gpu", True)  # the CPU host: the interpreter
  with sharding.mesh_platform("tpu"):
    assert flash.resolve_backend() == ("tpu", False)
  with sharding.mesh_platform("gpu"):
    assert flash.resolve_backend() == ("gpu", False)
  assert flash.resolve_backend() == ("gpu", True)
