"""Falcon-H1 (transformers 5.24 configuration_falcon_h1.py FalconH1Config, modeling_falcon_h1.py FalconH1ForCausalLM):
one block layout, every block a Mamba-2 mixer and grouped-query attention side by side on the same normalized input,
their outputs added (FalconH1DecoderLayer), then a SwiGLU MLP:

- the block registers feed_forward (gate_proj, up_proj, down_proj, biases where mlp_bias says), mamba (_mamba2.py:
  mamba_n_heads heads of mamba_d_head channels, its inner width mamba_d_ssm, or mamba_expand x hidden_size where that
  is null; a conv bias where mamba_conv_bias says, an in_proj bias where mamba_proj_bias says, an out_proj bias where
  projectors_bias says, the gated RMSNorm only where mamba_rms_norm says), self_attn (q, k, v, o, biases where
  attention_bias says; head_dim where the config names one, else hidden_size / heads), then input_layernorm and
  pre_ff_layernorm: parameters() order;
- the muP multipliers (embedding_multiplier, lm_head_multiplier, key_multiplier, attention_in/out_multiplier,
  ssm_in/out_multiplier, ssm_multipliers, mlp_multipliers) add no parameter; ssm_multipliers live in each mixer's
  mup_vector, a non-persistent buffer of in_proj's width a block (not counted: buffers are no parameters; a few MB);
- the head is tied to the embedding where tie_word_embeddings says so.

The cache: every block keeps keys and values (every token) and a Mamba-2 conv state in the model's dtype and an fp32
SSM state, the same size at any context (memmath/states.py, mamba2_state_bytes). Activations: traced (block, below)
down transformers' PyTorch path of the Mamba-2 mixer (_mamba2.mixer with the muP scalings, and the gate with or
without the gated norm, normalizing before or after it), which the CPU always takes; on CUDA transformers calls
mamba-ssm's and causal-conv1d's kernels where installed, whose saved tensors differ (mixer_kernels: such a run keeps
the textbook model and no verdict). Every multiplier by a Python float makes a new tensor that keeps nothing. Measured
to the byte on the CPU (tests/test_families_mamba2_trace.py). Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from ..trace import Tensor, Trace
from . import _decoder, _mamba2
from ._parts import linear, norm
from ._steps import Pass, kv_cache
from .record import ATTENTION_BIAS, decoder_fields

FIELDS = {
    "mamba_d_ssm": "the Mamba-2 inner width (null: mamba_expand x hidden_size)",
    "mamba_n_heads": "Mamba-2 heads (tensors, SSM state)",
    "mamba_d_head": "a Mamba-2 head's channels ('auto': the inner width / mamba_n_heads)",
    "mamba_d_state": "the SSM state's size a head channel (in_proj, conv1d, SSM state)",
    "mamba_n_groups": "groups of B and C (in_proj, conv1d, conv state)",
    "mamba_d_conv": "the causal convolution's width (conv1d, conv state)",
    "mamba_expand": "the inner width over hidden_size where mamba_d_ssm is null",
    "mamba_conv_bias": "a bias on the convolution",
    "mamba_proj_bias": "a bias on in_proj",
    "projectors_bias": "a bias on the mixer's out_proj",
    "mamba_rms_norm": "the mixer's gated RMSNorm (a weight of the inner width) where true",
    "mlp_bias": "biases on gate, up, down",
    "embedding_multiplier": "scales the embeddings (no parameter)",
    "lm_head_multiplier": "scales the logits (no parameter)",
    "ssm_multipliers": "scale in_proj's output (a buffer, no parameter)",
    "mamba_chunk_size": "the Mamba-2 PyTorch path's chunk: each sequence is padded to whole chunks (saved activations)",
    "mamba_norm_before_gate": "the gated RMSNorm normalizes before the gate (saved activations)",
    "time_step_limit": "the clamp of the time step (one clamp whatever its bounds: no memory)",
}


def read_mixer(config, get) -> _mamba2.Mamba2Mixer:
    """The Mamba-2 widths, checked as FalconH1Config.validate_architecture checks them."""
    h, heads = get("hidden_size"), get("mamba_n_heads", 128)
    inner = get("mamba_expand", 2) * h if config.get("mamba_d_ssm", 1024) is None else get("mamba_d_ssm", 1024)
    head_dim = config.get("mamba_d_head", "auto")
    if head_dim in ("auto", None):
        if inner % heads:
            raise ValueError(f"config field 'mamba_n_heads' ({heads}) must divide the Mamba-2 inner width "
                             f"(mamba_d_ssm, or mamba_expand x hidden_size: {inner}) when mamba_d_head is 'auto'")
        head_dim = inner // heads
    else:
        head_dim = get("mamba_d_head")
    if head_dim * heads != inner:
        raise ValueError(f"config fields 'mamba_n_heads' x 'mamba_d_head' ({heads} x {head_dim}) must equal the "
                         f"Mamba-2 inner width (mamba_d_ssm, or mamba_expand x hidden_size: {inner})")
    return _mamba2.Mamba2Mixer(heads=heads, head_dim=head_dim, state_size=get("mamba_d_state", 256),
                               n_groups=get("mamba_n_groups", 1), conv_kernel=get("mamba_d_conv", 4),
                               conv_bias=get.flag("mamba_conv_bias", True),
                               proj_bias=get.flag("mamba_proj_bias", False),
                               out_bias=get.flag("projectors_bias", False),
                               gated_norm=get.flag("mamba_rms_norm", False),
                               norm_before_gate=get.flag("mamba_norm_before_gate", True),
                               chunk_size=get("mamba_chunk_size", 256))


def read_options(config, get):
    return {"linear_attention": read_mixer(config, get)}


def tensors(m, group: str) -> list:
    """FalconH1DecoderLayer in parameters() order: feed_forward, mamba, self_attn, then its two norms; the embedding,
    final_layernorm and head as the rotary decoder's."""
    if group != "layer":
        return _decoder.tensors(m, group)
    h, inner, a, kv, d = m.hidden_size, m.intermediate_size, m.n_heads, m.n_kv_heads, m.head_dim
    ab, mb = m.attention_bias, m.mlp_bias
    return (linear("feed_forward.gate_proj", "mlp", h, inner, mb) + linear("feed_forward.up_proj", "mlp", h, inner, mb)
            + linear("feed_forward.down_proj", "mlp", inner, h, mb)
            + _mamba2.tensors("mamba", h, m.linear_attention)
            + linear("self_attn.q_proj", "attention", h, a * d, ab)
            + linear("self_attn.k_proj", "attention", h, kv * d, ab)
            + linear("self_attn.v_proj", "attention", h, kv * d, ab)
            + linear("self_attn.o_proj", "attention", a * d, h, ab)
            + norm("input_layernorm", h, False) + norm("pre_ff_layernorm", h, False))


def _scaled(tr: Trace, x: Tensor) -> Tensor:
    """x * a muP multiplier (a Python float): a new tensor, which keeps nothing."""
    out = tr.new(x.numel, x.elem, x.grad)
    tr.use(x)
    return out


def embeddings(tr: Trace, shape, trains: bool, **settings) -> Tensor:
    """embed_tokens(input_ids) * embedding_multiplier (FalconH1Model.forward)."""
    return _scaled(tr, _decoder.embeddings(tr, shape, trains, **settings))


def _attention(tr: Trace, m, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """FalconH1Attention on hidden_states * attention_in_multiplier: q, k (* key_multiplier: a new tensor), v, the
    rotary positions, the DynamicCache, the kernel, o_proj."""
    q, k, v = _decoder.qkv(tr, m, _scaled(tr, x), trainable, p)
    k = _scaled(tr, k)
    q, k = tr.rotary(q, p.tables), tr.rotary(k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=m.n_heads, head_dim=m.head_dim, kind=p.kind, dropout=p.dropout,
                       softmax_fp32=True, name="attention", kv_contiguous=p.cache)
    return tr.linear(ctx, tr.t * m.hidden_size, trainable, p.lora_of("o_proj"), "o_proj")


def _mlp(tr: Trace, m, x: Tensor, trainable: bool, lora) -> Tensor:
    """FalconH1MLP: up_proj(x) * silu(gate_proj(x) * gate_multiplier) (SiLU keeps the scaled gate), down_proj, then *
    down_multiplier."""
    t, width = tr.t, m.intermediate_size
    up = tr.linear(x, t * width, trainable, lora("up_proj"), "up_proj")
    gate = _scaled(tr, tr.linear(x, t * width, trainable, lora("gate_proj"), "gate_proj"))
    down = tr.linear(tr.silu_times(gate, up, "SwiGLU"), t * m.hidden_size, trainable, lora("down_proj"), "down_proj")
    return _scaled(tr, down)


def block(tr: Trace, m, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """FalconH1DecoderLayer: input_layernorm; the Mamba-2 mixer (down transformers' PyTorch path, its input scaled by
    ssm_in_multiplier and in_proj's output by mup_vector) and attention side by side on the normed input, each output
    scaled, added, residual; pre_ff_layernorm, the MLP, residual."""
    normed = tr.rms_norm(x, trainable, "input_layernorm")
    mamba = _scaled(tr, _mamba2.mixer(tr, m.linear_attention, normed, trainable, p.lora_of, m.hidden_size, p.cache,
                                      mup=True))
    attention = _scaled(tr, _attention(tr, m, normed, trainable, p))
    # attention's backward runs before the mixer's: the gradient it gives the normed input (t x h) waits at
    # input_layernorm through the mixer's chunk scan backward (_mamba2.backward_working_set's moment)
    before, due = tr.__dict__["scan_backward"]
    tr.__dict__["scan_backward"] = (before, due + normed.numel * tr.e)
    r1 = tr.add(x, tr.add(mamba, attention))
    return tr.add(r1, _mlp(tr, m, tr.rms_norm(r1, trainable, "pre_ff_layernorm"), trainable, p.lora_of))


def all_linear_refusal(m) -> str:
    return (_mamba2.all_linear_refusal("mamba.in_proj, mamba.out_proj") + " (q, k, v, o, gate, up, down); peft 0.21 "
            "itself refuses LoRA on a falcon_h1 model's out_proj and conv1d")


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Every block's keys and values (every token), in the cache's format; its Mamba-2 states are state_bytes'."""
    return shape.n_layers * 2 * shape.n_kv_heads * shape.head_dim * context_len * batch_size


def state_bytes(shape, *, batch_size, dtype):
    """Every block's Mamba-2 conv state in dtype (the model's) and SSM state in fp32."""
    return shape.n_layers * _mamba2.mixer_state_bytes(shape.linear_attention, batch_size, dtype)


ARCHITECTURE = _mamba2.BlockOrderArchitecture(
    model_type="falcon_h1", family="llama", title="Falcon-H1",
    source="configuration_falcon_h1.py, modeling_falcon_h1.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **FIELDS}),
    defaults={"num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128000},
    read_options=read_options, tensors=tensors,
    module_order=("gate_proj", "up_proj", "down_proj", "q_proj", "k_proj", "v_proj", "o_proj"),
    lora_order=("gate_proj", "up_proj", "down_proj", "q_proj", "k_proj", "v_proj", "o_proj"),
    final_norm_module="final_layernorm", norms_last=False, all_linear_refusal=all_linear_refusal,
    tp_plan={},  # FalconH1Config.base_model_tp_plan splits only the embedding
    kv_cache_values=kv_cache_values, state_bytes=state_bytes, prefill_phases=None,
    trace_embeddings=embeddings, trace_block=block, mixer_backward=_mamba2.backward_working_set,
    mixer_kernels=_mamba2.KERNELS,  # its trace replays transformers' PyTorch path (Run.mixer_kernels='torch')
    checkpointed_peak_refusal=("with checkpointing, the backward of a recomputed block holds more than memmath's "
                               "moments price (the Mamba-2 mixer's recomputed scan and its backward, not located): "
                               "CPU steps peaked 0.9-18% above the prediction, most in bf16 or with LoRA"),
)
