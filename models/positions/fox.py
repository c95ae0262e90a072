"""FoX: the Forgetting Transformer's data-dependent forget gate, as an attention-logit bias.

Lin, Nikishin, He & Courville, "Forgetting Transformer: Softmax Attention with a Forget Gate",
arXiv 2503.02130 (ICLR 2025), Sec. 2 (Eqs. 4-7): each head h has a scalar forget gate per token,

    f_t = sigmoid(w_h . x_t + b_h),                         (Eq. 4)

computed from the attention layer's input x_t, and query i attends to key j <= i with the logit

    q_i . k_j / sqrt(D) + D_ij,   D_ij = sum_{l=j+1..i} log f_l = c_i - c_j,   c_i = sum_{l<=i} log f_l

(Eqs. 5-7, the "decay bias" matrix D = log F). No other positional information is used (the paper's
FoX has no RoPE). With constant gates, log f_l = -m_h, D_ij = -m_h (i - j): ALiBi with slope m_h.

What follows the released code (github.com/zhixuan-lin/forgetting-transformer, `model/
forgetting_transformer/modeling_forgetting_transformer.py`, `fgate_type="full"`): the gate is one
linear projection of the (pre-normed) hidden state to one logit per head, with a bias; its weight
is initialised normal(init_std) and its bias at zero (`_initialize_weights`; the special bias
init `fgate_bias_init` is only for the data-independent gate types), so `fox_gate_bias_init`
defaults to 0: f = 1/2 for a zero input at step 0. The log gates are computed in float32, and
the cache keeps each token's log gate and recomputes the sums (as `FgateDynamicCache` does).
This is the basic FoX gate only: the "FoX (Pro)" variant's output gate, output norm, QK-norm
and key/value shifts are not implemented (QK-norm is available separately: model.qk_norm).

Packed documents: cross-document pairs are masked, so D_ij only matters within a document, and
c_i - c_j would be the same with a running sum over the whole window. The sum is restarted at
every document start anyway (a segmented cumulative sum, `sequence_context`): a document's logits
then do not depend, even by rounding, on how long the documents before it were, and |c| stays
bounded by the document's length rather than the window's. A global sink token
(model.sink_token, its own segment) is then a document of one token: D_{i,sink} = c_i -
log f_sink, the query's in-document sum minus the sink's own gate, a learned offset per head.

D is an ordinary additive bias of the pair (c_i, c_j), so attention's key-block loop applies
(`bias_blockwise`); the fused kernel has no form of it (attention runs on the XLA path), and
context parallelism gathers the log gates like the keys before summing them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from configs.errors import ConfigError
from models.positions.base import PositionalScheme, check_per_layer


def segmented_cumsum(values: jax.Array, segment_ids: jax.Array) -> jax.Array:
  """Cumulative sum over the sequence that restarts where the segment id changes.

  Args:
    values: float32 [batch, seq, C]; segment_ids: int32 [batch, seq].

  Returns:
    float32 [batch, seq, C]: out[:, t] = values[:, s..t].sum(axis=1), s the first index of t's
    run of equal segment ids.
  """
  start = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool),
                           segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)[..., None]

  def combine(a, b):
    (a_sum, a_start), (b_sum, b_start) = a, b
    return jnp.where(b_start, b_sum, a_sum + b_sum), a_start | b_start

  return jax.lax.associative_scan(combine, (values, jnp.broadcast_to(start, values.shape)),
                                  axis=1)[0]


class FoX(PositionalScheme):
  """Forget-gate decay bias D_ij = c_i - c_j, c the in-document cumulative sum of log f.

  Parameters: `gate_w` [d_model, heads] (normal(init_std)) and `gate_b` [heads]
  (`fox_gate_bias_init`), or [num_layers, ...] of each with `per_layer` (the released code: one
  gate projection per layer). Both in param_dtype, replicated.
  """

  # model.position fields it reads: name -> (default, comment); configs/base.py gathers them.
  config_fields = {
      "per_layer": (True, "own table per layer; False = one table shared by all layers (T5)."),
      "fox_gate_bias_init": (0.0, "FoX: initial forget-gate bias b_h of every head (the "
                                  "released code: 0, f = 1/2 for a zero input)."),
  }

  @classmethod
  def check_config(cls, cfg, dims):
    init = cfg.get("fox_gate_bias_init", 0.0)
    if isinstance(init, bool) or not isinstance(init, (int, float)):
      raise ConfigError(f"model.position.fox_gate_bias_init must be a real number (the initial "
                        f"forget-gate logit bias); got {init!r}")
    check_per_layer(cfg)

  def __init__(self, cfg, dims, *, rngs):
    """cfg: `model.position` (per_layer, fox_gate_bias_init); dims: see `Dims`."""
    self.per_layer = bool(cfg.per_layer)
    self.context_width = dims.num_heads  # one log gate per query head
    lead = (dims.num_layers,) if self.per_layer else ()
    w_shape, b_shape = lead + (dims.d_model, dims.num_heads), lead + (dims.num_heads,)
    self.gate_w = nnx.Param(
        nnx.initializers.normal(dims.init_std)(rngs.params(), w_shape, dims.param_dtype),
        logical_axes=(None,) * len(w_shape))
    self.gate_b = nnx.Param(
        jnp.full(b_shape, float(cfg.get("fox_gate_bias_init", 0.0)), dims.param_dtype),
        logical_axes=(None,) * len(b_shape))

  def token_context(self, x, layer):
    """x: [batch, seq, d_model] (the attention input) -> float32 log f [batch, seq, heads]."""
    w, b = self.gate_w[...], self.gate_b[...]
    if self.per_layer:
      w, b = w[layer], b[layer]
    logits = jnp.einsum("bsd,dh->bsh", x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    return jax.nn.log_sigmoid(logits + b.astype(jnp.float32))

  def sequence_context(self, token_context, segment_ids):
    """log f [batch, k_len, heads] -> c, its cumulative sum within each document."""
    return segmented_cumsum(token_context, segment_ids)

  def bias(self, q_positions, k_positions, layer, *, q_context=None, k_context=None, **unused):
    """D [batch, heads, q_len, k_len] = q_context[b, i, h] - k_context[b, j, h] (float32).

    q_context, k_context: c at the queries' and the keys' slots, float32 [batch, len, heads]
    (from `sequence_context`); the positions are not read.
    """
    del q_positions, k_positions, layer, unused
    if q_context is None or k_context is None:
      raise ValueError("FoX.bias needs q_context= and k_context= (the cumulative log gates)")
    qc, kc = q_context.transpose(0, 2, 1), k_context.transpose(0, 2, 1)  # [b, H, len]
    return qc[:, :, :, None] - kc[:, :, None, :]
