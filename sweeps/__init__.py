"""Sweeps: a study is data (a base config and a list of override dicts), launched and collected.

  sweeps/study.py      the `Study` type, `product` / `zip_` / `cross`, `load_study`
  sweeps/run_plan.py   the plan of each run (train.py command, eval.run commands, the result
                       files that make it complete) and its checks before launch; children
                       in sweeps/child_runs.py, run names in sweeps/run_names.py, overrides in
                       sweeps/overrides.py, result keys in sweeps/result_keys.py
  sweeps/launch.py     `python -m sweeps.launch <study> --backend=local|tpu|slurm --root=<dir>`
  sweeps/collect.py    `python -m sweeps.collect <root>/<study>`: one tidy results table
  sweeps/figures.py    the study figures (`study_figures`; the figures themselves in
                       sweeps/*_figures.py)
  sweeps/<study>.py    the studies themselves, e.g. pe_extrapolation_cpu.py
"""
