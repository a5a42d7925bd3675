"""Every lesson under `marimo run` in Chromium: no error, no console error, and every slider and button changes the page.

The lessons are served as the README opens them (`marimo run notebooks --include-code`, one
server for the module) and each is opened at `?file=NN_name.py`; the browser is shared by the
session. Sliders are driven from the keyboard (focus, End, Home), as a learner could; at both
ends the page must still show no error, no NaN and no negative byte count. Every link from a
lesson to another part of the workbook must lead somewhere. Every button (a measurement run on
request) is pressed once and must change the page.
"""

from __future__ import annotations

import time

import pytest

from conftest import LESSONS, NOTEBOOKS
# What a lesson must never show, one definition shared with the pytest runs of tests/lessons.py:
# NaN, a traceback, a negative byte count ("-3.5 GB"; "int8 from -128 to 127" is fine).
from lessons import BAD_TEXT as NEVER_SHOWN

pytestmark = pytest.mark.browser


def assert_clean(live, where: str):
    shown = live.snapshot()
    assert not live.cell_errors, f"{where}: cells failed: {live.cell_errors}"
    assert not live.console_errors, f"{where}: console errors: {live.console_errors}"
    assert shown.drawn == shown.vega, f"{where}: {shown.vega - shown.drawn} of {shown.vega} charts did not draw"
    match = NEVER_SHOWN.search(shown.text)
    assert match is None, (f"{where}: the page shows {match.group(0)!r} (NaN, a traceback or a negative byte count): "
                           f"...{shown.text[max(0, match.start() - 80):match.end() + 40]}...")
    return shown


@pytest.fixture(scope="module")
def workbook():
    """`marimo run notebooks --include-code`, the README's command, on a free loopback port."""
    from browser import MarimoRun

    with MarimoRun(NOTEBOOKS, extra_args=("--include-code",)) as server:
        yield server


def assert_links_lead_somewhere(live, workbook, where: str) -> None:
    """Every link into the workbook (another lesson: "?file=NN_name.py") answers with a page, not a 404."""
    hrefs = live.page.locator("a[href]").evaluate_all("links => links.map(a => a.href)")
    local = sorted({h.split("#")[0] for h in hrefs if h.startswith(workbook.url)} - {workbook.url})
    broken = [h for h in local if live.page.request.get(h).status != 200]
    assert not broken, f"{where} links to pages the live workbook does not have: {broken}"


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_and_every_slider_changes_what_is_shown(chromium, workbook, lesson, record_property):
    from browser import LivePage, live_charts, live_htmls

    start = time.perf_counter()
    page = chromium.new_page(viewport={"width": 1280, "height": 1600})
    try:
        live = LivePage(page)
        live.open(f"{workbook.url}?file={lesson.name}")
        assert_clean(live, f"{lesson.name} at its defaults")
        assert_links_lead_somewhere(live, workbook, lesson.name)
        charts, htmls = live_charts(page), live_htmls(page)
        moved_in_place = set()  # live charts whose drawn marks a slider changed with no new chart
        html_moved = set()  # live htmls whose text a slider changed in place
        sliders = live.sliders().count()
        for index in range(sliders):
            for key in ("End", "Home"):
                before, before_html = live_charts(page), live_htmls(page)
                live.press_on_slider(index, key)
                shown = assert_clean(live, f"{lesson.name}, slider {index + 1} at its {'maximum' if key == 'End' else 'minimum'}")
                moved_in_place |= _moved_in_place(lesson.name, index, before, live_charts(page))
                html_moved |= _html_moved_in_place(lesson.name, index, before_html, live_htmls(page))
                if key == "End":
                    at_max = shown
            assert not shown.same_as(at_max), (
                f"{lesson.name}: slider {index + 1} ({live.slider_label(index)!r}) "
                "shows the same page at its minimum and its maximum: nothing reads it")
        if charts:
            # A live chart exists so that sliders change its marks in the drawn view, not by drawing a new chart.
            assert moved_in_place, (f"{lesson.name}: no slider changed any of its {len(charts)} live charts in place "
                                    "(every move drew a new chart, or none moved them)")
        if htmls:
            assert html_moved, f"{lesson.name}: no slider changed any of its {len(htmls)} live htmls in place"
    finally:
        page.close()
    record_property("seconds", round(time.perf_counter() - start, 1))
    record_property("sliders", sliders)
    record_property("live_charts", len(charts))


def _moved_in_place(lesson: str, index: int, before: list[dict], after: list[dict]) -> set:
    """Ids of the live charts one slider move changed in place: same element, embedded no more times, new marks.

    Fails where a move replaced a live chart's element (its output was drawn anew, which the live
    chart exists to avoid) or left one undrawn.
    """
    assert [c["id"] for c in after] == [c["id"] for c in before], (
        f"{lesson}: slider {index + 1} replaced live charts {[c['id'] for c in before]} by "
        f"{[c['id'] for c in after]}: their cell's output was made anew instead of taking new rows")
    assert all(c["print"] for c in after), f"{lesson}: after slider {index + 1} a live chart is not drawn: {after}"
    return {a["id"] for b, a in zip(before, after)
            if a["embeds"] == b["embeds"] and a["updates"] > b["updates"] and a["print"] != b["print"]}


def _html_moved_in_place(lesson: str, index: int, before: list[dict], after: list[dict]) -> set:
    """Ids of the live htmls one slider move changed in place: same element, replaced contents, other text.

    Fails where a move replaced a live html's element (its cell's output was made anew). A live html may be
    empty (a warning that does not apply); the page's text is checked for what must never show.
    """
    assert [h["id"] for h in after] == [h["id"] for h in before], (
        f"{lesson}: slider {index + 1} replaced live htmls {[h['id'] for h in before]} by {[h['id'] for h in after]}: "
        "the cell that shows them was re-run instead of the cell that fills them")
    return {a["id"] for b, a in zip(before, after) if a["updates"] > b["updates"] and a["text"] != b["text"]}


BUTTON_LESSONS = [p for p in LESSONS if "mo.ui.button(" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("lesson", BUTTON_LESSONS, ids=[p.stem for p in BUTTON_LESSONS])
def test_every_button_changes_what_is_shown(chromium, workbook, lesson):
    """A button (lesson 5's Measure, lesson 6's Time again) re-measures: pressing it must visibly change the page."""
    from browser import LivePage

    page = chromium.new_page(viewport={"width": 1280, "height": 1600})
    try:
        live = LivePage(page)
        live.open(f"{workbook.url}?file={lesson.name}")
        buttons = page.locator("marimo-button button")
        assert buttons.count() >= 1, f"{lesson.name} builds an mo.ui.button but the page shows none"
        for index in range(buttons.count()):
            before, runs = live.snapshot(), live.completed_runs
            buttons.nth(index).click()
            live.wait_settled(runs)
            after = assert_clean(live, f"{lesson.name}, button {index + 1} pressed")
            assert not after.same_as(before), f"{lesson.name}: button {index + 1} changes nothing on the page"
    finally:
        page.close()


# A model type memmath has no record for (Ministral: mistralai's MinistralForCausalLM), at a width that traces in
# seconds.
TINY_MINISTRAL = {"architectures": ["MinistralForCausalLM"], "model_type": "ministral", "hidden_size": 64,
                  "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
                  "num_hidden_layers": 4, "vocab_size": 1000, "max_position_embeddings": 512, "sliding_window": 64,
                  "layer_types": ["sliding_attention", "full_attention"] * 2, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": False}


def test_lesson_8_traces_a_pasted_config_memmath_has_no_record_for(chromium, workbook, transformers):
    """Pasting a model type memmath refuses offers PyTorch's trace; its peak is the API's for the same settings,
    judged by the one verdict."""
    import json

    from browser import LivePage

    import memmath as mm
    from memmath.traced import traced_training
    from memmath.verdict import verdict_of

    page = chromium.new_page(viewport={"width": 1280, "height": 1600})
    try:
        live = LivePage(page)
        live.open(f"{workbook.url}?file=08_planner.py")
        runs = live.completed_runs
        page.get_by_text("paste config.json", exact=True).first.click()
        live.wait_settled(runs)
        runs = live.completed_runs
        area = page.locator("textarea").first
        area.fill(json.dumps(TINY_MINISTRAL))
        area.blur()
        live.wait_settled(runs)
        assert "is not supported" in live.snapshot().text
        runs = live.completed_runs
        page.get_by_role("button", name="Trace this step with PyTorch").click()
        live.wait_settled(runs, timeout_s=180)
        text = " ".join(live.snapshot().text.split())
        # the lesson's defaults: full finetuning, pure bf16, AdamW, batch 1 x 512 tokens, sdpa, on an RTX 4090
        answer = traced_training(TINY_MINISTRAL, precision="bf16", optimizer="adamw", method="full", batch_size=1,
                                 seq_len=512, attention="sdpa")
        verdict = verdict_of(answer.peak_step2_bytes, "RTX 4090")
        assert f"the peak of every step after the first is {mm.format_bytes(answer.peak_step2_bytes)}" in text
        assert f"{answer.peak_step2_bytes:,} B" in text and verdict.headline() in text
        assert "Traceback" not in text
    finally:
        page.close()
