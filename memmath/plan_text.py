"""A plan as the text `memmath train` and `memmath infer` print: tables of bytes, the verdict, the changes.

The command line writes these for a terminal (with colour, memmath.cli); str(plan) and a notebook's
rendering of a TrainingPlan or ServingPlan read the same, so a plan printed in Python says what the
command line says. Every string a config.json or a path provides passes through printable() first:
a model's name is data, never a terminal escape code or a line of its own.
"""

from __future__ import annotations

import os
import textwrap

from .gpus import CUDA_CONTEXT_SOURCE, FIT_MARGIN, check_fit
from .parallel import layout
from .training import PART_LABELS
from .units import format_bytes, to_unit

WIDTH = 80
MAX_SHOWN = 120  # characters of a config-provided string shown (a name, a path)
WORKING_SET_NOTE = ("the peak of one prefill over the whole context (transformers' implementations; serving engines "
                    "that fuse or chunk keep less)")
SERVING_LABELS = {"weights": "Weights", "quantization_constants": "Quantization constants", "kv_cache": "KV cache",
                  "working_set": "Prefill working set"}


def printable(text) -> str:
    """A string from a config or a path, as printed: each character that is not printable (escape codes, line
    breaks, bidirectional controls) written as its Python escape, and at most MAX_SHOWN characters."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
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
    return "peak" if need.basis == "peak" else "sum of the parts"


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


def printable_prose(text: str) -> str:
    """Prose with every non-printable character written as its escape (a name inside a note is data)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def verdict(w: Writer, fit, required, reserve, unit, basis, cannot=None) -> None:
    """The verdict: fits or not, and why; with `cannot` (a RecipeWarning: the card has no bf16), one verdict that
    says so ("would fit, but cannot run here"), never "fits" beside a recipe the card cannot run."""
    gpu, style = fit.gpu, w.style
    memory = (f"{gpu.memory_bytes:,} bytes, given by --gpu-memory" if gpu.kind == "custom" else
              f"{format_bytes(gpu.memory_bytes, unit)}, {gpu.memory_bytes // 2**20:,} MiB as the driver reports it")
    w("\n" + style.bold(f"{gpu.name}") + f" ({memory}):\n")
    spare = format_bytes(fit.headroom_bytes, unit)
    if fit.fits and cannot is not None:
        head = style.bad("would fit") + f", with {spare} to spare, " + style.bad("but cannot run here")
    elif fit.fits:
        head = style.good("fits") + f", with {spare} to spare"
    elif fit.headroom_bytes >= 0:
        head = style.bad("does not fit") + f": {spare} to spare is less than the " \
               f"{format_bytes(fit.margin_bytes, unit)} kept free (5% of the need, the peak estimate's tolerance)"
    else:
        head = style.bad("does not fit") + f": short by {format_bytes(-fit.headroom_bytes, unit)} on {gpu.name}"
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
           + (f", {run.grad_accum_steps} micro-batches per optimizer step (effective batch "
              f"{run.effective_batch:,})" if run.grad_accum_steps > 1 else "")
           + f", {run.attention} attention, dropout {'on' if run.dropout else 'off'}, checkpointing "
           f"{'on' if run.checkpointing else 'off'}, activations: {run.activations} model{sharding}.")
    w("\n" + style.bold(f"  {'per GPU':<36}{'bytes':>22} {unit:>12}") + "\n")
    for part, value in memory.parts().items():
        w(table_row(PART_LABELS[part], int(value), unit) + "\n")
    w("  " + "-" * 72 + "\n")
    w(table_row("Sum of the parts", int(memory.total), unit) + "\n")
    if need.peak is None and need.bytes > int(memory.total):  # a parallel rank's communication buffers (derived)
        w(table_row("Communication buffers (derived)", need.bytes - int(memory.total), unit) + "\n")
    if need.peak is not None:
        w(table_row(f"Peak of the step ({need.peak.phase.replace('_', ' ')})", int(need.peak.total), unit) + "\n")
    w(table_row("CUDA context reserved" + (" (default)" if reserve_default else ""), plan.reserved_bytes, unit) + "\n")
    which = "peak" if need.basis == "peak" else "sum"
    w(style.bold(table_row(f"Needed: {which} + reserve", plan.needed_bytes, unit)) + "\n")
    notes = [f"The card must hold {need.note}.", defaults_said(run)]
    if reserve_default:
        notes.append(f"Reserved: {CUDA_CONTEXT_SOURCE}; set --reserve.")
    w("\n")
    for note in [n for n in notes if n] + [sentence(str(n)) for n in plan_notes(plan)]:
        w.para(note, how=style.dim)
    if plan.fit is None:
        w.para("Add --gpu NAME (a card from `memmath gpus`) or --gpu-memory SIZE for a verdict: whether it fits, and "
               "what to change if not.", how=style.dim)
        return w.text()
    verdict(w, plan.fit, need.bytes, plan.reserved_bytes, unit, basis_words(need), plan.cannot_run)
    instead = plan.recipe_instead
    if instead is not None:  # the run the card would train instead, judged as the verdict is
        fit, other = instead.fit, instead.requirement
        said = (f"fits, with {format_bytes(fit.headroom_bytes, unit)} to spare" if fit.fits else
                f"does not fit either: short by {format_bytes(-fit.headroom_bytes, unit)}"
                if fit.headroom_bytes < 0 else "does not fit either: less than 5% to spare")
        w.para(f"with --precision {instead.precision} instead: needs "
               f"{format_bytes(other.bytes + plan.reserved_bytes, unit)} (the {basis_words(other)} "
               f"{format_bytes(other.bytes, unit)} + {format_bytes(plan.reserved_bytes, unit)} reserved): {said}", "  ")
    if not plan.fits:
        rows = [(s.change, s.total, _judged_headroom(s, plan), s.cost) for s in plan.changes if s.fits]
        path = [(s.change, s.total, _judged_headroom(s, plan), s.cost) for s in plan.path]
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
        notes.append(f"Reserved: {CUDA_CONTEXT_SOURCE}; set --reserve.")
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
