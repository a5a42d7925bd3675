"""Opening the workbook and building its static site: what `python -m memmath_lessons` and `memmath lessons` run.

It lives with the lessons, so the calculator's command line imports it (and marimo, and the site
builder) only when the workbook is asked for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import memmath_site

# What a static build reports as a refusal (one line) or a lesson that failed to export (its cells' errors follow).
BUILD_ERRORS = (memmath_site.BuildError, memmath_site.AssetLayoutError, OSError)


def open_workbook(folder: Path, *, port: int | None = None, headless: bool = False) -> int:
    """`marimo run` on the lessons' folder, on 127.0.0.1 with the code shown: marimo's own exit status."""
    command = [sys.executable, "-m", "marimo", "run", str(folder), "--include-code"]
    if port is not None:
        command += ["--port", str(port)]
    if headless:
        command.append("--headless")
    sys.stdout.flush()
    if os.name == "posix":  # become marimo: its signals, its exit status, no parent left behind
        os.execv(sys.executable, command)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:  # Ctrl-C reaches marimo too; it stops, and so do we, quietly
        return 130


def _stop(signum, frame):
    raise SystemExit(128 + signum)  # the shell's status for a signal; the build's with-blocks remove its work folder


def build_static(site, folder: Path) -> Path:
    """Build the static site into `site` (memmath_site.build_site, its log on stderr); returns the folder.

    SIGTERM (a timeout, a stopped job) ends the build as an exception would, so the temporary work folder
    is removed on the way out rather than left behind; Ctrl-C (KeyboardInterrupt) already does."""
    if not str(site).strip():
        raise memmath_site.BuildError("the folder is empty; give the folder to build the site into, such as site/")
    site = Path(site)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        memmath_site.build_site(site, folder, log=lambda line: print(line, file=sys.stderr))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return site
