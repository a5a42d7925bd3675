"""gpt-oss (transformers 5.24 configuration_gpt_oss.py, modeling_gpt_oss.py): grouped-query attention with biases and
a learned sink logit per head (GptOssAttention.sinks), a mixture of experts whose router and experts carry biases and
whose gate and up are interleaved in one input-first Parameter (GptOssMLP, _moe.biased_tensors), even blocks sliding
over 128 tokens.

Its trace (block) follows the eager path gpt-oss trains on (GptOssPreTrainedModel._supports_sdpa is False): the norms'
fp32 product (GptOssRMSNorm, OLMo 2's), the half-width rotary tables and torch.cat rotation, the sinks concatenated
to the scores with their max's indices and a softmax in the model's dtype, the top-k router with its softmax over the
chosen logits, and transformers' default grouped_mm experts (integrations/moe.py) with their biases gathered per row
and the clamped SwiGLU (GptOssExperts._apply_gate). It was checked against what autograd holds on the CPU to the byte
(tests/test_families_gpt_oss_trace.py) before traced was set. Held out after: saved activations to the byte in 16
CPU steps, steady peaks within 1%. With checkpointing three things found on those steps are priced: a recomputed
block's sink attention backward (sink_backward_work, b x a x s x (s + 1) gradients), the eager masks held from the
forward to the end of backward, and the experts' unsort gradient alive while a block is recomputed; 12 CPU steps
of other configs measured after that were 0.9% under to 2.6% over, and 0.2% under to 3.3% over once what every
checkpoint holds beside its input (checkpoint_held_arguments) was priced."""

from functools import partial

from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._parts import ParamTensor
from ._steps import INT64, Pass, dims, kv_cache
from .record import (ATTENTION_BIAS, LAYER_TYPES_FIELD, MOE, SLIDING_WINDOW, Architecture, decoder_fields,
                    full_every, refuse_true)

GPT_OSS_FIELDS = {"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
                  **MOE, "num_local_experts": "routed experts",
                  "swiglu_limit": "a clamp inside the experts' SwiGLU: no memory",
                  "router_aux_loss_coef": "a loss weight: no memory (the aux loss itself: output_router_logits)"}


def attention_tensors(m) -> list:
    """GptOssAttention in parameters() order: the sinks (one logit per query head, added to each row of the scores
    before the softmax), then q, k, v and o with biases."""
    return [ParamTensor("self_attn.sinks", "attention", (m.n_heads,))] + _decoder.attention_tensors(m)


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    # GptOssConfig: intermediate_size is one expert's width (GptOssExperts); no dense MLP, no shared expert
    return {"n_experts": get("num_local_experts", 128), "expert_intermediate_size": get("intermediate_size"),
            "experts_per_tok": get("num_experts_per_tok", 4), "norm_topk_prob": True}


def even_blocks_slide(get, layers):
    """GptOssConfig.__post_init__: even blocks (0, 2, ...) slide."""
    return full_every(2, layers)


# ---- the forward pass ------------------------------------------------------------------------------------------
def rotary(tr: Trace, x: Tensor, tables) -> Tensor:
    """_apply_rotary_emb (modeling_gpt_oss.py): torch.chunk(x, 2) into two views, first * cos - second * sin and
    second * cos + first * sin on half-width tables (GptOssRotaryEmbedding's cos and sin are head_dim / 2 wide:
    emb = freqs), then torch.cat: a new contiguous (b, heads, s, d) tensor. The products keep only the tables."""
    if x.grad:
        tr.save(tables[0], "rotary cos table")
        tr.save(tables[1], "rotary sin table")
    half = x.numel // 2
    halves = []
    for _ in range(2):  # first_ = first * cos - second * sin; second_ = second * cos + first * sin
        times_cos = tr.new(half, x.elem)
        tr.use(x, tables[0])
        times_sin = tr.new(half, x.elem)
        tr.use(x, tables[1])
        halves.append(tr.new(half, x.elem, x.grad))
        tr.use(times_cos, times_sin)
    out = tr.new(x.numel, x.elem, x.grad)
    tr.use(*halves)
    return out


def sink_attention(tr: Trace, shape, q: Tensor, k: Tensor, v: Tensor, trainable: bool, p: Pass) -> Tensor:
    """eager_attention_forward (modeling_gpt_oss.py) on the rotated q and k (contiguous (b, heads, s, d), from
    torch.cat) and v: repeat_kv copies k and v to every query head (a view where a key/value head serves every query
    head); q @ k^T keeps q and that k; * scaling and + the causal mask make the b x a x s x s scores; torch.cat with
    the sinks (one logit per head, expanded) makes b x a x s x (s + 1) logits; their max over the last dim keeps its
    int64 indices (b x a x s); the logits less the max, then softmax in the model's dtype (dtype=combined_logits.dtype,
    no fp32 upcast) keeps its b x a x s x (s + 1) output; probs[..., :-1] is a view, and probs @ v keeps it (the
    softmax's own storage) and v; the output is copied by transpose(1, 2).contiguous() for o_proj."""
    dm = dims(shape)
    a, kv, d = dm["a"], dm["k"], dm["d"]
    b, s, e = tr.b, tr.s, tr.e
    n, rows = tr.t * a * d, b * a * s
    one_kv = a > 1 and kv == 1

    def operand(x, contiguous):
        """What the matmul keeps of k or v after repeat_kv: x itself when contiguous with a head per query head,
        else the a-head copy (one key/value head: a stride-0 view, kept as it is at b = 1, Trace._kv_operand)."""
        if kv == a and contiguous:
            return x
        out = tr._kv_operand(x, n, e, "eager", one_kv)
        tr.use(x)
        return out

    kc = operand(k, True)  # repeat_kv of the keys, then of the values, before the first matmul
    vc = operand(v, p.cache)
    if q.grad:
        tr.save(kc, "attention k^T (QK^T)")
    if k.grad:
        tr.save(q, "attention q (QK^T)")
    grad = q.grad or k.grad or trainable  # the sinks train with the block
    scores = tr.tmp(rows * s, e, q, kc)  # q @ k^T
    scores = tr.tmp(rows * s, e, scores)  # * scaling
    scores = tr.tmp(rows * s, e, scores)  # + the causal (or sliding-window) mask
    combined = tr.new(rows * (s + 1), e, grad)  # torch.cat([scores, sinks], dim=-1)
    tr.use(scores)
    top = tr.new(rows, e, grad)  # combined_logits.max(dim=-1, keepdim=True): values and int64 indices
    indices = tr.new(rows, INT64)
    tr.use(combined)
    if grad:
        tr.save(indices, "attention sink-softmax max indices (int64)")
        tr.backward_moment(sink_backward_work(tr, rows, n, e))
    shifted = tr.new(rows * (s + 1), e, grad)
    tr.use(combined, top)
    probs = tr.new(rows * (s + 1), e, grad)  # F.softmax(..., dtype=combined_logits.dtype)
    tr.use(shifted, scores)  # the masked scores, the local attn_weights, live until it is reassigned after softmax
    if grad:
        tr.save(probs, "attention softmax output with the sink column")
    probs = Tensor(rows * s, e, grad, probs.storage)  # probs[..., :-1]: a view
    probs = tr.dropout(probs, p.dropout, "attention")
    if v.grad:
        tr.save(probs, "attention probabilities (PV)")
    if probs.grad:
        tr.save(vc, "attention v (PV)")
    out = tr.tmp(n, e, probs, vc)  # probs @ v
    ctx = tr.new(n, e, probs.grad or v.grad)  # transpose(1, 2).contiguous()
    tr.use(out, k, v)
    return ctx


def sink_backward_work(tr: Trace, rows, n, e):
    """The most the sink attention's backward holds at once beyond the block's tensors saved before its softmax and
    the gradient arriving at the block: the gradient of the repeated v (probs^T @ grad, n values), then the widest of
    the softmax's backward (slice_backward's b x a x s x (s + 1) zero-padded gradient, the saved output and
    _softmax_backward_data's gradient) and MaxBackward0's (the softmax's gradient passed on to the logits, the
    max's b x a x s gradient and FunctionsManual.cpp value_selecting_reduction_backward's b x a x s x (s + 1)
    zeros scattered into in place, whose CPU scatter_ makes a b x a x s x (s + 1) fp32 buffer for a 16-bit
    gradient: measured on the CPU, counted on CUDA too, where it is not measured)."""
    wide = rows * (tr.s + 1)
    return n * e + max(3 * wide * e, 2 * wide * e + rows * e + (4 * wide if e < 4 else 0))


def attention(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GptOssAttention on the normalized input: q, k, v projections with biases, the half-table rotary, the
    DynamicCache (its sliding layers' DynamicSlidingWindowLayer returns the same torch.cat copies), the sink
    attention, o_proj."""
    t, dm = tr.t, dims(shape)
    q, k, v = _decoder.qkv(tr, shape, x, trainable, p)
    q, k = rotary(tr, q, p.tables), rotary(tr, k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = sink_attention(tr, shape, q, k, v, trainable, p)
    return tr.linear(ctx, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def router(tr: Trace, shape, x: Tensor, trainable: bool, lora) -> tuple:
    """GptOssTopKRouter on the normalized input x (t x h): returns the logits (t x E) and the routing weights (t x k),
    both in the model's dtype.
    F.linear(x, weight, bias) keeps x when the weight trains (under peft's ParamWrapper: x, and W + BA when x needs
    a gradient, as _moe.trace); topk over the logits keeps its int64 indices; softmax over the k chosen logits, in
    the model's dtype, keeps its output."""
    e = tr.e
    h, n_exp, rows = shape.hidden_size, shape.n_experts, tr.t * shape.experts_per_tok
    logits = _moe.router_logits(tr, x, h, n_exp, trainable, lora("router.weight"))
    grad = logits.grad
    values = tr.new(rows, e, grad)  # torch.topk(router_logits, top_k)
    indices = tr.new(rows, INT64)
    tr.use(logits)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    weights = tr.new(rows, e, grad)
    tr.use(values)
    if grad:
        tr.save(weights, "router top-k softmax output")
    return logits, weights


def clamped_swiglu(tr: Trace, gate_up: Tensor) -> Tensor:
    """GptOssExperts._apply_gate on the S x 2I gate_up output: gate and up are strided views (gate_up[..., ::2],
    [..., 1::2]); gate.clamp(max=limit) and up.clamp(-limit, limit) each keep their input, the whole gate_up
    storage; gate * sigmoid(gate * alpha) keeps the clamped gate and the sigmoid output; (up + 1) * glu keeps
    up + 1 and glu. Returns the S x I product."""
    width, e, grad = gate_up.numel // 2, gate_up.elem, gate_up.grad
    if grad:
        tr.save(gate_up, "experts gate_up output (the clamps' input)")
    gate = tr.new(width, e, grad)  # gate.clamp(min=None, max=limit)
    tr.use(gate_up)
    up = tr.new(width, e, grad)  # up.clamp(min=-limit, max=limit)
    tr.use(gate_up)
    scaled = tr.tmp(width, e, gate)  # gate * alpha
    sig = tr.new(width, e, grad)
    tr.use(scaled)
    glu = tr.new(width, e, grad)  # gate * sigmoid(gate * alpha)
    tr.use(gate, sig)
    if grad:
        tr.save(gate, "experts clamped gate")
        tr.save(sig, "experts sigmoid output")
    up1 = tr.new(width, e, grad)  # up + 1
    tr.use(up)
    out = tr.new(width, e, grad)  # (up + 1) * glu
    tr.use(up1, glu, up)  # the clamped up, a local, lives until _apply_gate returns
    if grad:
        tr.save(up1, "experts up + 1")
        tr.save(glu, "experts glu")
    return out


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GptOssDecoderLayer: input_layernorm (GptOssRMSNorm: (weight * normed_fp32).to(dtype), whose product keeps the
    fp32 normed input, OLMo 2's), the sink attention, residual; post_attention_layernorm, the router and the routed
    experts (_moe.routed_experts: grouped_mm with the experts' biases gathered per row and the clamped SwiGLU),
    residual. The layer's normed input and GptOssMLP's router logits (assigned to `_`) and weights stay alive until
    the MoE block returns, as grouped_mm_experts_forward's gathered bias and sorted ids do (_moe.routed_experts):
    found on held-out steps (LoRA in fp32, top-4 of 8 experts), whose forward peak, at the experts' unsort, was
    3.4% above the trace's without them."""
    r1 = tr.add(x, attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm", weight_fp32=True), trainable, p))
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm", weight_fp32=True)
    logits, weights = router(tr, shape, normed, trainable, p.lora_of)
    out = _moe.routed_experts(tr, shape, normed, weights, trainable, p.lora_of, biased=True,
                              apply_gate=clamped_swiglu)
    tr.use(normed, logits, weights)
    # A recomputed block's forward runs again when backward first unpacks one of its tensors: at the experts' unsort
    # (IndexBackward0), whose gradient (t x k x h, the output's gradient expanded to every chosen expert) is alive
    tr.__dict__["recompute_arrival"] = tr.t * shape.experts_per_tok * shape.hidden_size * tr.e
    return tr.add(r1, out)


ARCHITECTURE = Architecture(
    model_type="gpt_oss", family="llama", title="gpt-oss", source="configuration_gpt_oss.py, modeling_gpt_oss.py",
    fields=decoder_fields(GPT_OSS_FIELDS),
    # GptOssConfig's defaults (those of openai/gpt-oss-120b) where the reader's differ
    defaults={"attention_bias": True, "sliding_window": 128, "head_dim": 64},
    read_options=read_options, derive_layer_types=even_blocks_slide,
    tensors=partial(_decoder.tensors, attention=attention_tensors, mlp=_moe.biased_tensors),
    lora_modules=lambda m: {**_decoder.lora_table(m), **_moe.biased_lora_table(m)},
    # peft 0.21 on the meta device: the router's adapter, then gate_up_proj's (inner ParamWrapper), then down_proj's
    lora_order=("router.weight", "experts.gate_up_proj", "experts.down_proj"),
    # peft 0.21 does not convert gpt_oss (utils/transformers_weight_conversion.py), so "all-linear" adapts the
    # attention only; the router and experts take target_parameters
    not_all_linear=("router", "experts"),
    # GptOssPreTrainedModel._keep_in_fp32_modules: the norms stay fp32 when the model loads in fp16 (not in bf16)
    fp32_modules_fp16=("post_attention_layernorm", "input_layernorm", "norm"),
    tp_plan=_moe.TP_PLAN,
    sdpa=False,  # GptOssPreTrainedModel._supports_sdpa = False (the sinks need eager or flash kernels)
    trace_block=block, final_norm="rms_fp32_weight", rotary_half_tables=True, both_masks_always=True,
    mask_is_checkpoint_input=True,  # the causal and sliding-window masks, held from the forward to the end of backward
    checkpoint_held_arguments=True,
    traced=True,
    # the prefill working set of its experts' loop is not measured: the plain estimate (inference.working_set_bytes)
    prefill_phases=None,
)
