"""viz helpers the lessons share: the model-size controls and sizes in a readable unit (expected values by hand)."""

import pytest

import memmath as mm
from memmath import viz


def test_model_size_slider_spans_100m_to_400b_and_more():
    # Issue 3: parameter count "from 100M to 400B+, or a preset".
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


def test_show_gives_marimo_the_json_its_own_formatter_would():
    # viz.show skips altair's validated HTML rendering; what reaches the page must not change.
    import json

    from marimo._output.formatters.formatters import register_formatters
    from marimo._output.formatting import try_format

    import memmath as mm
    from memmath import viz
    from memmath.static_charts import Slider, bound_chart

    register_formatters()
    run = mm.training_memory(7 * 10**9, precision="bf16", optimizer="adam")
    bars = viz.stacked_bars(viz.breakdown_long({"a": run}, "GB"), "GB", capacity_bytes=24 * 10**9)
    grid = viz.breakdown_long({"a": run, "b": run}, "GB").assign(n=lambda f: (f["scenario"] == "b").astype(int))
    bound = bound_chart(grid, [Slider("n", "n")], lambda base: base.mark_bar().encode(x="sum(size):Q"))
    for chart in (bars, bound):
        mimetype, data = viz.show(chart)._mime_()
        marimo = try_format(chart)
        assert mimetype == marimo.mimetype
        assert json.loads(data) == json.loads(marimo.data)
        chart.to_dict()  # and the spec is still valid Vega-Lite (checked here, not on every slider move)


def test_table_is_plain_html_with_numbers_right_aligned_and_text_escaped():
    import pandas as pd

    from memmath import viz

    frame = pd.DataFrame({"part": ["Weights <fp32>", "Gradients"], "bytes": [14_000_000_000, 7], "GB": [14.0, 0.5],
                          "fits": [True, False]})
    html = viz.table(frame, formats={"GB": lambda v: f"{v:.2f}"}).text
    assert "<table" in html and "marimo-table" not in html  # static HTML, not marimo's interactive grid
    assert "Weights &lt;fp32&gt;" in html
    assert '<td class="num">14,000,000,000</td>' in html and '<td class="num">0.50</td>' in html
    assert '<td class="">True</td>' in html
