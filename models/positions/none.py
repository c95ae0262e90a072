"""NoPE: no positional information at all; the causal mask alone orders tokens.

Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
Transformers", arXiv 2305.19466 (NeurIPS 2023); Haviv et al., arXiv 2203.16634.
"""

from models.positions.base import PositionalScheme


class NoPE(PositionalScheme):
  """No positional encoding: implements none of the hooks."""

  def __init__(self, cfg, dims, *, rngs):
    """Takes no parameters; the signature matches every scheme's."""
    del cfg, dims, rngs
