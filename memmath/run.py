"""A training run as one value: what the API, the command line, the planner and the lessons all ask about.

    >>> import memmath
    >>> run = memmath.Run("gpt2", batch_size=8, seq_len=512)
    >>> run.attention, run.dropout, run.activations
    ('sdpa', True, 'transformers')

Every default is written once, below, with its reason. Fields left out that depend on the model
(attention, dropout, the activation model) are resolved on construction as transformers trains
that model by default, so every field of a Run is concrete and `repr(run)` says exactly what is
assumed. Bad input raises a ValueError (or TypeError) naming the field and its allowed values
(validate.FieldError carries the field's name as `.field`). A Run is frozen and hashable (unless
it sweeps numpy arrays), so the same question is the same key: `run.replace(...)` makes a new run,
resolving again whatever the caller left to the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .arrays import is_ndarray

from . import validate
from .activations import ATTENTION_KINDS
from .methods import Full, Method
from .models import ModelShape
from .notes import Note
from .presets import resolve_model
from .recipes import Optimizer, Recipe, get_optimizer, get_recipe

ACTIVATION_MODELS = ("transformers", "textbook")
DEVICES = ("cuda", "cpu")
SHARDINGS = ("even", "fsdp2", "zero_redundancy")

# Micro-batches per optimizer step: up to as many as the largest batch (validate.MAX_BATCH) has sequences.
MAX_GRAD_ACCUM = validate.MAX_BATCH
DEFAULT_SEQ_LEN = 2048  # tokens per sequence: a common finetuning length (Llama 2's context was 4,096)
# The fields that depend on the model and are resolved from it when left out (None).
RESOLVED = ("attention", "dropout", "activations")


@dataclass(frozen=True, kw_only=True)
class Run:
    """One training step's settings, each concrete after construction (see the module docstring)."""

    model: object = field(kw_only=False)  # a preset name, a ModelShape or a parameter count; kept as a ModelShape
    precision: object = "bf16"  # pure bf16: the article's 16-bit recipe, 2 B per weight, gradient and state
    optimizer: object = "adamw"  # AdamW: what transformers' Trainer and most finetuning recipes use
    method: Method = field(default_factory=Full)  # full finetuning: every weight trains (the article's start)
    batch_size: object = 1  # sequences per GPU per step: the smallest step, the one most runs must fit first
    # micro-batches of batch_size per optimizer step (gradient accumulation): 1, transformers' Trainer default
    # (gradient_accumulation_steps=1); each micro-batch's forward and backward runs with the gradients held
    grad_accum_steps: int = 1
    seq_len: object = DEFAULT_SEQ_LEN  # None leaves the activations out (weights, gradients and states only)
    checkpointing: bool = False  # transformers' default: gradient checkpointing is opt-in
    attention: str | None = None  # None: what transformers picks (SDPA; eager where SDPA cannot run the model)
    dropout: bool | None = None  # None: the config's dropout probability > 0 (a model built in code: True)
    activations: str | None = None  # None: the exact "transformers" model where it applies, else "textbook"
    device: str = "cuda"  # what users plan for; "cpu" is what validation/measure.py measures
    n_gpus: int = 1  # data-parallel GPUs; each holds a full copy unless ZeRO shards it
    zero_stage: int = 0  # ZeRO stage 0-3 across the n_gpus (3 = FSDP full sharding)
    sharding: str = "even"  # "even": ZeRO's division; "fsdp2"/"zero_redundancy": what that engine stores
    rank: int = 0  # which GPU's share an engine's sharding reports (0 to n_gpus - 1)
    # Splitting the model itself (memmath/parallel.py): n_gpus = data x tp x pp x cp; 1 each, one GPU's model whole.
    tp: int = 1  # tensor parallelism: heads and MLP width split across tp GPUs (Megatron-LM)
    pp: int = 1  # pipeline parallelism: the blocks split into pp stages
    cp: int = 1  # context parallelism: the sequence split across cp GPUs (ring attention)
    ep: int = 1  # expert parallelism: a mixture of experts' routed experts split across ep GPUs
    sequence_parallel: bool = False  # with tp: norms and dropout on seq_len / tp tokens (Korthikanti et al. 2022)
    pp_schedule: str = "1f1b"  # "1f1b" (Megatron-LM's default), "gpipe", or "interleaved" (interleaved 1F1B)
    micro_batches: int = 1  # micro-batches of batch_size per pipeline step (m; pp >= 2 only)
    virtual_stages: int = 1  # interleaved 1F1B: stages per GPU (v >= 2), the blocks cut into pp x v stages
    # A right-padded batch (sequences of different lengths): its attention mask has zeros, so transformers gives
    # every attention call a mask tensor (masking_utils.py), and under SDPA k and v lose grouped-query sharing.
    padded: bool = False
    # Sequences packed into each row without padding, each with its own position ids (a packing collator's
    # position_ids): transformers builds a block-diagonal mask from them, which every attention call then gets.
    packed: bool = False
    # Data parallelism without ZeRO as torch's DistributedDataParallel runs it: by default its all-reduce buckets hold
    # a second copy of the gradients; gradient_as_bucket_view=True makes the gradients views into them (torch docs)
    gradient_as_bucket_view: bool = False
    # What construction resolved (compare=False: two runs with the same concrete fields are the same run).
    defaulted: frozenset = field(default=frozenset(), compare=False, repr=False)
    notes: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("defaulted", "notes")}
        shape = resolve_model(self.model)
        if not isinstance(self.method, Method) or type(self.method) is Method:  # the base class plans nothing
            raise validate.FieldTypeError("method", "method must be Full(), Freeze(...), Adapters(...), LoRA(...) or "
                                          f"QLoRA(...); got {validate.describe(self.method)}")
        recipe, optimizer = get_recipe(self.precision), get_optimizer(self.optimizer)
        values = dict(
            model=shape,
            precision=_name(recipe, self.precision),
            optimizer=_name(optimizer, self.optimizer),
            batch_size=validate.count("batch_size", self.batch_size, high=validate.MAX_BATCH),
            grad_accum_steps=validate.count("grad_accum_steps", self.grad_accum_steps, high=MAX_GRAD_ACCUM,
                                            scalar=True),
            seq_len=None if self.seq_len is None else validate.count("seq_len", self.seq_len, high=validate.MAX_SEQ),
            checkpointing=validate.flag("checkpointing", self.checkpointing),
            device=validate.choice("device", self.device, DEVICES),
            n_gpus=validate.count("n_gpus", self.n_gpus, high=validate.MAX_GPUS, scalar=True),
            zero_stage=validate.count("zero_stage", self.zero_stage, low=0, high=3, scalar=True),
            sharding=validate.choice("sharding", self.sharding, SHARDINGS),
        )
        values["rank"] = validate.count("rank", self.rank, low=0, high=max(values["n_gpus"] - 1, 0), scalar=True)
        from .parallel import DEGREES, MAX_MICRO_BATCHES, MAX_VIRTUAL_STAGES, SCHEDULES, check as check_parallel

        for degree in DEGREES:
            values[degree] = validate.count(degree, getattr(self, degree), high=validate.MAX_GPUS, scalar=True)
        values["sequence_parallel"] = validate.flag("sequence_parallel", self.sequence_parallel)
        values["pp_schedule"] = validate.choice("pp_schedule", self.pp_schedule, SCHEDULES)
        values["micro_batches"] = validate.count("micro_batches", self.micro_batches, high=MAX_MICRO_BATCHES,
                                                 scalar=True)
        values["virtual_stages"] = validate.count("virtual_stages", self.virtual_stages, high=MAX_VIRTUAL_STAGES,
                                                  scalar=True)
        values["padded"] = validate.flag("padded", self.padded)
        values["packed"] = validate.flag("packed", self.packed)
        values["gradient_as_bucket_view"] = validate.flag("gradient_as_bucket_view", self.gradient_as_bucket_view)
        if values["padded"] and values["packed"]:
            raise validate.FieldError("packed", "packed=True packs sequences so that no row needs padding: pass "
                                      "padded=True or packed=True, not both")
        for name in ("padded", "packed"):
            if values[name]:
                _check_padded(shape, self.method, name)
        check_parallel(values, shape, self.method)
        if self.attention is not None:
            values["attention"] = validate.choice("attention", self.attention, ATTENTION_KINDS)
        if self.dropout is not None:
            values["dropout"] = validate.flag("dropout", self.dropout)
        if self.activations is not None:
            values["activations"] = validate.choice("activations", self.activations, ACTIVATION_MODELS)
        # Every array of the run (sizes, the method's rank, layers or bottleneck, a uniform model's counts) broadcasts
        # into one sweep: refused by name past MAX_SWEEP_POINTS points, before anything is computed.
        validate.check_sweep_size(batch_size=values["batch_size"], seq_len=values["seq_len"],
                                  **{f.name: getattr(self.method, f.name) for f in fields(self.method)},
                                  n_params=shape.uniform_params, n_layers=shape.n_layers)
        if shape.from_count and not isinstance(self.method, Full):
            raise validate.FieldError("method", f"{type(self.method).__name__} needs a model with layers: pass a "
                                      "preset, a ModelShape or uniform_model(n_params, n_layers) instead of a plain "
                                      "parameter count")
        notes = []
        resolved = _resolve(shape, self.method, recipe, values["device"], values["seq_len"], values.get("activations"),
                            values.get("attention"), values.get("dropout"), notes)
        defaulted = frozenset(name for name in RESOLVED if given[name] is None)
        for name, value in zip(RESOLVED, resolved):
            values[name] = value
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "defaulted", defaulted)
        object.__setattr__(self, "notes", tuple(notes))

    def __repr__(self) -> str:
        model = repr(self.model.name) if self.model.name else repr(self.model)
        return "Run(" + ", ".join([f"model={model}"] + [f"{k}={v!r}" for k, v in self.settings().items()]) + ")"

    # ---- what the fields stand for ------------------------------------------------------
    @property
    def recipe(self) -> Recipe:
        return get_recipe(self.precision)

    @property
    def optimizer_spec(self) -> Optimizer:
        return get_optimizer(self.optimizer)

    @property
    def effective_batch(self):
        """Sequences per optimizer step on one GPU: batch_size x micro_batches x grad_accum_steps (a pipeline step
        runs micro_batches micro-batches of batch_size; times the data-parallel degree for the whole step). Memory
        follows batch_size, the micro-batch; the update sees this many sequences."""
        return self.batch_size * self.micro_batches * self.grad_accum_steps

    @property
    def swept(self) -> str | None:
        """The first setting that holds a numpy array (a sweep: batch_size, seq_len, the method's rank, layers
        or bottleneck, or the model's parameter count), else None."""
        if is_ndarray(self.batch_size):
            return "batch_size"
        if is_ndarray(self.seq_len):
            return "seq_len"
        if any(is_ndarray(getattr(self.method, f.name)) for f in fields(self.method)):
            return "method"
        return "model" if is_ndarray(self.model.uniform_params) else None

    @property
    def is_sweep(self) -> bool:
        """True when the run sweeps an array (see swept): such a run is computed, never cached."""
        return self.swept is not None

    @property
    def cache_key(self) -> tuple:
        """What an answer about this run depends on, as a cache's key: the run and what its names stand for now.

        The model is already resolved (a ModelShape, so a reassigned memmath.PRESETS entry is another
        run), but precision, optimizer and an adapter format are names: memmath.RECIPES, OPTIMIZERS
        and FORMATS may be reassigned, so the key holds the Recipe, Optimizer and NumberFormat they
        name at the time of the call.
        """
        from .formats import get_format

        adapter_format = getattr(self.method, "adapter_format", None)
        # defaulted and notes too: a run that chose what another resolved has other notes (compare=False above),
        # and a model whose shape differs only in its notes (ModelShape.notes, compare=False) says other things
        return (self, self.defaulted, self.notes, self.model.notes, self.recipe, self.optimizer_spec,
                None if adapter_format is None else get_format(adapter_format))

    @property
    def sharded(self) -> bool:
        """True when ZeRO or an engine's sharding splits a part across the GPUs."""
        return self.n_gpus > 1 and self.zero_stage > 0

    def replace(self, **changes) -> Run:
        """A new run with `changes`; the fields this one resolved from the model are resolved again."""
        unknown = set(changes) - set(SETTINGS) - {"model"}
        if unknown:
            raise validate.FieldTypeError(sorted(unknown)[0], f"{sorted(unknown)[0]} is not a setting of a Run; "
                                          f"settings: {', '.join(SETTINGS)}")
        kept = {name: getattr(self, name) for name in ("model", *SETTINGS) if name not in self.defaulted}
        return Run(**{**kept, **changes})

    def settings(self) -> dict:
        """Every setting (all fields but the model) with its concrete value, in field order."""
        return {name: getattr(self, name) for name in SETTINGS}


SETTINGS = tuple(f.name for f in fields(Run) if f.name not in ("model", "defaulted", "notes"))


def _check_padded(shape: ModelShape, method, name: str = "padded") -> None:
    """A padded or packed batch is modelled for LLaMA-layout decoders (the masks memmath/hf_activations.py traces);
    refused by name elsewhere rather than counted as a batch without a mask."""
    from .methods import QLoRA
    from .preference import DPO

    if shape.family != "llama" or shape.vision is not None:
        raise validate.FieldError(name, f"{name}=True is modelled for LLaMA-layout decoders (Llama, Mistral, Qwen, "
                                  f"Gemma, Phi-3); got a {shape.family} model")
    if isinstance(method, DPO):
        raise validate.FieldError(name, f"{name}=True is not modelled for DPO yet (its chosen and rejected "
                                  "sequences' masks are not traced)")
    if isinstance(method, QLoRA) and method.quant_type == "int8":
        raise validate.FieldError(name, f"{name}=True is not modelled for QLoRA on an int8 base yet")


def as_run(model, **settings) -> Run:
    """A Run from a Run (with no other settings) or from a model and keyword settings (the keyword forms)."""
    if isinstance(model, Run):
        if settings:
            raise TypeError(f"pass either a Run or a model with settings, not both (got {', '.join(settings)})")
        return model
    return Run(model, **settings)


def _name(spec, given):
    """A registered recipe or optimizer by its name (repr stays short); a custom one as itself."""
    return spec.name if isinstance(given, str) else given


def sdpa_supported(shape: ModelShape) -> bool:
    """Whether transformers runs this model's attention with SDPA: Gemma2PreTrainedModel has no SDPA, and SDPA
    refuses a softcap (transformers 5.24 integrations/sdpa_attention.py), so softcapped attention runs eager."""
    record = shape.architecture
    return not ((record is not None and not record.sdpa) or shape.attn_softcap)


def _resolve(shape: ModelShape, method, recipe, device, seq_len, activations, attention, dropout, notes) -> tuple:
    """(attention, dropout, activations), each left out (None) filled in as transformers trains by default.

    A model read from a config (shape.dropout_p known; the presets and gpt2_model, llama_model,
    bert_model carry their config class's defaults): SDPA attention (transformers' choice; eager for
    Gemma 2 and softcapped attention, which SDPA refuses), dropout where the config's probability
    is > 0, and the exact activation model where hf_activations traces the layout, method and
    recipe, else the textbook (Korthikanti et al. 2022) with a Note saying why. A uniform model
    or a parameter count (no config): the textbook run, eager attention with dropout, as the paper
    counts it. A chosen value is kept.
    """
    if shape.dropout_p is None:
        if activations is None:
            activations = "textbook"
            if shape.has_shape and seq_len is not None:
                notes.append(Note("activations_textbook_fallback",
                                  "activations: the textbook model (Korthikanti et al. 2022), since a model without "
                                  "a config has no layout to trace"))
        return (attention or "eager", True if dropout is None else dropout, activations)
    if attention is None:  # SDPA where transformers runs it (sdpa_supported), else eager
        attention = "sdpa" if sdpa_supported(shape) else "eager"
    if dropout is None:
        dropout = shape.dropout_p > 0
    if activations is None:
        activations = "transformers"
        reason = _why_not_exact(shape, method, recipe, device, seq_len, attention, dropout)
        if reason:
            activations = "textbook"
            notes.append(Note("activations_textbook_fallback",
                              f"activations: the textbook model (Korthikanti et al. 2022), since the exact "
                              f"(transformers) model {reason}"))
    return attention, dropout, activations


def _why_not_exact(shape, method, recipe, device, seq_len, attention, dropout) -> str | None:
    """Why the exact activation model does not replay this run (None when it does)."""
    from .preference import DPO

    if isinstance(method, DPO):  # preference training: the policy's method decides (memmath/preference.py)
        method = method.base
    if seq_len is None or not shape.has_shape:
        return "needs a sequence length and a model with widths"
    from .hf_activations import traces

    reason = traces(shape, method, recipe, seq_len, attention)
    if reason and is_ndarray(seq_len) and not traces(shape, method, recipe, int(seq_len.min()), attention):
        # The shortest lengths are exact and the longest are not (a sliding window): one model cannot
        # answer the whole sweep the way single calls answer each length, so it is refused by name.
        raise validate.FieldError("seq_len", f"seq_len: this sweep runs from {int(seq_len.min()):,} to "
                                  f"{int(seq_len.max()):,} tokens, across a limit of the exact activation model "
                                  f"(the transformers trace {reason}); sweep the lengths on each side of it in "
                                  "separate calls, or pass activations='textbook'")
    if not reason and recipe.name == "amp" and attention == "sdpa" and dropout and device == "cpu":
        from .amp_trace import MATH_REFUSAL  # SDPA with dropout runs PyTorch's math kernel on the CPU only

        reason = MATH_REFUSAL
    return reason


def ddp_bucket_bytes(run: Run, gradients) -> int:
    """Bytes of DistributedDataParallel's all-reduce buckets on one GPU: a second copy of its `gradients` where the
    run copies the model on several data-parallel GPUs without ZeRO and leaves gradient_as_bucket_view off (DDP's
    default: torch.nn.parallel.DistributedDataParallel docs; pytorch/pytorch#41954), else 0."""
    copies = run.n_gpus // (run.tp * run.pp * run.cp)
    if copies < 2 or run.zero_stage or run.sharding != "even" or run.gradient_as_bucket_view:
        return 0
    return gradients
