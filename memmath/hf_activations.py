"""Activation memory as transformers' PyTorch models keep it: activations="transformers".

The textbook model (activations.py) counts one GPT block at 16 bits. This one replays the forward
pass of transformers' GPT2LMHeadModel, LlamaForCausalLM and BertForSequenceClassification op by
op (and the other decoders and RoBERTa read by from_hf_config, below), and counts what autograd saves for backward the way PyTorch does: each storage once (a view
keeps its whole storage alive), parameters and buffers left out, and an op saves an input only
when the gradient it computes needs it (x @ W saves x only when W trains). It was written
against torch 2.13, transformers 5.24 and peft 0.21 and matches their CPU measurements to the
byte (validation/measure.py, tests/test_fidelity.py).

Notation: b batch, s sequence, h hidden, a heads, k key/value heads, d head size, I MLP width,
V vocabulary, r LoRA rank, e bytes per element of the model (4 fp32, 2 bf16/fp16), m bytes per
dropout-mask element (on the CPU the mask has the input's dtype, so m = e; on CUDA 1 byte), t
token count b*s. Per family, what one block keeps when it trains and its input needs a gradient:

GPT-2 (LayerNorm, fused qkv as Conv1D, gelu_new, tied head)
    ln_1, ln_2: input e*t*h plus mean and rstd, e*t each on the CPU (fp32 on CUDA: assumed)
    c_attn, c_proj, c_fc, mlp.c_proj: each its input (e*t*h, e*t*h, e*t*h, e*t*I)
    gelu_new = 0.5*x*(1 + tanh(c*(x + 0.044715*x^3))): x, tanh(.), 1 + tanh(.), 0.5*x: 4 x e*t*I
    residual dropout after c_proj and after the MLP: 2 masks m*t*h
    attention, see below; outside: token ids 8*t and position ids 8*s (when the embeddings
    train), the embedding dropout mask, ln_f (input, mean, rstd), the head's input when it trains
LLaMA (RMSNorm in fp32, rotary positions, SwiGLU, grouped-query attention, no dropout but attention's)
    each RMSNorm: its input upcast to fp32 4*t*h (the residual itself at fp32), rsqrt 4*t, the
    normalized input back in the model dtype e*t*h (only when the norm's weight trains)
    q/k/v input (one storage), o_proj input, gate/up input (one), down_proj input e*t*I
    rotary: cos and sin tables e*s*d each, shared by every block (counted outside the blocks)
    SwiGLU: gate output, up output, silu(gate): 3 x e*t*I
    eager softmax runs in fp32: 4*a*s^2*b, plus its copy back to e when there is no dropout
BERT (post-norm LayerNorm, exact GELU, tanh pooler, 2-label classifier)
    q, k, v inputs (one storage), attention.output.dense input, two dropout masks, two
    LayerNorms (input, mean, rstd), intermediate input, GELU input e*t*I, output.dense input e*t*I
    outside: token ids 8*t, token-type ids 8*s, embedding LayerNorm and dropout; the last
    block's output e*t*h (the pooler reads token 0, a view that keeps the whole tensor), tanh
    output, classifier dropout; the loss runs in the model dtype (log-softmax e*b*2)
Gemma, Gemma 2, Gemma 3 (LLaMA's layout but every norm a GemmaRMSNorm, GeGLU, scaled embeddings)
    each GemmaRMSNorm: x in fp32 4*t*h, rsqrt 4*t, the fp32 normalized x 4*t*h (weight trains) and the
    fresh fp32 vector 1 + weight, 4*h (4*d for Gemma 3's q/k norms); gelu_pytorch_tanh(gate) * up keeps
    what SwiGLU keeps; Gemma 2/3: four norms (each sublayer's output normalized before the add), eager
    softcapping keeps the scores' tanh output e*a*s^2*b, final softcapping the logits' tanh e*t*V;
    the embedding's * sqrt(h) multiplies by a buffer: nothing saved; Gemma 3: one cos/sin pair per layer type
GPT-NeoX (LayerNorms, fused query_key_value, partial rotary, GELU MLP, parallel residual)
    rotary on the first rotary_pct of each head keeps narrower cos/sin tables; torch.cat makes q and k
    new (b, a, s, d) tensors, so SDPA's output is copied for dense; v stays a view of the qkv output
    (SDPA keeps the whole 3*t*h storage; eager at b = 1 too); the parallel second LayerNorm reads the
    block input again (saved once) and keeps only its stats
Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; transformers' default grouped_mm experts), see architectures/_moe.py:
    router fp32 softmax t*E, int64 top-k indices, the renormalization's sum and pre-division copy;
    t*k rows through the experts in all: gathered input, gate_up output, SiLU output and product, down
    output, routing weights, three int64 index vectors and the int32 offsets; Qwen2-MoE's shared
    expert and its sigmoid gate. LoRA on the router or the experts (peft 0.21's ParamWrapper, see
    _moe.wrapped_weight): the module reads W + scaling * B A, a new tensor, which the matmul keeps (E*h*e for
    the router, E*2I*h*e and E*h*I*e for the experts: the size of the frozen weights, whatever the batch)
    with its input (x e*t*h; the S x h and S x I expert inputs), plus B and A cast to e for the experts
    (fp32 adapters on a 16-bit base) or, on the CPU, the router's 16-bit A and B upcast to fp32
Mamba-2 hybrids (Granite 4.0 hybrid, Nemotron-H, Falcon-H1), see architectures/_mamba2.py: transformers' PyTorch path
    only (Run.mixer_kernels='torch'; the CUDA kernels save other tensors); the conv1d keeps in_proj's whole output and
    its SiLU the conv's uncut output; the chunk scan computes in fp32 over each sequence padded to whole chunks of l,
    keeping b x heads x chunks x l x l tensors thrice (L, C B^T, their product's bmm copy) and bmm copies of x, B, C
    and the chunk states; the gated RMSNorm in fp32. Its backward's widest moment (two l x l gradients beside a third)
    is peak.py's, from _mamba2.backward_working_set
RoBERTa (BERT's blocks): position ids and token-type ids made per token (8*t each, saved by their
    embeddings); RobertaClassificationHead: dropout, dense, tanh, dropout, out_proj on token 0, no pooler
Attention, per block (n = b*a*s*d elements, that is t*h when a*d = h)
    eager: matmul keeps contiguous copies of q, k^T and v (GQA: k and v repeated to a heads),
    e*n each; softmax output e*a*s^2*b (fp32 for LLaMA); with dropout its mask m*a*s^2*b and the
    dropped probabilities e*a*s^2*b; the merged heads (a copy) feed the output projection
    sdpa, no dropout (FlashAttention's CPU kernel): q, k, v as they are (GPT-2: the c_attn output,
    one storage; LLaMA: k and v with k heads), the output e*n, which the output projection reads,
    and a fp32 log-sum-exp 4*b*a*s; no s x s tensor
    sdpa with dropout on the CPU: PyTorch falls back to its math kernel, which computes in fp32
    even for 16-bit inputs: q, k^T, v copies 4*n each, softmax, mask and dropped probabilities
    4*a*s^2*b each, then the merged heads back in e. On CUDA the fused kernels keep dropout
    (assumed here, not measured: no s x s tensor)
Attention masks (masking_utils.py; see _masks_built): the base model builds one mask per layer type once per forward
    pass, alive until its forward returns (the last block's forward peak counts them, with the embedding output it
    keeps as inputs_embeds): eager b x s x s in the model dtype at any length, added to the scores, saved by nothing;
    under SDPA the causal mask is skipped, a sliding-window one only below the window. At or past it each sliding
    block's SDPA call gets the boolean (1, 1, s, s) mask (s^2 bytes alive), keeps it converted to e*b*s^2, and keeps
    k and v repeated to every query head (2*t*a*d*e instead of 2*t*k*d*e; with one key/value head repeat_kv is a
    view and nothing more is kept; eager's matmuls keep such a k and v as they are at b = 1). With blocks of both
    types the estimate counts each block without the mask and what the masked ones save more with the shared
    tables (ActivationParts.block_extras). Measured: validation/sliding.py.
The loss (causal LMs): the head's logits upcast to fp32, log-softmax output 4*t*V, the shifted
    labels 8*t and a 4-byte total weight; at V >> h this dominates small models.
Frozen weights: a frozen linear saves nothing for its weight's gradient, so a frozen block whose
    input needs no gradient stores nothing (blocks before the first trainable one). The first
    trainable block after frozen embeddings skips what only the input gradient would need
    (LayerNorm still keeps its input, an RMSNorm only its normalized output).
LoRA (peft): each adapted linear keeps A's input, cast to the adapter dtype (a fresh 4*t*d_in
    copy per adapted module for fp32 adapters on a 16-bit base, the shared input itself when
    the dtypes agree) and B's input (the r-wide A output, t*r elements); the frozen base linear
    keeps nothing. fp32 adapters on every linear layer can keep more than full finetuning.
    With lora_dropout p > 0 (LoRA(dropout=p)): lora_A(dropout(x)), so each adapted module keeps the
    dropout's mask (t*d_in elements of the adapter dtype on the CPU, 1-byte bools on CUDA, assumed; only
    when x needs a gradient: not in the first block behind frozen embeddings) and A keeps the dropped
    copy (t*d_in in the adapter dtype) in place of its input: a copy per module even where the dtypes
    agree (measured: validation/lora_dropout.py). AMP with LoRA dropout is refused by name.
The KV cache in training (ModelShape.use_cache, the config's use_cache; off under checkpointing): every
    decoder passes k and v through a DynamicCache, and attention keeps its torch.cat copies (architectures/_steps.kv_cache):
    GPT-NeoX and Phi-3 no longer keep their fused qkv output through v (per block 2*t*h*e less for
    GPT-NeoX, e*t*(a+k)*d for Phi-3), GPT-2 keeps k and v beside the c_attn output q still views
    (2*t*h*e more); frozen blocks' copies live until the forward pass returns.
Gradient checkpointing (transformers' default: non-reentrant torch.utils.checkpoint per block):
    each block keeps only its positional inputs: the hidden states e*t*h and, for GPT-2 with
    eager attention, the 4-D mask e*b*s^2 (one storage for all blocks). transformers also makes
    the embedding output require grad, so every block stores, frozen ones too. During backward
    one block at a time is recomputed: recompute_peak is what that block saves again.
Where the bytes go in the estimate: per_layer and first_layer are the blocks; outside_layers holds
    the embeddings' tensors, the tables all blocks share (rotary cos/sin, GPT-2's checkpointed mask;
    the measurement finds them in the first block that saves them), the final norm and the head;
    loss the cross-entropy's. terms lists every kind of saved tensor with its bytes.
Each model type's embeddings, block and head are its record's (memmath/architectures/: trace_embeddings,
trace_block, trace_head; the shared decoder steps in _decoder.py, _moe.py and _steps.py); this module runs them
over the whole model: which blocks store, the masks, checkpointing, the liveness peak.py reads.
The trace also follows when each storage is allocated and last read (a temporary dies after its
    last use, a saved tensor lives until backward), which peak.py uses for the forward pass's peak.
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import lru_cache, partial, reduce

from .arrays import any_true, is_ndarray, larger, np, pick

from . import validate
from .activations import ActivationEstimate
from .amp_trace import AUTOCAST_BYTES, amp_refusal
from .architectures import ARCHITECTURES, known
from .architectures._steps import INT64, Pass, dims
from .methods import Adapters, Freeze, Full, LoRA
from .models import ModelShape
from .trace import Trace
from .values import frozen

CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state(): the CPU generator's state, a uint8 tensor


class _Setup:
    """What trains, in the words of the forward pass."""

    __slots__ = ("embeddings", "final_norm", "head", "lora_modules", "lora", "houlsby")

    def __init__(self, embeddings: bool, final_norm: bool, head: bool, lora_modules: frozenset, lora: tuple | None,
                 houlsby=None):
        self.embeddings, self.final_norm, self.head = embeddings, final_norm, head
        self.lora_modules = lora_modules
        self.lora = lora  # (rank, adapter bytes per element)
        self.houlsby = houlsby  # Adapters: the bottleneck m of the two Houlsby adapters per block


def _attention_kind(attention, device, dropout):
    if attention == "eager":
        return "eager"
    # CPU FlashAttention has no dropout: PyTorch falls back to the math kernel (measured).
    return "math" if (device == "cpu" and dropout) else "flash"


def _setup(shape: ModelShape, method, recipe, present_only=False):
    """(setup, trainable blocks or None for LoRA, embeddings train?) for a supported method; present_only: LoRA
    targets this block layout lacks adapt nothing (one layout of a model whose blocks differ)."""
    if isinstance(method, Full):
        return _Setup(True, True, True, frozenset(), None)
    if isinstance(method, Freeze):
        return _Setup(method.train_embeddings, method.train_final_norm, method.head_trains(shape), frozenset(), None)
    if isinstance(method, LoRA):
        if method.dropout and recipe.name == "amp":
            # the autocast trace casts the adapters' input for autocast's bf16 matmuls without peft's dropout.
            raise validate.FieldError("LoRA dropout", f"activations='transformers' models LoRA dropout "
                                      f"({method.dropout:g}) in a forward pass in the weights' own format, not under "
                                      "AMP's autocast (use activations='textbook')")
        modules = frozenset(adapter.module for adapter in shape.lora_adapters(method.targets,
                                                                               present_only=present_only))
        refusal = shape.architecture.lora_trace_refusal(shape, modules) if (
            known(shape) and shape.architecture.lora_trace_refusal) else ""
        if refusal:  # adapted modules a traced type's trace has no steps for (architectures/<type>.py says which)
            raise validate.FieldError("activations", f"activations='transformers' {refusal} (use activations='textbook')")
        return _Setup(False, False, False, modules, (method.rank, method.adapter_bits(recipe) // 8))
    if isinstance(method, Adapters):
        return _Setup(False, False, False, frozenset(), None, houlsby=_houlsby_width(shape, method, recipe))
    raise validate.FieldError("activations", f"activations='transformers' models Full(), Freeze(...), LoRA(...), QLoRA(...) and Adapters(...); "
                     f"got {type(method).__name__} (use activations='textbook')")


def _houlsby_width(shape: ModelShape, method, recipe):
    """The bottleneck of Adapters(...) where the trace places them as validation/houlsby.py does, else ValueError."""
    if not (known(shape) and shape.architecture.houlsby_placed):
        raise validate.FieldError("activations", "activations='transformers' places Houlsby adapters after a block's attention and "
                         "MLP output projections (BERT's, and the decoders laid out as LLaMA's, as validation/houlsby.py "
                         f"places them); {shape.arch or shape.family}'s blocks have no such place traced "
                         "(use activations='textbook')")
    if validate.is_array(method.bottleneck):
        raise validate.FieldError("activations", "activations='transformers' traces Adapters with one bottleneck, not a sweep of them "
                         "(use activations='textbook')")
    if method.train_norms or method.train_head:
        raise validate.FieldError("activations", "activations='transformers' models Adapters with only the adapters training; got "
                         f"train_norms={method.train_norms}, train_head={method.train_head} (use activations='textbook')")
    if method.adapter_bits(recipe) != recipe.weight_bits:
        raise validate.FieldError("activations", f"activations='transformers' models Adapters stored like the model's weights; got "
                         f"adapter_format={method.adapter_format!r} (use activations='textbook')")
    return method.bottleneck


def transformers_activations(shape: ModelShape, *, plan, recipe, method, seq_len, batch_size, dropout, attention,
                             checkpointing, device, padded=False, packed=False, mixer_kernels="torch") -> ActivationParts:
    """Bytes the transformers implementation of `shape` saves for backward (see the module docstring), as
    ActivationParts (its `estimate` is the ActivationEstimate; the pieces are peak.py's).

    per_layer: a trainable block whose input needs a gradient; first_layer: the first storing
    block when it differs (its input needs none); frozen_per_layer: frozen blocks behind trainable
    embeddings, which only pass the gradient on; outside_layers: embeddings, the rotary tables,
    final norm, head; loss: the cross-entropy's tensors; recompute_peak (checkpointing): what one
    block saves again while backward recomputes it. QLoRA is counted as LoRA on a frozen base
    (the 4-bit matmul is assumed to keep no input for its frozen weight; not measured here). mixer_kernels: Run's;
    the trace replays transformers' PyTorch path of a model's linear-attention, Mamba-2 or convolution mixers.
    """
    _check_kernels(shape, mixer_kernels)
    if sweeping(seq_len, batch_size, method):
        # The trace computes in int64 for a sweep: its largest points, evaluated exactly with Python
        # ints, must fit (activations grow with s, b, the LoRA rank and the trainable blocks).
        for top in scalar_methods(method, shape):
            largest = transformers_activations(
                shape, plan=plan, recipe=recipe, method=top, seq_len=validate.largest(seq_len),
                batch_size=validate.largest(batch_size), dropout=dropout, attention=attention,
                checkpointing=checkpointing, device=device, padded=padded, packed=packed)
            validate.check_sweep("activations (from seq_len and batch_size)", largest.estimate.total)
    return activation_parts(shape, recipe=recipe, method=method, seq_len=seq_len, batch_size=batch_size,
                            dropout=dropout, attention=attention, checkpointing=checkpointing, device=device,
                            padded=padded, packed=packed)


@frozen
class ActivationParts:
    """The estimate and its pieces by place, for peak.py (bytes; int64 arrays in a sweep).

    estimate: the ActivationEstimate; element_bytes: e, bytes per element of the model;
    embeddings: saved before the first block; embeddings_batch: the part of those that belongs to
    the input batch (token ids); tables: rotary cos/sin or GPT-2's checkpointed mask; head: final
    norm, head and pooler; loss: the cross-entropy's; batch: saved storages that belong to the
    input batch (token ids, BERT's labels), alive before the step; first: the first storing block;
    blocks: every storing block together; recompute: what one recomputed block saves again
    (checkpointing). The most bytes alive at once: block_live in the last block's forward,
    head_live in the head and loss, recompute_live in a block's recomputation (0 without
    checkpointing); cache_held: the k and v copies transformers' DynamicCache holds for blocks that
    store nothing, alive to the end of the forward pass (0 without the cache). block_extras: with blocks of both
    layer types past the sliding window under SDPA, per block the bytes it saves beyond per_layer (or
    frozen_per_layer) that `tables` counts (its mask tensor and repeated k and v); () when none are.
    layout_recompute: a model whose blocks differ, (blocks, recompute, recompute_live) of each block layout, for the
    moments of recomputing one block of it (recompute and recompute_live are the largest layout's); () otherwise.
    """

    estimate: ActivationEstimate
    element_bytes: int
    embeddings: object
    embeddings_batch: object
    tables: object
    head: object
    loss: object
    batch: object
    first: object
    blocks: object
    recompute: object
    block_live: object
    head_live: object
    recompute_live: object
    cache_held: object = 0
    block_extras: tuple = ()
    layout_recompute: tuple = ()
    sliding_extra: object = 0  # the part of `tables` that is masked blocks' extra saves (block_extras' sum)
    # checkpointing: what one recomputed block of this layout leaves alive to the end of backward (Gemma 4's store
    # blocks' shared_kv_states), for the layouts recomputed after it (_mixed_parts)
    held_to_backward_end: object = 0
    # checkpointing: the most a recomputed block holds in its backward beyond its saved tensors and the gradient
    # arriving at it, where that is not at its MLP's start (gpt-oss's sink attention backward: the block's tensors
    # saved before that moment and the backward's own), from its trace; 0 where the block's working set prices it
    recompute_backward_live: object = 0
    # without checkpointing: the bytes of the tables all blocks share (rotary cos and sin) that this layout's blocks
    # save, and whether a frozen storing block, the first storing block and the later blocks save them; read by
    # _mixed_parts when the last block's layout saves none (LFM2's convolution blocks after its attention blocks)
    shared_saved: tuple = ()
    # the most a block that stores nothing (before the first storing block) holds at once in its forward, the masks and
    # the embedding output with it (idle_block_live: this trace's block); idle_live: a model whose blocks differ, the
    # largest of its layouts' that have such a block, a forward moment of its own (0: none, or one layout)
    idle_block_live: object = 0
    idle_live: object = 0


def sweeping(seq_len, batch_size, method) -> bool:
    """True when a size or the method's rank or layer count is an array (a sweep in int64)."""
    return validate.is_array(seq_len, batch_size, getattr(method, "rank", None),
                             getattr(method, "trainable_layers", None), getattr(method, "frozen_layers", None))


def scalar_methods(method, shape: ModelShape) -> tuple:
    """The method at the ends of its swept range (fewest and most trainable blocks, lowest and highest
    rank), as scalar methods: the sweep's extremes, to be evaluated exactly."""
    if isinstance(method, LoRA) and is_ndarray(method.rank):
        return tuple(replace(method, rank=int(rank)) for rank in (np.min(method.rank), np.max(method.rank)))
    if isinstance(method, Freeze) and validate.is_array(method.trainable_layers, method.frozen_layers):
        trained = np.asarray(method.layers_trained(shape))
        return tuple(replace(method, trainable_layers=int(k), frozen_layers=None)
                     for k in (np.min(trained), np.max(trained)))
    return (method,)


def activation_parts(shape: ModelShape, *, recipe, method, seq_len, batch_size, dropout, attention, checkpointing,
                     device, padded=False, packed=False) -> ActivationParts:
    """The estimate and its pieces by place, for peak.py (see ActivationParts). padded: a right-padded batch, whose
    masks every attention call gets (_sdpa_masked_blocks, _forward_masks); packed: sequences packed into each row
    with their own position ids, whose block-diagonal masks every call gets too, and whose rotary tables are per
    sequence (b x s x d, not 1 x s x d). One GPU's forward does not depend on how many GPUs share the run or what
    they shard, so a single run's trace is kept per these arguments (the planner asks the same one for every GPU
    count it tries); a sweep is traced each time."""
    arguments = dict(recipe=recipe, method=method, seq_len=seq_len, batch_size=batch_size, dropout=dropout,
                     attention=attention, checkpointing=checkpointing, device=device, padded=padded, packed=packed)
    if any(is_ndarray(value) for value in (seq_len, batch_size)) or any(
            is_ndarray(getattr(method, f.name)) for f in fields(method)):
        return _traced_parts(shape, **arguments)
    return _kept_parts(shape, tuple(arguments.items()))


@lru_cache(maxsize=256)
def _kept_parts(shape: ModelShape, arguments: tuple) -> ActivationParts:
    return _traced_parts(shape, **dict(arguments))


def _traced_parts(shape: ModelShape, *, recipe, method, seq_len, batch_size, dropout, attention, checkpointing,
                  device, padded=False, packed=False) -> ActivationParts:
    arguments = dict(recipe=recipe, method=method, seq_len=seq_len, batch_size=batch_size, dropout=dropout,
                     attention=attention, checkpointing=checkpointing, device=device, padded=padded, packed=packed)
    over = None if padded or packed else _past_window(shape, seq_len, _attention_kind(attention, device, dropout))
    if over is None:
        return _parts_at(shape, **arguments)
    # A sweep across the sliding window: the blocks' SDPA calls get a mask from the window on (_sdpa_masked_blocks),
    # a different set of saved tensors; each side is traced as such and the points take theirs.
    return _pick_parts(over, _parts_at(shape, past=True, **arguments), _parts_at(shape, past=False, **arguments))


def _parts_at(shape: ModelShape, *, recipe, method, seq_len, batch_size, dropout, attention, checkpointing, device,
              past=None, padded=False, packed=False, present_only=False, first_adapted=0,
              rope_widths=None, own_blocks=None) -> ActivationParts:
    """activation_parts for sequence lengths on one side of the sliding window (past: which side, for a sweep
    across it; None: read from seq_len). present_only: one block layout of a model whose blocks differ;
    first_adapted: the first block that holds a LoRA adapter there (the blocks before it store nothing);
    rope_widths: {layer type: rotary width} of a model whose layer types' head sizes differ (the record's
    rotary_widths, read from the whole model), else None; own_blocks: the blocks of this layout (one block layout of
    a model whose blocks differ): only their SDPA calls are traced with a mask tensor, the other layouts count
    theirs."""
    if known(shape) and shape.architecture.trace_shape:  # blocks of like tensors that save differently: layouts
        shape = shape.architecture.trace_shape(shape)
    if shape.mixed:
        return _mixed_parts(shape, recipe=recipe, method=method, seq_len=seq_len, batch_size=batch_size,
                            dropout=dropout, attention=attention, checkpointing=checkpointing, device=device,
                            past=past, padded=padded, packed=packed)
    if shape.architecture is None:  # the uniform family: layers without tensors
        raise validate.FieldError("activations", f"activations='transformers' knows the gpt2, llama and bert families; got a "
                         f"{shape.family} model (use activations='textbook')")
    _check_layout(shape, seq_len)
    _check_attention(shape, attention)
    trace_class = Trace
    record = shape.architecture
    if recipe.name == "amp":  # fp32 weights, the forward under torch.autocast(bfloat16): memmath/amp_trace.py
        trace_class = partial(Trace, autocast=AUTOCAST_BYTES, causal_mask=record.causal)
        refusal = amp_refusal(method, _attention_kind(attention, device, dropout), shape)
        if refusal:
            raise validate.FieldError("activations", f"activations='transformers' {refusal} (use activations='textbook')")
    elif recipe.weight_bits != recipe.activation_bits or recipe.weight_bits not in (16, 32):
        raise validate.FieldError("activations", f"activations='transformers' models a forward pass in the weights' own format "
                         f"(precision fp32, bf16, fp16, mixed, mixed_fp32_grads); got precision {recipe.name!r} "
                         "(use activations='textbook')")
    setup = _setup(shape, method, recipe, present_only)
    e, dm = recipe.weight_bits // 8, dims(shape)
    b, s, h = batch_size, seq_len, dm["h"]
    kind = _attention_kind(attention, device, dropout)
    is_lora = isinstance(method, (LoRA, Adapters))  # a frozen base with trainable adapters
    n_layers = shape.n_layers
    if isinstance(method, Freeze):
        trained = method.layers_trained(shape)
        frozen = n_layers - trained
    elif not checkpointing:  # LoRA: the blocks before the first adapted one get no input that needs a gradient
        trained, frozen = n_layers - first_adapted, 0
    else:
        trained, frozen = n_layers, 0
    blocks_store = _positive(trained) if not (checkpointing or setup.embeddings) else True

    int8_base = getattr(method, "quant_type", None) == "int8"  # QLoRA on bitsandbytes' Linear8bitLt
    lora_dropout = bool(getattr(method, "dropout", 0.0)) if isinstance(method, LoRA) else False  # peft's lora_dropout
    # use_cache: a DynamicCache in the forward pass, which transformers turns off under gradient checkpointing
    # (GradientCheckpointingLayer and merge_with_config_defaults, modeling_layers.py:96-103, utils/generic.py:1134-1146).
    cache = record.causal and shape.use_cache and not checkpointing

    def new_trace():
        return trace_class(e=e, device=device, b=b, s=s, int8_base=int8_base, lora_dropout=lora_dropout)

    batch_mask = padded or packed  # a mask from the batch: pads, or packed sequences' block-diagonal mask
    masked = _sdpa_masked_blocks(shape, seq_len, kind, past, batch_mask)  # per block: its SDPA call gets a mask tensor
    if own_blocks is not None:
        masked = tuple(flag and i in own_blocks for i, flag in enumerate(masked))
    _check_masked(recipe, masked)
    masks = _forward_masks(shape, b, s, e, kind, past, batch_mask)  # (numel, bytes each) alive through the forward
    # The rotary cos and sin: computed from the position ids, (1, s, d) for the default ones, (b, s, d) for packed
    # sequences' own (LlamaRotaryEmbedding.forward on position_ids of shape (b, s); measured: validation/padding.py).
    rope_rows = b * s if packed else s

    def block(tr, region, x, trains, tables, mask=False):
        tr.region = region
        tr.sdpa_mask = mask
        step = Pass(kind=kind, dropout=dropout, tables=tables, cache=cache, lora_modules=setup.lora_modules,
                    lora=setup.lora, houlsby=setup.houlsby, checkpointed=checkpointing)
        out = record.trace_block(tr, shape, x, trains and not is_lora, step)
        tr.region = "outside"
        return out

    # Outside the blocks, before them: the embeddings (with transformers' input-grad hook under checkpointing).
    emb = new_trace()
    x = record.trace_embeddings(emb, shape, setup.embeddings, dropout=dropout, input_grad_hook=checkpointing)
    embeddings, terms = emb.bytes_in("outside"), list(emb.terms("outside"))
    inputs_embeds = x  # the decoders' forward keeps it as a local to the end (below: held unless saved anyway)

    # The blocks.
    tr = new_trace()
    rope = (tr.new(rope_rows * dm["rd"], e, shared=True), tr.new(rope_rows * dm["rd"], e, shared=True))
    first_layer, frozen_per, frozen_storing, recompute, held_to_end, backward_live = None, 0, 0, 0, 0, 0
    shared_saved = ()
    sliding_extra, block_extras = 0, ()
    if checkpointing:
        tr.region = "block"
        tr.save(x, "block input (checkpoint)")
        if getattr(x, "per_layer", None) is not None:  # Gemma 4's per-layer inputs: every block's second input
            tr.save(x.per_layer, "per-layer inputs (checkpoint input, one for all blocks)")
        if record.mask_is_checkpoint_input and attention == "eager":
            for numel, elem in masks:  # each mask the blocks get (a causal and a sliding-window one: gpt-oss)
                tr.save(tr.new(numel, elem, shared=True), "4-D attention mask (checkpoint input, one for all blocks)")
        per_layer, layers_storing = tr.bytes_in("block"), n_layers  # every block, frozen ones too
        terms += tr.terms("block", "each block")
        # Backward recomputes one block at a time, its input needing a gradient, and saves its set again.
        re = new_trace()
        existing = (re.new(rope_rows * dm["rd"], e, existing=True), re.new(rope_rows * dm["rd"], e, existing=True))
        # (with layer types of both kinds, the one whose SDPA call gets the mask: the most a block saves again)
        block(re, "block", re.new(b * s * h, e, True, existing=True), True, existing, any(masked))
        recompute = re.bytes_in("block")
        # a block whose recomputed tensors outlive its own backward (Gemma 4's shared_kv_states): alive from then on
        # to the end of backward, priced in the blocks recomputed after it (_mixed_parts)
        held_to_end = re.__dict__.get("held_to_backward_end", 0) * _positive(trained)
        # and the block input its recomputed input norm saved (pow(2) keeps its input), which that graph keeps with it
        held_to_end = held_to_end + (b * s * h * e) * _positive(held_to_end)
        # and what it leaves alive from its forward through backward: counted beside the blocks
        sliding_extra = re.__dict__.get("held_through_backward", 0) * _positive(trained)
        backward_live = re.__dict__.get("backward_live", 0)
        if isinstance(method, Freeze):
            re_frozen = new_trace()
            block(re_frozen, "block", re_frozen.new(b * s * h, e, True, existing=True), False, existing, any(masked))
            recompute = pick(_positive(trained), recompute, re_frozen.bytes_in("block"))
        terms += [("recomputed block", what, n) for _, what, n in re.terms("block")]
    else:
        frozen_blocks_store = isinstance(method, Freeze) and setup.embeddings and _positive_any(frozen)

        shared_by = []  # whether the shared tables are saved after the frozen, the first and the later blocks

        def stored_blocks(tr, rope, mask):
            """(each frozen block, each block, first block): the bytes saved, each block traced with or without
            its SDPA mask tensor."""
            y = x
            if frozen_blocks_store:
                y = block(tr, "frozen block", y, False, rope, mask)
                y = block(tr, "each frozen block", y, False, rope, mask)
            shared_by.append(frozen_blocks_store and _positive_any(tr.bytes_in("outside")))
            y = block(tr, "first block", y, True, rope, mask)
            shared_by.append(_positive_any(tr.bytes_in("outside")))
            # the blocks after the first storing one get an input that needs a gradient, also those of a layout
            # without LoRA's targets (found: Llama 4's dense blocks between its MoE blocks, LoRA on the experts only)
            y.grad = True
            block(tr, "each block", y, True, rope, mask)
            shared_by.append(_positive_any(tr.bytes_in("outside")))
            return tr.bytes_in("each frozen block"), tr.bytes_in("each block"), tr.bytes_in("first block")

        uniform = len(set(masked)) == 1
        frozen_per, per_layer, first = stored_blocks(tr, rope, masked[0] and uniform)
        shared_saved = (tr.bytes_in("outside"), *shared_by[:3])
        first_terms = tr.terms("first block")
        if frozen_blocks_store:
            frozen_storing = frozen
            terms += tr.terms("each frozen block")
        layers_storing = trained
        if not uniform:
            # Blocks of both kinds (Gemma 3, Qwen2 with max_window_layers): per_layer and frozen_per_layer count a
            # block without the mask tensor; the first trained block is counted as what it is; what the other
            # masked blocks save more goes with the shared tables (and block_extras says whose it is).
            with_mask = new_trace()
            frozen1, per1, first1 = stored_blocks(with_mask, (with_mask.new(rope_rows * dm["rd"], e, shared=True),
                                                              with_mask.new(rope_rows * dm["rd"], e, shared=True)), True)
            flags = np.array(masked + (False,))
            before = np.concatenate(([0], np.cumsum(flags)))  # before[i]: masked blocks among the first i
            at = n_layers - np.asarray(trained) if is_ndarray(trained) else n_layers - trained  # first trained
            first_masked = flags[at]
            if _positive_any(first_masked):
                first = pick(first_masked, first1, first)
                first_terms = with_mask.terms("first block") if not is_ndarray(first_masked) else first_terms
            sliding_extra = (per1 - per_layer) * (before[n_layers] - before[np.minimum(at + 1, n_layers)])
            if frozen_blocks_store:
                sliding_extra = sliding_extra + (frozen1 - frozen_per) * before[at]
            sliding_extra = int(sliding_extra) if not is_ndarray(sliding_extra) else sliding_extra.astype(np.int64)
            if not validate.is_array(trained, s, b):  # per block, for the measurement's booking
                block_extras = tuple(
                    0 if not masked[i] or i == at else (per1 - per_layer) if i > at else
                    (frozen1 - frozen_per) if frozen_blocks_store else 0 for i in range(n_layers))
        if not _same(first, per_layer):
            first_layer = first
            terms += first_terms
        terms += tr.terms("each block")
    tables = tr.bytes_in("outside") * blocks_store  # rotary tables (first storing block) or the shared mask
    terms += tr.terms("outside")
    if checkpointing and _positive_any(sliding_extra):
        tables = tables + sliding_extra
        terms.append(("outside", "a checkpointed block's k and v that its keyword arguments keep from its forward "
                                 "through backward (Gemma 4's shared_kv_states)", sliding_extra))
    if not checkpointing and _positive_any(sliding_extra):
        tables = tables + sliding_extra
        terms.append(("outside", "sliding-window blocks' SDPA mask and k/v repeated to every head, past the "
                                 "first storing block (each saves its own; counted here)", sliding_extra))
    if checkpointing and record.checkpoint_held_arguments:
        held_arguments = _checkpoint_arguments(shape, rope_rows, dm["rd"], 4 if record.rotary_tables_fp32 else e,
                                               s, n_layers, device, rope_widths)
        tables = tables + held_arguments
        terms.append(("outside", "what the checkpoints hold beside the block inputs: the rotary cos and sin, the "
                                 "position ids and, on the CPU, each block's RNG state", held_arguments))
    if not checkpointing:
        # Gemma 3 computes one cos/sin pair per layer type: a second pair is saved by the first storing block
        # of the other type (counted here with the shared tables; the measurement files it in that block).
        first_storing = 0 if (isinstance(method, Freeze) and setup.embeddings) else n_layers - trained
        table_bytes = 4 if record.rotary_tables_fp32 else e  # OLMo 3's pairs are fp32 in any precision
        extra = _extra_rope_pairs(shape, first_storing) * 2 * rope_rows * dm["rd"] * table_bytes
        if rope_widths and id(rope[0].storage) in tr.saved:
            # Gemma 4: each layer type's pair at its own width; `tables` holds one pair at this layout's
            extra = (_rope_pair_widths(shape.layer_types, first_storing, rope_widths) - 2 * dm["rd"]) * (
                rope_rows * table_bytes)
        if _positive_any(extra):
            tables = tables + extra * blocks_store
            terms.append(("outside", "rotary cos and sin tables of the second layer type", extra))

    # Outside the blocks, after them: final norm, head, loss. The last block's output needs a
    # gradient when any block stores; with every block frozen it needs none.
    heads = {}
    for grad in (True, False):
        hl = new_trace()
        record.trace_head(hl, shape, hl.new(b * s * h, e, grad), final_norm_trains=setup.final_norm,
                          head_trains=setup.head, dropout=dropout)
        heads[grad] = hl
    head = pick(blocks_store, heads[True].bytes_in("outside"), heads[False].bytes_in("outside"))
    loss = pick(blocks_store, heads[True].bytes_in("loss"), heads[False].bytes_in("loss"))
    chosen = heads[True] if _positive_any(blocks_store) else heads[False]
    terms += list(chosen.terms("outside")) + list(chosen.terms("loss"))
    # Liveness for peak.py: the most bytes one block (the last) and the head and loss hold at once.
    live = trace_class(e=e, device=device, b=b, s=s, saving=not checkpointing, int8_base=int8_base,
                       lora_dropout=lora_dropout)
    x_in = live.new(b * s * h, e, True)
    x_in.storage.kept = checkpointing  # a checkpointed block's input is what it keeps
    shared = (live.new(rope_rows * dm["rd"], e, existing=True), live.new(rope_rows * dm["rd"], e, existing=True))
    _hold_masks(live, masks)  # the model's masks, built before the first block, live to the end of the forward
    if record.causal and not inputs_embeds.storage.kept:
        # The decoders' base model keeps `inputs_embeds` (the embedding output, which the masks are built from) as
        # a local until its forward returns (modeling_llama.py, modeling_gpt2.py, ...); found measuring Phi-3 with
        # fp32 LoRA adapters, whose forward peak (in the last block's MLP) missed it.
        _hold_masks(live, ((inputs_embeds.numel, inputs_embeds.elem),))
    block(live, "block", x_in, True, shared, masked[-1])
    # A block before the first that stores (its input needing no gradient, its weights frozen): its forward's own
    # transients, which a model whose blocks differ peaks in where that layout's exceed the last block's (_mixed_parts)
    idle = new_trace()
    _hold_masks(idle, masks)
    if record.causal:
        _hold_masks(idle, ((inputs_embeds.numel, inputs_embeds.elem),))
    block(idle, "block", idle.new(b * s * h, e, False), False,
          (idle.new(rope_rows * dm["rd"], e, existing=True), idle.new(rope_rows * dm["rd"], e, existing=True)),
          masked[0])
    # Under checkpointing, backward runs each block's forward again, saving this time.
    again = trace_class(e=e, device=device, b=b, s=s, int8_base=int8_base, lora_dropout=lora_dropout)
    x_again = again.new(b * s * h, e, True, existing=True)  # the kept input: counted with the block inputs
    if not record.mask_is_checkpoint_input:
        # The masks reach each block as keyword arguments: GradientCheckpointingLayer's partial(forward, **kwargs)
        # (modeling_layers.py) holds them for the recomputation (GPT-2's eager mask is a checkpoint input, saved).
        _hold_masks(again, masks)
    block(again, "block", x_again, True, (again.new(rope_rows * dm["rd"], e, existing=True),
                                          again.new(rope_rows * dm["rd"], e, existing=True)), any(masked))
    # The cache also holds the k and v of the blocks that store nothing (frozen, their input needing no gradient)
    # until the forward pass returns (measured: LLaMA with 2 of 3 blocks frozen peaked 2 x 2 x t x h x e higher).
    cache_held = 0
    if cache:
        idle = new_trace()
        block(idle, "block", idle.new(b * s * h, e, existing=True), False,
              (idle.new(rope_rows * dm["rd"], e, existing=True), idle.new(rope_rows * dm["rd"], e, existing=True)))
        cache_held = (n_layers - layers_storing - frozen_storing) * sum(
            (st.nbytes for st in getattr(idle, "kv_copies", ())), 0)
    estimate = ActivationEstimate(per_layer=per_layer, layers_storing=layers_storing,
                                  recompute_peak=recompute * _positive(layers_storing),
                                  outside_layers=embeddings + tables + head, loss=loss, model="transformers",
                                  first_layer=first_layer, frozen_per_layer=frozen_per,
                                  frozen_layers_storing=frozen_storing, terms=tuple(terms))
    return ActivationParts(
        estimate=estimate, element_bytes=e, embeddings=embeddings, embeddings_batch=emb.batch_bytes, tables=tables,
        head=head, loss=loss, batch=emb.batch_bytes + chosen.batch_bytes,
        first=per_layer if first_layer is None else first_layer, blocks=estimate.layers, recompute=recompute,
        block_live=live.peak_live(), head_live=chosen.peak_live(), idle_block_live=idle.peak_live(),
        # (and a gradient its trace says backward holds when the recomputation starts: gpt-oss's experts' unsort)
        recompute_live=again.peak_live() + again.__dict__.get("recompute_arrival", 0) if checkpointing else 0, cache_held=cache_held, block_extras=block_extras,
        sliding_extra=sliding_extra, held_to_backward_end=held_to_end, recompute_backward_live=backward_live,
        shared_saved=shared_saved)


def _shared_tables_elsewhere(traced, last, among, n, first, frozen_storing, storing):
    """Bytes of the tables every block shares (the rotary cos and sin) that the blocks of a layout other than the
    last block's save, where the last block's layout saves none of them (0 otherwise): each layout's trace says whether
    its frozen storing blocks, its first storing block and its later blocks save them (ActivationParts.shared_saved);
    they are saved once if any block of that layout in that place does."""
    if not last.shared_saved or _positive_any(last.shared_saved[0]):
        return 0
    shared = 0
    for _, blocks, parts in traced:
        if parts is last or not parts.shared_saved:
            continue
        nbytes, frozen_saves, first_saves, later_saves = parts.shared_saved
        places = ((among(blocks, first - frozen_storing, first) if frozen_saves else 0)
                  + (among(blocks, first, first + 1) if first_saves else 0)
                  + (among(blocks, first + 1, n) if later_saves else 0))
        shared = larger(shared, pick(_positive(places * _positive(storing)), nbytes, 0))
    return shared


def _first_adapted_block(shape: ModelShape, method) -> int:
    """The first block whose layout holds one of LoRA's targets (0 for any other method): autograd saves nothing in
    the blocks before it, whose input needs no gradient and whose weights are frozen (measured: ERNIE 4.5 MoE and
    GLM-4.7-Flash with a dense first block and LoRA on the router or the experts alone). QLoRA is left at 0: peft's
    prepare_model_for_kbit_training makes the embeddings' output need a gradient."""
    if type(method) is not LoRA:
        return 0
    adapted = [min(blocks) for layout, blocks in shape.layouts()
               if layout.lora_adapters(method.targets, present_only=True)]
    return min(adapted, default=0)


def _mixed_parts(shape: ModelShape, **arguments) -> ActivationParts:
    """A model whose blocks differ (dense and mixture-of-experts blocks): each block layout traced as if every block
    had it, then block by block what each storing block saves in its own layout. The last block's layout gives
    per_layer, the liveness at the forward's end and the head; what the other layouts' blocks save beyond it (or
    below it) is the estimate's other_layouts, named in the terms; the first storing block is its own layout's; a
    recomputed block is the largest layout's; the DynamicCache's held k and v are each idle block's own."""
    _check_layout(shape, arguments["seq_len"])  # what only the whole model shows (a record's trace_refusal)
    n = shape.n_layers
    first_adapted = _first_adapted_block(shape, arguments["method"])
    # Layouts that differ by layer type (Gemma 4's full blocks at another head size): each layout's own blocks are
    # the masked ones its trace counts (mask tensor and k/v repeated at its own widths), its rotary pair its own width.
    widths = shape.architecture.rotary_widths(shape) if known(shape) and shape.architecture.rotary_widths else None
    traced = [(layout, np.asarray(blocks), _parts_at(layout, present_only=True, first_adapted=first_adapted,
                                                     rope_widths=widths,
                                                     own_blocks=frozenset(blocks) if widths else None, **arguments))
              for layout, blocks in shape.layouts()]
    last = next(parts for _, blocks, parts in traced if blocks[-1] == n - 1)
    estimate = last.estimate
    storing, frozen_storing = estimate.layers_storing, estimate.frozen_layers_storing
    first = n - storing  # the first storing block; the frozen storing blocks are the ones just before it

    def among(blocks, low, high):  # blocks with index in [low, high), for ints and int64 arrays alike
        if is_ndarray(low) or is_ndarray(high):
            return (np.searchsorted(blocks, np.asarray(high)) - np.searchsorted(blocks, np.asarray(low))).astype(
                np.int64)
        return int(np.count_nonzero((blocks >= low) & (blocks < high)))

    saved, idle_kv, per_block, first_bytes_all = 0, 0, [0] * n, 0
    for layout, blocks, parts in traced:
        own = parts.estimate
        first_bytes = own.per_layer if own.first_layer is None else own.first_layer
        first_bytes_all = first_bytes_all + parts.first * among(blocks, first, first + 1)
        saved = (saved + own.per_layer * among(blocks, first, n) + own.frozen_per_layer * among(
            blocks, first - frozen_storing, first) + (first_bytes - own.per_layer) * among(blocks, first, first + 1)
            * (storing > 0))
        idle = n - own.layers_storing - own.frozen_layers_storing  # blocks that store nothing, in this layout's trace
        kv = parts.cache_held // idle if not is_ndarray(idle) and idle else 0
        idle_kv = idle_kv + kv * among(blocks, 0, first - frozen_storing)
        if not validate.is_array(storing, frozen_storing, own.per_layer):  # per block, for the measurement's booking
            for i in blocks:
                i = int(i)
                if i >= first:
                    per_block[i] = (first_bytes if i == first else own.per_layer) - (
                        (estimate.first_layer or estimate.per_layer) if i == first else estimate.per_layer)
                elif i >= first - frozen_storing:
                    per_block[i] = own.frozen_per_layer - estimate.frozen_per_layer
    extra = saved - estimate.layers
    # Checkpointing: a layout's recomputed block whose tensors outlive its backward (Gemma 4's store blocks) adds them
    # to the recomputation of every block below it, which backward recomputes later (priced at a layout's first block)
    outlive = [(blocks, parts.held_to_backward_end) for _, blocks, parts in traced
               if _positive_any(parts.held_to_backward_end)]

    def held_after(block):  # what every such block above `block` (recomputed before it) still holds
        return sum((held * int(np.count_nonzero(at > block)) for at, held in outlive), 0)

    recomputes = [(blocks, parts.recompute + held_after(blocks[0]), parts.recompute_live + held_after(blocks[0]))
                  for _, blocks, parts in traced]
    # the largest layout's, point by point in a sweep
    recompute = reduce(larger, (r for _, r, _ in recomputes))
    recompute_live = reduce(larger, (live for _, _, live in recomputes))
    terms = estimate.terms + (("block", "the other block layouts' blocks: what they save beyond the last block's "
                                        "layout (negative: below it)", extra),)
    masked_extra = sum((parts.sliding_extra for _, _, parts in traced if parts is not last), 0) if widths else 0
    if _positive_any(masked_extra):  # the other layouts' masked blocks, each counted at its own widths
        what = ("the other block layouts' store blocks: k and v kept from their forward through backward"
                if arguments["checkpointing"] else
                "the other block layouts' sliding-window blocks: SDPA mask and k/v repeated to every head")
        terms += (("outside", what, masked_extra),)
        last = replace(last, tables=last.tables + masked_extra, sliding_extra=last.sliding_extra + masked_extra)
    shared = _shared_tables_elsewhere(traced, last, among, n, first, frozen_storing, storing)
    if _positive_any(shared):  # the rotary tables the last block's layout never saves (LFM2's convolution blocks)
        terms += (("outside", "rotary cos and sin tables, saved by the blocks of another block layout", shared),)
        last = replace(last, tables=last.tables + shared)
    estimate = replace(estimate, other_layouts=extra, recompute_peak=recompute * _positive(storing), terms=terms,
                       outside_layers=estimate.outside_layers + masked_extra + shared)
    extras = last.block_extras or (0,) * n
    if widths:
        for _, _, parts in traced:
            if parts is not last and parts.block_extras:
                extras = tuple(a + b for a, b in zip(extras, parts.block_extras))
    block_extras = (tuple(a + b for a, b in zip(extras, per_block))
                    if any(per_block) or last.block_extras or any(extras) else ())
    idle_live = reduce(larger, (pick(among(blocks, 0, first) > 0, parts.idle_block_live, 0) for _, blocks, parts in traced))
    return replace(last, estimate=estimate, blocks=estimate.layers, first=first_bytes_all, recompute=recompute,
                   idle_live=idle_live,
                   recompute_live=recompute_live, cache_held=idle_kv, block_extras=block_extras,
                   recompute_backward_live=reduce(larger, (parts.recompute_backward_live for _, _, parts in traced)),
                   layout_recompute=tuple((tuple(int(i) for i in blocks), r, live) for blocks, r, live in recomputes))


# The layouts this trace replays: LlamaForCausalLM's (Mistral's and Qwen2's too: biases change no saved
# tensor; Qwen3's adds its q/k RMSNorms; Phi-3's fuses qkv and gate_up and drops out residuals; OLMo 2's
# normalizes q, k and each sublayer's output in fp32), Gemma's, GPT-NeoX's, the MoE decoders', GPT-2's,
# BERT's and RoBERTa's; each measured (validation/measure.py). Other model_types are refused.
def traces(shape: ModelShape, method, recipe, seq_len, attention=None, mixer_kernels="torch") -> str | None:
    """None when this model replays `shape` trained with `method` in `recipe` (and `attention`, when
    given, and Run's `mixer_kernels`); else why not, in words."""
    try:
        if shape.architecture is None:
            return f"knows the gpt2, llama and bert families, not {shape.family}"
        _check_layout(shape, seq_len)
        _check_kernels(shape, mixer_kernels)
        if attention is not None:
            _check_attention(shape, attention)
        if recipe.name == "amp":  # fp32 weights under autocast: memmath/amp_trace.py
            if amp_refusal(method, shape=shape):
                return amp_refusal(method, shape=shape)
            if attention not in (None, "eager"):
                _check_masked(recipe, _sdpa_masked_blocks(shape, seq_len, "flash"))
        elif recipe.weight_bits != recipe.activation_bits or recipe.weight_bits not in (16, 32):
            return f"models a forward pass in the weights' own format, not precision {recipe.name!r}"
        for layout, _ in shape.layouts():  # each block layout adapts the targets it has (_mixed_parts)
            _setup(layout, method, recipe, present_only=bool(shape.block_layouts))
    except ValueError as error:
        if getattr(error, "field", None) in ("attention", "mixer_kernels"):
            return f"does not apply: {error}"
        return str(error).removeprefix("activations='transformers' ").split(" (use activations")[0]
    return None


def _check_kernels(shape: ModelShape, mixer_kernels):
    """The trace replays transformers' PyTorch path of a model's mixers; the CUDA kernels its record names
    (Architecture.mixer_kernels) save other tensors, unmeasured here."""
    kernels = shape.architecture.mixer_kernels if known(shape) else ""
    if kernels and mixer_kernels != "torch":
        raise validate.FieldError("mixer_kernels", f"the trace replays transformers' PyTorch path of "
                                  f"{shape.architecture.title}'s mixers, not {kernels}, whose saved tensors are not "
                                  "measured here; a run without those packages takes that path (mixer_kernels='torch', "
                                  "--mixer-kernels torch)")


def _check_attention(shape: ModelShape, attention):
    """SDPA where transformers 5.24 has none: Gemma2PreTrainedModel sets _supports_sdpa = False, so loading a Gemma 2
    model with attn_implementation="sdpa" raises ValueError (checked: with attn_logit_softcapping None too), and
    sdpa_attention_forward (integrations/sdpa_attention.py) raises for any other softcapped model."""
    if attention == "eager":
        return
    no_sdpa = known(shape) and not shape.architecture.sdpa
    if no_sdpa or shape.attn_softcap:
        why = (f"transformers 5.24 has no SDPA path for {shape.architecture.title} (its PreTrainedModel's "
               "_supports_sdpa is False)" if no_sdpa else "transformers' SDPA attention refuses a softcap")
        cap = f", attn_logit_softcapping {shape.attn_softcap}" if shape.attn_softcap else ""
        raise validate.FieldError("attention", f"attention {attention!r} does not run here: {why}{cap}; this model "
                                  "trains with eager attention")


def _check_layout(shape: ModelShape, seq_len):
    arch = shape.arch
    if shape.vision is not None:
        # A vision-language model: its wrapper's forward (the image features scattered into the embeddings, Gemma 3's
        # own loss over the logits) and the vision tower are not traced (memmath/multimodal.py).
        raise validate.FieldError("activations", f"activations='transformers' traces text models; this "
                                  f"{shape.vision.model_type} vision-language model's forward (its vision tower and "
                                  "how the image features join the language model) is not traced "
                                  "(use activations='textbook')")
    if not (known(shape) and shape.architecture.traced):
        traced = sum(1 for r in ARCHITECTURES.values() if r.family == shape.family and r.traced)
        raise validate.FieldError("activations", f"activations='transformers' replays the forward pass of {traced} "
                                  f"model types, not yet that of model_type {arch!r}, for which the textbook model "
                                  "is not checked against PyTorch either; memmath train CONFIG --traced steps the "
                                  "model under PyTorch for the activations it keeps (use activations='textbook')")
    refusal = shape.architecture.trace_refusal(shape) if shape.architecture.trace_refusal else ""
    if refusal:  # options of a traced type its trace has no steps for (architectures/<type>.py says which)
        raise validate.FieldError("activations", f"activations='transformers' {refusal} (use activations='textbook')")
    acts = shape.architecture.traced_activations
    if acts and shape.hidden_act not in acts:
        raise validate.FieldError("activations", f"activations='transformers' models hidden_act {' or '.join(repr(a) for a in acts if a)} for "
                         f"{arch or 'llama'}; got {shape.hidden_act!r} (use activations='textbook')")
    # Sliding windows at any length: the masks transformers builds are traced (_sdpa_masked_blocks, _forward_masks).


# ---- attention masks (transformers 5.24 masking_utils.py, integrations/sdpa_attention.py; torch 2.13's SDPA) ----
# Which masks a model's forward builds, once per forward pass, in its base model's forward (a local that lives until
# that forward returns, before the head and the loss): one per layer type. Per model type (its record's
# both_masks_always, causal_mask_always, window_zero_without_sliding): Gemma2Model, Gemma3TextModel and Qwen2MoeModel build the causal and the sliding-window mask
# whatever layer_types holds (modeling_gemma2.py:431-433, modeling_gemma3.py:525-527, modeling_qwen2_moe.py:486-488;
# Qwen2MoeConfig keeps sliding_window 0 without use_sliding_window); Qwen2Model and Qwen3Model the causal one always
# and the sliding one when a layer slides (modeling_qwen2.py:371-376); the others one mask, sliding-window when
# config.sliding_window is set (modeling_mistral.py:355, modeling_phi3.py:386, modeling_mixtral.py:444).


def _masks_built(shape: ModelShape) -> tuple:
    """The windows of the masks the forward builds: None the causal mask, w a sliding-window one over w tokens."""
    record = shape.architecture
    if not record.causal:  # create_bidirectional_mask skips it without padding (no mask at all)
        return ()
    windows = set(shape.attention_windows)
    if record.both_masks_always:
        window = shape.sliding_window
        if window is None and record.window_zero_without_sliding:
            window = 0  # Qwen2MoeConfig.__post_init__: sliding_window 0 without use_sliding_window
        windows = {None, window}
    elif record.causal_mask_always:
        windows.add(None)
    return tuple(sorted(windows, key=lambda w: -1 if w is None else w))


def _materialized(window, seq_len, past=None) -> bool:
    """Whether sdpa_mask returns a tensor for this mask: a causal one is skipped (SDPA's is_causal, no padding here),
    a sliding-window one only while kv_length < the window (_ignore_causal_mask_sdpa's local_attention_size check);
    Qwen2-MoE's window 0 never. past: the side of the window a sweep is on (None: read from seq_len)."""
    if window is None:
        return False
    if window == 0:
        return True
    return bool(past) if past is not None else any_true(seq_len >= window)


def _sdpa_masked_blocks(shape: ModelShape, seq_len, kind, past=None, padded=False) -> tuple:
    """Per block: whether its SDPA call gets a mask tensor (Trace.sdpa_mask). Eager attention gets its mask always,
    added to the scores (attn_weights + causal_mask saves nothing), so no eager block is flagged. A padded batch
    gives every SDPA call one (sdpa_mask skips a mask only when the attention mask has no zero)."""
    if kind == "eager":
        return (False,) * shape.n_layers
    if padded:
        return (True,) * shape.n_layers
    return tuple(_materialized(w, seq_len, past) for w in shape.attention_windows)


def _forward_masks(shape: ModelShape, b, s, e, kind, past=None, padded=False) -> tuple:
    """(elements, bytes each) of every mask tensor alive through the forward pass. eager_mask converts sdpa_mask's
    boolean (1, 1, s, s) pattern, expanded to (b, 1, s, s), with torch.where(mask, 0, finfo.min) in the embeddings'
    dtype: a whole b x s x s tensor per mask, built even below the window. Under SDPA a materialized mask stays
    that boolean (1, 1, s, s) tensor, s x s bytes (the expand is a view); a padded batch's is (b, 1, s, s)."""
    out = []
    for window in _masks_built(shape):
        if kind == "eager":
            out.append((b * s * s, e))
        elif padded:  # the padding mask differs per sequence: a whole boolean (b, 1, s, s) tensor, no view
            out.append((b * s * s, 1))
        elif _materialized(window, s, past):
            out.append((s * s, 1))
    return tuple(out)


def _hold_masks(tr: Trace, masks):
    for numel, elem in masks:
        tr.new(numel, elem).storage.kept = True  # alive from before the first block to the forward's end


def _check_masked(recipe, masked):
    if recipe.name == "amp" and any(masked):
        raise validate.FieldError("activations", "activations='transformers' models AMP with SDPA without a mask "
                                  "tensor: at or past the sliding window transformers gives SDPA one, which the "
                                  "autocast trace (memmath/amp_trace.py) does not follow")


def _past_window(shape: ModelShape, seq_len, kind):
    """Where a sweep of lengths across the sliding window is at or past it (SDPA only); None when it is not one."""
    windows = {w for w in shape.attention_windows if w}
    if kind == "eager" or not is_ndarray(seq_len) or not windows:
        return None
    over = np.asarray(seq_len) >= min(windows)  # one sliding_window per model
    return over if over.any() and not over.all() else None


def _pick_parts(over, above: ActivationParts, below: ActivationParts) -> ActivationParts:
    """Each point of a sweep from the trace of its side of the sliding window (pick elementwise)."""
    def merged_terms(x, y):
        rows: dict = {}
        for where, what, n in x:
            rows[(where, what)] = [n, 0]
        for where, what, n in y:
            rows.setdefault((where, what), [0, 0])[1] = n
        return tuple((where, what, pick(over, n1, n0)) for (where, what), (n1, n0) in rows.items())

    ea, eb = above.estimate, below.estimate
    estimate = {}
    for f in fields(ActivationEstimate):
        x, y = getattr(ea, f.name), getattr(eb, f.name)
        if f.name == "terms":
            estimate[f.name] = merged_terms(x, y)
        elif f.name == "model":
            estimate[f.name] = x
        elif f.name == "first_layer":
            estimate[f.name] = None if x is None and y is None else pick(
                over, ea.per_layer if x is None else x, eb.per_layer if y is None else y)
        else:
            estimate[f.name] = pick(over, x, y)
    parts = {"estimate": ActivationEstimate(**estimate), "element_bytes": above.element_bytes, "block_extras": (),
             "layout_recompute": ()}  # a sweep across the window: each recomputed block the largest layout's
    for f in fields(ActivationParts):
        if f.name in parts:
            continue
        x, y = getattr(above, f.name), getattr(below, f.name)
        if isinstance(x, tuple) and isinstance(y, tuple):  # shared_saved: picked term by term
            parts[f.name] = tuple(pick(over, a, b) for a, b in zip(x, y)) if x and y else x or y
        else:
            parts[f.name] = pick(over, x, y)
    return ActivationParts(**parts)


def _checkpoint_arguments(shape: ModelShape, rope_rows, rotary_width, table_bytes, s, n_layers, device, rope_widths):
    """Bytes each checkpointed block's arguments and stash keep from the forward to the end of backward beyond its
    input: the rotary cos and sin (position_embeddings, one pair per layer type where their widths differ), the
    position ids (cache_position, s int64) and, where the RNG state is a CPU tensor beside the step's, the CPU RNG
    state torch.utils.checkpoint stashes per block (preserve_rng_state: torch.get_rng_state(), 5,056 uint8)."""
    widths = {rope_widths[kind] for kind in shape.layer_types} if rope_widths else {rotary_width}
    return (2 * rope_rows * sum(widths) * table_bytes + INT64 * s
            + (CPU_RNG_STATE_BYTES * n_layers if device == "cpu" else 0))


def _extra_rope_pairs(shape: ModelShape, first_storing):
    """Gemma 3: how many more rotary cos/sin pairs than one the storing blocks (from first_storing on) use
    (Gemma3TextModel computes one pair per layer type in config.layer_types); 0 for every other model."""
    types = shape.layer_types
    if not shape.architecture.rotary_per_layer_type or types is None or len(set(types)) < 2:
        return 0

    def count(first):
        return max(len(set(types[int(first):])) - 1, 0)

    if isinstance(first_storing, np.ndarray):
        return np.vectorize(count, otypes=[np.int64])(first_storing)
    return count(first_storing)


def _rope_pair_widths(types, first_storing, widths):
    """The summed widths of the cos and sin tables of every layer type among the blocks from first_storing on, each
    type's pair at its own width (widths: {layer type: rotary width})."""
    def count(first):
        return sum(2 * widths[kind] for kind in set(types[int(first):]))

    if isinstance(first_storing, np.ndarray):
        return np.vectorize(count, otypes=[np.int64])(first_storing)
    return count(first_storing)


def _positive(value):
    """value > 0, elementwise for arrays, as a Python bool for scalars."""
    return value > 0 if is_ndarray(value) else bool(value > 0)


def _positive_any(value):
    return any_true(value > 0)


def _same(x, y):
    if is_ndarray(x) or is_ndarray(y):
        return bool(np.all(np.asarray(x) == np.asarray(y)))
    return x == y
