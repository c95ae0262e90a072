"""The Llama family in Hugging Face format <-> this decoder: `config.json` <-> the config's model
fields, safetensors tensor names <-> the parameter tree. Pure mapping (numpy, no torch, no JAX).

Architectures (transformers 5.25, `models/<name>/modeling_<name>.py`; every one SwiGLU with
`hidden_act="silu"`, RMSNorm, grouped-query attention, half-split RoPE):

| model_type | class | what it adds to Llama | our fields |
|---|---|---|---|
| `llama` | LlamaForCausalLM | `attention_bias` (q, k, v and o) | `qkv_bias` (o_proj's bias must be 0) |
| `mistral` | MistralForCausalLM | `sliding_window` on every layer | `sliding_window` |
| `qwen2` | Qwen2ForCausalLM | q, k, v biases always; `layer_types` sliding layers | `qkv_bias=True`, `sliding_window`, `global_every` |
| `qwen3` | Qwen3ForCausalLM | RMSNorm of each head's q and k | `qk_norm="head"` |
| `olmo2` | Olmo2ForCausalLM | RMSNorm of the whole q and k; x + norm(f(x)) | `qk_norm="full"`, `norm_position="post"` |
| `smollm3` | SmolLM3ForCausalLM | `no_rope_layers` (NoPE every N-th layer) | `nope_every=N`, or kind "none" |

Rotary layout: transformers rotates each head of the q_proj / k_proj outputs with `rotate_half`
(feature i pairs with i + D/2; modeling_llama.py `apply_rotary_pos_emb`), which is our RoPE's
half-split layout (models/positions/rope.py `apply_rope`). The q and k weight rows therefore map
with no permutation: row h*D + j of q_proj.weight is wq[:, h, j]. (transformers'
convert_llama_weights_to_hf.py permutes Meta's interleaved checkpoints into this layout once,
before any Hugging Face checkpoint exists.) tests/test_hf_checkpoints.py checks it by logits.

RoPE scaling, `rope_parameters` (or the older `rope_scaling` + top-level `rope_theta`) <->
`model.position` (transformers `modeling_rope_utils.py`, `_compute_*_parameters`):

| rope_type | ours | mapped fields |
|---|---|---|
| `default` | `none` (or `ntk` / `abf` exported with their base) | rope_theta |
| `linear` | `pi` | factor = s |
| `dynamic` | `dynamic_ntk` | factor = dynamic_ntk_alpha; max_position_embeddings = L |
| `yarn` | `yarn` (`yarn_ramp="index"` only) | factor, original_max_position_embeddings = L, beta_fast = yarn_beta, beta_slow = yarn_alpha, truncate, attention_factor (or mscale and mscale_all_dim) |
| `llama3` | `llama3` | factor, original L, low_freq_factor, high_freq_factor |
| `longrope` | `longrope` (`longrope_keep_first=0` only) | factor, original L, long_factor, short_factor, attention_factor |

Not representable, refused with a line naming it: another model_type or rope_type,
`partial_rotary_factor` != 1 (these classes rotate every feature under rope_type "default",
ignoring it, and fail under the others), `mlp_bias`, a non-zero o_proj bias, a hidden_act other
than silu, a sliding-window or NoPE layer pattern our fields cannot say, per-layer-type RoPE that
differs between layer types.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from configs.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Arch:
  """One transformers architecture of the Llama family.

  Attributes:
    model_type: config.json's `model_type`.
    causal_lm: the class `architectures` names (transformers' `<Name>ForCausalLM`).
    qk_norm: our model.qk_norm for it ("none" | "head" | "full").
    norm_position: our model.norm_position ("pre" | "post").
    bias: "never" | "always" (q, k, v; Qwen2) | "attention_bias" (q, k, v and o when config.json's
      attention_bias is true).
    sliding: "none" | "all" (Mistral: every layer) | "layer_types" (Qwen2/3: use_sliding_window
      and layer_types).
    defaults: config.json keys a file may omit -> the value transformers' config class uses.
  """

  model_type: str
  causal_lm: str
  qk_norm: str = "none"
  norm_position: str = "pre"
  bias: str = "attention_bias"
  sliding: str = "none"
  defaults: dict = dataclasses.field(default_factory=dict)


_COMMON = {"num_key_value_heads": None, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "rope_theta": 10000.0, "hidden_act": "silu", "head_dim": None, "attention_bias": False,
           "mlp_bias": False}
# The defaults of transformers 5.25's configuration_<name>.py classes.
ARCHITECTURES = {
    "llama": Arch("llama", "LlamaForCausalLM", defaults=_COMMON),
    "mistral": Arch("mistral", "MistralForCausalLM", bias="never", sliding="all",
                    defaults={**_COMMON, "num_key_value_heads": 8, "sliding_window": 4096}),
    "qwen2": Arch("qwen2", "Qwen2ForCausalLM", bias="always", sliding="layer_types",
                  defaults={**_COMMON, "num_key_value_heads": 32, "use_sliding_window": False,
                            "sliding_window": 4096, "max_window_layers": 28}),
    "qwen3": Arch("qwen3", "Qwen3ForCausalLM", qk_norm="head", sliding="layer_types",
                  defaults={**_COMMON, "num_key_value_heads": 32, "head_dim": 128,
                            "use_sliding_window": False, "sliding_window": 4096,
                            "max_window_layers": 28}),
    "olmo2": Arch("olmo2", "Olmo2ForCausalLM", qk_norm="full", norm_position="post",
                  defaults={**_COMMON, "rms_norm_eps": 1e-5}),
    "smollm3": Arch("smollm3", "SmolLM3ForCausalLM",
                    defaults={**_COMMON, "num_key_value_heads": 4, "tie_word_embeddings": True,
                              "rope_theta": 2000000.0, "no_rope_layer_interval": 4,
                              "use_sliding_window": False}),
}
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "max_position_embeddings")
# What `python -m runs.hf_export` can write, for its refusals.
EXPORTABLE = ("model.position.kind='rope' with rope_scaling none, pi, ntk, dynamic_ntk, yarn "
              "(yarn_ramp='index'), abf, llama3 or longrope (longrope_keep_first=0) and "
              "nope_every (SmolLM3), or kind='none' (SmolLM3, every layer NoPE); SwiGLU; "
              "norm_position 'post' with qk_norm 'full' (OLMo 2)")


def _refuse(where: str, what: str) -> ConfigError:
  return ConfigError(f"{where}: {what}")


# ------------------------------------------------------------------------------- import


def architecture(hf: dict, where: str) -> Arch:
  """The `Arch` of a parsed config.json (`where`: its path, for messages).

  Raises:
    ConfigError: no model_type, one that is not in ARCHITECTURES, or `architectures` naming no
      causal-LM class of it (e.g. a sequence classifier, whose weights have no lm_head).
  """
  model_type = hf.get("model_type")
  names = hf.get("architectures") or []
  if model_type not in ARCHITECTURES:
    raise _refuse(where, f"model_type={model_type!r} (architectures {names}) is not supported; "
                         f"supported: {', '.join(ARCHITECTURES)}")
  arch = ARCHITECTURES[model_type]
  if names and arch.causal_lm not in names:
    raise _refuse(where, f"architectures={names} is not supported; {model_type} imports as "
                         f"{arch.causal_lm}")
  return arch


def _get(hf: dict, arch: Arch, key: str):
  return hf[key] if key in hf and hf[key] is not None or key not in arch.defaults else (
      arch.defaults[key])


def _rope_parameters(hf: dict, arch: Arch, layer_types: list[str], where: str) -> dict:
  """config.json's RoPE dict, one for every layer type (transformers' standardize_rope_params):
  `rope_parameters`, else `rope_scaling`, with `rope_theta`, `rope_type` filled in."""
  rp = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
  nested = [k for k in rp if k in set(layer_types) | {"full_attention", "sliding_attention"}]
  if nested:
    values = [rp[k] for k in nested if rp[k] is not None]
    if any(v != values[0] for v in values):
      raise _refuse(where, f"rope_parameters differ between layer types {nested}; one RoPE for "
                           "every layer is supported")
    rp = values[0] if values else {}
  rp = dict(rp)
  rp.setdefault("rope_theta", _get(hf, arch, "rope_theta"))
  rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
  if hf.get("partial_rotary_factor") is not None:
    rp.setdefault("partial_rotary_factor", hf["partial_rotary_factor"])
  if "original_max_position_embeddings" in hf:  # Phi-3 style, outside the dict: it wins there
    rp["original_max_position_embeddings"] = hf["original_max_position_embeddings"]
  rp.setdefault("original_max_position_embeddings", hf["max_position_embeddings"])
  return rp


def _position_fields(rp: dict, max_pos: int, where: str) -> dict:
  """model.position fields of a standardised RoPE dict (module table)."""
  kind, p = rp["rope_type"], "model.position."
  out = {p + "kind": "rope", p + "rope_theta": float(rp["rope_theta"])}
  partial = rp.get("partial_rotary_factor")
  if partial not in (None, 1, 1.0):
    raise _refuse(where, f"partial_rotary_factor={partial} is not supported: transformers' "
                         "Llama-family classes rotate every feature under rope_type 'default' "
                         "(the factor is ignored) and fail under the others")
  original = int(rp["original_max_position_embeddings"])

  def factor(default=None):
    f = rp.get("factor")
    return float(max_pos / original if f is None and default is None else
                 (default if f is None else f))

  if kind == "default":
    return out
  if kind == "linear":
    return {**out, p + "rope_scaling": "pi", p + "rope_scaling_factor": factor()}
  if kind == "dynamic":
    return {**out, p + "rope_scaling": "dynamic_ntk", p + "dynamic_ntk_alpha": factor(),
            p + "rope_scaling_train_len": int(max_pos)}
  scaled = {p + "rope_scaling_factor": factor(), p + "rope_scaling_train_len": original}
  if kind == "yarn":
    out.update({**scaled, p + "rope_scaling": "yarn", p + "yarn_ramp": "index",
                p + "yarn_beta": float(rp.get("beta_fast") or 32.0),
                p + "yarn_alpha": float(rp.get("beta_slow") or 1.0),
                p + "yarn_truncate": bool(rp.get("truncate", True))})
    if rp.get("attention_factor") is not None:
      out[p + "yarn_attention_factor"] = float(rp["attention_factor"])
    elif rp.get("mscale") and rp.get("mscale_all_dim"):  # HF uses the ratio only with both set
      out[p + "yarn_mscale"] = float(rp["mscale"])
      out[p + "yarn_mscale_all_dim"] = float(rp["mscale_all_dim"])
    return out
  if kind == "llama3":
    return {**out, **scaled, p + "rope_scaling": "llama3",
            p + "llama3_low_freq_factor": float(rp["low_freq_factor"]),
            p + "llama3_high_freq_factor": float(rp["high_freq_factor"])}
  if kind == "longrope":
    out.update({**scaled, p + "rope_scaling": "longrope",
                p + "longrope_long_factors": tuple(float(x) for x in rp["long_factor"]),
                p + "longrope_short_factors": tuple(float(x) for x in rp["short_factor"])})
    if rp.get("attention_factor") is not None:
      out[p + "longrope_attention_factor"] = float(rp["attention_factor"])
    return out
  raise _refuse(where, f"rope_type={kind!r} is not supported; supported: default, linear, "
                       "dynamic, yarn, llama3, longrope")


def _layer_types(hf: dict, arch: Arch, n: int) -> list[str]:
  if arch.sliding != "layer_types":
    return ["full_attention"] * n
  if hf.get("layer_types"):
    return list(hf["layer_types"])
  sliding = _get(hf, arch, "use_sliding_window") and hf.get("sliding_window") is not None
  first = _get(hf, arch, "max_window_layers")
  return ["sliding_attention" if sliding and i >= first else "full_attention" for i in range(n)]


def _window_fields(hf: dict, arch: Arch, n: int, where: str) -> dict:
  """model.sliding_window / global_every of the architecture's sliding-window layers."""
  if arch.sliding == "all":  # an explicit null is no window; an absent key the class default
    window = hf["sliding_window"] if "sliding_window" in hf else arch.defaults["sliding_window"]
    return {"model.sliding_window": int(window)} if window else {}
  if arch.model_type == "smollm3" and _get(hf, arch, "use_sliding_window"):
    raise _refuse(where, "use_sliding_window=true (SmolLM3's windowed NoPE layers) is not "
                         "supported")
  types = _layer_types(hf, arch, n)
  if arch.sliding != "layer_types" or not _get(hf, arch, "use_sliding_window") or (
      "sliding_attention" not in types):
    return {}
  window = int(hf["sliding_window"])
  if all(t == "sliding_attention" for t in types):
    return {"model.sliding_window": window}
  full = [i for i, t in enumerate(types) if t != "sliding_attention"]
  every = full[0] + 1
  if full != list(range(every - 1, n, every)):
    raise _refuse(where, f"layer_types={types} is not supported: sliding-window layers must be "
                         "all layers or all but every N-th (model.global_every)")
  return {"model.sliding_window": window, "model.global_every": every}


def _nope_fields(hf: dict, arch: Arch, n: int, where: str) -> dict:
  """SmolLM3's `no_rope_layers` (1 = RoPE, 0 = NoPE) as model.position.nope_every / kind."""
  if arch.model_type != "smollm3":
    return {}
  interval = _get(hf, arch, "no_rope_layer_interval")
  flags = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
  flags = [int(f) for f in flags]
  if len(flags) != n:
    raise _refuse(where, f"no_rope_layers has {len(flags)} entries for {n} layers")
  if not any(flags):
    return {"model.position.kind": "none"}
  if all(flags):
    return {}
  every = flags.index(0) + 1
  if flags != [int((i + 1) % every != 0) for i in range(n)]:
    raise _refuse(where, f"no_rope_layers={flags} is not supported: NoPE layers must be every "
                         "N-th layer (model.position.nope_every)")
  return {"model.position.nope_every": every}


def config_fields(hf: dict, where: str) -> dict:
  """Our config fields of a Llama-family config.json (module docstring), dotted paths -> values.

  Args:
    hf: the parsed config.json.
    where: its path, for messages.

  Returns:
    {"model.<field>": value, "model.position.<field>": value, "data.train_len": the context
    length it states (max_position_embeddings, tokens)}; SwiGLU, param dtype float32.

  Raises:
    ConfigError: one line naming the config.json key or value that cannot be represented, or a
      required key that is missing.
  """
  arch = architecture(hf, where)
  missing = [k for k in REQUIRED if k not in hf]
  if missing:
    raise _refuse(where, f"lacks {missing[0]!r} (a {arch.causal_lm} config.json has "
                         f"{', '.join(REQUIRED)})")
  for key, ok in (("hidden_act", lambda v: v == "silu"), ("mlp_bias", lambda v: not v)):
    if not ok(_get(hf, arch, key)):
      raise _refuse(where, f"{key}={hf[key]!r} is not supported (SwiGLU with silu, no MLP "
                           "biases)")
  n, heads, d = int(hf["num_hidden_layers"]), int(hf["num_attention_heads"]), int(hf["hidden_size"])
  kv = _get(hf, arch, "num_key_value_heads") or heads
  head_dim = _get(hf, arch, "head_dim") or d // heads
  bias = arch.bias == "always" or (arch.bias == "attention_bias" and
                                   bool(_get(hf, arch, "attention_bias")))
  fields = {
      "model.vocab_size": int(hf["vocab_size"]), "model.num_layers": n, "model.d_model": d,
      "model.num_heads": heads, "model.num_kv_heads": -1 if kv == heads else int(kv),
      "model.head_dim": -1 if head_dim * heads == d else int(head_dim),
      "model.mlp_dim": int(hf["intermediate_size"]), "model.mlp_activation": "swiglu",
      "model.tie_embeddings": bool(_get(hf, arch, "tie_word_embeddings")),
      "model.qk_norm": arch.qk_norm, "model.qkv_bias": bias,
      "model.norm_eps": float(_get(hf, arch, "rms_norm_eps")),
      "model.norm_position": arch.norm_position, "model.param_dtype": "float32",
      "data.train_len": int(hf["max_position_embeddings"]),
  }
  types = _layer_types(hf, arch, n)
  fields.update(_position_fields(_rope_parameters(hf, arch, types, where),
                                 int(hf["max_position_embeddings"]), where))
  fields.update(_window_fields(hf, arch, n, where))
  fields.update(_nope_fields(hf, arch, n, where))
  return fields


# ------------------------------------------------------------------------------- tensors


@dataclasses.dataclass(frozen=True)
class Tensor:
  """One safetensors tensor and where it lives in our parameter tree.

  Attributes:
    name: its name in the safetensors files (transformers' state dict key).
    shape: its shape there.
    path: keys into our pure parameter dict (None: no parameter here; the tensor must be all
      zeros on import and is written as zeros on export, e.g. o_proj.bias).
    to_ours: numpy [shape] -> our parameter's array; from_ours: the inverse (exact: transposes
      and reshapes only).
    optional: may be absent from the files (a tied lm_head).
  """

  name: str
  shape: tuple
  path: tuple | None
  to_ours: Callable = lambda x: x
  from_ours: Callable = lambda x: x
  optional: bool = False


def _linear(name, path, d_in, out_shape) -> Tensor:
  """nn.Linear(d_in -> prod(out_shape)).weight [out, in] <-> ours [d_in, *out_shape]."""
  out = int(np.prod(out_shape))
  return Tensor(name, (out, d_in), path, lambda w: w.T.reshape(d_in, *out_shape),
                lambda p: np.ascontiguousarray(p.reshape(d_in, out).T))


def _out_proj(name, path, in_shape, d_out) -> Tensor:
  """nn.Linear(prod(in_shape) -> d_out).weight [d_out, in] <-> ours [*in_shape, d_out]."""
  width = int(np.prod(in_shape))
  return Tensor(name, (d_out, width), path, lambda w: w.T.reshape(*in_shape, d_out),
                lambda p: np.ascontiguousarray(p.reshape(width, d_out).T))


def _vector(name, path, shape) -> Tensor:
  size = int(np.prod(shape))
  return Tensor(name, (size,), path, lambda b: b.reshape(shape), lambda p: p.reshape(size))


def tensors(config, model_type: str) -> list[Tensor]:
  """Every tensor of the `model_type` checkpoint of `config`'s model, in file order.

  Args:
    config: an experiment config whose model section `config_fields` (import) or `hf_config`
      (export) produced: model.num_layers, d_model, num_heads, num_kv_heads, head_dim, mlp_dim,
      vocab_size, tie_embeddings, qk_norm, qkv_bias, norm_position.
    model_type: a key of ARCHITECTURES.

  Returns:
    [Tensor]; shapes as transformers' state dict holds them (float tensors).
  """
  m, arch = config.model, ARCHITECTURES[model_type]
  h, d, f, v = m.num_heads, m.d_model, m.mlp_dim, m.vocab_size
  kv = h if m.num_kv_heads == -1 else m.num_kv_heads
  hd = d // h if m.head_dim == -1 else m.head_dim
  out = [Tensor("model.embed_tokens.weight", (v, d), ("embedding",))]
  norms = (("post_attention_layernorm", "post_feedforward_layernorm") if
           m.get("norm_position", "pre") == "post" else
           ("input_layernorm", "post_attention_layernorm"))
  for i in range(m.num_layers):
    at, blk = f"model.layers.{i}.self_attn.", ("blocks", i)
    a = blk + ("attention",)
    out += [_linear(at + "q_proj.weight", a + ("wq",), d, (h, hd)),
            _linear(at + "k_proj.weight", a + ("wk",), d, (kv, hd)),
            _linear(at + "v_proj.weight", a + ("wv",), d, (kv, hd)),
            _out_proj(at + "o_proj.weight", a + ("wo",), (h, hd), d)]
    if m.qkv_bias:
      out += [_vector(at + "q_proj.bias", a + ("bq",), (h, hd)),
              _vector(at + "k_proj.bias", a + ("bk",), (kv, hd)),
              _vector(at + "v_proj.bias", a + ("bv",), (kv, hd))]
      if arch.bias == "attention_bias":  # transformers adds o_proj's bias with the others
        out.append(Tensor(at + "o_proj.bias", (d,), None))
    if m.qk_norm != "none":
      q_width, k_width = (hd, hd) if m.qk_norm == "head" else (h * hd, kv * hd)
      out += [Tensor(at + "q_norm.weight", (q_width,), a + ("q_norm", "scale")),
              Tensor(at + "k_norm.weight", (k_width,), a + ("k_norm", "scale"))]
    layer = f"model.layers.{i}."
    out += [Tensor(layer + norms[0] + ".weight", (d,), blk + ("attn_norm", "scale")),
            Tensor(layer + norms[1] + ".weight", (d,), blk + ("mlp_norm", "scale")),
            _linear(layer + "mlp.gate_proj.weight", blk + ("mlp", "wi"), d, (f,)),
            _linear(layer + "mlp.up_proj.weight", blk + ("mlp", "wi_up"), d, (f,)),
            _out_proj(layer + "mlp.down_proj.weight", blk + ("mlp", "wo"), (f,), d)]
  out.append(Tensor("model.norm.weight", (d,), ("final_norm", "scale")))
  if m.tie_embeddings:
    out.append(Tensor("lm_head.weight", (v, d), None, optional=True))
  else:
    out.append(Tensor("lm_head.weight", (v, d), ("head",), lambda w: w.T,
                      lambda p: np.ascontiguousarray(p.T)))
  return out


# ------------------------------------------------------------------------------- export


def _export_refusal(what: str) -> ConfigError:
  return ConfigError(f"runs.hf_export: {what} has no transformers equivalent; exportable: "
                     f"{EXPORTABLE}")


def _check_positions(config) -> None:
  """Refuses the positional configurations transformers cannot run (`EXPORTABLE`)."""
  m, pos = config.model, config.model.position
  if pos.kind not in ("rope", "none"):
    raise _export_refusal(f"model.position.kind={pos.kind!r}")
  checks = [
      (m.mlp_activation != "swiglu", f"model.mlp_activation={m.mlp_activation!r}"),
      (m.logn_scaling, "model.logn_scaling=True"),
      (m.get("sink_token", False), "model.sink_token=True"),
      (pos.get("position_transform", "none") != "none",
       f"model.position.position_transform={pos.get('position_transform')!r}"),
      (pos.get("attention_temperature", False), "model.position.attention_temperature=True"),
      (pos.get("string_attention_factor", 1.0) != 1.0, "model.position.string_attention_factor"),
  ]
  if pos.kind == "rope":
    checks += [
        (pos.get("rope_heads", -1) != -1, f"model.position.rope_heads={pos.get('rope_heads')}"),
        (tuple(pos.get("rope_theta_per_layer", ())), "model.position.rope_theta_per_layer"),
        (pos.rotary_fraction != 1.0,
         f"model.position.rotary_fraction={pos.rotary_fraction} (transformers' Llama family "
         "rotates every feature)"),
        (pos.rope_scaling == "yarn" and pos.get("yarn_ramp", "index") != "index",
         "model.position.yarn_ramp='ratio' (the paper's ramp, linear in the rotations; "
         "transformers' yarn has the index ramp only, and exporting that would change the "
         "positions: fine-tune with yarn_ramp='index')"),
        (pos.rope_scaling == "longrope" and pos.get("longrope_keep_first", 0),
         f"model.position.longrope_keep_first={pos.get('longrope_keep_first')}"),
    ]
  for bad, what in checks:
    if bad:
      raise _export_refusal(what)


def export_arch(config) -> Arch:
  """The transformers architecture `config`'s model is written as (module table; the first that
  can say every option: OLMo 2 for post-norm, Qwen3 for per-head QK-norm, SmolLM3 for NoPE
  layers, Qwen2 for q/k/v biases or windows with global layers, Mistral for windows, else Llama).

  Raises:
    ConfigError: one line naming the option no architecture runs, and the exportable ones.
  """
  _check_positions(config)
  m, pos = config.model, config.model.position
  nope = pos.kind == "none" or pos.get("nope_every", 0) > 0
  post = m.get("norm_position", "pre") == "post"
  if post or m.qk_norm == "full":
    if not (post and m.qk_norm == "full") or nope or m.sliding_window or m.qkv_bias:
      raise _export_refusal(f"model.norm_position={m.get('norm_position', 'pre')!r} with "
                            f"qk_norm={m.qk_norm!r}, qkv_bias={m.qkv_bias}, NoPE layers "
                            f"{nope}, sliding_window={m.sliding_window} (OLMo 2 is post-norm "
                            "with qk_norm='full' and nothing else)")
    return ARCHITECTURES["olmo2"]
  if m.qk_norm == "head":
    if nope:
      raise _export_refusal("qk_norm='head' with NoPE layers")
    return ARCHITECTURES["qwen3"]
  if nope:
    if m.sliding_window:
      raise _export_refusal("NoPE layers with model.sliding_window")
    return ARCHITECTURES["smollm3"]
  if m.sliding_window and not m.qkv_bias:
    if m.global_every:
      raise _export_refusal("model.global_every without q/k/v biases (Qwen2) or "
                            "qk_norm='head' (Qwen3)")
    return ARCHITECTURES["mistral"]
  return ARCHITECTURES["qwen2" if m.qkv_bias else "llama"]


def rope_parameters(config) -> tuple[dict, int]:
  """transformers' `rope_parameters` of `config`'s RoPE and the max_position_embeddings to write
  (module table): ntk and abf become rope_type "default" with their base
  (`rope_frequencies.ntk_theta`, `abf_theta`); dynamic_ntk writes L as max_position_embeddings
  (transformers' dynamic type reads its original length there); yarn, llama3 and longrope write
  L as original_max_position_embeddings and max(train_len, s L) as max_position_embeddings.
  Attention factors are written only where transformers would not derive the same value.

  Returns:
    (rope_parameters dict, max_position_embeddings in tokens).
  """
  from models import rope_frequencies, rope_scaling
  pos, train_len = config.model.position, int(config.data.train_len)
  get = lambda name: pos.get(name, rope_scaling.DEFAULTS[name])  # noqa: E731
  theta = float(pos.get("rope_theta", 10000.0))
  method, s = get("rope_scaling"), float(get("rope_scaling_factor"))
  length = rope_scaling.resolve_train_len(pos, train_len)
  head_dim = (config.model.d_model // config.model.num_heads if config.model.head_dim == -1
              else config.model.head_dim)
  out = {"rope_type": "default", "rope_theta": theta}
  if pos.kind != "rope" or method == "none":
    return out, train_len
  if method == "ntk":
    return {**out, "rope_theta": rope_frequencies.ntk_theta(head_dim, theta, s)}, train_len
  if method == "abf":
    return {**out, "rope_theta": float(get("abf_theta"))}, train_len
  if method == "pi":
    return {**out, "rope_type": "linear", "factor": s}, train_len
  if method == "dynamic_ntk":
    return {**out, "rope_type": "dynamic", "factor": float(get("dynamic_ntk_alpha"))}, length
  scaled = {**out, "factor": s, "original_max_position_embeddings": length}
  max_pos = max(train_len, int(round(s * length)))
  if method == "llama3":
    return {**scaled, "rope_type": "llama3", "low_freq_factor": float(get("llama3_low_freq_factor")),
            "high_freq_factor": float(get("llama3_high_freq_factor"))}, max_pos
  if method == "yarn":
    out = {**scaled, "rope_type": "yarn", "beta_fast": float(get("yarn_beta")),
           "beta_slow": float(get("yarn_alpha")), "truncate": bool(get("yarn_truncate"))}
    m, m_all, override = (float(get("yarn_mscale")), float(get("yarn_mscale_all_dim")),
                          float(get("yarn_attention_factor")))
    if override != -1:
      out["attention_factor"] = override
    elif m and m_all:  # transformers derives the same ratio from both
      out.update(mscale=m, mscale_all_dim=m_all)
    elif m != 1.0:  # transformers would use 0.1 ln s + 1
      out["attention_factor"] = rope_frequencies.yarn_attention_factor(s, m, m_all)
    return out, max_pos
  half = head_dim // 2
  short = tuple(get("longrope_short_factors")) or (1.0,) * half
  out = {**scaled, "rope_type": "longrope", "long_factor": [float(x) for x in
                                                            get("longrope_long_factors")],
         "short_factor": [float(x) for x in short]}
  if float(get("longrope_attention_factor")) != -1:
    out["attention_factor"] = float(get("longrope_attention_factor"))
  return out, max_pos


def hf_config(config, arch: Arch, token_ids: dict) -> dict:
  """config.json of `config`'s model as `arch` (from `export_arch`).

  Args:
    config: the run's experiment config.
    arch: its architecture.
    token_ids: {"bos_token_id", "eos_token_id", "pad_token_id"}: ints or None.

  Returns:
    The dict transformers' `<arch>Config` reads: both `rope_parameters` (transformers 5) and
    `rope_theta` + `rope_scaling` (4.x, vLLM), the same RoPE.
  """
  m = config.model
  heads = m.num_heads
  kv = heads if m.num_kv_heads == -1 else m.num_kv_heads
  rp, max_pos = rope_parameters(config)
  legacy = {k: v for k, v in rp.items() if k != "rope_theta"}
  out = {"architectures": [arch.causal_lm], "model_type": arch.model_type,
         "vocab_size": m.vocab_size, "hidden_size": m.d_model, "intermediate_size": m.mlp_dim,
         "num_hidden_layers": m.num_layers, "num_attention_heads": heads,
         "num_key_value_heads": kv,
         "head_dim": m.d_model // heads if m.head_dim == -1 else m.head_dim,
         "hidden_act": "silu", "max_position_embeddings": max_pos, "rms_norm_eps": m.norm_eps,
         "tie_word_embeddings": bool(m.tie_embeddings), "initializer_range": m.init_std,
         "rope_parameters": rp, "rope_theta": rp["rope_theta"],
         "rope_scaling": legacy if rp["rope_type"] != "default" else None,
         "attention_dropout": 0.0, "use_cache": True, "dtype": str(m.param_dtype), **token_ids}
  if arch.bias == "attention_bias":
    out["attention_bias"] = bool(m.qkv_bias)
  if arch.model_type in ("llama", "smollm3"):
    out["mlp_bias"] = False
  if arch.sliding == "all":
    out["sliding_window"] = m.sliding_window or None
  if arch.sliding == "layer_types":
    from models.decoder import layer_window
    types = ["sliding_attention" if layer_window(m, i) else "full_attention"
             for i in range(m.num_layers)]
    out.update(use_sliding_window=bool(m.sliding_window), sliding_window=m.sliding_window or None,
               max_window_layers=0, layer_types=types)
  if arch.model_type == "smollm3":
    from models.positions.rope import is_nope_layer
    every = 1 if m.position.kind == "none" else int(m.position.get("nope_every", 0))
    out.update(no_rope_layers=[int(not is_nope_layer(i, every)) for i in range(m.num_layers)],
               no_rope_layer_interval=every or 4, use_sliding_window=False, sliding_window=None)
  return out
