"""LongRoPE: searched per-pair rescale factors, then fine-tuned at s * L.

Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753:
non-uniform rescale factors lambda_i per RoPE feature pair and n-hat initial positions kept
unscaled, found by an evolutionary search on the parent (Sec. 3.2, Algorithm 1; here
`python -m sweeps.longrope_search`), then fine-tuning at the target length (Sec. 4: 400 steps at
128k for Llama 2, learning rate 2e-5, linear decay). Here the shared recipe of
configs/extension_recipes.py. The factors are read from the search's factors.json:

  python -m sweeps.longrope_search --workdir=<parent> --target_len=<s x L>
  python train.py --config=configs/extend_longrope.py:<parent>[,<s>[,<factors.json>]] --workdir=<child>

(default file `<parent>/longrope_search/x<s>/factors.json`, where the search writes it).

Progressive extension (the paper's Sec. 3.3): the parent may itself be a LongRoPE child; its
search (`--target_len` > its train_len) writes factors relative to the original RoPE and length
(rope_scaling_factor = target / L0, rope_scaling_train_len = L0, the parent's short factors), and
this recipe fine-tunes it at s x its train_len with them. Short factors (--factors_for=short) are
not a recipe: they serve the extended run as it is (eval.run), or a child through
--config.model.position.longrope_short_factors=(...).
"""

from configs import extension_recipes


def get_config(arg=None):
  """The LongRoPE child of the RoPE run `arg` = `<parent workdir>[,<s>[,<factors.json>]]`."""
  arg, path = arg or "", None
  if arg.endswith(".json") and "," in arg:  # the parent's path may hold commas; the file is last
    arg, _, path = arg.rpartition(",")
  c, _, s = extension_recipes.child_config(arg or None, "configs/extend_longrope.py",
                                           parent_scalings=("none", "longrope"))
  parent = c.train.init_from
  for name, value in extension_recipes.longrope_factors(parent, s, path).items():
    c.model.position[name] = value
  return c
