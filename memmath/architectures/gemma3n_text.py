"""Gemma 3n's language model (transformers 5.24 configuration_gemma3n.py Gemma3nTextConfig, modeling_gemma3n.py
Gemma3nForCausalLM), whose defaults are gemma-3n-E4B's text model (@auto_docstring(checkpoint="google/gemma-3n-E4B")):
Gemma 4's per-layer input embeddings and shared keys and values (gemma4_text.py) on Gemma 3's blocks, and:

- AltUp (Baykal et al. 2023): altup_num_inputs copies of the hidden state; the model projects the embedding into
  the n - 1 extra copies (altup_projections) and back before the final norm (altup_unembed_projections), each an
  h x h linear; every block holds correct_output_scale (h), correction_coefs (n x n), prediction_coefs (n^2 x n),
  modality_router (n x h) and router_norm (h);
- LAuReL, a low-rank residual beside the attention: linear_left (r x h), linear_right (h x r), post_laurel_norm;
- a per-block MLP width (intermediate_size a list, one a block: a block layout per width);
- activation sparsity (activation_sparsity_pattern, by default 0.95 in the first 10 blocks of a deeper model): a
  gaussian top-k on the MLP's gate, no parameters (block_kind "sparse", joined by "+" to a sharing block's kind);
- every fifth block full by default (no block forced full); one head size for every block.

The cache: sliding blocks keep the window, full blocks every token, shared blocks none (cache_utils.py gives a
"reuse" layer a dummy one). Activations: the forward pass is traced (embeddings, block, head below): the n x t x h
stack of AltUp copies that each block reads and returns, AltUp's predict (a matmul that keeps the stack and the
coefficients) and correct (the innovation repeated n times, the clamped correction weight), LAuReL, the sparse
blocks' std/relu cut, the per-layer input step on a clone of copy 0, every Gemma3nRMSNorm as gemma4_text.rms_norm
(in fp32 a norm of copy 0 keeps the whole stack: the copy is a view), the store blocks' shared_kv_states, and the
magnitude rescaling of the copies before the first block and after the last. It was checked to the byte against what
autograd keeps on the CPU (tests/test_families_gemma3n_trace.py) before traced was set. A config whose shared blocks
read the first block's keys and values is refused by name (trace_refusal). Held out after: saved activations to the
byte in 24 CPU settings of three more configs (with one copy, a step's recorder also counts the copy-0 magnitude's
graph that is dropped before backward), step peaks within 0.02%, but eager with repeated key/value heads and the
training cache 0.4-1.4% under in the forward (the cache holds the storing blocks' k and v copies to the forward's
end, which that attention does not keep, and hf_activations' cache_held prices only idle blocks'); a checkpointed
step's peak is refused (checkpointed_peak_refusal: 1-15% under).
Serving's prefill working set: the plain estimate."""

from __future__ import annotations

from .. import validate
from ..trace import Tensor, Trace
from . import _decoder
from ._parts import ParamTensor, linear, norm
from ._steps import INT64, Pass, dims, kv_cache
from .gemma2 import softcap
from .gemma4_text import (KV_SHARED, KV_STORE, LAYER_TYPES, PER_LAYER_TENSORS, rms_norm, rotary_widths, sharing_modes,
                          stored)
from .record import ATTENTION_BIAS, LAYER_TYPES_FIELD, QK_NORM, SLIDING_WINDOW, Architecture, decoder_fields

INTERMEDIATE_DEFAULT = 16384  # Gemma3nTextConfig.intermediate_size, one for every block
# a block whose MLP cuts its gate with the gaussian top-k (activation_sparsity_pattern > 0): a part of block_kind,
# joined with "+" to the key/value part (KV_SHARED, KV_STORE)
SPARSE = "sparse"


def kind_parts(m) -> set:
    """The parts of a block layout's block_kind ("kv_store+sparse": {"kv_store", "sparse"})."""
    return set(m.block_kind.split("+")) - {""}


def sparsities(config, layers) -> list:
    """Gemma3nTextConfig.__post_init__: activation_sparsity_pattern as given (one a block), else 0.95 for the first 10
    blocks of a model of more than 10, 0.0 for the rest."""
    given = config.get("activation_sparsity_pattern")
    if given is None:
        sparse = 10 if layers > 10 else 0
        return [0.95] * sparse + [0.0] * (layers - sparse)
    if not isinstance(given, list) or len(given) != layers or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1 for v in given):
        raise ValueError(f"config field 'activation_sparsity_pattern' must list a sparsity from 0 to below 1 for each "
                         f"of the {layers} blocks; got {validate.describe(given)}")
    return list(given)


def _altup_names(n) -> tuple:
    return tuple(f"{kind}.{i}.weight" for kind in ("altup_projections", "altup_unembed_projections")
                 for i in range(n - 1))


def widths(config, layers) -> list:
    """Gemma3nTextConfig.__post_init__: intermediate_size one for every block, or a list of one a block."""
    given = config.get("intermediate_size", INTERMEDIATE_DEFAULT)
    if given is None:
        given = INTERMEDIATE_DEFAULT
    if not isinstance(given, list):
        given = [given] * layers
    if len(given) != layers or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in given):
        raise ValueError(f"config field 'intermediate_size' must be a whole number or a list of one for each of the "
                         f"{layers} blocks; got {validate.describe(config.get('intermediate_size'))}")
    return [validate.count("config field 'intermediate_size'", w) for w in given]


def read_options(config, get):
    if config.get("use_bidirectional_attention"):
        raise ValueError("config field 'use_bidirectional_attention' is set; memmath models Gemma 3n as a causal "
                         "model only")
    layers = get("num_hidden_layers")
    given = config.get("layer_types")
    types = given if given is not None else ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                                             for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"config field 'layer_types' must list one of {', '.join(LAYER_TYPES)} per block "
                         f"({layers}); got {validate.describe(given)}")
    shared = get("num_kv_shared_layers", 15, low=0)
    if shared >= layers:
        raise ValueError(f"config field 'num_kv_shared_layers' must be from 0 to num_hidden_layers - 1 "
                         f"({layers - 1}): a shared block reads an earlier block's keys and values; got {shared}")
    # Gemma3nTextConfig.kv_sharing_modes: no block stores when none shares (Gemma 4's stores either way)
    modes = sharing_modes(types, shared) if shared else [None] * layers
    inner = widths(config, layers)
    sparse = sparsities(config, layers)
    layouts = {}
    for i in range(layers):
        kind = "+".join(part for part, on in ((KV_SHARED, modes[i] == "reuse"), (KV_STORE, modes[i] == "store"),
                                             (SPARSE, sparse[i] > 0)) if on)
        changes = ((("intermediate_size", inner[i]),) if inner[i] != inner[0] else ()) + (
            (("block_kind", kind),) if kind else ())
        if changes:
            layouts.setdefault(changes, []).append(i)
    return {"qk_norm": "head", "norm_layout": "sandwich", "intermediate_size": inner[0],
            "final_softcap": softcap(config, "final_logit_softcapping", 30.0),
            "sliding_window": get("sliding_window", 512), "layer_types": tuple(types),
            "block_layouts": tuple((tuple(blocks), changes) for changes, blocks in layouts.items()),
            "per_layer_input": (get("vocab_size_per_layer_input", 262144), get("hidden_size_per_layer_input", 256)),
            # (copies, LAuReL rank, correct_output_scale applied)
            "altup": (get("altup_num_inputs", 4), get("laurel_rank", 64), get.flag("altup_correct_scale", True))}


def tensors(m, group: str) -> list:
    """Gemma3nForCausalLM's tensors: the embedding and, after the final norm, the per-layer embedding, its
    projection and norm and the AltUp projections; a block in Gemma3nTextDecoderLayer's parameters() order."""
    h = m.hidden_size
    n, rank = m.altup[:2]
    if group == "embeddings":
        rows, width = m.per_layer_input
        return ([ParamTensor(m.architecture.embedding, "embeddings", (m.vocab_size, h)),
                 ParamTensor(PER_LAYER_TENSORS[0], "embeddings", (rows, m.n_layers * width))]
                + linear("per_layer_model_projection", "embeddings", h, m.n_layers * width, False)
                + norm("per_layer_projection_norm", width, False)
                + [t for name in _altup_names(n) for t in linear(name.removesuffix(".weight"), "embeddings", h, h,
                                                                    False)])
    if group != "layer":
        return _decoder.tensors(m, group)
    a, kv, d, ab, inner = m.n_heads, m.n_kv_heads, m.head_dim, m.attention_bias, m.intermediate_size
    out = linear("self_attn.q_proj", "attention", h, a * d, ab) + norm("self_attn.q_norm", d, False)
    if KV_SHARED not in kind_parts(m):
        out += (linear("self_attn.k_proj", "attention", h, kv * d, ab)
                + linear("self_attn.v_proj", "attention", h, kv * d, ab) + norm("self_attn.k_norm", d, False))
    out += linear("self_attn.o_proj", "attention", a * d, h, ab)
    out += (linear("mlp.gate_proj", "mlp", h, inner, False) + linear("mlp.up_proj", "mlp", h, inner, False)
            + linear("mlp.down_proj", "mlp", inner, h, False))
    for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        out += norm(name, h, False)
    out += ([ParamTensor("altup.correct_output_scale", "mlp", (h,))]
            + linear("altup.correction_coefs", "mlp", n, n, False) + linear("altup.prediction_coefs", "mlp", n, n * n,
                                                                             False)
            + linear("altup.modality_router", "mlp", h, n, False) + norm("altup.router_norm", h, False))
    out += (linear("laurel.linear_left", "attention", h, rank, False)
            + linear("laurel.linear_right", "attention", rank, h, False) + norm("laurel.post_laurel_norm", h, False))
    width = m.per_layer_input[1]
    return out + (linear("per_layer_input_gate", "mlp", h, width, False)
                  + linear("per_layer_projection", "mlp", width, h, False)
                  + norm("post_per_layer_input_norm", h, False))


def lora_table(m) -> dict:
    """peft 0.21's names q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; a shared block has no k_proj
    or v_proj."""
    table = _decoder.lora_table(m)
    moe = "Gemma 3n has no router or experts"
    table.update(router=moe, experts=moe, shared_gate=moe)
    if KV_SHARED in kind_parts(m):
        why = "a block sharing an earlier block's keys and values (num_kv_shared_layers) has no k_proj or v_proj"
        table.update(k=why, v=why)
    return table


def all_linear_refusal(m) -> str:
    """peft's all-linear also adapts AltUp's, LAuReL's and the per-layer inputs' linears."""
    return ("peft's all-linear also adapts AltUp's (correction_coefs, prediction_coefs, modality_router, "
            "altup_projections), LAuReL's (linear_left, linear_right) and the per-layer input linears, which memmath "
            "does not count yet; name the targets (q, k, v, o, gate, up, down)")


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every block that is not shared (a shared block's cache layer is a dummy one)."""
    return _decoder.unshared_kv_cache_values(shape, context_len=context_len, batch_size=batch_size,
                                             after_prefill=after_prefill,
                                             shared=lambda layout: KV_SHARED in kind_parts(layout))


# ---- the forward pass (modeling_gemma3n.py) ----------------------------------------------------------------------
def _copies(tr: Trace, shape) -> int:
    """altup_num_inputs: the copies of the hidden state."""
    return shape.altup[0]


def _stack(tr: Trace, shape, x: Tensor) -> Tensor:
    """The n copies of the hidden state a block reads and returns ([altup_num_inputs, b, s, h], one storage); a block
    or head traced alone gets a t x h stand-in from hf_activations, replaced by a stack with its flags."""
    numel = _copies(tr, shape) * tr.t * shape.hidden_size
    if x.numel == numel:
        return x
    stack = tr.new(numel, x.elem, x.grad, existing=x.storage.existing)
    stack.storage.kept = x.storage.kept
    stack.per_layer = getattr(x, "per_layer", None)
    return stack


def _copy(stack: Tensor, numel) -> Tensor:
    """stack[i]: a view, which keeps the whole stack's storage."""
    return Tensor(numel, stack.elem, stack.grad, stack.storage)


def _rescaled(tr: Trace, source: Tensor, target: Tensor, trains: bool, name: str) -> Tensor:
    """Gemma3nTextModel.forward's AltUp projection of one copy: proj(source) * target_magnitude / sqrt(clamp(mean(
    proj^2), 1e-5)), in the model's dtype. pow keeps proj's output, clamp its input (the mean), sqrt its output, the
    product target_magnitude, the quotient its dividend and divisor."""
    t, e = tr.t, tr.e
    out = tr.linear(source, source.numel, trains, None, name)
    grad = out.grad
    square = tr.tmp(out.numel, e, out)
    mean = tr.new(t, e, grad)
    tr.use(square)
    clamped = tr.tmp(t, e, mean)
    root = tr.new(t, e, grad)
    tr.use(clamped)
    product = tr.new(out.numel, e, grad or target.grad)
    tr.use(out, target)
    quotient = tr.new(out.numel, e, product.grad)
    tr.use(product, root)
    if grad:
        tr.save(out, f"{name} output (pow input)")
        tr.save(mean, f"{name} mean of squares (clamp input)")
        tr.save(root, f"{name} sqrt output")
    if target.grad:
        tr.save(out, f"{name} output (pow input)")
    if grad:
        tr.save(target, "AltUp target magnitude")
    if product.grad:
        tr.save(product, f"{name} output times the target magnitude")
    return quotient


def _magnitude(tr: Trace, x: Tensor, what: str, used: bool) -> Tensor:
    """torch.mean(x ** 2, dim=-1, keepdim=True) ** 0.5 in the model's dtype: pow keeps x (its storage), ** 0.5 the
    mean. used: another copy is rescaled to it; with one copy (altup_num_inputs 1) nothing reads it, and its graph,
    with what it saved, goes when the local is dropped, before backward (found on the held-out one-copy config: its
    forward kept t x h x e + 2 x t x e less than the trace had it)."""
    t, e = tr.t, tr.e
    square = tr.tmp(x.numel, e, x)
    mean = tr.new(t, e, x.grad)
    tr.use(square)
    root = tr.new(t, e, x.grad)
    tr.use(mean)
    if x.grad and used:
        tr.save(x, f"{what} (pow input)")
        tr.save(mean, f"{what} mean of squares (pow input)")
    return root


def embeddings(tr: Trace, shape, trains: bool, *, dropout, input_grad_hook) -> Tensor:
    """Gemma3nTextModel.forward up to the first block: the scaled token embedding; get_per_layer_inputs (torch.where
    makes new int64 ids for embed_tokens_per_layer, * sqrt(width), a buffer) and project_per_layer_inputs
    (per_layer_model_projection(inputs_embeds), *= a buffer in place, per_layer_projection_norm over t x layers rows,
    + the looked-up part, * a buffer): per_layer_inputs, which every block reads a view of (its storage carried as
    `per_layer`); then AltUp's copies: the embedding's magnitude, altup_projections (_rescaled) and torch.stack, the
    n x t x h stack the first block reads."""
    x = _decoder.embeddings(tr, shape, trains, dropout=dropout, input_grad_hook=input_grad_hook)
    t, e, h, n = tr.t, tr.e, shape.hidden_size, _copies(tr, shape)
    width = shape.per_layer_input[1]
    numel = t * shape.n_layers * width
    ids = tr.new(t, INT64)  # torch.where(in_table, input_ids, 0)
    if trains:
        tr.save(ids, "embed_tokens_per_layer indices (int64, torch.where)")
    looked_up = tr.new(numel, e, trains)
    tr.use(ids)
    token_part = tr.new(numel, e, trains)  # * embed_scale, a buffer
    tr.use(looked_up)
    projected = tr.linear(x, numel, trains, None, "per_layer_model_projection")  # *= a buffer, in place
    normed = rms_norm(tr, projected, trains, "per_layer_projection_norm", rows=t * shape.n_layers, width=width)
    summed = tr.new(numel, e, normed.grad or token_part.grad)
    tr.use(normed, token_part)
    per_layer = tr.new(numel, e, summed.grad)  # * per_layer_input_scale, a buffer
    tr.use(summed)
    per_layer.storage.kept = True  # a local of the model's forward until it returns
    if trains:
        # every block's per-layer product keeps it then (the stack needs a gradient): counted here once, and
        # existing for the blocks' traces, so that frozen blocks behind trainable embeddings count it too (the
        # first frozen block's trace is not counted; found measuring Freeze after the trace was committed)
        tr.save(per_layer, "per-layer inputs (one storage, every block's view)")
        per_layer.storage.existing = True
    target = _magnitude(tr, x, "AltUp: the embedding", n > 1)
    copies = [x] + [_rescaled(tr, x, target, trains, f"altup_projections.{i}") for i in range(n - 1)]
    stack = tr.new(n * t * h, e, any(c.grad for c in copies))
    tr.use(*copies)
    stack.per_layer = per_layer
    return stack


def _router_modalities(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextAltUp.compute_router_modalities: router_norm (a Gemma3nRMSNorm), * router_input_scale (a buffer),
    modality_router (h -> n), tanh in fp32 (keeps its output), type_as back."""
    t, e, h, n = tr.t, tr.e, shape.hidden_size, _copies(tr, shape)
    normed = rms_norm(tr, x, trainable, "altup.router_norm", width=h)
    scaled = tr.new(t * h, e, normed.grad)
    tr.use(normed)
    routed = tr.linear(scaled, t * n, trainable, p.lora_of("modality_router"), "altup.modality_router")
    wide = routed if e == 4 else tr.tmp(t * n, 4, routed)  # .float()
    tanh = tr.new(t * n, 4, routed.grad)
    tr.use(wide)
    if routed.grad:
        tr.save(tanh, "altup modalities tanh output (fp32)")
    if e == 4:
        return tanh
    out = tr.new(t * n, e, tanh.grad)  # type_as(x)
    tr.use(tanh)
    return out


def _predict(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextAltUp.predict: the modalities of copy 0, prediction_coefs (n -> n^2), torch.matmul of the stack
    (permuted, a view) with the coefficients (permuted, a view) keeps both, += the stack in place, .contiguous() of
    the permuted sum: a new n x t x h stack."""
    t, e, n = tr.t, tr.e, _copies(tr, shape)
    modalities = _router_modalities(tr, shape, _copy(x, t * shape.hidden_size), trainable, p)
    coefs = tr.linear(modalities, t * n * n, trainable, p.lora_of("prediction_coefs"), "altup.prediction_coefs")
    if coefs.grad:
        tr.save(x, "block input: the AltUp stack (predict matmul)")
    if x.grad:
        tr.save(coefs, "altup prediction coefficients (predict matmul)")
    product = tr.new(x.numel, e, x.grad or coefs.grad)
    tr.use(x, coefs)
    out = tr.new(x.numel, e, product.grad)  # (+= hidden_states, in place).contiguous()
    tr.use(product, x)
    return out


def _correct(tr: Trace, shape, predictions: Tensor, activated: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextAltUp.correct: the modalities of the block's output, activated - predictions[0] repeated n times,
    the correction coefficients (in training F.linear with correction_coefs' weight clamped to altup_coef_clip, a
    new n x n tensor it keeps), + 1.0, and their product with the repetition, which keeps both; +=
    predictions in place: the block's new stack."""
    t, e, n = tr.t, tr.e, _copies(tr, shape)
    modalities = _router_modalities(tr, shape, activated, trainable, p)
    innovation = tr.new(activated.numel, e, activated.grad or predictions.grad)
    tr.use(activated, predictions)
    repeated = tr.new(predictions.numel, e, innovation.grad)
    tr.use(innovation)
    # correction_coefs.weight.clamp(-altup_coef_clip, altup_coef_clip) (a float in transformers 5.24, never None): a
    # new n x n tensor, which F.linear keeps beside the modalities
    weight = tr.new(n * n, e, trainable)
    if trainable:
        tr.save(modalities, "altup correction modalities (linear input)")
    if modalities.grad:
        tr.save(weight, "altup correction_coefs clamped weight")
    coefs = tr.new(t * n, e, modalities.grad or trainable)
    tr.use(modalities, weight)
    plus_one = tr.new(t * n, e, coefs.grad)
    tr.use(coefs)
    if plus_one.grad:
        tr.save(repeated, "altup innovation repeated to every copy")
    if repeated.grad:
        tr.save(plus_one, "altup correction coefficients + 1")
    corrected = tr.new(predictions.numel, e, repeated.grad or plus_one.grad)
    tr.use(repeated, plus_one, predictions)  # += predictions, in place
    corrected.grad = corrected.grad or predictions.grad
    return corrected


def _gaussian_topk(tr: Trace, gate: Tensor) -> Tensor:
    """Gemma3nTextMLP._gaussian_topk: relu(gate - (mean + std * icdf(sparsity))). torch.std keeps its input and
    output, the product the multiplier (a 0-d tensor in the model's dtype), relu its output."""
    t, e, g = tr.t, tr.e, gate.grad
    mean = tr.new(t, e, g)
    tr.use(gate)
    std = tr.new(t, e, g)
    tr.use(gate)
    multiplier = tr.new(1, e)
    scaled = tr.tmp(t, e, std, multiplier)
    cutoff = tr.new(t, e, g)
    tr.use(mean, scaled)
    shifted = tr.tmp(gate.numel, e, gate, cutoff)
    out = tr.new(gate.numel, e, g)
    tr.use(shifted)
    if g:
        tr.save(gate, "gate output (std input)")
        tr.save(std, "gate std output")
        tr.save(multiplier, "std multiplier (0-d)")
        tr.save(out, "activation sparsity relu output")
    return out


def _mlp(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextMLP: gate_proj (cut by _gaussian_topk in a sparse block), gelu_pytorch_tanh (keeps its input),
    up_proj, the product (keeps both factors), down_proj."""
    t, e, inner = tr.t, tr.e, shape.intermediate_size
    gate = tr.linear(x, t * inner, trainable, p.lora_of("gate_proj"), "gate_proj")
    if SPARSE in kind_parts(shape):
        gate = _gaussian_topk(tr, gate)
    act = tr.gelu(gate, "MLP gate")
    up = tr.linear(x, t * inner, trainable, p.lora_of("up_proj"), "up_proj")
    if act.grad:
        tr.save(up, "MLP up output")
    if up.grad:
        tr.save(act, "MLP GELU output")
    product = tr.new(t * inner, e, act.grad or up.grad)
    tr.use(act, up)
    return tr.linear(product, t * shape.hidden_size, trainable, p.lora_of("down_proj"), "down_proj")


def _attention(tr: Trace, shape, xn: Tensor, trainable: bool, p: Pass, input_path) -> Tensor:
    """Gemma3nTextAttention: q_proj, q_norm, rotary; k_proj, k_norm, rotary and v_proj, v_norm (no scale), or the
    store block's k and v in a shared block; the cache; a store block's shared_kv_states (gemma4_text.stored);
    attention at scaling 1.0; o_proj."""
    dm, t = dims(shape), tr.t
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    lora = p.lora_of
    parts = kind_parts(shape)
    q = tr.linear(xn, t * a * d, trainable, lora("q_proj"), "q_proj")
    q = tr.rotary(rms_norm(tr, q, trainable, "q_norm", rows=t * a, width=d), p.tables)
    if KV_SHARED in parts:
        # shared_kv_states[layer_type]: the store block's k and v, counted there
        k, v = (tr.new(t * kv * d, tr.e, True, existing=True) for _ in range(2))
    else:
        before_kv = tr.bytes_in(tr.region)
        k = tr.linear(xn, t * kv * d, trainable, lora("k_proj"), "k_proj")
        k = tr.rotary(rms_norm(tr, k, trainable, "k_norm", rows=t * kv, width=d), p.tables)
        v = tr.linear(xn, t * kv * d, trainable, lora("v_proj"), "v_proj")
        v = rms_norm(tr, v, trainable, "v_norm", rows=t * kv, scale=False)
        if p.cache:  # cache.update
            k, v = kv_cache(tr, k, v)
        if KV_STORE in parts:
            if (trainable or lora("k_proj") or lora("v_proj")) and id(xn.storage) in tr.saved:
                input_path = input_path + xn.storage.nbytes
            stored(tr, k, v, held=tr.bytes_in(tr.region) - before_kv + input_path, checkpointed=p.checkpointed)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", kv_contiguous=p.cache)
    return tr.linear(ctx, t * h, trainable, lora("o_proj"), "o_proj")


def _per_layer_input(tr: Trace, shape, x: Tensor, corrected: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextDecoderLayer's per-layer input: corrected[0].clone(), * correct_output_scale (altup_correct_scale;
    keeps the clone when the scale trains), per_layer_input_gate, gelu_pytorch_tanh, * this block's view of
    per_layer_inputs (which keeps that whole storage), per_layer_projection, post_per_layer_input_norm, added in place
    to copies 1 to n - 1."""
    t, e, h, width = tr.t, tr.e, shape.hidden_size, shape.per_layer_input[1]
    first = tr.new(t * h, e, corrected.grad)  # .clone()
    tr.use(corrected)
    if shape.altup[2]:
        scaled = tr.new(t * h, e, first.grad or trainable)
        tr.use(first)
        if trainable:
            tr.save(first, "altup corrected copy 0 (correct_output_scale input)")
        first = scaled
    inputs = getattr(x, "per_layer", None)
    if inputs is None:
        inputs = tr.new(t * shape.n_layers * width, e, True, existing=True)
    gate = tr.linear(first, t * width, trainable, p.lora_of("per_layer_input_gate"), "per_layer_input_gate")
    act = tr.gelu(gate, "per-layer input gate")
    if act.grad:
        tr.save(inputs, "per-layer inputs (one storage, every block's view)")
    if inputs.grad:
        tr.save(act, "per-layer input gate activation")
    product = tr.new(t * width, e, act.grad or inputs.grad)
    tr.use(act, inputs)
    out = tr.linear(product, t * h, trainable, p.lora_of("per_layer_projection"), "per_layer_projection")
    out = rms_norm(tr, out, trainable, "post_per_layer_input_norm", width=h)
    tr.use(corrected, out)  # corrected[1:] += out, in place
    corrected.grad = corrected.grad or out.grad
    corrected.per_layer = getattr(x, "per_layer", None)
    return corrected


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Gemma3nTextDecoderLayer on the n x t x h stack: AltUp's predict; input_layernorm on predictions[0] (a view:
    in fp32 the norm keeps the whole predictions stack); LAuReL (linear_left, linear_right, post_laurel_norm, + its
    input); the attention and post_attention_layernorm; (predictions[0] + attn + laurel) / sqrt(2);
    pre_feedforward_layernorm, the MLP, post_feedforward_layernorm, + that; AltUp's correct; the per-layer input.
    Every norm is a Gemma3nRMSNorm: gemma4_text.rms_norm's steps."""
    t, h = tr.t, shape.hidden_size
    lora = p.lora_of
    x = _stack(tr, shape, x)

    def norm_h(y, name):
        return rms_norm(tr, y, trainable, name, width=h)

    predictions = _predict(tr, shape, x, trainable, p)
    active = _copy(predictions, t * h)
    before = tr.bytes_in(tr.region)
    xn = norm_h(active, "input_layernorm")
    input_path = tr.bytes_in(tr.region) - before
    left = tr.linear(xn, t * shape.altup[1], trainable, lora("linear_left"), "laurel.linear_left")
    right = tr.linear(left, t * h, trainable, lora("linear_right"), "laurel.linear_right")
    laurel = tr.add(xn, norm_h(right, "laurel.post_laurel_norm"))
    attn = norm_h(_attention(tr, shape, xn, trainable, p, input_path), "post_attention_layernorm")
    summed = tr.add(tr.add(active, attn), laurel)
    attn_laurel = tr.new(t * h, tr.e, summed.grad)  # / math.sqrt(2)
    tr.use(summed)
    ffw = norm_h(_mlp(tr, shape, norm_h(attn_laurel, "pre_feedforward_layernorm"), trainable, p),
                 "post_feedforward_layernorm")
    activated = tr.add(attn_laurel, ffw)
    corrected = _correct(tr, shape, predictions, activated, trainable, p)
    return _per_layer_input(tr, shape, x, corrected, trainable, p)


def head(tr: Trace, shape, x: Tensor, *, final_norm_trains, head_trains, dropout):
    """Gemma3nTextModel.forward after the blocks: copy 0's magnitude (pow keeps the stack's storage), each other copy
    through altup_unembed_projections (_rescaled), torch.stack, its mean over the
    copies, the final norm (a Gemma3nRMSNorm); then the head, softcapping and the loss."""
    t, e, h, n = tr.t, tr.e, shape.hidden_size, _copies(tr, shape)
    stack = _stack(tr, shape, x)
    target = _magnitude(tr, _copy(stack, t * h), "AltUp: the last block's copy 0", n > 1)
    # altup_unembed_projections are embedding-group weights: what their own gradient needs, the stack, copy 0's
    # magnitude keeps already whenever the stack needs a gradient, and it needs none only when neither a block nor the
    # embeddings train; so they are traced as frozen
    copies = [_copy(stack, t * h)] + [_rescaled(tr, _copy(stack, t * h), target, False,
                                                f"altup_unembed_projections.{i}") for i in range(n - 1)]
    stacked = tr.new(n * t * h, e, any(c.grad for c in copies))
    tr.use(*copies)
    mean = tr.new(t * h, e, stacked.grad)
    tr.use(stacked)
    return _decoder.head_and_loss(tr, shape, mean, final_norm_trains=final_norm_trains, head_trains=head_trains,
                                  dropout=dropout, norm=_final_norm)


def _final_norm(tr: Trace, shape, x: Tensor, trainable: bool, name: str) -> Tensor:
    return rms_norm(tr, x, trainable, name, width=shape.hidden_size)


def trace_refusal(shape) -> str:
    """Why the trace does not replay this Gemma 3n config ("" when it does)."""
    kinds = {i: kind_parts(layout) for layout, blocks in shape.layouts() for i in blocks}
    types = shape.layer_types
    # whether the shared blocks' k and v need a gradient then depends on the method (the first block's input needs
    # none under LoRA), which a shared block's trace does not see
    if KV_STORE in kinds[0] and any(KV_SHARED in parts and types[i] == types[0] for i, parts in kinds.items()):
        return ("traces Gemma 3n configs without blocks sharing the keys and values of the first block, which this "
                "config has (lower num_kv_shared_layers or change layer_types)")
    return ""


ARCHITECTURE = Architecture(
    model_type="gemma3n_text", family="llama", title="Gemma 3n (text)",
    source="configuration_gemma3n.py, modeling_gemma3n.py",
    fields=decoder_fields({
        "attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
        **QK_NORM, "hidden_activation": "the MLP activation (Gemma's name for it)",
        "final_logit_softcapping": "softcapping of the logits (saved activations)",
        "intermediate_size": "MLP width, one for every block or a list of one a block",
        "num_kv_shared_layers": "the last blocks, without k/v projections or cache",
        "hidden_size_per_layer_input": "per-layer input embedding width",
        "vocab_size_per_layer_input": "per-layer input embedding rows",
        "altup_num_inputs": "AltUp's copies of the hidden state (its projections and coefficients)",
        "laurel_rank": "LAuReL's low-rank residual width",
        "activation_sparsity_pattern": "a gaussian top-k on the MLP gate per block: no parameters",
        "altup_coef_clip": "AltUp's coefficient clamp in training (a clamped copy of correction_coefs, n x n)",
        "altup_correct_scale": "AltUp's correct_output_scale applied to the per-layer input",
    }, drop=("hidden_act",)),
    defaults={"vocab_size": 262400, "hidden_size": 2048, "num_hidden_layers": 35, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 256, "tie_word_embeddings": True, "sliding_window": 512},
    activation_field="hidden_activation", activations=("gelu_pytorch_tanh",),
    read_options=read_options, tensors=tensors, lora_modules=lora_table, norms_last=False,
    late_embeddings=PER_LAYER_TENSORS + ("altup_projections.", "altup_unembed_projections."),
    all_linear_refusal=all_linear_refusal, kv_cache_values=kv_cache_values,
    prefill_phases=None, scaled_embedding=True, rotary_per_layer_type=True, both_masks_always=True,
    trace_embeddings=embeddings, trace_block=block, trace_head=head, traced_activations=("gelu_pytorch_tanh",),
    trace_refusal=trace_refusal,
    # one rotary pair per layer type; with it each block layout counts its own masked blocks' extras (_mixed_parts):
    # a shared block's repeated k and v are all extra, a store block's replace the k and v it would keep
    rotary_widths=rotary_widths,
    checkpointed_peak_refusal=("with checkpointing, the backward of a recomputed block holds more than memmath's "
                               "moments price (not located; one-copy configs too, so not only the n AltUp copies' "
                               "gradients): held-out CPU steps peaked 1-15% above the prediction")
)
