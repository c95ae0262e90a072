"""Adding an evaluation suite is one file, one registry line and one test: a suite defined here
and put into eval.suites.REGISTRY (undone after the test) is checked before compilation, run by
eval.run and collected by sweeps.collect, with no other edit."""

import json

import jax
import numpy as np
import pytest

import train
from conftest import tiny_config
from configs.errors import ConfigError, eval_lengths
from configs.validate import eval_suites
from data.inputs import load_splits
from data.pipeline import document_ids, document_windows
from data.tokenizers import get_tokenizer
from eval import perplexity, suites
from eval import run as eval_run
from eval.suites.base import TEXT, Suite, write_result
from sweeps import collect

MIN_BATCH_TOKENS = 64


class WindowCount(Suite):
  """Per eval length: the held-out windows from document starts and their mean NLL (nats)."""

  names = ("window_count",)
  data = TEXT

  def check(self, config, *, spec=None, docs=None, tokenizer=None, explicit_lengths=False):
    if config.eval.batch_tokens < MIN_BATCH_TOKENS:
      raise ConfigError(f"eval.batch_tokens must be >= {MIN_BATCH_TOKENS} for the window_count "
                        f"suite; got {config.eval.batch_tokens}")
    return []

  def run(self, ctx):
    nll_fn = perplexity.make_nll_fn(ctx.spec.graphdef, ctx.mesh)
    rows = []
    for length in eval_lengths(ctx.config):
      windows = document_windows(ctx.docs[ctx.config.eval.split], ctx.tokenizer, length, length)
      total, count = perplexity.score_windows(nll_fn, ctx.params, windows, batch_size=1,
                                              mesh=ctx.mesh)
      rows.append({"length": length, "windows": len(windows["inputs"]), "nll": total / count})
    result = {"suite": "window_count", "step": ctx.step, "rows": rows}
    write_result(ctx.workdir, f"window_count{ctx.suffix}", result)
    return {f"window_count{ctx.suffix}": result}

  def summary(self, result):
    return [f"{row['length']}: {row['windows']} windows" for row in result["rows"]]


@pytest.fixture
def toy_suite(monkeypatch):
  monkeypatch.setitem(suites.REGISTRY, "window_count", WindowCount())


def test_a_registered_suite_is_checked_run_and_collected(toy_suite, text_corpus, tmp_path):
  c = tiny_config(text_corpus)
  c.train.num_steps, c.train.checkpoint_every_steps = 2, 2
  c.eval.length_multipliers = (1.0, 2.0)
  workdir = tmp_path / "study" / "run"
  train.train_and_evaluate(c, str(workdir), jax.devices()[:1])

  c.eval.suites = "window_count"
  assert eval_suites(c) == ["window_count"]  # the registry is the list of names
  c.eval.batch_tokens = 32  # the suite's own check, before anything compiles
  with pytest.raises(ConfigError, match="eval.batch_tokens must be >= 64 for the window_count"):
    eval_run.evaluate(str(workdir), config=c)
  assert not (workdir / "eval" / "window_count.json").exists()

  c.eval.batch_tokens = 256
  results = eval_run.evaluate(str(workdir), config=c)
  assert list(results) == ["window_count"]
  rows = results["window_count"]["rows"]
  assert [r["length"] for r in rows] == [32, 64]
  assert json.load(open(workdir / "eval" / "window_count.json")) == results["window_count"]
  docs = load_splits(c)["validation"]  # one window from each document's start that holds one
  tok = get_tokenizer(c.data.tokenizer)
  for r in rows:
    longer = sum(len(document_ids(d, tok)) >= r["length"] for d in docs)
    assert r["windows"] == longer and np.isfinite(r["nll"]) and r["nll"] > 0

  table = collect.collect(str(tmp_path / "study"))
  mine = table[table["suite"] == "window_count"].sort_values("length")
  assert mine["length"].tolist() == [32, 64] and mine["multiplier"].tolist() == [1.0, 2.0]
  assert mine["windows"].tolist() == [r["windows"] for r in rows]
  assert mine["nll"].tolist() == pytest.approx([r["nll"] for r in rows])
  assert set(table["suite"]) == {"ppl_vs_length", "loss_by_position", "window_count"}
