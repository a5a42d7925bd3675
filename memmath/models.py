"""Model shapes with exact parameter counts, tensor by tensor.

A ModelShape lists every parameter tensor of a GPT-2, LLaMA (also Mistral) or BERT style model, or
of the generic "N parameters in L equal layers". Counts are exact: they match PyTorch's
`sum(p.numel() for p in model.parameters())` for the same transformers config (see tests).
Dimensions may be numpy arrays where a sweep needs them (the parameter count of a uniform model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import json
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from .arrays import any_true, is_ndarray, is_numpy_str, np

from . import validate

if TYPE_CHECKING:
    import pandas as pd


FAMILIES = ("gpt2", "llama", "bert", "uniform")  # "llama": every rotary decoder, its layout in the options
COMPONENTS = ("embeddings", "attention", "mlp", "norms", "head")
GROUPS = ("embeddings", "layer", "final_norm", "head", "vision")
# "vision": a vision-language model's vision tower and projector (memmath/multimodal.py), in model.parameters()
# order; empty for a text model. Their components are "vision_tower" and "projector".
# LoRA target names. q, k, v, o: attention; gate, up, down: the MLP's matrices (Qwen2-MoE: its shared expert's);
# router, experts: a mixture of experts' router and routed experts (3-D tensors, which peft 0.21 adapts with its
# ParamWrapper); shared_gate: Qwen2-MoE's shared_expert_gate. See ModelShape.lora_adapters.
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "router", "experts", "shared_gate")
# Shorthands lora_targets() expands besides "all" (every name: what peft's "all-linear" adapts).
LORA_GROUPS = {"attention": ("q", "k", "v", "o")}


class _AllTargets(tuple):
    """What lora_targets("all") returns: every name of LORA_TARGETS, marked as peft's "all-linear", which leaves
    some targets that exist alone (_NOT_ALL_LINEAR: Qwen2-MoE's router and experts). Equal only to itself, so
    LoRA(targets="all") and a LoRA that lists every name (and so adapts those too) stay two methods."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, _AllTargets)

    def __ne__(self, other):
        return not isinstance(other, _AllTargets)

    def __hash__(self):
        return hash(("all-linear",) + tuple(self))
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: its path key, the component it belongs to, its shape.

    linear: a weight matrix of a linear layer (what bitsandbytes quantizes to 4 bit in QLoRA).
    """

    name: str
    component: str
    shape: tuple
    linear: bool = False

    @property
    def numel(self):
        """Number of elements: the product of the shape."""
        result = 1
        for dim in self.shape:
            result = result * dim
        return result

    @property
    def factored_size(self):
        """Adafactor's second-moment size: rows + cols for a matrix, numel for a vector (Shazeer & Stern 2018)."""
        if len(self.shape) == 2:
            return self.shape[0] + self.shape[1]
        return self.numel


class LoraAdapter(NamedTuple):
    """One tensor a block adapts with LoRA: peft adds A, (rank_factor * r) x d_in, and B, d_out x (rank_factor * r).

    rank_factor is 1 for a linear layer and for the router's 2-D weight. A routed experts' 3-D tensor (peft 0.21's
    ParamWrapper, peft/tuners/lora/layer.py) gets A = nn.Linear(d_in, r * num_experts) and B = nn.Linear(r *
    num_experts, d_out), one rank-r pair per expert: rank_factor = num_experts, and 2 * num_experts for
    gate_up_proj, whose rank peft doubles because the gate and up matrices are fused there (the rank_pattern of
    utils/transformers_weight_conversion.py: r * 2 for the fused w1 + w3 or gate_proj + up_proj).
    """

    module: str
    d_in: object
    d_out: object
    rank_factor: object = 1


@dataclass(frozen=True)
class ModelShape:
    """The shape of a transformer, enough to count every parameter and activation.

    Build one with `gpt2_model`, `llama_model`, `bert_model`, `uniform_model`, `from_hf_config` or
    take one from `PRESETS`. Fields that a family does not use are None.
    """

    family: str  # one of FAMILIES
    n_layers: int  # transformer blocks, all the same shape
    hidden_size: int | None = None  # h: the residual stream width
    n_heads: int | None = None  # a: attention heads
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention when < n_heads)
    head_dim: int | None = None  # d: size of one head (h / a unless a config says otherwise)
    intermediate_size: int | None = None  # MLP width (4h in GPT-2 and BERT)
    vocab_size: int | None = None  # V: rows of the token embedding
    max_positions: int | None = None  # learned position embeddings (GPT-2, BERT)
    tied_embeddings: bool = False  # the output head reuses the token embedding matrix
    type_vocab_size: int = 0  # BERT's token-type (segment) embeddings
    num_labels: int = 0  # BERT: classifier outputs on top of the pooler (0 = no classifier)
    attention_bias: bool = False  # LLaMA configs may add biases to q, k, v, o
    mlp_bias: bool = False  # LLaMA configs may add biases to gate, up, down
    uniform_params: object = None  # uniform family: the total parameter count
    from_count: bool = False  # built by resolve_model from a bare parameter count (no layers to choose)
    name: str = ""  # a label for tables and charts
    notes: tuple = field(default=(), compare=False)
    # ---- the layout of a transformers model_type (see ARCHES); defaults are LLaMA's / GPT-2's / BERT's
    arch: str = ""  # transformers' model_type ("" = the family's own: gpt2, llama, bert)
    qkv_bias: bool = False  # biases on q, k and v only (Qwen2)
    qk_norm: str = ""  # "" none, "head" RMSNorm over head_dim (Qwen3, Gemma 3), "full" over a*d and kv*d (OLMo 2)
    norm_layout: str = "pre"  # "pre" (LLaMA), "sandwich" (Gemma 2/3: four norms), "post" (OLMo 2: two, after)
    layer_norm: bool = False  # LayerNorm with bias instead of RMSNorm (GPT-NeoX)
    fused_qkv: bool = False  # one q/k/v matrix (Phi-3 qkv_proj, GPT-NeoX query_key_value)
    gated_mlp: bool = True  # gate, up, down (SwiGLU/GeGLU); False: up, down (GPT-NeoX)
    fused_gate_up: bool = False  # one gate_up_proj matrix (Phi-3)
    hidden_act: str = ""  # the MLP's activation as transformers names it ("" = the family's own, filled in)
    n_experts: int = 0  # mixture of experts: routed experts per block (0 = a dense MLP)
    experts_per_tok: int = 0  # experts each token is routed to
    expert_intermediate_size: int | None = None  # width of one routed expert's MLP
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE's shared expert (0 = none)
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert (a 1 x h linear)
    sliding_window: int | None = None  # tokens a sliding-attention layer sees (transformers' config value)
    layer_types: tuple | None = None  # per block "full_attention" or "sliding_attention" (None: all full)
    dropout_p: float | None = None  # the config's dropout probability where it has dropout (None: not read)
    # ---- what changes only the saved activations (read by from_hf_config; hf_activations traces them)
    attn_softcap: float | None = None  # Gemma 2/3 attn_logit_softcapping: tanh over the scores (eager only)
    final_softcap: float | None = None  # Gemma 2/3 final_logit_softcapping: tanh over the logits
    rotary_dim: int | None = None  # rotated dims of each head (GPT-NeoX partial rotary; None: all head_dim)
    parallel_residual: bool = False  # GPT-NeoX use_parallel_residual: attention and MLP read the block input
    norm_topk_prob: bool = False  # MoE: the top-k routing weights renormalized (Mixtral always; Qwen-MoE config)
    # config use_cache: a training step without gradient checkpointing runs k and v through transformers'
    # DynamicCache, whose copies attention keeps (hf_activations._kv_cache). False for the presets and builders
    # (what the recorded steps ran); from_hf_config reads it as the config states it (save_pretrained writes it)
    use_cache: bool = False
    # a vision-language model (from_hf_config of gemma3, llava, mistral3, qwen2_vl, qwen2_5_vl): the vision tower and
    # projector as a multimodal.VisionParts, listed by tensors("vision") and counted in n_params; None for text
    vision: object = None
    # a rotary model's config max_position_embeddings: the context it was trained for (planner.trained_context); no
    # tensor depends on it, so it takes no part in comparing shapes (a preset built in code leaves it None)
    trained_context: int | None = field(default=None, compare=False)

    # ---- counts -----------------------------------------------------------------------------
    @property
    def has_shape(self) -> bool:
        """True when width, heads and vocabulary are known (activations can be estimated)."""
        return self.hidden_size is not None and self.n_heads is not None

    @property
    def tensor_count_known(self) -> bool:
        """False for the uniform family, whose layers are a parameter count without tensors."""
        return self.family != "uniform"

    def tensors(self, group: str) -> list[ParamTensor]:
        """The parameter tensors of one group: 'embeddings', 'layer' (one block), 'final_norm', 'head'."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}; got {validate.describe(group)}")
        if group == "vision":  # the vision tower and projector, every block listed (none in a text model)
            return [] if self.vision is None else self.vision.tensors()
        return _TENSOR_BUILDERS[self.family](self, group)

    def group_params(self, group: str):
        """Parameters in one group (for 'layer': in one block)."""
        return sum((t.numel for t in self.tensors(group)), 0)

    @property
    def params_per_layer(self):
        """Parameters in one transformer block."""
        return self.group_params("layer")

    @property
    def n_params(self):
        """Total parameters, each tied matrix counted once (as PyTorch's model.parameters() does)."""
        outside = sum(self.group_params(g) for g in ("embeddings", "final_norm", "head"))
        vision = 0 if self.vision is None else self.vision.n_params  # a vision-language model's tower and projector
        return outside + vision + self.n_layers * self.params_per_layer

    def component_params(self) -> dict[str, object]:
        """Parameters per component (embeddings, attention, mlp, norms, head; a vision-language model adds
        vision_tower and projector) over the whole model."""
        totals = {c: 0 for c in COMPONENTS}
        for group in GROUPS:
            repeat = self.n_layers if group == "layer" else 1
            for tensor in self.tensors(group):
                totals[tensor.component] = totals.get(tensor.component, 0) + repeat * tensor.numel
        return totals

    def breakdown(self) -> pd.DataFrame:
        """One row per tensor: group, path key, component, shape, count per copy, copies, total."""
        import pandas as pd  # only here: `import memmath` stays numpy-only
        rows = []
        for group in GROUPS:
            repeat = self.n_layers if group == "layer" else 1
            for tensor in self.tensors(group):
                rows.append({
                    "group": group, "tensor": tensor.name, "component": tensor.component,
                    "shape": " x ".join(str(d) for d in tensor.shape), "params": tensor.numel,
                    "copies": repeat, "total": tensor.numel * repeat,
                })
        return pd.DataFrame(rows)

    # ---- LoRA -------------------------------------------------------------------------------
    def lora_matrices(self, targets) -> list[tuple[str, int, int]]:
        """(module, d_in, d_out) of each matrix one block adapts for LoRA targets such as ('q', 'v').

        Names map onto each family's modules: GPT-2's q, k and v live in one fused c_attn matrix,
        which is adapted once; BERT and GPT-2 have no gate matrix. "all" adapts every linear
        matrix the family has (peft's "all-linear"), so it skips gate where there is none.
        Each matrix adds r x (d_in + d_out). A mixture of experts' routed experts are 3-D tensors
        whose adapters are not one rank-r pair (see lora_adapters): targets that reach them are
        refused here by name; lora_adapters lists every adapted tensor.
        """
        adapters = self.lora_adapters(targets)
        stacked = [a.module for a in adapters if not (isinstance(a.rank_factor, int) and a.rank_factor == 1)]
        if stacked:
            named = lora_targets(targets)
            named = "all" if isinstance(named, _AllTargets) else ", ".join(named)
            raise validate.FieldError("targets", f"LoRA targets {named} adapt the routed "
                                      f"experts' 3-D tensors ({', '.join(stacked)}), whose adapters stack one rank-r "
                                      "pair per expert: ModelShape.lora_adapters lists them with their rank factor")
        return [(a.module, a.d_in, a.d_out) for a in adapters]

    def lora_adapters(self, targets) -> list[LoraAdapter]:
        """Each tensor one block adapts for LoRA targets, as peft 0.21 adapts it on transformers 5.24 (LoraAdapter).

        q, k, v, o, gate, up and down are the linear layers lora_matrices describes. In a mixture of experts
        (Mixtral, Qwen2-MoE, Qwen3-MoE): gate, up and down are Qwen2-MoE's shared expert's linears (Mixtral and
        Qwen3-MoE have none: refused, pointing to "experts"); router is the router's E x h weight (peft's
        ParamWrapper on mlp.gate.weight, A r x h and B E x r); experts are the routed experts' 3-D gate_up_proj
        (E x 2I x h, rank 2r per expert) and down_proj (E x h x I, rank r per expert), as peft converts the
        transformers-4 names w1/w3/w2 (Mixtral) or gate_proj/up_proj/down_proj (Qwen3-MoE) onto them
        (utils/transformers_weight_conversion.py); shared_gate is Qwen2-MoE's shared_expert_gate (1 x h).
        "all" is what peft's target_modules="all-linear" adapts: every nn.Linear in the blocks and, where peft
        converts the model type (mixtral, and qwen3_moe, which transformers maps onto qwen2_moe's conversion),
        the router and both expert tensors. peft 0.21 does not convert qwen2_moe itself (its
        _MODEL_TO_CONVERSION_PATTERN has no qwen2_moe key), so there "all" is the attention, the shared expert
        and shared_expert_gate; router and experts there are what peft's target_parameters=["gate.weight",
        "experts.gate_up_proj", "experts.down_proj"] with rank_pattern {".*\\.gate_up_proj": 2r} adapts.
        The entries come in the order of the block's parameters() (peft adds lora_A, then lora_B, to each).
        """
        targets = lora_targets(targets)
        table = _LORA_TABLES[self.family](self)
        every = set(targets) == set(LORA_TARGETS)  # every name: what exists in this family
        skipped = _NOT_ALL_LINEAR.get(self.arch, ()) if isinstance(targets, _AllTargets) else ()  # "all" only
        chosen: dict[str, LoraAdapter] = {}
        for target in targets:
            entry = table.get(target)
            if target in skipped or (every and (entry is None or isinstance(entry, str))):
                continue
            if entry is None or isinstance(entry, str):
                available = ", ".join(t for t in LORA_TARGETS if t in table and not isinstance(table[t], str))
                why = f" ({entry})" if isinstance(entry, str) else ""
                raise validate.FieldError(
                    "targets", f"LoRA target {target!r} does not exist in a {self.arch or self.family} model{why}; "
                    f"allowed: {available or 'none'}")
            for module, *dims in (entry if isinstance(entry, list) else [entry]):
                chosen[module] = LoraAdapter(module, *dims)
        order = _lora_order(self)
        return sorted(chosen.values(), key=lambda a: order.index(a.module) if a.module in order else len(order))

    def with_changes(self, **changes) -> "ModelShape":
        """A copy with some fields changed, checked again.

        Values that were derived follow the change unless given: head_dim stays hidden_size / n_heads
        and n_kv_heads stays n_heads (multi-head attention) when they were so before. An explicit
        head size or a grouped-query kv count that differed from the default is kept.
        """
        if "head_dim" not in changes and ("hidden_size" in changes or "n_heads" in changes):
            if self.head_dim is not None and self.head_dim * self.n_heads == self.hidden_size:
                changes["head_dim"] = None
        if "n_kv_heads" not in changes and "n_heads" in changes and self.n_kv_heads == self.n_heads:
            changes["n_kv_heads"] = None
        return replace(self, **changes)

    # ---- checks -----------------------------------------------------------------------------
    def __post_init__(self):
        object.__setattr__(self, "family", validate.choice("family", self.family, FAMILIES))
        object.__setattr__(self, "n_layers", validate.count("n_layers", self.n_layers, high=validate.MAX_LAYERS))
        for name in ("tied_embeddings", "attention_bias", "mlp_bias"):
            validate.flag(name, getattr(self, name))
        object.__setattr__(self, "type_vocab_size", validate.count("type_vocab_size", self.type_vocab_size, low=0,
                                                                   scalar=True))
        object.__setattr__(self, "num_labels", validate.count("num_labels", self.num_labels, low=0, scalar=True))
        if self.vision is not None:
            from .multimodal import VisionParts  # here: multimodal imports this module

            if not isinstance(self.vision, VisionParts) or self.family != "llama":
                raise validate.FieldTypeError("vision", "vision must be None or the VisionParts of a rotary decoder "
                                              f"(family 'llama') read by from_hf_config; got {validate.describe(self.vision)}")
        self._check_options()
        if self.family == "uniform":
            self._check_uniform()
        else:
            self._check_transformer()

    def _check_uniform(self):
        if self.uniform_params is None:
            raise ValueError("n_params (uniform_params) is required for the uniform family: a whole number of parameters")
        n = validate.count("n_params", self.uniform_params, high=validate.MAX_PARAMS)
        validate.check_sweep_size(n_params=n, n_layers=self.n_layers)  # arrays that broadcast, to a bounded sweep
        if any_true(n < self.n_layers):
            raise ValueError(f"n_params must be at least n_layers ({self.n_layers}) so every layer holds a parameter")
        object.__setattr__(self, "uniform_params", n)
        for name in ("hidden_size", "n_heads", "vocab_size"):
            value = getattr(self, name)
            if value is not None:
                # Single numbers: only n_params sweeps in the uniform family.
                object.__setattr__(self, name, validate.count(name, value, high=validate.MAX_VOCAB, scalar=True))
        if (self.hidden_size is None) != (self.n_heads is None):
            raise ValueError("hidden_size and n_heads must be given together (both or neither)")
        if self.has_shape:
            self._check_heads()

    def _check_transformer(self):
        required = ["hidden_size", "n_heads", "intermediate_size", "vocab_size"]
        if self.family in ("gpt2", "bert"):
            required.append("max_positions")
        for name in required:
            if getattr(self, name) is None:
                raise ValueError(f"{name} is required for a {self.family} model")
        limits = {"vocab_size": validate.MAX_VOCAB, "max_positions": validate.MAX_SEQ}
        for name in ("hidden_size", "n_heads", "n_kv_heads", "head_dim", "intermediate_size", "vocab_size", "max_positions"):
            value = getattr(self, name)
            if value is not None:
                checked = validate.count(name, value, high=limits.get(name, validate.MAX_DIM))
                if is_ndarray(checked):
                    raise ValueError(f"{name} must be a single number in a {self.family} model (sweep the uniform family instead)")
                object.__setattr__(self, name, checked)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        self._check_heads()
        if self.family != "llama" and (self.attention_bias or self.mlp_bias):
            raise ValueError("attention_bias and mlp_bias are LLaMA options; GPT-2 and BERT always have biases")
        if self.family != "bert" and (self.type_vocab_size or self.num_labels):
            raise ValueError("type_vocab_size and num_labels apply to BERT models only")
        if self.family == "bert" and self.tied_embeddings:
            raise ValueError("tied_embeddings does not apply to BERT here: its pooler/classifier head has no vocabulary matrix")
        if any_true(self.n_params > validate.MAX_PARAMS):
            raise ValueError(f"the shape has {_describe_count(self.n_params)} parameters; at most "
                             f"{validate.MAX_PARAMS:,} are supported (check hidden_size, intermediate_size, "
                             "vocab_size and n_layers)")

    def _check_options(self):
        if not self.hidden_act:  # each family's own: GPT-2 gelu_new, LLaMA silu, BERT gelu
            object.__setattr__(self, "hidden_act", {"gpt2": "gelu_new", "llama": "silu", "bert": "gelu"}.get(
                self.family, ""))
        if not isinstance(self.hidden_act, str):
            raise ValueError(f"hidden_act must be an activation name such as 'silu'; got {validate.describe(self.hidden_act)}")
        # transformers names model types and activations in lowercase (model_type "gemma2", ACT2FN "gelu_new"), and
        # memmath compares them so: a name spelt otherwise ("Gemma2", "GELU_NEW") is stored as that name, never
        # counted as another layout.
        object.__setattr__(self, "hidden_act", self.hidden_act.strip().lower())
        object.__setattr__(self, "arch", validate.text_field("arch", self.arch).strip().lower())
        for name in ("qkv_bias", "layer_norm", "fused_qkv", "gated_mlp", "fused_gate_up", "shared_expert_gate",
                     "parallel_residual", "norm_topk_prob", "use_cache"):
            validate.flag(name, getattr(self, name))
        for name in ("attn_softcap", "final_softcap"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"{name} must be a positive number or None (no softcapping); got {validate.describe(value)}")
        if self.rotary_dim is not None:
            object.__setattr__(self, "rotary_dim", validate.count("rotary_dim", self.rotary_dim, high=validate.MAX_DIM,
                                                                  scalar=True))
        # Stored as checked ("HEAD" -> "head"): the tensor builders compare the lowercase names.
        object.__setattr__(self, "qk_norm", validate.choice("qk_norm", self.qk_norm, ("", "head", "full")))
        object.__setattr__(self, "norm_layout", validate.choice("norm_layout", self.norm_layout,
                                                                ("pre", "sandwich", "post")))
        decoder_options = (self.qkv_bias or self.qk_norm or self.norm_layout != "pre" or self.layer_norm
                           or self.fused_qkv or not self.gated_mlp or self.fused_gate_up or self.n_experts
                           or self.attn_softcap or self.final_softcap or self.rotary_dim or self.parallel_residual)
        if decoder_options and self.family != "llama":
            raise ValueError("qkv_bias, qk_norm, norm_layout, layer_norm, fused_qkv, gated_mlp, fused_gate_up, "
                             "n_experts, softcapping, rotary_dim and parallel_residual describe rotary decoders "
                             "(family 'llama'); got a "
                             f"{self.family} model")
        object.__setattr__(self, "n_experts", validate.count("n_experts", self.n_experts, low=0, scalar=True))
        if self.n_experts:
            k = validate.count("experts_per_tok", self.experts_per_tok, high=self.n_experts, scalar=True)
            object.__setattr__(self, "experts_per_tok", k)
            if self.expert_intermediate_size is None:
                object.__setattr__(self, "expert_intermediate_size", self.intermediate_size)
            object.__setattr__(self, "expert_intermediate_size", validate.count(
                "expert_intermediate_size", self.expert_intermediate_size, high=validate.MAX_DIM, scalar=True))
        elif self.experts_per_tok or self.shared_expert_intermediate_size or self.shared_expert_gate:
            raise ValueError("experts_per_tok and shared experts need n_experts > 0 (a mixture of experts)")
        object.__setattr__(self, "shared_expert_intermediate_size", validate.count(
            "shared_expert_intermediate_size", self.shared_expert_intermediate_size, low=0, high=validate.MAX_DIM,
            scalar=True))
        if self.sliding_window is not None:
            object.__setattr__(self, "sliding_window", validate.count(
                "sliding_window", self.sliding_window, high=validate.MAX_SEQ, scalar=True))
        if self.layer_types is not None:
            types = tuple(self.layer_types)
            if len(types) != self.n_layers or any(t not in LAYER_TYPES for t in types):
                raise ValueError(f"layer_types must list one of {', '.join(LAYER_TYPES)} per block "
                                 f"({self.n_layers}); got {validate.describe(self.layer_types)}")
            if "sliding_attention" in types and self.sliding_window is None:
                raise ValueError("layer_types names sliding_attention blocks but sliding_window is not given")
            object.__setattr__(self, "layer_types", types)
        if self.dropout_p is not None and (isinstance(self.dropout_p, bool) or not 0 <= self.dropout_p < 1):
            raise ValueError(f"dropout_p must be a probability in [0, 1); got {validate.describe(self.dropout_p)}")

    @property
    def attention_windows(self) -> tuple:
        """Per block, the tokens its attention sees: None for full attention, else the sliding window."""
        if self.layer_types is None:
            return (None,) * self.n_layers
        return tuple(self.sliding_window if t == "sliding_attention" else None for t in self.layer_types)

    @property
    def active_params(self):
        """Parameters one token passes through: every tensor but the routed experts it is not sent to.

        A dense model's active count is n_params. Mixtral-8x7B: 46.7B total, 12.9B active (model card).
        """
        if not self.n_experts:
            return self.n_params
        per_expert = 3 * self.hidden_size * self.expert_intermediate_size  # gate, up, down of one expert
        return self.n_params - self.n_layers * (self.n_experts - self.experts_per_tok) * per_expert

    def _check_heads(self):
        h, a = self.hidden_size, self.n_heads
        if self.head_dim is None:
            if h % a:
                raise ValueError(f"n_heads ({a}) must divide hidden_size ({h}) when head_dim is not given")
            object.__setattr__(self, "head_dim", h // a)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", a)
        kv = self.n_kv_heads
        if kv > a or a % kv:
            raise ValueError(f"n_kv_heads ({kv}) must divide n_heads ({a})")
        if self.family in ("gpt2", "bert") and (kv != a or self.head_dim * a != h):
            raise ValueError(f"{self.family} models use n_kv_heads = n_heads and head_dim = hidden_size / n_heads")


def _describe_count(value) -> str:
    return f"{int(np.max(value)):,}" if is_ndarray(value) else f"{value:,}"


def lora_targets(targets) -> tuple[str, ...]:
    if isinstance(targets, _AllTargets):
        return targets
    if isinstance(targets, str):
        targets = (targets,)
    if isinstance(targets, (dict, bytes)) or (is_ndarray(targets) and targets.dtype.kind != "U"):
        raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(targets)}")
    try:
        targets = tuple(str(t) if is_numpy_str(t) else t for t in targets)
    except TypeError:
        raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(targets)}") from None
    if not targets:
        raise ValueError(f"targets must name at least one matrix from {', '.join(LORA_TARGETS)}")
    for target in targets:
        if not isinstance(target, str):
            raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(target)}")
    if "all" in targets or "all-linear" in targets:
        return _AllTargets(LORA_TARGETS)
    if any(t in LORA_GROUPS for t in targets):  # "attention": q, k, v, o
        targets = tuple(dict.fromkeys(name for t in targets for name in LORA_GROUPS.get(t, (t,))))
    for target in targets:
        if target not in LORA_TARGETS:
            raise ValueError(f"LoRA target must be one of {', '.join(LORA_TARGETS)} (or 'all', 'attention'); "
                             f"got {validate.describe(target)}")
    return targets


# ---- tensors of each family ------------------------------------------------------------------
def _linear(name, component, d_in, d_out, bias):
    """A linear layer's weight (d_out x d_in, as nn.Linear stores it) and optional bias."""
    tensors = [ParamTensor(f"{name}.weight", component, (d_out, d_in), linear=True)]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", component, (d_out,)))
    return tensors


def _norm(name, h, bias):
    tensors = [ParamTensor(f"{name}.weight", "norms", (h,))]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", "norms", (h,)))
    return tensors


def _gpt2_tensors(m: ModelShape, group: str):
    # GPT-2 (Radford et al. 2019; transformers GPT2LMHeadModel): learned positions, LayerNorm with
    # bias, fused qkv, 4h MLP; per block 12h^2 + 13h parameters when the MLP is 4h wide.
    h, inner, vocab = m.hidden_size, m.intermediate_size, m.vocab_size
    if group == "embeddings":
        return [ParamTensor("wte", "embeddings", (vocab, h)), ParamTensor("wpe", "embeddings", (m.max_positions, h))]
    if group == "layer":
        return (_norm("ln_1", h, True) + _linear("attn.c_attn", "attention", h, 3 * h, True)
                + _linear("attn.c_proj", "attention", h, h, True) + _norm("ln_2", h, True)
                + _linear("mlp.c_fc", "mlp", h, inner, True) + _linear("mlp.c_proj", "mlp", inner, h, True))
    if group == "final_norm":
        return _norm("ln_f", h, True)
    return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (vocab, h), linear=False)]


def _llama_tensors(m: ModelShape, group: str):
    # LLaMA (Touvron et al. 2023; transformers LlamaForCausalLM): RMSNorm without bias, SwiGLU MLP,
    # grouped-query attention, rotary positions (no parameters), optional untied head. The other rotary
    # decoders differ in the options of ModelShape, read from each transformers modeling_<type>.py:
    # Qwen2 q/k/v biases, Qwen3/Gemma 3 q/k RMSNorm over head_dim, OLMo 2 q/k RMSNorm over all heads and
    # norms after attention and MLP only, Gemma 2/3 four norms per block, Phi-3 fused qkv_proj and
    # gate_up_proj, GPT-NeoX LayerNorm with bias, fused query_key_value and a 2-matrix GELU MLP,
    # Mixtral/Qwen-MoE a router and the experts as two 3-D tensors (gate_up_proj, down_proj).
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    neox = m.arch == "gpt_neox"
    if group == "embeddings":
        return [ParamTensor("embed_in" if neox else "embed_tokens", "embeddings", (m.vocab_size, h))]
    if group == "final_norm":
        return _norm("final_layer_norm" if neox else "norm", h, m.layer_norm)
    if group == "head":
        # transformers keeps lm_head out of 4-bit quantization, so it is not marked linear here.
        return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (m.vocab_size, h))]

    def norm(name, width=h):
        return _norm(name, width, m.layer_norm)

    ab, mb = m.attention_bias, m.mlp_bias
    if neox:
        attention = (_linear("attention.query_key_value", "attention", h, (a + 2 * kv) * d, ab)
                     + _linear("attention.dense", "attention", a * d, h, ab))
    elif m.fused_qkv:
        attention = (_linear("self_attn.qkv_proj", "attention", h, (a + 2 * kv) * d, ab)
                     + _linear("self_attn.o_proj", "attention", a * d, h, ab))
    else:
        qkv = ab or m.qkv_bias
        attention = (_linear("self_attn.q_proj", "attention", h, a * d, qkv)
                     + _linear("self_attn.k_proj", "attention", h, kv * d, qkv)
                     + _linear("self_attn.v_proj", "attention", h, kv * d, qkv)
                     + _linear("self_attn.o_proj", "attention", a * d, h, ab))
    if m.qk_norm == "head":
        attention += norm("self_attn.q_norm", d) + norm("self_attn.k_norm", d)
    elif m.qk_norm == "full":
        attention += norm("self_attn.q_norm", a * d) + norm("self_attn.k_norm", kv * d)
    if m.n_experts:
        e, ei = m.n_experts, m.expert_intermediate_size
        mlp = [ParamTensor("mlp.gate.weight", "mlp", (e, h)),  # the router: a Parameter, not an nn.Linear
               ParamTensor("mlp.experts.gate_up_proj", "mlp", (e, 2 * ei, h)),
               ParamTensor("mlp.experts.down_proj", "mlp", (e, h, ei))]
        if m.shared_expert_intermediate_size:
            si = m.shared_expert_intermediate_size
            mlp += (_linear("mlp.shared_expert.gate_proj", "mlp", h, si, False)
                    + _linear("mlp.shared_expert.up_proj", "mlp", h, si, False)
                    + _linear("mlp.shared_expert.down_proj", "mlp", si, h, False))
        if m.shared_expert_gate:
            mlp += _linear("mlp.shared_expert_gate", "mlp", h, 1, False)
    elif not m.gated_mlp:
        mlp = _linear("mlp.dense_h_to_4h", "mlp", h, inner, True) + _linear("mlp.dense_4h_to_h", "mlp", inner, h, True)
    elif m.fused_gate_up:
        mlp = _linear("mlp.gate_up_proj", "mlp", h, 2 * inner, mb) + _linear("mlp.down_proj", "mlp", inner, h, mb)
    else:
        mlp = (_linear("mlp.gate_proj", "mlp", h, inner, mb) + _linear("mlp.up_proj", "mlp", h, inner, mb)
               + _linear("mlp.down_proj", "mlp", inner, h, mb))
    if m.norm_layout == "post":  # OLMo 2: normalize each sublayer's output before the residual add
        return attention + norm("post_attention_layernorm") + mlp + norm("post_feedforward_layernorm")
    if m.norm_layout == "sandwich":  # Gemma 2/3: a norm before and after each sublayer
        return (norm("input_layernorm") + attention + norm("post_attention_layernorm")
                + norm("pre_feedforward_layernorm") + mlp + norm("post_feedforward_layernorm"))
    return norm("input_layernorm") + attention + norm("post_attention_layernorm") + mlp


def _bert_tensors(m: ModelShape, group: str):
    # BERT (Devlin et al. 2019; transformers BertModel + optional classifier): word, position and
    # token-type embeddings with a LayerNorm, post-norm blocks, a tanh pooler.
    h, inner = m.hidden_size, m.intermediate_size
    if group == "embeddings":
        tensors = [ParamTensor("word_embeddings", "embeddings", (m.vocab_size, h)),
                   ParamTensor("position_embeddings", "embeddings", (m.max_positions, h))]
        if m.type_vocab_size:
            tensors.append(ParamTensor("token_type_embeddings", "embeddings", (m.type_vocab_size, h)))
        return tensors + _norm("embeddings.LayerNorm", h, True)
    if group == "layer":
        return (_linear("attention.self.query", "attention", h, h, True)
                + _linear("attention.self.key", "attention", h, h, True)
                + _linear("attention.self.value", "attention", h, h, True)
                + _linear("attention.output.dense", "attention", h, h, True)
                + _norm("attention.output.LayerNorm", h, True)
                + _linear("intermediate.dense", "mlp", h, inner, True)
                + _linear("output.dense", "mlp", inner, h, True) + _norm("output.LayerNorm", h, True))
    if group == "final_norm":
        return []
    if m.arch == "roberta" and m.num_labels:
        # RobertaForSequenceClassification: RobertaModel(add_pooling_layer=False) and a
        # RobertaClassificationHead (dense h x h, tanh, out_proj h -> labels) on the first token.
        return [ParamTensor("classifier.dense.weight", "head", (h, h), linear=True),
                ParamTensor("classifier.dense.bias", "head", (h,)),
                ParamTensor("classifier.out_proj.weight", "head", (m.num_labels, h)),
                ParamTensor("classifier.out_proj.bias", "head", (m.num_labels,))]
    head = [ParamTensor("pooler.dense.weight", "head", (h, h), linear=True), ParamTensor("pooler.dense.bias", "head", (h,))]
    if m.num_labels:
        head += [ParamTensor("classifier.weight", "head", (m.num_labels, h)), ParamTensor("classifier.bias", "head", (m.num_labels,))]
    return head


def _uniform_tensors(m: ModelShape, group: str):
    # "N parameters in L equal layers": each layer one block of N // L weights; the remainder of an
    # uneven split sits outside the layers, with the embeddings.
    n, layers = m.uniform_params, m.n_layers
    if group == "layer":
        return [ParamTensor("layer.weights", "attention", (n // layers,), linear=True)]
    if group == "embeddings":
        rest = n - layers * (n // layers)
        if is_ndarray(rest) or rest:
            return [ParamTensor("rest", "embeddings", (rest,))]
    return []


_TENSOR_BUILDERS = {"gpt2": _gpt2_tensors, "llama": _llama_tensors, "bert": _bert_tensors, "uniform": _uniform_tensors}

def _llama_lora_table(m: ModelShape) -> dict:
    """peft's target names in each rotary decoder: fused matrices are adapted once, as a whole."""
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    if m.arch == "gpt_neox":
        qkv = ("query_key_value", h, (a + 2 * kv) * d)
        return {"q": qkv, "k": qkv, "v": qkv, "o": ("dense", a * d, h),
                "up": ("dense_h_to_4h", h, inner), "down": ("dense_4h_to_h", inner, h)}
    if m.fused_qkv:
        qkv = ("qkv_proj", h, (a + 2 * kv) * d)
        table = {"q": qkv, "k": qkv, "v": qkv}
    else:
        table = {"q": ("q_proj", h, a * d), "k": ("k_proj", h, kv * d), "v": ("v_proj", h, kv * d)}
    table["o"] = ("o_proj", a * d, h)
    if m.n_experts:
        # transformers 5 stores the routed experts as two 3-D Parameters (modeling_<type>.py's <Type>Experts:
        # gate_up_proj E x 2I x h, down_proj E x h x I) and the router as a module holding an E x h Parameter:
        # none is an nn.Linear. peft 0.21 adapts them as Parameters (lora.ParamWrapper): A (r_e * E) x d_in,
        # B d_out x (r_e * E), d_in and d_out swapped from the stored (E, d_out, d_in) (update_layer), r_e = 2r
        # for the fused gate_up_proj (the converted config's rank_pattern) and r for down_proj; the router's
        # 2-D weight gets one rank-r pair. Only Qwen2-MoE has linears in its MLP: the shared expert's
        # gate_proj/up_proj/down_proj and shared_expert_gate (h -> 1).
        e, ei, si = m.n_experts, m.expert_intermediate_size, m.shared_expert_intermediate_size
        table.update(router=("gate.weight", h, e),
                     experts=[("experts.gate_up_proj", h, 2 * ei, 2 * e), ("experts.down_proj", ei, h, e)])
        if si:
            table.update(gate=("gate_proj", h, si), up=("up_proj", h, si), down=("down_proj", si, h))
        else:
            routed = "its MLP is the routed experts, 3-D tensors: target 'experts'"
            table.update(gate=routed, up=routed, down=routed)
        table["shared_gate"] = ("shared_expert_gate", h, 1) if m.shared_expert_gate else "it has no shared expert gate"
        return table
    if m.fused_gate_up:
        table.update(gate=("gate_up_proj", h, 2 * inner), up=("gate_up_proj", h, 2 * inner))
    else:
        table.update(gate=("gate_proj", h, inner), up=("up_proj", h, inner))
    table["down"] = ("down_proj", inner, h)
    return table


# Targets peft 0.21's "all-linear" leaves alone though they exist: qwen2_moe is not converted (peft's
# utils/transformers_weight_conversion.py copies transformers' _MODEL_TO_CONVERSION_PATTERN, which maps other
# types onto qwen2_moe but has no qwen2_moe key, and adds only mixtral), so its router and experts keep no adapter.
_NOT_ALL_LINEAR = {"qwen2_moe": ("router", "experts")}
# The order of one MoE block's adapted modules in PyTorch's parameters() (the order each <Type>SparseMoeBlock
# registers gate, experts, shared_expert and shared_expert_gate; inside the experts peft wraps gate_up_proj first
# and down_proj around it, so gate_up_proj's adapters come first): measured with peft on the meta device.
_MOE_ORDER = {
    "mixtral": ("gate.weight", "experts.gate_up_proj", "experts.down_proj"),
    "qwen2_moe": ("gate.weight", "experts.gate_up_proj", "experts.down_proj", "gate_proj", "up_proj", "down_proj",
                  "shared_expert_gate"),
    "qwen3_moe": ("experts.gate_up_proj", "experts.down_proj", "gate.weight"),
}


def _lora_order(m: ModelShape) -> tuple:
    """The parameters() order of a block's adapted modules where it is not the order of the targets, else ()."""
    if m.arch not in _MOE_ORDER:
        return ()
    attention = ("qkv_proj",) if m.fused_qkv else ("q_proj", "k_proj", "v_proj")
    return attention + ("o_proj",) + _MOE_ORDER[m.arch]


_LORA_TABLES = {
    # target -> (module, d_in, d_out[, rank_factor]), a list of those, or why the target does not exist there;
    # peft adds A (rank_factor * r x d_in) and B (d_out x rank_factor * r) to each module once.
    "gpt2": lambda m: {
        "q": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "k": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "v": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "o": ("attn.c_proj", m.hidden_size, m.hidden_size),
        "up": ("mlp.c_fc", m.hidden_size, m.intermediate_size),
        "down": ("mlp.c_proj", m.intermediate_size, m.hidden_size),
    },
    "llama": lambda m: _llama_lora_table(m),
    "bert": lambda m: {
        "q": ("query", m.hidden_size, m.hidden_size),
        "k": ("key", m.hidden_size, m.hidden_size),
        "v": ("value", m.hidden_size, m.hidden_size),
        "o": ("attention.output.dense", m.hidden_size, m.hidden_size),
        "up": ("intermediate.dense", m.hidden_size, m.intermediate_size),
        "down": ("output.dense", m.intermediate_size, m.hidden_size),
    },
    "uniform": lambda m: {},
}


# ---- constructors ----------------------------------------------------------------------------
def gpt2_model(*, n_layers, hidden_size, n_heads, vocab_size=50257, max_positions=1024,
               intermediate_size=None, tied_embeddings=True, name="") -> ModelShape:
    """A GPT-2 style shape (intermediate_size defaults to 4 x hidden_size, as GPT-2's n_inner=None).

    With a 4h MLP and the tied head: n_params = V*h + P*h + L*(12h^2 + 13h) + 2h (gpt2: 124,439,808);
    an untied head adds V*h.
    """
    inner = intermediate_size if intermediate_size is not None else 4 * validate.count("hidden_size", hidden_size)
    # arch and dropout_p as transformers' GPT2Config has them (attn_pdrop = resid_pdrop = embd_pdrop = 0.1),
    # so a shape built here trains by the same defaults as the same model read from its config.json.
    return ModelShape(family="gpt2", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      intermediate_size=inner, vocab_size=vocab_size, max_positions=max_positions,
                      tied_embeddings=tied_embeddings, name=name, arch="gpt2", dropout_p=0.1)


def llama_model(*, n_layers, hidden_size, n_heads, intermediate_size, vocab_size, n_kv_heads=None,
                head_dim=None, tied_embeddings=False, attention_bias=False, mlp_bias=False, name="") -> ModelShape:
    """A LLaMA style shape (also Mistral): RMSNorm, SwiGLU, grouped-query attention, rotary positions.

    n_params = V*h*(1 if tied else 2) + h + L*(2*h*a*d + 2*h*kv*d + 3*h*I + 2*h), d = head_dim
    (hidden_size / n_heads unless given), kv = n_kv_heads (n_heads unless given); biases add
    (a + 2kv)*d + h per block for attention_bias and 2I + h for mlp_bias. Llama-2-7B: 6,738,415,616.
    """
    # arch and dropout_p as transformers' LlamaConfig has them (attention_dropout = 0.0): the same defaults as
    # the same model read from its config.json.
    return ModelShape(family="llama", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      n_kv_heads=n_kv_heads, head_dim=head_dim, intermediate_size=intermediate_size,
                      vocab_size=vocab_size, tied_embeddings=tied_embeddings, attention_bias=attention_bias,
                      mlp_bias=mlp_bias, name=name, arch="llama", dropout_p=0.0)


def bert_model(*, n_layers, hidden_size, n_heads, intermediate_size=None, vocab_size=30522,
               max_positions=512, type_vocab_size=2, num_labels=0, name="") -> ModelShape:
    """A BERT style encoder (transformers' BertModel) with its pooler; num_labels > 0 adds a classifier.

    n_params = (V + P + T)*h + 2h + L*(4h^2 + 2h*I + 9h + I) + h^2 + h, plus num_labels*(h + 1) for
    the classifier (T = type_vocab_size; I = 4h gives 12h^2 + 13h per block). bert-base-uncased:
    109,482,240. A masked-LM head is not counted.
    """
    inner = intermediate_size if intermediate_size is not None else 4 * validate.count("hidden_size", hidden_size)
    # arch and dropout_p as transformers' BertConfig has them (hidden_dropout_prob = 0.1): the same defaults as
    # the same model read from its config.json.
    return ModelShape(family="bert", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      intermediate_size=inner, vocab_size=vocab_size, max_positions=max_positions,
                      tied_embeddings=False, type_vocab_size=type_vocab_size, num_labels=num_labels, name=name,
                      arch="bert", dropout_p=0.1)


def uniform_model(n_params, n_layers, *, hidden_size=None, n_heads=None, vocab_size=None, name="") -> ModelShape:
    """The article's generic model: n_params parameters in n_layers equal layers.

    n_params may be a numpy array (a sweep). Give hidden_size and n_heads (and vocab_size for the
    loss term) when activations should be estimated too. Each layer holds n_params // n_layers
    parameters; a remainder sits outside the layers (as "embeddings"). The layers have no named
    matrices, so component_params() reports them under "attention", Adam's per-tensor step
    counters are not counted and LoRA/QLoRA need a real shape.
    """
    if isinstance(n_params, str):
        from .units import parse_count

        try:
            n_params = parse_count(n_params)
        except ValueError as error:
            raise ValueError(f"n_params: {error}") from None
    return ModelShape(family="uniform", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      vocab_size=vocab_size, uniform_params=n_params, name=name)


# ---- transformers config.json ----------------------------------------------------------------
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
              "gemma3_text", "phi3", "olmo2", "gpt_neox")
SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "bert", "roberta") + LLAMA_LIKE[2:]

# Per model_type, the config fields that change a parameter tensor, a saved activation or the KV
# cache, and what memmath does with each (read from transformers 5.24's configuration_<type>.py and
# modeling_<type>.py). Fields not listed (token ids, eps, rope_theta/rope_parameters/rope_scaling,
# initializer_range, max_position_embeddings of rotary models) change no memory. A value outside
# what memmath models raises a ValueError naming the field; UNSUPPORTED_EXAMPLES gives one per field.
_COMMON_DECODER = {
    "num_hidden_layers": "blocks", "hidden_size": "width", "num_attention_heads": "query heads",
    "num_key_value_heads": "key/value heads (q, k, v sizes; KV cache)", "intermediate_size": "MLP width",
    "vocab_size": "embedding and head rows", "tie_word_embeddings": "head shares the embedding matrix",
    "torch_dtype": "checked: float32, bfloat16 or float16 (the step's precision is an argument)",
    "dtype": "as torch_dtype", "quantization_config": "refused: a pre-quantized checkpoint is not modelled",
    "attention_dropout": "dropout_p (one probability where the family has dropout)",
    "use_cache": "saved activations: true runs k and v through a DynamicCache when training without checkpointing "
                 "(absent: read as false)",
}
CONFIG_FIELDS: dict[str, dict[str, str]] = {
    "gpt2": {"n_layer": "blocks", "n_embd": "width", "n_head": "heads", "n_inner": "MLP width (None: 4h)",
             "n_positions": "learned position rows", "vocab_size": "embedding rows",
             "tie_word_embeddings": "head shares wte",
             "activation_function": "gelu_new, gelu_pytorch_tanh or gelu (saved activations)",
             "attn_pdrop": "dropout_p", "resid_pdrop": "dropout_p", "embd_pdrop": "dropout_p",
             "add_cross_attention": "refused when true (cross-attention blocks)",
             "scale_attn_by_inverse_layer_idx": "refused when true (an extra op on the scores)",
             "reorder_and_upcast_attn": "refused when true (fp32 attention scores)",
             "torch_dtype": _COMMON_DECODER["torch_dtype"], "dtype": "as torch_dtype",
             "quantization_config": _COMMON_DECODER["quantization_config"], "use_cache": _COMMON_DECODER["use_cache"]},
    "bert": {"num_hidden_layers": "blocks", "hidden_size": "width", "num_attention_heads": "heads",
             "intermediate_size": "MLP width", "vocab_size": "word rows", "max_position_embeddings": "position rows",
             "type_vocab_size": "token-type rows", "architectures": "...ForSequenceClassification adds a classifier",
             "num_labels": "classifier outputs", "id2label": "classifier outputs", "hidden_act": "gelu",
             "hidden_dropout_prob": "dropout_p", "attention_probs_dropout_prob": "dropout_p",
             "classifier_dropout": "dropout_p (None: hidden_dropout_prob)",
             "position_embedding_type": "absolute only (relative types add a distance embedding)",
             "is_decoder": "refused when true", "add_cross_attention": "refused when true",
             "torch_dtype": _COMMON_DECODER["torch_dtype"], "dtype": "as torch_dtype",
             "quantization_config": _COMMON_DECODER["quantization_config"]},
}
CONFIG_FIELDS["roberta"] = dict(CONFIG_FIELDS["bert"], architectures="RobertaForSequenceClassification adds its "
                                "classification head (dense + out_proj) instead of the pooler")
for _arch in LLAMA_LIKE:
    CONFIG_FIELDS[_arch] = dict(_COMMON_DECODER, hidden_act="the MLP activation (saved activations)")
for _arch in LLAMA_LIKE[:-1]:  # every one but gpt_neox, whose head size is always h / heads
    CONFIG_FIELDS[_arch]["head_dim"] = "head size (default h / heads; Qwen3 128, Gemma 256)"
for _arch in ("llama", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "olmo2", "gpt_neox"):
    CONFIG_FIELDS[_arch]["attention_bias"] = "biases on q, k, v, o (GPT-NeoX: on query_key_value and dense)"
CONFIG_FIELDS["llama"]["mlp_bias"] = "biases on gate, up, down"
for _arch in ("mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2", "gemma3_text"):
    CONFIG_FIELDS[_arch]["sliding_window"] = "tokens a sliding layer sees (KV cache)"
for _arch in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
    CONFIG_FIELDS[_arch].update(use_sliding_window="sliding attention on (KV cache)",
                                max_window_layers="blocks from this index slide (qwen2, qwen3)")
for _arch in ("qwen2", "qwen3", "gemma2", "gemma3_text"):
    CONFIG_FIELDS[_arch]["layer_types"] = "per block full_attention or sliding_attention (KV cache)"
CONFIG_FIELDS["gemma"]["hidden_act"] = "the MLP activation ('gelu' is read as gelu_pytorch_tanh, as GemmaConfig does)"
for _arch in ("gemma2", "gemma3_text"):  # these read hidden_activation; hidden_act is ignored by transformers
    del CONFIG_FIELDS[_arch]["hidden_act"]
    CONFIG_FIELDS[_arch]["hidden_activation"] = "the MLP activation (Gemma 2/3's name for it)"
for _arch in ("gemma2", "gemma3_text"):
    CONFIG_FIELDS[_arch].update(attn_logit_softcapping="softcapping of the scores (saved activations)",
                                final_logit_softcapping="softcapping of the logits (saved activations)",
                                query_pre_attn_scalar="a scale only: no memory")
CONFIG_FIELDS["gemma3_text"]["use_bidirectional_attention"] = "refused when true"
CONFIG_FIELDS["gemma3_text"]["sliding_window_pattern"] = "layer_types when not given (every n-th full)"
CONFIG_FIELDS["qwen2_moe"]["qkv_bias"] = "biases on q, k, v"
for _arch in ("mixtral", "qwen2_moe", "qwen3_moe"):
    CONFIG_FIELDS[_arch].update(num_experts_per_tok="experts per token (active parameters)",
                                output_router_logits="refused when true (the router's auxiliary loss)")
CONFIG_FIELDS["mixtral"].update(num_local_experts="routed experts", router_jitter_noise="0 only")
for _arch in ("qwen2_moe", "qwen3_moe"):
    CONFIG_FIELDS[_arch].update(num_experts="routed experts", moe_intermediate_size="one expert's width",
                                decoder_sparse_step="1 only (every block sparse)",
                                mlp_only_layers="empty only (every block sparse)")
CONFIG_FIELDS["qwen3_moe"]["num_local_experts"] = "routed experts (the name transformers 5 saves for num_experts)"
CONFIG_FIELDS["qwen2_moe"]["shared_expert_intermediate_size"] = "the shared expert's width (0: none)"
for _arch in ("qwen2_moe", "qwen3_moe"):
    CONFIG_FIELDS[_arch]["norm_topk_prob"] = "renormalized top-k routing weights (saved activations)"
CONFIG_FIELDS["phi3"].update(resid_pdrop="dropout_p", embd_pdrop="unused by Phi3Model (transformers 5.24): no memory")
CONFIG_FIELDS["gpt_neox"].update(hidden_dropout="dropout_p", use_parallel_residual="saved activations",
                                 rotary_pct="rotated dims per head (saved activations; no parameters)",
                                 rope_parameters="partial_rotary_factor as rotary_pct",
                                 classifier_dropout="no memory for a causal LM")
for _arch in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"):
    CONFIG_FIELDS[_arch]["(q_norm, k_norm)"] = "always present in this family: q/k RMSNorm"

# One value per listed field that memmath does not model, for the tests.
UNSUPPORTED_EXAMPLES = {
    "torch_dtype": "float8_e4m3fn", "dtype": "int8", "quantization_config": {"quant_method": "gptq"},
    "activation_function": "relu", "hidden_act": "quick_gelu", "hidden_activation": "relu",
    "add_cross_attention": True, "scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True,
    "position_embedding_type": "relative_key", "is_decoder": True, "use_bidirectional_attention": True,
    "output_router_logits": True, "router_jitter_noise": 0.1, "decoder_sparse_step": 2, "mlp_only_layers": [0],
    "layer_types": ["chunked_attention"], "attention_dropout": 1.5, "resid_pdrop": -0.1, "use_cache": "yes",
}

# The activations each family's MLP may use here (transformers' ACT2FN names).
_ACTIVATIONS = {"gpt2": ("gelu_new", "gelu_pytorch_tanh", "gelu"), "bert": ("gelu",), "roberta": ("gelu",),
                "gemma": ("gelu_pytorch_tanh", "gelu"), "gemma2": ("gelu_pytorch_tanh",),
                "gemma3_text": ("gelu_pytorch_tanh",), "gpt_neox": ("gelu",)}
_DTYPES = ("float32", "bfloat16", "float16")

# Config-class defaults that differ between families (transformers 5.24 configuration_<type>.py).
_DEFAULTS = {
    "qwen2": dict(tie_word_embeddings=False), "qwen3": dict(head_dim=128), "qwen3_moe": dict(num_key_value_heads=4),
    "gemma": dict(head_dim=256, tie_word_embeddings=True),
    "gemma2": dict(head_dim=256, tie_word_embeddings=True, sliding_window=4096),
    "gemma3_text": dict(head_dim=256, tie_word_embeddings=True, sliding_window=4096), "mistral": dict(sliding_window=4096),
    "qwen2_moe": dict(qkv_bias=True), "gpt_neox": dict(attention_bias=True),
}


def from_hf_config(config) -> ModelShape:
    """A ModelShape from a transformers config: a dict, JSON text, or a path to config.json (or its folder).

    Only JSON is read; nothing is executed. model_type may be any of SUPPORTED_MODEL_TYPES: gpt2
    (GPT2LMHeadModel), bert and roberta (BertModel/RobertaModel with the pooler, plus the
    classifier when architectures names a ...ForSequenceClassification; a masked-LM head is not
    counted), and the rotary decoders llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe,
    gemma, gemma2, gemma3_text, phi3, olmo2 and gpt_neox (their ...ForCausalLM). CONFIG_FIELDS
    lists, per model_type, every field that changes memory and what memmath does with it; a value
    memmath does not model, a missing field, a field of the wrong kind or an unsupported
    model_type raises ValueError naming it.
    """
    config = _load_config(config)
    model_type = config.get("model_type")
    if model_type is None:
        raise ValueError(f"config is missing the field 'model_type' (one of {', '.join(SUPPORTED_MODEL_TYPES)})")
    if isinstance(model_type, str) and model_type not in SUPPORTED_MODEL_TYPES:
        # A vision-language config (gemma3, llava, mistral3, qwen2_vl, qwen2_5_vl): the language model from its
        # text_config, the vision tower and projector from the rest (memmath/multimodal.py); others refused by name.
        from .multimodal import MULTIMODAL_MODEL_TYPES, REFUSED_MODEL_TYPES, from_multimodal_config

        if (model_type in MULTIMODAL_MODEL_TYPES or model_type in REFUSED_MODEL_TYPES
                or isinstance(config.get("vision_config"), dict)):
            return from_multimodal_config(config)
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"config field 'model_type' {validate.describe(model_type)} is not supported; "
                         f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    get = _ConfigReader(config, _DEFAULTS.get(model_type, {}))
    _check_common(config, model_type)
    name = _config_name(config, model_type)
    if model_type == "gpt2":
        for key in ("add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            _refuse_true(get, key)
        act = _activation(config, model_type, "activation_function", "gelu_new")
        return replace(gpt2_model(
            n_layers=get("n_layer"), hidden_size=get("n_embd"), n_heads=get("n_head"),
            vocab_size=get("vocab_size"), max_positions=get("n_positions"),
            intermediate_size=get("n_inner", None), tied_embeddings=get.flag("tie_word_embeddings", True), name=name,
        ), arch="gpt2", hidden_act=act, use_cache=get.flag("use_cache", False),
            dropout_p=_dropout(get, {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}))
    if model_type in ("bert", "roberta"):
        return _bert_from_config(config, get, model_type, name)
    return _decoder_from_config(config, get, model_type, name)


def _check_common(config, model_type):
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is not None and value not in _DTYPES:
            raise ValueError(f"config field {key!r} must be one of {', '.join(_DTYPES)}; got {validate.describe(value)}")
    if config.get("quantization_config") is not None:
        raise ValueError("config field 'quantization_config' names a pre-quantized checkpoint, which memmath does "
                         "not model; remove it and choose the format with weights_format= or QLoRA(...)")


def _refuse_true(get, key):
    if get.flag(key, False):
        raise ValueError(f"config field {key!r} is true; memmath models only {key}=false")


def _activation(config, model_type, key, default):
    value = config.get(key)
    value = default if value is None else value
    allowed = _ACTIVATIONS.get(model_type, ("silu",))
    if value not in allowed:
        raise ValueError(f"config field {key!r} is {validate.describe(value)}; memmath models {', '.join(allowed)} for {model_type}")
    return value


def _dropout(get, fields: dict) -> float:
    """One dropout probability for every place the family has dropout: p = 0 everywhere or p > 0 everywhere."""
    values = {key: get.probability(key, default) for key, default in fields.items()}
    on = {key for key, p in values.items() if p > 0}
    if on and len(on) != len(values):
        off = ", ".join(sorted(set(values) - on))
        raise ValueError(f"config fields {', '.join(sorted(on))} are > 0 but {off} is 0; memmath models dropout in "
                         "every place the family has it or in none (set them alike)")
    return max(values.values())


def _bert_from_config(config, get, model_type, name):
    # A sequence-classification checkpoint adds a classifier with one output per label.
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError("config field 'architectures' must be a list of class names; "
                         f"got {validate.describe(architectures)}")
    for key in ("is_decoder", "add_cross_attention"):
        _refuse_true(get, key)
    position = config.get("position_embedding_type") or "absolute"
    if position != "absolute":
        raise ValueError(f"config field 'position_embedding_type' is {validate.describe(position)}; memmath models 'absolute' only")
    _activation(config, model_type, "hidden_act", "gelu")
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    labels = len(config["id2label"]) if isinstance(config.get("id2label"), dict) else get("num_labels", 2)
    hidden_p = get.probability("hidden_dropout_prob", 0.1)
    drops = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    if classifier:
        drops["classifier_dropout"] = hidden_p  # None falls back to hidden_dropout_prob (BertForSequenceClassification)
    shape = bert_model(
        n_layers=get("num_hidden_layers"), hidden_size=get("hidden_size"), n_heads=get("num_attention_heads"),
        intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
        max_positions=get("max_position_embeddings"),
        type_vocab_size=get("type_vocab_size", 2 if model_type == "bert" else 1),
        num_labels=labels if classifier else 0, name=name,
    )
    return replace(shape, arch=model_type, hidden_act="gelu", dropout_p=_dropout(get, drops))


def _decoder_from_config(config, get, model_type, name):
    """Every rotary decoder (family 'llama') from its config, with its model_type's layout."""
    a = get("num_attention_heads")
    h = get("hidden_size")
    layers = get("num_hidden_layers")
    act_key = "hidden_activation" if model_type in ("gemma2", "gemma3_text") else "hidden_act"
    act = _activation(config, model_type, act_key, "gelu_pytorch_tanh" if model_type.startswith("gemma") else
                      "gelu" if model_type == "gpt_neox" else "silu")
    if model_type == "gemma" and act == "gelu":
        act = "gelu_pytorch_tanh"  # GemmaConfig.__post_init__ replaces the legacy 'gelu' with the tanh form
    options = dict(arch=model_type, hidden_act=act)
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text"):
        options["qk_norm"] = "head"
    if model_type == "olmo2":
        options.update(qk_norm="full", norm_layout="post")
    if model_type in ("gemma2", "gemma3_text"):
        options["norm_layout"] = "sandwich"
        if model_type == "gemma3_text":
            _refuse_true(get, "use_bidirectional_attention")
    if model_type == "qwen2":
        options["qkv_bias"] = True  # Qwen2Attention: bias=True on q, k, v, none on o
    if model_type == "qwen2_moe":
        options["qkv_bias"] = get.flag("qkv_bias", True)
    if model_type == "phi3":
        options.update(fused_qkv=True, fused_gate_up=True)
    if model_type == "gpt_neox":
        options.update(layer_norm=True, fused_qkv=True, gated_mlp=False,
                       parallel_residual=get.flag("use_parallel_residual", True))
        # GPTNeoXConfig: rope_parameters' partial_rotary_factor, from rotary_pct (default 0.25); the
        # attention rotates int(head_size * factor) dims of each head (GPTNeoXAttention.rotary_ndims).
        rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
        factor = rope.get("partial_rotary_factor", config.get("rotary_pct", 0.25))
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise ValueError(f"config field 'rotary_pct' must be a fraction in (0, 1]; got {validate.describe(factor)}")
        options["rotary_dim"] = max(1, int(get("hidden_size") // get("num_attention_heads") * factor))
    if model_type in ("gemma2", "gemma3_text"):
        gemma2 = model_type == "gemma2"  # Gemma2Config caps at 50 / 30 by default, Gemma3TextConfig not at all
        options.update(attn_softcap=_softcap(config, "attn_logit_softcapping", 50.0 if gemma2 else None),
                       final_softcap=_softcap(config, "final_logit_softcapping", 30.0 if gemma2 else None))
    if model_type in ("mixtral", "qwen2_moe", "qwen3_moe"):
        _refuse_true(get, "output_router_logits")
        if model_type == "mixtral":
            jitter = get.probability("router_jitter_noise", 0.0)
            if jitter:
                raise ValueError(f"config field 'router_jitter_noise' is {jitter}; memmath models 0 only")
            experts = get("num_local_experts", 8)
            options["expert_intermediate_size"] = get("intermediate_size")
        else:
            # Qwen3MoeConfig (transformers 5.24) maps num_experts onto num_local_experts and saves that name.
            key = "num_local_experts" if model_type == "qwen3_moe" and config.get("num_local_experts") is not None \
                else "num_experts"
            experts = get(key, 60 if model_type == "qwen2_moe" else 128)
            if key == "num_local_experts" and config.get("num_experts") not in (None, experts):
                raise ValueError(f"config fields 'num_experts' ({config['num_experts']}) and 'num_local_experts' "
                                 f"({experts}) disagree; Qwen3MoeConfig keeps one number of routed experts")
            options["expert_intermediate_size"] = get("moe_intermediate_size", 1408 if model_type == "qwen2_moe" else 768)
            step = get("decoder_sparse_step", 1)
            if step != 1:
                raise ValueError(f"config field 'decoder_sparse_step' is {step}; memmath models 1 only (every "
                                 "block a mixture of experts)")
            if config.get("mlp_only_layers"):
                raise ValueError(f"config field 'mlp_only_layers' is {validate.describe(config['mlp_only_layers'])}; memmath models "
                                 "an empty list only (every block a mixture of experts)")
        options.update(n_experts=experts, experts_per_tok=get("num_experts_per_tok", 2 if model_type == "mixtral" else
                                                              4 if model_type == "qwen2_moe" else 8))
        # MixtralTopKRouter always renormalizes the top-k weights; Qwen-MoE routers when norm_topk_prob is true.
        options["norm_topk_prob"] = True if model_type == "mixtral" else get.flag("norm_topk_prob", False)
        if model_type == "qwen2_moe":
            shared = get("shared_expert_intermediate_size", 5632, low=0)
            options.update(shared_expert_intermediate_size=shared, shared_expert_gate=True)
    window, types = _attention_layout(config, get, model_type, layers)
    options.update(sliding_window=window, layer_types=types)
    drops = {"attention_dropout": 0.0}
    if model_type == "phi3":  # embd_pdrop: Phi3Model (transformers 5.24) builds no embedding dropout
        drops.update(resid_pdrop=0.0)
    if model_type == "gpt_neox":
        drops.update(hidden_dropout=0.0)
    options["dropout_p"] = _dropout(get, drops)
    # As stated: save_pretrained writes it (true by default); a config without it is read as false, not as the
    # config classes' true, so that memmath's presets (their fields without it) are the recorded steps' setting.
    options["use_cache"] = get.flag("use_cache", False)
    options["trained_context"] = get("max_position_embeddings", None)  # no memory: the planner's context note
    bias = model_type in CONFIG_FIELDS and "attention_bias" in CONFIG_FIELDS[model_type]
    kv = get("num_key_value_heads", None)
    head_dim = get("head_dim", None) if "head_dim" in CONFIG_FIELDS[model_type] else None  # GPT-NeoX: h / a
    shape = llama_model(
        n_layers=layers, hidden_size=h, n_heads=a, n_kv_heads=kv, head_dim=head_dim,
        intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
        tied_embeddings=get.flag("tie_word_embeddings", False),
        attention_bias=get.flag("attention_bias", False) if bias else False,
        mlp_bias=get.flag("mlp_bias", False) if model_type == "llama" else False, name=name,
    )
    return replace(shape, **options)


def _attention_layout(config, get, model_type, layers):
    """(sliding_window, layer_types) as transformers' config classes derive them."""
    if "sliding_window" not in CONFIG_FIELDS[model_type]:
        return None, None
    # An explicit null turns sliding off; a missing field takes the config class's default (_DEFAULTS).
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not get.flag("use_sliding_window", False):
        window = None  # Qwen2Config.__post_init__: sliding_window only with use_sliding_window (Qwen2-MoE saves 0)
    else:
        window = None if config.get("sliding_window", 0) is None else get("sliding_window", None)
    given = config.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers or any(t not in LAYER_TYPES for t in given):
            raise ValueError(f"config field 'layer_types' must list one of {', '.join(LAYER_TYPES)} per block "
                             f"({layers}); got {validate.describe(given)}")
        if window is None:
            return None, None if "sliding_attention" not in given else _no_window(given)
        return window, tuple(given)
    if window is None:
        return None, None
    if model_type in ("qwen2", "qwen3"):  # sliding from max_window_layers on
        first = get("max_window_layers", 28, low=0)
        return window, tuple("sliding_attention" if i >= first else "full_attention" for i in range(layers))
    if model_type == "qwen2_moe":  # Qwen2MoeConfig: even blocks (0, 2, ...) below max_window_layers slide
        first = get("max_window_layers", 28, low=0)
        return window, tuple("sliding_attention" if (i + 1) % 2 and i < first else "full_attention"
                             for i in range(layers))
    if model_type == "gemma2":  # Gemma2Config: even blocks (0, 2, ...) slide
        return window, tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers))
    if model_type == "gemma3_text":  # every sliding_window_pattern-th block is full (default 6)
        pattern = get("sliding_window_pattern", 6)
        return window, tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers))
    # mistral, mixtral, phi3, qwen3_moe: no layer_types, so transformers' cache slides every layer
    return window, ("sliding_attention",) * layers


def _softcap(config, key, default):
    """A softcapping constant: None (off) or a positive number, as Gemma 2/3's config classes keep it."""
    value = config.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"config field {key!r} must be a positive number or null (no softcapping); "
                         f"got {validate.describe(value)}")
    return None if value is None else float(value)


def _no_window(types):
    raise ValueError("config field 'layer_types' names sliding_attention blocks but sliding_window is null")


MAX_NAME = 200  # characters of _name_or_path kept as the model's label


def _config_name(config: dict, model_type: str) -> str:
    """The label from _name_or_path: a string (transformers writes one), cut to MAX_NAME characters."""
    name = config.get("_name_or_path")
    if name is None or (isinstance(name, str) and not name):  # never `name or ...`: an array has no truth value
        name = model_type
    if not isinstance(name, str):
        raise ValueError(f"config field '_name_or_path' must be a string; got a {type(name).__name__}")
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 3] + "..."


# The range of each config field: the range of the ModelShape field it fills (others: 1 to MAX_DIM).
_CONFIG_LIMITS = {
    "n_layer": (1, validate.MAX_LAYERS), "num_hidden_layers": (1, validate.MAX_LAYERS),
    "vocab_size": (1, validate.MAX_VOCAB), "n_positions": (1, validate.MAX_SEQ),
    "max_position_embeddings": (1, validate.MAX_SEQ), "type_vocab_size": (0, validate.MAX_DIM),
    "num_labels": (0, validate.MAX_DIM),
}


class _ConfigReader:
    _MISSING = object()

    def __init__(self, config: dict, defaults: dict | None = None):
        self.config = config
        self.defaults = defaults or {}  # the config class's own defaults, where they differ by family

    def __call__(self, key, default=_MISSING, low=1):
        if key not in self.config or self.config[key] is None:
            default = self.defaults.get(key, default)
            if default is self._MISSING:
                raise ValueError(f"config is missing the field {key!r}")
            return default
        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config field {key!r} must be a whole number; got {validate.describe(value)}")
        limit_low, high = _CONFIG_LIMITS.get(key, (low, validate.MAX_DIM))
        return validate.count(f"config field {key!r}", value, low=min(low, limit_low), high=high)

    def probability(self, key, default):
        value = self.config.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"config field {key!r} must be a probability in [0, 1); got {validate.describe(value)}")
        return float(value)

    def flag(self, key, default):
        default = self.defaults.get(key, default)
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"config field {key!r} must be true or false; got {validate.describe(value)}")
        return value


MAX_CONFIG_BYTES = 4 * 2**20  # a real config.json is a few kB; a file larger than 4 MiB is not one


def _load_config(config) -> dict:
    if isinstance(config, dict):
        return config
    if isinstance(config, (str, os.PathLike)):
        if isinstance(config, str) and config.lstrip().startswith(("{", "[")):
            return parse_json_config(config, "config")
        path, text = _read_config_file(config)
        return parse_json_config(text, f"config file {validate.describe(path.name)}")
    raise TypeError(f"config must be a dict, JSON text or a path to config.json; got {type(config).__name__}")


def _read_config_file(config) -> tuple[Path, str]:
    """The text of a regular .json file (config.json inside a folder), at most MAX_CONFIG_BYTES.

    One rule for symbolic links (sources.py says why): inside the local Hugging Face cache a link is
    followed while its target stays inside the cache root (huggingface_hub's snapshots/<commit>/config.json
    links into blobs/); anywhere else a link given as the file or its folder is refused rather than
    followed. Nothing but the file's name is quoted back.
    """
    from .sources import LinkOutsideCache, cache_root_holding, follow_inside

    hint = "(give a dict, JSON text, a config.json path or the folder that holds it)"
    folder = None
    try:
        path = Path(config)
        root = cache_root_holding(path)
        if root is None:
            real = path
            if path.is_dir() and not path.is_symlink():
                folder, path = path, path / "config.json"
                real = path
        else:
            real = follow_inside(path, root)
            if real.is_dir():
                folder, path = path, path / "config.json"
                real = follow_inside(path, root)
        info = os.lstat(real)
    except LinkOutsideCache:
        raise
    except (OSError, ValueError) as error:  # missing, a name too long, a NUL byte, no permission
        if folder is not None and isinstance(error, FileNotFoundError):
            raise ValueError(f"the folder {validate.describe(str(folder))} holds no config.json {hint}") from None
        raise ValueError(f"config path {validate.describe(str(config))} cannot be read "
                         f"({error.__class__.__name__}) {hint}") from None
    where = f"config path {validate.describe(str(path))}"
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{where} is a symbolic link, which is not followed outside the Hugging Face cache; "
                         f"give the file itself {hint}")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where} is not a regular file {hint}")
    if not path.name.endswith(".json"):
        raise ValueError(f"{where} must name a .json file such as config.json {hint}")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {info.st_size:,} bytes; a config.json is a few kB and at most "
                         f"{MAX_CONFIG_BYTES:,} bytes (4 MiB) are read")
    from .files import NotARegularFile, read_bounded

    try:
        data = read_bounded(real, MAX_CONFIG_BYTES)
    except NotARegularFile:  # swapped since lstat
        raise ValueError(f"{where} is not a regular file {hint}") from None
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.__class__.__name__}) {hint}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds more than {MAX_CONFIG_BYTES:,} bytes (4 MiB), more than a config.json")
    return path, data.decode("utf-8", errors="replace")


def _json_hint(error: json.JSONDecodeError) -> str:
    """A likely cause for a JSON error, in words (Python's messages name the symptom, not the cause)."""
    text, pos = error.doc, error.pos
    if pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
        return "the text ends early: paste the whole file, up to its closing '}'"
    if pos == len(text) - len(text.lstrip()) and not text.lstrip().startswith(("{", "[")):
        return "paste the file's contents, which start with '{', not a model name or a path"
    if error.msg.startswith("Expecting property name enclosed in double quotes"):
        return "names need double quotes, and no comma may follow the last entry"
    if error.msg.startswith("Extra data"):
        return "there is more text after the closing '}'"
    return ""


def parse_json_config(text: str, where: str) -> dict:
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {len(text):,} characters; a config.json is a few kB and at most "
                         f"{MAX_CONFIG_BYTES:,} (4 MiB) are read")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        hint = _json_hint(error)
        raise ValueError(f"{where} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
                         + (f" ({hint})" if hint else "")) from None
    except RecursionError:
        raise ValueError(f"{where} nests JSON too deeply to be a transformers config") from None
    except ValueError:  # Python refuses to read an integer of more than 4,300 digits
        raise ValueError(f"{where} holds a number too long to read (more than 4,300 digits); "
                         "a config's sizes are a few digits") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object ({{...}}), got a {type(data).__name__}")
    return data
