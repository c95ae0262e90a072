"""DroPE: drop RoPE after pretraining, recalibrate briefly at the original length, evaluate long.

Gelberg et al., "Extending the Context of Pretrained LLMs by Dropping Their Positional
Embeddings", arXiv 2512.12167: the positional embedding is removed from a RoPE model (kind
"none", NoPE: no parameter changes) and the model recalibrated at its original context length
with a small budget (0.5-2% of pretraining in the paper); long contexts are then handled
zero-shot. Here train_len stays L, with the shared recipe of configs/extension_recipes.py (the
same tokens as the other methods).

  python train.py --config=configs/extend_drope.py:<parent> --workdir=<child>
"""

from configs import extension_recipes


def get_config(arg=None):
  """The DroPE child of the RoPE run `arg` = `<parent workdir>[,<s>]` (s sets only the eval
  lengths' range, 0.5 L .. 16 L as for every recipe)."""
  c, _, _ = extension_recipes.child_config(arg, "configs/extend_drope.py", target_len=False)
  c.model.position.kind = "none"
  return c
