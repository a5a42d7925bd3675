"""The cards of the workbook's first page: one picture per lesson for `marimo run notebooks`'s gallery.

marimo's gallery draws each lesson as a card: a picture, then the title and the description of the lesson's
`[tool.marimo.opengraph]` header. Without a picture it draws a placeholder that repeats the title
(marimo/_metadata/opengraph.py, DEFAULT_OPENGRAPH_PLACEHOLDER_IMAGE_GENERATOR), so every title showed twice,
and the page has marimo's logo and no title of its own. Here the first card's picture is the workbook's title
and every other card's is the lesson's first chart (or table), drawn from the static site the lessons export to.

marimo reads a picture from `<notebook dir>/__marimo__/assets/<lesson>/opengraph.png`
(marimo/_metadata/opengraph.py, default_opengraph_image). Rebuild the pictures after a lesson's first chart
changes:

    python -m memmath_site.thumbnails            # builds the site in a temporary folder, then the pictures
    python -m memmath_site.thumbnails --site site  # from a site built already (python -m memmath_site site)

Needs the workbook extra, Playwright and a Chromium (Debian's, /usr/bin/chromium, or $MEMMATH_CHROMIUM).
"""

from __future__ import annotations

import argparse
import base64
import functools
import html
import http.server
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

# marimo's gallery crops every picture to 1200 x 630 (its `aspect-1200/630` class); the OpenGraph size too.
WIDTH, HEIGHT = 1200, 630


class QuietServer(http.server.ThreadingHTTPServer):
    """A thread per request, and no traceback when the browser drops a request it no longer needs (a page that
    navigates away closes its pending connections: a broken pipe is not an error here)."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


TITLE_CARD_LESSON = "00_start_here"

WORKBOOK_TITLE = "memmath"
WORKBOOK_SUBTITLE = "The memory math of training neural networks: a workbook"
WORKBOOK_LINE = ("Weights, gradients, optimizer states and activations, byte by byte; what freezing, adapters, "
                 "LoRA and QLoRA change; which GPU a run needs.")

# The first picture the lesson draws: a chart (vega-embed's marks, a live chart's too), else a table.
_FIRST_PICTURE = """() => {
  const roots = [document];
  for (let i = 0; i < roots.length; i++)
    for (const e of roots[i].querySelectorAll('*')) if (e.shadowRoot) roots.push(e.shadowRoot);
  for (const selector of ['.vega-embed canvas.marks, .vega-embed svg.marks', 'table']) {
    for (const root of roots) {
      const found = [...root.querySelectorAll(selector)].find(e => e.getBoundingClientRect().width > 200);
      if (found) { found.setAttribute('data-memmath-thumbnail', '1'); return selector; }
    }
  }
  return null;
}"""


def picture_path(notebooks_dir: Path, stem: str) -> Path:
    """Where marimo's gallery looks for a lesson's picture (marimo/_metadata/opengraph.py)."""
    return notebooks_dir / "__marimo__" / "assets" / stem / "opengraph.png"


def _card_html(inner: str, *, label: str) -> str:
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
html, body {{ margin: 0; width: {WIDTH}px; height: {HEIGHT}px; overflow: hidden; background: #ffffff;
             font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2937; }}
.card {{ box-sizing: border-box; width: {WIDTH}px; height: {HEIGHT}px; display: flex; flex-direction: column;
        align-items: center; justify-content: center; padding: 36px 48px; border-top: 14px solid #4c78a8; }}
.card img {{ width: {WIDTH - 96}px; height: {HEIGHT - 110}px; object-fit: contain; }}
.label {{ align-self: flex-start; font-size: 22px; font-weight: 600; color: #4c78a8; margin-bottom: 12px; }}
.title {{ font-size: 112px; font-weight: 700; letter-spacing: -2px; margin: 0; }}
.subtitle {{ font-size: 40px; margin: 8px 0 28px; text-align: center; }}
.line {{ font-size: 28px; color: #4b5563; text-align: center; max-width: 980px; line-height: 1.35; }}
</style></head><body><div class="card">{f'<div class="label">{html.escape(label)}</div>' if label else ''}{inner}</div></body></html>"""


def title_card_html() -> str:
    """The first card: the workbook's own title, which marimo's gallery page does not have."""
    inner = (f'<p class="title">{html.escape(WORKBOOK_TITLE)}</p>'
             f'<p class="subtitle">{html.escape(WORKBOOK_SUBTITLE)}</p>'
             f'<p class="line">{html.escape(WORKBOOK_LINE)}</p>')
    return _card_html(inner, label="")


def lesson_card_html(png: bytes, number: str) -> str:
    """A lesson's card: its first chart, scaled to fit, under the lesson's number (the title is below the card)."""
    data = base64.b64encode(png).decode("ascii")
    return _card_html(f'<img alt="" src="data:image/png;base64,{data}">', label=f"Lesson {number}")


class _Site:
    """The built site, served on 127.0.0.1 from a thread (its pages load ES modules, which file:// refuses)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __enter__(self) -> str:
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        handler = functools.partial(Quiet, directory=str(self.folder))
        self.server = QuietServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _chromium() -> str:
    chosen = os.environ.get("MEMMATH_CHROMIUM")
    for candidate in (chosen,) if chosen else ("/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("memmath_site.thumbnails: no Chromium found (install Debian's chromium or set MEMMATH_CHROMIUM)")


def draw(site_dir: Path, notebooks_dir: Path, *, log=print) -> list[Path]:
    """Write every lesson's picture from the site in `site_dir`; return the files written."""
    from playwright.sync_api import sync_playwright

    stems = sorted(p.stem for p in notebooks_dir.glob("[0-9][0-9]_*.py"))
    written = []
    with _Site(site_dir) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        card = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        for stem in stems:
            if stem == TITLE_CARD_LESSON:
                card.set_content(title_card_html())
            else:
                # Drawn at twice the size, so that the chart stays sharp when the card scales it up.
                page = browser.new_page(viewport={"width": 1100, "height": 1400}, device_scale_factor=2)
                page.goto(f"{url}{stem}.html", wait_until="networkidle")
                page.wait_for_timeout(2500)  # the charts draw after the page's scripts run
                if page.evaluate(_FIRST_PICTURE) is None:
                    raise SystemExit(f"memmath_site.thumbnails: {stem} draws no chart or table to picture")
                picture = page.locator("[data-memmath-thumbnail]").first
                picture.scroll_into_view_if_needed()
                page.wait_for_timeout(500)
                card.set_content(lesson_card_html(picture.screenshot(), stem.split("_")[0].lstrip("0") or "0"))
                page.close()
            card.wait_for_timeout(200)
            out = picture_path(notebooks_dir, stem)
            out.parent.mkdir(parents=True, exist_ok=True)
            card.screenshot(path=str(out))
            written.append(out)
            log(f"{out} ({out.stat().st_size:,} bytes)")
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memmath_site.thumbnails", description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="the lessons' folder")
    parser.add_argument("--site", type=Path, help="a site built already (default: build one in a temporary folder)")
    args = parser.parse_args(argv)
    if args.site is not None:
        draw(args.site, args.notebooks)
        return 0
    from memmath_site.build import build_site

    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        build_site(site, args.notebooks, log=lambda *a: print(*a, file=sys.stderr))
        draw(site, args.notebooks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
