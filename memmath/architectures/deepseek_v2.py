"""DeepSeek-V2 (transformers 5.24 configuration_deepseek_v2.py, modeling_deepseek_v2.py): DeepSeek-V3's layout
(deepseek_v3.py, _deepseek.py) with biases on every MLP linear where mlp_bias (the dense MLP and the shared experts),
a router that scores experts by a softmax and picks the top-k greedily or within the best topk_group of n_group
groups (topk_method), and no e_score_correction_bias. hidden_size must be a multiple of num_attention_heads
(DeepseekV2Config.validate_architecture).

Exact: the tensors, peft 0.21's adapters, the latent cache, the tensor-parallel plan and the forward pass (its
rotary product in complex64, _deepseek.rotary_complex) and a prefill's working set, measured on the CPU as
DeepSeek-V3's; a load in bf16 or fp16 keeps the router weight in fp32 (_keep_in_fp32_modules_strict: gate.weight)."""

from functools import partial

from .. import validate
from . import _deepseek
from .record import Architecture

# DeepseekV2Config's defaults of the fields memmath reads where the reader has none (its num_experts_per_tok is
# None, which its router cannot run: a MoE config must give it)
DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "first_k_dense_replace": 0, "moe_intermediate_size": 1407, "n_routed_experts": 64,
            "n_shared_experts": 2, "topk_method": "greedy"}
TOPK_METHODS = ("greedy", "group_limited_greedy")  # DeepseekV2TopkRouter.forward runs these two only


def read_options(config, get):
    options = _deepseek.read_options(config, get, sigmoid=False)
    method = config.get("topk_method", DEFAULTS["topk_method"])
    if method not in TOPK_METHODS:  # transformers builds the model, but its forward pass fails
        raise ValueError(f"config field 'topk_method' is {validate.describe(method)}; DeepseekV2TopkRouter runs "
                         f"{' or '.join(TOPK_METHODS)} only")
    if method == "group_limited_greedy" and options.get("n_experts"):
        options["router_groups"] = _deepseek.read_groups(get, options["n_experts"], sigmoid=False)
    return options


# DeepseekV2Config.base_model_tp_plan's colwise and rowwise entries: the queries (q_proj, or q_b_proj after the
# low-rank q_a_proj, which stays whole), the key/value up-projection and o_proj; kv_a_proj_with_mqa's
# "mla_kv_a_proj" is not a plain split (memmath keeps it whole on every rank)
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.q_b_proj": "colwise",
           "layers.*.self_attn.kv_b_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           **_deepseek.MLP_TP_PLAN}

ARCHITECTURE: Architecture = _deepseek.LatentArchitecture(
    model_type="deepseek_v2", family="llama", title="DeepSeek-V2",
    source="configuration_deepseek_v2.py, modeling_deepseek_v2.py",
    fields=_deepseek.fields({"mlp_bias": "biases on the dense MLP's and the shared experts' linears",
                             "topk_method": "greedy or group_limited_greedy (saved activations only)"}),
    defaults=DEFAULTS, read_options=read_options, tensors=_deepseek.tensors, lora_modules=_deepseek.lora_table,
    lora_order=_deepseek.LORA_ORDER, tp_plan=TP_PLAN, kv_cache_values=_deepseek.kv_cache_values,
    trace_block=partial(_deepseek.block, rotary=_deepseek.rotary_complex, sigmoid=False),
    prefill_phases=partial(_deepseek.prefill_phases, complex_rotary=True),
    routing_weights_fp32=True,  # the top-k weights stay fp32 (the sigmoid or softmax scores times a float)
    fp32_modules=("gate.weight",),  # DeepseekV2PreTrainedModel._keep_in_fp32_modules_strict
)
