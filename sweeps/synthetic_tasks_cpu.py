"""Schemes on four synthetic tasks, on 2 CPU cores: NoPE, ALiBi and RoPE x {MQAR, flip-flop,
addition on a grid of operand lengths, RULER's multi-key needle}, one seed (issue 21's study).

Each task runs its own config file (a per-point base config, sweeps/study.py "@base") at that
config's defaults, with only the scheme changed:

  configs/task_mqar.py           MQAR, train on 1..8 key-value pairs, exact match at 1..32
                                 (2 layers, 2,000 steps of 64 examples)
  configs/task_flip_flop.py      flip-flop, 1..16 instructions, exact match at 1..64
                                 (2 layers, 1,500 steps of 64 examples)
  configs/task_addition_grid.py  addition, both operands 1..5 digits, exact match on the
                                 1..15 x 1..15 grid (3 layers, 3,000 steps of 64 problems)
  configs/niah_multikey_tiny.py  text + niah_multikey prompts (2 keys, noise haystack), train_len
                                 512, the length x depth grid at 1x..4x (4 layers, 1,500 steps
                                 of 8 x 512 tokens)

so a cell of this study is the run `python train.py --config=<file>
--config.model.position.kind=<scheme>` gives. The schemes are NoPE (no positions: the floor),
ALiBi (a fixed recency bias) and RoPE (rotations): the three families the length-generalization
papers compare first. One seed (`seed` 0, the configs' data seeds): the study states its spread
only through the per-cell example counts (100 examples per task size, 50 per addition cell, 5
prompts per needle cell).

Launch (resumes when run again), collect, report:

  python -m sweeps.launch sweeps/synthetic_tasks_cpu.py --backend=local --parallel=2
  python -m sweeps.collect workdirs/sweeps/synthetic_tasks_cpu
  python -m sweeps.report workdirs/sweeps/synthetic_tasks_cpu

Planned wall time on 2 free cores, from the single runs of results/README.md (MQAR 3.5 min,
flip-flop 3.2 min, addition grid 6.4 min per scheme, niah_multikey about 11 min): about 72 min
one run at a time; the measured time is in results/README.md.
"""

from sweeps.study import Study, cross, product

SCHEMES = ("none", "alibi", "rope")
# longest runs first, so that two runs side by side (--parallel=2) finish together
TASK_CONFIGS = ("configs/niah_multikey_tiny.py", "configs/task_addition_grid.py",
                "configs/task_mqar.py", "configs/task_flip_flop.py")


def points() -> list[dict]:
  """Every (task config, scheme) run, a task's three schemes together."""
  return cross([{"@base": c} for c in TASK_CONFIGS],
               product(**{"model.position.kind": list(SCHEMES)}))


STUDY = Study(
    name="synthetic_tasks_cpu",
    config="configs/task_mqar.py",  # each point names its own (@base); this one is unused
    points=points,
    description="none/alibi/rope x MQAR, flip-flop, addition grid, niah_multikey (2 keys), "
                "one seed, each task at its config's defaults; about 72 min on 2 free cores",
)
