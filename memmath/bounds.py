"""A safe upper bound on one GPU's step where memmath has no model of its peak (ZeRO's even division as DeepSpeed runs
it, FSDP2 or ZeroRedundancyOptimizer beyond what memmath/sharded_peak.py models, split runs the schedule replay does
not cover).

The sum of the parts counts every part as if alive at once, but it leaves out what a step makes and frees: the
optimizer's temporaries, the loss's vocabulary-wide tensors, a block's backward working set, and the engine's
unsharded buckets. The bound adds each of them at its largest, as if all were alive at once, to the sum of the
parts: no moment of the step holds more. Where the same run without ZeRO has a modelled peak, a second bound is
that peak plus the engine's buffers (a ZeRO rank never holds more of a part than the unsharded run, only its
buckets besides); the requirement is the smaller of the two.
"""

from __future__ import annotations

from . import validate
from .layout import is_parallel, layout, representative_ranks
from .memory import training_memory
from .offload import by_deepspeed, steps_on_the_cpu
from .models import ModelShape
from .parallel import (DDP_BUCKETS, buffers, korthikanti_parallel_per_layer, loss_parallel_extra, parallel_memory,
                       parallel_peak, peak_why_not, rank_parts, rank_tensors)
from .peak import optimizer_transient, peak_memory, why_no_peak
from .preference import DPO
from .run import ddp_bucket_bytes

# DeepSpeed's ZeRO stage 1 and 2 defaults (deepspeed.ai/docs/config-json, "ZeRO optimizations"): reduce_bucket_size
# and allgather_bucket_size are 5e8 elements each; with overlap_comm (the default for stage 2) two reduce buckets
# are filled by turns (deepspeed/runtime/zero/stage_1_and_2.py: ipg_buffer of two).
BUCKET_ELEMENTS = 500_000_000
ROOT_GROUPS = ("embeddings", "final_norm", "head")  # FSDP's root unit: what is not in a block (fully_shard(model))


def applies(run) -> bool:
    """Whether upper_bound answers for this run: a text model with a sequence length and widths, on more than one
    GPU (ZeRO or FSDP sharding, or split by tensor, pipeline, context or expert parallelism) or offloading parts of
    its step to host memory (memmath/offload.py)."""
    return (run.seq_len is not None and run.model.has_shape and run.model.vision is None
            and run.model.tensor_count_known and (run.sharded or is_parallel(run) or bool(run.offload)))


def upper_bound(run) -> dict:
    """{"bytes", "rank", "sum", "terms", "engine", "unsharded"}: the bound of the GPU that needs the most.

    sum: that rank's parts plus its communication buffers; terms: the transients added to it, by name; engine:
    the engine's buffers (ZeRO's buckets, FSDP's gathered units, DDP's buckets), by name; unsharded: None, or when
    it gives the smaller bound, {"peak": the same run's modelled peak without ZeRO, "saved": what ZeRO shards away
    from the parts alive throughout the step}; bytes: min(sum + terms + engine, peak - saved + engine)."""
    ranks = representative_ranks(run) if is_parallel(run) else [run.rank]
    best = None
    for rank in ranks:
        at = run if rank == run.rank else run.replace(rank=rank)
        total = parallel_memory(at).total
        terms, engine = transients(at), engine_buffers(at)
        bound = total + sum(terms.values()) + sum(engine.values())
        if best is None or bound > best["bytes"]:
            best = {"bytes": bound, "rank": rank, "sum": total, "terms": terms, "engine": engine, "unsharded": None}
    unsharded = unsharded_bound(run)
    if unsharded is not None and unsharded["bytes"] < best["bytes"]:
        best = {**unsharded, "sum": best["sum"], "terms": {}}
    return best


def named_buffers(run) -> dict:
    """Every buffer a data-parallel engine adds on the GPU that holds the most, by name: ZeRO's or FSDP's
    (largest_engine_buffers), or DistributedDataParallel's all-reduce buckets without ZeRO. The requirement counts
    each and names it in its reason or notes."""
    if run.sharded:
        return largest_engine_buffers(run)
    if is_parallel(run):
        ddp = max(buffers(run, r).get(DDP_BUCKETS, 0) for r in representative_ranks(run))
    else:
        ddp = int(ddp_bucket_bytes(run, training_memory(run).gradients))
    return {DDP_BUCKETS: ddp} if ddp else {}


def largest_engine_buffers(run) -> dict:
    """engine_buffers of the run's rank whose buffers are largest (each stage's first rank is compared)."""
    ranks = representative_ranks(run) if is_parallel(run) else [run.rank]
    return max((engine_buffers(run if r == run.rank else run.replace(rank=r)) for r in ranks),
               key=lambda d: sum(d.values()))


ALIVE_THROUGHOUT = ("weights", "quantization_constants", "master_weights", "optimizer_states")
"""The parts alive at every moment of a steady step (the optimizer states from the first step on, the fp32 master
copy from the optimizer's construction): what ZeRO shards away from them is below every moment of the step."""


def unsharded_bound(run) -> dict | None:
    """The second bound, where the same run without ZeRO (every data-parallel rank a full copy) has a modelled peak:
    at every moment a ZeRO rank holds what the unsharded rank holds, less what ZeRO shards away from the parts
    alive throughout, plus the engine's buffers (its gathered units, unreduced gradients and buckets). None where
    the unsharded run's peak is not modelled either. {"bytes", "rank", "engine", "unsharded": {"peak", "saved"}}."""
    if not run.sharded or run.offload:  # offloaded parts (memmath/offload.py): no peak model without ZeRO either
        return None
    plain = run.replace(zero_stage=0, sharding="even", gradient_as_bucket_view=True)  # ZeRO runs without DDP's buckets
    split = is_parallel(plain)
    if (peak_why_not(plain) if split else why_no_peak(plain)):
        return None
    best = None
    for rank in representative_ranks(run) if split else [run.rank]:
        at, whole = run.replace(rank=rank), plain.replace(rank=rank)
        own, full = training_memory(at), training_memory(whole)
        saved = sum(max(int(getattr(full, k)) - int(getattr(own, k)), 0) for k in ALIVE_THROUGHOUT)
        if split:
            peak, engine = int(parallel_peak(whole)["total"]), engine_buffers(at)
        else:  # moment by moment: of the gradients alive then, a 1/n share and those not yet reduced; the engine's
            # buffers at every moment besides (measured FSDP2 ranks peak above a bound that leaves them out where
            # no gradient is alive)
            unreduced = unreduced_gradients(at)
            peak, engine = _sharded_moments(run, whole, unreduced[1] if unreduced else 0), engine_buffers(at)
        bound = peak - saved + sum(engine.values())
        if best is None or bound > best["bytes"]:
            best = {"bytes": bound, "rank": rank, "engine": engine,
                    "unsharded": {"peak": peak, "saved": saved, "unreduced": None if split else unreduced}}
    return best


def _sharded_moments(run, whole, unreduced: int) -> int:
    """The highest moment of the unsharded one-GPU step (peak_memory's moments) with what ZeRO shards at that moment
    taken out: from stage 2 on the gradients alive then keep a 1/n share plus those not yet reduced (`unreduced`,
    no more than are alive); at the optimizer step each rank updates its own partition, so the optimizer's temporaries
    are a 1/n share plus one whole tensor (a partition of whole tensors may come out uneven)."""
    peak = peak_memory(whole)
    n, recipe = run.n_gpus, run.recipe
    method = run.method.base if isinstance(run.method, DPO) else run.method
    temporaries, _ = optimizer_transient(run.model, method, recipe, run.optimizer_spec, run.device)
    temporaries = int(temporaries)
    largest = max((p.numel for _, p, _ in run.model.tensor_copies(("layer", "embeddings", "head"))), default=0)
    own_share = min(temporaries, validate.ceil_div(temporaries, n)
                    + validate.ceil_div(largest * max(recipe.weight_bits, recipe.master_bits), 8))
    highest = 0
    for (phase, _, value), parts in zip(peak.moments, peak.breakdown):
        held = int(value)
        if run.zero_stage >= 2:
            gradients = int(parts["gradients"])
            held -= gradients - min(gradients, validate.ceil_div(gradients, n) + unreduced)
        if phase == "optimizer_step":
            held -= temporaries - own_share
        highest = max(highest, held)
    return highest


def _tokens(run) -> int:
    pairs = 2 if isinstance(run.method, DPO) else 1  # preference training: chosen and rejected
    return run.seq_len // layout(run).cp * run.batch_size * pairs


def transients(run) -> dict:
    """What a step makes and frees on this rank, each at its largest (bytes by name)."""
    shape, recipe, opt, method = run.model, run.recipe, run.optimizer_spec, run.method
    if isinstance(method, DPO):  # preference training: the policy's method trains (its reference is frozen)
        method = method.base
    memory = training_memory(run)
    lay = layout(run)
    e, t = recipe.activation_bits // 8, _tokens(run)
    out = {}
    if opt.temporaries != "none" and not steps_on_the_cpu(run):  # an update with temporaries on the GPU
        # (recipes.TEMPORARIES: Adam, 8-bit Adam, Adafactor)
        if lay.n_gpus > 1 and (lay.tp > 1 or lay.pp > 1 or lay.cp > 1 or lay.ep > 1):  # Full(): the rank's tensors
            bits = max(recipe.weight_bits, recipe.master_bits)
            step = sum(validate.ceil_div(_numel(dims) * bits, 8) for _, dims, _ in rank_tensors(run))
        else:  # foreach Adam's temporaries over every trainable tensor (peak.py's CUDA assumption)
            step, _ = optimizer_transient(shape, method, recipe, opt, "cuda")
        group = lay.dp * lay.cp // lay.ep  # the smallest group that shares a tensor's states: an expert's
        if run.sharded and group > 1:  # each rank steps its partition: a 1/group share, plus one whole tensor for
            # a partition of whole tensors (torch's ZeroRedundancyOptimizer) that comes out uneven
            largest = max((p.numel for _, p, _ in shape.tensor_copies(("layer", "embeddings", "head"))), default=0)
            step = min(int(step), validate.ceil_div(int(step), group)
                       + validate.ceil_div(largest * max(recipe.weight_bits, recipe.master_bits), 8))
        out["the optimizer step's temporaries (foreach Adam: as large as the tensors it updates)"] = int(step)
    if recipe.master_bits > recipe.weight_bits and not recipe.accum_bits:
        out["fp32 copies of the gradients for the master weights"] = int(memory.master_weights)
    at = lay.coordinates(run.rank)
    record = shape.architecture  # the model type's facts (memmath/architectures/); None for the uniform family
    causal = record is None or record.causal  # a causal LM's loss runs over the vocabulary; a BERT encoder has none
    if causal and shape.vocab_size and at["pp"] == lay.pp - 1:
        vocab = validate.ceil_div(shape.vocab_size, lay.tp)
        out["the loss: the logits, their fp32 copy and two fp32 gradients over the vocabulary"] = (
            t * vocab * (e + 12) + loss_parallel_extra(run))
        if lay.pp > 1:  # Schedule.step keeps every micro-batch's output and concatenates them (_merge_outputs)
            out["the pipeline's outputs: every micro-batch's logits, and their concatenation"] = (
                2 * run.micro_batches * t * vocab * e)
    inner = max(_active_width(layout) for layout, _ in shape.layouts())  # the widest block's MLP
    h = shape.hidden_size
    block = korthikanti_parallel_per_layer(
        seq_len=run.seq_len, batch_size=t // max(run.seq_len // lay.cp, 1), hidden_size=h, n_heads=shape.n_heads,
        tp=lay.tp, sequence_parallel=run.sequence_parallel, cp=lay.cp, intermediate_size=inner or 4 * h,
        element_bytes=e, dropout=run.dropout, attention=run.attention)
    out["one block's working memory: its activations made again and its backward's gradients"] = (
        block + e * t * (h + 3 * validate.ceil_div(inner or 4 * h, lay.tp)))
    if getattr(method, "quant_type", None):  # a quantized base: one matrix dequantized for each matmul, both ways
        widest = max((p.numel for _, p, _ in shape.tensor_copies(("layer",)) if p.linear), default=0)
        out["a quantized matrix dequantized, forward and backward"] = 2 * widest * 2
    return out


def _active_width(shape) -> int:
    """The MLP width a token passes through in one block of this layout: a dense block's, or its routed experts'
    and shared experts' (0 when unknown)."""
    if shape.n_experts:
        return shape.expert_intermediate_size * shape.experts_per_tok + (shape.shared_expert_intermediate_size or 0)
    return shape.intermediate_size or 0


def engine_buffers(run) -> dict:
    """The buffers a sharding engine adds on this rank (bytes by name): ZeRO-1/2's reduce and all-gather buckets,
    ZeRO-3/FSDP's all-gathered units, the gradients not yet reduced to the rank's shard (unreduced_gradients),
    torch's ZeroRedundancyOptimizer beside DDP's gradient buckets."""
    held = _engine_only(run)
    unreduced = unreduced_gradients(run)
    return {**held, **({unreduced[0]: unreduced[1]} if unreduced else {})}


def _whole_parts(run) -> tuple:
    """(weights, gradients) of the rank without ZeRO: what the engine gathers and reduces (on the GPU, whatever
    memmath/offload.py keeps in host memory between uses)."""
    plain = run.replace(zero_stage=0, sharding="even", offload=())
    if plain.tp > 1 or plain.pp > 1 or plain.cp > 1 or plain.ep > 1:
        whole = rank_parts(plain)
        return int(whole["weights"]), int(whole["gradients"])
    whole = training_memory(plain)
    return int(whole.weights), int(whole.gradients)


def _engine_only(run) -> dict:
    """engine_buffers less the gradients not yet reduced."""
    if not run.sharded and not by_deepspeed(run):
        return {}
    recipe = run.recipe
    weights, grads = _whole_parts(run)
    if run.sharding == "zero_redundancy":  # used with DDP: its default buckets hold a second copy of the gradients
        return {"DDP's gradient buckets beside ZeroRedundancyOptimizer (a second copy of the gradients)": grads}
    offload = _offload_buffer(run) if by_deepspeed(run) else {}
    if run.zero_stage < 3:
        return {"ZeRO's two reduce buckets (2 x 5e8 elements, DeepSpeed's default)":
                    min(grads, 2 * BUCKET_ELEMENTS * recipe.grad_bits // 8),
                "ZeRO's all-gather bucket (5e8 elements, DeepSpeed's default)":
                    min(weights, BUCKET_ELEMENTS * recipe.weight_bits // 8), **offload}
    # FSDP2 (fully_shard per block and at the root): the root's parameters stay unsharded from forward to backward;
    # a block's are gathered while the next one's are prefetched
    return {"ZeRO-3/FSDP all-gathered parameters: the root (embeddings, final norm, head) and two blocks":
            _unit_share(run.model, weights, 2, root=True), **offload}


def _offload_buffer(run) -> dict:
    """DeepSpeed's GPU staging of gradients bound for host memory: at stages 1-2 one buffer the size of the largest
    parameter (stage_1_and_2.py, temp_grad_buffer_for_gpu_offload), at stage 3 two of the largest parameter's
    partition (stage3.py), in the gradients' format."""
    largest = max((t.numel for _, t, _ in run.model.tensor_copies(("layer", "embeddings", "head"))), default=0)
    grad_bytes = run.recipe.grad_bits // 8
    if run.zero_stage < 3:
        return {"DeepSpeed's GPU buffer for gradients bound for the host (the largest parameter)": largest * grad_bytes}
    share = validate.ceil_div(largest, run.n_gpus)
    return {"DeepSpeed's two GPU buffers for gradients bound for the host (the largest parameter's partition)":
            2 * share * grad_bytes}


def unreduced_gradients(run) -> tuple | None:
    """(name, bytes): the gradients a ZeRO-2/3 rank holds whole before their reduce-scatter leaves it its shard (a
    block's under ZeRO-2, filling the buckets; the root's and two blocks' under ZeRO-3/FSDP), else None."""
    if not (run.sharded or by_deepspeed(run)) or run.sharding == "zero_redundancy" or run.zero_stage < 2:
        return None
    _, grads = _whole_parts(run)
    if run.zero_stage == 2:
        return ("ZeRO-2: one block's gradients before they reach a bucket, and their copy",
                _unit_share(run.model, grads, 1))
    return ("ZeRO-3/FSDP gradients before their reduce-scatter (the root's and two blocks'), and its input copy",
            _unit_share(run.model, grads, 2, root=True))


def _unit_share(shape: ModelShape, whole: int, blocks: int, root: bool = False) -> int:
    """The share of `whole` bytes (spread over the model's tensors as their elements are) that `blocks` blocks and
    (root) the tensors outside the blocks hold: no more than they hold in elements."""
    total = shape.n_params
    if not total:
        return 0
    held = _most_in_a_row(shape, blocks)
    if root:
        held += sum(shape.group_params(g) for g in ROOT_GROUPS)
    return validate.ceil_div(whole * min(held, total), total)


def _most_in_a_row(shape: ModelShape, blocks: int):
    """The most parameters `blocks` neighbouring blocks hold (the unit running and the one prefetched): blocks x one
    block's where every block has one layout; where they differ (Maverick's MoE and dense blocks take turns), the
    largest sum over each run of `blocks` blocks in order."""
    if not shape.mixed:
        return blocks * shape.params_per_layer
    sizes = [0] * shape.n_layers
    for layout, indices in shape.layouts():
        for i in indices:
            sizes[i] = layout.params_per_layer
    return max(sum(sizes[i:i + blocks]) for i in range(max(1, len(sizes) - blocks + 1)))


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def describe(bound: dict) -> str:
    """The bound's terms in words, for the Requirement's reason."""
    engine = "; ".join(f"{name} {value:,} B" for name, value in bound["engine"].items() if value)
    if bound["unsharded"] is None:
        added = "; ".join(f"{name} {value:,} B" for name, value in bound["terms"].items() if value)
        return (f"a safe upper bound, not a modelled peak: rank {bound['rank']}'s sum of the parts and its "
                f"communication buffers ({bound['sum']:,} B) plus, as if all were alive at once, "
                + "; ".join(text for text in (added, engine) if text))
    unsharded = bound["unsharded"]
    peak = (f"rank {bound['rank']}'s modelled peak without ZeRO ({unsharded['peak']:,} B)" if not unsharded["unreduced"]
            else f"rank {bound['rank']}'s highest moment without ZeRO with a 1/n share of the gradients alive then, "
            f"and of them {unsharded['unreduced'][0]} (up to {unsharded['unreduced'][1]:,} B each), "
            f"{unsharded['peak']:,} B")
    return (f"a safe upper bound, not a modelled peak: {peak}, less what ZeRO shards away from the parts alive "
            f"throughout the step (weights, master copy, optimizer states: {unsharded['saved']:,} B), plus the "
            f"engine's buffers: " + (engine or "none"))
