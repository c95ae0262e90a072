"""SCAN, the length split (Lake & Baroni, "Generalization without Systematicity: On the
Compositional Skills of Sequence-to-Sequence Recurrent Networks", ICML 2018, arXiv 1711.00350):
navigation commands such as "jump twice and walk left" -> "JUMP JUMP LTURN WALK".

The dataset is generated here from the paper's phrase-structure grammar and interpretation
function (its Fig. 6 / appendix; github.com/brendenlake/SCAN lists the same 20,910 commands):

  C -> S and S | S after S | S          [[x1 and x2]] = [[x1]] [[x2]]
                                        [[x1 after x2]] = [[x2]] [[x1]]
  S -> V twice | V thrice | V           [[x twice]] = [[x]] [[x]]; thrice: three times
  V -> D[1] opposite D[2]               [[u opposite left]] = LTURN LTURN [[u]]
     | D[1] around D[2]                 [[u around left]] = (LTURN [[u]]) x 4
     | D | U                            [[turn opposite left]] = LTURN LTURN
  D -> U left | U right                 [[turn around left]] = LTURN x 4
     | turn left | turn right           [[u left]] = LTURN [[u]]; [[turn left]] = LTURN
  U -> walk | look | run | jump         [[walk]] = WALK, ... (right: RTURN alike)

(D[1] and D[2] are the two words of a D: "jump opposite left", "turn around right".) That is
4 U, 10 D, 34 V, 102 S and 102 + 2 x 102^2 = 20,910 commands (`all_commands`).

The length split: "length is defined as the number of output actions"; training holds every
command of at most 22 actions (16,990), the test every command of 24 to 48 (3,920). SCAN's
outputs take only 33 distinct lengths (1..22, 24..28, 30, 32, 33, 36, 40, 48: no command has 23
actions), so the instance size n here is the *rank* of the output length among them
(`OUTPUT_LENGTHS[n - 1]` actions): sizes 1..22 are outputs of 1..22 actions, the length split's
training set, and sizes 23..33 are its test lengths 24..48. A size-n example is a command drawn
uniformly from the commands with that many actions. Training draws commands uniformly from all
commands of the trained sizes (`training_examples`: the length split's training set sampled with
replacement, as the paper trains), not sizes uniformly as the other tasks do; validation and
evaluation draw a fixed number per size as for every task (data/tasks/dataset.py).

Byte format (one byte per word and per action, no spaces): command words walk w, look l, run r,
jump j, turn t, left <, right >, opposite o, around a, twice 2, thrice 3, and &, after @; actions
WALK W, LOOK L, RUN R, JUMP J, LTURN [, RTURN ]. The command is left-padded with "." to SCAN's
longest command (9 words), so every example has the same prompt length (10 bytes with "="), as
the task contract asks (data/tasks/base.py). Example: "jump around right" -> BOS "......ja>="
"]J]J]J]J" EOS. Sequence length 11 + OUTPUT_LENGTHS[n - 1] tokens.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from data.tasks.base import SEPARATOR, Example, Task

PRIMITIVES = ("walk", "look", "run", "jump")  # U
DIRECTIONS = ("left", "right")
ACTIONS = {"walk": "WALK", "look": "LOOK", "run": "RUN", "jump": "JUMP"}
TURNS = {"left": "LTURN", "right": "RTURN"}
WORD_BYTES = {"walk": "w", "look": "l", "run": "r", "jump": "j", "turn": "t", "left": "<",
              "right": ">", "opposite": "o", "around": "a", "twice": "2", "thrice": "3",
              "and": "&", "after": "@"}
ACTION_BYTES = {"WALK": "W", "LOOK": "L", "RUN": "R", "JUMP": "J", "LTURN": "[", "RTURN": "]"}
PAD = "."  # left-pads every command to MAX_WORDS
MAX_WORDS = 9  # "jump around left thrice and walk opposite right twice"
REPEATS = {"twice": 2, "thrice": 3}


def interpret(command: str) -> list[str]:
  """SCAN's interpretation function: a command (words separated by spaces) -> its actions.

  Raises:
    ValueError: a string the grammar does not generate.
  """
  words = command.split()
  joins = [i for i, w in enumerate(words) if w in ("and", "after")]
  if len(joins) > 1:
    raise ValueError(f"{command!r} is not a SCAN command (one 'and' or 'after' at most)")
  if joins:  # C -> S and S | S after S
    i = joins[0]
    first, second = _sentence(words[:i], command), _sentence(words[i + 1:], command)
    return first + second if words[i] == "and" else second + first
  return _sentence(words, command)


def _sentence(words: list[str], command: str) -> list[str]:
  """[[S]] of S -> V twice | V thrice | V."""
  if words and words[-1] in REPEATS:
    return _phrase(words[:-1], command) * REPEATS[words[-1]]
  return _phrase(words, command)


def _phrase(words: list[str], command: str) -> list[str]:
  """[[V]] of V -> D[1] opposite D[2] | D[1] around D[2] | D | U."""
  def fail():
    return ValueError(f"{command!r} is not a SCAN command")
  if len(words) == 1 and words[0] in ACTIONS:  # U
    return [ACTIONS[words[0]]]
  if len(words) not in (2, 3) or words[-1] not in TURNS or words[0] not in (*ACTIONS, "turn"):
    raise fail()
  turn = TURNS[words[-1]]
  act = [] if words[0] == "turn" else [ACTIONS[words[0]]]  # "turn" adds no action of its own
  if len(words) == 2:  # D -> U left | turn left ...
    return [turn] + act
  if words[1] == "opposite":
    return [turn, turn] + act
  if words[1] == "around":
    return ([turn] + act) * 4
  raise fail()


def _phrases() -> list[str]:
  """Every V, in grammar order: 10 opposite, 10 around, 10 D, 4 U."""
  d_heads = (*PRIMITIVES, "turn")
  ds = [f"{u} {d}" for u in d_heads for d in DIRECTIONS]
  return ([f"{u} opposite {d}" for u in d_heads for d in DIRECTIONS]
          + [f"{u} around {d}" for u in d_heads for d in DIRECTIONS] + ds + list(PRIMITIVES))


@functools.cache
def all_commands() -> tuple[str, ...]:
  """Every SCAN command (C), each once: 20,910 strings of space-separated words."""
  s = [v + suffix for v in _phrases() for suffix in ("", " twice", " thrice")]
  both = [f"{a} {c} {b}" for c in ("and", "after") for a, b in itertools.product(s, s)]
  return tuple(s + both)


@functools.cache
def commands_by_length() -> dict[int, tuple[str, ...]]:
  """Output length (actions) -> the commands with that many actions, in `all_commands` order."""
  out: dict[int, list[str]] = {}
  for command in all_commands():
    out.setdefault(len(interpret(command)), []).append(command)
  return {n: tuple(out[n]) for n in sorted(out)}


OUTPUT_LENGTHS = (*range(1, 23), 24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48)  # 33 distinct
TRAIN_MAX_ACTIONS = 22  # the length split: train <= 22 actions, test 24..48


def encode_command(command: str) -> bytes:
  """The prompt bytes of a command (left-padded to MAX_WORDS, then "=")."""
  words = "".join(WORD_BYTES[w] for w in command.split())
  return (PAD * (MAX_WORDS - len(words)) + words).encode() + SEPARATOR


def encode_actions(actions: list[str]) -> bytes:
  return "".join(ACTION_BYTES[a] for a in actions).encode()


def decode_command(prompt: bytes) -> str:
  """The inverse of `encode_command` (the trailing "=" optional)."""
  words = {b: w for w, b in WORD_BYTES.items()}
  return " ".join(words[c] for c in prompt.decode().rstrip("=").lstrip(PAD))


class Scan(Task):
  """SCAN's length split; size n = the n-th of SCAN's 33 output lengths (module docstring):
  prompt 10 bytes, answer OUTPUT_LENGTHS[n - 1] action bytes."""

  name = "scan"
  size_unit = "output-length rank (n-th of SCAN's 33 action counts 1..22, 24..28, 30, 32, 33, 36, 40, 48)"
  max_size = len(OUTPUT_LENGTHS)

  def prompt_length(self, size: int) -> int:
    return MAX_WORDS + 1

  def answer_length(self, size: int) -> int:
    return OUTPUT_LENGTHS[size - 1]

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    if size > self.max_size:
      raise ValueError(f"scan: sizes are 1..{self.max_size} (SCAN's output lengths); got {size}")
    pairs = _encoded(size)
    return pairs[int(rng.integers(0, len(pairs)))]

  def training_examples(self, count: int, min_size: int, max_size: int,
                        rng: np.random.Generator) -> list[Example]:
    """`count` commands drawn uniformly (with replacement) from every command whose size is in
    [min_size, max_size] (sizes 1..22: the length split's 16,990 training commands)."""
    pool = _pool(min_size, max_size)
    return [pool[int(i)] for i in rng.integers(0, len(pool), size=count)]


@functools.cache
def _encoded(size: int) -> tuple[tuple[bytes, bytes], ...]:
  """(prompt, answer) bytes of every command of size `size`, in `all_commands` order."""
  return tuple((encode_command(c), encode_actions(interpret(c)))
               for c in commands_by_length()[OUTPUT_LENGTHS[size - 1]])


@functools.cache
def _pool(min_size: int, max_size: int) -> tuple[Example, ...]:
  """Every command of sizes min_size..max_size as an `Example`."""
  return tuple(Example(s, *pair) for s in range(min_size, max_size + 1) for pair in _encoded(s))
