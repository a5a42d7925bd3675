"""Screenshots of every lesson, live and static, at its defaults and with its controls moved.

    .venv/bin/python tests/screenshots.py [OUT]     # default: screenshots/

For each notebooks/NN_*.py: `NN_name.live.png` (under `marimo run`, at its defaults),
`NN_name.live-moved.png` (every slider pressed to its maximum), and, from a site built into
OUT/site, `NN_name.static.png` and `NN_name.static-moved.png` (every bound input at its other
end). Look at them: a test can say a chart changed, not that it says the right thing clearly.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # browser.py beside this file

from browser import (
    BOUND_INPUTS, LivePage, MarimoRun, StaticServer, bound_input_ends, bound_input_value, launch, set_bound_input,
)
from memmath_site.build import build_site, find_lessons

WIDTH = 1280


def _full_page(page, path: Path) -> None:
    """marimo scrolls inside #App, not the window: grow the viewport to the content, then shoot."""
    height = page.evaluate("() => { const a = document.querySelector('#App'); "
                           "return Math.max(a ? a.scrollHeight : 0, document.body.scrollHeight); }")
    page.set_viewport_size({"width": WIDTH, "height": min(max(int(height) + 40, 800), 12000)})
    page.wait_for_timeout(400)
    page.screenshot(path=str(path), full_page=True)


def take(out_dir: Path, notebooks_dir: Path = Path("notebooks"), log=print) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lessons = find_lessons(notebooks_dir)
    site = out_dir / "site"
    build_site(site, notebooks_dir, log=lambda *_: None)
    shots = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        for lesson in lessons:
            stem = lesson.source.stem
            with MarimoRun(lesson.source) as server:
                page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
                live = LivePage(page)
                live.open(server.url)
                shots.append(out_dir / f"{stem}.live.png")
                _full_page(page, shots[-1])
                for index in range(live.sliders().count()):
                    live.press_on_slider(index, "End")
                shots.append(out_dir / f"{stem}.live-moved.png")
                _full_page(page, shots[-1])
                problems = live.cell_errors + live.console_errors
                page.close()
            with StaticServer(site) as server:
                page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
                page.goto(server.url + lesson.page)
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(1500)
                shots.append(out_dir / f"{stem}.static.png")
                _full_page(page, shots[-1])
                controls = page.locator(BOUND_INPUTS)
                for index in range(controls.count()):
                    low, high = bound_input_ends(controls.nth(index))
                    current = bound_input_value(controls.nth(index))
                    set_bound_input(controls.nth(index), low if current == high else high)
                page.wait_for_timeout(500)
                shots.append(out_dir / f"{stem}.static-moved.png")
                _full_page(page, shots[-1])
                page.close()
            log(f"{stem}: 4 screenshots" + (f"; problems: {problems}" if problems else ""))
        browser.close()
    return shots


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")
    take(out)
    print(f"Screenshots in {out}/ (the site they were taken from is in {out}/site/)")
