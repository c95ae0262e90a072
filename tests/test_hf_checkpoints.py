"""Hugging Face checkpoints in and out, measured against transformers (the dev extra's CPU torch;
imported inside the tests): runs/hf_llama.py, hf_folder.py, hf_import.py, hf_export.py.

(a) random-initialised transformers models of every supported architecture, saved with
    `save_pretrained`, import with logits within 1e-4 (float32) below and beyond
    original_max_position_embeddings, every RoPE scaling type among them;
(b) our models of every exportable configuration, and a run fine-tuned here with the YaRN recipe
    from an imported model, load in transformers with logits within 1e-4;
(c) import(export(model)) is the model bitwise: parameters and logits;
(d) greedy generation with our KV cache equals transformers' `generate` for 32 tokens.
Models are tiny (2 layers, d_model 64) to keep CI short."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from conftest import config_file_module, tiny_config
from configs.errors import flatten
from eval import run as eval_run
from models import decoding, sharding
from models.spec import init_params, model_spec
from runs import files, hf_export, hf_folder, hf_import, hf_llama
from configs.stored import load_run_config
from runs.checkpoint import restore_params

TOL = 1e-4  # float32 logits, transformers vs ours
ORIGINAL = 32  # original_max_position_embeddings of every case (tokens)
LENGTHS = (24, 80)  # below and beyond it


def lengths(scaling: str | None) -> tuple[int, ...]:
  """The sequence lengths to compare at: one of 80 tokens covers positions below and beyond the
  original length where the frequencies are static (causal logits of a prefix do not depend on
  what follows); dynamic NTK and LongRoPE choose their frequencies from the length, so they get
  a call below it (24 tokens) and one beyond (80)."""
  return LENGTHS if scaling in ("dynamic", "dynamic_ntk", "longrope") else LENGTHS[1:]
VOCAB = 97
THETA = 10000.0


def transformers():
  """transformers and torch, imported when a test needs them (seconds; the dev extra)."""
  torch = pytest.importorskip("torch")
  tf = pytest.importorskip("transformers")
  torch.manual_seed(0)
  return torch, tf


def hf_random(model_type: str, rope: dict | None, **fields):
  """A random-initialised transformers model: every weight drawn (norm scales near 1, q/k/v
  biases non-zero, o_proj biases zero), eager attention, float32."""
  torch, tf = transformers()
  args = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ORIGINAL,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)
  args.update(fields)
  if rope:
    args["rope_parameters"] = {"rope_theta": THETA, **rope}
  model = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model(model_type, **args),
                                              attn_implementation="eager").eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("o_proj.bias"):
        p.zero_()
      elif "norm" in name:
        p.copy_(1 + 0.2 * torch.randn_like(p))
      else:
        p.copy_(0.1 * torch.randn_like(p))
  return model


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
  torch, _ = transformers()
  with torch.no_grad():
    return model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


def spec_of(config):
  return model_spec(config, sharding.make_mesh(config.mesh, jax.devices()[:1]))


def our_logits(config, params, tokens: np.ndarray, spec=None) -> np.ndarray:
  """Our float32 logits [batch, len, vocab] of one document at positions 0..len-1."""
  spec = spec or spec_of(config)
  tokens = jnp.asarray(tokens, jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
  forward = jax.jit(lambda p, t, q: nnx.merge(spec.graphdef, p)(t, q, jnp.ones_like(t)))
  return np.asarray(forward(params, tokens, positions))


def imported(folder: str):
  """(config, params) of `hf:<folder>`, through the same calls a warm start makes."""
  config = hf_import.parent_config("hf:" + folder)
  config.mesh.data = 1
  hf_import.check_weights("hf:" + folder, config)
  params = hf_import.load_params("hf:" + folder, config, spec_of(config))
  return config, params


def tokens_of(length: int, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(3, vocab, (1, length))


LONG = [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
IMPORT_CASES = {  # id: (model_type, rope_parameters, config fields)
    "llama": ("llama", None, {}),
    "mistral-linear-window": ("mistral", {"rope_type": "linear", "factor": 4.0},
                              {"sliding_window": 16}),
    "qwen2-dynamic": ("qwen2", {"rope_type": "dynamic", "factor": 2.0}, {}),
    "qwen3-yarn-mscale": ("qwen3", {"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0,
                                    "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 0.707,
                                    "truncate": False, "original_max_position_embeddings": 32},
                          {"head_dim": 32, "max_position_embeddings": 256}),
    "olmo2-llama3": ("olmo2", {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                     {"max_position_embeddings": 128}),
    "smollm3-longrope": ("smollm3", {"rope_type": "longrope", "factor": 4.0, "long_factor": LONG,
                                     "short_factor": [1.0, 1.0, 1.1, 1.1, 1.2, 1.2, 1.3, 1.3],
                                     "original_max_position_embeddings": 32},
                         {"no_rope_layer_interval": 2, "max_position_embeddings": 128}),
    "llama-yarn-biases": ("llama", {"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 32},
                          {"attention_bias": True, "max_position_embeddings": 128}),
}


@pytest.mark.parametrize("case", IMPORT_CASES)
def test_import_matches_transformers(case, tmp_path):
  model_type, rope, fields = IMPORT_CASES[case]
  model = hf_random(model_type, rope, **fields)
  model.save_pretrained(str(tmp_path))
  config, params = imported(str(tmp_path))
  spec = spec_of(config)
  for length in lengths((rope or {}).get("rope_type")):
    tokens = tokens_of(length)
    error = np.abs(our_logits(config, params, tokens, spec) - hf_logits(model, tokens)).max()
    assert error < TOL, (case, length, error)


def our_config(text_corpus, fields: dict):
  """tiny_config (2 layers, d_model 64, 4 heads, train_len 32) as a SwiGLU RoPE model + fields."""
  c = tiny_config(text_corpus, "rope")
  c.model.mlp_activation = "swiglu"
  c.model.norm_eps = 1e-5
  for path, value in fields.items():
    hf_import.set_field(c, path, value)
  return c


def random_params(config, seed: int = 0):
  """init_params of `config`, every array perturbed (norm scales and biases off 1 and 0)."""
  params = jax.tree.map(np.asarray, init_params(config, spec_of(config)))
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: (x + 0.1 * rng.standard_normal(x.shape)).astype(x.dtype), params)


P = "model.position."
EXPORT_CASES = {  # id: (expected model_type, fields)
    "llama-gqa-pi": ("llama", {"model.num_kv_heads": 2, "model.tie_embeddings": False,
                               P + "rope_scaling": "pi", P + "rope_scaling_factor": 4.0}),
    "llama-ntk": ("llama", {P + "rope_scaling": "ntk", P + "rope_scaling_factor": 4.0}),
    "qwen2-abf": ("qwen2", {"model.qkv_bias": True, P + "rope_scaling": "abf"}),
    "qwen3-dynamic": ("qwen3", {"model.qk_norm": "head", "model.qkv_bias": True,
                                "model.head_dim": 32, P + "rope_scaling": "dynamic_ntk",
                                P + "dynamic_ntk_alpha": 2.0}),
    "olmo2-llama3": ("olmo2", {"model.norm_position": "post", "model.qk_norm": "full",
                               P + "rope_scaling": "llama3", P + "rope_scaling_factor": 4.0}),
    "smollm3-nope-longrope": ("smollm3", {
        P + "nope_every": 2, P + "rope_scaling": "longrope", P + "rope_scaling_factor": 4.0,
        P + "longrope_long_factors": tuple(LONG),
        P + "longrope_short_factors": (1.0, 1.1, 1.1, 1.2, 1.2, 1.3, 1.3, 1.4)}),
    "mistral-window-yarn-mscale": ("mistral", {
        "model.sliding_window": 16, P + "rope_scaling": "yarn", P + "rope_scaling_factor": 4.0,
        P + "yarn_mscale": 0.8}),
    "qwen2-global-yarn": ("qwen2", {
        "model.qkv_bias": True, "model.sliding_window": 16, "model.global_every": 2,
        P + "rope_scaling": "yarn", P + "rope_scaling_factor": 4.0, P + "yarn_truncate": False}),
    "smollm3-drope": ("smollm3", {P + "kind": "none"}),
}


def same_model(a, b) -> list[str]:
  """The model fields (position ones included where the mapping is one to one) that differ,
  rope_scaling_train_len = -1 read as data.train_len."""
  def fields(c):
    flat = {k: v for k, v in flatten(c.to_dict()).items() if k.startswith("model.")}
    if flat.get(P + "rope_scaling_train_len") == -1:
      flat[P + "rope_scaling_train_len"] = c.data.train_len
    return flat
  fa, fb = fields(a), fields(b)
  return sorted(k for k in fa if fa[k] != fb.get(k))


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_export_loads_in_transformers_and_imports_back_bitwise(case, text_corpus, tmp_path):
  _, tf = transformers()
  model_type, fields = EXPORT_CASES[case]
  config = our_config(text_corpus, fields)
  params = random_params(config)
  out = hf_export.write_export(config, params, str(tmp_path))
  assert out["architecture"] == hf_llama.ARCHITECTURES[model_type].causal_lm
  model = tf.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager")
  spec = spec_of(config)
  back, back_params = imported(str(tmp_path))
  back_spec = spec_of(back)
  for length in lengths(config.model.position.rope_scaling):
    tokens = tokens_of(length, config.model.vocab_size)
    ours = our_logits(config, params, tokens, spec)
    assert np.abs(ours - hf_logits(model, tokens)).max() < TOL, (case, length)
    # (c) import(export(model)) computes the same logits, bit for bit
    assert np.array_equal(ours, our_logits(back, back_params, tokens, back_spec)), (case, length)
  flat, flat_back = (jax.tree_util.tree_leaves_with_path(p) for p in (params, back_params))
  assert [(k, np.asarray(v).tobytes()) for k, v in flat] == [
      (k, np.asarray(v).tobytes()) for k, v in flat_back]
  differ = same_model(config, back)
  if case in ("llama-ntk", "qwen2-abf"):  # written as rope_type default with their base
    assert {P + "rope_scaling", P + "rope_theta"} <= set(differ) <= {
        P + "rope_scaling", P + "rope_theta", P + "rope_scaling_factor"}, differ
  elif case == "mistral-window-yarn-mscale":  # written as transformers' attention_factor
    assert set(differ) == {P + "yarn_mscale", P + "yarn_attention_factor"}, differ
  else:
    assert not differ, differ


def test_greedy_generation_with_our_kv_cache_equals_generate(tmp_path):
  torch, _ = transformers()
  model = hf_random("llama", {"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 16},
                    max_position_embeddings=64)
  model.save_pretrained(str(tmp_path))
  config, params = imported(str(tmp_path))
  prompt = tokens_of(8, seed=1)
  generate = decoding.make_generate_fn(spec_of(config).graphdef,
                                       sharding.make_mesh(config.mesh, jax.devices()[:1]),
                                       prompt_len=8, max_new_tokens=32)
  ours = np.asarray(generate(params, jnp.asarray(prompt, jnp.int32)))
  model.generation_config.eos_token_id = None  # 32 tokens whatever they are
  with torch.no_grad():
    theirs = model.generate(torch.tensor(prompt), attention_mask=torch.ones(1, 8, dtype=torch.long),
                            max_new_tokens=32, do_sample=False, pad_token_id=0)
  assert ours.tolist() == theirs[:, 8:].numpy().tolist()


def tokenizer_folder(text_corpus, folder) -> int:
  """A small byte-level BPE trained on the corpus, saved as `folder/tokenizer.json` (as a hub
  download holds it); returns its vocabulary size."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(text_corpus))]
  tok.train_from_iterator(texts, trainers.BpeTrainer(
      vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>"], show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  tok.save(os.path.join(folder, "tokenizer.json"))
  return tok.get_vocab_size()


def test_smollm2_shaped_model_fine_tuned_with_yarn_evaluated_and_exported(text_corpus, tmp_path):
  """The issue's path on a fresh clone, tiny: a SmolLM2-shaped model (tied embeddings, GQA 3/1,
  rope_theta 100,000; 2 layers) saved with save_pretrained, fine-tuned by
  configs/extend_yarn.py:hf:<folder> at 4x, evaluated by eval.run, exported by runs.hf_export:
  transformers loads it with the YaRN rope_parameters and matching logits, and it imports back
  bitwise."""
  torch, tf = transformers()
  folder = tmp_path / "smollm2"
  folder.mkdir()
  vocab = tokenizer_folder(text_corpus, folder)
  model = hf_random("llama", {"rope_type": "default", "rope_theta": 100000.0}, vocab_size=vocab,
                    hidden_size=48, num_attention_heads=3, num_key_value_heads=1, head_dim=16,
                    intermediate_size=128, tie_word_embeddings=True, bos_token_id=0,
                    eos_token_id=0)
  model.save_pretrained(str(folder))
  c = config_file_module("extend_yarn").get_config(f"hf:{folder}")
  assert (c.data.train_len, c.model.position.rope_scaling, c.train.init_from) == (
      128, "yarn", f"hf:{folder}")
  assert (c.train.num_steps, c.train.learning_rate, c.model.position.rope_theta) == (
      400, 2e-5, 100000.0)
  c.data.source, c.data.text_glob, c.data.batch_size = "text_files", text_corpus, 8
  c.train.num_steps, c.train.warmup_steps, c.train.checkpoint_every_steps = 2, 1, 2
  c.train.eval_tokens, c.train.peak_flops_per_device = 512, 1e11
  c.eval.length_multipliers, c.eval.max_tokens_per_length, c.eval.batch_tokens = (1.0,), 512, 512
  child = str(tmp_path / "ext")
  out = train.train_and_evaluate(c, child, devices=jax.devices()[:1])
  assert out["step"] == 2 and np.isfinite(out["val_loss"])
  parent = json.load(open(os.path.join(child, "config.json")))["parent"]
  assert parent["workdir"] == f"hf:{folder}" and parent["hf"]["revision"] is None
  assert parent["hf"]["weights_sha256"] == {
      "model.safetensors": files.file_sha256(str(folder / "model.safetensors"))}
  results = eval_run.evaluate(child, length_multipliers=[0.25, 2])
  assert [r["length"] for r in results["ppl_vs_length"]["rows"]] == [32, 256]
  suites = load_run_config(child)  # the retrieval suites run on it unchanged (one cell each)
  suites.eval.suites = "passkey,niah_multikey"
  for name in ("passkey", "niah_multikey"):
    suites.eval[name].trials, suites.eval[name].depths = 1, (0.5,)
  results = eval_run.evaluate(child, length_multipliers=[4], config=suites)
  assert {"passkey", "niah_multikey"} <= set(results), sorted(results)
  exported = str(tmp_path / "ext_hf")
  assert hf_export.export(child, exported)["architecture"] == "LlamaForCausalLM"
  assert {"tokenizer.json", "generation_config.json"} <= set(os.listdir(exported))
  loaded = tf.AutoModelForCausalLM.from_pretrained(exported, attn_implementation="eager")
  rope = loaded.config.rope_parameters
  assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == (
      "yarn", 4.0, 32)
  child_config = load_run_config(child)
  child_config.mesh.data = 1
  params, _ = restore_params(child, child_config, spec_of(child_config))
  back, back_params = imported(exported)
  for length in lengths("yarn"):
    tokens = tokens_of(length, vocab)
    ours = our_logits(child_config, params, tokens)
    assert np.abs(ours - hf_logits(loaded, tokens)).max() < TOL, length
    assert np.array_equal(ours, our_logits(back, back_params, tokens))
  assert not same_model(child_config, back)


def test_the_import_command_writes_a_run_that_eval_run_reads(text_corpus, tmp_path):
  """`python -m runs.hf_import` (convert): config.json with the parent and an Orbax checkpoint
  at step 0; eval.run evaluates it with data fields of its own; a second import is refused."""
  folder = tmp_path / "qwen2"
  hf_random("qwen2", None, vocab_size=259).save_pretrained(str(folder))
  run = str(tmp_path / "run")
  hf_import.convert(f"hf:{folder}", run)
  stored = json.load(open(os.path.join(run, "config.json")))
  assert stored["hf_import"] and stored["parent"]["hf"]["name"] == "qwen2"
  config = load_run_config(run)
  config.data.source, config.data.text_glob = "text_files", text_corpus
  config.data.batch_size = 8  # eval.run uses every device (8 in the tests)
  config.eval.max_tokens_per_length, config.eval.batch_tokens = 256, 256
  results = eval_run.evaluate(run, length_multipliers=[1 / 8], config=config)
  assert np.isfinite(results["ppl_vs_length"]["rows"][0]["ppl"])
  with pytest.raises(hf_import.ConfigError, match="holds checkpoints already"):
    hf_import.convert(f"hf:{folder}", run)


@pytest.mark.parametrize("fields, message", [
    ({P + "kind": "alibi"}, r"kind='alibi' has no transformers equivalent; exportable: "),
    ({P + "rope_scaling": "yarn", P + "yarn_ramp": "ratio"}, r"yarn_ramp='ratio'"),
    ({P + "rotary_fraction": 0.5}, r"rotary_fraction=0.5"),
    ({"model.qk_norm": "full"}, r"OLMo 2 is post-norm with qk_norm='full'"),
])
def test_export_refuses_what_transformers_cannot_run(text_corpus, fields, message):
  with pytest.raises(hf_import.ConfigError, match=message):
    hf_llama.export_arch(our_config(text_corpus, fields))


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
     r"model_type='gpt2' \(architectures \['GPT2LMHeadModel'\]\) is not supported; supported: "
     r"llama, mistral, qwen2, qwen3, olmo2, smollm3"),
    ({"architectures": ["LlamaForSequenceClassification"]}, r"imports as LlamaForCausalLM"),
    ({"hidden_act": "gelu"}, r"hidden_act='gelu' is not supported"),
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}},
     r"rope_type='proportional' is not supported"),
    ({"partial_rotary_factor": 0.5}, r"partial_rotary_factor=0.5 is not supported"),
    ({"num_hidden_layers": None}, r"lacks 'num_hidden_layers'"),
])
def test_config_json_that_cannot_be_represented_is_refused_in_one_line(change, message):
  hf = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 97,
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 32, **change}
  hf = {k: v for k, v in hf.items() if v is not None}
  with pytest.raises(hf_import.ConfigError, match=message) as error:
    hf_llama.config_fields(hf, "config.json")
  assert "\n" not in str(error.value)


def test_provenance_of_a_hub_cache_snapshot_and_a_local_dir(tmp_path):
  snapshot = tmp_path / "models--HuggingFaceTB--SmolLM2-135M" / "snapshots" / "abc123"
  snapshot.mkdir(parents=True)
  assert hf_folder.provenance(str(snapshot), {}) == {"name": "HuggingFaceTB/SmolLM2-135M",
                                                      "revision": "abc123"}
  local = tmp_path / "local"
  (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
  (local / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(
      "def456\netag\n1.0\n")
  assert hf_folder.provenance(str(local), {"_name_or_path": "Qwen/Qwen2.5-0.5B"}) == {
      "name": "Qwen/Qwen2.5-0.5B", "revision": "def456"}


def test_config_fields_read_defaults_as_transformers_does():
  hf = {"model_type": "mistral", "vocab_size": 97, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 32}
  assert hf_llama.config_fields(hf, "c")["model.sliding_window"] == 4096  # MistralConfig's
  assert "model.sliding_window" not in hf_llama.config_fields({**hf, "sliding_window": None}, "c")
  fields = hf_llama.config_fields({**hf, "num_attention_heads": 16}, "c")
  assert (fields["model.num_kv_heads"], fields["model.norm_eps"]) == (8, 1e-6)  # MistralConfig's
  qwen3 = hf_llama.config_fields({**hf, "model_type": "qwen3"}, "c")
  assert (qwen3["model.head_dim"], qwen3["model.qk_norm"]) == (128, "head")
  smol = hf_llama.config_fields({**hf, "model_type": "smollm3", "num_hidden_layers": 8}, "c")
  assert (smol["model.position.nope_every"], smol["model.tie_embeddings"],
          smol["model.position.rope_theta"]) == (4, True, 2000000.0)
