"""Training-time position-id samplers: rewrite the `positions` field, for any positional scheme.

They run per example inside the grain pipeline (numpy, no JAX) and only rewrite `positions`; the
tokens, targets and `segment_ids` are untouched, and evaluation never uses them (it always sees
the true positions 0..n-1). Config: `data.position_sampler` (configs/base.py).

Determinism. Example `index` of the (shuffled, repeated) stream of process `stream` draws from
`np.random.default_rng([seed, stream, index])`: the draw is a pure function of the seed and of the
example's place in the stream, so an iterator restored with `set_state()` reproduces the sampled
positions exactly, each epoch (a new stretch of indices) gets fresh draws for the same window, and
hosts draw independently. (grain's own `random_map` would give the same guarantees; an explicit
generator keeps the draws independent of grain's internal seeding scheme.) numpy does not promise
that `Generator` streams stay the same across numpy releases, so exact resumption assumes the same
numpy version.

Packed windows. A window holds one or more document segments (see data/pipeline.py; positions
restart at 0 at each document start and at the window start). Both samplers treat every segment
as an independent sequence: its positions are drawn on their own, from 0, as if the segment were
the whole example. Relative distances across documents never matter (attention is masked there).

randomized -- Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of
  Transformers", arXiv 2305.16843, Sec. 3. A segment of n tokens gets a sorted subset of n distinct
  positions drawn uniformly without replacement from [0, max_position).
  Ours vs. the released code (github.com/google-deepmind/randomized_positional_encodings,
  models/positional_encodings.py and models/transformer.py):
  * Granularity. The released code draws one subset per forward pass and shares it by every example
    of the batch (`jrandom.choice(..., shape=(sequence_length,))` ignores the batch axis). We draw
    per example and per document segment: more independent draws per step, with the same
    distribution for each sequence.
  * Layers. For schemes applied to the embeddings (NOISY_SIN_COS, NOISY_LEARNT) the released code
    draws once per forward pass, so all layers see one draw. For schemes applied inside attention
    (NOISY_ROTARY, NOISY_RELATIVE, NOISY_ALIBI) each attention layer calls `hk.next_rng_key()`
    itself, so every layer gets a fresh draw (within a layer, queries and keys share one key). Ours
    draws once per example and every layer sees the same positions, whatever the scheme. The
    pipeline produces one `positions` array per token that all schemes read, and one shared
    position per token matches Sec. 3's description (positions for the sequence are sampled, then
    fed to the encoding). Redrawing per layer would need a hook inside every scheme.
  * Evaluation. The released range evaluation calls the model with a fresh RNG key, so it also
    samples positions at test time. Ours evaluates on true positions 0..n-1 (the project's rule
    for all samplers). The model is then tested on denser positions than it trained on: training
    spacing averages max_position / n. Keep this in mind when comparing with the paper's numbers.

pose -- Zhu et al., "PoSE: Efficient Context Window Extension of LLMs via Positional Skip-wise
  Training", arXiv 2309.10400, Sec. 3.2. A segment of n tokens is cut into k = min(num_chunks, n)
  contiguous, non-empty chunks. Chunk c keeps consecutive positions but is shifted by a skip u_c:
    position(t) = t + u_{chunk(t)},  u_0 = 0,  u_c ~ U{u_{c-1}, ..., max_position - n}  (c >= 1),
  so skips are non-decreasing, positions strictly increase, and the largest position
  n - 1 + u_{k-1} <= max_position - 1: relative distances up to max_position - 1 are seen.
  * Skips. These are the paper's sequential uniform draws, u_c ~ U(S) with
    S = {u_{c-1}, ..., L_t - L_c}, where L_t = max_position and L_c = n (the segment's own length,
    so short segments may skip further). u_0 = 0 follows the released code
    (github.com/dwzhu-pku/PoSE, src/train_pose.py: `lt = 0`, "makes the coverage possibility more
    uniform for large relative positions"). So num_chunks = 1 is the identity.
  * Chunk lengths. These are random, as in the paper and code. The k - 1 cut points are drawn
    uniformly without replacement from {1, ..., n - 1}. The released code has k = 2 only and draws
    the first chunk's length from {1, ..., ceil(n / 2)}; we draw it from {1, ..., n - 1}, a rule
    that extends to any k.
  * Content. The text stays the window's contiguous tokens; only position ids skip. The released
    code also takes the second chunk's tokens from a random later offset of a longer document. A
    fixed-size packed window has no such text to draw from.

cream -- Wu et al., arXiv 2406.07138 (CREAM): head and tail at the two ends of [0, max_position),
  the middle placed by a Gaussian around the target's middle. Its own module: data/cream.py.

endprompt -- arXiv 2605.14589 (EndPrompt): the last `endprompt_length` tokens of a segment moved
  to the end of [0, max_position). Its own module: data/endprompt.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from configs.errors import ConfigError, choice
from data.sampler_base import PositionSampler, segment_bounds  # noqa: F401 -- re-exported

KINDS = ("none", "randomized", "pose", "cream", "endprompt")


def randomized_segment(n: int, max_position: int, rng: np.random.Generator) -> np.ndarray:
  """Sorted distinct positions for a sequence of n tokens (Ruoss et al., arXiv 2305.16843, Sec. 3).

  Args:
    n: tokens in the sequence (0 <= n <= max_position).
    max_position: positions are drawn from [0, max_position).
    rng: the example's generator.

  Returns:
    int32 [n], strictly increasing, in [0, max_position).

  Raises:
    ValueError: n > max_position (not enough distinct positions).
  """
  if n > max_position:
    raise ValueError(f"cannot draw {n} distinct positions below max_position={max_position}")
  return np.sort(rng.choice(max_position, size=n, replace=False, shuffle=False)).astype(np.int32)


def pose_segment(n: int, num_chunks: int, max_position: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Skip-wise positions for one sequence of n tokens (Zhu et al., arXiv 2309.10400, Sec. 3.2).

  See the module docstring for the rule: k = min(num_chunks, n) chunks with random cut points,
  u_0 = 0 and u_c ~ U{u_{c-1}, ..., max_position - n}.

  Args:
    n: tokens in the sequence (1 <= n <= max_position).
    num_chunks: chunks requested (>= 1).
    max_position: every position stays below this.
    rng: the example's generator.

  Returns:
    positions: int32 [n], strictly increasing, in [0, max_position).
    chunk_ids: int32 [n], the chunk of each token (0..k-1, non-decreasing).
    skips: int64 [k], u_c per chunk, non-decreasing, u_0 = 0.

  Raises:
    ValueError: n < 1, num_chunks < 1 or n > max_position.
  """
  if n < 1 or num_chunks < 1 or n > max_position:
    raise ValueError(f"pose needs 1 <= n <= max_position and num_chunks >= 1; got n={n}, "
                     f"num_chunks={num_chunks}, max_position={max_position}")
  k = min(num_chunks, n)
  cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False, shuffle=False))
  chunk_ids = np.zeros(n, np.int32)
  chunk_ids[cuts] = 1
  chunk_ids = np.cumsum(chunk_ids).astype(np.int32)
  max_skip = max_position - n
  skips = np.zeros(k, np.int64)
  for c in range(1, k):
    skips[c] = rng.integers(skips[c - 1], max_skip, endpoint=True)
  positions = (np.arange(n) + skips[chunk_ids]).astype(np.int32)
  return positions, chunk_ids, skips


@dataclasses.dataclass(frozen=True)
class RandomizedPositions(PositionSampler):
  """Randomized positional encodings (Ruoss et al., arXiv 2305.16843, Sec. 3): per segment of n
  tokens, n sorted distinct positions drawn uniformly from [0, max_position)."""

  def segment_positions(self, n, rng):
    return randomized_segment(n, self.max_position, rng)


@dataclasses.dataclass(frozen=True)
class PoSEPositions(PositionSampler):
  """Positional skip-wise training (Zhu et al., arXiv 2309.10400, Sec. 3.2): per segment,
  `num_chunks` contiguous chunks shifted by non-decreasing random skips, all below max_position.

  Attributes:
    num_chunks: chunks per segment (fewer when a segment is shorter than this).
  """

  num_chunks: int = 2

  def segment_positions(self, n, rng):
    return pose_segment(n, self.num_chunks, self.max_position, rng)[0]


def _is_int(value) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def resolved_max_position(cfg, train_len: int) -> int:
  """`cfg.max_position`, or 4 * train_len when it is -1 (tokens)."""
  return 4 * train_len if cfg.max_position == -1 else int(cfg.max_position)


def _check_extension_fields(cfg) -> None:
  """The cream_* and endprompt_* fields (data/cream.py, data/endprompt.py); absent = default."""
  from data import cream, endprompt  # imported on use: they import data.sampler_base
  k = cfg.get("cream_k", -1)
  if not (_is_int(k) and (k == -1 or k >= 0)):
    raise ConfigError(f"data.position_sampler.cream_k must be -1 (= 4 x the factor, the released "
                      f"code) or an integer >= 0; got {k!r}")
  sigma = cfg.get("cream_sigma", 3.0)
  if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 < sigma < float("inf"):
    raise ConfigError(f"data.position_sampler.cream_sigma must be a finite number > 0; "
                      f"got {sigma!r}")
  choice(cfg.get("cream_truncation", "clip"), "data.position_sampler.cream_truncation",
         cream.TRUNCATIONS)
  length = cfg.get("endprompt_length", 20)
  if not (_is_int(length) and length >= 1):
    raise ConfigError(f"data.position_sampler.endprompt_length must be an integer >= 1; "
                      f"got {length!r}")
  choice(cfg.get("endprompt_anchor", "end"), "data.position_sampler.endprompt_anchor",
         endprompt.ANCHORS)


def check_config(cfg, train_len: int, model_position=None) -> None:
  """Validates `data.position_sampler` (kind, max_position, num_chunks, seed, cream_*,
  endprompt_*).

  Args:
    cfg: the `data.position_sampler` ConfigDict.
    train_len: `data.train_len`, tokens.
    model_position: optional `model.position`; with it, a non-clamped learned table smaller than
      max_position is refused (its lookup would fall off the table during training).

  Raises:
    ConfigError: one line naming the field and the allowed values.
  """
  if cfg.kind not in KINDS:
    raise ConfigError(f"data.position_sampler.kind={cfg.kind!r} is not supported; "
                      f"choose one of {list(KINDS)}")
  if not (_is_int(cfg.max_position) and (cfg.max_position == -1 or cfg.max_position >= train_len)):
    raise ConfigError(f"data.position_sampler.max_position must be -1 (= 4 * train_len) or an "
                      f"integer >= data.train_len={train_len}; got {cfg.max_position!r}")
  if not (_is_int(cfg.num_chunks) and cfg.num_chunks >= 1):
    raise ConfigError(f"data.position_sampler.num_chunks must be an integer >= 1; "
                      f"got {cfg.num_chunks!r}")
  if not (_is_int(cfg.seed) and cfg.seed >= 0):
    raise ConfigError(f"data.position_sampler.seed must be an integer >= 0; got {cfg.seed!r}")
  _check_extension_fields(cfg)
  if cfg.kind != "none" and model_position is not None and model_position.get("kind") in (
      "abacus", "bipe_rope", "bipe_alibi"):  # data/position_layouts.py decides their positions
    raise ConfigError(f"data.position_sampler.kind={cfg.kind!r} cannot be combined with "
                      f"model.position.kind={model_position.get('kind')!r}, whose positions come "
                      "from its position layout (data/position_layouts.py); set "
                      "data.position_sampler.kind='none'")
  if cfg.kind == "none" or model_position is None or model_position.get("kind") != "learned":
    return
  max_len = model_position.get("max_len", -1)
  rows = train_len if max_len == -1 else max_len
  max_position = resolved_max_position(cfg, train_len)
  if not model_position.get("clamp", False) and rows < max_position:
    raise ConfigError(f"data.position_sampler.max_position={max_position} exceeds the learned "
                      f"table's {rows} rows; set model.position.max_len >= {max_position} "
                      "or lower data.position_sampler.max_position")


def make_sampler(cfg, train_len: int) -> PositionSampler | None:
  """Builds the configured training-time position sampler.

  Args:
    cfg: the `data.position_sampler` ConfigDict (kind, max_position, num_chunks, seed).
    train_len: `data.train_len`, tokens.

  Returns:
    None for kind "none"; else a `RandomizedPositions`, `PoSEPositions`, `cream.CREAMPositions`
    or `endprompt.EndPromptPositions` for use as `data.pipeline.train_dataset(..., sampler=...)`.

  Raises:
    ConfigError: as `check_config`.
  """
  check_config(cfg, train_len)
  max_position = resolved_max_position(cfg, train_len)
  if cfg.kind == "randomized":
    return RandomizedPositions(max_position=max_position, seed=int(cfg.seed))
  if cfg.kind == "pose":
    return PoSEPositions(max_position=max_position, seed=int(cfg.seed),
                         num_chunks=int(cfg.num_chunks))
  if cfg.kind == "cream":
    from data import cream
    return cream.CREAMPositions(max_position=max_position, seed=int(cfg.seed),
                                k=int(cfg.get("cream_k", -1)),
                                sigma=float(cfg.get("cream_sigma", 3.0)),
                                truncation=str(cfg.get("cream_truncation", "clip")))
  if cfg.kind == "endprompt":
    from data import endprompt
    return endprompt.EndPromptPositions(max_position=max_position, seed=int(cfg.seed),
                                        length=int(cfg.get("endprompt_length", 20)),
                                        anchor=str(cfg.get("endprompt_anchor", "end")))
  return None
