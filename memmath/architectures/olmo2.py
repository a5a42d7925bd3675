"""OLMo 2 (transformers 5.24 configuration_olmo2.py, modeling_olmo2.py): no norm before the sublayers, a norm
after each, q/k RMSNorm over all heads, norm weights kept in fp32, rotary tables in fp32."""

from ..trace import Tensor, Trace
from . import _decoder
from ._steps import Pass, dims, houlsby, kv_cache
from .record import ATTENTION_BIAS, QK_NORM, Architecture, decoder_fields


def read_options(config, get):
    return {"qk_norm": "full", "norm_layout": "post"}


def rotary(tr: Trace, x: Tensor, tables):
    """Olmo2RotaryEmbedding returns cos and sin in fp32 (no cast to the model dtype): q * cos runs in fp32
    and apply_rotary_pos_emb casts the result back. The fp32 tables, one pair per trace, are what is saved.
    Found when the first held-out OLMo 2 cases in bf16 measured 4,096 B more than the bf16 tables."""
    fp32 = getattr(tr, "_olmo2_tables", None)
    if fp32 is None:
        fp32 = tuple(tr.new(t.numel, 4, shared=t.storage.shared, existing=t.storage.existing) for t in tables)
        tr._olmo2_tables = fp32
    if x.grad:
        tr.save(fp32[0], "rotary cos table (fp32)")
        tr.save(fp32[1], "rotary sin table (fp32)")
    times_cos = tr.tmp(x.numel, 4, x, fp32[0])  # promoted to fp32
    rotated = tr.tmp(x.numel, tr.e, x)  # rotate_half, in the model dtype
    times_sin = tr.tmp(x.numel, 4, rotated, fp32[1])
    summed = tr.new(x.numel, 4, x.grad)
    tr.use(times_cos, times_sin)
    if tr.e == 4:
        return summed
    out = tr.new(x.numel, tr.e, x.grad)  # q_embed.to(q_type)
    tr.use(summed)
    return out


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Olmo2DecoderLayer: no norm before the sublayers; q/k RMSNorm over all heads; a norm on each sublayer's
    output (Olmo2RMSNorm: (weight * x_normed).to(dtype), its fp32 normed kept)."""
    dm, t = dims(shape), tr.t
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    lora = p.lora_of

    def norm(y, name, rows=None):
        return tr.rms_norm(y, trainable, name, rows=rows, weight_fp32=True)

    q = norm(tr.linear(x, t * a * d, trainable, lora("q_proj"), "q_proj"), "q_norm")
    k = norm(tr.linear(x, t * kv * d, trainable, lora("k_proj"), "k_proj"), "k_norm")
    v = tr.linear(x, t * kv * d, trainable, lora("v_proj"), "v_proj")
    q, k = rotary(tr, q, p.tables), rotary(tr, k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    r1 = tr.add(x, norm(houlsby(tr, tr.linear(ctx, t * h, trainable, lora("o_proj"), "o_proj"), p, "attention"),
                              "post_attention_layernorm"))
    prod = tr.silu_times(*_decoder.gate_up(tr, shape, r1, trainable, p), "SwiGLU")
    out = houlsby(tr, tr.linear(prod, t * h, trainable, lora("down_proj"), "down_proj"), p, "MLP")
    return tr.add(r1, norm(out, "post_feedforward_layernorm"))


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill less the normed copy of each sublayer's input (Olmo2DecoderLayer normalizes the
    sublayers' outputs instead), and with the rotary tables in fp32, one cos/sin pair per layer type
    (Olmo2RotaryEmbedding returns them uncast), where the rotary decoder counts one pair in the model dtype.
    Found on OLMo 3 with validation/inference_working_set.py's LiveBytes (tests/test_families_dense.py)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    no_input_norm = e * s * b * shape.hidden_size
    pairs = len(set(shape.layer_types or ("full_attention",)))
    return outside + 2 * s * shape.head_dim * (4 * pairs - e), attn - no_input_norm, mlp - no_input_norm


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="olmo2", family="llama", title="OLMo 2", source="configuration_olmo2.py, modeling_olmo2.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, **QK_NORM}),
    read_options=read_options, trace_block=block, final_norm="rms_fp32_weight", amp_measured=True,
    prefill_phases=prefill_phases,
)
