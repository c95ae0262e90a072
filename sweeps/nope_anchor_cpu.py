"""NoPE's gap on plain text: a budget effect, or the missing anchor? (issue 45, item 5)

In the committed runs NoPE trails RoPE at 1x (issue 45 calls it "NoPE's 35% gap", from
pe_extrapolation_cpu's table). Two explanations: NoPE learns positional information more slowly
than RoPE (the DroPE paper, arXiv 2512.12167, argues this from its training curves), and NoPE
recovers absolute position from the causal mask by counting from the first token (Kazemnejad et
al., arXiv 2305.19466, Theorem 1's construction), an anchor that the packed windows here rarely
start with (issue 45 counts 99.8% of training windows starting mid-document).

Design: configs/alibi_tiny.py (0.82M parameters, Shakespeare bytes, train_len 256, learning rate
3e-3, cosine to 0 over the run) with

  * schemes: none (NoPE), rope, learned, sinusoidal;
  * data.bos_anchor: False (windows as packed) and True (every training window opens with BOS,
    data/pipeline.py; each stream token still a target once per epoch);
  * budgets: 900 and 3,600 training steps (each its own cosine schedule, so the 900-step run is
    the loss of a 900-step budget, not step 900 of a longer run);
  * seeds 0 and 1 (initialisation and data order together), paired across schemes;

32 runs, each evaluated with non-overlapping windows at 0.5x..4x and the loss by position
(sweeps.findings kind=pivot over `scheme`, `bos_anchor`, `num_steps`; kind=paired for NoPE minus
RoPE per seed). Two seeds give a "range of 2" in the tables, no interval: the question is
whether the gap shrinks by a large factor with budget or with the anchor, which two seeds can
show; a small effect would need a third.

  python -m sweeps.launch sweeps/nope_anchor_cpu.py --backend=local --root=workdirs/sweeps --parallel=2 \\
      --published=results   # committed runs count as complete (docs/sweeps.md)
  python -m sweeps.publish workdirs/sweeps/nope_anchor_cpu results/nope_anchor_cpu
  python -m sweeps.collect results/nope_anchor_cpu

Cost: 16 runs of 3,600 steps and 16 of 900, about 72,000 steps in all. Measured on 2026-12-07
(2-core Intel Xeon, two runs side by side, results/context_extension_cpu/'s 3,000-step ALiBi
parents: 24-26 min each with their evaluation; the tuning runs of sweeps/plain_text_cpu.py
beside a test suite: 0.77 s per step), 0.45-0.8 s per step, so about 4.5-8 h of wall time.
Not yet run.
"""

from sweeps.study import Study, cross, product, zip_

SCHEMES = ("none", "rope", "learned", "sinusoidal")
SEEDS = zip_(seed=[0, 1], **{"data.shuffle_seed": [0, 1]})


def points() -> list[dict]:
  """Every (seed, budget, anchor, scheme) run; the short budget first, so its table fills first."""
  return cross(SEEDS, product(**{"train.num_steps": [900, 3600],
                                 "data.bos_anchor": [False, True],
                                 "model.position.kind": list(SCHEMES)}))


STUDY = Study(
    name="nope_anchor_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={
        "train.eval_every_steps": 300,
        "train.checkpoint_every_steps": 900,
        "eval.length_multipliers": (0.5, 1.0, 2.0, 4.0),
        "eval.suites": "ppl_vs_length,loss_by_position",
    },
    description="NoPE / RoPE / learned / sinusoidal x bos_anchor off/on x 900 / 3,600 steps x "
                "2 seeds on plain text: NoPE's gap against budget and anchor; about 4.5-8 h on 2 "
                "free cores",
)
