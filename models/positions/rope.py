"""RoPE: rotary position embedding of queries and keys.

Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv 2104.09864,
Eq. (34): pairs of query/key features are rotated by angle `m * theta_i` with
`theta_i = rope_theta^(-2i/d)`, so `<R(m) q, R(n) k>` depends on m - n only.

Layout: "half split" (GPT-NeoX / Llama): feature i pairs with feature i + d_rot/2. Partial
rotary (GPT-NeoX, GPT-J: `rotary_fraction`) rotates only the first
`d_rot = 2 * floor(rotary_fraction * head_dim / 2)` features, with the full frequency range
theta^(-2i/d_rot) spread over them, and leaves the rest bit-identical. That is not p-RoPE as
Barbero et al. (arXiv 2410.06205) define it, which keeps the frequencies of full RoPE and sets the
lowest ones to zero: kind "p_rope" (models/positions/p_rope.py). Subclasses change the
frequencies through `frequency_transform` (p_rope, hope, resonance_rope).
Angles are computed in float32 whatever the compute dtype.

Mixed RoPE (config `model.position`): `nope_every = N > 0` makes layers N-1, 2N-1, ... (0-based)
NoPE layers that return q and k unrotated, as in Llama 4's interleaved NoPE layers and SWAN-GPT
(arXiv 2504.08719). `rope_theta_per_layer` gives layer l its own base (one value
per layer, exactly `model.num_layers` values; `()` = `rope_theta` everywhere; values of NoPE layers
are validated but unused). With both off, every layer computes exactly what plain RoPE computes.

Context extension (`model.position.rope_scaling`, see `models/rope_scaling.py`): "pi" (positions
times 1/s), "ntk", "yarn", "abf" and "llama3" (other inverse frequencies; YaRN also multiplies q
and k by its attention factor), "dynamic_ntk" (frequencies rescaled from the length of each call)
and "longrope" (per-pair rescaled frequencies, short or long by the length of each call, an
attention factor on q and k, and optionally the first n-hat positions rotated as plain RoPE).
They apply to every rotary layer with that layer's base; NoPE layers still return q and k
unchanged. With "none" (the default, also when the field is absent) the computation is exactly
the plain one. Dynamic NTK, Dynamic-YaRN ("dynamic_yarn": YaRN's frequencies and attention factor
at s = max(1, l/L) per row, plain RoPE bit for bit up to L) and LongRoPE take the current length l of batch row b as 1 + the
largest position of that row over `q_positions` and `k_positions`. `models/attention.py` rotates
the full q and k once, before query chunking, so l is the whole window's (the longest document's
under packing), the same with or without chunking, and q and k of a row share the frequencies. A
row's result does not depend on the other rows of its batch. (Under KV-cache decoding the keys are
re-rotated every step with the current l; see models/attention.py.)

Periodic RoPE (`rope_position_period` P > 0; MiniWin, Huo, "Periodic RoPE for Infinite Context
LLMs", arXiv 2605.27980, and its released model/model_miniwin.py): every rotary layer rotates by
position mod P, in prefill and in cached decoding alike (the released code's `arange(seq) % W` and
`start_pos % W`). With P = the sliding window of the rotary layers (configs/miniwin_tiny.py) no
rotary layer sees a rotation it did not see in training; a key across the wrap point is rotated
by the offset i - j - P, not i - j, as in the released code. Needs `rope_scaling="none"`.

STRING's attention factor (`model.position.string_attention_factor`, with
`position_transform="string"`; models/position_transforms.py): q and k times the factor, as the
STRING authors' Llama code multiplies cos and sin by 0.1 ln 2 + 1.

The LongRoPE factor search (sweeps/longrope_search.py) reuses one compiled forward for every
candidate: see `RoPE.set_search_frequencies`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models import context_parallel, position_transforms, rope_frequencies, rope_scaling
from models.kernels.spec import KernelSpec
from models.positions.base import Dims, PositionalScheme


def rotary_dim(head_dim: int, rotary_fraction: float) -> int:
  """Number of rotated features: the largest even number <= rotary_fraction * head_dim."""
  return 2 * int(rotary_fraction * head_dim / 2)


def rope_inv_freq(rot_dim: int, rope_theta: float) -> np.ndarray:
  """Inverse frequencies `rope_theta^(-2i/rot_dim)`, i = 0..rot_dim/2-1 (float32 [rot_dim/2])."""
  return (1.0 / rope_theta ** (np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)).astype(np.float32)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
  """Rotates the first `2 * inv_freq.shape[-1]` features of x (half-split layout).

  Args:
    x: [batch, seq, heads, head_dim], any float dtype.
    positions: int32 or float32 [batch, seq] position ids (float allows interpolated positions).
    inv_freq: float32 [rot_dim / 2] inverse frequencies (radians per position), or
      [batch, 1, rot_dim / 2] for frequencies per batch row (dynamic NTK).

  Returns:
    Array like x; features >= rot_dim are returned unchanged (bit-identical).
  """
  half = inv_freq.shape[-1]
  rot = 2 * half
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [b, s, half]
  cos = jnp.cos(angles)[:, :, None, :]
  sin = jnp.sin(angles)[:, :, None, :]
  x1 = x[..., :half].astype(jnp.float32)
  x2 = x[..., half:rot].astype(jnp.float32)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)
  if rot == x.shape[-1]:
    return rotated
  return jnp.concatenate([rotated, x[..., rot:]], axis=-1)


def is_nope_layer(layer: int, nope_every: int) -> bool:
  """True if 0-based `layer` applies no rotation: layers N-1, 2N-1, ... for nope_every = N > 0.

  Interleaved NoPE as in SWAN-GPT (arXiv 2504.08719) and Llama 4; nope_every = 0 means none.
  """
  return nope_every > 0 and (layer + 1) % nope_every == 0


def _is_number(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def base_frequencies(config) -> np.ndarray:
  """theta_i = rope_theta^(-2i/rot_dim) of an experiment config's RoPE, as every rotary layer
  starts from (`rope_frequencies.base_inv_freq`); LongRoPE's factor search divides them by its
  candidate rescale factors lambda_i and passes the result to `RoPE.set_search_frequencies`.

  Args:
    config: the experiment ConfigDict (model.head_dim / d_model / num_heads, model.position's
      rotary_fraction, rope_theta and rope_theta_per_layer).

  Returns:
    float32 [rot_dim/2] radians per position, or [num_layers, rot_dim/2] (one row per layer's
    base) with `rope_theta_per_layer`.
  """
  pos = config.model.position
  rot = rotary_dim(Dims.from_config(config).head_dim, pos.rotary_fraction)
  thetas = tuple(pos.get("rope_theta_per_layer", ()) or ())
  if thetas:
    return np.stack([rope_frequencies.base_inv_freq(rot, float(t)) for t in thetas])
  return rope_frequencies.base_inv_freq(rot, float(pos.rope_theta))


def _frozen(freqs) -> tuple[float, ...] | None:
  return None if freqs is None else tuple(float(f) for f in freqs)  # static, hashable


class RoPE(PositionalScheme):
  """Rotary embedding (Su et al., arXiv 2104.09864) with `rope_theta` and `rotary_fraction`, and
  optionally interleaved NoPE layers (`nope_every`; arXiv 2504.08719), one base per layer
  (`rope_theta_per_layer`), a context-extension method (`rope_scaling` and its fields; see
  `models/rope_scaling.py`) and STRING's attention factor, all from config `model.position`.

  A Decoder (models/decoder.py) keeps its scheme as `model.position`, the one object every layer's
  attention calls, so a method called on it (`set_search_frequencies`) acts on every layer.
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "rope_theta": (10000.0, "base of the inverse frequencies."),
      "rotary_fraction": (1.0, "share of head_dim that rotates (partial RoPE)."),
      "nope_every": (0, "layers N-1, 2N-1, ... use no rotation; 0 = none."),
      "rope_theta_per_layer": ((), "one rope_theta per layer; () = rope_theta everywhere."),
      "rope_heads": (-1, "RoPE on the first N heads only, the rest NoPE; -1 = every head."),
      "rope_position_period": (0, "rotate by position mod P (MiniWin's periodic RoPE); 0 = off."),
      **rope_scaling.CONFIG_FIELDS,  # rope_scaling and its parameters (models/rope_scaling.py)
  }

  @classmethod
  def check_config(cls, cfg, dims):
    if not 0 < cfg.rotary_fraction <= 1:
      raise ConfigError(f"model.position.rotary_fraction must lie in (0, 1]; got {cfg.rotary_fraction}")
    if rotary_dim(dims.head_dim, cfg.rotary_fraction) < 2:
      raise ConfigError(f"model.position.rotary_fraction={cfg.rotary_fraction} rotates no feature "
                        f"pair of head_dim={dims.head_dim}")
    if not cfg.rope_theta > 1:
      raise ConfigError(f"model.position.rope_theta must be > 1; got {cfg.rope_theta}")
    nope_every = cfg.get("nope_every", 0)
    if not (isinstance(nope_every, (int, np.integer)) and not isinstance(nope_every, bool)
            and nope_every >= 0):
      raise ConfigError(f"model.position.nope_every must be an integer >= 0 (0 = no NoPE layer); "
                        f"got {nope_every!r}")
    thetas = cfg.get("rope_theta_per_layer", ())
    if not isinstance(thetas, (tuple, list)):
      raise ConfigError(f"model.position.rope_theta_per_layer must be a tuple of numbers > 1 "
                        f"(or () for rope_theta everywhere); got {thetas!r}")
    if thetas and len(thetas) != dims.num_layers:
      raise ConfigError(f"model.position.rope_theta_per_layer needs exactly model.num_layers="
                        f"{dims.num_layers} values (or () for rope_theta everywhere); "
                        f"got {len(thetas)}")
    for i, theta in enumerate(thetas):
      if not (_is_number(theta) and theta > 1):
        raise ConfigError(f"model.position.rope_theta_per_layer[{i}] must be a number > 1; "
                          f"got {theta!r}")
    heads = cfg.get("rope_heads", -1)
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or not (
        heads == -1 or 0 <= heads <= dims.num_heads):
      raise ConfigError(f"model.position.rope_heads must be -1 (every head) or a head count in "
                        f"0..model.num_heads={dims.num_heads}; got {heads!r}")
    rope_scaling.check_config(cfg, rotary_dim(dims.head_dim, cfg.rotary_fraction))
    if cfg.get("rope_position_period", 0) and cfg.get("rope_scaling", "none") != "none":
      raise ConfigError(f"model.position.rope_position_period={cfg.rope_position_period} needs "
                        f"rope_scaling='none' (a period and a rescaling of the positions do not "
                        f"compose); got rope_scaling={cfg.rope_scaling!r}")

  @classmethod
  def frequency_transform(cls, cfg, dims, inv_freq: np.ndarray) -> np.ndarray:
    """The inverse frequencies a variant rotates with, from RoPE's (after any `rope_scaling`).

    RoPE's own: unchanged. Subclasses (p_rope, hope, resonance_rope) override it; a frequency
    set to 0 leaves its feature pair unrotated, bit for bit.

    Args:
      cfg: `model.position`; dims: see `Dims`.
      inv_freq: float32 [rot_dim/2] radians per position, pair 0 the highest frequency.

    Returns:
      float32 [rot_dim/2].
    """
    del cfg, dims
    return inv_freq

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (rope_theta, rotary_fraction, nope_every, rope_theta_per_layer,
    rope_scaling and its fields, position_transform and string_attention_factor); dims: see
    `Dims`."""
    del rngs
    rot = rotary_dim(dims.head_dim, cfg.rotary_fraction)
    transform = lambda f: None if f is None else np.asarray(  # noqa: E731
        type(self).frequency_transform(cfg, dims, np.asarray(f, np.float32)), np.float32)
    _plain = lambda theta: transform(rope_inv_freq(rot, theta))  # noqa: E731
    self.rot_dim, self.num_layers = rot, dims.num_layers
    # MiniWin's periodic RoPE (arXiv 2605.27980; released model/model_miniwin.py): every rotary
    # layer rotates by position mod P, so a key j seen from query i is rotated by the offset
    # (i mod P) - (j mod P): i - j, or i - j - P across a wrap. 0 = plain positions.
    self.position_period = int(cfg.get("rope_position_period", 0) or 0)
    heads = int(cfg.get("rope_heads", -1))
    # Heads 0..rope_heads-1 rotate, the others keep q and k as they are (NoPE heads): a head-wise
    # form of the RoPE/NoPE hybrid that "RoPE to NoPE and back" (arXiv 2501.18795) builds from
    # whole layers (`nope_every`); -1 = all heads.
    self.rope_heads = -1 if heads in (-1, dims.num_heads) else heads
    self.per_head_rotation = self.rope_heads != -1  # base.PositionalScheme.per_head_rotation
    thetas = tuple(cfg.get("rope_theta_per_layer", ()) or ())
    nope_every = int(cfg.get("nope_every", 0) or 0)
    if cfg.get("rope_scaling", "none") == "none":
      scaled = lambda theta: rope_scaling.ScaledRope(rope_inv_freq(rot, theta))  # noqa: E731
    else:
      scaled = lambda theta: rope_scaling.scaled_rope(cfg, rot, theta, dims.train_len)  # noqa: E731
    first = scaled(float(cfg.rope_theta))
    # Context extension: positions are multiplied by position_scale, q and k by qk_scale (and by
    # STRING's string_scale); dynamic_train_len > 0 rescales the frequencies per call (dynamic
    # NTK); long_train_len > 0 switches rows longer than it to the long frequencies (LongRoPE),
    # keep_first > 0 rotates positions below it as plain RoPE. 1, 1, 0, 0, 0 = none.
    self.position_scale, self.qk_scale = first.position_scale, first.qk_scale
    self.dynamic_train_len, self.dynamic_alpha = first.dynamic_train_len, first.dynamic_alpha
    self.long_train_len, self.keep_first = first.long_train_len, first.keep_first
    self.dynamic_yarn = first.dynamic_yarn  # (gamma, m, m_all, fixed factor) or None
    self.string_scale = position_transforms.string_attention_scale(cfg)
    self.search_long_inv_freq = None  # set by set_search_frequencies (a jax array) only
    self.search_short_inv_freq = None  # the same for the short rows (rows="short")
    self.inv_freq = _frozen(transform(first.inv_freq))
    self.long_inv_freq = _frozen(transform(first.long_inv_freq))
    self.plain_inv_freq = _frozen(_plain(cfg.rope_theta)) if self.keep_first else None
    # Per layer: None (a NoPE layer) or its frequencies; None overall = the same in every layer.
    self.layer_inv_freq = self.layer_long_inv_freq = self.layer_plain_inv_freq = None
    if thetas or nope_every:
      per = [None if is_nope_layer(i, nope_every) else scaled(float(thetas[i])) if thetas else first
             for i in range(dims.num_layers)]
      base = [None if p is None else float(thetas[i]) if thetas else float(cfg.rope_theta)
              for i, p in enumerate(per)]
      self.layer_inv_freq = tuple(None if p is None else _frozen(transform(p.inv_freq))
                                  for p in per)
      if self.long_train_len:
        self.layer_long_inv_freq = tuple(None if p is None else _frozen(transform(p.long_inv_freq))
                                         for p in per)
      if self.keep_first:
        self.layer_plain_inv_freq = tuple(None if b is None else _frozen(_plain(b)) for b in base)

  def set_search_frequencies(self, long_inv_freq, rows: str = "long") -> None:
    """Replaces, on this scheme object, the long-factor frequencies (rows with l > L) of every
    rotary layer -- or with rows="short" the short-factor ones (rows with l <= L) -- : the
    LongRoPE factor search (sweeps/longrope_search.py, --factors_for) scores candidates with
    one compiled forward.

    Needs a model built with rope_scaling="longrope" (any valid longrope_long_factors, e.g.
    (rope_scaling_factor,) * (rot_dim/2), as placeholders); position_scale, the attention factor
    (longrope_attention_factor or the derived sqrt(1 + ln s / ln L)), keep_first, the short
    factors and the row switch at L stay as configured. Typical use, inside `jax.jit`:

        model = nnx.merge(graphdef, params)     # a models.decoder.Decoder
        model.position.set_search_frequencies(theta / lam)   # theta = base_frequencies(config)
        logits = model(tokens, positions, segment_ids)

    where `model.position` is the Decoder's scheme (this object). A freshly merged model holds no
    search frequencies, so each merge starts from the configured ones. Outside `jax.jit` it works
    the same (eagerly); the array is kept as an `nnx.data` attribute, not a Variable, so a model
    split after the call carries it in its state.

    Args:
      long_inv_freq: float32 [rot_dim/2] inverse frequencies theta_i / lambda_i (radians per
        position), the same for every rotary layer, or [num_layers, rot_dim/2], one row per layer
        (rows of NoPE layers are unused); may be a traced jax array.
      rows: "long" (l > L) or "short" (l <= L): which of LongRoPE's two frequency sets to replace.

    Raises:
      ValueError: the model is not LongRoPE, the shape is neither of the above, or `rows` is
        neither "long" nor "short".
    """
    if not self.long_train_len:
      raise ValueError("set_search_frequencies needs a RoPE built with "
                       "model.position.rope_scaling='longrope'")
    freqs = jnp.asarray(long_inv_freq, jnp.float32)
    half = self.rot_dim // 2
    if freqs.shape not in ((half,), (self.num_layers, half)):
      raise ValueError(f"long_inv_freq must have shape ({half},) or ({self.num_layers}, {half}); "
                       f"got {freqs.shape}")
    if rows not in ("long", "short"):
      raise ValueError(f"rows must be 'long' or 'short'; got {rows!r}")
    # a data attribute (may be traced)
    setattr(self, f"search_{rows}_inv_freq", nnx.data(freqs))

  def _frequencies(self, layer, q_positions, k_positions):
    """This layer's inverse frequencies: None (a NoPE layer), float32 [rot_dim/2], or
    [batch, rot_dim/2] per row (dynamic NTK; LongRoPE) from l = 1 + max(q, k positions)."""
    inv = self.inv_freq if self.layer_inv_freq is None else self.layer_inv_freq[layer]
    if inv is None:
      return None
    inv_freq = jnp.asarray(inv, jnp.float32)
    if not (self.dynamic_train_len or self.long_train_len):
      return inv_freq
    if self.search_short_inv_freq is not None:  # LongRoPE's short-factor search
      search = self.search_short_inv_freq
      inv_freq = search if search.ndim == 1 else search[layer]
    length = self._row_length(q_positions, k_positions)
    if self.dynamic_yarn is not None:
      return rope_frequencies.dynamic_yarn_inv_freq(inv_freq, np.asarray(self.dynamic_yarn[0]),
                                                    length, self.dynamic_train_len)
    if self.dynamic_train_len:
      return rope_frequencies.dynamic_ntk_inv_freq(inv_freq, length, self.dynamic_train_len,
                                                   self.dynamic_alpha)
    if self.search_long_inv_freq is not None:
      search = self.search_long_inv_freq
      long = search if search.ndim == 1 else search[layer]
    else:
      table = self.layer_long_inv_freq
      long = self.long_inv_freq if table is None else table[layer]
    return rope_frequencies.longrope_row_inv_freq(inv_freq, long, length, self.long_train_len)

  @staticmethod
  def _row_length(q_positions, k_positions):
    """l per batch row: 1 + the largest position over queries (of the whole sequence under
    context parallelism) and keys; int32 [b]."""
    q_max = context_parallel.sequence_max(q_positions.max(axis=-1))
    return jnp.maximum(q_max, k_positions.max(axis=-1)) + 1

  def rotate(self, q, k, q_positions, k_positions, layer):
    """q: [b, q_len, H, D], k: [b, k_len, H, D]; positions int32 [b, len] -> rotated (q, k).

    `layer` (static int, 0..num_layers-1) selects the layer's base; a NoPE layer returns q, k.
    With `rope_position_period` P > 0 both position arrays are taken mod P first (MiniWin).
    Under `rope_scaling` (see the module docstring): PI rotates by positions * (1/s), dynamic NTK
    and LongRoPE use the frequencies of each row's length 1 + max(q_positions, k_positions),
    YaRN and LongRoPE multiply the rotated q and k (all head_dim features) by their attention
    factor, LongRoPE's keep_first rotates positions below it with the plain frequencies and no
    factor; STRING's factor multiplies every position's q and k. Outputs keep q's/k's dtype.
    """
    if self.position_period:
      q_positions, k_positions = (jnp.mod(p, self.position_period)
                                  for p in (q_positions, k_positions))
    if self.rope_heads != -1:
      return self._on_heads(q, k, self._rotate(q, k, q_positions, k_positions, layer))
    return self._rotate(q, k, q_positions, k_positions, layer)

  def _on_heads(self, q, k, rotated):
    """`rotated` (q, k) on heads < rope_heads, the input q, k on the others."""
    keep = (jnp.arange(q.shape[2]) < self.rope_heads)[None, None, :, None]
    return jnp.where(keep, rotated[0], q), jnp.where(keep, rotated[1], k)

  def _rotate(self, q, k, q_positions, k_positions, layer):
    """`rotate` on every head."""
    inv_freq = self._frequencies(layer, q_positions, k_positions)
    if inv_freq is None:
      return q, k
    scale = self.qk_scale * self.string_scale
    if (self.position_scale == 1.0 and scale == 1.0 and inv_freq.ndim == 1
        and not self.keep_first):
      return apply_rope(q, q_positions, inv_freq), apply_rope(k, k_positions, inv_freq)
    if inv_freq.ndim == 2:
      inv_freq = inv_freq[:, None, :]  # [b, 1, rot_dim/2]
    qp, kp = q_positions, k_positions
    if self.position_scale != 1.0:
      qp = q_positions.astype(jnp.float32) * jnp.float32(self.position_scale)
      kp = k_positions.astype(jnp.float32) * jnp.float32(self.position_scale)
    qr, kr = apply_rope(q, qp, inv_freq), apply_rope(k, kp, inv_freq)
    if self.dynamic_yarn is not None:  # the attention factor of each row's s' (1 up to L)
      _, m, m_all, fixed = self.dynamic_yarn
      row = rope_frequencies.dynamic_yarn_attention_factor(
          self._row_length(q_positions, k_positions), self.dynamic_train_len, m, m_all, fixed)
      row = (row * scale)[:, None, None, None]
      qr, kr = (qr * row).astype(q.dtype), (kr * row).astype(k.dtype)
    elif scale != 1.0:
      qr, kr = qr * jnp.asarray(scale, q.dtype), kr * jnp.asarray(scale, k.dtype)
    if self.keep_first:  # LongRoPE's n-hat: the first positions as plain RoPE (and STRING's factor)
      plain = self.plain_inv_freq if self.layer_plain_inv_freq is None else (
          self.layer_plain_inv_freq[layer])
      plain = jnp.asarray(plain, jnp.float32)
      qr, kr = (jnp.where((pos < self.keep_first)[:, :, None, None],
                          self._string(apply_rope(x, pos, plain)), rotated)
                for x, pos, rotated in ((q, q_positions, qr), (k, k_positions, kr)))
    return qr, kr

  def _string(self, x):
    return x if self.string_scale == 1.0 else x * jnp.asarray(self.string_scale, x.dtype)

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  def kernel_spec(self, layer, q_positions, k_positions):
    """`rotate` as kernel parameters: this layer's inverse frequencies (per batch row under
    dynamic NTK and LongRoPE, from the same row lengths as `rotate`), PI's position scale, the
    q/k scale (YaRN, LongRoPE, STRING); a NoPE layer rotates nothing. LongRoPE's keep_first has
    no kernel form (two frequency sets by position): a reason string, so attention falls back to
    XLA. See PositionalScheme.kernel_spec."""
    inv_freq = self._frequencies(layer, q_positions, k_positions)
    if inv_freq is None:
      return KernelSpec()
    if self.position_period:
      return (f"RoPE with model.position.rope_position_period={self.position_period} (positions "
              "taken mod P, which a KernelSpec cannot say)")
    if self.rope_heads != -1:
      return (f"RoPE with model.position.rope_heads={self.rope_heads} (rotation on some heads "
              "only, which a KernelSpec cannot say)")
    if self.dynamic_yarn is not None:
      return ("RoPE with model.position.rope_scaling='dynamic_yarn' (a q/k factor per batch row, "
              "which a KernelSpec's one qk_scale cannot say)")
    if self.keep_first:
      return (f"RoPE with model.position.longrope_keep_first={self.keep_first} (positions below it "
              "are rotated with other frequencies than the rest, which a KernelSpec cannot say)")
    return KernelSpec(inv_freq=inv_freq, position_scale=self.position_scale,
                      qk_scale=self.qk_scale * self.string_scale)
  # ---- end fused-kernel capability ----
