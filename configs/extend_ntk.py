"""NTK-aware interpolation: a new base b * s^(d/(d-2)), then fine-tuned at s * L.

bloc97 (2023), as defined by Peng et al., arXiv 2309.00071, Sec. 3.1, Eq. (14)-(16); the YaRN
paper fine-tunes it with YaRN's recipe as a baseline (Sec. 4), which is followed here
(configs/extension_recipes.py).

  python train.py --config=configs/extend_ntk.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The NTK-aware child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, _, s = extension_recipes.child_config(arg, "configs/extend_ntk.py")
  c.model.position.rope_scaling = "ntk"
  c.model.position.rope_scaling_factor = s
  return c
