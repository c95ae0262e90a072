"""FoPE (arXiv 2412.17739) against its definition written out pair by pair."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from configs.errors import ConfigError
from models import positions
from tests.conftest import position_config
from models.positions.fope import FoPE, fope_coefficients, fope_frequencies

DIMS = positions.Dims(num_heads=2, head_dim=16, d_model=32, num_layers=2, train_len=64)


def fope_cfg(**kw):
  return position_config("fope", **kw)


def test_the_floor_frequencies_are_removed():
  # w_m = 10000^(-m/8), m = 0..7; 2 pi / 64 = 0.098: w_0..w_3 (1, 0.316, 0.1, 0.0316) -> 3 kept.
  freqs = fope_frequencies(16, 10000.0, 64)
  np.testing.assert_allclose(freqs, [1.0, 10000 ** -0.125, 10000 ** -0.25], rtol=1e-6)
  assert np.all(freqs >= 2 * math.pi / 64)
  scheme = FoPE(fope_cfg(), DIMS, rngs=None)
  assert scheme.num_pairs == 3 and scheme.coef_shape == (2, 3, 3)  # P = min(M', D/4 = 4)
  wide = FoPE(fope_cfg(fope_train_len=100000), DIMS, rngs=None)
  assert wide.num_pairs == 4 and wide.coef_shape == (2, 8, 4)  # P = D/4 < M' = 8: step eye


def test_coefficients_are_torch_xavier_normal_plus_the_step_eye():
  rng = np.random.default_rng(0)
  coef = fope_coefficients(16, 40, 10, 0.3, rng)
  eye = np.zeros((40, 10))
  for d in range(10):
    eye[d * 4, d] = 1.0  # step = ceil(40 / 10)
  noise = coef - eye
  std = 0.3 * math.sqrt(2 / (40 * 10 + 16 * 10))  # torch's fans of a [16, 40, 10] tensor
  assert abs(noise.std() / std - 1) < 0.05 and abs(noise.mean()) < 0.05 * std


@pytest.mark.parametrize("normalize", ["none", "column_sum"])
def test_fope_rotation_is_the_fourier_series(normalize):
  """q' pair d: (q1 c_d - q2 s_d, q2 c_d + q1 s_d), c_d(t) = sum_m cos(w_m t) C[h,m,d] (the
  released code) or that / sum_m C[h,m,d] (the listing), s alike with S, pairs >= P with
  c = s = 1; the same seed gives the same C, S."""
  scheme = FoPE(fope_cfg(fope_seed=3, fope_normalize=normalize), DIMS, rngs=None)
  # C then S drawn from the seed as the authors' code draws them (independently of
  # fope_coefficients): xavier-normal [2 heads, 3 frequencies, 3 pairs], std = 0.3 sqrt(2 / (9 +
  # 6)), plus the eye (M' = P: 1 at [m, m])
  rng = np.random.default_rng(3)
  cos_c, sin_c = (rng.normal(0.0, 1.0, (2, 3, 3)) * 0.3 * math.sqrt(2 / 15) + np.eye(3)
                  for _ in range(2))
  freqs = fope_frequencies(16, 10000.0, 64)
  q = np.random.default_rng(1).normal(size=(1, 3, 2, 16)).astype(np.float32)
  pos = np.array([[0, 5, 700]], np.int32)
  got, _ = scheme.rotate(jnp.asarray(q), jnp.asarray(q), jnp.asarray(pos), jnp.asarray(pos), 0)
  got = np.asarray(got)
  for t in range(3):
    for h in range(2):
      for d in range(8):
        if d < 3:
          norm_c, norm_s = ((cos_c[h, :, d].sum(), sin_c[h, :, d].sum())
                            if normalize == "column_sum" else (1.0, 1.0))
          c = sum(math.cos(freqs[m] * pos[0, t]) * cos_c[h, m, d] for m in range(3)) / norm_c
          s = sum(math.sin(freqs[m] * pos[0, t]) * sin_c[h, m, d] for m in range(3)) / norm_s
        else:
          c = s = 1.0
        x1, x2 = q[0, t, h, d], q[0, t, h, d + 8]
        np.testing.assert_allclose(got[0, t, h, [d, d + 8]], [x1 * c - x2 * s, x2 * c + x1 * s],
                                   rtol=2e-5, atol=2e-5)
  assert isinstance(scheme.kernel_spec(0, jnp.asarray(pos), jnp.asarray(pos)), str)


def test_with_gain_zero_the_fourier_pairs_are_rope_on_the_kept_frequencies():
  scheme = FoPE(fope_cfg(fope_init_gain=0.0), DIMS, rngs=None)
  pos = jnp.asarray([[0, 3, 9, 1000]], jnp.int32)
  c, s = (np.asarray(x) for x in scheme.cos_sin(pos))
  angles = np.asarray(pos)[0, :, None] * fope_frequencies(16, 10000.0, 64)[None]
  np.testing.assert_allclose(c[0, :, 0, :3], np.cos(angles), atol=1e-5)
  np.testing.assert_allclose(s[0, :, 1, :3], np.sin(angles), atol=1e-5)
  assert (c[..., 3:] == 1).all() and (s[..., 3:] == 1).all()


@pytest.mark.parametrize("field,value,allowed", [
    ("fope_train_len", 0, r"-1 \(data.train_len\) or a length > 0"),
    ("fope_init_gain", -0.1, "a finite number >= 0"),
    ("fope_seed", -1, "an integer >= 0"),
])
def test_bad_fope_fields_name_the_field(field, value, allowed):
  cfg = fope_cfg()
  cfg[field] = value
  with pytest.raises(ConfigError, match=f"model.position.{field} must be {allowed}"):
    positions.build(cfg, DIMS, check_only=True)


def test_every_accepted_configuration_gives_finite_bounded_factors():
  """Over head_dim x train_len x gain x normalisation (seed 0): a configuration is either refused
  in one line naming fope_init_gain, or its cos/sin factors are finite and at most MAX_FACTOR at
  every position (sampled to 4 periods of the lowest kept frequency). The column-sum listing with
  gain 0 and a column without an eye (M' = 5, P = 4: 0 / 0, the NaN the review found) is refused."""
  from models.positions.fope import MAX_FACTOR
  accepted = refused = 0
  for head_dim in (8, 32, 128):
    for train_len in (8, 128, 8192):  # 1, some, all of the frequencies kept
      for gain in (0.0, 0.3, 3.0):
        for normalize in ("none", "column_sum"):
          dims = positions.Dims(num_heads=4, head_dim=head_dim, d_model=4 * head_dim,
                                num_layers=1, train_len=train_len)
          cfg = fope_cfg(fope_init_gain=gain, fope_normalize=normalize)
          try:
            scheme = positions.build(cfg, dims)
          except ConfigError as e:
            assert str(e).startswith("model.position.fope_init_gain=") and "\n" not in str(e)
            refused += 1
            continue
          accepted += 1
          pos = jnp.arange(0, 4 * train_len, max(1, train_len // 64), dtype=jnp.int32)[None]
          for x in scheme.cos_sin(pos):
            x = np.asarray(x)
            assert np.isfinite(x).all() and np.abs(x).max() <= MAX_FACTOR + 1e-5
  assert accepted > 20 and refused > 0
  # The review's NaN: head_dim 16, train_len 1024: M' = 5 kept frequencies, P = 4 pairs, the
  # eyes at rows 0, 2, 4 (step ceil(5/4) = 2), none in column 3.
  dims = positions.Dims(num_heads=2, head_dim=16, d_model=32, num_layers=1, train_len=1024)
  assert len(fope_frequencies(16, 10000.0, 1024)) == 5
  with pytest.raises(ConfigError, match="fope_normalize='column_sum': .* sum to about 0"):
    positions.build(fope_cfg(fope_init_gain=0.0, fope_normalize="column_sum"), dims)
  positions.build(fope_cfg(fope_init_gain=0.0), dims)  # the released form: that column is 0

