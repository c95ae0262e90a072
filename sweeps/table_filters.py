"""Row filters on a study's results table, written `column=value` (`column=a,b,c`: any of them;
`column=` an empty cell), as the findings pages' table blocks (sweeps/findings.py) and
`python -m sweeps.figures --where` (sweeps/figures.py) take them."""

from __future__ import annotations

import difflib
import math

import pandas as pd

from configs.errors import ConfigError


def parse_filters(words: list[str]) -> dict[str, str]:
  """{column: value} of `column=value` words.

  Raises:
    ConfigError: a word has no `=` or an empty column name.
  """
  filters = {}
  for word in words:
    column, eq, value = word.partition("=")
    if not eq or not column:
      raise ConfigError(f"filter {word!r}: write column=value or column=a,b,c")
    filters[column] = value
  return filters


def _equal(cell, value: str) -> bool:
  if cell is None or (isinstance(cell, float) and math.isnan(cell)):
    return value == ""
  try:
    return float(cell) == float(value)
  except (TypeError, ValueError):
    return str(cell) == value


def select(frame: pd.DataFrame, filters: dict[str, str]) -> pd.DataFrame:
  """The rows of `frame` matching every `column=value` filter (`column=a,b,c`: any of them).

  Raises:
    ConfigError: a filter names a column the table lacks, or keeps no row.
  """
  for column, value in filters.items():
    if column not in frame.columns:
      near = difflib.get_close_matches(column, [str(c) for c in frame.columns], n=3)
      hint = f"; did you mean {', '.join(near)}?" if near else ""
      raise ConfigError(f"filter {column}={value}: the table has no column {column!r}{hint}")
    allowed = value.split(",")
    frame = frame[[any(_equal(c, v) for v in allowed) for c in frame[column]]]
  if frame.empty:
    raise ConfigError(f"the filters {filters} keep no row of the table")
  return frame
