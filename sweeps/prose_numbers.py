"""Every decimal number a findings page writes in its prose is one its committed data hold.

A findings page (`results/<study>.md`) is prose around table blocks that `sweeps.findings` renders
from committed tables. The tables cannot drift from the data (`python -m sweeps.findings --check`);
this module checks the prose: each decimal number written outside the table blocks must equal, at
the precision it is written with, a number of

  * a rendered table of the same page (its cells: means, interval ends, paired differences), or
  * a committed file the page links to (`[...](file.json)`, `.jsonl` or `.csv`, relative to the
    page): every number in it, e.g. the n-gram reference's perplexities, a run's grid.

Only these: a page does not draw on whole run folders (thousands of logged numbers, among which
almost any two-decimal number occurs). A number from a run's metrics.jsonl is quoted from a
`kind=curve` table of the page.

"Equal at the precision written" means |v| rounds to it: 1.464 matches 1.4637 and -1.4641, not
1.4626. A difference, ratio or percentage computed by hand matches nothing and is reported: write
the two quoted values instead, or render the derived number in a table (kind=paired, kind=context_use).

What is not checked, by design: integers (steps, seeds, lengths, counts such as "53 of 55" are
setup or exact counts; a test can check the counts a page relies on), numbers inside inline code
or fenced code (`3e-3`, commands), arXiv identifiers (dddd.ddddd), and anything inside an HTML
comment. A number the rule flags but which is not a result (a setup ratio such as "4.5 tokens per
parameter") is written in inline code, where a reader sees it is a configuration value.

  python -m sweeps.prose_numbers results/*.md    # one line per unsourced number, exit 1 if any
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys

from sweeps.findings import BLOCK

DECIMAL = re.compile(r"(?<![\w./=+])(\d+\.\d+)(?!\w|\.\d)")  # ends of ranges too; 0.10.2 not
ARXIV = re.compile(r"\d{4}\.\d{4,5}")
_HIDDEN = (re.compile(r"```.*?```", re.S),  # fenced code
           re.compile(r"<!--.*?-->", re.S),  # comments (table specs and markers)
           re.compile(r"`[^`\n]*`"),  # inline code: configuration values, commands
           re.compile(r"\]\([^)\s]*\)"))  # link targets
_LINK = re.compile(r"\]\(([^)\s#]+\.(?:json|jsonl|csv))\)")
_CELL_NUMBER = re.compile(r"\d+\.\d+|\d+")


def _blank(match: re.Match) -> str:
  """The match with every character but newlines blanked (line numbers stay right)."""
  return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
  """`text` with its table blocks' bodies, code, comments and link targets blanked out."""
  text = BLOCK.sub(lambda m: m.group(1) + re.sub(r"[^\n]", " ", m.group("body")) + m.group(4), text)
  for pattern in _HIDDEN:
    text = pattern.sub(_blank, text)
  return text


def written_numbers(text: str) -> list[tuple[int, str]]:
  """The decimal numbers of the prose of `text` (see the module docstring), as (1-based line,
  the number as written), arXiv identifiers left out."""
  out = []
  for number, line in ((m.group(1), text.count("\n", 0, m.start()) + 1)
                       for m in DECIMAL.finditer(prose(text))):
    if not ARXIV.fullmatch(number):
      out.append((line, number))
  return out


def _leaves(value) -> list[float]:
  """Every int or float inside a JSON value (bools left out)."""
  if isinstance(value, dict):
    return [x for v in value.values() for x in _leaves(v)]
  if isinstance(value, list):
    return [x for v in value for x in _leaves(v)]
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return [float(value)]
  return []


def _file_numbers(path: str) -> list[float]:
  """Every number of a committed .json, .jsonl or .csv file."""
  with open(path, encoding="utf-8") as f:
    if path.endswith(".json"):
      return _leaves(json.load(f))
    if path.endswith(".jsonl"):
      return [x for line in f if line.strip() for x in _leaves(json.loads(line))]
    out = []
    for row in csv.reader(f):
      for cell in row:
        try:
          out.append(float(cell))
        except ValueError:
          pass
    return out


def sources(page: str, text: str) -> list[float]:
  """The numbers `page`'s prose may quote: its rendered tables' cells and the numbers of the
  committed .json/.jsonl/.csv files it links to.

  Raises:
    FileNotFoundError: a linked data file is missing.
  """
  out = [float(x) for m in BLOCK.finditer(text) for x in _CELL_NUMBER.findall(m.group("body"))]
  folder = os.path.dirname(os.path.abspath(page))
  for link in sorted(set(_LINK.findall(text))):
    out += _file_numbers(os.path.join(folder, link))
  return out


def matches(number: str, values: list[float]) -> bool:
  """Whether some |value| rounds to `number` at its written decimals (half a unit of the last
  digit, plus 1e-9 for binary floating point)."""
  x, digits = float(number), len(number.split(".")[1])
  tol = 0.5 * 10.0 ** -digits + 1e-9
  return any(abs(abs(v) - x) <= tol for v in values)


def unsourced(page: str) -> list[str]:
  """One line `page:line: number` per decimal of `page`'s prose that no source holds."""
  text = open(page, encoding="utf-8").read()
  values = sources(page, text)
  return [f"{page}:{line}: {number}" for line, number in written_numbers(text)
          if not matches(number, values)]


def main(argv: list[str]) -> int:
  """Prints every unsourced number of the pages; exit 1 if any, 2 without pages."""
  if not argv:
    print("usage: python -m sweeps.prose_numbers results/<page>.md ...", file=sys.stderr)
    return 2
  bad = [line for page in argv for line in unsourced(page)]
  print("\n".join(bad) if bad else f"{len(argv)} page(s): every decimal in the prose is sourced")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
