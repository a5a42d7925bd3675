"""Llama 4's language model (transformers 5.24 configuration_llama4.py Llama4TextConfig, modeling_llama4.py
Llama4ForCausalLM), whose defaults are Llama-4-Scout-17B-16E's text model (@auto_docstring(checkpoint=
"meta-llama/Llama-4-Scout-17B-16E")):

- chunked attention on the rotary layers (attention_chunk_size, 8,192 tokens), full attention on the NoPE layers
  (no_rope_layers: every fourth layer by default). transformers caches a chunked layer exactly as a sliding window
  of attention_chunk_size tokens (cache_utils.py DYNAMIC_LAYER_TYPE_MAPPING: "chunked_attention" is a
  DynamicSlidingWindowLayer), so memmath reads those layers as sliding_attention with that window: the KV cache
  is exact; the masks differ, which changes no stored byte;
- Llama4TextMoe in every block where moe_layers names it (interleave_moe_layer_step, 1 for Scout): a router (an
  nn.Linear, E x h), the routed experts as two 3-D Parameters stored (E, h, 2I) and (E, I, h), and a shared expert
  (gate, up, down at intermediate_size); a dense block is Llama4TextMLP, a SwiGLU MLP at intermediate_size_mlp
  (Llama 4 Maverick's every other block: a second block layout, ModelShape.block_layouts);
- q/k L2 norm (use_qk_norm) on the rotary blocks and attention temperature tuning (attn_temperature_tuning) on
  the NoPE blocks: no parameters.

Activations: the forward pass is traced (block, moe below), checked against what autograd holds on the CPU to the
byte (tests/test_families_llama4_trace.py) with SDPA and eager attention, fp32 and bf16, full finetuning and LoRA:
Llama4TextMoe runs every token through every routed expert (x.repeat(E, 1) scaled by the sigmoid router scores, zero
for the experts not chosen) with two torch.bmm, so its saved tensors are E x t rows wide, not the top-k rows of the
grouped_mm trace (_moe.py); a rotary block keeps the one complex64 freqs_cis table (apply_rotary_emb) and its q/k
L2 norms' fp32 inputs, a NoPE block its temperature scales. Rotary and NoPE blocks hold the same tensors, so they are
block layouts of the trace alone (trace_shape, from the shape's block_kind), not of the model. LoRA on the router
(and all-linear, which adapts it) is refused by name: peft 0.21's forward fails on Llama4Router, which returns a
tuple. LoRA on the routed experts (peft's ParamWrapper through target_parameters) is traced: each bmm reads W + BA.
Its prefill's MLP phase is Llama4TextMoe's own, measured (prefill_phases)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial, reduce

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._parts import ParamTensor, linear
from ._steps import INT64, Pass, dims, kv_cache, larger
from .record import ATTENTION_BIAS, MOE, Architecture, decoder_fields
from .smollm3 import rope_layers

# Llama4TextConfig.base_model_tp_plan's entries for the modules every Scout block has
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.feed_forward.shared_expert.gate_proj": "colwise",
           "layers.*.feed_forward.shared_expert.up_proj": "colwise",
           "layers.*.feed_forward.shared_expert.down_proj": "rowwise",
           "layers.*.feed_forward.gate_proj": "colwise", "layers.*.feed_forward.up_proj": "colwise",
           "layers.*.feed_forward.down_proj": "rowwise"}
TRACED_HINT = "memmath train CONFIG --traced gives PyTorch's traced answer"


def moe_blocks(config, layers) -> list:
    """Llama4TextConfig.__post_init__: moe_layers as given, else every interleave_moe_layer_step-th block from
    step - 1."""
    given = config.get("moe_layers")
    if given is not None:
        if not isinstance(given, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in given):
            raise ValueError(f"config field 'moe_layers' must list block indices; got {validate.describe(given)}")
        return sorted(set(given))
    step = config.get("interleave_moe_layer_step", 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"config field 'interleave_moe_layer_step' must be a whole number >= 1; got "
                         f"{validate.describe(step)}")
    return list(range(step - 1, layers, step))


# A Llama 4 shape's block_kind: its blocks' attention, read by its trace alone (trace_shape), since rotary and NoPE
# blocks hold the same tensors but save different ones: "llama4:" and one letter a block, R rotary or N NoPE
# (Llama4TextAttention: use_rope = no_rope_layers[layer_idx]), then ":qk_norm" (use_qk_norm: a rotary block's q/k L2
# norm) and ":tuned" (attn_temperature_tuning: a NoPE block's q scaled by position) where they are on
PREFIX = "llama4:"
# the block_kind of one block layout of the trace: a rotary block with or without the L2 norm, a NoPE block with or
# without the temperature tuning, each NoPE kind with ONLY_NOPE added where no block rotates (then none keeps the
# rotary table)
ROTARY_L2, ROTARY, NOPE_TUNED, NOPE, ONLY_NOPE = "rotary_l2", "rotary", "nope_tuned", "nope", "_only"


def encoded_kinds(rope, qk_norm: bool, tuned: bool) -> str:
    """The shape's block_kind (PREFIX) from no_rope_layers and the config's use_qk_norm and attn_temperature_tuning."""
    return PREFIX + "".join("R" if r else "N" for r in rope) + (":qk_norm" if qk_norm else "") + (
        ":tuned" if tuned else "")


def block_kinds(encoded: str) -> list:
    """Each block's trace kind from the shape's block_kind."""
    letters, *flags = encoded.removeprefix(PREFIX).split(":")
    alone = "" if "R" in letters else ONLY_NOPE
    return [(ROTARY_L2 if "qk_norm" in flags else ROTARY) if c == "R" else
            (NOPE_TUNED if "tuned" in flags else NOPE) + alone for c in letters]


def trace_shape(shape):
    """The shape the trace replays: its blocks grouped by their MLP (the model's block_layouts) and their attention
    (block_kind), each group a block layout (hf_activations traces a model whose blocks differ layout by layout). A
    shape already of one trace kind is returned as it is."""
    if not shape.block_kind.startswith(PREFIX):
        return shape
    kinds = block_kinds(shape.block_kind)
    own = {i: changes for blocks, changes in shape.block_layouts for i in blocks}
    layouts = {}
    for i, kind in enumerate(kinds):
        layouts.setdefault(own.get(i, ()) + (("block_kind", kind),), []).append(i)
    if len(layouts) == 1:
        return replace(shape, block_kind=kinds[0])
    return replace(shape, block_kind=kinds[-1], block_layouts=tuple(
        (tuple(blocks), changes) for changes, blocks in layouts.items()))


def read_options(config, get):
    layers = get("num_hidden_layers")
    if get.flag("output_router_logits", False):
        raise ValueError("config field 'output_router_logits' is true; memmath models only output_router_logits="
                         "false (the router's auxiliary loss)")
    moe = moe_blocks(config, layers)
    if any(i >= layers or i < 0 for i in moe):
        raise ValueError(f"config field 'moe_layers' must list block indices from 0 to {layers - 1}; got {moe}")
    width = get("intermediate_size")
    options = {"n_experts": get("num_local_experts", 16), "experts_per_tok": get("num_experts_per_tok", 1),
               "expert_intermediate_size": width, "shared_expert_intermediate_size": width}
    # an empty no_rope_layers (Scout's config.json) takes the default, as Llama4TextConfig.__post_init__ does
    rope = rope_layers(dict(config, no_rope_layers=config.get("no_rope_layers") or None), layers)
    # Llama4TextMLP at intermediate_size_mlp (Maverick: every second block)
    dense = (("n_experts", 0), ("experts_per_tok", 0), ("expert_intermediate_size", None),
             ("shared_expert_intermediate_size", 0), ("intermediate_size", get("intermediate_size_mlp", 16384)))
    blocks = tuple(i for i in range(layers) if i not in moe)
    if blocks:
        options["block_layouts"] = ((blocks, dense),)
    options["block_kind"] = encoded_kinds(rope, get.flag("use_qk_norm", True), get.flag("attn_temperature_tuning", True))
    chunk = config.get("attention_chunk_size", 8192)
    given = config.get("layer_types")
    if given is None:  # Llama4TextConfig: the rotary layers chunked when attention_chunk_size is set
        given = ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope]
    if not isinstance(given, list) or len(given) != layers or any(t not in ("chunked_attention", "full_attention")
                                                                   for t in given):
        raise ValueError(f"config field 'layer_types' must list chunked_attention or full_attention for each of the "
                         f"{layers} blocks; got {validate.describe(given)}")
    if "chunked_attention" in given:
        options.update(sliding_window=get("attention_chunk_size", 8192),
                       layer_types=tuple("sliding_attention" if t == "chunked_attention" else t for t in given))
    return options


def feed_forward_tensors(m) -> list:
    """Llama4TextMoe in parameters() order: the experts (E x h x 2I, E x I x h), the router, the shared expert; a
    dense block's Llama4TextMLP: gate, up, down at its intermediate_size."""
    if not m.n_experts:
        i = m.intermediate_size
        return (linear("feed_forward.gate_proj", "mlp", m.hidden_size, i, False)
                + linear("feed_forward.up_proj", "mlp", m.hidden_size, i, False)
                + linear("feed_forward.down_proj", "mlp", i, m.hidden_size, False))
    h, e, ei, si = m.hidden_size, m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    return ([ParamTensor("feed_forward.experts.gate_up_proj", "mlp", (e, h, 2 * ei)),
             ParamTensor("feed_forward.experts.down_proj", "mlp", (e, ei, h))]
            + linear("feed_forward.router", "mlp", h, e, False)
            + linear("feed_forward.shared_expert.gate_proj", "mlp", h, si, False)
            + linear("feed_forward.shared_expert.up_proj", "mlp", h, si, False)
            + linear("feed_forward.shared_expert.down_proj", "mlp", si, h, False))


def lora_table(m) -> dict:
    """peft 0.21's names: the router is an nn.Linear (Llama4Router), adapted by "all-linear"; gate, up and down
    are the shared expert's linears; the routed experts are 3-D Parameters that peft does not convert for
    llama4 (all-linear leaves them), adapted by target_parameters through lora.ParamWrapper, which reads a
    stored (E, d1, d2) as A (r E) x d2 and B d1 x (r E) (and doubles gate_up_proj's rank by rank_pattern, as its
    conversion does elsewhere)."""
    h, a, kv, d = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim
    if not m.n_experts:  # a dense block's Llama4TextMLP
        i, moe = m.intermediate_size, "a dense block has no router or routed experts"
        return {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
                "o": ("o_proj", a * d, h), "gate": ("gate_proj", h, i), "up": ("up_proj", h, i),
                "down": ("down_proj", i, h), "router": moe, "experts": moe, "shared_gate": moe}
    e, ei, si = m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    return {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
            "o": ("o_proj", a * d, h), "gate": ("gate_proj", h, si), "up": ("up_proj", h, si),
            "down": ("down_proj", si, h), "router": ("router", h, e),
            "experts": [("experts.gate_up_proj", 2 * ei, h, 2 * e), ("experts.down_proj", h, ei, e)],
            "shared_gate": "Llama 4's shared expert has no gate"}


def prefill_phases(shape, s, b, e, eager):
    """The rotary decoder's outside and attention phases; the MLP phase from Llama4TextMoe.forward, at the
    experts' down projection: the block input, the residual, the attention output (a local the decoder layer
    keeps) and the normed input (4h a token), the router's logits and scores (2E), routed_in (the input repeated
    for every expert and scaled by its score, E h), the experts' gate_up (2 E I, alive while its chunks are),
    the SwiGLU product (E I) and the down projection's output (E h).

    Under eager (modeling_llama4.py's eager_attention_forward): the scores and their softmax in the model's dtype
    (no fp32 copy), 2 e a b s^2 at the softmax; the decoder layer keeps the returned attention weights in a local
    (`attention_states, _ = self.self_attn(...)`) through the MLP, e a b s^2 more there; and Llama4TextModel builds
    one mask per layer type present, the chunked one beside the causal one.

    Measured (validation/inference_working_set.py's LiveBytes on tiny Llama 4s in bf16, h 256): written against
    4 experts of 176 at s 256 (b 1) and 512 (b 2), SDPA and eager; held out, 8 experts of 96 at s 384 (b 3) and
    128 (b 2), and full attention only at s 320: every case 0.1% or less below the measured peak."""
    outside, attn, mlp = _decoder.prefill_phases(shape, s, b, e, eager)  # a dense block's MLP phase: the decoder's
    h, a, d, n, ei = shape.hidden_size, shape.n_heads, shape.head_dim, shape.n_experts, shape.expert_intermediate_size
    if n:
        mlp = s * b * e * (4 * h + 2 * n + 2 * n * h + 3 * n * ei)
    if eager:
        repeated = 2 * a * d if shape.n_kv_heads < a else 0  # repeat_kv copies k and v to every head
        attn = s * b * e * (2 * h + a * d + repeated) + 2 * e * a * b * s * s
        mlp = mlp + e * a * b * s * s
        if len(set(shape.attention_windows)) > 1:  # chunked and full layers: two masks
            outside = outside + e * b * s * s
    return outside, attn, mlp



# ---- the forward pass (modeling_llama4.py) -----------------------------------------------------------------------
def freqs_cis(tr: Trace, shape, tables) -> Tensor:
    """Llama4TextRotaryEmbedding's one table for every block: torch.polar(ones, position x inv_freq), complex64,
    (1, s, d / 2): 8 bytes a value, 4 s d bytes in any precision (where LLaMA's cos and sin are 2 s d in the
    model's dtype). Shared by every block of a trace (outside the blocks), made beside hf_activations' cos and sin
    (tables), which a Llama 4 block never reads."""
    made = tr.__dict__.setdefault("freqs_cis", {})
    key = id(tables[0].storage)
    if key not in made:
        rows = tables[0].numel // dims(shape)["rd"]  # s, or b x s for packed sequences' own positions
        made[key] = tr.new(rows * (shape.head_dim // 2), 8, shared=True, existing=tables[0].storage.existing)
    return made[key]


def rotary(tr: Trace, q: Tensor, k: Tensor, freqs: Tensor) -> tuple:
    """apply_rotary_emb: xq.float() and xk.float() (copies in a 16-bit model, q and k themselves in fp32), viewed as
    complex, times freqs_cis (a complex64 product of the same bytes as the fp32 input, which keeps only freqs_cis),
    viewed as real and type_as(xq): a copy in the model's dtype where it is not fp32."""
    inputs = [x if x.elem == 4 else tr.tmp(x.numel, 4, x) for x in (q, k)]
    products = []
    for x, x32 in zip((q, k), inputs):
        if x.grad:
            tr.save(freqs, "rotary freqs_cis (complex64, one for every block)")
        products.append(tr.new(x.numel, 4, x.grad))
        tr.use(x32, freqs)
    if tr.e == 4:
        return tuple(products)
    out = []
    for x in products:
        out.append(tr.new(x.numel, tr.e, x.grad))
        tr.use(x)
    return tuple(out)


def l2_norm(tr: Trace, x: Tensor, rows, name: str) -> Tensor:
    """Llama4TextL2Norm: x.float() * rsqrt(x.float().pow(2).mean(-1) + eps), type_as(x), over each head's d values;
    no weight. pow keeps the fp32 input (a copy in a 16-bit model), the product that input and the rsqrt (4 bytes a
    row)."""
    x32 = x if x.elem == 4 else tr.tmp(x.numel, 4, x)
    square = tr.tmp(x.numel, 4, x32)
    mean = tr.tmp(rows, 4, square)  # mean(-1) + eps
    rsqrt = tr.new(rows, 4, x.grad)
    tr.use(mean)
    normed = tr.new(x.numel, 4, x.grad)
    tr.use(x32, rsqrt)
    if x.grad:
        tr.save(x32, f"{name} input in fp32")
        tr.save(rsqrt, f"{name} rsqrt")
    if tr.e == 4:
        return normed
    out = tr.new(x.numel, tr.e, x.grad)  # type_as(x)
    tr.use(normed)
    return out


def temperature_tuning(tr: Trace, q: Tensor) -> Tensor:
    """A NoPE block's attention temperature tuning (attn_temperature_tuning): attn_scales, log1p(floor((positions + 1)
    / floor_scale)) * attn_scale + 1, an fp32 vector of s made in every block (expanded to b x s: a view), times q:
    the product keeps attn_scales, and is fp32 (type promotion), then .to(q.dtype): a copy in a 16-bit model."""
    scales = tr.new(tr.s, 4)
    if q.grad:
        tr.save(scales, "attention temperature scales (fp32, s)")
    product = tr.new(q.numel, 4, q.grad)
    tr.use(q, scales)
    if tr.e == 4:
        return product
    out = tr.new(q.numel, tr.e, q.grad)
    tr.use(product)
    return out


def attention(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Llama4TextAttention on the normalized input: q, k, v; a rotary block's complex rotation of q and k and (with
    use_qk_norm) their L2 norm, or a NoPE block's temperature tuning of q; the DynamicCache (a chunked layer's
    DynamicSlidingWindowLayer returns torch.cat copies too); SDPA, or eager_attention_forward with its softmax in the
    model's dtype (no fp32 upcast); o_proj. The SDPA output keeps q's (b, s, a, d) layout: reshape is a view."""
    t, dm = tr.t, dims(shape)
    a, kv, d = dm["a"], dm["k"], dm["d"]
    kind = shape.block_kind
    q, k, v = _decoder.qkv(tr, shape, x, trainable, p)
    if kind in (ROTARY_L2, ROTARY):
        q, k = rotary(tr, q, k, freqs_cis(tr, shape, p.tables))
        if kind == ROTARY_L2:
            q, k = l2_norm(tr, q, t * a, "q L2 norm"), l2_norm(tr, k, t * kv, "k L2 norm")
    else:
        if not kind.endswith(ONLY_NOPE) and q.grad:
            # the model's rotary blocks keep freqs_cis: one table for all, counted with whichever layout is last
            tr.save(freqs_cis(tr, shape, p.tables), "rotary freqs_cis (complex64, one for every block)")
        if kind.startswith(NOPE_TUNED):
            q = temperature_tuning(tr, q)
    if p.cache:  # cache.update(key_states, value_states, self.layer_idx)
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=False,
                       name="attention", kv_contiguous=p.cache)
    return tr.linear(ctx, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def moe(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> tuple:
    """Llama4TextMoe on the normalized input x (t x h); returns (its output, the router logits).

    Llama4Router: F.linear keeps x when the router trains; topk keeps its int64 indices; full_like(-inf).scatter_
    (index, values) keeps the same indices; sigmoid(router_scores.float()) keeps its fp32 output, .to(dtype) a copy
    in a 16-bit model. routed_in = x.repeat(E, 1) (E t x h) times router_scores.transpose(0, 1).reshape(-1, 1) (a
    copy, E t values): the product keeps both. Llama4TextExperts: bmm(routed_in, gate_up_proj) keeps its input when
    the experts train; chunk gives gate and up as views of the E t x 2I output; up * silu(gate) keeps gate_up (SiLU's
    input and up) and the SiLU output; bmm(., down_proj) keeps its E t x I input when the experts train. The shared
    expert, Llama4TextMLP on x, then out.add_(routed_out.reshape(E, t, h).sum(0)) in place (nothing kept).
    LoRA on the routed experts (peft's ParamWrapper, _moe.wrapped_weight): each bmm reads W + BA, which requires
    grad, so it keeps its input, and that weight when the input needs a gradient."""
    t, e = tr.t, tr.e
    h, n, k, width = shape.hidden_size, shape.n_experts, shape.experts_per_tok, shape.expert_intermediate_size
    lora = p.lora_of
    logits = _moe.router_logits(tr, x, h, n, trainable, None)
    grad = logits.grad
    values = tr.new(t * k, e, grad)  # torch.topk(router_logits, top_k, dim=1)
    indices = tr.new(t * k, INT64)
    tr.use(logits)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    scores = tr.new(t * n, e)  # torch.full_like(router_logits, -inf).scatter_(1, indices, values): in place
    tr.use(indices, values)
    scores.grad = grad
    scores32 = scores if e == 4 else tr.tmp(t * n, 4, scores)  # .float()
    sig = tr.new(t * n, 4, grad)
    tr.use(scores32)
    if grad:
        tr.save(sig, "router sigmoid output (fp32)")
    if e != 4:  # .to(router_scores.dtype)
        scores = tr.new(t * n, e, grad)
        tr.use(sig)
    else:
        scores = sig
    repeated = tr.new(n * t * h, e, x.grad)  # hidden_states.repeat(E, 1)
    tr.use(x)
    column = tr.new(n * t, e, grad)  # router_scores.transpose(0, 1).reshape(-1, 1): a copy
    tr.use(scores)
    if column.grad:
        tr.save(repeated, "experts' repeated input (E t x h)")
    if repeated.grad:
        tr.save(column, "router scores, one column per expert (E t)")
    routed_in = tr.new(n * t * h, e, repeated.grad or column.grad)
    tr.use(repeated, column)
    experts_lora = lora("experts.gate_up_proj")  # "experts" adapts gate_up_proj and down_proj together
    gate_up_weight = down_weight = None
    if experts_lora is not None:  # peft's nested ParamWrappers: down_proj's outside, gate_up_proj's (rank 2r) inside
        rank, adapter_elem = experts_lora
        down_pre = _moe.wrapped_weight(tr, experts_lora, n, width, h, "experts down_proj", build=False)
        gate_up_pre = _moe.wrapped_weight(tr, (2 * rank, adapter_elem), n, h, 2 * width, "experts gate_up_proj",
                                          build=False)
        gate_up_weight = gate_up_pre()  # read by the first bmm, inside parametrize.cached()
    weights_grad = trainable or experts_lora is not None  # the weights bmm reads require grad
    if weights_grad:
        tr.save(routed_in, "experts gate_up input (E t x h, scaled)")
    if gate_up_weight is not None and routed_in.grad:
        tr.save(gate_up_weight, "experts gate_up_proj W + BA (peft ParamWrapper)")
    gate_up = tr.new(n * t * 2 * width, e, routed_in.grad or weights_grad)
    tr.use(routed_in, gate_up_weight)
    gate, up = (Tensor(n * t * width, e, gate_up.grad, gate_up.storage) for _ in range(2))
    prod = tr.silu_times(gate, up, "experts SwiGLU")
    if experts_lora is not None:
        down_weight = down_pre()
    if weights_grad:
        tr.save(prod, "experts down input (E t x I)")
    if down_weight is not None and prod.grad:
        tr.save(down_weight, "experts down_proj W + BA (peft ParamWrapper)")
    routed_out = tr.new(n * t * h, e, prod.grad or weights_grad)
    # Llama4TextExperts.forward's local gate_up (and its views gate and up) lives until it returns, saved or not:
    # found on held-out checkpointed steps, whose forward (nothing saved) peaked there above the trace without it
    tr.use(prod, down_weight, gate_up)
    tr.use(gate_up_weight, down_weight)  # parametrize.cached() holds them until peft's wrappers return
    si = shape.shared_expert_intermediate_size
    shared_gate = tr.linear(x, t * si, trainable, lora("gate_proj"), "shared_expert.gate_proj")
    shared_up = tr.linear(x, t * si, trainable, lora("up_proj"), "shared_expert.up_proj")
    shared = tr.linear(tr.silu_times(shared_gate, shared_up, "shared expert SwiGLU"), t * h, trainable,
                       lora("down_proj"), "shared_expert.down_proj")
    summed = tr.new(t * h, e, routed_out.grad)  # .sum(dim=0)
    tr.use(routed_out)
    tr.use(shared, summed, routed_in, scores)  # out.add_(...): in place; the locals live until forward returns
    shared.grad = shared.grad or summed.grad
    return shared, logits


def moe_backward(shape, t, e, trains_experts: bool, grad_elem: int, checkpointing: bool, adapted: bool = False):
    """Llama4TextMoe's backward working set on top of its saved tensors and the t x h gradient arriving at it (peak.py's
    W; the arguments are _moe.backward_phase's), derived from modeling_llama4.py's forward and torch's autograd
    formulas (derivatives.yaml), A = E t x h and B = E t x I values, a moment net of the saved tensors freed by then:
    - the shared expert (_moe.backward_phase's shared-expert terms): its SwiGLU moment, and while the routed experts'
      backward runs, the t x h gradient it gave x, its saved tensors gone and its gradients made;
    - sum(0)'s backward expands the gradient (a view) and reshape to E t x h copies it (A); bmm(., down_proj)'s
      backward makes its input's gradient (B) and, trained, down_proj's E x I x h gradient: A + B + down;
    - up * silu(gate)'s backward: its incoming gradient and its two products (3B), the saved down input gone (trained);
    - bmm(routed_in, gate_up_proj)'s backward: chunk's cat of the gradients (2B), routed_in's gradient (A) and,
      trained, gate_up_proj's E x h x 2I, the SwiGLU's saved gate_up (2B) and SiLU output (B) gone;
    - routed_in * scores' backward: its incoming gradient, routed_in's gradient and the scores' product before it is
      summed to E t x 1 (3A; autograd reduces a broadcast operand's gradient after the formula), the saved routed_in
      gone (trained).
    adapted (LoRA on the routed experts, peft's ParamWrapper): each bmm reads W + BA, so it saves its input as trained
    experts do and makes W + BA's gradient in the model's dtype (gate_up_proj's here; down_proj's is peak.py's term)."""
    h, width, experts = shape.hidden_size, shape.expert_intermediate_size, shape.n_experts
    a, b = e * experts * t * h, e * experts * t * width
    down = experts * width * h * grad_elem if trains_experts else 0  # down_proj's gradient
    gate_up = 2 * experts * h * width * (grad_elem if trains_experts else e if adapted else 0)  # gate_up_proj's
    saves = trains_experts or adapted
    prod = b if saves else 0  # bmm(., down_proj) saves its input when its weight needs a gradient
    routed_in = a if saves else 0  # and bmm(routed_in, gate_up_proj) its input
    routed = reduce(larger, (a + b + down, 3 * b + down - prod, a - b + down + gate_up - prod,
                             3 * a + down + gate_up - prod - 3 * b - routed_in))
    si = shape.shared_expert_intermediate_size
    freed = (4 if trains_experts else 3) * e * t * si - (3 * h * si * grad_elem if trains_experts else 0)
    return larger(3 * e * t * si, e * t * h - freed + routed)


def recompute_held(shape, t, e):
    """A checkpointed Llama4TextMoe block's backward reshapes its experts' output gradient, sum(0)'s expanded view, to
    E t x h (a copy: routed_out.reshape's backward) before the shared expert's backward unpacks a saved tensor and the
    block is recomputed, and holds it through the recomputation (measured on the CPU profiler's timeline)."""
    return e * shape.n_experts * t * shape.hidden_size


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Llama4TextDecoderLayer: input_layernorm (Llama4TextRMSNorm: LLaMA's saves), the attention, residual;
    post_attention_layernorm, Llama4TextMoe or (a dense block) Llama4TextMLP, residual. The MoE block's router
    logits stay alive (`hidden_states, _ = ...`) until the layer returns."""
    r1 = tr.add(x, attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p))
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    if not shape.n_experts:
        prod = tr.silu_times(*_decoder.gate_up(tr, shape, normed, trainable, p), "SwiGLU")
        return tr.add(r1, tr.linear(prod, tr.t * shape.hidden_size, trainable, p.lora_of("down_proj"), "down_proj"))
    out, logits = moe(tr, shape, normed, trainable, p)
    result = tr.add(r1, out)
    tr.use(logits)
    return result


def lora_refusal(shape, modules) -> str:
    """Why the trace does not replay LoRA on `modules` ("" when it does): peft 0.21 wraps Llama4Router (an
    nn.Linear) in a lora.Linear whose forward adds the adapter to what the router returns, a tuple, and fails
    (AttributeError: 'tuple' object has no attribute 'dtype'), so LoRA on the router (and all-linear, which adapts
    it) does not train."""
    if "router" not in modules:
        return ""
    return ("traces LoRA on Llama 4 without the router (peft 0.21's forward fails on Llama4Router, which returns a "
            "tuple: name the targets without router)")

ARCHITECTURE = Architecture(
    model_type="llama4_text", family="llama", title="Llama 4 (text)",
    source="configuration_llama4.py, modeling_llama4.py",
    fields=decoder_fields({
        "attention_bias": ATTENTION_BIAS, **MOE, "num_local_experts": "routed experts",
        "intermediate_size": "one routed expert's and the shared expert's width",
        "intermediate_size_mlp": "a dense block's MLP width",
        "moe_layers": "the mixture-of-experts blocks; the others are dense",
        "interleave_moe_layer_step": "moe_layers when not given (every n-th block a mixture of experts)",
        "attention_chunk_size": "tokens a chunked layer caches (read as a sliding window: KV cache)",
        "layer_types": "per block chunked_attention or full_attention (KV cache)",
        "no_rope_layers": "per layer 1 (rotary, chunked) or 0 (NoPE, full attention) (KV cache)",
        "no_rope_layer_interval": "no_rope_layers when not given (every n-th layer NoPE)",
        "use_qk_norm": "a rotary block's q/k L2 norm, without parameters (its saved tensors: the trace)",
        "attn_temperature_tuning": "a NoPE block's q scaled by position (its saved scales: the trace)",
    }),
    defaults={"head_dim": 128, "num_key_value_heads": 8}, read_options=read_options,
    tensors=partial(_decoder.tensors, mlp=feed_forward_tensors), lora_modules=lora_table,
    lora_order=("experts.gate_up_proj", "experts.down_proj", "router", "gate_proj", "up_proj", "down_proj"),
    not_all_linear=("experts",), tp_plan=TP_PLAN, prefill_phases=prefill_phases,
    trace_block=block, trace_shape=trace_shape, lora_trace_refusal=lora_refusal, moe_backward=moe_backward,
    recompute_held=recompute_held,
    checkpointed_peak_refusal=("with checkpointing and LoRA, held-out CPU steps peaked 0.3-2.6% above memmath's "
                               "prediction (recomputing a block: more than the recomputed Llama4TextMoe block and its "
                               "experts' output gradient, not found); with full finetuning within 0.5% either side"),
)
