"""A Hugging Face model folder on disk, as `huggingface-cli download` (or `save_pretrained`)
leaves it: `config.json`, weights in `*.safetensors` (one file, or shards with
`model.safetensors.index.json`), `tokenizer.json` and its companions; read and written without
torch (the `safetensors` package's numpy interface; bfloat16 through ml_dtypes).

The mapping of names and shapes to this decoder is runs/hf_llama.py; the warm start and the
import command are runs/hf_import.py; the export command is runs/hf_export.py.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import ml_dtypes
import numpy as np

from configs.errors import ConfigError
from runs.files import file_sha256, write_json
from runs.hf_llama import Tensor

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
GENERATION_CONFIG = "generation_config.json"
# Tokenizer files a folder may hold next to the weights (copied by the export when the run's
# data.tokenizer is "hf:<folder>").
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Float dtypes of the safetensors format (its header's names) and numpy's.
FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}
# config.json's `dtype` (transformers 5) / `torch_dtype` (4.x) -> the safetensors name.
DECLARED = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
# Buffers older transformers versions saved with the weights; not parameters, skipped.
IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


def read_config(folder: str) -> dict:
  """The parsed `<folder>/config.json`.

  Raises:
    ConfigError: the folder does not exist, has no config.json, or it is not a JSON object.
  """
  path = os.path.join(folder, CONFIG)
  if not os.path.isdir(folder):
    raise ConfigError(f"hf:{folder}: no such folder (give a folder as huggingface-cli download "
                      "leaves it: config.json, *.safetensors, tokenizer.json)")
  if not os.path.isfile(path):
    raise ConfigError(f"hf:{folder} has no config.json (give a folder as huggingface-cli "
                      "download leaves it: config.json, *.safetensors, tokenizer.json)")
  try:
    with open(path) as f:
      hf = json.load(f)
  except (OSError, ValueError) as e:
    raise ConfigError(f"{path} is not readable JSON: {' '.join(str(e).split())[:160]}") from e
  if not isinstance(hf, dict):
    raise ConfigError(f"{path} is not a JSON object")
  return hf


def weight_files(folder: str) -> dict[str, str]:
  """{tensor name: safetensors file name} of the folder's weights: the index's weight_map when
  `model.safetensors.index.json` exists, else every tensor of every `*.safetensors` file.

  Raises:
    ConfigError: no safetensors weights (a PyTorch-only `*.bin` folder is named as such), an
      unreadable index or file, or a shard the index names that is missing.
  """
  from safetensors import safe_open
  index = os.path.join(folder, INDEX)
  if os.path.isfile(index):
    try:
      with open(index) as f:
        mapping = dict(json.load(f)["weight_map"])
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise ConfigError(f"{index} is not a safetensors index (no weight_map): {e}") from e
    missing = sorted({v for v in mapping.values() if not os.path.isfile(os.path.join(folder, v))})
    if missing:
      raise ConfigError(f"hf:{folder}: {INDEX} names {missing[0]}, which is not in the folder")
    return mapping
  files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.safetensors")))
  if not files:
    bins = glob.glob(os.path.join(folder, "*.bin"))
    raise ConfigError(f"hf:{folder} has no *.safetensors weights" + (
        " (only PyTorch *.bin files: convert them to safetensors first)" if bins else ""))
  mapping = {}
  for name in files:
    try:
      with safe_open(os.path.join(folder, name), framework="numpy") as f:
        mapping.update({key: name for key in f.keys()})
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own error types
      raise ConfigError(f"hf:{folder}/{name} is not a safetensors file: {e}") from e
  return mapping


def headers(folder: str) -> dict[str, tuple[str, tuple]]:
  """{tensor name: (safetensors dtype, e.g. "BF16", shape)} of every tensor, headers only.

  Raises:
    ConfigError: as `weight_files`.
  """
  from safetensors import safe_open
  out = {}
  by_file: dict[str, list[str]] = {}
  for name, file in weight_files(folder).items():
    by_file.setdefault(file, []).append(name)
  for file, names in sorted(by_file.items()):
    try:
      with safe_open(os.path.join(folder, file), framework="numpy") as f:
        for name in names:
          view = f.get_slice(name)
          out[name] = (view.get_dtype(), tuple(view.get_shape()))
    except ConfigError:
      raise
    except Exception as e:  # noqa: BLE001
      raise ConfigError(f"hf:{folder}/{file} cannot be read: {' '.join(str(e).split())[:160]}") from e
  return out


def check_tensors(folder: str, expected: list[Tensor], declared: str | None) -> None:
  """Refuses weights that do not match the model config.json describes, before any is loaded.

  Args:
    folder: the model folder.
    expected: `hf_llama.tensors` of the config built from its config.json.
    declared: config.json's `dtype` / `torch_dtype` (None: not stated).

  Raises:
    ConfigError: naming the first tensor missing, unexpected (e.g. an MLP bias the config does
      not have), of another shape, of a non-float dtype (int8/fp8 quantised weights), or of
      another dtype than the declared one.
  """
  found = headers(folder)
  names = {t.name for t in expected}
  for t in expected:
    if t.name not in found:
      if t.optional:
        continue
      raise ConfigError(f"hf:{folder}: the weights lack tensor {t.name} (shape {list(t.shape)}), "
                        "which its config.json implies")
    dtype, shape = found[t.name]
    if shape != t.shape:
      raise ConfigError(f"hf:{folder}: tensor {t.name} has shape {list(shape)}; config.json "
                        f"implies {list(t.shape)}")
    if dtype not in FLOAT_DTYPES:
      raise ConfigError(f"hf:{folder}: tensor {t.name} has dtype {dtype}; supported: "
                        f"{', '.join(FLOAT_DTYPES)} (quantised weights are not)")
    want = DECLARED.get(str(declared)) if declared else None
    if want and dtype != want:
      raise ConfigError(f"hf:{folder}: tensor {t.name} has dtype {dtype}, but config.json "
                        f"declares dtype {declared!r} ({want})")
  extra = sorted(n for n in found if n not in names and not IGNORED.match(n))
  if extra:
    raise ConfigError(f"hf:{folder}: the weights hold tensor {extra[0]}, which the model its "
                      "config.json describes has no parameter for")


def load_tensors(folder: str, expected: list[Tensor], param_dtype) -> dict:
  """The weights as our pure parameter dict of numpy arrays (after `check_tensors`).

  Args:
    folder: the model folder.
    expected: `hf_llama.tensors` (names, our paths, the exact transposes and reshapes).
    param_dtype: numpy dtype of our parameters: float32 widens F16/BF16 exactly.

  Returns:
    Nested dict like the model's `nnx.to_pure_dict` state (int keys for blocks), numpy arrays.

  Raises:
    ConfigError: a tensor with no parameter here (o_proj.bias of a q/k/v-biased checkpoint) that
      is not all zeros: this decoder has no output-projection bias.
  """
  from safetensors import safe_open
  files = weight_files(folder)
  params: dict = {}
  handles = {}
  try:
    for t in expected:
      if t.name not in files or (t.path is None and t.optional):
        continue
      file = files[t.name]
      if file not in handles:
        handles[file] = safe_open(os.path.join(folder, file), framework="numpy").__enter__()
      array = handles[file].get_tensor(t.name)
      if t.path is None:
        if np.any(np.asarray(array, np.float32) != 0):
          raise ConfigError(f"hf:{folder}: tensor {t.name} is not zero; this decoder has no such "
                            "bias (q, k and v biases only, as Qwen2)")
        continue
      node = params
      for key in t.path[:-1]:
        node = node.setdefault(key, {})
      node[t.path[-1]] = np.asarray(t.to_ours(array), param_dtype)
  finally:
    for handle in handles.values():
      handle.__exit__(None, None, None)
  return params


def weights_sha256(folder: str) -> dict[str, str]:
  """{safetensors file name: sha256} of the folder's weight files (sorted by name)."""
  return {name: file_sha256(os.path.join(folder, name))
          for name in sorted(set(weight_files(folder).values()))}


def provenance(folder: str, hf: dict) -> dict:
  """The folder's hub name and revision, where the download left them.

  A hub cache snapshot (`.../models--<org>--<name>/snapshots/<revision>/`) names both; a
  `huggingface-cli download --local-dir` folder records the commit in
  `.cache/huggingface/download/config.json.metadata` (first line); otherwise config.json's
  `_name_or_path`, else the folder's name, and revision None (unknown).

  Returns:
    {"name": str, "revision": str or None}.
  """
  path = os.path.realpath(folder)
  cached = re.search(r"models--([^/]+?)--([^/]+)/snapshots/([0-9a-f]+)/?$", path)
  if cached:
    return {"name": f"{cached.group(1)}/{cached.group(2)}", "revision": cached.group(3)}
  revision = None
  metadata = os.path.join(folder, ".cache", "huggingface", "download", CONFIG + ".metadata")
  if os.path.isfile(metadata):
    with open(metadata) as f:
      revision = f.readline().strip() or None
  return {"name": hf.get("_name_or_path") or os.path.basename(path), "revision": revision}


def write_folder(out: str, config: dict, tensors: dict[str, np.ndarray], *,
                 generation_config: dict, tokenizer_folder: str | None) -> list[str]:
  """Writes a folder `transformers.AutoModelForCausalLM.from_pretrained(out)` loads.

  Args:
    out: the folder (created; files of the same names are replaced).
    config: config.json's contents (runs/hf_llama.py `hf_config`).
    tensors: {name: numpy array} in file order, float32 / bfloat16, contiguous.
    generation_config: generation_config.json's contents.
    tokenizer_folder: a folder whose TOKENIZER_FILES are copied (None: none).

  Returns:
    The names of the files written, sorted.
  """
  from safetensors.numpy import save_file
  os.makedirs(out, exist_ok=True)
  write_json(os.path.join(out, CONFIG), config)
  write_json(os.path.join(out, GENERATION_CONFIG), generation_config)
  tmp = os.path.join(out, WEIGHTS + ".tmp")
  save_file(tensors, tmp, metadata={"format": "pt"})  # transformers reads "pt" checkpoints
  os.replace(tmp, os.path.join(out, WEIGHTS))
  if tokenizer_folder:
    for name in TOKENIZER_FILES:
      if os.path.isfile(os.path.join(tokenizer_folder, name)):
        shutil.copyfile(os.path.join(tokenizer_folder, name), os.path.join(out, name))
  return sorted(os.listdir(out))
