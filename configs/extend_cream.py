"""CREAM: train at L with head, middle and tail positions spread over s * L, with PI.

Wu, Zhao and Zheng, "Never Miss A Beat: An Efficient Recipe for Context Window Extension of Large
Language Models with Consistent 'Middle' Enhancement", arXiv 2406.07138, Sec. 3: the training
window of L tokens keeps a head and a tail (k tokens each for "continuity", L/3 for
"relativity", half of the examples each) at the first and last positions of the target range
[0, s * L), and its middle segment's positions are placed by a truncated Gaussian centred on the
middle of that range. The authors' released code (github.com/bigai-nlco/CREAM, scripts/
run_CREAM.sh) combines it with linear interpolation (PI; YaRN also applies:
--config.model.position.rope_scaling=yarn ...) and fine-tunes Llama 2 at its original 4K for
1,000 steps, learning rate 2e-5, 10 warmup steps. Here: data.position_sampler.kind = "cream"
(data/cream.py: k = 4 s and sigma = 3, the released values), train_len stays L, and the shared
recipe of configs/extension_recipes.py (same tokens as the others).

  python train.py --config=configs/extend_cream.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The CREAM child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, length, s = extension_recipes.child_config(arg, "configs/extend_cream.py", target_len=False)
  c.data.position_sampler.kind = "cream"
  c.data.position_sampler.max_position = int(round(s * length))
  c.model.position.rope_scaling = "pi"
  c.model.position.rope_scaling_factor = s
  return c
