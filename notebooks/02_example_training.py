# STAND-IN lesson for the static-site work (issue 6): delete it when the real lessons land.
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Example: full finetuning, part by part")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # Example: full finetuning, part by part

    A stand-in lesson: the parts of a training step as a stacked bar, live under `marimo run`,
    and a bound copy with its own inputs that keeps working in the static site.
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
def _(live_only_notice, memmath, mo):
    billions_slider = mo.ui.slider(1, 70, value=7, step=1, label="Parameters (billions)")
    optimizer_dropdown = mo.ui.dropdown(list(memmath.OPTIMIZERS), value="adamw", label="Optimizer")
    batch_slider = mo.ui.slider(1, 64, value=8, step=1, label="Batch size")
    mo.vstack([live_only_notice(), billions_slider, optimizer_dropdown, batch_slider])
    return batch_slider, billions_slider, optimizer_dropdown


@app.cell
def _(batch_slider, billions_slider, memmath, optimizer_dropdown):
    model = memmath.uniform_model(billions_slider.value * 10**9, 32, hidden_size=4096, n_heads=32, vocab_size=32000)
    memory = memmath.training_memory(model, precision="bf16", optimizer=optimizer_dropdown.value,
                                     batch_size=batch_slider.value, seq_len=512, checkpointing=True)
    return (memory,)


@app.cell
def _(alt, memory, memmath, mo):
    _frame = memory.to_frame("GB")
    _chart = alt.Chart(_frame[_frame["bytes"] > 0]).mark_bar().encode(
        x=alt.X("GB:Q", title="Memory (GB)", stack="zero"),
        color=alt.Color("label:N", title="Part"),
    ).properties(width=420, height=60)
    mo.vstack([mo.md(f"Total: **{memmath.format_bytes(memory.total)}**"), _chart])
    return


@app.cell
def _(Select, Slider, alt, bound_chart, memmath, pd):
    _rows = []
    for _billions in (1, 3, 7, 13, 34, 70):
        for _optimizer in ("sgd", "adamw", "adam8bit"):
            _m = memmath.training_memory(memmath.uniform_model(_billions * 10**9, 32), precision="bf16",
                                         optimizer=_optimizer)
            _rows += [{"billions": _billions, "optimizer": _optimizer, "part": memmath.PART_LABELS[p], "GB": memmath.to_unit(b, "GB")}
                      for p, b in _m.parts().items() if b]
    training_grid = pd.DataFrame(_rows)
    bound_chart(
        training_grid,
        [Slider("billions", "Parameters", value=7, labels=lambda b: f"{b}B"), Select("optimizer", "Optimizer", value="adamw")],
        lambda base: base.mark_bar().encode(
            x=alt.X("sum(GB):Q", title="Memory before activations (GB)", scale=alt.Scale(domain=[0, 600])),
            color=alt.Color("part:N", title="Part"),
        ).properties(width=420, height=60),
        title="Full finetuning in pure bf16",
    )
    return


if __name__ == "__main__":
    app.run()
