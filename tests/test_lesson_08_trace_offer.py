"""Lesson 8 offers PyTorch's trace (memmath/traced.py) for a model memmath refuses a verdict on because it does not
trace the model type's activations, as it does for a type memmath has no record for; a model whose mixers run CUDA
kernels memmath does not trace gets the choice of transformers' PyTorch path instead."""

from __future__ import annotations

import lessons
import marimo as mo

import memmath as mm

NAME = "08_planner"


def test_a_model_whose_mixers_run_cuda_kernels_gets_the_choice_and_a_verdict_on_the_pytorch_path():
    # Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: gated DeltaNet mixers, traced on transformers' PyTorch path only.
    preset = mo.ui.dropdown(list(mm.PRESETS), value="qwen3-next-80b-a3b")
    outputs, defs = lessons.run_with(NAME, preset_dropdown=preset)
    assert lessons.bad_text(outputs) == []
    text = lessons.plain_text(outputs)
    assert "This model's mixers run" in text and "flash-linear-attention" in text
    assert defs["requirement"].basis == "floor" and defs["fit"].fits is not True  # the CUDA kernels: no verdict
    assert defs["trace_config"] is None  # traced: PyTorch's own trace is not what it lacks
    torch_path = mo.ui.radio({"their CUDA kernels": "cuda", "transformers' PyTorch path": "torch"},
                             value="transformers' PyTorch path")
    _, defs = lessons.run_with(NAME, preset_dropdown=preset, kernels_radio=torch_path)
    assert defs["run"].mixer_kernels == "torch" and defs["requirement"].basis == "peak"
    assert defs["requirement"] == mm.requirement(defs["run"])  # the lesson's number is the API's for that run


def test_a_model_without_such_mixers_is_not_shown_the_choice():
    outputs, _ = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="llama-3-8b"))
    assert "This model's mixers run" not in lessons.plain_text(outputs)


def test_a_traced_preset_is_not_offered_the_trace():
    _, defs = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="llama-3-8b"))
    assert defs["trace_config"] is None
