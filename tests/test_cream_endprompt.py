"""Context-extension position samplers: CREAM (arXiv 2406.07138; data/cream.py) and EndPrompt
(arXiv 2605.14589; data/endprompt.py). Reference values by hand for fixed draws, the statistics
of many draws, and the samplers' determinism and exact resumption."""

import ml_collections
import numpy as np
import pytest
from scipy.stats import norm

from configs.validate import ConfigError, validate
from conftest import tiny_config
from data import cream, endprompt
from data import position_samplers as ps
from data.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
SEG = np.array([1] * 5 + [2] * 9 + [3] * 2, np.int32)  # three documents in a window of 16


def sampler_cfg(**kw):
  base = dict(kind="cream", max_position=-1, num_chunks=2, seed=0, cream_k=-1, cream_sigma=3.0,
              cream_truncation="clip", endprompt_length=20, endprompt_anchor="end")
  return ml_collections.ConfigDict({**base, **kw})


# ------------------------------------------------------------------ CREAM: fixed draws by hand

def test_cream_relativity_draw_by_hand():
  # n = 32 tokens for L' = 128: s = 4, mu = 1 + s = 5, sigma = 3, the grid [2, 8].
  g = np.random.default_rng(1)
  assert g.integers(2) == 0  # relativity: h = floor(32 / 3) = 10, m = 32 - 20 = 12
  u = g.random()
  assert u == pytest.approx(0.95046, abs=1e-5)
  assert 5 + 3 * norm.ppf(u) > 8  # X = 9.95 lies beyond 2s = 8: clipped to 8, r = 4
  # e uniform in [floor(10 + 11 * 4), floor(4 * 32) - 10 - 1] = [54, 117]
  assert g.integers(54, 117, endpoint=True) == 86
  pos, info = cream.cream_segment(32, 128, np.random.default_rng(1))
  assert info == {"mode": "relativity", "head": 10, "factor": 4, "x": 8, "end": 86}
  want = list(range(10)) + list(range(75, 87)) + list(range(118, 128))  # head, middle, tail
  assert pos.dtype == np.int32 and pos.tolist() == want


def test_cream_continuity_draw_by_hand():
  g = np.random.default_rng(0)
  assert g.integers(2) == 1  # continuity: k = 4 s = 16, capped at floor(31 / 2) = 15; m = 2
  u = g.random()
  assert 3 <= 5 + 3 * norm.ppf(u) < 4  # u = 0.2698: X = 3.16, floor 3, r = 1.5
  assert g.integers(16, 32, endpoint=True) == 26  # [floor(15 + 1.5), floor(48) - 15 - 1]
  pos, info = cream.cream_segment(32, 128, np.random.default_rng(0))
  assert info == {"mode": "continuity", "head": 15, "factor": 4, "x": 3, "end": 26}
  assert pos.tolist() == list(range(15)) + [25, 26] + list(range(113, 128))


def test_cream_explicit_k_and_the_released_default():
  # k = 2 in continuity: head 0, 1 and tail 126, 127 whatever the middle.
  for seed in range(50):
    pos, info = cream.cream_segment(32, 128, np.random.default_rng(seed), k=2)
    if info["mode"] == "continuity":
      assert info["head"] == 2 and pos[:2].tolist() == [0, 1] and pos[-2:].tolist() == [126, 127]
  # The released k = 4 s at the released shape (N = 4,096 for s = 8): 32 tokens each end.
  seed = next(i for i in range(20) if np.random.default_rng(i).integers(2) == 1)
  pos, info = cream.cream_segment(4096, 8 * 4096, np.random.default_rng(seed))
  assert info["head"] == 32 and pos[-32:].tolist() == list(range(8 * 4096 - 32, 8 * 4096))


def test_gaussian_factor_clips_or_renormalizes():
  # clip (the released code): beyond either end of the grid the draw is the end itself.
  assert cream.gaussian_factor(4, 3.0, 0.0) == 2
  assert cream.gaussian_factor(4, 3.0, 0.999) == 8  # X would be 14
  assert cream.gaussian_factor(4, 3.0, 0.5) == 5  # the median mu = 5
  # renormalize: u spans [cdf(2), cdf(8)], so 8 itself is never reached.
  assert cream.gaussian_factor(4, 3.0, 0.0, "renormalize") == 2
  assert cream.gaussian_factor(4, 3.0, 0.999, "renormalize") == 7
  assert cream.gaussian_factor(1, 3.0, 0.7) == 2  # s = 1: r = 1


# ------------------------------------------------------------------ CREAM: many draws

@pytest.mark.parametrize("n,max_position,k", [(32, 128, -1), (64, 512, 2), (7, 100, -1),
                                              (1, 5, -1), (2, 4, 0), (128, 128, -1)])
def test_cream_positions_are_valid(n, max_position, k):
  for seed in range(300):
    pos, info = cream.cream_segment(n, max_position, np.random.default_rng(seed), k=k)
    h = info["head"]
    assert pos.dtype == np.int32 and pos.shape == (n,)
    assert pos.min() >= 0 and pos.max() < max_position  # below the target length
    assert np.all(np.diff(pos) >= 1)  # strictly increasing: within and across the segments
    assert np.all(np.diff(pos[h:n - h]) == 1)  # the middle is consecutive
    assert pos[:h].tolist() == list(range(h))
    assert pos[n - h:].tolist() == list(range(max_position - h, max_position))
    assert 2 * h < n and 2 <= info["x"] <= 2 * info["factor"]


@pytest.mark.parametrize("truncation", ["clip", "renormalize"])
def test_cream_gaussian_matches_its_distribution(truncation):
  s, sigma, draws = 4, 3.0, 20000
  rng = np.random.default_rng(0)
  x = np.array([cream.gaussian_factor(s, sigma, rng.random(), truncation) for _ in range(draws)])
  cdf = lambda v: norm.cdf(v, loc=1 + s, scale=sigma)
  # floor(X): j in 2 .. 2s - 1 covers X in [j, j + 1); clip puts X < 2 on 2 and X >= 2s on 2s.
  p = np.array([cdf(j + 1) - cdf(j) for j in range(2, 2 * s)] + [0.0])
  if truncation == "clip":
    p[0] += cdf(2)
    p[-1] = 1 - cdf(2 * s)
  else:
    p /= cdf(2 * s) - cdf(2)
  counts = np.bincount(x, minlength=2 * s + 1)[2:]
  np.testing.assert_allclose(counts / draws, p, atol=0.01)
  # Its mean sits at the middle of the factors: (1 + s) = 5 in units of X, minus the floor's 0.5,
  # within what the clipped mass at 2s adds.
  assert abs(x.mean() - (1 + s - 0.5)) < 0.25


def test_cream_middle_is_centred_on_the_target():
  n, max_position = 64, 512  # s = 8
  centres, modes = [], []
  for seed in range(3000):
    pos, info = cream.cream_segment(n, max_position, np.random.default_rng(seed), k=2)
    modes.append(info["mode"] == "continuity")
    if modes[-1]:
      centres.append(pos[2:n - 2].mean())
  assert abs(np.mean(modes) - 0.5) < 0.03  # the two indexings, half each
  # The middle ends near r N with E[r] ~ (1 + s) / 2 - 1/4: its centre near L' / 2.
  assert 0.42 < np.mean(centres) / max_position < 0.52
  assert np.std(centres) / max_position > 0.1  # spread over the range, not one place


# ------------------------------------------------------------------ EndPrompt

def test_endprompt_by_hand():
  # n = 10, c = 3, L' = 40: the first 7 tokens keep 0..6, the last 3 end at 39.
  assert endprompt.endprompt_segment(10, 3, 40, None).tolist() == [0, 1, 2, 3, 4, 5, 6, 37, 38, 39]
  # random: start uniform in [n - c, L' - c] = [7, 37]; seed 0 draws 33.
  assert np.random.default_rng(0).integers(7, 37, endpoint=True) == 33
  got = endprompt.endprompt_segment(10, 3, 40, np.random.default_rng(0), "random")
  assert got.tolist() == [0, 1, 2, 3, 4, 5, 6, 33, 34, 35]
  # c >= n: nothing to split, the true positions (the released fallback).
  assert endprompt.endprompt_segment(3, 3, 40, None).tolist() == [0, 1, 2]
  assert endprompt.endprompt_segment(40, 3, 40, None).tolist() == list(range(40))  # n = L'
  with pytest.raises(ValueError, match="anchor"):
    endprompt.endprompt_segment(10, 3, 40, None, "middle")


def test_endprompt_random_covers_the_range():
  n, c, max_position = 32, 4, 128
  starts = []
  for seed in range(2000):
    pos = endprompt.endprompt_segment(n, c, max_position, np.random.default_rng(seed), "random")
    assert np.all(np.diff(pos) >= 1) and pos.max() < max_position
    assert pos[:n - c].tolist() == list(range(n - c))
    starts.append(pos[n - c])
  starts = np.array(starts)
  assert starts.min() == n - c and starts.max() == max_position - c  # both ends reached
  assert abs(starts.mean() - (n - c + max_position - c) / 2) < 2  # uniform


def test_endprompt_per_document_segment():
  sampler = endprompt.EndPromptPositions(max_position=64, seed=0, length=3)
  ex = {"segment_ids": SEG, "positions": np.zeros(16, np.int32)}
  pos = sampler.apply(0, ex)["positions"]
  assert pos.tolist() == [0, 1, 61, 62, 63] + [0, 1, 2, 3, 4, 5, 61, 62, 63] + [0, 1]


# ------------------------------------------------------------------ determinism and resumption

def test_cream_is_reproducible_and_seeded():
  ex = {"segment_ids": SEG, "positions": np.zeros(16, np.int32)}
  a = cream.CREAMPositions(max_position=1000, seed=7)
  b = cream.CREAMPositions(max_position=1000, seed=8)
  first = a.apply(3, ex)["positions"]
  np.testing.assert_array_equal(first, cream.CREAMPositions(max_position=1000, seed=7).apply(
      3, ex)["positions"])
  assert not np.array_equal(first, b.apply(3, ex)["positions"])
  assert not np.array_equal(first, a.apply(4, ex)["positions"])
  assert not np.array_equal(first, a.apply(3, ex, stream=1)["positions"])
  for lo, hi in ps.segment_bounds(SEG):  # every document drawn on its own: a head from 0 when
    assert np.all(np.diff(first[lo:hi]) >= 1) and first[lo:hi].max() < 1000  # it has 3 tokens
    assert first[lo] == 0 or hi - lo < 3


# Resuming the pipeline's iterator with these samplers: tests/test_position_samplers.py.


# ------------------------------------------------------------------ config

def test_make_sampler_builds_cream_and_endprompt():
  c = ps.make_sampler(sampler_cfg(kind="cream", cream_k=3, cream_sigma=1.5,
                                  cream_truncation="renormalize"), 32)
  assert isinstance(c, cream.CREAMPositions)
  assert (c.max_position, c.k, c.sigma, c.truncation) == (128, 3, 1.5, "renormalize")
  e = ps.make_sampler(sampler_cfg(kind="endprompt", max_position=100, endprompt_length=4,
                                  endprompt_anchor="random"), 32)
  assert isinstance(e, endprompt.EndPromptPositions)
  assert (e.max_position, e.length, e.anchor) == (100, 4, "random")
  # A config without the new fields (a run made before them) gets the defaults.
  old = ml_collections.ConfigDict(dict(kind="cream", max_position=-1, num_chunks=2, seed=0))
  assert ps.make_sampler(old, 32) == cream.CREAMPositions(max_position=128, seed=0)


@pytest.mark.parametrize("field,value,match", [
    ("kind", "creme", r"kind='creme'.*\['none', 'randomized', 'pose', 'cream', 'endprompt'\]"),
    ("cream_k", -2, r"data\.position_sampler\.cream_k must be -1"),
    ("cream_sigma", 0.0, r"data\.position_sampler\.cream_sigma must be a finite number > 0"),
    ("cream_truncation", "cut", r"cream_truncation='cut'.*\['clip', 'renormalize'\]"),
    ("endprompt_length", 0, r"data\.position_sampler\.endprompt_length must be an integer >= 1"),
    ("endprompt_anchor", "start", r"endprompt_anchor='start'.*\['end', 'random'\]"),
])
def test_bad_fields_name_themselves(field, value, match):
  with pytest.raises(ConfigError, match=match) as e:
    ps.make_sampler(sampler_cfg(**{field: value}), 32)
  assert "\n" not in str(e.value)


def test_validate_checks_the_fields_and_what_reads_them():
  c = tiny_config("unused")
  c.data.position_sampler.kind = "cream"
  c.data.position_sampler.cream_sigma = 2.0
  validate(c, 1)
  c.data.position_sampler.endprompt_length = 4  # read by endprompt only
  with pytest.raises(ConfigError, match=r"endprompt_length=4 is not read by "
                                        r"data.position_sampler.kind='cream' \(only by endprompt\)"):
    validate(c, 1)
  c.data.position_sampler.kind = "endprompt"
  c.data.position_sampler.cream_sigma = 3.0
  validate(c, 1)
  c.data.position_sampler.endprompt_length = 0
  with pytest.raises(ConfigError, match=r"data.position_sampler.endprompt_length must be"):
    validate(c, 1)
