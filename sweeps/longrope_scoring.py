"""Scoring LongRoPE search candidates on the parent's model: perplexity at the target length.

The parent's config as eval-time LongRoPE (`search_config`); one jitted scoring function per n-hat
that takes a candidate's inverse frequencies theta_i / lambda_i as an argument (`make_score_fn`,
`Scorer`); the fixed held-out windows every candidate is scored on (`search_windows`); and the
eval-time methods as published, for comparison (`method_scores`). The protocol is described under
"Scoring" in the docstring of sweeps/longrope_search.py (the command's --help). LongRoPE: Ding et
al., arXiv 2402.13753, Sec. 3.2.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from data.inputs import load_splits
from data.tokenizers import get_tokenizer
from eval import perplexity
from models import extensions, rope_frequencies
from models.positions import Dims
from models.positions.rope import rotary_dim
from models.sharding import replicated
from models.spec import model_spec
from sweeps.longrope_evolution import Settings


def search_config(config, s: float, keep_first: int, attention_factor: float,
                  factors: Sequence[float] | None = None, position: dict | None = None):
  """The parent's config as eval-time LongRoPE (`extensions.apply_extension`), factor s.

  Args:
    config: the parent's experiment config.
    s: rope_scaling_factor.
    keep_first: longrope_keep_first (n-hat).
    attention_factor: longrope_attention_factor (-1 = derived).
    factors: longrope_long_factors (None = all s, PI, the placeholder the search replaces).
    position: the LongRoPE fields to set instead (`longrope_modes.search_position`: progressive
      and short searches on a LongRoPE-trained parent); then the other arguments but s are unused.

  Returns:
    A new, validated ConfigDict with rope_scaling="longrope" and rope_scaling_train_len = the
    parent's data.train_len (or as `position` says).
  """
  c = ml_collections.ConfigDict(config.to_dict())
  pos = c.model.position
  half = rotary_dim(Dims.from_config(c).head_dim, pos.rotary_fraction) // 2
  if position is None:
    position = {"longrope_long_factors": tuple(float(x) for x in (
                    factors if factors is not None else (s,) * half)),
                "longrope_short_factors": (), "longrope_keep_first": int(keep_first),
                "longrope_attention_factor": float(attention_factor),
                "rope_scaling_train_len": int(config.data.train_len)}
  with pos.unlocked(), pos.ignore_type():
    for name, value in position.items():
      if name != "rope_scaling_factor":
        pos[name] = tuple(value) if isinstance(value, list) else value
  return extensions.apply_extension(c, "longrope", s)


def make_score_fn(graphdef: nnx.GraphDef, mesh, rows: str = "long") -> Callable:
  """Compiles `(params, long_inv_freq, batch) -> (NLL sum per position, tokens per position)`.

  `eval.perplexity.make_nll_fn` with the long-row inverse frequencies as an argument: the merged
  model's RoPE takes them through `set_search_frequencies`, so one compilation scores every
  candidate (of one n-hat; keep_first is static).

  Args:
    graphdef: the LongRoPE Decoder's graph definition.
    mesh: device mesh.
    rows: which frequencies the argument replaces: "long" (l > L) or "short" (l <= L).

  Returns:
    A jitted function of (params, float32 [rot_dim/2] or [num_layers, rot_dim/2], batch as
    `eval.perplexity.score_windows_by_position` builds it) -> two replicated float32 [seq].
  """
  def nll(params, long_inv_freq, batch):
    model = nnx.merge(graphdef, params)
    model.position.set_search_frequencies(long_inv_freq, rows=rows)
    logits = model(batch["inputs"], batch["positions"], batch["segment_ids"])
    per_token = perplexity.token_nll(logits.astype(jnp.float32), batch["targets"]) * batch["weights"]
    return per_token.sum(axis=0), batch["weights"].sum(axis=0)

  return jax.jit(nll, out_shardings=(replicated(mesh), replicated(mesh)))


class Scorer:
  """Perplexity of the parent at target_len for a candidate (factors, n-hat).

  One jitted function per n-hat (`make_score_fn`), made on first use and kept; the windows and
  parameters are fixed. `compilations()` reports how often each was compiled.
  """

  def __init__(self, config, settings: Settings, s: float, params, windows, mesh,
               position: Callable[[int], dict] | None = None, rows: str = "long"):
    """position: n-hat -> the scored model's LongRoPE fields (`longrope_modes.search_position`),
    None = the parent's config as eval-time LongRoPE at s; rows: "long" or "short", which
    frequencies the candidates replace."""
    self.config, self.settings, self.s = config, settings, s
    self.position, self.rows = position, rows
    self.params, self.windows, self.mesh = params, windows, mesh
    pos = config.model.position
    self.rot = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction)
    self.thetas = tuple(float(t) for t in (pos.get("rope_theta_per_layer", ()) or ()))
    self.theta = float(pos.rope_theta)
    # Windows per forward pass: eval.batch_tokens' worth, but no more than there are (padding
    # rows would cost as much as scored ones).
    self.batch = max(1, min(config.eval.batch_tokens // settings.target_len,
                            len(windows["inputs"])))
    self.fns: dict[int, Callable] = {}

  def inv_freq(self, factors) -> np.ndarray:
    """theta_i / lambda_i as the model built from these factors computes them
    (`rope_frequencies.longrope_inv_freq`): float32 [rot_dim/2], or [num_layers, rot_dim/2] with
    rope_theta_per_layer."""
    f = tuple(float(x) for x in factors)
    if self.thetas:
      return np.stack([rope_frequencies.longrope_inv_freq(self.rot, t, f) for t in self.thetas])
    return rope_frequencies.longrope_inv_freq(self.rot, self.theta, f)

  def _fn(self, keep_first: int) -> Callable:
    if keep_first not in self.fns:
      c = search_config(self.config, self.s, keep_first, self.settings.attention_factor,
                        position=None if self.position is None else self.position(keep_first))
      self.fns[keep_first] = make_score_fn(model_spec(c, self.mesh).graphdef, self.mesh,
                                           self.rows)
    return self.fns[keep_first]

  def __call__(self, factors, keep_first: int) -> tuple[float, float]:
    """(NLL, nats per token; perplexity) of the candidate on the fixed windows."""
    fn = self._fn(int(keep_first))
    inv = jax.device_put(jnp.asarray(self.inv_freq(factors)), replicated(self.mesh))
    scores = perplexity.score_windows_by_position(lambda p, b: fn(p, inv, b), self.params,
                                                  self.windows, batch_size=self.batch,
                                                  mesh=self.mesh)
    nll = scores.nll_sum / scores.tokens
    return nll, math.exp(nll) if nll < 700 else math.inf

  def compilations(self) -> dict[int, int]:
    """{n-hat: times its scoring function was compiled} (1 each when the cache works)."""
    return {n: int(fn._cache_size()) for n, fn in self.fns.items()}  # noqa: SLF001


METHODS = ("none", "pi", "ntk", "yarn")  # eval-time methods scored for comparison


def method_scores(config, s: float, scorer: Scorer,
                  names: Sequence[str] = METHODS) -> dict[str, dict | None]:
  """The eval-time methods themselves (`extensions.apply_extension`, factor s) on the search's
  windows: none = plain RoPE (no attention factor), pi, ntk and yarn with its own attention factor
  0.1 ln s + 1 -- unlike the seeds (`SEEDS`), which share the search's attention factor. One
  compilation each (`perplexity.make_nll_fn`).

  On a LongRoPE-trained parent (progressive and short searches) the one method is the model as
  trained, `names` = ("none",), reported as "trained".

  Returns:
    {name: {"nll": nats per token, "ppl"}, or None where the method does not apply (ntk with
    fewer than 4 rotated features)}.
  """
  out = {}
  for name in names:
    try:
      c = extensions.apply_extension(config, name, s)
    except ConfigError:
      out[name] = None
      continue
    fn = perplexity.make_nll_fn(model_spec(c, scorer.mesh).graphdef, scorer.mesh)
    scores = perplexity.score_windows_by_position(fn, scorer.params, scorer.windows,
                                                  batch_size=scorer.batch, mesh=scorer.mesh)
    nll = scores.nll_sum / scores.tokens
    key = "trained" if config.model.position.get("rope_scaling", "none") != "none" else name
    out[key] = {"nll": nll, "ppl": math.exp(nll) if nll < 700 else None}
  return out


def search_windows(config, settings: Settings) -> tuple[dict, dict]:
  """The fixed windows every candidate is scored on (sweeps/longrope_search.py's docstring).

  Returns:
    (windows: dict of [num_windows, target_len] arrays as `perplexity.evaluation_windows`,
     info: {"split", "documents" (that gave a window), "windows", "tokens" (scored)}).

  Raises:
    ConfigError: the corpus cannot be read, or no document of eval.split holds target_len + 1
      tokens.
  """
  split = config.eval.split
  docs = load_splits(config).get(split, [])
  tokenizer = get_tokenizer(config.data.tokenizer)
  per_doc = -(-settings.eval_tokens // max(1, len(docs)))
  windows = perplexity.evaluation_windows(docs, tokenizer, settings.target_len,
                                          max_tokens_per_doc=per_doc)
  if len(windows["inputs"]) == 0:
    raise ConfigError(f"no {split} document holds --target_len + 1 = {settings.target_len + 1} "
                      "tokens; lower --target_len")
  used = sum(len(tokenizer.encode(d.data)) > settings.target_len for d in docs)
  return windows, {"split": split, "documents": int(used), "windows": int(len(windows["inputs"])),
                   "tokens": int(windows["weights"].sum()), "protocol": "non_overlapping",
                   "max_tokens_per_length": settings.eval_tokens}
