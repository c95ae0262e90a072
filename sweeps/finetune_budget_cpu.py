"""The fine-tuning-budget question: is fine-tuned PI worse than plain extrapolation, or only slower?

results/context_extension_cpu.md found PI fine-tuned at 4L worse than plain extrapolation after
90 steps, while PI's training loss was still falling fast. This study fine-tunes long enough to
tell, and evaluates on the **test** split (the LongRoPE search and the training runs' validation
use the validation plays):

  * **Parents**: configs/alibi_tiny.py with RoPE, L = 256, 900 steps, seeds 0, 1, 2 (the
    initialisation `seed` and the data order `data.shuffle_seed` together). Each is also
    evaluated on the test split at L and 4L as trained and with PI and YaRN at s = 4 applied at
    evaluation only: the fine-tuning curves' step 0.
  * **Budget children** (configs/extend_{extrapolation,pi,yarn}.py at s = 4: train_len 4L =
    1,024, 4 x 1,024 tokens per step, the parent's peak learning rate / 15 after 4 warmup
    steps (5% of the recipe's 90, rounded), then **constant**, no weight decay): **720 steps**
    instead of the recipes' 90 (80% of the parent's tokens), a checkpoint every 45 steps (all
    16 kept), each of steps 45, 90, 180, 360 and 720 evaluated on the test split at L and 4L
    (`eval.step`: files `*_step<N>.json`). With a constant learning rate after warmup, the
    checkpoint at step N is the model a run of N steps would be, up to the data order.
  * **YaRN within its claim**: YaRN children at s = 8 and s = 16 fine-tuned at 4L (the recipe's
    budget, 90 steps of 4 x 1,024) and evaluated at 8L and 16L on the test split, where the paper
    says a factor-s model works (Peng et al., arXiv 2309.00071: up to s L).
  * **LongRoPE, searched on validation, scored on test**: the factor search
    (sweeps/longrope_search.py, on the validation split) for each parent, its child at s = 4 (90
    steps), evaluated on the test split at L..16L.

Findings compare methods **paired by seed** (each child shares its parent's seed): the mean
paired difference of perplexity at L and at 4L with its t-interval over the 3 seeds
(`sweeps.findings` kind=paired), and the curves of perplexity against fine-tuning steps.

  python -m sweeps.launch sweeps/finetune_budget_cpu.py --backend=local --root=workdirs/sweeps --parallel=2 \\
      --published=results   # committed runs count as complete (docs/sweeps.md)
  python -m sweeps.collect workdirs/sweeps/finetune_budget_cpu

Cost, measured on 2026-12-07 (AMD EPYC, 2 cores, --parallel=2, little other load): each
parent about 11 min of its slot with its evaluations, each 720-step child 11-13 min with its five
checkpoint evaluations, the short children a few minutes each; the 19 runs took 1 h 13 min of
wall time. Resumable: each run restarts from its last checkpoint.
"""

from sweeps.study import Study, cross, zip_

SEEDS = zip_(seed=[0, 1, 2], **{"data.shuffle_seed": [0, 1, 2]})
FACTOR = 4
L = 256
BUDGET_METHODS = ("extrapolation", "pi", "yarn")
BUDGET_STEPS = 720
EVAL_STEPS = (45, 90, 180, 360, 720)
YARN_FACTORS = (8, 16)
TEST = {"eval.split": "test", "eval.suites": "ppl_vs_length"}  # with eval.step: tagged files, kept
# beside train.py's final evaluation on the validation split


def _child(parent: dict, method: str, factor: int, fields: dict | None = None) -> dict:
  """The point of `method`'s child of `parent` at s = factor (configs/extend_<method>.py), with
  `fields` (train or eval overrides)."""
  point = {"@parent": parent, "@config": f"configs/extend_{method}.py:{{parent}},{factor}",
           **(fields or {})}
  if method == "longrope":  # its recipe reads the factors the search writes in the parent
    point["@before"] = [["{python}", "-m", "sweeps.longrope_search", "--workdir={parent}",
                         f"--target_len={factor * L}"]]
    point["@plan_config"] = f"configs/extend_pi.py:{{parent}},{factor}"
  return point


def points() -> list[dict]:
  """Parents (with their step-0 test evaluations), then per parent the budget children with an
  evaluation point per checkpoint, the YaRN s = 8 / 16 children and the LongRoPE child."""
  parents = cross(SEEDS, [{"model.position.kind": "rope"}])
  out = []
  for parent in parents:
    out += [parent, {**parent, **TEST, "eval.step": 900, "eval.length_multipliers": (1.0, 4.0),
                     "eval.extension": "none,pi,yarn", "eval.factor": float(FACTOR)}]
  budget = {"train.num_steps": BUDGET_STEPS, "train.checkpoint_every_steps": 45,
            "train.max_to_keep": BUDGET_STEPS // 45}
  for parent in parents:
    for method in BUDGET_METHODS:
      run = _child(parent, method, FACTOR, budget)
      out.append(run)  # train.py's own final evaluation (validation split, L/2..16L... of 4L)
      out += [{**run, **TEST, "eval.step": step, "eval.length_multipliers": (0.25, 1.0)}
              for step in EVAL_STEPS]
    for factor in YARN_FACTORS:  # fine-tuned at 4L, evaluated up to s L
      run = _child(parent, "yarn", factor, {
          "data.train_len": FACTOR * L, "data.batch_size": 4, "train.num_steps": 90})
      out += [run, {**run, **TEST, "eval.step": 90,
                    "eval.length_multipliers": (0.25, 1.0, 2.0, 4.0)}]  # L..16L of 4L
    run = _child(parent, "longrope", FACTOR)
    out += [run, {**run, **TEST, "eval.step": 90}]
  return out


STUDY = Study(
    name="finetune_budget_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={"eval.length_multipliers": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)},
    description="3 RoPE parents -> extrapolation / PI / YaRN at s=4 fine-tuned 720 steps, test "
                "perplexity at L and 4L at steps 45..720; YaRN s=8/16 at 4L; LongRoPE searched on "
                "validation, scored on test; about 1.5 h on 2 free cores",
)
