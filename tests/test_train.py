"""Training end to end: the loss falls, sharding does not change results, resume is exact."""

import json
import os

import jax
import numpy as np
import pytest

import forked

import train
from conftest import FAST_COMPILE, tiny_config
from configs.validate import ConfigError
from data import passkey_training
from data.tokenizers import get_tokenizer
from eval import perplexity
from eval import run as eval_run
from models import positions
from configs.stored import load_run_config
from runs import optimizer
from runs import checkpoint as run_ckpt
from runs import workdir as run_dir
from data import inputs as data_inputs
from models import spec as specs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [(r["step"], r["loss"]) for r in map(json.loads, f) if "loss" in r]


def final_params(workdir, config):
  mesh = train.sharding.make_mesh(config.mesh, jax.devices()[:1])
  spec = specs.model_spec(config, mesh)
  params, _ = run_ckpt.restore_params(workdir, config, spec)
  return jax.tree.map(np.asarray, params)


def test_thirty_steps_lower_the_loss_and_write_results(text_corpus, tmp_path):
  c = tiny_config(text_corpus, "rope")
  c.train.write_plots = True
  c.train.num_steps = 30
  c.train.eval_every_steps = 15
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  curve = losses(tmp_path)
  assert [s for s, _ in curve] == list(range(1, 31))
  assert np.mean([l for _, l in curve[-5:]]) < curve[0][1] - 1.0
  assert out["val_loss"] < curve[0][1]
  for name in ("config.json", "metrics.jsonl", "training_curves.png", "eval/ppl_vs_length.json",
               "eval/ppl_vs_length.png"):
    assert os.path.getsize(tmp_path / name) > 0
  from runs import plots
  assert not plots.plot_training_curves([{"step": 1, "val_loss": 2.0}], str(tmp_path / "x.png"))
  assert not os.path.exists(tmp_path / "x.png")  # no training loss: nothing drawn
  assert any(f.startswith("events") for f in os.listdir(tmp_path / "tensorboard"))
  result = json.load(open(tmp_path / "eval/ppl_vs_length.json"))
  assert [r["length"] for r in result["rows"]] == [16, 32, 64]
  assert result["final_validation_loss"] == pytest.approx(out["val_loss"])
  assert all(r["tokens"] > 0 and r["ppl"] > 1 for r in result["rows"])
  assert 0 < result["unigram_entropy_nats"] < np.log(256)
  record = json.loads(open(tmp_path / "metrics.jsonl").readline())
  assert {"loss", "perplexity", "learning_rate", "grad_norm", "tokens_per_s", "step_time_s",
          "mfu"} <= set(record)

  # Standalone evaluation of the same checkpoint reproduces the numbers, at new lengths too.
  again = eval_run.evaluate(str(tmp_path), length_multipliers=["1", "4"])["ppl_vs_length"]
  by_len = {r["length"]: r for r in result["rows"]}
  assert again["rows"][0]["nll"] == pytest.approx(by_len[32]["nll"], rel=1e-5)
  assert again["rows"][1]["length"] == 128
  kept = json.load(open(tmp_path / "eval/ppl_vs_length.json"))
  assert kept["final_validation_loss"] == pytest.approx(out["val_loss"])  # kept on rewrite
  os.remove(tmp_path / "eval/ppl_vs_length.json")  # read from metrics.jsonl, not the old file
  eval_run.evaluate(str(tmp_path), length_multipliers=["1", "4"])
  kept = json.load(open(tmp_path / "eval/ppl_vs_length.json"))
  assert kept["final_validation_loss"] == pytest.approx(out["val_loss"])

  # Eval-time extensions (YaRN and Self-Extend, factor 2) write their own files beside the plain
  # ones, for every suite asked for, and ppl_vs_length.png gets one curve each.
  extended = load_run_config(str(tmp_path))
  extended.eval.extension, extended.eval.factor = "yarn,self_extend", 2.0
  extended.eval.suites = "ppl_vs_length,passkey"
  extended.eval.length_multipliers = (1.0, 4.0)  # 32 (too short for a passkey prompt), 128
  extended.data.passkey.preamble = False  # the preamble alone is 148 tokens
  results = eval_run.evaluate(str(tmp_path), config=extended)
  assert set(results) == {f"{suite}_{ext}_x2" for suite in ("ppl_vs_length", "passkey")
                          for ext in ("yarn", "self_extend")}
  for name in results:
    assert os.path.getsize(tmp_path / f"eval/{name}.json") > 0
    assert os.path.getsize(tmp_path / f"eval/{name}.png") > 0
  yarn = results["ppl_vs_length_yarn_x2"]
  assert yarn["extension"] == "yarn" and yarn["rows"][0]["length"] == 32
  assert yarn["rows"][0]["nll"] != pytest.approx(by_len[32]["nll"], rel=1e-6)
  # Self-Extend (W = train_len // 4) changes distances >= 8 only, so it changes the loss too.
  assert results["ppl_vs_length_self_extend_x2"]["rows"][0]["nll"] != pytest.approx(
      by_len[32]["nll"], rel=1e-6)
  passkey_rows = {r["length"]: r for r in results["passkey_yarn_x2"]["rows"]}
  assert "skipped" in passkey_rows[32] and passkey_rows[128]["accuracy"] is not None
  # One figure holds the comparable curves (same step, protocol, budget and lengths: the plain
  # result was rewritten above at lengths 32 and 128).
  curves = eval_run._same_step_curves(str(tmp_path / "eval"), yarn)
  assert [c["extension"] for c in curves] == ["none", "self_extend", "yarn"]
  yarn["max_tokens_per_length"] = 1  # another budget: another figure
  assert eval_run._same_step_curves(str(tmp_path / "eval"), yarn) == []
  # An eval-time parameter under model.position (STRING's shift) names its own files.
  shifted = load_run_config(str(tmp_path))
  shifted.model.position.string_shift, shifted.eval.extension = 5, "string"
  shifted.eval.length_multipliers = (1.0,)
  out_shift = eval_run.evaluate(str(tmp_path), config=shifted)
  assert set(out_shift) == {"ppl_vs_length_string_string_shift5"}
  assert out_shift["ppl_vs_length_string_string_shift5"]["extension_params"] == {"string_shift": 5}
  # The sliding protocol writes its own files; the non-overlapping ones stay.
  sliding = load_run_config(str(tmp_path))
  sliding.eval.protocol, sliding.eval.stride = "sliding", 8
  sliding.eval.length_multipliers = (1.0,)
  assert set(eval_run.evaluate(str(tmp_path), config=sliding)) == {"ppl_vs_length_sliding_s8"}
  assert json.load(open(tmp_path / "eval/ppl_vs_length_sliding_s8.json"))["stride"] == 8
  assert json.load(open(tmp_path / "eval/ppl_vs_length.json"))["protocol"] == "non_overlapping"
  bad = load_run_config(str(tmp_path))
  bad.eval.extension = "alibi_interpolation"
  with pytest.raises(ConfigError, match="eval.extension"):
    eval_run.evaluate(str(tmp_path), config=bad)


def test_eight_devices_match_one_device(text_corpus, tmp_path):
  one = tiny_config(text_corpus)
  one.train.num_steps = 6
  train.train_and_evaluate(one, str(tmp_path / "one"), devices=jax.devices()[:1])
  eight = tiny_config(text_corpus)
  eight.train.num_steps = 6
  eight.mesh.data, eight.mesh.fsdp, eight.mesh.tensor = 2, 2, 2
  assert jax.device_count() == 8
  train.train_and_evaluate(eight, str(tmp_path / "eight"))
  a, b = losses(tmp_path / "one"), losses(tmp_path / "eight")
  assert [s for s, _ in a] == [s for s, _ in b]
  np.testing.assert_allclose([l for _, l in b], [l for _, l in a], rtol=1e-5)
  pa, pb = final_params(tmp_path / "one", one), final_params(tmp_path / "eight", one)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6), pa, pb)


def tensorboard_events(workdir) -> list:
  """Every Event in `<workdir>/tensorboard/events.*`, file by file in name order (TFRecord
  framing: length, its CRC, the Event proto, its CRC)."""
  from tensorboardX.proto.event_pb2 import Event
  events = []
  folder = os.path.join(workdir, "tensorboard")
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), "rb") as f:
      data = f.read()
    at = 0
    while at < len(data):
      length = int.from_bytes(data[at:at + 8], "little")
      events.append(Event.FromString(data[at + 12:at + 12 + length]))
      at += 12 + length + 4
  return events


def test_kill_and_resume_is_exact(text_corpus, tmp_path, capsys):
  straight = tiny_config(text_corpus, "learned")
  straight.train.write_plots = True
  train.train_and_evaluate(straight, str(tmp_path / "straight"), devices=jax.devices()[:1])

  first = tiny_config(text_corpus, "learned")
  first.train.write_plots = True
  first.train.stop_after_step = 5  # the process ends after step 5 (its checkpoint is saved)
  out = train.train_and_evaluate(first, str(tmp_path / "resumed"), devices=jax.devices()[:1])
  assert out == {"step": 5}
  assert not os.path.exists(tmp_path / "resumed" / "eval")
  assert os.path.getsize(tmp_path / "resumed" / "training_curves.png") > 0  # drawn on a stop too
  second = tiny_config(text_corpus, "learned")
  second.train.write_plots = True
  second.eval.max_tokens_per_length = 256  # another value (was 512): the resume says so
  capsys.readouterr()
  train.train_and_evaluate(second, str(tmp_path / "resumed"), devices=jax.devices()[:1])
  assert ("it resumes with the new ones: eval.max_tokens_per_length: 512 -> 256\n"
          in capsys.readouterr().out)  # and not train.stop_after_step (one process's field)

  # Same loss curve (hence the same data order) and bit-identical final parameters.
  assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
  pa = final_params(tmp_path / "straight", straight)
  pb = final_params(tmp_path / "resumed", straight)
  jax.tree.map(np.testing.assert_array_equal, pa, pb)

  # TensorBoard: the fresh run's config as text and hyperparameters (once); the resume's purge
  # marker at step 6 drops the scalars the killed run logged after its checkpoint at step 5 (the
  # first start's, at 0, those of any start killed before its first checkpoint).
  events = tensorboard_events(tmp_path / "resumed")
  tags = [v.tag for e in events for v in e.summary.value]
  assert tags.count("config/text_summary") == 1 and "_hparams_/experiment" in tags
  config_text = next(v.tensor.string_val[0] for e in events for v in e.summary.value
                     if v.tag == "config/text_summary").decode()
  assert '"kind": "learned"' in config_text
  hparams = next(v.metadata.plugin_data.content for e in events for v in e.summary.value
                 if v.tag == "_hparams_/session_start_info")
  assert b"model.position.kind" in hparams and b"learned" in hparams
  purges = [e.step for e in events if e.HasField("session_log") and e.session_log.status == 1]
  assert purges == [0, 6]
  assert [e.step for e in events if any(v.tag == "loss" for v in e.summary.value)] == (
      list(range(1, 6)) + list(range(6, 11)))


def test_checkpoint_of_another_shape_is_refused(text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.train.num_steps = 2
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  before = open(tmp_path / "config.json").read()
  other = tiny_config(text_corpus)
  other.model.d_model = 32
  mesh = train.sharding.make_mesh(other.mesh, jax.devices()[:1])
  with pytest.raises(ConfigError, match="does not match"):
    run_ckpt.restore_params(str(tmp_path), other, specs.model_spec(other, mesh))
  # Resuming training with another model shape is refused before anything is written.
  other.train.num_steps = 4
  with pytest.raises(ConfigError, match="model.d_model=64, not 32"):
    train.train_and_evaluate(other, str(tmp_path), devices=jax.devices()[:1])
  assert open(tmp_path / "config.json").read() == before
  # So is a step count below the last checkpoint's (no step to train, none to reach).
  fewer = tiny_config(text_corpus)
  fewer.train.num_steps, fewer.train.warmup_steps = 1, 1
  with pytest.raises(ConfigError, match=r"^train.num_steps=1 is below the step of the last "
                     r"checkpoint in --workdir=.* \(2\); raise it to resume"):
    train.train_and_evaluate(fewer, str(tmp_path), devices=jax.devices()[:1])
  assert open(tmp_path / "config.json").read() == before


def run_cli(args, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  return forked.run([os.path.join(ROOT, "train.py"),
                    f"--config={os.path.join(ROOT, 'configs/alibi_tiny.py')}", *args], cwd=tmp_path,
                    env=env, timeout=120)


@pytest.mark.parametrize("args,field", [
    (["--config.model.position.kind=bogus"], "model.position.kind"),
    (["--config.mesh.data=3"], "mesh"),
    (["--config.model.num_heads=5"], "model.num_heads"),
    (["--config.eval.suitez=passkey"], 'Did you mean "suites"'),  # ml_collections' KeyError
    (["--config.train.num_steps=many"], "--config.train.num_steps=many"),  # wrong type
    (["--config.model.num_layers=abc"], "; --config.model.num_layers takes an integer"),
    (["--config.train.write_plots=maybe"], "; --config.train.write_plots takes true or false"),
    (["--config.eval.length_multipliers=-1,abc"],
     "written as numbers separated by commas (e.g. 0.5,1,2); got ('-1,abc',)"),
    # No near miss: the fields that exist at that level are listed.
    (["--config.model.foo=1"], "config.model has no field 'foo' (its fields: attention_chunk, "),
    (["--config.model.position.zz=1"], "(its fields: abacus_max_offset, abacus_num_embeddings, abf_theta, "),
])
def test_cli_bad_config_fails_in_one_line(args, field, tmp_path):
  proc = run_cli([f"--workdir={tmp_path / 'w'}", *args], tmp_path)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [l for l in proc.stderr.strip().splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and field in lines[0], proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["--step=-5"], "error: --step must be a checkpoint step >= 0, or -1 for the latest; got -5"),
    ([], "error: --workdir is required (a training run's workdir)"),
])
def test_eval_cli_bad_flags_fail_in_one_line(args, message, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  workdir = [f"--workdir={tmp_path}"] if args else []
  proc = forked.run(["-m", "eval.run", *workdir, *args], cwd=ROOT, env=env, timeout=120)
  assert proc.returncode == 2 and proc.stderr.strip() == message, proc.stderr[-2000:]


@pytest.mark.parametrize("override,message", [
    ("--config.eval.extensoin=yarn", "error: a --config override does not match the config "
     "(--config.eval.extensoin): 'extensoin'; Did you mean \"extension\" instead of "
     "\"extensoin\"?"),
    # No near miss: the fields that exist at that level are listed.
    ("--config.eval.foo=1", "error: a --config override does not match the config "
     "(--config.eval.foo): 'foo'; config.eval has no field 'foo' (its fields: attention, "
     "batch_tokens, common_words, extension, factor, frequent_words, length_multipliers, "
     "max_tokens_per_length, needle, "
     "niah_multikey, niah_multiquery, niah_multivalue, passkey, position_bins, protocol, "
     "split, step, stride, suites, variable_tracking, window)"),
])
def test_eval_cli_bad_field_fails_in_one_line(override, message, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  proc = forked.run(["-m", "eval.run", f"--workdir={tmp_path}", override], cwd=ROOT, env=env,
                    timeout=120)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert proc.stderr.strip() == message


def test_eval_config_names_the_model_fields_that_changed(tmp_path):
  from runs import workdir as run_dir
  trained = tiny_config("unused", "rope")
  run_dir.write_run_config(str(tmp_path), trained)
  other = tiny_config("unused", "alibi")
  other.model.d_model = 32
  with pytest.raises(ConfigError) as e:
    eval_run.eval_config(str(tmp_path), other)
  assert str(e.value).startswith("model.d_model=32 (trained: 64), model.position.kind='alibi' "
                                 "(trained: 'rope'): --config.model.* and --config.data.train_len "
                                 "must stay as trained")


def test_a_resume_with_another_schedule_names_the_changed_fields(tmp_path):
  """runs.workdir.check_resume: what train.py warns of when a workdir's run resumes with
  other values (allowed outside the model, whose changes it refuses)."""
  from runs import workdir as run_dir
  assert run_dir.check_resume(str(tmp_path), tiny_config("unused", "rope")) == []  # no run
  trained = tiny_config("unused", "rope")
  trained.train.num_steps, trained.train.warmup_steps = 20, 5
  run_dir.write_run_config(str(tmp_path), trained)
  os.makedirs(tmp_path / "checkpoints" / "3")  # a committed step: a run, not a failed start
  assert run_dir.check_resume(str(tmp_path), trained) == []
  resumed = tiny_config("unused", "rope")
  resumed.train.num_steps, resumed.train.warmup_steps = 900, 50
  assert run_dir.check_resume(str(tmp_path), resumed) == [
      "train.num_steps: 20 -> 900", "train.warmup_steps: 5 -> 50"]
  resumed.eval.stride, resumed.train.seed = 7, 99
  assert run_dir.check_resume(str(tmp_path), resumed, limit=2) == [
      "eval.stride: 0 -> 7", "train.num_steps: 20 -> 900", "... and 2 more"]


def test_eval_cli_helpshort_lists_the_flags_not_the_config():
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  proc = forked.run(["-m", "eval.run", "--helpshort"], cwd=ROOT, env=env, timeout=120)
  text = proc.stdout + proc.stderr
  assert len(text.splitlines()) < 60, text  # (absl ends --helpshort with status 1)
  assert "--workdir" in text and "--length_multipliers" in text and "configs/base.py" in text
  assert "batch_size" not in text  # the config's fields are documented, not dumped


def test_a_stray_positional_argument_is_one_line_and_exit_2(tmp_path):
  proc = run_cli([f"--workdir={tmp_path / 'w'}", "stray"], tmp_path)
  assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr[-2000:]
  assert proc.stderr.startswith("error: unexpected arguments ['stray']; give every setting as a flag")
  assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize("text,message", [
    (None, "error: --config could not be loaded: [Errno 2] No such file or directory"),
    ("def get_config(:\n", "error: the --config file does not run: SyntaxError: invalid syntax"),
])
def test_cli_config_file_that_cannot_load_fails_in_one_line(text, message, tmp_path):
  path = tmp_path / "my_config.py"
  if text is not None:
    path.write_text(text)
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  proc = forked.run([os.path.join(ROOT, "train.py"), f"--config={path}",
                    f"--workdir={tmp_path / 'w'}"], cwd=tmp_path, env=env, timeout=120)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert proc.stderr.strip().startswith(message), proc.stderr


def test_a_misspelled_config_file_names_the_close_ones(tmp_path):
  proc = forked.run([os.path.join(ROOT, "train.py"), "--config=configs/alibi_tinyy.py",
                     f"--workdir={tmp_path / 'w'}"], cwd=ROOT,
                    env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
  assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
  assert proc.stderr.strip().endswith("'configs/alibi_tinyy.py'; did you mean "
                                      "configs/alibi_tiny.py?"), proc.stderr
  assert not os.path.exists(tmp_path / "w")


def test_cli_workdir_that_is_a_file(tmp_path):
  target = tmp_path / "file"
  target.write_text("keep me")
  proc = run_cli([f"--workdir={target}"], tmp_path)
  assert proc.returncode == 2
  assert "--workdir" in proc.stderr and "is a file" in proc.stderr
  assert target.read_text() == "keep me"


def test_algorithmic_suite_on_a_text_run_is_refused_before_training(text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.eval.suites = "ppl_vs_length,algorithmic"
  with pytest.raises(ConfigError, match="eval.suites='algorithmic' needs an algorithmic task"):
    train.train_and_evaluate(c, str(tmp_path / "run"), devices=jax.devices()[:1])
  assert not os.path.exists(tmp_path / "run")  # a refused run leaves no workdir behind


def test_workdir_checks_do_not_create_it(tmp_path):
  run_dir.check_workdir(str(tmp_path / "a" / "b"))
  assert not os.path.exists(tmp_path / "a")
  (tmp_path / "f").write_text("")
  with pytest.raises(ConfigError, match="cannot be created: .* is a file"):
    run_dir.check_workdir(str(tmp_path / "f" / "run"))
  if os.geteuid() != 0:  # root may write anywhere
    os.chmod(tmp_path, 0o500)
    try:
      with pytest.raises(ConfigError, match="is not writable \\(cannot create it in"):
        run_dir.check_workdir(str(tmp_path / "new"))
    finally:
      os.chmod(tmp_path, 0o700)
  run_dir.make_workdir(str(tmp_path / "a" / "b"))
  assert os.path.isdir(tmp_path / "a" / "b")


def test_flops_per_token_formula():
  c = tiny_config("unused")
  # 2 layers: matmuls 4*64*64 + 2*64*128 per layer, head 64*259; attention 2*32*64 per layer.
  matmul = 2 * (4 * 64 * 64 + 2 * 64 * 128) + 64 * 259
  assert specs.train_flops_per_token(c) == 6 * matmul + 3 * 2 * (2 * 32 * 64)


def test_gradient_accumulation_gives_the_same_update(text_corpus):
  import functools
  import jax.numpy as jnp
  c = tiny_config(text_corpus)
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  tx = optimizer.make_optimizer(c.train)
  params = specs.init_params(c, spec)
  rng = np.random.default_rng(0)
  batch = {"inputs": rng.integers(0, 256, (8, 32)), "targets": rng.integers(0, 256, (8, 32)),
           "positions": np.tile(np.arange(32), (8, 1)), "segment_ids": np.ones((8, 32))}
  batch["targets"][0, -5:] = 258  # PAD targets are excluded from the token-weighted mean
  batch = {k: jnp.asarray(v, jnp.int32) for k, v in batch.items()}
  results = []
  for accum in (1, 4):
    state = {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}
    step = jax.jit(functools.partial(train.train_step, graphdef=spec.graphdef, tx=tx, pad_id=258,
                                     grad_accum_steps=accum))
    results.append(step(state, batch))
  (s1, m1), (s4, m4) = results
  assert float(m4["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
               s1["params"], s4["params"])


def test_learned_positions_skip_unrepresentable_lengths(text_corpus, tmp_path):
  c = tiny_config(text_corpus, "learned")
  c.train.num_steps = 2
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  rows = {r["length"]: r for r in out["ppl_vs_length"]["rows"]}
  assert rows[32]["tokens"] > 0 and "skipped" not in rows[32]
  assert rows[64]["nll"] is None and "clamp=True" in rows[64]["skipped"]
  with pytest.raises(ConfigError, match="exceeds the 32 positions"):
    eval_run.evaluate(str(tmp_path), length_multipliers=["4"])


@pytest.mark.parametrize("kind", sorted(positions.REGISTRY))
def test_every_scheme_trains_and_evaluates_at_4x(kind, text_corpus, tmp_path):
  """12 steps of a one-layer model lower the loss (and its validation loss at train_len is
  finite); evaluation at 4x train_len works (learned: a documented skip)."""
  c = tiny_config(text_corpus, kind)
  c.model.num_layers = 1
  c.train.num_steps = c.train.checkpoint_every_steps = 12
  c.eval.length_multipliers = (4.0,)
  c.eval.max_tokens_per_length = 256
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  curve = [l for _, l in losses(tmp_path)]
  assert np.mean(curve[-3:]) < np.mean(curve[:3])
  assert np.isfinite(out["val_loss"])
  rows = {r["length"]: r for r in out["ppl_vs_length"]["rows"]}
  if kind == "learned":
    assert rows[128]["nll"] is None and "skipped" in rows[128]
  else:
    assert rows[128]["tokens"] > 0 and np.isfinite(rows[128]["nll"])


def test_training_ends_with_the_configured_retrieval_suites(text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.data.train_len = 64
  c.train.num_steps = 2
  c.eval.length_multipliers = (2.0,)  # 128 tokens: room for a passkey prompt without preamble
  c.data.passkey.preamble = False
  c.eval.passkey.depths = (0.5,)
  c.eval.passkey.trials = 1
  c.eval.suites = "ppl_vs_length,passkey"
  out = train.train_and_evaluate(c, str(tmp_path / "ok"), devices=jax.devices()[:1])
  assert out["passkey"]["rows"][0]["length"] == 128 and out["passkey"]["rows"][0]["prompts"] == 1
  assert os.path.getsize(tmp_path / "ok/eval/passkey.json") > 0
  c.eval.length_multipliers = (1.0,)  # 64 tokens cannot hold the prompt: refused up front
  with pytest.raises(ConfigError, match="eval.length_multipliers"):
    train.train_and_evaluate(c, str(tmp_path / "short"), devices=jax.devices()[:1])
  assert not os.path.exists(tmp_path / "short/checkpoints")


def test_passkey_runs_log_the_loss_of_the_answer_digits(text_corpus, tmp_path, capsys):
  """val_passkey_answer_nll: the weighted NLL of data.passkey.answer_windows, at every evaluation."""
  c = tiny_config(text_corpus)
  c.data.train_len = 128
  c.data.passkey.preamble = False
  c.data.passkey.fraction = 0.5
  with pytest.raises(ConfigError, match=r"leaves 22 of data.train_len=128 tokens for filler"):
    train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  assert not os.path.exists(tmp_path / "config.json")
  c.data.passkey.key_digits = 1  # 94 tokens without filler: 34 of 128 for filler
  c.train.num_steps, c.train.eval_every_steps = 2, 1
  c.eval.length_multipliers = (1.0,)
  c.eval.extension = "yarn"
  with pytest.raises(ConfigError, match="eval.extension='yarn' applies to"):  # alibi: refused
    train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  c.eval.extension = "none,self_extend"  # fits: kept in config.json for eval.run, not applied
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  assert "warning: not applied: eval.extension='none,self_extend'" in capsys.readouterr().out
  records = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  answer = {r["step"]: r["val_passkey_answer_nll"] for r in records if "val_loss" in r}
  assert sorted(answer) == [1, 2] and out["val_passkey_answer_nll"] == answer[2]
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params, _ = run_ckpt.restore_params(str(tmp_path), c, spec)
  windows = passkey_training.answer_windows(get_tokenizer("byte"), train_len=128, preamble=False,
                                            key_digits=1, count=data_inputs.PASSKEY_ANSWER_DOCUMENTS,
                                            seed=c.eval.passkey.seed)
  total, count = perplexity.score_windows(perplexity.make_nll_fn(spec.graphdef, mesh), params,
                                          windows, batch_size=8, mesh=mesh)
  assert count == 1 * data_inputs.PASSKEY_ANSWER_DOCUMENTS  # one digit per key
  assert answer[2] == pytest.approx(total / count, rel=1e-6)
  assert 1.0 < answer[2] < 8.0  # an untrained model: near ln(259 ids), not yet ln(10)


def test_a_resume_within_the_same_second_keeps_the_first_starts_events(tmp_path):
  """tensorboardX names event files by the second; two starts in one second must not share one."""
  from runs.metrics import MetricsWriter
  config = tiny_config("unused/*.txt", "learned")
  first = MetricsWriter(str(tmp_path), None, config)
  first.log({"step": 1, "loss": 2.0})
  first.close()
  second = MetricsWriter(str(tmp_path), 1, config)
  second.log({"step": 2, "loss": 1.5})
  second.close()
  assert len(os.listdir(tmp_path / "tensorboard")) == 2
  events = tensorboard_events(tmp_path)
  tags = [v.tag for e in events for v in e.summary.value]
  assert tags.count("config/text_summary") == 1
  assert [e.step for e in events if any(v.tag == "loss" for v in e.summary.value)] == [1, 2]
