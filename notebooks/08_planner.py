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

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** Running out of memory is how many people find out that their plans did not account
    for what a model needs (the article): a run that does not fit one GPU cannot train at all. Full
    finetuning of a 7B model in a 16-bit format adds up to about 56 GB before activations, more than
    most consumer GPUs provide. This lesson does the accounting before the error, for **your** run: pick
    a model (or paste its `config.json`), a method, a precision recipe, an optimizer, the batch and the
    sequence length, and a GPU. The planner adds up what one GPU must hold during a training step, says
    whether it fits, states how far the run goes, and ranks the changes that would make it fit.

    **The control.** The method (section 2) moves the verdict most: full finetuning trains every
    weight, LoRA and QLoRA a fraction of a percent of them.

    The pieces come from earlier lessons: {viz.lesson_link("01_weights_and_formats", "weights and formats")},
    {viz.lesson_link("02_full_finetuning", "gradients and optimizer states")},
    {viz.lesson_link("03_activations", "activations")}, {viz.lesson_link("04_freezing", "freezing")},
    {viz.lesson_link("05_adapters", "adapters")} and {viz.lesson_link("06_lora_qlora", "LoRA/QLoRA")}.
    """)
    return


@app.cell
def _():
    import importlib.util
    import json
    import re

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes
    from memmath_lessons.reference import literature
    from memmath_lessons import viz
    from memmath_lessons.static_charts import live_only_notice
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons import planner_views, requirement_view, site_charts
    from memmath_lessons.pasted_config import pasted_text
    from memmath.verdict import verdict_of
    from memmath import traced
    return (format_bytes, importlib, json, literature, live_chart, live_html, live_only_notice, mm, mo, pasted_text,
            pd, planner_views, re, requirement_view, site_charts, traced, verdict_of, viz)


@app.cell
def _(mm):
    # What a learner with an unsupported model_type can do: the model types memmath reads (memmath's own list, so
    # this text cannot fall behind the reader), and why relabelling another model_type gives a wrong number.
    def nearest_layout(model_type):
        """One or two sentences: the model types memmath reads, and why a relabelled config would mislead."""
        return (f"memmath reads these model types from a config.json: {', '.join(mm.architectures.SUPPORTED_MODEL_TYPES)}, "
                f"and these vision-language ones: {', '.join(mm.multimodal.MULTIMODAL_MODEL_TYPES)}. "
                f"`{model_type}` is not one of them. Relabelling its `model_type` as one of these counts that "
                "family's tensors, not yours, so the planner refuses it rather than guess.")

    return (nearest_layout,)


@app.cell
def _(mm):
    preset_names = list(mm.PRESETS)  # every model memmath has a preset for, for the menu below
    return (preset_names,)


@app.cell(hide_code=True)
def _(live_only_notice, mo, preset_names):
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
    preset_dropdown = mo.ui.dropdown(preset_names, value="llama-2-7b", label="Preset")
    config_text_area = mo.ui.text_area(value=_mistral, rows=10, full_width=True,
                                       label="config.json (used when 'paste config.json' is chosen)")
    mo.vstack([mo.md("## 1. The model"), live_only_notice(), mo.hstack([source_radio, preset_dropdown], justify="start"),
               config_text_area])
    return config_text_area, preset_dropdown, source_radio


@app.cell
def _(config_text_area, mm, preset_dropdown, source_radio):
    model, model_error, model_config = None, None, None
    if source_radio.value == "preset":
        model = mm.PRESETS[preset_dropdown.value]
    else:
        try:
            model = mm.planner.config_from_text(config_text_area.value)
        except ValueError as error:  # bad JSON, a missing field, an unsupported model_type
            model_error = str(error)
        else:
            import json as _json
            model_config = _json.loads(config_text_area.value)  # read again only for max_position_embeddings
    # The weights alone in bf16 (2 B a parameter; 4 B for those a bf16 load keeps in fp32, a MoE router), for the card.
    bf16_weight_bytes = None if model is None else mm.inference.inference_weight_bytes(model, "bf16")[0]
    # A preset's published config.json, for PyTorch's trace where memmath does not trace the model type.
    preset_config = mm.presets.PRESET_CONFIGS.get(preset_dropdown.value)
    return bf16_weight_bytes, model, model_config, model_error, preset_config


@app.cell(hide_code=True)
def _(bars_chart, basis_view, bf16_weight_bytes, catalog_view, changes_view, comparison_view, far_view, format_bytes, mo,
      model, model_error, nearest_layout, needed_view, parts_view, pasted_text, re, recipe_view, source_radio):
    _hints = {"not supported": "Choose **preset** above to plan one of the built-in models instead.",
              "missing the field": "Paste the model's complete config.json, as published with its weights."}
    if model_error:
        _hint = next((h for k, h in _hints.items() if k in model_error), "")
        _type = re.search(r"model_type'? '([^']+)' is not supported", model_error)
        if _type:
            _hint = nearest_layout(_type.group(1)) + " " + _hint
        _why = pasted_text(model_error.replace("the pasted config.json", "the text", 1))
        _shown = mo.callout(mo.md(f"**This config.json cannot be used:** {_why}. {_hint} Until it can, there is no "
                                  "run to judge: the sections below wait for a model."), kind="danger")
        # No run: the verdict's chart says so instead of keeping the last run's bars unmarked.
        bars_chart.update({"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": 420, "height": 40,
                           "data": {"values": [{"text": "No run: the pasted config.json cannot be used (section 1)."}]},
                           "mark": {"type": "text", "align": "left", "x": 0, "fontSize": 13},
                           "encoding": {"text": {"field": "text", "type": "nominal"}}})
        # Nor do the sections that follow from the run keep the last run's numbers under their headings.
        recipe_view.update(mo.md(""))
        for _view in (basis_view, far_view, changes_view, parts_view, catalog_view, comparison_view, needed_view):
            _view.update(mo.md("*No run: the pasted config.json cannot be used (section 1).*"))
    else:
        _pasted = source_radio.value != "preset"
        _title = f"Your config.json ({pasted_text(model.name)})" if _pasted else model.name
        _positions = f", {model.max_positions:,} learned positions" if model.max_positions else ""
        # A mixture of experts routes each token to experts_per_tok of its n_experts experts per block.
        _where = ("per block" if model.moe_blocks == model.n_layers else
                  f"in each of its {model.moe_blocks} mixture-of-experts blocks (the other "
                  f"{model.n_layers - model.moe_blocks} are dense)")
        _active = (f" A mixture of experts: each token is routed to {model.experts_per_tok} of {model.n_experts} "
                   f"experts {_where}, so **{model.active_params:,} parameters are active per token** "
                   f"({model.active_params / model.n_params:.1%}), but a training step holds every expert's weights, so "
                   "its memory follows the total." if model.n_experts else "")
        # memmath's bf16 weights: 2 B a parameter, 4 B for those a bf16 load keeps in fp32 (a MoE router)
        _kept = model.fp32_kept_params("bf16")
        _shown = mo.callout(mo.md(
            f"**{_title}**: {model.n_params:,} parameters ({model.family} layout), {model.n_layers} layers, "
            f"width {model.hidden_size:,}, {model.n_heads} heads ({model.n_kv_heads} key/value), "
            f"vocabulary {model.vocab_size:,}{_positions}. Weights alone in bf16: "
            f"{format_bytes(bf16_weight_bytes)} (2 B a parameter"
            + (f"; 4 B for the {_kept:,} that transformers keeps in fp32 when it loads the model in bf16"
               if _kept else "") + ")." + _active
            + (" The planner reads the sizes from the file; the formats come from the recipe you choose below, "
               "not from its `torch_dtype`." if _pasted else "")), kind="info")
    _shown
    return


@app.cell(hide_code=True)
def _(config_text_area, importlib, json, mo, model, model_error, preset_config, source_radio):
    # A model type memmath has no record for, or one whose activations it does not trace (its verdict is refused),
    # can still be answered: PyTorch traces its step at full size under fake tensors, with no memory behind them
    # (memmath/traced.py), where torch and transformers are installed.
    trace_config = None
    _untraced = model is not None and model.architecture is not None and not model.architecture.replays(model)
    if model_error and source_radio.value != "preset" and "is not supported" in model_error:
        trace_config = json.loads(config_text_area.value)
    elif _untraced and source_radio.value != "preset":
        trace_config = json.loads(config_text_area.value)
    elif _untraced:  # a preset read from its published config.json's fields
        trace_config = preset_config
    torch_ready = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
    trace_button = mo.ui.run_button(label="Trace this step with PyTorch", disabled=not torch_ready)
    _why = ("memmath does not trace this model type's activations, so it gives no verdict on them (the verdict below says "
            "why). " if _untraced else "")
    if trace_config is None:
        _shown = None
    elif torch_ready:
        _shown = mo.vstack([mo.md(
            f"**PyTorch can still answer for this model.** {_why}It builds the model from its config.json on the meta "
            "device (no weights, nothing downloaded) and steps one block of each kind under fake tensors, which "
            "have shapes but no memory. The answer is traced, not memmath's model: it uses the method, precision, "
            "optimizer, batch, sequence length, checkpointing, attention and GPU you choose below, as they are when "
            "you press the button, on one GPU without accumulation. A 70B-class model takes about 8 s on two cores "
            "(measured on the project's machine); the answer is cached."),
            trace_button])
    else:
        _shown = mo.callout(mo.md(
            f"{_why}PyTorch could trace this model's step, but torch and transformers are not installed here: "
            '`pip install "memmath[torch]"`, then open this lesson again.'), kind="warn")
    _shown
    return trace_button, trace_config


@app.cell
def _(hardware_controls, method_controls, mm, mo, planner_views, reserve_bytes, step_controls, trace_button,
      trace_config, traced, verdict_of):
    mo.stop(trace_config is None or not trace_button.value)
    _m, _s, _h = method_controls, step_controls, hardware_controls  # their values now, as the button was pressed
    _method, _precision = _m["method"].value, _s["precision"].value
    _refused = []
    if _method not in ("full", "lora"):
        _refused.append("the method: a trace here takes full finetuning or LoRA")
    if _precision not in traced.PRECISIONS:
        _refused.append(f"the precision recipe: a trace takes {', '.join(traced.PRECISIONS)}")
    if _s["optimizer"].value not in traced.OPTIMIZERS:
        _refused.append(f"the optimizer: a trace takes {', '.join(traced.OPTIMIZERS)}")
    if _s["accumulation"].value != 1:  # a later micro-batch's forward runs with the gradients held
        _refused.append("gradient accumulation: a trace steps one micro-batch per optimizer step")
    if (int(_h["gpus"].value), int(_h["zero_stage"].value), int(_h["tp"].value), int(_h["pp"].value)) != (1, 0, 1, 1):
        _refused.append("the GPUs: a trace steps one GPU, without ZeRO or a split")
    mo.stop(bool(_refused), mo.callout(mo.md("No trace with these settings. Change " + "; ".join(_refused) + "."),
                                       kind="warn"))
    _settings = dict(precision=_precision, optimizer=_s["optimizer"].value, method=_method,
                     batch_size=_s["batch"].value, seq_len=_s["seq_len"].value,
                     checkpointing=_s["checkpointing"].value, attention=_s["attention"].value or "sdpa")
    if _method == "lora":  # peft's "all-linear" for every linear layer but the head
        _settings.update(lora_rank=_m["rank"].value,
                         lora_targets=tuple("all-linear" if t == "all" else t for t in _m["targets"].value))
    traced_verdict, _failure = None, None
    try:
        with mo.status.spinner(title="Tracing the step with PyTorch..."):
            traced_answer = traced.traced_training(trace_config, **_settings)
    except (ValueError, ImportError) as _error:
        traced_answer, _failure = None, str(_error)
    else:
        # The one verdict rule (memmath/verdict.py): the traced peak, the CUDA context and 5% of the peak kept free.
        traced_verdict = verdict_of(traced_answer.peak_step2_bytes, mm.get_gpu(_h["gpu"].value),
                                    reserved_bytes=reserve_bytes(_h["reserved"].value))
    planner_views.show_traced(traced_answer, traced_verdict, _failure, unit=_h["unit"].value)
    return traced_answer, traced_verdict


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    # The method's controls depend on no other control, so changing the model (or anything else) keeps them;
    # only the freeze slider's range follows the model, and it remembers the value asked for (next cells). They show
    # here, in the cell that makes them: a cell that shows a control re-runs whenever that control moves.
    method_dropdown = mo.ui.dropdown({"full finetuning": "full", "partial (freeze)": "freeze",
                                      "adapters (Houlsby)": "adapters", "LoRA": "lora", "QLoRA": "qlora",
                                      "DPO (preference pairs, a LoRA policy)": "dpo"},
                                     value="full finetuning", label="Method")
    bottleneck_slider = mo.ui.slider(steps=[2**k for k in range(3, 11)], value=64, show_value=True,
                                     label="Adapters: bottleneck width")
    rank_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=8, show_value=True, label="LoRA/QLoRA: rank")
    targets_dropdown = mo.ui.dropdown({"q, v": ("q", "v"), "q, k, v, o": ("q", "k", "v", "o"), "all linear": ("all",)},
                                      value="q, v", label="LoRA/QLoRA: matrices")
    # The same controls in a plain dict: a cell that reads them from it does not re-run when they move (marimo
    # re-runs the cells that name a control), so the trace below reads them only when its button is pressed.
    method_controls = dict(method=method_dropdown, rank=rank_slider, targets=targets_dropdown)
    mo.vstack([mo.md("## 2. The method"), live_only_notice(), method_dropdown,
               mo.hstack([bottleneck_slider, rank_slider, targets_dropdown], justify="start")])
    return bottleneck_slider, method_controls, method_dropdown, rank_slider, targets_dropdown


@app.cell
def _(mo):
    # The trainable blocks the learner asked for, kept across models: a 12-layer model shows at most 12, and
    # going back to a deeper model restores the request.
    get_trainable_layers, set_trainable_layers = mo.state(1)
    return get_trainable_layers, set_trainable_layers


@app.cell(hide_code=True)
def _(get_trainable_layers, mo, model, pasted_text, set_trainable_layers):
    mo.stop(model is None, mo.md("*The freeze slider waits for a model: fix the config.json above.*"))
    _asked = get_trainable_layers()
    trainable_layers_slider = mo.ui.slider(0, model.n_layers, value=min(_asked, model.n_layers), show_value=True,
                                           label="Freeze: trainable last blocks", on_change=set_trainable_layers)
    _clamped = (mo.md(f"*You asked for {_asked} trainable blocks; {pasted_text(model.name)} has {model.n_layers}, so all "
                      f"{model.n_layers} train (the slider shows {model.n_layers}). A deeper model gets your "
                      f"{_asked} back.*").style({"font-size": "0.9em"}) if _asked > model.n_layers else None)
    mo.vstack([trainable_layers_slider, *([_clamped] if _clamped is not None else []),
               mo.md("The selected method's own control sets your run; all four also feed the comparison "
                     "table under the verdict. Each keeps its value when you change the model.").style({"font-size": "0.9em"})])
    return (trainable_layers_slider,)


@app.cell(hide_code=True)
def _(live_only_notice, mm, mo, viz):
    precision_dropdown = mo.ui.dropdown(options=viz.recipe_menu(), value=viz.RECIPE_NAMES["bf16"], label="Precision recipe")
    optimizer_dropdown = mo.ui.dropdown(options=viz.optimizer_menu(), value=viz.OPTIMIZER_NAMES["adamw"], label="Optimizer")
    batch_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=1, show_value=True, label="Batch (sequences)")
    seq_len_slider = mo.ui.slider(steps=[2**k for k in range(7, 16)], value=512, show_value=True,
                                  label="Sequence length (tokens)")
    checkpointing_switch = mo.ui.switch(value=False, label="Gradient checkpointing")
    # Micro-batches of `batch` sequences summed into one optimizer step: the gradients of the earlier ones are held
    # while the next runs forward and backward (memmath.peak; validation/grad_accum.py measures it).
    accum_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64], value=1, show_value=True,
                                label="Gradient accumulation steps")
    # None: what transformers picks for the model (SDPA; eager for Gemma 2, whose softcap SDPA refuses).
    attention_radio = mo.ui.radio({"as transformers picks": None, "sdpa": "sdpa", "eager": "eager"},
                                  value="as transformers picks", inline=True, label="Attention")
    step_controls = dict(precision=precision_dropdown, optimizer=optimizer_dropdown, batch=batch_slider,
                         seq_len=seq_len_slider, checkpointing=checkpointing_switch, attention=attention_radio,
                         accumulation=accum_slider)
    mo.vstack([mo.md("## 3. The training step"), live_only_notice(), mo.hstack([precision_dropdown, optimizer_dropdown], justify="start"),
               mo.hstack([batch_slider, seq_len_slider, accum_slider], justify="start"),
               mo.hstack([checkpointing_switch, attention_radio], justify="start")])
    return (accum_slider, attention_radio, batch_slider, checkpointing_switch, optimizer_dropdown, precision_dropdown,
            seq_len_slider, step_controls)


@app.cell(hide_code=True)
def _(mo, model):
    # Linear-attention, Mamba-2 and convolution mixers (Qwen3-Next, LFM2, Granite 4.0-H) keep other tensors under CUDA
    # kernels than on transformers' PyTorch path, which runs where those packages are not installed (memmath.Run's
    # mixer_kernels); memmath replays the PyTorch path, so only that run gets a verdict.
    _kernels = model.architecture.mixer_kernels if model is not None and model.architecture is not None else ""
    kernels_radio = mo.ui.radio({"their CUDA kernels": "cuda", "transformers' PyTorch path": "torch"},
                                value="their CUDA kernels", inline=True, label="This model's mixers run")
    mo.vstack([kernels_radio, mo.md(
        f"On a GPU they run {_kernels} where those packages are installed, and transformers' PyTorch code where "
        "not. memmath replays the PyTorch path only: with the CUDA kernels it gives no verdict.")]) if _kernels else None
    return (kernels_radio,)


@app.cell
def _(mm):
    gpu_names = list(mm.GPUS)  # every card memmath knows
    default_max_gpus = mm.planner.DEFAULT_MAX_GPUS  # how many GPUs the planner's changes may use unless told
    # "card": the card's own CUDA context (memmath/cuda_context.py, what check_fit and `memmath train` reserve); else a
    # figure in whole MiB, as the driver counts, from none to 2 GiB by quarters and the V100's eager 1,343 MiB.
    reserve_steps = sorted({256 * k for k in range(9)} | {mm.CUDA_CONTEXT_BYTES // 2**20})
    return default_max_gpus, gpu_names, reserve_steps


@app.cell(hide_code=True)
def _(default_max_gpus, gpu_names, live_only_notice, mo, reserve_steps, viz):
    gpu_dropdown = mo.ui.dropdown(gpu_names, value="RTX 4090", label="GPU")
    n_gpus_number = mo.ui.number(start=1, stop=1024, step=1, value=1, label="GPUs")
    max_gpus_number = mo.ui.number(start=1, stop=1024, step=1, value=default_max_gpus,
                                   label="GPUs you could use (for the changes)")
    zero_stage_radio = mo.ui.radio({"0 (none)": 0, "1": 1, "2": 2, "3": 3}, value="0 (none)", inline=True,
                                   label="ZeRO stage")
    # Splitting the model itself (lesson 11): GPUs = data x tensor x pipeline; 1F1B with as many micro-batches as stages.
    _degrees = {"1": 1, "2": 2, "4": 4, "8": 8}
    tp_dropdown = mo.ui.dropdown(_degrees, value="1", label="Tensor parallel t")
    pp_dropdown = mo.ui.dropdown(_degrees, value="1", label="Pipeline stages p")
    reserve_dropdown = mo.ui.dropdown({"the card's own": "card", **{f"{_m:,} MiB": _m for _m in reserve_steps}},
                                      value="the card's own", label="Reserved for the CUDA context")
    unit_radio = mo.ui.radio(["GB", "GiB"], value="GB", inline=True, label="Unit")
    hardware_controls = dict(gpu=gpu_dropdown, reserved=reserve_dropdown, unit=unit_radio, gpus=n_gpus_number,
                             zero_stage=zero_stage_radio, tp=tp_dropdown, pp=pp_dropdown)
    mo.vstack([mo.md("## 4. The hardware"), live_only_notice(), mo.hstack([gpu_dropdown, n_gpus_number, zero_stage_radio], justify="start"),
               mo.hstack([tp_dropdown, pp_dropdown, mo.md(
                   f"The GPUs split the model t x p ways ({viz.lesson_link('11_many_gpus', 'lesson 11')}); the rest "
                   "copy it (data parallelism)").style({"font-size": "0.9em"})], justify="start"),
               mo.hstack([max_gpus_number, reserve_dropdown, unit_radio], justify="start"),
               mo.accordion({"How much does the CUDA context take on each card?": mo.md(
                   f"The CUDA context and its kernels take memory before any tensor. By default each card keeps "
                   f"back its own, with PyTorch's lazy module loading: {viz.context_reserves_words()}. Pick a "
                   "figure instead to match what `nvidia-smi` shows for an idle process on your card."
                   ).style({"font-size": "0.9em"})})])
    return (gpu_dropdown, hardware_controls, max_gpus_number, n_gpus_number, pp_dropdown, reserve_dropdown, tp_dropdown,
            unit_radio, zero_stage_radio)


@app.cell
def _(mm):
    # The planner's answers for one Run: memmath caches each run's parts and requirement itself (a Run is
    # hashable), so a setting the learner returns to, or a unit switch, costs nothing here.
    def planned_limits(run, gpu, reserved, max_gpus):
        """The fewest GPUs (ZeRO stage 3 when the run has none), the largest batch, the longest sequence."""
        _staged = run.replace(zero_stage=run.zero_stage or 3)
        return dict(
            stage=_staged.zero_stage,
            gpus=mm.planner.fewest_gpus_that_fit(_staged, gpu, reserved_bytes=reserved, max_gpus=max_gpus),
            batch=mm.planner.largest_batch_that_fits(run, gpu, reserved_bytes=reserved, max_batch=2**16),
            seq_len=mm.planner.longest_sequence_that_fits(run, gpu, reserved_bytes=reserved, max_seq_len=2**20))

    _plans = {}

    def planned(run, gpu, reserved, max_gpus):
        """(plan, changes, path, limits) of one run on one card, kept for the settings a learner returns to: a
        slider moved back and forth asks the same questions, and memmath caches each run's requirement but not
        the planner's search over the changes and the limits, which builds hundreds of Runs."""
        key = (run.cache_key, gpu.name, gpu.memory_bytes, reserved, max_gpus)
        if key not in _plans:
            if len(_plans) >= 256:  # a bound, as memmath's own caches have
                _plans.clear()
            plan = mm.plan_training(run, gpu, reserved_bytes=reserved, max_gpus=max_gpus)
            if plan.requirement.refused:  # only a floor (memmath/decision.py): no change or search is judged
                _plans[key] = (plan, [], [], None)
                return _plans[key]
            # Shown even when the run fits: the changes that would free memory for a larger batch or longer sequences.
            changes = list(plan.changes) if not plan.fit.fits else mm.planner.suggest_changes(
                run, gpu, reserved_bytes=reserved, max_gpus=max_gpus)
            _plans[key] = (plan, changes, list(plan.path), planned_limits(run, gpu, reserved, max_gpus))
        return _plans[key]

    def reserve_bytes(choice):
        """Section 4's reserve: None for the card's own CUDA context (check_fit's default), else whole MiB in bytes."""
        return None if choice == "card" else int(choice) * 2**20

    return planned, planned_limits, reserve_bytes


@app.cell
def _(mm):
    gpu_marketed = {_name: _gpu.marketed for _name, _gpu in mm.GPUS.items()}  # the size on the box, per card
    return (gpu_marketed,)


@app.cell(hide_code=True)
def _(bars_chart, basis_view, catalog_view, changes_view, comparison_view, far_view, gpu_marketed, needed_view,
      optimizer_dropdown, parts_view, planner_views, precision_dropdown, recipe_view):
    # The run's chart and sections, worded and drawn by memmath_lessons.planner_views into this page's live views.
    planner_page = planner_views.Views(bars_chart, recipe_view, basis_view, far_view, changes_view, parts_view,
                                       catalog_view, comparison_view, needed_view)
    show_sections = planner_views.sections(planner_page, gpu_marketed=gpu_marketed,
                                           precision_dropdown=precision_dropdown, optimizer_dropdown=optimizer_dropdown)
    return planner_page, show_sections


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## The verdict
    """)
    return


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the run's cell below sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell
def _(accum_slider, attention_radio, batch_slider, bottleneck_slider, checkpointing_switch, gpu_dropdown, kernels_radio,
      max_gpus_number, method_dropdown, mm, model, model_config, n_gpus_number, optimizer_dropdown, planned, planner_page,
      planner_views, pp_dropdown, precision_dropdown, rank_slider, reserve_bytes, reserve_dropdown, seq_len_slider,
      show_sections, targets_dropdown, tp_dropdown, trainable_layers_slider, unit_radio, verdict_of, zero_stage_radio):
    # The one cell a control re-runs (each re-run cell costs marimo 6-10 ms): every control into one memmath.Run and
    # the planner's answer (kept per run); memmath_lessons.planner_views words it, draws it and fills the live views.
    # DPO (Rafailov et al. 2023): chosen and rejected answers double the batch; with a LoRA policy TRL's reference is
    # the policy with its adapters off (no second copy of the weights).
    _lora = dict(rank=rank_slider.value, targets=targets_dropdown.value)
    methods = {"full": mm.Full(), "freeze": mm.Freeze(trainable_layers=trainable_layers_slider.value),
               "adapters": mm.Adapters(bottleneck=bottleneck_slider.value), "lora": mm.LoRA(**_lora),
               "qlora": mm.QLoRA(**_lora), "dpo": mm.DPO(base=mm.LoRA(**_lora))}
    # Attention (unless chosen), dropout and activations as memmath.Run resolves them: the run the CLI and API make.
    _settings = dict(method=methods[method_dropdown.value], precision=precision_dropdown.value,
                     optimizer=optimizer_dropdown.value, batch_size=batch_slider.value, seq_len=seq_len_slider.value,
                     grad_accum_steps=accum_slider.value, checkpointing=checkpointing_switch.value,
                     n_gpus=int(n_gpus_number.value), zero_stage=zero_stage_radio.value,
                     attention=attention_radio.value, mixer_kernels=kernels_radio.value)
    layout_refused = None
    try:  # the model split t x p ways: memmath refuses by name what it does not model (LoRA with t > 1, say)
        run = mm.Run(model, **_settings, tp=tp_dropdown.value, pp=pp_dropdown.value, micro_batches=pp_dropdown.value)
    except mm.validate.FieldError as _refused:
        layout_refused = str(_refused)
        try:
            run = mm.Run(model, **_settings)
        except mm.validate.FieldError as _no_run:  # the method itself on this model (full finetuning of FP8 weights)
            planner_views.show_no_run(planner_page, str(_no_run))  # says why, and stops here
    settings = run.settings()
    gpu, reserved, unit = mm.get_gpu(gpu_dropdown.value), reserve_bytes(reserve_dropdown.value), unit_radio.value
    max_gpus = max(int(max_gpus_number.value), run.n_gpus)  # the changes' limit: never fewer GPUs than the run has
    plan, suggestions, path, limits = planned(run, gpu, reserved, max_gpus)  # kept per run (the cell above)
    result, requirement, fit, verdict = plan.memory, plan.requirement, plan.fit, plan.verdict
    peak_bytes, peak_basis = requirement.bytes, requirement.basis
    layout_words = mm.parallel.layout(run).describe() if run.tp * run.pp > 1 else None  # "1 data x 8 tensor x 2 pipeline"
    # Where the card cannot compute the recipe (pure bf16 on a T4): the run it would train instead, judged alike.
    instead_fit = plan.recipe_instead.fit if plan.cannot_run is not None and not requirement.refused else None
    # The first step, before the optimizer's states exist (one GPU's copy of the model).
    first_peak = mm.peak_memory(run, step="first") if peak_basis == "peak" and run.tp * run.pp == 1 else None
    trained_context = mm.planner.trained_context(model, model_config)  # learned positions, the config's, or the card's
    # The chart's bars: your run and the first four single changes, each by what the card must hold.
    chart_needs = {"your run": requirement, **{f"→ {_s.change}": mm.requirement(_s.run) for _s in suggestions[:4]}}
    catalog = [verdict_of(requirement, _g, reserved_bytes=reserved)  # every card, by the verdict's one rule
               for _g in sorted(mm.GPUS.values(), key=lambda _g: _g.memory_bytes)]
    # The article's comparison: each method's requirement for this model and step (a split run compared with every GPU
    # holding a copy: memmath splits t x p ways for full finetuning only), and serving the model as it is.
    _copy = run.replace(tp=1, pp=1, micro_batches=1) if run.tp * run.pp > 1 else run
    compared_needs = {_name: mm.requirement(_copy.replace(method=methods[_key])) for _name, _key in (
        ("full", "full"), ("partial (freeze)", "freeze"), ("PEFT: adapters", "adapters"), ("PEFT: LoRA", "lora"))}
    compared = {_name: _need.memory for _name, _need in compared_needs.items()}
    serving = mm.inference_memory(run.model, context_len=run.seq_len)
    parts_frame = show_sections(run, plan, suggestions, path, limits, first_peak, chart_needs, catalog, compared_needs,
                                serving, mm.planner.suggestions_frame(suggestions, unit), trained_context, methods=methods,
                                max_gpus=max_gpus, allowed_gpus=int(max_gpus_number.value), reserved=reserved, unit=unit,
                                margin=mm.FIT_MARGIN)
    planner_views.show_verdict(model, run, plan, trained_context, layout_refused, layout_words=layout_words, unit=unit,
                               split=(tp_dropdown.value, pp_dropdown.value), margin=mm.FIT_MARGIN)
    return (catalog, chart_needs, compared, compared_needs, first_peak, fit, gpu, instead_fit, layout_refused, limits,
            max_gpus, methods, parts_frame, path, peak_basis, peak_bytes, plan, requirement, reserved, result, run,
            serving, settings, suggestions, trained_context, unit, verdict)


@app.cell(hide_code=True)
def _(live_html, mo, parts_heading, takeaway_note):
    # The sections that follow from the run, under their headings, shown once here (this cell reads no control): the
    # run's cell above gives them new contents in place on every move.
    recipe_view, basis_view, far_view, changes_view, parts_view, catalog_view, comparison_view, needed_view = (
        live_html() for _ in range(8))
    # The verdict's number, how far the run goes and the changes that help are the core path; the card's reserve, the
    # assumptions and the tables that explain and compare the run wait in folds, which the run's cell fills in place.
    mo.vstack([recipe_view, mo.accordion({"The card's reserve and the run's assumptions": basis_view}),
               takeaway_note, mo.md("### How far this run goes"), far_view,
               mo.md("## Changes that would help, ranked by memory saved"), changes_view,
               mo.accordion({parts_heading: parts_view,
                             "Which cards in the catalog would hold this run?": catalog_view,
                             "Full, partial or PEFT: the article's comparison, with your numbers": comparison_view,
                             "Needed, or only wanted?": needed_view}, multiple=True)])
    return basis_view, catalog_view, changes_view, comparison_view, far_view, needed_view, parts_view, recipe_view


@app.cell
def _(mm, verdict_of):
    # What a real GPU adds beside the requirement, against the margin of one run: cited, not measured (the numbers
    # are the sources' defaults).
    margin_example = mm.requirement("llama-2-7b", batch_size=1, seq_len=512, precision="bf16", optimizer="adamw")
    margin_example_verdict = verdict_of(margin_example, "RTX 4090")
    cublas_workspace = 4096 * 2**10 * 2 + 16 * 2**10 * 8  # CUBLAS_WORKSPACE_CONFIG's default ":4096:2:16:8", in bytes
    nccl_buffer = 4 * 2**20  # NCCL_BUFFSIZE's default, 4 MiB
    return cublas_workspace, margin_example, margin_example_verdict, nccl_buffer


@app.cell(hide_code=True)
def _(cublas_workspace, format_bytes, margin_example, margin_example_verdict, mo, nccl_buffer, viz):
    _need, _v, _cublas, _nccl = margin_example, margin_example_verdict, cublas_workspace, nccl_buffer
    real_gpu_fold = mo.accordion({"What a real GPU adds: the allocator, its workspaces and buffers (cited)": mo.md(f"""
    memmath's requirement is what PyTorch's caching allocator hands to live tensors at the step's highest moment
    (`torch.cuda.max_memory_allocated()`, what its fidelity tests measure). A real card holds more:

    - **Allocated against reserved.** The allocator keeps freed blocks for reuse instead of returning them to the
      driver: `memory_allocated()` counts live tensors, `memory_reserved()` everything it holds, and `nvidia-smi`
      shows the reserved memory plus the CUDA context (PyTorch, *CUDA semantics*, "Memory management").
    - **Fragmentation.** A request can fail while enough memory is reserved in total, when no single free block is
      large enough. The out-of-memory message says so in its numbers: "Tried to allocate X" is the one request that
      failed; "total capacity Y" is the card as the driver reports it (memmath's memory); "Z is allocated by
      PyTorch" is the live tensors, the figure memmath predicts; "W is reserved by PyTorch but unallocated" (older
      releases: "W reserved in total by PyTorch", allocated included) is the cache. A large W is fragmentation.
    - **`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`** lets the allocator grow a segment in place instead of
      reserving new ones of fixed sizes, which cuts fragmentation when sizes change from step to step (the same
      page, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF").
    - **The cuBLAS workspace.** Each cuBLAS handle and stream that runs a matrix product keeps a workspace, by
      default 4,096 KiB x 2 + 16 KiB x 8 = {_cublas:,} B ({format_bytes(_cublas, "MiB")}; PyTorch, "cuBLAS
      workspaces", `CUBLAS_WORKSPACE_CONFIG`); cuBLASLt's is 32 MiB on Hopper and 4 MiB before it (NVIDIA, cuBLAS
      documentation, `cublasSetWorkspace`).
    - **NCCL's buffers.** With more than one GPU, NCCL allocates its own buffers outside PyTorch's allocator:
      {format_bytes(_nccl, "MiB")} per channel and peer by default (NVIDIA, NCCL documentation, `NCCL_BUFFSIZE`),
      and ZeRO-3 or FSDP add the buffers of their gathers.

    **How memmath's reserve and margin stand against them.** The reserve is each card's CUDA context as measured
    with lazy loading: {viz.context_reserves_words()}. Drivers and libraries differ, and kernels loaded later in the
    step add to it, so set section 4's reserve to what `nvidia-smi` shows for an idle process on yours. Since CUDA 12.2 on Linux (12.3 on Windows) the runtime
    loads a library's kernels only when first called (lazy loading, `CUDA_MODULE_LOADING=LAZY`; NVIDIA, *CUDA
    Programming Guide*, "Lazy Loading"), which can leave the context smaller than older stacks made it. The margin is 5% of the requirement: for llama-2-7b at
    1 x 512 tokens it is {format_bytes(_v.margin_bytes)} of {format_bytes(_need.bytes)}, far more than the
    cuBLAS workspace ({_cublas / _v.margin_bytes:.2%} of it) or a few NCCL channels, and it is first meant for the
    estimate's own error (held within 5% of PyTorch's measured peak). Fragmentation has no formula: a run judged
    "fits" with little to spare can still fail on a real card, and a run that fails with a large "reserved but
    unallocated" figure is the case for `expandable_segments`. These sources are cited here, not measured.
    """).style({"font-size": "0.95em"})})
    real_gpu_fold
    return (real_gpu_fold,)


@app.cell
def _(mm):
    # Bytes per trainable parameter: the article's recipe (pure 16-bit with Adam) and classic mixed precision.
    article_bytes = mm.recipes.bytes_per_parameter("bf16", "adam")
    mixed_bytes = mm.recipes.bytes_per_parameter("mixed", "adam")
    return article_bytes, mixed_bytes


@app.cell(hide_code=True)
def _(article_bytes, fsdp_fold, mixed_bytes, mo):
    # Shown here, once, after the run's sections (it reads no control); the heading and the takeaway that the
    # views' cell shows under the verdict are built here once too.
    _article, _mixed = article_bytes, mixed_bytes
    _sum = mo.md(f"""
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
    parts_heading = "Your run, part by part"
    takeaway_note = mo.callout(mo.md("""
    **The takeaway.** A training run's memory per GPU is a sum of named parts, and the method and the recipe
    decide most of them: full finetuning keeps gradients and optimizer states for every weight, LoRA and QLoRA
    for a fraction of a percent of them. Pick LoRA in section 2 and watch the verdict change.
    """), kind="info")
    mo.vstack([mo.accordion({"The sum, per GPU": _sum}), fsdp_fold])
    return parts_heading, takeaway_note


@app.cell(hide_code=True)
def _(mo, pd, viz):
    # FSDP2 and ZeRO-1 as PyTorch runs them: measured per rank over gloo (validation/sharded.py).
    from memmath_lessons.reference.measured import load_measured_sharded, measured_metadata, predict_sharded_case

    _sharded = load_measured_sharded()
    _torch = measured_metadata()["versions"]["torch"]
    _rows = []
    for _, _case in _sharded[_sharded["shape"] == "bert"].iterrows():
        for _rank in range(int(_case["world_size"])):
            _m = predict_sharded_case(_case, _rank)
            _rows.append({"engine": f"{_case['engine']} x {_case['world_size']}", "rank": _rank,
                          "weights measured (B)": _case["param_bytes_per_rank"][_rank], "memmath (B)": int(_m.weights),
                          "states measured (B)": _case["optimizer_state_bytes_per_rank"][_rank],
                          "memmath states (B)": int(_m.optimizer_states)})
    _table = pd.DataFrame(_rows)
    _shown = mo.vstack([mo.md(f"""
    **Measured, per rank.** The engines do not divide evenly. PyTorch {_torch}'s FSDP2 (`fully_shard`)
    cuts every tensor along its first dimension and pads the pieces to the same size, so BERT's
    2-row classifier costs every one of 4 ranks a row; `ZeroRedundancyOptimizer` (ZeRO-1) gives
    whole tensors' states to ranks, largest first, so the ranks differ. memmath follows both, rank by rank,
    with the engine's own way of cutting; a small BERT on the CPU over gloo:
    """), viz.plain_table(_table)])
    # Folded: the measurement serves the careful reader, not the lesson's path (shown under the sum, per GPU).
    fsdp_fold = mo.accordion({"What do FSDP2 and ZeRO-1 really store on each GPU? (measured with PyTorch)": _shown}) if len(
        _rows) else mo.md("")
    return (fsdp_fold,)


@app.cell
def _(mo, requirement_view, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.requirement_view: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md("""
    ### Five methods at a glance

    The chart below plans one common run (pure bf16, AdamW, 512 tokens, one GPU, freezing all but the
    last block, adapters of width 64, LoRA and QLoRA at rank 8 on q and v) for a few models and batch
    sizes, every method side by side against three card sizes. Each bar stacks the parts and what the
    step's peak adds to them; the black tick and the number beside the bar are what the card must hold,
    the number the verdict and the changes above judge. Where a step peaks below the sum of its parts (the
    activations are freed as the backward pass goes), the bar runs past its tick, faded there. Its inputs sit under the chart and redraw it in the browser from
    numbers memmath computed in advance, so they work in this static copy of the workbook, where the
    planner's own controls above cannot move.
    """), requirement_view.five_methods()]) if site_charts.is_static_export() else None
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


@app.cell
def _(mm):
    # Every answer on one basis, the verdict's: memmath.requirement (the step's peak where memmath models it, else the
    # sum of the parts), judged on the card as plan_training judges it (the CUDA context reserved, 5% kept free).
    _s = dict(precision="bf16", optimizer="adamw", batch_size=1, seq_len=512, attention="sdpa")
    problem_full = mm.plan_training("llama-2-7b", "RTX 4090", **_s)  # problem 1's run
    # QLoRA's repository casts the LoRA layers to bf16 when it trains in bf16 (artidoro/qlora, qlora.py,
    # get_accelerate_model); peft's default keeps them in fp32.
    problem_qlora = {_fmt: mm.plan_training("llama-65b", "RTX A6000", precision="bf16", optimizer="adamw", batch_size=1,
                                 seq_len=512, checkpointing=True, attention="sdpa",
                                 method=mm.QLoRA(rank=64, targets="all", adapter_format=_fmt)) for _fmt in ("bf16", "fp32")}
    problem_data_parallel = [mm.requirement("llama-2-7b", **_s, n_gpus=n) for n in (1, 8)]
    problem_zero3 = mm.requirement("llama-2-7b", **_s, n_gpus=8, zero_stage=3)
    try:
        mm.planner.config_from_text('{"model_type": "falcon", "hidden_size": 4544}')
    except ValueError as _error:
        problem_falcon = str(_error)
    return problem_data_parallel, problem_falcon, problem_full, problem_qlora, problem_zero3


@app.cell(hide_code=True)
def _(format_bytes, literature, mo, problem_data_parallel, problem_falcon, problem_full, problem_qlora, problem_zero3):
    _full, _q, _dp, _z3, _falcon = problem_full, problem_qlora, problem_data_parallel, problem_zero3, problem_falcon
    _words = lambda need: ("at the step's peak" if need.basis == "peak" else  # noqa: E731
                           f"as {need.words} ({need.reason})")
    _reserve = format_bytes(_full.reserved_bytes, "GiB")
    _fits = lambda plan: "it fits" if plan.fits else "it does not fit"  # noqa: E731
    mo.vstack([
        mo.md("## Problems"),
        mo.md("Each answer is what the card must hold, as the verdict counts it."),
        mo.md("**1.** Full finetuning of Llama-2-7B in pure bf16 with AdamW, batch 1, 512 tokens: how much "
              f"per GPU, and what is the smallest change that fits it on an RTX 4090 ({_reserve} reserved)?"),
        mo.accordion({"Answer": mo.md(f"{format_bytes(_full.requirement.bytes)} {_words(_full.requirement)}. "
                                      "The planner's path: " + ", then ".join(
                                          f"{s.change} ({format_bytes(s.total)})" for s in _full.path) + ".")}),
        mo.md("**2.** QLoRA's paper finetuned a 65B model on one 48 GB GPU. Plan LLaMA-65B with QLoRA rank 64 on "
              "all linear layers, its adapters in bf16 as the QLoRA repository trains them, batch 1, 512 tokens, "
              "checkpointing: does it fit an RTX A6000?"),
        mo.accordion({"Answer": mo.md(
            f"{format_bytes(_q['bf16'].requirement.bytes)} {_words(_q['bf16'].requirement)} against "
            f"{format_bytes(_q['bf16'].fit.available_bytes)} usable: {_fits(_q['bf16'])} "
            f"({literature.cite('qlora_65b_gpu')}). With peft's default fp32 adapters the same run needs "
            f"{format_bytes(_q['fp32'].requirement.bytes)} {_words(_q['fp32'].requirement)}: {_fits(_q['fp32'])}.")}),
        mo.md("**3.** Eight GPUs without ZeRO: does problem 1's run (Llama-2-7B, full finetuning, batch 1, 512 "
              "tokens) need less memory per GPU than on one?"),
        mo.accordion({"Answer": mo.md(
            f"No: {format_bytes(_dp[1].bytes)} per GPU {_words(_dp[1])}, against {format_bytes(_dp[0].bytes)} "
            "on one: each GPU keeps everything one GPU keeps, and PyTorch DDP's all-reduce buckets, a second copy of the "
            "gradients, besides (DDP(gradient_as_bucket_view=True) makes the gradients views into them). "
            f"Plain data parallelism copies everything; ZeRO stage 3 brings it to {format_bytes(_z3.bytes)} per "
            f"GPU {_words(_z3)}, of which the activations ({format_bytes(_z3.memory.activations)}) are not "
            "sharded: each GPU keeps its own batch's.")}),
        mo.md("**4.** Paste `{\"model_type\": \"falcon\", \"hidden_size\": 4544}` as the config. What does the planner say?"),
        mo.accordion({"Answer": mo.md(f"A message, not a crash: \"{_falcon}\".")}),
    ])
    return


if __name__ == "__main__":
    app.run()
