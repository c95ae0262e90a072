"""Evaluates a trained run's checkpoint: `python -m eval.run --workdir=<dir>`.

Reads `<workdir>/config.json`, restores the parameters of the latest (or `--step`) checkpoint and
writes `<workdir>/eval/ppl_vs_length.{json,png}`. Lengths default to the run's
`eval.length_multipliers`; `--length_multipliers=0.5,1,2,16` overrides them.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import ml_collections
from absl import app, flags, logging

from configs.validate import ConfigError, eval_lengths, mesh_shape
from data.tokenizers import get_tokenizer
from eval import perplexity
from models import sharding
import train

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("workdir", None, "A training run's workdir (holds config.json and checkpoints/).")
  flags.DEFINE_integer("step", -1, "Checkpoint step to evaluate; -1 = the latest.")
  flags.DEFINE_list("length_multipliers", None, "Eval lengths as multiples of train_len "
                    "(default: the run's eval.length_multipliers).")
  flags.DEFINE_enum("split", None, ["validation", "test"], "Held-out split (default: the run's).")


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
  """The resolved config a training run wrote to `<workdir>/config.json`.

  Raises:
    ConfigError: workdir or its config.json is missing or unreadable.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    raise ConfigError(f"--workdir={workdir} has no config.json (is it a training run's workdir?)")
  try:
    with open(path) as f:
      return ml_collections.ConfigDict(json.load(f)["config"])
  except (json.JSONDecodeError, KeyError) as e:
    raise ConfigError(f"{path} is not a config written by train.py: {e}") from e


def evaluate(workdir: str, step: int | None = None, length_multipliers=None,
             split: str | None = None) -> dict:
  """Runs perplexity vs length on a checkpoint of `workdir` and writes the JSON and PNG.

  Args:
    workdir: training run directory.
    step: checkpoint step (None = latest).
    length_multipliers: eval lengths as multiples of train_len (None = the run's).
    split: "validation" | "test" (None = the run's `eval.split`).

  Returns:
    The ppl_vs_length result dict (also written to `<workdir>/eval/ppl_vs_length.json`).

  Raises:
    ConfigError: no config/checkpoint, a checkpoint that does not match the model, lengths the
      scheme cannot represent, or bad multipliers; all before compilation.
  """
  config = load_run_config(workdir)
  if length_multipliers is not None:
    try:
      config.eval.length_multipliers = tuple(float(x) for x in length_multipliers)
    except ValueError as e:
      raise ConfigError(f"--length_multipliers must be numbers; got {length_multipliers}") from e
  if split is not None:
    config.eval.split = split
  devices = jax.devices()
  try:
    mesh_shape(config.mesh, len(devices))
  except ConfigError:
    print(f"the run's mesh does not fit {len(devices)} devices; evaluating data-parallel")
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
  train.validate(config, len(devices))
  mesh = sharding.make_mesh(config.mesh, devices)
  spec = train.model_spec(config, mesh)
  # Lengths the user asked for explicitly must be representable; the run's own list may include
  # lengths the scheme cannot represent, which are then recorded as skipped.
  perplexity.check_lengths(eval_lengths(config),
                           spec.max_position if length_multipliers is not None else None,
                           config.model.position.kind, spec.max_position_hint)
  params, step = train.restore_params(workdir, config, spec, step)
  docs = train.load_splits(config)
  return train.evaluate_ppl(config, workdir, spec, mesh, params, step, docs,
                            get_tokenizer(config.data.tokenizer))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.workdir:
    raise app.UsageError("--workdir is required")
  train.quiet_library_logs()
  try:
    result = evaluate(FLAGS.workdir, None if FLAGS.step < 0 else FLAGS.step,
                      FLAGS.length_multipliers, FLAGS.split)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  for row in result["rows"]:
    if row["nll"] is not None:
      print(f"length {row['length']:>6}: ppl {row['ppl']:.4f}, {row['bits_per_byte']:.4f} bits/byte "
            f"({row['tokens']} tokens)")
  print(f"wrote {os.path.join(FLAGS.workdir, 'eval', 'ppl_vs_length.json')}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
