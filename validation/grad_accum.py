"""Measure gradient accumulation over k micro-batches, and record it for memmath's tests.

    python -m validation.grad_accum            # every case, CPU -> memmath_lessons/reference/data/measured_grad_accum.json
    python -m validation.grad_accum --only accum4 --print   # some cases, printed, nothing written

Each case runs validation/measure.py's measure() with grad_accum_steps = k: two optimizer steps, each after k
forward and backward passes of the case's batch (the micro-batch), every loss divided by k, as transformers'
Trainer (gradient_accumulation_steps) and a plain PyTorch loop accumulate:

    for micro-batch in range(k): loss = model(**batch).loss / k; loss.backward()
    optimizer.step(); optimizer.zero_grad(set_to_none=True)

It records what measure() records (parameters, gradients, states, the saved tensors of the first micro-batch,
the profiler's peak per phase of each step) and each micro-batch's forward and backward peak apart
(peak_step{n}_micro{j}_{phase}_bytes); a step's phase peak is its highest micro-batch.

What the allocator showed while memmath's model was written (torch 2.13 CPU, GPT-2 and LLaMA at hidden 256,
bf16, k = 2 and 3): from the second micro-batch on, every AccumulateGrad node allocates nothing and frees exactly
one parameter's gradient: autograd makes a fresh gradient for each parameter, as in the first micro-batch, and
adds it into .grad in place, so the second micro-batch's memory is the first one's at the same node plus the
gradients the first one had not yet put into .grad. Every case was recorded after that model
(memmath/peak.py, Run.grad_accum_steps) was written: all held out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from . import measure as M

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_grad_accum.json"

# LLaMA at hidden 256 (grouped-query attention, 2 key/value heads for 4 query heads, untied head), beside
# measure.py's gpt2-256 (tied head, use_cache=True as a downloaded config has it); validation/lora_dropout.py's too.
SHAPES = {
    "llama-256": dict(M._WIDE_DECODER, arch="llama", n_kv_heads=2),
}
GROUP = "gradient accumulation"


@dataclass(frozen=True)
class AccumCase(M.Case):
    """A measure.Case whose optimizer steps after grad_accum_steps micro-batches of batch_size sequences."""

    grad_accum_steps: int = 2

    @property
    def case_id(self) -> str:
        return f"accum{self.grad_accum_steps}/" + M.Case.case_id.fget(self)

    @property
    def held_out(self) -> bool:
        return True  # every case recorded after the prediction code it tests


def grid() -> list[AccumCase]:
    """Per shape: k = 2, 4 and 8 (and one k = 1 control), full finetuning, LoRA on q and v and on every linear
    layer (both adapter formats), freezing, with and without checkpointing, fp32 and bf16, eager attention with
    dropout, SGD with momentum."""
    def case(shape, k, **settings):
        return AccumCase(shape, grad_accum_steps=k, group=GROUP, **settings)

    cases = []
    for shape in ("gpt2-256", "llama-256"):
        cases += [
            case(shape, 2, precision="bf16", batch_size=2, seq_len=64),
            case(shape, 2, precision="bf16", checkpointing=True, batch_size=2, seq_len=64),
            case(shape, 4, precision="bf16", checkpointing=True, batch_size=1, seq_len=128),
            case(shape, 4, precision="fp32", batch_size=2, seq_len=48),
            case(shape, 8, precision="bf16", batch_size=1, seq_len=64),
            case(shape, 2, precision="fp32", attention="eager", dropout=True, batch_size=1, seq_len=64),
            case(shape, 2, precision="bf16", method="freeze", frozen_layers=1, checkpointing=True, batch_size=2,
                 seq_len=64),
            case(shape, 2, precision="bf16", method="lora", lora_targets="all", adapter_format="fp32", batch_size=2,
                 seq_len=64),
            case(shape, 4, precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                 checkpointing=True, batch_size=2, seq_len=64),
            case(shape, 2, precision="fp32", method="lora", lora_targets="qv", checkpointing=True, batch_size=1,
                 seq_len=96),
            case(shape, 4, precision="bf16", method="lora", lora_targets="qv", adapter_format="fp32", batch_size=4,
                 seq_len=32),
            case(shape, 4, precision="bf16", method="lora", lora_targets="all", adapter_format="bf16",
                 optimizer="sgd_momentum", batch_size=2, seq_len=48),
            case(shape, 1, precision="bf16", batch_size=2, seq_len=64),
        ]
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate case ids"
    return cases


def run(cases) -> list[dict]:
    M.configure_torch()
    records = []
    with mock.patch.dict(M.SHAPES, SHAPES):  # measure() and Case.config() look shapes up there
        for i, case in enumerate(cases, 1):
            started = time.perf_counter()
            measured = M.measure(case, "cpu")
            M.report_progress(i, len(cases), case, measured, started)
            records.append({"config": case.config(), "measured": measured})
    return records


DESCRIPTION = ("Gradient accumulation over k micro-batches (grad_accum_steps), two optimizer steps per case, measured "
               "by validation/grad_accum.py; see memmath_lessons/reference/measured.py (load_measured_grad_accum). Every case "
               "held out: recorded after the prediction code.")


def main(argv=None):
    M.recorder_main(__doc__, grid, lambda cases, explain=False: run(cases), DEFAULT_OUT, DESCRIPTION,
                    {**M.SHAPES, **SHAPES}, argv)


if __name__ == "__main__":
    main()
