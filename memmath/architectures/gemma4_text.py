"""Gemma 4's language model (transformers 5.24 configuration_gemma4.py Gemma4TextConfig, modeling_gemma4.py
Gemma4ForCausalLM), Gemma 3's sandwich-normed blocks with q/k norms and a scaled embedding, and:

- sliding and full-attention layers of different shapes: a full layer's head size is global_head_dim (512 by
  default) and, with attention_k_eq_v, its key/value heads num_global_key_value_heads (Gemma4TextConfig's
  per_layer_config, written out in a saved config.json), each a block layout (ModelShape.block_layouts);
- attention_k_eq_v: a full layer has no v_proj (its values are its keys, block_kind "k_eq_v");
- the last num_kv_shared_layers blocks read the keys and values of the last earlier block of their layer type
  (Gemma4TextConfig.kv_sharing_modes "reuse"): no k_proj, v_proj or k_norm, no cache (block_kind "kv_shared"),
  and with use_double_wide_mlp an MLP twice intermediate_size wide;
- per-layer input embeddings (hidden_size_per_layer_input > 0): embed_tokens_per_layer, vocab_size_per_layer_input
  rows of num_hidden_layers x hidden_size_per_layer_input, per_layer_model_projection (h -> layers x width) and
  per_layer_projection_norm, registered after the final norm; in each block per_layer_input_gate (h -> width),
  per_layer_projection (width -> h) and post_per_layer_input_norm. They are weights, not cache;
- enable_moe_block: in every block, beside the MLP, a router (scale h, per_expert_scale E, proj E x h), routed
  experts as two 3-D Parameters (E x 2I x h, E x h x I) and three more norms;
- v_norm and the router's norm have no scale (no parameters); layer_scalar is a buffer.

The cache: sliding layers keep the window, full layers every token, shared layers none (cache_utils.py gives a
"reuse" layer a dummy layer). Activations: the forward pass is traced (block, rms_norm below: Gemma4RMSNorm's
pow keeps the mean of squares, v_norm, k_eq_v values, one rotary pair per layer type at its own head size, the
per-layer inputs, the store blocks' shared_kv_states; moe_step and router: the MoE block beside the MLP, with
transformers' default grouped_mm experts); the configs it has no steps for (shared keys and values without per-layer
inputs or from the first block, one layer type at two head sizes) are refused by name (trace_refusal) and keep the
textbook model and no fits verdict, as an untraced type does.
Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from functools import partial

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder, _moe
from ._parts import ParamTensor, linear, norm
from ._steps import Pass, dims, kv_cache
from .gemma2 import GEMMA_FIELDS, softcap
from .record import QK_NORM, Architecture, decoder_fields, full_every

K_EQ_V, KV_SHARED = "k_eq_v", "kv_shared"
# the last block of each layer type before the shared ones (Gemma4TextConfig.kv_sharing_modes "store", even when no
# block shares): its keys and values go into shared_kv_states, alive until the forward returns (block_kind)
KV_STORE, K_EQ_V_STORE = "kv_store", "k_eq_v_store"
NO_V_PROJ = (K_EQ_V, K_EQ_V_STORE)
LAYER_TYPES = ("sliding_attention", "full_attention")
# the embedding-group tensors Gemma4TextModel registers after its final norm
PER_LAYER_TENSORS = ("embed_tokens_per_layer", "per_layer_model_projection.weight",
                     "per_layer_projection_norm.weight")


def layer_types(config, layers) -> list:
    """Gemma4TextConfig.__post_init__: layer_types as given, else every sixth block full; the last block is forced
    to full attention either way."""
    given = config.get("layer_types")
    if given is None:
        given = list(full_every(6, layers))
    if not isinstance(given, list) or len(given) != layers or any(t not in LAYER_TYPES for t in given):
        raise ValueError(f"config field 'layer_types' must list one of {', '.join(LAYER_TYPES)} per block "
                         f"({layers}); got {validate.describe(given)}")
    return given[:-1] + ["full_attention"]


def sharing_modes(types, shared) -> list:
    """Gemma4TextConfig.kv_sharing_modes: "reuse" for the last `shared` blocks, "store" for the last earlier block
    of each layer type, else None; refused, as transformers refuses it, when a shared block's type has no earlier
    block."""
    layers = len(types)
    if shared == layers:
        return ["reuse"] * layers
    first = layers - shared
    if set(types[:first]) != set(types):
        raise ValueError(f"config field 'num_kv_shared_layers' {shared} leaves no earlier block of every layer type "
                         "the shared blocks read (transformers refuses it too); lower it or change layer_types")
    modes = [None if i < first else "reuse" for i in range(layers)]
    for kind in set(types):
        modes[max(i for i in range(first) if types[i] == kind)] = "store"
    return modes


def full_layer_overrides(config, get, types) -> dict:
    """{block: (head_dim, kv heads)} of the blocks whose attention differs from the config's own: per_layer_config
    as a saved config.json writes it, else Gemma4TextConfig.__post_init__'s rule (every full block at
    global_head_dim, and at num_global_key_value_heads when attention_k_eq_v)."""
    layers = len(types)
    given = config.get("per_layer_config")
    base = (get("head_dim"), get("num_key_value_heads"))
    if given is None:
        heads = get("num_global_key_value_heads", None) if get.flag("attention_k_eq_v", False) else None
        full = (get("global_head_dim", 512), heads or base[1])
        return {i: full for i, t in enumerate(types) if t == "full_attention"}
    if not isinstance(given, dict):
        raise ValueError(f"config field 'per_layer_config' must map block indices to head_dim and "
                         f"num_key_value_heads; got {validate.describe(given)}")
    overrides = {}
    for key, fields in given.items():
        index = int(key) if isinstance(key, (int, str)) and str(key).isdigit() else None
        if index is None or index >= layers or not isinstance(fields, dict) or set(fields) - {"head_dim",
                                                                                               "num_key_value_heads"}:
            raise ValueError(f"config field 'per_layer_config' must map block indices (0 to {layers - 1}) to "
                             f"head_dim and num_key_value_heads only; got {validate.describe(key)}: "
                             f"{validate.describe(fields)}")
        overrides[index] = tuple(validate.count(f"config field 'per_layer_config' {key} {name}",
                                                fields.get(name, default))
                                 for name, default in (("head_dim", base[0]), ("num_key_value_heads", base[1])))
    return overrides


def read_options(config, get):
    bidirectional = config.get("use_bidirectional_attention")
    if bidirectional not in (None, "vision"):
        raise ValueError(f"config field 'use_bidirectional_attention' is {validate.describe(bidirectional)}; memmath "
                         "models Gemma 4 as a causal model only (null, or 'vision', which changes nothing in a text "
                         "model)")
    layers = get("num_hidden_layers")
    types = layer_types(config, layers)
    shared = get("num_kv_shared_layers", 0, low=0)
    if shared > layers:
        raise ValueError(f"config field 'num_kv_shared_layers' must be from 0 to num_hidden_layers ({layers}); "
                         f"got {shared}")
    modes = sharing_modes(types, shared)
    overrides = full_layer_overrides(config, get, types)
    k_eq_v, double = get.flag("attention_k_eq_v", False), get.flag("use_double_wide_mlp", False)
    width = get("intermediate_size")
    per_block = []
    for i in range(layers):
        changes = ()
        if i in overrides:
            changes += (("head_dim", overrides[i][0]), ("n_kv_heads", overrides[i][1]))
        if modes[i] == "reuse":
            changes += (("block_kind", KV_SHARED),) + ((("intermediate_size", 2 * width),) if double else ())
        elif k_eq_v and types[i] == "full_attention":
            changes += (("block_kind", K_EQ_V_STORE if modes[i] == "store" else K_EQ_V),)
        elif modes[i] == "store":
            changes += (("block_kind", KV_STORE),)
        per_block.append(changes)
    layouts = {}
    for i, changes in enumerate(per_block):
        if changes:
            layouts.setdefault(changes, []).append(i)
    options = {"qk_norm": "head", "norm_layout": "sandwich",
               "final_softcap": softcap(config, "final_logit_softcapping", None),
               "sliding_window": get("sliding_window", 512), "layer_types": tuple(types),
               "block_layouts": tuple((tuple(blocks), changes) for changes, blocks in layouts.items())}
    per_layer = get("hidden_size_per_layer_input", 256, low=0)
    if per_layer:
        options["per_layer_input"] = (get("vocab_size_per_layer_input", 262144), per_layer)
    if get.flag("enable_moe_block", False):
        options.update(n_experts=get("num_experts"), experts_per_tok=get("top_k_experts"),
                       expert_intermediate_size=get("moe_intermediate_size"))
        if options["experts_per_tok"] > options["n_experts"]:
            raise ValueError(f"config field 'top_k_experts' ({options['experts_per_tok']}) must be at most "
                             f"num_experts ({options['n_experts']})")
    return options


def attention_tensors(m) -> list:
    """Gemma4TextAttention in parameters() order: q_proj, q_norm, then (not in a shared block) k_norm, k_proj and
    v_proj (none with attention_k_eq_v), then o_proj; v_norm has no scale."""
    h, a, kv, d, ab = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias
    tensors = linear("self_attn.q_proj", "attention", h, a * d, ab) + norm("self_attn.q_norm", d, False)
    if m.block_kind != KV_SHARED:
        tensors += norm("self_attn.k_norm", d, False) + linear("self_attn.k_proj", "attention", h, kv * d, ab)
        if m.block_kind not in NO_V_PROJ:
            tensors += linear("self_attn.v_proj", "attention", h, kv * d, ab)
    return tensors + linear("self_attn.o_proj", "attention", a * d, h, ab)


def tensors(m, group: str) -> list:
    """Gemma4ForCausalLM's tensors: the embeddings (and the per-layer embedding, its projection and norm), a
    block in Gemma4TextDecoderLayer's parameters() order, the final norm, the head."""
    h = m.hidden_size
    if group == "embeddings":
        out = [ParamTensor(m.architecture.embedding, "embeddings", (m.vocab_size, h))]
        if m.per_layer_input:
            rows, width = m.per_layer_input
            out += [ParamTensor(PER_LAYER_TENSORS[0], "embeddings", (rows, m.n_layers * width))]
            out += linear("per_layer_model_projection", "embeddings", h, m.n_layers * width, False)
            out += norm("per_layer_projection_norm", width, False)
        return out
    if group != "layer":
        return _decoder.tensors(m, group)
    inner = m.intermediate_size
    out = (attention_tensors(m) + linear("mlp.gate_proj", "mlp", h, inner, False)
           + linear("mlp.up_proj", "mlp", h, inner, False) + linear("mlp.down_proj", "mlp", inner, h, False))
    for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        out += norm(name, h, False)
    if m.per_layer_input:
        width = m.per_layer_input[1]
        out += (linear("per_layer_input_gate", "mlp", h, width, False)
                + linear("per_layer_projection", "mlp", width, h, False) + norm("post_per_layer_input_norm", h, False))
    if m.n_experts:
        e, ei = m.n_experts, m.expert_intermediate_size
        out += [ParamTensor("router.scale", "mlp", (h,)), ParamTensor("router.per_expert_scale", "mlp", (e,))]
        out += linear("router.proj", "mlp", h, e, False)
        out += [ParamTensor("experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
                ParamTensor("experts.down_proj", "mlp", (e, h, ei))]
        for name in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"):
            out += norm(name, h, False)
    return out


def lora_table(m) -> dict:
    """peft 0.21's names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj as nn.Linear in every block
    that has them): a shared block has no k_proj or v_proj, a k_eq_v block no v_proj. The router (router.proj) and
    the routed experts (3-D Parameters that peft does not convert for gemma4) are not counted."""
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    table = {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d),
             "o": ("o_proj", a * d, h), "gate": ("gate_proj", h, inner), "up": ("up_proj", h, inner),
             "down": ("down_proj", inner, h),
             "shared_gate": "Gemma 4 has no shared expert"}
    moe = ("memmath does not count LoRA on Gemma 4's router (router.proj) or routed experts yet"
           if m.n_experts else "a Gemma 4 block without enable_moe_block has no router or routed experts")
    table.update(router=moe, experts=moe)
    if m.block_kind == KV_SHARED:
        why = "a block sharing an earlier block's keys and values (num_kv_shared_layers) has no k_proj or v_proj"
        table.update(k=why, v=why)
    elif m.block_kind in NO_V_PROJ:
        table["v"] = "a full-attention block with attention_k_eq_v has no v_proj (its values are its keys)"
    return table


def all_linear_refusal(m) -> str:
    """peft's all-linear also adapts the per-layer input linears (and per_layer_model_projection outside the blocks)
    and the router's proj, which memmath's target names do not cover."""
    if not (m.per_layer_input or m.n_experts):
        return ""
    return ("peft's all-linear also adapts per_layer_input_gate, per_layer_projection and per_layer_model_projection "
            "(per-layer input embeddings) and router.proj (enable_moe_block), which memmath does not count yet; name "
            "the targets (q, k, v, o, gate, up, down)")


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every block that is not shared (a shared block's cache layer is a dummy one)."""
    return _decoder.unshared_kv_cache_values(shape, context_len=context_len, batch_size=batch_size,
                                             after_prefill=after_prefill,
                                             shared=lambda layout: layout.block_kind == KV_SHARED)


# ---- the forward pass (modeling_gemma4.py) -----------------------------------------------------------------------
def rms_norm(tr: Trace, x: Tensor, trainable: bool, name: str, *, rows=None, width=None, scale=True) -> Tensor:
    """Gemma4RMSNorm: x.float() * torch.pow(mean(x^2) + eps, -0.5), times weight.float() (with_scale), type_as(x).

    Unlike LlamaRMSNorm's rsqrt, which keeps its output, pow(ms, -0.5) keeps its input: the product keeps the fp32 x
    and the power's output, so a norm whose input needs a gradient keeps x in fp32 (x itself in fp32), the mean of
    squares and its power, 4 bytes a row each. Times the weight: the fp32 normalized x when the weight trains, and
    weight.float() when x needs a gradient (in a 16-bit model a new fp32 vector of `width`; in fp32 the parameter).
    v_norm (scale=False) has no weight."""
    n = tr.t if rows is None else rows
    x32 = x if x.elem == 4 else tr.tmp(x.numel, 4, x)
    square = tr.tmp(x.numel, 4, x32)
    mean_sq = tr.new(n, 4, x.grad)  # mean(x^2) + eps
    tr.use(square)
    power = tr.new(n, 4, x.grad)  # torch.pow(., -0.5)
    tr.use(mean_sq)
    normed = tr.new(x.numel, 4, x.grad)
    tr.use(x32, power)
    if x.grad:
        tr.save(x32, f"{name} input in fp32")
        tr.save(mean_sq, f"{name} mean of squares (fp32, pow input)")
        tr.save(power, f"{name} pow(mean of squares, -0.5) (fp32)")
    if scale:
        if trainable:
            tr.save(normed, f"{name} normalized input (fp32)")
        if x.grad and tr.e != 4:
            tr.save(tr.new(width, 4, trainable), f"{name} weight.float() (fp32)")
        product = tr.new(x.numel, 4, x.grad or trainable)
        tr.use(normed)
        normed = product
    if tr.e == 4:
        return normed
    out = tr.new(x.numel, tr.e, normed.grad)  # type_as(x)
    tr.use(normed)
    return out


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma4TextDecoderLayer: Gemma 3's sandwich-normed block with Gemma4RMSNorm (rms_norm above) everywhere, q/k
    norms over each head, a v_norm without scale, attention at scaling 1.0 without softcapping (no memory of its own),
    k_eq_v blocks whose values are their k_proj output (normed twice: k_norm and v_norm), gelu_pytorch_tanh(gate) * up,
    and hidden_states *= layer_scalar, an in-place product with a buffer that keeps nothing."""
    dm, t = dims(shape), tr.t
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    lora = p.lora_of

    def norm_h(y, name):
        return rms_norm(tr, y, trainable, name, width=h)

    xn = norm_h(x, "input_layernorm")
    input_path = tr.bytes_in(tr.region)  # what the input norm saved
    q = tr.linear(xn, t * a * d, trainable, lora("q_proj"), "q_proj")
    q = tr.rotary(rms_norm(tr, q, trainable, "q_norm", rows=t * a, width=d), p.tables)
    if shape.block_kind == KV_SHARED:
        # shared_kv_states[layer_type]: the store block's k and v (after its cache.update), counted there
        k, v = (tr.new(t * kv * d, tr.e, True, existing=True) for _ in range(2))
        return rest_of_block(tr, shape, x, q, k, v, trainable, p)
    before_kv = tr.bytes_in(tr.region)
    k = tr.linear(xn, t * kv * d, trainable, lora("k_proj"), "k_proj")
    v = k if shape.block_kind in NO_V_PROJ else tr.linear(xn, t * kv * d, trainable, lora("v_proj"), "v_proj")
    k = tr.rotary(rms_norm(tr, k, trainable, "k_norm", rows=t * kv, width=d), p.tables)
    v = rms_norm(tr, v, trainable, "v_norm", rows=t * kv, scale=False)
    if p.cache:  # cache.update (modeling_gemma4.py Gemma4TextAttention.forward)
        k, v = kv_cache(tr, k, v)
    if shape.block_kind in (KV_STORE, K_EQ_V_STORE):
        # k_proj's (or v_proj's LoRA A's) input: xn itself, saved first by q_proj (or its LoRA A) where both keep it
        kv_keeps_xn = trainable or lora("k_proj") or (lora("v_proj") and shape.block_kind not in NO_V_PROJ)
        if kv_keeps_xn and id(xn.storage) in tr.saved:
            input_path = input_path + xn.storage.nbytes
        stored(tr, k, v, held=tr.bytes_in(tr.region) - before_kv + input_path, checkpointed=p.checkpointed)
    return rest_of_block(tr, shape, x, q, k, v, trainable, p)


def rest_of_block(tr: Trace, shape, x: Tensor, q: Tensor, k: Tensor, v: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma4TextDecoderLayer from the attention kernel on: o_proj, the MLP and the per-layer input step."""
    dm, t = dims(shape), tr.t
    h, a, d = dm["h"], dm["a"], dm["d"]
    lora = p.lora_of

    def norm_h(y, name):
        return rms_norm(tr, y, trainable, name, width=h)

    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    out = norm_h(tr.linear(ctx, t * h, trainable, lora("o_proj"), "o_proj"), "post_attention_layernorm")
    r1 = tr.add(x, out)
    prod = tr.silu_times(*_decoder.gate_up(tr, shape, norm_h(r1, "pre_feedforward_layernorm"), trainable, p), "GeGLU",
                         act_name=shape.hidden_act)
    out = tr.linear(prod, t * h, trainable, lora("down_proj"), "down_proj")
    if shape.n_experts:
        out = moe_step(tr, shape, r1, out, trainable, p)
    hs = tr.add(r1, norm_h(out, "post_feedforward_layernorm"))
    if shape.per_layer_input:
        return per_layer_step(tr, shape, x, hs, trainable, p)
    hs.per_layer = getattr(x, "per_layer", None)
    return hs


def moe_step(tr: Trace, shape, r1: Tensor, mlp_out: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma4TextDecoderLayer's MoE block beside the MLP (enable_moe_block): post_feedforward_layernorm_1 on the MLP's
    output; the router and pre_feedforward_layernorm_2 each on the block's residual r1 (the MLP's input before its
    norm); the routed experts (_moe.routed_experts: transformers 5.24's default grouped_mm experts, integrations/
    moe.py, with Gemma4TextExperts' act_fn in _apply_gate: gelu_pytorch_tanh(gate) * up, which keeps what the dense
    MLP's GeGLU keeps) at fp32 routing weights, summed in fp32 and cast back; post_feedforward_layernorm_2 on them; the
    two summed."""
    h = shape.hidden_size
    dense = rms_norm(tr, mlp_out, trainable, "post_feedforward_layernorm_1", width=h)
    weights = router(tr, shape, r1, trainable)
    normed = rms_norm(tr, r1, trainable, "pre_feedforward_layernorm_2", width=h)

    def geglu(tr: Trace, gate_up: Tensor) -> Tensor:  # gate_up.chunk(2, dim=-1): two views of one storage
        gate, up = (Tensor(gate_up.numel // 2, gate_up.elem, gate_up.grad, gate_up.storage) for _ in range(2))
        return tr.silu_times(gate, up, "experts GeGLU", act_name=shape.hidden_act)

    routed = _moe.routed_experts(tr, shape, normed, weights, trainable, p.lora_of, apply_gate=geglu)
    routed = rms_norm(tr, routed, trainable, "post_feedforward_layernorm_2", width=h)
    return tr.add(dense, routed)


def router(tr: Trace, shape, x: Tensor, trainable: bool) -> Tensor:
    """Gemma4TextRouter on the residual x (t x h): norm (a Gemma4RMSNorm without scale), * scale (keeps the normed x
    when scale trains), * h^-0.5 (a Python float: keeps nothing), proj (keeps its input when it trains), softmax in
    fp32 (a cast of 16-bit logits first; keeps its output), topk (keeps its int64 indices), the in-place division by
    the top-k sum (keeps the sum and autograd's copy of the weights before it), then * per_expert_scale[top_k_index]:
    the gather keeps the indices when per_expert_scale trains; the fp32 product keeps the gathered scales (model
    dtype) when the weights need a gradient and the divided weights when the scales train. Returns the fp32 routing
    weights (t x k)."""
    t, e, h = tr.t, tr.e, shape.hidden_size
    n_exp, rows = shape.n_experts, tr.t * shape.experts_per_tok
    normed = rms_norm(tr, x, trainable, "router.norm", width=h, scale=False)
    if trainable:
        tr.save(normed, "router norm output (router.scale's product input)")
    scaled = tr.new(t * h, e, normed.grad or trainable)  # * self.scale
    tr.use(normed)
    scaled = tr.tmp(t * h, e, scaled)  # * self.scalar_root_size
    scaled.grad = normed.grad or trainable
    logits = _moe.router_logits(tr, scaled, h, n_exp, trainable, None)
    grad = logits.grad
    # softmax(..., dtype=torch.float32), topk, top_k_weights /= top_k_weights.sum(dim=-1, keepdim=True) in place
    values, indices = _moe.softmax_top_k(tr, logits, t, n_exp, rows, normalize=True)
    scales = tr.new(rows, e, trainable)  # self.per_expert_scale[top_k_index]
    tr.use(indices)
    if trainable:
        tr.save(indices, "router top-k indices (int64)")
        tr.save(values, "router top-k weights (fp32, per_expert_scale's product input)")
    if grad:
        tr.save(scales, "router per_expert_scale gathered (the routing weights' product input)")
    weights = tr.new(rows, 4, grad or trainable)
    tr.use(values, scales)
    return weights


def stored(tr: Trace, k: Tensor, v: Tensor, *, held, checkpointed: bool):
    """A "store" block puts its k and v into shared_kv_states, a dict of Gemma4TextModel.forward that holds them until
    the forward returns (saved or not). Under gradient checkpointing the dict is a keyword argument that
    GradientCheckpointingLayer's partial keeps for the recomputation, so the forward's k and v stay alive into
    backward, and the recomputation puts the recomputed k and v there again: they and the autograd graph behind them (what the input norm, k_proj, v_proj, k_norm and v_norm saved again) stay
    alive until backward ends (found when checkpointed CPU steps peaked 11-24% over the trace without it: exactly
    these bytes per store block). `held`: the bytes this recomputation saved on k's and v's way."""
    for x in (k, v):
        x.storage.kept = True
    if checkpointed and tr.saving:
        kv = sum(x.storage.nbytes for x in {id(x.storage): x for x in (k, v)}.values()
                 if id(x.storage) not in tr.saved and not x.storage.existing)
        # the forward's k and v, which the kept dict holds from the block's forward until its recomputation
        tr.__dict__["held_through_backward"] = kv
        tr.__dict__["held_to_backward_end"] = held  # from the recomputation on, beside the recomputed k and v


def embeddings(tr: Trace, shape, trains: bool, *, dropout, input_grad_hook) -> Tensor:
    """Gemma4TextModel's embeddings: the scaled token embedding and, with per-layer inputs, get_per_layer_inputs and
    project_per_layer_inputs: embed_tokens_per_layer(ids) * sqrt(width) (a buffer; the same ids), and
    per_layer_model_projection(inputs_embeds) * h^-0.5 (a Python float) normed over each layer's width
    (Gemma4RMSNorm over t x layers rows), summed and * 2^-0.5: per_layer_inputs, b x s x layers x width, which every
    block reads a view of. The returned input carries it as `per_layer` (its storage, saved once)."""
    x = _decoder.embeddings(tr, shape, trains, dropout=dropout, input_grad_hook=input_grad_hook)
    if not shape.per_layer_input:
        return x
    t, e, width = tr.t, tr.e, shape.per_layer_input[1]
    n = t * shape.n_layers * width
    looked_up = tr.new(n, e, trains)  # embed_tokens_per_layer: its ids are the token embedding's, saved there
    token_part = tr.tmp(n, e, looked_up)  # * embed_scale, a buffer
    token_part.grad = trains
    # per_layer_model_projection keeps inputs_embeds when it trains; in fp32 that is the storage the first block's
    # input norm (or checkpoint) keeps too, counted there once
    projected = tr.linear(x, n, trains and e != 4, None, "per_layer_model_projection")
    projected.grad = projected.grad or trains or x.grad
    scaled = tr.tmp(n, e, projected)  # * per_layer_model_projection_scale (a Python float)
    scaled.grad = projected.grad
    normed = rms_norm(tr, scaled, trains, "per_layer_projection_norm", rows=t * shape.n_layers, width=width)
    summed = tr.new(n, e, normed.grad or token_part.grad)
    tr.use(normed, token_part)
    per_layer = tr.new(n, e, summed.grad)  # * per_layer_input_scale (a Python float)
    tr.use(summed)
    per_layer.storage.kept = True  # a local of the model's forward until it returns
    x.per_layer = per_layer
    return x


def per_layer_step(tr: Trace, shape, x: Tensor, hs: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma4TextDecoderLayer's per-layer input, after the MLP: residual + post_per_layer_input_norm(
    per_layer_projection(act(per_layer_input_gate(hs)) * per_layer_input)). per_layer_input is a view of the model's
    per_layer_inputs: the product keeps that whole storage, once for every block (x.per_layer; a block traced alone
    gets one that exists already)."""
    t, h, width = tr.t, shape.hidden_size, shape.per_layer_input[1]
    inputs = getattr(x, "per_layer", None)
    if inputs is None:
        inputs = tr.new(t * shape.n_layers * width, tr.e, True, existing=True)
    gate = tr.linear(hs, t * width, trainable, p.lora_of("per_layer_input_gate"), "per_layer_input_gate")
    act = tr.gelu(gate, "per-layer input gate")  # gelu_pytorch_tanh keeps its input
    if act.grad:
        tr.save(inputs, "per-layer inputs (one storage, every block's view)")
    if inputs.grad:
        tr.save(act, "per-layer input gate activation")
    prod = tr.new(t * width, tr.e, act.grad or inputs.grad)
    tr.use(act, inputs)
    out = tr.linear(prod, t * h, trainable, p.lora_of("per_layer_projection"), "per_layer_projection")
    out = rms_norm(tr, out, trainable, "post_per_layer_input_norm", width=h)
    result = tr.add(hs, out)
    result.per_layer = getattr(x, "per_layer", None)
    return result


def final_norm(tr: Trace, shape, x: Tensor, trainable: bool, name: str) -> Tensor:
    """Gemma4TextModel.norm, a Gemma4RMSNorm over h."""
    return rms_norm(tr, x, trainable, name, width=shape.hidden_size)


def _type_head_sizes(shape) -> dict:
    sizes = {}
    for layout, blocks in shape.layouts():
        for i in blocks:
            sizes.setdefault(shape.layer_types[i], set()).add(layout.rotary_dim or layout.head_dim)
    return sizes


def rotary_widths(shape) -> dict:
    """{layer type: its cos/sin tables' width}: Gemma4TextRotaryEmbedding computes one pair per layer type, at that
    type's head size (a sliding block's head_dim, a full block's global_head_dim)."""
    return {kind: max(sizes) for kind, sizes in _type_head_sizes(shape).items()}


def _reads_first_block(shape) -> bool:
    """Whether a shared block reads the keys and values that block 0 stores."""
    kinds = {i: layout.block_kind for layout, blocks in shape.layouts() for i in blocks}
    types = shape.layer_types
    return kinds[0] in (KV_STORE, K_EQ_V_STORE) and any(
        kind == KV_SHARED and types[i] == types[0] for i, kind in kinds.items())


def trace_refusal(shape) -> str:
    """Why the trace does not replay this Gemma 4 config ("" when it does): the options it has no steps for."""
    kinds = {layout.block_kind for layout, _ in shape.layouts()}
    missing = [why for on, why in (
        # Gemma4TextModel._maybe_slice_kv_shared_inputs slices per_layer_inputs, None without them: a TypeError
        (KV_SHARED in kinds and not shape.per_layer_input, "blocks sharing keys and values without per-layer inputs "
         "(num_kv_shared_layers > 0 with hidden_size_per_layer_input 0, whose forward fails in transformers 5.24)"),
        # whether the shared blocks' k and v need a gradient then depends on the method (the first block's input
        # needs none under LoRA), which a block's trace does not see
        (_reads_first_block(shape),
         "blocks sharing the keys and values of the first block (lower num_kv_shared_layers or change layer_types)"),
        (any(len(sizes) > 1 for sizes in _type_head_sizes(shape).values()),
         "blocks of one layer type at different head sizes (per_layer_config)"))
        if on]
    if not missing:
        return ""
    return f"traces Gemma 4 configs without {' or '.join(missing)}, which this config has"


ARCHITECTURE = Architecture(
    model_type="gemma4_text", family="llama", title="Gemma 4 (text)",
    source="configuration_gemma4.py, modeling_gemma4.py",
    fields=decoder_fields({**{k: v for k, v in GEMMA_FIELDS.items()
                              if k not in ("attn_logit_softcapping", "query_pre_attn_scalar")}, **QK_NORM,
                           "use_bidirectional_attention": "refused unless null or 'vision'",
                           "global_head_dim": "a full-attention block's head size (default 512)",
                           "num_global_key_value_heads": "a full-attention block's key/value heads with "
                                                         "attention_k_eq_v",
                           "per_layer_config": "per block head_dim and num_key_value_heads (a saved config.json)",
                           "attention_k_eq_v": "full-attention blocks without v_proj",
                           "num_kv_shared_layers": "the last blocks, without k/v projections or cache",
                           "use_double_wide_mlp": "a shared block's MLP twice intermediate_size",
                           "hidden_size_per_layer_input": "per-layer input embedding width (0: none)",
                           "vocab_size_per_layer_input": "per-layer input embedding rows",
                           "enable_moe_block": "a mixture of experts beside every block's MLP",
                           "num_experts": "routed experts", "top_k_experts": "experts per token",
                           "moe_intermediate_size": "one expert's width"},
                          drop=("hidden_act",)),
    defaults={"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
              "sliding_window": 512},
    activation_field="hidden_activation", activations=("gelu_pytorch_tanh",),
    read_options=read_options, tensors=tensors, lora_modules=lora_table, norms_last=False,
    late_embeddings=PER_LAYER_TENSORS,
    all_linear_refusal=all_linear_refusal, not_all_linear=("router", "experts"), kv_cache_values=kv_cache_values,
    prefill_phases=None, scaled_embedding=True, rotary_per_layer_type=True, both_masks_always=True,
    trace_embeddings=embeddings, trace_block=block, trace_head=partial(_decoder.head_and_loss, norm=final_norm),
    traced_activations=("gelu_pytorch_tanh",), trace_refusal=trace_refusal, rotary_widths=rotary_widths,
    routing_weights_fp32=True,  # the top-k weights stay fp32 (softmax in fp32, times per_expert_scale)
    # Gemma4RMSNorm's backward (x * pow(mean(x^2) + eps, -0.5) * weight, in fp32) past the weight's product: the
    # gradient times the power, the mean's expanded gradient, pow(x, 1), 2 x and their product, t x h fp32 each
    norm_backward_widths=5,
    checkpoint_held_arguments=True,
    checkpointed_peak_refusal=("with checkpointing, its store blocks keep their keys and values (shared_kv_states, "
                               "held by the checkpoint's arguments) and their recomputed graph to the end of backward; "
                               "priced, held-out CPU steps still peaked up to 2% above the prediction (per-layer inputs, "
                               "LoRA, fp32) and others 7% below it"),
)
