"""ERNIE 4.5 MoE (transformers 5.24 configuration_ernie4_5_moe.py, modeling_ernie4_5_moe.py): Baidu's
ERNIE-4.5-21B-A3B and ERNIE-4.5-300B-A47B text models.

- Ernie4_5_MoeAttention: ERNIE 4.5's attention (architectures/ernie4_5.py: use_bias on q, k, v and o, the fp32
  rotary); its config class has no head_dim field, so head_dim is h / a unless the config names one
  (getattr(config, "head_dim", ...)), and 4 key/value heads by default;
- Ernie4_5_MoeDecoderLayer: a mixture of experts in block i when (i + 1) % moe_layer_interval == 0 and
  moe_layer_start_index <= i <= moe_layer_end_index (-1: the last block, Ernie4_5_MoeConfig.__post_init__), a dense
  SwiGLU MLP of intermediate_size (use_bias on gate, up and down) in the others: the dense blocks are a second block
  layout (ModelShape.block_layouts);
- Ernie4_5_MoeSparseMoeBlock, in parameters() order: the router (Ernie4_5_MoeTopKRouter: an E x h fp32 weight and
  moe_statics.e_score_correction_bias, a 1 x E fp32 Parameter with requires_grad=False, which parameters() counts),
  the routed experts as two 3-D Parameters (no biases), and, when moe_num_shared_experts > 0, the shared experts: one
  SwiGLU MLP of moe_num_shared_experts x moe_intermediate_size with use_bias biases;
- the router: softmax over the E logits in fp32, top-moe_k of the softmax plus the correction bias, the chosen
  softmax values renormalized (divided by their sum, clamped at moe_norm_min) and cast back to the model dtype;
- Ernie4_5_MoeForCausalLM's lm_head has a bias when use_bias (a vocab_size vector that is not tied, even when the
  weight is), unlike the dense ERNIE 4.5's.

A 16-bit load keeps the router's weight and the correction bias in fp32 (_keep_in_fp32_modules_strict = ["gate.weight",
"e_score_correction_bias"]: fp32_modules), and the correction bias never trains (requires_grad=False: its ParamTensor is
not trainable, so no gradient or optimizer state is priced for it). The multi-token-prediction weights a checkpoint holds (_keys_to_ignore_on_load_unexpected = ["mtp"]) are not built.

Its trace (block: ERNIE 4.5's attention, then the MoE block or the dense MLP) was written from the modeling file and
measured after, on the CPU (tests/test_families_ernie.py), every case held out: two steps of three small models (a
dense first block and MoE blocks with a shared expert and use_bias; MoE every second block to moe_layer_end_index with
two shared experts and the training DynamicCache; every block MoE without shared experts or GQA), full and LoRA,
fp32 and bf16, SDPA and eager: what autograd holds when the forward returns equals the trace to the byte, the steady
step's peak within 0.11%; LoRA on the fp32 router, on the experts and all-linear to the byte where every block has
experts. Where it is not exact yet (the shared code for mixed layouts, not this record): with a dense first block that
no LoRA target adapts (router or experts alone), hf_activations counts block 0 as storing, which PyTorch's does not
(its input needs no gradient); a prefill whose last block is dense, after the MoE block that peaks, is priced as if
that last block's k and v were in the cache at the peak (over by one block's cache, inference.working_set_bytes); a
checkpointed step's MoE block is priced at the dense intermediate_size (peak.py), within 5.2% here."""

from __future__ import annotations

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._parts import ParamTensor, linear
from ._steps import INT64, Pass
from .ernie4_5 import attention, prefill_phases as dense_prefill_phases
from .glm4_moe import dense_mlp
from .record import MOE, Architecture, decoder_fields, refuse_true

FIELDS = {
    "use_bias": "biases on q, k, v, o, a dense block's and the shared experts' gate, up, down, and on lm_head",
    "intermediate_size": "a dense block's MLP width",
    **MOE, "moe_num_experts": "routed experts", "moe_k": "experts per token (active parameters)",
    "moe_intermediate_size": "one routed expert's width",
    "moe_num_shared_experts": "the shared experts' width in moe_intermediate_size (0: none)",
    "moe_layer_start_index": "the first block that may hold experts",
    "moe_layer_end_index": "the last block that may hold experts (-1: the last block)",
    "moe_layer_interval": "experts in every n-th block ((i + 1) % n == 0); the others a dense MLP",
    "moe_norm_min": "the floor of the routing weights' sum (no memory)",
    "router_aux_loss_coef": "the auxiliary loss's weight (no memory: output_router_logits is refused)",
}
# Ernie4_5_MoeConfig's defaults (those of ERNIE-4.5-21B-A3B) that the reader reads here
DEFAULTS = {"num_key_value_heads": 4, "tie_word_embeddings": True, "moe_num_experts": 64, "moe_k": 6,
            "moe_intermediate_size": 1536, "moe_num_shared_experts": 2, "moe_layer_start_index": 1,
            "moe_layer_interval": 1}

# Ernie4_5_MoeConfig.base_model_tp_plan: the attention, the shared experts and a dense block's MLP; the routed experts
# split by ep and their widths by tp (memmath/parallel.py), as the other MoE records
TP_PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
           "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.shared_experts.gate_proj": "colwise", "layers.*.mlp.shared_experts.up_proj": "colwise",
           "layers.*.mlp.shared_experts.down_proj": "rowwise", "layers.*.mlp.gate_proj": "colwise",
           "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}

# What turns a MoE block's shape into a dense block's (Ernie4_5_MoeMLP at intermediate_size)
DENSE_BLOCK = (("n_experts", 0), ("experts_per_tok", 0), ("expert_intermediate_size", None),
               ("shared_expert_intermediate_size", 0))


def _end_index(config, layers: int) -> int:
    """moe_layer_end_index as Ernie4_5_MoeConfig.__post_init__ leaves it: -1 (its default) is the last block."""
    end = config.get("moe_layer_end_index", -1)
    if isinstance(end, bool) or not isinstance(end, int) or end < -1:
        raise ValueError(f"config field 'moe_layer_end_index' must be a block index, or -1 for the last block; got "
                         f"{validate.describe(end)}")
    return layers - 1 if end == -1 else end


def moe_blocks(config, get) -> tuple:
    """The blocks Ernie4_5_MoeDecoderLayer gives a mixture of experts: (i + 1) % moe_layer_interval == 0 and
    moe_layer_start_index <= i <= moe_layer_end_index."""
    layers = get("num_hidden_layers")
    start, interval, end = get("moe_layer_start_index", low=0), get("moe_layer_interval"), _end_index(config, layers)
    return tuple(i for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end)


def read_options(config, get):
    """use_bias on every projection (Ernie4_5_MoeConfig has no __post_init__ for null head_dim or key/value heads:
    Ernie4_5_MoeAttention cannot be built with them, so they are refused), then the MoE blocks and the dense ones."""
    refuse_true(get, "output_router_logits")
    for key in ("head_dim", "num_key_value_heads"):
        if key in config and config[key] is None:
            raise ValueError(f"config field {key!r} is null; Ernie4_5_MoeAttention reads it as a number (transformers "
                             "cannot build the model): give a whole number or leave the field out")
    bias = get.flag("use_bias", False)
    options = {"attention_bias": bias, "mlp_bias": bias}
    layers = get("num_hidden_layers")
    sparse = moe_blocks(config, get)
    if not sparse:
        return options
    experts, chosen = get("moe_num_experts"), get("moe_k")
    if chosen > experts:
        raise ValueError(f"config field 'moe_k' ({chosen}) must be at most moe_num_experts ({experts})")
    width = get("moe_intermediate_size")
    # Ernie4_5_MoeTopKRouter always renormalizes the chosen weights
    options.update(n_experts=experts, experts_per_tok=chosen, expert_intermediate_size=width,
                   shared_expert_intermediate_size=get("moe_num_shared_experts", low=0) * width, norm_topk_prob=True)
    dense = tuple(i for i in range(layers) if i not in sparse)
    if dense:
        options["block_layouts"] = ((dense, DENSE_BLOCK),)
    return options


# ---- tensors and peft's names ------------------------------------------------------------------------------------
def mlp_tensors(m) -> list:
    """A MoE block's Ernie4_5_MoeSparseMoeBlock (gate, experts, shared_experts) where the shape has experts, else
    Ernie4_5_MoeMLP (gate, up, down with use_bias)."""
    if not m.n_experts:
        return _decoder.mlp_tensors(m)
    h, e, ei, si = m.hidden_size, m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
    tensors = [ParamTensor("mlp.gate.weight", "mlp", (e, h)),
               ParamTensor("mlp.gate.moe_statics.e_score_correction_bias", "mlp", (1, e), trainable=False),
               ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
               ParamTensor("mlp.experts.down_proj", "mlp", (e, h, ei))]
    if si:
        tensors += (linear("mlp.shared_experts.gate_proj", "mlp", h, si, m.mlp_bias)
                    + linear("mlp.shared_experts.up_proj", "mlp", h, si, m.mlp_bias)
                    + linear("mlp.shared_experts.down_proj", "mlp", si, h, m.mlp_bias))
    return tensors


def tensors(m, group: str) -> list:
    """The rotary decoder's tensors with ERNIE's MLPs, and lm_head's bias when use_bias (nn.Linear(h, V,
    bias=config.use_bias); only the weight is tied to the embedding)."""
    listed = _decoder.tensors(m, group, mlp=mlp_tensors)
    if group == "head" and m.attention_bias:
        listed = listed + [ParamTensor("lm_head.bias", "head", (m.vocab_size,))]
    return listed


def lora_table(m) -> dict:
    """peft 0.21's names on ernie4_5_moe, measured on the meta device (tests/test_families_ernie.py). peft converts
    ernie4_5_moe as qwen2_moe (transformers' _MODEL_TO_CONVERSION_PATTERN): target_modules gate_proj, up_proj and
    down_proj become target_parameters on the routed experts (gate_up_proj at rank 2r, down_proj at r), and "gate"
    the router's weight, so no target name reaches the shared experts' or a dense block's linears; "all-linear"
    adapts the attention, the router and the routed experts."""
    return _moe.converted_block_lora_table(m, _decoder.lora_table(m), "ernie4_5_moe")


# ---- the forward pass ------------------------------------------------------------------------------------------
def router(tr: Trace, shape, x: Tensor, trainable: bool, lora) -> Tensor:
    """Ernie4_5_MoeTopKRouter.forward on the normalized input x (t x h), autocast off: returns the top-k routing
    weights (t x k) in the model dtype.

    F.linear(x.float(), weight.float()): a 16-bit x gets an fp32 copy, which the linear keeps when the router trains;
    the weight is fp32 already (or peft's W + BA in fp32). softmax in fp32 keeps its output (t x E). moe_statics adds
    the correction bias (a t x E temporary) and topk of that sum keeps nothing (its values are dropped); gather keeps
    the top-k indices (int64). The sum of the chosen weights (t) is clamped at moe_norm_min (clamp keeps the sum) and
    divides them (the division keeps the chosen weights and the clamped sum); .to(the model dtype) keeps nothing."""
    t = tr.t
    h, n_exp, rows = shape.hidden_size, shape.n_experts, tr.t * shape.experts_per_tok
    router_lora = lora("gate.weight")
    x32 = x
    if tr.e != 4:  # hidden_states.float()
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
    probs = tr.new(t * n_exp, 4, grad)  # softmax(dim=1, dtype=float)
    tr.use(logits)
    if grad:
        tr.save(probs, "router softmax output (fp32)")
    biased = tr.tmp(t * n_exp, 4, probs)  # moe_statics: + e_score_correction_bias
    indices = tr.new(rows, INT64)  # topk(...)[1]
    tr.tmp(rows, 4, biased)  # its values, dropped at once
    chosen = tr.new(rows, 4, grad)  # gather(routing_weights, -1, selected_experts)
    tr.use(probs, indices)
    if grad:
        tr.save(indices, "router top-k indices (int64)")
    total = tr.new(t, 4, grad)  # chosen.sum(dim=-1, keepdim=True)
    tr.use(chosen)
    clamped = tr.new(t, 4, grad)  # torch.clamp(..., min=norm_min)
    tr.use(total)
    divided = tr.new(rows, 4, grad)
    tr.use(chosen, clamped)
    if grad:
        tr.save(total, "router top-k sum (fp32)")
        tr.save(clamped, "router top-k sum clamped (fp32)")
        tr.save(chosen, "router top-k weights before the division (fp32)")
    if tr.e == 4:
        return divided
    values = tr.new(rows, tr.e, grad)  # .to(hidden_states.dtype)
    tr.use(divided)
    return values


def moe(tr: Trace, shape, x: Tensor, trainable: bool, lora) -> Tensor:
    """Ernie4_5_MoeSparseMoeBlock.forward on the normalized input: the shared experts first (a SwiGLU MLP, which peft
    never adapts on ernie4_5_moe), the router, the routed experts as transformers 5.24 runs them by default
    (_moe.routed_experts: grouped_mm, routing weights in the model dtype), their sum."""
    t, h, si = tr.t, shape.hidden_size, shape.shared_expert_intermediate_size
    shared = None
    if si:
        gate = tr.linear(x, t * si, trainable, None, "shared_experts.gate_proj")
        up = tr.linear(x, t * si, trainable, None, "shared_experts.up_proj")
        prod = tr.silu_times(gate, up, "shared experts SwiGLU")
        shared = tr.linear(prod, t * h, trainable, None, "shared_experts.down_proj")
    values = router(tr, shape, x, trainable, lora)
    out = _moe.routed_experts(tr, shape, x, values, trainable, lora)
    return out if shared is None else tr.add(out, shared)


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Ernie4_5_MoeDecoderLayer: input_layernorm, ERNIE 4.5's attention, residual; post_attention_layernorm, the MoE
    block (the shape has experts) or the dense MLP (unadapted by peft), residual."""
    normed = tr.rms_norm(x, trainable, "input_layernorm")
    r1 = tr.add(x, attention(tr, shape, normed, trainable, p))
    normed = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    if shape.n_experts:
        return tr.add(r1, moe(tr, shape, normed, trainable, p.lora_of))
    return tr.add(r1, dense_mlp(tr, shape, normed, trainable, p))


# ---- serving: a prefill's working set (memmath/inference.py asks this) ---------------------------------------------
def moe_prefill_phase(shape, s, b, e):
    """Ernie4_5_MoeSparseMoeBlock's prefill peak under transformers' grouped_mm experts: the shared experts first
    (their SwiGLU, 3 si a token, beside the block's three h), then their output (h) held beside _moe.prefill_phase's
    moments of the routed experts, with the router's logits in fp32 (the `_` the block holds through the experts) and
    the routing weights in the model dtype."""
    t, h = s * b, shape.hidden_size
    n_exp, rows, width = shape.n_experts, s * b * shape.experts_per_tok, shape.expert_intermediate_size
    si = shape.shared_expert_intermediate_size
    # residuals, normed input and the shared output; fp32 logits, top-k int64 indices and weights, the sort's ids
    # and permutation, the sorted weights, histc's fp32 input, histc and offsets
    common = e * t * (3 * h + (h if si else 0)) + 4 * t * n_exp + 8 * rows + e * rows + 16 * rows + e * rows
    common = common + 4 * rows + 8 * n_exp
    swiglu = common + e * rows * h + e * rows * 4 * width
    unsort = common + 2 * e * rows * h + 2 * e * rows * h + 8 * rows
    phase = max(swiglu, unsort)
    if si:
        phase = max(phase, e * t * (3 * h + 3 * si))
    return phase


def prefill_phases(shape, s, b, e, eager):
    """ERNIE 4.5's prefill phases (its fp32 rotary), the MoE block's phase where the shape has experts, and outside
    them the token ids (int64, b x s) and position ids (int64, s), held through the blocks as in GLM-4.5's prefill.
    Measured with validation/inference_working_set.py's LiveBytes (tests/test_families_ernie.py): the phases as
    written fell short of eight bf16 prefills by 8 s b + 8 s bytes each, dense and MoE blocks alike, so the ids were
    added; the other prefills there were measured after, held out."""
    outside, attn, mlp = dense_prefill_phases(shape, s, b, e, eager)
    outside = outside + 8 * s * b + 8 * s
    if shape.n_experts:
        mlp = moe_prefill_phase(shape, s, b, e) + _decoder.held_probabilities(shape, s, b, e, eager)
    return outside, attn, mlp


ARCHITECTURE = Architecture(
    model_type="ernie4_5_moe", family="llama", title="ERNIE 4.5 MoE",
    source="configuration_ernie4_5_moe.py, modeling_ernie4_5_moe.py",
    fields=decoder_fields(FIELDS, drop=("attention_dropout",)),
    defaults=DEFAULTS, dropout_fields={},  # Ernie4_5_MoeAttention: self.attention_dropout = 0.0
    read_options=read_options, tensors=tensors, lora_modules=lora_table,
    # peft 0.21 on the meta device: the router's adapter, then gate_up_proj's (the inner ParamWrapper), down_proj's
    lora_order=("gate.weight", "experts.gate_up_proj", "experts.down_proj"),
    tp_plan=TP_PLAN, trace_block=block, prefill_phases=prefill_phases,
    fp32_modules=("gate.weight", "e_score_correction_bias"),  # Ernie4_5_MoePreTrainedModel._keep_in_fp32_modules_strict
)
