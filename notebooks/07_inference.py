# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "7. Inference"
# description = "Serving memory: weights in the serving format, the KV cache with grouped-query attention, where 'weights x 1.2' breaks, and decode speed."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Inference memory", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mm, mo, viz):
    mo.md(f"""
    # Inference memory

    Serving a model and training it are **two separate memory calculations**. The article insists on
    the split: for training it points to EleutherAI's *Transformer Math 101* (Anthony et al., 2023),
    for inference to Carol Chen's *Transformer Inference Arithmetic* (kipply's blog, 2022). This
    lesson does the second calculation.

    A served model keeps no gradients, no optimizer states and no activations for a backward pass:
    the parts that made {viz.lesson_link("02_full_finetuning", "full finetuning")} so expensive are
    gone. Instead it keeps something training never needed: a **KV cache** that grows with every
    token of every conversation it is serving.

    The rule of thumb you will meet most often, "{mm.RULE_OF_THUMB_FACTOR:g} times the weights", is
    fine for short prompts. By the end of this lesson you will see where it breaks.
    """)
    return


@app.cell
def _():
    import marimo as mo
    import memmath as mm
    from memmath_lessons import viz
    from memmath_lessons.static_charts import Select, bound_chart, live_only_notice
    from memmath_lessons.live_chart import live_chart
    import altair as alt
    import numpy as np
    import pandas as pd
    return Select, alt, bound_chart, live_chart, live_only_notice, mm, mo, np, pd, viz


@app.cell(hide_code=True)
def _(mm, mo):
    _per_token = mm.kv_cache_bytes("llama-2-13b", context_len=1)
    _article = mm.kv_cache_bytes("llama-2-13b", context_len=8192)
    _m = mm.PRESETS["llama-2-13b"]
    mo.md(f"""
    ## Three parts

    | part | what it holds | bytes |
    |:---|:---|:---|
    | weights | every parameter in the serving format | parameters x bits / 8, plus one scale per block for integer formats |
    | KV cache | the key and value vector of every past token, in every layer | 2 x layers x kv_heads x head_dim x bytes x tokens x sequences |
    | working set | the tensors one forward pass creates and frees | largest over the model's phases (measured below) |

    The **2** in the KV cache is one key plus one value (kipply 2022). For Llama-2-13B ({_m.n_layers} layers,
    {_m.n_kv_heads} key/value heads of {_m.head_dim} numbers) in a 16-bit format, one token costs
    2 x {_m.n_layers} x {_m.n_kv_heads} x {_m.head_dim} x 2 B = **{_per_token:,} B**. A
    conversation of 8,192 tokens then needs {_per_token:,} B x 8,192 =
    **{mm.format_bytes(_article)}** of cache, for one sequence.
    """)
    return


@app.cell(hide_code=True)
def _(live_only_notice, mm, mo):
    _decoders = [name for name, shape in mm.PRESETS.items() if shape.family != "bert"]
    model_dropdown = mo.ui.dropdown(_decoders, value="llama-2-13b", label="Model")
    weights_format_dropdown = mo.ui.dropdown(["fp32", "bf16", "fp8_e4m3", "int8", "int4", "nf4"], value="bf16",
                                             label="Weights format")
    kv_format_dropdown = mo.ui.dropdown(["fp32", "bf16", "fp8_e4m3", "int8"], value="bf16", label="KV cache format")
    context_slider = mo.ui.slider(steps=[2**k for k in range(7, 18)], value=8192, show_value=True,
                                  label="Context (tokens per sequence)")
    batch_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=1, show_value=True,
                                label="Batch (sequences served at once)")
    attention_radio = mo.ui.radio(["sdpa", "eager"], value="sdpa", inline=True, label="Attention kernel")
    gpu_dropdown = mo.ui.dropdown(list(mm.GPUS), value="RTX 4090", label="GPU")
    unit_radio = mo.ui.radio(["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([
        mo.md("## Try it"), live_only_notice(),
        mo.hstack([model_dropdown, weights_format_dropdown, kv_format_dropdown], justify="start"),
        mo.hstack([context_slider, batch_slider], justify="start"),
        mo.hstack([attention_radio, gpu_dropdown, unit_radio], justify="start"),
    ])
    return (attention_radio, batch_slider, context_slider, gpu_dropdown, kv_format_dropdown, model_dropdown,
            unit_radio, weights_format_dropdown)


@app.cell
def _(mm, model_dropdown):
    model = mm.PRESETS[model_dropdown.value]
    return (model,)


@app.cell
def _(context_slider):
    context_len = context_slider.value  # read in a cell of its own: the context re-runs only what uses it
    return (context_len,)


@app.cell
def _(batch_slider):
    batch_size = batch_slider.value
    return (batch_size,)


@app.cell
def _(attention_radio, weights_format_dropdown):
    weights_format, attention = weights_format_dropdown.value, attention_radio.value
    return attention, weights_format


@app.cell
def _(kv_format_dropdown):
    kv_format = kv_format_dropdown.value  # also read by the grouped-query table
    return (kv_format,)


@app.cell
def _(gpu_dropdown, mm):
    gpu = mm.get_gpu(gpu_dropdown.value)
    return (gpu,)


@app.cell
def _(unit_radio):
    unit = unit_radio.value
    return (unit,)


@app.cell
def _(attention, batch_size, context_len, kv_format, mm, model, weights_format):
    memory = mm.inference_memory(model, weights_format=weights_format, kv_format=kv_format,
                                 batch_size=batch_size, context_len=context_len, attention=attention)
    return (memory,)


@app.cell(hide_code=True)
def _(attention, batch_size, context_len, gpu, kv_format, memory, mm, mo, model, unit, weights_format):
    _f = lambda n: mm.format_bytes(n, unit)  # noqa: E731
    _fit = mm.check_fit(memory.total, gpu, reserved_bytes=0)
    _verdict = (f"fits on one {gpu.name} ({_f(gpu.memory_bytes)}), with {_f(_fit.headroom_bytes)} to spare"
                if _fit.fits else f"does **not** fit on one {gpu.name} ({_f(gpu.memory_bytes)}): "
                f"{_f(-_fit.headroom_bytes)} short")
    _trained = mm.trained_context(model)  # learned positions (GPT-2, GPT-3) or the config's max_position_embeddings
    _beyond = _trained is not None and context_len > _trained
    _positions = mo.callout(mo.md(
        f"{model.name} was trained on at most {_trained:,} tokens, so it cannot really read "
        f"{context_len:,} tokens; the arithmetic still shows what the memory would be."), kind="warn") if _beyond else None
    _largest = max(mm.GPUS.values(), key=lambda g: g.memory_bytes)
    _notes = []
    if attention == "eager":
        _fused = mm.inference_memory(model, weights_format=weights_format, kv_format=kv_format, batch_size=batch_size,
                                     context_len=context_len, attention="sdpa").working_set
        if memory.working_set > 2 * _fused:
            _notes.append(
                f"Most of the {_f(memory.working_set)} working set is eager attention's scores: it builds a "
                f"context x context matrix for every head of every sequence at once ({model.n_heads} heads x "
                f"{context_len:,} x {context_len:,} scores x {batch_size:,} "
                f"{'sequence' if batch_size == 1 else 'sequences'}), which grows with the square of the context. "
                f"With fused attention (sdpa), which never stores them, the working set would be {_f(_fused)}.")
    if memory.total > _largest.memory_bytes:
        _notes.append(f"No GPU holds this: {_f(memory.total)} is {memory.total / _largest.memory_bytes:,.0f} times "
                      f"the largest card in the catalog ({_largest.name}, {_f(_largest.memory_bytes)}). It is what "
                      "the formula says, not a run anyone could make on one card.")
    _fp8 = [f for f in (weights_format, kv_format) if f.startswith("fp8")]
    if _fp8 and gpu.computes_fp8 is False:
        _notes.append(f"The {gpu.name} ({gpu.architecture}) has no fp8 arithmetic (fp8 tensor cores start with Ada and "
                      f"Hopper): fp8 values are stored in 8 bits as counted here and converted to 16 bits for each "
                      f"matrix multiply, so the memory holds but the math runs in "
                      f"{'bf16' if gpu.computes_bf16 else 'fp16'}.")
    _comment = mo.callout(mo.md(" ".join(_notes)), kind="warn") if _notes else None
    mo.vstack([_item for _item in (_positions, _comment) if _item is not None] + [
        mo.hstack([
            mo.stat(_f(memory.weights + memory.quantization_constants), label="Weights (+ constants)"),
            mo.stat(_f(memory.kv_cache), label="KV cache"),
            mo.stat(_f(memory.working_set), label="Working set"),
            mo.stat(_f(memory.total), label="Total"),
            mo.stat(_f(memory.rule_of_thumb), label=f"Weights x {mm.RULE_OF_THUMB_FACTOR:g}"),
        ], justify="space-between"),
        mo.md(f"""
    Serving **{model.name}** with weights in {memory.weights_format} and the cache in
    {memory.kv_format}, {batch_size} {"sequence" if batch_size == 1 else "sequences"} of {context_len:,}
    tokens: the detailed sum is
    **{_f(memory.total)}**, which {_verdict}. The rule of thumb says {_f(memory.rule_of_thumb)}.
    """),
    ])
    return


@app.cell
def _(bars_chart, gpu, memory, mm, unit, viz):
    _frame = viz.breakdown_long({"detailed sum": memory}, unit)
    # viz.stacked_bars' drawing as Vega-Lite JSON, into the live chart below: the sliders send it new rows.
    bars_chart.update(viz.stacked_bars_output(_frame, unit, title="Where serving memory goes",
                                              capacity_bytes=gpu.memory_bytes, capacity_label=f"{gpu.name}"))
    return


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(mo):
    mo.md("""
    ## Weights in the serving format

    The weights are usually the largest part, and the serving format sets their size. Floating
    formats store every parameter at their width. int8 follows bitsandbytes' LLM.int8 (Dettmers et
    al. 2022): each linear weight in 8 bits plus one fp32 **scale per output row**, a few bytes per
    thousands of weights. int4 and NF4 store the linear layers' weights in 4 bits plus one **scale
    per block** of 64 values (QLoRA's layout, Dettmers et al. 2023): an fp32 scale per 64 weights
    adds 32 / 64 = 0.5 bit per weight, and NF4's double quantization shrinks that to 8 / 64 +
    32 / (64 x 256) = 0.127 bit. Embeddings, norms and the output head stay in 16 bits (transformers
    does not convert them), which is why the effective bits per parameter below sit above the
    format's own width.
    """)
    return


@app.cell
def _(mm, model, pd, unit, viz):
    def _row(fmt):
        _m = mm.inference_memory(model, weights_format=fmt, context_len=1)
        _stored = _m.weights + _m.quantization_constants
        return {"format": fmt, "bits per value": mm.get_format(fmt).bits,
                f"weights ({unit})": round(mm.to_unit(_m.weights, unit), 2),
                f"constants ({unit})": round(mm.to_unit(_m.quantization_constants, unit), 3),
                "effective bits per parameter": round(8 * _stored / model.n_params, 2)}

    formats_frame = pd.DataFrame(
        [_row(f) for f in ["fp32", "bf16", "fp8_e4m3", "int8", "int4", "nf4"]])
    viz.plain_table(formats_frame)
    return


@app.cell(hide_code=True)
def _(mm, mo):
    _gqa = mm.PRESETS["llama-3-8b"]  # Mistral-7B has the same 32 query and 8 key/value heads
    mo.md(f"""
    ## The KV cache and grouped-query attention

    Each new token attends to every earlier token, so a server keeps the keys and values it has
    already computed instead of recomputing them. That cache grows **linearly with the context**
    and **linearly with the batch**: double either and the cache doubles.

    **Grouped-query attention** (GQA; Ainslie et al. 2023) lets several query heads share one key/value
    head. Llama-2-7B and Llama-2-13B keep one key/value head per query head (multi-head attention);
    Llama-3-8B and Mistral-7B keep {_gqa.n_kv_heads} for {_gqa.n_heads} query heads, so their cache per token is
    {_gqa.n_heads} / {_gqa.n_kv_heads} = {_gqa.n_heads // _gqa.n_kv_heads} times smaller. The table uses your
    context, batch and cache format.
    """)
    return


@app.cell
def _(batch_size, context_len, kv_format, mm, pd, unit, viz):
    _names = ["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "llama-2-70b", "llama-3-70b"]
    gqa_frame = pd.DataFrame([{
        "model": _n, "layers": mm.PRESETS[_n].n_layers, "heads": mm.PRESETS[_n].n_heads,
        "kv heads": mm.PRESETS[_n].n_kv_heads, "head dim": mm.PRESETS[_n].head_dim,
        "cut (heads / kv)": mm.PRESETS[_n].n_heads // mm.PRESETS[_n].n_kv_heads,
        "KB per token": round(mm.kv_cache_bytes(_n, context_len=1, kv_format=kv_format) / 1e3, 1),
        f"cache ({unit})": round(mm.to_unit(mm.kv_cache_bytes(_n, context_len=context_len, batch_size=batch_size,
                                                              kv_format=kv_format), unit), 2),
    } for _n in _names])
    viz.plain_table(gqa_frame)
    return


@app.cell(hide_code=True)
def _(mm, mo):
    mo.md(f"""
    ## Where "weights x {mm.RULE_OF_THUMB_FACTOR:g}" breaks

    The quick estimate adds {mm.RULE_OF_THUMB_FACTOR - 1:.0%} to the weights for everything else. It is quoted widely (EleutherAI's
    rule, repeated in Hugging Face accelerate's memory-estimation docs). The chart sweeps the context
    for your model, batch and formats: the coloured areas are the detailed sum, the black dashed
    line the rule of thumb, the red dotted line your GPU's memory.
    """)
    return


@app.cell
def _(attention, batch_size, kv_format, mm, model, weights_format):
    sweep_contexts = [2**k for k in range(7, 18)]
    sweep = {c: mm.inference_memory(model, weights_format=weights_format, kv_format=kv_format,
                                    batch_size=batch_size, context_len=c, attention=attention)
             for c in sweep_contexts}
    rule_limit = mm.rule_of_thumb_context_limit(model, weights_format=weights_format, kv_format=kv_format,
                                                batch_size=batch_size, attention=attention)
    return rule_limit, sweep


@app.cell
def _(alt, gpu, mm, pd, rule_limit, sweep, sweep_chart, unit, viz):
    # One table for every layer (the parts, the rule of thumb, the GPU, where the rule stops holding), given once.
    _in_range = min(sweep) <= rule_limit <= max(sweep)
    _frame = pd.concat([
        pd.DataFrame([{"kind": "part", "context": c, "label": viz.ALL_LABELS[p], "order": i, "size": mm.to_unit(v, unit)}
                      for c, m in sweep.items() for i, (p, v) in enumerate(m.parts().items())]),
        pd.DataFrame([{"kind": "rule", "context": c, "size": mm.to_unit(m.rule_of_thumb, unit)} for c, m in sweep.items()]),
        pd.DataFrame([{"kind": "gpu", "size": mm.to_unit(gpu.memory_bytes, unit), "what": f"{gpu.name} memory"}]),
        pd.DataFrame([{"kind": "limit", "context": rule_limit, "what": f"rule holds to {rule_limit:,} tokens"}] if _in_range
                     else [], columns=["kind", "context", "what"]),
    ], ignore_index=True)

    def _draw(frame):
        _x = alt.X("context:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=[2**k for k in range(7, 18, 2)], labelExpr="datum.value >= 1024 ? datum.value / 1024 + 'K' : datum.value"),
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
            "Detailed sum (areas) versus weights x 1.2 (black, dashed)", subtitle=f"{gpu.name} memory: red, dotted"))

    sweep_chart.update(_frame, draw=_draw, key=(unit, gpu.name))
    return


@app.cell(hide_code=True)
def _(live_chart):
    sweep_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    sweep_chart
    return (sweep_chart,)


@app.cell(hide_code=True)
def _(batch_size, memory, mm, mo, model, rule_limit, unit):
    _stored = memory.weights + memory.quantization_constants
    _allowance = memory.rule_of_thumb - _stored
    if rule_limit == 0:
        _where = "It does not cover the cache and working set even for a single token."
    else:
        _where = f"It covers the cache and working set up to **{rule_limit:,} tokens** per sequence, and no further."
    mo.md(f"""
    For {model.name} with {batch_size} {"sequence" if batch_size == 1 else "sequences"}, the rule's allowance is
    {mm.format_bytes(_allowance, unit)} ({mm.RULE_OF_THUMB_FACTOR - 1:.0%} of {mm.format_bytes(_stored, unit)}).
    {_where} Past that, long contexts and big batches make the KV cache, not the weights, the part
    that decides whether a model fits. Try batch 64 at a long context: the cache dwarfs the weights.
    """)
    return


@app.cell
def _(mm, np, pd, viz):
    # Every (weights format, batch, context, part) the bound chart can show: 4 x 4 x 11 contexts, ~620 rows.
    _contexts, _rows = np.array([2**k for k in range(7, 18)]), []
    for _format in ("bf16", "fp8_e4m3", "int8", "nf4"):
        for _batch in (1, 4, 16, 64):
            _m = mm.inference_memory("llama-2-13b", weights_format=_format, batch_size=_batch, context_len=_contexts)
            _rule = np.broadcast_to(mm.to_unit(_m.rule_of_thumb, "GB"), _contexts.shape)
            for _order, (_part, _bytes) in enumerate(_m.parts().items()):
                _bytes = np.broadcast_to(_bytes, _contexts.shape)
                if _bytes.any():  # one dict per row, one DataFrame at the end (a frame per part costs ~0.5 ms each)
                    _rows += [{"format": _format, "batch": _batch, "context": int(_c), "part": viz.ALL_LABELS[_part],
                               "order": _order, "GB": round(float(_b) / 1e9, 3), "rule": round(float(_g), 2)}
                              for _c, _b, _g in zip(_contexts, _bytes, _rule)]
    serving_grid = pd.DataFrame(_rows)
    return (serving_grid,)


@app.cell
def _(Select, alt, bound_chart, mm, mo, pd, serving_grid, viz):
    from memmath_lessons.static_charts import is_static_export as _static

    _x = alt.X("context:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=[2**k for k in range(7, 18, 2)], labelExpr="datum.value >= 1024 ? datum.value / 1024 + 'K' : datum.value"),
               title="Context (tokens per sequence, log scale; 1K = 1,024)")
    _cards = pd.DataFrame([{"gpu": g, "GB": round(mm.to_unit(mm.get_gpu(g).memory_bytes, "GB"), 2)} for g in ("RTX A6000", "A100 80GB")])

    def _draw(base):
        _areas = base.mark_area(opacity=0.85).encode(
            x=_x, y=alt.Y("sum(GB):Q", stack="zero", title="Memory (GB)"),
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(viz.INFERENCE_PARTS)), order=alt.Order("order:Q"))
        _rule = base.transform_aggregate(rule="max(rule)", groupby=["context"]).mark_line(
            color="black", strokeDash=[6, 4]).encode(x=_x, y=alt.Y("rule:Q"))
        _lines = alt.Chart(_cards).mark_rule(color="#D62728", strokeDash=[2, 2]).encode(y=alt.Y("GB:Q"))
        # Each card's name at its own x, so the two stay apart when a long context squeezes the lines together.
        _names = [alt.Chart(_cards.iloc[[i]]).mark_text(align="left", x=4 + 110 * i, dy=-6, color="#D62728", fontSize=11)
                  .encode(y=alt.Y("GB:Q"), text=alt.Text("gpu:N")) for i in range(len(_cards))]
        # resize: the y-axis labels widen from "160" to "8,000" as the inputs move; without it vega keeps the first layout.
        return alt.layer(_areas, _rule, _lines, *_names).properties(
            width=520, height=260, autosize=alt.AutoSizeParams(type="pad", resize=True))

    _chart = bound_chart(serving_grid, [Select("format", "Weights format"), Select("batch", "Batch (sequences)", radio=True)],
                         _draw, title="Llama-2-13B served: detailed sum (areas), weights x 1.2 (dashed), two GPUs (red)")
    _chart = viz.chart_output(_chart)
    _about = """
    The next chart sweeps the context the same way for Llama-2-13B (the cache in bf16, fused attention)
    and lets you pick the weights format and the batch. Its inputs sit under the chart and redraw it in
    the browser from numbers memmath computed for every combination in advance, so they work in the
    this static copy of the workbook.
    """
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it.
    mo.vstack([mo.md(_about), _chart]) if _static() else None
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md("""
    ## The working set

    One forward pass creates tensors and frees them again: the normed input of each block, the
    query, the MLP's wide hidden layer, and with the *eager* attention kernel the full
    context x context score matrix of every head. The largest moment of that pass is the working set.
    memmath follows what Hugging Face transformers allocates when it reads a prompt in one go
    (a prefill), phase by phase; checked against a count of PyTorch's live tensors for GPT-2 and
    LLaMA models it lands within 0.2% (`validation/inference_working_set.py`). Two details matter:
    LLaMA's eager attention runs its softmax in fp32 (10 bytes per score with bf16 weights), and
    fused attention (*sdpa*, FlashAttention) keeps no score matrix at all. Switch the attention kernel
    above at a long context to watch the working set jump. Servers that split long prompts into
    chunks keep a smaller working set than this.
    """)
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md("""
    ## How fast can it decode?

    Generating one token reads every weight once, and each sequence's whole KV cache. On a GPU
    that read is the bottleneck, so memory bandwidth gives an **upper bound**:
    tokens per second per sequence <= bandwidth / (weights + constants + KV cache) (kipply 2022).
    The weights are read once per step for the whole batch, so a batch of B sequences produces up
    to B times as many tokens in total. Real servers reach a fraction of this bound.
    """)
    return


@app.cell
def _(batch_size, gpu, memory, mm, mo, unit):
    per_sequence = mm.decode_tokens_per_second(memory, gpu)
    all_sequences = per_sequence * batch_size
    read_per_step = memory.weights + memory.quantization_constants + memory.kv_cache
    _fits = mm.check_fit(memory.total, gpu, reserved_bytes=0).fits
    mo.md(f"""
    This run does **not fit** on one {gpu.name} ({mm.format_bytes(memory.total, unit)} against
    {mm.format_bytes(gpu.memory_bytes, unit)}), so it does not decode there at all. The bandwidth
    arithmetic alone, {gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s over the {mm.format_bytes(read_per_step, unit)}
    read per step, would give {per_sequence:,.1f} tokens/s per sequence, but only on a card that holds the
    run: the table of GPUs below gives the bound for those cards only. Choose one of them above, or a
    smaller format, batch or context.
    """) if not _fits else mo.md(f"""
    On one {gpu.name} ({gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s), each step reads
    {mm.format_bytes(read_per_step, unit)}: at most **{per_sequence:,.1f} tokens/s per sequence**{
    f", {all_sequences:,.1f} tokens/s across the batch of {batch_size}" if batch_size > 1 else ""}. Change the weights format to nf4
    to see why quantized models also decode faster; raise the batch at a long context to see the
    cache eat into the speed.
    """)
    return all_sequences, per_sequence, read_per_step


@app.cell(hide_code=True)
def _(mm, mo):
    _card = mm.get_gpu("RTX 4090")
    mo.md(f"""
    ## Which GPUs fit

    Every card in the catalog against the detailed total; the last column is the decode bound on
    that card, for the cards the model fits. "marketed" is the size on the box, which counts in binary units (GiB); "memory" is what
    the driver reports (nvidia-smi's total), the same or a little less: an {_card.name} sold as
    "{_card.marketed}" reports {_card.memory_bytes // 2**20:,} MiB, which is {mm.format_bytes(_card.memory_bytes, "GiB")}
    or {mm.format_bytes(_card.memory_bytes)}. Nothing is reserved here for the CUDA context, which
    takes a few hundred MB to over a GB more.
    """)
    return


@app.cell
def _(memory, mm, unit, viz):
    fit_frame = mm.fit_table(memory.total, reserved_bytes=0, unit=unit)
    _gaps = [f"{abs(h):,.2f} {unit} {'spare' if h >= 0 else 'short'}" for h in fit_frame[f"headroom ({unit})"]]
    fit_frame = fit_frame.assign(**{
        f"memory ({unit})": fit_frame[f"memory ({unit})"].round(2), "fits": fit_frame["fits"].map({True: "yes", False: "no"}),
        f"headroom ({unit})": _gaps,
        # Only where the model fits: a card that cannot hold it does not decode it at any speed.
        "decode bound (tokens/s)": [f"{mm.decode_tokens_per_second(memory, g):,.1f}" if fits else "does not fit"
                                    for g, fits in zip(fit_frame["gpu"], fit_frame["fits"])],
    }).drop(columns=["kind"])
    viz.plain_table(fit_frame)
    return


@app.cell(hide_code=True)
def _(mm, mo):
    _limit = mm.rule_of_thumb_context_limit("llama-2-7b")
    mo.callout(mo.md(f"""
    **Takeaways**

    - Inference memory is its own calculation: weights in the serving format + KV cache + working set.
    - The KV cache is 2 x layers x kv_heads x head_dim x bytes per token, times context, times batch.
      Grouped-query attention divides it by heads / kv_heads.
    - "Weights x 1.2" holds for short contexts only (Llama-2-7B in bf16, one sequence: up to
      {_limit:,} tokens). Long contexts and large batches break it.
    - Decoding is bounded by bandwidth / bytes read per step: smaller weights and a smaller cache
      make a model faster as well as smaller.
    """), kind="success")
    return


@app.cell(hide_code=True)
def _(mm, mo):
    _kv13 = mm.kv_cache_bytes("llama-2-13b", context_len=8192)
    _w13 = mm.inference_memory("llama-2-13b", context_len=1).weights
    _m13, _m70 = mm.PRESETS["llama-2-13b"], mm.PRESETS["llama-2-70b"]
    _kv70 = mm.kv_cache_bytes("llama-2-70b", context_len=1)
    _mha70 = mm.kv_cache_bytes(mm.PRESETS["llama-2-70b"].with_changes(n_kv_heads=64), context_len=1)
    _bf16 = mm.inference_memory("llama-2-7b", context_len=4096)
    _nf4 = mm.inference_memory("llama-2-7b", weights_format="nf4", context_len=4096)
    _speed = [mm.decode_tokens_per_second(m, "RTX 4090") for m in (_bf16, _nf4)]
    _limits = [mm.rule_of_thumb_context_limit("llama-2-7b", batch_size=b) for b in (1, 8)]
    mo.vstack([
        mo.md("## Problems"),
        mo.md("**1.** How large is Llama-2-13B's KV cache in 16 bits for one 8,192-token conversation, "
              "and for eight of them?"),
        mo.accordion({"Answer": mo.md(
            f"2 x {_m13.n_layers} x {_m13.n_kv_heads} x {_m13.head_dim} x 2 B x 8,192 = {mm.format_bytes(_kv13)} "
            f"for one; {mm.format_bytes(8 * _kv13)} for eight: more than the {mm.format_bytes(_w13)} of weights.")}),
        mo.md("**2.** Llama-2-70B keeps 8 key/value heads for its 64 query heads. What does one token of "
              "cache cost in bf16, and what would it cost with one key/value head per query head?"),
        mo.accordion({"Answer": mo.md(
            f"2 x {_m70.n_layers} x {_m70.n_kv_heads} x {_m70.head_dim} x 2 B = {_kv70:,} B per token. "
            f"With {_m70.n_heads} kv heads: {_mha70:,} B, "
            f"{_mha70 // _kv70} times more.")}),
        mo.md("**3.** What is the decode bound for Llama-2-7B at 4,096 tokens, one sequence, on an "
              "RTX 4090, in bf16 and in nf4?"),
        mo.accordion({"Answer": mo.md(
            f"bf16 reads {mm.format_bytes(_bf16.weights + _bf16.kv_cache)} per step: at most "
            f"{_speed[0]:,.1f} tokens/s. nf4 reads "
            f"{mm.format_bytes(_nf4.weights + _nf4.quantization_constants + _nf4.kv_cache)}: at most "
            f"{_speed[1]:,.1f} tokens/s.")}),
        mo.md("**4.** Up to which context does \"weights x 1.2\" cover Llama-2-7B in bf16 with one "
              "sequence? With eight?"),
        mo.accordion({"Answer": mo.md(
            f"{_limits[0]:,} tokens with one sequence; {_limits[1]:,} tokens with eight, since the cache "
            "and the working set grow with the batch too.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
