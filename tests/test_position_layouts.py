"""The second position stream (data/position_layouts.py) and the schemes that read it: Abacus
(McLeish et al., arXiv 2405.17399) and BiPE (He et al., arXiv 2401.16421)."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from ml_collections import ConfigDict

from configs.errors import ConfigError
from conftest import position_config, sample_tokens, tiny_config
from data import position_layouts
from data.tokenizers import ByteTokenizer
from models import positions
from models.decoder import Decoder
from models.positions import Dims

TOKENIZER = ByteTokenizer()
DIGITS = tuple(range(ord("0"), ord("9") + 1))
SEPARATORS = tuple(sorted(map(ord, ".!?\n")))


def brute_digits(tokens, segment_ids):
  """The paper's definition, one token at a time: the 1-based place of a digit in its number."""
  out = np.zeros(len(tokens), np.int32)
  for i, t in enumerate(tokens):
    if t in DIGITS:
      same_number = i > 0 and tokens[i - 1] in DIGITS and segment_ids[i - 1] == segment_ids[i]
      out[i] = out[i - 1] + 1 if same_number else 1
  return out


def brute_segments(tokens, segment_ids):
  """BiPE's bilevel ids, one token at a time (the released code's get_bilevel_ids, with a
  restart at each document): a separator ends its segment; the next token starts one."""
  intra, inter = np.zeros(len(tokens), np.int32), np.zeros(len(tokens), np.int32)
  for i in range(1, len(tokens)):
    if segment_ids[i] != segment_ids[i - 1]:
      continue  # a new document: both 0
    if tokens[i - 1] in SEPARATORS:
      inter[i], intra[i] = inter[i - 1] + 1, 0
    else:
      inter[i], intra[i] = inter[i - 1], intra[i - 1] + 1
  return intra, inter


def random_rows(seed, rows=6, length=40):
  rng = np.random.default_rng(seed)
  tokens = sample_tokens(rng, (rows, length)).astype(np.int32)
  segment_ids = np.cumsum(rng.random((rows, length)) < 0.08, axis=1).astype(np.int32) + 1
  return tokens, segment_ids


def test_the_token_classes_of_the_byte_tokenizer():
  cfg = ConfigDict({"abacus_max_offset": 3, "bipe_separators": ".!?\n"})
  assert position_layouts.build("digits", cfg, TOKENIZER).token_ids == DIGITS
  assert position_layouts.build("segments", cfg, TOKENIZER).token_ids == SEPARATORS
  assert position_layouts.build("", cfg, TOKENIZER) is None


def test_a_hand_made_example():
  tokens = TOKENIZER.encode("x 907+15=0. Hi!\n4").astype(np.int32)[None]
  seg = np.ones_like(tokens)
  assert position_layouts.digit_positions(tokens, seg, DIGITS)[0].tolist() == [
      0, 0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0, 1]
  intra, inter = position_layouts.segment_positions(tokens, seg, SEPARATORS)
  #                       x     9 0 7 + 1 5 = 0 .   H i ! \n 4
  assert intra[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3, 0, 0]
  assert inter[0].tolist() == [0] * 11 + [1] * 4 + [2, 3]


@pytest.mark.parametrize("seed", range(3))
def test_layouts_equal_the_brute_force_definitions_in_numpy_and_jax(seed):
  tokens, seg = random_rows(seed)
  digits = position_layouts.digit_positions(tokens, seg, DIGITS)
  intra, inter = position_layouts.segment_positions(tokens, seg, SEPARATORS)
  for r in range(len(tokens)):
    np.testing.assert_array_equal(digits[r], brute_digits(tokens[r], seg[r]))
    want_intra, want_inter = brute_segments(tokens[r], seg[r])
    np.testing.assert_array_equal(intra[r], want_intra)
    np.testing.assert_array_equal(inter[r], want_inter)
  jt, js = jnp.asarray(tokens), jnp.asarray(seg)
  np.testing.assert_array_equal(position_layouts.digit_positions(jt, js, DIGITS), digits)
  for got, want in zip(position_layouts.segment_positions(jt, js, SEPARATORS), (intra, inter)):
    np.testing.assert_array_equal(got, want)


def test_training_offsets_shift_every_digit_of_a_document_alike_and_resume_exactly():
  layout = position_layouts.PositionLayout("digits", DIGITS, max_offset=7, seed=3)
  tokens, _ = random_rows(5, rows=1, length=64)
  seg = np.ones_like(tokens)  # one document
  example = {"inputs": tokens[0], "positions": np.arange(64, dtype=np.int32),
             "segment_ids": seg[0]}
  base = brute_digits(tokens[0], seg[0])
  offsets = []
  for index in range(40):
    out = layout.apply(index, example, stream=1)
    shift = out["aux_positions"][base > 0] - base[base > 0]
    assert len(set(shift.tolist())) == 1 and 0 <= shift[0] <= 7  # one k per document
    assert np.all(out["aux_positions"][base == 0] == 0)
    np.testing.assert_array_equal(out["positions"], example["positions"])
    np.testing.assert_array_equal(layout.apply(index, example, stream=1)["aux_positions"],
                                  out["aux_positions"])  # a pure function of (seed, stream, index)
    offsets.append(int(shift[0]))
  assert set(offsets) == set(range(8))  # every k in 0..max_offset is drawn


def test_each_document_of_a_packed_window_draws_its_own_offset():
  layout = position_layouts.PositionLayout("digits", DIGITS, max_offset=50, seed=0)
  tokens = TOKENIZER.encode("12+3=15" * 6).astype(np.int32)
  seg = np.repeat(np.arange(1, 7), 7).astype(np.int32)  # six packed examples
  out = layout.apply(0, {"inputs": tokens, "positions": np.arange(42, dtype=np.int32),
                         "segment_ids": seg})
  base = brute_digits(tokens, seg)
  shifts = [set((out["aux_positions"] - base)[(seg == s) & (base > 0)].tolist())
            for s in range(1, 7)]
  assert all(len(k) == 1 for k in shifts) and len(set.union(*shifts)) > 1


def test_abacus_embeds_the_digit_index_and_nothing_reaches_attention():
  model = Decoder(tiny_config("unused", "abacus"), rngs=nnx.Rngs(0))
  tokens = jnp.asarray(TOKENIZER.encode("a12+345")[None], jnp.int32)
  pos, seg = jnp.arange(7)[None], jnp.ones((1, 7), jnp.int32)
  embed_pos, attention_pos = model.position_streams(tokens, pos, seg)
  assert embed_pos[0].tolist() == [0, 1, 2, 0, 1, 2, 3] and attention_pos[0].tolist() == list(
      range(7))
  x = jnp.zeros((1, 7, model.position.table.shape[1]))
  table = np.asarray(model.position.table[...])
  np.testing.assert_array_equal(model.position.embed(x, embed_pos)[0],
                                table[[0, 1, 2, 0, 1, 2, 3]])
  big = jnp.full((1, 1), 10_000, jnp.int32)  # past the table: the last row
  np.testing.assert_array_equal(model.position.embed(x[:, :1], big)[0, 0], table[-1])


def test_bipe_reads_intra_segment_indices_in_the_embedding_and_segment_indices_in_attention():
  tokens = jnp.asarray(TOKENIZER.encode("ab. cd!\nx")[None], jnp.int32)
  pos, seg = jnp.arange(9)[None], jnp.ones((1, 9), jnp.int32)
  for kind in ("bipe_rope", "bipe_alibi"):
    # The released code's separators ('.' and newline, the default), then the sentence ends.
    for seps, embed, attention in ((None, [0, 1, 2, 0, 1, 2, 3, 4, 0], [0, 0, 0, 1, 1, 1, 1, 1, 2]),
                                   (".!?\n", [0, 1, 2, 0, 1, 2, 3, 0, 0],
                                    [0, 0, 0, 1, 1, 1, 1, 2, 3])):
      c = tiny_config("unused", kind)
      if seps is not None:
        c.model.position.bipe_separators = seps
      model = Decoder(c, rngs=nnx.Rngs(0))
      embed_pos, attention_pos = model.position_streams(tokens, pos, seg)
      assert embed_pos[0].tolist() == embed and attention_pos[0].tolist() == attention


@pytest.mark.parametrize("scale", [None, 1.0])
def test_bipe_alibi_biases_by_segment_distance(scale):
  """Eq. of BiPE-ALiBi: the bias of query i on key j is -c slope_h (n_i - n_j), 0 inside a
  segment, whatever the token distance; c = 96 by default (the released code's
  `_init_alibi_mul96`), 1 = ALiBi's slopes."""
  dims = Dims(num_heads=2, head_dim=8, d_model=16, num_layers=1, train_len=16)
  cfg = position_config("bipe_alibi")
  if scale is not None:
    cfg.bipe_alibi_slope_scale = scale
  scheme = positions.build(cfg, dims, rngs=nnx.Rngs(0))
  n = jnp.asarray([[0, 0, 0, 1, 1, 3]])
  bias = np.asarray(scheme.bias(n, n, 0))
  slopes = np.array([2.0 ** -4, 2.0 ** -8])  # ALiBi's geometric slopes 2^(-8h/H), H = 2 heads
  c = 96.0 if scale is None else scale
  want = -c * slopes[:, None, None] * (np.asarray(n[0])[:, None] - np.asarray(n[0])[None, :])
  np.testing.assert_allclose(bias[0], want, rtol=1e-6)


@pytest.mark.parametrize("kind,field,value,match", [
    ("abacus", "abacus_max_offset", -1, "abacus_max_offset must be an int >= 0"),
    ("abacus", "abacus_num_embeddings", 50, "abacus_num_embeddings must be an int >= "
                                            "abacus_max_offset \\+ 2 = 101"),
    ("bipe_rope", "bipe_separators", "", "bipe_separators must be a non-empty string"),
    ("bipe_alibi", "alibi_interpolation", True, "not defined for kind='bipe_alibi'"),
    ("bipe_alibi", "bipe_alibi_slope_scale", 0.0, "bipe_alibi_slope_scale must be a finite number > 0"),
])
def test_bad_fields_are_refused_naming_the_field(kind, field, value, match):
  dims = Dims(num_heads=2, head_dim=8, d_model=16, num_layers=1, train_len=16)
  with pytest.raises(ConfigError, match=match):
    positions.build(position_config(kind, **{field: value}), dims, check_only=True)


def test_separators_the_tokenizer_lacks_are_refused():
  cfg = ConfigDict({"abacus_max_offset": 3, "bipe_separators": "\u00a7"})  # no single-id token
  with pytest.raises(ConfigError, match="bipe_separators='\u00a7' matches no token"):
    position_layouts.build("segments", cfg, TOKENIZER)


def test_a_task_run_feeds_the_digit_indices_with_one_offset_per_example():
  """The training rows of an addition task carry aux_positions = digit index + k, one k per
  example, and the same batches again from a fresh iterator."""
  import importlib

  from data import inputs as data_inputs
  c = importlib.import_module("configs.task_addition_grid").get_config()
  c.model.position.kind = "abacus"
  c.model.position.abacus_max_offset = 20
  c.data.batch_size = 4
  layout = position_layouts.build("digits", c.model.position, TOKENIZER, seed=c.seed)
  batches = [next(data_inputs.make_inputs(c, {}, TOKENIZER, layout=layout).train)
             for _ in range(2)]
  batch = batches[0]
  np.testing.assert_array_equal(batch["aux_positions"], batches[1]["aux_positions"])
  base = position_layouts.digit_positions(batch["inputs"], batch["segment_ids"], DIGITS)
  shifts = []
  for r in range(len(base)):
    for s in np.unique(batch["segment_ids"][r]):
      digits = (batch["segment_ids"][r] == s) & (base[r] > 0)
      shift = set((batch["aux_positions"][r][digits] - base[r][digits]).tolist())
      assert len(shift) <= 1 and shift <= set(range(21))  # one k per example
      shifts += list(shift)
  assert len(set(shifts)) > 1  # examples draw their own offsets


def test_a_position_sampler_is_refused_with_a_layout_scheme():
  from configs.validate import validate
  c = tiny_config("unused", "bipe_rope")
  c.data.position_sampler.kind = "randomized"
  with pytest.raises(ConfigError, match="cannot be combined with model.position.kind='bipe_rope'"):
    validate(c, 1)


# ---- position coupling (Cho et al., arXiv 2405.20671; data/position_coupling.py)

def coupled(text: bytes, reverse_operands: bool, xp=np):
  from data import position_coupling
  tokens = np.concatenate([[TOKENIZER.bos_id], TOKENIZER.encode(text)]).astype(np.int32)[None]
  ids = position_coupling.coupled_positions(xp.asarray(tokens), xp.asarray(np.ones_like(tokens)),
                                            ord("+"), reverse_operands)
  return np.asarray(ids)[0].tolist()


def test_coupled_ids_of_hand_written_additions():
  """57 + 68 = 125 at s = 1, written by hand from the released code's rule (BOS 0; significance
  10^i -> 1 + n - i; '+' and '=' -> n + 2): the units digits of both operands and of the answer
  share id 3, the tens id 2, the final carry id 1."""
  #                                  BOS 7  5  +  8  6  =  5  2  1
  assert coupled(b"75+86=521", True) == [0, 3, 2, 4, 3, 2, 4, 3, 2, 1]  # our reversed format
  #                                  BOS 5  7  +  6  8  =  5  2  1
  assert coupled(b"57+68=521", False) == [0, 2, 3, 4, 2, 3, 4, 3, 2, 1]  # the paper's format
  #                                 BOS 5  7  +  8  =  5  6  0   57 + 8 = 65, one-digit case below
  assert coupled(b"57+08=560", False) == [0, 2, 3, 4, 2, 3, 4, 3, 2, 1]
  assert coupled(b"9+9=81", True) == [0, 2, 3, 2, 3, 2, 1]
  for text, rev in ((b"75+86=521", True), (b"57+08=560", False), (b"1234+5678=6912", False)):
    assert coupled(text, rev, jnp) == coupled(text, rev)  # jit path = data path
  assert coupled(b"75+86=", True) == [0, 3, 2, 4, 3, 2, 4]  # a prompt alone (decoding)
  assert coupled(b"75+86=5219", True)[-1] == 0  # past the answer: 0
  assert coupled(b"7586=521", True) == [0] * 9  # no '+': 0


def test_coupled_ids_restart_per_document_of_a_packed_row():
  from data import position_coupling
  tokens = np.concatenate([[TOKENIZER.bos_id], TOKENIZER.encode(b"75+86=521"), [TOKENIZER.bos_id],
                           TOKENIZER.encode(b"1+2=30"), [TOKENIZER.pad_id] * 3]).astype(np.int32)
  seg = np.array([1] * 10 + [2] * 7 + [0] * 3, np.int32)
  ids = position_coupling.coupled_positions(tokens, seg, ord("+"), True)
  assert ids.tolist() == [0, 3, 2, 4, 3, 2, 4, 3, 2, 1, 0, 2, 3, 2, 3, 2, 1, 0, 0, 0]


def test_coupled_training_starts_cover_their_range_deterministically():
  """k ~ U{0..max_position - (n + 2)} per example (the released code's start = 1 + k), from the
  window's own generator: the largest id reaches max_position exactly, never beyond."""
  from data import position_coupling
  layout = position_coupling.CoupledAddition(ord("+"), True, max_position=9, seed=3)
  tokens = np.concatenate([[TOKENIZER.bos_id], TOKENIZER.encode(b"75+86=521")]).astype(np.int32)
  example = {"inputs": tokens, "positions": np.arange(10, dtype=np.int32),
             "segment_ids": np.ones(10, np.int32)}
  base = np.array([0, 3, 2, 4, 3, 2, 4, 3, 2, 1])
  shifts = set()
  for index in range(60):
    out = layout.apply(index, example, stream=1)
    shift = set((out["positions"] - base)[1:].tolist())
    assert len(shift) == 1 and out["positions"][0] == 0  # one k per example; BOS stays 0
    np.testing.assert_array_equal(out["aux_positions"], out["positions"])
    np.testing.assert_array_equal(layout.apply(index, example, stream=1)["positions"],
                                  out["positions"])  # a pure function of (seed, stream, index)
    shifts |= shift
  assert shifts == set(range(9 - 4 + 1))  # n = 2 needs ids up to 4: k in 0..5


def coupled_config(**fields):
  c = tiny_config("unused", "learned")
  c.data.task.name = "addition_reversed_answer"
  c.data.task.position_coupling = "addition"
  c.data.task.train_max_size = 3
  c.data.task.eval_max_size = 8
  c.data.train_len = 16
  c.model.position.max_len = 16
  for key, value in fields.items():
    *parents, leaf = key.split(".")
    node = c
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c


def test_a_coupled_run_reads_the_ids_in_training_and_evaluation():
  from configs.validate import validate
  from data import inputs as data_inputs
  c = coupled_config()
  c.data.batch_size = 4
  validate(c, 1)
  model = Decoder(c, rngs=nnx.Rngs(0))
  tokens = jnp.asarray(np.concatenate([[TOKENIZER.bos_id], TOKENIZER.encode(b"57+68=521")])[None],
                       jnp.int32)
  embed_pos, attention_pos = model.position_streams(tokens, jnp.arange(10)[None],
                                                    jnp.ones((1, 10), jnp.int32))
  assert embed_pos[0].tolist() == attention_pos[0].tolist() == [0, 2, 3, 4, 2, 3, 4, 3, 2, 1]
  layout = position_layouts.from_config(c, "")  # what models/spec.py gives train.py
  assert layout == model.layout and layout.max_position == 10  # eval_max_size + 2
  batch = next(data_inputs.make_inputs(c, {}, TOKENIZER, layout=layout).train)
  for row in range(4):
    seg = batch["segment_ids"][row]
    real = seg > 0
    base = np.asarray(model.position_streams(jnp.asarray(batch["inputs"][row:row + 1]),
                                             None, jnp.asarray(seg[None]))[0])[0]
    k = set((batch["positions"][row] - base)[real & (base > 0)].tolist())
    n = int(np.flatnonzero(batch["inputs"][row] == ord("+"))[0]) - 1
    assert len(k) == 1 and 0 <= k.pop() <= 10 - (n + 2)  # max_position = 8 + 2


@pytest.mark.parametrize("fields,match", [
    ({"data.task.position_coupling": "multiplication"}, "position_coupling='multiplication' is not"),
    ({"data.task.name": "copy"}, "needs an addition task"),
    ({"data.task.coupling_max_position": 9}, "coupling_max_position must be -1 .* >= 10"),
    ({"data.task.position_coupling": "", "data.task.coupling_max_position": 20},
     "applies only with data.task.position_coupling='addition'"),
    ({"model.position.kind": "abacus", "model.position.max_len": -1}, "cannot be combined with"),
    ({"model.position.kind": "rope", "model.position.max_len": -1,
      "data.position_sampler.kind": "randomized"}, "set data.position_sampler.kind='none'"),
    ({"model.position.max_len": 16, "data.task.coupling_max_position": 20},
     "coupling_max_position=20, beyond the learned table's 16 rows; set model.position.max_len "
     ">= 21"),
])
def test_bad_coupling_fields_are_refused(fields, match):
  from configs.validate import validate
  c = coupled_config(**{"model.position.max_len": 32}) if "model.position.max_len" not in fields \
      else coupled_config()
  for key, value in fields.items():
    *parents, leaf = key.split(".")
    node = c
    for p in parents:
      node = node[p]
    node[leaf] = value
  with pytest.raises(ConfigError, match=match):
    validate(c, 1)


def test_coupled_ids_of_a_decoding_buffer_equal_those_of_the_whole_sequence():
  """Greedy decoding (models/decoding.py) reads the ids of its token buffer, whose tail is still
  0: from the prompt on, every prefix gives the ids the whole sequence gives."""
  from data import position_coupling
  full = np.concatenate([[TOKENIZER.bos_id], TOKENIZER.encode(b"1234+5678=6912")]).astype(np.int32)
  want = position_coupling.coupled_positions(full, np.ones_like(full), ord("+"), False)
  for p in range(11, len(full) + 1):  # BOS + "1234+5678=" is 11 tokens
    buffer = np.zeros(len(full) + 3, np.int32)
    buffer[:p] = full[:p]
    got = position_coupling.coupled_positions(jnp.asarray(buffer), jnp.ones_like(buffer),
                                              ord("+"), False)
    np.testing.assert_array_equal(np.asarray(got)[:p], want[:p])
