"""What the card must hold for a run: the one decision the API, the command line, the planner and the lessons read.

The step's peak (peak_memory: the most allocated at one moment; sharded_peak for a rank of FSDP2,
ZeroRedundancyOptimizer or DistributedDataParallel) where memmath models it; else, for a sharded or split run, a safe
upper bound (memmath/bounds.py: the sum of the parts plus every transient at its largest); else the sum of the parts
(training_memory: every part as if alive at once), with the reason in words.

A model type with no activation trace (its record's traced=False) gets its activations from the textbook model
(Korthikanti et al. 2022), which is not checked against PyTorch for it: no number built on them is a safe requirement,
so the decision is a floor instead, what the step holds without its activations (weights, gradients, optimizer
states: all alive at the optimizer step). A card that cannot hold even the floor does not fit; on any other card the
verdict is refused by name (fits is None), with what would give the activations (`memmath train CONFIG --traced`,
`memmath measure CONFIG`).
"""

from __future__ import annotations

import functools
from dataclasses import fields, replace

from . import validate
from .bounds import applies, describe as describe_bound, upper_bound
from .memory import training_memory
from .notes import Note
from .parallel import is_parallel, parallel_memory, peak_estimate, peak_why_not, worst_rank, worst_rank_peak
from .multimodal import TOWER_LABELS
from .peak import PeakEstimate, forward_start, peak_memory, why_no_peak
from .recipes import update_temporaries
from .run import Run, as_run, why_not_exact
from .sharded_peak import is_ddp, sharded_peak, why_no_sharded_peak
from .methods import Full
from .vision_forward import (INT64, MODELLED_TOWERS, TOWER_COUNTED, batch_extras, images_known,
                             modelled, pixtral_unmeasured, projector_tensors, tower_forward, tower_tensors,
                             worst_images)
from .values import frozen

BASES = ("peak", "upper bound", "sum of parts", "floor")
BASIS_WORDS = {"peak": "the step's peak", "upper bound": "an upper bound on the step's peak",
               "sum of parts": "the sum of the parts", "floor": "a floor under the step's peak"}
BASIS_SHORT = {"peak": "peak", "upper bound": "bound", "sum of parts": "sum", "floor": "floor"}
# The parts alive together at the optimizer step, whatever the activations: a floor no moment of a step goes below
# (the layout planner's cheap bound too). Quantization constants live beside the weights they scale.
FLOOR_PARTS = ("weights", "quantization_constants", "gradients", "gradient_accumulation", "master_weights",
               "optimizer_states")
UNCHECKED_FIX = ("memmath train MODEL --traced (PyTorch steps the model under fake tensors; needs memmath[torch]) "
                 "gives its activations, or memmath measure MODEL measures the step")
# A traced type whose run the exact model does not replay (Houlsby adapters where no block places them, AMP on the
# CPU's math kernel, ...): the choices it does replay, or the textbook model's own answer asked for by name.
FALLBACK_FIX = ("a method, precision and attention the exact activation model traces give the step's peak; "
                "memmath train MODEL --traced gives PyTorch's trace of this step, or memmath measure MODEL measures it")
# A run that asked for the textbook model by name: its formula counts what the blocks keep, not the step's peak.
CHOSEN_FIX = ("leave the activation model to its default (drop --activations textbook) for the step's peak where the "
              "exact model replays the run; memmath train MODEL --traced gives PyTorch's trace of this step")
MEASURE_FIX = "memmath measure MODEL measures the step"
# A traced type whose mixers' CUDA kernels (Run.mixer_kernels='cuda') save tensors its trace does not replay.
KERNELS_FIX = ("--mixer-kernels torch (mixer_kernels='torch') gives the step's peak for a run without those kernels "
               "installed, on transformers' PyTorch path; memmath measure MODEL measures the step with them")
CHECKPOINT_FIX = ("without checkpointing the step's peak is modelled; memmath train MODEL --traced gives PyTorch's trace "
                  "of the checkpointed step, or memmath measure MODEL measures it")
VISION_FIX = ("freeze the vision tower and projector (--vision frozen; vision='frozen' in the API) for an upper bound, or "
              "measure the step")
# A projector that trains under a method whose language model's embeddings are frozen (projector_refusal).
PROJECTOR_FIX = ("train the projector under full finetuning (--method full --vision projector; Full(vision='projector') "
                 "in the API) or freeze the vision tower and projector (--vision frozen) for an upper bound, or measure "
                 "the step")
# What each kind of floor leaves out, in words: the activations the textbook counts unchecked, or the step of a vision
# tower or projector that trains (or that memmath cannot bound).
UNCHECKED_LEFT_OUT = "the activations"
VISION_LEFT_OUT = "what the vision tower and projector save and compute in the step"
# The parts a vision run holds throughout its step beside its language model's: its tower's and projector's weights,
# constants, master copy and optimizer states (their gradients may be made after the language model's peak).
HELD_PARTS = ("weights", "quantization_constants", "master_weights", "optimizer_states")


class VerdictRefused(ValueError):
    """A search or a plan that needs a fits / does-not-fit verdict on a run memmath refuses to judge (a model type
    whose activations are not checked against PyTorch); the message says why and what would make it work."""


@frozen
class Requirement:
    """Bytes one GPU must hold for `run` (before the CUDA context), and what that number is.

    basis: "peak" (peak_memory's steady-state peak, a step after the first), "upper bound" (no peak model: a
    bound no moment of the step exceeds, memmath/bounds.py), "sum of parts" (training_memory's total) or "floor"
    (activations not checked against PyTorch for the model type: FLOOR_PARTS, which every moment of the step
    reaches at its optimizer step; a verdict is "does not fit" or refused, never "fits"); reason: why not the peak,
    in words ("" for the peak); memory: the parts (the activations too); peak: the PeakEstimate, or None.
    """

    bytes: int
    basis: str
    reason: str
    memory: object
    peak: object
    run: Run

    @property
    def refused(self) -> bool:
        """True for a floor: the verdict is "does not fit" where even the floor is too much, else refused (None)."""
        return self.basis == "floor"

    @property
    def left_out(self) -> str:
        """What a floor leaves out, in words ("" for any other basis): the unchecked activations, or a vision tower's
        and projector's step."""
        if not self.refused:
            return ""
        return VISION_LEFT_OUT if self.run.model.vision is not None else UNCHECKED_LEFT_OUT

    @property
    def unknown(self) -> str:
        """Why a floor has no verdict above it, in a few words ("" for any other basis)."""
        if not self.refused:
            return ""
        if unchecked_type(self.run) is not None:
            if _chosen(self.run):
                return "the textbook activation model was asked for by name"
            return ("the exact activation model does not replay this run" if _fallback(self.run)
                    else "the activations are not checked against PyTorch for this model type")
        if self.run.model.vision is not None:
            return f"{VISION_LEFT_OUT} is not modelled"
        return "the checkpointed step's peak is not modelled for this model type"

    @property
    def fix(self) -> str:
        """What would give a floor a verdict, in words ("" for any other basis)."""
        if not self.refused:
            return ""
        if unchecked_type(self.run) is not None:
            return unchecked_fix(self.run)
        return CHECKPOINT_FIX if self.run.model.vision is None else _vision_fix(self.run)

    def __post_init__(self):
        object.__setattr__(self, "bytes", validate.nbytes("bytes", self.bytes))
        object.__setattr__(self, "basis", validate.choice("basis", self.basis, BASES))  # stored as checked
        validate.text_field("reason", self.reason)

    @property
    def rank(self) -> int:
        """The GPU whose parts `memory` holds and whose step the number judges: a split run's worst rank, which may
        be another than the run's own rank."""
        return int(self.memory.run.rank) if self.memory.run is not None else int(self.run.rank)

    @property
    def words(self) -> str:
        """What the number is, in a few words: 'the step's peak', 'an upper bound on the step's peak' or 'the sum
        of the parts'."""
        return BASIS_WORDS[self.basis]

    @property
    def short(self) -> str:
        """One word for a table's row: peak, bound or sum."""
        return BASIS_SHORT[self.basis]

    @property
    def above_parts(self) -> int:
        """Bytes the requirement adds to the sum of the parts (the peak's or the bound's; may be negative for a
        peak); 0 when the requirement is the sum or a floor (which leaves the activations out)."""
        return 0 if self.basis in ("sum of parts", "floor") else self.bytes - int(self.memory.total)

    @property
    def note(self) -> Note:
        """The decision as a Note, for a reader."""
        if self.basis == "peak":
            return Note("requirement_peak", "the step's peak: the most allocated at one moment (peak_memory), "
                        "not the sum of the parts, which counts every part as if all were alive at once")
        if self.basis == "upper bound":
            return Note("requirement_bound", f"an upper bound on the step's peak: {self.reason}")
        if self.basis == "floor":
            return Note("requirement_floor", f"at least a floor under the step's peak, and no verdict above it: "
                        f"{self.reason}")
        return Note("requirement_sum", f"the sum of the parts: {self.reason}")


def requirement(model, **settings) -> Requirement:
    """The Requirement of a run (a Run, or a model with Run's keyword settings); one number per run.

    Sizes must be single numbers: a sweep has no single verdict (a ValueError names the field).
    """
    run = as_run(model, **settings)
    if run.is_sweep:
        raise validate.FieldError(run.swept, f"{run.swept} must be a single value: the planner judges one run, not a "
                                  "sweep of arrays")
    return _requirement(run.cache_key)


def unchecked_type(run: Run) -> str | None:
    """The model_type whose textbook activations this run counts unchecked (its record has no activation trace,
    traced=False, or its trace_refusal names options of this config the trace has no steps for), else None: a run
    with activations and a record that traces it, or no record (a parameter count)."""
    record = run.model.architecture
    if record is None or run.activations != "textbook" or run.seq_len is None or not run.model.has_shape:
        return None
    if record.replays(run.model) and not _fallback(run) and not _chosen(run):
        return None
    return record.model_type


def _chosen(run: Run) -> bool:
    """Whether the run asked for the textbook model by name: Korthikanti et al.'s formula counts what each block keeps
    for backward, with no working memory and no order in time, so its sum of the parts is no step's peak."""
    return "activations" not in run.defaulted


def _fallback(run: Run) -> str:
    """Why the exact activation model does not replay this run of a traced type, where the run took the textbook model
    by default for it (a method, recipe or kernel the trace has no steps for); "" where it did not."""
    record = run.model.architecture
    if "activations" not in run.defaulted:  # chosen: the textbook model's own answer, asked for by name
        return ""
    if record is None or not record.replays(run.model):
        return ""  # no trace to fall back from: unchecked_type's own case
    if run.model.vision is not None:  # the language model's trace with the tower's parts: _judged's vision bounds
        return ""
    return why_not_exact(run) or ""


def unchecked_fix(run: Run) -> str:
    """What would give an unchecked run (unchecked_type) a verdict, in words."""
    if _chosen(run):
        return CHOSEN_FIX
    if not _fallback(run):
        return UNCHECKED_FIX
    # the mixers' CUDA kernels are what the trace lacks only where the PyTorch path would be replayed
    on_torch = run.mixer_kernels != "torch" and not why_not_exact(run.replace(mixer_kernels="torch"))
    return KERNELS_FIX if on_torch else FALLBACK_FIX


def refusal(run: Run) -> str:
    """Why no verdict is given on this run, in words; "" when one is (unchecked_type is None)."""
    model_type = unchecked_type(run)
    if model_type is None:
        return ""
    record = run.model.architecture
    if _chosen(run):
        why = "activations='textbook' was asked for by name; its formula counts what the blocks keep, not the peak"
    elif not record.traced:
        why = "it has no activation trace"
    else:
        why = f"the exact activation model {_fallback(run) or record.trace_refusal(run.model)}"
    return (f"the activations of model_type {model_type!r} come from the textbook model (Korthikanti et al. 2022), "
            f"which is not checked against PyTorch for it ({why}): no fits / does-not-fit verdict is given on them")


def refuse_search(run: Run, what: str) -> None:
    """Raise VerdictRefused where `what` (a search for the run that fits) would search on a refused verdict: an
    unchecked model type, or a vision run whose requirement is a floor."""
    why = refusal(run)
    if why:
        raise VerdictRefused(f"{what} refuses this run: {why}; {unchecked_fix(run)}")
    if not run.is_sweep and checkpoint_refusal(run):
        raise VerdictRefused(f"{what} refuses this run: model_type {run.model.arch!r}: {checkpoint_refusal(run)}; "
                             f"{CHECKPOINT_FIX}")
    if run.model.vision is not None and not run.is_sweep:
        need = _requirement(run.cache_key)
        if need.refused:
            raise VerdictRefused(f"{what} refuses this run: {need.reason}")


@functools.lru_cache(maxsize=1024)
def _requirement(key: tuple) -> Requirement:  # Run.cache_key: the run and what its names stand for now
    need = _judged(key[0])
    if unchecked_type(need.run) is not None:
        return _activations_floor(need, refusal(need.run), unchecked_fix(need.run))
    if need.basis == "sum of parts" and need.run.model.vision is not None and need.run.seq_len is not None:
        return _vision_floor(need)
    if checkpoint_refusal(need.run):
        return _activations_floor(need, f"model_type {need.run.model.arch!r}: {checkpoint_refusal(need.run)}, so no "
                                  "fits / does-not-fit verdict is given on it",
                                  f"{CHECKPOINT_FIX[0].upper()}{CHECKPOINT_FIX[1:]}")
    return need


def parts_floor(memory) -> int:
    """The bytes of FLOOR_PARTS in `memory`: what every moment of the step reaches at its optimizer step."""
    return sum(int(getattr(memory, part)) for part in FLOOR_PARTS)


def _activations_floor(need: Requirement, why: str, fix: str) -> Requirement:
    """The floor of a run whose activations give no requirement (`why`), and what would give one (`fix`, a sentence
    after the floor's)."""
    floor = parts_floor(need.memory)
    words = (f"{why}. Without the activations, the step needs {floor:,} B (the weights, gradients and optimizer "
             "states of the GPU that holds the most, all alive at the optimizer step): the card must hold at least "
             f"that. {_sentence(fix)}")
    return Requirement(floor, "floor", words, need.memory, None, need.run)


def checkpoint_refusal(run: Run) -> str:
    """Why this checkpointed run's peak is not modelled for its model type ("" where it is, or without
    checkpointing): the record's checkpointed_peak_refusal."""
    record = run.model.architecture
    if not run.checkpointing or record is None or run.seq_len is None or run.activations != "transformers":
        return ""
    return record.checkpointed_peak_refusal


def _vision_floor(need: Requirement) -> Requirement:
    """A vision-language run memmath has neither a peak nor an upper bound for (a tower that trains; a projector that
    trains where _projector_bound does not apply, projector_refusal; a frozen tower with checkpointing or peft's kbit
    preparation; a split run): the sum of its parts would be no
    requirement (the tower's saved activations and backward are not in it: recorded CPU steps of Qwen2-VL and Gemma 3
    whose projector or tower trains peaked 14-24% above it, validation/vision_forward_steps_training.jsonl). The floor
    is the larger of what every moment of the step must reach: the parts alive at the optimizer step (FLOOR_PARTS), or,
    on one GPU, the language model's own modelled peak (the same run on the text model: its tokens, image tokens
    included, pass through it) plus the tower's and projector's parts held throughout (HELD_PARTS)."""
    run, memory = need.run, need.memory
    floor = parts_floor(memory)
    words = (f"{floor:,} B (the weights, gradients and optimizer states of the GPU that holds the most, all alive at "
             "the optimizer step)")
    if not is_parallel(run) and not run.sharded:
        shape, method = run.model, run.method
        text_default = next(f.default for f in fields(method) if f.name == "vision")
        text_run = run.replace(model=replace(shape, vision=None, name=f"{shape.name} (language model)"),
                               method=replace(method, vision=text_default))
        text_need = _requirement(text_run.cache_key)
        if text_need.basis == "peak":
            held = sum(int(getattr(memory, part)) - int(getattr(text_need.memory, part)) for part in HELD_PARTS)
            if text_need.bytes + held > floor:
                floor = text_need.bytes + held
                words = (f"{floor:,} B (the language model's own peak in the same run, {text_need.bytes:,} B, plus the "
                         f"vision tower's and projector's weights and optimizer states, {held:,} B)")
    vision = getattr(run.method, "vision", None)
    part = {"frozen": _unmodelled_tower(run.model.vision),
            "projector": projector_refusal(run) if vision == "projector" else "",
            "trains": projector_refusal(run) if vision == "trains" else ""}.get(vision, "")
    part = part or {"projector": "the projector trains", "trains": "the vision tower and projector train"}.get(vision, "")
    why = (f"{need.reason}{'; ' + part if part else ''}: memmath models neither this step's peak nor a bound on it "
           "(what the tower and projector save and compute is not modelled), and the sum of the parts leaves that "
           f"out, so it is no requirement. The step needs at least {words}: the card must hold at least that. "
           f"{_sentence(_vision_fix(run))}")
    return Requirement(floor, "floor", why, memory, None, run)


def _vision_fix(run: Run) -> str:
    """What would give a vision-language floor a verdict: a frozen tower gets a bound where its forward is modelled,
    so one that is not can only be measured; a projector or tower trained beside adapters, full finetuning instead."""
    vision = getattr(run.method, "vision", None)
    if vision in ("projector", "trains") and type(run.method) is not Full:
        return PROJECTOR_FIX
    return MEASURE_FIX if vision == "frozen" and _unmodelled_tower(run.model.vision) else VISION_FIX


def _sentence(fix: str) -> str:
    """A fix as a sentence of its own: capitalized, unless it starts with the command's name."""
    return fix if fix.startswith("memmath ") else f"{fix[0].upper()}{fix[1:]}"


def _judged(run: Run) -> Requirement:
    """The requirement as the activations counted give it: the peak, an upper bound or the sum of the parts."""
    if is_parallel(run):  # tensor, pipeline, context or expert parallelism: the rank that needs the most
        why = peak_why_not(run)
        if not why:  # the peak of the rank whose peak is highest (validation/parallel.py measures these engines)
            peak = worst_rank_peak(run)
            memory = parallel_memory(run.replace(rank=peak["rank"])).memory
            return Requirement(int(peak["total"]), "peak", "", memory, peak_estimate(run, peak), run)
        if applies(run):
            return _bound(run, why)
        worst = worst_rank(run)
        buffers = f" plus its communication buffers ({worst.buffer_bytes:,} B, derived)" if worst.buffers else ""
        return Requirement(worst.total, "sum of parts", f"{worst.layout.describe()}: the sum of the parts of the rank "
                           f"that holds the most (rank {worst.rank}, pipeline stage {worst.coordinates['pp']}){buffers}; "
                           f"{why}", worst.memory, None, run)
    memory = training_memory(run)
    why = why_no_peak(run)
    # FSDP2, ZeroRedundancyOptimizer or DistributedDataParallel (its buckets at each moment): the rank's peak
    if ((why and run.sharded) or is_ddp(run)) and not why_no_sharded_peak(run):
        peak = sharded_peak(run)
        return Requirement(int(peak.total), "peak", "", memory, peak, run)
    if why and applies(run):
        return _bound(run, why)
    if not why and is_ddp(run) and run.gradient_as_bucket_view:  # DDP's views where sharded_peak refuses the run
        return _ddp_views_bound(run, memory)
    frozen_tower = (_frozen_tower_bound(run, memory) or _projector_bound(run, memory)) if why else None
    if frozen_tower is not None:
        return frozen_tower
    if why:
        return Requirement(int(memory.total), "sum of parts", why, memory, None, run)
    peak = peak_memory(run)  # why_no_peak screened every run the peak model refuses
    return Requirement(int(peak.total), "peak", "", memory, peak, run)


# The parts a frozen vision tower and its projector add for the whole step: their weights (and a quantized base's
# constants); frozen, they have no gradients, master copy or optimizer states.
STATIC_PARTS = ("weights", "quantization_constants", "gradients", "gradient_accumulation", "master_weights",
                "optimizer_states")


def _unmodelled_tower(vision) -> str:
    """Why a frozen tower's forward is not modelled, in words ("" where it is, pixels known)."""
    if images_known(vision) and modelled(vision):
        return ""
    unmeasured = pixtral_unmeasured(vision)
    return (f"the {vision.label} tower's own forward is not modelled "
            + (f"with {unmeasured}" if unmeasured else
               f"(memmath models {', '.join(TOWER_LABELS[t] for t in MODELLED_TOWERS)}; Pixtral under mistral3 or "
               "llava)") + ("" if images_known(vision) else ", nor the pixels"))


def _frozen_tower_bound(run: Run, memory) -> Requirement | None:
    """A vision-language run whose tower and projector stay frozen: the larger of two moments. After the tower: what
    its language model must hold (the same run on the text model alone: its modelled peak, or its upper bound where
    the run offloads or shards) plus the tower's and projector's parts on the GPU, held throughout; the tower's
    outputs are freed before the language model's forward (transformers' get_image_features). During the tower's
    forward (memmath/vision_forward.py, for the towers it models): what is alive when the step's forward begins, the
    tower's parts, the pixels and the tower's working memory, with every token of the batch an image token (the
    most images the sequence can hold). Frozen and given pixels that need no gradient, the tower saves nothing for
    backward. None where it does not apply: with checkpointing or peft's kbit preparation,
    enable_input_require_grads hooks every input embedding the model holds, the tower's patch embedding too
    (transformers modeling_utils.py), so the frozen tower saves its layers' inputs, which memmath does not model."""
    shape, method = run.model, run.method
    if (shape.vision is None or getattr(method, "vision", None) != "frozen" or run.seq_len is None
            or run.checkpointing or run.kbit_prep):
        return None
    text_default = next(f.default for f in fields(method) if f.name == "vision")  # the method's own, for text
    text_run = run.replace(model=replace(shape, vision=None, name=f"{shape.name} (language model)"),
                           method=replace(method, vision=text_default))
    text_need = _requirement(text_run.cache_key)
    if text_need.basis in ("sum of parts", "floor"):
        return None
    tower = sum(int(getattr(memory, part)) - int(getattr(text_need.memory, part)) for part in STATIC_PARTS)
    words = (f"{why_no_peak(run)}; an upper bound: what the language model alone must hold ({text_need.bytes:,} B, "
             f"{text_need.words} of the same run on the text model) plus the frozen vision tower's and projector's "
             f"parts held throughout ({tower:,} B")
    if not images_known(shape.vision) or not modelled(shape.vision):
        return None  # the tower's own forward (and, unknown, the pixels) would be left out: no bound (_vision_floor)
    extras = batch_extras(shape.vision, run.batch_size, run.seq_len)
    after = text_need.bytes + tower + extras
    words += f", and the pixels, image ids and the tower's buffers, {extras:,} B)"
    moment, images = _tower_moment(run, memory, text_run, tower, extras)
    tower_words = (f"the tower's forward over {images} at its fullest, with every token an image token "
                   f"({moment:,} B with what is alive then)")
    if moment > after:
        return Requirement(moment, "upper bound", f"{words}, which is less than {tower_words}", memory, None, run)
    return Requirement(after, "upper bound", f"{words}; {tower_words} is less", memory, None, run)


def _tower_moment(run: Run, memory, text_run: Run, tower: int, extras: int) -> tuple[int, str]:
    """(bytes alive at the frozen tower's fullest moment, its images in words); tower: the tower's and projector's
    parts; extras: the pixels, image ids and the tower's buffers. The tower computes in its weights' format (fp32
    under autocast: a bound)."""
    parts, recipe = run.model.vision, run.recipe
    e = 4 if max(recipe.weight_bits, recipe.activation_bits) >= 32 else 2
    work = tower_forward(parts, run.batch_size, run.seq_len, e, run.attention)
    if not why_no_peak(text_run):
        alive = forward_start(text_run)
    else:  # every static part (gradients too) and the token ids and labels: more than the forward starts with
        alive = (sum(int(getattr(memory, part)) for part in STATIC_PARTS) - tower
                 + 2 * INT64 * run.batch_size * run.seq_len)
    # A quantized tower (QLoRA): bitsandbytes dequantizes each matrix for its matmul, one at a time (the largest).
    dequant = (max(t.numel for t in parts.tensor_list if t.linear) * e
               if getattr(run.method, "quant_type", None) else 0)
    images = worst_images(parts, run.batch_size, run.seq_len)
    count = images if isinstance(images, int) else len(images)
    # Made before the tower runs (transformers' forward embeds the tokens first) and alive through it: the token
    # embeddings and the positions (cache_position and position_ids, int64).
    inputs = run.batch_size * run.seq_len * (run.model.hidden_size * e + 2 * INT64)
    words = (f"{count} images of {parts.image_tokens} tokens" if isinstance(images, int)
             else f"{count} images of {images[0]:,} patches")
    return alive + tower + extras + inputs + work + dequant, words


# A training tower's MLP activations whose saved tensors vision_forward.siglip_saved and qwen2_vl_saved count (three
# of N f at most: quick_gelu saves x, its sigmoid and their product; the others their input, and fc2 their output).
TRAINING_ACTS = ("gelu_pytorch_tanh", "gelu", "quick_gelu", "silu")


def projector_refusal(run: Run) -> str:
    """Why a run whose projector, or tower and projector, train has no upper bound (_projector_bound), in words; ""
    where it has one."""
    parts, vision = run.model.vision, getattr(run.method, "vision", None)
    what = "the projector trains" if vision == "projector" else "the vision tower and projector train"
    if run.n_gpus > 1 or run.sharded or is_ddp(run) or is_parallel(run):
        return f"{what} on {run.n_gpus} GPUs: the bound is given for one GPU's step"
    if type(run.method) is not Full:
        return (f"{what} under {type(run.method).__name__}, whose language model's input embeddings are "
                "frozen: the image features, which need a gradient, make its first block record what the text "
                "model's step does not (the bound is given under full finetuning, Full)")
    if run.optimizer_spec.temporaries not in ("adam", "none"):
        return (f"{what} under {run.optimizer_spec.name}, whose temporaries for their tensors are not "
                "counted (Adam's and AdamW's are)")
    if run.recipe.activation_bits != run.recipe.weight_bits:
        return (f"{what} under {run.recipe.name} (autocast): the 16-bit copies autocast makes of the vision "
                "tensors' inputs and weights, and keeps for backward, are not counted (a recipe whose weights and "
                "activations share a format, bf16, fp16 or fp32, gives the bound)")
    if not modelled(parts):
        return f"{what}: {_unmodelled_tower(parts)}"
    if vision == "trains" and parts.tower not in TOWER_COUNTED:
        return (f"{what}: the {parts.label} tower's saved tensors are not counted (memmath counts "
                f"{', '.join(TOWER_LABELS[t] for t in TOWER_COUNTED)}'s)")
    if vision == "trains" and parts.act not in TRAINING_ACTS:
        return (f"{what}: vision_config.hidden_act {parts.act!r} saves tensors the bound does not count "
                f"({', '.join(TRAINING_ACTS)} are counted)")
    if vision == "trains" and parts.attention_dropout:
        return (f"{what}: vision_config.attention_dropout {parts.attention_dropout} makes the attention save a mask "
                "and its output, which the bound does not count (attention_dropout 0, SiglipVisionConfig's default and "
                "Gemma 3's, is counted)")
    if vision == "trains" and any(".head." in t.name for t in parts.post):
        return f"{what}: the {parts.label} tower's pooling head (vision_use_head) is not counted"
    return ""


def _projector_bound(run: Run, memory) -> Requirement | None:
    """A vision-language run whose projector trains (vision='projector', the tower frozen) or whose tower and
    projector train (vision='trains', SigLIP under Gemma 3), under full finetuning: a safe upper bound, the largest of
    four moments, each a sum of what can be alive at it, with the tower's and projector's parts (weights, gradients,
    optimizer states) and the pixels, image ids and the tower's buffers (batch_extras) in all four.

    What the vision side saves: a frozen tower given pixels that need no gradient nothing; a SigLIP tower that
    trains its saved tensors (vision_forward.tower_tensors, S); the projector at most every tensor its forward makes
    (vision_forward.projector_tensors, P). The image features join the input embeddings by masked_scatter: its copy
    of the input embeddings, its backward's masked_fill of their gradient (B S t e each) and its mask (B S t bytes,
    counted as expanded). The vision gradients are made in their backward (zero_grad(set_to_none=True) leaves none,
    as peak.py's moments take it; with gradient accumulation they are counted throughout).

    1. The tower's forward: _tower_moment (the frozen forward at its fullest over the most images the batch holds),
       plus P and, for a tower that trains, S and the most one layer or the patches' stage makes beside it in place
       of the frozen forward's working memory; less the vision gradients.
    2. The language model's forward and backward: the text model's modelled forward and backward peak in the same run
       (its input embeddings need a gradient in both under full finetuning), S + P, masked_scatter's terms; less the
       vision gradients.
    3. The vision backward, which runs after the language model's has reached its input embeddings (peak.py's moment
       "at the embeddings: every gradient"): S + P, the projector's backward (one gradient of each of its tensors and
       one op's temporaries, each the size of a tensor it reads or makes: 2 P), the tower's (tower_tensors: six of
       its largest tensor and the CPU SDPA kernel's scratch), masked_scatter's terms; less, for a tower of L layers,
       (L - 1) times the smaller of one layer's saved tensors and its gradients, since its backward runs the layers
       last to first and no layer holds both at the worst moment.
    4. The optimizer step: the text model's, plus the optimizer's temporaries for the trainable vision tensors in the
       list the language model's are in (recipes.update_temporaries: torch's single-tensor Adam on the CPU makes two
       the size of one tensor beside the one before it, so the whole list's largest is at most the language model's
       plus theirs; foreach Adam one the size of every tensor); the saved tensors are freed by then.

    Measured on the CPU by validation/vision_forward.py --training (those it holds out were recorded after this
    bound). None where it does not apply (projector_refusal, checkpointing, peft's kbit preparation)."""
    shape, method = run.model, run.method
    vision = getattr(method, "vision", None)
    if (shape.vision is None or vision not in ("projector", "trains") or run.seq_len is None
            or run.checkpointing or run.kbit_prep or projector_refusal(run)):
        return None
    text_run = run.replace(model=replace(shape, vision=None, name=f"{shape.name} (language model)"),
                           method=replace(method, vision="trains"))
    text_need = _requirement(text_run.cache_key)
    if text_need.basis != "peak" or not isinstance(text_need.peak, PeakEstimate):
        return None
    parts, recipe = shape.vision, run.recipe
    e = 4 if max(recipe.weight_bits, recipe.activation_bits) >= 32 else 2
    tower = sum(int(getattr(memory, part)) - int(getattr(text_need.memory, part)) for part in STATIC_PARTS)
    extras = batch_extras(parts, run.batch_size, run.seq_len)
    projector = projector_tensors(parts, run.batch_size, run.seq_len, e)
    own, tower_forward_extra, tower_backward, layer = (
        tower_tensors(parts, run.batch_size, run.seq_len, e, run.attention) if vision == "trains" else (0, 0, 0, 0))
    # The tower's backward runs its layers last to first: while layer k's runs, the layers below it still hold what
    # they saved and have no gradients yet, the layers above have freed theirs and hold their gradients. At the
    # worst k, then, L - 1 layers hold the smaller of their saved tensors and their gradients, not both.
    layer_grads = sum(t.numel for t in parts.block) * recipe.grad_bits // 8 if vision == "trains" else 0
    not_both = (parts.n_blocks - 1) * min(layer, layer_grads) if vision == "trains" and run.grad_accum_steps == 1 else 0
    saved = own + projector
    tokens = run.batch_size * run.seq_len * shape.hidden_size
    scatter = 2 * tokens * e + tokens
    # the trainable vision tensors in the update's format (the fp32 masters where the recipe keeps them)
    width = max(recipe.weight_bits, recipe.master_bits) // 8
    updates = (update_temporaries([t.numel * width for t in parts.trainable(vision)], run.device)
               if run.optimizer_spec.temporaries == "adam" else 0)
    # the language model's step, the vision tensors saved beside it; then the vision backward, after the language
    # model's backward has reached its input embeddings (peak.py's moment "at the embeddings: every gradient")
    # The vision gradients are made in their backward, after the language model's (zero_grad(set_to_none=True) left
    # none from the step before, as peak.py's moments take it); with gradient accumulation they are alive throughout.
    grads = int(memory.gradients) - int(text_need.memory.gradients) if run.grad_accum_steps == 1 else 0
    text = text_need.peak
    during = int(max(text.forward, text.backward)) + tower - grads + extras + saved + scatter
    stepping = int(text.optimizer_step) + tower + extras + updates  # the saved tensors are freed by then
    at_embeddings = next((value for phase, label, value in text.moments
                          if phase == "backward" and label.startswith("at the embeddings")), text_need.bytes)
    after = int(at_embeddings) + tower + extras + saved + 2 * projector + tower_backward + scatter - not_both
    moment, images = _tower_moment(run, memory, text_run, tower, extras)
    # a tower that trains: its frozen forward's working memory gives way to what it saves and the most one layer (or
    # the patches' stage) makes beside that
    moment += saved - grads + ((tower_forward_extra - tower_forward(parts, run.batch_size, run.seq_len, e,
                                                                    run.attention)) if vision == "trains" else 0)
    what = "a projector that trains" if vision == "projector" else "a vision tower and projector that train"
    made = ("every tensor the projector's forward makes" if vision == "projector" else
            "what the tower saves for backward, the most one of its layers makes beside that and every tensor the "
            "projector's forward makes")
    bound = max(moment, during, stepping, after)
    unmade = f", less the vision gradients, not made yet ({grads:,} B)" if grads else ""
    words = (f"{why_no_peak(run)}; an upper bound for {what}, the largest of four moments, each with the tower's "
             f"and projector's parts, gradients and optimizer states ({tower:,} B) and the pixels, image ids and the "
             f"tower's buffers ({extras:,} B). The tower's forward over {images} at its fullest, with every token an "
             f"image token, and {made} ({saved:,} B){unmade}: {moment:,} B. The language model's forward and "
             f"backward: its own peak in the same run, those tensors and masked_scatter's copy, gradient and mask "
             f"({scatter:,} B){unmade}: {during:,} B. Their backward, after the language model's has reached its "
             f"embeddings ({int(at_embeddings):,} B then): those tensors, what their backward adds to them "
             f"({2 * projector + tower_backward:,} B) and masked_scatter's terms"
             + (f", less what no layer holds at once, both its saved tensors and its gradients ({not_both:,} B)"
                if not_both else "") + f": {after:,} B. The optimizer step: the language model's, and the optimizer's "
             f"temporaries for the vision tensors ({updates:,} B): {stepping:,} B")
    return Requirement(bound, "upper bound", words, memory, None, run)


def _ddp_views_bound(run: Run, memory) -> Requirement:
    """DistributedDataParallel(gradient_as_bucket_view=True) where sharded_peak does not model the run (gradient
    accumulation, offloading): the buckets are alive at every moment, forward included, so no moment holds more than
    the one-GPU moment plus the buckets, as a copy of the gradients (DDP's default) holds them."""
    copies = peak_memory(run.replace(gradient_as_bucket_view=False))
    return Requirement(int(copies.total), "upper bound",
                       f"{why_no_sharded_peak(run)}; an upper bound: the one-GPU peak plus DistributedDataParallel's "
                       "buckets (the gradients' bytes), which gradient_as_bucket_view=True keeps alive at every moment",
                       memory, None, run)


def _bound(run: Run, why: str) -> Requirement:
    """The Requirement of a run whose peak memmath does not model: the safe upper bound of memmath/bounds.py."""
    bound = upper_bound(run)
    memory = parallel_memory(run.replace(rank=bound["rank"])).memory
    return Requirement(int(bound["bytes"]), "upper bound", f"{why}; {describe_bound(bound)}", memory, None, run)
