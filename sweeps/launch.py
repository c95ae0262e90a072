"""Launches a study's runs: `python -m sweeps.launch <study> --backend=local|tpu|slurm --root=<dir>`
(local: --root defaults to workdirs/sweeps).

  python -m sweeps.launch sweeps/pe_extrapolation_cpu.py --backend=local --root=workdirs/sweeps
  python -m sweeps.launch sweeps.pe_extrapolation_cpu --backend=local --root=workdirs/sweeps --dry-run

`<study>` is a study file or module defining `STUDY` (sweeps/study.py). Every run's workdir is
`<root>/<study name>/<run name>`. Before anything is launched, every run's configs are checked as
train.py and eval.run check them (configs/validate.py, eval-time extensions, lengths), and every
command is parsed back with ml_collections' config_flags to the exact config the study means; a
bad study fails here with one line naming the run and the field (exit status 2).

A run is complete when its final checkpoint (train.num_steps) and every result it asks for are
in its workdir (sweeps/workdirs.py); complete runs are skipped, so launching again resumes a
study: a deleted or half-finished run re-runs (train.py resumes from its latest checkpoint), a
run whose training finished but some evaluation did not runs only those evaluations.

Backends:
  local   runs each pending run here as subprocesses (train.py, then `python -m eval.run` for
          each further evaluation), --parallel at a time, with one log per run
          (<root>/<study>/<run>/launch.log) and a progress bar over runs; a failed run does not
          stop the others; at the end a table of every run launched, and exit status 1 if any
          failed. With --devices_per_run=N this machine's devices are split into slots of N
          and each run executes on the first free slot, a one-process job that sees only its
          slot's devices (GPUs through CUDA_VISIBLE_DEVICES, a TPU VM's chips through libtpu's
          variables, and on CPU an emulation with N devices per process;
          sweeps/local_pack.py); the slot is named in the run's log.
  tpu     a TPU VM (or --parallel of them, named <tpu_name>-<i>) through `gcloud compute tpus
          tpu-vm`: create it unless it exists; on --worker=all install gcsfuse if missing and
          mount --tpu_bucket at --tpu_mount (--rename-dir-limit, so that Orbax's rename of a
          finished checkpoint works on a flat bucket), clone or fetch the code at --tpu_git_ref,
          make a Python 3.11 virtual environment with uv (TPU VM images ship Python 3.10, and
          JAX needs 3.11) and `uv pip install -e '.[tpu]'` into it (it has no pip and needs
          none: the default corpus is fetched with the standard library, data/corpus_sources.py);
          then run each pending run's commands
          on --worker=all, one run at a time per TPU (one process per host; train.py's and
          eval.run's jax.distributed start-up joins them). --root is the
          workdirs' folder on the workers, an absolute path under the mount (train.py writes
          with file I/O, so no gs:// URL); this machine reads the runs' state through
          gs://<bucket>/... (etils.epath: needs gcsfs, `pip install -e '.[gcs]'`), or, without a
          bucket, at --root itself (a shared file system mounted here too). Logs:
          --log_root/<study>/<run>.log here.
  slurm   writes <root>/<study>/<run>/slurm.sbatch per pending run (the install of
          `-e <code>[cuda12]`, under flock, only when the venv is new or pyproject.toml changed;
          then `srun` train.py and eval.run on --slurm_nodes nodes, one process per node) and
          submits them with one `sbatch` as a job array (<root>/<study>/slurm_array.sbatch):
          each task gets one run's resources, --slurm_nodes x --slurm_gpus_per_node (by default
          one GPU), and runs that run's script; --slurm_array_max_running caps the tasks at
          once; --noslurm_array submits one job per run. --slurm_signal_grace seconds
          (default 120) before the time limit the tasks get SIGTERM (train.py saves a checkpoint) and the job requeues itself;
          a preempted job is requeued by SLURM (#SBATCH --requeue); a requeued job resumes from
          the checkpoint and skips the steps already done. --root and
          --slurm_code_dir must be folders every node sees, and the nodes' python3 must be
          >= 3.11 (e.g. --slurm_setup='module load python/3.11').

The mesh and batch checks before launching assume the devices a run gets: --num_devices, else
this machine's (local; --devices_per_run when given), the chips of --tpu_accelerator_type (tpu:
v2/v3 cores, v4/v5p chips = half the number in the name, v5e/v6e chips), or --slurm_nodes x
--slurm_gpus_per_node (slurm).

`--dry-run` prints exactly the commands (local, tpu) or scripts (slurm) that would run, for the
runs not yet complete, and launches nothing. (A dry run does not read a bucket: it lists every
run.)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
from typing import Callable, Sequence

from absl import flags, logging

from configs.errors import ConfigError
from runs import command_line, startup
from runs.checkpoint import committed_steps
from sweeps import cost
from sweeps import local_pack
from sweeps import search as search_lib
from sweeps import tpu_pack, tpu_preflight
from sweeps import workdirs
from sweeps.launch_exec import Outcome, summary_table
from sweeps.launch_local import launch_local
from sweeps.launch_plan import MANIFEST, PYTHON_VERSION, LaunchError, Planned, manifest, plan, \
    write_text
from sweeps.launch_slurm import SLURM_SIGNAL_GRACE_S, SlurmOptions, check_signal_grace, \
    launch_slurm
from sweeps.launch_tpu import TPU_VENV_PYTHON, TpuOptions, is_remote_git_url, launch_tpu, \
    tpu_devices, tpu_state_root
from sweeps.overrides import REPO_ROOT
from sweeps.result_keys import ResultKey
from sweeps.study import Study, load_study

# The flags and the entry point; what a launch runs (planning, execution) and the backends are
# in sweeps/launch_plan.py, launch_exec.py, launch_local.py, launch_tpu.py and launch_slurm.py.

BACKENDS = ("local", "tpu", "slurm")


# A requeued slurm job's script imports this from here (launch_slurm.SLURM_STEPS: `from
# sweeps.launch import steps_in_place`), so it stays in this module.
def steps_in_place(workdir: str, num_steps: int | str, results: str) -> list[int]:
  """The steps of a run that need not run again: those whose every result is in
  `<workdir>/eval/` at the final checkpoint (`num_steps`), which must be committed (none when it
  is not). A requeued slurm job's script asks this once, before its steps
  (`launch_slurm.sbatch_script`).

  Args:
    workdir: the run's workdir.
    num_steps: train.num_steps (an int, or its decimal string from the command line).
    results: JSON list, per step in order, of the list of its ResultKeys as dicts
      (`ResultKey._asdict()`).

  Returns:
    The indices (0-based, in `results`' order) of the steps whose results are in place.

  Raises:
    OSError: the workdir cannot be read; ValueError / TypeError: malformed arguments.
  """
  step = int(num_steps)
  if step not in committed_steps(workdir):
    return []
  present = workdirs.present_results(workdir, step)
  return [i for i, keys in enumerate(json.loads(results))
          if all(ResultKey(**k) in present for k in keys)]


# ---------------------------------------------------------------------------- entry point

FLAGS = flags.FLAGS


LOCAL_ROOT = "workdirs/sweeps"  # --root of the local backend when none is given


def define_flags() -> None:
  """Command-line flags (defined only when run as a script)."""
  flags.DEFINE_enum("backend", "local", BACKENDS, "Where runs execute.")
  flags.DEFINE_string("root", None, "Sweep root: workdirs are <root>/<study>/<run> (local: "
                      f"default {LOCAL_ROOT}; tpu: an absolute path on the workers, under "
                      "--tpu_mount; slurm: a folder every node sees; both required).")
  flags.DEFINE_integer("parallel", 1, "local: runs at once; tpu: TPU VMs used (<tpu_name>-<i> "
                       "when > 1), one run at a time each.")
  flags.DEFINE_integer("devices_per_run", 0, "local: 0 = each run sees all of this machine's "
                       "devices; N = split them into slots of N and run one run per slot side by "
                       "side, each process seeing only its slot's devices (GPUs: "
                       "CUDA_VISIBLE_DEVICES; a TPU VM's chips; on CPU an emulation: N devices "
                       "per process; sweeps/local_pack.py). --num_devices is then the devices "
                       "to split (default: this machine's).")
  flags.DEFINE_bool("dry_run", False, "Print the commands / scripts; launch nothing.")
  flags.DEFINE_string("published", "", "Folder of published runs (<published>/<study>/<run>, "
                      "e.g. results; docs/sweeps.md): a run finished there counts as complete "
                      "without its workdir; local: each run that finishes is published there.")
  flags.DEFINE_float("tokens_per_s", 0.0, "Training tokens/s of the study's first pending run on "
                     "the target, for the time estimate printed before launching (sweeps/cost.py; "
                     "other runs scale by their FLOPs per token); 0 = measured here when the "
                     "study's runs logged some, else FLOPs only.")
  flags.DEFINE_bool("measure_throughput", False, "local: time the first pending run's training "
                    "here for a few steps before launching (the time estimate's rate).")
  flags.DEFINE_alias("dry-run", "dry_run")
  flags.DEFINE_integer("num_devices", 0, "Devices each run sees, for the mesh and batch checks "
                       "before launching (local with --devices_per_run: the devices split into "
                       "slots); 0 = this machine's (local), the slice's "
                       "(tpu: from --tpu_accelerator_type) or --slurm_nodes x "
                       "--slurm_gpus_per_node (slurm).")
  flags.DEFINE_string("python", None, "Interpreter of the runs; default: this one (local), "
                      f"{TPU_VENV_PYTHON} in the code folder, a Python {PYTHON_VERSION} venv "
                      "made with uv (tpu), <slurm_venv>/bin/python (slurm).")
  flags.DEFINE_string("log_root", "workdirs/sweep_logs", "tpu: local folder for per-run logs "
                      "(<log_root>/<study>/<run>.log).")
  flags.DEFINE_string("jax_requirement", "", "An extra pip requirement installed with the code "
                      "(e.g. a pinned jax[tpu]==...); the code's extras already bring jax[tpu] "
                      "(tpu: `-e .[tpu]`) or jax[cuda12] (slurm with GPUs: `-e <code>[cuda12]`).")
  flags.DEFINE_string("tpu_name", None, "tpu: TPU VM name (created if it does not exist).")
  flags.DEFINE_string("tpu_zone", None, "tpu: zone, e.g. us-central2-b.")
  flags.DEFINE_string("tpu_project", "", "tpu: GCP project; '' = gcloud's default.")
  flags.DEFINE_string("tpu_accelerator_type", "v4-8", "tpu: accelerator type, e.g. v4-32, v5p-64.")
  flags.DEFINE_string("tpu_runtime_version", "tpu-ubuntu2204-base", "tpu: TPU VM runtime version.")
  flags.DEFINE_bool("tpu_spot", False, "tpu: create a spot TPU VM.")
  flags.DEFINE_bool("tpu_compile_check", True, "tpu: before any gcloud command, compile each "
                    "distinct run shape for the slice on this machine (libtpu; "
                    "sweeps/tpu_preflight.py) and refuse runs that do not fit a chip's HBM.")
  flags.DEFINE_integer("tpu_chips_per_run", 0, "tpu: 0 = each run on the whole slice (all "
                       "workers); N = pack runs: each a one-process job on N chips of one worker, "
                       "as many side by side as the slice holds (sweeps/tpu_pack.py).")
  flags.DEFINE_string("tpu_repo", None, "tpu: git URL the workers clone; default: this "
                      "checkout's `origin` remote.")
  flags.DEFINE_string("tpu_git_ref", None, "tpu: commit the workers check out; default: this "
                      "checkout's HEAD (push it first).")
  flags.DEFINE_string("tpu_code_dir", "pe-sweeps", "tpu: code folder on each worker (relative "
                      "to the home folder).")
  flags.DEFINE_string("tpu_bucket", "", "tpu: GCS bucket (gs://NAME or NAME) that every worker "
                      "mounts with gcsfuse at --tpu_mount for the workdirs; this machine reads "
                      "the runs' state through gs:// (gcsfs). '' = --root is a shared file system "
                      "(NFS) that this machine mounts too.")
  flags.DEFINE_string("tpu_mount", "", "tpu: where the workers mount --tpu_bucket; default "
                      "/mnt/<bucket>.")
  flags.DEFINE_integer("slurm_nodes", 1, "slurm: nodes per run (one process per node).")
  flags.DEFINE_integer("slurm_gpus_per_node", 1, "slurm: GPUs per node.")
  flags.DEFINE_integer("slurm_cpus_per_task", 8, "slurm: CPUs per process.")
  flags.DEFINE_string("slurm_time", "24:00:00", "slurm: time limit per run.")
  flags.DEFINE_integer("slurm_signal_grace", SLURM_SIGNAL_GRACE_S, "slurm: seconds before "
                       "--slurm_time at which train.py is told (SIGTERM) to save a checkpoint "
                       "and the job requeues itself (#SBATCH --signal=B:USR1@<seconds>); leave "
                       "time for the save.")
  flags.DEFINE_bool("slurm_array", True, "slurm: submit the pending runs as one job array, "
                    "each task one run with one run's resources (--slurm_nodes x "
                    "--slurm_gpus_per_node: by default one GPU); --noslurm_array: one job per run.")
  flags.DEFINE_integer("slurm_array_max_running", 0, "slurm: at most this many array tasks at "
                       "once (sbatch --array=...%N); 0 = no limit.")
  flags.DEFINE_string("slurm_partition", "", "slurm: partition ('' = the cluster's default).")
  flags.DEFINE_string("slurm_account", "", "slurm: account ('' = none).")
  flags.DEFINE_multi_string("slurm_setup", [], "slurm: shell lines run before the install "
                            "(repeatable), e.g. 'module load cuda/12.4'.")
  flags.DEFINE_string("slurm_code_dir", REPO_ROOT, "slurm: the code folder on the shared file "
                      "system.")
  flags.DEFINE_string("slurm_venv", None, "slurm: virtual environment; default "
                      "<slurm_code_dir>/.venv.")


def _git(*args: str) -> str:
  """Output of `git <args>` in the repository root ('' if git fails)."""
  done = subprocess.run(["git", "-C", REPO_ROOT, *args], capture_output=True, text=True)
  return done.stdout.strip() if done.returncode == 0 else ""


def tpu_options() -> TpuOptions:
  """TpuOptions from the flags.

  Raises:
    LaunchError: --tpu_name or --tpu_zone missing; no --tpu_repo and no origin remote; no
      --tpu_git_ref and no commit.
  """
  for name in ("tpu_name", "tpu_zone"):
    if not FLAGS[name].value:
      raise LaunchError(f"--backend=tpu needs --{name}")
  repo = FLAGS.tpu_repo or _git("remote", "get-url", "origin")
  if not repo:
    raise LaunchError("--backend=tpu needs --tpu_repo (this checkout has no `origin` remote)")
  if not is_remote_git_url(repo):
    source = "" if FLAGS.tpu_repo else " (this checkout's origin)"
    raise LaunchError(f"--tpu_repo={repo}{source} is a local path the TPU workers cannot "
                      "clone; push the code and give its URL (https://..., ssh://..., or "
                      "git@host:path)")
  ref = FLAGS.tpu_git_ref or _git("rev-parse", "HEAD")
  if not ref:
    raise LaunchError("--backend=tpu needs --tpu_git_ref (this checkout has no commit)")
  bucket = FLAGS.tpu_bucket.removeprefix("gs://").strip("/")
  if "/" in bucket:
    raise LaunchError(f"--tpu_bucket takes a bucket (gs://NAME), not a path; got "
                      f"{FLAGS.tpu_bucket} (put the path in --root, under --tpu_mount)")
  mount = FLAGS.tpu_mount or (f"/mnt/{bucket}" if bucket else "")
  if mount and not os.path.isabs(mount):
    raise LaunchError(f"--tpu_mount must be an absolute path; got {mount}")
  if FLAGS.tpu_chips_per_run < 0:
    raise LaunchError(f"--tpu_chips_per_run must be >= 0 (0: the whole slice per run); got "
                      f"{FLAGS.tpu_chips_per_run}")
  if FLAGS.tpu_chips_per_run:
    tpu_pack.slots(FLAGS.tpu_accelerator_type, FLAGS.tpu_chips_per_run)  # names a bad value
  return TpuOptions(FLAGS.tpu_name, FLAGS.tpu_zone, FLAGS.tpu_project, FLAGS.tpu_accelerator_type,
                    FLAGS.tpu_runtime_version, FLAGS.tpu_spot, repo, ref, FLAGS.tpu_code_dir,
                    FLAGS.jax_requirement, FLAGS.python or TPU_VENV_PYTHON, bucket,
                    mount, FLAGS.tpu_chips_per_run)


def slurm_options() -> SlurmOptions:
  """SlurmOptions from the flags.

  Raises:
    LaunchError: a node, GPU or CPU count < 1 (0 GPUs is allowed), a relative code folder, a
      time limit not in one of SLURM's formats, or a --slurm_signal_grace outside
      1..min(65535, the time limit - 1) seconds.
  """
  for name, low, note in (("slurm_nodes", 1, ""), ("slurm_gpus_per_node", 0, " (0: CPU only)"),
                          ("slurm_cpus_per_task", 1, ""),
                          ("slurm_array_max_running", 0, " (0: no limit)")):
    if FLAGS[name].value < low:
      raise LaunchError(f"--{name} must be >= {low}{note}; got {FLAGS[name].value}")
  grace = check_signal_grace(FLAGS.slurm_signal_grace, FLAGS.slurm_time)
  if not os.path.isabs(FLAGS.slurm_code_dir):
    raise LaunchError(f"--slurm_code_dir must be an absolute path; got {FLAGS.slurm_code_dir}")
  venv = FLAGS.slurm_venv or os.path.join(FLAGS.slurm_code_dir, ".venv")
  if FLAGS.python:
    raise LaunchError("--backend=slurm runs <slurm_venv>/bin/python; set --slurm_venv, "
                      "not --python")
  return SlurmOptions(FLAGS.slurm_nodes, FLAGS.slurm_gpus_per_node, FLAGS.slurm_cpus_per_task,
                      FLAGS.slurm_time, FLAGS.slurm_partition, FLAGS.slurm_account,
                      tuple(FLAGS.slurm_setup), FLAGS.slurm_code_dir, venv,
                      FLAGS.jax_requirement, grace, FLAGS.slurm_array,
                      FLAGS.slurm_array_max_running)


def launch(study_spec: str) -> int:
  """Checks the flags and the study, then launches (or prints) the pending runs.

  Returns:
    0 when every launched run succeeded (or was submitted), 1 when one failed.

  Raises:
    ConfigError (StudyError, LaunchError): a bad flag, study or run config, before launching.
  """
  backend, root, dry_run = FLAGS.backend, FLAGS.root, FLAGS.dry_run
  if not root and backend == "local":
    root = LOCAL_ROOT
  if not root:
    raise LaunchError(f"--root is required with --backend={backend}: the folder that holds "
                      "<study>/<run> (tpu: a path on the workers, e.g. under the --tpu_bucket "
                      "mount; slurm: a folder every node sees)")
  if FLAGS.parallel < 1:
    raise LaunchError(f"--parallel must be >= 1; got {FLAGS.parallel}")
  if FLAGS.tokens_per_s < 0:
    raise LaunchError(f"--tokens_per_s must be > 0, or 0 (the default: the study's own logged "
                      f"tokens/s here, if any); got {FLAGS.tokens_per_s}")
  if FLAGS.num_devices < 0:
    raise LaunchError(f"--num_devices must be >= 1, or 0 for the backend's count; got "
                      f"{FLAGS.num_devices}")
  published = os.path.abspath(FLAGS.published) if FLAGS.published else None
  if published and not os.path.isdir(published):
    raise LaunchError(f"--published={FLAGS.published}: no such folder (give the folder that "
                      "holds <study>/<run>, e.g. results)")
  if workdirs.is_remote(root):
    raise LaunchError(f"--root={root}: train.py writes with file I/O, so give a folder (for a "
                      "bucket on TPU workers: --tpu_bucket, mounted at --tpu_mount, and a --root "
                      "under the mount)")
  if backend == "tpu" and not os.path.isabs(root):
    raise LaunchError(f"--backend=tpu: --root={root} must be an absolute path on the workers")
  if backend != "tpu" and not dry_run:  # the runs' folders and logs go there: check it first
    command_line.check_writable(root, "--root")
  root = os.path.abspath(root)
  if backend == "slurm" and any(c.isspace() for c in root):
    raise LaunchError(f"--backend=slurm: --root={root!r} contains white space, which #SBATCH "
                      "lines cannot hold")
  tpu = tpu_options() if backend == "tpu" else None
  state_root = tpu_state_root(tpu, root) if tpu else root
  slurm = slurm_options() if backend == "slurm" else None
  if backend == "slurm" and FLAGS.parallel != 1:
    raise LaunchError("--parallel does not apply to --backend=slurm (the scheduler runs jobs "
                      "side by side)")
  study = load_study(study_spec)
  study.point_list()  # a points() that raises is one line before this machine's devices are probed
  if backend == "tpu" and os.path.isabs(study.config_arg()):
    raise LaunchError(f"--backend=tpu: Study.config {study.config_arg()} is outside the "
                      f"repository, so the TPU workers' checkout does not have it")
  slots = local_slots(backend, FLAGS.num_devices or None)
  num_devices = devices_per_run(backend, tpu, slurm, slots)
  # A dry run does not read a bucket, nor a TPU root that this machine does not mount.
  read_state = not (dry_run and backend == "tpu" and (workdirs.is_remote(state_root)
                                                       or not os.path.isdir(state_root)))
  stage = functools.partial(run_stage, backend=backend, num_devices=num_devices,
                            read_state=read_state, dry_run=dry_run, tpu=tpu, slurm=slurm,
                            slots=slots)
  planned, outcomes = [], []
  if study.search is not None:  # the tuning stage first (sweeps/search.py)
    study, planned, outcomes = search_stage(study, stage, root=root, state_root=state_root,
                                            read_state=read_state, dry_run=dry_run,
                                            published=published)
  if study is not None:
    final_planned, final_outcomes = stage(study, root, state_root, published)
    planned, outcomes = planned + final_planned, outcomes + final_outcomes
  todo = [p for p in planned if p.pending]
  if dry_run:
    return 0
  if outcomes:
    print(summary_table(outcomes))
  failed = [o for o in outcomes if o.status == "failed"]
  print(f"# {len(outcomes) - len(failed)} of {len(outcomes)} launched runs "
        f"{'submitted' if backend == 'slurm' else 'succeeded'}; "
        f"{len(planned) - len(todo)} were already complete"
        + (f"; {len(failed)} FAILED (details and logs above)" if failed else ""))
  return 1 if failed else 0


def run_stage(study: Study, root: str, state_root: str, published_root: str | None = None, *,
              backend: str, num_devices: int | None, read_state: bool, dry_run: bool,
              tpu: "TpuOptions | None", slurm: "SlurmOptions | None",
              slots: Sequence[local_pack.LocalSlot] = ()) -> tuple[list[Planned], list[Outcome]]:
  """Plans `study` under `root`, prints its header, writes its manifest (not in a dry run) and
  runs (or, dry, prints) its pending runs on `backend`. `published_root`: the folder that
  holds this stage's published <study>/<run> folders (--published; `launch_plan.plan`).

  Raises:
    ConfigError: see `plan`; warm-started children on a backend that cannot order them.
  """
  planned = plan(study, root, num_devices=num_devices, read_state=read_state,
                 state_root=state_root, published_root=published_root)
  todo = [p for p in planned if p.pending]
  children = [p.run.name for p in todo if p.run.parent]
  if children and (backend == "slurm" or (backend == "tpu" and (
      FLAGS.parallel > 1 or FLAGS.tpu_chips_per_run))):
    raise LaunchError(f"study {study.name} has warm-started children ({children[0]}, ...): they "
                      f"start after their parent on --backend=local, or --backend=tpu with "
                      f"--parallel=1 and whole-slice runs (runs in order); not on "
                      f"--backend={backend}" + (f" --parallel={FLAGS.parallel} "
                                                f"--tpu_chips_per_run={FLAGS.tpu_chips_per_run}"
                                                if backend == "tpu" else ""))
  print(f"# study {study.name}: {len(planned)} run{'s' * (len(planned) != 1)}, {len(todo)} to run"
        + ("" if read_state else f" ({state_root} not read in a dry run: every run listed)")
        + f"; backend {backend}, root {root}"
        + (f"\n# {study.description}" if study.description else ""))
  restored = sum(1 for p in planned if p.state is not None and p.state.published)
  if restored:
    print(f"# {restored} run(s) complete in their published folders "
          f"({published_root}): not run again")
  if todo:
    print("\n".join(cost_estimate(study, planned, backend, local_parallel(slots),
                                   slots[0] if slots else None)))
  if not dry_run:
    write_text(workdirs.join(state_root, study.name, MANIFEST), json.dumps(
        manifest(study, planned), indent=2, sort_keys=True, default=str) + "\n")
  if backend == "local":
    outcomes = launch_local(study, planned, python=FLAGS.python or sys.executable,
                            parallel=local_parallel(slots), dry_run=dry_run, slots=slots,
                            publish_to=published_root)
  elif backend == "tpu":
    tpu_compile_check(todo, tpu, dry_run)  # before any gcloud command
    outcomes = launch_tpu(study, planned, tpu, parallel=FLAGS.parallel, dry_run=dry_run,
                          log_root=os.path.abspath(FLAGS.log_root))
  else:
    outcomes = launch_slurm(study, planned, slurm, dry_run=dry_run,
                            folder=workdirs.join(root, study.name))
  return planned, outcomes


def tpu_compile_check(todo: Sequence[Planned], tpu: TpuOptions, dry_run: bool) -> None:
  """--backend=tpu's pre-flight (sweeps/tpu_preflight.py): each distinct shape of the pending
  runs compiled for the slice (or one --tpu_chips_per_run slot), the table printed; runs that do
  not fit are refused (a dry run prints the table and a warning instead). Off with
  --notpu_compile_check.

  Raises:
    ConfigError: libtpu missing here (one line: install it or pass --notpu_compile_check), an
      accelerator type the check cannot describe, or runs that do not fit (not in a dry run).
  """
  if not todo or not FLAGS.tpu_compile_check:
    return
  topology = tpu_preflight.topology_name(tpu.accelerator_type, FLAGS.tpu_chips_per_run)
  if importlib.util.find_spec("libtpu") is None:
    raise LaunchError("--backend=tpu compiles each run shape for the slice first, which needs "
                      "libtpu here: pip install -e '.[tpu]' -c constraints.txt, or pass "
                      "--notpu_compile_check")
  checks = tpu_preflight.check_shapes([p.run for p in todo], topology)  # this machine's python
  print("\n".join(tpu_preflight.table(checks, topology)))
  try:
    tpu_preflight.refuse_unfit(checks, topology)
  except ConfigError as e:
    if not dry_run:
      raise
    print(f"# warning (dry run): {e}")


def devices_per_run(backend: str, tpu: TpuOptions | None, slurm: SlurmOptions | None,
                    slots: Sequence[local_pack.LocalSlot]) -> int | None:
  """The devices each run sees, for the mesh and batch checks: a slot's (--devices_per_run),
  else --num_devices, else this machine's (local, listed in a child process), a packed run's
  chips or the slice's (tpu; None when the accelerator type is unknown: the checks then take
  each config's fixed mesh axes), or --slurm_nodes x --slurm_gpus_per_node (slurm)."""
  if slots:
    return len(slots[0].devices)
  if FLAGS.num_devices:
    return FLAGS.num_devices
  if backend == "local":
    return local_pack.probe(FLAGS.python or sys.executable).count
  if backend == "slurm":
    return slurm.nodes * max(1, slurm.gpus_per_node)
  if tpu.chips_per_run:
    return tpu_pack.devices_per_run(tpu.accelerator_type, tpu.chips_per_run)
  found = tpu_devices(tpu.accelerator_type)
  if found is None:
    print(f"warning: --tpu_accelerator_type={tpu.accelerator_type}: device count unknown; the "
          "checks assume the product of each config's fixed mesh axes (set --num_devices)",
          file=sys.stderr)
  return found


def local_slots(backend: str, num_devices: int | None) -> list[local_pack.LocalSlot]:
  """The local backend's slots (--devices_per_run; [] without): this machine's devices, or
  --num_devices of them (on CPU, any number: an emulation), split into slots.

  Raises:
    ConfigError: --devices_per_run < 0, given to another backend, or not fitting the devices;
      --num_devices above the GPUs or TPU devices this machine has.
  """
  n = FLAGS.devices_per_run
  if n < 0:
    raise LaunchError(f"--devices_per_run must be >= 1, or 0 for every device per run; got {n}")
  if not n:
    return []
  if backend != "local":
    raise LaunchError(f"--devices_per_run applies to --backend=local (tpu: "
                      f"--tpu_chips_per_run; slurm: --slurm_gpus_per_node); got --backend={backend}")
  machine = local_pack.probe(FLAGS.python or sys.executable)
  if num_devices and machine.platform != "cpu" and num_devices > machine.count:
    raise LaunchError(f"--num_devices={num_devices}: this machine has {machine.count} "
                      f"{machine.platform} devices")
  if num_devices:
    machine = dataclasses.replace(machine, count=num_devices)
  slots = local_pack.slots(machine, n)
  if machine.count % n:
    print(f"warning: --devices_per_run={n} leaves {machine.count % n} of this machine's "
          f"{machine.count} devices unused", file=sys.stderr)
  return slots


def local_parallel(slots: Sequence[local_pack.LocalSlot]) -> int:
  """Runs at once on the local backend: --parallel, or with slots every slot (at most
  --parallel when it is given)."""
  if not slots:
    return FLAGS.parallel
  return min(FLAGS.parallel, len(slots)) if FLAGS["parallel"].present else len(slots)


def cost_estimate(study: Study, planned: Sequence[Planned], backend: str, parallel: int,
                  slot: local_pack.LocalSlot | None = None) -> list[str]:
  """The cost lines printed before launching the pending runs of `planned` (sweeps/cost.py):
  the rate from --tokens_per_s, else from the study's runs' own logs here, else (local,
  --measure_throughput) from a short timing of the first pending run (on `slot`'s devices when
  runs are packed, --devices_per_run); FLOPs only without any."""
  todo = [p for p in planned if p.pending]
  costs = [cost.run_cost(p.run) for p in todo]
  rate = None
  if FLAGS.tokens_per_s > 0:
    rate = cost.rate_from_tokens_per_s(FLAGS.tokens_per_s, costs[0])
  elif backend == "local":
    rate = cost.measured_flops_per_s(planned)
    if rate is None and FLAGS.measure_throughput:
      first = todo[0].run
      print(f"# timing {first.name} here for the estimate (--measure_throughput) ...", flush=True)
      tps = cost.time_probe(first, study.config_arg(), FLAGS.python or sys.executable,
                            env=None if slot is None else os.environ | dict(slot.env))
      rate = (tps * costs[0].flops_per_token, f"a short timing of {first.name} here: "
                                              f"{tps:,.0f} tokens/s")
  side_by_side = parallel if backend != "slurm" else 1
  if backend == "tpu" and FLAGS.tpu_chips_per_run:
    side_by_side *= len(tpu_pack.slots(FLAGS.tpu_accelerator_type, FLAGS.tpu_chips_per_run))
  return cost.estimate_lines(costs, rate, side_by_side)


def search_stage(study: Study, stage: Callable, *, root: str, state_root: str, read_state: bool,
                 dry_run: bool, published: str | None = None
                 ) -> tuple[Study | None, list[Planned], list[Outcome]]:
  """Runs the tuning stage of `study` (sweeps/search.py) in `<root>/<study>/search/` (with
  successive halving, rung after rung as long as each is complete), then, when every search
  run is complete, writes `<root>/<study>/selection.json` (not in a dry run)
  and returns the final stage's study; None instead when the search is not done. `published`
  (--published): search runs finished in `<published>/<study>/search/<run>` count as complete.

  Raises:
    ConfigError: a bad search (sweeps.search.check), or a group whose candidates all diverged.
  """
  search = search_lib.search_study(study)  # checks the search; its first rung with halving
  stage_published = os.path.join(published, study.name) if published else None
  planned, outcomes = stage(search, workdirs.join(root, study.name),
                            workdirs.join(state_root, study.name), stage_published)
  rungs = search_lib.num_rungs(study)
  for rung in range(1, rungs):  # successive halving: each rung once the one before is complete
    search = search_lib.rung_study(study, rung, state_root if read_state else None, published)
    if search is None:
      print(f"# rung {rung + 1} of {rungs} of {study.name}'s search: after rung {rung} (its runs "
            "are not all complete yet)")
      break
    more, done = stage(search, workdirs.join(root, study.name),
                       workdirs.join(state_root, study.name), stage_published)
    planned, outcomes = planned + more, outcomes + done
  path = search_lib.selection_path(state_root, study)
  chosen = search_lib.selection(study, state_root, published) if read_state else None
  if chosen is None and dry_run:
    chosen = search_lib.read_selection(path)
  if chosen is None:
    print(f"# final stage of {study.name}: after the search (its runs are not all complete "
          f"yet); launch again to select {sorted(study.search.grid)} per group and train the "
          "study's runs")
    return None, planned, outcomes
  if not dry_run:
    write_text(path, json.dumps(chosen, indent=2, sort_keys=True) + "\n")
  print("\n".join(search_lib.describe(chosen)) + f"\n# selection: {path}")
  return search_lib.final_study(study, chosen), planned, outcomes


USAGE = ("python -m sweeps.launch <study file or module> --root=<dir> "
         "[--backend=local|tpu|slurm] [--parallel=N] [--dry-run]")


def main(argv):
  """`python -m sweeps.launch <study>`: exit 2 with one line on bad input (a flag, the study, a
  run's config; runs.command_line.run: stray arguments and flag errors too), 1 if a run failed."""
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # JAX's backend probing logs at INFO
  startup.pin_platform()  # no libtpu start-up warnings on a host without TPU chips
  sys.exit(launch(argv[1]))


if __name__ == "__main__":
  define_flags()
  command_line.run(main, usage=USAGE, arguments=1)
