"""The optimizer of a training run: AdamW with linear warmup and cosine decay (optax).

Fields (configs/base.py, `train.*`): learning_rate, warmup_steps, num_steps, final_lr_ratio, b1,
b2, weight_decay, grad_clip. train.py builds it once; warm starts (runs/warm_start.py) begin a
fresh optimizer state on the parent's parameters.
"""

from __future__ import annotations

import jax
import optax


def make_lr_schedule(train_config) -> optax.Schedule:
  """The learning-rate schedule used by `make_optimizer` (also logged): int step -> float rate.

  0 at step 0, rising linearly to `learning_rate` at `warmup_steps`, then a cosine to
  `learning_rate * final_lr_ratio` at `num_steps` (held there after).
  """
  t = train_config
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=t.learning_rate, warmup_steps=t.warmup_steps,
      decay_steps=max(t.num_steps, t.warmup_steps + 1), end_value=t.learning_rate * t.final_lr_ratio)


def make_optimizer(train_config) -> optax.GradientTransformation:
  """AdamW (Loshchilov & Hutter, arXiv 1711.05101) with linear warmup + cosine decay.

  The learning rate follows `make_lr_schedule`. Gradients are clipped to global norm
  `grad_clip` (if > 0); weight decay applies to matrices only (ndim >= 2: no norms, no biases).
  """
  t = train_config
  adamw = optax.adamw(make_lr_schedule(t), b1=t.b1, b2=t.b2, weight_decay=t.weight_decay,
                      mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params))
  if t.grad_clip > 0:
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), adamw)
  return adamw
