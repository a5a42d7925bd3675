# /// script
# [tool.marimo.opengraph]
# title = "Example: where the weights go"
# description = "Stand-in lesson: parameters times bytes per parameter."
# ///
# STAND-IN lesson for the static-site work (issue 6): delete it when the real lessons land.
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Example: where the weights go

    A stand-in lesson that exercises the static site: a marimo slider and dropdown (live only),
    and a bound chart whose inputs keep working in the exported page.
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath
    from memmath.static_charts import Select, Slider, bound_chart, live_only_notice
    return Select, Slider, alt, bound_chart, live_only_notice, memmath, mo, pd


@app.cell
def _(live_only_notice, mo):
    billions_slider = mo.ui.slider(1, 70, value=7, step=1, label="Parameters (billions)")
    format_dropdown = mo.ui.dropdown(["fp32", "bf16", "int8", "int4"], value="bf16", label="Format")
    mo.vstack([live_only_notice(), billions_slider, format_dropdown])
    return billions_slider, format_dropdown


@app.cell
def _(billions_slider, format_dropdown, memmath, mo):
    weight_bytes = memmath.get_format(format_dropdown.value).bytes_for(billions_slider.value * 10**9)
    mo.md(f"**{billions_slider.value}B parameters in {format_dropdown.value}: {memmath.format_bytes(weight_bytes)}** of weights.")
    return


@app.cell
def _(Select, Slider, alt, bound_chart, memmath, pd):
    _formats = ("fp32", "bf16", "int8", "int4")
    _rows = [
        {"billions": n / 1e9, "format": f, "GB": memmath.to_unit(memmath.get_format(f).bytes_for(n), "GB")}
        for n in (10**8, 3 * 10**8, 10**9, 3 * 10**9, 7 * 10**9, 13 * 10**9, 70 * 10**9, 175 * 10**9, 405 * 10**9)
        for f in _formats
    ]
    weights_grid = pd.DataFrame(_rows)
    bound_chart(
        weights_grid,
        [Slider("billions", "Parameters", value=7, labels=lambda b: f"{b:g}B")],
        lambda base: alt.layer(
            base.mark_circle(size=140),
            base.mark_text(align="left", dx=10).encode(text=alt.Text("GB:Q", format=",.3~f")),
        ).encode(
            x=alt.X("GB:Q", title="Weights (GB)", scale=alt.Scale(type="log", domain=[0.01, 5000])),
            y=alt.Y("format:N", title="Format", sort=list(_formats)),
        ).properties(width=420, height=160),
        title="Weights by number format",
    )
    return


if __name__ == "__main__":
    app.run()
