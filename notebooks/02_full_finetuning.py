import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Full finetuning: gradients and optimizer states")


@app.cell(hide_code=True)
def _(article_run, mm, mo, viz):
    mo.md(f"""
    # Full finetuning: gradients and optimizer states

    The obvious way to adjust a pre-trained model is to let every weight move. That is **full
    finetuning**, and while models were small it was the normal thing to do. As models grew it
    stopped being practical for most people, because training keeps far more in memory than the
    weights.

    The article's example: a 7B model in a 16-bit format has
    {mm.format_bytes(article_run.weights)} of weights ({viz.lesson_link("01_weights_and_formats", "lesson 1")}),
    but fully finetuning it adds up to about **{mm.format_bytes(article_run.without_activations)}**
    before activations are counted. That is more than most consumer GPUs provide, so a GPU that
    holds the {mm.format_bytes(article_run.weights)} of weights can still fail the run.

    This lesson opens up the rest of that total: the gradients and the optimizer states, how the
    optimizer and the precision recipe change them, and why published estimates disagree.
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath as mm
    from memmath import viz

    return alt, mm, mo, pd, viz


@app.cell(hide_code=True)
def _(article_bpp, mm, mo):
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
    """)
    return


@app.cell
def _(mm):
    article_params = 7_000_000_000  # the article's 7B model
    article_bpp = mm.bytes_per_parameter("bf16", "adam")  # 2 + 2 + 2 x 2 = 8 B per parameter
    article_run = mm.training_memory(article_params, precision="bf16", optimizer="adam")
    return article_bpp, article_params, article_run


@app.cell(hide_code=True)
def _(article_params, article_run, mm, mo):
    _frame = article_run.to_frame("GB")
    _frame = _frame[_frame["bytes"] > 0][["label", "bytes", "GB"]].reset_index(drop=True)
    _rest = article_run.without_activations - article_run.weights
    mo.vstack([
        mo.md(f"""For {article_params:,} parameters: {article_params:,} × {article_run.without_activations // article_params} B
        = **{mm.format_bytes(article_run.without_activations)}**. The weights are
        {mm.format_bytes(article_run.weights)}; the other {mm.format_bytes(_rest)} (which the article leaves
        unitemized) are the gradients and Adam's states:"""),
        mo.ui.table(_frame.rename(columns={"label": "part", "GB": "size (GB)"}), selection=None, pagination=False,
                    show_column_summaries=False, show_data_types=False, show_search=False, show_download=False),
    ])
    return


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    Gradients exist only for the parameters that train. As the article puts it, trainability
    connects directly to the cost of an update: a frozen parameter needs no gradient and no
    optimizer state. Full finetuning trains all of them, so it pays the whole bill;
    {viz.lesson_link("04_freezing")} shows what freezing takes off it.

    ## Your run

    Pick a model size (or a published model), a precision recipe, an optimizer, a GPU and a unit.
    Every part of the chart follows.
    """)
    return


@app.cell
def _(mm, mo, viz):
    params_slider, preset_dropdown = viz.model_size_controls()  # 100M to 1T, or a published model
    precision_dropdown = mo.ui.dropdown(
        options={"pure bf16": "bf16", "pure fp16": "fp16", "fp32": "fp32", "PyTorch AMP": "amp",
                 "mixed precision (ZeRO)": "mixed", "mixed + fp32 gradient accumulation": "mixed_fp32_grads"},
        value="pure bf16", label="Precision recipe")
    optimizer_dropdown = mo.ui.dropdown(
        options={"SGD": "sgd", "SGD with momentum": "sgd_momentum", "Adam": "adam", "AdamW": "adamw",
                 "8-bit Adam": "adam8bit", "Adafactor": "adafactor"},
        value="Adam", label="Optimizer")
    gpu_dropdown = mo.ui.dropdown(options=list(mm.GPUS), value="RTX 4090", label="GPU")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([mo.hstack([params_slider, preset_dropdown], justify="start", gap=2),
               mo.hstack([precision_dropdown, optimizer_dropdown], justify="start", gap=2),
               mo.hstack([gpu_dropdown, unit_radio], justify="start", gap=2)])
    return gpu_dropdown, optimizer_dropdown, params_slider, precision_dropdown, preset_dropdown, unit_radio


@app.cell
def _(gpu_dropdown, mm, optimizer_dropdown, params_slider, precision_dropdown, preset_dropdown, unit_radio, viz):
    preset = preset_dropdown.value
    model = viz.model_choice(params_slider.value, preset)  # a preset name or a parameter count
    n_params = mm.resolve_model(model).n_params
    precision, optimizer = precision_dropdown.value, optimizer_dropdown.value
    gpu, unit = mm.get_gpu(gpu_dropdown.value), unit_radio.value
    # Full finetuning, one step, before activations (no seq_len): every part in integer bytes.
    run = mm.training_memory(model, precision=precision, optimizer=optimizer)
    return gpu, model, n_params, optimizer, precision, preset, run, unit


@app.cell
def _(gpu, mm, pd, run, unit, viz):
    _frame = viz.breakdown_long({"Full finetuning, one step": run}, unit)
    _weights_alone = _frame[_frame["part"] == "weights"].assign(scenario="Holding the weights")
    viz.stacked_bars(pd.concat([_weights_alone, _frame]), unit, capacity_bytes=gpu.memory_bytes,
                     capacity_label=f"{gpu.name}: {mm.format_bytes(gpu.memory_bytes, unit)} (driver)",
                     title="What the GPU must hold (activations come on top: lesson 3)")
    return


@app.cell(hide_code=True)
def _(gpu, mm, mo, n_params, run, unit, viz):
    _holds, _runs = mm.check_fit(run.weights, gpu), mm.check_fit(run.total, gpu)
    _verdict = ("fits" if _runs.fits else f"does not fit: it is short by {mm.format_bytes(-_runs.headroom_bytes, unit)}")
    _kind = "success" if _runs.fits else ("warn" if _holds.fits else "danger")
    _notes = [n for n in run.notes if not n.startswith("activations not estimated")]
    mo.callout(mo.md(f"""
    **{viz.short_count(n_params)} parameters**: {mm.format_bytes(run.total, unit)} for full finetuning
    ({run.total / n_params:.2f} B per parameter), of which {mm.format_bytes(run.weights, unit)} are weights.
    The {gpu.name} reports {mm.format_bytes(gpu.memory_bytes, unit)}: it
    {"holds" if _holds.fits else "cannot even hold"} the weights, and the run {_verdict}.

    *Assumes:* {run.assumptions}{"" if not _notes else " Note: " + "; ".join(_notes) + "."}
    """), kind=_kind)
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Optimizer choice

    The optimizer decides how many numbers each weight carries between steps. Plain SGD keeps
    none; SGD with momentum keeps one; Adam and AdamW keep two; 8-bit Adam (Dettmers et al. 2022)
    keeps Adam's two at 1 byte each plus a small scale per block; Adafactor (Shazeer & Stern 2018)
    replaces the second moment of each matrix by its row and column averages and drops the first.
    The table runs every optimizer with your model and precision recipe. Adafactor's saving needs
    the shape of every matrix: with a bare parameter count from the slider memmath cannot factor
    anything and counts a full second moment, so pick a published model to see it.
    """)
    return


@app.cell
def _(gpu, mm, mo, model, n_params, pd, precision, unit):
    _rows = []
    for _name, _opt in mm.OPTIMIZERS.items():
        _r = mm.training_memory(model, precision=precision, optimizer=_name)
        _unfactored = any(_n.startswith("Adafactor cannot factor") for _n in _r.notes)
        _rows.append({"optimizer": _name, f"optimizer states ({unit})": round(mm.to_unit(_r.optimizer_states, unit), 2),
                      "B per parameter": round(_r.total / n_params, 2), f"total ({unit})": round(mm.to_unit(_r.total, unit), 2),
                      f"fits the {gpu.name}": "yes" if mm.check_fit(_r.total, gpu).fits else "no",
                      "what it keeps": _opt.description + (" Counted unfactored here: a bare parameter count "
                                                           "has no matrix shapes." if _unfactored else "")})
    optimizer_table = pd.DataFrame(_rows)
    mo.ui.table(optimizer_table, selection=None, pagination=False, show_column_summaries=False,
                show_data_types=False, show_search=False, show_download=False, wrapped_columns=["what it keeps"])
    return (optimizer_table,)


@app.cell(hide_code=True)
def _(mm, mo):
    _low = min(mm.published.published_bytes_per_parameter(k)["total"] for k in mm.published.PUBLISHED_ESTIMATES)
    _high = max(mm.published.published_bytes_per_parameter(k)["total"] for k in mm.published.PUBLISHED_ESTIMATES)
    mo.md(f"""
    ## Why published estimates range from {_low:g} to {_high:g} bytes per parameter

    Look up "memory to finetune a 7B model with Adam" and you will find answers from {_low:g} to
    {_high:g} bytes per parameter. None of them is wrong: each counts a different **recipe**, that
    is, which copies are kept and in which format. Mixed precision (Micikevicius et al. 2018)
    computes in 16 bits but keeps an fp32 **master copy** of the weights and fp32 optimizer states,
    because tiny updates vanish when added to a 16-bit weight. Some setups also keep an fp32 buffer
    to accumulate gradients over several micro-batches. Some counts leave the gradients out
    entirely. Each bar below is one published count, applied to your model size:
    """)
    return


@app.cell
def _(mm, n_params):
    # Each published count, as the recipe it describes (memmath.published), for this many parameters.
    published_runs = {
        f"{mm.published.published_bytes_per_parameter(e.key)['total']:g} B: {e.label}":
            mm.training_memory(n_params, precision=e.recipe, optimizer=e.optimizer)
        for e in mm.published.PUBLISHED_ESTIMATES.values()}
    return (published_runs,)


@app.cell
def _(gpu, mm, n_params, published_runs, unit, viz):
    viz.stacked_bars(viz.breakdown_long(published_runs, unit), unit, capacity_bytes=gpu.memory_bytes,
                     capacity_label=f"{gpu.name}: {mm.format_bytes(gpu.memory_bytes, unit)}", width=420,
                     title=f"Six published counts for {viz.short_count(n_params)} parameters with Adam")
    return


@app.cell
def _(mm, mo, n_params, unit):
    published_rows = mm.published.published_table(n_params, unit)
    _first = ["estimate", "B per parameter", f"memory ({unit})", "what it counts"]
    _shown = published_rows[_first + [c for c in published_rows.columns if c not in _first]].round(2)
    mo.ui.table(_shown, selection=None, pagination=False, show_column_summaries=False, show_data_types=False,
                show_search=False, show_download=False, wrapped_columns=["what it counts", "source"])
    return (published_rows,)


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    Read the table by row: the parts are the same everywhere (weights, gradients, optimizer
    states, sometimes a master copy or an accumulation buffer); only their formats differ. When
    you quote a number, quote its recipe with it.

    ## A GPU that holds the weights can still fail the run

    The catalog below compares every card twice: can it hold the weights, and can it hold one step
    of full finetuning with your recipe and optimizer (before activations)?
    """)
    return


@app.cell
def _(mm, mo, run, unit):
    _weights = mm.fit_table(run.weights, unit=unit).set_index("gpu")
    _total = mm.fit_table(run.total, unit=unit).set_index("gpu")
    gpu_rows = _weights[["marketed", f"memory ({unit})"]].assign(**{
        "holds the weights": _weights["fits"].map({True: "yes", False: "no"}),
        "runs full finetuning": _total["fits"].map({True: "yes", False: "no"}),
    }).reset_index().round(2)
    mo.ui.table(gpu_rows, page_size=len(gpu_rows), selection=None, show_column_summaries=False,
                show_data_types=False, show_search=False, show_download=False)
    return (gpu_rows,)


@app.cell(hide_code=True)
def _(gpu_rows, mo):
    _gap = gpu_rows[(gpu_rows["holds the weights"] == "yes") & (gpu_rows["runs full finetuning"] == "no")]
    mo.md(f"""
    With these settings, **{len(_gap)}** of the {len(gpu_rows)} cards hold the weights but fail the run
    ({", ".join(_gap["gpu"]) if len(_gap) else "none"}). Activations, the next lesson, widen the gap.
    """)
    return


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
def _(mm):
    # Problem answers, computed with memmath.
    answer_mixed_7b = mm.training_memory(7_000_000_000, precision="mixed", optimizer="adam")
    answer_8bit_7b = mm.training_memory(7_000_000_000, precision="bf16", optimizer="adam8bit")
    answer_adam_7b = mm.training_memory(7_000_000_000, precision="bf16", optimizer="adam")
    answer_frozen = mm.training_memory(mm.uniform_model(7_000_000_000, 10), precision="bf16", optimizer="adam",
                                       method=mm.Freeze(trainable_layers=1))
    _llama = mm.training_memory("llama-2-7b", precision="bf16", optimizer="adam")
    _fits = mm.fit_table(_llama.total)
    answer_llama_gpu = _fits[_fits["fits"]].iloc[0]["gpu"]
    answer_llama_total = _llama.total
    return (answer_8bit_7b, answer_adam_7b, answer_frozen, answer_llama_gpu, answer_llama_total,
            answer_mixed_7b)


@app.cell(hide_code=True)
def _(answer_8bit_7b, answer_adam_7b, answer_frozen, answer_llama_gpu, answer_llama_total, answer_mixed_7b,
      mm, mo):
    _b = mm.bytes_per_parameter("mixed", "adam")
    _a8 = mm.OPTIMIZERS["adam8bit"]
    mo.vstack([
        mo.md("## Problems"),
        mo.md("**1.** The same 7B model with mixed precision (16-bit weights and gradients, fp32 master copy, "
              "fp32 Adam states). How many bytes per parameter, and how much memory?"),
        mo.accordion({"Answer": mo.md(
            f"{_b['weights']:g} + {_b['gradients']:g} + {_b['master_weights']:g} + {_b['optimizer_states']:g} = "
            f"{_b['total']:g} B per parameter: {mm.format_bytes(answer_mixed_7b.without_activations)}, "
            f"twice the article's {mm.format_bytes(answer_adam_7b.without_activations)}.")}),
        mo.md("**2.** Keep pure bf16 but swap Adam for 8-bit Adam. What do you save on the 7B model?"),
        mo.accordion({"Answer": mo.md(
            f"Adam's states take {mm.format_bytes(answer_adam_7b.optimizer_states)}; 8-bit Adam's "
            f"{mm.format_bytes(answer_8bit_7b.optimizer_states)} ({_a8.state_bits // 8} B per state plus one "
            f"{_a8.block_constant_bits}-bit scale per {_a8.block_size:,} values). "
            f"The run drops from {mm.format_bytes(answer_adam_7b.total)} to {mm.format_bytes(answer_8bit_7b.total)}.")}),
        mo.md("**3.** Split the 7B model into ten equal layers and train only the last one. What happens to the "
              "weights, the gradients and the optimizer states?"),
        mo.accordion({"Answer": mo.md(
            f"The weights stay {mm.format_bytes(answer_frozen.weights)} (every weight is still needed for the "
            f"forward pass). Gradients fall to {mm.format_bytes(answer_frozen.gradients)} and Adam's states to "
            f"{mm.format_bytes(answer_frozen.optimizer_states)}: {answer_frozen.trainable_fraction:.0%} of the "
            f"parameters train. Total: {mm.format_bytes(answer_frozen.total)}. Lesson 4 goes further.")}),
        mo.md("**4.** Which is the smallest card in the catalog that holds one step of full finetuning of "
              "llama-2-7b in pure bf16 with Adam (before activations)?"),
        mo.accordion({"Answer": mo.md(
            f"The run needs {mm.format_bytes(answer_llama_total)} ({mm.format_bytes(answer_llama_total, 'GiB')}): "
            f"the smallest card that reports enough is the **{answer_llama_gpu}** "
            f"({mm.format_bytes(mm.GPUS[answer_llama_gpu].memory_bytes, 'GiB')}).")}),
    ])
    return


if __name__ == "__main__":
    app.run()
