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
SSM state, the same size at any context (memmath/states.py, mamba2_state_bytes). Activations: the Mamba-2 mixer runs
the mamba_ssm and causal_conv1d kernels on CUDA and transformers' PyTorch fallback elsewhere, whose saved tensors
differ: traced=False (activations='textbook'). Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from . import _decoder, _mamba2
from ._parts import linear, norm
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
                               gated_norm=get.flag("mamba_rms_norm", False))


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
    traced=False,  # the Mamba-2 kernels differ by device (activations='textbook')
)
