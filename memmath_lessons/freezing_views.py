"""Lesson 4's words and charts: what its computing cells hand the numbers to.

The lesson computes in view (every memmath call sits in a cell a learner can open); these functions only word
and draw what it computed: the equal layers' number, what trains in a real model, what freezing saves, the
recorded check against PyTorch and the BERT-large report, each into the page's live charts and live views
(memmath_lessons.live_chart, live_html), which cells that read no control show once. Kept here, not in hidden
cells, so that marimo reads and compiles them once, as a module's bytecode, rather than from the notebook's
source at every start.
"""

from __future__ import annotations

import altair as alt
import marimo as mo
import numpy as np
import pandas as pd

from memmath import format_bytes, to_unit

from . import lesson_charts, viz
from .reference import literature

__all__ = ["recorded_case_view", "show_bert", "show_equal_layers", "show_saves", "show_what_trains"]


def show_equal_layers(n_params, n_layers, n_frozen, equal_full, equal_frozen, unit, *, article_bpp, layers_chart):
    """The core path's number with its recipe, and its chart's rows (into layers_chart); article_bpp is the
    article's bytes per parameter."""
    # N // L parameters in each layer; the N mod L left over sit outside the layers (memmath.uniform_model: as its
    # "embeddings", which Freeze keeps frozen). With no layer frozen every parameter trains: full finetuning.
    _per_layer, _left_over = divmod(n_params, n_layers)
    _w, _g, _o = article_bpp["weights"], article_bpp["gradients"], article_bpp["optimizer_states"]
    _trainable = equal_frozen.trainable_params
    _saved = equal_full.total - equal_frozen.total
    _frozen_text = "With no layer frozen" if n_frozen == 0 else f"With {n_frozen} of {n_layers} layers frozen"
    _split = "" if not _left_over else (
        f". {n_params:,} does not split into {n_layers} equal layers: each holds {_per_layer:,} and the "
        f"{_left_over:,} left over sit outside them, " + (
            f"frozen with the frozen layers, so {n_layers - n_frozen} × {_per_layer:,} = {_trainable:,} train"
            if n_frozen else "training with every layer when none is frozen"))
    _saving = ("the same as full finetuning: freeze some layers to see what it saves" if n_frozen == 0 else
               f"against {format_bytes(equal_full.total, unit)} for full finetuning: "
               f"**{format_bytes(_saved, unit)} saved**")
    # Which layers train (a strip), over the memory it takes (bars): one live chart, drawn once per unit, then sent
    # one frame of rows (the strip's and the bars') and the step of its layer numbers on every move.
    _bars = viz.breakdown_long({"Full finetuning": equal_full, f"First {n_frozen} layers frozen": equal_frozen}, unit)
    _frame = pd.concat([
        pd.DataFrame({"kind": "layer", "layer": range(1, n_layers + 1),
                      "state": ["frozen" if i < n_frozen else "trainable" for i in range(n_layers)]}),
        _bars.assign(kind="bar"),
    ], ignore_index=True)

    layers_chart.update(_frame, draw=lesson_charts.frozen_layers(unit), key=unit, every=-(-n_layers // 12))
    return mo.md(f"""
    **The number.** {_frozen_text}, **{_trainable:,} of {n_params:,} parameters train:
    {equal_frozen.trainable_fraction:.1%}**, the share (L − f) / L = ({n_layers} − {n_frozen}) / {n_layers}{_split}. The
    article's ten layers with nine frozen give 10%. In memory, before activations, in pure 16-bit with Adam (the article's
    recipe): every weight costs {_w:g} B whether it trains or not, and each trainable one adds a {_g:g} B gradient
    and {_o:g} B of Adam states, so {n_params:,} × {_w:g} B + {_trainable:,} × ({_g:g} + {_o:g}) B =
    **{format_bytes(equal_frozen.total, unit)}**, {_saving}. The {format_bytes(equal_frozen.weights, unit)}
    of weights stay: a frozen weight is still used in every forward pass.
    """)


def show_what_trains(model, freeze, trainable, frozen_grid, share_grid, n_frozen, *, share_chart):
    """The share that trains against k / L (a chart: share_chart), the sentence, and the groups that train."""
    _lines_named = [f"{model.name} (computed)", "k / L (blocks only)"]
    # One table for both layers (the two lines, your setting), given once to the live chart below.
    _frame = pd.concat([
        pd.DataFrame({"kind": "line", "frozen": frozen_grid, "share": share_grid, "what": _lines_named[0]}),
        pd.DataFrame({"kind": "line", "frozen": frozen_grid, "share": (model.n_layers - frozen_grid) / model.n_layers,
                      "what": _lines_named[1]}),
        pd.DataFrame({"kind": "now", "frozen": [n_frozen]}),
    ], ignore_index=True)

    share_chart.update(_frame, draw=lesson_charts.trainable_share(model.n_layers, _lines_named),
                       key=(model.name, model.n_layers))
    _k = freeze.layers_trained(model)
    _notes = []
    if model.tied_embeddings and not freeze.train_embeddings:
        # Otherwise the head switch seems to do nothing: the tied head is the frozen embedding matrix.
        _notes.append(f"The head switch changes nothing here: {model.name}'s output head is its token-embedding "
                      "matrix, frozen with the embeddings. Train the embeddings, or pick an untied model (LLaMA, "
                      "Mistral, BERT), to see the head train.")

    def _share(x):  # two decimals, or two significant digits for a share that would read 0.00%
        return f"{x:.2%}" if x == 0 or x >= 0.0001 else f"{100 * x:.2g}%"

    _groups = freeze.groups(model)
    return mo.vstack([mo.md(f"""
    {model.name}: **{trainable.trainable_params:,} of {model.n_params:,} parameters train,
    {_share(trainable.trainable_fraction)}**. The blocks alone would give k / L = {_k} / {model.n_layers}
    = {_share(_k / model.n_layers)}. {" ".join(_notes)}
    """), mo.accordion({"Which parameter groups train, and how many parameters each?": viz.plain_table(
        _groups.assign(trainable=_groups["trainable"].map({True: "yes", False: "no"})), wrapped_columns=["note"])})])


def show_saves(model, n_frozen, seq_len, full, frozen, unit, *, bars_chart, saves_how_view, saves_table_view,
               saves_work_view):
    """What freezing saves at the chosen batch and length: the table and chart rows, into the live views above."""
    _attention = "fused (SDPA) attention" if full.attention == "sdpa" else "eager attention"
    _dropout = (f"dropout at p = {model.dropout_p:g}, as its config sets it" if full.dropout else
                "no dropout (its config's probability is 0)")
    _how = f"For {model.name}: {_attention} and {_dropout}."
    if full.activation_model != "transformers":  # e.g. Mistral at 4,096 tokens or more (its sliding window)
        _how += " " + " ".join(n.text for n in full.notes if n.kind == "activations_textbook_fallback") + "."
    # viz.stacked_bars as Vega-Lite JSON, into the live chart below: four sliders send it new rows.
    bars_chart.update(viz.stacked_bars_output(viz.breakdown_long({"Full finetuning": full,
                                                                  f"{n_frozen} blocks frozen": frozen}, unit),
                                              unit, title="Full finetuning against freezing, pure bf16 with Adam"))
    _beyond = (f" {model.name} reads at most {model.max_positions:,} tokens; the activations below for "
               f"{seq_len:,} are the arithmetic, not a run the real model could do."
               if model.max_positions and seq_len > model.max_positions else "")
    _size = viz.readable_size
    _rows = [{"part": viz.ALL_LABELS[p], "full finetuning": _size(full.parts()[p], unit),
              "frozen": _size(frozen.parts()[p], unit), "saved": _size(full.parts()[p] - frozen.parts()[p], unit)}
             for p in ("weights", "gradients", "optimizer_states", "activations")]
    _rows.append({"part": "Total", "full finetuning": _size(full.total, unit),
                  "frozen": _size(frozen.total, unit), "saved": _size(full.total - frozen.total, unit)})
    _d_full, _d = full.activation_detail, frozen.activation_detail
    # The blocks backward runs through: the trainable ones, and the frozen ones behind trainable embeddings
    # (the exact model counts those apart, as frozen_layers_storing: they keep only what their input's gradient needs).
    _through, _through_full = (d.layers_storing + d.frozen_layers_storing for d in (_d, _d_full))
    if frozen.trainable_params == full.trainable_params:
        _work = (f"**No less work yet.** With nothing frozen, the backward pass does what full finetuning does: "
                 f"{full.trainable_params:,} weight gradients, through all {model.n_layers} blocks.")
    else:
        _blocks = (f"runs through all {model.n_layers} blocks, as full finetuning does"
                   if _through == _through_full else
                   f"runs through {_through} of the {model.n_layers} blocks instead of all "
                   f"{_through_full}" if _through else
                   f"runs through none of the {model.n_layers} blocks (full finetuning runs through all "
                   f"{_through_full})")
        _work = (f"**Less work too.** The backward pass computes {frozen.trainable_params:,} weight gradients instead of "
                 f"{full.trainable_params:,}, and {_blocks}.")
    saves_how_view.update(mo.md(_how + _beyond))
    saves_table_view.update(pd.DataFrame(_rows))
    saves_work_view.update(mo.md(f"""
    {_work} Training the embeddings sends it back through every
    block again: each frozen block then keeps what the gradient of its input needs (its norms' inputs,
    attention's tensors, the activation function's), though not the inputs of its frozen linear layers.
    """))


def recorded_case_view(shape, blocks, rows, measured_cases):
    """One recorded (model, precision) of the freezing check: the chart of what each block saved, measured
    and by memmath, the table, and what they show (measured_cases: the recording's cases)."""
    _chart = alt.Chart(blocks).mark_bar().encode(
        x=alt.X("block:N", title=None, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("source:N"),
        y=alt.Y("KB:Q", title="Saved for backward (KB, 1 KB = 1,000 B)"),
        color=alt.Color("source:N", title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=["measured", "memmath"], range=["#555555", viz.PART_COLORS["activations"]])),
        column=alt.Column("frozen:N", title="Blocks frozen (the first ones, with the embeddings)"),
        tooltip=[alt.Tooltip("frozen:N"), alt.Tooltip("block:N"), alt.Tooltip("source:N"),
                 alt.Tooltip("bytes:Q", title="bytes", format=",")],
    ).properties(width=150, height=180)
    _equal = all((rows[f"{p}, measured (B)"] == rows[f"{p}, memmath (B)"]).all() for p in ("gradients", "saved"))
    _full, _last = rows.iloc[0], rows.iloc[-1]
    _ckpt = measured_cases[(measured_cases["shape"] == shape) & (measured_cases["method"] == "freeze")
                           & measured_cases["checkpointing"] & (measured_cases["n_layers"] == 3)].iloc[0]
    return mo.vstack([viz.chart_output(_chart), viz.plain_table(rows), mo.md(f"""
    {"Every number matches memmath's prediction to the byte." if _equal else "Some numbers differ from memmath's prediction (see the table)."}
    Freezing the first {_last["frozen blocks"]} blocks cut the gradients from {_full["gradients, measured (B)"]:,} B to
    {_last["gradients, measured (B)"]:,} B and the saved activations from {_full["saved, measured (B)"]:,} B to
    {_last["saved, measured (B)"]:,} B: the frozen blocks saved **0 B**. What stays is what
    each trainable block saves and what comes after the blocks (the final norm or pooler, the head and the loss).

    One exception, also measured: with **gradient checkpointing**, transformers makes the embeddings' output
    require a gradient, so every block keeps its checkpointed input, frozen ones too. In the recorded case
    `{_ckpt["case_id"]}` the blocks saved {" / ".join(f"{n:,}" for n in _ckpt["saved_per_layer"])} B.
    """)])


def show_bert(bert, top_blocks, bert_sweep, bert_full, seq_len, unit, *, bert_chart, bert_view):
    """The BERT-large report: the sweep's chart rows and its numbers."""
    _reported = literature.REPORTED["bert_large_partial_share"]
    _share = _reported.value / 100
    _first = int(np.argmax(bert_sweep.trainable_fraction >= _share))
    # One table for every layer (the sweep, the two marked choices, the reported share), given once to the chart.
    _frame = pd.concat([
        pd.DataFrame({"kind": "sweep", "share": bert_sweep.trainable_fraction, "top": top_blocks,
                      "size": to_unit(bert_sweep.total, unit), "label": ""}),
        pd.DataFrame({"kind": "dot", "share": [bert_sweep.trainable_fraction[_first], bert_full.trainable_fraction],
                      "top": [_first, bert.n_layers], "size": [to_unit(bert_sweep.total[_first], unit),
                                                               to_unit(bert_full.total, unit)],
                      "label": [f"top {_first} blocks", "full finetuning"]}),
        pd.DataFrame({"kind": "reported", "share": [_share], "top": [0], "size": [0.0],
                      "label": ["reported share (one number)"]}),
    ], ignore_index=True)

    bert_chart.update(_frame, draw=lesson_charts.bert_top_blocks(unit), key=unit)
    _k = int(top_blocks[_first])
    _houlsby = literature.REPORTED["houlsby_trainable_share"]
    _beyond = (f" (BERT reads at most {bert.max_positions:,} tokens: beyond that the memory is arithmetic only)"
               if seq_len > bert.max_positions else "")
    bert_view.update(mo.md(f"""
    One reported study: {literature.cite("bert_large_partial_share")}. That is one number,
    about {_reported.value:g}{_reported.unit.split(" ")[0]}, not a curve: the paper's quality curve is
    not reproduced here.

    {_share:.0%} of BERT-large is {int(_share * bert.n_params):,} parameters. Training the top
    {_k} of {bert.n_layers} blocks (and the pooler) is the first choice that reaches it:
    {bert_sweep.trainable_fraction[_k]:.1%}, {format_bytes(bert_sweep.total[_k], unit)} against
    {format_bytes(bert_full.total, unit)} for full finetuning at your batch and length{_beyond}, pure bf16
    with Adam, the activations as PyTorch keeps them (BERT's dropout on, as its config sets). The chart
    shows the reported share as a dashed line against what each choice of top blocks costs in memory (the
    blue points; full finetuning also trains the embeddings).

    Compare Houlsby's adapters: {_houlsby.value:g}% trainable parameters per task ({_houlsby.source}).
    That gap is why the field moved to parameter-efficient methods:
    {viz.lesson_link("05_adapters")} and {viz.lesson_link("06_lora_qlora")}.
    """))
