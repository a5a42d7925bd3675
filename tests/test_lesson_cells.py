"""One idea per cell, and the memmath arithmetic visible under "Show code".

The lessons are served with `marimo run notebooks --include-code`: a learner can press "Show code" and read
every cell except those marked `@app.cell(hide_code=True)`. The arithmetic is what the course teaches, so every
cell that calls memmath (`mm.<anything>`, or a name imported from memmath) is visible; the presentation around
it (markdown assembly, charts, tables, callouts) sits in hidden cells that read the visible cells' values.
Formatting a byte count for display (`format_bytes`, `to_unit`, imported by name) is presentation, not
arithmetic, and may sit in a hidden cell. A cell that a control re-runs computes in view and hands its values
to a function that a hidden cell defines (and that reads no control), so a move still re-runs one cell.

No cell is longer than MAX_CELL_LINES, 60 lines from decorator to last line: about what marimo's editor shows
on one laptop screen, so a cell the reader opens is read at once. Every cell of these lessons that does one
thing fits in it (the longest, lesson 7's run, computes in 51 lines); each cell that ran past it did several
(computed a run, worded it and drew it).
The notebooks are read with `ast`, as marimo writes them: one decorated function per cell.
"""

import ast
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# Every lesson is held to these rules.
LESSONS_CHECKED = sorted(path.stem for path in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
MAX_CELL_LINES = 60
# memmath's display helpers: they turn a byte count into a string and compute nothing a lesson teaches.
DISPLAY_HELPERS = {"format_bytes", "to_unit"}


def _is_cell_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target) == "app.cell"


def _hidden(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "hide_code" and isinstance(k.value, ast.Constant) and k.value.value is True for k in decorator.keywords)


def _memmath_names(tree: ast.Module) -> set[str]:
    """The names a notebook imports from memmath, other than the display helpers."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "memmath":
            names.update(a.asname or a.name for a in node.names if a.name not in DISPLAY_HELPERS)
    return names


def cells(source: str) -> list[dict]:
    """Each cell of a marimo notebook: first line, length in lines, hidden or not, and the memmath it calls."""
    tree = ast.parse(source)
    imported = _memmath_names(tree)
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [d for d in node.decorator_list if _is_cell_decorator(d)]
        if not decorators:
            continue
        calls = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "mm":
                calls.add(f"mm.{sub.attr}")
            elif isinstance(sub, ast.Name) and sub.id in imported and isinstance(sub.ctx, ast.Load):
                calls.add(sub.id)
        found.append({"line": decorators[0].lineno, "lines": node.end_lineno - decorators[0].lineno + 1,
                      "hidden": _hidden(decorators[0]), "memmath": sorted(calls)})
    return found


def _cells_of(lesson: str) -> list[dict]:
    return cells((NOTEBOOKS / f"{lesson}.py").read_text())


@pytest.mark.parametrize("lesson", LESSONS_CHECKED)
def test_cells_that_call_memmath_are_visible(lesson):
    hidden = [(c["line"], c["memmath"]) for c in _cells_of(lesson) if c["hidden"] and c["memmath"]]
    assert hidden == [], f"{lesson}: cells at these lines call memmath but hide their code"


@pytest.mark.parametrize("lesson", LESSONS_CHECKED)
def test_no_cell_is_longer_than_a_screen(lesson):
    long = [(c["line"], c["lines"]) for c in _cells_of(lesson) if c["lines"] > MAX_CELL_LINES]
    assert long == [], f"{lesson}: cells (first line, lines) longer than {MAX_CELL_LINES} lines"


def test_the_reader_finds_hidden_arithmetic_and_long_cells():
    # A notebook written by hand: a hidden cell that calls memmath (through mm. and through an imported name), a
    # hidden cell that only formats bytes, and a visible cell of 62 lines.
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    source = (
        "import marimo\napp = marimo.App()\n\n"
        "@app.cell\ndef _():\n    import memmath as mm\n    from memmath import format_bytes, requirement\n"
        "    return format_bytes, mm, requirement\n\n"
        "@app.cell(hide_code=True)\ndef _(mm):\n    r = mm.training_memory(7e9)\n    return (r,)\n\n"
        "@app.cell(hide_code=True)\ndef _(requirement):\n    n = requirement('gpt2')\n    return (n,)\n\n"
        "@app.cell(hide_code=True)\ndef _(format_bytes, r):\n    format_bytes(r.total)\n    return\n\n"
        f"@app.cell\ndef _():\n{body}\n    return\n"
    )
    found = cells(source)
    assert [(c["hidden"], c["memmath"]) for c in found] == [
        (False, ["requirement"]), (True, ["mm.training_memory"]), (True, ["requirement"]), (True, []), (False, [])]
    assert [c["lines"] for c in found] == [5, 4, 4, 4, 62]
