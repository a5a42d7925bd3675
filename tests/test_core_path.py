"""Every lesson's core path is a five-minute read, with a control near the top.

The core path is what a lesson shows outside its folds (`mo.accordion`): the claim, the control that
moves it, the number, the takeaway, and the sections a learner reads on the way. Everything else (the
derivations, the measurements, the second examples) waits in a fold.

What a word is: a run of letters and digits that starts with a letter or digit and may go on through
apostrophes, dots, commas, percent signs and hyphens, so "1,024", "2.00", "5%", "AdamW's" and
"bf16" are one word each. It is counted in the HTML each output of a default run shows, with its
tags, scripts and styles removed; text inside a `<marimo-accordion>` is folded and counted apart.

Some of what the page shows is not in the HTML as text: marimo keeps it in an attribute of an
element, JSON-encoded, and the browser draws it. The count reads it where the learner sees it: a
callout's body (`data-html`), a fold's titles (`data-labels`, shown while the fold is closed, so a
fold's titles count as open text unless the fold itself sits in a fold), tab titles, a control's
label, a radio's options and a dropdown's chosen option. A widget's text lives in the widget, not in
the page: a `LiveHtml` (tables and sentences the sliders move) counts as the HTML it holds, a
`StepSlider` as a control with its label. Not counted: charts (a picture, read at a glance) and the
values inside controls (a slider's number, a text box's config).

Where 1,100 comes from: about five minutes at 220 words a minute, a common figure for reading
English prose silently (Brysbaert 2019, "How many words do we read per minute? A review and
meta-analysis of reading rate", Journal of Memory and Language 109, finds 238 words a minute for
non-fiction; a learner reading numbers and recipes goes slower).
And the first control comes within the first 300 words, about a minute and a half in, so the
learner moves the lesson's number before reading much about it.
"""

import contextlib
import html
import io
import json
import re

import lessons
import marimo as mo
import pytest
from anywidget import AnyWidget

from memmath_lessons.live_html import LiveHtml
from memmath_lessons.step_slider import StepSlider

CORE_PATH_WORDS = 1_100  # five minutes at 220 words a minute
FIRST_CONTROL_WORDS = 300

WORD = re.compile(r"[A-Za-z0-9][\w'.,%-]*")
FOLD = re.compile(r"<(/?)marimo-accordion\b[^>]*>")
CONTROL = re.compile(r"<marimo-(slider|dropdown|radio|number|switch|checkbox|button|text)\b")
ELEMENT = re.compile(r"<(marimo-[\w-]+)([^>]*)>")
ATTRIBUTE = re.compile(r"""([\w-]+)='([^']*)'""")
WIDGET = re.compile(r'"model_id":\s*"(\w+)"')
# Attributes whose text the page draws: before the element (a fold's titles stay in sight) or inside it.
SHOWN_BEFORE = {"marimo-accordion": ("data-labels",)}
SHOWN_INSIDE = {"marimo-callout-output": ("data-html",), "marimo-tabs": ("data-tabs",),
                "marimo-radio": ("data-label", "data-options"), "marimo-dropdown": ("data-label", "data-initial-value"),
                "marimo-stat": ("data-label", "data-value", "data-caption")}
LABELLED = ("slider", "number", "switch", "checkbox", "button", "text", "text-area", "anywidget")


def _decoded(value: str) -> str:
    """The HTML an attribute holds: its JSON string, or its list of strings, after HTML unescaping."""
    try:
        found = json.loads(html.unescape(value))
    except json.JSONDecodeError:  # a plain string, as a hand-written page may hold
        return html.unescape(value)
    if found is None:  # no label
        return ""
    return " ".join(map(str, found)) if isinstance(found, list) else str(found)


def revealed(markup: str, widgets: dict | None = None) -> str:
    """The fragment with the text marimo keeps in attributes and widgets put where the page shows it."""
    widgets = widgets or {}

    def shown(element):
        tag, attributes = element.group(1), dict(ATTRIBUTE.findall(element.group(2)))
        model = WIDGET.search(html.unescape(attributes.get("data-data", "")))  # a widget shown bare
        model = model.group(1) if model else _decoded(attributes.get("data-model-id", "null"))  # or in mo.ui.anywidget
        if model:
            widget = widgets.get(model)
            if isinstance(widget, LiveHtml):
                return element.group(0) + revealed(widget.html, widgets)
            if isinstance(widget, StepSlider):
                return element.group(0) + f"<marimo-slider></marimo-slider> {html.escape(widget.label)} "
            return element.group(0)
        inside = SHOWN_INSIDE.get(tag, ("data-label",) if tag.removeprefix("marimo-") in LABELLED else ())
        before = [_decoded(attributes[name]) for name in SHOWN_BEFORE.get(tag, ()) if name in attributes]
        after = [_decoded(attributes[name]) for name in inside if name in attributes]
        return _joined(before, widgets) + element.group(0) + _joined(after, widgets)

    return ELEMENT.sub(shown, markup)


def _joined(parts: list[str], widgets: dict) -> str:
    """Decoded attribute texts as page text, each revealed in turn (a callout may hold a fold or a control)."""
    return "".join(f" {revealed(part, widgets)} " for part in parts)


def widgets_of(defs: dict) -> dict:
    """Model id -> anywidget, for every widget a run defines (bare, or wrapped in mo.ui.anywidget)."""
    found = {}
    for value in defs.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            widget = item.widget if isinstance(item, mo.ui.anywidget) else item
            if isinstance(widget, AnyWidget):
                found[widget._model_id] = widget
    return found


def words(markup: str) -> int:
    """The words of an HTML fragment, as the learner sees them."""
    markup = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", markup, flags=re.S)
    return len(WORD.findall(html.unescape(re.sub(r"<[^>]+>", " ", markup))))


def split_folds(markup: str) -> list[tuple[bool, str]]:
    """The fragment cut into (folded, text) pieces in page order; a fold inside a fold is one fold."""
    pieces, depth, start = [], 0, 0
    for tag in FOLD.finditer(markup):
        closing = tag.group(1) == "/"
        if not closing and depth == 0:
            pieces.append((False, markup[start:tag.start()]))
            start = tag.start()
        depth += -1 if closing else 1
        if closing and depth == 0:
            pieces.append((True, markup[start:tag.end()]))
            start = tag.end()
    pieces.append((depth > 0, markup[start:]))
    return pieces


def core_path(outputs, widgets: dict | None = None) -> dict:
    """Words outside folds, words inside them, and the words read before the first control outside a fold."""
    outside = inside = 0
    first_control = None
    for output in outputs:
        if isinstance(output, AnyWidget):  # a cell ending in a bare widget: the page draws marimo's anywidget element
            widgets = {**(widgets or {}), output._model_id: output}
            output = mo.ui.anywidget(output)
        markup = revealed(getattr(output, "text", "") or "", widgets)
        for folded, piece in split_folds(markup):
            if folded:
                inside += words(piece)
                continue
            control = CONTROL.search(piece)
            if first_control is None and control:
                first_control = outside + words(piece[:control.start()])
            outside += words(piece)
    return {"outside": outside, "inside": inside, "first_control": first_control}


_COUNTS = {}


def counted(lesson: str) -> dict:
    """The counts of the lesson's default run, its live widgets read as shown (one run per lesson for this module)."""
    if lesson not in _COUNTS:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            _COUNTS[lesson] = lessons.run(lesson)
    outputs, defs = _COUNTS[lesson]
    return core_path(outputs, widgets_of(defs))


@pytest.mark.parametrize("lesson", lessons.LESSONS)
def test_the_core_path_reads_in_about_five_minutes(lesson):
    counts = counted(lesson)
    assert counts["outside"] <= CORE_PATH_WORDS, (
        f"{lesson} shows {counts['outside']:,} words outside its folds ({counts['inside']:,} inside): move "
        f"derivations, asides and second examples into a fold")


@pytest.mark.parametrize("lesson", lessons.LESSONS)
def test_the_first_control_comes_early(lesson):
    first = counted(lesson)["first_control"]
    assert first is not None, f"{lesson} has no control outside a fold"
    assert first <= FIRST_CONTROL_WORDS, f"{lesson}'s first control comes after {first:,} words"


def test_the_count_reads_words_and_folds_as_a_learner_does():
    # Outside: "Adam's 2 states: 8 B each." (6 words), the fold's title "x" (1), "Move it:" (2), the slider's label
    # "Size" (1), "Then 5% more." (3); other attributes and a script are no words. In the fold: "Three folded words"
    # (3). The slider comes after 6 + 1 + 2 = 9 words.
    page = ("<p>Adam's 2 states: 8 B&nbsp;each.</p><marimo-accordion data-labels='x'><div>Three folded "
            "words</div></marimo-accordion><p>Move it:</p><marimo-slider data-label='Size'></marimo-slider>"
            "<script>var hidden = 1;</script><p>Then 5% more.</p>")

    class Output:
        text = page

    assert core_path([Output()]) == {"outside": 13, "inside": 3, "first_control": 9}
    assert words("<b>1,024</b> tokens, 2.00 GB, don't-stop") == 5
    assert split_folds("a<marimo-accordion>b<marimo-accordion>c</marimo-accordion>d</marimo-accordion>e") == [
        (False, "a"), (True, "<marimo-accordion>b<marimo-accordion>c</marimo-accordion>d</marimo-accordion>"),
        (False, "e")]


def test_the_count_reads_callouts_fold_titles_and_labels_as_a_learner_does():
    # marimo keeps these texts JSON-escaped in attributes. Open: the callout "Adam keeps 2 states." (4 words), the
    # closed fold's title "Go deeper: why" (3), the slider's label "Batch size" (2) after the control. In the fold:
    # the callout "Eight folded words sit here, out of sight." (8) and its title "Inner" (1, a fold in a fold).
    callout = mo.callout(mo.md("Adam keeps **2** states."), kind="info")
    fold = mo.accordion({"Go deeper: why": mo.accordion(
        {"Inner": mo.callout(mo.md("Eight folded words sit here, out of sight."))})})
    slider = mo.ui.slider(1, 8, label="Batch size")

    class Output:
        text = callout.text + fold.text + slider.text

    assert core_path([Output()]) == {"outside": 9, "inside": 9, "first_control": 7}
    assert words(Output.text) == 0  # none of them is in the HTML as text


def test_a_live_table_counts_as_the_html_it_holds():
    # A LiveHtml's rows live in the widget, not in the page: "Peak 2.00 GB" is 3 words, seen only through the widget.
    view = LiveHtml()
    view.update(mo.md("Peak **2.00** GB"))
    shown = mo.ui.anywidget(view)

    class Output:
        text = shown.text

    assert core_path([Output()]) == {"outside": 0, "inside": 0, "first_control": None}
    assert core_path([Output()], widgets_of({"view": view})) == {"outside": 3, "inside": 0, "first_control": None}
    assert core_path([view]) == {"outside": 3, "inside": 0, "first_control": None}  # a cell that ends in the widget
