"""Training-step memory under each `model.remat` mode: what rematerialization saves.

  python bench/remat_memory.py                              # alibi_tiny: 4 layers, 16 x 256
  python bench/remat_memory.py --train_len=1024 --batch_size=8 --kind=rope

On XLA:CPU run it with XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false: the
default CPU scheduler orders for concurrency, schedules the recomputation early and so keeps
about as much as without remat (measured in bench/RESULTS.md); GPU and TPU schedule for memory.

For each mode ("none", "block", "full"; models/decoder.py REMAT_POLICIES) it compiles train.py's
training step ahead (`train.compile_step_fn`, the executable train.py runs) for
configs/alibi_tiny.py with the given overrides on one device and prints XLA's memory analysis of
it (runs/memory.py `Footprint`): the temporaries (activations kept for the backward pass and
scratch), the whole per-device need, and the compile time. Nothing runs, so no parameter values
matter. Results go in bench/RESULTS.md with the machine and the date.
"""

from __future__ import annotations

import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from absl import flags  # noqa: E402

import train  # noqa: E402
from configs import alibi_tiny  # noqa: E402
from configs.errors import ConfigError  # noqa: E402
from configs.validate import REMAT_MODES  # noqa: E402
from data.tokenizers import get_tokenizer  # noqa: E402
from models import sharding  # noqa: E402
from models import spec as specs  # noqa: E402
from models import positions  # noqa: E402
from runs import command_line, memory, optimizer  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("kind", "alibi", list(positions.REGISTRY), "positional scheme "
                  "(model.position.kind)")
flags.DEFINE_integer("train_len", 256, "data.train_len, tokens", lower_bound=1)
flags.DEFINE_integer("batch_size", 16, "data.batch_size, sequences", lower_bound=1)
flags.DEFINE_integer("num_layers", 4, "model.num_layers", lower_bound=1)
flags.DEFINE_integer("d_model", 128, "model.d_model (mlp_dim = 4 x d_model)", lower_bound=1)
flags.DEFINE_list("modes", ["none", "block", "full"], "model.remat modes")


def step_footprint(config) -> tuple[memory.Footprint, float]:
  """(the compiled training step's footprint on one device, compile seconds) for `config`."""
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  spec = specs.model_spec(config, mesh)
  tx = optimizer.make_optimizer(config.train)
  shardings, abstract = train.state_shardings(tx, spec, mesh)
  t0 = time.perf_counter()
  compiled = train.compile_step_fn(config, spec, tx, shardings, abstract, mesh,
                                   get_tokenizer(config.data.tokenizer).pad_id)
  return memory.Footprint.of(compiled), time.perf_counter() - t0


def main(argv):
  """Prints the table of the training step's memory under each --modes value."""
  del argv
  if not FLAGS.modes or set(FLAGS.modes) - set(REMAT_MODES):
    raise ConfigError(f"--modes takes a comma-separated list from {list(REMAT_MODES)}; got "
                      f"{FLAGS.modes}")
  c = alibi_tiny.get_config()
  c.model.position.kind = FLAGS.kind
  c.model.num_layers = FLAGS.num_layers
  c.model.d_model, c.model.mlp_dim = FLAGS.d_model, 4 * FLAGS.d_model
  c.data.train_len = FLAGS.train_len
  c.data.batch_size = FLAGS.batch_size
  c.mesh.data = 1
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, jax "
        f"{jax.__version__} ({jax.default_backend()}); configs/alibi_tiny.py with kind="
        f"{FLAGS.kind}, {FLAGS.num_layers} layers, d_model {c.model.d_model}, batch "
        f"{FLAGS.batch_size} x {FLAGS.train_len} tokens, model.attention_chunk "
        f"{c.model.attention_chunk}")
  print("| model.remat | temporaries MiB | need per device MiB | vs none | compile s |")
  print("|---|---|---|---|---|")
  base = None
  for mode in FLAGS.modes:
    c.model.remat = mode
    fp, seconds = step_footprint(c)
    base = fp.temporary if base is None else base
    print(f"| {mode} | {fp.temporary / 2**20:.2f} | {fp.peak / 2**20:.2f} | "
          f"{fp.temporary / base:.2f}x | {seconds:.1f} |")


if __name__ == "__main__":
  command_line.run(main, usage="python bench/remat_memory.py [--kind=alibi] "
                   "[--modes=none,block,full] [--train_len=N] ...")
