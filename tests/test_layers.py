"""The house rules a reader relies on: imports point down the layer order stated in
docs/architecture.md, no module outgrows 600 lines unless that page names it as one idea, the
README stays short, and every relative link in README.md, docs/ and results/ resolves."""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")
SKIP = {"tests", "bench", "notebooks", "results", "docs", "workdirs", "build"}
MAX_MODULE_LINES = 600
MAX_README_LINES = 250


def project_modules() -> dict[str, str]:
  """{dotted module name: path} of every project module (tests, bench, notebooks excluded)."""
  out = {}
  for folder, dirs, files in os.walk(ROOT):
    dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.startswith((".", "__")))
    for name in files:
      if name.endswith(".py"):
        rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
        out[rel.removesuffix(".__init__")] = os.path.join(folder, name)
  return out


def imports(module: str, path: str, mods: dict[str, str]) -> set[str]:
  """The project modules `module` imports, at any depth of its source (function-level imports
  count), resolved to the longest module name that exists."""
  def resolve(name):
    while name and name not in mods:
      name = name.rpartition(".")[0]
    return name
  package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      targets = [base] + [f"{base}.{a.name}" for a in node.names]
    else:
      continue
    found |= {r for r in map(resolve, targets) if r and r != module}
  return found


def stated_layers() -> list[str]:
  """The layer order of docs/architecture.md, lowest first: its line "Layer order: `a`, `b`,
  ...". The page is the one statement of it; this test reads it rather than repeating it."""
  text = open(ARCHITECTURE, encoding="utf-8").read()
  line = re.search(r"^Layer order, lowest first: (.+)$", text, re.M)
  assert line, "docs/architecture.md has no 'Layer order, lowest first: ...' line"
  return re.findall(r"`([\w.]+)`", line.group(1))


def layer_of(module: str, order: list[str]) -> int | None:
  """The index of the longest prefix of `module` named in `order` (None: not placed)."""
  parts = module.split(".")
  for k in range(len(parts), 0, -1):
    if ".".join(parts[:k]) in order:
      return order.index(".".join(parts[:k]))
  return None


def test_every_module_has_a_layer_and_no_import_runs_up_the_order():
  order = stated_layers()
  mods = project_modules()
  unplaced = sorted(m for m in mods if layer_of(m, order) is None)
  assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
  upward = sorted(f"{m} -> {d}" for m, path in mods.items() for d in imports(m, path, mods)
                  if layer_of(d, order) > layer_of(m, order))
  assert not upward, "imports running up the layer order:\n" + "\n".join(upward)


def test_the_layer_check_catches_an_upward_import(tmp_path):
  """The checker itself: a data module importing eval is flagged (this test can fail)."""
  order = stated_layers()
  path = tmp_path / "fake.py"
  path.write_text("def f():\n  from eval.suites import REGISTRY\n")
  mods = {**project_modules(), "data.fake": str(path)}
  found = imports("data.fake", str(path), mods)
  assert "eval.suites" in found
  assert layer_of("eval.suites", order) > layer_of("data.fake", order)


def test_nothing_imports_the_entry_points():
  mods = project_modules()
  users = sorted(m for m, p in mods.items() if {"train", "eval.run"} & imports(m, p, mods))
  assert not users, f"entry points are imported by {users}"


def test_long_modules_are_named_as_one_idea_in_the_architecture_page():
  text = open(ARCHITECTURE, encoding="utf-8").read()
  long = {m: sum(1 for _ in open(p, encoding="utf-8")) for m, p in project_modules().items()}
  long = {m: n for m, n in long.items() if n > MAX_MODULE_LINES}
  unexplained = sorted(f"{m} ({n} lines)" for m, n in long.items()
                       if f"`{m.replace('.', '/')}.py`" not in text.split("## One idea")[-1])
  assert not unexplained, (f"modules over {MAX_MODULE_LINES} lines that docs/architecture.md "
                           f"does not name as one idea: {unexplained}")


def test_readme_is_short():
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    n = sum(1 for _ in f)
  assert n <= MAX_README_LINES, f"README.md has {n} lines; move reference material to docs/"


def markdown_files() -> list[str]:
  out = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "RESULTS.md")]
  for top in ("docs", "results"):
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
      out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
  return out


def github_anchors(path: str) -> set[str]:
  """The anchors GitHub gives the headings of a markdown file: lower case, punctuation but `-`
  and `_` dropped, spaces as `-`, repeats numbered -1, -2, ... (code blocks skipped)."""
  anchors, seen, fenced = set(), {}, False
  for line in open(path, encoding="utf-8"):
    if line.startswith("```"):
      fenced = not fenced
    heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
    if fenced or not heading:
      continue
    slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    anchors.add(slug if n == 0 else f"{slug}-{n}")
  return anchors


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_resolves(path):
  text = open(path, encoding="utf-8").read()
  text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are examples
  broken = []
  for target in LINK.findall(text):
    if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
      continue
    file, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
    if not os.path.exists(resolved):
      broken.append(f"{target} (no such file)")
    elif anchor and resolved.endswith(".md") and anchor not in github_anchors(resolved):
      broken.append(f"{target} (no heading with that anchor)")
  assert not broken, f"{os.path.relpath(path, ROOT)}: " + "; ".join(broken)


def test_github_anchors_follow_githubs_rule(tmp_path):
  page = tmp_path / "p.md"
  page.write_text("# Addition on a grid (`results/x_cpu/`)\n## Weights & Biases\n## A\n## A\n"
                  "```\n# not a heading\n```\n")
  assert github_anchors(str(page)) == {"addition-on-a-grid-resultsx_cpu", "weights--biases",
                                       "a", "a-1"}
