"""Measure LoRA dropout and mixed precision with fp32 master weights, and record them for memmath's tests.

    python -m validation.lora_dropout            # every case, CPU -> memmath_lessons/reference/data/measured_lora_dropout.json
    python -m validation.lora_dropout --only master --print --explain   # some cases, every saved storage listed

LoRA dropout (groups "LoRA dropout", "QLoRA dropout"): peft 0.21's LoraConfig(lora_dropout=p) puts an
nn.Dropout(p) on each adapted module's input, lora_B(lora_A(dropout(x))) (peft/tuners/lora/layer.py and bnb.py),
an nn.Identity at p = 0. The cases are validation/measure.py's and validation/quantized.py's builds (the same
models, peft's LoRA, bitsandbytes' NF4 base) with lora_dropout set: both call peft.LoraConfig, which is wrapped
here to pass the case's p (and checked: every adapted module holds an nn.Dropout(p)).

Master weights (group "master weights", precision "mixed"): a bf16 model whose optimizer steps fp32 copies of
its 16-bit trainable tensors, as DeepSpeed's FP16_Optimizer, Megatron's Float16OptimizerWithFloat16Params and
apex keep them (MasterWeights below): the copies are made when the optimizer is built, before the first forward;
each step copies every 16-bit gradient up to an fp32 one for its master, runs torch's optimizer on the masters
(fp32 tensors of the model are stepped as they are), copies the masters back into the model and drops their
gradients. The copies' bytes are alive before the step (resident_before_bytes) and recorded apart
(master_weight_bytes).

Each case runs validation/measure.py's measure(): two training steps, the saved tensors through
saved_tensors_hooks, the profiler's peak per phase of each step, the bytes of parameters, gradients and states.
Every case was recorded after memmath's model of it was written (LoRA(dropout=...) in memmath/methods.py, the
dropout in memmath/trace.py's linear, the master copy from step 1 and the masters' fp32 gradients in
memmath/peak.py): all held out. torch, transformers, peft and bitsandbytes are imported here only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

from . import measure as M
from . import quantized as Q

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "memmath" / "reference" / "data" / "measured_lora_dropout.json"

# LLaMA at hidden 256 (grouped-query attention, 2 key/value heads for 4 query heads), beside measure.py's gpt2-256.
SHAPES = {
    "llama-256": dict(M._WIDE_DECODER, arch="llama", n_kv_heads=2),
}
GROUP_LORA, GROUP_QLORA, GROUP_MASTER = "LoRA dropout", "QLoRA dropout", "master weights"
# memmath's attention targets (q, k, v, o) -> the modules peft adapts, beside measure.PEFT_TARGETS' "qv" and "all".
PEFT_TARGETS = {("gpt2", "q+k+v+o"): ["c_attn", "attn.c_proj"],
                ("llama", "q+k+v+o"): ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass(frozen=True)
class DropoutCase(Q.QuantCase):
    """A measure.Case with peft's lora_dropout, a bitsandbytes base (quant_type "nf4", else None) or an fp32 master
    copy (master=True, precision "mixed": a bf16 model)."""

    quant_type: str | None = None
    double_quant: bool = False
    lora_dropout: float = 0.0
    master: bool = False

    @property
    def case_id(self) -> str:
        case_id = M.Case.case_id.fget(self)
        if self.quant_type:
            case_id = f"qlora-{self.quant_type}{'-dq' if self.double_quant else ''}/" + case_id
        if self.method == "lora" and not self.master:
            case_id = f"loradrop{self.lora_dropout:g}/" + case_id
        return ("master/" if self.master else "") + case_id

    @property
    def held_out(self) -> bool:
        return True  # every case recorded after the prediction code it tests


def grid() -> list[DropoutCase]:
    """LoRA dropout 0.05 and 0.1 (and one 0.0 control per shape) on attention, q and v, and every linear layer,
    both adapter formats, fp32 and bf16, eager attention with the model's dropout, checkpointing, SGD; QLoRA on
    an NF4 base; mixed precision with master weights, full finetuning, freezing and LoRA."""
    def lora(shape, p, targets, **settings):
        return DropoutCase(shape, method="lora", lora_targets=targets, lora_dropout=p, group=GROUP_LORA, **settings)

    cases = []
    for shape in ("gpt2-256", "llama-256"):
        cases += [
            lora(shape, 0.1, "all", precision="bf16", adapter_format="fp32", batch_size=2, seq_len=64),
            lora(shape, 0.05, "all", precision="bf16", adapter_format="bf16", batch_size=2, seq_len=64),
            lora(shape, 0.1, "q+k+v+o", precision="bf16", adapter_format="fp32", batch_size=1, seq_len=96),
            lora(shape, 0.05, "q+k+v+o", precision="fp32", adapter_format="fp32", batch_size=2, seq_len=48),
            lora(shape, 0.1, "qv", precision="fp32", adapter_format="fp32", attention="eager", dropout=True,
                 batch_size=1, seq_len=80),
            lora(shape, 0.1, "all", precision="bf16", adapter_format="fp32", checkpointing=True, batch_size=2,
                 seq_len=64),
            lora(shape, 0.05, "all", precision="bf16", adapter_format="bf16", optimizer="sgd_momentum", batch_size=3,
                 seq_len=40),
            lora(shape, 0.1, "q+k+v+o", precision="bf16", adapter_format="bf16", attention="eager", batch_size=2,
                 seq_len=32),
            lora(shape, 0.0, "all", precision="bf16", adapter_format="fp32", batch_size=2, seq_len=48),
        ]
        cases += [
            DropoutCase(shape, method="lora", lora_targets="all", lora_dropout=0.1, precision="bf16",
                        adapter_format="fp32", quant_type="nf4", double_quant=True, group=GROUP_QLORA, batch_size=2,
                        seq_len=64),
            DropoutCase(shape, method="lora", lora_targets="q+k+v+o", lora_dropout=0.05, precision="bf16",
                        adapter_format="bf16", quant_type="nf4", double_quant=True, group=GROUP_QLORA,
                        batch_size=1, seq_len=64),
        ]

    def master(shape, **settings):
        return DropoutCase(shape, precision="mixed", master=True, group=GROUP_MASTER, **settings)

    cases += [
        master("llama-256", batch_size=4, seq_len=256),
        master("gpt2-256", batch_size=4, seq_len=192),
        master("llama-256", batch_size=1, seq_len=64),
        master("gpt2-256", method="freeze", frozen_layers=1, batch_size=2, seq_len=128),
        master("llama-256", method="lora", lora_targets="all", adapter_format="bf16", batch_size=4, seq_len=128),
        master("gpt2-256", method="lora", lora_targets="qv", adapter_format="fp32", batch_size=2, seq_len=64),
        master("llama-256", optimizer="sgd_momentum", batch_size=2, seq_len=128),
        master("gpt2-256", checkpointing=True, batch_size=4, seq_len=128),
    ]
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate case ids"
    return cases


class MasterWeights:
    """An optimizer over fp32 master copies of a model's 16-bit trainable tensors (fp32 ones stepped as they are).

    The copies are made here, when the optimizer is built (before the first forward), in the model's parameter
    order; step() sets every master's gradient to its tensor's gradient copied up to fp32, runs the inner torch
    optimizer on the masters, copies them back into the model and drops the masters' gradients; zero_grad()
    drops the model's. `state` is the inner optimizer's (the states of the masters), `masters` the copies."""

    def __init__(self, params, optimizer: str):
        import torch

        self.params = list(params)
        self.stepped = [p.detach().clone().float() if p.dtype != torch.float32 else p for p in self.params]
        self.masters = [m for m, p in zip(self.stepped, self.params) if m is not p]
        self.inner = M.make_optimizer(self.stepped, optimizer)

    @property
    def state(self):
        return self.inner.state

    def step(self):
        import torch

        with torch.no_grad():
            for p, m in zip(self.params, self.stepped):
                if m is not p:
                    m.grad = None if p.grad is None else p.grad.float()
            self.inner.step()
            for p, m in zip(self.params, self.stepped):
                if m is not p:
                    p.copy_(m)
                    m.grad = None

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None


def _lora_config(p: float):
    """peft.LoraConfig with lora_dropout=p, whatever the build asks."""
    import peft

    real = peft.LoraConfig

    def config(*args, **kwargs):
        kwargs["lora_dropout"] = p
        return real(*args, **kwargs)

    return mock.patch.object(peft, "LoraConfig", config)


def _check_dropout(model, p: float):
    """Every adapted module holds peft's nn.Dropout(p) (an nn.Identity at p = 0)."""
    import torch

    layers = [m.lora_dropout["default"] for m in model.modules() if hasattr(m, "lora_dropout") and m.lora_dropout]
    assert layers, "no LoRA layer"
    for layer in layers:
        assert (isinstance(layer, torch.nn.Dropout) and layer.p == p) if p else isinstance(layer, torch.nn.Identity)


MASTER_BYTES = {}
_QUANTIZED_BUILD = Q.build  # measure_case points quantized.measure_case's build at this module's


def build(case: DropoutCase, device: str = "cpu"):
    """(model, optimizer, batch): measure.build (or quantized.build for an NF4 base) with the case's lora_dropout;
    for a master case, measure.build of the bf16 model with MasterWeights as its optimizer."""
    if case.master:
        model, _, batch = M.build(replace(case, precision="bf16"), device)
        optimizer = MasterWeights([p for p in model.parameters() if p.requires_grad], case.optimizer)
        model.resident_tensors = optimizer.masters  # made before the first step, as the frameworks make them
        MASTER_BYTES[case.case_id] = M._unique_bytes(optimizer.masters)
        return model, optimizer, batch
    with _lora_config(case.lora_dropout):
        model, optimizer, batch = (_QUANTIZED_BUILD if case.quant_type else M.build)(case, device)
    _check_dropout(model, case.lora_dropout)
    return model, optimizer, batch


def measure_case(case: DropoutCase) -> dict:
    if case.quant_type:
        with mock.patch.object(Q, "build", build):  # quantized.measure_case's constants, with this build
            return Q.measure_case(case)
    result = M.measure(case, "cpu", build_fn=build)
    if case.master:
        result["master_weight_bytes"] = MASTER_BYTES[case.case_id]
    return result


def run(cases, explain=False) -> list[dict]:
    M.configure_torch()
    records = []
    # measure() and Case.config() look shapes up there, measure.build and quantized.build the peft targets
    with mock.patch.dict(M.SHAPES, SHAPES), mock.patch.dict(M.PEFT_TARGETS, PEFT_TARGETS):
        for i, case in enumerate(cases, 1):
            started = time.perf_counter()
            if explain:
                M.measure(case, "cpu", explain=True, build_fn=build)
            measured = measure_case(case)
            M.report_progress(i, len(cases), case, measured, started)
            records.append({"config": case.config(), "measured": measured})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", default=None, help="measure only cases whose id contains this text")
    parser.add_argument("--print", action="store_true", help="print the records instead of writing a file")
    parser.add_argument("--explain", action="store_true", help="list every saved storage (to stderr)")
    args = parser.parse_args(argv)

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    cases = [c for c in grid() if not args.only or args.only in c.case_id]
    records = run(cases, explain=args.explain)
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    document = {
        "schema": M.SCHEMA_VERSION,
        "description": "LoRA dropout (peft's lora_dropout, on a 16/32-bit and an NF4 base) and mixed precision with "
                       "fp32 master weights, two training steps per case, measured by validation/lora_dropout.py; see "
                       "memmath_lessons/reference/measured.py (load_measured_lora_dropout). Every case held out: recorded "
                       "after the prediction code.",
        "device": "cpu",
        "threads": 1,
        "versions": M.versions(),
        "dropout_p": M.DROPOUT_P,
        "lora_alpha": M.LORA_ALPHA,
        "shapes": {name: dict(SHAPES.get(name) or M.SHAPES[name]) for name in sorted({c.shape for c in cases})},
        "cases": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
