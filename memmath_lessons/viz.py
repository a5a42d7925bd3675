"""Shared chart pieces for the lessons: one colour per memory part in every lesson, and a stacked bar.

Colours follow the part, never the lesson: weights are always blue, gradients orange, optimizer
states red, activations green (Tableau 10, the altair default palette, so they read well together).
"""

from __future__ import annotations

import json

import altair as alt
import pandas as pd

from memmath.presets import PRESETS
from memmath.recipes import OPTIMIZERS
from memmath.training import PART_LABELS, PARTS
from memmath.units import UNITS, format_bytes, unit_name

PART_COLORS: dict[str, str] = {
    "weights": "#4C78A8",
    "quantization_constants": "#9ECAE9",
    "gradients": "#F58518",
    "gradient_accumulation": "#FFBF79",
    "master_weights": "#B279A2",
    "optimizer_states": "#E45756",
    "activations": "#54A24B",
    "kv_cache": "#72B7B2",
    "working_set": "#BAB0AC",
}
ALL_LABELS: dict[str, str] = {**PART_LABELS, "kv_cache": "KV cache", "working_set": "Working set"}
INFERENCE_PARTS = ("weights", "quantization_constants", "kv_cache", "working_set")


def part_scale(parts=None) -> alt.Scale:
    """An altair colour scale mapping each part's label to its fixed colour (all parts by default)."""
    parts = list(parts) if parts is not None else list(PARTS) + ["kv_cache", "working_set"]
    return alt.Scale(domain=[ALL_LABELS[p] for p in parts], range=[PART_COLORS[p] for p in parts])


def memory_axis_title(unit: str = "GB") -> str:
    """'Memory (GB)' or 'Memory (GiB)': every axis carries its unit."""
    return f"Memory ({unit_name(unit)})"


def breakdown_long(results: dict, unit: str = "GB", *, skip_zero: bool = True) -> pd.DataFrame:
    """Long table of scenario -> part sizes from TrainingMemory/InferenceMemory results (scalars only).

    Columns: scenario, part, label, bytes, size (in `unit`), order (stacking order).
    """
    unit = unit_name(unit)
    rows = []
    for scenario, result in results.items():
        for order, (part, value) in enumerate(result.parts().items()):
            if skip_zero and not value:
                continue
            rows.append({"scenario": scenario, "part": part, "label": ALL_LABELS[part], "bytes": int(value),
                         "size": int(value) / UNITS[unit], "order": order})
    return pd.DataFrame(rows, columns=["scenario", "part", "label", "bytes", "size", "order"])


MEMORY_AXIS = {"labelOverlap": True, "labelSeparation": 8, "labelFlush": True, "tickCount": 6}
"""A memory axis whose labels never touch: at most about six ticks, a label dropped rather than run into
its neighbour ('11,00012,000' at 1T), and the end labels kept inside the plot."""


CAPACITY_SIDE_PARAM = "capacity_side"
"""The param that says which side of its line the GPU-capacity label sits on ("left" or "right" of the text's anchor).

A param, not a value in the mark, so that a live chart whose line crosses 60% of the axis as a slider
moves takes the new side as a signal instead of embedding the chart anew."""
CAPACITY_LABEL_MARK = {"align": {"expr": CAPACITY_SIDE_PARAM},
                       "dx": {"expr": f"{CAPACITY_SIDE_PARAM} == 'right' ? -4 : 4"}}


def _capacity_label_side(frame: pd.DataFrame, capacity: float) -> tuple[str, int]:
    """(align, dx) of the GPU-capacity label: right of its line, or left of it when the line is in the right
    part of the axis, so the label never runs past the plot."""
    longest = float(frame.groupby("scenario")["size"].sum().max()) if len(frame) else 0.0
    return ("right", -4) if capacity > 0.6 * max(longest, capacity) else ("left", 4)


def stacked_bars(frame: pd.DataFrame, unit: str = "GB", *, title: str = "", capacity_bytes=None,
                 capacity_label: str = "", width: int = 560, height=None) -> alt.Chart:
    """Horizontal stacked bars (one per scenario) from breakdown_long, with an optional GPU-capacity rule."""
    unit = unit_name(unit)
    parts = [p for p in list(PARTS) + ["kv_cache", "working_set"] if p in set(frame["part"])]
    scenarios = list(dict.fromkeys(frame["scenario"]))
    bar_height = height or max(60, 38 * len(scenarios))
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("sum(size):Q", title=memory_axis_title(unit), stack="zero", axis=alt.Axis(**MEMORY_AXIS)),
        y=alt.Y("scenario:N", title=None, sort=scenarios),
        color=alt.Color("label:N", title="Part", scale=part_scale(parts), sort=[ALL_LABELS[p] for p in parts]),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("scenario:N"), alt.Tooltip("label:N"), alt.Tooltip("size:Q", title=unit, format=",.2f"),
                 alt.Tooltip("bytes:Q", title="bytes", format=",")],
    )
    chart = bars
    if capacity_bytes is not None:
        rule_frame = pd.DataFrame({"size": [capacity_bytes / UNITS[unit]], "what": [capacity_label or "GPU memory"]})
        rule = alt.Chart(rule_frame).mark_rule(color="black", strokeDash=[6, 4], size=2).encode(
            x=alt.X("size:Q"), tooltip=[alt.Tooltip("what:N"), alt.Tooltip("size:Q", title=unit, format=",.2f")])
        align, _ = _capacity_label_side(frame, capacity_bytes / UNITS[unit])
        text = alt.Chart(rule_frame).mark_text(align=alt.ExprRef(CAPACITY_SIDE_PARAM),
                                               dx=alt.ExprRef(CAPACITY_LABEL_MARK["dx"]["expr"]), dy=-6, fontSize=11).encode(
            x=alt.X("size:Q"), y=alt.value(0), text=alt.Text("what:N"))
        chart = (bars + rule + text).add_params(alt.param(name=CAPACITY_SIDE_PARAM, value=align))
    return chart.properties(width=width, height=bar_height, title=title)


VEGALITE_MIMETYPE = f"application/vnd.vegalite.v{alt.VEGALITE_VERSION.split('.')[0]}+json"
"""The mimetype marimo renders as a Vega-Lite chart (the one altair's own formatter uses)."""


class ChartOutput:
    """An altair chart as marimo shows it (a Vega-Lite spec), serialized once, without schema validation.

    marimo's altair formatter serializes every chart twice: once through altair's validated
    `to_dict` for an HTML bundle that it then discards, once unvalidated for the page. For a chart
    that a slider redraws that is ~24 ms of the kernel's time per move instead of ~8 ms (altair
    6.3, a stacked bar of two scenarios); `chart_output` does only the second. The page receives
    the same spec under the same mimetype. Validation is skipped, so build the chart with typed
    channels and let the tests draw it (a bad spec shows as an error in the browser tests).
    """

    def __init__(self, chart):
        if not isinstance(chart, alt.TopLevelMixin):
            raise TypeError(f"chart_output needs an altair chart; got {type(chart).__name__}")
        self.chart = chart
        self.spec = chart.to_json(validate=False, allow_nan=False, default=str)

    def _mime_(self) -> tuple[str, str]:
        return VEGALITE_MIMETYPE, self.spec


def chart_output(chart) -> ChartOutput:
    """Show an altair chart that a slider redraws, serialized once (see ChartOutput): `viz.chart_output(chart)`."""
    return ChartOutput(chart)


_PLAIN_TABLE_CSS = (
    "<style>.memmath-table{border-collapse:collapse;font-size:0.875rem;margin:0.25rem 0;width:fit-content;max-width:100%}"
    ".memmath-table th,.memmath-table td{padding:0.3rem 0.75rem;border-bottom:1px solid #e2e4e8;text-align:left;"
    "white-space:nowrap;vertical-align:top}"
    ".memmath-table th{font-weight:600;border-bottom:2px solid #c9ccd1}"
    ".memmath-table td.num,.memmath-table th.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".memmath-table td.wrap{white-space:normal;min-width:12rem}</style>"
)


def format_number(value, digits: int = 2) -> str:
    """A table's number: integers with thousands separators, floats with `digits` decimals ('56.27', '4.00'),
    and a nonzero float that would read as zero at that precision with two significant digits ('0.0014')."""
    if isinstance(value, float):
        if value and abs(value) < 0.5 * 10**-digits:
            return f"{value:.2g}"
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def stat_row(stats) -> "object":
    """A row of headline numbers as plain HTML (mo.Html), drawn as marimo's mo.stat draws them (a 14 px label over
    a 24 px bold value, 24 px padding, spread over the row: its sizes measured in Chromium), for a live html:
    marimo's own <marimo-stat> needs marimo's renderer, which re-renders a cell's output on every move.

    stats: (value, label) pairs of text, escaped here."""
    import html

    import marimo as mo

    pairs = [(str(value), str(label)) for value, label in stats]
    if not pairs:
        raise ValueError("stats must hold at least one (value, label) pair")
    cells = "".join(
        '<div style="padding:24px">'
        f'<div style="font-size:14px;font-weight:500;line-height:20px;letter-spacing:-0.35px;padding-bottom:8px">'
        f"{html.escape(label)}</div>"
        f'<div style="font-size:24px;font-weight:700;line-height:32px">{html.escape(value)}</div></div>'
        for value, label in pairs)
    return mo.Html(f'<div style="display:flex;justify-content:space-between;gap:8px">{cells}</div>')


def plain_table(frame: pd.DataFrame, *, wrapped_columns=(), digits: int = 2):
    """A small table as plain HTML (mo.Html): numbers right-aligned under right-aligned headers, with
    thousands separators, floats at one precision (`digits` decimals, see format_number), no index; the
    table is as wide as its columns, so values sit under their headers.

    For tables a slider redraws: the browser redraws this about three times faster than an
    mo.ui.table (benchmarks/lesson_speed.py measured ~10 ms against ~30 ms per table), which
    matters when one slider moves several tables. It has no paging, sorting or search, so keep
    it to tables that fit on screen. `wrapped_columns` may wrap; other cells stay on one line.
    """
    import html

    import marimo as mo

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"plain_table needs a pandas DataFrame; got {type(frame).__name__}")
    wrapped = set(wrapped_columns)
    unknown = wrapped - set(frame.columns)
    if unknown:
        raise ValueError(f"wrapped_columns {sorted(map(str, unknown))} are not columns of the table")

    def cell(column, value) -> str:
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        text = format_number(value, digits) if numeric else str(value)
        css = "num" if numeric else ("wrap" if column in wrapped else "")
        return f'<td class="{css}">{html.escape(text)}</td>' if css else f"<td>{html.escape(text)}</td>"

    numeric_columns = {c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
                       and not pd.api.types.is_bool_dtype(frame[c])}
    head = "".join(f'<th class="num">{html.escape(str(c))}</th>' if c in numeric_columns else f"<th>{html.escape(str(c))}</th>"
                   for c in frame.columns)
    rows = "".join("<tr>" + "".join(cell(c, v.item() if hasattr(v, "item") else v) for c, v in zip(frame.columns, row))
                   + "</tr>" for row in frame.itertuples(index=False, name=None))
    # Inline width: marimo shows a table in markdown as a block (for scrolling), which would fill the page.
    return mo.Html(f'{_PLAIN_TABLE_CSS}<table class="memmath-table" style="width:fit-content;max-width:100%"><thead><tr>{head}</tr></thead>'
                   f"<tbody>{rows}</tbody></table>")


LESSONS: dict[str, str] = {
    "00_start_here": "Start here: planning before CUDA runs out of memory",
    "01_weights_and_formats": "Weights and number formats",
    "02_full_finetuning": "Full finetuning: gradients and optimizer states",
    "03_activations": "Activations",
    "04_freezing": "Partial finetuning: freezing layers",
    "05_adapters": "Adapters (PEFT)",
    "06_lora_qlora": "LoRA and QLoRA",
    "07_inference": "Inference memory",
    "08_planner": "The planner: will my finetune fit?",
    "09_notation": "Notation and glossary",
    "10_problems": "Problems that chain the lessons",
    "11_many_gpus": "Many GPUs: how a model is split",
}


def lesson_href(stem: str) -> str:
    """The link from one lesson to another: "?file=NN_name.py", as `marimo run notebooks` serves the lessons.

    The static site's build (`python -m memmath_site build`) rewrites it to "NN_name.html".
    """
    if stem not in LESSONS:
        raise ValueError(f"lesson must be one of {', '.join(LESSONS)}; got {stem!r}")
    return f"?file={stem}.py"


def lesson_link(stem: str, text: str | None = None) -> str:
    """A markdown link to a lesson, titled with the lesson's name unless `text` is given."""
    return f"[{text or LESSONS[stem]}]({lesson_href(stem)})"


def short_count(n) -> str:
    """A parameter count for labels: '124M', '6.74B', '1.20T' (10^6, 10^9, 10^12; three significant digits)."""
    n = int(n)
    steps = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))
    for index, (size, suffix) in enumerate(steps):
        if n >= size:
            value = n / size
            if value >= 1000 and index == 0:
                return f"{value:,.0f}{suffix}"
            if float(f"{value:.3g}") >= 1000:  # 999,885,952 rounds to 1,000M: say 1.00B (three digits), not 1e+03M
                return f"{n / steps[index - 1][0]:#.3g}{steps[index - 1][1]}"
            return f"{value:.3g}{suffix}"
    return f"{n:,}"


# Model sizes the lessons offer, in billions of parameters: 100M to 1T, landing on common sizes
# (GPT-2 124M and 355M, 7B, 13B, 70B, GPT-3 175B, 405B, 671B).
MODEL_SIZE_STEPS = (0.1, 0.125, 0.35, 0.5, 0.7, 1, 1.3, 1.5, 2, 3, 7, 8, 13, 14, 30, 34, 65, 70, 175, 405, 671, 1000)
NO_PRESET = "(use the slider)"


def model_size_controls(value: float = 7):
    """(params_slider, preset_dropdown): a size slider in billions and a list of published models that overrides it.

    Read them with model_choice(params_slider.value, preset_dropdown.value).
    """
    import marimo as mo

    params_slider = mo.ui.slider(steps=list(MODEL_SIZE_STEPS), value=value, show_value=True,
                                 label="Parameters (billions)")
    options = {NO_PRESET: None} | {f"{k} ({short_count(s.n_params)} parameters)": k for k, s in PRESETS.items()}
    preset_dropdown = mo.ui.dropdown(options=options, value=NO_PRESET, label="or a published model (overrides the slider)")
    return params_slider, preset_dropdown


# What a menu shows for each of memmath's precision recipes and optimizers (their descriptions say more):
# a learner reads "mixed + fp32 gradient accumulation", never the code name mixed_fp32_grads.
RECIPE_NAMES = {"fp32": "fp32", "bf16": "pure bf16", "fp16": "pure fp16", "amp": "PyTorch AMP",
                "mixed": "mixed precision (ZeRO)", "mixed_fp32_grads": "mixed + fp32 gradient accumulation"}
OPTIMIZER_NAMES = {name: optimizer.label for name, optimizer in OPTIMIZERS.items()}  # each entry's own label


def recipe_menu(names=None) -> dict[str, str]:
    """{what a learner reads: memmath's recipe name} for a dropdown, for `names` (default: every recipe)."""
    from memmath.recipes import RECIPES

    return {_menu_name(RECIPE_NAMES, RECIPES, n): n for n in (names if names is not None else RECIPES)}


def optimizer_menu(names=None) -> dict[str, str]:
    """{what a learner reads: memmath's optimizer name} for a dropdown, for `names` (default: every optimizer)."""
    return {_menu_name(OPTIMIZER_NAMES, OPTIMIZERS, n): n for n in (names if names is not None else OPTIMIZERS)}


def _menu_name(names: dict, known: dict, name: str) -> str:
    if name not in known:
        raise ValueError(f"{name!r} is not one of memmath's: {', '.join(known)}")
    # A recipe or optimizer added to memmath without a name here shows its description's first words.
    return names.get(name) or known[name].description.split(":")[0]


def model_choice(billions, preset):
    """The preset's name when one is picked, else the slider's billions as a whole parameter count."""
    return preset if preset else int(round(billions * 10**9))


def readable_unit(n_bytes, unit: str = "GB") -> str:
    """The largest unit of the chosen family that n_bytes fills at least once: TB/GB/MB/KB for GB,
    TiB/GiB/MiB/KiB for GiB (B below a kilobyte), so small sizes do not show as 0.00 GB."""
    family = ("TB", "GB", "MB", "KB") if unit_name(unit) in ("TB", "GB", "MB", "KB") else ("TiB", "GiB", "MiB", "KiB")
    return next((step for step in family if n_bytes >= UNITS[step]), "B")


def readable_size(n_bytes, unit: str = "GB") -> str:
    """n_bytes labelled in readable_unit's unit: '358.61 MB', '4.30 GB', '311.30 KiB'."""
    return format_bytes(n_bytes, readable_unit(n_bytes, unit))


def context_reserves_words() -> str:
    """Each card family's CUDA context as memmath reserves it (memmath/cuda_context.py), in one clause with the cards
    of the catalog it applies to: '426 MiB on the Ada cards (RTX 40, L4, L40S; measured on an RTX 6000 Ada), ...'."""
    from memmath.gpus import GPUS

    families = {}
    for gpu in GPUS.values():
        families.setdefault(gpu.context_reserve.family, gpu.cuda_context_bytes)
    # the families with a measured lazy-loading context, and the card it was measured on
    measured = {"Ampere GA10x": ("the RTX 30 series, A10G and RTX A6000 (Ampere GA10x)",
                                 "an RTX 3090 (invoke-ai/InvokeAI issue 9413)"),
                "Ada": ("the Ada cards", "an RTX 6000 Ada (unslothai/unsloth-zoo pull request 1053)"),
                "Blackwell GB100": ("the B200 and GB200", "a B200 (unslothai/unsloth pull request 8669)")}
    parts = [f"{families[f] // UNITS['MiB']:,} MiB on {cards}, measured on {where}"
             for f, (cards, where) in sorted(measured.items(), key=lambda kv: families[kv[0]])]
    others = sorted({b for f, b in families.items() if f not in measured})
    parts += [f"{b // UNITS['MiB']:,} MiB on the others, whose context with lazy loading no public source measures "
              "(a V100's measured before lazy loading, Hugging Face transformers docs, Model training anatomy: a "
              "conservative bound)" for b in others]
    return "; ".join(parts)


def card_reserve_words(gpu) -> str:
    """'426 MiB (0.45 GB) kept back for the RTX 4090's CUDA context (an Ada card's, measured on an RTX 6000 Ada ...)'."""
    reserve = gpu.context_reserve
    return (f"{gpu.cuda_context_bytes // UNITS['MiB']:,} MiB ({format_bytes(gpu.cuda_context_bytes)}) kept back for the "
            f"{gpu.name}'s CUDA context, which the driver takes before PyTorch allocates anything ({reserve.family} "
            f"family: {reserve.lazy_source})")


def cuda_reserve_sentence(reserved: bool, unit: str = "GB") -> str:
    """One sentence on what a fit verdict reserves for the CUDA context, and why: the same in every lesson (1, 2)."""
    from memmath.gpus import FIT_MARGIN

    why = ("the memory the driver takes for its context and kernels before PyTorch allocates any tensor, with "
           "PyTorch's lazy module loading (CUDA_MODULE_LOADING=LAZY; NVIDIA, CUDA C++ Programming Guide, \"Lazy "
           "Loading\"): " + context_reserves_words())
    if reserved:
        return f"**Reserved:** each card's CUDA context, {why}."
    return (f"**Reserved:** nothing for the CUDA context, though a real card loses some of its memory to it, {why}; "
            f"memmath's fit check reserves it by default, and its planner also keeps {FIT_MARGIN:.0%} of the need free.")


class SpecOutput:
    """A Vega-Lite spec (a dict) shown by marimo like an altair chart: same mimetype, JSON written once."""

    def __init__(self, spec: dict):
        self.spec = spec
        self._json = json.dumps(spec, allow_nan=False)

    def _mime_(self) -> tuple[str, str]:
        return VEGALITE_MIMETYPE, self._json


def stacked_bars_output(frame: pd.DataFrame, unit: str = "GB", *, title: str = "", capacity_bytes=None,
                        capacity_label: str = "", width: int = 560, height=None, peaks: dict | None = None) -> SpecOutput:
    """The chart of `stacked_bars(...)`, ready for a cell to show, built as Vega-Lite JSON directly.

    Same arguments and the same drawing as `chart_output(stacked_bars(...))` (tests/test_viz.py
    compares the two specs), in well under a millisecond instead of about 20 ms of altair objects:
    for a chart that a slider redraws on every move.

    peaks: {scenario: bytes} draws a black tick on each named bar at what the verdict judges (the
    step's peak, which the sum of the bars' parts may exceed or undercut), so the chart and the
    verdict show the same number.
    """
    unit = unit_name(unit)
    parts = [p for p in list(PARTS) + ["kv_cache", "working_set"] if p in set(frame["part"])]
    scenarios = list(dict.fromkeys(frame["scenario"]))
    labels = [ALL_LABELS[p] for p in parts]
    rows = [{"bytes": int(b), "label": str(lab), "order": int(o), "part": str(p), "scenario": str(s), "size": float(z)}
            for s, p, lab, b, z, o in frame[["scenario", "part", "label", "bytes", "size", "order"]].itertuples(
                index=False, name=None)]
    bars = {
        "data": {"values": rows}, "mark": {"type": "bar"},
        "encoding": {
            "color": {"field": "label", "scale": {"domain": labels, "range": [PART_COLORS[p] for p in parts]},
                      "sort": labels, "title": "Part", "type": "nominal"},
            "order": {"field": "order", "type": "quantitative"},
            "tooltip": [{"field": "scenario", "type": "nominal"}, {"field": "label", "type": "nominal"},
                        {"field": "size", "format": ",.2f", "title": unit, "type": "quantitative"},
                        {"field": "bytes", "format": ",", "title": "bytes", "type": "quantitative"}],
            "x": {"aggregate": "sum", "axis": dict(MEMORY_AXIS), "field": "size", "stack": "zero",
                  "title": memory_axis_title(unit), "type": "quantitative"},
            "y": {"field": "scenario", "sort": scenarios, "title": None, "type": "nominal"},
        },
    }
    spec = {"$schema": alt.SCHEMA_URL, "config": {"view": {"continuousHeight": 300, "continuousWidth": 300}},
            "height": height or max(60, 38 * len(scenarios)), "title": title, "width": width}
    if capacity_bytes is None:
        spec.update(bars)
    else:
        rule_rows = [{"size": capacity_bytes / UNITS[unit], "what": capacity_label or "GPU memory"}]
        rule = {"data": {"values": rule_rows}, "mark": {"type": "rule", "color": "black", "size": 2,
                                                         "strokeDash": [6, 4]},
                "encoding": {"tooltip": [{"field": "what", "type": "nominal"},
                                         {"field": "size", "format": ",.2f", "title": unit, "type": "quantitative"}],
                             "x": {"field": "size", "type": "quantitative"}}}
        align, _ = _capacity_label_side(frame, capacity_bytes / UNITS[unit])
        spec["params"] = [{"name": CAPACITY_SIDE_PARAM, "value": align}]
        text = {"data": {"values": rule_rows}, "mark": {"type": "text", **CAPACITY_LABEL_MARK, "dy": -6,
                                                         "fontSize": 11},
                "encoding": {"text": {"field": "what", "type": "nominal"}, "x": {"field": "size", "type": "quantitative"},
                             "y": {"value": 0}}}
        spec["layer"] = [bars, rule, text]
    if peaks:
        tick_rows = [{"scenario": str(k), "size": int(v) / UNITS[unit], "bytes": int(v), "what": "peak of the step"}
                     for k, v in peaks.items()]
        tick = {"data": {"values": tick_rows}, "mark": {"type": "tick", "color": "black", "thickness": 3},
                "encoding": {"tooltip": [{"field": "scenario", "type": "nominal"}, {"field": "what", "type": "nominal"},
                                         {"field": "size", "format": ",.2f", "title": unit, "type": "quantitative"},
                                         {"field": "bytes", "format": ",", "title": "bytes", "type": "quantitative"}],
                             "x": {"field": "size", "type": "quantitative"},
                             "y": {"field": "scenario", "sort": scenarios, "type": "nominal"}}}
        if "layer" not in spec:
            spec = {key: value for key, value in spec.items() if key not in bars} | {"layer": [bars]}
        spec["layer"].append(tick)
    return SpecOutput(spec)
