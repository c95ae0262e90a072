"""EndPrompt: train at L with the window's last tokens placed at the end of s * L, with PI.

"EndPrompt: Efficient Long-Context Extension via Terminal Anchoring", arXiv 2605.14589: each
training sequence of L tokens keeps its first L - c tokens at positions 0 .. L-c-1 and moves its
last c tokens (the "terminal prompt") to the last positions of the target range, s L - c ..
s L - 1, so that a short sequence shows relative distances up to s L - 1. The code released as
the paper's (github.com/clx1415926/EndPrompt, finetune_main_suffix.sh) extends Llama-3-8B from
8K to 64K with c = 20 and linear interpolation (PI) at factor 8: learning rate 2e-5, 20 warmup
steps then constant, weight decay 0, one epoch. Here: data.position_sampler.kind = "endprompt"
(data/endprompt.py; c = 20, anchor "end"), train_len stays L, and the shared recipe of
configs/extension_recipes.py (same tokens as the others).

  python train.py --config=configs/extend_endprompt.py:<parent>[,<s>] --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The EndPrompt child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, length, s = extension_recipes.child_config(arg, "configs/extend_endprompt.py",
                                                target_len=False)
  c.data.position_sampler.kind = "endprompt"
  c.data.position_sampler.max_position = int(round(s * length))
  c.data.position_sampler.endprompt_length = 20
  c.data.position_sampler.endprompt_anchor = "end"
  c.model.position.rope_scaling = "pi"
  c.model.position.rope_scaling_factor = s
  return c
