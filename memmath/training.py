"""Training memory: every part a training step keeps on one GPU, in integer bytes.

weights + quantization constants + gradients + gradient accumulation + master weights +
optimizer states + activations = total, for one GPU, data parallelism (ZeRO, FSDP2, ZeroRedundancyOptimizer)
and preference training (DPO: the policy at batch 2b and its reference). A model split by tensor, pipeline,
context or expert parallelism is one rank's arithmetic above this (memmath/parallel.py); memory.training_memory
answers any run. The article's example: 7B parameters in pure 16-bit with
Adam keep 2 + 2 + 4 = 8 bytes per parameter, 56 GB before activations.
"""

from __future__ import annotations

import functools

from dataclasses import field, replace

from .arrays import is_ndarray, np

from . import preference, validate
from .activations import ATTENTION_KINDS, ActivationEstimate, textbook_activations
from .hf_activations import transformers_activations
from .kbit import kbit_prep_bytes, kbit_prep_note
from .loss import with_loss
from .methods import Freeze, Full, Method, Plan, QLoRA
from .models import ModelShape
from .multimodal import activations_note
from .notes import Note
from .offload import offload_parts
from .recipes import Optimizer, Recipe
from .recipes import describe as describe_recipe  # the recipe's bytes per parameter summed for this optimizer
from .run import Run
from .sharding import sharded_parts
from .units import UNITS, unit_name
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd


PARTS = ("weights", "quantization_constants", "gradients", "gradient_accumulation", "master_weights",
         "optimizer_states", "activations")
PART_LABELS = {
    "weights": "Weights", "quantization_constants": "Quantization constants", "gradients": "Gradients",
    "gradient_accumulation": "Gradient accumulation (fp32)", "master_weights": "Master weights (fp32)",
    "optimizer_states": "Optimizer states", "activations": "Activations",
}
BNB_QMAP_BYTES = 2 * 256 * 4  # bitsandbytes' qmap1 and qmap2 (create_dynamic_map: 256 fp32 values each)


@frozen
class OptimizerStates:
    """The optimizer's bytes by kind, for the whole run (before ZeRO sharding).

    moments: the state tensors (Adam's exp_avg and exp_avg_sq, momentum buffers, Adafactor's row
    and column statistics; 8-bit Adam's fp32 states of small tensors too); step_counters: the
    4-byte fp32 `step` tensor per trainable tensor (torch.optim Adam, AdamW, Adafactor);
    block_constants: 8-bit Adam's fp32 absmax per block of values, and bitsandbytes' two shared
    quantization maps (2 x 256 fp32 values).
    """

    moments: object = 0
    step_counters: object = 0
    block_constants: object = 0

    def __post_init__(self):
        for name in ("moments", "step_counters", "block_constants"):
            value = validate.nbytes(name, getattr(self, name))
            if is_ndarray(value):  # a sweep: its parts must leave room for their sum in int64
                validate.check_sweep(name, validate.largest(value))
            object.__setattr__(self, name, value)

    @property
    def total(self):
        """moments + step_counters + block_constants: the run's optimizer_states before sharding."""
        return self.moments + self.step_counters + self.block_constants

    def __add__(self, other: OptimizerStates) -> OptimizerStates:
        return OptimizerStates(moments=self.moments + other.moments,
                               step_counters=self.step_counters + other.step_counters,
                               block_constants=self.block_constants + other.block_constants)


@frozen
class TrainingMemory:
    """Bytes one GPU holds during a training step, part by part (ints, or int64 arrays in a sweep).

    total = the sum of PARTS. trainable_params/total_params count parameters (adapters included in
    trainable_params, not in total_params); trainable_tensors counts the trainable parameter
    tensors (0 for a uniform model, which has no tensor list). optimizer_state_detail splits the
    optimizer states by kind, before ZeRO sharding. notes (Note objects) say what was left out or
    assumed.
    """

    weights: object
    quantization_constants: object
    gradients: object
    gradient_accumulation: object
    master_weights: object
    optimizer_states: object
    activations: object
    trainable_params: object
    total_params: object
    adapter_params: object
    recipe: Recipe
    optimizer: Optimizer
    method: Method
    model_name: str
    n_gpus: int
    zero_stage: int
    activations_estimated: bool
    activation_detail: ActivationEstimate | None = None
    notes: tuple = field(default=())
    trainable_tensors: object = 0
    optimizer_state_detail: OptimizerStates | None = None
    activation_model: str = "textbook"  # the activation model the numbers assumed: "textbook" or "transformers"
    attention: str = "eager"  # the attention implementation they assumed: "eager" or "sdpa"
    dropout: bool = True  # whether they kept dropout masks
    run: object = field(default=None, compare=False, repr=False)  # the Run these numbers answer
    host: object = None  # offload.HostMemory: the host RAM an offloading run needs (None: nothing offloaded)

    def __post_init__(self):
        # Checked when built: whole, non-negative bytes and counts (ints, or int64 arrays in a sweep).
        for name in (*PARTS, "trainable_params", "total_params", "adapter_params"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        try:  # one sweep: every array part has a shape the others broadcast with
            if any(is_ndarray(getattr(self, name)) for name in PARTS):
                np.broadcast_shapes(*(np.shape(getattr(self, name)) for name in PARTS))
        except ValueError:
            shapes = ", ".join(f"{name} {np.shape(getattr(self, name))}" for name in PARTS)
            raise ValueError(f"the parts must be numbers or arrays of one sweep that broadcast together; got {shapes}")\
                from None
        for name, kind in (("recipe", Recipe), ("optimizer", Optimizer), ("method", Method)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}; got {validate.describe(getattr(self, name))}")
        if self.activation_detail is not None and not isinstance(self.activation_detail, ActivationEstimate):
            raise TypeError(f"activation_detail must be an ActivationEstimate or None; "
                            f"got {validate.describe(self.activation_detail)}")
        validate.text_field("model_name", self.model_name)
        object.__setattr__(self, "n_gpus", validate.count("n_gpus", self.n_gpus, high=validate.MAX_GPUS, scalar=True))
        object.__setattr__(self, "zero_stage", validate.count("zero_stage", self.zero_stage, low=0, high=3, scalar=True))
        object.__setattr__(self, "activations_estimated",
                           validate.flag("activations_estimated", self.activations_estimated))
        validate.notes("notes", self.notes)
        # Stored as checked ("SDPA" -> "sdpa"), as every choice is: readers compare the lowercase names.
        object.__setattr__(self, "activation_model", validate.choice("activation_model", self.activation_model,
                                                                     ("textbook", "transformers")))
        object.__setattr__(self, "attention", validate.choice("attention", self.attention, ATTENTION_KINDS))
        object.__setattr__(self, "dropout", validate.flag("dropout", self.dropout))

    @property
    def total(self):
        """Sum of every part, in bytes."""
        return sum((getattr(self, part) for part in PARTS), 0)

    @property
    def without_activations(self):
        """Everything but activations: what the article's 56 GB counts."""
        return self.total - self.activations

    @property
    def trainable_state(self):
        """What the run keeps for its trainable parameters besides their weights: gradients, the
        gradient-accumulation buffer, the fp32 master copy and the optimizer states."""
        return self.gradients + self.gradient_accumulation + self.master_weights + self.optimizer_states

    def parts(self) -> dict[str, object]:
        """Part name -> bytes, in the fixed order of PARTS."""
        return {part: getattr(self, part) for part in PARTS}

    @property
    def trainable_fraction(self):
        """trainable_params / total_params. Adapters count as trainable but not in total_params, so a
        frozen base with adapters gives a small positive fraction (Houlsby: about 0.03)."""
        return self.trainable_params / self.total_params

    @property
    def assumptions(self) -> str:
        """One line naming the recipe, the optimizer, the method and the sharding behind the numbers."""
        sharding = f"; {self.n_gpus} GPUs, ZeRO stage {self.zero_stage}" if self.n_gpus > 1 or self.zero_stage else ""
        unfactored = any(note.kind == "adafactor_unfactored" for note in self.notes)
        # The sum holds for parameters stored in the recipe's formats: full finetuning and freezing. Adapters
        # may be stored in another dtype (peft's fp32 adapters), so their runs get the recipe's line alone.
        recipe = describe_recipe(self.recipe, self.optimizer, unfactored=unfactored,
                          per_parameter=isinstance(self.method, (Full, Freeze)))
        return f"{recipe} {self.optimizer.description} Method: {self.method.describe()}{sharding}."

    def to_frame(self, unit: str = "GB") -> pd.DataFrame:
        """A table: one row per part (part, label, bytes, size in `unit`, share of total).

        In a sweep (array parts) one row per point instead, with a column of bytes per part and total.
        """
        import pandas as pd  # only here: `import memmath` stays numpy-only
        unit = unit_name(unit)
        parts = self.parts()
        if any(is_ndarray(v) for v in parts.values()):
            shape = np.broadcast(*[np.asarray(v) for v in parts.values()]).shape
            frame = pd.DataFrame({p: np.broadcast_to(np.asarray(v), shape).ravel() for p, v in parts.items()})
            frame["total"] = frame[list(PARTS)].sum(axis=1)
            return frame
        total = self.total
        rows = [{"part": p, "label": PART_LABELS[p], "bytes": int(v), unit: v / UNITS[unit],
                 "share": (v / total) if total else 0.0} for p, v in parts.items()]
        return pd.DataFrame(rows)


def step_parts(run: Run):
    """(TrainingMemory, the exact model's ActivationParts or None) of a run as one GPU holds it, computed once.

    One GPU, data parallel (ZeRO's sharding or an engine's) and preference training (DPO). A run that splits
    the model (tensor, pipeline, context or expert parallelism) gets the whole model's parts here, which
    memmath/parallel.py turns into one rank's (rank_memory; memory.training_memory answers any run).

    peak_memory reads both; a repeated question (the planner asks the same runs again and again)
    is answered from a cache keyed by the run and what its names stand for (Run.cache_key), except
    for sweeps (numpy arrays), which are computed every time.
    """
    if run.is_sweep:
        return _step_parts(run)
    return _cached_step_parts(run.cache_key)


@functools.lru_cache(maxsize=512)
def _cached_step_parts(key: tuple):
    return _step_parts(key[0])


def _step_parts(run: Run):
    if isinstance(run.method, preference.DPO):  # preference training: the policy at batch 2b, a reference
        return _preference_step_parts(run)
    shape, method, recipe, opt = run.model, run.method, run.recipe, run.optimizer_spec
    n_gpus, zero_stage, sharding = run.n_gpus, run.zero_stage, run.sharding
    plan = method.plan(shape, recipe)
    notes = list(plan.notes) + list(run.notes)
    if shape.vision is not None:  # a vision-language model: what was counted, and that the tower's activations are not
        notes = list(shape.notes) + notes + ([activations_note(shape, getattr(method, "vision", "frozen"))]
                                             if run.seq_len is not None else [])
    gradients, accumulation, master, state_detail = trainable_parts(plan, recipe, opt, shape, notes)
    states = state_detail.total
    act_estimate, act_bytes, estimated, parts = _activations(run, plan, notes)

    weights, constants = plan.weight_bytes, plan.quantization_constant_bytes
    if isinstance(method, QLoRA):  # peft's prepare_model_for_kbit_training, applied (run.kbit_prep) or not: said
        weights = weights + kbit_prep_bytes(shape, recipe) * run.kbit_prep
        notes.append(kbit_prep_note(shape, recipe, run.kbit_prep))
    if sharding != "even":
        weights, gradients, states = _engine_sharding(run)
        notes.append(Note("engine_sharding", f"{sharding} on {n_gpus} GPUs: what rank {run.rank} stores, tensor by "
                          "tensor (memmath/sharding.py)"))
    elif n_gpus > 1 and zero_stage:
        # ZeRO stage 1 shards optimizer states (and the fp32 master copy), 2 adds gradients, 3 adds weights.
        states, master = shard(states, n_gpus), shard(master, n_gpus)
        if zero_stage >= 2:
            gradients, accumulation = shard(gradients, n_gpus), shard(accumulation, n_gpus)
        if zero_stage >= 3:
            weights, constants = shard(weights, n_gpus), shard(constants, n_gpus)
    if n_gpus > 1 and not zero_stage:
        notes.append(Note("data_parallel_full_copy", "data parallel without ZeRO: every GPU holds a full copy of every "
                          "part. PyTorch's DistributedDataParallel by default also keeps its all-reduce buckets, a "
                          f"second copy of the gradients ({'up to ' if validate.is_array(gradients) else ''}"
                          f"{int(validate.largest(gradients)):,} B): not a part, but the step's peak and requirement() "
                          "count them" + (", here off: gradient_as_bucket_view=True makes the gradients views into "
                          "the buckets" if run.gradient_as_bucket_view else "; DDP(gradient_as_bucket_view=True) makes "
                          "the gradients views into the buckets instead")
                          + " (torch.nn.parallel.DistributedDataParallel docs; pytorch/pytorch#41954)"))
    if zero_stage and n_gpus == 1:
        notes.append(Note("zero_on_one_gpu", f"ZeRO stage {zero_stage} on one GPU shards nothing: every part stays whole"))

    host = None
    if run.offload:  # parts kept in host memory: the GPU's share stays in the parts (memmath/offload.py)
        (weights, constants, gradients, accumulation, master, states, act_bytes), host = offload_parts(
            run, (weights, constants, gradients, accumulation, master, states, act_bytes), act_estimate, notes)
    memory = TrainingMemory(
        weights=weights, quantization_constants=constants, gradients=gradients, gradient_accumulation=accumulation,
        master_weights=master, optimizer_states=states, activations=act_bytes,
        trainable_params=plan.trainable_params, total_params=shape.n_params, adapter_params=plan.adapter_params,
        recipe=recipe, optimizer=opt, method=method, model_name=shape.name, n_gpus=n_gpus, zero_stage=zero_stage,
        activations_estimated=estimated, activation_detail=act_estimate, notes=tuple(notes),
        trainable_tensors=sum((s.tensors for s in plan.trainable), 0) if shape.tensor_count_known else 0,
        optimizer_state_detail=state_detail,
        activation_model=run.activations, attention=run.attention, dropout=run.dropout, run=run, host=host,
    )
    return memory, parts


def _preference_step_parts(run: Run):
    """(TrainingMemory, ActivationParts or None) of a DPO run: the policy's at batch 2b, its loss the DPO loop's,
    the reference copy's weights (and constants) added (memmath/preference.py holds the method and its rules)."""
    method = run.method
    shape = run.model
    if shape.family == "bert" or not shape.vocab_size:
        raise validate.FieldError("method", "DPO trains a causal language model (log-probabilities of the labels over "
                                  f"the vocabulary); {shape.name or 'this model'} is a {shape.family} encoder")
    memory, parts = step_parts(preference.policy_run(run))
    weights, constants = preference.reference_copy_bytes(method, shape, run.recipe)
    if run.n_gpus > 1 and run.zero_stage >= 3:  # the reference copy is sharded as the policy's weights are
        weights, constants = validate.ceil_div(weights, run.n_gpus), validate.ceil_div(constants, run.n_gpus)
    notes = list(memory.notes) + list(preference.reference_notes(method, shape, run.recipe))
    activations, detail = memory.activations, memory.activation_detail
    if parts is not None:
        grad = parts.loss > 0  # the logits need a gradient (some block stores)
        loss = preference.dpo_loss_bytes(run, grad)
        batch_labels = preference.INT64 * 2 * run.batch_size * run.seq_len * grad
        terms = tuple(term for term in parts.estimate.terms if term[0] != "loss") + (
            ("loss", "DPO: log-softmax output (fp32)", preference.FP32 * 2 * run.batch_size * run.seq_len * shape.vocab_size * grad),
            ("loss", "DPO: gather index (the labels, int64)", batch_labels),
            ("loss", "DPO: logsigmoid input and buffer (fp32)", loss - preference.FP32 * 2 * run.batch_size * run.seq_len
             * shape.vocab_size * grad - batch_labels))
        estimate = replace(parts.estimate, loss=loss, terms=terms)
        parts = replace(parts, estimate=estimate, loss=loss, batch=parts.batch + batch_labels)
        trains = memory.trainable_params > 0
        activations, detail = estimate.total * trains, estimate
    else:
        notes.append(Note("dpo_textbook_loss", "activations: the textbook model at batch 2b; the DPO loss's own "
                          "tensors are the exact model's only"))
    memory = replace(memory, weights=memory.weights + weights,
                     quantization_constants=memory.quantization_constants + constants, activations=activations,
                     activation_detail=detail, method=method, notes=tuple(notes), run=run)
    return memory, parts


def trainable_parts(plan: Plan, recipe: Recipe, opt: Optimizer, shape: ModelShape, notes: list):
    gradients = accumulation = master = 0
    states = OptimizerStates()
    eight_bit = False  # whether any tensor keeps 8-bit states (then bitsandbytes' quantization maps exist)
    for s in plan.trainable:
        # A set stored in its own format (fp32 LoRA adapters) gets gradients in that format.
        grad_bits = recipe.grad_bits if s.bits == recipe.weight_bits else s.bits
        gradients = gradients + validate.ceil_div(s.params * grad_bits, 8)
        accumulation = accumulation + validate.ceil_div(s.params * recipe.accum_bits, 8)
        if recipe.master_bits > s.bits:
            master = master + validate.ceil_div(s.params * recipe.master_bits, 8)
        if opt.state_bits is not None:
            state_bits = opt.state_bits
        else:
            state_bits = s.bits if recipe.states_follow_params else recipe.state_bits
        moments = constants = steps = 0
        if opt.factored:
            # Adafactor: rows + columns per matrix, the full size for vectors (Shazeer & Stern 2018).
            moments = validate.ceil_div(s.factored * state_bits, 8)
        state_values = opt.states * s.params
        if opt.min_8bit_size and shape.tensor_count_known and s.state_blocks is not None:
            # bitsandbytes, tensor by tensor: fp32 states under min_8bit_size elements; otherwise 8-bit
            # states plus one fp32 absmax per block of 256 values per state (Optimizer2State.init_state).
            small_values = opt.states * s.small_params
            moments = moments + validate.ceil_div((state_values - small_values) * state_bits, 8) + small_values * 4
            constants = opt.states * s.state_blocks * opt.block_constant_bits // 8
            eight_bit = eight_bit | ((s.params - s.small_params) > 0)
        else:
            moments = moments + validate.ceil_div(state_values * state_bits, 8)
            if opt.block_size:
                constants = validate.ceil_div(state_values, opt.block_size) * opt.block_constant_bits // 8
        if opt.step_bytes_per_tensor and shape.tensor_count_known:
            steps = opt.step_bytes_per_tensor * s.tensors
        states = states + OptimizerStates(moments=moments, step_counters=steps, block_constants=constants)
    if opt.min_8bit_size and shape.tensor_count_known:
        # bitsandbytes' two dynamic quantization maps (qmap1, qmap2: 256 fp32 values each), one pair
        # shared by every 8-bit tensor (Optimizer2State.init_state; measured: one storage per map).
        states = states + OptimizerStates(block_constants=BNB_QMAP_BYTES * eight_bit)
    if opt.step_bytes_per_tensor and not shape.tensor_count_known:
        notes.append(Note("step_counters_not_counted",
                          "the optimizer's 4-byte step counters (one per tensor) are not counted: a uniform model "
                          "has no tensor list"))
    if opt.factored and not shape.tensor_count_known:
        notes.append(Note("adafactor_unfactored", "Adafactor cannot factor a uniform model's layers (no matrix "
                          "shapes): counted as full second moments"))
    return gradients, accumulation, master, states


def _activations(run: Run, plan: Plan, notes: list):
    """(estimate, bytes, estimated?, the exact model's ActivationParts or None) of the run under the method's plan."""
    shape, recipe, method = run.model, run.recipe, run.method
    seq_len, batch_size = run.seq_len, run.batch_size
    if seq_len is None:
        notes.append(Note("activations_not_estimated",
                          "activations not estimated: pass seq_len (and batch_size) to include them"))
        return None, 0, False, None
    if not shape.has_shape:
        notes.append(Note("activations_not_estimated",
                          "activations not estimated: the model is a parameter count without widths "
                          "(use a preset, from_hf_config or uniform_model(..., hidden_size=, n_heads=))"))
        return None, 0, False, None
    parts = None
    if run.activations == "transformers":
        parts = transformers_activations(
            shape, plan=plan, recipe=recipe, method=method, seq_len=seq_len, batch_size=batch_size,
            dropout=run.dropout, attention=run.attention, checkpointing=run.checkpointing, device=run.device,
            padded=run.padded, packed=run.packed, mixer_kernels=run.mixer_kernels,
        )
        parts = with_loss(parts, run, method.head_trains(shape))  # run.loss: memmath/loss.py (transformers': as traced)
        estimate = parts.estimate
    else:
        if run.padded or run.packed:
            notes.append(Note("padded_not_in_textbook", "a padded or packed batch's attention masks (and, under SDPA, the key and "
                              "value heads repeated for them) are not in Korthikanti et al.'s formula: "
                              "activations='transformers' traces them"))
        # Dropout masks are 1-byte bools on CUDA; on the CPU PyTorch keeps them at the element size.
        estimate = textbook_activations(
            shape, seq_len=seq_len, batch_size=batch_size, activation_bits=recipe.activation_bits,
            dropout=run.dropout, attention=run.attention, checkpointing=run.checkpointing,
            layers_storing=plan.layers_storing, embeddings_trainable=plan.embeddings_trainable,
            mask_bytes=1 if run.device == "cuda" else recipe.activation_bits // 8,
        )
    # Nothing trainable, nothing to store for backward.
    trains = plan.trainable_params > 0
    if is_ndarray(trains) and not is_ndarray(estimate.total):
        # A method sweep (LoRA ranks, frozen layers) at fixed sizes: the exact activations join int64 arrays.
        validate.check_sweep("activations (from seq_len and batch_size)", estimate.total)
    return estimate, estimate.total * trains, True, parts


def _engine_sharding(run: Run):
    """Weights, gradients and states of rank run.rank as FSDP2 or ZeroRedundancyOptimizer store them."""
    shape, method, recipe, opt = run.model, run.method, run.recipe, run.optimizer_spec
    sharding, n_gpus, zero_stage, rank = run.sharding, run.n_gpus, run.zero_stage, run.rank
    stage = {"fsdp2": 3, "zero_redundancy": 1}[sharding]
    if n_gpus < 2 or zero_stage != stage:
        raise ValueError(f"sharding={sharding!r} needs n_gpus of 2 or more and zero_stage={stage}; "
                         f"got n_gpus={n_gpus}, zero_stage={zero_stage}")
    if not isinstance(method, Full) or (shape.vision is not None and method.vision != "trains"):
        raise ValueError(f"sharding={sharding!r} is modelled for method=Full() only (every weight training); got "
                         f"{method.describe()}")
    if recipe.master_bits > recipe.weight_bits or recipe.accum_bits:
        raise ValueError(f"sharding={sharding!r} is modelled for pure fp32 or 16-bit recipes; got precision="
                         f"{recipe.name!r}")
    if opt.factored or opt.min_8bit_size or opt.block_size or opt.state_bits is not None:
        raise ValueError(f"sharding={sharding!r} is modelled for torch's SGD, Adam and AdamW; got optimizer="
                         f"{opt.name!r}")
    if not shape.tensor_count_known:
        raise ValueError(f"sharding={sharding!r} needs the model's tensors: pass a preset or a ModelShape, "
                         "not a parameter count")
    state_bits = recipe.weight_bits if recipe.states_follow_params else recipe.state_bits
    parts = sharded_parts(shape, sharding=sharding, n_gpus=n_gpus, rank=rank, weight_bits=recipe.weight_bits,
                          grad_bits=recipe.grad_bits, state_bits=state_bits, states=opt.states,
                          step_bytes=opt.step_bytes_per_tensor)
    return parts["weights"], parts["gradients"], parts["optimizer_states"]


def shard(value, n_gpus):
    return validate.ceil_div(value, n_gpus)
