"""Record a training step's allocated bytes over time on the CPU, for lesson 3's memory timeline.

    .venv/bin/python -m validation.timeline            # writes memmath_lessons/reference/data/measured_timeline.json

Each case runs two training steps of a small model as validation/measure.py does (the same build, optimizer and
loop) under the PyTorch profiler with profile_memory=True, and keeps the running sum of its allocation events
(bytes over what was alive before profiling, plus that resident amount) at every event of step 2, thinned to at
most MAX_POINTS points that keep each phase's highest, and where each phase (forward, backward, optimizer step)
starts and ends. memmath.timeline.step_timeline was written before these were recorded; they are held out.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from pathlib import Path

from validation.measure import Case, build, configure_torch, versions, _unique_bytes

OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_timeline.json"
MAX_POINTS = 300
CASES = (
    Case(shape="gpt2", precision="fp32", batch_size=4, seq_len=128),
    Case(shape="gpt2", precision="fp32", batch_size=4, seq_len=128, checkpointing=True),
    Case(shape="llama-gqa", precision="bf16", batch_size=4, seq_len=128),
    Case(shape="llama-gqa", precision="bf16", method="lora", lora_rank=8, lora_targets="all", batch_size=4,
         seq_len=128),
)
PHASES = ("forward", "backward", "optimizer_step")


def _thin(series, keep):
    """At most MAX_POINTS (time, bytes) points, evenly spaced in event order, always keeping the indices in keep."""
    if len(series) <= MAX_POINTS:
        return series
    stride = len(series) / MAX_POINTS
    chosen = {int(i * stride) for i in range(MAX_POINTS)} | set(keep) | {len(series) - 1}
    return [series[i] for i in sorted(chosen)]


def record(case: Case) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    model, optimizer, batch = build(case, "cpu")
    resident = _unique_bytes(itertools.chain(model.parameters(), model.buffers(), batch.values()))
    names = [f"step{k}/{phase}" for k in (1, 2) for phase in PHASES]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for k in (1, 2):
            with record_function(f"step{k}/forward"):
                loss = model(**batch).loss
            with record_function(f"step{k}/backward"):
                loss.backward()
            with record_function(f"step{k}/optimizer_step"):
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    events = prof.profiler.kineto_results.events()
    ranges = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name() in names}
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    start, end = ranges["step2/forward"][0], ranges["step2/optimizer_step"][1]
    running, series = resident, []
    for when, delta in memory:
        running += delta
        if start <= when <= end:
            series.append((when, running))
    keep = []
    phases = {}
    for phase in PHASES:
        lo, hi = ranges[f"step2/{phase}"]
        inside = [i for i, (when, _) in enumerate(series) if lo <= when <= hi]
        if inside:
            keep.append(max(inside, key=lambda i: series[i][1]))
        phases[phase] = [(lo - start) / (end - start), (hi - start) / (end - start)]
    thinned = _thin(series, keep)
    del model, optimizer, loss
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return {"case": case.config(), "resident_bytes": resident, "phases": phases,
            "series": [[round((when - start) / (end - start), 6), nbytes] for when, nbytes in thinned],
            "peak_step2_bytes": max(nbytes for _, nbytes in series)}


def main(argv=None) -> int:
    configure_torch()
    rows = []
    for case in CASES:
        print(case.case_id, file=sys.stderr)
        rows.append(record(case))
    data = {"schema": 1, "description": "Step 2's allocated bytes over time, on the CPU (validation/timeline.py).",
            "versions": versions(), "held_out": True, "cases": rows}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(rows)} timelines to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
