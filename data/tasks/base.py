"""The task contract: an instance size and a seeded generator -> a prompt and an answer, in bytes.

Every task writes one example as a compact, space-free byte string for the byte tokenizer
(data/tokenizers.py: ids 0..255 are bytes, then BOS = 256, EOS = 257, PAD = 258):

  tokens = BOS, prompt bytes (the input symbols, then "="), answer bytes, EOS

e.g. copy of size 4: BOS "3142=" "3142" EOS. One symbol is one byte (a digit "0".."9", or a bit
"0"/"1" for parity), so a size-n instance always has the same token count, and the format is the
same for every positional scheme. The model reads `tokens[:-1]` and predicts `tokens[1:]`; the
*answer targets* are the answer bytes and the final EOS (the model must also stop), and only they
are trained and scored (Kazemnejad et al., "The Impact of Positional Encoding on Length
Generalization in Transformers", arXiv 2305.19466, train on the target only).

Reproducibility: a task draws only from the `numpy.random.Generator` it is given, so the same
generator state gives the same example (numpy keeps `Generator` streams stable within a release,
not across all releases).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from data.tokenizers import ByteTokenizer

DIGITS = np.frombuffer(b"0123456789", np.uint8)  # symbols of copy, reverse, sorting, addition
BITS = np.frombuffer(b"01", np.uint8)  # symbols of parity
SEPARATOR = b"="  # ends every prompt


@dataclasses.dataclass(frozen=True)
class Example:
  """One task instance.

  Attributes:
    size: instance size n (the task defines it: input symbols, or digits per operand).
    prompt: bytes the model reads before answering, ending with "=".
    answer: bytes the model must produce after the prompt (EOS follows, not included here).
  """

  size: int
  prompt: bytes
  answer: bytes


class Task:
  """Base class of an algorithmic task: subclasses set `name`, `prompt_length`,
  `answer_length` and implement `sample`.

  A task is stateless; `example(size, rng)` draws one instance.
  """

  name: str = ""
  size_unit: str = "input symbols"  # what the instance size n counts (README, JSON)
  max_size: int | None = None  # the largest instance size the task can draw (None: unbounded)

  def prompt_length(self, size: int) -> int:
    """Bytes of the prompt (separator included) of a size-`size` instance."""
    raise NotImplementedError

  def answer_length(self, size: int) -> int:
    """Bytes of the answer (EOS excluded) of a size-`size` instance."""
    raise NotImplementedError

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    """Draws one instance: (prompt bytes with the trailing "=", answer bytes)."""
    raise NotImplementedError

  def example(self, size: int, rng: np.random.Generator) -> Example:
    """One instance of size `size` drawn from `rng`.

    Args:
      size: instance size n >= 1.
      rng: the generator all randomness comes from (advanced by the draw).

    Returns:
      An `Example` whose prompt and answer have exactly `prompt_length(size)` and
      `answer_length(size)` bytes.

    Raises:
      ValueError: size < 1.
    """
    if not isinstance(size, (int, np.integer)) or size < 1:
      raise ValueError(f"{self.name}: instance size must be an integer >= 1; got {size!r}")
    prompt, answer = self.sample(int(size), rng)
    return Example(int(size), prompt, answer)

  def sequence_length(self, size: int) -> int:
    """Model input length of a size-`size` instance, tokens: BOS + prompt + answer (the EOS is
    a target only). Positions 0..sequence_length - 1 are used."""
    return 1 + self.prompt_length(size) + self.answer_length(size)

  def training_examples(self, count: int, min_size: int, max_size: int,
                        rng: np.random.Generator) -> list[Example]:
    """`count` training examples: sizes uniform in [min_size, max_size], drawn first, then one
    example per size, all from `rng` (data/tasks/dataset.py TaskRows). Every example is at most
    `sequence_length(max_size)` tokens long."""
    sizes = rng.integers(min_size, max_size, endpoint=True, size=count)
    return [self.example(int(s), rng) for s in sizes]


class GridTask(Task):
  """A task whose instances have two sizes, (a, b), e.g. the digits of two operands: training
  draws both, evaluation scores every cell of a grid of them (eval/algorithmic.py
  `evaluate_grid`; the protocol of McLeish et al., arXiv 2405.17399, Figure 1).

  Subclasses implement the `cell_*` methods and `sample_cell`. The one-size interface of `Task`
  is the grid's diagonal, a = b = n (so the accuracy-by-size rows of the algorithmic suite are
  the diagonal); `sequence_length(n)` is the longest cell with max(a, b) = n, the diagonal one
  (`cell_sequence_length` must grow with each size).
  """

  def cell_prompt_length(self, a: int, b: int) -> int:
    """Bytes of the prompt (separator included) of cell (a, b)."""
    raise NotImplementedError

  def cell_answer_length(self, a: int, b: int) -> int:
    """Bytes of the answer (EOS excluded) of cell (a, b)."""
    raise NotImplementedError

  def sample_cell(self, a: int, b: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    """Draws one instance of cell (a, b): (prompt bytes with the trailing "=", answer bytes)."""
    raise NotImplementedError

  def cell_sequence_length(self, a: int, b: int) -> int:
    """Tokens of a cell-(a, b) instance: BOS + prompt + answer."""
    return 1 + self.cell_prompt_length(a, b) + self.cell_answer_length(a, b)

  def cell_example(self, a: int, b: int, rng: np.random.Generator) -> Example:
    """One instance of cell (a, b); its `size` is max(a, b).

    Raises:
      ValueError: a or b not an integer >= 1.
    """
    for value in (a, b):
      if not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{self.name}: cell sizes must be integers >= 1; got {(a, b)!r}")
    prompt, answer = self.sample_cell(int(a), int(b), rng)
    return Example(max(int(a), int(b)), prompt, answer)

  def prompt_length(self, size: int) -> int:
    return self.cell_prompt_length(size, size)

  def answer_length(self, size: int) -> int:
    return self.cell_answer_length(size, size)

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    return self.sample_cell(size, size, rng)

  def training_examples(self, count: int, min_size: int, max_size: int,
                        rng: np.random.Generator) -> list[Example]:
    """`count` examples of cells (a, b) with a and b independent and uniform in [min_size,
    max_size] (every pair of sizes equally likely), the two sizes drawn first, then the
    examples in order, all from `rng`."""
    ab = rng.integers(min_size, max_size, endpoint=True, size=(count, 2))
    return [self.cell_example(int(a), int(b), rng) for a, b in ab]


def encode(example: Example, tokenizer: ByteTokenizer) -> dict[str, np.ndarray]:
  """The model's view of one example (one packed segment).

  Args:
    example: a task instance.
    tokenizer: the byte tokenizer (BOS/EOS ids).

  Returns:
    dict of [T] arrays, T = 1 + len(prompt) + len(answer) (= `Task.sequence_length`):
      inputs int32 (BOS, prompt, answer), targets int32 (prompt, answer, EOS),
      positions int32 0..T-1, weights float32 (1.0 at the answer targets, i.e. the answer
      bytes and EOS; 0.0 at the prompt targets).
  """
  tokens = np.concatenate([[tokenizer.bos_id], tokenizer.encode(example.prompt),
                           tokenizer.encode(example.answer), [tokenizer.eos_id]]).astype(np.int32)
  length = len(tokens) - 1
  weights = np.zeros(length, np.float32)
  weights[len(example.prompt):] = 1.0  # target j is tokens[j + 1]; answers start at 1 + len(prompt)
  return {"inputs": tokens[:-1], "targets": tokens[1:],
          "positions": np.arange(length, dtype=np.int32), "weights": weights}


def symbols(rng: np.random.Generator, alphabet: np.ndarray, size: int) -> np.ndarray:
  """`size` symbols drawn uniformly and independently from `alphabet` (uint8 [size])."""
  return alphabet[rng.integers(0, len(alphabet), size=size)]


class DigitTransformTask(Task):
  """A task whose answer is a same-length transform of n random digits: prompt `x=` (n + 1
  bytes), answer `transform(x)` (n bytes). Subclasses set `name` and `transform`."""

  def prompt_length(self, size: int) -> int:
    return size + 1

  def answer_length(self, size: int) -> int:
    return size

  def transform(self, x: np.ndarray) -> np.ndarray:
    """uint8 [n] digit bytes -> uint8 [n] answer bytes."""
    raise NotImplementedError

  def sample(self, size: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    x = symbols(rng, DIGITS, size)
    return x.tobytes() + SEPARATOR, self.transform(x).tobytes()
