"""Our training step against a PyTorch eager reference of the same shape, side by side on this
machine, in one run.

  pip install -e '.[bench]'     # PyTorch; on a CPU machine prefer the CPU wheel:
                                #   pip install torch==2.13.0+cpu (or --index-url
                                #   https://download.pytorch.org/whl/cpu where it is reachable)
  python bench/vs_pytorch.py                          # three shapes x learned, alibi, rope
  python bench/vs_pytorch.py --shapes=default --steps=20
  XLA_FLAGS=--xla_force_host_platform_device_count=2 python bench/vs_pytorch.py --devices=2
                                # ours data-parallel over two CPU devices (one per core)

Ours: the real step of train.py (`train.make_step_fn`: jit, shardings, AdamW with warmup/cosine,
global-norm clipping 1.0, the loss), on `--devices` devices (default 1), float32, for the
schemes `learned`, `alibi` and `rope`; the byte vocabulary (259) in both. Reference: nanoGPT's
GPT written for this bench (Karpathy, github.com/karpathy/nanoGPT, model.py: pre-norm GPT-2
blocks without biases, causal `torch.nn.functional.scaled_dot_product_attention`, GELU MLP,
learned absolute positions, tied embeddings), `torch.optim.AdamW(fused=True)` (foreach when
fused is unavailable) and `clip_grad_norm_(1.0)`. Both get random tokens of the same batch
shape; their parameter counts are printed (ours uses RMSNorm, the reference LayerNorm without
bias: a few hundred parameters apart).

Timing: every measurement runs `--warmup` steps, then about `--steps` timed steps, each blocked
on (JAX: `block_until_ready`; PyTorch eager is synchronous on CPU); the systems take turns in
`--rounds` rounds of ceil(`--steps` / `--rounds`) steps so that both see the same minutes of the
machine, and each row reports the median step (the header gives the count). tokens/s = batch x
length / median step time; ratio = our tokens/s over the reference's (> 1: ours is faster).

Shapes: bench/our_step.py (default = configs/alibi_tiny.py's, 16 x 256; wide = d_model 512,
8 x 256; long = d_model 256, 4 x 1024). Where our step's time goes: bench/profile_step.py.

Slow by design (minutes); results go in bench/RESULTS.md with the machine and date.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time

import jax
from absl import flags

# our_step first: it puts the repo root on sys.path
from our_step import NUM_LAYERS, SCHEMES, SHAPES, VOCAB, Ours, check_devices, refuse
from runs import command_line, distributed, startup

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", list(SHAPES), f"shapes to measure, from {list(SHAPES)}")
flags.DEFINE_list("schemes", list(SCHEMES), f"our schemes to measure, from {list(SCHEMES)}")
flags.DEFINE_integer("steps", 10, "timed steps per system and shape")
flags.DEFINE_integer("warmup", 3, "untimed steps first (compilation, allocator warm-up)")
flags.DEFINE_integer("rounds", 2, "turns each system takes (steps are split between them)")
flags.DEFINE_integer("devices", 1, "JAX devices our step runs on, data-parallel (on CPU: start "
                     "with XLA_FLAGS=--xla_force_host_platform_device_count=N)")


def check_flags() -> None:
  """The first bad flag, refused in one line (`our_step.refuse`: exit status 2)."""
  for name, allowed in (("shapes", SHAPES), ("schemes", SCHEMES)):
    bad = [v for v in getattr(FLAGS, name) if v not in allowed]
    if bad or not getattr(FLAGS, name):
      refuse(f"--{name} takes a non-empty list from {list(allowed)}; got {bad}")
  for name in ("steps", "warmup", "rounds"):
    if getattr(FLAGS, name) < (0 if name == "warmup" else 1):
      refuse(f"--{name} takes a positive integer; got {getattr(FLAGS, name)}")
  reason = check_devices(FLAGS.devices, FLAGS.shapes)
  if reason:
    refuse(reason)


# ---------------------------------------------------------------------------- the reference


def torch_reference(shape: str):
  """nanoGPT's GPT at `shape` with fused AdamW (module docstring), or None without PyTorch."""
  try:
    import torch
    from torch import nn
    from torch.nn import functional as F
  except ImportError:
    return None
  torch.manual_seed(0)
  torch.set_num_threads(os.cpu_count() or 1)
  d_model, heads, mlp, batch, seq = SHAPES[shape]

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.ln_1, self.ln_2 = nn.LayerNorm(d_model, bias=False), nn.LayerNorm(d_model, bias=False)
      self.c_attn = nn.Linear(d_model, 3 * d_model, bias=False)
      self.c_proj = nn.Linear(d_model, d_model, bias=False)
      self.c_fc = nn.Linear(d_model, mlp, bias=False)
      self.mlp_proj = nn.Linear(mlp, d_model, bias=False)

    def forward(self, x):
      b, t, _ = x.shape
      q, k, v = self.c_attn(self.ln_1(x)).split(d_model, dim=2)
      q, k, v = (z.view(b, t, heads, d_model // heads).transpose(1, 2) for z in (q, k, v))
      y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
      x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d_model))
      return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

  class GPT(nn.Module):
    def __init__(self):
      super().__init__()
      self.wte, self.wpe = nn.Embedding(VOCAB, d_model), nn.Embedding(seq, d_model)
      self.blocks = nn.ModuleList(Block() for _ in range(NUM_LAYERS))
      self.ln_f = nn.LayerNorm(d_model, bias=False)
      for p in self.parameters():
        if p.dim() == 2:
          nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
      x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
      for block in self.blocks:
        x = block(x)
      logits = self.ln_f(x) @ self.wte.weight.T  # tied embeddings
      return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))

  model = GPT()
  try:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
  except (RuntimeError, TypeError):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
  tokens = torch.randint(0, VOCAB, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
  idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

  class Reference:
    num_params = sum(p.numel() for p in model.parameters())

    @staticmethod
    def step() -> float:
      t0 = time.perf_counter()
      opt.zero_grad(set_to_none=True)
      model(idx, targets).backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      opt.step()
      return time.perf_counter() - t0

  return Reference


# ---------------------------------------------------------------------------- the table


def measure(systems: dict) -> dict[str, float]:
  """{name: median seconds per step}: warm-up, then the systems take turns (module docstring)."""
  times = {name: [] for name in systems}
  for system in systems.values():
    for _ in range(FLAGS.warmup):
      system.step()
  per_round = max(1, math.ceil(FLAGS.steps / FLAGS.rounds))
  for _ in range(FLAGS.rounds):
    for name, system in systems.items():
      times[name] += [system.step() for _ in range(per_round)]
  return {name: statistics.median(t) for name, t in times.items()}


def main(argv):
  """Prints our rows and PyTorch's (see the module docstring); exit 2 with one line on a bad flag."""
  del argv
  distributed.quiet_library_logs()  # no INFO lines (libtpu) before a refusal
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  check_flags()
  try:
    import torch
    torch_version = torch.__version__
  except ImportError:
    torch_version = None
  print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{time.strftime('%Y-%m-%d')}; jax {jax.__version__} on {jax.devices()[0].platform}; "
        + (f"PyTorch {torch_version} eager" if torch_version else
           "PyTorch is not installed (on CPU: pip install torch==2.13.0+cpu): our rows only"))
  timed = FLAGS.rounds * math.ceil(FLAGS.steps / FLAGS.rounds)  # as `measure` takes them
  print(f"# median of {timed} steps after {FLAGS.warmup} warm-up step(s), "
        f"{FLAGS.rounds} interleaved rounds; random tokens, AdamW, clipping 1.0, float32")
  print("| shape | system | params | ms/step | tokens/s | ours / PyTorch |")
  print("|---|---|---|---|---|---|")
  for shape in FLAGS.shapes:
    _, _, _, batch, seq = SHAPES[shape]
    systems = {}
    reference = torch_reference(shape)
    if reference is not None:
      systems["pytorch"] = reference
    for scheme in FLAGS.schemes:
      systems[scheme] = Ours(shape, scheme, FLAGS.devices)
    medians = measure(systems)
    tokens = batch * seq
    for name, seconds in medians.items():
      ratio = (f"{medians['pytorch'] / seconds:.2f}x" if "pytorch" in medians and
               name != "pytorch" else "")
      label = ("PyTorch (nanoGPT)" if name == "pytorch" else f"ours, `{name}`" +
               (f", {FLAGS.devices} devices" if FLAGS.devices > 1 else ""))
      print(f"| {shape} ({batch} x {seq}) | {label} | {systems[name].num_params:,} | "
            f"{1e3 * seconds:.1f} | {tokens / seconds:,.0f} | {ratio} |", flush=True)


if __name__ == "__main__":
  command_line.run(main, usage="python bench/vs_pytorch.py [--shapes=default,wide,long] "
                   "[--schemes=...] [--steps=N] [--devices=N]")
