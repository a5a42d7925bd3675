# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "8. The planner"
# description = "Bring your model, method and GPU: every part per GPU, the verdict, and the smallest changes that make the run fit."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="The planner: will my finetune fit?", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    # The planner: will my finetune fit?

    Every lesson so far took one piece of the bill apart. This one puts the pieces back together
    for **your** run: pick a model (or paste its `config.json`), a finetuning method, a precision
    recipe, an optimizer, the batch and the sequence length, and a GPU. The planner adds up what
    one GPU must hold during a training step, says whether it fits, and ranks the changes that
    would make it fit by the memory each one saves.

    The pieces come from earlier lessons: weights and formats ({viz.lesson_link("01_weights_and_formats", "lesson 1")}),
    gradients and optimizer states ({viz.lesson_link("02_full_finetuning", "lesson 2")}), activations
    ({viz.lesson_link("03_activations", "lesson 3")}), freezing ({viz.lesson_link("04_freezing", "lesson 4")}),
    adapters ({viz.lesson_link("05_adapters", "lesson 5")}) and LoRA/QLoRA ({viz.lesson_link("06_lora_qlora", "lesson 6")}).
    """)
    return


@app.cell
def _():
    import functools

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    import memmath as mm
    from memmath.reference import literature
    from memmath_lessons import viz
    from memmath_lessons.static_charts import Select, bound_chart, live_only_notice
    return alt, bound_chart, functools, literature, live_only_notice, mm, mo, np, pd, Select, viz


@app.cell(hide_code=True)
def _(mm, mo):
    _article = mm.bytes_per_parameter("bf16", "adam")
    _mixed = mm.bytes_per_parameter("mixed", "adam")
    mo.md(f"""
    ## The sum, per GPU

    memory per GPU = weights + quantization constants + gradients + master weights + optimizer states + activations

    Gradients, master weights and optimizer states exist only for **trainable** parameters; the
    recipe sets their bytes. The article's recipe (pure 16-bit with Adam) keeps
    {_article["weights"]:g} + {_article["gradients"]:g} + {_article["optimizer_states"]:g} =
    **{_article["total"]:g} bytes** per trainable parameter; the classic mixed-precision recipe keeps
    {_mixed["weights"]:g} + {_mixed["gradients"]:g} + {_mixed["master_weights"]:g} + {_mixed["optimizer_states"]:g}
    = **{_mixed["total"]:g} bytes**. Activations grow with batch x sequence length. Sharding with
    ZeRO (Rajbhandari et al. 2020) splits optimizer states (stage 1), then gradients (2), then
    weights (3) across the GPUs, but never the activations: each GPU keeps its own.
    """)
    return


@app.cell(hide_code=True)
def _(live_only_notice, mm, mo):
    _mistral = """{
      "architectures": ["MistralForCausalLM"],
      "hidden_act": "silu",
      "hidden_size": 4096,
      "intermediate_size": 14336,
      "max_position_embeddings": 32768,
      "model_type": "mistral",
      "num_attention_heads": 32,
      "num_hidden_layers": 32,
      "num_key_value_heads": 8,
      "rms_norm_eps": 1e-05,
      "tie_word_embeddings": false,
      "torch_dtype": "bfloat16",
      "vocab_size": 32000
    }"""
    source_radio = mo.ui.radio(["preset", "paste config.json"], value="preset", inline=True, label="Model from")
    preset_dropdown = mo.ui.dropdown(list(mm.PRESETS), value="llama-2-7b", label="Preset")
    config_text_area = mo.ui.text_area(value=_mistral, rows=10, full_width=True,
                                       label="config.json (used when 'paste config.json' is chosen)")
    mo.vstack([mo.md("## 1. The model"), live_only_notice(), mo.hstack([source_radio, preset_dropdown], justify="start"),
               config_text_area])
    return config_text_area, preset_dropdown, source_radio


@app.cell
def _(config_text_area, mm, preset_dropdown, source_radio):
    model, model_error = None, None
    if source_radio.value == "preset":
        model = mm.PRESETS[preset_dropdown.value]
    else:
        try:
            model = mm.config_from_text(config_text_area.value)
        except ValueError as error:  # bad JSON, a missing field, an unsupported model_type
            model_error = str(error)
    return model, model_error


@app.cell(hide_code=True)
def _(mm, mo, model, model_error, source_radio):
    _hints = {"not supported": "Choose **preset** above to plan one of the built-in models instead.",
              "missing the field": "Paste the model's complete config.json, as published with its weights."}
    if model_error:
        _hint = next((h for k, h in _hints.items() if k in model_error), "")
        _why = model_error.replace("the pasted config.json", "the text", 1)
        _shown = mo.callout(mo.md(f"**This config.json cannot be used:** {_why}. {_hint}"), kind="danger")
    else:
        _pasted = source_radio.value != "preset"
        _title = f"Your config.json ({model.name})" if _pasted else model.name
        _positions = f", {model.max_positions:,} learned positions" if model.max_positions else ""
        _shown = mo.callout(mo.md(
            f"**{_title}**: {model.n_params:,} parameters ({model.family} layout), {model.n_layers} layers, "
            f"width {model.hidden_size:,}, {model.n_heads} heads ({model.n_kv_heads} key/value), "
            f"vocabulary {model.vocab_size:,}{_positions}. Weights alone in bf16: "
            f"{mm.format_bytes(mm.training_memory(model, method=mm.Full()).weights)}."
            + (" The planner reads the sizes from the file; the formats come from the recipe you choose below, "
               "not from its `torch_dtype`." if _pasted else "")), kind="info")
    _shown
    return


@app.cell(hide_code=True)
def _(live_only_notice, mo, model):
    mo.stop(model is None, mo.md("## 2. The method\n\n*Waiting for a model: fix the config.json above.*"))
    method_dropdown = mo.ui.dropdown({"full finetuning": "full", "partial (freeze)": "freeze",
                                      "adapters (Houlsby)": "adapters", "LoRA": "lora", "QLoRA": "qlora"},
                                     value="full finetuning", label="Method")
    trainable_layers_slider = mo.ui.slider(0, model.n_layers, value=1, show_value=True,
                                           label="Freeze: trainable last blocks")
    bottleneck_slider = mo.ui.slider(steps=[2**k for k in range(3, 11)], value=64, show_value=True,
                                     label="Adapters: bottleneck width")
    rank_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=8, show_value=True, label="LoRA/QLoRA: rank")
    targets_dropdown = mo.ui.dropdown({"q, v": ("q", "v"), "q, k, v, o": ("q", "k", "v", "o"), "all linear": ("all",)},
                                      value="q, v", label="LoRA/QLoRA: matrices")
    mo.vstack([mo.md("## 2. The method"), live_only_notice(), method_dropdown,
               mo.hstack([trainable_layers_slider, bottleneck_slider], justify="start"),
               mo.hstack([rank_slider, targets_dropdown], justify="start"),
               mo.md("The selected method's own control sets your run; all four also feed the comparison "
                     "table at the end.").style({"font-size": "0.9em"})])
    return bottleneck_slider, method_dropdown, rank_slider, targets_dropdown, trainable_layers_slider


@app.cell(hide_code=True)
def _(live_only_notice, mm, mo):
    precision_dropdown = mo.ui.dropdown(list(mm.RECIPES), value="bf16", label="Precision recipe")
    optimizer_dropdown = mo.ui.dropdown(list(mm.OPTIMIZERS), value="adamw", label="Optimizer")
    batch_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=1, show_value=True, label="Batch (sequences)")
    seq_len_slider = mo.ui.slider(steps=[2**k for k in range(7, 16)], value=512, show_value=True,
                                  label="Sequence length (tokens)")
    checkpointing_switch = mo.ui.switch(value=False, label="Gradient checkpointing")
    attention_radio = mo.ui.radio(["sdpa", "eager"], value="sdpa", inline=True, label="Attention")
    mo.vstack([mo.md("## 3. The training step"), live_only_notice(), mo.hstack([precision_dropdown, optimizer_dropdown], justify="start"),
               mo.hstack([batch_slider, seq_len_slider], justify="start"),
               mo.hstack([checkpointing_switch, attention_radio], justify="start")])
    return (attention_radio, batch_slider, checkpointing_switch, optimizer_dropdown, precision_dropdown,
            seq_len_slider)


@app.cell(hide_code=True)
def _(literature, live_only_notice, mm, mo):
    gpu_dropdown = mo.ui.dropdown(list(mm.GPUS), value="RTX 4090", label="GPU")
    n_gpus_slider = mo.ui.slider(steps=[2**k for k in range(0, 7)], value=1, show_value=True, label="GPUs")
    zero_stage_radio = mo.ui.radio({"0 (none)": 0, "1": 1, "2": 2, "3": 3}, value="0 (none)", inline=True,
                                   label="ZeRO stage")
    reserved_slider = mo.ui.slider(0, 2, step=0.25, value=1.25, show_value=True,
                                   label="Reserved for the CUDA context (GiB)")
    unit_radio = mo.ui.radio(["GB", "GiB"], value="GB", inline=True, label="Unit")
    _context = literature.REPORTED["cuda_context_v100"]
    mo.vstack([mo.md("## 4. The hardware"), live_only_notice(), mo.hstack([gpu_dropdown, n_gpus_slider, zero_stage_radio], justify="start"),
               mo.hstack([reserved_slider, unit_radio], justify="start"),
               mo.md(f"The CUDA context and its kernels take memory before any tensor: {_context.value:,} {_context.unit} "
                     f"measured on a V100 ({_context.source}), "
                     f"{mm.format_bytes(mm.parse_bytes(f'{_context.value} {_context.unit}'), 'GiB')}; the slider "
                     "starts at 1.25 GiB."
                     ).style({"font-size": "0.9em"})])
    return gpu_dropdown, n_gpus_slider, reserved_slider, unit_radio, zero_stage_radio


@app.cell
def _(bottleneck_slider, mm, rank_slider, targets_dropdown, trainable_layers_slider):
    methods = {
        "full": mm.Full(),
        "freeze": mm.Freeze(trainable_layers=trainable_layers_slider.value),
        "adapters": mm.Adapters(bottleneck=bottleneck_slider.value),
        "lora": mm.LoRA(rank=rank_slider.value, targets=targets_dropdown.value),
        "qlora": mm.QLoRA(rank=rank_slider.value, targets=targets_dropdown.value),
    }
    return (methods,)


@app.cell
def _(attention_radio, batch_slider, checkpointing_switch, n_gpus_slider, optimizer_dropdown, precision_dropdown,
      seq_len_slider, zero_stage_radio):
    # The training step without the method: the comparison at the end needs this, not the method chosen.
    step = dict(precision=precision_dropdown.value, optimizer=optimizer_dropdown.value, batch_size=batch_slider.value,
                seq_len=seq_len_slider.value, checkpointing=checkpointing_switch.value, n_gpus=n_gpus_slider.value,
                zero_stage=zero_stage_radio.value, attention=attention_radio.value)
    return (step,)


@app.cell
def _(method_dropdown, methods, step):
    settings = {**step, "method": methods[method_dropdown.value]}
    return (settings,)


@app.cell
def _(gpu_dropdown, mm):
    # The GPU, the reserve and the unit each in a cell of its own (marimo re-runs whatever uses any name a
    # re-run cell defines): the GPU and the reserve re-run the verdict and the changes, not the memory itself;
    # the unit re-runs only what is shown.
    gpu = mm.get_gpu(gpu_dropdown.value)
    return (gpu,)


@app.cell
def _(reserved_slider):
    reserved = int(reserved_slider.value * 2**30)
    return (reserved,)


@app.cell
def _(unit_radio):
    unit = unit_radio.value
    return (unit,)


@app.cell
def _(functools, mm):
    # Pure functions of hashable inputs (shapes, methods, GPUs are frozen dataclasses): a setting the learner
    # returns to, or a unit switch, reuses the result instead of computing it again.
    @functools.lru_cache(maxsize=512)
    def planned_memory(model, **settings):
        return mm.training_memory(model, **settings)

    @functools.lru_cache(maxsize=256)
    def planned_changes(model, gpu, reserved, **settings):
        return (tuple(mm.suggest_changes(model, gpu, reserved_bytes=reserved, **settings)),
                tuple(mm.path_to_fit(model, gpu, reserved_bytes=reserved, **settings)))

    return planned_changes, planned_memory


@app.cell
def _(model, planned_memory, settings):
    result = planned_memory(model, **settings)
    return (result,)


@app.cell
def _(gpu, mm, model, planned_changes, reserved, result, settings):
    fit = mm.check_fit(result.total, gpu, reserved_bytes=reserved)
    suggestions, path = (list(_c) for _c in planned_changes(model, gpu, reserved, **settings))
    return fit, path, suggestions


@app.cell(hide_code=True)
def _(fit, gpu, mm, mo, model, result, settings, unit):
    _f = lambda n: mm.format_bytes(n, unit)  # noqa: E731
    _per = f"per GPU ({settings['n_gpus']} GPUs)" if settings["n_gpus"] > 1 else "on the GPU"
    _usable = f"{_f(fit.available_bytes)} usable of {_f(gpu.memory_bytes)}"
    _verdict = (f"**It fits.** {_f(result.total)} {_per}; one {gpu.name} has {_usable}: "
                f"{_f(fit.headroom_bytes)} to spare." if fit.fits else
                f"**It does not fit.** {_f(result.total)} {_per}; one {gpu.name} has {_usable}: "
                f"{_f(-fit.headroom_bytes)} short.")
    _long = model.max_positions is not None and settings["seq_len"] > model.max_positions
    _warn = [mo.callout(mo.md(f"{model.name} learned only {model.max_positions:,} positions; a {settings['seq_len']:,}"
                              "-token sequence is arithmetic only."), kind="warn")] if _long else []
    mo.vstack([mo.md("## The verdict"), *_warn,
               mo.callout(mo.md(_verdict), kind="success" if fit.fits else "danger"),
               mo.md(f"*Assumptions:* {result.assumptions} " + " ".join(f"Note: {n}." for n in result.notes))
               .style({"font-size": "0.9em"})])
    return


@app.cell
def _(fit, gpu, model, planned_memory, result, suggestions, unit, viz):
    _bars = {"your run": result}
    for _s in suggestions[:4]:
        _bars[f"→ {_s.change}"] = planned_memory(model, **_s.settings)
    viz.chart_output(viz.stacked_bars(viz.breakdown_long(_bars, unit), unit, title="Memory per GPU: your run and single changes",
                                      capacity_bytes=fit.available_bytes, capacity_label=gpu.name))
    return


@app.cell
def _(result, unit, viz):
    _table = result.to_frame(unit)
    _table = _table[_table["bytes"] > 0].reset_index(drop=True)
    _table = _table.assign(size=_table[unit].round(3), share=(100 * _table["share"]).round(1))[["label", "size", "share"]]
    viz.plain_table(_table.rename(columns={"label": "part", "size": f"size ({unit})", "share": "share (%)"}))
    return


@app.cell(hide_code=True)
def _(mm, mo, path, suggestions, unit, viz):
    _f = lambda n: mm.format_bytes(n, unit)  # noqa: E731
    if not suggestions:
        _path = "No single change in the planner's list lowers this run's memory."
    elif not path:
        _path = "It already fits; the changes below would free memory for a larger batch or longer sequences."
    elif path[-1].fits and len(path) == 1:
        _n_fit = sum(s.fits for s in suggestions)
        _which = ("Only one change below makes it fit:" if _n_fit == 1 else
                  f"{_n_fit} changes below make it fit; the one that changes the run least (the smallest saving "
                  "that still fits) is")
        _path = f"{_which} **{path[0].change}** ({_f(path[0].total)})."
    elif path[-1].fits:
        _steps = " then ".join(f"**{s.change}** ({_f(s.total)})" for s in path)
        _path = ("No single change makes it fit. The planner takes the largest saving that keeps your batch, looks "
                 "again, and once some change makes it fit takes the smallest that does: "
                 f"{_steps}.")
    else:
        _path = "Even all of these changes together do not make it fit: choose a larger GPU or a smaller model."
    mo.vstack([mo.md("## Changes that would help, ranked by memory saved"), mo.md(_path),
               viz.plain_table(mm.suggestions_frame(suggestions, unit).round(2), wrapped_columns=["cost"])])
    return


@app.cell
def _(mm, mo, reserved, result, unit, viz):
    catalog_frame = mm.fit_table(result.total, reserved_bytes=reserved, unit=unit)
    _gaps = [f"{abs(h):,.2f} {unit} {'spare' if h >= 0 else 'short'}" for h in catalog_frame[f"headroom ({unit})"]]
    catalog_frame = catalog_frame.assign(**{
        f"memory ({unit})": catalog_frame[f"memory ({unit})"].round(2), f"headroom ({unit})": _gaps,
        "fits": catalog_frame["fits"].map({True: "yes", False: "no"})}).drop(columns=["kind"])
    mo.vstack([mo.md(f"""
    ## Every GPU in the catalog

    The same {mm.format_bytes(result.total, unit)} per GPU against every card, with the CUDA context
    reserved on each. "marketed" is the size on the box, in binary units (GiB); "memory" is what the
    driver reports, the same or a little less.
    """), viz.plain_table(catalog_frame)])
    return


@app.cell
def _(mm, np, pd, viz):
    # Every (model, batch, method, part) the bound chart can show: 6 models x 3 batches x 5 methods, ~450 rows.
    _batches, _rows = np.array([1, 4, 16]), []
    _methods = {"full": mm.Full(), "freeze": mm.Freeze(trainable_layers=1), "adapters": mm.Adapters(bottleneck=64),
                "LoRA": mm.LoRA(rank=8, targets=("q", "v")), "QLoRA": mm.QLoRA(rank=8, targets=("q", "v"))}
    for _preset in ("gpt2-xl", "llama-2-7b", "llama-3-8b", "mistral-7b", "llama-2-13b", "llama-2-70b"):
        for _name, _method in _methods.items():
            _r = mm.training_memory(_preset, precision="bf16", optimizer="adamw", method=_method, batch_size=_batches,
                                    seq_len=512, attention="sdpa")
            for _order, (_part, _bytes) in enumerate(_r.parts().items()):
                _bytes = np.broadcast_to(_bytes, _batches.shape)
                if _bytes.any():  # one dict per row, one DataFrame at the end (a frame per part costs ~0.5 ms each)
                    _rows += [{"model": _preset, "batch": int(_b), "method": _name, "part": viz.ALL_LABELS[_part],
                               "order": _order, "GB": round(float(_v) / 1e9, 3)} for _b, _v in zip(_batches, _bytes)]
    plan_grid = pd.DataFrame(_rows)
    return (plan_grid,)


@app.cell
def _(Select, alt, bound_chart, mm, mo, pd, plan_grid, viz):
    from memmath_lessons.static_charts import is_static_export as _static

    _y = alt.Y("method:N", title=None, sort=list(dict.fromkeys(plan_grid["method"])))
    _parts = [p for p in viz.PART_COLORS if viz.ALL_LABELS[p] in set(plan_grid["part"])]
    _cards = pd.DataFrame([{"gpu": f"{g} ({mm.format_bytes(mm.get_gpu(g).memory_bytes)})",
                            "GB": round(mm.to_unit(mm.get_gpu(g).memory_bytes, "GB"), 2)} for g in ("RTX 4090", "RTX A6000", "A100 80GB")])

    def _draw(base):
        _bars = base.mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory per GPU (GB)"), y=_y,
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(_parts)), order=alt.Order("order:Q"))
        _totals = base.transform_aggregate(total="sum(GB)", groupby=["method"]).mark_text(align="left", dx=4, fontSize=11).encode(
            x=alt.X("total:Q"), y=_y, text=alt.Text("total:Q", format=",.1f"))
        # The cards in a legend of dash styles: names drawn on the lines would overlap once a 70B model squeezes them.
        _gpus = alt.Chart(_cards).mark_rule(color="black").encode(x=alt.X("GB:Q"), strokeDash=alt.StrokeDash(
            "gpu:N", title="Card memory", sort=list(_cards["gpu"]), scale=alt.Scale(range=[[2, 2], [6, 3], [12, 3, 2, 3]])))
        return alt.layer(_bars, _totals, _gpus).resolve_legend(strokeDash="independent").properties(width=520, height=170)

    _chart = bound_chart(plan_grid, [Select("model", "Model", value="llama-2-7b"), Select("batch", "Batch (sequences)", radio=True)],
                         _draw, title="Pure bf16, AdamW, 512 tokens, one GPU, against three cards")
    _chart = viz.chart_output(_chart)
    _about = """
    ### Five methods at a glance

    The chart below plans one common run (pure bf16, AdamW, 512 tokens, one GPU, freezing all but the
    last block, adapters of width 64, LoRA and QLoRA at rank 8 on q and v) for a few models and batch
    sizes, every method side by side against three card sizes. Its inputs sit under the chart and redraw
    it in the browser from numbers memmath computed in advance, so they work in this static copy of
    the workbook, where the planner's own controls above cannot move.
    """
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it.
    mo.vstack([mo.md(_about), _chart]) if _static() else None
    return


@app.cell(hide_code=True)
def _(mo, optimizer_dropdown, precision_dropdown):
    mo.md(f"""
    ## Full, partial or PEFT: the article's comparison, with your numbers

    The article closes with a table of the three approaches. Here it is rebuilt from this lesson's
    settings for your model: the same recipe ({precision_dropdown.value}), optimizer ({optimizer_dropdown.value}),
    batch and sequence length, with the freeze, adapter and LoRA controls above. Trainable parameters and memory are computed; quality, latency
    and data are what the papers and the article report, with their sources.
    """)
    return


@app.cell
def _(methods, mm, model, planned_memory, step, unit):
    compared = {name: planned_memory(model, **step, method=methods[key])
                for name, key in (("full", "full"), ("partial (freeze)", "freeze"), ("PEFT: adapters", "adapters"),
                                  ("PEFT: LoRA", "lora"))}
    comparison_rows = {
        "trainable parameters": {n: f"{r.trainable_params:,} ({r.trainable_fraction:.2%})" for n, r in compared.items()},
        f"memory per GPU ({unit})": {n: mm.format_bytes(r.total, unit) for n, r in compared.items()},
    }
    return compared, comparison_rows


@app.cell(hide_code=True)
def _(comparison_rows, literature, mm, pd, viz):
    _r = literature.REPORTED  # each figure with its full source in memmath.reference.literature
    _few = "some PEFT methods do well with a few thousand examples (the article)"
    _rows = {**comparison_rows,
             "quality": {"full": "the reference",
                         "partial (freeze)": f"about {_r['bert_large_partial_share'].value:.0f}% of BERT-large's parameters had "
                                             "to train to match full finetuning on GLUE (Houlsby et al. 2019, as the article reports)",
                         "PEFT: adapters": f"within {_r['houlsby_glue_gap'].value}% of full finetuning on GLUE, training "
                                           f"{_r['houlsby_trainable_share'].value}% of the parameters (Houlsby et al. 2019)",
                         "PEFT: LoRA": "on par with or better than full finetuning on RoBERTa, DeBERTa, GPT-2 and GPT-3 "
                                       "(Hu et al. 2021)"},
             "inference latency": {"full": "none added", "partial (freeze)": "none added",
                                   "PEFT: adapters": f"{_r['lora_adapter_latency'].value}% slower forward pass, GPT-2 medium "
                                                     "at batch 1 (Hu et al. 2021, Table 1)",
                                   "PEFT: LoRA": "none once the update is merged into the weights (Hu et al. 2021)"},
             "data needed": {"full": "tens of thousands to millions of examples (the article)",
                             "partial (freeze)": "not stated by the article", "PEFT: adapters": _few, "PEFT: LoRA": _few}}
    comparison_frame = pd.DataFrame(_rows).T
    viz.plain_table(comparison_frame.reset_index(names="").astype(str), wrapped_columns=list(comparison_frame.columns))
    return


@app.cell(hide_code=True)
def _(compared, mm, mo, model, step, unit, viz):
    _serve = mm.inference_memory(model, context_len=step["seq_len"])
    _peft = compared["PEFT: LoRA"].total
    mo.md(f"""
    ## Needed, or only wanted?

    The article ends on a question a team should ask before any of this: is finetuning **needed**,
    or only **wanted**? Engineers sometimes finetune when they know it is not needed, to learn how,
    and a leader may find it hard to tell the two apart. The memory bill does not care why: a
    finetune carries training-side costs whether or not it was needed. Serving {model.name} as it is
    ({viz.lesson_link("07_inference", "lesson 7")}) takes about {mm.format_bytes(_serve.total, unit)} at
    {step["seq_len"]:,} tokens; even the LoRA run above needs {mm.format_bytes(_peft, unit)} per GPU,
    and full finetuning {mm.format_bytes(compared["full"].total, unit)}. If prompting the model as it is
    does the job, the cheapest finetune is the one you do not run.
    """)
    return


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md("""
    **Takeaways**

    - A training run's memory per GPU is a sum of named parts; the recipe, the optimizer and the
      method decide most of them, batch x sequence length decides the activations.
    - The cheapest fixes differ by run: checkpointing when activations dominate, LoRA or QLoRA when
      gradients and optimizer states dominate, ZeRO or more GPUs when the weights themselves do not fit.
    - ZeRO shards states, gradients and weights, never activations: more GPUs cannot rescue a batch
      that is too large for one card.
    - PEFT trains a tiny fraction of the parameters for most of the quality, with less data; merged
      LoRA adds no latency, adapters do.
    """), kind="success")
    return


@app.cell(hide_code=True)
def _(literature, mm, mo):
    _s = dict(precision="bf16", optimizer="adamw", batch_size=1, seq_len=512, attention="sdpa")
    _full = mm.training_memory("llama-2-7b", **_s)
    _path = mm.path_to_fit("llama-2-7b", "RTX 4090", reserved_bytes=int(1.25 * 2**30), **_s)
    _q = mm.training_memory("llama-65b", precision="bf16", optimizer="adamw", method=mm.QLoRA(rank=64, targets="all"),
                            batch_size=1, seq_len=512, checkpointing=True, attention="sdpa")
    _a6000 = mm.check_fit(_q, "RTX A6000")
    _dp = [mm.training_memory("llama-2-7b", precision="bf16", optimizer="adamw", n_gpus=n).total for n in (1, 8)]
    _z3 = mm.training_memory("llama-2-7b", precision="bf16", optimizer="adamw", n_gpus=8, zero_stage=3).total
    try:
        mm.config_from_text('{"model_type": "falcon", "hidden_size": 4544}')
    except ValueError as _error:
        _falcon = str(_error)
    mo.vstack([
        mo.md("## Problems"),
        mo.md("**1.** Full finetuning of Llama-2-7B in pure bf16 with AdamW, batch 1, 512 tokens: how much "
              "per GPU, and what is the smallest change that fits it on an RTX 4090 (1.25 GiB reserved)?"),
        mo.accordion({"Answer": mo.md(f"{mm.format_bytes(_full.total)}. The planner's path: "
                                      + ", then ".join(f"{s.change} ({mm.format_bytes(s.total)})" for s in _path) + ".")}),
        mo.md("**2.** QLoRA's paper finetuned a 65B model on one 48 GB GPU. Plan LLaMA-65B with QLoRA rank 64 on "
              "all linear layers, batch 1, 512 tokens, checkpointing: does it fit an RTX A6000?"),
        mo.accordion({"Answer": mo.md(f"{mm.format_bytes(_q.total)} against {mm.format_bytes(_a6000.available_bytes)}: "
                                      f"{'it fits' if _a6000.fits else 'it does not fit'} "
                                      f"({literature.cite('qlora_65b_gpu')}).")}),
        mo.md("**3.** Eight GPUs without ZeRO: does Llama-2-7B's full finetune need less memory per GPU than on one?"),
        mo.accordion({"Answer": mo.md(f"No: {mm.format_bytes(_dp[1])} per GPU, as on one ({mm.format_bytes(_dp[0])}). "
                                      f"Plain data parallelism copies everything; ZeRO stage 3 brings it to "
                                      f"{mm.format_bytes(_z3)} per GPU.")}),
        mo.md("**4.** Paste `{\"model_type\": \"falcon\", \"hidden_size\": 4544}` as the config. What does the planner say?"),
        mo.accordion({"Answer": mo.md(f"A message, not a crash: \"{_falcon}\".")}),
    ])
    return


if __name__ == "__main__":
    app.run()
