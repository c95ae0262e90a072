"""LeRoPE: RoPE whose frequencies are learned, per layer (and per head), from RoPE's start.

Source. Learnable rotary frequencies are the 1-D case of RoPE-Mixed (Heo et al., "Rotary Position
Embedding for Vision Transformer", arXiv 2403.13298, Sec. 3.3, Eq. (13)-(14)): each head of each
layer owns its frequency vector theta_t (there one per image axis, here one axis: the token
position), trained with the network, so R(n) q . R(m) k still depends on n - m only. The name
"LeRoPE" is this project's issue's; we know of no separate paper under it.

What we do, and where it differs from RoPE-Mixed:
  * Initialisation: RoPE's frequencies theta_i = rope_theta^(-2i/d_rot) (or the layer's
    `rope_theta_per_layer` base), the same for every head, so an untrained LeRoPE computes what
    RoPE computes. RoPE-Mixed initialises from rotated 2-D axial frequencies, which a 1-D
    sequence has no use for.
  * Parametrisation: we learn u_i = ln theta_i and rotate with exp(u_i) (`lerope_log_space=True`,
    the default): frequencies stay positive, and an Adam step changes each one by about the same
    *relative* amount, where RoPE's theta_i span 4-5 orders of magnitude (a linear step of 1e-3
    is nothing to theta_0 = 1 and ten times theta_i = 1e-4). `lerope_log_space=False` learns
    theta_i itself, as RoPE-Mixed does.
  * Sharing: `lerope_per_head=True` (default, RoPE-Mixed's) gives each query head its own vector;
    under grouped-query attention the keys are repeated to the query heads before rotation
    (`per_head_rotation`). False: one vector per layer, shared by the heads.
  * Every parameter is 1-D ([heads * d_rot/2] or [d_rot/2] per rotary layer), so the training
    loop's AdamW (weight decay on ndim >= 2 only, runs/optimizer.py) never decays them.

RoPE's other fields: `rope_theta`, `rope_theta_per_layer`, `rotary_fraction` and `nope_every` set
the start and the rotary layers (NoPE layers own no parameters). `rope_scaling` must be "none"
and `rope_heads` -1: the scalings are formulas of fixed frequencies (configs/validate.py lists
the kinds each `rope_scaling` applies to; lerope is not among them). To extend a trained LeRoPE,
the eval-time position-id transforms apply (the scheme is `relative`; models/extensions.py).
The fused kernel is not used (attention falls back to XLA, logged): a `KernelSpec` has no
per-head frequencies and its kernel takes no gradient in the frequencies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models.positions.rope import RoPE, apply_rope


def apply_rope_per_head(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
  """RoPE's half-split rotation with its own frequencies per head.

  Args:
    x: [batch, seq, heads, head_dim], any float dtype.
    positions: int32 or float32 [batch, seq] position ids.
    inv_freq: float32 [heads, rot_dim/2] radians per position (rot_dim <= head_dim).

  Returns:
    Array like x; features >= rot_dim unchanged. With every row of inv_freq equal to f it equals
    `models.positions.rope.apply_rope(x, positions, f)`.
  """
  half = inv_freq.shape[-1]
  rot = 2 * half
  angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq[None, None]  # [b, s, H, half]
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  x1 = x[..., :half].astype(jnp.float32)
  x2 = x[..., half:rot].astype(jnp.float32)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)
  return rotated if rot == x.shape[-1] else jnp.concatenate([rotated, x[..., rot:]], axis=-1)


class LeRoPE(RoPE):
  """Learned RoPE frequencies (the 1-D case of RoPE-Mixed, Heo et al., arXiv 2403.13298).

  Parameters: `freq[r]` float (param_dtype) [heads * rot_dim/2] (per head) or [rot_dim/2], one
  per rotary layer r (in layer order; NoPE layers have none), holding ln theta (log space) or
  theta. See the module docstring.
  """

  config_fields = {
      **RoPE.config_fields,
      "lerope_per_head": (True, "LeRoPE: own learned frequencies per head (False: per layer)."),
      "lerope_log_space": (True, "LeRoPE: learn ln(theta) (True) or theta itself (False)."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    super().check_config(cfg, dims)
    for name in ("lerope_per_head", "lerope_log_space"):
      if not isinstance(cfg.get(name, True), bool):
        raise ConfigError(f"model.position.{name} must be True or False; got {cfg.get(name)!r}")
    if cfg.get("rope_heads", -1) not in (-1, dims.num_heads):
      raise ConfigError(f"model.position.rope_heads must be -1 with kind='lerope'; "
                        f"got {cfg.rope_heads!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (RoPE's fields, lerope_per_head, lerope_log_space); dims: `Dims`."""
    super().__init__(cfg, dims, rngs=rngs)
    self.per_head = bool(cfg.get("lerope_per_head", True))
    self.log_space = bool(cfg.get("lerope_log_space", True))
    self.per_head_rotation = self.per_head  # base.PositionalScheme.per_head_rotation
    self.num_heads = dims.num_heads
    starts = [self.inv_freq if self.layer_inv_freq is None else self.layer_inv_freq[i]
              for i in range(dims.num_layers)]
    slots, params = [], []
    for start in starts:
      if start is None:  # a NoPE layer
        slots.append(-1)
        continue
      value = np.asarray(start, np.float64)
      value = np.log(value) if self.log_space else value
      if self.per_head:
        value = np.tile(value, dims.num_heads)
      slots.append(len(params))
      params.append(nnx.Param(jnp.asarray(value, dims.param_dtype), logical_axes=(None,)))
    self.slots = tuple(slots)
    self.freq = nnx.List(params)

  def learned_inv_freq(self, layer: int) -> jax.Array | None:
    """Layer `layer`'s frequencies theta, float32 [heads, rot_dim/2] (per head) or [rot_dim/2];
    None for a NoPE layer."""
    slot = self.slots[layer]
    if slot < 0:
      return None
    value = self.freq[slot][...].astype(jnp.float32)
    value = jnp.exp(value) if self.log_space else value
    return value.reshape(self.num_heads, -1) if self.per_head else value

  def _rotate(self, q, k, q_positions, k_positions, layer):
    """RoPE's rotation with this layer's learned frequencies (and STRING's factor)."""
    inv_freq = self.learned_inv_freq(layer)
    if inv_freq is None:
      return q, k
    rotate = apply_rope_per_head if self.per_head else apply_rope
    qr, kr = rotate(q, q_positions, inv_freq), rotate(k, k_positions, inv_freq)
    return self._string(qr), self._string(kr)

  def kernel_spec(self, layer, q_positions, k_positions):
    """A reason string: learned frequencies have no fused-kernel form (see the module
    docstring), so attention runs on the XLA path."""
    del layer, q_positions, k_positions
    return ("LeRoPE (kind='lerope'): learned frequencies, per head or taking gradients, which the "
            "fused kernel's KernelSpec cannot carry")
