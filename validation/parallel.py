"""Measure what each rank of a tensor- or pipeline-parallel training run allocates, over gloo on one CPU.

    python -m validation.parallel                 # every case, written into memmath_lessons/reference/data/measured_parallel.json
    python -m validation.parallel --print --only tp

Each case spawns its ranks (torch.multiprocessing, gloo on 127.0.0.1 only, every case bounded by
TIME_LIMIT_S, its processes killed past it). Every rank builds the same transformers LlamaForCausalLM as
validation/measure.py (same config, same seed), splits it, and runs two AdamW steps on the same batch:

- tp: torch.distributed.tensor.parallel.parallelize_module on a 1-D DeviceMesh, the plan of torch's
  tensor-parallel tutorial: q/k/v and gate/up ColwiseParallel, o_proj and down_proj RowwiseParallel, the
  token embedding RowwiseParallel (vocabulary rows) and lm_head ColwiseParallel with its logits left
  sharded over the vocabulary, the loss under loss_parallel() (cross-entropy on the fp32 logits, as
  transformers' ForCausalLMLoss upcasts them). With sequence parallelism (tp-sp) every RMSNorm is
  SequenceParallel, the attention and MLP inputs are all-gathered by PrepareModuleInput, and o_proj /
  down_proj reduce-scatter back to Shard(1).
- pp: torch.distributed.pipelining's PipelineStage over a manual split (stage 0: the embedding and its
  blocks; the last: its blocks, the final norm and the head; each stage computes its own rotary tables)
  with ScheduleGPipe or Schedule1F1B, `micro_batches` micro-batches of `batch_size` sequences.
- tp-pp (tensor x pipeline, 4 ranks): a 2-D DeviceMesh (pp, tp); every stage's blocks tensor parallel as in tp on
  its tp row, the stages over the pp column's group, the last stage's loss under loss_parallel through the
  schedule's backward.
- dp-tp (data x tensor, 4 ranks): a 2-D DeviceMesh (dp, tp); tp on each row, every gradient then averaged in
  place over the dp column (DDP's all-reduce, without DDP's bucket copies).

Ranks are numbered as memmath numbers them: tensor fastest, then data, then pipeline stage.

Per rank: parameter, gradient and optimizer-state bytes (local shards, each storage once), the bytes
autograd saved during step 1 (local storages, parameters left out; for a pipeline stage all its
micro-batches together), and the profiler's peaks per step as validation/sharded.py records them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import measure

TIME_LIMIT_S = 150  # per case: a hung collective must not hang the recording or the tests
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_parallel.json"
# A LLaMA of 4 blocks for pipelines of 2 and 4 stages (measure.py's llama-mha has 3).
SHAPES = {
    "llama-mha": measure.SHAPES["llama-mha"],
    "llama-gqa": measure.SHAPES["llama-gqa"],
    "llama-wide": measure.SHAPES["llama-wide"],
    "llama-mha4": dict(measure.SHAPES["llama-mha"], n_layers=4),
    # Recorded after memmath's pipeline peak model was written (round=2): grouped-query attention over 4 blocks.
    "llama-gqa4": dict(measure.SHAPES["llama-gqa"], n_layers=4),
    # Interleaved 1F1B (round=4): 8 blocks, for 2 GPUs x 4 stages and 4 GPUs x 2 stages.
    "llama-gqa8": dict(measure.SHAPES["llama-gqa"], n_layers=8),
}


@dataclass(frozen=True)
class ParallelCase:
    """One run: `engine` ("tp", "tp-sp", "pp", "tp-pp", "dp-tp") on `world_size` ranks; `tp` is the tensor degree
    of tp-pp (the rest of the ranks pipeline stages) and dp-tp (the rest data-parallel copies). round=1: recorded
    before memmath's peak model of split runs was written (its pipeline and loss_parallel terms were found on
    these runs); round=2: recorded after it, held out for the peak too."""

    shape: str
    precision: str = "fp32"
    engine: str = "tp"
    world_size: int = 2
    batch_size: int = 2
    seq_len: int = 64
    schedule: str = ""  # pp: "gpipe" or "1f1b"
    micro_batches: int = 1
    tp: int = 0
    round: int = 1
    checkpointing: bool = False
    virtual_stages: int = 1  # interleaved 1F1B (schedule "interleaved"): stages per rank

    @property
    def stages(self) -> int:
        return self.world_size // self.tp if self.engine == "tp-pp" else self.world_size

    @property
    def case_id(self) -> str:
        engine = {"tp-pp": f"tp{self.tp}-pp", "dp-tp": f"dp-tp{self.tp}"}.get(self.engine, self.engine) + (
            f"-{self.schedule}-m{self.micro_batches}" if self.engine in ("pp", "tp-pp") else "") + (
            f"-v{self.virtual_stages}" if self.virtual_stages > 1 else "")
        return "/".join([self.shape, self.precision, "adamw", "full", "sdpa", "nodrop",
                         "ckpt" if self.checkpointing else "nockpt",
                         f"b{self.batch_size}s{self.seq_len}", f"{engine}x{self.world_size}"])

    def base(self) -> measure.Case:
        return measure.Case(self.shape if self.shape in measure.SHAPES else "llama-mha", precision=self.precision,
                            batch_size=self.batch_size, seq_len=self.seq_len, checkpointing=self.checkpointing,
                            group="parallel")

    def config(self) -> dict:
        return {"case_id": self.case_id, **asdict(self.base()), "shape": self.shape, "engine": self.engine,
                "world_size": self.world_size, "schedule": self.schedule, "micro_batches": self.micro_batches,
                "tp": self.tp or None, "virtual_stages": self.virtual_stages, "held_out": True, "peak_held_out": self.round >= 2,
                "model": dict(SHAPES[self.shape])}


def grid() -> list[ParallelCase]:
    cases = []
    for i, (shape, world) in enumerate((("llama-mha", 2), ("llama-gqa", 2), ("llama-wide", 2), ("llama-mha", 4))):
        for j, engine in enumerate(("tp", "tp-sp")):
            for precision in ("fp32", "bf16") if i < 2 else (("fp32", "bf16")[(i + j) % 2],):
                cases.append(ParallelCase(shape, precision=precision, engine=engine, world_size=world))
    for k, (shape, world) in enumerate((("llama-mha4", 2), ("llama-wide", 2), ("llama-wide", 4), ("llama-mha", 3))):
        for schedule in ("gpipe", "1f1b"):
            # torch's Schedule1F1B refuses fewer micro-batches than stages (schedules.py: "must be greater than or
            # equal to the number of stages"); GPipe takes any.
            for m in ((2, 4) if world == 2 else (4, 8) if world == 4 else (3, 6)):
                cases.append(ParallelCase(shape, precision=("fp32", "bf16")[(k + m // 2) % 2], engine="pp",
                                          world_size=world, schedule=schedule, micro_batches=m,
                                          batch_size=1 if m == 8 else 2))
    return cases + round_two() + round_three() + round_four()


def round_two() -> list[ParallelCase]:
    """Recorded after memmath's peak model of split runs (memmath/parallel.py: _schedule_phases,
    loss_parallel_extra) was written: tensor x pipeline and data x tensor layouts on 4 ranks, and pipelines of a
    shape the first round did not have."""
    two = dict(round=2, tp=2, world_size=4)
    return [
        ParallelCase("llama-mha4", precision="bf16", engine="tp-pp", schedule="gpipe", micro_batches=2, **two),
        ParallelCase("llama-mha4", precision="fp32", engine="tp-pp", schedule="1f1b", micro_batches=2, **two),
        ParallelCase("llama-mha4", precision="bf16", engine="tp-pp", schedule="1f1b", micro_batches=4, **two),
        ParallelCase("llama-gqa4", precision="fp32", engine="tp-pp", schedule="gpipe", micro_batches=4, **two),
        ParallelCase("llama-gqa4", precision="bf16", engine="tp-pp", schedule="1f1b", micro_batches=3, **two),
        ParallelCase("llama-gqa", precision="fp32", engine="dp-tp", **two),
        ParallelCase("llama-mha", precision="bf16", engine="dp-tp", **two),
        ParallelCase("llama-gqa4", precision="bf16", engine="dp-tp", seq_len=128, **two),
        ParallelCase("llama-gqa4", precision="bf16", engine="pp", schedule="1f1b", micro_batches=4, round=2),
        ParallelCase("llama-gqa4", precision="fp32", engine="pp", schedule="gpipe", micro_batches=3, round=2),
        ParallelCase("llama-gqa", precision="fp32", engine="pp", schedule="1f1b", micro_batches=4, world_size=3,
                     batch_size=1, seq_len=128, round=2),
    ]


def round_three() -> list[ParallelCase]:
    """Checkpointing (transformers' gradient_checkpointing_enable) in split runs, recorded after memmath's
    recomputation moment of a pipeline stage was written: held out for everything (round=3 counts as round=2)."""
    three = dict(round=3, checkpointing=True)
    return [
        ParallelCase("llama-mha", precision="fp32", engine="tp", **three),
        ParallelCase("llama-gqa", precision="bf16", engine="tp-sp", **three),
        ParallelCase("llama-mha4", precision="bf16", engine="pp", schedule="gpipe", micro_batches=2, **three),
        ParallelCase("llama-wide", precision="fp32", engine="pp", schedule="1f1b", micro_batches=4, **three),
        ParallelCase("llama-gqa4", precision="bf16", engine="tp-pp", schedule="1f1b", micro_batches=2, tp=2,
                     world_size=4, **three),
        ParallelCase("llama-mha", precision="bf16", engine="dp-tp", tp=2, world_size=4, **three),
    ]


def round_four() -> list[ParallelCase]:
    """Interleaved 1F1B (torch's ScheduleInterleaved1F1B, several stages per rank), recorded after memmath's model
    of it (memmath/parallel.py interleaved_order, rank_chunks) was written: held out for everything."""
    four = dict(round=4, engine="pp", schedule="interleaved")
    return [
        ParallelCase("llama-mha4", precision="bf16", micro_batches=2, virtual_stages=2, **four),
        ParallelCase("llama-mha4", precision="fp32", micro_batches=4, virtual_stages=2, **four),
        ParallelCase("llama-gqa8", precision="bf16", micro_batches=4, virtual_stages=4, **four),
        ParallelCase("llama-gqa8", precision="fp32", micro_batches=4, virtual_stages=2, world_size=4, **four),
        ParallelCase("llama-gqa8", precision="bf16", micro_batches=8, virtual_stages=2, world_size=4, batch_size=1,
                     **four),
        ParallelCase("llama-mha4", precision="bf16", micro_batches=4, virtual_stages=2, checkpointing=True, **four),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _storage_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        if t is None:
            continue
        storage = _local(t).untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class _Saved:
    """Every storage autograd saves while active (local shards of DTensors), each once, parameters left out."""

    def __init__(self, params):
        import torch

        self.skip = {_local(p).untyped_storage().data_ptr() for p in params}
        self.seen = {}
        self.unreadable = 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda x: x)

    def pack(self, t):
        local = getattr(t, "_local_tensor", t)  # a DTensor's local shard
        # a functional collective's result (AsyncCollectiveTensor, e.g. the all-reduced output of RowwiseParallel)
        # has no storage of its own: its tensor is .elem (torch/distributed/_functional_collectives.py)
        local = getattr(local, "elem", local)
        try:
            storage = local.untyped_storage()
            ptr = storage.data_ptr()
        except RuntimeError:  # another tensor subclass without storage: counted, and recorded as unreadable
            self.unreadable += 1
            return t
        if ptr not in self.skip and storage.nbytes():
            self.seen[ptr] = storage.nbytes()
        # A detached alias, not t itself: a saved output returned as it is would hold its own grad_fn, a reference
        # cycle that outlives a graph dropped without a backward (torch.distributed.pipelining's metadata
        # inference drops one in the first step) until Python's gc runs: 0.55 MB more on a recorded stage 0.
        return t.detach()

    @property
    def total(self) -> int:
        return sum(self.seen.values())


def _tp_model(model, case, mesh):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    sp = case.engine == "tp-sp"
    if sp:
        top = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                     use_local_output=False),
               "model.norm": SequenceParallel(),
               "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    else:
        top = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
               "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    parallelize_module(model, mesh, top)
    for layer in model.model.layers:
        out = dict(output_layouts=Shard(1), use_local_output=False) if sp else {}
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(**out),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel(**out)}
        if sp:
            plan.update({"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                         "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                         desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                         "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))})
        parallelize_module(layer, mesh, plan)
    return model


def _stage_module(model, stage: int, n_stages: int):
    """Stage `stage` of a LlamaForCausalLM cut into n_stages equal runs of blocks."""
    import torch

    per = len(model.model.layers) // n_stages

    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = model.model.embed_tokens if stage == 0 else None
            self.layers = torch.nn.ModuleList(model.model.layers[stage * per:(stage + 1) * per])
            self.rotary_emb = model.model.rotary_emb
            self.norm = model.model.norm if stage == n_stages - 1 else None
            self.lm_head = model.lm_head if stage == n_stages - 1 else None

        def forward(self, x):
            h = self.embed_tokens(x) if self.embed_tokens is not None else x
            positions = torch.arange(h.shape[1]).unsqueeze(0)
            cos_sin = self.rotary_emb(h, positions)
            for layer in self.layers:
                h = layer(h, attention_mask=None, position_ids=positions, position_embeddings=cos_sin)
                h = h[0] if isinstance(h, tuple) else h
            if self.lm_head is not None:
                h = self.lm_head(self.norm(h))
            return h

    return Stage()


def _loss(logits, target):
    import torch

    # transformers' ForCausalLMLoss: the logits upcast to fp32, labels already shifted
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=-100)


def _worker(rank, case: ParallelCase, port, out_dir):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    measure.configure_torch()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=case.world_size)
    try:
        base = case.base()
        measure.SHAPES.setdefault(case.shape, SHAPES[case.shape])
        base = measure.Case(case.shape, precision=case.precision, batch_size=case.batch_size * case.micro_batches,
                            seq_len=case.seq_len, checkpointing=case.checkpointing, group="parallel")
        model, _, batch = measure.build(base)
        ids = batch["input_ids"]
        labels = torch.nn.functional.pad(ids, (0, 1), value=-100)[:, 1:].contiguous()
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import loss_parallel

        split = case.engine in ("tp", "tp-sp", "dp-tp")  # one model on every rank, tensor parallel
        if case.engine in ("tp", "tp-sp"):
            module = _tp_model(model, case, init_device_mesh("cpu", (case.world_size,)))
        elif case.engine == "dp-tp":  # data x tensor: rank = data rank x tp + tensor rank, as memmath numbers them
            mesh = init_device_mesh("cpu", (case.world_size // case.tp, case.tp), mesh_dim_names=("dp", "tp"))
            module = _tp_model(model, case, mesh["tp"])
            data_group = mesh["dp"].get_group()
        if split:
            params = list(module.parameters())
            batch_tensors = [ids, labels]

            def forward_backward(saved=None):
                with saved.hooks if saved else contextlib.nullcontext():
                    logits = module(input_ids=ids).logits
                    with loss_parallel():
                        loss = _loss(logits, labels)
                del logits
                with loss_parallel():
                    loss.backward()
                if case.engine == "dp-tp":  # the data axis: every gradient averaged in place (DDP's all-reduce)
                    for p in params:
                        local = _local(p.grad)
                        dist.all_reduce(local, group=data_group)
                        local.div_(case.world_size // case.tp)
                return loss
        else:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

            group = None
            index, stages = rank, case.world_size
            if case.engine == "tp-pp":  # tensor x pipeline: rank = stage x tp + tensor rank, as memmath numbers them
                stages = case.stages
                mesh = init_device_mesh("cpu", (stages, case.tp), mesh_dim_names=("pp", "tp"))
                model = _tp_model(model, case, mesh["tp"])
                index, group = rank // case.tp, mesh["pp"].get_group()
            v = case.virtual_stages
            # the stages this rank runs: index, index + pp, ... of pp x v (one but for interleaved 1F1B)
            modules = [_stage_module(model, index + c * stages, stages * v) for c in range(v)]
            del model
            module = torch.nn.ModuleList(modules)
            params = list(module.parameters())
            pipe = [PipelineStage(mod, index + c * stages, stages * v, torch.device("cpu"), group=group)
                    for c, mod in enumerate(modules)]
            if case.schedule == "interleaved":
                from torch.distributed.pipelining import ScheduleInterleaved1F1B

                schedule = ScheduleInterleaved1F1B(pipe, n_microbatches=case.micro_batches, loss_fn=_loss)
            else:
                schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[case.schedule]
                schedule = schedule_class(pipe[0], n_microbatches=case.micro_batches, loss_fn=_loss)
            first, last = index == 0, index == stages - 1  # runs stage 0, runs the last stage
            batch_tensors = ([ids] if first else []) + ([labels] if last else [])
            # the vocab-parallel loss of a tensor-parallel last stage, through its backward (the schedule's)
            vocab_parallel = loss_parallel if case.engine == "tp-pp" else contextlib.nullcontext

            def forward_backward(saved=None):
                with saved.hooks if saved else contextlib.nullcontext(), vocab_parallel():
                    losses = [] if last else None
                    args = (ids,) if first else ()
                    kwargs = {"target": labels, "losses": losses} if last else {}
                    schedule.step(*args, **kwargs)
                return losses
        optimizer = torch.optim.AdamW(params, lr=1e-3)
        # What one micro-batch saves, measured on its own before the profiled steps (the pipeline's first step also
        # runs a shape-inference forward, and storages freed in backward are reused): one forward of the stage
        # module on a micro-batch (the hidden states, requiring grad, on a stage after the first).
        probe = _Saved(params)
        with probe.hooks:
            if split:
                with loss_parallel():
                    out = _loss(module(input_ids=ids).logits, labels)
            else:
                mb = slice(0, case.batch_size)
                width = SHAPES[case.shape]["hidden_size"]
                outs = []
                for c, mod in enumerate(modules):  # one forward of each stage the rank runs
                    x = ids[mb] if first and c == 0 else torch.randn(case.batch_size, case.seq_len, width,
                                                                     dtype=params[0].dtype, requires_grad=True)
                    y = mod(x)
                    if last and c == v - 1:
                        with vocab_parallel():
                            y = _loss(y, labels[mb])
                    outs.append(y)
                out = outs
        del out
        saved_per_micro_batch = probe.total
        resident = _storage_bytes(params) + _storage_bytes(module.buffers()) + _storage_bytes(batch_tensors)
        names = [f"step{k}/{phase}" for k in (1, 2) for phase in ("forward_backward", "optimizer_step")]
        saved = _Saved(params)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for k in (1, 2):
                with record_function(f"step{k}/forward_backward"):
                    loss = forward_backward(saved if k == 1 else None)
                with record_function(f"step{k}/optimizer_step"):
                    optimizer.step()
                if k == 1:
                    grad_bytes = _storage_bytes(p.grad for p in params)
                optimizer.zero_grad(set_to_none=True)
        del loss
        states = {}
        seen = set()
        for state in optimizer.state.values():
            for key, value in state.items():
                if torch.is_tensor(value):
                    value = _local(value)
                    ptr = value.untyped_storage().data_ptr()
                    if ptr not in seen:
                        seen.add(ptr)
                        states[key] = states.get(key, 0) + value.untyped_storage().nbytes()
        peaks, _ = measure.phase_peaks(prof, names)
        result = {"rank": rank, "param_bytes": _storage_bytes(params), "grad_bytes": grad_bytes,
                  "optimizer_state_bytes": sum(states.values()), "trainable_tensors": len(params),
                  "saved_bytes": saved.total, "saved_per_micro_batch_bytes": saved_per_micro_batch,
                  "saved_unreadable_tensors": probe.unreadable,
                  "resident_before_bytes": resident,
                  "total_params": sum(_local(p).numel() for p in params)}
        for k in (1, 2):
            for phase in ("forward_backward", "optimizer_step"):
                result[f"peak_step{k}_{phase}_bytes"] = resident + peaks[f"step{k}/{phase}"]
            result[f"peak_step{k}_bytes"] = max(result[f"peak_step{k}_{p}_bytes"]
                                                for p in ("forward_backward", "optimizer_step"))
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def measure_parallel(case: ParallelCase) -> dict:
    """Run `case` on its ranks (spawned processes) and return per-rank lists of what each allocated."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out_dir:
        context = mp.start_processes(_worker, args=(case, _free_port(), out_dir), nprocs=case.world_size,
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + TIME_LIMIT_S
        try:
            while not context.join(timeout=1):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{case.case_id}: no result within {TIME_LIMIT_S} s")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(5)
        ranks = []
        for rank in range(case.world_size):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                ranks.append(json.load(f))
    keys = [k for k in ranks[0] if k != "rank"]
    return {f"{k}_per_rank": [r[k] for r in ranks] for k in keys}


def run(cases, progress=True) -> list[dict]:
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = measure_parallel(case)
        if progress:
            print(f"[{i:3d}/{len(cases)}] {case.case_id}  params {measured['param_bytes_per_rank']}  "
                  f"peak {measured['peak_step2_bytes_per_rank']}  ({time.perf_counter() - started:.1f} s)",
                  file=sys.stderr)
        records.append({"config": case.config(), "measured": measured})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--print", action="store_true", help="print the records instead of writing them")
    parser.add_argument("--round", type=int, default=None, help="measure only the cases whose round field is this (1 to 4)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the data file to update")
    args = parser.parse_args(argv)
    cases = [c for c in grid() if (not args.only or args.only in c.case_id) and args.round in (None, c.round)]
    if args.print:
        json.dump(run(cases), sys.stdout, indent=1)
        return
    for i, case in enumerate(cases, 1):  # each run written as soon as it is measured: a failure keeps the others
        print(f"[{i}/{len(cases)}]", end=" ", file=sys.stderr)
        record = run([case])[0]
        document = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {
            "device": "cpu", "threads": 1, "versions": measure.versions(), "parallel_cases": []}
        document["parallel_cases"] = [r for r in document.get("parallel_cases", [])
                                      if r["config"]["case_id"] != case.case_id] + [record]
        args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} parallel runs into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
