"""Lesson 3's heads slider (a memmath_lessons.step_slider) under `marimo run`, in Chromium.

A width move must send the heads slider the new width's divisors in place (the same element, no
second cell re-run), and the slider must stand where StepSlider.shown says; a heads move must
re-run the lesson. Expected steps are hand arithmetic: 768 = 2^8 x 3 has 14 divisors up to 128
(1 2 3 4 6 8 12 16 24 32 48 64 96 128); 832 = 2^6 x 13 has 11 (1 2 4 8 13 16 26 32 52 64 104; 128 = 2^7 does not divide it).
"""

from __future__ import annotations

import pytest

from conftest import NOTEBOOKS

pytestmark = pytest.mark.browser

WIDTH, HEADS = 3, 5  # the width and heads sliders, in page order (length, batch and layers come first)


@pytest.fixture(scope="module")
def lesson_3(chromium):
    from browser import LivePage, MarimoRun

    with MarimoRun(NOTEBOOKS / "03_activations.py") as server:
        page = chromium.new_page(viewport={"width": 1280, "height": 1600})
        live = LivePage(page)
        live.open(server.url)
        yield live
        page.close()


def _heads(live) -> dict:
    return live.sliders().nth(HEADS).evaluate("""e => ({now: Number(e.getAttribute('aria-valuenow')),
        positions: Number(e.max) + 1, tagged: e.__memmathTag === 1, label: e.getAttribute('aria-label')})""")


def _page_text(live) -> str:
    return live.page.evaluate("""() => { const parts = [];
        const walk = (root) => root.querySelectorAll('*').forEach(e => { if (e.shadowRoot) { parts.push(e.shadowRoot.textContent); walk(e.shadowRoot); } });
        parts.push(document.body.innerText); walk(document); return parts.join(' '); }""")


def test_a_width_move_sends_the_heads_slider_new_steps_in_place(lesson_3):
    live = lesson_3
    assert live.slider_label(WIDTH) == "Width h (hidden size)"
    heads = _heads(live)
    assert heads["label"] == "Attention heads a (the divisors of h)"
    assert (heads["now"], heads["positions"]) == (12, 14)  # GPT-2 small: 12 heads of the 14 divisors of 768
    live.sliders().nth(HEADS).evaluate("e => { e.__memmathTag = 1; }")

    moved, _ = live.press_on_slider(WIDTH, "ArrowRight")  # 768 -> 832: 12 does not divide it
    assert moved
    heads = _heads(live)
    assert heads["tagged"], "the width move replaced the heads slider instead of sending it new steps"
    assert (heads["now"], heads["positions"]) == (8, 11)  # the largest divisor of 832 at most 12
    assert "Attention heads shows 8, not your 12" in _page_text(live)

    moved, _ = live.press_on_slider(HEADS, "ArrowRight")  # 8 -> 13, the next divisor of 832
    assert moved and _heads(live)["now"] == 13
    text = _page_text(live)
    assert "Attention heads shows" not in text
    assert "5·13·" in text  # the recipe's 5·a·s/h now uses 13 heads

    live.press_on_slider(WIDTH, "ArrowLeft")  # back to 768: 13 does not divide it, 12 does
    heads = _heads(live)
    assert heads["tagged"] and (heads["now"], heads["positions"]) == (12, 14)
    assert "Attention heads shows 12, not your 13" in _page_text(live)
    assert not live.cell_errors and not live.console_errors
