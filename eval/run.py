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

Before anything compiles: the checkpoint is chosen and checked (runs/checkpoint.py
`restore_params`, the reading path of training resumes and warm starts: the newest readable
step, a damaged newer one named in a warning and left in place; an unreadable `--step` refused),
a run that a live process holds (`runs.run_lock`) is refused, and `<workdir>/eval/` must be
writable. The run's lock is then held while the results are written.

Results computed under other settings are kept, not overwritten: a result whose recorded settings
(step, split, lengths, token budget, ...; eval/suites/base.py `SETTINGS`) differ from those of
the file of the same name moves that file (and its figure) to `<workdir>/eval/earlier/<name>.<old
values of what differs>.json` (`keep_earlier`), and the new result takes the usual name, the one
the study tools read. The last lines list the files written (new or replaced) and those kept.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from configs import base
from configs.errors import (OVERRIDE_ERRORS, ConfigError, exit_bad_override, mesh_shape,
                            parse_flags)
from configs.validate import eval_extensions, preflight, validate
from data import corpora
from data.inputs import load_splits
from data.tokenizers import get_tokenizer
from eval import perplexity, plots
from eval.suites import Context
from eval.suites import base as suites_base
from eval.suites.base import EARLIER
from eval.suites import perplexity as perplexity_suite
from models import extensions, sharding
from runs import command_line, distributed, startup
from runs.checkpoint import restore_params
from runs.distributed import chief_print
from runs.run_lock import RunLock, holder
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
  flags.DEFINE_enum("split", None, list(corpora.HELD_OUT), "Held-out split (default: the run's).")
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
  `_<extension>[_x<eval.factor>]` (`extensions.extension_suffix`), then `_step<N>` when
  `eval.step` = N >= 0 names the checkpoint (results of several checkpoints side by side; the
  results record `step_tag`); perplexity files then add `_sliding[_s<stride>]` under the sliding
  protocol, so both protocols' results are kept.
  `ppl_vs_length.png` is then redrawn with one curve per ppl_vs_length result of this step,
  split and protocol in `<workdir>/eval/` (the extensions as extra curves).

  Args:
    workdir: training run directory.
    step: checkpoint step (None = latest; `eval.step` >= 0 names it too, and tags the files).
    length_multipliers: eval lengths as multiples of train_len (None = the run's); lengths given
      here must be representable by the scheme.
    split: "validation" | "test" (None = the run's `eval.split`).
    config: the run's config with eval.* overrides (None = the run's config.json).

  Returns:
    {"<suite><suffix>": result dict} for every result written.

  Raises:
    ConfigError: no config/checkpoint, a checkpoint that does not match the model, no readable
      checkpoint (or an unreadable `step`), `step` and `eval.step` naming different
      checkpoints, a run held by a live process, an eval/ folder that
      cannot be written, an unknown suite or extension, an extension that does not fit the
      scheme, lengths the scheme cannot represent or (asked for explicitly) that no held-out
      document reaches, or bad multipliers; all before compilation. Also when no evaluation length's
      compiled scoring program fits in memory (eval/perplexity.py `ppl_vs_length`; a length that
      does not fit is skipped, its reason in the result).
  """
  config, changed = eval_config(workdir, config, length_multipliers, split)
  tag = suites_base.step_tag(config)
  if tag is not None:
    if step is not None and step != tag:
      raise ConfigError(f"--step={step} and eval.step={tag} name different checkpoints; give one")
    step = tag
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
  for warning in plan.warnings:
    chief_print(f"warning: {warning}")
  local = jax.process_index() == 0 and "://" not in workdir  # a bucket: no lock, no probe
  if local:
    check_not_held(workdir)
    check_writable(os.path.join(workdir, "eval"))
  first = plan.evaluations[0]
  params, step = restore_params(workdir, first.config, first.spec, step)
  lock = RunLock(workdir).acquire() if local else None
  try:
    results, extra = {}, validation_loss_at(workdir, step)
    for ev in plan.evaluations:
      suffix = extensions.extension_suffix(ev.extension, config.eval.factor,
                                           config.eval.get("window", -1), changed.get(ev.extension))
      suffix += f"_step{tag}" if tag is not None else ""
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
  finally:
    if lock is not None:
      lock.release()
  return results


def check_not_held(workdir: str) -> None:
  """Refuses a run that a live process holds (train.py training it, another eval.run), before
  anything is read or compiled.

  Raises:
    ConfigError: one line naming the holder.
  """
  try:
    who = holder(workdir)
  except OSError as e:
    raise ConfigError(f"--workdir={workdir}: its lock file cannot be read ({e.strerror})") from e
  if who:
    raise ConfigError(f"--workdir={workdir} is in use by {who[:300]}: one process writes a run at "
                      "a time; evaluate it when that process has finished")


def check_writable(folder: str) -> None:
  """Refuses, before the evaluation, a results folder (`<workdir>/eval`) that cannot be written:
  a file is created and removed there (or in the nearest existing folder above it), so a
  read-only mount is caught where permission bits would not tell (root).

  Raises:
    ConfigError: one line naming the folder and the reason.
  """
  probe_dir = folder
  while not os.path.isdir(probe_dir):
    if os.path.exists(probe_dir):
      raise ConfigError(f"{probe_dir} is a file, so the results folder {folder} cannot be made; "
                        "move that file away")
    parent = os.path.dirname(probe_dir)
    if parent == probe_dir:
      break
    probe_dir = parent
  if not command_line.writable(probe_dir):  # a probe file made and removed there
    raise ConfigError(f"the results folder {folder} is not writable ({probe_dir}: read-only file "
                      "system or no write permission); make it writable, or evaluate a copy of "
                      "the run")


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
  startup.prepare()  # CPU pinned where libtpu has no chip; compilation cache (runs/startup.py)
  folder = os.path.join(FLAGS.workdir, "eval")
  before = _listing(folder)
  suites_base.KEPT.clear()
  try:
    distributed.initialize_from_flags()  # before any device is used
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
      elif row.get("skipped"):
        print(f"  length {row['length']:>6}: skipped, {row['skipped']}")
    note = perplexity_suite.text_note(result) if result["suite"] == "ppl_vs_length" else None
    if note:
      print(f"  {note}")
    if "max_length_passing" in result:
      passing = result["max_length_passing"]
      print(f"  largest length with accuracy >= {result.get('threshold')}: "
            f"{'none' if passing is None else passing}")
  for line in written_lines(folder, before, results):
    print(line)


def _listing(folder: str) -> dict[str, int]:
  """{path relative to `folder`: mtime_ns} of the files of `folder` and `folder/earlier/`."""
  out = {}
  for sub in ("", EARLIER):
    path = os.path.join(folder, sub)
    if os.path.isdir(path):
      for name in os.listdir(path):
        if not name.startswith(".") and os.path.isfile(os.path.join(path, name)):
          out[os.path.join(sub, name)] = os.stat(os.path.join(path, name)).st_mtime_ns
  return out


def written_lines(folder: str, before: dict[str, int], results: dict) -> list[str]:
  """The lines that say which files of `folder` the evaluation wrote (new, or replacing a file
  computed under the same settings) and which earlier ones it kept in `folder/earlier/`."""
  if "://" in folder:  # a bucket: the result names only
    return [f"wrote {folder}/: " + ", ".join(f"{name}.json" for name in results)]
  after = _listing(folder)
  changed = sorted(n for n, t in after.items() if before.get(n) != t and os.sep not in n)
  moved = {n + ext for n in suites_base.KEPT for ext in (".json", ".png")}
  groups = [([n for n in changed if n not in before and n not in moved], "new"),
            ([n for n in changed if n in moved], "replacing earlier results, kept below"),
            ([n for n in changed if n in before and n not in moved],
             "replaced: computed under the same settings")]
  kept = sorted(n for n in after if n not in before and n.startswith(EARLIER + os.sep))
  lines = [f"wrote {folder}/: " + "; ".join(f"{', '.join(names)} ({what})"
                                             for names, what in groups if names)]
  if kept:
    lines.append(f"kept in {folder}/: " + ", ".join(kept) + " (earlier results computed under "
                 "other settings; the name says which)")
  return lines


if __name__ == "__main__":
  try:  # the run's config takes the --config.* overrides as the flag is defined
    define_flags(sys.argv)
  except OVERRIDE_ERRORS as e:
    exit_bad_override(e, sys.argv)
  app.run(main, flags_parser=parse_flags)
