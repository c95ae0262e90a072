"""RULER's frequent words extraction (Hsieh et al., arXiv 2404.06654, Section 3.3, "fwe"): the
three most frequent coded words of a Zipf-distributed text (the noise "..." excepted), scored by
recall of all three (RULER's string_match_all), accuracy vs length (no depth),
`<workdir>/eval/frequent_words.{json,png}` (prompts: data/ruler_words.py FrequentWordsPrompts;
grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class FrequentWords(Retrieval):
  """eval.suites=frequent_words: settings in eval.frequent_words (trials, seed, threshold,
  max_new_tokens, preamble, alpha, word_letters)."""

  names = ("frequent_words",)
