# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "6. LoRA and QLoRA"
# description = "A low-rank update that merges away, NF4 weights with double quantization, and full against LoRA against QLoRA on one model."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="LoRA and QLoRA", css_file="memmath.css")


@app.cell(hide_code=True)
def _(live_only_notice, mo, time_lora_merge, viz):
    _text = mo.md(rf"""
    # LoRA and QLoRA: a low-rank update on a 4-bit base

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** Parameter-efficient finetuning trains far fewer parameters than full finetuning,
    and that is what lets it run on affordable hardware (the article). **LoRA** (Hu et al. 2021)
    does it without the price {viz.lesson_link("05_adapters", "lesson 5")}'s adapters pay on every
    forward pass: it learns a *change* B·A to some existing weight matrices, the product of two thin
    matrices, which is added into the weights after training. **QLoRA** (Dettmers et al. 2023) then
    goes after what LoRA leaves: it stores the frozen base weights in a 4-bit format, NF4.

    **The control.** The rank r, the width of the two thin matrices (the model and the matrices
    adapted sit beside it).
    """)
    LORA_MODELS = {"Llama-2-7B": "llama-2-7b", "Llama-3-8B": "llama-3-8b", "Mistral-7B": "mistral-7b",
                   "Llama-2-13B": "llama-2-13b", "LLaMA-65B": "llama-65b", "Llama-2-70B": "llama-2-70b"}
    TARGET_SETS = {"q, v (the LoRA paper)": ("q", "v"), "q, k, v, o (all attention)": ("q", "k", "v", "o"),
                   "gate, up, down (the MLP)": ("gate", "up", "down"),
                   "all linear layers (QLoRA)": ("q", "k", "v", "o", "gate", "up", "down")}
    model_dropdown = mo.ui.dropdown(options=LORA_MODELS, value="Llama-2-7B", label="Model")
    _start_rank = 8
    rank_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=_start_rank, label="Rank r", show_value=True)
    targets_dropdown = mo.ui.dropdown(options=TARGET_SETS, value="q, v (the LoRA paper)", label="Adapted matrices")
    # Shown in the merging section: checks and times the merge at the rank on the slider when pressed (and once
    # at load, in 12 rounds rather than a press's 25, so that the page opens ~75 ms sooner), so moving the rank
    # never waits for a timing and the merging section never re-runs with it.
    merge_button = mo.ui.button(value=time_lora_merge(_start_rank, rounds=12), kind="success", label="Check and time again",
                                on_click=lambda last: time_lora_merge(rank_slider.value, last["number"] + 1))
    mo.vstack([_text, live_only_notice(), mo.hstack([rank_slider, model_dropdown, targets_dropdown], justify="start", gap=2)])
    return TARGET_SETS, merge_button, model_dropdown, rank_slider, targets_dropdown


@app.cell
def _():

    import functools

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes
    from memmath_lessons.reference import literature, paper_setups
    from memmath_lessons import blockwise, recorded, requirement_view, toy_block, viz
    from memmath_lessons.static_charts import live_only_notice, when_opened
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons import lesson_charts, lora_views, site_charts
    from memmath.verdict import verdict_of

    return (blockwise, format_bytes, functools, lesson_charts, literature, live_chart, live_html, live_only_notice,
            lora_views, mm, mo, np, paper_setups, pd, recorded, requirement_view, site_charts, toy_block,
            verdict_of, viz, when_opened)


@app.cell(hide_code=True)
def _(live_html):
    number_view, matrix_view = live_html(), live_html()  # filled by the next cell on every move
    number_view
    return matrix_view, number_view


@app.cell
def _(mm, model_dropdown, rank_slider, show_lora_number, targets_dropdown):
    # The core path's number: the one cell the rank re-runs here (the side-by-side section is the other). The
    # arithmetic is here; show_lora_number (memmath_lessons.lora_views) puts it into the live views around it and
    # returns the takeaway.
    shape = mm.PRESETS[model_dropdown.value]
    model_label = model_dropdown.selected_key
    rank, targets = rank_slider.value, targets_dropdown.value
    lora_method = mm.LoRA(rank=rank, targets=targets)
    lora_trainable = lora_method.trainable_params(shape)  # r x (d_in + d_out), summed over the adapted matrices
    # Everything but the activations, for the article's recipe (pure bf16, AdamW; peft's fp32 adapters).
    without_activations = {_name: mm.training_memory(shape, seq_len=None, method=_m, precision="bf16", optimizer="adamw")
                           for _name, _m in (("full", mm.Full()), ("lora", lora_method),
                                             ("qlora", mm.QLoRA(rank=rank, targets=targets)))}
    # The count is linear in r: twice the rank, twice the adapters.
    doubled_rank_trainable = mm.LoRA(rank=2 * rank, targets=targets).trainable_params(shape)
    show_lora_number(shape, model_label, lora_method, lora_trainable, without_activations, doubled_rank_trainable)
    return lora_trainable, model_label, rank, shape, targets


@app.cell(hide_code=True)
def _(matrix_view, mo):
    mo.accordion({"Which matrices can LoRA adapt, and how many parameters does each get?": matrix_view})
    return


@app.cell
def _(mm):
    # The count by hand for Llama-2-7B: LoRA r = 8 on q and v, r x (d_in + d_out) per matrix (Hu et al. 2021).
    llama2_7b = mm.PRESETS["llama-2-7b"]
    lora_q_v = mm.LoRA(rank=8, targets=("q", "v"))
    by_hand_matrix = lora_q_v.matrix_params(llama2_7b.hidden_size, llama2_7b.hidden_size)  # one q (or v) projection
    by_hand_trainable = lora_q_v.trainable_params(llama2_7b)  # x 2 matrices x 32 blocks
    return by_hand_matrix, by_hand_trainable, llama2_7b


@app.cell(hide_code=True)
def _(by_hand_matrix, by_hand_trainable, llama2_7b, mo):
    _h, _L = llama2_7b.hidden_size, llama2_7b.n_layers
    _formula = mo.md(r"""
    ## The formula

    A frozen matrix W (d_out × d_in) gets a trainable update B·A, with A of shape r × d_in and B
    of shape d_out × r; the layer computes **W·x + (α/r)·B·A·x** (Hu et al. 2021, section 4.1). The
    rank r is small, so the update has **r × (d_in + d_out)** parameters instead of d_in × d_out.
    The chart shows how the count grows with the rank for each choice of matrices: linearly, so
    doubling r doubles the adapter.
    """)
    mo.vstack([_formula, mo.accordion({"Go deeper: the count by hand for Llama-2-7B": mo.md(f"""
    B starts at zero, so training starts from the pretrained model.

    Llama-2-7B has d_in = d_out = {_h:,} in its query and value projections. At r = 8 each adapted
    matrix gets 8 × ({_h:,} + {_h:,}) = {by_hand_matrix:,} parameters, against {_h * _h:,} in the matrix
    itself. Two matrices (q and v) in each of {_L} blocks: {by_hand_matrix:,} × 2 × {_L} =
    **{by_hand_trainable:,}** trainable parameters.
    """)})])
    return


@app.cell
def _(curves_chart, lesson_charts, mm, model_dropdown, np, pd, TARGET_SETS):
    # Trainable parameters for every rank and set of matrices of this model: reads the model only, so the rank
    # slider does not re-run it (the text above says where you are); a new model draws it anew (its name is in the title).
    _shape, _label = mm.PRESETS[model_dropdown.value], model_dropdown.selected_key
    _ranks = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
    lora_curves = pd.concat([pd.DataFrame({"matrices": _name, "rank": _ranks,
                                           "trainable": mm.LoRA(rank=_ranks, targets=_t).trainable_params(_shape)})
                             for _name, _t in TARGET_SETS.items()])

    curves_chart.update(lora_curves, draw=lesson_charts.lora_curves(_label), key=_label)
    return (lora_curves,)


@app.cell(hide_code=True)
def _(live_chart):
    curves_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    curves_chart
    return (curves_chart,)


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Merging removes the latency

    During training the update runs beside the frozen matrix: W·x plus a thin side path B·(A·x).
    For serving, compute W' = W + (α/r)·B·A once and use it in place of W (Hu et al. 2021,
    section 4.1): one matrix, the same shape as before, so no extra step and no extra latency. Here
    it is in numpy, at the rank
    chosen above when you press the button:
    """)
    return


@app.cell
def _(np, toy_block):
    merge_width, merge_tokens = 512, 64
    merge_x = toy_block.make_input(merge_tokens, merge_width)

    def time_lora_merge(rank, number=1, rounds=25):
        """The merge checked (same output?) and timed (base, unmerged, merged; `rounds` interleaved) at this rank."""
        _lora = toy_block.make_lora(merge_width, merge_width, rank, alpha=16.0, trained=True)
        with toy_block.blas_threads(1):  # one BLAS thread: several spin-wait for each other on a busy machine (6 ms vs up to 90)
            _side = toy_block.lora_forward(merge_x, _lora)  # x W^T + (alpha/r) (x A^T) B^T
            _merged = toy_block.merge_lora(_lora)  # W + (alpha/r) B A
            _out = merge_x @ _merged.T
        _times = toy_block.time_variants({
            "base W x": lambda: merge_x @ _lora.W.T,
            "W x + B A x (unmerged)": lambda: toy_block.lora_forward(merge_x, _lora),
            "merged W' x": lambda: merge_x @ _merged.T}, repeats=rounds, budget_s=0.5)
        return {"times": _times, "rank": rank, "number": number, "gap": float(np.abs(_side - _out).max()),
                "same": bool(np.allclose(_side, _out, rtol=1e-4, atol=1e-5)), "typical": float(np.abs(_side).mean())}

    return merge_tokens, merge_width, time_lora_merge


@app.cell
def _(merge_button):
    # New checks and timings only when the button is pressed: the rank slider does not re-run this section.
    merge_times = merge_button.value["times"]
    merge_same, merge_gap = merge_button.value["same"], merge_button.value["gap"]
    return merge_gap, merge_same, merge_times


@app.cell(hide_code=True)
def _(live_only_notice, merge_button, merge_gap, merge_same, merge_times, merge_tokens, merge_width, mo, toy_block,
      viz):
    _variants = ("W x + B A x (unmerged)", "merged W' x")
    _fast = [toy_block.fastest_ratio(merge_times, v, "base W x") for v in _variants]
    _median = [toy_block.median_ratio(merge_times, v, "base W x") for v in _variants]
    _timed = merge_button.value
    # The merged layer is the base's work exactly (one matrix of the same shape): its measured gap is the noise.
    _noise = max(abs(_fast[1] - 1), abs(_median[1] - 1))
    if _noise <= 0.05:
        _reading = (f"The merged layer does exactly the base's work, one matrix of the same shape, and timed the "
                    f"same to within {max(_noise, 0.01):.0%}: merging costs nothing at inference")
    else:
        _reading = (f"The merged layer does exactly the base's work, one matrix of the same shape, yet its fastest "
                    f"run took {_fast[1]:.2f}× the base's and its median {_median[1]:.2f}×: a gap of up to {_noise:.0%} "
                    f"between identical work is how much "
                    f"this machine's timings wander right now (other programs share its cores), so read the unmerged "
                    f"layer's {_fast[0]:.2f}× with the same margin, or press the button to time again")
    mo.vstack([mo.md(f"""
    Check {_timed["number"]}, at r = {_timed["rank"]}: a {merge_width} × {merge_width} matrix, a rank-{_timed["rank"]} update
    and a batch of {merge_tokens} token vectors. Same output? **{"yes" if merge_same else "no"}**: `np.allclose` on the
    two outputs (largest difference {merge_gap:.1e}, on values of typical size {_timed["typical"]:.2f}; float32
    rounding, nothing more).
    """), mo.accordion({"Go deeper: the timings, unmerged against merged": mo.md(f"""
    Over {len(merge_times) // 3} interleaved runs on this machine, the fastest unmerged
    layer took **{_fast[0]:.2f}×** the fastest base matrix's time ({_median[0]:.2f}× comparing medians), the merged
    one **{_fast[1]:.2f}×** ({_median[1]:.2f}×). {_reading} (see the timing caveat in
    {viz.lesson_link("05_adapters", "lesson 5")}).
    """)}), live_only_notice(), mo.hstack([merge_button, mo.md("checks and times the three layers again, at the rank "
                                                             "on the slider above")], justify="start", gap=1)])
    return


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    block_size_slider = mo.ui.slider(steps=[16, 32, 64, 128, 256, 512, 1024], value=64,
                                     label="Quantization block (weights per constant)", show_value=True)
    mo.vstack([mo.md(r"""
    ## QLoRA: the frozen base in 4 bits

    With LoRA the trainable part is tiny, and the frozen weights dominate memory. QLoRA stores
    every linear layer's weights in **NF4**, a 4-bit format whose 16 levels sit at the quantiles
    of a normal distribution, since trained weights are roughly normal (Dettmers et al. 2023).
    Below, a few thousand normal weights are quantized in NF4 and in plain 4-bit integers, in blocks
    of the slider's size:
    """), mo.accordion({"Go deeper: how a block is quantized": mo.md(r"""
    Weights are cut into blocks of 64; each block is divided by its largest absolute value (its
    *absmax*), rounded to the nearest level, and the absmax is kept as the block's quantization
    constant.
    """)}), live_only_notice(), block_size_slider])
    return (block_size_slider,)


@app.cell(hide_code=True)
def _(live_chart):
    levels_chart = live_chart()  # drawn once (this cell reads no control); the cell below sends it new rows
    levels_chart
    return (levels_chart,)


@app.cell
def _(mm):
    # QLoRA's blocks of 64 (Dettmers et al. 2023): the constants' bits per weight, one fp32 absmax per block, and
    # with double quantization 8-bit constants plus one fp32 constant per 256 blocks.
    qlora_constant_bits = {_dq: mm.methods.quant_constant_bits(block=64, double_quant=_dq) for _dq in (False, True)}
    # What double quantization saves on Llama-2-7B's linear layers.
    double_quant_saving = (
        mm.training_memory("llama-2-7b", seq_len=None, method=mm.QLoRA(rank=8, double_quant=False)).quantization_constants
        - mm.training_memory("llama-2-7b", seq_len=None, method=mm.QLoRA(rank=8)).quantization_constants)
    return double_quant_saving, qlora_constant_bits


@app.cell(hide_code=True)
def _(block_size_slider, blockwise, double_quant_saving, format_bytes, lesson_charts, levels_chart, mo, np, pd,
      qlora_constant_bits, viz):
    # The one cell the block size re-runs: the table, the chart's new counts and the text.
    quant_block = block_size_slider.value
    demo_weights = np.random.default_rng(0).standard_normal(4096)
    # bf16, int4, NF4 and NF4 with double quantization: bits (memmath) and the mean error measured on these weights.
    quant_rows = blockwise.storage_table(demo_weights, block=quant_block)
    # A histogram counted in numpy (50 bins over -1..1): the page carries 50 counts, not 4,096 weights.
    _bins = blockwise.normalized_histogram(demo_weights, block=quant_block)
    _levels = blockwise.format_levels()

    levels_chart.update(pd.concat([_bins.assign(kind="bin"), _levels.assign(kind="level")], ignore_index=True),
                        draw=lesson_charts.quantization_levels, block=int(quant_block))

    _paper_plain, _paper_dq = qlora_constant_bits[False], qlora_constant_bits[True]  # QLoRA's blocks of 64
    _no_dq, _dq = quant_rows["constants (bits per weight)"].iloc[2], quant_rows["constants (bits per weight)"].iloc[3]
    mo.vstack([viz.plain_table(quant_rows.round(4)), mo.md(f"""
    Smaller blocks cut the error and cost more constants: move the slider.
    """), mo.accordion({"Go deeper: why NF4 beats int4, and how double quantization counts": mo.md(f"""
    NF4's levels crowd near zero, where most weights are, so its error is lower than int4's at the
    same 4 bits (the table's mean error is a share of the mean weight size). The constants cost
    extra bits: one fp32 absmax per block of {quant_block} is 32 / {quant_block} =
    **{_no_dq:.3f} bits per weight**. **Double quantization** stores those constants in 8 bits, with
    one fp32 constant per 256 of them: 8 / {quant_block} + 32 / ({quant_block} × 256) =
    **{_dq:.3f} bits** (QLoRA's blocks of 64 give {_paper_plain:.3f} and {_paper_dq:.3f}). On Llama-2-7B's
    linear layers that saves {format_bytes(double_quant_saving)}.
    """)})])
    return demo_weights, quant_block, quant_rows


@app.cell
def _(mm):
    gpu_names = list(mm.GPUS)  # every card memmath knows, for the GPU menu below
    return (gpu_names,)


@app.cell(hide_code=True)
def _(gpu_names, live_only_notice, mo, viz):
    # {what a learner reads: memmath's name}, every recipe and optimizer memmath knows.
    precision_dropdown = mo.ui.dropdown(options=viz.recipe_menu(), value=viz.RECIPE_NAMES["bf16"], label="Precision recipe")
    optimizer_dropdown = mo.ui.dropdown(options=viz.optimizer_menu(), value=viz.OPTIMIZER_NAMES["adamw"], label="Optimizer")
    adapter_format_radio = mo.ui.radio(options={"fp32 (peft's default)": "fp32", "same as the base weights": None},
                                       value="fp32 (peft's default)", label="LoRA adapters stored in", inline=True)
    batch_slider = mo.ui.slider(1, 64, value=4, label="Batch size (sequences)", show_value=True)
    seq_len_slider = mo.ui.slider(steps=[128, 256, 512, 1024, 2048, 4096], value=512, label="Sequence length (tokens)", show_value=True)
    checkpointing_checkbox = mo.ui.checkbox(value=False, label="gradient checkpointing")
    gpu_dropdown = mo.ui.dropdown(options=gpu_names, value="RTX 4090", label="GPU")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", label="Unit", inline=True)
    mo.vstack([mo.md("""
    ## Full, LoRA and QLoRA side by side

    The same model, rank and matrices as above, three ways, now with activations and a card.
    """), live_only_notice(),
               mo.hstack([precision_dropdown, optimizer_dropdown, gpu_dropdown, unit_radio], justify="start", gap=1.5),
               mo.hstack([batch_slider, seq_len_slider, checkpointing_checkbox], justify="start", gap=1.5),
               adapter_format_radio])
    return (adapter_format_radio, batch_slider, checkpointing_checkbox, gpu_dropdown, optimizer_dropdown,
            precision_dropdown, seq_len_slider, unit_radio)


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell below sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(live_html, mo):
    sbs_table_view, sbs_prose_view = live_html(), live_html()  # filled by the next cell on every move
    _recipe = mo.md("""
    Beyond the method, the precision recipe sets what each part is stored in, and **peft keeps LoRA
    adapters in fp32 by default**, even on a bf16 model (`autocast_adapter_dtype=True`): 4 B of weight,
    4 B of gradient and, with Adam, 8 B of states per adapter parameter.
    """)
    mo.vstack([sbs_table_view, mo.accordion({"Go deeper: where each method's bytes go, and what fp32 adapters cost":
                                             mo.vstack([_recipe, sbs_prose_view])})])
    return sbs_prose_view, sbs_table_view


@app.cell
def _(adapter_format_radio, batch_slider, checkpointing_checkbox, gpu_dropdown, mm, model_label,
      optimizer_dropdown, precision_dropdown, rank, seq_len_slider, shape, show_side_by_side, targets, unit_radio):
    # The one cell this section's controls re-run: the three runs and what a card must hold for each;
    # show_side_by_side (memmath_lessons.lora_views) sends the chart its new rows and fills the table and the text
    # (this cell shows nothing, so a move re-renders no output).
    unit, gpu, adapter_format = unit_radio.value, mm.get_gpu(gpu_dropdown.value), adapter_format_radio.value
    _run = dict(precision=precision_dropdown.value, optimizer=optimizer_dropdown.value, batch_size=batch_slider.value,
                seq_len=seq_len_slider.value, checkpointing=checkpointing_checkbox.value)
    _methods = {"Full finetuning": mm.Full(), f"LoRA r={rank}": mm.LoRA(rank=rank, targets=targets, adapter_format=adapter_format),
                f"QLoRA r={rank}": mm.QLoRA(rank=rank, targets=targets, adapter_format=adapter_format)}
    side_by_side = {name: mm.training_memory(shape, method=_m, **_run) for name, _m in _methods.items()}
    # fp32 adapters against adapters in the base's format (peft's default is fp32).
    lora_fp32 = mm.training_memory(shape, method=mm.LoRA(rank=rank, targets=targets, adapter_format="fp32"), **_run)
    lora_base = mm.training_memory(shape, method=mm.LoRA(rank=rank, targets=targets, adapter_format=None), **_run)
    # A card holds a run as the planner and `memmath train` judge it (lesson 8): what the card must hold
    # (memmath.requirement: the step's peak where memmath models it) beside the CUDA context, 5% of it kept free.
    side_by_side_needs = {name: mm.requirement(shape, method=_m, **_run) for name, _m in _methods.items()}
    side_by_side_fits = {name: mm.check_fit(n.bytes, gpu, margin=mm.FIT_MARGIN)  # the card's own CUDA context reserved
                         for name, n in side_by_side_needs.items()}
    show_side_by_side(model_label, gpu, side_by_side, side_by_side_needs, side_by_side_fits, lora_fp32, lora_base, unit,
                      setting=(shape, rank, targets, adapter_format, tuple(_run.items()), gpu))
    return gpu, lora_base, lora_fp32, side_by_side, side_by_side_fits, side_by_side_needs, unit


@app.cell
def _(TARGET_SETS, mo, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.site_charts: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md(r"""
    The chart below keeps the comparison for Llama-2-7B at this section's starting run (pure bf16,
    AdamW, 4 sequences of 512 tokens, fp32 adapters) and lets you change the rank and the matrices.
    Its inputs sit under the chart and redraw it in the browser from numbers memmath computed for
    every combination in advance, so they work in this static copy of the workbook. Each bar is the
    parts; its black tick and its label are what the card must hold, the step's peak, as in the table.
    """), site_charts.lora_methods(TARGET_SETS)]) if site_charts.is_static_export() else None
    return
@app.cell
def _(mm):
    a6000 = mm.get_gpu("RTX A6000")  # the paper's 48 GB card
    return (a6000,)


@app.cell(hide_code=True)
def _(a6000, format_bytes, literature, live_only_notice, mo, paper_setups):
    _setup, _a6000 = paper_setups.get_setup("qlora_guanaco_65b"), a6000
    q65_batch_slider = mo.ui.slider(1, 16, value=4, label="Batch size (sequences)", show_value=True)
    q65_seq_slider = mo.ui.slider(steps=[128, 256, 528, 1024, 2048], value=528, label="Sequence length (tokens)", show_value=True)
    q65_checkpointing_checkbox = mo.ui.checkbox(value=True, label="gradient checkpointing")
    q65_optimizer_dropdown = mo.ui.dropdown(options={"32-bit AdamW (paged, as in QLoRA's code)": "adamw", "8-bit AdamW": "adam8bit"},
                                            value="32-bit AdamW (paged, as in QLoRA's code)", label="Optimizer")
    _text = mo.md(f"""
    ## A 65B model on one 48 GB GPU

    QLoRA's claim: {literature.cite("qlora_65b_gpu")}. The controls start at the paper's 65B Guanaco
    run. Change the run and watch the 48 GB card (an {_a6000.name} reports {_a6000.memory_bytes // 2**20:,} MiB,
    {format_bytes(_a6000.memory_bytes)}):
    """)
    _setup_fold = mo.accordion({"Go deeper: the paper's setup, and its paged optimizer": mo.md(f"""
    The setup of its 65B Guanaco run: {_setup.description} ({_setup.source}). Its optimizer is *paged*:
    when memory runs short, optimizer states move to CPU RAM and come back when needed, which absorbs
    the spikes that long sequences cause.
    """)})
    mo.vstack([_text, _setup_fold, live_only_notice(), mo.hstack([q65_batch_slider, q65_seq_slider], justify="start", gap=1.5),
               mo.hstack([q65_optimizer_dropdown, q65_checkpointing_checkbox], justify="start", gap=1.5)])
    return q65_batch_slider, q65_checkpointing_checkbox, q65_optimizer_dropdown, q65_seq_slider


@app.cell(hide_code=True)
def _(live_chart):
    guanaco_chart = live_chart()  # drawn once (this cell reads no control); the cell below sends it new rows
    guanaco_chart
    return (guanaco_chart,)


@app.cell
def _(a6000, mm, paper_setups, q65_batch_slider, q65_checkpointing_checkbox, q65_optimizer_dropdown, q65_seq_slider,
      show_guanaco, verdict_of):
    # The one cell this section's controls re-run: the paper's run as set, what the card must hold (memmath.requirement,
    # as `memmath train` and lesson 8 judge a run) and the verdict; show_guanaco (lora_views) draws and words it.
    _run = dict(batch_size=q65_batch_slider.value, seq_len=q65_seq_slider.value, optimizer=q65_optimizer_dropdown.value)
    _setup = paper_setups.get_setup("qlora_guanaco_65b")
    guanaco = _setup.memory(checkpointing=q65_checkpointing_checkbox.value, **_run)
    guanaco_need = mm.requirement(_setup.run(checkpointing=q65_checkpointing_checkbox.value, **_run))
    guanaco_fit = mm.check_fit(guanaco_need.bytes, a6000, margin=mm.FIT_MARGIN)  # the card's own CUDA context reserved
    guanaco_verdict = verdict_of(guanaco_need, a6000)  # memmath.verdict: the CUDA reserve, 5% kept free
    # The same run without gradient checkpointing: its parts and what the card must hold.
    guanaco_no_checkpointing = _setup.memory(checkpointing=False, **_run)
    guanaco_no_checkpointing_need = mm.requirement(_setup.run(checkpointing=False, **_run))
    show_guanaco(guanaco, guanaco_need, guanaco_fit, guanaco_verdict, guanaco_no_checkpointing,
                 guanaco_no_checkpointing_need)
    return guanaco, guanaco_fit, guanaco_need, guanaco_no_checkpointing, guanaco_verdict


@app.cell(hide_code=True)
def _(a6000, bars_chart, functools, guanaco_chart, lora_views, matrix_view, number_view, sbs_prose_view,
      sbs_table_view):
    # The computing cells' words and charts, by memmath_lessons.lora_views, into this page's live charts and views.
    show_lora_number = functools.partial(lora_views.show_lora_number, number_view=number_view, matrix_view=matrix_view)
    show_side_by_side = lora_views.side_by_side_shower(bars_chart=bars_chart, sbs_table_view=sbs_table_view,
                                                       sbs_prose_view=sbs_prose_view)
    show_guanaco = functools.partial(lora_views.show_guanaco, a6000=a6000, guanaco_chart=guanaco_chart)
    return show_guanaco, show_lora_number, show_side_by_side


@app.cell
def _(mm, paper_setups):
    # The papers' headline numbers, recomputed from their setups (folded under "Go deeper" below).
    gpt3_full = paper_setups.get_setup("lora_gpt3_full").memory()  # 16-bit weights, Adam, no activations
    gpt3_lora = paper_setups.get_setup("lora_gpt3_lora").memory()  # LoRA r=4 on q and v
    llama65_full = paper_setups.get_setup("qlora_65b_full_16bit").memory()  # bf16 + 32-bit Adam states
    gpt3_weights_and_states = gpt3_full.weights + gpt3_full.optimizer_states  # 2 + 4 B/param
    gpt3_checkpoint = mm.get_format("bf16").bytes_for(gpt3_lora.trainable_params)  # the adapters alone
    return gpt3_checkpoint, gpt3_full, gpt3_lora, gpt3_weights_and_states, llama65_full


@app.cell(hide_code=True)
def _(format_bytes, gpt3_checkpoint, gpt3_full, gpt3_lora, gpt3_weights_and_states, literature, llama65_full, mo, pd,
      viz):
    # Folded under "Go deeper" below: each paper's figure beside this workbook's, and what is counted.
    _R = literature.REPORTED
    _tb = lambda n: format_bytes(n, "TB")  # noqa: E731
    _claims = pd.DataFrame([
        {"claim": "GPT-3 175B, full finetuning", "paper": f"{_R['lora_gpt3_vram_before'].value} TB",
         "this workbook": f"{_tb(gpt3_weights_and_states)} to {_tb(gpt3_full.without_activations)}",
         "what is counted": "16-bit weights + 16-bit Adam moments (6 B/param), then + 16-bit gradients (8 B/param); the paper does not itemize"},
        {"claim": "GPT-3 175B, LoRA r=4 on q, v", "paper": f"{_R['lora_gpt3_vram_after'].value} GB",
         "this workbook": format_bytes(gpt3_lora.total), "what is counted": "16-bit weights, adapters and their Adam moments"},
        {"claim": "less GPU memory", "paper": f"{_R['lora_gpu_memory_3x'].value}x",
         "this workbook": f"{gpt3_weights_and_states / gpt3_lora.total:.1f}x to {gpt3_full.without_activations / gpt3_lora.total:.1f}x",
         "what is counted": "the two counts above over the LoRA total"},
        {"claim": "fewer trainable parameters", "paper": f"{_R['lora_param_reduction'].value:,}x",
         "this workbook": f"{gpt3_full.trainable_params / gpt3_lora.trainable_params:,.0f}x",
         "what is counted": f"{gpt3_full.trainable_params:,} / {gpt3_lora.trainable_params:,}"},
        {"claim": "checkpoint per task", "paper": f"{_R['lora_checkpoint_before'].value} GB -> {_R['lora_checkpoint_after'].value} MB",
         "this workbook": f"{format_bytes(gpt3_full.weights)} -> {format_bytes(gpt3_checkpoint, 'MB')}",
         "what is counted": "16-bit model versus 16-bit adapters alone"},
        {"claim": "LLaMA 65B, regular 16-bit finetuning", "paper": f"> {_R['qlora_65b_full_16bit'].value} GB",
         "this workbook": format_bytes(llama65_full.total), "what is counted": "bf16 weights and gradients, fp32 Adam moments: 2 + 2 + 8 = 12 B/param"},
    ])
    _two_thirds = _R["lora_vram_two_thirds"]
    papers_fold = mo.vstack([mo.md("""
    Each paper reports one number from its own setup. `memmath.paper_setups` writes those setups
    down (model, method, recipe, optimizer, batch) with their sources; the table puts each reported
    figure next to what this workbook computes, and says what is counted.
    """), viz.plain_table(_claims, wrapped_columns=["claim", "what is counted"]), mo.md(f"""
    **Why 1.2 TB and not one of ours?** The LoRA paper explains its saving as not storing optimizer
    states for frozen weights, "up to 2/3" of the VRAM ({_two_thirds.source}): weights plus Adam's two
    moments, three copies of the 16-bit model, {format_bytes(gpt3_weights_and_states, "TB")}. Holding
    all 16-bit gradients at once as well gives {format_bytes(gpt3_full.without_activations, "TB")}. The
    reported 1.2 TB lies between: frameworks can free gradients as the optimizer consumes them, and
    activations and buffers come on top. A single number cannot tell which; the recipe behind it can.
    """)])
    return (papers_fold,)


@app.cell(hide_code=True)
def _(mo, recorded, viz, when_opened):
    # Folded under "Go deeper" below: QLoRA as bitsandbytes stores it, measured on the CPU by
    # validation/quantized.py (Linear4bit / Linear8bitLt in place of every linear, peft's LoRA on top).
    from memmath_lessons.reference.measured import load_measured_quantized, measured_metadata

    def _fold():  # its predicted peaks of every run: built when the learner opens the fold (memmath_lessons.static_charts)
        _cases = load_measured_quantized()
        _meta = measured_metadata()
        _peaks_within = recorded.quantized_peaks_within(_cases)  # (steps within 5%, steps), both steps of every run
        _v = _meta.get("versions_quantized_cases", _meta["versions"])
        _kinds = {("nf4", True): "NF4, double quantization", ("nf4", False): "NF4", ("fp4", True): "FP4, double quantization",
                  ("fp4", False): "FP4", ("int8", False): "8-bit base (LLM.int8)"}
        _shown = [_cases[(_cases.quant_type == q) & (_cases.double_quant == d)].iloc[0]
                  for q, d in (("nf4", True), ("fp4", False), ("int8", False))]
        _tables = []
        for _case in _shown:
            _label = (f"**{_kinds[(_case['quant_type'], bool(_case['double_quant']))]}**: the `{_case['shape']}` model in "
                      f"{_case['precision']}, LoRA r = {int(_case['lora_rank'])} on "
                      f"{'every linear' if _case['lora_targets'] == 'all' else 'q, v'}, batch {int(_case['batch_size'])} x "
                      f"{int(_case['seq_len'])} tokens")
            # Weights, constants, gradients, states, saved activations and step 2's peak: measured against memmath.
            _tables += [mo.md(_label), viz.plain_table(recorded.quantized_parts_frame(_case))]
        return mo.vstack([mo.md(f"""
        Does QLoRA really store what this lesson counts? We ran it: bitsandbytes {_v.get("bitsandbytes", "?")}'s
        4-bit (`Linear4bit`, NF4 and FP4, with and without double quantization) and 8-bit (`Linear8bitLt`)
        layers in place of every linear of small LLaMA, GPT-2 and BERT models, peft {_v.get("peft", "?")}'s LoRA
        on top, two training steps each on the CPU (torch {_v.get("torch", "?")}), {len(_cases)} runs in all. memmath's
        prediction uses QLoRA as bitsandbytes lays it out, which also counts the code maps bitsandbytes keeps
        with each matrix (64 B, and 1,028 B more with double quantization); the paper's count, this lesson's
        default, leaves those few bytes out.

        In every one of the {len(_cases)} runs the weights, constants, gradients, optimizer states and saved
        activations (for the 8-bit base, with the inputs its matmul keeps itself) equal memmath's count to the byte (`tests/test_fidelity.py` checks each run; `python -m
        validation.report` prints the table). The peak of a step is within 5% in {_peaks_within[0]} of the {_peaks_within[1]} steps. Three of them:
        """), *_tables])

    qlora_measured_fold = when_opened(_fold)
    return (qlora_measured_fold,)


@app.cell(hide_code=True)
def _(mo, papers_fold, qlora_constant_bits, qlora_measured_fold, viz):
    _plain, _dq = qlora_constant_bits[False], qlora_constant_bits[True]
    # "Go deeper": one fold per question a careful reader asks.
    _deeper = {"Do the papers' headline numbers follow from their setups?": papers_fold,
               "Does bitsandbytes store what QLoRA's count says? (measured)": qlora_measured_fold}
    mo.vstack([mo.callout(mo.md(f"""
    **Takeaways**

    - LoRA trains B·A beside chosen matrices: r × (d_in + d_out) parameters per matrix.
    - Merged into W, the update adds no inference latency: the merged weight gives the same output.
    - QLoRA stores the frozen base in NF4: 4 bits per weight plus {_plain:.3f} bits of constants, or
      {_dq:.3f} with double quantization. Gradients and optimizer states exist only for the adapters.
    - Next: {viz.lesson_link("07_inference")}, the other half of the memory math.
    """), kind="success"), mo.md("## Go deeper"), mo.accordion(_deeper)])
    return


@app.cell
def _(llama2_7b, mm, verdict_of):
    # Problem 1: LoRA r = 16 on all seven linear matrices of Llama-2-7B. Problem 2 takes QLoRA's bits (above) to
    # LLaMA-65B's parameters.
    problem_all_linear = mm.LoRA(rank=16, targets="all").trainable_params(llama2_7b)
    llama65_params = mm.PRESETS["llama-65b"].n_params
    # Problem 3: activations as transformers saves them (LLaMA's config: SDPA, no dropout), checkpointed per block.
    _args = dict(precision="bf16", optimizer="adamw", batch_size=1, seq_len=512, checkpointing=True)
    problem_lora = mm.training_memory("llama-2-13b", method=mm.LoRA(rank=8, targets=("q", "v")), **_args)
    problem_qlora = mm.training_memory("llama-2-13b", method=mm.QLoRA(rank=8, targets=("q", "v")), **_args)
    rtx4090 = mm.get_gpu("RTX 4090")
    llama13_vocab = mm.PRESETS["llama-2-13b"].vocab_size
    # Judged as every lesson judges a run (memmath.verdict): what the card must hold, the CUDA context, 5% kept free.
    problem_needs = [mm.requirement("llama-2-13b", method=_m, **_args)
                     for _m in (mm.LoRA(rank=8, targets=("q", "v")), mm.QLoRA(rank=8, targets=("q", "v")))]
    problem_verdicts = [verdict_of(_n, rtx4090) for _n in problem_needs]
    # Problem 4 sets activations aside: seq_len=None.
    _adapters = dict(seq_len=None, precision="bf16", optimizer="adamw")
    problem_fp32 = mm.training_memory("llama-2-7b", method=mm.LoRA(rank=64, targets="all", adapter_format="fp32"), **_adapters)
    problem_bf16 = mm.training_memory("llama-2-7b", method=mm.LoRA(rank=64, targets="all", adapter_format=None), **_adapters)
    return (llama13_vocab, llama65_params, problem_all_linear, problem_bf16, problem_fp32, problem_lora, problem_needs,
            problem_qlora, problem_verdicts, rtx4090)


@app.cell(hide_code=True)
def _(format_bytes, llama13_vocab, llama65_params, mo, problem_all_linear, problem_bf16, problem_fp32, problem_lora,
      problem_needs, problem_verdicts, qlora_constant_bits, requirement_view, rtx4090):
    _all, _65b, _gpu = problem_all_linear, llama65_params, rtx4090
    _plain, _dq = qlora_constant_bits[False], qlora_constant_bits[True]
    mo.vstack([
        mo.md("## Problems"),
        mo.accordion({"Four problems: LoRA's count by hand, QLoRA's bits, a 13B model on a 24 GB card, fp32 adapters": mo.vstack([
            mo.md("""**1.** Llama-2-7B: q, k, v, o are 4,096 × 4,096; gate and up 4,096 → 11,008; down
            11,008 → 4,096. How many parameters does LoRA with r = 16 on all seven matrices train over 32 blocks?"""),
            mo.accordion({"Answer": mo.md(f"""16 × (4 × (4,096 + 4,096) + 3 × (4,096 + 11,008)) =
            16 × (32,768 + 45,312) = {16 * (32768 + 45312):,} per block; × 32 = **{_all:,}**,
            the count memmath's LoRA gives for r = 16 on every linear layer.""")}),
            mo.md("""**2.** Derive QLoRA's 0.5 and 0.127 bits per parameter. About how many GB does double
            quantization save on a 65B model?"""),
            mo.accordion({"Answer": mo.md(f"""32 / 64 = **{_plain:.3f}** bits with one fp32 constant per 64
            weights; 8 / 64 + 32 / (64 × 256) = **{_dq:.4f}** bits with 8-bit constants and one fp32 constant per
            256 blocks. On {_65b:,} parameters: ({_plain:.3f} − {_dq:.4f}) / 8 bytes each ≈
            **{format_bytes(_65b * (_plain - _dq) / 8)}** (a little less: embeddings and the head stay unquantized).""")}),
            mo.md("""**3.** Can you finetune Llama-2-13B on an RTX 4090 (24 GB) with LoRA r = 8 on q, v,
            pure bf16, AdamW, batch 1 × 512 tokens, checkpointing on? And with QLoRA?"""),
            mo.accordion({"Answer": mo.md(f"""LoRA: the card must hold {format_bytes(problem_needs[0].bytes)}
            ({requirement_view.requirement_words(problem_needs[0])}; the parts add to {format_bytes(problem_lora.total)}).
            On the card's {format_bytes(_gpu.memory_bytes)} less {_gpu.cuda_context_bytes // 2**20:,} MiB for its CUDA context
            ({format_bytes(_gpu.memory_bytes - _gpu.cuda_context_bytes)} usable) it **{problem_verdicts[0].sentence()}**:
            the 16-bit weights alone are {format_bytes(problem_lora.weights)}.
            QLoRA: the card must hold {format_bytes(problem_needs[1].bytes)}, and it
            **{problem_verdicts[1].sentence()}**. Both keep
            {format_bytes(problem_lora.activations)} of activations: with checkpointing each block keeps only its
            input, one block at a time is recomputed, and the loss's fp32 log-softmax over the
            {llama13_vocab:,}-token vocabulary comes on top.""")}),
            mo.md("""**4.** peft keeps LoRA adapters in fp32 by default. For Llama-2-7B with r = 64 on all
            linear layers and AdamW, how much memory does that cost compared with bf16 adapters (activations aside)?"""),
            mo.accordion({"Answer": mo.md(f"""{problem_fp32.trainable_params:,} adapter parameters at 4 + 4 + 8 = 16 B
            (fp32 weight, gradient, two moments) instead of 2 + 2 + 4 = 8 B: **{format_bytes(problem_fp32.total - problem_bf16.total)}**
            more ({format_bytes(problem_fp32.total)} against {format_bytes(problem_bf16.total)}).""")}),
        ])}),
    ])
    return


if __name__ == "__main__":
    app.run()
