"""Lesson 8's one number per run, shown three ways: the parts table, the live chart's bars, the static chart.

`memmath.requirement(run)` decides what the card must hold: the step's peak where memmath models it
(peak_memory), else the sum of the parts (training_memory). The parts alone add to the sum; the peak
differs from it because a step holds temporaries that no part counts (the optimizer's, the backward
pass's working gradients) while some parts are already freed (the saved activations, by the optimizer
step). Each view here shows the parts and then, as one more row or bar segment, the peak minus the sum,
so that what it adds up to is the requirement: the number the verdict, the planner's changes and the
catalog judge. Where the peak is below the sum (activations dominate, and not every part is alive at
once) that difference is negative: the table shows it signed, and a chart's bar of parts then runs past
the black tick that marks the requirement, the part past it veiled.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

import memmath as mm
from memmath.training import PARTS
from memmath.units import UNITS, unit_name

from . import viz
from .static_charts import Select, bound_chart

__all__ = ["PEAK_COLOR", "PEAK_LABEL", "bars_output", "five_methods", "five_methods_grid", "peak_adds",
           "requirement_table", "requirement_words"]

PEAK_PART = "peak_adds"
PEAK_LABEL = "Step's peak adds"
"""The bar segment (and the legend entry) for the peak minus the sum, where the peak is above it."""
PEAK_COLOR = "#79706E"  # a grey no part uses (viz.PART_COLORS)
PHASES = {"forward": "the forward pass", "backward": "the backward pass", "optimizer_step": "the optimizer step"}


def peak_adds(need) -> int:
    """Bytes the requirement adds to the sum of the parts: peak - sum (may be negative); 0 when it is the sum."""
    return need.above_parts


def requirement_words(need) -> str:
    """What the requirement is, in a few words: 'the step's peak', an upper bound on it, or 'the sum of the parts'."""
    return need.words


def requirement_table(need, unit: str = "GB") -> pd.DataFrame:
    """The parts, their sum, what the step's peak adds, and what the card must hold (the requirement), in `unit`.

    Columns: part, bytes (exact, as the command line prints them), size ({unit}), share of the sum (%). The parts
    and the peak's row add to the last row, the requirement's bytes.
    """
    memory, per_unit = need.memory, UNITS[unit_name(unit)]
    total = int(memory.total)
    rows = [(viz.ALL_LABELS[part], int(value), round(100 * int(value) / total, 1) if total else "")
            for part, value in memory.parts().items() if int(value)]
    if need.basis == "peak":
        adds = peak_adds(need)
        phase = PHASES.get(need.peak.phase, need.peak.phase)
        rows.append(("Sum of the parts", total, 100.0 if total else ""))
        rows.append((f"The step's peak {'adds' if adds >= 0 else 'is lower'} (peak − sum, in {phase})", adds, ""))
    elif need.basis == "upper bound":
        rows.append(("Sum of the parts", total, 100.0 if total else ""))
        rows.append(("The bound adds (transients at their largest, the engine's buffers)", peak_adds(need), ""))
    elif need.basis == "floor":  # activations not checked against PyTorch for this model type: no verdict above it
        rows.append((("Sum of the parts (its activations unchecked: the textbook model)" if need.left_out ==
                      "the activations" else f"Sum of the parts (without {need.left_out})"), total,
                     100.0 if total else ""))
    least = " at least" if need.refused else ""  # a floor: the activations are not checked (memmath/decision.py)
    rows.append((f"What the card must hold{least}: {requirement_words(need)}", int(need.bytes),
                 "" if need.basis != "sum of parts" else (100.0 if total else "")))
    frame = pd.DataFrame(rows, columns=["part", "bytes", "share of the sum (%)"])
    frame.insert(2, f"size ({unit})", (frame["bytes"] / per_unit).round(3))
    return frame


def _frame(needs: dict, unit: str) -> pd.DataFrame:
    """breakdown_long's rows for every run's parts, and a segment for what its peak adds above the sum."""
    frame = viz.breakdown_long({name: need.memory for name, need in needs.items()}, unit)
    extra = [{"scenario": name, "part": PEAK_PART, "label": PEAK_LABEL, "bytes": peak_adds(need),
              "size": peak_adds(need) / UNITS[unit_name(unit)], "order": len(PARTS)}
             for name, need in needs.items() if peak_adds(need) > 0]
    return pd.concat([frame, pd.DataFrame(extra, columns=frame.columns)], ignore_index=True) if extra else frame


VEILED_NOTE = "faded past a black tick: parts not all alive at the step's peak"


def bars_output(needs: dict, unit: str = "GB", *, title: str = "", capacity_bytes=None, capacity_label: str = ""):
    """viz.stacked_bars_output of each run's parts plus what its peak adds, and a black tick at its requirement.

    needs: {scenario: memmath.decision.Requirement}. A bar ends at its requirement wherever the peak is at or above the
    sum; where it is below, the bar of parts runs past the tick and that stretch is veiled (white, translucent).
    The spec is the same whichever runs have a peak segment or a veiled stretch (the legend always names the
    peak's segment, the veil's layer is always there, empty or not), so that a live chart takes only new rows
    when a slider moves a run from one case to the other.
    """
    frame = _frame(needs, unit)
    output = viz.stacked_bars_output(frame, unit, title=[title, VEILED_NOTE] if title else "",
                                     capacity_bytes=capacity_bytes, capacity_label=capacity_label,
                                     peaks={n: r.bytes for n, r in needs.items()})
    spec = output.spec
    layers = spec["layer"]  # bars, the card's line and its label, the ticks (peaks= always draws them)
    color = layers[0]["encoding"]["color"]
    if PEAK_LABEL not in color["scale"]["domain"]:  # stacked_bars_output colours the parts it knows; add the peak's
        color["scale"] = {"domain": [*color["scale"]["domain"], PEAK_LABEL],
                          "range": [*color["scale"]["range"], PEAK_COLOR]}
        color["sort"] = [*color["sort"], PEAK_LABEL]
    ticks = layers[-1]
    for row in ticks["data"]["values"]:  # the ticks: say which number each marks
        need = needs[row["scenario"]]
        row["what"] = (f"the card must hold at least this ({requirement_words(need)}: without {need.left_out})"
                       if need.refused else f"the card must hold ({requirement_words(need)})")
    # Where the peak is below the sum, the parts past the tick are veiled: not all alive at the step's peak.
    per_unit = UNITS[unit_name(unit)]
    veiled = [{"scenario": name, "start": need.bytes / per_unit, "end": int(need.memory.total) / per_unit,
               "bytes": int(need.memory.total) - need.bytes, "what": "parts not alive at the step's peak"}
              for name, need in needs.items() if peak_adds(need) < 0]
    layers.insert(len(layers) - 1, {
        "data": {"values": veiled}, "mark": {"type": "bar", "color": "white", "opacity": 0.6},
        "encoding": {"x": {"field": "start", "type": "quantitative"}, "x2": {"field": "end"},
                     "y": {"field": "scenario", "sort": ticks["encoding"]["y"]["sort"], "type": "nominal"},
                     "tooltip": [{"field": "scenario", "type": "nominal"}, {"field": "what", "type": "nominal"},
                                 {"field": "bytes", "format": ",", "title": "bytes", "type": "quantitative"}]}})
    return viz.SpecOutput(spec)


FIVE_METHODS_MODELS = ("gpt2-xl", "llama-2-7b", "llama-3-8b", "mistral-7b", "llama-2-13b", "llama-2-70b")


def five_methods_grid() -> pd.DataFrame:
    """The static chart's rows: for each model, batch (1, 4, 16) and method, its parts and what its step's peak adds
    (GB), with the requirement (need, GB), where its label goes (end) and its basis in words."""
    rows = []
    methods = {"full": mm.Full(), "freeze": mm.Freeze(trainable_layers=1), "adapters": mm.Adapters(bottleneck=64),
               "LoRA": mm.LoRA(rank=8, targets=("q", "v")), "QLoRA": mm.QLoRA(rank=8, targets=("q", "v"))}
    for preset in FIVE_METHODS_MODELS:
        for name, method in methods.items():
            for batch in (1, 4, 16):
                need = mm.requirement(preset, precision="bf16", optimizer="adamw", method=method, batch_size=batch,
                                      seq_len=512)
                pieces = [(part, int(b)) for part, b in need.memory.parts().items() if int(b)]
                pieces += [(PEAK_PART, peak_adds(need))] if peak_adds(need) > 0 else []
                end = max(need.bytes, int(need.memory.total))  # where the bar or the tick ends: the label goes there
                rows += [{"model": preset, "batch": batch, "method": name,
                          "part": PEAK_LABEL if part == PEAK_PART else viz.ALL_LABELS[part], "order": order,
                          "GB": round(b / 1e9, 3), "need": round(need.bytes / 1e9, 3), "end": round(end / 1e9, 3),
                          "basis": requirement_words(need)} for order, (part, b) in enumerate(pieces)]
    return pd.DataFrame(rows)


def five_methods():
    """Lesson 8's static chart: one common run (pure bf16, AdamW, 512 tokens, one GPU) planned with every method,
    for six models and three batch sizes, against three cards; each bar adds the parts and what the step's peak
    adds, with a black tick and a label at memmath.requirement, the number the planner judges."""
    grid = five_methods_grid()
    y = alt.Y("method:N", title=None, sort=list(dict.fromkeys(grid["method"])))
    parts = [p for p in viz.PART_COLORS if viz.ALL_LABELS[p] in set(grid["part"])]
    scale = alt.Scale(domain=[*(viz.ALL_LABELS[p] for p in parts), PEAK_LABEL],
                      range=[*(viz.PART_COLORS[p] for p in parts), PEAK_COLOR])
    cards = pd.DataFrame([{"gpu": f"{g} ({mm.format_bytes(mm.get_gpu(g).memory_bytes)})",
                           "GB": round(mm.to_unit(mm.get_gpu(g).memory_bytes, "GB"), 2)}
                          for g in ("RTX 4090", "RTX A6000", "A100 80GB")])

    def draw(base):
        bars = base.mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory per GPU (GB)"), y=y,
            color=alt.Color("part:N", title="Part", scale=scale), order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("method:N"), alt.Tooltip("part:N"), alt.Tooltip("GB:Q", format=",.2f")])
        needs = base.transform_filter(alt.datum.order == 0)  # one row per method: its requirement, its basis
        ticks = needs.mark_tick(color="black", thickness=3).encode(
            x=alt.X("need:Q"), y=y, tooltip=[alt.Tooltip("method:N"), alt.Tooltip("basis:N", title="the card must hold"),
                                             alt.Tooltip("need:Q", title="GB", format=",.2f")])
        # Where the peak is below the sum, the parts past the tick are faded: not all alive at the step's peak.
        veil = needs.transform_filter(alt.datum.end > alt.datum.need).mark_bar(color="white", opacity=0.6).encode(
            x=alt.X("need:Q"), x2=alt.X2("end:Q"), y=y)
        totals = needs.mark_text(align="left", dx=6, fontSize=11).encode(
            x=alt.X("end:Q"), y=y, text=alt.Text("need:Q", format=",.2f"))
        # The cards in a legend of dash styles: names drawn on the lines would overlap once a 70B model squeezes them.
        gpus = alt.Chart(cards).mark_rule(color="black").encode(x=alt.X("GB:Q"), strokeDash=alt.StrokeDash(
            "gpu:N", title="Card memory", sort=list(cards["gpu"]), scale=alt.Scale(range=[[2, 2], [6, 3], [12, 3, 2, 3]])))
        return alt.layer(bars, veil, ticks, totals, gpus).resolve_legend(strokeDash="independent").properties(
            width=520, height=170)

    return viz.chart_output(bound_chart(grid, [Select("model", "Model", value="llama-2-7b"),
                                               Select("batch", "Batch (sequences)", radio=True)],
                                        draw, title="Pure bf16, AdamW, 512 tokens, one GPU: what the card must hold "
                                        "(black tick), against three cards"))
