"""RoPE: rotary position embedding of queries and keys.

Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv 2104.09864,
Eq. (34): pairs of query/key features are rotated by angle `m * theta_i` with
`theta_i = rope_theta^(-2i/d)`, so `<R(m) q, R(n) k>` depends on m - n only.

Layout: "half split" (GPT-NeoX / Llama): feature i pairs with feature i + d_rot/2. Partial
RoPE (GPT-NeoX, GPT-J; "p-RoPE", Barbero et al. arXiv 2410.06205) rotates only the first
`d_rot = 2 * floor(rotary_fraction * head_dim / 2)` features and leaves the rest bit-identical.
Angles are computed in float32 whatever the compute dtype.

Mixed RoPE (config `model.position`): `nope_every = N > 0` makes layers N-1, 2N-1, ... (0-based)
NoPE layers that return q and k unrotated, as in Llama 4's interleaved NoPE layers and SWAN-GPT
(arXiv 2504.08719). `rope_theta_per_layer` gives layer l its own base (one value
per layer, exactly `model.num_layers` values; `()` = `rope_theta` everywhere; values of NoPE layers
are validated but unused). With both off, every layer computes exactly what plain RoPE computes.

Context extension (`model.position.rope_scaling`, see `models/rope_scaling.py`): "pi" (positions
times 1/s), "ntk", "yarn" and "abf" (other inverse frequencies; YaRN also multiplies q and k by
0.1 ln(s) + 1) and "dynamic_ntk" (frequencies rescaled from the length of each call). They apply
to every rotary layer with that layer's base; NoPE layers still return q and k unchanged. With
"none" (the default, also when the field is absent) the computation is exactly the plain one.
Dynamic NTK takes the current length l of batch row b as 1 + the largest position of that row
over `q_positions` and `k_positions`. `models/attention.py` rotates the full q and k once, before
query chunking, so l is the whole window's (the longest document's under packing), the same with
or without chunking, and q and k of a row share the frequencies. A row's result does not depend
on the other rows of its batch. (Keys cached from an earlier call, with an earlier l, would not
share them; this codebase has no key cache.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import ConfigError
from models import rope_scaling
from models.kernels.spec import KernelSpec
from models.positions.base import PositionalScheme


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


class RoPE(PositionalScheme):
  """Rotary embedding (Su et al., arXiv 2104.09864) with `rope_theta` and `rotary_fraction`, and
  optionally interleaved NoPE layers (`nope_every`; arXiv 2504.08719), one base per layer
  (`rope_theta_per_layer`) and a context-extension method (`rope_scaling` and its fields; see
  `models/rope_scaling.py`), all from config `model.position`.
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "rope_theta": (10000.0, "base of the inverse frequencies."),
      "rotary_fraction": (1.0, "share of head_dim that rotates (partial RoPE)."),
      "nope_every": (0, "layers N-1, 2N-1, ... use no rotation; 0 = none."),
      "rope_theta_per_layer": ((), "one rope_theta per layer; () = rope_theta everywhere."),
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
    rope_scaling.check_config(cfg, rotary_dim(dims.head_dim, cfg.rotary_fraction))

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (rope_theta, rotary_fraction, nope_every, rope_theta_per_layer,
    rope_scaling and its fields); dims: see `Dims`."""
    del rngs
    rot = rotary_dim(dims.head_dim, cfg.rotary_fraction)
    thetas = tuple(cfg.get("rope_theta_per_layer", ()) or ())
    nope_every = int(cfg.get("nope_every", 0) or 0)
    # Context extension: positions are multiplied by position_scale, q and k by qk_scale, and
    # dynamic_train_len > 0 rescales the frequencies per call (dynamic NTK); 1, 1, 0 = none.
    self.position_scale, self.qk_scale, self.dynamic_train_len = 1.0, 1.0, 0
    if cfg.get("rope_scaling", "none") == "none":
      freqs = lambda theta: rope_inv_freq(rot, theta)
    else:
      scaled = rope_scaling.scaled_rope(cfg, rot, float(cfg.rope_theta), dims.train_len)
      self.position_scale, self.qk_scale = scaled.position_scale, scaled.qk_scale
      self.dynamic_train_len = scaled.dynamic_train_len
      freqs = lambda theta: rope_scaling.scaled_rope(cfg, rot, theta, dims.train_len).inv_freq
    # Static, hashable tuples of floats.
    self.inv_freq = tuple(float(f) for f in freqs(cfg.rope_theta))
    # Per layer: None (a NoPE layer) or its inverse frequencies; None overall = plain RoPE.
    self.layer_inv_freq = None
    if thetas or nope_every:
      self.layer_inv_freq = tuple(
          None if is_nope_layer(i, nope_every)
          else tuple(float(f) for f in freqs(float(thetas[i]))) if thetas
          else self.inv_freq
          for i in range(dims.num_layers))

  def rotate(self, q, k, q_positions, k_positions, layer):
    """q: [b, q_len, H, D], k: [b, k_len, H, D]; positions int32 [b, len] -> rotated (q, k).

    `layer` (static int, 0..num_layers-1) selects the layer's base; a NoPE layer returns q, k.
    Under `rope_scaling` (see the module docstring): PI rotates by positions * (1/s), dynamic NTK
    uses the frequencies of each row's length 1 + max(q_positions, k_positions), YaRN multiplies
    the rotated q and k (all head_dim features) by 0.1 ln(s) + 1; outputs keep q's/k's dtype.
    """
    inv = self.inv_freq if self.layer_inv_freq is None else self.layer_inv_freq[layer]
    if inv is None:
      return q, k
    inv_freq = jnp.asarray(inv, jnp.float32)
    if self.position_scale == 1.0 and self.qk_scale == 1.0 and not self.dynamic_train_len:
      return apply_rope(q, q_positions, inv_freq), apply_rope(k, k_positions, inv_freq)
    if self.dynamic_train_len:
      length = jnp.maximum(q_positions.max(axis=-1), k_positions.max(axis=-1)) + 1  # [b]
      inv_freq = rope_scaling.dynamic_ntk_inv_freq(inv_freq, length, self.dynamic_train_len)
      inv_freq = inv_freq[:, None, :]  # [b, 1, rot_dim/2]
    if self.position_scale != 1.0:
      q_positions = q_positions.astype(jnp.float32) * jnp.float32(self.position_scale)
      k_positions = k_positions.astype(jnp.float32) * jnp.float32(self.position_scale)
    q, k = apply_rope(q, q_positions, inv_freq), apply_rope(k, k_positions, inv_freq)
    if self.qk_scale != 1.0:
      q, k = q * jnp.asarray(self.qk_scale, q.dtype), k * jnp.asarray(self.qk_scale, k.dtype)
    return q, k

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  def kernel_spec(self, layer, q_positions, k_positions):
    """`rotate` as kernel parameters: this layer's inverse frequencies (per batch row under
    dynamic NTK, from the same row lengths as `rotate`), PI's position scale, YaRN's q/k
    scale; a NoPE layer rotates nothing. See PositionalScheme.kernel_spec."""
    inv = self.inv_freq if self.layer_inv_freq is None else self.layer_inv_freq[layer]
    if inv is None:
      return KernelSpec()
    inv_freq = jnp.asarray(inv, jnp.float32)
    if self.dynamic_train_len:
      length = jnp.maximum(q_positions.max(axis=-1), k_positions.max(axis=-1)) + 1  # [b]
      inv_freq = rope_scaling.dynamic_ntk_inv_freq(inv_freq, length, self.dynamic_train_len)
    return KernelSpec(inv_freq=inv_freq, position_scale=self.position_scale,
                      qk_scale=self.qk_scale)
  # ---- end fused-kernel capability ----
