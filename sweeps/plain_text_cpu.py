"""The headline study: nine positional schemes on plain text, learning rate tuned per scheme, 3 seeds.

What it answers: on the default corpus (Shakespeare bytes, configs/alibi_tiny.py: 0.82M
parameters, train_len L = 256, 16 x 256 tokens per step, no passkey or task documents), how does
each scheme's perplexity change beyond L, and how much of its context does it use?

  * **Schemes**: none (NoPE), learned, sinusoidal, rope, alibi, t5, kerple_log, fire, xpos.
  * **Tuning stage** (`Search`): every scheme trains once per learning rate in {1e-3, 3e-3,
    1e-2, 3e-2} for 600 steps (seed 0, the config's 50 warmup steps, cosine to 0); the rate with
    the lowest validation loss at L after its last step is the scheme's rate for the study
    (<root>/plain_text_cpu/selection.json, every score recorded). The grid first stopped at
    1e-2; with 21 of its runs in, 1e-2 was the best rate of 5 of 7 schemes, some still falling
    steeply (t5: 2.170 -> 1.855 from 3e-3 to 1e-2), so 3e-2 was added before the study started,
    to put the chosen rate inside the grid. A rate tuned on a 600-step schedule is not the best
    rate for 3,600 steps (shorter schedules favour larger rates): the stage removes a rate that
    is badly wrong for one scheme, not the last few percent.
  * **Budget**: 3,600 steps (14.7M tokens, about 3.6 epochs of the training plays, 18 tokens per
    parameter), validation every 300. Measured by sweeps/budget_cpu.py (results/budget_cpu.md):
    at 3,600 steps neither RoPE's nor NoPE's validation loss is flat (2.4% and 3.2% lower over
    the last 900 steps); a longer budget does not fit two CPU cores (27 runs of 3,600 steps are
    already about 18 h). The criterion this study states beside its table is therefore "the last
    quarter of training lowered validation loss by under 5%", measured per run from its
    metrics.jsonl (sweeps.findings kind=curve), not "flattened".
  * **Seeds**: 0, 1, 2 (the initialisation `seed` and the data order `data.shuffle_seed`
    together), so that schemes are compared paired by seed with a t-interval of the paired
    difference (sweeps.findings kind=paired).
  * **Both protocols**: train.py's final evaluation, non-overlapping windows at 0.5x..16x L
    (128..4,096 tokens) with the loss by position; and one `eval.run` pass per run with sliding
    windows at a **fixed stride of 128 tokens** (every length 0.5x..8x: each scored token has
    at least l - 128 tokens of context in a window of l), which gives the context-use table
    (sliding perplexity at l against l/2: sweeps.findings kind=context_use).
  * **Reference**: the smoothed byte n-gram models of orders 1-6 fitted on the training split
    and scored on the same validation windows (eval/ngram.py; results/ngram_reference_alibi_tiny.json),
    drawn as horizontal lines.

  python -m sweeps.launch sweeps/plain_text_cpu.py --backend=local --root=workdirs/sweeps --parallel=2 \\
      --published=results   # committed runs count as complete (docs/sweeps.md)
  python -m sweeps.collect workdirs/sweeps/plain_text_cpu

Cost: the tuning stage 36 runs x 600 steps; the study 27 runs x 3,600 steps plus about 2 min of
evaluation per run. Measured on 2026-12-07 (2-core Intel Xeon, two runs side by side): 0.45-0.8 s
per step for most schemes (the lower figure on free cores, results/context_extension_cpu/'s
3,000-step ALiBi parents; the higher beside a test suite), FIRE about 3x slower; so about
2 h for the tuning stage and 7-12 h for the study. It is meant to
run in the background over several sessions: the launcher resumes every unfinished run from its
last checkpoint (every 900 steps), and each finished run folder is committed under
results/plain_text_cpu/ as it completes. Runs are ordered seed 0 of every scheme first.
"""

from sweeps.study import Search, Study, cross, product, zip_

SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "kerple_log", "fire", "xpos")
SEEDS = zip_(seed=[0, 1, 2], **{"data.shuffle_seed": [0, 1, 2]})
LEARNING_RATES = (1e-3, 3e-3, 1e-2, 3e-2)
SLIDING_STRIDE = 128  # tokens; fixed for every evaluation length
SLIDING_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0, 8.0)


def points() -> list[dict]:
  """Every (seed, scheme) run with train.py's non-overlapping evaluation, plus one sliding-window
  evaluation point per run at the fixed stride."""
  runs = cross(SEEDS, product(**{"model.position.kind": list(SCHEMES)}))
  sliding = cross(runs, [{"eval.protocol": "sliding", "eval.stride": SLIDING_STRIDE,
                          "eval.length_multipliers": SLIDING_MULTIPLIERS,
                          "eval.suites": "ppl_vs_length,loss_by_position"}])
  return runs + sliding


STUDY = Study(
    name="plain_text_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={
        "train.num_steps": 3600,
        "train.eval_every_steps": 300,
        "train.checkpoint_every_steps": 900,
        "eval.length_multipliers": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
        "eval.max_tokens_per_length": 32768,
        "eval.suites": "ppl_vs_length,loss_by_position",
    },
    search=Search(grid={"train.learning_rate": list(LEARNING_RATES)},
                  common={"train.num_steps": 600, "train.eval_every_steps": 600,
                          "train.checkpoint_every_steps": 600}),
    description="9 schemes x 3 seeds on plain text, learning rate tuned per scheme (4 rates, "
                "600 steps), 3,600 steps, non-overlapping to 16x and sliding (stride 128) to "
                "8x; about 9-14 h on 2 cores (measured per step), resumable",
)
