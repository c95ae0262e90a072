"""Does a compiled program fit in its devices' memory? XLA's memory analysis against the limit.

The estimate is the compiled program's own (`compiled.memory_analysis()`, the figures MaxText
prints before step 0): per device, arguments + outputs - aliased (donated arguments reused as
outputs) + temporaries + generated code, in bytes. The limit is what the devices have now:

  CPU      the host's available RAM (MemAvailable in /proc/meminfo; os.sysconf elsewhere). Every
           CPU device of a process draws on the same RAM, so the need of all the program's local
           devices together is compared with it.
  GPU/TPU  one device's `memory_stats()["bytes_limit"]` less its `bytes_in_use`.

`train.memory_limit_gib` > 0 caps that limit (to share a device, and for tests); only the
fraction `train.memory_headroom` of it is used. train.py checks its training step before step 0
and before the workdir is made (`check_train_step`); eval/perplexity.py checks each evaluation
length's scoring program and skips those that do not fit.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Sequence

import jax

from configs.errors import ConfigError
from runs.distributed import chief_print

GIB = 2 ** 30


def gib(num_bytes: float) -> str:
  """`num_bytes` as GiB with two decimals, e.g. "1.23"."""
  return f"{num_bytes / GIB:.2f}"


def _unit(num_bytes: float) -> tuple[float, str]:
  """(bytes per unit, name): GiB from 0.01 GiB up, else MiB (tiny programs read as 0.00 GiB)."""
  return (GIB, "GiB") if num_bytes >= 0.01 * GIB else (2 ** 20, "MiB")


def human(num_bytes: float) -> str:
  """`num_bytes` as "1.23 GiB" (from 0.01 GiB up) or "4.56 MiB"."""
  unit, name = _unit(num_bytes)
  return f"{num_bytes / unit:.2f} {name}"


@dataclasses.dataclass(frozen=True)
class Footprint:
  """XLA's memory analysis of one compiled program, bytes per device.

  Attributes:
    argument: inputs (parameters, optimizer state, batch).
    output: results.
    temporary: XLA's temporary buffers (activations kept for the backward pass, ...).
    generated_code: the compiled code.
    alias: arguments donated and reused as outputs (counted in both argument and output).
  """

  argument: int
  output: int
  temporary: int
  generated_code: int
  alias: int

  @property
  def peak(self) -> int:
    """The per-device need, bytes: argument + output - alias + temporary + generated_code."""
    return self.argument + self.output - self.alias + self.temporary + self.generated_code

  @classmethod
  def of(cls, compiled) -> Footprint | None:
    """The footprint of a `jax.stages.Compiled`; None where the backend gives no analysis."""
    stats = compiled.memory_analysis()
    if stats is None:
      return None
    return cls(int(stats.argument_size_in_bytes), int(stats.output_size_in_bytes),
               int(stats.temp_size_in_bytes), int(stats.generated_code_size_in_bytes),
               int(stats.alias_size_in_bytes))

  def describe(self, unit: float = GIB) -> str:
    """"arguments 0.10, outputs 0.10, temporaries 1.05, code 0.00, aliased 0.10", in bytes per
    `unit` (GiB by default)."""
    parts = (("arguments", self.argument), ("outputs", self.output),
             ("temporaries", self.temporary), ("code", self.generated_code),
             ("aliased", self.alias))
    return ", ".join(f"{name} {value / unit:.2f}" for name, value in parts)


@dataclasses.dataclass(frozen=True)
class Limit:
  """The memory a program's devices can use now.

  Attributes:
    bytes: available bytes, shared by `sharing` devices of the program.
    sharing: the program's devices that draw on `bytes` (CPU: its devices in this process;
      GPU/TPU: 1, each device has its own).
    source: where `bytes` was read, for the messages.
  """

  bytes: int
  sharing: int
  source: str


def host_available_bytes() -> int:
  """The host's available RAM, bytes: MemAvailable from /proc/meminfo (Linux), else free pages
  x page size (os.sysconf)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024  # kB
  except OSError:
    pass
  return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_limit(devices: Sequence, cap_gib: float = 0.0) -> Limit | None:
  """What the program's `devices` can use now (module docstring), capped at `cap_gib` GiB if > 0.

  Args:
    devices: the program's devices (e.g. `mesh.devices.flat`); those of this process count.
    cap_gib: `train.memory_limit_gib`; 0 = no cap.

  Returns:
    A `Limit`, or None on an accelerator that reports no `bytes_limit` (and no cap is set).
  """
  local = [d for d in devices if d.process_index == jax.process_index()] or list(devices)
  device = local[0]
  if device.platform == "cpu":
    limit = Limit(host_available_bytes(), len(local), "host RAM, MemAvailable")
  else:
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
      limit = Limit(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), 1,
                    f"{device.platform} bytes_limit - bytes_in_use")
    elif cap_gib > 0:
      limit = Limit(int(cap_gib * GIB), 1, f"{device.platform}, no bytes_limit")
    else:
      return None
  if 0 < cap_gib and cap_gib * GIB < limit.bytes:
    limit = dataclasses.replace(limit, bytes=int(cap_gib * GIB),
                                source=f"train.memory_limit_gib={cap_gib:g}")
  return limit


@dataclasses.dataclass(frozen=True)
class Verdict:
  """Whether a program fits (`verdict`).

  Attributes:
    fits: need <= usable.
    need: bytes the program needs on the devices sharing the limit (per device x sharing).
    usable: bytes it may use (limit x headroom).
    line: one line: the estimate, its parts and the limit; when it does not fit, the fields
      that reduce it.
  """

  fits: bool
  need: int
  usable: int
  line: str


def verdict(footprint: Footprint, limit: Limit, *, headroom: float, what: str,
            reduce: Sequence[str] = (), resident: int = 0) -> Verdict:
  """Compares a compiled program's footprint with the limit (pure: no device is read).

  Args:
    footprint: the program's per-device bytes (`Footprint.of`).
    limit: the devices' available memory (`device_limit`).
    headroom: the usable fraction of `limit.bytes` (train.memory_headroom), in (0, 1].
    what: the program, for the message (e.g. "train step").
    reduce: the fields that lower the need, each with its value (e.g. "data.batch_size=16"),
      named when it does not fit.
    resident: per-device argument bytes already held in memory (already counted in the limit
      read now, e.g. the parameters an evaluation scores), not needed again.

  Returns:
    A `Verdict`; `line` reads "<what> needs 1.23 GiB per device (arguments ..., temporaries
    ..., ...) of 15.6 GiB available (host RAM, ...; 90% usable)".
  """
  per_device = max(0, footprint.peak - resident)
  need = per_device * limit.sharing
  usable = int(limit.bytes * headroom)
  unit, name = _unit(per_device)
  parts = footprint.describe(unit) + (f"; {resident / unit:.2f} already resident"
                                      if resident else "")
  shared = (f" x {limit.sharing} devices sharing it = {need / unit:.2f} {name}"
            if limit.sharing > 1 else "")
  line = (f"{what} needs {per_device / unit:.2f} {name} per device ({parts}){shared} of "
          f"{human(limit.bytes)} available ({limit.source}; {headroom:.0%} usable: "
          "train.memory_headroom)")
  fits = need <= usable
  if not fits:
    line += (f": does not fit in {human(usable)}"
             + (f"; reduce it with {', '.join(reduce)}" if reduce else ""))
  return Verdict(fits, need, usable, line)


def check(compiled, devices: Sequence, config, *, what: str, reduce: Sequence[str] = (),
          resident: int = 0) -> Verdict | None:
  """`verdict` of a compiled program on `devices` under `config`'s train.memory_headroom and
  train.memory_limit_gib; None when the backend gives no memory analysis or limit."""
  footprint = Footprint.of(compiled)
  limit = device_limit(devices, config.train.get("memory_limit_gib", 0.0))
  if footprint is None or limit is None:
    return None
  return verdict(footprint, limit, headroom=config.train.get("memory_headroom", 0.9), what=what,
                 reduce=reduce, resident=resident)


def attention_chunk_hint(config, rows_per_device: int, length: int, need: int) -> list[str]:
  """["model.attention_chunk=<value> (lower it)"] when one query chunk's attention scores
  (rows_per_device x heads x chunk x length x 4 bytes; chunk = length when chunking is off or
  the chunk is longer) are at least 5% of the per-device `need` bytes; else []."""
  m = config.model
  chunk = m.attention_chunk if 0 < m.attention_chunk < length else length
  scores = rows_per_device * m.num_heads * chunk * length * 4
  if chunk > 1 and scores >= 0.05 * need:
    return [f"model.attention_chunk={m.attention_chunk} (lower it)"]
  return []


def train_reductions(config, batch_parallel: int, need: int, *, context: int = 1,
                     num_devices: int = 1) -> list[str]:
  """The fields that lower the training step's memory, with their values (for the message).

  Args:
    config: the experiment config.
    batch_parallel: devices the batch is split over (mesh data x fsdp).
    need: the step's per-device need, bytes.
    context: devices each sequence is split over (mesh.context); num_devices: the mesh's
      devices. With more than one device, raising mesh.context is named too (sequence
      parallelism, models/context_parallel.py).
  """
  d, t, m = config.data, config.train, config.model
  rows = max(1, d.batch_size // t.grad_accum_steps // batch_parallel)
  out = [f"data.batch_size={d.batch_size} (lower it)", f"data.train_len={d.train_len} (lower it)",
         f"train.grad_accum_steps={t.grad_accum_steps} (raise it)"]
  remat = m.get("remat", "none")
  if remat != "full":
    out.append(f"model.remat={remat!r} (set 'block' or 'full')")
  if num_devices > context:
    out.append(f"mesh.context={context} (raise it: each sequence split over more devices)")
  return out + attention_chunk_hint(config, rows, d.train_len, need)


def check_train_step(compiled, config, mesh) -> str:
  """The memory pre-flight of the training step: its line, for the start-up report.

  Args:
    compiled: the compiled training step (`jax.jit(...).lower(state, batch).compile()`).
    config: the experiment config.
    mesh: its device mesh.

  Returns:
    "memory: train step needs ... of ... GiB available (...)", or a line saying it was not
    checked (a backend without memory analysis or limit).

  Raises:
    ConfigError: the step does not fit; one line with the estimate, the limit and the fields
      that reduce it.
  """
  footprint = Footprint.of(compiled)
  limit = device_limit(list(mesh.devices.flat), config.train.get("memory_limit_gib", 0.0))
  if footprint is None or limit is None:
    return "memory: not checked (the backend reports no memory analysis or limit)"
  reduce = train_reductions(config, mesh.shape["data"] * mesh.shape["fsdp"], footprint.peak,
                            context=dict(mesh.shape).get("context", 1),
                            num_devices=mesh.devices.size)
  result = verdict(footprint, limit, headroom=config.train.get("memory_headroom", 0.9),
                   what="train step", reduce=reduce)
  if not result.fits:
    raise ConfigError(result.line)
  return f"memory: {result.line}"


def eval_checker(config, mesh, params) -> Callable[[Any, int, int], str | None]:
  """The `memory_check` of eval/perplexity.py `ppl_vs_length`, for scoring `params` on `mesh`.

  Returns:
    `(compiled, length, rows) -> None` when the compiled scoring program of `rows` windows of
    `length` tokens fits (the parameters, already resident, are not counted again), else the
    reason, one line naming the estimate, the limit and the fields that lower it
    (eval.batch_tokens while a batch holds more than one window per device; model.attention_chunk
    when one chunk's scores weigh); the reason is also printed (chief only).
  """
  devices, resident = list(mesh.devices.flat), resident_bytes(params)
  batch_parallel = mesh.shape["data"] * mesh.shape["fsdp"]

  def check_length(compiled, length: int, rows: int) -> str | None:
    footprint = Footprint.of(compiled)
    reduce = [f"eval.batch_tokens={config.eval.batch_tokens} (lower it)"] \
        if rows > batch_parallel else []
    if footprint is not None:
      reduce += attention_chunk_hint(config, rows // batch_parallel, length, footprint.peak)
    result = check(compiled, devices, config, what=f"scoring at length {length}",
                   reduce=reduce + ["eval.length_multipliers (shorter lengths)"],
                   resident=resident)
    if result is None or result.fits:
      return None
    chief_print(f"skipping eval length {length}: {result.line}")
    return f"memory: {result.line}"

  return check_length


def resident_bytes(tree) -> int:
  """Per-device bytes of the arrays of `tree` already on the devices (the largest shard of each
  array, summed)."""
  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if hasattr(x, "sharding") else x.shape
    total += int(x.dtype.itemsize) * math.prod(shape)
  return total
