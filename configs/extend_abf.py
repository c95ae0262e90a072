"""Adjusted base frequency (ABF): a larger rope_theta, then fine-tuned at s * L.

Xiong et al., "Effective Long-Context Scaling of Foundation Models", arXiv 2309.16039, Sec. 3.1:
Llama 2's base 10,000 raised to 500,000 (x50) with continual pretraining at 32,768 tokens
(learning rate 2e-5 for 7B/13B, cosine schedule, 2,000 warmup steps). Here the base is raised by
the same factor `ABF_RATIO` (so rope_scaling stays "none", and eval-time extensions still apply
on top), with the shared recipe of configs/extension_recipes.py.

  python train.py --config=configs/extend_abf.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes

ABF_RATIO = 50.0  # 500,000 / 10,000


def get_config(arg=None):
  """The ABF child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, _, _ = extension_recipes.child_config(arg, "configs/extend_abf.py")
  c.model.position.rope_theta = c.model.position.rope_theta * ABF_RATIO
  return c
