"""RULER's niah_multivalue (Hsieh et al., arXiv 2404.06654, Section 3.1): every value of one key's num_values needles (4 by default, as RULER), all asked at once, in held-out text
of eval.split, scored by recall of every value (RULER's string_match_all), on the needle grid of
lengths x depths, `<workdir>/eval/niah_multivalue.{json,png}` (prompts: data/ruler.py
MultiNeedlePrompts; grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class NiahMultivalue(Retrieval):
  """eval.suites=niah_multivalue: settings in eval.niah_multivalue (the needle's fields and num_values)."""

  names = ("niah_multivalue",)
