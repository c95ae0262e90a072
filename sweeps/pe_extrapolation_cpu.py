"""The first real study: which positional schemes extrapolate beyond train_len, on 2 CPU cores.

Nine schemes {none, learned, sinusoidal, rope, alibi, t5, kerple_log, fire, xpos} x 2 seeds
(the initialisation `seed` and the data order `data.shuffle_seed` together: 0/0 and 1/1) =
18 training runs of the tiny byte-level model of configs/passkey_tiny.py (0.82M parameters,
train_len 256, three quarters of the training windows passkey documents so that retrieval is in
distribution). Every run is evaluated at 0.5x..16x train_len (128..4096 tokens) by

  - perplexity with non-overlapping windows and the passkey grid (11 depths x 3 trials per
    length): train.py's final evaluation;
  - perplexity with sliding windows of stride L/2 (eval.protocol=sliding, eval.stride=0): one
    `python -m eval.run` pass per run after training;
  - for RoPE, the eval-time extensions PI and YaRN at factors 4 and 16 (perplexity and passkey):
    two more eval.run passes;
  - attention entropy and sink mass per layer and head at every length, on 4 held-out documents
    (eval.suites=attention, eval/attention_stats.py): one more eval.run pass per run (under a
    minute), for notebooks/attention.ipynb and the report.
Each perplexity pass also gives the loss by token position.

Launch (two runs side by side: measured faster than one at a time, below), resume (the same
command) and collect:

  python -m sweeps.launch sweeps/pe_extrapolation_cpu.py --backend=local --root=workdirs/sweeps \
      --parallel=2
  python -m sweeps.collect workdirs/sweeps/pe_extrapolation_cpu

Wall time on 2 CPU cores, as planned (the measured times follow). A tiny run trains
at 0.72 s per step of 16 x 256 tokens with the 2 cores to itself (README: alibi_tiny, 900 steps,
11.5 min with start-up and evaluation to 8x); runs measured while other jobs shared the cores
took up to 20 min. passkey_tiny trains 1500 steps (19 min), so its 18 runs alone would take
5.7 h. To fit the 4-hour budget this study changes the base config:
  - train.num_steps 1500 -> **600** (2.5M tokens; 7.2 min per run). Measured with
    passkey_tiny (README, "Passkey and needle retrieval"): RoPE's loss on the answer digits is
    still at chance at step 750 and learns the lookup between steps 750 and 1,500; ALiBi and
    NoPE do not learn it by step 1,500. At 600 steps no scheme is expected to retrieve, so the
    passkey columns of this study will be near zero for every scheme (the budget's price; the
    separate 1,500-step passkey runs of the README answer the retrieval question);
  - eval.max_tokens_per_length 65,536 -> **32,768** tokens scored per length;
  - eval.passkey.trials 5 -> **3** prompts per (length, depth) cell.
Per run: training 7.2 min; the final evaluation (non-overlapping perplexity to 16x, about 0.6
min, and the passkey grid, about 1.2 min); the sliding pass, about 1.2 min with start-up: about
10.2 min, 18 runs 3.1 h. RoPE's PI/YaRN passes add about 3 min per factor per run (perplexity
and passkey for two extensions), 12 min for both seeds. Total about 3.3 h with the 2 cores free,
within the 4 hours; with the cores shared as in the 20-min measurements it would take about
5.5 h, so run it on an otherwise idle machine.
Runs are ordered seed 0 of every scheme first, so a study stopped early still has one seed of
each; launching again resumes it.

Measured on 2026-11-30, seed 1 (launched with --parallel=2 on the 2 cores, nothing else
running until 20:59; a test suite shared the cores after that): a run of most schemes took
19-20 min of its slot (sinusoidal 19m24s, alibi 19m47s: training and the final evaluation 17
min, at ~3,300 tokens/s per run while another trains beside it, 6,600 together against 5,800
for one run alone; the sliding pass 1.7-1.9 min; the attention pass under a minute), RoPE 36.5
min with its PI/YaRN passes (7.6 min for factor 4: perplexity and passkey for both extensions),
FIRE 52 min (its per-pair MLP, [batch, queries, keys, fire_mlp_width], makes training about
3x slower, ~1,000 tokens/s beside another run, and its 4,096-token passkey prompts too). Summed
over the 18 runs and halved for two runs side by side, that puts the whole study at about
3.8-4 h on two free cores: at the 4-hour budget, with FIRE's two runs nearly a quarter of it. The
first seed's times (up to 56 min per run) are no guide: the cores were shared with development
work and the study was paused and resumed across sessions.
"""

from sweeps.study import Study, cross, product, zip_

SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "kerple_log", "fire", "xpos")
SEEDS = zip_(seed=[0, 1], **{"data.shuffle_seed": [0, 1]})
ROPE_EXTENSIONS = "pi,yarn"
ROPE_FACTORS = (4.0, 16.0)


def points() -> list[dict]:
  """Every (seed, scheme) run, evaluated as configured (non-overlapping perplexity and passkey,
  by train.py), plus its sliding-window and attention-diagnostics evaluation points, plus RoPE's
  PI/YaRN evaluation points."""
  runs = cross(SEEDS, product(**{"model.position.kind": list(SCHEMES)}))
  sliding = cross(runs, [{"eval.protocol": "sliding", "eval.stride": 0,
                          "eval.suites": "ppl_vs_length,loss_by_position"}])
  attention = cross(runs, [{"eval.suites": "attention", "eval.attention.windows": 4}])
  rope = [r for r in runs if r["model.position.kind"] == "rope"]
  extended = cross(rope, product(**{"eval.extension": [ROPE_EXTENSIONS],
                                    "eval.factor": list(ROPE_FACTORS)}))
  return runs + sliding + attention + extended


STUDY = Study(
    name="pe_extrapolation_cpu",
    config="configs/passkey_tiny.py",
    points=points,
    common={
        "train.num_steps": 600,
        "eval.length_multipliers": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
        "eval.max_tokens_per_length": 32768,
        "eval.suites": "ppl_vs_length,loss_by_position,passkey",
        "eval.passkey.trials": 3,
    },
    description="9 schemes x 2 seeds, tiny passkey model, train_len 256, ppl (non-overlapping "
                "and sliding) and passkey to 16x, RoPE + PI/YaRN; about 3.8-4 h on 2 free "
                "cores with --parallel=2 (measured per run, module docstring)",
)
