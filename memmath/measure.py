"""Measure two real training steps of your own model on your own device, part by part, beside memmath's prediction.

This is how memmath is validated (the recorded measurements it is tested against come from the same engine,
memmath.stepping), turned into a tool: the model is built from its config.json (a file, its folder or a repo id
in the local Hugging Face cache; never downloaded) with random weights, on CUDA when there is a GPU, else on the
CPU, the method applied (full, freezing the first k blocks, LoRA through peft), and two steps run:

    forward (loss = model(**batch).loss), backward, optimizer.step(), zero_grad(set_to_none=True)

Measured: weights, gradients, optimizer states, the bytes saved for backward, each step's peak and its phase
(step 1 before the optimizer states exist, step 2 as every later step), and on CUDA the allocator's reserved bytes
and the reserved bytes no tensor held at each step's peak. Beside each: memmath's prediction for the same run
(memmath.training_memory and memmath.peak_memory where the model type has a record, else memmath.traced's answer).

    memmath measure CONFIG [--batch B] [--seq S] [--precision P] [--method M] [--json]
    memmath measure --snapshot FILE.pickle      # a torch.cuda.memory._dump_snapshot file, by part (memmath.snapshot)

From Python: measure_run(config, settings) -> Comparison; MemmathCallback for transformers' Trainer.
Needs the torch extra: pip install "memmath[torch]".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys

from . import validate
from .config_reader import from_hf_config
from .memory import training_memory
from .methods import Freeze, Full, LoRA
from .peak import peak_memory
from .run import Run
from .snapshot import read_snapshot
from .stepping import PHASES, StorageSet, step_twice, unique_bytes
from .traced import (ATTENTION, METHODS, OPTIMIZERS, PRECISIONS, TorchMissing, TraceSettings, _quiet_transformers,
                     apply_method, blocks_of, hf_config, make_optimizer, model_class, read_config, require_torch,
                     settings_of, traced_training, versions)
from .values import frozen

# Each part: its label, the measured record's key, and how closely memmath's recorded groups hold it
# (tests/test_fidelity.py: to the byte for the static parts, 1% for saved activations, 5% for the peaks).
PARTS = (
    ("Weights", "param_bytes", 0.0),
    ("Gradients", "grad_bytes", 0.0),
    ("Optimizer states", "optimizer_state_bytes", 0.0),
    ("Saved activations", "saved_bytes", 0.01),
    ("Peak of step 1", "peak_step1_bytes", 0.05),
    ("Peak of step 2 (every later step)", "peak_step2_bytes", 0.05),
)
# The step timeline: each phase's peak in each of the two steps (memmath.stepping measures them, peak_memory and the
# traced answer predict them), held as the step's peak is.
TIMELINE = tuple((step, phase, f"peak_step{step}_{phase}_bytes") for step in (1, 2) for phase in PHASES)
TIMELINE_TOLERANCE = 0.05
BAR_WIDTH = 30  # characters of the text chart's longest bar
CUDA_PARTS = (("Reserved by the allocator", "cuda_reserved_bytes"),
              ("Reserved, not allocated at step 2's peak", "cuda_fragmented_step2_bytes"))


@frozen
class Comparison:
    """A measured run beside its prediction: `measured` and `predicted` by the keys of PARTS (integer bytes)."""

    model_type: str
    device: str
    settings: TraceSettings
    measured: dict
    predicted: dict
    basis: str  # "memmath" (the model type's record) or "traced" (memmath.traced)
    versions: dict

    def rows(self) -> list[dict]:
        rows = []
        for label, key, tolerance in PARTS:
            got, want = self.measured.get(key), self.predicted.get(key)
            row = {"part": label, "key": key, "measured": got, "predicted": want, "held_to": tolerance}
            if key.startswith("peak_step"):
                row["phase"] = self.measured.get(key.replace("_bytes", "_phase"))
            if got is not None and want is not None:
                row["difference"] = want - got
                row["agrees"] = abs(want - got) <= tolerance * got
            rows.append(row)
        for label, key in CUDA_PARTS:
            if key in self.measured:
                rows.append({"part": label, "key": key, "measured": self.measured[key], "predicted": None})
        return rows

    def timeline(self) -> list[dict]:
        """Each phase's peak of the two steps, measured beside predicted (integer bytes), in the order they run."""
        rows = []
        for step, phase, key in TIMELINE:
            got, want = self.measured.get(key), self.predicted.get(key)
            row = {"step": step, "phase": phase, "key": key, "measured": got, "predicted": want,
                   "held_to": TIMELINE_TOLERANCE}
            if got is not None and want is not None:
                row["agrees"] = abs(want - got) <= TIMELINE_TOLERANCE * got
            rows.append(row)
        return rows

    def as_dict(self) -> dict:
        settings = dataclasses.asdict(self.settings)
        settings["lora_targets"] = list(settings["lora_targets"])
        return {"model_type": self.model_type, "device": self.device, "settings": settings, "basis": self.basis,
                "rows": self.rows(), "timeline": self.timeline(), "measured": self.measured,
                "predicted": self.predicted, "versions": self.versions}

    def text(self) -> str:
        s = self.settings
        lines = [f"{self.model_type} on {self.device}: two training steps measured beside "
                 f"{'memmath' if self.basis == 'memmath' else 'the traced answer (memmath.traced)'}",
                 f"  {s.precision}, {s.optimizer}, {s.method}, batch {s.batch_size} x {s.seq_len} tokens, {s.attention}"
                 f"{', checkpointing' if s.checkpointing else ''}",
                 f"  {'part':<42s} {'measured (B)':>16s} {'predicted (B)':>16s} {'difference':>11s}  held to"]
        for row in self.rows():
            label = row["part"] + (f" ({row['phase']})" if row.get("phase") else "")
            got, want = row["measured"], row["predicted"]
            diff = "" if got is None or want is None else (f"{(want - got) / got:+.2%}" if got else "0")
            held = "" if want is None else ("the byte" if row["held_to"] == 0 else f"{row['held_to']:.0%}")
            mark = "" if "agrees" not in row else ("  ok" if row["agrees"] else "  MISSES")
            lines.append(f"  {label:<42s} {_n(got):>16s} {_n(want):>16s} {diff:>11s}  {held}{mark}")
        return "\n".join(lines) + "\n" + self.timeline_chart()

    def timeline_chart(self) -> str:
        """The step timeline as a text chart: each phase's peak, measured (#) over predicted (=), to one scale."""
        rows = [r for r in self.timeline() if r["measured"] is not None or r["predicted"] is not None]
        top = max((v for r in rows for v in (r["measured"], r["predicted"]) if v), default=0)
        if not top:
            return ""
        lines = ["", "  Step timeline: each phase's peak, measured (#) over predicted (=)"]
        for r in rows:
            label = f"step {r['step']} {r['phase'].replace('_', ' ')}"
            for mark, value in (("#", r["measured"]), ("=", r["predicted"])):
                bar = "" if value is None else mark * max(1, round(BAR_WIDTH * value / top))
                lines.append(f"  {label:<26s} {bar:<{BAR_WIDTH}s} {_n(value):>16s}")
                label = ""
        return "\n".join(lines) + "\n"


def _n(value) -> str:
    return "-" if value is None else f"{value:,}"


def default_device() -> str:
    torch, _ = require_torch()
    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def cpu_settings(torch):
    """One thread and oneDNN off while a CPU step is measured (validation/measure.py's configure_torch says why:
    oneDNN's scratch pads depend on the host's instruction set; a GPU has none), restored afterwards."""
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn


def build_real(config: dict, settings: TraceSettings, device: str, seed: int = 0):
    """(model, optimizer, batch, blocks): the model with random weights on `device`, its method applied."""
    torch, _ = require_torch()
    hf = hf_config(config, settings)
    torch.manual_seed(seed)
    dtype = getattr(torch, PRECISIONS[settings.precision])
    with torch.device(device):
        model = model_class(hf)._from_config(hf, dtype=dtype)
    if settings.checkpointing:
        model.gradient_checkpointing_enable()
    model = apply_method(model, settings, blocks_of(model)[0])
    model.train()
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], settings.optimizer)
    generator = torch.Generator().manual_seed(seed + 1)
    vocab = getattr(hf, "vocab_size", None) or 2
    input_ids = torch.randint(1, max(vocab, 2), (settings.batch_size, settings.seq_len), generator=generator)
    labels = (torch.zeros(settings.batch_size, dtype=torch.long) if "SequenceClassification" in type(model).__name__
              else input_ids.clone())
    batch = {"input_ids": input_ids.to(device), "labels": labels.to(device)}
    return model, optimizer, batch, blocks_of(model)[0]


def measure_config(config, settings=None, device: str | None = None) -> dict:
    """Two real training steps of the config's model: memmath.stepping's record (integer bytes by key)."""
    torch, _ = require_torch()
    settings = settings_of(settings)
    config = read_config(config)
    device = validate.choice("device", device or default_device(), ("cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise validate.FieldError("device", "device 'cuda' was asked for but torch sees no CUDA GPU; use --device cpu")
    _quiet_transformers()
    with cpu_settings(torch) if device == "cpu" else contextlib.nullcontext():
        model, optimizer, batch, blocks = build_real(config, settings, device)
        result = step_twice(model, optimizer, batch, blocks, mode=device)
    del model, optimizer, batch
    return result


def predict(config: dict, settings: TraceSettings, device: str) -> tuple[dict, str]:
    """memmath's prediction by PARTS' keys, and its basis: the model type's record, else the traced answer."""
    try:
        shape = from_hf_config(config)
    except ValueError:
        shape = None
    if shape is not None:
        try:
            return _memmath_prediction(shape, settings, device), "memmath"
        except ValueError:
            pass  # a run memmath's exact model does not cover (its peak model refuses it): the trace answers
    answer = traced_training(config, settings)
    phases = {key: answer.phase_peaks[f"step{step}"][phase] for step, phase, key in TIMELINE}
    return {**{key: getattr(answer, key) for _, key, _ in PARTS}, **phases}, "traced"


def memmath_run(shape, settings: TraceSettings, device: str):
    """The memmath.Run that describes the measured step."""
    if settings.method == "freeze":
        method = Freeze(frozen_layers=settings.frozen_layers)
    elif settings.method == "lora":
        method = LoRA(rank=settings.lora_rank, targets=settings.lora_targets,
                      adapter_format="fp32" if settings.lora_format == "fp32" else None)
    else:
        method = Full()
    return Run(shape, precision=settings.precision, optimizer=settings.optimizer, method=method,
               batch_size=settings.batch_size, seq_len=settings.seq_len, checkpointing=settings.checkpointing,
               attention=settings.attention, device=device)


def _memmath_prediction(shape, settings, device) -> dict:
    run = memmath_run(shape, settings, device)
    memory = training_memory(run)
    peaks = {1: peak_memory(run, step="first"), 2: peak_memory(run, step="steady")}
    return {"param_bytes": int(memory.weights), "grad_bytes": int(memory.gradients),
            "optimizer_state_bytes": int(memory.optimizer_states),
            "saved_bytes": int(memory.activation_detail.saved_by_forward),
            "peak_step1_bytes": int(peaks[1].total), "peak_step2_bytes": int(peaks[2].total),
            **{key: int(getattr(peaks[step], phase)) for step, phase, key in TIMELINE}}


def measure_run(config, settings=None, device: str | None = None, **overrides) -> Comparison:
    """Two real steps of the config's model on `device` (default: CUDA when present, else the CPU) beside memmath's
    prediction for the same run. settings: a memmath.Run, a dict of TraceSettings' fields, or None."""
    settings = settings_of(settings, **overrides)
    config = read_config(config)
    device = device or default_device()
    measured = measure_config(config, settings, device)
    predicted, basis = predict(config, settings, device)
    return Comparison(model_type=config["model_type"], device=device, settings=settings, measured=measured,
                      predicted=predicted, basis=basis, versions=versions())


# ---- transformers' Trainer -------------------------------------------------------------------------
def trainer_callback(prediction: dict | None = None, out=None):
    """A transformers TrainerCallback that measures the first two steps of a Trainer's run part by part (weights,
    gradients before the first optimizer step, optimizer states after it, and on CUDA each step's peak allocated and
    reserved bytes), and writes them beside `prediction` (PARTS' keys) when step 2 ends. Its `measured` dict holds
    the numbers."""
    _, transformers = require_torch()
    class MemmathCallback(transformers.TrainerCallback):
        def __init__(self):
            self.measured: dict = {}
            self.step = 0

        def _cuda(self):
            import torch

            return torch.cuda.is_available()

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.measured["param_bytes"] = unique_bytes(model.parameters())
            if self._cuda():
                import torch

                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if self.step == 0:
                self.measured["grad_bytes"] = unique_bytes(p.grad for p in model.parameters())

        def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            if self.step == 0 and optimizer is not None:
                import torch

                states = StorageSet()
                for state_ in optimizer.state.values():
                    for value in state_.values():
                        if torch.is_tensor(value):
                            states.add(value)
                self.measured["optimizer_state_bytes"] = states.nbytes

        def on_step_end(self, args, state, control, **kwargs):
            self.step += 1
            if self._cuda():
                import torch

                torch.cuda.synchronize()
                self.measured[f"cuda_max_allocated_step{self.step}_bytes"] = torch.cuda.max_memory_allocated()
                self.measured[f"cuda_max_reserved_step{self.step}_bytes"] = torch.cuda.max_memory_reserved()
                torch.cuda.reset_peak_memory_stats()
            if self.step == 2:
                stream = out or sys.stderr
                for key, value in self.measured.items():
                    want = (prediction or {}).get(key)
                    stream.write(f"memmath: {key} measured {value:,} B"
                                 + (f", predicted {want:,} B\n" if want is not None else "\n"))

    return MemmathCallback()


# ---- the command line --------------------------------------------------------------------------------
def add_options(parser):
    """`memmath measure`'s options on its parser (the command line registers the command itself)."""
    parser.add_argument("model", metavar="MODEL", nargs="?",
                        help="a config.json, a folder holding one, or a repo id in the local Hugging Face cache")
    add_step_options(parser)
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    parser.add_argument("--snapshot", metavar="FILE", help="read a torch.cuda.memory._dump_snapshot pickle instead")
    parser.add_argument("--json", action="store_true", help="print one JSON object (integer bytes)")
    return parser


def add_step_options(parser):
    """The measured step's options: the method, the precision, the optimizer, the batch and the sequence."""
    group = parser.add_argument_group("the training step")
    group.add_argument("--precision", choices=tuple(PRECISIONS), default="bf16")
    group.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    group.add_argument("--method", choices=METHODS, default="full")
    group.add_argument("--frozen-layers", type=int, default=0, metavar="K", help="freeze: the first K blocks frozen")
    group.add_argument("--rank", type=int, default=8, metavar="R", help="lora: the rank (default 8)")
    group.add_argument("--targets", default="q,v", metavar="LIST", help="lora: q,k,v,o,gate,up,down (default q,v)")
    group.add_argument("--batch", type=int, default=1, metavar="B")
    group.add_argument("--seq", type=int, default=512, metavar="S")
    group.add_argument("--checkpointing", action="store_true")
    group.add_argument("--attention", choices=ATTENTION, default="sdpa")


def settings_from_args(args) -> TraceSettings:
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    return TraceSettings(precision=args.precision, optimizer=args.optimizer, method=args.method,
                         frozen_layers=args.frozen_layers, lora_rank=args.rank, lora_targets=targets,
                         batch_size=args.batch, seq_len=args.seq, checkpointing=args.checkpointing,
                         attention=args.attention)


def run(args, out, style=None) -> int:
    """`memmath measure`: writes the comparison (or a snapshot's parts) to `out`; returns the exit status."""
    try:
        return _run(args, out)
    except TorchMissing as error:
        raise ValueError(str(error)) from None


def _run(args, out) -> int:
    if args.snapshot:
        summary = read_snapshot(args.snapshot)
        out.write(json.dumps(summary.as_dict(), indent=2) + "\n" if args.json else summary.text())
        return 0
    if not args.model:
        raise validate.FieldError("model", "MODEL is required (a config.json, its folder or a cached repo id), or "
                                  "give --snapshot FILE")
    print(f"memmath: building the model and measuring two training steps on "
          f"{args.device or 'this machine (CUDA when torch sees a GPU, else the CPU)'} ...", file=sys.stderr, flush=True)
    comparison = measure_run(args.model, settings_from_args(args), device=args.device)
    out.write(json.dumps(comparison.as_dict(), indent=2) + "\n" if args.json else comparison.text())
    return 0
