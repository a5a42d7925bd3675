"""Shared fixtures: the lessons, one Chromium per session, and the static site built once per session.

Browser tests (marker `browser`) skip where Playwright or Chromium is missing, but fail instead
when MEMMATH_REQUIRE_BROWSER=1 (.ci/run sets it): CI must run them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memmath_site.build import LESSON_PATTERN

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted(p for p in NOTEBOOKS.glob("*.py") if LESSON_PATTERN.match(p.name))


def browser_required() -> bool:
    return os.environ.get("MEMMATH_REQUIRE_BROWSER") == "1"


def skip_or_fail(reason: str):
    if browser_required():
        pytest.fail(f"{reason}, and MEMMATH_REQUIRE_BROWSER=1 says the browser tests must run", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium for the whole session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed (requirements-dev.txt)")
    from memmath_site.browser import find_chromium, launch

    if find_chromium() is None:
        skip_or_fail("no Chromium at /usr/bin/chromium (apt-get install chromium) or $MEMMATH_CHROMIUM")
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site, built once per session by the README's command from notebooks/: (folder, its printed report)."""
    out = tmp_path_factory.mktemp("site") / "site"
    done = subprocess.run([sys.executable, "-m", "memmath_site", "build", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=1800, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, f"the export command failed:\n{done.stdout}\n{done.stderr}"
    return out, done.stdout
