"""Learned absolute position embeddings (GPT-2; Radford et al. 2019, and BERT, arXiv 1810.04805).

A trainable table of `max_len` rows added to the token embeddings. It cannot represent positions
>= max_len: evaluation beyond is refused before compilation unless `clamp=True`, which reuses the
last row for every later position (an explicit, documented choice, not a silent one).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme


def table_size(cfg, dims) -> int:
  """Rows in the table: `cfg.max_len`, or `dims.train_len` when it is -1."""
  return dims.train_len if cfg.max_len == -1 else cfg.max_len


class Learned(PositionalScheme):
  """`x + table[positions]`, table float [max_len, d_model] ("position", "embed")."""

  max_position_hint = "set model.position.clamp=True or raise model.position.max_len"

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "max_len": (-1, "table size in positions; -1 = data.train_len."),
      "clamp": (False, "clamp positions >= max_len to the last row at eval."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    if not (cfg.max_len == -1 or (isinstance(cfg.max_len, int) and cfg.max_len >= dims.train_len)):
      raise ConfigError(f"model.position.max_len must be -1 (= train_len) or >= data.train_len="
                        f"{dims.train_len}; got {cfg.max_len!r}")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (max_len, clamp); dims: see `Dims`."""
    n = table_size(cfg, dims)
    self.clamp = bool(cfg.clamp)
    self.max_position = None if self.clamp else n
    self.table = nnx.Param(
        nnx.initializers.normal(dims.init_std)(rngs.params(), (n, dims.d_model), dims.param_dtype),
        logical_axes=(None, "embed"))

  def embed(self, x, positions):
    """x: [b, s, d_model], positions: int32 [b, s] -> x + table[positions]."""
    table = self.table[...]
    if self.clamp:
      positions = jnp.minimum(positions, table.shape[0] - 1)
    return x + jnp.take(table, positions, axis=0).astype(x.dtype)
