"""Mixtral (transformers 5.24 configuration_mixtral.py, modeling_mixtral.py): Mistral's attention, a sparse MoE
block per layer (MixtralTopKRouter, experts as two 3-D Parameters), routing weights kept in fp32."""

from . import _moe
from .record import MOE, SLIDING_WINDOW, Architecture, decoder_fields, refuse_true


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    jitter = get.probability("router_jitter_noise", 0.0)
    if jitter:
        raise ValueError(f"config field 'router_jitter_noise' is {jitter}; memmath models 0 only")
    # MixtralTopKRouter always renormalizes the top-k weights
    return {"n_experts": get("num_local_experts", 8), "expert_intermediate_size": get("intermediate_size"),
            "experts_per_tok": get("num_experts_per_tok", 2), "norm_topk_prob": True}


ARCHITECTURE = Architecture(
    model_type="mixtral", family="llama", title="Mixtral", source="configuration_mixtral.py, modeling_mixtral.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, **MOE, "num_local_experts": "routed experts",
                           "router_jitter_noise": "0 only"}),
    read_options=read_options, routing_weights_fp32=True,
    # one MoE block's adapted modules in parameters() order (MixtralSparseMoeBlock registers gate, then experts;
    # peft wraps gate_up_proj first): measured with peft 0.21 on the meta device
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj"),
    tp_plan=_moe.TP_PLAN,
)
