"""Entropy-aware ABF: ABF's raised base plus a log-length attention scale, then fine-tuned at s * L.

Zhang et al., "Extending LLMs' Context Window with 100 Samples", arXiv 2401.07004, Sec. 3: keep
attention entropy from growing with the context by scaling the logits of every layer but the
first two by max(1, log_L n) = max(1, ln n / ln L), n = position + 1, L the parent's training
length (their code, GAIR-NLP/Entropy-ABF `patch/EABF.py`: the rotated queries times
max(1, log(p + 1) / log 4096) for Llama 2), on top of ABF's raised base (configs/extend_abf.py),
then fine-tuned. Here: configs/extend_abf.py's child with `model.position.attention_temperature`
on, form "logn", `attention_temperature_layers` = (2, ..., num_layers - 1) and
`attention_temperature_l0` = the parent's train_len (the child trains at s * L, and the scale
must stay relative to L), the shared recipe of configs/extension_recipes.py.

  python train.py --config=configs/extend_eabf.py:<parent>[,<s>] --workdir=<child>

Raises (get_config): ConfigError for a parent with 2 layers or fewer (EABF leaves the first two
unscaled, so nothing would be scaled; use configs/extend_abf.py), and the recipe's own errors.
"""

from configs import extend_abf, extension_recipes
from configs.errors import ConfigError

FIRST_SCALED_LAYER = 2  # EABF leaves layers 0 and 1 unscaled


def get_config(arg=None):
  """The EABF child of the RoPE run `arg` = `<parent workdir>[,<s>]`."""
  c, length, _ = extension_recipes.child_config(arg, "configs/extend_eabf.py")
  layers = c.model.num_layers
  if layers <= FIRST_SCALED_LAYER:
    raise ConfigError(f"--config=configs/extend_eabf.py:{arg}: the parent has {layers} layers; "
                      f"EABF scales layers {FIRST_SCALED_LAYER}.. only, so a model of "
                      f"{FIRST_SCALED_LAYER} layers or fewer would get plain ABF "
                      "(configs/extend_abf.py)")
  pos = c.model.position
  pos.rope_theta = pos.rope_theta * extend_abf.ABF_RATIO
  pos.attention_temperature = True
  pos.attention_temperature_form = "logn"
  pos.attention_temperature_layers = tuple(range(FIRST_SCALED_LAYER, layers))
  pos.attention_temperature_l0 = int(length)
  return c
