"""Lesson 7's words and charts: what its run cell hands the numbers to.

The lesson computes in view (every memmath call sits in a cell a learner can open); these functions only word
and draw what it computed: the number, the verdict and its warnings, the KV cache's recipe, decode's bound, the
run's bars, the context sweep and the grouped-query attention fold, each into the page's live charts and live
views (a `Page`), which cells that read no control show once. Kept here, not in hidden cells, so that marimo
reads and compiles them once, as a module's bytecode, rather than from the notebook's source at every start.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import marimo as mo
import numpy as np
import pandas as pd

from memmath import format_bytes, to_unit

from . import pasted_config, viz

__all__ = ["Page", "cache_recipe", "decode_words", "format_cards", "rate_words", "serving_warnings",
           "show_charts_and_gqa", "show_no_answer", "show_serving", "sweep_draw"]


@dataclass(frozen=True)
class Page:
    """The page's live charts and views, and the lesson's fixed values that the words use: the largest card of the
    catalog, the rule of thumb's factor, the models of the grouped-query attention fold."""

    bars_chart: object
    sweep_chart: object
    run_view: object
    cards_view: object
    gqa_view: object
    largest_gpu: object
    rule_factor: float
    gqa_models: dict


def show_no_answer(page, gpu, unit, model=None, kv_format=None, refused=None):
    """Views and charts emptied: no model to serve (a pasted config.json that cannot be used), or no answer for
    the cache format (then the callout that says why). page: the page's views (a Page)."""
    if refused is None:
        _message, _title = "*No model to serve: fix the pasted config.json above, or choose **preset**.*", "No model to serve"
    else:
        _name = pasted_config.pasted_text(model.name)  # a pasted config's name shows as typed
        _message = f"*No answer: {_name} cannot keep its cache in {kv_format} (the note above).*"
        _title = "No answer for this cache format"
    for _view in (page.run_view, page.cards_view):
        _view.update(mo.md(_message))
    page.bars_chart.update(viz.stacked_bars_output(viz.breakdown_long({}, unit), unit, title=_title))
    page.sweep_chart.update(pd.DataFrame(columns=["kind", "context", "label", "order", "size", "what"]),
                       draw=sweep_draw(gpu.name, unit), key=(unit, gpu.name))
    if refused is not None:
        return mo.callout(mo.md(f"**No answer for this cache format.** {pasted_config.pasted_text(str(refused))}."),
                          kind="warn")

def rate_words(t):
    """A decode rate as the page writes it (0.037 tokens/s, not 0.0)."""
    return f"{t:,.1f}" if t >= 0.1 else f"{t:.2g}"

def format_cards(fit_frame, decode_bounds, unit):
    """Every card of the catalog as the fold shows it: the decode bound only where the run fits."""
    return fit_frame.assign(**{
        f"memory ({unit})": fit_frame[f"memory ({unit})"].round(2), "fits": fit_frame["fits"].map({True: "yes", False: "no"}),
        f"headroom ({unit})": [f"{abs(h):,.2f} {unit} {'spare' if h >= 0 else 'short'}"
                               for h in fit_frame[f"headroom ({unit})"]],
        "decode bound (tokens/s)": [rate_words(t) if t is not None else "does not fit" for t in decode_bounds],
    }).drop(columns=["kind"])


def cache_recipe(model, context_len, batch_size, kv_format, kv_format_bits):
    """The KV cache's recipe in words: kipply 2022, 2 (a key and a value) x kv heads x head dim x bytes, for every
    token each layer holds: all of the context in a full-attention layer, at most its window in a sliding-window
    layer (mm.kv_cache_bytes: transformers' DynamicSlidingWindowLayer keeps the last sliding_window tokens)."""
    _seqs = "sequence" if batch_size == 1 else "sequences"
    _kv_bytes = kv_format_bits / 8
    _full = sum(w is None or w >= context_len for w in model.attention_windows)  # layers that hold every token
    _windows = sorted({w for w in model.attention_windows if w is not None and w < context_len})
    _groups = ([(_full, "full-attention " if _windows else "", f"{context_len:,} tokens")] if _full else []) + [
        (sum(x == w for x in model.attention_windows), "sliding-window ", f"{w:,} tokens (the window)") for w in _windows]
    _per = (f"{model.n_kv_heads:,} key/value head{'s' if model.n_kv_heads > 1 else ''} x {model.head_dim:,} x "
            f"{_kv_bytes:g} B ({kv_format})")
    if len(_groups) == 1:  # one kind of layer: 2 x layers x kv heads x head dim x bytes x tokens x sequences
        _recipe = f"2 (key and value) x {_groups[0][0]:,} {_groups[0][1]}layers x {_per} x {_groups[0][2]}"
    else:  # full layers hold the context, sliding ones their window: 2 x kv heads x head dim x bytes x the sum
        _recipe = f"2 (key and value) x {_per} x (" + " + ".join(f"{n:,} {k}layers x {t}" for n, k, t in _groups) + ")"
    _recipe += f" x {batch_size:,} {_seqs}"
    _slides = [w for w in model.attention_windows if w is not None]
    if _slides and not _windows:  # sliding layers whose window holds the whole context
        _recipe += (f" (its {len(_slides)} sliding-window layers keep the last {max(_slides):,} tokens, which at "
                    "this context is all of them)")
    return _recipe


def serving_warnings(page, name, model, memory, gpu, unit, context_len, batch_size, attention, fused_working_set,
                     weights_format, kv_format, trained_context):
    """Warnings: past the trained context, a working set no card holds, fp8 without fp8 arithmetic."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    _seqs = "sequence" if batch_size == 1 else "sequences"
    _warn = []
    if trained_context is not None and context_len > trained_context:
        _warn.append(mo.callout(mo.md(
            f"{name} was trained on at most {trained_context:,} tokens, so it cannot really read "
            f"{context_len:,} tokens; the arithmetic still shows what the memory would be."), kind="warn"))
    _largest = page.largest_gpu
    _notes = []
    if attention == "eager":
        _fused = fused_working_set
        if memory.working_set > 2 * _fused:
            _notes.append(
                f"Most of the {_f(memory.working_set)} working set is eager attention's scores: it builds a "
                f"context x context matrix for every head of every sequence at once ({model.n_heads} heads x "
                f"{context_len:,} x {context_len:,} scores x {batch_size:,} {_seqs}), which grows with the square "
                f"of the context. With fused attention (sdpa), which never stores them, the working set would be "
                f"{_f(_fused)}.")
    _usable = _largest.memory_bytes - _largest.cuda_context_bytes  # what the largest card leaves after its context
    if memory.total > _usable:
        _times = memory.total / _usable  # above 1 here; "1.4 times", "12 times", never "1 times"
        _how = ("more than" if _times < 1.05 else f"{_times:,.1f} times" if _times < 10 else f"{_times:,.0f} times")
        _notes.append(f"No single GPU holds this: {_f(memory.total)} is {_how} what the largest card in the catalog "
                      f"can use ({_largest.name}: {_f(_usable)} of its {_f(_largest.memory_bytes)}, after the CUDA "
                      "context). It is what the formula says, not a run anyone could make on one card.")
    if any(f.startswith("fp8") for f in (weights_format, kv_format)) and gpu.computes_fp8 is False:
        _notes.append(f"The {gpu.name} ({gpu.architecture}) has no fp8 arithmetic (fp8 tensor cores start with Ada and "
                      f"Hopper): fp8 values are stored in 8 bits as counted here and converted to 16 bits for each "
                      f"matrix multiply, so the memory holds but the math runs in "
                      f"{'bf16' if gpu.computes_bf16 else 'fp16'}.")
    if _notes:
        _warn.append(mo.callout(mo.md(" ".join(_notes)), kind="warn"))
    return _warn


def decode_words(model, memory, gpu, unit, fits, batch_size, per_sequence, all_sequences, read_per_step):
    """Decode: bandwidth over the bytes each step reads, only on a card that holds the run. A mixture of experts
    reads its shared tensors and the experts its tokens reach (memory.weights_read; mm.inference's
    routed_experts_reached: k of E per layer at batch 1, at most min(E, batch x k) at a larger batch)."""
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    _rate = rate_words
    _stored = memory.weights + memory.quantization_constants
    _what = "weights and cache"
    if model.n_experts:
        _reached = min(model.n_experts, batch_size * model.experts_per_tok)
        _what = (f"the shared weights and {_reached} of the {model.n_experts} experts in each layer, "
                 f"{_f(memory.weights_read)} of the {_f(_stored)} of weights, plus the cache")
        _what += ("" if batch_size == 1 else
                  f"; we assume the {batch_size} tokens of a step reach min({model.n_experts}, {batch_size} x "
                  f"{model.experts_per_tok}) = {_reached} distinct experts per layer, the most they can: tokens that "
                  "share experts read less")
    if fits:
        return (f"Decoding on it reads {_f(read_per_step)} per step ({_what}) at "
                f"{gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s: at most **{_rate(per_sequence)} tokens/s per sequence**"
                + (f", {_rate(all_sequences)} tokens/s across the batch of {batch_size}." if batch_size > 1 else "."))
    return (f"So it does not decode there at all. The bandwidth arithmetic alone, "
            f"{gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s over the {_f(read_per_step)} read per step "
            f"({_what}), would "
            f"give {_rate(per_sequence)} tokens/s per sequence, but only on a card that holds the run: the first fold "
            "below gives the bound for those cards only.")


def _windowed_note(gqa_frame, kv_format):
    """Why a row shows "-": the format needs transformers' quantized cache, which a windowed model cannot have."""
    refused = [str(name) for name, kb in zip(gqa_frame["model"], gqa_frame["KB per token"]) if kb == "-"]
    if not refused:
        return ""
    return (f" A {kv_format} cache needs transformers' quantized cache, which takes only models whose layers all "
            f"attend over the whole context: a sliding window rules it out, so {', '.join(refused)} shows -.")

def show_charts_and_gqa(page, memory, gpu, unit, fit, sweep, sweep_contexts, rule_limit, gqa_frame, context_len,
                        batch_size, kv_format):
    """The live charts (the run's bars here, the context sweep in its section below: rows only, drawn once) and
    the grouped-query attention fold."""
    _gqa = page.gqa_models["llama-3-8b"]  # Mistral-7B has the same 32 query and 8 key/value heads
    page.gqa_view.update(mo.vstack([mo.md(f"""
    **Grouped-query attention** (GQA; Ainslie et al. 2023) lets several query heads share one key/value
    head. Llama-2-7B and Llama-2-13B keep one key/value head per query head (multi-head attention);
    Llama-3-8B and Mistral-7B keep {_gqa.n_kv_heads} for {_gqa.n_heads} query heads, so their cache per token is
    {_gqa.n_heads} / {_gqa.n_kv_heads} = {_gqa.n_heads // _gqa.n_kv_heads} times smaller. Mistral-7B's layers also
    attend over a sliding window of {page.gqa_models["mistral-7b"].sliding_window:,} tokens, so past that context its cache
    stops growing. The table uses this run's context ({context_len:,} tokens), batch ({batch_size:,}) and cache
    format ({kv_format}).{_windowed_note(gqa_frame, kv_format)}
    """), viz.plain_table(gqa_frame)]))
    page.bars_chart.update(viz.stacked_bars_output(viz.breakdown_long({"detailed sum": memory}, unit), unit,
                                              title="Where serving memory goes", capacity_bytes=fit.available_bytes,
                                              capacity_label=f"{gpu.name}: {format_bytes(fit.available_bytes, unit)} usable"))
    _parts = [(i, p, np.broadcast_to(v, sweep_contexts.shape)) for i, (p, v) in enumerate(sweep.parts().items())]
    _in_range = sweep_contexts[0] <= rule_limit <= sweep_contexts[-1]
    _sweep_frame = pd.DataFrame(
        [{"kind": "part", "context": int(c), "label": viz.ALL_LABELS[p], "order": i, "size": to_unit(int(v[j]), unit)}
         for j, c in enumerate(sweep_contexts) for i, p, v in _parts]
        + [{"kind": "rule", "context": int(c), "size": to_unit(int(r), unit)}
           for c, r in zip(sweep_contexts, np.broadcast_to(sweep.rule_of_thumb, sweep_contexts.shape))]
        + [{"kind": "gpu", "size": to_unit(fit.available_bytes, unit), "what": f"{gpu.name}: usable memory"}]
        + ([{"kind": "limit", "context": rule_limit, "what": f"rule holds to {rule_limit:,} tokens"}] if _in_range else []),
        columns=["kind", "context", "label", "order", "size", "what"])
    page.sweep_chart.update(_sweep_frame, draw=sweep_draw(gpu.name, unit), key=(unit, gpu.name))


def show_serving(page, model, gpu, unit, plan, weights_format_kind, kv_format_bits, context_len, batch_size, attention,
                 fused_working_set, weights_format, kv_format, trained_context, rule_limit, per_sequence,
                 all_sequences, read_per_step, fit_frame, gqa_frame, sweep, sweep_contexts):
    """The number, the headline stats and the verdict, into the live view below, the charts and the folds'
    tables; returns the warnings that apply, the one thing the run's cell shows itself."""
    memory, _fit = plan.memory, plan.fit
    _name = pasted_config.pasted_text(model.name)  # a pasted config's name shows as typed
    _f = lambda n: format_bytes(n, unit)  # noqa: E731
    # A part under a tenth of the unit in a smaller unit (45.09 MB, not 0.05 GB); the same string wherever it shows.
    _small = lambda n: _f(n) if to_unit(n, unit) >= 0.1 else viz.readable_size(n, unit)  # noqa: E731
    _seqs = "sequence" if batch_size == 1 else "sequences"
    # Which tensors a quantized format converts: as transformers' bitsandbytes integration does (only nn.Linear).
    _layout = ("" if weights_format_kind == "float" else
               f"The {memory.weights_format} weights are counted as transformers loads a model with bitsandbytes, "
               f"which converts only its `nn.Linear` layers ({memory.weights_layout}). ")
    _recipe = cache_recipe(model, context_len, batch_size, kv_format, kv_format_bits)
    # The verdict, with the card's CUDA context reserved as the planner (lesson 8) reserves it.
    _instead = " or ".join(f"{_c.change} ({_f(_c.total)})" for _c in plan.instead)
    _verdict = (f"fits on one {gpu.name}, with {_f(_fit.headroom_bytes)} to spare" if plan.fits else
                f"does **not** fit on one {gpu.name}: {_f(-_fit.headroom_bytes)} short"
                + (f"; what fits instead, with 5% to spare: {_instead}" if _instead else ""))
    _reserve = (f"Of the card's {_f(gpu.memory_bytes)} ({gpu.memory_bytes // 2**20:,} MiB as the driver reports it), "
                f"{gpu.cuda_context_bytes // 2**20:,} MiB ({format_bytes(gpu.cuda_context_bytes, 'GiB')}) are kept "
                f"back for the CUDA context, which the driver takes before PyTorch allocates anything "
                f"({gpu.context_reserve.family} family: {gpu.context_reserve.lazy_source}): "
                f"{_f(_fit.available_bytes)} are usable.")
    _warn = serving_warnings(page, _name, model, memory, gpu, unit, context_len, batch_size, attention, fused_working_set,
                             weights_format, kv_format, trained_context)
    # "Weights x 1.2": its allowance, and up to which context it covers the cache and working set at this batch.
    _stored = memory.weights + memory.quantization_constants
    _where = ("It does not cover the cache and working set even for a single token." if rule_limit == 0 else
              f"It covers the cache and working set up to **{rule_limit:,} tokens** per sequence, and no further.")
    _decode = decode_words(model, memory, gpu, unit, plan.fits, batch_size, per_sequence, all_sequences, read_per_step)
    page.cards_view.update(fit_frame)
    show_charts_and_gqa(page, memory, gpu, unit, _fit, sweep, sweep_contexts, rule_limit, gqa_frame, context_len,
                        batch_size, kv_format)
    page.run_view.update(mo.Html(mo.md(f"""
    **The number.** {_name}'s KV cache at this context: **{_small(memory.kv_cache)}** = {_recipe}.
    With the weights in {memory.weights_format} and the working set of one forward pass, serving it takes:
    """).text + viz.stat_row([
            (_f(_stored), "Weights (+ constants)"), (_small(memory.kv_cache), "KV cache"),
            (_small(memory.working_set), "Working set"), (_f(memory.total), "Total"),
            (_f(memory.rule_of_thumb), f"Weights x {page.rule_factor:g}")]).text + mo.md(f"""
    Serving **{_name}** with weights in {memory.weights_format} and the cache in {memory.kv_format},
    {batch_size} {_seqs} of {context_len:,} tokens: the detailed sum is **{_f(memory.total)}**, which
    {_verdict}. {_layout}{_reserve} {_decode}

    The rule of thumb, weights x {page.rule_factor:g}, says {_f(memory.rule_of_thumb)}: an allowance of
    {_f(memory.rule_of_thumb - _stored)} ({page.rule_factor - 1:.0%} of {_f(_stored)}) for everything
    besides the weights. {_where}
    """).text))
    return mo.vstack(_warn) if _warn else None


def sweep_draw(gpu_name, unit):
    """The context sweep's drawing (the parts, the rule of thumb, the GPU, where the rule stops holding)."""
    def _draw(frame):
        _x = alt.X("context:Q", scale=alt.Scale(type="log", base=2),
                   axis=alt.Axis(values=[2**k for k in range(7, 18, 2)],
                                 labelExpr="datum.value >= 1024 ? datum.value / 1024 + 'K' : datum.value"),
                   title="Context (tokens per sequence, log scale; 1K = 1,024)")
        _base = alt.Chart()
        _areas = _base.transform_filter(alt.datum.kind == "part").mark_area(opacity=0.85).encode(
            x=_x, y=alt.Y("size:Q", stack="zero", title=viz.memory_axis_title(unit)),
            color=alt.Color("label:N", title="Part", scale=viz.part_scale(viz.INFERENCE_PARTS)),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("context:Q"), alt.Tooltip("label:N"), alt.Tooltip("size:Q", title=unit, format=",.2f")])
        _rule_line = _base.transform_filter(alt.datum.kind == "rule").mark_line(color="black", strokeDash=[6, 4]).encode(
            x=_x, y=alt.Y("size:Q"))
        _gpu_line = _base.transform_filter(alt.datum.kind == "gpu").mark_rule(color="#D62728", strokeDash=[2, 2], size=2).encode(
            y=alt.Y("size:Q"), tooltip=[alt.Tooltip("what:N")])
        _limit = _base.transform_filter(alt.datum.kind == "limit")  # no rows when the rule holds past the sweep or never
        _layers = [_areas, _rule_line, _gpu_line,
                   _limit.mark_rule(color="black").encode(x=alt.X("context:Q"), tooltip=[alt.Tooltip("what:N")]),
                   _limit.mark_text(align="left", dx=4, y=8).encode(x=alt.X("context:Q"), text=alt.Text("what:N"))]
        return alt.layer(*_layers, data=frame).properties(width=560, height=300, title=alt.Title(
            "Detailed sum (areas) versus weights x 1.2 (black, dashed)", subtitle=f"{gpu_name} memory less the CUDA context: red, dotted"))
    return _draw
