"""The peak of a training step: an estimate of the most bytes allocated at any moment.

By default the steady-state step (step="steady"): every step after the first, when the optimizer
states made by the first optimizer.step() stay alive through forward and backward. step="first" is
the first step, before they exist. An fp32 master copy (precision "mixed", "mixed_fp32_grads") is
alive in both: the frameworks that keep one build it with the optimizer, before the first forward.
validation/measure.py runs two steps per case and records both peaks (on the CPU, two profiled steps: step 2's forward and
backward peaks are step 1's plus exactly the optimizer-state bytes).

training_memory() adds up what a step keeps; the allocator's peak is higher, because tensors that
are never kept still exist for a while: the logits and their fp32 copy at the loss, the
gradients flowing backward, the optimizer's temporaries. peak_memory() estimates the highest
allocation in each phase of one step (forward, backward, optimizer step) as the largest of a few
moments, each a sum of named terms, and checks them against the PyTorch profiler's peak on the
CPU (validation/measure.py, tests/test_fidelity.py). Every moment starts from what is alive
before the step: the weights (adapters included), the batch (token ids and labels, int64) and
the model's buffers (BERT's position and token-type ids, LLaMA's rotary frequencies).

Forward (hf_activations' trace knows when each tensor is allocated and last read)
    in the last block: the embeddings' and every earlier block's saved tensors, plus the last
    block at its fullest (its saved tensors so far and the temporaries alive with them, e.g. the
    MLP's wide output, LoRA's B output and its scaled copy, a mixed-dtype sum's upcast copy)
    at the loss: every saved tensor, the logits (e*t*V), their fp32 copy (4*t*V, 16-bit models)
    and the log-softmax output
Backward
    at the loss (causal LMs): every saved tensor and two fp32 gradients over the vocabulary, 8*t*V
    entering the last block: the saved tensors but the head's and the loss's, the head side's
    gradients (final norm, head, a tied embedding) and the block's backward working set
    W = t*h*e + 2*t*I*e (the gradient arriving at the block and two MLP-wide gradients; three
    for GPT-2's gelu_new, a chain of plain ops); a MoE block's W is its experts' moments
    (architectures/_moe.backward_phase: the routed experts' unsort, 3 x t x k x h, or their SwiGLU; a record's
    moe_backward where its experts are not grouped_mm's: Llama 4's bmm over every expert)
    in the first block (when two or more blocks store): the embeddings' saved tensors, the first
    block's (with checkpointing: its input and the block recomputed), every gradient but the
    untied embeddings' and the first block's own, and W
    in the first block of a later layout (checkpointing, blocks of several layouts, e.g. a dense first
    block before MoE blocks): the block inputs up to it, its recomputation, the gradients of the blocks
    after it and its layout's W; the first block's moment then takes its own layout's W
    recomputing a block (checkpointing): the kept block inputs, the gradients so far and the
    block's forward run again at its fullest, for the last block, each later layout's first block and the
    first block; where the blocks differ each is its own layout's recompute (the first block's: the largest
    of the layouts up to it, which backward recomputes after it); a record's recompute_held adds what a MoE block's
    backward makes before its recomputation and holds through it (Llama 4: its experts' E t x h output gradient)
    at a recomputed block's widest backward op (checkpointing; the block's trace marks each: SDPA, whose backward
    holds its output's gradient and q's, k's and v's; every RMSNorm, whose fp32 backward holds five copies of its
    input's size; gpt-oss's sink attention): the block inputs, the gradients so far (the block's own too, an upper
    bound) and what the block saved up to that op plus the op's own (ActivationParts.recompute_backward_live), for
    the last and the first block; a record's
    norm_backward_widths makes a checkpointed block's W its widest norm's backward where that is wider (Gemma 4)
    at the embeddings: every gradient, plus a temporary V*h*e when the embedding is tied to the
    head (its second gradient is added into the first); with checkpointing and frozen embeddings,
    the embedding output transformers turned into a leaf and its gradient, 2*t*h*e
Optimizer step
    weights, gradients, the master copy and every optimizer state (with a master copy and no fp32
    accumulation buffer also the 16-bit gradients copied up to fp32 for the masters, the master's
    size), plus the optimizer's temporaries (on the fp32 masters where there are any): PyTorch's
    single-tensor Adam (the CPU default) builds denom = sqrt(v)/c + eps as two temporaries of
    one parameter while the previous parameter's denom is still referenced, so the largest of
    2*B[i] + B[i-1] over the parameters in model order; SGD with momentum none; plus the
    checkpointing leaf above, which lives while the loss does. On CUDA PyTorch defaults to the
    foreach Adam, assumed here to hold one temporary the size of every trainable parameter (not
    measured).

Gradient accumulation (run.grad_accum_steps = k > 1: k micro-batches of batch_size per optimizer step)
    the first micro-batch is the step above; from the second on every gradient exists (.grad, made by the
    first backward) through the forward and backward, and the previous micro-batch's loss (and graph: the
    checkpointing leaf, an 8-bit base's held inputs) lives until the new loss replaces it, in step 1 too.
    autograd still makes each parameter's gradient afresh and adds it into .grad in place (measured: from
    the second micro-batch on each AccumulateGrad allocates nothing and frees one gradient), so a later
    micro-batch's moment is the first one's plus the gradients the first had not yet put into .grad at
    that moment: all of them in forward and at the loss, all but the head side's entering the last block,
    the embeddings' and the first block's in the first block, the embeddings' at the embeddings. Those
    moments are the phases' (they are never below the first micro-batch's); the optimizer step is
    unchanged. Recorded after it was written: validation/grad_accum.py's 26 cases, k = 1, 2, 4 and 8.

QLoRA (a bitsandbytes base)
    every forward and backward moment adds the largest quantized matrix dequantized to the compute
    dtype (bitsandbytes builds one per matmul; for a 4-bit base not at the loss, where no quantized
    matmul runs); an 8-bit base's matmul keeps its input as ctx.A
    until the graph is freed, so those inputs stay through the optimizer step and, in the steady
    step, through the next forward. Added after the 100 QLoRA cases of validation/quantized.py were
    measured: before, 183 of their 200 step peaks were within 5%; after, 198.

What it assumes: pure fp32 or 16-bit training, or AMP with SDPA (memmath/amp_trace.py's dtypes; its
peaks are within 5% of 40 measured cases, with no AMP-specific term), zero_grad(set_to_none=True) after
each step, the loss kept but not the logits, CPU kernels' scratch buffers
(oneDNN's bf16 matmul workspaces) left out, and on CUDA no CUDA context (0.3 to 2 GiB more,
measured by nvidia-smi, not by the allocator). It is an estimate: tests/test_fidelity.py holds
it to 5% of the measured CPU peak. The moments were read off the profiler's timelines of the
recorded cases, so those are not independent of it. 15 held-out cases on wider shapes were
measured afterwards: at first 13 were within 5% and two (LoRA with checkpointing and CPU attention
dropout) 7.0% and 7.8% low; they prompted the recompute moments and GPT-2's third MLP-wide
gradient, after which 14 are within 5% and one is 6.4% low.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from types import SimpleNamespace

from .arrays import any_true, is_ndarray, larger, np

from . import preference, validate
from .architectures import _moe
from .hf_activations import activation_parts, scalar_methods
from .methods import Adapters, Freeze, Full, LoRA, QLoRA
from .loss import backward_at_loss
from .notes import Note
from .offload import why_no_peak as offload_why_no_peak
from .recipes import update_temporaries
from .run import Run, as_run, ddp_bucket_bytes
from .training import BNB_QMAP_BYTES, step_parts
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd


PHASES = ("forward", "backward", "optimizer_step")
# With gradient accumulation the forward and backward moments are a later micro-batch's (the label says so).
LATER_MICRO_BATCH = " (a later micro-batch: the earlier ones' gradients held)"
STEPS = ("steady", "first")  # peak_memory(step=...): every step after the first, or the first
INT64 = 8


@frozen
class PeakEstimate:
    """The estimated peak of one training step, per phase, with the moments behind each.

    forward, backward, optimizer_step: the highest allocation estimated in each phase (bytes);
    resident: what is alive before the first step (weights, batch, buffers); moments: (phase,
    moment, bytes) for every moment considered; notes: what was assumed (Note objects); step:
    "steady" (a step after the first, optimizer states alive throughout) or "first".
    """

    forward: object
    backward: object
    optimizer_step: object
    resident: object
    moments: tuple
    notes: tuple = ()
    step: str = "steady"
    # per moment, in the order of `moments`: its bytes by what holds them (weights, inputs and buffers, optimizer
    # states, gradients, saved activations, working memory); each adds up to that moment's bytes
    breakdown: tuple = ()

    def __post_init__(self):
        # Checked when built: whole, non-negative bytes (ints, or int64 arrays in a sweep).
        for name in (*PHASES, "resident"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        if not isinstance(self.moments, tuple):
            raise TypeError(f"moments must be a tuple of (phase, moment, bytes); got {validate.describe(self.moments)}")
        validate.notes("notes", self.notes)
        object.__setattr__(self, "step", validate.choice("step", self.step, STEPS))  # stored as checked

    @property
    def total(self):
        """The peak of the step: the largest of the three phases."""
        phases = (self.forward, self.backward, self.optimizer_step)
        if any(is_ndarray(value) for value in phases):  # a sweep (some phases may be scalars)
            return np.maximum(np.maximum(self.forward, self.backward), self.optimizer_step)
        return max(phases)

    @property
    def phase(self) -> str:
        """Which phase holds the peak (for a single configuration)."""
        values = {p: validate.largest(getattr(self, p)) for p in PHASES}
        return max(values, key=values.get)

    def parts(self) -> dict:
        """Phase -> estimated peak bytes, in the order forward, backward, optimizer_step."""
        return {p: getattr(self, p) for p in PHASES}

    def moments_frame(self):
        """A table of every moment considered: phase, moment, bytes (the largest per phase wins)."""
        import pandas as pd  # only here: `import memmath` stays numpy-only

        return pd.DataFrame([{"phase": p, "moment": label, "bytes": value} for p, label, value in self.moments])


def peak_memory(model, *, step="steady", **settings) -> PeakEstimate:
    """Estimate the peak allocation of a training step (see the module docstring for each term).

    model: a Run, or a model with Run's keyword settings (the same defaults as training_memory:
    one run, one answer). The peak is modelled for a gpt2, llama or bert shape trained with
    Full(), Freeze(...), LoRA(...), QLoRA(...) or Adapters(...) in fp32 or 16-bit (or AMP with
    SDPA), on one GPU or data parallel without ZeRO, with the exact ("transformers") activation
    model; anything else raises a ValueError saying why (requirement() then judges the sum of the
    parts). Measured against PyTorch on the CPU (device="cpu"); device="cuda" rests on the
    assumptions in the module doc.

    step: "steady" (the default) is every step after the first: the optimizer states made by the
    first optimizer.step() are alive through forward and backward. "first" is the first step, before
    they exist; an fp32 master copy is alive in both (built with the optimizer, before the first
    forward). Both are measured (validation/measure.py runs two steps). With run.grad_accum_steps > 1 the forward
    and backward phases are a later micro-batch's, every gradient of the earlier ones held (validation/grad_accum.py).

    The step is three named phases over one set of terms (_StepTerms): forward, backward and the optimizer
    step, each adding its moments (phase, label, bytes) in the order the step reaches them.
    """
    step = validate.choice("step", step, STEPS)
    run = as_run(model, **settings)
    why = why_no_peak(run)
    if why:
        fallback = next((str(n) for n in run.notes if n.kind == "activations_textbook_fallback"), "")
        raise ValueError(f"no peak model for this run: {why.removesuffix(' (see the activations note)')}"
                         + (f"; {fallback}" if fallback else ""))
    if run.is_sweep:
        # A sweep computes in int64: its largest points, evaluated exactly with Python ints, must fit.
        for top in scalar_methods(run.method, run.model):
            largest = peak_memory(run.replace(method=top, batch_size=validate.largest(run.batch_size),
                                              seq_len=validate.largest(run.seq_len)))
            validate.check_sweep("peak (from seq_len and batch_size)", largest.total)
    terms = _StepTerms.of(run, step)
    moments = _Moments(terms)
    _forward(terms, moments)
    _backward(terms, moments)
    note = _optimizer_step(terms, moments)
    return moments.estimate(note)


class _StepTerms(SimpleNamespace):
    """The bytes every moment of one step is built from, read once from the run and its parts.

    method and b are the policy's (a DPO run trains its base method over chosen and rejected sequences, 2b);
    resident is what is alive before the step (weights, batch, buffers); kept, previous_loss, held_steady what the
    step before left alive (see _StepTerms.of); the rest are the module doc's terms by name. Built once by `of` and
    only read: a namespace, not a dataclass, as nothing compares, prints or replaces it.
    """

    run: Run
    step: str
    memory: object
    parts: object
    method: object
    b: object
    t: object
    e: int
    batch_bytes: object
    buffers: object
    resident: object
    trains: object
    saved: object
    embeddings_alloc: object
    grads: object
    g_embed: object
    g_head: object
    tied_embed: object
    g_block: object
    leaf: object
    work_bwd: object
    kept: object
    previous_loss: object
    dequant: object
    held: object
    held_steady: object

    @property
    def dpo(self):
        """The run when it is preference training (DPO), else None."""
        return self.run if isinstance(self.run.method, preference.DPO) else None

    @property
    def lm(self) -> bool:
        """A causal language model (a loss over the vocabulary), not BERT (the uniform family counts as one)."""
        record = self.run.model.architecture  # the model type's facts (memmath/architectures/)
        return record is None or record.causal

    @property
    def later(self) -> bool:
        """Gradient accumulation: the forward and backward moments are a later micro-batch's."""
        return self.run.grad_accum_steps > 1

    @property
    def g_head_side(self):
        """The head side's gradients: a tied embedding gets its first gradient at the head."""
        return self.g_head + self.tied_embed

    @classmethod
    def of(cls, run: Run, step: str) -> _StepTerms:
        memory, parts = step_parts(run)
        shape, recipe, opt = run.model, run.recipe, run.optimizer_spec
        method, b = run.method, run.batch_size
        dpo = isinstance(method, preference.DPO)
        if dpo:  # preference training: the policy's method over chosen and rejected sequences (2b)
            method, b = method.base, 2 * b
        e, t, h = parts.element_bytes, b * run.seq_len, shape.hidden_size
        record = shape.architecture  # the model type's facts (memmath/architectures/); None for the uniform family
        lm = record is None or record.causal
        trains = memory.trainable_params > 0

        # Alive before the step: weights (adapters included), the batch, the buffers.
        batch_bytes = INT64 * t + (INT64 * t if lm else INT64 * b)
        buffers = 2 * INT64 * shape.max_positions if record is not None and record.position_id_buffers else (
            shape.head_dim * e if record is not None and record.rotary else 0)
        if dpo:  # the reference log-probabilities (2b fp32) and the reference copy's buffers
            batch_bytes = batch_bytes + preference.batch_extra(run)
            buffers = buffers + preference.reference_resident(run, parts)
        buffers = buffers + ddp_bucket_bytes(run, memory.gradients)  # DDP's all-reduce buckets, kept from its wrapping
        resident = memory.weights + memory.quantization_constants + batch_bytes + buffers

        g_embed, g_head = _group_gradients(shape, method, recipe)
        # With checkpointing transformers makes the embedding output a leaf that requires grad: the
        # graph's AccumulateGrad node keeps it, and backward gives it a gradient, while the loss lives.
        leaf = 2 * e * t * h if run.checkpointing and g_embed == 0 else 0
        # From the second step on the optimizer states exist before forward starts (measured: step 2's forward and
        # backward peaks = step 1's + exactly these bytes). The fp32 master copy exists from the first step: the
        # frameworks that keep one (DeepSpeed's FP16_Optimizer, Megatron's Float16OptimizerWithFloat16Params, apex)
        # build it with the optimizer, before the first forward (measured: validation/lora_dropout.py's master cases).
        kept = memory.master_weights + (memory.optimizer_states if step == "steady" else 0)
        if step == "first" and opt.name == "adam8bit":
            kept = memory.master_weights + _bnb_maps(shape, method, recipe, opt)  # made with the optimizer, before step 1
        # And the previous step's loss lives until the new one replaces it, at the end of forward: its
        # value (fp32 for causal LMs, transformers upcasts the logits; BERT's at e) and the checkpointing
        # leaf with its gradient (measured: step 2's forward peak - step 1's = states + these bytes).
        previous_loss = ((4 if lm else e) + leaf) if step == "steady" else 0
        # A quantized base (QLoRA): bitsandbytes dequantizes a whole matrix for each matmul, forward and
        # backward; an 8-bit base's matmul keeps its input (ctx.A) until the graph goes, i.e. through the
        # optimizer step and the next forward (measured by validation/quantized.py).
        dequant, held = _quantized_base_extras(run, method, b, parts)
        held_steady = held if step == "steady" else 0
        if run.grad_accum_steps > 1:
            # Gradient accumulation: a later micro-batch's forward also starts with the previous micro-batch's
            # loss and graph alive (its loss value, the checkpointing leaf, an 8-bit base's held inputs), in the
            # first step as in the steady one.
            previous_loss, held_steady = (4 if lm else e) + leaf, held
        return cls(run=run, step=step, memory=memory, parts=parts, method=method, b=b, t=t, e=e,
                   batch_bytes=batch_bytes, buffers=buffers, resident=resident, trains=trains,
                   saved=(parts.estimate.saved_by_forward - parts.batch) * trains,
                   embeddings_alloc=parts.embeddings - parts.embeddings_batch,
                   grads=memory.gradients + memory.gradient_accumulation, g_embed=g_embed, g_head=g_head,
                   tied_embed=_embedding_bytes(shape, recipe) if shape.tied_embeddings and g_embed > 0 else 0,
                   g_block=_block_gradients(shape, method, recipe), leaf=leaf,
                   work_bwd=_backward_working_set(run, method, t, e), kept=kept, previous_loss=previous_loss,
                   dequant=dequant, held=held, held_steady=held_steady)


def _backward_working_set(run: Run, method, t, e):
    """The block's backward working set: the gradient arriving at it and the MLP-wide gradients alive at once
    (GPT-2's gelu_new, a chain of plain ops, holds three; GELU and SwiGLU two), and what LoRA adds to it."""
    if run.model.mixed:  # blocks of several layouts: the largest of their working sets
        layouts = run.model.layouts()
        trained = method.layers_trained(run.model) if isinstance(method, Freeze) else None
        if trained is not None and not is_ndarray(trained):  # the moments it prices are the last and first trained
            # blocks' (a frozen MoE block's unsort is not in them: measured, test_block_layouts' QWEN2_MIXED)
            first = run.model.n_layers - int(trained)
            layouts = [(layout, blocks) for layout, blocks in layouts if max(blocks) >= first] or layouts
        return reduce(larger, (_block_backward_working_set(layout, run.recipe, method, t, e, run.checkpointing,
                                                           present_only=True, batch=(run.batch_size, run.seq_len))
                               for layout, _ in layouts))  # elementwise in a sweep
    return _block_backward_working_set(run.model, run.recipe, method, t, e, run.checkpointing,
                                       batch=(run.batch_size, run.seq_len))


def _trained_layouts(run: Run, method) -> tuple:
    """(layout, its first trained block) for each block layout with a trained block, by that block (the first is the
    first trained block's); () where Freeze's trained count is an array."""
    trained = method.layers_trained(run.model) if isinstance(method, Freeze) else run.model.n_layers
    if is_ndarray(trained):
        return ()
    first = run.model.n_layers - int(trained)
    found = [(layout, min(i for i in blocks if i >= first)) for layout, blocks in run.model.layouts()
             if max(blocks) >= first]
    return tuple(sorted(found, key=lambda pair: pair[1]))


def _recompute_of(parts, block, below=False):
    """(recompute, recompute_live) of one recomputed block: its own layout's where the blocks differ (a dense block's
    MLP beside MoE blocks' experts); below=True: the largest of the layouts of the blocks up to it too (backward
    recomputes every block down to the first, frozen ones included: the embedding output needs a gradient under
    checkpointing). The model's (the largest layout's) where the layouts are not known apart."""
    found = [(recompute, live) for blocks, recompute, live in parts.layout_recompute
             if block in blocks or (below and min(blocks) <= block)]
    if not found:
        return parts.recompute, parts.recompute_live
    return reduce(larger, (r for r, _ in found)), reduce(larger, (live for _, live in found))


def _recompute_held(model, block, t, e):
    """What block `block`'s backward makes before its recomputation starts and holds through it: its record's
    recompute_held for a MoE block (Llama 4's), else nothing."""
    layout = model.block_layout(block)
    record = layout.architecture
    if record is None or record.recompute_held is None or not layout.n_experts:
        return 0
    return record.recompute_held(layout, t, e)


def _one_block_gradients(layout, method, recipe):
    """Gradient bytes of one trained block of `layout` (its weights, or its adapters)."""
    if isinstance(method, (LoRA, Adapters)):
        return sum(_block_tensor_bytes(layout, method, recipe, present_only=True))
    return _bits_bytes(layout.params_per_layer, recipe.grad_bits)


def _block_backward_working_set(shape, recipe, method, t, e, checkpointing=False, present_only=False, batch=None):
    """_backward_working_set of one block layout (present_only: LoRA targets the block lacks adapt nothing; batch:
    the run's (batch size, sequence length), for a record's mixer_backward)."""
    h = shape.hidden_size
    record = shape.architecture
    work = t * h * e + (2 if record is None else record.mlp_backward_widths) * t * shape.intermediate_size * e
    if record is not None and record.mixer_backward is not None and batch is not None:  # a mixer's own moment
        work = larger(work, record.mixer_backward(shape, method, recipe, *batch))
    if checkpointing and record is not None and record.norm_backward_widths:  # a norm's backward wider than the MLP's
        work = larger(work, t * h * e + record.norm_backward_widths * t * h * 4)  # (measured with checkpointing)
    if shape.n_experts and record is not None and record.traced:  # a MoE block: its experts' moments (3 x t x k x h
        # at the unsort, measured), not a dense width's (intermediate_size is its dense blocks')
        trains = not isinstance(method, (LoRA, Adapters))
        if record.moe_backward is None:
            work = t * h * e + _moe.backward_phase(shape, t, e, trains, recipe.grad_bits // 8, checkpointing)
        else:  # a type's own experts' moments; adapted: LoRA on its routed experts (their inputs are saved)
            adapted = isinstance(method, LoRA) and any(
                m.module == "experts.down_proj" for m in shape.lora_adapters(method.targets, present_only=present_only))
            work = t * h * e + record.moe_backward(shape, t, e, trains, recipe.grad_bits // 8, checkpointing,
                                                   adapted=adapted)
    # LoRA on routed experts (peft's ParamWrapper): the MoE block's backward starts at down_proj's grouped_mm,
    # which gives its weight W + BA a gradient the size of the whole E x h x I tensor, while everything is
    # still saved (written before the MoE LoRA cases were measured: validation/moe_lora.py).
    if isinstance(method, LoRA) and shape.n_experts and any(
            m.module == "experts.down_proj" for m in shape.lora_adapters(method.targets, present_only=present_only)):
        work = work + shape.n_experts * h * shape.expert_intermediate_size * e
    # LoRA dropout: the dropout's backward (grad * mask) makes the gradient of the adapter's input while the
    # gradient of the dropped copy (lora_A's input gradient) is still alive: one more t x d_in gradient in the
    # adapters' dtype, at the widest adapted input (found after validation/lora_dropout.py's checkpointed cases
    # were recorded: GPT-2 at hidden 256, all linear layers, measured 6.3% above the model without it).
    if isinstance(method, LoRA) and method.dropout:
        widest = max((adapter.d_in for adapter in shape.lora_adapters(method.targets, present_only=present_only)),
                     default=0)
        work = work + t * widest * method.adapter_bits(recipe) // 8
    return work


class _Moments:
    """The moments of one step as the phases add them, each with its bytes by what holds them."""

    def __init__(self, terms: _StepTerms):
        self.terms = terms
        self.moments: list = []
        self.breakdown: list = []

    def add(self, phase, label, value, saved=0, gradients=0, states=0, unset=0):
        """One moment: value is what the step adds at that moment; saved, gradients and states say how much of
        it is saved activations, gradients and optimizer states (the rest is working memory). unset: the gradients
        the first micro-batch has not yet put into .grad at this moment, which a later micro-batch holds."""
        s = self.terms
        if s.later and phase != "optimizer_step":
            value, gradients, label = value + unset, gradients + unset, label + LATER_MICRO_BATCH
        # At the loss no quantized matmul runs (the head is not converted): a 4-bit base's dequantized matrix,
        # made and dropped inside each MatMul4Bit, is not alive there (found after validation/lora_dropout.py's
        # QLoRA cases were recorded: at b x s = 64 they measured one such matrix below the model; no case of
        # validation/quantized.py changes). An 8-bit base's is kept as it was measured.
        four_bit = getattr(s.method, "quant_type", None) in ("nf4", "fp4")
        matrix = 0 if label.startswith("at the loss") and four_bit else s.dequant
        extra = {"forward": s.kept + s.previous_loss + matrix + s.held_steady, "backward": s.kept + matrix,
                 "optimizer_step": s.held}.get(phase, 0)
        self.moments.append((phase, label, s.resident + (value + extra) * s.trains))
        held_states = s.kept if phase != "optimizer_step" else 0
        memory = s.memory
        self.breakdown.append({
            "weights": memory.weights + memory.quantization_constants, "inputs and buffers": s.batch_bytes + s.buffers,
            "optimizer states": (states + held_states) * s.trains, "gradients": gradients * s.trains,
            "saved activations": saved * s.trains,
            "working memory": (value + extra - saved - gradients - states - held_states) * s.trains})

    def estimate(self, transient_note) -> PeakEstimate:
        """The PeakEstimate: each phase's highest moment, with what was assumed."""
        s, run = self.terms, self.terms.run
        phases = {}
        for phase in PHASES:
            values = [value for p, _, value in self.moments if p == phase]
            result = values[0]
            for value in values[1:]:
                result = np.maximum(result, value) if is_ndarray(result) or is_ndarray(value) \
                    else max(result, value)
            phases[phase] = result
        notes = () if transient_note is None else (transient_note,)
        if s.later:
            b = s.b  # the policy's sequences per micro-batch (a DPO run's chosen and rejected: 2b)
            notes += (Note("grad_accum_peak",
                           f"gradient accumulation over {run.grad_accum_steps} micro-batches"
                           + ("" if is_ndarray(b) else f" of {b} (an effective batch of {run.effective_batch})")
                           + ": the peak is a later micro-batch's, whose forward and backward run with the earlier "
                           "ones' gradients held"),)
        ddp = validate.largest(ddp_bucket_bytes(run, s.memory.gradients))
        if ddp:
            notes += (Note("ddp_buckets", "DistributedDataParallel's all-reduce buckets, a second copy of the "
                           f"gradients ({'up to ' if is_ndarray(s.memory.gradients) else ''}{int(ddp):,} B), alive "
                           "through the step (DDP's default; gradient_as_bucket_view=True makes the gradients views into them)"),)
        if run.device == "cuda":
            notes += (Note("cuda_context_excluded",
                           "the CUDA context (0.3 to 2 GiB) is not included: the allocator's peak does not see it"),)
        return PeakEstimate(forward=phases["forward"], backward=phases["backward"],
                            optimizer_step=phases["optimizer_step"], resident=s.resident, moments=tuple(self.moments),
                            notes=notes, step=s.step, breakdown=tuple(self.breakdown))


def _forward(s: _StepTerms, moments: _Moments) -> None:
    """Forward: the saved tensors pile up; the most alive at once is in the last block or at the loss."""
    parts = s.parts
    # (use_cache: the cache also holds the k and v of the blocks that store nothing, to the end of forward)
    before_last = s.embeddings_alloc + parts.blocks - parts.estimate.per_layer + parts.tables + parts.cache_held
    for label, value in (preference.reference_moments(s.dpo, parts) if s.dpo is not None else ()):
        moments.add("forward", label, value, unset=s.grads)  # under no_grad, before the policy's forward: nothing saved
    moments.add("forward", "in the last block: every earlier saved tensor and the block's own, at its fullest",
                before_last + parts.block_live, saved=before_last, unset=s.grads)
    if any_true(parts.idle_live > 0):  # a block that stores nothing, before the first storing one
        moments.add("forward", "in a block before the first that stores: the embeddings' saved tensors and the "
                    "block's own transients", s.embeddings_alloc + parts.tables + parts.idle_live,
                    saved=s.embeddings_alloc + parts.tables, unset=s.grads)
    saved = s.embeddings_alloc + parts.blocks + parts.tables + parts.cache_held
    moments.add("forward", "at the loss: every saved tensor, the logits and their fp32 copy",
                saved + parts.head_live, saved=saved, unset=s.grads)


def _backward(s: _StepTerms, moments: _Moments) -> None:
    """Backward: from the loss through the last block, (recomputing blocks,) the first block, to the embeddings."""
    parts, e, t, h = s.parts, s.e, s.t, s.run.model.hidden_size
    vocab = s.run.model.vocab_size or 0
    grads, saved, work_bwd = s.grads, s.saved, s.work_bwd
    if s.lm:
        moments.add("backward", "at the loss: two fp32 gradients over the vocabulary",  # run.loss's: memmath/loss.py
                    saved + backward_at_loss(s.run, t, vocab, e, head_trains=s.g_head > 0), saved=saved, unset=grads)
    head_saved = parts.head + parts.loss - (0 if s.lm else parts.batch)
    moments.add("backward", "entering the last block: saved tensors but the head's, head-side gradients, working set",
                saved - head_saved + s.g_head_side + work_bwd, saved=saved - head_saved, gradients=s.g_head_side,
                unset=grads - s.g_head)
    layouts = _trained_layouts(s.run, s.method) if s.run.checkpointing and s.run.model.mixed else ()
    # Each recomputed block is priced by its own layout (a dense block's recompute is not a MoE block's): the first
    # trained block's (and those below it, which backward recomputes after it), each later layout's first block's and
    # the last block's (the largest layout's without layouts)
    first_recompute, first_live = _recompute_of(parts, layouts[0][1], below=True) if layouts else (
        parts.recompute, parts.recompute_live)
    last_live = _recompute_of(parts, s.run.model.n_layers - 1)[1] if layouts else parts.recompute_live
    if s.run.checkpointing:
        first = e * t * h + parts.tables + first_recompute
    else:
        first = parts.first + parts.tables
    # Only when a second block stores: then every later block's gradients exist already.
    storing = parts.estimate.layers_storing
    two = storing > 1 if is_ndarray(storing) else int(storing > 1)
    later_grads = grads - s.g_embed + s.tied_embed - s.g_block  # every gradient but the embeddings' and the block's
    if layouts:  # the first block's own layout's working set; each later layout's first block is a moment below
        work_bwd = _block_backward_working_set(layouts[0][0], s.run.recipe, s.method, t, e, True, present_only=True,
                                               batch=(s.run.batch_size, s.run.seq_len))
    moments.add("backward", "in the first block: its saved tensors (or its recomputation), every later gradient",
                (s.embeddings_alloc + first + later_grads + work_bwd) * two,
                saved=(s.embeddings_alloc + first) * two, gradients=later_grads * two,
                unset=(s.g_embed + s.g_block) * two)
    for layout, block in layouts[1:]:
        # a later layout's first trained block (checkpointing): every block input up to it, its recomputation (its
        # own layout's), the gradients of the blocks after it and its own working set (measured: a GLM-4.5 with
        # a dense first block peaks in its first MoE block's unsort, before that block's gradients exist)
        earlier = sum(_one_block_gradients(s.run.model.block_layout(i), s.method, s.run.recipe)
                      for i in range(layouts[0][1] + 1, block + 1))
        inputs = (block - layouts[0][1] + 1) * e * t * h
        recompute, live = _recompute_of(parts, block)
        moments.add("backward", "recomputing the first block of a later layout: the block inputs, later gradients",
                    s.embeddings_alloc + inputs + parts.tables + later_grads - earlier + t * h * e + live
                    + _recompute_held(s.run.model, block, t, e),
                    saved=s.embeddings_alloc + inputs + parts.tables, gradients=later_grads - earlier,
                    unset=s.g_embed + s.g_block + earlier)
        moments.add("backward", "in the first block of a later layout: the block inputs, its recomputation, later "
                    "gradients",
                    s.embeddings_alloc + inputs + parts.tables + recompute + later_grads - earlier
                    + _block_backward_working_set(layout, s.run.recipe, s.method, t, e, True, present_only=True,
                                                  batch=(s.run.batch_size, s.run.seq_len)),
                    saved=s.embeddings_alloc + inputs + parts.tables + recompute,
                    gradients=later_grads - earlier, unset=s.g_embed + s.g_block + earlier)
    if s.run.checkpointing:
        # Recomputing a block: its forward runs again (saving), over every block input still kept.
        moments.add("backward", "recomputing the last block: every block input, head-side gradients",
                    s.embeddings_alloc + parts.blocks + parts.tables + s.g_head_side + t * h * e
                    + last_live + _recompute_held(s.run.model, s.run.model.n_layers - 1, t, e), saved=s.embeddings_alloc + parts.blocks + parts.tables,
                    gradients=s.g_head_side, unset=grads - s.g_head)
        moments.add("backward", "recomputing the first block: its input, every later gradient",
                    (s.embeddings_alloc + e * t * h + parts.tables + later_grads + t * h * e
                     + first_live + _recompute_held(s.run.model, layouts[0][1] if layouts else 0, t, e)) * two, saved=(s.embeddings_alloc + e * t * h + parts.tables) * two,
                    gradients=later_grads * two, unset=(s.g_embed + s.g_block) * two)
        inside = parts.recompute_backward_live
        if is_ndarray(inside) or inside:
            # A recomputed block's widest backward op (its trace says what it holds then: SDPA, an RMSNorm, gpt-oss's
            # sink attention): the block inputs, the gradients so far (the block's own too, an upper bound: its
            # attention's are not made yet), the gradient arriving at the block and that moment's tensors
            moments.add("backward", "in the last block's recomputed backward at its widest op: every block input, "
                        "head-side gradients", s.embeddings_alloc + parts.blocks + parts.tables + s.g_head_side
                        + s.g_block + t * h * e + inside, saved=s.embeddings_alloc + parts.blocks + parts.tables,
                        gradients=s.g_head_side + s.g_block, unset=grads - s.g_head - s.g_block)
            moments.add("backward", "in the first block's recomputed backward at its widest op: its input, every gradient "
                        "but the embeddings'", (s.embeddings_alloc + e * t * h + parts.tables + later_grads + s.g_block
                                                + t * h * e + inside) * two,
                        saved=(s.embeddings_alloc + e * t * h + parts.tables) * two,
                        gradients=(later_grads + s.g_block) * two, unset=s.g_embed * two)
    moments.add("backward", "at the embeddings: every gradient", s.embeddings_alloc + grads + s.tied_embed + s.leaf,
                saved=s.embeddings_alloc, gradients=grads + s.tied_embed, unset=s.g_embed)


def _optimizer_step(s: _StepTerms, moments: _Moments):
    """The optimizer step: weights, gradients, states and the update's temporaries; returns the temporaries' Note."""
    run, memory = s.run, s.memory
    shape, recipe, opt = run.model, run.recipe, run.optimizer_spec
    transient, note = optimizer_transient(shape, s.method, recipe, opt, run.device)
    states_and_transient = memory.optimizer_states + transient
    # With a master copy the optimizer steps the fp32 masters, so each 16-bit gradient is first copied up to an
    # fp32 one (master.grad = grad.float(), for every parameter before the update: DeepSpeed's FP16_Optimizer and
    # apex flatten them, Megatron copies them one by one), the size of the master copy; an fp32 accumulation
    # buffer (mixed_fp32_grads) is the masters' gradient itself.
    master_grads = memory.master_weights if not recipe.accum_bits else 0
    if opt.name == "adam8bit" and run.device == "cpu" and s.step == "first":
        # bitsandbytes makes each tensor's states just before updating it (torch's Adam makes them
        # all first): the first step peaks at the states made so far plus one tensor's temporaries.
        states_and_transient = _bnb_first_step(shape, s.method, recipe, opt)
    moments.add("optimizer_step", "weights, gradients, states and the optimizer's temporaries",
                s.grads + master_grads + memory.master_weights + states_and_transient + s.leaf,
                gradients=s.grads + master_grads,
                states=memory.master_weights + min(memory.optimizer_states, states_and_transient)
                if not is_ndarray(states_and_transient) else memory.master_weights + memory.optimizer_states)
    return note


def forward_start(model, *, step="steady", **settings) -> int:
    """Bytes alive when a step's forward begins (what its first forward moment starts from): what is alive before
    the first step, with, from the second step on, the optimizer states and the previous step's loss, and with
    gradient accumulation the earlier micro-batches' gradients. A run peak_memory models (why_no_peak is "")."""
    step = validate.choice("step", step, STEPS)
    s = _StepTerms.of(as_run(model, **settings), step)
    return s.resident + (s.kept + s.previous_loss + s.held_steady + (s.grads if s.later else 0)) * s.trains


def why_no_peak(run: Run) -> str:
    """Why the peak of this run is not modelled, in words; "" when peak_memory answers it."""
    if run.seq_len is None or not run.model.has_shape:
        return "without a sequence length and the model's widths there are no activations to place in time"
    if run.offload:
        return offload_why_no_peak(run)
    if run.tp > 1 or run.pp > 1 or run.cp > 1 or run.ep > 1:
        return ("the peak estimate (peak_memory) models one GPU; a tensor, pipeline, context or expert parallel rank's "
                "is memmath.parallel.parallel_peak")
    if run.sharding != "even" or run.sharded:
        return "the peak estimate does not model ZeRO or FSDP sharding"
    if run.model.vision is not None:
        return "the peak estimate does not model a vision-language model (its vision tower's forward and backward)"
    if run.activations != "transformers":
        chosen = "" if "activations" in run.defaulted else ", and activations='textbook' was chosen"
        return f"the peak is modelled with the exact activation model only{chosen} (see the activations note)"
    return ""


def _quantized_base_extras(run: Run, method, b, parts):
    """(dequantized matrix, 8-bit inputs held) for QLoRA, else (0, 0); method and b are the policy's.

    The largest quantized matrix in the compute dtype: bitsandbytes' CPU gemm_4bit and
    MatMul4Bit.backward (dequantize_4bit(...).to(dtype)) and MatMul8bitFp (CB.to(dtype) * SCB)
    each build one before the matmul (bitsandbytes 0.50 autograd/_functions.py). The held inputs:
    what the exact activation model adds for an 8-bit base, the same trace with a 4-bit base taken off.
    """
    if not isinstance(method, QLoRA):
        return 0, 0
    shape, recipe = run.model, run.recipe
    largest = max((t.numel for _, t, _ in shape.tensor_copies(("layer", "head")) if t.linear), default=0)
    dequant = largest * (recipe.weight_bits // 8)
    held = 0
    if method.quant_type == "int8":
        four_bit = activation_parts(shape, recipe=recipe, method=replace(method, quant_type="nf4", double_quant=False),
                                    seq_len=run.seq_len, batch_size=b, dropout=run.dropout, attention=run.attention,
                                    checkpointing=run.checkpointing, device=run.device)
        held = parts.estimate.saved_by_forward - four_bit.estimate.saved_by_forward
    return dequant, held


def _bits_bytes(params, bits):
    return -((-params * bits) // 8)


def _embedding_bytes(shape, recipe):
    """The token embedding matrix (the head too when tied): V*h at the gradient's width."""
    return _bits_bytes(shape.vocab_size * shape.hidden_size, recipe.grad_bits)


def _group_gradients(shape, method, recipe):
    """(gradient bytes of the embeddings group, of the final norm and head) for this method."""
    def group(name):
        return _bits_bytes(sum(t.numel for t in shape.tensors(name)), recipe.grad_bits)

    if isinstance(method, Full):
        return group("embeddings"), group("final_norm") + group("head")
    if isinstance(method, Freeze):
        embed = group("embeddings") if method.train_embeddings else 0
        head = (group("final_norm") if method.train_final_norm else 0) + (
            group("head") if method.head_trains(shape) else 0)
        return embed, head
    return 0, 0  # LoRA and QLoRA: only the adapters train


def _block_gradients(shape, method, recipe):
    """Gradient bytes of the first storing block (its weights, or its adapters under LoRA): the block whose backward
    runs while every later block's gradients exist; in its own layout where the model's blocks differ."""
    if shape.mixed:  # the first trainable block: block 0, or under Freeze the first of the last k
        k = method.layers_trained(shape) if isinstance(method, Freeze) else shape.n_layers

        def first(k):
            layout = shape.block_layout(min(shape.n_layers - int(k), shape.n_layers - 1))
            if isinstance(method, (LoRA, Adapters)):
                return sum(_block_tensor_bytes(layout, method, recipe, present_only=True))
            return _bits_bytes(layout.params_per_layer, recipe.grad_bits)

        return np.vectorize(first, otypes=[np.int64])(k) if is_ndarray(k) else first(k)
    per_block = sum(_trainable_tensor_bytes(shape, method, recipe, 1)) - sum(
        _trainable_tensor_bytes(shape, method, recipe, 0))
    if isinstance(method, (LoRA, Adapters)):
        return per_block
    return _bits_bytes(shape.params_per_layer, recipe.grad_bits)


def _trainable_tensor_bytes(shape, method, recipe, blocks):
    """Bytes of each trainable tensor in PyTorch's parameters() order, for the last `blocks` blocks trainable (each
    block in its own layout where the model's blocks differ)."""
    w = recipe.weight_bits

    def sizes(tensors, bits=w):
        return [_bits_bytes(t.numel, bits) for t in tensors]

    if shape.mixed:
        n = shape.n_layers
        inside = [size for i in range(n - blocks, n)
                  for size in _block_tensor_bytes(shape.block_layout(i), method, recipe, present_only=True)]
    else:
        inside = _block_tensor_bytes(shape, method, recipe) * blocks
    if isinstance(method, (LoRA, Adapters)):
        return inside
    out = []
    full = isinstance(method, Full)
    if full or method.train_embeddings:
        out += sizes(shape.tensors("embeddings"))
    out += inside
    if full or method.train_final_norm:
        out += sizes(shape.tensors("final_norm"))
    if full or method.head_trains(shape):
        out += sizes(shape.tensors("head"))
    return out


def _block_tensor_bytes(shape, method, recipe, present_only=False) -> list:
    """Bytes of each trainable tensor of one block (a shape of one block layout), in parameters() order;
    present_only: LoRA targets the block lacks adapt nothing (one layout of a model whose blocks differ)."""
    record = shape.architecture
    if isinstance(method, LoRA):
        rank = method.rank
        bits = method.adapter_bits(recipe)
        order = () if record is None else record.module_order
        # a mixture of experts': already in parameters() order
        modules = shape.lora_adapters(method.targets, present_only=present_only)
        if not shape.n_experts:
            modules = sorted(modules, key=lambda m: order.index(m[0]) if m[0] in order else len(order))
        block = []
        for _, d_in, d_out, k in modules:  # k: rank factor (models.LoraAdapter)
            block += [_bits_bytes(k * rank * d_in, bits), _bits_bytes(d_out * k * rank, bits)]
        return block
    if isinstance(method, Adapters):
        # validation/houlsby.py: after the attention's projection, then the MLP's; down (m x h, m), up (h x m, h)
        h, m, bits = shape.hidden_size, method.bottleneck, method.adapter_bits(recipe)
        return [_bits_bytes(n, bits) for n in (m * h, m, h * m, h)] * 2
    layer = shape.tensors("layer")
    if record is not None and record.norms_last:  # LlamaDecoderLayer registers self_attn, mlp, then the two norms
        layer = [t for t in layer if t.component != "norms"] + [t for t in layer if t.component == "norms"]
    return [_bits_bytes(t.numel, recipe.weight_bits) for t in layer]


def optimizer_transient(shape, method, recipe, opt, device):
    """Bytes of the optimizer's temporaries at its highest moment, and a Note when assumed (else None): the rule
    its registry entry names (recipes.TEMPORARIES)."""
    if opt.temporaries == "none":
        return 0, None
    note = None if opt.temporaries_measured else Note(
        "optimizer_temporaries_assumed", f"{opt.name}'s temporaries assumed like Adam's (not measured)")
    if opt.temporaries == "bitsandbytes":
        return _bnb_transient(shape, method, recipe, opt, device)
    # The tensors the optimizer updates: the fp32 masters where the recipe keeps a master copy of 16-bit ones.
    stored = _bnb_tensor_bits(method, recipe)
    updated = max(stored, recipe.master_bits)

    def tensor_bytes(blocks):
        return [size * updated // stored for size in _trainable_tensor_bytes(shape, method, recipe, blocks)]

    if device == "cuda":
        # foreach Adam: one list of temporaries as large as every trainable tensor together (assumed).
        blocks = method.layers_trained(shape) if isinstance(method, Freeze) else shape.n_layers
        if shape.mixed:  # blocks of several layouts: the last `blocks` of them, each its own
            total = (np.vectorize(lambda k: sum(tensor_bytes(int(k))), otypes=[np.int64])(blocks)
                     if is_ndarray(blocks) else sum(tensor_bytes(blocks)))
        else:
            outside = sum(tensor_bytes(0))
            per_block = sum(tensor_bytes(1)) - outside
            total = outside + per_block * blocks
        return total, note or Note("optimizer_temporaries_assumed",
                                   "foreach Adam's temporaries on CUDA assumed as large as the trainable parameters")

    def largest(blocks):  # the CPU's single-tensor Adam over the first blocks: the pattern repeats after them
        return update_temporaries(tensor_bytes(blocks), device)

    if isinstance(method, Freeze):
        k = method.layers_trained(shape)
        if shape.mixed:  # blocks of several layouts: the pattern does not repeat
            return (np.vectorize(lambda b: largest(int(b)), otypes=[np.int64])(k) if is_ndarray(k)
                    else largest(int(k))), note
        if is_ndarray(k):
            options = np.array([largest(0), largest(1), largest(2)])
            return options[np.minimum(k, 2)], note
        return largest(min(int(k), 2)), note
    return largest(shape.n_layers if shape.mixed else min(shape.n_layers, 2)), note


def _bnb_tensor_bits(method, recipe):
    """Bits of the tensors bitsandbytes updates: the adapters' own format for LoRA, else the weights'."""
    return method.adapter_bits(recipe) if isinstance(method, (LoRA, Adapters)) else recipe.weight_bits


def _bnb_update_bytes(n, bits, opt):
    """Temporaries of bitsandbytes' CPU update of one tensor of n values (see _bnb_transient)."""
    return n * ((20 if n >= opt.min_8bit_size else 12) + (4 if bits < 32 else 0))


def _bnb_state_bytes(n, opt):
    """bitsandbytes' states of one tensor: 2 x (n uint8 + one fp32 absmax per 256), or 2 x fp32 when small."""
    if n < opt.min_8bit_size:
        return 8 * n
    return 2 * n + 2 * 4 * -(-n // opt.block_size)


def _bnb_maps(shape, method, recipe, opt):
    """bitsandbytes' two quantization maps when any trainable tensor keeps 8-bit states, else 0."""
    bits = _bnb_tensor_bits(method, recipe)

    def maps(blocks):
        return BNB_QMAP_BYTES * any(size * 8 // bits >= opt.min_8bit_size
                                    for size in _trainable_tensor_bytes(shape, method, recipe, int(blocks)))

    if isinstance(method, Freeze):
        k = method.layers_trained(shape)
        return np.vectorize(maps, otypes=[np.int64])(k) if is_ndarray(k) else maps(k)
    return maps(shape.n_layers)


def _bnb_first_step(shape, method, recipe, opt):
    """The first step's highest (states made so far + one tensor's update temporaries), tensors in order."""
    bits = _bnb_tensor_bits(method, recipe)

    def highest(blocks):
        sizes = [size * 8 // bits for size in _trainable_tensor_bytes(shape, method, recipe, int(blocks))]
        made, best = BNB_QMAP_BYTES * any(n >= opt.min_8bit_size for n in sizes), 0
        for n in sizes:
            made += _bnb_state_bytes(n, opt)
            best = max(best, made + _bnb_update_bytes(n, bits, opt))
        return best

    if isinstance(method, Freeze):
        k = method.layers_trained(shape)
        if is_ndarray(k):
            return np.vectorize(highest, otypes=[np.int64])(k)
        return highest(k)
    return highest(shape.n_layers)


def _bnb_transient(shape, method, recipe, opt, device):
    """bitsandbytes' 8-bit Adam: the temporaries of its update of the largest tensor.

    On the CPU (bitsandbytes 0.50 backends/cpu/ops.py, one tensor at a time, all freed on return):
    an 8-bit tensor of n values dequantizes both states to fp32 (8n), copies the gradient (4n) and
    a 16-bit parameter (4n) to fp32, and builds denom from two fp32 temporaries (8n): 20n bytes for
    fp32 weights, 24n for 16-bit ones; a tensor under min_8bit_size takes the 32-bit update, 12n or
    16n (measured by profiling one step on single tensors: 20.0n, 24.0n, 12.0n, 16.0n). On CUDA
    the update is one fused kernel with no temporaries (bitsandbytes' CUDA ops; not measured here).
    """
    if device == "cuda":
        return 0, Note("optimizer_temporaries_assumed",
                       "bitsandbytes' fused 8-bit update on CUDA assumed to allocate no temporaries (not measured)")
    bits = _bnb_tensor_bits(method, recipe)

    def largest(blocks):
        return max((_bnb_update_bytes(size * 8 // bits, bits, opt)
                    for size in _trainable_tensor_bytes(shape, method, recipe, blocks)), default=0)

    if isinstance(method, Freeze):
        k = method.layers_trained(shape)
        if shape.mixed:  # blocks of several layouts: the largest tensor may be in any of them
            return (np.vectorize(lambda b: largest(int(b)), otypes=[np.int64])(k) if is_ndarray(k)
                    else largest(int(k))), None
        if is_ndarray(k):
            return np.array([largest(0), largest(1)])[np.minimum(k, 1)], None
        return largest(min(int(k), 1)), None
    return largest(shape.n_layers if shape.mixed else min(shape.n_layers, 1)), None
