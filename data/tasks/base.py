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
