"""RULER's niah_multiquery (Hsieh et al., arXiv 2404.06654, Section 3.1): the values of num_queries keys (4 by default, as RULER), asked in one question, in held-out text
of eval.split, scored by recall of every value (RULER's string_match_all), on the needle grid of
lengths x depths, `<workdir>/eval/niah_multiquery.{json,png}` (prompts: data/ruler.py
MultiNeedlePrompts; grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class NiahMultiquery(Retrieval):
  """eval.suites=niah_multiquery: settings in eval.niah_multiquery (the needle's fields and num_queries)."""

  names = ("niah_multiquery",)
