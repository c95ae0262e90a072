"""Position interpolation: positions divided by s, then fine-tuned at s * L.

Chen et al., "Extending Context Window of Large Language Models via Positional Interpolation",
arXiv 2306.15595, Eq. (4): f'(x, m) = f(x, m L / L'). Their recipe (Sec. 3.1): AdamW
(0.9, 0.95), learning rate 2e-5 for 7B/13B, no weight decay, linear warmup of 20 steps, 1,000
steps at batch 64 (Llama 7B-65B at 8,192-32,768 tokens). Here: configs/extension_recipes.py.

  python train.py --config=configs/extend_pi.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The PI child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, _, s = extension_recipes.child_config(arg, "configs/extend_pi.py")
  c.model.position.rope_scaling = "pi"
  c.model.position.rope_scaling_factor = s
  return c
