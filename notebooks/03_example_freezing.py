# STAND-IN lesson for the static-site work (issue 6): delete it when the real lessons land.
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Example: freezing layers

    A stand-in lesson with one evenly spaced control: how many of ten layers are frozen.
    It links back to [the weights lesson](?file=01_example_weights.py), a link that works
    under `marimo run notebooks` and, rewritten by the build, in the static site.
    """)
    return


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import pandas as pd

    import memmath
    from memmath.static_charts import Slider, bound_chart, live_only_notice
    return Slider, alt, bound_chart, live_only_notice, memmath, mo, pd


@app.cell
def _(live_only_notice, mo):
    frozen_slider = mo.ui.slider(0, 9, value=9, label="Frozen layers (of 10)")
    mo.vstack([live_only_notice(), frozen_slider])
    return (frozen_slider,)


@app.cell
def _(frozen_slider, memmath, mo):
    _m = memmath.training_memory(memmath.uniform_model(7 * 10**9, 10), precision="bf16", optimizer="adamw",
                                 method=memmath.Freeze(frozen_layers=frozen_slider.value))
    mo.md(f"Trainable: **{_m.trainable_fraction:.1%}** of the parameters; "
          f"{memmath.format_bytes(_m.without_activations)} before activations.")
    return


@app.cell
def _(Slider, alt, bound_chart, memmath, pd):
    _rows = []
    for _frozen in range(0, 10):
        _m = memmath.training_memory(memmath.uniform_model(7 * 10**9, 10), precision="bf16", optimizer="adamw",
                                     method=memmath.Freeze(frozen_layers=_frozen))
        _rows += [{"frozen": _frozen, "part": memmath.PART_LABELS[p], "GB": memmath.to_unit(b, "GB")}
                  for p, b in _m.parts().items() if b]
    freeze_grid = pd.DataFrame(_rows)
    bound_chart(
        freeze_grid,
        [Slider("frozen", "Frozen layers", value=9)],
        lambda base: base.mark_bar().encode(
            x=alt.X("GB:Q", title="Memory (GB)", scale=alt.Scale(domain=[0, 60])),
            y=alt.Y("part:N", title=None),
        ).properties(width=420, height=100),
        title="A 7B model in ten layers, bf16 + AdamW",
    )
    return


if __name__ == "__main__":
    app.run()
