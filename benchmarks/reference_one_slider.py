# The reference notebook of benchmarks/lesson_speed.py: the least a lesson does (one slider, one
# memmath call, one number, one altair chart), so the ratios measure what a lesson adds to that.
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Reference: one slider
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath
    return alt, memmath, mo


@app.cell
def _(mo):
    billions_slider = mo.ui.slider(1, 70, value=7, step=1, label="Parameters (billions)")
    billions_slider
    return (billions_slider,)


@app.cell
def _(alt, billions_slider, memmath, mo):
    _memory = memmath.training_memory(memmath.uniform_model(billions_slider.value * 10**9, 32),
                                      precision="bf16", optimizer="adamw")
    _frame = _memory.to_frame("GB")
    _chart = alt.Chart(_frame).mark_bar().encode(x=alt.X("GB:Q", title="Memory (GB)"), color=alt.Color("label:N"))
    mo.vstack([mo.md(f"Before activations: **{memmath.format_bytes(_memory.without_activations)}**"), _chart])
    return


if __name__ == "__main__":
    app.run()
