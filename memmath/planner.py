"""The planner: will a finetune fit on a GPU, and which changes would make it fit.

`suggest_changes` tries one change at a time to a training setup (the keyword arguments of
`training_memory`) and ranks the changes by the bytes each saves per GPU; `path_to_fit` chains
them until the run fits. Both decide on `step_peak`: the steady-state peak of a step
(peak_memory) where memmath models it, else the sum of the parts that training_memory counts,
with the CUDA context reserved (CUDA_CONTEXT_BYTES) and FIT_MARGIN of the requirement left free.
`config_from_text` reads a pasted config.json strictly as JSON text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import inspect
from dataclasses import dataclass, field

from .arrays import is_ndarray

from . import validate
from .activations import ATTENTION_KINDS
from .gpus import CUDA_CONTEXT_BYTES, FIT_MARGIN, check_fit, get_gpu
from .methods import LoRA, QLoRA
from .models import ModelShape, parse_json_config, from_hf_config
from .recipes import bytes_per_parameter, get_optimizer, get_recipe
from .training import training_memory
from .units import UNITS, unit_name

if TYPE_CHECKING:
    import pandas as pd


SUGGESTED_RANK = 8  # LoRA's rank in Hu et al. 2021's GPT-3 runs was 1-8; 8 is peft's default
SUGGESTED_TARGETS = ("q", "v")  # Hu et al. 2021, section 7.1: adapting W_q and W_v works best for a budget
MAX_GPUS = 1024


@dataclass(frozen=True)
class Suggestion:
    """One change to a training setup: what it is, the settings it changes, and the result per GPU.

    total: bytes per GPU after the change; saved: bytes per GPU it saves (before - after);
    fits: whether the new total fits the GPU; cost: what the change costs besides memory.
    """

    change: str
    settings: dict = field(compare=False)
    total: int
    saved: int
    fits: bool
    cost: str = ""
    basis: str = "peak"

    def __post_init__(self):
        validate.text_field("change", self.change)
        if not isinstance(self.settings, dict):
            raise TypeError(f"settings must be a dict of training_memory's arguments; got {validate.describe(self.settings)}")
        object.__setattr__(self, "total", validate.nbytes("total", self.total))
        object.__setattr__(self, "saved", validate.nbytes("saved", self.saved))
        object.__setattr__(self, "fits", validate.flag("fits", self.fits))
        validate.text_field("cost", self.cost)
        validate.choice("basis", self.basis, ("peak", "sum of parts"))


_PEAK_ARGUMENTS = ("precision", "optimizer", "method", "batch_size", "seq_len", "checkpointing", "attention",
                   "dropout", "device")


def step_peak(model, **settings) -> tuple[int, str]:
    """(bytes per GPU the run needs at once, what that number is) for training_memory's settings.

    "peak": peak_memory's steady-state peak (a step after the first), where memmath models the
    peak: gpt2/llama/bert shapes, Full/Freeze/LoRA/QLoRA (and Adapters in BERT and LLaMA) in fp32 or
    16-bit or AMP with SDPA, no ZeRO, seq_len given. "sum of parts": training_memory(...).total
    otherwise (ZeRO, a plain count, ...), which the allocator's peak may exceed by the step's temporaries.
    """
    _single_sizes(settings)
    # Without ZeRO every GPU holds the whole run (data parallelism copies it), so the peak applies.
    single = not settings.get("zero_stage", 0)
    if single and settings.get("seq_len") is not None and set(settings) <= set(_PEAK_ARGUMENTS) | {"n_gpus",
                                                                                                   "zero_stage",
                                                                                                   "activations"}:
        from .peak import peak_memory

        try:
            peak = peak_memory(model, **{k: v for k, v in settings.items() if k in _PEAK_ARGUMENTS})
            return _single(peak.total), "peak"
        except ValueError:  # a method, recipe or family the peak model refuses by name
            pass
    return _single(training_memory(model, **settings).total), "sum of parts"


def _single(total) -> int:
    if is_ndarray(total):  # a method swept over ranks or layers
        raise ValueError("the planner compares one run: model (a parameter count) and method (its rank or layers) "
                         "must be single values, not arrays")
    return int(total)


def _total(model, settings) -> int:
    return step_peak(model, **settings)[0]


def _one_run(gpu, reserved_bytes, max_gpus, settings):
    """The planner compares single runs: sizes are single numbers (ValueError names the field)."""
    gpu = get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", reserved_bytes, low=0, high=gpu.memory_bytes, scalar=True)
    max_gpus = validate.count("max_gpus", max_gpus, high=MAX_GPUS, scalar=True)
    _single_sizes(settings)
    return gpu, reserved_bytes, max_gpus


def _single_sizes(settings: dict) -> None:
    """Batch, length and GPU count as single numbers, checked in place (ValueError names the field)."""
    limits = {"batch_size": (1, validate.MAX_BATCH), "seq_len": (1, validate.MAX_SEQ), "n_gpus": (1, validate.MAX_GPUS),
              "zero_stage": (0, 3)}
    for key, (low, high) in limits.items():
        if settings.get(key) is not None:
            settings[key] = validate.count(key, settings[key], low=low, high=high, scalar=True)


def _fits(total, gpu, reserved_bytes) -> bool:
    return check_fit(total, gpu, reserved_bytes=reserved_bytes, margin=FIT_MARGIN).fits


def _smallest_fitting(values, make_settings, model, gpu, reserved_bytes):
    """The first value whose settings fit (values ordered from least to most disruptive), else the last."""
    for value in values:
        settings = make_settings(value)
        if _fits(_total(model, settings), gpu, reserved_bytes):
            return value, settings
    return values[-1], make_settings(values[-1])


def _largest_fitting_batch(model, settings, gpu, reserved_bytes):
    """The largest batch size below the current one that fits (bisection: memory grows with batch), else 1."""
    low, high = 1, _setting(settings, "batch_size") - 1
    if high < 1:
        return None
    if not _fits(_total(model, {**settings, "batch_size": low}), gpu, reserved_bytes):
        return 1
    while low < high:  # low fits; find the largest that does
        middle = (low + high + 1) // 2
        if _fits(_total(model, {**settings, "batch_size": middle}), gpu, reserved_bytes):
            low = middle
        else:
            high = middle - 1
    return low


# training_memory's own defaults, read from its signature (never typed a second time here).
_DEFAULTS = {name: p.default for name, p in inspect.signature(training_memory).parameters.items()
             if p.default is not inspect.Parameter.empty}
PURE_BF16 = "bf16"


def _setting(settings, name):
    """A setting as training_memory will use it: the value given, else training_memory's default."""
    return settings.get(name, _DEFAULTS[name])


def _keeps_more_than_pure_bf16(precision) -> bool:
    """True when a recipe (a name or a Recipe) keeps more bytes per parameter than pure bf16 does."""
    per_param = bytes_per_parameter(get_recipe(precision), "adam")["total"]
    return per_param > bytes_per_parameter(PURE_BF16, "adam")["total"]


def _candidates(model, settings, gpu, reserved_bytes, max_gpus):
    """(change, new settings, cost) for every change that applies to this setup."""
    method = _setting(settings, "method")
    seq_len = _setting(settings, "seq_len")
    optimizer = get_optimizer(_setting(settings, "optimizer"))
    precision = _setting(settings, "precision")
    n_gpus, stage = _setting(settings, "n_gpus"), _setting(settings, "zero_stage")
    batch = _setting(settings, "batch_size")

    if seq_len is not None and not _setting(settings, "checkpointing"):
        yield ("gradient checkpointing on", {**settings, "checkpointing": True},
               "recomputes each block's forward pass during backward: about a third more compute")
    attention = _setting(settings, "attention")
    if attention is None:  # training_memory decides it (SDPA for a model read from a config): ask it which
        attention = training_memory(model, **settings).attention
    if seq_len is not None and validate.choice("attention", attention, ATTENTION_KINDS) == "eager":
        yield ("fused attention (sdpa)", {**settings, "attention": "sdpa"},
               "no extra compute: the same attention in a fused kernel (PyTorch SDPA, FlashAttention)")
    if batch > 1 and seq_len is not None:
        smaller = _largest_fitting_batch(model, settings, gpu, reserved_bytes)
        steps = -(-batch // smaller)
        yield (f"batch size {smaller}", {**settings, "batch_size": smaller},
               f"accumulate gradients over {steps} steps for the same effective batch: slower steps")
    if not isinstance(method, (LoRA, QLoRA)):
        yield (f"LoRA rank {SUGGESTED_RANK} on {', '.join(SUGGESTED_TARGETS)}",
               {**settings, "method": LoRA(rank=SUGGESTED_RANK, targets=SUGGESTED_TARGETS)},
               "trains far fewer parameters; quality close to full finetuning on many tasks (Hu et al. 2021)")
    if not isinstance(method, QLoRA):
        rank = method.rank if isinstance(method, LoRA) else SUGGESTED_RANK
        targets = method.targets if isinstance(method, LoRA) else SUGGESTED_TARGETS
        yield (f"QLoRA rank {rank} on {', '.join(targets)}",
               {**settings, "method": QLoRA(rank=rank, targets=targets)},
               "4-bit NF4 base: weights are dequantized on the fly, so steps are slower (Dettmers et al. 2023)")
    if optimizer.name in ("adam", "adamw"):
        yield ("8-bit Adam", {**settings, "optimizer": "adam8bit"},
               "block-wise 8-bit states; matched 32-bit Adam in Dettmers et al. 2022's benchmarks")
    if _keeps_more_than_pure_bf16(precision) and gpu.computes_bf16 is not False:  # a T4 or V100 cannot run it
        yield ("pure bf16 recipe", {**settings, "precision": PURE_BF16},
               "no fp32 master copy: small updates can round away; watch the loss (or use Kahan summation)")
    if n_gpus > 1 and stage < 3:
        stages = list(range(stage + 1, 4))
        chosen, new = _smallest_fitting(stages, lambda k: {**settings, "zero_stage": k}, model, gpu, reserved_bytes)
        yield (f"ZeRO stage {chosen} on the {n_gpus} GPUs", new,
               "shards states, gradients and weights across GPUs: more communication per step")
    if n_gpus < max_gpus:
        # The fewest GPUs, any whole number above the current count up to max_gpus, that fit; else max_gpus.
        new_stage = max(stage, 3)
        staged = {**settings, "zero_stage": new_stage}
        fewest = fewest_gpus_that_fit(model, gpu, reserved_bytes=reserved_bytes, max_gpus=max_gpus, **staged)
        chosen = max(fewest, n_gpus + 1) if fewest is not None else max_gpus
        new = {**staged, "n_gpus": chosen}
        yield (f"{chosen} GPUs with ZeRO stage {new_stage}", new,
               "more cards; ZeRO shards everything but activations, which every GPU keeps for its own batch")


def suggest_changes(model, gpu, *, reserved_bytes=CUDA_CONTEXT_BYTES, max_gpus=64, **settings) -> list[Suggestion]:
    """Single changes that lower a training run's memory per GPU, the largest saving first.

    Memory is step_peak's (the steady-state peak where modelled); a change fits when it leaves
    FIT_MARGIN (5%) of its requirement free after reserved_bytes (the CUDA context by default).

    settings are training_memory's keyword arguments (precision, optimizer, method, batch_size,
    seq_len, checkpointing, n_gpus, zero_stage, attention, ...). Each candidate changes one thing:
    checkpointing on, fused attention, the largest smaller batch that fits (else 1), LoRA or QLoRA
    (rank 8 on q, v unless LoRA is already set), 8-bit Adam, a pure bf16 recipe, a higher ZeRO stage
    on the same GPUs (the lowest that fits, else 3), or more GPUs with ZeRO stage 3 (the fewest,
    any whole number up to max_gpus, that fit; else max_gpus). Only changes that save bytes are returned.
    """
    gpu, reserved_bytes, max_gpus = _one_run(gpu, reserved_bytes, max_gpus, settings)
    before = _total(model, settings)
    suggestions = []
    for change, new_settings, cost in _candidates(model, settings, gpu, reserved_bytes, max_gpus):
        try:
            after, basis = step_peak(model, **new_settings)
        except ValueError:  # e.g. LoRA on a model without named matrices
            continue
        if after < before:
            suggestions.append(Suggestion(change, new_settings, after, before - after,
                                          _fits(after, gpu, reserved_bytes), cost, basis))
    return sorted(suggestions, key=lambda s: (-s.saved, s.change))


def path_to_fit(model, gpu, *, reserved_bytes=CUDA_CONTEXT_BYTES, max_gpus=64, max_steps=8,
                **settings) -> list[Suggestion]:
    """Changes applied one after another until the run fits. Changes come in tiers: those that keep
    the GPUs and the batch, then a smaller batch, then more GPUs (up to max_gpus). When some change
    makes the run fit, the smallest such change of the lowest tier that has one; otherwise the
    largest saving of the lowest tier, and again from there.

    Each Suggestion's total and saved are after that step (saved relative to the step before).
    Fitting, memory and the reserve are as in suggest_changes. Empty when the run already fits; the
    last step's fits is False when no chain of changes fits.
    """
    gpu, reserved_bytes, max_gpus = _one_run(gpu, reserved_bytes, max_gpus, settings)
    max_steps = validate.count("max_steps", max_steps, high=32, scalar=True)
    steps: list[Suggestion] = []
    current = dict(settings)
    if _fits(_total(model, current), gpu, reserved_bytes):
        return steps
    for _ in range(max_steps):
        options = suggest_changes(model, gpu, reserved_bytes=reserved_bytes, max_gpus=max_gpus, **current)
        if not options:
            break
        # Changes in tiers: those that keep the hardware and the batch, then a smaller batch (gradient
        # accumulation keeps the effective batch), then more GPUs (more hardware). The lowest tier with a
        # change that fits gives its smallest such change; when none fits, the lowest tier its largest saving.
        tiers = [[s for s in options if _tier(s, current) == t] for t in range(3)]
        fitting = [[s for s in tier if s.fits] for tier in tiers]
        pick = next((tier[-1] for tier in fitting if tier), None) or next(tier[0] for tier in tiers if tier)
        steps.append(pick)
        current = pick.settings
        if pick.fits:
            break
    return steps


def _tier(suggestion, settings) -> int:
    """0: keeps the GPUs and the batch; 1: a smaller batch; 2: more GPUs."""
    if _setting(suggestion.settings, "n_gpus") > _setting(settings, "n_gpus"):
        return 2
    return 1 if _setting(suggestion.settings, "batch_size") < _setting(settings, "batch_size") else 0


def suggestions_frame(suggestions, unit: str = "GB") -> pd.DataFrame:
    """A table of suggestions: change, memory per GPU after it, memory saved, fits, cost (sizes in `unit`)."""
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
    rows = [{"change": s.change, f"per GPU after ({unit})": s.total / UNITS[unit],
             f"saved ({unit})": s.saved / UNITS[unit], "fits": "yes" if s.fits else "no", "cost": s.cost}
            for s in suggestions]
    columns = ["change", f"per GPU after ({unit})", f"saved ({unit})", "fits", "cost"]
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
def _largest_true(fits_at, low, high):
    """The largest n in [low, high] with fits_at(n), given fits_at(low) and that fits_at is monotone
    (True up to some n, then False); bisection over whole numbers."""
    while low < high:
        middle = (low + high + 1) // 2
        if fits_at(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _grow_while_fitting(fits_at, start, cap):
    """The largest n in [start, cap] that fits, when fits_at(start) holds: double until it stops
    fitting (or reaches cap), then bisect between the last fit and the first miss."""
    low = start
    while low < cap:
        probe = min(2 * low, cap)
        if not fits_at(probe):
            return _largest_true(fits_at, low, probe - 1)
        low = probe
    return low


def _search(model, gpu, reserved_bytes, settings, searched, limit_name, limit, high):
    """(fits_at(n), the checked limit) for a search over one setting: is the run with `searched` = n
    judged to fit as suggest_changes judges (the peak, the reserve, the margin)?"""
    gpu = get_gpu(gpu)
    reserved_bytes = validate.count("reserved_bytes", reserved_bytes, low=0, high=gpu.memory_bytes, scalar=True)
    limit = validate.count(limit_name, limit, high=high, scalar=True)
    others = {k: v for k, v in settings.items() if k != searched}

    def fits_at(n):
        return _fits(_total(model, {**others, searched: n}), gpu, reserved_bytes)

    return fits_at, limit


def fewest_gpus_that_fit(model, gpu, *, reserved_bytes=CUDA_CONTEXT_BYTES, max_gpus=MAX_GPUS, **settings) -> int | None:
    """The fewest GPUs (any whole number from 1 to max_gpus) on which the run fits per GPU, else None.

    settings are training_memory's keyword arguments; their zero_stage is kept (n_gpus is what is
    searched). Without ZeRO every GPU holds a full copy, so more GPUs never help: 1 or None. ZeRO
    divides sharded parts by the GPU count (rounded up), so memory per GPU never grows with more
    GPUs and a bisection over the count is exact.
    """
    fits_at, max_gpus = _search(model, gpu, reserved_bytes, settings, "n_gpus", "max_gpus", max_gpus, validate.MAX_GPUS)

    if fits_at(1):
        return 1
    if not fits_at(max_gpus):
        return None
    low, high = 1, max_gpus  # low misses, high fits: find the first that fits
    while high - low > 1:
        middle = (low + high) // 2
        if fits_at(middle):
            high = middle
        else:
            low = middle
    return high


def largest_batch_that_fits(model, gpu, *, reserved_bytes=CUDA_CONTEXT_BYTES, max_batch=validate.MAX_BATCH,
                            **settings) -> int | None:
    """The largest batch size (sequences per GPU) at which the run fits, up to max_batch; None when
    even one sequence does not fit. Needs seq_len (without it the batch changes nothing).

    Memory grows with the batch (activations scale with it, nothing else shrinks), so doubling and
    then bisecting over whole numbers finds the exact largest batch.
    """
    fits_at, max_batch = _search(model, gpu, reserved_bytes, settings, "batch_size", "max_batch", max_batch,
                                 validate.MAX_BATCH)
    if settings.get("seq_len") is None:
        raise ValueError("seq_len is needed to search the batch size: without it activations, the only part "
                         "the batch changes, are not counted")
    return _grow_while_fitting(fits_at, 1, max_batch) if fits_at(1) else None


def longest_sequence_that_fits(model, gpu, *, reserved_bytes=CUDA_CONTEXT_BYTES, max_seq_len=validate.MAX_SEQ,
                               **settings) -> int | None:
    """The longest sequence (tokens) at which the run fits, up to max_seq_len; None when even one
    token does not fit. This is the memory's answer only: a model reads well only up to the context
    it was trained on (see trained_context).

    Memory grows with the sequence length (activations, and eager attention's s x s scores), so
    doubling and then bisecting over whole numbers finds the exact longest sequence.
    """
    fits_at, max_seq_len = _search(model, gpu, reserved_bytes, settings, "seq_len", "max_seq_len", max_seq_len,
                                   validate.MAX_SEQ)

    return _grow_while_fitting(fits_at, 1, max_seq_len) if fits_at(1) else None


# The context each LLaMA-style preset was trained on: max_position_embeddings in its config.json
# (meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf: 4096; meta-llama/Meta-Llama-3-8B, -70B: 8192;
# mistralai/Mistral-7B-v0.1: 32768) and LLaMA-1's 2,048 tokens (Touvron et al. 2023, section 2.3;
# huggyllama/llama-65b's config: 2048). GPT-2, GPT-3 and BERT carry theirs as max_positions.
TRAINED_CONTEXT = {"llama-65b": 2048, "llama-2-7b": 4096, "llama-2-13b": 4096, "llama-2-70b": 4096,
                   "llama-3-8b": 8192, "llama-3-70b": 8192, "mistral-7b": 32768}


def trained_context(model, config=None) -> int | None:
    """The longest context a model was trained on, or None when unknown: its learned positions
    (GPT-2, GPT-3, BERT), a pasted config's max_position_embeddings, or the preset table above."""
    from .presets import resolve_model

    shape = resolve_model(model)
    if shape.max_positions is not None:
        return int(shape.max_positions)
    if isinstance(config, dict) and isinstance(config.get("max_position_embeddings"), int) \
            and not isinstance(config.get("max_position_embeddings"), bool) and config["max_position_embeddings"] > 0:
        return config["max_position_embeddings"]
    return TRAINED_CONTEXT.get(shape.name)
