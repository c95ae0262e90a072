"""Running extrema along the last axis for numpy or jax.numpy arrays alike.

The position layouts (data/position_layouts.py, data/position_coupling.py) compute the same ids
in the numpy data pipeline and inside the jitted model; these helpers pick the library from the
array. jax is imported only on the jit path.
"""

from __future__ import annotations

import numpy as np


def array_module(a):
  """numpy for a numpy array, else jax.numpy."""
  if isinstance(a, np.ndarray):
    return np
  import jax.numpy as jnp
  return jnp


def cummax(a):
  """Running maximum along the last axis; same shape and dtype as `a`."""
  if isinstance(a, np.ndarray):
    return np.maximum.accumulate(a, axis=-1)
  import jax  # only the jit path gets here
  return jax.lax.cummax(a, axis=a.ndim - 1)


def cummin_reversed(a):
  """Running minimum from the right along the last axis; same shape and dtype as `a`."""
  if isinstance(a, np.ndarray):
    return np.minimum.accumulate(a[..., ::-1], axis=-1)[..., ::-1]
  import jax
  return jax.lax.cummin(a, axis=a.ndim - 1, reverse=True)
