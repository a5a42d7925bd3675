"""memmath_lessons.static_charts: the Vega-Lite spec a bound chart carries, its input checks, the live-only notice.

That the inputs really move the chart in a browser is tested in test_bound_chart_browser.py and
test_site_browser.py; here we check the spec that makes it so.
"""

from __future__ import annotations

import io
import json

import altair as alt
import pandas as pd
import pytest

from memmath_lessons.static_charts import (
    HIDDEN_VALUE_SUFFIX, MARKER_ATTRIBUTE, STATIC_EXPORT_ENV, Select, Slider, bound_chart, bound_text, is_static_export,
    live_only_notice, when_opened,
)


def _grid(billions=(1, 7, 70), formats=("fp32", "bf16")):
    # Bytes per parameter: fp32 4, bf16 2 (IEEE 754 binary32 / bfloat16 widths); GB = 1e9 bytes.
    width = {"fp32": 4, "bf16": 2}
    return pd.DataFrame([{"billions": b, "format": f, "GB": b * width[f]} for b in billions for f in formats])


def _draw(base):
    return base.mark_bar().encode(x="GB:Q", y="format:N")


def _spec(chart):
    return chart.to_dict()


def _params(spec):
    return {p["name"]: p for p in spec["params"]}


def _rows(spec):
    """The embedded data, parsed back from its CSV text."""
    (values,) = spec["datasets"].values()
    return pd.read_csv(io.StringIO(values))


def test_evenly_spaced_slider_binds_the_values_themselves():
    spec = _spec(bound_chart(_grid(billions=(10, 20, 30, 40)), [Slider("billions", "Parameters", value=30)], _draw))
    (param,) = spec["params"]
    assert param["bind"] == {"input": "range", "min": 10, "max": 40, "step": 10, "name": "Parameters "}
    assert param["value"] == 30
    # The filter keeps the grid value nearest the slider (a float slider never lands exactly).
    assert spec["transform"] == [{"filter": f"abs(datum[\"billions\"] - {param['name']}) < 5.0"}]


def test_unevenly_spaced_slider_moves_over_positions_and_the_title_names_the_value():
    spec = _spec(bound_chart(_grid(), [Slider("billions", "Parameters", value=7, labels=lambda b: f"{b}B")], _draw,
                             title="Weights"))
    (param,) = spec["params"]
    assert param["bind"]["min"] == 0 and param["bind"]["max"] == 2 and param["bind"]["step"] == 1
    assert param["value"] == 1  # 7 is the second of 1, 7, 70
    rows = _rows(spec)
    position = [c for c in rows.columns if c.startswith("__")]
    assert len(position) == 1
    assert dict(zip(rows["billions"], rows[position[0]])) == {1: 0, 7: 1, 70: 2}
    title = spec["title"]["text"]["expr"]
    assert '"Weights"' in title and '["1B", "7B", "70B"]' in title
    # Its raw position (1 for 7B) would read as a value beside the input: the name marks it hidden.
    assert param["name"].endswith(HIDDEN_VALUE_SUFFIX)


def test_show_value_false_marks_an_even_slider_hidden_and_the_lessons_css_hides_it():
    from pathlib import Path

    shown = _spec(bound_chart(_grid(billions=(0, 1, 2)), [Slider("billions", "Size")], _draw))["params"][0]
    hidden = _spec(bound_chart(_grid(billions=(0, 1, 2)), [Slider("billions", "Size", show_value=False)],
                               _draw))["params"][0]
    assert not shown["name"].endswith(HIDDEN_VALUE_SUFFIX) and hidden["name"].endswith(HIDDEN_VALUE_SUFFIX)
    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    css = (notebooks / "memmath.css").read_text(encoding="utf-8")
    assert f'[name$="{HIDDEN_VALUE_SUFFIX}"] + span' in css and "display: none" in css
    for lesson in sorted(notebooks.glob("[0-9][0-9]_*.py")):
        assert 'css_file="memmath.css"' in lesson.read_text(encoding="utf-8"), lesson.name


def test_select_offers_values_in_order_of_appearance_with_labels():
    grid = _grid(formats=("fp32", "bf16"))
    spec = _spec(bound_chart(grid, [Select("format", "Format", labels={"fp32": "FP32", "bf16": "BF16"}, radio=True)],
                             _draw))
    (param,) = spec["params"]
    assert param["bind"]["input"] == "radio"
    assert param["bind"]["options"] == ["fp32", "bf16"]
    # Each radio label is followed by a non-collapsing space so that "○FP32○BF16" reads as two options.
    assert param["bind"]["labels"] == ["FP32\u2003", "BF16\u2003"]
    assert param["value"] == "fp32"


def test_embedded_data_is_typed_csv_and_the_chart_draws_as_svg():
    spec = _spec(bound_chart(_grid(), [Slider("billions", "Parameters")], _draw))
    assert spec["data"]["format"]["type"] == "csv"
    assert spec["data"]["format"]["parse"]["GB"] == "number"
    rows = _rows(spec)
    # 7B in bf16 is 14 GB: the article's headline number survives the CSV round trip.
    assert rows[(rows.billions == 7) & (rows.format == "bf16")]["GB"].item() == 14
    assert spec["usermeta"]["embedOptions"]["renderer"] == "svg"


def test_two_controls_make_two_params_and_filters_in_layers():
    chart = bound_chart(_grid(), [Slider("billions", "Parameters"), Select("format", "Format")],
                        lambda base: alt.layer(base.mark_bar().encode(x="GB:Q"), base.mark_text().encode(x="GB:Q")))
    spec = _spec(chart)
    assert len(spec["params"]) == 2
    for layer in spec["layer"]:
        assert len(layer["transform"]) == 2


@pytest.mark.parametrize("grid, controls, message", [
    (_grid().iloc[:-1], [Slider("billions", "P"), Select("format", "F")], "lacks rows for"),
    (_grid(), [Slider("params", "P")], "not in the grid"),
    (_grid(), [Slider("format", "F")], "must hold numbers"),
    (_grid(billions=(7,)), [Slider("billions", "P")], "at least two distinct values"),
    (_grid(), [Slider("billions", "P", value=8)], "not among the values"),
    (_grid(), [Select("format", "F", labels={"fp32": "x"})], "no entry for the value 'bf16'"),
    (_grid(), [], "at least one"),
    (pd.DataFrame(), [Slider("billions", "P")], "non-empty"),
])
def test_bad_grids_and_controls_raise_value_errors_that_say_why(grid, controls, message):
    with pytest.raises(ValueError, match=message):
        bound_chart(grid, controls, _draw)


def test_missing_control_values_are_refused():
    grid = _grid().astype({"billions": float})
    grid.loc[0, "billions"] = float("nan")
    with pytest.raises(ValueError, match="missing values"):
        bound_chart(grid, [Slider("billions", "P")], _draw)


def test_large_grids_are_refused_to_keep_pages_light():
    grid = _grid(billions=tuple(range(1, 8001)))  # 16,000 rows, about 250 kB of CSV
    with pytest.raises(ValueError, match="max_bytes"):
        bound_chart(grid, [Slider("billions", "P")], _draw)
    assert bound_chart(grid, [Slider("billions", "P")], _draw, max_bytes=10**6) is not None


def test_draw_must_return_a_chart():
    with pytest.raises(TypeError, match="draw must return an altair chart"):
        bound_chart(_grid(), [Slider("billions", "P")], lambda base: None)


def test_live_only_notice_shows_only_in_the_static_export(monkeypatch):
    monkeypatch.delenv(STATIC_EXPORT_ENV, raising=False)
    assert not is_static_export()
    assert live_only_notice().text == ""
    monkeypatch.setenv(STATIC_EXPORT_ENV, "1")
    assert is_static_export()
    html = live_only_notice().text
    assert MARKER_ATTRIBUTE in html and "index.html#run-live" in html and "live workbook" in html
    assert "README.html" in live_only_notice(href="README.html").text


def test_spec_is_valid_vega_lite():
    # to_dict(validate=True) checks the spec against the Vega-Lite schema that altair ships.
    chart = bound_chart(_grid(), [Slider("billions", "P"), Select("format", "F", radio=True)], _draw, title="T")
    json.dumps(chart.to_dict(validate=True))


def test_the_module_docstring_example_runs_and_shows_the_articles_56_gb():
    import memmath_lessons.static_charts as module

    doc = module.__doc__
    block = doc[doc.index("Example (the headline control"):].split("::\n", 1)[1].split("\nTips:")[0]
    code = "\n".join(line[4:] for line in block.splitlines())
    namespace = {}
    exec(compile(code.replace("\nbound_chart(", "\nchart = bound_chart(", 1), "docstring", "exec"), namespace)
    spec = namespace["chart"].to_dict()
    rows = _rows(spec)
    at_7b = rows[(rows.billions == 7) & (rows.optimizer == "adamw")]
    assert at_7b["GB"].sum() == 56  # the article: 7B in pure 16-bit with Adam, 2 + 2 + 4 bytes per parameter



def test_bound_text_writes_its_lines_from_the_filtered_rows():
    # The sentence under a chart, filtered like the bars: one row (bf16's GB at the chosen size), one line each.
    def draw(base):
        one = base.transform_filter(alt.datum.format == "bf16").transform_aggregate(GB="max(GB)", billions="max(billions)")
        return alt.vconcat(_draw(base), bound_text(one, ["datum.billions + 'B parameters'", "format(datum.GB, ',.2f') + ' GB'"]))

    spec = _spec(bound_chart(_grid(), [Slider("billions", "Parameters")], draw))
    text = spec["vconcat"][1]
    assert text["mark"]["type"] == "text" and text["encoding"]["text"]["field"] == "__lines"
    calculate = [t for t in text["transform"] if "calculate" in t][-1]["calculate"]
    assert calculate == "[datum.billions + 'B parameters', format(datum.GB, ',.2f') + ' GB']"
    # The text follows the slider: it reads the rows the slider's filter leaves (the filter sits on the base).
    assert any("filter" in t for t in text["transform"])
    assert text["height"] == 2 * round(12 * 1.45)
    with pytest.raises(ValueError, match="at least one line"):
        bound_text(alt.Chart(_grid()), [])


def test_a_fold_built_when_opened_is_built_at_once_where_nothing_can_open_it(monkeypatch):
    # Under pytest (no marimo kernel, no browser) and in the static export (whose HTML keeps mo.lazy's widget
    # empty), a fold's contents must be the built element itself, or the fold would show nothing.
    import marimo as mo

    calls = []

    def build():
        calls.append(1)
        return mo.md("the fold")

    assert when_opened(build).text == mo.md("the fold").text and calls == [1]
    monkeypatch.setenv(STATIC_EXPORT_ENV, "1")
    monkeypatch.setattr(mo, "running_in_notebook", lambda: True)
    assert when_opened(build).text == mo.md("the fold").text and calls == [1, 1]
    # On a live page (a marimo kernel, no static export) nothing is built until the learner opens the fold.
    monkeypatch.delenv(STATIC_EXPORT_ENV)
    lazy = when_opened(build)
    assert isinstance(lazy, mo.lazy) and calls == [1, 1]
