"""marimo's frontend, copied out of the installed marimo wheel so that exported pages work offline.

`marimo export html` writes pages that load the frontend from a CDN
(https://cdn.jsdelivr.net/npm/@marimo-team/frontend@<version>/dist/...). The same files ship
inside the marimo wheel, in `marimo/_static/`. We copy that folder into the site once and point
every page at the copy. This relies on the layout of marimo 0.25.2 (pinned in requirements.txt);
each function here checks the part of that layout it relies on and raises AssetLayoutError,
saying what changed, instead of writing a site that is blank offline.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

BUILT_FOR_MARIMO = "0.25.2"
ASSET_DIR = "_marimo"
"""The site's copy of marimo/_static/, beside the lesson pages."""

CDN_PREFIX = "https://cdn.jsdelivr.net/npm/@marimo-team/frontend@{version}/dist/"
"""Where marimo 0.25.2's exported pages load the frontend from (marimo._templates.get_default_asset_url)."""

# A src= or href= attribute inside a tag, and any absolute http(s) URL of a resource.
_ATTRIBUTE_URL = re.compile(r"""<(?:script|link|img|source|iframe)\b[^>]*?\s(?:src|href)=["']([^"']+)["']""", re.I)


class AssetLayoutError(RuntimeError):
    """marimo's frontend is not where (or not what) this site builder expects."""


def marimo_version() -> str:
    # From the installed wheel's metadata: importing marimo would write its log under ~/.cache.
    from importlib.metadata import version

    return version("marimo")


def static_dir() -> Path:
    """marimo/_static in the installed wheel: index.html plus assets/ (the CDN's dist/ folder)."""
    from importlib.util import find_spec

    spec = find_spec("marimo")  # located, not imported (an import writes marimo's log)
    if spec is None or not spec.submodule_search_locations:
        raise AssetLayoutError("marimo is not installed: pip install -r requirements.txt")
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "_static"


def check_static_dir(folder: Path | None = None) -> Path:
    """The frontend folder, after checking that it holds index.html and every asset it names."""
    folder = static_dir() if folder is None else folder
    version = marimo_version()
    where = f"marimo {version} (this site builder was written for marimo {BUILT_FOR_MARIMO})"
    index = folder / "index.html"
    if not index.is_file():
        raise AssetLayoutError(f"{where} has no frontend at {index}: the wheel's layout changed, so pages cannot "
                               f"be served offline. Install marimo=={BUILT_FOR_MARIMO} (requirements.txt) or "
                               "update memmath_site/assets.py")
    if not (folder / "assets").is_dir():
        raise AssetLayoutError(f"{where} has no {folder / 'assets'} folder beside index.html: the frontend's "
                               "layout changed; update memmath_site/assets.py")
    missing = [ref for ref in _relative_refs(index.read_text(encoding="utf-8")) if not (folder / ref).is_file()]
    if missing:
        raise AssetLayoutError(f"{where}: {index} names files the wheel does not hold: {', '.join(missing[:5])}; "
                               "the frontend's layout changed; update memmath_site/assets.py")
    return folder


def copy_frontend(site_dir: Path, folder: Path | None = None) -> int:
    """Copy marimo's frontend (all but its index.html template) to site_dir/_marimo; returns the bytes copied."""
    folder = check_static_dir(folder)
    target = site_dir / ASSET_DIR
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("index.html", "*.md"), copy_function=shutil.copyfile)
    return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())


def localize_page(html: str, page_name: str, version: str | None = None) -> str:
    """An exported page with every frontend URL pointing at ./_marimo/ instead of the CDN.

    Raises AssetLayoutError when the page does not load the frontend from the expected CDN
    prefix (marimo changed how it exports), or still names an external resource afterwards.
    """
    prefix = CDN_PREFIX.format(version=version or marimo_version())
    if prefix not in html:
        found = sorted({url for url in _ATTRIBUTE_URL.findall(html) if "://" in url})[:3]
        raise AssetLayoutError(f"{page_name}: marimo {marimo_version()}'s export no longer loads its frontend from "
                               f"{prefix} (it names {', '.join(found) or 'no external URL'}); "
                               "update memmath_site/assets.py")
    html = html.replace(prefix, f"./{ASSET_DIR}/")
    external = sorted({url for url in _ATTRIBUTE_URL.findall(html) if re.match(r"(?i)(https?:)?//", url)})
    if external:
        raise AssetLayoutError(f"{page_name}: after pointing the frontend at ./{ASSET_DIR}/, the page still loads "
                               f"{', '.join(external[:5])}; the site would not work offline")
    return html


def check_page_refs(html: str, page_name: str, site_dir: Path) -> None:
    """Every ./_marimo/... file the page names exists in the site (AssetLayoutError otherwise)."""
    refs = [ref for ref in _relative_refs(html) if ref.startswith(f"{ASSET_DIR}/")]
    if not refs:
        raise AssetLayoutError(f"{page_name} names no file under ./{ASSET_DIR}/: marimo's export changed")
    missing = [ref for ref in refs if not (site_dir / ref).is_file()]
    if missing:
        raise AssetLayoutError(f"{page_name} loads {', '.join(missing[:5])}, which marimo {marimo_version()}'s "
                               "wheel does not ship; the frontend's layout changed")


def _relative_refs(html: str) -> list[str]:
    """The ./relative targets of src= and href= attributes, without query strings."""
    refs = []
    for url in _ATTRIBUTE_URL.findall(html):
        if url.startswith("./"):
            refs.append(url[2:].split("?")[0].split("#")[0])
    return refs
