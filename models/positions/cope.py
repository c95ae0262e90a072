"""CoPE: contextual position encoding, positions that count only the tokens a gate selects.

Golovneva, Wang, Weston & Sukhbaatar, "Contextual Position Encoding: Learning to Count What's
Important", arXiv 2405.18719, Section 3, and its reference code (facebookresearch/RAM,
`projects/cope/src/cope/context_position.py`). For query i and key j <= i of one head:

  gates       g_ij = sigmoid(q_i . k_j / sqrt(D)), 0 for keys the mask removes;
  position    p_ij = sum_{t=j}^{i} g_it, clamped to npos_max - 1   (all gates 1: p_ij = i - j + 1);
  embedding   e[p] = (1 - w) e[floor p] + w e[ceil p],  w = p - floor p   (e: learned [npos_max, D]);
  logit       q_i . (k_j + e[p_ij]) / sqrt(D).

The scheme returns the second term as the attention bias; computed as in the paper's efficient
form, z_i[p] = q_i . e[p] for the npos_max integer positions ([b, H, q, npos_max]), gathered at
floor(p_ij) and ceil(p_ij) and interpolated, so no [b, H, q, k, D] or [b, H, q, k, npos] array
is ever built.

Choices, each as in the reference code (the paper's equations omit the 1/sqrt(D) everywhere):
  - The gate logits are the attention's own scaled logits q.k / sqrt(D) (the reference code
    divides `q @ k^T` by sqrt(head_dim) before the sigmoid), computed from the q and k handed to
    `bias`, i.e. after `rotate` (and after log-n query scaling when enabled); masked keys get
    gate 0, so positions count only allowed keys: they restart per document and respect a
    sliding window. CoPE ignores the integer position ids entirely.
  - The position term is scaled by 1/sqrt(D) like q.k, matching the paper's
    softmax(q^T (k + e[p])) and the reference code's default (`--cope-nodiv` off: the position
    logits are added before the division). (The code listing printed in the paper adds it
    unscaled; for a learned e that is a reparametrisation, e -> e * sqrt(D), which changes only
    the effective init and step size of e.)
  - The interpolation weight is w = p - floor(p) on e[ceil p] and 1 - w on e[floor p], so an
    integer p gives exactly e[p] (ceil = floor). Gradients reach the gates through w (floor and
    ceil are piecewise constant) and reach e and q through z.
  - e is zero-initialised (the reference code's `torch.zeros`), so CoPE starts as NoPE; one e per
    layer (`per_layer=True`, the reference default) or one for all layers, shared by all heads
    of a layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme, check_per_layer, require_queries_and_keys


def contextual_positions(gates: jax.Array, npos_max: int) -> jax.Array:
  """p_ij = sum_{t >= j} gates_it over the key axis, clamped to npos_max - 1.

  Args:
    gates: float32 [..., q_len, k_len] in [0, 1], already 0 where attention is masked (so for a
      causal mask the sum runs over t = j .. i).
    npos_max: number of integer positions represented (>= 1).

  Returns:
    float32 [..., q_len, k_len] positions in [0, npos_max - 1].
  """
  return jnp.minimum(jax.lax.cumsum(gates, axis=gates.ndim - 1, reverse=True), npos_max - 1)


def interpolate(z: jax.Array, pos: jax.Array) -> jax.Array:
  """(1 - w) z[..., floor p] + w z[..., ceil p] with w = p - floor p.

  Args:
    z: float32 [b, H, q_len, npos] values at the integer positions (z_i[p] = q_i . e[p]).
    pos: float32 [b, H, q_len, k_len] positions in [0, npos - 1].

  Returns:
    float32 [b, H, q_len, k_len].
  """
  floor = jnp.floor(pos)
  w = pos - floor
  z_floor = jnp.take_along_axis(z, floor.astype(jnp.int32), axis=-1)
  z_ceil = jnp.take_along_axis(z, jnp.ceil(pos).astype(jnp.int32), axis=-1)
  return (1.0 - w) * z_floor + w * z_ceil


class CoPE(PositionalScheme):
  """Contextual positions as an attention bias; fields `cope_npos_max`, `per_layer`.

  Parameters: `pos_emb` [num_layers (per_layer) or 1, cope_npos_max, head_dim], zero init,
  replicated (logical axes (None, None, "head_dim")).
  """

  bias_blockwise = False  # the position of key j counts the gates of keys j..i

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own position embeddings per layer (the reference code); False = one "
                          "table shared by all layers."),
      "cope_npos_max": (64, "contextual positions represented (embedding rows)."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    n = cfg.cope_npos_max
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
      raise ConfigError(f"model.position.cope_npos_max must be an integer >= 2 (embedding rows for "
                        f"contextual positions 0..npos_max-1); got {n!r}")
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (cope_npos_max, per_layer); dims: see `Dims`."""
    del rngs  # zero init (the reference code)
    self.npos_max = int(cfg.cope_npos_max)
    self.per_layer = bool(cfg.per_layer)
    self.scale = float(dims.head_dim) ** -0.5
    tables = dims.num_layers if self.per_layer else 1
    self.pos_emb = nnx.Param(jnp.zeros((tables, self.npos_max, dims.head_dim), dims.param_dtype),
                             logical_axes=(None, None, "head_dim"))

  def bias(self, q_positions, k_positions, layer, *, q=None, k=None, mask=None):
    """The CoPE logit term for one layer.

    Args:
      q_positions, k_positions: unused (CoPE counts gated keys, not position ids).
      layer: static layer index (selects the table when per_layer).
      q: [b, q_len, H, D] queries after `rotate`; k: [b, k_len, H, D] keys (the last q_len keys
        are the queries' own, as in `models.attention.attention_mask`).
      mask: bool [b or 1, 1, q_len, k_len], True where allowed; None = causal by index.

    Returns:
      float32 [b, H, q_len, k_len].

    Raises:
      ValueError: if q or k is missing.
    """
    del q_positions, k_positions
    require_queries_and_keys(self, q, k)
    q_len, k_len = q.shape[1], k.shape[1]
    if mask is None:
      query_index = np.arange(q_len)[:, None] + (k_len - q_len)
      mask = jnp.asarray(query_index >= np.arange(k_len)[None, :])[None, None]
    qh = q.transpose(0, 2, 1, 3)  # [b, H, q, D]
    kh = k.transpose(0, 2, 1, 3)
    logits = jnp.einsum("bhqd,bhkd->bhqk", qh, kh, preferred_element_type=jnp.float32) * self.scale
    gates = jnp.where(mask, jax.nn.sigmoid(logits), 0.0)
    pos = contextual_positions(gates, self.npos_max)
    table = self.pos_emb[...][layer if self.per_layer else 0]  # [npos, D]
    z = jnp.einsum("bhqd,pd->bhqp", qh, table.astype(q.dtype), preferred_element_type=jnp.float32)
    return interpolate(z, pos) * self.scale
