"""BiPE: bilevel positional encoding, an absolute position inside each segment plus a relative
encoding across segments.

He et al., "Two Stones Hit One Bird: Bilevel Positional Encoding for Better Length
Extrapolation", arXiv 2401.16421 (ICML 2024), Sec. 3. The text is cut into segments (sentences,
ending at a separator token: data/position_layouts.py "segments"). A token at intra-segment
index j of segment n gets
  * an absolute encoding of j added to its embedding: a learned table (the released code's
    `get_ape_embeddings`, github.com/zhenyuhe00/BiPE; Sec. 3 allows any absolute encoding) of
    `data.train_len` rows, j clamped to the last row as the released code clamps at its
    `train_scale`;
  * a relative encoding of n - n' in attention: RoPE over segment indices (`bipe_rope`, the
    paper's BiPE-RoPE, rope_theta as RoPE's) or ALiBi over segment indices (`bipe_alibi`,
    BiPE-ALiBi).
Departures of the released code (github.com/zhenyuhe00/BiPE) from the paper, followed here by
default, each with a field for the other choice:
  * segments end only at '.' and newline (its `BiPE_seps`, the Llama token ids of "." and "\n"):
    `bipe_separators` = ".\n"; the paper speaks of sentences, which ".!?\n" (what runs made
    before the field's default changed used: `LEGACY_DEFAULTS`) follows more closely;
  * BiPE-ALiBi multiplies ALiBi's slopes by 96 on segment indices (its `_init_alibi_mul96`): a
    segment boundary costs what 96 tokens cost plain ALiBi; `bipe_alibi_slope_scale` = 96, 1 =
    ALiBi's own slopes (the paper's description, and runs before the field).
The pipeline gives `positions` = j and `aux_positions` = n; the embedding hook reads j, the
attention hooks (and the fused kernel, and the KV cache) read n (`attention_stream = "aux"`).
RoPE scaling methods and ALiBi interpolation are not offered on segment indices here (the paper
fine-tunes BiPE-RoPE with YaRN in Sec. 4.3; that is not reproduced).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.alibi import ALiBi
from models.positions.rope import RoPE

BIPE_FIELDS = {
    "bipe_separators": (".\n", "BiPE: characters that end a segment (tokens ending in one); the "
                               "released code's '.' and newline."),
}
SLOPE_SCALE = 96.0  # the released code's factor on BiPE-ALiBi's slopes (`_init_alibi_mul96`)
# Fields whose default changed -> the value runs made before the change used (configs/stored.py).
LEGACY_DEFAULTS = {"bipe_separators": ".!?\n", "bipe_alibi_slope_scale": 1.0}


class _IntraSegmentTable(nnx.Module):
  """The learned absolute table of intra-segment indices, float [train_len, d_model]."""

  def __init__(self, dims, rngs):
    self.table = nnx.Param(
        nnx.initializers.normal(dims.init_std)(rngs.params(), (dims.train_len, dims.d_model),
                                               dims.param_dtype),
        logical_axes=(None, "embed"))

  def __call__(self, x, positions):
    table = self.table[...]
    index = jnp.clip(positions, 0, table.shape[0] - 1)
    return x + jnp.take(table, index, axis=0).astype(x.dtype)


def check_bipe(cfg) -> None:
  """Raises `ConfigError` for a bad `bipe_separators` (a non-empty string)."""
  seps = cfg.get("bipe_separators", ".\n")
  if not isinstance(seps, str) or not seps:
    raise ConfigError(f"model.position.bipe_separators must be a non-empty string of characters "
                      f"that end a segment (e.g. '.\\n'); got {seps!r}")


class BiPERoPE(RoPE):
  """BiPE-RoPE (arXiv 2401.16421): learned table of intra-segment index + RoPE over segment
  index. `embed(x, positions)`: positions int32 [b, s] intra-segment indices; `rotate`: the
  q/k positions are segment indices."""

  relative = False  # the embedding carries position too
  position_layout = "segments"
  attention_stream = "aux"
  config_fields = {**RoPE.config_fields, **BIPE_FIELDS}
  legacy_defaults = {"bipe_separators": LEGACY_DEFAULTS["bipe_separators"]}

  @classmethod
  def check_config(cls, cfg, dims):
    super().check_config(cfg, dims)
    check_bipe(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (RoPE's fields, bipe_separators); dims: see `Dims`."""
    super().__init__(cfg, dims, rngs=rngs)
    self.intra = _IntraSegmentTable(dims, rngs)

  def embed(self, x, positions):
    """x: [b, s, d_model] + table[min(positions, train_len - 1)]."""
    return self.intra(x, positions)


class BiPEALiBi(ALiBi):
  """BiPE-ALiBi (arXiv 2401.16421): learned table of intra-segment index + ALiBi over segment
  index (bias -c slope_h * (n_q - n_k), c = `bipe_alibi_slope_scale`, the released code's 96)."""

  relative = False
  position_layout = "segments"
  attention_stream = "aux"
  config_fields = {**ALiBi.config_fields, **BIPE_FIELDS,
                   "bipe_alibi_slope_scale": (SLOPE_SCALE, "bipe_alibi: slopes times this on "
                                                           "segment indices (released code 96; 1 = "
                                                           "ALiBi's).")}
  legacy_defaults = LEGACY_DEFAULTS

  @classmethod
  def check_config(cls, cfg, dims):
    super().check_config(cfg, dims)
    check_bipe(cfg)
    scale = cfg.get("bipe_alibi_slope_scale", SLOPE_SCALE)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (
        0 < scale < float("inf")):
      raise ConfigError(f"model.position.bipe_alibi_slope_scale must be a finite number > 0 (96 = "
                        f"the released code, 1 = ALiBi's slopes); got {scale!r}")
    if cfg.get("alibi_interpolation", False):
      raise ConfigError("model.position.alibi_interpolation=True is not defined for kind="
                        "'bipe_alibi' (its positions are segment indices, not tokens); set it "
                        "to False")

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (alibi_heads, bipe_separators, bipe_alibi_slope_scale); dims: see
    `Dims`."""
    super().__init__(cfg, dims, rngs=rngs)
    scale = float(cfg.get("bipe_alibi_slope_scale", SLOPE_SCALE))
    self.slopes = tuple(m * scale for m in self.slopes)  # static, hashable (bias, kernel_spec)
    self.intra = _IntraSegmentTable(dims, rngs)

  def embed(self, x, positions):
    """x: [b, s, d_model] + table[min(positions, train_len - 1)]."""
    return self.intra(x, positions)
