"""The command line's options: each failure names the allowed values; the parser, generated where it can be.

A Run, Serve or method field that the command line sets carries its flag, metavar and help beside it
(memmath.flags.option); add_field_options() turns those into argparse options, so a new field with an
option needs no line here. The card's options are written here, as they set no field.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import MISSING, fields

from memmath.gpus import GPU, GPUS, MAX_GPU_BYTES, default_reserve
from memmath.models import LORA_GROUPS, LORA_TARGETS
from memmath.methods import Adapters, Freeze, Full, LoRA, QLoRA
from memmath.preference import DPO
from memmath.run import Run, Serve
from memmath.units import format_bytes, whole_bytes
from memmath.validate import describe

PROG = "memmath"
COMMAND_CHOICES = "{train,infer,models,gpus,lessons,measure}"
WORKBOOK_INSTALL = 'pip install "memmath[workbook]"'
METHODS = ("full", "freeze", "adapters", "lora", "qlora", "dpo")
UNIT_CHOICES = ("GB", "GiB", "MB", "MiB", "TB", "TiB")
EPILOG = "Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input, 3 no verdict (the output says why)."
MODEL_HELP = ("a preset (`memmath models`), a config.json, a folder holding one, or a Hub repo id (owner/name) found "
              "in the local Hugging Face cache")
# The options that set no field of a Run or Serve, by the name the library's errors give (validate.FieldError).
OTHER_OPTIONS = {
    "model": "MODEL", "LoRA target": "--targets", "reserved_bytes": "--reserve", "unit": "--unit", "gpu": "--gpu",
    "format": "--weights/--kv", "size": "--gpu-memory", "method": "--method", "max_gpus": "--max-gpus",
    "LoRA dropout": "--lora-dropout",
}
# --method's words and the class each names; their fields' options are generated like Run's (memmath.flags).
METHOD_CLASSES = {"full": Full, "freeze": Freeze, "adapters": Adapters, "lora": LoRA, "qlora": QLoRA, "dpo": DPO}


class BadInput(Exception):
    """Bad input from the command line: one line for stderr, exit status 2."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}" if option else message)


# A value too long to echo: a quoted one (argparse's "invalid choice: %r", the library's reprs) or a run without
# spaces (argparse's "unrecognized arguments"), each over 300 characters: longer than any path or sentence a
# message names, short enough that a message stays readable.
_LONG_QUOTED = re.compile(r"""'([^'\n]{301,})'|"([^"\n]{301,})"|(?<![\w'"])([^\s'"]{301,})""")


def shorten(message: str) -> str:
    """A message with every long value cut to a short quotation, and at most 1,000 characters in all."""
    def cut(match):
        quoted = match.group(1) if match.group(1) is not None else match.group(2)
        return describe(quoted) if quoted is not None else match.group(3)[:40] + "..."
    message = _LONG_QUOTED.sub(cut, message)
    return message if len(message) <= 1000 else message[:997] + "..."


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage block) and exits with status 2."""

    def error(self, message):
        message = re.sub(r"^argument ", "", message).replace(COMMAND_CHOICES, "COMMAND")
        self.exit(2, shorten(f"{self.prog}: error: {message} (see {self.prog} --help)") + "\n")


# ---- option types -------------------------------------------------------------------------------
def whole(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            allowed = f"from {low:,} up" if high is None else f"from {low:,} to {high:,}"
            raise argparse.ArgumentTypeError(f"must be a whole number {allowed}; got {describe(text)}")
        return value
    parse.__name__ = "whole number"
    return parse


def probability(text: str) -> float:
    """--lora-dropout: a probability from 0 up to (not including) 1, as memmath.LoRA(dropout=) takes it."""
    try:
        value = float(text.strip())
    except ValueError:
        value = None
    if value is None or math.isnan(value) or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a probability from 0 up to (not including) 1, such as 0.05; "
                                         f"got {describe(text)}")
    return value


def choice(choices, what="one of"):
    lower = {str(c).lower(): c for c in choices}

    def parse(text: str) -> str:
        key = text.strip().lower()
        if key not in lower:
            raise argparse.ArgumentTypeError(f"must be {what} {', '.join(map(str, choices))}; got {describe(text)}")
        return lower[key]
    parse.__name__ = "choice"
    return parse


def size(low: int = 0):
    """--gpu-memory, --reserve: whole bytes from '24GiB', '1.5 GB', '1343MiB' or '0' (memmath.units.whole_bytes), from
    `low` to the largest card memmath.GPU holds (2**60 bytes); a fraction of a byte is refused, never rounded."""
    def parse(text: str) -> int:
        try:
            return whole_bytes("size", text, low=low, high=MAX_GPU_BYTES)
        except ValueError as error:  # argparse names the option: "--reserve: must be ..."
            raise argparse.ArgumentTypeError(str(error).removeprefix("size ")) from None
    parse.__name__ = "size"
    return parse


def gpu_name(text: str) -> str:
    """--gpu: a card's name; an empty or blank name is refused here (it would read as no GPU)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is empty; give a card from `memmath gpus` ({', '.join(GPUS)}) "
                                         "or --gpu-memory 24GiB")
    return text


def targets(text: str) -> tuple:
    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    if names in (("all",), ("all-linear",)):
        return ("all",)  # LoRA's "all": what peft's all-linear adapts
    if not names or any(name not in LORA_TARGETS and name not in LORA_GROUPS for name in names):
        raise argparse.ArgumentTypeError(f"must be matrices from {', '.join(LORA_TARGETS)} separated by commas (such "
                                         f"as q,v), or all, or attention; got {describe(text)}")
    return tuple(dict.fromkeys(n for name in names for n in LORA_GROUPS.get(name, (name,))))


def non_empty_path(text: str) -> str:
    """--static: a folder to build into; an empty path would build into the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give the folder to build the site into, such as site/")
    return text


# ---- options generated from the fields of a Run or Serve ---------------------------------------------
def field_options(cls) -> list:
    """(field name, its option metadata) for each field of cls that the command line sets, in field order."""
    return [(f.name, f.metadata["option"]) for f in fields(cls) if "option" in f.metadata]


# How an option's text is read where its field's type does not say (memmath.flags.option's kind).
KINDS = {"targets": targets, "probability": probability, "number": float}


def add_field_options(group, cls, seen: set | None = None) -> None:
    """Add an option for each field of cls that carries one (memmath.flags.option): a flag for a bool, a whole number
    for an int, one of its choices, or the text itself; left out, it is None (the library's default). seen: the
    flags already added (several classes share a field), added to as they are."""
    seen = set() if seen is None else seen
    for f in fields(cls):
        spec = f.metadata.get("option")
        if spec is None or spec["flag"] in seen:
            continue
        seen.add(spec["flag"])
        dest = spec.get("dest", f.name)
        choices = spec.get("choices")
        choices = choices() if callable(choices) else choices
        help_text = spec["help"].replace("{choices}", ", ".join(choices or ()))
        if spec.get("append"):  # repeatable; the words are collected and read by spec["parse"] in given_fields
            group.add_argument(spec["flag"], dest=dest, action="append", metavar=spec["metavar"], help=help_text)
            continue
        if "value" in spec or (f.default is not MISSING and isinstance(f.default, bool)):
            group.add_argument(spec["flag"], dest=dest, action="store_const", const=spec.get("value", True),
                               default=None, help=help_text)
            continue
        number = "low" in spec or (isinstance(f.default, int) and not isinstance(f.default, bool))
        kind = (choice(list(choices)) if choices else KINDS[spec["kind"]] if "kind" in spec else
                whole(spec.get("low", 1), spec.get("high")) if number else str)
        group.add_argument(spec["flag"], dest=dest, type=kind, metavar=spec["metavar"], help=help_text)


def field_flags() -> dict:
    """Each library field name -> the option that sets it: the methods', then Run's and Serve's (a name both have is
    Run's), then OTHER_OPTIONS."""
    return {**{name: spec["flag"] for cls in (*METHOD_CLASSES.values(), Serve, Run) for name, spec in field_options(cls)},
            **OTHER_OPTIONS}


def given_fields(args, cls) -> dict:
    """The fields of cls given on the command line (not None), each as the library takes it."""
    values = {}
    for name, spec in field_options(cls):
        value = getattr(args, spec.get("dest", name), None)
        if value is not None and value != spec.get("auto"):
            values[name] = spec["parse"](value) if "parse" in spec else value
    return values


def resolve_gpu(args):
    """The GPU from --gpu (catalog, forgiving case and spacing, or a unique part of a name) or --gpu-memory."""
    if getattr(args, "gpu_memory", None) is not None:
        if args.gpu_memory <= 0:
            raise BadInput("--gpu-memory", "must be a size above 0, such as 24GiB")
        label = format_bytes(args.gpu_memory, "GiB")
        return GPU(f"{label} GPU", args.gpu_memory, 0, 0.0, "custom", label, "given by --gpu-memory")
    if getattr(args, "gpu", None) is None:
        return None
    if not args.gpu.strip():  # an empty --gpu "" (an unset variable in a script) must not read as "no GPU"
        gpu_name(args.gpu)

    def squash(name):
        return re.sub(r"[\s_\-]+", "", name.lower())
    wanted = squash(args.gpu)
    exact = [g for g in GPUS.values() if squash(g.name) == wanted]
    partial = [g for g in GPUS.values() if wanted and wanted in squash(g.name)]
    if exact or len(partial) == 1:
        return (exact or partial)[0]
    if len(partial) > 1:
        raise BadInput("--gpu", f"{describe(args.gpu)} could be {', '.join(g.name for g in partial)}; say which")
    raise BadInput("--gpu", f"must be one of {', '.join(GPUS)} (or give --gpu-memory 24GiB); got {describe(args.gpu)}")


def gpu_and_reserve(args):
    """The card (resolve_gpu, or None) and what its CUDA context takes: --reserve, else the card's (its family's,
    memmath/cuda_context.py; CUDA_CONTEXT_BYTES without a card)."""
    gpu = resolve_gpu(args)
    reserve = default_reserve(gpu, args.reserve)
    if gpu is not None and reserve >= gpu.memory_bytes:
        raise BadInput("--reserve", f"must be less than the GPU's memory ({gpu.name}: {gpu.memory_bytes:,} bytes); "
                       f"got {reserve:,} bytes")
    return gpu, reserve
