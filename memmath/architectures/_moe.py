"""A sparse mixture of experts as transformers 5.24 stores and runs it (Mixtral, Qwen2-MoE, Qwen3-MoE): a router
(an E x h Parameter), the routed experts as two 3-D Parameters, and Qwen2-MoE's shared expert with its sigmoid
gate. Its tensors, its peft target names and its forward-pass trace; a decoder's MLP is this block when the shape
has n_experts (memmath/architectures/_decoder.py)."""

from __future__ import annotations

from ..trace import Tensor, Trace
from ._parts import ParamTensor, linear
from ._steps import INT64, larger


# The attention's split in a MoE decoder (MixtralConfig.base_model_tp_plan, configuration_mixtral.py); the routed
# experts (mlp.experts.gate_up_proj, mlp.experts.down_proj) split by ep and their widths by tp (memmath/parallel.py)
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise"}


def tensors(m) -> list:
    """The MoE block's parameters in parameters() order (modeling_<type>.py's <Type>SparseMoeBlock)."""
    h, e, ei = m.hidden_size, m.n_experts, m.expert_intermediate_size
    mlp = [ParamTensor("mlp.gate.weight", "mlp", (e, h)),  # the router: a Parameter, not an nn.Linear
           ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
           ParamTensor("mlp.experts.down_proj", "mlp", (e, h, ei))]
    if m.shared_expert_intermediate_size:
        si = m.shared_expert_intermediate_size
        mlp += (linear("mlp.shared_expert.gate_proj", "mlp", h, si, False)
                + linear("mlp.shared_expert.up_proj", "mlp", h, si, False)
                + linear("mlp.shared_expert.down_proj", "mlp", si, h, False))
    if m.shared_expert_gate:
        mlp += linear("mlp.shared_expert_gate", "mlp", h, 1, False)
    return mlp


def biased_tensors(m) -> list:
    """gpt-oss's MoE block in parameters() order (modeling_gpt_oss.py's GptOssMLP): a router with a bias
    (GptOssTopKRouter: weight E x h, bias E) and experts with biases, their gate and up interleaved in one
    Parameter stored input-first (GptOssExperts: gate_up_proj E x h x 2I, gate_up_proj_bias E x 2I,
    down_proj E x I x h, down_proj_bias E x h)."""
    h, e, ei = m.hidden_size, m.n_experts, m.expert_intermediate_size
    return [ParamTensor("mlp.router.weight", "mlp", (e, h)), ParamTensor("mlp.router.bias", "mlp", (e,)),
            ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, h, 2 * ei)),
            ParamTensor("mlp.experts.gate_up_proj_bias", "mlp", (e, 2 * ei)),
            ParamTensor("mlp.experts.down_proj", "mlp", (e, ei, h)),
            ParamTensor("mlp.experts.down_proj_bias", "mlp", (e, h))]


def biased_lora_table(m) -> dict:
    """peft's target names in gpt-oss's MoE block: nothing in it is an nn.Linear. peft 0.21 adapts the router's
    2-D weight (mlp.router.weight, one rank-r pair h -> E) and the experts' 3-D Parameters through
    lora.ParamWrapper; GptOssExperts sets is_transposed, so peft reads d_in and d_out from the stored
    (E, d_in, d_out) without the swap (peft/tuners/lora/layer.py, update_layer): gate_up_proj h -> 2I at rank
    2r per expert (memmath's convention for the fused gate and up), down_proj I -> h at rank r per expert.
    The biases are not adapted."""
    h, e, ei = m.hidden_size, m.n_experts, m.expert_intermediate_size
    routed = "its MLP is the routed experts, 3-D tensors: target 'experts'"
    return dict(router=("router.weight", h, e),
                experts=[("experts.gate_up_proj", h, 2 * ei, 2 * e), ("experts.down_proj", ei, h, e)],
                gate=routed, up=routed, down=routed, shared_gate="it has no shared expert gate")


def shared_experts_tensors(hidden_size: int, n_experts: int, expert_width: int, shared_width: int) -> list:
    """The MoE block of DeepSeek-V2/V3, Kimi-K2 and GLM-4.5 in parameters() order (DeepseekV3MoE, Glm4MoeMoE
    register experts, gate, shared_experts): the routed experts as two 3-D Parameters, the router's E x h weight
    (DeepseekV3TopkRouter; transformers keeps it in fp32 under a 16-bit load: _keep_in_fp32_modules_strict names
    gate.weight) and the shared experts as one SwiGLU MLP of n_shared_experts x moe_intermediate_size.
    DeepSeek-V3's and GLM-4.5's router also hold e_score_correction_bias, an fp32 buffer of E values (sigmoid
    routing without an auxiliary loss): a buffer, so not among the parameters (ROUTER_BUFFERS)."""
    h, e, ei, si = hidden_size, n_experts, expert_width, shared_width
    return ([ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
             ParamTensor("mlp.experts.down_proj", "mlp", (e, h, ei)),
             ParamTensor("mlp.gate.weight", "mlp", (e, h))]
            + linear("mlp.shared_experts.gate_proj", "mlp", h, si, False)
            + linear("mlp.shared_experts.up_proj", "mlp", h, si, False)
            + linear("mlp.shared_experts.down_proj", "mlp", si, h, False))


# Persistent router buffers, saved in the checkpoint beside the parameters: name -> (values per block as a function
# of the routed experts, bytes a value). DeepseekV3TopkRouter and Glm4MoeTopkRouter: e_score_correction_bias, fp32.
ROUTER_BUFFERS = {"mlp.gate.e_score_correction_bias": (lambda experts: experts, 4)}


def converted_mlp_names(table: dict, model_type: str) -> dict:
    """A block's LoRA table where peft 0.21 converts the model type as qwen2_moe (transformers'
    _MODEL_TO_CONVERSION_PATTERN; peft utils/transformers_weight_conversion.py): target_modules gate_proj, up_proj
    and down_proj become the routed experts' parameters, so those names adapt no nn.Linear, neither a dense block's
    MLP nor a shared expert's; "all-linear" leaves them too."""
    why = (f"peft 0.21 converts {model_type}'s gate_proj, up_proj and down_proj onto the routed experts (target "
           "'experts'): no target adapts a shared expert's or a dense block's MLP")
    return dict(table, gate=why, up=why, down=why)


def converted_block_lora_table(m, attention: dict, model_type: str) -> dict:
    """peft 0.21's names in a block of a model type it converts as qwen2_moe whose MoE blocks hold shared experts
    without a gate and whose other blocks hold a dense MLP (GLM-4.5, ERNIE 4.5 MoE): the attention's q, k, v and o
    from `attention`, gate, up and down turned onto the routed experts (converted_mlp_names), and in a MoE block the
    router's weight and the routed experts."""
    table = converted_mlp_names({key: attention[key] for key in ("q", "k", "v", "o")}, model_type)
    table["shared_gate"] = "it has no shared expert gate"
    if m.n_experts:
        moe = lora_table(m)
        table.update(router=moe["router"], experts=moe["experts"])
    else:
        table.update(router="a dense block has no router", experts="a dense block has no routed experts")
    return table


def lora_table(m) -> dict:
    """peft's target names in the MoE block.

    transformers 5 stores the routed experts as two 3-D Parameters (modeling_<type>.py's <Type>Experts:
    gate_up_proj E x 2I x h, down_proj E x h x I) and the router as a module holding an E x h Parameter:
    none is an nn.Linear. peft 0.21 adapts them as Parameters (lora.ParamWrapper): A (r_e * E) x d_in,
    B d_out x (r_e * E), d_in and d_out swapped from the stored (E, d_out, d_in) (update_layer), r_e = 2r
    for the fused gate_up_proj (the converted config's rank_pattern) and r for down_proj; the router's
    2-D weight gets one rank-r pair. Only Qwen2-MoE has linears in its MLP: the shared expert's
    gate_proj/up_proj/down_proj and shared_expert_gate (h -> 1)."""
    h = m.hidden_size
    e, ei, si = m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    table = dict(router=("gate.weight", h, e),
                 experts=[("experts.gate_up_proj", h, 2 * ei, 2 * e), ("experts.down_proj", ei, h, e)])
    if si:
        table.update(gate=("gate_proj", h, si), up=("up_proj", h, si), down=("down_proj", si, h))
    else:
        routed = "its MLP is the routed experts, 3-D tensors: target 'experts'"
        table.update(gate=routed, up=routed, down=routed)
    table["shared_gate"] = ("shared_expert_gate", h, 1) if m.shared_expert_gate else "it has no shared expert gate"
    return table


def softmax_top_k(tr: Trace, logits: Tensor, t: int, n_exp: int, rows: int, normalize: bool) -> tuple:
    """(the top-k routing weights in fp32, their int64 indices) of router logits: softmax in fp32 (a 16-bit logit is
    cast first), topk, and with `normalize` the weights divided in place by their sum (router_top_value /=
    router_top_value.sum(dim=-1, keepdim=True)), each saving what autograd keeps for the router's gradient."""
    grad = logits.grad
    logits32 = logits if logits.elem == 4 else tr.tmp(t * n_exp, 4, logits)  # .float() / softmax(dtype=float)
    probs = tr.new(t * n_exp, 4, grad)
    tr.use(logits32)
    if grad:
        tr.save(probs, "router softmax output (fp32)")
    values = tr.new(rows, 4, grad)
    indices = tr.new(rows, INT64)
    tr.use(probs)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    if normalize:
        total = tr.new(t, 4, grad)
        before = tr.new(rows, 4)  # autograd's copy of the divided tensor before the in-place division
        tr.use(values)
        if grad:
            tr.save(total, "router top-k sum (fp32)")
            tr.save(before, "router top-k weights before the in-place division (fp32)")
    return values, indices


def router_logits(tr: Trace, x: Tensor, h: int, n_exp: int, trainable: bool, router_lora) -> Tensor:
    """A router's F.linear(x, W) (t x E, the model's dtype); it keeps x when W trains. Under peft's ParamWrapper
    (router_lora): F.linear(x, W + delta) with the sum a tensor that requires grad, which keeps x, and W + BA when x
    needs a gradient."""
    if router_lora is None:
        return tr.linear(x, tr.t * n_exp, trainable, None, "router")
    weight = wrapped_weight(tr, router_lora, 1, n_exp, h, "router")
    logits = tr.new(tr.t * n_exp, tr.e, True)
    tr.use(x, weight)
    tr.save(x, "router input")
    if x.grad:
        tr.save(weight, "router weight W + BA (peft ParamWrapper)")
    return logits


def wrapped_weight(tr: Trace, lora, experts, d_out, d_in, name, build=True):
    """The weight a module reads under peft 0.21's ParamWrapper (peft/tuners/lora/layer.py): W + scaling * B A,
    a new tensor that requires grad (W: experts x d_out x d_in, or d_out x d_in for experts = 1, frozen).

    lora: (per-expert rank, adapter bytes per element). _activate_lora builds the parametrization:
    - experts > 1, one adapter (_LoraFactorsProxy): get_delta_factors reshapes B to (E, d_out, r) and A to
      (E, r, d_in), views, and casts them to W's dtype: copies when the adapters are stored otherwise (peft's
      fp32 adapters on a 16-bit base), else the adapters' own storages; the weight is baddbmm(W, B, A,
      alpha=scaling), which keeps both factors (the copies are activations; the adapters' storages are not);
    - experts = 1, the router (_LoraParameterProxy): get_delta_weight is Linear.get_delta_weight's
      (B @ A) * scaling, in fp32 on the CPU for 16-bit adapters (A.float() and B.float(): copies the matmul
      keeps), cast back to the adapters' dtype, then to W's (.to(param.dtype)); the weight is W + delta;
    - torch's register_parametrization (unsafe=False) evaluates the parametrization once to check its shape
      and dtype: a temporary the size of W, dropped at once;
    - the module's forward reads the parameter inside parametrize.cached(): computed once there.
    build=False returns a function that computes the weight (read later in the forward pass) after the rest.
    """
    rank, adapter_elem = lora
    e, n = tr.e, experts * d_out * d_in
    if experts > 1:
        factors = []
        if adapter_elem != e:
            for numel, what in ((experts * d_out * rank, "B"), (experts * rank * d_in, "A")):
                copy = tr.new(numel, e, True)
                tr.save(copy, f"{name} LoRA {what} cast to the weights' dtype (baddbmm input)")
                factors.append(copy)
        tr.tmp(n, e, *factors)  # register_parametrization's check

        def weight():
            out = tr.new(n, e, True)  # baddbmm(W, lhs, rhs)
            tr.use(*factors)
            return out
    else:
        low = tr.device == "cpu" and adapter_elem == 2  # Linear.get_delta_weight's cast_to_fp32
        factors = ()
        if low:
            factors = (tr.new(rank * d_in, 4, True), tr.new(d_out * rank, 4, True))
            tr.save(factors[0], f"{name} LoRA A in fp32 (CPU delta weight)")
            tr.save(factors[1], f"{name} LoRA B in fp32 (CPU delta weight)")
        elem = 4 if low else adapter_elem
        delta = tr.new(n, elem, True)  # B @ A
        tr.use(*factors)
        delta = tr.tmp(n, elem, delta)  # * scaling
        delta.grad = True
        for cast in (adapter_elem, e):  # back to the adapters' dtype, then W's: no-ops where it already is
            if delta.elem != cast:
                delta = tr.tmp(n, cast, delta)
                delta.grad = True
        tr.tmp(n, e, delta)  # register_parametrization's check

        def weight():
            out = tr.new(n, e, True)  # W + delta
            tr.use(delta)
            return out
    return weight() if build else weight


def fp32_wrapped_weight(tr: Trace, lora, d_out, d_in, name):
    """wrapped_weight of a router weight transformers keeps in fp32 (_keep_in_fp32_modules_strict: DeepSeek's, GLM's
    and ERNIE 4.5 MoE's gate.weight): peft casts the delta to W's dtype, fp32, not to the model's."""
    e = tr.e
    tr.e = 4
    try:
        return wrapped_weight(tr, lora, 1, d_out, d_in, name)
    finally:
        tr.e = e


def trace(tr: Trace, shape, x: Tensor, trainable: bool, lora):
    """The sparse MoE block as transformers 5.24 runs it by default (experts_implementation "grouped_mm",
    integrations/moe.py's grouped_mm_experts_forward), on the normalized input x (t x h).

    Router (Mixtral/Qwen2-MoE/Qwen3-MoE TopKRouter): logits = x W^T keeps x; softmax in fp32 keeps its
    output (t x E); topk keeps its int64 indices (t x k); renormalizing the top-k weights in place
    (Mixtral always, Qwen when norm_topk_prob) keeps the sum and a copy of the weights before the
    division; Qwen casts the weights back to the model dtype, Mixtral keeps them in fp32.
    Experts, S = t x k rows, one per (token, chosen expert): the gather x[perm // k] keeps its int64
    indices; the weights' gather keeps the sort permutation; grouped_mm keeps its input (S x h, then
    S x I) when the expert weights train, and the int32 offsets; SiLU(gate) * up keeps the S x 2I
    gate_up output and the S x I SiLU output; the routing-weight product keeps the S x h down output
    and the weights (the product takes the wider dtype); the unsort keeps its int64 inverse permutation.
    Qwen2-MoE's shared expert (a SwiGLU MLP on x) and its sigmoid gate (keeps the t x 1 sigmoid output
    and the shared output) add to it. LoRA on the router or the experts (peft's ParamWrapper, wrapped_weight):
    the router's F.linear and the grouped_mm read W + BA, which requires grad, so they keep their input and,
    when the input needs a gradient, that weight (measured: validation/moe_lora.py, every case held out).
    Where torch's grouped_mm cannot run (CUDA below sm80, CPU torch <=
    2.10 with unaligned weights) transformers falls back to its own op, which keeps the input even for
    frozen experts: assumed not to happen (measured on the CPU with torch 2.13).
    """
    t, e = tr.t, tr.e
    h = shape.hidden_size
    n_exp, rows = shape.n_experts, t * shape.experts_per_tok
    shared = None
    if shape.shared_expert_intermediate_size:  # Qwen2MoeSparseMoeBlock runs the shared expert first
        si = shape.shared_expert_intermediate_size
        gate = tr.linear(x, t * si, trainable, lora("gate_proj"), "shared_expert.gate_proj")
        up = tr.linear(x, t * si, trainable, lora("up_proj"), "shared_expert.up_proj")
        prod = tr.silu_times(gate, up, "shared expert SwiGLU")
        shared = tr.linear(prod, t * h, trainable, lora("down_proj"), "shared_expert.down_proj")
    logits = router_logits(tr, x, h, n_exp, trainable, lora("gate.weight"))
    grad = logits.grad
    values, _ = softmax_top_k(tr, logits, t, n_exp, rows, normalize=shape.norm_topk_prob)
    if not shape.architecture.routing_weights_fp32 and e != 4:  # router_top_value.to(router_logits.dtype)
        values = tr.new(rows, e, grad)
        tr.use(values)
    out = routed_experts(tr, shape, x, values, trainable, lora)
    if shared is None:
        return out
    gate_logit = tr.linear(x, t, trainable, lora("shared_expert_gate"), "shared_expert_gate")
    sig = tr.new(t, e, gate_logit.grad)
    tr.use(gate_logit)
    if gate_logit.grad:
        tr.save(sig, "shared expert gate sigmoid output")
    if sig.grad:
        tr.save(shared, "shared expert output")
    if shared.grad:
        tr.save(sig, "shared expert gate sigmoid output")
    gated = tr.new(t * h, e, sig.grad or shared.grad)
    tr.use(sig, shared)
    return tr.add(out, gated)


def prefill_phase(shape, s, b, e):
    """The MoE block's prefill peak (transformers' grouped_mm experts; measured with
    validation/inference_working_set.py --new): the block input, residual and normed input (3h per
    token) and the router's logits, top-k weights and indices, then S = t x k rows: the larger of the
    SwiGLU moment (gathered input S x h, gate_up S x 2I, SiLU and product S x I) and the unsort moment
    (gathered input, down output, the weighted rows and their unsorted copy, in the routing weights'
    dtype when wider: Mixtral keeps them fp32); Qwen2-MoE's shared expert output is alive throughout."""
    t, h = s * b, shape.hidden_size
    n_exp, rows, width = shape.n_experts, s * b * shape.experts_per_tok, shape.expert_intermediate_size
    w = 4 if shape.architecture.routing_weights_fp32 else e  # Qwen casts the routing weights to the model dtype
    wide = max(w, e)
    # residuals and normed input, logits, top-k weights and int64 indices, the sort's ids and permutation,
    # the sorted weights, histc's fp32 input, histc and offsets
    common = e * t * 3 * h + e * t * n_exp + 8 * rows + w * rows + 16 * rows + w * rows + 4 * rows + 8 * n_exp
    swiglu = common + e * rows * h + e * rows * 4 * width
    unsort = common + 2 * e * rows * h + 2 * wide * rows * h + 8 * rows
    phase = larger(swiglu, unsort)
    si = shape.shared_expert_intermediate_size
    if si:  # the shared expert runs first (SwiGLU over every token), then its output waits for the experts
        phase = larger(phase + e * t * h, e * t * (3 * h + 3 * si))
    return phase


def backward_phase(shape, t, e, trains_experts: bool, grad_elem: int, checkpointing: bool):
    """The MoE block's backward working set on top of its saved tensors and the t x h gradient arriving at it (t
    tokens, e bytes an activation, grad_elem bytes a gradient; trains_experts: the experts' weights train; LoRA on
    them is peak.py's own term). Measured on the CPU, torch 2.13 and transformers 5.24's grouped_mm experts,
    by a TorchDispatchMode counting every storage a Glm4MoeMoE, MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock or
    Qwen2MoeSparseMoeBlock makes in backward and frees (net of the saved tensors each backward node drops), S = t x k:
    - the unsort, where the routed experts' backward starts: the sum's backward copies the gradient to S x h,
      index's backward makes S x h zeros and index_put's S x h result (3 x S x h, measured 3.000), then the routing
      product's backward two S x h more, all in the routing weights' dtype when it is wider, plus the down output's
      gradient cast back to the model's (bf16 with fp32 weights: 14 bytes a value, measured 13.9); under
      checkpointing the recomputed down output goes as the product's backward reads it, before that cast
      (measured: 12 bytes a value);
    - SwiGLU's: the down projection's input gradient and the product's two S x I, less the S x h down output the
      routing product had saved (3 x S x I - S x h, measured 2.48 to 2.73 S x I); with trained experts down_proj's
      E x h x I gradient exists by then and its saved S x I input is gone;
    - with trained experts, down_proj's grouped_mm backward (its E x h x I gradient and its S x I input gradient) and
      gate_up_proj's (every routed expert's gradient made, their saved S x 2I, S x I and S x I gone and the S x 2I
      gradient made: 3 x E x h x I gradients less 2 x S x I; measured to 8 x S bytes, the inverse permutation gone);
    - shared experts after the routed ones (GLM-4.5, DeepSeek: their backward runs first): their own SwiGLU moment
      (three t x shared-width gradients), then, while the routed experts run, the t x h gradient they gave the
      input, their saved tensors gone (three t x shared-width, four when trained) and their gradients made; a gated
      shared expert run before the routed ones (Qwen2-MoE) leaves the t x h gradient of its output waiting."""
    h, rows, width, experts = shape.hidden_size, t * shape.experts_per_tok, shape.expert_intermediate_size, \
        shape.n_experts
    wide = max(e, 4 if shape.architecture.routing_weights_fp32 else e)
    unsort = rows * h * (3 * wide + (e if wide != e and not checkpointing else 0))
    swiglu = 3 * e * rows * width - e * rows * h
    routed = larger(unsort, swiglu)
    if trains_experts:
        down_grad = experts * h * width * grad_elem
        routed = larger(larger(unsort, swiglu + down_grad - e * rows * width),
                        larger(down_grad + e * rows * width, 3 * down_grad - 2 * e * rows * width))
    si = shape.shared_expert_intermediate_size
    if not si:
        return routed
    if shape.shared_expert_gate:
        return e * t * h + routed
    freed = (4 if trains_experts else 3) * e * t * si - (3 * h * si * grad_elem if trains_experts else 0)
    return larger(3 * e * t * si, e * t * h - freed + routed)


def routed_experts(tr: Trace, shape, x: Tensor, values: Tensor, trainable: bool, lora, *, weight_elem: int | None = None,
                   grad: bool | None = None, biased: bool = False, apply_gate=None, gated: bool = True) -> Tensor:
    """The routed experts as transformers 5.24 runs them by default (integrations/moe.py's grouped_mm_experts_forward)
    on the normalized input x (t x h) and the routing weights `values` (t x k, in their own dtype: fp32 for a router
    that keeps them so, GLM-4.5's and DeepSeek-V3's Glm4MoeTopkRouter/DeepseekV3TopkRouter): the experts part of
    `trace` above (what each step keeps is said there), also for a router traced elsewhere. weight_elem and
    grad: the routing weights' bytes each and whether they need a gradient, where they are not `values`' own.
    biased (gpt-oss's GptOssExperts, has_bias): each grouped_mm output gets its experts' biases gathered row by row
    (gate_up_proj_bias[expert_ids_g], an S x 2I temporary, and down_proj_bias's S x h) and added in place, which saves
    nothing; the gather keeps the sorted expert ids (int64, S) when the biases train. apply_gate(tr, gate_up) -> the
    S x I product: the experts' own _apply_gate in place of SiLU(gate) * up. gated=False (has_gate=False: Nemotron-H's
    experts): the first grouped_mm is up_proj alone (S x I), and apply_gate(tr, up) is the experts' act_fn."""
    t, e = tr.t, tr.e
    h = shape.hidden_size
    n_exp, width, rows = shape.n_experts, shape.expert_intermediate_size, tr.t * shape.experts_per_tok
    grad = values.grad if grad is None else grad
    weight_elem = values.elem if weight_elem is None else weight_elem
    experts_lora = lora("experts.gate_up_proj")  # "experts" adapts gate_up_proj and down_proj together
    if experts_lora is not None:  # peft's nested ParamWrappers: down_proj's outside, gate_up_proj's (rank 2r) inside
        rank, adapter_elem = experts_lora
        down_pre = wrapped_weight(tr, experts_lora, n_exp, h, width, "experts down_proj", build=False)
        gate_up_pre = wrapped_weight(tr, (2 * rank, adapter_elem), n_exp, 2 * width, h, "experts gate_up_proj",
                                      build=False)
    weights_grad = trainable or experts_lora is not None  # the weights grouped_mm reads require grad
    token_index = tr.new(rows, INT64)  # perm // top_k
    selected = tr.new(rows * h, e, x.grad)
    tr.use(x, token_index)
    if x.grad:
        tr.save(token_index, "expert token indices (int64)")
    perm = tr.new(rows, INT64)
    weights = tr.new(rows, weight_elem, grad)
    tr.use(values, perm)
    if grad:
        tr.save(perm, "expert sort permutation (int64)")
    offsets = tr.new(n_exp, 4)  # cumsum(histc(...), dtype=int32)
    expert_ids = tr.new(rows, INT64) if biased else None  # torch.sort's sorted ids, which the bias gathers read
    gate_up_weight = gate_up_pre() if experts_lora is not None else None
    if weights_grad:
        tr.save(selected, "experts gate_up input (S x h)")
    if selected.grad or weights_grad:
        tr.save(offsets, "grouped_mm offsets (int32)")
    if gate_up_weight is not None and selected.grad:
        tr.save(gate_up_weight, "experts gate_up_proj W + BA (peft ParamWrapper)")
    gate_up = tr.new(rows * (2 if gated else 1) * width, e, selected.grad or weights_grad)
    tr.use(selected, offsets, gate_up_weight)
    biases = []  # the function's local selected_biases: each gathered bias lives until the next replaces it
    if biased:
        biases.append(_add_gathered_bias(tr, gate_up, expert_ids, trainable, "gate_up_proj_bias"))
    if apply_gate is None:
        gate, up = (Tensor(rows * width, e, gate_up.grad, gate_up.storage) for _ in range(2))
        prod = tr.silu_times(gate, up, "experts SwiGLU")
    else:
        prod = apply_gate(tr, gate_up)
    down_weight = down_pre() if experts_lora is not None else None
    if weights_grad:
        tr.save(prod, "experts down input (S x I)")
    if down_weight is not None and prod.grad:
        tr.save(down_weight, "experts down_proj W + BA (peft ParamWrapper)")
    down = tr.new(rows * h, e, prod.grad or weights_grad)
    tr.use(prod, offsets, down_weight)
    if biased:
        biases.append(_add_gathered_bias(tr, down, expert_ids, trainable, "down_proj_bias", biases[0]))
    out_elem = max(e, weight_elem)
    weighted = tr.new(rows * h, out_elem, down.grad or weights.grad)
    tr.use(down, weights)
    if weights.grad:
        tr.save(down, "experts output (S x h)")
    if down.grad:
        tr.save(weights, "routing weights, sorted")
    inverse = tr.new(rows, INT64)
    unsorted = tr.new(rows * h, out_elem, weighted.grad)
    tr.use(weighted, inverse)
    if weighted.grad:
        tr.save(inverse, "expert inverse permutation (int64)")
    out = tr.new(t * h, out_elem, unsorted.grad)  # .view(t, k, h).sum(dim=1)
    tr.use(unsorted)
    if out_elem != e:
        out = tr.tmp(t * h, e, out)  # .to(hidden_states.dtype)
        out.grad = unsorted.grad
    tr.use(gate_up_weight, down_weight)  # parametrize.cached() holds them until peft's wrappers return
    tr.use(selected)  # its local selected_hidden_states_g lives until it returns (measured: S x h at the unsort)
    # and so do selected_biases, the last gathered bias, and expert_ids_g (found on held-out gpt-oss steps)
    tr.use(*biases[1:], expert_ids)
    return out


def _add_gathered_bias(tr: Trace, out: Tensor, expert_ids: Tensor, trains: bool, name: str, previous=None) -> Tensor:
    """_grouped_linear's out.add_(bias) of grouped_mm_experts_forward's selected_biases = bias[expert_ids_g]
    (integrations/moe.py): the gathered S-row bias, added in place, is a local that lives until the next gather
    replaces it (previous: the one it replaces) or the function returns; index's backward keeps the sorted ids when
    the bias trains. Returns the gathered bias."""
    bias = tr.new(out.numel, out.elem, trains)
    tr.use(expert_ids, previous)
    if trains:
        tr.save(expert_ids, f"experts' sorted ids (int64, {name} gather)")
    tr.use(bias, out)  # the in-place add: no new storage
    out.grad = out.grad or trains
    return bias
