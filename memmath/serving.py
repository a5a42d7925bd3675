"""The serving planner: will this model at this context fit on this GPU, and which changes would make it fit.

inference_memory counts what one replica holds (weights, KV cache, the prefill working set);
plan_serving judges it against a card with the CUDA context kept back, finds the longest context
that fits, bounds the decode speed, and ranks the single changes that lower the total (smaller
weight or KV formats, the longest context or the largest batch that fits). The command line's
`memmath infer` prints it; lesson 7 and Python users can call it.

A change is judged as plan_training judges its changes: it fits only when it leaves FIT_MARGIN (5%)
of its total free beside the reserve, so a change offered as fitting always leaves headroom that
shows (the longest context at the edge of the memory would leave less than one token's KV cache).
The verdict on the setup itself and longest_context_that_fits are the memory's edge, no margin.
A context longer than the model was trained on (memmath.trained_context) is counted as asked, with
a note saying so.
"""

from __future__ import annotations


from . import validate
from .checkpoints import weight_bits
from .formats import FORMATS, get_format
from .gpus import CUDA_CONTEXT_BYTES, FIT_MARGIN, check_fit, default_reserve, get_gpu
from .inference import InferenceMemory, decode_tokens_per_second, inference_memory, quantized_cache_refusal
from .notes import Note
from .planner import trained_context
from .report import serving_text
from .run import Serve, as_serve
from .search import largest_where
from .planner import trained_context
from .values import frozen

MAX_CONTEXT = 2**22  # tokens: the longest context the search tries (validate.MAX_SEQ)
WEIGHT_FORMATS_TO_TRY = ("int8", "nf4")  # quantized weights, as bitsandbytes and GPTQ-style kernels serve them
KV_FORMATS_TO_TRY = ("fp8_e4m3",)  # an 8-bit KV cache, as vLLM and TensorRT-LLM offer it


@frozen
class ServingChange:
    """One change to a serving setup: its name, the new settings, the new total and what it costs.

    fits: the new total leaves FIT_MARGIN of itself free beside the reserve (as plan_training judges
    its changes); headroom_bytes: what the card has left over, negative when short."""

    change: str
    settings: dict
    total: int
    saved: int
    fits: bool
    headroom_bytes: int  # negative when short
    cost: str
    serve: Serve | None = None  # the changed question as one value (serving_changes sets it)

    def __post_init__(self):
        validate.text_field("change", self.change)
        validate.text_field("cost", self.cost)
        if not isinstance(self.settings, dict):
            raise validate.FieldTypeError("settings", f"settings must be a dict of inference_memory's settings; got "
                                          f"{validate.describe(self.settings)}")
        for name in ("total", "saved"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        object.__setattr__(self, "fits", validate.flag("fits", self.fits))
        object.__setattr__(self, "headroom_bytes", validate.count(
            "headroom_bytes", self.headroom_bytes, low=-validate.MAX_BYTES, high=validate.MAX_BYTES, scalar=True))


@frozen
class ServingPlan:
    """memory: the replica's parts; fit: the verdict (None without a GPU); longest_context: the most
    tokens per sequence that fit at the same batch and formats (0 when none does; None without a GPU);
    decode_tokens_per_second: the bandwidth bound (None without a GPU or its bandwidth); changes: single
    changes that lower the total, largest saving first (only when it does not fit), each judged with
    FIT_MARGIN; notes: the memory's notes, then the planner's (a context past what the model was
    trained on: kind "context_beyond_positions" for learned positions, "context_beyond_trained")."""

    memory: InferenceMemory
    settings: dict
    gpu: object = None
    reserved_bytes: int = CUDA_CONTEXT_BYTES
    fit: object = None
    longest_context: int | None = None
    decode_tokens_per_second: float | None = None
    changes: tuple = ()
    notes: tuple = ()
    serve: Serve | None = None  # the question asked (plan_serving sets it)

    @property
    def fits(self) -> bool | None:
        """The verdict: True or False on a card, None without one."""
        return None if self.fit is None else self.fit.fits

    def __str__(self) -> str:  # what `memmath infer` prints
        return serving_text(self)

    def _repr_markdown_(self) -> str:  # a notebook shows the same text
        return "```text\n" + serving_text(self) + "```"

    @property
    def instead(self) -> tuple:
        """The changes that fit on their own (each leaves FIT_MARGIN free), largest saving first; () when the setup
        fits or no GPU was given."""
        return tuple(change for change in self.changes if change.fits)


def _settings(model, **settings) -> tuple:
    """(the model's shape, inference_memory's settings) of a Serve, or of a model and keyword settings (each one
    left out taken from SERVING_DEFAULTS)."""
    serve = as_serve(model, **settings)
    return serve.model, serve.settings()


def _fits_with(shape, gpu, reserved_bytes, settings, margin=0.0):
    def fits(**change) -> bool:
        total = inference_memory(shape, **{**settings, **change}).total
        return check_fit(total, gpu, reserved_bytes=reserved_bytes, margin=margin).fits
    return fits


def _context_notes(shape, context_len) -> tuple:
    """A note when the context is longer than the model was trained on (planner.trained_context)."""
    trained = trained_context(shape)
    if trained is None or context_len <= trained:
        return ()
    name = shape.name or "the model"
    if shape.max_positions is not None:
        return (Note("context_beyond_positions", f"{context_len:,} tokens is more than {name}'s {trained:,} learned "
                     f"positions: transformers cannot run it (the position embedding has {trained:,} rows); the "
                     "memory is counted as asked"),)
    return (Note("context_beyond_trained", f"{context_len:,} tokens is longer than the {trained:,} {name} was "
                 f"trained on (max_position_embeddings): the memory is counted as asked, but the model reads well "
                 f"only up to {trained:,} tokens unless its positions are scaled"),)


def longest_context_that_fits(model, gpu, *, reserved_bytes=None, **settings) -> int:
    """The longest context (tokens per sequence) whose total fits at the same batch and formats, 0 if none."""
    (shape, settings), gpu = _settings(model, **settings), get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", default_reserve(gpu, reserved_bytes), low=0,
                                    high=gpu.memory_bytes - 1, scalar=True)
    fits = _fits_with(shape, gpu, reserved_bytes, settings)
    return largest_where(lambda n: fits(context_len=n), 1, MAX_CONTEXT) or 0


def serving_changes(model, gpu, *, reserved_bytes=None, **settings) -> list[ServingChange]:
    """Single changes to a serving setup that lower its total, largest saving first, each judged with the
    reserve and FIT_MARGIN: a change fits only when it leaves 5% of its total free, as plan_training
    judges its changes, so the context and batch offered are the longest and largest that leave that
    much (the memory's own edge, longest_context_that_fits, would leave less than one token's cache)."""
    (shape, settings), gpu = _settings(model, **settings), get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", default_reserve(gpu, reserved_bytes), low=0,
                                    high=gpu.memory_bytes - 1, scalar=True)
    before = int(inference_memory(shape, **settings).total)
    fits = _fits_with(shape, gpu, reserved_bytes, settings, margin=FIT_MARGIN)
    bits = {name: f.bits for name, f in FORMATS.items()}
    candidates = []
    for fmt in WEIGHT_FORMATS_TO_TRY:
        if bits[fmt] < weight_bits(settings["weights_format"]):
            candidates.append((f"weights in {fmt}", {"weights_format": fmt},
                               "quantized weights: some loss of quality, kernels that dequantize"))
    for fmt in KV_FORMATS_TO_TRY:
        if bits[fmt] < bits[get_format(settings["kv_format"]).name] and not quantized_cache_refusal(shape, fmt):
            candidates.append((f"KV cache in {fmt}", {"kv_format": fmt},
                               "8-bit KV cache: half the cache, a small loss of precision"))
    longest = largest_where(lambda n: fits(context_len=n), 1, settings["context_len"] - 1)
    if longest:
        candidates.append((f"context {longest:,} tokens", {"context_len": longest}, "shorter prompts and outputs"))
    if settings["batch_size"] > 1:
        batch = largest_where(lambda n: fits(batch_size=n), 1, settings["batch_size"] - 1)
        if batch:
            candidates.append((f"batch {batch}", {"batch_size": batch}, "fewer sequences at once"))
    rows = []
    for change, new, cost in candidates:
        new = {**settings, **new}
        total = int(inference_memory(shape, **new).total)
        if total >= before:
            continue
        fit = check_fit(total, gpu, reserved_bytes=reserved_bytes, margin=FIT_MARGIN)
        rows.append(ServingChange(change, new, total, before - total, fit.fits, int(fit.headroom_bytes), cost,
                                  Serve(shape, **new)))
    return sorted(rows, key=lambda r: (-r.saved, r.change))


def plan_serving(model, gpu=None, *, reserved_bytes=None, **settings) -> ServingPlan:
    """The memory of one replica, and with a GPU its verdict, the longest context, the decode bound and the
    changes (judged with FIT_MARGIN, see serving_changes); notes: the memory's, and one when the context
    is longer than the model was trained on."""
    serve = as_serve(model, **settings)
    shape, settings = serve.model, serve.settings()
    memory = inference_memory(shape, **settings)
    settings = {**settings, "weights_format": memory.weights_format, "kv_format": memory.kv_format}
    notes = (*memory.notes, *_context_notes(shape, settings["context_len"]))
    if gpu is None:
        return ServingPlan(memory, settings, reserved_bytes=default_reserve(None, reserved_bytes), notes=notes,
                           serve=serve)
    gpu = get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", default_reserve(gpu, reserved_bytes), low=0,
                                    high=gpu.memory_bytes - 1, scalar=True)
    fit = check_fit(memory.total, gpu, reserved_bytes=reserved_bytes)
    longest = longest_context_that_fits(shape, gpu, reserved_bytes=reserved_bytes, **settings)
    speed = decode_tokens_per_second(memory, gpu) if gpu.bandwidth_bytes_per_s else None
    changes = () if fit.fits else tuple(serving_changes(shape, gpu, reserved_bytes=reserved_bytes, **settings))
    return ServingPlan(memory, settings, gpu, reserved_bytes, fit, longest, speed, changes, notes, serve)
