"""The workbook as a static site that works offline: `python -m memmath_site build site`.

build.py exports every lesson and writes the index; assets.py copies marimo's frontend out of the
installed marimo wheel and points the pages at it.
"""

from .assets import AssetLayoutError
from .build import BuildError, build_site, find_lessons, lesson_title

__all__ = ["AssetLayoutError", "BuildError", "build_site", "find_lessons", "lesson_title"]
