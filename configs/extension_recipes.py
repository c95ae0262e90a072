"""Context-extension fine-tuning recipes: the child config of a trained RoPE run.

(This module is not an experiment config; the `--config` files are `configs/extend_*.py`, one
per method, each a call of `child_config`.) Every recipe is the experiment of its paper: pretrain
at L (the parent), change the positions, continue training briefly, then evaluate long:

  python train.py --config=configs/extend_yarn.py:w/base --workdir=w/yarn
  python train.py --config=configs/extend_yarn.py:w/base,8 --workdir=w/yarn8   # s = 8

The argument after ':' is the parent's workdir (a finished or stopped training run of kind
"rope"), optionally followed by `,<s>`, the extension factor (default 4): the target length is
s * L. The child starts from the parent's latest checkpoint (`train.init_from`, runs/
warm_start.py) with the parent's model, data and evaluation settings, and these changes, the
same for every method so that the methods are compared at one budget:

  data.train_len      s * L (PoSE, CREAM, EndPrompt and DroPE: L, see their files);
  data.batch_size     the parent's tokens per step kept: parent batch * L / train_len (>= 1);
  train.num_steps     `BUDGET` = 10% of the parent's training tokens (at least 10 steps);
  train.learning_rate the parent's peak / 15: PI (Chen et al., arXiv 2306.15595, Sec. 3.1) and
                      YaRN (Peng et al., arXiv 2309.00071, Sec. 4.1) fine-tune Llama 2 at 2e-5,
                      whose pretraining peak was 3e-4 (Touvron et al., arXiv 2307.09288, Table 1);
  schedule            linear warmup over 5% of the steps (PI: 20 of 1,000; YaRN: 20 of 400),
                      then constant (train.final_lr_ratio = 1; neither paper decays);
  train.weight_decay  0 (PI and YaRN);
  eval lengths        0.5 L .. 16 L, the same absolute lengths for every child and the parent.

The papers' own budgets are far smaller fractions of pretraining (YaRN: 400 steps of 64 x 64k
tokens, 0.08% of Llama 2's 2T; PI: 1,000 steps, 0.03%) -- at the tiny CPU scale such fractions are
one or two steps, so the budget is a stated 10%, overridable like every field:
`--config.train.num_steps=...`.
"""

from __future__ import annotations

import json
import math
import os

from configs.errors import ConfigError
from configs.stored import CONFIG_FILE, load_run_config
from runs import hf_import

BUDGET = 0.10  # share of the parent's training tokens spent on fine-tuning
# A Hugging Face parent (`hf:<folder>`, or a run folder `python -m runs.hf_import` wrote) states
# no pretraining budget: its children take YaRN's published recipe (Peng et al., arXiv 2309.00071,
# Sec. 4.1): 400 steps at 2e-5, 20 warmup steps, one sequence per step here.
HF_STEPS = 400
HF_LEARNING_RATE = 2e-5
LR_RATIO = 2e-5 / 3e-4  # fine-tuning over pretraining peak learning rate (PI, YaRN on Llama 2)
WARMUP_SHARE = 0.05  # of the fine-tuning steps (YaRN: 20 of 400)
EVAL_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # of the parent's train_len


def parse_arg(arg: str | None, config_file: str) -> tuple[str, float]:
  """The `--config=<file>:<parent>[,<s>]` argument -> (parent workdir, s).

  The parent's path may hold commas (a study's run names do: `kind=rope,seed=0`): an argument
  that is an existing folder is the parent; otherwise the part after the last comma is s.

  Raises:
    ConfigError: no argument, or s not a number > 1.
  """
  if not arg:
    raise ConfigError(f"{config_file} needs the parent run: --config={config_file}:<parent "
                      f"workdir>[,<factor s, default 4>]")
  if os.path.isdir(arg.removeprefix("hf:")) or "," not in arg:
    parent, factor = arg, ""
  else:
    parent, _, factor = arg.rpartition(",")
  try:
    s = float(factor) if factor else 4.0
  except ValueError:
    s = float("nan")
  if not s > 1:
    raise ConfigError(f"--config={config_file}:{arg}: the factor after ',' must be a number > 1 "
                      f"(target length / the parent's train_len); got {factor!r}")
  return parent, s


def child_config(arg: str | None, config_file: str, *, target_len: bool = True,
                 parent_scalings: tuple[str, ...] = ("none",)):
  """The fine-tuning config of a child of the parent named by `arg` (module docstring).

  A Hugging Face parent (`hf:<folder>`, runs/hf_import.py; or a run folder its import command
  wrote) takes `HF_STEPS` steps at `HF_LEARNING_RATE` instead of the budget and peak / 15, L =
  its max_position_embeddings and one sequence per step.

  Args:
    arg: `<parent workdir>[,<s>]` or `hf:<folder>[,<s>]`.
    config_file: the recipe's file, for messages.
    target_len: train at s * L (False: at the parent's L, PoSE and DroPE).
    parent_scalings: the parent's model.position.rope_scaling values accepted (LongRoPE's
      progressive extension accepts a LongRoPE-trained parent too).

  Returns:
    (config, L, s): the parent's config with the shared changes; the recipe then sets the
    positions.

  Raises:
    ConfigError: the parent is not a training run of kind "rope" trained without a RoPE scaling,
      or the argument is malformed.
  """
  parent, s = parse_arg(arg, config_file)
  hf = hf_import.is_hf(parent)
  if not hf and not os.path.isfile(os.path.join(parent, CONFIG_FILE)):
    raise ConfigError(f"--config={config_file}:{arg}: {parent} is not a training run's workdir "
                      f"(it has no {CONFIG_FILE}; a Hugging Face model folder is hf:<folder>)")
  c = hf_import.parent_config(parent) if hf else load_run_config(parent)
  if not hf:
    with open(os.path.join(parent, CONFIG_FILE)) as f:
      hf = bool(json.load(f).get("hf_import"))  # a run folder python -m runs.hf_import wrote
  pos = c.model.position
  if pos.kind != "rope" or pos.rope_scaling not in parent_scalings:
    also = "".join(f" (or trained with rope_scaling={x!r})" for x in parent_scalings
                   if x != "none")
    raise ConfigError(f"--config={config_file}:{arg}: the parent must be a RoPE run without "
                      f"RoPE scaling{also}; it has model.position.kind={pos.kind!r}, "
                      f"rope_scaling={pos.rope_scaling!r}")
  length, batch, steps = c.data.train_len, c.data.batch_size, c.train.num_steps
  parent_tokens = length * batch * steps
  c.data.train_len = int(round(s * length)) if target_len else length
  c.data.batch_size = max(1, batch * length // c.data.train_len)
  t = c.train
  t.init_from = (hf_import.HF_PREFIX + hf_import.folder_of(parent) if hf_import.is_hf(parent)
                 else os.path.abspath(parent))
  t.num_steps = max(10, int(round(BUDGET * parent_tokens / (c.data.train_len * c.data.batch_size))))
  t.learning_rate = t.learning_rate * LR_RATIO
  if hf:
    t.num_steps, t.learning_rate = HF_STEPS, HF_LEARNING_RATE
  t.warmup_steps = max(1, int(round(WARMUP_SHARE * t.num_steps)))
  t.final_lr_ratio = 1.0
  t.weight_decay = 0.0
  t.stop_after_step = -1
  t.checkpoint_every_steps = min(t.checkpoint_every_steps, t.num_steps)
  t.eval_every_steps = 0
  c.eval.length_multipliers = tuple(m * length / c.data.train_len for m in EVAL_MULTIPLIERS)
  return c, length, s


def longrope_factors(parent: str, s: float, path: str | None = None) -> dict:
  """The `model.position` fields of a LongRoPE factor search (sweeps/longrope_search.py).

  Args:
    parent: the parent's workdir.
    s: the factor; the default file is `<parent>/longrope_search/x<s:g>/factors.json`.
    path: another factors.json.

  Raises:
    ConfigError: the file is missing (naming the search command), is not a search's output, or
      was searched on another parent or for another s.
  """
  if path is None and hf_import.is_hf(parent):
    raise ConfigError(f"LongRoPE's factor search runs on a run folder: python -m runs.hf_import "
                      f"--hf={hf_import.folder_of(parent)} --workdir=<run>, then python -m "
                      f"sweeps.longrope_search --workdir=<run> --target_len=<{s:g} x L>, and give "
                      "this recipe <run> (or the factors.json as its third argument)")
  path = path or os.path.join(parent, "longrope_search", f"x{s:g}", "factors.json")
  if not os.path.isfile(path):
    raise ConfigError(f"{path} does not exist: run python -m sweeps.longrope_search "
                      f"--workdir={parent} --target_len=<{s:g} x train_len> first")
  try:
    with open(path) as f:
      stored = json.load(f)
    fields = stored["model_position"]
  except (ValueError, KeyError) as e:
    raise ConfigError(f"{path} is not a factors.json of sweeps.longrope_search: {e}") from e
  searched_on = stored.get("parent", {}).get("workdir")
  if searched_on is not None and searched_on != os.path.abspath(parent):
    raise ConfigError(f"{path} was searched on {searched_on}, not on the parent {parent}")
  if stored.get("factors_for", "long") != "long":
    raise ConfigError(f"{path} holds short factors (--factors_for=short), which serve the parent "
                      "as it is (eval.run); give the recipe a long-factor search's factors.json")
  # The recipe's s: target_len / the parent's train_len ("recipe_factor"; older files: the
  # rope_scaling_factor, the same for a parent without RoPE scaling).
  searched = stored.get("recipe_factor") or fields.get("rope_scaling_factor", s)
  if not math.isclose(float(searched), s):
    raise ConfigError(f"{path} holds factors for s={float(searched)}, not the recipe's "
                      f"s={s:g}; give the factor of the search (or search at s={s:g})")
  return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


RECIPES = ("extrapolation", "pi", "ntk", "yarn", "abf", "pose", "longrope", "drope", "eabf",
           "cream", "endprompt")


def recipe_of(child: dict, parent: dict | None) -> str:
  """Which recipe (configs/extend_<recipe>.py) made a warm-started child, from its config.

  Args:
    child: the child's config as dotted fields (`configs.errors.flatten` of config.json's
      "config").
    parent: the parent's, the same way (None when the parent's config.json is not at hand).

  Returns:
    One of RECIPES: "drope" (RoPE removed: kind "none"), "pose", "cream" or "endprompt" (the
    position sampler of that kind), the child's `rope_scaling` (pi, ntk, yarn, longrope, or
    another catalogue entry), "eabf" (the
    base raised and the attention temperature on), "abf" (the base raised: rope_theta above the
    parent's, or above 10,000 without the parent), else
    "extrapolation" (the positions unchanged).
  """
  pos = "model.position."
  if child.get(pos + "kind") == "none":
    return "drope"
  sampler = child.get("data.position_sampler.kind")
  if sampler in ("pose", "cream", "endprompt"):
    return sampler
  scaling = child.get(pos + "rope_scaling", "none")
  if scaling not in (None, "none"):
    return str(scaling)
  base = (parent or {}).get(pos + "rope_theta", 10000.0)
  if child.get(pos + "rope_theta", base) > base:
    return "eabf" if child.get(pos + "attention_temperature") else "abf"
  return "extrapolation"
