"""T5 relative position bias: a learned scalar per (distance bucket, head) added to the logits.

Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", arXiv 1910.10683 (JMLR 2020), Section 2.1: each relative-position "embedding" is a
single scalar added to the attention logit, one per head; distances fall into 32 buckets whose
width grows logarithmically up to an offset of 128, beyond which all distances share one bucket;
the parameters are shared across layers.

Bucketing follows the reference `_relative_position_bucket` (mesh_tensorflow/transformer/
transformer_layers.py, also Hugging Face `T5Attention`) with `bidirectional=False` (causal): only
the distance `n = q_pos - k_pos >= 0` matters (negative n, i.e. keys after the query, map to
bucket 0 and are masked anyway). The first `num_buckets / 2` buckets hold the exact distances
0 .. num_buckets/2 - 1; the rest are log-spaced up to `max_distance`; every `n >= max_distance`
(and some just below it) lands in the last bucket `num_buckets - 1`. The bias is therefore
constant beyond max_distance, which is what lets T5 run on longer sequences than trained.

Sharing: T5 itself learns one table for all layers (`per_layer=False`); `per_layer=True` gives
every layer its own table.

Initialisation: normal(init_std) (0.02 by default). The reference implementations draw the table
from a normal distribution too (Hugging Face T5: std d_model^-0.5; flaxformer: fan-in normal); the
codebase's small std keeps the initial bias within a few hundredths of a logit, so training starts
close to NoPE while the heads' tables already differ. Zeros would also train (the gradient of an
additive bias does not depend on its value); normal was chosen to follow the references.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from configs.errors import ConfigError
from models.kernels.spec import KernelSpec
from models.positions.base import PositionalScheme, check_per_layer


def _check_bucket_args(num_buckets: int, max_distance: int) -> None:
  if num_buckets < 2 or num_buckets % 2:
    raise ValueError(f"num_buckets must be an even integer >= 2; got {num_buckets}")
  if max_distance <= num_buckets // 2:
    raise ValueError(f"max_distance must be > num_buckets / 2 = {num_buckets // 2}; "
                     f"got {max_distance}")


@functools.lru_cache(maxsize=None)
def _bucket_table(num_buckets: int, max_distance: int) -> np.ndarray:
  """Bucket of every distance n = 0 .. max_distance (int32 [max_distance + 1]).

  The reference formula, evaluated once per (num_buckets, max_distance) in float64:
  `n` if n < max_exact, else `min(max_exact + int(log(n / max_exact) / log(max_distance /
  max_exact) * (num_buckets - max_exact)), num_buckets - 1)` with max_exact = num_buckets // 2.
  n = max_distance already gives num_buckets - 1, and the formula is non-decreasing in n, so
  every n > max_distance shares that bucket. Tabulating keeps the boundaries exact whatever the
  compute precision (the references evaluate the logarithm in float32).
  """
  _check_bucket_args(num_buckets, max_distance)
  max_exact = num_buckets // 2
  scale = (num_buckets - max_exact) / math.log(max_distance / max_exact)
  table = [n if n < max_exact else
           min(max_exact + int(math.log(n / max_exact) * scale), num_buckets - 1)
           for n in range(max_distance + 1)]
  return np.asarray(table, np.int32)


def relative_position_bucket(relative_position, num_buckets: int = 32, max_distance: int = 128):
  """Causal T5 bucket ids (the reference `_relative_position_bucket`, bidirectional=False).

  Args:
    relative_position: integer array (numpy or jax, any shape), `key_pos - query_pos` (the
      reference's `memory_position - query_position`). The distance is `n = max(-relative_position,
      0)`, so keys after the query all map to bucket 0.
    num_buckets: even number of buckets >= 2; buckets 0 .. num_buckets/2 - 1 are the exact
      distances 0 .. num_buckets/2 - 1.
    max_distance: distance in tokens (> num_buckets / 2) from which on every distance is in the
      last bucket, num_buckets - 1; distances in between are log-spaced over the upper half.

  Returns:
    int32 array like relative_position (numpy in, numpy out; jax in, jax out) with values in
    [0, num_buckets).

  Raises:
    ValueError: num_buckets odd or < 2, or max_distance <= num_buckets / 2.

  Example (num_buckets=32, max_distance=128): n = 0..15 -> n; buckets 16..31 start at
  n = 16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113 (so 32 -> 21, 64 -> 26,
  100 -> 30, and every n >= 113 -> 31).
  """
  table = _bucket_table(int(num_buckets), int(max_distance))
  if isinstance(relative_position, (np.ndarray, np.generic, int)):
    n = np.clip(-np.asarray(relative_position, np.int64), 0, max_distance)
    return table[n]
  n = jnp.clip(-relative_position.astype(jnp.int32), 0, max_distance)
  return jnp.asarray(table)[n]


class T5Bias(PositionalScheme):
  """Adds `table[bucket(k_pos - q_pos), h]` to the logits of head h.

  Parameters: `table`, float (param_dtype) [num_buckets, heads], or [num_layers, num_buckets,
  heads] with `per_layer`; replicated (a few hundred numbers). It is 2-D or more, so the train
  loop's AdamW applies weight decay to it (like any matrix).
  """

  relative = True  # positions reach attention only as ids (rotate/bias hooks)

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own table per layer; False = one table shared by all layers (T5)."),
      "num_buckets": (32, "relative-position buckets."),
      "max_distance": (128, "distances (tokens) from here on share the last bucket."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    nb, md = cfg.num_buckets, cfg.max_distance
    if not (isinstance(nb, int) and not isinstance(nb, bool) and nb >= 2 and nb % 2 == 0):
      raise ConfigError(f"model.position.num_buckets must be an even integer >= 2; got {nb!r}")
    if not (isinstance(md, int) and not isinstance(md, bool) and md > nb // 2):
      raise ConfigError(f"model.position.max_distance must be an integer > num_buckets / 2 = "
                        f"{nb // 2} (tokens); got {md!r}")
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (num_buckets, max_distance, per_layer); dims: see `Dims`."""
    self.num_buckets = int(cfg.num_buckets)
    self.max_distance = int(cfg.max_distance)
    self.per_layer = bool(cfg.per_layer)
    shape = (self.num_buckets, dims.num_heads)
    if self.per_layer:
      shape = (dims.num_layers,) + shape
    self.table = nnx.Param(
        nnx.initializers.normal(dims.init_std)(rngs.params(), shape, dims.param_dtype),
        logical_axes=(None,) * len(shape))

  def bias(self, q_positions, k_positions, layer, **unused):
    """q_positions: int32 [b, q_len], k_positions: int32 [b, k_len] -> float32 [b, H, q, k].

    Entry [b, h, i, j] is `table[bucket(k_positions[b, j] - q_positions[b, i]), h]` (of `layer`'s
    table with per_layer); computed from the positions, so packed documents and shifted or
    transformed positions are handled.
    """
    del unused
    table = self.table[...]
    if self.per_layer:
      table = table[layer]
    rel = k_positions[:, None, :] - q_positions[:, :, None]  # [b, q, k], key - query
    buckets = relative_position_bucket(rel, self.num_buckets, self.max_distance)
    values = jnp.take(table.astype(jnp.float32).T, buckets, axis=1)  # [H, b, q, k]
    return values.transpose(1, 0, 2, 3)

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  def kernel_spec(self, layer, q_positions, k_positions):
    """`bias` as kernel parameters: `layer`'s table transposed to [heads, num_buckets] and the
    bucketing sizes (the kernel reads the bucket boundaries off `relative_position_bucket`).
    See PositionalScheme.kernel_spec."""
    del q_positions, k_positions
    table = self.table[...]
    if self.per_layer:
      table = table[layer]
    return KernelSpec(bias="t5", bias_params=table.astype(jnp.float32).T,
                      num_buckets=self.num_buckets, max_distance=self.max_distance)
  # ---- end fused-kernel capability ----
