"""The commands: the options become a Run or a Serve, the library plans it, the plan is written as text or JSON."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import memmath  # memmath.serving and memmath.counts load on first use: a training question needs neither
from memmath import report
from memmath.planner import plan_layout, plan_training
from memmath.preference import DPO
from memmath.run import Run, Serve
from memmath.sources import resolve_source

from .options import METHOD_CLASSES, WORKBOOK_INSTALL, BadInput, field_options, given_fields, gpu_and_reserve

# ---- the method: options that set no field of a Run ------------------------------------------------
def _given(**options) -> dict:
    return {name: value for name, value in options.items() if value is not None}


def _option_owners() -> dict:
    """Each method option's name on the command line -> (its flag, the --method words whose class has its field)."""
    owners = {}
    for word, cls in METHOD_CLASSES.items():
        for name, spec in field_options(cls):
            dest = spec.get("dest", name)
            owners.setdefault(dest, (spec["flag"], []))[1].append(word)
    return owners


def build_method(args, shape):
    """The method --method names, from the options of its fields (memmath.flags); an option of another method's
    field is refused by name."""
    for dest, (flag, words) in _option_owners().items():
        if getattr(args, dest, None) is not None and args.method not in words and not (
                args.method == "dpo" and "dpo" not in words):  # dpo: the policy's options go to --dpo-base's method
            raise BadInput(flag, f"applies to --method {' or '.join(words)}, not {args.method}")
    if args.method == "dpo":  # preference training (memmath/preference.py): the policy's method, then DPO around it
        try:
            base = build_method(argparse.Namespace(**{**vars(args), "method": args.dpo_base or "lora",
                                                      "dpo_base": None, "reference": None, "beta": None}), shape)
        except BadInput as error:  # the policy's options: they apply to a --dpo-base, not to --method dpo
            raise BadInput("", str(error).replace("--method", "--dpo-base")) from None
        given = given_fields(args, DPO)
        given.pop("base", None)
        return DPO(base=base, **given)
    if args.method == "freeze" and (args.trainable_layers is None or args.trainable_layers > shape.n_layers):
        raise BadInput("--trainable-layers", (f"--method freeze needs it: how many of the last blocks train, "
                                              f"from 0 to {shape.n_layers}") if args.trainable_layers is None else
                       f"must be from 0 to {shape.n_layers} (the model's blocks); got {args.trainable_layers}")
    if args.method == "qlora" and args.no_double_quant is not None and args.quant_type == "int8":
        raise BadInput("--no-double-quant", "applies to --quant-type nf4 or fp4; int8 (Linear8bitLt) keeps one fp32 "
                       "scale per row and no double quantization")
    return METHOD_CLASSES[args.method](**given_fields(args, METHOD_CLASSES[args.method]))


# ---- train ----------------------------------------------------------------------------------------
def run_train(args, out, style) -> int:
    shape, source = resolve_source(args.model)
    run = Run(shape, method=build_method(args, shape), **given_fields(args, Run))
    gpu, reserve = gpu_and_reserve(args)
    if args.plan_layout:
        return _plan_layout(args, out, style, run, gpu, reserve)
    plan = plan_training(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    status = 1 if plan.fits is False else 3 if plan.fit is not None and plan.fits is None else 0  # 3: no verdict
    out.write(json.dumps(report.training_json(plan, source=source, unit=args.unit, seq_default=args.seq_len is None,
                                              reserve_default=args.reserve is None, status=status), indent=2) + "\n"
              if args.json else
              report.training_text(plan, source=source, unit=args.unit, style=style, width=report.terminal_width(),
                                   seq_default=args.seq_len is None, reserve_default=args.reserve is None))
    return status


def _plan_layout(args, out, style, run, gpu, reserve) -> int:
    """--plan-layout: the fewest GPUs and their layout that fit the run (memmath.planner.plan_layout)."""
    if gpu is None:
        raise BadInput("--plan-layout", "needs a card: add --gpu (or --gpu-memory)")
    plan = plan_layout(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    out.write(json.dumps(report.layout_json(plan, run, gpu, unit=args.unit), indent=2) + "\n" if args.json else
              report.layout_text(plan, run, gpu, unit=args.unit, style=style, width=report.terminal_width(),
                                 max_gpus=args.max_gpus))
    return 0 if plan.fits else 1


# ---- infer ----------------------------------------------------------------------------------------
def run_infer(args, out, style) -> int:
    shape, source = resolve_source(args.model)
    gpu, reserve = gpu_and_reserve(args)
    plan = memmath.serving.plan_serving(Serve(shape, **given_fields(args, Serve)), gpu, reserved_bytes=reserve)
    status = 0 if plan.fit is None or plan.fit.fits else 1
    out.write(json.dumps(report.serving_json(plan, source=source, unit=args.unit,
                                             context_default=args.context_len is None,
                                             reserve_default=args.reserve is None, status=status), indent=2) + "\n"
              if args.json else
              report.serving_text(plan, source=source, unit=args.unit, style=style, width=report.terminal_width(),
                                  context_default=args.context_len is None, reserve_default=args.reserve is None))
    return status


# ---- models and gpus: the catalogs ------------------------------------------------------------------
def run_models(args, out, style) -> int:
    if getattr(args, "model", None):  # one model's counts (memmath/counts.py)
        counts = memmath.counts.parameter_counts(args.model)
        out.write(json.dumps({"command": "models", "model": counts}, indent=2) + "\n" if args.json else
                  report.counts_text(counts))
        return 0
    rows = report.presets_rows()
    out.write(json.dumps({"command": "models", "models": rows}, indent=2) + "\n" if args.json else
              report.presets_text(rows, style=style, width=report.terminal_width()))
    return 0


def run_gpus(args, out, style) -> int:
    rows = report.gpus_rows()
    out.write(json.dumps({"command": "gpus", "gpus": rows, "sources": report.GPU_SOURCES}, indent=2) + "\n"
              if args.json else report.gpus_text(rows, style=style, width=report.terminal_width()))
    return 0


# ---- lessons: a thin delegate to memmath_lessons, imported only here ---------------------------------
def lessons_folder():
    """The folder of the lessons: memmath_lessons/notebooks in an installed wheel, notebooks/ beside the
    package in a checkout (an editable install), found without importing memmath_lessons."""
    spec = importlib.util.find_spec("memmath_lessons")
    if spec is None or not spec.origin:
        raise BadInput("", f"memmath_lessons is not installed; reinstall memmath with the workbook: {WORKBOOK_INSTALL}")
    package = Path(spec.origin).parent
    for folder in (package / "notebooks", package.parent / "notebooks"):
        if (folder / "00_start_here.py").is_file():
            return folder
    raise BadInput("", f"the lessons are missing from {package} (no notebooks/00_start_here.py); reinstall memmath: "
                   f"{WORKBOOK_INSTALL}")


def run_lessons(args, out, style) -> int:
    """Open the lessons with `marimo run` (its exit status), or build the static site (memmath_lessons.launch)."""
    folder = lessons_folder()
    if args.path:
        out.write(f"{folder}\n")
        return 0
    needed = sys.modules[__package__].WORKBOOK_MODULES  # read from memmath.cli, where a caller may narrow it
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput("", f"the workbook needs the workbook extra (missing: {', '.join(missing)}): {WORKBOOK_INSTALL}")
    from memmath_lessons import launch  # the workbook: marimo, and the site builder for --static

    return launch.run(folder, static=args.static, port=args.port, headless=args.headless, out=out)
