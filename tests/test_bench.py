"""bench/vs_pytorch.py: bad flags refused in one line; a one-step run prints our row (and the
PyTorch reference's, with the ratio, where PyTorch is installed)."""

import os
import re
import subprocess
import sys

from conftest import FAST_COMPILE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def vs_pytorch(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=FAST_COMPILE)
  return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "vs_pytorch.py"), *args],
                        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_vs_pytorch_refuses_bad_flags_and_prints_its_rows():
  bad = vs_pytorch("--shapes=huge")
  assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1] == (
      "--shapes takes a non-empty list from ['default', 'wide', 'long']; got ['huge']")
  run = vs_pytorch("--shapes=default", "--schemes=alibi", "--steps=1", "--warmup=0", "--rounds=1")
  assert run.returncode == 0, run.stderr[-2000:]
  ours = re.search(r"^\| default \(16 x 256\) \| ours, `alibi` \| ([\d,]+) \| ([\d.]+) \| "
                   r"([\d,]+) \|", run.stdout, re.M)
  assert ours, run.stdout
  # 259 x 128 tied embedding + 4 x (4 x 128^2 + 2 x 128 x 512 + 2 RMSNorms of 128) + 128
  assert int(ours.group(1).replace(",", "")) == 820_736
  tokens_per_s = 16 * 256 / (float(ours.group(2)) / 1e3)  # from ms/step, printed to 0.1 ms
  assert abs(tokens_per_s / float(ours.group(3).replace(",", "")) - 1) < 2e-3
  try:
    import torch  # noqa: F401
    # the same + nanoGPT's 256 x 128 position table
    assert re.search(r"^\| default \(16 x 256\) \| PyTorch \(nanoGPT\) \| 853,504 \|", run.stdout,
                     re.M) and "x |" in run.stdout
  except ImportError:
    assert "PyTorch is not installed" in run.stdout
