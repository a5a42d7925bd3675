"""A model type whose checkpointed peak memmath does not model (its record's checkpointed_peak_refusal) gets a floor
and no verdict with checkpointing, and its modelled peak without: Gemma 4, whose store blocks keep their keys, values
and recomputed graph to the end of backward (held-out CPU steps in tests/test_families_gemma4_trace.py were up to 9%
above the checkpointed prediction). gpt-oss, refused so until its recomputed block's sink attention backward was
priced, keeps its peak with checkpointing."""

from __future__ import annotations

import pytest

import memmath as mm


def test_gpt_oss_checkpointed_keeps_its_peak_and_verdict():
    plan = mm.plan_training("gpt-oss-20b", "H100 80GB", method=mm.LoRA(), seq_len=2048, checkpointing=True)
    assert plan.requirement.basis == "peak" and plan.fits in (True, False)
    assert not mm.decision.checkpoint_refusal(plan.requirement.run)
    mm.planner.largest_batch_that_fits("gpt-oss-20b", "H100 80GB", method=mm.LoRA(), seq_len=2048,
                                       checkpointing=True)  # searches: no VerdictRefused


def test_gpt_oss_checkpointed_peak_prices_the_sink_attention_backward():
    # gpt-oss-20b (openai/gpt-oss-20b config.json: 64 query heads), b 1 x s 2048, bf16 LoRA: the first recomputed
    # block's sink attention backward holds, by hand, the softmax's b x a x s x (s + 1) gradient, the max's
    # scattered zeros and the CPU scatter's fp32 buffer of the same size: (2 + 2 + 4) x 64 x 2048 x 2049 bytes,
    # beside the repeated v's gradient (t x a x d x 2) and the max's b x a x s gradient (2 bytes each)
    peak = mm.peak_memory("gpt-oss-20b", method=mm.LoRA(), seq_len=2048, batch_size=1, checkpointing=True,
                          precision="bf16", device="cpu")
    moments = {label: value for phase, label, value in peak.moments if phase == "backward"}
    first = next(v for label, v in moments.items() if label.startswith("in the first block's recomputed backward"))
    attention = 8 * 64 * 2048 * 2049 + 2048 * 64 * 64 * 2 + 64 * 2048 * 2
    assert first - peak.resident >= attention and peak.backward >= first


def test_a_type_whose_checkpointed_peak_is_modelled_keeps_it():
    need = mm.requirement("llama-3-8b", method=mm.LoRA(), seq_len=2048, checkpointing=True)
    assert need.basis == "peak"


def test_gemma_4_checkpointed_has_a_floor_and_its_plain_step_a_peak():
    # Gemma4TextConfig's defaults (transformers 5.24 configuration_gemma4.py): the per-layer inputs and store blocks.
    shape = mm.from_hf_config({"model_type": "gemma4_text"})
    checkpointed = mm.requirement(shape, method=mm.LoRA(), seq_len=1024, checkpointing=True)
    assert checkpointed.basis == "floor" and "store blocks" in checkpointed.reason
    assert mm.requirement(shape, method=mm.LoRA(), seq_len=1024).basis == "peak"


def test_the_changes_offered_leave_out_a_refused_checkpointing():
    # Llama 4 Scout without checkpointing has a peak and a verdict; checkpointing it would give a floor, which judges
    # nothing, so no search offers it (before, path_to_fit took it as a step and then refused its own next step).
    run = mm.Run("llama-4-scout", method=mm.LoRA(targets=("experts",)), seq_len=2048)
    assert mm.requirement(run).basis == "peak" and mm.requirement(run.replace(checkpointing=True)).refused
    for found in (mm.planner.suggest_changes(run, "H100 80GB"), mm.planner.path_to_fit(run, "H100 80GB")):
        assert found and not any(s.run.checkpointing for s in found) and all(s.basis != "floor" for s in found)
