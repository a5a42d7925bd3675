"""What DeepSeek-V2 and DeepSeek-V3 share (transformers 5.24 modeling_deepseek_v2.py, modeling_deepseek_v3.py; Kimi-K2
builds as DeepseekV3ForCausalLM): multi-head latent attention (_latent.py) in every block, then a dense SwiGLU MLP
(DeepseekV3MLP at intermediate_size) in the first first_k_dense_replace blocks and a mixture of experts after it
(DeepseekV3MoE: routed experts as two 3-D Parameters, the router's E x h Parameter, and the shared experts as one
SwiGLU MLP of n_shared_experts x moe_intermediate_size).

Each block layout is a ModelShape of its own, and these functions choose the MLP by that shape's fields: n_experts 0
is the dense block, n_experts > 0 the mixture of experts. A dense block and a MoE block of one config differ in exactly
BLOCK_FIELDS (layout_fields gives both sets); read_options names the first first_k_dense_replace blocks a second
block layout (ModelShape.block_layouts) with the dense values.

peft 0.21 (measured on the meta device, tests/test_families_deepseek.py): peft converts deepseek_v2 and deepseek_v3
(utils/transformers_weight_conversion.py): "all-linear" adapts the latent attention's linears, the router's weight
and the routed experts (target_parameters gate.weight, gate_up_proj at rank 2r, down_proj), and leaves the dense
MLP and the shared experts; the names gate_proj, up_proj and down_proj are converted onto the routed experts, so
no name reaches the dense MLP or the shared experts. memmath's "q" is the query path (q_proj, or q_a_proj and
q_b_proj), "k" and "v" the shared key/value path (kv_a_proj_with_mqa and kv_b_proj, adapted once as GPT-2's c_attn
is): the modules peft adapts when target_modules names them.
"""

from __future__ import annotations

import dataclasses

from .. import validate
from . import _decoder, _latent, _moe, _steps
from ._parts import ParamTensor, linear, norm
from .record import MOE, Architecture, decoder_fields, refuse_true
from ..values import frozen

# The config fields both config classes read (DeepseekV2Config, DeepseekV3Config), and what memmath does with them.
FIELDS = {**_latent.LATENT_FIELDS, **MOE, "attention_bias": "biases on q_a_proj, kv_a_proj_with_mqa and o_proj",
          "n_routed_experts": "routed experts per MoE block",
          "n_shared_experts": "the shared experts (one SwiGLU MLP n_shared_experts x moe_intermediate_size wide)",
          "moe_intermediate_size": "one routed expert's width",
          "intermediate_size": "the dense blocks' MLP width",
          "first_k_dense_replace": "dense MLPs in the first k blocks, MoE after (a second block layout)",
          "n_group": "expert groups of the router (saved activations only)",
          "topk_group": "groups a token's experts come from (saved activations only)",
          "norm_topk_prob": "renormalized top-k routing weights (saved activations only)",
          "routed_scaling_factor": "multiplies the routing weights: no memory"}

# The ModelShape fields in which a dense block (DeepseekV3MLP) and a MoE block (DeepseekV3MoE) of one config differ;
# every other field is the same for both.
BLOCK_FIELDS = ("n_experts", "experts_per_tok", "expert_intermediate_size", "shared_expert_intermediate_size",
                "norm_topk_prob", "router_groups")

# The MoE blocks' parts as transformers' base_model_tp_plan names them (configuration_deepseek_v3.py,
# configuration_deepseek_v2.py), the dense blocks' MLP after; the routed experts split by ep and their widths by tp
# (memmath/parallel.py)
MLP_TP_PLAN = {"layers.*.mlp.shared_experts.gate_proj": "colwise", "layers.*.mlp.shared_experts.up_proj": "colwise",
               "layers.*.mlp.shared_experts.down_proj": "rowwise", "layers.*.mlp.gate_proj": "colwise",
               "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}

# A block's adapted modules in parameters() order (peft 0.21: the attention's linears, then the routed experts'
# gate_up_proj and down_proj wrappers, then the router's weight).
LORA_ORDER = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "experts.gate_up_proj",
              "experts.down_proj", "gate.weight")
_CONVERTED = ("peft 0.21 converts the names gate_proj, up_proj and down_proj onto the routed experts of deepseek "
              "and glm4_moe_lite models (target 'experts'), so they adapt neither a dense block's MLP nor the shared "
              "experts")


@frozen
class LatentArchitecture(Architecture):
    """A record whose attention is multi-head latent attention: its adapted modules in their own parameters() order
    (lora_order lists the whole block's, not what follows q, k, v and o)."""

    def adapter_order(self, shape) -> tuple:
        return self.lora_order


def fields(extra=None) -> dict:
    """The common decoder fields (head_dim left out: both config classes set head_dim = qk_rope_head_dim) and
    DeepSeek's."""
    return decoder_fields({**FIELDS, **(extra or {})}, drop=("head_dim",))


def read_groups(get, experts: int, *, sigmoid: bool) -> tuple:
    """(n_group, topk_group) of a group-limited router, checked as its forward pass needs them: the experts split
    evenly into n_group groups (V3's top-2 within a group: at least two each), topk_group of them chosen."""
    n_group, topk_group = get("n_group"), get("topk_group")
    if experts % n_group or (sigmoid and experts // n_group < 2):
        raise ValueError(f"config field 'n_group' is {n_group}; the router splits the {experts} routed experts into "
                         f"n_group equal groups{' of at least two' if sigmoid else ''}")
    if topk_group > n_group:
        raise ValueError(f"config field 'topk_group' is {topk_group}; the router picks at most n_group ({n_group}) "
                         "groups")
    return n_group, topk_group


def read_options(config, get, *, sigmoid: bool) -> dict:
    """The ModelShape fields of a DeepSeek config, its dense first blocks a second block layout (`get` holds the
    record's defaults, its config class's); sigmoid: DeepSeek-V3's router, always group-limited and renormalizing where
    norm_topk_prob (DeepSeek-V2's reads neither: deepseek_v2.read_options adds its groups)."""
    refuse_true(get, "output_router_logits")
    layers = get("num_hidden_layers")
    heads = get("num_attention_heads")
    kv = get("num_key_value_heads", heads)
    if kv != heads:
        raise ValueError(f"config field 'num_key_value_heads' is {kv}; multi-head latent attention expands the "
                         f"compressed key/value to every query head, so transformers' attention runs only with "
                         f"num_key_value_heads = num_attention_heads ({heads})")
    dims = _latent.read_dims(config, get, get.defaults)
    dense = get("first_k_dense_replace", low=0)
    options = {"latent": dims, "head_dim": dims.qk_rope_head_dim, "n_kv_heads": heads}
    if dense >= layers:  # DeepseekV3DecoderLayer: a DeepseekV3MLP in every block
        return options
    width, experts = get("moe_intermediate_size"), get("n_routed_experts")
    # n_shared_experts 0 builds shared experts of width 0 (zero-size tensors, no parameters)
    options.update(n_experts=experts, experts_per_tok=get("num_experts_per_tok"), expert_intermediate_size=width,
                   shared_expert_intermediate_size=get("n_shared_experts", low=0) * width,
                   norm_topk_prob=sigmoid and get.flag("norm_topk_prob", False),
                   router_groups=read_groups(get, experts, sigmoid=True) if sigmoid else None)
    if dense:  # DeepseekV3DecoderLayer: a DeepseekV3MLP in the first first_k_dense_replace blocks (a second layout)
        options["block_layouts"] = ((tuple(range(dense)), tuple(DENSE_FIELDS.items())),)
    return options


# A dense block's values of BLOCK_FIELDS: DeepseekV3MLP at the shape's intermediate_size, no experts or router.
DENSE_FIELDS = dict(n_experts=0, experts_per_tok=0, expert_intermediate_size=None, shared_expert_intermediate_size=0,
                    norm_topk_prob=False, router_groups=None)


def layout_fields(shape) -> tuple[dict, dict]:
    """(a dense block's, a MoE block's) values of BLOCK_FIELDS for a MoE `shape`: the dense block runs
    DeepseekV3MLP at the shape's intermediate_size with no experts."""
    moe = {key: getattr(shape, key) for key in BLOCK_FIELDS}
    return dict(DENSE_FIELDS), moe


# ---- tensors ---------------------------------------------------------------------------------------------------
def latent_dims(m) -> _latent.LatentDims:
    """The shape's latent widths, refused by name where it has none."""
    if m.latent is None:
        raise validate.FieldError("latent", f"a {m.arch} model needs latent, the widths of its multi-head latent "
                                  "attention (architectures._latent.LatentDims, which from_hf_config reads)")
    if not isinstance(m.latent, _latent.LatentDims):
        raise validate.FieldTypeError("latent", f"a {m.arch} model needs latent, the widths of its multi-head latent "
                                      "attention (architectures._latent.LatentDims, read by from_hf_config); got "
                                      f"{validate.describe(m.latent)}")
    return m.latent


def moe_tensors(m) -> list:
    """DeepseekV3MoE / DeepseekV2Moe in parameters() order: experts (E x 2I x h, E x h x I), the router's E x h
    Parameter (DeepseekV3TopkRouter.weight), the shared experts' SwiGLU (biased where DeepSeek-V2's mlp_bias)."""
    h, e, ei, si, mb = (m.hidden_size, m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size,
                        m.mlp_bias)
    return ([ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
             ParamTensor("mlp.experts.down_proj", "mlp", (e, h, ei)),
             ParamTensor("mlp.gate.weight", "mlp", (e, h))]
            + linear("mlp.shared_experts.gate_proj", "mlp", h, si, mb)
            + linear("mlp.shared_experts.up_proj", "mlp", h, si, mb)
            + linear("mlp.shared_experts.down_proj", "mlp", si, h, mb))


def check_router_groups(m) -> None:
    """router_groups: None, or (n_group, topk_group) whole numbers with n_group dividing n_experts and topk_group at
    most n_group, refused by name otherwise."""
    groups = m.router_groups
    if groups is None:
        return
    ok = (isinstance(groups, tuple) and len(groups) == 2
          and all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in groups))
    if not ok or (m.n_experts and m.n_experts % groups[0]) or groups[1] > groups[0]:
        raise validate.FieldError("router_groups", "router_groups must be None or (n_group, topk_group): whole "
                                  "numbers, n_group dividing n_experts and topk_group at most n_group; got "
                                  f"{validate.describe(groups)}")


def tensors(m, group: str) -> list:
    """A DeepSeek model's tensors: the rotary decoder's outside the blocks; a block is the latent attention, the MLP
    its shape names (the dense SwiGLU where n_experts is 0, else the MoE) and its two RMSNorms, in parameters()
    order (DeepseekV3DecoderLayer)."""
    if group != "layer":
        return _decoder.tensors(m, group)
    h = m.hidden_size
    check_router_groups(m)
    attention = _latent.attention_tensors(h, m.n_heads, latent_dims(m), m.attention_bias)
    mlp = moe_tensors(m) if m.n_experts else _decoder.mlp_tensors(m)
    return attention + mlp + norm("input_layernorm", h, False) + norm("post_attention_layernorm", h, False)


def lora_table(m) -> dict:
    """peft's names in a DeepSeek block (module docstring): the query path, the shared key/value path, o_proj; in a
    MoE block the router's weight and the routed experts as _moe.lora_table has them."""
    h, a, dims = m.hidden_size, m.n_heads, latent_dims(m)
    if dims.q_lora_rank is None:
        query = ("q_proj", h, a * dims.qk_head_dim)
    else:
        query = [("q_a_proj", h, dims.q_lora_rank), ("q_b_proj", dims.q_lora_rank, a * dims.qk_head_dim)]
    key_value = [("kv_a_proj_with_mqa", h, dims.cached_per_token),
                 ("kv_b_proj", dims.kv_lora_rank, a * (dims.qk_nope_head_dim + dims.v_head_dim))]
    table = {"q": query, "k": key_value, "v": key_value, "o": ("o_proj", a * dims.v_head_dim, h),
             "gate": _CONVERTED, "up": _CONVERTED, "down": _CONVERTED,
             "shared_gate": "its shared experts have no gate"}
    if not m.n_experts:
        table.update(router="a dense block has no router", experts="a dense block has no routed experts")
        return table
    e, ei = m.n_experts, m.expert_intermediate_size
    table.update(router=("gate.weight", h, e),
                 experts=[("experts.gate_up_proj", h, 2 * ei, 2 * e), ("experts.down_proj", ei, h, e)])
    return table


# ---- serving ---------------------------------------------------------------------------------------------------
def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """The latent cache (_latent.cache_values): (kv_lora_rank + qk_rope_head_dim) values a token a layer, every layer
    attending to the whole context."""
    return _latent.cache_values(latent_dims(shape), layers=shape.n_layers, context_len=context_len,
                                batch_size=batch_size)


# ---- the forward pass ------------------------------------------------------------------------------------------
def rotary_tables(tr, q_rot, k_rot, p):
    """DeepSeek-V3's apply_rotary_pos_emb(_interleave): products with the cos and sin tables (kept, shared by every
    block; (1, s, qk_rope_head_dim) in the model's dtype) and a concatenation, for q's and k's rotary parts."""
    return tr.rotary(q_rot, p.tables), tr.rotary(k_rot, p.tables)


def rotary_complex(tr, q_rot, k_rot, p):
    """DeepSeek-V2's apply_rotary_emb: x.float() reshaped into pairs (a copy of the strided query view; the key's
    view stays a view in fp32), times freqs_cis (complex64, (1, s, qk_rope_head_dim / 2), computed once a forward
    pass and kept by the product), back to real and to x's dtype."""
    e = tr.e
    freqs = tr.__dict__.get("deepseek_freqs_cis")
    if freqs is None:  # one table for every block, beside the rotary cos and sin hf_activations makes
        freqs = tr.new(tr.s * (k_rot.numel // tr.t) // 2, 8, shared=True)
        tr.deepseek_freqs_cis = freqs
    out = []
    for x, strided in ((q_rot, True), (k_rot, False)):
        pairs = x
        if e != 4 or strided:
            pairs = tr.new(x.numel, 4, x.grad)  # .float() / reshape's copy
            tr.use(x)
        if x.grad:
            tr.save(freqs, "rotary freqs_cis (complex64)")
        rotated = tr.new(x.numel // 2, 8, x.grad)  # complex product
        tr.use(pairs, freqs)
        if e != 4:
            rotated = tr.tmp(x.numel, e, rotated)  # type_as(x)
            rotated.grad = x.grad
        out.append(rotated)
    return tuple(out)


def router(tr, shape, x, trainable: bool, lora, *, sigmoid: bool):
    """The top-k router on the normed input x (DeepseekV3TopkRouter, DeepseekV2TopkRouter): returns the t x k
    routing weights (fp32) and whether they need a gradient.

    F.linear(x.float(), weight.float()) keeps the fp32 input when the weight trains (a copy of a 16-bit x; the
    weight is an fp32 Parameter). DeepSeek-V3 (sigmoid): the sigmoid output (kept), plus e_score_correction_bias;
    the group scores from a top-2 within each of n_group groups (its int64 indices kept), the top topk_group groups
    (indices kept), a boolean mask of the other experts' scores (kept by masked_fill), the top-k (indices kept);
    the chosen sigmoid scores gathered, renormalized in place where norm_topk_prob (the sum + 1e-20 and the weights
    before the division kept), times routed_scaling_factor. DeepSeek-V2 (softmax): the fp32 softmax output (kept),
    with group_limited_greedy the max within each group (its indices kept), the top groups and the mask as V3's,
    the top-k (indices kept), times routed_scaling_factor."""
    t, n_exp, top, h = tr.t, shape.n_experts, shape.experts_per_tok, shape.hidden_size
    x32 = x if tr.e == 4 else tr.tmp(t * h, 4, x)
    x32.grad = x.grad
    router_lora = lora("gate.weight")
    weight = None if router_lora is None else _moe.fp32_wrapped_weight(tr, router_lora, n_exp, h, "router")
    if trainable or router_lora is not None:
        tr.save(x32, "router input (fp32)")
    if weight is not None and x.grad:  # F.linear keeps peft's W + BA to give its input a gradient
        tr.save(weight, "router weight W + BA (peft ParamWrapper, fp32)")
    logits = tr.new(t * n_exp, 4, x.grad or trainable or router_lora is not None)
    tr.use(x32, weight)
    grad = logits.grad
    scores = tr.new(t * n_exp, 4, grad)  # sigmoid / softmax(dtype=float32)
    tr.use(logits)
    if grad:
        tr.save(scores, "router " + ("sigmoid" if sigmoid else "softmax") + " output (fp32)")
    choice = scores
    if sigmoid:  # + e_score_correction_bias
        choice = tr.new(t * n_exp, 4, grad)
        tr.use(scores)
    groups = shape.router_groups
    if groups is not None:
        # the group scores and the top groups only build a mask: the nodes that keep their indices die when the
        # router returns, and with them what they kept (V3's mask of the other experts too: only top-k's indices
        # leave its masked scores)
        n_group, topk_group = groups
        per_group = 2 if sigmoid else 1  # V3: topk(2).sum(); V2: max()
        group_scores = tr.tmp(t * n_group, 4, tr.tmp(t * n_group * per_group, 8, choice), choice)
        group_mask = tr.tmp(t * n_group, 4, tr.tmp(t * topk_group, 8, group_scores))  # zeros_like, scatter_
        expanded = tr.tmp(t * n_exp, 4, group_mask)  # expand(...).reshape(...)
        mask = tr.new(t * n_exp, 1)  # ~score_mask.bool()
        tr.use(tr.tmp(t * n_exp, 1, expanded))
        if grad and not sigmoid:  # V2: topk's values are the routing weights, so masked_fill's node lives
            tr.save(mask, "router masked experts (bool)")
        choice = tr.new(t * n_exp, 4, grad)  # masked_fill
        tr.use(choice, mask)
    values = tr.new(t * top, 4, grad)
    top_indices = tr.new(t * top, 8)
    tr.use(choice)
    if grad:
        tr.save(top_indices, "router top-k indices (int64)")
    if sigmoid:  # scores.gather(1, topk_indices): keeps the indices (kept already)
        values = tr.new(t * top, 4, grad)
        tr.use(scores, top_indices)
        if shape.norm_topk_prob:  # topk_weights /= topk_weights.sum(-1, keepdim=True) + 1e-20, in place
            total = tr.tmp(t, 4, values)
            denominator = tr.new(t, 4, grad)
            tr.use(total)
            before = tr.new(t * top, 4)  # autograd's copy of the divided tensor before the in-place division
            tr.use(values)
            if grad:
                tr.save(denominator, "router top-k sum + 1e-20 (fp32)")
                tr.save(before, "router top-k weights before the in-place division (fp32)")
    weights = tr.new(t * top, 4, grad)  # * routed_scaling_factor
    tr.use(values)
    return weights, grad


def moe(tr, shape, x, trainable: bool, p, *, sigmoid: bool):
    """DeepseekV3MoE / DeepseekV2Moe on the normed input x: the router, the routed experts (_moe.routed_experts,
    their fp32 routing weights making the weighted rows fp32, cast back after the sum), then the shared experts (a
    SwiGLU MLP on x, never adapted by peft's names) added."""
    weights, grad = router(tr, shape, x, trainable, p.lora_of, sigmoid=sigmoid)
    routed = _moe.routed_experts(tr, shape, x, weights, trainable, p.lora_of, weight_elem=4, grad=grad)
    t, h, si = tr.t, shape.hidden_size, shape.shared_expert_intermediate_size
    gate = tr.linear(x, t * si, trainable, None, "shared_experts.gate_proj")
    up = tr.linear(x, t * si, trainable, None, "shared_experts.up_proj")
    prod = tr.silu_times(gate, up, "shared experts SwiGLU")
    shared = tr.linear(prod, t * h, trainable, None, "shared_experts.down_proj")
    return tr.add(routed, shared)


def block(tr, shape, x, trainable: bool, p, *, rotary, sigmoid: bool):
    """DeepseekV3DecoderLayer / DeepseekV2DecoderLayer: RMSNorm, latent attention (_latent.trace), residual add,
    RMSNorm, the MLP the shape names (DeepseekV3MLP where n_experts is 0, else the MoE), residual add."""
    attn = _latent.trace(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p, rotary=rotary)
    r1 = tr.add(x, attn)
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    if shape.n_experts:
        mlp = moe(tr, shape, normed, trainable, p, sigmoid=sigmoid)
    else:
        mlp = _decoder.mlp(tr, shape, normed, trainable, p)
    return tr.add(r1, mlp)


# ---- a prefill's working set -------------------------------------------------------------------------------------
def prefill_phases(shape, s, b, e, eager, *, complex_rotary: bool):
    """(outside, attention phase, MLP phase) bytes of a DeepSeek prefill (validation/inference_working_set.py's
    LiveBytes on the CPU, tests/test_families_deepseek.py).

    Outside: the token embeddings, the rotary tables (V3: cos and sin in the model's dtype; V2: complex64 freqs_cis,
    4 B a rotary value) and eager's causal mask. The attention phase: the block input and its normed copy, and what
    DeepseekV3Attention.forward holds as locals at the attention: q_b_proj's output, the rotated query part, the
    concatenated queries, kv_a_proj_with_mqa's output, kv_b_proj's output (the values are a view of it) and the keys;
    eager adds its scores, their fp32 copy and the fp32 softmax (e + 8 B a score element; fp32: e + 4), SDPA its
    output and the contiguous copy of it that sdpa_attention_forward returns (found when a held-out case whose
    attention outweighed its MLP measured e x t x a x v_head_dim more). The MLP phase: a dense block's SwiGLU, or the routed experts' (_moe.prefill_phase, with the fp32 routing
    weights and fp32 router logits), then the shared experts' SwiGLU beside the experts' output, the logits and
    the top-k. Under eager the attention probabilities the decoder layer keeps in a local (`hidden_states, _ =`)
    stay alive through the MLP.

    The CPU's SDPA runs its math kernel where qk_head_dim differs from v_head_dim (DeepSeek's published configs),
    which keeps b x a x s^2 fp32 scores and softmax: not counted here, as the fused kernels of a GPU keep none."""
    dims = latent_dims(shape)
    t, h, a = s * b, shape.hidden_size, shape.n_heads
    rope = dims.qk_rope_head_dim
    tables = 4 * s * rope if complex_rotary else 2 * e * s * rope
    outside = e * t * h + tables + (e * b * s * s if eager else 0)
    held = (2 * h + 3 * a * dims.qk_head_dim + dims.cached_per_token + a * rope
            + a * (dims.qk_nope_head_dim + dims.v_head_dim))
    scores = a * b * s * s
    if eager:
        attn = e * t * held + (e + 4 + (4 if e != 4 else 0)) * scores
    else:
        attn = e * t * (held + 2 * a * dims.v_head_dim)  # its output and sdpa_attention_forward's contiguous copy
    probs = e * scores if eager else 0
    if not shape.n_experts:
        return outside, attn, probs + e * t * (3 * h + 3 * shape.intermediate_size)
    n_exp, k, si = shape.n_experts, shape.experts_per_tok, shape.shared_expert_intermediate_size
    routed = _moe.prefill_phase(dataclasses.replace(shape, shared_expert_intermediate_size=0), s, b, e)
    routed = routed + (4 - e) * t * n_exp  # the router's logits are fp32
    shared = e * t * (4 * h + 3 * si) + 4 * t * n_exp + 12 * t * k  # the experts' output, logits and top-k held
    return outside, attn, probs + _steps.larger(routed, shared)
