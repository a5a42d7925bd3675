# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "11. Many GPUs"
# description = "When a model outgrows one card: what data, ZeRO, tensor, sequence, pipeline, context and expert parallelism each split, and one GPU's memory for any layout."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Many GPUs: how a model is split", css_file="memmath.css")


@app.cell(hide_code=True)
def _(format_bytes, headline, mo, viz):
    mo.md(f"""
    # {viz.LESSONS["11_many_gpus"]}

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    Some runs fit no card. Full finetuning of Llama-3-70B in pure bf16 with AdamW, one sequence of
    2,048 tokens, must hold **{format_bytes(headline["one"].bytes)}** at its step's peak: that is
    {headline["one"].bytes / headline["gpu"].memory_bytes:.1f} times the
    {format_bytes(headline["gpu"].memory_bytes)} an {headline["gpu"].name} reports. More cards help
    only when they split what a card holds. Copying the model onto 8 cards (data parallelism) leaves
    every copy as large; splitting each block's matrices over 8 cards and the layers over 2 stages
    (**{headline["plan"].layout.describe()}**, 16 GPUs) leaves
    **{format_bytes(headline["plan"].need.bytes)}** at the step's peak on the GPU that needs the most, and
    it fits.

    Lay out a run yourself below; then see what each way of splitting takes off a card.
    {viz.lesson_link("08_planner", "Lesson 8")} plans one card; {viz.lesson_link("02_full_finetuning", "lesson 2")}
    explains the parts.
    """)
    return


@app.cell
def _():
    import marimo as mo

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath import parallel
    from memmath_lessons import many_gpus, requirement_view, site_charts, viz
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.static_charts import live_only_notice
    from memmath.verdict import verdict_of

    return (format_bytes, live_chart, live_only_notice, many_gpus, mm, mo, parallel, requirement_view,
            site_charts, verdict_of, viz)


@app.cell
def _(mm):
    # The page's opening numbers: the run on one card, and the fewest cards the planner finds for it.
    headline = {"gpu": mm.get_gpu("H100 80GB"), "one": mm.requirement("llama-3-70b"),
                "plan": mm.planner.plan_layout("llama-3-70b", "H100 80GB")}
    return (headline,)


@app.cell
def _(mm):
    gpu_names = list(mm.GPUS)  # every card memmath knows, for the GPU control
    return (gpu_names,)


@app.cell(hide_code=True)
def _(gpu_names, live_only_notice, mo):
    model_dropdown = mo.ui.dropdown(options={"Llama-3-70B": "llama-3-70b", "Llama-3-8B": "llama-3-8b",
                                             "Mixtral-8x7B (8 experts)": "mixtral-8x7b",
                                             "Qwen3-30B-A3B (128 experts)": "qwen3-30b-a3b"},
                                    value="Llama-3-70B", label="Model")
    gpu_dropdown = mo.ui.dropdown(options=gpu_names, value="H100 80GB", label="GPU")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    _degrees = {"1": 1, "2": 2, "4": 4, "8": 8}
    tp_dropdown = mo.ui.dropdown(options=_degrees, value="8", label="Tensor t")
    pp_dropdown = mo.ui.dropdown(options=_degrees, value="2", label="Pipeline p")
    dp_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64], value=1, label="Data d", show_value=True)
    cp_dropdown = mo.ui.dropdown(options={"1": 1, "2": 2, "4": 4}, value="1", label="Context c")
    ep_dropdown = mo.ui.dropdown(options=_degrees, value="1", label="Expert (MoE only)")
    zero_radio = mo.ui.radio(options={"0": 0, "1": 1, "2": 2, "3": 3}, value="0", inline=True, label="ZeRO stage")
    sequence_parallel_checkbox = mo.ui.checkbox(value=False, label="sequence parallelism (t ≥ 2)")
    # (schedule, stages per GPU): interleaved 1F1B runs v stages on each GPU
    schedule_dropdown = mo.ui.dropdown(options={"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1),
                                                "Interleaved 1F1B, 2 stages a GPU": ("interleaved", 2)},
                                       value="1F1B", label="Pipeline schedule")
    micro_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32], value=2, label="Micro-batches m (pipeline)",
                                show_value=True)
    batch_slider = mo.ui.slider(1, 8, value=1, label="Batch (sequences per micro-batch)", show_value=True)
    seq_slider = mo.ui.slider(steps=[512, 1024, 2048, 4096, 8192, 16384, 32768], value=2048,
                              label="Sequence length (tokens)", show_value=True)
    checkpointing_checkbox = mo.ui.checkbox(value=False, label="gradient checkpointing")
    mo.vstack([mo.md("""
    ## Lay out a run

    Pick the degrees; the run uses d x t x p x c GPUs. **Data** d: whole copies of the model, each on
    its own sequences (ZeRO shards the copies). **Tensor** t: each block's matrices split. **Pipeline**
    p: the layers split into stages. **Context** c: the sequence split. **Expert** e: a mixture of
    experts' experts split over e of the d x c data GPUs (e must divide d x c). The chart shows the GPU
    of each stage that needs the most, against the card less its CUDA context: its parts as bars, a
    black tick at what the card must hold (its step's peak; not every part is alive at once).
    """), live_only_notice(),
        mo.hstack([model_dropdown, gpu_dropdown, unit_radio], justify="start", gap=2),
        mo.hstack([tp_dropdown, pp_dropdown, dp_slider, cp_dropdown, ep_dropdown], justify="start", gap=1.5),
        mo.hstack([zero_radio, sequence_parallel_checkbox, schedule_dropdown, micro_slider], justify="start", gap=1.5),
        mo.hstack([batch_slider, seq_slider, checkpointing_checkbox], justify="start", gap=1.5)])
    return (batch_slider, checkpointing_checkbox, cp_dropdown, dp_slider, ep_dropdown, gpu_dropdown, micro_slider,
            model_dropdown, pp_dropdown, schedule_dropdown, seq_slider, sequence_parallel_checkbox, tp_dropdown,
            unit_radio, zero_radio)


@app.cell(hide_code=True)
def _(live_chart):
    rank_chart = live_chart()  # drawn once; the next cell sends it new rows
    rank_chart
    return (rank_chart,)


@app.cell(hide_code=True)
def _(format_bytes, many_gpus, mo, rank_chart, requirement_view):
    def show_layout(layout_run, layout_need, layout_error, layout_verdict, layout_command, layout_shape,
                    layout_worst, gpu, usable, unit, schedule):
        """The chart of each stage's GPU, and the callout that says the verdict and the command line."""
        if layout_error:
            rank_chart.update(many_gpus.stage_bars({}, unit, title="No such layout", capacity_bytes=usable,
                                                   capacity_label=f"{gpu.name} less the CUDA context"))
            return mo.callout(mo.md(f"This layout cannot run: {layout_error}"), kind="warn")
        _parallel = layout_worst is not None
        _label = f"{gpu.name} less the CUDA context ({format_bytes(usable, unit)})"
        _needs = many_gpus.stage_needs(layout_run)
        if _parallel:
            rank_chart.update(many_gpus.stage_chart(layout_run, unit, title="One GPU of each pipeline stage",
                                                    capacity_bytes=usable, capacity_label=_label))
        else:  # one GPU, or data parallelism (ZeRO): the step's peak, as lesson 8 draws it
            rank_chart.update(requirement_view.bars_output({"each GPU": layout_need}, unit, title="Each GPU",
                                                           capacity_bytes=usable, capacity_label=_label))
        _worst, _lay = layout_worst, layout_shape
        _needer = max(_needs, key=_needs.get)  # the stage whose GPU needs the most, as requirement() judges
        _where = ((f"the GPU of {_needer} needs the most: its step's peak" if layout_need.basis == "peak" else
                   f"the GPU of {_needer} holds the most: the sum of its parts"
                   f"{' and buffers' if _worst.buffer_bytes else ''} ({layout_need.reason.split('; ')[-1]})")
                  if _parallel else f"each GPU holds the same; the card must hold "
                  f"{requirement_view.requirement_words(layout_need)}")
        if _lay.pp > 1 and layout_run.virtual_stages > 1:
            _pipe = (f" Interleaved 1F1B runs {layout_run.virtual_stages} stages on each GPU: GPU {_worst.rank} keeps up to "
                     f"{_worst.in_flight} micro-batch stages' activations at once (of {layout_run.micro_batches} "
                     f"micro-batches x {layout_run.virtual_stages} stages, each stage 1/{layout_run.virtual_stages} of "
                     f"the GPU's blocks), and the bubble shrinks to {_worst.bubble:.0%} of the step, (p − 1) / (v m + p − 1) "
                     "(Narayanan et al. 2021).")
        elif _lay.pp > 1:
            _pipe = (f" The {schedule} schedule keeps {_worst.in_flight} of "
                     f"{layout_run.micro_batches} micro-batches' activations on that stage and idles "
                     f"{_worst.bubble:.0%} of the step, (p − 1) / (m + p − 1).")
        else:
            _pipe = ""
        return mo.callout(mo.md(f"""
        **{_lay.n_gpus} GPUs, {_lay.describe()}**: {_where}, **{format_bytes(layout_need.bytes, unit)}**.
        The {gpu.name} leaves {format_bytes(usable, unit)} after the CUDA context: the run
        **{layout_verdict.clause(unit)}**. {layout_verdict.why(unit)}{_pipe}

        The command line says the same: `{layout_command}`
        """), kind="success" if layout_verdict.fits else "danger")

    return (show_layout,)


@app.cell
def _(batch_slider, checkpointing_checkbox, cp_dropdown, dp_slider, ep_dropdown, gpu_dropdown, many_gpus,
      micro_slider, mm, model_dropdown, parallel, pp_dropdown, schedule_dropdown, seq_slider,
      sequence_parallel_checkbox, show_layout, tp_dropdown, unit_radio, verdict_of, zero_radio):
    # The one cell the layout's controls re-run: the Run, what its GPUs must hold, the verdict.
    unit, gpu = unit_radio.value, mm.get_gpu(gpu_dropdown.value)
    usable = gpu.memory_bytes - gpu.cuda_context_bytes  # the card less its own CUDA context, as the verdict judges
    _t, _p, _d, _c = tp_dropdown.value, pp_dropdown.value, dp_slider.value, cp_dropdown.value
    try:
        layout_run = mm.Run(model_dropdown.value, batch_size=batch_slider.value, seq_len=seq_slider.value,
                            checkpointing=checkpointing_checkbox.value, n_gpus=_d * _t * _p * _c, tp=_t, pp=_p, cp=_c,
                            ep=ep_dropdown.value, zero_stage=zero_radio.value,
                            sequence_parallel=sequence_parallel_checkbox.value,
                            pp_schedule=schedule_dropdown.value[0] if _p > 1 else "1f1b",
                            virtual_stages=schedule_dropdown.value[1] if _p > 1 else 1,
                            micro_batches=micro_slider.value if _p > 1 else 1)
        layout_need = mm.requirement(layout_run)
        layout_error = None
    except ValueError as _error:  # memmath names the field and what it allows
        layout_run, layout_need, layout_error = None, None, str(_error)
    layout_verdict = layout_shape = _worst = None
    layout_command = many_gpus.cli_command(layout_run, gpu.name) if layout_run else None
    if not layout_error:
        layout_verdict = verdict_of(layout_need, gpu)  # memmath.verdict: the CUDA reserve, 5% of the requirement kept free
        layout_shape = parallel.layout(layout_run)
        if parallel.is_parallel(layout_run):
            # the GPU the verdict judges: the one whose requirement is the run's (its peak, or its parts and buffers)
            _rank = layout_need.memory.run.rank
            _stages = many_gpus.stage_memories(layout_run)  # kept per run, as its needs and chart (many_gpus)
            _worst = (next((one for one in _stages.values() if one.rank == _rank), None)
                      or parallel.parallel_memory(layout_run.replace(rank=_rank)))
    show_layout(layout_run, layout_need, layout_error, layout_verdict, layout_command, layout_shape, _worst, gpu,
                usable, unit, schedule_dropdown.selected_key)
    return layout_command, layout_error, layout_need, layout_run, layout_verdict


@app.cell(hide_code=True)
def _(mo):
    # Reads no control: a slider's move re-runs one cell fewer, and the button is drawn once.
    fewest_button = mo.ui.run_button(kind="success", label="Find the fewest GPUs")
    mo.vstack([mo.md("""
    ## The fewest GPUs

    The planner tries 1, 2, 3, 4, 6, 8 ... GPUs, and for each every tensor degree up to 8 (one node)
    and every pipeline degree that divides the layers, with as many micro-batches as stages and, when
    that does not fit, half as many and so on down to one (fewer in flight, a larger bubble). It stops
    at the fewest GPUs that fit the model, card, batch, sequence length and checkpointing set above.
    It can take a few seconds when nothing small fits.
    """), fewest_button])
    return (fewest_button,)


@app.cell(hide_code=True)
def _(format_bytes, mo, requirement_view):
    def show_fewest(fewest_plan, model, gpu_name, batch, seq, checkpointing, unit):
        """What the planner found, or the invitation to press the button."""
        if fewest_plan is None:
            return mo.md("Press the button to search.")
        if not fewest_plan.fits:
            return mo.callout(mo.md(f"No layout of up to 1,024 GPUs fits {model} at batch "
                                    f"{batch} x {seq:,} on the {fewest_plan.gpu} (tried "
                                    f"{fewest_plan.tried:,}). Turn on checkpointing or shorten the sequences."),
                              kind="warn")
        # Lines joined without indentation: markdown would read an indented block as code.
        return mo.callout(mo.md("\n".join([
            f"For {model} on the {gpu_name}, batch {batch} x "
            f"{seq:,} tokens{', checkpointing' if checkpointing else ''}: "
            f"**{fewest_plan.layout.n_gpus} GPUs: {fewest_plan.layout.describe()}"
            + (f", {fewest_plan.run.micro_batches} micro-batch{'es' if fewest_plan.run.micro_batches > 1 else ''}"
               if fewest_plan.layout.pp > 1 else "") + "**. The GPU that needs the most "
            f"must hold {format_bytes(fewest_plan.need.bytes, unit)} "
            f"({requirement_view.requirement_words(fewest_plan.need)}) of the "
            f"{format_bytes(fewest_plan.usable_bytes, unit)} the card leaves "
            f"({fewest_plan.tried} layouts tried). What each axis costs:", "",
            *(f"- {line}" for line in fewest_plan.trade_offs)])), kind="success")

    return (show_fewest,)


@app.cell
def _(batch_slider, checkpointing_checkbox, fewest_button, gpu_dropdown, mm, model_dropdown, seq_slider, show_fewest,
      unit_radio):
    # The planner's search for the fewest GPUs, when the button is pressed.
    fewest_plan = None
    if fewest_button.value:
        fewest_plan = mm.planner.plan_layout(model_dropdown.value, gpu_dropdown.value, batch_size=batch_slider.value,
                                             seq_len=seq_slider.value, checkpointing=checkpointing_checkbox.value)
    show_fewest(fewest_plan, model_dropdown.selected_key, gpu_dropdown.value, batch_slider.value, seq_slider.value,
                checkpointing_checkbox.value, unit_radio.value)
    return


@app.cell(hide_code=True)
def _(many_gpus, mo, viz):
    axis_frame = many_gpus.axis_table("llama-3-70b")
    _one, _z3, _tp = (axis_frame.set_index("layout").loc[k] for k in ("1 GPU", "data x 8, ZeRO-3", "tensor x 8"))
    mo.vstack([mo.md("""
    ## What each axis splits

    Every row is Llama-3-70B on 8 GPUs (one on the first row), pure bf16 with AdamW, batch 1 x 2,048
    tokens, no checkpointing; the numbers are the GPU that needs the most. Data parallelism alone adds
    speed, not room. ZeRO-3, tensor and pipeline parallelism each bring the weights to about an eighth;
    only tensor parallelism also takes most activations off (a pipeline stage keeps those of every
    micro-batch in flight).
    """), viz.plain_table(axis_frame, wrapped_columns=["takes off each GPU"]),
        mo.accordion({"How does each axis split a GPU's memory, and which number is each row judged on?": mo.md(f"""
    - **Data parallelism** gives each GPU its own sequences and a whole copy of the model: it adds
      speed, not room. **ZeRO** (Rajbhandari et al. 2020) then shards the copies' optimizer states
      (stage 1), gradients (stage 2) and weights (stage 3) over the data-parallel GPUs. Stage 3 brings
      the weights to {_z3["weights (GB)"]:.2f} GB a GPU (one eighth of {_one["weights (GB)"]:.2f} GB),
      but every GPU still runs its micro-batch through every layer: the activations stay.
    - **Tensor parallelism** (Megatron-LM, Shoeybi et al. 2019) splits each block's matrices: the
      attention heads and the MLP's width over t GPUs, and the vocabulary of the embedding and the
      head. Weights, gradients and states shrink by t, and so do most activations
      ({_one["activations (GB)"]:.2f} to {_tp["activations (GB)"]:.2f} GB): only the norms and the
      residual stream between blocks stay whole. **Sequence parallelism** (Korthikanti et al. 2022)
      splits those along the sequence too. The gradients stay a little above the weights here:
      torch 2.13's vocabulary-sharded embedding keeps a whole-vocabulary gradient on every rank
      (measured over gloo; Megatron-LM keeps a slice).
    - **Pipeline parallelism** (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021) gives each GPU
      a stage of consecutive layers. A stage holds its layers' weights, gradients and states, but
      keeps the activations of every micro-batch in flight: with 1F1B the first stage keeps as many
      as there are stages.
    - **Context parallelism** splits the sequence of a long run over GPUs that exchange keys and
      values (ring attention); **expert parallelism** puts a mixture of experts' experts on different
      GPUs. Both are in the controls above.

    The table's "the card must hold" is the step's peak (the most allocated at one moment), of the GPU
    whose peak is highest once the model is split. Where memmath has no peak model of a split (ZeRO
    beside it, context or expert parallelism) it is a safe upper bound on that peak: the sum of the
    parts of the GPU that holds the most, its communication buffers, and what the step makes and frees
    at its largest; "judged on" says which (peak or bound). A peak and a bound do not compare: set the
    rows side by side on the sum of the parts, which every row has.
    """)})])
    return (axis_frame,)


@app.cell(hide_code=True)
def _(format_bytes, many_gpus, mo, viz):
    _table, _widget, _one = many_gpus.playbook_table()
    _p = many_gpus.PLAYBOOK_70B
    mo.accordion({"How does this compare with the Ultra-Scale Playbook's memory widget?": mo.vstack([mo.md(f"""
    The Ultra-Scale Playbook (Hugging Face, 2025) teaches these axes with a memory widget. Its preset
    "Llama 3 70B" is: {_p["a"]} heads, width h = {_p["h"]:,}, feed-forward width {_p["h_ff"]:,},
    {_p["L"]} layers, micro-batch {_p["b"]} x {_p["s"]} tokens, vocabulary {_p["v"]:,}, t = {_p["tp"]},
    d = {_p["dp"]}, ZeRO-{_p["zero"]}, mixed precision, no recomputation. Its formulas (the page's
    `paramGradsOpt` and `activationMemory`, reproduced in `memmath_lessons.many_gpus.playbook_widget`)
    give {format_bytes(sum(_widget[k] for k in ("Parameters", "Gradients", "OptimizerAverages", "Activations")))}
    per GPU. memmath, for the same run on the real Llama-3-70B (its config.json: grouped-query
    attention, SwiGLU of width 28,672, vocabulary 128,256, an untied head), gives
    {format_bytes(_one.total)}:
    """), viz.plain_table(_table), mo.md(f"""
    Where they differ, and why:

    - **The widget does not split weights, gradients or optimizer states across tensor ranks**: its
      `paramGradsOpt` takes no t. Megatron-LM and torch's tensor parallelism give each rank 1/t of
      every block matrix, so memmath's weights are one eighth of the widget's.
    - **It counts {_widget["parameters counted"]:,} parameters**: 12h² + 13h per layer is multi-head
      attention (4h²) and an MLP of two h x 4h matrices (8h²). It never reads the feed-forward width
      for the parameters, so SwiGLU's third matrix and grouped-query attention's smaller k and v are
      not there, and h(v + s) is one embedding with learned positions, no separate head.
    - **Its activations** follow Korthikanti et al. 2022 for a GPT-style block with dropout; memmath
      traces what transformers' LLaMA keeps, tensor by tensor, with a 128,256-word vocabulary (the
      loss's fp32 logits are large at 32 x 256 tokens).
    - **It divides by 1024³ and prints "GB"**: the table's middle column is what it shows, in GiB
      under the name GB, 7% below the GB of the first column.
    """)])})
    return


@app.cell
def _(mo, site_charts):
    # The static site's own chart: its inputs keep working where the marimo controls above are frozen.
    mo.vstack([mo.md("""
    The next chart is Llama-3-70B (pure bf16, AdamW, batch 1 x 2,048 tokens, 1F1B with as many
    micro-batches as stages) for every tensor and pipeline degree, one data-parallel copy, computed in
    advance. Its inputs keep working in this static copy of the page. The bar is the parts of the GPU
    that needs the most; the black tick is what the card must hold, its step's peak. Where the bar runs
    past the tick, not every part is alive at once.
    """), site_charts.many_gpus_grid()]) if site_charts.is_static_export() else None
    return


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md(r"""
    **Takeaways**

    - Data parallelism adds speed, not room; ZeRO shards the states (1), the gradients (2) and the
      weights (3), never the activations.
    - Tensor parallelism splits each block's matrices and most activations by t; it talks at every
      block, so it stays inside a node (t ≤ 8, NVLink).
    - Pipeline parallelism splits the layers; a stage keeps every micro-batch in flight, and
      (p − 1) / (m + p − 1) of the step idles.
    - Plan for the GPU that needs the most: the first stage (embeddings, most micro-batches in
      flight) or the last (the head, the loss, every micro-batch's logits).
    """), kind="success")
    return


@app.cell
def _(mm, parallel):
    # Problem answers (tests/test_lesson_11.py derives each by hand); problem 3 is the opening's run.
    problem_params = mm.resolve_model("llama-3-70b").n_params
    problem_zero3 = mm.training_memory(mm.Run("llama-3-70b", seq_len=None, n_gpus=8, zero_stage=3))
    problem_gpipe, problem_1f1b = (parallel.in_flight(s, 4, 8, 0) for s in ("gpipe", "1f1b"))
    problem_bubble = parallel.bubble("1f1b", 4, 8)  # (p − 1) / (m + p − 1)
    return problem_1f1b, problem_bubble, problem_gpipe, problem_params, problem_zero3


@app.cell(hide_code=True)
def _(format_bytes, headline, mo, problem_1f1b, problem_bubble, problem_gpipe, problem_params, problem_zero3):
    _plan = headline["plan"]
    _params, _z3, _gpipe, _1f1b = problem_params, problem_zero3, problem_gpipe, problem_1f1b
    mo.vstack([
        mo.md("## Problems"),
        mo.md(f"**1.** Llama-3-70B has {_params:,} parameters. Full finetuning in pure bf16 over 8 GPUs with "
              "ZeRO-3: how many bytes of weights does each GPU hold between steps?"),
        mo.accordion({"Answer": mo.md(
            f"{_params:,} x 2 B / 8 = {_z3.weights:,} B = {format_bytes(_z3.weights)}: ZeRO-3 shards the "
            "weights over the data-parallel GPUs (each gathers a layer's weights only while it computes).")}),
        mo.md("**2.** A pipeline of 4 stages runs 8 micro-batches a step. How many micro-batches' activations does "
              "the first stage keep at once with GPipe, and with 1F1B? What share of the step idles?"),
        mo.accordion({"Answer": mo.md(
            f"GPipe runs all 8 forwards first: {_gpipe}. 1F1B starts backwards once the pipeline is full: "
            f"{_1f1b}, one per stage. Either way (p − 1) / (m + p − 1) = 3 / 11 = "
            f"{problem_bubble:.0%} of the step idles.")}),
        mo.md("**3.** What is the fewest number of H100 80GB cards for Llama-3-70B full finetuning in pure bf16 "
              "with AdamW, batch 1 x 2,048 tokens, and how are they laid out?"),
        mo.accordion({"Answer": mo.md(
            f"{_plan.layout.n_gpus} GPUs, {_plan.layout.describe()}: the GPU that needs the most must hold "
            f"{format_bytes(_plan.need.bytes)} at its step's peak, of {format_bytes(_plan.usable_bytes)}. With tensor "
            "parallelism alone (8 GPUs) it is too much; `memmath train llama-3-70b --gpu \"H100 80GB\" "
            "--plan-layout` says the same.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
