"""Attention diagnostics vs length (eval/attention_stats.py): entropy (nats) and sink mass per
layer and head on the first window of `eval.attention.windows` held-out documents,
`<workdir>/eval/attention<suffix>.{json,png}`."""

from __future__ import annotations

import json

from configs.errors import eval_lengths
from eval import attention_stats, perplexity, plots
from eval.suites.base import TEXT, Context, Suite, multiplier, recorded_step, write_result
from models import extensions
from runs.workdir import config_hash


class Attention(Suite):
  """eval.suites=attention (module docstring)."""

  names = ("attention",)
  data = TEXT
  section = "attention"

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    attention_stats.check_settings(config)
    return []

  def run(self, ctx: Context) -> dict[str, dict]:
    config = ctx.config
    windows = attention_stats.check_settings(config)
    skip, reason = perplexity.skipped_lengths(config, ctx.spec)
    split_docs = ctx.docs[config.eval.split]
    rows = attention_stats.attention_by_length(
        attention_stats.make_stats_fn(ctx.spec.graphdef, ctx.mesh), ctx.params, split_docs,
        ctx.tokenizer, eval_lengths(config), windows=windows, num_heads=config.model.num_heads,
        skip={L: reason for L in skip})
    for row in rows:
      row["multiplier"] = row["length"] / config.data.train_len
    result = {
        "suite": "attention", "scheme": config.model.position.kind, **recorded_step(ctx),
        "config_hash": config_hash(config), **extensions.extension_header(config),
        "train_len": config.data.train_len, "split": config.eval.split,
        "documents": len(split_docs), "windows": windows,
        "num_layers": config.model.num_layers, "num_heads": config.model.num_heads,
        "unit": "entropy in nats; sink mass = attention probability on the window's BOS",
        "windows_start": "document_start", "rows": rows}
    write_result(ctx.workdir, f"attention{ctx.suffix}", result, ctx.figure(plots.plot_attention_statistics))
    return {f"attention{ctx.suffix}": result}

  def summary(self, result: dict) -> list[str]:
    return ["attention entropy (nats) / sink mass by length: "
            + ", ".join(f"{row['length']}: {row['entropy']:.3f} / {row['sink_mass']:.3f}"
                        for row in result["rows"] if not row.get("skipped"))]

  def rows(self, result: dict, train_len: int) -> list[dict]:
    return [{"length": r["length"], "multiplier": multiplier(r, train_len),
             "entropy": r.get("entropy"), "sink_mass": r.get("sink_mass"),
             "entropy_uniform": r.get("entropy_uniform"), "windows": r.get("windows"),
             "skipped": r.get("skipped"),
             "detail": json.dumps({k: r[k] for k in ("entropy_by_layer", "sink_mass_by_layer")
                                   if k in r})}
            for r in result.get("rows", [])]
