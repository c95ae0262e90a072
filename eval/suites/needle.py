"""The needle grid (RULER single needle, Hsieh et al., arXiv 2404.06654): a key-value needle
inside held-out text of eval.split, `<workdir>/eval/needle.{json,png}` (prompts: data/passkey.py;
grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class Needle(Retrieval):
  """eval.suites=needle: settings in eval.needle; the haystack is eval.split's documents."""

  names = ("needle",)
