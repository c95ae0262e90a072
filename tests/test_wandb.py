"""Weights & Biases logging (runs/wandb_log.py), offline (no network): the W&B run holds the
scalars of metrics.jsonl at the same steps and the flattened config, and a resume continues the
same run. wandb comes with the `dev` extra."""

import glob
import json
import os
import struct

import jax
import pytest
from wandb.proto import wandb_internal_pb2  # the dev extra installs wandb

import train
from conftest import tiny_config
from configs.errors import ConfigError
from configs.validate import validate
from runs import metrics as run_metrics
from runs import wandb_log



def wandb_records(path: str):
  """The protobuf Records of an offline run's `run-<id>.wandb` file: W&B's log format, LevelDB's
  (a 7-byte file header ":W&B", 0xBEE1, version; 32 KiB blocks of records, each a 7-byte header:
  crc32, length, type 1 full / 2 first / 3 middle / 4 last; a block's last < 7 bytes are
  padding)."""
  with open(path, "rb") as f:
    data = f.read()
  assert data[:4] == b":W&B"
  pos, parts = 7, []
  while pos + 7 <= len(data):
    left = 32768 - pos % 32768
    _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
    if kind == 0:  # padding to the end of the block
      pos += left
      continue
    parts.append(data[pos + 7:pos + 7 + length])
    pos += 7 + length
    if kind in (1, 4):
      record = wandb_internal_pb2.Record()
      record.ParseFromString(b"".join(parts))
      parts = []
      yield record


def read_offline_run(path: str) -> dict:
  """{"id", "name", "project", "history": {step: {name: value}}, "config": {field: value}} of
  one offline run's .wandb file (W&B's own keys, _step, _runtime, ..., left out)."""
  out = {"history": {}, "config": {}}
  for record in wandb_records(path):
    kind = record.WhichOneof("record_type")
    if kind == "run":
      out.update(id=record.run.run_id, name=record.run.display_name,
                 project=record.run.project)
      updates = record.run.config.update
    elif kind == "config":
      updates = record.config.update
    elif kind == "history":
      row = {name: json.loads(item.value_json) for item in record.history.item
             if not (name := item.key or "/".join(item.nested_key)).startswith("_")}
      out["history"].setdefault(record.history.step.num, {}).update(row)
      continue
    else:
      continue
    out["config"].update({u.key: json.loads(u.value_json) for u in updates if u.key != "_wandb"})
  return out


@pytest.fixture
def offline(tmp_path, monkeypatch):
  """W&B offline, every file it writes under tmp_path (no network, nothing in $HOME)."""
  for name, folder in (("WANDB_DIR", "wandb_dir"), ("WANDB_CONFIG_DIR", "wandb_config"),
                       ("WANDB_CACHE_DIR", "wandb_cache"), ("WANDB_DATA_DIR", "wandb_data")):
    os.makedirs(tmp_path / folder)
    monkeypatch.setenv(name, str(tmp_path / folder))
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  return tmp_path / "wandb_dir"


def test_wandb_run_holds_the_metrics_and_config_and_a_resume_continues_it(text_corpus, tmp_path,
                                                                          offline):
  c = tiny_config(text_corpus, "rope")
  c.train.num_steps, c.train.checkpoint_every_steps, c.train.eval_every_steps = 4, 2, 2
  c.train.wandb_project = "pe-sweeps-test"
  c.train.wandb_mode = "offline"
  c.eval.length_multipliers = (1.0,)
  c.eval.suites = "ppl_vs_length"
  workdir = tmp_path / "rope_run"
  first = c.copy_and_resolve_references()
  first.train.stop_after_step = 2  # the first start ends after step 2 (checkpointed)
  assert train.train_and_evaluate(first, str(workdir), devices=jax.devices()[:1]) == {"step": 2}
  run_id = open(workdir / "wandb_id").read().strip()
  assert len(run_id) == 8
  train.train_and_evaluate(c, str(workdir), devices=jax.devices()[:1])  # resumes at step 2
  assert open(workdir / "wandb_id").read().strip() == run_id

  # Both starts logged to the same W&B run: one offline folder each, the same id and name.
  files = sorted(glob.glob(str(offline / "wandb" / f"offline-run-*-{run_id}" /
                             f"run-{run_id}.wandb")))
  assert len(files) == 2
  runs = [read_offline_run(f) for f in files]
  assert [(r["id"], r["name"], r["project"]) for r in runs] == [(run_id, "rope_run",
                                                                 "pe-sweeps-test")] * 2
  assert sorted(runs[0]["history"]) == [1, 2] and sorted(runs[1]["history"]) == [3, 4]

  # The history is metrics.jsonl: the same steps, the same values (losses, val_loss at steps 2
  # and 4, learning rates, timings), nothing else.
  logged = {}
  for record in run_metrics.read_metrics(str(workdir)):
    logged.setdefault(record["step"], {}).update(
        {k: v for k, v in record.items() if k != "step" and v is not None})
  history = {**runs[0]["history"], **runs[1]["history"]}
  assert history == logged
  assert [history[s]["loss"] for s in (1, 2, 3, 4)] == [logged[s]["loss"] for s in (1, 2, 3, 4)]
  assert {s for s in history if "val_loss" in history[s]} == {2, 4}
  assert 0 < history[4]["loss"] < history[1]["loss"]

  # The config is TensorBoard's hyperparameters: the config flattened, every field.
  for run, config in zip(runs, (first, c)):
    assert run["config"] == run_metrics.hparams(config)
    assert run["config"]["model.position.kind"] == "rope"
  assert runs[0]["config"]["train.stop_after_step"] == 2
  assert runs[1]["config"]["train.stop_after_step"] == -1  # a resume may change such fields


def test_a_step_wandb_already_holds_is_not_logged_again():
  """After an online resume W&B's run is at its last step; the records a resume logs again for
  the steps after its checkpoint are left out (W&B would refuse them)."""

  class FakeRun:
    step = 7

    def __init__(self):
      self.logged = []

    def log(self, values, step):
      self.logged.append((step, values))
      FakeRun.step = step

  logger = object.__new__(wandb_log.WandbRun)
  logger._run = FakeRun()
  for step in (6, 7, 8):
    logger.log({"step": step, "loss": 1.0 / step, "grad_norm": None})
  assert logger._run.logged == [(7, {"loss": 1.0 / 7}), (8, {"loss": 1.0 / 8})]


def test_wandb_fields_are_checked_before_compilation(text_corpus, tmp_path, monkeypatch):
  c = tiny_config(text_corpus)
  c.train.wandb_mode = "cloud"
  with pytest.raises(ConfigError, match=r"train\.wandb_mode='cloud' is not supported; choose one "
                                        r"of \['', 'online', 'offline', 'disabled'\]"):
    validate(c, 1)
  c.train.wandb_mode = ""
  c.train.wandb_project = None  # off, as ""
  validate(c, 1)
  assert not wandb_log.enabled(c)

  # wandb_project set without the package: one line naming the field and the install command,
  # before the workdir is made (nothing compiled).
  c.train.wandb_project = "p"
  real = wandb_log.importlib.util.find_spec
  monkeypatch.setattr(wandb_log.importlib.util, "find_spec",
                      lambda name, *a: None if name == "wandb" else real(name, *a))
  with pytest.raises(ConfigError) as e:
    train.train_and_evaluate(c, str(tmp_path / "w"), devices=jax.devices()[:1])
  assert str(e.value).startswith("train.wandb_project='p' needs the wandb package, which is not "
                                 "installed: pip install -e '.[wandb]'")
  assert "\n" not in str(e.value) and not os.path.exists(tmp_path / "w")
  c.train.wandb_mode = "disabled"  # logs nothing: needs no package
  wandb_log.check_installed(c)
