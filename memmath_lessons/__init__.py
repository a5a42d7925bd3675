"""The workbook's pieces: charts, tables and shared controls of the lessons (`viz`), the charts a
static export keeps live (`static_charts`), the chart a slider updates in place (`live_chart`), the
tables and sentences it updates in place (`live_html`), the slider whose steps another control sets
(`step_slider`), the lessons' chart drawings (`lesson_charts`, `site_charts`), lesson 3's sweep
(`sweeps`), the views of the recorded measurements (`recorded`), the flowcharts (`diagrams`), and the
numpy toys the lessons time (`toy_block`, `blockwise`). It needs altair, pandas, marimo and
anywidget; the arithmetic itself is `memmath`'s.
"""

import importlib.util as _util

# The workbook extra (pyproject.toml): without it, say which to install rather than fail deep in a lesson.
_WORKBOOK = ("pandas", "altair", "marimo", "anywidget")
_missing = [_name for _name in _WORKBOOK if _util.find_spec(_name) is None]
if _missing:
    raise ModuleNotFoundError(f"memmath_lessons needs memmath's workbook extra (missing: {', '.join(_missing)}): "
                              'pip install "memmath[workbook]"', name=_missing[0])
del _util, _missing
