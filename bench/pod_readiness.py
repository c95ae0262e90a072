"""The pod-readiness table: committed configs on TPU slices, compiled here (bench/tpu_compile.py).

  JAX_PLATFORMS=cpu python -m bench.pod_readiness            # compile what is missing, render
  JAX_PLATFORMS=cpu python -m bench.pod_readiness --render   # only re-render the table

Each (config, topology) of MATRIX is compiled in its own child process (`python -m
bench.tpu_compile ... --json=bench/tpu_compile_reports/<name>.json`); a JSON already there is
kept, so an interrupted run resumes. The markdown table between the markers of docs/pod_readiness.md
is then rendered from the committed JSONs alone (`render`), and tests/test_pod_readiness.py
checks that the page's table is that rendering.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402

from runs import command_line  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "tpu_compile_reports")
PAGE = os.path.join(ROOT, "docs", "pod_readiness.md")
BEGIN, END = "<!-- pod-readiness table: begin -->", "<!-- pod-readiness table: end -->"

# (name, --config, overrides): the configs and presets a pod would train. The presets take
# configs/alibi_tiny.py's data and batch (16 x 256 tokens); the 350M config its own (256 x 1,024,
# 16 microbatches).
CONFIGS = [
    ("alibi_350m_xla", "configs/alibi_350m.py", []),
    ("alibi_350m_pallas", "configs/alibi_350m.py", ["--config.model.attention_impl=pallas"]),
    ("smollm2_135m", "configs/presets.py:smollm2_135m", []),
    ("qwen2_5_0_5b", "configs/presets.py:qwen2_5_0_5b", []),
]
TOPOLOGIES = ["v4:2x2x1", "v5e:4x4", "v5p:2x2x1", "v6e:2x4"]  # v4-8, v5e-16, v5p-8, v6e-8
# (config name, topology) compiled: the 350M config with the fused kernel on every slice, with
# XLA's attention and the presets on the v5e-16 (each 350M compile takes 3-4 min on 2 cores).
MATRIX = ([("alibi_350m_pallas", t) for t in TOPOLOGIES]
          + [(name, "v5e:4x4") for name in ("alibi_350m_xla", "smollm2_135m", "qwen2_5_0_5b")])
SLICE = {"v4:2x2x1": "v4-8", "v5e:4x4": "v5litepod-16", "v5p:2x2x1": "v5p-8", "v6e:2x4": "v6e-8"}


def result_path(name: str, topology: str) -> str:
  return os.path.join(OUT, f"{name}__{topology.replace(':', '_')}.json")


def compile_missing() -> None:
  """Compiles each (config, topology) of the matrix whose JSON is not there yet."""
  os.makedirs(OUT, exist_ok=True)
  configs = {name: (config, overrides) for name, config, overrides in CONFIGS}
  for name, topology in MATRIX:
    config, overrides = configs[name]
    path = result_path(name, topology)
    if os.path.exists(path):
      continue
    print(f"# {name} on {topology}", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench.tpu_compile", f"--config={config}", *overrides,
         f"--topology={topology}", "--noeval", f"--json={path}"], cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True)
    tail = (done.stdout + done.stderr).strip().splitlines()
    print("\n".join(tail[-8:]), flush=True)


def render(folder: str = OUT) -> list[str]:
  """The markdown table of every JSON in `folder`, in the matrix's order."""
  gib = 2 ** 30
  rows = ["| config | slice (topology) | chips | per-chip total GiB (args + temps) | of HBM | "
          "fits | compile s | all-gathers | all-reduces | reduce-scatters | est. step s | "
          "est. MFU |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  order = {key: i for i, key in enumerate(MATRIX)}
  found = []
  for path in glob.glob(os.path.join(folder, "*.json")):
    name, _, topo = os.path.basename(path).removesuffix(".json").partition("__")
    topology = topo.replace("_", ":", 1)
    with open(path) as f:
      found.append((order.get((name, topology), len(order)), name, topology, json.load(f)))
  for _, name, topology, r in sorted(found, key=lambda x: x[:3]):
    t = r["train"]
    mem, coll, est = t["memory"], t["collectives"], t["estimate"]
    if t.get("error"):
      rows.append(f"| {name} | {SLICE.get(topology, topology)} ({topology}) | {r['devices']} | "
                  f"over {mem['total'] / gib if mem else float('nan'):.2f} (temporaries) | | NO | "
                  f"{t['compile_s']:.0f} | | | | | |")
      continue
    count = lambda kind: str(coll.get(kind, {}).get("count", 0))  # noqa: E731
    rows.append(
        f"| {name} | {SLICE.get(topology, topology)} ({topology}) | {r['devices']} | "
        f"{mem['total'] / gib:.2f} ({mem['argument'] / gib:.2f} + {mem['temporary'] / gib:.2f}) "
        f"| {mem['total'] / r['hbm_per_chip_bytes']:.0%} | {'yes' if t['fits'] else 'NO'} | "
        f"{t['compile_s']:.0f} | {count('all-gather')} | {count('all-reduce')} | "
        f"{count('reduce-scatter')} | {est['step_s']:.3f} | {est['mfu']:.0%} |")
  return rows


def write_page() -> None:
  """Replaces the table between the markers of docs/pod_readiness.md with `render()`."""
  with open(PAGE) as f:
    text = f.read()
  head, _, rest = text.partition(BEGIN)
  _, _, tail = rest.partition(END)
  with open(PAGE, "w") as f:
    f.write(head + BEGIN + "\n" + "\n".join(render()) + "\n" + END + tail)


def main(argv) -> None:
  """Compiles what is missing (unless --render), then writes the page's table."""
  del argv
  if not flags.FLAGS.render:
    compile_missing()
  write_page()
  print("\n".join(render()))


if __name__ == "__main__":
  flags.DEFINE_bool("render", False, "Only re-render the table from the committed JSONs.")
  command_line.run(main, usage="JAX_PLATFORMS=cpu python -m bench.pod_readiness [--render]")
