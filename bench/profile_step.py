"""Where our training step's time goes: a `jax.profiler` trace of the real step, read back op by
op and mapped to XLA's compiled program and to our source lines.

  python bench/profile_step.py                                   # default shape, alibi
  python bench/profile_step.py --shape=long --scheme=rope --top=30
  XLA_FLAGS=--xla_force_host_platform_device_count=2 python bench/profile_step.py --devices=2

It builds the step of bench/our_step.py (`train.make_step_fn` at one of the bench shapes, random
tokens), runs `--warmup` steps, times `--steps` steps without the profiler (the wall ms/step
printed first), then traces `--steps` more with `jax.profiler.trace(create_perfetto_trace=True)`
into `--trace_dir` (open it in Perfetto or TensorBoard's profile plugin for the timeline).

From the trace it sums, per step, the time of every executed XLA op (on CPU, each "thunk" of
XLA:CPU's runtime; on GPU, each kernel's host-side launch op), finds the op's instruction in the
compiled HLO (`jit(...).lower().compile().as_text()`) and prints two tables:
  - by kind: batched matmul (a dot with batch dimensions: attention's q k^T, p v and their
    gradients), 2-D matmul (projections, MLP, output head), transpose/copy, reduction and
    elementwise fusions, other (custom calls, loops, collectives);
  - the `--top` ops by the JAX operation and source line that emitted them (the HLO's `op_name`
    metadata and innermost stack frame, e.g. `jvp(bhqd,bhkd->bhqk)` at models/attention.py:110).
Op times are summed over threads: XLA:CPU runs independent ops side by side, so the total can
exceed the wall time of a step, and an op's time includes any wait for a core.

Milliseconds per step (the profiled steps' total / `--steps`). Slow by design (a compile, then
2 x `--steps` steps); figures go in bench/RESULTS.md with the machine and date.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import gzip
import json
import os
import platform
import re
import statistics
import tempfile
import time

import jax
from absl import flags

from our_step import SHAPES, Ours, check_devices, refuse  # first: puts the repo root on sys.path
from models import positions
from runs import command_line, distributed, startup

FLAGS = flags.FLAGS
flags.DEFINE_enum("shape", "default", list(SHAPES), "bench shape (bench/our_step.py)")
flags.DEFINE_enum("scheme", "alibi", list(positions.REGISTRY), "model.position.kind of our model")
flags.DEFINE_integer("steps", 5, "steps timed, then as many profiled")
flags.DEFINE_integer("warmup", 3, "untimed steps first (compilation, allocator warm-up)")
flags.DEFINE_integer("devices", 1, "JAX devices, data-parallel (on CPU: start with "
                     "XLA_FLAGS=--xla_force_host_platform_device_count=N)")
flags.DEFINE_integer("top", 25, "rows of the table by operation and source line")
flags.DEFINE_string("trace_dir", "", "where the trace is written (default: a new temporary "
                    "folder, printed)")

KINDS = ("batched matmul", "2-D matmul", "transpose/copy", "reduction", "elementwise", "other")


@dataclasses.dataclass(frozen=True)
class Op:
  """One instruction of the compiled program: `kind` (one of KINDS), `opcode` (HLO's, e.g.
  "fusion"), `op_name` (the JAX operation from the HLO metadata, e.g.
  "jit(f)/jvp(bhqd,bhkd->bhqk)/dot_general"; XLA joins several into "jit(f)/(a:b:...)" when it
  combines ops) and `source` ("path:line" of its innermost stack frame; "" when the metadata has
  none or the op combines several)."""

  kind: str
  opcode: str
  op_name: str
  source: str

  @property
  def operation(self) -> str:
    """op_name without its "jit(...)/" scope; for combined ops, the opcode and their count."""
    name = re.sub(r"^jit\([^)]*\)/", "", self.op_name)
    if name.startswith("("):
      return f"{self.opcode} of {name.count(':') + 1} combined operations"
    return name or self.opcode


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


_ELEMENTWISE = frozenset((  # HLO opcodes of elementwise arithmetic (an op outside a fusion)
    "add subtract multiply divide negate abs exponential log tanh logistic sqrt rsqrt power "
    "maximum minimum compare select clamp convert broadcast and or not xor").split())


def _opcode(rhs: str) -> str:
  """The opcode of an instruction's right-hand side "TYPE opcode(operands), attributes", where
  TYPE may be a tuple "(f32[2]{0}, /*index=1*/s32[])"; "?" if it cannot be read."""
  rest, depth = rhs.lstrip(), 0
  if rest.startswith("("):
    for i, ch in enumerate(rest):
      depth += {"(": 1, ")": -1}.get(ch, 0)
      if depth == 0:
        rest = rest[i + 1:]
        break
  else:
    rest = rest.split(None, 1)[1] if " " in rest else ""
  m = re.match(r"\s*([a-z][\w\-]*)\(", rest)
  return m.group(1) if m else "?"


def _frames(lines: list[str]) -> dict[int, str]:
  """{stack frame id: "file:line"} from the FileNames / FileLocations / StackFrames tables that
  `as_text()` prints before the computations (empty when absent)."""
  tables, section = collections.defaultdict(dict), None
  for line in lines:
    if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
      section = line
      continue
    m = re.match(r"^(\d+) (.*)$", line)
    if section and m:
      tables[section][int(m.group(1))] = m.group(2)
    elif line.strip():  # any other line ends a table
      section = None
  files = {i: v.strip('"') for i, v in tables["FileNames"].items()}
  locations = {}
  for i, v in tables["FileLocations"].items():
    f, n = re.search(r"file_name_id=(\d+)", v), re.search(r"\bline=(\d+)", v)
    if f and n:
      locations[i] = f"{files.get(int(f.group(1)), '?')}:{n.group(1)}"
  frames = {}
  for i, v in tables["StackFrames"].items():
    loc = re.search(r"file_location_id=(\d+)", v)
    if loc and int(loc.group(1)) in locations:
      frames[i] = locations[int(loc.group(1))]
  return frames


def parse_hlo(text: str, root: str = "") -> dict[str, Op]:
  """{instruction name: Op} for every instruction of a compiled HLO module's text.

  Args:
    text: `compiled.as_text()`; root: a path prefix stripped from source files (the repo root).

  An instruction's kind comes from its opcode, or for a fusion from the instructions of the
  computation it calls: a `dot` with `lhs_batch_dims` is a batched matmul, any other dot a 2-D
  matmul (whatever else the fusion does); a fusion (or op) that transposes or copies is
  transpose/copy, one that reduces a reduction, any other fusion (or arithmetic op)
  elementwise; everything else (custom calls, loops, collectives, ...) other.
  """
  lines = text.splitlines()
  frames = _frames(lines)
  bodies, instructions, current = collections.defaultdict(list), {}, None
  for line in lines:
    c = _COMPUTATION.match(line)
    if c and not line[:1].isspace():  # a computation's header; its instructions are indented
      current = c.group(1)
      continue
    m = _INSTRUCTION.match(line)
    if m and current is not None:
      bodies[current].append(m.group(2))
      instructions[m.group(1)] = m.group(2)

  def opcodes(rhs: str, seen: frozenset = frozenset()) -> list[tuple[str, str]]:
    """(opcode, text) of this instruction and, for a fusion or call, of every instruction of
    the computations it calls (each computation once per path)."""
    codes = [(_opcode(rhs), rhs)]
    called = re.search(r"calls=%?([\w.\-]+)", rhs)
    if called and called.group(1) not in seen:
      for inner in bodies.get(called.group(1), []):
        codes += opcodes(inner, seen | {called.group(1)})
    return codes

  ops = {}
  for name, rhs in instructions.items():
    codes = opcodes(rhs)
    names = {c for c, _ in codes}
    if "dot" in names:
      batched = any(c == "dot" and "lhs_batch_dims" in r for c, r in codes)
      kind = "batched matmul" if batched else "2-D matmul"
    elif names & {"transpose", "copy"}:
      kind = "transpose/copy"
    elif names & {"reduce", "reduce-window"}:
      kind = "reduction"
    elif codes[0][0] == "fusion" or names <= _ELEMENTWISE:
      kind = "elementwise"
    else:
      kind = "other"
    op_name = re.search(r'op_name="([^"]*)"', rhs)
    frame = re.search(r"stack_frame_id=(\d+)", rhs)
    combined = op_name is not None and ":" in op_name.group(1) and "/(" in op_name.group(1)
    source = frames.get(int(frame.group(1)), "") if frame and not combined else ""
    if root and source.startswith(root):
      source = source[len(root):].lstrip("/")
    ops[name] = Op(kind, codes[0][0], op_name.group(1) if op_name else "", source)
  return ops


def trace_times(trace_dir: str) -> dict[str, tuple[float, int]]:
  """{event name: (total microseconds, count)} of the complete events of the newest perfetto
  trace (`perfetto_trace.json.gz`) under `trace_dir`.

  Raises:
    FileNotFoundError: no such trace (jax.profiler writes it with create_perfetto_trace=True).
  """
  paths = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)
  if not paths:
    raise FileNotFoundError(f"no perfetto_trace.json.gz under {trace_dir}")
  with gzip.open(max(paths, key=os.path.getmtime), "rt") as f:
    trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  totals = collections.defaultdict(lambda: [0.0, 0])
  for e in events:
    if e.get("ph") == "X" and "dur" in e:
      totals[e["name"]][0] += float(e["dur"])
      totals[e["name"]][1] += 1
  return {k: (t, n) for k, (t, n) in totals.items()}


def breakdown(ops: dict[str, Op], times: dict[str, tuple[float, int]], steps: int):
  """(by kind, by operation): milliseconds and op executions per step of the trace events that
  are instructions of `ops` (other events: runtime bookkeeping, Python, ignored).

  Returns:
    {kind: (ms, count)} over KINDS (zeros included), and {(kind, operation, source): (ms,
    count)} with `Op.operation`.
  """
  kinds = {k: [0.0, 0] for k in KINDS}
  by_op = collections.defaultdict(lambda: [0.0, 0])
  for name, (us, n) in times.items():
    op = ops.get(name)
    if op is None:
      continue
    kinds[op.kind][0] += us / 1e3 / steps
    kinds[op.kind][1] += n / steps
    row = by_op[(op.kind, op.operation, op.source)]
    row[0] += us / 1e3 / steps
    row[1] += n / steps
  return ({k: tuple(v) for k, v in kinds.items()}, {k: tuple(v) for k, v in by_op.items()})


def main(argv):
  """Times, profiles and prints where the step's time goes; exit 2 with one line on a bad flag."""
  del argv
  distributed.quiet_library_logs()  # no INFO lines (libtpu) before a refusal
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  for name, least in (("steps", 1), ("warmup", 0), ("top", 1)):
    if getattr(FLAGS, name) < least:
      refuse(f"--{name} takes an integer >= {least}; got {getattr(FLAGS, name)}")
  if FLAGS.trace_dir:  # the trace is written there after the timing: checked first
    command_line.check_writable(FLAGS.trace_dir, "--trace_dir")
  reason = check_devices(FLAGS.devices, [FLAGS.shape])
  if reason:
    refuse(reason)
  ours = Ours(FLAGS.shape, FLAGS.scheme, FLAGS.devices)
  for _ in range(FLAGS.warmup):
    ours.step()
  wall = statistics.median(ours.step() for _ in range(FLAGS.steps))
  trace_dir = FLAGS.trace_dir or tempfile.mkdtemp(prefix="profile_step_")
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    for _ in range(FLAGS.steps):
      ours.step()
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  ops = parse_hlo(ours.step_fn.lower(ours.state, ours.batch).compile().as_text(), root)
  kinds, by_op = breakdown(ops, trace_times(trace_dir), FLAGS.steps)
  total = sum(ms for ms, _ in kinds.values())
  d_model, heads, mlp, batch, seq = SHAPES[FLAGS.shape]
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{time.strftime('%Y-%m-%d')}; jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"{FLAGS.devices} device(s)")
  print(f"# {FLAGS.shape}: d_model {d_model}, {heads} heads, mlp {mlp}, batch {batch} x {seq}; "
        f"`{FLAGS.scheme}`; wall {1e3 * wall:.1f} ms/step (median of {FLAGS.steps}); trace: "
        f"{trace_dir}")
  print(f"# op time summed over threads: {total:.1f} ms/step "
        f"({total / (1e3 * wall):.2f}x the wall time)\n")
  print("| kind | ms/step | share | ops/step |\n|---|---|---|---|")
  for kind, (ms, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
    if n:
      print(f"| {kind} | {ms:.1f} | {100 * ms / max(total, 1e-9):.0f}% | {n:.0f} |")
  print("\n| operation | source | kind | ms/step | ops/step |\n|---|---|---|---|---|")
  for (kind, operation, source), (ms, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[
      :FLAGS.top]:
    print(f"| `{operation}` | {source or '-'} | {kind} | {ms:.2f} | {n:.0f} |")


if __name__ == "__main__":
  command_line.run(main, usage="python bench/profile_step.py [--shape=default] [--scheme=alibi] "
                   "[--steps=N] [--trace_dir=DIR]")
