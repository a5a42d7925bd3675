"""DeepSeek-V3 and R1 (transformers 5.24 configuration_deepseek_v3.py, modeling_deepseek_v3.py; Kimi-K2's config.json
names model_type kimi_k2, remote code, and builds as the DeepseekV3ForCausalLM its `architectures` names: read as
this type). Multi-head latent attention in every block (_latent.py), a dense SwiGLU MLP or a mixture of experts with
shared experts (_deepseek.py) whose router scores experts by a sigmoid, adds e_score_correction_bias (an fp32
buffer, not a parameter) and picks the top-k within the best topk_group of n_group groups.

Exact: every parameter tensor as transformers builds it on the meta device, peft 0.21's adapters, the latent cache
(kv_lora_rank + qk_rope_head_dim values a token a layer) and the tensor-parallel plan. The forward pass is traced
(_deepseek.block: _latent.trace, the router, _moe.routed_experts, the shared experts) and measured on the CPU
(tests/test_families_deepseek.py: the bytes saved for backward and alive after the forward pass equal the trace's to
the byte, the step's peak within 0.2%), and so is a prefill's working set (_deepseek.prefill_phases, within 0.2%).
A load in bf16 or fp16 keeps the router weight in fp32 (_keep_in_fp32_modules_strict: gate.weight; fp32_modules),
so it weighs E x h x 4 B a MoE block, its gradient and states too. The multi-token-prediction layer of DeepSeek-V3's checkpoint
(num_nextn_predict_layers) is not built by DeepseekV3ForCausalLM (its load ignores model.layers.61), so it is not
counted."""

from functools import partial

from . import _deepseek
from .record import Architecture

# DeepseekV3Config's defaults (DeepSeek-V3's) of the fields memmath reads where the reader has none
DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "first_k_dense_replace": 3, "moe_intermediate_size": 2048, "n_routed_experts": 256,
            "n_shared_experts": 1, "num_experts_per_tok": 8, "norm_topk_prob": True, "num_key_value_heads": 128,
            "n_group": 8, "topk_group": 4}


def read_options(config, get):
    return _deepseek.read_options(config, get, sigmoid=True)


ARCHITECTURE: Architecture = _deepseek.LatentArchitecture(
    model_type="deepseek_v3", family="llama", title="DeepSeek-V3", source="configuration_deepseek_v3.py, "
    "modeling_deepseek_v3.py",
    fields=_deepseek.fields({"rope_interleave": "the rotary key's layout (saved activations only)"}),
    defaults=DEFAULTS, read_options=read_options, tensors=_deepseek.tensors, lora_modules=_deepseek.lora_table,
    lora_order=_deepseek.LORA_ORDER,
    # DeepseekV3Config.base_model_tp_plan splits the MLPs only: the latent attention stays whole on every rank
    tp_plan=_deepseek.MLP_TP_PLAN,
    kv_cache_values=_deepseek.kv_cache_values,
    trace_block=partial(_deepseek.block, rotary=_deepseek.rotary_tables, sigmoid=True),
    prefill_phases=partial(_deepseek.prefill_phases, complex_rotary=False),
    routing_weights_fp32=True,  # the top-k weights stay fp32 (the sigmoid or softmax scores times a float)
    fp32_modules=("e_score_correction_bias", "gate.weight"),  # DeepseekV3PreTrainedModel._keep_in_fp32_modules_strict
)
