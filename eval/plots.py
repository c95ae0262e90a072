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


def plot_loss_by_position(result: dict, path: str) -> None:
  """Mean NLL vs token position in the window, one line per evaluation length, train_len marked.

  The x axis is the context a token is predicted from, position + 1 tokens (log2 scale); each
  bin is drawn at the geometric mean of its first and last context size. Under the sliding
  protocol (Press et al., arXiv 2108.12409, Section 4) with stride S < L, positions below L - S
  come from each document's first window only.

  Args:
    result: a `loss_by_position` result dict (see train.evaluate_ppl): needs "rows", each with
      "length" and "bins" (start, end exclusive, tokens, nll in nats per token), "train_len", and
      optionally "scheme", "protocol", "stride", "split" and "step".
    path: output .png path (written atomically).
  """
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  for row in result["rows"]:
    bins = [b for b in row.get("bins", []) if b.get("nll") is not None and b["tokens"] > 0]
    if not bins:
      continue
    x = [((b["start"] + 1) * b["end"]) ** 0.5 for b in bins]
    stride = row.get("stride")
    label = f"L={row['length']}" + (f", S={stride}" if stride not in (None, row["length"]) else "")
    ax.plot(x, [b["nll"] for b in bins], marker=".", label=label)
  ax.axvline(result["train_len"], color="gray", linestyle="--",
             label=f"train_len={result['train_len']}")
  ax.set_xscale("log", base=2)
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.set_xlabel("context tokens (position in window + 1)")
  ax.set_ylabel("NLL (nats per byte token)")
  ax.set_title(f"Loss by position: {result.get('scheme', 'model')}, {result.get('protocol', '')} "
               f"({result.get('split', '')}, step {result.get('step', '?')})", fontsize=9)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
  plt.close(fig)
