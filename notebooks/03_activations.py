# /// script
# requires-python = ">=3.11"
# [tool.marimo.opengraph]
# title = "3. Activations"
# description = "What the forward pass keeps for backward: Korthikanti et al.'s formula against PyTorch, fused attention, dropout, checkpointing."
# ///
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Activations", css_file="memmath.css")


@app.cell(hide_code=True)
def _(article_7b, format_bytes, mo, viz):
    mo.md(f"""
    # Activations: what training keeps for the backward pass

    Symbols and words: [Notation and glossary](?file=09_notation.py).

    **The claim.** The article's 7B model needs about {format_bytes(article_7b.without_activations)} to
    finetune in pure 16-bit *before activations are counted*
    ({viz.lesson_link("02_full_finetuning", "lesson 2")}). Activations are what the forward pass keeps
    for the backward pass: the input of every matrix multiply, the output of every softmax, the mask of
    every dropout. They grow with the data you push through the model, not with its optimizer, and the
    attention scores grow with the **square** of the sequence length, so for long sequences or big
    batches they outgrow everything else. The control that moves them most is the sequence length:
    """)
    return


@app.cell
def _(mm):
    # The article's 7B model (32 layers), finetuned in pure bf16 with Adam (lesson 2): everything but activations.
    article_7b = mm.training_memory(mm.uniform_model(7e9, 32), precision="bf16", optimizer="adam")
    return (article_7b,)


@app.cell
def _():
    import functools

    import marimo as mo
    import memmath as mm
    from memmath import format_bytes
    from memmath_lessons import reference
    from memmath_lessons import viz
    from memmath_lessons.static_charts import live_only_notice, when_opened
    from memmath_lessons.live_chart import live_chart
    from memmath_lessons.live_html import live_html
    from memmath_lessons.step_slider import step_slider
    from memmath_lessons import recorded, sweeps
    import pandas as pd
    from memmath_lessons import activation_views, lesson_charts, site_charts
    return (activation_views, format_bytes, functools, lesson_charts, live_chart, live_html, live_only_notice, mm, mo, pd,
            recorded, reference, site_charts, step_slider, sweeps, viz, when_opened)


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    seq_slider = mo.ui.slider(steps=[128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
                              value=1024, show_value=True, label="Sequence length s (tokens)")
    batch_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16, 32, 64, 128], value=4, show_value=True,
                                label="Batch size b (sequences)")
    unit_radio = mo.ui.radio(options=["GB", "GiB"], value="GB", inline=True, label="Unit")
    mo.vstack([live_only_notice(), mo.hstack([seq_slider, batch_slider, unit_radio], justify="start", gap=2)])
    return batch_slider, seq_slider, unit_radio


@app.cell(hide_code=True)
def _(live_html):
    number_view, assumptions_view = live_html(), live_html()  # filled by the next cell on every move
    number_view
    return assumptions_view, number_view


@app.cell
def _(activation_sweep, attention_radio, batch_slider, checkpointing_switch, head_counts, heads_slider, layers_slider,
      mm, preset, seq_slider, show_comparisons, show_number, show_sweep, sweep_radio, unit_radio, vocab_slider,
      width_slider):
    # The one cell every control of the run re-runs (every re-run cell costs marimo some 8 ms of its own): the
    # arithmetic is here; the show_ functions (memmath_lessons.activation_views) put its numbers into the page's live
    # views.
    batch_size, seq_len = batch_slider.value, seq_slider.value
    n_layers, width, vocab = layers_slider.value, width_slider.value, vocab_slider.value
    # Heads must divide the width: the heads slider offers this width's divisors (sent to it in place, no new
    # slider) and stands on the largest at most the learner's last choice.
    heads_slider.steps = head_counts(width)
    n_heads = heads_slider.shown
    attention, checkpointing, unit = attention_radio.value, checkpointing_switch.value, unit_radio.value
    model = mm.models.gpt2_model(n_layers=n_layers, hidden_size=width, n_heads=n_heads, vocab_size=vocab,
                                 max_positions=preset.max_positions, name="your model")
    # The formula this lesson teaches is Korthikanti et al.'s model, asked for by name (activations="textbook",
    # with its dropout masks; memmath's default for a model with a config is the exact trace of transformers'
    # code): the four combinations of kernel and checkpointing, of which the page's number is the chosen one.
    textbook_runs = {(_kernel, _ckpt): mm.training_memory(
        model, precision="bf16", optimizer="adamw", batch_size=batch_size, seq_len=seq_len, attention=_kernel,
        checkpointing=_ckpt, activations="textbook", dropout=True) for _kernel in ("eager", "sdpa") for _ckpt in (False, True)}
    training = textbook_runs[attention, checkpointing]
    detail = training.activation_detail  # per layer, layers storing, recompute peak, outside, loss
    # One block by the paper's formula, with the chosen kernel and with eager attention (the recipe's first line).
    per_layer = mm.activations.korthikanti_per_layer(seq_len=seq_len, batch_size=batch_size, hidden_size=width,
                                                     n_heads=n_heads, attention=attention)
    eager_per_layer = mm.activations.korthikanti_per_layer(seq_len=seq_len, batch_size=batch_size,
                                                           hidden_size=width, n_heads=n_heads)
    # memmath's default for this model (the exact trace of transformers' GPT-2 code, the config's dropout of 0.1),
    # for training against inference further down, which is not about the formula.
    training_exact = mm.training_memory(model, precision="bf16", optimizer="adamw", batch_size=batch_size,
                                        seq_len=seq_len, attention=attention, checkpointing=checkpointing)
    inference = mm.inference_memory(model, weights_format="bf16", kv_format="bf16", batch_size=batch_size,
                                    context_len=seq_len, attention=attention)
    # The sweep: one memmath call over a numpy array of lengths or batch sizes (the other stays at your setting),
    # and where activations pass the weights alone and everything else (memmath_lessons.sweeps).
    swept = activation_sweep(model, over=sweep_radio.value, seq_len=seq_len, batch_size=batch_size,
                             attention=attention, checkpointing=checkpointing, unit=unit,
                             activations="textbook", dropout=True)  # the formula's, like the number
    sweep, sweep_values, unit_sweep = swept.memory, swept.values, swept.unit
    crossover, crossover_weights = swept.crossover, swept.crossover_weights

    _setting = (model, batch_size, seq_len, attention, checkpointing, unit)  # what the words and charts follow from
    _warning = show_number(model, training, inference, per_layer, eager_per_layer, seq_len=seq_len,
                           batch_size=batch_size, wanted_heads=heads_slider.chosen, unit=unit, setting=_setting)
    show_comparisons(model, textbook_runs, training, training_exact, inference, attention=attention,
                     checkpointing=checkpointing, unit=unit)
    show_sweep(swept, seq_len, batch_size, sweep_radio.value)
    _warning
    return (attention, batch_size, checkpointing, crossover, crossover_weights, detail,
            eager_per_layer, inference, model, n_heads, n_layers, per_layer, seq_len, sweep, sweep_values,
            swept, textbook_runs, training, training_exact, unit, unit_sweep, vocab, width)


@app.cell(hide_code=True)
def _(assumptions_view, mo):
    mo.accordion({"What else does this estimate assume?": assumptions_view})  # filled by the cell above
    return


@app.cell(hide_code=True)
def _(live_chart):
    bars_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    bars_chart
    return (bars_chart,)


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md("""
    **Takeaway.** Double the sequence and the blocks' s·b·h terms double while the attention scores,
    5·a·s²·b per block, quadruple; double the batch and everything doubles. Weights, gradients and
    optimizer states do not move at all: past some length or batch, activations are the biggest part
    of a training step. Inference keeps no activations for a backward pass: it is a separate calculation.
    """), kind="success")
    return


@app.cell
def _(mm, pd):
    # The formula's terms: memmath.activations.korthikanti_terms at unit sizes (e = 2 B, m = 1 B), so each
    # coefficient is the bytes one tensor costs per s·b·h or per a·s²·b.
    _terms = mm.activations.korthikanti_terms(seq_len=1, batch_size=1, hidden_size=1, n_heads=1)
    terms_table = pd.DataFrame([{"block": t.block, "tensor kept for backward": t.tensor,
                                 "counted per": t.unit, "bytes each": t.coefficient} for t in _terms])
    return (terms_table,)


@app.cell(hide_code=True)
def _(mo, terms_table, viz):
    # The formula's terms, folded, and their sums per s·b·h and per a·s²·b.
    def _sum_of(rows):
        if len(rows) == 1:
            return str(rows["bytes each"].sum())
        return " + ".join(str(c) for c in rows["bytes each"]) + f" = {rows['bytes each'].sum()}"

    _linear = terms_table[terms_table["counted per"] == "s*b*h"]
    _square = terms_table[terms_table["counted per"] == "a*s*s*b"]
    mo.accordion({"Where do the 34 and the 5 come from? The formula, one tensor at a time": mo.vstack([mo.md(r"""
    Korthikanti et al. (2022, *Reducing Activation Recomputation in Large Transformer Models*,
    section 4.1) counted every tensor one GPT transformer block keeps, with 16-bit activations and
    1-byte dropout masks. Their total per layer is **s·b·h·(34 + 5·a·s/h) bytes**, in this notation:

    | symbol | meaning | symbol | meaning |
    |:--|:--|:--|:--|
    | s | sequence length (tokens) | a | attention heads |
    | b | batch size (sequences) | L | layers (blocks) |
    | h | width (hidden size) | V | vocabulary size |

    Each row below is one tensor a block keeps. It is counted per s·b·h (one number per token and
    width unit) or per a·s²·b (one number per pair of tokens, per head), and "bytes each" is what it
    costs per such unit: a 16-bit tensor as wide as the model is 2 bytes per s·b·h.
    `memmath.activations.korthikanti_terms` builds the table; the sums under it are computed from its rows.
    """), viz.plain_table(terms_table.assign(**{"counted per": terms_table["counted per"].str.replace("*", "·")})),
        mo.md(f"""
    - Per **s·b·h** (tensors as wide as the model, or 4h wide in the MLP):
      attention {_sum_of(_linear[_linear.block == "attention"])}, MLP {_sum_of(_linear[_linear.block == "mlp"])},
      norms {_sum_of(_linear[_linear.block == "norms"])}; in all **{_linear["bytes each"].sum()}** bytes.
    - Per **a·s²·b** (one s × s matrix of attention scores per head and sequence):
      {_sum_of(_square)} bytes.

    So one block keeps {_linear["bytes each"].sum()}·s·b·h + {_square["bytes each"].sum()}·a·s²·b bytes,
    which is the paper's s·b·h·(34 + 5·a·s/h). The first part grows in step with the sequence; the
    second grows with its **square**. The score matrices are the only tensors that do.
    """)])})
    return


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    preset_dropdown = mo.ui.dropdown(options=["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b"],
                                     value="gpt2", label="Start from preset")
    mo.vstack([mo.md(r"""
    ## Your model

    Start from a preset of the GPT-2 family (the block Korthikanti et al. describe), then change
    its shape: the number and the chart at the top of the page and everything below follow it.
    Width moves in steps of 64; the heads slider offers only the head counts that divide it.
    """), live_only_notice(), preset_dropdown])
    return (preset_dropdown,)


@app.cell
def _(mm, preset_dropdown):
    preset = mm.PRESETS[preset_dropdown.value]  # its layers, width, heads and vocabulary start the sliders below
    return (preset,)


@app.cell(hide_code=True)
def _(mo, preset):
    # (The static site's notice that these controls need the live workbook stands above, with the preset's.)
    layers_slider = mo.ui.slider(1, 128, value=preset.n_layers, show_value=True, label="Layers L (blocks)")
    width_slider = mo.ui.slider(64, 12288, step=64, value=preset.hidden_size, show_value=True,
                                label="Width h (hidden size)")
    vocab_slider = mo.ui.slider(steps=[1000, 8000, 32000, 50257, 100000, 128256, 256000],
                                value=preset.vocab_size, show_value=True, label="Vocabulary V (tokens)")
    mo.hstack([mo.vstack([layers_slider, width_slider]), vocab_slider], justify="start", gap=2)
    return layers_slider, vocab_slider, width_slider


@app.cell(hide_code=True)
def _(head_counts, live_html, mo, preset, step_slider):
    # Only head counts that divide the width (up to 128), so the slider never shows a model that cannot exist.
    # A width move sends this slider its new steps in place (this cell reads no slider: it runs once a preset),
    # and keeps the learner's last choice; the note below says when that choice does not divide the new width.
    heads_slider = step_slider(head_counts(preset.hidden_size), value=preset.n_heads,
                               label="Attention heads a (the divisors of h)")
    heads_note = live_html()
    mo.vstack([heads_slider, heads_note])
    return heads_note, heads_slider


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    attention_radio = mo.ui.radio(options={"eager (keeps s × s scores)": "eager",
                                           "fused SDPA / FlashAttention": "sdpa"},
                                  value="eager (keeps s × s scores)", label="Attention kernel")
    checkpointing_switch = mo.ui.switch(value=False, label="Gradient checkpointing")
    mo.vstack([mo.md(r"""
    ## Two ways to keep less

    **Fused attention.** PyTorch's `scaled_dot_product_attention` (SDPA) and FlashAttention
    (Dao et al. 2022) compute the softmax in tiles and never write the s × s scores to memory.
    The 5·a·s²·b term disappears.

    **Gradient checkpointing** (Chen et al. 2016, *Training Deep Nets with Sublinear Memory
    Cost*) keeps only each block's input, 2·s·b·h bytes at 16 bits, and throws the rest away; the
    price is roughly one extra forward pass of compute. Switch them for the whole page here; the
    table compares the four combinations for your model, batch and length.
    """), mo.accordion({"Go deeper: what each keeps for the backward pass": mo.md(r"""
    Fused attention keeps one fp32 log-sum-exp per row and head, 4·a·s·b bytes, and recomputes the
    scores from Q and K. Checkpointing, during the backward pass, runs each block's forward again to
    rebuild what it needs, one block at a time: memory falls to about one input per layer plus one
    full block.
    """)}), live_only_notice(), mo.hstack([attention_radio, checkpointing_switch], justify="start", gap=2)])
    return attention_radio, checkpointing_switch


@app.cell(hide_code=True)
def _(live_html, mo):
    # The sections' fixed prose, shown once; the run's cell near the top fills the live views between it (the
    # combinations, the numbers, the crossings) on every slider move, and the page replaces those alone.
    combos_view, why_view, numbers_view, crossings_view = live_html(), live_html(), live_html(), live_html()
    _split = mo.vstack([mo.md(r"""
    The article insists on this split. For training it points to EleutherAI's *Transformer Math 101*
    (Anthony et al., April 2023); for inference to *Transformer Inference Arithmetic* (Carol Chen,
    kipply's blog, March 2022). The reason is the backward pass.
    """), numbers_view])
    mo.vstack([combos_view, why_view, mo.accordion({"Go deeper: training and inference are separate calculations":
                                                    _split}), mo.md(r"""
    ## Where activations overtake the weights

    The chart sweeps the sequence length or the batch (the other stays at your
    setting), counting activations by Korthikanti et al.'s formula as the number at the top does,
    and marks the first point where activations pass the weights alone (hollow diamond) and where
    they pass weights, gradients and optimizer states together (black diamond).
    """), crossings_view])
    return combos_view, crossings_view, numbers_view, why_view


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    sweep_radio = mo.ui.radio(options=["sequence length", "batch size"], value="sequence length",
                              inline=True, label="Sweep over")
    mo.vstack([live_only_notice(), sweep_radio])
    return (sweep_radio,)


@app.cell(hide_code=True)
def _(live_chart):
    sweep_chart = live_chart()  # drawn once (this cell reads no control); the cell above sends it new rows
    sweep_chart
    return (sweep_chart,)


@app.cell
def _(mo, site_charts):
    # One control per quantity: live, the controls above move these numbers, so only the static site (where
    # those are frozen and this chart's own inputs are the page's live controls) shows it, and only it builds it
    # (memmath_lessons.site_charts: code the live page never runs is not parsed with the lesson).
    mo.vstack([mo.md(r"""
    The next chart is the same race for GPT-2 small as published (12 layers, width 768, 12 heads),
    in pure bf16 with AdamW, computed in advance for every batch size, kernel and checkpointing
    choice under it. Its activations are memmath's default for GPT-2, the exact trace of what
    transformers' code keeps (with the dropout of GPT-2's config), not the formula: GPT-2's
    gelu_new keeps more than the formula's GeLU. Those inputs keep working in this static copy of
    the page, where the controls above are frozen.
    """), site_charts.gpt2_activations()]) if site_charts.is_static_export() else None
    return
@app.cell(hide_code=True)
def _(live_only_notice, measured_versions, mo):
    measured_family_dropdown = mo.ui.dropdown(
        options={"GPT-2": "gpt2", "LLaMA (multi-head)": "llama-mha", "LLaMA (grouped-query)": "llama-gqa",
                 "BERT": "bert"}, value="GPT-2", label="Model")
    measured_attention_radio = mo.ui.radio(options={"eager": "eager", "fused (SDPA)": "sdpa"}, value="eager",
                                           inline=True, label="Attention")
    measured_dropout_switch = mo.ui.switch(value=False, label="Dropout (p = 0.1)")
    measured_checkpointing_switch = mo.ui.switch(value=False, label="Gradient checkpointing")
    mo.vstack([mo.md("""
    ## Does PyTorch keep what the formula counts?

    The formula is a model of one GPT block. memmath also replays what each family's PyTorch code
    keeps, tensor by tensor (`activations="transformers"`), and both were checked against real
    training steps recorded on the CPU. Pick a recorded case:
    """), mo.accordion({"How were the cases recorded?": mo.md(f"""
    The workbook's `validation/measure.py` built small GPT-2, LLaMA and BERT models from their configs,
    ran one real training step and recorded every storage autograd saved for backward during the
    forward pass, block by block (README, section "Fidelity"). It ran **on the CPU, with tiny models**
    (3 blocks, width 64, a vocabulary of 1,000 tokens, a batch of 2 sequences of 64 tokens;
    {measured_versions}). `activations="textbook"` is the formula this lesson teaches;
    `activations="transformers"`, memmath's default for a model read from a config, replays what each
    family's PyTorch code keeps.
    """)}), live_only_notice(), mo.hstack([measured_family_dropdown, measured_attention_radio], justify="start", gap=2),
               mo.hstack([measured_dropout_switch, measured_checkpointing_switch], justify="start", gap=2)])
    return (measured_attention_radio, measured_checkpointing_switch, measured_dropout_switch,
            measured_family_dropdown)


@app.cell
def _(pd, reference):
    measured_cases = reference.load_measured()  # the recording: one real training step per case (no torch needed)
    _v = reference.measured_metadata()["versions"]
    measured_versions = f"torch {_v['torch']}, transformers {_v['transformers']}"
    # Every recorded case against the textbook model: (predicted - measured) / measured, of the forward's
    # saved bytes. (activations="transformers" equals every one: tests/test_fidelity.py checks each case.)
    measured_errors = pd.DataFrame([{
        "textbook": (int(reference.predict_case(c, activations="textbook").activation_detail.saved_by_forward)
                     - int(c["saved_bytes"])) / int(c["saved_bytes"])} for c in measured_cases.to_dict("records")])
    return measured_cases, measured_errors, measured_versions


@app.cell(hide_code=True)
def _(live_chart):
    measured_chart = live_chart()  # drawn once (reads no control); the recorded case's cell below sends it rows
    measured_chart
    return (measured_chart,)


@app.cell
def _(measured_attention_radio, measured_cases, measured_checkpointing_switch, measured_dropout_switch,
      measured_family_dropdown, pd, recorded, reference):
    # The chosen recorded case (full finetuning, AdamW, 2 x 64 tokens) and memmath's two predictions of what its
    # forward pass saved: the replay of the family's PyTorch code and the textbook formula.
    measured_case = recorded.full_finetuning_case(
        measured_cases, shape=measured_family_dropdown.value, attention=measured_attention_radio.value,
        dropout=measured_dropout_switch.value, checkpointing=measured_checkpointing_switch.value)
    measured_hf = reference.predict_case(measured_case).activation_detail  # activations="transformers"
    measured_textbook = reference.predict_case(measured_case, activations="textbook").activation_detail
    measured_blocks_hf = sum(reference.predicted_saved_per_layer(measured_case))  # booked per block like the measurement
    # What the forward pass saved (the recompute of checkpointing comes later, during backward).
    measured_frame = recorded.saved_bytes_frame(measured_case, measured_hf, measured_textbook, measured_blocks_hf)
    # One block, tensor by tensor: what PyTorch keeps (memmath's replay) against the formula's terms at the case's
    # sizes (with checkpointing, the block's input alone: "Two ways to keep less").
    block_terms = pd.DataFrame([{"what one block keeps": what, "bytes": int(n)}
                                for where, what, n in measured_hf.terms if where == "each block"])
    formula_block_terms = recorded.formula_terms_frame(measured_case)
    return (block_terms, formula_block_terms, measured_blocks_hf, measured_case, measured_frame, measured_hf,
            measured_textbook)


@app.cell(hide_code=True)
def _(activation_views, block_terms, formula_block_terms, lesson_charts, measured_case, measured_chart,
      measured_errors, measured_frame, measured_hf, measured_textbook, mo, term_bytes, viz):
    # The case's chart and summary, then (folded) tensor by tensor and why the textbook misses
    # (each difference, with its bytes per block).
    measured_why = activation_views.textbook_misses(measured_case, measured_hf, measured_textbook, term_bytes)
    measured_chart.update(lesson_charts.recorded_saved(measured_frame, str(measured_case["case_id"])))
    _measured = int(measured_case["saved_bytes"])
    _hf, _tb = int(measured_hf.saved_by_forward), int(measured_textbook.saved_by_forward)
    _textbook = measured_errors["textbook"]
    _summary = mo.md(f"""
    The forward pass saved **{_measured:,} B**. `activations="transformers"` predicts **{_hf:,} B**
    ({"equal to the byte" if _hf == _measured else f"{(_hf - _measured) / _measured:+.2%}"}); the textbook
    formula gives {_tb:,} B, **{(_tb - _measured) / _measured:+.0%}**. Over all {len(measured_errors)} recorded
    cases (LoRA and freezing too), the first is equal to the byte in every one (the test suite checks
    each); the textbook is off by {_textbook.abs().mean():.0%} on average, from {_textbook.min():+.0%} to
    {_textbook.max():+.0%}.
    """)
    _gpt = ("" if measured_case["family"] == "gpt2" or measured_case["checkpointing"] else
            " The formula describes a GPT block (LayerNorm, GeLU MLP of width 4h); this model's own block is on the left.")
    mo.vstack([_summary, mo.accordion({"Why does the textbook miss? One block, tensor by tensor": mo.vstack([
        mo.md(f"One block, tensor by tensor. Left, what PyTorch keeps (memmath's replay, equal to the measurement): "
              f"**{block_terms['bytes'].sum():,} B**. Right, the formula's terms at the same sizes: "
              f"**{formula_block_terms['bytes'].sum():,} B**.{_gpt}"),
        mo.hstack([viz.plain_table(block_terms), viz.plain_table(formula_block_terms)], widths="equal", gap=1),
        mo.md("Why the textbook misses, for this case:\n\n" + "\n".join(f"- {w}" for w in measured_why)),
    ])})])
    return


@app.cell(hide_code=True)
def _(live_only_notice, mo):
    timeline_model_dropdown = mo.ui.dropdown(options=["gpt2", "llama-2-7b", "llama-3-8b"], value="llama-2-7b",
                                             label="Model")
    timeline_method_radio = mo.ui.radio(options={"full finetuning": "full", "LoRA, rank 16 on q and v": "lora"},
                                        value="full finetuning", inline=True, label="Method")
    timeline_checkpointing_switch = mo.ui.switch(value=False, label="Gradient checkpointing")
    timeline_batch_slider = mo.ui.slider(steps=[1, 2, 4, 8, 16], value=1, show_value=True, label="Batch size")
    mo.vstack([mo.md(r"""
    ## A step's memory over time

    Every number so far is a total. On the card, memory rises and falls inside each step. The
    tallest bar is the step's peak, the number the planner (lesson 8) judges. Each run is in pure
    bf16 with AdamW at 2,048 tokens, a step after the first (the optimizer states already exist).
    """), mo.accordion({"Go deeper: what rises and falls inside a step": mo.md(r"""
    The forward pass piles up saved activations, the backward pass frees them block by block while
    gradients appear, and the optimizer step needs its temporaries on top of everything it
    updates. The chart shows memmath's estimate at each moment that can be the highest, in the
    order a step reaches them, split by what holds the bytes.
    """)}), live_only_notice(), mo.hstack([timeline_model_dropdown, timeline_batch_slider], justify="start"),
        mo.hstack([timeline_method_radio, timeline_checkpointing_switch], justify="start")])
    return (timeline_batch_slider, timeline_checkpointing_switch, timeline_method_radio, timeline_model_dropdown)


@app.cell(hide_code=True)
def _(live_chart):
    timeline_chart = live_chart()  # drawn once (this cell reads no control); the cell below sends it new rows
    timeline_chart
    return (timeline_chart,)


@app.cell
def _(lesson_charts, mm, timeline_batch_slider, timeline_chart, timeline_checkpointing_switch,
      timeline_method_radio, timeline_model_dropdown, unit_radio):
    timeline_run = mm.Run(timeline_model_dropdown.value, batch_size=timeline_batch_slider.value, seq_len=2048,
                          checkpointing=timeline_checkpointing_switch.value,
                          method=mm.LoRA(rank=16) if timeline_method_radio.value == "lora" else mm.Full())
    timeline = mm.step_timeline(timeline_run)
    timeline_requirement = mm.requirement(timeline_run)  # what the planner judges the run by (lesson 8)
    _frame = timeline.frame()
    _frame["size"] = _frame["bytes"] / mm.UNITS[unit_radio.value]
    _moments = list(dict.fromkeys(_frame["when"]))
    timeline_chart.update(_frame, draw=lesson_charts.step_timeline(unit_radio.value, _moments),
                          key=(unit_radio.value, tuple(_moments)))
    return timeline, timeline_requirement, timeline_run


@app.cell(hide_code=True)
def _(format_bytes, mo, timeline, timeline_requirement, unit_radio):
    _peak, _unit = timeline.peak, unit_radio.value
    _first, _requirement = timeline.points[0], timeline_requirement
    _saved_top = max(timeline.points, key=lambda p: p.parts["saved activations"])
    _moments = mo.md(f"""
    Before the step the card holds {format_bytes(_first.total, _unit)}: the weights and the optimizer
    states the previous step made. The saved activations peak at
    {format_bytes(_saved_top.parts["saved activations"], _unit)} ({_saved_top.short}); by the end of the
    backward pass they are gone and the gradients have taken their place.
    """)
    mo.vstack([mo.md(f"""
    The highest moment is
    **{_peak.short}, {format_bytes(_peak.total, _unit)}**: {_peak.label}. That is the step's peak, and
    the planner judges this run on the same {format_bytes(_requirement.bytes, _unit)} (lesson 8). The sum
    of the parts, {format_bytes(_requirement.memory.total, _unit)}, is a different number: it adds parts
    that are never all alive at once, and leaves out the temporaries that come on top.
    """), mo.accordion({"Go deeper: the step before its peak": _moments})])
    return


@app.cell(hide_code=True)
def _(mo, recorded, when_opened):
    # Its chart and table (some 80 kB of the page) are built when the learner opens the fold.
    mo.accordion({"Measured: a small model's step on a CPU, beside the prediction":
                  when_opened(recorded.timeline_view)})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.callout(mo.md("""
    **Takeaways**

    - One GPT block at 16 bits keeps s·b·h·(34 + 5·a·s/h) bytes (Korthikanti et al. 2022); the
      attention scores, 5·a·s²·b, grow with the square of the sequence.
    - Fused attention never stores the s × s scores; checkpointing keeps only each block's input.
    - The loss's fp32 logits, 4·s·b·V bytes, are large when the vocabulary is large.
    """), kind="success")
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md("""
    ## Problems
    """)
    return


@app.cell
def _(mm):
    # The four problems' numbers, one memmath call each (the folds under "Problems" word them).
    # Problem 1: one GPT-2 block over its whole context, eager attention (Korthikanti et al. 2022, section 4.1).
    gpt2_small = mm.PRESETS["gpt2"]
    _s, _h, _a = gpt2_small.max_positions, gpt2_small.hidden_size, gpt2_small.n_heads
    problem1_block = mm.activations.korthikanti_per_layer(seq_len=_s, batch_size=1, hidden_size=_h, n_heads=_a)
    problem1_scores = 5 * _a * _s * _s  # 5·a·s²·b at b = 1
    # Problem 2: GPT-2 XL's activations with eager and with fused attention, by Korthikanti et al.'s model, asked
    # for by name (memmath's default for a preset is the exact trace of transformers' code).
    gpt2_xl = mm.PRESETS["gpt2-xl"]
    _s, _b, _a = gpt2_xl.max_positions, 8, gpt2_xl.n_heads
    problem2_eager, problem2_fused = (
        mm.training_memory(gpt2_xl, precision="bf16", seq_len=_s, batch_size=_b, attention=k,
                           activations="textbook", dropout=True).activations for k in ("eager", "sdpa"))
    problem2_scores, problem2_lse = 5 * _a * _s * _s * _b, 4 * _a * _s * _b  # per layer, eager and fused
    # Problem 3: one block with fused attention (34·s·b·h + 4·a·s·b) against checkpointing's 16-bit input alone.
    problem3_full = mm.activations.korthikanti_per_layer(seq_len=4096, batch_size=1, hidden_size=4096, n_heads=32,
                                                         attention="sdpa")
    problem3_kept = 2 * 4096 * 1 * 4096  # checkpointing keeps the block's 16-bit input: 2·s·b·h
    # Problem 4: GPT-2 small with fused attention and checkpointing, counted by the formula's model, by name.
    problem4_detail = mm.training_memory(gpt2_small, seq_len=gpt2_small.max_positions, batch_size=8, attention="sdpa",
                                         checkpointing=True, activations="textbook", dropout=True).activation_detail
    return (gpt2_small, gpt2_xl, problem1_block, problem1_scores, problem2_eager, problem2_fused, problem2_lse,
            problem2_scores, problem3_full, problem3_kept, problem4_detail)


@app.cell(hide_code=True)
def _(format_bytes, gpt2_small, mo, problem1_block, problem1_scores):
    _s, _h, _a = gpt2_small.max_positions, gpt2_small.hidden_size, gpt2_small.n_heads
    _layer, _square = problem1_block, problem1_scores
    mo.accordion({"Problem 1: one GPT-2 block, and its share of scores": mo.vstack([
        mo.md(f"**1.** GPT-2 small has h = {_h} and a = {_a}. For one sequence of {_s:,} tokens, how many "
              "bytes does one block keep with eager attention, and what share of that is the s × s term?"),
        mo.accordion({"Answer": mo.md(
            f"s·b·h = {_s:,} × {_h} = {_s * _h:,}, and 5·a·s/h = 5 × {_a} × {_s:,} / {_h} = {5 * _a * _s // _h}, "
            f"so one block keeps {_s * _h:,} × (34 + {5 * _a * _s // _h}) = **{_layer:,} B** "
            f"({format_bytes(_layer, 'MB')}). The score term "
            f"5·a·s²·b = {_square:,} B is {_square / _layer:.0%} of it.")}),
    ])})
    return


@app.cell(hide_code=True)
def _(format_bytes, gpt2_xl, mo, problem2_eager, problem2_fused, problem2_lse, problem2_scores):
    _model, _eager, _fused = gpt2_xl, problem2_eager, problem2_fused
    _s, _b, _a, _L = _model.max_positions, 8, _model.n_heads, _model.n_layers
    mo.accordion({"Problem 2: what fused attention saves on GPT-2 XL": mo.vstack([
        mo.md(f"**2.** GPT-2 XL ({_L} layers, h = {_model.hidden_size:,}, a = {_a}) trains on {_b} sequences of "
              f"{_s:,} tokens in bf16. By Korthikanti et al.'s formula, how much activation memory does fused "
              "attention save?"),
        mo.accordion({"Answer": mo.md(
            f"Eager: {format_bytes(_eager)}; fused: {format_bytes(_fused)}. It saves "
            f"{format_bytes(_eager - _fused)}: in each of the {_L} layers, 5·a·s²·b = 5 × {_a} × {_s:,}² × {_b} "
            f"= {format_bytes(problem2_scores)} of scores become a 4·a·s·b log-sum-exp of "
            f"{format_bytes(problem2_lse, 'MB')}.")}),
    ])})
    return


@app.cell(hide_code=True)
def _(mo, problem3_full, problem3_kept):
    _full, _kept = problem3_full, problem3_kept
    mo.accordion({"Problem 3: what checkpointing saves in one block": mo.vstack([
        mo.md("**3.** A block with h = 4,096 and a = 32 uses fused attention at s = 4,096, b = 1. "
              "By what factor does gradient checkpointing shrink what each block keeps?"),
        mo.accordion({"Answer": mo.md(
            f"Without it, 34·s·b·h + 4·a·s·b = {_full:,} B; with it, the input alone, 2·s·b·h = {_kept:,} B: "
            f"**{_full / _kept:.1f}× less** per block, nearly all of it from the s·b·h terms (34/2). The price "
            "is a second forward pass through each block during backward.")}),
    ])})
    return


@app.cell(hide_code=True)
def _(format_bytes, gpt2_small, mo, problem4_detail):
    _s, _b, _V, _d = gpt2_small.max_positions, 8, gpt2_small.vocab_size, problem4_detail
    mo.accordion({"Problem 4: checkpointed block inputs or the loss's logits?": mo.vstack([
        mo.md(f"**4.** GPT-2 small (V = {_V:,}), {_b} sequences of {_s:,} tokens, fused attention and "
              "checkpointing, counted by the formula. Which is bigger: all the checkpointed block inputs or the "
              "loss's logits?"),
        mo.accordion({"Answer": mo.md(
            f"Block inputs: {_d.layers_storing} × 2·s·b·h = {format_bytes(_d.per_layer * _d.layers_storing, 'MB')}. "
            f"Logits: 4·s·b·V = 4 × {_s:,} × {_b} × {_V:,} = {format_bytes(_d.loss)}, about "
            f"{_d.loss / (_d.per_layer * _d.layers_storing):.0f}× more. In a small model with a big vocabulary, "
            "the loss dominates once the blocks are checkpointed.")}),
    ])})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.accordion({"What do the lesson's helpers do?": mo.md("""
    One small helper lists the head counts that divide the width; another adds up the bytes of
    the tensors an activation estimate lists, by place and name; a third writes a ratio with two
    significant digits below 1. Sizes are printed with `viz.readable_size`, in the largest unit of
    the chosen family (TB, GB, MB, KB or TiB, GiB, MiB, KiB) that the size fills.
    """)})
    return


@app.cell(hide_code=True)
def _(activation_views, assumptions_view, bars_chart, combos_view, crossings_view, functools, heads_note, number_view,
      numbers_view, preset, ratio_text, sweep_chart, why_view):
    # The run's words and charts, by memmath_lessons.activation_views, into this page's live views.
    show_number = activation_views.number_shower(preset, heads_note=heads_note, bars_chart=bars_chart,
                                                 number_view=number_view, assumptions_view=assumptions_view)
    show_comparisons = functools.partial(activation_views.show_comparisons, combos_view=combos_view, why_view=why_view,
                                         numbers_view=numbers_view, ratio_text=ratio_text)
    show_sweep = functools.partial(activation_views.show_sweep, sweep_chart=sweep_chart, crossings_view=crossings_view)
    return show_comparisons, show_number, show_sweep


@app.cell
def _(functools, sweeps):
    # A sweep is kept per setting (the model is hashable): a slider moved back and forth asks for the same ones.
    activation_sweep = functools.lru_cache(maxsize=64)(sweeps.activation_sweep)
    return (activation_sweep,)


@app.cell
def _():
    # The lesson's three small helpers (one cell: marimo parses and compiles each cell apart at every start).
    def head_counts(width):
        """The head counts up to 128 that divide width (so every head has a whole size), in increasing order."""
        return [a for a in range(1, 129) if width % a == 0]

    def ratio_text(a, b):
        """a / b as '3.21×', with two significant digits below 1 ('0.0031×', never '0.00×')."""
        return f"{a / b:,.2f}×" if a >= b else f"{a / b:.2g}×"

    def term_bytes(terms, places, word):
        """Bytes of the estimate's terms (where, what, bytes) in `places` whose name contains `word`."""
        return sum(int(n) for where, what, n in terms if where in places and word in what)
    return head_counts, ratio_text, term_bytes


if __name__ == "__main__":
    app.run()
