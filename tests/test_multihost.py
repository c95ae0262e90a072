"""Multi-host start-up for real: train.py and eval.run as two JAX processes on this machine.

Each process has 2 CPU devices; they join one 4-device cluster with `--coordinator_address`
(what a TPU pod or SLURM gives through `jax.distributed.initialize()` detection), as a pod runs
one process per host. Process 0 alone writes config.json, metrics and eval files and prints the
report; Orbax writes the checkpoint from both.
"""

import json
import os
import socket

from conftest import tiny_config, write_config_file
from test_faults import ROOT, env_for
import forked


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def run_two_processes(args: list[str], env: dict, timeout: float = 600) -> list[tuple[int, str]]:
  """Runs `python <args>` as processes 0 and 1 of a 2-process cluster; [(returncode, output)]."""
  coordinator = f"--coordinator_address=localhost:{free_port()}"
  procs = [forked.Process([*args, coordinator, "--num_processes=2", f"--process_id={i}"],
                          cwd=ROOT, env=env) for i in range(2)]
  try:
    outputs = ["".join(p.communicate(timeout=timeout)) for p in procs]  # stdout, then stderr
    return [(p.returncode, out) for p, out in zip(procs, outputs)]
  finally:
    for p in procs:
      p.kill()


def test_two_processes_train_and_evaluate(text_corpus, tmp_path):
  c = tiny_config(text_corpus, "alibi")
  c.train.num_steps = 6
  c.train.checkpoint_every_steps = 3
  c.eval.length_multipliers = (1.0, 2.0)
  c.mesh.data, c.mesh.fsdp = 2, 2  # both processes' devices in every step
  config = write_config_file(str(tmp_path / "config.py"), c)
  workdir = str(tmp_path / "run")
  env = env_for(2, str(tmp_path / "cache"))

  (rc0, out0), (rc1, out1) = run_two_processes(
      ["train.py", f"--config={config}", f"--workdir={workdir}"], env)
  assert rc0 == 0 and rc1 == 0, out0[-3000:] + out1[-3000:]
  assert "mesh {'data': 2, 'fsdp': 2, 'context': 1, 'tensor': 1}" in out0  # 4 devices over 2 processes
  assert "final validation loss" in out0 and "ppl at" in out0
  assert "final validation loss" not in out1 and "model:" not in out1  # reported once
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["num_devices"] == 4
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    steps = [json.loads(line)["step"] for line in f if '"loss"' in line]
  assert steps == [1, 2, 3, 4, 5, 6]  # one writer: no step twice
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6"]
  with open(os.path.join(workdir, "eval", "ppl_vs_length.json")) as f:
    rows = json.load(f)["rows"]
  assert [r["length"] for r in rows] == [32, 64] and all(r["ppl"] > 1 for r in rows)

  (rc0, out0), (rc1, out1) = run_two_processes(
      ["-m", "eval.run", f"--workdir={workdir}", "--config.eval.protocol=sliding",
       "--config.eval.stride=0", "--config.eval.suites=ppl_vs_length"], env)
  assert rc0 == 0 and rc1 == 0, out0[-3000:] + out1[-3000:]
  assert "ppl_vs_length_sliding:" in out0 and "wrote" in out0
  assert "ppl_vs_length_sliding" not in out1 and "wrote" not in out1
  with open(os.path.join(workdir, "eval", "ppl_vs_length_sliding.json")) as f:
    sliding = json.load(f)["rows"]
  assert [r["length"] for r in sliding] == [32, 64]

  # The same evaluation by one process with all 4 devices gives the same numbers.
  one = forked.run(["-m", "eval.run", f"--workdir={workdir}", "--config.eval.protocol=sliding",
                   "--config.eval.stride=0", "--config.eval.suites=ppl_vs_length"], cwd=ROOT,
                   env=env_for(4, env["JAX_COMPILATION_CACHE_DIR"]), timeout=600)
  assert one.returncode == 0, one.stderr[-3000:]
  with open(os.path.join(workdir, "eval", "ppl_vs_length_sliding.json")) as f:
    single = json.load(f)["rows"]
  for a, b in zip(sliding, single):
    assert a["tokens"] == b["tokens"] and abs(a["nll"] - b["nll"]) < 1e-5, (a, b)
