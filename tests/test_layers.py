"""The calculator reads top to bottom: memmath's modules import each other without a circle, and at the top.

The graph is built from the source with `ast` (nothing is imported), counting both the imports at a module's
top and those inside functions, so a circle cannot hide behind a function-local import. A function may still
import an optional heavy library (torch, transformers, pandas...) where it needs it; it may not import memmath.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memmath"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name an ImportFrom refers to (its `from X`, before the imported names)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, is_package: bool, node: ast.AST, known: set[str]) -> list[str]:
    """memmath modules an import statement loads (a `from pkg import sub` counts the submodule)."""
    names = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        source = _resolve(module, is_package, node)
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                 for alias in node.names]
    found = []
    for name in names:
        # `import memmath.a.b` loads memmath.a.b; keep the longest known prefix.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith("memmath") and name != module:
            found.append(name)
    return found


def _graph():
    modules = _modules()
    known = set(modules)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    local_imports: list[str] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = _targets(name, is_package, node, known)
            edges[name].update(targets)
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(func):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        for target in _targets(name, is_package, node, known):
                            local_imports.append(f"{name}:{node.lineno} imports {target} inside {func.name}()")
    return edges, sorted(set(local_imports))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_the_package():
    edges, _ = _graph()
    assert "memmath.run" in edges and "memmath.training" in edges
    assert "memmath.training" in edges["memmath.memory"]  # `from .training import ...` at the top
    assert "memmath.training" in edges["memmath.parallel"]  # `from . import training`


def test_no_import_circle():
    edges, _ = _graph()
    circles = _cycles(edges)
    assert circles == [], "modules that import each other, directly or around a circle: " + "; ".join(
        " <-> ".join(circle) for circle in circles)


def test_no_function_local_import_of_memmath():
    """Imports at the top, so the graph above is the whole graph (a function may import torch or pandas)."""
    _, local = _graph()
    assert local == [], "function-local imports of memmath's own modules:\n" + "\n".join(local)


def test_a_circle_is_found():
    """The detector itself can fail: a made-up two-module circle is reported."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
