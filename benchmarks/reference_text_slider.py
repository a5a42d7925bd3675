# The text-only reference of benchmarks/lesson_speed.py: one slider, one memmath call, one number and no chart,
# measured beside the one-slider chart reference, so a lesson's ratio can be read against both floors.
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Reference: one slider, text only
    """)
    return


@app.cell
def _():
    import marimo as mo

    import memmath
    return memmath, mo


@app.cell
def _(mo):
    billions_slider = mo.ui.slider(1, 70, value=7, step=1, label="Parameters (billions)")
    billions_slider
    return (billions_slider,)


@app.cell
def _(billions_slider, memmath, mo):
    _memory = memmath.training_memory(memmath.uniform_model(billions_slider.value * 10**9, 32),
                                      precision="bf16", optimizer="adamw")
    mo.md(f"Before activations: **{memmath.format_bytes(_memory.without_activations)}**")
    return


if __name__ == "__main__":
    app.run()
