"""What a study will cost, printed before anything is launched (and by --dry-run): per run, its
training tokens and analytic training FLOPs, and an estimated time on the target.

  FLOPs   num_steps x batch_size x train_len tokens x models.spec.train_flops_per_token
          (6 x matmul parameters + causal attention, forward + backward; PaLM's convention,
          arXiv 2204.02311, Appendix B, with the causal half). Evaluations are not counted.
  time    FLOPs / the achieved training FLOP/s, from the first source that applies:
            --tokens_per_s   the training throughput of the study's first pending run on the
                             target (a TPU slice, a GPU), given by the user; other runs scale
                             by their FLOPs per token;
            measured runs    the median tokens/s that the study's runs already logged on this
                             machine (their metrics.jsonl), as achieved FLOP/s;
            a short timing   (local backend, --measure_throughput) train.py run here on the
                             first pending run's config until it has logged 3 records, then
                             stopped: its median tokens/s.
          Without any of them only FLOPs are printed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from models.spec import train_flops_per_token
from runs.metrics import read_metrics


@dataclasses.dataclass(frozen=True)
class RunCost:
  """One run's training cost.

  Attributes:
    name: the run's name.
    tokens: training tokens (num_steps x batch_size x train_len).
    flops_per_token: analytic training FLOPs per token.
    flops: tokens x flops_per_token.
  """

  name: str
  tokens: int
  flops_per_token: float
  flops: float


def run_cost(run) -> RunCost:
  """The training cost of a sweeps.run_plan.Run (its config's steps, batch and length)."""
  c = run.config
  tokens = int(c.train.num_steps) * int(c.data.batch_size) * int(c.data.train_len)
  fpt = train_flops_per_token(c)
  return RunCost(run.name, tokens, fpt, tokens * fpt)


def measured_flops_per_s(planned: Sequence) -> tuple[float, str] | None:
  """(achieved training FLOP/s, where from) from the runs' own metrics.jsonl on this machine:
  the median of every logged record's tokens/s x the run's FLOPs per token (the first record of
  each run, with its compilation, left out); None if no run logged two records."""
  rates, runs = [], 0
  for p in planned:
    if "://" in p.state_dir:
      continue
    records = [r for r in read_metrics(p.state_dir) if r.get("tokens_per_s")]
    if len(records) < 2:
      continue
    runs += 1
    fpt = train_flops_per_token(p.run.config)
    rates += [r["tokens_per_s"] * fpt for r in records[1:]]
  if not rates:
    return None
  return statistics.median(rates), f"measured: the median of {runs} run(s)' logged tokens/s here"


def time_probe(run, config_arg: str, python: str, *, records: int = 3,
               timeout: float = 600.0, env: dict | None = None) -> float:
  """Training tokens/s of `run` on this machine: train.py in a temporary workdir until it has
  logged `records` metrics records (every 2 steps), then stopped (SIGTERM); the median
  tokens/s after the first record (compilation). `env`: the process's environment (default:
  this one's, as the launched runs get).

  Raises:
    RuntimeError: train.py exited or timed out before logging enough.
  """
  with tempfile.TemporaryDirectory() as workdir:
    argv = run.train_argv(python, config_arg, workdir) + [
        "--config.train.log_every_steps=2", f"--config.train.num_steps={2 * records + 2}",
        "--config.train.eval_every_steps=0"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    start = time.monotonic()
    try:
      while True:
        got = [r["tokens_per_s"] for r in read_metrics(workdir) if r.get("tokens_per_s")]
        if len(got) >= records:
          return statistics.median(got[1:])
        if proc.poll() is not None or time.monotonic() - start > timeout:
          raise RuntimeError(f"the throughput probe of {run.name} logged {len(got)} of "
                             f"{records} records: {(proc.stderr.read() or b'')[-500:]!r}")
        time.sleep(0.5)
    finally:
      if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
          proc.wait(30)
        except subprocess.TimeoutExpired:
          proc.kill()


def _human(value: float, unit: str) -> str:
  for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                        (1e3, "k")):
    if value >= scale:
      return f"{value / scale:.3g} {prefix}{unit}"
  return f"{value:.3g} {unit}"


def duration(seconds: float) -> str:
  """'3 h 05 min', '12 min', '45 s'."""
  if seconds >= 3600:
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
  return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def estimate_lines(costs: Sequence[RunCost], rate: tuple[float, str] | None,
                   parallel: int = 1) -> list[str]:
  """The estimate as printed: a total line, then one line per run.

  Args:
    costs: the pending runs' costs.
    rate: (achieved FLOP/s per run, its source), or None for FLOPs only.
    parallel: runs side by side on the backend (the wall time divides by it, at best).
  """
  total_flops = sum(c.flops for c in costs)
  head = (f"# cost: {len(costs)} run(s) to train, {_human(sum(c.tokens for c in costs), 'tokens')}"
          f", {_human(total_flops, 'FLOP')} (analytic, training only)")
  if rate is None:
    head += ("; no time estimate: give --tokens_per_s (the first run's training tokens/s on the "
             "target) or, locally, --measure_throughput")
  else:
    flops_per_s, source = rate
    total = total_flops / flops_per_s
    head += (f"; about {duration(total)} of run time at {_human(flops_per_s, 'FLOP/s')} per run "
             f"({source})" + (f", at best about {duration(total / parallel)} with {parallel} side by side"
                              if parallel > 1 else ""))
  lines = [head]
  for c in costs:
    lines.append(f"#   {c.name}: {_human(c.tokens, 'tokens')}, {_human(c.flops, 'FLOP')}"
                 + (f", ~{duration(c.flops / rate[0])}" if rate else ""))
  return lines


def rate_from_tokens_per_s(tokens_per_s: float, first: RunCost) -> tuple[float, str]:
  """The achieved FLOP/s of a given throughput of the study's first pending run."""
  return tokens_per_s * first.flops_per_token, (f"--tokens_per_s={tokens_per_s:g} for "
                                                f"{first.name}")


__all__ = ["RunCost", "duration", "estimate_lines", "measured_flops_per_s", "rate_from_tokens_per_s",
           "run_cost", "time_probe"]
