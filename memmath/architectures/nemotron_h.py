"""Nemotron-H and Nemotron Nano 2 / 3 (transformers 5.24 configuration_nemotron_h.py NemotronHConfig,
modeling_nemotron_h.py NemotronHForCausalLM): every block one mixer after one RMSNorm (NemotronHBlock: norm, then
mixer), its kind from config layers_block_type (or layer_types, or the legacy hybrid_override_pattern: M a Mamba-2
block, * attention, - an MLP, E a mixture of experts):

- linear_attention ("mamba"): a Mamba-2 mixer (_mamba2.py: mamba_num_heads heads of mamba_head_dim channels, n_groups
  groups of B and C of ssm_state_size values, a conv_kernel-wide convolution with a bias where use_conv_bias says,
  in_proj and out_proj biased where use_bias says);
- full_attention ("attention"): q, k, v, o without biases (NemotronHAttention), no rotary positions;
- mlp: up_proj and down_proj (NemotronHMLP: relu2, not gated; biases where mlp_bias says), intermediate_size wide;
- moe: NemotronHMoE, registering the routed experts (two 3-D Parameters, up_proj E x I x d and down_proj E x d x I, d
  the hidden size or moe_latent_size), the router's E x h weight (NemotronHTopkRouter, a sigmoid router whose
  e_score_correction_bias is a buffer), a shared expert (NemotronHMLP at moe_shared_expert_intermediate_size) and,
  where moe_latent_size is set, fc1_latent_proj (h -> d) and fc2_latent_proj (d -> h).

The model: embeddings, the blocks, norm_f and lm_head, never tied (NemotronHForCausalLM's _tied_weights_keys is
empty, so tie_word_embeddings changes no tensor). A 16-bit load keeps the router weight in fp32
(_keep_in_fp32_modules_strict: gate.weight; fp32_modules), as for DeepSeek-V3. Not modelled: the multi-token-prediction layers of
num_nextn_predict_layers, which NemotronHForCausalLM does not build (their checkpoint keys are ignored on load).

The cache: attention blocks keep keys and values, Mamba-2 blocks a conv state in the model's dtype and an fp32 SSM
state (mamba_ssm_cache_dtype float32), MLP and MoE blocks nothing. Activations: traced (block, below) down
transformers' PyTorch path of the Mamba-2 mixer (_mamba2.mixer), which the CPU always takes; on CUDA transformers calls
mamba-ssm's and causal-conv1d's kernels where installed, whose saved tensors differ (mixer_kernels: such a run keeps
the textbook model and no verdict); a MoE block runs GLM-4.5's router steps (glm4_moe.router) and transformers'
grouped_mm experts without a gate. Measured to the byte on the CPU (tests/test_families_mamba2_trace.py). Refused by
name: LoRA on the router or the routed experts (lora_trace_refusal) and _mamba2.trace_refusal's. Serving's prefill
working set: the plain estimate."""

from __future__ import annotations

from ..trace import Tensor, Trace
from . import _decoder, _mamba2, glm4_moe
from . import _moe as _moe_steps
from ._parts import ParamTensor, linear, norm
from ._steps import Pass
from .record import MOE, decoder_fields, refuse_true

MLP, EXPERTS = "mlp", "moe"  # ModelShape.block_kind of an MLP block and a MoE block (attention blocks: "")
_KINDS = {"linear_attention": _mamba2.LINEAR, "mamba": _mamba2.LINEAR, "full_attention": "",
          "attention": "", "mlp": MLP, "moe": EXPERTS}
_PATTERN = {"M": _mamba2.LINEAR, "*": "", "-": MLP, "E": EXPERTS}
FIELDS = {
    "layers_block_type": "per block linear_attention, full_attention, mlp or moe: up to four block layouts",
    "layer_types": "layers_block_type's other name",
    "hybrid_override_pattern": "layers_block_type as a string (M, *, -, E) when no list is given",
    "mlp_hidden_act": "the MLP's and experts' activation (relu2)",
    "mlp_bias": "biases on the MLPs' up_proj and down_proj (and the latent projections)",
    "use_bias": "biases on the Mamba-2 in_proj and out_proj",
    "use_conv_bias": "a bias on the Mamba-2 convolution (mamba_conv_bias: its legacy name)",
    "mamba_conv_bias": "use_conv_bias' legacy name",
    "mamba_num_heads": "Mamba-2 heads (tensors, SSM state)",
    "mamba_head_dim": "a Mamba-2 head's channels",
    "ssm_state_size": "the SSM state's size a head channel (in_proj, conv1d, SSM state)",
    "n_groups": "groups of B and C (in_proj, conv1d, conv state; mamba_n_groups: its legacy name)",
    "mamba_n_groups": "n_groups' legacy name",
    "conv_kernel": "the causal convolution's width (conv1d, conv state; mamba_d_conv: its legacy name)",
    "mamba_d_conv": "conv_kernel's legacy name",
    "mamba_ssm_cache_dtype": "the SSM state's dtype in the cache: float32 only",
    "n_routed_experts": "routed experts of a MoE block",
    "moe_intermediate_size": "one routed expert's width",
    "moe_shared_expert_intermediate_size": "the shared expert's width",
    "moe_latent_size": "the experts' input and output width where set (with fc1/fc2_latent_proj)",
    "sliding_window": "refused unless null",
    "tie_word_embeddings": "changes nothing: NemotronHForCausalLM ties no weights",
    "chunk_size": "the Mamba-2 PyTorch path's chunk: each sequence is padded to whole chunks (saved activations)",
    "time_step_limit": "the clamp of the time step (one clamp whatever its bounds: no memory)",
}


def read_kinds(config, layers) -> tuple:
    """Each block's kind as NemotronHConfig reads it: layers_block_type (or layer_types) with the legacy names remapped,
    else hybrid_override_pattern, else the config class's four blocks (Mamba-2, MoE, attention, MLP)."""
    for key in ("layers_block_type", "layer_types"):
        given = config.get(key)
        if given is not None:
            if not isinstance(given, list) or any(t not in _KINDS for t in given):
                raise ValueError(f"config field {key!r} must list linear_attention, full_attention, mlp or moe for "
                                 f"each block; got {given!r:.200}")
            kinds = tuple(_KINDS[t] for t in given)
            break
    else:
        pattern = config.get("hybrid_override_pattern")
        if pattern is None:
            kinds = (_mamba2.LINEAR, EXPERTS, "", MLP)
        elif not isinstance(pattern, str) or any(c not in _PATTERN for c in pattern):
            raise ValueError(f"config field 'hybrid_override_pattern' must be a string of M, *, - and E; got "
                             f"{pattern!r:.200}")
        else:
            kinds = tuple(_PATTERN[c] for c in pattern)
    if len(kinds) != layers:
        raise ValueError(f"config field 'num_hidden_layers' ({layers}) must equal the number of blocks "
                         f"layers_block_type or hybrid_override_pattern lists ({len(kinds)}), which transformers "
                         "builds")
    return kinds


def _legacy_first(config, key, legacy) -> str:
    """The field NemotronHConfig.__post_init__ keeps: the legacy kwarg where the config names it, else the field."""
    return legacy if config.get(legacy) is not None else key


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    if config.get("sliding_window") is not None:
        raise ValueError("config field 'sliding_window' must be null: memmath models Nemotron-H's attention over "
                         "every token")
    if config.get("mamba_ssm_cache_dtype", "float32") != "float32":
        raise ValueError("config field 'mamba_ssm_cache_dtype' must be float32 (the SSM state memmath counts)")
    mixer = _mamba2.Mamba2Mixer(
        heads=get("mamba_num_heads", 128), head_dim=get("mamba_head_dim", 64), state_size=get("ssm_state_size", 128),
        n_groups=get(_legacy_first(config, "n_groups", "mamba_n_groups"), 8),
        conv_kernel=get(_legacy_first(config, "conv_kernel", "mamba_d_conv"), 4),
        conv_bias=get.flag(_legacy_first(config, "use_conv_bias", "mamba_conv_bias"), True),
        proj_bias=get.flag("use_bias", False), chunk_size=get("chunk_size", 128))
    kinds = read_kinds(config, get("num_hidden_layers"))
    # NemotronHForCausalLM names no tied weights (_tied_weights_keys is empty): lm_head is its own matrix even where
    # tie_word_embeddings is true (transformers' build on the meta device counts it)
    # layer_types here is the blocks' kinds (layers_block_type's other name), not attention windows: read above
    options = {"linear_attention": mixer, "gated_mlp": False, "tied_embeddings": False, "layer_types": None,
               "sliding_window": None}
    changes = {_mamba2.LINEAR: (("block_kind", _mamba2.LINEAR),), MLP: (("block_kind", MLP),)}
    if EXPERTS in kinds:
        latent = config.get("moe_latent_size")
        experts = get("n_routed_experts", 8) if config.get("n_routed_experts") is not None or \
            config.get("num_local_experts") is None else get("num_local_experts")
        changes[EXPERTS] = (("block_kind", EXPERTS), ("n_experts", experts),
                            ("experts_per_tok", get("num_experts_per_tok", 2)),
                            ("expert_intermediate_size", get("moe_intermediate_size", 7688)),
                            ("shared_expert_intermediate_size", get("moe_shared_expert_intermediate_size", 7688)),
                            ("norm_topk_prob", get.flag("norm_topk_prob", True)))
        if latent is not None:
            raise ValueError(f"config field 'moe_latent_size' is {latent!r:.50}; memmath models Nemotron-H's experts "
                             "at the hidden size only (null): a record of the latent projections (fc1_latent_proj, "
                             "fc2_latent_proj) and the experts' latent width would make it work")
    layouts = tuple((tuple(i for i, k in enumerate(kinds) if k == kind), change) for kind, change in changes.items()
                    if kind in kinds)
    if layouts:
        options["block_layouts"] = layouts
    return options


def _norm(tr: Trace, x: Tensor, trainable: bool, name: str) -> Tensor:
    """NemotronHRMSNorm: (weight.to(fp32) * normed).to(dtype), whose fp32 product keeps the fp32 normed x where the
    weight trains (tr.rms_norm's weight_fp32) and, in 16 bits, the weight's fp32 copy where x needs a gradient (h x 4
    B: a new tensor each call)."""
    out = tr.rms_norm(x, trainable, name, weight_fp32=True)
    if tr.e != 4 and x.grad:
        tr.save(tr.new(x.numel // tr.t, 4), f"{name} weight in fp32")
    return out


def _final_norm(tr: Trace, shape, x: Tensor, trainable: bool, name: str) -> Tensor:
    return _norm(tr, x, trainable, name)


def _relu2(tr: Trace, x: Tensor) -> Tensor:
    """ReLUSquaredActivation: relu, which keeps its output, then torch.square, which keeps its input (the same)."""
    relu = tr.new(x.numel, x.elem, x.grad)
    tr.use(x)
    if x.grad:
        tr.save(relu, "relu2 ReLU output (its square's input)")
    squared = tr.new(x.numel, x.elem, x.grad)
    tr.use(relu)
    return squared


def _mlp(tr: Trace, m, x: Tensor, trainable: bool, lora, width=None) -> Tensor:
    """NemotronHMLP: up_proj, relu2, down_proj (width: the shared expert's, else intermediate_size)."""
    t, width = tr.t, width or m.intermediate_size
    up = tr.linear(x, t * width, trainable, lora("up_proj"), "up_proj")
    return tr.linear(_relu2(tr, up), t * m.hidden_size, trainable, lora("down_proj"), "down_proj")


def _moe(tr: Trace, m, x: Tensor, trainable: bool, lora) -> Tensor:
    """NemotronHMoE: NemotronHTopkRouter (glm4_moe.router's steps: F.linear of x in fp32 by the fp32 weight, sigmoid,
    the group-limited choice, gather, the in-place renormalization, * routed_scaling_factor), the routed experts
    (grouped_mm without a gate: up_proj, relu2, down_proj; fp32 routing weights), then the shared expert (NemotronHMLP
    on the same input) added."""
    weights = glm4_moe.router(tr, m, x, trainable, lora)
    routed = _moe_steps.routed_experts(tr, m, x, weights, trainable, lora, gated=False,
                                       apply_gate=lambda tr, up: _relu2(tr, up))
    return tr.add(routed, _mlp(tr, m, x, trainable, lora, m.shared_expert_intermediate_size))


def block(tr: Trace, m, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """NemotronHBlock: norm, then the block's one mixer (the Mamba-2 mixer down transformers' PyTorch path, attention
    without positions, the MLP or the MoE), then the residual."""
    normed = _norm(tr, x, trainable, "norm")
    if m.block_kind == _mamba2.LINEAR:
        out = _mamba2.mixer(tr, m.linear_attention, normed, trainable, p.lora_of, m.hidden_size, p.cache)
    elif m.block_kind == MLP:
        out = _mlp(tr, m, normed, trainable, p.lora_of)
    elif m.block_kind == EXPERTS:
        out = _moe(tr, m, normed, trainable, p.lora_of)
    else:
        out = _mamba2.attention(tr, m, normed, trainable, p)
    return tr.add(x, out)


def head_and_loss(tr: Trace, shape, x: Tensor, **settings):
    """norm_f (NemotronHRMSNorm), lm_head and the loss (logits.float() before it: the loss's own cast)."""
    _decoder.head_and_loss(tr, shape, x, norm=_final_norm, **settings)


def lora_trace_refusal(shape, modules) -> str:
    """LoRA on the MoE blocks' router or routed experts (peft's ParamWrapper on gate.weight, experts.up_proj and
    experts.down_proj): not measured on Nemotron-H's non-gated experts."""
    if any(name in modules for name in ("gate.weight", "experts.up_proj", "experts.down_proj")):
        return ("traces LoRA on Nemotron-H's router and routed experts (peft's ParamWrapper on the non-gated experts) "
                "unmeasured: not yet; adapt the attention, the MLPs or the shared expert")
    return ""


def mixer_tensors(m) -> list:
    """The block's one mixer in parameters() order, by its kind."""
    h = m.hidden_size
    if m.block_kind == _mamba2.LINEAR:
        return _mamba2.tensors("mixer", h, m.linear_attention)
    if m.block_kind == MLP:
        return mlp_tensors("mixer", h, m.intermediate_size, m.mlp_bias)
    if m.block_kind == EXPERTS:
        e, ei = m.n_experts, m.expert_intermediate_size
        return ([ParamTensor("mixer.experts.up_proj", "mlp", (e, ei, h)),
                 ParamTensor("mixer.experts.down_proj", "mlp", (e, h, ei)),
                 ParamTensor("mixer.gate.weight", "mlp", (e, h))]  # NemotronHTopkRouter's Parameter
                + mlp_tensors("mixer.shared_experts", h, m.shared_expert_intermediate_size, m.mlp_bias))
    a, kv, d = m.n_heads, m.n_kv_heads, m.head_dim
    return (linear("mixer.q_proj", "attention", h, a * d, False) + linear("mixer.k_proj", "attention", h, kv * d, False)
            + linear("mixer.v_proj", "attention", h, kv * d, False)
            + linear("mixer.o_proj", "attention", a * d, h, False))


def mlp_tensors(prefix, h, width, bias) -> list:
    """NemotronHMLP: up_proj and down_proj (relu2 between them, no gate)."""
    return linear(f"{prefix}.up_proj", "mlp", h, width, bias) + linear(f"{prefix}.down_proj", "mlp", width, h, bias)


def tensors(m, group: str) -> list:
    """NemotronHForCausalLM's tensors: embeddings, each block's norm and mixer, norm_f, lm_head."""
    h = m.hidden_size
    if group == "embeddings":
        return [ParamTensor("embeddings.weight", "embeddings", (m.vocab_size, h))]
    if group == "final_norm":
        return norm("norm_f", h, False)
    if group == "head":
        return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (m.vocab_size, h))]
    if group == "layer":
        return norm("norm", h, False) + mixer_tensors(m)
    return []


def lora_table(m) -> dict:
    """peft's names in each block: q, k, v, o in an attention block; up and down the MLP's in an MLP block and the
    shared expert's in a MoE block (the routed experts' up_proj and down_proj are Parameters, not nn.Linear), router
    and experts the MoE's Parameters (peft 0.21's ParamWrapper, one rank-r pair per expert each; peft converts no
    nemotron_h names); nothing in a Mamba-2 block."""
    h, a, kv, d = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim
    kind = {_mamba2.LINEAR: "a Mamba-2 block", MLP: "an MLP block", EXPERTS: "a MoE block", "": "an attention block"}[
        m.block_kind]
    table = dict.fromkeys(("q", "k", "v", "o", "up", "down", "router", "experts"), f"{kind} has none")
    table.update(gate="Nemotron-H's MLPs are not gated (up_proj, relu2, down_proj)",
                 shared_gate="it has no shared expert gate")
    if m.block_kind == "":
        table.update(q=("q_proj", h, a * d), k=("k_proj", h, kv * d), v=("v_proj", h, kv * d), o=("o_proj", a * d, h))
    elif m.block_kind == MLP:
        table.update(up=("up_proj", h, m.intermediate_size), down=("down_proj", m.intermediate_size, h))
    elif m.block_kind == EXPERTS:
        e, ei, si = m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
        table.update(up=("up_proj", h, si), down=("down_proj", si, h), router=("gate.weight", h, e),
                     experts=[("experts.up_proj", h, ei, e), ("experts.down_proj", ei, h, e)])
    return table


def all_linear_refusal(m) -> str:
    if m.block_kind != _mamba2.LINEAR:
        return ""
    return (_mamba2.all_linear_refusal("mixer.in_proj, mixer.out_proj") + " (q, k, v, o, up, down, router, "
            "experts); peft 0.21 itself refuses LoRA on a nemotron_h model's out_proj and conv1d")


ARCHITECTURE = _mamba2.BlockOrderArchitecture(
    model_type="nemotron_h", family="llama", title="Nemotron-H",
    source="configuration_nemotron_h.py, modeling_nemotron_h.py",
    fields=decoder_fields({**MOE, **FIELDS, "num_local_experts": "n_routed_experts' other name"},
                          drop=("hidden_act",)),
    defaults={"num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21504, "vocab_size": 131072},
    activation_field="mlp_hidden_act", activations=("relu2",), traced_activations=(),
    read_options=read_options, tensors=tensors, lora_modules=lora_table,
    module_order=("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"),
    lora_order=("q_proj", "k_proj", "v_proj", "o_proj", "experts.up_proj", "experts.down_proj", "gate.weight",
                "up_proj", "down_proj"),
    embedding="embeddings", final_norm_module="norm_f", rotary=True,
    norms_last=False, not_all_linear=("router", "experts"), all_linear_refusal=all_linear_refusal,
    tp_plan={},  # NemotronHConfig.base_model_tp_plan splits only the embedding and the routed experts
    kv_cache_values=_mamba2.kv_cache_values, state_bytes=_mamba2.state_bytes, prefill_phases=None,
    trace_block=block, trace_head=head_and_loss, trace_refusal=_mamba2.trace_refusal,
    lora_trace_refusal=lora_trace_refusal,
    mixer_backward=_mamba2.backward_working_set,
    mixer_kernels=_mamba2.KERNELS,  # its trace replays transformers' PyTorch path (Run.mixer_kernels='torch')
    checkpointed_peak_refusal=("with checkpointing, the backward of a recomputed block holds more than memmath's "
                               "moments price (the Mamba-2 block's recomputed scan and its backward, not located): "
                               "CPU steps peaked 0.13-16% above the prediction, most with LoRA"),
    fp32_modules=("e_score_correction_bias", "gate.weight"),  # NemotronHPreTrainedModel._keep_in_fp32_modules_strict
)
