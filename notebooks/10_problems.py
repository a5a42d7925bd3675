# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "10. Problems that chain the lessons"
# description = "Plan real runs with every lesson at once: Llama-3-8B over 8 GPUs with ZeRO, QLoRA of a mixture of experts, serving Gemma 2 9B; then measure a tiny model yourself."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Problems that chain the lessons", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    # Problems that chain the lessons

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** A real plan never asks one lesson's question. Whether a finetune fits on the cards you
    have depends on the number format ({viz.lesson_link("01_weights_and_formats", "lesson 1")}), the
    recipe and optimizer ({viz.lesson_link("02_full_finetuning", "lesson 2")}), the activations
    ({viz.lesson_link("03_activations", "lesson 3")}), the method ({viz.lesson_link("06_lora_qlora", "lesson 6")})
    and how the cards share the work ({viz.lesson_link("08_planner", "lesson 8")}); serving adds the KV cache
    ({viz.lesson_link("07_inference", "lesson 7")}). Each problem below needs several of them at once.

    Work each one out before you open its answer: every answer is computed with `memmath` (the same call
    that `memmath train` or `memmath infer` makes for the run, named under it), and its test derives the
    numbers again by hand. The last section measures a tiny model on your own computer.
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons import measure_yourself, viz
    from memmath_lessons.live_chart import bound_live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons.static_charts import Slider, bound_chart, is_static_export, live_only_notice

    return (Slider, alt, bound_chart, bound_live_chart, format_bytes, is_static_export, live_html,
            live_only_notice, measure_yourself, mm, mo, pd, viz)


@app.cell
def _(live_only_notice, mo):
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit of the answers")
    mo.vstack([live_only_notice(), unit_radio])
    return (unit_radio,)


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Problem 1: full finetuning of Llama-3-8B on 8 × A100 80GB (lessons 2, 3 and 8)

    You finetune every weight of Llama-3-8B in pure bf16 with AdamW on sequences of **4,096 tokens**,
    **2 sequences per GPU** per step, on one node of **8 A100 80GB**.

    - (a) Plain data parallel, without ZeRO: does the step fit?
    - (b) With ZeRO-3: what does each GPU hold, part by part, and does it fit?
    - (c) With ZeRO-3, how many sequences per GPU fit at most?
    - (d) On 8 **A100 40GB** at 1 sequence per GPU, what is the lowest ZeRO stage that fits, and how many
      A100 40GB would ZeRO-3 need at the least?

    The chart draws the run for every ZeRO stage; the slider sets the sequences per GPU.
    """)
    return


@app.cell
def _(mm):
    # Problem 1's runs: memmath.Run's defaults (pure bf16, AdamW, SDPA, no dropout, no checkpointing) but for these.
    P1_SEQ, P1_GPUS, P1_CARD, P1_SMALL_CARD = 4096, 8, "A100 80GB", "A100 40GB"

    def p1_run(batch_size, zero_stage, n_gpus=P1_GPUS):
        return mm.Run("llama-3-8b", seq_len=P1_SEQ, batch_size=batch_size, n_gpus=n_gpus, zero_stage=zero_stage)

    p1_plans = {z: mm.plan_training(p1_run(2, z), P1_CARD) for z in range(4)}  # (a), (b): memmath train --gpus 8
    p1_largest_batch = mm.planner.largest_batch_that_fits(p1_run(2, 3), P1_CARD)  # (c)
    p1_small = {z: mm.plan_training(p1_run(1, z), P1_SMALL_CARD) for z in range(4)}  # (d)
    p1_lowest_stage = min((z for z, plan in p1_small.items() if plan.fits), default=None)
    p1_fewest = mm.planner.fewest_gpus_that_fit(p1_run(1, 3, n_gpus=1), P1_SMALL_CARD)
    p1_one_more = mm.plan_training(p1_run(p1_largest_batch + 1, 3), P1_CARD)  # (c): one sequence past the largest
    fit_margin = mm.FIT_MARGIN  # the share of the requirement the planner keeps free
    return (P1_CARD, P1_GPUS, P1_SEQ, P1_SMALL_CARD, fit_margin, p1_fewest, p1_largest_batch, p1_lowest_stage,
            p1_one_more, p1_plans, p1_run, p1_small)


@app.cell
def _(format_bytes, mm, P1_CARD, p1_run, pd, viz):
    # The chart's rows: each ZeRO stage's parts per GPU and what the card must hold, at 1 to 3 sequences per GPU.
    _rows = []
    for _b in (1, 2, 3):
        for _z in range(4):
            _plan = mm.plan_training(p1_run(_b, _z), P1_CARD)
            _stage = f"ZeRO {_z}" if _z else "no ZeRO"
            for _order, (_part, _bytes) in enumerate(_plan.memory.parts().items()):
                if _bytes:
                    _rows.append({"b": _b, "stage": _stage, "kind": "part", "label": viz.ALL_LABELS[_part],
                                  "order": _order, "GB": round(_bytes / 1e9, 2), "at": 0.0, "text": ""})
            _need = _plan.requirement.bytes
            _rows.append({"b": _b, "stage": _stage, "kind": "need", "label": _plan.requirement.basis, "order": 9,
                          "GB": round(_need / 1e9, 2), "at": round(max(_need, _plan.memory.total) / 1e9, 2),
                          "text": f"needs {format_bytes(_need)} = {format_bytes(_need, 'GiB')} "
                                  f"({_plan.requirement.basis}): {'fits' if _plan.fits else 'does not fit'}"})
        _rows.append({"b": _b, "stage": "no ZeRO", "kind": "card", "label": P1_CARD, "order": 10,
                      "GB": round(mm.GPUS[P1_CARD].memory_bytes / 1e9, 2), "at": 0.0, "text": P1_CARD})
    p1_grid = pd.DataFrame(_rows)
    return (p1_grid,)


@app.cell
def _(live_only_notice, mo):
    p1_batch_slider = mo.ui.slider(start=1, stop=3, step=1, value=2, show_value=True, label="Sequences per GPU (b)")
    mo.vstack([live_only_notice(), p1_batch_slider])
    return (p1_batch_slider,)


@app.cell
def _(P1_CARD, Slider, alt, bound_chart, bound_live_chart, is_static_export, mo, p1_grid, viz):
    _stages = ["no ZeRO", "ZeRO 1", "ZeRO 2", "ZeRO 3"]
    _parts = ["weights", "gradients", "optimizer_states", "activations"]

    def _draw(base):
        _y = alt.Y("stage:N", title=None, sort=_stages)
        _bars = base.transform_filter("datum.kind == 'part'").mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory per GPU (GB)", axis=alt.Axis(**viz.MEMORY_AXIS),
                    scale=alt.Scale(domain=[0, 1.75 * float(p1_grid["at"].max())])),
            y=_y, color=alt.Color("label:N", title="Part", scale=viz.part_scale(_parts)), order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("label:N"), alt.Tooltip("GB:Q", format=",.2f")])
        _need = base.transform_filter("datum.kind == 'need'")
        _ticks = _need.mark_tick(color="black", thickness=3, size=26).encode(x=alt.X("GB:Q"), y=_y)
        # Each label right of its bar or its tick, whichever ends later (the peak can be below the parts' sum).
        _labels = _need.mark_text(align="left", dx=6, fontSize=11).encode(x=alt.X("at:Q"), y=_y, text=alt.Text("text:N"))
        _card = base.transform_filter("datum.kind == 'card'").mark_rule(color="black", strokeDash=[6, 4]).encode(
            x=alt.X("GB:Q"), tooltip=[alt.Tooltip("text:N"), alt.Tooltip("GB:Q", format=",.2f")])
        return alt.layer(_bars, _ticks, _labels, _card).properties(width=560, height=170)

    _title = f"Llama-3-8B, 4,096 tokens, pure bf16 AdamW, 8 × {P1_CARD} (dashed: the card; tick: what it must hold)"
    p1_chart = None if is_static_export() else bound_live_chart(_draw, title=_title)
    _about = ("The chart's own slider keeps working in this static copy: each position's numbers were computed "
              "in advance.")
    (p1_chart if p1_chart is not None else mo.vstack([mo.md(_about), viz.chart_output(bound_chart(
        p1_grid, [Slider("b", "Sequences per GPU (b)", value=2)], _draw, title=_title))]))
    return (p1_chart,)


@app.cell(hide_code=True)
def _(p1_batch_slider, p1_chart, p1_grid):
    # The one cell the slider re-runs: the chart's rows for its value.
    if p1_chart is not None:
        p1_chart.update(p1_grid[p1_grid["b"] == p1_batch_slider.value],
                        caption=f"Sequences per GPU (b): {p1_batch_slider.value}")
    return


@app.cell(hide_code=True)
def _(fit_margin, format_bytes, mo, P1_CARD, p1_fewest, P1_GPUS, p1_largest_batch, p1_lowest_stage,
      p1_one_more, p1_plans, P1_SEQ, p1_small, P1_SMALL_CARD, unit_radio):
    _u = unit_radio.value
    _f = lambda n: format_bytes(n, _u)  # noqa: E731
    _none, _z3 = p1_plans[0], p1_plans[3]
    _m = _z3.memory
    _pm = _none.memory
    _more = p1_one_more

    def _verdict(plan):
        if plan.fits:
            return f"fits, with {_f(plan.fit.headroom_bytes)} to spare"
        _short = (f"more than the card's {_f(plan.gpu.memory_bytes)}" if plan.needed_bytes > plan.gpu.memory_bytes else
                  f"which leaves less than the {fit_margin:.0%} of it the planner keeps free")
        return f"does not fit: with the CUDA context reserved it needs {_f(plan.needed_bytes)}, {_short}"

    _stages = ", ".join(f"stage {z}: {_f(p.requirement.bytes)} ({'fits' if p.fits else 'no'})" for z, p in p1_small.items())
    _answer = mo.md(f"""
    **(a) No.** Without ZeRO every GPU holds a full copy: {_f(_pm.weights)} of bf16 weights, {_f(_pm.gradients)} of
    gradients and {_f(_pm.optimizer_states)} of Adam's two moments (2 + 2 + 4 B per parameter, lesson 2), and
    {_f(_pm.activations)} of activations for 2 × {P1_SEQ:,} tokens (lesson 3). Not all of it is alive at once: the
    card must hold the step's peak, **{_f(_none.requirement.bytes)}** ({_none.requirement.basis}, lesson 8). On an
    {P1_CARD} ({_f(_none.gpu.memory_bytes)}) the run {_verdict(_none)}.

    **(b)** ZeRO-3 divides weights, gradients and optimizer states by the {P1_GPUS} GPUs (Rajbhandari et al. 2020);
    the activations stay whole, since each GPU runs its own sequences. Per GPU: weights {_f(_m.weights)}, gradients
    {_f(_m.gradients)}, optimizer states {_f(_m.optimizer_states)}, activations {_f(_m.activations)}, in all
    {_f(_m.total)}. memmath has no peak model for a sharded step, and that sum leaves out what the step makes and
    frees (the optimizer's temporaries, the gathered layers), so the card is judged on a safe upper bound of its
    peak ({_z3.requirement.basis}, lesson 8): **{_f(_z3.requirement.bytes)}**; the run {_verdict(_z3)}. The activations are {_m.activations / _z3.requirement.bytes:.0%} of it now: sharding took care
    of the rest.

    **(c) {p1_largest_batch} sequences per GPU** ({p1_largest_batch * P1_GPUS} per step): at {p1_largest_batch + 1}
    the activations alone are {_f(_more.memory.activations)} per GPU, and the run {_verdict(_more)} (activations grow
    with b, lesson 3).

    **(d)** On {P1_GPUS} × {P1_SMALL_CARD} at 1 sequence per GPU: {_stages}. {"The lowest stage that fits is **"
    + str(p1_lowest_stage) + "**" if p1_lowest_stage is not None else "**No stage fits** on a safe upper bound of its peak"}.
    ZeRO-3 needs at least **{p1_fewest} {P1_SMALL_CARD}**: the sharded parts shrink with every card, the
    {_f(p1_small[3].memory.activations)} of activations per GPU and the loss's working memory never do.

    `memmath train llama-3-8b --seq {P1_SEQ} --batch 2 --gpus {P1_GPUS} --zero-stage 3 --gpu "{P1_CARD}"`
    gives (b); {_z3.memory.assumptions}
    """)
    mo.accordion({"Answer": _answer})
    return


@app.cell(hide_code=True)
def _(mo, p2_model):
    _moe = p2_model
    mo.md(rf"""
    ## Problem 2: QLoRA of a mixture of experts on two cards at 8,192 tokens (lessons 1, 6, 7 and 8)

    Qwen3-30B-A3B is a mixture of experts: {_moe.n_experts} expert MLPs in each of its {_moe.n_layers} blocks,
    {_moe.experts_per_tok} of which run for each token. You
    train it with QLoRA (NF4 base with double quantization, LoRA rank 8 on q and v), one sequence of
    **8,192 tokens** per GPU, gradient checkpointing on.

    - (a) How many parameters does a token use, how many are stored, and how many bytes do the weights take?
    - (b) Does it fit on **two RTX 4090** with ZeRO-3?
    - (c) How many RTX 4090 would ZeRO-3 need?
    - (d) Does it fit on **two A100 80GB** without ZeRO, each training its own sequence?
    """)
    return


@app.cell
def _(mm):
    # Problem 2's runs (memmath.QLoRA's defaults: NF4, double quantization, rank 8 on q, v, fp32 adapters).
    P2_SEQ = 8192
    p2_model = mm.PRESETS["qwen3-30b-a3b"]

    def p2_run(n_gpus, zero_stage):
        return mm.Run("qwen3-30b-a3b", method=mm.QLoRA(), seq_len=P2_SEQ, checkpointing=True, n_gpus=n_gpus,
                      zero_stage=zero_stage)

    p2_single = mm.training_memory(p2_run(1, 0))  # (a): what one copy of the run holds
    p2_4090 = mm.plan_training(p2_run(2, 3), "RTX 4090")  # (b)
    p2_fewest = mm.planner.fewest_gpus_that_fit(p2_run(1, 3), "RTX 4090")  # (c)
    p2_a100 = mm.plan_training(p2_run(2, 0), "A100 80GB")  # (d)
    p2_nf4_everywhere = round(p2_model.n_params * mm.methods.bits_per_weight("nf4") / 8)  # (a): lesson 6's 4.127 bits
    return P2_SEQ, p2_4090, p2_a100, p2_fewest, p2_model, p2_nf4_everywhere, p2_run, p2_single


@app.cell(hide_code=True)
def _(format_bytes, mo, p2_4090, p2_a100, p2_fewest, p2_model, p2_nf4_everywhere, P2_SEQ, p2_single,
      unit_radio, viz):
    _u = unit_radio.value
    _f = lambda n: format_bytes(n, _u)  # noqa: E731
    _small = lambda n: viz.readable_size(n, _u)  # noqa: E731: MB rather than 0.01 GB
    _m = p2_single
    _experts = p2_model.n_layers * p2_model.n_experts * 3 * p2_model.hidden_size * p2_model.expert_intermediate_size
    _answer = mo.md(f"""
    **(a)** {p2_model.active_params:,} parameters are active per token (the embeddings and the head, the attention, the
    router and {p2_model.experts_per_tok} of the {p2_model.n_experts} experts) out of **{p2_model.n_params:,}** stored. All of them must be on
    the card. And most stay in bf16: bitsandbytes replaces only `nn.Linear` layers
    (transformers' `integrations/bitsandbytes.py`), while transformers 5 stores each block's experts as two 3-D
    tensors ({_experts:,} parameters in all), so QLoRA quantizes only the attention's q, k, v and o. The weights
    take **{_f(_m.weights)}** (adapters included) plus {_small(_m.quantization_constants)} of constants, against the
    {_f(p2_nf4_everywhere)} that NF4 everywhere would give (lesson 6's 4.127
    bits per weight). The trainable part is tiny: {_m.trainable_params:,} adapter parameters, {_small(_m.gradients)} of
    gradients and {_small(_m.optimizer_states)} of fp32 Adam states.

    **(b) No.** ZeRO-3 over 2 halves the weights, but {_f(p2_4090.memory.weights)} per GPU is already more than an
    RTX 4090's {_f(p2_4090.gpu.memory_bytes)}: the card must hold {_f(p2_4090.requirement.bytes)}.

    **(c) {p2_fewest} RTX 4090.** Each then holds 1/{p2_fewest} of the weights and its own
    {_f(_m.activations)} of activations (checkpointed block inputs, the fp32 log-softmax over
    {p2_model.vocab_size:,} tokens, one recomputed block: lesson 3), judged on a safe upper bound of the sharded
    step's peak (lesson 8), which memmath does not model.

    **(d) {"Yes" if p2_a100.fits else "No"}.** Without ZeRO each card holds everything; the peak comes at the loss, where
    the backward pass holds two fp32 gradients over the vocabulary beside the saved activations:
    **{_f(p2_a100.requirement.bytes)}** ({p2_a100.requirement.basis}), and the run
    {"fits with " + _f(p2_a100.fit.headroom_bytes) + " to spare" if p2_a100.fits else "does not fit"} on an A100 80GB.

    `memmath train qwen3-30b-a3b --method qlora --seq {P2_SEQ} --checkpointing --gpus 2 --gpu "A100 80GB"` gives
    (d); {p2_a100.memory.assumptions}
    """)
    mo.accordion({"Answer": _answer})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Problem 3: serve Gemma 2 9B to four users at 8,192 tokens on one RTX 4090 (lessons 1, 3 and 7)

    Four conversations of **8,192 tokens** each (prompt and answer) at once, bf16 KV cache, fused attention.

    - (a) How large is the KV cache? Gemma 2 alternates full-attention layers with sliding-window ones.
    - (b) Do bf16 weights fit?
    - (c) Which weight format fits, and with how much to spare?
    - (d) At most how many tokens per second can each conversation decode in NF4?
    - (e) What if the prefill ran transformers' eager attention, as Gemma 2's softcapped attention does in
      training?
    """)
    return


@app.cell
def _(mm):
    # Problem 3's serving runs: memmath infer gemma-2-9b --context 8192 --batch 4 --weights FORMAT --gpu "RTX 4090".
    P3_CONTEXT, P3_BATCH, P3_CARD = 8192, 4, "RTX 4090"
    p3_model = mm.PRESETS["gemma-2-9b"]
    p3_plans = {fmt: mm.plan_serving("gemma-2-9b", P3_CARD, weights_format=fmt, context_len=P3_CONTEXT,
                                     batch_size=P3_BATCH) for fmt in ("bf16", "int8", "nf4")}
    _full = p3_model.with_changes(layer_types=("full_attention",) * p3_model.n_layers, sliding_window=None)
    p3_kv_without_window = mm.kv_cache_bytes(_full, context_len=P3_CONTEXT, batch_size=P3_BATCH)
    p3_eager = mm.inference_memory("gemma-2-9b", weights_format="nf4", context_len=P3_CONTEXT, batch_size=P3_BATCH,
                                   attention="eager")
    return P3_BATCH, P3_CARD, P3_CONTEXT, p3_eager, p3_kv_without_window, p3_model, p3_plans


@app.cell(hide_code=True)
def _(format_bytes, mo, P3_BATCH, P3_CARD, P3_CONTEXT, p3_eager, p3_kv_without_window, p3_model, p3_plans,
      unit_radio):
    _u = unit_radio.value
    _f = lambda n: format_bytes(n, _u)  # noqa: E731
    _m = p3_model
    _sliding = sum(1 for kind in _m.layer_types if kind == "sliding_attention")
    _bf16, _nf4 = p3_plans["bf16"], p3_plans["nf4"]
    _card = _bf16.gpu
    _fitting = [fmt for fmt, plan in p3_plans.items() if plan.fit.fits]

    def _line(fmt):
        _p = p3_plans[fmt]
        return (f"{fmt}: weights {_f(_p.memory.weights + _p.memory.quantization_constants)} + KV cache "
                f"{_f(_p.memory.kv_cache)} + prefill working set {_f(_p.memory.working_set)} = {_f(_p.memory.total)}, "
                + (f"fits with {_f(_p.fit.headroom_bytes)} to spare" if _p.fit.fits else
                   f"short by {_f(-_p.fit.headroom_bytes)}"))

    _answer = mo.md(f"""
    **(a)** A token costs 2 × kv_heads × head_dim × e = 2 × {_m.n_kv_heads} × {_m.head_dim} × 2 B =
    {2 * _m.n_kv_heads * _m.head_dim * 2:,} B in each layer that keeps it. The {_m.n_layers - _sliding} full layers keep
    all {P3_CONTEXT:,} tokens, the {_sliding} sliding ones only their window of {_m.sliding_window:,}, so the cache
    for {P3_BATCH} conversations is **{_f(_bf16.memory.kv_cache)}**, not the {_f(p3_kv_without_window)} that
    every layer at full length would take (lesson 7).

    **(b) No.** {_line("bf16")}; the {P3_CARD} has {_f(_bf16.fit.available_bytes)} once the CUDA context is
    reserved.

    **(c) {", ".join(_fitting) if _fitting else "None"}.** {_line("int8")}; {_line("nf4")}.

    **(d) {_nf4.decode_tokens_per_second:.0f} tokens per second.** Each decode step reads every weight once and
    each conversation's cache: {_f(_nf4.memory.weights_read)} + {_f(_nf4.memory.kv_cache)} per step at
    {_card.bandwidth_bytes_per_s / 1e9:,.0f} GB/s (lesson 7's bound; the four conversations share the weights' read).

    **(e)** Eager attention keeps the s × s scores of every head (lesson 3): the prefill's working set grows to
    {_f(p3_eager.working_set)} and the total to **{_f(p3_eager.total)}**, far past the card, whatever the format.
    Serve it with an engine whose fused attention handles the softcapping.
    """)
    mo.accordion({"Answer": _answer})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Measure it yourself

    Every number above is a prediction. memmath's predictions are checked against PyTorch, and the tool that does
    it ships with memmath: `memmath measure CONFIG` builds a model from its config.json with random weights, runs
    two training steps on your machine (its GPU when PyTorch sees one, else its CPU) and prints each part beside
    memmath's prediction. Here you can run it on a small GPT-2, LLaMA or Qwen3 of a few hundred thousand
    parameters. Pick the run; memmath's prediction shows at once, and the measurement runs only when you press the
    button (it needs torch: without it the table says how to install it, `pip install "memmath[torch]"`).
    """)
    return


@app.cell
def _(live_html, live_only_notice, measure_yourself, mo):
    _low, _high = measure_yourself.BATCH_RANGE
    measure_batch_slider = mo.ui.slider(start=_low, stop=_high, step=1, value=2, show_value=True,
                                        label="Batch (sequences)")
    _low, _high = measure_yourself.SEQ_RANGE
    measure_seq_slider = mo.ui.slider(start=_low, stop=_high, step=16, value=64, show_value=True,
                                      label="Sequence length (tokens)")
    measure_precision_radio = mo.ui.radio(options=list(measure_yourself.PRECISIONS), value="bf16", inline=True,
                                          label="Precision")
    measure_checkpointing_checkbox = mo.ui.checkbox(value=False, label="Gradient checkpointing")
    measure_model_radio = mo.ui.radio(options={label: key for key, label in measure_yourself.MODEL_LABELS.items()},
                                      value=measure_yourself.MODEL_LABELS[measure_yourself.DEFAULT_MODEL],
                                      label="Model")
    measure_button = mo.ui.run_button(kind="success", label="Measure two steps on this machine")
    measure_view = live_html()
    # Shown open, not in a fold: a static page can only fade the frozen controls it has drawn.
    mo.vstack([live_only_notice(),
               measure_model_radio,
               mo.hstack([measure_batch_slider, measure_seq_slider], justify="start", gap=2),
               mo.hstack([measure_precision_radio, measure_checkpointing_checkbox, measure_button], justify="start",
                         gap=2),
               measure_view])
    return (measure_batch_slider, measure_button, measure_checkpointing_checkbox, measure_model_radio,
            measure_precision_radio, measure_seq_slider, measure_view)


@app.cell
def _(measure_batch_slider, measure_button, measure_checkpointing_checkbox, measure_model_radio, measure_precision_radio,
      measure_seq_slider, measure_view, measure_yourself, mo, viz):
    # memmath's prediction at once; the measurement (torch, a few seconds) only when the button is pressed.
    measure_setup = measure_yourself.Setup(batch_size=measure_batch_slider.value, seq_len=measure_seq_slider.value,
                                           precision=measure_precision_radio.value,
                                           checkpointing=measure_checkpointing_checkbox.value,
                                           model=measure_model_radio.value)
    measure_result = measure_yourself.measure(measure_setup) if measure_button.value else None
    # The prediction for the device measured (a GPU's CUDA context is not in it: only what the step allocates).
    measure_prediction = (measure_result.predicted if measure_result is not None and measure_result.predicted
                          else measure_yourself.predicted(measure_setup))
    if measure_result is None:
        _missing = measure_yourself.missing_packages()
        _how = (measure_yourself.install_message(_missing) if _missing else
                "Press the button to measure (a few seconds the first time, while torch loads).")
        measure_view.update(mo.Html(mo.md(_how).text + viz.plain_table(measure_yourself.comparison_frame(
            measure_prediction)).text))
    elif measure_result.measured is None:
        measure_view.update(mo.md(measure_result.message))
    else:
        measure_view.update(measure_yourself.comparison_frame(measure_prediction, measure_result.measured),
                            caption=f"Measured just now by memmath.measure on this machine's {measure_result.device} "
                                    "(the CPU with one thread), beside memmath's prediction for the same run.")
    return measure_prediction, measure_result, measure_setup


@app.cell(hide_code=True)
def _(mo):
    mo.accordion({"How is it measured, and how close must memmath be?": mo.md(r"""
    Each model is built from a small config.json (GPT-2: 3 blocks of width 64, 4 heads, a 1,000-token
    vocabulary, 230,464 parameters; the LLaMA and Qwen3 ones of the same width) with random weights, and trained
    for two steps with AdamW by `memmath.measure`, which measures as the project's recordings were measured.
    Parameters, gradients and optimizer states are counted tensor by tensor after the first step; saved
    activations through autograd's saved-tensor hooks; each step's peak from PyTorch's profiler on a CPU, from
    `torch.cuda.max_memory_allocated` on a GPU, and each phase's peak (forward, backward, the optimizer step) of
    both steps, the last six rows. The project holds memmath to the byte for the first three, to 1% for the saved
    activations and to 5% for the peaks (`tests/test_fidelity.py`). Step 1 peaks lower: Adam's
    states do not exist until its first update. The same check runs from a terminal on your own model:
    `memmath measure config.json --batch 2 --seq 512`.
    Pressing the button imports torch and transformers in this workbook's Python (a few seconds the first time); on a CPU it
    sets torch to one thread with oneDNN off while it measures, as the recording did; both are put back after.
    """)})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md(r"""
    **Takeaways**

    - Chain the parts: the format sets the weights, the recipe and optimizer what each trainable parameter
      adds, the sequence and batch the activations, the method which parameters train at all.
    - Sharding (ZeRO, FSDP) divides weights, gradients and states by the cards, never the activations:
      past a few cards the activations decide, and only a shorter step or checkpointing shrinks them.
    - Quantization only reaches the layers a library converts: a mixture of experts in transformers 5 keeps
      its experts in bf16 under QLoRA, so most of its bytes stay.
    - Serving adds the KV cache and a prefill working set; a sliding window shortens the cache and eager
      attention swells the prefill.
    """), kind="success")
    return


if __name__ == "__main__":
    app.run()
