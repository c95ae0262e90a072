"""Every command-line entry point but train.py and eval.run (which have their own tests) answers a
mistake with one line on stderr and exit status 2, before any work: a stray positional argument,
an unknown flag, a flag value of the wrong type or range, a missing required flag, a missing
input, and a write place that is a file or read-only (runs/command_line.py).

Each case is a process of its own running the entry point's `__main__` code with its argv, as
`python -m <module>` or `python bench/<script>.py` would, forked from a warm server
(tests/forked.py: starting ~25 Pythons that each import JAX, pandas and the model code would take
minutes on two cores). One case also runs as a plain `python -m` subprocess, to check that the
forked runs behave as fresh ones do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import forked

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (id, entry point: a module or bench/<file>.py, argv after it, a part of the expected line).
# {file}: a plain file; {ro}: a read-only folder holding page.md; {study}: a study folder with
# one malformed result; {boom}: a study file whose points() raises; {tmp}: a writable folder.
CASES = [
    ("prepare stray argument", "data.prepare", ["corpus"], "unexpected argument(s) ['corpus']"),
    ("prepare out read-only", "data.prepare",
     ["--source={tmp}/*.txt", "--tokenizer=byte", "--out={ro}/corpus"],
     "--out={ro}/corpus cannot be created: {ro} is not writable"),
    ("prepare float flag", "data.prepare", ["--shard_mb=big"],
     "--shard_mb=big: could not convert string to float: 'big'; --shard_mb takes a number"),
    ("collect out is a file", "sweeps.collect", ["{study}", "--out={file}"],
     "--out={file} is a file; give a folder for results.parquet"),
    ("collect missing folder", "sweeps.collect", ["{tmp}/no_study"], "is not a folder"),
    ("report out read-only", "sweeps.report", ["{study}", "--out={ro}/r.html"],
     "--out={ro}/r.html cannot be created: {ro} is not writable"),
    ("report two arguments", "sweeps.report", ["{study}", "{study}"],
     "unexpected argument(s) ['{study}']; usage: python -m sweeps.report"),
    ("launch points raise", "sweeps.launch", ["{boom}", "--root={tmp}/sweeps"],
     "study 'boom' ({boom}, line 5): points() raised ZeroDivisionError: division by zero"),
    ("launch root is a file", "sweeps.launch", ["{boom}", "--root={file}"],
     "--root={file} is a file"),
    ("launch integer flag", "sweeps.launch", ["{boom}", "--parallel=two"],
     "--parallel takes an integer"),
    ("launch misspelled study", "sweeps.launch", ["sweeps/plain_text.py", "--dry_run"],
     "study file 'sweeps/plain_text.py' does not exist; did you mean sweeps/plain_text_cpu.py?"),
    ("launch given a file that is not a study", "sweeps.launch", ["README.md", "--dry_run"],
     "README.md is not a study file (a .py file defining STUDY = Study(...)); sweeps/ holds: "),
    ("findings page without .md", "sweeps.findings", ["results/budget_cpu"],
     "results/budget_cpu: no such page (a findings page is a .md file); did you mean "
     "results/budget_cpu.md?"),
    ("figures misspelled table", "sweeps.figures", ["results/budget_cp", "--figure=x",
                                                    "--out={tmp}/x.png"],
     "no results table at results/budget_cp; did you mean results/budget_cpu/?"),
    ("figures filter on a misspelled column", "sweeps.figures",
     ["results/budget_cpu", "--figure=x", "--out={tmp}/x.png", "--where=num_step=3600"],
     "filter num_step=3600: the table has no column 'num_step'; did you mean num_steps, step, "
     "final_step?"),
    ("figures filter without =", "sweeps.figures",
     ["results/budget_cpu", "--figure=x", "--out={tmp}/x.png", "--where=rope"],
     "filter 'rope': write column=value or column=a,b,c"),
    ("figures unwritable --out", "sweeps.figures",
     ["results/budget_cpu", "--figure=x", "--out={ro}/x.png"],
     "--out={ro}/x.png cannot be created: {ro} is not writable"),
    ("findings given a file that is not a page", "sweeps.findings", ["train.py"],
     "train.py: not a findings page (a .md file with <!-- table ... --> blocks); nothing written"),
    ("findings unknown flag", "sweeps.findings", ["--chek", "{ro}/page.md"],
     "Unknown command line flag 'chek'"),
    ("findings page read-only", "sweeps.findings", ["{ro}/page.md"],
     "page={ro}/page.md: {ro} is not writable"),
    ("longrope stray argument", "sweeps.longrope_search", ["run"], "unexpected argument(s)"),
    ("longrope required flags", "sweeps.longrope_search", [],
     "--workdir (a trained RoPE run) and --target_len (tokens) are required"),
    ("hf_import required flags", "runs.hf_import", [],
     "flag --hf=None: Flag --hf must have a value other than None."),
    ("hf_import missing folder", "runs.hf_import", ["--hf={tmp}/no_model", "--workdir={tmp}/r"],
     "no_model"),
    ("hf_export out is a file", "runs.hf_export", ["--workdir={tmp}", "--out={file}"],
     "--out={file} is a file"),
    ("hf_export bad step", "runs.hf_export", ["--workdir={tmp}", "--out={tmp}/x", "--step=last"],
     "--step takes an integer"),
    ("attention stray argument", "bench/attention.py", ["xla"], "unexpected argument(s) ['xla']"),
    ("context_memory lengths", "bench/context_memory.py", ["--lengths=1024,long"],
     "--lengths takes a comma-separated list of integers >= 1; got ['1024', 'long']"),
    ("eval_memory scheme", "bench/eval_memory.py", ["--kind=sinusoids"],
     "flag --kind=sinusoids: value should be one of"),
    ("profile_step trace_dir is a file", "bench/profile_step.py", ["--trace_dir={file}"],
     "--trace_dir={file} is a file"),
    ("remat_memory modes", "bench/remat_memory.py", ["--modes=none,half"],
     "--modes takes a comma-separated list from ['none', 'block', 'full']"),
    ("train_throughput stray argument", "bench/train_throughput.py", ["tiny"],
     "unexpected argument(s) ['tiny']"),
    ("vs_pytorch unknown flag", "bench/vs_pytorch.py", ["--step=3"],
     "Unknown command line flag 'step'"),
]


# ---------------------------------------------------------------------------- the tests


def _read_only_folder(path: str) -> str | None:
  """Makes `path` (holding page.md) read-only: a tmpfs remounted read-only when root (root
  writes through permission bits), else permission bits. None when neither can be had."""
  os.makedirs(path)
  if os.geteuid() != 0:
    with open(os.path.join(path, "page.md"), "w") as f:
      f.write("# a page\n")
    os.chmod(path, 0o555)
    return ""
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", path],
                           capture_output=True)
  if mounted.returncode:
    return None
  with open(os.path.join(path, "page.md"), "w") as f:
    f.write("# a page\n")
  subprocess.run(["mount", "-o", "remount,ro", path], check=True)
  return "mounted"


def test_every_mistake_is_one_line_and_exit_2_before_any_work(tmp_path):
  """Every case of CASES (one test: the read-only mount is made once)."""
  from tests.fake_study import write_fake_study
  places = {"tmp": str(tmp_path), "file": str(tmp_path / "a_file"),
            "ro": str(tmp_path / "read_only"),
            "study": write_fake_study(str(tmp_path), algorithmic=False),
            "boom": str(tmp_path / "boom.py")}
  (tmp_path / "a_file").write_text("not a folder\n")
  (tmp_path / "boom.py").write_text("from sweeps.study import Study\n\ndef points():\n"
                                    "  first = [{'seed': 0}]\n  return first + [{'seed': 1 / 0}]"
                                    "\n\nSTUDY = Study(name='boom', config='configs/alibi_tiny.py', "
                                    "points=points)\n")
  mode = _read_only_folder(places["ro"])
  cases = [c for c in CASES if mode is not None or "{ro}" not in json.dumps(c)]
  before = sorted(os.listdir(tmp_path))
  results = []
  try:
    for _, entry, argv, _ in cases:
      argv = [a.format(**places) for a in argv]
      start = time.monotonic()
      done = forked.run(["-m", entry, *argv] if not entry.endswith(".py") else
                        [os.path.join(ROOT, entry), *argv], cwd=ROOT,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
      results.append({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                      "seconds": time.monotonic() - start})
    assert sorted(os.listdir(tmp_path)) == before  # nothing written beside the inputs
    assert sorted(os.listdir(places["ro"])) == ["page.md"]
  finally:
    if mode == "mounted":
      subprocess.run(["umount", places["ro"]], check=True)
    elif mode == "":
      os.chmod(places["ro"], 0o755)
  wrong = []
  for (case, _, _, expected), r in zip(cases, results):
    lines = r["stderr"].strip().splitlines()
    expected = expected.format(**places)
    if not (r["rc"] == 2 and len(lines) == 1 and lines[0].startswith("error: ") and
            expected in lines[0] and len(lines[0]) < 600 and r["stdout"] == ""):
      wrong.append(f"{case}: exit {r['rc']}, stdout {r['stdout'][-300:]!r}, stderr "
                   f"{r['stderr'][-1500:]!r}; expected one line with {expected!r}")
    elif r["seconds"] > 20:  # the imports are the server's: a slow case worked before refusing
      wrong.append(f"{case}: refused after {r['seconds']:.0f} s")
  assert not wrong, "\n".join(wrong)
  if mode is None:
    pytest.skip("the read-only cases did not run: running as root and tmpfs cannot be mounted")


def test_a_fresh_process_answers_like_a_forked_one(tmp_path):
  """data.prepare (no JAX import) as a plain `python -m` process: the same one line."""
  done = subprocess.run([sys.executable, "-m", "data.prepare", "corpus", "--workers=2"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert (done.returncode, done.stdout) == (2, ""), done.stderr
  assert done.stderr.startswith("error: unexpected argument(s) ['corpus']; usage: python -m "
                                "data.prepare") and done.stderr.count("\n") == 1, done.stderr


def test_check_writable_creates_nothing_and_names_the_flag(tmp_path):
  from configs.errors import ConfigError
  from runs.command_line import check_writable, numbers
  (tmp_path / "f").write_text("x")
  check_writable(str(tmp_path / "new" / "deeper"), "--out")  # creatable: fine
  check_writable(str(tmp_path / "f"), "--out", folder=False)  # a file replaced beside itself
  for path, folder, message in [
      ("f", True, r"^--out=.*/f is a file; give a folder to write to$"),
      ("", False, r"^--out=.* is a folder; give a file path to write$"),
      ("f/sub/r.html", False, r"^--out=.*/f/sub/r.html cannot be created: .*/f is a file$")]:
    with pytest.raises(ConfigError, match=message):
      check_writable(str(tmp_path / path), "--out", folder=folder)
  with pytest.raises(ConfigError, match=r"^--root=gs://b/x: give a local folder path"):
    check_writable("gs://b/x", "--root")
  assert sorted(os.listdir(tmp_path)) == ["f"]  # the probe file is gone too
  if os.path.isdir("/proc/self"):  # access(2) lets root "write" /proc; creating a file fails
    with pytest.raises(ConfigError, match=r"^--out=/proc/self/r.html cannot be created: /proc/self is not writable"):
      check_writable("/proc/self/r.html", "--out", folder=False)
  assert numbers(["1", "2.5"], "--m", float, 0) == [1.0, 2.5]
  for bad in (["0"], [], ["1", "nan"]):
    with pytest.raises(ConfigError, match=r"^--n takes a comma-separated list of integers >= 1"):
      numbers(bad, "--n", int, 1)


def test_what_exists_names_close_files_or_lists_the_folder(tmp_path):
  from configs.errors import what_exists
  for name in ("alibi_tiny.py", "rope_tiny.py", "notes.txt", "_private.py"):
    (tmp_path / name).write_text("")
  (tmp_path / "study_a").mkdir()
  assert what_exists(str(tmp_path / "alibi_tinny.py"), ".py") == (
      f"; did you mean {tmp_path / 'alibi_tiny.py'}?")
  assert what_exists(str(tmp_path / "zzz.py"), ".py") == (
      f"; {tmp_path}/ holds: alibi_tiny.py, rope_tiny.py")
  assert what_exists(str(tmp_path / "zzz.py"), ".py", limit=1) == (
      f"; {tmp_path}/ holds: alibi_tiny.py, ... (1 more)")
  assert what_exists(str(tmp_path / "study_b"), "/") == f"; did you mean {tmp_path / 'study_a'}/?"
  assert what_exists(str(tmp_path / "none" / "x.py"), ".py") == ""  # no such folder
  (tmp_path / "rope_tiny.py").write_text("import x\n\ndef get_config():\n  pass\n")
  assert what_exists(str(tmp_path / "zzz.py"), ".py", holds="\ndef get_config(") == (
      f"; {tmp_path}/ holds: rope_tiny.py")  # helper modules are no configs
