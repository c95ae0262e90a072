"""Hugging Face checkpoints out: `python -m runs.hf_export --workdir=<run> [--step=N] --out=<folder>`.

Writes a folder that `transformers.AutoModelForCausalLM.from_pretrained(<folder>)` loads:
config.json (runs/hf_llama.py `hf_config`: the architecture `export_arch` picks, the RoPE and its
scaling as transformers' `rope_parameters`, and `rope_theta` + `rope_scaling` for transformers
4.x and vLLM), model.safetensors (the parameters of the checkpoint, in their dtype),
generation_config.json (the tokenizer's BOS/EOS/PAD ids) and, when the run's data.tokenizer is
"hf:<path>", that folder's tokenizer.json, tokenizer_config.json and special_tokens_map.json.

A run transformers cannot run (ALiBi, T5 bias, KERPLE, FIRE, CoPE, learned tables, YaRN's paper
ramp, ...) is refused in one line listing what is exportable, before any checkpoint is read.
Which architecture each configuration becomes, and what the mapping does not carry over:
docs/pretrained.md.
"""

from __future__ import annotations

import os

import jax
import ml_collections
import numpy as np

from configs.errors import ConfigError
from configs.stored import load_run_config
from data.tokenizers import get_tokenizer
from runs import hf_folder, hf_llama
from runs.checkpoint import restore_params


def tokenizer_folder(tokenizer: str) -> str | None:
  """The folder holding the tokenizer.json of an "hf:<tokenizer.json or folder>" data.tokenizer;
  None for the byte and SentencePiece tokenizers (no Hugging Face files to copy)."""
  if not tokenizer.startswith("hf:"):
    return None
  path = tokenizer[len("hf:"):]
  return path if os.path.isdir(path) else os.path.dirname(path)


def write_export(config, params, out: str) -> dict:
  """Writes `params` of a model of `config` to `out` as a transformers folder (module docstring).

  Args:
    config: the experiment config (its model section, data.train_len and data.tokenizer).
    params: the pure parameter dict (numpy or jax arrays) of a Decoder of `config`.
    out: the folder (created; files of the same names are replaced).

  Returns:
    {"architecture": transformers class, "files": names written, "out"}.

  Raises:
    ConfigError: no transformers equivalent (`hf_llama.export_arch`).
  """
  arch = hf_llama.export_arch(config)
  tokenizer = get_tokenizer(config.data.tokenizer)
  ids = {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
         "pad_token_id": tokenizer.pad_id}
  ids = {k: (None if v is None else int(v)) for k, v in ids.items()}
  params = jax.tree.map(np.asarray, params)
  tensors = {}
  for t in hf_llama.tensors(config, arch.model_type):
    if t.path is None:
      if not t.optional:  # o_proj.bias of a q/k/v-biased Llama / Qwen3 / SmolLM3: zeros
        tensors[t.name] = np.zeros(t.shape, params["embedding"].dtype)
      continue
    value = params
    for key in t.path:
      value = value[key]
    tensors[t.name] = t.from_ours(np.asarray(value))
  files = hf_folder.write_folder(
      out, hf_llama.hf_config(config, arch, ids), tensors,
      generation_config={**ids, "_from_model_config": True},
      tokenizer_folder=tokenizer_folder(config.data.tokenizer))
  return {"architecture": arch.causal_lm, "files": files, "out": out}


def export(workdir: str, out: str, step: int | None = None) -> dict:
  """Writes the checkpoint `step` (latest: None) of the run in `workdir` to `out` (module
  docstring; `write_export`).

  Args:
    workdir: a training run's folder (config.json, checkpoints/).
    out: the folder to write (created; files of the same names are replaced).
    step: the checkpoint step; None for the latest.

  Returns:
    {"architecture": transformers class, "step", "files": names written, "out"}.

  Raises:
    ConfigError: the run's configuration has no transformers equivalent (before anything is
      read; `hf_llama.export_arch`), no config.json or checkpoint (or none at `step`), `out` is a
      file or the run's own folder.
  """
  config = load_run_config(workdir)
  hf_llama.export_arch(config)
  if os.path.isfile(out) or os.path.abspath(out) == os.path.abspath(workdir):
    raise ConfigError(f"--out={out} must be a new or an export folder, not a file or the run")
  from models import sharding
  from models.spec import model_spec
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "context": 1, "tensor": 1})
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  params, step = restore_params(workdir, config, model_spec(config, mesh), step)
  return {**write_export(config, params, out), "step": step}


def main(argv) -> None:
  """`python -m runs.hf_export --workdir=<run> --out=<folder>`: exit 2 with one line on bad input
  (runs.command_line.run: stray arguments and flag errors too)."""
  from absl import flags
  del argv
  from runs import command_line, distributed, startup
  distributed.quiet_library_logs()  # Orbax's INFO lines
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  f = flags.FLAGS
  command_line.check_writable(f.out, "--out")  # before the checkpoint is read
  result = export(f.workdir, f.out, f.step)
  print(f"wrote {result['out']}: {result['architecture']} at step {result['step']} "
        f"({', '.join(result['files'])})")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from runs import command_line
  absl_flags.DEFINE_string("workdir", None, "The run's folder.", required=True)
  absl_flags.DEFINE_integer("step", None, "The checkpoint step (default: the latest).")
  absl_flags.DEFINE_string("out", None, "The folder to write.", required=True)
  command_line.run(main, usage="python -m runs.hf_export --workdir=<run> --out=<folder> "
                   "[--step=N]")
