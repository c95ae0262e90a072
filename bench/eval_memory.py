"""Memory and time of perplexity evaluation vs length: does it grow linearly?

  python bench/eval_memory.py                                   # alibi_tiny, 1x..32x train_len
  python bench/eval_memory.py --kind=rope --multipliers=1,4,16,64

For each length L = m x train_len it compiles eval/perplexity.py's scoring function
(`make_nll_fn`, the one train.py and eval.run use) for one batch as the evaluation forms it
(eval.batch_tokens // L windows of L tokens, at least 1) and reports:

  - memory: XLA's compiled memory analysis of that call (arguments + outputs + temporaries,
    MB), and the temporaries alone; per window token, to read linear growth as a flat line;
  - time: the median wall time of scoring that batch (5 calls after a warm-up), and tokens/s.

Attention runs in query chunks of `model.attention_chunk` tokens (models/attention.py), so the
temporaries grow as O(L x chunk) per window rather than O(L^2); with a fixed token budget per
batch, memory per token should stay about flat as L grows. Random parameters (memory and time do
not depend on their values). Results go in bench/RESULTS.md with the machine.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import train  # noqa: E402
from configs import alibi_tiny  # noqa: E402
from eval import perplexity  # noqa: E402
from models import sharding  # noqa: E402
from models import spec as specs

FLAGS = flags.FLAGS
flags.DEFINE_string("kind", "alibi", "positional scheme (model.position.kind)")
flags.DEFINE_list("multipliers", ["1", "2", "4", "8", "16", "32"], "lengths, x train_len")
flags.DEFINE_integer("batch_tokens", 16384, "eval.batch_tokens: tokens per scoring batch")


def main(argv):
  del argv
  c = alibi_tiny.get_config()
  c.model.position.kind = FLAGS.kind
  c.eval.batch_tokens = FLAGS.batch_tokens
  mesh = sharding.make_mesh(c.mesh, jax.devices())
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, jax "
        f"{jax.__version__}; configs/alibi_tiny.py with kind={FLAGS.kind}, train_len "
        f"{c.data.train_len}, model.attention_chunk {c.model.attention_chunk}, batch_tokens "
        f"{c.eval.batch_tokens}")
  print("| length | x train_len | windows/batch | memory MB | temporaries MB | bytes/token | "
        "ms/batch | tokens/s |")
  print("|---|---|---|---|---|---|---|---|")
  rng = np.random.default_rng(0)
  for m in FLAGS.multipliers:
    length = int(round(float(m) * c.data.train_len))
    windows = max(1, c.eval.batch_tokens // length)
    windows = -(-windows // perplexity.batch_parallelism(mesh)) * perplexity.batch_parallelism(mesh)
    tokens = rng.integers(3, 256, size=(windows, length + 1)).astype(np.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
             "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (windows, length)),
             "segment_ids": np.ones((windows, length), np.int32),
             "weights": np.ones((windows, length), np.float32)}
    compiled = nll_fn.lower(params, batch).compile()
    mem = compiled.memory_analysis()
    total = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
             - mem.alias_size_in_bytes)
    jax.block_until_ready(compiled(params, batch))
    times = []
    for _ in range(5):
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(params, batch))
      times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    n = windows * length
    print(f"| {length} | {float(m):g} | {windows} | {total / 2**20:.1f} | "
          f"{mem.temp_size_in_bytes / 2**20:.1f} | {total / n:,.0f} | {1e3 * t:.1f} | "
          f"{n / t:,.0f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
