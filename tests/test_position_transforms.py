"""Self-Extend, STRING and LM-Infinite: the distances each pair sees, against the papers'
definitions, and attention under a transform against an explicit per-pair computation."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs.validate import ConfigError
from conftest import tiny_config
from models import extensions, positions
from models.attention import Attention, dot_product_attention
from models.position_transforms import PositionTransform, check_config
from models.positions.alibi import alibi_slopes

L = 16  # train_len


def effective(transform, n):
  """(distance seen int [n, n], allowed bool [n, n]) for one row of positions 0..n-1."""
  pos = jnp.arange(n, dtype=jnp.int32)[None]
  d = (pos[:, :, None] - pos[:, None, :])[:, None]
  kp = pos[:, None, None, :]
  seen = np.full((n, n), -1)
  allowed = np.zeros((n, n), bool)
  for br in transform.branches(pos, pos):
    region = np.ones((n, n), bool) if br.region is None else np.asarray(br.region(d, kp))[0, 0]
    dist = np.asarray(br.q_positions)[0][:, None] - np.asarray(br.k_positions)[0][None, :]
    assert not (allowed & region).any(), "regions overlap"
    seen = np.where(region, dist, seen)
    allowed |= region
  causal = np.tril(np.ones((n, n), bool))
  return np.where(causal, seen, -1), allowed & causal


def cfg(**fields):
  c = ml_collections.ConfigDict({"kind": "rope"})
  for k, v in fields.items():
    c[k] = v
  return c


def test_self_extend_distances_follow_jin_et_al():
  g, w, n = 3, 5, 40
  t = PositionTransform.from_config(cfg(position_transform="self_extend", self_extend_group=g,
                                        self_extend_window=w), L)
  seen, allowed = effective(t, n)
  i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
  expected = np.where(i - j < w, i - j, i // g + w - w // g - j // g)
  causal = i >= j
  np.testing.assert_array_equal(seen[causal], expected[causal])
  assert allowed[causal].all()
  # Grouped distances continue the neighbour ones (within the rounding of floor) and grow G
  # times slower: the largest is (n-1)//G + W - W//G.
  assert seen.max() == (n - 1) // g + w - w // g


def test_string_shifts_distances_beyond_s():
  s, w, n = 9, 3, 30
  t = PositionTransform.from_config(cfg(position_transform="string", string_shift=s,
                                        string_window=w), L)
  seen, allowed = effective(t, n)
  i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
  d = i - j
  expected = np.where(d < s, d, d - s + w)
  np.testing.assert_array_equal(seen[d >= 0], expected[d >= 0])
  assert allowed[d >= 0].all()


def test_string_automatic_shift_minimises_the_largest_distance():
  """S = max(L // 3, ceil((n + W) / 2)): distances stay below L up to n = 2L - W - 1."""
  w = max(1, L // 16)
  for n in (L // 2, L, 3 * L // 2, 2 * L - w - 1, 8 * L):
    t = PositionTransform.from_config(cfg(position_transform="string"), L)
    seen, _ = effective(t, n)
    s = max(L // 3, -(-(n + w) // 2))
    assert seen.max() == max(d if d < s else d - s + w for d in range(n))
    best = min(max(min(n - 1, s2 - 1), n - 1 - s2 + w) for s2 in range(max(w, L // 3), n + 1))
    assert seen.max() == best
    assert (seen.max() < L) == (n <= 2 * L - w - 1)


def test_lm_infinite_lambda_mask_and_distance_ceiling():
  n_global, n_local, d_max, n = 2, 6, 7, 25
  t = PositionTransform.from_config(cfg(position_transform="lm_infinite",
                                        lm_infinite_global=n_global, lm_infinite_window=n_local,
                                        lm_infinite_distance=d_max), L)
  seen, allowed = effective(t, n)
  i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
  d = i - j
  expected_allowed = (d >= 0) & ((d < n_local) | (j < n_global))
  np.testing.assert_array_equal(allowed, expected_allowed)
  np.testing.assert_array_equal(seen[allowed], np.where(d < n_local, d, d_max)[allowed])


@pytest.mark.parametrize("transform", ["self_extend", "string", "lm_infinite", "streaming_llm",
                                       "blockwise", "dca"])
def test_alibi_attention_under_a_transform_equals_explicit_bias(transform):
  """ALiBi's bias is -slope * distance, so the transformed attention must equal plain attention
  with bias -slope * (distance seen) and the transform's mask."""
  c = tiny_config("unused", "alibi")
  c.data.train_len = L
  c.model.position.position_transform = transform
  c.model.position.self_extend_group = 2
  c.model.position.string_shift = 6
  c.model.position.lm_infinite_global = 2
  c.model.position.streaming_llm_sinks, c.model.position.streaming_llm_window = 2, 5
  c.model.position.blockwise_block = 7
  c.model.position.dca_chunk_size, c.model.position.dca_local_window = 9, 2
  dims = positions.Dims.from_config(c)
  scheme = positions.build(c.model.position, dims, rngs=nnx.Rngs(0))
  t = PositionTransform.from_config(c.model.position, L)
  attn = Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1), chunk=8, transform=t)
  n = 40
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, n, dims.d_model)), jnp.float32)
  pos = jnp.arange(n, dtype=jnp.int32)[None]
  seg = jnp.ones((1, n), jnp.int32)
  got = attn(x, pos, seg, scheme)

  seen, allowed = effective(t, n)
  slopes = alibi_slopes(dims.num_heads)
  bias = -slopes[:, None, None] * np.maximum(seen, 0)[None]
  proj = lambda w: jnp.einsum("bsd,dhk->bshk", x, w[...])
  out = dot_product_attention(proj(attn.wq), proj(attn.wk), proj(attn.wv),
                              bias=jnp.asarray(bias[None], jnp.float32),
                              mask=jnp.asarray(allowed)[None, None])
  want = jnp.einsum("bshk,hkd->bsd", out, attn.wo[...])
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_relative_kinds_are_registered_kinds():
  assert set(extensions.relative_kinds()) <= set(positions.REGISTRY)
  for kind in extensions.relative_kinds():
    extensions.apply_extension(tiny_config("unused", kind), "string")


def test_apply_extension_sets_the_transform_and_refuses_misfits():
  c = tiny_config("unused", "alibi")
  out = extensions.apply_extension(c, "self_extend", 4.0, window=8)
  assert out.model.position.position_transform == "self_extend"
  assert out.model.position.self_extend_group == 4 and out.model.position.self_extend_window == 8
  assert c.model.position.position_transform == "none"  # the input is not modified
  with pytest.raises(ConfigError, match="integer >= 1"):
    extensions.apply_extension(c, "self_extend", 2.5)
  with pytest.raises(ConfigError, match="eval.window"):
    extensions.apply_extension(c, "string", 1.0, window=0)
  with pytest.raises(ConfigError, match="applies to model.position.kind"):
    extensions.apply_extension(tiny_config("unused", "learned"), "string")
  with pytest.raises(ConfigError, match="applies to model.position.kind"):
    extensions.apply_extension(tiny_config("unused", "cope"), "lm_infinite")
  nope = extensions.apply_extension(tiny_config("unused", "none"), "lm_infinite")
  assert nope.model.position.position_transform == "lm_infinite"


@pytest.mark.parametrize("field,value,match", [
    ("position_transform", "rerope", "position_transform must be one of"),
    ("self_extend_group", 0, "self_extend_group"),
    ("string_window", 0, "string_window"),
    ("string_shift", 2, "must be >= string_window"),
    ("lm_infinite_global", -1, "lm_infinite_global"),
])
def test_bad_transform_fields(field, value, match):
  kind = {"self_extend_group": "self_extend", "string_window": "string",
          "string_shift": "string", "lm_infinite_global": "lm_infinite"}.get(field, "none")
  c = cfg(position_transform=kind, string_window=4)
  c[field] = value
  with pytest.raises(ConfigError, match=match):
    check_config(c, L)


# ------------------------------------------------------------------ STRING's attention factor

def test_string_attention_factor_is_the_authors_value_on_q_and_k():
  """HKUNLP/STRING string_for_llama.py (replace_with_string): attention_factor = 0.1 ln 2 + 1 =
  1.0693147 (by hand), multiplying cos and sin, i.e. q and k, of every position (RoPE only)."""
  from models.position_transforms import STRING_ATTENTION_FACTOR, string_attention_scale
  assert STRING_ATTENTION_FACTOR == pytest.approx(1.0693147180559945, rel=1e-15)
  dims = positions.Dims(num_heads=2, head_dim=8, d_model=16, num_layers=1, train_len=L)
  base = dict(rope_theta=1e4, rotary_fraction=1.0, position_transform="string")
  assert string_attention_scale(cfg(**base)) == 1.0  # the default: off
  assert string_attention_scale(cfg(**base, string_attention_factor=-1.0)) == STRING_ATTENTION_FACTOR
  assert string_attention_scale(cfg(**base, string_attention_factor=1.2)) == 1.2
  # Read under the string transform only (eval.extension=string sets it).
  assert string_attention_scale(cfg(rope_theta=1e4, rotary_fraction=1.0,
                                    string_attention_factor=-1.0)) == 1.0
  plain = positions.build(cfg(**base), dims)
  scaled = positions.build(cfg(**base, string_attention_factor=-1.0), dims)
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(1, 7, 2, 8)), jnp.float32) for _ in range(2))
  pos = jnp.arange(7, dtype=jnp.int32)[None]
  for got, want in zip(scaled.rotate(q, k, pos, pos, 0), plain.rotate(q, k, pos, pos, 0)):
    np.testing.assert_allclose(got, want * STRING_ATTENTION_FACTOR, rtol=1e-6)
  assert scaled.kernel_spec(0, pos, pos).qk_scale == STRING_ATTENTION_FACTOR


def test_string_attention_factor_through_the_extension_and_refusals():
  c = tiny_config("unused", "rope")
  c.model.position.string_attention_factor = -1.0
  out = extensions.apply_extension(c, "string")
  out.eval.extension = "string"
  assert extensions.extension_header(out)["extension_params"] == {
      "string_shift": -1, "string_attention_factor": -1.0}
  assert positions.build(out.model.position, positions.Dims.from_config(out)).string_scale == \
      pytest.approx(1.0693147180559945, rel=1e-15)
  run = tiny_config("unused", "rope").model.position
  assert extensions.check_param_overrides(run, c.model.position, ["string"]) == {
      "string": {"string_attention_factor": -1.0}}
  a = tiny_config("unused", "alibi")
  a.model.position.string_attention_factor = -1.0
  with pytest.raises(ConfigError, match=r"model\.position\.string_attention_factor=-1\.0 scales "
                                        r"RoPE's q and k and applies to the kinds \['rope', "
                                        r"'p_rope', 'hope', 'resonance_rope'\] only; got "
                                        r"kind='alibi'") as e:
    extensions.apply_extension(a, "string")
  assert "\n" not in str(e.value)
  with pytest.raises(ConfigError, match=r"model\.position\.string_attention_factor must be 1 "
                                        r"\(off\), -1 \(STRING's 0\.1 ln 2 \+ 1\) or a number > 0"):
    check_config(cfg(string_attention_factor=0.0), L)


def test_streaming_llm_sinks_sit_at_their_cache_places():
  """StreamingLLM (Xiao et al., arXiv 2309.17453, Sec. 3.2), n_sink = 2, W = 3: the table of
  distances written out by hand from the rolling cache [sink 0, sink 1, 3 most recent], positions
  by place in the cache (-1: not in the cache)."""
  t = PositionTransform.from_config(cfg(position_transform="streaming_llm",
                                        streaming_llm_sinks=2, streaming_llm_window=3), L)
  seen, allowed = effective(t, 8)
  want = np.array([[0, -1, -1, -1, -1, -1, -1, -1],
                   [1, 0, -1, -1, -1, -1, -1, -1],
                   [2, 1, 0, -1, -1, -1, -1, -1],
                   [3, 2, 1, 0, -1, -1, -1, -1],  # cache [0 1 | 1 2 3]: not full yet
                   [4, 3, 2, 1, 0, -1, -1, -1],  # [0 1 | 2 3 4]: full, query at place 4
                   [4, 3, -1, 2, 1, 0, -1, -1],  # [0 1 | 3 4 5]: token 2 evicted
                   [4, 3, -1, -1, 2, 1, 0, -1],
                   [4, 3, -1, -1, -1, 2, 1, 0]])
  np.testing.assert_array_equal(np.where(allowed, seen, -1), want)
  # The default window keeps the cache at train_len: every distance below L, at any length.
  seen, allowed = effective(PositionTransform.from_config(
      cfg(position_transform="streaming_llm"), L), 5 * L)
  assert seen[allowed].max() == L - 1 and allowed.sum(axis=1)[-1] == L
  with pytest.raises(ConfigError, match="streaming_llm_sinks must be an integer >= 0"):
    check_config(cfg(position_transform="streaming_llm", streaming_llm_sinks=-1), L)
  nope = extensions.apply_extension(tiny_config("unused", "none"), "streaming_llm", window=6)
  assert (nope.model.position.position_transform, nope.model.position.streaming_llm_window) == (
      "streaming_llm", 6)


def test_alibi_interpolation_by_the_papers_window_rule():
  """Al-Khateeb et al. (arXiv 2310.13017): for a window of l > L tokens, every query's slopes
  times L / l (alibi_interpolation_rule="window"; the default rule scales per query, L / (i + 1)).
  Attention under the transform equals plain attention with bias -m (L / l) (i - j)."""
  c = tiny_config("unused", "alibi")
  c.data.train_len = L
  c.model.position.alibi_interpolation_rule = "window"
  out = extensions.apply_extension(c, "alibi_interpolation")
  pos_cfg = out.model.position
  assert (pos_cfg.alibi_interpolation, pos_cfg.position_transform) == (True, "window_interpolation")
  dims = positions.Dims.from_config(out)
  scheme = positions.build(pos_cfg, dims, rngs=nnx.Rngs(0))
  assert scheme.interpolation_len == 0  # the per-query rule is off: the transform scales
  t = PositionTransform.from_config(pos_cfg, L)
  attn = Attention(dims, 0, dtype=jnp.float32, rngs=nnx.Rngs(1), chunk=8, transform=t)
  n = 40
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, n, dims.d_model)), jnp.float32)
  pos = jnp.arange(n, dtype=jnp.int32)[None]
  got = attn(x, pos, jnp.ones((1, n), jnp.int32), scheme)
  i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
  bias = -alibi_slopes(dims.num_heads)[:, None, None] * (L / n) * (i - j)[None]
  proj = lambda w: jnp.einsum("bsd,dhk->bshk", x, w[...])  # noqa: E731
  want = dot_product_attention(proj(attn.wq), proj(attn.wk), proj(attn.wv),
                               bias=jnp.asarray(bias[None], jnp.float32),
                               mask=jnp.asarray(i >= j)[None, None])
  want = jnp.einsum("bshk,hkd->bsd", want, attn.wo[...])
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
  with pytest.raises(ConfigError, match="alibi_interpolation_rule must be one of"):
    bad = tiny_config("unused", "alibi").model.position
    bad.alibi_interpolation_rule = "row"
    positions.build(bad, dims, check_only=True)
  with pytest.raises(ConfigError, match="applies to kind='alibi' only"):
    check_config(cfg(position_transform="window_interpolation"), L)


def test_blockwise_causal_attention_sees_its_block_and_the_one_before():
  """xPos / LEX blockwise causal attention (arXiv 2212.10554, Sec. 3.3), w = 3: query i sees key j
  iff floor(j / 3) >= floor(i / 3) - 1 (and j <= i); distances unchanged; default w = L // 2."""
  t = PositionTransform.from_config(cfg(position_transform="blockwise", blockwise_block=3), L)
  seen, allowed = effective(t, 10)
  i, j = np.meshgrid(np.arange(10), np.arange(10), indexing="ij")
  np.testing.assert_array_equal(allowed, (j <= i) & (j // 3 >= i // 3 - 1))
  np.testing.assert_array_equal(seen[allowed], (i - j)[allowed])
  assert allowed[9].tolist() == [False] * 6 + [True] * 4  # block 3 sees blocks 2 and 3 (6..9)
  assert PositionTransform.from_config(cfg(position_transform="blockwise"), L).window == L // 2
  xpos = extensions.apply_extension(tiny_config("unused", "xpos"), "blockwise", window=5)
  assert (xpos.model.position.position_transform, xpos.model.position.blockwise_block) == (
      "blockwise", 5)


def test_dual_chunk_attention_distances_follow_the_released_code():
  """DCA (arXiv 2402.17463; HKUNLP/ChunkLlama), S = 6, w = 2, so chunks of c = 4 tokens and keys
  at j mod 4. Query 9 (chunk 2, index 1), written out: keys 8, 9 intra (query at 1: distances
  1, 0); keys 4..7 successive (query at min(1 + 4, 6) = 5: 5, 4, 3, 2); keys 0..3 inter (query
  at min(2 c - 1, S) = 6: 6, 5, 4, 3). Every row against the formulas; defaults S = 3L/4, w = L/16."""
  t = PositionTransform.from_config(cfg(position_transform="dca", dca_chunk_size=6,
                                        dca_local_window=2), L)
  seen, allowed = effective(t, 14)
  assert seen[9, :10].tolist() == [6, 5, 4, 3, 5, 4, 3, 2, 1, 0]
  i, j = np.meshgrid(np.arange(14), np.arange(14), indexing="ij")
  gap = i // 4 - j // 4
  want = np.where(gap == 0, i % 4 - j % 4,
                  np.where(gap == 1, np.minimum(i % 4 + 4, 6) - j % 4, 6 - j % 4))
  np.testing.assert_array_equal(seen[j <= i], want[j <= i])
  assert allowed[j <= i].all() and seen.max() <= 6
  default = PositionTransform.from_config(cfg(position_transform="dca"), L)
  assert (default.shift, default.window) == (12, 1)
  with pytest.raises(ConfigError, match="dca_local_window .* must be below dca_chunk_size"):
    check_config(cfg(position_transform="dca", dca_chunk_size=4, dca_local_window=4), L)
