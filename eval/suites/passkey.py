"""The passkey grid (Mohtashami & Jaggi, arXiv 2305.16300, as used by PI, arXiv 2306.15595):
a 5-digit key inside repeated filler at each depth and length, `<workdir>/eval/passkey.{json,png}`
(prompts: data/passkey.py; grid and scoring: eval/needle.py)."""

from eval.suites.retrieval import Retrieval


class Passkey(Retrieval):
  """eval.suites=passkey: settings in eval.passkey, prompt format in data.passkey."""

  names = ("passkey",)
