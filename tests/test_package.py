"""The package as people install it: the wheel built from this checkout, installed in a fresh venv.

`pip install memmath` must give the calculator with numpy alone, and `memmath lessons` the lessons the
wheel carries (memmath_lessons/notebooks); without the workbook extra it must say which extra to
install. The wheel is built once (pip wheel, as README says), from a copy of the sources so the
checkout gets no build/ folder; one venv holds the wheel and what pip resolves for it (numpy), a
second the wheel beside this venv's workbook (marimo, altair, pandas, anywidget: borrowed through a
.pth file rather than installed again) to open the lessons with `marimo run`. About half a minute
in all; `-m "not package"` skips it.
"""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

import memmath as mm

pytestmark = pytest.mark.package

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "memmath", "memmath_lessons", "memmath_site", "notebooks")
LESSONS = sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"))
WORKBOOK = ("marimo", "altair", "pandas", "anywidget")
INSTALL_HINT = 'pip install "memmath[workbook]"'


def _run(command, *, cwd, env=None, timeout=300, check=True):
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**environment, **(env or {})})
    if check:
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    caches = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")

    def ignore(folder, names):  # a clean checkout: marimo's caches stay out, the gallery's pictures (committed) in
        skipped = set(caches(folder, names))
        if Path(folder).name == "__marimo__":
            skipped |= {n for n in names if n != "assets"}
        return skipped

    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", source, "--no-deps", "-w", dist, "-q"], cwd=dist)
    (built,) = dist.glob("memmath-*.whl")
    return built


def _venv(folder: Path, *options) -> Path:
    _run([sys.executable, "-m", "venv", *options, folder], cwd=folder.parent, timeout=300)
    return folder / "bin"


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel and its dependencies as pip resolves them (numpy): its bin folder."""
    bin_dir = _venv(tmp_path_factory.mktemp("fresh") / "venv")
    _run([bin_dir / "python", "-m", "pip", "install", "-q", wheel], cwd=bin_dir)
    return bin_dir


def test_the_wheel_carries_the_lessons_their_stylesheet_the_license_and_the_data(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for lesson in LESSONS:
            assert archive.read(f"memmath_lessons/notebooks/{lesson}") == (REPO / "notebooks" / lesson).read_bytes()
        # every stylesheet a lesson names (marimo.App(css_file=...)) lies beside it
        for lesson in LESSONS:
            for css in set(re.findall(r'css_file="([^"]+)"', (REPO / "notebooks" / lesson).read_text())):
                assert archive.read(f"memmath_lessons/notebooks/{css}") == (REPO / "notebooks" / css).read_bytes()
        # and the picture of its card on the first page, where marimo's gallery looks for it
        for lesson in LESSONS:
            picture = f"__marimo__/assets/{lesson[:-3]}/opengraph.png"
            assert archive.read(f"memmath_lessons/notebooks/{picture}") == (REPO / "notebooks" / picture).read_bytes()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
    assert len(LESSONS) == 12
    assert "memmath/architectures/gpt2.py" in names and "memmath/architectures/record.py" in names
    assert "memmath/cli/__init__.py" in names and "memmath_lessons/__main__.py" in names
    assert "memmath_lessons/reference/data/measured_cpu.json" in names
    assert any(n.startswith("memmath_lessons/static/vega-") for n in names)
    assert metadata["License-Expression"] == "MIT" and "memmath developers" in license_text
    assert license_text == (REPO / "LICENSE").read_text()
    requires = metadata.get_all("Requires-Dist")
    assert [r for r in requires if "extra ==" not in r] == ["numpy>=1.26"]
    assert "workbook" in metadata.get_all("Provides-Extra")
    assert {r.split(";")[0].split("=")[0].split(">")[0] for r in requires if 'extra == "workbook"' in r} == set(WORKBOOK)


def test_the_installed_calculator_answers_with_numpy_alone(installed):
    python, memmath = installed / "python", installed / "memmath"
    found = _run([python, "-c", "import importlib.util as u, memmath; print(memmath.__file__); "
                  f"print([m for m in ('numpy',) + {WORKBOOK!r} if u.find_spec(m)])"], cwd=installed)
    where, modules = found.stdout.splitlines()
    assert where.startswith(str(installed.parent)) and modules == "['numpy']"
    version = _run([memmath, "--version"], cwd=installed)
    assert version.stdout == "memmath 0.1.0\n" and version.stderr == ""
    done = _run([memmath, "train", "gpt2", "--seq", "128", "--gpu", "T4", "--json"], cwd=installed)
    report = json.loads(done.stdout)
    memory = mm.training_memory("gpt2", seq_len=128, attention="sdpa", dropout=True, activations="transformers")
    assert report["parts"] == {k: int(v) for k, v in memory.parts().items()} and report["exit_status"] == 0


def test_the_installed_lessons_without_the_workbook_extra_say_which_extra_to_install(installed):
    memmath, python = installed / "memmath", installed / "python"
    helped = _run([memmath, "lessons", "--help"], cwd=installed)
    assert INSTALL_HINT in " ".join(helped.stdout.split())
    folder = Path(_run([memmath, "lessons", "--path"], cwd=installed).stdout.strip())
    assert folder.is_relative_to(installed.parent) and folder.parts[-2:] == ("memmath_lessons", "notebooks")
    assert sorted(p.name for p in folder.glob("[0-9][0-9]_*.py")) == LESSONS and (folder / "memmath.css").is_file()
    for command in (["lessons"], ["lessons", "--static", "site"]):
        done = _run([memmath, *command], cwd=installed, check=False)
        assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert INSTALL_HINT in done.stderr and "missing: marimo, altair, pandas, anywidget" in done.stderr
    for module in ("memmath_lessons", "memmath_site", "memmath_lessons.viz"):
        done = _run([python, "-c", f"import {module}"], cwd=installed, check=False)
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("ModuleNotFoundError: ") and "workbook extra" in last and INSTALL_HINT in last, last


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_memmath_lessons_opens_the_packaged_lessons_with_marimo_run(wheel, tmp_path):
    # The wheel in a venv of its own, with this venv's workbook (and numpy) appended after its site-packages,
    # so the wheel's memmath, memmath_lessons and notebooks come first.
    bin_dir = _venv(tmp_path / "venv", "--without-pip")
    site = Path(_run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp_path).stdout.strip())
    _run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", wheel],
         cwd=tmp_path)
    (site / "zz_borrowed_workbook.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    folder = Path(_run([bin_dir / "memmath", "lessons", "--path"], cwd=tmp_path).stdout.strip())
    assert folder == site / "memmath_lessons" / "notebooks"
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    server = subprocess.Popen([str(bin_dir / "memmath"), "lessons", "--headless", "--port", str(port)], cwd=tmp_path,
                              env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, page = time.monotonic() + 90, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert page is not None and "<title>" in page, server.poll()
        # memmath became `python -m marimo run <the wheel's lessons> --include-code` (os.execv: same pid).
        arguments = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert [b"-m", b"marimo", b"run", str(folder).encode(), b"--include-code"] == arguments[1:6], arguments
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?file={LESSONS[0]}", timeout=30) as response:
            assert response.status == 200
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        server.stdout.close()
