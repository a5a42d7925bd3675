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
resolving again whatever the caller left to the defaults. A Serve is the same for serving one replica.
Each field the command line sets carries its flag and help beside it (option()); memmath.cli
generates its options from them.
"""

from __future__ import annotations

from dataclasses import field, fields

from .arrays import is_ndarray

from . import validate
from .activations import ATTENTION_KINDS
from .amp_trace import MATH_REFUSAL
from .checkpoints import STORED_FORMATS, get_weights_name
from .formats import FORMATS, get_format
from .hf_activations import traces
from .kbit import check_kbit_prep, check_trainable
from .layout import DEGREES, MAX_MICRO_BATCHES, MAX_VIRTUAL_STAGES, SCHEDULES
from .layout import check as check_parallel
from .loss import LOSSES, check_loss
from .flags import option
from .methods import Full, Method, QLoRA
from .models import ModelShape
from .notes import Note
from .offload import check as check_offload, compile_notes, parse_cli as parse_offload
from .preference import DPO
from .recipes import OPTIMIZERS, RECIPES, Optimizer, Recipe, get_optimizer, get_recipe
from .sources import resolve_model
from .values import frozen

# A serving setup's defaults, written once beside Serve (memmath.inference, the serving planner and the command line
# read them here).
SERVING_DEFAULTS = dict(
    weights_format="bf16",  # the format most checkpoints ship in
    kv_format="bf16",  # the cache in the compute format, as transformers keeps it
    batch_size=1,  # one sequence: the smallest replica, the one that must fit first
    context_len=2048,  # tokens per sequence, prompt and output: the training runs' default length too
    attention="sdpa",  # what transformers picks
)

ACTIVATION_MODELS = ("transformers", "textbook")
DEVICES = ("cuda", "cpu")
SHARDINGS = ("even", "fsdp2", "zero_redundancy")


# Micro-batches per optimizer step: up to as many as the largest batch (validate.MAX_BATCH) has sequences.
MAX_GRAD_ACCUM = validate.MAX_BATCH
DEFAULT_SEQ_LEN = 2048  # tokens per sequence: a common finetuning length (Llama 2's context was 4,096)
# The fields that depend on the model and are resolved from it when left out (None).
RESOLVED = ("attention", "dropout", "activations")
MIXER_KERNELS = ("cuda", "torch")


@frozen(kw_only=True)
class Run:
    """One training step's settings, each concrete after construction (see the module docstring)."""

    model: object = field(kw_only=False)  # a preset name, a ModelShape or a parameter count; kept as a ModelShape
    # pure bf16: the article's 16-bit recipe, 2 B per weight, gradient and state
    precision: object = field(default="bf16", metadata=option(
        "--precision", "{choices} (default bf16: pure bf16, the article's 8 B/param with Adam)", "RECIPE",
        choices=lambda: list(RECIPES)))
    # AdamW: what transformers' Trainer and most finetuning recipes use
    optimizer: object = field(default="adamw", metadata=option(
        "--optimizer", "{choices} (default adamw)", "NAME", choices=lambda: list(OPTIMIZERS)))
    method: Method = field(default_factory=Full)  # full finetuning: every weight trains (the article's start)
    # sequences per GPU per step: the smallest step, the one most runs must fit first
    batch_size: object = field(default=1, metadata=option("--batch", "micro-batch per GPU (default 1)", "B"))
    # micro-batches of batch_size per optimizer step (gradient accumulation): 1, transformers' Trainer default
    # (gradient_accumulation_steps=1); each micro-batch's forward and backward runs with the gradients held
    grad_accum_steps: int = field(default=1, metadata=option(
        "--grad-accum", "micro-batches per optimizer step, gradients accumulated (default 1); the effective batch is "
        "B x K", "K"))
    # None leaves the activations out (weights, gradients and states only)
    seq_len: object = field(default=DEFAULT_SEQ_LEN, metadata=option(
        "--seq", f"tokens per sequence (default {DEFAULT_SEQ_LEN:,}, said so in the output)", "S"))
    # transformers' default: gradient checkpointing is opt-in
    checkpointing: bool = field(default=False, metadata=option("--checkpointing", "gradient checkpointing on"))
    # None: what transformers picks (SDPA; eager where SDPA cannot run the model)
    attention: str | None = field(default=None, metadata=option(
        "--attention", "sdpa (fused) or eager (keeps the s x s scores); default: what transformers picks", "KIND",
        choices=("sdpa", "eager")))
    # None: the config's dropout probability > 0 (a model built in code: True)
    dropout: bool | None = field(default=None, metadata=option(
        "--no-dropout", "no dropout masks kept (default: the config's dropout probability)", value=False))
    # None: the exact "transformers" model where it applies, else "textbook"
    activations: str | None = field(default=None, metadata=option(
        "--activations", "activation model: transformers (what the PyTorch models keep; auto, the default, picks it "
        "where it applies) or textbook (Korthikanti et al. 2022)", "MODEL", choices=("auto", *ACTIVATION_MODELS),
        auto="auto"))
    device: str = "cuda"  # what users plan for; "cpu" is what validation/measure.py measures
    # Linear-attention, Mamba-2 and short-convolution mixers (Qwen3-Next, Qwen 3.5, the Mamba-2 hybrids, LFM2) run
    # their CUDA kernels where flash-linear-attention, mamba-ssm or causal-conv1d is installed ("cuda") and
    # transformers' PyTorch path where not, and always on the CPU ("torch"); the two save different tensors.
    # None: "torch" on the CPU, else "cuda".
    mixer_kernels: str | None = field(default=None, metadata=option(
        "--mixer-kernels", "linear-attention, Mamba-2 and short-convolution mixers: cuda (flash-linear-attention, "
        "mamba-ssm, causal-conv1d installed; the default on a GPU) or torch (transformers' PyTorch path, which runs "
        "without them)", "K", choices=MIXER_KERNELS))
    # data-parallel GPUs; each holds a full copy unless ZeRO shards it
    n_gpus: int = field(default=1, metadata=option("--gpus", "data-parallel GPUs (default 1)", "N"))
    # ZeRO stage 0-3 across the n_gpus (3 = FSDP full sharding)
    zero_stage: int = field(default=0, metadata=option(
        "--zero-stage", "ZeRO stage 0-3 across the --gpus (3 = FSDP full sharding; default 0)", "S", low=0, high=3))
    # "even": ZeRO's division; "fsdp2"/"zero_redundancy": what that engine stores
    sharding: str = field(default="even", metadata=option(
        "--sharding", "what each GPU stores of a sharded part: even (ZeRO's division, default), fsdp2 (PyTorch FSDP2's "
        "per-tensor shards, with --zero-stage 3) or zero_redundancy (PyTorch's ZeroRedundancyOptimizer, with "
        "--zero-stage 1)", "ENGINE", choices=SHARDINGS))
    rank: int = 0  # which GPU's share an engine's sharding reports (0 to n_gpus - 1)
    # Splitting the model itself (memmath/parallel.py): n_gpus = data x tp x pp x cp; 1 each, one GPU's model whole.
    # tensor parallelism: heads and MLP width split across tp GPUs (Megatron-LM)
    tp: int = field(default=1, metadata=option(
        "--tp", "tensor-parallel degree: heads and MLP width split across T GPUs (default 1); --gpus is the total, "
        "data parallel = gpus / (tp x pp x cp)", "T"))
    # pipeline parallelism: the blocks split into pp stages
    pp: int = field(default=1, metadata=option("--pp", "pipeline-parallel stages (default 1)", "P"))
    # context parallelism: the sequence split across cp GPUs (ring attention)
    cp: int = field(default=1, metadata=option(
        "--cp", "context-parallel degree: the sequence split (default 1)", "C"))
    # expert parallelism: a mixture of experts' routed experts split across ep GPUs
    ep: int = field(default=1, metadata=option(
        "--ep", "expert-parallel degree: routed experts split (default 1)", "E"))
    # with tp: norms and dropout on seq_len / tp tokens (Korthikanti et al. 2022)
    sequence_parallel: bool = field(default=False, metadata=option(
        "--sequence-parallel", "with --tp: norms and dropout on seq / tp tokens"))
    # "1f1b" (Megatron-LM's default), "gpipe", or "interleaved" (interleaved 1F1B)
    pp_schedule: str = field(default="1f1b", metadata=option(
        "--pp-schedule", "pipeline schedule: 1f1b (default), gpipe or interleaved (interleaved 1F1B)", "S"))
    # micro-batches of batch_size per pipeline step (m; pp >= 2 only)
    micro_batches: int = field(default=1, metadata=option(
        "--micro-batches", "micro-batches per pipeline step (with --pp)", "M"))
    # interleaved 1F1B: stages per GPU (v >= 2), the blocks cut into pp x v stages
    virtual_stages: int = field(default=1, metadata=option(
        "--virtual-stages", "with --pp-schedule interleaved: pipeline stages per GPU (2 or more)", "V"))
    # A right-padded batch (sequences of different lengths): its attention mask has zeros, so transformers gives
    # every attention call a mask tensor (masking_utils.py), and under SDPA k and v lose grouped-query sharing.
    padded: bool = field(default=False, metadata=option(
        "--padded", "a right-padded batch: an attention mask with zeros, which every attention call then gets"))
    # Sequences packed into each row without padding, each with its own position ids (a packing collator's
    # position_ids): transformers builds a block-diagonal mask from them, which every attention call then gets.
    packed: bool = field(default=False, metadata=option(
        "--packed", "sequences packed into each row with their own position ids (no padding)"))
    # QLoRA: peft's prepare_model_for_kbit_training run on the quantized base, which casts every parameter it left in
    # 16 bits (norms, embeddings, head) to fp32 (memmath/checkpoints.py kbit_prep_bytes). False: the base as loaded.
    kbit_prep: bool = field(default=False, metadata=option(
        "--kbit-prep", "QLoRA: peft's prepare_model_for_kbit_training casts the base's unquantized parameters to fp32"))
    # The causal LM loss (memmath/loss.py): "transformers" (its default cross-entropy over materialized logits),
    # "chunked" (TRL 1.15+'s tiled log-probabilities) or "fused" (Liger's fused linear cross-entropy, cut
    # cross-entropy): the logits never built whole.
    loss: str = field(default="transformers", metadata=option(
        "--loss", "the loss: {choices} (transformers, the default: materialized logits; chunked: TRL's tiled "
        "log-probabilities; fused: Liger's fused linear cross-entropy)", "L", choices=lambda: list(LOSSES)))
    # Parts kept in host memory (memmath/offload.py): "optimizer" (DeepSpeed ZeRO-Offload), "params" (ZeRO-Infinity's
    # offload_param; FSDP2's CPUOffloadPolicy with sharding="fsdp2"), "activations" (torch's save_on_cpu); () keeps
    # every part on the GPU, as PyTorch, DeepSpeed and FSDP2 do by default.
    offload: tuple = field(default=(), metadata=option(
        "--offload", "parts kept in host memory: optimizer (DeepSpeed ZeRO-Offload), params (ZeRO-Infinity; FSDP2's "
        "CPUOffloadPolicy with --sharding fsdp2), activations (save_on_cpu); repeat it or give a comma list "
        "(default: none)", "PARTS", append=True, parse=parse_offload))
    # offloaded parts in page-locked host memory: FSDP2's CPUOffloadPolicy default
    pin_memory: bool = field(default=True, metadata=option(
        "--no-pin-memory", "offloaded parts in pageable host memory (default: pinned)", value=False))
    # torch.compile: noted, since the activations are counted as eager mode saves them
    compile: bool = field(default=False, metadata=option(
        "--compile", "torch.compile: noted; the activations stay eager mode's count"))
    # Data parallelism without ZeRO as torch's DistributedDataParallel runs it: by default its all-reduce buckets hold
    # a second copy of the gradients; gradient_as_bucket_view=True makes the gradients views into them (torch docs)
    gradient_as_bucket_view: bool = field(default=False, metadata=option(
        "--gradient-as-bucket-view", "data parallel without ZeRO: DDP(gradient_as_bucket_view=True), the gradients "
        "views into the all-reduce buckets (default: the buckets are a second copy of the gradients)"))
    # FSDP2 (sharding="fsdp2"): fully_shard(reshard_after_forward=...), True its default: each block's gathered
    # parameters are freed after its forward and gathered again in backward; False keeps them to its backward.
    # Other engines ignore it.
    reshard_after_forward: bool = field(default=True, metadata=option(
        "--no-reshard-after-forward", "FSDP2 (--sharding fsdp2): fully_shard(reshard_after_forward=False), each "
        "block's gathered weights kept from its forward to its backward (default: freed and gathered again)",
        value=False))
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
            mixer_kernels=(validate.choice("mixer_kernels", self.mixer_kernels, MIXER_KERNELS)
                           if self.mixer_kernels is not None else None),
            n_gpus=validate.count("n_gpus", self.n_gpus, high=validate.MAX_GPUS, scalar=True),
            zero_stage=validate.count("zero_stage", self.zero_stage, low=0, high=3, scalar=True),
            sharding=validate.choice("sharding", self.sharding, SHARDINGS),
        )
        values["rank"] = validate.count("rank", self.rank, low=0, high=max(values["n_gpus"] - 1, 0), scalar=True)
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
        values["reshard_after_forward"] = validate.flag("reshard_after_forward", self.reshard_after_forward)
        if values["padded"] and values["packed"]:
            raise validate.FieldError("packed", "packed=True packs sequences so that no row needs padding: pass "
                                      "padded=True or packed=True, not both")
        for name in ("padded", "packed"):
            if values[name]:
                _check_padded(shape, self.method, name)
        values["kbit_prep"] = check_kbit_prep(validate.flag("kbit_prep", self.kbit_prep), self.method)
        values["loss"] = validate.choice("loss", self.loss, LOSSES)
        check_trainable(shape, self.method)
        check_parallel(values, shape, self.method)
        values["pin_memory"] = validate.flag("pin_memory", self.pin_memory)
        values["compile"] = validate.flag("compile", self.compile)
        values["offload"] = check_offload(self.offload, values, shape, self.method)
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
        if values["mixer_kernels"] is None:
            values["mixer_kernels"] = "torch" if values["device"] == "cpu" else "cuda"
        notes = compile_notes(values["compile"])
        resolved = _resolve(shape, self.method, recipe, values["device"], values["seq_len"], values.get("activations"),
                            values.get("attention"), values.get("dropout"), notes, values["mixer_kernels"])
        defaulted = frozenset(name for name in (*RESOLVED, "mixer_kernels") if given[name] is None)
        for name, value in zip(RESOLVED, resolved):
            values[name] = value
        check_loss(values)
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
    if shape.family != "llama" or shape.vision is not None:
        raise validate.FieldError(name, f"{name}=True is modelled for LLaMA-layout decoders (Llama, Mistral, Qwen, "
                                  f"Gemma, Phi-3); got a {shape.family} model")
    record = shape.architecture
    if record is not None and record.mixer_kernels:
        # LFM2's Lfm2ShortConv (and the other linear-attention and Mamba-2 mixers) multiply their input by the padding
        # mask (apply_mask_to_padding_states, modeling_lfm2.py): a step of the forward the trace does not replay
        raise validate.FieldError(name, f"{name}=True is not modelled for {record.title}: its mixers multiply their "
                                  "input by the batch's padding mask, which the trace does not replay; pass "
                                  "sequences of one length")
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


@frozen(kw_only=True)
class Serve:
    """One replica serving a model: what memmath.plan_serving, `memmath infer` and lesson 7 ask about.

    Each default is memmath.SERVING_DEFAULTS' (the reason beside it, above). The
    planner judges one setup, so the sizes are single whole numbers (a sweep of contexts goes to
    memmath.inference_memory). The model is resolved to a ModelShape and the formats to their
    names, so the same question is the same (hashable) value."""

    model: object = field(kw_only=False)  # a preset name, a ModelShape or a parameter count; kept as a ModelShape
    # None: as the checkpoint stores them (its quantization_config, memmath/checkpoints.py), else the default
    weights_format: object = field(default=None, metadata=option(
        "--weights", "serving format of the weights: {choices} (default: as the checkpoint stores them, else "
        f"{SERVING_DEFAULTS['weights_format']})", "FORMAT", choices=lambda: [*FORMATS, "fp8", *STORED_FORMATS]))
    kv_format: object = field(default=SERVING_DEFAULTS["kv_format"], metadata=option(
        "--kv", f"format of the KV cache (default {SERVING_DEFAULTS['kv_format']})", "FORMAT",
        choices=lambda: [*FORMATS, "fp8"]))
    batch_size: int = field(default=SERVING_DEFAULTS["batch_size"], metadata=option(
        "--batch", f"sequences at once (default {SERVING_DEFAULTS['batch_size']})", "B"))
    context_len: int = field(default=SERVING_DEFAULTS["context_len"], metadata=option(
        "--context", f"tokens per sequence, prompt and output (default {SERVING_DEFAULTS['context_len']:,}, said so in "
        "the output)", "N"))
    attention: str = field(default=SERVING_DEFAULTS["attention"], metadata=option(
        "--attention", f"sdpa or eager (default {SERVING_DEFAULTS['attention']})", "KIND", choices=("sdpa", "eager")))

    def __post_init__(self):
        model = resolve_model(self.model)
        weights = self.weights_format
        if weights is None:
            weights = model.stored_format or SERVING_DEFAULTS["weights_format"]
        values = dict(
            model=model,
            weights_format=get_weights_name(weights) if isinstance(weights, str) else weights,
            kv_format=_format_name(self.kv_format),
            batch_size=validate.count("batch_size", self.batch_size, high=validate.MAX_BATCH, scalar=True),
            context_len=validate.count("context_len", self.context_len, high=validate.MAX_SEQ, scalar=True),
            attention=validate.choice("attention", self.attention, ATTENTION_KINDS),
        )
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        model = repr(self.model.name) if self.model.name else repr(self.model)
        return "Serve(" + ", ".join([f"model={model}"] + [f"{k}={v!r}" for k, v in self.settings().items()]) + ")"

    def settings(self) -> dict:
        """Every setting but the model, as memmath.inference_memory takes them."""
        return {name: getattr(self, name) for name in SERVE_SETTINGS}

    def replace(self, **changes) -> Serve:
        """A new serving setup with `changes`."""
        unknown = set(changes) - set(SERVE_SETTINGS) - {"model"}
        if unknown:
            name = sorted(unknown)[0]
            raise validate.FieldTypeError(name, f"{name} is not a serving setting; settings: {', '.join(SERVE_SETTINGS)}")
        return Serve(**{"model": self.model, **self.settings(), **changes})


SERVE_SETTINGS = tuple(f.name for f in fields(Serve) if f.name != "model")


def _format_name(value):
    """A registered number format by its name (get_format's spellings: "bfloat16" is "bf16"); a custom one as itself."""
    return get_format(value).name if isinstance(value, str) else get_format(value)


def as_serve(model, **settings) -> Serve:
    """A Serve from a Serve (with no other settings) or from a model and keyword settings (the keyword forms)."""
    if isinstance(model, Serve):
        if settings:
            raise TypeError(f"pass either a Serve or a model with settings, not both (got {', '.join(settings)})")
        return model
    unknown = set(settings) - set(SERVE_SETTINGS)
    if unknown:
        name = sorted(unknown)[0]
        raise validate.FieldTypeError(name, f"{name} is not a serving setting; settings: {', '.join(SERVE_SETTINGS)}")
    return Serve(model, **settings)


def _name(spec, given):
    """A registered recipe or optimizer by its name (repr stays short); a custom one as itself."""
    return spec.name if isinstance(given, str) else given


def sdpa_supported(shape: ModelShape) -> bool:
    """Whether transformers runs this model's attention with SDPA: Gemma2PreTrainedModel has no SDPA, and SDPA
    refuses a softcap (transformers 5.24 integrations/sdpa_attention.py), so softcapped attention runs eager."""
    record = shape.architecture
    return not ((record is not None and not record.sdpa) or shape.attn_softcap)


def _resolve(shape: ModelShape, method, recipe, device, seq_len, activations, attention, dropout, notes,
             mixer_kernels) -> tuple:
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
        reason = _why_not_exact(shape, method, recipe, device, seq_len, attention, dropout, mixer_kernels)
        if reason:
            activations = "textbook"
            notes.append(Note("activations_textbook_fallback",
                              f"activations: the textbook model (Korthikanti et al. 2022), since the exact "
                              f"(transformers) model {reason}"))
    return attention, dropout, activations


def why_not_exact(run: Run) -> str | None:
    """Why the exact activation model does not replay `run` (None when it does): what made a run that was not given
    its activation model take the textbook one."""
    return _why_not_exact(run.model, run.method, run.recipe, run.device, run.seq_len, run.attention, run.dropout,
                          run.mixer_kernels)


def _why_not_exact(shape, method, recipe, device, seq_len, attention, dropout, mixer_kernels) -> str | None:
    """Why the exact activation model does not replay this run (None when it does)."""
    if isinstance(method, DPO):  # preference training: the policy's method decides (memmath/preference.py)
        method = method.base
    if seq_len is None or not shape.has_shape:
        return "needs a sequence length and a model with widths"
    reason = traces(shape, method, recipe, seq_len, attention, mixer_kernels)
    if reason and is_ndarray(seq_len) and not traces(shape, method, recipe, int(seq_len.min()), attention,
                                                     mixer_kernels):
        # The shortest lengths are exact and the longest are not (a sliding window): one model cannot
        # answer the whole sweep the way single calls answer each length, so it is refused by name.
        raise validate.FieldError("seq_len", f"seq_len: this sweep runs from {int(seq_len.min()):,} to "
                                  f"{int(seq_len.max()):,} tokens, across a limit of the exact activation model "
                                  f"(the transformers trace {reason}); sweep the lengths on each side of it in "
                                  "separate calls, or pass activations='textbook'")
    if not reason and recipe.name == "amp" and attention == "sdpa" and dropout and device == "cpu":
        reason = MATH_REFUSAL  # SDPA with dropout runs PyTorch's math kernel on the CPU only
    return reason


def ddp_bucket_bytes(run: Run, gradients) -> int:
    """Bytes of DistributedDataParallel's all-reduce buckets on one GPU: a second copy of its `gradients` where the
    run copies the model on several data-parallel GPUs without ZeRO and leaves gradient_as_bucket_view off (DDP's
    default: torch.nn.parallel.DistributedDataParallel docs; pytorch/pytorch#41954), else 0."""
    copies = run.n_gpus // (run.tp * run.pp * run.cp)
    if copies < 2 or run.zero_stage or run.sharding != "even" or run.gradient_as_bucket_view:
        return 0
    return gradients
