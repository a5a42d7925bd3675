"""LFM2 (transformers 5.24 configuration_lfm2.py Lfm2Config, modeling_lfm2.py Lfm2ForCausalLM), Liquid AI's hybrid of
gated short-convolution blocks and grouped-query attention blocks (architectures/_shortconv.py):

- two block layouts (config layer_types, else full_attn_idxs naming the attention blocks, else every block
  attention): a conv block (Lfm2ShortConv: conv.conv h x 1 x conv_L_cache, in_proj h -> 3h, out_proj h -> h) and an
  attention block (q, k, v, out_proj without biases, q_layernorm and k_layernorm over each head);
- Lfm2MLP in every block, w1/w3/w2 without biases, whose width is not intermediate_size itself: with
  block_auto_adjust_ff_dim (default true) int(2 x intermediate_size / 3), then int(block_ffn_dim_multiplier x that)
  rounded up to a multiple of block_multiple_of (LFM2-1.2B: 12,288 -> 8,192);
- intermediate_size's and tie_word_embeddings' older names block_ff_dim and tie_embedding, which
  Lfm2Config.__post_init__ prefers when given; a tied head by default.

The cache: attention blocks keep keys and values, conv blocks a conv state of h x conv_L_cache values a sequence in
the model's dtype (memmath.states.ShortConv), the same size at any context. Activations: the convolution runs the
causal-conv1d package's CUDA kernels where it is installed (transformers' use_kernel_func_from_hub_with_fallback) and
its PyTorch fallback elsewhere (F.conv1d over the input padded by conv_L_cache - 1, the output cut after), whose saved
tensors differ: the trace (_shortconv.block) replays the PyTorch path, so a run gets a verdict with
mixer_kernels='torch' (the CPU's) and a floor naming --mixer-kernels torch under the kernels (mixer_kernels). A padded
batch is refused by name (the conv blocks multiply their input by the padding mask). Serving's prefill working set:
the plain estimate. No tensor-parallel plan (Lfm2Config's base_model_tp_plan splits only the embedding): tp > 1 is
refused."""

from __future__ import annotations

from . import _deltanet, _shortconv
from .record import Architecture, decoder_fields

LFM2_FIELDS = {
    **_shortconv.SHORT_CONV_FIELDS,
    "layer_types": "per block conv or full_attention (a second block layout; the cache)",
    "full_attn_idxs": "the attention blocks where layer_types is absent (the others conv; absent too: all attention)",
    "block_ff_dim": "intermediate_size's older name, which Lfm2Config.__post_init__ prefers when given",
    "block_auto_adjust_ff_dim": "the MLP width 2/3 of intermediate_size, times the multiplier, rounded up",
    "block_ffn_dim_multiplier": "a factor on the adjusted MLP width (a positive number: Lfm2Config refuses null)",
    "block_multiple_of": "the adjusted MLP width rounded up to a multiple of it",
}
DEFAULTS = {"num_key_value_heads": 8, "tie_word_embeddings": True, "conv_L_cache": 3, "conv_bias": False,
            "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True}


def read_options(config, get):
    layers = get("num_hidden_layers")
    width = get("block_ff_dim") if config.get("block_ff_dim") is not None else get("intermediate_size")
    options = {"qk_norm": "head", "intermediate_size": _shortconv.adjusted_width(config, get, width),
               "tied_embeddings": _shortconv.tied_embeddings(get)}
    conv = _shortconv.conv_blocks(config, layers, full_attn_idxs=True)
    bias = get.flag("conv_bias", False)
    if any(conv):
        options["linear_attention"] = _shortconv.conv_dims(get)
        options["block_layouts"] = _deltanet.group_blocks([_shortconv.conv_changes(c, bias) for c in conv])
    return options


def lora_table(m) -> dict:
    """peft's names: the mixer's (_shortconv.mixer_lora_table), the MLP's w1, w3, w2; no router or experts."""
    table = dict(_shortconv.mixer_lora_table(m), **_shortconv.dense_mlp_lora_table(m))
    table.update(router="LFM2 has no mixture of experts (lfm2_moe has)", experts="LFM2 has no routed experts",
                 shared_gate="it has no shared expert gate")
    return table


ARCHITECTURE = Architecture(
    model_type="lfm2", family="llama", title="LFM2", source="configuration_lfm2.py, modeling_lfm2.py",
    # no hidden_act (Lfm2MLP is SwiGLU, F.silu in code) and no attention_dropout (Lfm2Attention passes 0.0)
    fields=decoder_fields(LFM2_FIELDS, drop=("hidden_act", "attention_dropout")),
    defaults=DEFAULTS, activation_field="", dropout_fields={}, read_options=read_options,
    tensors=_shortconv.tensors, lora_modules=lora_table, module_order=_shortconv.MODULE_ORDER, norms_last=False,
    all_linear_refusal=_shortconv.all_linear_refusal, tp_plan={}, final_norm_module="embedding_norm",
    kv_cache_values=_shortconv.kv_cache_values, state_bytes=_shortconv.state_bytes, prefill_phases=None,
    trace_block=_shortconv.block, mixer_kernels=_shortconv.KERNELS,
    checkpointed_peak_refusal=_shortconv.CHECKPOINTED_PEAK_REFUSAL,
)
