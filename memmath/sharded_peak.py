"""The peak of one rank's step in a data-parallel run: FSDP2, ZeroRedundancyOptimizer and DistributedDataParallel.

Each rank runs the whole model on its own micro-batch, so its activations, the loss's tensors and the backward's
working memory are the one-GPU step's (peak_memory of the same run on one GPU, moment by moment). What the engine
changes is which weights, gradients, optimizer states and update temporaries are alive at each moment; the peak
takes each moment of the one-GPU step and puts the engine's in place of the plain run's.

FSDP2 (sharding="fsdp2": fully_shard on every block, then on the whole model; torch/distributed/fsdp/_fully_shard/)
    Between steps a rank keeps its padded shards (memmath/sharding.py). The root module (what no block holds: the
    embeddings, final norm and head) is all-gathered at the start of forward and, being the root, not resharded
    after forward (_fsdp_state.py, _lazy_init: post_forward_mesh_info = None): its parameters stay gathered to the
    end of backward. A block's all-gather allocates one flat output of world x its padded shard
    (_fsdp_collectives.py foreach_all_gather) and copies it out into the unsharded parameters, also padded; in
    forward the flat output is kept until the next block's copy-out (_fsdp_param_group.py wait_for_unshard, the
    all_gather_state), the last one until the root's post-forward frees it after the loss. So in forward a block
    runs with its parameters and its flat output gathered, 2 x B (B: a block's padded unsharded bytes), plus the
    root's R. With reshard_after_forward=True each block frees its parameters after its forward; with False they stay
    to its backward, so the last block's forward and the loss hold every block's.
    Backward: the root's pre-backward prefetches the last block (_backward_prefetch: the previous in
    post_forward_order), each block's pre-backward copies its parameters out and prefetches the block before it, and
    each block's post-backward reshards its parameters and reduce-scatters its gradients: an input of world x the
    padded shard is allocated and filled from the unsharded gradients, which are then freed, into an output of one
    padded shard that the sharded gradients view (foreach_reduce). The input is kept until the next block's
    post-backward (reduce_scatter_states, at most reduce_scatter_max_input_buffers = 1). The root's gradients stay
    unsharded until the root's post-backward at the end of backward.
    Moments (the one-GPU step's, each with what FSDP2 holds then):
      forward, in the last block: R + 2 B (reshard) or R + (L + 1) B (no reshard)
      forward, at the loss: R + B (the last flat output) or R + (L + 1) B
      backward, at the loss: R + B (the last block prefetched) or R + L B
      entering (and recomputing) the last block: R + 2 B (its parameters and the block before it prefetched) or
        R + L B; the root's gradients made so far
      in (and recomputing) the first block: R + B; the root's gradients so far, the later blocks' gradient shards and
        the second block's reduce-scatter input
      in a block between (the second and the next-to-last; the moment is linear in between): the first block's moment
        with the saved activations of the blocks before it, fewer gradient shards, and the block before it prefetched,
        R + 2 B (or R + (i + 1) B without resharding). Added after the held-out runs with checkpointing peaked there;
        it changes none of the recorded runs without checkpointing
      at the embeddings: R; every root gradient, every block's gradient shard and the first block's reduce-scatter
        input; then the root's own reduce-scatter: its gradients and their padded input copy
      the optimizer step: the rank's shards, its states and the update's temporaries over its local pieces
ZeroRedundancyOptimizer (sharding="zero_redundancy", zero_stage=1; torch/distributed/optim/zero_redundancy_optimizer.py)
    Every rank keeps every weight and gradient; only the states of its own tensors (whole tensors, largest first to
    the least loaded rank) and the update's temporaries over them differ from the one-GPU step. DistributedDataParallel
    (which it is used with) adds its all-reduce buckets, a second copy of the gradients alive through the step, unless
    gradient_as_bucket_view=True.

DistributedDataParallel (n_gpus > 1, zero_stage=0, sharding="even"; torch/nn/parallel/distributed.py and the Reducer,
torch/csrc/distributed/c10d/reducer.cpp)
    Every rank keeps the whole model, its gradients and states: the one-GPU step, plus the Reducer's buckets. Wrapping
    the model allocates one flat buffer per bucket (initialize_buckets: at::empty of the bucket's elements, in the
    parameters' dtype; up to bucket_cap_mb = 25 MB each, the rebuilt ones from the second iteration's forward on
    led by a 1 MB one, the old freed before the new are made), every trainable parameter in exactly one, so the
    buckets hold the gradients' bytes from before the first step to the end of training. Backward fills them, it does
    not allocate them (validation/ddp.py: DDP's own count of its buckets is the gradients' bytes in every run).
    gradient_as_bucket_view=False (the default): each AccumulateGrad's gradient is copied into its bucket view, the
    bucket all-reduced and copied back into .grad: every moment is the one-GPU moment plus the buckets.
    gradient_as_bucket_view=True: after the copy .grad is pointed at its bucket view and the fresh gradient freed, so
    the gradients are the buckets, alive at every moment, forward included, plus what is not yet in .grad: the head's
    contribution to a tied embedding, which autograd's input buffer holds until the embedding's backward adds its own,
    and at the embeddings their fresh gradients before the hook copies them in.

Not modelled (why_no_sharded_peak; memmath/bounds.py's upper bound answers them): FSDP2 with activation checkpointing
(recorded after the model, it peaked 3-12% above these moments; with the middle blocks' moments 3-6% on every rank, net
of the profiler's unseen frees), gradient accumulation, offloading, tensor, pipeline, context or expert parallelism, and ZeRO's
even division as DeepSpeed runs it. DistributedDataParallel with gradient accumulation or offloading keeps peak_memory's
one-GPU peak with the buckets a copy alive throughout (memmath/decision.py: an upper bound where the buckets are views).

DistributedDataParallel's peak was written from torch's source before any DDP run was recorded; validation/ddp.py's 10
runs (2 and 3 ranks, with and without gradient_as_bucket_view and checkpointing), recorded after it and not fitted,
put all 46 step peaks within 2% of it (38 within 0.1%), net of one rank's unseen free (tests/test_sharded_peak.py).

FSDP2 and ZeroRedundancyOptimizer are checked against PyTorch 2.13 over gloo on one CPU, two recordings reported apart:
validation/sharded.py's 18 runs, which the model was checked on as it was written (103 of 108 step peaks within 5%,
all within +5% and -10%), and validation/sharded_held_out.py's runs, recorded after it. Where an FSDP2 rank peaks more
than 5% above the model, the profile ends with as many bytes allocated and never seen freed (one block's or the root's
gathered size, rank by rank and run by run): a collective buffer whose release the CPU profiler did not record.
"""

from __future__ import annotations

from . import validate
from .notes import Note
from .peak import PHASES, PeakEstimate, _StepTerms, optimizer_transient, peak_memory, why_no_peak
from .recipes import update_temporaries
from .sharding import fsdp2_elements, torch_groups, torch_tensors, zero_redundancy_assignment
from .memory import training_memory
from .run import as_run

ENGINES = ("fsdp2", "zero_redundancy")


def is_ddp(run) -> bool:
    """A data-parallel run without ZeRO or sharding: torch's DistributedDataParallel on n_gpus > 1."""
    return run.n_gpus > 1 and run.zero_stage == 0 and run.sharding == "even"


def why_no_sharded_peak(run) -> str:
    """Why sharded_peak does not model this run, in words; "" when it does."""
    if not is_ddp(run) and (not run.sharded or run.sharding not in ENGINES):
        return ("the sharded peak models PyTorch's FSDP2 (sharding='fsdp2'), ZeroRedundancyOptimizer "
                "(sharding='zero_redundancy') and DistributedDataParallel (zero_stage=0) on 2 or more GPUs; ZeRO's "
                "even division (DeepSpeed) is bounded")
    if run.tp > 1 or run.pp > 1 or run.cp > 1 or run.ep > 1:
        return "the sharded peak models data parallelism only (tp = pp = cp = ep = 1)"
    if run.offload:
        return "the sharded peak does not model offloading"
    if run.grad_accum_steps > 1:
        return "the sharded peak does not model gradient accumulation (FSDP2 and DDP defer or repeat the reduction)"
    if run.is_sweep:
        return "the sharded peak answers one run, not a sweep of sizes"
    if run.sharding == "fsdp2" and run.checkpointing:
        # measured after the model was written (validation/sharded_held_out.py): FSDP2 with activation checkpointing
        # peaked 3-12% above these moments; with the middle blocks' moments (added after those runs) still 3-6% above
        # on every rank net of unseen frees, a term of the recomputation not found
        return ("the sharded peak does not model FSDP2 with activation checkpointing (measured over gloo, its peaks "
                "are 3-6% above the model's moments, a term of the recomputation not found)")
    if is_ddp(run):
        why = why_no_peak(_plain(run))
        return f"the same run on one GPU has no peak model: {why}" if why else ""
    if run.model.n_layers < 2:
        return "the sharded peak needs two or more blocks"
    if run.model.mixed:
        return ("the sharded peak gathers one block layout at a time; a model whose blocks differ (dense and "
                "mixture-of-experts blocks) is bounded")
    why = why_no_peak(_plain(run))
    return f"the same run on one GPU has no peak model: {why}" if why else ""


def _plain(run):
    """The same run on one GPU: each rank's activations, loss and backward working memory."""
    return run.replace(n_gpus=1, zero_stage=0, sharding="even", rank=0)


def _bytes(elements: int, bits: int) -> int:
    return validate.ceil_div(elements * bits, 8)


def _elements(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def fsdp2_units(run) -> dict:
    """FSDP2's buffers of one rank, in bytes: root and block (the padded unsharded parameters of the root module and
    of one block, as all-gathered), block_grads and root_grads (their padded unsharded gradients, as a reduce-scatter
    input holds them), block_shard and root_shard (the rank's padded gradient shard of each)."""
    groups = torch_groups(run.model)
    root = groups["vision"] + groups["embeddings"] + groups["final_norm"] + groups["head"]
    # a block's tensors (the largest block's, where the model's blocks differ)
    block = max(groups["per_block"], key=lambda tensors: sum(_elements(dims) for _, dims in tensors))
    n, recipe = run.n_gpus, run.recipe

    def total(tensors, bits, whole):
        out = 0
        for _, dims in tensors:
            padded, _ = fsdp2_elements(dims, n, run.rank)
            out += padded * (n if whole else 1)
        return _bytes(out, bits)

    return {"root": total(root, recipe.weight_bits, True), "block": total(block, recipe.weight_bits, True),
            "root_grads": total(root, recipe.grad_bits, True), "block_grads": total(block, recipe.grad_bits, True),
            "root_shard": total(root, recipe.grad_bits, False), "block_shard": total(block, recipe.grad_bits, False)}


def own_temporaries(run) -> int:
    """The update's temporaries over the rank's own tensors (recipes.update_temporaries: single-tensor Adam on the
    CPU, foreach on CUDA): FSDP2's local pieces, unpadded (the states are made like them), or the whole tensors
    ZeroRedundancyOptimizer gives the rank; 0 for an optimizer without temporaries."""
    opt = run.optimizer_spec
    if opt.temporaries == "none":
        return 0
    tensors = torch_tensors(run.model)
    bits = run.recipe.weight_bits  # pure recipes only (training._engine_sharding): the update runs on the weights
    if run.sharding == "fsdp2":
        sizes = [_bytes(fsdp2_elements(dims, run.n_gpus, run.rank)[1], bits) for _, dims in tensors]
    else:
        numels = [_elements(dims) for _, dims in tensors]
        owner = zero_redundancy_assignment(numels, run.n_gpus)
        sizes = [_bytes(k, bits) for k, r in zip(numels, owner) if r == run.rank]
    return update_temporaries(sizes, run.device)


# The one-GPU moments in the last block's backward (peak.py's labels): entering it, recomputing it, at its widest op
LAST_BLOCK_BACKWARD = ("entering the last block", "recomputing the last block", "in the last block's recomputed")


def _fsdp2_held(run, units: dict, phase: str, label: str) -> tuple[int, int]:
    """(gathered parameters, gradients) FSDP2 holds at a one-GPU moment, beyond the rank's shards: the gradients are
    the moment's own (plain) gradients rewritten by the caller; here the parameters, and the extra gradient buffers
    (reduce-scatter inputs) as a second number."""
    R, B, L = units["root"], units["block"], int(run.model.n_layers)
    keep = not run.reshard_after_forward
    if phase == "forward":
        return (R + (L + 1) * B if keep else R + (2 * B if label.startswith("in the last block") else B)), 0
    if phase == "optimizer_step":
        return 0, 0
    if label.startswith("at the loss"):
        return (R + L * B if keep else R + B), 0
    if label.startswith(LAST_BLOCK_BACKWARD):
        return (R + L * B if keep else R + 2 * B), 0
    if label.startswith(("in the first block", "recomputing the first block")):
        return R + B, units["block_grads"]  # the second block's reduce-scatter input, kept
    if label.startswith("at the embeddings"):
        return R, units["block_grads"]  # the first block's reduce-scatter input, kept
    raise ValueError(f"no FSDP2 rule for the moment {label!r} of the {phase}")


LAST_OF_FIRST = {"in the first block": "entering the last block",
                 "recomputing the first block": "recomputing the last block"}


def _middle_blocks(run, units: dict, plain, label: str, parts: dict) -> list[tuple]:
    """The backward of a block between the first and the last, as FSDP2 runs it: (index i, gathered parameters,
    the one-GPU first-block moment's parts with the saved activations of the i blocks before it added) for the second
    and the next-to-last block (the moment is linear in i in between). Every block but the first has the block before
    it prefetched (R + 2 B), or with reshard_after_forward=False blocks 0..i still gathered (R + (i + 1) B); the
    gradients are the later blocks' shards and the next block's kept reduce-scatter input, as in the first block's."""
    L = int(run.model.n_layers)
    first = next(key for key in LAST_OF_FIRST if label.startswith(key))
    last = next((b for (_, lab, _), b in zip(plain.moments, plain.breakdown) if lab.startswith(LAST_OF_FIRST[first])),
                None)
    if last is None or L < 3:
        return []
    per_block = (int(last["saved activations"]) - int(parts["saved activations"])) // (L - 1)
    out = []
    for i in sorted({1, L - 2}):
        gathered = units["root"] + (i + 1) * units["block"] if not run.reshard_after_forward else (
            units["root"] + 2 * units["block"])
        out.append((i, gathered, {**parts, "saved activations": int(parts["saved activations"]) + i * per_block}))
    return out


def not_yet_in_grad(terms, phase: str, label: str, gradients: int) -> int:
    """Bytes of gradients that exist at a one-GPU moment but are not yet in .grad (`terms`: the one-GPU step's
    _StepTerms; `gradients`: the moment's gradients): the head's contribution to a tied embedding, held in autograd's
    input buffer from the head's backward to the embedding's, and at the embeddings their own fresh gradients. Under
    DistributedDataParallel(gradient_as_bucket_view=True) these are what a moment holds beside the buckets."""
    if phase != "backward" or label.startswith("at the loss"):
        return 0
    tied = int(terms.tied_embed)
    if label.startswith(LAST_BLOCK_BACKWARD):
        return tied
    if label.startswith(("in the first block", "recomputing the first block")):
        return tied if gradients else 0  # no moment where a single block stores
    if label.startswith("at the embeddings"):
        return int(terms.g_embed) + tied
    raise ValueError(f"no DistributedDataParallel rule for the moment {label!r} of the {phase}")


def ddp_peak(run, step: str) -> PeakEstimate:
    """The peak of a DistributedDataParallel rank (see the module doc): the one-GPU step's moments plus the buckets,
    or, with gradient_as_bucket_view=True, with the buckets in place of the gradients in .grad."""
    plain_run = _plain(run)
    plain = peak_memory(plain_run, step=step)
    buckets = int(training_memory(plain_run).gradients)  # every trainable parameter's gradient, in its dtype
    terms = _StepTerms.of(plain_run, step)
    views = run.gradient_as_bucket_view
    moments, breakdown = [], []
    for (phase, label, _), parts in zip(plain.moments, plain.breakdown):
        new = {k: int(v) for k, v in parts.items()}
        if views:
            new["gradients"] = buckets + not_yet_in_grad(terms, phase, label, new["gradients"])
        else:
            new["inputs and buffers"] += buckets
        moments.append((phase, label, sum(new.values())))
        breakdown.append(new)
    phases = {p: max(v for q, _, v in moments if q == p) for p in PHASES}
    how = ("gradient_as_bucket_view=True: the gradients are views into the buckets, alive at every moment, forward "
           "included, beside the gradients not yet in .grad (a tied embedding's first contribution, the embeddings' "
           "fresh gradients)" if views else "the buckets are a second copy of the gradients, alive at every moment "
           "(DDP's default; gradient_as_bucket_view=True makes the gradients views into them)")
    notes = tuple(plain.notes) + (Note("ddp_buckets", f"rank {run.rank}'s peak: the one-GPU step's moments with "
                                       f"DistributedDataParallel's all-reduce buckets ({buckets:,} B, made when the "
                                       f"model is wrapped); {how}"),)
    return PeakEstimate(forward=phases["forward"], backward=phases["backward"], optimizer_step=phases["optimizer_step"],
                        resident=int(plain.resident) + buckets, moments=tuple(moments), notes=notes, step=step,
                        breakdown=tuple(breakdown))


def sharded_peak(model, *, step="steady", **settings) -> PeakEstimate:
    """The peak of one rank's step (run.rank) under FSDP2, ZeroRedundancyOptimizer or DistributedDataParallel (see
    the module doc): the one-GPU step's moments with the engine's weights, gradients, states, temporaries and
    buffers in place of the plain run's.
    A run it does not model raises a ValueError saying why (why_no_sharded_peak)."""
    step = validate.choice("step", step, ("steady", "first"))
    run = as_run(model, **settings)
    why = why_no_sharded_peak(run)
    if why:
        raise ValueError(f"no sharded peak model for this run: {why}")
    if is_ddp(run):
        return ddp_peak(run, step)
    plain_run = _plain(run)
    plain = peak_memory(plain_run, step=step)
    whole, own = training_memory(plain_run), training_memory(run)
    transient_plain, _ = optimizer_transient(plain_run.model, plain_run.method, plain_run.recipe,
                                             plain_run.optimizer_spec, plain_run.device)
    transient_own = own_temporaries(run)
    fsdp = run.sharding == "fsdp2"
    units = fsdp2_units(run) if fsdp else None
    L = int(run.model.n_layers)
    # DistributedDataParallel beside ZeroRedundancyOptimizer: its buckets, a second copy of the gradients
    buckets = 0 if fsdp or run.gradient_as_bucket_view else int(whole.gradients)
    resident = int(plain.resident) - int(whole.weights) + int(own.weights) + buckets
    moments, breakdown = [], []
    block_g = validate.ceil_div(int(run.model.params_per_layer) * run.recipe.grad_bits, 8)  # one block's, unsharded

    def add(phase, label, parts, weights, gradients, states, working_delta=0, extra=0):
        new = dict(parts)
        new["weights"] = weights
        new["gradients"] = gradients
        new["optimizer states"] = states
        new["working memory"] = int(parts["working memory"]) + working_delta
        new["inputs and buffers"] = int(parts["inputs and buffers"]) + buckets + extra
        moments.append((phase, label, int(sum(int(v) for v in new.values()))))
        breakdown.append(new)

    for (phase, label, _), parts in zip(plain.moments, plain.breakdown):
        plain_states = int(parts["optimizer states"])
        states = 0 if plain_states == 0 else int(own.optimizer_states) + int(own.master_weights)
        delta = 0
        if phase == "optimizer_step":
            delta = transient_own - int(transient_plain)
        grads = int(parts["gradients"])
        if not fsdp:
            add(phase, label, parts, int(own.weights), grads, states, delta)
            continue
        gathered, input_copy = _fsdp2_held(run, units, phase, label)
        if phase == "optimizer_step":
            grads = int(own.gradients)
        elif label.startswith(("in the first block", "recomputing the first block")):
            for i, gathered_i, parts_i in _middle_blocks(run, units, plain, label, parts):
                add(phase, f"in block {i + 1} of {L}: " + label.split(": ", 1)[1].replace("first", "earlier"), parts_i,
                    int(own.weights) + gathered_i,
                    grads + (L - 1 - i) * units["block_shard"] - (L - 1) * block_g + input_copy, states, delta)
            grads += (L - 1) * (units["block_shard"] - block_g) + input_copy
        elif label.startswith("at the embeddings"):
            grads += L * (units["block_shard"] - block_g) + input_copy
            # then the root's post-backward: its parameters resharded, the first block's input freed, the root's
            # gradients copied into a padded reduce-scatter input and reduced into the rank's shard
            add(phase, "the root's reduce-scatter: its gradients, their padded copy and its shard",
                {**parts, "saved activations": 0}, int(own.weights),
                grads - input_copy + units["root_grads"] + units["root_shard"], states, 0)
        add(phase, label, parts, int(own.weights) + gathered, grads, states, delta)
    phases = {p: max(v for q, _, v in moments if q == p) for p in PHASES}
    engine = ("FSDP2 (fully_shard per block and at the root, reshard_after_forward="
              f"{run.reshard_after_forward}): the root's and the running and prefetched blocks' gathered parameters, "
              "the unsharded gradients before their reduce-scatter and its input buffer, each at its moment"
              if fsdp else "ZeroRedundancyOptimizer: every weight and gradient on every rank, the rank's own tensors' "
                           "states and update temporaries"
              + ("" if not buckets else f"; DistributedDataParallel's buckets, a second copy of the gradients "
                                         f"({buckets:,} B), alive through the step"))
    notes = tuple(plain.notes) + (Note("sharded_peak", f"rank {run.rank}'s peak: the one-GPU step's moments with "
                                       f"what the engine holds at each. {engine}"),)
    return PeakEstimate(forward=phases["forward"], backward=phases["backward"],
                        optimizer_step=phases["optimizer_step"], resident=resident, moments=tuple(moments),
                        notes=notes, step=step, breakdown=tuple(breakdown))
