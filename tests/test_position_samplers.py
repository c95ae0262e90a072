"""Training-time position samplers: randomized positions (arXiv 2305.16843) and PoSE (arXiv 2309.10400)."""

import ml_collections
import numpy as np
import pytest

from configs.validate import ConfigError, validate
from conftest import tiny_config
from data import cream, endprompt, pipeline
from data import position_samplers as ps
from data.corpora import Document
from data.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
# A packed window of 16 tokens holding three documents (5, 9 and 2 tokens).
SEG = np.array([1] * 5 + [2] * 9 + [3] * 2, np.int32)


def example(segment_ids=SEG):
  n = len(segment_ids)
  starts = np.concatenate([[True], np.diff(segment_ids) != 0])
  idx = np.arange(n)
  true_pos = idx - np.maximum.accumulate(np.where(starts, idx, 0))
  return {"inputs": np.arange(n, dtype=np.int32), "targets": np.arange(1, n + 1, dtype=np.int32),
          "positions": true_pos.astype(np.int32), "segment_ids": segment_ids.astype(np.int32)}


def sampler_cfg(**kw):
  return ml_collections.ConfigDict({**dict(kind="randomized", max_position=-1, num_chunks=2, seed=0), **kw})


def segments(pos, seg=SEG):
  return [pos[lo:hi] for lo, hi in ps.segment_bounds(seg)]


# ------------------------------------------------------------------ randomized (arXiv 2305.16843)

def test_segment_bounds():
  assert ps.segment_bounds(SEG) == [(0, 5), (5, 14), (14, 16)]
  assert ps.segment_bounds(np.ones(4, np.int32)) == [(0, 4)]


def test_randomized_positions_sorted_unique_in_range_per_segment():
  sampler = ps.RandomizedPositions(max_position=64, seed=0)
  ex = example()
  drops = 0
  for index in range(300):
    out = sampler.apply(index, ex)
    pos = out["positions"]
    assert pos.dtype == np.int32 and pos.shape == (16,)
    assert pos.min() >= 0 and pos.max() < 64
    for s in segments(pos):
      assert np.all(np.diff(s) > 0)  # sorted and distinct within each document
    for k in ("inputs", "targets", "segment_ids"):
      np.testing.assert_array_equal(out[k], ex[k])
    drops += int(pos[5] < pos[4]) + int(pos[14] < pos[13])
  # Each document draws afresh: positions often fall back at a document start.
  assert drops > 100
  np.testing.assert_array_equal(ex["positions"], example()["positions"])  # input not mutated


def test_randomized_covers_the_range_uniformly():
  rng = np.random.default_rng(0)
  draws = np.concatenate([ps.randomized_segment(3, 10, rng) for _ in range(5000)])
  counts = np.bincount(draws, minlength=10)
  assert counts.shape == (10,)
  np.testing.assert_allclose(counts / counts.sum(), 0.1, atol=0.015)
  np.testing.assert_array_equal(ps.randomized_segment(10, 10, rng), np.arange(10))  # n = max
  with pytest.raises(ValueError, match="distinct"):
    ps.randomized_segment(11, 10, rng)


def test_randomized_is_reproducible_and_seeded():
  ex = example()
  a = ps.RandomizedPositions(max_position=1000, seed=7)
  b = ps.RandomizedPositions(max_position=1000, seed=8)
  np.testing.assert_array_equal(a.apply(3, ex)["positions"], a.apply(3, ex)["positions"])
  np.testing.assert_array_equal(a.apply(3, ex)["positions"],
                                ps.RandomizedPositions(max_position=1000, seed=7).apply(3, ex)["positions"])
  assert not np.array_equal(a.apply(3, ex)["positions"], b.apply(3, ex)["positions"])
  assert not np.array_equal(a.apply(3, ex)["positions"], a.apply(4, ex)["positions"])
  assert not np.array_equal(a.apply(3, ex, stream=0)["positions"], a.apply(3, ex, stream=1)["positions"])


def docs_for_pipeline():
  return [Document(f"d{i}", bytes(range(97, 123)) * (i + 3)) for i in range(6)]


@pytest.mark.parametrize("sampler", [
    ps.RandomizedPositions(max_position=32, seed=5),
    ps.PoSEPositions(max_position=32, seed=5, num_chunks=3),
    cream.CREAMPositions(max_position=32, seed=5),
    cream.CREAMPositions(max_position=32, seed=5, k=1, truncation="renormalize"),
    endprompt.EndPromptPositions(max_position=32, seed=5, length=2, anchor="random"),
    endprompt.EndPromptPositions(max_position=32, seed=5, length=2)],
    ids=["randomized", "pose", "cream", "cream_renormalize", "endprompt_random", "endprompt_end"])
def test_iterator_state_resume_gives_the_same_sampled_positions(sampler):
  docs = docs_for_pipeline()
  make = lambda s: iter(pipeline.train_dataset(docs, TOK, train_len=8, batch_size=4, seed=3, sampler=s))
  per_epoch = len(pipeline.PackedWindows(*pipeline.pack_stream(docs, TOK), 8)) / 4  # batches
  it = make(sampler)
  for _ in range(int(per_epoch) - 2):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(6)]  # crosses an epoch boundary
  resumed = make(sampler)
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  # The sampler changes positions only: the same windows come in the same order.
  plain = make(None)
  plain.set_state(state)
  true_positions = []
  for want in expected:
    base = next(plain)
    for k in ("inputs", "targets", "segment_ids"):
      np.testing.assert_array_equal(base[k], want[k])
    assert want["positions"].dtype == np.int32 and want["positions"].max() < 32
    true_positions.append(base["positions"])
  assert not all(np.array_equal(a, b["positions"]) for a, b in zip(true_positions, expected))


def test_a_window_seen_again_draws_new_positions():
  rng = np.random.default_rng(0)
  docs = [Document(f"d{i}", rng.integers(97, 123, size=60, dtype=np.uint8).tobytes()) for i in range(4)]
  sampler = ps.RandomizedPositions(max_position=1000, seed=0)
  n = len(pipeline.PackedWindows(*pipeline.pack_stream(docs, TOK), 8))
  it = iter(pipeline.train_dataset(docs, TOK, train_len=8, batch_size=1, seed=3, sampler=sampler))
  rows = [next(it) for _ in range(2 * n)]
  first = {tuple(r["inputs"][0]): r["positions"][0] for r in rows[:n]}
  assert len(first) == n  # every window once per epoch, all distinct
  for r in rows[n:]:
    assert not np.array_equal(first[tuple(r["inputs"][0])], r["positions"][0])


def test_pipeline_draws_from_the_example_index_and_process():
  docs = docs_for_pipeline()
  sampler = ps.RandomizedPositions(max_position=10_000, seed=2)
  for p in range(2):
    it = iter(pipeline.train_dataset(docs, TOK, train_len=8, batch_size=2, seed=0, process_index=p,
                                     process_count=2, sampler=sampler))
    for step in range(2):
      batch = next(it)
      for row in range(2):
        index = 2 * step + row
        want = sampler.positions(batch["segment_ids"][row], sampler.rng(index, stream=p))
        np.testing.assert_array_equal(batch["positions"][row], want)


# ------------------------------------------------------------------ PoSE (arXiv 2309.10400)

@pytest.mark.parametrize("n,num_chunks", [(32, 2), (32, 3), (7, 7), (3, 5), (1, 2)])
def test_pose_segment_chunks_and_skips(n, num_chunks):
  max_position = 4 * 32
  for seed in range(200):
    pos, chunk, skips = ps.pose_segment(n, num_chunks, max_position, np.random.default_rng(seed))
    k = min(num_chunks, n)
    assert pos.dtype == np.int32 and pos.shape == (n,)
    assert pos.min() >= 0 and pos.max() < max_position  # largest position below max_position
    assert skips.shape == (k,) and skips[0] == 0 and np.all(np.diff(skips) >= 0)  # non-decreasing
    np.testing.assert_array_equal(np.unique(chunk), np.arange(k))  # k non-empty chunks, in order
    assert np.all(np.diff(chunk) >= 0)
    np.testing.assert_array_equal(pos, np.arange(n) + skips[chunk])
    inside = np.diff(chunk) == 0
    assert np.all(np.diff(pos)[inside] == 1)  # contiguous inside a chunk
    assert np.all(np.diff(pos) >= 1)


def test_pose_sees_relative_distances_beyond_train_len():
  train_len, max_position = 32, 128
  sampler = ps.PoSEPositions(max_position=max_position, seed=1, num_chunks=2)
  ex = example(np.ones(train_len, np.int32))
  spans = np.array([np.ptp(sampler.apply(i, ex)["positions"]) for i in range(500)])
  assert spans.max() <= max_position - 1
  assert (spans > train_len).mean() > 0.5  # most draws reach beyond the window
  assert spans.max() > 3 * train_len  # and distances up to max_position appear
  skips = [ps.pose_segment(train_len, 2, max_position, np.random.default_rng(i))[2][1] for i in range(200)]
  assert max(skips) <= max_position - train_len


def test_pose_restarts_per_document():
  sampler = ps.PoSEPositions(max_position=64, seed=0, num_chunks=3)
  ex = example()
  for index in range(100):
    pos = sampler.apply(index, ex)["positions"]
    for s in segments(pos):
      assert s[0] == 0 and np.all(np.diff(s) >= 1) and s.max() < 64  # u_0 = 0 in every document


def test_pose_single_chunk_is_the_identity():
  sampler = ps.PoSEPositions(max_position=64, seed=0, num_chunks=1)
  ex = example()
  np.testing.assert_array_equal(sampler.apply(9, ex)["positions"], ex["positions"])


# ------------------------------------------------------------------ config

def test_make_sampler_builds_each_kind():
  assert ps.make_sampler(sampler_cfg(kind="none"), 32) is None
  r = ps.make_sampler(sampler_cfg(kind="randomized", seed=4), 32)
  assert isinstance(r, ps.RandomizedPositions) and r.max_position == 128 and r.seed == 4
  p = ps.make_sampler(sampler_cfg(kind="pose", max_position=100, num_chunks=3), 32)
  assert isinstance(p, ps.PoSEPositions) and (p.max_position, p.num_chunks) == (100, 3)
  assert ps.make_sampler(sampler_cfg(max_position=32), 32).max_position == 32


@pytest.mark.parametrize("field,value,match", [
    ("kind", "random",
     r"data\.position_sampler\.kind.*\['none', 'randomized', 'pose', 'cream', 'endprompt'\]"),
    ("max_position", 31, r"data\.position_sampler\.max_position"),
    ("max_position", -2, r"data\.position_sampler\.max_position"),
    ("max_position", 64.0, r"data\.position_sampler\.max_position"),
    ("num_chunks", 0, r"data\.position_sampler\.num_chunks"),
    ("seed", -1, r"data\.position_sampler\.seed"),
])
def test_bad_sampler_fields_name_themselves(field, value, match):
  with pytest.raises(ConfigError, match=match) as e:
    ps.make_sampler(sampler_cfg(**{field: value}), 32)
  assert "\n" not in str(e.value)


def test_learned_table_must_cover_max_position():
  learned = ml_collections.ConfigDict(dict(kind="learned", max_len=-1, clamp=False))
  with pytest.raises(ConfigError, match="model.position.max_len"):
    ps.check_config(sampler_cfg(), 32, learned)
  ps.check_config(sampler_cfg(kind="none"), 32, learned)
  ps.check_config(sampler_cfg(max_position=32), 32, learned)
  learned.max_len = 128
  ps.check_config(sampler_cfg(), 32, learned)
  learned.update(dict(max_len=-1, clamp=True))
  ps.check_config(sampler_cfg(), 32, learned)


def test_validate_checks_the_sampler():
  c = tiny_config("unused")
  validate(c, 1)
  c.data.position_sampler.kind = "pose"
  validate(c, 1)
  c.data.position_sampler.num_chunks = 0
  with pytest.raises(ConfigError, match="data.position_sampler.num_chunks"):
    validate(c, 1)
