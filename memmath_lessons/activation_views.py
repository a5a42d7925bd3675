"""Lesson 3's words and charts: what its run cell hands the numbers to.

The lesson computes in view (every memmath call sits in a cell a learner can open); these functions only word
and draw what it computed: the number at the top with its recipe and chart, the four combinations of kernel and
checkpointing, training against inference, and the sweep, each into the page's live chart and live views
(memmath_lessons.live_chart, live_html), which cells that read no control show once. Kept here, not in hidden
cells, so that marimo reads and compiles them once, as a module's bytecode, rather than from the notebook's
source at every start.
"""

from __future__ import annotations

import marimo as mo
import pandas as pd

from . import lesson_charts, viz
from .live_html import cached_md

__all__ = ["number_shower", "number_views", "show_comparisons", "show_sweep", "textbook_misses"]


def number_views(preset, model, training, inference, per_layer, eager_per_layer, *, seq_len, batch_size, wanted_heads, unit):
    """What the top of the page shows: (the heads note, the chart, the number with its recipe, the assumptions,
    the warning or None). preset is the preset the learner started from."""
    _s, _b, _h, _a, _V = seq_len, batch_size, model.hidden_size, model.n_heads, model.vocab_size
    _heads = cached_md(
        f"*Attention heads shows {_a}, not your {wanted_heads}: {wanted_heads} heads do not divide a "
        f"width of {_h:,}, and {_a} is the largest count below it that does.*" if _a != wanted_heads else "")
    _unit = viz.readable_unit(max(training.total, inference.total), unit)  # MB for a small model
    _bars = viz.breakdown_long({"Training (your settings)": training,
                                "Inference, same batch and length": inference}, _unit)
    # JSON directly, for the live chart below: every slider sends it new rows (a new unit draws it anew).
    _chart = viz.stacked_bars_output(_bars, _unit, title="Where the memory goes")
    detail, _size = training.activation_detail, lambda n: viz.readable_size(n, unit)  # noqa: E731
    _kernel = ("" if per_layer == eager_per_layer else f" Fused attention drops the s × s terms and adds a "
               f"4·a·s·b log-sum-exp: 34·s·b·h + 4·a·s·b = **{_size(per_layer)}**.")
    _recompute = (f" Checkpointing keeps only each block's input (2·s·b·h) and rebuilds one whole block, "
                  f"{_size(detail.recompute_peak)}, at a time during the backward pass."
                  if detail.recompute_peak else "")
    _is_preset = (model.n_layers, _h, _a, _V) == (preset.n_layers, preset.hidden_size, preset.n_heads,
                                                  preset.vocab_size)
    _which = (f"the preset `{preset.name}` (change it under *Your model* below)" if _is_preset else
              "your model (set under *Your model* below)")
    _number = cached_md(f"""
    **The number.** For {_which}, {model.n_params:,} parameters, at b = {_b} sequences of s = {_s:,} tokens
    in pure bf16, by Korthikanti et al.'s formula: **activations {_size(training.activations)}**,
    against {_size(training.without_activations)} for weights, gradients and AdamW states
    together. Recipe (Korthikanti et al. 2022, section 4.1, 16-bit activations and 1-byte dropout masks):

    - One block with eager attention keeps s·b·h·(34 + 5·a·s/h) =
      {_s:,}·{_b}·{_h:,}·(34 + 5·{_a}·{_s:,}/{_h:,}) = **{_size(eager_per_layer)}**.{_kernel}
    - The blocks: {detail.layers_storing} {"layer" if detail.layers_storing == 1 else "layers"} ×
      {_size(detail.per_layer)} kept per layer
      = {_size(detail.per_layer * detail.layers_storing)}.{_recompute}
    - Outside the blocks: the inputs of the final norm and the head and the embedding dropout mask,
      {_size(detail.outside_layers)}.
    - The loss: fp32 logits over the vocabulary, 4·s·b·V = 4·{_s:,}·{_b}·{_V:,} = {_size(detail.loss)}.
    """)
    _assumptions = cached_md(
        f"{training.assumptions} Activations are Korthikanti et al.'s model (`activations=\"textbook\"`): 16-bit, "
        "with 1-byte dropout masks after the attention, the blocks and the embeddings, as in the paper."
        """

    These numbers, the chart under them, the comparisons and the sweep below are the paper's model of a
    GPT block (`activations="textbook"` in memmath). memmath's default for a model with a config (every
    preset, and this page's model) replays what transformers' own code keeps, tensor by tensor;
    *Does PyTorch keep what the formula counts?* further down checks both against recorded training steps.
    """)
    _warning = None if _s <= preset.max_positions else mo.vstack([mo.callout(cached_md(
        f"{preset.name} learned only {preset.max_positions:,} positions; the arithmetic for {_s:,} tokens is "
        "the same, but the real model would need more position embeddings."), kind="warn")])
    return _heads, _chart, _number, _assumptions, _warning


def number_shower(preset, *, heads_note, bars_chart, number_view, assumptions_view):
    """show_number for the preset the learner started from, into the page's live views: the heads note, the
    chart, the number with its recipe and the assumptions."""
    # What the top of the page showed for each setting, kept for the settings a learner returns to (a slider moved
    # back and forth): its chart's rows and recipe take a few ms of pandas and markdown, putting them back almost none.
    _shown = {}

    def show_number(model, training, inference, per_layer, eager_per_layer, *, seq_len, batch_size, wanted_heads, unit,
                    setting):
        """The number at the top with its recipe, the chart under it, the heads note; returns the warning, if any.
        setting is what they follow from (the model, batch, length, kernel, checkpointing and unit)."""
        if (setting, wanted_heads) not in _shown:
            if len(_shown) >= 256:  # a bound, as memmath's own caches have
                _shown.clear()
            _shown[setting, wanted_heads] = number_views(preset, model, training, inference, per_layer,
                                                         eager_per_layer, seq_len=seq_len, batch_size=batch_size,
                                                         wanted_heads=wanted_heads, unit=unit)
        _heads, _chart, _number, _assumptions, _warning = _shown[setting, wanted_heads]
        heads_note.update(_heads)
        bars_chart.update(_chart)
        number_view.update(_number)
        assumptions_view.update(_assumptions)
        return _warning

    return show_number


def show_comparisons(model, textbook_runs, training, training_exact, inference, *, attention, checkpointing, unit,
                     combos_view, why_view, numbers_view, ratio_text):
    """The four combinations, why checkpointing can keep more, and training against inference, into the page's
    live views; ratio_text writes a ratio as the lesson's helper does."""
    _size = lambda n: viz.readable_size(n, unit)  # noqa: E731
    combos_view.update(pd.DataFrame([
        {"attention": "eager" if _kernel == "eager" else "fused (SDPA)", "checkpointing": "yes" if _ckpt else "no",
         "activations": _size(_r.activations), "total": _size(_r.total),
         "activations / rest": ratio_text(_r.activations, _r.without_activations)}
        for (_kernel, _ckpt), _r in textbook_runs.items()]))
    _costlier = [a for a in ("eager", "sdpa") if textbook_runs[a, True].activations > textbook_runs[a, False].activations]
    _d = textbook_runs[_costlier[0], True].activation_detail if _costlier else None
    why_view.update(cached_md("" if not _costlier else
        f"Here checkpointing keeps *more*, not less: with {model.n_layers} "
        f"{'layer' if model.n_layers == 1 else 'layers'}, it keeps each block's input "
        f"({_size(_d.per_layer * _d.layers_storing)} in all) and still rebuilds one whole "
        f"block during the backward pass ({_size(_d.recompute_peak)}), which is about what "
        "the run without it keeps. Checkpointing pays off when there are many blocks whose insides it can drop."))
    # memmath's default model, named (the textbook, with memmath's reason, wherever the exact one does not apply).
    _chosen = ("fused (SDPA)" if attention == "sdpa" else "eager") + " attention" + (
        " and the checkpointing" if checkpointing else "")
    _exact_model = (f"the exact trace of what transformers' GPT-2 code keeps, with the {_chosen} chosen above, and "
                    "the dropout of GPT-2's config"
                    if training_exact.activation_model == "transformers" else
                    "; ".join(n.text for n in training_exact.notes if n.kind == "activations_textbook_fallback"))
    numbers_view.update(cached_md(f"""
    Training must keep its activations until the backward pass has used them:
    {_size(training_exact.activations)} here by memmath's default ({_exact_model}; the
    formula above counts {_size(training.activations)}), on top of gradients and optimizer
    states. Inference has no backward pass. It computes one block, passes the result on and forgets it, so it
    needs only a transient working set ({_size(inference.working_set)} for a prefill of the
    same batch and length) and a **KV cache** of the keys and values of earlier tokens
    ({_size(inference.kv_cache)}), which decoding reuses for each new token.

    For the same model, batch and length: training {_size(training_exact.total)}, inference
    {_size(inference.total)} (weights in bf16; the bars at the top of the page put the same
    inference next to the formula's training). {viz.lesson_link("07_inference", "Lesson 7")} does the
    inference side in full.
    """))


def show_sweep(swept, seq_len, batch_size, over, *, sweep_chart, crossings_view):
    """The sweep's chart and where activations pass the weights, and everything else."""
    sweep_chart.update(swept.frame, draw=lesson_charts.activation_sweep(swept.x_title, swept.unit),
                       key=(swept.x_title, swept.unit))
    if over == "sequence length":
        _fixed, _what = f"a batch of {batch_size}", "a sequence length of"
    else:
        _fixed, _what = f"sequences of {seq_len:,} tokens", "a batch size of"

    def _where(x, what):
        if x is None:
            return f"stay below {what} over the whole sweep"
        _verb = "are already bigger than" if x == swept.values[0] else "pass"
        return f"{_verb} {what} at **{_what} {x:,}**"

    crossings_view.update(cached_md(f"""
    With {_fixed}, activations by the formula {_where(swept.crossover_weights, 'the weights')}, and
    {_where(swept.crossover, 'weights, gradients and optimizer states together')} (the dashed line is your setting).
    """))


def textbook_misses(measured_case, measured_hf, measured_textbook, term_bytes):
    """Why the textbook misses a recorded case (lesson 3): each difference, with its bytes per block, as markdown
    items. measured_hf and measured_textbook are the case's activation_detail by activations="transformers" and
    "textbook"; term_bytes(terms, places, word) is the lesson's helper that adds up the terms by place and name."""
    _e = 4 if measured_case["precision"] == "fp32" else 2
    _terms, _blocks = measured_hf.terms, ["each block"]
    measured_why = []
    if measured_case["checkpointing"]:
        measured_why.append(f"**Checkpointing**: each block keeps only its input, {term_bytes(_terms, _blocks, 'block input'):,} B "
                    "in both models, and the rest is rebuilt during backward (not counted here: it is not saved by "
                    "the forward pass). What is left is mostly outside the blocks, where the two models differ.")
    else:
        _gelu = term_bytes(_terms, _blocks, "gelu_new")
        if _gelu:
            measured_why.append(f"**gelu_new** (GPT-2's tanh GELU) keeps four tensors as wide as the MLP for its backward "
                        f"(its input, the tanh, 1 + tanh, 0.5·x): {_gelu:,} B per block, where the formula counts only "
                        "the GeLU's input (its output, the next linear layer's input, is on both lists).")
        _swiglu = term_bytes(_terms, _blocks, "SwiGLU")
        if _swiglu:
            measured_why.append(f"**SwiGLU**: LLaMA's MLP keeps three tensors of its intermediate width, {_swiglu:,} B per "
                        "block, not GeLU's two of 4h.")
        _upcast = term_bytes(_terms, _blocks, "fp32") - term_bytes(_terms, _blocks, "log-sum-exp")
        if _upcast and measured_case["precision"] != "fp32":
            measured_why.append(f"**fp32 upcasts**: {_upcast:,} B per block are kept in fp32 in this {measured_case['precision']} "
                        "model (LLaMA's RMSNorm computes in fp32 and its eager softmax too; on the CPU, attention "
                        "with dropout runs PyTorch's math kernel, also in fp32).")
        _masks = term_bytes(_terms, _blocks, "mask")
        if _masks:
            measured_why.append(f"**Dropout masks on the CPU** take the element size ({_e} B each here), not the paper's 1 B "
                        f"(CUDA): {_masks:,} B per block.")
        if measured_case["attention"] == "sdpa" and measured_case["dropout"]:
            _math = sum(term_bytes(_terms, _blocks, w) for w in ("copy", "softmax", "probabilities"))
            measured_why.append(f"**SDPA with dropout on the CPU** is not fused: PyTorch falls back to its math kernel, which "
                        f"keeps copies of Q, K and V, the s × s softmax and the dropped probabilities (its mask is above), "
                        f"{_math:,} B per block, where the formula's fused attention keeps one log-sum-exp.")
        elif measured_case["attention"] == "sdpa":
            measured_why.append(f"**Fused attention** (SDPA) keeps Q, K, V as it received them and its output, "
                        f"{term_bytes(_terms, _blocks, 'SDPA'):,} B per block: the same kind of tensors the formula "
                        "counts under Q, K, V and the output projection's input, at this model's own sizes.")
    _outside = int(measured_case["saved_outside_layers"])
    _textbook_outside = int(measured_textbook.outside_layers + measured_textbook.loss)
    if measured_case["family"] == "bert":
        measured_why.append(f"**Outside the blocks**, PyTorch kept {_outside:,} B: the embeddings' LayerNorm and dropout, "
                    f"the pooler, the classifier and its 2-label loss. The textbook model counts {_textbook_outside:,} B "
                    "there (the pooler's input and the loss): the formula describes the blocks only.")
    else:
        _loss = term_bytes(_terms, ["loss"], "")
        measured_why.append(f"**Outside the blocks**: the loss over the vocabulary alone keeps {_loss:,} B "
                    f"({_loss / int(measured_case['saved_bytes']):.0%} of everything saved here). The per-block formula has no "
                    "such term; memmath's textbook model adds the fp32 logits, 4·s·b·V, so both models count it.")
    return measured_why
