"""Qwen 3.5's language model (transformers 5.24 configuration_qwen3_5.py Qwen3_5TextConfig, modeling_qwen3_5.py
Qwen3_5ForCausalLM): Qwen3-Next's hybrid layout (qwen3_next.py) with a dense SwiGLU MLP in every block and the linear
attention's input projection split in four (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; _deltanet.split_tensors).
Its cache is Qwen3-Next's: keys and values of the full-attention blocks, a conv state and an fp32 recurrent state of
each linear-attention block. Activations: traced as Qwen3-Next's under transformers' PyTorch path of the mixer
(Run.mixer_kernels='torch'; _deltanet.block with the split projections). The vision-language wrapper
(model_type qwen3_5) is refused by name: its text_config reads as this type."""

from __future__ import annotations

from functools import partial

from . import _decoder, _deltanet
from .glm4_moe import _rotary_dim
from .qwen3_next import (ROTARY_FIELDS, ROTARY_SHARE, attention_tensors as next_attention_tensors, kv_cache_values,
                         lora_table, state_bytes)
from .record import ATTENTION_BIAS, QK_NORM, Architecture, decoder_fields

# Qwen3_5TextConfig.base_model_tp_plan's colwise and rowwise entries (its q/k norms are replicated; the linear
# attention's projections gather their output: not modelled as a split)
TP_PLAN = dict(_decoder.TP_PLAN)


def read_options(config, get):
    layers = get("num_hidden_layers")
    types = _deltanet.layer_types(config, get, layers)
    options = {"qk_norm": "head", "linear_attention": _deltanet.read_dims(get),
               "rotary_dim": _rotary_dim(config, get, default=ROTARY_SHARE)}  # Qwen3_5TextConfig's 0.25
    layouts = _deltanet.group_blocks([(("block_kind", _deltanet.LINEAR),) if t == _deltanet.LINEAR else ()
                                      for t in types])
    if layouts:
        options["block_layouts"] = layouts
    return options


def attention_tensors(m) -> list:
    """Qwen3_5GatedDeltaNet in a linear-attention block, else Qwen3-Next's gated attention (Qwen3_5Attention)."""
    if _deltanet.is_linear(m):
        return _deltanet.split_tensors(m.hidden_size, m.linear_attention)
    return next_attention_tensors(m)


def all_linear_refusal(m) -> str:
    """peft's all-linear adapts the linear attention's four input projections and out_proj, which memmath's target
    names do not cover."""
    if not _deltanet.is_linear(m):
        return ""
    return ("peft's all-linear also adapts each linear-attention block's in_proj_qkv, in_proj_z, in_proj_b, "
            "in_proj_a and out_proj, which memmath does not count yet; name the targets (q, k, v, o, gate, up, down)")


ARCHITECTURE = Architecture(
    model_type="qwen3_5_text", family="llama", title="Qwen 3.5 (text)",
    source="configuration_qwen3_5.py, modeling_qwen3_5.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **_deltanet.DELTANET_FIELDS, **QK_NORM, **ROTARY_FIELDS}),
    defaults={"head_dim": 256, "num_key_value_heads": 4}, read_options=read_options,
    tensors=partial(_decoder.tensors, attention=attention_tensors), lora_modules=lora_table,
    all_linear_refusal=all_linear_refusal, tp_plan=TP_PLAN, kv_cache_values=kv_cache_values,
    state_bytes=state_bytes, prefill_phases=None, **_deltanet.TRACED_SPLIT,
)
