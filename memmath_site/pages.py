"""What the site changes in each exported lesson page, and what it reads from each lesson's header.

- `freeze_controls`: marimo's sliders and menus need a kernel; in a static page they would still
  move while every number stays put. The page marks them disabled (marimo's own `data-disabled`
  where the control has one) and a small script makes every such control `inert` (no click, no
  focus, no key press, inside its shadow root too), with a style that shows it.
- `add_banner`: our own line at the top of the page (how to run the lesson live, and its source
  beside the page) in place of marimo's "Run or Edit" banner, which the export leaves out once the
  page carries no code (`marimo export html --no-include-code`).
- `lesson_header`: the `[tool.marimo.opengraph]` title and description of a lesson's PEP 723
  header, which marimo's live gallery shows and the site's index reuses.
"""

from __future__ import annotations

import html
import re
import tomllib
from pathlib import Path

FROZEN_ATTRIBUTE = "data-memmath-frozen"
"""Set on every marimo control the page froze (the site tests look for it)."""

BANNER_ATTRIBUTE = "data-memmath-banner"

# marimo's controls that need a kernel to do anything (tables, tabs and accordions work statically).
KERNEL_CONTROLS = tuple(f"marimo-{name}" for name in (
    "slider", "range-slider", "dropdown", "multiselect", "radio", "number", "switch", "checkbox", "text",
    "text-area", "button", "date", "date-range", "datetime", "matrix", "file", "chat", "code-editor"))

# The UI elements sit in the page's session snapshot as escaped HTML ("\u003Cmarimo-slider ...") with
# single-quoted attributes; only marimo's controls carry data-disabled.
_DISABLED_FALSE = "data-disabled='false'"

_FREEZE = """<style {attribute}>
  [{banner}] {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; padding: .5rem 1rem;
    background: #f1f6fd; border-bottom: 1px solid #c6dbf5; color: #1f2328; }}
  [{banner}] a {{ color: #0b57d0; }}
  /* marimo's app is positioned from the top of the page: stack it under the banner instead of over it. */
  body:has([{banner}]) {{ display: flex; flex-direction: column; height: 100vh; margin: 0; }}
  [{banner}] ~ #root {{ position: relative; flex: 1 1 auto; height: auto !important; min-height: 0; }}
</style>
<script {attribute}>
  // marimo draws its controls after load: freeze each one as it appears (inert: no pointer, focus or key events,
  // in its shadow root too), and fade it.
  (() => {{
    const selector = {selector};
    // A control's host, and the first elements of its shadow root, are display: contents (no box to fade): fade
    // the first elements below them that have a box. A document's observer does not see into shadow roots, so
    // each root gets its own.
    const look = "[{frozen}] {{ opacity: .45; filter: grayscale(1); cursor: not-allowed; }}";
    const fade = (node) => [...node.children].forEach((child) => {{
      if (child.tagName === "STYLE") return;
      if (getComputedStyle(child).display === "contents") fade(child);
      else child.setAttribute("{frozen}", "");
    }});
    const freeze = () => document.querySelectorAll(selector).forEach((e) => {{
      if (!e.hasAttribute("{frozen}")) {{
        e.setAttribute("{frozen}", "");
        e.inert = true;
        e.setAttribute("aria-disabled", "true");
      }}
      const root = e.shadowRoot;
      if (root && !root.querySelector("style[{frozen}]")) {{
        const style = document.createElement("style");
        style.setAttribute("{frozen}", "");
        style.textContent = look;
        root.appendChild(style);
        new MutationObserver(() => fade(root)).observe(root, {{childList: true, subtree: true}});
      }}
      if (root) fade(root);
    }});
    new MutationObserver(freeze).observe(document.documentElement, {{childList: true, subtree: true}});
    document.addEventListener("DOMContentLoaded", freeze);
  }})();
</script>
"""


def freeze_controls(page_html: str) -> str:
    """The page with every marimo control disabled (data-disabled) and made inert by a script in its head."""
    if "</head>" not in page_html:
        raise ValueError("the exported page has no </head>: marimo's export format changed")
    page_html = page_html.replace(_DISABLED_FALSE, "data-disabled='true'")
    block = _FREEZE.format(attribute='data-memmath-site=""', frozen=FROZEN_ATTRIBUTE, banner=BANNER_ATTRIBUTE,
                           selector=repr(", ".join(KERNEL_CONTROLS)))
    return page_html.replace("</head>", block + "</head>", 1)


def add_banner(page_html: str, source_name: str, live_href: str) -> str:
    """The page with our line on top: it is a snapshot, how to run it live, and a link to its source (source_name)."""
    match = re.search(r"<body[^>]*>", page_html)
    if not match:
        raise ValueError("the exported page has no <body>: marimo's export format changed")
    banner = (f'<div {BANNER_ATTRIBUTE}="1">A snapshot of this lesson: the inputs under its charts work here, the other '
              f'controls are frozen. <a href="{html.escape(live_href)}">Run the live workbook</a> to move them, '
              f'or <a href="{html.escape(source_name)}">show the code</a> ({html.escape(source_name)}).</div>')
    return page_html[:match.end()] + banner + page_html[match.end():]


_HEADER = re.compile(r"^# /// script[ \t]*\n((?:^#(?:| .*)\n)+?)^# ///[ \t]*$", re.M)


def lesson_header(path: Path) -> dict[str, str]:
    """The `[tool.marimo.opengraph]` table (title, description) of a lesson's PEP 723 header; {} without one."""
    match = _HEADER.search(Path(path).read_text(encoding="utf-8"))
    if not match:
        return {}
    text = "".join(line[2:] if line.startswith("# ") else line[1:] for line in match.group(1).splitlines(True))
    try:
        header = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: its PEP 723 header is not valid TOML: {error}") from error
    table = header.get("tool", {}).get("marimo", {}).get("opengraph", {})
    return {key: str(table[key]).strip() for key in ("title", "description") if table.get(key)}


def index_title(opengraph_title: str) -> str:
    """A gallery title as the site's numbered list shows it: "memmath · 0. Start here" -> "Start here"."""
    return re.sub(r"^\d+\.\s*", "", re.sub(r"^memmath\s*·\s*", "", opengraph_title.strip()))
