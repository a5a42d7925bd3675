"""A class served from one machine: many learners on one `marimo run`, on the loopback address only.

    .venv/bin/python benchmarks/class_load.py [--levels 10 20 30] [--moves 10] [--pause 1.0] [--lesson 8]

For each level (10, 20, 30 concurrent learners) a fresh `marimo run notebooks --include-code` is started
on a free port of 127.0.0.1 (tests/browser.py's MarimoRun: the command README gives a teacher, without
`--host 0.0.0.0`), the learners use it, and the server is stopped.

What one learner does: it is a client speaking marimo's own protocol, what the page's JavaScript does
over the wire, without drawing anything:

1. open the lesson as a browser's first visit does: GET `/?file=08_planner.py` (the page carries the
   server token that marimo's POST endpoints ask for), GET every asset the page links (marimo's
   frontend, about 200 files, over 6 keep-alive connections as a browser opens), then open the
   websocket `/ws?file=...&session_id=s_xxxxxx` with a session id of its own: marimo starts a kernel
   for that session and runs the whole lesson, streaming every cell's output. The lesson is loaded
   when its first `completed-run` message arrives.
2. read the marimo sliders (`<marimo-slider>` with its object id, start, stop and step) out of the
   cells' HTML, as the page does;
3. make `--moves` moves, each after a pause of `--pause` s (+-50%, seeded per learner): pick a slider at
   random and move it one step, as one arrow-key press does (the way back at an end): POST
   `/api/kernel/set_ui_element_value` with the `Marimo-Session-Id` header, exactly the request the page
   sends. A move is timed from that request to the `completed-run` message that ends the run it
   started: every cell it re-ran has sent its new output (the live charts and tables their new rows)
   to the learner's socket. The time to the first new output is kept too. A learner waits for one
   move to finish before its next pause, as a person reads the answer before moving again.
4. when every learner has made its moves, each makes one more (the roll call): a session is held if
   that move is answered, so "held" counts the sessions alive at the end, all at once.

What it does not include is the page drawing the answer in the learner's browser, on the learner's own
machine in a class (lesson_speed.py measures a whole move, drawing included, for one learner alone).
With `--browser` (the default when Chromium is found) one of the learners is a real Chromium page
(tests/browser.py's LivePage: focus + arrow key on `[role=slider]`, timed from the key press to the
page's last change) beside the protocol clients, to show the whole experience under the class's load;
30 Chromium pages on this 2-core machine would measure Chromium, not the server.

With `--servers K` the learners are spread over K `marimo run` processes on this machine (learner n
on process n % K), as an authenticating proxy would send each group of a class to a process of its
own; their memory and CPU are summed.

The lessons: 8 (the planner, default) re-plans the whole run on every move (the planner, its verdict,
the changes that make it fit), the most kernel work a slider does in the workbook, so it is the worst
case; 1 (`--lesson 1`) is the lesson a class opens first. Learner 0 (the teacher) opens the lesson
alone before the class joins, so the memory of the first session (the imports every later session
shares) is told apart from what each further session adds.

Per level it prints: sessions held at the end, lost sessions (a websocket closed, a load or a move that
timed out), errors (an HTTP status other than 200, a cell's error output, a run that did not succeed,
error lines in marimo's log), the lesson's load time, move latency p50/p95/max, the server's RSS
(psutil if installed, else /proc/<pid>/status; its child processes included): before any session,
after the first, per further session, and after the moves (marimo's run mode gives each session a
kernel thread in the one server process, so the RSS is the whole cost; a child process, which
`--sandbox` would start per session, is counted and named), the CPU the server used while the class
moved sliders (in cores, and per move), and the load averages before and after. The machine is
shared: before each level it waits (at most `--max-load-wait` s in all) for the 1-minute load average to fall below
`--max-load`, and reports it.

Bounded and self-stopping: the learners, the moves and every wait are counted; a level that does not
fit in what is left of `--time-limit` (600 s of measuring, load waits not counted) is skipped, and a
watchdog kills the servers and exits if the limit is passed by 30 s. No assertion: speed is reported
here, never tested.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import importlib.util
import json
import os
import random
import re
import statistics
import string
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the browser helpers live with the tests

from browser import MarimoRun, find_chromium  # noqa: E402

LESSONS = {"1": "01_weights_and_formats.py", "8": "08_planner.py"}
ASSET_CONNECTIONS = 6  # what a browser opens to one host
GRACE_S = 30
SERVERS: list[MarimoRun] = []  # the servers this run started, for the watchdog

_SLIDER = re.compile(r"<marimo-ui-element object-id='([^']+)'[^>]*>\s*<marimo-slider([^>]*)>")
_ATTRIBUTE = re.compile(r"data-(start|stop|step|initial-value)='([^']*)'")
_OP = re.compile(r'\{"op":\s*"([^"]+)"')
_ASSET = re.compile(r'(?:src|href)="\./([^"]+)"')


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def rss_bytes(pid: int) -> tuple[int, int]:
    """(RSS bytes of the process and its children, how many child processes it has)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        process = psutil.Process(pid)
        children = process.children(recursive=True)
        total = process.memory_info().rss
        for child in children:
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total, len(children)
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process (and its children, with psutil)."""
    try:
        import psutil
    except ImportError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    process = psutil.Process(pid)
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


class Http:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1 (a browser keeps its connections too)."""

    def __init__(self, port: int):
        self.port = port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, headers: dict | None = None,
                      body: bytes = b"") -> tuple[int, bytes]:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        message = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(message)
            await self.writer.drain()
            status_line = await self.reader.readline()
            if not status_line:  # the server closed the idle connection: once more, on a new one
                await self.close()
                if attempt:
                    raise ConnectionError(f"{method} {path}: the server closed the connection")
                continue
            response_headers = {}
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                response_headers[name.strip().lower()] = value.strip()
            if response_headers.get("transfer-encoding", "").lower() == "chunked":
                content = b""
                while (size := int((await self.reader.readline()).split(b";")[0], 16)):
                    content += await self.reader.readexactly(size)
                    await self.reader.readline()
                await self.reader.readline()
            else:
                content = await self.reader.readexactly(int(response_headers.get("content-length", 0)))
            if response_headers.get("connection", "").lower() == "close":
                await self.close()
            return int(status_line.split()[1]), content
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None


@dataclass
class Slider:
    object_id: str
    start: float
    stop: float
    step: float
    value: float


@dataclass
class Move:
    ms: float  # request to the completed-run message
    first_output_ms: float | None  # request to the first new output (a cell's, or a live chart's or table's)


class Learner:
    """One learner's session over marimo's protocol (see the module's docstring)."""

    def __init__(self, number: int, port: int, file: str, seed: int, timeout_s: float):
        self.number = number
        self.port = port
        self.file = file
        self.rng = random.Random(seed * 1000 + number)
        self.timeout_s = timeout_s
        self.session_id = "s_" + "".join(self.rng.choices(string.ascii_lowercase + string.digits, k=6))
        self.http = Http(port)
        self.ws = None
        self.reader_task = None
        self.token = ""
        self.sliders: dict[str, list[Slider]] = {}  # cell id -> the sliders its output shows now
        self.directions: dict[str, int] = {}
        self.runs = 0
        self.run_done = asyncio.Event()
        self.last_run_at = 0.0
        self.first_output_at: float | None = None
        self.load_s: float | None = None
        self.moves: list[Move] = []
        self.errors: list[str] = []
        self.lost: str | None = None
        self.closing = False

    # --- the socket -------------------------------------------------------------------------------------
    def _on_message(self, text: str) -> None:
        match = _OP.match(text)
        op = match.group(1) if match else ""
        now = time.perf_counter()
        if op == "completed-run":
            data = json.loads(text).get("data") or {}
            if data.get("outcome") not in (None, "succeeded"):
                self.errors.append(f"run {data.get('outcome')}: {str(data.get('error'))[:200]}")
            self.runs += 1
            self.last_run_at = now
            self.run_done.set()
        elif op == "cell-op":
            has_output = '"output":{' in text or '"output": {' in text
            if has_output and self.first_output_at is None:
                self.first_output_at = now
            if has_output and ("marimo-slider" in text or "marimo-error" in text or '"text/html"' in text):
                data = json.loads(text).get("data") or {}
                output = data.get("output") or {}
                if output.get("channel") == "marimo-error":
                    self.errors.append(f"cell {data.get('cell_id')}: {json.dumps(output.get('data'))[:200]}")
                elif output.get("mimetype") == "text/html":
                    self.sliders[data.get("cell_id")] = self._parse_sliders(str(output.get("data") or ""))
        elif op == "remove-ui-elements":
            self.sliders.pop((json.loads(text).get("data") or {}).get("cell_id"), None)
        elif op == "model-lifecycle":
            if self.first_output_at is None and '"update"' in text[:200]:
                self.first_output_at = now
        elif op in ("kernel-startup-error", "alert", "banner") and "error" in text.lower():
            self.errors.append(f"{op}: {text[:200]}")

    @staticmethod
    def _parse_sliders(markup: str) -> list[Slider]:
        found = []
        for match in _SLIDER.finditer(markup):
            attributes = {name: json.loads(html.unescape(value)) for name, value in _ATTRIBUTE.findall(match.group(2))}
            if "start" not in attributes or "stop" not in attributes:
                continue
            start, stop = attributes["start"], attributes["stop"]
            step = attributes.get("step") or 1
            if stop > start:
                found.append(Slider(match.group(1), start, stop, step, attributes.get("initial-value", start)))
        return found

    async def _read(self) -> None:
        import websockets

        try:
            async for text in self.ws:
                self._on_message(text if isinstance(text, str) else text.decode("utf-8", "replace"))
        except websockets.ConnectionClosed:
            pass
        finally:
            if not self.closing and self.lost is None:
                self.lost = f"websocket closed by the server ({self.ws.close_code} {self.ws.close_reason!r})"
            self.run_done.set()

    async def _wait_run(self, runs_before: int, what: str) -> None:
        deadline = time.perf_counter() + self.timeout_s
        while self.runs <= runs_before:
            if self.lost:
                raise ConnectionError(self.lost)
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"{what}: no completed run within {self.timeout_s:.0f} s")
            self.run_done.clear()
            try:
                await asyncio.wait_for(self.run_done.wait(), left)
            except asyncio.TimeoutError:
                pass

    # --- what the learner does --------------------------------------------------------------------------
    async def open(self) -> None:
        import websockets

        started = time.perf_counter()
        status, page = await self.http.request("GET", f"/?file={self.file}")
        if status != 200:
            raise RuntimeError(f"GET the lesson: HTTP {status}")
        text = page.decode("utf-8", "replace")
        token = re.search(r'marimo-server-token data-token="([^"]+)"', text)
        if token is None:
            raise RuntimeError("the lesson's page carries no server token")
        self.token = token.group(1)
        assets = sorted(set(_ASSET.findall(text)))
        connections = [Http(self.port) for _ in range(ASSET_CONNECTIONS)]

        async def fetch(connection: Http, paths: list[str]) -> None:
            for path in paths:
                status, _ = await connection.request("GET", "/" + path)
                if status != 200:
                    self.errors.append(f"GET /{path}: HTTP {status}")
            await connection.close()

        await asyncio.gather(*(fetch(c, assets[i::ASSET_CONNECTIONS]) for i, c in enumerate(connections)))
        self.ws = await websockets.connect(
            f"ws://127.0.0.1:{self.port}/ws?file={self.file}&session_id={self.session_id}",
            max_size=None, ping_interval=None, open_timeout=self.timeout_s, close_timeout=5)
        self.reader_task = asyncio.create_task(self._read())
        await self._wait_run(0, "loading the lesson")
        self.load_s = time.perf_counter() - started

    async def move(self) -> Move:
        sliders = [slider for shown in self.sliders.values() for slider in shown]
        if not sliders:
            raise RuntimeError("the lesson shows no marimo slider")
        slider = self.rng.choice(sliders)
        direction = self.directions.get(slider.object_id) or self.rng.choice((1, -1))
        index = round((slider.value - slider.start) / slider.step)
        last = round((slider.stop - slider.start) / slider.step)
        if not 0 <= index + direction <= last:
            direction = -direction
        self.directions[slider.object_id] = direction
        value = slider.start + (index + direction) * slider.step
        if isinstance(slider.start, int) and isinstance(slider.step, int):
            value = int(value)
        body = json.dumps({"objectIds": [slider.object_id], "values": [value]}).encode()
        runs, self.first_output_at = self.runs, None
        started = time.perf_counter()
        status, answer = await self.http.request(
            "POST", "/api/kernel/set_ui_element_value", body=body,
            headers={"Content-Type": "application/json", "Marimo-Session-Id": self.session_id,
                     "Marimo-Server-Token": self.token})
        if status != 200:
            raise RuntimeError(f"set_ui_element_value: HTTP {status} {answer[:200]!r}")
        await self._wait_run(runs, "a slider move")
        slider.value = value
        first = self.first_output_at
        return Move(1000 * (self.last_run_at - started), None if first is None else 1000 * (first - started))

    async def make_moves(self, count: int, pause_s: float) -> None:
        for _ in range(count):
            await asyncio.sleep(pause_s * self.rng.uniform(0.5, 1.5))
            self.moves.append(await self.move())

    async def close(self) -> None:
        self.closing = True
        if self.ws is not None:
            await self.ws.close()
        if self.reader_task is not None:
            await asyncio.wait([self.reader_task], timeout=10)
        await self.http.close()


async def attempt(learner: Learner, action, *args) -> bool:
    """Run one of the learner's steps; a failure is the learner's lost session, never the benchmark's."""
    if learner.lost:
        return False
    try:
        await action(*args)
        return True
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as error:
        learner.lost = learner.lost or f"{type(error).__name__}: {error}"
    except Exception as error:  # noqa: BLE001 - anything else is an error of this learner, reported
        learner.errors.append(f"{type(error).__name__}: {error}")
        learner.lost = learner.lost or "stopped by an error"
    return False


class BrowserLearner(threading.Thread):
    """One learner as a Chromium page (LivePage), in a thread of its own (Playwright's sync API)."""

    def __init__(self, url: str, moves: int, pause_s: float, seed: int, timeout_s: float):
        super().__init__(daemon=True)
        self.url, self.count, self.pause_s, self.timeout_s = url, moves, pause_s, timeout_s
        self.rng = random.Random(seed * 1000 + 999)
        self.loaded, self.go, self.moved, self.roll_call, self.finished = (threading.Event() for _ in range(5))
        self.load_s: float | None = None
        self.moves: list[float] = []
        self.held = False
        self.errors: list[str] = []
        self.lost: str | None = None

    def run(self) -> None:
        from playwright.sync_api import sync_playwright

        from browser import LivePage, launch

        try:
            with sync_playwright() as playwright:
                browser = launch(playwright)
                try:
                    live = LivePage(browser.new_page(viewport={"width": 1280, "height": 1600}))
                    started = time.perf_counter()
                    live.open(self.url, timeout_s=self.timeout_s)
                    self.load_s = time.perf_counter() - started
                    self.loaded.set()
                    if not self.go.wait(self.timeout_s * 4):
                        return
                    keys = {}
                    count = live.sliders().count()

                    def press() -> float:
                        index = self.rng.randrange(count)
                        key = keys.setdefault(index, self.rng.choice(["ArrowRight", "ArrowLeft"]))
                        changed, ms = live.press_on_slider(index, key, self.timeout_s)
                        if not changed:  # at an end: the other way
                            keys[index] = "ArrowLeft" if key == "ArrowRight" else "ArrowRight"
                            changed, ms = live.press_on_slider(index, keys[index], self.timeout_s)
                        if not changed:
                            raise RuntimeError(f"slider {index} did not move")
                        return ms

                    for _ in range(self.count):
                        time.sleep(self.pause_s * self.rng.uniform(0.5, 1.5))
                        self.moves.append(press())
                    self.moved.set()
                    if self.roll_call.wait(self.timeout_s * 4):
                        press()
                        self.held = True
                    self.errors += live.cell_errors + [e for e in live.console_errors if "favicon" not in e]
                finally:
                    browser.close()
        except Exception as error:  # noqa: BLE001 - reported as this learner's loss
            self.lost = f"{type(error).__name__}: {str(error)[:300]}"
        finally:
            self.loaded.set()
            self.moved.set()
            self.finished.set()


@dataclass
class Level:
    learners: int
    lesson: str
    servers: int = 1
    loaded: int = 0  # sessions that loaded the lesson (the RSS per session divides by these)
    held: int = 0
    lost: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    load_s: list = field(default_factory=list)
    moves: list = field(default_factory=list)
    browser_load_s: float | None = None
    browser_moves: list = field(default_factory=list)
    rss0: int = 0
    rss1: int = 0
    rss_loaded: int = 0
    rss_end: int = 0
    children: int = 0
    server_cores: float = 0.0
    server_cpu_s: float = 0.0
    moves_made: int = 0
    moving_s: float = 0.0
    client_cpu_s: float = 0.0
    load_before: tuple = ()
    load_after: tuple = ()
    skipped: str | None = None
    log: str | None = None

    @property
    def per_session(self) -> float | None:
        further = self.loaded - self.servers
        return (self.rss_loaded - self.rss1) / further if further > 0 else None


def server_log_errors(server: MarimoRun) -> list[str]:
    """marimo's log lines that name an error (not its known note that it ignores the opengraph table)."""
    server.log.seek(0)
    lines = server.log.read().decode("utf-8", "replace").splitlines()
    return [line.strip()[:200] for line in lines
            if re.search(r"Traceback|\bERROR\b|Exception|Error:", line) and "opengraph" not in line]


def wait_for_quiet_machine(max_load: float, budget: list[float]) -> tuple:
    """Wait (out of budget[0] s, shared by every level) until the 1-minute load average is below max_load."""
    started = time.monotonic()
    while os.getloadavg()[0] >= max_load and time.monotonic() - started < budget[0]:
        time.sleep(5)
    budget[0] -= time.monotonic() - started
    waited = time.monotonic() - started
    if waited >= 5:
        print(f"  waited {waited:.0f} s for the load average ({os.getloadavg()[0]:.2f} now)",
              file=sys.stderr, flush=True)
    return os.getloadavg()


async def measure_level(level: Level, file: str, args, deadline: float, browser: bool) -> None:
    with contextlib.ExitStack() as stack:
        servers = []
        for _ in range(min(args.servers, level.learners)):
            server = stack.enter_context(MarimoRun(REPO / "notebooks", extra_args=("--include-code",)))
            SERVERS.append(server)
            servers.append(server)
        pids = [server.proc.pid for server in servers]

        def rss() -> tuple[int, int]:
            counted = [rss_bytes(pid) for pid in pids]
            return sum(c[0] for c in counted), sum(c[1] for c in counted)

        await asyncio.sleep(1.0)
        level.servers = len(servers)
        level.rss0, _ = rss()
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        use_browser = browser and level.learners > len(servers)
        protocol_learners = level.learners - (1 if use_browser else 0)
        # Learner n uses server n % servers (as a proxy sending each group of the class to its own process).
        learners = [Learner(n, servers[n % len(servers)].port, file, args.seed, args.timeout)
                    for n in range(protocol_learners)]
        observer = None
        if use_browser:
            server = servers[protocol_learners % len(servers)]
            observer = BrowserLearner(f"{server.url}?file={file}", args.moves, args.pause, args.seed, args.timeout)
        first, rest = learners[:len(servers)], learners[len(servers):]
        client_cpu = time.process_time()
        try:
            # The teacher opens the lesson first (on each server); then the class joins, all at once.
            await asyncio.wait_for(asyncio.gather(*(attempt(l, l.open) for l in first)), left())
            level.rss1, _ = rss()
            if observer is not None:
                observer.start()
            await asyncio.wait_for(asyncio.gather(*(attempt(l, l.open) for l in rest)), left())
            if observer is not None:
                await asyncio.wait_for(asyncio.to_thread(observer.loaded.wait), left())
            level.rss_loaded, level.children = rss()
            level.loaded = sum(learner.load_s is not None for learner in learners)
            level.loaded += 1 if observer is not None and observer.load_s is not None else 0
            print(f"  {level.learners} learners: loaded, moving sliders", file=sys.stderr, flush=True)
            cpu_before, moving_since = sum(map(cpu_seconds, pids)), time.monotonic()
            if observer is not None:
                observer.go.set()
            await asyncio.wait_for(asyncio.gather(*(attempt(l, l.make_moves, args.moves, args.pause)
                                                    for l in learners)), left())
            if observer is not None:
                await asyncio.wait_for(asyncio.to_thread(observer.moved.wait), left())
            level.moving_s = time.monotonic() - moving_since
            level.server_cpu_s = sum(map(cpu_seconds, pids)) - cpu_before
            level.server_cores = level.server_cpu_s / level.moving_s
            level.moves_made = sum(len(l.moves) for l in learners) + (len(observer.moves) if observer else 0)
            # The roll call: every session that is still there answers one more move.
            if observer is not None:
                observer.roll_call.set()
            rolled = await asyncio.wait_for(asyncio.gather(*(attempt(l, l.move) for l in learners)), left())
            if observer is not None:
                await asyncio.wait_for(asyncio.to_thread(observer.finished.wait), left())
            level.held = sum(rolled) + (1 if observer is not None and observer.held else 0)
            level.rss_end, _ = rss()
        except asyncio.TimeoutError:
            level.errors.append("the level ran out of the time limit")
        finally:
            level.client_cpu_s = time.process_time() - client_cpu
            if observer is not None:
                observer.go.set()
                observer.roll_call.set()
            await asyncio.gather(*(l.close() for l in learners), return_exceptions=True)
        for learner in learners:
            if learner.lost:
                level.lost.append(f"learner {learner.number}: {learner.lost}")
            level.errors += [f"learner {learner.number}: {e}" for e in learner.errors]
            if learner.load_s is not None:
                level.load_s.append(learner.load_s)
            level.moves += learner.moves
        if observer is not None:
            observer.finished.wait(30)
            if observer.lost:
                level.lost.append(f"browser learner: {observer.lost}")
            level.errors += [f"browser learner: {e}" for e in observer.errors]
            level.browser_load_s, level.browser_moves = observer.load_s, observer.moves
        for number, server in enumerate(servers):
            level.errors += [f"server {number} log: {line}" for line in server_log_errors(server)]
        if level.errors or level.lost:  # keep marimo's whole logs to read
            kept = Path(tempfile.gettempdir()) / f"class_load-{level.learners}-learners-{os.getpid()}.log"
            with kept.open("wb") as out:
                for number, server in enumerate(servers):
                    server.log.seek(0)
                    out.write(f"=== server {number}\n".encode() + server.log.read())
            level.log = str(kept)


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def report(levels: list[Level], args, started: float) -> None:
    mib = 1024 * 1024
    marimo_version = "?"
    try:
        from importlib.metadata import version
        marimo_version = version("marimo")
    except Exception:  # noqa: BLE001
        pass
    print(f"\nmarimo {marimo_version}, lesson {args.lesson} ({LESSONS.get(args.lesson, args.lesson)}), "
          f"{args.moves} moves per learner ({args.pause:g} s +-50% apart) and a roll call, "
          f"{os.cpu_count()} CPUs, {time.monotonic() - started:.0f} s in all\n")
    header = (f"{'learners':>8} {'servers':>7} {'held':>4} {'lost':>4} {'errors':>6}  {'load s p50/max':>14}  "
              f"{'move ms p50':>11} {'p95':>5} {'max':>5} {'1st out p50':>11}  {'browser ms p50/p95':>18}  "
              f"{'RSS MiB idle/1st/end':>20} {'MiB/session':>11}  {'server cores':>12} {'CPU ms/move':>11}  "
              f"{'load avg before -> after':>24}")
    print(header)
    print("-" * len(header))
    for level in levels:
        if level.skipped:
            print(f"{level.learners:>8}  skipped: {level.skipped}")
            continue
        moves = [m.ms for m in level.moves]
        first = [m.first_output_ms for m in level.moves if m.first_output_ms is not None]
        loads = f"{fmt(statistics.median(level.load_s) if level.load_s else None, '.1f')}/" \
                f"{fmt(max(level.load_s) if level.load_s else None, '.1f')}"
        browser = "-" if not level.browser_moves else \
            f"{fmt(percentile(level.browser_moves, 50))}/{fmt(percentile(level.browser_moves, 95))}"
        rss = f"{level.rss0 / mib:.0f}/{level.rss1 / mib:.0f}/{level.rss_end / mib:.0f}"
        per = fmt(None if level.per_session is None else level.per_session / mib, ".1f")
        load = f"{' '.join(f'{x:.2f}' for x in level.load_before)} -> {level.load_after[0]:.2f}"
        per_move = 1000 * level.server_cpu_s / level.moves_made if level.moves_made else None
        print(f"{level.learners:>8} {level.servers:>7} {level.held:>4} {len(level.lost):>4} {len(level.errors):>6}  "
              f"{loads:>14}  {fmt(percentile(moves, 50)):>11} {fmt(percentile(moves, 95)):>5} "
              f"{fmt(max(moves) if moves else None):>5} "
              f"{fmt(percentile(first, 50)):>11}  {browser:>18}  {rss:>20} {per:>11}  "
              f"{level.server_cores:>12.2f} {fmt(per_move):>11}  {load:>24}")
    print("\nheld: sessions that answered the roll call at the end; move: POST set_ui_element_value to the run's"
          " completed-run on the learner's socket (1st out: to its first new output); browser: the Chromium"
          " learner, key press to the page's last change; RSS: marimo's server, idle / after the first session /"
          " at the end (summed over the servers); MiB/session: what each session after the first (on each"
          " server) added; server cores: its CPU seconds per second while the class moved sliders (CPU ms/move:"
          " per move); load avg: 1, 5, 15 minutes.")
    for level in levels:
        for kind, lines in (("lost", level.lost), ("errors", level.errors)):
            if lines:
                print(f"\n{level.learners} learners, {kind} ({len(lines)}):")
                for line in lines[:10]:
                    print(f"  {line}")
        if level.log:
            print(f"\n{level.learners} learners: marimo's log is kept in {level.log}")
        if level.browser_load_s is not None:
            print(f"\n{level.learners} learners: the browser learner loaded the lesson in "
                  f"{level.browser_load_s:.1f} s")
        if level.children:
            print(f"\n{level.learners} learners: the server had {level.children} child processes")
    print(f"\nthe load generator (this process) used {sum(l.client_cpu_s for l in levels):.1f} CPU s in all")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="What one learner does: see the module's docstring.")
    parser.add_argument("--levels", type=int, nargs="+", default=[10, 20, 30], help="concurrent learners per level")
    parser.add_argument("--moves", type=int, default=10, help="slider moves per learner (then one roll-call move)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between a learner's moves (+-50%%)")
    parser.add_argument("--servers", type=int, default=1,
                        help="marimo processes on this machine, the learners spread over them (default 1)")
    parser.add_argument("--lesson", default="8", help="1 or 8 (or a notebook's file name in notebooks/)")
    parser.add_argument("--browser", action=argparse.BooleanOptionalAction, default=None,
                        help="one learner is a Chromium page (default: when Chromium is found)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a load or a move may take")
    parser.add_argument("--time-limit", type=float, default=600, help="seconds of measuring in all")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait until the 1-minute load is below this")
    parser.add_argument("--max-load-wait", type=float, default=600, help="seconds of waiting for it, in all")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    if any(n < 1 or n > 100 for n in args.levels) or not 0 <= args.moves <= 1000 or not 1 <= args.servers <= 8:
        parser.error("levels are 1 to 100 learners, moves 0 to 1000, servers 1 to 8")
    file = LESSONS.get(args.lesson, args.lesson)
    if not (REPO / "notebooks" / file).is_file():
        parser.error(f"no notebooks/{file}")
    browser = args.browser if args.browser is not None else find_chromium() is not None
    if browser and importlib.util.find_spec("playwright") is None:
        if args.browser:
            parser.error("--browser needs playwright")
        browser = False

    started = time.monotonic()
    deadline = [started + args.time_limit]  # moved on by every wait for the load average
    servers_stop = threading.Event()

    def watchdog() -> None:
        while not servers_stop.wait(1):
            if time.monotonic() > deadline[0] + GRACE_S:
                print(f"class_load: past the time limit ({args.time_limit:.0f} s + {GRACE_S} s): stopping",
                      file=sys.stderr, flush=True)
                for server in list(SERVERS):
                    server.stop()
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    budget = [args.max_load_wait]
    levels = []
    try:
        for count in args.levels:
            level = Level(count, file)
            levels.append(level)
            waiting_since = time.monotonic()
            level.load_before = wait_for_quiet_machine(args.max_load, budget)
            deadline[0] += time.monotonic() - waiting_since
            need = 30 + 2 * count + args.moves * args.pause * 2
            if deadline[0] - time.monotonic() < need:
                level.skipped = (f"{deadline[0] - time.monotonic():.0f} s left of the time limit, "
                                 f"about {need:.0f} s needed")
                level.load_after = os.getloadavg()
                continue
            print(f"{count} learners (load average {level.load_before[0]:.2f})", file=sys.stderr, flush=True)
            asyncio.run(measure_level(level, file, args, deadline[0], browser))
            level.load_after = os.getloadavg()
    finally:
        servers_stop.set()
    report(levels, args, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
