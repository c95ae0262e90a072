"""Checks of the retrieval config fields (`check_retrieval`): data.passkey and eval.passkey,
needle, niah_multikey, niah_multivalue, niah_multiquery and variable_tracking; called by
configs/validate.py and, before a grid is built, by eval/needle.py. The checks of the fields
every suite shares (seed, trials, fewshot) are in data/retrieval_prompt.py.
"""

from __future__ import annotations

from configs.errors import ConfigError
from data.passkey_training import min_document_len
from data.retrieval_prompt import (MAX_DIGITS, MAX_NEEDLE_KEYS, VALUE_KINDS, VT_NAME_LETTERS,
                                   _integer, check_fewshot, check_seed, check_trials,
                                   value_length)
from data.tokenizers import get_tokenizer


# ---------------------------------------------------------------------------- field checks


def check_retrieval(config) -> None:
  """Checks the retrieval fields: data.passkey and eval.passkey, needle, niah_multikey,
  niah_multivalue, niah_multiquery and variable_tracking.

  Sections absent from an older config are skipped (configs.stored.load_run_config fills them
  from configs/base.py anyway).

  Raises:
    ConfigError: naming the first bad field and its allowed values: data.passkey.fraction
      outside [0, 1); a seed that is not an integer >= 0; a preamble that is not a bool;
      key_digits / value_digits outside 1..18; num_keys / num_values / num_queries outside
      2..64; num_chains / num_hops outside 1..64; fewshot outside 0..MAX_FEWSHOT; depths not a
      non-empty
      list of numbers in [0, 1]; trials < 1; threshold outside (0, 1]; max_new_tokens < digits + 2 (room for a leading
      space and the character after the number); or, with data.passkey.fraction > 0, a passkey
      training document that cannot fit in data.train_len tokens, an algorithmic task, or a
      tokenizer other than the byte tokenizer (the documents' layout counts bytes).
  """
  p = config.data.get("passkey")
  if p is not None:
    if isinstance(p.fraction, bool) or not isinstance(p.fraction, (int, float)) or not 0 <= p.fraction < 1:
      raise ConfigError(f"data.passkey.fraction must lie in [0, 1) (share of training windows; "
                        f"0 = none); got {p.fraction!r}")
    _retrieval_common(p, "data.passkey", digits_field="key_digits", max_digits=MAX_DIGITS)
    task = config.data.get("task")
    if p.fraction > 0 and task is not None and task.get("name"):
      raise ConfigError(f"data.passkey.fraction={p.fraction} mixes passkey documents into text "
                        f"training; it must be 0 with an algorithmic task "
                        f"(data.task.name={task.name!r})")
    if p.fraction > 0 and config.data.tokenizer != "byte":
      raise ConfigError(f"data.passkey.fraction={p.fraction} lays passkey documents out in "
                        f"whole windows by counting bytes: it needs data.tokenizer='byte'; got "
                        f"{config.data.tokenizer!r} (set data.passkey.fraction=0)")
    if p.fraction > 0:
      need = min_document_len(get_tokenizer(config.data.tokenizer), preamble=p.preamble,
                              key_digits=p.key_digits)
      if need > config.data.train_len:
        raise ConfigError(
            f"data.passkey.fraction > 0 needs data.train_len >= {need} tokens for a passkey "
            f"document with data.passkey.preamble={p.preamble} and key_digits={p.key_digits}; "
            f"got data.train_len={config.data.train_len} (set data.passkey.preamble=False, "
            "or fraction=0)")
  for suite in ("passkey", "needle", "niah_multikey", "niah_multivalue", "niah_multiquery",
                "variable_tracking"):
    e = config.eval.get(suite)
    if e is None:
      continue
    prefix = f"eval.{suite}"
    if suite != "passkey" and e.get("haystack", "text") not in ("text", "noise", "needles"):
      raise ConfigError(f"{prefix}.haystack must be 'text' (held-out text of eval.split), "
                        f"'noise' (RULER's noise sentences) or 'needles' (niah_multikey only: "
                        f"RULER's niah_multikey_2); got {e.haystack!r}")
    if e.get("haystack", "text") == "needles" and suite != "niah_multikey":
      raise ConfigError(f"{prefix}.haystack='needles' (RULER's haystack of distractor needles, "
                        f"niah_multikey_2) applies to eval.niah_multikey only; use 'text' or "
                        f"'noise'")
    if suite != "passkey":
      check_fewshot(e, prefix)
    if suite == "variable_tracking":
      _check_variable_tracking(e, prefix)
      digits, digits_name = None, ""
    elif suite != "passkey":
      _retrieval_common(e, prefix, digits_field="value_digits", max_digits=MAX_DIGITS)
      kind = e.get("value_kind", "digits")
      if kind not in VALUE_KINDS:
        raise ConfigError(f"{prefix}.value_kind must be one of {list(VALUE_KINDS)}; got {kind!r}")
      digits = value_length(kind, e.value_digits)
      digits_name = f"{prefix}.value_digits" if kind == "digits" else "a UUID's 36 characters"
    else:
      digits, digits_name = (p.key_digits if p is not None else 5), "data.passkey.key_digits"
    if suite == "niah_multikey" and (not _integer(e.num_keys)
                                     or not 2 <= e.num_keys <= MAX_NEEDLE_KEYS):
      raise ConfigError(f"{prefix}.num_keys must be an integer in [2, {MAX_NEEDLE_KEYS}] (needles "
                        f"per prompt, the target included); got {e.num_keys!r}")
    count_field = {"niah_multivalue": "num_values", "niah_multiquery": "num_queries"}.get(suite)
    if count_field:
      count = e[count_field]
      if not _integer(count) or not 2 <= count <= MAX_NEEDLE_KEYS:
        raise ConfigError(f"{prefix}.{count_field} must be an integer in [2, {MAX_NEEDLE_KEYS}] "
                          f"(needles per prompt, every one asked for); got {count!r}")
      need = 5 + count * (digits + 2)  # " v1, v2, ..., and vN."
      if not _integer(e.max_new_tokens) or e.max_new_tokens < need:
        raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {need} (5 + "
                          f"{count_field} x ({digits_name} + 2): room for every value); got "
                          f"{e.max_new_tokens!r}")
    depths = e.depths
    if (not isinstance(depths, (tuple, list)) or not depths
        or any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1
               for d in depths)):
      raise ConfigError(f"{prefix}.depths must be a non-empty list of numbers in [0, 1] (share of "
                        f"the filler before the needle); got {depths!r}")
    check_trials(e, prefix, score="accuracy")
    if suite == "passkey":  # the others' seeds were checked with their preamble above
      check_seed(e, prefix, preamble=False)
    if digits is None:  # variable tracking: a leading space, then every name and ", " after it
      need = (e.num_hops + 1) * (VT_NAME_LETTERS + 2) + 1
      if not _integer(e.max_new_tokens) or e.max_new_tokens < need:
        raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {need} (1 + (num_hops "
                          f"+ 1) x {VT_NAME_LETTERS + 2}: a leading space, then every variable "
                          f"name and ', '); got {e.max_new_tokens!r}")
    elif not _integer(e.max_new_tokens) or e.max_new_tokens < digits + 2:
      raise ConfigError(f"{prefix}.max_new_tokens must be an integer >= {digits + 2} "
                        f"({digits_name} + 2: a leading space, the digits and the character "
                        f"after them); got {e.max_new_tokens!r}")


def _check_variable_tracking(section, prefix: str) -> None:
  """Checks the seed, preamble, num_chains and num_hops of eval.variable_tracking."""
  check_seed(section, prefix)
  for name in ("num_chains", "num_hops"):
    if not _integer(section[name]) or not 1 <= section[name] <= 64:
      raise ConfigError(f"{prefix}.{name} must be an integer in [1, 64]; got {section[name]!r}")


def _retrieval_common(section, prefix: str, *, digits_field: str, max_digits: int) -> None:
  """Checks the seed, preamble and digit count of a passkey / needle section."""
  check_seed(section, prefix)
  digits = section[digits_field]
  if not _integer(digits) or not 1 <= digits <= max_digits:
    raise ConfigError(f"{prefix}.{digits_field} must be an integer in [1, {max_digits}]; "
                      f"got {digits!r}")
