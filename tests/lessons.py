"""Run lessons from pytest: load a notebook's app, run it, and re-run it with each control at its extremes.

A lesson builds each control in one cell and reads it in another, so a control can be replaced by
an equal one set to its minimum or maximum (`app.run(defs=...)` overrides the defining cell; the
cell's other definitions are passed through unchanged from the default run).
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import marimo as mo

from memmath_lessons.step_slider import StepSlider, step_slider

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def load_app(name: str):
    """The marimo App of notebooks/<name>.py (imported fresh each time)."""
    path = NOTEBOOKS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"lesson_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def run(name: str, defs: dict | None = None):
    """(outputs, defs) of one run of the lesson."""
    return load_app(name).run(defs=defs)


def _cell_defs(app) -> dict[str, set[str]]:
    """Variable -> every variable defined by the same cell."""
    app._maybe_initialize()
    owners = {}
    for cell in app._graph.cells.values():
        for var in cell.defs:
            owners[var] = set(cell.defs)
    return owners


def _at(element, which: str):
    """A copy of a control set to its minimum ('min') or maximum ('max'); None if it has no range."""
    if isinstance(element, mo.ui.slider):
        if element.steps:
            value = element.steps[0] if which == "min" else element.steps[-1]
            return mo.ui.slider(steps=element.steps, value=value)
        value = element.start if which == "min" else element.stop
        return mo.ui.slider(start=element.start, stop=element.stop, step=element.step, value=value)
    if isinstance(element, mo.ui.number):
        value = element.start if which == "min" else element.stop
        if value is None or (isinstance(value, float) and math.isinf(value)):
            return None
        return mo.ui.number(start=element.start, stop=element.stop, step=element.step, value=value)
    if isinstance(element, (mo.ui.dropdown, mo.ui.radio)):
        keys = list(element.options)
        key = keys[0] if which == "min" else keys[-1]
        return type(element)(options=element.options, value=key)
    if isinstance(element, (mo.ui.switch, mo.ui.checkbox)):
        return type(element)(value=(which == "max"))
    if is_step_slider(element):
        steps = element.steps
        return step_slider(steps, value=steps[0] if which == "min" else steps[-1], label=element.label)
    return None


def is_step_slider(element) -> bool:
    """Whether `element` is a memmath_lessons.step_slider (a mo.ui.anywidget around a StepSlider)."""
    return isinstance(element, mo.ui.anywidget) and isinstance(element.widget, StepSlider)


def controls(defs) -> dict[str, object]:
    """Every top-level control of a run: name -> UI element."""
    kinds = (mo.ui.slider, mo.ui.number, mo.ui.dropdown, mo.ui.radio, mo.ui.switch, mo.ui.checkbox)
    return {name: value for name, value in defs.items() if isinstance(value, kinds) or is_step_slider(value)}


def _state(element):
    """What a control holds, as a lesson reads it: its frontend value (a dropdown's key, a slider's value), or a
    step slider's steps and chosen step."""
    if is_step_slider(element):
        return "step slider", tuple(element.widget.steps), element.widget.chosen
    return type(element), element._value_frontend


def extreme_runs(name: str):
    """Yield (control, 'min'|'max', outputs, defs) for every control of the lesson at both ends.

    An end that is the control's default is the default run's state: that run is yielded for it, first (before
    the other runs are given the default run's definitions), instead of running the same state again.
    """
    app = load_app(name)
    base_outputs, base_defs = app.run()
    owners = _cell_defs(app)
    ends = [(var, which, replacement) for var, element in controls(base_defs).items() for which in ("min", "max")
            if (replacement := _at(element, which)) is not None]
    for var, which, replacement in ends:
        if _state(replacement) == _state(base_defs[var]):
            yield var, which, base_outputs, base_defs
    for var, which, replacement in ends:
        if _state(replacement) != _state(base_defs[var]):
            overrides = {v: base_defs[v] for v in owners[var] if v in base_defs}
            overrides[var] = replacement
            outputs, defs = load_app(name).run(defs=overrides)
            yield var, which, outputs, defs


# Units are matched case-sensitively: marimo's lowercase UUIDs ("-460b-") and names such as
# "gpt3-175b" would otherwise read as negative byte counts. A minus sign, not a hyphen inside a
# name: "Llama-2-13B" is a model name, not -13 B.
BAD_TEXT = re.compile(r"(?i:\bnan\b)|Traceback|(?<![\w-])-\d[\d,.]*\s*(?:B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\b")


_WIDGET_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")  # an anywidget's model id, however escaped


def live_widget_text(widget) -> str | None:
    """What a live widget shows, as text: a live html's HTML, a live chart's spec and rows (as a chart's output
    would hold them); None for any other object."""
    import json

    from memmath_lessons.live_chart import LiveChart
    from memmath_lessons.live_html import LiveHtml

    if isinstance(widget, LiveHtml):
        return widget.html
    if isinstance(widget, LiveChart):
        return json.dumps({"spec": widget.spec, "rows": widget.rows, "signals": widget.signals})
    return None


def with_live_widgets(text: str) -> str:
    """`text` with what every live widget (memmath_lessons.live_html, live_chart) it shows holds, where it is.

    A cell's HTML holds only a reference to a widget (its model id, also inside folds, escaped); what
    the page shows there is the widget's contents, which go in after the id's first mention.
    """
    from ipywidgets.widgets.widget import _instances

    for widget_id in dict.fromkeys(m.group(0) for m in _WIDGET_ID.finditer(text)):
        shown = live_widget_text(_instances.get(widget_id))
        if shown is not None:
            text = text.replace(widget_id, f"{widget_id} {shown} ", 1)
    return text


def output_text(outputs) -> str:
    """The visible text of a run's outputs (HTML of markdown, tables and charts' data), with what the live html
    widgets among them show."""
    parts = []
    for output in outputs:
        if output is None:
            continue
        text = live_widget_text(output)
        text = getattr(output, "text", None) if text is None else text
        if text is None and hasattr(output, "_repr_html_"):
            try:
                text = output._repr_html_()
            except Exception:  # a chart that cannot render is caught by the browser tests
                text = ""
        if text is None and hasattr(output, "_mime_"):
            text = str(output._mime_()[1])
        parts.append(str(text or ""))
    return with_live_widgets("\n".join(parts))


def bad_text(outputs) -> list[str]:
    """Fragments that must never be shown: NaN, tracebacks, negative byte counts."""
    return BAD_TEXT.findall(output_text(outputs))


def run_with(name: str, **controls):
    """(outputs, defs) of a run with some controls replaced (name -> UI element), the rest at their defaults.

    A control's defining cell is skipped when it is overridden, so its sibling definitions are passed
    through from a default run, as extreme_runs does.
    """
    app = load_app(name)
    _, base_defs = app.run()
    owners = _cell_defs(app)
    overrides = {}
    for var, element in controls.items():
        overrides.update({v: base_defs[v] for v in owners[var] if v in base_defs})
    overrides.update(controls)
    return load_app(name).run(defs=overrides)


def cells_rerun_by(name: str, control: str) -> set:
    """Ids of the cells a move of `control` re-runs in the live lesson: the cells that read it and all downstream
    (marimo's dataflow graph). Each costs marimo's per-cell overhead on every move."""
    app = load_app(name)
    app._maybe_initialize()
    graph = app._graph
    readers = {cell_id for cell_id, cell in graph.cells.items() if control in cell.refs}
    return readers.union(*(graph.descendants(cell_id) for cell_id in readers))


def plain_text(outputs) -> str:
    """The visible words of a run's outputs: output_text with the HTML tags, entities and the JSON escapes of
    nested elements (a callout inside a vstack, a table inside an accordion) undone, whitespace collapsed."""
    import html

    text = output_text(outputs)
    for _ in range(3):
        text = html.unescape(text)
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\n", " ").replace('\\"', '"')
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))
