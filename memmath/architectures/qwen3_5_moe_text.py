"""Qwen 3.5 MoE's language model (transformers 5.24 configuration_qwen3_5_moe.py Qwen3_5MoeTextConfig,
modeling_qwen3_5_moe.py Qwen3_5MoeForCausalLM): Qwen 3.5's hybrid layout (qwen3_5_text.py: gated DeltaNet blocks
with the split input projection beside gated full-attention blocks) with Qwen3_5MoeSparseMoeBlock in every block: a
router, the routed experts as two 3-D Parameters, a shared expert and its sigmoid gate (Qwen2-MoE's layout, _moe.py).
Its config has no dense MLP width: ModelShape.intermediate_size is the experts' (moe_intermediate_size). peft 0.21
converts it as qwen2_moe (transformers' conversion_mapping.py: qwen3_5_moe_text takes qwen2_moe's), so gate, up and
down name the routed experts. The cache is Qwen3-Next's; activations traced as Qwen 3.5's under transformers' PyTorch
path of the mixer (Run.mixer_kernels='torch'), the sparse MoE block as Qwen3-Next's (its router always renormalizes
the top-k weights)."""

from __future__ import annotations

from functools import partial

from . import _decoder, _deltanet, _moe
from .qwen3_5_text import all_linear_refusal, attention_tensors, read_options as read_qwen3_5
from .qwen3_next import ROTARY_FIELDS, kv_cache_values, lora_table, state_bytes
from .record import ATTENTION_BIAS, MOE, QK_NORM, Architecture, decoder_fields, refuse_true
from .qwen2_moe import TP_PLAN as QWEN2_MOE_TP_PLAN


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    width = get("moe_intermediate_size", 512)
    return dict(read_qwen3_5(config, get), n_experts=get("num_experts", 256),
                experts_per_tok=get("num_experts_per_tok", 8), expert_intermediate_size=width,
                shared_expert_intermediate_size=get("shared_expert_intermediate_size", 512, low=0),
                shared_expert_gate=True, norm_topk_prob=True)  # Qwen3_5MoeTopKRouter always renormalizes


def converted_lora_table(m) -> dict:
    """peft 0.21's names: Qwen3-Next's (q gated, none in a linear-attention block), the MLP names the routed
    experts' (_moe.converted_mlp_names)."""
    return _moe.converted_mlp_names(lora_table(m), "qwen3_5_moe_text")


ARCHITECTURE = Architecture(
    model_type="qwen3_5_moe_text", family="llama", title="Qwen 3.5 MoE (text)",
    source="configuration_qwen3_5_moe.py, modeling_qwen3_5_moe.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **MOE, **_deltanet.DELTANET_FIELDS, **QK_NORM,
                           **ROTARY_FIELDS, "num_experts": "routed experts", "moe_intermediate_size": "one expert's width",
                           "shared_expert_intermediate_size": "the shared expert's width"},
                          drop=("intermediate_size",)),
    defaults={"head_dim": 256, "num_key_value_heads": 2, "moe_intermediate_size": 512}, read_options=read_options,
    intermediate_field="moe_intermediate_size",
    tensors=partial(_decoder.tensors, attention=attention_tensors), lora_modules=converted_lora_table,
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj", "gate_proj", "up_proj", "down_proj",
                "shared_expert_gate"),
    not_all_linear=("router", "experts"), all_linear_refusal=all_linear_refusal, tp_plan=dict(QWEN2_MOE_TP_PLAN),
    kv_cache_values=kv_cache_values, state_bytes=state_bytes, prefill_phases=None, **_deltanet.TRACED_SPLIT,
)
