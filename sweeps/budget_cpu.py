"""How long the tiny model must train on plain text before its validation loss flattens.

The headline study (issue: findings a researcher can cite) compares schemes "at a budget long
enough that validation loss has flattened"; the context-extension parents' 900 steps are not
(RoPE's validation loss 2.008, 1.783, 1.686 at steps 300, 600, 900: still falling at 4.5 tokens
per parameter). This study measures it: configs/alibi_tiny.py (0.82M parameters, Shakespeare
bytes only, train_len 256, 16 x 256 tokens per step, learning rate 3e-3, 50 warmup steps, cosine
decay to the last step) trained for 3,600 steps (14.7M tokens, about 3.6 epochs of the training
plays), validation loss every 150 steps, for RoPE (the scheme that fits fastest in the committed
runs) and NoPE (the slowest: 12.7 against 7.4 at 1x in pe_extrapolation_cpu), seed 0 each.
The final evaluation (non-overlapping windows, 0.5x..4x, loss by position) gives NoPE's gap at
this budget.

One cosine schedule of 3,600 steps is not four schedules of 900, 1,800, 2,700 and 3,600: the loss
at step 900 of this run is higher than a 900-step run's (whose learning rate has decayed by
then). Read the curve for where it stops falling, not as the loss of shorter budgets.

  python -m sweeps.launch sweeps/budget_cpu.py --backend=local --root=workdirs/sweeps --parallel=2
  python -m sweeps.collect workdirs/sweeps/budget_cpu

Time: 14.7M tokens per run. Two runs side by side train about 3,300 tokens/s each on 2 free
cores (measured with pe_extrapolation_cpu), so about 75 min for the study. Run on 2026-12-07
from 02:31 UTC, stopped (SIGSTOP) during two 20-minute test-suite runs and sharing the cores with
a third and with a new user's trial: 2.5 h of wall time; steps took 1.3-2 s side by side with
other work, about 1 s without. Results: results/budget_cpu.md.
"""

from sweeps.study import Study, cross, product, zip_

SCHEMES = ("rope", "none")
SEEDS = zip_(seed=[0], **{"data.shuffle_seed": [0]})


def points() -> list[dict]:
  """One run per scheme of SCHEMES, seed 0."""
  return cross(SEEDS, product(**{"model.position.kind": list(SCHEMES)}))


STUDY = Study(
    name="budget_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={
        "train.num_steps": 3600,
        "train.eval_every_steps": 150,
        "train.checkpoint_every_steps": 900,
        "eval.length_multipliers": (0.5, 1.0, 2.0, 4.0),
        "eval.suites": "ppl_vs_length,loss_by_position",
    },
    description="RoPE and NoPE, 3,600 steps of the tiny model on plain text, validation loss "
                "every 150 steps: where it flattens; about 75 min on 2 free cores",
)
