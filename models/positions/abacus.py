"""Abacus embeddings: a learned embedding of each digit's place inside its number.

McLeish et al., "Transformers Can Do Arithmetic with the Right Embeddings", arXiv 2405.17399,
Sec. 3.1. Every token gets `table[a]`, where `a` is the 1-based index of a digit inside its run
of consecutive digits and 0 for any other token (`aux_positions`, data/position_layouts.py
"digits"); so the units digits of both operands of a reversed addition share one embedding, the
tens digits another, and so on. At training time one offset k ~ U{0..abacus_max_offset} per
example is added to every digit index (the paper's random offset, "k" up to 100 there), so the
rows beyond the longest trained number are trained too; evaluation uses k = 0.

Attention itself carries no position (NoPE), the combination the paper reports as "Abacus" in
its Fig. 1 (the paper also pairs Abacus with FIRE; that pairing is not a kind here). Row
`a >= abacus_num_embeddings` reuses the last row (a number longer than the table, clamped as
`learned` with clamp=True does). The released code (github.com/mcleish7/arithmetic, abacus.py)
draws one k per batch; ours draws one per example (data/position_layouts.py).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme


def is_count(value, low: int) -> bool:
  """True if `value` is an int (not bool) >= low."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= low


class Abacus(PositionalScheme):
  """`x + table[aux_positions]`, table float [abacus_num_embeddings, d_model]; NoPE attention.

  The digit indices come from the data (the "digits" layout); `embed` receives them as its
  `positions` argument (`embed_stream = "aux"`).
  """

  position_layout = "digits"
  embed_stream = "aux"
  config_fields = {
      "abacus_max_offset": (99, "Abacus: training offsets k ~ U{0..N} added to digit indices."),
      "abacus_num_embeddings": (256, "Abacus: rows of the digit-index table (later rows clamp)."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    offset, rows = cfg.get("abacus_max_offset", 99), cfg.get("abacus_num_embeddings", 256)
    if not is_count(offset, 0):
      raise ConfigError(f"model.position.abacus_max_offset must be an int >= 0 (digit-index "
                        f"offsets drawn from 0..N at training); got {offset!r}")
    if not is_count(rows, offset + 2):
      raise ConfigError(f"model.position.abacus_num_embeddings must be an int >= "
                        f"abacus_max_offset + 2 = {offset + 2} (row 0 for non-digits, then the "
                        f"offset digit indices); got {rows!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (abacus_num_embeddings); dims: see `Dims`."""
    rows = int(cfg.get("abacus_num_embeddings", 256))
    self.table = nnx.Param(
        nnx.initializers.normal(dims.init_std)(rngs.params(), (rows, dims.d_model),
                                               dims.param_dtype),
        logical_axes=(None, "embed"))

  def embed(self, x, positions):
    """x: [b, s, d_model], positions: int32 [b, s] digit indices -> x + table[indices]."""
    table = self.table[...]
    index = jnp.clip(positions, 0, table.shape[0] - 1)
    return x + jnp.take(table, index, axis=0).astype(x.dtype)
