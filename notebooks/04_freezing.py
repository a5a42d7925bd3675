# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "4. Freezing layers"
# description = "Train only the last layers: what freezing saves, what it does not, and how much of BERT-large had to train to match full finetuning."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Partial finetuning: freezing layers", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    # Partial finetuning: freezing layers

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** Instead of letting every weight move, as
    {viz.lesson_link("02_full_finetuning", "full finetuning")} does, train only some and **freeze** the rest:
    a frozen parameter keeps its value for the whole run. Picture a model of ten layers: freeze the first
    nine, train the last, and the trainable parameters fall to about **10%** of full finetuning's. The one
    control that moves it is the number of frozen layers:
    """)
    return


@app.cell
def _():
    import functools

    import marimo as mo
    import memmath as mm
    from memmath import format_bytes
    from memmath_lessons import reference
    from memmath_lessons.reference import literature
    from memmath_lessons import viz
    from memmath_lessons.static_charts import live_only_notice
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    import numpy as np
    import pandas as pd
    from memmath_lessons import freezing_views, site_charts
    return (format_bytes, freezing_views, functools, literature, live_chart, live_html, live_only_notice, mm, mo, np,
            pd, reference, site_charts, viz)


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    params_slider = mo.ui.slider(steps=[0.1, 0.35, 1, 3, 7, 13, 70], value=7, show_value=True,
                                 label="Parameters N (billions)")
    layers_slider = mo.ui.slider(1, 48, value=10, show_value=True, label="Layers L")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([live_only_notice(), mo.hstack([params_slider, layers_slider, unit_radio], justify="start", gap=2)])
    return layers_slider, params_slider, unit_radio


@app.cell
def _(mo):
    # The learner's last choice of frozen layers (the article's 9 to start): kept when L changes, so the
    # slider below is rebuilt at that value, or at L when the model has fewer layers.
    get_frozen, set_frozen = mo.state(9)
    return get_frozen, set_frozen


@app.cell(hide_code=True)
def _(get_frozen, layers_slider, live_only_notice, mo, set_frozen):
    _wanted = get_frozen()
    frozen_slider = mo.ui.slider(0, layers_slider.value, value=min(_wanted, layers_slider.value), show_value=True,
                                 label="Frozen layers f (the first ones)", on_change=set_frozen)
    _why = (mo.md(f"*Frozen layers shows {layers_slider.value}, not your {_wanted}: a model of "
                  f"{layers_slider.value} layer{'' if layers_slider.value == 1 else 's'} has no more to freeze. Add layers and it goes back to {_wanted}.*")
            if _wanted > layers_slider.value else mo.md(""))
    mo.vstack([live_only_notice(), frozen_slider, _why])
    return (frozen_slider,)


@app.cell
def _(unit_radio):
    unit = unit_radio.value  # its own cell: a slider does not redraw what only the unit changes
    return (unit,)


@app.cell
def _(mm):
    article_bpp = mm.recipes.bytes_per_parameter("bf16", "adam")  # the article's recipe: 2 + 2 + 2 x 2 B per parameter
    return (article_bpp,)


@app.cell
def _(frozen_slider, layers_slider, mm, params_slider, show_equal_layers, unit):
    # The core path's number, in the one cell these three sliders re-run: N parameters in L equal layers, the first
    # f frozen, pure bf16 with Adam, before activations.
    n_params, n_layers, n_frozen = round(params_slider.value * 10**9), layers_slider.value, frozen_slider.value
    equal_model = mm.uniform_model(n_params, n_layers, name=f"{n_layers} equal layers")
    equal_full = mm.training_memory(equal_model, seq_len=None, precision="bf16", optimizer="adam")
    equal_frozen = (equal_full if n_frozen == 0 else mm.training_memory(
        equal_model, seq_len=None, precision="bf16", optimizer="adam", method=mm.Freeze(frozen_layers=n_frozen)))
    show_equal_layers(n_params, n_layers, n_frozen, equal_full, equal_frozen, unit)
    return equal_frozen, equal_full, n_frozen, n_layers, n_params


@app.cell(hide_code=True)
def _(live_chart):
    layers_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    layers_chart
    return (layers_chart,)


@app.cell(hide_code=True)
def _(article_bpp, literature, mo):
    _bpp = article_bpp
    _reported = literature.REPORTED["bert_large_partial_share"]
    mo.callout(mo.md(f"""
    **Takeaway.** A frozen parameter needs no gradient and no optimizer state, which is most of a
    full finetune's memory ({_bpp["gradients"]:g} + {_bpp["optimizer_states"]:g} of its {_bpp["total"]:g} B per
    parameter here); the frozen weights themselves stay. It also removes work: the backward pass skips
    their weight gradients and stops at the first trainable layer. But freezing is
    **parameter-inefficient**: on BERT-large about {_reported.value:g}% of the parameters had to train to
    match full finetuning, as the end of this lesson shows.
    """), kind="success")
    return


@app.cell
def _(mo, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.site_charts: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md(r"""
    The next chart is the article's case, the 7B model in ten equal layers, computed in advance
    for every number of frozen layers. Its slider keeps working in this static copy of the
    page, where the controls above are frozen.
    """), site_charts.ten_layers_frozen()]) if site_charts.is_static_export() else None
    return
@app.cell(hide_code=True)
def _(live_only_notice, mo):
    preset_dropdown = mo.ui.dropdown(options=["gpt2", "gpt2-large", "bert-base-uncased", "bert-large-uncased",
                                              "llama-2-7b", "llama-3-8b", "mistral-7b"],
                                     value="gpt2", label="Model")
    head_switch = mo.ui.switch(value=True, label="Train the head")
    norm_switch = mo.ui.switch(value=True, label="Train the final norm")
    embeddings_switch = mo.ui.switch(value=False, label="Train the embeddings")
    mo.vstack([mo.md(r"""
    ## A real model: what else trains?

    Real models are not ten equal layers. Besides the blocks they have embeddings at the input,
    a final norm, and an output head at the top. `memmath.Freeze` follows the common recipe:

    - the **embeddings** stay frozen (switch them on below to train them too);
    - the **final norm** trains with the top blocks;
    - an untied **output head** trains. LLaMA's head is a separate vocabulary × width matrix; BERT's
      pooler counts as its head;
    - a head **tied** to the token embedding (GPT-2) is the same matrix as the embedding, so it
      stays frozen unless the embeddings train.

    So the trainable share is not k / L: the head can add a lot, and the frozen embeddings take a share away.
    """), live_only_notice(),
               mo.hstack([preset_dropdown, mo.vstack([head_switch, norm_switch, embeddings_switch])], justify="start",
                         gap=2)])
    return embeddings_switch, head_switch, norm_switch, preset_dropdown


@app.cell
def _(mo):
    # The learner's last choice of frozen blocks (None: the model's all-but-two), kept when the model changes.
    get_real_frozen, set_real_frozen = mo.state(None)
    return get_real_frozen, set_real_frozen


@app.cell
def _(get_real_frozen, live_only_notice, mm, mo, preset_dropdown, set_real_frozen):
    _layers = mm.PRESETS[preset_dropdown.value].n_layers
    _wanted = get_real_frozen()
    real_frozen_slider = mo.ui.slider(0, _layers, value=_layers - 2 if _wanted is None else min(_wanted, _layers),
                                      show_value=True, label=f"Frozen blocks (of {_layers})",
                                      on_change=set_real_frozen)
    _why = (f"*Frozen blocks shows {_layers}, not your {_wanted}: {preset_dropdown.value} has {_layers} blocks.*"
            if _wanted is not None and _wanted > _layers else "")
    batch_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64], value=4, show_value=True, label="Batch size (sequences)")
    seq_slider = mo.ui.slider(steps=[128, 256, 512, 1024, 2048, 4096, 8192], value=512, show_value=True,
                              label="Sequence length (tokens)")
    mo.vstack([live_only_notice(), mo.hstack([real_frozen_slider, mo.vstack([batch_slider, seq_slider])],
                                             justify="start", gap=2), mo.md(_why)])
    return batch_slider, real_frozen_slider, seq_slider


@app.cell
def _(embeddings_switch, head_switch, mm, norm_switch, np, preset_dropdown, real_frozen_slider, show_what_trains):
    # What trains in the chosen model: the one cell of this section that the frozen-blocks slider re-runs.
    model = mm.PRESETS[preset_dropdown.value]
    freeze = mm.Freeze(frozen_layers=real_frozen_slider.value, train_head=head_switch.value,
                       train_final_norm=norm_switch.value, train_embeddings=embeddings_switch.value)
    trainable = mm.training_memory(model, seq_len=None, method=freeze)  # parameters only: batch and length do not matter
    # Every number of frozen blocks at once: Freeze broadcasts over a numpy array.
    frozen_grid = np.arange(model.n_layers + 1)
    _sweep = mm.Freeze(frozen_layers=frozen_grid, train_head=freeze.train_head,
                       train_final_norm=freeze.train_final_norm, train_embeddings=freeze.train_embeddings)
    share_grid = mm.training_memory(model, seq_len=None, method=_sweep).trainable_fraction
    show_what_trains(model, freeze, trainable, frozen_grid, share_grid, real_frozen_slider.value)
    return freeze, frozen_grid, model, share_grid, trainable


@app.cell(hide_code=True)
def _(live_chart):
    share_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    share_chart
    return (share_chart,)


@app.cell(hide_code=True)
def _(live_html, mo):
    # Fixed prose, rendered from markdown once and shown here; the numbers under it are live htmls that the cell below
    # gives new contents on every move (marimo would re-render a re-run cell's whole output, prose included).
    section_prose = {"saves": mo.md(r"""
    ## What freezing saves, and what it does not

    Saved, for every frozen weight: its **gradient** and its **optimizer states**. Saved too: the
    **activations of the blocks before the first trainable one**. The backward pass has nothing
    to compute there, so it stops at the first trainable block and those blocks keep nothing.

    Not saved: the **frozen weights themselves**, which every forward pass still reads; the
    activations of every block from the first trainable one up; and the loss's logits.

    The activations are counted as PyTorch stores them when transformers trains the model: memmath's
    exact model of its forward pass, checked against recorded training steps further down, for pure
    bf16 training at your batch and length, with the attention and dropout that transformers trains the
    model with:
    """), "bert": mo.md(r"""
    ## How much must you open? The BERT-large report

    Freezing saves memory, but the article warns that it does not solve the problem. Partial
    finetuning is **parameter-inefficient**: quality rises only as more parameters are opened up.
    """)}
    saves_how_view, saves_table_view, saves_work_view = live_html(), live_html(), live_html()
    mo.vstack([section_prose["saves"], saves_how_view, saves_table_view,
               mo.accordion({"Go deeper: does freezing save work too?": saves_work_view})])
    return saves_how_view, saves_table_view, saves_work_view, section_prose


@app.cell
def _(batch_slider, freeze, mm, model, real_frozen_slider, seq_slider, show_saves, unit):
    # What freezing saves at the chosen batch and length: one cell for the section's numbers, shown in the live views
    # above it. Attention, dropout and the activation model are left to memmath.Run, which takes them from the model
    # as transformers trains it: SDPA, the config's dropout, and the exact (transformers) activation model.
    _kw = dict(precision="bf16", optimizer="adam", batch_size=batch_slider.value, seq_len=seq_slider.value)
    full = mm.training_memory(model, **_kw)
    frozen = mm.training_memory(model, method=freeze, **_kw)
    show_saves(model, real_frozen_slider.value, seq_slider.value, full, frozen, unit)
    return frozen, full


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell
def _(pd, reference):
    # Checked against PyTorch: every recorded (model, precision), memmath's prediction beside the measurement.
    measured_cases = reference.load_measured()  # the recording: one real training step per case (no torch needed)
    _v = reference.measured_metadata()["versions"]
    measured_versions = f"torch {_v['torch']}, transformers {_v['transformers']}"
    _models = {"GPT-2 (tied head)": "gpt2", "LLaMA (untied head)": "llama-mha", "BERT (classifier)": "bert"}

    def _case_tables(shape, precision):
        """(per-block frame, per-case rows) of the full and frozen recordings of one model and precision."""
        _c = measured_cases
        _cases = _c[(_c["shape"] == shape) & (_c["precision"] == precision)
                    & (_c["optimizer"] == "adamw") & _c["method"].isin(["full", "freeze"]) & (_c["attention"] == "sdpa")
                    & ~_c["dropout"] & ~_c["checkpointing"]]
        _blocks, _rows = [], []
        for _, _case in _cases.iterrows():
            _k = 0 if _case["method"] == "full" else int(_case["frozen_layers"])
            _predicted = reference.predict_case(_case)
            _per_block = reference.predicted_saved_per_layer(_case)  # memmath, block by block
            for _i, (_measured, _memmath) in enumerate(zip(_case["saved_per_layer"], _per_block)):
                _blocks += [{"frozen": f"{_k} frozen", "block": f"block {_i + 1}", "source": _source, "KB": _n / 1000,
                             "bytes": int(_n)} for _source, _n in (("measured", _measured), ("memmath", _memmath))]
            _rows.append({"frozen blocks": _k, "trainable parameters": int(_case["trainable_params"]),
                          "gradients, measured (B)": int(_case["grad_bytes"]),
                          "gradients, memmath (B)": int(_predicted.gradients),
                          "saved, measured (B)": int(_case["saved_bytes"]),
                          "saved, memmath (B)": int(_predicted.activation_detail.saved_by_forward)})
        return pd.DataFrame(_blocks), pd.DataFrame(_rows).sort_values("frozen blocks").reset_index(drop=True)

    freeze_tables = {}  # (label, shape, precision) -> (per-block frame, per-case rows)
    for _label, _shape in _models.items():
        for _precision in ("fp32", "bf16"):
            freeze_tables[_label, _shape, _precision] = _case_tables(_shape, _precision)
    freeze_blocks, freeze_rows = freeze_tables["GPT-2 (tied head)", "gpt2", "fp32"]  # the first tab's, held by the tests
    return freeze_blocks, freeze_rows, freeze_tables, measured_cases, measured_versions


@app.cell(hide_code=True)
def _(freeze_tables, freezing_views, measured_cases, measured_versions, mo):
    # Folded: every recorded (model, precision) in a tab of its own (memmath_lessons.freezing_views).
    _tabs = {f"{_label.split(' (')[0]}, {_precision}": freezing_views.recorded_case_view(_shape, _b, _r, measured_cases)
             for (_label, _shape, _precision), (_b, _r) in freeze_tables.items()}
    mo.accordion({"Do frozen blocks really keep nothing? Checked against PyTorch": mo.vstack([mo.md(f"""
    The claim above, that blocks before the first trainable one keep no activations, can be
    measured. The workbook's `validation/measure.py` froze the embeddings and the first k blocks of
    small models, ran one real training step and recorded, block by block, what autograd saved for
    backward, and the gradients that appeared (README, section "Fidelity"). It ran **on the CPU
    with tiny models** (3 blocks, width 64, a batch of 2 sequences of 64 tokens, fused attention,
    AdamW; {measured_versions}): GPT-2 has a tied head, LLaMA an untied one, BERT a classifier.
    Pick a model and a precision:
    """), mo.ui.tabs(_tabs)])})
    return


@app.cell(hide_code=True)
def _(live_html, mo, section_prose):
    bert_view = live_html()  # the report's numbers, filled by the BERT cell below on every move
    mo.vstack([section_prose["bert"], bert_view])
    return (bert_view,)


@app.cell(hide_code=True)
def _(article_bpp, bars_chart, bert_chart, bert_view, freezing_views, functools, layers_chart, saves_how_view,
      saves_table_view, saves_work_view, share_chart):
    # The computing cells' words and charts, by memmath_lessons.freezing_views, into this page's live charts and views.
    show_equal_layers = functools.partial(freezing_views.show_equal_layers, article_bpp=article_bpp,
                                          layers_chart=layers_chart)
    show_what_trains = functools.partial(freezing_views.show_what_trains, share_chart=share_chart)
    show_saves = functools.partial(freezing_views.show_saves, bars_chart=bars_chart, saves_how_view=saves_how_view,
                                   saves_table_view=saves_table_view, saves_work_view=saves_work_view)
    show_bert = functools.partial(freezing_views.show_bert, bert_chart=bert_chart, bert_view=bert_view)
    return show_bert, show_equal_layers, show_saves, show_what_trains


@app.cell
def _(batch_slider, mm, np, seq_slider, show_bert, unit):
    # The BERT-large report: every number of top blocks trained, and full finetuning, at your batch and length.
    bert = mm.PRESETS["bert-large-uncased"]
    top_blocks = np.arange(bert.n_layers + 1)
    # Attention, dropout and activations as transformers trains BERT (memmath.Run's defaults): SDPA, the config's
    # dropout (p = 0.1), and the exact activation model, what PyTorch keeps for backward.
    bert_sweep = mm.training_memory(bert, method=mm.Freeze(trainable_layers=top_blocks), precision="bf16",
                                    optimizer="adam", batch_size=batch_slider.value, seq_len=seq_slider.value)
    bert_full = mm.training_memory(bert, precision="bf16", optimizer="adam", batch_size=batch_slider.value,
                                   seq_len=seq_slider.value)
    show_bert(bert, top_blocks, bert_sweep, bert_full, seq_slider.value, unit)
    return bert, bert_full, bert_sweep, top_blocks


@app.cell(hide_code=True)
def _(live_chart):
    bert_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    bert_chart
    return (bert_chart,)


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md("""
    **Takeaways**

    - Freezing the first f of L equal layers leaves (L − f)/L of the parameters trainable: ten layers
      with nine frozen is 10%.
    - A frozen weight needs no gradient and no optimizer state, and the backward pass stops at the
      first trainable block, so earlier blocks keep no activations and cost no backward work.
    - Frozen weights are still stored, and the trainable blocks still keep their activations.
    - In real models the share is not k/L: embeddings stay frozen, an untied head trains, a tied head
      follows the embeddings.
    - Freezing is parameter-inefficient: on BERT-large about a quarter of the parameters had to train
      to match full finetuning. Parameter-efficient methods train far fewer.
    """), kind="success")
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md("""
    ## Problems
    """)
    return


@app.cell
def _(literature, mm):
    # Problem answers. 1: the article's 7B in ten equal layers, nine frozen, and full finetuning.
    p1_model = mm.uniform_model(7e9, 10)
    p1_frozen = mm.training_memory(p1_model, seq_len=None, precision="bf16", optimizer="adam",
                                   method=mm.Freeze(frozen_layers=9))
    p1_full = mm.training_memory(p1_model, seq_len=None, precision="bf16", optimizer="adam")
    # 2: llama-2-7b with its first 30 blocks frozen, group by group.
    p2_model = mm.PRESETS["llama-2-7b"]
    p2_groups = mm.Freeze(frozen_layers=30).groups(p2_model).set_index("part")
    p2_trainable = int(p2_groups.loc[p2_groups["trainable"], "params"].sum())
    # 3: GPT-2 with every block frozen.
    p3_model = mm.PRESETS["gpt2"]
    p3_frozen = mm.training_memory(p3_model, seq_len=None, method=mm.Freeze(frozen_layers=p3_model.n_layers))
    # 4: BERT-large at the share partial finetuning needed, and at Houlsby's adapters' share.
    p4_bert = mm.PRESETS["bert-large-uncased"]
    p4_partial = literature.REPORTED["bert_large_partial_share"].value / 100 * p4_bert.n_params
    p4_adapters = literature.REPORTED["houlsby_trainable_share"].value / 100 * p4_bert.n_params
    return (p1_frozen, p1_full, p1_model, p2_groups, p2_model, p2_trainable, p3_frozen, p3_model, p4_adapters, p4_bert,
            p4_partial)


@app.cell(hide_code=True)
def _(article_bpp, format_bytes, mo, p1_frozen, p1_full, p1_model):
    _model, _r, _full, _bpp = p1_model, p1_frozen, p1_full, article_bpp
    mo.vstack([
        mo.md("**1.** The article's 7B model in ten equal layers, nine frozen, pure 16-bit with Adam. "
              "How much memory before activations?"),
        mo.accordion({"Answer": mo.md(
            f"Weights: {_model.n_params:,} × {_bpp['weights']:g} B = {format_bytes(_r.weights)}. Trainable: "
            f"{_r.trainable_params:,} parameters × ({_bpp['gradients']:g} + {_bpp['optimizer_states']:g}) B = "
            f"{format_bytes(_r.gradients + _r.optimizer_states)}. Total **{format_bytes(_r.total)}**, "
            f"against {format_bytes(_full.total)} for full finetuning.")}),
    ])
    return


@app.cell(hide_code=True)
def _(mo, p2_groups, p2_model, p2_trainable):
    _model, _groups, _trainable = p2_model, p2_groups, p2_trainable
    mo.vstack([
        mo.md(f"**2.** `{_model.name}` has {_model.n_layers} blocks. You freeze the first 30. Why is the "
              f"trainable share not 2/{_model.n_layers}?"),
        mo.accordion({"Answer": mo.md(
            f"The two blocks hold {_groups.loc['trainable blocks', 'params']:,} parameters, but the untied "
            f"head ({_groups.loc['output head', 'params']:,}) and the final norm ({_groups.loc['final norm', 'params']:,}) "
            f"train too: {_trainable:,} of {_model.n_params:,}, **{_trainable / _model.n_params:.2%}** instead "
            f"of {2 / _model.n_layers:.2%}.")}),
    ])
    return


@app.cell(hide_code=True)
def _(mo, p3_frozen, p3_model):
    _model, _r = p3_model, p3_frozen
    mo.vstack([
        mo.md(f"**3.** You freeze all {_model.n_layers} blocks of GPT-2 and keep `train_head=True`. What trains?"),
        mo.accordion({"Answer": mo.md(
            f"Only the final LayerNorm: **{_r.trainable_params:,} parameters** (weight and bias, "
            f"2 × {_model.hidden_size}). "
            "GPT-2's head is tied to the token embedding, which stays frozen, so the head stays frozen too.")}),
    ])
    return


@app.cell(hide_code=True)
def _(literature, mo, p4_adapters, p4_bert, p4_partial):
    _bert, _partial, _adapters = p4_bert, p4_partial, p4_adapters
    _p_share = literature.REPORTED["bert_large_partial_share"].value
    _a_share = literature.REPORTED["houlsby_trainable_share"].value
    mo.vstack([
        mo.md("**4.** On BERT-large, how many more parameters does top-layer finetuning train than "
              "Houlsby's adapters, at the shares each needed to match full finetuning?"),
        mo.accordion({"Answer": mo.md(
            f"{_p_share:g}% of {_bert.n_params:,} is about {_partial:,.0f}; {_a_share:g}% is about {_adapters:,.0f}: "
            f"**{_partial / _adapters:.1f}× more**. Each trainable parameter costs a gradient and optimizer "
            "states, so the gap is a memory gap too.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
