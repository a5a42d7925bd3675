"""LFM2-MoE (transformers 5.24 configuration_lfm2_moe.py Lfm2MoeConfig, modeling_lfm2_moe.py Lfm2MoeForCausalLM):
LFM2's conv and attention blocks (architectures/_shortconv.py, config layer_types, which Lfm2MoeConfig never derives)
with a dense MLP in the first num_dense_layers blocks and a mixture of experts after:

- Lfm2MoeMLP at intermediate_size itself (no block_auto_adjust_ff_dim here), w1/w3/w2 without biases;
- Lfm2MoeSparseMoeBlock: the routed experts as two 3-D Parameters (experts.gate_up_proj E x 2I x h,
  experts.down_proj E x h x I, I = moe_intermediate_size), registered before the router (gate.weight, an E x h
  Parameter); sigmoid routing, top num_experts_per_tok, renormalized when norm_topk_prob, times
  routed_scaling_factor; with use_expert_bias the choice adds expert_bias, an fp32 buffer of E values a MoE block
  (a buffer, not a parameter: not counted, 4 E bytes a block in the checkpoint).

Four block layouts at most: conv or attention, each dense or MoE. peft 0.21 does not convert lfm2_moe (transformers'
_MODEL_TO_CONVERSION_PATTERN has no lfm2_moe key), so "w1", "w3" and "w2" adapt the dense blocks' MLPs only, and the
router and experts are reached as target_parameters (memmath's targets "router" and "experts"), not by all-linear.
The cache, the activations (traced along the convolution's PyTorch path, mixer_kernels='torch'; the MoE block's router
and grouped_mm experts: moe below) and the missing tensor-parallel plan are LFM2's (architectures/lfm2.py)."""

from __future__ import annotations

from functools import partial

from ..trace import Tensor, Trace
from . import _deltanet, _moe, _shortconv
from ._parts import ParamTensor
from ._steps import INT64
from .record import MOE, Architecture, decoder_fields, refuse_true

LFM2_MOE_FIELDS = {
    **_shortconv.SHORT_CONV_FIELDS, **MOE,
    "layer_types": "required: per block conv or full_attention (a second block layout; the cache)",
    "intermediate_size": "a dense block's MLP width",
    "num_dense_layers": "blocks with a dense MLP before the mixture-of-experts blocks (another block layout)",
    "num_experts": "routed experts", "moe_intermediate_size": "one expert's width",
    "norm_topk_prob": "renormalized top-k routing weights (the division keeps the weights and their sum)",
    "use_expert_bias": "expert_bias, a buffer of num_experts fp32 values in each MoE block (not a parameter); the "
                       "top-k's indices are kept by a gather instead of topk (the same bytes)",
    "routed_scaling_factor": "a factor on the routing weights (no memory of its own)",
}
DEFAULTS = {"num_key_value_heads": 8, "tie_word_embeddings": True, "conv_L_cache": 3, "conv_bias": False,
            "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 1792,
            "norm_topk_prob": True}
# A dense block's fields beside a MoE block's (Lfm2MoeMLP at intermediate_size)
DENSE_BLOCK = (("n_experts", 0), ("experts_per_tok", 0), ("expert_intermediate_size", None))
# peft 0.21 on a tiny model (tests/test_families_lfm2.py): the experts' adapters (gate_up_proj's, then down_proj's),
# then the router's, after the mixer's
LORA_ORDER = _shortconv.MODULE_ORDER + ("experts.gate_up_proj", "experts.down_proj", "gate.weight")


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    layers = get("num_hidden_layers")
    conv = _shortconv.conv_blocks(config, layers, full_attn_idxs=False)
    dense = get("num_dense_layers", low=0)  # Lfm2MoeDecoderLayer: a dense MLP where layer_idx < num_dense_layers
    bias = get.flag("conv_bias", False)
    options = {"qk_norm": "head", "tied_embeddings": _shortconv.tied_embeddings(get),
               "norm_topk_prob": get.flag("norm_topk_prob", True)}
    if dense < layers:
        options.update(n_experts=get("num_experts"), experts_per_tok=get("num_experts_per_tok"),
                       expert_intermediate_size=get("moe_intermediate_size"))
    per_block = [_shortconv.conv_changes(c, bias) + (DENSE_BLOCK if i < dense < layers else ())
                 for i, c in enumerate(conv)]
    layouts = _deltanet.group_blocks(per_block)
    if any(conv):
        options["linear_attention"] = _shortconv.conv_dims(get)
    if layouts:
        options["block_layouts"] = layouts
    return options


def mlp_tensors(m) -> list:
    """Lfm2MoeSparseMoeBlock (experts, then the router) in a MoE block, else Lfm2MoeMLP."""
    if not m.n_experts:
        return _shortconv.dense_mlp_tensors(m)
    h, e, ei = m.hidden_size, m.n_experts, m.expert_intermediate_size
    return [ParamTensor("feed_forward.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
            ParamTensor("feed_forward.experts.down_proj", "mlp", (e, h, ei)),
            ParamTensor("feed_forward.gate.weight", "mlp", (e, h))]  # Lfm2MoeTopKRouter: a Parameter


def moe(tr: Trace, shape, x: Tensor, trainable: bool, p) -> Tensor:
    """Lfm2MoeSparseMoeBlock on the normalized input x (t x h), transformers 5.24's default grouped_mm experts:
    Lfm2MoeTopKRouter's logits F.linear(x, W) (t x E, the model's dtype; _moe.router_logits), sigmoid (keeps its
    output), the top k (with use_expert_bias: topk of the sigmoid plus the fp32 expert_bias, a temporary whose node
    nothing keeps, then torch.gather of the sigmoid, which keeps the int64 indices; without: topk, which keeps them),
    with norm_topk_prob divided by their sum + 1e-6 (keeps the t x k weights and the t x 1 denominator), times
    routed_scaling_factor (a Python float: keeps nothing), then _moe.routed_experts (the weights in the model's
    dtype). The fp32 t x E sum with expert_bias is not traced: it dies inside the router, before the experts."""
    t, e, h = tr.t, tr.e, shape.hidden_size
    n_exp, rows = shape.n_experts, tr.t * shape.experts_per_tok
    logits = _moe.router_logits(tr, x, h, n_exp, trainable, p.lora_of("gate.weight"))
    grad = logits.grad
    probs = tr.new(t * n_exp, e, grad)  # routing_weights = router_logits.sigmoid()
    tr.use(logits)
    if grad:
        tr.save(probs, "router sigmoid output")
    indices = tr.new(rows, INT64)
    values = tr.new(rows, e, grad)
    tr.use(probs, indices)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    if shape.norm_topk_prob:  # routing_weights / (routing_weights.sum(dim=-1, keepdim=True) + 1e-6)
        total = tr.tmp(t, e, values)
        denominator = tr.new(t, e, grad)
        tr.use(total)
        if grad:
            tr.save(values, "router top-k weights (the division's numerator)")
            tr.save(denominator, "router top-k sum + 1e-6 (the division's denominator)")
        divided = tr.new(rows, e, grad)
        tr.use(values, denominator)
        values = divided
    scaled = tr.new(rows, e, grad)  # * routed_scaling_factor
    tr.use(values)
    return _moe.routed_experts(tr, shape, x, scaled, trainable, p.lora_of)


def lora_table(m) -> dict:
    """peft's names: the mixer's; a dense block's w1, w3, w2; a MoE block's router weight and routed experts (peft's
    ParamWrapper, _moe.lora_table's entries), where w1, w3 and w2 do not exist."""
    table = _shortconv.mixer_lora_table(m)
    if m.n_experts:
        moe = _moe.lora_table(m)
        routed = "a mixture-of-experts block's MLP is the routed experts, 3-D tensors: target 'experts'"
        table.update(router=moe["router"], experts=moe["experts"], gate=routed, up=routed, down=routed)
    else:
        table.update(_shortconv.dense_mlp_lora_table(m), router="a dense block has no router",
                     experts="a dense block has no routed experts")
    table["shared_gate"] = "it has no shared expert gate"
    return table


ARCHITECTURE = Architecture(
    model_type="lfm2_moe", family="llama", title="LFM2-MoE",
    source="configuration_lfm2_moe.py, modeling_lfm2_moe.py",
    fields=decoder_fields(LFM2_MOE_FIELDS, drop=("hidden_act", "attention_dropout")),
    defaults=DEFAULTS, activation_field="", dropout_fields={}, read_options=read_options,
    tensors=partial(_shortconv.tensors, mlp=mlp_tensors), lora_modules=lora_table,
    module_order=_shortconv.MODULE_ORDER, norms_last=False, lora_order=LORA_ORDER,
    not_all_linear=("router", "experts"), all_linear_refusal=_shortconv.all_linear_refusal, tp_plan={},
    final_norm_module="embedding_norm", kv_cache_values=_shortconv.kv_cache_values,
    state_bytes=_shortconv.state_bytes, prefill_phases=None,
    trace_block=partial(_shortconv.block, moe=moe), mixer_kernels=_shortconv.KERNELS,
    checkpointed_peak_refusal=_shortconv.CHECKPOINTED_PEAK_REFUSAL,
)
