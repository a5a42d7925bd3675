"""A plan as `memmath train` and `memmath infer` print it: as text (tables of bytes, the verdict, the changes)
or as one JSON object (every size in integer bytes).

The command line writes these (with colour on a terminal, memmath.cli); str(plan) and a notebook's
rendering of a TrainingPlan or ServingPlan read the same, so a plan printed in Python says what the
command line says, and the JSON is the API's numbers. Every string a config.json or a path provides
passes through printable() first: a model's name is data, never a terminal escape code or a line.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import textwrap

from .architectures import SUPPORTED_MODEL_TYPES
from .decision import UNCHECKED_FIX, UNCHECKED_LEFT_OUT
from .gpus import CUDA_CONTEXT_SOURCE, FIT_MARGIN, GPUS, check_fit, cuda_context_source
from .offload import COMPILE_NOTE, by_deepspeed
from .parallel import buffers, is_parallel, layout
from .multimodal import MULTIMODAL_MODEL_TYPES
from .presets import PRESET_SOURCES, PRESETS
from .training import PART_LABELS
from .units import format_bytes, to_unit
from .verdict import verdict_of_fit

WIDTH = 80
MAX_SHOWN = 120  # characters of a config-provided string shown (a name, a path)
WORKING_SET_NOTE = ("the peak of one prefill over the whole context (transformers' implementations; serving engines "
                    "that fuse or chunk keep less)")
ACTIVATION_DESCRIPTIONS = {
    "transformers": "what the transformers PyTorch models keep for backward, tensor by tensor (memmath's "
                    "hf_activations, checked against PyTorch on the CPU)",
    "textbook": "Korthikanti et al. 2022's per-layer formula plus the loss's fp32 log-softmax",
}
GPU_SOURCES = ("memory: what nvidia-smi reports (MiB x 2**20), less than the size on the box; "
               "bandwidth and dense bf16 TFLOP/s: NVIDIA's datasheets (T4 and V100: fp16, no bf16)")
SERVING_LABELS = {"weights": "Weights", "quantization_constants": "Quantization constants", "kv_cache": "KV cache",
                  "working_set": "Prefill working set"}


def printable_prose(text) -> str:
    """Text with every character that is not printable (escape codes, line breaks, bidirectional controls) written
    as its Python escape: a name from a config.json inside a sentence is data, never a terminal command."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


def printable(text) -> str:
    """A string from a config or a path, as printed: printable_prose, and at most MAX_SHOWN characters."""
    text = printable_prose(text)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


class Style:
    """ANSI colour, only when the stream is a terminal and NO_COLOR is not set (https://no-color.org)."""

    def __init__(self, stream=None):
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


PLAIN = Style()


def terminal_width() -> int:
    """The width to wrap to on this terminal: its columns (the COLUMNS variable first), from 60 to WIDTH."""
    return max(60, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))


def wrap(text: str, indent: str = "", width: int = WIDTH) -> str:
    return "\n".join(textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent or "  ") or [""])


def sentence(text: str) -> str:
    """A note as a sentence: capital first letter, full stop at the end."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def in_unit(n_bytes: int, unit: str) -> str:
    return f"{to_unit(n_bytes, unit):,.2f}"


def table_row(label: str, n_bytes: int, unit: str) -> str:
    return f"  {label:<36}{n_bytes:>22,} {in_unit(n_bytes, unit):>12}"


def source_text(source) -> str:
    return (f"preset, from {source['from']}" if source["source"] == "preset" else
            f"{source['source']} {printable(source['config_path'])}")


def _title(shape, source) -> str:
    return printable(shape.name or "the model") + (f" ({source_text(source)})" if source else "")


def basis_words(need) -> str:
    """What the requirement is, after "the" in the verdict's line: peak, upper bound on the step's peak, sum of the
    parts."""
    return "peak" if need.basis == "peak" else need.words.removeprefix("the ").removeprefix("an ").removeprefix("a ")


class Writer:
    """Lines for one plan: w(text) adds text; the styles and the width are the caller's."""

    def __init__(self, style=PLAIN, width=WIDTH):
        self.style, self.width, self.parts = style, width, []

    def __call__(self, text: str) -> None:
        self.parts.append(text)

    def para(self, text: str, indent: str = "", how=None) -> None:
        block = wrap(printable_prose(text), indent, self.width)
        self.parts.append((how(block) if how else block) + "\n")

    def text(self) -> str:
        return "".join(self.parts)


def verdict(w: Writer, fit, required, reserve, unit, basis, cannot=None, refusal="", left_out=UNCHECKED_LEFT_OUT,
            fix=UNCHECKED_FIX, unknown="the activations are not checked against PyTorch for this model type") -> None:
    """The verdict: fits or not, and why; with `cannot` (a RecipeWarning: the card has no bf16), one verdict that
    says so ("would fit, but cannot run here"), never "fits" beside a recipe the card cannot run. refusal: why
    `required` is only a floor (memmath/decision.py): "does not fit" where the floor fails, else no verdict; left_out:
    what the floor leaves out, in words; fix: what would give a verdict; unknown: why there is none, in words."""
    gpu, style = fit.gpu, w.style
    memory = (f"{gpu.memory_bytes:,} bytes, given by --gpu-memory" if gpu.kind == "custom" else
              f"{format_bytes(gpu.memory_bytes, unit)}, {gpu.memory_bytes // 2**20:,} MiB as the driver reports it")
    w("\n" + style.bold(f"{gpu.name}") + f" ({memory}):\n")
    said = verdict_of_fit(fit, FIT_MARGIN, refusal)  # the one verdict rule (memmath/verdict.py)
    spare = format_bytes(said.spare, unit)
    if refusal:  # a floor: never "fits"
        head = (style.bad("no verdict") + f": {unknown} (the note above), and the rest fits" if said.fits is None
                else style.bad("does not fit") + f": short by at least {format_bytes(said.short_by, unit)} on "
                f"{gpu.name} even without {left_out}, the {format_bytes(fit.margin_bytes, unit)} kept free included")
        w(wrap(head + (f"; {cannot.message}." if cannot is not None else ""), "  ", w.width) + "\n")
        w.para(f"needs at least {format_bytes(required + reserve, unit)}: the floor {format_bytes(required, unit)} "
               f"(without {left_out}) + {format_bytes(reserve, unit)} reserved for the CUDA context"
               + (f", which leaves {spare} of the usable memory for {left_out}" if said.fits is None else ""),
               "  ")
        if said.fits is None:
            w.para(f"for a verdict: {fix}", "  ")
        return
    if fit.fits and cannot is not None:
        head = style.bad("would fit") + f", with {spare} to spare, " + style.bad("but cannot run here")
    elif fit.fits:
        head = style.good("fits") + f", with {spare} to spare"
    elif said.what_fails == "the margin":
        head = style.bad("does not fit") + f": short by {format_bytes(said.short_by, unit)}; only the margin " \
               f"fails: {spare} to spare is less than the {format_bytes(fit.margin_bytes, unit)} kept free (5% of " \
               "the need, the peak estimate's tolerance)"
    else:
        head = style.bad("does not fit") + f": short by {format_bytes(said.short_by, unit)} on {gpu.name}, the " \
               f"{format_bytes(fit.margin_bytes, unit)} kept free included"
    if cannot is not None and not fit.fits:
        head += ", " + style.bad("nor could it run here")
    w(wrap(head + (f": {cannot.message}." if cannot is not None else ""), "  ", w.width) + "\n")
    w.para(f"needs {format_bytes(required + reserve, unit)}: the {basis} {format_bytes(required, unit)} + "
           f"{format_bytes(reserve, unit)} reserved for the CUDA context", "  ")


def changes(w: Writer, fitting, path, path_fits, unit, reserve, none="No change the planner knows makes it fit."):
    style = w.style
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
        room_text = f"{'+' if room >= 0 else '-'}{in_unit(abs(room), unit)}"
        w(f"  {f'{n}. {change}':<44}{in_unit(required + reserve, unit):>16}{room_text:>16}\n")
        if cost:
            w.para(cost, "     ", style.dim)


def plan_notes(plan) -> list:
    """The run's notes, and the peak's but the one about the CUDA context when a reserve stands for it."""
    peak = plan.requirement.peak
    peak_notes = [] if peak is None else [n for n in peak.notes
                                          if not (plan.reserved_bytes and n.kind == "cuda_context_excluded")]
    return [*plan.memory.notes, *peak_notes]


def defaults_said(run) -> str:
    """What the run took from the model because nobody set it, in words ("" if nothing)."""
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


def _cost(suggestion, unit) -> str:
    """A change's cost, with the host RAM per GPU it needs where it offloads."""
    if not suggestion.host_bytes:
        return suggestion.cost
    ram = format_bytes(suggestion.host_bytes, unit)
    if by_deepspeed(suggestion.run):  # DeepSpeed's tensors, exactly
        return (f"{suggestion.cost}; host RAM at least {ram} per GPU (DeepSpeed's own estimator multiplies its "
                "figure by 1.5 for buffers)")
    return f"{suggestion.cost}; host RAM {ram} per GPU"


def _judged_headroom(suggestion, plan) -> int:
    return check_fit(suggestion.total, plan.gpu, reserved_bytes=plan.reserved_bytes, margin=FIT_MARGIN).headroom_bytes


def training_text(plan, *, source=None, unit="GB", style=PLAIN, width=WIDTH, seq_default=False,
                  reserve_default=True) -> str:
    """A TrainingPlan as `memmath train` prints it."""
    w = Writer(style, width)
    run, memory, need, unit = plan.run, plan.memory, plan.requirement, unit
    shape = run.model
    sharding = (f"; {run.n_gpus} GPU{'s' if run.n_gpus > 1 else ''}, ZeRO stage {run.zero_stage}"
                if run.n_gpus > 1 or run.zero_stage else "")
    if run.tp > 1 or run.pp > 1 or run.cp > 1 or run.ep > 1:
        sharding += (f" ({layout(run).describe()}" + (", sequence parallel" if run.sequence_parallel else "")
                     + (f", {run.pp_schedule} with {run.micro_batches} micro-batches" if run.pp > 1 else "")
                     + (f" and {run.virtual_stages} stages per GPU" if run.virtual_stages > 1 else "") + ")")
    w.para(f"{_title(shape, source)}: {memory.total_params:,} parameters, {shape.n_layers} layers.", how=style.bold)
    w.para(f"Method: {run.method.describe()}; {memory.trainable_params:,} trainable.")
    w.para(f"Recipe: {memory.recipe.description} {memory.optimizer.description}")
    w.para(f"Step: batch {run.batch_size} x {run.seq_len:,} tokens"
           + (" (the default length; set --seq)" if seq_default else "")
           + (", right-padded (an attention mask with zeros)" if run.padded else "")
           + (", packed sequences (their own position ids)" if run.packed else "")
           + (f", {run.loss} loss" if run.loss != "transformers" else "")
           + (f", {run.grad_accum_steps} micro-batches per optimizer step (effective batch "
              f"{run.effective_batch:,})" if run.grad_accum_steps > 1 else "")
           + f", {run.attention} attention, dropout {'on' if run.dropout else 'off'}, checkpointing "
           f"{'on' if run.checkpointing else 'off'}, activations: {run.activations} model{sharding}.")
    w("\n" + style.bold(f"  {'per GPU':<36}{'bytes':>22} {unit:>12}") + "\n")
    for part, value in memory.parts().items():
        w(table_row(PART_LABELS[part], int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(table_row("Sum of the parts", int(memory.total), unit) + "\n")
    if memory.host is not None:  # what offloading keeps in host memory (memmath/offload.py)
        w(wrap(memory.host.describe(lambda n: format_bytes(n, unit)), "  ", width) + "\n")
    if need.basis == "upper bound" and need.above_parts >= 0 and shape.vision is None:  # no peak model: transients
        # at their largest, and the engine's buffers (memmath/bounds.py)
        w(table_row("Bound: transients and buffers", need.above_parts, unit) + "\n")
    elif need.basis == "upper bound":  # a peak plus parts (an unsharded run's, a vision model's language model's)
        w(table_row("Upper bound of the step", need.bytes, unit) + "\n")
    elif need.basis == "floor":  # activations not checked against PyTorch: only what the step holds without them
        w(table_row("Floor: all but the activations", need.bytes, unit) + "\n")
    elif need.peak is None and need.bytes > int(memory.total):  # a parallel rank's communication buffers (derived)
        w(table_row("Communication buffers (derived)", need.bytes - int(memory.total), unit) + "\n")
    if need.peak is not None:
        w(table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", int(need.peak.total), unit) + "\n")
    w(table_row("CUDA context reserved" + (" (default)" if reserve_default else ""), plan.reserved_bytes, unit) + "\n")
    w(style.bold(table_row(f"Needed{' at least' if need.refused else ''}: {need.short} + reserve", plan.needed_bytes,
                           unit)) + "\n")
    notes = [f"The card must hold {need.note}.", defaults_said(run)]
    if reserve_default:
        notes.append(f"Reserved: {reserve_source(plan.gpu)}; set --reserve.")
    w("\n")
    for note in [n for n in notes if n] + [sentence(str(n)) for n in plan_notes(plan)]:
        w.para(note, how=style.dim)
    if plan.fit is None:
        w.para("Add --gpu NAME (a card from `memmath gpus`) or --gpu-memory SIZE for a verdict: whether it fits, and "
               "what to change if not.", how=style.dim)
        return w.text()
    verdict(w, plan.fit, need.bytes, plan.reserved_bytes, unit, basis_words(need), plan.cannot_run,
            need.reason if need.refused else "", need.left_out or UNCHECKED_LEFT_OUT, need.fix or UNCHECKED_FIX,
            need.unknown or "the activations are not checked against PyTorch for this model type")
    instead = plan.recipe_instead
    if instead is not None:  # the run the card would train instead, judged as the verdict is
        fit, other = instead.fit, instead.requirement
        judged = verdict_of_fit(fit)  # the one verdict rule: short by includes the margin
        said = ("no verdict either (a floor)" if instead.fits is None else
                f"fits, with {format_bytes(judged.spare, unit)} to spare" if fit.fits else
                f"does not fit either: short by {'at least ' if other.refused else ''}"
                f"{format_bytes(judged.short_by, unit)}")
        w.para(f"with --precision {instead.precision} instead: needs "
               f"{format_bytes(other.bytes + plan.reserved_bytes, unit)} (the {basis_words(other)} "
               f"{format_bytes(other.bytes, unit)} + {format_bytes(plan.reserved_bytes, unit)} reserved): {said}", "  ")
    if need.refused:  # a floor judges no change either (memmath/decision.py): none is offered
        if plan.fits is False:
            w("\n" + style.bold("No change is judged: each would be judged on a floor too.") + "\n")
        return w.text()
    if not plan.fits:
        rows = [(s.change, s.total, _judged_headroom(s, plan), _cost(s, unit)) for s in plan.changes if s.fits]
        path = [(s.change, s.total, _judged_headroom(s, plan), _cost(s, unit)) for s in plan.path]
        changes(w, rows, path, path and plan.path[-1].fits, unit, plan.reserved_bytes)
        if instead is not None and (rows or path):
            w.para(f"These changes keep the '{plan.cannot_run.precision}' recipe, which the {plan.gpu.name} cannot "
                   f"run: add --precision {instead.precision} to plan the changes it can.", how=style.dim)
    return w.text()


def serving_text(plan, *, source=None, unit="GB", style=PLAIN, width=WIDTH, context_default=False,
                 reserve_default=True) -> str:
    """A ServingPlan as `memmath infer` prints it."""
    w = Writer(style, width)
    memory, settings, total = plan.memory, plan.settings, int(plan.memory.total)
    shape = plan.serve.model if plan.serve is not None else None
    name = _title(shape, source) if shape is not None else "The model"
    params = f": {shape.n_params:,} parameters." if shape is not None else "."
    w.para(name + params, how=style.bold)
    w.para(f"Serving: weights in {memory.weights_format}, KV cache in {memory.kv_format}, "
           f"batch {settings['batch_size']} x {settings['context_len']:,} tokens"
           + (" (the default context; set --context)" if context_default else "")
           + f", {settings['attention']} attention.")
    w("\n" + style.bold(f"  {'per replica':<36}{'bytes':>22} {unit:>12}") + "\n")
    for part, value in memory.parts().items():
        w(table_row(SERVING_LABELS.get(part, part), int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(table_row("Total", total, unit) + "\n")
    w(style.dim(table_row("(rule of thumb: weights x 1.2)", int(memory.rule_of_thumb), unit)) + "\n")
    w(table_row("CUDA context reserved" + (" (default)" if reserve_default else ""), plan.reserved_bytes, unit) + "\n")
    w(style.bold(table_row("Needed: total + reserve", total + plan.reserved_bytes, unit)) + "\n")
    notes = ["The working set is one prefill's peak as transformers computes it; engines that fuse or chunk the "
             "prefill keep less."]
    if reserve_default:
        notes.append(f"Reserved: {reserve_source(plan.gpu)}; set --reserve.")
    w("\n")
    for note in notes + [sentence(str(n)) for n in plan.notes]:
        w.para(note, how=style.dim)
    if plan.fit is None:
        w.para("Add --gpu NAME (a card from `memmath gpus`) or --gpu-memory SIZE for a verdict: whether it fits, the "
               "longest context that does, and what to change if not.", how=style.dim)
        return w.text()
    verdict(w, plan.fit, total, plan.reserved_bytes, unit, "total")
    batch = settings["batch_size"]
    w(f"  longest context that fits at batch {batch}: {plan.longest_context:,} tokens (the edge, no margin)\n"
      if plan.longest_context else f"  no context fits at batch {batch}\n")
    if plan.decode_tokens_per_second:
        w.para(f"decode at most {plan.decode_tokens_per_second:,.0f} tokens/s per sequence "
               f"({plan.gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s over the weights and KV cache read per token)", "  ")
    if not plan.fit.fits:
        rows = [(c.change, c.total, c.headroom_bytes, c.cost) for c in plan.instead]
        changes(w, rows, [], False, unit, plan.reserved_bytes,
                none="No single change of format, context or batch makes it fit with 5% to spare.")
    return w.text()


def layout_text(plan, run, gpu, *, unit="GB", style=PLAIN, width=WIDTH, max_gpus=None) -> str:
    """A LayoutPlan (memmath.plan_layout) of `run` on `gpu` as `memmath train --plan-layout` prints it."""
    w, name = Writer(style, width), printable(run.model.name)
    if not plan.fits:
        why = (" Tensor and pipeline splits of a model whose blocks differ are not modelled, so only data-parallel "
               "layouts were tried; ZeRO-3 or FSDP shard those (--gpus N --zero 3)." if run.model.mixed else "")
        w.para(f"No layout up to {max_gpus or 1024} GPUs fits {name} on the {gpu.name} ({plan.tried} tried).{why}")
        return w.text()
    lay, need, worst = plan.layout, plan.need, plan.worst
    w(style.bold(f"{name} on {gpu.name}: {lay.n_gpus} GPUs, {lay.describe()}") + "\n")
    w(f"  the rank that needs the most (rank {worst.rank}, pipeline stage {worst.coordinates['pp']}):\n")
    for part, value in worst.memory.parts().items():
        w(table_row(PART_LABELS[part], int(value), unit) + "\n")
    for label, value in worst.buffers.items():
        w(table_row(f"{label} (derived)"[:36], int(value), unit) + "\n")
    w(table_row("Sum of the parts and buffers", worst.total, unit) + "\n")
    if need.basis == "peak":
        w(table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", need.bytes, unit) + "\n")
    w(table_row(f"The card must hold ({need.short})", need.bytes, unit) + "\n")
    w(table_row("Usable on the card", plan.usable_bytes, unit) + "\n")
    for line in plan.trade_offs:
        w.para(line, "  ")
    return w.text()


# ---- JSON: every size in integer bytes ------------------------------------------------------------------
def _basis(need) -> str:
    """The decision's basis as the JSON names it: peak, upper_bound or sum_of_parts."""
    return need.basis.replace(" ", "_")


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
    return None if gpu is None else {"name": gpu.name, "memory_bytes": int(gpu.memory_bytes), "marketed": gpu.marketed,
                                     "kind": gpu.kind}


def _verdict_json(fit, refusal=""):
    """A Fit as the JSON says it; refusal: why its bytes are only a floor (fits null unless even the floor fails)."""
    if fit is None:
        return None
    judged = verdict_of_fit(fit, FIT_MARGIN, refusal)
    return {"fits": judged.fits, "refused": refusal or None, "required_bytes": int(fit.required_bytes),
            "available_bytes": int(fit.available_bytes),
            "headroom_bytes": int(fit.headroom_bytes), "margin_bytes": int(fit.margin_bytes),
            "gpu_memory_bytes": int(fit.gpu.memory_bytes),
            "reserved_bytes": int(fit.gpu.memory_bytes - fit.available_bytes),
            # the one verdict rule's words (memmath/verdict.py), as the lessons say them
            **{key: getattr(said, key) for key in ("spare", "short_by", "what_fails") for said in [judged]}}


def traced_text(answer, fit, peak: int, reserve: int, *, unit="GB", style=PLAIN, width=WIDTH) -> str:
    """A traced answer (memmath.traced) as `memmath train/infer --traced` prints it; with a GPU (fit: check_fit of its
    peak), the one verdict every other answer prints."""
    w = Writer(style, width)
    w(answer.text())
    if fit is not None:
        verdict(w, fit, peak, reserve, unit, "traced peak")
    return w.text()


def traced_json(answer, fit) -> dict:
    """A traced answer as `--traced --json` prints it: its fields, and with a GPU the verdict as training_json has it."""
    return {**answer.as_dict(), "verdict": _verdict_json(fit),
            "gpu": None if fit is None else _gpu_json(fit.gpu)}


def reserve_source(gpu) -> str:
    """Where the default reserve comes from: the card's CUDA context (memmath/cuda_context.py), or without a card
    the conservative figure."""
    return CUDA_CONTEXT_SOURCE if gpu is None else cuda_context_source(gpu)


def _reserve_json(reserve, default, gpu=None) -> dict:
    return {"bytes": reserve, "default": default, "what": reserve_source(gpu) if default else "given by --reserve"}


def layout_json(plan, run, gpu, *, unit="GB") -> dict:
    """A LayoutPlan (memmath.plan_layout) of `run` on `gpu` as `memmath train --plan-layout --json` prints it."""
    worst, lay = plan.worst, plan.layout
    return {"command": "train --plan-layout", "run": repr(run), "gpu": _gpu_json(gpu), "fits": plan.fits, "layouts_tried": plan.tried, "usable_bytes": plan.usable_bytes,
            "layout": None if not plan.fits else {"n_gpus": lay.n_gpus, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp,
                                                  "micro_batches": plan.run.micro_batches},
            "worst_rank": None if not plan.fits else {
                "rank": worst.rank, "parts": {k: int(v) for k, v in worst.memory.parts().items()},
                "buffers": worst.buffers, "total": worst.total},
            "required": None if not plan.fits else {"bytes": plan.need.bytes, "basis": _basis(plan.need),
                                                    "reason": plan.need.reason},
            "trade_offs": list(plan.trade_offs), "unit": unit}


def training_json(plan, *, source=None, unit="GB", seq_default=False, reserve_default=True, status=None) -> dict:
    """A TrainingPlan as `memmath train --json` prints it."""
    run, memory, need = plan.run, plan.memory, plan.requirement
    shape, peak, instead = run.model, need.peak, plan.recipe_instead

    def change(s) -> dict:
        fit = check_fit(s.total, plan.gpu, reserved_bytes=plan.reserved_bytes, margin=FIT_MARGIN)
        return {"change": s.change, "required_bytes": s.total, "basis": _basis(s), "saved_bytes": s.saved,
                "host_bytes": s.host_bytes, "fits": s.fits, "headroom_bytes": int(fit.headroom_bytes), "cost": s.cost,
                "run": repr(s.run),
                "settings": {k: (_method_json(v) if k == "method" else _jsonable(v))
                             for k, v in s.run.settings().items()}}
    return {
        "command": "train",
        "model": {**(source or {}), "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(memory.total_params), "trainable_params": int(memory.trainable_params),
                  "adapter_params": int(memory.adapter_params)},
        "run": repr(run),
        "settings": {**{k: _jsonable(v) for k, v in run.settings().items() if k != "method"},
                     "method": _method_json(run.method), "seq_len_default": seq_default,
                     "effective_batch": int(run.effective_batch)},
        "assumptions": {"recipe": memory.recipe.description, "optimizer": memory.optimizer.description,
                        "method": run.method.describe(), "activations": run.activations, "attention": run.attention,
                        "seq_len": (f"{run.seq_len} tokens, the default (--seq not given)" if seq_default
                                    else f"{run.seq_len} tokens (--seq)"),
                        "resolved_from_the_model": sorted(run.defaulted), "summary": memory.assumptions,
                        "reserved": _reserve_json(plan.reserved_bytes, reserve_default, plan.gpu),
                        "activations_model": ACTIVATION_DESCRIPTIONS[run.activations],
                        "notes": [str(n) for n in plan_notes(plan)], "torch_compile": COMPILE_NOTE},
        "parts": {k: int(v) for k, v in memory.parts().items()},
        "sum_of_parts": int(memory.total),
        "host": None if memory.host is None else memory.host.to_dict(),  # offloaded parts (memmath/offload.py)
        # a split run: the communication buffers (derived) of the rank the requirement judges
        "buffers": {k: int(v) for k, v in buffers(need.memory.run).items()} if is_parallel(run) else {},
        "peak": None if peak is None else {"total": int(peak.total), "phase": peak.phase,
                                           **{k: int(v) for k, v in peak.parts().items()}},
        "required": {"bytes": need.bytes, "basis": _basis(need), "why_not_peak": need.reason or None,
                     "rank": need.rank,  # the GPU whose parts and step these are (a split run's worst rank)
                     "reserved_bytes": plan.reserved_bytes, "with_reserve_bytes": plan.needed_bytes},
        "gpu": _gpu_json(plan.gpu), "verdict": _verdict_json(plan.fit, need.reason if need.refused else ""),
        "cannot_run": None if plan.cannot_run is None else plan.cannot_run.message,
        "cannot_run_instead": None if instead is None else {
            "precision": instead.precision, "option": f"--precision {instead.precision}",
            "required_bytes": instead.requirement.bytes, "basis": _basis(instead.requirement),
            "with_reserve_bytes": instead.requirement.bytes + plan.reserved_bytes, "fits": instead.fits,
            "headroom_bytes": int(instead.fit.headroom_bytes)},
        "changes": None if plan.fit is None or plan.fits is not False else [change(s) for s in plan.changes],
        "path_to_fit": None if not plan.path else [change(s) for s in plan.path],
        "unit": unit, "exit_status": status,
    }


def serving_json(plan, *, source=None, unit="GB", context_default=False, reserve_default=True, status=None) -> dict:
    """A ServingPlan as `memmath infer --json` prints it."""
    memory, settings, total, shape = plan.memory, plan.settings, int(plan.memory.total), plan.serve.model
    return {
        "command": "infer",
        "model": {**(source or {}), "name": shape.name, "family": shape.family, "n_layers": int(shape.n_layers),
                  "total_params": int(shape.n_params)},
        "settings": {**settings, "context_len_default": context_default},
        "assumptions": {"context_len": (f"{settings['context_len']} tokens, the default (--context not given)"
                                        if context_default else f"{settings['context_len']} tokens (--context)"),
                        "attention": settings["attention"], "working_set": WORKING_SET_NOTE,
                        "reserved": _reserve_json(plan.reserved_bytes, reserve_default, plan.gpu),
                        "notes": [str(n) for n in plan.notes]},
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
        "unit": unit, "exit_status": status,
    }


# ---- the catalogs: `memmath models` and `memmath gpus` ------------------------------------------------------
def presets_rows() -> list:
    """Each preset's facts; active_params: what one token passes through (a mixture of experts routes it to
    experts_per_tok of n_experts experts per block), a dense model's every parameter."""
    return [{"name": name, "family": shape.family, "params": int(shape.n_params),
             "active_params": int(shape.active_params), "n_experts": int(shape.n_experts),
             "experts_per_tok": int(shape.experts_per_tok), "n_layers": int(shape.n_layers),
             "hidden_size": int(shape.hidden_size), "n_heads": int(shape.n_heads), "n_kv_heads": int(shape.n_kv_heads),
             "vocab_size": int(shape.vocab_size or 0), "source": PRESET_SOURCES.get(name, "memmath's presets")}
            for name, shape in PRESETS.items()]


def presets_text(rows, *, style=PLAIN, width=WIDTH) -> str:
    """The presets as a table; a name or a source (a Hub id) is never cut."""
    name_width = max(19, *(len(r["name"]) + 2 for r in rows))
    w = Writer(style, width)
    w(style.bold(f"{'preset':<{name_width}}{'parameters':>16}{'layers':>7}{'heads':>6}  source") + "\n")
    for r in rows:
        heads = f"{r['n_heads']}" + (f"/{r['n_kv_heads']}" if r["n_kv_heads"] != r["n_heads"] else "")
        line, source = f"{r['name']:<{name_width}}{r['params']:>16,}{r['n_layers']:>7}{heads:>6}", \
            r["source"].replace(" config.json", "")
        w(line + ("  " if len(line) + 2 + len(source) <= w.width else "\n" + " " * (w.width - len(source))) + source
          + "\n")  # a source too long for the line goes under it, right-aligned, never cut
        if r["n_experts"]:  # a mixture of experts: its parameters per token, under its total
            w(f"{'':<{name_width}}{r['active_params']:>16,} active per token ({r['experts_per_tok']} of "
              f"{r['n_experts']} experts)\n")
    w.para("heads: query/key-value heads where they differ (grouped-query attention). active per token: what a mixture "
           "of experts runs for one token (its shared parts and the experts it is routed to); training still holds "
           "every expert. Sources are each model's config.json on the Hub, or the paper. Any other model: pass its "
           "config.json, its folder or its Hub id (local cache).", how=style.dim)
    w.para(f"The config.json model types memmath reads: {', '.join(SUPPORTED_MODEL_TYPES)}; and the vision-language "
           f"{', '.join(MULTIMODAL_MODEL_TYPES)}.", how=style.dim)
    return w.text()


def gpus_rows() -> list:
    return [{"name": g.name, "marketed": g.marketed, "memory_bytes": int(g.memory_bytes),
             "memory_mib": g.memory_bytes // 2**20, "bandwidth_bytes_per_s": int(g.bandwidth_bytes_per_s),
             "bf16_tflops": g.bf16_tflops, "kind": g.kind, "note": g.note,
             "cuda_context_bytes": int(g.cuda_context_bytes), "cuda_context_source": cuda_context_source(g)}
            for g in GPUS.values()]


def gpus_text(rows, *, style=PLAIN, width=WIDTH) -> str:
    w = Writer(style, width)
    w(style.bold(f"{'gpu':<17}{'on the box':>10}{'MiB':>9}{'GB':>8}{'GiB':>8}{'GB/s':>7}{'TFLOP/s':>9}  kind") + "\n")
    for r in rows:
        tflops = f"{r['bf16_tflops']:g}" + ("*" if r["note"] else "")
        w(f"{r['name']:<17}{r['marketed']:>10}{r['memory_mib']:>9,}{r['memory_bytes'] / 1e9:>8.2f}"
          f"{r['memory_bytes'] / 2**30:>8.2f}{r['bandwidth_bytes_per_s'] / 1e9:>7,.0f}{tflops:>9}  {r['kind']}\n")
    w.para("* no bf16: fp16 throughput. " + GPU_SOURCES[0].upper() + GPU_SOURCES[1:] + ". Any other card: "
           "--gpu-memory 24GiB.", how=style.dim)
    contexts = {}
    for r in rows:
        contexts.setdefault(r["cuda_context_bytes"] // 2**20, []).append(r["name"])
    w.para("CUDA context reserved by default (lazy module loading; --json says each source): " + "; ".join(
        f"{mib:,} MiB on the {', '.join(names)}" for mib, names in sorted(contexts.items())) + ".", how=style.dim)
    return w.text()


def counts_text(counts: dict) -> str:
    """One model's parameters, total and active per token (memmath.parameter_counts), as `memmath models MODEL`
    prints them."""
    experts = (f" ({counts['experts_per_tok']} of {counts['n_experts']} experts)" if counts["n_experts"] else
               " (a dense model: every parameter)")
    return (f"{counts['name']}: {counts['params']:,} parameters; {counts['active_params']:,} active per token"
            f"{experts}, {counts['active_params_without_embeddings']:,} without the input embedding\n")
