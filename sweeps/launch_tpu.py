"""The tpu backend of `python -m sweeps.launch` (--backend=tpu): Cloud TPU VMs through `gcloud
compute tpus tpu-vm` (`TpuOptions`): each VM created unless it exists and every worker set up
(gcsfuse and the bucket's mount, the code at a git ref, a uv venv with the `tpu` extra;
`tpu_setup_lines`), then each pending run's commands over ssh on every worker, or packed on a
few chips of one worker (`tpu_run_steps`; the slots: sweeps/tpu_pack.py), one run at a time per
slice or slot (`launch_tpu`). Also the JAX devices of a slice (`tpu_devices`), which git URLs
the workers can clone (`is_remote_git_url`) and where this machine reads the runs' state
(`tpu_state_root`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shlex
import threading
from typing import Sequence

from sweeps import tpu_pack
from sweeps.launch_exec import Outcome, duration, execute, result_checker
from sweeps.launch_plan import PYTHON_VERSION, LaunchError, Planned, Step, run_steps
from sweeps.study import Study

TPU_VENV_PYTHON = ".venv/bin/python"  # the tpu backend's interpreter, in the code folder
GCSFUSE_RENAME_DIR_LIMIT = 200_000  # files per renamed folder gcsfuse allows (Orbax's commit)


def tpu_devices(accelerator_type: str) -> int | None:
  """JAX devices of a Cloud TPU slice, from its accelerator type; None if not recognised.

  v2-N and v3-N count TensorCores, one device each; v4-N and v5p-N count TensorCores too, but
  two make one device (megacore), so N/2; v5litepod-N, v5e-N and v6e-N count chips, one device
  each. (Cloud TPU docs, "TPU versions".)

  Args:
    accelerator_type: e.g. "v4-32", "v5p-64", "v5litepod-16", "v6e-8".
  """
  family, _, count = accelerator_type.lower().partition("-")
  if not count.isdigit() or int(count) < 1:
    return None
  n = int(count)
  if family in ("v2", "v3", "v5litepod", "v5e", "v6e"):
    return n
  if family in ("v4", "v5p"):
    return max(1, n // 2)
  return None


@dataclasses.dataclass(frozen=True)
class TpuOptions:
  """gcloud settings of the tpu backend (see the --tpu_* flags)."""

  name: str
  zone: str
  project: str
  accelerator_type: str
  runtime_version: str
  spot: bool
  repo: str
  git_ref: str
  code_dir: str
  jax_requirement: str
  python: str
  bucket: str
  mount: str
  chips_per_run: int = 0  # 0: each run takes the whole slice; N: packed runs (sweeps/tpu_pack.py)


def _gcloud(opts: TpuOptions, verb: str, tpu: str, *extra: str) -> str:
  """`gcloud compute tpus tpu-vm <verb> <tpu> --zone=... [--project=...] <extra>` as a line."""
  argv = ["gcloud", "compute", "tpus", "tpu-vm", verb, tpu, f"--zone={opts.zone}"]
  if opts.project:
    argv.append(f"--project={opts.project}")
  return shlex.join(argv + list(extra))


# gcsfuse from Google's apt repository, when the image lacks it (Cloud Storage FUSE docs).
GCSFUSE_INSTALL = (
    "command -v gcsfuse >/dev/null || { "
    "curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg "
    "| sudo tee /usr/share/keyrings/cloud.google.asc >/dev/null && "
    "echo \"deb [signed-by=/usr/share/keyrings/cloud.google.asc] "
    "https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -cs) main\" "
    "| sudo tee /etc/apt/sources.list.d/gcsfuse.list >/dev/null && "
    "sudo apt-get update -qq && sudo apt-get install -y -qq gcsfuse; }; ")
# uv (Astral's installer), which makes a venv with a Python the image does not have.
UV_INSTALL = ("[ -x \"$HOME/.local/bin/uv\" ] || curl -LsSf https://astral.sh/uv/install.sh "
              "| sh -s -- --quiet; ")


def tpu_setup_lines(opts: TpuOptions, tpu: str) -> list[str]:
  """Shell lines that create the TPU VM `tpu` unless it exists, then on every worker install
  gcsfuse if missing and mount the bucket (if any), put the code at `opts.git_ref` in
  `opts.code_dir` (cloned from `opts.repo`, or fetched after pointing `origin` at it) and
  install it with its `tpu` extra (jax[tpu]; plus `opts.jax_requirement` if set): into a Python
  `PYTHON_VERSION` venv made with uv (`TPU_VENV_PYTHON`; it has no pip, and needs none: the
  default corpus is fetched with the standard library, data/corpus_sources.py), or with
  `opts.python -m pip` when --python names an interpreter.

  Returns:
    Two shell lines: `gcloud ... describe || gcloud ... create`, then the `gcloud ... ssh
    --worker=all` that sets every worker up.
  """
  create = [f"--accelerator-type={opts.accelerator_type}", f"--version={opts.runtime_version}"]
  if opts.spot:
    create.append("--spot")
  code = shlex.quote(opts.code_dir)
  mount = ""
  if opts.bucket:
    m = shlex.quote(opts.mount)
    mount = (f"{GCSFUSE_INSTALL}sudo mkdir -p {m} && sudo chown \"$(id -u)\" {m}; "
             f"mountpoint -q {m} || gcsfuse --implicit-dirs "
             f"--rename-dir-limit={GCSFUSE_RENAME_DIR_LIMIT} {shlex.quote(opts.bucket)} {m}; ")
  repo = shlex.quote(opts.repo)
  code_lines = (f"if [ -d {code}/.git ]; then git -C {code} remote set-url origin {repo} && "
                f"git -C {code} fetch --quiet origin; else git clone --quiet {repo} {code}; fi; "
                f"git -C {code} checkout --quiet --detach {shlex.quote(opts.git_ref)}; ")
  # the code with its `tpu` extra (jax[tpu]), and --jax_requirement if given
  what = shlex.join(["-e", ".[tpu]"] + ([opts.jax_requirement] if opts.jax_requirement else []))
  if opts.python == TPU_VENV_PYTHON:
    uv = '"$HOME/.local/bin/uv"'
    install = (f"{UV_INSTALL}cd {code} && {{ [ -x {TPU_VENV_PYTHON} ] || {uv} venv --quiet "
               f"--python {PYTHON_VERSION} .venv; }} && {uv} pip install --quiet "
               f"--python {TPU_VENV_PYTHON} {what}")
  else:
    install = f"cd {code} && {shlex.quote(opts.python)} -m pip install --quiet {what}"
  remote = f"set -e; {mount}{code_lines}{install}"
  return [f"{_gcloud(opts, 'describe', tpu)} >/dev/null 2>&1 || {_gcloud(opts, 'create', tpu, *create)}",
          _gcloud(opts, "ssh", tpu, "--worker=all", f"--command={remote}")]


def tpu_run_steps(opts: TpuOptions, tpu: str, planned: Planned, config_arg: str,
                  slot: tpu_pack.Slot | None = None) -> list[Step]:
  """A run's commands from the code folder: on every worker of `tpu` (the whole slice), or, for
  a packed run, on its `slot`'s worker confined to the slot's chips (sweeps/tpu_pack.py)."""
  steps = []
  for step in run_steps(planned, opts.python, config_arg):
    line = step.line if slot is None else tpu_pack.packed_line(step.line, slot, step.label)
    remote = f"cd {shlex.quote(opts.code_dir)} && {line}"
    worker = "--worker=all" if slot is None else f"--worker={slot.worker}"
    line = _gcloud(opts, "ssh", tpu, worker, f"--command={remote}")
    steps.append(Step(step.label, ("bash", "-c", line), line, step.results))
  return steps


def launch_tpu(study: Study, planned: Sequence[Planned], opts: TpuOptions, *, parallel: int,
               dry_run: bool, log_root: str) -> list[Outcome]:
  """Runs (or, dry, prints) the pending runs on `parallel` TPU VMs: one run at a time on each
  whole slice, or, with `opts.chips_per_run`, one run at a time on each slot of
  `opts.chips_per_run` chips of every worker (sweeps/tpu_pack.py), side by side."""
  config_arg = study.config_arg()
  todo = [p for p in planned if p.pending]
  tpus = [opts.name] if parallel == 1 else [f"{opts.name}-{i}" for i in range(parallel)]
  lanes = [(tpu, slot) for tpu in tpus for slot in (
      tpu_pack.slots(opts.accelerator_type, opts.chips_per_run) if opts.chips_per_run
      else [None])]
  assigned = {i: todo[i::len(lanes)] for i in range(len(lanes))}
  if dry_run:
    for tpu in tpus:
      print(f"# TPU {tpu}: create unless it exists, fetch the code, install (every worker)")
      for line in tpu_setup_lines(opts, tpu):
        print(line)
      mine = [i for i, (t, _) in enumerate(lanes) if t == tpu]
      if opts.chips_per_run:
        print(f"# TPU {tpu}: {len(mine)} runs side by side, {opts.chips_per_run} chip(s) each "
              f"(--tpu_chips_per_run), one at a time per slot")
      for i in mine:
        slot = lanes[i][1]
        for p in assigned[i]:
          print(f"# run {p.run.name} on {tpu}" + (f" ({slot.describe()})" if slot else "")
                + (f" ({p.state.describe()})" if p.state else ""))
          for step in tpu_run_steps(opts, tpu, p, config_arg, slot):
            print(step.line)
    return []
  lock = threading.Lock()
  results: list[Outcome] = []
  from tqdm import tqdm
  bar = tqdm(total=len(todo), desc=study.name, unit="run", dynamic_ncols=True)

  def setup(tpu: str) -> Outcome:
    steps = [Step("setup", ("bash", "-c", line), line) for line in tpu_setup_lines(opts, tpu)]
    return execute(f"setup {tpu}", steps, os.path.join(log_root, study.name, f"_setup_{tpu}.log"))

  def lane(i: int, ready: Outcome) -> None:
    tpu, slot = lanes[i]
    for p in assigned[i]:
      if ready.status != "ok":
        done = Outcome(p.run.name, "failed", 0.0, f"TPU {tpu} setup failed: {ready.detail}",
                       ready.log)
      else:
        steps = tpu_run_steps(opts, tpu, p, config_arg, slot)
        done = execute(p.run.name, steps, os.path.join(log_root, study.name, f"{p.run.name}.log"),
                       result_checker(p, steps))
      with lock:
        results.append(done)
        bar.write(f"{done.status:>9}  {done.run}  ({duration(done.seconds)})")
        bar.update(1)

  with concurrent.futures.ThreadPoolExecutor(max_workers=len(tpus)) as pool:
    ready = dict(zip(tpus, pool.map(setup, tpus)))
  with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes)) as pool:
    for future in [pool.submit(lane, i, ready[lanes[i][0]]) for i in range(len(lanes))]:
      future.result()
  bar.close()
  order = {p.run.name: i for i, p in enumerate(todo)}
  return sorted(results, key=lambda o: order[o.run])


def is_remote_git_url(repo: str) -> bool:
  """True for a git URL another machine can clone: scheme://... or scp-like user@host:path."""
  if "://" in repo:
    return not repo.startswith("file://")
  head, sep, _ = repo.partition(":")
  return bool(sep) and "@" in head and "/" not in head


def tpu_state_root(opts: TpuOptions, root: str) -> str:
  """--root (a path on the workers) as this machine reads it: through gs:// when it lies in the
  mounted bucket, else the same path (a shared file system mounted here too).

  Raises:
    LaunchError: a bucket is given and --root is not under its mount.
  """
  if not opts.bucket:
    return root
  rel = os.path.relpath(root, opts.mount)
  if rel.startswith(".."):
    raise LaunchError(f"--root={root} must lie under --tpu_mount={opts.mount}, where the workers "
                      f"mount gs://{opts.bucket}")
  return f"gs://{opts.bucket}" + ("" if rel == "." else f"/{rel}")
