"""Every lesson under `marimo run` in Chromium: no error, no console error, and every slider changes the page.

Each lesson gets its own `marimo run` server; the browser is shared by the session. Sliders are
driven from the keyboard (focus, End, Home), as a learner could; at both ends the page must
still show no error, no NaN and no negative number.
"""

from __future__ import annotations

import re
import time

import pytest

from conftest import LESSONS

pytestmark = pytest.mark.browser

# A number with a minus sign in front, where a word or another number does not come first
# ("-3.5 GB", "(−2)"), but not "fp8-e4m3", "1e-5" or "2019-2023".
NEGATIVE_NUMBER = re.compile(r"(?:^|[\s(\[=:,;])[-\u2212]\s?\d")
NAN = re.compile(r"\b(nan|inf)\b", re.I)  # NaN, nan, inf as Python and JavaScript print them


def assert_clean(live, where: str):
    shown = live.snapshot()
    assert not live.cell_errors, f"{where}: cells failed: {live.cell_errors}"
    assert not live.console_errors, f"{where}: console errors: {live.console_errors}"
    assert shown.drawn == shown.vega, f"{where}: {shown.vega - shown.drawn} of {shown.vega} charts did not draw"
    for pattern, what in ((NAN, "NaN or infinity"), (NEGATIVE_NUMBER, "a negative number")):
        match = pattern.search(shown.text)
        assert match is None, f"{where}: the page shows {what}: ...{shown.text[max(0, match.start() - 80):match.end() + 40]}..."
    return shown


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_and_every_slider_changes_what_is_shown(chromium, lesson, record_property):
    from memmath_site.browser import LivePage, MarimoRun

    start = time.perf_counter()
    with MarimoRun(lesson) as server:
        page = chromium.new_page(viewport={"width": 1280, "height": 1600})
        try:
            live = LivePage(page)
            live.open(server.url)
            assert_clean(live, f"{lesson.name} at its defaults")
            sliders = live.sliders().count()
            for index in range(sliders):
                live.press_on_slider(index, "End")
                at_max = assert_clean(live, f"{lesson.name}, slider {index + 1} at its maximum")
                live.press_on_slider(index, "Home")
                at_min = assert_clean(live, f"{lesson.name}, slider {index + 1} at its minimum")
                assert not at_min.same_as(at_max), (
                    f"{lesson.name}: slider {index + 1} ({live.slider_label(index)!r}) "
                    "shows the same page at its minimum and its maximum: nothing reads it")
        finally:
            page.close()
    record_property("seconds", round(time.perf_counter() - start, 1))
    record_property("sliders", sliders)
