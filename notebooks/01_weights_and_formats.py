# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "1. Weights and number formats"
# description = "How many bytes one parameter takes in fp32, bf16, fp8, int8 or nf4, what each format can hold, and which GPUs hold a model's weights."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Weights and number formats", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Weights and number formats

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    A model is a long list of numbers, its weights (also called parameters), and every one of them has
    to sit in the GPU's memory before the model can answer or learn anything. The article states the rule
    this whole workbook carries forward: **the bytes needed per parameter set the weight memory, and the
    number format determines those bytes.** Its worked example: a 7B model in a 16-bit format takes
    7 billion × 2 bytes = 14 GB.

    Pick a model size (or a published model) and a format:
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons.reference import literature
    from memmath_lessons import lesson_charts, site_charts, viz
    from memmath_lessons.live_chart import bound_live_draw, live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons.static_charts import Slider, bound_chart, is_static_export, live_only_notice
    from memmath.verdict import verdict_of

    return (Slider, alt, bound_chart, bound_live_draw, format_bytes, is_static_export, lesson_charts,
            literature, live_chart, live_html, live_only_notice, mm, mo, np, pd, site_charts, to_unit,
            verdict_of, viz)


@app.cell
def _(live_only_notice, mo, viz):
    params_slider, preset_dropdown = viz.model_size_controls()  # 100M to 1T, or a published model
    START_FORMAT = "bf16"  # the format the page opens on (the static page's sentence says it)
    format_dropdown = mo.ui.dropdown(
        options=["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "nf4"], value=START_FORMAT,
        label="Format of the weights")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([live_only_notice(), mo.hstack([params_slider, preset_dropdown], justify="start", gap=2),
               mo.hstack([format_dropdown, unit_radio], justify="start", gap=2)])
    return START_FORMAT, format_dropdown, params_slider, preset_dropdown, unit_radio


@app.cell(hide_code=True)
def _(bound_chart, formats_grid, is_static_export, lesson_charts, live_chart, live_html, mo, site_charts, Slider,
      START_FORMAT, STORAGE_FORMATS, viz):
    # One control per quantity. Live, the size above (slider or preset) and the unit move this chart: drawn here
    # (this cell reads no control), the size's cell below sends it the rows of that size in that unit. In the static site,
    # where those are frozen, the chart carries its own slider over every size the slider offers, in GB.
    formats_chart = None if is_static_export() else live_chart()
    _about = ("The same sizes in every format, side by side: drag the slider under the chart. Its bars, and the "
              f"sentence under them for {START_FORMAT}, the format the menu above is set to, are computed in "
              "advance for every size the slider above offers, so this slider keeps working in this static copy "
              "of the page, where the controls above are frozen.")
    _sizes = {i: f"{viz.short_count(round(b * 10**9))} parameters" for i, b in enumerate(viz.MODEL_SIZE_STEPS)}
    # The number with its recipe, in the callout under the chart: the size's cell below fills it on every move. The
    # static page says it under its chart instead, for the chart's own slider (the callout's size is frozen there).
    number_view = live_html()
    mo.vstack([formats_chart if formats_chart is not None else mo.vstack([mo.md(_about), viz.chart_output(bound_chart(
        formats_grid, [Slider("size", "Model size", value=viz.MODEL_SIZE_STEPS.index(7), labels=_sizes, show_value=False)],
        site_charts.with_weights_sentence(lesson_charts.format_bars(STORAGE_FORMATS), START_FORMAT),
        title="Weights in each format (GB), with the scales of the block formats"))]),
        mo.md("") if formats_chart is None else mo.callout(number_view, kind="info"),
        mo.md("**Takeaway:** weight memory = parameters × bits per parameter ÷ 8. Halve the bits and you halve "
              "the memory; the number of parameters stays what it is.")], gap=1.25)
    return formats_chart, number_view


@app.cell(hide_code=True)
def _(cards_chart, cards_reserve_view, cards_table_view, cards_verdict_view, format_bytes, lesson_charts, mo,
      pd, to_unit, viz):
    def show_cards(weights_format, unit, weight_bytes, card_bytes, reserved_bytes, gpu_fits, fit_rows):
        """The cards (the GPU section further down): their chart, the sentence and the table."""
        _mem = f"memory ({unit})"
        _need = to_unit(card_bytes, unit)  # the weights; each card's verdict adds its own context when it is set aside
        # One table for the three layers (the cards, then the line at what the weights need), given once to the layer;
        # a new unit draws the chart anew (its axis title), a new size only sends rows.
        cards_chart.update(pd.concat([
            pd.DataFrame({"kind": "card", "gpu": gpu_fits["gpu"], "marketed": gpu_fits["marketed"], "size": gpu_fits[_mem],
                          "verdict": gpu_fits["fits"].map({True: "holds the weights", False: "too small"})}),
            pd.DataFrame({"kind": "need", "gpu": "", "marketed": "", "size": [_need],
                          "verdict": [f"weights in {weights_format.name}" + (" (each card also keeps its CUDA context)"
                                                                      if reserved_bytes is None else "")],
                          # The label sits left of the line near the right end, so it stays inside the plot.
                          "flip": [_need > 0.6 * max(float(gpu_fits[_mem].max()), _need)]}),
        ], ignore_index=True), draw=lesson_charts.gpu_cards(unit), key=unit)
        _holding = gpu_fits[gpu_fits["fits"]]
        cards_verdict_view.update(mo.md(f"""
        {len(_holding)} of the {len(gpu_fits)} cards hold these weights
        ({format_bytes(card_bytes, unit)}{" as bitsandbytes loads them" if card_bytes != weight_bytes else ""}{", each card's CUDA context set aside" if reserved_bytes is None else ""}){"; the smallest is the **" + _holding["gpu"].iloc[0] + "**" if len(_holding) else ""}.
        """))
        cards_reserve_view.update(mo.md(viz.cuda_reserve_sentence(reserved_bytes is None, unit)))
        cards_table_view.update(fit_rows)

    return (show_cards,)


@app.cell(hide_code=True)
def _(bound_live_draw, format_bytes, formats_chart, lesson_charts, mo, number_view, pd, show_cards,
      STORAGE_FORMATS, to_unit, viz):
    def show_weights(preset, n_params, weights_format, unit, stored, weight_bytes, stored_by_format, loaded,
                     card_bytes, preset_shape, reserved_bytes, gpu_fits, fit_rows):
        """The number with its recipe, the format chart's rows, and the cards' verdicts, chart and table further
        down, all into live views (the cell that calls this shows nothing itself)."""
        if formats_chart is not None:
            _rows = []
            for _name in STORAGE_FORMATS:  # the grid's rows, for the size chosen above, in the chosen unit
                _stored = stored_by_format[_name]
                _total = _stored.weights + _stored.quantization_constants  # integer bytes, rounded once for the label
                for _order, _part in enumerate(("weights", "quantization_constants")):
                    if getattr(_stored, _part):
                        _rows.append({"format": _name, "part": viz.ALL_LABELS[_part], "order": _order,
                                      unit: round(to_unit(getattr(_stored, _part), unit), 4),
                                      f"total{unit}": round(to_unit(_total, unit), 2)})
            # A new unit draws the chart anew (its axis title and title); a new size sends only the rows.
            formats_chart.update(pd.DataFrame(_rows), key=unit, caption=f"Model size: {viz.short_count(n_params)} parameters",
                                 draw=bound_live_draw(lesson_charts.format_bars(STORAGE_FORMATS, unit),
                                                      title=f"Weights in each format ({unit}), with the scales of the block formats"))
        _which = f"**{preset}**:" if preset else "A model of"
        _how = ("one 8-bit scale per 64 values and one fp32 scale per 256 of those: QLoRA's double quantization"
                if weights_format.name == "nf4" else "one fp32 scale per 64 values")
        _scales = (f", plus {format_bytes(stored.quantization_constants, unit)} of scales ({_how}): "
                   f"**{format_bytes(weight_bytes, unit)}** in all" if stored.quantization_constants else "")
        _loaded = ""
        if loaded is not None:
            _how = ("through transformers with bitsandbytes, which converts only the `nn.Linear` layers"
                    if weights_format.kind != "float" else "as FP8 checkpoints store it")
            _loaded = (f" That is with **every weight** in {weights_format.name}. Loaded {_how} "
                       f"({loaded.weights_layout}), it takes "
                       f"**{format_bytes(loaded.weights + loaded.quantization_constants, unit)}**: the size "
                       f"{viz.lesson_link('07_inference', 'lesson 7')} and `memmath infer` give, and the cards below "
                       "judge.")
        _shape = preset_shape
        _experts = ("" if _shape is None or not _shape.n_experts else
                    f" {preset} is a mixture of experts: each token passes through **{_shape.active_params:,} parameters "
                    f"({viz.short_count(_shape.active_params)})**, {_shape.experts_per_tok} of the {_shape.n_experts} "
                    f"experts of each layer and the parts every token uses, but every expert's weights sit in memory, so "
                    f"the weights above count all {n_params:,}.")
        number_view.update(mo.md(f"""
        {_which} {n_params:,} parameters ({viz.short_count(n_params)}) × {weights_format.bits} bits ÷ 8
        = **{format_bytes(stored.weights, unit)}** of weights in {weights_format.name}{_scales}.{_loaded}{_experts}
        """))
        show_cards(weights_format, unit, weight_bytes, card_bytes, reserved_bytes, gpu_fits, fit_rows)

    return (show_weights,)


@app.cell
def _(context_checkbox, format_dropdown, mm, params_slider, pd, preset_dropdown, show_weights, STORAGE_FORMATS,
      unit_radio, verdict_of, viz):
    # The one cell the size, the format, the unit and the box re-run (every re-run cell costs marimo ~6-10 ms); the
    # hidden cell above shows what it computes in live views.
    preset = preset_dropdown.value
    n_params = mm.resolve_model(viz.model_choice(params_slider.value, preset)).n_params
    weights_format = mm.get_format(format_dropdown.value)
    unit = unit_radio.value
    # Weights as a bare parameter count: N x bits / 8, plus block scales for int8/int4 (one fp32 per 64
    # values) and nf4 (QLoRA's double quantization: one 8-bit scale per 64, one fp32 per 256 scales).
    stored = mm.inference_memory(n_params, weights_format=weights_format.name)
    weight_bytes = stored.weights + stored.quantization_constants
    _by_format = {_name: mm.inference_memory(n_params, weights_format=_name) for _name in STORAGE_FORMATS}  # the chart
    # A published model in an integer format has a second size: transformers' bitsandbytes integration converts
    # only nn.Linear layers (integrations/bitsandbytes.py, replace_with_bnb_linear), as lesson 7 and `memmath infer`
    # count it; the figure above puts every weight in the format. FP8: as FP8 checkpoints store it.
    _loaded = (mm.inference_memory(preset, weights_format=weights_format.name)
               if preset and (weights_format.kind != "float" or weights_format.bits == 8) else None)
    card_bytes = weight_bytes if _loaded is None else _loaded.weights + _loaded.quantization_constants
    # A mixture of experts: a token passes through a few experts (memmath's active_params), but all of them are stored.
    _shape = mm.resolve_model(preset) if preset else None
    # None: each card's own CUDA context (memmath/cuda_context.py, check_fit's default); 0: nothing set aside.
    reserved_bytes = None if context_checkbox.value else 0
    gpu_fits = mm.gpus.fit_table(card_bytes, reserved_bytes=reserved_bytes, unit=unit)  # the context only if set aside
    _mem, _head = f"memory ({unit})", f"headroom ({unit})"
    # Compare the cards: what the weights (and the context, if set aside) need as a share of each card.
    fit_rows = pd.DataFrame([{
        "gpu": _g, "marketed": _m, _mem: round(_size, 2), "needs (% of the card)": round(100 * (_size - _h) / _size, 1),
        # The words of memmath.verdict, every lesson's; holding the weights keeps no margin (no step runs).
        "verdict": verdict_of(card_bytes, _g, reserved_bytes=reserved_bytes, margin=0).sentence(unit),
    } for _g, _m, _size, _h, _f in gpu_fits[["gpu", "marketed", _mem, _head, "fits"]].itertuples(index=False)])
    show_weights(preset, n_params, weights_format, unit, stored, weight_bytes, _by_format, _loaded, card_bytes,
                 _shape, reserved_bytes, gpu_fits, fit_rows)
    return card_bytes, fit_rows, gpu_fits, n_params, preset, reserved_bytes, stored, unit, weight_bytes, weights_format


@app.cell
def _(mm, pd, STORAGE_FORMATS, to_unit, viz):
    # Every size of the slider (100M to 1T parameters) in every format, computed once, in GB.
    _rows = []
    for _position, _billions in enumerate(viz.MODEL_SIZE_STEPS):
        for _name in STORAGE_FORMATS:
            _stored = mm.inference_memory(int(round(_billions * 10**9)), weights_format=_name)
            _total = _stored.weights + _stored.quantization_constants  # integer bytes, rounded once for the label
            for _order, _part in enumerate(("weights", "quantization_constants")):
                if getattr(_stored, _part):
                    _rows.append({"size": _position, "format": _name, "part": mm.training.PART_LABELS[_part],
                                  "order": _order, "GB": round(to_unit(getattr(_stored, _part), "GB"), 4),
                                  "totalGB": round(to_unit(_total, "GB"), 2)})
    formats_grid = pd.DataFrame(_rows)
    return (formats_grid,)


@app.cell
def _(article_params, format_specs, pd, to_unit):
    # The article's 7B model in each format: N x bits / 8.
    article_formats = pd.DataFrame([{"format": name, "bits": f.bits, "bytes per parameter": f.bytes,
                                     "7B weights (GB)": round(to_unit(f.bytes_for(article_params), "GB"), 2)}
                                    for name, f in format_specs.items()])
    return (article_formats,)


@app.cell(hide_code=True)
def _(article_formats, article_params, article_weight_bytes, format_bytes, format_specs, mo, viz):
    mo.vstack([
        mo.md(f"""
        ## The formula

        `weight memory = N × bits per parameter ÷ 8` bytes, where N is the number of parameters.
        Bits, not bytes, are the unit of a format: a 4-bit format costs half a byte per parameter.
        For the article's model: {article_params:,} × {format_specs["bf16"].bits} ÷ 8
        = {article_weight_bytes:,} bytes = **{format_bytes(article_weight_bytes, "GB")}** (10⁹ bytes to a GB),
        which is {format_bytes(article_weight_bytes, "GiB")} (2³⁰ bytes to a GiB). The same model in other formats
        (integer formats also need a few scales, counted in the chart above):
        """),
        viz.plain_table(article_formats),
    ])
    return


@app.cell
def _(mm):
    article_params = 7_000_000_000  # the article's 7B model
    # 7e9 parameters x 16 bits / 8 = 14e9 bytes (the article: "7B x 16-bit = 14 GB")
    article_weight_bytes = mm.get_format("bf16").bytes_for(article_params)
    STORAGE_FORMATS = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "nf4"]
    format_specs = {name: mm.get_format(name) for name in STORAGE_FORMATS}  # bits, range and precision of each
    return STORAGE_FORMATS, article_params, article_weight_bytes, format_specs


@app.cell(hide_code=True)
def _(format_specs, pd, STORAGE_FORMATS):
    # Bit layout of each format, from memmath.FORMATS: sign + exponent + mantissa for floats.
    _rows = []
    for _name in STORAGE_FORMATS:
        _fmt = format_specs[_name]
        if _fmt.kind == "float":
            _fields = [("sign", _fmt.bits - _fmt.exponent_bits - _fmt.mantissa_bits),
                       ("exponent (range)", _fmt.exponent_bits), ("mantissa (precision)", _fmt.mantissa_bits)]
        elif _fmt.kind == "int":
            _fields = [("whole number of scale steps", _fmt.bits)]
        else:
            _fields = [("index of one of 16 levels", _fmt.bits)]
        _rows += [{"format": _name, "field": f, "bits": b, "order": i} for i, (f, b) in enumerate(_fields)]
    bit_layout = pd.DataFrame(_rows)
    # Range and precision of each format (memmath.FORMATS): largest value, step just above 1, digits.
    format_table = pd.DataFrame([{
        "format": _f.name, "bits": _f.bits,
        "largest value": f"{_f.max_value:.4g}" + ("" if _f.kind == "float" else " × scale"),
        "beyond it": ("infinity" if _f.has_inf else "not-a-number") if _f.kind == "float" else "clipped",
        "step just above 1": f"{_f.epsilon:.3g}" if _f.kind == "float" else "one scale step",
        "decimal digits": f"{_f.decimal_digits:.1f}" if _f.decimal_digits else "-",
        "what it is": _f.description,
    } for _f in (format_specs[n] for n in STORAGE_FORMATS)])
    return bit_layout, format_table


@app.cell(hide_code=True)
def _(alt, bit_layout, format_specs, format_table, mo, STORAGE_FORMATS, viz):
    _bf16, _fp16 = format_specs["bf16"], format_specs["fp16"]
    _prose = mo.md(f"""
    ## Inside a number format

    A floating-point number has three fields: a **sign** bit, an **exponent** that sets how large
    the number can be (its range), and a **mantissa** that sets how finely it is resolved (its
    precision). Splitting 16 bits differently gives two very different formats:

    - **fp16** (IEEE half precision) gives {_fp16.exponent_bits} bits to the exponent and
      {_fp16.mantissa_bits} to the mantissa: fine steps, but nothing above {_fp16.max_value:,.0f}.
    - **bf16** (bfloat16) keeps fp32's {_bf16.exponent_bits} exponent bits, so it reaches about
      {_bf16.max_value:.1e}, and pays with a {_bf16.mantissa_bits}-bit mantissa: coarse steps.
      Google introduced it for its TPUs and, in the words the article quotes, called it "the secret
      to high performance on Cloud TPUs" (Google Cloud blog, 2019, *BFloat16: The secret to high
      performance on Cloud TPUs*). The name comes from Google Brain.

    An **integer** format has no exponent at all: it stores whole numbers (int8 from
    {-(2 ** (format_specs["int8"].bits - 1))} to {format_specs["int8"].max_value:.0f}).
    To hold 0.37 it stores a whole number of steps of a scale that you pick, so the decimal point
    sits at a fixed place; that is why the article notes the integer format is also called a
    **fixed point** format. QLoRA's **nf4** goes one step further: 16 levels placed where
    normally distributed weights fall, times a scale per block.
    """)
    _fields = ["sign", "exponent (range)", "mantissa (precision)", "whole number of scale steps",
               "index of one of 16 levels"]
    _colors = ["#555555", "#EECA3B", "#9D755D", "#D67195", "#79706E"]
    _base = alt.Chart(bit_layout).encode(
        y=alt.Y("format:N", sort=STORAGE_FORMATS, title=None),
        x=alt.X("sum(bits):Q", stack="zero", title="Bits per value"),
        order=alt.Order("order:Q"),
    )
    _bars = _base.mark_bar(stroke="white").encode(
        color=alt.Color("field:N", sort=_fields, title="Field", scale=alt.Scale(domain=_fields, range=_colors)),
        tooltip=[alt.Tooltip("format:N"), alt.Tooltip("field:N"), alt.Tooltip("bits:Q")])
    _text = _base.mark_text(align="right", dx=-4, color="white", fontSize=11).encode(
        text=alt.Text("bits:Q"), detail=alt.Detail("field:N"))
    _chart = viz.chart_output((_bars + _text).properties(width=520, height=230, title="How each format spends its bits"))
    mo.vstack([_prose, _chart, mo.accordion({"How large, and how fine, is each format?": viz.plain_table(
        format_table, wrapped_columns=["what it is"])})])
    return


@app.cell
def _(mm):
    # The steps the next section quotes: bf16's near 300.7, and fp16's smallest (at zero).
    bf16_step_300 = mm.formats.float_step("bf16", 300.7)
    fp16_smallest_step = mm.formats.float_step("fp16", 0)
    return bf16_step_300, fp16_smallest_step


@app.cell(hide_code=True)
def _(bf16_step_300, format_specs, fp16_smallest_step, live_only_notice, mo):
    _bf16_step_300 = bf16_step_300
    _prose = mo.md(f"""
    ## Round a number yourself

    Type any number and see what each format actually stores. Some values to try: `0.1` (no
    format stores it exactly), `300.7` (bf16's steps are {_bf16_step_300:g} apart up there), `70000` (past fp16's
    largest value, {format_specs["fp16"].max_value:,.0f}), `0.00000001` (10⁻⁸, less than half
    of fp16's smallest step, {fp16_smallest_step:.3g}).

    The integer formats (and nf4) need a **scale**: all values in a block share one, set from the
    largest magnitude in the block (its *absmax*), so that absmax lands on the largest level
    (int8: scale = absmax ÷ {format_specs["int8"].max_value:.0f}). Move the absmax slider to see the
    trade-off: a small absmax gives fine steps but clips anything larger; a large one keeps large
    values but rounds small ones to zero.
    """)
    value_number = mo.ui.number(start=-1_000_000, stop=1_000_000, value=0.1, label="A value to store")
    block_absmax_slider = mo.ui.slider(
        steps=[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 127, 200, 500, 1_000, 10_000, 100_000,
               1_000_000],
        value=1, show_value=True, label="Block absmax (largest |value| sharing the integer scale)")
    mo.vstack([_prose, live_only_notice(), mo.hstack([value_number, block_absmax_slider], justify="start", gap=2)])
    return (block_absmax_slider, value_number)


@app.cell(hide_code=True)
def _(mo, pd, staircase_chart, store, viz):
    def show_rounding(value, block_absmax, rounding_table, staircase):
        """The table, the staircase's window and rows, and what the staircase leaves out."""
        _formats = ["exact", "fp16", "bf16", "fp8_e4m3", "int8"]
        _exact = staircase[staircase["format"] == "exact"]["stored value"]
        _pad = 0.25 * (_exact.max() - _exact.min())
        _low, _high = float(_exact.min() - _pad), float(_exact.max() + _pad)  # the chart's window
        # The window, so far-off values do not squash it, and the value in the title: params of the chart drawn below.
        staircase_chart.update(staircase, window_low=_low, window_high=_high, near=f"{value:g}")
        _drawn = set(staircase["format"])
        _overflow = [f for f in _formats if f not in _drawn]
        _inside = staircase[(staircase["stored value"] >= _low) & (staircase["stored value"] <= _high)]
        _outside = [f for f in _formats if f in _drawn and f not in set(_inside["format"])]
        _lines = ([f"Not drawn below, because every value here overflows: {', '.join(_overflow)}."] if _overflow else []) + \
                 ([f"Off the chart below (stored far from the value: clipped or rounded away): {', '.join(_outside)}."]
                  if _outside else [])
        _examples = pd.DataFrame([{"value": f"{_v:g}", **{_f: store(_v, _f, block_absmax)["stored value"]
                                                         for _f in ["fp32", "bf16", "fp16", "fp8_e4m3", "int8"]}}
                                  for _v in [0.1, 300.7, 70_000, 0.00000001]])
        return mo.vstack([
            viz.plain_table(rounding_table, wrapped_columns=["what happened"]),  # plain HTML: cheap to redraw
            mo.accordion({"What do the suggested values become?": mo.vstack([
                mo.md(f"Stored in five formats (int8 with your block absmax, {block_absmax:g}):"),
                viz.plain_table(_examples)])}),
            mo.md(" ".join(_lines)),
        ])

    return (show_rounding,)


@app.cell
def _(block_absmax_slider, mm, np, pd, show_rounding, STORAGE_FORMATS, store, value_number):
    # The one cell the value and the absmax re-run: what each format stores, and the staircase around the value.
    value = float(value_number.value if value_number.value is not None else 0.0)
    block_absmax = float(block_absmax_slider.value)
    rounding_table = pd.DataFrame([store(value, _name, block_absmax) for _name in STORAGE_FORMATS])
    # Zoom in around the value: what each format stores for every number nearby (a staircase).
    _half_width = 0.04 * max(abs(value), 1e-3)
    _x = np.linspace(value - _half_width, value + _half_width, 601)
    _curves = [pd.DataFrame({"true value": _x[[0, -1]], "stored value": _x[[0, -1]], "format": "exact"})]
    for _name in ["fp16", "bf16", "fp8_e4m3", "int8"]:
        _stored = mm.formats.round_to_format(_x, _name, scale=mm.formats.absmax_scale(_name, block_absmax))
        # A step line needs only the points where the stored value changes (and the last one):
        # the same picture from a few rows, so the page carries little data.
        _keep = np.r_[True, _stored[1:] != _stored[:-1]] | (np.arange(_x.size) == _x.size - 1)
        _curves.append(pd.DataFrame({"true value": _x[_keep], "stored value": _stored[_keep], "format": _name}))
    staircase = pd.concat(_curves, ignore_index=True)
    staircase = staircase[np.isfinite(staircase["stored value"])]
    show_rounding(value, block_absmax, rounding_table, staircase)
    return block_absmax, rounding_table, staircase, value


@app.cell(hide_code=True)
def _(lesson_charts, live_chart):
    # Drawn once (this cell reads no control); the cell above sends it new rows and params (memmath_lessons.live_chart).
    staircase_chart = live_chart(lesson_charts.rounding_staircase)
    staircase_chart
    return (staircase_chart,)


@app.cell
def _(live_only_notice, mm, mo, viz):
    _extra_bits = mm.get_format("fp16").mantissa_bits - mm.get_format("bf16").mantissa_bits
    _flat = mo.md(f"""
    Flat stretches are values the format cannot tell apart. fp16's staircase hugs the dashed
    exact line; bf16's steps are {2 ** _extra_bits} times wider ({_extra_bits} fewer mantissa bits); fp8 and the
    integer format are wider still, which is why they are used for storage with care (per-block
    scales) rather than for every number in training.
    """)
    _prose = mo.md(f"""
    ## Which GPUs can hold the weights?

    GPU memory below is what the driver reports (nvidia-smi), which differs from the size on the
    box (see GB versus GiB in {viz.lesson_link("00_start_here", "the start page")}). A card also
    loses memory before any tensor arrives, to the CUDA context: tick the box to set it aside.
    """)
    context_checkbox = mo.ui.checkbox(value=False, label="Set aside each card's CUDA context")
    mo.vstack([_flat, _prose, live_only_notice(), context_checkbox])
    return (context_checkbox,)


@app.cell(hide_code=True)
def _(live_chart, live_html, mo):
    # Drawn once (this cell reads no control); the cell under the size controls sends them new rows and text.
    # What each card reserves for its CUDA context, and why, waits in the fold beside the table it changes.
    cards_chart, cards_verdict_view, cards_reserve_view, cards_table_view = (live_chart(), live_html(), live_html(),
                                                                             live_html())
    mo.vstack([cards_chart, cards_verdict_view, mo.accordion(
        {"How much room does each card leave, and what does its CUDA context take?": mo.vstack(
            [cards_reserve_view, cards_table_view])})])
    return cards_chart, cards_reserve_view, cards_table_view, cards_verdict_view


@app.cell(hide_code=True)
def _(format_specs, mo, viz):
    mo.callout(mo.md(f"""
    **Takeaways**

    - Weight memory = parameters × bits ÷ 8. The format sets the bits: {format_specs["fp32"].bits} for fp32,
      {format_specs["bf16"].bits} for bf16 and fp16, {format_specs["int8"].bits} for fp8 and int8,
      {format_specs["int4"].bits} for int4 and nf4.
    - Same bits, different trade-offs: bf16 keeps fp32's range with coarse steps; fp16 has finer
      steps but overflows past {format_specs["fp16"].max_value:,.0f}.
    - Integer (fixed-point) formats store whole steps of a scale; the scales cost a little memory too.
    - Holding the weights is only the start: training keeps gradients and optimizer states as well,
      the subject of {viz.lesson_link("02_full_finetuning")}.
    """), kind="success")
    return


@app.cell
def _(mm):
    # Problem answers, computed with memmath.
    answer_13b_params = _n13 = mm.PRESETS["llama-2-13b"].n_params
    answer_13b_bf16 = mm.get_format("bf16").bytes_for(_n13)
    # nf4 with one fp32 scale per 64 weights, as the problem asks (no double quantization).
    answer_13b_nf4 = mm.get_format("nf4").bytes_for(_n13) + mm.methods.quant_constant_bytes(_n13, double_quant=False)
    _nf4_dq = mm.inference_memory(_n13, weights_format="nf4")  # QLoRA's double quantization
    answer_13b_nf4_dq = _nf4_dq.weights + _nf4_dq.quantization_constants
    _loaded = mm.inference_memory("llama-2-13b", weights_format="nf4")  # nn.Linear only, as transformers + bitsandbytes
    answer_13b_nf4_loaded = _loaded.weights + _loaded.quantization_constants
    answer_scale_bytes_per_64 = mm.methods.quant_constant_bytes(64, double_quant=False)  # one fp32 scale
    answer_4090_bytes = mm.GPUS["RTX 4090"].memory_bytes  # as its driver reports it
    answer_4090_max_params = answer_4090_bytes * 8 // mm.get_format("bf16").bits
    answer_fp16_70k = mm.formats.round_to_format(70_000, "fp16")
    answer_bf16_70k = mm.formats.round_to_format(70_000, "bf16")
    answer_int8_unscaled = mm.formats.round_to_format(0.1, "int8")
    answer_int8_scaled = mm.formats.round_to_format(0.1, "int8", scale=mm.formats.absmax_scale("int8", 1.0))
    answer_int8_steps = round(answer_int8_scaled / mm.formats.absmax_scale("int8", 1.0))
    answer_bf16_step_70k = mm.formats.float_step("bf16", 70_000)
    return (answer_13b_bf16, answer_13b_nf4, answer_13b_nf4_dq, answer_13b_nf4_loaded, answer_13b_params,
            answer_4090_bytes, answer_4090_max_params, answer_bf16_70k, answer_bf16_step_70k, answer_fp16_70k,
            answer_int8_scaled, answer_int8_steps, answer_int8_unscaled, answer_scale_bytes_per_64)


@app.cell(hide_code=True)
def _(answer_13b_bf16, answer_13b_nf4, answer_13b_nf4_dq, answer_13b_nf4_loaded, answer_13b_params,
      answer_4090_bytes, answer_4090_max_params, answer_bf16_70k, answer_bf16_step_70k, answer_fp16_70k,
      answer_int8_scaled, answer_int8_steps, answer_int8_unscaled, answer_scale_bytes_per_64, format_bytes,
      format_specs, mo, viz):
    _n13, _scale_bytes = answer_13b_params, answer_scale_bytes_per_64
    _bf16, _nf4 = format_specs["bf16"], format_specs["nf4"]
    mo.vstack([
        mo.md("## Problems"),
        mo.md(f"**1.** Llama-2-13B has {_n13:,} parameters. How much memory do its weights take in bf16, "
              "and in nf4 with one fp32 scale per 64 weights?"),
        mo.accordion({"Answer": mo.md(
            f"bf16: {_n13:,} × {_bf16.bytes:g} B = {format_bytes(answer_13b_bf16)}. nf4: {_nf4.bytes:g} B each "
            f"plus {_scale_bytes} B per 64 weights = {format_bytes(answer_13b_nf4)}, about "
            f"{answer_13b_bf16 / answer_13b_nf4:.1f} times less. QLoRA's double quantization stores those scales "
            f"in 8 bits (plus one fp32 per 256 of them): {format_bytes(answer_13b_nf4_dq)}, with every weight in "
            f"nf4. Loaded through transformers with bitsandbytes, only the linear layers become nf4 and the "
            f"embeddings, norms and output head stay in bf16: {format_bytes(answer_13b_nf4_loaded)}, the size "
            f"{viz.lesson_link('07_inference', 'lesson 7')} gives.")}),
        mo.md("**2.** An RTX 4090 is sold as 24 GB. What is the largest model whose bf16 weights fit in the "
              "memory its driver reports (ignoring everything else)?"),
        mo.accordion({"Answer": mo.md(
            f"The driver reports {format_bytes(answer_4090_bytes, 'GiB')} = "
            f"{answer_4090_bytes:,} B; at 2 B per parameter that is {answer_4090_max_params:,} "
            f"parameters, about {viz.short_count(answer_4090_max_params)}. Holding them is not training them: "
            "see lesson 2.")}),
        mo.md("**3.** Store 70,000 in fp16 and in bf16. What comes back, and why?"),
        mo.accordion({"Answer": mo.md(
            f"fp16 gives {'infinity' if answer_fp16_70k == float('inf') else answer_fp16_70k} (its largest value is {format_specs['fp16'].max_value:,.0f}); "
            f"bf16 gives {answer_bf16_70k:,.0f}: in range thanks to its {_bf16.exponent_bits} exponent bits, "
            f"but rounded to a step of {answer_bf16_step_70k:,.0f} because only {_bf16.mantissa_bits} mantissa "
            "bits remain.")}),
        mo.md("**4.** Why does int8 need a scale? Store 0.1 in int8 with no scale, then with a block absmax of 1."),
        mo.accordion({"Answer": mo.md(
            f"With no scale int8 stores whole numbers, so 0.1 becomes {answer_int8_unscaled:g}. With absmax 1 "
            f"the scale is 1/{format_specs['int8'].max_value:.0f} and 0.1 is stored as {answer_int8_steps} "
            f"steps = {answer_int8_scaled:.5f}: a fixed-point "
            "number, a whole count of a fixed step.")}),
    ])
    return


@app.cell
def _(mm, np):
    def store(value, name, absmax):
        """What format `name` stores for `value` (integer formats scaled to a block absmax), and what happened."""
        fmt = mm.get_format(name)
        scale = mm.formats.absmax_scale(fmt, absmax)  # 1.0 for floats
        stored = mm.formats.round_to_format(value, fmt, scale=scale)
        if np.isnan(stored):
            shown, error, what = "none", "-", "overflow: E4M3 has no infinity, the value is lost"
        elif np.isinf(stored):
            shown, error, what = "infinity", "-", f"overflow: above the largest value, {fmt.max_value:,.0f}"
        else:
            shown, error = f"{stored:.9g}", f"{abs(stored - value):.3g}"
            if fmt.kind != "float" and abs(value) > absmax:
                what = f"clipped: beyond the block's absmax ({absmax:g}), stored at the format's end level"
            elif stored == 0 and value != 0:
                what = "rounded to zero"
            else:
                what = "exact" if stored == value else f"rounded, {100 * abs(stored - value) / abs(value):.2g}% off"
        return {"format": name, "scale": f"{scale:.4g}", "stored value": shown, "error": error, "what happened": what}

    return (store,)


if __name__ == "__main__":
    app.run()
