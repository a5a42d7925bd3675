"""Model shapes with exact parameter counts, tensor by tensor.

A ModelShape lists every parameter tensor of a GPT-2, LLaMA (also Mistral) or BERT style model, or
of the generic "N parameters in L equal layers". Counts are exact: they match PyTorch's
`sum(p.numel() for p in model.parameters())` for the same transformers config (see tests).
Dimensions may be numpy arrays where a sweep needs them (the parameter count of a uniform model).
"""

from __future__ import annotations

import functools
import re
from dataclasses import field, replace

from .arrays import any_true, is_ndarray, is_numpy_str, np

from . import validate
from .architectures import of
from .units import parse_count
from .recurrent import GatedDeltaNet, Mamba2, ShortConv
from .vision_parts import VisionTensors
from .architectures._parts import LoraAdapter, ParamTensor, factored_size  # noqa: F401 (re-exported)
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd


FAMILIES = ("gpt2", "llama", "bert", "uniform")  # "llama": every rotary decoder, its layout in the options
COMPONENTS = ("embeddings", "attention", "mlp", "norms", "head")
GROUPS = ("embeddings", "layer", "final_norm", "head", "vision")
# the dtypes whose load keeps a record's fp32_modules in fp32 (modeling_utils.py _get_dtype_plan)
LOAD_DTYPES = ("bf16", "fp16")
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
    some targets that exist alone (a record's not_all_linear: Qwen2-MoE's router and experts). Equal only to itself, so
    LoRA(targets="all") and a LoRA that lists every name (and so adapts those too) stay two methods."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, _AllTargets)

    def __ne__(self, other):
        return not isinstance(other, _AllTargets)

    def __hash__(self):
        return hash(("all-linear",) + tuple(self))
LAYER_TYPES = ("full_attention", "sliding_attention")


@frozen
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
    # ---- the layout of a transformers model_type (its record: memmath/architectures/); defaults LLaMA's, GPT-2's, BERT's
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
    # a pre-quantized checkpoint's storage (checkpoints.StoredFormat, from its config's quantization_config); None:
    # the weights are stored in 16 bits
    stored_format: object = None
    # a record's own block variant ("" its default block; Qwen3-Next's "linear_attention"): set through block_layouts
    block_kind: str = ""
    # the linear-attention layers' widths (Qwen3-Next's gated DeltaNet: a memmath.states.GatedDeltaNet; LFM2's gated
    # short convolution: a memmath.states.ShortConv; Granite 4.0's Mamba-2 mixer: a memmath.states.Mamba2); None: none
    linear_attention: object = None
    # multi-head latent attention's widths (architectures/_latent.LatentDims: DeepSeek-V2/V3); None: q, k, v heads
    latent: object = None
    router_groups: tuple | None = None  # DeepSeek's group-limited router: (n_group, topk_group); None: plain top-k
    # blocks whose layout differs from the shape's own, as ((block indices), ((field, value), ...)) pairs naming the
    # ModelShape fields that differ there (DeepSeek-V3's first three blocks: a dense MLP, n_experts 0); () when every
    # block has one layout. layouts() gives each layout as a shape of its own.
    block_layouts: tuple = ()
    # Gemma 4's and Gemma 3n's per-layer input embeddings: (rows, width per block) of embed_tokens_per_layer; None: none
    per_layer_input: tuple | None = None
    # Gemma 3n's AltUp copies of the hidden state, LAuReL rank and whether correct_output_scale applies:
    # (altup_num_inputs, laurel_rank, altup_correct_scale); None: none
    altup: tuple | None = None

    # ---- counts -----------------------------------------------------------------------------
    @property
    def architecture(self):
        """The record of this model's type (memmath/architectures/), or its family's own; None when uniform."""
        return of(self)

    @property
    def has_shape(self) -> bool:
        """True when width, heads and vocabulary are known (activations can be estimated)."""
        return self.hidden_size is not None and self.n_heads is not None

    @property
    def tensor_count_known(self) -> bool:
        """False for the uniform family, whose layers are a parameter count without tensors."""
        return self.family != "uniform"

    @property
    def mixed(self) -> bool:
        """Whether its blocks come in more than one layout (block_layouts)."""
        return bool(self.block_layouts)

    def layouts(self) -> tuple:
        """(layout, blocks) for each block layout in the order of its first block: `layout` a ModelShape whose every
        block is of that layout (ask it for tensors("layer") and its block's trace), `blocks` the indices of the
        blocks that have it. One pair for a shape of one layout: (self, every block)."""
        if not self.block_layouts:
            return ((self, tuple(range(self.n_layers))),)
        return _layouts(self)

    def block_layout(self, index: int) -> "ModelShape":
        """The one-layout shape of block `index` (0-based)."""
        for layout, blocks in self.layouts():
            if index in blocks:
                return layout
        raise ValueError(f"block index must be from 0 to {self.n_layers - 1}; got {validate.describe(index)}")

    def tensor_copies(self, groups=GROUPS) -> list[tuple]:
        """(group, tensor, copies) for every parameter tensor of `groups`: a block's tensors once per block of its
        layout, the others once."""
        rows = []
        for group in groups:
            if group != "layer":
                rows += [(group, tensor, 1) for tensor in self.tensors(group)]
                continue
            for layout, blocks in self.layouts():
                rows += [(group, tensor, len(blocks)) for tensor in layout.tensors("layer")]
        return rows

    def kept_in_fp32(self, tensor, dtype) -> bool:
        """Whether transformers keeps this parameter in fp32 when it loads the model in `dtype` ("bf16" or "fp16"):
        its name matches the record's fp32_modules (either dtype) or fp32_modules_fp16 (fp16 only)."""
        record = self.architecture
        if record is None or dtype not in LOAD_DTYPES:
            return False
        patterns = record.fp32_modules + (record.fp32_modules_fp16 if dtype == "fp16" else ())
        return any(re.search(pattern, tensor.name) for pattern in patterns)

    def fp32_kept_params(self, dtype, groups=GROUPS):
        """Parameters of `groups` that a load in `dtype` keeps in fp32 (kept_in_fp32): 0 for most models."""
        record = self.architecture
        if record is None or dtype not in LOAD_DTYPES or not (record.fp32_modules or record.fp32_modules_fp16):
            return 0
        return sum(copies * t.numel for _, t, copies in self.tensor_copies(groups) if self.kept_in_fp32(t, dtype))

    def blocks_params(self, blocks=None):
        """Parameters in the given blocks (indices; None: every block)."""
        if not self.block_layouts:
            count = self.n_layers if blocks is None else len(blocks)
            return count * self.params_per_layer
        chosen = None if blocks is None else set(blocks)
        return sum(layout.params_per_layer * (len(indices) if chosen is None else len(chosen.intersection(indices)))
                   for layout, indices in self.layouts())

    def last_blocks(self, k) -> tuple:
        """(layout, count) for each layout among the last k blocks (k may be an int64 array: counts per value)."""
        if not self.block_layouts:
            return ((self, k),)
        first = self.n_layers - np.asarray(k) if is_ndarray(k) else self.n_layers - k
        return tuple((layout, len(blocks) - np.searchsorted(np.asarray(blocks), first) if is_ndarray(first)
                      else sum(1 for i in blocks if i >= first)) for layout, blocks in self.layouts())

    def tensors(self, group: str) -> list[ParamTensor]:
        """The parameter tensors of one group: 'embeddings', 'layer' (one block), 'final_norm', 'head'. A shape
        whose blocks differ (block_layouts) has no one block: ask layouts() or tensor_copies()."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}; got {validate.describe(group)}")
        if group == "layer" and self.block_layouts:
            raise ValueError(f"{self.name or self.arch} has blocks of {len(self.layouts())} layouts: "
                             "tensors('layer') names one block; ask layouts() or tensor_copies()")
        if group == "vision":  # the vision tower and projector, every block listed (none in a text model)
            return [] if self.vision is None else self.vision.tensors()
        record = self.architecture
        return _uniform_tensors(self, group) if record is None else record.tensors(self, group)

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
        return outside + vision + self.blocks_params()

    def component_params(self) -> dict[str, object]:
        """Parameters per component (embeddings, attention, mlp, norms, head; a vision-language model adds
        vision_tower and projector) over the whole model."""
        totals = {c: 0 for c in COMPONENTS}
        for _, tensor, repeat in self.tensor_copies():
            totals[tensor.component] = totals.get(tensor.component, 0) + repeat * tensor.numel
        return totals

    def breakdown(self) -> pd.DataFrame:
        """One row per tensor: group, path key, component, shape, count per copy, copies, total; and blocks, the
        1-based blocks a block tensor is in ("1-32"; a mixed shape has a row per layout: "1, 3, 5")."""
        import pandas as pd  # only here: `import memmath` stays numpy-only
        rows = []
        for group in GROUPS:
            for layout, blocks in (self.layouts() if group == "layer" else ((self, None),)):
                repeat = 1 if blocks is None else len(blocks)
                for tensor in layout.tensors(group):
                    rows.append({
                        "group": group, "tensor": tensor.name, "component": tensor.component,
                        "shape": " x ".join(str(d) for d in tensor.shape), "params": tensor.numel,
                        "copies": repeat, "total": tensor.numel * repeat,
                        "blocks": "" if blocks is None else _spans(blocks),
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

    def lora_adapters(self, targets, *, present_only: bool = False) -> list[LoraAdapter]:
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
        present_only: a target this block lacks adapts nothing here (one layout of a model whose blocks differ).
        """
        targets = lora_targets(targets)
        if self.block_layouts:
            raise ValueError(f"{self.name or self.arch} has blocks of {len(self.layouts())} layouts: ask "
                             "lora_adapter_copies for every block's adapters")
        record = self.architecture
        refused = record.all_linear_refusal(self) if record is not None and record.all_linear_refusal else ""
        if refused and isinstance(targets, _AllTargets):
            raise validate.FieldError("targets", f"LoRA targets 'all' (peft's all-linear) on a "
                                      f"{self.arch or self.family} model: {refused}")
        table = {} if record is None else record.lora_modules(self)
        every = set(targets) == set(LORA_TARGETS)  # every name: what exists in this family
        skipped = record.not_all_linear if record is not None and isinstance(targets, _AllTargets) else ()
        chosen: dict[str, LoraAdapter] = {}
        for target in targets:
            entry = table.get(target)
            if target in skipped or ((every or present_only) and (entry is None or isinstance(entry, str))):
                continue
            if entry is None or isinstance(entry, str):
                available = ", ".join(t for t in LORA_TARGETS if t in table and not isinstance(table[t], str))
                why = f" ({entry})" if isinstance(entry, str) else ""
                raise validate.FieldError(
                    "targets", f"LoRA target {target!r} does not exist in a {self.arch or self.family} model{why}; "
                    f"allowed: {available or 'none'}")
            for module, *dims in (entry if isinstance(entry, list) else [entry]):
                chosen[module] = LoraAdapter(module, *dims)
        order = () if record is None else record.adapter_order(self)
        return sorted(chosen.values(), key=lambda a: order.index(a.module) if a.module in order else len(order))

    def lora_adapter_copies(self, targets) -> list[tuple]:
        """(LoraAdapter, blocks) for each tensor the targets adapt, with the number of blocks that have it: the
        blocks of each layout adapt what exists in them (a dense block of Llama 4 Maverick has no router), and a
        target that exists in no block is refused by name."""
        if not self.block_layouts:
            return [(adapter, self.n_layers) for adapter in self.lora_adapters(targets)]
        named = lora_targets(targets)
        rows, found = [], set()
        for layout, blocks in self.layouts():
            if isinstance(named, _AllTargets):
                rows += [(adapter, len(blocks)) for adapter in layout.lora_adapters(named)]
                continue
            table = layout.architecture.lora_modules(layout)
            found.update(t for t in named if isinstance(table.get(t), (tuple, list)))
            rows += [(adapter, len(blocks)) for adapter in layout.lora_adapters(named, present_only=True)]
        every = isinstance(named, _AllTargets) or set(named) == set(LORA_TARGETS)  # what exists, as lora_adapters
        missing = () if every else tuple(t for t in named if t not in found)
        if missing:
            self.layouts()[-1][0].lora_adapters(missing)  # refuses the target by name, with what exists
        return rows

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
            if not isinstance(self.vision, VisionTensors) or self.family != "llama":
                raise validate.FieldTypeError("vision", "vision must be None or the VisionParts of a rotary decoder "
                                              f"(family 'llama') read by from_hf_config; got {validate.describe(self.vision)}")
        self._check_options()
        self._check_layouts()
        if self.family == "uniform":
            self._check_uniform()
        else:
            self._check_transformer()

    def _check_layouts(self):
        object.__setattr__(self, "block_kind", validate.text_field("block_kind", self.block_kind))
        if self.linear_attention is not None and not isinstance(self.linear_attention,
                                                                (GatedDeltaNet, ShortConv, Mamba2)):
            raise validate.FieldTypeError("linear_attention", "linear_attention must be None or a "
                                          "memmath.states.GatedDeltaNet, ShortConv or Mamba2 of the linear-attention "
                                          "widths; got "
                                          f"{validate.describe(self.linear_attention)}")
        if not self.block_layouts:
            object.__setattr__(self, "block_layouts", ())
            return
        if self.family == "uniform" or not isinstance(self.block_layouts, tuple):
            raise ValueError("block_layouts must be a tuple of ((block indices), ((field, value), ...)) pairs of a "
                             f"transformer model; got {validate.describe(self.block_layouts)}")
        seen = set()
        for entry in self.block_layouts:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple)
                    and isinstance(entry[1], tuple)):
                raise ValueError("block_layouts must hold ((block indices), ((field, value), ...)) pairs; got "
                                 f"{validate.describe(entry)}")
            blocks, changes = entry
            for i in blocks:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n_layers or i in seen:
                    raise ValueError(f"block_layouts' block indices must be distinct whole numbers from 0 to "
                                     f"{self.n_layers - 1}; got {validate.describe(i)}")
                seen.add(i)
            for change in changes:
                if not (isinstance(change, tuple) and len(change) == 2 and change[0] in LAYOUT_FIELDS):
                    raise ValueError(f"block_layouts' changes must be (field, value) pairs of {', '.join(LAYOUT_FIELDS)}; "
                                     f"got {validate.describe(change)}")

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
        record = self.architecture
        required = ["hidden_size", "n_heads", "intermediate_size", "vocab_size"]
        if not record.rotary:  # learned position embeddings (GPT-2, BERT): max_positions rows
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
        if not record.rotary and (self.attention_bias or self.mlp_bias):
            raise ValueError("attention_bias and mlp_bias are LLaMA options; GPT-2 and BERT always have biases")
        if record.causal and (self.type_vocab_size or self.num_labels):
            raise ValueError("type_vocab_size and num_labels apply to BERT models only")
        if not record.causal and self.tied_embeddings:
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
        if decoder_options and not getattr(self.architecture, "rotary", False):
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
        if self.block_layouts:  # each layout's blocks: their routed experts less those a token reaches
            return self.n_params - sum(len(blocks) * layout._unreached_per_block()
                                       for layout, blocks in self.layouts())
        if not self.n_experts:
            return self.n_params
        return self.n_params - self.n_layers * self._unreached_per_block()

    @property
    def moe_blocks(self) -> int:
        """Blocks with routed experts (every block of a mixture of experts but the dense ones among them)."""
        return sum(len(blocks) for layout, blocks in self.layouts() if layout.n_experts)

    @property
    def routed_expert_params(self):
        """Parameters in the routed experts' tensors over every block (not a shared expert's); 0 for a dense model."""
        return sum((copies * t.numel for _, t, copies in self.tensor_copies(("layer",)) if routed_expert(t)), 0)

    @property
    def largest_block_params(self):
        """Parameters in the largest block (every block's, where all have one layout)."""
        return max(layout.params_per_layer for layout, _ in self.layouts())

    def _unreached_per_block(self):
        """Parameters of one block's routed experts a token is not sent to (0 for a dense block)."""
        if not self.n_experts:
            return 0
        # one routed expert's tensors (gate, up, down, and gpt-oss's biases): the block's stacked experts / E
        per_expert = sum((t.numel for t in self.tensors("layer") if routed_expert(t)), 0)
        per_expert = per_expert // self.n_experts
        return (self.n_experts - self.experts_per_tok) * per_expert

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
        record = self.architecture
        if record is not None and not record.grouped_query and (kv != a or self.head_dim * a != h):
            raise ValueError(f"{self.family} models use n_kv_heads = n_heads and head_dim = hidden_size / n_heads")


# The fields a block layout may set: what one block's tensors and trace read. The rest (widths of the residual
# stream and vocabulary, the embeddings and head, the attention windows per block) belong to the whole model.
LAYOUT_FIELDS = ("n_heads", "n_kv_heads", "head_dim", "intermediate_size", "attention_bias", "mlp_bias", "qkv_bias",
                 "qk_norm", "gated_mlp", "hidden_act", "n_experts", "experts_per_tok", "expert_intermediate_size",
                 "shared_expert_intermediate_size", "shared_expert_gate", "norm_topk_prob", "rotary_dim",
                 "block_kind", "router_groups")


@functools.lru_cache(maxsize=512)
def _layouts(shape: ModelShape) -> tuple:
    """ModelShape.layouts of a mixed shape: the shape's own layout on the blocks no entry names, then each entry's."""
    named = {i for blocks, _ in shape.block_layouts for i in blocks}
    own = tuple(i for i in range(shape.n_layers) if i not in named)
    pairs = [(replace(shape, block_layouts=()), own)] if own else []
    pairs += [(replace(shape, block_layouts=(), **dict(changes)), tuple(sorted(blocks)))
              for blocks, changes in shape.block_layouts]
    return tuple(sorted(pairs, key=lambda pair: pair[1][0]))


def _spans(blocks) -> str:
    """Block indices as 1-based runs: (0, 1, 2, 5) -> "1-3, 6"."""
    runs, start = [], None
    for i, b in enumerate(blocks):
        if start is None:
            start = b
        if i + 1 == len(blocks) or blocks[i + 1] != b + 1:
            runs.append(f"{start + 1}-{b + 1}" if b > start else f"{b + 1}")
            start = None
    return ", ".join(runs)


def routed_expert(tensor: ParamTensor) -> bool:
    """Whether a block tensor belongs to the routed experts: their module is "experts" under the block's MLP
    (mlp.experts, Llama 4's feed_forward.experts), not DeepSeek's and GLM-4.5's mlp.shared_experts."""
    return ".experts." in f".{tensor.name}"


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


# ---- the uniform family's tensors (every other family's are its record's: memmath/architectures/) ----
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
        try:
            n_params = parse_count(n_params)
        except ValueError as error:
            raise ValueError(f"n_params: {error}") from None
    return ModelShape(family="uniform", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      vocab_size=vocab_size, uniform_params=n_params, name=name)
