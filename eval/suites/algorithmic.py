"""Accuracy per instance size of an algorithmic task (eval/algorithmic.py; Kazemnejad et al.,
arXiv 2305.19466; Ruoss et al., arXiv 2305.16843): `<workdir>/eval/algorithmic<suffix>.{json,png}`
for runs trained on `data.task`; a two-size task (data/tasks/base.py GridTask, e.g. addition_grid)
adds the accuracy over its grid of sizes to the JSON ("grid") and the heatmap
`algorithmic<suffix>_grid.png` (McLeish et al., arXiv 2405.17399)."""

from __future__ import annotations

import json
import os

import jax
import numpy as np

from configs.errors import ConfigError
from data import position_coupling, tasks
from eval import algorithmic, perplexity
from eval.suites.base import TASK, Context, Suite, recorded_step, write_result
from models import extensions
from runs.workdir import config_hash

SUITE = "algorithmic"


class Algorithmic(Suite):
  """eval.suites=algorithmic: sizes 1..data.task.eval_max_size of data.task.name."""

  names = (SUITE,)
  data = TASK
  in_training = True

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    t = config.data.task
    if not t.name:
      raise ConfigError(f"the {SUITE!r} suite needs data.task.name, one of "
                        f"{sorted(tasks.REGISTRY)}; the run trained on text (data.task.name='')")
    tasks.check_config(t, config.data.train_len)
    return []

  def run(self, ctx: Context) -> dict[str, dict]:
    config, spec = ctx.config, ctx.spec
    self.check(config)
    t = config.data.task
    task = tasks.get_task(t.name)
    kind = config.model.position.kind
    reason = perplexity.unrepresentable_reason(config, spec)
    score_fn = algorithmic.make_score_fn(spec.graphdef, ctx.mesh)
    common = dict(seed=t.eval_seed, tokenizer=ctx.tokenizer, batch_tokens=config.eval.batch_tokens,
                  mesh=ctx.mesh, max_position=None if position_coupling.kind_of(config)
                  else spec.max_position,  # coupled ids (<= eval_max_size + 2) fit: validated
                  train_sizes=(t.train_min_size, t.train_max_size))
    grid = None
    if isinstance(task, tasks.GridTask):  # the per-size rows are the grid's diagonal
      grid = algorithmic.evaluate_grid(score_fn, ctx.params, task, t.eval_max_size,
                                       examples_per_cell=t.eval_examples_per_size, **common)
      rows = algorithmic.diagonal_rows(grid, task, skip_reason=reason)
    else:
      rows = algorithmic.evaluate_sizes(score_fn, ctx.params, task, range(1, t.eval_max_size + 1),
                                        examples_per_size=t.eval_examples_per_size,
                                        skip_reason=reason, **common)
    example = task.example(3, np.random.default_rng(0))
    result = {
        "suite": SUITE, "task": t.name, "scheme": kind, **recorded_step(ctx),
        **extensions.extension_header(config, None if ctx.suffix else "none"),
        "config_hash": config_hash(config), "size_unit": task.size_unit,
        "format": (f"BOS prompt answer EOS, bytes; e.g. size 3: {example.prompt.decode()!r} -> "
                   f"{example.answer.decode()!r}; answer targets are the answer bytes and EOS"),
        "scoring": "exact match = every answer target (answer bytes and EOS) is the argmax under "
                   "teacher forcing, which equals greedy decoding; token accuracy is "
                   "token-weighted",
        "train_min_size": int(t.train_min_size), "train_max_size": int(t.train_max_size),
        "eval_max_size": int(t.eval_max_size), "examples_per_size": int(t.eval_examples_per_size),
        "eval_seed": int(t.eval_seed), "summary": algorithmic.summarize(rows, t.train_max_size),
        "rows": rows}
    if grid is not None:
      result["grid"] = grid
    write_result(ctx.workdir, f"{SUITE}{ctx.suffix}", result, ctx.figure(algorithmic.plot))
    if "grid" in result and jax.process_index() == 0:
      algorithmic.plot_grid(result, os.path.join(ctx.workdir, "eval",
                                                 f"{SUITE}{ctx.suffix}_grid.png"))
    return {f"{SUITE}{ctx.suffix}": result}

  def summary(self, result: dict) -> list[str]:
    lines = []
    if "grid" in result:
      g = result["grid"]
      lines.append(f"{result['task']} grid of {len(g['sizes'])} x {len(g['sizes'])} sizes: exact "
                   f"match {_fmt(g['in_distribution_exact_match'])} in the training square, "
                   f"{_fmt(g['one_operand_beyond_exact_match'])} with one operand beyond it, "
                   f"{_fmt(g['beyond_exact_match'])} over all cells beyond")
    lines.append("exact match by size:" + (" (the grid's diagonal)" if "grid" in result else ""))
    for row in result["rows"]:
      if row["exact_match"] is not None:
        train = " (train)" if row["in_distribution"] else ""
        lines.append(f"  {result['task']} size {row['size']:>4}{train:8}: exact match "
                     f"{row['exact_match']:.3f}, token accuracy {row['token_accuracy']:.3f}")
    return lines

  def rows(self, result: dict, train_len: int) -> list[dict]:
    """One row per size; for a grid task, `detail` holds that size's grid row as JSON,
    {second operand's size: exact match} with the first operand's size = `size`."""
    top = result.get("train_max_size") or 1
    grid = result.get("grid")
    out = []
    for r in result.get("rows", []):
      row = {"size": r["size"], "length": r.get("sequence_length"),
             "multiplier": r["size"] / top, "exact_match": r.get("exact_match"),
             "token_accuracy": r.get("token_accuracy"), "examples": r.get("examples"),
             "in_distribution": r.get("in_distribution"), "skipped": r.get("skipped")}
      if grid and r["size"] <= len(grid["sizes"]):
        row["detail"] = json.dumps({str(b): v for b, v in zip(grid["sizes"],
                                                              grid["exact_match"][r["size"] - 1])})
      out.append(row)
    return out


def _fmt(value: float | None) -> str:
  return "n/a" if value is None else f"{value:.3f}"
