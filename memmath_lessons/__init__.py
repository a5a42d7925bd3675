"""The workbook's pieces: charts, tables and shared controls of the lessons (`viz`), the charts a
static export keeps live (`static_charts`), and the numpy toys the lessons time (`toy_block`,
`blockwise`). It needs altair, pandas and marimo; the arithmetic itself is `memmath`'s.
"""
