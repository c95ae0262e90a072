"""PNG figures from the JSON results (matplotlib, Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from eval.files import atomic_write  # noqa: E402


def plot_ppl_vs_length(result: dict, path: str) -> None:
  """Log perplexity vs evaluation length (log2 x axis), train length marked.

  Args:
    result: a `ppl_vs_length` result dict (see eval/perplexity.py): needs "rows" with "length"
      and "ppl", "train_len", and optionally "scheme" and "step".
    path: output .png path (written atomically).
  """
  rows = [r for r in result["rows"] if r.get("ppl") is not None]
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  ax.plot([r["length"] for r in rows], [r["ppl"] for r in rows], marker="o",
          label=result.get("scheme", "model"))
  ax.axvline(result["train_len"], color="gray", linestyle="--", label=f"train_len={result['train_len']}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
  ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
  ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%.3g"))
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel("perplexity (per byte token)")
  ax.set_title(f"Perplexity vs length ({result.get('split', '')}, step {result.get('step', '?')})")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend()
  fig.tight_layout()
  atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
  plt.close(fig)
