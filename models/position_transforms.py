"""Eval-time position-id transforms for relative schemes: Self-Extend, STRING, LM-Infinite,
StreamingLLM.

Each method changes the *relative distance* d = i - j that the scheme sees between query
position i and key position j, piecewise in d. No single pair of position arrays can express a
piecewise distance, so a transform returns *branches*: each branch is a pair of transformed
position arrays (fed to the scheme's `rotate` and `bias` hooks unchanged) plus the region of
original distances where it applies. Attention evaluates the logits of every branch and takes,
for each (query, key) pair, those of the branch whose region holds it (models/attention.py).
This works for every scheme that reads positions only through `rotate` and `bias` (RoPE, xPos,
ALiBi, T5, KERPLE, FIRE, Sandwich); absolute schemes (learned, sinusoidal) and CoPE, whose
positions come from the context, are refused by `models.extensions.apply_extension`.

Notation: L = training context length (tokens), d = i - j >= 0.

  self_extend  Self-Extend, Jin et al., arXiv 2401.01325, Sec. 3 (Eq. 3-4): neighbour attention
               for d < W (positions unchanged); grouped attention for d >= W, where the key
               position is floor(j / G) and the query position floor(i / G) + W - floor(W / G),
               so distances continue from W - 1 (up to rounding) and grow G times slower.
               Fields: `self_extend_group` (G), `self_extend_window` (W, tokens).
  string       STRING, An et al., arXiv 2410.18745, Sec. 4: distances d >= S are shifted to
               d - S + W (the query position moved back by S - W), overwriting the rarely trained
               large distances with well-trained ones; d < S is unchanged, so the largest distance
               is max(S - 1, n - 1 - S + W) for a row of n tokens. Fields: `string_shift` (S,
               tokens; -1 = per row max(L // 3, ceil((n + W) / 2)): the paper's S = L / 3, raised
               for long rows to the S that minimises that largest distance, which then stays
               below L up to n = 2L - W - 1 and cannot beyond) and `string_window` (W, tokens;
               -1 = L // 16, the paper's 128 at 2K).
  lm_infinite  LM-Infinite, Han et al., arXiv 2308.16137, Sec. 4: a Lambda-shaped mask (each
               query sees the first n_global tokens and its n_local most recent keys, nothing
               else) and a distance ceiling: keys at d >= n_local are placed at distance exactly
               d_max. Fields: `lm_infinite_global` (n_global), `lm_infinite_window` (n_local,
               tokens; -1 = L), `lm_infinite_distance` (d_max, tokens; -1 = L).
  streaming_llm
               StreamingLLM, Xiao et al., "Efficient Streaming Language Models with Attention
               Sinks", arXiv 2309.17453, Sec. 3.2: a rolling KV cache of the first n_sink tokens
               (the attention sinks) and the W most recent ones, with positions assigned by
               place *in the cache*, not in the text. A query at i sees the keys j < n_sink and
               i - W < j <= i. Recent keys keep their distance i - j (cache places are
               contiguous); a sink k sits at its own cache place k while the query sits at
               min(i, n_sink + W - 1), its place once the cache is full, so the sink's distance
               is min(i, n_sink + W - 1) - k: it grows with i until the cache fills, then stays
               fixed, and differs per sink (LM-Infinite instead puts every far key at one
               distance d_max). Fields: `streaming_llm_sinks` (n_sink, the paper's 4) and
               `streaming_llm_window` (W, tokens; -1 = L - n_sink, so that the cache holds L
               tokens and every distance stays below L). The authors' code (mit-han-lab/
               streaming-llm `pos_shift`) rotates the cached keys at their cache places; with
               relative schemes only the distances matter, so this is the same attention
               computed on the full sequence (the cache's evicted keys are masked instead).
  dca          Dual Chunk Attention (An et al., "Training-Free Long-Context Scaling of Large
               Language Models", arXiv 2402.17463, Sec. 3; used by Qwen2.5-1M): the sequence is
               cut into chunks of c = S - w tokens (chunk size S, local window w; the released
               ChunkLlama code's defaults S = 3L/4 and w = L/16) and every key sits at j mod c.
               Three branches by the chunks of query i and key j: intra-chunk (the same chunk),
               the query at i mod c, so distances are the true ones; successive-chunk (the
               previous chunk), the query at min(i mod c + c, S); inter-chunk (earlier chunks),
               the query at min(2c - 1, S), a constant, as the code's `qc_t[chunk_len - 1]`. No
               distance reaches S < L. Fields: `dca_chunk_size` (S), `dca_local_window` (w).
               Any relative scheme.
  blockwise    Blockwise causal attention, the inference half of xPos / LEX (Sun et al., "A
               Length-Extrapolatable Transformer", arXiv 2212.10554, Sec. 3.3): the sequence is cut
               into blocks of w tokens and a query in block b sees the keys of blocks b - 1 and b
               (causally), so no query sees more than 2w - 1 keys back; positions unchanged. w =
               `blockwise_block` (-1 = L // 2: as we read Sec. 3.3, half the pretraining length,
               so that every query sees at most L keys). Any relative scheme and NoPE.
  window_interpolation
               ALiBi interpolation by the paper's per-window rule (Al-Khateeb et al., arXiv
               2310.13017): every query of a row of l > L tokens sees positions times L / l, so
               ALiBi's bias -m (i - j) becomes -m (L / l) (i - j), the slopes times L / l for the
               whole window, l = 1 + the row's largest position (under KV-cache decoding the
               cache's, which grows step by step). Set by eval.extension=alibi_interpolation with
               `alibi_interpolation_rule="window"` (models/positions/alibi.py; the default rule
               scales per query). Positions become float32; ALiBi only.

STRING's optional attention factor, `string_attention_factor` (RoPE only): the authors' Llama code
(HKUNLP/STRING `string_for_llama.py`, `replace_with_string`) multiplies cos and sin by
0.1 ln 2 + 1 ("similar with YaRN"), i.e. q and k each by that factor; 1 = off (the default), -1 =
that value, another number > 0 = itself (`string_attention_scale`; applied by
models/positions/rope.py).

This module also holds the eval-time attention temperature (not a transform of the position ids,
but like them an eval-time change that applies to every scheme; models/attention.py applies it):
queries, hence the logits, of the chosen layers multiplied per query by a factor that is 1 up to
L and grows with n = position + 1 beyond (`attention_temperature_scale`). Forms
(`attention_temperature_form`):

  logn         max(1, log n / log L): log-n scaling normalised to L (Chiang & Cholak,
               arXiv 2202.12172, Sec. 5.3) with the lower bound 1 of entropy-aware ABF (Zhang
               et al., "Extending LLMs' Context Window with 100 Samples", arXiv 2401.07004, Sec. 3;
               their code GAIR-NLP/Entropy-ABF `patch/EABF.py` multiplies the rotated queries by
               max(1, log(p + 1) / log 4096) in every layer but the first two: set
               `attention_temperature_layers` to (2, 3, ..., num_layers - 1) for that).
  yarn         (0.1 ln max(1, n / L) + 1)^2: YaRN's logit temperature 1/t = (0.1 ln s + 1)^2
               (Peng et al., arXiv 2309.00071, Eq. (21)-(22)) with the scale s taken per query as
               n / L (YaRN itself uses one s for the whole sequence, and scales q and k by the
               square root each; this per-position form is this codebase's, so that it too is
               1 up to L).
  log          beta = 1 + c ln max(1, n / L0) with explicit constants: c =
               `attention_temperature_c` (0.1 by default) and L0 = `attention_temperature_l0`
               (-1 = L): the form the temperature-scaling literature states with its own constants
               (SWAN-GPT, arXiv 2504.08719, and DroPE, Gelberg et al., arXiv 2512.12167, scale
               the logits by a log of the length ratio beyond the training context; their
               constants are set here, not assumed: DroPE's App. C.2 fits 1 + c ln(C_test /
               C_train), one value per sequence, c = 0.412 or 0.103, configs/extend_drope.py).

Every form takes n per query (n = position + 1, `attention_temperature_per` = "query", the
default) or one value per sequence ("sequence": n = the row's length, 1 + its largest position, so
every query of a long sequence is scaled alike, as methods that choose one scale for the whole
input do).

Fields: `attention_temperature` (on/off; eval.extension=attention_temperature sets it),
`attention_temperature_form`, `attention_temperature_layers` (() = every layer). L =
data.train_len (>= 2). Unlike `model.logn_scaling` (training-time, log n / log L also below L)
it never scales a query at n <= L.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models.rope_scaling import ROPE_FAMILY

TRANSFORMS = ("none", "self_extend", "string", "lm_infinite", "streaming_llm",
              "window_interpolation", "blockwise", "dca")
# The model.position fields of the transforms, name -> (default, comment); configs/base.py
# gathers them (models.positions.config_fields). They are set by eval.extension = self_extend |
# string | lm_infinite (models/extensions.py) rather than by hand.
CONFIG_FIELDS = {
    "position_transform": ("none", '"none" | "self_extend" | "string" | "lm_infinite" | '
                                   '"streaming_llm" | "window_interpolation" (ALiBi) | '
                                   '"blockwise" | "dca".'),
    "self_extend_group": (4, "self_extend: group size G (distances >= W grow G times slower)."),
    "self_extend_window": (-1, "self_extend: neighbour window W, tokens; -1 = train_len // 4."),
    "string_shift": (-1, "string: shift S, tokens; -1 = max(train_len // 3, ceil((n + W) / 2)) "
                         "per row of n tokens."),
    "string_window": (-1, "string: local window W, tokens; -1 = max(1, train_len // 16)."),
    "lm_infinite_global": (10, "lm_infinite: starting tokens every query sees (n_global)."),
    "lm_infinite_window": (-1, "lm_infinite: local window n_local, tokens; -1 = train_len."),
    "lm_infinite_distance": (-1, "lm_infinite: distance ceiling d_max, tokens; -1 = train_len."),
    "dca_chunk_size": (-1, "dca: chunk size S, tokens; -1 = 3 train_len // 4 (ChunkLlama's)."),
    "dca_local_window": (-1, "dca: local window w, tokens; chunks hold S - w tokens; -1 = "
                             "train_len // 16."),
    "blockwise_block": (-1, "blockwise: block length w, tokens; a query sees its block and the "
                            "one before; -1 = train_len // 2."),
    "streaming_llm_sinks": (4, "streaming_llm: attention-sink tokens kept at the cache's start."),
    "streaming_llm_window": (-1, "streaming_llm: recent tokens kept (W), tokens; -1 = train_len "
                                 "- streaming_llm_sinks."),
    "string_attention_factor": (1.0, "string, RoPE only: q and k times this; 1 = off, -1 = "
                                     "0.1 ln 2 + 1 (STRING's code)."),
}
# Their defaults (for configs that predate them).
DEFAULTS = {name: default for name, (default, _) in CONFIG_FIELDS.items()}
# STRING's attention factor in the authors' code (HKUNLP/STRING string_for_llama.py).
STRING_ATTENTION_FACTOR = 0.1 * math.log(2) + 1

TEMPERATURE_FORMS = ("logn", "yarn", "log")
TEMPERATURE_PER = ("query", "sequence")
# The model.position fields of the eval-time attention temperature (module docstring), name ->
# (default, comment); models.positions.config_fields gathers them (configs/base.py).
TEMPERATURE_FIELDS = {
    "attention_temperature": (False, "scale queries beyond train_len (eval.extension="
                                     "attention_temperature)."),
    "attention_temperature_form": ("logn", '"logn": max(1, log n / log L) | "yarn": '
                                           "(0.1 ln max(1, n/L) + 1)^2; n = position + 1."),
    "attention_temperature_layers": ((), "layers whose queries are scaled; () = all (EABF: all "
                                         "but 0 and 1)."),
    "attention_temperature_c": (0.1, '"log": c of 1 + c ln max(1, n / L0).'),
    "attention_temperature_l0": (-1, "reference length L of every form (L0), tokens; -1 = "
                                     "train_len."),
    "attention_temperature_per": ("query", '"query": n = position + 1 | "sequence": n = the '
                                           "row's length."),
}


@dataclasses.dataclass(frozen=True)
class Temperature:
  """One layer's attention temperature (static, hashable).

  Attributes:
    form: one of TEMPERATURE_FORMS, or "" (none).
    c: the "log" form's c (dimensionless, >= 0).
    l0: the reference length L of every form, tokens; -1 = train_len.
    per: "query" (n = position + 1) or "sequence" (n = the row's length).
  """

  form: str = ""
  c: float = 0.1
  l0: int = -1
  per: str = "query"
TEMPERATURE_DEFAULTS = {name: default for name, (default, _) in TEMPERATURE_FIELDS.items()}
# Randomized positions at evaluation (eval.extension=randomized_positions; eval/perplexity.py):
# not a change of the model but of the positions perplexity feeds it, name -> (default, comment).
EVAL_POSITION_FIELDS = {
    "randomized_positions": (False, "perplexity with positions drawn as in training "
                                    "(eval.extension=randomized_positions)."),
    "randomized_draws": (4, "randomized_positions: draws averaged per window (NLL mean)."),
}
EVAL_POSITION_DEFAULTS = {name: default for name, (default, _) in EVAL_POSITION_FIELDS.items()}

# region(distance, k_positions) -> bool [batch, 1, q_len, k_len], or None for everywhere.
Region = Callable[[jax.Array, jax.Array], jax.Array] | None


@dataclasses.dataclass(frozen=True)
class Branch:
  """One piece of a piecewise position transform.

  Attributes:
    q_positions: int32 [batch, q_len] query positions given to the scheme's hooks.
    k_positions: int32 [batch, k_len] key positions given to the scheme's hooks.
    region: None (every pair) or a function of the original distances int32
      [batch, 1, q_len, k_len] and original key positions int32 [batch, 1, 1, k_len] returning
      bool [batch, 1, q_len, k_len]: where this branch's logits are used. Regions of one
      transform are disjoint; pairs in no region are masked out.
  """

  q_positions: jax.Array
  k_positions: jax.Array
  region: Region = None


def _field(cfg, name):
  return cfg.get(name, DEFAULTS[name])


def _is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
  return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)))


@dataclasses.dataclass(frozen=True)
class PositionTransform:
  """The configured transform (static, hashable; built from `model.position`).

  Attributes:
    kind: one of TRANSFORMS.
    train_len: L, tokens.
    group: Self-Extend G (>= 1).
    window: Self-Extend W, STRING W, LM-Infinite n_local or StreamingLLM W, tokens (resolved,
      > 0).
    shift: STRING S or DCA's chunk size S, tokens; -1 = per row (STRING, see the module
      docstring).
    num_global: LM-Infinite n_global or StreamingLLM n_sink (>= 0).
    max_distance: LM-Infinite d_max, tokens (resolved, > 0).
  """

  kind: str = "none"
  train_len: int = 0
  group: int = 1
  window: int = 0
  shift: int = -1
  num_global: int = 0
  max_distance: int = 0

  @classmethod
  def from_config(cls, cfg, train_len: int) -> "PositionTransform":
    """Builds the transform of `cfg` (= `model.position`) for training length `train_len`.

    Raises:
      ConfigError: unknown `position_transform` or a bad field, naming it and its allowed values.
    """
    check_config(cfg, train_len)
    kind = _field(cfg, "position_transform")
    if kind == "self_extend":
      w = _field(cfg, "self_extend_window")
      return cls(kind, train_len, group=_field(cfg, "self_extend_group"),
                 window=train_len // 4 if w == -1 else w)
    if kind == "string":
      w = _field(cfg, "string_window")
      return cls(kind, train_len, window=max(1, train_len // 16) if w == -1 else w,
                 shift=_field(cfg, "string_shift"))
    if kind == "lm_infinite":
      w, dmax = _field(cfg, "lm_infinite_window"), _field(cfg, "lm_infinite_distance")
      return cls(kind, train_len, window=train_len if w == -1 else w,
                 num_global=_field(cfg, "lm_infinite_global"),
                 max_distance=train_len if dmax == -1 else dmax)
    if kind == "window_interpolation":
      return cls(kind, train_len)
    if kind == "dca":
      s, w = _field(cfg, "dca_chunk_size"), _field(cfg, "dca_local_window")
      s = 3 * train_len // 4 if s == -1 else s
      w = max(1, train_len // 16) if w == -1 else w
      return cls(kind, train_len, window=w, shift=s)
    if kind == "blockwise":
      w = _field(cfg, "blockwise_block")
      return cls(kind, train_len, window=max(1, train_len // 2) if w == -1 else w)
    if kind == "streaming_llm":
      sinks, w = _field(cfg, "streaming_llm_sinks"), _field(cfg, "streaming_llm_window")
      return cls(kind, train_len, window=train_len - sinks if w == -1 else w, num_global=sinks)
    return cls("none", train_len)

  def branches(self, q_positions: jax.Array, k_positions: jax.Array) -> list[Branch]:
    """The branches of this transform for one attention call.

    Args:
      q_positions: int32 [batch, q_len]; k_positions: int32 [batch, k_len] (all keys of the call,
        e.g. the whole KV cache, so per-row quantities match full recomputation).

    Returns:
      A list of `Branch`; a single branch with region None for "none".
    """
    qp, kp = q_positions, k_positions
    if self.kind == "self_extend":
      g, w = self.group, self.window
      return [Branch(qp, kp, lambda d, _: d < w),
              Branch(qp // g + (w - w // g), kp // g, lambda d, _: d >= w)]
    if self.kind == "string":
      w = self.window
      if self.shift == -1:
        n = jnp.maximum(qp.max(axis=-1), kp.max(axis=-1)) + 1  # row length, tokens [b]
        s = jnp.maximum(self.train_len // 3, (n + w + 1) // 2)[:, None]  # [b, 1]
      else:
        s = jnp.full((qp.shape[0], 1), self.shift, qp.dtype)
      s_pairs = s[:, None, :, None]  # [b, 1, 1, 1]
      return [Branch(qp, kp, lambda d, _: d < s_pairs),
              Branch(qp - s + w, kp, lambda d, _: d >= s_pairs)]
    if self.kind == "lm_infinite":
      n_local, n_global = self.window, self.num_global
      # Far keys sit at distance exactly d_max: every query at d_max, every key at 0.
      far_q = jnp.full_like(qp, self.max_distance)
      return [Branch(qp, kp, lambda d, _: d < n_local),
              Branch(far_q, jnp.zeros_like(kp),
                     lambda d, k: (d >= n_local) & (k < n_global))]
    if self.kind == "dca":
      s = self.shift
      c = s - self.window  # tokens per chunk
      chunk = lambda x: x // c  # noqa: E731 -- the query's position is d + k in a region
      return [Branch(qp % c, kp % c, lambda d, k: chunk(d + k) == chunk(k)),
              Branch(jnp.minimum(qp % c + c, s), kp % c, lambda d, k: chunk(d + k) - chunk(k) == 1),
              Branch(jnp.full_like(qp, min(2 * c - 1, s)), kp % c,
                     lambda d, k: chunk(d + k) - chunk(k) >= 2)]
    if self.kind == "blockwise":
      w = self.window  # key block >= the query's block - 1 (the query's position is d + k)
      return [Branch(qp, kp, lambda d, k: k // w >= (d + k) // w - 1)]
    if self.kind == "window_interpolation":
      length = jnp.maximum(qp.max(axis=-1), kp.max(axis=-1)) + 1  # l per row [b]
      f = (jnp.float32(self.train_len) / jnp.maximum(jnp.float32(self.train_len),
                                                     length.astype(jnp.float32)))[:, None]
      return [Branch(qp.astype(jnp.float32) * f, kp.astype(jnp.float32) * f)]
    if self.kind == "streaming_llm":
      w, sinks = self.window, self.num_global
      # Sinks at their own cache places k; the query at its place, n_sink + W - 1 once full.
      return [Branch(qp, kp, lambda d, _: d < w),
              Branch(jnp.minimum(qp, sinks + w - 1), kp, lambda d, k: (d >= w) & (k < sinks))]
    return [Branch(qp, kp)]


def check_config(cfg, train_len: int, num_layers: int | None = None) -> None:
  """Validates the transform fields of `cfg` (= `model.position`), STRING's attention factor and
  the attention-temperature fields.

  Args:
    cfg: `model.position`; absent fields take their defaults.
    train_len: L, tokens.
    num_layers: model.num_layers, to check `attention_temperature_layers` against (None: checked
      when the Decoder is built, `temperature_forms`).

  Raises:
    ConfigError: naming the field and its allowed values.
  """
  kind = _field(cfg, "position_transform")
  if kind not in TRANSFORMS:
    raise ConfigError(f"model.position.position_transform must be one of {', '.join(TRANSFORMS)}; "
                      f"got {kind!r}")
  def positive_or_auto(name):
    v = _field(cfg, name)
    if not _is_int(v) or not (v > 0 or v == -1):
      raise ConfigError(f"model.position.{name} must be a positive number of tokens or -1 "
                        f"(the default); got {v!r}")
  if kind == "self_extend":
    g = _field(cfg, "self_extend_group")
    if not _is_int(g) or g < 1:
      raise ConfigError(f"model.position.self_extend_group must be an integer >= 1; got {g!r}")
    positive_or_auto("self_extend_window")
  elif kind == "string":
    positive_or_auto("string_shift")
    positive_or_auto("string_window")
    s, w = _field(cfg, "string_shift"), _field(cfg, "string_window")
    w = max(1, train_len // 16) if w == -1 else w
    if s != -1 and s < w:
      raise ConfigError(f"model.position.string_shift (S={s}) must be >= string_window (W={w}); "
                        "STRING maps distances d >= S to d - S + W")
  elif kind == "lm_infinite":
    n = _field(cfg, "lm_infinite_global")
    if not _is_int(n) or n < 0:
      raise ConfigError(f"model.position.lm_infinite_global must be an integer >= 0; got {n!r}")
    positive_or_auto("lm_infinite_window")
    positive_or_auto("lm_infinite_distance")
  elif kind == "blockwise":
    positive_or_auto("blockwise_block")
  elif kind == "dca":
    positive_or_auto("dca_chunk_size")
    positive_or_auto("dca_local_window")
    s, w = _field(cfg, "dca_chunk_size"), _field(cfg, "dca_local_window")
    s = 3 * train_len // 4 if s == -1 else s
    w = max(1, train_len // 16) if w == -1 else w
    if s - w < 1:
      raise ConfigError(f"model.position.dca_local_window (w={w}) must be below dca_chunk_size "
                        f"(S={s}): a chunk holds S - w tokens")
  elif kind == "window_interpolation" and cfg.get("kind") not in ("alibi", None):
    raise ConfigError(f"model.position.position_transform='window_interpolation' scales ALiBi's "
                      f"slopes and applies to kind='alibi' only; got kind={cfg.get('kind')!r}")
  elif kind == "streaming_llm":
    n = _field(cfg, "streaming_llm_sinks")
    if not _is_int(n) or n < 0:
      raise ConfigError(f"model.position.streaming_llm_sinks must be an integer >= 0; got {n!r}")
    positive_or_auto("streaming_llm_window")
    if _field(cfg, "streaming_llm_window") == -1 and train_len - n < 1:
      raise ConfigError(f"model.position.streaming_llm_window=-1 means train_len - "
                        f"streaming_llm_sinks = {train_len - n} recent tokens; give "
                        "streaming_llm_window > 0 or fewer sinks")
  _check_string_factor(cfg)
  _check_temperature(cfg, train_len, num_layers)


def _check_string_factor(cfg) -> None:
  f = _field(cfg, "string_attention_factor")
  if not (_is_number(f) and (f == -1 or f > 0)):
    raise ConfigError(f"model.position.string_attention_factor must be 1 (off), -1 (STRING's "
                      f"0.1 ln 2 + 1) or a number > 0; got {f!r}")
  # Read under position_transform="string" only (eval.extension=string sets it), like string_shift.
  if f != 1 and cfg.get("kind") not in ROPE_FAMILY:
    raise ConfigError(f"model.position.string_attention_factor={f!r} scales RoPE's q and k and "
                      f"applies to the kinds {list(ROPE_FAMILY)} only; got "
                      f"kind={cfg.get('kind')!r} (set it to 1)")


def string_attention_scale(cfg) -> float:
  """STRING's factor on q and k (module docstring) for `cfg` (= `model.position`): 1 unless
  position_transform is "string"; -1 resolves to 0.1 ln 2 + 1 (`STRING_ATTENTION_FACTOR`).

  Raises:
    ConfigError: a bad `string_attention_factor` (see `check_config`).
  """
  _check_string_factor(cfg)
  if _field(cfg, "position_transform") != "string":
    return 1.0
  f = float(_field(cfg, "string_attention_factor"))
  return STRING_ATTENTION_FACTOR if f == -1 else f


def _temperature_field(cfg, name):
  return cfg.get(name, TEMPERATURE_DEFAULTS[name])


def _check_temperature(cfg, train_len: int, num_layers: int | None) -> None:
  on = _temperature_field(cfg, "attention_temperature")
  if not isinstance(on, bool):
    raise ConfigError(f"model.position.attention_temperature must be True or False; got {on!r}")
  # form and layers are checked when off too: eval.run may set them for the extension.
  form = _temperature_field(cfg, "attention_temperature_form")
  if form not in TEMPERATURE_FORMS:
    raise ConfigError(f"model.position.attention_temperature_form must be one of "
                      f"{list(TEMPERATURE_FORMS)}; got {form!r}")
  layers = _temperature_field(cfg, "attention_temperature_layers")
  if not (isinstance(layers, (tuple, list)) and all(_is_int(i) and i >= 0 for i in layers)
          and len(set(layers)) == len(layers)):
    raise ConfigError(f"model.position.attention_temperature_layers must be a tuple of distinct "
                      f"layer indices >= 0 (() = every layer); got {layers!r}")
  if num_layers is not None and any(i >= num_layers for i in layers):
    raise ConfigError(f"model.position.attention_temperature_layers={tuple(layers)!r} names "
                      f"layers beyond model.num_layers={num_layers} (indices 0..{num_layers - 1})")
  if on and train_len < 2:
    raise ConfigError(f"model.position.attention_temperature needs data.train_len >= 2 (it "
                      f"divides by log L); got {train_len}")
  c = _temperature_field(cfg, "attention_temperature_c")
  if not (_is_number(c) and c >= 0):
    raise ConfigError(f"model.position.attention_temperature_c must be a finite number >= 0; "
                      f"got {c!r}")
  l0 = _temperature_field(cfg, "attention_temperature_l0")
  if not (_is_int(l0) and (l0 == -1 or l0 >= 1)):
    raise ConfigError(f"model.position.attention_temperature_l0 must be a positive number of "
                      f"tokens or -1 (train_len); got {l0!r}")
  per = _temperature_field(cfg, "attention_temperature_per")
  if per not in TEMPERATURE_PER:
    raise ConfigError(f"model.position.attention_temperature_per must be one of "
                      f"{list(TEMPERATURE_PER)}; got {per!r}")


def temperature_forms(cfg, num_layers: int, train_len: int) -> tuple[str, ...]:
  """Per layer, the attention-temperature form that layer applies ("" = none), for `cfg` (=
  `model.position`; absent fields take `TEMPERATURE_DEFAULTS`).

  Raises:
    ConfigError: a bad temperature field (see `check_config`).
  """
  _check_temperature(cfg, train_len, num_layers)
  if not _temperature_field(cfg, "attention_temperature"):
    return ("",) * num_layers
  form = _temperature_field(cfg, "attention_temperature_form")
  layers = tuple(_temperature_field(cfg, "attention_temperature_layers")) or range(num_layers)
  return tuple(form if i in layers else "" for i in range(num_layers))


def temperature_of(cfg, form: str) -> Temperature:
  """The `Temperature` of one layer applying `form` ("" = none), with the constants of `cfg`
  (= `model.position`; absent fields take `TEMPERATURE_DEFAULTS`)."""
  if not form:
    return Temperature()
  return Temperature(form, float(_temperature_field(cfg, "attention_temperature_c")),
                     int(_temperature_field(cfg, "attention_temperature_l0")),
                     _temperature_field(cfg, "attention_temperature_per"))


def attention_temperature_scale(positions: jax.Array, train_len: int, form: str, *,
                                c: float = 0.1, l0: int = -1, per: str = "query",
                                lengths: jax.Array | None = None) -> jax.Array:
  """The factor on each query (hence on its logits) of the attention temperature.

  n = position + 1 (the keys a causal query sees; per="query") or the row's length (per=
  "sequence": `lengths`, else 1 + the row's largest position); L = train_len. "logn":
  max(1, ln n / ln L); "yarn": (0.1 ln max(1, n / L) + 1)^2; "log": 1 + c ln max(1, n / L) (module
  docstring for the papers), L = `l0` when set (a child fine-tuned at a longer train_len scales
  relative to its parent's length, as entropy-aware ABF does), else train_len. All are exactly 1
  for n <= L.

  Args:
    positions: int32 [batch, seq] query position ids.
    train_len: L >= 2, tokens.
    form: one of TEMPERATURE_FORMS.
    c: the "log" form's c (dimensionless).
    l0: the reference length L of every form, tokens; -1 = train_len.
    per: "query" | "sequence".
    lengths: int32 [batch] row lengths for per="sequence" (a KV cache's: 1 + the largest key
      position), or None.

  Returns:
    float32 [batch, seq] factors >= 1.

  Raises:
    ValueError: an unknown form or per.
  """
  if per == "sequence":
    rows = positions.max(axis=-1) + 1 if lengths is None else lengths
    n = jnp.broadcast_to(rows.astype(jnp.float32)[:, None], positions.shape)
  elif per == "query":
    n = positions.astype(jnp.float32) + 1.0
  else:
    raise ValueError(f"per must be one of {TEMPERATURE_PER}; got {per!r}")
  train_len = train_len if l0 == -1 else l0  # the reference length of every form
  if form == "log":
    return 1.0 + np.float32(c) * jnp.log(jnp.maximum(1.0, n / np.float32(train_len)))
  if form == "logn":
    return jnp.maximum(1.0, jnp.log(n) / np.float32(np.log(train_len)))
  if form == "yarn":
    m = 0.1 * jnp.log(jnp.maximum(1.0, n / np.float32(train_len))) + 1.0
    return m * m
  raise ValueError(f"form must be one of {TEMPERATURE_FORMS}; got {form!r}")
