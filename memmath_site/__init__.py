"""The workbook as a static site that works offline: `python -m memmath_site build site`.

build.py exports every lesson and writes the index; assets.py copies marimo's frontend out of the
installed marimo wheel and points the pages at it.
"""

import importlib.util as _util

# The workbook extra (pyproject.toml): the build runs marimo and the lessons; without it, say which to install.
_missing = [_name for _name in ("pandas", "altair", "marimo", "anywidget") if _util.find_spec(_name) is None]
if _missing:
    raise ModuleNotFoundError(f"memmath_site needs memmath's workbook extra (missing: {', '.join(_missing)}): "
                              'pip install "memmath[workbook]"', name=_missing[0])
del _util, _missing

from .assets import AssetLayoutError  # noqa: E402
from .build import BuildError, build_site, find_lessons, lesson_title  # noqa: E402

__all__ = ["AssetLayoutError", "BuildError", "build_site", "find_lessons", "lesson_title"]
