"""RULER's multi-key needle (Hsieh et al., arXiv 2404.06654, niah_multikey): the key-value needle
to retrieve among `eval.niah_multikey.num_keys - 1` distractor needles of other keys, inside
held-out text of eval.split, on the needle suite's grid of lengths x depths,
`<workdir>/eval/niah_multikey.{json,png}` (prompts: data/ruler.py; grid and scoring:
eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class NiahMultikey(Retrieval):
  """eval.suites=niah_multikey: settings in eval.niah_multikey (the needle's fields and
  num_keys); the haystack is eval.split's documents."""

  names = ("niah_multikey",)
