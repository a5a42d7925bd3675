"""memmath on the command line: will this finetune (or this model at this context) fit on this GPU?

    memmath train MODEL [--method qlora --batch 4 --seq 2048 --gpu "RTX 4090" ...]
    memmath infer MODEL [--context 32768 --weights nf4 --kv bf16 --gpu "RTX 4090" ...]
    memmath models | memmath gpus
    memmath measure CONFIG [--method lora ...]   (two real steps beside the prediction: needs memmath[torch])
    memmath lessons [--static DIR]     (the workbook, python -m memmath_lessons: needs pip install "memmath[workbook]")

A projection of memmath.Run, memmath.Serve and the methods: the options of their fields are written
beside the fields (memmath.flags.option) and generated here (options.py); the library plans the question
(plan_training, plan_serving) and memmath.report writes the plan, or commands.py writes one JSON
object (--json). It decides nothing and holds no default of its own: an option left out is left to
the Run or Serve, whose resolved values the output shows. Errors from the library name their field;
field_flags() says which option sets it.
Exit status: 0 fits (or no GPU given), 1 does not fit, 2 bad input (one line on stderr), 3 no verdict (a model
type whose activations are not checked against PyTorch: the output says why). The answer is written once it is
whole, so a reader that leaves early (`memmath models | head -1`) still gets the status; an error leaves stdout empty.

Each command's module loads when the command runs (COMMANDS): a training question loads neither the PyTorch
trace's side (traced.py, --traced) nor the measurement (memmath.measure), and the workbook (marimo, the site
builder) is imported only for `memmath lessons`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import os
import sys

from memmath.gpus import CUDA_CONTEXT_BYTES
from memmath.planner import DEFAULT_MAX_GPUS, VerdictRefused
from memmath.report import Style
from memmath.run import Run, Serve

from .options import (COMMAND_CHOICES, EPILOG, METHOD_CLASSES, METHODS, MODEL_HELP, PROG, UNIT_CHOICES,
                      WORKBOOK_INSTALL, BadInput, Parser, add_field_options, choice, field_flags, gpu_name,
                      non_empty_path, resolve_gpu, shorten, size, whole)

# Each command's function as (module, name), its module imported when the command runs; --traced answers from
# traced.py instead. The workbook extra (pyproject.toml): the modules `memmath lessons` needs, by import name.
COMMANDS = {name: ("memmath.cli.commands", f"run_{name}") for name in ("train", "infer", "models", "gpus", "lessons")}
COMMANDS["measure"] = ("memmath.measure", "run")
TRACED = {name: ("memmath.cli.traced", f"run_{name}") for name in ("train", "infer")}
WORKBOOK_MODULES = ("marimo", "altair", "pandas", "anywidget")
FIELD_OPTIONS = field_flags()  # each library field -> the option that sets it, from the fields' metadata


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `command`, only that command's options are built (the others answer --help alone)."""
    parser = Parser(prog=PROG, description="The memory of training and serving a model, exact to the byte: will it "
                    "fit on this GPU, and what to change if not. Never uses the network.", epilog=EPILOG)
    parser.add_argument("--version", action=_Version, nargs=0, help="print memmath's version and exit")
    sub = parser.add_subparsers(dest="command", metavar=COMMAND_CHOICES)
    common = Parser(add_help=False)
    common.add_argument("--json", action="store_true",
                        help="print one JSON object (every size in integer bytes) instead of tables")

    def gpu_options(p):
        group = p.add_argument_group("the GPU (gives a verdict, and exit status 1 when it does not fit)")
        exclusive = group.add_mutually_exclusive_group()
        exclusive.add_argument("--gpu", metavar="NAME", type=gpu_name, help="a card from `memmath gpus` (case "
                               "and spaces forgiven: rtx4090, a100-80gb, h100)")
        exclusive.add_argument("--gpu-memory", metavar="SIZE", type=size(low=1),
                               help="any card, by its memory as the driver reports it (24GiB, 24564MiB), in whole bytes")
        group.add_argument("--reserve", metavar="SIZE", type=size(), help="memory the CUDA context takes before any "
                           f"tensor (default: the card's, as `memmath gpus` lists; {CUDA_CONTEXT_BYTES // 2**20}MiB "
                           "without a card; 0 for none)")
        group.add_argument("--unit", type=choice(UNIT_CHOICES), default="GB", metavar="UNIT",
                           help="unit for display: GB (10**9 B, default) or GiB (2**30 B), also MB, MiB, TB, TiB")

    def train_options(train):
        train.add_argument("model", metavar="MODEL", help=MODEL_HELP)
        m = train.add_argument_group("the method (each option applies to the methods whose fields it sets)")
        m.add_argument("--method", type=choice(METHODS), default="full", metavar="NAME", help="full (default), freeze, "
                       "adapters, lora, qlora, or dpo (preference training: --dpo-base, --reference)")
        seen = set()  # the methods share fields (QLoRA is LoRA's, every method has vision): one option each
        for cls in METHOD_CLASSES.values():
            add_field_options(m, cls, seen)
        s = train.add_argument_group("the training step (each default is memmath.Run's, said in the output)")
        add_field_options(s, Run)
        s.add_argument("--plan-layout", action="store_true", default=None,
                       help="with --gpu: the fewest GPUs and the layout (data x tensor x pipeline) that fit the run")
        s.add_argument("--max-gpus", type=whole(1), metavar="N", help="how many GPUs the suggested changes may use "
                       f"(default {DEFAULT_MAX_GPUS})")
        train.add_argument("--traced", action="store_true", help="PyTorch's trace of the step under fake tensors, "
                           "for any model transformers can build (needs memmath[torch]; memmath/traced.py)")
        gpu_options(train)

    def infer_options(infer):
        infer.add_argument("model", metavar="MODEL", help=MODEL_HELP)
        add_field_options(infer.add_argument_group("the serving setup (each default is memmath.Serve's)"), Serve)
        infer.add_argument("--traced", action="store_true", help="PyTorch's trace of one prefill under fake tensors, "
                           "for any model transformers can build (needs memmath[torch]; memmath/traced.py)")
        gpu_options(infer)

    def lessons_options(lessons):
        lessons.add_argument("--static", metavar="DIR", type=non_empty_path, help="build the static site into DIR (new, "
                             "empty or an earlier build) instead of opening the workbook; serve it with python -m "
                             "http.server -d DIR")
        lessons.add_argument("--port", type=whole(1, 65535), metavar="PORT", help="marimo run's port (default: marimo's, "
                             "2718)")
        lessons.add_argument("--headless", action="store_true", help="do not open a browser")
        lessons.add_argument("--path", action="store_true",
                             help="print the folder that holds the installed lessons and exit (for marimo edit)")

    sub.add_parser("train", parents=[common], help="memory of one training step, and the fit", epilog=EPILOG,
                   description="The memory of one training step, part by part, its peak, and (with --gpu) whether it "
                   "fits and which changes make it fit.")
    sub.add_parser("infer", parents=[common], help="memory to serve a model at a context length", epilog=EPILOG,
                   description="The memory to serve one replica: weights in the serving format, the KV cache, the "
                   "prefill working set; with --gpu, whether it fits.")
    models = sub.add_parser("models", parents=[common], help="the presets and where their shapes come from",
                            description="The model presets, with their parameter counts and sources; or one model's "
                                        "counts, total and active per token (a config.json, its folder or a Hub id).")
    models.add_argument("model", nargs="?", metavar="MODEL", help="one model: a preset, config.json, folder or Hub id")
    sub.add_parser("gpus", parents=[common], help="the GPU catalog and its sources",
                   description="The GPUs --gpu knows, with their memory as the driver reports it.")
    sub.add_parser(
        "lessons", help="open the workbook (marimo run), or build it as a static site",
        description="Open the workbook's lessons, as installed with the package, in your browser (marimo run, on "
        "127.0.0.1 only, no token), or build them as a static site that works offline; the same as python -m "
        f"memmath_lessons. Needs the workbook extra: {WORKBOOK_INSTALL}.",
        epilog="Exit status: marimo's own while it runs; 0 built; 2 the workbook extra is missing or the build "
        "failed (one line on stderr, then the cells' errors of a lesson that failed to export). To serve a class, "
        "run marimo yourself on the folder --path prints, with --token (README, 'On a fresh machine').")
    measure = sub.add_parser(
        "measure", help="two real training steps on this machine, part by part, beside memmath's prediction",
        description="Build the model from its config.json (never downloaded) with random weights, run two training "
        "steps on this machine (CUDA when present, else the CPU) and print what each part took beside memmath's "
        "prediction; or read a PyTorch memory snapshot by part. Needs pip install \"memmath[torch]\".",
        epilog="Exit status: 0 measured, 2 bad input or torch missing.")
    if command is None or command == "measure":  # its options, built only when it may run
        importlib.import_module("memmath.measure").add_options(measure)
    for name, add_options in (("train", train_options), ("infer", infer_options), ("lessons", lessons_options)):
        if command is None or command == name:  # a command's options, built only when it may run
            add_options(sub.choices[name])
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


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 fits or no GPU, 1 does not fit, 2 bad input, 3 no verdict).

    The answer is computed whole into a buffer, then written: on an error nothing reaches stdout, and
    when the reader leaves early (`memmath ... | head`, a broken pipe) the status is still the one the
    command computed, with no traceback. Without argv it is the program (the console script, python -m memmath),
    whose process ends with the answer: what is loaded by then is frozen (gc.freeze), so no collection walks it
    again, the one at exit included."""
    if argv is None:
        gc.freeze()
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(next((word for word in words if not word.startswith("-")), ""))
    try:
        args = parser.parse_args(words)
    except SystemExit:  # --help, --version or a bad option: argparse has written; flush it here, quietly
        _flush_stdout()
        raise
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    prog = f"{PROG} {args.command}"
    answer = io.StringIO()
    try:
        module, name = (TRACED if getattr(args, "traced", False) else COMMANDS)[args.command]
        status = getattr(importlib.import_module(module), name)(args, answer, Style(sys.stdout))
    except (BadInput, ValueError, TypeError) as error:
        sys.stderr.write(shorten(f"{prog}: error: {_message(error)} (see {prog} --help)") + "\n")
        return 3 if isinstance(error, VerdictRefused) else 2  # a search refused on an unchecked verdict: 3
    except OSError as error:  # a MODEL path the system cannot even look at (a name too long, no permission)
        where = "MODEL: " if args.command in ("train", "infer") else ""
        sys.stderr.write(shorten(f"{prog}: error: {where}{error.strerror or error}: {error.filename!r} "
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
    """One line for stderr: a library error as the option that sets its field (field_flags)."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    field = getattr(error, "field", None)
    option = FIELD_OPTIONS.get(field) if field is not None else None
    if option is None:
        return text
    if field != "model" and text.startswith(field + " "):
        text = text[len(field) + 1:]
    return f"{option}: {text}"
