"""RULER's variable tracking (Hsieh et al., arXiv 2404.06654, Section 3.2, "vt"): chains of
`VAR X = VAR Y` assignments hidden in held-out text of eval.split; the model lists every
variable of the queried chain, scored by recall of all of them (RULER's string_match_all), on a
grid of lengths x depths of the chain's first statement, `<workdir>/eval/variable_tracking.
{json,png}` (prompts: data/variable_tracking.py VariableTrackingPrompts; grid and scoring:
eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class VariableTracking(Retrieval):
  """eval.suites=variable_tracking: settings in eval.variable_tracking (depths, trials, seed,
  threshold, max_new_tokens, preamble, num_chains, num_hops)."""

  names = ("variable_tracking",)
