"""memmath_lessons.diagrams: the shipped SVGs are the drawings of their sources (re-drawn by
`python -m memmath_lessons.diagrams`), so a source edited without drawing it again fails here."""

from __future__ import annotations

import html
import re

import pytest

from memmath_lessons import diagrams


@pytest.mark.parametrize("name", list(diagrams.SOURCES))
def test_every_label_of_the_source_is_drawn(name):
    svg = (diagrams.DIAGRAMS / f"{name}.svg").read_text(encoding="utf-8")
    drawn = [html.unescape(t) for t in re.findall(r"<p>(.*?)</p>", svg)]  # mermaid's labels, one <p> each
    assert sorted(drawn) == sorted(diagrams.labels(name))


@pytest.mark.parametrize("name", list(diagrams.SOURCES))
def test_every_link_is_drawn(name):
    # One drawn path per arrow of the source ("-->" and the dotted "-. label .->").
    svg = (diagrams.DIAGRAMS / f"{name}.svg").read_text(encoding="utf-8")
    arrows = len(re.findall(r"-->|\.->", diagrams.SOURCES[name]))
    assert len(re.findall(r'class="[^"]*flowchart-link', svg)) == arrows


def test_labels_reads_the_sources_by_hand():
    # The adapter, by hand: z, down, nonlinearity, up, the sum, the skip link, the output.
    assert diagrams.labels("adapter_inside") == ["z: s x h", "down-projection h -> m", "nonlinearity",
                                                 "up-projection m -> h", "+", "skip", "s x h, onward"]


def test_show_gives_inline_svg_and_refuses_unknown_names():
    assert diagrams.show("adapter_block").text.startswith("<svg")
    with pytest.raises(ValueError, match="adapter_block"):
        diagrams.show("nope")
