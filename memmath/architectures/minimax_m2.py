"""MiniMax-M2 (transformers 5.24 configuration_minimax_m2.py, modeling_minimax_m2.py): one block layout.

- MiniMaxM2Attention: grouped-query attention without biases, q/k RMSNorm over all heads at once (q_norm's weight is
  num_attention_heads x head_dim values, k_norm's num_key_value_heads x head_dim, applied to the projections before
  they are split into heads, as OLMo 2's), and rotary positions on the first partial_rotary_factor of each head
  (rope_parameters; MiniMaxM2Config.convert_rope_params_to_dict turns the released checkpoints' legacy rotary_dim
  into that factor; 1.0 without either), whose apply_rotary_pos_emb ends in torch.cat. head_dim defaults to 128,
  not hidden_size / heads.
- MiniMaxM2SparseMoeBlock: a sigmoid router (MiniMaxM2TopKRouter: an E x h weight in the model's dtype; no
  _keep_in_fp32_modules), the selection biased by e_score_correction_bias (a buffer of E values on the MoE block,
  not among the parameters), the top-k weights always renormalized and kept in fp32; the routed experts as two
  3-D Parameters of intermediate_size (MiniMaxM2Experts); no shared expert, no router groups, no scaling factor.

The shape: n_experts = num_local_experts, expert_intermediate_size = intermediate_size (the config has no dense
width: intermediate_size is one expert's), qk_norm "full", rotary_dim = int(head_dim x partial_rotary_factor).

Not modelled: the multi-token-prediction modules the released checkpoints name (use_mtp, num_mtp_modules), which
MiniMaxM2ForCausalLM does not build; router_jitter_noise above 0 (refused: an in-place product on the MoE input).

Its trace (block: attention with OLMo 2's full q/k norms and GLM-4.5's partial rotary, the router, _moe's routed
experts) was written from the modeling file and then measured on the CPU (tests/test_families_minimax.py), held out:
what autograd holds when the forward returns equals the trace to the byte in two steps of three tiny models (full and
LoRA, fp32 and bf16, SDPA and eager; LoRA on the router, the experts and all-linear too), the steady step's peak
within 0.06%, checkpointed steps within 5% but for top-3 LoRA (peak.py prices the recomputed MoE block's gradients
at t x intermediate_size); a prefill's working set (prefill_phases) equals the measured one to the byte."""

from __future__ import annotations

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._steps import INT64, Pass, dims, kv_cache, larger, merged_copy
from .gpt_neox import partial_rotary
from .record import MOE, Architecture, decoder_fields, refuse_true

# MiniMaxM2Config.base_model_tp_plan: the attention (colwise_gather_output / rowwise_split_input split the weights as
# colwise / rowwise); the routed experts split by ep and their widths by tp (memmath/parallel.py), as the other MoEs
TP_PLAN = dict(_moe.TP_PLAN)

MINIMAX_FIELDS = {
    **MOE, "num_local_experts": "routed experts", "intermediate_size": "one routed expert's width",
    "head_dim": "head size (default 128, not h / heads)",
    "rope_parameters": "partial_rotary_factor: rotated share of each head (saved activations, no parameters)",
    "partial_rotary_factor": "as the top-level field",
    "rotary_dim": "the released checkpoints' rotated dims of a head (read as partial_rotary_factor = rotary_dim / "
                  "head_dim, as MiniMaxM2Config does)",
    "router_jitter_noise": "0 only",
}
# MiniMaxM2Config's defaults (those of MiniMax-M2) that the reader reads here
DEFAULTS = {"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
            "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "num_experts_per_tok": 8,
            "num_local_experts": 256}


def _rotary_dim(config, get) -> int:
    """int(head_dim x partial_rotary_factor), as MiniMaxM2RotaryEmbedding.compute_default_rope_parameters: the factor
    from rope_parameters, else the top-level partial_rotary_factor, else rotary_dim / head_dim
    (convert_rope_params_to_dict), else 1.0."""
    head_dim = get("head_dim")
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if factor is None and config.get("rotary_dim") is not None:
        if get("rotary_dim") > head_dim:
            raise ValueError(f"config field 'rotary_dim' ({config['rotary_dim']}) must be at most head_dim "
                             f"({head_dim})")
        factor = get("rotary_dim") / head_dim
    factor = 1.0 if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config field 'partial_rotary_factor' must be a fraction in (0, 1]; got "
                         f"{validate.describe(factor)}")
    rotary = int(head_dim * factor)
    if rotary < 2 or rotary % 2:
        raise ValueError(f"config field 'partial_rotary_factor' ({factor}) rotates {rotary} of the {head_dim} dims "
                         "of a head; memmath models an even number, at least 2 (rotate_half splits it in two)")
    return rotary


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    jitter = get.probability("router_jitter_noise", 0.0)
    if jitter:  # MiniMaxM2SparseMoeBlock: hidden_states *= uniform noise, in place, when training
        raise ValueError(f"config field 'router_jitter_noise' is {jitter}; memmath models 0 only")
    experts = get("num_local_experts")
    chosen = get("num_experts_per_tok")
    if chosen > experts:
        raise ValueError(f"config field 'num_experts_per_tok' ({chosen}) must be at most num_local_experts ({experts})")
    return {"qk_norm": "full", "rotary_dim": _rotary_dim(config, get), "n_experts": experts,
            "experts_per_tok": chosen, "expert_intermediate_size": get("intermediate_size"), "norm_topk_prob": True}


# ---- the forward pass ------------------------------------------------------------------------------------------
def attention(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """MiniMaxM2Attention on the normalized input, in its order: q_norm(q_proj(x)), k_norm(k_proj(x)) (RMSNorm over
    all heads: one rsqrt a token), v_proj(x); apply_rotary_pos_emb on the first rotary_dim of each head, whose
    torch.cat makes q and k new contiguous (b, heads, s, d) tensors (GLM-4.5's and GPT-NeoX's partial rotary); the
    DynamicCache, the attention kernel (k from the cat is contiguous: eager's k^T a view), o_proj. q contiguous as
    (b, a, s, d) makes SDPA's output so too: reshape(...).contiguous() copies it for o_proj."""
    t, dm = tr.t, dims(shape)
    a, kv, d, rd = dm["a"], dm["k"], dm["d"], dm["rd"]
    q = tr.rms_norm(tr.linear(x, t * a * d, trainable, p.lora_of("q_proj"), "q_proj"), trainable, "q_norm")
    k = tr.rms_norm(tr.linear(x, t * kv * d, trainable, p.lora_of("k_proj"), "k_proj"), trainable, "k_norm")
    v = tr.linear(x, t * kv * d, trainable, p.lora_of("v_proj"), "v_proj")
    q, k = partial_rotary(tr, q, p.tables, t * a * rd), partial_rotary(tr, k, p.tables, t * kv * rd)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=True)
    if p.kind == "flash":
        ctx = merged_copy(tr, ctx)
    return tr.linear(ctx, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def router(tr: Trace, shape, x: Tensor, trainable: bool, lora) -> Tensor:
    """MiniMaxM2TopKRouter.forward on the normalized input x (t x h): returns the top-k routing weights (t x k, fp32).

    F.linear(x, weight) in the model's dtype keeps x when the weight trains (under peft's ParamWrapper: x, and
    W + BA when x needs a gradient, as _moe.trace); sigmoid(logits.float()) keeps its fp32 output (t x E), which the
    gather of the chosen scores reads; + e_score_correction_bias and topk(sorted=False) choose by index (temporaries:
    t x E fp32, the top-k values), gather keeps the top-k indices (int64); dividing the weights by their sum in
    place keeps the sum and autograd's copy of the weights before the division (Mixtral's renormalizing)."""
    t, e = tr.t, tr.e
    h, n_exp, rows = shape.hidden_size, shape.n_experts, tr.t * shape.experts_per_tok
    logits = _moe.router_logits(tr, x, h, n_exp, trainable, lora("gate.weight"))
    grad = logits.grad
    logits32 = logits if e == 4 else tr.tmp(t * n_exp, 4, logits)  # router_logits.float()
    scores = tr.new(t * n_exp, 4, grad)  # sigmoid
    tr.use(logits32)
    if grad:
        tr.save(scores, "router sigmoid output (fp32)")
    choice = tr.tmp(t * n_exp, 4, scores)  # + e_score_correction_bias
    indices = tr.new(rows, INT64)  # topk(...)[1]
    tr.tmp(rows, 4, choice)  # its values, dropped at once
    weights = tr.new(rows, 4, grad)  # scores.gather(1, top_k_index)
    tr.use(scores, indices)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    total = tr.new(t, 4, grad)  # top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True), in place
    before = tr.new(rows, 4)  # autograd's copy of the divided tensor before the in-place division
    tr.use(weights)
    if grad:
        tr.save(total, "router top-k sum (fp32)")
        tr.save(before, "router top-k weights before the in-place division (fp32)")
    return weights


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """MiniMaxM2DecoderLayer: input_layernorm, attention, residual; post_attention_layernorm, the router and the
    routed experts (_moe.routed_experts: transformers 5.24's default grouped_mm, fp32 routing weights), residual."""
    r1 = tr.add(x, attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p))
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    values = router(tr, shape, normed, trainable, p.lora_of)
    return tr.add(r1, _moe.routed_experts(tr, shape, normed, values, trainable, p.lora_of))


# ---- serving: a prefill's working set (memmath/inference.py asks this) ---------------------------------------------
def attention_moments(shape, e):
    """Bytes a token holds at the widest moment before the attention kernel, beyond the block input and its normed
    copy (2h), with the layer's k and v counted against the cache that then holds them (the working set is the peak
    less the cache): MiniMaxM2RMSNorm over all of q (its q_proj output, an fp32 copy in a 16-bit model and the
    squares; one variance and rsqrt a token) before k and v are projected, then over k beside the normed q before
    v is; then apply_rotary_pos_emb's temporaries (three rotary_dim-wide tensors a head) while rotating q, then k,
    and its two torch.cat (GLM-4.5's moments: architectures/glm4_moe.py)."""
    a, kv, d, rd = shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.rotary_dim
    copy = 4 if e != 4 else 0
    moments = [e * a * d + (copy + 4) * a * d + 8 - 2 * e * kv * d,
               e * a * d + (copy + 4) * kv * d + 8 - e * kv * d,
               e * (a * d + 3 * a * rd), e * (a * d + a * rd + 3 * kv * rd), e * (2 * a * d + a * rd + kv * rd),
               e * (2 * a * d + kv * rd + kv * d)]
    return 2 * e * shape.hidden_size + max(moments)


def prefill_phases(shape, s, b, e, eager):
    """(outside, attention phase, MLP phase) bytes of MiniMaxM2ForCausalLM's prefill (validation/
    inference_working_set.py's LiveBytes): LLaMA's phases (_decoder.rotary_prefill) with the rotary cos and sin
    rotary_dim wide, the token ids (int64, b x s) and position ids (int64, s) outside; in the attention phase SDPA's
    output copied by reshape(...).contiguous() (q from torch.cat), eager's repeat_kv a view for one key/value head,
    and the moments before the kernel (attention_moments); the MoE block's phase (_moe.prefill_phase: logits in the
    model's dtype, routing weights in fp32, no shared expert) and, with eager attention, the attention probabilities
    (e x heads x b x s^2) the decoder layer holds in `_` through it (found on a held-out
    prefill whose peak is the experts' unsort: 131,072 B more at b 2, s 64, 8 heads)."""
    outside, attn, mlp = _decoder.rotary_prefill(shape, s, b, e, eager)
    outside = outside - 2 * e * s * (shape.head_dim - shape.rotary_dim) + 8 * s * b + 8 * s
    if not eager:  # q from torch.cat makes the SDPA output contiguous as (b, a, s, d): the reshape copies it
        attn = attn + s * b * e * shape.n_heads * shape.head_dim
    elif shape.n_kv_heads == 1 < shape.n_heads:  # repeat_kv of one key/value head is a view: no copies to every head
        attn = attn - s * b * e * 2 * shape.n_heads * shape.head_dim
    attn = larger(attn, s * b * attention_moments(shape, e))
    mlp = _moe.prefill_phase(shape, s, b, e) + _decoder.held_probabilities(shape, s, b, e, eager)
    return outside, attn, mlp


ARCHITECTURE = Architecture(
    model_type="minimax_m2", family="llama", title="MiniMax-M2",
    source="configuration_minimax_m2.py, modeling_minimax_m2.py",
    fields=decoder_fields(MINIMAX_FIELDS),
    defaults=DEFAULTS, read_options=read_options,
    # MiniMaxM2SparseMoeBlock registers gate, then experts (peft 0.21 on the meta device: the router's adapter, then
    # gate_up_proj's and down_proj's)
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj"),
    tp_plan=TP_PLAN, trace_block=block, routing_weights_fp32=True, prefill_phases=prefill_phases,
    # measured: tests/test_families_minimax.py's held-out checkpointed steps (full and LoRA, fp32 and bf16)
    checkpointed_peak_refusal=("with checkpointing, a held-out top-3 LoRA step in bf16 peaked 8.3% above memmath's "
                               "prediction (its MoE block's recomputed backward holds more than memmath's moments "
                               "price; fp32 and full finetuning came within 3%)"),
)
