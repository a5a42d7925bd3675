"""The layout of a run across GPUs: its degrees, their checks, and the pipeline schedules' order of work.

Pure facts about a layout, no bytes: which rank sits where (tensor fastest, then context, then data, then
pipeline stage, Megatron's default order), whether a Run's degrees fit its model and each other (check, which
Run calls on construction), which micro-batches a stage runs in which order (GPipe, 1F1B, interleaved 1F1B as
torch.distributed.pipelining runs them) and the pipeline's idle fraction. What each rank then holds is
memmath/parallel.py's arithmetic.
"""

from __future__ import annotations


from . import validate
from .methods import Full
from .values import frozen

SCHEDULES = ("1f1b", "gpipe", "interleaved")
DEGREES = ("tp", "pp", "cp", "ep")
# The schedule's replay walks every (micro-batch, stage) pair of every stage a GPU runs: its time grows with
# virtual_stages^2 x micro_batches, so both are bounded (at the bounds one replay takes seconds, not hours).
MAX_MICRO_BATCHES = 2048
MAX_VIRTUAL_STAGES = 32


@frozen
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
    if shape.mixed:
        raise validate.FieldError(name, f"{name} > 1 is not modelled for a model whose blocks differ "
                                  f"({len(shape.layouts())} block layouts, such as dense and mixture-of-experts "
                                  "blocks): a split's per-rank activations assume one block layout; data parallelism "
                                  "with ZeRO or FSDP (sharding) is modelled")
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


# ---- the schedules ----------------------------------------------------------------------------------
def in_flight(schedule: str, pp: int, micro_batches: int, stage: int, virtual_stages: int = 1) -> int:
    """Micro-batches whose activations a stage keeps at once: GPipe all m (every forward before any backward);
    1F1B min(m, pp - stage) (torch.distributed.pipelining Schedule1F1B's warm-up: the first stage runs pp
    forwards before its first backward, the last one); interleaved 1F1B, the most micro-batch stages alive at
    once on pipeline rank `stage` as interleaved_order runs them."""
    if pp == 1:
        return 1
    if schedule == "interleaved":
        order = interleaved_order(pp, virtual_stages, micro_batches, stage)
        return most_alive(order, [1] * virtual_stages)[1]
    return micro_batches if schedule == "gpipe" else min(micro_batches, pp - stage)


def bubble(schedule: str, pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """The pipeline's idle fraction (pp - 1) / (m + pp - 1), for GPipe (Huang et al. 2019) and 1F1B alike
    (Narayanan et al. 2021: 1F1B keeps GPipe's bubble and holds fewer micro-batches); interleaved 1F1B over v
    stages per GPU shrinks the bubble's time v-fold (Narayanan et al. 2021, section 2.2): (pp - 1) / (v m + pp - 1)."""
    v = virtual_stages if schedule == "interleaved" else 1
    return (pp - 1) / (v * micro_batches + pp - 1)


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


def most_alive(order, per_chunk: list) -> tuple:
    """Replaying `order`: (the most bytes of saved activations alive at once, the most micro-batch chunks alive)."""
    alive, most, count, most_count = 0, 0, 0, 0
    for kind, _, c in order:
        if kind == "F":
            alive, count = alive + per_chunk[c], count + 1
            most, most_count = max(most, alive), max(most_count, count)
        else:
            alive, count = alive - per_chunk[c], count - 1
    return most, most_count


def representative_ranks(run) -> list[int]:
    """One rank per distinct position that changes what a rank stores: each stage, each tensor rank (the
    vocabulary's last piece may be shorter); data and context ranks store alike."""
    lay = layout(run)
    step = lay.tp * lay.cp * lay.dp
    return [stage * step + t for stage in range(lay.pp) for t in range(lay.tp)]
