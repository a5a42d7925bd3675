"""Gated DeltaNet linear attention (Yang et al. 2025, "Gated Delta Networks") as transformers 5.24 stores it in
Qwen3-Next (modeling_qwen3_next.py, Qwen3NextGatedDeltaNet): its parameter tensors, its fixed-size cache, and the
block layouts of a model that interleaves it with full attention (config layer_types).

A linear-attention block's token mixer holds a depthwise causal convolution over the queries, keys and values
(conv1d, conv_dim x 1 x conv_kernel, no bias), the input projections in_proj_qkvz (h -> 2 key_dim + 2 value_dim: q,
k, v and the output gate z) and in_proj_ba (h -> 2 value heads: the beta and decay inputs), dt_bias and A_log (one
value a value head), a gated RMSNorm over one value head (norm.weight) and out_proj (value_dim -> h). Its cache is a
conv state and an fp32 recurrent state, the same size at any context (memmath/states.py, GatedDeltaNet).
"""

from __future__ import annotations

from ..recurrent import RECURRENT_STATE_FORMAT, GatedDeltaNet, values_bytes
from ._parts import ParamTensor, linear

# The config fields of the linear-attention layers (Qwen3NextConfig) and what they change.
DELTANET_FIELDS = {
    "linear_num_key_heads": "key heads of a linear-attention layer (tensors, state)",
    "linear_num_value_heads": "value heads of a linear-attention layer (tensors, state)",
    "linear_key_head_dim": "a linear-attention key head's width (tensors, state)",
    "linear_value_head_dim": "a linear-attention value head's width (tensors, state)",
    "linear_conv_kernel_dim": "the causal convolution's width (tensors, conv state)",
    "layer_types": "per block linear_attention or full_attention (a second block layout)",
    "full_attention_interval": "layer_types when not given (every n-th block full attention)",
}
LINEAR = "linear_attention"  # ModelShape.block_kind of a linear-attention block


def read_dims(get) -> GatedDeltaNet:
    """The linear-attention widths from a config (`get`: its reader, with Qwen3NextConfig's defaults)."""
    return GatedDeltaNet(key_heads=get("linear_num_key_heads", 16), value_heads=get("linear_num_value_heads", 32),
                         key_head_dim=get("linear_key_head_dim", 128), value_head_dim=get("linear_value_head_dim", 128),
                         conv_kernel=get("linear_conv_kernel_dim", 4))


def layer_types(config, get, layers) -> tuple:
    """config layer_types as given, else Qwen3NextConfig.__post_init__'s: every full_attention_interval-th block
    full attention, the others linear."""
    given = config.get("layer_types")
    if given is None:
        interval = get("full_attention_interval", 4)
        return tuple(LINEAR if (i + 1) % interval else "full_attention" for i in range(layers))
    if not isinstance(given, list) or len(given) != layers or any(t not in (LINEAR, "full_attention") for t in given):
        raise ValueError(f"config field 'layer_types' must list linear_attention or full_attention for each of the "
                         f"{layers} blocks; got {given!r:.200}")
    return tuple(given)


def conv_dim(dims: GatedDeltaNet) -> int:
    """The convolution's channels: queries, keys and values (2 key_dim + value_dim)."""
    return 2 * dims.key_heads * dims.key_head_dim + dims.value_heads * dims.value_head_dim


def state_bytes(dims: GatedDeltaNet, batch_size, dtype):
    """One linear-attention block's cache: its conv state, batch x conv_dim x conv_kernel values in dtype (the model's:
    Qwen3NextGatedDeltaNet hands the cache the convolution's input, and LinearAttentionLayer allocates zeros of its
    dtype), and its recurrent state, batch x value heads x key_head_dim x value_head_dim values in fp32 (the PyTorch
    torch_chunk_gated_delta_rule computes it in fp32 and the cache keeps zeros_like of it)."""
    conv = batch_size * conv_dim(dims) * dims.conv_kernel
    recurrent = batch_size * dims.value_heads * dims.key_head_dim * dims.value_head_dim
    return values_bytes(conv, dtype) + values_bytes(recurrent, RECURRENT_STATE_FORMAT)


def tensors(hidden_size: int, dims: GatedDeltaNet) -> list:
    """Qwen3NextGatedDeltaNet's parameters in parameters() order: its own (dt_bias, A_log) before its submodules'."""
    h, kd, vd = hidden_size, dims.key_heads * dims.key_head_dim, dims.value_heads * dims.value_head_dim
    return ([ParamTensor("linear_attn.dt_bias", "attention", (dims.value_heads,)),
             ParamTensor("linear_attn.A_log", "attention", (dims.value_heads,)),
             ParamTensor("linear_attn.conv1d.weight", "attention", (conv_dim(dims), 1, dims.conv_kernel))]
            + linear("linear_attn.in_proj_qkvz", "attention", h, 2 * kd + 2 * vd, False)
            + linear("linear_attn.in_proj_ba", "attention", h, 2 * dims.value_heads, False)
            + [ParamTensor("linear_attn.norm.weight", "norms", (dims.value_head_dim,))]
            + linear("linear_attn.out_proj", "attention", vd, h, False))


def split_tensors(hidden_size: int, dims: GatedDeltaNet) -> list:
    """Qwen 3.5's Qwen3_5GatedDeltaNet in parameters() order: dt_bias and A_log, then its submodules as it registers
    them: conv1d, the gated norm, out_proj, and the input projection split in four (in_proj_qkv: h -> 2 key_dim +
    value_dim; in_proj_z: h -> value_dim; in_proj_b and in_proj_a: h -> value heads)."""
    h, kd, vd, heads = hidden_size, dims.key_heads * dims.key_head_dim, dims.value_heads * dims.value_head_dim, \
        dims.value_heads
    return ([ParamTensor("linear_attn.dt_bias", "attention", (heads,)),
             ParamTensor("linear_attn.A_log", "attention", (heads,)),
             ParamTensor("linear_attn.conv1d.weight", "attention", (conv_dim(dims), 1, dims.conv_kernel)),
             ParamTensor("linear_attn.norm.weight", "norms", (dims.value_head_dim,))]
            + linear("linear_attn.out_proj", "attention", vd, h, False)
            + linear("linear_attn.in_proj_qkv", "attention", h, 2 * kd + vd, False)
            + linear("linear_attn.in_proj_z", "attention", h, vd, False)
            + linear("linear_attn.in_proj_b", "attention", h, heads, False)
            + linear("linear_attn.in_proj_a", "attention", h, heads, False))


def group_blocks(per_block: list) -> tuple:
    """ModelShape.block_layouts from each block's field changes (() where a block is the shape's own layout):
    the blocks with the same changes together, in the order of their first block."""
    groups: dict = {}
    for i, changes in enumerate(per_block):
        if changes:
            groups.setdefault(tuple(changes), []).append(i)
    return tuple((tuple(blocks), changes) for changes, blocks in groups.items())
