"""The lessons' flowcharts: mermaid sources, shown as SVG that mermaid drew once and the package ships.

marimo draws `mo.mermaid(...)` in the browser, which loads mermaid's library (megabytes of script)
and lays the chart out on every page load: lesson 5's two diagrams cost its page 0.57 s at cold start
(benchmarks/lesson_speed.py, the lesson with and without them). The same drawing as SVG costs a
parse. `show(name)` gives the SVG as an mo.Html; the source stays here, and

    .venv/bin/python -m memmath_lessons.diagrams     # from a checkout: playwright, Chromium, tests/browser.py

draws every source again with marimo's own mermaid, in Chromium, into static/diagrams/NAME.svg
(coordinates rounded to 0.1 px). tests/test_diagrams.py checks each SVG holds its source's labels.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DIAGRAMS = Path(__file__).resolve().parent / "static" / "diagrams"

SOURCES = {
    # Lesson 5: where Houlsby et al. (2019) put the two adapters of a BERT block.
    "adapter_block": """
    flowchart TB
      x(["input: s x h"]) --> attn["multi-head attention + output projection"]
      attn --> a1["adapter 1"]
      a1 --> n1["add residual + layer norm"]
      x -. residual .-> n1
      n1 --> ff["feed-forward: h -> 4h -> h"]
      ff --> a2["adapter 2"]
      a2 --> n2["add residual + layer norm"]
      n1 -. residual .-> n2
      n2 --> out(["to the next block"])
      classDef frozen fill:#e6e6e6,stroke:#888,color:#222
      classDef train fill:#54A24B,stroke:#2f6b2a,color:#fff
      classDef io fill:#fff,stroke:#888,color:#222
      class attn,n1,ff,n2 frozen
      class a1,a2 train
      class x,out io
    """,
    # Lesson 5: inside one adapter (a bottleneck with a skip connection).
    "adapter_inside": """
    flowchart TB
      z(["z: s x h"]) --> down["down-projection h -> m"]
      down --> g["nonlinearity"]
      g --> up["up-projection m -> h"]
      up --> plus(("+"))
      z -. skip .-> plus
      plus --> o(["s x h, onward"])
      classDef train fill:#54A24B,stroke:#2f6b2a,color:#fff
      classDef io fill:#fff,stroke:#888,color:#222
      class down,up train
      class z,g,plus,o io
    """,
}

_LABEL = re.compile(r'\["([^"]+)"\]|\(\("([^"]+)"\)\)|\(\["([^"]+)"\]\)|-\. ([^.]+) \.->')


def labels(name: str) -> list[str]:
    """The text of every node and labelled link in a diagram's source (what its SVG must show)."""
    return [next(g for g in m.groups() if g) for m in _LABEL.finditer(SOURCES[name])]


def show(name: str):
    """The diagram as mermaid drew it, an mo.Html of inline SVG."""
    import marimo as mo

    if name not in SOURCES:
        raise ValueError(f"diagram must be one of {', '.join(SOURCES)}; got {name!r}")
    return mo.Html((DIAGRAMS / f"{name}.svg").read_text(encoding="utf-8"))


def _rounded(svg: str) -> str:
    return re.sub(r"-?\d+\.\d{2,}", lambda m: f"{float(m.group(0)):.1f}", svg)


_CLASS_DEF = re.compile(r"classDef (\w+) ([^\n]+)")


def _class_rules(svg: str, source: str) -> str:
    """The source's classDef styles as rules in the SVG's own <style>.

    mermaid also writes them as inline style attributes on the shapes it nests (stadiums, circles), and
    marimo's HTML sanitizer drops inline styles from an mo.Html: without these rules such a node would
    show mermaid's default fill instead of its class's.
    """
    svg_id = re.match(r'<svg id="([^"]+)"', svg).group(1)
    rules = []
    for name, declarations in _CLASS_DEF.findall(source):
        style = dict(d.split(":", 1) for d in declarations.strip().split(","))
        shapes = ",".join(f"#{svg_id} .node.{name} {shape}" for shape in ("path", "rect", "circle", "polygon"))
        rules.append(shapes + "{" + ";".join(f"{k}:{style[k]}!important" for k in ("fill", "stroke") if k in style) + "}")
        if "color" in style:
            rules.append(f"#{svg_id} .node.{name} .nodeLabel,#{svg_id} .node.{name} p{{color:{style['color']}!important}}")
    return svg.replace("</style>", "".join(rules) + "</style>", 1)


def render() -> list[Path]:
    """Draw every source with marimo's mermaid in Chromium and write static/diagrams/NAME.svg."""
    import tempfile

    from playwright.sync_api import sync_playwright

    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    from browser import LivePage, MarimoRun, launch

    cells = "".join(f"\n\n@app.cell\ndef _(mo):\n    mo.mermaid({SOURCES[name]!r})\n    return\n" for name in SOURCES)
    notebook = ("import marimo\n\napp = marimo.App()\n\n\n@app.cell\ndef _():\n    import marimo as mo\n    return (mo,)\n"
                + cells + '\n\nif __name__ == "__main__":\n    app.run()\n')
    written = []
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        path = Path(scratch) / "diagrams.py"
        path.write_text(notebook, encoding="utf-8")
        browser = launch(playwright)
        with MarimoRun(path) as server:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            LivePage(page).open(server.url)
            page.wait_for_timeout(1500)
            svgs = page.evaluate("""() => {
                const roots = [document];
                for (let i = 0; i < roots.length; i++)
                    for (const e of roots[i].querySelectorAll('*')) if (e.shadowRoot) roots.push(e.shadowRoot);
                return roots.flatMap(r => [...r.querySelectorAll('svg[aria-roledescription^=flowchart]')]).map(s => s.outerHTML);
            }""")
        browser.close()
    if len(svgs) != len(SOURCES):
        raise RuntimeError(f"mermaid drew {len(svgs)} diagrams of {len(SOURCES)}")
    DIAGRAMS.mkdir(parents=True, exist_ok=True)
    for name, svg in zip(SOURCES, svgs):
        target = DIAGRAMS / f"{name}.svg"
        target.write_text(_class_rules(_rounded(svg), SOURCES[name]) + "\n", encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    for written_path in render():
        print(f"wrote {written_path} ({written_path.stat().st_size:,} B)")
