"""Offloading: which parts of a training step live in host memory, and what the GPU keeps.

Run(offload=...) names the parts moved to the host; the engine is the run's sharding:

- "optimizer" with sharding "even" (DeepSpeed ZeRO-Offload, zero_optimization.offload_optimizer, ZeRO
  stage 1-3 and a recipe with fp32 master weights): the fp32 master weights, the optimizer's moments
  and an fp32 copy of the gradients live in host memory, each this rank's ZeRO partition; the GPU keeps
  the 16-bit weights. From stage 2 the reduced gradients go straight to the host buffer
  (deepspeed/runtime/zero/stage_1_and_2.py, async_accumulate_grad_in_cpu_via_gpu), so the GPU holds no
  gradient part, as estimate_zero2_model_states_mem_needs counts it (gpu = 2 B x params).
- "params" with sharding "even" (ZeRO-Infinity's offload_param, zero_stage=3, with "optimizer"): the
  16-bit weights' partition moves to the host too. At stage 3 the GPU keeps the largest layer
  all-gathered, its 16-bit weights and gradients (estimate_zero3_model_states_mem_needs:
  largest_layer_memory = 4 B x largest_layer_params).
- "params" with sharding "fsdp2" (FSDP2's CPUOffloadPolicy): parameters, gradients and optimizer
  states on the CPU, each rank's padded shard (torch/distributed/fsdp/_fully_shard/_fsdp_api.py); the
  GPU keeps what is all-gathered: the root module's parameters (embeddings, final norm, head: the root
  is not resharded after forward, _fsdp_state.py), the block running and the block prefetched, and the
  unsharded gradients of the root and one block before their reduce-scatter and copy to the host.
- "activations" (torch.autograd.graph.save_on_cpu(pin_memory=...)), with any engine: every tensor
  saved for backward is copied to host memory when saved and back to the GPU for its backward; the
  GPU keeps one block's saved tensors plus those outside the blocks and the loss's.

pin_memory: pinned (page-locked) host memory cannot be swapped or used by other processes. What is
pinned follows each engine: DeepSpeed pins the fp32 master partition always and its gradient buffer
with offload_optimizer.pin_memory; FSDP2 pins the sharded parameters and gradients (not the optimizer's
states); save_on_cpu pins the saved tensors.

Host bytes are per GPU (each rank's process); a node with k GPUs needs k times that.
"""

from __future__ import annotations


from . import validate
from .arrays import larger, smaller
from .notes import Note
from .preference import DPO
from .recipes import get_recipe
from .sharding import fsdp2_elements, torch_groups
from .values import frozen

OFFLOADS = ("optimizer", "params", "activations")
ENGINES = {"even": "DeepSpeed ZeRO-Offload", "fsdp2": "FSDP2 CPUOffloadPolicy"}
HOST_PARTS = ("weights", "master_weights", "gradients", "optimizer_states", "activations")
COMPILE_NOTE = ("the activations are eager mode's (what autograd saves without torch.compile); a compiled run "
                "may save fewer, since AOTAutograd's partitioner recomputes cheap operations in backward")
# DeepSpeed's fp32 copy of the gradients in host memory (single_partition_of_fp32_groups[i].grad)
FP32_BYTES = 4


def check(offload, values: dict, shape, method) -> tuple:
    """Run.offload as a tuple of OFFLOADS names in that order, or a FieldError naming the combination refused.

    offload: a name, a comma-separated string, or a sequence of names. values: the Run's checked fields.
    """
    names = _names(offload)
    if not names:
        return ()
    recipe = get_recipe(values["precision"])
    if isinstance(method, DPO):
        raise validate.FieldError("offload", "offload is not modelled for DPO (its policy and reference models)")
    if any(values[d] > 1 for d in ("tp", "pp", "cp", "ep")):
        raise validate.FieldError("offload", "offload is modelled for data parallelism only (tp, pp, cp and ep of 1)")
    sharding, stage = values["sharding"], values["zero_stage"]
    if sharding == "zero_redundancy" and names != ("activations",):
        raise validate.FieldError("offload", "torch's ZeroRedundancyOptimizer offloads nothing: offload='optimizer' "
                                  "and 'params' need sharding='even' (DeepSpeed) or 'fsdp2'")
    if sharding == "fsdp2" and "optimizer" in names and "params" not in names:
        raise validate.FieldError("offload", "FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer "
                                  "states together: pass offload='params' (or 'optimizer,params')")
    if sharding == "even" and ("optimizer" in names or "params" in names):
        if stage == 0:
            raise validate.FieldError("offload", "DeepSpeed offloads with ZeRO only: pass zero_stage=1, 2 or 3 with "
                                      "offload='optimizer' (ZeRO-Offload), or use sharding='fsdp2'")
        if "params" in names and (stage != 3 or "optimizer" not in names):
            raise validate.FieldError("offload", "DeepSpeed offloads parameters (ZeRO-Infinity's offload_param) at "
                                      "zero_stage=3 with the optimizer offloaded too: pass offload='optimizer,params' "
                                      "and zero_stage=3")
        if recipe.master_bits <= recipe.weight_bits:
            raise validate.FieldError("offload", "DeepSpeed's ZeRO-Offload keeps fp32 master weights in host memory "
                                      "beside 16-bit weights on the GPU: pass precision='mixed' or "
                                      f"'mixed_fp32_grads' (got {recipe.name!r})")
    return names


def _names(offload) -> tuple:
    if offload is None or offload == ():
        return ()
    if isinstance(offload, str):
        given = [part.strip() for part in offload.split(",") if part.strip()]
    elif isinstance(offload, (tuple, list, set, frozenset)) and all(isinstance(p, str) for p in offload):
        given = [part.strip() for part in offload]
    else:
        raise validate.FieldTypeError("offload", "offload must be a name or a sequence of names from "
                                      f"{', '.join(OFFLOADS)}; got {validate.describe(offload)}")
    for part in given:
        if part.lower() not in OFFLOADS:
            raise validate.FieldError("offload", f"offload must name parts from {', '.join(OFFLOADS)}; got {part!r}")
    chosen = {part.lower() for part in given}
    return tuple(name for name in OFFLOADS if name in chosen)


def parse_cli(values) -> tuple:
    """--offload's values (repeatable, each a name or a comma list) as one tuple of names for Run(offload=...)."""
    given = [part for value in (values or ()) for part in value.split(",") if part.strip()]
    return _names(given)


def compile_notes(compiled: bool) -> list:
    """The Note a compiled run gets: its activations are counted as eager mode saves them."""
    return [Note("compile_eager_activations", f"compile=True: {COMPILE_NOTE}")] if compiled else []


@frozen
class HostMemory:
    """Host (CPU) memory one GPU's process needs for the offloaded parts, in bytes.

    engine: who offloads ("DeepSpeed ZeRO-Offload", "FSDP2 CPUOffloadPolicy", "save_on_cpu" alone);
    pinned: how many of the bytes are page-locked; n_gpus: the processes each needing this much.
    """

    engine: str
    weights: int = 0
    master_weights: int = 0
    gradients: int = 0
    optimizer_states: int = 0
    activations: int = 0
    pinned: int = 0
    n_gpus: int = 1

    def __post_init__(self):
        for name in (*HOST_PARTS, "pinned"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))
        validate.text_field("engine", self.engine)

    @property
    def total(self):
        """Host bytes one GPU's process needs."""
        return sum(getattr(self, part) for part in HOST_PARTS)

    def parts(self) -> dict:
        return {part: getattr(self, part) for part in HOST_PARTS}

    def to_dict(self) -> dict:
        """JSON-ready: every part, the total per GPU, the pinned bytes and the total of all n_gpus processes."""
        return {"engine": self.engine, **{k: int(v) for k, v in self.parts().items()}, "total": int(self.total),
                "pinned": int(self.pinned), "n_gpus": self.n_gpus, "all_gpus": int(self.total) * self.n_gpus}

    def describe(self, size) -> str:
        """One sentence naming the host RAM; size formats bytes (the command line's unit)."""
        kept = ", ".join(f"{part.replace('_', ' ')} {size(int(v))}" for part, v in self.parts().items() if v)
        every = (f"; {size(int(self.total) * self.n_gpus)} for all {self.n_gpus} GPUs' processes"
                 if self.n_gpus > 1 else "")
        return (f"Host RAM ({self.engine}): {size(int(self.total))} per GPU ({kept}), {size(int(self.pinned))} of it "
                f"pinned{every}.")


def by_deepspeed(run) -> bool:
    """Whether DeepSpeed offloads this run (offload_optimizer, with offload_param or not): its CPU Adam, its fp32
    master weights in host memory and its GPU buckets carrying the gradients there, on one GPU too."""
    return "optimizer" in run.offload and run.sharding == "even"


def steps_on_the_cpu(run) -> bool:
    """Whether the optimizer steps in host memory: DeepSpeed's offload_optimizer (its CPU Adam), FSDP2's
    CPUOffloadPolicy (the sharded parameters, gradients and states are CPU tensors, so the optimizer runs there)."""
    return by_deepspeed(run) or (run.sharding == "fsdp2" and "params" in run.offload)


def why_no_peak(run) -> str:
    """Why the peak of an offloading run is not modelled ("" without offloading); the requirement then bounds the
    GPU's parts with the step's transients and the engine's buffers (memmath/bounds.py)."""
    if not run.offload:
        return ""
    return ("the peak estimate does not model offloading's copies between host and GPU; the GPU's parts are what "
            "stays on it (memmath/offload.py)")


def offload_parts(run, parts: tuple, act_estimate, notes: list):
    """(the GPU's parts, HostMemory) of an offloading run.

    parts: (weights, constants, gradients, accumulation, master, states, activations) as one GPU holds them
    without offloading, ZeRO or FSDP2 sharding applied.
    """
    weights, constants, gradients, accumulation, master, states, act_bytes = parts
    host = dict.fromkeys(HOST_PARTS, 0)
    pinned = 0
    engine = []
    n, stage = run.n_gpus, run.zero_stage
    if run.sharding == "fsdp2" and "params" in run.offload:
        engine.append(ENGINES["fsdp2"])
        host.update(weights=weights, gradients=gradients, optimizer_states=states)
        pinned += (weights + gradients) * run.pin_memory
        root, block = fsdp2_unsharded(run)
        weights, gradients, states = root + 2 * block, root + block, 0
        notes.append(Note("offload_fsdp2", "FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states in "
                          "host memory; the GPU holds the root's parameters, two blocks all-gathered (the one running "
                          "and the one prefetched) and the root's and one block's unsharded gradients"))
    elif "optimizer" in run.offload:
        engine.append("DeepSpeed ZeRO-Infinity" if "params" in run.offload else ENGINES["even"])
        fp32_grads = validate.ceil_div(_trainable(run) * FP32_BYTES, n)
        host.update(master_weights=master, optimizer_states=states, gradients=fp32_grads)
        pinned += master + fp32_grads * run.pin_memory
        master, states, accumulation = 0, 0, 0
        if stage >= 2:
            gradients = 0
        if "params" in run.offload:
            host["weights"] = weights
            pinned += weights * run.pin_memory
            weights = 0
        if stage == 3 and run.model.tensor_count_known:
            layer = largest_layer_params(run.model)
            weight_bytes = run.recipe.weight_bits // 8
            weights, gradients = weights + weight_bytes * layer, weight_bytes * layer
        elif stage == 3:
            notes.append(Note("offload_largest_layer_not_counted", "ZeRO stage 3 gathers the largest layer's 16-bit "
                              "weights and gradients on the GPU: not counted, since a parameter count has no layers"))
        notes.append(Note("offload_optimizer", "DeepSpeed ZeRO-Offload: fp32 master weights, optimizer states and an "
                          "fp32 copy of the gradients in host memory" + (", the 16-bit weights too (offload_param)"
                                                                         if "params" in run.offload else "")
                          + "; its gradient buckets (reduce_bucket_size) and GPU staging buffers are not among "
                          "the parts (the requirement's upper bound adds them where it applies), and the host "
                          "figure leaves out DeepSpeed's buffer factor (1.5 in estimate_zero2_model_states_mem_needs)"))
    if "activations" in run.offload and act_estimate is not None:
        engine.append("save_on_cpu")
        trains = act_bytes > 0  # a run training nothing saves nothing
        saved = act_estimate.saved_by_forward * trains
        host["activations"] = saved
        pinned += saved * run.pin_memory
        act_bytes = smaller(act_bytes, on_gpu_activations(act_estimate) * trains)
        recompute = (" and, with checkpointing, the block recomputed during backward (its tensors not offloaded)"
                     if run.checkpointing else "")
        notes.append(Note("offload_activations", "activations offloaded (torch.autograd.graph.save_on_cpu): every "
                          "tensor saved in forward in host memory; the GPU keeps one block's saved tensors, those "
                          f"outside the blocks and the loss's{recompute}. save_on_cpu also copies each parameter a "
                          "layer saves for backward (a Linear's weight, a norm's scale) to the host: not counted, up "
                          f"to the weights' {int(validate.largest(_weight_bytes(run))):,} B more"))
    gpu = (weights, constants, gradients, accumulation, master, states, act_bytes)
    return gpu, HostMemory(engine=" + ".join(engine) or "none", pinned=pinned, n_gpus=n, **host)


def _weight_bytes(run):
    return run.method.plan(run.model, run.recipe).weight_bytes


def _trainable(run):
    return run.method.plan(run.model, run.recipe).trainable_params


def on_gpu_activations(estimate):
    """What save_on_cpu leaves on the GPU: the largest block's saved tensors (copied back for its backward), those
    outside the blocks, the loss's and the recompute peak of a checkpointed block."""
    first = estimate.per_layer if estimate.first_layer is None else estimate.first_layer
    block = larger(larger(estimate.per_layer, first), estimate.frozen_per_layer)
    return block + estimate.recompute_peak + estimate.outside_layers + estimate.loss


def largest_layer_params(shape) -> int:
    """The most parameters one module owns itself (recurse=False), as DeepSpeed's model_to_params counts the largest
    layer (deepspeed/runtime/zero/stage3.py): tensors grouped by their module's name, each block's set once."""
    groups = torch_groups(shape)
    outside = groups["vision"] + groups["embeddings"] + groups["final_norm"] + groups["head"]
    blocks = {id(tensors): tensors for tensors in groups["per_block"]}.values()  # each block layout's set once
    best = 0
    for tensors in [outside, *blocks]:
        sizes = {}
        for name, dims in tensors:
            count = 1
            for d in dims:
                count *= d
            module = name.rsplit(".", 1)[0]
            sizes[module] = sizes.get(module, 0) + count
        best = max(best, max(sizes.values(), default=0))
    return best


def fsdp2_unsharded(run) -> tuple[int, int]:
    """(the root's bytes, one block's bytes) all-gathered, in the weights' format, from FSDP2's padded shards."""
    shape, n = run.model, run.n_gpus
    size = run.recipe.weight_bits // 8

    def unsharded(group, of=shape):
        total = 0
        for t in of.tensors(group):
            dims = tuple(int(d) for d in t.shape)
            padded, _ = fsdp2_elements(dims, n, 0)
            total += padded * n
        return total * size

    root = unsharded("vision") + unsharded("embeddings") + unsharded("final_norm") + unsharded("head")
    return root, max(unsharded("layer", layout) for layout, _ in shape.layouts())  # the largest block's
