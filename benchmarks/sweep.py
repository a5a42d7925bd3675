"""Configurations per second: one vectorized training_memory call over a 1,000,000-point grid
(batch size x sequence length x LoRA rank on Llama-2-7B) against a Python loop of scalar calls.

The loop runs on a random subset of the grid and is extrapolated; both are measured side by side,
interleaved, in this one run, and the loop's answers are checked against the grid's (exactness).
Target: at least 1,000,000 configurations per second for the vectorized sweep.

    python benchmarks/sweep.py [--side 100] [--loop-points 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's memmath first

import memmath as mm  # noqa: E402

TARGET = 1_000_000  # configurations per second


def grid(side: int):
    batch = np.arange(1, side + 1).reshape(-1, 1, 1)
    seq = (64 * np.arange(1, side + 1)).reshape(1, -1, 1)
    rank = np.arange(1, side + 1).reshape(1, 1, -1)
    return batch, seq, rank


def vectorized(model, batch, seq, rank):
    m = mm.training_memory(model, precision="bf16", optimizer="adamw", method=mm.LoRA(rank=rank, targets=("q", "v")),
                           batch_size=batch, seq_len=seq)
    return np.broadcast_to(m.total, (batch.size, seq.size, rank.size))


def scalar(model, b, s, r):
    return mm.training_memory(model, precision="bf16", optimizer="adamw", method=mm.LoRA(rank=r, targets=("q", "v")),
                              batch_size=b, seq_len=s).total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=100, help="grid side: side**3 configurations (default 100)")
    parser.add_argument("--loop-points", type=int, default=2000, help="scalar calls per loop round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each")
    args = parser.parse_args()

    model = mm.PRESETS["llama-2-7b"]
    batch, seq, rank = grid(args.side)
    n_points = args.side**3
    rng = np.random.default_rng(0)
    picks = [tuple(int(v) for v in rng.integers(0, args.side, 3)) for _ in range(args.loop_points)]

    vectorized(model, batch, seq, rank)  # warm up both paths once
    scalar(model, 1, 64, 1)
    vector_times, loop_times, totals = [], [], None
    for _ in range(args.rounds):
        start = time.perf_counter()
        totals = vectorized(model, batch, seq, rank)
        vector_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        answers = [scalar(model, int(batch[i, 0, 0]), int(seq[0, j, 0]), int(rank[0, 0, k])) for i, j, k in picks]
        loop_times.append(time.perf_counter() - start)
    mismatches = sum(int(totals[i, j, k]) != answer for (i, j, k), answer in zip(picks, answers))

    vector_rate = n_points / statistics.median(vector_times)
    loop_rate = args.loop_points / statistics.median(loop_times)
    print(f"grid: batch 1..{args.side} x seq_len 64..{64 * args.side} x LoRA rank 1..{args.side} on llama-2-7b "
          f"= {n_points:,} configurations")
    print(f"vectorized: {statistics.median(vector_times) * 1e3:9.1f} ms per sweep   {vector_rate:15,.0f} configs/s")
    print(f"scalar loop: {statistics.median(loop_times) / args.loop_points * 1e6:8.1f} us per call    "
          f"{loop_rate:15,.0f} configs/s  (extrapolated: {n_points / loop_rate:,.0f} s for the grid)")
    print(f"ratio (vectorized / loop): {vector_rate / loop_rate:,.0f}x")
    print(f"exactness: {args.loop_points - mismatches}/{args.loop_points} loop answers equal the grid's")
    ok = vector_rate >= TARGET and mismatches == 0
    print(f"target {TARGET:,} configs/s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
