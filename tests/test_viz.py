"""viz helpers the lessons share: the model-size controls and sizes in a readable unit (expected values by hand)."""

import pytest

import memmath as mm
from memmath_lessons import viz


def test_model_size_slider_spans_100m_to_400b_and_more():
    # Parameter count "from 100M to 400B+, or a preset".
    params_slider, preset_dropdown = viz.model_size_controls()
    assert params_slider.steps[0] == 0.1 and params_slider.steps[-1] >= 400
    assert params_slider.value == 7  # the article's 7B model
    assert preset_dropdown.value is None  # the slider decides until a preset is picked
    assert sorted(v for v in preset_dropdown.options.values() if v) == sorted(mm.PRESETS)


@pytest.mark.parametrize("billions, preset, expected", [
    (7, None, 7_000_000_000),            # the article's 7B
    (0.125, None, 125_000_000),
    (1000, None, 10**12),
    (7, "llama-2-7b", "llama-2-7b"),      # a preset overrides the slider
])
def test_model_choice(billions, preset, expected):
    assert viz.model_choice(billions, preset) == expected


@pytest.mark.parametrize("n_bytes, unit, expected", [
    (358_612_992, "GB", "358.61 MB"),     # one GPT-2 block at b=4, s=1,024: 358,612,992 / 10**6
    (14 * 10**9, "GB", "14.00 GB"),
    (14 * 10**9, "GiB", "13.04 GiB"),     # 14e9 / 2**30 = 13.038
    (2**20, "GiB", "1.00 MiB"),
    (3 * 2**40, "GiB", "3.00 TiB"),
    (512, "GB", "512 B"),
])
def test_readable_size(n_bytes, unit, expected):
    assert viz.readable_size(n_bytes, unit) == expected


def test_plain_table_shows_every_cell_with_separators_and_escapes_text():
    import pandas as pd

    frame = pd.DataFrame({"model": ["BERT <base>", "Llama-2-7B"], "params": [109_482_240, 6_738_415_616],
                          "share (%)": [2.17, 0.5], "note": ["a long note that may wrap", "short"]})
    shown = viz.plain_table(frame, wrapped_columns=["note"]).text
    # 109,482,240 and 6,738,415,616 written by hand with separators; text escaped, not parsed as a tag.
    assert "109,482,240" in shown and "6,738,415,616" in shown and "2.17" in shown
    assert "BERT &lt;base&gt;" in shown and "<base>" not in shown
    # 4 numeric cells and the headers of their 2 columns, right-aligned alike.
    assert shown.count("<tr>") == 3 and shown.count('class="num"') == 6 and shown.count('class="wrap"') == 2
    with pytest.raises(ValueError, match="nope"):
        viz.plain_table(frame, wrapped_columns=["nope"])


def test_plain_table_writes_floats_at_one_precision():
    # "13.477 beside 56.27" on one page reads as two precisions. Floats get 2 decimals (0.5 -> 0.50, 13.477 -> 13.48); a
    # nonzero value that would read 0.00 keeps two significant digits (0.0014); integers stay exact.
    import pandas as pd

    frame = pd.DataFrame({"GB": [13.477, 56.27, 0.5], "error": [0.0014, 0.0, 0.1118], "bytes": [1, 22, 333]})
    shown = viz.plain_table(frame).text
    for text in ("13.48", "56.27", "0.50", "0.0014", "0.00", "0.11", ">333<"):
        assert text in shown, text
    assert "13.477" not in shown and "0.1118" not in shown
    assert "width:fit-content" in shown  # as wide as its columns, not the page
    assert viz.format_number(8.0007) == "8.00" and viz.format_number(8.0007, 3) == "8.001"


def test_chart_output_carries_the_same_spec_marimo_would_show():
    import json

    import altair as alt
    import pandas as pd
    from marimo._output.formatting import try_format

    chart = alt.Chart(pd.DataFrame({"part": ["Weights", "Gradients"], "GB": [13.48, 13.48]})).mark_bar().encode(
        x=alt.X("GB:Q", title="Memory (GB)"), y=alt.Y("part:N"))
    mimetype, spec = viz.chart_output(chart)._mime_()
    marimo_mimetype, marimo_spec = try_format(chart).mimetype, try_format(chart).data
    assert mimetype == marimo_mimetype == "application/vnd.vegalite.v6+json"
    shown, expected = json.loads(spec), json.loads(marimo_spec)
    expected.pop("usermeta", None)  # marimo adds empty embed options
    assert shown == expected
    with pytest.raises(TypeError):
        viz.chart_output("not a chart")


def _inline_datasets(spec):
    """A Vega-Lite spec with altair's named datasets written into each layer (to compare specs)."""
    import copy

    spec = copy.deepcopy(spec)
    datasets = spec.pop("datasets", {})

    def inline(node):
        if isinstance(node, dict):
            if "data" in node and "name" in node["data"]:
                node["data"] = {"values": datasets[node["data"]["name"]]}
            for value in node.values():
                inline(value)
        elif isinstance(node, list):
            for value in node:
                inline(value)
    inline(spec)
    spec.pop("usermeta", None)
    return spec


@pytest.mark.parametrize("capacity", [None, 24 * 10**9])
@pytest.mark.parametrize("unit", ["GB", "GiB"])
def test_stacked_bars_output_is_the_stacked_bars_chart(capacity, unit):
    import json

    import memmath as mm

    frame = viz.breakdown_long({"Holding the weights": mm.inference_memory(7 * 10**9),
                                "One step": mm.training_memory("llama-2-7b", seq_len=512, attention="sdpa")}, unit)
    kwargs = dict(title="t", capacity_bytes=capacity, capacity_label="RTX 4090", width=420)
    fast = json.loads(viz.stacked_bars_output(frame, unit, **kwargs)._mime_()[1])
    slow = json.loads(viz.chart_output(viz.stacked_bars(frame, unit, **kwargs))._mime_()[1])
    assert fast == _inline_datasets(slow)
    assert viz.stacked_bars_output(frame, unit, **kwargs)._mime_()[0] == "application/vnd.vegalite.v6+json"


# ---- viz.short_count: parameter counts for labels (expected strings written by hand).
def test_short_counts():
    assert viz.short_count(124_439_808) == "124M"
    assert viz.short_count(6_738_415_616) == "6.74B"
    assert viz.short_count(7_000_000_000) == "7B"
    assert viz.short_count(174_604_259_328) == "175B"
    assert viz.short_count(1_000_000_000_000) == "1T"
    assert viz.short_count(512) == "512"


def test_capacity_label_stays_inside_the_plot():
    # A label at the right end of the axis ran past the plot. A line past 60% of the axis gets its
    # label on its left; the axis ends at the larger of the longest bar and the line.
    import pandas as pd

    frame = pd.DataFrame({"scenario": ["a", "a", "b"], "size": [10.0, 4.0, 8.0]})  # longest bar: 14
    assert viz._capacity_label_side(frame, 141.0) == ("right", -4)  # an H200 beside a 14 GB bar
    assert viz._capacity_label_side(frame, 5.0) == ("left", 4)  # 5 of 14
    spec = viz.stacked_bars_output(viz.breakdown_long({"run": __import__("memmath").training_memory(10**9)}),
                                   capacity_bytes=141 * 10**9).spec
    # The side is a param the label's mark reads (a live chart takes a new side as a signal, not a new chart).
    assert spec["params"] == [{"name": "capacity_side", "value": "right"}]
    assert spec["layer"][2]["mark"]["align"] == {"expr": "capacity_side"}


def test_capacity_label_side_moves_only_a_param():
    # Lesson 7 at its defaults (Llama-2-13B, 8,192 tokens, RTX 4090) has its line cross 60% of the axis between
    # batch 1 and 2: the label changes side, and before this the whole bars chart was embedded anew on each move.
    import memmath as mm

    from memmath_lessons.live_chart import _without_param_values, param_values, split_data

    def spec_at(batch):
        memory = mm.inference_memory("llama-2-13b", context_len=8192, batch_size=batch)
        return split_data(viz.stacked_bars_output(viz.breakdown_long({"detailed sum": memory}),
                                                  capacity_bytes=24 * 10**9, capacity_label="RTX 4090"))[0]

    one, two = spec_at(1), spec_at(2)
    assert {param_values(one)["capacity_side"], param_values(two)["capacity_side"]} == {"left", "right"}
    assert _without_param_values(one) == _without_param_values(two)


def test_stat_row_draws_each_value_under_its_label_as_plain_html():
    from memmath_lessons.viz import stat_row

    html = stat_row([("26.03 GB", "Weights (+ constants)"), ("<1 GB", "KV cache")]).text
    assert "marimo-" not in html  # plain HTML, for a live html (no marimo element)
    # Each stat its own box, its label above its value, in the order given; text escaped.
    assert html.index("Weights (+ constants)") < html.index("26.03 GB") < html.index("KV cache") < html.index("&lt;1 GB")
    assert html.count('<div style="padding:24px">') == 2


def test_stat_row_needs_a_stat():
    from memmath_lessons.viz import stat_row

    with pytest.raises(ValueError, match="stats must hold at least one"):
        stat_row([])
