"""Driving the workbook in Chromium, for the browser tests and the speed benchmark (needs playwright).

- `find_chromium()`, `launch(playwright)`: Debian's Chromium (no browser download works here).
- `MarimoRun(notebook)`: `marimo run` on a free loopback port, stopped by its own process group.
- `LivePage(page)`: follows marimo's websocket, so it knows when a run has finished and which
  cells failed (`marimo run` hides error output from the page, so the page alone cannot tell),
  plus console errors, and snapshots of what is shown (text, also inside shadow roots, and
  a fingerprint of every chart).
- `StaticServer(folder)`: a static file server on loopback for the built site.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from memmath_site.thumbnails import QuietServer

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
SLIDER = "[role=slider]"  # marimo's sliders (inside shadow roots; Playwright's CSS engine pierces them)

# Records when the notebook's output last changed and when a key went down (performance.now() ms).
# Only changes inside a cell's output area count (not marimo's favicon, which blinks while cells
# run, nor the tooltip of the control being moved); shadow roots are observed as they are made.
_INIT_SCRIPT = """
(() => {
  const state = window.__memmath = {lastMutation: 0, keyAt: 0, keyHost: null};
  const up = (n) => n.parentNode || n.host || null;
  const within = (n, test) => { for (let e = n; e; e = up(e)) if (test(e)) return e; return null; };
  const counts = (n) => within(n, e => e.classList && e.classList.contains("output-area"))
      && !(state.keyHost && within(n, e => e === state.keyHost));
  const observer = new MutationObserver((records) => {
    if (records.some(r => counts(r.target))) state.lastMutation = performance.now();
  });
  const options = {subtree: true, childList: true, attributes: true, characterData: true};
  const attachShadow = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    const root = attachShadow.call(this, init);
    observer.observe(root, options);
    return root;
  };
  observer.observe(document, options);
  window.addEventListener("keydown", (event) => {
    state.keyAt = performance.now();
    state.keyHost = within(event.composedPath()[0], e => e.tagName === "MARIMO-UI-ELEMENT");
  }, true);
})();
"""

# Every document and open shadow root of the page (marimo puts some outputs, and charts inside
# layouts, into shadow roots).
_ROOTS_JS = """
const roots = () => {
  const found = [document];
  for (let i = 0; i < found.length; i++)
    for (const el of found[i].querySelectorAll("*")) if (el.shadowRoot) found.push(el.shadowRoot);
  return found;
};
const charts = () => roots().flatMap(r => [...r.querySelectorAll(".vega-embed")]);
"""

# What the page shows: visible text (light DOM and shadow roots) and a fingerprint of each drawn chart.
_SNAPSHOT_SCRIPT = "() => {" + _ROOTS_JS + """
  const hash = (s) => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  const app = document.querySelector("#App") || document.body;
  // Shadow roots hold <style> text too: take the rendered text of their other elements.
  const shown = (r) => [...r.children].filter(e => !["STYLE", "SCRIPT", "LINK"].includes(e.tagName))
      .map(e => e.innerText || "").join("\\n");
  const texts = [app.innerText, ...roots().slice(1).map(shown)];
  const prints = charts().map(e => {
    const marks = e.querySelector("canvas.marks, svg.marks");
    if (!marks) return "not drawn";
    return marks.tagName === "CANVAS" ? "c" + hash(marks.toDataURL()) : "s" + hash(marks.outerHTML);
  });
  return {text: texts.join("\\n"), charts: prints, vega: prints.length,
          drawn: prints.filter(p => p !== "not drawn").length};
}
"""

_STATE_SCRIPT = "() => {" + _ROOTS_JS + """
  return [performance.now(), window.__memmath.lastMutation,
          charts().every(e => e.querySelector("canvas.marks, svg.marks"))];
}
"""


# Every live chart (memmath_lessons.live_chart) on the page, in page order: an id that stays with its element
# (so a chart drawn into a new element gets a new id), how often it was embedded and updated in place,
# how many rows it holds, and a fingerprint of its drawn marks.
_LIVE_CHARTS_SCRIPT = "() => {" + _ROOTS_JS + """
  const hash = (s) => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  window.__memmathLiveIds = window.__memmathLiveIds || 0;
  return roots().flatMap(r => [...r.querySelectorAll(".memmath-live-chart")]).map(e => {
    if (!e.__memmathId) e.__memmathId = ++window.__memmathLiveIds;
    const marks = e.querySelector("canvas.marks, svg.marks");
    return {id: e.__memmathId, embeds: Number(e.dataset.embeds || 0), updates: Number(e.dataset.updates || 0),
            rows: Number(e.dataset.rows || 0),
            print: !marks ? null : marks.tagName === "CANVAS" ? "c" + hash(marks.toDataURL()) : "s" + hash(marks.outerHTML)};
  });
}
"""


def live_charts(page) -> list[dict]:
    """The live charts on the page: [{id, embeds, updates, rows, print}, ...] (see _LIVE_CHARTS_SCRIPT)."""
    return page.evaluate(_LIVE_CHARTS_SCRIPT)


# Every live html (memmath_lessons.live_html) on the page, in page order: an id that stays with its element, how
# often its contents were replaced, and its text.
_LIVE_HTMLS_SCRIPT = "() => {" + _ROOTS_JS + """
  window.__memmathLiveIds = window.__memmathLiveIds || 0;
  return roots().flatMap(r => [...r.querySelectorAll(".memmath-live-html")]).map(e => {
    if (!e.__memmathId) e.__memmathId = ++window.__memmathLiveIds;
    return {id: e.__memmathId, updates: Number(e.dataset.updates || 0), text: e.textContent};
  });
}
"""


def live_htmls(page) -> list[dict]:
    """The live htmls on the page (also in closed folds): [{id, updates, text}, ...] (see _LIVE_HTMLS_SCRIPT)."""
    return page.evaluate(_LIVE_HTMLS_SCRIPT)


def find_chromium() -> str | None:
    """The Chromium to drive: $MEMMATH_CHROMIUM if set, else /usr/bin/chromium or `chromium` on PATH (None if none)."""
    chosen = os.environ.get("MEMMATH_CHROMIUM")
    for candidate in (chosen,) if chosen else ("/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def launch(playwright):
    """One headless Chromium (Debian's) for a whole session."""
    executable = find_chromium()
    if executable is None:
        raise RuntimeError("no Chromium found (install Debian's chromium package or set MEMMATH_CHROMIUM)")
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)


def free_port() -> int:
    """A loopback port in 20000-40000 that nothing listens on now."""
    for _ in range(200):
        port = random.randint(20000, 40000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-40000")


def wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before listening on port {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {timeout_s:.0f} s")


class MarimoRun:
    """`marimo run NOTEBOOK --headless --no-token` on a free loopback port (a context manager)."""

    def __init__(self, notebook: Path, *, extra_args: tuple[str, ...] = (), startup_timeout_s: float = 60):
        self.notebook = Path(notebook)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.extra_args = extra_args
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def __enter__(self) -> "MarimoRun":
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.pop("MEMMATH_STATIC_EXPORT", None)
        command = [sys.executable, "-m", "marimo", "run", str(self.notebook), "--headless", "--no-token",
                   "--host", "127.0.0.1", "-p", str(self.port), "--no-sandbox", *self.extra_args]
        # marimo's log goes to a file (a pipe nobody reads would fill up and stall the server).
        self.log = tempfile.TemporaryFile()
        self.started_at = time.time()
        self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_port(self.port, self.startup_timeout_s, self.proc)
        except Exception as error:
            self.stop()
            raise RuntimeError(f"marimo run {self.notebook} did not start: {error}\n{self.log_tail()}") from error
        return self

    def log_tail(self, lines: int = 20) -> str:
        """The last lines marimo printed."""
        self.log.seek(0)
        return "\n".join(self.log.read().decode("utf-8", "replace").splitlines()[-lines:])

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # the group this object started (start_new_session)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __del__(self):
        log = getattr(self, "log", None)
        if log is not None:
            log.close()


@dataclass
class Shown:
    """What a page shows: its text and a fingerprint per chart."""

    text: str
    charts: list = field(default_factory=list)
    vega: int = 0
    drawn: int = 0

    def same_as(self, other: "Shown") -> bool:
        return self.text == other.text and self.charts == other.charts


class LivePage:
    """A Playwright page on a marimo app, following its websocket and console."""

    def __init__(self, page):
        self.page = page
        self.completed_runs = 0
        self.cell_errors: list[str] = []
        self.console_errors: list[str] = []
        self.cell_order: list[str] = []  # cell ids in notebook order (from kernel-ready)
        self.cell_seconds: dict[str, float] = {}  # each cell's last run time, from the kernel's timestamps
        self.cell_runs: list[tuple[str, float]] = []  # (cell id, seconds) for every cell run, in order
        self._running_since: dict[str, float] = {}
        page.add_init_script(_INIT_SCRIPT)
        page.on("websocket", self._on_websocket)
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))

    def _on_websocket(self, ws) -> None:
        ws.on("framereceived", self._on_frame)

    def _on_frame(self, payload) -> None:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        if not any(op in text[:40] for op in ('"cell-op"', '"completed-run"', '"kernel-ready"')):
            return  # the only messages that matter here (the others can be large)
        try:
            message = json.loads(text)
        except ValueError:
            return
        op, data = message.get("op"), message.get("data") or {}
        if op == "completed-run":
            self.completed_runs += 1
        elif op == "kernel-ready":
            self.cell_order = list(data.get("cell_ids") or [])
        elif op == "cell-op":
            output, cell, status = data.get("output") or {}, data.get("cell_id"), data.get("status")
            if output.get("channel") == "marimo-error":
                self.cell_errors.append(f"cell {cell}: {json.dumps(output.get('data'))[:400]}")
            if status == "running" and data.get("timestamp"):
                self._running_since[cell] = data["timestamp"]
            elif status == "idle" and cell in self._running_since and data.get("timestamp"):
                self.cell_seconds[cell] = data["timestamp"] - self._running_since.pop(cell)
                self.cell_runs.append((cell, self.cell_seconds[cell]))

    def cell_name(self, cell: str) -> str:
        """"cell N of M" for a cell id (marimo run does not send code, so cells go by position)."""
        if cell in self.cell_order:
            return f"cell {self.cell_order.index(cell) + 1} of {len(self.cell_order)}"
        return f"cell {cell}"

    def slowest_cell(self) -> tuple[str, float] | None:
        """("cell N of M", seconds) for the cell whose last run took longest, or None."""
        if not self.cell_seconds:
            return None
        cell, seconds = max(self.cell_seconds.items(), key=lambda item: item[1])
        return self.cell_name(cell), seconds

    def open(self, url: str, timeout_s: float = 90) -> None:
        """Load the app and wait until its first run has finished and the page has settled."""
        self.page.goto(url)
        self.wait_settled(0, timeout_s)

    def wait_settled(self, runs_before: int, timeout_s: float = 60, quiet_ms: float = 300) -> float:
        """Wait for a run after `runs_before` to finish, every chart to be drawn, and no DOM change for quiet_ms.

        Returns the page's performance.now() of its last DOM change (ms).
        """
        deadline = time.monotonic() + timeout_s
        while self.completed_runs <= runs_before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"marimo did not finish a run within {timeout_s:.0f} s")
            self.page.wait_for_timeout(25)
        return self.wait_quiet(deadline, quiet_ms)

    def wait_quiet(self, deadline: float, quiet_ms: float = 300) -> float:
        previous = None
        while True:
            now, last, drawn = self.page.evaluate(_STATE_SCRIPT)
            charts = self.snapshot().charts if drawn and now - last >= quiet_ms else None
            if charts is not None and charts == previous:
                return last
            previous = charts
            if time.monotonic() > deadline:
                raise TimeoutError("the page kept changing (or a chart never drew)")
            self.page.wait_for_timeout(50 if charts is None else quiet_ms / 2)

    def snapshot(self) -> Shown:
        return Shown(**self.page.evaluate(_SNAPSHOT_SCRIPT))

    def sliders(self):
        return self.page.locator(SLIDER)

    def slider_label(self, index: int) -> str:
        """The label shown beside slider `index` (a marimo slider's <marimo-slider data-label>, a step slider's
        aria-label)."""
        return self.sliders().nth(index).evaluate("""e => {
            if (e.getAttribute('aria-label')) return e.getAttribute('aria-label');
            let node = e;
            while (node && !(node.host && node.host.hasAttribute && node.host.hasAttribute('data-label')))
                node = node.parentNode || node.host;
            const raw = node ? node.host.getAttribute('data-label') : '""';
            const div = document.createElement('div'); div.innerHTML = JSON.parse(raw || '""');
            return div.textContent.trim();
        }""")

    def press_on_slider(self, index: int, key: str, timeout_s: float = 60) -> tuple[bool, float]:
        """Focus slider `index`, press `key`, wait for the app to settle.

        Returns (whether the slider's value changed, ms from the key press to the last DOM change).
        """
        slider = self.sliders().nth(index)
        before = slider.get_attribute("aria-valuenow")
        runs = self.completed_runs
        slider.focus()
        self.page.keyboard.press(key)
        self.page.wait_for_timeout(30)
        if slider.get_attribute("aria-valuenow") == before:
            return False, 0.0
        last = self.wait_settled(runs, timeout_s)
        key_at = self.page.evaluate("() => window.__memmath.keyAt")
        return True, last - key_at


class StaticServer:
    """Serve a folder on 127.0.0.1 from a thread (a context manager), as `python -m http.server` would."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> "StaticServer":
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        handler = functools.partial(Quiet, directory=str(self.folder))
        self.server = QuietServer(("127.0.0.1", self.port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


# The bound inputs of Vega-Lite charts (alt.param(bind=...)): vega-embed puts them in .vega-bindings.
BOUND_INPUTS = ".vega-bindings input[type=range], .vega-bindings select, .vega-bindings .vega-bind-radio"

_CHART_TEXT_SCRIPT = """
(control) => {
  const embed = control.closest(".vega-embed");
  const marks = embed && embed.querySelector("svg.marks, canvas.marks");
  if (!marks) return null;
  const hash = (s) => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  return {print: marks.tagName === "CANVAS" ? "c" + hash(marks.toDataURL()) : "s" + hash(marks.outerHTML),
          title: [...embed.querySelectorAll(".role-title-text")].map(t => t.textContent).join(" | "),
          text: [...embed.querySelectorAll(".mark-text.role-mark text, .role-mark text")].map(t => t.textContent),
          marks: embed.querySelectorAll(".role-mark > *, .role-mark path, .role-mark text").length};
}
"""


def bound_input_ends(control) -> list:
    """The two ends of a bound input, as values to pass to `set_bound_input`."""
    kind = control.evaluate("e => e.tagName === 'SELECT' ? 'select' : e.type === 'range' ? 'range' : 'radio'")
    if kind == "range":
        return [control.get_attribute("min"), control.get_attribute("max")]
    if kind == "select":
        values = control.evaluate("e => [...e.options].map(o => o.value)")
        return [values[0], values[-1]]
    values = control.evaluate("e => [...e.querySelectorAll('input[type=radio]')].map(o => o.value)")
    return [values[0], values[-1]]


def bound_input_value(control) -> str:
    """The value a bound input holds now (the checked one, for radio buttons)."""
    return control.evaluate("""e => e.matches('.vega-bind-radio')
        ? (e.querySelector('input:checked') || {}).value : e.value""")


def set_bound_input(control, value: str) -> None:
    """Set a bound input as a learner would (the events vega listens to), by value."""
    control.evaluate("""(e, value) => {
      const input = e.matches('.vega-bind-radio') ? e.querySelector(`input[value="${CSS.escape(value)}"]`) : e;
      if (input.type === 'radio') { input.click(); return; }
      input.value = value;
      input.dispatchEvent(new Event('input', {bubbles: true}));
      input.dispatchEvent(new Event('change', {bubbles: true}));
    }""", value)


def chart_of(control, page, previous: dict | None = None, timeout_ms: int = 3000) -> dict | None:
    """The drawn state of the chart a bound input belongs to; waits (up to timeout_ms) for it to differ from previous."""
    deadline = time.monotonic() + timeout_ms / 1000
    state = control.evaluate(_CHART_TEXT_SCRIPT)
    while previous is not None and state == previous and time.monotonic() < deadline:
        page.wait_for_timeout(50)
        state = control.evaluate(_CHART_TEXT_SCRIPT)
    return state
