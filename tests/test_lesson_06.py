"""Lesson 6 (LoRA and QLoRA): it runs, its numbers are the papers' and hand derivations, and its controls hold at their ends."""

import re

import pytest

import lessons

LESSON = "06_lora_qlora"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_lesson_runs_clean(default_run):
    assert lessons.bad_text(default_run[0]) == []


def test_llama2_7b_r8_on_q_and_v(default_run):
    # Hu et al. 2021, section 4.1: r x (d_in + d_out) per matrix; 8 x (4,096 + 4,096) x 2 matrices x 32 blocks = 4,194,304.
    _, defs = default_run
    assert defs["lora_trainable"] == 8 * (4096 + 4096) * 2 * 32 == 4_194_304
    assert "4,194,304" in lessons.output_text(default_run[0])


def test_merged_weight_gives_the_same_output(default_run):
    assert default_run[1]["merge_same"] is True


def test_quantization_constants_in_bits_per_parameter(default_run):
    # Dettmers et al. 2023: 32/64 = 0.5 bits; with double quantization 8/64 + 32/(64*256) = 0.126953125 bits.
    rows = default_run[1]["quant_rows"].set_index("storage")["constants (bits per weight)"]
    assert rows["NF4, fp32 constants"] == 0.5
    assert rows["NF4 + double quantization"] == 8 / 64 + 32 / (64 * 256)


def test_full_lora_qlora_side_by_side(default_run):
    _, defs = default_run
    full, lora, qlora = defs["side_by_side"].values()
    assert lora.trainable_params == qlora.trainable_params == 4_194_304
    assert qlora.weights < lora.weights / 3  # 4-bit linear weights versus 16-bit
    # fp32 adapters cost 4 + 4 + 8 = 16 B per adapter parameter with Adam, bf16 ones 2 + 2 + 4 = 8 B.
    assert defs["lora_fp32"].total - defs["lora_base"].total == 8 * 4_194_304


def test_papers_headline_numbers(default_run):
    _, defs = default_run
    gpt3 = 174_604_259_328  # Brown et al. 2020's shape, counted as GPT-2's layout: V*h + P*h + L*(12h^2 + 13h) + 2h
    assert defs["gpt3_lora"].trainable_params == 4 * (12288 + 12288) * 2 * 96 == 18_874_368
    assert 1.0e12 < defs["gpt3_weights_and_states"] < 1.2e12 < defs["gpt3_full"].without_activations  # 6 and 8 B/param
    assert abs(defs["gpt3_lora"].total - 350e9) < 3e9  # "350 GB" (Hu et al. 2021)
    assert round(gpt3 / defs["gpt3_lora"].trainable_params, -3) == 9_000  # "roughly 10,000x"
    assert defs["llama65_full"].total > 780e9  # "more than 780 GB" (Dettmers et al. 2023)
    assert defs["guanaco_fit"].fits  # one 48 GB card at the paper's settings


def test_every_control_at_both_ends():
    seen = set()
    for control, which, outputs, _defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        bad = lessons.bad_text(outputs)
        assert bad == [], f"{control} at its {which}: {bad}"
        assert not re.search(r"\binf\b", lessons.output_text(outputs)), f"{control} at its {which} shows inf"
    assert {"rank_slider", "block_size_slider", "q65_seq_slider", "precision_dropdown", "adapter_format_radio"} <= seen


def _timings(base, unmerged, merged):
    import pandas as pd
    rows = [{"run": i, "variant": v, "seconds": t * (1 + 0.01 * i)} for i in range(3)
            for v, t in (("base W x", base), ("W x + B A x (unmerged)", unmerged), ("merged W' x", merged))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("merged, says", [
    (1.02, "timed the same to within 2%: merging costs nothing at inference"),
    (1.15, "yet its fastest run took 1.15× the base's and its median 1.15×: a gap of up to 15% between identical work"),
])
def test_merge_timing_prose_follows_the_measurement(merged, says):
    # Issue 13: the merged layer measured 1.15x the base while the text said any gap is noise. Timings here are
    # made up (seconds per call), so the sentence is checked for a quiet and for a noisy machine.
    outputs, _ = lessons.run_with(LESSON, merge_times=_timings(1.0, 1.3, merged))
    text = lessons.output_text(outputs)
    assert says in text
