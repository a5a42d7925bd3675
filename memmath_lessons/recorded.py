"""The lessons' views of the recorded PyTorch measurements (`memmath_lessons.reference`'s data, recorded by
validation/measure.py and validation/quantized.py): which recorded case a lesson's controls pick, and
tables of measured against predicted bytes. The prose about them stays in the lessons.

They live here rather than in the notebooks because marimo parses and compiles a notebook's whole
code each time a page opens (lesson 3's cold start was mostly its code).
"""

from __future__ import annotations

import pandas as pd

from memmath.activations import korthikanti_terms
from memmath_lessons.reference import predict_case
from memmath_lessons.reference.measured import predict_peak_case

SAVED_PLACES = ("in the blocks", "outside the blocks (embeddings, head, loss)")
"""The two places lesson 3's chart splits the saved bytes into (its colours, in this order)."""


def full_finetuning_case(cases: pd.DataFrame, *, shape: str, attention: str, dropout: bool,
                         checkpointing: bool) -> pd.Series:
    """Lesson 3's recorded case for its controls: full finetuning with AdamW, 2 sequences of 64 tokens, in bf16
    where both precisions were recorded. A KeyError names the controls when no case matches."""
    match = cases[(cases["shape"] == shape) & (cases["method"] == "full") & (cases["optimizer"] == "adamw")
                  & (cases["batch_size"] == 2) & (cases["seq_len"] == 64) & (cases["attention"] == attention)
                  & (cases["dropout"] == dropout) & (cases["checkpointing"] == checkpointing)]
    if match.empty:
        raise KeyError(f"no recorded full-finetuning case for shape={shape!r}, attention={attention!r}, "
                       f"dropout={dropout}, checkpointing={checkpointing}")
    return match.sort_values("precision").iloc[0]


def saved_bytes_frame(case: pd.Series, transformers, textbook, blocks_transformers: int) -> pd.DataFrame:
    """What the forward pass saved, in the blocks and outside them: measured, then memmath's two activation
    models (`transformers` and `textbook` are their activation_detail; `blocks_transformers` the first's bytes
    booked per block, as the measurement books them). Columns: source, where, KB (1 KB = 1,000 B), bytes, order."""
    bars = {"Measured (PyTorch, CPU)": (sum(case["saved_per_layer"]), case["saved_outside_layers"]),
            'memmath, activations="transformers"': (blocks_transformers,
                                                    transformers.saved_by_forward - blocks_transformers),
            'memmath, activations="textbook"': (textbook.layers, textbook.outside_layers + textbook.loss)}
    return pd.DataFrame([{"source": source, "where": where, "KB": int(n) / 1000, "bytes": int(n), "order": i}
                         for source, parts in bars.items() for i, (where, n) in enumerate(zip(SAVED_PLACES, parts))])


FORMULA_COLUMN = "what the formula counts (a GPT block)"


def formula_terms_frame(case: pd.Series) -> pd.DataFrame:
    """Korthikanti et al.'s terms for one block at the case's sizes, its dropout and attention, with activations
    and dropout masks at the case's element size (4 B in fp32, else 2 B: PyTorch keeps the masks in the
    activations' dtype on the CPU); with checkpointing the one tensor a block keeps, its input (s·b·h elements;
    Chen et al. 2016). Columns: FORMULA_COLUMN, bytes."""
    element = 4 if case["precision"] == "fp32" else 2
    s, b, h = int(case["seq_len"]), int(case["batch_size"]), int(case["hidden_size"])
    if case["checkpointing"]:
        return pd.DataFrame([{FORMULA_COLUMN: "block input (checkpointed)", "bytes": s * b * h * element}])
    terms = korthikanti_terms(seq_len=s, batch_size=b, hidden_size=h, n_heads=int(case["n_heads"]),
                              element_bytes=element, mask_bytes=element, dropout=bool(case["dropout"]),
                              attention=case["attention"])
    return pd.DataFrame([{FORMULA_COLUMN: t.tensor, "bytes": int(t.bytes)} for t in terms])


def quantized_parts_frame(case: pd.Series) -> pd.DataFrame:
    """One recorded QLoRA run (validation/quantized.py) part by part, measured against memmath's prediction:
    columns part, measured (B), memmath (B), difference ("equal" or the relative gap)."""
    predicted = predict_case(case)
    parts = (
        ("weights (packed base, the rest, adapters)", case["param_bytes"], predicted.weights),
        ("quantization constants", case["quantization_constant_bytes"], predicted.quantization_constants),
        ("gradients (adapters only)", case["grad_bytes"], predicted.gradients),
        ("optimizer states (adapters only)", case["optimizer_state_bytes"], predicted.optimizer_states),
        # an 8-bit base's matmul keeps its input itself, outside autograd's saved tensors (held_by_ctx_bytes)
        ("saved activations", case["saved_bytes"] + case["held_by_ctx_bytes"],
         predicted.activation_detail.saved_by_forward),
        ("peak of step 2", case["peak_step2_bytes"], predict_peak_case(case).total),
    )
    return pd.DataFrame([{"part": part, "measured (B)": int(measured), "memmath (B)": int(memmath),
                          "difference": "equal" if int(memmath) == int(measured) else
                          f"{int(memmath) / int(measured) - 1:+.1%}"} for part, measured, memmath in parts])


def timeline_frame(recorded: dict):
    """One recorded timeline (memmath_lessons.reference.measured.load_measured_timelines) beside memmath's moments:
    columns time, MB, kind ("measured" or "memmath"), phase; memmath's moments placed evenly inside their phase."""
    from memmath_lessons.reference.measured import case_arguments, case_model
    from memmath.timeline import step_timeline

    series = recorded["series"]
    stride = max(1, len(series) // 50)  # about 50 points a case: the page carries four of them
    top = max(range(len(series)), key=lambda i: series[i][1])
    rows = [{"time": t, "MB": b / 1e6, "kind": "measured", "phase": ""}
            for i, (t, b) in enumerate(series) if i % stride == 0 or i == top]
    timeline = step_timeline(case_model(recorded["row"]), **case_arguments(recorded["row"]))
    for phase, (start, end) in recorded["phases"].items():
        inside = [p for p in timeline.points if p.phase == phase]
        for i, point in enumerate(inside):
            rows.append({"time": start + (end - start) * (i + 1) / (len(inside) + 1), "MB": point.total / 1e6,
                         "kind": "memmath", "phase": point.short})
    return pd.DataFrame(rows), timeline


def timeline_view():
    """Lesson 3's fold: each recorded CPU step as a line, memmath's moments as points, and a table of peaks."""
    import marimo as mo
    from memmath_lessons.reference.measured import load_measured_timelines
    from memmath.units import format_bytes

    from . import lesson_charts, viz

    frames, table = [], []
    for recorded in load_measured_timelines():
        frame, timeline = timeline_frame(recorded)
        case = recorded["row"]["case_id"]
        frames.append(frame.assign(case=case))
        measured, predicted = recorded["peak_step2_bytes"], timeline.peak.total
        table.append({"case": case, "measured peak": format_bytes(measured, "MB"),
                      "memmath's peak": format_bytes(predicted, "MB"),
                      "difference": f"{(predicted - measured) / measured:+.2%}"})

    return mo.vstack([mo.md(
        "Four small models (3 blocks, width 64, a 1,000-token vocabulary; 4 sequences of 128 tokens), each run for "
        "two training steps on a CPU under the PyTorch profiler, as the rest of memmath's measurements are "
        "(`validation/timeline.py`). The blue line is what step 2 had allocated at every allocation event; the "
        "red points are memmath's moments, placed evenly inside the phase they belong to (memmath says how "
        "high, not exactly when). These were recorded after `memmath.step_timeline` was written."),
        viz.plain_table(pd.DataFrame(table)), lesson_charts.measured_timeline(pd.concat(frames))])


def quantized_peaks_within(cases: pd.DataFrame, tolerance: float = 0.05) -> tuple[int, int]:
    """(steps whose predicted peak is within `tolerance` of the measured one, steps) over both steps of every
    recorded QLoRA run (validation/quantized.py), as tests/test_fidelity.py holds them."""
    within = total = 0
    for _, row in cases.iterrows():
        for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")):
            predicted = int(predict_peak_case(row, step=step).total)
            within += abs(predicted - row[column]) <= tolerance * row[column]
            total += 1
    return within, total
