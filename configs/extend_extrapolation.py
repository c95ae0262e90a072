"""Extrapolation fine-tuning: continue training a RoPE run at s * L with its positions unchanged.

The baseline of position interpolation (Chen et al., arXiv 2306.15595, Sec. 3.2: "direct
fine-tuning" of Llama at 8,192 tokens with the original RoPE, which after 10,000 steps still had
an effective context of only 2,560 tokens, Table 4). Recipe: configs/extension_recipes.py.

  python train.py --config=configs/extend_extrapolation.py:<parent> --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The child of the RoPE run `arg` = `<parent workdir>[,<s>]`, trained at s * L."""
  c, _, _ = extension_recipes.child_config(arg, "configs/extend_extrapolation.py")
  return c
