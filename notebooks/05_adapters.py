# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "5. Adapters"
# description = "Houlsby adapters: two small modules per block, about 3% of the parameters trained, and the extra forward-pass work they add."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Adapters (PEFT)", css_file="memmath.css")


@app.cell(hide_code=True)
def _(literature, mo):
    _gap, _share = literature.REPORTED["houlsby_glue_gap"], literature.REPORTED["houlsby_trainable_share"]
    mo.md(f"""
    # Adapters: train small modules, leave the model alone

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** Houlsby and colleagues (2019) kept every weight of BERT unchanged, put two small
    new modules, **adapters**, inside each transformer block and trained only those. On GLUE this came
    within **{_gap.value}%** of full finetuning while training only **{_share.value}%** of the parameters
    per task (the article rounds to 3%; {_share.source}). The trainable parameters are simply the
    adapters' parameters, and one number sets them: the adapter's inner width m, the **bottleneck**.
    Move it:
    """)
    return


@app.cell
def _():
    import os

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons.reference import literature, paper_setups
    from memmath_lessons import diagrams, requirement_view, site_charts, toy_block, viz
    from memmath_lessons.static_charts import live_only_notice
    from memmath_lessons.live_chart import live_chart
    from memmath.verdict import verdict_of

    return (alt, diagrams, format_bytes, literature, live_chart, live_only_notice, mm, mo, np, os,
            paper_setups, pd, requirement_view, site_charts, to_unit, toy_block, verdict_of, viz)


@app.cell
def _(live_only_notice, mm, mo):
    bert_large = mm.PRESETS["bert-large-uncased"]
    ADAPTER_MODELS = {"BERT-large (the paper's base)": "bert-large-uncased",
                      "BERT-base": "bert-base-uncased", "Llama-2-7B (a LLaMA-size model)": "llama-2-7b"}
    BOTTLENECKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    bottleneck_slider = mo.ui.slider(steps=BOTTLENECKS, value=64,
                                     label="Bottleneck m (the adapter's inner width)", show_value=True)
    train_norms_checkbox = mo.ui.checkbox(value=False, label="also train the layer norms (as the paper did)")
    mo.vstack([live_only_notice(), mo.hstack([bottleneck_slider, train_norms_checkbox], justify="start", gap=2)])
    return ADAPTER_MODELS, BOTTLENECKS, bert_large, bottleneck_slider, train_norms_checkbox


@app.cell(hide_code=True)
def _(literature, mo, viz):
    def show_adapter_counts(bert_large, bottleneck, train_norms, bert_adapters, adapter_counts):
        """The core path's number (BERT-large's adapters counted by hand), the three models' table, the takeaway."""
        _h, _L, _m, _bert = bert_large.hidden_size, bert_large.n_layers, bottleneck, bert_adapters
        _per_adapter = 2 * _m * _h + _m + _h  # Houlsby et al. 2019: down h x m + m biases, up m x h + h biases
        _norm_text = (f" + {_bert.trainable_params - 2 * _L * _per_adapter:,} layer-norm parameters" if train_norms else "")
        _partial = literature.REPORTED["bert_large_partial_share"].value
        return mo.vstack([
            mo.md(f"""
        **The number.** BERT-large (h = {_h:,}, {_L} blocks) at m = {_m}: one adapter has 2·m·h + m + h =
        2 × {_m} × {_h:,} + {_m} + {_h:,} = {_per_adapter:,} parameters, two per block make {2 * _per_adapter:,},
        and {_L} blocks {2 * _L * _per_adapter:,}{_norm_text}: **{_bert.trainable_params:,} of {_bert.total_params:,}
        parameters train, {_bert.trainable_fraction:.2%} of the model**. The same bottleneck on three models:
        """),
            viz.plain_table(adapter_counts),
            mo.callout(mo.md(f"""
        **Takeaway.** Adapters train a few percent of the model or less, far below the
        {_partial:.0f}% that freezing had to open up on BERT-large ({viz.lesson_link("04_freezing", "lesson 4")}).
        They save the gradients and optimizer states of every frozen weight, but not the weights and only
        a part of the activations (every block still keeps its share), and they add work to every forward
        pass, so inference gets slower.
        """), kind="success"),
        ])

    return (show_adapter_counts,)


@app.cell
def _(ADAPTER_MODELS, bert_large, bottleneck_slider, mm, pd, show_adapter_counts, train_norms_checkbox):
    # The core path's number and the same bottleneck on three models: the one cell the bottleneck slider
    # re-runs here (the memory section below is the other). Parameter counts only: seq_len=None skips the activations.
    bottleneck = bottleneck_slider.value
    _norms = train_norms_checkbox.value
    _rows = []
    for _label, _preset in ADAPTER_MODELS.items():
        _shape = mm.PRESETS[_preset]
        _one = mm.training_memory(_shape, method=mm.Adapters(bottleneck=bottleneck, train_norms=_norms), seq_len=None)
        _rows.append({"model": _label, "width h": _shape.hidden_size, "blocks": _shape.n_layers,
                      "adapter params per block": mm.Adapters(bottleneck=bottleneck).params_per_block(_shape),
                      "trainable params": _one.trainable_params, "of the base model": f"{_one.trainable_fraction:.2%}"})
    adapter_counts = pd.DataFrame(_rows)
    _bert = mm.training_memory(bert_large, method=mm.Adapters(bottleneck=bottleneck, train_norms=_norms), seq_len=None)
    show_adapter_counts(bert_large, bottleneck, _norms, _bert, adapter_counts)
    return adapter_counts, bottleneck


@app.cell(hide_code=True)
def _(diagrams, mo):
    _where = mo.md(r"""
    ## Where the adapters sit

    Houlsby et al. put **two adapters in every transformer block** of BERT: one after the attention's
    output projection, one after the feed-forward layers, each before the residual addition and layer
    norm. An adapter is a bottleneck: down from width h to a small m, a nonlinearity, back up to h,
    plus its own input (a skip connection). Grey boxes are frozen; green ones train.
    """)
    # The flowcharts as mermaid drew them (memmath_lessons.diagrams holds their sources): drawing them in the page
    # would load mermaid's library on every visit.
    mo.vstack([_where, mo.hstack([mo.vstack([mo.md("**One block**"), diagrams.show("adapter_block")]),
                                  mo.vstack([mo.md("**Inside one adapter**"), diagrams.show("adapter_inside")])],
                                 justify="space-around", widths=[3, 2])])
    return


@app.cell(hide_code=True)
def _(mo, np, toy_block, viz):
    # A small numpy block (width 64, 8 tokens, bottleneck 8) runs one input; its trace is folded below.
    _width, _tokens, _m = 64, 8, 8
    _block = toy_block.make_block(_width, n_heads=4)
    _input = toy_block.make_input(_tokens, _width)
    _fresh = toy_block.make_adapters(_width, _m, zero_up=True)  # up-projection exactly 0
    _moved = toy_block.make_adapters(_width, _m, zero_up=False)  # as if training had moved them
    trace_table = toy_block.trace_frame(_input, _block, _fresh)
    _base = toy_block.block_forward(_input, _block)
    fresh_gap = float(np.abs(toy_block.block_forward(_input, _block, _fresh) - _base).max())
    moved_gap = float(np.abs(toy_block.block_forward(_input, _block, _moved) - _base).max())
    mo.accordion({"Does a fresh adapter change the model? Follow one input through a block": mo.vstack([mo.md(f"""
    An input passes through the frozen base computation, then through the adapter, then onward to
    the next step. Only the adapter's weights change in training; the base computes the same thing
    for every example. Adapters start as (almost) the identity: Houlsby et al. initialise them near
    zero, so the adapted model begins where the pretrained one was. In a small numpy block
    (`memmath_lessons.toy_block`: width {_width}, {_tokens} tokens, bottleneck {_m}) with the
    up-projection at zero, the output with and without adapters differs by
    **{"exactly 0" if fresh_gap == 0 else f"{fresh_gap:.1e}"}**; once the adapter weights move (small
    random values standing in for training), it differs by up to **{moved_gap:.4f}**, while every base
    weight stays as it was.
    """), mo.md("Every step of that block on one input: the frozen base computation, the adapter, then onward. "
                "Only the two adapter steps hold trainable weights."),
        viz.plain_table(trace_table)])})  # plain: with no mo.ui.table on the page, its code never loads
    return fresh_gap, moved_gap, trace_table


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Counting adapter parameters

    An adapter's **2·m·h + m + h** parameters (a down-projection h × m and an up-projection m × h,
    each with its biases) grow with m·h; the model's own grow with h² (its matrices are h × h and
    h × 4h), so the share falls as models get wider. The share for every bottleneck:
    """)
    return


@app.cell(hide_code=True)
def _(live_chart):
    share_chart = live_chart()  # drawn once (reads no control); the cell below sends it rows when the checkbox moves
    share_chart
    return (share_chart,)


@app.cell(hide_code=True)
def _(alt, literature, mo, pd, share_chart):
    def show_adapter_shares(adapter_curves, paper_bottlenecks, paper_shares, bottleneck_at_paper_share):
        """The share curves against the paper's 3.6% (a chart), and the callout on the paper's bottlenecks."""
        # The curves alone, no marker at the chosen m: the chart then redraws only when the checkbox moves, and the
        # table above says where you are.
        _share = literature.REPORTED["houlsby_trainable_share"]
        _lines = alt.Chart(adapter_curves).mark_line(point=True).encode(
            x=alt.X("bottleneck:Q", scale=alt.Scale(type="log", base=2), title="Bottleneck m (log scale)"),
            y=alt.Y("share:Q", scale=alt.Scale(type="log"), title="Trainable parameters (% of the base model, log)"),
            color=alt.Color("model:N", title="Model"),
            tooltip=[alt.Tooltip("model:N"), alt.Tooltip("bottleneck:Q"), alt.Tooltip("share:Q", format=".3f", title="%")])
        _rule = alt.Chart(pd.DataFrame({"share": [_share.value], "text": [f"paper: {_share.value}% per task"]}))
        _paper_line = _rule.mark_rule(color="black").encode(y=alt.Y("share:Q")) + _rule.mark_text(
            align="left", dx=4, dy=-7, fontSize=11).encode(y=alt.Y("share:Q"), x=alt.value(4), text=alt.Text("text:N"))
        share_chart.update((_lines + _paper_line).properties(width=560, height=300,
                                                             title="Adapters' share of the model, by bottleneck"))
        _sizes, _shares, _m_at = paper_bottlenecks, paper_shares, bottleneck_at_paper_share
        return mo.vstack([
            mo.callout(mo.md(f"""
        **The paper's bottlenecks.** Houlsby et al. picked the bottleneck per task from {", ".join(map(str, _sizes))},
        which on BERT-large gives {", ".join(f"{s:.2%}" for s in _shares)} of the parameters; m = **{_m_at}**
        lands at the paper's {_share.value}% ({_share.source}). Either way, far below the
        {literature.REPORTED["bert_large_partial_share"].value:.0f}% that freezing needed.
        """), kind="info"),
        ])

    return (show_adapter_shares,)


@app.cell
def _(ADAPTER_MODELS, bert_large, BOTTLENECKS, literature, mm, np, paper_setups, pd, show_adapter_shares,
      train_norms_checkbox):
    # The share for every bottleneck at once (numpy arrays broadcast): runs when the checkbox moves, not the slider.
    # Shares only, so seq_len=None: no activations are computed for the sweeps.
    train_norms = train_norms_checkbox.value
    _sweep = np.array(BOTTLENECKS)
    adapter_curves = pd.concat([pd.DataFrame({
        "model": _label, "bottleneck": _sweep,
        "share": 100 * mm.training_memory(_preset, method=mm.Adapters(bottleneck=_sweep, train_norms=train_norms),
                                          seq_len=None).trainable_fraction})
        for _label, _preset in ADAPTER_MODELS.items()], ignore_index=True)
    # The paper's own bottlenecks on BERT-large, and the smallest m that reaches its 3.6%.
    _sizes = paper_setups.HOULSBY_GLUE_BOTTLENECKS
    _shares = mm.training_memory(bert_large, method=mm.Adapters(bottleneck=np.array(_sizes), train_norms=train_norms),
                                 seq_len=None).trainable_fraction
    _m = np.arange(1, 1025)
    _swept = mm.training_memory(bert_large, method=mm.Adapters(bottleneck=_m, train_norms=train_norms),
                                seq_len=None).trainable_fraction
    _m_at = int(_m[np.argmax(_swept >= literature.REPORTED["houlsby_trainable_share"].value / 100)])
    show_adapter_shares(adapter_curves, _sizes, _shares, _m_at)
    return adapter_curves, train_norms


@app.cell
def _(ADAPTER_MODELS, BOTTLENECKS, literature, mo, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.site_charts: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md(r"""
    The chart below answers the same question one bottleneck at a time, with the count beside each
    bar. Its own inputs, under the chart, redraw it in the browser from numbers memmath computed for
    every bottleneck in advance, so they keep working in this static copy of the workbook.
    """), site_charts.adapter_shares(ADAPTER_MODELS, BOTTLENECKS, literature.REPORTED["houlsby_trainable_share"].value)
    ]) if site_charts.is_static_export() else None
    return
@app.cell
def _(mm):
    gpu_names = list(mm.GPUS)  # every card memmath knows, for the GPU control
    return (gpu_names,)


@app.cell(hide_code=True)
def _(ADAPTER_MODELS, gpu_names, live_only_notice, mo):
    memory_model_dropdown = mo.ui.dropdown(options=ADAPTER_MODELS, value="Llama-2-7B (a LLaMA-size model)", label="Model")
    batch_slider = mo.ui.slider(1, 64, value=2, label="Batch size (sequences)", show_value=True)
    seq_len_slider = mo.ui.slider(steps=[64, 128, 256, 512, 1024, 2048, 4096], value=512, label="Sequence length (tokens)", show_value=True)
    gpu_dropdown = mo.ui.dropdown(options=gpu_names, value="RTX 4090", label="GPU to compare with")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", label="Unit", inline=True)
    mo.vstack([mo.md(r"""
    ## What adapters save, and what they do not

    A frozen weight needs no gradient and no optimizer state, so those two parts shrink to the
    adapters' size. But every weight stays in memory, and **activations still flow through every
    layer**: the first adapter sits in the first block, so the backward pass travels all the way
    down. Freezing all but the last block stores activations for one block only. Compare the three
    for one model, in pure bf16 with AdamW:
    """), live_only_notice(), mo.hstack([memory_model_dropdown, gpu_dropdown, unit_radio], justify="start", gap=2),
               mo.hstack([batch_slider, seq_len_slider], justify="start", gap=2)])
    return batch_slider, gpu_dropdown, memory_model_dropdown, seq_len_slider, unit_radio


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell below sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(bars_chart, format_bytes, mo, requirement_view, viz):
    def show_memory(model_label, model_shape, seq_len, gpu, unit, scenarios, needs, fits, usable_bytes, memory_table,
                    fit_margin):
        """The memory section: the bars against the card, the table, and what they say."""
        bars_chart.update(requirement_view.bars_output(
            needs, unit, title="Memory of one training step", capacity_bytes=usable_bytes,
            capacity_label=f"{gpu.name} less the CUDA context ({format_bytes(usable_bytes, unit)})"))

        _full, _freeze, _adapt = scenarios.values()
        _saved = _full.trainable_state - _adapt.trainable_state
        _per_adapt, _per_full = _adapt.activation_detail.per_layer, _full.activation_detail.per_layer
        _per_unit = "MB" if unit == "GB" else "MiB"
        _dropout = "the dropout of its config" if _adapt.dropout else "no dropout (its config has none)"
        _shape = model_shape
        _long = _shape.max_positions is not None and seq_len > _shape.max_positions
        _warn = [mo.callout(mo.md(f"{model_label} learned only {_shape.max_positions:,} positions, "
                                  f"so it cannot read {seq_len:,} tokens; the arithmetic still shows "
                                  "what the memory would be."), kind="warn")] if _long else []
        _bases = {requirement_view.requirement_words(n) for n in needs.values()}
        _basis = ("the step's peak, the most allocated at one moment" if _bases == {"the step's peak"}
                  else "the step's peak where memmath models it, else the sum of the parts")
        _verdicts = ", ".join(f"{what} {yes if fits[name] else no}" for (what, yes, no), name in zip(
            (("full finetuning", "fits", "does not fit"), ("freezing all but the last block", "fits", "does not fit"),
             ("adapters", "fit", "do not fit")), needs))
        return mo.vstack([viz.plain_table(memory_table)] + _warn + [mo.md(f"""
        Against full finetuning, adapters save **{format_bytes(_saved, unit)}** of gradients and
        optimizer states. Their weights are the base model's {format_bytes(_full.weights, unit)} plus
        {format_bytes(_adapt.weights - _full.weights, _per_unit)} of adapters: nothing is saved there. Their
        activations are {format_bytes(_adapt.activations, unit)}, {_adapt.activations / _full.activations:.0%} of
        full finetuning's {format_bytes(_full.activations, unit)}: every one of the
        {_adapt.activation_detail.layers_storing} blocks keeps its share. Freezing all but the last block keeps
        only {format_bytes(_freeze.activations, unit)}.
        """), mo.accordion({"Does it fit, and on which cards?": mo.md(f"""
        A card must hold {_basis} (the black tick on each bar, the table's "the card must
        hold"), with {fit_margin:.0%} of it kept free (the command line's margin), in its
        capacity less the CUDA context. The {gpu.name} reports {format_bytes(gpu.memory_bytes, unit)},
        so {format_bytes(usable_bytes, unit)} is left (the dashed line); on it {_verdicts}, as
        `memmath train` says. The "smallest GPU" column judges every card the same way.
        """), "Why do adapters keep most of the activations?": mo.md(f"""
        With adapters each block keeps {viz.readable_size(_per_adapt, unit)} of activations, against
        {viz.readable_size(_per_full, unit)} in full finetuning.
        A frozen linear layer keeps no copy of its input, since it computes no gradient for its weight;
        what the gradient needs on its way down stays (the norms' and the attention's inputs, the MLP
        activation's), and the adapters add their own: each keeps its b·s·h input and two b·s·m tensors.
        """), "Why judge the step's peak, and what does the CUDA context take?": mo.md(f"""
        Not every part is alive at once, and a step holds temporaries no part counts, so the card must hold
        the step's peak, not the sum of the parts. What a run can use is the card less its CUDA context:
        {viz.card_reserve_words(gpu)}.
        """), "What does this estimate assume?": mo.md(
            f"Recipe: {_adapt.assumptions} Activations: what transformers' PyTorch code for this model saves for "
            f"backward, tensor by tensor (`activations=\"{_adapt.activation_model}\"`, checked against PyTorch "
            f"on small BERT and LLaMA models below), with {'SDPA' if _adapt.attention == 'sdpa' else 'eager'} attention and "
            f"{_dropout}.")})])

    return (show_memory,)


@app.cell
def _(batch_slider, bottleneck, gpu_dropdown, memory_model_dropdown, mm, pd, seq_len_slider, show_memory,
      to_unit, unit_radio, verdict_of):
    # The memory section in one cell: a move of any of its controls re-runs this cell alone (and the chart takes rows).
    unit = unit_radio.value
    gpu = mm.get_gpu(gpu_dropdown.value)
    _setup = dict(precision="bf16", optimizer="adamw", batch_size=batch_slider.value, seq_len=seq_len_slider.value)
    scenarios = {
        "Full finetuning": mm.training_memory(memory_model_dropdown.value, method=mm.Full(), **_setup),
        "Freeze: last block trains": mm.training_memory(memory_model_dropdown.value, method=mm.Freeze(trainable_layers=1), **_setup),
        f"Adapters, m = {bottleneck}": mm.training_memory(memory_model_dropdown.value, method=mm.Adapters(bottleneck=bottleneck), **_setup),
    }
    # What each run needs of the card: memmath.requirement, the number the command line and the planner judge
    # (the step's peak where memmath models it, else the sum of the parts).
    _methods = (mm.Full(), mm.Freeze(trainable_layers=1), mm.Adapters(bottleneck=bottleneck))
    needs = {name: mm.requirement(memory_model_dropdown.value, method=_m, **_setup)
             for name, _m in zip(scenarios, _methods)}
    # What a card offers: its memory less its CUDA context, the default reserve of check_fit and fit_table.
    usable_bytes = gpu.memory_bytes - gpu.cuda_context_bytes

    def _fits(need, card):
        # The one rule (memmath.verdict): its requirement, the CUDA context reserved, 5% of it kept free.
        return verdict_of(need, card).fits

    def _smallest_fit(need):
        # The smallest card (as fit_table orders them) that holds it; check_fit card by card costs ~1 ms here.
        _cards = sorted(mm.GPUS.values(), key=lambda g: g.memory_bytes)
        return next((g.name for g in _cards if _fits(need, g)), "none listed")

    memory_table = pd.DataFrame([{"scenario": name, "trainable": r.trainable_params,
                           f"weights ({unit})": round(to_unit(r.weights, unit), 2),
                           f"grads + states ({unit})": round(to_unit(r.trainable_state, unit), 3),
                           f"activations ({unit})": round(to_unit(r.activations, unit), 2),
                           f"sum of the parts ({unit})": round(to_unit(r.total, unit), 2),
                           f"the card must hold ({unit})": round(to_unit(needs[name].bytes, unit), 2),
                           "smallest GPU": _smallest_fit(needs[name])} for name, r in scenarios.items()])
    show_memory(memory_model_dropdown.selected_key, mm.PRESETS[memory_model_dropdown.value], seq_len_slider.value, gpu,
                unit, scenarios, needs, {name: _fits(n, gpu) for name, n in needs.items()}, usable_bytes, memory_table,
                mm.FIT_MARGIN)
    return gpu, memory_table, needs, scenarios, unit, usable_bytes


@app.cell(hide_code=True)
def _(live_only_notice, mo, toy_block):
    _start = dict(width=256, seq_len=128, bottleneck=64, runs=15)  # the sliders' starting values, measured at load
    width_slider = mo.ui.slider(steps=[64, 128, 256, 384, 512], value=_start["width"], label="Block width h", show_value=True)
    toy_seq_slider = mo.ui.slider(steps=[16, 32, 64, 128, 256], value=_start["seq_len"], label="Sequence length s (tokens)",
                                  show_value=True)
    toy_bottleneck_slider = mo.ui.slider(steps=[4, 8, 16, 32, 64, 128, 256], value=_start["bottleneck"], label="Bottleneck m",
                                         show_value=True)
    runs_slider = mo.ui.slider(5, 30, value=_start["runs"], label="Runs (pairs of timings)", show_value=True)
    timing_budget_s = 0.8  # stop timing after this long, so the page stays responsive

    def measure_adapter_timing(width, seq_len, bottleneck, runs, number=1):
        """Time the numpy block with and without adapters; the settings travel with the timings."""
        _m = min(bottleneck, width)
        _times = toy_block.time_forward(toy_block.make_input(seq_len, width), toy_block.make_block(width, n_heads=4),
                                        toy_block.make_adapters(width, _m, zero_up=False),
                                        repeats=runs, budget_s=timing_budget_s)
        return {"timings": _times, "h": width, "s": seq_len, "m": _m, "runs": runs, "number": number}

    # The sliders only choose; the button measures (once at load, then on every press), so moving a
    # slider never waits for a timing and a timing never hides behind a slider.
    measure_button = mo.ui.button(
        value=measure_adapter_timing(**_start),
        on_click=lambda last: measure_adapter_timing(width_slider.value, toy_seq_slider.value, toy_bottleneck_slider.value,
                                                     runs_slider.value, last["number"] + 1),
        label="Measure", kind="success", tooltip="Time the block at the settings on the sliders")
    mo.vstack([mo.md(r"""
    ## The price: extra work on every forward pass

    An adapter runs every time the model runs, in training *and* when it serves answers. The
    article calls this the main drawback: higher inference latency. Measure it: set the sliders and press **Measure** to time a numpy block with and without
    adapters.
    """), mo.accordion({"How is the work counted, and how is it timed?": mo.md(r"""
    Counted in floating-point operations (FLOPs, two per multiply-add), a block costs
    24·s·h² + 4·s²·h (Narayanan et al. 2021, section 5.1) and its two adapters add 8·s·h·m, a
    fraction **2m / (6h + s)** of its work. But FLOPs are not time: adapters are small, sequential matrix
    products plus elementwise work, which a processor runs less efficiently than large ones.
    **Measure** times the block with and without adapters, both back to back in every run, taking
    turns going first so a busy moment slows both alike. It measured once when the page opened.
    """)}), live_only_notice(),
               mo.hstack([width_slider, toy_seq_slider], justify="start", gap=2),
               mo.hstack([toy_bottleneck_slider, runs_slider], justify="start", gap=2),
               mo.hstack([measure_button, mo.md("times the block at these settings (up to "
                                                f"{timing_budget_s} s of timing)")], justify="start", gap=1)])
    return (measure_adapter_timing, measure_button, runs_slider, timing_budget_s, toy_bottleneck_slider, toy_seq_slider,
            width_slider)


@app.cell(hide_code=True)
def _(measurement, mo, runs_slider, toy_block, toy_bottleneck_slider, toy_seq_slider, width_slider):
    # The only cell a timing slider re-runs: what the sliders would time, and whether the shown measurement is theirs.
    _h, _s, _m, _runs = width_slider.value, toy_seq_slider.value, min(toy_bottleneck_slider.value, width_slider.value), runs_slider.value
    _flops = toy_block.adapter_flop_overhead(_s, _h, _m)
    _same = (_h, _s, _m, _runs) == tuple(measurement[k] for k in ("h", "s", "m", "runs"))
    _then = (f"The measurement below (number {measurement['number']}) is for these settings; press **Measure** to repeat it."
             if _same else
             f"**Press Measure** to time these settings: the measurement below is still the one for h = {measurement['h']}, "
             f"s = {measurement['s']}, m = {measurement['m']}, {measurement['runs']} runs.")
    mo.md(f"""
    On the sliders: h = {_h}, s = {_s}, m = {_m}{" (m is capped at h)" if toy_bottleneck_slider.value > _h else ""}, {_runs}
    runs. Counting FLOPs, two adapters make this block **{1 + _flops:.3f}×** as much work ({_flops:+.1%}). {_then}
    """)
    return


@app.cell(hide_code=True)
def _(live_chart):
    timing_chart = live_chart()  # drawn once (reads no control); the cell below sends it each measurement
    timing_chart
    return (timing_chart,)


@app.cell
def _(alt, measure_button, mo, os, timing_budget_s, timing_chart, toy_block, viz):
    # Everything about the shown measurement, in one cell that only the Measure button re-runs.
    measurement = measure_button.value  # changes only when Measure is pressed
    timings = measurement["timings"]
    toy_width, toy_seq, toy_m = measurement["h"], measurement["s"], measurement["m"]
    timing_table = toy_block.timing_summary(timings)
    measured_ratio = toy_block.median_ratio(timings)
    fastest_ratio = toy_block.fastest_ratio(timings)
    predicted_overhead = toy_block.adapter_flop_overhead(toy_seq, toy_width, toy_m)
    _ms = timings.assign(ms=timings["seconds"] * 1e3)
    _x = alt.X("ms:Q", title="Time per forward pass (ms, log scale)", scale=alt.Scale(type="log"))
    _y = alt.Y("variant:N", title=None, sort=["base", "with adapters"])
    _box = alt.Chart(_ms).mark_boxplot(extent="min-max", opacity=0.3, size=30).encode(
        x=_x, y=_y, color=alt.Color("variant:N", legend=None))
    _ticks = alt.Chart(_ms).mark_tick(thickness=2, size=22, opacity=0.7).encode(
        x=_x, y=_y, color=alt.Color("variant:N", legend=None),
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("run:Q"), alt.Tooltip("ms:Q", format=".3f", title="ms")])
    _title = alt.Title(f"Measurement {measurement['number']}: every run (ticks), the median and the middle half (boxes)",
                       subtitle=f"h = {measurement['h']}, s = {measurement['s']}, m = {measurement['m']}")
    _threads, _calls, _runs = timings.attrs.get("blas_threads"), timings.attrs.get("calls_per_timing", 1), len(timings) // 2
    _cut = f" (of {measurement['runs']} asked for: timing stops after {timing_budget_s} s)" if _runs < measurement["runs"] else ""
    timing_chart.update((_box + _ticks).properties(width=560, height=130, title=_title))
    mo.vstack([
        mo.md(f"""
        With h = {toy_width}, s = {toy_seq} and m = {toy_m}, over {_runs} runs{_cut}, the fastest
        forward pass with adapters took **{fastest_ratio:.2f}×** as long as the fastest without
        ({fastest_ratio - 1:+.1%}); the medians give **{measured_ratio:.2f}×**. Counting FLOPs alone predicts
        **{1 + predicted_overhead:.3f}×** ({predicted_overhead:+.1%}).
        {"**The two estimates disagree on the direction here**: other work on this machine slowed some runs. "
         "The fastest runs are the least disturbed; press Measure to time again." if (fastest_ratio - 1) * (measured_ratio - 1) < 0 else ""}
        """),
        mo.accordion({"How far can these timings be trusted?": mo.vstack([mo.md(f"""
        Shrink the width or the sequence and the measured gap usually grows beyond the FLOP count: small
        steps cost more time per FLOP than big ones.

        **Read these timings as ratios.** They come from the computer running this notebook
        ({os.cpu_count()} CPU cores visible; BLAS limited to {_threads if _threads else "its default number of"}
        thread{"" if _threads == 1 else "s"}; each timing covers {_calls} back-to-back forward
        pass{"" if _calls == 1 else "es"}). On a busy machine single runs vary a lot: trust the fastest runs,
        the medians and the ratio between the variants, which travels better than milliseconds do. A GPU
        serving a real model shows the same kind of extra latency, in different numbers. Every run, summarised:
        """), viz.plain_table(timing_table.round(3))])}),
    ])
    return (fastest_ratio, measured_ratio, measurement, predicted_overhead, timing_table, timings, toy_m, toy_seq,
            toy_width)


@app.cell(hide_code=True)
def _(literature, mo, viz):
    _full, _peft = literature.REPORTED["peft_examples_full"], literature.REPORTED["peft_examples_peft"]
    mo.accordion({"What else do adapters buy? Cheaper hardware, fewer examples": mo.md(f"""
    The memory table above shows the first: with the base frozen, a model whose full finetune
    needs a data-center GPU can often be adapted on a smaller card (move the model and the GPU).
    The article adds a second: PEFT methods are generally **sample-efficient**: {_full.claim},
    while {_peft.claim}. The trade remains: adapters buy lower training memory with slower
    inference, which {viz.lesson_link("06_lora_qlora", "lesson 6")} removes by merging LoRA's update
    into the weights.
    """)})
    return


@app.cell(hide_code=True)
def _(mo, pd, viz):
    # Houlsby adapters measured: a reference PyTorch adapter (validation/houlsby.py) in tiny BERT and LLaMA blocks,
    # against memmath's exact activation model (the one the memory section above uses).
    from memmath_lessons.reference.measured import load_measured_adapters, measured_metadata, predict_case

    _cases = load_measured_adapters()
    _v = measured_metadata()["versions"]
    _rows = []
    for _, _c in _cases.iterrows():
        _m = predict_case(_c)  # activations="transformers"
        _rows.append({"model": _c["shape"], "precision": _c["precision"], "bottleneck m": int(_c["bottleneck"]),
                      "optimizer": _c["optimizer"],
                      "run (b × s)": f"{int(_c['batch_size'])} × {int(_c['seq_len'])}, {_c['attention']}"
                                     + (", dropout" if _c["dropout"] else "") + (", ckpt" if _c["checkpointing"] else ""),
                      "adapter parameters (measured)": int(_c["adapter_params"]),
                      "memmath": int(_m.trainable_params), "gradients + states, measured (B)":
                      int(_c["grad_bytes"]) + int(_c["optimizer_state_bytes"]),
                      "memmath (B)": int(_m.gradients) + int(_m.optimizer_states),
                      # what the forward pass saved (under checkpointing, before backward recomputes a block)
                      "activations saved, measured (B)": int(_c["saved_bytes"]),
                      "activations, memmath (B)": int(_m.activation_detail.saved_by_forward)})
    measured_adapters = pd.DataFrame(_rows)
    mo.accordion({"Does PyTorch agree with these counts?": mo.vstack([mo.md(f"""
    **Measured.** Two adapters per block (after the attention's and the MLP's output projection,
    as Houlsby et al. place them), only they train; one real step each with torch {_v["torch"]} and
    transformers {_v["transformers"]} on the CPU, on tiny models (3 or 4 blocks, width 64 or 128); the
    "run" column gives each run's batch b, length s, attention, dropout and checkpointing (ckpt). The
    counts, the gradients and optimizer states, and the activations the forward pass saved for backward
    all match memmath to the byte:
    """), viz.plain_table(measured_adapters)])}) if _rows else mo.md("")
    return (measured_adapters,)


@app.cell(hide_code=True)
def _(literature, mo, viz):
    mo.callout(mo.md(f"""
    **Takeaways**

    - Two adapters per block (2·m·h + m + h parameters each) train; every original weight stays.
    - On GLUE: within {literature.REPORTED["houlsby_glue_gap"].value}% of full finetuning with
      {literature.REPORTED["houlsby_trainable_share"].value}% of the parameters trainable (Houlsby et al. 2019).
    - They save the frozen weights' gradients and optimizer states, not the weights, and only a part
      of the activations: the backward pass still crosses every block.
    - Every forward pass does more work, often more than FLOPs predict. Next:
      {viz.lesson_link("06_lora_qlora")}, which removes that cost.
    """), kind="success")
    return


@app.cell
def _(mm, np, toy_block):
    # Problem answers. 1: BERT-base's adapters at m = 64, per block.
    p1_per_block = mm.Adapters(bottleneck=64).params_per_block(mm.PRESETS["bert-base-uncased"])
    # 2: every bottleneck from 1 to 2,048 on Llama-2-7B and BERT-base, and the first that reaches 1%.
    _m = np.arange(1, 2049)
    p2_llama_share = mm.training_memory("llama-2-7b", method=mm.Adapters(bottleneck=_m), seq_len=None).trainable_fraction
    p2_llama_first = int(_m[np.argmax(p2_llama_share >= 0.01)])
    _bert = mm.training_memory("bert-base-uncased", method=mm.Adapters(bottleneck=_m), seq_len=None).trainable_fraction
    p2_bert_first = int(_m[np.argmax(_bert >= 0.01)])
    # 3: adapters against freezing all but the last block, at batch 8 x 1,024 tokens.
    _args = dict(precision="bf16", optimizer="adamw", batch_size=8, seq_len=1024)
    p3_adapters = mm.training_memory("llama-2-7b", method=mm.Adapters(bottleneck=64), **_args)
    p3_freeze = mm.training_memory("llama-2-7b", method=mm.Freeze(trainable_layers=1), **_args)
    p3_blocks = mm.PRESETS["llama-2-7b"].n_layers
    # 4: the adapters' FLOPs against the block's, 2m / (6h + s).
    p4_overhead = toy_block.adapter_flop_overhead(512, 4096, 64)
    return (p1_per_block, p2_bert_first, p2_llama_first, p2_llama_share, p3_adapters, p3_blocks, p3_freeze,
            p4_overhead)


@app.cell(hide_code=True)
def _(format_bytes, mo, p1_per_block, p2_bert_first, p2_llama_first, p2_llama_share, p3_adapters, p3_blocks,
      p3_freeze, p4_overhead):
    _per_block, _first, _share, _bert_first = p1_per_block, p2_llama_first, p2_llama_share, p2_bert_first
    _adapters, _freeze, _overhead = p3_adapters, p3_freeze, p4_overhead
    mo.vstack([
        mo.md("## Problems"),
        mo.accordion({"Four problems: counting adapters, a 1% bottleneck, adapters against freezing, the price in FLOPs": mo.vstack([
            mo.md("**1.** BERT-base has width 768 and 12 blocks. How many parameters do adapters with bottleneck 64 "
                  "add to the whole model?"),
            mo.accordion({"Answer": mo.md(f"""Per adapter 2 × 64 × 768 + 64 + 768 = {_per_block // 2:,}; two per
            block is {_per_block:,}; twelve blocks: **{12 * _per_block:,}** parameters, the count memmath's
            adapters give for bert-base-uncased at m = 64.""")}),
            mo.md("**2.** Which is the smallest bottleneck that makes adapters 1% of Llama-2-7B? Why is it larger "
                  "than the one that gives 1% on BERT-base?"),
            mo.accordion({"Answer": mo.md(f"""**m = {_first}** (the share is {_share[_first - 1]:.3%}); on
            BERT-base m = {_bert_first} is enough. Adapter parameters grow with h, but the model grows with
            h² (its matrices are h × h and h × 4h), so a wider model needs a wider bottleneck for the
            same share.""")}),
            mo.md("**3.** Llama-2-7B, batch 8 × 1,024 tokens, pure bf16 with AdamW. Adapters with m = 64 train far "
                  "fewer parameters than the last block holds. Which of the two keeps more activations, and why?"),
            mo.accordion({"Answer": mo.md(f"""Adapters: {format_bytes(_adapters.activations)} of
            activations; freezing all but the last block: {format_bytes(_freeze.activations)}. The adapters
            sit in every block, so the backward pass runs through all {p3_blocks} blocks and
            each keeps its activations (less than in full finetuning, since the frozen linear layers keep no
            copy of their inputs); with freezing, gradients stop at the last block.""")}),
            mo.md("**4.** By FLOPs, how much extra work do two m = 64 adapters add to a block of width 4,096 at 512 "
                  "tokens? Would you expect the measured slowdown to be smaller or larger?"),
            mo.accordion({"Answer": mo.md(f"""2m / (6h + s) = 128 / (24,576 + 512) = **{_overhead:.2%}**.
            Expect the measured slowdown to be larger: the adapters run as extra, small, sequential steps
            (and at batch size 1 when serving, nothing hides that latency).""")}),
        ])}),
    ])
    return


if __name__ == "__main__":
    app.run()
