"""memmath_lessons.live_chart without a browser: what travels to the page on each update, and the fixed-spec check.

The browser tests (test_lessons_browser.py, test_site_browser.py) check that the page draws it.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import pytest

import memmath as mm
from memmath_lessons import viz
from memmath_lessons import live_chart as lc


def _bars(frozen: int):
    run = mm.training_memory(7 * 10**9, precision="bf16", optimizer="adam")
    frame = viz.breakdown_long({"Full finetuning": run, f"{frozen} blocks frozen": run}, "GB")
    return viz.stacked_bars_output(frame, "GB", capacity_bytes=24 * 10**9, capacity_label="RTX 4090")


class Sent:
    """Which synced traits a widget changed (what traitlets would send to the page)."""

    def __init__(self, widget):
        self.names = []
        widget.observe(lambda change: self.names.append(change["name"]), names=["spec", "rows", "signals"])


def test_altair_datasets_get_stable_names_and_the_rows_leave_the_spec():
    chart = alt.Chart(pd.DataFrame({"x": [1, 2], "y": [3.0, 4.0]})).mark_bar().encode(x="x:Q", y="y:Q")
    spec, rows = lc.split_data(chart)
    assert spec["data"] == {"name": "memmath_0"} and "datasets" not in spec
    assert rows == {"memmath_0": [{"x": 1, "y": 3.0}, {"x": 2, "y": 4.0}]}
    other, _ = lc.split_data(chart.properties(data=pd.DataFrame({"x": [5], "y": [6.0]})))
    assert other == spec  # other rows, same spec (altair had named the datasets by a hash of their rows)


def test_inline_values_of_every_layer_become_datasets():
    spec, rows = lc.split_data(_bars(3))
    assert [layer["data"]["name"] for layer in spec["layer"]] == ["memmath_0", "memmath_1", "memmath_2"]
    assert rows["memmath_1"] == rows["memmath_2"] == [{"size": 24.0, "what": "RTX 4090"}]
    assert all("values" not in layer["data"] for layer in spec["layer"])


def test_a_sort_by_category_names_becomes_a_rank_so_renamed_bars_keep_the_spec():
    (a, rows_a), (b, rows_b) = lc.split_data(_bars(3)), lc.split_data(_bars(9))
    assert a == b
    y = a["layer"][0]["encoding"]["y"]
    assert y["sort"] == {"field": lc.RANK_PREFIX + "scenario", "op": "min"}
    ranks = {row["scenario"]: row[lc.RANK_PREFIX + "scenario"] for row in rows_b["memmath_0"]}
    assert ranks == {"Full finetuning": 0, "9 blocks frozen": 1}  # the order the list gave


def test_an_update_with_the_same_spec_sends_only_rows():
    widget = lc.live_chart()
    widget.update(_bars(3))
    sent = Sent(widget)
    widget.update(_bars(9))
    assert sent.names == ["rows"]
    widget.update(_bars(9))
    assert sent.names == ["rows"]  # equal rows: nothing travels
    widget.update(viz.stacked_bars_output(viz.breakdown_long(
        {"Full finetuning": mm.training_memory(7 * 10**9, precision="bf16", optimizer="adam")}, "GiB"), "GiB"))
    assert "spec" in sent.names  # another unit: another axis title, drawn anew


def test_update_returns_nothing_so_a_cell_ending_in_it_shows_no_second_chart():
    assert lc.live_chart().update(_bars(3)) is None


def _draw(frame):
    return alt.Chart(frame).mark_line().encode(x=alt.X("x:Q"), y=alt.Y("y:Q")).add_params(
        alt.param(name="note", value="")).properties(title=alt.Title(alt.expr("'at ' + note")))


def test_a_draw_function_draws_once_then_rows_and_params_travel_alone(monkeypatch):
    monkeypatch.delenv(lc.CHECK_ENV, raising=False)
    calls = []

    def draw(frame):
        calls.append(len(frame))
        return _draw(frame)

    widget = lc.live_chart(draw)
    widget.update(pd.DataFrame({"x": [1, 2], "y": [1.0, float("nan")]}), note="one")
    assert calls == [2]
    assert widget.spec["params"] == [{"name": "note", "value": "one"}]  # drawn with the given value
    assert widget.rows == {"memmath_0": [{"x": 1, "y": 1.0}, {"x": 2, "y": None}]}  # NaN as null
    sent = Sent(widget)
    widget.update(pd.DataFrame({"x": [1, 2, 3], "y": [2.0, 3.0, 4.0]}), note="two")
    assert calls == [2] and sorted(sent.names) == ["rows", "signals"]
    assert widget.signals == {"note": "two"}
    widget.update(pd.DataFrame({"x": [1], "y": [2.0], "z": ["new column"]}), note="two")
    assert calls == [2, 1]  # other columns: drawn anew


def test_a_new_key_draws_anew(monkeypatch):
    monkeypatch.delenv(lc.CHECK_ENV, raising=False)
    calls = []
    widget = lc.live_chart()
    for unit in ("GB", "GB", "GiB"):
        widget.update(pd.DataFrame({"x": [1], "y": [1.0]}), draw=lambda f: calls.append(1) or _draw(f), key=unit,
                      note=unit)
    assert len(calls) == 2


def test_the_check_fails_a_spec_that_moved_while_its_key_stayed(monkeypatch):
    monkeypatch.setenv(lc.CHECK_ENV, "1")
    widget = lc.live_chart()
    widget.update(pd.DataFrame({"x": [1], "y": [1.0]}),
                  draw=lambda f: _draw(f).properties(width=100), note="a")
    with pytest.raises(ValueError, match="spec changed"):
        widget.update(pd.DataFrame({"x": [1], "y": [2.0]}),
                      draw=lambda f: _draw(f).properties(width=200), note="a")


def test_bad_uses_say_what_is_wrong():
    with pytest.raises(TypeError, match="function"):
        lc.live_chart(draw="not a function")
    with pytest.raises(TypeError, match="params and key go with a draw function"):
        lc.live_chart().update(_bars(3), note="x")
    with pytest.raises(ValueError, match="does not declare"):
        lc.live_chart(_draw).update(pd.DataFrame({"x": [1], "y": [1.0]}), other=1)
    with pytest.raises(TypeError, match="altair chart"):
        lc.live_chart().update(42)


def test_the_runtime_ships_in_the_package_and_the_site_gets_a_copy(tmp_path):
    copied = lc.copy_runtime(tmp_path)
    names = sorted(p.name for p in (tmp_path / lc.SITE_DIR).iterdir())
    assert names == sorted(lc.RUNTIME_FILES + lc.LICENSE_FILES) and copied > 500_000
    for url in lc.runtime_urls():
        assert url.startswith(f"./{lc.SITE_DIR}/") and "://" not in url
    # Live, the widget's module carries the runtime; in the static site it is the widget alone (it loads _memmath/).
    live, static = lc._module_source(static=False), lc._module_source(static=True)
    assert len(live) > 800_000 and "sourceMappingURL" not in live
    assert len(static) < 20_000 and static in live


def test_a_bound_charts_live_twin_draws_its_draw_with_the_rows_and_caption_of_one_value(monkeypatch):
    # Lessons 0 and 1: the static site's bound chart and the live lesson's chart share one draw(base) and title.
    from memmath_lessons.static_charts import Slider, bound_chart

    monkeypatch.delenv(lc.CHECK_ENV, raising=False)
    # Bytes per parameter: fp32 4, bf16 2 (IEEE 754 binary32 / bfloat16 widths); GB = 1e9 bytes.
    grid = pd.DataFrame([{"billions": b, "format": f, "GB": b * w} for b in (1, 7, 70) for f, w in (("fp32", 4), ("bf16", 2))])
    calls = []

    def draw(base):
        calls.append(1)
        return base.mark_bar().encode(x="GB:Q", y="format:N")

    bound = bound_chart(grid, [Slider("billions", "Parameters")], draw, title="Weights").to_dict()
    widget = lc.bound_live_chart(draw, title="Weights")
    widget.update(grid[grid["billions"] == 7], caption="Parameters: 7B")
    assert widget.spec["title"] == {"text": {"expr": '["Weights", caption]'}, "anchor": "start"}
    assert widget.signals == {"caption": "Parameters: 7B"}
    assert widget.spec["params"] == [{"name": "caption", "value": "Parameters: 7B"}]  # no input of its own
    assert [p for p in bound["params"] if "bind" in p]  # where the bound chart has one
    assert widget.spec["mark"] == bound["mark"] and widget.spec["encoding"] == bound["encoding"]
    assert widget.spec["usermeta"]["embedOptions"]["renderer"] == "svg"  # as the bound chart: its numbers stay text
    (rows,) = widget.rows.values()
    assert rows == [{"billions": 7, "format": "fp32", "GB": 28}, {"billions": 7, "format": "bf16", "GB": 14}]
    sent = Sent(widget)
    widget.update(grid[grid["billions"] == 70], caption="Parameters: 70B")
    assert calls == [1, 1] and sorted(sent.names) == ["rows", "signals"]  # drawn once (and once for the bound chart)
    with pytest.raises(ValueError, match="needs rows"):
        lc.bound_live_chart(draw).update(grid[grid["billions"] == -1], caption="nothing")
    with pytest.raises(TypeError, match="draw"):
        lc.bound_live_chart("not a function")
