"""Accuracy per instance size of an algorithmic task (eval/algorithmic.py; Kazemnejad et al.,
arXiv 2305.19466; Ruoss et al., arXiv 2305.16843): `<workdir>/eval/algorithmic<suffix>.{json,png}`
for runs trained on `data.task`."""

from __future__ import annotations

import numpy as np

from configs.errors import ConfigError
from data import tasks
from eval import algorithmic, perplexity
from eval.suites.base import TASK, Context, Suite, write_result
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
    rows = algorithmic.evaluate_sizes(
        algorithmic.make_score_fn(spec.graphdef, ctx.mesh), ctx.params, task,
        range(1, t.eval_max_size + 1), examples_per_size=t.eval_examples_per_size,
        seed=t.eval_seed, tokenizer=ctx.tokenizer, batch_tokens=config.eval.batch_tokens,
        mesh=ctx.mesh, max_position=spec.max_position, skip_reason=reason,
        train_sizes=(t.train_min_size, t.train_max_size))
    example = task.example(3, np.random.default_rng(0))
    result = {
        "suite": SUITE, "task": t.name, "scheme": kind, "step": int(ctx.step),
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
    write_result(ctx.workdir, f"{SUITE}{ctx.suffix}", result, algorithmic.plot)
    return {f"{SUITE}{ctx.suffix}": result}

  def summary(self, result: dict) -> list[str]:
    lines = ["exact match by size:"]
    for row in result["rows"]:
      if row["exact_match"] is not None:
        train = " (train)" if row["in_distribution"] else ""
        lines.append(f"  {result['task']} size {row['size']:>4}{train:8}: exact match "
                     f"{row['exact_match']:.3f}, token accuracy {row['token_accuracy']:.3f}")
    return lines

  def rows(self, result: dict, train_len: int) -> list[dict]:
    top = result.get("train_max_size") or 1
    return [{"size": r["size"], "length": r.get("sequence_length"),
             "multiplier": r["size"] / top, "exact_match": r.get("exact_match"),
             "token_accuracy": r.get("token_accuracy"), "examples": r.get("examples"),
             "in_distribution": r.get("in_distribution"), "skipped": r.get("skipped")}
            for r in result.get("rows", [])]
