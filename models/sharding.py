"""Device mesh and logical-axis sharding rules (the MaxText convention, in a few lines).

Parameters carry *logical* axis names (`nnx.Param(..., logical_axes=("embed", "mlp"))`);
`LOGICAL_RULES` maps each to a mesh axis of the ("data", "fsdp", "context", "tensor") mesh.
The batch is split over data and fsdp; parameters are sharded over fsdp (their "embed" axis)
and tensor (heads / MLP / vocabulary) and replicated over context, which splits the sequence
inside the model's forward pass (models/context_parallel.py).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from configs.errors import mesh_shape

MESH_AXES = ("data", "fsdp", "context", "tensor")  # context: sequence parallelism
BATCH = ("data", "fsdp")  # mesh axes that split the batch
LOGICAL_RULES: dict[str, str | tuple[str, ...] | None] = {
    "batch": BATCH,
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",  # grouped-query K/V heads; replicated where tensor does not divide them
    "mlp": "tensor",
    "head_dim": None,
}


def make_mesh(mesh_config, devices=None) -> Mesh:
  """Builds the ("data", "fsdp", "context", "tensor") mesh from `config.mesh` (-1 = fill).

  Args:
    mesh_config: ConfigDict with integer fields data, fsdp, tensor and optionally context
      (absent in runs made before it existed: 1).
    devices: devices to use (default `jax.devices()`).

  Raises:
    ConfigError: sizes that do not multiply to the device count (see `mesh_shape`).
  """
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config, len(devices))
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def logical_to_spec(logical_axes) -> P:
  """Maps logical axis names (None = replicated) to a mesh `PartitionSpec`."""
  return P(*(None if a is None else LOGICAL_RULES[a] for a in logical_axes))


def param_shardings(abstract_state: nnx.State, mesh: Mesh):
  """NamedShardings for a model state, as a pure dict shaped like `nnx.to_pure_dict(state)`.

  A parameter without `logical_axes` metadata (norm scales) is replicated, and so is any
  dimension that its mesh axes do not divide evenly (e.g. the 259-id byte vocabulary on a
  tensor axis of 2): such a dimension is small, and uneven shards would fail to lay out.
  """
  def one(var):
    axes = getattr(var, "logical_axes", None) or (None,) * len(var.shape)
    spec = []
    for size, mesh_axes in zip(var.shape, logical_to_spec(axes)):
      names = (mesh_axes,) if isinstance(mesh_axes, str) else (mesh_axes or ())
      split = int(np.prod([mesh.shape[n] for n in names])) if names else 1
      spec.append(mesh_axes if size % split == 0 else None)
    return NamedSharding(mesh, P(*spec))

  specs = jax.tree.map(one, abstract_state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  return nnx.to_pure_dict(specs)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Sharding of `[batch, seq]` inputs: batch over ("data", "fsdp"), sequence replicated."""
  return NamedSharding(mesh, P(BATCH, None))


def abstract_batch(fields: dict, mesh: Mesh) -> dict:
  """A global batch as `jax.ShapeDtypeStruct`s for ahead-of-time lowering.

  Args:
    fields: {name: (shape, dtype)}, each shape `[batch, seq]` (global, tokens).
    mesh: device mesh; each field is sharded as `batch_sharding(mesh)`.

  Returns:
    {name: ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh))}.
  """
  return {k: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh))
          for k, (shape, dtype) in fields.items()}


def replicated(mesh: Mesh) -> NamedSharding:
  """A fully replicated sharding on `mesh`."""
  return NamedSharding(mesh, P())


def trace_under_mesh(mesh: Mesh | None, fn):
  """`fn`, traced with `mesh`'s abstract mesh as the context (`jax.sharding.use_abstract_mesh`).

  Modules that must know the mesh but are built without one read it at trace time with
  `jax.sharding.get_abstract_mesh()`: the fused attention kernel runs in `jax.shard_map` over
  it (models/kernels/partition.py). Wrap the function given to `jax.jit`, so the wrapped
  callable stays a jitted function (`.lower` works) and the mesh is set whoever calls it. With
  `mesh` None, `fn` itself. The jit should place its inputs or outputs on `mesh`
  (`in_shardings` / `out_shardings`), so that the program runs on the mesh's devices.
  """
  if mesh is None:
    return fn

  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)

  return traced
