"""The record of one transformers model type: what memmath reads from its config and how its model runs.

transformers keeps one configuration_<type>.py and one modeling_<type>.py per architecture; memmath keeps one
record per model type (memmath/architectures/<type>.py). Its facts are fields; its behaviour is code the record
names: its parameter tensors, its peft target names, its embeddings, block and head in the forward-pass trace,
its tensor-parallel plan. The generic modules ask the record (models.py: `record.tensors(shape, group)`;
hf_activations.py: `record.trace_block(...)`; parallel.py: `record.tp_style(name)`) and never branch on the type.
The defaults are the rotary decoder's (_decoder.py); GPT-2 and the encoders name their own. Every fact cites the
transformers 5.24 or peft 0.21 file it comes from, or the measurement that found it.
"""

from __future__ import annotations

from dataclasses import field

from ._decoder import (MODULE_ORDER as DECODER_MODULE_ORDER, TP_PLAN as DECODER_TP_PLAN, block as decoder_block,
                       embeddings as decoder_embeddings, head_and_loss as decoder_head_and_loss,
                       kv_cache_values as decoder_kv_cache_values, lora_order, lora_table as decoder_lora_table,
                       prefill_phases as decoder_prefill_phases, tensors as decoder_tensors)
from ..values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:  # the annotations' names (strings: from __future__ import annotations)
    from typing import Any, Callable, Mapping

FAMILIES = ("gpt2", "llama", "bert")  # the tensor layouts of memmath/models.py ("llama": every rotary decoder)
FINAL_NORMS = ("layer", "rms", "rms_fp32_weight", "rms_plus_one")


@frozen
class Architecture:
    """One model type. Its config fields are listed once, here; a field not listed changes no memory."""

    model_type: str  # transformers' model_type, as config.json spells it
    family: str  # the tensor layout (one of FAMILIES)
    title: str  # the name a learner reads: "Mistral", "Gemma 2"
    source: str  # the transformers files the facts below come from
    # ---- the config: every field that changes a tensor, a saved activation or the cache, and what memmath does
    fields: Mapping[str, str]
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the config class's defaults where they differ
    activation_field: str = "hidden_act"
    activations: tuple = ("silu",)  # the MLP activations modelled (transformers' ACT2FN names); first = default
    activation_aliases: Mapping[str, str] = field(default_factory=dict)  # a legacy name the config class rewrites
    dropout_fields: Mapping[str, float] = field(default_factory=lambda: {"attention_dropout": 0.0})
    refused_flags: tuple = ()  # config flags modelled only as false
    # (config, get) -> ModelShape fields of this type beyond the common decoder's, refusing what it cannot model
    read_options: Callable[[dict, Any], dict] | None = None
    # (get, n_layers) -> layer_types when the config names a window but no layer_types (None: every layer slides)
    derive_layer_types: Callable[[Any, int], tuple] | None = None
    sliding_needs_flag: bool = False  # Qwen2/Qwen3 configs: sliding_window applies only with use_sliding_window
    # the config field read as ModelShape.intermediate_size (Qwen 3.5 MoE's config has no dense width: its experts')
    intermediate_field: str = "intermediate_size"
    # ---- its tensors and peft names (memmath/models.py asks these)
    tensors: Callable = decoder_tensors  # (shape, group) -> [ParamTensor] of "embeddings", "layer", ...
    # shape -> {target: (module, d_in, d_out[, rank factor]), a list of those, or why it does not exist}
    lora_modules: Callable = decoder_lora_table
    module_order: tuple = DECODER_MODULE_ORDER  # a block's adapted modules in parameters() order
    norms_last: bool = True  # the block registers its norms after its sublayers (LlamaDecoderLayer)
    # rotary positions: each block rotates q and k by cos/sin tables computed from an inv_freq buffer (the rotary
    # decoders; GPT-2 and the encoders learn position embeddings)
    rotary: bool = True
    # BertEmbeddings registers position_ids and token_type_ids, int64 buffers max_positions long
    position_id_buffers: bool = False
    grouped_query: bool = True  # n_kv_heads and head_dim free (GPT-2, BERT: n_kv_heads = n_heads, d = h / a)
    mlp_backward_widths: int = 2  # MLP-wide gradients alive at once in a block's backward (GELU and SwiGLU: 2)
    # fp32 t x h tensors alive at once in the backward of a block's widest norm, beside the gradients arriving at the
    # block and at the norm (t x h each, the model's dtype), where that outgrows the MLP's working set (Gemma 4: 5)
    norm_backward_widths: int = 0
    # (shape, t, e, trains_experts, grad_elem, checkpointing, adapted=LoRA on the routed experts) -> a MoE block's
    # backward working set where its experts
    # are not transformers' grouped_mm (None: _moe.backward_phase's; Llama 4's bmm over every expert)
    moe_backward: Callable | None = None
    # (layout shape, method, recipe, batch size, sequence length) -> the most a block of a mixer's layout holds in its
    # backward beyond its saved tensors, the gradient arriving at it included, where that outgrows the MLP's working
    # set (None: none; the Mamba-2 hybrids: the chunk scan's l x l gradients, _mamba2.backward_working_set)
    mixer_backward: Callable | None = None
    # (shape, t, e) -> bytes a checkpointed MoE block's backward makes before its recomputation starts and holds through
    # it (None: nothing; Llama 4: the E t x h copy of its experts' output gradient)
    recompute_held: Callable | None = None
    # ---- tensor parallelism (memmath/parallel.py): module -> "colwise" or "rowwise", named the way
    # transformers' base_model_tp_plan names them, from the base model ("layers.*.self_attn.q_proj", GPT-2's
    # "h.*.attn.c_attn", BERT's "encoder.layer.*.attention.self.query"); conv1d: GPT-2's Conv1D modules,
    # whose weights are stored (in, out)
    tp_plan: Mapping[str, str] = field(default_factory=lambda: dict(DECODER_TP_PLAN))
    conv1d: tuple = ()
    tp_traced: bool = False  # hf_activations replays one tensor-parallel rank's local widths (LLaMA's layout)
    # ---- the forward pass (memmath/hf_activations.py replays it on memmath/trace.py, autocast included):
    # trace_embeddings(tr, shape, trains, *, dropout, input_grad_hook) -> the first block's input;
    # trace_block(tr, shape, x, trainable, Pass) -> the block's output (_steps.Pass: what every block shares);
    # trace_head(tr, shape, x, *, final_norm_trains, head_trains, dropout): final norm, head and loss
    trace_embeddings: Callable = decoder_embeddings
    trace_block: Callable = decoder_block
    trace_head: Callable = decoder_head_and_loss
    causal: bool = True  # a causal LM: causal masks, the DynamicCache, the shifted-label loss (BERT: False)
    # under checkpointing the eager 4-D masks are held from the forward through backward, priced in every moment
    # (GPT-2 passes its mask to each checkpointed block; gpt-oss's two reach them as kwargs GradientCheckpointingLayer
    # holds); else only the recomputations hold them
    mask_is_checkpoint_input: bool = False
    # under checkpointing, price what every checkpoint holds beside its input to the end of backward (the rotary cos and
    # sin, the position ids, the CPU RNG state; hf_activations._checkpoint_arguments): measured for gpt-oss and
    # Gemma 4, whose checkpointed steps peak where these bytes count; the other types' moments leave them out
    checkpoint_held_arguments: bool = False
    embedding: str = "embed_tokens"  # the token embedding's module name
    scaled_embedding: bool = False  # Gemma's GemmaTextScaledWordEmbedding multiplies by embed_scale
    embedding_dropout: bool = False  # GPT-NeoX's emb_dropout
    final_norm: str = "rms"  # one of FINAL_NORMS
    final_norm_module: str = "norm"  # the final norm's module name
    # the names (or their beginnings) of embedding-group tensors registered after the final norm (Gemma 4's and
    # Gemma 3n's per-layer embeddings, Gemma 3n's AltUp projections)
    late_embeddings: tuple = ()
    classifier: str = "pooler"  # BERT-style encoders: "pooler" (pooler + classifier) or "classification_head"
    rotary_per_layer_type: bool = False  # Gemma 3 computes one rotary cos/sin pair per layer type
    rotary_tables_fp32: bool = False  # OLMo 3: its pairs stay fp32 (Olmo3RotaryEmbedding does not cast)
    rotary_half_tables: bool = False  # gpt-oss: its cos and sin are head_dim / 2 wide (GptOssRotaryEmbedding)
    traced: bool = True  # the exact model replays its forward pass (else activations='textbook')
    # The CUDA kernels transformers calls for this type's mixers where they are installed (e.g. "mamba-ssm's and
    # causal-conv1d's kernels"): its trace replays the PyTorch path only, Run(mixer_kernels='torch'). "": none.
    mixer_kernels: str = ""
    # why a checkpointed step's peak is not modelled for this type ("": it is); such a run gets a floor, no verdict
    checkpointed_peak_refusal: str = ""
    # shape -> why the trace does not replay this config of a traced type ("" when it does): options it has no
    # steps for, which keep the textbook model and no verdict (decision.unchecked_type) as an untraced type does
    trace_refusal: Callable | None = None
    # (shape, the modules LoRA adapts) -> why the trace does not replay LoRA on them ("" when it does), which keeps the
    # textbook model and no verdict as trace_refusal does
    lora_trace_refusal: Callable | None = None
    # shape -> the shape its trace replays, where blocks of like tensors save different ones (Llama 4's rotary and
    # NoPE blocks: block layouts of the trace alone); None: the shape itself
    trace_shape: Callable | None = None
    # shape -> {layer type: rotary table width} where the types' head sizes differ (Gemma 4), else None
    rotary_widths: Callable | None = None
    # the MLP activations it is traced with ("": a model built in code); (): every one of `activations`
    traced_activations: tuple = ("", "silu")
    amp_measured: bool = False  # recorded under torch.autocast (validation/amp.py)
    houlsby_placed: bool = False  # its trace places Houlsby adapters where validation/houlsby.py inserts them
    sdpa: bool = True  # transformers runs its attention with SDPA (Gemma2PreTrainedModel has none)
    routing_weights_fp32: bool = False  # Mixtral keeps the top-k routing weights in fp32 (no cast back)
    # ---- serving (memmath/inference.py, validation/inference_working_set.py): the keys and values the cache holds
    # in its format, as values, kv_cache_values(shape, *, context_len, batch_size, after_prefill);
    # the prefill's (outside, attention phase, MLP phase) bytes, prefill_phases(shape, s, b, e, eager), or None
    # for the plain estimate (the encoders)
    kv_cache_values: Callable = decoder_kv_cache_values
    # the fixed-size states of linear-attention, short-convolution and Mamba-2 blocks, which transformers keeps in
    # the model's dtype (conv states) and fp32 (recurrent states) whatever the keys' and values' format,
    # state_bytes(shape, *, batch_size, dtype) -> bytes with dtype the model's; None: none
    state_bytes: Callable | None = None
    prefill_phases: Callable | None = decoder_prefill_phases
    # the masks its base model builds once per forward (masking_utils.py): both the causal and the sliding-window
    # mask whatever layer_types holds (Gemma 2/3, Qwen2-MoE), or the causal one always beside a sliding one (Qwen2/3)
    both_masks_always: bool = False
    causal_mask_always: bool = False
    window_zero_without_sliding: bool = False  # Qwen2MoeConfig keeps sliding_window 0 without use_sliding_window
    eager_sliding_mask: bool = False  # eager builds a sliding-window mask beside the causal one
    sdpa_sliding_mask: bool = False  # SDPA never skips the sliding mask (Qwen2-MoE saves sliding_window 0)
    # ---- the load (modeling_utils.py PreTrainedModel._get_dtype_plan): parameter-name patterns transformers keeps
    # in fp32 when it loads the model in bf16 or fp16 (_keep_in_fp32_modules_strict) and in fp16 only
    # (_keep_in_fp32_modules), each a regex searched in the name as core_model_loading.py searches it
    fp32_modules: tuple = ()
    fp32_modules_fp16: tuple = ()
    # ---- peft (memmath/models.py's LoRA tables)
    lora_order: tuple = ()  # a MoE block's adapted modules in parameters() order, where it is not the targets'
    not_all_linear: tuple = ()  # targets that exist but peft's "all-linear" leaves alone
    # shape -> why LoRA's "all" cannot be counted in this block (linears without a target name), or ""
    all_linear_refusal: Callable | None = None

    def __post_init__(self):
        if self.family not in FAMILIES or self.final_norm not in FINAL_NORMS:
            raise ValueError(f"{self.model_type}: family or final_norm outside {FAMILIES}, {FINAL_NORMS}")

    def replays(self, shape) -> bool:
        """Whether the exact activation model replays this type's forward for `shape`: it has a trace, and its
        trace_refusal names no option of the config the trace has no steps for."""
        return self.traced and not (self.trace_refusal and self.trace_refusal(shape))

    def adapter_order(self, shape) -> tuple:
        """A block's adapted modules in parameters() order where it is not the targets' order (lora_order), else ()."""
        return lora_order(shape, self)

    def is_conv1d(self, name: str) -> bool:
        """Whether `name` is a Conv1D weight, stored (in, out), the transpose of nn.Linear's (out, in)."""
        return name.endswith(".weight") and name.removesuffix(".weight") in self.conv1d

    def tp_style(self, name: str) -> str | None:
        """"colwise" or "rowwise" for a block tensor this record's tp_plan splits (by the end of its name), else None."""
        base = name.removesuffix(".weight").removesuffix(".bias")
        for module, style in self.tp_plan.items():
            module = module.split("*.", 1)[-1]  # the module inside a block: "layers.*.self_attn.q_proj" -> q_proj's
            if base == module or base.endswith("." + module):
                return style
        return None

    def __repr__(self) -> str:
        return f"Architecture({self.model_type!r}, {self.title})"


# The fields every rotary decoder's config class shares (transformers 5.24 configuration_<type>.py).
COMMON_DECODER = {
    "num_hidden_layers": "blocks", "hidden_size": "width", "num_attention_heads": "query heads",
    "num_key_value_heads": "key/value heads (q, k, v sizes; KV cache)", "intermediate_size": "MLP width",
    "vocab_size": "embedding and head rows", "tie_word_embeddings": "head shares the embedding matrix",
    "torch_dtype": "checked: float32, bfloat16 or float16 (the step's precision is an argument)",
    "dtype": "as torch_dtype", "quantization_config": "refused: a pre-quantized checkpoint is not modelled",
    "attention_dropout": "dropout_p (one probability where the family has dropout)",
    "use_cache": "saved activations: true runs k and v through a DynamicCache when training without checkpointing "
                 "(absent: read as false)",
    "hidden_act": "the MLP activation (saved activations)",
    "head_dim": "head size (default h / heads; Qwen3 128, Gemma 256)",
}
ATTENTION_BIAS = "biases on q, k, v, o"
SLIDING_WINDOW = "tokens a sliding layer sees (KV cache)"
LAYER_TYPES_FIELD = "per block full_attention or sliding_attention (KV cache)"


def full_every(n: int, layers: int) -> tuple:
    """layer_types with every n-th block full and the others sliding, as Gemma 2 and 3, gpt-oss, Cohere 2, OLMo 3
    and EXAONE 4.0's configs derive them when they list none (block i slides unless (i + 1) % n == 0)."""
    return tuple("sliding_attention" if (i + 1) % n else "full_attention" for i in range(layers))
QWEN_SLIDING = {"use_sliding_window": "sliding attention on (KV cache)",
                "max_window_layers": "blocks from this index slide (qwen2, qwen3)"}
QK_NORM = {"(q_norm, k_norm)": "always present in this family: q/k RMSNorm"}
MOE = {"num_experts_per_tok": "experts per token (active parameters)",
       "output_router_logits": "refused when true (the router's auxiliary loss)"}


def decoder_fields(extra: Mapping[str, str] | None = None, *, drop=()) -> dict:
    """The common decoder fields, less `drop`, plus this type's own."""
    fields = {key: text for key, text in COMMON_DECODER.items() if key not in drop}
    fields.update(extra or {})
    return fields


def refuse_true(get, key):
    """A flag memmath models only as false."""
    if get.flag(key, False):
        raise ValueError(f"config field {key!r} is true; memmath models only {key}=false")
