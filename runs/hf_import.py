"""Hugging Face checkpoints in: a folder as `huggingface-cli download` leaves it (config.json,
`*.safetensors` with or without an index, tokenizer.json) as the parent of a run.

  python train.py --config=configs/extend_yarn.py:hf:<folder> --workdir=w/ext   # a recipe
  python train.py --config=<yours> --config.train.init_from=hf:<folder> ...      # a warm start
  python -m runs.hf_import --hf=<folder> --workdir=w/imported                    # a run folder
  python -m eval.run --workdir=w/imported                                        # ... evaluated

The model config comes from config.json (runs/hf_llama.py: Llama, Mistral, Qwen2, Qwen3, OLMo 2,
SmolLM3), the weights from the safetensors files (runs/hf_folder.py; no torch at run time), the
tokenizer is `hf:<folder>` (data/hf_tokenizer.py). Everything is checked from config.json and the
safetensors headers before any weight is read or anything compiled. A child's config.json records
the parent as {"workdir": "hf:<folder>", "step": 0, "config_hash", "hf": {"name", "revision",
"weights_sha256": {file: sha256}}}.

`runs.hf_import` writes a run folder (config.json and an Orbax checkpoint of the parameters at
step 0) that `eval.run`, `train.init_from` and the recipes read like any run; it holds no optimizer
state and no data iterator, so it is not resumed by train.py.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from configs.base import get_config
from configs.errors import ConfigError
from runs import hf_folder, hf_llama
from runs.workdir import config_hash

HF_PREFIX = "hf:"


def is_hf(value) -> bool:
  """Whether a train.init_from / recipe parent value names a Hugging Face folder ("hf:...")."""
  return isinstance(value, str) and value.startswith(HF_PREFIX)


def folder_of(value: str) -> str:
  """The absolute folder of "hf:<folder>".

  Raises:
    ConfigError: nothing after "hf:".
  """
  folder = value[len(HF_PREFIX):] if is_hf(value) else value
  if not folder:
    raise ConfigError(f"{value!r}: give the model's folder after 'hf:' (hf:<folder>)")
  return os.path.abspath(folder)


def set_field(config, path: str, value) -> None:
  """Sets the dotted field `path` of a ConfigDict (its type may change: a tuple of factors)."""
  *parents, leaf = path.split(".")
  node = config
  for key in parents:
    node = node[key]
  with node.ignore_type():
    node[leaf] = value


def parent_config(value: str):
  """The experiment config of the model in an "hf:<folder>": configs/base.py with the model
  fields of its config.json (`hf_llama.config_fields`), data.train_len = its
  max_position_embeddings (the context it states), data.tokenizer = "hf:<folder>" when the folder
  holds a tokenizer.json, data.batch_size = 1 (a pretraining batch is not stated).

  Raises:
    ConfigError: no folder or config.json, or a config.json that cannot be represented.
  """
  folder = folder_of(value)
  hf = hf_folder.read_config(folder)
  c = get_config()
  for path, field in hf_llama.config_fields(hf, os.path.join(folder, hf_folder.CONFIG)).items():
    set_field(c, path, field)
  if os.path.isfile(os.path.join(folder, "tokenizer.json")):
    c.data.tokenizer = HF_PREFIX + folder
  c.data.batch_size = 1
  return c


def check_weights(value: str, config) -> None:
  """Refuses weights that do not match the model (missing or extra tensor, shape, dtype), from
  the safetensors headers (`hf_folder.check_tensors`), before anything is read or compiled.

  Raises:
    ConfigError: one line naming the tensor; or no safetensors weights.
  """
  folder = folder_of(value)
  hf = hf_folder.read_config(folder)
  arch = hf_llama.architecture(hf, folder)
  hf_folder.check_tensors(folder, hf_llama.tensors(config, arch.model_type),
                          hf.get("dtype") or hf.get("torch_dtype"))


def record(value: str, config) -> dict:
  """What a child's config.json records of an "hf:<folder>" parent (module docstring): the
  folder, step 0, the hash of `config` (its parent_config), the hub name and revision where the
  download left them (`hf_folder.provenance`) and the sha256 of every weight file."""
  folder = folder_of(value)
  hf = hf_folder.read_config(folder)
  return {"workdir": HF_PREFIX + folder, "step": 0, "config_hash": config_hash(config),
          "hf": {**hf_folder.provenance(folder, hf),
                 "weights_sha256": hf_folder.weights_sha256(folder)}}


def load_params(value: str, config, spec):
  """The weights of an "hf:<folder>" in the model's shapes and shardings.

  Args:
    value: "hf:<folder>".
    config: its parent_config (the shapes the weights have: runs/warm_start.py checked that the
      child's equal them).
    spec: the run's ModelSpec (param_shardings; abstract_params give each parameter's dtype).

  Returns:
    Pure dict of jax arrays like `spec.abstract_params` (float32 widening of F16/BF16 is exact).

  Raises:
    ConfigError: an o_proj bias that is not zero (`hf_folder.load_tensors`).
  """
  folder = folder_of(value)
  arch = hf_llama.architecture(hf_folder.read_config(folder), folder)
  params = hf_folder.load_tensors(folder, hf_llama.tensors(config, arch.model_type), np.float32)
  params = jax.tree.map(lambda x, a: np.asarray(x, a.dtype), params, spec.abstract_params)
  return jax.device_put(params, spec.param_shardings)


def convert(value: str, workdir: str) -> str:
  """`python -m runs.hf_import`: writes `workdir` as a run folder of the "hf:<folder>" model:
  config.json (its parent_config; "parent" the `record`, "hf_import": true) and the parameters
  as the Orbax checkpoint of step 0.

  Returns:
    workdir.

  Raises:
    ConfigError: the folder or its weights are refused (`parent_config`, `check_weights`), or
      the workdir holds a checkpoint already.
  """
  from models import sharding
  from models.spec import model_spec
  from runs import workdir as run_dir
  from runs.checkpoint import checkpoint_manager, committed_steps
  import orbax.checkpoint as ocp
  config = parent_config(value)
  run_dir.check_workdir(workdir)
  if os.path.isdir(workdir) and committed_steps(workdir):
    raise ConfigError(f"--workdir={workdir} holds checkpoints already; give a new folder")
  check_weights(value, config)
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  spec = model_spec(config, mesh)
  params = load_params(value, config, spec)
  run_dir.make_workdir(workdir)
  run_dir.write_run_config(workdir, config, num_params=spec.num_params, mesh=dict(mesh.shape),
                           num_devices=len(jax.devices()), parent=record(value, config),
                           hf_import=True)
  mngr = checkpoint_manager(workdir, config)
  mngr.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave({"params": params})))
  mngr.wait_until_finished()
  mngr.close()
  return workdir


def main(argv) -> None:
  """`python -m runs.hf_import --hf=<folder> --workdir=<run>`: exit 2 with one line on bad
  input (runs.command_line.run: stray arguments and flag errors too)."""
  from absl import flags
  del argv
  from runs import command_line, distributed, startup
  distributed.quiet_library_logs()  # Orbax's INFO lines
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  value = flags.FLAGS.hf if is_hf(flags.FLAGS.hf) else HF_PREFIX + flags.FLAGS.hf
  command_line.check_writable(flags.FLAGS.workdir, "--workdir")  # before the weights are read
  out = convert(value, flags.FLAGS.workdir)
  print(f"wrote {out}: config.json and the parameters at step 0 (evaluate with python -m "
        f"eval.run --workdir={out}; data.* can be overridden there)")


if __name__ == "__main__":
  from absl import flags as absl_flags
  from runs import command_line
  absl_flags.DEFINE_string("hf", None, "The model folder (config.json, *.safetensors).",
                           required=True)
  absl_flags.DEFINE_string("workdir", None, "The run folder to write.", required=True)
  command_line.run(main, usage="python -m runs.hf_import --hf=<folder> --workdir=<run folder>")
