"""Finetuning methods: which parameters train, which are added, and how the base is stored.

Each method turns a model shape and a precision recipe into a Plan: the bytes of the stored
weights and the sets of trainable parameters (each with its own storage bits). training.py turns
a Plan into gradients, optimizer states and activations.
"""

from __future__ import annotations

from dataclasses import field, replace

from .arrays import any_true, is_ndarray, np

from . import validate
from .flags import option
from .formats import DOUBLE_QUANT_GROUP, get_format, quant_constant_bits, quant_constant_bytes  # noqa: F401
from .models import GROUPS, LOAD_DTYPES, LORA_TARGETS, ModelShape, ParamTensor, lora_targets
from .multimodal import VISION_CHOICES
from .notes import Note
from .recipes import EIGHT_BIT_BLOCK, EIGHT_BIT_MIN_SIZE, RECIPES, Recipe
from .sources import resolve_model
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd



@frozen
class TrainableSet:
    """Trainable parameters stored in one format: count, tensor count, Adafactor size, bits.

    small_params: parameters in tensors under bitsandbytes' min_8bit_size (4,096 elements), which keep
    fp32 states in 8-bit optimizers; state_blocks: 256-value blocks (EIGHT_BIT_BLOCK) of the other tensors, counted per
    tensor (None where the tensors are unknown: a uniform model).
    """

    label: str
    params: object
    tensors: object
    factored: object
    bits: int
    small_params: object = 0
    state_blocks: object = None

    @classmethod
    def of(cls, label: str, stats: SetStats, bits: int) -> TrainableSet:
        """A set from the summed statistics of its tensors."""
        return cls(label=label, params=stats.params, tensors=stats.tensors, factored=stats.factored, bits=bits,
                   small_params=stats.small, state_blocks=stats.blocks)


@frozen
class SetStats:
    """Sums over a list of tensors: elements, tensors, Adafactor size, elements in tensors under
    EIGHT_BIT_MIN_SIZE, and EIGHT_BIT_BLOCK-blocks of the other tensors. Numbers or numpy arrays."""

    params: object = 0
    tensors: object = 0
    factored: object = 0
    small: object = 0
    blocks: object = 0

    @classmethod
    def tensor(cls, numel, factored) -> SetStats:
        """One tensor of `numel` elements (an array of sizes works too)."""
        if not is_ndarray(numel):  # one tensor: Python ints, no numpy
            small = numel < EIGHT_BIT_MIN_SIZE
            return cls(numel, 1, factored, int(numel) if small else 0, 0 if small else -(-int(numel) // EIGHT_BIT_BLOCK))
        is_small = np.asarray(numel) < EIGHT_BIT_MIN_SIZE
        small = np.where(is_small, numel, 0)
        blocks = np.where(is_small, 0, -(-np.asarray(numel) // EIGHT_BIT_BLOCK))
        if np.ndim(numel) == 0:
            small, blocks = int(small), int(blocks)
        return cls(numel, 1, factored, small, blocks)

    def __add__(self, other: SetStats) -> SetStats:
        return SetStats(*(a + b for a, b in zip(self._values(), other._values())))

    def times(self, k) -> SetStats:
        """The statistics of k copies (k blocks)."""
        return SetStats(*(k * a for a in self._values()))

    def _values(self):
        return (self.params, self.tensors, self.factored, self.small, self.blocks)


@frozen
class Plan:
    """What a method keeps: weight bytes, trainable sets, and where backward must store activations.

    layers_storing: how many blocks keep activations for backward (those from the first trainable
    block on); embeddings_trainable: the embedding output needs its dropout mask too.
    """

    weight_bytes: object
    quantization_constant_bytes: object
    trainable: tuple
    adapter_params: object
    layers_storing: object
    embeddings_trainable: bool
    notes: tuple = field(default=())  # Note objects

    @property
    def trainable_params(self):
        """All trainable parameters (base and adapters)."""
        return sum((s.params for s in self.trainable), 0)


def _stats(tensors: list[ParamTensor]) -> SetStats:
    total = SetStats()
    for t in tensors:
        total = total + SetStats.tensor(t.numel, t.factored_size)
    return total


def _copies_stats(rows) -> SetStats:
    """The statistics of (group, tensor, copies) rows (ModelShape.tensor_copies)."""
    total = SetStats()
    for _, t, copies in rows:
        total = total + SetStats.tensor(t.numel, t.factored_size).times(copies)
    return total


def load_dtype(recipe: Recipe) -> str | None:
    """The dtype transformers loads the weights in for this recipe: "bf16" or "fp16" for the pure 16-bit recipes, whose
    weights are the loaded ones; None where they are fp32, or where the trainer casts the whole module to 16 bits
    (the mixed recipes: DeepSpeed's engine calls module.half() or module.bfloat16())."""
    return recipe.name if recipe.name in LOAD_DTYPES and recipe.states_follow_params else None


def kept_fp32_extra_bytes(shape: ModelShape, dtype, bits: int = 16, groups=GROUPS):
    """Bytes a load in `dtype` adds to `bits`-bit storage: the parameters it keeps in fp32 (ModelShape.kept_in_fp32)
    take 32 bits, not `bits`."""
    return shape.fp32_kept_params(dtype, groups) * (32 - bits) // 8


def kept_fp32_notes(shape: ModelShape, dtype, trains: bool = False) -> tuple:
    """A note naming what a load in `dtype` keeps in fp32 (ModelShape.kept_in_fp32), or ()."""
    kept = shape.fp32_kept_params(dtype)
    if not kept:
        return ()
    names = sorted({t.name for _, t, _ in shape.tensor_copies() if shape.kept_in_fp32(t, dtype)})
    text = (f"{kept:,} parameters ({', '.join(names)}) stay in fp32, 4 B each: transformers keeps them so when it "
            f"loads the model in {dtype} (its _keep_in_fp32_modules)")
    return (Note("kept_in_fp32", text + ("; where they train, their gradients and optimizer states are fp32 too"
                                         if trains else "")),)


def _group_weight_bytes(shape: ModelShape, recipe: Recipe):
    """Bytes of every base tensor stored at the recipe's weight bits, ceil(n_params * bits / 8), and the parameters
    its load keeps in fp32 at 4 B (kept_fp32_extra_bytes)."""
    bits = recipe.weight_bits
    return validate.ceil_div(shape.n_params * bits, 8) + kept_fp32_extra_bytes(shape, load_dtype(recipe), bits)


def _trainable_sets(label: str, shape: ModelShape, rows, recipe: Recipe) -> tuple:
    """The trainable sets of (group, tensor, copies) rows: one at the recipe's weight bits, and one at 32 bits for the
    tensors the load keeps in fp32 (ModelShape.kept_in_fp32: their gradients and, as PyTorch keeps states in each
    parameter's dtype, their optimizer states fp32 too). A Parameter built with requires_grad=False
    (ParamTensor.trainable) has no gradient or optimizer states."""
    dtype = load_dtype(recipe)
    rows = [row for row in rows if row[1].trainable]
    kept = [row for row in rows if shape.kept_in_fp32(row[1], dtype)]
    stored = [row for row in rows if not shape.kept_in_fp32(row[1], dtype)] if kept else rows
    sets = (TrainableSet.of(label, _copies_stats(stored), recipe.weight_bits),)
    if kept:
        sets += (TrainableSet.of(label + " kept in fp32 by the load", _copies_stats(kept), 32),)
    return sets


def _with_vision(plan: Plan, shape: ModelShape, method, recipe: Recipe) -> Plan:
    """The plan with a vision-language model's tower and projector (memmath/multimodal.py), as method.vision says.

    vision="trains": both train; "projector": the projector trains, the tower is frozen; "frozen": neither
    trains (their weights are in every plan's weight bytes, as the shape's n_params). What trains is a
    set of its own in the recipe's weight format. Full, Freeze and Adapters train them in place
    (requires_grad); LoRA and QLoRA as peft's modules_to_save does (peft 0.21 ModulesToSaveWrapper: the
    frozen original and a trainable copy, so the weights grow by the copy). A trained part needs backward
    through every block of the language model (to its first block's image positions). A Note says
    what trains; a text model's plan is returned as it is, and a vision= other than the method's
    default on a text model is refused by name (there is no tower to set).
    """
    vision = method.vision
    if shape.vision is None:
        if vision != type(method).vision:
            raise validate.FieldError("vision", f"vision={vision!r} applies to a vision-language model (a config with "
                                      f"a vision_config); {shape.name or 'this model'} has no vision tower")
        return plan
    if isinstance(method, QLoRA) and vision != "frozen":
        raise validate.FieldError("vision", f"QLoRA with vision={vision!r}: bitsandbytes quantizes the vision tower's "
                                  "and projector's nn.Linear weights (transformers converts every one but lm_head), "
                                  "which cannot train then; QLoRA models vision='frozen' only")
    notes = [shape.vision.trainable_note(vision)]
    if isinstance(method, LoRA):
        notes.append(_vision_lora_note(shape, method))
    tensors = shape.vision.trainable(vision)
    if not tensors:
        return replace(plan, notes=plan.notes + tuple(notes))
    stats = _stats(tensors)
    label = "vision tower and projector" if vision == "trains" else "projector"
    weights = plan.weight_bytes
    if isinstance(method, LoRA):  # peft's modules_to_save: a trainable copy beside the frozen original
        weights = weights + validate.ceil_div(stats.params * recipe.weight_bits, 8)
        module = "vision tower and projector" if vision == "trains" else "projector"
        notes.append(Note("vision_modules_to_save", f"the {module} trains as peft's modules_to_save keeps it: the "
                          f"frozen original and a trainable copy ({stats.params:,} parameters more in the weights)"))
    return replace(plan, weight_bytes=weights, layers_storing=shape.n_layers,
                   trainable=plan.trainable + (TrainableSet.of(label, stats, recipe.weight_bits),),
                   notes=plan.notes + tuple(notes))


def _vision_lora_note(shape: ModelShape, method) -> Note:
    """LoRA on a vision-language model: the language model's blocks only, and what peft's plain names would add."""
    modules = sorted({adapter.module for adapter in shape.lora_adapters(method.targets)})
    every = set(method.targets) == set(LORA_TARGETS)
    reached = shape.vision.peft_name_overlap(modules)
    text = ("LoRA adapts the language model's blocks only, as peft does with target_modules limited to them (e.g. "
            f"r'.*language_model.*\\.({'|'.join(modules)})')")
    if every:
        text += ("; peft's 'all-linear' also adapts every nn.Linear of the vision tower and projector "
                 f"({len(shape.vision.linear_modules())} more matrices), which memmath does not count")
    elif reached:
        text += (f"; the plain names {modules} would also adapt the vision tower's {', '.join(reached)}, which memmath "
                 "does not count")
    return Note("lora_language_model_only", text)


class Method:
    """Base class: a finetuning method. `describe()` says in one line what trains."""

    def plan(self, shape: ModelShape, recipe: Recipe) -> Plan:  # pragma: no cover - abstract
        """The Plan for this shape and recipe: stored weight bytes, trainable sets, storing layers."""
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        """One line saying what trains, for the assumptions shown beside every number."""
        raise NotImplementedError

    def trainable_params(self, model):
        """Parameters this method trains on `model` (a ModelShape or a preset name), adapters
        included; an array when a setting is an array (LoRA(rank=np.array([...])))."""
        # The count does not depend on the storage format: any recipe's plan has the same count.
        return self.plan(resolve_model(model), RECIPES["bf16"]).trainable_params

    def head_trains(self, shape: ModelShape) -> bool:
        """Whether the output head's matrix trains. A head tied to the token embedding (GPT-2) is the
        same matrix, so it trains exactly when the embeddings do."""
        return True


# --vision: written once, carried by every method's vision field
VISION_OPTION = option(
    "--vision", "a vision-language model (gemma3, llava, mistral3, qwen2_vl, qwen2_5_vl): frozen (the vision tower and "
    "projector stay frozen: the language model alone trains), projector (the projector trains too) or trains (both "
    "train too); default trains for full, frozen for the others", "PART", choices=VISION_CHOICES)


@frozen
class Full(Method):
    """Full finetuning: every parameter trains (Nt = N), every block stores activations.

    Weights ceil(N x weight_bits / 8) bytes; training.py adds gradients, master copy and optimizer
    states for all N parameters. vision (a vision-language model only): "trains" (the default: the
    vision tower and projector train too), "projector" (the tower frozen) or "frozen" (the language
    model alone trains, the usual finetune); see _with_vision.
    """

    vision: str = field(default="trains", metadata=VISION_OPTION)

    def __post_init__(self):
        object.__setattr__(self, "vision", validate.choice("vision", self.vision, VISION_CHOICES))

    def plan(self, shape, recipe):
        # the tower and projector: as vision= says (_with_vision)
        rows = shape.tensor_copies(tuple(g for g in GROUPS if g != "vision"))
        trainable = _trainable_sets("all weights", shape, rows, recipe)
        return _with_vision(Plan(weight_bytes=_group_weight_bytes(shape, recipe),
                                 quantization_constant_bytes=0, trainable=trainable, adapter_params=0,
                                 layers_storing=shape.n_layers, embeddings_trainable=True,
                                 notes=kept_fp32_notes(shape, load_dtype(recipe), trains=True)), shape, self, recipe)

    def describe(self):
        return {"trains": "full finetuning: every weight trains",
                "projector": "full finetuning: every weight but the vision tower's trains (the tower is frozen)",
                "frozen": "full finetuning of the language model: its every weight trains; the vision tower and "
                          "projector are frozen"}[self.vision]


@frozen
class Freeze(Method):
    """Partial finetuning: only the last `trainable_layers` blocks train (or give `frozen_layers`).

    What else trains, precisely: the final norm (train_final_norm, default True) and an untied
    output head (train_head, default True; BERT's pooler and classifier count as the head). The
    embeddings stay frozen unless train_embeddings=True. When the head is tied to the token
    embedding (GPT-2) it is the same matrix, so it trains only together with the embeddings.
    Blocks before the first trainable one store no activations for backward.
    """

    trainable_layers: object = field(default=None, metadata=option(
        "--trainable-layers", "freeze: how many of the last blocks train (required with --method freeze)", "K", low=0))
    frozen_layers: object = None
    train_embeddings: bool = False
    train_final_norm: bool = True
    train_head: bool = True
    vision: str = field(default="frozen", metadata=VISION_OPTION)

    def __post_init__(self):
        object.__setattr__(self, "vision", validate.choice("vision", self.vision, VISION_CHOICES))
        if (self.trainable_layers is None) == (self.frozen_layers is None):
            raise ValueError("Freeze needs exactly one of trainable_layers or frozen_layers")
        for name in ("trainable_layers", "frozen_layers"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, validate.count(name, value, low=0, high=validate.MAX_LAYERS))
        for name in ("train_embeddings", "train_final_norm", "train_head"):
            validate.flag(name, getattr(self, name))

    def layers_trained(self, shape: ModelShape):
        """How many blocks train in this shape (checked against its n_layers)."""
        n = shape.n_layers
        if self.trainable_layers is not None:
            k = self.trainable_layers
            if any_true(k > n):
                raise ValueError(f"trainable_layers must be from 0 to n_layers ({n}); got {_show(k)}")
            return k
        if any_true(self.frozen_layers > n):
            raise ValueError(f"frozen_layers must be from 0 to n_layers ({n}); got {_show(self.frozen_layers)}")
        return n - self.frozen_layers

    def head_trains(self, shape: ModelShape) -> bool:
        """Whether the output head's matrix trains: train_head, or for a head tied to the token
        embedding (the same matrix) train_embeddings."""
        return self.train_embeddings if shape.tied_embeddings else self.train_head

    def plan(self, shape, recipe):
        k = self.layers_trained(shape)
        rows = [("layer", t, count) for layout, count in shape.last_blocks(k)  # the last k blocks, by their layouts
                for t in layout.tensors("layer")]
        # a head tied to the embedding lists only its untied tensors (ERNIE 4.5's lm_head bias), which train_head trains
        head = self.head_trains(shape) or (self.train_head and shape.tied_embeddings)
        chosen = [g for g, on in (("embeddings", self.train_embeddings), ("final_norm", self.train_final_norm),
                                  ("head", head)) if on]
        rows += [(group, t, 1) for group in chosen for t in shape.tensors(group)]
        trainable = _trainable_sets("unfrozen weights", shape, rows, recipe)
        # Backward must reach the first trainable block; with trainable embeddings it reaches them all.
        storing = shape.n_layers if self.train_embeddings else k
        notes = kept_fp32_notes(shape, load_dtype(recipe), trains=True)
        if self.train_head and not self.head_trains(shape):
            notes += (Note("tied_head_frozen",
                          "the output head is tied to the frozen token embedding, so it stays frozen too"),)
        return _with_vision(Plan(weight_bytes=_group_weight_bytes(shape, recipe),
                                 quantization_constant_bytes=0, trainable=trainable, adapter_params=0,
                                 layers_storing=storing, embeddings_trainable=self.train_embeddings, notes=notes),
                            shape, self, recipe)

    def groups(self, shape: ModelShape) -> pd.DataFrame:
        """One row per part of the model: its blocks, its parameters, and whether it trains here.

        Rows: embeddings, frozen blocks, trainable blocks, final norm, output head (columns part,
        blocks, params, trainable, note). A tied head has no parameters of its own (it is the token
        embedding matrix) and trains only with the embeddings. The trainable rows sum to
        plan(shape, ...).trainable_params. Takes one layer count, not an array.
        """
        import pandas as pd  # only here: `import memmath` stays numpy-only
        k = self.layers_trained(shape)
        if is_ndarray(k):
            raise ValueError("Freeze.groups needs a single number of layers, not an array")
        n = shape.n_layers

        def span(first, last):
            return f"{first}-{last}" if last > first else (str(first) if last == first else "none")

        head_params = shape.group_params("head")
        if shape.tied_embeddings:
            head_note = "tied to the token embedding: the same matrix, trains only with the embeddings"
        elif shape.family == "bert":
            head_note = "BERT's pooler (and classifier, if any) counts as the head"
        elif head_params:
            head_note = "an untied output matrix (vocabulary x width)"
        else:
            head_note = "this model has no separate head"
        norm_note = "the last norm before the head" if shape.group_params("final_norm") else "this model has no final norm"
        rows = [
            ("embeddings", "", shape.group_params("embeddings"), self.train_embeddings,
             "token (and position) embeddings; frozen unless train_embeddings=True"),
            ("frozen blocks", span(1, n - k), shape.blocks_params(range(n - k)), False,
             "the first blocks: weights kept, no gradients, no optimizer states"),
            ("trainable blocks", span(n - k + 1, n), shape.blocks_params(range(n - k, n)), True,
             "the last blocks: gradients and optimizer states"),
            ("final norm", "", shape.group_params("final_norm"),
             self.train_final_norm and bool(shape.group_params("final_norm")), norm_note),
            ("output head", "", head_params, self.head_trains(shape) and bool(head_params), head_note),
        ]
        if shape.vision is not None:  # a vision-language model: its tower and projector first, as vision= says
            v = shape.vision
            rows[:0] = [("vision tower", str(v.n_blocks), v.tower_params, self.vision == "trains",
                         f"the {v.label} tower; frozen unless vision='trains'"),
                        ("projector", "", v.projector_params, self.vision != "frozen",
                         "between the tower and the language model; trains with vision='projector' or 'trains'")]
        return pd.DataFrame(rows, columns=["part", "blocks", "params", "trainable", "note"])

    def describe(self):
        what = (f"the last {_show(self.trainable_layers)} blocks" if self.trainable_layers is not None
                else f"all but the first {_show(self.frozen_layers)} blocks")
        extras = [name for name, on in (("final norm", self.train_final_norm), ("head", self.train_head),
                                        ("embeddings", self.train_embeddings)) if on]
        return (f"freezing: {what} train" + (f", plus the {' and '.join(extras)}" if extras else "")
                + _vision_words(self.vision, "frozen"))


def _vision_words(vision: str, default: str) -> str:
    """What a method's vision= adds to its description ("" at the method's default)."""
    if vision == default:
        return ""
    return {"trains": "; the vision tower and projector train too",
            "projector": "; the projector trains, the vision tower is frozen",
            "frozen": "; the vision tower and projector are frozen"}[vision]


def _adapter_tensors(h, m) -> list[ParamTensor]:
    # Houlsby et al. 2019: down-projection h -> m and up-projection m -> h, each with a bias:
    # 2*m*h + m + h parameters per adapter.
    return [ParamTensor("adapter.down.weight", "adapters", (m, h), linear=True),
            ParamTensor("adapter.down.bias", "adapters", (m,)),
            ParamTensor("adapter.up.weight", "adapters", (h, m), linear=True),
            ParamTensor("adapter.up.bias", "adapters", (h,))]


def _frozen_base_plus_adapters(shape, recipe, adapter_stats: SetStats, adapter_bits, extra_sets=(),
                               weight_bytes=None, constants=0):
    adapter_set = TrainableSet.of("adapters", adapter_stats, adapter_bits)
    adapter_params = adapter_stats.params
    base_bytes = _group_weight_bytes(shape, recipe) if weight_bytes is None else weight_bytes
    adapter_bytes = validate.ceil_div(adapter_params * adapter_bits, 8)
    return Plan(weight_bytes=base_bytes + adapter_bytes, quantization_constant_bytes=constants,
                trainable=(adapter_set, *extra_sets), adapter_params=adapter_params,
                layers_storing=shape.n_layers, embeddings_trainable=False,
                notes=kept_fp32_notes(shape, load_dtype(recipe)))


class AdapterMethod(Method):
    """A method that adds trainable adapters to a frozen base (Adapters, LoRA, QLoRA)."""

    adapter_format: str | None

    def head_trains(self, shape: ModelShape) -> bool:
        """Whether the output head's matrix trains (only Adapters(train_head=True) trains an untied one)."""
        return bool(getattr(self, "train_head", False)) and not shape.tied_embeddings

    def adapter_bits(self, recipe: Recipe) -> int:
        """Bits per adapter element: adapter_format's, or the recipe's weight bits when it is None."""
        return recipe.weight_bits if self.adapter_format is None else get_format(self.adapter_format).bits


def _check_adapter_format(adapter_format):
    if adapter_format is not None:
        fmt = get_format(adapter_format)
        if fmt.kind != "float":
            raise ValueError(f"adapter_format must be a floating format (fp32, bf16, fp16); got {validate.describe(adapter_format)}")


@frozen
class Adapters(AdapterMethod):
    """Houlsby adapters: two bottleneck modules (width `bottleneck`) in every block; the base is frozen.

    Each adapter has 2*m*h + m + h parameters (Houlsby et al. 2019). train_norms and train_head
    add the layer norms and the head, as the paper did; by default only the adapters train, as the
    article counts them. adapter_format None stores adapters like the model's weights.
    """

    bottleneck: object = field(default=64, metadata=option("--bottleneck", "adapters: bottleneck width (default 64)",
                                                          "M"))
    train_norms: bool = False
    train_head: bool = False
    adapter_format: str | None = None
    vision: str = field(default="frozen", metadata=VISION_OPTION)

    def __post_init__(self):
        object.__setattr__(self, "vision", validate.choice("vision", self.vision, VISION_CHOICES))
        object.__setattr__(self, "bottleneck", validate.count("bottleneck", self.bottleneck))
        validate.flag("train_norms", self.train_norms)
        validate.flag("train_head", self.train_head)
        _check_adapter_format(self.adapter_format)

    def params_per_block(self, shape: ModelShape):
        """Adapter parameters in one block: 2 x (2*m*h + m + h)."""
        return 2 * _stats(_adapter_tensors(_need_width(shape, "Adapters"), self.bottleneck)).params

    def plan(self, shape, recipe):
        h = _need_width(shape, "Adapters")
        adapter = _stats(_adapter_tensors(h, self.bottleneck))
        L = shape.n_layers
        extra = []
        if self.train_norms:
            norms = [row for row in shape.tensor_copies(("layer",)) if row[1].component == "norms"]
            outside = ([t for t in shape.tensors("final_norm")] +
                       [t for t in shape.tensors("embeddings") if t.component == "norms"])
            extra.append(TrainableSet.of("layer norms", _copies_stats(norms) + _stats(outside), recipe.weight_bits))
        if self.train_head and shape.tensors("head"):
            extra.append(TrainableSet.of("head", _stats(shape.tensors("head")), recipe.weight_bits))
        return _with_vision(_frozen_base_plus_adapters(shape, recipe, adapter.times(2 * L), self.adapter_bits(recipe),
                                                       extra), shape, self, recipe)

    def describe(self):
        extras = [n for n, on in (("layer norms", self.train_norms), ("head", self.train_head)) if on]
        return (f"Houlsby adapters: two bottleneck-{_show(self.bottleneck)} adapters per block train"
                + (f", plus the {' and '.join(extras)}" if extras else "") + "; the base is frozen"
                + _vision_words(self.vision, "frozen"))


@frozen
class LoRA(AdapterMethod):
    """LoRA (Hu et al. 2021): W + B @ A on the target matrices of every block; the base is frozen.

    Each adapted d_in x d_out matrix adds r x (d_in + d_out) trainable parameters (A: r x d_in,
    B: d_out x r). adapter_format defaults to fp32 because peft's get_peft_model keeps adapters in
    fp32 on a 16-bit base (autocast_adapter_dtype=True); None stores them like the base weights.
    Weights: the frozen base at the recipe's bits plus ceil(adapters x adapter bits / 8).
    On a vision-language model the adapters go on the language model's blocks only (peft's target_modules
    limited to them) and vision says what of the tower and projector trains: "frozen" (the default),
    "projector" or "trains", as peft's modules_to_save (_with_vision).

    dropout: peft's lora_dropout, the probability p of the nn.Dropout each adapted module applies to the
    adapter's input, lora_B(lora_A(dropout(x))) (peft 0.21 tuners/lora/layer.py, Linear.forward). The
    default 0.0 is peft's LoraConfig default, where the module is an nn.Identity and nothing more is kept;
    published recipes set 0.05-0.1. With p > 0 every adapted module keeps the dropout's mask and A keeps
    the dropped copy of its input instead of the input (the exact activation model counts both; the
    weights, gradients and states do not change). peft's ParamWrapper (a mixture of experts' router and
    routed experts) refuses lora_dropout != 0, and so does this class for those targets.
    """

    rank: object = field(default=8, metadata=option("--rank", "LoRA/QLoRA rank (default 8)", "R"))
    targets: tuple = field(default=("q", "v"), metadata=option(
        "--targets", f"LoRA/QLoRA matrices, comma-separated from {','.join(LORA_TARGETS)}, or all, or attention "
        "(q,k,v,o) (default q,v)", "LIST", kind="targets"))
    adapter_format: str | None = "fp32"
    vision: str = field(default="frozen", metadata=VISION_OPTION)
    dropout: float = field(default=0.0, metadata=option(
        "--lora-dropout", "LoRA/QLoRA: peft's lora_dropout on the adapters' input (default 0, peft's; recipes use "
        "0.05-0.1): each adapted matrix then keeps a dropout mask and a dropped copy of its input", "P",
        kind="probability", dest="lora_dropout"))

    def __post_init__(self):
        object.__setattr__(self, "vision", validate.choice("vision", self.vision, VISION_CHOICES))
        object.__setattr__(self, "rank", validate.count("rank", self.rank, high=2**16))
        object.__setattr__(self, "targets", lora_targets(self.targets))
        _check_adapter_format(self.adapter_format)
        object.__setattr__(self, "dropout", lora_dropout(self.dropout))

    def _adapter_stats(self, shape):
        """The adapters of every block: each adapted tensor's A and B times the blocks that have it."""
        if shape.family == "uniform":
            raise ValueError(f"{type(self).__name__} needs a model with named matrices (a preset, from_hf_config, "
                             "gpt2_model/llama_model/bert_model); a uniform model has none")
        r, total = self.rank, SetStats()
        for (_module, d_in, d_out, k), copies in shape.lora_adapter_copies(self.targets):
            # A: k*r x d_in, B: d_out x k*r (k = 1 but for routed experts' 3-D tensors: models.LoraAdapter)
            total = total + (SetStats.tensor(k * r * d_in, k * r + d_in)
                             + SetStats.tensor(d_out * k * r, d_out + k * r)).times(copies)
        return total

    def params_per_block(self, shape: ModelShape):
        """LoRA parameters in one block: r x sum of (d_in + d_out) over the adapted matrices (a shape of one block
        layout)."""
        if shape.mixed:
            raise ValueError(f"{shape.name or shape.arch} has blocks of {len(shape.layouts())} layouts: ask "
                             "params_per_block of each of shape.layouts()")
        return self._adapter_stats(replace(shape, n_layers=1, layer_types=None)).params

    def matrix_params(self, d_in, d_out):
        """LoRA parameters on one d_in x d_out matrix: A (r x d_in) and B (d_out x r), r x (d_in + d_out)."""
        return self.rank * (d_in + d_out)

    def plan(self, shape, recipe):
        _check_wrapped_dropout(shape, self)
        plan = _frozen_base_plus_adapters(shape, recipe, self._adapter_stats(shape), self.adapter_bits(recipe))
        return _with_vision(replace(plan, notes=plan.notes + _moe_lora_notes(shape, self)), shape, self, recipe)

    def describe(self):
        fmt = self.adapter_format or "the base format"
        names = ("all (what peft's all-linear adapts)" if lora_targets("all") == self.targets
                 else ", ".join(self.targets))
        drop = f", dropout {self.dropout:g} on the adapters' input" if self.dropout else ""
        return (f"LoRA rank {_show(self.rank)} on {names} ({fmt} adapters{drop}); the base is frozen"
                + _vision_words(self.vision, "frozen"))


DROPOUT_FIELD = "LoRA dropout"  # the FieldError's field: Run's own `dropout` (the model's dropout) is another


def lora_dropout(value) -> float:
    """LoRA's dropout probability checked: a real number from 0 up to (not including) 1, as a float.

    peft builds nn.Dropout(p=lora_dropout), and torch's dropout takes p in [0, 1]; at p = 1 every input
    is zeroed, so no adapter ever trains: refused here. A sweep of dropouts is not taken (the masks
    exist or not, per run). FieldError (field "LoRA dropout") names the field and the range.
    """
    if is_ndarray(value) and value.ndim > 0:
        raise validate.FieldTypeError(DROPOUT_FIELD, "LoRA dropout must be one number from 0 up to (not including) 1 "
                                      f"(LoRA(dropout=p), peft's lora_dropout), not an array; got {_show(value)}")
    allowed = "a probability from 0 up to (not including) 1 (LoRA(dropout=p), peft's lora_dropout)"
    try:
        p = validate.real(DROPOUT_FIELD, value, low=0.0, high=1.0)
    except validate.FieldTypeError:
        raise validate.FieldTypeError(DROPOUT_FIELD, f"LoRA dropout must be {allowed}; got "
                                      f"{validate.describe(value)}") from None
    except validate.FieldError:
        raise validate.FieldError(DROPOUT_FIELD, f"LoRA dropout must be {allowed}; got "
                                  f"{validate.describe(value)}") from None
    if p >= 1.0:
        raise validate.FieldError(DROPOUT_FIELD, f"LoRA dropout must be {allowed}: at 1 every adapter input is "
                                  f"zeroed and nothing trains; got {p:g}")
    return p


def _check_wrapped_dropout(shape: ModelShape, method) -> None:
    """peft 0.21's ParamWrapper (the router's and routed experts' parameters) raises for lora_dropout != 0
    ("does not work with lora_dropout != 0", peft/tuners/lora/layer.py): refused by name here too."""
    if not (method.dropout and shape.n_experts):
        return
    wrapped = sorted({a.module for a, _ in shape.lora_adapter_copies(method.targets)
                      if a.module == "gate.weight" or a.module.startswith("experts.")})
    if wrapped:
        raise validate.FieldError(DROPOUT_FIELD, f"LoRA dropout {method.dropout:g} on {', '.join(wrapped)}: peft "
                                  "0.21's ParamWrapper, which adapts a mixture of experts' router and routed experts, "
                                  "does not work with lora_dropout != 0 (it raises); use dropout=0.0, or targets "
                                  "without the router and the experts")


def _moe_lora_notes(shape: ModelShape, method) -> tuple:
    """For a mixture of experts, a Note saying which tensors the targets adapt (a router and expert tensors
    are no linear layers, so the target names alone do not say it); () for other models."""
    if not shape.n_experts:
        return ()
    parts = []
    for module, _d_in, _d_out, k in dict.fromkeys(a for a, _ in shape.lora_adapter_copies(method.targets)):
        if module == "gate.weight":
            parts.append("the router's weight (mlp.gate.weight)")
        elif module.startswith("experts."):
            per_expert = "2r" if k == 2 * shape.n_experts else "r"
            parts.append(f"the routed experts' {module.removeprefix('experts.')} (rank {per_expert} per expert)")
        elif shape.shared_expert_intermediate_size and module in ("gate_proj", "up_proj", "down_proj"):
            parts.append(f"shared_expert.{module}")
        else:
            parts.append(module)
    parts = list(dict.fromkeys(parts))  # one name per module, though blocks of other widths (Gemma 4's) repeat it
    wrapped = any("router" in part or "experts" in part for part in parts)
    return (Note("lora_moe_tensors", f"LoRA adapts in each block {', '.join(parts)}, as peft 0.21 makes them"
                 + (" (the router and the expert tensors through its ParamWrapper)" if wrapped else "")),)


@frozen
class QLoRA(LoRA):
    """QLoRA (Dettmers et al. 2023): LoRA on a base whose linear weights are 4-bit NF4 (or FP4, or 8-bit).

    Every linear weight (the blocks' matrices and BERT's pooler; not the embeddings or the output
    head, which transformers' bitsandbytes integration leaves unconverted) is stored in
    quant_type "nf4" or "fp4" (bnb.nn.Linear4bit: 4 bits per value) with one absmax constant per
    block of 64 values: fp32 constants (32/64 = 0.5 extra bits per weight), or with double
    quantization 8-bit constants plus one fp32 constant per 256 of them (8/64 + 32/(64*256) =
    0.127 bits). quant_type "int8" is an 8-bit base (bnb.nn.Linear8bitLt, LLM.int8; Dettmers et
    al. 2022): int8 values plus one fp32 scale per output row (Int8Params.SCB); double_quant and
    quant_block do not apply to it. Embeddings, norms, biases and the output head keep the
    recipe's weight format.

    layout "paper" counts the constants as the paper does; "bitsandbytes" adds what
    bitsandbytes 0.50's QuantState keeps besides them for every 4-bit matrix: its 16-value fp32
    code map (64 B) and, with double quantization, the nested 256-value fp32 code map (1,024 B)
    and the fp32 offset (4 B) (measured by validation/quantized.py). int8 keeps nothing more.
    """

    double_quant: bool | None = field(default=None, metadata=option(  # None: True for nf4/fp4; int8 has none
        "--no-double-quant", "qlora with nf4/fp4: fp32 absmax constants, without QLoRA's double quantization",
        value=False, dest="no_double_quant"))
    quant_block: int = 64
    quant_type: str = field(default="nf4", metadata=option(
        "--quant-type", "qlora: the base's format, nf4 (default) or fp4 (bitsandbytes Linear4bit), or int8 "
        "(Linear8bitLt, LLM.int8)", "TYPE", choices=("nf4", "fp4", "int8")))
    layout: str = field(default="paper", metadata=option(
        "--quant-layout", "qlora: count the constants as the QLoRA paper does (default) or as bitsandbytes stores "
        "them (adds each matrix's code maps)", "LAYOUT", choices=("paper", "bitsandbytes"), dest="quant_layout"))

    def __post_init__(self):
        super().__post_init__()
        # Stored as checked ("INT8" -> "int8"): plan() and describe() compare the lowercase names.
        object.__setattr__(self, "quant_type", validate.choice("quant_type", self.quant_type, QUANT_TYPES))
        object.__setattr__(self, "layout", validate.choice("layout", self.layout, QUANT_LAYOUTS))
        if self.double_quant is None:
            object.__setattr__(self, "double_quant", self.quant_type != "int8")
        validate.flag("double_quant", self.double_quant)
        object.__setattr__(self, "quant_block", validate.count("quant_block", self.quant_block, high=2**16,
                                                                scalar=True))
        if self.quant_type == "int8" and (self.double_quant or self.quant_block != 64):
            raise ValueError("double_quant and quant_block apply to quant_type 'nf4' and 'fp4'; quant_type 'int8' "
                             "(bitsandbytes' Linear8bitLt) keeps one fp32 scale per row: leave them at their defaults "
                             f"(got double_quant={self.double_quant!r}, quant_block={self.quant_block!r})")

    def plan(self, shape, recipe):
        _check_wrapped_dropout(shape, self)
        if self.quant_type == "int8":
            weight_bytes, constants = int8_weight_bytes(shape, recipe.weight_bits, load_dtype(recipe))
        else:
            weight_bytes, constants = quantized_weight_bytes(shape, "nf4", recipe.weight_bits,
                                                             block=self.quant_block, double_quant=self.double_quant,
                                                             dtype=load_dtype(recipe))
            if self.layout == "bitsandbytes":
                constants = constants + quantized_matrices(shape) * bnb_code_map_bytes(self.double_quant)
        notes = ()
        if self.layout == "paper" and self.quant_type != "int8":
            notes = (Note("quant_maps_not_counted",
                          f"quantization constants as the paper counts them; bitsandbytes also keeps "
                          f"{bnb_code_map_bytes(self.double_quant):,} B of code maps per quantized matrix "
                          "(QLoRA(layout='bitsandbytes') counts them)"),)
        plan = _frozen_base_plus_adapters(shape, recipe, self._adapter_stats(shape), self.adapter_bits(recipe),
                                          weight_bytes=weight_bytes, constants=constants)
        return _with_vision(replace(plan, notes=plan.notes + notes + _moe_lora_notes(shape, self)), shape, self,
                            recipe)

    def describe(self):
        if self.quant_type == "int8":
            return "QLoRA: 8-bit base (LLM.int8, one fp32 scale per row) + " + super().describe()
        dq = "with" if self.double_quant else "without"
        return f"QLoRA: {self.quant_type.upper()} base ({dq} double quantization) + " + super().describe()


QUANT_TYPES = ("nf4", "fp4", "int8")  # bitsandbytes' Linear4bit quant_type, and Linear8bitLt
QUANT_LAYOUTS = ("paper", "bitsandbytes")
BNB_CODE_MAP_BYTES = 16 * 4  # QuantState.code: the 16 fp32 levels of NF4/FP4, one copy per matrix (bitsandbytes 0.50)
BNB_NESTED_BYTES = 256 * 4 + 4  # double quantization: state2.code (256 fp32, create_dynamic_map) + the fp32 offset


def bnb_code_map_bytes(double_quant: bool) -> int:
    """Bytes bitsandbytes' QuantState keeps per 4-bit matrix besides the absmax constants: the 16-value
    fp32 code map, and with double quantization the nested 256-value code map and the fp32 offset
    (bitsandbytes 0.50.2 functional.quantize_4bit; measured by validation/quantized.py)."""
    return BNB_CODE_MAP_BYTES + (BNB_NESTED_BYTES if validate.flag("double_quant", double_quant) else 0)


def quantized_matrices(shape: ModelShape):
    """How many linear weight matrices bitsandbytes replaces (the tensors flagged linear, every block)."""
    return sum(copies for _, t, copies in shape.tensor_copies() if t.linear)


def int8_weight_bytes(shape: ModelShape, other_bits: int, dtype=None):
    """(weight bytes, constant bytes) of LLM.int8 (bnb.nn.Linear8bitLt): each linear weight int8 plus one
    fp32 scale per output row (Int8Params.SCB, int8_vectorwise_quant); every other tensor at other_bits, or at 32
    where a load in `dtype` keeps it in fp32 (ModelShape.kept_in_fp32)."""
    weights, constants = 0, 0
    for _, tensor, repeat in shape.tensor_copies():
        if tensor.linear:  # the weight is d_out x d_in: one scale per output row
            weights = weights + repeat * tensor.numel
            constants = constants + repeat * 4 * tensor.shape[0]
        else:
            bits = 32 if shape.kept_in_fp32(tensor, dtype) else other_bits
            weights = weights + repeat * validate.ceil_div(tensor.numel * bits, 8)
    return weights, constants



def bits_per_weight(fmt, *, block: int = 64, double_quant: bool = True) -> float:
    """Bits one weight costs stored in `fmt`: the format's bits, plus for a block-quantized format
    (nf4, int4 and int8, stored with absmax constants as bitsandbytes does) quant_constant_bits.
    bf16: 16.0; nf4 with double quantization at block 64: 4.127 (QLoRA, section 3)."""
    number_format = get_format(fmt)
    if number_format.kind == "float":
        return float(number_format.bits)
    return number_format.bits + quant_constant_bits(block=block, double_quant=double_quant)


def quantized_weight_bytes(shape: ModelShape, fmt, other_bits: int, *, block: int = 64, double_quant: bool = True,
                           dtype=None):
    """(weight bytes, constant bytes) with linear weights in `fmt` and every other tensor at other_bits (at 32 where a
    load in `dtype` keeps it in fp32: ModelShape.kept_in_fp32).

    Counts tensor by tensor, as bitsandbytes quantizes each nn.Linear weight separately.
    """
    bits = get_format(fmt).bits
    weights, constants = 0, 0
    for _, tensor, repeat in shape.tensor_copies():
        n = tensor.numel
        if tensor.linear:
            weights = weights + repeat * validate.ceil_div(n * bits, 8)
            constants = constants + repeat * quant_constant_bytes(n, block=block, double_quant=double_quant)
        else:
            bits_here = 32 if shape.kept_in_fp32(tensor, dtype) else other_bits
            weights = weights + repeat * validate.ceil_div(n * bits_here, 8)
    return weights, constants


def _need_width(shape: ModelShape, method: str):
    if shape.hidden_size is None:
        raise ValueError(f"{method} needs the model's hidden_size (use a preset, from_hf_config or "
                         "uniform_model(..., hidden_size=..., n_heads=...))")
    return shape.hidden_size


def _show(value) -> str:
    if is_ndarray(value):
        return f"{value.min()}..{value.max()}" if value.size > 1 else str(value.item())
    return str(value)

