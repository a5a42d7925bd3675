"""Shared test helpers: the skip-or-fail rule for optional tools, and hypothesis settings.

Tests that need a tool the default install lacks (PyTorch, a browser) skip with a clear reason,
except where CI sets MEMMATH_REQUIRE_<TOOL>=1: there a missing tool is a failure, never a skip.

    def test_something(torch):                         # the fixtures below: torch, transformers, peft
        ...
    def test_other(require):
        playwright = require("playwright.sync_api", env="MEMMATH_REQUIRE_BROWSER")

Browser tests (marker `browser`) share one Chromium per session (the `chromium` fixture) and one
static site built per run by the README's command (`built_site`, shared by the xdist workers).
"""

from __future__ import annotations

import fcntl
import importlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from memmath_site.build import LESSON_PATTERN

# Every live chart's update draws its chart again and checks that only its rows and params moved
# (memmath_lessons.live_chart): in every lesson run here, and in the marimo servers the browser tests start.
os.environ.setdefault("MEMMATH_LIVE_CHART_CHECK", "1")

TORCH_ENV = "MEMMATH_REQUIRE_TORCH"
BROWSER_ENV = "MEMMATH_REQUIRE_BROWSER"
REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted(p for p in NOTEBOOKS.glob("*.py") if LESSON_PATTERN.match(p.name))


def skip_or_fail(reason: str, env: str) -> None:
    """Skip the running test with `reason`, or fail it when the environment variable `env` is '1'."""
    if os.environ.get(env) == "1":
        pytest.fail(f"{reason}, and {env}=1 requires it", pytrace=False)
    pytest.skip(reason)


def require(module: str, env: str = TORCH_ENV):
    """Import `module` for a test, or skip (fail under env=1) saying what is missing and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        skip_or_fail(f"{module} is not importable ({error}); pip install -r requirements-validate.txt", env)


@pytest.fixture(name="require")
def _require_fixture():
    """The `require(module, env=...)` helper as a fixture, for test files that cannot import conftest."""
    return require


@pytest.fixture
def torch():
    return require("torch")


@pytest.fixture
def transformers(torch):
    return require("transformers")


@pytest.fixture
def peft(torch):
    return require("peft")


# Hypothesis: no deadline (two shared cores make timings noisy); HYPOTHESIS_PROFILE=thorough for more.
# The default run (CI's) draws the same examples every time (derandomize), so a red run is one that
# anyone can repeat; HYPOTHESIS_PROFILE=thorough searches 1,000 fresh examples per property.
settings.register_profile("default", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium (Debian's) for the whole session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed (pip install -r requirements-dev.txt)", BROWSER_ENV)
    from browser import find_chromium, launch

    if find_chromium() is None:
        skip_or_fail("no Chromium at /usr/bin/chromium (apt-get install chromium) or $MEMMATH_CHROMIUM", BROWSER_ENV)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site, built once per run by the README's command from notebooks/: (folder, its printed report).

    Under pytest-xdist the workers share one build: the first to ask builds it in the run's temporary folder
    (the parent of each worker's own), holding a lock the others wait on, as pytest-xdist's documentation
    shows for session data. Only a build that succeeded is shared; a failed one is tried again by the next.
    """
    own = tmp_path_factory.getbasetemp()
    shared = own.parent if os.environ.get("PYTEST_XDIST_WORKER") else own
    out, report = shared / "built-site" / "site", shared / "built-site" / "report.txt"
    with open(shared / "built-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not report.is_file():
            out.parent.mkdir(exist_ok=True)
            done = subprocess.run([sys.executable, "-m", "memmath_site", "build", str(out)], cwd=REPO,
                                  capture_output=True, text=True, timeout=1800, env=dict(os.environ, PYTHONPATH=str(REPO)))
            assert done.returncode == 0, f"the export command failed:\n{done.stdout}\n{done.stderr}"
            report.write_text(done.stdout, encoding="utf-8")
        return out, report.read_text(encoding="utf-8")


# The slowest files first, longest first (their order by total seconds in a full run on 2 cores), so that with two
# workers each taking a file at a time (pyproject's `-n 2 --dist loadfile --no-loadscope-reorder`) no long file is
# left for last while the other worker waits. The site is built by the first of test_site_build and
# test_site_browser to ask (built_site): test_site_build goes first so that the other finds it built. The other
# files follow, those with the most tests first (pytest-xdist's own order).
SLOW_FILES = ("test_site_build.py", "test_lessons_browser.py", "test_lesson_08.py", "test_lesson_07.py",
              "test_moe_lora.py", "test_families_dense.py", "test_lesson_01.py", "test_site_browser.py",
              "test_course_consistency_early_lessons.py", "test_families_glm.py", "test_lesson_02.py",
              "test_lesson_11.py", "test_lesson_03.py", "test_lesson_06.py", "test_traced.py",
              "test_course_consistency.py", "test_families_kin.py", "test_lesson_05.py", "test_lesson_10.py",
              "test_package.py", "test_lesson_04.py", "test_families_ernie.py", "test_fidelity_live.py", "test_cli.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: index for index, name in enumerate(SLOW_FILES)}
    tests_in = Counter(item.path for item in items)
    # stable: the order within a file is kept
    items.sort(key=lambda item: (rank.get(item.path.name, len(SLOW_FILES)), -tests_in[item.path], str(item.path)))
