"""A slider whose steps another control changes, without a new slider: the element stays.

Lesson 3's heads slider offers only the head counts that divide the width (each head gets a whole
share of it), so every width move changes its steps. With `mo.ui.slider` that takes a second cell
that builds a new slider on each move, and the browser mounting it again cost a width move some
15-25 ms more than any other move (measured in the browser). A `StepSlider` is an anywidget shown once; the cell
that reads the width hands it new steps and the page moves only its thumb::

    @app.cell
    def _(preset, step_slider):                 # reads no slider: runs once per preset
        heads_slider = step_slider(divisors(preset.hidden_size), value=preset.n_heads, label="Heads")
        heads_slider
        return (heads_slider,)

    @app.cell
    def _(heads_slider, width_slider):          # re-runs on a width or a heads move
        heads_slider.steps = divisors(width_slider.value)  # sent to the page; no re-run follows
        n_heads = heads_slider.shown            # the step the thumb is on

The learner's last choice (`chosen`, kept when the steps change) and the step shown differ when
the choice is not among the new steps: the slider shows the largest step at most the choice (the
first step if none is), as `shown` says, and a move sets the choice to the step moved to. Only a
learner's move re-runs the cells that read the slider (it is a `mo.ui.anywidget`); new steps from
Python travel to the page alone.

It looks and behaves as marimo's slider does (label, track, thumb, the value beside it; arrow keys,
Home and End), and, like it, carries `role=slider` and `aria-valuenow`, so the browser tests and the
speed benchmark press it as they press marimo's. In the static site (an export with
MEMMATH_STATIC_EXPORT=1) it shows the export's state, frozen as the site freezes marimo's own controls
(inert, disabled, faded): no kernel would answer a move, so the thumb must not move away from the
numbers beside it.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

STATIC = Path(__file__).resolve().parent / "static"


class StepSlider(anywidget.AnyWidget):
    """A slider over a list of steps that Python may replace (see the module docstring)."""

    _esm = (STATIC / "step_slider.js").read_text(encoding="utf-8")
    steps = traitlets.List(default_value=[1]).tag(sync=True)  # checked_steps: whole numbers, increasing
    chosen = traitlets.Int(1).tag(sync=True)
    label = traitlets.Unicode("").tag(sync=True)
    disabled = traitlets.Bool(False).tag(sync=True)  # frozen: takes no clicks or keys, drawn faded

    @traitlets.validate("steps")
    def _valid_steps(self, proposal):
        return checked_steps(proposal["value"])

    @property
    def shown(self) -> int:
        """The step the thumb is on: the largest step at most the learner's choice, else the first."""
        return shown_step(self.steps, self.chosen)


def checked_steps(steps) -> list:
    """`steps` as a list of ints, or a ValueError naming the field: at least one, strictly increasing."""
    steps = list(steps)
    if not steps:
        raise ValueError("steps must hold at least one value; got none")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        raise ValueError(f"steps must be whole numbers; got {steps!r}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"steps must increase strictly; got {steps!r}")
    return steps


def shown_step(steps, chosen: int) -> int:
    """The largest of `steps` at most `chosen`, or the first step if every step is larger."""
    below = [s for s in steps if s <= chosen]
    return below[-1] if below else steps[0]


def step_slider(steps, *, value: int, label: str = ""):
    """A `mo.ui.anywidget` StepSlider over `steps`, on the largest step at most `value` (frozen in a static
    export, see the module docstring)."""
    import marimo as mo

    from .static_charts import is_static_export

    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"value must be a whole number; got {value!r}")
    if not isinstance(label, str):
        raise ValueError(f"label must be text; got {type(label).__name__}")
    return mo.ui.anywidget(StepSlider(steps=checked_steps(steps), chosen=value, label=label,
                                      disabled=is_static_export()))
