"""The launch pre-flight of `--backend=tpu`: every distinct run shape of a study compiled for the
accelerator type, on this machine, before any `gcloud` command (bench/tpu_compile.py).

A study's runs differ in many fields; only some change the compiled training step: the model,
the sequence length, the batch and its microbatches, the mesh, the dtypes (`SHAPE_FIELDS`), and
for the evaluation program the evaluation lengths and batch. Runs that agree on those share one
compilation. For each shape, the run's resolved config is written as a run folder's config.json
to a temporary folder and `python -m bench.tpu_compile --run_config=<folder> --topology=<t>
--json=<file>` compiles it in a child process (libtpu loads there, not in the launcher); the
topology is the slice's (`--tpu_accelerator_type`), or one slot's with `--tpu_chips_per_run`
(sweeps/tpu_pack.py). Runs whose step does not fit the chip's HBM are refused, with their
numbers; `--dry-run` prints the table and refuses nothing.

GPUs (`--backend=slurm`) get no such check: XLA has no compile-only CUDA devices, so a GPU
program can be compiled only on a GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from typing import Sequence

from configs.errors import ConfigError, flatten
from runs.files import write_json

# Dotted config prefixes that change the compiled training or evaluation program.
SHAPE_FIELDS = ("model.", "mesh.", "data.train_len", "data.batch_size", "data.tokenizer",
                "train.grad_accum_steps", "train.skip_nonfinite_batches", "eval.length_multipliers",
                "eval.batch_tokens")
GENERATIONS = {"v4": "v4", "v5p": "v5p", "v5litepod": "v5e", "v5e": "v5e", "v6e": "v6e"}
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def topology_name(accelerator_type: str, chips_per_run: int = 0) -> str:
  """The libtpu topology ("v5e:4x4") of a Cloud TPU accelerator type's slice ("v5litepod-16"),
  or of `chips_per_run` chips of it.

  Chips: v4-N and v5p-N count TensorCores, two per chip; v5litepod/v5e/v6e-N count chips. The
  shape is the slice's smallest box of that many chips (v5e/v6e: 2-D, e.g. 8 -> 2x4; v4/v5p:
  3-D, e.g. 8 -> 2x2x2), as Cloud TPU lays them out.

  Raises:
    ConfigError: a family the TPU compiler here does not describe (v2, v3, unknown), or a chip
      count that is not a power of two.
  """
  family, _, count = accelerator_type.lower().partition("-")
  if family not in GENERATIONS or not count.isdigit() or int(count) < 1:
    raise ConfigError(f"--tpu_accelerator_type={accelerator_type}: the compile check knows "
                      f"{sorted(GENERATIONS)}-<size> (v2 and v3 are not described by libtpu)")
  generation = GENERATIONS[family]
  chips = chips_per_run or (int(count) // 2 if generation in ("v4", "v5p") else int(count))
  chips = max(1, chips)
  if chips & (chips - 1):
    raise ConfigError(f"--tpu_accelerator_type={accelerator_type}: {chips} chips is not a power "
                      "of two, not a slice shape the compile check can form")
  if generation in ("v4", "v5p"):  # 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, ...
    dims = [1, 1, 1] if chips == 1 else [1, 2, 1] if chips == 2 else [2, 2, 1]
    while dims[0] * dims[1] * dims[2] < chips:
      low = min(dims)
      dims[max(i for i, d in enumerate(dims) if d == low)] *= 2
  else:  # 1x1, 1x2, 2x2, 2x4, 4x4, 4x8, ...
    dims = [1, 1]
    while dims[0] * dims[1] < chips:
      dims[dims.index(min(dims))] *= 2
    dims.sort()
  return f"{generation}:{'x'.join(str(d) for d in dims)}"


def shape_key(config) -> str:
  """A digest of the fields of `config` that change the compiled programs (SHAPE_FIELDS)."""
  flat = flatten(config.to_dict())
  chosen = {k: v for k, v in flat.items() if any(k == f or k.startswith(f) for f in SHAPE_FIELDS)}
  return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class ShapeCheck:
  """One distinct run shape's compile check.

  Attributes:
    runs: the runs of that shape.
    report: bench/tpu_compile.py's report (None when the compilation failed: `error`).
    error: the last line the compile check printed when it failed.
  """

  runs: tuple[str, ...]
  report: dict | None
  error: str = ""

  @property
  def fits(self) -> bool:
    return self.report is not None and all(
        self.report[p]["fits"] for p in ("train", "eval") if p in self.report)


def check_shapes(runs: Sequence, topology: str, python: str = sys.executable) -> list[ShapeCheck]:
  """Compiles each distinct shape of `runs` (sweeps.run_plan.Run, their resolved configs) for
  `topology` in a child process; one ShapeCheck per shape, in the runs' order."""
  groups: dict[str, list] = {}
  for run in runs:
    groups.setdefault(shape_key(run.config), []).append(run)
  checks = []
  with tempfile.TemporaryDirectory(prefix="tpu_preflight_") as tmp:
    for n, (key, members) in enumerate(groups.items()):
      folder = os.path.join(tmp, key)
      os.makedirs(folder)
      write_json(os.path.join(folder, "config.json"), {"config": members[0].config.to_dict()})
      out = os.path.join(tmp, f"{key}.report.json")
      print(f"# compile check {n + 1}/{len(groups)} for {topology}: {members[0].name}"
            + (f" and {len(members) - 1} more of its shape" if len(members) > 1 else ""),
            flush=True)
      done = subprocess.run(
          [python, "-m", "bench.tpu_compile", f"--run_config={folder}", f"--topology={topology}",
           f"--json={out}"], cwd=REPO_ROOT, capture_output=True, text=True,
          env={**os.environ, "JAX_PLATFORMS": "cpu"})
      names = tuple(r.name for r in members)
      if os.path.exists(out):
        with open(out) as f:
          checks.append(ShapeCheck(names, json.load(f)))
      else:
        lines = [x for x in (done.stderr + done.stdout).strip().splitlines() if x.strip()]
        checks.append(ShapeCheck(names, None, lines[-1] if lines else f"exit {done.returncode}"))
  return checks


def table(checks: Sequence[ShapeCheck], topology: str) -> list[str]:
  """The pre-flight's table (markdown): one row per shape, per-chip figures."""
  out = [f"# compile check for {topology} (bench/tpu_compile.py; per chip; step time and MFU "
         "are roofline ESTIMATES, not measurements)",
         "| runs | train step GiB | eval GiB | HBM GiB | fits | Mosaic kernels | est. step ms | "
         "est. MFU | compile s |", "|---|---|---|---|---|---|---|---|---|"]
  for c in checks:
    runs = c.runs[0] + (f" (+{len(c.runs) - 1})" if len(c.runs) > 1 else "")
    if c.report is None:
      out.append(f"| {runs} | failed: {c.error[:200]} | | | NO | | | | |")
      continue
    r, gib = c.report, 2 ** 30
    t, e = r["train"], r.get("eval")
    if t.get("error") or (e and e.get("error")):
      out.append(f"| {runs} | refused by the TPU compiler: "
                 f"{(t.get('error') or e.get('error'))[:200]} | | "
                 f"{r['hbm_per_chip_bytes'] / gib:.0f} | NO | | | | |")
      continue
    out.append(
        f"| {runs} | {t['memory']['total'] / gib:.2f} | "
        f"{(e['memory']['total'] / gib) if e else float('nan'):.2f} | "
        f"{r['hbm_per_chip_bytes'] / gib:.0f} | {'yes' if c.fits else 'NO'} | "
        f"{t['mosaic_kernels']} | {t['estimate']['step_s'] * 1e3:.1f} | "
        f"{t['estimate']['mfu']:.0%} | {t['compile_s'] + (e['compile_s'] if e else 0):.0f} |")
  return out


def _shortfall(check: ShapeCheck) -> str:
  """What a shape lacks, in words: the program and its need against the chip's HBM."""
  if check.report is None:
    return check.error[:200]
  gib, hbm = 2 ** 30, check.report["hbm_per_chip_bytes"]
  for name in ("train", "eval"):
    p = check.report.get(name)
    if p is None or p["fits"]:
      continue
    need = p["memory"]["total"] / gib if p.get("memory") else float("nan")
    return (f"the {name} step needs {'over ' if p.get('error') else ''}{need:.2f} GiB per chip "
            f"of {hbm / gib:.0f}")
  return "?"


def refuse_unfit(checks: Sequence[ShapeCheck], topology: str) -> None:
  """Raises ConfigError naming the runs that do not fit (or did not compile) on `topology`."""
  bad = [c for c in checks if not c.fits]
  if not bad:
    return
  gib = 2 ** 30
  parts = [f"{', '.join(c.runs[:3])}{' ...' if len(c.runs) > 3 else ''}: " + _shortfall(c)
           for c in bad]
  raise ConfigError(f"--backend=tpu: {len(bad)} run shape(s) do not fit or do not compile for "
                    f"{topology}: " + "; ".join(parts) + " (lower data.batch_size, raise "
                    "train.grad_accum_steps or model.remat, or use a larger slice)")
