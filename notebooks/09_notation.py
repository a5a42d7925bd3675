# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "9. Notation and glossary"
# description = "One set of symbols for every lesson (b, s, h, L, a, V, bytes per format) and the words a learner meets, each with the lesson that teaches it."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Notation and glossary", css_file="memmath.css")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Notation and glossary

    **The claim.** Every memory formula in this workbook is a product of a few sizes: how many
    sequences, how long, how wide the model is, how deep, and how many bytes each number takes. Written
    with the same letters everywhere, the formulas of different lessons can be read side by side and
    combined, which is what planning a real run asks for. This page fixes those letters, gives each
    formula once in them, and defines the words the lessons use, each with the lesson that teaches it.

    The letters are the ones of Korthikanti et al. 2022 (*Reducing Activation Recomputation in Large
    Transformer Models*), the paper behind lesson 3's activation formula, since most lessons already
    write them: **b** sequences, **s** tokens each, width **h**, **L** blocks, **a** heads, a vocabulary
    of **V** tokens. Where a lesson writes a size as a word (lesson 7's `kv_heads` and `head_dim`), the
    table keeps the word.
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath as mm
    from memmath import format_bytes, to_unit
    from memmath_lessons import viz
    from memmath_lessons.live_chart import bound_live_chart
    from memmath_lessons.static_charts import Slider, bound_chart, is_static_export, live_only_notice

    return (Slider, alt, bound_chart, bound_live_chart, format_bytes, is_static_export, live_only_notice, mm,
            mo, pd, viz)


@app.cell
def _(live_only_notice, mo, viz):
    weights_params_slider = mo.ui.slider(steps=list(viz.MODEL_SIZE_STEPS), value=8, show_value=True,
                                         label="N (billions of parameters)")
    mo.vstack([mo.md("The simplest of them: a model's weights take N·e bytes, N parameters times e bytes per "
                     "value. Move N to see e at work, the same model's weights in each format:"), live_only_notice(),
               weights_params_slider])
    return (weights_params_slider,)


@app.cell
def _(Slider, WEIGHT_FORMATS, alt, bound_chart, bound_live_chart, is_static_export, mo, viz, weights_grid):
    def _draw(base):
        _y = alt.Y("format:N", title="Format", sort=WEIGHT_FORMATS)
        _bars = base.mark_bar(color=viz.PART_COLORS["weights"]).encode(
            x=alt.X("GB:Q", title="Weights (GB)", axis=alt.Axis(**viz.MEMORY_AXIS)), y=_y,
            tooltip=[alt.Tooltip("format:N"), alt.Tooltip("label:N")])
        _text = base.mark_text(align="left", dx=4, fontSize=11).encode(x=alt.X("GB:Q"), y=_y, text=alt.Text("label:N"))
        return (_bars + _text).properties(width=420, height=150)

    _title = "Weights = N × bits ÷ 8 (plus the block formats' scales), in each format"
    # Live, the slider above moves this chart (memmath_lessons.live_chart); in the static site, where that slider is
    # frozen, the chart carries its own slider over numbers computed in advance.
    weights_chart = None if is_static_export() else bound_live_chart(_draw, title=_title)
    _about = ("The chart below carries its own slider over N, computed in advance: it keeps working in this static "
              "copy of the lesson, where the slider above is frozen.")
    (weights_chart if weights_chart is not None else mo.vstack([mo.md(_about), viz.chart_output(bound_chart(
        weights_grid, [Slider("billions", "N (billions)", value=8, labels=lambda b: f"{b:g}B parameters")], _draw,
        title=_title))]))
    return (weights_chart,)


@app.cell(hide_code=True)
def _(weights_chart, weights_grid, weights_params_slider):
    # The one cell the slider re-runs: the chart's rows for its value.
    if weights_chart is not None:
        weights_chart.update(weights_grid[weights_grid["billions"] == weights_params_slider.value],
                             caption=f"N: {weights_params_slider.value:g}B parameters")
    return


@app.cell
def _(mm):
    # The example column: Llama-3-8B as memmath's preset reads meta-llama/Meta-Llama-3-8B's config.json, in a
    # memmath.Run with its defaults (one sequence of DEFAULT_SEQ_LEN tokens, pure bf16).
    example = mm.PRESETS["llama-3-8b"]
    example_run = mm.Run("llama-3-8b")
    example_bytes = mm.get_format("bf16").bytes  # e for a bf16 tensor
    adapter_bottleneck = mm.Adapters().bottleneck  # m, memmath's default
    lora_rank = mm.LoRA().rank  # r, memmath's default
    return adapter_bottleneck, example, example_bytes, example_run, lora_rank


@app.cell(hide_code=True)
def _(adapter_bottleneck, example, example_bytes, example_run, lora_rank, mo, viz):
    _l = viz.lesson_link
    _rows = [
        ("N", "parameters (weights) of the model", "count", f"{example.n_params:,}", _l("01_weights_and_formats", "1")),
        ("b", "batch: sequences per step on one GPU (the micro-batch)", "sequences", f"{example_run.batch_size}",
         _l("03_activations", "3")),
        ("s", "sequence length: tokens per sequence (lesson 7: the context)", "tokens", f"{example_run.seq_len:,}",
         _l("03_activations", "3")),
        ("t = b·s", "tokens in one step", "tokens", f"{example_run.batch_size * example_run.seq_len:,}",
         _l("03_activations", "3")),
        ("h", "hidden size: the width of every token's vector", "values", f"{example.hidden_size:,}",
         _l("03_activations", "3")),
        ("L", "layers: the transformer blocks", "blocks", f"{example.n_layers}", _l("04_freezing", "4")),
        ("a", "attention heads (query heads)", "heads", f"{example.n_heads}", _l("03_activations", "3")),
        ("kv_heads", "key/value heads: fewer than a with grouped-query attention", "heads", f"{example.n_kv_heads}",
         _l("07_inference", "7")),
        ("head_dim", "values per head, usually h / a", "values", f"{example.head_dim}", _l("07_inference", "7")),
        ("I", "the MLP's inner width (intermediate_size)", "values", f"{example.intermediate_size:,}",
         _l("03_activations", "3")),
        ("V", "vocabulary: tokens the model can read and predict", "tokens", f"{example.vocab_size:,}",
         _l("03_activations", "3")),
        ("e", "bytes per value of a tensor's format (bf16: 2)", "B", f"{example_bytes:g}", _l("01_weights_and_formats", "1")),
        ("k", "blocks that train when the rest are frozen (the last k)", "blocks", "-", _l("04_freezing", "4")),
        ("m", "an adapter's bottleneck width", "values", f"{adapter_bottleneck} (memmath's default)",
         _l("05_adapters", "5")),
        ("r", "LoRA's rank: the width of its two thin matrices", "values", f"{lora_rank} (memmath's default)",
         _l("06_lora_qlora", "6")),
        ("n_gpus", "GPUs that share the run (data parallel, ZeRO)", "GPUs", f"{example_run.n_gpus}", _l("08_planner", "8")),
        ("d, t, p, c, e (lesson 11)", "degrees of data, tensor, pipeline, context and expert parallelism: the run "
         "uses d·t·p·c GPUs, and e of the d·c data GPUs split a mixture of experts' experts", "GPUs", "1 each",
         _l("11_many_gpus", "11")),
        ("m (lesson 11)", "micro-batches a pipeline runs in one step, each of b sequences", "micro-batches", "1",
         _l("11_many_gpus", "11")),
        ("v (lesson 11)", "pipeline stages each GPU runs with interleaved 1F1B", "stages", "1", _l("11_many_gpus", "11")),
    ]
    _table = "\n    ".join(f"| {sym} | {means} | {unit} | {value} | {where} |" for sym, means, unit, value, where in _rows)
    mo.vstack([mo.md(f"""
    ## The symbols

    | symbol | what it counts | unit | {example.name} (its config.json; a `memmath.Run`'s defaults) | taught in lesson |
    |:--|:--|:--|--:|:--|
    {_table}
    """), mo.accordion({"Where do the lessons still use a letter differently?": mo.md("""
    Lesson 3's folded formula writes a dropout mask's byte as *m* (1 B),
    where lesson 5's *m* is the bottleneck and lesson 11's *m* counts micro-batches; lesson 11's *t* is the
    tensor-parallel degree, not the tokens b·s, and its *e* the expert-parallel degree, not bytes per value;
    lesson 4 counts the frozen blocks as *f*, so L − f = k train; and lesson 6 names a matrix's sides *d_in*
    and *d_out* (h and I for the MLP's matrices).
    """)})])
    return


@app.cell
def _(example, example_run, mm):
    # The formulas' right-hand column: the example at its b sequences of s tokens.
    _b, _s = example_run.batch_size, example_run.seq_len
    example_kv = mm.kv_cache_bytes("llama-3-8b", context_len=_s, batch_size=_b)  # 2 x L x kv_heads x head_dim x e x s x b
    example_recipe = mm.recipes.bytes_per_parameter("bf16", "adamw")
    example_block_textbook = mm.activations.korthikanti_per_layer(
        seq_len=_s, batch_size=_b, hidden_size=example.hidden_size,
        n_heads=example.n_heads)  # s·b·h·(34 + 5·a·s/h), eager, dropout on
    example_training = mm.training_memory(example_run)
    return example_block_textbook, example_kv, example_recipe, example_training


@app.cell(hide_code=True)
def _(example, example_block_textbook, example_bytes, example_kv, example_recipe, example_run,
      example_training, format_bytes, lora_rank, mo, viz):
    _b, _s = example_run.batch_size, example_run.seq_len
    _kv, _recipe, _per_block = example_kv, example_recipe, example_block_textbook
    mo.md(f"""
    ## The formulas in these symbols

    Each is worked out in its lesson; the right-hand column is {example.name} at b = {_b}, s = {_s:,}.

    | what | formula | source | {example.name} |
    |:--|:--|:--|--:|
    | weights | N × bits ÷ 8 = N·e | {viz.lesson_link("01_weights_and_formats", "lesson 1")} | {format_bytes(example.n_params * example_bytes)} in bf16 |
    | weights, gradients, optimizer states | N × bytes per parameter of the recipe ({_recipe["weights"]:g} + {_recipe["gradients"]:g} + {_recipe["optimizer_states"]:g} B in pure bf16 with AdamW) | {viz.lesson_link("02_full_finetuning", "lesson 2")}, after EleutherAI's *Transformer Math 101* | {format_bytes(example_training.without_activations)} (and a 4-byte step per tensor) |
    | activations of one block (textbook) | s·b·h·(34 + 5·a·s/h) at e = 2 B, eager attention with dropout | {viz.lesson_link("03_activations", "lesson 3")}, Korthikanti et al. 2022 | {format_bytes(_per_block)} |
    | a checkpointed block | 2·s·b·h: its input alone | {viz.lesson_link("03_activations", "lesson 3")}, Chen et al. 2016 | {format_bytes(2 * _s * _b * example.hidden_size, "MB")} |
    | the loss's fp32 logits | 4·s·b·V | {viz.lesson_link("03_activations", "lesson 3")} | {format_bytes(4 * _s * _b * example.vocab_size)} |
    | LoRA's adapter on one d_out × d_in matrix | r·(d_in + d_out) parameters | {viz.lesson_link("06_lora_qlora", "lesson 6")}, Hu et al. 2021 | {lora_rank * (example.hidden_size + example.hidden_size):,} on q_proj |
    | KV cache | 2 (key and value) × L × kv_heads × head_dim × e × s × b | {viz.lesson_link("07_inference", "lesson 7")}, kipply 2022 | {format_bytes(_kv)} |

    The textbook formula counts GPT-style blocks at 16 bits; the lessons' numbers use memmath's exact model,
    what transformers keeps tensor by tensor ({viz.lesson_link("03_activations", "lesson 3")} compares the two).
    """)
    return


@app.cell
def _(mm, pd):
    # Bytes per value of each format memmath knows (memmath.FORMATS), and NF4 with its constants (QLoRA, section 3).
    nf4_bits = mm.methods.bits_per_weight("nf4")
    formats_frame = pd.DataFrame([{"format": name, "bits": f.bits, "bytes per value (e)": f.bytes,
                                   "what it is": f.description}
                                  for name, f in mm.FORMATS.items()])
    units_frame = pd.DataFrame([{"unit": u, "bytes": mm.UNITS[u]} for u in ("KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TiB")])
    gib_over_gb = mm.UNITS["GiB"] / mm.UNITS["GB"] - 1  # how much larger a GiB is
    return formats_frame, gib_over_gb, nf4_bits, units_frame


@app.cell(hide_code=True)
def _(formats_frame, gib_over_gb, mo, nf4_bits, units_frame, viz):
    _nf4, _units = nf4_bits, units_frame
    mo.vstack([
        mo.md(f"""
        ## Bytes per format, and the units

        A format's bits ÷ 8 is **e**, its bytes per value ({viz.lesson_link("01_weights_and_formats", "lesson 1")}).
        A block-quantized format also stores constants: NF4 with QLoRA's double quantization costs
        {_nf4:.3f} bits per weight, not 4 (Dettmers et al. 2023, section 3;
        {viz.lesson_link("06_lora_qlora", "lesson 6")}).
        """),
        mo.accordion({"What is each format, in bits and bytes per value?":
                      viz.plain_table(formats_frame, wrapped_columns=["what it is"])}),
        mo.md(f"""
        Sizes are written in decimal units (a **GB** is 10⁹ B) or binary ones (a **GiB** is 2³⁰ B,
        {gib_over_gb:.1%} more); GPU drivers report binary sizes
        ({viz.lesson_link("00_start_here", "lesson 0")}). The workbook always writes the unit.
        """),
        viz.plain_table(_units),
    ])
    return


@app.cell
def _(format_bytes, mm, pd, viz):
    # N x bits / 8 for every model size the lessons offer and each format, plus the block formats' scales (one fp32
    # per 64 for int8, QLoRA's double quantization for nf4): memmath.inference_memory's weights, as lesson 1 draws them.
    WEIGHT_FORMATS = ["fp32", "bf16", "fp8_e4m3", "int8", "nf4"]
    _rows = []
    for _b in viz.MODEL_SIZE_STEPS:
        for _f in WEIGHT_FORMATS:
            _stored = mm.inference_memory(round(_b * 10**9), weights_format=_f)
            _bytes = _stored.weights + _stored.quantization_constants
            _rows.append({"billions": _b, "format": _f, "GB": round(_bytes / mm.UNITS["GB"], 2),
                          "label": f"{format_bytes(_bytes, 'GB')} = {format_bytes(_bytes, 'GiB')}"})
    weights_grid = pd.DataFrame(_rows)
    return WEIGHT_FORMATS, weights_grid


@app.cell
def _(mm):
    fit_margin = mm.FIT_MARGIN  # the share of the requirement every verdict adds (the glossary's "margin")
    return (fit_margin,)


@app.cell(hide_code=True)
def _(fit_margin, gib_over_gb, viz):
    _l = viz.lesson_link
    # The glossary's first groups; the next cell adds the rest and shows them.
    GLOSSARY_MEMORY_AND_STEP = {
        "Memory and units": [
            ("CUDA out of memory", "PyTorch's error when the GPU has no room for the next tensor; the size it names is "
             "that last request, not the total", _l("00_start_here", "0")),
            ("GB, GiB", f"10⁹ and 2³⁰ bytes; a GiB is {gib_over_gb:.1%} larger", _l("00_start_here", "0")),
            ("number format", "how one value is stored: fp32 (4 B), bf16 and fp16 (2 B), fp8 and int8 (1 B), int4 and "
             "nf4 (half a byte)", _l("01_weights_and_formats", "1")),
            ("quantization, quantization constants", "storing weights in fewer bits, with a scale (absmax) per block "
             "of values to map them back", _l("01_weights_and_formats", "1")),
            ("CUDA context (reserve)", "what the driver and kernels take before any tensor; memmath reserves each "
             f"card's own by default: {viz.context_reserves_words()}", _l("08_planner", "8")),
            ("fits, to spare, short by, margin", f"every lesson's verdict: a run fits when what the card must hold "
             f"plus {fit_margin:.0%} of it (the margin) is at most the card less the CUDA context; \"to spare\" is "
             "what the card has left after the requirement, \"short by\" what must be freed before the run fits, "
             "the margin always in it", _l("08_planner", "8")),
        ],
        "A training step": [
            ("parameter, weight", "one number the model learns; N of them", _l("01_weights_and_formats", "1")),
            ("trainable, frozen", "a trainable parameter gets a gradient and optimizer states; a frozen one keeps its "
             "value and costs only its weight", _l("04_freezing", "4")),
            ("gradient", "the derivative of the loss by one trainable parameter, made by the backward pass, one per "
             "trainable weight", _l("02_full_finetuning", "2")),
            ("optimizer state", "what the optimizer keeps per trainable parameter between steps: Adam's two moments, "
             "SGD's momentum; none for plain SGD", _l("02_full_finetuning", "2")),
            ("recipe (precision)", "which format each part is kept in: pure bf16, fp32, AMP, mixed precision",
             _l("02_full_finetuning", "2")),
            ("master weights", "an fp32 copy of 16-bit weights that mixed precision updates, so small steps are not "
             "rounded away", _l("02_full_finetuning", "2")),
            ("AMP (autocast)", "PyTorch's automatic mixed precision: fp32 weights, matrix multiplies in 16 bits",
             _l("02_full_finetuning", "2")),
            ("activation", "an intermediate result of the forward pass that the backward pass needs, kept until it is "
             "used", _l("03_activations", "3")),
            ("fused attention (SDPA, FlashAttention)", "attention computed in tiles, never storing the s × s scores",
             _l("03_activations", "3")),
            ("dropout mask", "which values dropout zeroed, kept for backward (1 B each)", _l("03_activations", "3")),
            ("logits", "the scores over the vocabulary for every token; the loss keeps them in fp32, 4·s·b·V bytes",
             _l("03_activations", "3")),
            ("gradient checkpointing", "keep only each block's input and recompute the block during backward: less "
             "memory, about a third more compute", _l("03_activations", "3")),
            ("sum of the parts, peak", "the parts added as if all lived at once, against the most allocated at one "
             "moment of the step, which the card must hold", _l("08_planner", "8")),
        ],
    }
    return (GLOSSARY_MEMORY_AND_STEP,)


@app.cell(hide_code=True)
def _(GLOSSARY_MEMORY_AND_STEP, mo, viz):
    _l = viz.lesson_link
    GLOSSARY = {
        **GLOSSARY_MEMORY_AND_STEP,
        "Finetuning methods": [
            ("full finetuning", "every weight trains", _l("02_full_finetuning", "2")),
            ("partial finetuning (freezing)", "only the last k blocks (and the head) train", _l("04_freezing", "4")),
            ("PEFT", "parameter-efficient finetuning: train a few new or chosen parameters, freeze the rest",
             _l("05_adapters", "5")),
            ("adapter", "a small trainable module inside each block (Houlsby et al. 2019): down to the bottleneck m, "
             "back up to h", _l("05_adapters", "5")),
            ("LoRA", "a trainable low-rank change B·A beside chosen frozen matrices, mergeable into them after "
             "training (Hu et al. 2021)", _l("06_lora_qlora", "6")),
            ("QLoRA", "LoRA on a base stored in 4-bit NF4 with double quantization (Dettmers et al. 2023)",
             _l("06_lora_qlora", "6")),
            ("NF4, double quantization", "a 4-bit format with levels at a normal distribution's quantiles; its "
             "constants quantized again to 8 bits", _l("06_lora_qlora", "6")),
        ],
        "Several GPUs": [
            ("data parallel", "every GPU trains a full copy on its own batch and the gradients are averaged; without "
             "ZeRO each holds every part", _l("08_planner", "8")),
            ("ZeRO (stages 1, 2, 3)", "sharding across n_gpus: stage 1 the optimizer states, 2 the gradients too, 3 the "
             "weights too (Rajbhandari et al. 2020); activations stay per GPU", _l("08_planner", "8")),
            ("FSDP", "PyTorch's fully sharded data parallel: ZeRO stage 3", _l("08_planner", "8")),
        ],
        "Serving": [
            ("KV cache", "the key and value vectors of every past token in every layer, kept so each new token "
             "attends without recomputing them", _l("07_inference", "7")),
            ("grouped-query attention (GQA)", "kv_heads < a: query heads share key/value heads, so the cache is "
             "a / kv_heads times smaller", _l("07_inference", "7")),
            ("sliding window", "a layer that attends only to its last window of tokens, and caches only those",
             _l("07_inference", "7")),
            ("prefill, decode", "reading the prompt at once (its working set is the peak), then one token per step "
             "(bounded by memory bandwidth)", _l("07_inference", "7")),
            ("mixture of experts (MoE), active parameters", "blocks with many expert MLPs of which a few run per "
             "token: all are stored, only the active ones compute", _l("07_inference", "7")),
        ],
    }
    _sections = {_topic: mo.md("\n".join(f"- **{term}**: {text} (lesson {where})." for term, text, where in _terms))
                 for _topic, _terms in GLOSSARY.items()}
    mo.vstack([mo.md(f"""
    ## The words

    {sum(map(len, GLOSSARY.values()))} terms the lessons use, in {len(GLOSSARY)} groups, each defined in a line and
    linked to the lesson that teaches it. Open a group:
    """), mo.accordion(_sections, multiple=True)])
    return (GLOSSARY,)


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md(r"""
    **Takeaways**

    - The sizes are b sequences of s tokens (t = b·s), width h, L blocks, a heads (kv_heads for keys and
      values), vocabulary V, and e bytes per value; every formula in the workbook is a product of them.
    - Weights and their training parts scale with N; activations with t (and the scores with s²); the KV
      cache with L × kv_heads × head_dim × s × b.
    - Each word above links to the lesson that first needs it.
    """), kind="success")
    return


@app.cell
def _(example, mm):
    # The problems' answers.
    # 2 x kv_heads x head_dim x e bytes per token in one layer
    kv_per_token_per_layer = mm.kv_cache_bytes("llama-3-8b", context_len=1) // example.n_layers
    t4 = mm.GPUS["T4"]
    t4_mib = t4.memory_bytes // mm.UNITS["MiB"]  # what its driver reports
    mixed_recipe = mm.recipes.bytes_per_parameter("mixed", "adamw")
    logits_8k = 4 * 8192 * 1 * example.vocab_size  # 4·s·b·V
    return kv_per_token_per_layer, logits_8k, mixed_recipe, t4, t4_mib


@app.cell(hide_code=True)
def _(example, example_bytes, format_bytes, kv_per_token_per_layer, logits_8k, mixed_recipe, mo, t4, t4_mib):
    _per_token_layer, _t4, _mixed, _logits = kv_per_token_per_layer, t4, mixed_recipe, logits_8k
    mo.vstack([
        mo.md("## Problems"),
        mo.md(f"**1.** {example.name} has kv_heads = {example.n_kv_heads} and head_dim = {example.head_dim}. How many "
              "bytes does one token cost its bf16 KV cache in one layer, and in all L layers?"),
        mo.accordion({"Answer": mo.md(
            f"2 × kv_heads × head_dim × e = 2 × {example.n_kv_heads} × {example.head_dim} × {example_bytes:g} B = "
            f"**{_per_token_layer:,} B** per layer; × L = {example.n_layers}: "
            f"**{_per_token_layer * example.n_layers:,} B** per token.")}),
        mo.md(f"**2.** A T4's driver reports {t4_mib:,} MiB. Is that 16 GB, 16 GiB or "
              "neither?"),
        mo.accordion({"Answer": mo.md(
            f"{t4_mib:,} MiB = {format_bytes(_t4.memory_bytes, 'GiB')} = "
            f"{format_bytes(_t4.memory_bytes, 'GB')}: neither exactly; the box's \"{_t4.marketed}\" is rounded.")}),
        mo.md("**3.** In mixed precision with AdamW, which parts are the master weights and which the optimizer "
              "states, in bytes per parameter?"),
        mo.accordion({"Answer": mo.md(
            f"bf16 weights {_mixed['weights']:g} B + bf16 gradients {_mixed['gradients']:g} B + fp32 master weights "
            f"{_mixed['master_weights']:g} B + two fp32 moments {_mixed['optimizer_states']:g} B = "
            f"**{_mixed['total']:g} B** per parameter.")}),
        mo.md(f"**4.** How large are the fp32 logits of one 8,192-token sequence for {example.name} (V = "
              f"{example.vocab_size:,})?"),
        mo.accordion({"Answer": mo.md(
            f"4·s·b·V = 4 × 8,192 × 1 × {example.vocab_size:,} = {_logits:,} B = **{format_bytes(_logits)}**, "
            "more than many whole layers' activations.")}),
    ])
    return


if __name__ == "__main__":
    app.run()
