"""memmath on the command line: will this finetune (or this model at this context) fit on this GPU?

    memmath train MODEL [--method qlora --batch 4 --seq 2048 --gpu "RTX 4090" ...]
    memmath infer MODEL [--context 32768 --weights nf4 --kv bf16 --gpu "RTX 4090" ...]
    memmath models | memmath gpus

MODEL is a preset name, a config.json, a folder holding one, or a Hugging Face Hub repo id found
in the local cache (never the network). Every number comes from memmath's Python API; this module
only reads the options, calls it and prints the answer (a table, or one JSON object with --json).
Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input (one line on stderr).

Only the standard library is imported at the top; memmath's calculator is imported when a command
runs, so `--help` and a bad option answer without loading it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

PROG = "memmath"
DEFAULT_SEQ = 2048  # tokens per sequence when --seq is not given (said so in the output and the JSON)
DEFAULT_CONTEXT = 2048  # tokens per sequence for `infer` when --context is not given
# The CUDA context and its kernels take memory before any tensor: 1,343 MiB measured on a V100 by
# Hugging Face (transformers docs, "Model training anatomy"; their helper prints "MB" but divides by
# 1024**2). The planner lesson (notebooks/08_planner.py) cites the same figure (memmath's
# literature, REPORTED["cuda_context_v100"]); tests/test_cli.py checks the two agree.
DEFAULT_RESERVE_MIB = 1343
DEFAULT_RESERVE = DEFAULT_RESERVE_MIB * 2**20
RESERVE_SOURCE = ("CUDA context and kernels before any tensor, 1,343 MiB measured on a V100 "
                  "(Hugging Face transformers docs, Model training anatomy)")
METHODS = ("full", "freeze", "adapters", "lora", "qlora")
ATTENTION = ("sdpa", "eager")
ACTIVATION_MODELS = ("auto", "transformers", "textbook")
UNIT_CHOICES = ("GB", "GiB", "MB", "MiB", "TB", "TiB")
WIDTH = 80

# Where each preset's shape comes from (memmath/presets.py reads them off these configs and papers).
GPU_SOURCES = ("memory: what nvidia-smi reports (MiB x 2**20), less than the size on the box; "
               "bandwidth and dense bf16 TFLOP/s: NVIDIA's datasheets (T4 and V100: fp16, no bf16)")

# The API's field names, as the options that set them (for errors raised inside memmath).
FIELD_OPTIONS = {
    "batch_size": "--batch", "seq_len": "--seq", "context_len": "--context", "rank": "--rank",
    "targets": "--targets", "LoRA target": "--targets", "bottleneck": "--bottleneck",
    "trainable_layers": "--trainable-layers", "n_gpus": "--gpus", "zero_stage": "--zero-stage",
    "reserved_bytes": "--reserve", "precision": "--precision", "optimizer": "--optimizer",
    "attention": "--attention", "unit": "--unit", "gpu": "--gpu", "weights_format": "--weights",
    "kv_format": "--kv", "format": "--weights/--kv", "size": "--gpu-memory",
}


class BadInput(Exception):
    """Bad input from the command line: one line for stderr, exit status 2."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}" if option else message)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage block) and exits with status 2."""

    def error(self, message):
        message = re.sub(r"^argument ", "", message).replace("{train,infer,models,gpus}", "COMMAND")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ---- option types: each failure names the allowed values --------------------------------------
def _whole(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} up; got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} up; got {text!r}")
        return value
    parse.__name__ = "whole number"
    return parse


def _size(text: str) -> int:
    """Bytes from '24GiB', '1.5 GB', '1343MiB' or '0'."""
    import memmath

    if text.strip() in ("0", "0.0"):
        return 0
    try:
        return memmath.parse_bytes(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"must be a size such as 24GiB, 1.5GB or 1343MiB (units {', '.join(memmath.UNITS)}); got {text!r}") from None


def _choice(choices, what="one of"):
    lower = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        key = text.strip().lower()
        if key not in lower:
            raise argparse.ArgumentTypeError(f"must be {what} {', '.join(choices)}; got {text!r}")
        return lower[key]
    parse.__name__ = "choice"
    return parse


def _targets(text: str) -> tuple:
    import memmath

    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    allowed = ", ".join(memmath.LORA_TARGETS)
    if not names:
        raise argparse.ArgumentTypeError(f"must be matrices from {allowed} separated by commas, or all; got {text!r}")
    if names in (("all",), ("all-linear",)):
        return tuple(memmath.LORA_TARGETS)
    for name in names:
        if name not in memmath.LORA_TARGETS:
            raise argparse.ArgumentTypeError(
                f"must be matrices from {allowed} separated by commas (such as q,v), or all; got {name!r}")
    return names


# ---- the parser ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    import memmath

    parser = _Parser(prog=PROG, description="The memory of training and serving a model, exact to the byte: "
                     "will it fit on this GPU, and what to change if not. Never uses the network.",
                     epilog="Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print memmath's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="{train,infer,models,gpus}")

    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true",
                        help="print one JSON object (every size in integer bytes) instead of tables")

    def gpu_options(p):
        group = p.add_argument_group("the GPU (gives a verdict, and exit status 1 when it does not fit)")
        exclusive = group.add_mutually_exclusive_group()
        exclusive.add_argument("--gpu", metavar="NAME", help="a card from `memmath gpus` (case and spaces "
                               "forgiven: rtx4090, a100-80gb, h100)")
        exclusive.add_argument("--gpu-memory", metavar="SIZE", type=_size,
                               help="any card, by its memory as the driver reports it (24GiB, 24564MiB)")
        group.add_argument("--reserve", metavar="SIZE", type=_size, default=None,
                           help=f"memory the CUDA context takes before any tensor (default {DEFAULT_RESERVE_MIB}MiB, "
                           "measured on a V100 by Hugging Face; 0 for none)")
        group.add_argument("--unit", type=_choice(UNIT_CHOICES), default="GB", metavar="UNIT",
                           help="unit for display: GB (10**9 B, default) or GiB (2**30 B), also MB, MiB, TB, TiB")

    model_help = ("a preset (`memmath models`), a config.json, a folder holding one, or a Hub repo id "
                  "(owner/name) found in the local Hugging Face cache")
    train = sub.add_parser("train", parents=[common], help="memory of one training step, and the fit",
                           description="The memory of one training step, part by part, its peak, and "
                           "(with --gpu) whether it fits and which changes make it fit.",
                           epilog="Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input.")
    train.add_argument("model", metavar="MODEL", help=model_help)
    m = train.add_argument_group("the method")
    m.add_argument("--method", type=_choice(METHODS), default="full", metavar="NAME", help="full (default), freeze, adapters, "
                   "lora or qlora")
    m.add_argument("--rank", type=_whole(1), metavar="R", help="LoRA/QLoRA rank (default 8)")
    m.add_argument("--targets", type=_targets, metavar="LIST", help="LoRA/QLoRA matrices, comma-separated from "
                   f"{','.join(memmath.LORA_TARGETS)}, or all (default q,v)")
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
    s = train.add_argument_group("the training step")
    s.add_argument("--precision", type=_choice(list(memmath.RECIPES)), default="bf16", metavar="RECIPE",
                   help=f"{', '.join(memmath.RECIPES)} (default bf16: pure bf16, the article's 8 B/param with Adam)")
    s.add_argument("--optimizer", type=_choice(list(memmath.OPTIMIZERS)), default="adamw", metavar="NAME",
                   help=f"{', '.join(memmath.OPTIMIZERS)} (default adamw)")
    s.add_argument("--batch", type=_whole(1), default=1, metavar="B", help="micro-batch per GPU (default 1)")
    s.add_argument("--seq", type=_whole(1), default=None, metavar="S",
                   help=f"tokens per sequence (default {DEFAULT_SEQ}, said so in the output)")
    s.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    s.add_argument("--attention", type=_choice(ATTENTION), default="sdpa", metavar="KIND",
                   help="sdpa (fused, default) or eager (keeps the s x s scores)")
    s.add_argument("--no-dropout", action="store_true", help="no dropout masks kept")
    s.add_argument("--activations", type=_choice(ACTIVATION_MODELS), default="auto", metavar="MODEL",
                   help="activation model: transformers (what the PyTorch models keep; auto picks it where it "
                   "applies) or textbook (Korthikanti et al. 2022)")
    s.add_argument("--gpus", type=_whole(1), default=1, metavar="N", help="data-parallel GPUs (default 1)")
    s.add_argument("--zero-stage", type=_choice(("0", "1", "2", "3")), default="0", metavar="S",
                   help="ZeRO stage 0-3 across the --gpus (3 = FSDP full sharding; default 0)")
    gpu_options(train)

    infer = sub.add_parser("infer", parents=[common], help="memory to serve a model at a context length",
                           description="The memory to serve one replica: weights in the serving format, "
                           "the KV cache, the prefill working set; with --gpu, whether it fits.",
                           epilog="Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input.")
    infer.add_argument("model", metavar="MODEL", help=model_help)
    i = infer.add_argument_group("the serving setup")
    i.add_argument("--context", type=_whole(1), default=None, metavar="N",
                   help=f"tokens per sequence, prompt and output (default {DEFAULT_CONTEXT}, said so in the output)")
    i.add_argument("--batch", type=_whole(1), default=1, metavar="B", help="sequences at once (default 1)")
    i.add_argument("--weights", type=_choice(list(memmath.FORMATS)), default="bf16", metavar="FORMAT",
                   help=f"serving format of the weights: {', '.join(memmath.FORMATS)} (default bf16)")
    i.add_argument("--kv", type=_choice(list(memmath.FORMATS)), default="bf16", metavar="FORMAT",
                   help="format of the KV cache (default bf16)")
    i.add_argument("--attention", type=_choice(ATTENTION), default="sdpa", metavar="KIND", help="sdpa (default) or eager")
    gpu_options(infer)

    sub.add_parser("models", parents=[common], help="the presets and where their shapes come from",
                   description="The model presets, with their parameter counts and sources.")
    sub.add_parser("gpus", parents=[common], help="the GPU catalog and its sources",
                   description="The GPUs --gpu knows, with their memory as the driver reports it.")
    return parser


class _Version(argparse.Action):
    """--version, looked up only when asked for (importlib.metadata costs some 20 ms to import)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(0, f"memmath {_version()}\n")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("memmath")
    except Exception:  # not installed (run from a checkout)
        return "unknown"


# ---- MODEL: preset, config.json, folder, or the local Hugging Face cache ----------------------
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?(@[A-Za-z0-9._/-]+)?$")


def hf_cache_dir() -> tuple[Path, str]:
    """The Hugging Face hub cache folder, and which setting chose it (huggingface_hub's own order)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser(), f"${variable}"
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub", "$HF_HOME/hub"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"
    return Path.home() / ".cache" / "huggingface" / "hub", "the default cache"


def find_in_hf_cache(repo_id: str) -> tuple[Path | None, Path]:
    """(config.json of the cached snapshot or None, the repo folder looked in), without the network.

    The layout huggingface_hub writes: models--owner--name/refs/<revision> holds a commit hash and
    snapshots/<hash>/config.json the file. An `@revision` tail picks refs/<revision> or a snapshot
    by its hash; otherwise refs/main, else the newest snapshot that holds a config.json.
    """
    name, _, revision = repo_id.partition("@")
    cache, _ = hf_cache_dir()
    folder = cache / ("models--" + name.replace("/", "--"))
    snapshots = folder / "snapshots"
    revision = revision or "main"
    ref = folder / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
        candidate = snapshots / commit / "config.json"
        if commit and "/" not in commit and candidate.is_file():
            return candidate, folder
        if revision == "main" and snapshots.is_dir():
            found = sorted((p for p in snapshots.glob("*/config.json") if p.is_file()),
                           key=lambda p: p.stat().st_mtime, reverse=True)
            if found:
                return found[0], folder
    except OSError:
        pass
    return None, folder


def resolve_cli_model(text: str):
    """(ModelShape, description dict) for the MODEL argument; BadInput naming where it looked."""
    import memmath

    key = text.strip().lower()
    if key in memmath.PRESETS:
        return memmath.PRESETS[key], {"given": text, "source": "preset", "config_path": None,
                                      "from": memmath.PRESET_SOURCES.get(key, "memmath's presets")}
    path = Path(text).expanduser()
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError):
        is_dir = is_file = False
    if is_dir:
        config = path / "config.json"
        if not config.is_file():
            raise BadInput("MODEL", f"the folder {str(path)!r} holds no config.json")
        return _read_config(config, text, "config folder")
    if is_file:
        return _read_config(path, text, "config file")
    looks_like_path = text.endswith(".json") or text.startswith((".", "/", "~")) or os.sep + os.sep in text
    if not looks_like_path and _REPO_ID.match(text.strip()):
        repo = text.strip()
        config, folder = find_in_hf_cache(repo)
        if config is not None:
            shape, info = _read_config(config, text, "hugging face cache")
            return shape.with_changes(name=repo.partition("@")[0]), info
        cache, chosen = hf_cache_dir()
        raise BadInput("MODEL", f"{text!r} is not a preset, a file or a folder, and not in the local Hugging Face "
                       f"cache (looked for {folder}/snapshots/*/config.json; cache from {chosen}). memmath never "
                       f"uses the network: get the file with `huggingface-cli download {repo.partition('@')[0]} "
                       "config.json` (or `hf download`), or pass a config.json path. Presets: "
                       + ", ".join(memmath.PRESETS))
    raise BadInput("MODEL", f"no such file or folder: {text!r} (give a preset, a config.json, a folder holding "
                   "one, or a Hub repo id in the local cache)")


def _read_config(path: Path, given: str, source: str):
    import memmath

    try:
        shape = memmath.from_hf_config(path)
    except (ValueError, TypeError) as error:
        raise BadInput("MODEL", f"{path}: {error}") from None
    return shape, {"given": given, "source": source, "config_path": str(path), "from": str(path)}


# ---- GPU --------------------------------------------------------------------------------------
def _squash(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower())


def _check_reserve(reserve: int, gpu) -> None:
    if gpu is not None and reserve >= gpu.memory_bytes:
        raise BadInput("--reserve", f"must be less than the GPU's memory ({gpu.name}: {gpu.memory_bytes:,} bytes); "
                       f"got {reserve:,} bytes")


def resolve_gpu(args):
    """The GPU from --gpu (catalog, forgiving case and spacing, or a unique part of a name) or --gpu-memory."""
    import memmath

    if getattr(args, "gpu_memory", None) is not None:
        if args.gpu_memory <= 0:
            raise BadInput("--gpu-memory", "must be a size above 0, such as 24GiB")
        label = memmath.format_bytes(args.gpu_memory, "GiB")
        return memmath.GPU(f"{label} GPU", args.gpu_memory, 0, 0.0, "custom", label, "given by --gpu-memory")
    if not getattr(args, "gpu", None):
        return None
    wanted = _squash(args.gpu)
    exact = [g for g in memmath.GPUS.values() if _squash(g.name) == wanted]
    if exact:
        return exact[0]
    partial = [g for g in memmath.GPUS.values() if wanted and wanted in _squash(g.name)]
    if len(partial) == 1:
        return partial[0]
    if len(partial) > 1:
        raise BadInput("--gpu", f"{args.gpu!r} could be {', '.join(g.name for g in partial)}; say which")
    raise BadInput("--gpu", f"must be one of {', '.join(memmath.GPUS)} (or give --gpu-memory 24GiB); got {args.gpu!r}")


# ---- errors from the API, as the options that caused them ---------------------------------------
def _api_error(error: Exception) -> BadInput:
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    match = re.match(r"^([A-Za-z_][A-Za-z_ ]*?) (must|is|needs)\b", message)
    if match and match.group(1) in FIELD_OPTIONS:
        option = FIELD_OPTIONS[match.group(1)]
        return BadInput(option, message[len(match.group(1)):].strip())
    return BadInput("", message)


# ---- output helpers -----------------------------------------------------------------------
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


def _in_unit(n_bytes: int, unit: str) -> str:
    import memmath

    return f"{memmath.to_unit(n_bytes, unit):,.2f}"


def _size_text(n_bytes: int, unit: str) -> str:
    import memmath

    return memmath.format_bytes(n_bytes, unit)


def _table_row(label: str, n_bytes: int, unit: str, note: str = "") -> str:
    line = f"  {label:<36}{n_bytes:>22,} {_in_unit(n_bytes, unit):>12}"
    return line + (f"  {note}" if note else "")


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


# ---- train --------------------------------------------------------------------------------
def _build_method(args, shape):
    import memmath

    given = {"--rank": args.rank, "--targets": args.targets, "--trainable-layers": args.trainable_layers,
             "--bottleneck": args.bottleneck, "--quant-type": args.quant_type, "--no-double-quant": args.no_double_quant,
             "--quant-layout": args.quant_layout}
    applies = {"--rank": ("lora", "qlora"), "--targets": ("lora", "qlora"), "--trainable-layers": ("freeze",),
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
        return memmath.Adapters(bottleneck=64 if args.bottleneck is None else args.bottleneck)
    rank, targets = 8 if args.rank is None else args.rank, args.targets or ("q", "v")
    if args.method == "lora":
        return memmath.LoRA(rank=rank, targets=targets)
    quant_type = args.quant_type or "nf4"
    if args.no_double_quant and quant_type == "int8":
        raise BadInput("--no-double-quant", "applies to --quant-type nf4 or fp4; int8 (Linear8bitLt) keeps one fp32 "
                       "scale per row and no double quantization")
    return memmath.QLoRA(rank=rank, targets=targets, quant_type=quant_type, layout=args.quant_layout or "paper",
                         double_quant=None if quant_type == "int8" else not args.no_double_quant)


def _peak_settings(settings: dict) -> dict:
    keys = ("precision", "optimizer", "method", "batch_size", "seq_len", "checkpointing", "attention", "dropout")
    return {k: settings[k] for k in keys if k in settings}


def _required(model, settings):
    """(bytes the run needs on each GPU before the CUDA context, basis, peak estimate or None, why not peak).

    The peak of the step (peak_memory) where it applies; otherwise the sum of the parts a step keeps.
    """
    import memmath

    why = ""
    if settings.get("n_gpus", 1) > 1 and settings.get("zero_stage", 0) > 0:
        why = "the peak estimate does not model ZeRO sharding"
    elif isinstance(settings.get("method"), memmath.Adapters):
        why = "the peak estimate does not model Houlsby adapters"
    elif str(settings.get("precision")).lower() == "amp":
        why = "the peak estimate models training in the weights' own format, not autocast (--precision amp)"
    if why:
        memory = memmath.training_memory(model, **settings)
        return int(memory.total), "sum_of_parts", None, why
    try:
        peak = memmath.peak_memory(model, **_peak_settings(settings))
    except ValueError as error:
        memory = memmath.training_memory(model, **settings)
        return int(memory.total), "sum_of_parts", None, str(error).split(" (use ")[0]
    return int(peak.total), "peak", peak, ""


def _auto_activations(args, method) -> str:
    import memmath

    unsupported = isinstance(method, memmath.Adapters) or args.precision == "amp"
    if args.activations == "transformers" and unsupported:
        raise BadInput("--activations", "transformers models full, freeze, lora and qlora in the weights' own "
                       "format (not --method adapters, not --precision amp); use --activations textbook")
    if args.activations != "auto":
        return args.activations
    return "textbook" if unsupported else "transformers"


def run_train(args, out, style) -> int:
    import memmath

    shape, model_info = resolve_cli_model(args.model)
    gpu = resolve_gpu(args)
    method = _build_method(args, shape)
    seq_default = args.seq is None
    seq = DEFAULT_SEQ if seq_default else args.seq
    zero_stage = int(args.zero_stage)
    activations = _auto_activations(args, method)
    settings = dict(precision=args.precision, optimizer=args.optimizer, method=method, batch_size=args.batch,
                    seq_len=seq, checkpointing=args.checkpointing, attention=args.attention,
                    dropout=not args.no_dropout, n_gpus=args.gpus, zero_stage=zero_stage, activations=activations)
    reserve = DEFAULT_RESERVE if args.reserve is None else args.reserve
    _check_reserve(reserve, gpu)
    unit = args.unit
    memory = memmath.training_memory(shape, **settings)
    required, basis, peak, why_not_peak = _required(shape, settings)

    fit = changes = path = None
    if gpu is not None:
        fit = memmath.check_fit(required, gpu, reserved_bytes=reserve)
        if not fit.fits:
            changes = _judged(shape, gpu, reserve, memmath.suggest_changes(shape, gpu, reserved_bytes=reserve,
                                                                            **settings))
            if not any(c["fits"] for c in changes):
                path = _judged(shape, gpu, reserve, memmath.path_to_fit(shape, gpu, reserved_bytes=reserve,
                                                                         **settings))
    status = 0 if fit is None or fit.fits else 1

    if args.json:
        report = {
            "command": "train",
            "model": {**model_info, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                      "total_params": int(memory.total_params), "trainable_params": int(memory.trainable_params),
                      "adapter_params": int(memory.adapter_params)},
            "settings": {"method": _method_json(method), "precision": args.precision, "optimizer": args.optimizer,
                         "batch_size": args.batch, "seq_len": seq, "seq_len_default": seq_default,
                         "checkpointing": args.checkpointing, "attention": args.attention,
                         "dropout": not args.no_dropout, "n_gpus": args.gpus, "zero_stage": zero_stage},
            "assumptions": {"recipe": memory.recipe.description, "optimizer": memory.optimizer.description,
                            "method": method.describe(), "activations": activations, "attention": args.attention,
                            "seq_len": (f"{seq} tokens, the default (--seq not given)" if seq_default
                                        else f"{seq} tokens (--seq)"),
                            "summary": memory.assumptions,
                            "reserved": {"bytes": reserve, "default": args.reserve is None,
                                         "what": RESERVE_SOURCE if args.reserve is None else "given by --reserve"},
                            "activations_model": ACTIVATION_DESCRIPTIONS[activations],
                            "notes": [str(n) for n in (*memory.notes, *_peak_notes(peak, reserve))]},
            "parts": {k: int(v) for k, v in memory.parts().items()},
            "sum_of_parts": int(memory.total),
            "peak": None if peak is None else {"total": int(peak.total), "phase": peak.phase,
                                               **{k: int(v) for k, v in peak.parts().items()}},
            "required": {"bytes": required, "basis": basis, "why_not_peak": why_not_peak or None,
                         "reserved_bytes": reserve, "with_reserve_bytes": required + reserve},
            "gpu": _gpu_json(gpu),
            "verdict": _verdict_json(fit),
            "changes": changes, "path_to_fit": path, "unit": unit, "exit_status": status,
        }
        out.write(json.dumps(report, indent=2) + "\n")
        return status

    w = out.write
    lines = [f"{shape.name} ({_model_source_text(model_info)}): {memory.total_params:,} parameters, "
             f"{shape.n_layers} layers.",
             f"Method: {method.describe()}; {memory.trainable_params:,} trainable.",
             f"Recipe: {memory.recipe.description} {memory.optimizer.description}",
             f"Step: batch {args.batch} x {seq:,} tokens"
             + (f" (the default length; set --seq)" if seq_default else "")
             + f", {args.attention} attention, dropout {'off' if args.no_dropout else 'on'}, checkpointing "
             f"{'on' if args.checkpointing else 'off'}, activations: {activations} model"
             + (f"; {args.gpus} GPUs, ZeRO stage {zero_stage}" if args.gpus > 1 or zero_stage else "") + "."]
    w(style.bold("\n".join(_wrap(lines[0]))) + "\n")
    for line in lines[1:]:
        w("\n".join(_wrap(line)) + "\n")
    w("\n" + style.bold(f"  {'per GPU':<36}{'bytes':>22} {unit:>12}") + "\n")
    for part, value in memory.parts().items():
        w(_table_row(memmath.PART_LABELS[part], int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(_table_row("Sum of the parts", int(memory.total), unit) + "\n")
    if peak is not None:
        w(_table_row(f"Peak of the step ({peak.phase.replace('_', ' ')})", int(peak.total), unit) + "\n")
    reserve_label = "CUDA context reserved" + (" (default)" if args.reserve is None else "")
    w(_table_row(reserve_label, reserve, unit) + "\n")
    w(style.bold(_table_row(f"Needed: {'peak' if peak is not None else 'sum'} + reserve", required + reserve,
                            unit)) + "\n")
    notes = []
    if peak is None:
        notes.append(f"The verdict uses the sum of the parts: {why_not_peak}.")
    else:
        notes.append("Peak: the most allocated at one moment of the step (memmath.peak_memory); the sum counts "
                     "every part as if all were alive at once.")
    if args.reserve is None:
        notes.append(f"Reserved: {RESERVE_SOURCE}; set --reserve.")
    notes += [_sentence(str(n)) for n in memory.notes]
    w("\n")
    for note in notes:
        w(style.dim("\n".join(_wrap(note))) + "\n")
    if fit is not None:
        _write_verdict(w, style, fit, required, reserve, unit, "peak" if peak is not None else "sum of the parts")
        if changes is not None:
            _write_changes(w, style, fit, changes, path, unit, reserve)
    return status


ACTIVATION_DESCRIPTIONS = {
    "transformers": "what the transformers PyTorch models keep for backward, tensor by tensor (memmath's "
                    "hf_activations, checked against PyTorch on the CPU)",
    "textbook": "Korthikanti et al. 2022's per-layer formula plus the loss's fp32 log-softmax",
}


def _sentence(text: str) -> str:
    """A note as a sentence: capital first letter, full stop at the end."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _peak_notes(peak, reserve) -> list:
    """The peak's notes, less the one about the CUDA context when a reserve stands for it."""
    if peak is None:
        return []
    return [n for n in peak.notes if not (reserve and n.kind == "cuda_context_excluded")]


def _judged(shape, gpu, reserve, suggestions):
    """The planner's suggestions, each judged like the verdict (the peak where it applies) with the reserve."""
    import memmath

    rows = []
    for s in suggestions:
        required, basis, _, _ = _required(shape, s.settings)
        fit = memmath.check_fit(required, gpu, reserved_bytes=reserve)
        settings = {k: (_method_json(v) if k == "method" else _jsonable(v)) for k, v in s.settings.items()}
        rows.append({"change": s.change, "required_bytes": required, "basis": basis,
                     "sum_of_parts_bytes": int(s.total), "saved_bytes": int(s.saved),
                     "fits": fit.fits, "headroom_bytes": int(fit.headroom_bytes), "cost": s.cost,
                     "settings": settings})
    return rows


def _verdict_json(fit):
    if fit is None:
        return None
    return {"fits": fit.fits, "required_bytes": int(fit.required_bytes), "available_bytes": int(fit.available_bytes),
            "headroom_bytes": int(fit.headroom_bytes), "gpu_memory_bytes": int(fit.gpu.memory_bytes),
            "reserved_bytes": int(fit.gpu.memory_bytes - fit.available_bytes)}


def _model_source_text(info) -> str:
    if info["source"] == "preset":
        return f"preset, from {info['from']}"
    return f"{info['source']} {info['config_path']}"


def _write_verdict(w, style, fit, required, reserve, unit, basis):
    gpu = fit.gpu
    memory = f"{_size_text(gpu.memory_bytes, unit)}"
    if gpu.kind == "custom":
        memory = f"{gpu.memory_bytes:,} bytes, given by --gpu-memory"
    else:
        memory += f", {gpu.memory_bytes // 2**20:,} MiB as the driver reports it"
    w("\n" + style.bold(f"{gpu.name}") + f" ({memory}):\n")
    if fit.fits:
        head = style.good("fits") + f", with {_size_text(fit.headroom_bytes, unit)} to spare"
    else:
        head = style.bad("does not fit") + f": short by {_size_text(-fit.headroom_bytes, unit)} on {gpu.name}"
    w(f"  {head}\n")
    w("\n".join(_wrap(f"needs {_size_text(required + reserve, unit)}: the {basis} "
                      f"{_size_text(required, unit)} + {_size_text(reserve, unit)} reserved for the CUDA context",
                      "  ")) + "\n")


def _write_changes(w, style, fit, changes, path, unit, reserve):
    fitting = [c for c in changes if c["fits"]]
    if fitting:
        w("\n" + style.bold("Changes that fit on their own, largest saving first") + "\n")
        _write_change_rows(w, style, fitting, unit, reserve)
    elif path:
        fits = path[-1]["fits"]
        w("\n" + style.bold("No single change fits; " + ("these together do, in order" if fits else
                                                        "even these together do not")) + "\n")
        _write_change_rows(w, style, path, unit, reserve)
    else:
        w("\n" + style.bold("No change the planner knows makes it fit.") + "\n")


def _write_change_rows(w, style, rows, unit, reserve):
    w(style.dim(f"  {'change':<44}{'needs (' + unit + ')':>16}{'headroom':>16}") + "\n")
    for n, row in enumerate(rows, 1):
        label = f"{n}. {row['change']}"
        needs = row["required_bytes"] + reserve  # as the verdict counts it: with the CUDA context
        room = row["headroom_bytes"]
        room_text = f"{'+' if room >= 0 else '-'}{_in_unit(abs(room), unit)}"
        w(f"  {label:<44}{_in_unit(needs, unit):>16}{room_text:>16}\n")
        if row["cost"]:
            w(style.dim("\n".join(_wrap(row["cost"], "     "))) + "\n")


# ---- infer --------------------------------------------------------------------------------
def run_infer(args, out, style) -> int:
    import memmath

    shape, model_info = resolve_cli_model(args.model)
    gpu = resolve_gpu(args)
    context_default = args.context is None
    context = DEFAULT_CONTEXT if context_default else args.context
    reserve = DEFAULT_RESERVE if args.reserve is None else args.reserve
    _check_reserve(reserve, gpu)
    unit = args.unit
    settings = dict(weights_format=args.weights, kv_format=args.kv, batch_size=args.batch, context_len=context,
                    attention=args.attention)
    memory = memmath.inference_memory(shape, **settings)
    total = int(memory.total)
    fit = memmath.check_fit(total, gpu, reserved_bytes=reserve) if gpu is not None else None
    longest = _longest_context(shape, gpu, reserve, settings) if gpu is not None else None
    speed = (memmath.decode_tokens_per_second(memory, gpu) if gpu is not None and gpu.bandwidth_bytes_per_s
             else None)
    changes = _infer_changes(shape, gpu, reserve, settings, total) if fit is not None and not fit.fits else None
    status = 0 if fit is None or fit.fits else 1

    if args.json:
        report = {
            "command": "infer",
            "model": {**model_info, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                      "total_params": int(shape.n_params)},
            "settings": {"weights_format": memory.weights_format, "kv_format": memory.kv_format,
                         "batch_size": args.batch, "context_len": context, "context_len_default": context_default,
                         "attention": args.attention},
            "assumptions": {"context_len": (f"{context} tokens, the default (--context not given)" if context_default
                                            else f"{context} tokens (--context)"),
                            "attention": args.attention,
                            "working_set": "the peak of one prefill over the whole context (transformers' "
                                           "implementations; serving engines that fuse or chunk keep less)",
                            "reserved": {"bytes": reserve, "default": args.reserve is None,
                                         "what": RESERVE_SOURCE if args.reserve is None else "given by --reserve"},
                            "notes": [str(n) for n in memory.notes]},
            "parts": {k: int(v) for k, v in memory.parts().items()},
            "total": total, "rule_of_thumb": int(memory.rule_of_thumb),
            "required": {"bytes": total, "basis": "total", "reserved_bytes": reserve,
                         "with_reserve_bytes": total + reserve},
            "gpu": _gpu_json(gpu), "verdict": _verdict_json(fit),
            "longest_context_that_fits": longest,
            "decode_tokens_per_second_upper_bound": speed,
            "changes": changes, "unit": unit, "exit_status": status,
        }
        out.write(json.dumps(report, indent=2) + "\n")
        return status

    w = out.write
    w(style.bold("\n".join(_wrap(f"{shape.name} ({_model_source_text(model_info)}): {shape.n_params:,} "
                                  "parameters."))) + "\n")
    w("\n".join(_wrap(f"Serving: weights in {memory.weights_format}, KV cache in {memory.kv_format}, "
                      f"batch {args.batch} x {context:,} tokens"
                      + (" (the default context; set --context)" if context_default else "")
                      + f", {args.attention} attention.")) + "\n")
    w("\n" + style.bold(f"  {'per replica':<36}{'bytes':>22} {unit:>12}") + "\n")
    labels = {"weights": "Weights", "quantization_constants": "Quantization constants", "kv_cache": "KV cache",
              "working_set": "Prefill working set"}
    for part, value in memory.parts().items():
        w(_table_row(labels.get(part, part), int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(_table_row("Total", total, unit) + "\n")
    w(style.dim(_table_row("(rule of thumb: weights x 1.2)", int(memory.rule_of_thumb), unit)) + "\n")
    w(_table_row("CUDA context reserved" + (" (default)" if args.reserve is None else ""), reserve, unit) + "\n")
    w(style.bold(_table_row("Needed: total + reserve", total + reserve, unit)) + "\n")
    notes = ["The working set is one prefill's peak as transformers computes it; engines that fuse or chunk "
             "the prefill keep less."]
    if args.reserve is None:
        notes.append(f"Reserved: {RESERVE_SOURCE}; set --reserve.")
    notes += [str(n) for n in memory.notes]
    w("\n")
    for note in notes:
        w(style.dim("\n".join(_wrap(note))) + "\n")
    if fit is not None:
        _write_verdict(w, style, fit, total, reserve, unit, "total")
        if longest is not None:
            w(f"  longest context that fits at batch {args.batch}: {longest:,} tokens\n" if longest else
              f"  no context fits at batch {args.batch}\n")
        if speed:
            w("\n".join(_wrap(f"decode at most {speed:,.0f} tokens/s per sequence ({gpu.bandwidth_bytes_per_s / 1e9:,.0f}"
                              " GB/s over the weights and KV cache read per token)", "  ")) + "\n")
        if changes is not None:
            fitting = [c for c in changes if c["fits"]]
            if fitting:
                w("\n" + style.bold("Changes that fit on their own, largest saving first") + "\n")
                _write_change_rows(w, style, fitting, unit, reserve)
            else:
                w("\n" + style.bold("No single change of format, context or batch makes it fit.") + "\n")
    return status


def _longest_context(shape, gpu, reserve, settings):
    """The longest context (tokens) whose total fits at the same batch and formats (bisection), 0 if none."""
    import memmath

    def fits(context):
        return memmath.check_fit(memmath.inference_memory(shape, **{**settings, "context_len": context}), gpu,
                                 reserved_bytes=reserve).fits

    if not fits(1):
        return 0
    low, high = 1, 2**22
    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _infer_changes(shape, gpu, reserve, settings, before):
    """Single changes to a serving setup that lower its memory: smaller weight or KV formats, the longest
    context or largest batch that fits; ranked by bytes saved, each judged with the reserve."""
    import memmath

    candidates = []
    bits = {name: f.bits for name, f in memmath.FORMATS.items()}
    for fmt in ("int8", "nf4"):
        if bits[fmt] < bits[settings["weights_format"]]:
            candidates.append((f"weights in {fmt}", {**settings, "weights_format": fmt},
                               "quantized weights: some loss of quality, kernels that dequantize"))
    for fmt in ("fp8_e4m3",):
        if bits[fmt] < bits[settings["kv_format"]]:
            candidates.append((f"KV cache in {fmt}", {**settings, "kv_format": fmt},
                               "8-bit KV cache: half the cache, a small loss of precision"))
    longest = _longest_context(shape, gpu, reserve, settings)
    if 0 < longest < settings["context_len"]:
        candidates.append((f"context {longest:,} tokens", {**settings, "context_len": longest},
                           "shorter prompts and outputs"))
    if settings["batch_size"] > 1:
        low, high = 1, settings["batch_size"] - 1
        if memmath.check_fit(memmath.inference_memory(shape, **{**settings, "batch_size": 1}), gpu,
                             reserved_bytes=reserve).fits:
            while low < high:
                middle = (low + high + 1) // 2
                ok = memmath.check_fit(memmath.inference_memory(shape, **{**settings, "batch_size": middle}), gpu,
                                       reserved_bytes=reserve).fits
                low, high = (middle, high) if ok else (low, middle - 1)
            candidates.append((f"batch {low}", {**settings, "batch_size": low}, "fewer sequences at once"))
    rows = []
    for change, new, cost in candidates:
        total = int(memmath.inference_memory(shape, **new).total)
        if total >= before:
            continue
        fit = memmath.check_fit(total, gpu, reserved_bytes=reserve)
        rows.append({"change": change, "required_bytes": total, "saved_bytes": before - total, "fits": fit.fits,
                     "headroom_bytes": int(fit.headroom_bytes), "cost": cost, "settings": _jsonable(new)})
    return sorted(rows, key=lambda r: (-r["saved_bytes"], r["change"]))


# ---- models and gpus ----------------------------------------------------------------------
def run_models(args, out, style) -> int:
    import memmath

    rows = []
    for name, shape in memmath.PRESETS.items():
        rows.append({"name": name, "family": shape.family, "params": int(shape.n_params),
                     "n_layers": int(shape.n_layers), "hidden_size": int(shape.hidden_size),
                     "n_heads": int(shape.n_heads), "n_kv_heads": int(shape.n_kv_heads),
                     "vocab_size": int(shape.vocab_size or 0),
                     "source": memmath.PRESET_SOURCES.get(name, "memmath's presets")})
    if args.json:
        out.write(json.dumps({"command": "models", "models": rows}, indent=2) + "\n")
        return 0
    out.write(style.bold(f"{'preset':<19}{'parameters':>16}{'layers':>7}{'heads':>6}  source") + "\n")
    for r in rows:
        heads = f"{r['n_heads']}" + (f"/{r['n_kv_heads']}" if r["n_kv_heads"] != r["n_heads"] else "")
        source = r["source"].replace(" config.json", "")
        line = f"{r['name']:<19}{r['params']:>16,}{r['n_layers']:>7}{heads:>6}  {source}"
        out.write(line[:_width()] + "\n")
    out.write(style.dim("\n".join(_wrap("heads: query/key-value heads where they differ (grouped-query attention). "
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


COMMANDS = {"train": run_train, "infer": run_infer, "models": run_models, "gpus": run_gpus}


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 fits or no GPU, 1 does not fit, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    style = Style(sys.stdout)
    prog = f"{PROG} {args.command}"
    try:
        return COMMANDS[args.command](args, sys.stdout, style)
    except BadInput as error:
        sys.stderr.write(f"{prog}: error: {error} (see {prog} --help)\n")
        return 2
    except (ValueError, TypeError) as error:
        sys.stderr.write(f"{prog}: error: {_api_error(error)} (see {prog} --help)\n")
        return 2
    except BrokenPipeError:  # `memmath models | head`: the reader left; say nothing more (Python docs' recipe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
