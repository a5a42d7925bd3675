"""Lesson 8 on a model type whose activations are not checked against PyTorch (its record has no activation trace, or
LFM2 on a GPU, whose trace replays transformers' PyTorch path and not causal-conv1d's kernels):
the lesson shows the refusal and its reason instead of a verdict, searches nothing on it, never says "fits" for any
card, and never crashes; the API says the same (memmath/decision.py)."""

from __future__ import annotations

import marimo as mo
import pytest

import lessons
import memmath as mm

NAME = "08_planner"


@pytest.fixture(scope="module")
def lfm2():
    return lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS), value="lfm2-1.2b"))


def test_the_lesson_refuses_the_verdict_by_name(lfm2):
    outputs, defs = lfm2
    text = lessons.plain_text(outputs)
    assert lessons.bad_text(outputs) == []
    need = defs["requirement"]
    assert need.basis == "floor" and need.bytes == mm.requirement(defs["run"]).bytes  # the API's floor
    assert defs["plan"].fits is None and defs["verdict"].fits is None
    assert "It has no verdict" in text and "It fits" not in text
    # LFM2 is traced along transformers' PyTorch path only: on a GPU (causal-conv1d's kernels) its reason names the run
    # that gets a verdict
    assert "'lfm2'" in text and "not checked against PyTorch" in text and "--mixer-kernels torch" in " ".join(
        text.split())
    assert "Not searched" in text and "No change is judged" in text
    assert defs["suggestions"] == [] and defs["limits"] is None


def test_no_card_of_the_catalog_is_said_to_fit(lfm2):
    # the catalog's every card: "no verdict" where the floor fits it, "no" where it does not, never "yes"
    import re
    text = lessons.plain_text(lfm2[0])
    catalog = text[text.index("Which cards in the catalog"):]
    assert "left for the activations no verdict" in catalog
    assert not re.search(r"to spare yes", catalog)


def test_a_floor_too_large_does_not_fit_in_the_lesson():
    # Qwen3-Next-80B-A3B (a floor: its DeltaNet blocks run other kernels on CUDA), full finetuning in pure bf16 with
    # AdamW: at least 8 B a parameter, more than the default RTX 4090
    outputs, defs = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(list(mm.PRESETS),
                                                                          value="qwen3-next-80b-a3b"))
    text = lessons.plain_text(outputs)
    assert lessons.bad_text(outputs) == [] and defs["plan"].fits is False
    assert "It does not fit: short by at least" in text and "Not searched" in text
