"""Greedy decoding with a KV cache (models.decoder.Decoder.decode), compiled once per shape."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from models.sharding import batch_sharding, replicated


def make_generate_fn(graphdef: nnx.GraphDef, mesh, *, prompt_len: int,
                     max_new_tokens: int) -> Callable:
  """Compiles greedy generation: prefill the prompt into a KV cache, then one token per step.

  Every row is one document (segment id 1) whose positions run 0 .. prompt_len - 1 over the
  prompt and continue prompt_len, prompt_len + 1, ... over the generated tokens, so a decoded
  token sees exactly what a full forward pass over prompt + generated tokens would show it. A
  scheme with a position layout (Abacus, BiPE) gets the layout's streams of that whole sequence
  (evaluation rule: no offset).

  Args:
    graphdef: the Decoder's NNX graph definition.
    mesh: device mesh; the batch is split over ("data", "fsdp"), so the batch size must be a
      multiple of their product.
    prompt_len: P, tokens per prompt (BOS included), >= 1.
    max_new_tokens: tokens to generate, >= 1.

  Returns:
    A jitted function `(params pure dict, prompts int32 [batch, P]) -> int32 [batch,
    max_new_tokens]` of greedily chosen token ids (argmax of the float32 logits; ties go to the
    lowest id). The KV cache holds P + max_new_tokens - 1 slots.

  Raises:
    ValueError: prompt_len < 1 or max_new_tokens < 1.
  """
  if prompt_len < 1 or max_new_tokens < 1:
    raise ValueError(f"prompt_len and max_new_tokens must be >= 1; got {prompt_len}, "
                     f"{max_new_tokens}")

  def generate(params, prompts):
    model = nnx.merge(graphdef, params)
    batch = prompts.shape[0]
    total = prompt_len + max_new_tokens
    cache = model.init_cache(batch, total - 1)
    ones = jnp.ones((batch, 1), jnp.int32)
    # The token buffer (prompt, then each generated token once it is fed back) from which a
    # scheme's position layout (data/position_layouts.py) reads the streams of the token fed at
    # each step: its indices depend on earlier tokens only, so the unfilled tail is harmless.
    buffer = jnp.zeros((batch, total), jnp.int32).at[:, :prompt_len].set(prompts)
    index = jnp.broadcast_to(jnp.arange(total, dtype=jnp.int32), buffer.shape)

    def streams(buffer, start, size):  # (positions, {aux_positions}) of buffer[:, start:+size]
      if model.layout is None:
        return index[:, start:start + size] if isinstance(start, int) else ones * start, {}
      positions, aux = model.layout.streams(buffer, index, jnp.ones_like(buffer))
      cut = lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, axis=1)  # noqa: E731
      return cut(positions), {"aux_positions": cut(aux)}

    positions, aux = streams(buffer, 0, prompt_len)
    logits, cache = model.decode(prompts, positions, jnp.ones_like(prompts), cache, **aux)
    first = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)

    def step(carry, t):
      token, cache, buffer = carry
      at = prompt_len + t
      buffer = jax.lax.dynamic_update_slice_in_dim(buffer, token[:, None], at, axis=1)
      positions, aux = streams(buffer, at, 1)
      logits, cache = model.decode(token[:, None], positions, ones, cache, **aux)
      return (jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32), cache, buffer), token

    (last, _, _), tokens = jax.lax.scan(step, (first, cache, buffer),
                                        jnp.arange(max_new_tokens - 1))
    return jnp.concatenate([tokens.T, last[:, None]], axis=1)

  return jax.jit(generate, in_shardings=(None, batch_sharding(mesh)),
                 out_shardings=replicated(mesh))
