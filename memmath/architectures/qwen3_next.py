"""Qwen3-Next (transformers 5.24 configuration_qwen3_next.py Qwen3NextConfig, modeling_qwen3_next.py
Qwen3NextForCausalLM), whose defaults are Qwen3-Next-80B-A3B's:

- two block layouts (config layer_types, every full_attention_interval-th block full): a gated DeltaNet
  linear-attention block (_deltanet.py) and a gated full-attention block, whose q_proj gives each head its query
  and an output gate (h -> 2 a d), with q/k RMSNorm over each head;
- Qwen3NextSparseMoeBlock in every block on decoder_sparse_step and not in mlp_only_layers (a router, routed
  experts as two 3-D Parameters, a shared expert and its sigmoid gate, as Qwen2-MoE's), else a dense SwiGLU MLP
  at intermediate_size;
- RMSNorms stored as w (scaled 1 + w): the same parameters.

The cache: full-attention blocks keep keys and values, linear-attention blocks a conv state in the model's dtype and
an fp32 recurrent state, the same size at any context (memmath/states.py). Activations: the forward pass of the
linear attention runs flash-linear-attention's and causal-conv1d's kernels on CUDA where they are installed and
transformers' PyTorch path elsewhere, whose saved tensors differ; the trace (_deltanet.block) replays the PyTorch path,
so a run gets a verdict with Run(mixer_kernels='torch') (the CPU's), and a floor naming --mixer-kernels torch under
the CUDA kernels. Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from functools import partial

from . import _decoder, _deltanet, _moe
from ._parts import linear
from .glm4_moe import _rotary_dim
from .qwen2_moe import DENSE_BLOCK, TP_PLAN as QWEN2_MOE_TP_PLAN, read_qwen_moe
from .record import ATTENTION_BIAS, MOE, QK_NORM, Architecture, decoder_fields

# Qwen3NextConfig.base_model_tp_plan's entries for the full-attention blocks and the shared expert; the
# linear-attention projections are not in it
TP_PLAN = {key: style for key, style in QWEN2_MOE_TP_PLAN.items()}
ROTARY_SHARE = 0.25  # Qwen3NextConfig.__post_init__'s partial_rotary_factor default
ROTARY_FIELDS = {"partial_rotary_factor": "rotated share of each head (default 0.25; saved activations, no parameters)",
                 "rope_parameters": "partial_rotary_factor as the top-level field"}


def read_options(config, get):
    layers = get("num_hidden_layers")
    options = read_qwen_moe(config, get, experts_key="num_experts", experts_default=512, width_default=512,
                            k_default=10)
    dense = {i for blocks, _ in options.pop("block_layouts", ()) for i in blocks}
    options.update(qk_norm="head", shared_expert_intermediate_size=get("shared_expert_intermediate_size", 512, low=0),
                   shared_expert_gate=True, linear_attention=_deltanet.read_dims(get),
                   rotary_dim=_rotary_dim(config, get, default=ROTARY_SHARE),
                   norm_topk_prob=get.flag("norm_topk_prob", True))  # Qwen3NextConfig's default, not Qwen2-MoE's
    types = _deltanet.layer_types(config, get, layers)
    per_block = [(((("block_kind", _deltanet.LINEAR),) if types[i] == _deltanet.LINEAR else ())
                  + (DENSE_BLOCK if i in dense else ())) for i in range(layers)]
    layouts = _deltanet.group_blocks(per_block)
    if layouts:
        options["block_layouts"] = layouts
    return options


def attention_tensors(m) -> list:
    """The token mixer: Qwen3NextGatedDeltaNet in a linear-attention block; else Qwen3NextAttention, q_proj giving a
    query and a gate per head (h -> 2 a d), then k, v, o and the q/k norms over each head."""
    if _deltanet.is_linear(m):
        return _deltanet.tensors(m.hidden_size, m.linear_attention)
    h, a, kv, d, ab = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias
    return (linear("self_attn.q_proj", "attention", h, 2 * a * d, ab)
            + linear("self_attn.k_proj", "attention", h, kv * d, ab)
            + linear("self_attn.v_proj", "attention", h, kv * d, ab)
            + linear("self_attn.o_proj", "attention", a * d, h, ab) + _decoder.qk_norm_tensors(m))


def lora_table(m) -> dict:
    """peft's names: q (the gated q_proj, h -> 2 a d), k, v, o in a full-attention block, none in a linear-attention
    block (its projections have other names); the MLP's as Qwen2-MoE's (_moe.lora_table) or a dense block's."""
    table = _decoder.lora_table(m)
    if _deltanet.is_linear(m):
        why = "a linear-attention block has no q_proj, k_proj, v_proj or o_proj"
        table.update(q=why, k=why, v=why, o=why)
    else:
        table["q"] = ("q_proj", m.hidden_size, 2 * m.n_heads * m.head_dim)
    return table


def converted_lora_table(m) -> dict:
    """Qwen3-Next's names as peft 0.21 reads them: lora_table's, the MLP's names the routed experts'
    (_moe.converted_mlp_names: peft converts qwen3_next as qwen2_moe; Qwen 3.5's text model it does not)."""
    return _moe.converted_mlp_names(lora_table(m), "qwen3_next")


def all_linear_refusal(m) -> str:
    """peft's all-linear adapts the linear attention's in_proj_qkvz, in_proj_ba and out_proj, which memmath's target
    names do not cover."""
    if not _deltanet.is_linear(m):
        return ""
    return ("peft's all-linear also adapts each linear-attention block's in_proj_qkvz, in_proj_ba and out_proj, "
            "which memmath does not count yet; name the targets (q, k, v, o, gate, up, down, router, experts, "
            "shared_gate)")


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every full-attention block (every token), in the cache's format; a linear-attention block's
    states are state_bytes'."""
    blocks = sum(len(b) for layout, b in shape.layouts() if not _deltanet.is_linear(layout))
    return blocks * 2 * shape.n_kv_heads * shape.head_dim * context_len * batch_size


def state_bytes(shape, *, batch_size, dtype):
    """Each linear-attention block's conv state (batch x conv_dim x conv_kernel values) in dtype, the model's: the
    cache allocates it like the convolution's input (LinearAttentionLayer.lazy_initialization), whatever format the
    keys and values are in; and its recurrent state (batch x value heads x key_head_dim x value_head_dim values) in
    fp32 (_deltanet.state_bytes)."""
    total = 0
    for layout, blocks in shape.layouts():
        if _deltanet.is_linear(layout):
            total = total + len(blocks) * _deltanet.state_bytes(layout.linear_attention, batch_size, dtype)
    return total


ARCHITECTURE = Architecture(
    model_type="qwen3_next", family="llama", title="Qwen3-Next",
    source="configuration_qwen3_next.py, modeling_qwen3_next.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **MOE, **_deltanet.DELTANET_FIELDS, **QK_NORM,
                           "num_experts": "routed experts", "moe_intermediate_size": "one expert's width",
                           "shared_expert_intermediate_size": "the shared expert's width",
                           "decoder_sparse_step": "every n-th block sparse, the others a dense MLP",
                           "mlp_only_layers": "blocks with a dense MLP at intermediate_size",
                           "norm_topk_prob": "renormalized top-k routing weights", **ROTARY_FIELDS}),
    defaults={"head_dim": 256, "num_key_value_heads": 2}, read_options=read_options,
    tensors=partial(_decoder.tensors, attention=attention_tensors), lora_modules=converted_lora_table,
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj", "gate_proj", "up_proj", "down_proj",
                "shared_expert_gate"),
    not_all_linear=("router", "experts"), all_linear_refusal=all_linear_refusal, tp_plan=TP_PLAN,
    kv_cache_values=kv_cache_values, state_bytes=state_bytes, prefill_phases=None,
    trace_block=_deltanet.block, final_norm="rms_plus_one", trace_refusal=_deltanet.trace_refusal,
    trace_shape=_deltanet.trace_shape,
    mixer_kernels=_deltanet.KERNELS,  # the trace replays transformers' PyTorch path (Run.mixer_kernels='torch')
    checkpointed_peak_refusal=_deltanet.CHECKPOINTED_PEAK_REFUSAL,
)
