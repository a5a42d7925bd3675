"""Tables and sentences that a slider moves without re-rendering the cell around them: the element stays.

A cell that shows a table or a paragraph of numbers re-renders its whole output on every run:
marimo rebuilds the output's React tree from the cell's HTML, which for a lesson's section (prose,
folds, two or three tables) costs the browser 20-40 ms a move, more than the kernel's whole answer.
A `LiveHtml` is an anywidget (`mo.ui.anywidget`) shown once, by a cell that reads no control, among
the section's fixed prose; the cell that computes the numbers hands it new contents and the page
replaces only those::

    @app.cell
    def _(live_html, mo):
        cards_table = live_html()          # reads no control: this cell runs once
        mo.accordion({"Which cards hold the run?": cards_table})
        return (cards_table,)

    @app.cell
    def _(cards_table, frame, mo):          # re-runs on every slider move
        cards_table.update(frame)            # a DataFrame: drawn by viz.plain_table, so it looks the same
        verdict_text.update(mo.md(f"**{n}** of the cards hold it."))  # or markdown, as mo.md renders it

`update` takes a DataFrame (with viz.plain_table's `wrapped_columns` and `digits`, and a `caption`
line above it) or an mo.Html of plain HTML (mo.md, viz.plain_table). marimo's own elements
(callouts, stats, folds, controls: `<marimo-...>`) need marimo's renderer, so they are refused by
name: keep them in the cell's output. The widget's element sits in a shadow root that marimo gives
marimo's stylesheet, so markdown reads as it does in a cell.

In the static site the widget shows what it held at export time (the lesson's defaults); its HTML
travels in the page with the widget's state.
"""

from __future__ import annotations

import functools
import html as html_escape
import re
from pathlib import Path

import anywidget
import traitlets

STATIC = Path(__file__).resolve().parent / "static"
_MARIMO_ELEMENT = re.compile(r"<(marimo-[a-z-]+)")


class LiveHtml(anywidget.AnyWidget):
    """A table or markdown shown once and then given new contents (see the module docstring)."""

    _esm = (STATIC / "live_html.js").read_text(encoding="utf-8")
    html = traitlets.Unicode("").tag(sync=True)

    def update(self, content, *, caption: str = "", wrapped_columns=(), digits: int = 2) -> None:
        """Show `content`: a DataFrame (as viz.plain_table draws it, under `caption`) or an mo.Html.

        Nothing travels when the contents are the ones shown. Returns None, so that a cell ending in
        `view.update(...)` does not show the widget a second time.
        """
        from memmath_lessons import viz

        if not isinstance(caption, str):
            raise TypeError(f"caption must be text; got {type(caption).__name__}")
        if hasattr(content, "columns"):
            text = viz.plain_table(content, wrapped_columns=wrapped_columns, digits=digits).text
        elif wrapped_columns or digits != 2:
            raise TypeError("wrapped_columns and digits go with a DataFrame (they are viz.plain_table's)")
        elif isinstance(getattr(content, "text", None), str):  # mo.Html, mo.md
            text = content.text
        else:
            raise TypeError(f"a live html takes a DataFrame or an mo.Html (mo.md, viz.plain_table); "
                            f"got {type(content).__name__}")
        found = _MARIMO_ELEMENT.search(text)
        if found:
            raise ValueError(f"a live html shows plain HTML; this holds marimo's <{found.group(1)}>, which needs "
                             "marimo's renderer: show it in the cell's output instead")
        above = f'<p style="margin:0.25rem 0">{html_escape.escape(caption)}</p>' if caption else ""
        self.html = above + text


def live_html() -> LiveHtml:
    """A LiveHtml, empty until its first `update`."""
    return LiveHtml()


@functools.lru_cache(maxsize=512)
def cached_md(text: str):
    """mo.md(text), rendered once per text: a slider move often shows a sentence it showed before (a setting returned
    to, prose no control changes), and marimo's markdown takes 1-8 ms a paragraph."""
    import marimo as mo

    return mo.md(text)
