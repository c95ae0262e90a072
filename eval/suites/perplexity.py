"""Perplexity vs length and loss by position, from one pass (eval/perplexity.py; Press et al.,
arXiv 2108.12409, Section 4): `<workdir>/eval/ppl_vs_length<suffix>.{json,png}` and
`loss_by_position<suffix>.{json,png}`.

The protocol is `eval.protocol` / `eval.stride`; lengths the scheme cannot represent (e.g.
`learned` beyond its table) are recorded as skipped with the scheme's reason, and so are lengths
whose compiled scoring program does not fit in memory (runs/memory.py `eval_checker`; when none
fits, the evaluation is refused with a ConfigError). Perplexity files
add `perplexity.protocol_suffix` (e.g. "_sliding_s64") after the extension's suffix, so results of
several extensions and protocols sit side by side.

Lengths that no held-out document of `eval.split` reaches are refused before compiling when asked
for explicitly (eval.run --length_multipliers), else skipped with that reason (a warning, and
`skipped` in the row). The result records whether its lengths scored the same text
(`scored_text`: `same_text`, `common_tokens`), and `summary` / eval.run print a note when not.
"""

from __future__ import annotations

import json

import numpy as np

from configs.errors import ConfigError, eval_lengths
from data import corpora
from data.inputs import token_unit
from eval import perplexity, plots, randomized_positions
from eval.suites.base import TEXT, Context, Suite, multiplier, recorded_step, write_result
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


def scored_targets(num_targets: int, length: int, *, protocol: str, stride: int,
                   per_doc: int | None) -> int:
  """Targets of one document of `num_targets` tokens scored at `length` (all from its start), as
  `evaluation_windows` takes them: whole windows (non_overlapping) or strides (sliding), at most
  the first count >= `per_doc` (None = no budget)."""
  step = perplexity.resolve_stride(length, protocol, stride)
  if num_targets < length:
    return 0
  if protocol == "sliding":
    n = (num_targets - length) // step + 1
    if per_doc is not None:
      n = min(n, 1 + max(0, -(-(per_doc - length) // step)))
    return length + (n - 1) * step
  n = num_targets // length
  return (n if per_doc is None else min(n, -(-per_doc // length))) * length


def scored_text(doc_tokens: Sequence[int], lengths: Sequence[int], *, protocol: str, stride: int,
                max_tokens_per_length: int) -> dict:
  """Whether `lengths` score the same text (module docstring, Budget).

  Args:
    doc_tokens: each held-out document's tokens (`document_lengths`).
    lengths: the evaluation lengths that were scored, tokens.
    protocol, stride: as `evaluation_windows`; max_tokens_per_length: the budget (0 = none).

  Returns:
    {"same_text": every document gives the same targets at every length, "common_tokens": the
    targets scored at every length (per document the fewest any length scores, summed)}.
  """
  if not len(lengths):  # every length skipped (e.g. beyond a learned position table)
    return {"same_text": True, "common_tokens": 0}
  per_doc = (None if max_tokens_per_length <= 0
             else -(-max_tokens_per_length // max(1, len(doc_tokens))))
  counts = np.array([[scored_targets(n, L, protocol=protocol, stride=stride, per_doc=per_doc)
                      for n in doc_tokens] for L in lengths], np.int64).reshape(len(lengths), -1)
  return {"same_text": bool((counts == counts[:1]).all()),
          "common_tokens": int(counts.min(axis=0).sum())}


_LONGEST: dict = {}  # id(split) -> (split, its longest document's tokens), for `check`


def longest_document(split, tokenizer) -> int:
  """Tokens of the longest document of a held-out split (cached per split object)."""
  cached = _LONGEST.get(id(split))
  if cached is None or cached[0] is not split:
    cached = _LONGEST[id(split)] = (split, max(perplexity.document_lengths(split, tokenizer),
                                                default=0))
  return cached[1]


def text_note(result: dict) -> str | None:
  """A line saying the lengths of a ppl_vs_length result do not score the same text (None when
  they do, or for a result written before it was recorded)."""
  if result.get("same_text", True):
    return None
  by_length = ", ".join(f"{r['length']}: {r['tokens']}" for r in result["rows"]
                        if r.get("nll") is not None)
  return (f"note: the lengths do not score the same text (eval.max_tokens_per_length="
          f"{result.get('max_tokens_per_length')}): the same {result.get('common_tokens')} "
          f"targets are scored at every length, and some lengths score more (targets by length "
          f"{by_length}); each length scores whole "
          "windows from each document's start, and a document shorter than a length gives it "
          "none")


class Perplexity(Suite):
  """ppl_vs_length + loss_by_position (module docstring)."""

  names = ("ppl_vs_length", "loss_by_position")
  data = TEXT
  in_training = True
  per_protocol = True

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    """Lengths are checked against the scheme and the held-out documents; with
    `explicit_lengths` (asked for on the command line) every one must be representable and
    reached by a document, else the others are skipped (a warning, and the reason in the rows).

    Raises:
      ConfigError: an explicit length beyond the scheme, or beyond every held-out document of
        eval.split (naming eval.length_multipliers and the longest document); randomized
        positions (eval.extension=randomized_positions) beyond the scheme's positions.
    """
    warnings = []
    split = (docs or {}).get(config.eval.split)
    if split and tokenizer is not None:
      longest = longest_document(split, tokenizer)
      beyond = [L for L in eval_lengths(config) if L > longest]
      if beyond and explicit_lengths:
        raise ConfigError(
            f"eval.length_multipliers: length {beyond[0]} tokens "
            f"({beyond[0] / config.data.train_len:g} x data.train_len) is longer than every "
            f"held-out document of eval.split={config.eval.split!r} (the longest of the "
            f"{len(split)} has {longest} tokens); use multipliers <= "
            f"{longest / config.data.train_len:g}")
      if beyond:
        warnings.append(f"eval lengths {beyond} will be skipped: no held-out document of "
                        f"eval.split={config.eval.split!r} reaches them (the longest has "
                        f"{longest} tokens)")
    if spec is None or not explicit_lengths:
      perplexity.check_lengths(eval_lengths(config), None, config.model.position.kind)
    else:
      perplexity.check_lengths(eval_lengths(config), spec.max_position,
                               config.model.position.kind, spec.max_position_hint)
    randomized = randomized_positions.setting(config)
    if randomized and spec is not None and spec.max_position is not None and (
        randomized[1] > spec.max_position):
      raise ConfigError(f"eval.extension=randomized_positions draws positions from [0, "
                        f"{randomized[1]}) (data.position_sampler.max_position) but "
                        f"model.position.kind={config.model.position.kind!r} represents "
                        f"{spec.max_position} positions; train with max_position <= "
                        f"{spec.max_position}, or a larger table")
    if spec is not None:
      skip, reason = randomized_positions.extend_skips(
          config, *perplexity.skipped_lengths(config, spec))
      if skip:
        warnings.append(f"eval lengths {skip} will be skipped: {reason}")
    return warnings

  def run(self, ctx: Context) -> dict[str, dict]:
    """Perplexity and loss by position at every eval length (eval/perplexity.py); with
    eval.extension=randomized_positions, from positions drawn as in training, averaged over
    draws."""
    config, e = ctx.config, ctx.config.eval
    protocol = e.get("protocol", "non_overlapping")  # absent in configs written before the field
    stride = e.get("stride", 0)
    position_bins = e.get("position_bins", 32)
    skip, reason = randomized_positions.extend_skips(
        config, *perplexity.skipped_lengths(config, ctx.spec))
    split_docs = ctx.docs[e.split]
    doc_tokens = perplexity.document_lengths(split_docs, ctx.tokenizer)
    rows = perplexity.ppl_vs_length(
        perplexity.make_nll_fn(ctx.spec.graphdef, ctx.mesh), ctx.params, split_docs,
        ctx.tokenizer, eval_lengths(config), max_tokens_per_length=e.max_tokens_per_length,
        batch_tokens=e.batch_tokens, mesh=ctx.mesh, skip=skip, skip_reason=reason,
        protocol=protocol, stride=stride, position_bins=position_bins,
        memory_check=memory.eval_checker(config, ctx.mesh, ctx.params),  # skips what cannot fit
        doc_tokens=doc_tokens,
        scorer=randomized_positions.scorer(drawn) if (drawn := randomized_positions.setting(
            config)) else None)
    by_position = []
    for row in rows:
      row["multiplier"] = row["length"] / config.data.train_len
      by_position.append({k: row[k] for k in ("length", "multiplier", "stride", "tokens", "nll")}
                         | {"bins": row.pop("loss_by_position")})
    common = {
        "protocol": protocol, "stride": stride, "windows_start": "document_start",
        "scheme": config.model.position.kind, **recorded_step(ctx),
        **randomized_positions.record(config),
        "config_hash": config_hash(config), **extensions.extension_header(config),
        "train_len": config.data.train_len, "split": e.split, "documents": len(split_docs),
        "max_tokens_per_length": e.max_tokens_per_length,
        **scored_text(doc_tokens, [r["length"] for r in rows if r["nll"] is not None],
                      protocol=protocol, stride=stride,
                      max_tokens_per_length=e.max_tokens_per_length),
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
    write_result(ctx.workdir, f"ppl_vs_length{suffix}", result,
                 ctx.figure(plots.plot_ppl_vs_length))
    write_result(ctx.workdir, f"loss_by_position{suffix}", positions,
                 ctx.figure(plots.plot_loss_by_position))
    return {f"ppl_vs_length{suffix}": result}  # loss_by_position is written beside it

  def summary(self, result: dict) -> list[str]:
    if result["suite"] != "ppl_vs_length":
      return []
    lines = [f"unigram byte entropy of the corpus: {result['unigram_entropy_nats']:.4f} nats"]
    for row in result["rows"]:
      if row["nll"] is not None:
        lines.append(f"ppl at {row['length']:>6} tokens ({row['multiplier']:g}x train_len): "
                     f"{row['ppl']:.4f}, {describe_bits(result, row)}")
      elif row.get("skipped"):
        lines.append(f"ppl at {row['length']:>6} tokens: skipped, {row['skipped']}")
    note = text_note(result)
    return lines + ([note] if note else [])

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
