"""A bound chart in a static export, in Chromium: its inputs select the right precomputed numbers.

tests/fixtures/bound_chart_numbers.py draws two bound charts as text; the test exports it the way
the site does (marimo export html, local frontend), moves each input and reads the drawn number.
Expected values come from the article and from hand arithmetic, not from memmath.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memmath_site import assets
from memmath_site.build import Lesson, export_lesson

pytestmark = pytest.mark.browser

FIXTURE = Path(__file__).parent / "fixtures" / "bound_chart_numbers.py"


@pytest.fixture(scope="module")
def fixture_page(tmp_path_factory, chromium):
    from browser import StaticServer

    site = tmp_path_factory.mktemp("bound")
    assets.copy_frontend(site)
    target = site / "fixture.html"
    export_lesson(Lesson(FIXTURE, "fixture"), target)
    target.write_text(assets.localize_page(target.read_text(encoding="utf-8"), target.name), encoding="utf-8")
    with StaticServer(site) as server:
        page = chromium.new_page()
        page.goto(server.url + "fixture.html")
        page.wait_for_function("() => document.querySelectorAll('.vega-embed svg.marks').length === 2", timeout=30000)
        yield page
        page.close()


def _drawn(page, chart: int) -> tuple[str, list[str]]:
    embed = page.locator(".vega-embed").nth(chart)
    return (" | ".join(embed.locator(".role-title-text").all_text_contents()),
            embed.locator(".role-mark text").all_text_contents())


def _set(page, chart: int, value: str, *, radio: bool = False) -> None:
    from browser import bound_input_value, set_bound_input

    embed = page.locator(".vega-embed").nth(chart)
    control = embed.locator(".vega-bind-radio" if radio else "input[type=range]").first
    if bound_input_value(control) == value:
        return
    before = _drawn(page, chart)
    set_bound_input(control, value)
    page.wait_for_timeout(100)
    for _ in range(40):
        if _drawn(page, chart) != before:
            return
        page.wait_for_timeout(50)


def test_defaults_show_the_articles_numbers(fixture_page):
    title, numbers = _drawn(fixture_page, 0)
    assert "Parameters: 7B" in title and "Format: bf16" in title
    assert numbers == ["14"]  # 7e9 parameters x 2 bytes = 14 GB (the article)
    title, numbers = _drawn(fixture_page, 1)
    assert "Frozen layers: 9" in title
    assert numbers == ["10"]  # nine of ten equal layers frozen: 10% trainable (the article)


@pytest.mark.parametrize("position, fmt, expected", [
    ("0", "fp32", "4"),    # 1e9 x 4 bytes
    ("1", "fp32", "28"),   # 7e9 x 4 bytes
    ("2", "int4", "35"),   # 70e9 x 0.5 bytes
    ("2", "bf16", "140"),  # 70e9 x 2 bytes
])
def test_uneven_slider_and_radio_pick_the_right_row(fixture_page, position, fmt, expected):
    _set(fixture_page, 0, position)
    _set(fixture_page, 0, fmt, radio=True)
    title, numbers = _drawn(fixture_page, 0)
    assert numbers == [expected], title
    assert f"Format: {fmt}" in title


@pytest.mark.parametrize("frozen, expected", [("0", "100"), ("5", "50"), ("9", "10")])
def test_even_slider_picks_the_right_row(fixture_page, frozen, expected):
    _set(fixture_page, 1, frozen)
    title, numbers = _drawn(fixture_page, 1)
    assert numbers == [expected] and f"Frozen layers: {frozen}" in title  # (10 - frozen) / 10 of the layers train


def test_live_lesson_0_shows_one_size_slider_and_its_chart_follows_it(chromium):
    """Live, the marimo slider is the only control for the size (the bound chart's own slider is the static site's):
    lesson 0 showed two 'Parameters (billions)' sliders that did not follow each other."""
    from browser import LivePage, MarimoRun

    from conftest import NOTEBOOKS

    with MarimoRun(NOTEBOOKS / "00_start_here.py") as server:
        page = chromium.new_page(viewport={"width": 1280, "height": 1600})
        try:
            live = LivePage(page)
            live.open(server.url)
            assert page.locator(".vega-bindings input, .vega-bindings select").count() == 0
            labels = [live.slider_label(i) for i in range(live.sliders().count())]
            assert labels.count("Parameters (billions)") == 1, labels
            index = labels.index("Parameters (billions)")
            title = lambda: " ".join(page.locator(".vega-embed .role-title-text").all_text_contents())  # noqa: E731
            assert "Parameters (billions): 7" in title()
            moved, _ = live.press_on_slider(index, "End")
            assert moved and "Parameters (billions): 100" in title()
            # 100e9 parameters x 2 bytes (bf16) = 200 GB of weights; x (2 + 2 + 4) bytes = 800 GB for one step.
            texts = " ".join(page.locator(".vega-embed .role-mark text, .vega-embed text").all_text_contents())
            assert "200.00 GB" in texts and "800.00 GB" in texts, texts
        finally:
            page.close()
