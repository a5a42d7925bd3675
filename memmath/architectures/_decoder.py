"""The rotary decoder every LLaMA-like record is made of, once: its tensors (embedding, attention, MLP or mixture of
experts, norms, head), its peft target names and its steps in the forward-pass trace (LlamaDecoderLayer,
modeling_llama.py; the embeddings and the causal LM's head and loss, which GPT-2 shares).

A model type whose block differs composes these pieces in its own module (gemma.py, olmo2.py, gpt_neox.py) and
names its functions in its record; a new MoE variant is a module like _moe.py.
"""

from __future__ import annotations

from ..trace import Tensor, Trace
from ._moe import lora_table as moe_lora_table, prefill_phase as moe_prefill_phase, tensors as moe_tensors
from ._moe import trace as moe_trace
from ._parts import ParamTensor, linear, norm
from ._steps import INT64, Pass, dims, houlsby, kv_cache, merged_copy, smaller

# LlamaDecoderLayer's adapted modules in parameters() order (peft adds lora_A, then lora_B, to each).
MODULE_ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# transformers' LlamaConfig.base_model_tp_plan (configuration_llama.py), which the other decoders copy.
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise",
           "layers.*.mlp.down_proj": "rowwise"}


# ---- tensors ---------------------------------------------------------------------------------------------------
def attention_tensors(m) -> list:
    """q, k, v (or one fused qkv_proj) and o, then the q/k norms: over each head (Qwen3, Gemma 3) or over all heads
    (OLMo 2)."""
    h, a, kv, d = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim
    ab = m.attention_bias
    if m.fused_qkv:
        attention = (linear("self_attn.qkv_proj", "attention", h, (a + 2 * kv) * d, ab)
                     + linear("self_attn.o_proj", "attention", a * d, h, ab))
    else:
        qkv = ab or m.qkv_bias
        attention = (linear("self_attn.q_proj", "attention", h, a * d, qkv)
                     + linear("self_attn.k_proj", "attention", h, kv * d, qkv)
                     + linear("self_attn.v_proj", "attention", h, kv * d, qkv)
                     + linear("self_attn.o_proj", "attention", a * d, h, ab))
    return attention + qk_norm_tensors(m)


def qk_norm_tensors(m) -> list:
    a, kv, d = m.n_heads, m.n_kv_heads, m.head_dim
    if m.qk_norm == "head":
        return norm("self_attn.q_norm", d, m.layer_norm) + norm("self_attn.k_norm", d, m.layer_norm)
    if m.qk_norm == "full":
        return norm("self_attn.q_norm", a * d, m.layer_norm) + norm("self_attn.k_norm", kv * d, m.layer_norm)
    return []


def mlp_tensors(m) -> list:
    """The MLP: a mixture of experts (_moe.py), GPT-NeoX's two GELU matrices, Phi-3's fused gate_up_proj, or
    LLaMA's gate, up and down."""
    h, inner, mb = m.hidden_size, m.intermediate_size, m.mlp_bias
    if m.n_experts:
        return moe_tensors(m)
    if not m.gated_mlp:
        return linear("mlp.dense_h_to_4h", "mlp", h, inner, True) + linear("mlp.dense_4h_to_h", "mlp", inner, h, True)
    if m.fused_gate_up:
        return linear("mlp.gate_up_proj", "mlp", h, 2 * inner, mb) + linear("mlp.down_proj", "mlp", inner, h, mb)
    return (linear("mlp.gate_proj", "mlp", h, inner, mb) + linear("mlp.up_proj", "mlp", h, inner, mb)
            + linear("mlp.down_proj", "mlp", inner, h, mb))


def tensors(m, group: str, *, attention=attention_tensors, mlp=mlp_tensors) -> list:
    """LLaMA (Touvron et al. 2023; transformers LlamaForCausalLM): RMSNorm without bias, SwiGLU MLP, grouped-query
    attention, rotary positions (no parameters), optional untied head. The other rotary decoders differ in the
    options of ModelShape, read from each transformers modeling_<type>.py: Qwen2 q/k/v biases, Qwen3/Gemma 3 q/k
    RMSNorm over head_dim, OLMo 2 q/k RMSNorm over all heads and norms after attention and MLP only, Gemma 2/3 four
    norms per block, Phi-3 fused qkv_proj and gate_up_proj, GPT-NeoX LayerNorm with bias (and its own attention
    names, gpt_neox.py), Mixtral/Qwen-MoE a router and the experts as two 3-D tensors (_moe.py)."""
    h = m.hidden_size
    record = m.architecture
    if group == "embeddings":
        return [ParamTensor(record.embedding, "embeddings", (m.vocab_size, h))]
    if group == "final_norm":
        return norm(record.final_norm_module, h, m.layer_norm)
    if group == "head":
        # transformers keeps lm_head out of 4-bit quantization, so it is not marked linear here.
        return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (m.vocab_size, h))]

    def block_norm(name):
        return norm(name, h, m.layer_norm)

    attn, ffn = attention(m), mlp(m)
    if m.norm_layout == "post":  # OLMo 2: normalize each sublayer's output before the residual add
        return attn + block_norm("post_attention_layernorm") + ffn + block_norm("post_feedforward_layernorm")
    if m.norm_layout == "sandwich":  # Gemma 2/3: a norm before and after each sublayer
        return (block_norm("input_layernorm") + attn + block_norm("post_attention_layernorm")
                + block_norm("pre_feedforward_layernorm") + ffn + block_norm("post_feedforward_layernorm"))
    return block_norm("input_layernorm") + attn + block_norm("post_attention_layernorm") + ffn


def lora_table(m) -> dict:
    """peft's target names in each rotary decoder: fused matrices are adapted once, as a whole."""
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    if m.fused_qkv:
        qkv = ("qkv_proj", h, (a + 2 * kv) * d)
        table = {"q": qkv, "k": qkv, "v": qkv}
    else:
        table = {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d)}
    table["o"] = ("o_proj", a * d, h)
    if m.n_experts:
        table.update(moe_lora_table(m))
        return table
    if m.fused_gate_up:
        table.update(gate=("gate_up_proj", h, 2 * inner), up=("gate_up_proj", h, 2 * inner))
    else:
        table.update(gate=("gate_proj", h, inner), up=("up_proj", h, inner))
    table["down"] = ("down_proj", inner, h)
    return table


def lora_order(m, record) -> tuple:
    """The parameters() order of a block's adapted modules where it is not the order of the targets (a record's
    lora_order: a mixture of experts'), else ()."""
    if not record.lora_order:
        return ()
    attention = ("qkv_proj",) if m.fused_qkv else ("q_proj", "k_proj", "v_proj")
    return attention + ("o_proj",) + record.lora_order


# ---- the forward pass ------------------------------------------------------------------------------------------
def embeddings(tr: Trace, shape, trains: bool, *, dropout, input_grad_hook) -> Tensor:
    """The token embedding (Gemma's scaled by a buffer, GPT-NeoX's followed by emb_dropout); returns the first
    block's input."""
    t, h = tr.t, shape.hidden_size
    record = shape.architecture
    ids = tr.new(t, INT64, batch=True)  # the batch's token ids
    x = tr.embedding(ids, t * h, trains, record.embedding)
    if record.scaled_embedding:  # GemmaTextScaledWordEmbedding: * embed_scale, a buffer (0-d, model dtype)
        x = tr.tmp(t * h, tr.e, x)
        x.grad = trains
    x.grad = x.grad or input_grad_hook
    if record.embedding_dropout:  # GPTNeoXModel.emb_dropout (hidden_dropout)
        return tr.dropout(x, dropout, "embedding")
    return x


def head_and_loss(tr: Trace, shape, x: Tensor, *, final_norm_trains, head_trains, dropout, norm=None):
    """Final norm, head and a causal LM's loss; the loss's own tensors go to the region "loss". norm: a record's own
    final norm step, norm(tr, shape, x, trainable, name) (Cohere 2's LayerNorm without bias)."""
    t, dm = tr.t, dims(shape)
    final_norm = shape.architecture.final_norm
    if norm is not None:
        hidden = norm(tr, shape, x, final_norm_trains, "final norm")
    elif final_norm == "layer":  # GPT-2's ln_f, GPT-NeoX's final_layer_norm
        hidden = tr.layer_norm(x, final_norm_trains, "final norm")
    else:  # OLMo 2's final norm is an Olmo2RMSNorm too (fp32 weight), Gemma's a GemmaRMSNorm (1 + w)
        hidden = tr.rms_norm(x, final_norm_trains, "final norm", weight_fp32=final_norm == "rms_fp32_weight",
                             plus_one=dm["h"] if final_norm == "rms_plus_one" else None)
    logits = tr.linear(hidden, t * dm["V"], head_trains, None, "lm_head")
    if shape.final_softcap and logits.grad:  # Gemma 2/3: logits / cap, tanh (keeps its output), * cap
        scaled = tr.tmp(t * dm["V"], tr.e, logits)
        capped = tr.new(t * dm["V"], tr.e, True)
        tr.use(scaled)
        tr.save(capped, "final logit softcapping tanh output")
        logits = tr.new(t * dm["V"], tr.e, True)
        tr.use(capped)
    tr.region = "loss"
    if logits.grad:  # ForCausalLMLoss: logits.float(), cross_entropy over the vocabulary
        logits32 = logits if tr.e == 4 else tr.tmp(t * dm["V"], 4, logits)
        log_softmax = tr.new(t * dm["V"], 4)
        tr.use(logits32, logits)  # the caller still holds the logits while the loss is computed
        tr.save(log_softmax, "log-softmax output (fp32)")
        # pad(labels, (0, 1))[..., 1:].contiguous(): at b = 1 the slice is already contiguous and keeps
        # the padded storage, one label longer.
        tr.save(tr.new(t + (tr.b == 1), INT64), "shifted labels (int64)")
        tr.save(tr.new(1, 4), "loss total weight")


def qkv(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass, *, fused=False):
    """q, k and v from the normalized input: three projections, or (fused: Phi-3) slices of one qkv_proj output,
    views of one storage."""
    t, dm = tr.t, dims(shape)
    a, kv, d = dm["a"], dm["k"], dm["d"]
    if fused:
        whole = tr.linear(x, t * (a + 2 * kv) * d, trainable, p.lora_of("qkv_proj"), "qkv_proj")
        return tuple(Tensor(t * n * d, whole.elem, whole.grad, whole.storage) for n in (a, kv, kv))
    return (tr.linear(x, t * a * d, trainable, p.lora_of("q_proj"), "q_proj"),
            tr.linear(x, t * kv * d, trainable, p.lora_of("k_proj"), "k_proj"),
            tr.linear(x, t * kv * d, trainable, p.lora_of("v_proj"), "v_proj"))


def attention(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass, *, fused=False) -> Tensor:
    """LlamaAttention on the normalized input, through o_proj (and a Houlsby adapter): q, k, v (Qwen3: q/k RMSNorm
    over each head before the rotation), rotary, the DynamicCache, the attention kernel. fused: Phi-3's qkv_proj."""
    t, dm = tr.t, dims(shape)
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    q, k, v = qkv(tr, shape, x, trainable, p, fused=fused)
    if shape.qk_norm == "head":  # Qwen3: Qwen3RMSNorm over each head's d values, before the rotation
        q = tr.rms_norm(q, trainable, "q_norm", rows=t * a)
        k = tr.rms_norm(k, trainable, "k_norm", rows=t * kv)
    q, k = tr.rotary(q, p.tables), tr.rotary(k, p.tables)
    if p.cache:  # cache.update(key_states, value_states) (modeling_llama.py:252; phi3:233): Phi-3's v no slice
        k, v = kv_cache(tr, k, v)
    # Phi-3 without the cache, one key/value head per query head: repeat_kv returns v itself (a view of
    # the qkv output), which eager probs @ v keeps whole at b = 1 (found measuring the use_cache cases).
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", v_view=fused and not p.cache and kv == a, kv_contiguous=p.cache)
    if fused and p.kind == "flash":
        # Phi-3's rotary ends in torch.cat, so q is contiguous as (b, a, s, d) and so is the SDPA output:
        # transpose(1, 2).contiguous() copies it for o_proj (LLaMA's q keeps q_proj's (b, s, a, d) layout,
        # and the copy is a no-op there). Found when a held-out Phi-3 case measured 16,384 B per block more.
        ctx = merged_copy(tr, ctx)
    return houlsby(tr, tr.linear(ctx, t * h, trainable, p.lora_of("o_proj"), "o_proj"), p, "attention")


def gate_up(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass, *, fused=False):
    """gate and up from the normalized input: two projections, or (fused: Phi-3) one gate_up_proj chunked into two
    views of one storage."""
    t, inner = tr.t, shape.intermediate_size
    if fused:
        whole = tr.linear(x, t * 2 * inner, trainable, p.lora_of("gate_up_proj"), "gate_up_proj")
        return tuple(Tensor(t * inner, whole.elem, whole.grad, whole.storage) for _ in range(2))
    return (tr.linear(x, t * inner, trainable, p.lora_of("gate_proj"), "gate_proj"),
            tr.linear(x, t * inner, trainable, p.lora_of("up_proj"), "up_proj"))


def mlp(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass, *, fused=False) -> Tensor:
    """LlamaMLP on the normalized input, through down_proj (and a Houlsby adapter): silu(gate) * up, gate and up
    two projections or (fused: Phi-3) one gate_up_proj chunked into two views; the sparse MoE block (_moe.py)
    where the shape has experts."""
    t, h = tr.t, shape.hidden_size
    if shape.n_experts:  # Mixtral, Qwen2-MoE, Qwen3-MoE: the sparse MoE block instead of the MLP
        return moe_trace(tr, shape, x, trainable, p.lora_of)
    prod = tr.silu_times(*gate_up(tr, shape, x, trainable, p, fused=fused), "SwiGLU")
    return houlsby(tr, tr.linear(prod, t * h, trainable, p.lora_of("down_proj"), "down_proj"), p, "MLP")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """LlamaDecoderLayer (modeling_llama.py) and its clones: Mistral, Qwen2 (biases change no saved tensor), Qwen3
    (q/k RMSNorm), Mixtral and Qwen-MoE (the sparse MoE block for the MLP). Returns the block's output."""
    r1 = tr.add(x, attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p))
    return tr.add(r1, mlp(tr, shape, tr.rms_norm(r1, trainable, "post_attention_layernorm"), trainable, p))


# ---- serving: the KV cache and a prefill's working set (memmath/inference.py asks these) -----------------------
def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Values the cache holds: 2 (K and V) x kv_heads x head_dim x batch x tokens, summed over layers. A full-attention
    layer holds every token; a sliding one (DynamicSlidingWindowLayer, cache_utils.py) min(context, window) once
    decoding, the whole prompt right after the prefill (see inference.kv_cache_bytes)."""
    tokens = 0
    for window in shape.attention_windows:
        tokens = tokens + (context_len if window is None or after_prefill else smaller(context_len, window))
    return 2 * shape.n_kv_heads * shape.head_dim * tokens * batch_size


def unshared_kv_cache_values(shape, *, context_len, batch_size, after_prefill, shared):
    """kv_cache_values of a model whose layouts differ in kv heads and head size and whose `shared(layout)` blocks read
    another block's keys and values (their cache layer a dummy one: Gemma 3n, Gemma 4): every other block's, each at
    its own layout's widths, a sliding block's window and a full block's every token."""
    values = 0
    windows = shape.attention_windows
    for layout, blocks in shape.layouts():
        if shared(layout):
            continue
        for i in blocks:
            window = windows[i]
            tokens = context_len if window is None or after_prefill else smaller(context_len, window)
            values = values + 2 * layout.n_kv_heads * layout.head_dim * tokens * batch_size
    return values


def rotary_prefill(shape, s, b, e, eager):
    """(outside, attention phase, MLP phase) bytes of LlamaForCausalLM's prefill (validation/
    inference_working_set.py): token embeddings and the rotary cos and sin shared by the batch (and eager's causal
    mask) outside; the block input, its normed copy, q and the attention output (eager: k and v repeated to every
    head, the scores and the fp32 softmax with its copy); SwiGLU's act(gate), up and their product."""
    h, a, d = shape.hidden_size, shape.n_heads, shape.head_dim
    inner = shape.intermediate_size or 4 * h
    sbe = s * b * e
    mask = e * b * s * s if eager else 0  # eager's causal mask, built once and held all pass
    outside = sbe * h + 2 * e * s * d + mask  # token embeddings; rotary cos and sin shared by the batch
    if eager:
        repeated = 2 * a * d if shape.n_kv_heads < a else 0  # repeat_kv copies k and v to every head
        fp32_copy = 4 if e != 4 else 0  # softmax(dtype=float32) copies a 16-bit input first
        attn = sbe * (2 * h + a * d + repeated) + (e + 4 + fp32_copy) * a * b * s * s
    else:
        attn = sbe * (2 * h + 2 * a * d)  # q and the attention output
    mlp = sbe * (3 * h + 3 * inner)  # SwiGLU: act(gate), up, their product
    return outside, attn, mlp + held_probabilities(shape, s, b, e, eager)


def held_probabilities(shape, s, b, e, eager):
    """Bytes of eager attention's probabilities (heads x b x s^2 in the model's dtype) that the decoder layer's
    `hidden_states, _ = self.self_attn(...)` (LlamaDecoderLayer and its kin) holds through the block's MLP phase; 0
    under SDPA, which returns none (tests/test_families_dense.py measures both)."""
    return e * shape.n_heads * b * s * s if eager else 0


def prefill_phases(shape, s, b, e, eager, *, base=rotary_prefill):
    """(outside, attention phase, MLP phase) bytes of a rotary decoder's prefill: `base`'s, plus the sliding-window
    masks its record builds and the MoE block's phase (_moe.prefill_phase) in place of the MLP's."""
    outside, attn, mlp = base(shape, s, b, e, eager)
    record = shape.architecture
    if eager and record.eager_sliding_mask:
        outside = outside + e * b * s * s  # the sliding-window mask beside the causal one (both always built)
    if not eager and record.sdpa_sliding_mask:
        # Qwen2MoeConfig saves sliding_window 0 without use_sliding_window: its sliding mask is never
        # skipped under SDPA, a (1, 1, s, s) bool tensor (measured).
        outside = outside + s * s
    if shape.n_experts:
        mlp = moe_prefill_phase(shape, s, b, e) + held_probabilities(shape, s, b, e, eager)
    return outside, attn, mlp
