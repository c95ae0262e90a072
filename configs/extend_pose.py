"""PoSE: train at L with position ids that span s * L (skip-wise chunks), with PI.

Zhu et al., "PoSE: Efficient Context Window Extension of LLMs via Positional Skip-wise Training",
arXiv 2309.10400, Sec. 3.2: the training window of L tokens is cut into chunks (2 here, as in
the paper) and each chunk's positions are shifted by a random skip so that they cover the target
range [0, s * L); combined with linear interpolation (PI), the paper's main setting ("PoSE-
Linear"; NTK and YaRN also apply: --config.model.position.rope_scaling=yarn ...). Their recipe:
learning rate 2e-5, linear warmup of 10 steps, 1,000 steps at batch 64, at the original
length 2,048. Here: data.position_sampler.kind = "pose" (data/position_samplers.py), train_len
stays L, and the shared recipe of configs/extension_recipes.py (same tokens as the others).

  python train.py --config=configs/extend_pose.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The PoSE child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, length, s = extension_recipes.child_config(arg, "configs/extend_pose.py", target_len=False)
  c.data.position_sampler.kind = "pose"
  c.data.position_sampler.max_position = int(round(s * length))
  c.data.position_sampler.num_chunks = 2
  c.model.position.rope_scaling = "pi"
  c.model.position.rope_scaling_factor = s
  return c
