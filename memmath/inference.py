"""Inference memory: weights in the serving format + KV cache + a working set, per replica.

A separate calculation from training (the article; kipply, "Transformer Inference Arithmetic",
2022): no gradients, no optimizer states, no stored activations, but a KV cache that grows with
every token of context in every sequence of the batch.
"""

from __future__ import annotations

from dataclasses import field
from fractions import Fraction

from .arrays import any_true, is_ndarray, np

from . import architectures, validate
from .activations import ATTENTION_KINDS
from .checkpoints import (OTHER_DTYPE, StoredFormat, compute_bits, get_weights_name, serving_format, stored_layout,
                          stored_weight_bytes)
from .formats import FORMATS, get_format
from .gpus import get_gpu
from .methods import kept_fp32_extra_bytes, kept_fp32_notes, quant_constant_bytes, quantized_weight_bytes
from .models import ModelShape, routed_expert
from .notes import Note
from .run import SERVING_DEFAULTS
from .sources import resolve_model
from .values import frozen

RULE_OF_THUMB_FACTOR = 1.2  # EleutherAI's "weights x 1.2", quoted in accelerate's estimate-memory docs


# transformers 5.24's quantized caches (cache_utils.QuantizedCache: quanto, hqq and fp8 backends) build only for a
# model whose layer_types are all full_attention; a cache format below 16 bits needs one
QUANTIZED_CACHE_BITS = 16
# Formats below 16 bits that no backend of transformers 5.24's QuantizedCache stores (cache_utils.py: fp8 keeps
# float8_e4m3fn with a per-tensor scale; quanto and hqq keep integers of 1 to 8 bits with per-group constants)
NO_CACHE_BACKEND = {"nf4": "NF4 is bitsandbytes' weight format, no cache backend's",
                    "fp8_e5m2": "the fp8 backend stores float8_e4m3fn only"}
# An integer cache (quanto, hqq: QuantizedLayer): what it holds beside the values, which memmath does not count
INTEGER_CACHE_LEFT_OUT = ("QuantizedLayer's residual window (up to residual_length - 1 = 127 tokens a layer kept in the "
                          "model's dtype before they are quantized) and each group's scale and zero point "
                          "(q_group_size 64) are not counted")


def quantized_cache_refusal(model, kv_format) -> str:
    """Why a model's cache cannot be in kv_format ("" when it can): a format below 16 bits needs transformers'
    QuantizedCache, whose __init__ (cache_utils.py) raises unless every layer is full attention (get_layer_types_and_
    kwargs): a model with sliding-window or chunked layers (Mistral-7B-v0.1, Gemma 2-4, Llama 4) or with layers that
    keep a conv or recurrent state (linear attention, short convolutions, Mamba-2) is refused."""
    shape = resolve_model(model)
    record = shape.architecture
    fmt = get_format(kv_format)
    if fmt.bits >= QUANTIZED_CACHE_BITS:
        return ""
    if fmt.name in NO_CACHE_BACKEND:
        return (f"kv_format {fmt.name}: transformers 5.24 has no cache that stores keys and values in it "
                f"({NO_CACHE_BACKEND[fmt.name]}); serve with kv_format fp8_e4m3, int8 or int4, or the model's dtype")
    title = record.title if record is not None else "this model"
    if record is not None and record.state_bytes is not None:
        kept = "keep a conv or recurrent state beside the keys and values"
    elif shape.has_shape and any(window is not None for window in shape.attention_windows):
        kept = "include sliding-window (or chunked) attention"
    else:
        return ""
    return (f"kv_format {fmt.name} needs a quantized cache, and transformers 5.24's QuantizedCache (quanto, hqq, fp8) "
            f"builds only for models whose layers are all full attention; {title}'s layers {kept}, so it refuses "
            f"the model; serve it with kv_format bf16, fp16 or fp32 (the model's dtype)")


def kv_cache_bytes(model, *, context_len, batch_size=1, kv_format="bf16", after_prefill=False, state_format=None):
    """KV cache bytes: 2 (K and V) x kv_heads x head_dim x bytes per value x batch x tokens, summed over layers.

    Grouped-query attention stores n_kv_heads, not n_heads (kipply 2022; Ainslie et al. 2023).
    Llama-2-13B at 8,192 tokens in 16-bit: 2 x 40 x 40 x 128 x 8192 x 2 B = 6.7 GB.

    A full-attention layer holds every token of the context. A sliding-window layer (Mistral-7B-v0.1,
    Phi-3-mini, Gemma 2/3's sliding blocks; shape.attention_windows) is what transformers' generate
    keeps in a DynamicSlidingWindowLayer (cache_utils.py): after each update it keeps a view of the last
    sliding_window - 1 tokens of torch.cat(old, new), and that view holds the cat's whole storage,
    min(context, sliding_window) tokens once decoding (measured on the CPU: tests/test_inference.py).
    after_prefill=True gives the moment right after the prompt's forward pass, when that storage is
    still the whole prompt (every layer holds context_len tokens until the first decode step).

    A linear-attention, short-convolution or Mamba-2 block (Qwen3-Next, LFM2, Granite 4.0) holds a fixed-size state
    instead: its conv state in state_format, the model's dtype (LinearAttentionLayer allocates it like the
    convolution's input; None: kv_format, the dtype a DynamicCache keeps keys and values in), and its recurrent state
    in fp32. A kv_format below 16 bits is refused for such a model, and for one with sliding or chunked layers
    (quantized_cache_refusal).
    """
    shape = _needs_heads(resolve_model(model), "kv_cache_bytes")
    refusal = quantized_cache_refusal(shape, kv_format)
    if refusal:
        raise validate.FieldError("kv_format", refusal)
    if state_format is not None and (get_format(state_format).kind != "float"
                                     or get_format(state_format).bits < QUANTIZED_CACHE_BITS):
        raise validate.FieldError("state_format", f"state_format must be the model's dtype, a float of 16 or 32 bits (bf16, fp16, fp32); "
                         f"got {get_format(state_format).name}")
    context_len = validate.count("context_len", context_len, high=validate.MAX_SEQ)
    batch_size = validate.count("batch_size", batch_size, high=validate.MAX_BATCH)
    validate.check_sweep_size(context_len=context_len, batch_size=batch_size)
    after_prefill = validate.flag("after_prefill", after_prefill)
    bits = get_format(kv_format).bits
    if validate.is_array(context_len, batch_size):
        validate.check_sweep("kv_cache_bytes", kv_cache_bytes(
            shape, context_len=validate.largest(context_len), batch_size=validate.largest(batch_size),
            kv_format=kv_format, after_prefill=after_prefill, state_format=state_format))
    values = architectures.kv_cache_values(shape, context_len=context_len, batch_size=batch_size,
                                           after_prefill=after_prefill)
    record = shape.architecture
    state = 0 if record is None or record.state_bytes is None else record.state_bytes(  # kv_format: 16 bits or more
        shape, batch_size=batch_size, dtype=get_format(kv_format if state_format is None else state_format).name)
    return validate.ceil_div(values * bits, 8) + state


def _smaller(x, y):
    """min for Python ints and element-wise for int64 arrays alike."""
    return np.minimum(x, y) if is_ndarray(x) or is_ndarray(y) else min(x, y)


@frozen
class InferenceMemory:
    """Bytes to serve one replica: weights (+ quantization constants) + KV cache + working set.

    rule_of_thumb: the quick "weights x 1.2" estimate, set beside the detailed total.
    """

    weights: object
    quantization_constants: object
    kv_cache: object
    working_set: object
    weights_format: str
    kv_format: str
    notes: tuple = field(default=())
    weights_layout: str = ""  # how the weights are stored (see inference_weight_layout)
    # Of weights + constants, the bytes one decode step reads (decode_weight_bytes): all of them for a dense model,
    # the shared tensors and the routed experts the batch's tokens reach for a mixture of experts. None: all.
    weights_read: object = None

    def __post_init__(self):
        # Checked when built: every part is whole, non-negative bytes (an int, or an int64 array in a sweep).
        for name in ("weights", "quantization_constants", "kv_cache", "working_set"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        stored = self.weights + self.quantization_constants
        if self.weights_read is None:
            object.__setattr__(self, "weights_read", stored)
        object.__setattr__(self, "weights_read", validate.nbytes("weights_read", self.weights_read))
        if any_true(self.weights_read > stored):
            raise ValueError("weights_read must be at most weights + quantization_constants (a step reads no weight "
                             "twice and none that is not stored)")
        for name in ("weights_format", "kv_format"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a format name; got {validate.describe(getattr(self, name))}")
        validate.notes("notes", self.notes)

    @property
    def total(self):
        """weights + quantization constants + KV cache + working set, in bytes."""
        return self.weights + self.quantization_constants + self.kv_cache + self.working_set

    @property
    def rule_of_thumb(self):
        """The widely quoted estimate: (weights + constants) x RULE_OF_THUMB_FACTOR, in whole bytes (rounded up)."""
        stored = self.weights + self.quantization_constants
        # Integer arithmetic on the factor's exact ratio (1.2 = 6/5), so large byte counts stay exact.
        numerator, denominator = Fraction(str(RULE_OF_THUMB_FACTOR)).as_integer_ratio()
        return validate.ceil_div(stored * numerator, denominator)

    @property
    def read_per_step(self):
        """Bytes one decode step reads: weights_read (every stored weight, or a mixture of experts' shared
        tensors and the experts it reaches) + the KV cache of every sequence of the batch."""
        return self.weights_read + self.kv_cache

    def parts(self) -> dict[str, object]:
        """Part name -> bytes."""
        return {"weights": self.weights, "quantization_constants": self.quantization_constants,
                "kv_cache": self.kv_cache, "working_set": self.working_set}


def inference_weight_bytes(shape: ModelShape, weights_format="bf16", *, other_format="bf16", quant_block=64):
    """(weight bytes, constant bytes) to serve the model in weights_format.

    Float formats store every tensor in that format: ceil(n_params x bits / 8). int8 follows
    bitsandbytes' LLM.int8 (Dettmers et al. 2022; bnb.nn.Linear8bitLt, which transformers'
    integrations/bitsandbytes.py puts in place of every nn.Linear and GPT-2 Conv1D): each linear
    weight int8 plus one fp32 scale per output row (Int8Params.SCB, int8_vectorwise_quant). int4 and
    NF4 quantize the linear weights with one fp32 absmax per block of quant_block values (QLoRA's
    layout; nf4 with double quantization, 0.127 extra bits per weight, Dettmers et al. 2023). Both
    keep in other_format what transformers does not convert: embeddings, norms, biases, the output
    head (get_keys_to_not_convert keeps lm_head and tied weights) and tensors that are not nn.Linear
    (a mixture of experts' router and its 3-D expert tensors). A uniform model has no tensor list,
    so all of its parameters are quantized, with blocks of quant_block values for int8 too (no rows).
    """
    stored = serving_format(weights_format)
    # As a checkpoint stores it: MXFP4, FP8 with scales, GPTQ, AWQ (memmath/checkpoints.py); a uniform model has no
    # tensors to keep in 16 bits, so its FP8 is every parameter in 8 bits.
    if stored is not None and (shape.tensor_count_known or stored.name not in FORMATS):
        return stored_weight_bytes(shape, stored)
    fmt = get_format(weights_format)
    double_quant = fmt.name == "nf4"
    if fmt.kind == "float":  # a load in bf16 or fp16 keeps the record's fp32_modules in fp32
        return validate.ceil_div(shape.n_params * fmt.bits, 8) + kept_fp32_extra_bytes(shape, fmt.name, fmt.bits), 0
    if not shape.tensor_count_known:
        # A uniform model has no tensor list: every parameter is quantized, as one tensor.
        weights = validate.ceil_div(shape.n_params * fmt.bits, 8)
        return weights, quant_constant_bytes(shape.n_params, block=quant_block, double_quant=double_quant)
    if fmt.name == "int8":
        other_bits, weights, constants = get_format(other_format).bits, 0, 0
        # vision: a tower and projector
        for _, tensor, repeat in shape.tensor_copies(("embeddings", "layer", "final_norm", "head", "vision")):
            if tensor.linear:  # int8 values + one fp32 scale per output row (weight is d_out x d_in)
                weights = weights + repeat * tensor.numel
                constants = constants + repeat * 4 * tensor.shape[0]
            else:
                bits = 32 if shape.kept_in_fp32(tensor, get_format(other_format).name) else other_bits
                weights = weights + repeat * validate.ceil_div(tensor.numel * bits, 8)
        return weights, constants
    return quantized_weight_bytes(shape, fmt, get_format(other_format).bits, block=quant_block,
                                  double_quant=double_quant, dtype=get_format(other_format).name)


def loaded_dtype(shape: ModelShape, weights_format) -> str:
    """The 16-bit dtype of what the weights format leaves unquantized: the format itself (bf16, fp16), the other
    tensors' bf16 under a quantized format, a checkpoint's 16-bit dtype (checkpoints.OTHER_DTYPE)."""
    stored = serving_format(weights_format)
    if stored is not None and (shape.tensor_count_known or stored.name not in FORMATS):
        return OTHER_DTYPE
    fmt = get_format(weights_format)
    return fmt.name if fmt.kind == "float" else "bf16"


def inference_weight_layout(shape: ModelShape, weights_format="bf16", *, other_format="bf16", quant_block=64) -> str:
    """In words, how inference_weight_bytes stores the weights: the layout and what stays unquantized."""
    stored = serving_format(weights_format)
    if stored is not None and shape.tensor_count_known:
        return stored_layout(shape, stored)
    fmt = get_format(weights_format)
    if fmt.kind == "float":
        wide = _kept_fp32_kinds(shape, fmt.name)
        return f"every tensor in {fmt.name}" + (f" but the {wide}, which transformers keeps in fp32 when it loads the "
                                                f"model in {fmt.name}" if wide else "")
    if fmt.name == "int8" and shape.tensor_count_known:
        layout = "LLM.int8 (bitsandbytes Linear8bitLt): int8 linear weights, one fp32 scale per output row"
    elif fmt.name == "nf4":
        layout = f"NF4 linear weights, one absmax per {quant_block} values, double-quantized (QLoRA)"
    else:
        layout = f"{fmt.name} values, one fp32 absmax per block of {quant_block}"
    if not shape.tensor_count_known:
        return layout + "; a uniform model has no tensor list, so every parameter is quantized"
    other = get_format(other_format).name
    kept = sorted({_unquantized_kind(t) for _, t, _ in
                   shape.tensor_copies(("embeddings", "layer", "final_norm", "head", "vision"))
                   if not t.linear and not shape.kept_in_fp32(t, other)})
    wide = _kept_fp32_kinds(shape, other)
    return (layout + (f"; kept in {other}: {', '.join(kept)}" if kept else "")
            + (f"; in fp32: the {wide} (transformers keeps it so when it loads the model in {other})" if wide else ""))


def _kept_fp32_kinds(shape: ModelShape, dtype) -> str:
    """What a load in `dtype` keeps in fp32 (the record's fp32_modules), in words, or ""."""
    if not shape.fp32_kept_params(dtype):
        return ""
    return ", ".join(sorted({_unquantized_kind(t) for _, t, _ in shape.tensor_copies()
                             if shape.kept_in_fp32(t, dtype)}))


def _unquantized_kind(tensor) -> str:
    if "experts" in tensor.name:
        return "routed experts (3-D tensors, not nn.Linear)"
    if tensor.name == "mlp.gate.weight":
        return "router"
    if tensor.component in ("embeddings", "norms", "head"):
        return {"head": "output head"}.get(tensor.component, tensor.component)
    if tensor.component in ("vision_tower", "projector"):
        return "the vision tower's and projector's other tensors (patch convolution, positions, norms, biases)"
    return "biases"


def working_set_bytes(shape: ModelShape, *, context_len, batch_size=1, element_bits=16, attention="sdpa"):
    """Transient bytes of a prefill over the whole context: the peak of one forward pass, in bytes.

    Stored weights and the KV cache are not included (they are their own parts). With s tokens,
    b sequences, width h, a heads of size d, MLP width I, vocabulary V and e = element_bits / 8:

        peak = outside + max(attention phase, MLP phase, head phase)

    GPT-2 and LLaMA follow what transformers' implementations allocate in a prefill (measured on
    the CPU with torch 2.13 and transformers 5.24 within 1%: validation/inference_working_set.py):

    - outside the blocks, held all pass: the token embeddings (e*s*b*h), GPT-2's position
      embeddings (e*s*h, shared by the batch), LLaMA's rotary cos and sin (2*e*s*d) and, with
      eager attention, the causal mask (e*b*s^2);
    - attention: the block input and its normed copy (2*e*s*b*h) and, for GPT-2, the fused qkv
      output (3h) or, for LLaMA, q (a*d) and the k, v repeated to every head when kv < a (2*a*d,
      eager only); eager adds per score element (a*b*s^2 of them) e + e for GPT-2 (scores and
      scaled scores) or e + 4 + 4 for LLaMA (scores, then softmax in fp32: a copy and its output);
      fused attention (sdpa) keeps no s x s tensor, only its output (a*d);
    - MLP: the block input, the attention output (GPT-2), the residual and the normed copy, plus
      3*I for SwiGLU (gate activation, up, product) or 4*I for GPT-2's gelu_new (input, 0.5*x and
      two temporaries of its tanh formula); GPT-2's eager attention returns its probabilities,
      which stay alive through the MLP (e*a*b*s^2);
    - head: the last hidden state and its normed copy (2*e*s*b*h) and fp32 logits for the last
      position (4*b*V, as generate keeps them).

    The other decoders read from a config follow LLaMA's phases, with what transformers does
    differently (measured the same way, validation/inference_working_set.py --new, within 1%; these
    terms were fitted to those measurements): GPT-NeoX's narrower rotary tables, fused qkv output and
    2I GELU MLP; Gemma 2/3 (and Qwen2-MoE) build a sliding-window mask beside the causal one (eager;
    Qwen2-MoE also a bool s x s mask under SDPA); the MoE block, see architectures/_moe.prefill_phase. Each
    model type's phases are its record's prefill_phases (memmath/architectures/).

    Other families (BERT, uniform) get the plain estimate e*s*b*(2h + widest intermediate) +
    (eager) 2*e*a*s^2*b + 4*b*V. Serving engines that fuse kernels or prefill in chunks keep less.
    shape may also be a preset name.
    """
    shape = _needs_heads(resolve_model(shape), "working_set_bytes")
    context_len = validate.count("context_len", context_len, high=validate.MAX_SEQ)
    batch_size = validate.count("batch_size", batch_size, high=validate.MAX_BATCH)
    validate.check_sweep_size(context_len=context_len, batch_size=batch_size)
    element_bits = validate.count("element_bits", element_bits, high=32, scalar=True)
    if element_bits not in (8, 16, 32):
        raise ValueError(f"element_bits must be 8, 16 or 32; got {validate.describe(element_bits)}")
    attention = validate.choice("attention", attention, ATTENTION_KINDS)
    if validate.is_array(context_len, batch_size):
        validate.check_sweep("working set", working_set_bytes(
            shape, context_len=validate.largest(context_len), batch_size=validate.largest(batch_size),
            element_bits=element_bits, attention=attention))
    s, b, e = context_len, batch_size, element_bits // 8
    h, a, d = shape.hidden_size, shape.n_heads, shape.head_dim
    inner = shape.intermediate_size or 4 * h
    eager = attention == "eager"
    sbe = s * b * e
    record = shape.architecture
    if record is None or record.prefill_phases is None:
        qkv = (a + 2 * shape.n_kv_heads) * d
        widest = _larger(qkv, 2 * inner)
        return sbe * (2 * h + widest) + (2 * e * a * s * s * b if eager else 0) + 4 * b * (shape.vocab_size or 0)
    head = 2 * sbe * h + 4 * b * (shape.vocab_size or 0)
    most = None
    for layout, _ in shape.layouts():  # blocks of several layouts (dense and MoE): the largest block's phases
        outside, attn, mlp = record.prefill_phases(layout, s, b, e, eager)
        phase = outside + _larger(_larger(attn, mlp), head)
        most = phase if most is None else _larger(most, phase)
    return most


def _larger(x, y):
    """max for Python ints and element-wise for int64 arrays alike."""
    if is_ndarray(x) or is_ndarray(y):
        return np.maximum(x, y)
    return max(x, y)


def inference_memory(model, *, weights_format=None,
                     kv_format=SERVING_DEFAULTS["kv_format"], batch_size=SERVING_DEFAULTS["batch_size"],
                     context_len=SERVING_DEFAULTS["context_len"],
                     attention=SERVING_DEFAULTS["attention"]) -> InferenceMemory:
    """Bytes to serve `model`, as an InferenceMemory: weights in weights_format (and their
    quantization constants, see inference_weight_bytes), the KV cache in kv_format for batch_size
    sequences of context_len tokens (kv_cache_bytes: 2 x layers x kv_heads x head_dim x tokens x
    bytes), and a prefill working set (working_set_bytes). .total is their sum; .rule_of_thumb the
    "weights x 1.2" estimate. batch_size and context_len may be numpy arrays. weights_format None: as the
    checkpoint stores them (a config's quantization_config, memmath/checkpoints.py), else bf16."""
    shape = resolve_model(model)
    if weights_format is None:  # as the checkpoint stores them: its quantization_config's format, else bf16
        weights_format = shape.stored_format or "bf16"
    name = weights_format.name if isinstance(weights_format, StoredFormat) else get_weights_name(weights_format)
    batch_size = validate.count("batch_size", batch_size, high=validate.MAX_BATCH)
    context_len = validate.count("context_len", context_len, high=validate.MAX_SEQ)
    attention = validate.choice("attention", attention, ATTENTION_KINDS)
    weights, constants = inference_weight_bytes(shape, weights_format)
    notes = []
    if shape.has_shape:
        kv = kv_cache_bytes(shape, context_len=context_len, batch_size=batch_size, kv_format=kv_format,
                            state_format=loaded_dtype(shape, weights_format))
        working = working_set_bytes(shape, context_len=context_len, batch_size=batch_size, attention=attention,
                                    element_bits=compute_bits(weights_format))
    else:
        kv, working = 0, 0
        notes.append(Note("kv_cache_not_estimated",
                          "KV cache and working set not estimated: the model has no layer widths"))
    notes.extend(kept_fp32_notes(shape, loaded_dtype(shape, weights_format)))
    if shape.has_shape and get_format(kv_format).kind == "int":  # transformers' quanto or hqq QuantizedCache
        notes.append(Note("integer_cache_values_only", f"KV cache in {get_format(kv_format).name}: the values' bits "
                          f"only; {INTEGER_CACHE_LEFT_OUT}"))
    record = shape.architecture
    if shape.has_shape and record is not None and record.causal and record.prefill_phases is None:
        notes.append(Note("working_set_plain_estimate",
                          f"the prefill working set is the plain estimate (the block input, its widest projection "
                          f"and the logits' last row): no prefill of a {shape.arch} model has been measured"))
    if shape.vision is not None:  # a vision-language model (memmath/multimodal.py)
        notes = list(shape.notes) + notes + [Note(
            "vision_working_set_not_counted", f"the KV cache and working set are the language model's, over context_len "
            f"tokens with the image tokens among them; the {shape.vision.label} vision tower's forward pass over the "
            "images is not counted")]
    return InferenceMemory(weights, constants, kv, working, name,
                           get_format(kv_format).name, tuple(notes),
                           weights_layout=inference_weight_layout(shape, weights_format),
                           weights_read=weights + constants - _unread_expert_bytes(shape, weights_format, batch_size))


def rule_of_thumb_context_limit(model, *, weights_format="bf16", kv_format="bf16", batch_size=1, attention="sdpa",
                                max_context=validate.MAX_SEQ) -> int:
    """The longest context (tokens per sequence) at which the detailed total is still within "weights x 1.2".

    Beyond it the KV cache and working set outgrow the rule of thumb's 20% allowance. The total
    grows with context, so a bisection over 1..max_context finds the exact integer; 0 when even one
    token overflows the allowance, max_context when the rule still holds there.
    """
    shape = resolve_model(model)
    _needs_heads(shape, "rule_of_thumb_context_limit")
    max_context = validate.count("max_context", max_context, high=validate.MAX_SEQ, scalar=True)

    def holds(context):
        memory = inference_memory(shape, weights_format=weights_format, kv_format=kv_format,
                                  batch_size=batch_size, context_len=context, attention=attention)
        return memory.total <= memory.rule_of_thumb

    if not holds(1):
        return 0
    low, high = 1, max_context  # holds(low) is true
    if holds(high):
        return high
    while high - low > 1:  # holds(low) and not holds(high)
        middle = (low + high) // 2
        low, high = (middle, high) if holds(middle) else (low, middle)
    return low


def routed_experts_reached(shape: ModelShape, batch_size=1):
    """Distinct routed experts per layer that one decode step reads: min(n_experts, batch_size x experts_per_tok).

    At batch 1 exact: the token goes to its experts_per_tok experts (Mixtral 2 of 8, Qwen3-30B-A3B 8 of
    128). At a larger batch the B tokens of a step may share experts; we assume they reach distinct ones
    as far as there are experts, the most a step can read (balanced routing, which the models' load-balancing
    loss trains for, comes close; a step whose tokens share experts reads less and decodes faster).
    0 for a dense model. batch_size may be an array.
    """
    shape = resolve_model(shape)
    batch_size = validate.count("batch_size", batch_size, high=validate.MAX_BATCH)
    if not shape.n_experts:
        return 0 * batch_size
    return _smaller(batch_size * shape.experts_per_tok, shape.n_experts)


def decode_weight_bytes(shape: ModelShape, weights_format="bf16", *, batch_size=1, other_format="bf16",
                        quant_block=64):
    """Bytes of weights (and quantization constants) one decode step reads, stored as inference_weight_bytes
    stores them.

    A dense model reads every weight once per step (kipply 2022). A mixture of experts reads its shared
    tensors (embeddings, attention, norms, router, shared experts, head) and, in each layer, only the routed
    experts its tokens are sent to (routed_experts_reached: experts_per_tok of n_experts at batch 1), so
    stored - layers x (n_experts - reached) / n_experts x the routed experts' bytes per layer. Mixtral-8x7B
    in bf16 at batch 1: its 12,879,925,248 active parameters x 2 B (its model card: 12.9B active).
    """
    shape = resolve_model(shape)
    weights, constants = inference_weight_bytes(shape, weights_format, other_format=other_format,
                                                quant_block=quant_block)
    return weights + constants - _unread_expert_bytes(shape, weights_format, batch_size, other_format, quant_block)


def _unread_expert_bytes(shape: ModelShape, weights_format, batch_size, other_format="bf16", quant_block=64):
    """The stored bytes of the routed experts one decode step does not reach, over all layers (0 for a dense model)."""
    reached = routed_experts_reached(shape, batch_size)
    if not shape.tensor_count_known:
        return 0 * reached
    unread = 0 * reached
    for layout, blocks in shape.layouts():  # the blocks that have routed experts (a dense block of Maverick: none)
        if not layout.n_experts:
            continue
        reached = routed_experts_reached(layout, batch_size)
        per_layer = sum(_stored_bytes(t, weights_format, other_format, quant_block)
                        for t in layout.tensors("layer") if routed_expert(t))
        # whole experts: exact for (E, ...) tensors
        unread = unread + len(blocks) * (per_layer * (layout.n_experts - reached) // layout.n_experts)
    return unread


def _stored_bytes(tensor, weights_format, other_format, quant_block):
    """One tensor's bytes (values and constants) as inference_weight_bytes stores it."""
    stored = serving_format(weights_format)
    if stored is not None:
        return sum(stored.tensor_bytes(tensor))
    fmt = get_format(weights_format)
    if fmt.kind == "float":
        return validate.ceil_div(tensor.numel * fmt.bits, 8)
    if not tensor.linear:
        return validate.ceil_div(tensor.numel * get_format(other_format).bits, 8)
    if fmt.name == "int8":
        return tensor.numel + 4 * tensor.shape[0]  # int8 values and one fp32 scale per output row
    return validate.ceil_div(tensor.numel * fmt.bits, 8) + quant_constant_bytes(
        tensor.numel, block=quant_block, double_quant=fmt.name == "nf4")


def decode_tokens_per_second(memory: InferenceMemory, gpu):
    """Upper bound on decode speed per sequence, in tokens/s: bandwidth / bytes read per step.

    Each generated token reads every weight once and the whole KV cache (kipply 2022); a mixture of
    experts reads its shared tensors and only the routed experts its tokens reach (memory.weights_read,
    decode_weight_bytes: at batch 1 its active parameters). The weights are read once per step for the
    whole batch, so a batch of B sequences makes B times as many tokens per second in total, each
    sequence at this rate.
    """
    if not isinstance(memory, InferenceMemory):
        raise TypeError(f"memory must be the InferenceMemory that inference_memory(...) returns; "
                        f"got {type(memory).__name__}")
    gpu = get_gpu(gpu)
    if not gpu.bandwidth_bytes_per_s:
        raise ValueError(f"gpu: the bandwidth of {gpu.name!r} is not known (0), so no decode speed follows")
    read_per_step = memory.read_per_step
    if any_true(read_per_step <= 0):
        raise ValueError("memory must hold bytes to read per step: its weights + quantization_constants + "
                         "kv_cache is 0, so no decode speed follows from the bandwidth")
    return gpu.bandwidth_bytes_per_s / read_per_step


def _needs_heads(shape: ModelShape, what: str) -> ModelShape:
    if not shape.has_shape:
        raise ValueError(f"model must have layers, kv heads and head size for {what}: use a preset, from_hf_config "
                         "or a ModelShape")
    return shape
