"""Lesson 6's words and charts: what its computing cells hand the numbers to.

The lesson computes in view (every memmath call sits in a cell a learner can open); these functions only word
and draw what it computed: LoRA's number and its per-matrix table, the side-by-side of full finetuning, LoRA and
QLoRA, and QLoRA's 65B run, each into the page's live charts and live views (memmath_lessons.live_chart,
live_html), which cells that read no control show once. Kept here, not in hidden cells, so that marimo reads and
compiles them once, as a module's bytecode, rather than from the notebook's source at every start.
"""

from __future__ import annotations

import marimo as mo
import pandas as pd

from memmath import format_bytes, to_unit

from . import requirement_view, viz
from .live_html import cached_md

__all__ = ["fp32_adapter_cost_words", "show_guanaco", "show_lora_number", "side_by_side_shower", "side_by_side_words"]


def show_lora_number(shape, model_label, lora_method, lora_trainable, without_activations, doubled_rank_trainable, *,
                     number_view, matrix_view):
    """The number with its recipe (into number_view), the per-matrix table in its fold (into matrix_view), and the
    takeaway (returned, to show)."""
    rank, targets = lora_method.rank, lora_method.targets
    _matrices = shape.lora_matrices(targets)
    _per_block = sum(_d_in + _d_out for _, _d_in, _d_out in _matrices)
    _rows = []
    for _target in ("q", "k", "v", "o", "gate", "up", "down"):  # a dense decoder's seven matrices (mm.models.LORA_TARGETS has MoE names too)
        [(_module, _d_in, _d_out)] = shape.lora_matrices([_target])
        _rows.append({"matrix": _module, "d_in x d_out": f"{_d_in:,} x {_d_out:,}", "adapted": "yes" if _target in targets else "",
                      "matrix params (per block)": _d_in * _d_out, "LoRA params (per block)": lora_method.matrix_params(_d_in, _d_out),
                      "LoRA / matrix": f"{lora_method.matrix_params(_d_in, _d_out) / (_d_in * _d_out):.2%}"})
    _full, _lora, _qlora = without_activations["full"], without_activations["lora"], without_activations["qlora"]
    _gb = viz.readable_size  # 50.33 MB, not 0.05 GB
    number_view.update(cached_md(f"""
    **The number.** {model_label} with r = {rank} on {", ".join(targets)}: **{lora_trainable:,}** trainable
    parameters = {rank} × {_per_block:,} (d_in + d_out, summed over the {len(_matrices)} adapted
    {"matrix" if len(_matrices) == 1 else "matrices"} of a block) × {shape.n_layers} blocks, **{lora_trainable / shape.n_params:.3%}**
    of the model's {shape.n_params:,}. In pure bf16 with AdamW, with peft's default fp32 adapters (4 B of weight,
    4 B of gradient and 8 B of states per adapter parameter), before activations:

    | | weights | gradients + optimizer states | total |
    |:---|---:|---:|---:|
    | full finetuning | {_gb(_full.weights)} | {_gb(_full.trainable_state)} | **{_gb(_full.without_activations)}** |
    | LoRA r = {rank} | {_gb(_lora.weights)} | {_gb(_lora.trainable_state)} | **{_gb(_lora.without_activations)}** |
    | QLoRA r = {rank} | {_gb(_qlora.weights + _qlora.quantization_constants)} (NF4 + constants) | {_gb(_qlora.trainable_state)} | **{_gb(_qlora.without_activations)}** |
    """))
    matrix_view.update(pd.DataFrame(_rows), caption=f"{model_label}, per block:")
    # The share of this run, as the number above gives it, and at twice the rank (the count is linear in r).
    _share = lora_trainable / shape.n_params
    _doubled = doubled_rank_trainable / shape.n_params
    _share_words = f"{_share:.3%}" + (", a fraction of a percent," if _share < 0.01 else "")
    return mo.callout(cached_md(f"""
    **The takeaway.** At r = {rank} on {", ".join(targets)} the adapters are {_share_words} of the model's
    parameters, and the gradients and optimizer states shrink with them: full finetuning's
    {_gb(_full.trainable_state)} of them become {_gb(_lora.trainable_state)} (fp32 adapters on the bf16 base).
    What is left is the frozen base: QLoRA's 4 bits cut the weights from {_gb(_lora.weights)} to
    {_gb(_qlora.weights + _qlora.quantization_constants)} (constants and adapters included). Doubling r doubles
    the adapters: r = {2 * rank} would train {_doubled:.3%}.
    """), kind="info")


def fp32_adapter_cost_words(lora_fp32, lora_base, unit):
    """What keeping LoRA's adapters in fp32 costs against adapters in the base's format, in words."""
    _fmt = lambda n: viz.readable_size(n, unit)  # noqa: E731  (33.55 MB, not 0.03 GB)
    # fp32 adapters against adapters in the base's format: their weights, gradients and states, and what they save
    # for backward (hf_activations, LoRA: a fp32 adapter on a 16-bit base keeps its own fp32 copy of its input).
    _extra_state = lora_fp32.without_activations - lora_base.without_activations
    _extra_saved = lora_fp32.activations - lora_base.activations
    _costs = ([f"{_fmt(_extra_state)} of weights, gradients and optimizer states"] if _extra_state else []) + (
        [f"{_fmt(_extra_saved)} of activations (each adapted matrix keeps its own fp32 copy of its input, 4 B per "
         "value, where adapters in the base's format keep the input they share)"] if _extra_saved else [])
    if not _costs:
        _fp32_cost = "costs nothing with this recipe: the base's weights are fp32 already, and so are its adapters"
    else:
        _fp32_cost = f"costs **{_fmt(_extra_state + _extra_saved)}** here: " + " and ".join(_costs)
        if not _extra_state:
            _fp32_cost += ("; weights, gradients and states cost the same, since adapters in the base's format get "
                           "an fp32 master copy that fp32 adapters do not need")
    return _fp32_cost


def side_by_side_words(side_by_side, lora_fp32, lora_base, gpu, usable, unit):
    """The text under the side-by-side table: where each method's bytes go, and what fp32 adapters cost."""
    _full, _lora, _qlora = side_by_side.values()
    _fmt = lambda n: viz.readable_size(n, unit)  # noqa: E731  (33.55 MB, not 0.03 GB)
    _fp32_cost = fp32_adapter_cost_words(lora_fp32, lora_base, unit)

    def _fallback(r):  # why a run's activations are the textbook formula's (a Note on the run)
        return "; ".join(n.text.removeprefix("activations: ") for n in r.notes if n.kind == "activations_textbook_fallback")

    if _qlora.activations == _lora.activations:
        _qlora_acts = ("QLoRA keeps what LoRA keeps: each 4-bit matrix is unpacked to the compute format for its "
                       "product and, frozen, saves nothing for the backward pass.")
    elif _qlora.activation_model != _lora.activation_model:
        _qlora_acts = f"QLoRA's are counted with {_fallback(_qlora)}, so they do not compare byte for byte with the others."
    else:
        _qlora_acts = ""
    _acts = (f"Activations: full finetuning keeps {_fmt(_full.activations)}, LoRA {_fmt(_lora.activations)} and "
             f"QLoRA {_fmt(_qlora.activations)}. Every method still runs the whole model forward and back, so they "
             "stay of the same order; they differ because a frozen matrix keeps no input for its own weight's "
             "gradient, while each adapter keeps the input it reads and its r-wide middle. "
             f"{_qlora_acts}")
    if _lora.activation_model == "transformers":
        _how = (f"what transformers' forward pass saves for the backward pass, with "
                f"{'SDPA' if _lora.attention == 'sdpa' else 'eager'} attention and "
                f"{'dropout' if _lora.dropout else 'no dropout'}, as the model's config sets them")
    else:
        _how = f"counted with {_fallback(_lora)}"
    _prose = cached_md(f"""
    LoRA keeps every base weight ({format_bytes(_full.weights, unit)}), adds the adapters
    ({format_bytes(_lora.weights - _full.weights, "MB" if unit == "GB" else "MiB")}), and cuts gradients and optimizer states to the
    adapters'. QLoRA also shrinks the weights, to {format_bytes(_qlora.weights, unit)} plus
    {format_bytes(_qlora.quantization_constants, unit)} of constants (embeddings, norms and the output
    head stay in the recipe's format). {_acts} Keeping the {lora_fp32.trainable_params:,} adapter parameters in fp32
    instead of the base format {_fp32_cost}. "Fits" compares each total with the {gpu.name}'s {format_bytes(gpu.memory_bytes, unit)}
    less {viz.card_reserve_words(gpu)}:
    {format_bytes(usable, unit)} usable (the chart's dashed line). Recipe: {_lora.assumptions} Activations:
    {_how}.
    """)
    return _prose


def side_by_side_shower(*, bars_chart, sbs_table_view, sbs_prose_view):
    """show_side_by_side into the page's live chart and the live views of its table and text."""
    # What the section showed for each setting, kept for the settings a learner returns to (a slider moved back and
    # forth): its chart, table and prose take some 5 ms of pandas and markdown a move, putting them back almost nothing.
    _shown = {}

    def show_side_by_side(model_label, gpu, side_by_side, side_by_side_needs, side_by_side_fits, lora_fp32, lora_base,
                          unit, *, setting):
        """The side-by-side chart's rows, its table and the text under it (into the live views above); setting is
        what they follow from (the model, rank, matrices, adapter format, the run's settings, the card)."""
        if (setting, unit) in _shown:
            _chart, sbs_table_view.html, sbs_prose_view.html = _shown[setting, unit]
            bars_chart.update(_chart)  # as LiveHtml.update leaves the views above: nothing travels when unchanged
            return
        if len(_shown) >= 256:  # a bound, as memmath's own caches have
            _shown.clear()
        _fits, _usable = side_by_side_fits, side_by_side_fits["Full finetuning"].available_bytes
        # Vega-Lite JSON directly (viz.stacked_bars' drawing), into the live chart above: the sliders send it new rows.
        # The card's line stands where its usable memory ends; each bar's black tick is what the card must hold.
        _chart = requirement_view.bars_output(
            side_by_side_needs, unit, title=f"{model_label}: memory of one training step",
            capacity_bytes=_usable, capacity_label=f"{gpu.name}: {format_bytes(_usable, unit)} usable")
        bars_chart.update(_chart)
        _rows = pd.DataFrame([{"method": name, "trainable params": r.trainable_params,
                               f"weights + constants ({unit})": round(to_unit(r.weights + r.quantization_constants, unit), 2),
                               f"grads + states ({unit})": round(to_unit(r.trainable_state, unit), 3),
                               f"activations ({unit})": round(to_unit(r.activations, unit), 2),
                               f"sum of the parts ({unit})": round(to_unit(r.total, unit), 2),
                               f"the card must hold ({unit})": round(to_unit(side_by_side_needs[name].bytes, unit), 2),
                               f"fits {gpu.name}?": "yes" if _fits[name].fits else "no"} for name, r in side_by_side.items()])
        _prose = side_by_side_words(side_by_side, lora_fp32, lora_base, gpu, _usable, unit)
        sbs_table_view.update(_rows)
        sbs_prose_view.update(_prose)
        _shown[setting, unit] = (_chart, sbs_table_view.html, sbs_prose_view.html)

    return show_side_by_side


def show_guanaco(guanaco, guanaco_need, guanaco_fit, guanaco_verdict, guanaco_no_checkpointing,
                 guanaco_no_checkpointing_need, *, a6000, guanaco_chart):
    """The 65B run's chart (new rows for guanaco_chart, the live chart above), its verdict on the a6000 and, folded,
    its parts."""
    _bars = viz.stacked_bars_output(  # viz.stacked_bars' drawing as Vega-Lite JSON, with the legend below it
        viz.breakdown_long({"LLaMA-65B, QLoRA": guanaco}, "GB"), "GB", title="QLoRA's 65B run", capacity_bytes=guanaco_fit.available_bytes,
        capacity_label=f"{a6000.name}: {format_bytes(guanaco_fit.available_bytes)} usable", height=70).spec
    guanaco_chart.update({**_bars, "config": {**_bars["config"], "legend": {"orient": "bottom", "columns": 3}}})
    _saved_as = (f", what transformers' forward pass saves for the backward pass ({guanaco.attention.upper()} attention, "
                 f"{'dropout' if guanaco.dropout else 'no dropout'}, as LLaMA's config sets them)"
                 if guanaco.activation_model == "transformers" else " (the textbook formula)")
    _verdict = mo.callout(mo.md(f"""
    This run needs **{format_bytes(guanaco_need.bytes)}** ({format_bytes(guanaco_need.bytes, "GiB")}),
    {requirement_view.requirement_words(guanaco_need)} (its parts add to {format_bytes(guanaco.total)}): it
    **{guanaco_verdict.sentence()}** on the {guanaco_fit.gpu.name}, before paging moves anything to the CPU.
    """), kind="success" if guanaco_fit.fits else "danger")
    _parts = mo.md(f"""
    The card: {format_bytes(guanaco_fit.available_bytes)} usable, after
    {viz.card_reserve_words(guanaco_fit.gpu)}. Weights and constants take
    {format_bytes(guanaco.weights + guanaco.quantization_constants)} (the NF4 base, with the embeddings,
    head and adapters in bf16); {guanaco.trainable_params:,} adapter parameters add
    {format_bytes(guanaco.trainable_state)} of gradients and optimizer states;
    activations are {format_bytes(guanaco.activations)}{_saved_as}.
    {f"Without gradient checkpointing the same run would need {format_bytes(guanaco_no_checkpointing_need.bytes)} (its parts: {format_bytes(guanaco_no_checkpointing.total)})."
     if guanaco.activation_detail.recompute_peak else "Gradient checkpointing is off: every block keeps all its activations."}
    """)
    return mo.vstack([_verdict, mo.accordion({"What the run holds, and what the card keeps back": _parts})])
