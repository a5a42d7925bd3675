"""Lesson 11's pieces: what each parallel axis splits, one bar per pipeline stage, and the Playbook's widget.

Every number comes from memmath (memmath/parallel.py: what each rank of a Run holds); this module arranges them
for the lesson, so that the notebook stays short (marimo parses every line of it at each page open).
"""

from __future__ import annotations

import functools
import shlex

import pandas as pd

import memmath as mm
from memmath import parallel
from memmath.units import UNITS, unit_name

from . import viz

__all__ = ["AXIS_ROWS", "BUFFER_COLOR", "BUFFER_LABEL", "PLAYBOOK_70B", "axis_table", "cli_command", "playbook_table",
           "playbook_widget", "stage_bars", "stage_chart", "stage_memories", "stage_needs"]

BUFFER_PART = "buffers"
BUFFER_LABEL = "Communication buffers"
BUFFER_COLOR = "#EECA3B"  # a yellow no part uses (viz.PART_COLORS)

# One layout per row of "what each axis splits", on 8 GPUs: (label, Run settings, what it takes off each GPU).
AXIS_ROWS = (
    ("1 GPU", dict(n_gpus=1), "nothing"),
    ("data x 8", dict(n_gpus=8), "only the batch (each GPU its own sequences)"),
    ("data x 8, ZeRO-1", dict(n_gpus=8, zero_stage=1), "the optimizer states"),
    ("data x 8, ZeRO-2", dict(n_gpus=8, zero_stage=2), "states and gradients"),
    ("data x 8, ZeRO-3", dict(n_gpus=8, zero_stage=3), "states, gradients and weights"),
    ("tensor x 8", dict(n_gpus=8, tp=8), "block matrices, vocabulary, most activations"),
    ("tensor x 8 + sequence parallel", dict(n_gpus=8, tp=8, sequence_parallel=True), "and the norms' activations"),
    ("pipeline x 8 (1F1B, 8 micro-batches)", dict(n_gpus=8, pp=8, micro_batches=8),
     "the layers (not the micro-batches in flight)"),
)


def axis_table(model: str, unit: str = "GB", **settings) -> pd.DataFrame:
    """One row per layout of AXIS_ROWS for `model`: the parts of the GPU the requirement judges, in `unit`, and what
    the card must hold (memmath.requirement: the step's peak where memmath models it, of the rank whose peak is
    highest when the model is split; else the worst rank's sum of parts plus buffers)."""
    per_unit = UNITS[unit_name(unit)]
    rows = []
    for label, layout, splits in AXIS_ROWS:
        run = mm.Run(model, **settings, **layout)
        need = mm.requirement(run)
        parts = need.memory.parts()  # the parts of the GPU whose requirement is the run's
        held = parts["gradients"] + parts["gradient_accumulation"]
        states = parts["master_weights"] + parts["optimizer_states"]
        rows.append({"layout": label, f"weights ({unit})": round(parts["weights"] / per_unit, 2),
                     f"gradients ({unit})": round(held / per_unit, 2),
                     f"optimizer states ({unit})": round(states / per_unit, 2),
                     f"activations ({unit})": round(parts["activations"] / per_unit, 2),
                     # Every row's sum on one basis, so that a row judged on its peak and a ZeRO row judged on a
                     # bound (no peak model) can be set side by side on the same footing.
                     f"sum of the parts ({unit})": round(int(need.memory.total) / per_unit, 2),
                     f"the card must hold ({unit})": round(need.bytes / per_unit, 2),
                     "judged on": need.short,  # peak, bound (an upper bound on the peak) or sum
                     "takes off each GPU": splits})
    return pd.DataFrame(rows)


def stage_memories(run) -> dict:
    """{"stage s (rank r)": ParallelMemory} of each pipeline stage's first tensor rank (the stage's largest)."""
    return dict(_stage_memories(run))


# Kept per Run (hashable), as memmath keeps each run's requirement: a layout the learner returns to, or a unit
# switch, costs nothing; each stage's memory and peak replays the schedule (10-20 ms a layout).
@functools.lru_cache(maxsize=256)
def _stage_memories(run) -> dict:
    lay = parallel.layout(run)
    if not parallel.is_parallel(run):
        return {"the one GPU": parallel.parallel_memory(run)}
    step = lay.tp * lay.cp * lay.dp
    return {f"stage {stage} (rank {stage * step})": parallel.parallel_memory(run.replace(rank=stage * step))
            for stage in range(lay.pp)}


def stage_needs(run, stages: dict | None = None) -> dict:
    """{"stage s (rank r)": bytes} what the card must hold for each stage's first tensor rank, as requirement()
    judges the run: that rank's step peak (memmath.parallel.parallel_peak) where memmath models the run's peak,
    else its sum of parts plus buffers. The largest is requirement(run).bytes. stages: stage_memories(run), when
    the caller has it already (a slider's move then builds each stage's memory once)."""
    if stages is None:
        return dict(_stage_needs(run))
    if not parallel.is_parallel(run):
        return {name: mm.requirement(run).bytes for name in stages}
    peak = not parallel.peak_why_not(run)
    return {name: parallel.parallel_peak(run, one.rank)["total"] if peak else one.total for name, one in stages.items()}


@functools.lru_cache(maxsize=256)
def _stage_needs(run) -> dict:
    return stage_needs(run, _stage_memories(run))


@functools.lru_cache(maxsize=256)
def stage_chart(run, unit: str = "GB", *, title: str = "", capacity_bytes=None, capacity_label: str = ""):
    """stage_bars of the run's stages and what the card must hold for each, kept per run and drawing (a slider
    moved back and forth draws each layout once)."""
    return stage_bars(_stage_memories(run), unit, title=title, capacity_bytes=capacity_bytes,
                      capacity_label=capacity_label, needs=_stage_needs(run))


def stage_bars(stages: dict, unit: str = "GB", *, title: str = "", capacity_bytes=None, capacity_label: str = "",
               needs: dict | None = None):
    """viz.stacked_bars_output of each stage's parts, its communication buffers one more segment, and a black
    tick at what the card must hold for it (needs: stage_needs(run); the sum of parts and buffers when None).

    The colour scale always names the buffers' segment, so that the spec stays the same whichever layout has
    buffers (a live chart then takes only new rows)."""
    frame = viz.breakdown_long({name: one.memory for name, one in stages.items()}, unit)
    per_unit = UNITS[unit_name(unit)]
    extra = [{"scenario": name, "part": BUFFER_PART, "label": BUFFER_LABEL, "bytes": one.buffer_bytes,
              "size": one.buffer_bytes / per_unit, "order": len(mm.training.PART_LABELS)}
             for name, one in stages.items() if one.buffer_bytes]
    if extra:
        frame = pd.concat([frame, pd.DataFrame(extra, columns=frame.columns)], ignore_index=True)
    needs = {name: one.total for name, one in stages.items()} if needs is None else needs
    output = viz.stacked_bars_output(frame, unit, title=title, capacity_bytes=capacity_bytes,
                                     capacity_label=capacity_label, peaks=needs)
    spec = output.spec
    bars = spec["layer"][0] if "layer" in spec else spec
    color = bars["encoding"]["color"]
    color["scale"] = {"domain": [*color["scale"]["domain"], BUFFER_LABEL],
                      "range": [*color["scale"]["range"], BUFFER_COLOR]}
    color["sort"] = [*color["sort"], BUFFER_LABEL]
    if needs and "layer" in spec:  # the ticks (stacked_bars_output draws them last): what each marks
        for row in spec["layer"][-1]["data"]["values"]:
            row["what"] = "what the card must hold for this stage"
    return viz.SpecOutput(spec)


def cli_command(run, gpu: str) -> str:
    """The `memmath train` line that asks the command line about the same run on `gpu` (its options are the ones
    memmath.cli names for each Run field, FIELD_OPTIONS; a setting at its default is left out)."""
    from memmath.cli import FIELD_OPTIONS

    words = ["memmath", "train", run.model.name]
    for field, default in (("n_gpus", 1), ("zero_stage", 0), ("tp", 1), ("pp", 1), ("cp", 1), ("ep", 1),
                           ("micro_batches", 1), ("pp_schedule", "1f1b"), ("virtual_stages", 1)):
        if getattr(run, field) != default:
            words += [FIELD_OPTIONS[field], str(getattr(run, field))]
    words += [FIELD_OPTIONS[flag] for flag in ("sequence_parallel", "checkpointing") if getattr(run, flag)]
    words += [FIELD_OPTIONS["batch_size"], str(run.batch_size), FIELD_OPTIONS["seq_len"], str(run.seq_len),
              FIELD_OPTIONS["gpu"], gpu]
    return " ".join(shlex.quote(w) for w in words)


# ---- the Ultra-Scale Playbook's memory widget ----------------------------------------------------------------
# The widget of "The Ultra-Scale Playbook" (Hugging Face, 2025), section "Memory usage in transformers": its
# functions paramGradsOpt and activationMemory (main.bundle.js of the playbook's page; mirrored at
# github.com/vinjn/nanotron-ultrascale-playbook), ported line by line, and its "Llama 3 70B" preset.
PLAYBOOK_70B = dict(a=64, b=32, h=8192, h_ff=32768, L=80, s=256, v=30522, k=8, tp=8, zero=1, dp=8, mixed=True,
                    recomputation="none", ff_activation="swiglu", seq_parallel=False)


def playbook_widget(a, b, h, h_ff, L, s, v, k=8, tp=1, zero=0, dp=1, mixed=True, recomputation="none",
                    ff_activation="relu", seq_parallel=False) -> dict:
    """The widget's bytes per GPU: {"Parameters", "Gradients", "OptimizerAverages", "Activations"} (floats, as the
    widget's JavaScript computes them). Only recomputation "none" or "selective" and swiglu/gelu/relu."""
    e = 2 if mixed else 4  # bytesPerValue
    sbh = s * b * h
    if recomputation not in ("none", "selective"):
        raise ValueError("recomputation must be 'none' or 'selective' here")
    attention = (sbh / tp * (e * 5 + 1) if seq_parallel else sbh * (e * 4 / tp + e + 1))
    if recomputation == "none":  # eq (2) of Korthikanti et al. 2022: the s x s softmax, its dropout mask
        attention += (2 * e + 1) * a * s * s * b / (1 if seq_parallel else tp)
    mlp_in = sbh * e / tp if seq_parallel else sbh * e
    dropout = sbh / tp if seq_parallel else sbh
    act = {"relu": 0, "gelu": 1, "swiglu": 3}[ff_activation]
    feedforward = mlp_in + s * b * h_ff * e / tp + act * s * b * h_ff * e / tp + dropout
    norm = sbh * e / tp if seq_parallel else sbh * e
    per_layer = attention + feedforward + 2 * norm
    shard = tp if seq_parallel else 1
    top = sbh / shard + sbh * e / shard + sbh * e / shard + s * b * v * 4 / shard  # dropout, norm, projection, loss
    n = h * (v + s) + L * (12 * h * h + 13 * h) + 2 * h  # embeddings (tokens and positions), blocks, final norm
    k = k + 4 if mixed else k  # the fp32 master copy rides with the optimizer's states
    weight_bytes = 2 if mixed else 4
    return {"Parameters": weight_bytes * n / dp if zero >= 3 else weight_bytes * n,
            "Gradients": weight_bytes * n / dp if zero >= 2 else weight_bytes * n,
            "OptimizerAverages": k * n / dp if zero >= 1 else k * n,
            "Activations": L * per_layer + top, "parameters counted": n}


def playbook_memmath_run(preset: dict = PLAYBOOK_70B, model: str = "llama-3-70b"):
    """The widget's run as a memmath Run on the real model: its batch and length, its degrees and ZeRO stage, mixed
    precision with an fp32 master copy and fp32 Adam states (the widget's 2 + 2 + 12 B per parameter)."""
    return mm.Run(model, precision="mixed" if preset["mixed"] else "fp32", optimizer="adam",
                  batch_size=preset["b"], seq_len=preset["s"], n_gpus=preset["tp"] * preset["dp"], tp=preset["tp"],
                  zero_stage=preset["zero"], sequence_parallel=preset["seq_parallel"])


def playbook_table(unit: str = "GB") -> tuple[pd.DataFrame, dict, object]:
    """The widget's Llama 3 70B preset against memmath's run of it: (table, the widget's numbers, memmath's rank)."""
    widget = playbook_widget(**PLAYBOOK_70B)
    one = parallel.worst_rank(playbook_memmath_run())
    parts = one.memory.parts()
    per_unit = UNITS[unit_name(unit)]
    rows = [("weights", widget["Parameters"], parts["weights"]),
            ("gradients", widget["Gradients"], parts["gradients"]),
            ("optimizer states (and the fp32 master copy)", widget["OptimizerAverages"],
             parts["master_weights"] + parts["optimizer_states"]),
            ("activations", widget["Activations"], parts["activations"]),
            ("per GPU", sum(widget[p] for p in ("Parameters", "Gradients", "OptimizerAverages", "Activations")),
             one.total)]
    table = pd.DataFrame([{"part": name, f"the widget ({unit})": round(w / per_unit, 2),
                           "the widget prints": f"{w / 1024**3:.2f} \"GB\" (GiB)",
                           f"memmath, Llama-3-70B ({unit})": round(m / per_unit, 2)} for name, w, m in rows])
    return table, widget, one
