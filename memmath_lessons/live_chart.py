"""A chart that a slider moves without redrawing it: the Vega view stays in the page and takes new rows.

An altair chart shown by a cell is a new Vega-Lite output on every run of that cell: the browser
parses, compiles and lays it out from scratch (30-50 ms a chart, the bulk of a lesson's slider
latency). A `LiveChart` is an anywidget (`mo.ui.anywidget`) whose JavaScript keeps one Vega view
alive; Python hands it the chart's spec once and afterwards only the rows (a synced trait), which
the view takes in place (`view.change(name, changeset)`, then `runAsync()`). Axes, legends,
tooltips and every altair feature keep working: it is the same Vega-Lite spec, drawn by vega.

Use it in two cells, so that the widget's output is made once and never re-created::

    @app.cell
    def _(live_chart):
        memory_chart = live_chart()        # reads no control: this cell runs once
        memory_chart                       # where the chart shows (its place in the notebook)
        return (memory_chart,)

    @app.cell
    def _(alt, frame, memory_chart):       # re-runs on every slider move
        memory_chart.update(alt.Chart(frame).mark_bar().encode(...))

`update` takes an altair chart, a `viz.chart_output(...)`/`viz.stacked_bars_output(...)` or a
Vega-Lite dict. When only the data (and the values of top-level params) differ from the drawn
chart, only the rows travel; when the rest of the spec differs (another unit in an axis title,
another number of bars and so another height), the chart is embedded anew, as any chart would
be. A sort by a list of category names becomes a sort by a rank column, so bars named after a
slider's value ("9 blocks frozen") keep their spec. A number a slider moves in a title or a
scale's domain goes in a param: `alt.param(name="near", value=...)` and
`alt.Title(alt.expr("'near ' + near"))` or `alt.Scale(domainMin=alt.ExprRef("low"))`.

Building an altair chart and serializing it still costs the kernel some 10-60 ms a move. For a
chart built with altair, give `update` a DataFrame and a draw function instead::

    def _draw(frame):                      # any altair chart of the one frame
        return alt.layer(lines, rule, data=frame).add_params(alt.param(name="near", value=""))
    sweep_chart.update(frame, draw=_draw, key=unit, near=f"{value:g}")

It calls `_draw(frame)` once (and again for a new `key` or other columns) and afterwards sends the
frame's rows and the params' values only. The lesson tests run with MEMMATH_LIVE_CHART_CHECK=1,
which draws on every update and fails a spec that moved while its key stayed.

A bound chart (`memmath_lessons.static_charts.bound_chart`: a chart with inputs of its own, for the
static site) has a live twin for the lesson's marimo control of the same quantity:
`bound_live_chart(draw, title=...)` takes the same `draw(base)` and the same title, and
`update(rows, caption="Parameters: 7B")` sends the rows of the control's value and the title's
second line (a param), as the bound chart's own inputs would write it::

    sizes_chart = bound_live_chart(_draw, title="Weights in each format")   # a cell no control reads
    sizes_chart.update(grid[grid["billions"] == slider.value], caption=f"Parameters: {slider.value}B")

Every update ends with one attribute change on the chart's element (`data-updates`, `data-rows`):
a canvas redraw is no DOM change, so this is what the browser tests and the speed benchmark see.

The JavaScript is pinned and ships in this package (`static/`: vega 6.2.0, vega-lite 6.4.3,
vega-embed 7.1.0, the versions marimo 0.25.2's own charts use, from the npm registry, BSD-3,
LICENSE files beside them); nothing loads from a CDN. Live (`marimo run`, `marimo edit`), the
runtime travels inside the widget's module, which marimo serves once per page. In the static site
(MEMMATH_STATIC_EXPORT=1) the module is small and loads the runtime from the site's
`_memmath/` folder (`copy_runtime`, called by `python -m memmath_site build`); the page shows the
chart's state at export time: the lesson's defaults. `marimo export html` run by hand, without
that variable, makes a page whose live charts need the widget module of a running server.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import anywidget
import traitlets

STATIC = Path(__file__).resolve().parent / "static"
RUNTIME_FILES = ("vega-6.2.0.min.js", "vega-lite-6.4.3.min.js", "vega-embed-7.1.0.min.js")
"""The runtime, in load order (each a UMD build that sets a global: vega, vegaLite, vegaEmbed)."""
LICENSE_FILES = ("LICENSE.vega", "LICENSE.vega-lite", "LICENSE.vega-embed")
SITE_DIR = "_memmath"
"""Where the static site keeps the runtime, beside the lesson pages."""
STATIC_EXPORT_ENV = "MEMMATH_STATIC_EXPORT"  # the same switch as static_charts.STATIC_EXPORT_ENV
CHECK_ENV = "MEMMATH_LIVE_CHART_CHECK"
"""Set to "1" (tests/conftest.py does) to draw on every update and check that only rows and params moved."""
DATASET_PREFIX = "memmath_"
"""Datasets are renamed memmath_0, memmath_1 ... in order of appearance (altair names them by a hash of the rows)."""

_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.M)


def _static_export() -> bool:
    return os.environ.get(STATIC_EXPORT_ENV) == "1"


def _module_source(static: bool) -> str:
    """The widget's ES module: the widget alone (static site) or preceded by the runtime (live)."""
    widget = (STATIC / "live_chart.js").read_text(encoding="utf-8")
    if static:
        return widget
    # Module scope: `this` is undefined, so each UMD build sets its global on globalThis; the
    # shadowing declarations keep them from taking a CommonJS or AMD path.
    runtime = "\n;\n".join(_SOURCE_MAP.sub("", (STATIC / name).read_text(encoding="utf-8")) for name in RUNTIME_FILES)
    return f"var exports, module, define;\n{runtime}\n;\n{widget}"


def runtime_urls() -> list[str]:
    """Where a static page loads the runtime from (relative to the page)."""
    return [f"./{SITE_DIR}/{name}" for name in RUNTIME_FILES]


def copy_runtime(site_dir: Path) -> int:
    """Copy the runtime and its licenses into site_dir/_memmath; returns the bytes copied."""
    target = Path(site_dir) / SITE_DIR
    target.mkdir(parents=True, exist_ok=True)
    total = 0
    for name in RUNTIME_FILES + LICENSE_FILES:
        shutil.copyfile(STATIC / name, target / name)
        total += (target / name).stat().st_size
    return total


class LiveChart(anywidget.AnyWidget):
    """A Vega-Lite chart drawn once and then fed new rows (see the module docstring)."""

    _esm = _module_source(_static_export())
    spec = traitlets.Dict().tag(sync=True)
    rows = traitlets.Dict().tag(sync=True)
    signals = traitlets.Dict().tag(sync=True)
    runtime = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(self, draw=None, **kwargs):
        super().__init__(runtime=runtime_urls() if _static_export() else [], **kwargs)
        if draw is not None and not callable(draw):
            raise TypeError(f"live_chart takes a function that draws a DataFrame as an altair chart; got {draw!r}")
        self._draw = draw
        self._drawn_as = None  # (the frame's columns, the key) when draw() made the spec

    def update(self, data, *, draw=None, key=None, **params) -> None:
        """Show new data: a DataFrame with a draw function, or a whole chart (altair, chart_output, a dict).

        With a draw function (`live_chart(draw)`, or `update(frame, draw=..., key=...)` from the cell
        that knows the chart's settings), `update(frame, name=value, ...)` calls `draw(frame)` once and
        afterwards sends only the frame's rows and the params' values: no altair object is built, no
        spec serialized (the bulk of a chart's cost in the kernel). Everything else in the spec is
        fixed at that drawing, so whatever a slider moves must be in the frame, in a param
        (`alt.param(name=..., value=...)` on the top-level chart, read in `alt.expr`/`alt.ExprRef`),
        or in `key` (any value: a new key draws anew, say the unit in an axis title). With
        MEMMATH_LIVE_CHART_CHECK=1 (the lesson tests set it) every update draws and checks that
        rule, raising ValueError where a moved spec was left fixed.

        With a whole chart: only its rows (and top-level param values) travel when the rest of its
        spec is the one drawn; otherwise it is embedded anew.

        Returns None, so that a cell ending in `chart.update(...)` does not show the widget a second time.
        """
        draw = draw if draw is not None else self._draw
        if draw is None:
            if params or key is not None:
                raise TypeError("params and key go with a draw function: update(frame, draw=..., key=..., name=value)")
            spec, rows = split_data(data)
            self._show(spec, rows, param_values(spec))
            return
        if not callable(draw):
            raise TypeError(f"draw must be a function that draws a DataFrame as an altair chart; got {draw!r}")
        if not hasattr(data, "columns"):
            raise TypeError(f"a live chart with a draw function takes a DataFrame; got {type(data).__name__}")
        drawn_as = (tuple(map(str, data.columns)), repr(key))
        if drawn_as == self._drawn_as and len(self.rows) == 1:
            if os.environ.get(CHECK_ENV) == "1":
                self._check_fixed(draw(data))
            with self.hold_sync():
                self.rows = {next(iter(self.rows)): frame_rows(data)}
                self.signals = {**self.signals, **params}
            return
        spec, rows = split_data(draw(data), rank_sorts=False)
        if len(rows) != 1:
            raise ValueError(f"a live chart with a draw function needs a chart of one dataset (the frame); "
                             f"draw(frame) gives {len(rows)}: give the data once, alt.layer(..., data=frame)")
        rows = {name: frame_rows(data) for name in rows}  # the rows every later update sends, made alike
        unknown = set(params) - set(param_values(spec))
        if unknown:
            raise ValueError(f"update names params the chart does not declare: {sorted(unknown)}; declare them in draw "
                             "with alt.param(name=..., value=...) on the top-level chart")
        self._drawn_as = drawn_as
        signals = {**param_values(spec), **params}
        # The first drawing starts from the given values (not the placeholders draw() declared).
        spec["params"] = [{**p, "value": signals[p["name"]]} if isinstance(p, dict) and p.get("name") in signals
                          and "value" in p else p for p in spec["params"]] if spec.get("params") else []
        if not spec["params"]:
            del spec["params"]
        self._show(spec, rows, signals)

    def _check_fixed(self, chart) -> None:
        spec, _ = split_data(chart, rank_sorts=False)
        if _without_param_values(spec) != _without_param_values(self.spec):
            raise ValueError("a live chart's spec changed beyond its rows and params while its key stayed the same: "
                             "put what the controls move into the frame, a param, or the key of update()")

    def _show(self, spec: dict, rows: dict, signals: dict) -> None:
        with self.hold_sync():  # one message; traitlets sends nothing for a trait whose value is unchanged
            self.rows = rows
            self.signals = signals
            if _without_param_values(spec) != _without_param_values(self.spec):
                self.spec = spec


def live_chart(draw=None) -> LiveChart:
    """A LiveChart: `live_chart(draw)` for `update(frame, **params)`, `live_chart()` for `update(chart)`."""
    return LiveChart(draw)


CAPTION_PARAM = "caption"
"""The param a bound_live_chart's title shows on its second line (the control's value)."""


def bound_live_chart(draw, *, title: str = "") -> LiveChart:
    """The live twin of `static_charts.bound_chart(grid, controls, draw, title=title)`, driven by a marimo control.

    `draw(base)` is the bound chart's own function: here `base` is `alt.Chart(rows)` of the rows that
    `update(rows, caption=...)` hands over. The chart is drawn as SVG, as the bound chart is (its
    numbers stay text), titled `title` over the caption line, and has no input of its own.

    A chart whose drawing depends on a control too (the unit in its axis title): make it `live_chart()` and
    give each update the drawing, `update(rows, draw=bound_live_draw(draw_for(unit), title=...), key=unit,
    caption=...)`; it draws anew only when the key changes.
    """
    return LiveChart(bound_live_draw(draw, title=title))


def bound_live_draw(draw, *, title: str = ""):
    """The frame -> chart function behind `bound_live_chart(draw, title=title)` (for `LiveChart.update(draw=...)`)."""
    if not callable(draw):
        raise TypeError(f"bound_live_chart takes the bound chart's draw(base) function; got {draw!r}")
    import altair as alt

    lines = f"[{json.dumps(title)}, {CAPTION_PARAM}]" if title else CAPTION_PARAM

    def _draw(frame):
        if frame.empty:
            raise ValueError("a bound chart's live twin needs rows: the grid's rows for the control's current value")
        chart = draw(alt.Chart(frame))
        if not isinstance(chart, alt.TopLevelMixin):
            raise TypeError(f"draw must return an altair chart built from base; got {type(chart).__name__}")
        chart = chart.add_params(alt.param(name=CAPTION_PARAM, value="")).properties(
            title=alt.Title(text=alt.expr(lines), anchor="start"))
        usermeta = {} if chart.usermeta is alt.Undefined else dict(chart.usermeta)
        chart["usermeta"] = {**usermeta, "embedOptions": {**usermeta.get("embedOptions", {}), "renderer": "svg"}}
        return chart

    return _draw


def frame_rows(frame) -> list[dict]:
    """A DataFrame's rows as JSON records (numbers and text; NaN and infinities become null, as altair writes them)."""
    rows = frame.to_dict("records")
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
            elif hasattr(value, "item"):  # a numpy scalar pandas left boxed
                row[key] = value.item()
    return rows


def param_values(spec: dict) -> dict:
    """{name: value} of the chart's top-level variable params (not selections, not bound to an input)."""
    return {p["name"]: p["value"] for p in spec.get("params", []) or []
            if isinstance(p, dict) and "value" in p and "select" not in p and "bind" not in p}


def _without_param_values(spec: dict) -> dict:
    """The spec with those params' values left out: two charts that differ only there are drawn alike."""
    if not spec.get("params"):
        return spec
    moved = param_values(spec)
    return {**spec, "params": [{k: v for k, v in p.items() if k != "value"} if p.get("name") in moved else p
                               for p in spec["params"]]}


def _as_spec(chart) -> dict:
    if isinstance(chart, dict):
        return json.loads(json.dumps(chart))  # a copy, and JSON types only
    if hasattr(chart, "to_dict") and hasattr(chart, "to_json"):  # an altair chart
        # A frame whose layers fill different columns holds NaN where a layer has no value: null, as in frame_rows.
        return json.loads(chart.to_json(validate=False, allow_nan=True, default=str), parse_constant=lambda _: None)
    if hasattr(chart, "_mime_"):  # viz.ChartOutput, viz.SpecOutput
        mimetype, text = chart._mime_()
        if "vegalite" not in mimetype:
            raise TypeError(f"update needs a Vega-Lite chart; got output of type {mimetype}")
        return json.loads(text)
    raise TypeError(f"update needs an altair chart, a chart_output or a Vega-Lite dict; got {type(chart).__name__}")


def split_data(chart, *, rank_sorts: bool = True) -> tuple[dict, dict]:
    """(spec with stable dataset names and no rows, {dataset name: rows}) of a Vega-Lite chart.

    Top-level `datasets` (altair's, named by a hash of their rows) and inline `data.values` lists
    become datasets memmath_0, memmath_1 ... in order of first appearance, so that a chart with other
    rows has the same spec. Inline values in other formats (CSV text) stay in the spec.
    """
    spec = _as_spec(chart)
    datasets = spec.pop("datasets", {}) or {}
    names: dict[str, str] = {}
    rows: dict[str, list] = {}

    def stable(original: str | None, values) -> str:
        key = original if original is not None else f"inline {len(names)}"
        if key not in names:
            names[key] = f"{DATASET_PREFIX}{len(names)}"
            rows[names[key]] = values
        return names[key]

    def walk(node):
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict):
                if isinstance(data.get("name"), str) and data["name"] in datasets:
                    node["data"] = {**data, "name": stable(data["name"], datasets[data["name"]])}
                elif isinstance(data.get("values"), list):
                    rest = {k: v for k, v in data.items() if k != "values"}
                    node["data"] = {**rest, "name": stable(None, data["values"])}
            for key, value in node.items():
                if key != "data":
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec)
    if rank_sorts:
        _rank_sort_lists(spec, rows)
    # Datasets that no data node names (none in altair's output) still travel, under their own names.
    for name, values in datasets.items():
        if name not in names:
            spec.setdefault("datasets", {})[name] = values
    return spec, rows


RANK_PREFIX = "__memmath_rank_"


def _rank_sort_lists(spec: dict, rows: dict) -> None:
    """An encoding sorted by a list of its values (`sort=["7B frozen", "Full"]`) sorts by a rank column instead.

    The list names the categories, which a slider often moves ("9 blocks frozen"): as a rank
    (0, 1, ...) added to the rows and `sort: {"field": rank, "op": "min"}`, the drawing is the same
    and the spec stays put. Left as it is where a value is missing from the list, or where one
    dataset's field is sorted by two different lists.
    """
    chosen: dict[tuple[str, str], list] = {}
    sites: list[tuple[dict, str, str]] = []

    def walk(node, data_name):
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                data_name = data["name"]
            encoding = node.get("encoding")
            if isinstance(encoding, dict) and data_name in rows:
                for channel, definition in encoding.items():
                    if (isinstance(definition, dict) and isinstance(definition.get("sort"), list)
                            and isinstance(definition.get("field"), str) and "aggregate" not in definition):
                        site = (data_name, definition["field"])
                        if chosen.setdefault(site, definition["sort"]) != definition["sort"]:
                            chosen[site] = None  # two lists for one field: leave them
                        sites.append((definition, data_name, definition["field"]))
            for key, value in node.items():
                if key not in ("data", "encoding"):
                    walk(value, data_name)
        elif isinstance(node, list):
            for item in node:
                walk(item, data_name)

    walk(spec, None)
    for (data_name, field), order in list(chosen.items()):
        if order is None:
            continue
        rank = {value: i for i, value in enumerate(order)}
        if not all(row.get(field) in rank for row in rows[data_name]):
            chosen[(data_name, field)] = None
            continue
        column = RANK_PREFIX + field
        rows[data_name] = [{**row, column: rank[row[field]]} for row in rows[data_name]]
    for definition, data_name, field in sites:
        if chosen.get((data_name, field)) is not None:
            definition["sort"] = {"field": RANK_PREFIX + field, "op": "min"}
