"""The planner: will a finetune fit on a GPU, and which changes would make it fit.

`suggest_changes` tries one change at a time to a training run (a Run) and ranks the changes by
the bytes each saves per GPU; `path_to_fit` chains them until the run fits; `plan_training` gives
the verdict and the changes together (the command line and lesson 8 print it). All decide on
`requirement`: the steady-state peak of a step (peak_memory) where memmath models it, else the
sum of the parts that training_memory counts, with the card's CUDA context reserved (GPU.cuda_context_bytes)
and FIT_MARGIN of the requirement left free. Where the requirement is only a floor (a model type whose activations
are not checked against PyTorch: memmath/decision.py), the verdict is "does not fit" or refused, no change is judged,
and every search (the changes, the fewest GPUs, the largest batch, the longest sequence, the layout) raises
VerdictRefused rather than search on unchecked numbers.
`config_from_text` reads a pasted config.json strictly as JSON text.
"""

from __future__ import annotations

import functools
import math

from dataclasses import field

from . import validate
from .gpus import CUDA_CONTEXT_BYTES, FIT_MARGIN, check_fit, default_reserve, get_gpu, recipe_warning
from .methods import LoRA, QLoRA
from .config_reader import from_hf_config, parse_json_config
from .models import ModelShape
from .recipes import bytes_per_parameter, get_recipe
from .decision import BASES, Requirement, VerdictRefused, refuse_search, requirement  # noqa: F401 (searches raise it)
from .layout import Layout, bubble, is_parallel, layout
from .parallel import ParallelMemory, parallel_memory, rank_parts, worst_rank
from .preference import rewrapper
from .run import MAX_GRAD_ACCUM, Run, as_run, sdpa_supported
from .search import fewest_where, largest_where
from .report import training_text
from .sources import resolve_model
from .units import UNITS, unit_name
from .verdict import Verdict, verdict_of_fit
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd


SUGGESTED_RANK = 8  # LoRA's rank in Hu et al. 2021's GPT-3 runs was 1-8; 8 is peft's default
SUGGESTED_TARGETS = ("q", "v")  # Hu et al. 2021, section 7.1: adapting W_q and W_v works best for a budget
MAX_GPUS = 1024
DEFAULT_MAX_GPUS = 64  # how many GPUs the changes may use unless told: eight nodes of eight (DGX/HGX)


@frozen
class Suggestion:
    """One change to a training run: what it is, the new run, and what one GPU must hold after it.

    total: the new run's requirement per GPU (requirement(): the step's peak where modelled, else
    the sum of the parts; `basis` says which); saved: bytes per GPU it saves against the run before,
    on one basis (the sums, where the change moves the decision from the peak to the sum);
    fits: whether the new run fits the GPU as the verdict judges; cost: what it costs besides memory.
    """

    change: str
    run: Run = field(compare=False)
    total: int
    saved: int
    fits: bool
    cost: str = ""
    basis: str = "peak"
    host_bytes: int = 0  # host RAM one GPU's process needs for what the new run offloads (memmath/offload.py)

    def __post_init__(self):
        validate.text_field("change", self.change)
        object.__setattr__(self, "total", validate.nbytes("total", self.total))
        object.__setattr__(self, "saved", validate.nbytes("saved", self.saved))
        if not isinstance(self.run, Run):
            raise TypeError(f"run must be a Run; got {validate.describe(self.run)}")
        object.__setattr__(self, "fits", validate.flag("fits", self.fits))
        validate.text_field("cost", self.cost)
        object.__setattr__(self, "basis", validate.choice("basis", self.basis, BASES))  # stored as checked
        object.__setattr__(self, "host_bytes", validate.nbytes("host_bytes", self.host_bytes))

    @property
    def settings(self) -> dict:
        """The new run's settings (Run's keyword arguments, every one concrete)."""
        return self.run.settings()


def step_peak(model, **settings) -> tuple[int, str]:
    """(bytes per GPU the run needs at once, "peak" or "sum of parts"): requirement()'s number and basis."""
    need = requirement(model, **settings)
    return need.bytes, need.basis


def _fits(need_bytes, gpu, reserved_bytes) -> bool:
    return check_fit(need_bytes, gpu, reserved_bytes=reserved_bytes, margin=FIT_MARGIN).fits


def _checked(gpu, reserved_bytes, max_gpus):
    """The GPU and the planner's limits, checked (a ValueError names the field)."""
    gpu = get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", default_reserve(gpu, reserved_bytes), low=0,
                                    high=gpu.memory_bytes - 1, scalar=True)
    max_gpus = validate.count("max_gpus", max_gpus, high=MAX_GPUS, scalar=True)
    return gpu, reserved_bytes, max_gpus


def _fits_run(gpu, reserved_bytes):
    def fits(run: Run) -> bool:
        return _fits(requirement(run).bytes, gpu, reserved_bytes)
    return fits


PURE_BF16 = "bf16"


def _keeps_more_than_pure_bf16(precision) -> bool:
    """True when a recipe (a name or a Recipe) keeps more bytes per parameter than pure bf16 does."""
    per_param = bytes_per_parameter(get_recipe(precision), "adam")["total"]
    return per_param > bytes_per_parameter(PURE_BF16, "adam")["total"]


# path_to_fit's tiers (_tier): a change that keeps the GPUs, the batch and the host's share; a smaller batch; more in
# host RAM; more GPUs. Candidates are made tier by tier, so a path step stops at the lowest tier with a fit.
KEEP, SMALLER_BATCH, HOST, MORE_GPUS = TIERS = (0, 1, 2, 3)


def _candidates(run: Run, gpu, reserved_bytes, max_gpus, tiers=TIERS):
    """(change, new run, cost) for every change of the given tiers that applies to this run."""
    if is_parallel(run):  # a model split across GPUs (memmath/parallel.py): the changes that keep its layout
        yield from _parallel_candidates(run, gpu, reserved_bytes, max_gpus, tiers)
        return
    method, fits = run.method, _fits_run(gpu, reserved_bytes)
    method, rewrap = rewrapper(method)  # preference training: the changes are its policy's, the reference kept
    if KEEP in tiers:
        yield from _keeping_candidates(run, gpu, method, rewrap)
    if SMALLER_BATCH in tiers and run.batch_size > 1 and run.seq_len is not None:
        # A smaller micro-batch accumulated to the same effective batch (batch_size x grad_accum_steps): the largest
        # divisor of the batch that fits, else 1, judged by its own peak (a later micro-batch holds the gradients).
        sizes = [d for d in _divisors(run.batch_size) if d < run.batch_size
                 and run.grad_accum_steps * (run.batch_size // d) <= MAX_GRAD_ACCUM]
        best = largest_where(lambda i: fits(_accumulated(run, sizes[i])), 0, len(sizes) - 1) or 0
        new = _accumulated(run, sizes[best])
        yield (f"batch size {new.batch_size}, accumulate {new.grad_accum_steps}", new,
               f"{new.grad_accum_steps} forward and backward passes per optimizer step for the same effective batch "
               f"of {run.effective_batch}: slower steps")
    if HOST in tiers:
        yield from _offload_candidates(run)
    if KEEP in tiers and run.n_gpus > 1 and run.zero_stage < 3 and run.sharding == "even":
        staged = [run.replace(zero_stage=k) for k in range(run.zero_stage + 1, 4)]
        new = next((r for r in staged if fits(r)), staged[-1])  # the lowest stage that fits, else 3
        yield (f"ZeRO stage {new.zero_stage} on the {run.n_gpus} GPUs", new,
               "shards states, gradients and weights across GPUs: more communication per step")
    if MORE_GPUS in tiers and run.n_gpus < max_gpus and run.sharding == "even":
        # The fewest GPUs, any whole number above the current count up to max_gpus, that fit; else max_gpus.
        stage = max(run.zero_stage, 3)
        fewest = fewest_where(lambda n: fits(run.replace(n_gpus=n, zero_stage=stage)), run.n_gpus + 1, max_gpus)
        new = run.replace(n_gpus=fewest or max_gpus, zero_stage=stage)
        yield (f"{new.n_gpus} GPUs with ZeRO stage {stage}", new,
               "more cards; ZeRO shards everything but activations, which every GPU keeps for its own batch")


def _activation_candidates(run: Run):
    """Checkpointing and fused attention: fewer activations kept, the same GPUs and batch."""
    if run.seq_len is not None and not run.checkpointing:
        yield ("gradient checkpointing on", run.replace(checkpointing=True),
               "recomputes each block's forward pass during backward: about a third more compute")
    if run.seq_len is not None and run.attention == "eager" and sdpa_supported(run.model):
        yield ("fused attention (sdpa)", run.replace(attention="sdpa"),
               "no extra compute: the same attention in a fused kernel (PyTorch SDPA, FlashAttention)")


def _optimizer_candidates(run: Run):
    """8-bit Adam in place of a 32-bit Adam."""
    if run.optimizer in ("adam", "adamw"):
        yield ("8-bit Adam", run.replace(optimizer="adam8bit"),
               "block-wise 8-bit states; matched 32-bit Adam in Dettmers et al. 2022's benchmarks")


def _keeping_candidates(run: Run, gpu, method, rewrap):
    """The changes that keep the GPUs, the batch and the host's share: checkpointing, fused attention, LoRA or QLoRA,
    8-bit Adam, a pure bf16 recipe."""
    yield from _activation_candidates(run)
    lora = None if isinstance(method, (LoRA, QLoRA)) else _changed(
        run, method=rewrap(LoRA(rank=SUGGESTED_RANK, targets=SUGGESTED_TARGETS)))
    if lora is not None:  # a model given by its parameter count has no matrices to adapt
        yield (f"LoRA rank {SUGGESTED_RANK} on {', '.join(SUGGESTED_TARGETS)}", lora,
               "trains far fewer parameters; quality close to full finetuning on many tasks (Hu et al. 2021)")
    if not isinstance(method, QLoRA):
        rank = method.rank if isinstance(method, LoRA) else SUGGESTED_RANK
        targets = method.targets if isinstance(method, LoRA) else SUGGESTED_TARGETS
        # From LoRA: the same adapters (rank, targets, dropout, format, vision tower) on a 4-bit base.
        kept = dict(dropout=method.dropout, adapter_format=method.adapter_format, vision=method.vision) \
            if isinstance(method, LoRA) else {}
        qlora = _changed(run, method=rewrap(QLoRA(rank=rank, targets=targets, **kept)))
        if qlora is not None:
            yield (f"QLoRA rank {rank} on {', '.join(targets)}", qlora,
                   "4-bit NF4 base: weights are dequantized on the fly, so steps are slower (Dettmers et al. 2023)")
    yield from _optimizer_candidates(run)
    # a T4 or V100 cannot run it; DeepSpeed's ZeRO-Offload keeps its fp32 master copy (memmath/offload.py)
    if _keeps_more_than_pure_bf16(run.precision) and gpu.computes_bf16 is not False and "optimizer" not in run.offload:
        yield ("pure bf16 recipe", run.replace(precision=PURE_BF16),
               "no fp32 master copy: small updates can round away; watch the loss (or use Kahan summation)")


def _changed(run: Run, **changes) -> Run | None:
    """The run with `changes`, or None where memmath refuses the result by name (LoRA on a model given only by its
    parameter count, an offload the engine does not have: memmath/offload.py)."""
    try:
        return run.replace(**changes)
    except validate.FieldError:
        return None


def _offloaded(run: Run, *parts: str, **changes) -> Run | None:
    """The run with `parts` in host memory too, or None where one is already there or memmath refuses it."""
    if all(part in run.offload for part in parts):
        return None
    return _changed(run, offload=(*run.offload, *(p for p in parts if p not in run.offload)), **changes)


def _offload_candidates(run: Run):
    """Parts of the step moved to host memory, each with its engine's cost (host RAM: Suggestion.host_bytes)."""
    if run.sharding == "even":  # DeepSpeed: ZeRO-Offload runs from stage 2 on one GPU (Ren et al. 2021)
        new = _offloaded(run, "optimizer", zero_stage=max(run.zero_stage, 2))
        if new is not None:
            yield ("ZeRO-Offload: optimizer in host RAM", new,
                   f"DeepSpeed at ZeRO stage {new.zero_stage}: the CPU runs the optimizer step on fp32 master weights; "
                   "gradients and weights cross PCIe every step: slower steps")
        # ZeRO-Infinity: the 16-bit weights too, at stage 3 (one GPU included: Rajbhandari et al. 2021)
        new = _offloaded(run, "optimizer", "params", zero_stage=3)
        if new is not None:
            yield ("ZeRO-Infinity: optimizer and weights in host RAM", new,
                   "DeepSpeed at ZeRO stage 3 with offload_param: the CPU runs the optimizer step and each layer's "
                   "weights are gathered from host memory as it runs: slower steps")
    if run.sharding == "fsdp2" and run.zero_stage == 3:
        new = _offloaded(run, "params")
        if new is not None:
            yield ("FSDP2 CPU offload: shards in host RAM", new,
                   "CPUOffloadPolicy keeps parameters, gradients and optimizer states on the CPU, which runs the "
                   "optimizer step; they cross PCIe every step: slower steps")
    if run.seq_len is not None:
        new = _offloaded(run, "activations")
        if new is not None:
            yield ("activations in host RAM (save_on_cpu)", new,
                   "every tensor saved for backward crosses PCIe twice: slower steps where the copies are not hidden")


def _parallel_candidates(run: Run, gpu, reserved_bytes, max_gpus, tiers=TIERS):
    """The changes to a tensor/pipeline parallel run that keep its degrees: checkpointing, fused attention,
    8-bit Adam, ZeRO on the data axis, and more data-parallel copies with ZeRO stage 3."""
    fits = _fits_run(gpu, reserved_bytes)
    if KEEP in tiers:
        yield from _parallel_keeping(run, fits)
    split = run.tp * run.pp * run.cp
    counts = []
    if MORE_GPUS in tiers and run.n_gpus + split <= max_gpus:
        # expert parallelism must divide the data x context ranks: only such counts are tried
        counts = [n for n in range(run.n_gpus + split, max_gpus + 1, split) if (n // split * run.cp) % run.ep == 0]
    if counts:
        stage = max(run.zero_stage, 3)
        index = fewest_where(lambda i: fits(run.replace(n_gpus=counts[i], zero_stage=stage)), 0, len(counts) - 1)
        new = run.replace(n_gpus=counts[len(counts) - 1 if index is None else index], zero_stage=stage)
        yield (f"{new.n_gpus} GPUs ({layout(new).dp} data-parallel copies) with ZeRO stage {stage}", new,
               "more cards on the data axis; ZeRO shards the states of each tensor/pipeline share")


def _parallel_keeping(run: Run, fits):
    """A split run's changes that keep its GPUs: checkpointing, fused attention, 8-bit Adam, ZeRO on the data axis."""
    yield from _activation_candidates(run)
    yield from _optimizer_candidates(run)
    if layout(run).dp > 1 and run.zero_stage < 3:
        staged = [run.replace(zero_stage=k) for k in range(run.zero_stage + 1, 4)]
        new = next((r for r in staged if fits(r)), staged[-1])
        yield (f"ZeRO stage {new.zero_stage} on the {layout(run).dp} data-parallel copies", new,
               "shards states, gradients and weights across the data axis: more communication per step")


# ---- the layout planner: the fewest GPUs, and their degrees, that fit a run ----------------------------
TRADE_OFFS = {
    "dp": "data parallelism copies the model: it adds GPUs for speed, not room (ZeRO shards the copies' states)",
    "tp": "tensor parallelism all-reduces every block's activations: it wants NVLink inside a node (tp <= 8)",
    "pp": "pipeline parallelism idles (pp - 1) / (m + pp - 1) of the step (the bubble) and passes activations between "
          "stages",
}


@frozen
class LayoutPlan:
    """The fewest GPUs (and their layout) that fit a run on a card, or None when nothing up to max_gpus fits."""

    run: object  # the run with the layout's degrees, or None
    layout: Layout | None
    worst: ParallelMemory | None  # the rank the requirement judges: its parts and buffers
    usable_bytes: int
    gpu: str
    tried: int
    trade_offs: tuple
    need: object = None  # the layout's Requirement (requirement(run)): what the card was judged against

    @property
    def fits(self) -> bool:
        return self.layout is not None


def _divisors_up_to(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def fewest_gpus_layout(model, gpu, *, max_gpus: int = 1024, max_tp: int = 8, reserved_bytes=None,
                       **settings) -> LayoutPlan:
    """The fewest GPUs, and the layout (data x tensor x pipeline), whose worst rank fits `gpu`.

    Tries n = 1, 2, ... up to max_gpus (powers of two and their multiples of 3, as clusters are built), and for
    each every tp (a divisor of the heads, at most max_tp: one node) and pp (a divisor of the blocks) with
    dp = n / (tp pp); ZeRO stays as the run has it, on the dp axis. Among the layouts of the fewest GPUs it
    takes the first that fits in the order of preference: the least pipeline (no bubble), then the least tensor
    parallelism. A layout fits when its
    requirement (requirement(): the peak of the rank whose peak is highest where memmath models it, else the
    worst rank's sum of parts plus buffers) fits the card as check_fit judges (the CUDA context reserved,
    FIT_MARGIN left free). micro_batches: the run's, or pp when the run has 1 (the fewest that fill 1F1B), and
    when that does not fit, each half of it down to 1 (fewer in flight, a larger bubble); a layout without a
    pipeline runs the run's micro-batches as gradient accumulation steps.
    """
    run = as_run(model, **settings)
    card = get_gpu(gpu)
    reserved = default_reserve(card, reserved_bytes)
    max_gpus = validate.count("max_gpus", max_gpus, high=validate.MAX_GPUS, scalar=True)
    max_tp = validate.count("max_tp", max_tp, high=validate.MAX_GPUS, scalar=True)
    if run.is_sweep:
        raise validate.FieldError(run.swept, f"{run.swept} must be a single value: the planner lays out one run")
    refuse_search(run, "plan_layout")
    shape = run.model
    heads = _divisors_up_to(shape.n_heads, max_tp) if shape.n_heads else [1]
    kv = shape.n_kv_heads or shape.n_heads or 1
    sizes = sorted({n for k in range(0, 21) for n in (2 ** k, 3 * 2 ** k) if n <= max_gpus})
    tried = 0
    for n in sizes:
        fits = []
        # in the order of preference (the least pipeline, then the least tensor parallelism): the first that fits
        for pp, tp in sorted((pp, tp) for pp in _divisors_up_to(shape.n_layers, n) for tp in heads):
            if n % (tp * pp) or kv % tp:
                continue
            first = 1 if pp == 1 else run.micro_batches if run.micro_batches > 1 else pp
            # The micro-batch counts that fit are tried too, the most first (the smallest bubble): fewer micro-batches
            # keep fewer in flight on the first stage (1F1B holds min(m, p) of them: Narayanan et al. 2021).
            for m in sorted({first} | {first >> k for k in range(first.bit_length())} - {0}, reverse=True):
                try:
                    # without a pipeline there is no schedule: a pipeline's micro-batches become gradient
                    # accumulation steps (the same effective batch), and an interleaved schedule plain 1F1B
                    plain = dict(pp_schedule="1f1b", virtual_stages=1, micro_batches=1,
                                 grad_accum_steps=run.grad_accum_steps * run.micro_batches) if pp == 1 else {}
                    candidate = run.replace(**{"micro_batches": m, **plain}, n_gpus=n, tp=tp, pp=pp, cp=1, ep=1,
                                            rank=0, sequence_parallel=run.sequence_parallel and tp > 1)
                except validate.FieldError:
                    continue
                tried += 1
                # A cheap bound first: rank 0's weights, gradients and optimizer states are alive together at its
                # optimizer step, so no requirement of this layout is below them (peak or sum of parts alike).
                static = rank_parts(candidate, 0)
                floor = sum(int(static[k]) for k in ("weights", "gradients", "gradient_accumulation",
                                                     "master_weights", "optimizer_states"))
                if not check_fit(floor, card, reserved_bytes=reserved, margin=FIT_MARGIN).fits:
                    break  # the floor does not depend on the micro-batches: no count fits this layout
                need = requirement(candidate)
                if check_fit(need.bytes, card, reserved_bytes=reserved, margin=FIT_MARGIN).fits:
                    fits.append((pp, tp, candidate, need))
                    break
            if fits:
                break
        if fits:
            pp, tp, candidate, need = fits[0]
            if not is_parallel(candidate):
                worst = parallel_memory(candidate)
            elif need.basis == "peak":  # the rank whose peak is the requirement
                worst = parallel_memory(candidate.replace(rank=need.memory.run.rank))
            else:
                worst = worst_rank(candidate)
            return LayoutPlan(run=candidate, layout=layout(candidate), worst=worst,
                              usable_bytes=int(card.memory_bytes) - reserved, gpu=card.name, tried=tried,
                              trade_offs=_trade_offs(layout(candidate), candidate), need=need)
    return LayoutPlan(run=None, layout=None, worst=None, usable_bytes=int(card.memory_bytes) - reserved,
                      gpu=card.name, tried=tried, trade_offs=())


def _trade_offs(lay: Layout, run) -> tuple:
    lines = []
    for axis in ("dp", "tp", "pp"):
        degree = getattr(lay, axis)
        text = TRADE_OFFS[axis]
        if axis == "pp" and degree > 1:
            text += (f": here {bubble(run.pp_schedule, degree, run.micro_batches, run.virtual_stages):.0%} with "
                     f"m = {run.micro_batches}")
        lines.append(f"{axis} = {degree}: {text}")
    return tuple(lines)


def plan_layout(model, gpu, *, reserved_bytes=None, max_gpus=MAX_GPUS, max_tp=8, **settings):
    """The fewest GPUs and the layout (data x tensor x pipeline) that fit this run on this card, with the
    trade-off of each axis in one line: fewest_gpus_layout above (a LayoutPlan)."""
    return fewest_gpus_layout(model, gpu, max_gpus=max_gpus, max_tp=max_tp, reserved_bytes=reserved_bytes, **settings)


def _divisors(n: int) -> list[int]:
    """Every whole number that divides n, smallest first."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _accumulated(run: Run, micro: int) -> Run:
    """The run with micro-batches of `micro` sequences (a divisor of its batch), accumulated to the same effective
    batch."""
    return run.replace(batch_size=micro, grad_accum_steps=run.grad_accum_steps * (run.batch_size // micro))


def suggest_changes(model, gpu, *, reserved_bytes=None, max_gpus=DEFAULT_MAX_GPUS, **settings) -> list[Suggestion]:
    """Single changes that lower a training run's memory per GPU, the largest saving first.

    model: a Run, or a model with Run's keyword settings. Memory is requirement()'s (the
    steady-state peak where modelled); a change fits when it leaves FIT_MARGIN (5%) of its
    requirement free after reserved_bytes (the CUDA context by default). Each candidate changes
    one thing: checkpointing on, fused attention, a smaller micro-batch accumulated to the same
    effective batch (batch_size x grad_accum_steps: the largest divisor of the batch that fits, else 1),
    LoRA or QLoRA (rank 8 on q, v unless LoRA is already set), 8-bit Adam, a pure bf16 recipe, a part
    moved to host RAM (the optimizer with DeepSpeed ZeRO-Offload, the weights with ZeRO-Infinity or
    FSDP2's CPUOffloadPolicy, the saved activations with save_on_cpu; host_bytes is the host RAM), a
    higher ZeRO stage on the same GPUs (the lowest that fits, else 3), or more GPUs with ZeRO stage
    3 (the fewest, any whole number up to max_gpus, that fit; else max_gpus). Only changes that save
    bytes are returned.
    """
    run = as_run(model, **settings)
    gpu, reserved_bytes, max_gpus = _checked(gpu, reserved_bytes, max_gpus)
    return _suggestions(run, gpu, reserved_bytes, max_gpus, TIERS)


def _suggestions(run: Run, gpu, reserved_bytes, max_gpus, tiers) -> list[Suggestion]:
    """suggest_changes of the candidates of `tiers`, their arguments checked."""
    refuse_search(run, "suggest_changes")
    before = requirement(run)
    suggestions = []
    for change, new, cost in _candidates(run, gpu, reserved_bytes, max_gpus, tiers):
        try:
            need = requirement(new)
        except ValueError:  # e.g. LoRA on a model without named matrices
            continue
        if need.refused:  # a floor judges nothing (Llama 4 with checkpointing): not a change that could be said to fit
            continue
        # A saving is counted on one basis: where the change moves the decision from the peak to the sum, the sums
        # are compared, so the switch itself is never credited as a saving. A bound above the peak it replaces
        # (ZeRO, whose peak is not modelled) saves at least the difference: that is the saving counted.
        comparable = need.basis == before.basis or (before.basis, need.basis) == ("peak", "upper bound")
        saved = before.bytes - need.bytes if comparable else int(before.memory.total) - int(need.memory.total)
        if saved > 0 and need.bytes < before.bytes:
            host = need.memory.host
            suggestions.append(Suggestion(change, new, need.bytes, saved, _fits(need.bytes, gpu, reserved_bytes),
                                          cost, need.basis, 0 if host is None else int(host.total)))
    return sorted(suggestions, key=lambda s: (-s.saved, s.change))


PATH_STEPS = 8  # path_to_fit's default: more changes than the candidates' kinds a run can take in a row


def path_to_fit(model, gpu, *, reserved_bytes=None, max_gpus=DEFAULT_MAX_GPUS, max_steps=PATH_STEPS,
                **settings) -> list[Suggestion]:
    """Changes applied one after another until the run fits. Changes come in tiers: those that keep
    the GPUs and the batch, then a smaller batch, then offloading to host RAM, then more GPUs (up to
    max_gpus). When some change
    makes the run fit, the smallest such change of the lowest tier that has one; otherwise the
    largest saving of the lowest tier, and again from there.

    Each Suggestion's total and saved are after that step (saved relative to the step before).
    Fitting, memory and the reserve are as in suggest_changes. Empty when the run already fits; the
    last step's fits is False when no chain of changes fits.
    """
    run = as_run(model, **settings)
    gpu, reserved_bytes, max_gpus = _checked(gpu, reserved_bytes, max_gpus)
    max_steps = validate.count("max_steps", max_steps, high=32, scalar=True)
    return _path(run, gpu, reserved_bytes, max_gpus, max_steps)


def _path(run: Run, gpu, reserved_bytes, max_gpus, max_steps, first=None) -> list[Suggestion]:
    """path_to_fit of checked arguments; first: the run's own suggest_changes, where the caller has them."""
    refuse_search(run, "path_to_fit")
    steps: list[Suggestion] = []
    if _fits(requirement(run).bytes, gpu, reserved_bytes):
        return steps
    current = run
    for _ in range(max_steps):
        pick = _next_step(current, gpu, reserved_bytes, max_gpus, first if current is run else None)
        if pick is None:
            break
        steps.append(pick)
        current = pick.run
        if pick.fits:
            break
    return steps


def _next_step(run: Run, gpu, reserved_bytes, max_gpus, options=None) -> Suggestion | None:
    """One step of the path. Changes in tiers: those that keep the hardware and the batch, then a smaller batch
    (gradient accumulation keeps the effective batch), then parts moved to host RAM (slower steps, host memory), then
    more GPUs (more hardware). The lowest tier with a change that fits gives its smallest such change; when none
    fits, the lowest tier its largest saving. Without `options` each tier's candidates are made only when every
    tier below has no change that fits."""
    tiers = []
    for tier in TIERS:
        found = ([s for s in options if _tier(s.run, run) == tier] if options is not None
                 else _suggestions(run, gpu, reserved_bytes, max_gpus, (tier,)))
        fitting = [s for s in found if s.fits]
        if fitting:
            return fitting[-1]
        tiers.append(found)
    return next((found[0] for found in tiers if found), None)


def _tier(new: Run, old: Run) -> int:
    """The tier (TIERS) of the change from old to new."""
    if new.n_gpus > old.n_gpus:
        return MORE_GPUS
    if len(new.offload) > len(old.offload):
        return HOST
    return SMALLER_BATCH if new.batch_size < old.batch_size else KEEP


@frozen
class RecipeInstead:
    """The run a card that cannot compute the plan's recipe would train instead (TrainingPlan.cannot_run.instead:
    fp16 mixed precision for pure bf16 on a T4 or V100), its requirement and its verdict, judged as the plan's own
    (the same card, reserve and FIT_MARGIN)."""

    precision: str
    requirement: Requirement
    fit: object

    @property
    def fits(self) -> bool | None:
        """The verdict's fits: None where the requirement is a floor that passes (memmath/verdict.py)."""
        return verdict_of_fit(self.fit, FIT_MARGIN, self.requirement.reason if self.requirement.refused else "",
                              self.requirement.left_out or "its activations").fits


@frozen
class TrainingPlan:
    """Everything the planner says about one run on one card: the parts, what the card must hold, the
    verdict, and the changes; what the command line prints and lesson 8 shows.

    requirement: the one decision (the peak where modelled, else the sum with the reason); fit:
    the verdict (None without a GPU), judged with reserved_bytes kept back and FIT_MARGIN of the
    requirement free; changes: single changes, largest saving first, and path: path_to_fit's chain
    (its one step when a single change fits), both only when the run does not fit; cannot_run: a RecipeWarning when the GPU
    cannot compute the recipe's format (pure bf16 on a T4), else None.
    """

    run: Run
    requirement: Requirement
    gpu: object = None
    reserved_bytes: int = CUDA_CONTEXT_BYTES
    fit: object = None
    changes: tuple = ()
    path: tuple = ()
    cannot_run: object = None

    @property
    def memory(self):
        return self.requirement.memory

    @property
    def verdict(self) -> Verdict | None:
        """The one verdict (memmath/verdict.py) of the requirement on the card; None without a GPU. A floor (a model
        type whose activations are not checked against PyTorch) is "does not fit" or refused, never "fits"."""
        if self.fit is None:
            return None
        return verdict_of_fit(self.fit, FIT_MARGIN, self.requirement.reason if self.requirement.refused else "",
                              self.requirement.left_out or "its activations")

    @property
    def fits(self) -> bool | None:
        """True or False with a GPU; None without one, or where the verdict is refused (requirement.refused)."""
        return None if self.fit is None else self.verdict.fits

    @property
    def needed_bytes(self) -> int:
        """The requirement plus the CUDA context kept back: what the card must have."""
        return self.requirement.bytes + self.reserved_bytes

    def __str__(self) -> str:  # what `memmath train` prints
        return training_text(self)

    def _repr_markdown_(self) -> str:  # a notebook shows the same text
        return "```text\n" + training_text(self) + "```"

    @functools.cached_property
    def recipe_instead(self) -> RecipeInstead | None:
        """Where the card cannot compute the run's recipe (cannot_run), the run it would train instead and that run's
        verdict; else None."""
        if self.cannot_run is None or self.fit is None:
            return None
        need = requirement(self.run.replace(precision=self.cannot_run.instead))
        fit = check_fit(need.bytes, self.gpu, reserved_bytes=self.reserved_bytes, margin=FIT_MARGIN)
        return RecipeInstead(self.cannot_run.instead, need, fit)


def plan_training(model, gpu=None, *, reserved_bytes=None, max_gpus=DEFAULT_MAX_GPUS, **settings) -> TrainingPlan:
    """The requirement of a run (a Run, or a model with Run's keyword settings), and with a GPU its
    verdict and the changes that make it fit (suggest_changes, then path_to_fit when none fits alone)."""
    run = as_run(model, **settings)
    need = requirement(run)
    if gpu is None:  # no verdict, but the reserve and the GPU count are still checked by name
        reserved_bytes = validate.count("reserved_bytes", default_reserve(None, reserved_bytes), low=0,
                                        high=validate.MAX_BYTES, scalar=True)
        validate.count("max_gpus", max_gpus, high=MAX_GPUS, scalar=True)
        return TrainingPlan(run, need, reserved_bytes=reserved_bytes)
    gpu, reserved_bytes, max_gpus = _checked(gpu, reserved_bytes, max_gpus)
    fit = check_fit(need.bytes, gpu, reserved_bytes=reserved_bytes, margin=FIT_MARGIN)
    changes = path = ()
    if not fit.fits and not need.refused:  # a floor judges no change: each would be judged on a floor too
        changes = tuple(_suggestions(run, gpu, reserved_bytes, max_gpus, TIERS))
        path = tuple(_path(run, gpu, reserved_bytes, max_gpus, PATH_STEPS, first=changes))
    return TrainingPlan(run, need, gpu, reserved_bytes, fit, changes, path, recipe_warning(run.precision, gpu))


def suggestions_frame(suggestions, unit: str = "GB") -> pd.DataFrame:
    """A table of suggestions: change, memory per GPU after it, memory saved, the host RAM per GPU where a change
    offloads, fits, cost (sizes in `unit`)."""
    import pandas as pd  # only here: `import memmath` stays numpy-only
    unit = unit_name(unit)
    message = "suggestions must be a list of the Suggestions that suggest_changes or path_to_fit return"
    if isinstance(suggestions, (str, bytes, dict)):
        raise TypeError(f"{message}; got {validate.describe(suggestions)}")
    try:
        suggestions = list(suggestions)
    except TypeError:
        raise TypeError(f"{message}; got {validate.describe(suggestions)}") from None
    for item in suggestions:
        if not isinstance(item, Suggestion):
            raise TypeError(f"suggestions must hold Suggestions (from suggest_changes or path_to_fit); "
                            f"got {validate.describe(item)}")
    host = [f"host RAM ({unit})"] if any(s.host_bytes for s in suggestions) else []  # where a change offloads
    rows = [{"change": s.change, f"per GPU after ({unit})": s.total / UNITS[unit],
             f"saved ({unit})": s.saved / UNITS[unit], f"host RAM ({unit})": s.host_bytes / UNITS[unit],
             "fits": "yes" if s.fits else "no", "cost": s.cost}
            for s in suggestions]
    columns = ["change", f"per GPU after ({unit})", f"saved ({unit})", *host, "fits", "cost"]
    return pd.DataFrame(rows, columns=columns)


def config_from_text(text) -> ModelShape:
    """A ModelShape from pasted config.json text, read only as JSON (never as a file path).

    Every problem is a ValueError with a message for the reader: empty text, text that is not a
    JSON object, a missing or malformed field, or an unsupported model_type.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("paste the contents of a transformers config.json (a JSON object that starts with '{')")
    config = parse_json_config(text, "the pasted config.json")
    try:
        return from_hf_config(config)
    except (TypeError, KeyError, IndexError, AttributeError) as error:
        raise ValueError(f"the pasted config.json could not be read: {error}") from None


# ---- direct answers: the fewest GPUs, the largest batch, the longest sequence that fit -------------
def _judge(model, gpu, reserved_bytes, settings, searched):
    """(the run, fits(n): does the run with `searched` = n fit as plan_training judges it?)."""
    run = as_run(model, **settings)
    gpu = get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", default_reserve(gpu, reserved_bytes), low=0,
                                    high=gpu.memory_bytes - 1, scalar=True)
    fits = _fits_run(gpu, reserved_bytes)
    return run, lambda n: fits(run.replace(**{searched: n}))


def fewest_gpus_that_fit(model, gpu, *, reserved_bytes=None, max_gpus=MAX_GPUS, **settings) -> int | None:
    """The fewest GPUs (any whole number from 1 to max_gpus; a multiple of tp x pp x cp when the run splits the
    model) on which the run fits per GPU, else None.

    The run's zero_stage is kept (n_gpus is what is searched). Without ZeRO every GPU holds a full
    copy, so more GPUs never help: 1 or None. ZeRO divides sharded parts by the GPU count (rounded
    up), so memory per GPU never grows with more GPUs and a bisection over the count is exact.
    """
    run, _ = _judge(model, gpu, reserved_bytes, settings, "n_gpus")
    refuse_search(run, "fewest_gpus_that_fit")
    fits = _fits_run(get_gpu(gpu), default_reserve(gpu, reserved_bytes))
    max_gpus = validate.count("max_gpus", max_gpus, high=validate.MAX_GPUS, scalar=True)

    def fits_at(n):  # rank 0 of n GPUs; an engine's sharding needs two or more, so one GPU is the plain run
        return fits(run.replace(n_gpus=n, rank=0, **({"sharding": "even"} if n == 1 else {})))

    split = run.tp * run.pp * run.cp  # a model split t x p x c ways: the GPU count is a multiple of that
    # expert parallelism spreads the experts over data x context ranks: ep must divide dp x cp, so the data-parallel
    # copies come in steps of ep / gcd(ep, cp)
    step = run.ep // math.gcd(run.ep, run.cp)
    if split * step == 1:
        return fewest_where(fits_at, 1, max_gpus)
    if max_gpus < split * step:
        return None
    copies = fewest_where(lambda k: fits_at(k * step * split), 1, max_gpus // (split * step))
    return None if copies is None else copies * step * split


def largest_batch_that_fits(model, gpu, *, reserved_bytes=None, max_batch=validate.MAX_BATCH,
                            **settings) -> int | None:
    """The largest batch size (sequences per GPU) at which the run fits, up to max_batch; None when
    even one sequence does not fit. Needs a sequence length (without it the batch changes nothing).

    Memory grows with the batch (activations scale with it, nothing else shrinks), so doubling and
    then bisecting over whole numbers finds the exact largest batch.
    """
    run, fits_at = _judge(model, gpu, reserved_bytes, settings, "batch_size")
    refuse_search(run, "largest_batch_that_fits")
    max_batch = validate.count("max_batch", max_batch, high=validate.MAX_BATCH, scalar=True)
    if run.seq_len is None:
        raise validate.FieldError("seq_len", "seq_len is needed to search the batch size: without it activations, "
                                  "the only part the batch changes, are not counted")
    return largest_where(fits_at, 1, max_batch, grow=True)


def longest_sequence_that_fits(model, gpu, *, reserved_bytes=None, max_seq_len=validate.MAX_SEQ,
                               **settings) -> int | None:
    """The longest sequence (tokens) at which the run fits, up to max_seq_len; None when even one
    token does not fit. This is the memory's answer only: a model reads well only up to the context
    it was trained on (see trained_context).

    Memory grows with the sequence length (activations, and eager attention's s x s scores), so
    doubling and then bisecting over whole numbers finds the exact longest sequence.
    """
    run, fits_at = _judge(model, gpu, reserved_bytes, settings, "seq_len")
    refuse_search(run if run.seq_len is not None else run.replace(seq_len=run.cp), "longest_sequence_that_fits")
    max_seq_len = validate.count("max_seq_len", max_seq_len, high=validate.MAX_SEQ, scalar=True)
    if run.cp == 1:
        return largest_where(fits_at, 1, max_seq_len, grow=True)
    # context parallelism keeps seq_len / cp tokens per rank: only multiples of cp run
    if max_seq_len < run.cp:
        return None
    chunks = largest_where(lambda k: fits_at(k * run.cp), 1, max_seq_len // run.cp, grow=True)
    return None if chunks is None else chunks * run.cp


# The context each LLaMA-style preset was trained on: max_position_embeddings in its config.json
# (meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf: 4096; meta-llama/Meta-Llama-3-8B, -70B: 8192;
# mistralai/Mistral-7B-v0.1: 32768) and LLaMA-1's 2,048 tokens (Touvron et al. 2023, section 2.3;
# huggyllama/llama-65b's config: 2048). GPT-2, GPT-3 and BERT carry theirs as max_positions.
TRAINED_CONTEXT = {"llama-65b": 2048, "llama-2-7b": 4096, "llama-2-13b": 4096, "llama-2-70b": 4096,
                   "llama-3-8b": 8192, "llama-3-70b": 8192, "mistral-7b": 32768}


def trained_context(model, config=None) -> int | None:
    """The longest context a model was trained on, or None when unknown: its learned positions
    (GPT-2, GPT-3, BERT), the max_position_embeddings of the config it was read from (or a pasted
    config dict), or the preset table above."""
    shape = resolve_model(model)
    if shape.max_positions is not None:
        return int(shape.max_positions)
    if shape.trained_context is not None:  # a rotary model read from its config.json
        return int(shape.trained_context)
    if isinstance(config, dict) and isinstance(config.get("max_position_embeddings"), int) \
            and not isinstance(config.get("max_position_embeddings"), bool) and config["max_position_embeddings"] > 0:
        return config["max_position_embeddings"]
    return TRAINED_CONTEXT.get(shape.name)
