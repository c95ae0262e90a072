"""Compile the real training step for a TPU topology on any machine, and say whether it fits.

  JAX_PLATFORMS=cpu python -m bench.tpu_compile --config=configs/alibi_350m.py --topology=v5e:4x4
  JAX_PLATFORMS=cpu python -m bench.tpu_compile --config=configs/alibi_350m.py --topology=v5e:4x4 \\
      --config.model.attention_impl=pallas --json=/tmp/v5e.json

libtpu (the `tpu` extra: `pip install -e '.[tpu]' -c constraints.txt`, libtpu==0.0.42.* for jax
0.10.2) describes TPU topologies without a TPU: `jax.experimental.topologies.get_topology_desc`
gives compile-only devices of that slice, and `jax.jit(...).lower(...).compile()` on a mesh of
them runs XLA's TPU compiler, Mosaic included for the Pallas kernels. This script builds
train.py's training step exactly as train.py does (the config with its `--config.<field>`
overrides and its `mesh`, `train.state_shardings`, `train.compile_step_fn`), the evaluation's
scoring program at the longest configured length (eval/perplexity.py `compile_scoring`) and,
with `model.attention_impl=pallas`, the fused kernel alone (forward and backward, one chip), and
prints per chip:

  memory      XLA's memory analysis (runs/memory.py `Footprint`): arguments, temporaries and the
              total against the chip's HBM, with the verdict train.py's pre-flight would give;
  collectives the compiled HLO's all-gathers, all-reduces, reduce-scatters, all-to-alls and
              collective permutes: instructions in the program and the bytes of their results
              per chip, each counted once (those in the microbatch loop run once per
              microbatch);
  kernels     the Mosaic kernels (`tpu_custom_call`) in the compiled step;
  compile     seconds, on this machine;
  FLOPs       the analytic training FLOPs per step (models/spec.py `train_flops_per_token`), and
              XLA's own count (which leaves out custom calls, the Mosaic kernels, and counts a
              loop's body once: scaled here by the microbatch loop's train.grad_accum_steps);
  estimate    a roofline step time, max(FLOPs / peak bf16, bytes accessed / HBM bandwidth), from
              the chip's published figures (CHIPS), and the MFU it implies. An ESTIMATE, never a
              measurement: communication and its overlap are not modelled, XLA's byte count
              leaves out the custom calls, and peak rates are not reached.

Refusals are one line, exit 2, before anything compiles: libtpu missing, an unknown or malformed
topology, a config field, a mesh whose sizes do not multiply to the topology's chip count.
sweeps.launch --backend=tpu runs this script for each distinct run shape of a study before any
`gcloud` command (`--json` output). The same check for GPUs is not possible without a GPU: no
compile-only CUDA devices exist.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from configs.errors import ConfigError, config_from_flag, eval_lengths  # noqa: E402
from configs.stored import load_run_config  # noqa: E402
from configs.validate import validate  # noqa: E402
from data.tokenizers import get_tokenizer  # noqa: E402
from eval import perplexity  # noqa: E402
from models import sharding  # noqa: E402
from models.kernels import flash  # noqa: E402
from models.kernels.spec import KernelSpec  # noqa: E402
from models.spec import model_spec, train_flops_per_token  # noqa: E402
from runs import command_line, memory, startup  # noqa: E402
from runs.files import write_json  # noqa: E402
from runs.optimizer import make_optimizer  # noqa: E402

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """One TPU generation's published per-chip figures (Cloud TPU documentation, "System
  architecture" pages for v4, v5e, v5p and v6e; read 2026-12).

  Attributes:
    device_kind: what JAX's devices report (`device.device_kind`).
    hbm_bytes: HBM per chip, bytes.
    peak_bf16: peak dense bfloat16 FLOP/s per chip.
    hbm_bandwidth: HBM bandwidth per chip, bytes/s.
    megacore: two TensorCores presented as one device (v4, v5p): libtpu's
      chip_config_name="megacore", as on the VMs.
  """

  device_kind: str
  hbm_bytes: int
  peak_bf16: float
  hbm_bandwidth: float
  megacore: bool = False


CHIPS = {
    "v4": Chip("TPU v4", 32 * GIB, 275e12, 1200e9, megacore=True),
    "v5e": Chip("TPU v5 lite", 16 * GIB, 197e12, 819e9),
    "v5p": Chip("TPU v5", 95 * GIB, 459e12, 2765e9, megacore=True),
    "v6e": Chip("TPU v6 lite", 32 * GIB, 918e12, 1640e9),
}
TOPOLOGY = re.compile(r"^(v4|v5e|v5p|v6e):(\d+)x(\d+)(?:x(\d+))?$")
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
MOSAIC_TARGET = "tpu_custom_call"


def parse_topology(name: str) -> tuple[str, tuple[int, ...]]:
  """("v5e", (4, 4)) for "v5e:4x4".

  Raises:
    ConfigError: not `<v4|v5e|v5p|v6e>:AxB[xC]` with positive sizes (one line, the forms).
  """
  match = TOPOLOGY.match(name or "")
  if not match or any(int(x) < 1 for x in match.groups()[1:] if x is not None):
    raise ConfigError(f"--topology={name!r} must be <generation>:AxB[xC] with generation one of "
                      f"{list(CHIPS)} and positive sizes, e.g. v5e:4x4 (16 chips), v4:2x2x1, "
                      "v5p:2x2x2, v6e:2x4")
  return match.group(1), tuple(int(x) for x in match.groups()[1:] if x is not None)


def require_libtpu() -> None:
  """Raises ConfigError (one line: how to install it) unless libtpu is importable."""
  if importlib.util.find_spec("libtpu") is None:
    raise ConfigError("libtpu is not installed, so TPU programs cannot be compiled here: "
                      "pip install -e '.[tpu]' -c constraints.txt (libtpu==0.0.42.* for jax "
                      f"{jax.__version__}; Linux x86-64 or aarch64)")


def topology_devices(name: str) -> tuple[Chip, list]:
  """(the chip, the compile-only devices of topology `name`), on any host (libtpu's topology
  description; no TPU needed).

  On a host without TPU chips, libtpu's start-up looks for the VM's metadata and prints
  warnings; the variables that answer it (TPU_SKIP_MDS_QUERY, TPU_WORKER_HOSTNAMES=localhost,
  TPU_ACCELERATOR_TYPE) are set first unless given. They describe this host, not the compiled
  topology, which comes from `name` alone. ALLOW_MULTIPLE_LIBTPU_LOAD=1 lets several processes
  load libtpu at once (it keeps a host-wide lock file for the chips, which compile-only devices
  do not use).

  Raises:
    ConfigError: libtpu missing (`require_libtpu`), a malformed topology (`parse_topology`), or
      one libtpu refuses (its reason, one line).
  """
  generation, dims = parse_topology(name)
  require_libtpu()
  chip = CHIPS[generation]
  for key, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                     ("TPU_ACCELERATOR_TYPE", "v5litepod-1"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
    os.environ.setdefault(key, value)
  from jax.experimental import topologies  # noqa: PLC0415 -- loads libtpu
  options = {"chip_config_name": "megacore"} if chip.megacore else {}
  try:
    desc = topologies.get_topology_desc(platform="tpu", topology_name=name, **options)
  except Exception as e:  # noqa: BLE001 -- libtpu's refusal (JaxRuntimeError), one line
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise ConfigError(f"--topology={name}: libtpu refuses it ({reason[:300]})") from None
  return chip, list(desc.devices)


# ---------------------------------------------------------------------------- the compiled HLO

_SHAPE = re.compile(r"\b(pred|s4|u4|s8|u8|s16|u16|s32|u32|s64|u64|f16|bf16|f32|f64|c64|c128|"
                    r"f8e4m3fn|f8e5m2)\[([0-9,]*)\]")
_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32,
         "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64,
         "c64": 64, "c128": 128, "f8e4m3fn": 8, "f8e5m2": 8}
_OP = re.compile(r"=\s*(\(.*?\)|\S+)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")


def _shape_bytes(text: str) -> list[int]:
  """Bytes of each array shape in an HLO result type ("bf16[4,128]{1,0}" or a tuple of them)."""
  out = []
  for dtype, dims in _SHAPE.findall(text):
    n = 1
    for d in filter(None, dims.split(",")):
      n *= int(d)
    out.append(n * _BITS[dtype] // 8)
  return out


def collectives(hlo: str) -> dict[str, dict[str, int]]:
  """{kind: {"count", "bytes"}} of the collectives in a compiled (per-device) HLO module.

  A synchronous collective's bytes are those of its result, every element of a tuple (XLA
  combines, e.g., all gradients' all-reduces into one of a tuple). An asynchronous one counts
  once, at its `-start` (the `-done` is not counted); a start whose result is the pair (operand,
  result) counts the result, the larger. Kinds absent from the module are left out.
  """
  out: dict[str, dict[str, int]] = {}
  for line in hlo.splitlines():
    match = _OP.search(line)
    if not match:
      continue
    sizes = _shape_bytes(match.group(1))
    is_start = match.group(3) is not None
    entry = out.setdefault(match.group(2), {"count": 0, "bytes": 0})
    entry["count"] += 1
    entry["bytes"] += max(sizes, default=0) if is_start and len(sizes) == 2 else sum(sizes)
  return out


def mosaic_kernels(hlo: str) -> int:
  """The number of Mosaic kernel calls (`custom_call_target="tpu_custom_call"`) in an HLO."""
  return hlo.count(f'custom_call_target="{MOSAIC_TARGET}"')


def xla_cost(compiled) -> tuple[float, float]:
  """(FLOPs, bytes accessed) per device from XLA's cost analysis (0 where it gives none)."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
  cost = cost or {}
  return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def program_report(compiled, seconds: float, chip: Chip, error: str = "") -> dict[str, Any]:
  """Memory, collectives, kernels, XLA's costs and compile time of one compiled program; for a
  program the TPU compiler refused for lack of HBM (`compiled` None), its message as "error",
  "fits" False and the memory it named (`hbm_shortfall`)."""
  if compiled is None:
    need = hbm_shortfall(error)
    return {"compile_s": round(seconds, 2), "fits": False, "error": error,
            "memory": {"total": need, "argument": 0, "temporary": need} if need else None,
            "collectives": {}, "mosaic_kernels": 0, "xla_flops": 0.0, "bytes_accessed": 0.0}
  fp = memory.Footprint.of(compiled)
  hlo = compiled.as_text()
  flops, accessed = xla_cost(compiled)
  return {"compile_s": round(seconds, 2), "memory": dataclasses.asdict(fp) | {"total": fp.peak},
          "fits": fp.peak <= chip.hbm_bytes, "collectives": collectives(hlo),
          "mosaic_kernels": mosaic_kernels(hlo), "xla_flops": flops, "bytes_accessed": accessed}


_NEEDED = re.compile(r"required for HLO temporaries \(([0-9.]+)([KMGT])\)")


def hbm_shortfall(message: str) -> int:
  """The bytes of temporaries XLA's TPU compiler said a program needs ("... required for HLO
  temporaries (44.13G) exceeds available HBM (15.75G)"), or 0 when the message names none."""
  match = _NEEDED.search(message)
  if not match:
    return 0
  return int(float(match.group(1)) * 1024 ** "KMGT".index(match.group(2)) * 1024)


def _compiling(compile_fn, *args) -> tuple[Any, float, str]:
  """(compiled or None, seconds, error): `compile_fn(*args)`, with a refusal of the TPU compiler
  for lack of HBM (RESOURCE_EXHAUSTED) returned as its first line instead of raised."""
  t0 = time.perf_counter()
  try:
    compiled, seconds = compile_fn(*args)
  except jax.errors.JaxRuntimeError as e:
    text = str(e).strip()
    if "RESOURCE_EXHAUSTED" not in text:
      raise
    line = next((x for x in text.splitlines() if "RESOURCE_EXHAUSTED" in x), text[:300])
    return None, time.perf_counter() - t0, line.strip()[:500]
  return compiled, seconds, ""


def roofline(flops: float, accessed: float, chip: Chip) -> dict[str, float]:
  """A roofline estimate of one step on one chip: seconds = max(flops / peak bf16, bytes
  accessed / HBM bandwidth), and the MFU that implies (flops / (seconds * peak)). An estimate:
  no communication, no overlap, published peaks."""
  compute, traffic = flops / chip.peak_bf16, accessed / chip.hbm_bandwidth
  seconds = max(compute, traffic)
  return {"step_s": seconds, "compute_s": compute, "memory_s": traffic,
          "mfu": compute / seconds if seconds else 0.0}


# ---------------------------------------------------------------------------- what is compiled


def compile_train_step(config, mesh, spec) -> tuple[Any, float]:
  """(train.py's compiled training step for `config` on `mesh`, compile seconds): the same
  functions train.py calls (`state_shardings`, `compile_step_fn`); `spec` is
  models.spec.model_spec(config, mesh)."""
  import train  # noqa: PLC0415 -- the top layer; imported here, not by the library code above
  tx = make_optimizer(config.train)
  shardings, abstract = train.state_shardings(tx, spec, mesh)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh):  # Mosaic reads the chip from the mesh when it lowers (not the host's)
    compiled = train.compile_step_fn(config, spec, tx, shardings, abstract, mesh,
                                     get_tokenizer(config.data.tokenizer).pad_id)
  return compiled, time.perf_counter() - t0


def compile_eval_step(config, mesh, spec, length: int) -> tuple[Any, float]:
  """(the perplexity scoring program at `length` tokens, compile seconds), batched as
  eval/perplexity.py batches it (eval.batch_tokens // length windows per batch); `spec` is
  models.spec.model_spec(config, mesh)."""
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh):
    compiled = perplexity.compile_scoring(nll_fn, spec.abstract_params, length,
                                          config.eval.batch_tokens // length, mesh)
  return compiled, time.perf_counter() - t0


def compile_kernel(spec: KernelSpec, device, *, batch: int, length: int, heads: int,
                   kv_heads: int, head_dim: int, dtype=jnp.bfloat16,
                   block_sizes: flash.BlockSizes = flash.BlockSizes()) -> tuple[Any, float]:
  """(the fused kernel's forward and backward compiled for one TPU `device`, compile seconds).

  q [batch, length, heads, head_dim] and k, v [batch, length, kv_heads, head_dim] in `dtype`;
  int32 positions and segment ids [batch, length]; the backward is the vector-Jacobian product
  with respect to q, k, v and the bias parameters (float32 [heads, P], if the spec has any).
  Mosaic lowers and compiles it.

  Raises:
    ValueError: what `flash.flash_attention` refuses (e.g. tiles Mosaic cannot take).
  """
  one = jax.sharding.SingleDeviceSharding(device)
  q = jax.ShapeDtypeStruct((batch, length, heads, head_dim), dtype, sharding=one)
  kv = jax.ShapeDtypeStruct((batch, length, kv_heads, head_dim), dtype, sharding=one)
  ids = jax.ShapeDtypeStruct((batch, length), jnp.int32, sharding=one)
  has_bias = spec.bias_params is not None
  prm = (jax.ShapeDtypeStruct(spec.bias_params.shape, jnp.float32, sharding=one) if has_bias
         else None)

  def forward_backward(q, k, v, pos, seg, prm):
    def attend(q, k, v, *prm):
      s = dataclasses.replace(spec, bias_params=prm[0]) if prm else spec
      return flash.flash_attention(q, k, v, pos, pos, seg, seg, s, backend="tpu",
                                   interpret=False, block_sizes=block_sizes)
    out, vjp = jax.vjp(attend, q, k, v, *([prm] if has_bias else []))
    return out, vjp(out)

  t0 = time.perf_counter()
  with jax.set_mesh(jax.sharding.Mesh(np.asarray([device]), ("chip",))):
    compiled = jax.jit(forward_backward).lower(q, kv, kv, ids, ids, prm).compile()
  return compiled, time.perf_counter() - t0


def report(config, topology: str, *, evaluate: bool = True) -> dict[str, Any]:
  """Everything the script prints, as a dict (the --json file).

  Raises:
    ConfigError: see `topology_devices`; a config field `configs.validate.validate` refuses
      (with the topology's chip count as the device count), a mesh not matching it.
  """
  chip, devices = topology_devices(topology)
  validate(config, len(devices))
  mesh = sharding.make_mesh(config.mesh, devices)
  out: dict[str, Any] = {
      "topology": topology, "device_kind": devices[0].device_kind, "devices": len(devices),
      "mesh": dict(mesh.shape), "hbm_per_chip_bytes": chip.hbm_bytes,
      "peak_bf16_flops": chip.peak_bf16, "hbm_bandwidth": chip.hbm_bandwidth,
      "jax": jax.__version__, "libtpu": _libtpu_version()}
  tokens = config.data.batch_size * config.data.train_len
  analytic = train_flops_per_token(config) * tokens / len(devices)
  spec = model_spec(config, mesh)  # traced once, for both programs
  compiled, seconds, error = _compiling(compile_train_step, config, mesh, spec)
  train_report = program_report(compiled, seconds, chip, error)
  train_report["analytic_flops_per_chip"] = analytic
  # XLA's cost analysis counts a loop's body once: the step's microbatch loop runs
  # train.grad_accum_steps times (the layers are not a loop)
  loop = config.train.grad_accum_steps
  train_report["xla_flops_per_step"] = train_report["xla_flops"] * loop
  train_report["bytes_accessed_per_step"] = train_report["bytes_accessed"] * loop
  train_report["estimate"] = roofline(analytic, train_report["bytes_accessed_per_step"], chip)
  out["train"] = train_report
  if evaluate:
    length = max(eval_lengths(config))
    compiled, seconds, error = _compiling(compile_eval_step, config, mesh, spec, length)
    out["eval"] = program_report(compiled, seconds, chip, error) | {"length": length}
  if config.model.attention_impl == "pallas":
    out["kernel"] = _kernel_report(config, devices[0])
  return out


def _kernel_report(config, device) -> dict[str, Any]:
  """The fused kernel alone at the config's shapes on one chip (one sequence), or why not."""
  from models import positions  # noqa: PLC0415
  m = config.model
  scheme = positions.build(m.position, positions.Dims.from_config(config))
  pos = jnp.zeros((1, config.data.train_len), jnp.int32)
  spec = scheme.kernel_spec(0, pos, pos)
  if isinstance(spec, str):
    return {"skipped": spec}
  head_dim = m.head_dim if m.head_dim != -1 else m.d_model // m.num_heads
  kv_heads = m.num_heads if m.get("num_kv_heads", -1) == -1 else m.num_kv_heads
  compiled, seconds = compile_kernel(
      spec, device, batch=1, length=config.data.train_len, heads=m.num_heads, kv_heads=kv_heads,
      head_dim=head_dim, dtype=jnp.dtype(m.dtype))
  return {"compile_s": round(seconds, 2), "mosaic_kernels": mosaic_kernels(compiled.as_text())}


def _libtpu_version() -> str:
  try:
    from importlib.metadata import version  # noqa: PLC0415
    return version("libtpu")
  except Exception:  # noqa: BLE001 -- a development build without metadata
    return "unknown"


# ---------------------------------------------------------------------------- printing


def _gib(n: float) -> str:
  return f"{n / GIB:.2f}"


def lines(rep: dict[str, Any]) -> list[str]:
  """The per-chip table of a `report` (markdown), with its heading."""
  hbm = rep["hbm_per_chip_bytes"]
  out = [f"# {rep['topology']}: {rep['devices']} x {rep['device_kind']} (compile-only devices), "
         f"mesh {rep['mesh']}, HBM {_gib(hbm)} GiB per chip; jax {rep['jax']}, libtpu "
         f"{rep['libtpu']}; figures per chip",
         "| program | arguments GiB | temporaries GiB | total GiB | of HBM | fits | compile s | "
         "Mosaic kernels | collectives (count, MiB) |",
         "|---|---|---|---|---|---|---|---|---|"]
  for name in ("train", "eval"):
    if name not in rep:
      continue
    p = rep[name]
    mem = p["memory"]
    coll = ", ".join(f"{k} {v['count']} ({v['bytes'] / 2**20:.0f})"
                     for k, v in sorted(p["collectives"].items())) or "none"
    label = "train step" if name == "train" else f"eval, {p['length']} tokens"
    if p.get("error"):
      need = f"over {_gib(mem['total'])}" if mem else "?"
      out.append(f"| {label} | | | {need} | | NO | {p['compile_s']:.1f} | | refused by the TPU "
                 f"compiler: {p['error'][:240]} |")
      continue
    out.append(f"| {label} | {_gib(mem['argument'])} | {_gib(mem['temporary'])} | "
               f"{_gib(mem['total'])} | {mem['total'] / hbm:.0%} | "
               f"{'yes' if p['fits'] else 'NO'} | {p['compile_s']:.1f} | {p['mosaic_kernels']} | "
               f"{coll} |")
  t = rep["train"]
  est = t["estimate"]
  if t.get("error"):
    return out
  out.append(f"train step per chip: FLOPs analytic {t['analytic_flops_per_chip']:.3e}, XLA's "
             f"cost analysis {t['xla_flops_per_step']:.3e} (its microbatch loop's body x "
             f"grad_accum_steps; custom calls, the Mosaic kernels, not counted); HBM bytes "
             f"accessed {t['bytes_accessed_per_step']:.3e} (XLA's, the same way)")
  ms = {k: est[k] * 1e3 for k in ("step_s", "compute_s", "memory_s")}
  out.append(f"ESTIMATE (roofline from published peaks; no communication, no overlap, not a "
             f"measurement): step {ms['step_s']:.1f} ms (compute {ms['compute_s']:.1f} ms, HBM "
             f"{ms['memory_s']:.1f} ms), MFU {est['mfu']:.0%}")
  if "kernel" in rep:
    k = rep["kernel"]
    out.append("fused kernel alone (forward + backward, one sequence, one chip): "
               + (f"not used ({k['skipped']})" if "skipped" in k else
                  f"compiled in {k['compile_s']:.1f} s, {k['mosaic_kernels']} Mosaic kernels"))
  return out


FLAGS = flags.FLAGS


def define_flags() -> None:
  """The script's flags: train.py's --config (with --config.<field> overrides) and its own."""
  config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py).",
                                  lock_config=True)
  flags.DEFINE_string("run_config", None, "Instead of --config: a run folder whose config.json "
                      "(train.py's resolved config) is compiled (sweeps/tpu_preflight.py).")
  flags.DEFINE_string("topology", None, "TPU slice: <v4|v5e|v5p|v6e>:AxB[xC], e.g. v5e:4x4.")
  flags.DEFINE_bool("eval", True, "Also compile the evaluation's scoring program at the longest "
                    "configured length.")
  flags.DEFINE_string("json", None, "Also write the report to this JSON file.")


USAGE = ("JAX_PLATFORMS=cpu python -m bench.tpu_compile --config=<configs/*.py> (or "
         "--run_config=<run folder>) "
         "--topology=<v4|v5e|v5p|v6e>:AxB[xC] [--config.<field>=...] [--json=<file>]")


def main(argv) -> None:
  """Prints the per-chip table (exit 2 with one line on bad input, 3 when a program does not
  fit the chip's HBM)."""
  del argv
  startup.pin_platform()  # the host's own devices stay CPU (the TPU ones are compile-only)
  if FLAGS.run_config and FLAGS.config is not None:
    raise ConfigError("give --config=<configs/*.py> or --run_config=<run folder>, not both")
  config = (load_run_config(FLAGS.run_config) if FLAGS.run_config
            else config_from_flag(FLAGS.config))
  if not FLAGS.topology:
    raise ConfigError("--topology is required, e.g. --topology=v5e:4x4")
  parse_topology(FLAGS.topology)
  if FLAGS.json:
    command_line.check_writable(FLAGS.json, "--json", folder=False)
  rep = report(config, FLAGS.topology, evaluate=FLAGS.eval)
  print("\n".join(lines(rep)))
  if FLAGS.json:
    write_json(FLAGS.json, rep)
  if not all(rep[name]["fits"] for name in ("train", "eval") if name in rep):
    sys.exit(3)


if __name__ == "__main__":
  define_flags()
  command_line.run(main, usage=USAGE)
