"""EXAONE 4.0 (transformers 5.24 configuration_exaone4.py, modeling_exaone4.py): OLMo 2's norm placement (no norm
before the sublayers, an RMSNorm on each sublayer's output) with Qwen3's q/k RMSNorm over each head, no biases, and
hybrid attention: every sliding_window_pattern-th block full, the others sliding over sliding_window tokens
(EXAONE-4.0-32B: three sliding blocks to one full, 4,096 tokens). Its full blocks skip the rotary positions (NoPE),
which changes no parameter, no cache and no saved byte: their keys are cached either way, and attention keeps the
normed q and k where a rotary block keeps the rotated ones, the same sizes (measured: tests/test_families_dense.py)."""

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, smollm3
from ._steps import Pass, dims, houlsby, kv_cache, larger
from .record import LAYER_TYPES_FIELD, QK_NORM, SLIDING_WINDOW, Architecture, decoder_fields, full_every


def read_options(config, get):
    return {"qk_norm": "head", "norm_layout": "post"}


def every_nth_full(get, layers):
    """Exaone4Config.__post_init__: block i slides unless (i + 1) % sliding_window_pattern == 0 (default 4). A string
    pattern ("LLLG") or null raises in transformers 5.24 unless the config lists layer_types, so it is refused here."""
    pattern = get.config.get("sliding_window_pattern", 4)
    if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
        raise ValueError(f"config field 'sliding_window_pattern' must be a whole number >= 1 (every n-th block full) "
                         f"when the config has no layer_types; got {validate.describe(pattern)} (Exaone4Config "
                         "cannot derive layer_types from it: give layer_types)")
    return full_every(pattern, layers)


def prefill_phases(shape, s, b, e, eager):
    """SmolLM3's prefill (the rotary decoder's, and the sliding-window mask beside the causal one when a block
    slides: Exaone4Model builds both as SmolLM3Model does), less the normed copy of the block input in each sublayer:
    EXAONE's sublayers read the residual stream itself. Its norms run on the sublayers' outputs, so each phase is at
    least the moment an Exaone4RMSNorm holds its fp32 copy and the fp32 product with rsqrt (8 B per value): q_norm
    beside the block input, q and k (k as large as the rotated k the cache will keep, counted in the cache's part),
    post_feedforward_layernorm beside the block input (the caller's), the residual and the MLP's output. Measured with
    validation/inference_working_set.py's LiveBytes (tests/test_families_dense.py)."""
    outside, attn, mlp = smollm3.prefill_phases(shape, s, b, e, eager)
    h, a, d = shape.hidden_size, shape.n_heads, shape.head_dim
    sbe = s * b * e
    q_norm = s * b * (e * h + (e + 8) * a * d)
    feedforward_norm = s * b * (3 * e * h + 8 * h)
    return outside, larger(attn - sbe * h, q_norm), larger(mlp - sbe * h, feedforward_norm)  # s may be an array


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Exaone4DecoderLayer: no norm before the sublayers; q/k RMSNorm over each head (Qwen3's); a norm on each
    sublayer's output (Exaone4RMSNorm, LLaMA's); the full blocks skip the rotation, which saves tensors of the same
    sizes (attention keeps the normed q and k instead of the rotated ones; the tables are shared)."""
    dm, t = dims(shape), tr.t
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    q, k, v = _decoder.qkv(tr, shape, x, trainable, p)
    q = tr.rms_norm(q, trainable, "q_norm", rows=t * a)
    k = tr.rms_norm(k, trainable, "k_norm", rows=t * kv)
    q, k = tr.rotary(q, p.tables), tr.rotary(k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    out = houlsby(tr, tr.linear(ctx, t * h, trainable, p.lora_of("o_proj"), "o_proj"), p, "attention")
    r1 = tr.add(x, tr.rms_norm(out, trainable, "post_attention_layernorm"))
    prod = tr.silu_times(*_decoder.gate_up(tr, shape, r1, trainable, p), "SwiGLU")
    out = houlsby(tr, tr.linear(prod, t * h, trainable, p.lora_of("down_proj"), "down_proj"), p, "MLP")
    return tr.add(r1, tr.rms_norm(out, trainable, "post_feedforward_layernorm"))


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="exaone4", family="llama", title="EXAONE 4.0", source="configuration_exaone4.py, modeling_exaone4.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
                           "sliding_window_pattern": "layer_types when not given (every n-th block full)",
                           **QK_NORM}),
    defaults={"sliding_window": 4096, "num_key_value_heads": 32},
    read_options=read_options, derive_layer_types=every_nth_full, trace_block=block,
    causal_mask_always=True,  # Exaone4Model: the causal mask always, the sliding one when a block slides
    # traced: measured after the block was written, tests/test_families_dense.py steps small EXAONEs on the CPU
    # (sliding and full, use_cache, LoRA on q and v; SDPA and eager, fp32 and bf16): the saved bytes equal the trace's
    prefill_phases=prefill_phases,
)
