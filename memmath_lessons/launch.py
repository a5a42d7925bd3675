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

PROG = "memmath lessons"
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


def run(folder: Path, *, static=None, port=None, headless=False, out=sys.stdout) -> int:
    """Open the workbook (marimo's exit status), or with `static` build the site into that folder: 0 built, 2 a
    lesson that failed to export (its cells' errors on stderr). A refusal raises ValueError naming the option."""
    if static is None:
        return open_workbook(folder, port=port, headless=headless)
    for option, value in (("--port", port), ("--headless", headless or None)):
        if value is not None:
            raise ValueError(f"{option}: applies to opening the workbook (marimo run), not to --static")
    try:
        site = build_static(static, folder)
    except BUILD_ERRORS as error:
        first, *details = str(error).strip().splitlines() or [type(error).__name__]
        if not details:
            raise ValueError(f"--static: {first}") from None
        # a lesson that failed to export: its cells' errors follow the one-line verdict
        sys.stderr.write(f"{PROG}: error: --static: {first[:900]}\n" + "".join(f"  {line}\n" for line in details
                                                                               if line.strip()))
        return 2
    out.write(f"Built {site}/. Serve it with: python -m http.server -d {site} 8000\n")
    return 0
