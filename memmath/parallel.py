"""Many GPUs, as people split a model: data, tensor, sequence, pipeline, context and expert parallelism.

A Run's degrees (memmath/run.py): tp (tensor), pp (pipeline, with pp_schedule "1f1b" or "gpipe" and
micro_batches in the step), cp (context), ep (expert), sequence_parallel (on top of tp), and n_gpus,
which stays the number of GPUs in all: the data-parallel degree is dp = n_gpus / (tp x pp x cp), so
n_gpus must be a multiple of tp x pp x cp (ep is carved out of the dp x cp ranks, as in Megatron-LM's
expert parallelism, so it must divide dp x cp). ZeRO (zero_stage) shards on the data axis: over the
dp x cp ranks that hold the same weights (Megatron's distributed optimizer shards over that group);
expert tensors over dp x cp / ep. batch_size is one micro-batch, seq_len the whole sequence.

Ranks are numbered tensor fastest, then context, then data, then pipeline stage (Megatron's default
order), so rank r is tensor rank r % tp, context rank (r // tp) % cp, data rank (r // (tp cp)) % dp,
stage r // (tp cp dp); `run.rank` picks which one training_memory reports.

What each rank stores, and where the numbers come from:

- Weights, gradients, optimizer states (exact for the tensors torch splits this way; measured over gloo
  by validation/parallel.py): tensor parallelism splits q, k, v, gate and up (and fused qkv / gate_up)
  by output rows (ColwiseParallel), o_proj and down_proj by input columns (RowwiseParallel, their
  biases whole), the token embedding and the head by vocabulary rows (vocab parallel), each into
  torch.chunk pieces of ceil(rows / tp) (DTensor's Shard); norms, position embeddings and the router
  stay whole on every rank. Expert parallelism splits routed experts' 3-D tensors along the expert
  axis (ep), and tensor parallelism splits each expert's width. A pipeline stage holds its
  n_layers / pp blocks, the first stage the embeddings, the last the final norm and the head (a
  tied head keeps a copy of the embedding on the last stage, as Megatron-LM does: derived).
  Context parallelism keeps whole weights.
- Activations: where the exact activation model (memmath/hf_activations.py) applies (a LLaMA-layout
  decoder, full finetuning, no context parallelism), it traces one rank's local model: a/tp heads,
  k/tp key/value heads, I/tp MLP width, its vocabulary piece (the vocab-parallel loss, torch's
  loss_parallel); with sequence_parallel every norm's tensors keep s/tp tokens (torch's
  SequenceParallel; the linear layers after it save the all-gathered input, unlike Megatron-LM,
  which saves the s/tp piece and gathers again in backward). A stage keeps its blocks' tensors for
  every micro-batch in flight: GPipe all m, 1F1B min(m, pp - stage) (torch.distributed.pipelining's
  Schedule1F1B: "first stage num_stages warmups"). Elsewhere (context or expert parallelism, other
  layouts) the per-block bytes are derived from Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", generalised in e and m: sbh(10 + 24/t + 5as/(ht)) with
  tensor parallelism and sbh(34/t + 5as/(ht)) with sequence parallelism at e = 2, m = 1, with s the
  sequence piece s / cp, and a Note says so.
- Communication buffers (derived, not measured): pipeline send/receive buffers of a micro-batch's
  hidden states, the ring-attention key/value chunks of context parallelism, expert parallelism's
  all-to-all dispatch and combine buffers, tensor parallelism's all-gather output under sequence
  parallelism. ParallelMemory.buffers; requirement() adds them to the sum of the parts.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from . import training, validate
from .architectures import known
# The layout's facts (memmath/layout.py), read here and by the lessons as parallel.layout, parallel.bubble, ...
from .layout import (DEGREES, SCHEDULES, Layout, bubble, check, in_flight, interleaved_order,  # noqa: F401
                     is_parallel, layout, most_alive, rank_chunks, rank_order, representative_ranks, schedule_order)
from .methods import Plan, SetStats, TrainableSet
from .models import factored_size
from .notes import Note
from .peak import LATER_MICRO_BATCH, PeakEstimate, optimizer_transient, peak_memory, why_no_peak
from .recipes import update_temporaries
from .run import Run, as_run, ddp_bucket_bytes
from .sharding import torch_groups
from .training import TrainingMemory
from .values import frozen


DDP_BUCKETS = "DistributedDataParallel's all-reduce buckets"  # the name of DDP's buffer, wherever it is counted
# The tensors torch's ColwiseParallel / RowwiseParallel split are each model type's record's tp_plan
# (memmath/architectures/); these are what every type shares.
_VOCAB = ("embed_tokens", "wte", "word_embeddings", "embed_in", "lm_head", "embed_out")
_EXPERTS = ("experts.gate_up_proj", "experts.down_proj")


# ---- one rank's tensors -----------------------------------------------------------------------------
def _piece(rows: int, parts: int, index: int) -> int:
    """Rows of piece `index` when torch.chunk cuts `rows` into `parts` (DTensor's Shard): ceil(rows / parts)
    each, the last ones shorter or empty."""
    size = -(-rows // parts)
    return max(0, min(size, rows - index * size))


@functools.lru_cache(maxsize=1 << 16)  # every rank asks it of the same names: a 70B model has 723 tensors
def _ends(name: str, suffixes) -> bool:
    base = name.removesuffix(".weight").removesuffix(".bias")
    return any(base == s or base.endswith("." + s) for s in suffixes)


def _split(name: str, dims: tuple, record, lay: Layout, at: dict) -> tuple:
    """(local dims of one tensor on the rank at coordinates `at`, whether it is an expert tensor)."""
    tp, t = lay.tp, at["tp"]
    dims = tuple(dims)
    if any(name.endswith(s) for s in _EXPERTS):  # (E, 2I, h) / (E, h, I): experts by ep, widths by tp
        local = [dims[0] // lay.ep, dims[1], dims[2]]
        width = 1 if name.endswith("gate_up_proj") else 2
        local[width] = local[width] // tp
        return tuple(local), True
    if tp == 1:
        return dims, False
    conv1d = record is not None and record.is_conv1d(name)  # stored (in, out)
    if _ends(name, _VOCAB) and not name.startswith("wpe"):
        return (_piece(dims[0], tp, t), *dims[1:]), False
    style = None if record is None else record.tp_style(name)
    if style == "colwise":
        if len(dims) == 1:
            return (dims[0] // tp,), False
        return ((dims[0], dims[1] // tp) if conv1d else (dims[0] // tp, dims[1])), False
    if style == "rowwise":
        if len(dims) == 1:
            return dims, False
        return ((dims[0] // tp, dims[1]) if conv1d else (dims[0], dims[1] // tp)), False
    if len(dims) >= 2 and not _whole(name):
        raise validate.FieldError("tp", f"tp > 1: memmath does not know how tensor parallelism splits {name} "
                                  f"{dims}")
    return dims, False


def _whole(name: str) -> bool:
    """Tensors every tensor-parallel rank keeps whole: position and token-type embeddings, the router, BERT's
    pooler and classifier, the shared expert's gate."""
    return any(key in name for key in ("wpe", "position_embeddings", "token_type_embeddings", "mlp.gate.weight",
                                       "shared_expert_gate", "pooler", "classifier", "router"))


def rank_tensors(run, rank: int | None = None) -> list[tuple]:
    """(name, local dims, expert tensor?) of every parameter tensor `rank` holds, in parameters() order."""
    return [t[:3] for t in _rank_tensors(run, rank)]


def _rank_tensors(run, rank: int | None = None) -> list[tuple]:
    """rank_tensors with each tensor's chunk: (name, local dims, expert tensor?, chunk). A GPU runs pipeline stages
    chunk x pp + its pipeline coordinate, chunk 0 to virtual_stages - 1 (one chunk but for interleaved 1F1B)."""
    rank = run.rank if rank is None else rank
    # only the model and the degrees matter: one cached answer for every run of the same layout (the planner and a
    # rank's peak ask it many times)
    return _layout_tensors(run.model, run.tp, run.pp, run.cp, run.ep, run.n_gpus, run.virtual_stages, rank)


@functools.lru_cache(maxsize=4096)
def _layout_tensors(shape, tp, pp, cp, ep, n_gpus, virtual_stages, rank) -> tuple:
    lay = Layout(dp=n_gpus // (tp * pp * cp), tp=tp, pp=pp, cp=cp, ep=ep)
    at = lay.coordinates(rank)
    v = virtual_stages
    per_stage = shape.n_layers // (lay.pp * v)
    stage, last = at["pp"], lay.pp - 1
    groups = torch_groups(shape)
    placed = ([(name, dims, "first", 0) for name, dims in groups["vision"] + groups["embeddings"]]
              + [(name, dims, "block", block) for block, tensors in enumerate(groups["per_block"])
                 for name, dims in tensors]
              + [(name, dims, "last", 0) for name, dims in groups["final_norm"] + groups["head"]])
    out = []
    for name, dims, where, block in placed:
        if where == "block" and (block // per_stage) % lay.pp != stage:
            continue
        if where == "first" and stage != 0 or where == "last" and stage != last:
            continue
        chunk = 0 if where == "first" else v - 1 if where == "last" else block // per_stage // lay.pp
        local, expert = _split(name, dims, shape.architecture, lay, at)
        out.append((name, local, expert, chunk))
    if shape.tied_embeddings and lay.pp > 1 and stage == last:
        # Megatron-LM keeps the tied word embedding on the last stage too (its gradient all-reduced with the first's).
        name, dims = groups["embeddings"][0]
        local, expert = _split(name, dims, shape.architecture, lay, at)
        out.append((name + " (tied copy on the last stage)", local, expert, v - 1))
    return tuple(out)


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


# ---- one rank's weights, gradients, states -----------------------------------------------------------
def rank_parts(run, rank: int | None = None) -> dict:
    """Weights, gradients, gradient accumulation, master weights and optimizer states of one rank (ZeRO on the
    data axis), with its parameter and tensor counts and the OptimizerStates detail."""
    return dict(_rank_parts(run.cache_key, run.rank if rank is None else rank))


@functools.lru_cache(maxsize=4096)  # a rank's peak, its memory and the planner ask it of the same run many times
def _rank_parts(key: tuple, rank: int) -> dict:
    run = key[0]
    lay = layout(run)
    recipe, opt = run.recipe, run.optimizer_spec
    tensors = rank_tensors(run, rank)
    result = {"weights": 0, "gradients": 0, "gradient_accumulation": 0, "master_weights": 0, "optimizer_states": 0,
              "params": 0, "tensors": len(tensors)}
    detail, maps = None, 0
    for expert in (False, True):
        group = [dims for _, dims, e in tensors if e == expert]
        if not group:
            continue
        stats = SetStats()
        counts = {}  # the same shapes repeat in every block: add each shape's statistics once, times its count
        for dims in group:
            counts[tuple(dims)] = counts.get(tuple(dims), 0) + 1
        for dims, k in counts.items():
            n = _numel(dims)
            stats = stats + SetStats.tensor(n, factored_size(dims)).times(k)
        trainable = TrainableSet.of("expert weights" if expert else "weights", stats, recipe.weight_bits)
        plan = Plan(weight_bytes=validate.ceil_div(stats.params * recipe.weight_bits, 8), quantization_constant_bytes=0,
                    trainable=(trainable,), adapter_params=0, layers_storing=0, embeddings_trainable=True)
        grads, accumulation, master, states = training.trainable_parts(plan, recipe, opt, run.model, [])
        if opt.min_8bit_size and stats.params - stats.small > 0:  # bitsandbytes' two maps: once per rank, added below
            states = training.OptimizerStates(moments=states.moments, step_counters=states.step_counters,
                                              block_constants=states.block_constants - training.BNB_QMAP_BYTES)
            maps = training.BNB_QMAP_BYTES
        weights, state_bytes = plan.weight_bytes, states.total
        group_size = lay.dp * lay.cp // (lay.ep if expert else 1)  # the ranks that hold the same tensors
        if group_size > 1 and run.zero_stage:
            state_bytes, master = training.shard(state_bytes, group_size), training.shard(master, group_size)
            if run.zero_stage >= 2:
                grads, accumulation = training.shard(grads, group_size), training.shard(accumulation, group_size)
            if run.zero_stage >= 3:
                weights = training.shard(weights, group_size)
        detail = states if detail is None else detail + states
        for key, value in (("weights", weights), ("gradients", grads), ("gradient_accumulation", accumulation),
                           ("master_weights", master), ("optimizer_states", state_bytes), ("params", stats.params)):
            result[key] += value
    if maps:  # one pair of quantization maps per optimizer, whatever its groups and however ZeRO shards the states
        detail = detail + training.OptimizerStates(block_constants=maps)
        result["optimizer_states"] += maps
    at = lay.coordinates(run.rank if rank is None else rank)
    if lay.tp > 1 and at["pp"] == 0:
        # torch 2.13's RowwiseParallel on nn.Embedding: the vocabulary-sharded weight's gradient is the whole V x h on
        # every rank (measured by validation/parallel.py; Megatron-LM's VocabParallelEmbedding keeps V / tp rows).
        name, dims = next(((n, d) for n, d, _ in tensors if _ends(n, _VOCAB)), (None, None))
        if name is not None:
            full = run.model.vocab_size * _numel(dims[1:])
            group = lay.dp * lay.cp
            extra = validate.ceil_div((full - _numel(dims)) * run.recipe.grad_bits, 8)
            if run.zero_stage >= 3 and group > 1:
                # FSDP2 over tensor parallelism reduce-scatters the embedding's gradient to its own shard
                extra = 0
            elif run.zero_stage >= 2 and group > 1:
                extra = validate.ceil_div(extra, group)
            result["gradients"] += extra
            result["embedding_gradient_extra"] = extra
            if opt.name == "sgd_momentum" and not (run.zero_stage >= 3 and group > 1):
                # torch.optim.SGD's momentum buffer starts as torch.clone(grad): the whole-vocabulary gradient's size
                bits = recipe.weight_bits if recipe.states_follow_params else recipe.state_bits
                momentum = validate.ceil_div((full - _numel(dims)) * bits, 8)
                if run.zero_stage >= 1 and group > 1:
                    momentum = validate.ceil_div(momentum, group)
                result["optimizer_states"] += momentum
                result["embedding_momentum_extra"] = momentum
    result["optimizer_state_detail"] = detail
    return result


# ---- activations ------------------------------------------------------------------------------------
def exact_applies(run) -> str:
    """"" when the exact activation model replays one rank of this run, else why not."""
    shape = run.model
    if run.activations != "transformers":
        return "the run uses the textbook activation model"
    if run.cp > 1:
        return "context parallelism splits attention across ranks (ring attention), which the trace does not replay"
    if run.tp > 1 and (not (known(shape) and shape.architecture.tp_traced) or shape.n_experts
                       or shape.fused_qkv or shape.fused_gate_up):
        return ("the trace replays one tensor-parallel rank only for a dense LLaMA layout with separate q/k/v and "
                "gate/up projections")
    if run.ep > 1:
        return "expert parallelism's all-to-all dispatch is not traced"
    return ""


def local_shape(run, rank: int | None = None):
    """The ModelShape of one tensor-parallel rank's local model: a/tp heads, k/tp key/value heads, I/tp MLP width,
    its piece of the vocabulary (the exact trace of it is that rank's activations)."""
    shape, lay = run.model, layout(run)
    rank = run.rank if rank is None else rank
    tp = lay.tp
    if tp == 1:
        return shape
    t = lay.coordinates(rank)["tp"]
    kv = shape.n_kv_heads or shape.n_heads
    return replace(shape, n_heads=shape.n_heads // tp, n_kv_heads=kv // tp, head_dim=shape.head_dim,
                   intermediate_size=shape.intermediate_size // tp, vocab_size=max(1, _piece(shape.vocab_size, tp, t)),
                   name=f"{shape.name} (tensor rank {t} of {tp})" if shape.name else "")


def _sp_share(terms, tp: int) -> int:
    """Bytes of one micro-batch's saved norm tensors (each block's and the final norm's) that sequence parallelism
    leaves on s/tp tokens: (1 - 1/tp) of them are not kept."""
    # with checkpointing a block keeps only its input, which sequence parallelism leaves Shard(1) too (read off a
    # recorded checkpointed tensor + sequence parallel run of validation/parallel.py, so that run is not held out)
    norm = sum(b for place, label, b in terms if "layernorm" in label or "final norm" in label
               or label == "block input (checkpoint)")
    return norm - validate.ceil_div(norm, tp)


def _chunk_activations(run, rank, chunk: dict, parts, est, tp: int) -> tuple:
    """(bytes one micro-batch keeps on this chunk, sequence parallelism's cut of them), from the traced parts."""
    first, last, layers = chunk["first"], chunk["last"], chunk["layers"]
    first_block = est.first_layer if est.first_layer is not None else est.per_layer
    blocks = est.per_layer * layers + ((first_block - est.per_layer) if first else 0)
    outside = (parts.embeddings if first else 0) + parts.tables + ((parts.head + parts.loss) if last else 0)
    cut = 0
    if run.sequence_parallel:
        cut = _sp_share([t for t in est.terms if t[0] == "each block"], tp) * layers + (
            _sp_share([t for t in est.terms if t[0] == "outside"], tp) if last else 0)
    return blocks + outside - cut, cut


def stage_activations(run, rank: int | None = None) -> dict:
    """One rank's activations: {"total", "per_micro_batch", "in_flight", "exact", "notes", "parts", "local_run",
    "chunks", "per_chunk", "sequence_parallel_cut"}.

    per_micro_batch: what one micro-batch keeps on every stage the GPU runs (one but for interleaved 1F1B);
    per_chunk: the same per stage; total: the most alive at once as the schedule runs (rank_order); in_flight: the
    most micro-batches (micro-batch stages, interleaved) alive at once. exact: the exact trace of the rank's local
    model (see the module doc); else derived from Korthikanti et al."""
    lay = layout(run)
    rank = run.rank if rank is None else rank
    chunks = rank_chunks(run, rank)
    order = rank_order(run, rank)
    why = exact_applies(run)
    notes = []
    if run.seq_len is None:
        flight = most_alive(order, [0] * len(chunks))[1] if lay.pp > 1 else 1
        return {"total": 0, "per_micro_batch": 0, "in_flight": flight, "exact": False, "notes": notes, "parts": None,
                "local_run": None, "chunks": chunks, "per_chunk": [0] * len(chunks), "sequence_parallel_cut": 0}
    if not why:
        local = Run(local_shape(run, rank), precision=run.precision, optimizer=run.optimizer, batch_size=run.batch_size,
                    seq_len=run.seq_len, checkpointing=run.checkpointing, attention=run.attention, dropout=run.dropout,
                    activations="transformers", device=run.device, mixer_kernels=run.mixer_kernels,
                    grad_accum_steps=run.grad_accum_steps)
        _, parts = training.step_parts(local)
        pieces = [_chunk_activations(run, rank, chunk, parts, parts.estimate, lay.tp) for chunk in chunks]
        per_chunk, cut = [one for one, _ in pieces], sum(c for _, c in pieces)
    else:
        notes.append(Note("parallel_activations_derived",
                          f"activations per rank derived from Korthikanti et al. 2022 (tensor {lay.tp}, sequence "
                          f"parallel {'on' if run.sequence_parallel else 'off'}, context {lay.cp}), not traced: {why}"))
        parts = local = None
        per_chunk = [derived_stage_bytes(run, first=c["first"], last=c["last"], layers=c["layers"]) for c in chunks]
        cut = 0
    total, flight = most_alive(order, per_chunk) if lay.pp > 1 else (per_chunk[0], 1)
    return {"total": total, "per_micro_batch": sum(per_chunk), "in_flight": flight, "exact": not why, "notes": notes,
            "parts": parts, "local_run": local, "chunks": chunks, "per_chunk": per_chunk, "sequence_parallel_cut": cut}


def korthikanti_parallel_per_layer(*, seq_len, batch_size, hidden_size, n_heads, tp=1, sequence_parallel=False,
                                   cp=1, intermediate_size=None, element_bytes=2, mask_bytes=1, dropout=True,
                                   attention="eager") -> int:
    """Bytes one block keeps on one rank (Korthikanti et al. 2022, section 4, generalised in e and m).

    Unsplit by tensor parallelism: the norms' inputs 2e, the attention and MLP inputs e + e, two dropout masks
    2m, per sbh; split: q k v and the attention output 4e, and the MLP's two wide tensors 2e I/h (8e at
    I = 4h), per sbh; the scores a s^2 b (e + e + m) with eager attention, 4 a s b with fused attention.
    At e = 2, m = 1, I = 4h, eager: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism everything / t:
    sbh(34/t + 5as/(ht)). Context parallelism keeps s / cp query tokens against all s keys.
    """
    s, b, h, a, e, t = seq_len // cp, batch_size, hidden_size, n_heads, element_bytes, tp
    inner = intermediate_size or 4 * h
    m = mask_bytes if dropout else 0
    whole = s * b * h * (4 * e + 2 * m)
    split = s * b * (4 * e * h + 2 * e * inner)
    if attention == "eager":
        split += a * s * seq_len * b * (e + ((e + m) if dropout else 0))
    else:
        split += 4 * a * s * b
    return (whole + split) // t if sequence_parallel else whole + split // t


def derived_stage_bytes(run, *, first: bool, last: bool, layers: int) -> int:
    """One micro-batch's activations on one stage, derived (Korthikanti et al. 2022): its blocks, the token ids
    and embedding dropout mask on the first stage, the final norm, head input and the vocab-parallel loss
    (the fp32 logits and their log-softmax, 8 s b V / t) on the last."""
    shape, lay = run.model, layout(run)
    e = run.recipe.activation_bits // 8
    m = (1 if run.device == "cuda" else e) if run.dropout else 0
    s, b, h = run.seq_len // lay.cp, run.batch_size, shape.hidden_size
    inner = (shape.experts_per_tok * shape.expert_intermediate_size + shape.shared_expert_intermediate_size
             if shape.n_experts else shape.intermediate_size)
    per_layer = korthikanti_parallel_per_layer(
        seq_len=run.seq_len, batch_size=b, hidden_size=h, n_heads=shape.n_heads, tp=lay.tp,
        sequence_parallel=run.sequence_parallel, cp=lay.cp, intermediate_size=inner, element_bytes=e, mask_bytes=m,
        dropout=run.dropout, attention=run.attention)
    if run.checkpointing:
        per_layer = e * s * b * h // (lay.tp if run.sequence_parallel else 1)
    sp = lay.tp if run.sequence_parallel else 1
    out = per_layer * layers
    if first:
        out += 8 * s * b + m * s * b * h // sp
    if last:
        out += 2 * e * s * b * h // sp + e * s * b * h + validate.ceil_div(8 * s * b * _loss_vocab(shape), lay.tp)
    return out


def _loss_vocab(shape) -> int:
    """The vocabulary the loss runs over: a causal language model's; 0 for a bidirectional encoder (BERT: BertModel,
    no masked-language-model head, computes no loss over its vocabulary; peak.py judges one such GPU the same way)."""
    record = shape.architecture  # the model type's facts (memmath/architectures/); None for the uniform family
    return (shape.vocab_size or 0) if record is None or record.causal else 0


def rank_memory(run) -> TrainingMemory:
    """The TrainingMemory of one rank (run.rank): its weights, gradients, states and activations, the model's
    parameter counts and the whole model's activation estimate kept; a run that splits nothing is its one GPU's
    (training.step_parts). What training_memory answers for any run."""
    if not is_parallel(run):
        return training.step_parts(run)[0]
    if run.is_sweep:
        return _rank_memory(run)
    return _cached_rank_memory(run.cache_key)


@functools.lru_cache(maxsize=512)  # the planner and a layout's peak ask the same ranks again and again
def _cached_rank_memory(key: tuple) -> TrainingMemory:  # Run.cache_key: the run and what its names stand for now
    return _rank_memory(key[0])


def _rank_memory(run) -> TrainingMemory:
    whole = training.step_parts(run)[0]  # the model whole: its parameter counts, notes and activation estimate
    lay = layout(run)
    notes = whole.notes
    parts = rank_parts(run)
    acts = stage_activations(run)
    at = lay.coordinates(run.rank)
    kept = [n for n in notes if n.kind not in ("data_parallel_full_copy", "zero_on_one_gpu", "engine_sharding")]
    kept.append(Note("parallel_layout", f"{lay.describe()} on {lay.n_gpus:,} GPUs: rank {run.rank} is tensor rank "
                     f"{at['tp']}, pipeline stage {at['pp']}" + (f", context rank {at['cp']}" if lay.cp > 1 else "")
                     + (f", expert rank {at['ep']}" if lay.ep > 1 else "") + " (memmath/parallel.py)"))
    if lay.pp > 1:
        idle = bubble(run.pp_schedule, lay.pp, run.micro_batches, run.virtual_stages)
        if run.pp_schedule == "interleaved":
            kept.append(Note("pipeline_in_flight", f"interleaved 1F1B, {run.virtual_stages} stages per GPU: this GPU "
                             f"keeps at most {acts['in_flight']} micro-batch stages' activations at once (of "
                             f"{run.micro_batches} micro-batches x {run.virtual_stages} stages); the bubble idles "
                             f"{idle:.0%} of the step"))
        else:
            kept.append(Note("pipeline_in_flight", f"{run.pp_schedule}: this stage keeps {acts['in_flight']} of "
                             f"{run.micro_batches} micro-batches' activations at once; the bubble idles "
                             f"{idle:.0%} of the step"))
    if run.zero_stage and lay.dp * lay.cp == 1:
        kept.append(Note("zero_on_one_gpu", f"ZeRO stage {run.zero_stage} with one data-parallel rank shards nothing"))
    if lay.dp > 1 and not run.zero_stage:
        kept.append(Note("data_parallel_full_copy", "data parallel without ZeRO: every data-parallel rank holds a "
                         "full copy of its tensor/pipeline share; PyTorch DDP's default all-reduce buckets, a second "
                         "copy of the gradients, are counted among the communication buffers unless "
                         "gradient_as_bucket_view=True (gradients averaged in place, as validation/parallel.py does)"))
    if run.model.tied_embeddings and lay.pp > 1 and at["pp"] == lay.pp - 1:
        kept.append(Note("tied_copy_last_stage", "the tied embedding is kept on the last stage too (Megatron-LM), "
                         "derived"))
    if buffers(run):
        kept.append(Note("parallel_buffers", "communication buffers (derived, not measured) are not a part: "
                         "requirement() counts them, in the step's peak where memmath models it, else added to the "
                         "sum of the parts"))
    kept += acts["notes"]
    return replace(whole, weights=parts["weights"], quantization_constants=0, gradients=parts["gradients"],
                   gradient_accumulation=parts["gradient_accumulation"], master_weights=parts["master_weights"],
                   optimizer_states=parts["optimizer_states"], optimizer_state_detail=parts["optimizer_state_detail"],
                   activations=acts["total"], notes=tuple(kept))


# ---- communication buffers (derived) ----------------------------------------------------------------
def buffers(run, rank: int | None = None) -> dict:
    """Communication buffers one rank holds at once (derived from what each collective moves, not measured)."""
    shape, lay = run.model, layout(run)
    rank = run.rank if rank is None else rank
    out = {}
    parts = rank_parts(run, rank)
    ddp = ddp_bucket_bytes(run, parts["gradients"] - parts.get("embedding_gradient_extra", 0))
    if ddp:  # the data-parallel copies of each tensor/pipeline share all-reduce through DDP's buckets
        out[DDP_BUCKETS] = ddp
    if run.seq_len is None or not shape.has_shape:
        return out
    e = run.recipe.activation_bits // 8
    s, b, h = run.seq_len // lay.cp, run.batch_size, shape.hidden_size
    sp = lay.tp if run.sequence_parallel else 1
    hidden = e * s * b * h // sp
    if lay.pp > 1:
        # torch.distributed.pipelining's PipelineStage makes one receive buffer per micro-batch and keeps them across
        # steps (stage.py _prepare_forward_infra): a stage after the first receives each micro-batch's hidden states,
        # a stage before the last each micro-batch's gradient of its output.
        # (each stage it runs: interleaved 1F1B runs several)
        chunks = rank_chunks(run, rank)
        if any(not c["first"] for c in chunks):
            receiving = sum(not c["first"] for c in chunks)
            out["pipeline activation receive buffers"] = receiving * run.micro_batches * hidden
        if any(not c["last"] for c in chunks):
            out["pipeline gradient receive buffers"] = sum(not c["last"] for c in chunks) * run.micro_batches * hidden
    if lay.tp > 1 and run.sequence_parallel:  # the all-gathered block input, the size of the whole sequence
        out["sequence-parallel all-gather"] = e * s * b * h
    if lay.cp > 1:  # ring attention: the key/value chunk being received while the current one is used
        kv = (shape.n_kv_heads or shape.n_heads) // lay.tp * shape.head_dim
        out["context-parallel key/value chunks"] = 2 * 2 * e * s * b * kv
    if lay.ep > 1:  # the routed tokens' hidden states, dispatched and combined
        out["expert all-to-all"] = 2 * e * s * b * shape.experts_per_tok * h
    return out


# ---- one rank's peak (derived) ---------------------------------------------------------------------
def loss_parallel_extra(run, rank: int | None = None) -> int:
    """What torch's loss_parallel holds at the loss beyond one GPU's cross-entropy, on a tensor rank with its
    vocabulary piece V/t: one more fp32 t x V/t tensor, forward and backward (torch/distributed/tensor/parallel/
    loss.py: _log_softmax keeps `shifted = x - max` alive beside exp(shifted) and its result, three where
    log_softmax has two; _nll_loss_and_log_softmax_backward computes (zeros_like(x) + exp(x)) * grad_output,
    three fp32 tensors beside the saved log-softmax where log_softmax_backward has two). Found after
    validation/parallel.py's tensor-parallel runs were recorded (a profiler trace of one showed its peak in
    NllLossBackward), so those runs are not held out for it."""
    lay = layout(run)
    if lay.tp == 1 or not _loss_vocab(run.model) or run.seq_len is None:
        return 0
    piece = _piece(run.model.vocab_size, lay.tp, lay.coordinates(run.rank if rank is None else rank)["tp"])
    tokens = run.seq_len // lay.cp * run.batch_size
    return 4 * tokens * piece


def peak_why_not(run) -> str:
    """"" when parallel_peak models this split run on measured ground (validation/parallel.py's engines), else why
    not, in words: then requirement() judges the worst rank's sum of the parts plus its buffers."""
    lay = layout(run)
    if run.seq_len is None:
        return "no sequence length: the activations are left out"
    why = exact_applies(run)
    if why:
        return f"no peak model of this split run: {why}"
    if run.zero_stage and lay.dp * lay.cp > 1:
        return ("no peak model of ZeRO beside tensor or pipeline parallelism (its gathers and reduce-scatters are not "
                "replayed moment by moment)")
    if lay.pp == 1:
        local = stage_activations(run)["local_run"]
        why = why_no_peak(local) if local is not None else "no traced local model"
        if why:
            return f"no peak model of the rank's local model: {why}"
    return ""


def worst_rank_peak(run) -> dict:
    """parallel_peak of the rank whose peak is highest (each stage's first tensor rank, as worst_rank compares),
    with "rank": that rank. For a run peak_why_not accepts."""
    lay = layout(run)
    best = None
    for rank in representative_ranks(run)[::lay.tp]:
        candidate = parallel_peak(run, rank)
        if best is None or candidate["total"] > best["total"]:
            best = {**candidate, "rank": rank}
    return best


def peak_estimate(run, peak: dict):
    """parallel_peak's dict as a PeakEstimate (the one the Requirement carries, as for one GPU)."""
    return PeakEstimate(forward=peak["forward"], backward=peak["backward"], optimizer_step=peak["optimizer_step"],
                        resident=peak["resident"], moments=tuple(peak["moments"]),
                        notes=(Note("parallel_peak", f"rank {peak['rank']}'s step: {peak['basis']} "
                                    "(memmath/parallel.py, measured by validation/parallel.py)"), *peak["notes"]))


def parallel_peak(run, rank: int | None = None, step: str = "steady") -> dict:
    """Estimated peak of one rank's step, per phase and in all ({"forward", "backward", "optimizer_step",
    "total", "basis", "moments"}: each moment (phase, label, bytes)), communication buffers included.

    Tensor parallelism alone (pp = cp = ep = 1, no ZeRO, a layout the exact trace replays): peak_memory's moments
    of the rank's local model (local_shape), less what sequence parallelism keeps on s/tp tokens, plus torch's
    loss_parallel tensor at the loss (loss_parallel_extra), the embedding's whole-vocabulary gradient from the
    embeddings on, and the buffers. Otherwise the stage's schedule replayed micro-batch by micro-batch
    (_schedule_phases), over the traced parts where the exact model applies, else over Korthikanti et al.'s.
    Some of validation/parallel.py's runs were read to find these terms (see _schedule_phases and
    loss_parallel_extra), so only the runs it marks peak_held_out test the peak independently.
    """
    rank = run.rank if rank is None else rank
    if rank != run.rank:
        run = run.replace(rank=rank)
    lay = layout(run)
    memory = rank_memory(run)
    acts = stage_activations(run)
    held = buffers(run)
    # torch.distributed.pipelining keeps its receive buffers across steps, DDP its buckets; the collectives' buffers
    # (the sequence-parallel all-gather, ring attention's chunks, the experts' all-to-all) live only in forward and
    # backward, not at the optimizer step
    extra = sum(held.values())
    persistent = sum(v for k, v in held.items() if k.startswith(("pipeline", DDP_BUCKETS)))
    if lay.pp == lay.cp == lay.ep == 1 and acts["exact"] and not (run.zero_stage and lay.dp > 1):
        single = peak_memory(acts["local_run"], step=step)
        # sequence parallelism's s/tp share of the norms' tensors (not the estimate's total less the per-micro-batch
        # bytes: with checkpointing that total holds a recomputed block too, as the checkpointed split runs show)
        cut = acts["sequence_parallel_cut"]
        grad = rank_parts(run).get("embedding_gradient_extra", 0)  # the whole-vocabulary embedding gradient
        loss = loss_parallel_extra(run, rank)
        moments = []
        for phase, label, value in single.moments:
            value = int(value) + (extra if phase != "optimizer_step" else persistent) + (
                loss if label.startswith("at the loss") else 0)
            # the embedding's whole-vocabulary gradient exists from the embeddings' backward on
            value += (grad if phase == "optimizer_step" or label.startswith("at the embeddings") else 0) - (
                cut if phase != "optimizer_step" else 0)
            moments.append((phase, label, value))
        basis = "peak_memory of the rank's local model"
        resident, notes = int(single.resident) + extra, tuple(single.notes)
    else:
        moments, resident = _schedule_phases(run, rank, step, memory, acts, extra, persistent)
        _, note = optimizer_transient(run.model, run.method, run.recipe, run.optimizer_spec, run.device)
        notes = (note,) if note is not None else ()
        basis = "the stage's schedule replayed over " + ("its traced" if acts["exact"] else "derived") + " parts"
    phases = {phase: max(v for p, _, v in moments if p == phase) for phase in ("forward", "backward", "optimizer_step")}
    return {**phases, "total": max(phases.values()), "basis": basis, "moments": tuple(moments), "resident": resident,
            "notes": notes}


def _stage_terms(run, rank, acts, chunk: int = 0) -> dict:
    """What one micro-batch adds on one stage the GPU runs (chunk), for _schedule_phases: saved (A), the head's and
    loss's share of it, the last block at its fullest, the loss forward and backward, the block's backward working
    set."""
    shape, lay = run.model, layout(run)
    first, last = acts["chunks"][chunk]["first"], acts["chunks"][chunk]["last"]
    e = run.recipe.activation_bits // 8
    t = (run.seq_len or 0) // lay.cp * run.batch_size
    h = shape.hidden_size
    sp = lay.tp if run.sequence_parallel else 1
    inner = (shape.intermediate_size if not shape.n_experts else shape.expert_intermediate_size) // lay.tp
    vocab = validate.ceil_div(_loss_vocab(shape), lay.tp)
    parts = acts["parts"]
    if acts["exact"]:
        est = parts.estimate
        saved = acts["per_chunk"][chunk] - (parts.embeddings_batch if first else 0)  # the token ids are resident
        head = (parts.head + parts.loss) if last else 0
        block = saved - head - est.per_layer + parts.block_live
        loss_forward = saved - head + parts.head_live
        recompute = parts.recompute_live
    else:
        saved = acts["per_chunk"][chunk]
        head = (2 * e * t * h // sp + e * t * h + validate.ceil_div(8 * t * _loss_vocab(shape), lay.tp)) if last \
            else 0
        block = saved - head + 2 * t * inner * e  # the MLP's wide temporaries of the block running forward
        loss_forward = saved - head + t * vocab * (e + 8)  # the logits, their fp32 copy, the log-softmax output
        recompute = 0 if run.seq_len is None else korthikanti_parallel_per_layer(
            seq_len=run.seq_len, batch_size=run.batch_size, hidden_size=h, n_heads=shape.n_heads, tp=lay.tp,
            sequence_parallel=run.sequence_parallel, cp=lay.cp, intermediate_size=inner * lay.tp, element_bytes=e,
            dropout=run.dropout, attention=run.attention) + 2 * t * inner * e
    if not first and e == 4 and getattr(shape.architecture, "rotary", False):
        # an fp32 stage's first RMSNorm saves its input as it is (.to(float32) copies nothing): the receive buffer,
        # which buffers() counts already
        saved, block, loss_forward = saved - e * t * h, block - e * t * h, loss_forward - e * t * h
    loss = loss_parallel_extra(run, rank) if last else 0
    return {"saved": saved, "head": head, "block": block, "loss_forward": loss_forward + loss,
            "loss_backward": saved + 8 * t * vocab + loss,  # two fp32 gradients over the vocabulary (piece)
            "work": t * h * e + 2 * t * inner * e,  # the gradient arriving at a block and two MLP-wide gradients
            "hidden": e * t * h // sp, "logits": t * vocab * e, "first": first, "last": last,
            "recompute": recompute if run.checkpointing else 0}


def _schedule_phases(run, rank, step, memory, acts, extra, persistent=None) -> tuple:
    """One rank's moments (phase, label, bytes) and what is alive before its step, replaying the schedule of the
    stages it runs (rank_order) micro-batch by micro-batch over what each keeps, as torch.distributed.pipelining's
    PipelineStage keeps it (stage.py):

    - each micro-batch's saved tensors (A) from its forward to its backward, and on a stage before the last its
      output (fwd_cache, popped by the backward);
    - on the last stage every micro-batch's logits (output_chunks, for Schedule.step's return_outputs=True), to
      the next step's start, and concatenated into one tensor when the step ends (_merge_outputs);
    - on a stage after the first each backward's input gradient, from that backward until its send completes: the
      next backward's sends are prepared before it waits on them (_backward.py stage_backward: "the memory of
      gradients will be returned to the allocator as soon as the next micro batch's get_bwd_send_ops comes and
      current asynchronous send completes"), so one is alive through the next backward;
    - the gradients from the first backward on (that backward adds the head's before it enters the last block).

    The moments of each forward are the last block at its fullest and (last stage) the loss; of each backward the
    loss's two fp32 vocabulary gradients, entering the last block with its working set, (with checkpointing)
    recomputing the last block over every kept block input, and leaving the stage. The checkpointed split runs of
    validation/parallel.py were not read to write the recomputation moment: they test it.
    Without a pipeline (pp = 1: context or expert parallelism, or ZeRO beside tensor parallelism) the order is
    one forward and one backward. The output, logits and input-gradient terms were found after validation/
    parallel.py's pipeline runs were recorded (by profiler traces of two of them), so those runs are not held
    out for them; the replay itself follows the schedules' source."""
    lay = layout(run)
    chunks = acts["chunks"]
    terms = [_stage_terms(run, rank, acts, c) for c in range(len(chunks))]
    first, last, pipeline = chunks[0]["first"], chunks[-1]["last"], lay.pp > 1
    shape = run.model
    e = run.recipe.activation_bits // 8
    t = (run.seq_len or 0) // lay.cp * run.batch_size
    m = run.micro_batches
    batch = 8 * t * m * (int(first) + int(last))  # the step's token ids (first), labels (last)
    rotary = shape.head_dim * e if getattr(shape.architecture, "rotary", False) else 0
    resident = int(memory.weights) + batch + rotary + extra
    kept = int(memory.master_weights) + (int(memory.optimizer_states) if step == "steady" else 0)
    grads = int(memory.gradients) + int(memory.gradient_accumulation)
    head_names = {t.name for g in ("final_norm", "head") for t in shape.tensors(g)}
    head_grads = sum(validate.ceil_div(_numel(dims) * run.recipe.grad_bits, 8)
                     for name, dims, _ in rank_tensors(run, rank) if name in head_names) if last else 0
    v = len(chunks)
    if v == 1:
        chunk_grads = [grads]
    else:  # each stage's gradients exist from its own first backward on (interleaved 1F1B)
        chunk_grads = [0] * v  # each tensor's gradient and its share of an fp32 accumulation buffer, per stage
        bits = run.recipe.grad_bits + (run.recipe.accum_bits or 0) * bool(int(memory.gradient_accumulation))
        for name, dims, _, c in _rank_tensors(run, rank):
            chunk_grads[c] += validate.ceil_div(_numel(dims) * bits, 8)
        chunk_grads[0] += max(grads - sum(chunk_grads), 0)  # the embedding's whole-vocabulary gradient (tp > 1)
    a = [tm["saved"] for tm in terms]
    out = [tm["hidden"] if pipeline and not tm["last"] else 0 for tm in terms]
    logits = terms[-1]["logits"] if pipeline and last else 0
    input_grad = terms[0]["hidden"] if pipeline and not all(c["first"] for c in chunks) else 0
    # Gradient accumulation over pipeline steps: the step's peak is a later step's, every gradient of the earlier
    # ones held from its start (as peak.py's later micro-batch on one GPU: zero_grad runs once per accumulation).
    later = run.grad_accum_steps > 1
    saved, outputs, backwards, grads_made = [0] * v, 0, 0, [later] * v
    moments = []
    where = (lambda c: f" on its stage {chunks[c]['stage']}") if v > 1 else (lambda c: "")
    accumulating = LATER_MICRO_BATCH if later else ""
    which = (lambda i, c: f" of micro-batch {i + 1} of {m}{where(c)}{accumulating}") if m > 1 or v > 1 or later \
        else (lambda i, c: "")
    for kind, i, c in rank_order(run, rank):
        made = sum(g for g, done in zip(chunk_grads, grads_made) if done)
        kept_saved = sum(n * (a[k] + out[k]) for k, n in enumerate(saved))
        base = resident + kept + outputs * logits
        tm = terms[c]
        if kind == "F":
            held = base + made
            moments.append(("forward", f"forward{which(i, c)}, in the stage's last block at its fullest, "
                            f"{sum(saved)} other micro-batches' tensors kept", held + kept_saved + tm["block"]))
            if tm["last"]:
                moments.append(("forward", f"forward{which(i, c)}, at the loss: the logits and their fp32 copy",
                                held + kept_saved - saved[c] * out[c] + tm["loss_forward"]))
            saved[c] += 1
            outputs += int(bool(logits) and tm["last"])
            continue
        others = kept_saved - (a[c] + out[c])
        base = resident + kept + outputs * logits + (input_grad if backwards else 0)  # the previous one's, being sent
        head = made if grads_made[c] else made + (head_grads if tm["last"] else 0)
        if tm["last"]:
            moments.append(("backward", f"backward{which(i, c)}, at the loss: two fp32 gradients over the vocabulary",
                            base + others + tm["loss_backward"] + made))
        moments.append(("backward", f"backward{which(i, c)}, entering the stage's last block with its working set",
                        base + others + a[c] - tm["head"] + out[c] + tm["work"] + head))
        if run.checkpointing:  # as peak.py's "recomputing the last block", over this stage's kept block inputs
            moments.append(("backward", f"backward{which(i, c)}, recomputing the stage's last block",
                            base + others + a[c] - tm["head"] + out[c] + tm["hidden"] + tm["recompute"] + head))
        grads_made[c] = True
        made = sum(g for g, done in zip(chunk_grads, grads_made) if done)
        moments.append(("backward", f"backward{which(i, c)}, leaving the stage: every gradient so far",
                        base + others + made + (input_grad if not chunks[c]["first"] else 0)))
        saved[c] -= 1
        backwards += 1
    after = resident + outputs * logits  # held to the next step's start
    if logits:  # _merge_outputs: every micro-batch's logits and their concatenation, with every gradient
        moments.append(("backward", "the step's end: every micro-batch's logits concatenated (return_outputs)",
                        after + kept + grads + outputs * logits))
    sizes = [validate.ceil_div(_numel(dims) * max(run.recipe.weight_bits, run.recipe.master_bits), 8)
             for _, dims, _ in rank_tensors(run, rank)]
    # the optimizer's temporaries by its entry's rule (recipes.TEMPORARIES); bitsandbytes' update is taken as Adam's
    transient = 0 if run.optimizer_spec.temporaries == "none" else update_temporaries(sizes, run.device)
    moments.append(("optimizer_step", "weights, gradients, states and the optimizer's temporaries",
                    after - (extra - (extra if persistent is None else persistent)) + grads
                    + int(memory.master_weights) + int(memory.optimizer_states) + transient))
    return moments, resident


# ---- one rank, and the worst rank ------------------------------------------------------------------
@frozen
class ParallelMemory:
    """One rank of a parallel run: its TrainingMemory, its communication buffers (derived) and where it sits.

    total: the sum of the parts plus the buffers; activations_exact: the exact trace (else derived);
    in_flight: micro-batches whose activations the rank keeps; bubble: the pipeline's idle fraction."""

    memory: object
    buffers: dict
    rank: int
    coordinates: dict
    layout: Layout
    in_flight: int
    activations_exact: bool
    bubble: float

    @property
    def buffer_bytes(self) -> int:
        return sum(self.buffers.values())

    @property
    def total(self) -> int:
        return int(self.memory.total) + self.buffer_bytes


def parallel_memory(model, **settings) -> ParallelMemory:
    """One rank (run.rank) of a parallel run: its parts (rank_memory) and the communication buffers."""
    run = as_run(model, **settings)
    lay = layout(run)
    memory = rank_memory(run)
    acts = stage_activations(run) if is_parallel(run) else None
    return ParallelMemory(memory=memory, buffers=buffers(run), rank=run.rank, coordinates=lay.coordinates(run.rank),
                          layout=lay, in_flight=acts["in_flight"] if acts else 1,
                          activations_exact=bool(acts and acts["exact"]),
                          bubble=bubble(run.pp_schedule, lay.pp, run.micro_batches, run.virtual_stages))


def worst_rank(run) -> ParallelMemory:
    """The rank that holds the most (sum of the parts plus buffers): the one the card must fit.

    Within a stage, tensor rank 0 holds the most: the tensor ranks differ only in their vocabulary piece (and the
    vocab-parallel loss's), and torch.chunk gives the first piece the most rows. So each stage's first rank is
    compared (a 64-rank layout costs 8 ranks' arithmetic, not 64).
    """
    run = as_run(run)  # a Run, or a model whose default run is asked
    if run.is_sweep:
        raise validate.FieldError(run.swept, f"{run.swept} must be a single value: one run has one worst rank")
    best = None
    lay = layout(run)
    for rank in representative_ranks(run)[::lay.tp]:
        candidate = parallel_memory(run.replace(rank=rank))
        if best is None or candidate.total > best.total:
            best = candidate
    return best
