"""GPT-2 (transformers 5.24 configuration_gpt2.py, modeling_gpt2.py: GPT2LMHeadModel)."""

from ..trace import Tensor, Trace
from ._parts import ParamTensor, linear, norm
from ._steps import INT64, Pass, dims, kv_cache
from .record import Architecture

# GPT2Block's adapted modules in parameters() order
MODULE_ORDER = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
# The tensor-parallel split (GPT2Config has no base_model_tp_plan; Megatron-LM's column- and row-parallel layers);
# Conv1D stores its weight (in, out), the transpose of nn.Linear's
TP_PLAN = {"h.*.attn.c_attn": "colwise", "h.*.attn.c_proj": "rowwise", "h.*.mlp.c_fc": "colwise",
           "h.*.mlp.c_proj": "rowwise"}
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def tensors(m, group: str) -> list:
    """GPT-2 (Radford et al. 2019; transformers GPT2LMHeadModel): learned positions, LayerNorm with bias, fused qkv,
    4h MLP; per block 12h^2 + 13h parameters when the MLP is 4h wide."""
    h, inner, vocab = m.hidden_size, m.intermediate_size, m.vocab_size
    if group == "embeddings":
        return [ParamTensor("wte", "embeddings", (vocab, h)), ParamTensor("wpe", "embeddings", (m.max_positions, h))]
    if group == "layer":
        return (norm("ln_1", h, True) + linear("attn.c_attn", "attention", h, 3 * h, True)
                + linear("attn.c_proj", "attention", h, h, True) + norm("ln_2", h, True)
                + linear("mlp.c_fc", "mlp", h, inner, True) + linear("mlp.c_proj", "mlp", inner, h, True))
    if group == "final_norm":
        return norm("ln_f", h, True)
    return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (vocab, h), linear=False)]


def embeddings(tr: Trace, shape, trains: bool, *, dropout, input_grad_hook) -> Tensor:
    """wte + wpe (position ids made per sequence), then the embedding dropout."""
    t, s, h = tr.t, tr.s, shape.hidden_size
    ids = tr.new(t, INT64, batch=True)  # the batch's token ids
    x = tr.embedding(ids, t * h, trains, "wte")
    x.grad = x.grad or input_grad_hook
    x = tr.add(x, tr.embedding(tr.new(s, INT64), t * h, trains, "wpe position"))
    return tr.dropout(x, dropout, "embedding")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GPT2Block: ln_1, c_attn (fused q, k, v as Conv1D), attention, c_proj, residual dropout; ln_2, c_fc, the
    activation, c_proj, residual dropout."""
    dm, t, e = dims(shape), tr.t, tr.e
    h, a, d, inner = dm["h"], dm["a"], dm["d"], dm["I"]
    lora, dropout = p.lora_of, p.dropout
    h1 = tr.layer_norm(x, trainable, "ln_1")
    qkv = tr.linear(h1, 3 * t * h, trainable, lora("attn.c_attn"), "c_attn")
    q = k = v = qkv
    if p.cache:  # curr_cache.update (modeling_gpt2.py:198) copies k and v; q stays a view of c_attn's output
        k, v = kv_cache(tr, *(Tensor(t * h, e, qkv.grad, qkv.storage) for _ in range(2)))
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=dropout, softmax_fp32=False,
                       name="attention", q_view=p.cache, kv_contiguous=p.cache)
    out = tr.dropout(tr.linear(ctx, t * h, trainable, lora("attn.c_proj"), "attn.c_proj"), dropout, "residual")
    r1 = tr.add(out, x)
    h2 = tr.layer_norm(r1, trainable, "ln_2")
    fc = tr.linear(h2, t * inner, trainable, lora("mlp.c_fc"), "mlp.c_fc")
    # gelu_new is written in plain ops; gelu_pytorch_tanh and gelu are one F.gelu, which keeps its input.
    act = tr.gelu_new(fc, "gelu_new") if shape.hidden_act in ("", "gelu_new") else tr.gelu(fc, shape.hidden_act)
    out = tr.dropout(tr.linear(act, t * h, trainable, lora("mlp.c_proj"), "mlp.c_proj"), dropout, "MLP")
    return tr.add(out, r1)


def prefill_phases(shape, s, b, e, eager):
    """(outside, attention phase, MLP phase) bytes of GPT2LMHeadModel's prefill (validation/
    inference_working_set.py): token embeddings per sequence and positions shared by the batch (and eager's causal
    mask) outside; the block input, its normed copy and the fused qkv output (eager: scores and scaled scores, else
    the attention output); gelu_new's input, 0.5 * x and two tanh-formula temporaries, and eager's returned
    probabilities, alive through the MLP."""
    h, a, d = shape.hidden_size, shape.n_heads, shape.head_dim
    inner = shape.intermediate_size or 4 * h
    sbe = s * b * e
    mask = e * b * s * s if eager else 0  # eager's causal mask, built once and held all pass
    outside = sbe * h + e * s * h + mask  # token embeddings per sequence, positions shared by the batch
    attn = sbe * 5 * h + (2 * e * a * b * s * s if eager else sbe * a * d)  # block input, normed, qkv
    mlp = sbe * (4 * h + 4 * inner) + (e * a * b * s * s if eager else 0)
    return outside, attn, mlp


def lora_modules(m):
    """peft's target names in a GPT-2 block: q, k and v are one fused c_attn, adapted once."""
    h, inner = m.hidden_size, m.intermediate_size
    qkv = ("attn.c_attn", h, 3 * h)
    return {"q": qkv, "k": qkv, "v": qkv, "o": ("attn.c_proj", h, h), "up": ("mlp.c_fc", h, inner),
            "down": ("mlp.c_proj", inner, h)}


ARCHITECTURE = Architecture(
    model_type="gpt2", family="gpt2", title="GPT-2", source="configuration_gpt2.py, modeling_gpt2.py",
    fields={"n_layer": "blocks", "n_embd": "width", "n_head": "heads", "n_inner": "MLP width (None: 4h)",
            "n_positions": "learned position rows", "vocab_size": "embedding rows",
            "tie_word_embeddings": "head shares wte",
            "activation_function": "gelu_new, gelu_pytorch_tanh or gelu (saved activations)",
            "attn_pdrop": "dropout_p", "resid_pdrop": "dropout_p", "embd_pdrop": "dropout_p",
            "add_cross_attention": "refused when true (cross-attention blocks)",
            "scale_attn_by_inverse_layer_idx": "refused when true (an extra op on the scores)",
            "reorder_and_upcast_attn": "refused when true (fp32 attention scores)",
            "torch_dtype": "checked: float32, bfloat16 or float16 (the step's precision is an argument)",
            "dtype": "as torch_dtype", "quantization_config": "refused: a pre-quantized checkpoint is not modelled",
            "use_cache": "saved activations: true runs k and v through a DynamicCache when training without "
                         "checkpointing (absent: read as false)"},
    activation_field="activation_function", activations=("gelu_new", "gelu_pytorch_tanh", "gelu"),
    dropout_fields={"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    refused_flags=("add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"),
    embedding="wte", final_norm="layer", amp_measured=True,
    tensors=tensors, trace_embeddings=embeddings, trace_block=block, lora_modules=lora_modules,
    module_order=MODULE_ORDER, tp_plan=TP_PLAN, conv1d=CONV1D, traced_activations=(),
    mask_is_checkpoint_input=True, prefill_phases=prefill_phases, rotary=False, norms_last=False, grouped_query=False,
    mlp_backward_widths=3,  # gelu_new, a chain of plain ops, holds three
)
