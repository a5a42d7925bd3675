"""Lesson 3's sweep: activations against weights and everything else, over the sequence length or the batch.

One memmath call over a numpy array of lengths or batch sizes (the other stays at the learner's
setting), the crossings where activations pass the weights alone and weights, gradients and
optimizer states together, and the rows of the sweep's live chart (`lesson_charts.activation_sweep`).
It lives here rather than in the notebook because marimo parses and compiles a notebook's whole code
each time a page opens, so code kept in the notebook slows its cold start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import memmath as mm

from . import viz

SWEEP_OVER = {
    "sequence length": np.array([128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]),
    "batch size": np.array([1, 2, 4, 8, 16, 32, 64, 128]),
}
"""What the sweep can run over (the lesson's radio options) and the points it takes."""

SERIES = ("Weights", "Weights + gradients + optimizer states", "Activations")
"""The sweep's three lines, in the legend's order."""


@dataclass(frozen=True)
class ActivationSweep:
    """A sweep's points, memmath's answer for them, the chart's unit and rows, and where activations overtake."""

    over: str
    values: np.ndarray
    memory: object  # memmath's TrainingMemory over the points
    unit: str
    x_title: str
    frame: pd.DataFrame
    crossover: int | None  # the first point where activations pass weights + gradients + optimizer states
    crossover_weights: int | None  # the first point where they pass the weights alone


def activation_sweep(model, *, over: str, seq_len: int, batch_size: int, attention: str, checkpointing: bool,
                     unit: str, activations: str | None = None, dropout: bool | None = None) -> ActivationSweep:
    """The sweep for lesson 3's model in pure bf16 with AdamW, over `over` ("sequence length" or "batch size").

    activations and dropout go to memmath as they are: None leaves them to memmath's defaults for the
    model (the exact trace of transformers' code and the config's dropout, for a model with a config);
    lesson 3 passes activations="textbook", dropout=True, the formula it teaches (Korthikanti et al. 2022).
    """
    if over not in SWEEP_OVER:
        raise ValueError(f"over must be one of {', '.join(SWEEP_OVER)}; got {over!r}")
    values = SWEEP_OVER[over].copy()  # the caller's own: a change to it leaves later sweeps alone
    by_length = over == "sequence length"
    memory = mm.training_memory(model, precision="bf16", optimizer="adamw", attention=attention,
                                checkpointing=checkpointing, seq_len=values if by_length else seq_len,
                                batch_size=batch_size if by_length else values, activations=activations,
                                dropout=dropout)
    acts = np.broadcast_to(memory.activations, values.shape)
    rest = np.broadcast_to(memory.without_activations, values.shape)
    weights = np.broadcast_to(memory.weights, values.shape)
    # The unit at the middle of the log axis (geometric mean of the smallest and largest values).
    sweep_unit = viz.readable_unit(int(np.sqrt(float(weights.min()) * float(max(acts.max(), rest.max())))), unit)
    over_rest, over_weights = values[acts > rest], values[acts > weights]
    crossover = int(over_rest[0]) if over_rest.size else None
    crossover_weights = int(over_weights[0]) if over_weights.size else None
    now = seq_len if by_length else batch_size
    series = dict(zip(SERIES, (weights, rest, acts)))
    # One table for every layer of the chart (the lines, your setting, the crossings).
    frame = pd.concat(
        [pd.DataFrame({"kind": "line", "x": values, "what": k, "size": mm.to_unit(v, sweep_unit), "fill": 0})
         for k, v in series.items()]
        + [pd.DataFrame([{"kind": "now", "x": now, "what": "", "size": 1.0, "fill": 0}])]
        + [pd.DataFrame([{"kind": "cross", "x": x, "what": "", "size": mm.to_unit(int(acts[values == x][0]), sweep_unit),
                          "fill": fill}])  # hollow past the weights, filled past everything
           for x, fill in ((crossover_weights, 0), (crossover, 1)) if x], ignore_index=True)
    x_title = "Sequence length s (tokens)" if by_length else "Batch size b (sequences)"
    return ActivationSweep(over=over, values=values, memory=memory, unit=sweep_unit, x_title=x_title, frame=frame,
                           crossover=crossover, crossover_weights=crossover_weights)
