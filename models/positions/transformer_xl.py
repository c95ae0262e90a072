"""Transformer-XL's relative positional encoding (the baseline of the randomized-positions paper).

Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context", arXiv
1901.02860, Sec. 3.3, the logit of query i and key j of one head:

  A_ij = q_i . k_j  +  q_i . W_R R_{i-j}  +  u . k_j  +  v . W_R R_{i-j}
          (a)            (b)                 (c)          (d)

with R_t the fixed sinusoid of the distance t = i - j (dimension d_model; the authors' code
`PositionalEmbedding`: [sin(t w_f), cos(t w_f)], w_f = 10000^(-2f/d_model)), W_R a learned
[d_model, heads x head_dim] projection per layer (the code's `r_net`), u and v learned
[heads, head_dim] vectors (`r_w_bias`, `r_r_bias`). The whole logit is scaled by 1/sqrt(head_dim)
as in the authors' code (`attn_score.mul_(self.scale)`). Attention computes (a); this scheme's
`bias` returns (b) + (c) + (d), scaled, and the model adds no absolute embedding.

(b) + (d) = (q_i + v) W_R . R_{i-j} is computed without a [q, k, d_model] array: with
c_i = (q_i + v) W_R^T = [a, b] (the sin and cos halves), sin((i-j)w) and cos((i-j)w) expand into
products of functions of i and of j, so the term is one contraction
[sin_i a + cos_i b, sin_i b - cos_i a] . [cos_j, sin_j] over 2 x d_model/2 features -- exact in
real arithmetic; in float32 the angles i w and j w are formed separately (their error at
position n is about n * 6e-8 radians). The authors' code computes the same with its
"relative shift" of a [q, k + mem] matrix.

Parameters (`per_layer`): W_R per layer (the code's default) or one for all layers; u and v are
shared by all layers (the code's default, `untie_r=False`) unless `txl_untie_r`. Init normal
with std `model.init_std` (the code's `init_std` 0.02 for both). The fused kernel has no form
for (b) + (d): attention falls back to XLA with the reason.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme, check_per_layer, require_queries_and_keys


def sinusoid_frequencies(d_model: int) -> np.ndarray:
  """w_f = 10000^(-2f/d_model), f = 0..d_model/2-1 (float32 [d_model/2]; Transformer-XL's
  PositionalEmbedding, as Vaswani et al. Sec. 3.5)."""
  return (1.0 / 10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)).astype(
      np.float32)


def relative_sinusoid(distance: jax.Array, d_model: int) -> jax.Array:
  """R_t = [sin(t w), cos(t w)] (float32 [..., d_model]) of distances t (any shape)."""
  angle = jnp.asarray(distance, jnp.float32)[..., None] * jnp.asarray(sinusoid_frequencies(d_model))
  return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


class TransformerXL(PositionalScheme):
  """Transformer-XL relative encoding (Dai et al., arXiv 1901.02860, Sec. 3.3) as a bias.

  Parameters: `w_r` [tables, d_model, H, D], `u` and `v` [1 or num_layers, H, D].
  """

  relative = True  # positions reach attention only as ids (the bias hook)

  config_fields = {
      "per_layer": (True, "own position embeddings per layer (the reference code); False = one "
                          "table shared by all layers."),
      "txl_untie_r": (False, "Transformer-XL: own u, v per layer (the code's untie_r); False = "
                             "shared by all layers."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    check_per_layer(cfg)
    if not isinstance(cfg.get("txl_untie_r", False), bool):
      raise ConfigError(f"model.position.txl_untie_r must be True or False; got "
                        f"{cfg.get('txl_untie_r')!r}")
    if dims.d_model % 2:
      raise ConfigError(f"kind='transformer_xl' needs an even model.d_model (sin and cos halves "
                        f"of R); got {dims.d_model}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (per_layer, txl_untie_r); dims: see `Dims`."""
    self.per_layer = bool(cfg.per_layer)
    self.untie_r = bool(cfg.get("txl_untie_r", False))
    self.d_model, self.scale = dims.d_model, float(dims.head_dim) ** -0.5
    shape = (dims.num_heads, dims.head_dim)
    std, pd = dims.init_std, dims.param_dtype
    init = lambda *s: std * jax.random.normal(rngs.params(), s, pd)  # noqa: E731
    tables = dims.num_layers if self.per_layer else 1
    biases = dims.num_layers if self.untie_r else 1
    self.w_r = nnx.Param(init(tables, dims.d_model, *shape),
                         logical_axes=(None, None, "heads", "head_dim"))
    self.u = nnx.Param(init(biases, *shape), logical_axes=(None, "heads", "head_dim"))
    self.v = nnx.Param(init(biases, *shape), logical_axes=(None, "heads", "head_dim"))

  def bias(self, q_positions, k_positions, layer, *, q=None, k=None, mask=None):
    """(b) + (c) + (d) of the module docstring, times 1/sqrt(head_dim).

    Args:
      q_positions: int32 [b, q_len]; k_positions: int32 [b, k_len] (t = q_pos - k_pos).
      layer: static layer index.
      q: [b, q_len, H, D] queries; k: [b, k_len, H, D] keys; mask: unused.

    Returns:
      float32 [b, H, q_len, k_len].

    Raises:
      ValueError: if q or k is missing.
    """
    del mask
    require_queries_and_keys(self, q, k)
    w_r = self.w_r[...][layer if self.per_layer else 0].astype(jnp.float32)  # [M, H, D]
    u = self.u[...][layer if self.untie_r else 0].astype(jnp.float32)  # [H, D]
    v = self.v[...][layer if self.untie_r else 0].astype(jnp.float32)
    c = jnp.einsum("bqhd,mhd->bhqm", q.astype(jnp.float32) + v, w_r)  # (q_i + v) W_R^T
    half = self.d_model // 2
    a, b = c[..., :half], c[..., half:]  # coefficients of sin and of cos
    w = jnp.asarray(sinusoid_frequencies(self.d_model))
    qa = q_positions.astype(jnp.float32)[:, None, :, None] * w  # [b, 1, q, M/2]
    ka = k_positions.astype(jnp.float32)[:, :, None] * w  # [b, k, M/2]
    sin_i, cos_i = jnp.sin(qa), jnp.cos(qa)
    left = jnp.concatenate([sin_i * a + cos_i * b, sin_i * b - cos_i * a], axis=-1)
    right = jnp.concatenate([jnp.cos(ka), jnp.sin(ka)], axis=-1)
    position = jnp.einsum("bhqm,bkm->bhqk", left, right)  # (b) + (d)
    content = jnp.einsum("hd,bkhd->bhk", u, k.astype(jnp.float32))[:, :, None, :]  # (c)
    return (position + content) * self.scale

  def kernel_spec(self, layer, q_positions, k_positions):
    """No kernel form (a learned projection of a per-distance sinusoid, contracted with q)."""
    del layer, q_positions, k_positions
    return ("Transformer-XL's relative terms (q + v) W_R R_{i-j} have no KernelSpec form; "
            "attention runs on XLA")
