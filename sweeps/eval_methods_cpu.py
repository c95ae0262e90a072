"""Eval-time context extension, old and new, on the same RoPE parents: perplexity and passkey to 16x.

The methods added by the baselines issue (StreamingLLM, Dynamic-YaRN, Dual Chunk Attention,
blockwise attention, the attention temperature with explicit constants) against the existing
ones (PI, NTK, YaRN, Dynamic NTK, Self-Extend, STRING, LM-Infinite), applied at evaluation only
(no fine-tuning) to the same models:

  * **Parents**: configs/alibi_tiny.py with RoPE, L = 256, seeds 0, 1, 2 (`seed` and
    `data.shuffle_seed` together), 1,500 steps with three quarters of the training windows
    passkey documents without the preamble (`data.passkey.fraction` = 0.75, `preamble` = False:
    configs/passkey_tiny.py's mix, which leaves room for filler and varies the needle's depth,
    and whose RoPE run retrieves in distribution after 1,500 steps, docs/retrieval.md), so that
    passkey retrieval is in distribution at L. A first launch with a quarter (0.25) did not
    learn the lookup: its validation answer loss stayed at ln 10 nats per digit (uniform
    guessing) from step 300 to 1,500 and it retrieved no key at any length, L included (seeds 0
    and 1; committed in results/eval_methods_cpu_passkey25/ with the evaluations it reached).
    The parents' text perplexity is that of a model that saw a quarter of the text tokens: the
    methods are compared with each other on the same parents, not with the plain-text studies.
  * **Evaluation**, per parent and method, on the test split at 0.5x..16x L (128..4,096 tokens):
    perplexity with non-overlapping windows, and the passkey grid (11 depths x 3 trials).
    Methods and settings: none; PI, NTK and YaRN at s = 16 (the longest length); Dynamic NTK and
    Dynamic-YaRN (s from the length); Self-Extend (G = 8, W = L/4); STRING (S and W by its
    rule); LM-Infinite (n_global 10, n_local = L); StreamingLLM (4 sinks, a window of L - 4);
    DCA (S = 3L/4, w = L/16); blockwise attention (w = L/2); the attention temperature (form
    "logn", max(1, ln n / ln L); a study's evaluation points set eval.* fields only, so the
    "log" form's constants are left to `python -m eval.run --config.model.position...`). Each
    is one evaluation point (`eval.extension`).

Findings compare methods paired by parent seed (3 pairs: a t-interval of the mean paired
difference, sweeps.findings kind=paired), perplexity and the passkey length reached.

  python -m sweeps.launch sweeps/eval_methods_cpu.py --backend=local --root=workdirs/sweeps --parallel=2 \\
      --published=results   # committed runs count as complete (docs/sweeps.md)
  python -m sweeps.collect workdirs/sweeps/eval_methods_cpu

Cost, measured on 2026-12-07 (2-core AMD EPYC, --parallel=3): the 3 runs took 98 min of wall
time, training about 30 min side by side, then the 13 evaluation points of each run 2-12 min
apiece (StreamingLLM's passkey decoding the slowest), with a test suite on the cores for part
of it; resumable, each run published as it finishes.
"""

from sweeps.study import Study, cross, zip_

SEEDS = zip_(seed=[0, 1, 2], **{"data.shuffle_seed": [0, 1, 2]})
PARENT = {"model.position.kind": "rope", "data.passkey.fraction": 0.75,
          "data.passkey.preamble": False, "train.num_steps": 1500}
FACTOR = 16.0  # PI / NTK / YaRN at the longest evaluated length, 16 L
METHODS = (
    {"eval.extension": "none"},
    {"eval.extension": "pi", "eval.factor": FACTOR},
    {"eval.extension": "ntk", "eval.factor": FACTOR},
    {"eval.extension": "yarn", "eval.factor": FACTOR},
    {"eval.extension": "dynamic_ntk"},
    {"eval.extension": "dynamic_yarn"},
    {"eval.extension": "self_extend", "eval.factor": 8.0},
    {"eval.extension": "string"},
    {"eval.extension": "lm_infinite"},
    {"eval.extension": "streaming_llm"},
    {"eval.extension": "dca"},
    {"eval.extension": "blockwise"},
    {"eval.extension": "attention_temperature"},
)
EVAL = {"eval.split": "test", "eval.suites": "ppl_vs_length,loss_by_position,passkey",
        "eval.passkey.trials": 3, "eval.step": 1500}


def points() -> list[dict]:
  """Per seed, the parent (train.py's own evaluation on validation), then one evaluation point
  per method on the test split (tagged with the final step, so that they sit beside it)."""
  parents = cross(SEEDS, [PARENT])
  return [p for parent in parents for p in [parent] + [{**parent, **EVAL, **m} for m in METHODS]]


STUDY = Study(
    name="eval_methods_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={"eval.length_multipliers": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
            "eval.max_tokens_per_length": 32768},
    description="3 RoPE parents (75% passkey windows, 1,500 steps) x 13 eval-time extensions "
                "(old and new): test perplexity and passkey to 16x; about 1.5-2 h on 2 cores",
)
