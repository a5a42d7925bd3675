"""Build the static workbook: every lesson exported to HTML, an index page, marimo's frontend beside them.

    python -m memmath_site build site          # then: python -m http.server -d site 8000

Each `notebooks/NN_*.py` runs once through `marimo export html` (with MEMMATH_STATIC_EXPORT=1,
so `memmath_lessons.static_charts.live_only_notice()` shows its note); a lesson with a failing cell
fails the build. The pages are rewritten to load marimo's frontend from `_marimo/`, copied out
of the installed marimo wheel, so the folder works from any static server with no network. They
carry no code (`--no-include-code`; the lesson's .py is copied beside its page and linked from our
banner, which replaces marimo's "Run or Edit"), and marimo's frozen controls are disabled
(memmath_site/pages.py).
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import assets, pages

REPO = Path(__file__).resolve().parent.parent
LESSON_PATTERN = re.compile(r"^\d{2}_[A-Za-z0-9_]+\.py$")
SITE_MARKER = ".memmath-site"
"""A file in every built site: the build only ever replaces a folder that carries it (or an empty one)."""

LIVE_COMMAND = ".venv/bin/marimo run notebooks --include-code"
SETUP_COMMAND = "python3.11 -m venv .venv && .venv/bin/pip install -r requirements.txt"
SERVE_COMMAND = "python -m http.server -d site 8000"
BUILD_COMMAND = ".venv/bin/python -m memmath_site build site"

EXPORT_TIMEOUT_S = 600
FILE_NOTE_ATTRIBUTE = "data-memmath-file-note"
"""Marks the note a page shows when opened from disk (file://), where browsers load no ES modules."""
LIVE_WORKBOOK_LINK = "index.html#run-live"
"""The index's section on running the live workbook (memmath_lessons.static_charts.LIVE_WORKBOOK_HREF too)."""


class BuildError(RuntimeError):
    """A lesson failed to export, or the site could not be written."""


@dataclass(frozen=True)
class Lesson:
    source: Path
    title: str
    description: str = ""
    """The one line on what the lesson answers: its PEP 723 header's [tool.marimo.opengraph] description."""

    @property
    def page(self) -> str:
        return self.source.stem + ".html"


@dataclass(frozen=True)
class PageReport:
    page: str
    title: str
    html_bytes: int
    export_seconds: float


def find_lessons(notebooks_dir: Path) -> list[Lesson]:
    """Every notebooks/NN_*.py, in order, titled and described by its PEP 723 header's [tool.marimo.opengraph].

    One source for marimo's live gallery and the site's index. A lesson without that header is
    titled by the H1 its exported page renders (an H1 written as an f-string too).
    """
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        raise BuildError(f"notebooks folder {notebooks_dir} does not exist")
    lessons = [_lesson(p) for p in sorted(notebooks_dir.iterdir()) if p.is_file() and LESSON_PATTERN.match(p.name)]
    if not lessons:
        raise BuildError(f"no lessons (NN_name.py files) in {notebooks_dir}")
    return lessons


def _lesson(path: Path) -> Lesson:
    """A lesson titled and described by its PEP 723 header (what marimo's live gallery shows), else by its H1."""
    try:
        header = pages.lesson_header(path)
    except ValueError as error:
        raise BuildError(str(error)) from error
    title = pages.index_title(header["title"]) if header.get("title") else lesson_title(path)
    return Lesson(path, title, header.get("description", ""))


def lesson_title(path: Path) -> str:
    """The text of the first `# Heading` line in the notebook's strings (its H1), else a name from the file."""
    source = Path(path).read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise BuildError(f"{path} is not valid Python: {error}") from error
    strings = sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str))
    for _, _, text in strings:
        match = re.search(r"^[ \t]*#[ \t]+(.+?)[ \t#]*$", text, re.M)
        if match:
            return match.group(1).strip()
    return Path(path).stem.split("_", 1)[1].replace("_", " ").capitalize()


def rendered_title(page_html: str) -> str | None:
    """The text of the first <h1> an exported page shows (its lesson's H1 as rendered, f-strings included)."""
    for cell in _session(page_html).get("cells", []):
        for output in cell.get("outputs", []):
            for data in (output.get("data") or {}).values():
                match = re.search(r"<h1[^>]*>(.*?)</h1>", data, re.S) if isinstance(data, str) else None
                if match:
                    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip() or None
    return None


def export_lesson(lesson: Lesson, out_html: Path, scratch: Path | None = None) -> float:
    """Run `marimo export html` on one lesson; BuildError (with marimo's message) if any cell fails.

    scratch: a folder for what marimo and Python write on the side (marimo's log, caches and config,
    under XDG_CACHE_HOME, XDG_STATE_HOME and XDG_CONFIG_HOME); no bytecode is written (PYTHONDONTWRITEBYTECODE). marimo
    also writes a session snapshot into __marimo__/ beside the notebook, so build_site exports a
    temporary copy of the notebooks.
    """
    # The lessons import the memmath beside this builder (this checkout), whatever else is installed.
    env = dict(os.environ, MEMMATH_STATIC_EXPORT="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    if scratch is not None:
        # marimo's log (~/.cache/marimo/logs), state, and the empty marimo.toml it creates when there is none:
        # the export also runs with marimo's defaults rather than this user's settings.
        env.update(XDG_CACHE_HOME=str(scratch / "cache"), XDG_STATE_HOME=str(scratch / "state"),
                   XDG_CONFIG_HOME=str(scratch / "config"))
    command = [sys.executable, "-m", "marimo", "export", "html", str(lesson.source), "-o", str(out_html),
               "--force", "--no-sandbox", "--no-include-code"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, cwd=scratch)
    except subprocess.TimeoutExpired as error:
        raise BuildError(f"{lesson.source.name}: marimo export html ran past {EXPORT_TIMEOUT_S} s") from error
    seconds = time.perf_counter() - start
    if done.returncode != 0 or not out_html.is_file():
        # marimo still writes the page when a cell fails; its saved tracebacks say more than marimo's exit message
        # (a page without code keeps no traceback: export it once more with the code to read them).
        details = _failures_with_code(command, env, out_html)
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-25:])
        raise BuildError(f"{lesson.source.name}: marimo export html failed (exit {done.returncode}); "
                         f"a cell raised or the notebook does not load:\n" + "\n".join(details or [tail]))
    failed = cell_failures(out_html.read_text(encoding="utf-8"))
    if failed:
        failed = _failures_with_code(command, env, out_html) or failed
        raise BuildError(f"{lesson.source.name}: the export holds error output:\n" + "\n".join(failed))
    return seconds


def _failures_with_code(command: list[str], env: dict, out_html: Path) -> list[str]:
    """cell_failures of the lesson exported with its code (first code lines and tracebacks); [] if none."""
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / out_html.name
        full = [page if part == str(out_html) else part for part in command if part != "--no-include-code"]
        subprocess.run([str(part) for part in full], env=env, capture_output=True, text=True,
                       timeout=EXPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        return cell_failures(page.read_text(encoding="utf-8")) if page.is_file() else []


def failed_cells(page_html: str) -> list[str]:
    """Ids of the cells whose saved output in an exported page is an error (empty when all ran)."""
    return [cell.get("id", "?") for cell in _session(page_html).get("cells", [])
            if any(output.get("type") == "error" for output in cell.get("outputs", []))]


def cell_failures(page_html: str) -> list[str]:
    """One message per failed cell of an exported page: its first code line and its traceback as text."""
    session = _session(page_html)
    code = {}
    key = '"notebook": '
    if key in page_html:
        notebook, _ = json.JSONDecoder().raw_decode(page_html, page_html.index(key) + len(key))
        code = {cell.get("id"): (cell.get("code") or "").strip().splitlines() for cell in (notebook or {}).get("cells", [])}
    messages = []
    for cell in session.get("cells", []):
        errors = [o for o in cell.get("outputs", []) if o.get("type") == "error"]
        if not errors:
            continue
        first_line = (code.get(cell.get("id")) or ["?"])[0]
        traceback = "".join(html.unescape(re.sub(r"<[^>]+>", "", c.get("text", ""))) for c in cell.get("console", [])
                            if c.get("name") == "stderr").strip()
        reason = traceback or "; ".join(f"{e.get('ename')}: {e.get('evalue')}" for e in errors)
        messages.append(f"cell {cell.get('id')} ({first_line[:70]}):\n{reason}")
    return messages


def _session(page_html: str) -> dict:
    key = '"session": '
    start = page_html.find(key)
    if start < 0:
        raise assets.AssetLayoutError("an exported page has no session snapshot: marimo's export format changed")
    session, _ = json.JSONDecoder().raw_decode(page_html, start + len(key))
    return session or {}


# A link from one lesson to another as `marimo run notebooks` serves them: "?file=03_activations.py",
# maybe with more query parameters ("&show-code=true").
_LESSON_LINK = re.compile(r"\?file=(?:notebooks/)?(\d{2}_[A-Za-z0-9_]+\.py)(?:&(?:amp;)?[A-Za-z0-9_=-]+)*")


def relink_lessons(page_html: str, page_name: str, lesson_files: set[str]) -> str:
    """Links between lessons ("?file=NN_name.py", as `marimo run notebooks` serves them) pointed at NN_name.html.

    A link to a lesson that does not exist fails the build (BuildError), instead of a dead link.
    """
    def replace(match: re.Match) -> str:
        target = match.group(1)
        if target not in lesson_files:
            raise BuildError(f"{page_name} links to ?file={target}, which is not a lesson in the notebooks folder")
        return target[:-3] + ".html"

    return _LESSON_LINK.sub(replace, page_html)


def build_site(out_dir: Path, notebooks_dir: Path = Path("notebooks"), *, log=print) -> list[PageReport]:
    """Export every lesson, write the index and the frontend to out_dir; returns one report per page.

    out_dir must be new, empty or an earlier build (it holds SITE_MARKER), and not a symbolic link.
    Everything is built in the system's temporary folder, from a copy of the notebooks (marimo writes
    __marimo__/ beside what it exports), and only when every lesson exported is the site copied beside
    out_dir (a hidden sibling folder) and renamed into its place (_swap_in): a build stopped at any point
    leaves the earlier site (or nothing) where it was, and the source tree as it was. Folders get mode
    0755 and files 0644, so a web server running as another user can read the site.
    """
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise BuildError(f"{out_dir} is a symbolic link; give the folder itself (the build does not follow links)")
    out_dir, notebooks_dir = out_dir.resolve(), Path(notebooks_dir).resolve()
    _check_replaceable(out_dir)
    if assets.marimo_version() != assets.BUILT_FOR_MARIMO:
        log(f"warning: marimo {assets.marimo_version()} is installed; this builder was written for marimo "
            f"{assets.BUILT_FOR_MARIMO} (requirements.txt). The build checks the asset layout and stops if it changed.")
    find_lessons(notebooks_dir)  # fail early, before copying anything
    with tempfile.TemporaryDirectory(prefix="memmath-site-") as work:
        work = Path(work)
        lessons = find_lessons(_copy_notebooks(notebooks_dir, work / "notebooks"))
        staging = work / "site"
        staging.mkdir()
        asset_bytes = assets.copy_frontend(staging)
        # The live charts' vega runtime (memmath_lessons.live_chart loads it from _memmath/ in a static page).
        from memmath_lessons import live_chart

        asset_bytes += live_chart.copy_runtime(staging)
        reports, failures, titled = [], [], []
        for lesson in lessons:
            log(f"exporting {lesson.source.name} ...")
            target = staging / lesson.page
            try:
                seconds = export_lesson(lesson, target, work)
            except BuildError as error:
                failures.append(str(error))
                continue
            page = assets.localize_page(target.read_text(encoding="utf-8"), lesson.page)
            page = relink_lessons(page, lesson.page, {other.source.name for other in lessons})
            assets.check_page_refs(page, lesson.page, staging)
            # No code in the page (the export leaves it out, and with it marimo's "Run or Edit" banner):
            # our own line says how to run it live and links the source, copied beside the page.
            page = pages.add_banner(pages.freeze_controls(page), lesson.source.name, LIVE_WORKBOOK_LINK)
            page = add_file_note(page, lesson.page)
            target.write_text(page, encoding="utf-8")
            shutil.copyfile(lesson.source, staging / lesson.source.name)
            titled.append(lesson if lesson.description else Lesson(lesson.source, rendered_title(page) or lesson.title))
            reports.append(PageReport(lesson.page, titled[-1].title, len(page.encode("utf-8")), seconds))
        if failures:
            raise BuildError(f"{len(failures)} of {len(lessons)} lessons failed to export; the site was not "
                             "written:\n\n" + "\n\n".join(failures))
        index = index_page(titled)
        (staging / "index.html").write_text(index, encoding="utf-8")
        (staging / SITE_MARKER).write_text("Built by python -m memmath_site build; safe to delete and rebuild.\n")
        reports.insert(0, PageReport("index.html", "Index", len(index.encode("utf-8")), 0.0))
        _normal_permissions(staging)
        _check_replaceable(out_dir)  # again: the folder may have changed during the export
        _swap_in(out_dir, staging)
    log(size_table(reports, asset_bytes))
    return reports


def _copy_notebooks(notebooks_dir: Path, copy: Path) -> Path:
    """The notebooks folder's regular files (lessons, CSS, notes) copied to `copy`; links and marimo's
    own folders are left out."""
    copy.mkdir()
    for entry in notebooks_dir.iterdir():
        if entry.is_file() and not entry.is_symlink():
            shutil.copyfile(entry, copy / entry.name)
    return copy


def _normal_permissions(root: Path) -> None:
    """Folders 0755 and files 0644: readable by a web server running as another user (mkdtemp makes 0700)."""
    root.chmod(0o755)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def _swap_in(out_dir: Path, staging: Path) -> None:
    """The built site (staging) in out_dir's place: copied into a hidden sibling of out_dir, then renamed.

    Until the rename, out_dir is left as it was; an interruption (Ctrl-C, a full disk) removes the sibling. The
    earlier build is renamed aside just before and deleted after. A folder that cannot be renamed (a mount
    point, a bind mount) or whose parent cannot be written is rebuilt in place instead (_replace_contents).
    """
    parent = out_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(out_dir):
        _replace_contents(out_dir, staging)
        return
    try:
        new = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=parent))
    except OSError:  # the parent is not ours to write in
        _replace_contents(out_dir, staging)
        return
    old, in_place = None, False
    try:
        shutil.copytree(staging, new, symlinks=True, dirs_exist_ok=True)
        new.chmod(0o755)
        _check_replaceable(out_dir)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=parent))
            try:
                os.replace(out_dir, old)  # over the empty folder just made for it
            except OSError:  # a folder that cannot be renamed (a bind mount, a busy folder)
                in_place = True
            else:
                try:
                    os.replace(new, out_dir)
                except BaseException:
                    os.replace(old, out_dir)  # the earlier build back in its place
                    raise
        else:
            os.replace(new, out_dir)
    finally:
        for leftover in (new, old):
            if leftover is not None and leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
    if in_place:
        _replace_contents(out_dir, staging)


def _replace_contents(out_dir: Path, staging: Path) -> None:
    """Empty out_dir (new, empty or an earlier build) without following links, then copy the site in.

    Its marker is written first and kept to the end, so a build stopped part-way leaves a folder that the
    next build still takes for its own (and replaces).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o755)
    shutil.copyfile(staging / SITE_MARKER, out_dir / SITE_MARKER)
    (out_dir / SITE_MARKER).chmod(0o644)
    for entry in out_dir.iterdir():
        if entry.name == SITE_MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.copytree(staging, out_dir, symlinks=True, dirs_exist_ok=True)


def _check_replaceable(out_dir: Path) -> None:
    if out_dir.is_symlink():
        raise BuildError(f"{out_dir} is a symbolic link; give the folder itself (the build does not follow links)")
    marker = out_dir / SITE_MARKER
    earlier_build = marker.is_file() and not marker.is_symlink()
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not earlier_build)):
        raise BuildError(f"{out_dir} exists and is not a site this command built (no {SITE_MARKER} in it); "
                         "pick an empty or new folder")


def file_note(page_name: str | None = None) -> str:
    """A note shown only on a page opened from disk (file://): plain HTML, hidden until an inline classic
    script (which runs from file:// too, unlike marimo's ES modules) finds location.protocol "file:".

    page_name: the lesson page it sits on (its address once served); None for the index.
    """
    address = f"http://localhost:8000/{html.escape(page_name or '')}"
    what = ("This page was opened from disk (a <code>file://</code> address), where browsers do not run the "
            "scripts that draw the lesson." if page_name else
            "This page was opened from disk (a <code>file://</code> address); the lessons it links to need a web "
            "server, because browsers do not run the scripts that draw them from disk.")
    return (f'<p {FILE_NOTE_ATTRIBUTE}="1" hidden style="margin: 0; padding: .75rem 1rem; background: #fff4e5; '
            f'border-bottom: 1px solid #f0c36d; color: #1f2328; font: 15px/1.5 system-ui, -apple-system, sans-serif;">'
            f'<strong>Serve this folder to see the lessons.</strong> {what} In a terminal, in the folder that holds '
            f'this page, run <code>python -m http.server 8000</code>, then open '
            f'<a href="{address}">{address}</a>.</p>'
            '<script>if (location.protocol === "file:") document.currentScript.previousElementSibling.hidden = false;'
            '</script>')


def add_file_note(page_html: str, page_name: str) -> str:
    """A lesson page with file_note() just under our banner (pages.add_banner), else at the top of its body."""
    match = (re.search(rf"<div {pages.BANNER_ATTRIBUTE}=[^>]*>.*?</div>", page_html, re.S)
             or re.search(r"<body[^>]*>", page_html))
    if not match:
        raise BuildError(f"{page_name} has no <body>: marimo's export format changed")
    return page_html[:match.end()] + file_note(page_name) + page_html[match.end():]


def size_table(reports: list[PageReport], asset_bytes: int) -> str:
    """Page sizes as a text table (the shared frontend counted once, on its own line)."""
    width = max(len(r.page) for r in reports)
    lines = [f"{'page':<{width}}  {'HTML':>9}  export", f"{'-' * width}  {'-' * 9}  ------"]
    lines += [f"{r.page:<{width}}  {r.html_bytes / 1000:>6.1f} kB  {r.export_seconds:5.1f} s" if r.export_seconds
              else f"{r.page:<{width}}  {r.html_bytes / 1000:>6.1f} kB" for r in reports]
    lines.append(f"{assets.ASSET_DIR + '/':<{width}}  {asset_bytes / 1e6:>6.1f} MB  (marimo's frontend, shared by every page; "
                 "a browser loads only the part a page uses)")
    return "\n".join(lines)


def index_page(lessons: list[Lesson]) -> str:
    """The site's front page: the lessons in order, and how to run the live workbook."""
    # Numbered as the files are (00_start_here.py is lesson 0).
    items = "\n".join(f'      <li value="{int(lesson.source.name[:2])}"><a href="{html.escape(lesson.page)}">'
                      f'{html.escape(lesson.title)}</a>'
                      + (f'<br><span class="about">{html.escape(lesson.description)}</span>' if lesson.description else "")
                      + '</li>' for lesson in lessons)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>memmath: the memory math of training neural networks</title>
  <link rel="icon" href="./{assets.ASSET_DIR}/favicon.ico">
  <style>
    body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 46rem; margin: 2.5rem auto;
           padding: 0 1.25rem; line-height: 1.55; color: #1f2328; }}
    h1 {{ font-size: 1.9rem; margin-bottom: .25rem; }}
    ol {{ padding-left: 1.4rem; }} li {{ margin: .35rem 0; }}
    a {{ color: #0b57d0; }}
    code, pre {{ font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .92em; }}
    pre {{ background: #f4f5f7; padding: .75rem 1rem; border-radius: 6px; overflow-x: auto; }}
    .note, .about {{ color: #57606a; }} .about {{ font-size: .95em; }}
  </style>
</head>
<body>
  {file_note()}
  <h1>memmath</h1>
  <p class="note">The memory math of training neural networks: where the gigabytes go, lesson by lesson.</p>
  <h2>Lessons</h2>
  <ol>
{items}
  </ol>
  <h2 id="run-live">Run the live workbook</h2>
  <p>These pages are a snapshot. The inputs under the charts work here; the other sliders and menus
  need Python behind them, and are frozen. Each page links its lesson's source file. From a copy of the workbook's repository (Python 3.11):</p>
  <pre><code>{html.escape(SETUP_COMMAND)}
{html.escape(LIVE_COMMAND)}</code></pre>
  <p>The repository's README.md says more.</p>
  <h2 id="teaching">Teaching a class</h2>
  <p>A path for one session of about 45 minutes: lesson 0 (the question, and one run's answer), 1 (bytes per
  parameter), 2 (gradients, optimizer states and the optimizer's temporaries), 3 (activations and the step's
  peak) and 8 (the planner on the learners' own model and card). Lessons 4 to 7 and 11 are for a second
  session; 9 is the page to keep open beside the others, and 10 holds problems that chain the lessons.</p>
  <ul>
    <li><b>Any number of learners:</b> these static pages, on any web host. Nothing runs per learner; the inputs
    under the charts work, the other controls are frozen.</li>
    <li><b>Live, on your network:</b> one <code>marimo run</code> with a token (the README's command). Its kernels
    share one core, about 20 slider moves a second: measured on lesson 8, 10 learners got a median move of about
    50 ms and 20 learners about 100 ms; at 30 the moves queue (a median of 300 to 700 ms). Have the class open lesson 8 a few at a time, or before the class starts: opening it runs the
    whole lesson for each learner. Use Python 3.11.8 or later.</li>
    <li><b>More learners live:</b> several <code>marimo run</code> processes, each under its own path, behind a
    proxy that authenticates (the README, "Serving a class").</li>
    <li><b>What to say about the verdicts:</b> every page judges a run the same way: it fits when what the card must
    hold plus 5% of it stays within the card's memory less the CUDA context; "short by" always counts those 5%.
    Lesson 8's fold "What a real GPU adds" says what a real card holds beyond that.</li>
  </ul>
</body>
</html>
"""
