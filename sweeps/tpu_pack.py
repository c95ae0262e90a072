"""Many small runs per TPU slice: each run a single-process job on a few chips of one worker.

A study of small models wastes a pod when each run takes the whole slice (a 0.8M-parameter run
keeps one chip busy while the other 15 of a v4-32 idle). With `--tpu_chips_per_run=N` the tpu
backend splits every worker of the slice into chips_per_host / N slots and runs one run per
slot at a time, side by side, each process seeing only its chips through libtpu's topology
variables (the recipe for non-communicating processes on one TPU VM, from a JAX developer's
note, gist skye/f82ba45d2445bb19d53545538754f9a3):

  TPU_CHIPS_PER_PROCESS_BOUNDS  the process's chips as x,y,z (1 chip 1,1,1; 2 chips 1,2,1;
                                4 chips 2,2,1)
  TPU_PROCESS_BOUNDS            1,1,1 (one process in its own "slice")
  TPU_VISIBLE_DEVICES           the chip indices on the worker, disjoint between slots
  TPU_MESH_CONTROLLER_ADDRESS   localhost:<port>, and TPU_MESH_CONTROLLER_PORT=<port>: one
                                port per slot of a worker (PORT_BASE + slot)

and train.py / eval.run get `--distributed=off` (a one-process job, not the slice's cluster).
Chips per worker: 4 for v2, v3, v4, v5p and the multi-host v5e / v6e slices, 8 for a
single-host v5e / v6e of 8 chips (Cloud TPU docs, "TPU versions" / system architecture).
"""

from __future__ import annotations

import dataclasses

from configs.errors import ConfigError

PORT_BASE = 8476  # libtpu's default mesh controller port; slot i of a worker uses PORT_BASE + i
CHIP_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}  # chips per process -> x,y,z
CORES_PER_CHIP_DEVICE = {"v2": 2, "v3": 2}  # JAX devices per chip (v4+: one, megacore)
KNOWN = ("v2", "v3", "v4", "v5p", "v5litepod", "v5e", "v6e")


@dataclasses.dataclass(frozen=True)
class Slot:
  """Where one packed run executes: a worker of the slice and some of its chips.

  Attributes:
    worker: the worker index (`gcloud ... ssh --worker=<worker>`).
    chips: the chip indices on that worker (TPU_VISIBLE_DEVICES).
    port: the slot's mesh controller port, unique on the worker.
  """

  worker: int
  chips: tuple[int, ...]
  port: int

  def variables(self) -> tuple[tuple[str, str], ...]:
    """The environment variables that confine a process to this slot's chips, in order."""
    return (("TPU_CHIPS_PER_PROCESS_BOUNDS", CHIP_BOUNDS[len(self.chips)]),
            ("TPU_PROCESS_BOUNDS", "1,1,1"),
            ("TPU_VISIBLE_DEVICES", ",".join(map(str, self.chips))),
            ("TPU_MESH_CONTROLLER_ADDRESS", f"localhost:{self.port}"),
            ("TPU_MESH_CONTROLLER_PORT", str(self.port)))

  def env(self) -> str:
    """The same variables as shell assignments."""
    return " ".join(f"{k}={v}" for k, v in self.variables())

  def describe(self) -> str:
    return f"worker {self.worker}, chip{'s' * (len(self.chips) > 1)} " + ",".join(
        map(str, self.chips))


def topology(accelerator_type: str) -> tuple[int, int, int]:
  """(workers, chips per worker, JAX devices per chip) of a Cloud TPU accelerator type.

  v2-N / v3-N and v4-N / v5p-N count TensorCores (two per chip); v5e / v6e / v5litepod count
  chips.

  Raises:
    ConfigError: an unknown family or size (naming --tpu_accelerator_type).
  """
  family, _, count = accelerator_type.lower().partition("-")
  if family not in KNOWN or not count.isdigit() or int(count) < 1:
    raise ConfigError(f"--tpu_accelerator_type={accelerator_type}: packing runs needs a known "
                      f"type <family>-<size> with family in {list(KNOWN)}")
  n = int(count)
  chips = n if family in ("v5litepod", "v5e", "v6e") else max(1, n // 2)
  per_worker = 8 if family in ("v5litepod", "v5e", "v6e") and chips == 8 else min(4, chips)
  return max(1, chips // per_worker), per_worker, CORES_PER_CHIP_DEVICE.get(family, 1)


def slots(accelerator_type: str, chips_per_run: int) -> list[Slot]:
  """Every slot of the slice, worker by worker: chips [i*N, (i+1)*N) of each worker.

  Raises:
    ConfigError: chips_per_run not in CHIP_BOUNDS, or more than a worker has.
  """
  workers, per_worker, _ = topology(accelerator_type)
  if chips_per_run not in CHIP_BOUNDS or chips_per_run > per_worker:
    allowed = [n for n in CHIP_BOUNDS if n <= per_worker]
    raise ConfigError(f"--tpu_chips_per_run={chips_per_run} must be one of {allowed} on "
                      f"{accelerator_type} ({per_worker} chips per worker), or 0 for the whole "
                      "slice per run")
  return [Slot(w, tuple(range(i * chips_per_run, (i + 1) * chips_per_run)), PORT_BASE + i)
          for w in range(workers) for i in range(per_worker // chips_per_run)]


def devices_per_run(accelerator_type: str, chips_per_run: int) -> int:
  """JAX devices a packed run sees (its mesh and batch are checked against this)."""
  return chips_per_run * topology(accelerator_type)[2]


def packed_line(line: str, slot: Slot, label: str) -> str:
  """`line` (a train.py or eval.run command) confined to `slot`: the environment in front and
  `--distributed=off` after; other commands (a child's `before` steps) only get the
  environment."""
  return f"{slot.env()} {line}{one_process_tail(label)}"


def one_process_tail(label: str) -> str:
  """' --distributed=off' for a train or eval step (a one-process job on its own devices, not
  a member of the machine's or slice's cluster); '' for other commands."""
  return " --distributed=off" if label == "train" or label.startswith("eval") else ""


__all__ = ["CHIP_BOUNDS", "PORT_BASE", "Slot", "devices_per_run", "one_process_tail",
           "packed_line", "slots", "topology"]
