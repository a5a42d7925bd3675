"""memmath on the command line: will this finetune (or this model at this context) fit on this GPU?

    memmath train MODEL [--method qlora --batch 4 --seq 2048 --gpu "RTX 4090" ...]
    memmath infer MODEL [--context 32768 --weights nf4 --kv bf16 --gpu "RTX 4090" ...]
    memmath models | memmath gpus
    memmath lessons [--static DIR]     (the workbook: needs pip install "memmath[workbook]")

In three parts, as accelerate's estimate-memory keeps a command: the options become a memmath.Run
(or a serving setup), the library plans it (plan_training, plan_serving), and this module prints
the plan, as tables or as one JSON object (--json). It decides nothing and holds no default of its
own: an option left out is left to the Run, whose resolved values the output shows. Errors from the
library name their field; FIELD_OPTIONS says which option sets it.
Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input (one line on stderr). The answer
is written once it is whole, so a reader that leaves early (`memmath models | head -1`) still gets
the status the command computed, and nothing reaches stdout on an error. A value echoed in a message
is cut to a short quotation (memmath.validate.describe).

Only the standard library is imported at the top; memmath's calculator is imported when a command
runs, so `--help` and a bad option answer without loading it, and marimo only for `memmath lessons`.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import shutil
import sys
import textwrap

PROG = "memmath"
COMMAND_CHOICES = "{train,infer,models,gpus,lessons}"
# The workbook extra (pyproject.toml): the modules `memmath lessons` needs, by import name.
WORKBOOK_MODULES = ("marimo", "altair", "pandas", "anywidget")
WORKBOOK_INSTALL = 'pip install "memmath[workbook]"'
METHODS = ("full", "freeze", "adapters", "lora", "qlora", "dpo")
DPO_BASES = ("full", "freeze", "adapters", "lora", "qlora")  # --method dpo: the policy's method (--dpo-base)
ATTENTION = ("sdpa", "eager")
UNIT_CHOICES = ("GB", "GiB", "MB", "MiB", "TB", "TiB")
WIDTH = 80
GPU_SOURCES = ("memory: what nvidia-smi reports (MiB x 2**20), less than the size on the box; "
               "bandwidth and dense bf16 TFLOP/s: NVIDIA's datasheets (T4 and V100: fp16, no bf16)")

# The library's field names, as the options that set them (errors name the field: validate.FieldError).
FIELD_OPTIONS = {
    "model": "MODEL", "batch_size": "--batch", "seq_len": "--seq", "context_len": "--context", "rank": "--rank",
    "targets": "--targets", "LoRA target": "--targets", "bottleneck": "--bottleneck",
    "trainable_layers": "--trainable-layers", "n_gpus": "--gpus", "zero_stage": "--zero-stage",
    "reserved_bytes": "--reserve", "precision": "--precision", "optimizer": "--optimizer",
    "attention": "--attention", "activations": "--activations", "dropout": "--no-dropout", "unit": "--unit",
    "gpu": "--gpu", "weights_format": "--weights", "kv_format": "--kv", "format": "--weights/--kv",
    "size": "--gpu-memory", "quant_type": "--quant-type", "layout": "--quant-layout",
    "double_quant": "--no-double-quant", "method": "--method", "max_gpus": "--max-gpus", "vision": "--vision",
    "LoRA dropout": "--lora-dropout", "grad_accum_steps": "--grad-accum",
    "tp": "--tp", "pp": "--pp", "cp": "--cp", "ep": "--ep", "sequence_parallel": "--sequence-parallel",
    "pp_schedule": "--pp-schedule", "micro_batches": "--micro-batches", "virtual_stages": "--virtual-stages",
    "padded": "--padded",
    "checkpointing": "--checkpointing",
    "packed": "--packed",
    "reference": "--reference", "beta": "--beta",
}


class BadInput(Exception):
    """Bad input from the command line: one line for stderr, exit status 2."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}" if option else message)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage block) and exits with status 2."""

    def error(self, message):
        message = re.sub(r"^argument ", "", message).replace(COMMAND_CHOICES, "COMMAND")
        self.exit(2, _shorten(f"{self.prog}: error: {message} (see {self.prog} --help)") + "\n")


def _quote(value) -> str:
    """A value as a message echoes it: a short quotation (at most 60 characters, memmath.validate.describe)."""
    from memmath import validate

    return validate.describe(value)


# A value too long to echo: a quoted one (what argparse's "invalid choice: %r" and the library's reprs give) or a
# run without spaces (argparse's "unrecognized arguments"), each over 300 characters: longer than any path or
# sentence a message names, short enough that a message stays readable.
_LONG_QUOTED = re.compile(r"""'([^'\n]{301,})'|"([^"\n]{301,})"|(?<![\w'"])([^\s'"]{301,})""")


def _shorten(message: str) -> str:
    """A message with every long value in it cut to a short quotation (what argparse and the library echo),
    and at most 1,000 characters in all."""
    def cut(match):
        quoted = match.group(1) if match.group(1) is not None else match.group(2)
        return _quote(quoted) if quoted is not None else match.group(3)[:40] + "..."
    message = _LONG_QUOTED.sub(cut, message)
    return message if len(message) <= 1000 else message[:997] + "..."


# ---- option types: each failure names the allowed values --------------------------------------
def _whole(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            allowed = f"from {low:,} up" if high is None else f"from {low:,} to {high:,}"
            raise argparse.ArgumentTypeError(f"must be a whole number {allowed}; got {_quote(text)}")
        return value
    parse.__name__ = "whole number"
    return parse


def _probability(text: str) -> float:
    """--lora-dropout: a probability from 0 up to (not including) 1, as memmath.LoRA(dropout=) takes it."""
    import math

    try:
        value = float(text.strip())
    except ValueError:
        value = None
    if value is None or math.isnan(value) or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a probability from 0 up to (not including) 1, such as 0.05; "
                                         f"got {_quote(text)}")
    return value


_probability.__name__ = "probability"


def _exact_bytes(text: str, too_large):
    """The size a text names, as an exact Fraction of bytes; None when it is not a size such as 24GiB.
    too_large(approx) is raised for a size past any card, before an exponent such as 1e999999999
    is expanded; a comma that does not group thousands (1,5GB) is refused, never read as 15GB."""
    from fractions import Fraction

    import memmath
    from memmath.units import _NUMBER, unit_name  # the grammar memmath.parse_bytes reads

    match = re.fullmatch(_NUMBER + r"\s*([a-z]+)", text.strip().lower())
    if not match:
        return None
    try:
        unit = memmath.UNITS[unit_name(match.group(2))]
    except ValueError:
        return None
    number = match.group(1).replace("_", "")
    if "," in number and not re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?(e[+-]?[0-9]+)?", number):
        raise argparse.ArgumentTypeError(f"{_quote(text)}: a comma groups thousands (1,343MiB); for a fraction write "
                                         "a point (1.5GB)")
    number = number.replace(",", "")
    mantissa, _, exponent = number.partition("e")
    if exponent and abs(int(exponent)) > 64 and Fraction(mantissa) != 0:
        if int(exponent) > 0:
            raise too_large(float(mantissa) * 10.0 ** min(int(exponent), 308) * unit)
        return Fraction(1, 10**65)  # far below a byte: refused as a fraction of one
    return Fraction(0) if exponent and Fraction(mantissa) == 0 else Fraction(number) * unit


def _size(low: int = 0):
    """Bytes from '24GiB', '1.5 GB', '1343MiB' (or '0'): a whole number of bytes from `low` to the
    largest card memmath.GPU holds (2**60 bytes), never rounded: a fraction of a byte is refused."""
    def parse(text: str) -> int:
        import memmath
        from memmath.gpus import MAX_GPU_BYTES

        allowed = (f"a size from {'1 B' if low else '0'} to {MAX_GPU_BYTES // 2**50:,} PiB ({MAX_GPU_BYTES:,} bytes), "
                   "such as 24GiB, 1.5GB or 1343MiB")

        def out_of_range(approx):
            return argparse.ArgumentTypeError(f"must be {allowed}; got {_quote(text)}, " + (
                _bytes_text(approx) if not isinstance(approx, float) else f"about {approx:.3g} bytes"
                if approx < float("inf") else "more than 1e+308 bytes"))
        if not text.strip():
            raise argparse.ArgumentTypeError(f"is empty; give {allowed}")
        exact = 0 if text.strip() in ("0", "0.0") else _exact_bytes(text, out_of_range)
        if exact is None:
            raise argparse.ArgumentTypeError(f"must be {allowed} (units {', '.join(memmath.UNITS)}); got {_quote(text)}")
        if exact > MAX_GPU_BYTES or exact < low:
            raise out_of_range(exact)
        if exact.denominator != 1:
            nearest = round(exact)
            raise argparse.ArgumentTypeError(f"{_quote(text)} is {_bytes_text(exact)}, not a whole number of bytes; "
                                             f"give whole bytes, such as {nearest}B")
        return int(exact)
    parse.__name__ = "size"
    return parse


def _bytes_text(exact) -> str:
    """An exact size in bytes as text: '1,363,148.8 bytes' (every digit), 'about 1e+39 bytes' when huge,
    'less than 1e-30 bytes' when tiny."""
    from decimal import Decimal, localcontext
    from fractions import Fraction

    exact = Fraction(exact)
    if exact > 10**24:
        return f"about {float(exact):.3g} bytes"
    if 0 < exact < Fraction(1, 10**30):
        return "less than 1e-30 bytes"
    with localcontext() as context:
        context.prec = 60
        value = (Decimal(exact.numerator) / Decimal(exact.denominator)).normalize()
    return f"{value:,f} bytes"


def _choice(choices, what="one of"):
    lower = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        key = text.strip().lower()
        if key not in lower:
            raise argparse.ArgumentTypeError(f"must be {what} {', '.join(choices)}; got {_quote(text)}")
        return lower[key]
    parse.__name__ = "choice"
    return parse


def _gpu_name(text: str) -> str:
    """--gpu: a card's name; an empty or blank name is refused here (it would read as no GPU)."""
    if not text.strip():
        import memmath

        raise argparse.ArgumentTypeError(f"is empty; give a card from `memmath gpus` ({', '.join(memmath.GPUS)}) "
                                         "or --gpu-memory 24GiB")
    return text


def _targets(text: str) -> tuple:
    import memmath

    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    allowed = ", ".join(memmath.LORA_TARGETS)
    if names in (("all",), ("all-linear",)):
        return ("all",)  # LoRA's "all": what peft's all-linear adapts
    if not names or any(name not in memmath.LORA_TARGETS and name not in memmath.LORA_GROUPS for name in names):
        raise argparse.ArgumentTypeError(f"must be matrices from {allowed} separated by commas (such as q,v), "
                                         f"or all, or attention; got {_quote(text)}")
    return tuple(dict.fromkeys(n for name in names for n in memmath.LORA_GROUPS.get(name, (name,))))


# ---- the parser: an option left out is None, left to the library's defaults ----------------------
def build_parser() -> argparse.ArgumentParser:
    import memmath

    parser = _Parser(prog=PROG, description="The memory of training and serving a model, exact to the byte: "
                     "will it fit on this GPU, and what to change if not. Never uses the network.",
                     epilog="Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print memmath's version and exit")
    sub = parser.add_subparsers(dest="command", metavar=COMMAND_CHOICES)
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true",
                        help="print one JSON object (every size in integer bytes) instead of tables")
    reserve_mib = memmath.CUDA_CONTEXT_BYTES // 2**20

    def gpu_options(p):
        group = p.add_argument_group("the GPU (gives a verdict, and exit status 1 when it does not fit)")
        exclusive = group.add_mutually_exclusive_group()
        exclusive.add_argument("--gpu", metavar="NAME", type=_gpu_name, help="a card from `memmath gpus` (case "
                               "and spaces forgiven: rtx4090, a100-80gb, h100)")
        exclusive.add_argument("--gpu-memory", metavar="SIZE", type=_size(low=1),
                               help="any card, by its memory as the driver reports it (24GiB, 24564MiB), in whole "
                               "bytes")
        group.add_argument("--reserve", metavar="SIZE", type=_size(), help="memory the CUDA context takes before "
                           f"any tensor (default {reserve_mib}MiB, measured on a V100 by Hugging Face; 0 for none)")
        group.add_argument("--unit", type=_choice(UNIT_CHOICES), default="GB", metavar="UNIT",
                           help="unit for display: GB (10**9 B, default) or GiB (2**30 B), also MB, MiB, TB, TiB")

    model_help = ("a preset (`memmath models`), a config.json, a folder holding one, or a Hub repo id "
                  "(owner/name) found in the local Hugging Face cache")
    epilog = "Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input."
    train = sub.add_parser("train", parents=[common], help="memory of one training step, and the fit", epilog=epilog,
                           description="The memory of one training step, part by part, its peak, and "
                           "(with --gpu) whether it fits and which changes make it fit.")
    train.add_argument("model", metavar="MODEL", help=model_help)
    m = train.add_argument_group("the method")
    m.add_argument("--method", type=_choice(METHODS), default="full", metavar="NAME",
                   help="full (default), freeze, adapters, lora, qlora, or dpo (preference training: --dpo-base, "
                   "--reference)")
    m.add_argument("--rank", type=_whole(1), metavar="R", help="LoRA/QLoRA rank (default 8)")
    m.add_argument("--targets", type=_targets, metavar="LIST", help="LoRA/QLoRA matrices, comma-separated from "
                   f"{','.join(memmath.LORA_TARGETS)}, or all, or attention (q,k,v,o) (default q,v)")
    m.add_argument("--lora-dropout", type=_probability, metavar="P",
                   help="LoRA/QLoRA: peft's lora_dropout on the adapters' input (default 0, peft's; recipes use "
                   "0.05-0.1): each adapted matrix then keeps a dropout mask and a dropped copy of its input")
    m.add_argument("--quant-type", type=_choice(("nf4", "fp4", "int8")), metavar="TYPE",
                   help="qlora: the base's format, nf4 (default) or fp4 (bitsandbytes Linear4bit), or int8 "
                   "(Linear8bitLt, LLM.int8)")
    m.add_argument("--no-double-quant", action="store_true", default=None,
                   help="qlora with nf4/fp4: fp32 absmax constants, without QLoRA's double quantization")
    m.add_argument("--quant-layout", type=_choice(("paper", "bitsandbytes")), metavar="LAYOUT",
                   help="qlora: count the constants as the QLoRA paper does (default) or as bitsandbytes stores "
                   "them (adds each matrix's code maps)")
    m.add_argument("--trainable-layers", type=_whole(0), metavar="K",
                   help="freeze: how many of the last blocks train (required with --method freeze)")
    m.add_argument("--bottleneck", type=_whole(1), metavar="M", help="adapters: bottleneck width (default 64)")
    m.add_argument("--dpo-base", type=_choice(DPO_BASES), metavar="NAME",
                   help="dpo: the policy's method, full, freeze, adapters, lora (default) or qlora, with its own "
                   "options (--rank, --targets, ...); chosen and rejected sequences double --batch")
    m.add_argument("--reference", type=_choice(("copy", "adapters_off", "precomputed")), metavar="KIND",
                   help="dpo: the reference log-probs from a frozen copy of the model (copy), the "
                   "policy with its adapters disabled (adapters_off: lora/qlora), or precomputed; default as TRL: "
                   "adapters_off for lora/qlora, else copy")
    m.add_argument("--beta", type=float, metavar="B", help="dpo: the loss's beta (default 0.1; no byte depends on it)")
    m.add_argument("--vision", type=_choice(("frozen", "projector", "trains")), metavar="PART",
                   help="a vision-language model (gemma3, llava, mistral3, qwen2_vl, qwen2_5_vl): frozen (the vision "
                   "tower and projector stay frozen: the language model alone trains), projector (the projector "
                   "trains too) or trains (both train too); default trains for full, frozen for the others")
    s = train.add_argument_group("the training step (each default is memmath.Run's, said in the output)")
    s.add_argument("--precision", type=_choice(list(memmath.RECIPES)), metavar="RECIPE",
                   help=f"{', '.join(memmath.RECIPES)} (default bf16: pure bf16, the article's 8 B/param with Adam)")
    s.add_argument("--optimizer", type=_choice(list(memmath.OPTIMIZERS)), metavar="NAME",
                   help=f"{', '.join(memmath.OPTIMIZERS)} (default adamw)")
    s.add_argument("--batch", type=_whole(1), metavar="B", help="micro-batch per GPU (default 1)")
    s.add_argument("--grad-accum", type=_whole(1), metavar="K",
                   help="micro-batches per optimizer step, gradients accumulated (default 1); the effective batch "
                   "is B x K")
    s.add_argument("--seq", type=_whole(1), metavar="S",
                   help=f"tokens per sequence (default {memmath.DEFAULT_SEQ_LEN:,}, said so in the output)")
    s.add_argument("--checkpointing", action="store_true", default=None, help="gradient checkpointing on")
    s.add_argument("--attention", type=_choice(ATTENTION), metavar="KIND",
                   help="sdpa (fused) or eager (keeps the s x s scores); default: what transformers picks")
    s.add_argument("--no-dropout", action="store_true", default=None,
                   help="no dropout masks kept (default: the config's dropout probability)")
    s.add_argument("--activations", type=_choice(("auto", "transformers", "textbook")), metavar="MODEL",
                   help="activation model: transformers (what the PyTorch models keep; auto, the default, picks "
                   "it where it applies) or textbook (Korthikanti et al. 2022)")
    s.add_argument("--gpus", type=_whole(1), metavar="N", help="data-parallel GPUs (default 1)")
    s.add_argument("--zero-stage", type=_choice(("0", "1", "2", "3")), metavar="S",
                   help="ZeRO stage 0-3 across the --gpus (3 = FSDP full sharding; default 0)")
    s.add_argument("--tp", type=_whole(1), metavar="T", help="tensor-parallel degree: heads and MLP width split "
                   "across T GPUs (default 1); --gpus is the total, data parallel = gpus / (tp x pp x cp)")
    s.add_argument("--pp", type=_whole(1), metavar="P", help="pipeline-parallel stages (default 1)")
    s.add_argument("--cp", type=_whole(1), metavar="C", help="context-parallel degree: the sequence split (default 1)")
    s.add_argument("--ep", type=_whole(1), metavar="E", help="expert-parallel degree: routed experts split (default 1)")
    s.add_argument("--sequence-parallel", action="store_true", default=None,
                   help="with --tp: norms and dropout on seq / tp tokens")
    s.add_argument("--pp-schedule", type=str, metavar="S",
                   help="pipeline schedule: 1f1b (default), gpipe or interleaved (interleaved 1F1B)")
    s.add_argument("--micro-batches", type=_whole(1), metavar="M", help="micro-batches per pipeline step (with --pp)")
    s.add_argument("--virtual-stages", type=_whole(1), metavar="V",
                   help="with --pp-schedule interleaved: pipeline stages per GPU (2 or more)")
    s.add_argument("--padded", action="store_true", default=None,
                   help="a right-padded batch: an attention mask with zeros, which every attention call then gets")
    s.add_argument("--packed", action="store_true", default=None,
                   help="sequences packed into each row with their own position ids (no padding)")
    s.add_argument("--plan-layout", action="store_true", default=None,
                   help="with --gpu: the fewest GPUs and the layout (data x tensor x pipeline) that fit the run")
    s.add_argument("--max-gpus", type=_whole(1), metavar="N", help="how many GPUs the suggested changes may use "
                   f"(default {memmath.DEFAULT_MAX_GPUS})")
    gpu_options(train)

    infer = sub.add_parser("infer", parents=[common], help="memory to serve a model at a context length", epilog=epilog,
                           description="The memory to serve one replica: weights in the serving format, "
                           "the KV cache, the prefill working set; with --gpu, whether it fits.")
    infer.add_argument("model", metavar="MODEL", help=model_help)
    i = infer.add_argument_group("the serving setup (each default is memmath.SERVING_DEFAULTS')")
    defaults = memmath.SERVING_DEFAULTS
    i.add_argument("--context", type=_whole(1), metavar="N", help="tokens per sequence, prompt and output (default "
                   f"{defaults['context_len']:,}, said so in the output)")
    i.add_argument("--batch", type=_whole(1), metavar="B", help=f"sequences at once (default {defaults['batch_size']})")
    i.add_argument("--weights", type=_choice(list(memmath.FORMATS)), metavar="FORMAT",
                   help=f"serving format of the weights: {', '.join(memmath.FORMATS)} (default "
                   f"{defaults['weights_format']})")
    i.add_argument("--kv", type=_choice(list(memmath.FORMATS)), metavar="FORMAT",
                   help=f"format of the KV cache (default {defaults['kv_format']})")
    i.add_argument("--attention", type=_choice(ATTENTION), metavar="KIND",
                   help=f"sdpa or eager (default {defaults['attention']})")
    gpu_options(infer)

    sub.add_parser("models", parents=[common], help="the presets and where their shapes come from",
                   description="The model presets, with their parameter counts and sources.")
    sub.add_parser("gpus", parents=[common], help="the GPU catalog and its sources",
                   description="The GPUs --gpu knows, with their memory as the driver reports it.")
    lessons = sub.add_parser(
        "lessons", help="open the workbook (marimo run), or build it as a static site",
        description="Open the workbook's lessons, as installed with the package, in your browser (marimo run, on "
        "127.0.0.1 only, no token), or build them as a static site that works offline. Needs the workbook extra: "
        f"{WORKBOOK_INSTALL}.",
        epilog="Exit status: marimo's own while it runs; 0 built; 2 the workbook extra is missing or the build "
        "failed (one line on stderr, then the cells' errors of a lesson that failed to export). To serve a class, run marimo yourself on the folder --path prints, with "
        "--token (README, 'On a fresh machine').")
    lessons.add_argument("--static", metavar="DIR", help="build the static site into DIR (new, empty or an earlier "
                         "build) instead of opening the workbook; serve it with python -m http.server -d DIR")
    lessons.add_argument("--port", type=_whole(1, 65535), metavar="PORT", help="marimo run's port (default: marimo's, 2718)")
    lessons.add_argument("--headless", action="store_true", help="do not open a browser")
    lessons.add_argument("--path", action="store_true",
                         help="print the folder that holds the installed lessons and exit (for marimo edit)")
    return parser


class _Version(argparse.Action):
    """--version, looked up only when asked for (importlib.metadata costs some 20 ms to import)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:  # to stdout, as --help is: `memmath --version | cut ...`
            sys.stdout.write(f"memmath {_version()}\n")
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        parser.exit(0)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("memmath")
    except Exception:  # not installed (run from a checkout)
        return "unknown"


# ---- arguments -> Run (or a serving setup) ---------------------------------------------------
def _given(**options) -> dict:
    """The options that were given (not None): what the library is told; the rest is its defaults."""
    return {name: value for name, value in options.items() if value is not None}


def _build_method(args, shape):
    import memmath

    dpo = {"--dpo-base": args.dpo_base, "--reference": args.reference, "--beta": args.beta}
    if args.method != "dpo":
        for option, value in dpo.items():
            if value is not None:
                raise BadInput(option, f"applies to --method dpo, not {args.method}")
    else:  # preference training (memmath/preference.py): the policy's method, then DPO around it
        try:
            base = _build_method(argparse.Namespace(**{**vars(args), "method": args.dpo_base or "lora",
                                                       "dpo_base": None, "reference": None, "beta": None}), shape)
        except BadInput as error:  # the policy's options: they apply to a --dpo-base, not to --method dpo
            raise BadInput("", str(error).replace("--method", "--dpo-base")) from None
        return memmath.DPO(base=base, **_given(reference=args.reference, beta=args.beta))

    given = {"--rank": args.rank, "--targets": args.targets, "--trainable-layers": args.trainable_layers,
             "--bottleneck": args.bottleneck, "--quant-type": args.quant_type, "--no-double-quant": args.no_double_quant,
             "--quant-layout": args.quant_layout, "--lora-dropout": args.lora_dropout}
    applies = {"--rank": ("lora", "qlora"), "--targets": ("lora", "qlora"), "--trainable-layers": ("freeze",),
               "--lora-dropout": ("lora", "qlora"),
               "--bottleneck": ("adapters",), "--quant-type": ("qlora",), "--no-double-quant": ("qlora",),
               "--quant-layout": ("qlora",)}
    for option, value in given.items():
        if value is not None and args.method not in applies[option]:
            raise BadInput(option, f"applies to --method {' or '.join(applies[option])}, not {args.method}")
    if args.method == "full":
        return memmath.Full()
    if args.method == "freeze":
        if args.trainable_layers is None:
            raise BadInput("--trainable-layers", f"--method freeze needs it: how many of the last blocks train, "
                           f"from 0 to {shape.n_layers}")
        if args.trainable_layers > shape.n_layers:
            raise BadInput("--trainable-layers", f"must be from 0 to {shape.n_layers} (the model's blocks); "
                           f"got {args.trainable_layers}")
        return memmath.Freeze(trainable_layers=args.trainable_layers)
    if args.method == "adapters":
        return memmath.Adapters(**_given(bottleneck=args.bottleneck))
    lora = _given(rank=args.rank, targets=args.targets, dropout=args.lora_dropout)
    if args.method == "lora":
        return memmath.LoRA(**lora)
    if args.no_double_quant and args.quant_type == "int8":
        raise BadInput("--no-double-quant", "applies to --quant-type nf4 or fp4; int8 (Linear8bitLt) keeps one fp32 "
                       "scale per row and no double quantization")
    return memmath.QLoRA(**lora, **_given(quant_type=args.quant_type, layout=args.quant_layout,
                                          double_quant=False if args.no_double_quant else None))


def _train_run(args):
    import memmath

    from memmath.sources import resolve_source

    shape, source = resolve_source(args.model)
    method = _build_method(args, shape)
    if args.vision is not None:  # the method's vision= (memmath/multimodal.py); a text model refuses it by name
        method = dataclasses.replace(method, vision=args.vision)
    run = memmath.Run(shape, method=method, **_given(
        precision=args.precision, optimizer=args.optimizer, batch_size=args.batch, seq_len=args.seq,
        grad_accum_steps=args.grad_accum, checkpointing=args.checkpointing, attention=args.attention,
        dropout=False if args.no_dropout else None,
        activations=None if args.activations in (None, "auto") else args.activations,
        n_gpus=args.gpus, zero_stage=None if args.zero_stage is None else int(args.zero_stage),
        tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, sequence_parallel=args.sequence_parallel,
        pp_schedule=args.pp_schedule, micro_batches=args.micro_batches, virtual_stages=args.virtual_stages,
        padded=args.padded, packed=args.packed))
    return run, source


def _gpu_and_reserve(args):
    import memmath

    gpu = resolve_gpu(args)
    reserve = memmath.CUDA_CONTEXT_BYTES if args.reserve is None else args.reserve
    if gpu is not None and reserve >= gpu.memory_bytes:
        raise BadInput("--reserve", f"must be less than the GPU's memory ({gpu.name}: {gpu.memory_bytes:,} bytes); "
                       f"got {reserve:,} bytes")
    return gpu, reserve


def _squash(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def resolve_gpu(args):
    """The GPU from --gpu (catalog, forgiving case and spacing, or a unique part of a name) or --gpu-memory."""
    import memmath

    if getattr(args, "gpu_memory", None) is not None:
        if args.gpu_memory <= 0:
            raise BadInput("--gpu-memory", "must be a size above 0, such as 24GiB")
        label = memmath.format_bytes(args.gpu_memory, "GiB")
        return memmath.GPU(f"{label} GPU", args.gpu_memory, 0, 0.0, "custom", label, "given by --gpu-memory")
    if getattr(args, "gpu", None) is None:
        return None
    if not args.gpu.strip():  # an empty --gpu "" (an unset variable in a script) must not read as "no GPU"
        _gpu_name(args.gpu)
    wanted = _squash(args.gpu)
    exact = [g for g in memmath.GPUS.values() if _squash(g.name) == wanted]
    partial = [g for g in memmath.GPUS.values() if wanted and wanted in _squash(g.name)]
    if exact or len(partial) == 1:
        return (exact or partial)[0]
    if len(partial) > 1:
        raise BadInput("--gpu", f"{_quote(args.gpu)} could be {', '.join(g.name for g in partial)}; say which")
    raise BadInput("--gpu", f"must be one of {', '.join(memmath.GPUS)} (or give --gpu-memory 24GiB); got "
                   f"{_quote(args.gpu)}")


# ---- train: plan, then print -------------------------------------------------------------------
def run_train(args, out, style) -> int:
    import memmath

    run, source = _train_run(args)
    gpu, reserve = _gpu_and_reserve(args)
    if args.plan_layout:
        return _run_plan_layout(args, out, style, run, gpu, reserve)
    plan = memmath.plan_training(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    status = 0 if plan.fits is not False else 1
    if args.json:
        out.write(json.dumps(_train_json(args, run, source, plan, status), indent=2) + "\n")
    else:
        _write_train(out.write, style, args, run, source, plan)
    return status


def _run_plan_layout(args, out, style, run, gpu, reserve) -> int:
    """--plan-layout: the fewest GPUs and their layout that fit the run (memmath.planner.plan_layout)."""
    from memmath.planner import plan_layout

    if gpu is None:
        raise BadInput("--plan-layout", "needs a card: add --gpu (or --gpu-memory)")
    plan = plan_layout(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    if args.json:
        worst = plan.worst
        out.write(json.dumps({
            "command": "train --plan-layout", "run": repr(run), "gpu": _gpu_json(gpu), "fits": plan.fits,
            "layouts_tried": plan.tried, "usable_bytes": plan.usable_bytes,
            "layout": None if not plan.fits else {"n_gpus": plan.layout.n_gpus, "dp": plan.layout.dp,
                                                  "tp": plan.layout.tp, "pp": plan.layout.pp,
                                                  "micro_batches": plan.run.micro_batches},
            "worst_rank": None if not plan.fits else {
                "rank": worst.rank, "parts": {k: int(v) for k, v in worst.memory.parts().items()},
                "buffers": worst.buffers, "total": worst.total},
            "required": None if not plan.fits else {"bytes": plan.need.bytes, "basis": _basis(plan.need),
                                                    "reason": plan.need.reason},
            "trade_offs": list(plan.trade_offs), "unit": args.unit}, indent=2) + "\n")
        return 0 if plan.fits else 1
    w = out.write
    if not plan.fits:
        w(f"No layout up to {args.max_gpus or 1024} GPUs fits {run.model.name} on the {gpu.name} "
          f"({plan.tried} tried).\n")
        return 1
    lay = plan.layout
    w(style.bold(f"{run.model.name} on {gpu.name}: {lay.n_gpus} GPUs, {lay.describe()}") + "\n")
    w(f"  the rank that needs the most (rank {plan.worst.rank}, pipeline stage {plan.worst.coordinates['pp']}):\n")
    for part, value in plan.worst.memory.parts().items():
        w(_table_row(memmath_label(part), int(value), args.unit) + "\n")
    for label, value in plan.worst.buffers.items():
        w(_table_row(f"{label} (derived)"[:36], int(value), args.unit) + "\n")
    w(_table_row("Sum of the parts and buffers", plan.worst.total, args.unit) + "\n")
    need = plan.need
    if need.basis == "peak":
        w(_table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", need.bytes, args.unit) + "\n")
    w(_table_row(f"The card must hold ({need.short})", need.bytes, args.unit)
      + "\n")
    w(_table_row("Usable on the card", plan.usable_bytes, args.unit) + "\n")
    for line in plan.trade_offs:
        w("\n".join(_wrap(line, "  ")) + "\n")
    return 0


def memmath_label(part: str) -> str:
    import memmath

    return memmath.PART_LABELS[part]


def _basis(requirement) -> str:
    """The decision's basis as the JSON names it: peak, or sum_of_parts."""
    return requirement.basis.replace(" ", "_")


def _defaults_said(run, args) -> str:
    """What the run took from the model because the command line did not set it, in words ("" if nothing)."""
    taken = []
    if "attention" in run.defaulted:
        taken.append(f"{run.attention} attention")
    if "dropout" in run.defaulted:
        probability = run.model.dropout_p
        taken.append(("dropout" if run.dropout else "no dropout")
                     + (f" (its config's probability is {probability:g})" if probability is not None else ""))
    said = [f"From the model, as transformers trains it: {' and '.join(taken)}; set --attention or --no-dropout "
            "to choose."] if taken else []
    if "activations" in run.defaulted:
        said.append("Activations: the exact model, what PyTorch keeps tensor by tensor; --activations textbook "
                    "gives Korthikanti et al.'s formula." if run.activations == "transformers" else
                    "Activations: the textbook model, since the exact one does not apply (the note below).")
    return " ".join(said)


def _train_json(args, run, source, plan, status) -> dict:
    from memmath import parallel

    memory, need = plan.memory, plan.requirement
    peak = need.peak
    shape = run.model
    return {
        "command": "train",
        "model": {**source, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(memory.total_params), "trainable_params": int(memory.trainable_params),
                  "adapter_params": int(memory.adapter_params)},
        "run": repr(run),
        "settings": {**{k: _jsonable(v) for k, v in run.settings().items() if k != "method"},
                     "method": _method_json(run.method), "seq_len_default": args.seq is None,
                     "effective_batch": int(run.effective_batch)},
        "assumptions": {"recipe": memory.recipe.description, "optimizer": memory.optimizer.description,
                        "method": run.method.describe(), "activations": run.activations, "attention": run.attention,
                        "seq_len": (f"{run.seq_len} tokens, the default (--seq not given)" if args.seq is None
                                    else f"{run.seq_len} tokens (--seq)"),
                        "resolved_from_the_model": sorted(run.defaulted), "summary": memory.assumptions,
                        "reserved": _reserve_json(args, plan.reserved_bytes),
                        "activations_model": ACTIVATION_DESCRIPTIONS[run.activations],
                        "notes": [str(n) for n in _notes(plan)]},
        "parts": {k: int(v) for k, v in memory.parts().items()},
        "sum_of_parts": int(memory.total),
        # a split run: the communication buffers (derived) of the rank the requirement judges
        "buffers": {k: int(v) for k, v in parallel.buffers(need.memory.run).items()}
        if parallel.is_parallel(run) else {},
        "peak": None if peak is None else {"total": int(peak.total), "phase": peak.phase,
                                           **{k: int(v) for k, v in peak.parts().items()}},
        "required": {"bytes": need.bytes, "basis": _basis(need), "why_not_peak": need.reason or None,
                     "rank": need.rank,  # the GPU whose parts and step these are (a split run's worst rank)
                     "reserved_bytes": plan.reserved_bytes, "with_reserve_bytes": plan.needed_bytes},
        "gpu": _gpu_json(plan.gpu), "verdict": _verdict_json(plan.fit),
        "cannot_run": None if plan.cannot_run is None else plan.cannot_run.message,
        "cannot_run_instead": _instead_json(plan),
        "changes": None if plan.fit is None or plan.fits else [_change_json(s, plan) for s in plan.changes],
        "path_to_fit": None if not plan.path else [_change_json(s, plan) for s in plan.path],
        "unit": args.unit, "exit_status": status,
    }


def _instead(plan):
    """(the recipe the card would run instead, its Requirement, its Fit) where the card cannot run the run's recipe
    (pure bf16 on a T4 or V100: plan.cannot_run), judged as the verdict is; else None."""
    import memmath

    if plan.cannot_run is None or plan.fit is None:
        return None
    need = memmath.requirement(plan.run.replace(precision=plan.cannot_run.instead))
    fit = memmath.check_fit(need.bytes, plan.gpu, reserved_bytes=plan.reserved_bytes, margin=memmath.FIT_MARGIN)
    return plan.cannot_run.instead, need, fit


def _instead_json(plan):
    instead = _instead(plan)
    if instead is None:
        return None
    precision, need, fit = instead
    return {"precision": precision, "option": f"--precision {precision}", "required_bytes": need.bytes,
            "basis": _basis(need), "with_reserve_bytes": need.bytes + plan.reserved_bytes, "fits": fit.fits,
            "headroom_bytes": int(fit.headroom_bytes)}


def _change_json(suggestion, plan) -> dict:
    fit = _judged(suggestion, plan)
    return {"change": suggestion.change, "required_bytes": suggestion.total, "basis": suggestion.basis.replace(" ", "_"),
            "saved_bytes": suggestion.saved, "fits": suggestion.fits, "headroom_bytes": int(fit.headroom_bytes),
            "cost": suggestion.cost, "run": repr(suggestion.run),
            "settings": {k: (_method_json(v) if k == "method" else _jsonable(v))
                         for k, v in suggestion.run.settings().items()}}


def _judged(suggestion, plan):
    import memmath

    return memmath.check_fit(suggestion.total, plan.gpu, reserved_bytes=plan.reserved_bytes, margin=memmath.FIT_MARGIN)


def _notes(plan) -> list:
    """The run's notes, and the peak's but the one about the CUDA context when a reserve stands for it."""
    peak = plan.requirement.peak
    peak_notes = [] if peak is None else [n for n in peak.notes
                                          if not (plan.reserved_bytes and n.kind == "cuda_context_excluded")]
    return [*plan.memory.notes, *peak_notes]


def _write_train(w, style, args, run, source, plan):
    import memmath

    memory, need, shape, unit = plan.memory, plan.requirement, run.model, args.unit
    sharding = (f"; {run.n_gpus} GPU{'s' if run.n_gpus > 1 else ''}, ZeRO stage {run.zero_stage}"
                if run.n_gpus > 1 or run.zero_stage else "")
    if run.tp > 1 or run.pp > 1 or run.cp > 1 or run.ep > 1:  # the layout (memmath/parallel.py)
        from memmath.parallel import layout

        sharding += (f" ({layout(run).describe()}" + (", sequence parallel" if run.sequence_parallel else "")
                     + (f", {run.pp_schedule} with {run.micro_batches} micro-batches" if run.pp > 1 else "")
                     + (f" and {run.virtual_stages} stages per GPU" if run.virtual_stages > 1 else "") + ")")
    lines = [f"{shape.name} ({_source_text(source)}): {memory.total_params:,} parameters, {shape.n_layers} layers.",
             f"Method: {run.method.describe()}; {memory.trainable_params:,} trainable.",
             f"Recipe: {memory.recipe.description} {memory.optimizer.description}",
             f"Step: batch {run.batch_size} x {run.seq_len:,} tokens"
             + (" (the default length; set --seq)" if args.seq is None else "")
             + (", right-padded (an attention mask with zeros)" if run.padded else "")
             + (", packed sequences (their own position ids)" if run.packed else "")
             + (f", {run.grad_accum_steps} micro-batches per optimizer step (effective batch "
                f"{run.effective_batch:,})" if run.grad_accum_steps > 1 else "")
             + f", {run.attention} attention, dropout {'on' if run.dropout else 'off'}, checkpointing "
             f"{'on' if run.checkpointing else 'off'}, activations: {run.activations} model{sharding}."]
    w(style.bold("\n".join(_wrap(lines[0]))) + "\n")
    for line in lines[1:]:
        w("\n".join(_wrap(line)) + "\n")
    w("\n" + style.bold(f"  {'per GPU':<36}{'bytes':>22} {unit:>12}") + "\n")
    for part, value in memory.parts().items():
        w(_table_row(memmath.PART_LABELS[part], int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(_table_row("Sum of the parts", int(memory.total), unit) + "\n")
    if need.basis == "upper bound":  # no peak model: transients at their largest and the engine's buffers
        w(_table_row("Bound: transients and buffers", need.above_parts, unit) + "\n")
    elif need.peak is None and need.bytes > int(memory.total):  # a parallel rank's communication buffers (derived)
        w(_table_row("Communication buffers (derived)", need.bytes - int(memory.total), unit) + "\n")
    if need.peak is not None:
        w(_table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", int(need.peak.total), unit) + "\n")
    w(_table_row("CUDA context reserved" + (" (default)" if args.reserve is None else ""), plan.reserved_bytes,
                 unit) + "\n")
    which = need.short
    w(style.bold(_table_row(f"Needed: {which} + reserve", plan.needed_bytes, unit)) + "\n")
    notes = [f"The card must hold {need.note}."]
    if _defaults_said(run, args):
        notes.append(_defaults_said(run, args))
    if args.reserve is None:
        notes.append(f"Reserved: {memmath.CUDA_CONTEXT_SOURCE}; set --reserve.")
    notes += [_sentence(str(n)) for n in _notes(plan)]
    w("\n")
    for note in notes:
        w(style.dim("\n".join(_wrap(note))) + "\n")
    if plan.fit is not None:
        _write_verdict(w, style, plan.fit, need.bytes, plan.reserved_bytes, unit,
                       "peak" if need.basis == "peak" else need.words.removeprefix("the "), plan.cannot_run)
        instead = _instead(plan)
        if instead is not None:  # the run the card would train instead, judged as the verdict is
            precision, other, fit = instead
            verdict = (f"fits, with {_size_text(fit.headroom_bytes, unit)} to spare" if fit.fits else
                       f"does not fit either: short by {_size_text(-fit.headroom_bytes, unit)}"
                       if fit.headroom_bytes < 0 else "does not fit either: less than 5% to spare")
            w("\n".join(_wrap(f"with --precision {precision} instead: needs "
                              f"{_size_text(other.bytes + plan.reserved_bytes, unit)} (the "
                              f"{'peak' if other.basis == 'peak' else other.words.removeprefix('the ')} "
                              f"{_size_text(other.bytes, unit)} + {_size_text(plan.reserved_bytes, unit)} reserved): "
                              f"{verdict}", "  ")) + "\n")
        if not plan.fits:
            rows = [(s.change, s.total, _judged(s, plan).headroom_bytes, s.cost) for s in plan.changes if s.fits]
            path = [(s.change, s.total, _judged(s, plan).headroom_bytes, s.cost) for s in plan.path]
            _write_changes(w, style, rows, path, path and plan.path[-1].fits, unit, plan.reserved_bytes)
            if instead is not None and (rows or path):
                w(style.dim("\n".join(_wrap(f"These changes keep the '{plan.cannot_run.precision}' recipe, which the "
                                            f"{plan.gpu.name} cannot run: add --precision {instead[0]} to plan the "
                                            "changes it can."))) + "\n")


# ---- infer: plan, then print -------------------------------------------------------------------
def run_infer(args, out, style) -> int:
    import memmath

    from memmath.sources import resolve_source

    shape, source = resolve_source(args.model)
    gpu, reserve = _gpu_and_reserve(args)
    given = _given(weights_format=args.weights, kv_format=args.kv, batch_size=args.batch, context_len=args.context,
                   attention=args.attention)
    plan = memmath.plan_serving(shape, gpu, reserved_bytes=reserve, **given)
    status = 0 if plan.fit is None or plan.fit.fits else 1
    if args.json:
        out.write(json.dumps(_infer_json(args, shape, source, plan, status), indent=2) + "\n")
    else:
        _write_infer(out.write, style, args, shape, source, plan)
    return status


WORKING_SET_NOTE = ("the peak of one prefill over the whole context (transformers' implementations; serving engines "
                    "that fuse or chunk keep less)")


def _infer_json(args, shape, source, plan, status) -> dict:
    memory, settings, total = plan.memory, plan.settings, int(plan.memory.total)
    return {
        "command": "infer",
        "model": {**source, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(shape.n_params)},
        "settings": {**settings, "context_len_default": args.context is None},
        "assumptions": {"context_len": (f"{settings['context_len']} tokens, the default (--context not given)"
                                        if args.context is None else f"{settings['context_len']} tokens (--context)"),
                        "attention": settings["attention"], "working_set": WORKING_SET_NOTE,
                        "reserved": _reserve_json(args, plan.reserved_bytes), "notes": [str(n) for n in plan.notes]},
        "parts": {k: int(v) for k, v in memory.parts().items()},
        "total": total, "rule_of_thumb": int(memory.rule_of_thumb),
        "required": {"bytes": total, "basis": "total", "reserved_bytes": plan.reserved_bytes,
                     "with_reserve_bytes": total + plan.reserved_bytes},
        "gpu": _gpu_json(plan.gpu), "verdict": _verdict_json(plan.fit),
        "longest_context_that_fits": plan.longest_context,
        "decode_tokens_per_second_upper_bound": plan.decode_tokens_per_second,
        "changes": None if plan.fit is None or plan.fit.fits else [
            {"change": c.change, "required_bytes": c.total, "saved_bytes": c.saved, "fits": c.fits,
             "headroom_bytes": c.headroom_bytes, "cost": c.cost, "settings": c.settings} for c in plan.changes],
        "unit": args.unit, "exit_status": status,
    }


def _write_infer(w, style, args, shape, source, plan):
    import memmath

    memory, settings, unit, total = plan.memory, plan.settings, args.unit, int(plan.memory.total)
    w(style.bold("\n".join(_wrap(f"{shape.name} ({_source_text(source)}): {shape.n_params:,} parameters."))) + "\n")
    w("\n".join(_wrap(f"Serving: weights in {memory.weights_format}, KV cache in {memory.kv_format}, "
                      f"batch {settings['batch_size']} x {settings['context_len']:,} tokens"
                      + (" (the default context; set --context)" if args.context is None else "")
                      + f", {settings['attention']} attention.")) + "\n")
    w("\n" + style.bold(f"  {'per replica':<36}{'bytes':>22} {unit:>12}") + "\n")
    labels = {"weights": "Weights", "quantization_constants": "Quantization constants", "kv_cache": "KV cache",
              "working_set": "Prefill working set"}
    for part, value in memory.parts().items():
        w(_table_row(labels.get(part, part), int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(_table_row("Total", total, unit) + "\n")
    w(style.dim(_table_row("(rule of thumb: weights x 1.2)", int(memory.rule_of_thumb), unit)) + "\n")
    w(_table_row("CUDA context reserved" + (" (default)" if args.reserve is None else ""), plan.reserved_bytes,
                 unit) + "\n")
    w(style.bold(_table_row("Needed: total + reserve", total + plan.reserved_bytes, unit)) + "\n")
    notes = ["The working set is one prefill's peak as transformers computes it; engines that fuse or chunk the "
             "prefill keep less."]
    if args.reserve is None:
        notes.append(f"Reserved: {memmath.CUDA_CONTEXT_SOURCE}; set --reserve.")
    w("\n")
    for note in notes + [_sentence(str(n)) for n in plan.notes]:
        w(style.dim("\n".join(_wrap(note))) + "\n")
    if plan.fit is None:
        return
    _write_verdict(w, style, plan.fit, total, plan.reserved_bytes, unit, "total")
    batch = settings["batch_size"]
    w(f"  longest context that fits at batch {batch}: {plan.longest_context:,} tokens (the edge, no margin)\n"
      if plan.longest_context else f"  no context fits at batch {batch}\n")
    if plan.decode_tokens_per_second:
        w("\n".join(_wrap(f"decode at most {plan.decode_tokens_per_second:,.0f} tokens/s per sequence "
                          f"({plan.gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s over the weights and KV cache read per "
                          "token)", "  ")) + "\n")
    if not plan.fit.fits:
        rows = [(c.change, c.total, c.headroom_bytes, c.cost) for c in plan.changes if c.fits]
        _write_changes(w, style, rows, [], False, unit, plan.reserved_bytes,
                       none="No single change of format, context or batch makes it fit with 5% to spare.")


# ---- models and gpus ----------------------------------------------------------------------
def run_models(args, out, style) -> int:
    import memmath

    # active_params: what one token passes through (a mixture of experts routes it to experts_per_tok of n_experts
    # experts per block); a dense model's is every parameter.
    rows = [{"name": name, "family": shape.family, "params": int(shape.n_params),
             "active_params": int(shape.active_params), "n_experts": int(shape.n_experts),
             "experts_per_tok": int(shape.experts_per_tok), "n_layers": int(shape.n_layers),
             "hidden_size": int(shape.hidden_size), "n_heads": int(shape.n_heads), "n_kv_heads": int(shape.n_kv_heads),
             "vocab_size": int(shape.vocab_size or 0), "source": memmath.PRESET_SOURCES.get(name, "memmath's presets")}
            for name, shape in memmath.PRESETS.items()]
    if args.json:
        out.write(json.dumps({"command": "models", "models": rows}, indent=2) + "\n")
        return 0
    out.write(style.bold(f"{'preset':<19}{'parameters':>16}{'layers':>7}{'heads':>6}  source") + "\n")
    for r in rows:
        heads = f"{r['n_heads']}" + (f"/{r['n_kv_heads']}" if r["n_kv_heads"] != r["n_heads"] else "")
        line = f"{r['name']:<19}{r['params']:>16,}{r['n_layers']:>7}{heads:>6}  {r['source'].replace(' config.json', '')}"
        out.write(line[:_width()] + "\n")
        if r["n_experts"]:  # a mixture of experts: its parameters per token, under its total
            out.write(f"{'':<19}{r['active_params']:>16,} active per token ({r['experts_per_tok']} of "
                      f"{r['n_experts']} experts)\n")
    out.write(style.dim("\n".join(_wrap("heads: query/key-value heads where they differ (grouped-query attention). "
                                        "active per token: what a mixture of experts runs for one token (its shared "
                                        "parts and the experts it is routed to); training still holds every expert. "
                                        "Sources are each model's config.json on the Hub, or the paper. Any other "
                                        "model: pass its config.json, its folder or its Hub id (local cache)."))) + "\n")
    return 0


def run_gpus(args, out, style) -> int:
    import memmath

    rows = [{"name": g.name, "marketed": g.marketed, "memory_bytes": int(g.memory_bytes),
             "memory_mib": g.memory_bytes // 2**20, "bandwidth_bytes_per_s": int(g.bandwidth_bytes_per_s),
             "bf16_tflops": g.bf16_tflops, "kind": g.kind, "note": g.note} for g in memmath.GPUS.values()]
    if args.json:
        out.write(json.dumps({"command": "gpus", "gpus": rows, "sources": GPU_SOURCES}, indent=2) + "\n")
        return 0
    out.write(style.bold(f"{'gpu':<17}{'on the box':>10}{'MiB':>9}{'GB':>8}{'GiB':>8}{'GB/s':>7}{'TFLOP/s':>9}"
                         f"  kind") + "\n")
    for r in rows:
        tflops = f"{r['bf16_tflops']:g}" + ("*" if r["note"] else "")
        out.write(f"{r['name']:<17}{r['marketed']:>10}{r['memory_mib']:>9,}{r['memory_bytes'] / 1e9:>8.2f}"
                  f"{r['memory_bytes'] / 2**30:>8.2f}{r['bandwidth_bytes_per_s'] / 1e9:>7,.0f}{tflops:>9}"
                  f"  {r['kind']}\n")
    out.write(style.dim("\n".join(_wrap("* no bf16: fp16 throughput. " + GPU_SOURCES[0].upper() + GPU_SOURCES[1:]
                                        + ". Any other card: --gpu-memory 24GiB."))) + "\n")
    return 0


# ---- lessons: the workbook, from the installed package -------------------------------------------
def lessons_folder():
    """The folder of the lessons: memmath_lessons/notebooks in an installed wheel, notebooks/ beside the
    package in a checkout (an editable install), found without importing memmath_lessons."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("memmath_lessons")
    if spec is None or not spec.origin:
        raise BadInput("", f"memmath_lessons is not installed; reinstall memmath with the workbook: {WORKBOOK_INSTALL}")
    package = Path(spec.origin).parent
    for folder in (package / "notebooks", package.parent / "notebooks"):
        if (folder / "00_start_here.py").is_file():
            return folder
    raise BadInput("", f"the lessons are missing from {package} (no notebooks/00_start_here.py); reinstall memmath: "
                   f"{WORKBOOK_INSTALL}")


def _missing_workbook_modules() -> list[str]:
    import importlib.util

    return [name for name in WORKBOOK_MODULES if importlib.util.find_spec(name) is None]


def run_lessons(args, out, style) -> int:
    """Open the lessons with `marimo run` (its exit status), or build the static site with memmath_site."""
    folder = lessons_folder()
    if args.path:
        out.write(f"{folder}\n")
        return 0
    missing = _missing_workbook_modules()
    if missing:
        raise BadInput("", f"the workbook needs the workbook extra (missing: {', '.join(missing)}): {WORKBOOK_INSTALL}")
    if args.static is not None:
        for option, value in (("--port", args.port), ("--headless", args.headless or None)):
            if value is not None:
                raise BadInput(option, "applies to opening the workbook (marimo run), not to --static")
        from pathlib import Path

        import memmath_site

        site = Path(args.static)
        try:
            memmath_site.build_site(site, folder, log=lambda line: print(line, file=sys.stderr))
        except (memmath_site.BuildError, memmath_site.AssetLayoutError, OSError) as error:
            first, *details = str(error).strip().splitlines() or [type(error).__name__]
            if not details:
                raise BadInput("--static", first) from None
            # a lesson that failed to export: its cells' errors follow the one-line verdict
            sys.stderr.write(_shorten(f"{PROG} lessons: error: --static: {first}") + "\n"
                             + "".join(f"  {line}\n" for line in details if line.strip()))
            return 2
        out.write(f"Built {site}/. Serve it with: python -m http.server -d {site} 8000\n")
        return 0
    import subprocess

    command = [sys.executable, "-m", "marimo", "run", str(folder), "--include-code"]
    if args.port is not None:
        command += ["--port", str(args.port)]
    if args.headless:
        command.append("--headless")
    sys.stdout.flush()
    if os.name == "posix":  # become marimo: its signals, its exit status, no parent left behind
        os.execv(sys.executable, command)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:  # Ctrl-C reaches marimo too; it stops, and so do we, quietly
        return 130


# ---- printing helpers ----------------------------------------------------------------------
ACTIVATION_DESCRIPTIONS = {
    "transformers": "what the transformers PyTorch models keep for backward, tensor by tensor (memmath's "
                    "hf_activations, checked against PyTorch on the CPU)",
    "textbook": "Korthikanti et al. 2022's per-layer formula plus the loss's fp32 log-softmax",
}


class Style:
    """ANSI colour, only when stdout is a terminal and NO_COLOR is not set (https://no-color.org)."""

    def __init__(self, stream):
        self.on = (hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")
                   and os.environ.get("TERM") != "dumb")

    def _wrap(self, code, text):
        if not self.on:
            return text
        return "\n".join(f"\033[{code}m{line}\033[0m" if line else line for line in text.split("\n"))

    def bold(self, text):
        return self._wrap("1", text)

    def good(self, text):
        return self._wrap("1;32", text)

    def bad(self, text):
        return self._wrap("1;31", text)

    def dim(self, text):
        return self._wrap("2", text)


def _width() -> int:
    return max(60, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width=_width(), initial_indent=indent, subsequent_indent=indent or "  ") or [""]


def _sentence(text: str) -> str:
    """A note as a sentence: capital first letter, full stop at the end."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _in_unit(n_bytes: int, unit: str) -> str:
    import memmath

    return f"{memmath.to_unit(n_bytes, unit):,.2f}"


def _size_text(n_bytes: int, unit: str) -> str:
    import memmath

    return memmath.format_bytes(n_bytes, unit)


def _table_row(label: str, n_bytes: int, unit: str) -> str:
    return f"  {label:<36}{n_bytes:>22,} {_in_unit(n_bytes, unit):>12}"


def _source_text(source) -> str:
    return f"preset, from {source['from']}" if source["source"] == "preset" else \
        f"{source['source']} {source['config_path']}"


def _write_verdict(w, style, fit, required, reserve, unit, basis, cannot=None):
    """The verdict: fits or not, and why; with `cannot` (a RecipeWarning: the card has no bf16), one verdict that
    says so ("would fit, but cannot run here"), never "fits" beside a recipe the card cannot run."""
    gpu = fit.gpu
    memory = (f"{gpu.memory_bytes:,} bytes, given by --gpu-memory" if gpu.kind == "custom" else
              f"{_size_text(gpu.memory_bytes, unit)}, {gpu.memory_bytes // 2**20:,} MiB as the driver reports it")
    w("\n" + style.bold(f"{gpu.name}") + f" ({memory}):\n")
    if fit.fits and cannot is not None:
        head = style.bad("would fit") + f", with {_size_text(fit.headroom_bytes, unit)} to spare, " + \
            style.bad("but cannot run here")
    elif fit.fits:
        head = style.good("fits") + f", with {_size_text(fit.headroom_bytes, unit)} to spare"
    elif fit.headroom_bytes >= 0:
        head = style.bad("does not fit") + f": {_size_text(fit.headroom_bytes, unit)} to spare is less than the " \
               f"{_size_text(fit.margin_bytes, unit)} kept free (5% of the need, the peak estimate's tolerance)"
    else:
        head = style.bad("does not fit") + f": short by {_size_text(-fit.headroom_bytes, unit)} on {gpu.name}"
    if cannot is not None and not fit.fits:
        head += ", " + style.bad("nor could it run here")
    w("\n".join(_wrap(f"{head}" + (f": {cannot.message}." if cannot is not None else ""), "  ")) + "\n")
    w("\n".join(_wrap(f"needs {_size_text(required + reserve, unit)}: the {basis} "
                      f"{_size_text(required, unit)} + {_size_text(reserve, unit)} reserved for the CUDA context",
                      "  ")) + "\n")


def _write_changes(w, style, fitting, path, path_fits, unit, reserve, none="No change the planner knows makes it fit."):
    if fitting:
        title, rows = "Changes that fit on their own, largest saving first", fitting
    elif path:
        title = "No single change fits; " + ("these together do, in order" if path_fits else "even these together do not")
        rows = path
    else:
        w("\n" + style.bold(none) + "\n")
        return
    w("\n" + style.bold(title) + "\n")
    w(style.dim(f"  {'change':<44}{'needs (' + unit + ')':>16}{'headroom':>16}") + "\n")
    for n, (change, required, room, cost) in enumerate(rows, 1):
        room_text = f"{'+' if room >= 0 else '-'}{_in_unit(abs(room), unit)}"
        w(f"  {f'{n}. {change}':<44}{_in_unit(required + reserve, unit):>16}{room_text:>16}\n")
        if cost:
            w(style.dim("\n".join(_wrap(cost, "     "))) + "\n")


def _jsonable(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return value.item()
    return value


def _method_json(method) -> dict:
    return {"name": type(method).__name__.lower(), "description": method.describe(), **_jsonable(method)}


def _gpu_json(gpu):
    if gpu is None:
        return None
    return {"name": gpu.name, "memory_bytes": int(gpu.memory_bytes), "marketed": gpu.marketed, "kind": gpu.kind}


def _verdict_json(fit):
    if fit is None:
        return None
    return {"fits": fit.fits, "required_bytes": int(fit.required_bytes), "available_bytes": int(fit.available_bytes),
            "headroom_bytes": int(fit.headroom_bytes), "margin_bytes": int(fit.margin_bytes),
            "gpu_memory_bytes": int(fit.gpu.memory_bytes),
            "reserved_bytes": int(fit.gpu.memory_bytes - fit.available_bytes)}


def _reserve_json(args, reserve) -> dict:
    import memmath

    return {"bytes": reserve, "default": args.reserve is None,
            "what": memmath.CUDA_CONTEXT_SOURCE if args.reserve is None else "given by --reserve"}


COMMANDS = {"train": run_train, "infer": run_infer, "models": run_models, "gpus": run_gpus, "lessons": run_lessons}


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 fits or no GPU, 1 does not fit, 2 bad input).

    The answer is computed whole into a buffer, then written: on an error nothing reaches stdout, and
    when the reader leaves early (`memmath ... | head`, a broken pipe) the status is still the one the
    command computed, with no traceback."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --help, --version or a bad option: argparse has written; flush it here, quietly
        _flush_stdout()
        raise
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    prog = f"{PROG} {args.command}"
    answer = io.StringIO()
    try:
        status = COMMANDS[args.command](args, answer, Style(sys.stdout))
    except (BadInput, ValueError, TypeError) as error:
        sys.stderr.write(_shorten(f"{prog}: error: {_message(error)} (see {prog} --help)") + "\n")
        return 2
    except OSError as error:  # a MODEL path the system cannot even look at (a name too long, no permission)
        where = "MODEL: " if args.command in ("train", "infer") else ""
        sys.stderr.write(_shorten(f"{prog}: error: {where}{error.strerror or error}: {error.filename!r} "
                                  f"(see {prog} --help)") + "\n")
        return 2
    try:
        sys.stdout.write(answer.getvalue())
    except BrokenPipeError:
        _quiet_stdout()
        return status
    _flush_stdout()
    return status


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()


def _quiet_stdout() -> None:
    """The reader left (`| head`): point stdout at /dev/null so the exit's flush says nothing (Python docs' recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # a stdout with no file descriptor (a StringIO)
        pass


def _message(error: Exception) -> str:
    """One line for stderr: a library error as the option that sets its field (FIELD_OPTIONS)."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    field = getattr(error, "field", None)
    option = FIELD_OPTIONS.get(field)
    if option is None:
        return text
    if field != "model" and text.startswith(field + " "):
        text = text[len(field) + 1:]
    return f"{option}: {text}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
