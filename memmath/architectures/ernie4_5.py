"""ERNIE 4.5 dense (transformers 5.24 configuration_ernie4_5.py, modeling_ernie4_5.py): LLaMA's layers with one
use_bias flag for all seven projections (q, k, v, o, gate, up, down), head_dim 128, 2 key/value heads and a tied head
by default (ERNIE-4.5-0.3B's shape), no attention dropout (Ernie4_5Attention fixes attention_dropout = 0.0 and its
config class has no such field, so a config's attention_dropout changes nothing), and a rotary that runs in fp32,
its tables repeated in each block and saved there."""

from ..trace import Tensor, Trace
from . import _decoder
from ._steps import Pass, dims, houlsby, kv_cache, larger
from .record import Architecture, decoder_fields


def read_options(config, get):
    """use_bias on every projection; Ernie4_5Config.__post_init__ turns an explicit null head_dim into h / a and a
    null num_key_value_heads into one per query head (an absent one takes the class defaults, 128 and 2)."""
    bias = get.flag("use_bias", False)
    options = {"attention_bias": bias, "mlp_bias": bias}
    for key, field in (("head_dim", "head_dim"), ("num_key_value_heads", "n_kv_heads")):
        if key in config and config[key] is None:
            options[field] = None  # ModelShape's own default: h / a, and n_heads
    return options


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill with ERNIE's fp32 rotary (modeling_ernie4_5.py): Ernie4_5RotaryEmbedding returns
    cos and sin in fp32 (2 x 4 s d held all pass), and apply_rotary_pos_emb repeats each to two fp32 (s, d) tables and
    rotates q.float() and k.float(): rotating q holds three fp32 copies of q at once (q * cos, the rotated half, times
    sin) beside the block input, its normed copy, q and k; rotating k holds the rotated q (fp32) and three fp32 copies
    of k. The k it holds is as large as the rotated k the cache will keep, counted in the cache's part. Measured with
    validation/inference_working_set.py's LiveBytes (tests/test_families_dense.py)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    h, a, kv, d = shape.hidden_size, shape.n_heads, shape.n_kv_heads, shape.head_dim
    outside = outside + 2 * (4 - e) * s * d  # the fp32 tables where LLaMA's are cast to the model dtype
    rotating = s * b * (2 * e * h + e * a * d + max(12 * a * d, 4 * a * d + 12 * kv * d)) + 8 * s * d
    return outside, larger(attn, rotating), mlp  # s may be an array (a sweep over contexts)


def rotary(tr: Trace, q: Tensor, k: Tensor, tables):
    """Ernie4_5RotaryEmbedding returns cos and sin in fp32 (one pair per trace, not saved); apply_rotary_pos_emb repeats
    each into a new fp32 table per block (cos[..., :d/2].repeat_interleave(2)), which q.float() * cos and
    rotate_half(q).float() * sin save, and returns the fp32 sums cast back to the model dtype."""
    fp32 = getattr(tr, "_ernie_tables", None)
    if fp32 is None:
        fp32 = tuple(tr.new(t.numel, 4, shared=t.storage.shared, existing=t.storage.existing) for t in tables)
        tr._ernie_tables = fp32
    cos, sin = (tr.tmp(t.numel, 4, t) for t in fp32)
    if q.grad or k.grad:
        tr.save(cos, "rotary cos table, repeated (fp32)")
        tr.save(sin, "rotary sin table, repeated (fp32)")
    sums = []
    for x in (q, k):
        x32 = x if tr.e == 4 else tr.tmp(x.numel, 4, x)  # x.float()
        times_cos = tr.tmp(x.numel, 4, x32, cos)
        half = tr.tmp(x.numel // 2, tr.e, x)  # -x2
        rotated = tr.tmp(x.numel, tr.e, half, x)  # torch.stack((-x2, x1), -1).flatten(-2)
        rotated32 = rotated if tr.e == 4 else tr.tmp(x.numel, 4, rotated)
        times_sin = tr.tmp(x.numel, 4, rotated32, sin)
        sums.append(tr.new(x.numel, 4, x.grad))
        tr.use(times_cos, times_sin)
    if tr.e == 4:
        return tuple(sums)
    out = []
    for x, summed in zip((q, k), sums):
        out.append(tr.new(x.numel, tr.e, x.grad))  # .to(original_dtype)
        tr.use(summed)
    return tuple(out)


def attention(tr: Trace, shape, normed: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Ernie4_5Attention on the normalized input, through o_proj: LLaMA's, with ERNIE's fp32 rotary (ERNIE 4.5 MoE's
    Ernie4_5_MoeAttention is the same)."""
    dm, t = dims(shape), tr.t
    q, k, v = _decoder.qkv(tr, shape, normed, trainable, p)
    q, k = rotary(tr, q, k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=dm["a"], head_dim=dm["d"], kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    return tr.linear(ctx, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Ernie4_5DecoderLayer: LlamaDecoderLayer's, with ERNIE's fp32 rotary."""
    normed = tr.rms_norm(x, trainable, "input_layernorm")
    attn = houlsby(tr, attention(tr, shape, normed, trainable, p), p, "attention")
    r1 = tr.add(x, attn)
    return tr.add(r1, _decoder.mlp(tr, shape, tr.rms_norm(r1, trainable, "post_attention_layernorm"), trainable, p))


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="ernie4_5", family="llama", title="ERNIE 4.5", source="configuration_ernie4_5.py, modeling_ernie4_5.py",
    fields=decoder_fields({"use_bias": "biases on q, k, v, o, gate, up, down"}, drop=("attention_dropout",)),
    defaults={"head_dim": 128, "num_key_value_heads": 2, "tie_word_embeddings": True},
    dropout_fields={},  # Ernie4_5Attention: self.attention_dropout = 0.0 whatever the config says
    read_options=read_options, prefill_phases=prefill_phases,
    # traced: measured after the block was written, tests/test_families_dense.py steps small ERNIEs on the CPU
    # (grouped and multi-head with use_bias, use_cache, LoRA on q and v; SDPA and eager, fp32 and bf16): the saved
    # bytes equal the trace's
    trace_block=block,
)
