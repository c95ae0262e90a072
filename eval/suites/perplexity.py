"""Perplexity vs length and loss by position, from one pass (eval/perplexity.py; Press et al.,
arXiv 2108.12409, Section 4): `<workdir>/eval/ppl_vs_length<suffix>.{json,png}` and
`loss_by_position<suffix>.{json,png}`.

The protocol is `eval.protocol` / `eval.stride`; lengths the scheme cannot represent (e.g.
`learned` beyond its table) are recorded as skipped with the scheme's reason, and so are lengths
whose compiled scoring program does not fit in memory (runs/memory.py `eval_checker`; when none
fits, the evaluation is refused with a ConfigError). Perplexity files
add `perplexity.protocol_suffix` (e.g. "_sliding_s64") after the extension's suffix, so results of
several extensions and protocols sit side by side.
"""

from __future__ import annotations

import json

from configs.errors import eval_lengths
from data import corpora
from data.inputs import token_unit
from eval import perplexity, plots
from eval.suites.base import TEXT, Context, Suite, multiplier, write_result
from models import extensions
from runs import memory
from runs.workdir import config_hash


def bits_per_byte(result: dict, row: dict) -> float | None:
  """A ppl_vs_length row's bits per byte, or None where the file does not give it: rows written
  before they counted their bytes hold NLL / ln 2, which is bits per byte only when the unit is
  nats per byte (the byte tokenizer; under SentencePiece it was bits per token)."""
  if "bytes" in row or result.get("unit", "nats per byte") == "nats per byte":
    return row.get("bits_per_byte")
  return None


def describe_bits(result: dict, row: dict) -> str:
  """One line on a row's bits per byte: "2.5301 bits/byte (65536 tokens)", with the bytes and
  bytes per token where a token is not a byte (SentencePiece)."""
  value = bits_per_byte(result, row)
  text = f"{value:.4f} bits/byte" if value is not None else "bits/byte not recorded"
  tokens, num_bytes = row.get("tokens"), row.get("bytes")
  if num_bytes and num_bytes != tokens:
    return f"{text} ({tokens} tokens, {num_bytes} bytes: {num_bytes / tokens:.3f} bytes/token)"
  return f"{text} ({tokens} tokens)"


class Perplexity(Suite):
  """ppl_vs_length + loss_by_position (module docstring)."""

  names = ("ppl_vs_length", "loss_by_position")
  data = TEXT
  in_training = True
  per_protocol = True

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    """Lengths are checked against the scheme; with `explicit_lengths` (asked for on the command
    line) every one must be representable, else the unrepresentable ones are skipped (a warning)."""
    if spec is None or not explicit_lengths:
      perplexity.check_lengths(eval_lengths(config), None, config.model.position.kind)
    else:
      perplexity.check_lengths(eval_lengths(config), spec.max_position,
                               config.model.position.kind, spec.max_position_hint)
    if spec is not None:
      skip, reason = perplexity.skipped_lengths(config, spec)
      if skip:
        return [f"eval lengths {skip} will be skipped: {reason}"]
    return []

  def run(self, ctx: Context) -> dict[str, dict]:
    config, e = ctx.config, ctx.config.eval
    protocol = e.get("protocol", "non_overlapping")  # absent in configs written before the field
    stride = e.get("stride", 0)
    position_bins = e.get("position_bins", 32)
    skip, reason = perplexity.skipped_lengths(config, ctx.spec)
    split_docs = ctx.docs[e.split]
    rows = perplexity.ppl_vs_length(
        perplexity.make_nll_fn(ctx.spec.graphdef, ctx.mesh), ctx.params, split_docs,
        ctx.tokenizer, eval_lengths(config), max_tokens_per_length=e.max_tokens_per_length,
        batch_tokens=e.batch_tokens, mesh=ctx.mesh, skip=skip, skip_reason=reason,
        protocol=protocol, stride=stride, position_bins=position_bins,
        memory_check=memory.eval_checker(config, ctx.mesh, ctx.params))  # skips what cannot fit
    by_position = []
    for row in rows:
      row["multiplier"] = row["length"] / config.data.train_len
      by_position.append({k: row[k] for k in ("length", "multiplier", "stride", "tokens", "nll")}
                         | {"bins": row.pop("loss_by_position")})
    common = {
        "protocol": protocol, "stride": stride, "windows_start": "document_start",
        "scheme": config.model.position.kind, "step": int(ctx.step),
        "config_hash": config_hash(config), **extensions.extension_header(config),
        "train_len": config.data.train_len, "split": e.split, "documents": len(split_docs),
        "max_tokens_per_length": e.max_tokens_per_length,
        "tokens_scored": sum(r["tokens"] for r in rows), "unit": f"nats per {token_unit(config)}"}
    result = {
        "suite": "ppl_vs_length", **common,
        # The splits held in memory: a prepared corpus's training split (read lazily from its
        # shards) would be read and decoded whole, at pod scale for hours, so it is left out.
        "unigram_entropy_nats": perplexity.unigram_entropy(
            [d for split in ctx.docs.values() if not isinstance(split, corpora.PreparedSplit)
             for d in split]),
        "rows": rows, **ctx.extra}
    positions = {
        "suite": "loss_by_position", **common, "position_bins": position_bins,
        "binning": "position 0 alone, then log-spaced (perplexity.position_bin_edges); "
                   "end exclusive; a token at position p has p + 1 tokens of context",
        "rows": by_position}
    suffix = ctx.suffix + perplexity.protocol_suffix(protocol, stride)
    write_result(ctx.workdir, f"ppl_vs_length{suffix}", result, plots.plot_ppl_vs_length)
    write_result(ctx.workdir, f"loss_by_position{suffix}", positions, plots.plot_loss_by_position)
    return {f"ppl_vs_length{suffix}": result}  # loss_by_position is written beside it

  def summary(self, result: dict) -> list[str]:
    if result["suite"] != "ppl_vs_length":
      return []
    lines = [f"unigram byte entropy of the corpus: {result['unigram_entropy_nats']:.4f} nats"]
    for row in result["rows"]:
      if row["nll"] is not None:
        lines.append(f"ppl at {row['length']:>6} tokens ({row['multiplier']:g}x train_len): "
                     f"{row['ppl']:.4f}, {describe_bits(result, row)}")
    return lines

  def rows(self, result: dict, train_len: int) -> list[dict]:
    if result["suite"] == "loss_by_position":
      return [{"length": r["length"], "multiplier": multiplier(r, train_len), "nll": r.get("nll"),
               "tokens": r.get("tokens"), "window_stride": r.get("stride"),
               "detail": json.dumps(r.get("bins", []))} for r in result.get("rows", [])]
    return [{"length": r["length"], "multiplier": multiplier(r, train_len), "nll": r.get("nll"),
             "ppl": r.get("ppl"), "bits_per_byte": bits_per_byte(result, r),
             "tokens": r.get("tokens"), "bytes": r.get("bytes"), "windows": r.get("windows"),
             "window_stride": r.get("stride"), "skipped": r.get("skipped")}
            for r in result.get("rows", [])]
