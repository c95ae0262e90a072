"""RULER's common words extraction (Hsieh et al., arXiv 2404.06654, Section 3.3, "cwe"): the
num_common words listed most often in a shuffled numbered list, scored by recall of all of them
(RULER's string_match_all), accuracy vs length (no depth), `<workdir>/eval/common_words.
{json,png}` (prompts: data/ruler_words.py CommonWordsPrompts; grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class CommonWords(Retrieval):
  """eval.suites=common_words: settings in eval.common_words (trials, seed, threshold,
  max_new_tokens, preamble, num_common, common_repeats, uncommon_repeats)."""

  names = ("common_words",)
