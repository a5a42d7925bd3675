"""The workbook's first page (`marimo run notebooks`): one card per lesson, each with a picture of its own.

Without a picture marimo's gallery draws a placeholder that repeats the card's title ("the
first page shows each card's title twice and no title for the workbook"). memmath_site/thumbnails.py draws them:
the first card is the workbook's title, the others their lesson's first chart.
"""

import struct
import urllib.request
from pathlib import Path

import pytest

from browser import MarimoRun

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(data: bytes) -> tuple[int, int]:
    # A PNG starts with its signature, then the IHDR chunk: length, "IHDR", width and height as big-endian uint32
    # (PNG specification, 11.2.2).
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_a_card_picture_where_marimo_looks(lesson):
    from marimo._metadata.opengraph import resolve_opengraph_metadata

    picture = NOTEBOOKS / "__marimo__" / "assets" / lesson / "opengraph.png"
    # 1200 x 630: the size marimo's gallery crops a card's picture to (its aspect-1200/630 class), OpenGraph's too.
    assert _png_size(picture.read_bytes()) == (1200, 630)
    # marimo's own resolver picks the picture (and so does not draw the placeholder that repeats the title).
    metadata = resolve_opengraph_metadata(str(NOTEBOOKS / f"{lesson}.py"))
    assert metadata.image == f"__marimo__/assets/{lesson}/opengraph.png"
    assert metadata.title and metadata.description


def test_no_picture_is_left_for_a_lesson_that_is_gone():
    folders = sorted(p.name for p in (NOTEBOOKS / "__marimo__" / "assets").iterdir())
    assert folders == LESSONS


def test_the_first_page_serves_each_lessons_picture_not_a_placeholder():
    with MarimoRun(NOTEBOOKS) as server:
        for lesson in LESSONS:
            with urllib.request.urlopen(f"{server.url}og/thumbnail?file={lesson}.py", timeout=30) as reply:
                assert reply.headers["Content-Type"] == "image/png", lesson
                assert reply.read() == (NOTEBOOKS / "__marimo__" / "assets" / lesson / "opengraph.png").read_bytes()
