"""The memory pre-flight (runs/memory.py): the verdict on real figures, train.py refusing a step
that cannot fit before the workdir exists, the start-up line, and evaluation skipping a length
that cannot fit (recorded in the result JSON) or refusing when none fits."""

import json
import os

import jax
import pytest

import train
from conftest import tiny_config
from configs.errors import ConfigError
from data import inputs as data_inputs
from data.tokenizers import get_tokenizer
from eval import perplexity
from eval import run as eval_run
from models import sharding
from models import spec as specs
from configs.stored import load_run_config
from runs import checkpoint as run_ckpt
from runs import memory
from runs import workdir as run_dir

GIB = 2 ** 30
# configs/alibi_tiny.py at data.train_len=100000 on one CPU device, as measured (before step 0).
AT_100K = memory.Footprint(argument=35_448_844, output=9_849_720, temporary=23_175_141_062_368,
                           generated_code=0, alias=9_848_844)


def test_verdict_refuses_the_100k_step_naming_the_fields():
  limit = memory.Limit(int(22.75 * GIB), 1, "host RAM, MemAvailable")
  reduce = memory.train_reductions(_alibi_100k(), 1, AT_100K.peak)
  v = memory.verdict(AT_100K, limit, headroom=0.9, what="train step", reduce=reduce)
  assert not v.fits and v.need == AT_100K.peak and v.usable == int(limit.bytes * 0.9)
  assert "train step needs 21583.57 GiB per device" in v.line
  assert "temporaries 21583.53" in v.line and "of 22.75 GiB available" in v.line
  for field in ("data.batch_size=16", "data.train_len=100000", "train.grad_accum_steps=1",
                "model.remat='none'"):
    assert field in v.line, v.line
  assert "\n" not in v.line


def _alibi_100k():
  from configs import alibi_tiny
  c = alibi_tiny.get_config()
  c.data.train_len = 100000
  return c


def test_verdict_counts_devices_sharing_ram_headroom_and_resident_bytes():
  fp = memory.Footprint(argument=100 << 20, output=50 << 20, temporary=800 << 20,
                        generated_code=1 << 20, alias=50 << 20)
  assert fp.peak == (100 + 50 - 50 + 800 + 1) << 20
  one = memory.Limit(1 * GIB, 1, "test")
  assert memory.verdict(fp, one, headroom=0.9, what="x").fits  # 901 MiB <= 921.6 MiB
  assert not memory.verdict(fp, one, headroom=0.8, what="x").fits  # > 819.2 MiB
  host = memory.Limit(7 * GIB, 8, "test")  # 8 CPU devices: 901 MiB x 8 = 7208 MiB > 7168 MiB
  shared = memory.verdict(fp, host, headroom=1.0, what="x")
  assert not shared.fits and shared.need == 8 * fp.peak and "x 8 devices sharing it" in shared.line
  scoring = memory.verdict(fp, host, headroom=1.0, what="x",
                           resident=100 << 20)  # parameters already in memory: 801 MiB x 8
  assert scoring.fits and scoring.need == 8 * (801 << 20)


def test_device_limit_reads_host_ram_shared_by_cpu_devices_and_the_cap():
  limit = memory.device_limit(jax.devices()[:2])
  assert limit.sharing == 2 and "MemAvailable" in limit.source
  assert abs(limit.bytes - memory.host_available_bytes()) < 0.2 * limit.bytes
  capped = memory.device_limit(jax.devices()[:2], cap_gib=0.5)
  assert capped.bytes == GIB // 2 and "train.memory_limit_gib=0.5" in capped.source


def test_train_refuses_a_step_that_cannot_fit_before_the_workdir(text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.train.memory_limit_gib = 0.001  # 1 MiB; the tiny step needs about 4.5 MiB
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError, match=r"train step needs [\d.]+ MiB per device .*does not fit "
                     r"in 0.92 MiB; reduce it with data.batch_size=8 .*model.remat") as e:
    train.train_and_evaluate(c, str(workdir), devices=jax.devices()[:1])
  assert "\n" not in str(e.value) and not workdir.exists()


def scoring_needs(workdir, lengths, batch_tokens):
  """{length: per-device need, bytes, less the parameters} of eval.run's scoring program on all
  devices (the run's one-device mesh does not fit 8: eval.run evaluates data-parallel)."""
  config = load_run_config(workdir)
  config.mesh.data = -1
  mesh = sharding.make_mesh(config.mesh, jax.devices())
  spec = specs.model_spec(config, mesh)
  params, _ = run_ckpt.restore_params(workdir, config, spec)
  nll_fn = perplexity.make_nll_fn(spec.graphdef, mesh)
  resident = memory.resident_bytes(params)
  return {L: memory.Footprint.of(perplexity.compile_scoring(
      nll_fn, params, L, batch_tokens // L, mesh)).peak - resident for L in lengths}


def test_start_line_then_eval_skips_a_length_that_cannot_fit(text_corpus, tmp_path, capsys):
  c = tiny_config(text_corpus)
  c.train.num_steps = c.train.checkpoint_every_steps = 2
  c.eval.length_multipliers = (0.5, 4.0)
  c.eval.batch_tokens = 4096
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(c, workdir, devices=jax.devices()[:1])
  start = [l for l in capsys.readouterr().out.splitlines() if l.startswith("memory: ")]
  assert len(start) == 1 and "train step needs" in start[0] and "available" in start[0]

  resumed = load_run_config(workdir)
  resumed.model.remat = "full"  # a run may resume with remat (same checkpoint), not another width
  assert run_dir.check_resume(workdir, resumed)[0].startswith("model.remat: ")
  resumed.model.d_model = 32
  with pytest.raises(ConfigError, match="model.d_model=64"):
    run_dir.check_resume(workdir, resumed)

  needs = scoring_needs(workdir, (16, 128), 4096)
  assert needs[128] > needs[16]
  shared = len(jax.devices())  # CPU devices of one process share the host's RAM
  config = load_run_config(workdir)
  config.train.memory_limit_gib = shared * (needs[16] + needs[128]) / 2 / 0.9 / GIB
  eval_run.evaluate(workdir, config=config)
  rows = json.load(open(os.path.join(workdir, "eval", "ppl_vs_length.json")))["rows"]
  assert rows[0]["length"] == 16 and rows[0]["tokens"] > 0 and "skipped" not in rows[0]
  assert rows[1]["length"] == 128 and rows[1]["nll"] is None
  assert rows[1]["skipped"].startswith("memory: scoring at length 128 needs")
  assert "eval.batch_tokens=4096" in rows[1]["skipped"]
  assert "skipping eval length 128: scoring at length 128" in capsys.readouterr().out

  config.train.memory_limit_gib = shared * needs[16] / 2 / GIB  # nothing fits: refused
  with pytest.raises(ConfigError, match=r"no evaluation length fits in memory; the shortest: "
                     r"memory: scoring at length 16 needs") as e:
    eval_run.evaluate(workdir, config=config)
  assert "\n" not in str(e.value)


def test_the_step_is_compiled_for_the_batches_the_data_yields(text_corpus):
  c = tiny_config(text_corpus)
  inputs = data_inputs.make_inputs(c, data_inputs.load_splits(c), get_tokenizer("byte"))
  batch = next(inputs.train)
  assert {k: (v.shape, v.dtype) for k, v in batch.items()} == data_inputs.train_batch_spec(c)
