"""Position coupling against plain position ids on addition, 3 seeds, on 2 CPU cores (issue 46).

Task: `configs/task_addition_coupled.py` (Cho et al., arXiv 2405.20671's format, task
`addition_reversed_answer`: operands most-significant digit first, zero-padded to n digits, the
(n + 1)-digit sum reversed), trained on 1..30 digits per operand, exact match at every size
1..100 digits (50 held-out problems per size), a 1-layer decoder (d_model 128), 3,000 steps of 64
problems. Six configurations, each the run `python train.py
--config=configs/task_addition_coupled.py` gives with these overrides:

  none, rope, alibi, fire     plain position ids 0..n-1 (data.task.position_coupling="")
  coupled (learned)           the paper's: coupled ids read by a learned absolute table,
                              random training start (data/position_coupling.py)
  coupled (rope)              the same coupled ids rotated by RoPE instead of a table

The comparison a reader wants: does the coupled layout carry the 30-digit training to 100 digits
where the plain schemes stop near 30, and does it need the learned table? Seeds 0, 1, 2 (the
initialisation `seed` and the training problems' `data.task.seed` together), so configurations
are compared paired by seed (sweeps.findings kind=paired) with a t-interval of the paired
difference, n = 3. The paper trains 50,000 steps at d_model 512; 3,000 steps at d_model 128 is
what two cores allow, so a failure here is a statement about this budget, not about the method.

  python -m sweeps.launch sweeps/coupled_addition_cpu.py --backend=local --root=workdirs/sweeps --parallel=2 \\
      --published=results   # committed runs count as complete (docs/sweeps.md)
  python -m sweeps.publish workdirs/sweeps/coupled_addition_cpu results/coupled_addition_cpu
  python -m sweeps.collect results/coupled_addition_cpu

Cost, measured on 2026-12-07 (the 2-core AMD EPYC machine, two runs side by side, training and
the exact-match evaluation at 100 sizes): 11-13 min per run, FIRE 22-23 min, about 2 h for the
18 runs. Committed run by run in results/coupled_addition_cpu/ (page:
results/coupled_addition_cpu.md).
"""

from sweeps.study import Study, cross, zip_

PLAIN_SCHEMES = ("none", "rope", "alibi", "fire")
SEEDS = zip_(seed=[0, 1, 2], **{"data.task.seed": [0, 1, 2]})


def points() -> list[dict]:
  """Every (seed, configuration) run: the four plain schemes, then the two coupled ones."""
  plain = [{"model.position.kind": kind, "data.task.position_coupling": "",
            "model.position.max_len": -1} for kind in PLAIN_SCHEMES]
  coupled = [{"model.position.kind": "learned", "data.task.position_coupling": "addition"},
             {"model.position.kind": "rope", "data.task.position_coupling": "addition",
              "model.position.max_len": -1}]
  return cross(SEEDS, plain + coupled)


STUDY = Study(
    name="coupled_addition_cpu",
    config="configs/task_addition_coupled.py",
    points=points,
    description="position coupling (learned, rope) vs none/rope/alibi/fire on plain ids, "
                "addition trained 1..30 digits, exact match 1..100, 3 seeds; about 2 h on "
                "2 free cores",
)
