"""What a run is on disk and across hosts.

A run is a workdir: `config.json` (the resolved config, its hash, the parameter count, the mesh),
`metrics.jsonl`, `training_curves.png` and `tensorboard/`, `checkpoints/<step>/` (params,
optimizer state, step, the grain iterator) and `eval/<suite>[<suffix>].{json,png}`. `train.py`, `eval/run.py`, the sweeps
and the notebooks read and write runs through this package only:

  workdir.py      check/make a workdir, config.json, the config hash, load a run's config
  checkpoint.py   the Orbax manager, restore_latest with fallback, params-only restore
  metrics.py      metrics.jsonl + TensorBoard + training_curves.png (chief only), truncation on
                  resume, token units
  wandb_log.py    optional Weights & Biases logging of the same records (train.wandb_project)
  distributed.py  jax.distributed start-up, chief-only printing, the multi-process flags
"""
