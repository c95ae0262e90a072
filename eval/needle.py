"""Passkey and needle retrieval: accuracy on a grid of context lengths x needle depths.

Protocol (every suite: passkey, needle, niah_multikey, niah_multivalue, niah_multiquery,
variable_tracking, common_words, frequent_words; prompts from data/passkey.py and, for RULER's
multi-needle suites, data/ruler.py; for variable tracking, data/variable_tracking.py; for RULER's
word extraction, data/ruler_words.py, whose prompts have no needle and so no depth axis: one
column per length):

  grid      lengths: the run's evaluation lengths, round(m * data.train_len) tokens for m in
            eval.length_multipliers (BOS included; the prompt is exactly that long); depths:
            eval.<suite>.depths (default 0, 0.1, ..., 1: the share of filler / haystack tokens
            before the needle, snapped to a sentence or line boundary; the snapped value is
            recorded per trial); eval.<suite>.trials prompts per cell, each with its own random
            key, drawn from (eval.<suite>.seed, length, depth, trial) only, so every scheme and
            checkpoint sees byte-identical prompts.
  decoding  greedy, with a KV cache (models.decoding.make_generate_fn): the prompt at positions
            0..L-1 as one document, then eval.<suite>.max_new_tokens tokens at positions L, L+1,
            ... The prompts of one length run in batches of at most eval.batch_tokens tokens.
  scoring   exact match of digits: the continuation is decoded up to its first special token
            (BOS/EOS/PAD); its first maximal run of ASCII digits [0-9]+ must equal the answer.
            " 71432." and " is 71432" are correct for key 71432; " 7143", " 714321", " 71 432"
            and "" are wrong. (Mohtashami & Jaggi's test_model compares the first `\\d+` of the
            response with the key, likewise.) A value that is not all digits (a UUID,
            `value_kind="uuid"`) is correct when the continuation contains it, case-insensitive
            (RULER's string_match for UUID needles). niah_multivalue, niah_multiquery and
            variable_tracking ask for several references (all values; a chain's variable
            names) and score RULER's string_match_all (`recall_all`): the share of them the
            continuation contains; a cell's accuracy is the mean share.
  summary   accuracy per cell, per length (all depths and trials pooled), and
            max_length_passing: the largest evaluated length L such that every evaluated length
            <= L has accuracy >= eval.<suite>.threshold (None if the shortest fails). This is
            the "for all k' <= k" rule of Position Interpolation's effective context window
            (Chen et al., arXiv 2306.15595, Section 3.3), whose threshold is a 20% success rate
            per distance k; the default here, 0.9, asks that the model retrieves from nearly
            every depth at that length (set 0.2 for PI's criterion per length).
  skipped   lengths the scheme cannot represent (the decoder needs positions up to
            L + max_new_tokens - 2, so L + max_new_tokens - 1 <= spec.max_position), and lengths
            shorter than the prompt's fixed parts, are recorded with the reason and not run.

Results: `<workdir>/eval/passkey.json` / `needle.json` and the heatmaps `passkey.png` /
`needle.png` (length x depth), written atomically; with an eval-time extension
(eval.extension) the names get its suffix (`extensions.extension_suffix`), as ppl_vs_length's do.

Sources: passkey prompt of Mohtashami & Jaggi (Landmark Attention, arXiv 2305.16300, Appendix),
as used by PI (arXiv 2306.15595, Figure 3); needle: RULER single needle (Hsieh et al., arXiv
2404.06654); the length x depth heatmap follows Kamradt's needle-in-a-haystack plots.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import jax
import numpy as np
from tqdm import tqdm

from configs.errors import ConfigError, eval_lengths
from data import passkey as prompts_lib
from data import retrieval_prompt, ruler, ruler_words, variable_tracking
from data.retrieval_checks import check_retrieval
from data.corpora import Document
from data.tokenizers import ByteTokenizer

SUITES = ("passkey", "needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
          "variable_tracking", *ruler_words.SUITES)
HAYSTACK_SUITES = SUITES[1:6]  # held-out text of eval.split (or RULER's noise) as the haystack
DEPTHLESS_SUITES = ruler_words.SUITES  # no needle: one column per length, no depth axis
# Scored by `recall_all` (every reference), the others by `is_correct` (one number).
RECALL_ALL_SUITES = ("niah_multivalue", "niah_multiquery", "variable_tracking",
                     *ruler_words.SUITES)
MULTI_COUNT_FIELD = ruler.MULTI_COUNT_FIELD
SCORING = ("exact match: the greedy continuation, cut at its first special token (BOS/EOS/PAD), "
           "is decoded as UTF-8; its first maximal run of ASCII digits [0-9]+ must equal the "
           "answer")
SCORING_ALL = ("recall of all references (RULER's string_match_all): the greedy continuation, cut "
               "at its first special token, scores the share of the references it contains "
               "(case-insensitive substrings); a cell's accuracy is the mean score, 'correct' "
               "counts the prompts with every reference")
MAX_LENGTH_RULE = ("the largest evaluated length L such that every evaluated (not skipped) "
                   "length <= L has accuracy >= threshold; null when the shortest fails "
                   "(PI's 'for all k' <= k' rule, arXiv 2306.15595, Section 3.3)")
SOURCES = {
    "passkey": "Mohtashami & Jaggi, Landmark Attention, arXiv 2305.16300, Appendix (prompt); "
               "Chen et al., Position Interpolation, arXiv 2306.15595, Section 3.3 and Figure 3",
    "needle": "Hsieh et al., RULER, arXiv 2404.06654 (single key-value needle, niah)",
    "niah_multikey": "Hsieh et al., RULER, arXiv 2404.06654 (niah_multikey: the key-value "
                     "needle among num_keys - 1 distractor needles of other keys; data/ruler.py)",
    "niah_multivalue": "Hsieh et al., RULER, arXiv 2404.06654 (niah_multivalue: every value of "
                       "one key's num_values needles; data/ruler.py)",
    "niah_multiquery": "Hsieh et al., RULER, arXiv 2404.06654 (niah_multiquery: the values of "
                       "num_queries keys asked at once; data/ruler.py)",
    "variable_tracking": "Hsieh et al., RULER, arXiv 2404.06654, Section 3.2 (vt: every "
                         "variable of a chain of assignments; data/variable_tracking.py)",
    "common_words": "Hsieh et al., RULER, arXiv 2404.06654, Section 3.3 (cwe: the most common "
                    "words of a numbered list; data/ruler_words.py)",
    "frequent_words": "Hsieh et al., RULER, arXiv 2404.06654, Section 3.3 (fwe: the most "
                      "frequent coded words of a Zipf-distributed text; data/ruler_words.py)",
}


# ---------------------------------------------------------------------------- scoring


def continuation_text(tokenizer: ByteTokenizer, ids) -> str:
  """Decodes generated ids up to (not including) the first BOS, EOS or PAD.

  Args:
    tokenizer: the byte tokenizer.
    ids: int [n] generated token ids.

  Returns:
    The text (invalid UTF-8 becomes U+FFFD).
  """
  ids = np.asarray(ids).reshape(-1)
  special = np.isin(ids, [tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id])
  end = int(np.argmax(special)) if special.any() else len(ids)
  return tokenizer.decode(ids[:end])


_DIGITS = re.compile(r"[0-9]+")


def first_digit_run(text: str) -> str | None:
  """The first maximal run of ASCII digits in `text` ("7143" in " 7143 2"), or None."""
  match = _DIGITS.search(text)
  return match.group() if match else None


def recall_all(continuation: str, references) -> float:
  """RULER's string_match_all for one prompt: the share of `references` that occur in
  `continuation` as case-insensitive substrings (RULER's scripts/eval/synthetic/constants.py).

  recall_all("they are: ABCDE, FGHIJ", ["ABCDE", "FGHIJ", "KLMNO"]) -> 2/3.

  Raises:
    ValueError: no references.
  """
  if not references:
    raise ValueError("recall_all needs at least one reference")
  text = continuation.lower()
  return sum(r.lower() in text for r in references) / len(references)


def is_correct(continuation: str, answer: str) -> bool:
  """Exact match: the first run of ASCII digits of `continuation` equals `answer` (a number);
  an answer that is not all digits (a UUID) must occur in it, case-insensitive (RULER).

  " 71432." -> True for answer "71432"; " 7143", " 714321", "71 432", "" -> False.
  " is 9f1c...e2." -> True for answer "9f1c...e2".
  """
  if not answer.isdigit():
    return answer.lower() in continuation.lower()
  return first_digit_run(continuation) == answer


def answered_value(continuation: str, values) -> str | None:
  """Which of `values` (a distractor's) the continuation answered with: the one `is_correct`
  accepts, or None."""
  return next((v for v in values if is_correct(continuation, v)), None)


# ---------------------------------------------------------------------------- the grid


def settings(config, suite: str):
  """`config.eval.<suite>` (suite in SUITES), after checking the retrieval fields.

  Raises:
    ConfigError: unknown suite, or a bad field (configs.validate.check_retrieval).
  """
  if suite not in SUITES:
    raise ConfigError(f"retrieval suite {suite!r} is not supported; choose one of {list(SUITES)}")
  check_retrieval(config)
  ruler_words.check_config(config)
  return config.eval[suite]


NOISE_HAYSTACK = ruler.NOISE_HAYSTACK


def uses_noise(config, suite: str) -> bool:
  """True when `suite` reads the noise haystack (eval.<suite>.haystack = "noise"), False for
  held-out text of eval.split (the default; passkey always has its own filler)."""
  return suite in HAYSTACK_SUITES and ruler.uses_noise(config.eval[suite])


def prompt_builder(config, suite: str, tokenizer: ByteTokenizer,
                   haystack_docs: Sequence[Document] = ()):
  """The prompt builder of `suite` with the run's format fields.

  passkey: data/passkey.PasskeyPrompts with data.passkey.preamble and key_digits (the format the
  run trained on, if it mixed in passkey documents). The others: data/ruler.py `builder` over
  `haystack_docs`, or over RULER's noise sentences with eval.<suite>.haystack = "noise".

  Raises:
    ConfigError: needle without haystack documents (names eval.split).
  """
  if suite == "passkey":
    p = config.data.passkey
    return prompts_lib.PasskeyPrompts(tokenizer, preamble=p.preamble, key_digits=p.key_digits)
  if suite in DEPTHLESS_SUITES:  # no haystack
    return ruler.builder(suite, config.eval[suite], tokenizer, ())
  if not uses_noise(config, suite) and not any(d.data for d in haystack_docs):
    raise ConfigError(f"the {suite} suite needs held-out documents; eval.split="
                      f"{config.eval.split!r} has none")
  return ruler.builder(suite, config.eval[suite], tokenizer, haystack_docs)


def check_suite(config, suite: str, docs, tokenizer: ByteTokenizer):
  """Checks that `suite` can run on `config` (call before compiling anything).

  Args:
    config: the run's config; suite: one of SUITES.
    docs: the splits ({split: [Document]}) or the held-out documents themselves.
    tokenizer: the run's tokenizer.

  Returns:
    The suite's prompt builder (see `prompt_builder`).

  Raises:
    ConfigError: a bad retrieval field, a needle suite without held-out text, or no evaluation
      length long enough for the prompt.
  """
  settings(config, suite)
  held_out = list(docs.get(config.eval.split, ())) if isinstance(docs, Mapping) else list(docs)
  builder = prompt_builder(config, suite, tokenizer, held_out if suite in HAYSTACK_SUITES else ())
  lengths = eval_lengths(config)
  if all(L < builder.min_length for L in lengths):
    raise ConfigError(f"every evaluation length {lengths} is shorter than the {builder.min_length} "
                      f"tokens the {suite} prompt needs; raise eval.length_multipliers"
                      + (" or set data.passkey.preamble=False" if suite == "passkey" else
                         f" or set eval.{suite}.preamble=False")
                      + {"niah_multikey": " or lower eval.niah_multikey.num_keys",
                         "niah_multivalue": " or lower eval.niah_multivalue.num_values",
                         "niah_multiquery": " or lower eval.niah_multiquery.num_queries",
                         "variable_tracking": " or lower eval.variable_tracking.num_chains / "
                                              "num_hops",
                         "common_words": " or lower eval.common_words.num_common / "
                                         "common_repeats"}.get(suite, ""))
  return builder


def skip_reasons(lengths: Sequence[int], *, min_length: int, max_new_tokens: int,
                 max_position: int | None, kind: str, hint: str = "",
                 format_note: str = "") -> dict[int, str]:
  """Why each length that cannot be evaluated is skipped.

  Args:
    lengths: prompt lengths, tokens.
    min_length: tokens of the prompt's fixed parts (no filler).
    max_new_tokens: tokens decoded after the prompt.
    max_position: positions the scheme represents (train.ModelSpec.max_position; None = any).
    kind: model.position.kind (for the message).
    hint: the scheme's advice for longer contexts (ModelSpec.max_position_hint).
    format_note: the format fields that set min_length (for the message).

  Returns:
    {length: reason} for the lengths to skip.
  """
  reasons = {}
  for length in lengths:
    if length < min_length:
      reasons[length] = f"the prompt needs at least {min_length} tokens ({format_note})"
    elif max_position is not None and length + max_new_tokens - 1 > max_position:
      reasons[length] = (f"model.position.kind={kind!r} represents positions < {max_position} only "
                         f"and decoding needs {length + max_new_tokens - 1} ({hint})")
  return reasons


def grid_prompts(builder, lengths: Sequence[int], depths: Sequence[float], trials: int,
                 seed: int) -> dict[int, list[list[retrieval_prompt.RetrievalPrompt]]]:
  """The prompts of every cell: {length: [depth index][trial] -> RetrievalPrompt}.

  Each prompt is `builder.cell(length, depth, trial, seed)`: a function of these values only.
  """
  return {L: [[builder.cell(L, d, t, seed) for t in range(trials)] for d in depths]
          for L in lengths}


def generate_batched(generate: Callable[[np.ndarray], np.ndarray], prompts: np.ndarray, *,
                     batch_size: int, parallelism: int = 1,
                     bar: tqdm | None = None) -> np.ndarray:
  """Runs `generate` over the rows of `prompts` in batches of one fixed size (one compilation).

  Args:
    generate: int32 [batch, L] prompts -> int [batch, max_new_tokens] generated ids.
    prompts: int32 [n, L].
    batch_size: rows per call; rounded up to a multiple of `parallelism` and capped at n rounded
      up likewise. The last batch is padded with copies of row 0 (their outputs are dropped).
    parallelism: the batch must be a multiple of this (mesh data * fsdp).
    bar: a tqdm bar advanced by the rows done.

  Returns:
    int32 [n, max_new_tokens], row i generated from prompts[i].
  """
  n = len(prompts)
  par = max(1, parallelism)
  rows = -(-max(1, batch_size) // par) * par
  rows = min(rows, -(-n // par) * par)
  out = []
  for lo in range(0, n, rows):
    chunk = prompts[lo:lo + rows]
    if len(chunk) < rows:
      chunk = np.concatenate([chunk, np.repeat(prompts[:1], rows - len(chunk), axis=0)])
    out.append(np.asarray(generate(chunk), np.int32)[:min(rows, n - lo)])
    if bar is not None:
      bar.update(min(rows, n - lo))
  return np.concatenate(out)


def max_length_passing(rows: Sequence[dict], threshold: float) -> int | None:
  """The largest length such that it and every shorter evaluated length have accuracy >= threshold.

  Args:
    rows: per-length dicts with "length" and "accuracy" (None = skipped, ignored).
    threshold: accuracy needed, in (0, 1].

  Returns:
    A length in tokens, or None when the shortest evaluated length fails (or none was evaluated).
  """
  best = None
  for row in sorted(rows, key=lambda r: r["length"]):
    if row["accuracy"] is None:
      continue
    if row["accuracy"] < threshold:
      break
    best = row["length"]
  return best


def evaluate_grid(suite: str, config, builder, tokenizer: ByteTokenizer,
                  generate_for_length: Callable[[int], Callable[[np.ndarray], np.ndarray]], *,
                  skip: Mapping[int, str] | None = None, parallelism: int = 1) -> dict:
  """Builds, decodes and scores the whole grid of `suite`; returns the result (not written).

  Args:
    suite: one of SUITES.
    config: the run's config (eval.<suite>, eval.length_multipliers, eval.batch_tokens,
      data.train_len).
    builder: from `prompt_builder`.
    tokenizer: the byte tokenizer.
    generate_for_length: L -> a function int32 [batch, L] prompts -> int [batch,
      max_new_tokens] greedy continuations (e.g. make_generate_fn's, with the parameters bound).
    skip: {length: reason} for lengths not to run (see `skip_reasons`).
    parallelism: batch multiple (mesh data * fsdp).

  Returns:
    The result dict (module docstring): lengths, depths, per-cell accuracy and outputs, per
    length accuracy, the accuracy matrix [length][depth] (None = skipped) and
    max_length_passing. A suite of DEPTHLESS_SUITES has "depths": None, one cell per length
    (its "depth" None) and a [length][1] matrix.
  """
  s = config.eval[suite]
  skip = dict(skip or {})
  lengths = eval_lengths(config)
  depthless = suite in DEPTHLESS_SUITES
  depths = [0.0] if depthless else [float(d) for d in s.depths]
  run = [L for L in lengths if L not in skip]
  prompts = grid_prompts(builder, run, depths, s.trials, s.seed)
  cells, rows, matrix = [], [], []
  total = len(run) * len(depths) * s.trials
  with tqdm(total=total, desc=suite, leave=False,
            disable=total == 0 or jax.process_index() != 0) as bar:
    for length in lengths:
      multiplier = length / config.data.train_len
      if length in skip:
        rows.append({"length": length, "multiplier": multiplier, "accuracy": None, "correct": 0,
                     "prompts": 0, "skipped": skip[length]})
        matrix.append([None] * len(depths))
        cells += [{"length": length, "depth": None if depthless else d, "accuracy": None,
                   "correct": 0, "trials": 0, "skipped": skip[length]} for d in depths]
        continue
      flat = [p for per_depth in prompts[length] for p in per_depth]
      batch = max(1, config.eval.batch_tokens // (length + s.max_new_tokens))
      generated = generate_batched(generate_for_length(length), np.stack([p.tokens for p in flat]),
                                   batch_size=batch, parallelism=parallelism, bar=bar)
      row_correct, row_score, accs = 0, 0.0, []
      for i, depth in enumerate(depths):
        outputs = []
        for t, p in enumerate(prompts[length][i]):
          text = continuation_text(tokenizer, generated[i * s.trials + t])
          score = recall_all(text, p.answers) if p.answers else float(is_correct(text, p.answer))
          outputs.append({"answer": p.answer, "key": p.key, "output": text,
                          "correct": score == 1.0, "score": score} | ({} if depthless else {
                              "actual_depth": p.actual_depth, "needle_start": p.needle_start,
                              "distance_to_end": length - p.needle_start}))
          if p.distractors:  # which other needle, if any, the model answered with
            answered = answered_value(text, [v for _, v, _ in p.distractors])
            outputs[-1]["distractors"] = [{"key": k, "value": v, "needle_start": start}
                                          for k, v, start in p.distractors]
            outputs[-1]["answered_distractor"] = next(
                (k for k, v, _ in p.distractors if answered is not None and v == answered), None)
        correct = sum(o["correct"] for o in outputs)
        row_correct += correct
        row_score += sum(o["score"] for o in outputs)
        accs.append(float(np.mean([o["score"] for o in outputs])))
        cells.append({"length": length, "depth": None if depthless else depth,
                      "accuracy": accs[-1], "correct": correct, "trials": len(outputs),
                      "outputs": outputs})
        if not depthless:
          cells[-1]["mean_actual_depth"] = float(np.mean([o["actual_depth"] for o in outputs]))
        if "distractors" in outputs[0]:
          cells[-1]["answered_distractor"] = sum(o["answered_distractor"] is not None
                                                 for o in outputs)
      matrix.append(accs)
      rows.append({"length": length, "multiplier": multiplier,
                   "accuracy": row_score / len(flat), "correct": row_correct,
                   "prompts": len(flat)})
  return {
      "suite": suite, "train_len": config.data.train_len, "lengths": lengths,
      "multipliers": [L / config.data.train_len for L in lengths],
      "depths": None if depthless else depths,
      "trials": s.trials, "seed": s.seed, "threshold": s.threshold,
      "max_new_tokens": s.max_new_tokens, "source": SOURCES[suite],
      "scoring": SCORING_ALL if suite in RECALL_ALL_SUITES else SCORING,
      "accuracy": matrix, "rows": rows, "cells": cells,
      "max_length_passing": max_length_passing(rows, s.threshold),
      "max_length_passing_rule": MAX_LENGTH_RULE,
  }


def prompt_format(suite: str, config, builder) -> dict:
  """The prompt's format fields and template strings (recorded in the result), with the number
  of solved demonstrations before each prompt (`fewshot`, data/ruler.py FewShotPrompts)."""
  out = _prompt_format(suite, config, builder)
  if suite != "passkey":
    out["fewshot"] = int(config.eval[suite].get("fewshot", 0))
  return out


def _prompt_format(suite: str, config, builder) -> dict:
  if suite == "passkey":
    p = config.data.passkey
    return {"preamble": p.preamble, "key_digits": p.key_digits, "min_length": builder.min_length,
            "preamble_text": prompts_lib.PASSKEY_PREAMBLE,
            "filler": " ".join(prompts_lib.PASSKEY_FILLER),
            "needle": prompts_lib.PASSKEY_NEEDLE, "question": prompts_lib.PASSKEY_QUESTION,
            "layout": "[preamble\\n]filler[:b]\\nneedle\\nfiller[:F-b]\\nquestion"}
  n = config.eval[suite]
  if suite in DEPTHLESS_SUITES:
    return ruler_words.prompt_format(suite, n, builder)
  if suite == "variable_tracking":
    return {"preamble": n.preamble, "num_chains": n.num_chains, "num_hops": n.num_hops,
            "min_length": builder.min_length, "preamble_text": variable_tracking.VT_PREAMBLE,
            "statements": [variable_tracking.VT_VALUE_STATEMENT,
                           variable_tracking.VT_ALIAS_STATEMENT],
            "question": variable_tracking.VT_QUESTION,
            "layout": "[preamble\\n]haystack with each chain's statement lines in order (the "
                      "queried chain's first at depth b, the rest after it; distractor chains at "
                      "uniform depths)\\nquestion",
            "haystack_tokens": int(len(builder.haystack.tokens))}
  out = {"preamble": n.preamble, "value_digits": n.value_digits,
         **({"value_kind": n.value_kind} if n.get("value_kind", "digits") != "digits" else {}),
         "min_length": builder.min_length,
         "preamble_text": prompts_lib.NEEDLE_PREAMBLE, "needle": prompts_lib.NEEDLE_TEMPLATE,
         "question": prompts_lib.NEEDLE_QUESTION,
         "layout": "[preamble\\n]haystack[:b]needle\\nhaystack[b:F]\\nquestion",
         "haystack_tokens": int(len(builder.haystack.tokens))}
  if suite in MULTI_COUNT_FIELD:
    field = MULTI_COUNT_FIELD[suite]
    out.update({field: n[field], "question": ruler.MULTI_QUESTION,
                "layout": f"[preamble\\n]haystack with {field} needle lines (the first at "
                          "depth b, the others at uniform depths)\\nquestion for every value"})
  if suite == "niah_multikey":
    out.update(num_keys=n.num_keys,
               layout="[preamble\\n]haystack with num_keys needle lines (the target at depth b, "
                      "the distractors at uniform depths)\\nquestion for the target")
  return out


__all__ = ["DEPTHLESS_SUITES", "HAYSTACK_SUITES", "RECALL_ALL_SUITES", "SUITES", "continuation_text", "evaluate_grid",
           "first_digit_run", "generate_batched", "grid_prompts", "is_correct",
           "max_length_passing", "prompt_builder", "prompt_format", "recall_all", "skip_reasons"]
