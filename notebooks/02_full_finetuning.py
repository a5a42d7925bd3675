# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "2. Full finetuning"
# description = "Where the 56 GB of a 7B full finetune go: gradients, optimizer states, and why estimates run from 8 to 20 B per parameter."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Full finetuning: gradients and optimizer states", css_file="memmath.css")


@app.cell(hide_code=True)
def _(article_run, format_bytes, mo, viz):
    mo.md(f"""
    # Full finetuning: gradients and optimizer states

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    The obvious way to adjust a pre-trained model is to let every weight move: **full finetuning**.
    The article's claim: for a 7B model in a 16-bit format it adds up to about
    **{format_bytes(article_run.without_activations)}** before activations are counted, more than most
    consumer GPUs provide, so a GPU that holds the {format_bytes(article_run.weights)} of weights
    ({viz.lesson_link("01_weights_and_formats", "lesson 1")}) can still fail the run. Training keeps far more
    than the weights: a gradient and the optimizer's states for every weight that trains.

    Pick a model size (or a published model), a precision recipe, an optimizer and a GPU:
    """)
    return


@app.cell
def _():
    import json

    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons import reference
    from memmath_lessons.reference import published
    from memmath_lessons import viz
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons.static_charts import Select, Slider, bound_chart, is_static_export, live_only_notice
    from memmath.verdict import verdict_of

    return (Select, Slider, alt, bound_chart, format_bytes, is_static_export, json, live_chart, live_html,
            live_only_notice, mm, mo, pd, published, reference, to_unit, verdict_of, viz)


@app.cell
def _(live_only_notice, mm, mo, viz):
    params_slider, preset_dropdown = viz.model_size_controls()  # 100M to 1T, or a published model
    # {what a learner reads: memmath's name} (viz.RECIPE_NAMES, viz.OPTIMIZER_NAMES): no code name in a menu.
    precision_dropdown = mo.ui.dropdown(
        options=viz.recipe_menu(["bf16", "fp16", "fp32", "amp", "mixed", "mixed_fp32_grads"]),
        value=viz.RECIPE_NAMES["bf16"], label="Precision recipe")
    optimizer_dropdown = mo.ui.dropdown(
        options=viz.optimizer_menu(["sgd", "sgd_momentum", "adam", "adamw", "adam8bit", "adafactor"]),
        value=viz.OPTIMIZER_NAMES["adam"], label="Optimizer")
    gpu_dropdown = mo.ui.dropdown(options=list(mm.GPUS), value="RTX 4090", label="GPU")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([live_only_notice(), mo.hstack([params_slider, preset_dropdown], justify="start", gap=2),
               mo.hstack([precision_dropdown, optimizer_dropdown], justify="start", gap=2),
               mo.hstack([gpu_dropdown, unit_radio], justify="start", gap=2)])
    return gpu_dropdown, optimizer_dropdown, params_slider, precision_dropdown, preset_dropdown, unit_radio


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the run's cell below sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(gap_view, gpu_view, mo, optimizer_view, published_view, viz):
    def show_run_tables(n_params, unit, published_rows, optimizer_table, gpu_rows):
        """The tables that apply the run to your model (the page replaces those alone), and the sentence between them."""
        _shown = published_rows[["estimate", "B per parameter", f"memory ({unit})", "what it counts", "source"]].round(2)
        published_view.update(_shown, caption=f"For {viz.short_count(n_params)} parameters:",
                              wrapped_columns=["what it counts", "source"])
        optimizer_view.update(optimizer_table, caption=f"For {viz.short_count(n_params)} parameters in your recipe:",
                              wrapped_columns=["what it keeps"])
        gpu_view.update(gpu_rows)
        _gap = gpu_rows[(gpu_rows["holds the weights"] == "yes") & (gpu_rows["runs full finetuning"] == "no")]
        gap_view.update(mo.md(f"With your settings, **{len(_gap)}** of the {len(gpu_rows)} cards hold the weights but "
                              f"fail the run before activations ({', '.join(_gap['gpu']) if len(_gap) else 'none'})."))

    return (show_run_tables,)


@app.cell(hide_code=True)
def _(bars_chart, format_bytes, mo, pd, show_run_tables, viz):
    def show_run(n_params, precision_name, optimizer_name, gpu, unit, run, step_need, holds, runs, published_rows,
                 optimizer_table, gpu_rows):
        """The run's chart and the callout that says it, then the tables further down that apply it to your model."""
        _frame = viz.breakdown_long({"Full finetuning, one step": run}, unit)
        _weights_alone = _frame[_frame["part"] == "weights"].assign(scenario="Holding the weights")
        # viz.stacked_bars as Vega-Lite JSON, into the live chart above: only its rows travel when the size moves.
        bars_chart.update(viz.stacked_bars_output(
            pd.concat([_weights_alone, _frame]), unit, capacity_bytes=runs.usable_bytes,
            capacity_label=f"{gpu.name}: {format_bytes(runs.usable_bytes, unit)} usable (less the CUDA context)",
            title="What the GPU must hold (activations come on top: lesson 3)"))
        if step_need.basis == "peak" and step_need.bytes > run.total:
            _peak_words = (f"The optimizer's step also builds temporaries as it updates the weights (PyTorch's Adam keeps "
                           f"one for every trainable tensor at once): at batch 1 x 512 tokens the step peaks at "
                           f"**{format_bytes(step_need.bytes, unit)}**, the figure lessons 0 and 8 judge a card by "
                           f"({format_bytes(step_need.bytes - run.total, unit)} above the parts before activations).")
        elif step_need.basis == "peak":
            _peak_words = (f"At batch 1 x 512 tokens the step peaks at {format_bytes(step_need.bytes, unit)} "
                           "(the figure lessons 0 and 8 judge a card by).")
        elif step_need.refused:  # a model type without an activation trace: no peak and no verdict on its activations
            _peak_words = ("memmath cannot find this model's step peak: its activations come from the textbook model, "
                           "which is not checked against PyTorch for its model type, so lesson 8 judges it on the parts "
                           f"before activations alone ({format_bytes(step_need.bytes, unit)}) and gives no verdict above "
                           "them.")
        else:
            _peak_words = ("A bare parameter count has no layers to place in time, so memmath cannot find the step's peak "
                           "here: pick a published model to see it (lesson 8 judges by it).")
        _kind = "success" if runs.fits else ("warn" if holds.fits else "danger")
        _notes = [n.text for n in run.notes if n.kind != "activations_not_estimated"]
        show_run_tables(n_params, unit, published_rows, optimizer_table, gpu_rows)
        return mo.vstack([
            mo.callout(mo.md(f"""
            **{viz.short_count(n_params)} parameters**, {precision_name} with {optimizer_name}: one step of full
            finetuning keeps **{format_bytes(run.total, unit)}** before activations,
            {n_params:,} parameters × {run.total / n_params:.2f} B per parameter, of which {format_bytes(run.weights, unit)} are weights.
            The {gpu.name} reports {format_bytes(gpu.memory_bytes, unit)}: it
            {"holds" if holds.fits else "cannot even hold"} the weights, and the run {runs.sentence(unit)}.
            {_peak_words}
            """), kind=_kind),
            mo.accordion({"What the verdict keeps back, and what the count assumes": mo.md(f"""
            {viz.cuda_reserve_sentence(True, unit)} Each verdict also keeps {runs.margin_share:.0%} of the
            figure free, as the planner does.

            *Assumes:* {run.assumptions}{"" if not _notes else " Note: " + "; ".join(_notes) + "."}
            """)}),
            mo.md("**Takeaway:** full finetuning pays, for every weight, the weight itself, its gradient and the "
                  "optimizer's states: in pure 16-bit with Adam 8 bytes per parameter, four times the weights alone. "
                  "Holding the weights is not running the step."),
        ])

    return (show_run,)


@app.cell
def _(gpu_dropdown, mm, optimizer_dropdown, params_slider, pd, precision_dropdown, preset_dropdown, published,
      show_run, to_unit, unit_radio, verdict_of, viz):
    # The one cell every control of the run re-runs (each re-run cell costs marimo ~6-10 ms): the run, what the step
    # must hold, every optimizer and every card for it; the hidden cell above shows them.
    preset = preset_dropdown.value
    model = viz.model_choice(params_slider.value, preset)  # a preset name or a parameter count
    n_params = mm.resolve_model(model).n_params
    precision, optimizer = precision_dropdown.value, optimizer_dropdown.value
    gpu, unit = mm.get_gpu(gpu_dropdown.value), unit_radio.value
    # Full finetuning, one step, before activations (no seq_len): every part in integer bytes.
    run = mm.training_memory(model, seq_len=None, precision=precision, optimizer=optimizer)
    # The step itself: the optimizer builds temporaries as it updates (PyTorch's Adam), so what the card must hold at
    # once is the step's peak (memmath.requirement, at batch 1 x 512 tokens; activations are gone by the optimizer step).
    step_need = mm.requirement(model, batch_size=1, seq_len=512, precision=precision, optimizer=optimizer)
    # Judged as every lesson judges (memmath.verdict): the CUDA context reserved, 5% of the figure kept free.
    _holds, _runs = verdict_of(run.weights, gpu), verdict_of(run.total, gpu)
    published_rows = published.published_table(n_params, unit)  # each published count for your size
    _rows = []
    for _name, _opt in mm.OPTIMIZERS.items():  # every optimizer, named as the menus name them (amsgrad ones too)
        _r = mm.training_memory(model, seq_len=None, precision=precision, optimizer=_name)
        _unfactored = any(_n.kind == "adafactor_unfactored" for _n in _r.notes)
        _rows.append({"optimizer": viz.OPTIMIZER_NAMES.get(_name, _name), f"optimizer states ({unit})": round(to_unit(_r.optimizer_states, unit), 2),
                      "B per parameter": round(_r.total / n_params, 2), f"total ({unit})": round(to_unit(_r.total, unit), 2),
                      f"fits the {gpu.name}": "yes" if verdict_of(_r.total, gpu).fits else "no",
                      "what it keeps": _opt.description + (" Counted unfactored here: a bare parameter count "
                                                           "has no matrix shapes." if _unfactored else "")})
    optimizer_table = pd.DataFrame(_rows)
    # Every card as the driver reports it, smallest first (as mm.gpus.fit_table lists them), judged twice by the one rule.
    gpu_rows = pd.DataFrame([{
        "gpu": _g.name, "marketed": _g.marketed, f"memory ({unit})": round(_g.memory_bytes / mm.UNITS[unit], 2),
        "holds the weights": "yes" if verdict_of(run.weights, _g).fits else "no",
        "runs full finetuning": "yes" if verdict_of(run.total, _g).fits else "no",
    } for _g in sorted(mm.GPUS.values(), key=lambda _g: _g.memory_bytes)])
    show_run(n_params, precision_dropdown.selected_key, optimizer_dropdown.selected_key, gpu, unit, run, step_need,
             _holds, _runs, published_rows, optimizer_table, gpu_rows)
    return (gpu, gpu_rows, model, n_params, optimizer, optimizer_table, precision, preset, published_rows, run,
            step_need, unit)


@app.cell(hide_code=True)
def _(OPTIMIZER_NAMES, RECIPE_NAMES, RECIPE_SIZES, Select, Slider, alt, bound_chart, is_static_export, json, mo,
      recipes_grid, viz):
    def _draw(base):
        _order = list(RECIPE_NAMES)
        _names = f"{json.dumps(RECIPE_NAMES)}[datum.value]"  # short name -> what the axis shows
        _parts = ["weights", "gradients", "gradient_accumulation", "master_weights", "optimizer_states"]
        _bars = base.transform_calculate(name=f"{json.dumps(RECIPE_NAMES)}[datum.recipe]").mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory (GB)", axis=alt.Axis(**viz.MEMORY_AXIS)),
            y=alt.Y("recipe:N", title=None, sort=_order, axis=alt.Axis(labelExpr=_names)),
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(_parts)),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("name:N", title="recipe"), alt.Tooltip("part:N"), alt.Tooltip("GB:Q", format=",.3~f")])
        # Each bar's total and bytes per parameter (GB per billion parameters is bytes per parameter).
        _billions = f"{json.dumps(list(RECIPE_SIZES))}[datum.size]"
        _totals = base.transform_aggregate(GB="sum(GB)", totalGB="max(totalGB)", size="max(size)",
                                           groupby=["recipe"]).transform_calculate(
            label=f"format(datum.totalGB, ',.2f') + ' GB, ' + format(datum.totalGB / {_billions}, '.3~f') + ' B per parameter'")
        _text = _totals.mark_text(align="left", dx=4, fontSize=11).encode(
            x=alt.X("GB:Q"), y=alt.Y("recipe:N", sort=_order), text=alt.Text("label:N"))
        # An invisible point past the longest bar stretches the axis, so its label has room.
        _room = _totals.transform_joinaggregate(longest="max(GB)").transform_calculate(
            room="datum.longest * 1.9").mark_point(opacity=0).encode(x=alt.X("room:Q"))
        return (_bars + _text + _room).properties(width=420, height=200)

    _sizes = {i: viz.short_count(round(b * 10**9)) for i, b in enumerate(RECIPE_SIZES)}
    _chart = viz.chart_output(bound_chart(recipes_grid,
                                  [Slider("size", "Parameters", value=RECIPE_SIZES.index(7), labels=_sizes, show_value=False),
                                   Select("optimizer", "Optimizer", labels=OPTIMIZER_NAMES)],
                                  _draw, title="One step of full finetuning, before activations, in five recipes"))
    _about = r"""
    The chart below puts five precision recipes side by side for a size and an optimizer you pick
    under it. Its numbers are computed in advance for every choice, so its inputs keep working
    in this static copy of the page, where the controls above are frozen.
    """
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it.
    mo.vstack([mo.md(_about), _chart]) if is_static_export() else None
    return


@app.cell(hide_code=True)
def _(article_bpp, article_params, article_run, format_bytes, mo, viz):
    _frame = article_run.to_frame("GB")
    _frame = _frame[_frame["bytes"] > 0][["label", "bytes", "GB"]].reset_index(drop=True)
    _rest = article_run.without_activations - article_run.weights
    mo.vstack([
        mo.md(f"""
        ## The formula

        One training step keeps, for every **trainable** parameter:

        - its **weight**, in the model's format;
        - its **gradient**, the direction to move it, one number per weight, computed by the backward pass;
        - the **optimizer states**, what the optimizer remembers between steps. Adam (Kingma & Ba 2015)
          keeps two running averages per weight: of the gradient and of its square.

        In pure 16-bit (the article's case; LLaMA-Factory calls it `pure_bf16`) each of those numbers
        takes 2 bytes:

        `{article_bpp["weights"]:g} B (weight) + {article_bpp["gradients"]:g} B (gradient) + 2 × {article_bpp["optimizer_states"] / 2:g} B (Adam's two states) = {article_bpp["total"]:g} B per parameter`

        For {article_params:,} parameters: {article_params:,} × {article_run.without_activations // article_params} B
        = **{format_bytes(article_run.without_activations)}**. The weights are
        {format_bytes(article_run.weights)}; the other {format_bytes(_rest)} (which the article leaves
        unitemized) are the gradients and Adam's states:
        """),
        viz.plain_table(_frame.rename(columns={"label": "part", "GB": "size (GB)"})),
        mo.md(f"""
        Gradients exist only for the parameters that train. As the article puts it, trainability
        connects directly to the cost of an update: a frozen parameter needs no gradient and no
        optimizer state. Full finetuning trains all of them, so it pays the whole bill;
        {viz.lesson_link("04_freezing")} shows what freezing takes off it.
        """),
    ])
    return


@app.cell
def _(mm):
    article_params = 7_000_000_000  # the article's 7B model
    article_bpp = mm.recipes.bytes_per_parameter("bf16", "adam")  # 2 + 2 + 2 x 2 = 8 B per parameter
    article_run = mm.training_memory(article_params, seq_len=None, precision="bf16", optimizer="adam")
    return article_bpp, article_params, article_run


@app.cell
def _(mm, pd, published):
    # Each published count, part by part, in bytes per parameter (memmath.published): it does not
    # depend on the model size, so it is drawn once.
    published_per_parameter = pd.DataFrame([
        {"estimate": f"{_b['total']:g} B: {e.label}", "part": mm.training.PART_LABELS[_part], "order": _order,
         "B per parameter": _b[_part]}
        for e in published.PUBLISHED_ESTIMATES.values()
        for _b in [published.published_bytes_per_parameter(e.key)]
        for _order, _part in enumerate(mm.training.PARTS) if _b.get(_part)])
    return (published_per_parameter,)


@app.cell(hide_code=True)
def _(alt, mo, published, published_per_parameter, viz):
    _low = min(published.published_bytes_per_parameter(k)["total"] for k in published.PUBLISHED_ESTIMATES)
    _high = max(published.published_bytes_per_parameter(k)["total"] for k in published.PUBLISHED_ESTIMATES)
    _order = list(dict.fromkeys(published_per_parameter["estimate"]))
    _parts = ["weights", "gradients", "gradient_accumulation", "master_weights", "optimizer_states"]
    mo.vstack([
        mo.md(f"""
        ## Why published estimates range from {_low:g} to {_high:g} bytes per parameter

        Look up "memory to finetune a 7B model with Adam" and you will find answers from {_low:g} to
        {_high:g} bytes per parameter. None of them is wrong: each counts a different **recipe**, that
        is, which copies are kept and in which format. Mixed precision (Micikevicius et al. 2018)
        computes in 16 bits but keeps an fp32 **master copy** of the weights and fp32 optimizer states,
        because tiny updates vanish when added to a 16-bit weight. Some setups also keep an fp32 buffer
        to accumulate gradients over several micro-batches. Some counts leave the gradients out
        entirely. Each bar below is one published count, in bytes per parameter:
        """),
        viz.chart_output(alt.Chart(published_per_parameter).mark_bar().encode(
            x=alt.X("sum(B per parameter):Q", title="Bytes per parameter (B)"),
            y=alt.Y("estimate:N", title=None, sort=_order),
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(_parts)),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("estimate:N"), alt.Tooltip("part:N"), alt.Tooltip("B per parameter:Q")],
        ).properties(width=420, height=230, title="Six published counts with Adam, per parameter")),
    ])
    return


@app.cell
def _(mm):
    fit_margin = mm.FIT_MARGIN  # the share of the figure every verdict keeps free
    return (fit_margin,)


@app.cell(hide_code=True)
def _(fit_margin, live_html, mo):
    # Rendered once (reads no control): the prose and the folds; the run's cell near the top hands the folds' tables
    # new rows in place, so a move re-renders one sentence instead of this section.
    published_view, optimizer_view, gap_view, gpu_view = live_html(), live_html(), live_html(), live_html()
    mo.vstack([
        mo.accordion({"What does each published count give for your model?": published_view}),
        mo.md(r"""
        Read the counts by row: the parts are the same everywhere (weights, gradients, optimizer
        states, sometimes a master copy or an accumulation buffer); only their formats differ. When
        you quote a number, quote its recipe with it.

        ## Optimizer choice

        The optimizer decides how many numbers each weight carries between steps. Plain SGD keeps
        none; SGD with momentum keeps one; Adam and AdamW keep two; 8-bit Adam (Dettmers et al. 2022)
        keeps Adam's two at 1 byte each plus a small scale per block; Adafactor (Shazeer & Stern 2018)
        replaces the second moment of each matrix by its row and column averages and drops the first.
        """),
        mo.accordion({"How much does each optimizer keep for your model and recipe?": mo.vstack([mo.md(r"""
        Adafactor's saving needs the shape of every matrix: with a bare parameter count from the slider
        memmath cannot factor anything and counts a full second moment, so pick a published model to see it.
        """), optimizer_view])}),
        mo.md(f"""
        ## A GPU that holds the weights can still fail the run

        A card must hold the whole step, not the weights alone; activations, the next lesson, widen the gap.
        Every verdict here judges as the one above: the card less its own CUDA context (said above), with
        {fit_margin:.0%} of the figure kept free.
        """),
        gap_view,
        mo.accordion({"Which cards hold the weights, and which run the step?": gpu_view}),
    ])
    return gap_view, gpu_view, optimizer_view, published_view


@app.cell
def _(mm, pd, reference, viz):
    measured_cases = reference.load_measured()  # the recording: one real training step per case (no torch needed)
    _versions = reference.measured_metadata()["versions"]
    measured_versions = (f"torch {_versions['torch']}, transformers {_versions['transformers']}, "
                         f"one thread")
    # Full finetuning of each recorded model, every recipe and optimizer recorded (one batch of 2 x 64 tokens).
    _models = {"gpt2": "GPT-2 (tied head)", "llama-mha": "LLaMA (multi-head attention)",
               "llama-gqa": "LLaMA (grouped-query attention)", "bert": "BERT (classifier)"}
    fidelity_tables, _tables = {}, {}  # by model: its rows, and 8-bit Adam's
    for _shape, _label in _models.items():
        _cases = measured_cases[(measured_cases["shape"] == _shape)
                                & (measured_cases["method"] == "full") & (measured_cases["attention"] == "sdpa")
                                & ~measured_cases["dropout"] & ~measured_cases["checkpointing"]
                                & (measured_cases["group"] == "transformers")]  # 8-bit Adam: the table below
        _rows = []
        for _, _case in _cases.iterrows():
            _predicted = reference.predict_case(_case)  # the matching memmath.training_memory(...) call
            for _part, _column in (("weights", "param_bytes"), ("gradients", "grad_bytes"),
                                   ("optimizer_states", "optimizer_state_bytes")):
                _rows.append({"precision": _case["precision"], "optimizer": viz.OPTIMIZER_NAMES.get(_case["optimizer"], _case["optimizer"]),
                              "part": mm.training.PART_LABELS[_part], "measured by PyTorch (B)": int(_case[_column]),
                              "memmath (B)": int(getattr(_predicted, _part)),
                              "B per parameter": round(int(_case[_column]) / int(_case["total_params"]), 4)})
        _table = pd.DataFrame(_rows)
        _table["difference (B)"] = _table["memmath (B)"] - _table["measured by PyTorch (B)"]
        _tables[_shape] = (_table, _cases.iloc[0])  # the first row: fp32 AdamW
        # 8-bit Adam as bitsandbytes really stores it, measured after memmath's count was written.
        _eight = measured_cases[(measured_cases["shape"] == _shape)
                                & measured_cases["optimizer"].isin(["adam8bit", "adamw8bit"])]
        _eight_rows = [{"case": _c["case_id"], "states measured (B)": int(_c["optimizer_state_bytes"]),
                        "memmath (B)": int(reference.predict_case(_c).optimizer_states),
                        "8-bit tensors": "yes" if "absmax1" in _c["optimizer_state_detail"] else "none (all under 4,096)"}
                       for _, _c in _eight.iterrows()]
        fidelity_tables[_label] = (_table, _eight_rows)
    fidelity_rows, fidelity_case = _tables["gpt2"]  # the worked example: GPT-2
    fidelity_llama = mm.training_memory("llama-2-7b", seq_len=None, precision="bf16", optimizer="adamw")
    return fidelity_case, fidelity_llama, fidelity_rows, fidelity_tables, measured_cases, measured_versions


@app.cell(hide_code=True)
def _(fidelity_case, fidelity_llama, fidelity_tables, format_bytes, measured_versions, mo, pd, reference, viz):
    _bnb = reference.measured_metadata()["versions"].get("bitsandbytes", "?")
    _sections = {}
    for _label, (_table, _eight_rows) in fidelity_tables.items():
        _exact = int((_table["difference (B)"] == 0).sum())
        _sections[f"{_label}: {_exact} of {len(_table)} rows match to the byte"] = mo.vstack(
            [viz.plain_table(_table)] + ([mo.md(f"""
            **8-bit Adam, measured.** bitsandbytes {_bnb}'s `Adam8bit` and `AdamW8bit` on the CPU: a tensor of
            4,096 elements or more keeps two uint8 states and one fp32 scale per 256 values; a smaller one
            (norms, biases, small LoRA matrices) keeps two fp32 states; and one pair of 256-value
            quantization maps is shared by all. memmath counts them tensor by tensor:
            """), viz.plain_table(pd.DataFrame(_eight_rows))] if _eight_rows else []))
    _n, _tensors = int(fidelity_case["total_params"]), int(fidelity_case["trainable_tensors"])
    _detail = fidelity_case["optimizer_state_detail"]
    _big = fidelity_llama
    _moments = _big.optimizer_state_detail.moments  # exp_avg + exp_avg_sq, 2 B each
    _counters = _big.optimizer_state_detail.step_counters  # one 4-byte step per trainable tensor
    mo.accordion({"Are these the bytes PyTorch really allocates? (measured)": mo.vstack([
        mo.md(f"""
        The workbook's `validation/measure.py` builds small models from their configs, runs one real
        training step and records every parameter, gradient and optimizer-state tensor that PyTorch holds
        after `optimizer.step()` (README, section "Fidelity"). The recording was made **on the CPU with tiny
        models** (3 blocks, width 64; {measured_versions}); the byte counts per parameter do not depend on the
        size, so they carry over to a 7B model. Every recorded full finetuning, by model:
        """),
        mo.accordion(_sections),
        mo.md(f"""
        Read one: the {fidelity_case["precision"]} GPT-2 has {_n:,} parameters in {_tensors} tensors. AdamW keeps
        `exp_avg` and `exp_avg_sq`, each {_detail["exp_avg"]:,} B ({_detail["exp_avg"] // _n} B per parameter:
        PyTorch stores the moments in the parameters' own format, so a bf16 model gets the pure bf16 recipe),
        plus one 4-byte `step` counter per tensor: {_tensors} × 4 = {_detail["step"]:,} B. SGD with momentum
        keeps one buffer per parameter; Adam with amsgrad a third moment, the running maximum of `exp_avg_sq`.
        For a real model the counters vanish: llama-2-7b's {_big.trainable_tensors} tensors add {_counters:,} B
        of counters to {format_bytes(_moments)} of moments. The bytes per parameter are the whole story.
        """),
    ])})
    return


@app.cell
def _(mm, pd, to_unit, viz):
    # Every choice of the chart's inputs, computed once: 11 sizes x 4 optimizers x 5 recipes, in GB. Recipes
    # travel as their short names and sizes as positions 0-10 (the page carries every byte of the grid).
    RECIPE_NAMES = {"bf16": "pure bf16", "fp32": "fp32", "amp": "PyTorch AMP", "mixed": "mixed (ZeRO)",
                    "mixed_fp32_grads": "mixed + fp32 accumulation"}
    OPTIMIZER_NAMES = {_o: viz.OPTIMIZER_NAMES[_o] for _o in ("adam", "sgd", "sgd_momentum", "adam8bit")}
    RECIPE_SIZES = (0.1, 0.35, 1, 3, 7, 13, 34, 70, 175, 405, 1000)  # billions of parameters
    _rows = []
    for _position, _billions in enumerate(RECIPE_SIZES):
        for _optimizer in OPTIMIZER_NAMES:
            for _recipe in RECIPE_NAMES:
                _run = mm.training_memory(int(_billions * 10**9), seq_len=None, precision=_recipe, optimizer=_optimizer)
                for _order, (_part, _bytes) in enumerate(_run.parts().items()):
                    if _bytes:
                        _rows.append({"size": _position, "optimizer": _optimizer, "recipe": _recipe,
                                      "part": mm.training.PART_LABELS[_part], "order": _order,
                                      "GB": round(to_unit(_bytes, "GB"), 3),
                                      # the label's total, rounded once from integer bytes
                                      "totalGB": round(to_unit(_run.total, "GB"), 2)})
    recipes_grid = pd.DataFrame(_rows)
    return OPTIMIZER_NAMES, RECIPE_NAMES, RECIPE_SIZES, recipes_grid


@app.cell(hide_code=True)
def _(article_bpp, mo, viz):
    mo.callout(mo.md(f"""
    **Takeaways**

    - Full finetuning keeps, per parameter, the weight, its gradient and the optimizer's states:
      in pure 16-bit with Adam, {article_bpp["weights"]:g} + {article_bpp["gradients"]:g} + {article_bpp["optimizer_states"]:g}
      = {article_bpp["total"]:g} B, {article_bpp["total"] / article_bpp["weights"]:g} times the weights alone.
    - The optimizer sets the states: none for SGD, one for momentum, two for Adam, less with 8-bit
      Adam or Adafactor.
    - Published estimates differ because recipes differ (master copies, fp32 states, accumulation
      buffers). Always say which recipe a number counts.
    - Gradients and states exist only for trainable parameters. Train fewer parameters and the
      bill shrinks: {viz.lesson_link("04_freezing")}, {viz.lesson_link("05_adapters")}, {viz.lesson_link("06_lora_qlora")}.
    """), kind="success")
    return


@app.cell
def _(mm, verdict_of):
    # Problem answers, computed with memmath.
    answer_mixed_7b = mm.training_memory(7_000_000_000, seq_len=None, precision="mixed", optimizer="adam")
    answer_8bit_7b = mm.training_memory(7_000_000_000, seq_len=None, precision="bf16", optimizer="adam8bit")
    answer_adam_7b = mm.training_memory(7_000_000_000, seq_len=None, precision="bf16", optimizer="adam")
    answer_frozen = mm.training_memory(mm.uniform_model(7_000_000_000, 10), seq_len=None, precision="bf16", optimizer="adam",
                                       method=mm.Freeze(trainable_layers=1))
    _llama = mm.training_memory("llama-2-7b", seq_len=None, precision="bf16", optimizer="adam")
    answer_llama_total = _llama.total
    # What the card must hold: the step's peak at batch 1 x 512 tokens, the optimizer's temporaries in it (lesson 8's
    # figure), judged by the one rule (memmath.verdict: the CUDA context reserved, 5% of it kept free).
    answer_llama_need = mm.requirement("llama-2-7b", batch_size=1, seq_len=512, precision="bf16", optimizer="adam")
    _cards = sorted(mm.GPUS.values(), key=lambda _g: _g.memory_bytes)
    answer_llama_verdict = next(_v for _v in (verdict_of(answer_llama_need, _g) for _g in _cards) if _v.fits)
    answer_llama_gpu = answer_llama_verdict.gpu_name
    answer_llama_card = mm.GPUS[answer_llama_gpu]
    answer_llama_context_mib = answer_llama_card.cuda_context_bytes // mm.UNITS["MiB"]
    answer_mixed_bpp = mm.recipes.bytes_per_parameter("mixed", "adam")
    answer_adam8bit = mm.OPTIMIZERS["adam8bit"]
    return (answer_8bit_7b, answer_adam8bit, answer_adam_7b, answer_frozen, answer_llama_card,
            answer_llama_context_mib, answer_llama_gpu, answer_llama_need, answer_llama_total, answer_llama_verdict,
            answer_mixed_7b, answer_mixed_bpp)


@app.cell(hide_code=True)
def _(answer_8bit_7b, answer_adam8bit, answer_adam_7b, answer_frozen, answer_llama_card,
      answer_llama_context_mib, answer_llama_gpu, answer_llama_need, answer_llama_total, answer_llama_verdict,
      answer_mixed_7b, answer_mixed_bpp, format_bytes, mo):
    _b, _a8 = answer_mixed_bpp, answer_adam8bit
    mo.vstack([
        mo.md("## Problems"),
        mo.md("**1.** The same 7B model with mixed precision (16-bit weights and gradients, fp32 master copy, "
              "fp32 Adam states). How many bytes per parameter, and how much memory?"),
        mo.accordion({"Answer": mo.md(
            f"{_b['weights']:g} + {_b['gradients']:g} + {_b['master_weights']:g} + {_b['optimizer_states']:g} = "
            f"{_b['total']:g} B per parameter: {format_bytes(answer_mixed_7b.without_activations)}, "
            f"twice the article's {format_bytes(answer_adam_7b.without_activations)}.")}),
        mo.md("**2.** Keep pure bf16 but swap Adam for 8-bit Adam. What do you save on the 7B model?"),
        mo.accordion({"Answer": mo.md(
            f"Adam's states take {format_bytes(answer_adam_7b.optimizer_states)}; 8-bit Adam's "
            f"{format_bytes(answer_8bit_7b.optimizer_states)} ({_a8.state_bits // 8} B per state plus one "
            f"{_a8.block_constant_bits}-bit scale per {_a8.block_size:,} values). "
            f"The run drops from {format_bytes(answer_adam_7b.total)} to {format_bytes(answer_8bit_7b.total)}.")}),
        mo.md("**3.** Split the 7B model into ten equal layers and train only the last one. What happens to the "
              "weights, the gradients and the optimizer states?"),
        mo.accordion({"Answer": mo.md(
            f"The weights stay {format_bytes(answer_frozen.weights)} (every weight is still needed for the "
            f"forward pass). Gradients fall to {format_bytes(answer_frozen.gradients)} and Adam's states to "
            f"{format_bytes(answer_frozen.optimizer_states)}: {answer_frozen.trainable_fraction:.0%} of the "
            f"parameters train. Total: {format_bytes(answer_frozen.total)}. Lesson 4 goes further.")}),
        mo.md("**4.** Which is the smallest card in the catalog that holds one step of full finetuning of "
              "llama-2-7b in pure bf16 with Adam, at batch 1 x 512 tokens?"),
        mo.accordion({"Answer": mo.md(
            f"Its parts add to {format_bytes(answer_llama_total)} before activations, but the optimizer's step "
            f"builds temporaries on top: at batch 1 x 512 tokens the step peaks at "
            f"**{format_bytes(answer_llama_need.bytes)}** ({format_bytes(answer_llama_need.bytes, 'GiB')}), "
            f"what the card must hold. With each card's CUDA context kept back ({answer_llama_context_mib:,} MiB on the {answer_llama_gpu}) "
            f"and {answer_llama_verdict.margin_share:.0%} of the need kept free, the smallest card is the **{answer_llama_gpu}** "
            f"({format_bytes(answer_llama_card.memory_bytes, 'GiB')}): it "
            f"{answer_llama_verdict.sentence()}.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
