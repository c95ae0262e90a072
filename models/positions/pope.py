"""PoPE: polar coordinate positional embedding, content in the magnitudes, position in the phases.

Gopalakrishnan, Csordás, Schmidhuber & Mozer, "Decoupling the 'What' and 'Where' With Polar
Coordinate Positional Embeddings", arXiv 2509.10534, Sec. 3. Every one of the D features of a
query or key becomes one complex number (RoPE pairs features instead): for query position t, key
position s, head h and feature c = 0..D-1,

  q~_tc = softplus(q_tc) e^{i t theta_c},   k~_sc = softplus(k_sc) e^{i (s theta_c + delta_hc)},
  score = Re[sum_c q~_tc conj(k~_sc)] / sqrt(D)
        = sum_c softplus(q_tc) softplus(k_sc) cos((t - s) theta_c - delta_hc) / sqrt(D),

with D frequencies theta_c = rope_theta^(-c/D) (twice RoPE's D/2) and a learned per-head phase
bias delta on the keys, clamped to [-2 pi, 0]. The magnitudes carry only content, the phases only
position, so the score's dependence on t - s is a fixed cosine per feature.

Written with real numbers as `rotate`: q -> [mu_q cos(t theta), mu_q sin(t theta)] and
k -> [mu_k cos(s theta + delta), mu_k sin(s theta + delta)], interleaved per feature, so q.k of the
2D-wide outputs is the sum above. Attention scales logits by 1/sqrt(width); the query is also
multiplied by sqrt(2), so the scale is the paper's 1/sqrt(D) of the head dimension. Keys are
cached before `rotate` (models/attention.py), so decoding is unaffected by the wider outputs.

Choices, checked against the PoPE-pytorch package's implementation of the paper: softplus
magnitudes, delta zero-initialised (`bias_uniform_init=False`; U(-2 pi, 0) is its option and ours,
`pope_bias_init="uniform"`) and clamped to [-2 pi, 0] when used, one delta per head and feature
[H, D]; the clamp passes no gradient outside the interval (torch's clamp), here likewise.
`per_layer=True` gives each layer its own delta (the package builds one per attention module).
No fused kernel form: attention runs the XLA path.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme, check_per_layer

BIAS_INITS = ("zeros", "uniform")


def pope_inv_freq(head_dim: int, rope_theta: float) -> np.ndarray:
  """theta_c = rope_theta^(-c/head_dim), c = 0..head_dim-1 (float32 [head_dim], radians/token)."""
  return (rope_theta ** -(np.arange(head_dim, dtype=np.float64) / head_dim)).astype(np.float32)


def pope_embed(x: jax.Array, positions: jax.Array, inv_freq: jax.Array,
               phase: jax.Array | None = None) -> jax.Array:
  """[softplus(x) cos(pos theta + phase), softplus(x) sin(...)] interleaved per feature.

  Args:
    x: [batch, seq, heads, D] queries or keys, any float dtype.
    positions: int32 or float32 [batch, seq] (tokens).
    inv_freq: float32 [D] frequencies theta.
    phase: float32 [heads, D] phase bias delta (keys), or None (queries).

  Returns:
    float32 [batch, seq, heads, 2D]: features 2c and 2c+1 are feature c's cos and sin parts.
  """
  angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq  # [b, s, 1, D]
  if phase is not None:
    angles = angles + phase
  mag = jax.nn.softplus(x.astype(jnp.float32))
  out = jnp.stack([mag * jnp.cos(angles), mag * jnp.sin(angles)], axis=-1)
  return out.reshape(*x.shape[:-1], 2 * x.shape[-1])


class PoPE(PositionalScheme):
  """Polar coordinate positional embedding (arXiv 2509.10534) on every head.

  Config (`model.position`): rope_theta, pope_bias_init, per_layer. Parameters: `delta`
  [num_layers (per_layer) or 1, heads, head_dim] (param_dtype; ndim 3, so the train loop's
  matrices-only AdamW weight decay applies to it, pulling it towards 0, its default init).
  """

  relative = True  # positions reach attention only as ids (the rotate hook)
  per_head_rotation = True  # per-head parameters: under GQA each query head rotates its key copy

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "rope_theta": (10000.0, "base of the inverse frequencies."),
      "per_layer": (True, "own parameters per layer; False = one set shared by all layers."),
      "pope_bias_init": ("zeros", "PoPE: init of the key phase bias delta: zeros | uniform "
                                  "(U(-2 pi, 0))."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    init = cfg.get("pope_bias_init", "zeros")
    if init not in BIAS_INITS:
      raise ConfigError(f"model.position.pope_bias_init must be one of {list(BIAS_INITS)}; "
                        f"got {init!r}")
    theta = cfg.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
      raise ConfigError(f"model.position.rope_theta must be a number > 1; got {theta!r}")
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (rope_theta, pope_bias_init, per_layer); dims: see `Dims`."""
    self.per_layer = bool(cfg.per_layer)
    self.inv_freq = tuple(float(f) for f in pope_inv_freq(dims.head_dim, float(cfg.rope_theta)))
    shape = (dims.num_layers if self.per_layer else 1, dims.num_heads, dims.head_dim)
    if cfg.get("pope_bias_init", "zeros") == "uniform":
      delta = jax.random.uniform(rngs.params(), shape, jnp.float32, -2 * math.pi, 0.0)
    else:
      delta = jnp.zeros(shape, jnp.float32)
    self.delta = nnx.Param(delta.astype(dims.param_dtype), logical_axes=(None, "heads", None))

  def phase(self, layer: int) -> jax.Array:
    """This layer's key phase bias delta, clamped to [-2 pi, 0]: float32 [heads, head_dim]."""
    delta = self.delta[...][layer if self.per_layer else 0].astype(jnp.float32)
    return jnp.clip(delta, -2 * math.pi, 0.0)

  def rotate(self, q, k, q_positions, k_positions, layer):
    """q: [b, q_len, H, D], k: [b, k_len, H, D] -> (q~ * sqrt(2), k~): [b, len, H, 2D] each, in
    q's and k's dtypes (see the module docstring)."""
    inv_freq = jnp.asarray(self.inv_freq, jnp.float32)
    qp = pope_embed(q, q_positions, inv_freq) * jnp.float32(math.sqrt(2.0))
    kp = pope_embed(k, k_positions, inv_freq, self.phase(layer))
    return qp.astype(q.dtype), kp.astype(k.dtype)

  def kernel_spec(self, layer, q_positions, k_positions):
    """No fused form: the reason string (the kernel rotates pairs of features in place)."""
    del layer, q_positions, k_positions
    return ("PoPE maps each feature to a magnitude and a phase (twice the width); the fused kernel "
            "rotates pairs of features in place")
