"""Lesson 8 offers PyTorch's trace (memmath/traced.py) for a model memmath refuses a verdict on because it does not
trace the model type's activations, as it does for a type memmath has no record for."""

from __future__ import annotations

import lessons
import marimo as mo

import memmath as mm

NAME = "08_planner"


def test_an_untraced_preset_is_offered_the_trace_with_its_published_fields():
    outputs, defs = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS),
                                                                          value="qwen3-next-80b-a3b"))
    assert lessons.bad_text(outputs) == []
    # Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: hidden_size 2048, 48 layers.
    assert defs["trace_config"]["model_type"] == "qwen3_next" and defs["trace_config"]["hidden_size"] == 2048
    text = lessons.plain_text(outputs)
    assert "memmath does not trace this model type's activations" in text


def test_a_traced_preset_is_not_offered_the_trace():
    _, defs = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="llama-3-8b"))
    assert defs["trace_config"] is None
