"""Training throughput, step-time breakdown and MFU on this machine.

  python bench/train_throughput.py                       # tiny and d512, 20 timed steps each
  python bench/train_throughput.py --configs=d512 --steps=40 --prefetch=0,4
  python bench/train_throughput.py --configs=tiny --kinds=alibi,rope,dape,fope,pope --steps=10
  python bench/train_throughput.py --configs=tiny,llama_tiny --kinds=alibi,rope --steps=20

For each model it builds the real training step of train.py (`train.make_step_fn`: the same
jit, shardings, optimizer and loss) on the real data pipeline of its config, and reports:

  - tokens/s and step time of the loop as train.py runs it (batches from the grain iterator,
    put on the devices, the step dispatched, no host sync until the end): `loop ms`;
  - the parts measured one at a time: `data ms` (next() of the grain iterator), `put ms`
    (host -> device), `compute ms` (one step, blocked on); the loop never waits on the host
    when `loop ms` ~= `compute ms`;
  - MFU = analytic training FLOPs per step / step time / the dense float32 matmul rate of this
    machine measured in the same run (`specs.measure_peak_flops`, a 2048^3 matmul, best of 5).
    FLOPs: `specs.train_flops_per_token` = 6 x matmul parameters (q/k/v/o, MLP, output head) +
    attention scores and values counted as half (causal) x 3 (forward + backward); embedding
    lookups count 0 (the PaLM convention, arXiv 2204.02311, App. B, with the causal half).

Models (ALiBi, byte vocabulary, train_len 256, float32): `tiny` = configs/alibi_tiny.py
(4 layers, d_model 128, batch 16); `d512` = 4 layers, d_model 512, 8 heads, mlp_dim 2048,
batch 8; `llama_tiny` = configs/llama_tiny.py (alibi_tiny's budget with SwiGLU, an untied head
and grouped-query attention, 4 query / 2 KV heads). `--prefetch` sweeps data.prefetch_batches (grain's background read-ahead, batches).
Slow by design (minutes): it lives here, not in the tests. Results go in bench/RESULTS.md with
the machine they were measured on.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from absl import flags  # noqa: E402

from runs import optimizer, startup  # noqa: E402
import train  # noqa: E402
from configs import alibi_tiny, llama_tiny  # noqa: E402
from data import pipeline  # noqa: E402
from data.tokenizers import get_tokenizer  # noqa: E402
from models import sharding  # noqa: E402
from data import inputs as data_inputs
from models import spec as specs
from our_step import refuse
from runs import command_line, distributed

FLAGS = flags.FLAGS
flags.DEFINE_list("configs", ["tiny", "d512"], "models to measure: tiny, d512, llama_tiny")
flags.DEFINE_list("kinds", ["alibi"], "model.position.kind values to measure on each model "
                  "(the registry's kinds; alibi is the configs' own)")
flags.DEFINE_integer("steps", 20, "timed steps per measurement (after 3 warm-up steps)")
flags.DEFINE_list("prefetch", ["4"], "data.prefetch_batches values to measure; 'grain' = "
                  "grain's default read options (16 threads, 500 batches ahead)")


def model_config(name: str, kind: str = "alibi"):
  """The benchmark's config `name` (module docstring) with positional scheme `kind`."""
  from models import positions
  if kind not in positions.REGISTRY:
    refuse(f"--kinds: unknown scheme {kind!r}; choose from {sorted(positions.REGISTRY)}")
  c = llama_tiny.get_config() if name == "llama_tiny" else alibi_tiny.get_config()
  c.model.position.kind = kind
  if name == "d512":
    c.model.d_model, c.model.num_heads, c.model.mlp_dim = 512, 8, 2048
    c.data.batch_size = 8
  elif name not in ("tiny", "llama_tiny"):
    refuse(f"--configs: unknown model {name!r}; choose tiny, d512 or llama_tiny")
  return c


def measure(config, steps: int, peak: float, prefetch: int | None) -> dict:
  """One row of the table for `config` with `prefetch` batches read ahead (module docstring)."""
  devices = jax.devices()
  mesh = sharding.make_mesh(config.mesh, devices)
  spec = specs.model_spec(config, mesh)
  tokenizer = get_tokenizer(config.data.tokenizer)
  docs = data_inputs.load_splits(config)
  data = iter(pipeline.train_dataset(
      docs["train"], tokenizer, train_len=config.data.train_len,
      batch_size=config.data.batch_size, seed=0, prefetch=prefetch))
  tx = optimizer.make_optimizer(config.train)
  shardings, _ = train.state_shardings(tx, spec, mesh)
  state = train.initial_state(config, spec, tx, shardings)
  step_fn = train.make_step_fn(config, spec, tx, shardings, mesh, tokenizer.pad_id)
  batch_sharding = sharding.batch_sharding(mesh)

  def put(batch):
    return {k: jax.make_array_from_process_local_data(batch_sharding, v)
            for k, v in batch.items()}

  for _ in range(3):  # compile and warm up
    state, metrics = step_fn(state, put(next(data)))
  jax.block_until_ready(metrics)

  t0 = time.perf_counter()  # the loop as train.py runs it: no host sync until the end
  for _ in range(steps):
    state, metrics = step_fn(state, put(next(data)))
  jax.block_until_ready((state, metrics))
  loop = (time.perf_counter() - t0) / steps

  data_s, put_s, compute_s = [], [], []
  for _ in range(steps):
    t0 = time.perf_counter()
    host = next(data)
    t1 = time.perf_counter()
    batch = jax.block_until_ready(put(host))
    t2 = time.perf_counter()
    state, metrics = step_fn(state, batch)
    jax.block_until_ready((state, metrics))
    t3 = time.perf_counter()
    data_s.append(t1 - t0)
    put_s.append(t2 - t1)
    compute_s.append(t3 - t2)
  tokens = config.data.batch_size * config.data.train_len
  flops = specs.train_flops_per_token(config) * tokens
  return {"params": spec.num_params, "tokens": tokens, "loop_ms": 1e3 * loop,
          "data_ms": 1e3 * statistics.median(data_s), "put_ms": 1e3 * statistics.median(put_s),
          "compute_ms": 1e3 * statistics.median(compute_s), "tokens_per_s": tokens / loop,
          "gflop_per_step": flops / 1e9, "mfu": flops / loop / (peak * len(jax.devices()))}


def check_flags() -> None:
  """The first bad flag, refused in one line before anything runs (`our_step.refuse`)."""
  if FLAGS.steps < 1:
    refuse(f"--steps takes a positive integer; got {FLAGS.steps}")
  bad = [p for p in FLAGS.prefetch if p != "grain" and not p.isdigit()]
  if bad or not FLAGS.prefetch:
    refuse(f"--prefetch takes integers >= 0 or 'grain'; got {FLAGS.prefetch}")
  if not FLAGS.configs or not FLAGS.kinds:
    refuse("--configs and --kinds take non-empty lists")
  for name in FLAGS.configs:
    for kind in FLAGS.kinds:
      model_config(name, kind)  # refuses an unknown model or scheme


def main(argv):
  """Prints the throughput table (see the module docstring); exit 2 with one line on a bad flag."""
  del argv
  distributed.quiet_library_logs()
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  check_flags()
  peak = specs.measure_peak_flops()
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"jax {jax.__version__}, {jax.devices()[0].platform} x {jax.device_count()}; "
        f"dense 2048^3 float32 matmul: {peak / 1e9:.1f} GFLOP/s per device")
  print("| model | scheme | params | tokens/step | prefetch | loop ms | data ms | put ms | "
        "compute ms | tokens/s | GFLOP/step | MFU |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|")
  for name in FLAGS.configs:
    for kind in FLAGS.kinds:
      for prefetch in FLAGS.prefetch:
        config = model_config(name, kind)
        r = measure(config, FLAGS.steps, peak, None if prefetch == "grain" else int(prefetch))
        print(f"| {name} | {kind} | {r['params']:,} | {r['tokens']} | {prefetch} | "
              f"{r['loop_ms']:.1f} | "
              f"{r['data_ms']:.2f} | {r['put_ms']:.2f} | {r['compute_ms']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {r['gflop_per_step']:.2f} | {100 * r['mfu']:.1f}% |",
              flush=True)


if __name__ == "__main__":
  command_line.run(main, usage="python bench/train_throughput.py [--configs=tiny,d512] "
                   "[--kinds=alibi] [--steps=N] [--prefetch=4,grain]")
