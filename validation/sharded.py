"""Measure what each rank of a sharded training run allocates: FSDP2 and ZeRO-1, over gloo on one CPU.

    python -m validation.sharded                 # the sharded cases, printed (validation.measure records them)

Each case spawns `world_size` processes (torch.multiprocessing, gloo on 127.0.0.1 only, a time
limit per case). Every rank builds the same transformers model as validation/measure.py (same
config, same seed), shards it, and runs two training steps on its own batch; each rank records:

- fsdp2: `torch.distributed.fsdp.fully_shard` on every block, then on the whole model (the
  recipe of PyTorch's FSDP2 tutorial), with reshard_after_forward=True (full shard) or False
  (parameters stay gathered from forward to backward, like ZeRO-2). Parameters, gradients and
  optimizer states are DTensors: their local shards are counted, each storage once.
- zero1: `torch.distributed.optim.ZeroRedundancyOptimizer` over torch.optim.AdamW: every rank
  keeps every parameter and gradient (all-reduced in place after backward) and the states of
  the parameters assigned to it (whole tensors, largest first to the least-loaded rank).
- the profiler's peaks per phase and step, as validation/measure.py records them, per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import measure

ENGINES = ("fsdp2", "fsdp2-noreshard", "zero1")
TIME_LIMIT_S = 120  # per case: a hung collective must not hang the recording or the tests


@dataclass(frozen=True)
class ShardedCase:
    """One sharded run: a measure.Case (full finetuning, AdamW) on `world_size` ranks of `engine`."""

    shape: str
    precision: str = "bf16"
    engine: str = "fsdp2"  # fsdp2 | fsdp2-noreshard | zero1
    world_size: int = 2
    batch_size: int = 2
    seq_len: int = 64

    @property
    def case_id(self) -> str:
        return "/".join([self.shape, self.precision, "adamw", "full", "sdpa", "nodrop", "nockpt",
                         f"b{self.batch_size}s{self.seq_len}", f"{self.engine}x{self.world_size}"])

    def base(self) -> measure.Case:
        return measure.Case(self.shape, precision=self.precision, batch_size=self.batch_size, seq_len=self.seq_len,
                            group="sharded")

    def config(self) -> dict:
        base = self.base()
        return {"case_id": self.case_id, **asdict(base), "engine": self.engine, "world_size": self.world_size,
                "held_out": True, "model": dict(measure.SHAPES[self.shape])}


def grid() -> list[ShardedCase]:
    cases = []
    # BERT's classifier (2 x 64) and token types (2 x 64) have fewer rows than 4 ranks: FSDP2 pads them.
    for i, shape in enumerate(("gpt2", "llama-gqa", "bert")):
        for j, engine in enumerate(ENGINES):
            for world in (2, 4):
                cases.append(ShardedCase(shape, precision=("bf16", "fp32")[(i + j + world // 2) % 2], engine=engine,
                                         world_size=world))
    return cases


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local(t):
    """The local shard of a DTensor, the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors`' local shards. An empty shard still counts its
    storage: FSDP2 gives a rank past the last row a view of zero rows into a padded buffer."""
    seen = {}
    for t in tensors:
        if t is None:
            continue
        storage = _local(t).untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _worker(rank, case: ShardedCase, port, out_dir):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    measure.configure_torch()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=case.world_size)
    try:
        base = case.base()
        model, _, batch = measure.build(base)
        family = measure.SHAPES[case.shape]["family"]
        if case.engine.startswith("fsdp2"):
            from torch.distributed.fsdp import fully_shard

            reshard = case.engine == "fsdp2"
            for block in measure.model_blocks(model, family):
                fully_shard(block, reshard_after_forward=reshard)
            fully_shard(model, reshard_after_forward=reshard)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
        params = list(model.parameters())
        resident = _storage_bytes(params) + _storage_bytes(model.buffers()) + _storage_bytes(batch.values())
        names = [f"step{k}/{phase}" for k in (1, 2) for phase in ("forward", "backward", "optimizer_step")]
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for k in (1, 2):
                with record_function(f"step{k}/forward"):
                    loss = model(**batch).loss
                with record_function(f"step{k}/backward"):
                    loss.backward()
                    if case.engine == "zero1":
                        for p in params:
                            dist.all_reduce(p.grad)
                with record_function(f"step{k}/optimizer_step"):
                    optimizer.step()
                if k == 1:
                    grad_bytes = _storage_bytes(p.grad for p in params)
                optimizer.zero_grad(set_to_none=True)
        local_optimizer = optimizer.optim if case.engine == "zero1" else optimizer
        states, seen = {}, set()
        for state in local_optimizer.state.values():
            for key, value in state.items():
                if torch.is_tensor(value):
                    value = _local(value)
                    ptr = value.untyped_storage().data_ptr()
                    if ptr not in seen:
                        seen.add(ptr)
                        states[key] = states.get(key, 0) + value.untyped_storage().nbytes()
        # net_end: the profile's net allocation after step 2's zero_grad, where only the optimizer states and the
        # loss made since profiling began are alive: above them, frees the profiler did not see
        peaks, net_end = measure.phase_peaks(prof, names)
        result = {"rank": rank, "param_bytes": _storage_bytes(params), "grad_bytes": grad_bytes,
                  "optimizer_state_bytes": sum(states.values()), "optimizer_state_detail": dict(sorted(states.items())),
                  "trainable_tensors": len(params), "resident_before_bytes": resident,
                  "total_params": sum(_local(p).numel() for p in params), "net_end_bytes": net_end}
        write_rank(out_dir, rank, result, peaks, resident)
    finally:
        dist.destroy_process_group()


def write_rank(out_dir, rank, result: dict, peaks: dict, resident: int) -> None:
    """A rank's record with each step's phase peaks (resident bytes plus the profile's peak in that phase) and the
    step's peak, written where the parent reads it (run_ranks)."""
    for k in (1, 2):
        for phase in ("forward", "backward", "optimizer_step"):
            result[f"peak_step{k}_{phase}_bytes"] = resident + peaks[f"step{k}/{phase}"]
        result[f"peak_step{k}_bytes"] = max(result[f"peak_step{k}_{p}_bytes"]
                                            for p in ("forward", "backward", "optimizer_step"))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def run_ranks(worker, case) -> list[dict]:
    """Run worker(rank, case, port, out_dir) on the case's ranks (spawned processes, one loopback port) within
    TIME_LIMIT_S and return each rank's record."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out_dir:
        context = mp.start_processes(worker, args=(case, _free_port(), out_dir), nprocs=case.world_size,
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + TIME_LIMIT_S
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"{case.case_id}: no result within {TIME_LIMIT_S} s")
        ranks = []
        for rank in range(case.world_size):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                ranks.append(json.load(f))
    return ranks


def measure_sharded(case: ShardedCase) -> dict:
    """Run `case` on its ranks (spawned processes) and return per-rank lists of what each allocated."""
    ranks = run_ranks(_worker, case)
    keys = [k for k in ranks[0] if k not in ("rank", "optimizer_state_detail")]
    result = {f"{k}_per_rank": [r[k] for r in ranks] for k in keys}
    result["optimizer_state_detail_per_rank"] = [r["optimizer_state_detail"] for r in ranks]
    return result


def run(cases, progress=True) -> list[dict]:
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = measure_sharded(case)
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
    parser.add_argument("--out", type=Path, default=measure.DEFAULT_OUT, help="the data file whose sharded_cases to update")
    args = parser.parse_args(argv)
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    records = run(cases)
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    # Written into validation/measure.py's data file: the runs measured now replace their earlier records.
    document = json.loads(args.out.read_text(encoding="utf-8"))
    new_ids = {r["config"]["case_id"] for r in records}
    document["sharded_cases"] = [r for r in document.get("sharded_cases", [])
                                 if r["config"]["case_id"] not in new_ids] + records
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} sharded runs into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
