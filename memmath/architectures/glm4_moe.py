"""GLM-4.5 and GLM-4.5-Air (transformers 5.24 configuration_glm4_moe.py, modeling_glm4_moe.py):

- Glm4MoeAttention: grouped-query attention with biases on q, k and v (attention_bias; o_proj has none), optional
  q/k RMSNorm over each head (use_qk_norm), and rotary positions on the first partial_rotary_factor of each head
  (0.5 by default: Glm4MoeConfig.__post_init__), whose apply_rotary_pos_emb ends in torch.cat;
- Glm4MoeMoE: the routed experts as two 3-D Parameters, a sigmoid router (Glm4MoeTopkRouter: an E x h fp32 weight and
  the fp32 buffer e_score_correction_bias, group-limited top-k over n_group groups, renormalized when norm_topk_prob,
  times routed_scaling_factor) and the shared experts, one SwiGLU MLP of n_shared_experts x moe_intermediate_size
  (_moe.shared_experts_tensors);
- dense SwiGLU MLPs of intermediate_size in the first first_k_dense_replace blocks (Glm4MoeDecoderLayer).

The MLP follows the shape's own fields: n_experts 0 is a dense block (gate, up, down at intermediate_size),
n_experts > 0 a MoE block (n_experts, experts_per_tok, expert_intermediate_size = moe_intermediate_size,
shared_expert_intermediate_size = n_shared_experts x moe_intermediate_size). A dense and a MoE block differ in those
four fields only: the first first_k_dense_replace blocks are a second block layout (ModelShape.block_layouts).

A load in bf16 or fp16 keeps the router weight in fp32 (Glm4MoePreTrainedModel._keep_in_fp32_modules_strict:
fp32_modules), so its weights, gradients and states are 4 B a value. Not modelled: the multi-token-prediction
blocks (num_nextn_predict_layers), which checkpoints hold but Glm4MoeForCausalLM does not build
(_keys_to_ignore_on_load_unexpected).

Its trace (block: attention, router, moe, dense_mlp) is measured on the CPU (tests/test_families_glm.py): two steps
of tiny models of both layouts, full and LoRA, fp32 and bf16, SDPA and eager; what autograd holds when the forward
returns equals the trace to the byte, written against one MoE and one dense config and held out on three more (other
widths, router groups, no renormalizing, two shared experts, a quarter of each head rotated, the training
DynamicCache, no GQA), and LoRA on the router, the experts and all-linear held out too. The steady step's peak is
within 1%; a prefill's working set (prefill_phases) equals the measured one to the byte; checkpointed steps within
5% where the MoE shape's unused dense intermediate_size is not much wider than the experts' (peak.py prices the
recomputed block's MLP gradients at intermediate_size)."""

from __future__ import annotations

from functools import partial

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._refused import TRACED
from ._steps import INT64, Pass, dims, kv_cache, larger, merged_copy
from .gpt_neox import partial_rotary
from .record import MOE, Architecture, decoder_fields, refuse_true

# Glm4MoeConfig.base_model_tp_plan (configuration_glm4_moe.py): the attention, the shared experts and a dense block's
# MLP; the routed experts split by ep and their widths by tp (memmath/parallel.py), as the other MoE records
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.shared_experts.gate_proj": "colwise", "layers.*.mlp.shared_experts.up_proj": "colwise",
           "layers.*.mlp.shared_experts.down_proj": "rowwise", "layers.*.mlp.gate_proj": "colwise",
           "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}

GLM_FIELDS = {
    "attention_bias": "biases on q, k and v (o_proj has none)",
    "use_qk_norm": "q/k RMSNorm over each head",
    "partial_rotary_factor": "rotated share of each head (default 0.5; saved activations, no parameters)",
    "rope_parameters": "partial_rotary_factor as the top-level field",
    "intermediate_size": "a dense block's MLP width",
    "first_k_dense_replace": "blocks with a dense MLP before the MoE blocks (a second block layout)",
    **MOE, "n_routed_experts": "routed experts", "moe_intermediate_size": "one routed expert's width",
    "n_shared_experts": "the shared experts' width in moe_intermediate_size",
    "norm_topk_prob": "the top-k routing weights renormalized (saved activations)",
    "n_group": "router groups (a divisor of n_routed_experts; temporaries of the router only)",
    "topk_group": "groups a token's experts come from (at most n_group; temporaries of the router only)",
    "routed_scaling_factor": "a factor on the routing weights (one product, no memory of its own)",
    "num_nextn_predict_layers": "multi-token-prediction blocks: in the checkpoint, not built by "
                                "Glm4MoeForCausalLM (no memory)",
}
TRACED_HINT = TRACED
# Glm4MoeConfig's defaults (those of GLM-4.5-Air) that the reader reads here
DEFAULTS = {"num_key_value_heads": 8, "n_routed_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1408,
            "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}


def _rotary_dim(config, get, default=0.5) -> int:
    """int(head_dim x partial_rotary_factor), as Glm4MoeRotaryEmbedding.compute_default_rope_parameters: the factor
    from rope_parameters, else the top-level field, else the config class's (`default`: Glm4MoeConfig's 0.5); head_dim
    from the config, else h / a."""
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", default))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config field 'partial_rotary_factor' must be a fraction in (0, 1]; got "
                         f"{validate.describe(factor)}")
    head_dim = get("head_dim", None) or get("hidden_size") // get("num_attention_heads")
    rotary = int(head_dim * factor)
    if rotary < 2:
        raise ValueError(f"config field 'partial_rotary_factor' ({factor}) rotates {rotary} of the {head_dim} dims "
                         "of a head; memmath models at least 2")
    return rotary


# What turns a MoE block's shape into a dense block's (Glm4MoeMLP at intermediate_size): the four fields in which the
# two layouts differ, for a shape that marks its first first_k_dense_replace blocks by field overrides.
DENSE_BLOCK = {"n_experts": 0, "experts_per_tok": 0, "expert_intermediate_size": None,
               "shared_expert_intermediate_size": 0}


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    layers = get("num_hidden_layers")
    options = {"qkv_bias": get.flag("attention_bias", False), "attention_bias": False,
               "qk_norm": "head" if get.flag("use_qk_norm", False) else "",
               "rotary_dim": _rotary_dim(config, get), "norm_topk_prob": get.flag("norm_topk_prob", True)}
    dense = get("first_k_dense_replace", low=0)  # Glm4MoeDecoderLayer: a dense MLP in the blocks before it
    if dense >= layers:
        return options
    experts, groups, chosen = get("n_routed_experts"), get("n_group"), get("topk_group")
    if experts % groups or experts // groups < 2:
        raise ValueError(f"config field 'n_group' ({groups}) must divide n_routed_experts ({experts}) into groups of "
                         "at least 2 (Glm4MoeTopkRouter sums each group's top two scores)")
    if chosen > groups:
        raise ValueError(f"config field 'topk_group' ({chosen}) must be at most n_group ({groups})")
    width = get("moe_intermediate_size")
    options.update(n_experts=experts, experts_per_tok=get("num_experts_per_tok"), expert_intermediate_size=width,
                   shared_expert_intermediate_size=get("n_shared_experts") * width)
    if dense:
        options["block_layouts"] = ((tuple(range(dense)), tuple(DENSE_BLOCK.items())),)
    return options


# ---- tensors and peft's names ------------------------------------------------------------------------------------
def mlp_tensors(m) -> list:
    """A MoE block's Glm4MoeMoE (experts, gate, shared_experts) where the shape has experts, else Glm4MoeMLP."""
    if m.n_experts:
        return _moe.shared_experts_tensors(m.hidden_size, m.n_experts, m.expert_intermediate_size,
                                           m.shared_expert_intermediate_size)
    return _decoder.mlp_tensors(m)


def lora_table(m) -> dict:
    """peft 0.21's names on glm4_moe, measured on the meta device (tests/test_families_glm.py). peft converts glm4_moe
    as qwen2_moe (utils/transformers_weight_conversion.py): target_modules gate_proj, up_proj and down_proj become
    target_parameters on the routed experts (gate_up_proj at rank 2r, down_proj at r), and "gate" the router's
    weight, so no target name reaches the shared experts' or a dense block's linears; "all-linear" adapts the
    attention, the router and the routed experts."""
    return _moe.converted_block_lora_table(m, _decoder.lora_table(m), "glm4_moe")


# ---- the forward pass ------------------------------------------------------------------------------------------
def attention(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Glm4MoeAttention on the normalized input: q, k, v (biases change no saved tensor), q/k RMSNorm over each head
    (use_qk_norm), apply_rotary_pos_emb on the first rotary_dim of each head, whose torch.cat makes q and k new
    contiguous (b, heads, s, d) tensors (GPT-NeoX's partial rotary), the DynamicCache, the attention kernel, o_proj.
    k from the cat (and the cache's copies) is contiguous, so eager's k^T is a view (kv_contiguous); v is the
    transposed projection, whose eager operand copy without GQA weighs what v does. q contiguous as (b, a, s, d)
    makes SDPA's output so too: transpose(1, 2) then copies it for o_proj (as Phi-3's and GPT-NeoX's)."""
    t, dm = tr.t, dims(shape)
    a, kv, d, rd = dm["a"], dm["k"], dm["d"], dm["rd"]
    q, k, v = _decoder.qkv(tr, shape, x, trainable, p)
    if shape.qk_norm == "head":
        q = tr.rms_norm(q, trainable, "q_norm", rows=t * a)
        k = tr.rms_norm(k, trainable, "k_norm", rows=t * kv)
    q, k = partial_rotary(tr, q, p.tables, t * a * rd), partial_rotary(tr, k, p.tables, t * kv * rd)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=True)
    if p.kind == "flash":
        ctx = merged_copy(tr, ctx)
    return tr.linear(ctx, t * dm["h"], trainable, p.lora_of("o_proj"), "o_proj")


def router(tr: Trace, shape, x: Tensor, trainable: bool, lora):
    """Glm4MoeTopkRouter.forward on the normalized input x (t x h): returns the top-k routing weights (t x k, fp32).

    F.linear(x.float(), weight.float()): a 16-bit x gets an fp32 copy, which the linear keeps when the router
    trains; the weight is fp32 already. sigmoid keeps its output (t x E fp32), which the gather of the chosen
    scores reads. The choice (scores + e_score_correction_bias, each group's top two summed, the top topk_group
    groups' mask, masked_fill, topk) ends in indices, so autograd frees what its steps pack (each group's top-two
    indices, the chosen groups', the bool mask) when the router returns: temporaries here, of t x n_group at most
    (left out: the shape does not hold n_group), and t x E. gather keeps the top-k
    indices (int64); renormalizing in place (norm_topk_prob) keeps the denominator (sum + 1e-20) and autograd's copy
    of the weights before the division; * routed_scaling_factor makes a new fp32 tensor, which keeps nothing."""
    t, e = tr.t, tr.e
    h, n_exp, rows = shape.hidden_size, shape.n_experts, tr.t * shape.experts_per_tok
    router_lora = lora("gate.weight")
    x32 = x
    if e != 4:  # hidden_states.type(torch.float32)
        x32 = tr.new(t * h, 4, x.grad)
        tr.use(x)
    weight = None if router_lora is None else _moe.fp32_wrapped_weight(tr, router_lora, n_exp, h, "router")
    if trainable or weight is not None:
        tr.save(x32, "router input (fp32)")
    if weight is not None and x32.grad:
        tr.save(weight, "router weight W + BA (peft ParamWrapper, fp32)")
    logits = tr.new(t * n_exp, 4, x32.grad or trainable or weight is not None)
    tr.use(x32, weight)
    grad = logits.grad
    scores = tr.new(t * n_exp, 4, grad)  # sigmoid
    tr.use(logits)
    if grad:
        tr.save(scores, "router sigmoid output (fp32)")
    choice = tr.tmp(t * n_exp, 4, scores)  # + e_score_correction_bias
    mask = tr.tmp(t * n_exp, 4)  # the group mask expanded to every expert (reshape of an expanded view: a copy)
    flags = tr.tmp(t * n_exp, 1, mask)  # ~score_mask.bool()
    masked = tr.tmp(t * n_exp, 4, choice, flags)  # masked_fill(..., -inf)
    indices = tr.new(rows, INT64)  # topk(...)[1]
    tr.tmp(rows, 4, masked)  # its values, dropped at once
    weights = tr.new(rows, 4, grad)  # scores.gather(1, topk_indices)
    tr.use(scores, indices)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    if shape.norm_topk_prob:  # topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20, in place
        total = tr.tmp(t, 4, weights)
        denominator = tr.new(t, 4, grad)
        tr.use(total)
        before = tr.new(rows, 4)  # autograd's copy of the divided tensor before the in-place division
        tr.use(weights, denominator)
        if grad:
            tr.save(denominator, "router top-k sum + 1e-20 (fp32)")
            tr.save(before, "router top-k weights before the in-place division (fp32)")
    scaled = tr.new(rows, 4, grad)  # * routed_scaling_factor
    tr.use(weights)
    return scaled


def moe(tr: Trace, shape, x: Tensor, trainable: bool, lora) -> Tensor:
    """Glm4MoeMoE.forward on the normalized input: the router, the routed experts as transformers 5.24 runs them by
    default (_moe.routed_experts: grouped_mm, routing weights in fp32), then the shared experts (a SwiGLU MLP on
    the same input, which peft never adapts on glm4_moe) added to their output."""
    values = router(tr, shape, x, trainable, lora)
    out = _moe.routed_experts(tr, shape, x, values, trainable, lora)
    t, h, si = tr.t, shape.hidden_size, shape.shared_expert_intermediate_size
    gate = tr.linear(x, t * si, trainable, None, "shared_experts.gate_proj")
    up = tr.linear(x, t * si, trainable, None, "shared_experts.up_proj")
    prod = tr.silu_times(gate, up, "shared experts SwiGLU")
    shared = tr.linear(prod, t * h, trainable, None, "shared_experts.down_proj")
    return tr.add(out, shared)


def dense_mlp(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Glm4MoeMLP: silu(gate) * up, down (peft's conversion leaves its linears unadapted: no LoRA here)."""
    t, inner = tr.t, shape.intermediate_size
    gate = tr.linear(x, t * inner, trainable, p.lora_of("gate_proj"), "gate_proj")
    up = tr.linear(x, t * inner, trainable, p.lora_of("up_proj"), "up_proj")
    prod = tr.silu_times(gate, up, "SwiGLU")
    return tr.linear(prod, t * shape.hidden_size, trainable, p.lora_of("down_proj"), "down_proj")


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Glm4MoeDecoderLayer: input_layernorm, attention, residual; post_attention_layernorm, the MoE block (the shape
    has experts) or the dense MLP, residual."""
    r1 = tr.add(x, attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p))
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    if shape.n_experts:
        return tr.add(r1, moe(tr, shape, normed, trainable, p.lora_of))
    return tr.add(r1, dense_mlp(tr, shape, normed, trainable, p))


# ---- serving: a prefill's working set (memmath/inference.py asks this) ---------------------------------------------
def moe_prefill_phase(shape, s, b, e):
    """Glm4MoeMoE's prefill peak under transformers' grouped_mm experts: _moe.prefill_phase's moments (the block
    input, residual and normed input, the sorted rows, the SwiGLU moment and the unsort moment), with the router's
    logits in fp32 (the `_` Glm4MoeMoE.forward holds through the experts) and the routing weights in fp32; then the
    shared experts, after the routed ones: their SwiGLU (3 si a token) beside the routed output (h), the three h of
    the block and the logits."""
    t, h = s * b, shape.hidden_size
    n_exp, rows, width = shape.n_experts, s * b * shape.experts_per_tok, shape.expert_intermediate_size
    w = 4  # the routing weights, fp32
    # residuals and normed input, fp32 logits, top-k int64 indices and weights, the sort's ids and permutation, the
    # sorted weights, histc's fp32 input, histc and offsets
    common = e * t * 3 * h + 4 * t * n_exp + 8 * rows + w * rows + 16 * rows + w * rows + 4 * rows + 8 * n_exp
    swiglu = common + e * rows * h + e * rows * 4 * width
    unsort = common + 2 * e * rows * h + 2 * larger(w, e) * rows * h + 8 * rows
    shared = e * t * (4 * h + 3 * shape.shared_expert_intermediate_size) + 4 * t * n_exp
    return larger(larger(swiglu, unsort), shared)


def attention_moments(shape, e):
    """Bytes a token holds at the widest moment before the attention kernel, beyond the block input and its normed
    copy (2h) and the layer's k and v, which the cache then holds (the working set is the peak less the cache):
    apply_rotary_pos_emb's temporaries (q_rot * cos, rotate_half's cat, its product with sin: three rotary_dim-wide
    tensors a head) while rotating q, then k (beside q's rotated part), and its two torch.cat; with use_qk_norm,
    Glm4MoeRMSNorm's fp32 copy and product and its fp32 variance and rsqrt, over q and then over k (beside the normed
    q). Measured with validation/inference_working_set.py's LiveBytes (tests/test_families_glm.py) in bf16; an fp32
    model's norm takes no copy (x.to(float32) is x)."""
    h, a, kv, d, rd = shape.hidden_size, shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.rotary_dim
    copy = 4 if e != 4 else 0
    moments = [e * (a * d + 3 * a * rd), e * (a * d + a * rd + 3 * kv * rd), e * (2 * a * d + a * rd + kv * rd),
               e * (2 * a * d + kv * rd + kv * d)]
    if shape.qk_norm:
        moments += [e * a * d + (copy + 4) * a * d + 8 * a, e * a * d + (copy + 4) * kv * d + 8 * kv]
    return 2 * e * h + max(moments)


def prefill_phases(shape, s, b, e, eager):
    """(outside, attention phase, MLP phase) bytes of Glm4MoeForCausalLM's prefill (validation/
    inference_working_set.py's LiveBytes): LLaMA's phases (_decoder.rotary_prefill) with the rotary cos and sin
    rotary_dim wide, the token ids (int64, b x s) and position ids (int64, s) outside; in the attention phase SDPA's
    output copied by transpose(1, 2) (q from torch.cat), eager's repeat_kv a view for one key/value head, and the
    moments before the kernel (attention_moments); the MoE block's phase (moe_prefill_phase) where the shape has
    experts. Measured on bf16 prefills (tests/test_families_glm.py): written against nine, ten more held out, every one
    equal to the byte."""
    outside, attn, mlp = _decoder.rotary_prefill(shape, s, b, e, eager)
    outside = outside - 2 * e * s * (shape.head_dim - shape.rotary_dim) + 8 * s * b + 8 * s
    if not eager:  # q from torch.cat makes the SDPA output contiguous as (b, a, s, d): transpose(1, 2) copies it
        attn = attn + s * b * e * shape.n_heads * shape.head_dim
    elif shape.n_kv_heads == 1 < shape.n_heads:  # repeat_kv of one key/value head is a view: no copies to every head
        attn = attn - s * b * e * 2 * shape.n_heads * shape.head_dim
    attn = larger(attn, s * b * attention_moments(shape, e))
    if shape.n_experts:
        mlp = moe_prefill_phase(shape, s, b, e) + _decoder.held_probabilities(shape, s, b, e, eager)
    return outside, attn, mlp


ARCHITECTURE = Architecture(
    model_type="glm4_moe", family="llama", title="GLM-4.5", source="configuration_glm4_moe.py, modeling_glm4_moe.py",
    fields=decoder_fields(GLM_FIELDS),
    defaults=DEFAULTS, read_options=read_options,
    tensors=partial(_decoder.tensors, mlp=mlp_tensors), lora_modules=lora_table,
    # peft 0.21 on the meta device: gate_up_proj's adapter (the inner ParamWrapper), down_proj's, then the router's
    lora_order=("experts.gate_up_proj", "experts.down_proj", "gate.weight"),
    tp_plan=TP_PLAN, trace_block=block, routing_weights_fp32=True,
    prefill_phases=prefill_phases,
    fp32_modules=("e_score_correction_bias", "gate.weight"),  # Glm4MoePreTrainedModel._keep_in_fp32_modules_strict
)
