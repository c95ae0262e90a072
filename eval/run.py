"""Evaluates a trained run's checkpoint: `python -m eval.run --workdir=<dir>`.

Reads `<workdir>/config.json`, restores the parameters of the latest (or `--step`) checkpoint and
runs the suites of `eval.suites` (eval/suites/) for each eval-time extension of `eval.extension`,
e.g.

  python -m eval.run --workdir=<run> --config.eval.suites=ppl_vs_length,loss_by_position,passkey \
      --config.eval.extension=none,yarn,ntk --config.eval.factor=4

writing `<workdir>/eval/<suite><extensions.extension_suffix>.{json,png}`; ppl_vs_length.png gets
one curve per extension. Lengths default to the run's `eval.length_multipliers`;
`--length_multipliers=0.5,1,2,16` overrides them. Any eval.* field of the run's config can be
overridden, e.g. `--config.eval.protocol=sliding --config.eval.stride=64` (the model's fields
must stay those of the checkpoint).
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from configs import base
from configs.errors import (OVERRIDE_ERRORS, ConfigError, exit_bad_override, mesh_shape,
                            parse_flags)
from configs.validate import eval_extensions, preflight, validate
from data.inputs import load_splits
from data.tokenizers import get_tokenizer
from eval import perplexity, plots
from eval.suites import Context
from eval.suites import perplexity as perplexity_suite
from models import extensions, sharding
from runs import distributed
from runs.checkpoint import restore_params
from runs.distributed import chief_print
from runs.metrics import validation_loss_at
from configs.stored import load_run_config

FLAGS = flags.FLAGS


def define_flags(argv: list[str]) -> None:
  """Command-line flags (defined only when run as a script).

  `--config` defaults to the config of the run named by `--workdir` in `argv`, so that
  `--config.<field>=...` overrides any of its fields.
  """
  workdir = None  # --workdir=DIR or --workdir DIR, as absl accepts both
  for i, a in enumerate(argv):
    if a.startswith("--workdir="):
      workdir = a.split("=", 1)[1]
    elif a == "--workdir" and i + 1 < len(argv):
      workdir = argv[i + 1]
  try:
    run_config = load_run_config(workdir) if workdir else base.get_config()
  except ConfigError:
    run_config = base.get_config()  # main() reports the bad workdir
  try:
    config_flags.DEFINE_config_dict("config", run_config, "The run's config (override fields "
                                    "with --config.<field>=...; every field: configs/base.py).",
                                    lock_config=True)
  except OVERRIDE_ERRORS as e:
    exit_bad_override(e, argv, run_config)
  FLAGS["config"].default_as_str = None  # --help would print the whole config as the default
  flags.DEFINE_string("workdir", None, "A training run's workdir (holds config.json and checkpoints/).")
  flags.DEFINE_integer("step", -1, "Checkpoint step to evaluate; -1 = the latest.")
  flags.DEFINE_list("length_multipliers", None, "Eval lengths as multiples of train_len "
                    "(default: the run's eval.length_multipliers).")
  flags.DEFINE_enum("split", None, ["validation", "test"], "Held-out split (default: the run's).")
  distributed.define_distributed_flags()  # a pod or SLURM launch runs eval.run on every host
  flags.adopt_module_key_flags(distributed)  # so that --helpshort lists them


# Fields that must agree for ppl_vs_length curves to share a figure (same text scored the same way).
COMPARABLE = ("step", "split", "protocol", "stride", "max_tokens_per_length", "train_len")


def _same_step_curves(out_dir: str, like: dict) -> list[dict]:
  """The ppl_vs_length results in `out_dir` comparable with `like` (same `COMPARABLE` fields and
  lengths): the model as trained first, then the eval-time extensions by name."""
  curves = []
  for path in sorted(glob.glob(os.path.join(out_dir, "ppl_vs_length*.json"))):
    try:
      with open(path) as f:
        r = json.load(f)
    except (OSError, ValueError):
      continue
    if (r.get("suite") == "ppl_vs_length" and all(r.get(k) == like.get(k) for k in COMPARABLE)
        and [row["length"] for row in r["rows"]] == [row["length"] for row in like["rows"]]):
      curves.append(r)
  return sorted(curves, key=lambda r: (r.get("extension", "none") != "none",
                                       r.get("extension", ""), r.get("extension_factor", 1)))


def eval_config(workdir: str, config=None, length_multipliers=None, split=None):
  """The run's config with the eval.* overrides, checked to keep the checkpoint's model.

  Returns:
    (config, {extension: the eval-time parameters overridden for it}).

  Raises:
    ConfigError: a model field or train_len changed, a bad eval-time parameter override, or
      multipliers that are not numbers.
  """
  run_config = load_run_config(workdir)
  config = run_config if config is None else ml_collections.ConfigDict(config.to_dict())
  position, run_position = config.model.position, run_config.model.position
  other_model = {k: v for k, v in config.model.items() if k != "position"}
  run_model = {k: v for k, v in run_config.model.items() if k != "position"}
  changed_fields = [f"model.{k}={other_model[k]!r} (trained: {run_model.get(k)!r})"
                    for k in other_model if other_model[k] != run_model.get(k)]
  if position.kind != run_position.kind:
    changed_fields.append(f"model.position.kind={position.kind!r} (trained: {run_position.kind!r})")
  if config.data.train_len != run_config.data.train_len:
    changed_fields.append(f"data.train_len={config.data.train_len} (trained: "
                          f"{run_config.data.train_len})")
  if changed_fields:
    raise ConfigError(f"{', '.join(changed_fields)}: --config.model.* and --config.data.train_len "
                      "must stay as trained (the "
                      "checkpoint's model); override eval.* fields (eval.extension for eval-time "
                      "extensions) and the eval-time parameters in "
                      "models/extensions.py EXTENSION_PARAMS")
  changed = extensions.check_param_overrides(run_position, position, eval_extensions(config))
  if length_multipliers is not None:
    try:
      config.eval.length_multipliers = tuple(float(x) for x in length_multipliers)
    except ValueError as e:
      raise ConfigError(f"--length_multipliers must be numbers; got {length_multipliers}") from e
  if split is not None:
    config.eval.split = split
  return config, changed


def evaluate(workdir: str, step: int | None = None, length_multipliers=None,
             split: str | None = None, config: ml_collections.ConfigDict | None = None
             ) -> dict[str, dict]:
  """Runs the configured suites on a checkpoint of `workdir`, for each configured extension.

  Suites are `eval.suites` (the registry in eval/suites/), extensions `eval.extension`
  (comma-separated; "none" is the model as trained). Each (suite, extension) writes
  `<workdir>/eval/<suite><suffix>.{json,png}` with suffix "" for "none", else
  `_<extension>[_x<eval.factor>]` (`extensions.extension_suffix`; perplexity files then add
  `_sliding[_s<stride>]` under the sliding protocol, so both protocols' results are kept).
  `ppl_vs_length.png` is then redrawn with one curve per ppl_vs_length result of this step,
  split and protocol in `<workdir>/eval/` (the extensions as extra curves).

  Args:
    workdir: training run directory.
    step: checkpoint step (None = latest).
    length_multipliers: eval lengths as multiples of train_len (None = the run's); lengths given
      here must be representable by the scheme.
    split: "validation" | "test" (None = the run's `eval.split`).
    config: the run's config with eval.* overrides (None = the run's config.json).

  Returns:
    {"<suite><suffix>": result dict} for every result written.

  Raises:
    ConfigError: no config/checkpoint, a checkpoint that does not match the model, an unknown
      suite or extension, an extension that does not fit the scheme, lengths the scheme cannot
      represent, or bad multipliers; all before compilation. Also when no evaluation length's
      compiled scoring program fits in memory (eval/perplexity.py `ppl_vs_length`; a length that
      does not fit is skipped, its reason in the result).
  """
  config, changed = eval_config(workdir, config, length_multipliers, split)
  devices = jax.devices()
  try:
    mesh_shape(config.mesh, len(devices))
  except ConfigError:
    chief_print(f"the run's mesh does not fit {len(devices)} devices; evaluating data-parallel")
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "context": 1, "tensor": 1})
  validate(config, len(devices))
  mesh = sharding.make_mesh(config.mesh, devices)
  tokenizer = get_tokenizer(config.data.tokenizer)
  docs = load_splits(config)
  plan = preflight(config, purpose="eval", mesh=mesh, docs=docs, tokenizer=tokenizer,
                   explicit_lengths=length_multipliers is not None)
  first = plan.evaluations[0]
  params, step = restore_params(workdir, first.config, first.spec, step)
  results, extra = {}, validation_loss_at(workdir, step)
  for ev in plan.evaluations:
    suffix = extensions.extension_suffix(ev.extension, config.eval.factor,
                                         config.eval.get("window", -1), changed.get(ev.extension))
    ctx = Context(ev.config, workdir, ev.spec, mesh, params, step, docs, tokenizer, suffix,
                  extra=extra)
    for suite in plan.suites:
      results.update(suite.run(ctx))
  ppl = [v for v in results.values() if v["suite"] == "ppl_vs_length"]
  if ppl and jax.process_index() == 0:
    out_dir = os.path.join(workdir, "eval")
    curves = _same_step_curves(out_dir, ppl[0])
    if len(curves) > 1:
      name = "ppl_vs_length" + perplexity.protocol_suffix(ppl[0]["protocol"], ppl[0]["stride"])
      plots.plot_ppl_vs_length(curves, os.path.join(out_dir, f"{name}.png"))
  return results


def main(argv):
  if len(argv) > 1:  # every setting is a flag (absl would print its whole usage, exit 1)
    print(f"error: unexpected arguments {argv[1:]}; give every setting as a flag "
          "(--workdir=..., --config.<field>=...)", file=sys.stderr)
    sys.exit(2)
  if not FLAGS.workdir:
    print("error: --workdir is required (a training run's workdir)", file=sys.stderr)
    sys.exit(2)
  if FLAGS.step < -1:
    print(f"error: --step must be a checkpoint step >= 0, or -1 for the latest; got {FLAGS.step}",
          file=sys.stderr)
    sys.exit(2)
  distributed.quiet_library_logs()
  try:
    distributed.initialize_from_flags()  # before any device is used
    started = time.time()
    results = evaluate(FLAGS.workdir, None if FLAGS.step < 0 else FLAGS.step,
                       FLAGS.length_multipliers, FLAGS.split, FLAGS.config)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if jax.process_index() != 0:
    return  # process 0 wrote the results and reports them
  for name, result in results.items():
    print(f"{name}:")
    for row in result.get("rows", []):
      if result["suite"] == "ppl_vs_length" and row.get("nll") is not None:
        print(f"  length {row['length']:>6}: ppl {row['ppl']:.4f}, "
              f"{perplexity_suite.describe_bits(result, row)}")
      elif result["suite"] == "attention" and not row.get("skipped"):
        print(f"  length {row['length']:>6}: attention entropy {row['entropy']:.3f} nats "
              f"(uniform {row['entropy_uniform']:.3f}), sink mass {row['sink_mass']:.3f}")
      elif "max_length_passing" in result and row.get("accuracy") is not None:
        print(f"  length {row['length']:>6}: accuracy {row['accuracy']:.2f} "
              f"({row['correct']} of {row['prompts']} prompts)")
    if "max_length_passing" in result:
      passing = result["max_length_passing"]
      print(f"  largest length with accuracy >= {result.get('threshold')}: "
            f"{'none' if passing is None else passing}")
  folder = os.path.join(FLAGS.workdir, "eval")
  written = (sorted(name for name in os.listdir(folder) if not name.startswith(".")
                    and os.path.getmtime(os.path.join(folder, name)) >= started - 1)
             if os.path.isdir(folder) else [f"{name}.json" for name in results])  # a bucket
  print(f"wrote {folder}/ (replacing earlier files of the same names): " + ", ".join(written))


if __name__ == "__main__":
  try:  # the run's config takes the --config.* overrides as the flag is defined
    define_flags(sys.argv)
  except OVERRIDE_ERRORS as e:
    exit_bad_override(e, sys.argv)
  app.run(main, flags_parser=parse_flags)
