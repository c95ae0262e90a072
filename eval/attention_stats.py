"""Attention diagnostics of length extrapolation: attention entropy and the attention sink vs length.

The two quantities the literature uses to explain why a decoder fails (or not) beyond the length
it was trained on, measured per layer and head on held-out windows that start at a document's
BOS token, at each evaluation length:

  - attention entropy of query i, H_i = -sum_j p_ij log p_ij (nats), over the keys it sees:
    LM-Infinite (Han et al., arXiv 2308.16137, Sec. 3, "Factor 2") shows it growing without
    bound beyond train_len (attention dilutes over more keys); log-n scaling (Chiang & Cholak,
    arXiv 2202.12172, Sec. 5.3) exists to hold it. A uniform distribution over the i + 1 keys
    of query i has H_i = log(i + 1): the result records that ceiling's mean as
    `entropy_uniform`.
  - attention sink mass p_i0, the probability query i puts on the window's first token (the
    BOS): StreamingLLM (Xiao et al., arXiv 2309.17453, Sec. 3.1) shows trained decoders park
    most attention there and break when it leaves the context.

Both are means over the queries of a window, then over windows (and, for the headline numbers,
over heads and layers). `eval.suites=attention` runs this suite (train.py at the end of training,
eval.run on a checkpoint under any eval-time extension) and writes
`<workdir>/eval/attention<suffix>.{json,png}`; `attention_maps` gives the maps themselves for a
notebook.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import ml_collections

from configs.errors import ConfigError, eval_lengths
from data.inputs import load_splits
from data.pipeline import document_windows
from data.tokenizers import ByteTokenizer, get_tokenizer
from eval import perplexity
from models import sharding
from models.sharding import replicated
from models.spec import model_spec
from runs.checkpoint import restore_params
from configs.stored import load_run_config

# Probabilities held per forward pass: [windows, heads, L, L] float32 of one layer at a time.
MAX_PROBS_PER_CALL = 1 << 24


def attention_entropy(probs: jax.Array) -> jax.Array:
  """Shannon entropy of each query's attention distribution, nats.

  Args:
    probs: float [..., q_len, k_len], rows summing to 1, masked keys exactly 0.

  Returns:
    float32 [..., q_len]: -sum_j p_j log p_j with 0 log 0 = 0.
  """
  probs = probs.astype(jnp.float32)
  return -jax.scipy.special.xlogy(probs, probs).sum(axis=-1)


def sink_mass(probs: jax.Array) -> jax.Array:
  """Attention probability on key 0 (the window's first token, its BOS) for each query.

  Args:
    probs: float [..., q_len, k_len].

  Returns:
    float32 [..., q_len] in [0, 1] (StreamingLLM's attention sink, arXiv 2309.17453, Sec. 3.1).
  """
  return probs[..., 0].astype(jnp.float32)


def make_stats_fn(graphdef: nnx.GraphDef, mesh) -> Callable:
  """Compiles `(params, batch) -> (entropy, sink)` summed over the batch's windows.

  Args:
    graphdef: the Decoder's NNX graph definition.
    mesh: device mesh of the parameters (the outputs come back replicated on it).

  Returns:
    A jitted function of (params pure dict, batch of int32 [windows, L] `inputs`, `positions`,
    `segment_ids`) returning two float32 [num_layers, num_heads, L] arrays: the attention
    entropy (nats) and the sink mass of every query position, summed over the windows.
  """
  def stats(params, batch):
    model = nnx.merge(graphdef, params)

    def reduce(probs):  # [windows, heads, L, L] -> two [heads, L]
      return attention_entropy(probs).sum(axis=0), sink_mass(probs).sum(axis=0)

    per_layer = model.attention_statistics(batch["inputs"], batch["positions"],
                                           batch["segment_ids"], reduce)
    return (jnp.stack([e for e, _ in per_layer]), jnp.stack([s for _, s in per_layer]))

  return jax.jit(stats, out_shardings=(replicated(mesh), replicated(mesh)))


def uniform_entropy(length: int) -> float:
  """Mean over query positions i = 0..length-1 of log(i + 1), nats: the entropy of causal
  attention spread evenly over every visible key (the ceiling of `attention_entropy`)."""
  return float(np.mean(np.log(np.arange(1, length + 1))))


def length_statistics(stats_fn: Callable, params, windows: dict[str, np.ndarray], *,
                      num_heads: int) -> dict:
  """Attention entropy and sink mass of windows of one length, per layer and head.

  Args:
    stats_fn: from `make_stats_fn`.
    params: the model's parameter pure dict.
    windows: int32 [n, L] `inputs`, `positions`, `segment_ids` (n >= 1), e.g.
      `data.pipeline.document_windows`.
    num_heads: the model's heads (sizes the batches: at most MAX_PROBS_PER_CALL probabilities
      of one layer per call).

  Returns:
    {"windows": n, "entropy", "sink_mass": floats (means over layers, heads, queries and
    windows), "entropy_by_layer", "sink_mass_by_layer": [num_layers] lists, "entropy_by_head",
    "sink_mass_by_head": [num_layers][num_heads] lists, "entropy_uniform": `uniform_entropy`}.
  """
  n, length = windows["inputs"].shape
  per_call = max(1, min(n, MAX_PROBS_PER_CALL // (num_heads * length * length)))
  entropy, sink = 0.0, 0.0
  for start in range(0, n, per_call):
    batch = {k: windows[k][start:start + per_call] for k in ("inputs", "positions", "segment_ids")}
    e, s = jax.device_get(stats_fn(params, batch))
    entropy, sink = entropy + np.asarray(e, np.float64), sink + np.asarray(s, np.float64)
  entropy, sink = entropy.mean(axis=-1) / n, sink.mean(axis=-1) / n  # [layers, heads]
  return {"windows": int(n), "entropy": float(entropy.mean()), "sink_mass": float(sink.mean()),
          "entropy_by_layer": entropy.mean(axis=1).tolist(),
          "sink_mass_by_layer": sink.mean(axis=1).tolist(),
          "entropy_by_head": entropy.tolist(), "sink_mass_by_head": sink.tolist(),
          "entropy_uniform": uniform_entropy(length)}


def check_settings(config) -> int:
  """`eval.attention.windows`, checked.

  Raises:
    ConfigError: not an integer >= 1.
  """
  windows = config.eval.get("attention", {}).get("windows", 8)
  if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
    raise ConfigError(f"eval.attention.windows must be an integer >= 1 (held-out windows per "
                      f"length); got {windows!r}")
  return windows


def attention_by_length(stats_fn: Callable, params, docs: Sequence, tokenizer: ByteTokenizer,
                        lengths: Sequence[int], *, windows: int, num_heads: int,
                        skip: dict[int, str] | None = None) -> list[dict]:
  """`length_statistics` at each length on the first window (from the BOS) of the first
  `windows` documents that hold one.

  Args:
    stats_fn, params, num_heads: see `length_statistics`.
    docs: held-out documents; tokenizer: the byte tokenizer.
    lengths: evaluation lengths, tokens.
    windows: documents (windows) per length.
    skip: {length: reason} for lengths not to run (e.g. beyond a learned table).

  Returns:
    One row per length: {"length", ...`length_statistics`}, or {"length", "skipped": reason}
    when skipped or when no document is long enough.
  """
  rows = []
  for length in lengths:
    if skip and length in skip:
      rows.append({"length": int(length), "skipped": skip[length]})
      continue
    w = document_windows(docs, tokenizer, length, max_tokens_per_doc=length)
    if len(w["inputs"]) == 0:
      rows.append({"length": int(length),
                   "skipped": f"no held-out document holds {length} tokens"})
      continue
    w = {k: v[:windows] for k, v in w.items()}
    rows.append({"length": int(length), **length_statistics(stats_fn, params, w,
                                                            num_heads=num_heads)})
  return rows


def attention_maps(graphdef: nnx.GraphDef, params, window: dict[str, np.ndarray]) -> np.ndarray:
  """Every layer's attention probabilities on one window, for plotting.

  Args:
    graphdef: the Decoder's NNX graph definition; params: its parameter pure dict.
    window: int32 [L] (or [1, L]) `inputs`, `positions`, `segment_ids`.

  Returns:
    float32 [num_layers, num_heads, L (query), L (key)]; memory O(layers x heads x L^2).
  """
  batch = {k: np.asarray(window[k], np.int32).reshape(1, -1)
           for k in ("inputs", "positions", "segment_ids")}

  @jax.jit
  def maps(params, batch):
    model = nnx.merge(graphdef, params)
    return jnp.stack(model.attention_statistics(batch["inputs"], batch["positions"],
                                                batch["segment_ids"], lambda p: p[0]))

  return np.asarray(jax.device_get(maps(params, batch)), np.float32)


def load_checkpoint(workdir: str, step: int | None = None):
  """(config, spec, mesh, params, step) of a run's checkpoint, data-parallel over this
  process's devices.

  Args:
    workdir: a training run's directory (config.json and checkpoints/).
    step: checkpoint step; None = the latest.

  Raises:
    ConfigError: no config.json or no checkpoint (configs.stored.load_run_config / runs.checkpoint.restore_params).
  """
  config = load_run_config(workdir)
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "context": 1, "tensor": 1})
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  spec = model_spec(config, mesh)
  params, step = restore_params(workdir, config, spec, step)
  return config, spec, mesh, params, step


def window_for(config, length: int, document: int = 0) -> dict[str, np.ndarray]:
  """The held-out window of `length` tokens from the BOS of the `document`-th document of
  `eval.split` that holds one (as the suite uses), int32 [L] inputs, positions, segment_ids.

  Raises:
    ConfigError: no such document.
  """
  docs = load_splits(config)[config.eval.split]
  w = document_windows(docs, get_tokenizer(config.data.tokenizer), length,
                       max_tokens_per_doc=length)
  if len(w["inputs"]) <= document:
    raise ConfigError(f"eval.split={config.eval.split!r} holds {len(w['inputs'])} documents of "
                      f">= {length} tokens; asked for document {document}")
  return {k: v[document] for k, v in w.items() if k != "targets"}


__all__ = ["attention_by_length", "attention_entropy", "attention_maps", "check_settings",
           "checkpoint_table", "length_statistics", "load_checkpoint", "make_stats_fn",
           "sink_mass", "uniform_entropy", "window_for"]


def checkpoint_table(workdirs: Sequence[str], length_multipliers: Sequence[float] = (
    0.5, 1.0, 2.0, 4.0, 8.0), windows: int = 4, step: int | None = None):
  """Attention entropy and sink mass vs length of several checkpoints, as rows of a study's
  results table (sweeps/collect.py, suite "attention"), for side-by-side plots
  (sweeps.length_figures.fig_attention_vs_length) without running the suite into the workdirs.

  Args:
    workdirs: training run folders (config.json and a checkpoint each).
    length_multipliers: evaluation lengths as multiples of each run's train_len.
    windows: held-out documents (windows) per length.
    step: checkpoint step of every run; None = each run's latest.

  Returns:
    pandas DataFrame: one row per run x length: run (folder name), scheme, seed, train_len,
    suite ("attention"), extension ("none"), step, length, multiplier, entropy, sink_mass,
    entropy_uniform, windows, skipped.

  Raises:
    ConfigError: a folder without config.json or checkpoint, or windows < 1.
  """
  if windows < 1:
    raise ConfigError(f"windows must be >= 1 (documents per length); got {windows}")
  records = []
  for workdir in workdirs:
    config, spec, mesh, params, got_step = load_checkpoint(workdir, step)
    config.eval.length_multipliers = tuple(float(m) for m in length_multipliers)
    skip, reason = perplexity.skipped_lengths(config, spec)
    docs = load_splits(config)[config.eval.split]
    rows = attention_by_length(make_stats_fn(spec.graphdef, mesh), params, docs,
                               get_tokenizer(config.data.tokenizer), eval_lengths(config),
                               windows=windows, num_heads=config.model.num_heads,
                               skip={L: reason for L in skip})
    for row in rows:
      records.append({"run": os.path.basename(os.path.normpath(workdir)),
                      "scheme": config.model.position.kind, "seed": config.seed,
                      "train_len": config.data.train_len, "suite": "attention",
                      "extension": "none", "step": got_step, "length": row["length"],
                      "multiplier": row["length"] / config.data.train_len,
                      **{k: row.get(k) for k in ("entropy", "sink_mass", "entropy_uniform",
                                                 "windows", "skipped")}})
  import pandas as pd  # noqa: PLC0415  (a third of a second to import: on use only)
  return pd.DataFrame.from_records(records)
