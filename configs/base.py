"""Base config: every field, with its meaning. Other configs start from `get_config()`.

The `model.position` fields are declared by the schemes that read them (`config_fields` in
models/positions/<scheme>.py, with their defaults and comments) and gathered here from
models.positions.REGISTRY, so a new scheme's fields need no edit of this file.

Override any field on the command line, e.g.
  python train.py --config=configs/alibi_tiny.py --config.model.position.kind=rope
"""

import ml_collections

from models import positions


def get_config() -> ml_collections.ConfigDict:
  """Returns the base experiment config (a small decoder on the embedded Shakespeare corpus)."""
  c = ml_collections.ConfigDict()
  c.seed = 0  # PRNG seed of the parameter initialisation (the data order has its own seed).

  # ---------------------------------------------------------------- data
  c.data = ml_collections.ConfigDict()
  c.data.source = "shakespeare"  # "shakespeare" (embedded default, fetched on first use) | "text_files"
                                 # | "array_record" (token shards of python -m data.prepare).
  c.data.text_glob = ""  # source="text_files": glob of UTF-8 .txt files (one document each) or of
                        # record files, one document per record: JSON lines (.jsonl/.json,
                        # .jsonl.gz, .jsonl.zst) or parquet; another extension is refused
                        # (data/corpus_formats.py; the documents python -m data.prepare makes).
  c.data.text_field = "text"  # record files: the JSON key / parquet column holding the text.
  c.data.id_field = ""  # record files: the key / column naming a document (its split depends on
                        # the name); "" = "<file stem>:<line or row number>".
  c.data.array_record_dir = ""  # source="array_record": the directory python -m data.prepare wrote
                                # (local or a mounted bucket); its split and tokenizer must match
                                # data.validation_fraction / test_fraction and data.tokenizer.
  c.data.cache_dir = ""  # download cache; "" = $PE_SWEEPS_CACHE or $XDG_CACHE_HOME/pe_sweeps.
  c.data.tokenizer = "byte"  # "byte": 256 byte ids + BOS/EOS/PAD (vocab 259) | "sentencepiece:<path
                             # to .model>" (e.g. <array_record_dir>/tokenizer.model; data/tokenizers.py)
                             # | "hf:<tokenizer.json or its folder>" (data/hf_tokenizer.py).
  c.data.validation_fraction = 0.1  # share of documents held out for validation (whole documents).
  c.data.test_fraction = 0.1  # share of documents held out for test (whole documents).
  c.data.train_len = 256  # training context length, tokens.
  c.data.batch_size = 16  # global batch, sequences per step; divisible by mesh data * fsdp.
  c.data.shuffle_seed = 0  # seed of the window shuffle (independent of c.seed).
  c.data.prefetch_batches = 4  # training batches read ahead by a background thread; 0 = none.
  c.data.bos_anchor = False  # True: every training window opens with BOS (NoPE's anchor, arXiv
                             # 2305.19466); the text corpus only (data/pipeline.py PackedWindows).
  # Training-time position-id transform, for any scheme (evaluation always uses true positions).
  c.data.position_sampler = ml_collections.ConfigDict()
  c.data.position_sampler.kind = "none"  # "none" | "randomized" (Ruoss et al.) | "pose" (Zhu et al.) | "cream" (Wu et al.) | "endprompt".
  c.data.position_sampler.max_position = -1  # every kind: positions drawn below this (cream/endprompt: the target length); -1 = 4 * train_len.
  c.data.position_sampler.num_chunks = 2  # pose: chunks of the window, each shifted by a random skip.
  c.data.position_sampler.seed = 0  # seed of the per-example draws (reproducible across resumes).
  # CREAM (data/cream.py; arXiv 2406.07138): head/tail of k (or n/3) tokens at both ends, a Gaussian-placed middle.
  c.data.position_sampler.cream_k = -1  # continuity head/tail length k >= 0; -1 = 4 x floor(max_position / n) (released code).
  c.data.position_sampler.cream_sigma = 3.0  # > 0: std of the Gaussian over X = 2r in [2, 2 x factor] (the middle ends near r n).
  c.data.position_sampler.cream_truncation = "clip"  # "clip" (released: tails land on the ends) | "renormalize" (a true truncated Gaussian).
  # EndPrompt (data/endprompt.py; arXiv 2605.14589): the last tokens of each segment moved to the end of the range.
  c.data.position_sampler.endprompt_length = 20  # c >= 1: tokens of the terminal prompt (released: 20).
  c.data.position_sampler.endprompt_anchor = "end"  # "end" (last position max_position - 1) | "random" (start uniform in [n-c, max_position-c]).
  # Algorithmic task instead of text (data/tasks/, eval/algorithmic.py; Kazemnejad et al., arXiv
  # 2305.19466; Ruoss et al., arXiv 2305.16843). Rows of data.train_len tokens hold whole examples.
  c.data.task = ml_collections.ConfigDict()
  c.data.task.name = ""  # "" = the text corpus | "copy" | "reverse" | "addition" | "parity" | "sorting".
  # Instance size: input symbols (addition: digits per operand); see the README's task table.
  c.data.task.train_min_size = 1  # smallest instance size trained on (sizes uniform in [min, max]).
  c.data.task.train_max_size = 16  # n: largest size trained on; data.train_len must hold one such example.
  c.data.task.eval_max_size = 64  # accuracy is measured at every size 1..eval_max_size (k * n).
  c.data.task.eval_examples_per_size = 100  # held-out examples per size (accuracy and validation loss).
  c.data.task.seed = 0  # seed of the training examples (row i of process p: rng [seed, 0, p, i]).
  c.data.task.eval_seed = 0  # seed of held-out examples: validation [eval_seed, 1, size], eval [.., 2, size].
  c.data.task.position_coupling = ""  # "" | "addition": Cho et al.'s coupled position ids (addition
                                      # tasks; data/position_coupling.py), for a one-stream scheme.
  c.data.task.coupling_max_position = -1  # coupling: training starts keep ids <= this; -1 = eval_max_size + 2.
  # Passkey retrieval (data/passkey.py; Mohtashami & Jaggi, arXiv 2305.16300, as used by PI,
  # arXiv 2306.15595): the prompt format of the eval.passkey grid, and passkey documents mixed
  # into the training split (each one inside one training window) so a small model learns it.
  c.data.passkey = ml_collections.ConfigDict()
  c.data.passkey.fraction = 0.0  # share of training windows made of passkey documents, [0, 1); 0 = none.
  c.data.passkey.seed = 0  # seed of the training documents' lengths, depths and keys.
  c.data.passkey.preamble = True  # prompts open with the paper's task description (148 tokens + newline).
  c.data.passkey.key_digits = 5  # digits of the pass key, 1..18 (PI: random 5-digit numbers).
  # Retrieval-format training mix (data/retrieval_mix.py training_documents): prompts of one suite of
  # eval/needle.py, in its eval.<suite> format, with their answers, over the training text.
  c.data.retrieval_mix = ml_collections.ConfigDict()
  c.data.retrieval_mix.suite = ""  # needle | niah_multikey | niah_multivalue | niah_multiquery | variable_tracking
                                   # | common_words | frequent_words.
  c.data.retrieval_mix.fraction = 0.0  # share of training windows made of those prompts, [0, 1); 0 = none.
  c.data.retrieval_mix.seed = 0  # seed of the prompts' lengths, depths, keys and values.

  # ---------------------------------------------------------------- model
  c.model = ml_collections.ConfigDict()
  c.model.vocab_size = 259  # must be >= the tokenizer's vocabulary (byte: 259).
  c.model.num_layers = 4  # decoder blocks.
  c.model.d_model = 256  # residual stream width.
  c.model.num_heads = 4  # attention heads.
  c.model.head_dim = -1  # per-head width; -1 = d_model // num_heads.
  # Key/value heads (grouped-query attention, Ainslie et al., arXiv 2305.13245): each group of
  # num_heads // num_kv_heads query heads shares one; -1 = num_heads (multi-head), 1 = multi-query.
  c.model.num_kv_heads = -1
  # RMS normalisation of queries and keys before the positional hooks: "none" | "head" (over each
  # head's head_dim, one learned scale: Qwen3, Gemma 3) | "full" (over the whole q and k
  # projections: OLMo 2, arXiv 2501.00656).
  c.model.qk_norm = "none"
  c.model.qkv_bias = False  # biases on the q, k and v projections (Qwen2).
  c.model.norm_eps = 1e-6  # epsilon of every RMSNorm (the blocks', the final one, the QK-norms).
  c.model.norm_position = "pre"  # "pre": x + f(norm(x)) | "post": x + norm(f(x)) (OLMo 2, arXiv
                                 # 2501.00656); models/decoder.py NORM_POSITIONS.
  c.model.mlp_dim = 1024  # hidden width of the MLP.
  c.model.mlp_activation = "gelu"  # "gelu" (GPT-2) | "swiglu" (Shazeer 2020, arXiv 2002.05202).
  c.model.tie_embeddings = True  # output projection = transposed token embedding.
  c.model.dtype = "float32"  # compute dtype: "float32" | "bfloat16" (softmax/loss stay float32).
  c.model.param_dtype = "float32"  # parameter dtype: "float32" | "bfloat16".
  c.model.init_std = 0.02  # std of the normal init of embeddings and projections (GPT-2).
  c.model.attention_impl = "xla"  # "xla" (jnp) | "pallas": fused flash kernel with RoPE/bias inside
                                 # (models/kernels/; interpreted on CPU); layers or schemes it
                                 # cannot compute fall back to "xla" with a logged reason.
  # The fused kernel's tiles, tokens (models/kernels/flash.py BlockSizes): 0 = the backend's
  # default (GPU 128/64/64/64, TPU 256/512/256/512), else a power of two >= 8. Compiled kernels
  # need more (Triton: >= 16; Mosaic: key tiles a multiple of 128 unless they cover the whole
  # sequence); a tile they cannot take runs that layer on "xla" with a logged reason.
  c.model.kernel_block_q = 0  # forward query tile.
  c.model.kernel_block_k = 0  # forward key tile.
  c.model.kernel_block_q_bwd = 0  # backward query tile.
  c.model.kernel_block_k_bwd = 0  # backward key tile.
  # Query chunk and key block, tokens (models/attention.py): no chunk computes the keys it cannot
  # see (causal, window); evaluation memory O(seq x chunk); 0 = one chunk of the whole sequence.
  c.model.attention_chunk = 128
  c.model.remat = "none"  # activation rematerialization per block (training memory vs compute):
                         # "none" | "block" (keep only matmul outputs, recompute the rest) |
                         # "full" (keep only each block's input); models/decoder.py REMAT_POLICIES.
  c.model.sliding_window = 0  # keys visible per query in windowed layers, tokens; 0 = full attention.
  c.model.global_every = 0  # with sliding_window: every N-th layer keeps full attention; 0 = none.
  c.model.logn_scaling = False  # scale queries by log(n)/log(train_len), n = position + 1.
  # A learned sink token (Xiao et al., arXiv 2309.17453, Sec. 3.3): one vector before every window
  # at position 0 (the tokens keep theirs), seen by every query across packed documents, never
  # scored (logits stay [batch, seq, vocab]); the first cached key in decoding. Not with
  # sliding_window, attention_impl="pallas", mesh.context > 1 or eval.suites=attention.
  c.model.sink_token = False

  # Positional scheme: one of models.positions.REGISTRY (see the README table for every kind).
  c.model.position = ml_collections.ConfigDict()
  c.model.position.kind = "alibi"
  # The scheme's fields: every registered scheme declares those it reads, with its default and a
  # comment (`config_fields` in models/positions/<scheme>.py; RoPE scaling's in
  # models/rope_scaling.py CONFIG_FIELDS, the eval-time position-id transforms' in
  # models/position_transforms.py CONFIG_FIELDS); all of them are here, whatever the kind.
  for name, (default, _) in positions.config_fields().items():
    c.model.position[name] = default

  # ---------------------------------------------------------------- optimisation
  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 1000  # optimizer steps.
  c.train.grad_accum_steps = 1  # microbatches per step (gradients summed; same result, less memory).
  c.train.init_from = ""  # warm start: "<workdir>" or "<workdir>@<step>" of another run; its
                          # parameters only (fresh optimizer, schedule, data); runs/warm_start.py.
  c.train.init_from_learned = "interpolate"  # a learned table grown by the warm start:
                                             # "interpolate" (PI on the rows) | "copy" (new rows fresh).
  c.train.stop_after_step = -1  # end this process after this step (a time slice); -1 = num_steps.
  c.train.learning_rate = 1e-3  # peak learning rate (AdamW).
  c.train.warmup_steps = 100  # linear warmup from 0, steps.
  c.train.final_lr_ratio = 0.1  # cosine decay ends at learning_rate * final_lr_ratio.
  c.train.b1 = 0.9  # AdamW beta1.
  c.train.b2 = 0.95  # AdamW beta2.
  c.train.weight_decay = 0.1  # decoupled weight decay, matrices only (ndim >= 2).
  c.train.grad_clip = 1.0  # global-norm gradient clipping; 0 disables.
  c.train.log_every_steps = 10  # metrics.jsonl / TensorBoard / W&B / progress-bar interval, steps.
  c.train.write_plots = True  # PNG figures beside the run's JSON (training_curves.png,
                              # eval/<suite>.png); False skips drawing them, about 1.4 s per run
                              # on CPU (a large sweep, whose figures come from the collected
                              # table; the tests). eval.run follows the run's value.
  # Weights & Biases (runs/wandb_log.py; pip install -e '.[wandb]'): the same scalars at the same
  # steps and the flattened config, process 0 only; one W&B run per workdir (resumed by reruns).
  c.train.wandb_project = ""  # W&B project to log to; "" = no W&B logging.
  c.train.wandb_entity = ""  # W&B entity (user or team); "" = your default entity.
  c.train.wandb_mode = ""  # "online" | "offline" | "disabled"; "" = $WANDB_MODE, else "online".
  c.train.eval_every_steps = 200  # validation loss at train_len interval, steps; 0 = only at the end.
  c.train.eval_tokens = 32768  # tokens scored per validation (held-out document prefixes).
  c.train.checkpoint_every_steps = 500  # periodic checkpoint interval, steps (a final one always).
  c.train.max_to_keep = 2  # checkpoints kept.
  c.train.skip_nonfinite_batches = False  # a batch whose loss or gradients are NaN/inf: False =
                                          # stop (naming the step and the last good checkpoint);
                                          # True = leave the parameters unchanged and go on.
  c.train.peak_flops_per_device = 0.0  # FLOP/s for MFU; 0 = measure a large matmul at start-up.
  c.train.memory_headroom = 0.9  # fraction of the memory limit a compiled program may use (the
                                 # pre-flight before step 0 and per eval length; runs/memory.py).
  c.train.memory_limit_gib = 0.0  # caps the memory limit, GiB (per device on GPU/TPU, the host's
                                  # RAM on CPU); 0 = the device's own (bytes_limit / MemAvailable).

  # ---------------------------------------------------------------- device mesh
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1  # data-parallel axis size; -1 = the devices left over.
  c.mesh.fsdp = 1  # fully-sharded data-parallel axis (parameters sharded, batch split).
  c.mesh.context = 1  # sequence (context) parallelism: each sequence split over this many devices,
                      # keys/values all-gathered per layer, zigzag-balanced; models/context_parallel.py.
  c.mesh.tensor = 1  # tensor-parallel axis (heads / MLP / vocab split).

  # ---------------------------------------------------------------- evaluation
  c.eval = ml_collections.ConfigDict()
  c.eval.split = "validation"  # held-out split for perplexity vs length: "validation" | "test".
  c.eval.step = -1  # eval.run: -1 = the latest checkpoint (or --step); N >= 0 = checkpoint N, and
                    # every result file is tagged `_step<N>` so that several checkpoints' results
                    # sit side by side (a fine-tuning curve on the test split; a study's eval
                    # points set it). train.py's final evaluation refuses N >= 0.
  c.eval.length_multipliers = (0.5, 1.0, 2.0, 4.0, 8.0)  # eval lengths, multiples of train_len.
  c.eval.max_tokens_per_length = 65536  # tokens scored per length (document prefixes); 0 = all.
  c.eval.batch_tokens = 16384  # tokens per forward batch (bounds eval memory).
  c.eval.suites = "ppl_vs_length,loss_by_position"  # comma-separated: ppl_vs_length, loss_by_position
                             # (one pass gives both), passkey, needle, niah_multikey,
                             # niah_multivalue, niah_multiquery, variable_tracking, common_words,
                             # frequent_words, attention, algorithmic (task runs); the registry:
                             # eval/suites/__init__.py (tests/test_configs.py checks this list).
  c.eval.extension = "none"  # eval-time extensions, comma-separated (python -m eval.run runs each):
                             # none | pi | ntk | dynamic_ntk | yarn | dynamic_yarn | abf | llama3
                             # | longrope (rope)
                             # | alibi_interpolation (alibi) | self_extend | string | lm_infinite
                             # | streaming_llm | blockwise | dca (relative schemes) |
                             # randomized_positions | attention_temperature;
                             # models/extensions.py
                             # (the registry of these names).
  c.eval.factor = 1.0  # scale factor s of pi / ntk / yarn / llama3 / longrope (e.g. eval length
                       # / train_len); self_extend: the group size G (an integer).
  c.eval.window = -1  # self_extend / string / streaming_llm: window W; lm_infinite: n_local;
                      # tokens; -1 = default.
  c.eval.protocol = "non_overlapping"  # "non_overlapping" | "sliding" (Press et al., arXiv 2108.12409 Sec. 4).
  c.eval.stride = 0  # sliding: window advance, tokens, <= every eval length; 0 = length // 2; 1 = the paper's.
  c.eval.position_bins = 32  # loss by position: at most this many log-spaced position bins; 0 = one per position.
  # Passkey grid (eval/needle.py): context lengths (eval.length_multipliers x train_len, tokens,
  # BOS included) x needle depths, greedy decoding; the prompt format is data.passkey's.
  c.eval.passkey = ml_collections.ConfigDict()
  c.eval.passkey.depths = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # share of filler before the needle.
  c.eval.passkey.trials = 5  # prompts (random keys) per (length, depth) cell.
  c.eval.passkey.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.passkey.threshold = 0.9  # a length passes with accuracy >= this, and so must every shorter one.
  c.eval.passkey.max_new_tokens = 8  # greedy tokens decoded after the prompt; >= key_digits + 2.
  # Needle grid (eval/needle.py; RULER single needle, Hsieh et al., arXiv 2404.06654): a key-value
  # needle inside held-out text of eval.split; same grid, scoring and threshold rule as passkey.
  c.eval.needle = ml_collections.ConfigDict()
  c.eval.needle.depths = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # share of haystack before the needle.
  c.eval.needle.trials = 5  # prompts (random key, value and haystack start) per (length, depth) cell.
  c.eval.needle.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.needle.threshold = 0.9  # a length passes with accuracy >= this, and so must every shorter one.
  c.eval.needle.max_new_tokens = 10  # greedy tokens decoded after the prompt; >= value_digits + 2.
  c.eval.needle.preamble = True  # prompts open with RULER's task description (136 tokens + newline).
  c.eval.needle.fewshot = 0  # solved demonstrations before each prompt, 0..8 (RULER: 1 for vt, cwe).
  c.eval.needle.haystack = "text"  # "text" (held-out eval.split) | "noise" (RULER's noise).
  c.eval.needle.value_digits = 7  # digits of the needle's value, 1..18 (RULER: 7).
  c.eval.needle.value_kind = "digits"  # "digits" | "uuid" (RULER's UUID needles; needs max_new_tokens >= 38).
  # Multi-key needle grid (data/ruler.py; RULER niah_multikey): the needle among num_keys - 1
  # distractor needles of other keys; the needle's fields, grid, scoring and threshold rule.
  c.eval.niah_multikey = ml_collections.ConfigDict()
  c.eval.niah_multikey.depths = (0.0, 0.25, 0.5, 0.75, 1.0)  # share of haystack before the target.
  c.eval.niah_multikey.trials = 5  # prompts (random keys, values, haystack start) per cell.
  c.eval.niah_multikey.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.niah_multikey.threshold = 0.9  # a length passes with accuracy >= this, and every shorter one.
  c.eval.niah_multikey.max_new_tokens = 10  # greedy tokens decoded after the prompt; >= value_digits + 2.
  c.eval.niah_multikey.preamble = True  # prompts open with RULER's task description.
  c.eval.niah_multikey.fewshot = 0  # solved demonstrations before each prompt, 0..8 (RULER: 1 for vt, cwe).
  c.eval.niah_multikey.haystack = "text"  # "text" (held-out eval.split) | "noise" (RULER's noise)
                                          # | "needles" (RULER's niah_multikey_2: distractor needles).
  c.eval.niah_multikey.value_digits = 7  # digits of every needle's value, 1..18 (RULER: 7).
  c.eval.niah_multikey.value_kind = "digits"  # "digits" | "uuid" (RULER's niah_multikey_3 values).
  c.eval.niah_multikey.num_keys = 4  # needles per prompt, the target included, 2..64 (RULER: 4).
  # Multi-value and multi-query needle grids (data/ruler.py; RULER niah_multivalue /
  # niah_multiquery): every value of one key's needles, or of several keys, asked at once;
  # scored by recall of every value (string_match_all).
  for suite, field in (("niah_multivalue", "num_values"), ("niah_multiquery", "num_queries")):
    c.eval[suite] = ml_collections.ConfigDict()
    c.eval[suite].depths = (0.0, 0.25, 0.5, 0.75, 1.0)  # share of haystack before the first needle.
    c.eval[suite].trials = 5  # prompts per cell.
    c.eval[suite].seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
    c.eval[suite].threshold = 0.9  # a length passes with mean recall >= this, and every shorter one.
    c.eval[suite].max_new_tokens = 48  # greedy tokens; >= 5 + count x (value_digits + 2).
    c.eval[suite].preamble = True  # prompts open with RULER's task description.
    c.eval[suite].fewshot = 0  # solved demonstrations before each prompt, 0..8.
    c.eval[suite].haystack = "text"  # "text" (held-out eval.split) | "noise" (RULER's noise).
    c.eval[suite].value_digits = 7  # digits of every needle's value, 1..18 (RULER: 7).
    c.eval[suite].value_kind = "digits"  # "digits" | "uuid" (36-character values).
    c.eval[suite][field] = 4  # needles (values of the one key / keys asked), 2..64 (RULER: 4).
  # Variable tracking grid (data/variable_tracking.py; RULER vt): chains of VAR assignments in
  # held-out text; the answer is every variable of the queried chain, scored by recall (string_match_all).
  c.eval.variable_tracking = ml_collections.ConfigDict()
  c.eval.variable_tracking.depths = (0.0, 0.25, 0.5, 0.75, 1.0)  # share of haystack before the chain.
  c.eval.variable_tracking.trials = 5  # prompts (random names, values, haystack start) per cell.
  c.eval.variable_tracking.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.variable_tracking.threshold = 0.9  # a length passes with mean recall >= this, and every shorter one.
  c.eval.variable_tracking.max_new_tokens = 36  # greedy tokens after the prompt; >= 1 + 7 (hops + 1).
  c.eval.variable_tracking.preamble = True  # prompts open with RULER's task description.
  c.eval.variable_tracking.fewshot = 0  # solved demonstrations before each prompt, 0..8 (RULER: 1 for vt, cwe).
  c.eval.variable_tracking.haystack = "text"  # "text" (held-out eval.split) | "noise" (RULER's noise).
  c.eval.variable_tracking.num_chains = 1  # chains per prompt, the queried one included (RULER: 1).
  c.eval.variable_tracking.num_hops = 4  # aliases per chain; num_hops + 1 variables (RULER: 4).
  # Common and frequent words extraction (data/ruler_words.py; RULER cwe / fwe): counting over
  # the whole context, no needle and no depth (accuracy vs length), scored by recall of every word.
  c.eval.common_words = ml_collections.ConfigDict()
  c.eval.common_words.trials = 10  # prompts (random words and order) per length.
  c.eval.common_words.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.common_words.threshold = 0.9  # a length passes with mean recall >= this, and every shorter one.
  c.eval.common_words.max_new_tokens = 36  # greedy tokens; >= num_common x 11 + 2 (" 10. " and a word).
  c.eval.common_words.preamble = True  # prompts open with RULER's task description.
  c.eval.common_words.fewshot = 0  # solved demonstrations before each prompt, 0..8 (RULER: 1 for vt, cwe).
  c.eval.common_words.num_common = 3  # words to report, 1..32 (RULER: 10).
  c.eval.common_words.common_repeats = 6  # times each common word is listed (RULER: 30; 6 below 4K).
  c.eval.common_words.uncommon_repeats = 1  # times each other word is listed, < common_repeats (RULER: 3; 1).
  c.eval.frequent_words = ml_collections.ConfigDict()
  c.eval.frequent_words.trials = 10  # prompts (random coded words and order) per length.
  c.eval.frequent_words.seed = 0  # seed of the prompts: same prompts for every scheme and checkpoint.
  c.eval.frequent_words.threshold = 0.9  # a length passes with mean recall >= this, and every shorter one.
  c.eval.frequent_words.max_new_tokens = 24  # greedy tokens; >= 3 x (word_letters + 1) + 2.
  c.eval.frequent_words.preamble = True  # prompts open with RULER's task description.
  c.eval.frequent_words.fewshot = 0  # solved demonstrations before each prompt, 0..8 (RULER: 1 for vt, cwe).
  c.eval.frequent_words.alpha = 2.0  # Zipf exponent of the word counts, > 1 (RULER: 2.0).
  c.eval.frequent_words.word_letters = 6  # letters per coded word, 2..12 (RULER: 6).
  # Attention diagnostics (eval/attention_stats.py): entropy and sink mass per layer and head at
  # every eval length, on the first window (from the BOS) of this many documents of eval.split.
  c.eval.attention = ml_collections.ConfigDict()
  c.eval.attention.windows = 8  # documents (windows) per length; memory O(heads x length^2).
  return c
