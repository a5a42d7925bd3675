"""The drawings of the lessons' live and bound charts: altair specs, one function per chart.

A lesson computes the numbers and hands a chart its rows; how the chart looks (marks, axes,
scales, legends) is written here. Each function returns a `draw` for `live_chart.update(frame,
draw=...)` (a DataFrame in, an altair chart out) or for `static_charts.bound_chart` (an `alt.Chart`
base in). They live in the package rather than in the lessons because marimo tokenizes and
compiles every line of a notebook each time its page opens, about 0.1 ms per token (see
site_charts); in lessons 1 and 4 their charts' drawings were about a fifth of the code.
"""

from __future__ import annotations

import altair as alt

from . import viz


# ---- Lesson 1: weights and formats ---------------------------------------------------------------
def format_bars(storage_formats, unit: str = "GB"):
    """Lesson 1's weights in each format (bars of weights and block scales, a total beside each), for a bound
    chart (`base`: the rows of one model size, sizes in columns named `unit` and "total" + unit)."""
    total = f"total{unit}"

    def draw(base):
        bars = base.mark_bar().encode(
            x=alt.X(f"sum({unit}):Q", title=viz.memory_axis_title(unit), axis=alt.Axis(**viz.MEMORY_AXIS)),
            y=alt.Y("format:N", title=None, sort=storage_formats),
            color=alt.Color("part:N", title="Part", scale=viz.part_scale(["weights", "quantization_constants"])),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("format:N"), alt.Tooltip("part:N"), alt.Tooltip(f"{unit}:Q", format=",.4~f")])
        totals = base.transform_aggregate(**{unit: f"sum({unit})", total: f"max({total})"}, groupby=["format"])
        text = totals.mark_text(align="left", dx=4, fontSize=11).encode(
            x=alt.X(f"{unit}:Q"), y=alt.Y("format:N", sort=storage_formats), text=alt.Text(f"{total}:Q", format=",.2f"))
        # An invisible point past the longest bar stretches the axis, so its label has room.
        room = totals.transform_joinaggregate(longest=f"max({unit})").transform_calculate(
            room="datum.longest * 1.2").mark_point(opacity=0).encode(x=alt.X("room:Q"))
        return (bars + text + room).properties(width=460, height=240)

    return draw


def rounding_staircase(frame):
    """Lesson 1's staircase: what each format stores near a value (params window_low, window_high, near)."""
    formats = ["exact", "fp16", "bf16", "fp8_e4m3", "int8"]
    base = alt.Chart().encode(  # the data is given once, to the layer (one copy for altair to prepare)
        x=alt.X("true value:Q", title="True value (no unit)", scale=alt.Scale(zero=False),
                axis=alt.Axis(tickCount=5, format=",.6~g")),
        y=alt.Y("stored value:Q", title="Stored value (no unit)",
                scale=alt.Scale(domainMin=alt.ExprRef("window_low"), domainMax=alt.ExprRef("window_high")),
                axis=alt.Axis(format=",.6~g")),
        color=alt.Color("format:N", sort=formats, title="Format",
                        scale=alt.Scale(domain=formats, range=["#BBBBBB", "#1B9E77", "#D95F02", "#7570B3", "#E7298A"])),
    )
    # The exact line is straight (two points); each format is a staircase (a point where its value changes).
    exact_line = base.transform_filter(alt.datum.format == "exact").mark_line(strokeWidth=2, strokeDash=[4, 3], clip=True)
    steps = base.transform_filter(alt.datum.format != "exact").mark_line(interpolate="step-after", strokeWidth=2, clip=True)
    params = [alt.param(name="window_low", value=0.0), alt.param(name="window_high", value=1.0),
              alt.param(name="near", value="")]
    return alt.layer(exact_line, steps, data=frame).add_params(*params).properties(
        width=520, height=280, title=alt.Title(alt.expr("'What each format stores near ' + near + ' (±4%)'")))


def gpu_cards(unit: str):
    """Lesson 1's cards against what the weights need: bars per card (rows kind "card"), the need as a line and its
    label on the side that stays in the plot (rows kind "need", column flip)."""
    def draw(frame):
        cards, need = alt.datum.kind == "card", alt.datum.kind == "need"
        bars = alt.Chart().transform_filter(cards).mark_bar().encode(
            x=alt.X("size:Q", title=f"GPU memory as the driver reports it ({unit})", axis=alt.Axis(**viz.MEMORY_AXIS)),
            y=alt.Y("gpu:N", sort=list(frame.loc[frame["kind"] == "card", "gpu"]), title=None),
            color=alt.Color("verdict:N", title=None, legend=alt.Legend(orient="bottom"),
                            scale=alt.Scale(domain=["holds the weights", "too small"], range=["#6F6F6F", "#D9D9D9"])),
            tooltip=[alt.Tooltip("gpu:N"), alt.Tooltip("marketed:N"), alt.Tooltip("size:Q", title=unit, format=",.2f")])
        rule = alt.Chart().transform_filter(need).mark_rule(color="#4C78A8", size=3).encode(
            x=alt.X("size:Q"), tooltip=[alt.Tooltip("verdict:N", title="what")])
        labels = [alt.Chart().transform_filter(need & (alt.datum.flip == left)).mark_text(
            align="right" if left else "left", dx=-4 if left else 4, dy=-6, color="#4C78A8").encode(
            x=alt.X("size:Q"), y=alt.value(0), text=alt.Text("verdict:N")) for left in (False, True)]
        return alt.layer(bars, rule, *labels, data=frame).properties(width=520, height=340,
                                                                     title="Which cards hold the weights")

    return draw


# ---- Lesson 4: freezing ----------------------------------------------------------------------------
def frozen_layers(unit: str):
    """Lesson 4's strip of frozen and trainable layers (rows kind "layer") over the memory bars (kind "bar");
    param `every`: the step of the layer numbers shown."""
    def draw(frame):
        layers = alt.Chart().transform_filter(alt.datum.kind == "layer").mark_rect(stroke="white", strokeWidth=2).encode(
            # At most about a dozen layer numbers (the param `every`), so they never run together.
            x=alt.X("layer:O", title="Layer (input side on the left)", axis=alt.Axis(
                labelAngle=0, labelExpr="datum.value == 1 || datum.value % every == 0 ? datum.label : ''")),
            color=alt.Color("state:N", title="Layer", scale=alt.Scale(
                domain=["frozen", "trainable"], range=["#BAB0AC", viz.PART_COLORS["gradients"]])),
            tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("state:N")],
        ).properties(width=560, height=40, title="Which layers train")
        parts = ["weights", "gradients", "optimizer_states"]
        stack = alt.Chart().transform_filter(alt.datum.kind == "bar").mark_bar().encode(
            x=alt.X("sum(size):Q", title=viz.memory_axis_title(unit), stack="zero", axis=alt.Axis(**viz.MEMORY_AXIS)),
            # "Full finetuning" above "First f layers frozen" for every f: descending names.
            y=alt.Y("scenario:N", title=None, sort="descending"),
            color=alt.Color("label:N", title="Part", scale=viz.part_scale(parts), sort=[viz.ALL_LABELS[p] for p in parts]),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("scenario:N"), alt.Tooltip("label:N"),
                     alt.Tooltip("size:Q", title=unit, format=",.2f"), alt.Tooltip("bytes:Q", title="bytes", format=",")],
        ).properties(width=560, height=76, title="Equal layers, pure bf16 with Adam, before activations")
        return alt.vconcat(layers, stack, data=frame, spacing=24).resolve_scale(color="independent").add_params(
            alt.param(name="every", value=1))

    return draw


def trainable_share(n_layers: int, lines_named):
    """Lesson 4's trainable share against frozen blocks: two lines (rows kind "line", named lines_named: the real
    share, then k / L) and the slider's setting (kind "now")."""
    def draw(frame):
        lines = alt.Chart().transform_filter(alt.datum.kind == "line").mark_line(point=True).encode(
            x=alt.X("frozen:Q", title="Frozen blocks", scale=alt.Scale(domain=[0, n_layers], nice=False)),
            y=alt.Y("share:Q", title="Trainable share of parameters", axis=alt.Axis(format="%")),
            color=alt.Color("what:N", title=None, legend=alt.Legend(orient="top", labelLimit=300),
                            scale=alt.Scale(domain=lines_named, range=[viz.PART_COLORS["weights"], "#999999"])),
            strokeDash=alt.StrokeDash("what:N", legend=None, scale=alt.Scale(domain=lines_named, range=[[1, 0], [5, 4]])),
            tooltip=[alt.Tooltip("what:N"), alt.Tooltip("frozen:Q"), alt.Tooltip("share:Q", format=".2%")])
        rule = alt.Chart().transform_filter(alt.datum.kind == "now").mark_rule(
            color="black", strokeDash=[4, 4]).encode(x=alt.X("frozen:Q"))
        return alt.layer(lines, rule, data=frame).properties(width=560, height=260,
                                                             title="Trainable share as you freeze more blocks")

    return draw


def bert_top_blocks(unit: str):
    """Lesson 4's BERT-large memory for each number of top blocks trained (rows kind "sweep"), the first that
    reaches the reported share and full finetuning (kind "dot"), and the reported share (kind "reported")."""
    def draw(frame):
        sweep, dot, one = (alt.datum.kind == k for k in ("sweep", "dot", "reported"))
        points = alt.Chart().transform_filter(sweep).mark_line(point=True, color=viz.PART_COLORS["weights"]).encode(
            x=alt.X("share:Q", title="Trainable share of BERT-large's parameters", axis=alt.Axis(format="%")),
            y=alt.Y("size:Q", title=viz.memory_axis_title(unit), scale=alt.Scale(zero=True)),
            tooltip=[alt.Tooltip("top:Q", title="top blocks trained"), alt.Tooltip("share:Q", format=".1%"),
                     alt.Tooltip("size:Q", title=unit, format=",.2f")])
        dot_marks = alt.Chart().transform_filter(dot).mark_point(size=160, filled=True, color="black", shape="diamond").encode(
            x=alt.X("share:Q"), y=alt.Y("size:Q"),
            tooltip=[alt.Tooltip("label:N"), alt.Tooltip("size:Q", title=unit, format=",.2f")])
        dot_text = alt.Chart().transform_filter(dot).mark_text(align="right", dx=-10, dy=-8, fontSize=11).encode(
            x=alt.X("share:Q"), y=alt.Y("size:Q"), text=alt.Text("label:N"))
        rule = alt.Chart().transform_filter(one).mark_rule(color="black", strokeDash=[6, 4], size=2).encode(
            x=alt.X("share:Q"))
        rule_text = alt.Chart().transform_filter(one).mark_text(align="left", dx=4, fontSize=11).encode(
            x=alt.X("share:Q"), y=alt.value(12), text=alt.Text("label:N"))
        return alt.layer(points, rule, rule_text, dot_marks, dot_text, data=frame).properties(
            width=560, height=280, title="BERT-large: memory for each number of top blocks trained")

    return draw


# ---- Lesson 3: activations -------------------------------------------------------------------------
def activation_sweep(x_title: str, unit: str):
    """Lesson 3's sweep (sweeps.activation_sweep's rows): weights, everything but activations and the activations
    over s or b (rows kind "line"), your setting (kind "now") and the crossings (kind "cross", hollow or filled by
    column fill)."""
    from .sweeps import SERIES

    def draw(frame):
        # Built here, not around draw: an altair object validates itself as it is made (~2 ms), and a live chart
        # calls draw only when it draws anew.
        color = alt.Scale(domain=list(SERIES), range=[viz.PART_COLORS["weights"], "#555555",
                                                      viz.PART_COLORS["activations"]])
        lines = alt.Chart().transform_filter(alt.datum.kind == "line").mark_line(point=True).encode(
            x=alt.X("x:Q", title=x_title, scale=alt.Scale(type="log", base=2)),
            y=alt.Y("size:Q", title=viz.memory_axis_title(unit) + ", log scale", scale=alt.Scale(type="log")),
            color=alt.Color("what:N", title=None, scale=color, legend=alt.Legend(orient="top", labelLimit=400)),
            tooltip=[alt.Tooltip("what:N"), alt.Tooltip("x:Q", title=x_title),
                     alt.Tooltip("size:Q", title=unit, format=",.3f")])
        rule = alt.Chart().transform_filter(alt.datum.kind == "now").mark_rule(strokeDash=[4, 4], color="black").encode(
            x=alt.X("x:Q"))
        crossings = alt.Chart().transform_filter(alt.datum.kind == "cross").mark_point(
            size=220, shape="diamond", filled=True, color="black", stroke="black", strokeWidth=2).encode(
            x=alt.X("x:Q"), y=alt.Y("size:Q"),
            fillOpacity=alt.FillOpacity("fill:Q", legend=None, scale=alt.Scale(domain=[0, 1], range=[0, 1])))
        return alt.layer(lines, rule, crossings, data=frame).properties(
            width=560, height=300, title="Activations against everything else")

    return draw


# ---- Lesson 6: LoRA and QLoRA ----------------------------------------------------------------------
def lora_curves(model_label: str):
    """Lesson 6's trainable parameters against the rank, one line per set of adapted matrices."""
    def draw(frame):
        x = alt.X("rank:Q", scale=alt.Scale(type="log", base=2), title="Rank r (log scale)")
        y = alt.Y("trainable:Q", scale=alt.Scale(type="log"), title="Trainable parameters (log scale)",
                  axis=alt.Axis(labelExpr="replace(format(datum.value, '~s'), 'G', 'B')"))  # 1B, not d3's 1G
        lines = alt.Chart(frame).mark_line(point=True).encode(
            x=x, y=y, color=alt.Color("matrices:N", title="Adapted matrices"),
            tooltip=[alt.Tooltip("matrices:N"), alt.Tooltip("rank:Q"), alt.Tooltip("trainable:Q", format=",")])
        return lines.properties(width=520, height=280, title=f"LoRA's trainable parameters in {model_label}")

    return draw


def quantization_levels(frame):
    """Lesson 6's histogram of weights over their block's absmax (rows kind "bin") under the 4-bit levels
    (kind "level"); param `block`: the block size in the title."""
    hist = alt.Chart().transform_filter(alt.datum.kind == "bin").mark_bar(color="#BAB0AC", binSpacing=0).encode(
        x=alt.X("start:Q", title="Weight ÷ its block's absmax"), x2=alt.X2("end:Q"),
        y=alt.Y("weights:Q", title="Weights (count per bin)"), y2=alt.datum(0))  # x and x2 alone make a horizontal strip
    levels = ["NF4 levels", "int4 levels"]
    rules = alt.Chart().transform_filter(alt.datum.kind == "level").mark_rule(strokeWidth=1.5).encode(
        x=alt.X("level:Q"), color=alt.Color("format:N", title=None, scale=alt.Scale(domain=levels, range=["#4C78A8", "#E45756"]),
                                            legend=alt.Legend(orient="top")),
        strokeDash=alt.StrokeDash("format:N", scale=alt.Scale(domain=levels, range=[[1, 0], [4, 3]]), legend=None))
    # The block size in the title is a param: the live chart takes it with the new counts, in place.
    return alt.layer(hist, rules, data=frame).add_params(alt.param(name="block", value=0)).properties(
        width=520, height=220, title=alt.Title(alt.expr("'Where the 4-bit levels sit (blocks of ' + block + ')'")))


# ---- Lesson 3: the recorded cases ------------------------------------------------------------------
def recorded_saved(frame, case_id: str):
    """Lesson 3's bytes the forward pass saved, measured and predicted, stacked by place (recorded.saved_bytes_frame's
    rows); the case's id is in the title, as param `recorded_case`."""
    from .recorded import SAVED_PLACES

    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("sum(KB):Q", title="Saved for backward (KB, 1 KB = 1,000 B)"),
        y=alt.Y("source:N", title=None, sort=list(dict.fromkeys(frame["source"]))),
        color=alt.Color("where:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=400),
                        scale=alt.Scale(domain=list(SAVED_PLACES), range=[viz.PART_COLORS["activations"], "#A6D49F"])),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("source:N"), alt.Tooltip("where:N"), alt.Tooltip("bytes:Q", title="bytes", format=",")],
    ).add_params(alt.param(name="recorded_case", value=case_id)).properties(
        width=460, height=120, title=alt.Title(alt.expr("'Recorded case: ' + recorded_case")))  # the case travels as a param


# ---- Lesson 3: a step's memory over time --------------------------------------------------------------
TIMELINE_COLORS = {"weights": "weights", "inputs and buffers": "quantization_constants",
                   "optimizer states": "optimizer_states", "gradients": "gradients",
                   "saved activations": "activations", "working memory": "working_set"}


def step_timeline(unit: str, moments: list):
    """Lesson 3's step over time: one stacked bar per moment (memmath.timeline.step_timeline's frame, with
    `size` in `unit` and `when`, the moment's short name, in `moments`' order), coloured by what holds it."""
    categories = list(TIMELINE_COLORS)
    def draw(frame):
        scale = alt.Scale(domain=categories, range=[viz.PART_COLORS[TIMELINE_COLORS[c]] for c in categories])
        return alt.Chart(frame).mark_bar().encode(
            x=alt.X("when:N", title=None, sort=moments, axis=alt.Axis(labelAngle=-35, labelLimit=220)),
            y=alt.Y("size:Q", title=viz.memory_axis_title(unit), stack="zero", axis=alt.Axis(**viz.MEMORY_AXIS)),
            color=alt.Color("category:N", title="Held by", scale=scale, sort=categories),
            order=alt.Order("rank:Q"),
            tooltip=[alt.Tooltip("moment:N"), alt.Tooltip("category:N"), alt.Tooltip("size:Q", format=",.3~f")],
        ).properties(width=560, height=300, title="One training step, moment by moment")
    return draw


def measured_timeline(frame):
    """The recorded CPU steps, one panel each: the measured allocation as a line over the step's time, the
    predicted moments as points placed evenly inside their phase (frame columns: case, time, MB, kind, phase)."""
    base = alt.Chart(frame)
    line = base.transform_filter(alt.datum.kind == "measured").mark_line(color="#4C78A8").encode(
        x=alt.X("time:Q", title="Time through step 2 (fraction)"), y=alt.Y("MB:Q", title="Allocated (MB)"))
    points = base.transform_filter(alt.datum.kind == "memmath").mark_point(
        color="#E45756", filled=True, size=50).encode(
        x="time:Q", y="MB:Q", tooltip=[alt.Tooltip("phase:N"), alt.Tooltip("MB:Q", format=",.2f")])
    return alt.layer(line, points).properties(width=260, height=160).facet(
        facet=alt.Facet("case:N", title=None), columns=2).resolve_scale(y="independent")
