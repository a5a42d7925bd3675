"""Cohere 2: Command R7B and Command A (transformers 5.24 configuration_cohere2.py, modeling_cohere2.py).

Cohere2DecoderLayer runs attention and the SwiGLU MLP side by side on one normed input and adds both to the
residual (a parallel block), so a block has one norm, input_layernorm: a Cohere2LayerNorm, which subtracts the mean
but has a weight and no bias. Every sliding_window_pattern-th block (default 4) attends to every token without
rotary positions; the others slide over sliding_window tokens with rotary positions. The head is tied by default
and its logits are multiplied by logit_scale, a new tensor that keeps nothing for backward.

Cohere2Model builds the causal and the sliding-window mask in every forward, whatever layer_types holds. A prefill
keeps the rotary decoder's working set plus those masks (measured on the CPU with validation/inference_working_set.py's
LiveBytes: tests/test_families_kin.py); its parallel block's phases measure as LLaMA's.

The trace replays the parallel block, the fp32 LayerNorm and the fp32 rotary (apply_rotary_pos_emb computes in
q.float()): measured on the CPU (tests/test_families_kin.py steps tiny Cohere 2 models, full and LoRA, SDPA and eager,
fp32 and bf16, with the window inside and beyond the sequence and with the training DynamicCache: the saved bytes equal
the trace's to the byte, the peak within 0.1%). The scaled logits replace the unscaled ones, so the causal LM's head
and loss are the rotary decoder's, after Cohere 2's own final norm."""

from functools import partial

from ..trace import Tensor, Trace
from . import _decoder
from ._parts import norm
from ._steps import Pass, dims, houlsby, kv_cache
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, SLIDING_WINDOW, Architecture, decoder_fields, full_every


def every_nth_full(get, layers):
    """Cohere2Config.__post_init__: without layer_types, every sliding_window_pattern-th block is full (default 4)."""
    pattern = get("sliding_window_pattern", 4)
    return full_every(pattern, layers)


def tensors(m, group: str) -> list:
    """Cohere2ForCausalLM's tensors: the rotary decoder's outside the blocks (a weight-only Cohere2LayerNorm for the
    final norm); in a block, attention, the MLP (never biased) and the one input_layernorm, in parameters() order."""
    if group != "layer":
        return _decoder.tensors(m, group)
    return _decoder.attention_tensors(m) + _decoder.mlp_tensors(m) + norm("input_layernorm", m.hidden_size, False)


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's prefill plus the sliding-window mask: under eager an e x b x s x s tensor beside the
    causal one (the record's eager_sliding_mask), under SDPA a (1, 1, s, s) bool tensor once the prompt reaches the
    window (sdpa_mask skips it while every key is inside the window)."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)
    if not eager and shape.sliding_window is not None:
        outside = outside + s * s * (s >= shape.sliding_window)
    return outside, attn, mlp


def layer_norm(tr: Trace, shape, x: Tensor, trainable: bool, name: str) -> Tensor:
    """Cohere2LayerNorm in fp32: x - mean twice (the forward subtracts it once for the variance, kept by pow(2), and
    once more for the output, kept by the product), rsqrt of the variance (kept), the normed x (kept when the weight
    trains), weight.to(float32) (a new vector per call, kept for x's gradient when the model is not fp32), their
    product cast back to the input dtype."""
    n, t, e = x.numel, tr.t, tr.e
    x32 = x if e == 4 else tr.tmp(n, 4, x)
    mean = tr.tmp(t, 4, x32)
    centered = tr.new(n, 4, x.grad)
    tr.use(x32, mean)
    variance = tr.tmp(t, 4, tr.tmp(n, 4, centered))  # pow(2).mean(-1)
    again = tr.new(n, 4, x.grad)  # (hidden_states - mean), the second time
    tr.use(x32, mean)
    rsqrt = tr.new(t, 4, x.grad)
    tr.use(tr.tmp(t, 4, variance))  # + eps
    normed = tr.new(n, 4, x.grad)
    tr.use(again, rsqrt)
    weight32 = None if e == 4 else tr.new(shape.hidden_size, 4, trainable)
    prod = tr.new(n, 4, x.grad or trainable)
    tr.use(normed, weight32)
    if x.grad:
        tr.save(centered, f"{name} input minus mean (fp32, pow's)")
        tr.save(again, f"{name} input minus mean (fp32, the product's)")
        tr.save(rsqrt, f"{name} rsqrt (fp32)")
        if weight32 is not None:
            tr.save(weight32, f"{name} weight (fp32 copy)")
    if trainable:
        tr.save(normed, f"{name} normalized input (fp32)")
    if e == 4:
        return prod
    out = tr.new(n, e, prod.grad)
    tr.use(prod)
    return out


def rotary(tr: Trace, q: Tensor, k: Tensor, tables):
    """Cohere 2's apply_rotary_pos_emb: q and k to fp32 (kept to the return), x * cos + rotate_half(x) * sin with
    rotate_half's -x2 and torch.stack as temporaries, cast back to the model dtype; cos and sin kept."""
    e, (cos, sin) = tr.e, tables
    wide = [x if e == 4 else tr.new(x.numel, 4, x.grad) for x in (q, k)]
    tr.use(q, k)
    if q.grad or k.grad:
        tr.save(cos, "rotary cos table")
        tr.save(sin, "rotary sin table")
    summed = []
    for x in wide:
        times_cos = tr.new(x.numel, 4, x.grad)
        tr.use(x, cos)
        stacked = tr.tmp(x.numel, 4, tr.tmp(x.numel // 2, 4, x), x)  # torch.stack([-x2, x1], -1)
        total = tr.new(x.numel, 4, x.grad)
        tr.use(times_cos, tr.tmp(x.numel, 4, stacked, sin))
        summed.append(total)
    tr.use(*wide)
    if e == 4:
        return tuple(summed)
    out = []
    for x in summed:
        out.append(tr.new(x.numel, e, x.grad))
        tr.use(x)
    return tuple(out)


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Cohere2DecoderLayer: one LayerNorm, attention (rotary in fp32) and the SwiGLU MLP on its output, both added
    to the residual. Every block is traced with the rotary (the sliding blocks'; a full block skips it, which saves
    the same bytes: attention keeps q and k either way)."""
    t, dm = tr.t, dims(shape)
    h, a, d = dm["h"], dm["a"], dm["d"]
    normed = layer_norm(tr, shape, x, trainable, "input_layernorm")
    q, k, v = _decoder.qkv(tr, shape, normed, trainable, p)
    q, k = rotary(tr, q, k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    attn = houlsby(tr, tr.linear(ctx, t * h, trainable, p.lora_of("o_proj"), "o_proj"), p, "attention")
    return tr.add(tr.add(x, attn), _decoder.mlp(tr, shape, normed, trainable, p))


def read_options(config, get):
    return {"parallel_residual": True}  # Cohere2DecoderLayer: residual + attention(h) + mlp(h), h = norm(residual)


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="cohere2", family="llama", title="Cohere 2 (Command R7B, Command A)",
    source="configuration_cohere2.py, modeling_cohere2.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW,
                           "layer_types": LAYER_TYPES_FIELD,
                           "sliding_window_pattern": "layer_types when not given (every n-th full)",
                           "logit_scale": "multiplies the logits (a t x V tensor in place of the unscaled, nothing "
                                          "saved)"}),
    defaults={"tie_word_embeddings": True, "sliding_window": 4096},
    read_options=read_options, derive_layer_types=every_nth_full, tensors=tensors, traced_activations=("silu",),
    prefill_phases=prefill_phases, eager_sliding_mask=True, trace_block=block,
    trace_head=partial(_decoder.head_and_loss, norm=layer_norm),
    both_masks_always=True,  # modeling_cohere2.py: Cohere2Model.forward's causal_mask_mapping
)
