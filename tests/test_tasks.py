"""Algorithmic tasks: known strings, reproducible generators, answer-only weights, exact-match
scoring, and a few training steps on a task that end with eval/algorithmic.json."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from conftest import tiny_config
from configs.validate import ConfigError
from data import tasks
from data.position_samplers import RandomizedPositions
from data.tasks import dataset
from data.tokenizers import ByteTokenizer
from eval import algorithmic
from runs import checkpoint as run_ckpt
from runs import workdir as run_dir
from models import spec as specs
from eval import suites
from eval.suites import Context

TOK = ByteTokenizer()


class Scripted:
  """A stand-in for numpy's Generator whose `integers` returns scripted symbol indices."""

  def __init__(self, *draws):
    self.draws = [np.asarray(d) for d in draws]

  def integers(self, low, high, size=None, endpoint=False):
    out = self.draws.pop(0)
    assert out.shape == (size,) and (out >= low).all() and (out < high + endpoint).all()
    return out


@pytest.mark.parametrize("name,draws,prompt,answer", [
    ("copy", [[3, 1, 4, 2]], b"3142=", b"3142"),
    ("reverse", [[3, 1, 4, 2]], b"3142=", b"2413"),
    ("sorting", [[3, 1, 4, 1, 2]], b"31412=", b"11234"),
    ("parity", [[1, 1, 0, 1]], b"1101=", b"1"),
    ("parity", [[1, 0, 0, 1]], b"1001=", b"0"),
    ("addition", [[7, 5], [8, 6]], b"75+86=", b"521"),  # 57 + 68 = 125
    ("addition", [[9, 9, 9], [1, 0, 0]], b"999+100=", b"0001"),  # 999 + 1 = 1000
    ("addition", [[0, 2, 1], [3, 0, 0]], b"021+300=", b"3210"),  # 120 + 3 = 123, padded to 4
    ("addition_reversed_answer", [[7, 5], [8, 6]], b"57+68=", b"521"),  # Cho et al.'s format
    ("addition_reversed_answer", [[7, 5], [8, 0]], b"57+08=", b"560"),  # 57 + 8 = 65, padded
    ("multiplication", [[7, 5], [8, 6]], b"75*86=", b"6783"),  # 57 x 68 = 3876
    ("multiplication", [[1, 0], [0, 1]], b"10*01=", b"0100"),  # 1 x 10 = 0010, reversed
    ("counting", [[1, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0]], b"101100010100=", b"05"),
    ("summation", [[3, 1, 4, 2]], b"3142=", b"0"),  # 10 mod 10
    ("polynomial_evaluation", [[2, 0, 3], [4]], b"203@4=", b"0"),  # 2 + 3 * 16 = 50
    ("polynomial_evaluation", [[1, 1, 1], [3]], b"111@3=", b"3"),  # 1 + 3 + 9 = 13
    ("duplicate_string", [[1, 0, 1]], b"101=", b"101101"),
    ("even_pairs", [[0, 1, 1, 0]], b"abba=", b"1"),  # ab, ba: 2 changes
    ("even_pairs", [[0, 1, 1, 1]], b"abbb=", b"0"),
    ("modular_arithmetic", [[3, 4, 2], [0, 2]], b"3+4*2=", b"4"),  # (3 + 4) * 2 = 14
    ("modular_arithmetic", [[1, 3, 4], [1, 1]], b"1-3-4=", b"4"),  # 1 - 3 - 4 = -6 = 4 mod 5
])
def test_known_strings(name, draws, prompt, answer):
  task = tasks.get_task(name)
  size = len(draws[0])
  example = task.example(size, Scripted(*draws))
  assert (example.prompt, example.answer) == (prompt, answer)
  assert len(prompt) == task.prompt_length(size) and len(answer) == task.answer_length(size)


def _check_flip_flop(x: bytes, answer: bytes) -> bool:
  """Brute force: replay the instructions; reads must carry the memory, the answer is its bit."""
  memory = None
  for op, bit in zip(x[:-1:2], x[1:-1:2]):
    if op == ord("w"):
      memory = bit
    elif op == ord("r") and bit != memory:
      return False
  return x[0] == ord("w") and x[-1] == ord("r") and answer == bytes([memory])


def _check_mqar(x: bytes, answer: bytes, size: int) -> bool:
  """Brute force: look every query up among the pairs."""
  pairs, queries = x.split(b"|")
  table = {pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)}
  return (len(table) == size and sorted(queries) == sorted(table)
          and answer == bytes(table[q] for q in queries) and set(answer) <= set(b"0123456789"))


def _check_selective_copy(x: bytes, answer: bytes, size: int) -> bool:
  return len(x) == 4 * size and answer == bytes(c for c in x if c != ord(".")) \
      and len(answer) == size


def _check_grid_addition(x: bytes, answer: bytes, a: int, b: int, *, reverse: bool) -> bool:
  """Brute force: operands of exactly a and b digits (no leading zero unless one digit), and
  the answer is their sum in max(a, b) + 1 digits, zero-padded, in the task's digit order."""
  order = (lambda t: t[::-1]) if reverse else (lambda t: t)
  x0, x1 = (order(t) for t in x.split(b"+"))  # most-significant digit first
  lengths_ok = ((len(x0), len(x1)) == (a, b)
                and all(len(t) == 1 or t[0] != ord("0") for t in (x0, x1)))
  return lengths_ok and answer == order(str(int(x0) + int(x1)).zfill(max(a, b) + 1).encode())


def _left_to_right(x: bytes) -> int:
  """Brute force: evaluate "d op d op d ..." from the left (Python's int arithmetic)."""
  value = int(chr(x[0]))
  for op, d in zip(x[1::2], x[2::2]):
    value = eval(f"{value}{chr(op)}{chr(d)}")  # noqa: S307 -- digits and + - * only
  return value


def _check_lego(x: bytes, answer: bytes, size: int) -> bool:
  """Brute force: resolve the clauses by repeated substitution, then read them in order."""
  clauses = [c for c in x[:-1].split(b",") if c]
  known = {}
  while len(known) < len(clauses):
    for c in clauses:
      var, sign, operand = c[0], c[2], c[3]
      if var not in known and (operand == ord("1") or operand in known):
        base = 1 if operand == ord("1") else known[operand]
        known[var] = base if sign == ord("+") else -base
  return len(clauses) == size and answer == bytes(ord("+") if known[c[0]] > 0 else ord("-")
                                                  for c in clauses)


def _check_scan(x: bytes, answer: bytes, size: int) -> bool:
  """Brute force on the bytes: split at the conjunction (& and, @ after), read each part as
  primitive [opposite|around] [direction] [twice|thrice] with a pattern, and expand it (an
  action byte is its primitive's byte upper-cased; turn adds none; < and > turn to [ and ])."""
  import re

  from data.tasks.scan import MAX_WORDS, OUTPUT_LENGTHS

  def part(p):
    m = re.fullmatch(rb"([wlrjt])(?:([oa]?)([<>]))?([23]?)", p)
    prim, mod, turn, rep = m.groups()
    assert turn or prim != b"t"  # "turn" needs a direction
    act = b"" if prim == b"t" else prim.upper()
    turn = {b"<": b"[", b">": b"]"}.get(turn, b"")
    unit = {b"": turn + act, b"o": 2 * turn + act, b"a": 4 * (turn + act)}[mod or b""]
    return unit * {b"": 1, b"2": 2, b"3": 3}[rep]

  words = x.lstrip(b".")
  if b"&" in words:
    first, second = words.split(b"&")
    want = part(first) + part(second)
  elif b"@" in words:
    first, second = words.split(b"@")
    want = part(second) + part(first)
  else:
    want = part(words)
  return len(x) == MAX_WORDS and answer == want and len(answer) == OUTPUT_LENGTHS[size - 1]


# One brute-force check per registered task: (prompt without "=", answer, size) -> bool.
CHECKS = {
    "copy": lambda x, a, n: a == x,
    "reverse": lambda x, a, n: a == x[::-1],
    "sorting": lambda x, a, n: a == bytes(sorted(x)),
    "parity": lambda x, a, n: set(x) <= set(b"01") and a == str(x.count(b"1") % 2).encode(),
    "addition": lambda x, a, n: (len(x.split(b"+")[0]) == len(x.split(b"+")[1]) == n and int(
        a[::-1]) == int(x.split(b"+")[0][::-1]) + int(x.split(b"+")[1][::-1])),
    "addition_reversed_answer": lambda x, a, n: (
        len(x.split(b"+")[0]) == len(x.split(b"+")[1]) == n and len(a) == n + 1
        and int(a[::-1]) == int(x.split(b"+")[0]) + int(x.split(b"+")[1])),
    "addition_grid": lambda x, a, n: _check_grid_addition(x, a, n, n, reverse=True),
    "addition_grid_plain": lambda x, a, n: _check_grid_addition(x, a, n, n, reverse=False),
    "multiplication": lambda x, a, n: (len(x.split(b"*")[0]) == len(x.split(b"*")[1]) == n and int(
        a[::-1]) == int(x.split(b"*")[0][::-1]) * int(x.split(b"*")[1][::-1])),
    "counting": lambda x, a, n: (set(x) <= set(b"01") and len(a) == len(str(n))
                                 and int(a) == x.count(b"1")),
    "flip_flop": lambda x, a, n: _check_flip_flop(x, a),
    "mqar": _check_mqar,
    "selective_copy": _check_selective_copy,
    "summation": lambda x, a, n: a == str(sum(x) - n * ord("0")).encode()[-1:],
    "polynomial_evaluation": lambda x, a, n: a == str(sum(
        int(chr(c)) * int(chr(x[-1])) ** i for i, c in enumerate(x[:-2])) % 10).encode(),
    "duplicate_string": lambda x, a, n: set(x) <= set(b"01") and a == x + x,
    "even_pairs": lambda x, a, n: a == (b"1" if (x.count(b"ab") + x.count(b"ba")) % 2 == 0
                                        else b"0") and a == (b"1" if x[0] == x[-1] else b"0"),
    "modular_arithmetic": lambda x, a, n: a == str(_left_to_right(x) % 5).encode(),
    "lego": _check_lego,
    "scan": _check_scan,
}


@pytest.mark.parametrize("name", sorted(tasks.REGISTRY))
def test_random_examples_are_correct(name):
  """Every task's generator against a brute-force check of its definition, at small and large
  sizes (a new task needs its entry in CHECKS)."""
  assert name in CHECKS, f"add a brute-force check of task {name!r} to CHECKS"
  task = tasks.get_task(name)
  rng = np.random.default_rng(1)
  for size in (1, 2, 7, min(30, task.max_size or 30)):
    for _ in range(20):
      e = task.example(size, rng)
      assert e.prompt.endswith(b"=") and len(e.prompt) == task.prompt_length(size)
      assert len(e.answer) == task.answer_length(size)
      assert CHECKS[name](e.prompt[:-1], e.answer, size), (name, e)


def test_flip_flop_follows_ffl_08_and_mqar_refuses_more_keys_than_letters():
  """FFL(0.8): ignores 80%, writes and reads 10% each after the first write (Liu et al.)."""
  task = tasks.get_task("flip_flop")
  rng = np.random.default_rng(0)
  ops = b"".join(task.example(200, rng).prompt[2:-2:2] for _ in range(50))
  share = {c: ops.count(c.encode()) / len(ops) for c in "iwr"}
  assert abs(share["i"] - 0.8) < 0.01 and abs(share["w"] - 0.1) < 0.01
  assert abs(share["r"] - 0.1) < 0.01
  with pytest.raises(ValueError, match="at most 52"):
    tasks.get_task("mqar").example(53, rng)


def test_generators_are_reproducible():
  task = tasks.get_task("addition")
  one = [task.example(5, np.random.default_rng(7)) for _ in range(3)]
  assert one[0] == one[1] == one[2]
  rows = dataset.TaskRows(task, TOK, 64, 1, 6, seed=3)
  again = dataset.TaskRows(task, TOK, 64, 1, 6, seed=3)
  other = dataset.TaskRows(task, TOK, 64, 1, 6, seed=4)
  for i in (0, 1, 10 ** 9):
    for key in dataset.FIELDS:
      np.testing.assert_array_equal(rows[i][key], again[i][key])
  assert not np.array_equal(rows[0]["inputs"], other[0]["inputs"])
  assert not np.array_equal(rows[0]["inputs"], rows[1]["inputs"])
  a = dataset.examples_of_size(task, 4, 5, 0, dataset.EVALUATION, TOK)
  b = dataset.examples_of_size(task, 4, 5, 0, dataset.EVALUATION, TOK)
  v = dataset.examples_of_size(task, 4, 5, 0, dataset.VALIDATION, TOK)
  np.testing.assert_array_equal(a["inputs"], b["inputs"])
  assert not np.array_equal(a["inputs"], v["inputs"])  # validation and evaluation: other streams


def test_grain_iterator_resumes_exactly():
  cfg = tiny_task_config("reverse").data.task
  ds = dataset.train_dataset(cfg, TOK, train_len=40, batch_size=4)
  it = iter(ds)
  next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(2)]
  resumed = iter(dataset.train_dataset(cfg, TOK, train_len=40, batch_size=4))
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for key in dataset.FIELDS:
      np.testing.assert_array_equal(got[key], want[key])


def test_randomized_positions_apply_per_example():
  """Ruoss et al.'s randomized positions (data/position_samplers.py) on task rows: each example
  gets its own increasing draw; tokens and weights are untouched."""
  cfg = tiny_task_config("copy").data.task
  sampler = RandomizedPositions(max_position=64, seed=0)
  plain = next(iter(dataset.train_dataset(cfg, TOK, train_len=16, batch_size=4)))
  drawn = next(iter(dataset.train_dataset(cfg, TOK, train_len=16, batch_size=4, sampler=sampler)))
  for key in ("inputs", "targets", "segment_ids", "weights"):
    np.testing.assert_array_equal(plain[key], drawn[key])
  assert not np.array_equal(plain["positions"], drawn["positions"])
  for row_seg, row_pos in zip(drawn["segment_ids"], drawn["positions"]):
    for s in range(1, row_seg.max() + 1):
      pos = row_pos[row_seg == s]
      assert (np.diff(pos) > 0).all() and pos.max() < 64


@pytest.mark.parametrize("name", sorted(tasks.REGISTRY))
def test_weights_cover_exactly_the_answer(name):
  task = tasks.get_task(name)
  rows = dataset.TaskRows(task, TOK, row_len=3 * task.sequence_length(5) + 3, min_size=1,
                          max_size=5, seed=0)
  assert rows.examples_per_row == 3
  for i in range(20):
    row = rows[i]
    seg = row["segment_ids"]
    assert seg.max() == 3 and (np.diff(seg[seg > 0]) >= 0).all()
    pad = seg == 0
    assert (row["weights"][pad] == 0).all() and (row["inputs"][pad] == TOK.pad_id).all()
    for s in (1, 2, 3):
      idx = np.flatnonzero(seg == s)
      assert (np.diff(idx) == 1).all()  # each example is one contiguous run inside the row
      inputs, targets, w = row["inputs"][idx], row["targets"][idx], row["weights"][idx]
      np.testing.assert_array_equal(row["positions"][idx], np.arange(len(idx)))
      assert inputs[0] == TOK.bos_id and targets[-1] == TOK.eos_id
      prompt_end = int(np.flatnonzero(targets == ord("="))[0])  # target index of the "="
      np.testing.assert_array_equal(w, (np.arange(len(idx)) > prompt_end).astype(np.float32))
      if isinstance(task, tasks.GridTask):  # a cell (a, b): the operands' lengths
        a, b = (len(t) for t in inputs[1:prompt_end + 1].astype(np.uint8).tobytes().split(b"+"))
        assert w.sum() == task.cell_answer_length(a, b) + 1
        assert len(idx) == task.cell_sequence_length(a, b)
        continue
      size = (len(idx) - task.sequence_length(1)) // (task.sequence_length(2) -
                                                     task.sequence_length(1)) + 1
      assert w.sum() == task.answer_length(size) + 1  # the answer bytes and EOS


def test_accuracy_on_hand_built_logits():
  targets = jnp.array([[5, 6, 7, 8], [5, 6, 7, 8], [1, 2, 3, 4]])
  weights = jnp.array([[0, 0, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]], jnp.float32)
  perfect = jax.nn.one_hot(targets, 10) * 5.0
  correct, total = algorithmic.answer_scores(perfect, targets, weights)
  np.testing.assert_array_equal(total, [2, 2, 3])
  acc = algorithmic.accuracy(np.asarray(correct), np.asarray(total))
  assert acc == {"examples": 3, "exact_match": 1.0, "answer_tokens": 7, "token_accuracy": 1.0}
  # A wrong prompt prediction changes nothing; one wrong answer token fails its example only.
  logits = perfect.at[0, 0].set(jax.nn.one_hot(9, 10) * 5.0)
  logits = logits.at[2, 3].set(jax.nn.one_hot(0, 10) * 5.0)
  correct, total = algorithmic.answer_scores(logits, targets, weights)
  np.testing.assert_array_equal(correct, [2, 2, 2])
  acc = algorithmic.accuracy(np.asarray(correct), np.asarray(total))
  assert acc["exact_match"] == pytest.approx(2 / 3)
  assert acc["token_accuracy"] == pytest.approx(6 / 7)


def tiny_task_config(name="copy", kind="alibi"):
  """A seconds-scale task run: train sizes 1..3, eval sizes 1..6, 2 layers of width 64."""
  c = tiny_config("unused", kind)
  c.data.task.name = name
  c.data.task.train_max_size = 3
  c.data.task.eval_max_size = 6
  c.data.task.eval_examples_per_size = 8
  c.data.train_len = tasks.get_task(name).sequence_length(3)
  c.mesh.data = -1
  return c


def test_training_on_a_task_writes_algorithmic_json(tmp_path, capsys):
  c = tiny_task_config("copy", "learned")
  c.train.write_plots = True
  c.train.num_steps = 4
  c.train.eval_every_steps = 2
  out = train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  # Fields train.py does not apply are named, not silently dropped.
  printed = capsys.readouterr().out
  assert "warning: not applied: eval.suites='ppl_vs_length,loss_by_position': a task run" in printed
  result = json.load(open(tmp_path / "eval" / "algorithmic.json"))
  assert os.path.getsize(tmp_path / "eval" / "algorithmic.png") > 0
  assert not os.path.exists(tmp_path / "eval" / "ppl_vs_length.json")
  assert result == json.loads(json.dumps(out["algorithmic"]))
  assert result["task"] == "copy" and result["step"] == 4
  assert result["config_hash"] == run_dir.config_hash(c)
  assert (result["train_min_size"], result["train_max_size"]) == (1, 3)
  rows = result["rows"]
  assert [r["size"] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert [r["in_distribution"] for r in rows] == [True] * 3 + [False] * 3
  for r in rows[:3]:  # learned table of train_len = 8 positions: sizes 1..3 fit (T = 2n + 2)
    assert r["examples"] == 8 and 0 <= r["exact_match"] <= r["token_accuracy"] <= 1
  for r in rows[3:]:
    assert r["examples"] == 0 and r["exact_match"] is None and "learned" in r["skipped"]
  metrics = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [m["step"] for m in metrics if "val_loss" in m] == [2, 4]

  # The suite on its own (as eval.run calls it) reproduces the numbers.
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params, step = run_ckpt.restore_params(str(tmp_path), c, spec)
  again = suites.REGISTRY["algorithmic"].run(Context(c, str(tmp_path), spec, mesh, params, step))["algorithmic"]
  assert again["rows"] == rows
  text = tiny_config("unused")
  with pytest.raises(ConfigError, match="data.task.name"):
    suites.REGISTRY["algorithmic"].run(Context(text, str(tmp_path), spec, mesh, params, step))["algorithmic"]


def test_teacher_forced_scoring_matches_greedy_decoding():
  """Greedy decoding by full recomputation (no cache; a fixed buffer of T tokens, read at the
  last decoded position), then the one-pass scorer (right-padded to BUCKET, sharded over 8
  devices) must find every greedy token right."""
  c = tiny_task_config("copy", "rope")
  mesh = train.sharding.make_mesh(c.mesh, jax.devices())
  spec = specs.model_spec(c, mesh)
  params = specs.init_params(c, spec)
  task = tasks.get_task("copy")
  rows = dataset.examples_of_size(task, 3, 8, 0, dataset.EVALUATION, TOK)
  forward = jax.jit(lambda p, x: nnx.merge(spec.graphdef, p)(
      x, jnp.asarray(rows["positions"]), jnp.asarray(rows["segment_ids"])))
  buffer = np.full_like(rows["inputs"], TOK.pad_id)
  prompt_len = 1 + task.prompt_length(3)
  buffer[:, :prompt_len] = rows["inputs"][:, :prompt_len]
  decoded = []
  for t in range(prompt_len - 1, buffer.shape[1]):  # 3 answer bytes and EOS
    nxt = np.asarray(jnp.argmax(forward(params, jnp.asarray(buffer))[:, t], axis=-1))
    decoded.append(nxt)
    if t + 1 < buffer.shape[1]:
      buffer[:, t + 1] = nxt
  greedy = dict(rows, inputs=buffer, targets=np.concatenate(
      [rows["targets"][:, :prompt_len - 1], np.stack(decoded, axis=1)], axis=1).astype(np.int32))
  correct, total = algorithmic.score_rows(algorithmic.make_score_fn(spec.graphdef, mesh), params,
                                          greedy, batch_tokens=64, mesh=mesh, pad_id=TOK.pad_id)
  np.testing.assert_array_equal(total, 4)
  np.testing.assert_array_equal(correct, total)  # exact match 1.0 on the model's own output


@pytest.mark.parametrize("name,reverse", [("addition_grid", True), ("addition_grid_plain", False)])
def test_addition_grid_cells_known_strings_and_brute_force(name, reverse):
  """Cell (2, 3), 57 + 468 = 525: leading digits drawn from 1..9 (indices 4 and 3), then the
  rest from 0..9; cell (1, 1), 9 + 9 = 18. Random cells against the brute-force check."""
  task = tasks.get_task(name)
  e = task.cell_example(2, 3, Scripted([4], [7], [3], [6, 8]))
  assert (e.size, e.prompt, e.answer) == ((3, b"75+864=", b"5250") if reverse else
                                          (3, b"57+468=", b"0525"))
  e = task.cell_example(1, 1, Scripted([9], [9]))
  assert (e.prompt, e.answer) == ((b"9+9=", b"81") if reverse else (b"9+9=", b"18"))
  rng = np.random.default_rng(0)
  for a, b in [(1, 7), (7, 1), (3, 3), (12, 5), (2, 20)]:
    for _ in range(20):
      e = task.cell_example(a, b, rng)
      assert len(e.prompt) == task.cell_prompt_length(a, b) == a + b + 2
      assert len(e.answer) == task.cell_answer_length(a, b) == max(a, b) + 1
      assert _check_grid_addition(e.prompt[:-1], e.answer, a, b, reverse=reverse), e
  with pytest.raises(ValueError, match="integers >= 1"):
    task.cell_example(0, 3, rng)


def test_addition_grid_trains_on_every_pair_of_operand_lengths_equally():
  """Training rows draw a and b independently and uniformly in [1, 4]: over 4,000 problems
  (seed 0) each of the 16 pairs occurs 250 +- 20% times, and no problem is longer than the
  diagonal cell (4, 4)."""
  task = tasks.get_task("addition_grid")
  rows = dataset.TaskRows(task, TOK, row_len=4 * task.sequence_length(4), min_size=1,
                          max_size=4, seed=0)
  counts = {}
  for i in range(1000):
    row = rows[i]
    for s in range(1, 5):
      seg = row["inputs"][row["segment_ids"] == s]
      assert len(seg) <= task.sequence_length(4)
      prompt = seg[1:].astype(np.uint8).tobytes().split(b"=")[0]
      pair = tuple(len(t) for t in prompt.split(b"+"))
      counts[pair] = counts.get(pair, 0) + 1
  assert sorted(counts) == [(a, b) for a in range(1, 5) for b in range(1, 5)]
  assert all(200 <= c <= 300 for c in counts.values()), counts


def test_addition_grid_run_writes_the_grid_and_its_heatmap(tmp_path):
  """A 2-step addition_grid run (learned positions, train_len 13): the JSON's grid holds 6 x 6
  cells, None exactly where a + b + max(a, b) + 4 > 13 tokens; the cells scored in shared
  batches equal each cell scored on its own; the heatmap is written."""
  c = tiny_task_config("addition_grid", "learned")
  c.train.num_steps = 2
  c.train.eval_every_steps = 2
  train.train_and_evaluate(c, str(tmp_path), devices=jax.devices()[:1])
  result = json.load(open(tmp_path / "eval" / "algorithmic.json"))
  assert os.path.getsize(tmp_path / "eval" / "algorithmic_grid.png") > 0
  grid = result["grid"]
  assert grid["sizes"] == [1, 2, 3, 4, 5, 6] and grid["examples_per_cell"] == 8
  for a in grid["sizes"]:
    for b in grid["sizes"]:
      v = grid["exact_match"][a - 1][b - 1]
      assert (v is None) == (a + b + max(a, b) + 4 > 13), (a, b, v)
  mesh = train.sharding.make_mesh(c.mesh, jax.devices()[:1])
  spec = specs.model_spec(c, mesh)
  params, _ = run_ckpt.restore_params(str(tmp_path), c, spec)
  score_fn = algorithmic.make_score_fn(spec.graphdef, mesh)
  task = tasks.get_task("addition_grid")
  for a, b in [(1, 1), (3, 2), (1, 4), (3, 3)]:
    rows = dataset.examples_of_cell(task, a, b, 8, c.data.task.eval_seed, TOK)
    correct, total = algorithmic.score_rows(score_fn, params, rows, batch_tokens=64, mesh=mesh,
                                            pad_id=TOK.pad_id)
    acc = algorithmic.accuracy(correct, total)
    assert grid["exact_match"][a - 1][b - 1] == acc["exact_match"]
    assert grid["token_accuracy"][a - 1][b - 1] == acc["token_accuracy"]
  for row in result["rows"]:  # the per-size rows are the grid's diagonal cells
    assert row["exact_match"] == grid["exact_match"][row["size"] - 1][row["size"] - 1]
  in_square = [grid["exact_match"][a - 1][b - 1] for a in (1, 2, 3) for b in (1, 2, 3)]
  assert grid["in_distribution_exact_match"] == pytest.approx(np.mean(in_square))
  rows = suites.REGISTRY["algorithmic"].rows(result, c.data.train_len)
  assert json.loads(rows[0]["detail"]) == {str(b): grid["exact_match"][0][b - 1]
                                           for b in range(1, 7)}


def test_lego_writes_the_chain_shuffled_and_answers_in_clause_order():
  """The docstring's example: chain a = +1, b = -a, c = +b written in the order c, a, b."""
  class Draws:
    def permutation(self, x):
      return np.asarray([0, 1, 2]) if isinstance(x, int) else np.asarray(x)[:]
    def integers(self, low, high, size=None):
      return np.asarray([0, 1, 0])

  class Shuffled(Draws):
    calls = 0
    def permutation(self, x):
      if isinstance(x, int):
        return np.asarray([2, 0, 1])  # clause order c, a, b
      return np.asarray(x)  # the letters a, b, c, ... in order
  example = tasks.get_task("lego").example(3, Shuffled())
  assert (example.prompt, example.answer) == (b"c:+b,a:+1,b:-a,|=", b"-+-")
  with pytest.raises(ConfigError, match="max"):
    cfg = tiny_config("unused", "alibi").data.task
    cfg.name, cfg.train_max_size, cfg.eval_max_size = "lego", 10, 30
    tasks.check_config(cfg, 400)


@pytest.mark.parametrize("command,actions", [  # Lake & Baroni's examples (paper and SCAN README)
    ("jump", "JUMP"),
    ("jump left", "LTURN JUMP"),
    ("jump around right", "RTURN JUMP RTURN JUMP RTURN JUMP RTURN JUMP"),
    ("turn left twice", "LTURN LTURN"),
    ("jump thrice", "JUMP JUMP JUMP"),
    ("jump opposite left and walk thrice", "LTURN LTURN JUMP WALK WALK WALK"),
    ("jump opposite left after walk around left",
     "LTURN WALK LTURN WALK LTURN WALK LTURN WALK LTURN LTURN JUMP"),
    ("turn opposite left", "LTURN LTURN"),
    ("turn around right", "RTURN RTURN RTURN RTURN"),
    ("walk opposite right thrice after run opposite right",  # the first line of tasks.txt
     "RTURN RTURN RUN RTURN RTURN WALK RTURN RTURN WALK RTURN RTURN WALK"),
    ("look twice and turn right", "LOOK LOOK RTURN"),
])
def test_scan_interprets_the_papers_commands(command, actions):
  from data.tasks import scan
  assert " ".join(scan.interpret(command)) == actions
  assert scan.decode_command(scan.encode_command(command)) == command


def test_scan_known_bytes_and_refusals():
  from data.tasks import scan
  assert scan.encode_command("jump around right") == b"......ja>="
  assert scan.encode_actions(scan.interpret("jump around right")) == b"]J]J]J]J"
  assert scan.encode_command("jump opposite left and walk thrice") == b"...jo<&w3="
  for bad in ("turn", "turn twice", "jump left left", "jump and walk and run", "jump around",
              "walk twice thrice", "jump after"):
    with pytest.raises(ValueError, match="not a SCAN command"):
      scan.interpret(bad)


def test_scan_command_space_and_the_length_split():
  """The grammar generates SCAN's published 20,910 commands; by output length the length split
  is 16,990 commands of <= 22 actions (train) and 3,920 of 24..48 (test), none of 23."""
  from data.tasks import scan
  commands = scan.all_commands()
  assert len(commands) == len(set(commands)) == 20_910
  assert max(len(c.split()) for c in commands) == scan.MAX_WORDS == 9
  by_length = scan.commands_by_length()
  assert tuple(by_length) == scan.OUTPUT_LENGTHS and 23 not in by_length
  counts = {n: len(c) for n, c in by_length.items()}
  assert (counts[1], counts[22], counts[24], counts[48]) == (6, 576, 336, 128)
  assert sum(v for n, v in counts.items() if n <= 22) == 16_990
  assert sum(v for n, v in counts.items() if 24 <= n <= 48) == 3_920
  task = tasks.get_task("scan")
  assert scan.OUTPUT_LENGTHS[21] == scan.TRAIN_MAX_ACTIONS == 22
  assert [task.answer_length(n) for n in (22, 23, 33)] == [22, 24, 48]
  # training draws commands uniformly from the sizes' union: every one of <= 22 actions
  drawn = task.training_examples(4000, 1, 22, np.random.default_rng(0))
  assert all(1 <= e.size <= 22 and len(e.answer) == e.size for e in drawn)
  share_long = np.mean([e.size >= 12 for e in drawn])  # commands, not sizes, are uniform
  want = sum(v for n, v in counts.items() if 12 <= n <= 22) / 16_990
  assert abs(share_long - want) < 0.03
  with pytest.raises(ValueError, match="sizes are 1..33"):
    task.example(34, np.random.default_rng(0))
