"""Many small runs side by side on this machine's devices: the local backend's --devices_per_run.

A study of small models wastes a multi-GPU machine (or a single-host TPU VM) when every run sees
every device. With `--devices_per_run=N` the local backend splits this machine's devices into
slots of N and runs one run per slot at a time, each a separate one-process job that sees only
its slot's devices:

  cuda  CUDA_VISIBLE_DEVICES=<ids>       (the CUDA runtime renumbers them 0..N-1 in the process)
  rocm  HIP_VISIBLE_DEVICES=<ids>
  tpu   the libtpu topology variables of sweeps/tpu_pack.py (TPU_VISIBLE_DEVICES, bounds and one
        mesh controller port per slot); N counts JAX devices, whole chips (two per chip on
        v2/v3)
  cpu   an emulation, for tests and for trying a packed study without accelerators: each process
        gets `--xla_force_host_platform_device_count=N` in XLA_FLAGS, so it sees N CPU devices
        of its own (the "devices" share this machine's cores; the slot's ids are notional)

and train.py / eval.run get `--distributed=off` (a one-process job). A run starts on the first
free slot; `sweeps.launch` writes the slot and its variables at the top of each command in the
run's launch.log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys

from configs.errors import ConfigError
from sweeps import tpu_pack

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
FORCE_COUNT = re.compile(r"--xla_force_host_platform_device_count=\S*")

# Prints this machine's JAX platform (cuda / rocm / tpu / cpu), device count and JAX devices per
# TPU chip, as JSON. Run in a child process: a launcher that initialized a GPU or TPU itself
# would hold its memory (GPU) or its lock (TPU) for as long as the study runs.
_PROBE = r"""
import json, jax
d = jax.devices()
platform = d[0].platform
if platform == "gpu":
  platform = "rocm" if "rocm" in d[0].client.platform_version.lower() else "cuda"
kind = d[0].device_kind.lower().replace(" ", "")
per_chip = 2 if platform == "tpu" and kind in ("tpuv2", "tpuv3") else 1
print(json.dumps({"platform": platform, "count": len(d), "per_chip": per_chip}))
"""


@dataclasses.dataclass(frozen=True)
class Machine:
  """This machine's devices as JAX sees them.

  Attributes:
    platform: one of PLATFORMS.
    count: JAX devices (GPUs; TPU cores on v2/v3, chips on v4 and later; CPU devices).
    per_chip: JAX devices per TPU chip (2 on v2/v3, else 1).
  """

  platform: str
  count: int
  per_chip: int = 1


def probe(python: str = sys.executable, env: dict[str, str] | None = None) -> Machine:
  """This machine's devices, read by `python` in a child process (see _PROBE).

  Raises:
    ConfigError: the probe failed (its last line of output is quoted).
  """
  done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, env=env)
  if done.returncode:
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise ConfigError(f"sweeps.launch: could not list this machine's devices with {python} "
                      f"(set --num_devices): {tail}")
  found = json.loads(done.stdout.strip().splitlines()[-1])
  return Machine(found["platform"], int(found["count"]), int(found["per_chip"]))


@dataclasses.dataclass(frozen=True)
class LocalSlot:
  """One slot of this machine: some of its devices and the environment that confines a process
  to them.

  Attributes:
    index: the slot's number, 0.. .
    devices: the JAX device ids of the slot (notional for the cpu emulation).
    env: the variables set for each command of a run on this slot.
  """

  index: int
  devices: tuple[int, ...]
  env: tuple[tuple[str, str], ...]

  def describe(self) -> str:
    """e.g. 'slot 1 (devices 2,3)'."""
    return (f"slot {self.index} (device{'s' * (len(self.devices) > 1)} "
            f"{','.join(map(str, self.devices))})")

  def assignments(self) -> str:
    """The environment as shell assignments (the dry run's prefix)."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)


def slots(machine: Machine, devices_per_run: int,
          xla_flags: str | None = None) -> list[LocalSlot]:
  """Every slot of `machine`: devices [i*N, (i+1)*N) for i < count // N.

  Args:
    machine: the devices to split.
    devices_per_run: N, JAX devices per run.
    xla_flags: the XLA_FLAGS the runs would get otherwise (cpu: kept, with the device count
      replaced); default: this process's.

  Raises:
    ConfigError: an unknown platform; N < 1 or more than the machine has; on TPU, N not a
      whole number of chips (a multiple of `per_chip`) or a chip count libtpu cannot bound
      (tpu_pack.CHIP_BOUNDS).
  """
  n = devices_per_run
  if machine.platform not in PLATFORMS:
    raise ConfigError(f"--devices_per_run: platform {machine.platform!r} is not one of "
                      f"{list(PLATFORMS)}")
  if not 1 <= n <= machine.count:
    raise ConfigError(f"--devices_per_run={n} must be between 1 and this machine's "
                      f"{machine.count} {machine.platform} device(s) (--num_devices)")
  if machine.platform == "tpu":
    chips = n // machine.per_chip
    if n % machine.per_chip or chips not in tpu_pack.CHIP_BOUNDS:
      allowed = [c * machine.per_chip for c in tpu_pack.CHIP_BOUNDS
                 if c * machine.per_chip <= machine.count]
      raise ConfigError(f"--devices_per_run={n} must be one of {allowed} on this TPU "
                        f"({machine.per_chip} JAX device(s) per chip)")
  if xla_flags is None:
    xla_flags = os.environ.get("XLA_FLAGS", "")
  out = []
  for i in range(machine.count // n):
    ids = tuple(range(i * n, (i + 1) * n))
    if machine.platform == "cpu":
      flags = " ".join(FORCE_COUNT.sub("", xla_flags).split()
                       + [f"--xla_force_host_platform_device_count={n}"])
      env = (("JAX_PLATFORMS", "cpu"), ("XLA_FLAGS", flags))
    elif machine.platform in ("cuda", "rocm"):
      name = "CUDA_VISIBLE_DEVICES" if machine.platform == "cuda" else "HIP_VISIBLE_DEVICES"
      env = ((name, ",".join(map(str, ids))),)
    else:
      chips = tuple(range(i * n // machine.per_chip, (i + 1) * n // machine.per_chip))
      env = tpu_pack.Slot(0, chips, tpu_pack.PORT_BASE + i).variables()
    out.append(LocalSlot(i, ids, env))
  return out


__all__ = ["Machine", "LocalSlot", "PLATFORMS", "probe", "slots"]
