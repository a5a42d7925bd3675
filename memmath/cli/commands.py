"""The commands: the options become a Run or a Serve, the library plans it, the plan is written as text or JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys

from memmath import plan_text
from memmath.plan_text import printable, table_row

from .options import PROG, WORKBOOK_INSTALL, BadInput, gpu_name, given_fields, quote, shorten

WIDTH = 80
# The workbook extra (pyproject.toml): the modules `memmath lessons` needs, by import name.
WORKBOOK_MODULES = ("marimo", "altair", "pandas", "anywidget")
GPU_SOURCES = ("memory: what nvidia-smi reports (MiB x 2**20), less than the size on the box; "
               "bandwidth and dense bf16 TFLOP/s: NVIDIA's datasheets (T4 and V100: fp16, no bf16)")
ACTIVATION_DESCRIPTIONS = {
    "transformers": "what the transformers PyTorch models keep for backward, tensor by tensor (memmath's "
                    "hf_activations, checked against PyTorch on the CPU)",
    "textbook": "Korthikanti et al. 2022's per-layer formula plus the loss's fp32 log-softmax",
}


def width() -> int:
    return max(60, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


# ---- the method and the GPU: options that set no field of a Run ------------------------------------
def _given(**options) -> dict:
    return {name: value for name, value in options.items() if value is not None}


def build_method(args, shape):
    from memmath import methods
    from memmath.preference import DPO

    dpo = {"--dpo-base": args.dpo_base, "--reference": args.reference, "--beta": args.beta}
    if args.method != "dpo":
        for option, value in dpo.items():
            if value is not None:
                raise BadInput(option, f"applies to --method dpo, not {args.method}")
    else:  # preference training (memmath/preference.py): the policy's method, then DPO around it
        try:
            base = build_method(argparse.Namespace(**{**vars(args), "method": args.dpo_base or "lora",
                                                      "dpo_base": None, "reference": None, "beta": None}), shape)
        except BadInput as error:  # the policy's options: they apply to a --dpo-base, not to --method dpo
            raise BadInput("", str(error).replace("--method", "--dpo-base")) from None
        return DPO(base=base, **_given(reference=args.reference, beta=args.beta))
    applies = {"--rank": ("lora", "qlora"), "--targets": ("lora", "qlora"), "--trainable-layers": ("freeze",),
               "--lora-dropout": ("lora", "qlora"), "--bottleneck": ("adapters",), "--quant-type": ("qlora",),
               "--no-double-quant": ("qlora",), "--quant-layout": ("qlora",)}
    for option, methods_it_applies_to in applies.items():
        if getattr(args, option[2:].replace("-", "_")) is not None and args.method not in methods_it_applies_to:
            raise BadInput(option, f"applies to --method {' or '.join(methods_it_applies_to)}, not {args.method}")
    if args.method == "full":
        return methods.Full()
    if args.method == "freeze":
        if args.trainable_layers is None or args.trainable_layers > shape.n_layers:
            raise BadInput("--trainable-layers", (f"--method freeze needs it: how many of the last blocks train, "
                                                  f"from 0 to {shape.n_layers}") if args.trainable_layers is None else
                           f"must be from 0 to {shape.n_layers} (the model's blocks); got {args.trainable_layers}")
        return methods.Freeze(trainable_layers=args.trainable_layers)
    if args.method == "adapters":
        return methods.Adapters(**_given(bottleneck=args.bottleneck))
    lora = _given(rank=args.rank, targets=args.targets, dropout=args.lora_dropout)
    if args.method == "lora":
        return methods.LoRA(**lora)
    if args.no_double_quant and args.quant_type == "int8":
        raise BadInput("--no-double-quant", "applies to --quant-type nf4 or fp4; int8 (Linear8bitLt) keeps one fp32 "
                       "scale per row and no double quantization")
    return methods.QLoRA(**lora, **_given(quant_type=args.quant_type, layout=args.quant_layout,
                                          double_quant=False if args.no_double_quant else None))


def resolve_gpu(args):
    """The GPU from --gpu (catalog, forgiving case and spacing, or a unique part of a name) or --gpu-memory."""
    from memmath.gpus import GPU, GPUS
    from memmath.units import format_bytes

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
        raise BadInput("--gpu", f"{quote(args.gpu)} could be {', '.join(g.name for g in partial)}; say which")
    raise BadInput("--gpu", f"must be one of {', '.join(GPUS)} (or give --gpu-memory 24GiB); got {quote(args.gpu)}")


def gpu_and_reserve(args):
    from memmath.gpus import CUDA_CONTEXT_BYTES

    gpu = resolve_gpu(args)
    reserve = CUDA_CONTEXT_BYTES if args.reserve is None else args.reserve
    if gpu is not None and reserve >= gpu.memory_bytes:
        raise BadInput("--reserve", f"must be less than the GPU's memory ({gpu.name}: {gpu.memory_bytes:,} bytes); "
                       f"got {reserve:,} bytes")
    return gpu, reserve


# ---- train ----------------------------------------------------------------------------------------
def run_train(args, out, style) -> int:
    from memmath.planner import plan_training
    from memmath.run import Run
    from memmath.sources import resolve_source

    shape, source = resolve_source(args.model)
    method = build_method(args, shape)
    if args.vision is not None:  # the method's vision= (memmath/multimodal.py); a text model refuses it by name
        method = dataclasses.replace(method, vision=args.vision)
    run = Run(shape, method=method, **given_fields(args, Run))
    gpu, reserve = gpu_and_reserve(args)
    if args.plan_layout:
        return _plan_layout(args, out, style, run, gpu, reserve)
    plan = plan_training(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    status = 0 if plan.fits is not False else 1
    out.write(json.dumps(_train_json(args, source, plan, status), indent=2) + "\n" if args.json else
              plan_text.training_text(plan, source=source, unit=args.unit, style=style, width=width(),
                                      seq_default=args.seq_len is None, reserve_default=args.reserve is None))
    return status


def _plan_layout(args, out, style, run, gpu, reserve) -> int:
    """--plan-layout: the fewest GPUs and their layout that fit the run (memmath.planner.plan_layout)."""
    from memmath.planner import plan_layout
    from memmath.training import PART_LABELS

    if gpu is None:
        raise BadInput("--plan-layout", "needs a card: add --gpu (or --gpu-memory)")
    plan = plan_layout(run, gpu, reserved_bytes=reserve, **_given(max_gpus=args.max_gpus))
    name, unit, w = printable(run.model.name), args.unit, out.write
    if args.json:
        worst, lay = plan.worst, plan.layout
        w(json.dumps({
            "command": "train --plan-layout", "run": repr(run), "gpu": _gpu_json(gpu), "fits": plan.fits,
            "layouts_tried": plan.tried, "usable_bytes": plan.usable_bytes,
            "layout": None if not plan.fits else {"n_gpus": lay.n_gpus, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp,
                                                  "micro_batches": plan.run.micro_batches},
            "worst_rank": None if not plan.fits else {
                "rank": worst.rank, "parts": {k: int(v) for k, v in worst.memory.parts().items()},
                "buffers": worst.buffers, "total": worst.total},
            "required": None if not plan.fits else {"bytes": plan.need.bytes, "basis": _basis(plan.need),
                                                    "reason": plan.need.reason},
            "trade_offs": list(plan.trade_offs), "unit": unit}, indent=2) + "\n")
        return 0 if plan.fits else 1
    if not plan.fits:
        w(f"No layout up to {args.max_gpus or 1024} GPUs fits {name} on the {gpu.name} ({plan.tried} tried).\n")
        return 1
    lay, need = plan.layout, plan.need
    w(style.bold(f"{name} on {gpu.name}: {lay.n_gpus} GPUs, {lay.describe()}") + "\n")
    w(f"  the rank that needs the most (rank {plan.worst.rank}, pipeline stage {plan.worst.coordinates['pp']}):\n")
    for part, value in plan.worst.memory.parts().items():
        w(table_row(PART_LABELS[part], int(value), unit) + "\n")
    for label, value in plan.worst.buffers.items():
        w(table_row(f"{label} (derived)"[:36], int(value), unit) + "\n")
    w(table_row("Sum of the parts and buffers", plan.worst.total, unit) + "\n")
    if need.basis == "peak":
        w(table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", need.bytes, unit) + "\n")
    w(table_row("The card must hold (" + ("peak" if need.basis == "peak" else "sum") + ")", need.bytes, unit) + "\n")
    w(table_row("Usable on the card", plan.usable_bytes, unit) + "\n")
    for line in plan.trade_offs:
        w(plan_text.wrap(plan_text.printable_prose(line), "  ", width()) + "\n")
    return 0


def _basis(requirement) -> str:
    """The decision's basis as the JSON names it: peak, or sum_of_parts."""
    return requirement.basis.replace(" ", "_")


def _train_json(args, source, plan, status) -> dict:
    from memmath import parallel
    from memmath.gpus import FIT_MARGIN, check_fit

    run, memory, need = plan.run, plan.memory, plan.requirement
    shape, peak, instead = run.model, need.peak, plan.recipe_instead

    def change(s) -> dict:
        fit = check_fit(s.total, plan.gpu, reserved_bytes=plan.reserved_bytes, margin=FIT_MARGIN)
        return {"change": s.change, "required_bytes": s.total, "basis": s.basis.replace(" ", "_"),
                "saved_bytes": s.saved, "fits": s.fits, "headroom_bytes": int(fit.headroom_bytes), "cost": s.cost,
                "run": repr(s.run), "settings": {k: (_method_json(v) if k == "method" else _jsonable(v))
                                                 for k, v in s.run.settings().items()}}
    return {
        "command": "train",
        "model": {**source, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(memory.total_params), "trainable_params": int(memory.trainable_params),
                  "adapter_params": int(memory.adapter_params)},
        "run": repr(run),
        "settings": {**{k: _jsonable(v) for k, v in run.settings().items() if k != "method"},
                     "method": _method_json(run.method), "seq_len_default": args.seq_len is None,
                     "effective_batch": int(run.effective_batch)},
        "assumptions": {"recipe": memory.recipe.description, "optimizer": memory.optimizer.description,
                        "method": run.method.describe(), "activations": run.activations, "attention": run.attention,
                        "seq_len": (f"{run.seq_len} tokens, the default (--seq not given)" if args.seq_len is None
                                    else f"{run.seq_len} tokens (--seq)"),
                        "resolved_from_the_model": sorted(run.defaulted), "summary": memory.assumptions,
                        "reserved": _reserve_json(args, plan.reserved_bytes),
                        "activations_model": ACTIVATION_DESCRIPTIONS[run.activations],
                        "notes": [str(n) for n in plan_text.plan_notes(plan)]},
        "parts": {k: int(v) for k, v in memory.parts().items()},
        "sum_of_parts": int(memory.total),
        # a split run: the communication buffers (derived) of the rank the requirement judges
        "buffers": ({k: int(v) for k, v in parallel.buffers(need.memory.run).items()}
                    if parallel.is_parallel(run) else {}),
        "peak": None if peak is None else {"total": int(peak.total), "phase": peak.phase,
                                           **{k: int(v) for k, v in peak.parts().items()}},
        "required": {"bytes": need.bytes, "basis": _basis(need), "why_not_peak": need.reason or None,
                     "reserved_bytes": plan.reserved_bytes, "with_reserve_bytes": plan.needed_bytes},
        "gpu": _gpu_json(plan.gpu), "verdict": _verdict_json(plan.fit),
        "cannot_run": None if plan.cannot_run is None else plan.cannot_run.message,
        "cannot_run_instead": None if instead is None else {
            "precision": instead.precision, "option": f"--precision {instead.precision}",
            "required_bytes": instead.requirement.bytes, "basis": _basis(instead.requirement),
            "with_reserve_bytes": instead.requirement.bytes + plan.reserved_bytes, "fits": instead.fit.fits,
            "headroom_bytes": int(instead.fit.headroom_bytes)},
        "changes": None if plan.fit is None or plan.fits else [change(s) for s in plan.changes],
        "path_to_fit": None if not plan.path else [change(s) for s in plan.path],
        "unit": args.unit, "exit_status": status,
    }


# ---- infer ----------------------------------------------------------------------------------------
def run_infer(args, out, style) -> int:
    from memmath.run import Serve
    from memmath.serving import plan_serving
    from memmath.sources import resolve_source

    shape, source = resolve_source(args.model)
    gpu, reserve = gpu_and_reserve(args)
    plan = plan_serving(Serve(shape, **given_fields(args, Serve)), gpu, reserved_bytes=reserve)
    status = 0 if plan.fit is None or plan.fit.fits else 1
    out.write(json.dumps(_infer_json(args, shape, source, plan, status), indent=2) + "\n" if args.json else
              plan_text.serving_text(plan, source=source, unit=args.unit, style=style, width=width(),
                                     context_default=args.context_len is None, reserve_default=args.reserve is None))
    return status


def _infer_json(args, shape, source, plan, status) -> dict:
    memory, settings, total = plan.memory, plan.settings, int(plan.memory.total)
    return {
        "command": "infer",
        "model": {**source, "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(shape.n_params)},
        "settings": {**settings, "context_len_default": args.context_len is None},
        "assumptions": {"context_len": (f"{settings['context_len']} tokens, the default (--context not given)"
                                        if args.context_len is None else f"{settings['context_len']} tokens (--context)"),
                        "attention": settings["attention"], "working_set": plan_text.WORKING_SET_NOTE,
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


# ---- JSON pieces -------------------------------------------------------------------------------------
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
    from memmath.gpus import CUDA_CONTEXT_SOURCE

    return {"bytes": reserve, "default": args.reserve is None,
            "what": CUDA_CONTEXT_SOURCE if args.reserve is None else "given by --reserve"}


# ---- models and gpus -------------------------------------------------------------------------------
def run_models(args, out, style) -> int:
    from memmath.presets import PRESET_SOURCES, PRESETS

    # active_params: what one token passes through (a mixture of experts routes it to experts_per_tok of n_experts
    # experts per block); a dense model's is every parameter.
    rows = [{"name": name, "family": shape.family, "params": int(shape.n_params),
             "active_params": int(shape.active_params), "n_experts": int(shape.n_experts),
             "experts_per_tok": int(shape.experts_per_tok), "n_layers": int(shape.n_layers),
             "hidden_size": int(shape.hidden_size), "n_heads": int(shape.n_heads), "n_kv_heads": int(shape.n_kv_heads),
             "vocab_size": int(shape.vocab_size or 0), "source": PRESET_SOURCES.get(name, "memmath's presets")}
            for name, shape in PRESETS.items()]
    if args.json:
        out.write(json.dumps({"command": "models", "models": rows}, indent=2) + "\n")
        return 0
    name_width = max(19, *(len(r["name"]) + 2 for r in rows))
    out.write(style.bold(f"{'preset':<{name_width}}{'parameters':>16}{'layers':>7}{'heads':>6}  source") + "\n")
    for r in rows:
        heads = f"{r['n_heads']}" + (f"/{r['n_kv_heads']}" if r["n_kv_heads"] != r["n_heads"] else "")
        out.write(f"{r['name']:<{name_width}}{r['params']:>16,}{r['n_layers']:>7}{heads:>6}  "  # never cut: a Hub id
                  f"{r['source'].replace(' config.json', '')}\n")
        if r["n_experts"]:  # a mixture of experts: its parameters per token, under its total
            out.write(f"{'':<{name_width}}{r['active_params']:>16,} active per token ({r['experts_per_tok']} of "
                      f"{r['n_experts']} experts)\n")
    out.write(style.dim(plan_text.wrap("heads: query/key-value heads where they differ (grouped-query attention). "
                                       "active per token: what a mixture of experts runs for one token (its shared "
                                       "parts and the experts it is routed to); training still holds every expert. "
                                       "Sources are each model's config.json on the Hub, or the paper. Any other "
                                       "model: pass its config.json, its folder or its Hub id (local cache).",
                                       width=width())) + "\n")
    return 0


def run_gpus(args, out, style) -> int:
    from memmath.gpus import GPUS

    rows = [{"name": g.name, "marketed": g.marketed, "memory_bytes": int(g.memory_bytes),
             "memory_mib": g.memory_bytes // 2**20, "bandwidth_bytes_per_s": int(g.bandwidth_bytes_per_s),
             "bf16_tflops": g.bf16_tflops, "kind": g.kind, "note": g.note} for g in GPUS.values()]
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
    out.write(style.dim(plan_text.wrap("* no bf16: fp16 throughput. " + GPU_SOURCES[0].upper() + GPU_SOURCES[1:]
                                       + ". Any other card: --gpu-memory 24GiB.", width=width())) + "\n")
    return 0


# ---- lessons: a thin delegate to memmath_lessons, imported only here ---------------------------------
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


def run_lessons(args, out, style) -> int:
    """Open the lessons with `marimo run` (its exit status), or build the static site (memmath_lessons.launch)."""
    import importlib.util

    folder = lessons_folder()
    if args.path:
        out.write(f"{folder}\n")
        return 0
    needed = sys.modules[__package__].WORKBOOK_MODULES  # memmath.cli's, which a test may narrow
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput("", f"the workbook needs the workbook extra (missing: {', '.join(missing)}): {WORKBOOK_INSTALL}")
    if args.static is None:
        from memmath_lessons import launch

        return launch.open_workbook(folder, port=args.port, headless=args.headless)
    for option, value in (("--port", args.port), ("--headless", args.headless or None)):
        if value is not None:
            raise BadInput(option, "applies to opening the workbook (marimo run), not to --static")
    from memmath_lessons import launch

    try:
        site = launch.build_static(args.static, folder)
    except launch.BUILD_ERRORS as error:
        first, *details = str(error).strip().splitlines() or [type(error).__name__]
        if not details:
            raise BadInput("--static", first) from None
        # a lesson that failed to export: its cells' errors follow the one-line verdict
        sys.stderr.write(shorten(f"{PROG} lessons: error: --static: {first}") + "\n"
                         + "".join(f"  {line}\n" for line in details if line.strip()))
        return 2
    out.write(f"Built {site}/. Serve it with: python -m http.server -d {site} 8000\n")
    return 0


COMMANDS = {"train": run_train, "infer": run_infer, "models": run_models, "gpus": run_gpus, "lessons": run_lessons}
