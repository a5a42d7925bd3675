"""How fast each lesson is, side by side with a one-slider reference notebook, in one run.

    .venv/bin/python benchmarks/lesson_speed.py [--rounds 3] [--presses 4] [lessons...]

Per notebook (the reference benchmarks/reference_one_slider.py, its text-only twin
benchmarks/reference_text_slider.py, then every notebooks/NN_*.py),
measured in rounds that take every notebook in turn, so a slow moment of a shared machine hits
them all alike. Timings on a shared machine only ever gain noise, so cold start and export take
the fastest round (as timeit does); slider latency takes the median of every press:

- slider: ms from a key press on a marimo slider (under `marimo run`, in Chromium) to the last
  change of any cell's output once the run it starts has finished. Each slider is pressed
  `presses` times per round (ArrowRight/ArrowLeft); a lesson's number is the median press of
  its slowest slider.
  Target: <= 1.15x the reference.
- cold start: s from launching `marimo run` to the first full render (every cell run, every chart
  drawn, the page quiet). Target: <= 1.3x.
- export: s for `marimo export html` (as `python -m memmath_site build` runs it), wall clock and
  CPU time (marimo and its kernel). Target: <= 1.3x, judged on CPU time, which other work on a
  shared machine does not inflate (the wall clock is shown beside it).
- page: kB of the exported HTML (marimo's frontend is shared by all pages and not counted).

It prints a table of ratios and then, per lesson, where the time goes (for its slowest slider: the
kernel's share of the latency, how many cells a move re-runs and the slowest of them, from
marimo's own cell timestamps; at cold start: the slowest cell), to say where to look when a
lesson misses a target. No assertion: speed is reported here, never tested.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the browser helpers live with the tests

from memmath_site import assets  # noqa: E402
from memmath_site.build import LESSON_PATTERN, Lesson, export_lesson  # noqa: E402

REFERENCE = REPO / "benchmarks" / "reference_one_slider.py"
TEXT_REFERENCE = REPO / "benchmarks" / "reference_text_slider.py"  # the same without its chart: the text floor
TARGETS = {"slider": 1.15, "cold": 1.3, "export": 1.3}


@dataclass
class Press:
    """One key press on a slider: page latency, the kernel's share, and the cells it re-ran."""

    ms: float
    kernel_ms: float
    cells: int
    slowest_cell: tuple | None


@dataclass
class Measured:
    name: str
    presses: dict = field(default_factory=dict)  # slider index -> every Press on it, all rounds
    cold_s: list = field(default_factory=list)
    export_s: list = field(default_factory=list)
    export_cpu_s: list = field(default_factory=list)
    page_bytes: int = 0
    sliders: int = 0
    slowest_cell: tuple | None = None


def measure_live(browser, notebook: Path, presses: int) -> tuple[float, dict, tuple | None]:
    """(cold start s, {slider index: [Press, ...]}, slowest cell at cold start)."""
    from browser import LivePage, MarimoRun

    with MarimoRun(notebook) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        try:
            live = LivePage(page)
            live.open(server.url)
            last_change = live.page.evaluate("() => performance.timeOrigin + window.__memmath.lastMutation") / 1000
            cold = last_change - server.started_at
            slowest = live.slowest_cell()
            if live.cell_errors:
                raise RuntimeError(f"{notebook.name}: cells failed: {live.cell_errors}")
            latencies = {}
            for index in range(live.sliders().count()):
                keys, pressed = ["ArrowRight", "ArrowLeft"], []
                while len(pressed) < presses:
                    mark = len(live.cell_runs)
                    changed, ms = live.press_on_slider(index, keys[len(pressed) % 2])
                    if not changed:  # at an end: go the other way
                        keys.reverse()
                        changed, ms = live.press_on_slider(index, keys[len(pressed) % 2])
                        if not changed:
                            break
                    runs = live.cell_runs[mark:]
                    kernel_ms = 1000 * sum(seconds for _, seconds in runs)
                    top = max(runs, key=lambda run: run[1]) if runs else None
                    pressed.append(Press(ms, kernel_ms, len(runs),
                                         (live.cell_name(top[0]), 1000 * top[1]) if top else None))
                latencies[index] = pressed
            return cold, latencies, slowest
        finally:
            page.close()


def measure_export(notebook: Path, out_dir: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of marimo and its kernel, bytes of the page) for one `marimo export html`."""
    target = out_dir / f"{notebook.stem}.html"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = export_lesson(Lesson(notebook, notebook.stem), target)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    page = assets.localize_page(target.read_text(encoding="utf-8"), target.name)
    return seconds, cpu, len(page.encode("utf-8"))


def ratio(value: float | None, reference: float | None, target: float) -> str:
    if value is None or not reference:
        return "      -      "
    r = value / reference
    return f"{r:5.2f}x {'ok  ' if r <= target else 'MISS'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lessons", nargs="*", type=Path, help="notebooks to measure (default: notebooks/NN_*.py)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--presses", type=int, default=4, help="key presses per slider per round")
    parser.add_argument("--no-export", action="store_true",
                        help="measure the live page only (sliders, cold start), not `marimo export html`")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from browser import launch

    lessons = args.lessons or sorted(p for p in (REPO / "notebooks").glob("*.py") if LESSON_PATTERN.match(p.name))
    notebooks = [REFERENCE, TEXT_REFERENCE, *lessons]
    names = {REFERENCE: "reference (one slider)", TEXT_REFERENCE: "reference (text only)"}
    results = {nb: Measured(names.get(nb, nb.stem)) for nb in notebooks}
    started = time.perf_counter()
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as scratch:
        browser = launch(playwright)
        for round_number in range(1, args.rounds + 1):
            for notebook in notebooks:
                result = results[notebook]
                if not args.no_export:
                    export_s, export_cpu, result.page_bytes = measure_export(notebook, Path(scratch))
                    result.export_cpu_s.append(export_cpu)
                    result.export_s.append(export_s)
                cold, latencies, result.slowest_cell = measure_live(browser, notebook, args.presses)
                result.cold_s.append(cold)
                for index, pressed in latencies.items():
                    result.presses.setdefault(index, []).extend(pressed)
                result.sliders = len(latencies)
                export = f"{result.export_s[-1]:.2f} s" if result.export_s else "-"
                print(f"round {round_number}/{args.rounds} {result.name}: cold {cold:.2f} s, export {export}, "
                      f"slider ms {[round(statistics.median(p.ms for p in v)) for v in latencies.values() if v]}",
                      file=sys.stderr, flush=True)
        browser.close()

    def slowest_slider(result):
        """The median latency of the lesson's slowest slider (None without sliders)."""
        medians = [statistics.median(p.ms for p in v) for v in result.presses.values() if v]
        return max(medians) if medians else None

    def slowest_slider_profile(result) -> str:
        """Where the slowest slider's time goes: the kernel's share, the cells it re-runs, the slowest one."""
        pressed = [v for v in result.presses.values() if v]
        if not pressed:
            return "-"
        worst = max(pressed, key=lambda v: statistics.median(p.ms for p in v))
        kernel = statistics.median(p.kernel_ms for p in worst)
        cells = statistics.median(p.cells for p in worst)
        tops = [p.slowest_cell for p in worst if p.slowest_cell]
        top = max(set(t[0] for t in tops), key=[t[0] for t in tops].count) if tops else "-"
        top_ms = statistics.median(t[1] for t in tops if t[0] == top) if tops else 0
        return f"kernel {kernel:.0f} ms in {cells:.0f} cells, slowest {top}: {top_ms:.0f} ms"

    reference = results[REFERENCE]
    ref_slider, ref_cold = slowest_slider(reference), min(reference.cold_s)
    ref_cpu = min(reference.export_cpu_s, default=None)
    header = (f"{'notebook':<28} {'slider ms':>9} {'vs ref (<=1.15)':>15}  {'cold s':>6} {'vs ref (<=1.3)':>14}  "
              f"{'export wall s':>13} {'CPU s':>5} {'vs ref (<=1.3)':>14}  {'page kB':>7}")
    print(f"\nmarimo {assets.marimo_version()}, {args.rounds} rounds, {args.presses} presses per slider per round "
          f"(slider: median press of the slowest slider; cold start, export: fastest round); "
          f"{time.perf_counter() - started:.0f} s in all\n")
    print(header)
    print("-" * len(header))
    for notebook in notebooks:
        r = results[notebook]
        slider, cold = slowest_slider(r), min(r.cold_s)
        export, cpu = min(r.export_s, default=None), min(r.export_cpu_s, default=None)
        exported = (f"{export:13.2f} {cpu:5.2f} {ratio(cpu, ref_cpu, TARGETS['export']):>14}  {r.page_bytes / 1000:7.1f}"
                    if export is not None else f"{'-':>13} {'-':>5} {'-':>14}  {'-':>7}")
        print(f"{r.name:<28} {slider if slider is None else f'{slider:9.0f}'!s:>9} "
              f"{ratio(slider, ref_slider, TARGETS['slider']):>15}  {cold:6.2f} {ratio(cold, ref_cold, TARGETS['cold']):>14}  "
              f"{exported}")
    print("\nWhere the time goes (cells counted in notebook order; the rest of a slider's latency is the browser"
          " redrawing what changed):")
    for notebook in notebooks:
        r = results[notebook]
        cell = f"{r.slowest_cell[0]}: {r.slowest_cell[1] * 1000:.0f} ms" if r.slowest_cell else "-"
        print(f"  {r.name:<28} slowest slider: {slowest_slider_profile(r)}; cold start: slowest {cell}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
