"""Evaluates a trained run's checkpoint: `python -m eval.run --workdir=<dir>`.

Reads `<workdir>/config.json`, restores the parameters of the latest (or `--step`) checkpoint and
writes `<workdir>/eval/ppl_vs_length.{json,png}` and `loss_by_position.{json,png}`. Lengths
default to the run's `eval.length_multipliers`; `--length_multipliers=0.5,1,2,16` overrides them.
Any other field of the run's config can be overridden too, e.g. `--config.eval.protocol=sliding
--config.eval.stride=64` (the model's fields must stay those of the checkpoint).
"""

from __future__ import annotations

import os
import sys

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from configs import base
from configs.validate import ConfigError, eval_lengths, mesh_shape
from data.tokenizers import get_tokenizer
from eval import perplexity
from models import rope_scaling, sharding
import train

FLAGS = flags.FLAGS


def define_flags(argv: list[str]) -> None:
  """Command-line flags (defined only when run as a script).

  `--config` defaults to the config of the run named by `--workdir` in `argv`, so that
  `--config.<field>=...` overrides any of its fields.
  """
  workdir = next((a.split("=", 1)[1] for a in argv if a.startswith("--workdir=")), None)
  try:
    run_config = train.load_run_config(workdir) if workdir else base.get_config()
  except ConfigError:
    run_config = base.get_config()  # main() reports the bad workdir
  config_flags.DEFINE_config_dict("config", run_config, "The run's config (override fields with "
                                  "--config.<field>=...).", lock_config=True)
  flags.DEFINE_string("workdir", None, "A training run's workdir (holds config.json and checkpoints/).")
  flags.DEFINE_integer("step", -1, "Checkpoint step to evaluate; -1 = the latest.")
  flags.DEFINE_list("length_multipliers", None, "Eval lengths as multiples of train_len "
                    "(default: the run's eval.length_multipliers).")
  flags.DEFINE_enum("split", None, ["validation", "test"], "Held-out split (default: the run's).")


def evaluate(workdir: str, step: int | None = None, length_multipliers=None,
             split: str | None = None, config: ml_collections.ConfigDict | None = None) -> dict:
  """Runs perplexity vs length on a checkpoint of `workdir` and writes the JSON and PNG.

  Args:
    workdir: training run directory.
    step: checkpoint step (None = latest).
    length_multipliers: eval lengths as multiples of train_len (None = the run's).
    split: "validation" | "test" (None = the run's `eval.split`).
    config: the run's config with overrides (None = `train.load_run_config(workdir)`).

  Returns:
    The ppl_vs_length result dict (also written to `<workdir>/eval/ppl_vs_length.json`).

  Raises:
    ConfigError: no config/checkpoint, a checkpoint that does not match the model, lengths the
      scheme cannot represent, or bad multipliers; all before compilation.
  """
  run_config = train.load_run_config(workdir)
  config = run_config if config is None else ml_collections.ConfigDict(config.to_dict())
  if config.model != run_config.model:
    raise ConfigError("--config.model.* must stay as trained (the checkpoint's model); "
                      "override eval.* fields only (eval.extension for eval-time extensions)")
  config = rope_scaling.apply_extension(config, config.eval.extension, config.eval.factor)
  suffix = "" if config.eval.extension == "none" else f"_{config.eval.extension}_x{config.eval.factor:g}"
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
                            get_tokenizer(config.data.tokenizer), suffix=suffix)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.workdir:
    raise app.UsageError("--workdir is required")
  train.quiet_library_logs()
  try:
    result = evaluate(FLAGS.workdir, None if FLAGS.step < 0 else FLAGS.step,
                      FLAGS.length_multipliers, FLAGS.split, FLAGS.config)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  for row in result["rows"]:
    if row["nll"] is not None:
      print(f"length {row['length']:>6}: ppl {row['ppl']:.4f}, {row['bits_per_byte']:.4f} bits/byte "
            f"({row['tokens']} tokens)")
  print(f"wrote {os.path.join(FLAGS.workdir, 'eval')}/ppl_vs_length*.json and loss_by_position*.json")


if __name__ == "__main__":
  define_flags(sys.argv)
  app.run(main)
