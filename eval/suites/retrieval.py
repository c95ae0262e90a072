"""Retrieval grids (lengths x needle depths x trials, greedy decoding, exact match or recall of
all references; eval/needle.py): the shared runner of the passkey, needle, niah_multikey,
niah_multivalue, niah_multiquery, variable_tracking, common_words and frequent_words suites
(the last two without a depth axis), `<workdir>/eval/<suite><suffix>.{json,png}`."""

from __future__ import annotations

import json

import jax

from configs.errors import eval_lengths
from eval import needle, plots
from eval.perplexity import batch_parallelism
from eval.suites.base import TEXT, Context, Suite, multiplier, recorded_step, write_result
from models import extensions
from models.decoding import make_generate_fn
from runs.workdir import config_hash


class Retrieval(Suite):
  """A retrieval grid suite: `names[0]` is one of eval/needle.py SUITES (passkey, needle,
  niah_multikey, niah_multivalue, niah_multiquery, variable_tracking, common_words,
  frequent_words)."""

  data = TEXT

  @property
  def section(self) -> str:
    """eval.<suite>: the grid's settings."""
    return self.names[0]

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    """The grid's fields, the prompt's length against the eval lengths and, with the corpus
    loaded (`docs`), the needle's held-out haystack (eval/needle.py check_suite)."""
    if (docs is None and self.section in needle.HAYSTACK_SUITES
        and not needle.uses_noise(config, self.section)):
      needle.settings(config, self.section)  # the haystack is checked where the corpus is loaded
    else:
      needle.check_suite(config, self.section, docs or {}, tokenizer)
    return []

  def run(self, ctx: Context) -> dict[str, dict]:
    suite, config, spec = self.section, ctx.config, ctx.spec
    s = needle.settings(config, suite)
    builder = needle.check_suite(config, suite, ctx.docs, ctx.tokenizer)
    if suite == "passkey":
      note = (f"data.passkey.preamble={config.data.passkey.preamble}, "
              f"key_digits={config.data.passkey.key_digits}")
    elif suite in needle.DEPTHLESS_SUITES:
      note = ", ".join(f"eval.{suite}.{k}={v}" for k, v in sorted(s.items())
                       if k not in ("trials", "seed", "threshold", "max_new_tokens"))
    elif suite == "variable_tracking":
      note = (f"eval.{suite}.preamble={s.preamble}, num_chains={s.num_chains}, "
              f"num_hops={s.num_hops}")
    else:
      count = {"niah_multikey": "num_keys", **needle.MULTI_COUNT_FIELD}.get(suite)
      note = f"eval.{suite}.preamble={s.preamble}, value_digits={s.value_digits}" + (
          f", {count}={s[count]}" if count else "")
    skip = needle.skip_reasons(eval_lengths(config), min_length=builder.min_length,
                               max_new_tokens=s.max_new_tokens, max_position=spec.max_position,
                               kind=config.model.position.kind, hint=spec.max_position_hint,
                               format_note=note)
    if skip:
      print(f"{suite}: skipping lengths {sorted(skip)}: " + "; ".join(sorted(set(skip.values()))))

    def generate_for_length(length: int):
      fn = make_generate_fn(spec.graphdef, ctx.mesh, prompt_len=length,
                            max_new_tokens=s.max_new_tokens)
      return lambda prompts: jax.device_get(fn(ctx.params, prompts))

    result = needle.evaluate_grid(suite, config, builder, ctx.tokenizer, generate_for_length,
                                  skip=skip, parallelism=batch_parallelism(ctx.mesh))
    result.update({
        "scheme": config.model.position.kind, **recorded_step(ctx),
        "config_hash": config_hash(config), **extensions.extension_header(config),
        "prompt": needle.prompt_format(suite, config, builder)})
    if needle.uses_noise(config, suite):
      result["haystack"] = config.eval[suite].haystack  # "noise" or "needles"
    elif suite in needle.HAYSTACK_SUITES:
      result.update({"haystack": "text", "split": config.eval.split,
                     "documents": len(ctx.docs.get(config.eval.split, ()))})
    write_result(ctx.workdir, f"{suite}{ctx.suffix}", result, ctx.figure(plots.plot_retrieval_heatmap))
    return {f"{suite}{ctx.suffix}": result}

  def summary(self, result: dict) -> list[str]:
    return [f"{self.section}: accuracy by length "
            + ", ".join(f"{row['length']}: {row['accuracy']:.2f}" for row in result["rows"]
                        if row["accuracy"] is not None)
            + f"; largest length passing {result['threshold']}: {result['max_length_passing']}"]

  def rows(self, result: dict, train_len: int) -> list[dict]:
    by_length: dict[int, dict] = {}
    for cell in result.get("cells", []):
      if cell["depth"] is not None:  # depthless suites: accuracy vs length only
        by_length.setdefault(cell["length"], {})[f"{cell['depth']:g}"] = cell.get("accuracy")
    return [{"length": r["length"], "multiplier": multiplier(r, train_len),
             "accuracy": r.get("accuracy"), "correct": r.get("correct"),
             "prompts": r.get("prompts"), "skipped": r.get("skipped"),
             "max_length_passing": result.get("max_length_passing"),
             "threshold": result.get("threshold"),
             "detail": json.dumps(by_length.get(r["length"], {}), sort_keys=True)}
            for r in result.get("rows", [])]
