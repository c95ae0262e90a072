"""Per-device memory of the train step vs sequence length, with and without context parallelism.

  python bench/context_memory.py                       # 8 fake CPU devices, lengths 2K..32K
  python bench/context_memory.py --context=4 --lengths=4096,16384

Data parallelism cannot split one sequence: at batch 1 (the regime of long training lengths)
every device of a data-parallel mesh holds the whole sequence's activations. With mesh.context
= c (models/context_parallel.py) each device holds 1/c of the tokens plus one layer's gathered
keys and values. For each length this compiles train.py's step (`compile_step_fn`, the program
the loop runs) for configs/alibi_tiny.py at data.batch_size = 1 on one device and on a mesh of
c devices along "context", and reports XLA's compiled memory analysis per device (arguments +
outputs + temporaries - aliased; the temporaries alone) and the compile time. Nothing runs and
no parameter is materialised: only abstract shapes are compiled. Results go in bench/RESULTS.md
with the machine.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import platform  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
from absl import flags  # noqa: E402

from runs import optimizer  # noqa: E402
import train  # noqa: E402
from configs import alibi_tiny  # noqa: E402
from models import sharding  # noqa: E402
from models import positions  # noqa: E402
from models.spec import model_spec  # noqa: E402
from runs import command_line  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("kind", "alibi", list(positions.REGISTRY), "positional scheme "
                  "(model.position.kind)")
flags.DEFINE_list("lengths", ["2048", "4096", "8192", "16384", "32768"], "train_len, tokens")
flags.DEFINE_integer("context", 8, "mesh.context of the context-parallel mesh (<= 8 devices)",
                     lower_bound=1)


def step_memory(length: int, context: int) -> tuple[float, float, float]:
  """(total MiB per device, temporaries MiB per device, compile seconds) of the train step."""
  c = alibi_tiny.get_config()
  c.model.position.kind = FLAGS.kind
  c.data.train_len, c.data.batch_size = length, 1
  c.mesh.data, c.mesh.fsdp, c.mesh.context, c.mesh.tensor = 1, 1, context, 1
  mesh = sharding.make_mesh(c.mesh, jax.devices()[:context])
  spec = model_spec(c, mesh)
  tx = optimizer.make_optimizer(c.train)
  shardings, abstract = train.state_shardings(tx, spec, mesh)
  t0 = time.perf_counter()
  compiled = train.compile_step_fn(c, spec, tx, shardings, abstract, mesh, pad_id=0)
  seconds = time.perf_counter() - t0
  m = compiled.memory_analysis()
  total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
           - m.alias_size_in_bytes)
  return total / 2**20, m.temp_size_in_bytes / 2**20, seconds


def main(argv):
  """Prints the table of step memory at each length, on one device and split over --context."""
  del argv
  lengths = command_line.numbers(FLAGS.lengths, "--lengths", int, 1)
  c = alibi_tiny.get_config()
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, jax "
        f"{jax.__version__}; configs/alibi_tiny.py ({c.model.num_layers} layers, d_model "
        f"{c.model.d_model}) with kind={FLAGS.kind}, data.batch_size 1, model.attention_chunk "
        f"{c.model.attention_chunk}; per device, XLA's compiled memory analysis")
  k = FLAGS.context
  print(f"| train_len | 1 device: MiB | temporaries MiB | compile s | context {k}: MiB per device "
        f"| temporaries MiB | compile s | ratio |")
  print("|---|---|---|---|---|---|---|---|")
  for length in lengths:
    one = step_memory(length, 1)
    split = step_memory(length, k)
    print(f"| {length} | {one[0]:.1f} | {one[1]:.1f} | {one[2]:.1f} | {split[0]:.1f} | "
          f"{split[1]:.1f} | {split[2]:.1f} | {one[0] / split[0]:.2f}x |", flush=True)


if __name__ == "__main__":
  command_line.run(main, usage="python bench/context_memory.py [--kind=alibi] "
                   "[--lengths=2048,4096] [--context=8]")
