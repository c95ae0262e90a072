"""xPos (arXiv 2212.10554) and CoPE (arXiv 2405.18719) against values computed by hand."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs import base
from configs.validate import ConfigError
from eval.perplexity import check_lengths
from models import positions
from models.attention import Attention, attention_mask
from models.positions.cope import CoPE, contextual_positions
from models.positions.rope import apply_rope, rope_inv_freq
from models.positions.xpos import XPos, apply_xpos, row_offset, xpos_max_length, xpos_zeta


def position_cfg(kind, **kw):
  fields = dict(kind=kind, rope_theta=10000.0, rotary_fraction=1.0, xpos_scale_base=512.0,
                cope_npos_max=64, per_layer=True, nope_every=0)
  fields.update(kw)  # before ConfigDict, which would refuse a value of another type
  return ml_collections.ConfigDict(fields)


DIMS = positions.Dims(num_heads=4, head_dim=16, d_model=64, num_layers=2, train_len=32)


# ------------------------------------------------------------------ xPos (arXiv 2212.10554)

def test_xpos_zeta_values():
  # Section 3.2: zeta_i = (i / (d/2) + 0.4) / 1.4 = (2i + 0.4 d) / (1.4 d).
  np.testing.assert_allclose(xpos_zeta(8), [3.2 / 11.2, 5.2 / 11.2, 7.2 / 11.2, 9.2 / 11.2], rtol=1e-6)
  d = 64
  np.testing.assert_allclose(xpos_zeta(d), [(i / (d / 2) + 0.4) / 1.4 for i in range(d // 2)], rtol=1e-6)
  assert xpos_zeta(d)[0] == pytest.approx(2 / 7) and xpos_zeta(d)[-1] < 1


@pytest.mark.parametrize("m", [0, 5, 37])
def test_xpos_matches_explicit_formula(m):
  """Half-split pair (i, i + d/2) rotated by m * theta_i and scaled by zeta_i^(+-m / scale_base)."""
  d, sb = 8, 4.0
  x = np.arange(1, d + 1, dtype=np.float32)
  inv = rope_inv_freq(d, 100.0)
  zeta = [(2 * i + 0.4 * d) / (1.4 * d) for i in range(d // 2)]
  expected_q, expected_k = np.empty(d), np.empty(d)
  for i in range(d // 2):
    a = m * inv[i]
    r1 = x[i] * math.cos(a) - x[i + d // 2] * math.sin(a)
    r2 = x[i + d // 2] * math.cos(a) + x[i] * math.sin(a)
    s = zeta[i] ** (m / sb)
    expected_q[i], expected_q[i + d // 2] = s * r1, s * r2
    expected_k[i], expected_k[i + d // 2] = r1 / s, r2 / s
  args = (jnp.asarray(x)[None, None, None], jnp.array([[m]]), jnp.asarray(inv), jnp.asarray(xpos_zeta(d)), sb)
  q = np.asarray(apply_xpos(*args, downscale=False))[0, 0, 0]
  k = np.asarray(apply_xpos(*args, downscale=True))[0, 0, 0]
  np.testing.assert_allclose(q, expected_q, rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(k, expected_k, rtol=2e-5, atol=1e-6)
  # The key's scale is the inverse of the query's: q * k == RoPE(x)^2 feature by feature.
  rope = np.asarray(apply_rope(args[0], args[1], args[2]))[0, 0, 0]
  np.testing.assert_allclose(q * k, rope ** 2, rtol=1e-5, atol=1e-5)


def expected_score(q, k, m, n, theta, sb):
  """sum_i zeta_i^((m - n)/sb) * <R(m theta_i) q_pair_i, R(n theta_i) k_pair_i>, by hand."""
  d = q.shape[-1]
  h = d // 2
  total = 0.0
  for i in range(h):
    phi = (n - m) * theta ** (-2 * i / d)  # q^T R(phi) k for the half-split pair (i, i + h)
    pair = (q[i] * k[i] + q[i + h] * k[i + h]) * math.cos(phi) + (q[i + h] * k[i] - q[i] * k[i + h]) * math.sin(phi)
    total += ((2 * i + 0.4 * d) / (1.4 * d)) ** ((m - n) / sb) * pair
  return total


@pytest.mark.parametrize("offset", [0, 3, 17, 250])
def test_xpos_scores_depend_only_on_relative_position(offset):
  sb = 16.0  # a short length scale, so that the decay is large over these distances
  scheme = XPos(position_cfg("xpos", xpos_scale_base=sb), DIMS, rngs=None)
  rng = np.random.default_rng(offset)
  q = rng.normal(size=16).astype(np.float32)
  k = rng.normal(size=16).astype(np.float32)

  def score(m, n):
    qm, kn = scheme.rotate(jnp.asarray(q)[None, None, None], jnp.asarray(k)[None, None, None],
                           jnp.array([[m]]), jnp.array([[n]]), layer=0)
    return float(jnp.sum(qm * kn))

  for delta in (0, 1, 5, 40):
    want = expected_score(q.astype(np.float64), k.astype(np.float64), delta, 0, 10000.0, sb)
    assert score(offset + delta, offset) == pytest.approx(score(delta, 0), abs=2e-4)
    assert score(offset + delta, offset) == pytest.approx(want, abs=2e-4)


def test_xpos_many_positions_at_once_match_pairwise_scores():
  """A [1, 6] row of arbitrary (packed-looking) positions: every q.k entry is the pair formula."""
  sb = 8.0
  scheme = XPos(position_cfg("xpos", xpos_scale_base=sb), DIMS, rngs=None)
  rng = np.random.default_rng(5)
  q = rng.normal(size=(1, 6, 1, 16)).astype(np.float32)
  k = rng.normal(size=(1, 6, 1, 16)).astype(np.float32)
  pos = np.array([[3, 4, 5, 0, 1, 2]], np.int32)
  qr, kr = scheme.rotate(jnp.asarray(q), jnp.asarray(k), jnp.asarray(pos), jnp.asarray(pos), layer=0)
  logits = np.einsum("bqhd,bkhd->bqk", np.asarray(qr), np.asarray(kr))[0]
  for i in range(6):
    for j in range(6):
      want = expected_score(q[0, i, 0].astype(np.float64), k[0, j, 0].astype(np.float64),
                            pos[0, i], pos[0, j], 10000.0, sb)
      assert logits[i, j] == pytest.approx(want, rel=1e-4, abs=1e-4)


def test_xpos_large_positions_are_centred_and_stay_finite():
  """At position 1e5 the raw key factor 3.5^(1e5/16) overflows float32; rotate centres per row."""
  sb, d = 16.0, 16
  inv, zeta = jnp.asarray(rope_inv_freq(d, 10000.0)), jnp.asarray(xpos_zeta(d))
  x = jnp.ones((1, 1, 1, d))
  raw = apply_xpos(x, jnp.array([[100000]]), inv, zeta, sb, 0, downscale=True)
  assert not bool(jnp.all(jnp.isfinite(raw)))  # why the offset is needed

  scheme = XPos(position_cfg("xpos", xpos_scale_base=sb), DIMS, rngs=None)
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 4, 1, d)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 4, 1, d)), jnp.float32)
  pos = jnp.array([[100000, 100001, 100005, 100040]], jnp.int32)
  c = int(row_offset(pos, pos)[0, 0])
  assert c == 100020
  qr, kr = scheme.rotate(q, k, pos, pos, layer=0)
  assert bool(jnp.all(jnp.isfinite(qr))) and bool(jnp.all(jnp.isfinite(kr)))
  # Per-pair norms: the rotation keeps them, the scale is zeta_i^(+-(m - c) / sb).
  h = d // 2
  norm = lambda a: np.sqrt(np.asarray(a)[..., :h] ** 2 + np.asarray(a)[..., h:] ** 2)
  m = np.asarray(pos)[0][:, None] - c
  z = np.asarray(zeta, np.float64)[None, :]
  np.testing.assert_allclose(norm(qr)[0, :, 0], norm(q)[0, :, 0] * z ** (m / sb), rtol=1e-4)
  np.testing.assert_allclose(norm(kr)[0, :, 0], norm(k)[0, :, 0] * z ** (-m / sb), rtol=1e-4)
  # Products: the same function of m - n as near 0.
  logits = np.einsum("bqhd,bkhd->bqk", np.asarray(qr), np.asarray(kr))[0]
  p = np.asarray(pos)[0]
  for i in range(4):
    for j in range(i + 1):
      want = expected_score(np.asarray(q, np.float64)[0, i, 0], np.asarray(k, np.float64)[0, j, 0],
                            p[i] - p[0], p[j] - p[0], 10000.0, sb)
      assert logits[i, j] == pytest.approx(want, abs=2e-4)


def test_xpos_max_position_is_the_float32_safe_length():
  scheme = XPos(position_cfg("xpos"), positions.Dims(1, 2, 2, 1, 32), rngs=None)
  L = scheme.max_position
  assert L == xpos_max_length(512.0) == int(2 * 64 * 512 / math.log(3.5))
  check_lengths([L], L, "xpos")
  with pytest.raises(ConfigError):
    check_lengths([L + 1], L, "xpos")
  # A full evaluation window of L tokens (positions 0..L-1) stays finite and nonzero.
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, L, 1, 2)) + 3.0, jnp.float32)
  pos = jnp.arange(L, dtype=jnp.int32)[None]
  qr, kr = scheme.rotate(q, q, pos, pos, layer=0)
  assert bool(jnp.all(jnp.isfinite(qr))) and bool(jnp.all(jnp.isfinite(kr)))
  assert bool(jnp.all(qr != 0)) and bool(jnp.all(kr != 0))
  # q.k at equal positions is |q|^2 (zeta^0), at both ends of the window.
  for t in (0, L - 1):
    assert float(jnp.sum(qr[0, t] * kr[0, t])) == pytest.approx(float(jnp.sum(q[0, t] ** 2)), rel=1e-4)


def test_xpos_partial_rotation_and_nope_layers():
  """(Untouched features under partial rotation: tests/test_positions.py, for rope and xpos.)"""
  cfg = position_cfg("xpos", rotary_fraction=0.25, xpos_scale_base=4.0, nope_every=2)
  scheme = XPos(cfg, DIMS, rngs=None)
  np.testing.assert_allclose(scheme.zeta, [1.6 / 5.6, 3.6 / 5.6], rtol=1e-6)  # d = d_rot = 4
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(2, 5, 4, 16)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(2, 5, 4, 16)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5)) + 3
  # nope_every=2: layers 1, 3, ... are left alone.
  q3, k3 = scheme.rotate(q, k, pos, pos, layer=1)
  assert q3 is q and k3 is k


def test_xpos_bfloat16_keeps_dtype():
  scheme = XPos(position_cfg("xpos"), DIMS, rngs=None)
  q = jnp.ones((1, 3, 4, 16), jnp.bfloat16)
  pos = jnp.array([[0, 1, 2]])
  q2, k2 = scheme.rotate(q, q, pos, pos, layer=0)
  assert q2.dtype == jnp.bfloat16 and k2.dtype == jnp.bfloat16


@pytest.mark.parametrize("field,value", [("xpos_scale_base", 0.0), ("xpos_scale_base", -3.0),
                                         ("xpos_scale_base", "512"), ("rotary_fraction", 0.0),
                                         ("rope_theta", 0.5), ("nope_every", -1)])
def test_xpos_bad_fields(field, value):
  with pytest.raises(ConfigError, match=field):
    XPos.check_config(position_cfg("xpos", **{field: value}), DIMS)


# ------------------------------------------------------------------ CoPE (arXiv 2405.18719)

CD = positions.Dims(num_heads=2, head_dim=4, d_model=8, num_layers=3, train_len=32)


def cope(npos_max=8, per_layer=True, table=None, layer=0):
  scheme = CoPE(position_cfg("cope", cope_npos_max=npos_max, per_layer=per_layer), CD, rngs=nnx.Rngs(0))
  if table is not None:
    full = np.zeros(scheme.pos_emb[...].shape, np.float32)
    full[layer] = table
    scheme.pos_emb.set_value(jnp.asarray(full))
  return scheme


def interp(z, p):
  """The paper's interpolation, by hand: (p - floor p) z[ceil p] + (1 - p + floor p) z[floor p]."""
  lo, hi = math.floor(p), math.ceil(p)
  return (p - lo) * z[hi] + (1 - p + lo) * z[lo]


def test_cope_saturated_gates_count_tokens_and_clamp():
  """q.k huge -> every gate is 1 -> p_ij = i - j + 1 (the query itself counts), clamped at npos-1."""
  n, npos = 6, 4
  rng = np.random.default_rng(0)
  table = rng.normal(size=(npos, 4)).astype(np.float32)
  q = np.full((1, n, 2, 4), 10.0, np.float32)
  q[0, :, 1] = rng.normal(size=(n, 4)) + 20.0  # another head: all q.k still huge
  k = np.full((1, n, 2, 4), 10.0, np.float32)
  scheme = cope(npos, table=table)
  bias = np.asarray(scheme.bias(None, None, 0, q=jnp.asarray(q), k=jnp.asarray(k)))
  assert bias.shape == (1, 2, n, n) and bias.dtype == np.float32
  for h in range(2):
    for i in range(n):
      z = q[0, i, h] @ table.T  # z_i[p] = q_i . e[p]
      for j in range(i + 1):
        p = min(i - j + 1, npos - 1)
        assert bias[0, h, i, j] == pytest.approx(z[p] / 2.0, rel=1e-5, abs=1e-5)  # / sqrt(4)
  # The positions themselves.
  gates = jnp.asarray(np.tril(np.ones((n, n), np.float32)))
  np.testing.assert_array_equal(np.asarray(contextual_positions(gates, 100)),
                                np.tril(np.arange(n)[:, None] - np.arange(n)[None, :] + 1))


def test_cope_fractional_positions_interpolate_embedding_rows():
  """Gates sigmoid(ln 3) = 3/4 -> p_ij = 0.75 (i - j + 1): 0.75, 1.5, 2.25, 3.0."""
  n = 4
  rng = np.random.default_rng(1)
  table = rng.normal(size=(8, 4)).astype(np.float32)
  q = np.zeros((1, n, 2, 4), np.float32)
  q[..., 0] = 1.0
  q[..., 1:] = rng.normal(size=(1, n, 2, 3))  # orthogonal to k: changes z, not the gates
  k = np.zeros((1, n, 2, 4), np.float32)
  k[..., 0] = 2.0 * math.log(3.0)  # q.k / sqrt(4) = ln 3
  bias = np.asarray(cope(8, table=table).bias(None, None, 0, q=jnp.asarray(q), k=jnp.asarray(k)))
  for h in range(2):
    for i in range(n):
      z = q[0, i, h].astype(np.float64) @ table.T.astype(np.float64)
      for j in range(i + 1):
        p = 0.75 * (i - j + 1)
        assert bias[0, h, i, j] == pytest.approx(interp(z, p) / 2.0, rel=1e-4, abs=1e-5)
  # Spot values: p = 0.75 is 1/4 of row 0 and 3/4 of row 1.
  z = q[0, 0, 0] @ table.T
  assert bias[0, 0, 0, 0] == pytest.approx((0.25 * z[0] + 0.75 * z[1]) / 2.0, rel=1e-4)


def test_cope_masked_keys_do_not_count():
  """Two packed documents: the second one's positions restart, as if it were alone."""
  rng = np.random.default_rng(2)
  table = rng.normal(size=(8, 4)).astype(np.float32)
  q = rng.normal(size=(1, 7, 2, 4)).astype(np.float32)
  k = rng.normal(size=(1, 7, 2, 4)).astype(np.float32)
  seg = jnp.array([[1, 1, 1, 2, 2, 2, 2]])
  scheme = cope(8, table=table)
  packed = np.asarray(scheme.bias(None, None, 0, q=jnp.asarray(q), k=jnp.asarray(k),
                                  mask=attention_mask(7, 7, seg, seg)))
  alone = np.asarray(scheme.bias(None, None, 0, q=jnp.asarray(q[:, 3:]), k=jnp.asarray(k[:, 3:])))
  np.testing.assert_allclose(packed[:, :, 3:, 3:], alone, rtol=1e-5, atol=1e-6)
  # And by hand for one entry: query 5, key 3 counts keys 3..5 only.
  g = lambda i, j: 1 / (1 + math.exp(-float(q[0, i, 0] @ k[0, j, 0]) / 2.0))
  p = g(5, 3) + g(5, 4) + g(5, 5)
  assert packed[0, 0, 5, 3] == pytest.approx(interp(q[0, 5, 0] @ table.T, p) / 2.0, rel=1e-4, abs=1e-5)


def test_cope_query_chunk_sees_the_same_positions():
  """bias on queries [c0, c1) with keys [0, c1) equals the full bias's rows (attention.py's chunks)."""
  rng = np.random.default_rng(3)
  q = jnp.asarray(rng.normal(size=(2, 9, 2, 4)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(2, 9, 2, 4)), jnp.float32)
  scheme = cope(4, table=rng.normal(size=(4, 4)))
  full = np.asarray(scheme.bias(None, None, 0, q=q, k=k))
  part = np.asarray(scheme.bias(None, None, 0, q=q[:, 4:7], k=k[:, :7], mask=attention_mask(3, 7)))
  for i in range(3):
    np.testing.assert_allclose(part[:, :, i, :4 + i + 1], full[:, :, 4 + i, :4 + i + 1], rtol=1e-5, atol=1e-6)


def test_cope_gradients_reach_embedding_and_gates():
  rng = np.random.default_rng(4)
  npos = 8
  scheme = cope(npos, table=rng.normal(size=(npos, 4)))
  q = jnp.asarray(rng.normal(size=(1, 4, 2, 4)) * 0.3, jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 4, 2, 4)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(1, 2, 4, 4)), jnp.float32)
  mask = attention_mask(4, 4)
  graphdef, params = nnx.split(scheme)

  def loss(params, q, k):
    out = nnx.merge(graphdef, params).bias(None, None, 0, q=q, k=k, mask=mask)
    return jnp.sum(jnp.where(mask, out, 0.0) * w)

  g_params, g_q, g_k = jax.grad(loss, argnums=(0, 1, 2))(params, q, k)
  g = np.asarray(nnx.to_pure_dict(g_params)["pos_emb"])
  assert g.shape == (3, npos, 4)
  # The rows the interpolation touches with a nonzero weight, by hand.
  qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
  gates = np.tril(1 / (1 + np.exp(-np.einsum("qhd,khd->hqk", qn[0], kn[0]) / 2.0)))
  p = np.flip(np.cumsum(np.flip(gates, -1), -1), -1)
  used = set()
  for i in range(4):
    for j in range(i + 1):
      for h in range(2):
        lo, w = math.floor(p[h, i, j]), p[h, i, j] - math.floor(p[h, i, j])
        used |= ({lo} if w < 1 else set()) | ({math.ceil(p[h, i, j])} if w > 0 else set())
  assert used and max(used) < npos
  for r in range(npos):
    assert (np.abs(g[0, r]).sum() > 0) == (r in used), r
  assert np.all(g[1:] == 0)  # the other layers' tables
  assert np.all(np.isfinite(np.asarray(g_q))) and float(jnp.abs(g_k).sum()) > 0  # k: via the gates


def test_cope_per_layer_tables():
  rng = np.random.default_rng(5)
  q = jnp.asarray(rng.normal(size=(1, 3, 2, 4)), jnp.float32)
  shared = CoPE(position_cfg("cope", cope_npos_max=4, per_layer=False), CD, rngs=nnx.Rngs(0))
  assert shared.pos_emb[...].shape == (1, 4, 4)
  own = cope(4, table=rng.normal(size=(4, 4)), layer=2)
  assert own.pos_emb[...].shape == (3, 4, 4)
  assert np.all(np.asarray(own.bias(None, None, 0, q=q, k=q)) == 0)  # layer 0's table: zero init
  assert not np.allclose(np.asarray(own.bias(None, None, 2, q=q, k=q)), 0)


def test_cope_needs_q_and_k():
  with pytest.raises(ValueError, match="q="):
    cope().bias(jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2), jnp.int32), 0)


@pytest.mark.parametrize("field,value", [("cope_npos_max", 1), ("cope_npos_max", 0),
                                         ("cope_npos_max", 8.5), ("per_layer", "yes")])
def test_cope_bad_fields(field, value):
  with pytest.raises(ConfigError, match=field):
    CoPE.check_config(position_cfg("cope", **{field: value}), CD)


# ------------------------------------------------------------------ both, inside attention

def test_base_config_fields_validate():
  cfg = base.get_config().model.position
  XPos.check_config(cfg, DIMS)
  CoPE.check_config(cfg, DIMS)


def make_scheme(kind):
  if kind == "xpos":
    return XPos(position_cfg("xpos", xpos_scale_base=8.0), DIMS, rngs=None)
  scheme = CoPE(position_cfg("cope", cope_npos_max=6), DIMS, rngs=nnx.Rngs(0))
  scheme.pos_emb.set_value(jax.random.normal(jax.random.key(0), scheme.pos_emb[...].shape))
  return scheme


@pytest.mark.parametrize("kind", ["xpos", "cope"])
def test_attention_chunks_causality_and_documents(kind):
  scheme = make_scheme(kind)
  full = Attention(DIMS, 1, dtype=jnp.float32, rngs=nnx.Rngs(1))
  chunked = Attention(DIMS, 1, dtype=jnp.float32, rngs=nnx.Rngs(1), chunk=8)
  rng = np.random.default_rng(6)
  x = jnp.asarray(rng.normal(size=(2, 21, 64)), jnp.float32)
  pos = jnp.asarray(np.concatenate([np.arange(6), np.arange(15)])[None].repeat(2, 0), jnp.int32)
  seg = jnp.asarray(np.concatenate([np.ones(6), 2 * np.ones(15)])[None].repeat(2, 0), jnp.int32)
  a = np.asarray(full(x, pos, seg, scheme))
  np.testing.assert_allclose(np.asarray(chunked(x, pos, seg, scheme)), a, rtol=0, atol=2e-5)
  # Causality: changing inputs after t leaves outputs <= t unchanged.
  t = 11
  x2 = x.at[:, t + 1:].set(jnp.asarray(rng.normal(size=(2, 21 - t - 1, 64)), jnp.float32))
  np.testing.assert_allclose(np.asarray(full(x2, pos, seg, scheme))[:, :t + 1], a[:, :t + 1], rtol=0, atol=1e-6)
  # Documents: the second document's outputs equal those of the document alone.
  alone = np.asarray(full(x[:, 6:], pos[:, 6:], seg[:, 6:], scheme))
  np.testing.assert_allclose(a[:, 6:], alone, rtol=0, atol=2e-5)
