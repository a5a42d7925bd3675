"""Held-out sharded runs for memmath/sharded_peak.py: FSDP2 and ZeroRedundancyOptimizer over gloo on one CPU.

    python -m validation.sharded_held_out            # measures the grid, writes validation/sharded_held_out.json

Recorded after memmath/sharded_peak.py was written and fitted to validation/sharded.py's runs: other shapes (wider,
four blocks, a tied embedding), other sizes, three ranks (FSDP2 pads uneven first dimensions) and activation
checkpointing (transformers' non-reentrant checkpoint around every block, as validation/measure.py enables it).
Each case runs validation/sharded.py's worker (two profiled steps per rank, the same per-phase peaks).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import measure, sharded

OUT = Path(__file__).resolve().parent / "sharded_held_out.json"


@dataclass(frozen=True)
class HeldOutCase(sharded.ShardedCase):
    """A ShardedCase with activation checkpointing as a choice."""

    checkpointing: bool = False

    @property
    def case_id(self) -> str:
        return "/".join([self.shape, self.precision, "adamw", "full", "sdpa", "nodrop",
                         "ckpt" if self.checkpointing else "nockpt", f"b{self.batch_size}s{self.seq_len}",
                         f"{self.engine}x{self.world_size}"])

    def base(self) -> measure.Case:
        return measure.Case(self.shape, precision=self.precision, batch_size=self.batch_size, seq_len=self.seq_len,
                            checkpointing=self.checkpointing, group="sharded held out")

    def config(self) -> dict:
        base = self.base()
        return {"case_id": self.case_id, **asdict(base), "engine": self.engine, "world_size": self.world_size,
                "held_out": True, "model": dict(measure.SHAPES[self.shape])}


def grid() -> list[HeldOutCase]:
    return [
        HeldOutCase("gpt2-wide", "bf16", "fsdp2", 2),
        HeldOutCase("llama-wide", "fp32", "fsdp2", 3, batch_size=1, seq_len=128),
        HeldOutCase("llama-gqa-tied", "fp32", "fsdp2", 2, batch_size=4, seq_len=32),
        HeldOutCase("bert-wide", "bf16", "fsdp2", 3),
        HeldOutCase("gpt2-wide", "fp32", "fsdp2-noreshard", 3),
        HeldOutCase("llama-wide", "bf16", "fsdp2-noreshard", 2),
        HeldOutCase("llama-gqa-tied", "bf16", "zero1", 3),
        HeldOutCase("llama-wide", "fp32", "zero1", 2),
        HeldOutCase("bert-wide", "fp32", "zero1", 2, batch_size=4, seq_len=32),
        HeldOutCase("gpt2-wide", "fp32", "fsdp2", 2, checkpointing=True),
        HeldOutCase("llama-wide", "bf16", "fsdp2", 2, checkpointing=True),
        HeldOutCase("llama-wide", "fp32", "fsdp2-noreshard", 2, checkpointing=True),
        HeldOutCase("bert-wide", "bf16", "fsdp2-noreshard", 3, checkpointing=True),
        HeldOutCase("llama-wide", "bf16", "zero1", 2, checkpointing=True),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON file to write (its runs measured now replaced)")
    args = parser.parse_args(argv)
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    records = sharded.run(cases)
    document = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {
        "description": __doc__.split("\n\n")[0], "versions": measure.versions(),
        "sharded_cases": []}
    new_ids = {r["config"]["case_id"] for r in records}
    kept = [r for r in document["sharded_cases"] if r["config"]["case_id"] not in new_ids]
    document["sharded_cases"] = kept + records
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} sharded runs into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
