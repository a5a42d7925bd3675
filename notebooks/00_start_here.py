# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "memmath · 0. Start here"
# description = "Will my finetune fit? The question this workbook follows, how to read its controls, GB against GiB, training against inference."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Start here: planning before CUDA runs out of memory", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    # {viz.LESSONS["00_start_here"]}

    Symbols and words: [Notation and glossary](?file=09_notation.py). The manual for the `memmath` command
    line and its Python API: `docs/README.md` in the repository.

    You are not really doing AI, the running joke goes, until you have seen `RuntimeError: CUDA out of
    memory`. The article this workbook follows, "Memory Math for Model Training", starts there: running
    out of memory is how people find out that their plan did not count what the model needs, so **do the
    accounting before the error appears**. The first thing it shows: a model that loads without complaint can still crash at
    its first training step, because training keeps far more than the weights.

    Move the slider to a model size (in billions of parameters) and compare the two budgets:
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons import site_charts, viz
    from memmath_lessons.live_chart import bound_live_chart
    from memmath_lessons.static_charts import Slider, bound_chart, is_static_export, live_only_notice

    return (Slider, alt, bound_chart, bound_live_chart, format_bytes, is_static_export, live_only_notice, mm, mo, pd,
            site_charts, to_unit, viz)


@app.cell
def _(live_only_notice, mo):
    demo_params_slider = mo.ui.slider(start=1, stop=100, step=1, value=7, show_value=True,
                                      label="Parameters (billions)")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([live_only_notice(), mo.hstack([demo_params_slider, unit_radio], justify="start", gap=2)])
    return demo_params_slider, unit_radio


@app.cell
def _(Slider, alt, bound_chart, bound_live_chart, demo_grid, is_static_export, mo, site_charts, viz):
    def _draw(base):
        _parts = ["weights", "gradients", "optimizer_states"]
        _names = "{'load': 'Loading the weights', 'step': 'One training step'}[datum.value]"
        _bars = base.mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory (GB)", axis=alt.Axis(**viz.MEMORY_AXIS),
                    # room on the right for the largest bar's label
                    scale=alt.Scale(domain=[0, 1.45 * float(demo_grid.groupby(["billions", "scenario"])["GB"].sum().max())])),
            y=alt.Y("scenario:N", title=None, sort=["load", "step"], axis=alt.Axis(labelExpr=_names)),
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(_parts)),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("part:N"), alt.Tooltip("GB:Q", format=",.2f"),
                     alt.Tooltip("GiB:Q", format=",.2f")])
        # Each bar's total, in both units, rounded once from memmath's integer total (not a sum of rounded parts).
        _totals = base.transform_aggregate(GB="sum(GB)", totalGB="max(totalGB)", totalGiB="max(totalGiB)",
                                           groupby=["scenario"]).transform_calculate(
            label="format(datum.totalGB, ',.2f') + ' GB = ' + format(datum.totalGiB, ',.2f') + ' GiB'")
        _text = _totals.mark_text(align="left", dx=4, fontSize=11).encode(
            x=alt.X("GB:Q"), y=alt.Y("scenario:N", sort=["load", "step"]),
            text=alt.Text("label:N"))
        return (_bars + _text).properties(width=440, height=90)

    _title = "Full finetuning in pure bf16 with Adam: loading versus one step"
    # One control per quantity. Live, the slider above moves this chart: drawn once here (this cell reads no
    # control), the slider's cell below sends it the rows of the slider's size (memmath_lessons.live_chart). In the static
    # site, where that slider is frozen, the chart carries its own slider over numbers computed in advance.
    demo_chart = None if is_static_export() else bound_live_chart(_draw, title=_title)
    _about = ("The chart below draws the same two budgets for every position of its own slider, from numbers "
              "computed in advance (its bars are labelled in GB and in GiB), and says them under the bars. Its "
              "slider keeps working in this static copy of the lesson, where the controls above are frozen.")
    (demo_chart if demo_chart is not None else mo.vstack([mo.md(_about), viz.chart_output(bound_chart(
        # Under the bars, the callout's sentence for the chart's own slider (the callout follows the frozen one).
        demo_grid, [Slider("billions", "Parameters (billions)", value=7)], site_charts.with_budget_sentence(_draw),
        title=_title))]))
    return (demo_chart,)


@app.cell(hide_code=True)
def _(demo_chart, demo_grid, format_bytes, is_static_export, mo):
    def show_demo_budgets(billions, demo_params, demo_weights, demo_training, bytes_per_parameter, unit):
        """The chart's rows at the slider's size, and the sentence that says the two budgets."""
        if demo_chart is not None:
            demo_chart.update(demo_grid[demo_grid["billions"] == billions], caption=f"Parameters (billions): {billions}")
        # The static page says this under its chart, for the chart's own slider: this slider is frozen there.
        return mo.vstack([
            mo.md("") if is_static_export() else mo.callout(mo.md(f"""
            **{billions} billion parameters.** Loading the weights:
            {demo_params:,} × {bytes_per_parameter["weights"]:g} B (bf16) = **{format_bytes(demo_weights, unit)}**.
            One step of full finetuning with Adam in pure bf16:
            {demo_params:,} × ({bytes_per_parameter["weights"]:g} B weight + {bytes_per_parameter["gradients"]:g} B gradient + {bytes_per_parameter["optimizer_states"]:g} B for Adam's two states)
            = **{format_bytes(demo_training.without_activations, unit)}** before activations,
            {demo_training.without_activations // demo_weights} times what loading showed.
            """), kind="info"),
            mo.md("**Takeaway:** a model that loads is not a model that trains. The gradients and the optimizer's "
                  "states appear at the first step, which is where CUDA out of memory strikes: plan the whole step."),
        ])

    return (show_demo_budgets,)


@app.cell
def _(demo_params_slider, mm, show_demo_budgets, unit_radio):
    # The one cell the size slider re-runs: loading the weights, and one step of full finetuning.
    demo_params = demo_params_slider.value * 10**9
    demo_weights = mm.get_format("bf16").bytes_for(demo_params)  # N x 16 bits / 8
    demo_training = mm.training_memory(demo_params, seq_len=None, precision="bf16", optimizer="adam")  # 2 + 2 + 4 B per parameter
    _bytes_per_parameter = mm.recipes.bytes_per_parameter("bf16", "adam")
    show_demo_budgets(demo_params_slider.value, demo_params, demo_weights, demo_training, _bytes_per_parameter,
                      unit_radio.value)
    return demo_training, demo_weights


@app.cell
def _(mm, pd, to_unit):
    # Every position of the chart's slider, computed once: 1B to 100B parameters, in GB and in GiB.
    _rows = []
    for _billions in range(1, 101):
        _step = mm.training_memory(_billions * 10**9, seq_len=None, precision="bf16", optimizer="adam")  # 2 + 2 + 4 B
        _scenarios = {"load": {"weights": _step.weights}, "step": _step.parts()}  # short names: the page carries each row
        for _scenario, _parts in _scenarios.items():
            _total = sum(_parts.values())  # integer bytes: the label rounds the total once, not each part
            for _order, (_part, _bytes) in enumerate((p, b) for p, b in _parts.items() if b):
                _rows.append({"billions": _billions, "scenario": _scenario, "part": mm.training.PART_LABELS[_part],
                              "order": _order, "GB": round(to_unit(_bytes, "GB"), 2),
                              "GiB": round(to_unit(_bytes, "GiB"), 2),
                              "totalGB": round(to_unit(_total, "GB"), 2),
                              "totalGiB": round(to_unit(_total, "GiB"), 2)})
    demo_grid = pd.DataFrame(_rows)
    return (demo_grid,)


@app.cell(hide_code=True)
def _(mo):
    _why = mo.md(r"""
    When the program asks for one more tensor and the card has no free memory left, PyTorch cannot
    slow down or page anything out: it stops with this error. The "Tried to allocate" size in the full
    message is only that last request, the straw that broke the budget, not what the whole run needs.
    Loading puts only the weights on the card; the first backward pass creates the gradients and the
    first optimizer step creates its states. The bars above are those parts.
    """)
    _rest = mo.md(r"""
    ## The question this workbook follows

    > If a model is too large to adjust completely on the hardware you own, what can you change
    > instead?

    The article answers it one technique at a time: train only some layers (partial finetuning), or
    add small adapter modules and train only those (PEFT). The workbook adds two later PEFT methods:
    low-rank updates (LoRA) and a 4-bit frozen base under them (QLoRA). Each technique either reduces
    the number of **trainable parameters**, or the memory that comes with them. To see why that works,
    you first need to know where the memory goes, part by part.

    ## How to use the controls

    Every lesson starts the same way: the article's claim, the control that moves it, the number it
    gives, the takeaway. The sections after it build the number up; folded sections (click a title)
    hold the details for the careful reader. Change a control and every number and chart that depends
    on it updates at once; there is nothing to run. Every number comes from a `memmath` call in the
    lesson's file, and `marimo edit notebooks/01_weights_and_formats.py` (any lesson) opens it with the
    code, to read or change.
    """)
    mo.vstack([mo.accordion({"Why does it crash at the first step, not at load?": _why}), _rest])
    return


@app.cell
def _(mm):
    # The two units (a GB is 10**9 bytes, a GiB 2**30) and two cards as their drivers report them: the RTX 4090 in
    # MiB, and divided by 1024**3 as many tools print "GB"; every card for the menu.
    gb_bytes, gib_bytes = mm.UNITS["GB"], mm.UNITS["GiB"]
    rtx_4090, a100_80gb = mm.GPUS["RTX 4090"], mm.GPUS["A100 80GB"]
    rtx_4090_mib = rtx_4090.memory_bytes // mm.UNITS["MiB"]
    rtx_4090_in_gib = rtx_4090.memory_bytes / mm.UNITS["GiB"]
    gpu_names = list(mm.GPUS)
    return a100_80gb, gb_bytes, gib_bytes, gpu_names, rtx_4090, rtx_4090_in_gib, rtx_4090_mib


@app.cell(hide_code=True)
def _(a100_80gb, format_bytes, gb_bytes, gib_bytes, gpu_names, live_only_notice, mo, rtx_4090, rtx_4090_in_gib,
      rtx_4090_mib):
    _gpu, _big = rtx_4090, a100_80gb
    _prose = mo.md(f"""
    ## GB versus GiB

    Memory sizes come in two units that are easy to confuse:

    - a **GB** (gigabyte) is 10⁹ = {gb_bytes:,} bytes;
    - a **GiB** (gibibyte) is 2³⁰ = {gib_bytes:,} bytes, {gib_bytes / gb_bytes - 1:.1%} more.

    GPU memory is built in binary sizes. An {_gpu.name} is sold as "{_gpu.marketed}", and its driver
    (nvidia-smi) reports {rtx_4090_mib:,} MiB: that is
    {format_bytes(_gpu.memory_bytes, "GiB")}, or {format_bytes(_gpu.memory_bytes, "GB")}. Many tools
    divide bytes by 1024³ and then print "GB" (accelerate, DeepSpeed and llm-analysis among them), so the
    same card can show up as {rtx_4090_in_gib:.2f} "GB" in one place and
    {format_bytes(_gpu.memory_bytes, "GB")} in another. The gap grows with the size: an {_big.name}
    reports {format_bytes(_big.memory_bytes, "GiB")}, which is {format_bytes(_big.memory_bytes, "GB")}.

    This workbook counts in whole bytes and converts only to show a number, always with its unit.
    The article's sizes are in GB. Pick a card to compare the three ways of writing its memory:
    """)
    gpu_dropdown = mo.ui.dropdown(options=gpu_names, value="RTX 4090", label="GPU")
    mo.vstack([_prose, live_only_notice(), gpu_dropdown])
    return (gpu_dropdown,)


@app.cell(hide_code=True)
def _(format_bytes, mo, viz):
    def show_gpu_units(gpu, gpu_mib, gpu_in_gib, gpu_units):
        """The chosen card's memory three ways, and every card in the catalog."""
        return mo.vstack([
            mo.callout(mo.md(f"""
            **{gpu.name}**: sold as "{gpu.marketed}"; the driver reports **{gpu_mib:,} MiB**
            = {gpu.memory_bytes:,} bytes = **{format_bytes(gpu.memory_bytes, "GiB")}**
            = **{format_bytes(gpu.memory_bytes, "GB")}**. A tool that divides by 1024³ prints
            "{gpu_in_gib:.2f} GB", which is really GiB.
            """), kind="info"),
            mo.accordion({"How does every card in the catalog report its memory?": viz.plain_table(gpu_units)}),
        ])

    return (show_gpu_units,)


@app.cell
def _(gpu_dropdown, mm, pd, show_gpu_units, to_unit):
    # The one cell the card re-runs.
    gpu = mm.get_gpu(gpu_dropdown.value)
    gpu_mib = gpu.memory_bytes // mm.UNITS["MiB"]  # what nvidia-smi prints
    gpu_in_gib = gpu.memory_bytes / mm.UNITS["GiB"]  # what a tool that divides by 1024**3 prints, as "GB"
    gpu_units = pd.DataFrame([{
        "GPU": g.name, "on the box": g.marketed, "driver reports (MiB)": g.memory_bytes // mm.UNITS["MiB"],
        "GiB": round(to_unit(g.memory_bytes, "GiB"), 2), "GB": round(to_unit(g.memory_bytes, "GB"), 2),
        "chosen": "◀" if g.name == gpu.name else "",
    } for g in mm.GPUS.values()])
    show_gpu_units(gpu, gpu_mib, gpu_in_gib, gpu_units)
    return gpu, gpu_mib, gpu_units


@app.cell
def _(mm):
    # The causal models whose activations memmath traces exactly as a GPU runs them (Qwen3-Next's and LFM2's mixers run
    # CUDA kernels there that memmath does not trace: lesson 8 takes those, and says so), and the tokens in the
    # sequence, for both sides.
    traced_models = [k for k, s in mm.PRESETS.items()
                     if s.family != "bert" and s.architecture.traced and not s.architecture.mixer_kernels]
    context = 2048
    return context, traced_models


@app.cell(hide_code=True)
def _(live_only_notice, mo, traced_models, viz):
    _prose = mo.md(f"""
    ## Training and inference are two separate calculations

    The article insists on this split: memory for **inference** (running a trained model) and
    memory for **training** it are different problems, each with its own reference. For training
    it points to EleutherAI's *Transformer Math 101* (Anthony et al., April 2023); for inference,
    to *Transformer Inference Arithmetic* (Carol Chen, kipply's blog, March 2022). Know which one you are planning
    before you estimate anything.

    Inference keeps the weights, a **KV cache** (the keys and values of every token so far) and a
    small working set. Training keeps the weights plus a gradient and optimizer states for every
    trainable weight, plus **activations**: intermediate results that the backward pass needs.
    Finetuning is training, even when the model is small. Pick a model to compare (lessons
    {viz.lesson_link("03_activations", "3")} and {viz.lesson_link("07_inference", "7")} open up each side):
    """)
    model_dropdown = mo.ui.dropdown(options=traced_models, value="llama-2-7b", label="Model")
    mo.vstack([_prose, live_only_notice(), model_dropdown])
    return (model_dropdown,)


@app.cell(hide_code=True)
def _(context, format_bytes, mo, viz):
    def show_two_budgets(model, serving, training, training_need, unit):
        """Both budgets' chart and the sentence that compares them."""
        if training.activation_model == "transformers":
            activations_words = (f"the activations that the transformers library's forward pass saves for the backward pass, with "
                            f"{'fused (SDPA)' if training.attention == 'sdpa' else 'eager'} attention and "
                            f"{'dropout' if training.dropout else 'no dropout'}, as the model's config sets them")
        else:  # a layout the exact trace does not replay (a sliding window shorter than the sequence)
            activations_words = "the activations with " + "; ".join(n.text.removeprefix("activations: ") for n in training.notes
                                                                 if n.kind == "activations_textbook_fallback")
        need_words = (f"Its parts add to {format_bytes(training.total, unit)} (the bar); the card must hold the "
                       f"step's peak, the most allocated at one moment, {format_bytes(training_need.bytes, unit)}: "
                       "not every part is alive at once, and the step holds temporaries no part counts "
                       f"({viz.lesson_link('08_planner', 'lesson 8')})." if training_need.basis == "peak" else
                       f"The card must hold the sum of the parts ({training_need.reason}).")
        return mo.vstack([
            viz.chart_output(viz.stacked_bars(viz.breakdown_long(
                {"Inference (serving)": serving, "Training (full finetuning)": training}, unit), unit,
                title=f"{model}: two different budgets")),
            mo.md(f"""
            Same model, same weights ({format_bytes(serving.weights, unit)}), but training needs
            {format_bytes(training_need.bytes, unit)} against {format_bytes(serving.total, unit)} for serving:
            {training_need.bytes / serving.total:.1f} times as much. Both sides: one sequence of {context:,} tokens and
            bf16 weights; serving keeps a bf16 KV cache and uses fused attention. {need_words}
            """),
            mo.accordion({"What does the training bar count, and with which recipe?": mo.md(f"""
            Training counts {activations_words}: {format_bytes(training.activations, unit)} of activations.
            Training's recipe: {training.assumptions}
            """)}),
        ])

    return (show_two_budgets,)


@app.cell
def _(context, mm, model_dropdown, show_two_budgets, unit_radio):
    # The one cell the model (or the unit) re-runs: both budgets for one sequence of `context` tokens.
    serving = mm.inference_memory(model_dropdown.value, weights_format="bf16", context_len=context)
    # Attention, dropout and the activation model as transformers trains this model (memmath.Run's defaults).
    training = mm.training_memory(model_dropdown.value, precision="bf16", optimizer="adam", seq_len=context)
    # What the card must hold for it (memmath.requirement, as `memmath train` and lesson 8 judge it).
    training_need = mm.requirement(model_dropdown.value, precision="bf16", optimizer="adam", seq_len=context)
    show_two_budgets(model_dropdown.value, serving, training, training_need, unit_radio.value)
    return serving, training, training_need


@app.cell
def _(mm):
    # The article's 7B model in 16 bit: loading it, and one step of full finetuning with Adam.
    article_weights = mm.get_format("bf16").bytes_for(7 * 10**9)
    article_step = mm.training_memory(7 * 10**9, seq_len=None, precision="bf16", optimizer="adam")
    return article_step, article_weights


@app.cell(hide_code=True)
def _(article_step, article_weights, format_bytes, mo, viz):
    _weights, _finetune = article_weights, article_step.without_activations
    _lines = {
        "00_start_here": "this page: the out-of-memory error, GB versus GiB, training versus inference.",
        "01_weights_and_formats": "parameters × bytes per parameter; fp32, bf16, fp16, fp8, int8, int4 side by side; which GPUs hold the weights.",
        "02_full_finetuning": f"gradients and optimizer states; why {format_bytes(_weights)} of weights need about {format_bytes(_finetune)} to finetune; why published estimates disagree.",
        "03_activations": "what the backward pass keeps: batch, sequence length, attention, checkpointing.",
        "04_freezing": "train only the last layers: what freezing saves and what it does not.",
        "05_adapters": "small trainable modules in every block (Houlsby et al. 2019), and their cost at inference.",
        "06_lora_qlora": "low-rank updates, and a 4-bit base model underneath them.",
        "07_inference": "serving memory: weights, the KV cache, and a speed bound from bandwidth.",
        "08_planner": "put it all together for your model and your GPU.",
        "09_notation": "the symbols every lesson uses, the formulas in them, and the words, each with where it is taught.",
        "10_problems": "harder problems that chain the lessons, and a two-step measurement on your own CPU.",
        "11_many_gpus": "when no card is enough: what data, ZeRO, tensor, pipeline, context and expert parallelism split.",
    }
    _rows = [f"| {i} | {viz.lesson_link(stem)} | {_lines[stem]} |" for i, stem in enumerate(viz.LESSONS)]
    mo.vstack([
        mo.md(f"## The map\n\n{len(viz.LESSONS)} lessons, one concept each: 0 to 8 in the article's order, then "
              "notation, chained problems and many GPUs."),
        mo.accordion({f"What does each of the {len(viz.LESSONS)} lessons teach?": mo.md(
            "\n".join(["| # | lesson | what it teaches |", "|:--|:--|:--|", *_rows]))}),
    ])
    return


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md(r"""
    **Takeaways**

    - "CUDA out of memory" names the last request, not the total. Plan the total.
    - GB = 10⁹ bytes, GiB = 2³⁰ bytes. Many tools print GiB and call it GB: always write the unit.
    - Training and inference are separate calculations: training adds gradients, optimizer
      states and activations.
    - When the model is too big to train fully, train fewer parameters, or keep less memory for each.
    """), kind="success")
    return


@app.cell(hide_code=True)
def _(article_step, article_weights, format_bytes, mo, rtx_4090, rtx_4090_in_gib, rtx_4090_mib):
    # Problem answers, from the cells above.
    _4090, _tool_prints, _load, _step = rtx_4090, rtx_4090_in_gib, article_weights, article_step
    mo.vstack([
        mo.md("## Problems"),
        mo.md(f"**1.** A memory tool shows your RTX 4090 as \"{_tool_prints:.2f} GB\". nvidia-smi says "
              f"{rtx_4090_mib:,} MiB. Which unit is the tool really using?"),
        mo.accordion({"Answer": mo.md(
            f"GiB: {rtx_4090_mib:,} MiB ÷ 1024 = {_tool_prints:.2f} GiB. In GB the "
            f"card has {format_bytes(_4090.memory_bytes, 'GB')}.")}),
        mo.md(f"**2.** The article's 7B model has {format_bytes(_load)} of bf16 weights. How many GiB is that?"),
        mo.accordion({"Answer": mo.md(f"{_load:,} B ÷ 2³⁰ = {format_bytes(_load, 'GiB')}.")}),
        mo.md("**3.** A 7B finetune in pure bf16 with Adam loads the model onto a 24 GB card without complaint, "
              "then crashes with CUDA out of memory at the first training step. Why not at load time?"),
        mo.accordion({"Answer": mo.md(
            f"Loading puts only the weights on the card: {format_bytes(_load)}. The first backward pass "
            f"creates the gradients ({format_bytes(_step.gradients)}) and the first optimizer step creates "
            f"Adam's states ({format_bytes(_step.optimizer_states)}): "
            f"{format_bytes(_step.without_activations)} in all, before activations.")}),
        mo.md("**4.** Can you size a GPU for finetuning from the memory that serving the model needs?"),
        mo.accordion({"Answer": mo.md(
            "No: they are separate calculations. Serving keeps the weights, a KV cache and a working set; "
            "training keeps weights, gradients, optimizer states and activations. Compare the two bars above "
            "for any model.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
