"""Qwen2-MoE (transformers 5.24 configuration_qwen2_moe.py, modeling_qwen2_moe.py): Qwen2's attention, routed
experts plus a shared expert with its sigmoid gate; even blocks below max_window_layers slide."""

from .. import validate
from . import _moe
from .record import MOE, QWEN_SLIDING, SLIDING_WINDOW, Architecture, decoder_fields, refuse_true

QWEN_MOE = {"num_experts": "routed experts", "moe_intermediate_size": "one expert's width",
            "decoder_sparse_step": "every n-th block sparse, the others a dense MLP at intermediate_size",
            "mlp_only_layers": "blocks with a dense MLP at intermediate_size",
            "norm_topk_prob": "renormalized top-k routing weights (saved activations)"}


# the attention as LLaMA's and the shared expert's SwiGLU (Qwen2MoeConfig.base_model_tp_plan, configuration_qwen2_moe.py,
# names it mlp.gate_proj ...; the module is mlp.shared_expert.gate_proj); the routed experts split by ep and their
# widths by tp (memmath/parallel.py)
TP_PLAN = {**_moe.TP_PLAN, "layers.*.mlp.shared_expert.gate_proj": "colwise",
           "layers.*.mlp.shared_expert.up_proj": "colwise", "layers.*.mlp.shared_expert.down_proj": "rowwise"}


def read_qwen_moe(config, get, *, experts_key, experts_default, width_default, k_default):
    """The MoE fields Qwen2-MoE and Qwen3-MoE share."""
    refuse_true(get, "output_router_logits")
    experts = get(experts_key, experts_default)
    step = get("decoder_sparse_step", 1)
    layers = get("num_hidden_layers")
    dense_only = config.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                               for i in dense_only):
        raise ValueError(f"config field 'mlp_only_layers' must list block indices from 0 to {layers - 1}; got "
                         f"{validate.describe(dense_only)}")
    # Qwen-MoE routers renormalize the top-k weights when norm_topk_prob is true
    options = {"n_experts": experts, "expert_intermediate_size": get("moe_intermediate_size", width_default),
               "experts_per_tok": get("num_experts_per_tok", k_default),
               "norm_topk_prob": get.flag("norm_topk_prob", False)}
    # <Type>DecoderLayer: a dense <Type>MLP at intermediate_size in the blocks mlp_only_layers names and in those
    # not on the decoder_sparse_step (modeling_qwen2_moe.py, modeling_qwen3_moe.py)
    dense = tuple(i for i in range(layers) if i in dense_only or (i + 1) % step)
    if dense:
        options["block_layouts"] = ((dense, DENSE_BLOCK),)
    return options


# The fields of a dense block beside a mixture of experts' (a second block layout, ModelShape.block_layouts).
DENSE_BLOCK = (("n_experts", 0), ("experts_per_tok", 0), ("expert_intermediate_size", None),
               ("shared_expert_intermediate_size", 0), ("shared_expert_gate", False))


def read_options(config, get):
    options = read_qwen_moe(config, get, experts_key="num_experts", experts_default=60, width_default=1408,
                            k_default=4)
    options.update(qkv_bias=get.flag("qkv_bias", True),
                   shared_expert_intermediate_size=get("shared_expert_intermediate_size", 5632, low=0),
                   shared_expert_gate=True)
    return options


def even_blocks_below_max_window_layers(get, layers):
    """Qwen2MoeConfig: even blocks (0, 2, ...) below max_window_layers (default 28) slide."""
    first = get("max_window_layers", 28, low=0)
    return tuple("sliding_attention" if (i + 1) % 2 and i < first else "full_attention" for i in range(layers))


ARCHITECTURE = Architecture(
    model_type="qwen2_moe", family="llama", title="Qwen2-MoE",
    source="configuration_qwen2_moe.py, modeling_qwen2_moe.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, **QWEN_SLIDING, **MOE, **QWEN_MOE,
                           "qkv_bias": "biases on q, k, v",
                           "shared_expert_intermediate_size": "the shared expert's width (0: none)"}),
    defaults={"qkv_bias": True}, read_options=read_options,
    derive_layer_types=even_blocks_below_max_window_layers, sliding_needs_flag=True,
    # the sliding-window mask beside the causal one under eager; under SDPA never skipped, since Qwen2MoeConfig
    # saves sliding_window 0 without use_sliding_window: a (1, 1, s, s) bool tensor (measured,
    # validation/inference_working_set.py)
    eager_sliding_mask=True, sdpa_sliding_mask=True,
    both_masks_always=True, window_zero_without_sliding=True,  # modeling_qwen2_moe.py:486-488
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj", "gate_proj", "up_proj", "down_proj",
                "shared_expert_gate"),
    # peft 0.21 does not convert qwen2_moe (its utils/transformers_weight_conversion.py copies transformers'
    # _MODEL_TO_CONVERSION_PATTERN, which has no qwen2_moe key), so "all-linear" leaves the router and experts
    not_all_linear=("router", "experts"), tp_plan=TP_PLAN,
)
