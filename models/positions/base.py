"""The positional-scheme contract: three hooks that the decoder and attention call blindly.

A scheme may act at up to three places (the target architecture of this project):
  1. `embed(x, positions)`: on the token embeddings (learned, sinusoidal);
  2. `rotate(q, k, q_positions, k_positions, layer)`: on queries and keys (RoPE, xPos, ...);
  3. `bias(q_positions, k_positions, layer, q=, k=, mask=)`: an additive attention-logit bias,
     a function of query and key positions (ALiBi, T5, KERPLE, FIRE, ...) or, for contextual
     schemes (CoPE), also of the rotated queries/keys and the attention mask; a scheme with a
     `context_width` (FoX) also gets per-token quantities of the layer input (`token_context`,
     `sequence_context`) as `bias(..., q_context=, k_context=)`.
The defaults do nothing, so NoPE is the base class itself. Positions are explicit int32
`[batch, seq]` arrays: packing restarts them per document, decoding offsets them, eval-time
extensions transform them.
"""

from __future__ import annotations

import dataclasses

import jax
from flax import nnx

from configs.errors import ConfigError
from models.kernels.spec import KernelSpec


# The fused kernel's tile fields, model.kernel_<name> (models/kernels/flash.py BLOCK_FIELDS).
KERNEL_BLOCK_FIELDS = ("block_q", "block_k", "block_q_bwd", "block_k_bwd")


@dataclasses.dataclass(frozen=True)
class Dims:
  """Model sizes a scheme may need (tokens for lengths).

  Attributes:
    num_heads: attention (query) heads H.
    head_dim: per-head width D.
    d_model: residual width.
    num_layers: decoder blocks (for per-layer parameters).
    train_len: training context length, tokens.
    init_std: std of normal parameter inits.
    param_dtype: parameter dtype.
    attention_impl: `model.attention_impl`, how attention is computed ("xla" | "pallas"; not a
      size, but every module is built from Dims, so attention reads it here).
    kernel_blocks: the fused kernel's tiles in tokens, (model.kernel_block_q, kernel_block_k,
      kernel_block_q_bwd, kernel_block_k_bwd); 0 = the backend's default
      (models/kernels/flash.py `BlockSizes`).
    num_kv_heads: key/value heads (grouped-query attention; Ainslie et al., arXiv 2305.13245):
      H for multi-head attention, 1 for multi-query; divides H. Query head h reads KV head
      h // (H / num_kv_heads).
  """

  num_heads: int
  head_dim: int
  d_model: int
  num_layers: int
  train_len: int
  init_std: float = 0.02
  param_dtype: str = "float32"
  attention_impl: str = "xla"
  kernel_blocks: tuple[int, int, int, int] = (0, 0, 0, 0)
  num_kv_heads: int = 0  # 0: num_heads (see `kv_heads`)

  @property
  def kv_heads(self) -> int:
    """Key/value heads: `num_kv_heads`, or `num_heads` when it is 0 (multi-head attention)."""
    return self.num_kv_heads or self.num_heads

  @classmethod
  def from_config(cls, config) -> "Dims":
    """Dims of the experiment `config` (see configs/base.py)."""
    m = config.model
    head_dim = m.head_dim if m.head_dim > 0 else m.d_model // m.num_heads
    return cls(num_heads=m.num_heads, head_dim=head_dim, d_model=m.d_model,
               num_layers=m.num_layers, train_len=config.data.train_len, init_std=m.init_std,
               param_dtype=m.param_dtype, attention_impl=m.get("attention_impl", "xla"),
               kernel_blocks=tuple(m.get(f"kernel_{f}", 0) for f in KERNEL_BLOCK_FIELDS),
               num_kv_heads=kv_heads(m))


def kv_heads(model_config) -> int:
  """`model.num_kv_heads` resolved: -1 (or absent, in configs written before the field) means
  `model.num_heads` (multi-head attention)."""
  n = model_config.get("num_kv_heads", -1)
  return model_config.num_heads if n == -1 else n


def check_per_layer(cfg) -> None:
  """Raises `ConfigError` unless `cfg.per_layer` (model.position.per_layer) is a bool."""
  if not isinstance(cfg.per_layer, bool):
    raise ConfigError(f"model.position.per_layer must be True or False; got {cfg.per_layer!r}")


def require_queries_and_keys(scheme: "PositionalScheme", q, k) -> None:
  """For a contextual `bias` hook: raises ValueError("<Scheme>.bias needs the queries and keys
  (q=, k=)") if q or k is None."""
  if q is None or k is None:
    raise ValueError(f"{type(scheme).__name__}.bias needs the queries and keys (q=, k=)")


class PositionalScheme(nnx.Module):
  """Base class: every hook is the identity / no bias. Subclasses override what they use.

  Class attributes:
    max_position_hint: what a user can change to evaluate beyond `max_position`.
    max_position: None if any position id works; else the number of distinct position ids the
      scheme can represent (evaluation beyond it is refused before compilation).
    relative: True if the scheme's positions reach attention only through the `rotate` and
      `bias` hooks as position ids (not through `embed`, nor from the context), so that the
      eval-time position-id transforms (models/position_transforms.py) apply to it.
    config_fields: the `model.position` fields the scheme reads, name -> (default, one-line
      comment); configs/base.py gathers every registered scheme's (`models.positions.
      config_fields`). A field that several schemes read (per_layer, rope_theta, ...) is declared
      by each of them, with the same default.
  """

  max_position: int | None = None
  relative: bool = False
  config_fields: dict[str, tuple[object, str]] = {}
  # Fields whose default changed, -> the value runs made before the change used: a stored
  # config.json without the field means this value (configs/stored.py).
  legacy_defaults: dict[str, object] = {}
  max_position_hint: str = ""  # how to evaluate longer, shown when a length is refused
  # True when `bias` of a block of keys equals that block of the bias over all keys (the bias
  # of pair (i, j) depends on positions and on q_i, k_j only). Attention then runs long
  # sequences over key blocks with an online softmax, skipping blocks no query of a chunk can
  # see (models/attention.py). False (CoPE: its bias counts gates over every key from j to i):
  # each query chunk sees its whole key range at once.
  bias_blockwise: bool = True
  # A second position stream (data/position_layouts.py): "" (none; most schemes), "digits"
  # (Abacus: digit index within each number) or "segments" (BiPE: intra-segment index as
  # `positions`, segment index as the second stream). `embed_stream` / `attention_stream` say
  # which stream the `embed` hook and the attention hooks (`rotate`, `bias`, `kernel_spec`, the
  # KV cache) receive: "positions" or "aux" (the layout's second stream).
  position_layout: str = ""
  embed_stream: str = "positions"
  attention_stream: str = "positions"
  # True when `rotate` treats heads differently (per-head parameters or per-head choices: PoPE's
  # key phases, FoPE's coefficients, RoPE on some heads only). Under grouped-query attention the
  # keys are then repeated to the query heads before `rotate` (each query head rotates its copy
  # of the shared key with its own parameters); otherwise `rotate` sees the keys with their
  # `num_kv_heads` heads, as Llama does, and they are repeated after it. The KV cache holds the
  # unrotated keys with num_kv_heads heads either way (models/attention.py).
  per_head_rotation: bool = False
  # Width C of the per-token context the scheme reads from each attention layer's input (FoX's
  # forget gates: C = heads); 0 (every other scheme): `token_context` is never called and `bias`
  # gets no q_context / k_context. The KV cache keeps each slot's token context (models/
  # attention.py KVCache.context).
  context_width: int = 0

  @classmethod
  def check_config(cls, cfg, dims: Dims) -> None:
    """Validates this scheme's config fields. Raises `ConfigError` naming the field."""

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """x: [batch, seq, d_model] (compute dtype), positions: int32 [batch, seq] -> same as x."""
    return x

  def rotate(self, q: jax.Array, k: jax.Array, q_positions: jax.Array, k_positions: jax.Array,
             layer: int) -> tuple[jax.Array, jax.Array]:
    """q: [batch, q_len, heads, head_dim], k: [batch, k_len, kv_heads, head_dim] -> (q, k).

    kv_heads is `num_kv_heads` (grouped-query attention), or `heads` when the scheme declares
    `per_head_rotation` or the model has multi-head attention. A rotation that does not depend
    on the head works on either."""
    return q, k

  def bias(self, q_positions: jax.Array, k_positions: jax.Array, layer: int, *,
           q: jax.Array | None = None, k: jax.Array | None = None,
           mask: jax.Array | None = None) -> jax.Array | None:
    """Additive logit bias for one layer (`layer` is a static Python int).

    Args:
      q_positions: int32 [batch, q_len]; k_positions: int32 [batch, k_len].
      q: [batch, q_len, heads, head_dim] queries after `rotate` (for contextual schemes).
      k: [batch, k_len, heads, head_dim] keys after `rotate`.
      mask: bool [batch or 1, 1, q_len, k_len], True where attention is allowed.
      q_context / k_context (keyword arguments passed only to a scheme with `context_width`):
        float32 [batch, q_len, C] / [batch, k_len, C], `sequence_context` at the queries' and
        the keys' slots.

    Returns:
      float32 [batch, heads, q_len, k_len], or None for no bias. Masked entries may hold
      anything: they are removed after the bias is added.
    """
    return None

  def token_context(self, x: jax.Array, layer: int) -> jax.Array:
    """Per-token quantities of the attention layer's input, for a scheme with `context_width`.

    Args:
      x: [batch, seq, d_model] the attention sublayer's input (after the pre-norm), compute
        dtype; layer: static layer index.

    Returns:
      float32 [batch, seq, context_width]; cached per slot in cached decoding and gathered over
      the sequence under context parallelism, like the keys.
    """
    raise NotImplementedError(f"{type(self).__name__} declares no context_width")

  def sequence_context(self, token_context: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """float32 [batch, k_len, C] from the token contexts of every key slot [batch, k_len, C] in
    sequence order and their segment ids int32 [batch, k_len] (FoX: a cumulative sum per
    document). `bias` receives its slices: k_context of the keys, q_context of the queries'
    own slots. Default: the token contexts as they are."""
    del segment_ids
    return token_context

  # ---- fused-kernel capability (models/kernels; model.attention_impl = "pallas") ----
  def kernel_spec(self, layer: int, q_positions: jax.Array,
                  k_positions: jax.Array) -> KernelSpec | str:
    """The positional part of `layer`'s attention for the fused kernel, or why there is none.

    The kernel (models/kernels/flash.py) rotates q and k and adds a closed-form bias inside
    its tiles; a scheme that can be written that way returns a `KernelSpec`
    (models/kernels/spec.py) whose attention equals `rotate` + `bias` + softmax. This default
    serves schemes that touch only the embeddings (or nothing: NoPE, learned, sinusoidal):
    attention itself is position-free, an empty spec. A scheme that overrides `rotate` or
    `bias` without overriding this method gets a reason string instead, so attention falls
    back to the XLA path (logged, never silently).

    Args:
      layer: static layer index.
      q_positions, k_positions: int32 [batch, seq] position ids (for per-call quantities such
        as dynamic NTK's frequencies).

    Returns:
      A KernelSpec, or a one-line reason (str) why this scheme cannot use the kernel.
    """
    del layer, q_positions, k_positions
    cls = type(self)
    if cls.rotate is PositionalScheme.rotate and cls.bias is PositionalScheme.bias:
      return KernelSpec()
    return (f"scheme {cls.__name__} has no fused-kernel form (its rotate/bias hooks are not "
            "ALiBi, KERPLE, T5 or RoPE)")
  # ---- end fused-kernel capability ----
