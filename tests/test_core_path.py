"""Every lesson's core path is a five-minute read, with a control near the top.

The core path is what a lesson shows outside its folds (`mo.accordion`): the claim, the control that
moves it, the number, the takeaway, and the sections a learner reads on the way. Everything else (the
derivations, the measurements, the second examples) waits in a fold.

What a word is: a run of letters and digits that starts with a letter or digit and may go on through
apostrophes, dots, commas, percent signs and hyphens, so "1,024", "2.00", "5%", "AdamW's" and
"bf16" are one word each. It is counted in the HTML each output of a default run shows, with its
tags, scripts and styles removed; text inside a `<marimo-accordion>` is folded and counted apart. A
callout keeps its text in an attribute of its element, which this count does not read.

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
import re

import lessons
import pytest

CORE_PATH_WORDS = 1_100  # five minutes at 220 words a minute
FIRST_CONTROL_WORDS = 300

WORD = re.compile(r"[A-Za-z0-9][\w'.,%-]*")
FOLD = re.compile(r"<(/?)marimo-accordion\b[^>]*>")
CONTROL = re.compile(r"<marimo-(slider|dropdown|radio|number|switch|checkbox|button|text)\b")


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


def core_path(outputs) -> dict:
    """Words outside folds, words inside them, and the words read before the first control outside a fold."""
    outside = inside = 0
    first_control = None
    for output in outputs:
        markup = html.unescape(getattr(output, "text", "") or "")
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
    """The counts of the lesson's default run (one run per lesson for this module)."""
    if lesson not in _COUNTS:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            outputs, _ = lessons.run(lesson)
        _COUNTS[lesson] = core_path(outputs)
    return _COUNTS[lesson]


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
    # Outside: "Adam's 2 states: 8 B each." (6 words), "Move it:" (2), "Then 5% more." (3); a tag's attributes and a
    # script are no words. In the fold: "Three folded words" (3). The slider comes after 6 + 2 = 8 words.
    page = ("<p>Adam's 2 states: 8 B&nbsp;each.</p><marimo-accordion data-labels='x'><div>Three folded "
            "words</div></marimo-accordion><p>Move it:</p><marimo-slider data-label='Size'></marimo-slider>"
            "<script>var hidden = 1;</script><p>Then 5% more.</p>")

    class Output:
        text = page

    assert core_path([Output()]) == {"outside": 11, "inside": 3, "first_control": 8}
    assert words("<b>1,024</b> tokens, 2.00 GB, don't-stop") == 5
    assert split_folds("a<marimo-accordion>b<marimo-accordion>c</marimo-accordion>d</marimo-accordion>e") == [
        (False, "a"), (True, "<marimo-accordion>b<marimo-accordion>c</marimo-accordion>d</marimo-accordion>"),
        (False, "e")]
