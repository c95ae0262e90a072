"""Fused attention kernels (Pallas) and their pure-jnp references.

  spec.py       `KernelSpec`: what a positional scheme asks the kernel to compute (RoPE inverse
                frequencies and scales, the bias family and its parameters).
  reference.py  `reference_attention`: the kernel's exact function in plain jnp (tests, bench).
  blocks.py     block math shared by both kernels: RoPE on a block, the in-kernel bias and its
                parameter gradients, the mask, the online-softmax step.
  gpu.py        the kernels laid out for the Triton lowering (a key loop inside each program).
  tpu.py        the kernels laid out for the Mosaic lowering (keys on the grid, VMEM scratch).
  flash.py      `flash_attention`: padding, layout, backend choice and the custom VJP; k, v may
                have fewer heads than q (grouped-query / multi-query attention).
  partition.py  `partitioned_flash_attention`: the kernel per device in `jax.shard_map` over the
                trace's mesh (batch over "data"/"fsdp", heads and KV heads over "tensor").

Modules are imported explicitly (`from models.kernels import flash`); this file imports nothing,
so `models.positions` can import `models.kernels.spec` without a cycle.
"""
