"""Sweeps: a study is data (a base config and a list of override dicts), launched and collected.

  sweeps/study.py      the `Study` type, `product` / `zip_` / `cross`, run names, overrides,
                       and the plan of each run (train.py command, eval.run commands, the
                       result files that make it complete)
  sweeps/launch.py     `python -m sweeps.launch <study> --backend=local|tpu|slurm --root=<dir>`
  sweeps/collect.py    `python -m sweeps.collect <root>/<study>`: one tidy results table
  sweeps/<study>.py    the studies themselves, e.g. pe_extrapolation_cpu.py
"""
