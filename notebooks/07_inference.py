# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "7. Inference"
# description = "Serving memory: weights in the serving format, the KV cache with grouped-query attention, where 'weights x 1.2' breaks, and decode speed."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Inference memory", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo, viz):
    mo.md(f"""
    # Inference memory

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** Serving a model and training it are **two separate memory calculations**: the
    article points to EleutherAI's *Transformer Math 101* (Anthony et al., 2023) for training and to
    Carol Chen's *Transformer Inference Arithmetic* (kipply's blog, 2022) for inference. A served
    model keeps no gradients, no optimizer states and no activations for a backward pass, the parts
    that made {viz.lesson_link("02_full_finetuning", "full finetuning")} so expensive. Instead it keeps
    a **KV cache** that grows with every token of every conversation it serves.

    **The control.** The context: how many tokens each conversation holds. The model is a preset or your
    own `config.json`, pasted as in {viz.lesson_link("08_planner", "the planner")}.
    """)
    return


@app.cell
def _():
    import marimo as mo
    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons.reference import literature
    from memmath_lessons import viz
    from memmath_lessons.static_charts import live_only_notice
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    import altair as alt
    import numpy as np
    import pandas as pd
    from memmath_lessons import pasted_config, site_charts
    return (alt, format_bytes, literature, live_chart, live_html, live_only_notice, mm, mo, np, pasted_config,
            pd, site_charts, to_unit, viz)


@app.cell
def _(mm):
    # The menus' choices: every decoder preset (an encoder generates no tokens and keeps no cache) and every card.
    decoder_names = [name for name, shape in mm.PRESETS.items() if shape.family != "bert"]
    gpu_names = list(mm.GPUS)
    return decoder_names, gpu_names


@app.cell
def _(mm):
    # What the page compares every run with: the largest card in the catalog, the rule of thumb's factor
    # (serving memory ~ weights x 1.2), the six models of the grouped-query table, and the card its fold explains.
    largest_gpu = max(mm.GPUS.values(), key=lambda g: g.memory_bytes)
    rule_factor = mm.inference.RULE_OF_THUMB_FACTOR
    gqa_models = {_n: mm.PRESETS[_n] for _n in ("llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "llama-2-70b",
                                                "llama-3-70b")}
    rtx_4090 = mm.get_gpu("RTX 4090")
    return gqa_models, largest_gpu, rtx_4090, rule_factor


@app.cell(hide_code=True)
def _(decoder_names, gpu_names, live_only_notice, mo, pasted_config):
    # Every control in one cell that reads no other control: moving one re-runs only the cell that reads them.
    # The default run fits the default card (Llama-3-8B at its trained 8,192 tokens on an RTX 4090): the context's
    # end (128K tokens) makes its cache pass its weights and the run no longer fit.
    context_slider = mo.ui.slider(steps=[2**k for k in range(7, 18)], value=8192, show_value=True,
                                  label="Context (tokens per sequence)")
    _decoders = decoder_names
    source_radio = mo.ui.radio(list(pasted_config.SOURCES), value="preset", inline=True, label="Model from")
    model_dropdown = mo.ui.dropdown(_decoders, value="llama-3-8b", label="Preset")
    # google/gemma-3-1b-pt's config.json (the fields that shape the model): 4 of its 26 layers attend to the whole
    # context, the other 22 to a sliding window of 512 tokens.
    config_text_area = mo.ui.text_area(value="""{
      "model_type": "gemma3_text",
      "hidden_size": 1152,
      "intermediate_size": 6912,
      "num_hidden_layers": 26,
      "num_attention_heads": 4,
      "num_key_value_heads": 1,
      "head_dim": 256,
      "vocab_size": 262144,
      "hidden_activation": "gelu_pytorch_tanh",
      "sliding_window": 512,
      "sliding_window_pattern": 6,
      "query_pre_attn_scalar": 256,
      "max_position_embeddings": 32768,
      "rope_theta": 1000000,
      "torch_dtype": "bfloat16"
    }""", rows=10, full_width=True, label="Your model's config.json (paste it here; edit and click outside to read it)")
    weights_format_dropdown = mo.ui.dropdown(["fp32", "bf16", "fp8_e4m3", "int8", "int4", "nf4"], value="bf16",
                                             label="Weights format")
    kv_format_dropdown = mo.ui.dropdown(["fp32", "bf16", "fp8_e4m3", "int8"], value="bf16", label="KV cache format")
    batch_slider = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=1, show_value=True,
                                label="Batch (sequences served at once)")
    attention_radio = mo.ui.radio(["sdpa", "eager"], value="sdpa", inline=True, label="Attention kernel")
    gpu_dropdown = mo.ui.dropdown(gpu_names, value="RTX 4090", label="GPU")
    unit_radio = mo.ui.radio(["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([
        live_only_notice(), context_slider,
        mo.md("The rest of the run (the whole page follows these):").style({"font-size": "0.9em"}),
        mo.hstack([source_radio, model_dropdown], justify="start"),
        mo.hstack([weights_format_dropdown, kv_format_dropdown], justify="start"),
        mo.hstack([batch_slider, attention_radio], justify="start"),
        mo.hstack([gpu_dropdown, unit_radio], justify="start"),
    ])
    return (attention_radio, batch_slider, config_text_area, context_slider, gpu_dropdown, kv_format_dropdown,
            model_dropdown, source_radio, unit_radio, weights_format_dropdown)


@app.cell
def _(config_text_area, mm, model_dropdown, pasted_config, source_radio):
    # The model: the preset, or the pasted config.json read as JSON (mm.planner.config_from_text); a paste that cannot be
    # used gives model None and the reason, shown in the page (next cell), never a traceback.
    model, model_error = pasted_config.read_model(source_radio.value, model_dropdown.value, config_text_area.value)
    if model is not None and model.family == "bert":  # an encoder generates no tokens: it keeps no KV cache
        model, model_error = None, (f"the text describes an encoder ({model.family} layout), which reads text but "
                                    "generates no tokens, so it keeps no KV cache; this lesson serves decoders")
    # Learned positions (GPT-2, GPT-3) or the config's max_position_embeddings: the longest context it was trained on.
    trained_context = mm.planner.trained_context(model) if model is not None else None
    return model, model_error, trained_context


@app.cell(hide_code=True)
def _(config_text_area, mo, model, model_error, pasted_config, source_radio, trained_context, viz):
    # The model's facts: what sets its cache (layers, key/value heads, sliding windows) and, for a mixture of
    # experts, the parameters a token passes through (ModelShape.active_params). With 'paste config.json' the paste
    # box shows here too: this cell re-runs on every paste anyway (it reads the model read from it).
    if model is None:
        _facts = mo.callout(mo.md(pasted_config.error_markdown(model_error)), kind="danger")
    else:
        _name = (f"Your config.json ({pasted_config.pasted_text(model.name)})" if source_radio.value != "preset"
                 else model.name)
        _active = (f", of which **{model.active_params:,} ({viz.short_count(model.active_params)}) are active** per "
                   f"token: the shared tensors and {model.experts_per_tok} of its {model.n_experts} experts in each "
                   "layer" if model.n_experts else "")
        _windows = [w for w in model.attention_windows if w is not None]
        _sizes = " or ".join(f"{w:,}" for w in sorted(set(_windows)))
        _sliding = (f" {len(_windows)} of its {model.n_layers} layers attend over a **sliding window** of the last "
                    f"{_sizes} tokens, so their cache stops growing there." if _windows else "")
        _trained = trained_context
        _facts = mo.callout(mo.md(
            f"**{_name}**: {model.n_params:,} parameters ({viz.short_count(model.n_params)}){_active}; "
            f"{model.n_layers} layers, {model.n_heads} query heads and {model.n_kv_heads} key/value "
            f"head{'s' if model.n_kv_heads > 1 else ''} of "
            f"{model.head_dim} values, vocabulary {model.vocab_size:,}"
            + (f"; trained on up to {_trained:,} tokens." if _trained else ".") + _sliding), kind="info")
    mo.vstack([config_text_area, _facts]) if source_radio.value != pasted_config.SOURCES[0] else _facts
    return


@app.cell(hide_code=True)
def _(bars_chart, cards_view, mo, pasted_config, pd, run_view, sweep_chart, sweep_draw, viz):
    def show_no_answer(gpu, unit, model=None, kv_format=None, refused=None):
        """Views and charts emptied: no model to serve (a pasted config.json that cannot be used), or no answer for
        the cache format (then the callout that says why)."""
        if refused is None:
            _message, _title = "*No model to serve: fix the pasted config.json above, or choose **preset**.*", "No model to serve"
        else:
            _name = pasted_config.pasted_text(model.name)  # a pasted config's name shows as typed
            _message = f"*No answer: {_name} cannot keep its cache in {kv_format} (the note above).*"
            _title = "No answer for this cache format"
        for _view in (run_view, cards_view):
            _view.update(mo.md(_message))
        bars_chart.update(viz.stacked_bars_output(viz.breakdown_long({}, unit), unit, title=_title))
        sweep_chart.update(pd.DataFrame(columns=["kind", "context", "label", "order", "size", "what"]),
                           draw=sweep_draw(gpu.name, unit), key=(unit, gpu.name))
        if refused is not None:
            return mo.callout(mo.md(f"**No answer for this cache format.** {pasted_config.pasted_text(str(refused))}."),
                              kind="warn")

    def rate_words(t):
        """A decode rate as the page writes it (0.037 tokens/s, not 0.0)."""
        return f"{t:,.1f}" if t >= 0.1 else f"{t:.2g}"

    def format_cards(fit_frame, decode_bounds, unit):
        """Every card of the catalog as the fold shows it: the decode bound only where the run fits."""
        return fit_frame.assign(**{
            f"memory ({unit})": fit_frame[f"memory ({unit})"].round(2), "fits": fit_frame["fits"].map({True: "yes", False: "no"}),
            f"headroom ({unit})": [f"{abs(h):,.2f} {unit} {'spare' if h >= 0 else 'short'}"
                                   for h in fit_frame[f"headroom ({unit})"]],
            "decode bound (tokens/s)": [rate_words(t) if t is not None else "does not fit" for t in decode_bounds],
        }).drop(columns=["kind"])

    return format_cards, rate_words, show_no_answer


@app.cell(hide_code=True)
def _():
    def cache_recipe(model, context_len, batch_size, kv_format, kv_format_bits):
        """The KV cache's recipe in words: kipply 2022, 2 (a key and a value) x kv heads x head dim x bytes, for every
        token each layer holds: all of the context in a full-attention layer, at most its window in a sliding-window
        layer (mm.kv_cache_bytes: transformers' DynamicSlidingWindowLayer keeps the last sliding_window tokens)."""
        _seqs = "sequence" if batch_size == 1 else "sequences"
        _kv_bytes = kv_format_bits / 8
        _full = sum(w is None or w >= context_len for w in model.attention_windows)  # layers that hold every token
        _windows = sorted({w for w in model.attention_windows if w is not None and w < context_len})
        _groups = ([(_full, "full-attention " if _windows else "", f"{context_len:,} tokens")] if _full else []) + [
            (sum(x == w for x in model.attention_windows), "sliding-window ", f"{w:,} tokens (the window)") for w in _windows]
        _per = (f"{model.n_kv_heads:,} key/value head{'s' if model.n_kv_heads > 1 else ''} x {model.head_dim:,} x "
                f"{_kv_bytes:g} B ({kv_format})")
        if len(_groups) == 1:  # one kind of layer: 2 x layers x kv heads x head dim x bytes x tokens x sequences
            _recipe = f"2 (key and value) x {_groups[0][0]:,} {_groups[0][1]}layers x {_per} x {_groups[0][2]}"
        else:  # full layers hold the context, sliding ones their window: 2 x kv heads x head dim x bytes x the sum
            _recipe = f"2 (key and value) x {_per} x (" + " + ".join(f"{n:,} {k}layers x {t}" for n, k, t in _groups) + ")"
        _recipe += f" x {batch_size:,} {_seqs}"
        _slides = [w for w in model.attention_windows if w is not None]
        if _slides and not _windows:  # sliding layers whose window holds the whole context
            _recipe += (f" (its {len(_slides)} sliding-window layers keep the last {max(_slides):,} tokens, which at "
                        "this context is all of them)")
        return _recipe

    return (cache_recipe,)


@app.cell(hide_code=True)
def _(format_bytes, largest_gpu, mo):
    def serving_warnings(name, model, memory, gpu, unit, context_len, batch_size, attention, fused_working_set,
                         weights_format, kv_format, trained_context):
        """Warnings: past the trained context, a working set no card holds, fp8 without fp8 arithmetic."""
        _f = lambda n: format_bytes(n, unit)  # noqa: E731
        _seqs = "sequence" if batch_size == 1 else "sequences"
        _warn = []
        if trained_context is not None and context_len > trained_context:
            _warn.append(mo.callout(mo.md(
                f"{name} was trained on at most {trained_context:,} tokens, so it cannot really read "
                f"{context_len:,} tokens; the arithmetic still shows what the memory would be."), kind="warn"))
        _largest = largest_gpu
        _notes = []
        if attention == "eager":
            _fused = fused_working_set
            if memory.working_set > 2 * _fused:
                _notes.append(
                    f"Most of the {_f(memory.working_set)} working set is eager attention's scores: it builds a "
                    f"context x context matrix for every head of every sequence at once ({model.n_heads} heads x "
                    f"{context_len:,} x {context_len:,} scores x {batch_size:,} {_seqs}), which grows with the square "
                    f"of the context. With fused attention (sdpa), which never stores them, the working set would be "
                    f"{_f(_fused)}.")
        _usable = _largest.memory_bytes - _largest.cuda_context_bytes  # what the largest card leaves after its context
        if memory.total > _usable:
            _times = memory.total / _usable  # above 1 here; "1.4 times", "12 times", never "1 times"
            _how = ("more than" if _times < 1.05 else f"{_times:,.1f} times" if _times < 10 else f"{_times:,.0f} times")
            _notes.append(f"No single GPU holds this: {_f(memory.total)} is {_how} what the largest card in the catalog "
                          f"can use ({_largest.name}: {_f(_usable)} of its {_f(_largest.memory_bytes)}, after the CUDA "
                          "context). It is what the formula says, not a run anyone could make on one card.")
        if any(f.startswith("fp8") for f in (weights_format, kv_format)) and gpu.computes_fp8 is False:
            _notes.append(f"The {gpu.name} ({gpu.architecture}) has no fp8 arithmetic (fp8 tensor cores start with Ada and "
                          f"Hopper): fp8 values are stored in 8 bits as counted here and converted to 16 bits for each "
                          f"matrix multiply, so the memory holds but the math runs in "
                          f"{'bf16' if gpu.computes_bf16 else 'fp16'}.")
        if _notes:
            _warn.append(mo.callout(mo.md(" ".join(_notes)), kind="warn"))
        return _warn

    return (serving_warnings,)


@app.cell(hide_code=True)
def _(format_bytes, rate_words):
    def decode_words(model, memory, gpu, unit, fits, batch_size, per_sequence, all_sequences, read_per_step):
        """Decode: bandwidth over the bytes each step reads, only on a card that holds the run. A mixture of experts
        reads its shared tensors and the experts its tokens reach (memory.weights_read; mm.inference's
        routed_experts_reached: k of E per layer at batch 1, at most min(E, batch x k) at a larger batch)."""
        _f = lambda n: format_bytes(n, unit)  # noqa: E731
        _rate = rate_words
        _stored = memory.weights + memory.quantization_constants
        _what = "weights and cache"
        if model.n_experts:
            _reached = min(model.n_experts, batch_size * model.experts_per_tok)
            _what = (f"the shared weights and {_reached} of the {model.n_experts} experts in each layer, "
                     f"{_f(memory.weights_read)} of the {_f(_stored)} of weights, plus the cache")
            _what += ("" if batch_size == 1 else
                      f"; we assume the {batch_size} tokens of a step reach min({model.n_experts}, {batch_size} x "
                      f"{model.experts_per_tok}) = {_reached} distinct experts per layer, the most they can: tokens that "
                      "share experts read less")
        if fits:
            return (f"Decoding on it reads {_f(read_per_step)} per step ({_what}) at "
                    f"{gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s: at most **{_rate(per_sequence)} tokens/s per sequence**"
                    + (f", {_rate(all_sequences)} tokens/s across the batch of {batch_size}." if batch_size > 1 else "."))
        return (f"So it does not decode there at all. The bandwidth arithmetic alone, "
                f"{gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s over the {_f(read_per_step)} read per step "
                f"({_what}), would "
                f"give {_rate(per_sequence)} tokens/s per sequence, but only on a card that holds the run: the first fold "
                "below gives the bound for those cards only.")

    return (decode_words,)


@app.cell(hide_code=True)
def _(bars_chart, format_bytes, gqa_models, gqa_view, mo, np, pd, sweep_chart, sweep_draw, to_unit, viz):
    def _windowed_note(gqa_frame, kv_format):
        """Why a row shows "-": the format needs transformers' quantized cache, which a windowed model cannot have."""
        refused = [str(name) for name, kb in zip(gqa_frame["model"], gqa_frame["KB per token"]) if kb == "-"]
        if not refused:
            return ""
        return (f" A {kv_format} cache needs transformers' quantized cache, which takes only models whose layers all "
                f"attend over the whole context: a sliding window rules it out, so {', '.join(refused)} shows -.")

    def show_charts_and_gqa(memory, gpu, unit, fit, sweep, sweep_contexts, rule_limit, gqa_frame, context_len,
                            batch_size, kv_format):
        """The live charts (the run's bars here, the context sweep in its section below: rows only, drawn once) and
        the grouped-query attention fold."""
        _gqa = gqa_models["llama-3-8b"]  # Mistral-7B has the same 32 query and 8 key/value heads
        gqa_view.update(mo.vstack([mo.md(f"""
        **Grouped-query attention** (GQA; Ainslie et al. 2023) lets several query heads share one key/value
        head. Llama-2-7B and Llama-2-13B keep one key/value head per query head (multi-head attention);
        Llama-3-8B and Mistral-7B keep {_gqa.n_kv_heads} for {_gqa.n_heads} query heads, so their cache per token is
        {_gqa.n_heads} / {_gqa.n_kv_heads} = {_gqa.n_heads // _gqa.n_kv_heads} times smaller. Mistral-7B's layers also
        attend over a sliding window of {gqa_models["mistral-7b"].sliding_window:,} tokens, so past that context its cache
        stops growing. The table uses this run's context ({context_len:,} tokens), batch ({batch_size:,}) and cache
        format ({kv_format}).{_windowed_note(gqa_frame, kv_format)}
        """), viz.plain_table(gqa_frame)]))
        bars_chart.update(viz.stacked_bars_output(viz.breakdown_long({"detailed sum": memory}, unit), unit,
                                                  title="Where serving memory goes", capacity_bytes=fit.available_bytes,
                                                  capacity_label=f"{gpu.name}: {format_bytes(fit.available_bytes, unit)} usable"))
        _parts = [(i, p, np.broadcast_to(v, sweep_contexts.shape)) for i, (p, v) in enumerate(sweep.parts().items())]
        _in_range = sweep_contexts[0] <= rule_limit <= sweep_contexts[-1]
        _sweep_frame = pd.DataFrame(
            [{"kind": "part", "context": int(c), "label": viz.ALL_LABELS[p], "order": i, "size": to_unit(int(v[j]), unit)}
             for j, c in enumerate(sweep_contexts) for i, p, v in _parts]
            + [{"kind": "rule", "context": int(c), "size": to_unit(int(r), unit)}
               for c, r in zip(sweep_contexts, np.broadcast_to(sweep.rule_of_thumb, sweep_contexts.shape))]
            + [{"kind": "gpu", "size": to_unit(fit.available_bytes, unit), "what": f"{gpu.name}: usable memory"}]
            + ([{"kind": "limit", "context": rule_limit, "what": f"rule holds to {rule_limit:,} tokens"}] if _in_range else []),
            columns=["kind", "context", "label", "order", "size", "what"])
        sweep_chart.update(_sweep_frame, draw=sweep_draw(gpu.name, unit), key=(unit, gpu.name))

    return (show_charts_and_gqa,)


@app.cell(hide_code=True)
def _(cache_recipe, cards_view, decode_words, format_bytes, mo, pasted_config, rule_factor, run_view,
      serving_warnings, show_charts_and_gqa, to_unit, viz):
    def show_serving(model, gpu, unit, plan, weights_format_kind, kv_format_bits, context_len, batch_size, attention,
                     fused_working_set, weights_format, kv_format, trained_context, rule_limit, per_sequence,
                     all_sequences, read_per_step, fit_frame, gqa_frame, sweep, sweep_contexts):
        """The number, the headline stats and the verdict, into the live view below, the charts and the folds'
        tables; returns the warnings that apply, the one thing the run's cell shows itself."""
        memory, _fit = plan.memory, plan.fit
        _name = pasted_config.pasted_text(model.name)  # a pasted config's name shows as typed
        _f = lambda n: format_bytes(n, unit)  # noqa: E731
        # A part under a tenth of the unit in a smaller unit (45.09 MB, not 0.05 GB); the same string wherever it shows.
        _small = lambda n: _f(n) if to_unit(n, unit) >= 0.1 else viz.readable_size(n, unit)  # noqa: E731
        _seqs = "sequence" if batch_size == 1 else "sequences"
        # Which tensors a quantized format converts: as transformers' bitsandbytes integration does (only nn.Linear).
        _layout = ("" if weights_format_kind == "float" else
                   f"The {memory.weights_format} weights are counted as transformers loads a model with bitsandbytes, "
                   f"which converts only its `nn.Linear` layers ({memory.weights_layout}). ")
        _recipe = cache_recipe(model, context_len, batch_size, kv_format, kv_format_bits)
        # The verdict, with the card's CUDA context reserved as the planner (lesson 8) reserves it.
        _instead = " or ".join(f"{_c.change} ({_f(_c.total)})" for _c in plan.instead)
        _verdict = (f"fits on one {gpu.name}, with {_f(_fit.headroom_bytes)} to spare" if plan.fits else
                    f"does **not** fit on one {gpu.name}: {_f(-_fit.headroom_bytes)} short"
                    + (f"; what fits instead, with 5% to spare: {_instead}" if _instead else ""))
        _reserve = (f"Of the card's {_f(gpu.memory_bytes)} ({gpu.memory_bytes // 2**20:,} MiB as the driver reports it), "
                    f"{gpu.cuda_context_bytes // 2**20:,} MiB ({format_bytes(gpu.cuda_context_bytes, 'GiB')}) are kept "
                    f"back for the CUDA context, which the driver takes before PyTorch allocates anything "
                    f"({gpu.context_reserve.family} family: {gpu.context_reserve.lazy_source}): "
                    f"{_f(_fit.available_bytes)} are usable.")
        _warn = serving_warnings(_name, model, memory, gpu, unit, context_len, batch_size, attention, fused_working_set,
                                 weights_format, kv_format, trained_context)
        # "Weights x 1.2": its allowance, and up to which context it covers the cache and working set at this batch.
        _stored = memory.weights + memory.quantization_constants
        _where = ("It does not cover the cache and working set even for a single token." if rule_limit == 0 else
                  f"It covers the cache and working set up to **{rule_limit:,} tokens** per sequence, and no further.")
        _decode = decode_words(model, memory, gpu, unit, plan.fits, batch_size, per_sequence, all_sequences, read_per_step)
        cards_view.update(fit_frame)
        show_charts_and_gqa(memory, gpu, unit, _fit, sweep, sweep_contexts, rule_limit, gqa_frame, context_len,
                            batch_size, kv_format)
        run_view.update(mo.Html(mo.md(f"""
        **The number.** {_name}'s KV cache at this context: **{_small(memory.kv_cache)}** = {_recipe}.
        With the weights in {memory.weights_format} and the working set of one forward pass, serving it takes:
        """).text + viz.stat_row([
                (_f(_stored), "Weights (+ constants)"), (_small(memory.kv_cache), "KV cache"),
                (_small(memory.working_set), "Working set"), (_f(memory.total), "Total"),
                (_f(memory.rule_of_thumb), f"Weights x {rule_factor:g}")]).text + mo.md(f"""
        Serving **{_name}** with weights in {memory.weights_format} and the cache in {memory.kv_format},
        {batch_size} {_seqs} of {context_len:,} tokens: the detailed sum is **{_f(memory.total)}**, which
        {_verdict}. {_layout}{_reserve} {_decode}

        The rule of thumb, weights x {rule_factor:g}, says {_f(memory.rule_of_thumb)}: an allowance of
        {_f(memory.rule_of_thumb - _stored)} ({rule_factor - 1:.0%} of {_f(_stored)}) for everything
        besides the weights. {_where}
        """).text))
        return mo.vstack(_warn) if _warn else None

    return (show_serving,)


@app.cell
def _(attention_radio, batch_slider, context_slider, format_cards, gpu_dropdown, gqa_models,
      kv_format_dropdown, mm, mo, model, np, pd, show_no_answer, show_serving, to_unit, trained_context,
      unit_radio, weights_format_dropdown):
    # The one cell a control re-runs (every re-run cell costs marimo ~6-10 ms): the run, planned as `memmath infer`
    # plans it, and what the page compares it with. The hidden cells above put it in the live views and charts; this
    # cell shows only the warnings that apply.
    gpu, unit = mm.get_gpu(gpu_dropdown.value), unit_radio.value
    if model is None:  # a pasted config.json that cannot be used: the model's cell says why; views and charts empty
        show_no_answer(gpu, unit)
    mo.stop(model is None)
    context_len, batch_size = context_slider.value, batch_slider.value
    weights_format, kv_format, attention = weights_format_dropdown.value, kv_format_dropdown.value, attention_radio.value
    # The question as one value (mm.Serve), planned as `memmath infer` plans it: the memory, the verdict, what fits instead.
    serve = mm.Serve(model, weights_format=weights_format, kv_format=kv_format, batch_size=batch_size,
                     context_len=context_len, attention=attention)
    try:  # a cache format transformers cannot build for this model is refused by name (a hybrid's states: no fp8)
        plan = mm.plan_serving(serve, gpu)
    except mm.validate.FieldError as _refused:  # views and charts emptied, as for a config that cannot be used
        mo.stop(True, show_no_answer(gpu, unit, model, kv_format, _refused))
    memory = plan.memory
    _serve = {_k: _v for _k, _v in serve.settings().items() if _k != "context_len"}  # the sweep below varies the context
    # "Weights x 1.2": up to which context it covers the cache and working set at this batch.
    rule_limit = mm.inference.rule_of_thumb_context_limit(model, **_serve)
    # Decode: bandwidth over the bytes each step reads (kipply 2022), per sequence and across the batch.
    per_sequence = mm.inference.decode_tokens_per_second(memory, gpu)
    all_sequences = per_sequence * batch_size
    read_per_step = memory.read_per_step
    # With eager attention: the working set fused attention (sdpa), which never stores the scores, would need.
    _fused = (mm.inference_memory(model, context_len=context_len, **{**_serve, "attention": "sdpa"}).working_set
              if attention == "eager" else None)
    # Every card of the catalog, each with its own CUDA context reserved; the decode bound only where the run fits.
    _cards = mm.gpus.fit_table(memory.total, unit=unit)
    fit_frame = format_cards(_cards, [mm.inference.decode_tokens_per_second(memory, g) if fits else None
                                      for g, fits in zip(_cards["gpu"], _cards["fits"])], unit)
    # Grouped-query attention: six models' caches at this context, batch and cache format ("-" where transformers
    # builds no cache in that format for the model: a quantized cache takes full-attention layers only).
    _no_cache = {_n for _n in gqa_models if mm.inference.quantized_cache_refusal(_n, kv_format)}
    gqa_frame = pd.DataFrame([{
        "model": _n, "layers": _m.n_layers, "heads": _m.n_heads, "kv heads": _m.n_kv_heads, "head dim": _m.head_dim,
        "cut (heads / kv)": _m.n_heads // _m.n_kv_heads,
        "KB per token": "-" if _n in _no_cache else round(mm.kv_cache_bytes(_n, context_len=1, kv_format=kv_format) / 1e3, 1),
        f"cache ({unit})": "-" if _n in _no_cache else round(to_unit(mm.kv_cache_bytes(
            _n, context_len=context_len, batch_size=batch_size, kv_format=kv_format), unit), 2),
    } for _n, _m in gqa_models.items()])
    # The context sweep, 128 to 128K tokens: one call for the whole sweep.
    _sweep_contexts = np.array([2**k for k in range(7, 18)])
    _sweep = mm.inference_memory(model, context_len=_sweep_contexts, **_serve)
    show_serving(model, gpu, unit, plan, mm.get_format(weights_format).kind, mm.get_format(kv_format).bits,
                 context_len, batch_size, attention, _fused, weights_format, kv_format, trained_context, rule_limit,
                 per_sequence, all_sequences, read_per_step, fit_frame, gqa_frame, _sweep, _sweep_contexts)
    return (all_sequences, attention, batch_size, context_len, fit_frame, gpu, gqa_frame, kv_format, memory,
            per_sequence, plan, read_per_step, rule_limit, serve, unit, weights_format)


@app.cell(hide_code=True)
def _(format_bytes, live_html, mo, rtx_4090, viz):
    # The run's number and verdict and the folds' tables, shown once: the run's cell above fills them in place on
    # every move.
    run_view, cards_view, gqa_view = live_html(), live_html(), live_html()
    _card = rtx_4090
    _cards = mo.vstack([mo.md(f"""
    Every card in the catalog against the detailed total, each with its own CUDA context kept back
    ({viz.context_reserves_words()}); the last column is the decode bound, for the cards that hold the run. "marketed" is
    the size on the box, which counts in binary units (GiB); "memory" is what the driver reports (nvidia-smi's
    total), the same or a little less: an {_card.name} sold as "{_card.marketed}" reports
    {_card.memory_bytes // 2**20:,} MiB, which is {format_bytes(_card.memory_bytes, "GiB")} or
    {format_bytes(_card.memory_bytes)}.
    """), cards_view])
    mo.vstack([run_view, mo.accordion({"Which GPUs hold this run, and how fast would each decode it?": _cards,
                                       "How much does grouped-query attention shrink the cache?": gqa_view})])
    return cards_view, gqa_view, run_view


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(mo, rule_factor):
    mo.callout(mo.md(f"""
    **The takeaway.** A served model's memory is its weights plus a cache that grows linearly with the
    context and the batch: double either and the cache doubles. For short prompts the weights decide
    and "weights x {rule_factor:g}" is a fair estimate; at long contexts and large batches the
    cache decides whether the model fits. Move the context to its end and watch the cache pass the weights.
    """), kind="info")
    return


@app.cell
def _(mm):
    # Llama-2-13B's 16-bit cache by hand: one token, and one conversation of 8,192 tokens.
    kv_13b_per_token = mm.kv_cache_bytes("llama-2-13b", context_len=1)
    kv_13b_8k = mm.kv_cache_bytes("llama-2-13b", context_len=8192)
    return kv_13b_8k, kv_13b_per_token


@app.cell(hide_code=True)
def _(format_bytes, gqa_models, kv_13b_8k, kv_13b_per_token, mo, viz):
    _per_token, _article = kv_13b_per_token, kv_13b_8k
    _m, _mistral = gqa_models["llama-2-13b"], gqa_models["mistral-7b"]
    mo.vstack([mo.md("""
    ## Three parts

    | part | what it holds | bytes |
    |:---|:---|:---|
    | weights | every parameter in the serving format | parameters x bits / 8, plus one scale per block for integer formats |
    | KV cache | the key and value vector of every past token, in every layer | 2 x layers x kv_heads x head_dim x bytes x tokens x sequences (a sliding-window layer: at most its window of tokens) |
    | working set | the tensors one forward pass creates and frees | largest over the model's phases |
    """), mo.accordion({"Go deeper: one token's cache by hand, and sliding windows": mo.md(f"""
    The **2** in the KV cache is one key plus one value (kipply 2022). For Llama-2-13B ({_m.n_layers} layers,
    {_m.n_kv_heads} key/value heads of {_m.head_dim} numbers) in a 16-bit format, one token costs
    2 x {_m.n_layers} x {_m.n_kv_heads} x {_m.head_dim} x 2 B = **{_per_token:,} B**. A
    conversation of 8,192 tokens then needs {_per_token:,} B x 8,192 =
    **{format_bytes(_article)}** of cache, for one sequence. Each new token attends to every
    earlier one, so a server keeps the keys and values it has computed instead of recomputing them;
    models with grouped-query attention keep fewer key/value heads and a smaller cache (the fold
    above compares six models). A layer with a **sliding window** (Mistral-7B's {_mistral.n_layers} layers
    over {_mistral.sliding_window:,} tokens, most of Gemma 2's and 3's, Phi-3's) attends only to the last
    window of tokens, and transformers keeps only those: such a layer holds min(tokens, window) tokens,
    so its cache stops growing at the window. The number above adds the layers up that way.
    """)}), mo.md("""
    ## Weights in the serving format

    The weights are usually the largest part, and the serving format sets their size: the table
    below gives each format's size for your model.
    """), mo.accordion({"Go deeper: how transformers stores each format, and why the bits sit above the width": mo.md(f"""
    Floating formats store every parameter at their width. The integer formats here are counted **as
    transformers loads a model with bitsandbytes**: its `replace_with_bnb_linear`
    (`transformers/integrations/bitsandbytes.py`) swaps each `nn.Linear` (and GPT-2's `Conv1D`) for a
    bitsandbytes layer and leaves every other tensor as it was. int8 follows LLM.int8 (Dettmers et
    al. 2022): each linear weight in 8 bits plus one fp32 **scale per output row**, a few bytes per
    thousands of weights. int4 and NF4 store the linear layers' weights in 4 bits plus one **scale
    per block** of 64 values (QLoRA's layout, Dettmers et al. 2023): an fp32 scale per 64 weights
    adds 32 / 64 = 0.5 bit per weight, and NF4's double quantization shrinks that to 8 / 64 +
    32 / (64 x 256) = 0.127 bit. Embeddings, norms and the output head stay in 16 bits, and so do a
    mixture of experts' router and routed experts, which transformers 5 stores as 3-D parameters, not
    `nn.Linear`: that is why the effective bits per parameter below sit above the format's own width.
    {viz.lesson_link("01_weights_and_formats", "Lesson 1")}'s first figure puts **every weight** in the
    format instead (the last column), the size a model would have if every tensor were quantized.
    """)})])
    return


@app.cell
def _(mm, mo, model, pasted_config, pd, to_unit, unit_radio, viz):
    # Reads the model and the unit only: the context and the batch do not re-run it.
    mo.stop(model is None)
    _unit, _rows = unit_radio.value, []
    for _fmt in ["fp32", "bf16", "fp8_e4m3", "int8", "int4", "nf4"]:
        _m = mm.inference_memory(model, weights_format=_fmt, context_len=1)  # as transformers + bitsandbytes store it
        _every = mm.inference_memory(model.n_params, weights_format=_fmt, context_len=1)  # every weight (lesson 1)
        _rows.append({"format": _fmt, "bits per value": mm.get_format(_fmt).bits,
                      f"weights ({_unit})": round(to_unit(_m.weights, _unit), 2),
                      f"constants ({_unit})": round(to_unit(_m.quantization_constants, _unit), 3),
                      "effective bits per parameter": round(8 * (_m.weights + _m.quantization_constants) / model.n_params, 2),
                      f"every weight in the format ({_unit})":
                          round(to_unit(_every.weights + _every.quantization_constants, _unit), 2)})
    formats_frame = pd.DataFrame(_rows)
    # A mixture of experts: its routed experts (3-D tensors) are most of it and stay in bf16 through bitsandbytes.
    _moe = mo.md(f"The routed experts are {model.routed_expert_params / model.n_params:.0%} of {pasted_config.pasted_text(model.name)}'s "
                 "parameters, and they stay in bf16 through bitsandbytes: its integer formats shrink it little, unlike "
                 "the last column.") if model.n_experts else None
    mo.vstack([viz.plain_table(formats_frame), _moe]) if _moe else viz.plain_table(formats_frame)
    return (formats_frame,)


@app.cell(hide_code=True)
def _(alt, mo, rule_factor, viz):
    def sweep_draw(gpu_name, unit):
        """The context sweep's drawing (the parts, the rule of thumb, the GPU, where the rule stops holding)."""
        def _draw(frame):
            _x = alt.X("context:Q", scale=alt.Scale(type="log", base=2),
                       axis=alt.Axis(values=[2**k for k in range(7, 18, 2)],
                                     labelExpr="datum.value >= 1024 ? datum.value / 1024 + 'K' : datum.value"),
                       title="Context (tokens per sequence, log scale; 1K = 1,024)")
            _base = alt.Chart()
            _areas = _base.transform_filter(alt.datum.kind == "part").mark_area(opacity=0.85).encode(
                x=_x, y=alt.Y("size:Q", stack="zero", title=viz.memory_axis_title(unit)),
                color=alt.Color("label:N", title="Part", scale=viz.part_scale(viz.INFERENCE_PARTS)),
                order=alt.Order("order:Q"),
                tooltip=[alt.Tooltip("context:Q"), alt.Tooltip("label:N"), alt.Tooltip("size:Q", title=unit, format=",.2f")])
            _rule_line = _base.transform_filter(alt.datum.kind == "rule").mark_line(color="black", strokeDash=[6, 4]).encode(
                x=_x, y=alt.Y("size:Q"))
            _gpu_line = _base.transform_filter(alt.datum.kind == "gpu").mark_rule(color="#D62728", strokeDash=[2, 2], size=2).encode(
                y=alt.Y("size:Q"), tooltip=[alt.Tooltip("what:N")])
            _limit = _base.transform_filter(alt.datum.kind == "limit")  # no rows when the rule holds past the sweep or never
            _layers = [_areas, _rule_line, _gpu_line,
                       _limit.mark_rule(color="black").encode(x=alt.X("context:Q"), tooltip=[alt.Tooltip("what:N")]),
                       _limit.mark_text(align="left", dx=4, y=8).encode(x=alt.X("context:Q"), text=alt.Text("what:N"))]
            return alt.layer(*_layers, data=frame).properties(width=560, height=300, title=alt.Title(
                "Detailed sum (areas) versus weights x 1.2 (black, dashed)", subtitle=f"{gpu_name} memory less the CUDA context: red, dotted"))
        return _draw

    mo.md(f"""
    ## Where "weights x {rule_factor:g}" breaks

    The quick estimate adds {rule_factor - 1:.0%} to the weights for everything else. It is quoted widely
    (EleutherAI's rule, repeated in Hugging Face accelerate's memory-estimation docs). The chart sweeps the
    context for your model, batch and formats: the coloured areas are the detailed sum, the black dashed
    line the rule of thumb, the red dotted line your GPU's memory less the CUDA context. Try batch 64
    at a long context: the cache dwarfs the weights.
    """)
    return (sweep_draw,)


@app.cell(hide_code=True)
def _(live_chart):
    sweep_chart = live_chart()  # drawn once (this cell reads no control); the run's cell sends it new rows
    sweep_chart
    return (sweep_chart,)


@app.cell
def _(mm):
    # A mixture of experts in bf16: what a decode step reads at batch 1 (its active parameters x 2 B) against all of it.
    moe_model = mm.PRESETS["qwen3-30b-a3b"]
    moe_bf16 = mm.inference_memory(moe_model, context_len=1)
    return moe_bf16, moe_model


@app.cell(hide_code=True)
def _(format_bytes, mo, moe_bf16, moe_model):
    _moe, _moe_bf16 = moe_model, moe_bf16
    mo.vstack([mo.md("""
    ## The working set

    One forward pass creates tensors and frees them again: the normed input of each block, the
    query, the MLP's wide hidden layer, and with the *eager* attention kernel the full
    context x context score matrix of every head. The largest moment of that pass is the working set.
    Switch the attention kernel at a long context to watch it jump: fused attention (*sdpa*,
    FlashAttention) keeps no score matrix at all.
    """), mo.accordion({"How is the working set counted, and how close is it to PyTorch?": mo.md("""
    memmath follows what Hugging Face transformers allocates when it reads a prompt in one go
    (a prefill), phase by phase (servers that split long prompts into chunks keep a smaller working set); checked against a count of PyTorch's live tensors for GPT-2 and
    LLaMA models it lands within 0.2% (`validation/inference_working_set.py`). Two details matter:
    LLaMA's eager attention runs its softmax in fp32 (10 bytes per score with bf16 weights), and
    fused attention keeps no score matrix at all.
    """)}), mo.md(f"""
    ## How fast can it decode?

    Generating one token reads every weight once, and each sequence's whole KV cache. On a GPU
    that read is the bottleneck, so memory bandwidth gives an **upper bound**:
    tokens per second per sequence <= bandwidth / (weights + constants + KV cache) (kipply 2022).
    Change the weights format to nf4 to see why quantized models also decode faster.
    """), mo.accordion({"Go deeper: batches, real servers, and why a mixture of experts reads less": mo.md(f"""
    The weights are read once per step for the whole batch, so a batch of B sequences produces up
    to B times as many tokens in total. Real servers reach a fraction of this bound. Raise the batch
    at a long context to see the cache eat into the speed.

    A **mixture of experts** reads less. Its router sends each token to {_moe.experts_per_tok} of its
    {_moe.n_experts} experts per layer (Qwen3-30B-A3B), so one token at batch 1 reads the shared tensors
    (embeddings, attention, norms, router, output head) and only those experts: its
    **{_moe.active_params:,} active parameters**, {format_bytes(_moe_bf16.weights_read)} in bf16, not
    all {format_bytes(_moe_bf16.weights)} of its {_moe.n_params:,} parameters. At a batch of B the
    step's tokens may go to different experts: the bound here assumes they reach min(experts, B x
    experts per token) distinct experts in each layer, the most a step can read, so it is the bound
    for tokens spread over the experts (tokens that share experts read less and decode faster).
    """)})])
    return


@app.cell
def _(mo, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.site_charts: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md("""
    The next chart sweeps the context the same way for Llama-2-13B (the cache in bf16, fused attention)
    and lets you pick the weights format and the batch. Its inputs sit under the chart and redraw it in
    the browser from numbers memmath computed for every combination in advance, so they work in
    this static copy of the workbook.
    """), site_charts.serving_sweep()]) if site_charts.is_static_export() else None
    return
@app.cell
def _(mm, moe_model):
    # The takeaways' and problems' numbers. Where "weights x 1.2" stops covering Llama-2-7B in bf16, one sequence:
    answer_rule_limit = mm.inference.rule_of_thumb_context_limit("llama-2-7b")
    # 1: Llama-2-13B's weights against its cache.
    answer_13b_weights = mm.inference_memory("llama-2-13b", context_len=1).weights
    # 2: Llama-2-70B's cache per token with its 8 key/value heads, and with one per query head.
    answer_70b_per_token = mm.kv_cache_bytes("llama-2-70b", context_len=1)
    answer_70b_mha_per_token = mm.kv_cache_bytes(mm.PRESETS["llama-2-70b"].with_changes(n_kv_heads=64), context_len=1)
    # 3: Llama-2-7B at 4,096 tokens in bf16 and nf4, and the decode bound on an RTX 4090.
    answer_7b_runs = [mm.inference_memory("llama-2-7b", weights_format=_w, context_len=4096) for _w in ("bf16", "nf4")]
    answer_7b_speed = [mm.inference.decode_tokens_per_second(m, "RTX 4090") for m in answer_7b_runs]
    # 4: the rule's limit with one sequence and with eight.
    answer_rule_limits = [mm.inference.rule_of_thumb_context_limit("llama-2-7b", batch_size=b) for b in (1, 8)]
    # 5: Qwen3-30B-A3B at batch 1 and 32 on an H100 80GB.
    answer_moe_runs = [mm.inference_memory(moe_model, context_len=4096, batch_size=b) for b in (1, 32)]
    answer_moe_speed = [mm.inference.decode_tokens_per_second(m, "H100 80GB") for m in answer_moe_runs]
    answer_h100 = mm.get_gpu("H100 80GB")
    return (answer_13b_weights, answer_70b_mha_per_token, answer_70b_per_token, answer_7b_runs, answer_7b_speed,
            answer_h100, answer_moe_runs, answer_moe_speed, answer_rule_limit, answer_rule_limits)


@app.cell(hide_code=True)
def _(answer_13b_weights, answer_70b_mha_per_token, answer_70b_per_token, answer_7b_runs, answer_7b_speed,
      answer_h100, answer_moe_runs, answer_moe_speed, answer_rule_limit, answer_rule_limits, format_bytes,
      gqa_models, kv_13b_8k, mo, moe_model):
    mo.vstack([
        mo.callout(mo.md(f"""
    **Takeaways**

    - Inference memory is its own calculation: weights in the serving format + KV cache + working set.
    - The KV cache is 2 x layers x kv_heads x head_dim x bytes per token, times context, times batch.
      Grouped-query attention divides it by heads / kv_heads.
    - "Weights x 1.2" holds for short contexts only (Llama-2-7B in bf16, one sequence: up to
      {answer_rule_limit:,} tokens).
    - A card holds a run when the total fits in its memory less its CUDA context (each card's is in
      the first fold above).
    - Decoding is bounded by bandwidth / bytes read per step: smaller weights and a smaller cache
      make a model faster as well as smaller. A mixture of experts reads only its active parameters
      at batch 1 (Qwen3-30B-A3B: {moe_model.active_params / moe_model.n_params:.0%} of them).
    """), kind="success"),
        mo.md("## Problems"),
        mo.md("**1.** How large is Llama-2-13B's KV cache in 16 bits for one 8,192-token conversation, "
              "and for eight of them?"),
        mo.accordion({"Answer": mo.md(
            f"2 x {gqa_models['llama-2-13b'].n_layers} x {gqa_models['llama-2-13b'].n_kv_heads} x {gqa_models['llama-2-13b'].head_dim} x 2 B x 8,192 = {format_bytes(kv_13b_8k)} "
            f"for one; {format_bytes(8 * kv_13b_8k)} for eight: more than the {format_bytes(answer_13b_weights)} of weights.")}),
        mo.accordion({"Problems 2 to 5: grouped-query attention, the decode bound, the rule with a batch, "
                      "a mixture of experts": mo.vstack([
            mo.md("**2.** Llama-2-70B keeps 8 key/value heads for its 64 query heads. What does one token of "
                  "cache cost in bf16, and what would it cost with one key/value head per query head?"),
            mo.accordion({"Answer": mo.md(
                f"2 x {gqa_models['llama-2-70b'].n_layers} x {gqa_models['llama-2-70b'].n_kv_heads} x {gqa_models['llama-2-70b'].head_dim} x 2 B = {answer_70b_per_token:,} B per token. "
                f"With {gqa_models['llama-2-70b'].n_heads} kv heads: {answer_70b_mha_per_token:,} B, "
                f"{answer_70b_mha_per_token // answer_70b_per_token} times more.")}),
            mo.md("**3.** What is the decode bound for Llama-2-7B at 4,096 tokens, one sequence, on an "
                  "RTX 4090, in bf16 and in nf4?"),
            mo.accordion({"Answer": mo.md(
                f"bf16 reads {format_bytes(answer_7b_runs[0].read_per_step)} per step: at most "
                f"{answer_7b_speed[0]:,.1f} tokens/s. nf4 reads "
                f"{format_bytes(answer_7b_runs[1].read_per_step)}: at most "
                f"{answer_7b_speed[1]:,.1f} tokens/s.")}),
            mo.md("**4.** Up to which context does \"weights x 1.2\" cover Llama-2-7B in bf16 with one "
                  "sequence? With eight?"),
            mo.accordion({"Answer": mo.md(
                f"{answer_rule_limits[0]:,} tokens with one sequence; {answer_rule_limits[1]:,} tokens with eight, since the cache "
                "and the working set grow with the batch too.")}),
            mo.md(f"**5.** Qwen3-30B-A3B ({moe_model.n_params:,} parameters, {moe_model.experts_per_tok} of {moe_model.n_experts} "
                  "experts per token) serves in bf16 at 4,096 tokens on an H100 80GB. What does a decode step read at "
                  "batch 1, and at batch 32, and what bound follows per sequence?"),
            mo.accordion({"Answer": mo.md(
                f"At batch 1 the token reads its {moe_model.active_params:,} active parameters, "
                f"{format_bytes(answer_moe_runs[0].weights_read)}, plus {format_bytes(answer_moe_runs[0].kv_cache)} of cache: "
                f"{answer_h100.bandwidth_bytes_per_s / 1e9:,.0f} GB/s / {format_bytes(answer_moe_runs[0].read_per_step)} = at "
                f"most {answer_moe_speed[0]:,.0f} tokens/s. At batch 32, 32 x {moe_model.experts_per_tok} = "
                f"{32 * moe_model.experts_per_tok} routings can reach all {moe_model.n_experts} experts of a layer, so a step reads "
                f"every weight, {format_bytes(answer_moe_runs[1].weights_read)}, plus "
                f"{format_bytes(answer_moe_runs[1].kv_cache)} of cache: at most {answer_moe_speed[1]:,.1f} tokens/s per sequence, "
                f"{32 * answer_moe_speed[1]:,.0f} across the batch.")}),
        ])}),
    ])
    return


if __name__ == "__main__":
    app.run()
