"""Gemma 3n's language model (transformers 5.24 configuration_gemma3n.py Gemma3nTextConfig, modeling_gemma3n.py
Gemma3nForCausalLM), whose defaults are gemma-3n-E4B's text model (@auto_docstring(checkpoint="google/gemma-3n-E4B")):
Gemma 4's per-layer input embeddings and shared keys and values (gemma4_text.py) on Gemma 3's blocks, and:

- AltUp (Baykal et al. 2023): altup_num_inputs copies of the hidden state; the model projects the embedding into
  the n - 1 extra copies (altup_projections) and back before the final norm (altup_unembed_projections), each an
  h x h linear; every block holds correct_output_scale (h), correction_coefs (n x n), prediction_coefs (n^2 x n),
  modality_router (n x h) and router_norm (h);
- LAuReL, a low-rank residual beside the attention: linear_left (r x h), linear_right (h x r), post_laurel_norm;
- a per-block MLP width (intermediate_size a list, one a block: a block layout per width);
- activation sparsity (activation_sparsity_pattern): a top-k on the MLP's gate, no parameters;
- every fifth block full by default (no block forced full); one head size for every block.

The cache: sliding blocks keep the window, full blocks every token, shared blocks none (cache_utils.py gives a
"reuse" layer a dummy one). Activations: not traced (AltUp's n copies of the hidden state, LAuReL, per-layer inputs
and activation sparsity have no trace steps): traced=False (activations='textbook', which counts one hidden state
a block and so is far below this model's). Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from .. import validate
from . import _decoder
from ._parts import ParamTensor, linear, norm
from .gemma2 import softcap
from .gemma4_text import KV_SHARED, LAYER_TYPES, PER_LAYER_TENSORS, kv_cache_values, sharing_modes
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, QK_NORM, SLIDING_WINDOW, Architecture, decoder_fields

INTERMEDIATE_DEFAULT = 16384  # Gemma3nTextConfig.intermediate_size, one for every block


def _altup_names(n) -> tuple:
    return tuple(f"{kind}.{i}.weight" for kind in ("altup_projections", "altup_unembed_projections")
                 for i in range(n - 1))


def widths(config, layers) -> list:
    """Gemma3nTextConfig.__post_init__: intermediate_size one for every block, or a list of one a block."""
    given = config.get("intermediate_size", INTERMEDIATE_DEFAULT)
    if given is None:
        given = INTERMEDIATE_DEFAULT
    if not isinstance(given, list):
        given = [given] * layers
    if len(given) != layers or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in given):
        raise ValueError(f"config field 'intermediate_size' must be a whole number or a list of one for each of the "
                         f"{layers} blocks; got {validate.describe(config.get('intermediate_size'))}")
    return [validate.count("config field 'intermediate_size'", w) for w in given]


def read_options(config, get):
    if config.get("use_bidirectional_attention"):
        raise ValueError("config field 'use_bidirectional_attention' is set; memmath models Gemma 3n as a causal "
                         "model only")
    layers = get("num_hidden_layers")
    given = config.get("layer_types")
    types = given if given is not None else ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                                             for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"config field 'layer_types' must list one of {', '.join(LAYER_TYPES)} per block "
                         f"({layers}); got {validate.describe(given)}")
    shared = get("num_kv_shared_layers", 15, low=0)
    if shared >= layers:
        raise ValueError(f"config field 'num_kv_shared_layers' must be from 0 to num_hidden_layers - 1 "
                         f"({layers - 1}): a shared block reads an earlier block's keys and values; got {shared}")
    modes = sharing_modes(types, shared)
    inner = widths(config, layers)
    layouts = {}
    for i in range(layers):
        changes = ((("intermediate_size", inner[i]),) if inner[i] != inner[0] else ()) + (
            (("block_kind", KV_SHARED),) if modes[i] == "reuse" else ())
        if changes:
            layouts.setdefault(changes, []).append(i)
    return {"qk_norm": "head", "norm_layout": "sandwich", "intermediate_size": inner[0],
            "final_softcap": softcap(config, "final_logit_softcapping", 30.0),
            "sliding_window": get("sliding_window", 512), "layer_types": tuple(types),
            "block_layouts": tuple((tuple(blocks), changes) for changes, blocks in layouts.items()),
            "per_layer_input": (get("vocab_size_per_layer_input", 262144), get("hidden_size_per_layer_input", 256)),
            "altup": (get("altup_num_inputs", 4), get("laurel_rank", 64))}


def tensors(m, group: str) -> list:
    """Gemma3nForCausalLM's tensors: the embedding and, after the final norm, the per-layer embedding, its
    projection and norm and the AltUp projections; a block in Gemma3nTextDecoderLayer's parameters() order."""
    h = m.hidden_size
    n, rank = m.altup
    if group == "embeddings":
        rows, width = m.per_layer_input
        return ([ParamTensor(m.architecture.embedding, "embeddings", (m.vocab_size, h)),
                 ParamTensor(PER_LAYER_TENSORS[0], "embeddings", (rows, m.n_layers * width))]
                + linear("per_layer_model_projection", "embeddings", h, m.n_layers * width, False)
                + norm("per_layer_projection_norm", width, False)
                + [t for name in _altup_names(n) for t in linear(name.removesuffix(".weight"), "embeddings", h, h,
                                                                    False)])
    if group != "layer":
        return _decoder.tensors(m, group)
    a, kv, d, ab, inner = m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias, m.intermediate_size
    out = linear("self_attn.q_proj", "attention", h, a * d, ab) + norm("self_attn.q_norm", d, False)
    if m.block_kind != KV_SHARED:
        out += (linear("self_attn.k_proj", "attention", h, kv * d, ab)
                + linear("self_attn.v_proj", "attention", h, kv * d, ab) + norm("self_attn.k_norm", d, False))
    out += linear("self_attn.o_proj", "attention", a * d, h, ab)
    out += (linear("mlp.gate_proj", "mlp", h, inner, False) + linear("mlp.up_proj", "mlp", h, inner, False)
            + linear("mlp.down_proj", "mlp", inner, h, False))
    for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        out += norm(name, h, False)
    out += ([ParamTensor("altup.correct_output_scale", "mlp", (h,))]
            + linear("altup.correction_coefs", "mlp", n, n, False) + linear("altup.prediction_coefs", "mlp", n, n * n,
                                                                             False)
            + linear("altup.modality_router", "mlp", h, n, False) + norm("altup.router_norm", h, False))
    out += (linear("laurel.linear_left", "attention", h, rank, False)
            + linear("laurel.linear_right", "attention", rank, h, False) + norm("laurel.post_laurel_norm", h, False))
    width = m.per_layer_input[1]
    return out + (linear("per_layer_input_gate", "mlp", h, width, False)
                  + linear("per_layer_projection", "mlp", width, h, False)
                  + norm("post_per_layer_input_norm", h, False))


def lora_table(m) -> dict:
    """peft 0.21's names q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; a shared block has no k_proj
    or v_proj."""
    table = _decoder.lora_table(m)
    moe = "Gemma 3n has no router or experts"
    table.update(router=moe, experts=moe, shared_gate=moe)
    if m.block_kind == KV_SHARED:
        why = "a block sharing an earlier block's keys and values (num_kv_shared_layers) has no k_proj or v_proj"
        table.update(k=why, v=why)
    return table


def all_linear_refusal(m) -> str:
    """peft's all-linear also adapts AltUp's, LAuReL's and the per-layer inputs' linears."""
    return ("peft's all-linear also adapts AltUp's (correction_coefs, prediction_coefs, modality_router, "
            "altup_projections), LAuReL's (linear_left, linear_right) and the per-layer input linears, which memmath "
            "does not count yet; name the targets (q, k, v, o, gate, up, down)")


ARCHITECTURE = Architecture(
    model_type="gemma3n_text", family="llama", title="Gemma 3n (text)",
    source="configuration_gemma3n.py, modeling_gemma3n.py",
    fields=decoder_fields({
        "attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
        **QK_NORM, "hidden_activation": "the MLP activation (Gemma's name for it)",
        "final_logit_softcapping": "softcapping of the logits (saved activations)",
        "intermediate_size": "MLP width, one for every block or a list of one a block",
        "num_kv_shared_layers": "the last blocks, without k/v projections or cache",
        "hidden_size_per_layer_input": "per-layer input embedding width",
        "vocab_size_per_layer_input": "per-layer input embedding rows",
        "altup_num_inputs": "AltUp's copies of the hidden state (its projections and coefficients)",
        "laurel_rank": "LAuReL's low-rank residual width",
        "activation_sparsity_pattern": "a top-k on the MLP gate: no parameters (textbook activations)",
    }, drop=("hidden_act",)),
    defaults={"vocab_size": 262400, "hidden_size": 2048, "num_hidden_layers": 35, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 256, "tie_word_embeddings": True, "sliding_window": 512},
    activation_field="hidden_activation", activations=("gelu_pytorch_tanh",),
    read_options=read_options, tensors=tensors, lora_modules=lora_table, norms_last=False,
    late_embeddings=PER_LAYER_TENSORS + ("altup_projections.", "altup_unembed_projections."), all_linear_refusal=all_linear_refusal, kv_cache_values=kv_cache_values,
    prefill_phases=None, scaled_embedding=True, rotary_per_layer_type=True, both_masks_always=True,
    traced=False,  # AltUp, LAuReL, per-layer inputs, activation sparsity: no trace (activations='textbook')
)
