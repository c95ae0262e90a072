"""Memory and time of perplexity evaluation vs length: does it grow linearly?

  python bench/eval_memory.py                                   # alibi_tiny, 1x..32x train_len
  python bench/eval_memory.py --kind=rope --multipliers=1,4,16,64

For each length L = m x train_len it compiles eval/perplexity.py's scoring function
(`make_nll_fn`, the one train.py and eval.run use) for one batch as the evaluation forms it
(eval.batch_tokens // L windows of L tokens, at least 1) and reports:

  - memory: XLA's compiled memory analysis of that call (arguments + outputs + temporaries,
    MB), and the temporaries alone; per window token, to read linear growth as a flat line;
  - compile: seconds to lower and compile that call, and the bytes of host constants JAX
    captured into the program while lowering it (its "constants were captured" report; the
    O(L^2) numpy masks of issue 18 showed up here);
  - time: the median wall time of scoring that batch (`--repeats` calls after a warm-up), and
    tokens/s.

Fractional multipliers give lengths that are not a multiple of the chunk (e.g. 32.4 x 256 =
8294 tokens), the case that used to unroll the chunk loop.

Attention runs in query chunks of `model.attention_chunk` tokens (models/attention.py), so the
temporaries grow as O(L x chunk) per window rather than O(L^2); with a fixed token budget per
batch, memory per token should stay about flat as L grows. Random parameters (memory and time do
not depend on their values). Results go in bench/RESULTS.md with the machine.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from configs import alibi_tiny  # noqa: E402
from eval import perplexity  # noqa: E402
from models import sharding  # noqa: E402
from models import positions  # noqa: E402
from models import spec as specs  # noqa: E402
from runs import command_line  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("kind", "alibi", list(positions.REGISTRY), "positional scheme "
                  "(model.position.kind)")
flags.DEFINE_list("multipliers", ["1", "2", "4", "8", "16", "32"], "lengths, x train_len")
flags.DEFINE_integer("batch_tokens", 16384, "eval.batch_tokens: tokens per scoring batch",
                     lower_bound=1)
flags.DEFINE_integer("attention_chunk", None, "model.attention_chunk (tokens); default: the "
                     "config's", lower_bound=1)
flags.DEFINE_integer("repeats", 5, "timed calls per length (after one warm-up); 0 = no timing",
                     lower_bound=0)

_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}


def lower_and_compile(fn, *args):
  """(compiled, seconds to lower and compile, captured constant bytes) of `fn(*args)`."""
  old = jax.config.jax_captured_constants_warn_bytes
  jax.config.update("jax_captured_constants_warn_bytes", 1)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      t0 = time.perf_counter()
      compiled = fn.lower(*args).compile()
      seconds = time.perf_counter() - t0
  finally:
    jax.config.update("jax_captured_constants_warn_bytes", old)
  captured = 0.0
  for w in caught:
    m = re.search(r"constants were captured.*?\(([\d.]+)\s*([KMGT]?B) total", str(w.message))
    if m:
      captured += float(m.group(1)) * _UNITS[m.group(2)]
  return compiled, seconds, captured


def main(argv):
  """Prints the table of evaluation memory and speed at each length."""
  del argv
  multipliers = command_line.numbers(FLAGS.multipliers, "--multipliers", float, 0)
  c = alibi_tiny.get_config()
  c.model.position.kind = FLAGS.kind
  c.eval.batch_tokens = FLAGS.batch_tokens
  if FLAGS.attention_chunk is not None:
    c.model.attention_chunk = FLAGS.attention_chunk
  mesh = sharding.make_mesh(c.mesh, jax.devices())
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, jax "
        f"{jax.__version__}; configs/alibi_tiny.py with kind={FLAGS.kind}, train_len "
        f"{c.data.train_len}, model.attention_chunk {c.model.attention_chunk}, batch_tokens "
        f"{c.eval.batch_tokens}")
  print("| length | x train_len | windows/batch | compile s | constants MB | memory MB | "
        "temporaries MB | bytes/token | ms/batch | tokens/s |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  rng = np.random.default_rng(0)
  for m in multipliers:
    length = int(round(m * c.data.train_len))
    windows = max(1, c.eval.batch_tokens // length)
    windows = -(-windows // perplexity.batch_parallelism(mesh)) * perplexity.batch_parallelism(mesh)
    tokens = rng.integers(3, 256, size=(windows, length + 1)).astype(np.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
             "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (windows, length)),
             "segment_ids": np.ones((windows, length), np.int32),
             "weights": np.ones((windows, length), np.float32)}
    compiled, compile_s, captured = lower_and_compile(nll_fn, params, batch)
    mem = compiled.memory_analysis()
    total = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
             - mem.alias_size_in_bytes)
    times = []
    if FLAGS.repeats:
      jax.block_until_ready(compiled(params, batch))
    for _ in range(FLAGS.repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(params, batch))
      times.append(time.perf_counter() - t0)
    n = windows * length
    t = statistics.median(times) if times else float("nan")
    print(f"| {length} | {float(m):g} | {windows} | {compile_s:.1f} | {captured / 2**20:.2f} | "
          f"{total / 2**20:.1f} | {mem.temp_size_in_bytes / 2**20:.1f} | {total / n:,.0f} | "
          f"{1e3 * t:.1f} | {n / t:,.0f} |", flush=True)


if __name__ == "__main__":
  command_line.run(main, usage="python bench/eval_memory.py [--kind=alibi] "
                   "[--multipliers=1,2,4] [--batch_tokens=N] [--repeats=N]")
