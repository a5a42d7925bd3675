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
from dataclasses import dataclass, replace

from . import validate
from .models import factored_size
from .notes import Note


SCHEDULES = ("1f1b", "gpipe", "interleaved")
DDP_BUCKETS = "DistributedDataParallel's all-reduce buckets"  # the name of DDP's buffer, wherever it is counted
# The schedule's replay walks every (micro-batch, stage) pair of every stage a GPU runs: its time grows with
# virtual_stages^2 x micro_batches, so both are bounded (at the bounds one replay takes seconds, not hours).
MAX_MICRO_BATCHES = 2048
MAX_VIRTUAL_STAGES = 32
DEGREES = ("tp", "pp", "cp", "ep")
# The tensors torch's ColwiseParallel / RowwiseParallel split (by the end of their names), and how.
_COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "qkv_proj", "gate_up_proj", "query_key_value",
            "attn.c_attn", "mlp.c_fc", "query", "key", "value", "intermediate.dense", "dense_h_to_4h")
_ROWWISE = ("o_proj", "down_proj", "attn.c_proj", "mlp.c_proj", "attention.output.dense", "output.dense",
            "attention.dense", "dense_4h_to_h")
_VOCAB = ("embed_tokens", "wte", "word_embeddings", "embed_in", "lm_head", "embed_out")
_EXPERTS = ("experts.gate_up_proj", "experts.down_proj")
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# LLaMA layouts the exact trace replays on one tensor-parallel rank's local widths (separate q/k/v, gate/up).
_EXACT_ARCHS = ("", "llama", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True)
class Layout:
    """The degrees of a run: dp x tp x pp x cp = n_gpus; ep inside dp x cp."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def n_gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def coordinates(self, rank: int) -> dict:
        """Rank -> its place on each axis (tensor fastest, then context, data, pipeline stage)."""
        return {"tp": rank % self.tp, "cp": (rank // self.tp) % self.cp, "dp": (rank // (self.tp * self.cp)) % self.dp,
                "pp": rank // (self.tp * self.cp * self.dp),
                "ep": ((rank // self.tp) % (self.cp * self.dp)) % self.ep}

    def describe(self) -> str:
        return f"{self.dp} data x {self.tp} tensor x {self.pp} pipeline" + (
            f" x {self.cp} context" if self.cp > 1 else "") + (f", {self.ep} expert" if self.ep > 1 else "")


def layout(run) -> Layout:
    """The Layout of a run (n_gpus = dp x tp x pp x cp, checked by Run)."""
    return Layout(dp=run.n_gpus // (run.tp * run.pp * run.cp), tp=run.tp, pp=run.pp, cp=run.cp, ep=run.ep)


def is_parallel(run) -> bool:
    """True when the run splits the model itself (any of tp, pp, cp, ep above 1)."""
    return any(getattr(run, name, 1) > 1 for name in DEGREES)


def check(values: dict, shape, method) -> None:
    """Raise a FieldError naming the field when the degrees do not fit the model or each other."""
    from .methods import Full

    tp, pp, cp, ep, n = values["tp"], values["pp"], values["cp"], values["ep"], values["n_gpus"]
    split = tp * pp * cp
    if n % split:
        raise validate.FieldError("n_gpus", f"n_gpus ({n:,}) must be a multiple of tp x pp x cp = {tp} x {pp} x {cp} = "
                                  f"{split:,}: the data-parallel degree is n_gpus / (tp x pp x cp)")
    dp = n // split
    if values["sequence_parallel"] and tp < 2:
        raise validate.FieldError("sequence_parallel", "sequence_parallel splits along the sequence what tensor "
                                  "parallelism keeps whole (norms, dropout): it needs tp of 2 or more")
    v = values.get("virtual_stages", 1)
    if values["pp_schedule"] == "interleaved":
        if pp < 2:
            raise validate.FieldError("pp", "pp_schedule='interleaved' runs several stages on each of pp >= 2 GPUs")
        if v < 2:
            raise validate.FieldError("virtual_stages", "pp_schedule='interleaved' needs virtual_stages of 2 or more "
                                      f"(the stages each GPU runs); got {v}")
        if shape.n_layers % (pp * v):
            raise validate.FieldError("virtual_stages", f"pp x virtual_stages = {pp} x {v} must divide the model's "
                                      f"{shape.n_layers:,} blocks: each of the pp x v stages holds as many")
        m = values["micro_batches"]
        rounds = max(1, m // pp)
        if m % rounds:  # torch's ScheduleInterleaved1F1B: "a multiple of the number of rounds"
            raise validate.FieldError("micro_batches", f"micro_batches ({m}) must be a multiple of max(1, m // pp) = "
                                      f"{rounds} for torch's interleaved 1F1B")
    elif v > 1:
        raise validate.FieldError("virtual_stages", f"virtual_stages ({v}) > 1 needs pp_schedule='interleaved'")
    elif values["pp_schedule"] != "1f1b" and pp < 2:
        raise validate.FieldError("pp_schedule", f"pp_schedule={values['pp_schedule']!r} schedules a pipeline: it "
                                  "needs pp of 2 or more ('1f1b', the default, for a run without pipeline parallelism)")
    if values["micro_batches"] > 1 and pp < 2:
        raise validate.FieldError("micro_batches", f"micro_batches ({values['micro_batches']}) splits a pipeline "
                                  "step: it needs pp of 2 or more (1 for a run without pipeline parallelism)")
    if not (tp > 1 or pp > 1 or cp > 1 or ep > 1):
        return
    if (dp * cp) % ep:
        raise validate.FieldError("ep", f"ep ({ep}) must divide dp x cp = {dp} x {cp}: expert parallelism spreads the "
                                  "experts over ranks that hold the same dense weights")
    name = next(d for d in DEGREES if values[d] > 1)
    if not isinstance(method, Full):
        raise validate.FieldError("method", f"{name} > 1 is modelled for full finetuning (method=Full()) only; got "
                                  f"{method.describe()}")
    if values["sharding"] != "even":
        raise validate.FieldError("sharding", f"sharding={values['sharding']!r} models one engine's data-parallel "
                                  f"sharding; with {name} > 1 use sharding='even' (ZeRO on the data axis)")
    if not shape.tensor_count_known or not shape.has_shape:
        raise validate.FieldError(name, f"{name} > 1 needs the model's tensors: pass a preset or a ModelShape with "
                                  "layers, not a parameter count or a uniform model")
    if shape.vision is not None:
        raise validate.FieldError(name, f"{name} > 1 is not modelled for a vision-language model")
    if tp > 1:
        kv = shape.n_kv_heads or shape.n_heads
        for label, size in (("attention heads", shape.n_heads), ("key/value heads", kv),
                            ("the MLP width", shape.intermediate_size if not shape.n_experts else None),
                            ("an expert's width", shape.expert_intermediate_size if shape.n_experts else None),
                            ("the shared expert's width", shape.shared_expert_intermediate_size or None)):
            if size is not None and size % tp:
                raise validate.FieldError("tp", f"tp ({tp}) must divide {label} ({size:,}): tensor parallelism "
                                          "gives each rank whole heads and an equal share of the width")
        if shape.qk_norm == "full":
            raise validate.FieldError("tp", "tp > 1 is not modelled for OLMo 2's q/k norms over all heads")
    if pp > 1 and shape.n_layers % pp:
        raise validate.FieldError("pp", f"pp ({pp}) must divide the model's {shape.n_layers:,} blocks: each stage "
                                  "holds n_layers / pp of them")
    if ep > 1:
        if not shape.n_experts:
            raise validate.FieldError("ep", f"ep ({ep}) splits a mixture of experts' routed experts; "
                                      f"{shape.name or 'this model'} is dense (ep must be 1)")
        if shape.n_experts % ep:
            raise validate.FieldError("ep", f"ep ({ep}) must divide the {shape.n_experts} routed experts")
    seq_len = values["seq_len"]
    if cp > 1 and seq_len is not None:
        if validate.is_array(seq_len):
            raise validate.FieldError("seq_len", "seq_len must be a single value with cp > 1")
        if seq_len % cp:
            raise validate.FieldError("cp", f"cp ({cp}) must divide seq_len ({seq_len:,}): each rank keeps "
                                      "seq_len / cp tokens")
    if validate.is_array(values["batch_size"]) or validate.is_array(seq_len):
        raise validate.FieldError("batch_size" if validate.is_array(values["batch_size"]) else "seq_len",
                                  f"a run with {name} > 1 takes single sizes, not sweeps")
    for field_name in ("padded", "packed"):
        if values.get(field_name):
            raise validate.FieldError(field_name, f"a {field_name} batch is modelled on one GPU or data parallel only "
                                      f"(validation/padding.py measured no split run); with {name} > 1 use "
                                      f"{field_name}=False")


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


def _split(name: str, dims: tuple, family: str, lay: Layout, at: dict) -> tuple:
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
    conv1d = family == "gpt2" and name in _CONV1D  # stored (in, out)
    if _ends(name, _VOCAB) and not name.startswith("wpe"):
        return (_piece(dims[0], tp, t), *dims[1:]), False
    if _ends(name, _COLWISE):
        if len(dims) == 1:
            return (dims[0] // tp,), False
        return ((dims[0], dims[1] // tp) if conv1d else (dims[0] // tp, dims[1])), False
    if _ends(name, _ROWWISE):
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
    from .sharding import torch_tensors

    lay = Layout(dp=n_gpus // (tp * pp * cp), tp=tp, pp=pp, cp=cp, ep=ep)
    at = lay.coordinates(rank)
    v = virtual_stages
    per_stage = shape.n_layers // (lay.pp * v)
    stage, last = at["pp"], lay.pp - 1
    tensors = torch_tensors(shape)
    groups = {g: [t.name for t in shape.tensors(g)] for g in ("embeddings", "final_norm", "head")}
    n_embed = len(groups["embeddings"])
    n_layer = len(shape.tensors("layer"))
    out = []
    for index, (name, dims) in enumerate(tensors):
        if index < n_embed:
            where = "first"
        elif index < n_embed + n_layer * shape.n_layers:
            block = (index - n_embed) // n_layer
            where = "block" if (block // per_stage) % lay.pp == stage else None
        else:
            where = "last"
        if where == "first" and stage != 0 or where == "last" and stage != last or where is None:
            continue
        chunk = 0 if where == "first" else v - 1 if where == "last" else block // per_stage // lay.pp
        local, expert = _split(name, dims, shape.family, lay, at)
        out.append((name, local, expert, chunk))
    if shape.tied_embeddings and lay.pp > 1 and stage == last:
        # Megatron-LM keeps the tied word embedding on the last stage too (its gradient all-reduced with the first's).
        name, dims = tensors[0]
        local, expert = _split(name, dims, shape.family, lay, at)
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
    from .methods import Plan, SetStats, TrainableSet
    from .training import BNB_QMAP_BYTES, OptimizerStates, _shard, _trainable_parts

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
        grads, accumulation, master, states = _trainable_parts(plan, recipe, opt, run.model, [])
        if opt.min_8bit_size and stats.params - stats.small > 0:  # bitsandbytes' two maps: once per rank, added below
            states = OptimizerStates(moments=states.moments, step_counters=states.step_counters,
                                     block_constants=states.block_constants - BNB_QMAP_BYTES)
            maps = BNB_QMAP_BYTES
        weights, state_bytes = plan.weight_bytes, states.total
        group_size = lay.dp * lay.cp // (lay.ep if expert else 1)  # the ranks that hold the same tensors
        if group_size > 1 and run.zero_stage:
            state_bytes, master = _shard(state_bytes, group_size), _shard(master, group_size)
            if run.zero_stage >= 2:
                grads, accumulation = _shard(grads, group_size), _shard(accumulation, group_size)
            if run.zero_stage >= 3:
                weights = _shard(weights, group_size)
        detail = states if detail is None else detail + states
        for key, value in (("weights", weights), ("gradients", grads), ("gradient_accumulation", accumulation),
                           ("master_weights", master), ("optimizer_states", state_bytes), ("params", stats.params)):
            result[key] += value
    if maps:  # one pair of quantization maps per optimizer, whatever its groups and however ZeRO shards the states
        detail = detail + OptimizerStates(block_constants=maps)
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
def in_flight(schedule: str, pp: int, micro_batches: int, stage: int, virtual_stages: int = 1) -> int:
    """Micro-batches whose activations a stage keeps at once: GPipe all m (every forward before any backward);
    1F1B min(m, pp - stage) (torch.distributed.pipelining Schedule1F1B's warm-up: the first stage runs pp
    forwards before its first backward, the last one); interleaved 1F1B, the most micro-batch stages alive at
    once on pipeline rank `stage` as interleaved_order runs them."""
    if pp == 1:
        return 1
    if schedule == "interleaved":
        order = interleaved_order(pp, virtual_stages, micro_batches, stage)
        return _most_alive(order, [1] * virtual_stages)[1]
    return micro_batches if schedule == "gpipe" else min(micro_batches, pp - stage)


def bubble(schedule: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """The pipeline's idle fraction (pp - 1) / (m + pp - 1), for GPipe (Huang et al. 2019) and 1F1B alike
    (Narayanan et al. 2021: 1F1B keeps GPipe's bubble and holds fewer micro-batches); interleaved 1F1B over v
    stages per GPU shrinks the bubble's time v-fold (Narayanan et al. 2021, section 2.2): (pp - 1) / (v m + pp - 1)."""
    v = virtual_stages if schedule == "interleaved" else 1
    return (pp - 1) / (v * micro_batches + pp - 1)


def exact_applies(run) -> str:
    """"" when the exact activation model replays one rank of this run, else why not."""
    shape = run.model
    if run.activations != "transformers":
        return "the run uses the textbook activation model"
    if run.cp > 1:
        return "context parallelism splits attention across ranks (ring attention), which the trace does not replay"
    if run.tp > 1 and (shape.family != "llama" or shape.arch not in _EXACT_ARCHS or shape.n_experts
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
    # with checkpointing a block keeps only its input, which sequence parallelism leaves Shard(1) too (found after
    # validation/parallel.py's round 3 recorded a checkpointed tensor + sequence parallel run: not held out for it)
    norm = sum(b for place, label, b in terms if "layernorm" in label or "final norm" in label
               or label == "block input (checkpoint)")
    return norm - validate.ceil_div(norm, tp)


def rank_chunks(run, rank: int | None = None) -> list[dict]:
    """The pipeline stages one GPU runs, as {"chunk", "stage", "first", "last", "layers"}: one (its pipeline
    coordinate) but for interleaved 1F1B, where chunk c is stage c x pp + the coordinate of pp x v stages."""
    lay = layout(run)
    at = lay.coordinates(run.rank if rank is None else rank)
    v = run.virtual_stages
    stages = lay.pp * v
    return [{"chunk": c, "stage": c * lay.pp + at["pp"], "first": c * lay.pp + at["pp"] == 0,
             "last": c * lay.pp + at["pp"] == stages - 1, "layers": run.model.n_layers // stages} for c in range(v)]


def rank_order(run, rank: int | None = None) -> list[tuple]:
    """The GPU's actions in order, ("F" or "B", micro-batch, chunk): schedule_order's for GPipe and 1F1B (chunk 0),
    interleaved_order's for interleaved 1F1B."""
    lay = layout(run)
    at = lay.coordinates(run.rank if rank is None else rank)
    if run.pp_schedule == "interleaved" and lay.pp > 1:
        return interleaved_order(lay.pp, run.virtual_stages, run.micro_batches, at["pp"])
    return [(kind, i, 0) for kind, i in schedule_order(run.pp_schedule, lay.pp, run.micro_batches, at["pp"])]


def interleaved_order(pp: int, virtual_stages: int, micro_batches: int, rank: int) -> list[tuple]:
    """ScheduleInterleaved1F1B's actions on pipeline rank `rank`, ("F" or "B", micro-batch, chunk), as torch 2.13
    computes them (schedules.py _get_warmup_ops and _get_1f1b_rank_ops, without the idle slots): (v - 1) x m/r
    + 2 (pp - 1 - rank) warm-up forwards (r = max(1, m // pp) rounds of m/r micro-batches), then a forward and a
    backward by turns, then the remaining backwards; forward k runs chunk (k // (m/r)) % v, backward k after the
    warm-up chunk v - 1 - ((k - warm-up) // (m/r)) % v."""
    v, m = virtual_stages, micro_batches
    per_round = m // max(1, m // pp)
    total = v * m
    warm = min((v - 1) * per_round + 2 * (pp - 1 - rank), total)
    forward_chunk = lambda step: (step // per_round) % v  # noqa: E731
    backward_chunk = lambda step: v - 1 - ((step - warm) // per_round) % v  # noqa: E731
    done_f, done_b, order = [0] * v, [0] * v, []
    for op in range(total + warm):
        if op < total:
            c = forward_chunk(op)
            order.append(("F", done_f[c], c))
            done_f[c] += 1
        if op >= warm:
            c = backward_chunk(op)
            order.append(("B", done_b[c], c))
            done_b[c] += 1
    return order


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


def _most_alive(order, per_chunk: list) -> tuple:
    """Replaying `order`: (the most bytes of saved activations alive at once, the most micro-batch chunks alive)."""
    alive, most, count, most_count = 0, 0, 0, 0
    for kind, _, c in order:
        if kind == "F":
            alive, count = alive + per_chunk[c], count + 1
            most, most_count = max(most, alive), max(most_count, count)
        else:
            alive, count = alive - per_chunk[c], count - 1
    return most, most_count


def stage_activations(run, rank: int | None = None) -> dict:
    """One rank's activations: {"total", "per_micro_batch", "in_flight", "exact", "notes", "parts", "local_run",
    "chunks", "per_chunk", "sequence_parallel_cut"}.

    per_micro_batch: what one micro-batch keeps on every stage the GPU runs (one but for interleaved 1F1B);
    per_chunk: the same per stage; total: the most alive at once as the schedule runs (rank_order); in_flight: the
    most micro-batches (micro-batch stages, interleaved) alive at once. exact: the exact trace of the rank's local
    model (see the module doc); else derived from Korthikanti et al."""
    from .run import Run

    lay = layout(run)
    rank = run.rank if rank is None else rank
    chunks = rank_chunks(run, rank)
    order = rank_order(run, rank)
    why = exact_applies(run)
    notes = []
    if run.seq_len is None:
        flight = _most_alive(order, [0] * len(chunks))[1] if lay.pp > 1 else 1
        return {"total": 0, "per_micro_batch": 0, "in_flight": flight, "exact": False, "notes": notes, "parts": None,
                "local_run": None, "chunks": chunks, "per_chunk": [0] * len(chunks), "sequence_parallel_cut": 0}
    if not why:
        local = Run(local_shape(run, rank), precision=run.precision, optimizer=run.optimizer, batch_size=run.batch_size,
                    seq_len=run.seq_len, checkpointing=run.checkpointing, attention=run.attention, dropout=run.dropout,
                    activations="transformers", device=run.device, grad_accum_steps=run.grad_accum_steps)
        from .training import step_parts

        _, parts = step_parts(local)
        pieces = [_chunk_activations(run, rank, chunk, parts, parts.estimate, lay.tp) for chunk in chunks]
        per_chunk, cut = [one for one, _ in pieces], sum(c for _, c in pieces)
    else:
        notes.append(Note("parallel_activations_derived",
                          f"activations per rank derived from Korthikanti et al. 2022 (tensor {lay.tp}, sequence "
                          f"parallel {'on' if run.sequence_parallel else 'off'}, context {lay.cp}), not traced: {why}"))
        parts = local = None
        per_chunk = [derived_stage_bytes(run, first=c["first"], last=c["last"], layers=c["layers"]) for c in chunks]
        cut = 0
    total, flight = _most_alive(order, per_chunk) if lay.pp > 1 else (per_chunk[0], 1)
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
    """The vocabulary the loss runs over: a causal language model's; 0 for BERT, whose model (BertModel, no
    masked-language-model head) computes no loss over its vocabulary (peak.py judges one BERT GPU the same way)."""
    return 0 if shape.family == "bert" else shape.vocab_size or 0


def rank_step_parts(run, notes: list, single_estimate) -> tuple:
    """What training._step_parts keeps for one rank of a parallel run: (weights, quantization constants,
    gradients, accumulation, master weights, optimizer states, their detail, activations, the activation
    estimate, None for the exact model's ActivationParts (peak_memory models one GPU), notes)."""
    lay = layout(run)
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
    estimate = single_estimate if run.seq_len is not None else None
    return (parts["weights"], 0, parts["gradients"], parts["gradient_accumulation"], parts["master_weights"],
            parts["optimizer_states"], parts["optimizer_state_detail"], acts["total"], estimate, None, kept)


# ---- communication buffers (derived) ----------------------------------------------------------------
def buffers(run, rank: int | None = None) -> dict:
    """Communication buffers one rank holds at once (derived from what each collective moves, not measured)."""
    from .run import ddp_bucket_bytes

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
    from .peak import why_no_peak

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
    from .peak import PeakEstimate

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
    validation/parallel.py's round-1 runs were recorded before these terms were written (see _schedule_phases
    and loss_parallel_extra: they are not held out for peaks); round 2 after.
    """
    from .peak import peak_memory
    from .training import training_memory

    rank = run.rank if rank is None else rank
    if rank != run.rank:
        run = run.replace(rank=rank)
    lay = layout(run)
    memory = training_memory(run)
    acts = stage_activations(run)
    held = buffers(run)
    # torch.distributed.pipelining keeps its receive buffers across steps, DDP its buckets; the collectives' buffers (the
    # sequence-parallel all-gather, ring attention's chunks, the experts' all-to-all) live only in forward and
    # backward, not at the optimizer step
    extra = sum(held.values())
    persistent = sum(v for k, v in held.items() if k.startswith(("pipeline", DDP_BUCKETS)))
    if lay.pp == lay.cp == lay.ep == 1 and acts["exact"] and not (run.zero_stage and lay.dp > 1):
        single = peak_memory(acts["local_run"], step=step)
        # sequence parallelism's s/tp share of the norms' tensors (not the estimate's total less the per-micro-batch
        # bytes: with checkpointing that total holds a recomputed block too, found by round 3's held-out runs)
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
        from .peak import optimizer_transient

        _, note = optimizer_transient(run.model, run.method, run.recipe, run.optimizer_spec, run.device)
        notes = (note,) if note is not None else ()
        basis = "the stage's schedule replayed over " + ("its traced" if acts["exact"] else "derived") + " parts"
    phases = {phase: max(v for p, _, v in moments if p == phase) for phase in ("forward", "backward", "optimizer_step")}
    return {**phases, "total": max(phases.values()), "basis": basis, "moments": tuple(moments), "resident": resident,
            "notes": notes}


def schedule_order(schedule: str, pp: int, micro_batches: int, stage: int) -> list[tuple]:
    """The stage's actions in order, ("F", i) and ("B", i): GPipe every forward, then every backward
    (torch.distributed.pipelining ScheduleGPipe); 1F1B min(m, pp - stage) forwards, then one backward and one
    forward by turns, then the remaining backwards (Schedule1F1B._step_microbatches: warm-up, 1B1F, cool-down)."""
    m = micro_batches
    if schedule == "gpipe" or pp == 1:
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(m, pp - stage)
    order, forward, backward = [("F", i) for i in range(warm)], warm, 0
    while True:
        order.append(("B", backward))
        backward += 1
        if forward == m:
            break
        order.append(("F", forward))
        forward += 1
    return order + [("B", i) for i in range(backward, m)]


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
    if not first and e == 4 and shape.family == "llama":
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
    recomputing the last block over every kept block input, and leaving the stage. The recomputation moment was
    written before any checkpointed split run was recorded (validation/parallel.py round 3).
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
    rotary = shape.head_dim * e if shape.family == "llama" else 0
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
    from .peak import LATER_MICRO_BATCH

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
    transient, previous = 0, 0
    from .peak import ADAM_LIKE

    if run.optimizer_spec.name not in ADAM_LIKE:
        pass  # SGD with momentum updates in place
    elif run.device == "cuda":  # foreach Adam: temporaries as large as every trainable tensor together (as peak.py)
        transient = sum(sizes)
    else:  # the CPU's single-tensor Adam: 2 x a tensor's denominator beside the previous one's (as peak.py)
        for size in sizes:
            transient, previous = max(transient, 2 * size + previous), size
    moments.append(("optimizer_step", "weights, gradients, states and the optimizer's temporaries",
                    after - (extra - (extra if persistent is None else persistent)) + grads
                    + int(memory.master_weights) + int(memory.optimizer_states) + transient))
    return moments, resident


# ---- one rank, and the worst rank ------------------------------------------------------------------
@dataclass(frozen=True)
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
    """One rank (run.rank) of a parallel run: training_memory's parts and the communication buffers."""
    from .run import as_run
    from .training import training_memory

    run = as_run(model, **settings)
    lay = layout(run)
    memory = training_memory(run)
    acts = stage_activations(run) if is_parallel(run) else None
    return ParallelMemory(memory=memory, buffers=buffers(run), rank=run.rank, coordinates=lay.coordinates(run.rank),
                          layout=lay, in_flight=acts["in_flight"] if acts else 1,
                          activations_exact=bool(acts and acts["exact"]),
                          bubble=bubble(run.pp_schedule, lay.pp, run.micro_batches, run.virtual_stages))


def representative_ranks(run) -> list[int]:
    """One rank per distinct position that changes what a rank stores: each stage, each tensor rank (the
    vocabulary's last piece may be shorter); data and context ranks store alike."""
    lay = layout(run)
    step = lay.tp * lay.cp * lay.dp
    return [stage * step + t for stage in range(lay.pp) for t in range(lay.tp)]


def worst_rank(run) -> ParallelMemory:
    """The rank that holds the most (sum of the parts plus buffers): the one the card must fit.

    Within a stage, tensor rank 0 holds the most: the tensor ranks differ only in their vocabulary piece (and the
    vocab-parallel loss's), and torch.chunk gives the first piece the most rows. So each stage's first rank is
    compared (a 64-rank layout costs 8 ranks' arithmetic, not 64).
    """
    from .run import as_run

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


# ---- the layout planner -----------------------------------------------------------------------------
TRADE_OFFS = {
    "dp": "data parallelism copies the model: it adds GPUs for speed, not room (ZeRO shards the copies' states)",
    "tp": "tensor parallelism all-reduces every block's activations: it wants NVLink inside a node (tp <= 8)",
    "pp": "pipeline parallelism idles (pp - 1) / (m + pp - 1) of the step (the bubble) and passes activations between "
          "stages",
}


@dataclass(frozen=True)
class LayoutPlan:
    """The fewest GPUs (and their layout) that fit a run on a card, or None when nothing up to max_gpus fits."""

    run: object  # the run with the layout's degrees, or None
    layout: Layout | None
    worst: ParallelMemory | None  # the rank the requirement judges: its parts and buffers
    usable_bytes: int
    gpu: str
    tried: int
    trade_offs: tuple
    need: object = None  # the layout's Requirement (requirement(run)): what the card was judged against

    @property
    def fits(self) -> bool:
        return self.layout is not None


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def fewest_gpus_layout(model, gpu, *, max_gpus: int = 1024, max_tp: int = 8, reserved_bytes=None,
                       **settings) -> LayoutPlan:
    """The fewest GPUs, and the layout (data x tensor x pipeline), whose worst rank fits `gpu`.

    Tries n = 1, 2, ... up to max_gpus (powers of two and their multiples of 3, as clusters are built), and for
    each every tp (a divisor of the heads, at most max_tp: one node) and pp (a divisor of the blocks) with
    dp = n / (tp pp); ZeRO stays as the run has it, on the dp axis. Among the layouts of the fewest GPUs it
    takes the first that fits in the order of preference: the least pipeline (no bubble), then the least tensor
    parallelism. A layout fits when its
    requirement (requirement(): the peak of the rank whose peak is highest where memmath models it, else the
    worst rank's sum of parts plus buffers) fits the card as check_fit judges (the CUDA context reserved,
    FIT_MARGIN left free). micro_batches: the run's, or pp when the run has 1 (the fewest that fill 1F1B); a
    layout without a pipeline runs the run's micro-batches as gradient accumulation steps.
    """
    from .decision import requirement
    from .gpus import CUDA_CONTEXT_BYTES, FIT_MARGIN, check_fit, get_gpu
    from .run import as_run

    run = as_run(model, **settings)
    card = get_gpu(gpu)
    reserved = CUDA_CONTEXT_BYTES if reserved_bytes is None else reserved_bytes
    max_gpus = validate.count("max_gpus", max_gpus, high=validate.MAX_GPUS, scalar=True)
    max_tp = validate.count("max_tp", max_tp, high=validate.MAX_GPUS, scalar=True)
    if run.is_sweep:
        raise validate.FieldError(run.swept, f"{run.swept} must be a single value: the planner lays out one run")
    shape = run.model
    heads = _divisors(shape.n_heads, max_tp) if shape.n_heads else [1]
    kv = shape.n_kv_heads or shape.n_heads or 1
    sizes = sorted({n for k in range(0, 21) for n in (2 ** k, 3 * 2 ** k) if n <= max_gpus})
    tried = 0
    for n in sizes:
        fits = []
        # in the order of preference (the least pipeline, then the least tensor parallelism): the first that fits
        for pp, tp in sorted((pp, tp) for pp in _divisors(shape.n_layers, n) for tp in heads):
            if n % (tp * pp) or kv % tp:
                continue
            m = 1 if pp == 1 else run.micro_batches if run.micro_batches > 1 else pp
            try:
                # without a pipeline there is no schedule: a pipeline's micro-batches become gradient
                # accumulation steps (the same effective batch), and an interleaved schedule plain 1F1B
                plain = dict(pp_schedule="1f1b", virtual_stages=1, micro_batches=1,
                             grad_accum_steps=run.grad_accum_steps * run.micro_batches) if pp == 1 else {}
                candidate = run.replace(**{"micro_batches": m, **plain}, n_gpus=n, tp=tp, pp=pp, cp=1, ep=1, rank=0,
                                        sequence_parallel=run.sequence_parallel and tp > 1)
            except validate.FieldError:
                continue
            tried += 1
            # A cheap bound first: rank 0's weights, gradients and optimizer states are alive together at its
            # optimizer step, so no requirement of this layout is below them (peak or sum of parts alike).
            static = rank_parts(candidate, 0)
            floor = sum(int(static[k]) for k in ("weights", "gradients", "gradient_accumulation",
                                                 "master_weights", "optimizer_states"))
            if not check_fit(floor, card, reserved_bytes=reserved, margin=FIT_MARGIN).fits:
                continue
            need = requirement(candidate)
            if check_fit(need.bytes, card, reserved_bytes=reserved, margin=FIT_MARGIN).fits:
                fits.append((pp, tp, candidate, need))
                break
        if fits:
            pp, tp, candidate, need = fits[0]
            if not is_parallel(candidate):
                worst = parallel_memory(candidate)
            elif need.basis == "peak":  # the rank whose peak is the requirement
                worst = parallel_memory(candidate.replace(rank=need.memory.run.rank))
            else:
                worst = worst_rank(candidate)
            return LayoutPlan(run=candidate, layout=layout(candidate), worst=worst,
                              usable_bytes=int(card.memory_bytes) - reserved, gpu=card.name, tried=tried,
                              trade_offs=_trade_offs(layout(candidate), candidate), need=need)
    return LayoutPlan(run=None, layout=None, worst=None, usable_bytes=int(card.memory_bytes) - reserved,
                      gpu=card.name, tried=tried, trade_offs=())


def _trade_offs(lay: Layout, run) -> tuple:
    lines = []
    for axis in ("dp", "tp", "pp"):
        degree = getattr(lay, axis)
        text = TRADE_OFFS[axis]
        if axis == "pp" and degree > 1:
            text += (f": here {bubble(run.pp_schedule, degree, run.micro_batches, run.virtual_stages):.0%} with "
                     f"m = {run.micro_batches}")
        lines.append(f"{axis} = {degree}: {text}")
    return tuple(lines)
