"""Lesson 8's words and drawing: what the planner's run cell hands its numbers to.

The lesson computes in view (every memmath call sits in a cell a learner can open); these functions only word
and draw what it computed: the verdict's callout, the number's recipe, how far the run goes, the chart and the
changes that help, and the folded tables, each into the page's live chart and live views (`Views`), which cells
that read no control show once. Kept here, not in hidden cells, so that marimo reads and compiles them once, as
a module's bytecode, rather than from the notebook's source at every start.
"""

from __future__ import annotations

from dataclasses import dataclass

import marimo as mo
import pandas as pd

from memmath import format_bytes, to_unit

from . import requirement_view, viz
from .live_html import cached_md
from .pasted_config import pasted_text
from .reference import literature

__all__ = ["Views", "peak_moment", "sections", "show_no_run", "show_traced", "show_verdict", "verdict_words"]


@dataclass(frozen=True)
class Views:
    """The page's live chart and the live views (memmath_lessons.live_html) under the verdict, in page order."""

    bars_chart: object
    recipe: object
    basis: object
    far: object
    changes: object
    parts: object
    catalog: object
    comparison: object
    needed: object

    def sections(self) -> tuple:
        """Every live view, in page order."""
        return (self.recipe, self.basis, self.far, self.changes, self.parts, self.catalog, self.comparison,
                self.needed)

    def folded(self) -> tuple:
        """The live views after the number's recipe."""
        return self.sections()[1:]


def peak_moment(peak):
    """(phase, moment) where the step's peak falls, for a run whose peak memmath models."""
    _phase, _moment, _ = max(peak.moments, key=lambda m: m[2])
    return {"forward": "the forward pass", "backward": "the backward pass",
            "optimizer_step": "the optimizer step"}.get(_phase, _phase), _moment


def show_traced(traced_answer, verdict, failure, *, unit):
    """What PyTorch's trace found, or why it could not trace the step."""
    if traced_answer is None:
        return mo.callout(mo.md(f"PyTorch could not trace it: {pasted_text(failure)}"), kind="danger")
    _unit = unit
    return mo.vstack([
        mo.md(f"**Traced by PyTorch:** the peak of every step after the first is "
              f"{format_bytes(traced_answer.peak_step2_bytes, _unit)}, in the "
              f"{traced_answer.peak_step2_phase.replace('_', ' ')}. On the {verdict.gpu_name}, with "
              f"{format_bytes(verdict.reserved_bytes, _unit)} reserved for the CUDA context: "
              f"{verdict.headline(_unit)} {verdict.why(_unit)} After you change a setting, press the "
              "button again to trace it."),
        mo.plain_text(traced_answer.text())])


# What the run's cell shows, each from the inputs it depends on.
def shown_parts(requirement, unit):
    """Your run's parts, their sum, what the step's peak adds, and the requirement: (the frame, the table)."""
    _frame = requirement_view.requirement_table(requirement, unit)
    _table = viz.plain_table(_frame)
    if requirement.basis == "peak":
        _table = mo.vstack([_table, cached_md(
            "The parts add to their sum; a step never holds all of them at once and holds temporaries that "
            "no part counts, so the step's peak differs from the sum. The row before the last is that "
            "difference, which makes the table add to what the card must hold, the number the verdict, the "
            "chart's black ticks and the changes judge.").style({"font-size": "0.9em"})])
    return _frame, _table


def shown_catalog(need, catalog, reserved, unit, margin, *, gpu_marketed):
    """Every card of the catalog against the run's requirement (shown in the fold the views' cell draws): catalog
    is each card's verdict by the one rule the verdict above uses (memmath.verdict: the reserve, 5% kept free; a
    floor says "does not fit" or no verdict, never "fits")."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    peak_bytes, _verdicts = need.bytes, catalog
    catalog_frame = pd.DataFrame([{
        "gpu": _v.gpu_name, "marketed": gpu_marketed[_v.gpu_name],
        f"memory ({unit})": round(to_unit(_v.memory_bytes, unit), 2),
        f"to spare or short ({unit})": (f"{_f(_v.spare)} left for the activations" if _v.fits is None else
                                        f"{_f(_v.spare)} to spare" if _v.fits else f"short by {_f(_v.short_by)}"),
        "fits": "no verdict" if _v.fits is None else "yes" if _v.fits else "no"} for _v in _verdicts])
    return catalog_frame, mo.vstack([cached_md(f"""
    The same {format_bytes(peak_bytes, unit)} per GPU against every card, with {"each card's own CUDA context" if reserved is None else _f(reserved) + " for the CUDA context"} reserved on each
    (section 4) and {margin:.0%} of the requirement kept free, as the verdict judges. "marketed" is the size on the box, in binary units (GiB); "memory" is what the
    driver reports, the same or a little less.
    """), viz.plain_table(catalog_frame)])


def shown_comparison(run, unit, compared_needs, serving, *, precision_dropdown, optimizer_dropdown):
    """The article's comparison of full, partial and PEFT for this run's model and step, and "needed or wanted"
    (the two sections under their headings, which the views' cell shows)."""
    # Each method's requirement (memmath.requirement, the run's cell), the number the verdict above judges its run
    # by; a split run is compared with every GPU holding a copy.
    _split, _needs = run.tp * run.pp > 1, compared_needs
    compared = {n: need.memory for n, need in _needs.items()}
    comparison_rows = {
        "trainable parameters": {n: f"{r.trainable_params:,} ({r.trainable_fraction:.2%})" for n, r in compared.items()},
        f"memory per GPU: what the card must hold ({unit})": {
            n: f"{format_bytes(need.bytes, unit)} ({requirement_view.requirement_words(need)})"
            for n, need in _needs.items()},
    }
    _r = literature.REPORTED  # each figure with its full source in memmath_lessons.reference.literature
    _few = "some PEFT methods do well with a few thousand examples (the article)"
    _rows = {**comparison_rows,
             "quality": {"full": "the reference",
                         "partial (freeze)": f"about {_r['bert_large_partial_share'].value:.0f}% of BERT-large's parameters had "
                                             "to train to match full finetuning on GLUE (Houlsby et al. 2019, as the article reports)",
                         "PEFT: adapters": f"within {_r['houlsby_glue_gap'].value}% of full finetuning on GLUE, training "
                                           f"{_r['houlsby_trainable_share'].value}% of the parameters (Houlsby et al. 2019)",
                         "PEFT: LoRA": "on par with or better than full finetuning on RoBERTa, DeBERTa, GPT-2 and GPT-3 "
                                       "(Hu et al. 2021)"},
             "inference latency": {"full": "none added", "partial (freeze)": "none added",
                                   "PEFT: adapters": f"{_r['lora_adapter_latency'].value}% slower forward pass, GPT-2 medium "
                                                     "at batch 1 (Hu et al. 2021, Table 1)",
                                   "PEFT: LoRA": "none once the update is merged into the weights (Hu et al. 2021)"},
             "data needed": {"full": "tens of thousands to millions of examples (the article)",
                             "partial (freeze)": "not stated by the article", "PEFT: adapters": _few, "PEFT: LoRA": _few}}
    comparison_frame = pd.DataFrame(_rows).T
    _comparison_table = viz.plain_table(comparison_frame.reset_index(names="").astype(str),
                                        wrapped_columns=list(comparison_frame.columns))
    _unsplit = (" The model is not split here (t = p = 1, every GPU a whole copy): memmath models tensor and "
                "pipeline parallelism for full finetuning only." if _split else "")
    _comparison_part = [cached_md(f"""
    The article closes with a table of the three approaches. Here it is rebuilt from this lesson's
    settings for your model: the same recipe ({precision_dropdown.selected_key}), optimizer ({optimizer_dropdown.selected_key}),
    batch and sequence length, with the freeze, adapter and LoRA controls above. Trainable parameters and memory are computed; quality, latency
    and data are what the papers and the article report, with their sources.{_unsplit}
    """), _comparison_table]

    _serve = serving
    _peft = _needs["PEFT: LoRA"].bytes
    _needed_part = cached_md(f"""
    The article ends on a question a team should ask before any of this: is finetuning **needed**,
    or only **wanted**? Engineers sometimes finetune when they know it is not needed, to learn how,
    and a leader may find it hard to tell the two apart. The memory bill does not care why: a
    finetune carries training-side costs whether or not it was needed. Serving {pasted_text(run.model.name)} as it is
    ({viz.lesson_link("07_inference", "lesson 7")}) takes about {format_bytes(_serve.total, unit)} at
    {run.seq_len:,} tokens; even the LoRA run above needs {format_bytes(_peft, unit)} per GPU,
    and full finetuning {format_bytes(_needs["full"].bytes, unit)} (what the card must hold, as the
    verdict judges it). If prompting the model as it is
    does the job, the cheapest finetune is the one you do not run.
    """)

    return mo.vstack(_comparison_part), _needed_part


def sections(views, *, gpu_marketed, precision_dropdown, optimizer_dropdown):
    """show_sections for this page: it fills `views` (a Views) for one run. gpu_marketed is each card's size on the
    box; the two dropdowns name the recipe and the optimizer in the article's comparison."""
    # What the sections showed for each setting, kept for the settings a learner returns to (a slider moved back and
    # forth): their tables and prose take some 10 ms of pandas and markdown a move, putting them back almost nothing.
    _shown = {}

    def show_sections(run, plan, suggestions, path, limits, first_peak, chart_needs, catalog, compared_needs, serving,
                      suggestions_frame, trained_context, *, methods, max_gpus, allowed_gpus, reserved, unit, margin):
        """The sections under the verdict, into their live views: the recipe, how far the run goes, the chart and the
        changes, the parts, the catalog, the comparison and "needed or wanted". Returns the parts' frame."""
        # Everything they show follows from these (the other methods for the comparison, the card, what it keeps back,
        # the context the model was trained on, which a pasted config.json gives beside its shape).
        _key = (run.cache_key, tuple(methods.items()), plan.fit.gpu, reserved, max_gpus, allowed_gpus, unit, margin,
                trained_context)
        if _key in _shown:
            _held, _chart, parts_frame = _shown[_key]
            for _view, _html in zip(views.sections(), _held):
                _view.html = _html  # as LiveHtml.update leaves it; nothing travels when it is what is shown
            views.bars_chart.update(_chart)
            return parts_frame
        if len(_shown) >= 256:  # a bound, as memmath's own caches have
            _shown.clear()
        show_recipe(views, plan, first_peak, reserved=reserved, unit=unit, margin=margin)
        show_far(views, run, plan, limits, trained_context, max_gpus=max_gpus, allowed_gpus=allowed_gpus, unit=unit)
        _chart = show_changes(views, plan, suggestions, path, chart_needs, suggestions_frame, unit=unit)
        parts_frame, _parts_table = shown_parts(plan.requirement, unit)
        views.parts.update(_parts_table)
        views.catalog.update(shown_catalog(plan.requirement, catalog, reserved, unit, margin,
                                           gpu_marketed=gpu_marketed)[1])
        _comparison_part, _needed_part = shown_comparison(run, unit, compared_needs, serving,
                                                          precision_dropdown=precision_dropdown,
                                                          optimizer_dropdown=optimizer_dropdown)
        views.comparison.update(_comparison_part)
        views.needed.update(_needed_part)
        _shown[_key] = (tuple(_view.html for _view in views.sections()), _chart, parts_frame)
        return parts_frame

    return show_sections


def show_no_run(views, refusal):
    """No run to plan (the method cannot train this model): the chart and the sections say so, and the run's cell
    stops with the refusal as its output."""
    _why = pasted_text(refusal)
    views.bars_chart.update({"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": 420,
                       "height": 40, "data": {"values": [{"text": "No run: the method's refusal is below."}]},
                       "mark": {"type": "text", "align": "left", "x": 0, "fontSize": 13},
                       "encoding": {"text": {"field": "text", "type": "nominal"}}})
    views.recipe.update(mo.md(""))
    for _view in views.folded():
        _view.update(mo.md("*No run: the method cannot train this model (the verdict above says why).*"))
    mo.stop(True, mo.callout(mo.md(f"**This run cannot be planned:** {_why}. Choose another method above, "
                                   "or paste the config.json without its quantization_config to plan the "
                                   "model in 16 bits."), kind="warn"))


def verdict_words(run, plan, *, per, unit, margin):
    """The verdict in words: the run's number against the card, or its floor, or the recipe the card needs."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    gpu, requirement, fit, verdict, _cannot = plan.fit.gpu, plan.requirement, plan.fit, plan.verdict, plan.cannot_run
    _usable = f"{_f(fit.available_bytes)} usable of {_f(gpu.memory_bytes)}"
    _what = ("at the peak of a training step (after the first, when the optimizer states exist)"
             if requirement.basis == "peak" else f"as {requirement.words} ({requirement.reason})")
    _margin = f", keeping {margin:.0%} of it free" if fit.margin_bytes else ""
    _facts = f"{_f(requirement.bytes)} {per} {_what}; one {gpu.name} has {_usable}"
    _numbers = f"{_facts}: the run {verdict.sentence(unit)}."
    # One verdict, also where the card cannot compute the recipe (pure bf16 on a T4 or V100): the run as set, then
    # the run the card would train instead (plan.cannot_run names it), with its own requirement and verdict.
    if requirement.refused:  # a model type whose activations are not checked against PyTorch: a floor, no "fits"
        _why = pasted_text(requirement.reason)
        return (f"**{verdict.headline(unit)}** One {gpu.name} has {_usable}. {_why[0].upper()}{_why[1:]}."
                + (f" The {gpu.name} could not run this recipe anyway: it has no {_cannot.needs}."
                   if _cannot is not None else ""))
    if _cannot is None:
        return f"**{verdict.headline(unit)}** {_facts}. {verdict.why(unit)}"
    _instead, instead_fit = plan.recipe_instead.requirement, plan.recipe_instead.fit  # judged as the verdict is
    return (
        (f"**It would fit, but the {gpu.name} has no {_cannot.needs}.** " if fit.fits else
         f"**It does not fit, and the {gpu.name} could not run it anyway: it has no {_cannot.needs}.** ")
        + _numbers + f" The {gpu.name} ({gpu.architecture}) computes in {', '.join(gpu.compute_formats)}: "
        f"pure bf16 needs {_cannot.needs} arithmetic (Ampere and later). Choose fp16 mixed precision instead "
        f"(`{_cannot.instead}` as the recipe above: fp16 weights and gradients with loss scaling, an fp32 master "
        f"copy and fp32 optimizer states): that run needs {_f(_instead.bytes)} {per} "
        f"({requirement_view.requirement_words(_instead)}), and "
        + (f"**it fits**, with {_f(instead_fit.headroom_bytes)} to spare." if instead_fit.fits else
           f"**it does not fit either**: {_f(instead_fit.headroom_bytes)}{_margin}."))


def show_verdict(model, run, plan, trained_context, layout_refused, *, layout_words, split, unit, margin):
    """The verdict's callout, under the warnings that apply (the output of the run's cell)."""
    settings, verdict = run.settings(), plan.verdict
    _per = (f"on the GPU that needs the most ({settings['n_gpus']} GPUs: {layout_words})" if layout_words else
            f"per GPU ({settings['n_gpus']} GPUs)" if settings["n_gpus"] > 1 else "on the GPU")
    _verdict = verdict_words(run, plan, per=_per, unit=unit, margin=margin)
    _long = trained_context is not None and settings["seq_len"] > trained_context
    _warn = [mo.callout(cached_md(f"{pasted_text(model.name)} was trained on at most {trained_context:,} tokens; a "
                                  f"{settings['seq_len']:,}-token sequence is arithmetic only."), kind="warn")] if _long else []
    if layout_refused:
        _warn.append(mo.callout(cached_md(f"The model cannot be split {split[0]} x {split[1]} ways here: "
                                          f"{pasted_text(layout_refused)} This page shows the run with every GPU "
                                          "holding a whole copy (t = p = 1)."), kind="warn"))
    if settings["zero_stage"] == 3 and settings["n_gpus"] > 1 and model.tensor_count_known:
        _layer = 2 * model.largest_block_params  # the largest block's weights in 16 bits
        _warn.append(cached_md(
            f"*Beyond its shard:* ZeRO stage 3 (and FSDP's full sharding) gathers each block's full weights on every "
            f"GPU just before that block runs, in the forward pass and again in the backward pass, and frees them "
            f"after; with prefetching the next block's arrive early, and the gather and the gradients' "
            f"reduce-scatter pass through communication buffers. {'The largest' if model.mixed else 'One'} block of "
            f"{pasted_text(model.name)} in 16 bits is "
            f"{format_bytes(_layer, unit)}; the requirement above counts the gathered blocks, their gradients and "
            "the buffers (whose size is a setting of DeepSpeed or FSDP, not of the model).").style({"font-size": "0.9em"}))
    _kind = ("danger" if verdict.fits is False else "warn" if plan.cannot_run is not None or verdict.fits is None
             else "success")
    return mo.vstack([*_warn, mo.callout(cached_md(_verdict), kind=_kind)])


def show_recipe(views, plan, first_peak, *, reserved, unit, margin):
    """The number's recipe (the parts, then where the step peaks) and, folded, the card's reserve and assumptions."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    result, requirement, fit, gpu = plan.memory, plan.requirement, plan.fit, plan.fit.gpu
    # The parts, then where the step peaks (activations are gone by the optimizer step, the optimizer's
    # temporaries are not; memmath.peak holds each moment to PyTorch's measured peak).
    _recipe = " + ".join(f"{viz.ALL_LABELS[_p].lower()} {_f(_b)}" for _p, _b in result.parts().items() if _b)
    _recipe = f"**The number.** The parts: {_recipe} = {_f(result.total)}."
    if requirement.basis == "peak":
        _phase, _moment = peak_moment(requirement.peak)
        _recipe += (f" Not all of them are alive at once, and the step holds temporaries too: it peaks at "
                    f"**{_f(requirement.bytes)}** in {_phase} ({_moment}).")
        if first_peak is not None:  # the first step, before the optimizer's states exist
            _fphase, _fmoment = peak_moment(first_peak)
            # The moment is named once where both steps peak in the same one.
            _fwhere = _fphase if (_fphase, _fmoment) == (_phase, _moment) else f"{_fphase} ({_fmoment})"
            _recipe += (f" The first step, before the optimizer's states exist, peaks at {_f(first_peak.total)} in "
                        f"{_fwhere}" + (": the same figure, so the first step is as tight as the rest."
                                        if first_peak.total == requirement.bytes else
                                        f"; every later step needs {_f(requirement.bytes - first_peak.total)} more."
                                        if first_peak.total < requirement.bytes else "."))
    _card = (f"The card: {_f(gpu.memory_bytes)} ({gpu.memory_bytes // 2**20:,} MiB as the driver reports it) less "
             f"{_f(plan.reserved_bytes)} kept back for the CUDA context (section 4"
             + (f": the {gpu.name}'s own, {gpu.context_reserve.lazy_source})" if reserved is None else ")")
             + (f", and {margin:.0%} of the requirement kept free." if fit.margin_bytes else "."))
    views.recipe.update(cached_md(_recipe))
    views.basis.update(mo.vstack([cached_md(_card),
                                 cached_md(f"*Assumptions:* {pasted_text(result.assumptions)} "
                                           + " ".join(f"Note: {pasted_text(n)}." for n in result.notes))
                                 .style({"font-size": "0.9em"})]))


def show_far(views, run, plan, limits, trained_context, *, max_gpus, allowed_gpus, unit):
    """How far the run goes, searched directly (not on a refused verdict: each search would judge it)."""
    if limits is None:
        views.far.update(cached_md("Not searched: the fewest GPUs, the largest batch and the longest sequence would "
                                  "each be judged on activations memmath has not checked for this model type (the "
                                  "verdict above says why and what would give them)."))
        return
    settings, gpu, _split = run.settings(), plan.fit.gpu, run.tp * run.pp > 1
    if limits["gpus"] == 1:
        _gpus = f"**1**: it fits on one {gpu.name}"
    elif limits["gpus"] is None:
        _gpus = (f"not on {max_gpus:,} {gpu.name}s or fewer, even with ZeRO stage 3 (activations are not sharded: "
                 "each GPU keeps its own batch's)")
    else:
        _stage = ("" if settings["zero_stage"] == limits["stage"] else
                  f" with ZeRO stage {limits['stage']}; without ZeRO each data-parallel GPU keeps "
                  + ("the whole model" if not _split else f"its whole 1/{run.tp * run.pp} share of the t x p split")
                  + ", so more data-parallel GPUs never help")
        _gpus = f"**{limits['gpus']:,}** {gpu.name}{'s' if limits['gpus'] > 1 else ''}{_stage}"
    _on = f"on {settings['n_gpus']:,} GPUs, ZeRO stage {settings['zero_stage']}" if settings["n_gpus"] > 1 else "on one GPU"
    _batch = ("not even one sequence" if limits["batch"] is None else
              f"**{limits['batch']:,}** sequences of {settings['seq_len']:,} tokens")
    if limits["seq_len"] is None:
        _seq = "not even one token"
    else:
        _beyond = (f"; the model was trained on {trained_context:,}, so past that the number is memory only"
                   if trained_context is not None and limits["seq_len"] > trained_context else "")
        _seq = f"**{limits['seq_len']:,}** tokens per sequence at batch {settings['batch_size']:,}{_beyond}"
    _lines = ["Searched directly (every whole number, each checked exactly in bytes), with everything else as you set it:",
              "", f"- fewest GPUs that fit, of the {max_gpus:,} you allow: {_gpus};"]
    if max_gpus > allowed_gpus:
        _lines[0] += (f" (You allow {allowed_gpus:,} GPUs but the run already has {max_gpus:,}: "
                      f"the changes may use {max_gpus:,}.)")
    if limits["batch"] is None and limits["seq_len"] is None:
        _lines.append(f"- largest batch and longest sequence {_on}: none; without any activations its other parts "
                      f"alone add up to {format_bytes(plan.memory.without_activations, unit)} per GPU.")
    else:
        _lines += [f"- largest batch that fits {_on}: {_batch};", f"- longest sequence that fits {_on}: {_seq}."]
    views.far.update(cached_md("\n".join(_lines)))


def show_changes(views, plan, suggestions, path, chart_needs, suggestions_frame, *, unit):
    """The live chart (your run and the first single changes, each by what the card must hold: the parts, what
    the step's peak adds to them, a black tick at the requirement) and the changes that help, ranked; returns the
    chart drawn."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    gpu, _cannot = plan.fit.gpu, plan.cannot_run
    _chart = requirement_view.bars_output(
        chart_needs, unit, title="Memory per GPU, your run and single changes: the parts, what the step's peak adds, "
        "and what the card must hold (black tick)", capacity_bytes=plan.fit.available_bytes, capacity_label=gpu.name)
    views.bars_chart.update(_chart)
    if plan.requirement.refused:
        _path = ("No change is judged: each would be judged on a floor too (the verdict above).")
    elif not suggestions:
        _path = "No single change in the planner's list lowers this run's memory."
    elif not path:
        _path = "It already fits; the changes below would free memory for a larger batch or longer sequences."
    elif path[-1].fits and len(path) == 1:
        _n_fit = sum(s.fits for s in suggestions)
        _which = ("Only one change below makes it fit:" if _n_fit == 1 else
                  f"{_n_fit} changes below make it fit; the one that changes the run least (the smallest saving "
                  "that still fits) is")
        _path = f"{_which} **{path[0].change}** ({_f(path[0].total)})."
    elif path[-1].fits:
        _steps = " then ".join(f"**{s.change}** ({_f(s.total)})" for s in path)
        _path = ("No single change makes it fit. The planner takes the largest saving that keeps your batch, looks "
                 "again, and once some change makes it fit takes the smallest that does: "
                 f"{_steps}.")
    else:
        _path = ("Even all of these changes together do not make it fit: choose a larger GPU, a smaller model, "
                 "or allow more GPUs above.")
    if _cannot is not None and suggestions:
        _path += (f" These changes keep the recipe you chose, which the {gpu.name} cannot run: choose "
                  f"`{_cannot.instead}` above to plan the changes it can.")
    views.changes.update(mo.vstack([cached_md(_path), viz.plain_table(suggestions_frame.round(2),
                                                                     wrapped_columns=["cost"])]))
    return _chart
