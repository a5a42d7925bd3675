"""GPT-NeoX (transformers 5.24 configuration_gpt_neox.py, modeling_gpt_neox.py): LayerNorm, one fused
query_key_value, a GELU MLP (no gate), a parallel residual, rotary on part of each head."""

from functools import partial

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder
from ._parts import linear
from ._steps import Pass, dims, kv_cache, merged_copy
from .record import Architecture, decoder_fields

# GPTNeoXConfig.base_model_tp_plan (configuration_gpt_neox.py)
TP_PLAN = {"layers.*.attention.query_key_value": "colwise", "layers.*.attention.dense": "rowwise",
           "layers.*.mlp.dense_h_to_4h": "colwise", "layers.*.mlp.dense_4h_to_h": "rowwise"}


def read_options(config, get):
    # GPTNeoXConfig: rope_parameters' partial_rotary_factor, from rotary_pct (default 0.25); the attention
    # rotates int(head_size * factor) dims of each head (GPTNeoXAttention.rotary_ndims).
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    factor = rope.get("partial_rotary_factor", config.get("rotary_pct", 0.25))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config field 'rotary_pct' must be a fraction in (0, 1]; got {validate.describe(factor)}")
    return {"layer_norm": True, "fused_qkv": True, "gated_mlp": False,
            "parallel_residual": get.flag("use_parallel_residual", True),
            "rotary_dim": max(1, int(get("hidden_size") // get("num_attention_heads") * factor))}


def lora_modules(m):
    """peft's target names in a GPT-NeoX layer: one query_key_value, dense, and the two MLP matrices."""
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    qkv = ("query_key_value", h, (a + 2 * kv) * d)
    return {"q": qkv, "k": qkv, "v": qkv, "o": ("dense", a * d, h),
            "up": ("dense_h_to_4h", h, inner), "down": ("dense_4h_to_h", inner, h)}


def attention_tensors(m) -> list:
    """GPTNeoXAttention: one query_key_value and dense (biases with attention_bias)."""
    h, a, kv, d, ab = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias
    return (linear("attention.query_key_value", "attention", h, (a + 2 * kv) * d, ab)
            + linear("attention.dense", "attention", a * d, h, ab) + _decoder.qk_norm_tensors(m))


def partial_rotary(tr: Trace, x: Tensor, tables, rotated):
    """GPT-NeoX's apply_rotary_pos_emb: the first rotary_ndims of each head rotate (keeping cos and sin,
    rotary_ndims wide), then torch.cat([rotated, passed]) makes a new contiguous (b, a, s, d) tensor."""
    if x.grad:
        tr.save(tables[0], "rotary cos table")
        tr.save(tables[1], "rotary sin table")
    times_cos = tr.tmp(rotated, tr.e, x, tables[0])
    turned = tr.tmp(rotated, tr.e, x)  # rotate_half
    times_sin = tr.tmp(rotated, tr.e, turned, tables[1])
    summed = tr.tmp(rotated, tr.e, times_cos, times_sin)
    out = tr.new(x.numel, tr.e, x.grad)  # torch.cat
    tr.use(summed, x)
    return out


def prefill_base(shape, s, b, e, eager):
    """GPT-NeoX's prefill (validation/inference_working_set.py --new): rotary tables rotary_dim wide; eager keeps the
    fused qkv output (3h) and the rotated q; the MLP phase holds the input, the attention output (the parallel
    residual adds it last), the LayerNorm output, and the GELU's input and output (2I)."""
    h, a, d = shape.hidden_size, shape.n_heads, shape.head_dim
    inner = shape.intermediate_size or 4 * h
    sbe = s * b * e
    mask = e * b * s * s if eager else 0  # eager's causal mask, built once and held all pass
    outside = sbe * h + 2 * e * s * (shape.rotary_dim or d) + mask
    fp32_copy = 4 if e != 4 else 0
    attn = (sbe * (5 * h + a * d) + (e + 4 + fp32_copy) * a * b * s * s if eager
            else sbe * (5 * h + 2 * a * d))
    return outside, attn, sbe * (3 * h + 2 * inner)


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GPTNeoXLayer (modeling_gpt_neox.py): LayerNorms, one query_key_value, partial rotary, GELU MLP,
    dropout after each sublayer, and (use_parallel_residual, the default) attention and MLP both reading
    the block input: the second LayerNorm saves the same input again (one storage) and its own stats."""
    dm, t, e = dims(shape), tr.t, tr.e
    h, a, d, rd, inner = dm["h"], dm["a"], dm["d"], dm["rd"], dm["I"]
    lora, dropout = p.lora_of, p.dropout
    h1 = tr.layer_norm(x, trainable, "input_layernorm")
    qkv = tr.linear(h1, 3 * t * h, trainable, lora("query_key_value"), "query_key_value")
    q, k, v = (Tensor(t * a * d, e, qkv.grad, qkv.storage) for _ in range(3))  # chunk(3): views of one storage
    q, k = partial_rotary(tr, q, p.tables, t * a * rd), partial_rotary(tr, k, p.tables, t * a * rd)
    if p.cache:  # layer_past.update(key_states, value_states) (modeling_gpt_neox.py:203): v is no chunk of qkv now
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=dropout, softmax_fp32=True,
                       name="attention", v_view=not p.cache, kv_contiguous=p.cache)
    if p.kind == "flash":  # q from torch.cat is contiguous as (b, a, s, d): so is the SDPA output, copied for dense
        ctx = merged_copy(tr, ctx)
    attn = tr.dropout(tr.linear(ctx, t * h, trainable, lora("dense"), "attention.dense"), dropout, "post_attention")
    if shape.parallel_residual:
        h2 = tr.layer_norm(x, trainable, "post_attention_layernorm")
    else:
        x = tr.add(attn, x)
        h2 = tr.layer_norm(x, trainable, "post_attention_layernorm")
    fc = tr.linear(h2, t * inner, trainable, lora("dense_h_to_4h"), "dense_h_to_4h")
    act = tr.gelu(fc, shape.hidden_act)
    out = tr.dropout(tr.linear(act, t * h, trainable, lora("dense_4h_to_h"), "dense_4h_to_h"), dropout, "post_mlp")
    if shape.parallel_residual:
        return tr.add(tr.add(out, attn), x)
    return tr.add(out, x)


ARCHITECTURE = Architecture(
    model_type="gpt_neox", family="llama", title="GPT-NeoX", source="configuration_gpt_neox.py, modeling_gpt_neox.py",
    # GPTNeoXConfig has neither head_dim nor num_key_value_heads: every head is h / heads wide, one k and v each
    fields=decoder_fields({"attention_bias": "biases on q, k, v, o (GPT-NeoX: on query_key_value and dense)",
                           "hidden_dropout": "dropout_p", "use_parallel_residual": "saved activations",
                           "rotary_pct": "rotated dims per head (saved activations; no parameters)",
                           "rope_parameters": "partial_rotary_factor as rotary_pct",
                           "classifier_dropout": "no memory for a causal LM"},
                          drop=("head_dim", "num_key_value_heads")),
    defaults={"attention_bias": True}, activations=("gelu",), traced_activations=("gelu",),
    dropout_fields={"attention_dropout": 0.0, "hidden_dropout": 0.0}, read_options=read_options,
    tensors=partial(_decoder.tensors, attention=attention_tensors), trace_block=block,
    tp_plan=TP_PLAN, prefill_phases=partial(_decoder.prefill_phases, base=prefill_base), embedding="embed_in", embedding_dropout=True, final_norm="layer",
    final_norm_module="final_layer_norm", lora_modules=lora_modules,
)
