"""memmath_lessons.live_html without a browser: what a LiveHtml holds after an update, and what it refuses.

The browser tests (test_lessons_browser.py, test_site_browser.py) check that the page shows it and
that a slider changes it in place.
"""

from __future__ import annotations

import marimo as mo
import pandas as pd
import pytest

from memmath_lessons import viz
from memmath_lessons.live_html import LiveHtml, live_html


def test_a_frame_is_drawn_as_plain_table_draws_it():
    frame = pd.DataFrame({"gpu": ["RTX 4090", "H200"], "memory (GB)": [25.76, 150.75]})
    view = live_html()
    view.update(frame, wrapped_columns=["gpu"])
    assert view.html == viz.plain_table(frame, wrapped_columns=["gpu"]).text


def test_a_caption_goes_above_the_table_as_text():
    view = live_html()
    view.update(pd.DataFrame({"a": [1]}), caption="For <7B> parameters:")
    assert view.html.startswith('<p style="margin:0.25rem 0">For &lt;7B&gt; parameters:</p><style>')


def test_markdown_is_shown_as_mo_md_renders_it():
    view = live_html()
    view.update(mo.md("**12** of the 16 cards"))
    assert view.html == mo.md("**12** of the 16 cards").text
    assert "<strong>12</strong>" in view.html


def test_an_equal_update_sends_nothing():
    view, sent = live_html(), []
    view.update(pd.DataFrame({"a": [1]}))
    view.observe(lambda change: sent.append(change["name"]), names=["html"])
    view.update(pd.DataFrame({"a": [1]}))
    assert sent == []
    view.update(pd.DataFrame({"a": [2]}))
    assert sent == ["html"]


def test_update_returns_nothing_so_a_cell_ending_in_it_shows_nothing():
    assert live_html().update(mo.md("x")) is None


def test_marimo_elements_are_refused_by_name():
    with pytest.raises(ValueError, match="marimo-callout-output"):
        live_html().update(mo.callout(mo.md("x"), kind="warn"))
    with pytest.raises(ValueError, match="marimo-accordion"):
        live_html().update(mo.accordion({"a": mo.md("b")}))


@pytest.mark.parametrize("content", [42, None, ["a"], {"a": 1}])
def test_other_contents_are_refused(content):
    with pytest.raises(TypeError, match="DataFrame or an mo.Html"):
        live_html().update(content)


def test_table_options_go_with_a_frame_only():
    with pytest.raises(TypeError, match="go with a DataFrame"):
        live_html().update(mo.md("x"), wrapped_columns=["a"])
    with pytest.raises(TypeError, match="caption must be text"):
        live_html().update(pd.DataFrame({"a": [1]}), caption=3)


def test_it_is_an_anywidget_with_its_module_inline():
    # The static site has no server to ask for the widget's module: it must travel in the page.
    assert "export default" in LiveHtml._esm and "innerHTML" in LiveHtml._esm
