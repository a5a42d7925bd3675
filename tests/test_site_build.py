"""The export command: one page per lesson plus the index, no failed cell, and a loud failure otherwise."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LESSONS, REPO
from memmath_site import assets
from memmath_site.build import SITE_MARKER, failed_cells, lesson_title

FAILING_LESSON = '''
import marimo

app = marimo.App()


@app.cell
def _():
    import marimo as mo
    mo.md("# A lesson that breaks")
    return


@app.cell
def _():
    1 / 0
    return
'''


def _build(out: Path, notebooks: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memmath_site", "build", str(out), "--notebooks", str(notebooks)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def _session(page_html: str) -> dict:
    key = '"session": '
    return json.JSONDecoder().raw_decode(page_html, page_html.index(key) + len(key))[0]


def test_there_are_lessons():
    assert LESSONS, "no notebooks/NN_*.py lessons found"


def test_export_command_writes_one_page_per_lesson_and_the_index(built_site):
    site, printed = built_site
    pages = {p.name for p in site.glob("*.html")}
    assert pages == {"index.html"} | {lesson.stem + ".html" for lesson in LESSONS}
    assert (site / SITE_MARKER).is_file() and (site / assets.ASSET_DIR / "assets").is_dir()
    for lesson in LESSONS:
        page = (site / f"{lesson.stem}.html").read_text(encoding="utf-8")
        assert failed_cells(page) == [], f"{lesson.name} has cells with error output"
        assert "cdn.jsdelivr.net" not in page and "./_marimo/assets/" in page
        assert f"{lesson.stem}.html" in printed  # the size report names every page


def test_a_failing_cell_fails_the_build_and_writes_nothing(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01_breaks.py").write_text(FAILING_LESSON)
    out = tmp_path / "site"
    done = _build(out, notebooks)
    assert done.returncode != 0
    assert "01_breaks.py" in done.stderr and "ZeroDivisionError" in done.stderr
    assert not out.exists()


def test_the_build_does_not_overwrite_a_folder_it_did_not_build(tmp_path):
    out = tmp_path / "course"
    out.mkdir()
    (out / "notes.txt").write_text("a teacher's file")
    done = _build(out, REPO / "notebooks")
    assert done.returncode != 0 and "is not a site this command built" in done.stderr
    assert (out / "notes.txt").read_text() == "a teacher's file"


def test_a_changed_asset_layout_fails_loudly(tmp_path):
    with pytest.raises(assets.AssetLayoutError, match="layout changed"):
        assets.check_static_dir(tmp_path)  # no index.html, no assets/
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text('<script type="module" src="./assets/index-gone.js"></script>')
    with pytest.raises(assets.AssetLayoutError, match="assets/index-gone.js"):
        assets.check_static_dir(tmp_path)


def test_pages_that_load_from_elsewhere_fail_loudly():
    page = '<script type="module" crossorigin src="https://cdn.example.org/frontend/index.js"></script>'
    with pytest.raises(assets.AssetLayoutError, match="no longer loads its frontend"):
        assets.localize_page(page, "01_x.html", version="0.25.2")
    cdn = assets.CDN_PREFIX.format(version="0.25.2")
    page = f'<script src="{cdn}assets/index.js"></script><link rel="stylesheet" href="https://fonts.example.org/f.css">'
    with pytest.raises(assets.AssetLayoutError, match="fonts.example.org"):
        assets.localize_page(page, "01_x.html", version="0.25.2")
    assert assets.localize_page(f'<script src="{cdn}assets/index.js"></script>', "01_x.html", version="0.25.2") \
        == '<script src="./_marimo/assets/index.js"></script>'


def test_the_installed_marimo_has_the_layout_the_builder_expects():
    folder = assets.check_static_dir()
    assert (folder / "index.html").is_file()
    assert assets.marimo_version() == assets.BUILT_FOR_MARIMO, "requirements.txt pins the marimo the site copies"
    pinned = re.search(r"^marimo==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert pinned and pinned.group(1) == assets.BUILT_FOR_MARIMO


def test_lesson_title_is_the_first_markdown_h1(tmp_path):
    notebook = tmp_path / "05_x.py"
    notebook.write_text('# A comment, not a title\nimport marimo\napp = marimo.App()\n\n@app.cell\ndef _(mo):\n'
                        '    mo.md(r"""\n    ## Not this\n    # LoRA: low-rank adapters\n    """)\n    return\n')
    assert lesson_title(notebook) == "LoRA: low-rank adapters"
    notebook.write_text("import marimo\napp = marimo.App()\n")
    assert lesson_title(notebook) == "X"


def test_links_between_lessons_become_links_between_pages():
    from memmath_site.build import BuildError, relink_lessons

    lessons = {"01_weights.py", "03_activations.py"}
    page = r'<a href=\"?file=03_activations.py\">next</a> <a href=\"?file=01_weights.py&amp;show-code=true\">back</a>'
    assert relink_lessons(page, "02_x.html", lessons) == \
        r'<a href=\"03_activations.html\">next</a> <a href=\"01_weights.html\">back</a>'
    with pytest.raises(BuildError, match="09_missing.py"):
        relink_lessons('<a href="?file=09_missing.py">', "02_x.html", lessons)


def test_readme_gives_the_commands_the_site_and_its_index_use():
    from memmath_site.build import BUILD_COMMAND, LIVE_COMMAND, SERVE_COMMAND

    readme = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "README.md", REPO / "docs" / "teaching.md"))
    for command in (BUILD_COMMAND, SERVE_COMMAND, LIVE_COMMAND):
        assert command in readme, f"README.md and docs/teaching.md do not give the command {command!r}"


PASSING_LESSON = '''
import marimo

app = marimo.App()


@app.cell
def _():
    import marimo as mo
    mo.md("# A lesson that works")
    return
'''


def _tree(root: Path) -> dict:
    """Every path under root with its kind, size and mtime (what "untouched" compares)."""
    return {str(p.relative_to(root)): (p.is_dir(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.fixture()
def sandbox(tmp_path):
    """A notebooks folder with one lesson, and a HOME, a working folder and a TMPDIR of its own."""
    for name in ("notebooks", "home", "cwd", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "notebooks" / "01_works.py").write_text(PASSING_LESSON)
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    for name in ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "PYTHONPYCACHEPREFIX"):
        env.pop(name, None)

    def build(out: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memmath_site", "build", str(out), "--notebooks",
                               str(tmp_path / "notebooks")], cwd=tmp_path / "cwd", capture_output=True, text=True,
                              timeout=600, env=env)
    return tmp_path, build


def test_the_build_writes_only_inside_its_folder_and_leaves_the_source_untouched(sandbox):
    # marimo export writes notebooks/__marimo__/session/*.json beside the notebook, and its log under
    # ~/.cache/marimo/logs; the build once also staged a folder beside the site.
    root, build = sandbox
    before = {name: _tree(root / name) for name in ("notebooks", "home", "cwd", "tmp")}
    repo_before = _tree(REPO / "notebooks")
    done = build(root / "site")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in root.iterdir()) == ["cwd", "home", "notebooks", "site", "tmp"]
    for name, tree in before.items():
        assert _tree(root / name) == tree, f"the build wrote into {name}/"
    assert _tree(REPO / "notebooks") == repo_before
    assert (root / "site" / "01_works.html").is_file() and (root / "site" / SITE_MARKER).is_file()
    # An earlier build is replaced in place.
    done = build(root / "site")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in root.iterdir()) == ["cwd", "home", "notebooks", "site", "tmp"]


def _interrupt_writes_outside(staging_root: Path, monkeypatch, after: int = 3) -> None:
    """Ctrl-C (KeyboardInterrupt) in the build's copying, at the (after + 1)-th file written outside staging_root
    (the system's temporary folder, where the build stages the site): part-way through writing the site."""
    import shutil

    real, written = shutil.copyfile, []

    def copyfile(src, dst, *args, **kwargs):
        if not Path(dst).resolve().is_relative_to(staging_root.resolve()):
            written.append(dst)
            if len(written) > after:
                raise KeyboardInterrupt(f"interrupted while writing {dst}")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", copyfile)


@pytest.fixture()
def in_process(tmp_path, monkeypatch):
    """build_site run in this process (so a test can interrupt it), from one lesson, staging in tmp_path/tmp."""
    import tempfile

    from memmath_site.build import build_site

    for name in ("notebooks", "tmp"):
        (tmp_path / name).mkdir()
    (tmp_path / "notebooks" / "01_works.py").write_text(PASSING_LESSON)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path, lambda out: build_site(out, tmp_path / "notebooks", log=lambda *_: None)


def test_an_interrupted_build_leaves_the_earlier_site_and_the_next_build_succeeds(in_process, monkeypatch):
    # The build once emptied the folder and copied the new site into it: stopped part-way, it left half a site,
    # maybe without its marker, which the next build then refused as "not a site this command built".
    root, build = in_process
    build(root / "site")
    before = _tree(root / "site")
    contents = {p: p.read_bytes() for p in (root / "site").rglob("*") if p.is_file()}
    with monkeypatch.context() as patch:
        _interrupt_writes_outside(root / "tmp", patch)
        for out in (root / "site", root / "new-site"):
            with pytest.raises(KeyboardInterrupt):
                build(out)
    # The earlier build as it was (or nothing, for a new folder), and nothing left beside it or in the temp folder.
    assert _tree(root / "site") == before
    assert {p: p.read_bytes() for p in (root / "site").rglob("*") if p.is_file()} == contents
    assert sorted(p.name for p in root.iterdir()) == ["notebooks", "site", "tmp"]
    assert list((root / "tmp").iterdir()) == []
    build(root / "site")
    build(root / "new-site")
    for out in (root / "site", root / "new-site"):
        assert (out / "01_works.html").is_file() and (out / SITE_MARKER).is_file()
    assert sorted(p.name for p in root.iterdir()) == ["new-site", "notebooks", "site", "tmp"]


@pytest.mark.parametrize("why", ["a mount point", "a folder that refuses the rename"])
def test_a_folder_that_cannot_be_swapped_is_rebuilt_in_place_keeping_its_marker(in_process, monkeypatch, why):
    # A mount point (a web server's volume) cannot be renamed: the build writes into it, its marker first, so an
    # interruption leaves a folder that the next build still recognises as its own.
    import errno

    import memmath_site.build as site_build

    root, build = in_process
    out = root / "site"
    build(out)
    if why == "a mount point":
        monkeypatch.setattr(site_build.os.path, "ismount", lambda path: Path(path) == out.resolve())
    else:
        real_replace = site_build.os.replace

        def replace(src, dst):
            if Path(src) == out.resolve():
                raise OSError(errno.EBUSY, "Device or resource busy", str(src))
            return real_replace(src, dst)
        monkeypatch.setattr(site_build.os, "replace", replace)
    with monkeypatch.context() as patch:
        _interrupt_writes_outside(root / "tmp", patch, after=1)
        with pytest.raises(KeyboardInterrupt):
            build(out)
    assert (out / SITE_MARKER).is_file()
    assert sorted(p.name for p in root.iterdir()) == ["notebooks", "site", "tmp"]
    build(out)
    assert (out / "01_works.html").is_file() and (out / SITE_MARKER).is_file()


def test_the_site_is_readable_by_a_web_server_running_as_another_user(sandbox):
    root, build = sandbox
    assert build(root / "site").returncode == 0
    for path in [root / "site", *(root / "site").rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


def test_a_symlinked_folder_is_refused_and_its_target_kept(sandbox):
    root, build = sandbox
    target = root / "elsewhere"
    target.mkdir()
    (target / SITE_MARKER).write_text("looks like a site\n")
    (target / "keep.txt").write_text("someone's file")
    (root / "site").symlink_to(target)
    done = build(root / "site")
    assert done.returncode != 0 and "symbolic link" in done.stderr
    assert sorted(p.name for p in target.iterdir()) == [SITE_MARKER, "keep.txt"]


def test_a_non_empty_folder_that_is_not_a_build_is_refused(sandbox):
    root, build = sandbox
    out = root / "site"
    out.mkdir()
    (out / "notes.txt").write_text("a teacher's file")
    done = build(out)
    assert done.returncode != 0 and "is not a site this command built" in done.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    # A marker that is a link to a file elsewhere does not make a folder an earlier build.
    (root / "marker").write_text("")
    (out / SITE_MARKER).symlink_to(root / "marker")
    assert build(out).returncode != 0 and (out / "notes.txt").is_file()


def test_readme_says_marimo_run_is_local_and_how_to_serve_a_class_with_a_token(tmp_path):
    readme = (REPO / "docs" / "teaching.md").read_text(encoding="utf-8")  # the manual's page on serving a class
    assert "127.0.0.1" in readme and "no token" in readme
    network = [line.strip() for line in readme.splitlines() if "--host 0.0.0.0" in line and "marimo run" in line]
    assert network and all("--token" in line for line in network), network  # never bare
    # The options it names are marimo's own (marimo run --help, marimo 0.25.2).
    done = subprocess.run([sys.executable, "-m", "marimo", "run", "--help"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path)))
    for option in ("--host", "--port", "--token", "--token-password-file", "--headless", "--proxy", "--base-url"):
        assert option in done.stdout, option
        assert option in readme, option


# --- The static pages: no code, our banner, frozen controls, the index from the lessons' headers ---------

def _header_field(lesson: Path, field: str) -> str:
    """A field of the lesson's `# [tool.marimo.opengraph]` header, read from the file's text by this test."""
    header = re.search(r"^# /// script\n(.*?)^# ///$", lesson.read_text(encoding="utf-8"), re.S | re.M)
    assert header, f"{lesson.name} has no PEP 723 header"
    match = re.search(rf'^# {field} = "(.*)"$', header.group(1).split("[tool.marimo.opengraph]")[1], re.M)
    assert match, f"{lesson.name}'s [tool.marimo.opengraph] has no {field}"
    return match.group(1)


def test_index_lists_each_lesson_with_the_title_and_description_of_its_header(built_site):
    site, _ = built_site
    index = (site / "index.html").read_text(encoding="utf-8")
    items = re.findall(r'<li value="(\d+)"><a href="([^"]+)">([^<]+)</a><br><span class="about">([^<]+)</span></li>', index)
    assert [href for _, href, _, _ in items] == [f"{lesson.stem}.html" for lesson in LESSONS]
    for (number, _, title, about), lesson in zip(items, LESSONS):
        # "memmath · 0. Start here" in marimo's gallery; the site's numbered list shows "Start here" as item 0.
        assert f"{number}. {title}" in _header_field(lesson, "title") and int(number) == int(lesson.name[:2])
        assert html.unescape(about) == _header_field(lesson, "description")
    assert 'id="run-live"' in index


def _distinctive_code(lesson: Path) -> list[str]:
    """Code lines of the lesson that no prose repeats: its imports cell and the first control it builds."""
    source = lesson.read_text(encoding="utf-8")
    lines = ["import marimo as mo", "@app.cell"]
    control = re.search(r"^    (\w+(?:, \w+)* = (?:mo\.ui|viz)\.\w+\()", source, re.M)
    return lines + ([control.group(1)] if control else [])


def test_pages_carry_no_lesson_code_and_no_cloud_banner(built_site):
    from urllib.parse import quote

    site, _ = built_site
    for lesson in LESSONS:
        page = (site / f"{lesson.stem}.html").read_text(encoding="utf-8")
        for line in _distinctive_code(lesson):
            for form in (line, quote(line), json.dumps(line)[1:-1]):
                assert form not in page, f"{lesson.name}: the page carries its code ({line!r})"
        # marimo shows its "Run or Edit" banner (molab, a cloud service) only when the page carries code.
        assert re.search(r"<marimo-code hidden=\"\">\s*</marimo-code>", page), f"{lesson.name} carries code"
        assert "molab" not in page and "Run or Edit" not in page
        # Our line instead: how to run it live (the index's section) and the source beside the page.
        banner = re.search(r'<div data-memmath-banner="1">(.*?)</div>', page, re.S)
        assert banner and 'href="index.html#run-live"' in banner.group(1), lesson.name
        assert f'href="{lesson.name}"' in banner.group(1)
        assert (site / lesson.name).read_bytes() == lesson.read_bytes()


def _file_note(page: str) -> tuple[str, str] | None:
    """(its text, the script that shows it) of the page's note for a page opened from disk, or None."""
    note = re.search(r"<(\w+) data-memmath-file-note[^>]*\bhidden\b[^>]*>(.*?)</\1>\s*<script>(.*?)</script>", page, re.S)
    return (re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", note.group(2)))), note.group(3)) if note else None


def test_pages_opened_from_disk_say_how_to_serve_the_folder(built_site):
    # A lesson page opened from disk (file://) showed nothing but the banner: browsers load no ES modules
    # (marimo's frontend) from file://. Each page says so in plain HTML, shown by an inline script on file:// only.
    site, _ = built_site
    for name in ["index.html"] + [f"{lesson.stem}.html" for lesson in LESSONS]:
        note = _file_note((site / name).read_text(encoding="utf-8"))
        assert note, f"{name} has no note for a page opened from disk"
        text, script = note
        assert "serve this folder" in text.lower() and "python -m http.server 8000" in text, (name, text)
        assert "file://" in text and "http://localhost:8000/" in text, (name, text)
        if name != "index.html":
            assert f"http://localhost:8000/{name}" in text, (name, text)
        assert 'location.protocol === "file:"' in script  # a classic script (<script>): it runs from file:// too


def test_marimo_controls_are_exported_disabled_and_frozen_by_the_page(built_site):
    site, _ = built_site
    for lesson in LESSONS:
        page = (site / f"{lesson.stem}.html").read_text(encoding="utf-8")
        assert "data-disabled='false'" not in page, f"{lesson.name} exports a control that is not disabled"
        assert "data-memmath-frozen" in page and ".inert = true" in page
    assert "data-disabled='true'" in (site / "00_start_here.html").read_text(encoding="utf-8")  # its slider


def test_freeze_controls_and_banner_on_a_small_page():
    from memmath_site.pages import add_banner, freeze_controls

    page = ("<html><head><title>x</title></head><body><div id=\"root\"></div><script>"
            "{\"session\": \"<marimo-slider data-start='1' data-disabled='false' data-stop='9'>\"}</script></body></html>")
    frozen = add_banner(freeze_controls(page), "01_x.py", "index.html#run-live")
    assert "data-disabled='true'" in frozen and "data-disabled='false'" not in frozen
    assert frozen.index("<style data-memmath-site") < frozen.index("</head>")
    assert frozen.index("<body><div data-memmath-banner") < frozen.index('<div id="root">')
    with pytest.raises(ValueError, match="no </head>"):
        freeze_controls("<body></body>")


def test_lesson_header_reads_the_opengraph_table(tmp_path):
    from memmath_site.pages import index_title, lesson_header

    notebook = tmp_path / "03_x.py"
    notebook.write_text('# /// script\n# requires-python = ">=3.11"\n# [tool.marimo.opengraph]\n'
                        '# title = "memmath · 3. Activations"\n# description = "What the forward pass keeps."\n'
                        '# ///\nimport marimo\n')
    assert lesson_header(notebook) == {"title": "memmath · 3. Activations", "description": "What the forward pass keeps."}
    assert index_title("memmath · 3. Activations") == "Activations" == index_title("3. Activations")
    notebook.write_text("import marimo\n")
    assert lesson_header(notebook) == {}


# --- One control per quantity: a lesson's bound chart is the static site's, not the live lesson's ----------

_BOUND = re.compile(r'\\*"bind\\*"\s*:')


def _run_lesson(name: str):
    sys.path.insert(0, str(REPO / "tests"))
    import lessons

    outputs, _ = lessons.run(name)
    return html.unescape(lessons.output_text(outputs))


@pytest.mark.parametrize("lesson", [lesson.stem for lesson in LESSONS])
def test_bound_chart_shows_in_the_static_export_and_not_live(lesson, monkeypatch):
    from memmath_lessons.static_charts import STATIC_EXPORT_ENV

    monkeypatch.setenv(STATIC_EXPORT_ENV, "1")
    static = _run_lesson(lesson)
    assert _BOUND.search(static), f"{lesson}: the static export shows no bound chart"
    assert "static copy" in static  # the prose that says its inputs work in the static copy
    monkeypatch.delenv(STATIC_EXPORT_ENV)
    live = _run_lesson(lesson)
    assert not _BOUND.search(live), f"{lesson}: the live lesson shows a bound chart beside its own controls"
    assert "static copy" not in live, f"{lesson}: the live lesson's prose speaks of the static copy"


def test_lesson_0_live_chart_follows_its_slider(monkeypatch):
    import marimo as mo

    sys.path.insert(0, str(REPO / "tests"))
    import lessons

    monkeypatch.delenv("MEMMATH_STATIC_EXPORT", raising=False)
    slider = mo.ui.slider(start=1, stop=100, step=1, value=70)
    _, defs = lessons.run_with("00_start_here", demo_params_slider=slider)
    chart = defs["demo_chart"]  # memmath_lessons.live_chart: the rows and the caption it draws
    assert chart.signals["caption"] == "Parameters (billions): 70"
    (rows,) = chart.rows.values()
    # 70e9 parameters x 2 bytes (bf16) = 140 GB of weights, the "Loading the weights" bar.
    loads = [row for row in rows if row["scenario"] == "load"]
    assert loads and all(row["GB"] == 140 for row in loads), loads
    assert {row["billions"] for row in rows} == {70}  # the chart draws the slider's size only
