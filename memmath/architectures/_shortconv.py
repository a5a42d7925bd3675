"""LFM2's decoder blocks as transformers 5.24 stores them (modeling_lfm2.py, modeling_lfm2_moe.py), shared by the
lfm2 and lfm2_moe records: two block kinds, chosen per block by config layer_types ("conv" or "full_attention").

- Lfm2ShortConv, a gated short convolution (block_kind CONV): in_proj (h -> 3h: the gates B and C and the input x),
  a depthwise causal convolution over B * x (nn.Conv1d with h groups: a weight of h x 1 x conv_L_cache), then
  C times its output through out_proj (h -> h); conv_bias puts a bias on all three. Its cache is a conv state of
  h x conv_L_cache values a sequence in the model's dtype, the same size at any context (memmath.states.ShortConv);
- Lfm2Attention, grouped-query attention without biases whose output projection is named out_proj, with an RMSNorm
  over each head of q and of k (q_layernorm, k_layernorm) before the rotation;
- each block registers its mixer (self_attn or conv), its MLP (feed_forward: w1, w3, w2 SwiGLU, or LFM2-MoE's
  experts and router), then its two RMSNorms (operator_norm, ffn_norm); the final norm is embedding_norm.

The trace (block, short_conv) replays transformers' PyTorch path of the convolution (Run(mixer_kernels='torch'));
causal-conv1d's CUDA kernels (KERNELS) save other tensors, and a run that says it takes them gets no verdict.

peft matches target names by the module's own name: "out_proj" adapts the convolution block's out_proj as well as
the attention's, and "all-linear" adapts in_proj too, which no memmath target name covers (all_linear_refusal).
"""

from __future__ import annotations

import math
from dataclasses import replace

from .. import validate
from ..recurrent import ShortConv, values_bytes
from ..trace import Tensor, Trace
from . import _decoder
from ._parts import ParamTensor, linear, norm
from ._steps import Pass, mul

CONV = "conv"  # ModelShape.block_kind of a short-convolution block (transformers' layer type "conv")
ATTENTION = "full_attention"

# The config fields both LFM2 records read for the convolution blocks.
SHORT_CONV_FIELDS = {
    "conv_L_cache": "the short convolution's width (its weight, and the conv state's columns)",
    "conv_bias": "biases on the convolution, in_proj and out_proj of a conv block",
    "tie_embedding": "tie_word_embeddings' older name, which the config class prefers when given",
    "(q_norm, k_norm)": "always present: q_layernorm and k_layernorm, RMSNorms over each head",
}
# Each block's parameters in parameters() order, by module (peak.py and sharding.py order adapters by this).
MODULE_ORDER = ("in_proj", "q_proj", "k_proj", "v_proj", "out_proj", "w1", "w3", "w2")
NO_QKV = "a short-convolution block has no q_proj, k_proj or v_proj"


def conv_blocks(config, layers, *, full_attn_idxs: bool) -> tuple:
    """Whether each block is a short-convolution block: config layer_types as given, else (Lfm2Config.__post_init__)
    the blocks full_attn_idxs names are attention and the others conv, all attention without either. full_attn_idxs:
    whether the config class derives layer_types (Lfm2MoeConfig does not: its decoder layers read
    config.layer_types[i] and fail without it)."""
    given = config.get("layer_types")
    if given is None:
        if not full_attn_idxs:
            raise ValueError("config field 'layer_types' is missing: Lfm2MoeConfig derives none and each "
                             "Lfm2MoeDecoderLayer reads config.layer_types[i], so transformers cannot build this "
                             f"model; list 'conv' or 'full_attention' for each of the {layers} blocks")
        indices = config.get("full_attn_idxs")
        if indices is None:
            return (False,) * layers
        if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in indices):
            raise ValueError(f"config field 'full_attn_idxs' must list block indices (whole numbers); got "
                             f"{validate.describe(indices)}")
        return tuple(i not in indices for i in range(layers))
    if not isinstance(given, list) or len(given) != layers or any(t not in (CONV, ATTENTION) for t in given):
        # the base model's masks are keyed by these two names only (Lfm2Model.forward)
        raise ValueError(f"config field 'layer_types' must list 'conv' or 'full_attention' for each of the {layers} "
                         f"blocks; got {validate.describe(given)}")
    return tuple(t == CONV for t in given)


def tied_embeddings(get) -> bool:
    """tie_embedding when given, else tie_word_embeddings (the config classes' __post_init__: both default true)."""
    return get.flag("tie_embedding", get.flag("tie_word_embeddings", True))


def conv_dims(get) -> ShortConv:
    """The convolution's channels (hidden_size) and width (conv_L_cache, default 3)."""
    return ShortConv(channels=get("hidden_size"), conv_kernel=get("conv_L_cache", 3))


def conv_changes(conv: bool, bias: bool) -> tuple:
    """A block's field changes for its mixer: a conv block's kind, and conv_bias as its mixer's biases (attention_bias,
    which an LFM2 attention block never has)."""
    return ((("block_kind", CONV),) + ((("attention_bias", True),) if bias else ())) if conv else ()


# ---- tensors ---------------------------------------------------------------------------------------------------
def mixer_tensors(m) -> list:
    """Lfm2ShortConv (conv, in_proj, out_proj) in a conv block, else Lfm2Attention (q, k, v, out_proj, q_layernorm,
    k_layernorm), in parameters() order."""
    h = m.hidden_size
    if m.block_kind == CONV:
        width, bias = m.linear_attention.conv_kernel, m.attention_bias
        conv = [ParamTensor("conv.conv.weight", "attention", (h, 1, width))]
        if bias:
            conv.append(ParamTensor("conv.conv.bias", "attention", (h,)))
        return conv + linear("conv.in_proj", "attention", h, 3 * h, bias) + linear("conv.out_proj", "attention", h, h,
                                                                                   bias)
    a, kv, d = m.n_heads, m.n_kv_heads, m.head_dim
    return (linear("self_attn.q_proj", "attention", h, a * d, False)
            + linear("self_attn.k_proj", "attention", h, kv * d, False)
            + linear("self_attn.v_proj", "attention", h, kv * d, False)
            + linear("self_attn.out_proj", "attention", a * d, h, False)
            + norm("self_attn.q_layernorm", d, False) + norm("self_attn.k_layernorm", d, False))


def dense_mlp_tensors(m) -> list:
    """Lfm2MLP / Lfm2MoeMLP: w1 (gate), w3 (up), w2 (down), no biases."""
    h, inner = m.hidden_size, m.intermediate_size
    return (linear("feed_forward.w1", "mlp", h, inner, False) + linear("feed_forward.w3", "mlp", h, inner, False)
            + linear("feed_forward.w2", "mlp", inner, h, False))


def tensors(m, group: str, *, mlp=dense_mlp_tensors) -> list:
    """Lfm2DecoderLayer's parameters: the mixer, the MLP, then operator_norm and ffn_norm; the embeddings, the final
    norm (embedding_norm) and an untied head as the rotary decoder's."""
    if group != "layer":
        return _decoder.tensors(m, group)
    h = m.hidden_size
    return mixer_tensors(m) + mlp(m) + norm("operator_norm", h, False) + norm("ffn_norm", h, False)


# ---- peft's names ----------------------------------------------------------------------------------------------
def mixer_lora_table(m) -> dict:
    """peft's names on the mixer: q_proj, k_proj, v_proj and out_proj in an attention block; in a conv block only
    out_proj (h -> h), which target "out_proj" reaches there too (peft matches the module's own name)."""
    h = m.hidden_size
    if m.block_kind == CONV:
        return dict(q=NO_QKV, k=NO_QKV, v=NO_QKV, o=("out_proj", h, h))
    a, kv, d = m.n_heads, m.n_kv_heads, m.head_dim
    return dict(q=("q_proj", h, a * d), k=("k_proj", h, kv * d), v=("v_proj", h, kv * d), o=("out_proj", a * d, h))


def dense_mlp_lora_table(m) -> dict:
    """peft's names on the dense MLP: gate w1, up w3, down w2."""
    h, inner = m.hidden_size, m.intermediate_size
    return dict(gate=("w1", h, inner), up=("w3", h, inner), down=("w2", inner, h))


def all_linear_refusal(m) -> str:
    """peft's all-linear adapts a conv block's in_proj, which no memmath target names."""
    if m.block_kind != CONV:
        return ""
    return ("peft's all-linear also adapts each short-convolution block's in_proj (h -> 3h), which memmath's target "
            "names do not cover; name the targets instead (q, k, v and o reach the attention blocks, o each conv "
            "block's out_proj too)")


# ---- the forward pass (transformers' PyTorch path: Run(mixer_kernels='torch')) --------------------------------
# The LLaMA steps' names of LFM2's modules (peft names them by the module's own name: out_proj, w1, w3, w2)
LLAMA_NAMES = {"out_proj": "o_proj", "w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
# The CUDA kernels transformers calls in place of the PyTorch convolution where the package is installed
# (use_kernel_func_from_hub_with_fallback("causal_conv1d_fn", "causal_conv1d"), modeling_lfm2.py)
KERNELS = "causal-conv1d's kernels"
# Measured on the CPU (tests/test_families_lfm2_trace.py's held-out steps, b 2, s 64, SDPA): with checkpointing the
# steady step peaked above the prediction (the moment's missing tensors not found): such a run keeps a floor
CHECKPOINTED_PEAK_REFUSAL = ("with checkpointing, held-out CPU steps peaked 0.3-1.1% (full finetuning) and 1.4-3.3% "
                             "(LoRA) above memmath's prediction, in a recomputed block's MLP backward (what is missing "
                             "there not all found); without checkpointing within 0.03%")


def llama_named(p: Pass) -> Pass:
    """The pass with LFM2's adapted module names as _decoder's attention and MLP steps ask for them."""
    return replace(p, lora_modules=frozenset(LLAMA_NAMES.get(m, m) for m in p.lora_modules))


def short_conv(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Lfm2ShortConv.forward on the normalized input x (t x h) along transformers 5.24's PyTorch path
    (modeling_lfm2.py causal_conv1d_fn, no padding mask): in_proj (h -> 3h), whose output B, C and x are three views
    (transpose, chunk); B * x keeps that whole storage; F.conv1d over it, padded by conv_L_cache - 1 on both sides,
    keeps its input (b x h x s) and returns b x h x (s + L - 1) values, of which the first s are read through a view;
    C * that view keeps the whole convolution output; transpose(-1, -2).contiguous() copies the product for out_proj.
    With the cache (use_cache) update_conv_state first allocates the conv state (b x h x L zeros, the model's dtype)
    and copies the last L columns into it, alive to the forward's end."""
    t, h, b, s = tr.t, shape.hidden_size, tr.b, tr.s
    width = shape.linear_attention.conv_kernel
    bcx = tr.linear(x, t * 3 * h, trainable, p.lora_of("in_proj"), "in_proj")
    gate_b, gate_c, inner = (Tensor(t * h, bcx.elem, bcx.grad, bcx.storage) for _ in range(3))
    gated = mul(tr, gate_b, inner, names=("B * x in_proj output (B)", "B * x in_proj output (x)"))
    if p.cache:  # DynamicCache's LinearAttentionLayer.lazy_initialization: torch.zeros, then copy_
        tr.cache_held(tr.new(b * h * width, tr.e))
        tr.use(gated)
    conv = tr.new(b * h * (s + width - 1), tr.e, gated.grad or trainable)
    if conv.grad:  # ConvolutionBackward0 keeps its input even for a frozen weight (measured: LoRA on q and v)
        tr.save(gated, "convolution input (B * x)")
    tr.use(gated)
    out = Tensor(t * h, conv.elem, conv.grad, conv.storage)  # [:, :, :seq_len]
    y = mul(tr, gate_c, out, names=("C * conv in_proj output (C)",
                                     "C * conv convolution output (b x h x (s + L - 1))"))
    merged = tr.new(t * h, tr.e, y.grad)  # y.transpose(-1, -2).contiguous()
    tr.use(y)
    return tr.linear(merged, t * h, trainable, p.lora_of("out_proj"), "out_proj")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass, *, moe=None) -> Tensor:
    """Lfm2DecoderLayer / Lfm2MoeDecoderLayer: operator_norm, the mixer (Lfm2ShortConv, or Lfm2Attention: _decoder's
    attention with q_layernorm and k_layernorm over each head), the residual add, then ffn_norm and the MLP:
    _decoder's SwiGLU on w1, w3, w2, or in a mixture-of-experts block moe(tr, shape, x, trainable, p) (LFM2-MoE's)."""
    named = llama_named(p)
    normed = tr.rms_norm(x, trainable, "operator_norm")
    if shape.block_kind == CONV:
        mixed = short_conv(tr, shape, normed, trainable, p)
    else:
        mixed = _decoder.attention(tr, shape, normed, trainable, named)
    r1 = tr.add(mixed, x)
    normed = tr.rms_norm(r1, trainable, "ffn_norm")
    if shape.n_experts:
        return tr.add(r1, moe(tr, shape, normed, trainable, p))
    return tr.add(r1, _decoder.mlp(tr, shape, normed, trainable, named))


# ---- the cache -------------------------------------------------------------------------------------------------
def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every attention block (every token: a DynamicLayer), in the cache's format; a conv block's
    state is state_bytes'."""
    blocks = sum(len(b) for layout, b in shape.layouts() if layout.block_kind != CONV)
    return blocks * 2 * shape.n_kv_heads * shape.head_dim * context_len * batch_size


def state_bytes(shape, *, batch_size, dtype):
    """Each conv block's conv state, batch x hidden_size x conv_L_cache values at any context, in dtype, the model's
    (memmath.states.short_conv_state_bytes: a LinearAttentionLayer holding the convolution's input, allocated in its
    dtype whatever format the attention blocks' keys and values are in); no recurrent state."""
    total = 0
    for layout, blocks in shape.layouts():
        if layout.block_kind == CONV:
            conv = layout.linear_attention
            total = total + len(blocks) * values_bytes(batch_size * conv.channels * conv.conv_kernel, dtype)
    return total


# ---- the MLP width of Lfm2MLP -------------------------------------------------------------------------------------
def adjusted_width(config, get, width: int) -> int:
    """Lfm2MLP's width from intermediate_size: with block_auto_adjust_ff_dim, int(2 x width / 3), then
    int(block_ffn_dim_multiplier x that) rounded up to a multiple of block_multiple_of. (Lfm2MLP skips the factor and
    the rounding for a null multiplier, which Lfm2Config's strict float | int field refuses: so does memmath.)"""
    if not get.flag("block_auto_adjust_ff_dim", True):
        return width
    multiplier = config.get("block_ffn_dim_multiplier", 1.0)
    if (isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not math.isfinite(multiplier)
            or multiplier <= 0):
        raise ValueError(f"config field 'block_ffn_dim_multiplier' must be a positive number (Lfm2Config refuses "
                         f"null); got {validate.describe(multiplier)}")
    multiple = get("block_multiple_of", 256)
    adjusted = int(multiplier * int(2 * width / 3))
    adjusted = multiple * ((adjusted + multiple - 1) // multiple)
    if adjusted < 1:
        raise ValueError(f"config field 'intermediate_size' ({width}) leaves Lfm2MLP {adjusted} wide after "
                         "block_auto_adjust_ff_dim (int(2/3 of it) times block_ffn_dim_multiplier, rounded up to a "
                         "multiple of block_multiple_of); give a wider one")
    return adjusted
