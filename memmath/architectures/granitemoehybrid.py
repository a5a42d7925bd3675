"""Granite 4.0's hybrid models (transformers 5.24 configuration_granitemoehybrid.py GraniteMoeHybridConfig,
modeling_granitemoehybrid.py GraniteMoeHybridForCausalLM; IBM's granite-4.0-h-tiny, -h-small, -h-micro):

- two block layouts (config layer_types, its legacy name layers_block_type; "mamba" and "attention" read as
  transformers' "linear_attention" and "full_attention", every block a Mamba-2 block when none is given): a Mamba-2
  mixer (_mamba2.py: heads mamba_n_heads of mamba_d_head channels, mamba_expand x hidden_size wide, mamba_n_groups
  groups of B and C of mamba_d_state values, a mamba_d_conv-wide convolution) or LLaMA's grouped-query attention
  (q, k, v, o, their biases attention_bias; no q/k norms);
- in every block, after the mixer, a mixture of experts where num_local_experts > 0 (GraniteMoeHybridMoE: a
  router's E x h Parameter and the experts as two 3-D Parameters of intermediate_size, top num_experts_per_tok)
  added to a shared SwiGLU MLP of shared_intermediate_size (GraniteMoeHybridMLP: input_linear h -> 2 x width, gate
  and up fused, and output_linear), which alone is the MLP when num_local_experts is 0 (granite-4.0-h-micro);
- each block registers its two RMSNorms first, then the MoE, the shared MLP and the mixer (parameters() order);
- Granite's four multipliers (embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling) add
  no parameter and keep nothing (granite.py); rotary positions only where position_embedding_type is "rope" (Granite
  4.0 uses "nope"; the attention blocks are then their own layout, block_kind _mamba2.ROTARY), no parameter either
  way; the head is tied to the embedding where tie_word_embeddings says so.

The cache: attention blocks keep keys and values, Mamba-2 blocks a conv state in the model's dtype and an fp32 SSM
state, the same size at any context (memmath/states.py, mamba2_state_bytes). Activations: traced (block, below) down
transformers' PyTorch path of the Mamba-2 mixer (_mamba2.mixer), which the CPU always takes; on CUDA transformers calls
mamba-ssm's and causal-conv1d's kernels where installed, whose saved tensors differ (mixer_kernels: such a run keeps
the textbook model and no verdict). Measured to the byte on the CPU (tests/test_families_mamba2_trace.py). Refused by
name: rotary attention blocks before a last Mamba-2 block, and use_cache with no attention block, which transformers
cannot train (_mamba2.trace_refusal). Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from ..trace import Tensor, Trace
from . import _decoder, _mamba2, _moe
from ._parts import ParamTensor, linear, norm
from ._steps import INT64, Pass
from .granite import MULTIPLIERS
from .record import ATTENTION_BIAS, MOE, decoder_fields, refuse_true

# layer_types as saved (transformers' _LEGACY_LAYER_TYPE_REMAP turns "mamba" and "attention" into these)
_LAYER_TYPES = {"mamba": _mamba2.LINEAR, "attention": "full_attention", _mamba2.LINEAR: _mamba2.LINEAR,
                "full_attention": "full_attention"}
FIELDS = {
    "layer_types": "per block mamba (linear_attention) or attention (full_attention): two block layouts",
    "layers_block_type": "layer_types' legacy name",
    "num_local_experts": "routed experts (0: the shared MLP alone)",
    "intermediate_size": "one routed expert's width",
    "shared_intermediate_size": "the shared MLP's width (input_linear h -> 2 x width, output_linear)",
    "mamba_n_heads": "Mamba-2 heads (tensors, SSM state)",
    "mamba_d_head": "a Mamba-2 head's channels ('auto': mamba_expand x hidden_size / mamba_n_heads)",
    "mamba_d_state": "the SSM state's size a head channel (in_proj, conv1d, SSM state)",
    "mamba_n_groups": "groups of B and C (in_proj, conv1d, conv state)",
    "mamba_d_conv": "the causal convolution's width (conv1d, conv state)",
    "mamba_expand": "the Mamba-2 inner width over hidden_size (= mamba_n_heads x mamba_d_head)",
    "mamba_conv_bias": "a bias on the convolution",
    "mamba_proj_bias": "biases on in_proj and out_proj",
    "mamba_chunk_size": "the PyTorch path's chunk: each sequence is padded to whole chunks (saved activations)",
    "time_step_limit": "the clamp of the time step (one clamp whatever its bounds: no memory)",
    "position_embedding_type": "'rope' or 'nope' (no parameter either way)",
}


def read_layer_types(config, layers) -> tuple:
    """Each block's kind as GraniteMoeHybridConfig reads it: layer_types (or layers_block_type) with the legacy names
    remapped, every block a Mamba-2 block when neither is given."""
    key = "layer_types" if config.get("layer_types") is not None else "layers_block_type"
    given = config.get(key)
    if given is None:
        return (_mamba2.LINEAR,) * layers
    if not isinstance(given, list) or len(given) != layers or any(t not in _LAYER_TYPES for t in given):
        raise ValueError(f"config field {key!r} must list mamba or attention (linear_attention or full_attention) "
                         f"for each of the {layers} blocks; got {given!r:.200}")
    return tuple(_LAYER_TYPES[t] for t in given)


def read_mixer(config, get) -> _mamba2.Mamba2Mixer:
    """The Mamba-2 widths, checked as GraniteMoeHybridConfig.validate_architecture checks them."""
    h, heads, expand = get("hidden_size"), get("mamba_n_heads", 128), get("mamba_expand", 2)
    head_dim = config.get("mamba_d_head", "auto")
    if head_dim in ("auto", None):
        if expand * h % heads:
            raise ValueError(f"config field 'mamba_n_heads' ({heads}) must divide mamba_expand x hidden_size "
                             f"({expand * h}) when mamba_d_head is 'auto'")
        head_dim = expand * h // heads
    else:
        head_dim = get("mamba_d_head")
    if head_dim * heads != expand * h:
        raise ValueError(f"config fields 'mamba_n_heads' x 'mamba_d_head' ({heads} x {head_dim}) must equal "
                         f"mamba_expand x hidden_size ({expand * h}), the Mamba-2 inner width")
    return _mamba2.Mamba2Mixer(heads=heads, head_dim=head_dim, state_size=get("mamba_d_state", 256),
                               n_groups=get("mamba_n_groups", 1), conv_kernel=get("mamba_d_conv", 4),
                               conv_bias=get.flag("mamba_conv_bias", True),
                               proj_bias=get.flag("mamba_proj_bias", False),
                               chunk_size=get("mamba_chunk_size", 256))


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    position = config.get("position_embedding_type")
    if position not in (None, "rope", "nope"):
        raise ValueError(f"config field 'position_embedding_type' must be 'rope', 'nope' or null; got "
                         f"{position!r:.50}")
    layers = get("num_hidden_layers")
    experts, shared = get("num_local_experts", 8, low=0), get("shared_intermediate_size", 1024)
    options = {"linear_attention": read_mixer(config, get)}
    if experts:
        options.update(n_experts=experts, experts_per_tok=get("num_experts_per_tok", 2),
                       expert_intermediate_size=get("intermediate_size"), shared_expert_intermediate_size=shared)
    else:  # the shared MLP alone: ModelShape's dense MLP at shared_intermediate_size
        options["intermediate_size"] = shared
    kinds = read_layer_types(config, layers)
    layouts = []
    blocks = tuple(i for i, kind in enumerate(kinds) if kind == _mamba2.LINEAR)
    if blocks:
        layouts.append((blocks, (("block_kind", _mamba2.LINEAR),)))
    rotary = tuple(i for i, kind in enumerate(kinds) if kind != _mamba2.LINEAR) if position == "rope" else ()
    if rotary:  # GraniteMoeHybridModel builds its rotary embedding only for "rope"; else attention rotates nothing
        layouts.append((rotary, (("block_kind", _mamba2.ROTARY),)))
    if layouts:
        options["block_layouts"] = tuple(layouts)
    return options


def _shared_width(m) -> int:
    return m.shared_expert_intermediate_size if m.n_experts else m.intermediate_size


def mlp_tensors(m) -> list:
    """GraniteMoeHybridMoE (router, experts) where the block has experts, then the shared MLP."""
    h, si = m.hidden_size, _shared_width(m)
    moe = []
    if m.n_experts:
        e, ei = m.n_experts, m.expert_intermediate_size
        moe = [ParamTensor("block_sparse_moe.router.weight", "mlp", (e, h)),  # a Parameter, not an nn.Linear
               ParamTensor("block_sparse_moe.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
               ParamTensor("block_sparse_moe.experts.down_proj", "mlp", (e, h, ei))]
    return (moe + linear("shared_mlp.input_linear", "mlp", h, 2 * si, False)
            + linear("shared_mlp.output_linear", "mlp", si, h, False))


def _shared_mlp(tr: Trace, m, x: Tensor, trainable: bool, lora) -> Tensor:
    """GraniteMoeHybridMLP: input_linear (h -> 2 x width), chunk(2) into gate and up views of its output,
    activation(gate) * up (SwiGLU's saves), output_linear."""
    t, width = tr.t, _shared_width(m)
    both = tr.linear(x, t * 2 * width, trainable, lora("input_linear"), "shared_mlp.input_linear")
    gate, up = (Tensor(t * width, both.elem, both.grad, both.storage) for _ in range(2))
    return tr.linear(tr.silu_times(gate, up, "shared MLP SwiGLU"), t * m.hidden_size, trainable,
                     lora("output_linear"), "shared_mlp.output_linear")


def _router(tr: Trace, m, x: Tensor, trainable: bool, lora) -> Tensor:
    """GraniteMoeHybridTopKRouter: F.linear(x, weight).float(), topk over the fp32 logits (keeps its int64
    indices), softmax over the k chosen (keeps its fp32 output), type_as(x). Returns the t x k routing weights."""
    t, e, rows = tr.t, tr.e, tr.t * m.experts_per_tok
    logits = _moe.router_logits(tr, x, m.hidden_size, m.n_experts, trainable, lora("router.weight"))
    grad = logits.grad
    logits32 = logits if e == 4 else tr.tmp(t * m.n_experts, 4, logits)
    values, indices = tr.new(rows, 4, grad), tr.new(rows, INT64)
    tr.use(logits32)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    weights = tr.new(rows, 4, grad)
    tr.use(values)
    if grad:
        tr.save(weights, "router top-k softmax output (fp32)")
    if e != 4:
        weights = tr.tmp(rows, e, weights)
        weights.grad = grad
    return weights


def _scaled_add(tr: Trace, residual: Tensor, out: Tensor) -> Tensor:
    """residual + out * residual_multiplier: the product by a Python float is a temporary that keeps nothing."""
    scaled = tr.tmp(out.numel, out.elem, out)
    scaled.grad = out.grad
    return tr.add(residual, scaled)


def block(tr: Trace, m, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GraniteMoeHybridDecoderLayer: input_layernorm, the Mamba-2 mixer (_mamba2.mixer, transformers' PyTorch path)
    or attention, residual; post_attention_layernorm, the MoE (router, grouped_mm experts) plus the shared MLP, or
    the shared MLP alone, residual."""
    normed = tr.rms_norm(x, trainable, "input_layernorm")
    if m.block_kind == _mamba2.LINEAR:
        out = _mamba2.mixer(tr, m.linear_attention, normed, trainable, p.lora_of, m.hidden_size, p.cache)
    else:
        out = _mamba2.attention(tr, m, normed, trainable, p)
    r1 = _scaled_add(tr, x, out)
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    if m.n_experts:
        weights = _router(tr, m, normed, trainable, p.lora_of)
        routed = _moe.routed_experts(tr, m, normed, weights, trainable, p.lora_of)
        out = tr.add(routed, _shared_mlp(tr, m, normed, trainable, p.lora_of))
    else:
        out = _shared_mlp(tr, m, normed, trainable, p.lora_of)
    return _scaled_add(tr, r1, out)


def mixer_tensors(m) -> list:
    """The block's token mixer: GraniteMoeHybridMambaLayer in a Mamba-2 block, else GraniteMoeHybridAttention."""
    if m.block_kind == _mamba2.LINEAR:
        return _mamba2.tensors("mamba", m.hidden_size, m.linear_attention)
    h, a, kv, d, ab = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias
    return (linear("self_attn.q_proj", "attention", h, a * d, ab)
            + linear("self_attn.k_proj", "attention", h, kv * d, ab)
            + linear("self_attn.v_proj", "attention", h, kv * d, ab)
            + linear("self_attn.o_proj", "attention", a * d, h, ab))


def tensors(m, group: str) -> list:
    """GraniteMoeHybridDecoderLayer in parameters() order: input_layernorm and post_attention_layernorm, the MoE and
    shared MLP, then the mixer (registered last); the embedding, final norm and head as the rotary decoder's."""
    if group != "layer":
        return _decoder.tensors(m, group)
    h = m.hidden_size
    return norm("input_layernorm", h, False) + norm("post_attention_layernorm", h, False) + mlp_tensors(m) \
        + mixer_tensors(m)


def lora_table(m) -> dict:
    """peft's names: q, k, v, o in an attention block (none in a Mamba-2 block); gate and up the shared MLP's fused
    input_linear (h -> 2 x width, adapted once), down its output_linear; router and experts the MoE's Parameters
    (peft 0.21's ParamWrapper; peft converts no granitemoehybrid names, so "all-linear" leaves them)."""
    h, a, kv, d, si = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, _shared_width(m)
    if m.block_kind == _mamba2.LINEAR:
        why = "a Mamba-2 block has no q_proj, k_proj, v_proj or o_proj"
        table = dict(q=why, k=why, v=why, o=why)
    else:
        table = {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
                 "o": ("o_proj", a * d, h)}
    table.update(gate=("input_linear", h, 2 * si), up=("input_linear", h, 2 * si), down=("output_linear", si, h),
                 shared_gate="it has no shared expert gate")
    if m.n_experts:
        e, ei = m.n_experts, m.expert_intermediate_size
        table.update(router=("router.weight", h, e),
                     experts=[("experts.gate_up_proj", h, 2 * ei, 2 * e), ("experts.down_proj", ei, h, e)])
    else:
        table.update(router="it has no mixture of experts (num_local_experts 0)",
                     experts="it has no mixture of experts (num_local_experts 0)")
    return table


def all_linear_refusal(m) -> str:
    if m.block_kind != _mamba2.LINEAR:
        return ""
    return _mamba2.all_linear_refusal("mamba.in_proj, mamba.out_proj") + \
        " (q, k, v, o, gate, up, down, router, experts)"


ARCHITECTURE = _mamba2.BlockOrderArchitecture(
    model_type="granitemoehybrid", family="llama", title="Granite 4.0 hybrid",
    source="configuration_granitemoehybrid.py, modeling_granitemoehybrid.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **MOE, **MULTIPLIERS, **FIELDS}, drop=("head_dim",)),
    defaults={"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 11008, "vocab_size": 32000},
    read_options=read_options, tensors=tensors, lora_modules=lora_table,
    module_order=("input_linear", "output_linear", "q_proj", "k_proj", "v_proj", "o_proj"),
    lora_order=("router.weight", "experts.gate_up_proj", "experts.down_proj", "input_linear", "output_linear",
                "q_proj", "k_proj", "v_proj", "o_proj"),
    norms_last=False, not_all_linear=("router", "experts"), all_linear_refusal=all_linear_refusal,
    tp_plan={},  # GraniteMoeHybridConfig.base_model_tp_plan splits only the routed experts (packed_colwise, rowwise)
    kv_cache_values=_mamba2.kv_cache_values, state_bytes=_mamba2.state_bytes, prefill_phases=None,
    trace_block=block, trace_refusal=_mamba2.trace_refusal, mixer_backward=_mamba2.backward_working_set,
    mixer_kernels=_mamba2.KERNELS,  # its trace replays transformers' PyTorch path (Run.mixer_kernels='torch')
    checkpointed_peak_refusal=("with checkpointing, the backward of a recomputed block holds more than memmath's "
                               "moments price (the Mamba-2 block's recomputed scan and its backward, not located): "
                               "CPU steps peaked 0.06-16% above the prediction, most with LoRA"),
)
