"""eval/ngram.py: interpolated Kneser-Ney byte n-grams against a direct reading of the formula,
their contexts inside evaluation windows, and the command line."""

import collections
import json
import math
import os

import numpy as np
import pytest

import forked
from eval import ngram

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reference_prob(docs, order, context, target):
  """P(target | context) by Chen & Goodman's interpolated Kneser-Ney, written out with Python
  counters (tuples of bytes, one loop per term), independent of eval/ngram.py's arrays."""
  def raw(k):
    return collections.Counter(tuple(d[i:i + k]) for d in docs for i in range(len(d) - k + 1))

  def continuation(k):
    return collections.Counter(g[1:] for g in raw(k + 1))  # distinct left extensions

  def discount(counts):
    n1 = sum(1 for v in counts.values() if v == 1)
    n2 = sum(1 for v in counts.values() if v == 2)
    return n1 / (n1 + 2 * n2) if n1 else 0.5

  def p(k, h, top):
    if k == 0:
      return 1 / 256
    counts = raw(k) if top else continuation(k)
    lower = p(k - 1, h[1:], False)
    c_h = sum(v for g, v in counts.items() if g[:-1] == h)
    if c_h == 0:
      return lower
    types = sum(1 for g in counts if g[:-1] == h)
    d = discount(counts)
    return (max(counts.get(h + (target,), 0) - d, 0) + d * types * lower) / c_h

  k = min(order, len(context) + 1)
  return p(k, tuple(context[len(context) - (k - 1):]) if k > 1 else (), True)


def test_probabilities_equal_the_formula_and_sum_to_one():
  rng = np.random.default_rng(0)
  docs = [bytes(rng.choice(list(b"abcab "), size=n)) for n in (40, 25, 3, 60)]
  model = ngram.KneserNey(docs, max_order=4)
  cases = []
  for _ in range(60):  # contexts of every length 0..5, seen and unseen, targets in and out
    context = bytes(rng.choice(list(b"abc xz"), size=int(rng.integers(0, 6))))
    cases.append((context, int(rng.choice(list(b"abc z")))))
  for order in (1, 2, 3, 4):
    width = max(order - 1, 1)
    ctx = np.zeros((len(cases), width), np.int64)
    for i, (c, _) in enumerate(cases):
      tail = list(c[-(order - 1):]) if order > 1 and c else []
      ctx[i, width - len(tail):] = tail
    lengths = np.array([len(c) for c, _ in cases])
    targets = np.array([t for _, t in cases])
    got = np.exp(model.log_prob(ctx[:, :order - 1], lengths, targets, order))
    want = [reference_prob(docs, order, list(c), t) for c, t in cases]
    np.testing.assert_allclose(got, want, rtol=1e-12)
  # A distribution over the 256 bytes for any context (seen, unseen, shorter than the order).
  for context in (b"ab", b"zz", b"", b"c"):
    ctx = np.tile(np.array(list(context.rjust(3, b"\0")), np.int64), (256, 1))
    total = np.exp(model.log_prob(ctx, np.full(256, len(context)), np.arange(256), 4)).sum()
    assert total == pytest.approx(1.0, abs=1e-12), context


def test_contexts_stay_inside_the_window_and_the_document():
  # One window: BOS, "ab" (document 1), then "cd" (document 2); the last target is PAD-weighted 0.
  windows = {"inputs": np.array([[256, 97, 98, 256, 99, 100]]),
             "targets": np.array([[97, 98, 257, 99, 100, 101]]),
             "segment_ids": np.array([[1, 1, 1, 2, 2, 2]]),
             "weights": np.array([[1, 1, 1, 1, 1, 0]], np.float32)}
  contexts, lengths, targets = ngram.window_contexts(windows, 3)
  assert targets.tolist() == [97, 98, 99, 100]  # EOS (257) and the weight-0 target left out
  assert lengths.tolist() == [0, 1, 0, 1]  # BOS is no context; document 2 does not see "ab"
  assert contexts[:, -1].tolist() == [0, 97, 0, 99]


def test_orders_score_the_committed_corpus_in_order_and_the_command_line(tmp_path):
  """On real text (the Python standard library's json modules) a higher order fits better
  in sample; the command line writes the JSON and refuses bad flags in one line."""
  import glob
  stdlib = os.path.dirname(os.__file__)
  docs = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(stdlib, "json", "*.py")))]
  model = ngram.KneserNey(docs, max_order=3)
  data = np.frombuffer(docs[0], np.uint8).astype(np.int64)
  ctx, targets = np.stack([data[:-2], data[1:-1]], axis=1), data[2:]  # two bytes, oldest first
  nll = [-model.log_prob(ctx[:, 3 - k:], np.full(len(targets), 2), targets, k).mean()
         for k in (1, 2, 3)]
  assert nll[0] > nll[1] > nll[2] and nll[0] < math.log(256)
  out = tmp_path / "ref" / "ngram.json"
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for i, d in enumerate(docs):
    (corpus / f"{i}.txt").write_bytes(d)
  done = forked.run(["-m", "eval.ngram", f"--config={ROOT}/configs/alibi_tiny.py",
                     f"--config.data.text_glob={corpus}/*.txt",
                     "--config.data.source=text_files", "--config.data.train_len=32",
                     "--config.eval.length_multipliers=1,2", "--max_order=3", f"--out={out}"],
                    cwd=ROOT, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  result = json.loads(out.read_text())
  assert result["orders"] == [1, 2, 3] and result["protocol"] == "non_overlapping"
  assert sorted({(r["length"], r["order"]) for r in result["rows"]}) == [
      (32, 1), (32, 2), (32, 3), (64, 1), (64, 2), (64, 3)]
  bad = forked.run(["-m", "eval.ngram", f"--config={ROOT}/configs/alibi_tiny.py",
                    "--max_order=9", f"--out={out}"], cwd=ROOT, timeout=120)
  assert (bad.returncode, bad.stderr.strip()) == (2, "error: --max_order must be 1..7, got 9")
