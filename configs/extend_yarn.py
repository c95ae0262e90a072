"""YaRN: NTK-by-parts frequencies and attention scaling, then fine-tuned at s * L.

Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models", arXiv
2309.00071, Sec. 3.2-3.4 (Eq. (17)-(22)), with the authors' index ramp (model.position.yarn_ramp
= "index", alpha 1, beta 32, the original context L = the parent's train_len). Their recipe
(Sec. 4.1): learning rate 2e-5, no weight decay, linear warmup of 20 steps, 400 steps at batch
64 for s = 16 (Llama 2 7B/13B). Here: configs/extension_recipes.py.

  python train.py --config=configs/extend_yarn.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The YaRN child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, length, s = extension_recipes.child_config(arg, "configs/extend_yarn.py")
  pos = c.model.position
  pos.rope_scaling = "yarn"
  pos.rope_scaling_factor = s
  pos.rope_scaling_train_len = length
  return c
