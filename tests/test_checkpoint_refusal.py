"""A model type whose checkpointed peak memmath does not model (its record's checkpointed_peak_refusal) gets a floor
and no verdict with checkpointing, and its modelled peak without: gpt-oss, whose recomputed block can peak in eager
sink attention's backward (held-out CPU steps in tests/test_families_gpt_oss_trace.py were up to 15% above the
checkpointed prediction)."""

from __future__ import annotations

import pytest

import memmath as mm


def test_gpt_oss_checkpointed_has_a_floor_and_no_verdict():
    plan = mm.plan_training("gpt-oss-20b", "H100 80GB", method=mm.LoRA(), seq_len=2048, checkpointing=True)
    need = plan.requirement
    assert need.basis == "floor" and plan.fits is None
    # The floor by its parts: weights, gradients and optimizer states, all alive at the optimizer step.
    memory = need.memory
    assert need.bytes == (memory.weights + memory.quantization_constants + memory.gradients
                          + memory.gradient_accumulation + memory.master_weights + memory.optimizer_states)
    assert "sink attention's backward" in need.reason and "without checkpointing" in need.fix
    with pytest.raises(mm.planner.VerdictRefused, match="sink attention"):
        mm.planner.largest_batch_that_fits("gpt-oss-20b", "H100 80GB", method=mm.LoRA(), seq_len=2048,
                                           checkpointing=True)


def test_gpt_oss_without_checkpointing_keeps_its_peak():
    plan = mm.plan_training("gpt-oss-20b", "H100 80GB", method=mm.LoRA(), seq_len=2048)
    assert plan.requirement.basis == "peak" and plan.fits in (True, False)


def test_a_type_whose_checkpointed_peak_is_modelled_keeps_it():
    need = mm.requirement("llama-3-8b", method=mm.LoRA(), seq_len=2048, checkpointing=True)
    assert need.basis == "peak"


def test_gemma_4_checkpointed_has_a_floor_and_its_plain_step_a_peak():
    # Gemma4TextConfig's defaults (transformers 5.24 configuration_gemma4.py): the per-layer inputs and store blocks.
    shape = mm.from_hf_config({"model_type": "gemma4_text"})
    checkpointed = mm.requirement(shape, method=mm.LoRA(), seq_len=1024, checkpointing=True)
    assert checkpointed.basis == "floor" and "store blocks" in checkpointed.reason
    assert mm.requirement(shape, method=mm.LoRA(), seq_len=1024).basis == "peak"
