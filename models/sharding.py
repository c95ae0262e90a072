"""Device mesh and logical-axis sharding rules (the MaxText convention, in a few lines).

Parameters carry *logical* axis names (`nnx.Param(..., logical_axes=("embed", "mlp"))`);
`LOGICAL_RULES` maps each to a mesh axis of the ("data", "fsdp", "context", "tensor") mesh.
The batch is split over data and fsdp; parameters are sharded over fsdp (their "embed" axis)
and tensor (heads / MLP / vocabulary) and replicated over context, which splits the sequence
inside the model's forward pass (models/context_parallel.py).
"""

from __future__ import annotations

import contextlib
import contextvars
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


def opt_state_shardings(abstract_opt, param_shardings, mesh: Mesh):
  """Shardings of an optimizer state: every subtree shaped like the parameters (Adam's moments,
  ...) sharded as the parameters, everything else (step counts, schedule state) replicated.

  What `optax.tree_map_params` gives, derived from the abstract state's structure alone:
  optax's version calls the optimizer's `init` eagerly, which cannot run where the mesh's devices
  are abstract (TPU topologies compiled on a CPU host, bench/tpu_compile.py).

  Args:
    abstract_opt: the optimizer state's ShapeDtypeStructs (`jax.eval_shape(tx.init, params)`).
    param_shardings: the parameters' shardings (a pytree of the parameters' structure).
    mesh: the mesh of the replicated leaves.
  """
  params_def = jax.tree.structure(param_shardings)
  like_params = lambda x: jax.tree.structure(x) == params_def  # noqa: E731
  return jax.tree.map(lambda sub: param_shardings if like_params(sub) else replicated(mesh),
                      abstract_opt, is_leaf=like_params)


# The platform of the devices the program being traced will run on, set for the trace by
# `mesh_platform` (`trace_under_mesh` sets it from the mesh's devices) for the fused
# attention kernels' default backend (models/kernels/flash.py `resolve_backend`).
# Unset: `jax.default_backend()`. Scoped to one trace: a context variable, reset on exit.
_TRACE_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kernel_trace_platform", default=None)


@contextlib.contextmanager
def mesh_platform(platform: str | None):
  """Within the block, the kernels' default backend follows `platform` ("tpu", "gpu", "cuda",
  "rocm", "cpu"; None = `jax.default_backend()`), not the host's default backend.

  A program traced for other devices than the host's default ones (a mesh of abstract TPU
  devices from `jax.experimental.topologies` on a CPU host, bench/tpu_compile.py) must lower the
  kernel for those devices: Mosaic for a TPU mesh, not the Pallas interpreter of the CPU.
  """
  token = _TRACE_PLATFORM.set(platform)
  try:
    yield
  finally:
    _TRACE_PLATFORM.reset(token)


def trace_platform() -> str:
  """The platform the traced program runs on: `mesh_platform`'s, else `jax.default_backend()`."""
  return _TRACE_PLATFORM.get() or jax.default_backend()


def trace_under_mesh(mesh: Mesh | None, fn):
  """`fn`, traced with `mesh`'s abstract mesh as the context (`jax.sharding.use_abstract_mesh`).

  Modules that must know the mesh but are built without one read it at trace time with
  `jax.sharding.get_abstract_mesh()`: the fused attention kernel runs in `jax.shard_map` over
  it (models/kernels/partition.py). Wrap the function given to `jax.jit`, so the wrapped
  callable stays a jitted function (`.lower` works) and the mesh is set whoever calls it. The
  kernels' backend follows the platform of the mesh's devices (`mesh_platform`, read by
  models/kernels/flash.py `resolve_backend`): Mosaic for a mesh of TPU devices even on a CPU
  host (bench/tpu_compile.py), where `jax.default_backend()` is "cpu". With `mesh` None, `fn`
  itself. The jit should place its inputs or outputs on `mesh` (`in_shardings` /
  `out_shardings`), so that the program runs on the mesh's devices.
  """
  if mesh is None:
    return fn
  platform = mesh.devices.flat[0].platform

  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), mesh_platform(platform):
      return fn(*args, **kwargs)

  return traced
