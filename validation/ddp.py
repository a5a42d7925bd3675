"""Held-out DistributedDataParallel runs for memmath/sharded_peak.py's DDP peak, over gloo on one CPU.

    python -m validation.ddp            # measures the grid, writes validation/ddp.json

Recorded after the DDP peak was written (no earlier recording wrapped a model in DDP: validation/sharded.py's ZeRO-1
and validation/parallel.py's data axis all-reduce the gradients in place), so every run here is held out. Each case
spawns `world_size` processes (gloo on 127.0.0.1, a time limit per case, as validation/sharded.py). Every rank
builds the same transformers model as validation/measure.py (same config and seed), wraps it in
torch.nn.parallel.DistributedDataParallel with its defaults (bucket_cap_mb 25, the first bucket 1 MB) and
gradient_as_bucket_view False ("ddp") or True ("ddp-view"), with or without transformers' activation checkpointing,
and runs two AdamW steps on its own batch, zero_grad(set_to_none=True) after each.

The profiler starts before the model is wrapped, so the buckets DDP allocates then are among the bytes it sees: a
phase's peak is the storages alive before wrapping (weights, buffers, the batch) plus the profile's highest net
allocation inside the phase. DDP's own count of its buckets (its logging data's bucket sizes) is recorded beside.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from . import measure, sharded, sharded_held_out

OUT = Path(__file__).resolve().parent / "ddp.json"
ENGINES = ("ddp", "ddp-view")


@dataclass(frozen=True)
class DdpCase(sharded_held_out.HeldOutCase):
    """A run of `world_size` DDP ranks: engine "ddp" (the default buckets, a copy of the gradients) or "ddp-view"
    (gradient_as_bucket_view=True)."""

    engine: str = "ddp"

    def base(self) -> measure.Case:
        return measure.Case(self.shape, precision=self.precision, batch_size=self.batch_size, seq_len=self.seq_len,
                            checkpointing=self.checkpointing, group="ddp held out")


def grid() -> list[DdpCase]:
    return [
        DdpCase("gpt2", "fp32", "ddp", 2),
        DdpCase("gpt2", "fp32", "ddp-view", 2),
        DdpCase("llama-gqa", "bf16", "ddp", 3),
        DdpCase("llama-gqa", "bf16", "ddp-view", 3),
        DdpCase("bert", "fp32", "ddp-view", 2, batch_size=4, seq_len=32),
        DdpCase("llama-gqa-tied", "fp32", "ddp-view", 2),
        DdpCase("bert-wide", "bf16", "ddp", 3),
        DdpCase("llama-wide", "fp32", "ddp", 2, checkpointing=True),
        DdpCase("llama-wide", "fp32", "ddp-view", 2, checkpointing=True),
        DdpCase("gpt2-wide", "bf16", "ddp-view", 2, checkpointing=True),
    ]


def _worker(rank, case: DdpCase, port, out_dir):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function

    measure.configure_torch()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=case.world_size)
    try:
        model, _, batch = measure.build(case.base())
        params = list(model.parameters())
        storages = sharded._storage_bytes
        resident = storages(params) + storages(model.buffers()) + storages(batch.values())
        names = [f"step{k}/{phase}" for k in (1, 2) for phase in ("forward", "backward", "optimizer_step")]
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function("wrap"):
                ddp = DistributedDataParallel(model, gradient_as_bucket_view=case.engine == "ddp-view")
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            for k in (1, 2):
                with record_function(f"step{k}/forward"):
                    loss = ddp(**batch).loss
                with record_function(f"step{k}/backward"):
                    loss.backward()
                with record_function(f"step{k}/optimizer_step"):
                    optimizer.step()
                if k == 1:
                    grad_bytes = storages(p.grad for p in params)
                optimizer.zero_grad(set_to_none=True)
        logging = ddp._get_ddp_logging_data()
        states = sum(storages(v for v in state.values() if torch.is_tensor(v)) for state in optimizer.state.values())
        peaks, net_end = measure.phase_peaks(prof, names)
        result = {"rank": rank, "param_bytes": storages(params), "grad_bytes": grad_bytes,
                  "optimizer_state_bytes": states, "trainable_tensors": len(params), "resident_before_bytes": resident,
                  "total_params": sum(p.numel() for p in params), "net_end_bytes": net_end,
                  "bucket_sizes": str(logging.get("bucket_sizes", "")),
                  "rebuilt_bucket_sizes": str(logging.get("rebuilt_bucket_sizes", ""))}
        sharded.write_rank(out_dir, rank, result, peaks, resident)
    finally:
        dist.destroy_process_group()


def measure_ddp(case: DdpCase) -> dict:
    """Run `case` on its ranks and return per-rank lists of what each allocated (validation/sharded.py's layout)."""
    ranks = sharded.run_ranks(_worker, case)
    return {f"{k}_per_rank": [r[k] for r in ranks] for k in ranks[0] if k != "rank"}


def main(argv=None):
    import time

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON file to write (its runs measured now replaced)")
    args = parser.parse_args(argv)
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    records = []
    for i, case in enumerate(cases, 1):
        started = time.perf_counter()
        measured = measure_ddp(case)
        print(f"[{i:3d}/{len(cases)}] {case.case_id}  peak {measured['peak_step2_bytes_per_rank']}  "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
        records.append({"config": case.config(), "measured": measured})
    document = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {
        "description": __doc__.split("\n\n")[0], "versions": measure.versions(), "ddp_cases": []}
    new_ids = {r["config"]["case_id"] for r in records}
    document["ddp_cases"] = [r for r in document["ddp_cases"] if r["config"]["case_id"] not in new_ids] + records
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} DDP runs into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
