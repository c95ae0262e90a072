"""A small synthetic study folder in the formats train.py and eval.run write, for the notebook,
plot and report tests: run folders with config.json, metrics.jsonl and eval/*.json whose numbers
follow simple known curves, so figures and tables can be checked without training."""

from __future__ import annotations

import json
import math
import os

from tests.conftest import tiny_config

TRAIN_LEN = 32
LENGTHS = (16, 32, 64, 128, 256)  # 0.5x .. 8x train_len
DEPTHS = (0.0, 0.5, 1.0)
# Perplexity growth per doubling beyond train_len, per scheme: the value tests check.
GROWTH = {"alibi": 1.0, "rope": 2.0, "none": 1.5}


def _write(path: str, obj) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(obj, f)


def ppl_at(scheme: str, seed: int, length: int) -> float:
  """The synthetic perplexity: 4 (+0.1 per seed) within train_len, times GROWTH per doubling."""
  doublings = max(0.0, math.log2(length / TRAIN_LEN))
  return (4.0 + 0.1 * seed) * GROWTH[scheme] ** doublings


def write_fake_study(root: str, name: str = "fake", algorithmic: bool = True) -> str:
  """Writes <root>/<name>/ with runs {alibi, rope, none} x seeds {0, 1} (text: ppl_vs_length,
  loss_by_position, passkey, attention; rope also + YaRN x4), plus, if `algorithmic`, copy-task
  runs {alibi, rope} x seed 0; returns the study folder."""
  study = os.path.join(root, name)
  for scheme in GROWTH:
    for seed in (0, 1):
      run = os.path.join(study, f"kind={scheme},seed={seed}")
      c = tiny_config("unused", scheme)
      c.seed = seed
      _write(os.path.join(run, "config.json"), {"config": c.to_dict(), "num_params": 1000})
      with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 10, "loss": 1.5, "val_loss": 1.4 + 0.01 * seed}) + "\n")
      extensions = [("none", 1.0, "")] + ([("yarn", 4.0, "_yarn_x4")] if scheme == "rope" else [])
      for ext, factor, suffix in extensions:
        head = {"scheme": scheme, "step": 10, "train_len": TRAIN_LEN, "extension": ext,
                "extension_factor": factor, "protocol": "non_overlapping", "stride": 0}
        ppl = [ppl_at(scheme if ext == "none" else "alibi", seed, L) for L in LENGTHS]
        _write(os.path.join(run, "eval", f"ppl_vs_length{suffix}.json"), {
            "suite": "ppl_vs_length", **head,
            "rows": [{"length": L, "multiplier": L / TRAIN_LEN, "nll": math.log(p), "ppl": p,
                      "tokens": 512, "windows": 4, "stride": L} for L, p in zip(LENGTHS, ppl)]})
        _write(os.path.join(run, "eval", f"loss_by_position{suffix}.json"), {
            "suite": "loss_by_position", **head,
            "rows": [{"length": L, "multiplier": L / TRAIN_LEN, "nll": math.log(p), "tokens": 512,
                      "stride": L,
                      "bins": [{"start": 0, "end": 1, "nll": 3.0, "tokens": 4},
                               {"start": 1, "end": L, "nll": math.log(p), "tokens": 508}]}
                     for L, p in zip(LENGTHS, ppl)]})
        # passkey: perfect within train_len; beyond it only alibi finds the shallowest needle.
        acc = [[1.0 if L <= TRAIN_LEN or (scheme == "alibi" and d == 1.0) else 0.0
                for d in DEPTHS] for L in LENGTHS]
        _write(os.path.join(run, "eval", f"passkey{suffix}.json"), {
            "suite": "passkey", **{k: v for k, v in head.items() if k not in ("protocol", "stride")},
            "lengths": list(LENGTHS), "depths": list(DEPTHS), "accuracy": acc, "threshold": 0.9,
            "max_length_passing": TRAIN_LEN,
            "cells": [{"length": L, "depth": d, "accuracy": a} for L, row in zip(LENGTHS, acc)
                      for d, a in zip(DEPTHS, row)],
            "rows": [{"length": L, "multiplier": L / TRAIN_LEN, "accuracy": sum(row) / len(row),
                      "correct": int(sum(row)), "prompts": len(row)}
                     for L, row in zip(LENGTHS, acc)]})
        _write(os.path.join(run, "eval", f"attention{suffix}.json"), {
            "suite": "attention", **{k: v for k, v in head.items() if k not in ("protocol", "stride")},
            "rows": [{"length": L, "multiplier": L / TRAIN_LEN, "windows": 2,
                      "entropy": 0.5 * math.log(L), "sink_mass": 1.0 / math.log2(L),
                      "entropy_uniform": math.log(L) - 1,
                      "entropy_by_layer": [0.4 * math.log(L), 0.6 * math.log(L)],
                      "sink_mass_by_layer": [0.5, 0.5]} for L in LENGTHS]})
  if algorithmic:
    for scheme in ("alibi", "rope"):
      run = os.path.join(study, f"kind={scheme},task=copy")
      c = tiny_config("unused", scheme)
      c.data.task.name = "copy"
      c.data.task.train_max_size = 4
      _write(os.path.join(run, "config.json"), {"config": c.to_dict(), "num_params": 1000})
      _write(os.path.join(run, "eval", "algorithmic.json"), {
          "suite": "algorithmic", "task": "copy", "scheme": scheme, "step": 10,
          "extension": "none", "extension_factor": 1.0, "train_max_size": 4,
          "rows": [{"size": n, "sequence_length": 2 * n + 3, "in_distribution": n <= 4,
                    "exact_match": 1.0 if n <= 4 else (0.5 if scheme == "alibi" else 0.0),
                    "token_accuracy": 1.0, "examples": 8} for n in (1, 2, 4, 8)]})
  return study
