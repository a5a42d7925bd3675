"""AMP measured: fp32 weights, the forward pass (loss included) under torch.autocast("cpu", dtype=torch.bfloat16).

    python -m validation.amp            # measure the grid, append it to memmath_lessons/reference/data/measured_cpu.json
    python -m validation.amp --print --only llama-gqa

PyTorch's AMP recipe as transformers' Trainer runs it (bf16=True on the CPU): the model and its
optimizer stay in fp32 (weights, gradients and states 4 bytes each, no separate master copy: the
fp32 weights are the master), and the forward pass runs inside autocast, which casts the inputs of
matmuls (linear, bmm, SDPA) to bf16 and caches the bf16 copy of each weight that requires grad for
the rest of the autocast region. measure.measure runs the two steps (the model's forward wrapped in
autocast). Besides its columns this records, from one more forward of a fresh model under the same
saved-tensor recorder:

- saved_weight_cast_bytes: the saved bf16 copies of parameters (autocast's weight casts, kept for
  backward by every matmul whose input needs a gradient), each storage once;
- saved_bf16_bytes and saved_fp32_bytes: every saved storage by dtype (the rest are int64/bool).

Group "AMP (autocast bf16)"; every case recorded after memmath's "amp" recipe was written (held out).
memmath predicts the static parts with precision="amp"; its exact activation model refuses AMP by
name, so saved activations and peaks are recorded and set against the textbook estimate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from . import measure as M
from .quantized import append

GROUP = "AMP (autocast bf16)"
AUTOCAST_DTYPE = "bfloat16"
VIEWS = ("TBackward0", "TransposeBackward0", "ViewBackward0", "PermuteBackward0", "ExpandBackward0",
         "UnsafeViewBackward0", "AliasBackward0")


@dataclass(frozen=True)
class AmpCase(M.Case):
    """A measure.Case trained in fp32 with the forward pass under autocast (precision "amp")."""

    precision: str = "amp"
    group: str = GROUP

    @property
    def held_out(self) -> bool:
        return True  # recorded after memmath's "amp" recipe (recipes.py) was written


def grid() -> list[AmpCase]:
    cases = []
    shapes = ("llama-mha", "llama-gqa", "llama-gqa-tied", "gpt2", "bert", "qwen2-gqa", "mistral-gqa", "llama-wide",
              "gpt2-wide", "bert-wide")
    for i, shape in enumerate(shapes):
        cases.append(AmpCase(shape))
        cases.append(AmpCase(shape, method="lora", lora_targets=("qv", "all")[i % 2], batch_size=(2, 1)[i % 2],
                             seq_len=(64, 48)[i % 2]))
        cases.append(AmpCase(shape, method="freeze", frozen_layers=1, attention="eager", dropout=True,
                             checkpointing=bool(i % 2), optimizer=("adamw", "sgd_momentum")[i % 2], batch_size=3,
                             seq_len=32))
    return cases


@dataclass(frozen=True)
class AmpTraceCase(AmpCase):
    """An AMP case recorded after memmath/amp_trace.py was written: held out for the activations too."""

    group: str = GROUP


def held_out_grid() -> list[AmpTraceCase]:
    """SDPA without dropout (what amp_trace.py models): checkpointing, freezing, LoRA on every linear at
    rank 16, other sizes, and the model types read from config.json."""
    cases = []
    shapes = ("llama-gqa", "gpt2", "bert", "qwen3-gqa", "phi3-gqa", "gpt2-tanh", "llama-wide", "bert-wide",
              "olmo2-gqa", "llama-mha")
    for i, shape in enumerate(shapes):
        cases.append(AmpTraceCase(shape, method="freeze", frozen_layers=1, checkpointing=bool(i % 2), batch_size=2,
                                  seq_len=48))
        cases.append(AmpTraceCase(shape, method=("full", "lora")[i % 2], lora_targets="all", lora_rank=16,
                                  optimizer=("adamw", "sgd_momentum")[(i // 2) % 2], checkpointing=not i % 2,
                                  batch_size=4, seq_len=24))
    return cases


def held_out_eager_grid() -> list[AmpTraceCase]:
    """Eager attention under AMP, recorded after amp_trace.py's eager path was written (held out)."""
    cases = []
    for i, shape in enumerate(("llama-gqa", "gpt2", "bert", "qwen3-gqa", "phi3-gqa", "gpt2-wide", "llama-wide",
                               "mistral-gqa")):
        cases.append(AmpTraceCase(shape, method=("full", "lora", "freeze")[i % 3], frozen_layers=1 if i % 3 == 2 else 0,
                                  lora_targets="all", attention="eager", dropout=bool(i % 2), batch_size=(2, 1)[i % 2],
                                  seq_len=(40, 64)[i % 2]))
    return cases


def _fp32_case(case: AmpCase) -> M.Case:
    """The same case with an fp32 model: what measure.build builds before autocast is switched on."""
    fields = {name: getattr(case, name) for name in M.Case.__dataclass_fields__}
    fields.update(precision="fp32", group="transformers")
    return M.Case(**fields)


def build(case: AmpCase, device: str = "cpu"):
    """measure.build's fp32 model, optimizer and batch, with the model's forward under autocast."""
    import torch

    model, optimizer, batch = M.build(_fp32_case(case), device)
    forward = model.forward

    def autocast_forward(*args, **kwargs):
        with torch.autocast(device, dtype=getattr(torch, AUTOCAST_DTYPE)):
            return forward(*args, **kwargs)

    model.forward = autocast_forward
    return model, optimizer, batch


def saved_by_kind(case: AmpCase) -> dict:
    """One forward of a fresh model under autocast: saved storages by dtype, and the weight casts."""
    import torch

    model, _, batch = build(case)
    family = M.SHAPES[case.shape]["family"]
    recorder = M.SavedTensorRecorder(model, M.model_blocks(model, family))
    shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape)[::-1] for p in model.parameters()}
    kinds: dict[int, str] = {}
    pack = recorder.pack

    def classify(t):
        ptr, _ = M._storage_key(t)
        if ptr and ptr not in recorder.excluded and ptr not in kinds:
            fn = t.grad_fn
            while fn is not None and type(fn).__name__ in VIEWS:  # a saved view (weight.t()) of the cast
                fn = fn.next_functions[0][0]
            from_param = (fn is not None and type(fn).__name__ == "ToCopyBackward0"
                          and type(fn.next_functions[0][0]).__name__ == "AccumulateGrad")
            frozen_cast = fn is None and not t.requires_grad and t.dtype == torch.bfloat16 and tuple(t.shape) in shapes
            kinds[ptr] = "cast" if (from_param or frozen_cast) else str(t.dtype)
        return pack(t)

    recorder.pack = classify
    with recorder.hooks():
        loss = model(**batch).loss
    recorder.close()
    del loss
    total = {"cast": 0, "torch.bfloat16": 0, "torch.float32": 0}
    for ptr, nbytes in recorder.nbytes.items():
        kind = kinds.get(ptr, "other")
        if kind == "cast":
            total["cast"] += nbytes
            total["torch.bfloat16"] += nbytes
        elif kind in total:
            total[kind] += nbytes
    return {"saved_weight_cast_bytes": total["cast"], "saved_bf16_bytes": total["torch.bfloat16"],
            "saved_fp32_bytes": total["torch.float32"]}


def run(cases, progress=True) -> list[dict]:
    M.configure_torch()
    records = []
    for i, case in enumerate(cases, 1):
        measured = M.measure(case, "cpu", build_fn=build)
        measured.update(saved_by_kind(case))
        if progress:
            print(f"[{i:3d}/{len(cases)}] {case.case_id}  params {measured['param_bytes']:,} saved "
                  f"{measured['saved_bytes']:,} (weight casts {measured['saved_weight_cast_bytes']:,}) peak "
                  f"{measured['peak_step1_bytes']:,} / {measured['peak_bytes']:,}", file=sys.stderr)
        config = {**case.config(), "autocast_dtype": AUTOCAST_DTYPE,
                  "after_amp_trace": isinstance(case, AmpTraceCase)}  # recorded after memmath/amp_trace.py
        records.append({"config": config, "measured": measured})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None)
    parser.add_argument("--print", action="store_true")
    args = parser.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    cases = [c for c in grid() + held_out_grid() + held_out_eager_grid() if not args.only or args.only in c.case_id]
    have = set()
    if not args.print:
        have = {r["config"]["case_id"] for r in json.loads(M.DEFAULT_OUT.read_text()).get("amp_cases", [])}
    records = run([c for c in cases if c.case_id not in have])
    if args.print:
        json.dump(records, sys.stdout, indent=1)
        return
    print(f"appended {append(records, 'amp_cases')} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
