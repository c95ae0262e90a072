"""Multi-process start-up (`jax.distributed`) and chief-only printing, for train.py and eval.run.

A pod or SLURM launch runs the same command on every host. Each process calls
`initialize_distributed` before touching a device, then sees every device of the job; only
process 0 (the chief) prints reports and writes config.json, metrics and eval files, while Orbax
checkpoints are written by all processes together (so the workdir is one folder every host sees).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import signal
import threading

import jax
from absl import flags, logging

from configs.errors import ConfigError

FLAGS = flags.FLAGS


def chief_print(*args, **kwargs) -> None:
  """`print` on process 0 only: a pod of N hosts reports a run once, not N times.

  Args: as `print` (`file=sys.stderr` included).
  """
  if jax.process_index() == 0:
    print(*args, **kwargs)


def distributed_launcher(environ=None) -> str | None:
  """Which multi-process launch started this process, or None for a single process.

  Read from environment variables and device files only (no JAX device is touched), in order:
    "slurm"  an `srun` step of several tasks: SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_PROCID,
             SLURM_LOCALID set and SLURM_NTASKS > 1 (what JAX's SLURM cluster reads);
    "mpi"    Open MPI's `mpirun` of several processes: OMPI_COMM_WORLD_SIZE > 1 (with
             OMPI_MCA_orte_hnp_uri, what JAX's Open MPI cluster reads);
    "tpu"    a Cloud TPU VM: libtpu is installed and the host has TPU chips (/dev/accel* or
             /dev/vfio/<n>); JAX reads the slice's workers from the TPU metadata (GCE) or
             TPU_WORKER_HOSTNAMES / TPU_PROCESS_ADDRESSES (GKE): a single-host slice becomes
             a one-process cluster.
  Launchers JAX cannot detect pass --coordinator_address, --num_processes and --process_id.

  Args:
    environ: the environment to read (default `os.environ`).
  """
  env = os.environ if environ is None else environ
  slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
  if all(k in env for k in slurm) and int(env["SLURM_NTASKS"]) > 1:
    return "slurm"
  if int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1 and "OMPI_MCA_orte_hnp_uri" in env:
    return "mpi"
  if tpu_chips_present() and importlib.util.find_spec("libtpu") is not None:
    return "tpu"
  return None


def tpu_chips_present() -> bool:
  """Whether this host has TPU chips (/dev/accel* on v2-v4, /dev/vfio/<n> on v5 and later)."""
  return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def initialize_distributed(mode: str = "auto", coordinator_address: str = "",
                           num_processes: int = 0, process_id: int = -1) -> None:
  """Calls `jax.distributed.initialize()` for a multi-process run, before any device is used.

  With a coordinator address (`--coordinator_address`, `--num_processes`, `--process_id`) it is
  called with them; else, with mode "auto", only when `distributed_launcher()` detects a launch
  (JAX then reads the cluster from the environment); "on" always calls it, "off" never. Each
  process then sees all devices (`jax.devices()`) and feeds its own share of every batch; only
  process 0 writes config.json, metrics, TensorBoard and eval files; Orbax checkpoints are
  written by all processes together, so `--workdir` must be one directory every host sees (a
  shared or mounted file system).

  Raises:
    ConfigError: --coordinator_address, --num_processes and --process_id not given together
      (an address, a count >= 1 and an index in [0, count)).
  """
  explicit = bool(coordinator_address) or num_processes > 0 or process_id >= 0
  if explicit:
    if not coordinator_address or num_processes < 1 or not 0 <= process_id < num_processes:
      raise ConfigError(
          f"--coordinator_address={coordinator_address!r}, --num_processes={num_processes} and "
          f"--process_id={process_id} go together: host:port of process 0, the number of "
          "processes >= 1 and this process's index in [0, num_processes)")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif mode == "on" or (mode == "auto" and distributed_launcher() is not None):
    jax.distributed.initialize()


def define_distributed_flags() -> None:
  """--distributed, --coordinator_address, --num_processes, --process_id (train.py, eval.run):
  the arguments of `initialize_distributed`."""
  flags.DEFINE_enum("distributed", "auto", ["auto", "on", "off"],
                    "jax.distributed.initialize(): auto = when a multi-process launch is detected "
                    "(see distributed_launcher), on = always (JAX detects the cluster), off = never.")
  flags.DEFINE_string("coordinator_address", "", "Multi-process: host:port of process 0 "
                      "(with --num_processes and --process_id; for launchers JAX cannot detect).")
  flags.DEFINE_integer("num_processes", 0, "Multi-process: number of processes (with --coordinator_address).")
  flags.DEFINE_integer("process_id", -1, "Multi-process: this process's index, 0..num_processes-1.")


def initialize_from_flags() -> None:
  """`initialize_distributed` with the flags of `define_distributed_flags`."""
  initialize_distributed(FLAGS.distributed, FLAGS.coordinator_address, FLAGS.num_processes,
                         FLAGS.process_id)


def quiet_library_logs() -> None:
  """Shows warnings and errors only (Orbax logs every save at INFO), unless --verbosity is given."""
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


class Preemption:
  """SIGTERM as a request to save a checkpoint and stop (a preemptible VM's or Slurm's notice).

  One process on the main thread installs its own handler, which only sets a flag (restored on
  exit). Several processes use the checkpoint manager's preemption sync point instead (Orbax
  `reached_preemption`, which handles the signal itself), so that every process stops at the
  same step. Use as a context manager around the training loop.
  """

  def __init__(self):
    self.signalled = threading.Event()
    self._own = jax.process_count() == 1 and threading.current_thread() is threading.main_thread()
    self._previous = None

  def __enter__(self) -> "Preemption":
    if self._own:
      self._previous = signal.signal(signal.SIGTERM, lambda *_: self.signalled.set())
    return self

  def __exit__(self, *exc) -> None:
    if self._own:
      signal.signal(signal.SIGTERM, self._previous)

  def requested(self, step: int, checkpoints) -> bool:
    """Whether to save and stop after `step` (`checkpoints`: runs.checkpoint.TrainCheckpoints)."""
    if self._own:
      return self.signalled.is_set()
    return jax.process_count() > 1 and checkpoints.reached_preemption(step)
