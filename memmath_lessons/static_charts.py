"""Charts whose controls keep working in the static (exported) workbook, where no Python runs.

A marimo slider needs a kernel; in the static HTML site it is frozen. A *bound chart* does not:
its data is a small grid precomputed with memmath at export time (exact bytes, nothing
approximated in JavaScript), and its Vega-Lite parameters are bound to HTML inputs under the
chart (`alt.param(bind=alt.binding_range(...))`), so dragging one filters the grid to the rows for
that value and the chart redraws in the browser. It works the same under `marimo run`, but a
lesson shows it only in the static site (`if is_static_export(): ...`, prose included): live, the
marimo control for the same quantity is the only one (two sliders that do not follow each other
confuse), and the lesson draws the same `draw` with it through the bound chart's live twin,
`memmath_lessons.live_chart.bound_live_chart(draw, title=...)`, which takes the rows of the control's value.

Interface
---------
`bound_chart(grid, controls, draw, *, title="", max_bytes=150_000) -> alt.TopLevelMixin`

- `grid`: a pandas DataFrame in long form, one row per (control values..., drawn item). It must
  hold every combination of the control values (a missing one raises ValueError, since that
  position would show an empty chart). Put the numbers in display units already (GB, GiB, %):
  floats are embedded with 6 significant digits; integers exactly.
- `controls`: a list of `Slider(column, label)` and `Select(column, label)`:
  - `Slider` ranges over the sorted distinct values of `column`. Evenly spaced values (0, 1, 2 ...
    or 512, 1024, 1536 ...) bind the input to the values themselves. Unevenly spaced ones (a log
    grid such as 1e8, 3e8, 1e9 ...) bind it to their position 0..n-1; that position is not shown
    (a notebook whose App names css_file="memmath.css" hides it), and the chart's title line says
    the value ("Parameters: 7B"). `show_value=False` hides the number of an evenly spaced slider
    too (a column of indices 0, 1, 2 ... with `labels` for what they stand for).
  - `Select` offers the distinct values of `column` in order of first appearance, as a dropdown
    (or radio buttons with `radio=True`).
  Both take `value=` (the starting value; default: the first) and `labels=` (how the title
  shows a value: a callable such as `lambda b: f"{b:g}B"`, or a dict value -> text).
- `draw(base)`: your function. `base` is `alt.Chart(grid)` already filtered to the rows of the
  current control values; return any chart built from it (marks, encodings, layers, concat).
- `title`: shown above the chart, followed by the current value of every control, so the
  page always says what is drawn.
- `max_bytes`: a guard on the embedded data (the CSV text of `grid`): ValueError above it. Keep
  static pages light: a few thousand rows of a few columns at most.

Example (the headline control of a lesson on full finetuning)::

    import altair as alt
    import pandas as pd
    import memmath
    from memmath_lessons.static_charts import Select, Slider, bound_chart

    rows = []
    for billions in (1, 3, 7, 13, 34, 70):
        for optimizer in ("sgd", "adamw", "adam8bit"):
            m = memmath.training_memory(memmath.uniform_model(billions * 10**9, 32),
                                        precision="bf16", optimizer=optimizer)
            for part, n_bytes in m.parts().items():
                rows.append({"billions": billions, "optimizer": optimizer,
                             "part": memmath.training.PART_LABELS[part], "GB": memmath.to_unit(n_bytes, "GB")})
    grid = pd.DataFrame(rows)

    bound_chart(
        grid,
        [Slider("billions", "Parameters", labels=lambda b: f"{b:g}B"), Select("optimizer", "Optimizer")],
        lambda base: base.mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory (GB)", scale=alt.Scale(domain=[0, 1200])),
            color=alt.Color("part:N", title="Part"),
        ),
        title="Full finetuning in pure bf16",
    )

Tips:
- Fix the value axis (`scale=alt.Scale(domain=[0, grid["GB"].max()])`, or a sum's maximum as
  above) so that bars visibly grow and shrink instead of the axis rescaling under them.
- Build the grid in the cell that shows the chart; it runs once (at start and at export), not
  on every slider move. memmath calls take well under a millisecond, and numeric arguments take
  numpy arrays (`training_memory(..., batch_size=np.array([1, 2, 4]))`) for a whole grid at once.
- Leave out rows that are always zero (parts a recipe does not have) and columns `draw` does not
  use: the page carries every byte of the grid.
- The chart draws as SVG (its numbers stay text); the tests move every bound input of every
  lesson in Chromium and check that its chart changes and shows no NaN.

`live_only_notice()` goes beside the marimo controls that only the live workbook can move (every
lesson's controls cell): it shows a note, with a link to how to run the live workbook, only in
the static site (the export command sets MEMMATH_STATIC_EXPORT=1 while it runs each lesson), and
nothing under `marimo run`, `marimo edit`, pytest or `python lesson.py`::

    mo.vstack([live_only_notice(), params_slider, optimizer_dropdown])

The site tests fail a lesson page that shows marimo controls without this note.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

STATIC_EXPORT_ENV = "MEMMATH_STATIC_EXPORT"
"""Set to "1" by `python -m memmath_site build` while it exports the lessons."""

LIVE_WORKBOOK_HREF = "index.html#run-live"
"""Where the static site says how to run the live workbook (a section of the site's index page)."""

MARKER_ATTRIBUTE = "data-memmath-live-only"
"""Every notice carries this attribute, so the site tests can find it."""

_FLOAT_DIGITS = 6
HIDDEN_VALUE_SUFFIX = "_novalue"
"""Ends the name of a range input whose raw number means nothing to a reader (a position in a log grid);
notebooks/memmath.css hides the number vega writes beside such an input (the title says the value)."""
RADIO_GAP = "\u2003"
"""Ends each radio button's label (an em space, which HTML does not collapse), so options stand apart."""


@dataclass(frozen=True)
class Slider:
    """A range input over the distinct values of `column` (see the module docstring)."""

    column: str
    label: str
    value: Any = None
    labels: Callable[[Any], str] | Mapping[Any, str] | None = None
    show_value: bool = True


@dataclass(frozen=True)
class Select:
    """A dropdown (or, with radio=True, radio buttons) over the distinct values of `column`."""

    column: str
    label: str
    value: Any = None
    labels: Callable[[Any], str] | Mapping[Any, str] | None = None
    radio: bool = False


def bound_chart(grid: pd.DataFrame, controls: Sequence[Slider | Select], draw: Callable[[alt.Chart], Any], *,
                title: str = "", max_bytes: int = 150_000):
    """An altair chart of `grid` whose inputs (bound Vega-Lite params) filter it in the browser."""
    if not isinstance(grid, pd.DataFrame) or grid.empty:
        raise ValueError("grid must be a non-empty pandas DataFrame (one row per control values and drawn item)")
    if not controls:
        raise ValueError("controls must name at least one Slider or Select")
    if not callable(draw):
        raise TypeError(f"draw must be a function that takes the filtered base chart; got {draw!r}")
    grid = grid.reset_index(drop=True).copy()
    bound = [_bind(grid, control, index) for index, control in enumerate(controls)]
    _check_complete(grid, controls)

    data = _inline_csv(grid)
    size = len(data.values.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"grid embeds {size:,} bytes of data (max_bytes={max_bytes:,}): use fewer grid points, "
                         "fewer columns or rounder numbers to keep the static page light")

    base = alt.Chart(data)
    for control in bound:
        base = base.transform_filter(control.filter)
    chart = draw(base)
    if not isinstance(chart, alt.TopLevelMixin):
        raise TypeError(f"draw must return an altair chart built from base; got {type(chart).__name__}")
    # The title is an expression: the given title on one line, the current control values on the next.
    values_line = " + '  ·  ' + ".join(control.caption for control in bound)
    title_expr = f"[{json.dumps(title)}, {values_line}]" if title else values_line
    chart = chart.add_params(*(control.param for control in bound))
    chart = chart.properties(title=alt.Title(text=alt.expr(title_expr), anchor="start"))
    # SVG, not canvas: the drawn numbers and the title stay text (readable by screen readers and tests).
    usermeta = {} if chart.usermeta is alt.Undefined else dict(chart.usermeta)
    usermeta["embedOptions"] = {**usermeta.get("embedOptions", {}), "renderer": "svg"}
    chart["usermeta"] = usermeta
    return chart


def bound_text(one_row, lines: Sequence[str], *, width: int = 460, font_size: int = 12):
    """Lines of text that a bound chart's inputs rewrite: the sentence under a chart follows its slider.

    `one_row`: the filtered base (`draw`'s `base`), transformed to the one row the sentence reads (an
    aggregate). `lines`: Vega expressions over that row (`datum.GB`), one per line, e.g.
    `"format(datum.GB, ',.2f') + ' GB'"`. Put the block under the chart in `draw`
    (`alt.vconcat(chart, bound_text(...))`): the text is part of the chart, so the page never shows a
    number that the chart's inputs have left behind.
    """
    if not lines:
        raise ValueError("bound_text needs at least one line (a Vega expression)")
    line_height = round(font_size * 1.45)
    return one_row.transform_calculate(__lines="[" + ", ".join(lines) + "]").mark_text(
        align="left", baseline="top", x=0, y=0, fontSize=font_size, lineHeight=line_height,
    ).encode(text=alt.Text("__lines:N")).properties(width=width, height=line_height * len(lines))


def live_only_notice(text: str | None = None, href: str = LIVE_WORKBOOK_HREF):
    """A callout that the marimo controls beside it need the live workbook, shown only in the static site.

    Put it in the cell that shows the lesson's marimo controls, e.g.
    `mo.vstack([live_only_notice(), params_slider, optimizer_dropdown])`. Under `marimo run`,
    `marimo edit`, pytest or `python lesson.py` it is an empty element and shows nothing.
    """
    import marimo as mo

    if not is_static_export():
        return mo.Html("")
    text = text or ("This page is a snapshot: the sliders and menus in this section move only in the live "
                    "workbook, where Python recomputes every number. The inputs directly under a chart "
                    "keep working here.")
    body = mo.md(f"{text} [How to run the live workbook]({href}).")
    return mo.Html(f'<div {MARKER_ATTRIBUTE}="1">{mo.callout(body, kind="warn").text}</div>')


def is_static_export() -> bool:
    """True while `python -m memmath_site build` exports the lessons (for anything else a lesson hides there)."""
    return os.environ.get(STATIC_EXPORT_ENV) == "1"


def when_opened(build):
    """A fold's contents, `build()`, built when the learner opens the fold on a live page (mo.lazy).

    Under `marimo run` or `marimo edit` the page's first render then skips work that only a closed fold
    shows. The static site (whose HTML export keeps mo.lazy's widget, empty, as marimo documents), pytest
    and `python lesson.py` (no browser to open anything) get `build()` itself, the same contents.
    """
    import marimo as mo

    if is_static_export() or not mo.running_in_notebook():
        return build()
    return mo.lazy(build)


@dataclass(frozen=True)
class _Bound:
    param: Any
    filter: str
    caption: str


def _bind(grid: pd.DataFrame, control, index: int) -> _Bound:
    if not isinstance(control, (Slider, Select)):
        raise TypeError(f"controls must be Slider(...) or Select(...); got {control!r}")
    if control.column not in grid.columns:
        raise ValueError(f"{type(control).__name__} column {control.column!r} is not in the grid; "
                         f"its columns are {', '.join(map(str, grid.columns))}")
    column = grid[control.column]
    if column.isna().any():
        raise ValueError(f"grid column {control.column!r} holds missing values; every row needs a control value")
    name = f"p{index}_{re.sub(r'[^0-9A-Za-z_]', '_', str(control.column))}"
    field = f"datum[{json.dumps(str(control.column))}]"
    if isinstance(control, Slider):
        return _bind_slider(grid, control, name, field)
    return _bind_select(grid, control, name, field)


def _bind_slider(grid, control: Slider, name: str, field: str) -> _Bound:
    column = grid[control.column]
    if not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise ValueError(f"Slider column {control.column!r} must hold numbers; use Select for names")
    values = np.array(sorted(column.unique().tolist()))
    if len(values) < 2:
        raise ValueError(f"Slider column {control.column!r} needs at least two distinct values; got {values.tolist()}")
    start = _start_index(values.tolist(), control)
    texts = [_label(control, v) for v in values.tolist()]
    steps = np.diff(values.astype(float))
    evenly_spaced = np.allclose(steps, steps[0], rtol=1e-9, atol=0)
    if not (evenly_spaced and control.show_value):
        name += HIDDEN_VALUE_SUFFIX
    if evenly_spaced:
        step = float(steps[0])
        lo = _plain(values[0])
        param = alt.param(name=name, value=_plain(values[start]), bind=alt.binding_range(
            min=lo, max=_plain(values[-1]), step=_plain(steps[0]) if step.is_integer() else step,
            name=f"{control.label} "))
        # A slider's value is min + k * step in floating point: match the nearest grid value.
        text_at = f"{json.dumps(texts)}[round(({name} - {json.dumps(lo)}) / {json.dumps(step)})]"
        return _Bound(param, f"abs({field} - {name}) < {step / 2!r}", f"{json.dumps(control.label + ': ')} + {text_at}")
    # Unevenly spaced (a log grid): the input moves over positions, the caption shows the value.
    position = f"__{name}_position"
    grid[position] = column.map({v: i for i, v in enumerate(values.tolist())}).astype(int)
    param = alt.param(name=name, value=start, bind=alt.binding_range(
        min=0, max=len(values) - 1, step=1, name=f"{control.label} "))
    return _Bound(param, f"datum[{json.dumps(position)}] == {name}",
                  f"{json.dumps(control.label + ': ')} + {json.dumps(texts)}[{name}]")


def _bind_select(grid, control: Select, name: str, field: str) -> _Bound:
    options = [_plain(v) for v in pd.unique(grid[control.column])]
    start = _start_index(options, control)
    texts = [_label(control, v) for v in options]
    binding = alt.binding_radio if control.radio else alt.binding_select
    # Radio labels end in an em space: vega writes <input><label> pairs with nothing between them ("○1○2◉4").
    shown = [f"{text}{RADIO_GAP}" for text in texts] if control.radio else texts
    param = alt.param(name=name, value=options[start], bind=binding(options=options, labels=shown,
                                                                    name=f"{control.label} "))
    caption = f"{json.dumps(control.label + ': ')} + {json.dumps(texts)}[indexof({json.dumps(options)}, {name})]"
    return _Bound(param, f"{field} === {name}", caption)


def _start_index(values: list, control) -> int:
    if control.value is None:
        return 0
    for i, v in enumerate(values):
        if v == control.value:
            return i
    raise ValueError(f"{type(control).__name__} value {control.value!r} is not among the values of column "
                     f"{control.column!r}: {values}")


def _label(control, value) -> str:
    if control.labels is None:
        return f"{value:g}" if isinstance(value, float) else str(value)
    if callable(control.labels):
        return str(control.labels(value))
    if value not in control.labels:
        raise ValueError(f"labels for column {control.column!r} has no entry for the value {value!r}")
    return str(control.labels[value])


def _plain(value):
    """A numpy scalar as the Python number or text it holds (for JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_complete(grid: pd.DataFrame, controls) -> None:
    columns = [c.column for c in controls]
    present = set(map(tuple, grid[columns].drop_duplicates().itertuples(index=False, name=None)))
    expected = 1
    for column in columns:
        expected *= grid[column].nunique()
    if len(present) < expected:
        full = pd.MultiIndex.from_product([pd.unique(grid[c]) for c in columns]).tolist()
        missing = next(combo for combo in full if tuple(combo) not in present)
        raise ValueError(f"grid lacks rows for {dict(zip(columns, missing))}: it needs every combination of "
                         f"{', '.join(columns)}, or that position of the inputs shows an empty chart")


def _inline_csv(grid: pd.DataFrame) -> alt.InlineData:
    """The grid as CSV text inside the spec, with numeric columns parsed as numbers (not base64, not JSON rows)."""
    parse = {str(c): "number" for c in grid.columns
             if pd.api.types.is_numeric_dtype(grid[c]) and not pd.api.types.is_bool_dtype(grid[c])}
    text = grid.to_csv(index=False, float_format=f"%.{_FLOAT_DIGITS}g", lineterminator="\n")
    return alt.InlineData(values=text, format=alt.DataFormat(type="csv", parse=parse or None))

