"""The context-extension study on CPU: pretrain short, extend by each method, fine-tune briefly.

The experiment the context-extension papers are built on, at the scale of two CPU cores:

  * **Parents** (from scratch, configs/alibi_tiny.py: the 0.82M-parameter byte-level decoder,
    Shakespeare text only, no passkey documents): RoPE at train_len L = 256, 900 steps of
    16 x 256 tokens (3.69M tokens, 4.5 tokens per parameter; the validation loss is still
    falling at step 900: 2.008, 1.783, 1.686 at steps 300, 600, 900 for seed 0), 2 seeds (the
    initialisation `seed` and the data order `data.shuffle_seed` together: 0/0 and 1/1). ALiBi
    parents of the same budget and seeds are the "needs no extension" reference, evaluated as
    trained.
  * **Children**, a warm start from each RoPE parent (`train.init_from`) at the target length
    4L = 1,024, each by its recipe in configs/extend_*.py (configs/extension_recipes.py: the
    same budget for every method, 10% of the parent's tokens = 90 steps of 4 x 1,024 tokens,
    the parent's peak learning rate / 15, 5% warmup then constant, no weight decay):
    extrapolation (no scaling), PI, NTK-aware, YaRN, ABF (base x 50), PoSE (trained at L with
    positions spanning 4L, 90 steps of 16 x 256), LongRoPE (factors searched on the parent by
    `sweeps.longrope_search` first) and DroPE (RoPE removed, trained at L).
  * **Eval-only controls**: every RoPE parent evaluated with PI, NTK and YaRN at s = 4 and with
    ABF, without fine-tuning (`eval.extension`); the LongRoPE search's factors.json records the
    eval-only perplexity of its best factors and of the methods it seeds from, at 4L.
  * **Retrieval track**, kept apart from the perplexity track so that each figure means what its
    label says: RoPE parents trained 1,500 steps with three quarters of their training windows
    passkey documents (`data.passkey.fraction` = 0.75, configs/passkey_tiny.py's mix: its
    1,500-step RoPE run learned the lookup in distribution), and their extrapolation, PI and
    YaRN children (which keep the parent's passkey share), evaluated on the passkey grid at
    128..4,096 tokens; ALiBi parents of the same mix are its "needs no extension" reference.
    The 1,500-step ALiBi parents did not learn the lookup (their answer loss stayed near
    ln 10), so ALiBi parents of 3,000 steps were added and are the reference; the failed runs
    stay as the record. The RoPE and 3,000-step ALiBi parents are also scored with Self-Extend
    (G = 8) at evaluation, the rows docs/retrieval.md shows. Three seeds (0/0, 1/1, 2/2), so
    that methods compare paired by seed with a t-interval. An older track, committed beside
    it (train_passkey_fraction 0.25), was trained with a quarter and the prompt's preamble on:
    at L = 256 a training document then had room for 0-1 filler tokens, one layout and one
    needle depth. Such training is now refused (data/passkey_training.py `check_filler_room`),
    and this track drops the preamble (150 of 256 tokens for filler). Without the preamble a
    quarter is not enough: two such parents (results/eval_methods_cpu_passkey25/) kept a
    validation answer loss of ln 10 nats per digit and retrieved no key even at L.

Every run is evaluated at 0.5x..16x L (128..4,096 tokens; the children's
`eval.length_multipliers` give the same absolute lengths): perplexity of non-overlapping windows
and loss by position (train.py's final evaluation), perplexity of sliding windows of stride half
the run's train_len, and attention entropy / sink mass on 4 held-out documents (eval.run).

Launch (resumable: the same command continues), collect and report:

  python -m sweeps.launch sweeps/context_extension_cpu.py --backend=local \\
      --root=workdirs/sweeps --parallel=2
  python -m sweeps.collect workdirs/sweeps/context_extension_cpu

Children start when their parent is complete (sweeps.launch, `run_all`'s `after`; each run's
children are queued right after it), so the two slots of --parallel=2 stay busy.

Measured on 2026-12-03 (AMD EPYC, 2 cores, --parallel=2), from each run's launch.log. Test suites
and a fresh-clone check shared the cores for most of it (load average 3-6 on 2 cores), so these
are upper bounds:
  * each RoPE parent: 37 min of its slot. Training 900 steps took 29 min at 1.0-3.1 s per step,
    depending on the other load; the final evaluation 3 min; the sliding, attention and two
    eval-only-control passes 7 min;
  * each LM child: 5-7 min. Training 90 steps of 4 x 1,024 took about 2.5 min, its evaluations
    the rest. LongRoPE's child took 8.7 min (seed 0) and 17.8 min (seed 1, more load), the factor
    search on the parent included (1.8 and 3.5 min);
  * the RoPE parents and their 16 children: 1 h 48 min of wall time (14:30 to 16:18);
  * the ALiBi parents: 25-26 min each, side by side;
  * the passkey track. The two 1,500-step parents were interrupted by the end of a session and
    resumed from their checkpoints. Their last part took 53 and 57 min side by side with a full
    test suite, and the 6 children 10-16 min each.
  * the 3,000-step ALiBi retrieval parents (2026-12-07, a 2-core Intel Xeon): 24-26 min each,
    two side by side, their passkey evaluations included; the Self-Extend scoring of the three
    RoPE retrieval parents about 1.5 min each.
The first launch (2026-12-03) took about 4 h of wall time on these shared cores (the passkey
parents are counted by their resumed part). Free cores need less. The default RoPE run alone
(900 steps and its evaluation) took 4 min 43 s on this machine type (results/README.md). Here,
each parent's training took 29 min, sharing the cores with another run and the tests.
"""

from sweeps.study import Study, cross, zip_

SEEDS = zip_(seed=[0, 1], **{"data.shuffle_seed": [0, 1]})
RETRIEVAL_SEEDS = zip_(seed=[0, 1, 2], **{"data.shuffle_seed": [0, 1, 2]})
FACTOR = 4  # target length 4L = 1,024 tokens
LM_METHODS = ("extrapolation", "pi", "ntk", "yarn", "abf", "pose", "longrope", "drope")
PASSKEY_METHODS = ("extrapolation", "pi", "yarn")
PASSKEY = {"data.passkey.fraction": 0.75, "data.passkey.preamble": False, "train.num_steps": 1500}
ALIBI_RETRIEVAL_STEPS = 3000  # the 1,500-step ALiBi parents did not learn the lookup
PASSKEY_EVALS = ({"eval.suites": "passkey", "eval.passkey.trials": 3},
                 {"eval.suites": "passkey", "eval.passkey.trials": 3,
                  "eval.extension": "self_extend", "eval.factor": 8.0})
SLIDING = {"eval.protocol": "sliding", "eval.stride": 0,
           "eval.suites": "ppl_vs_length,loss_by_position"}
ATTENTION = {"eval.suites": "attention", "eval.attention.windows": 4}
CONTROLS = ({"eval.extension": "pi,ntk,yarn", "eval.factor": float(FACTOR)},
            {"eval.extension": "abf"})


def child(parent: dict, method: str, evals: dict | None = None) -> dict:
  """The point of `method`'s child of `parent` (configs/extend_<method>.py at s = FACTOR).

  LongRoPE's recipe reads the factors its search wrote in the parent's workdir, so the search
  runs first (`@before`) and the plan checks the PI recipe's config meanwhile (the same budget,
  shapes and evaluations)."""
  point = {"@parent": parent, "@config": f"configs/extend_{method}.py:{{parent}},{FACTOR}",
           **(evals or {})}
  if method == "longrope":
    point["@before"] = [["{python}", "-m", "sweeps.longrope_search", "--workdir={parent}",
                         f"--target_len={FACTOR * 256}"]]
    point["@plan_config"] = f"configs/extend_pi.py:{{parent}},{FACTOR}"
  return point


def points() -> list[dict]:
  """Parents first (seed 0 of each before seed 1, so a study stopped early has one seed of
  everything), each with its evaluation points, then the children with theirs."""
  rope = cross(SEEDS, [{"model.position.kind": "rope"}])
  alibi = cross(SEEDS, [{"model.position.kind": "alibi"}])
  retrieval = cross(RETRIEVAL_SEEDS, [{"model.position.kind": "rope", **PASSKEY}])
  retrieval_alibi = cross(RETRIEVAL_SEEDS, [{"model.position.kind": "alibi", **PASSKEY}])
  retrieval_alibi_long = cross(RETRIEVAL_SEEDS, [{"model.position.kind": "alibi", **PASSKEY,
                                                  "train.num_steps": ALIBI_RETRIEVAL_STEPS}])
  out = []
  for parent in (*rope, *alibi):
    out += [parent, {**parent, **SLIDING}, {**parent, **ATTENTION}]
  for parent in rope:
    out += [{**parent, **c} for c in CONTROLS]
  for parent in retrieval_alibi:
    out += [parent, {**parent, **PASSKEY_EVALS[0]}]
  for parent in (*retrieval, *retrieval_alibi_long):
    out += [parent, *({**parent, **e} for e in PASSKEY_EVALS)]
  for parent in rope:
    for method in LM_METHODS:
      out += [child(parent, method), child(parent, method, SLIDING),
              child(parent, method, ATTENTION)]
  for parent in retrieval:
    for method in PASSKEY_METHODS:
      out += [child(parent, method, PASSKEY_EVALS[0])]
  return out


STUDY = Study(
    name="context_extension_cpu",
    config="configs/alibi_tiny.py",
    points=points,
    common={"eval.length_multipliers": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)},
    description="RoPE parents at L=256 (2 seeds) -> 8 extension methods fine-tuned at 4L for 10% "
                "of the parent's tokens, eval-only controls, ALiBi reference, passkey track (RoPE "
                "parents and their children, ALiBi parents, 3 seeds); "
                "about 4 h measured on 2 shared cores with --parallel=2 (phase times in the "
                "module docstring)",
)
