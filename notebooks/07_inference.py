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
    import functools

    import marimo as mo
    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons.reference import literature
    from memmath_lessons import viz
    from memmath_lessons.static_charts import live_only_notice
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    import numpy as np
    import pandas as pd
    from memmath_lessons import inference_views, pasted_config, site_charts
    return (format_bytes, functools, inference_views, literature, live_chart, live_html, live_only_notice, mm, mo,
            np, pasted_config, pd, site_charts, to_unit, viz)


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
def _(bars_chart, cards_view, functools, gqa_models, gqa_view, inference_views, largest_gpu, rule_factor, run_view,
      sweep_chart):
    # The run's words and charts, by memmath_lessons.inference_views, into this page's live charts and views.
    _page = inference_views.Page(bars_chart=bars_chart, sweep_chart=sweep_chart, run_view=run_view,
                                 cards_view=cards_view, gqa_view=gqa_view, largest_gpu=largest_gpu,
                                 rule_factor=rule_factor, gqa_models=gqa_models)
    show_no_answer = functools.partial(inference_views.show_no_answer, _page)
    show_serving = functools.partial(inference_views.show_serving, _page)
    format_cards = inference_views.format_cards  # every card of the catalog as the fold shows it
    return format_cards, show_no_answer, show_serving


@app.cell
def _(attention_radio, batch_slider, context_slider, format_cards, gpu_dropdown, gqa_models,
      kv_format_dropdown, mm, mo, model, np, pd, show_no_answer, show_serving, to_unit, trained_context,
      unit_radio, weights_format_dropdown):
    # The one cell a control re-runs (every re-run cell costs marimo ~6-10 ms): the run, planned as `memmath infer`
    # plans it, and what the page compares it with. memmath_lessons.inference_views puts it in the live views and
    # charts; this cell shows only the warnings that apply.
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
def _(mo, rule_factor):
    mo.md(f"""
    ## Where "weights x {rule_factor:g}" breaks

    The quick estimate adds {rule_factor - 1:.0%} to the weights for everything else. It is quoted widely
    (EleutherAI's rule, repeated in Hugging Face accelerate's memory-estimation docs). The chart sweeps the
    context for your model, batch and formats: the coloured areas are the detailed sum, the black dashed
    line the rule of thumb, the red dotted line your GPU's memory less the CUDA context. Try batch 64
    at a long context: the cache dwarfs the weights.
    """)
    return


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
