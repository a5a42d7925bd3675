"""Lesson 7 (inference memory): it runs, shows the article's and the papers' numbers, survives its extremes."""

import lessons
import pytest

import memmath as mm

NAME = "07_inference"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(NAME)


def test_kv_cache_of_llama_2_13b_at_8192_tokens_is_6_7_gb(default_run):
    outputs, defs = default_run
    # kipply 2022, Transformer Inference Arithmetic: 2 (K and V) x 40 layers x 40 heads x 128 x 8,192 tokens x 2 B = 6,710,886,400 B = 6.7 GB.
    expected = 2 * 40 * 40 * 128 * 8192 * 2
    assert defs["memory"].kv_cache == expected  # the lesson's default is Llama-2-13B at 8,192 tokens, bf16
    assert "6.71 GB" in lessons.output_text(outputs)


def test_weights_are_two_bytes_per_parameter(default_run):
    _, defs = default_run
    assert defs["memory"].weights == 2 * 13_015_864_320  # Llama-2-13B's count (presets, checked against PyTorch)
    assert defs["memory"].rule_of_thumb == -(-2 * 13_015_864_320 * 12 // 10)


def test_gqa_cuts_the_cache_by_heads_over_kv_heads(default_run):
    _, defs = default_run
    table = defs["gqa_frame"].set_index("model")
    # Per token in bf16: 2 x 32 layers x 32 kv heads x 128 x 2 B = 524,288 B for Llama-2-7B (MHA);
    # Llama-3-8B and Mistral-7B keep 8 kv heads: 131,072 B, a quarter.
    assert table.loc["llama-2-7b", "KB per token"] == pytest.approx(524.3, abs=0.05)
    assert table.loc["llama-3-8b", "KB per token"] == pytest.approx(131.1, abs=0.05)
    assert table.loc["mistral-7b", "cut (heads / kv)"] == 4


def test_rule_of_thumb_limit_for_llama_2_7b_is_shown(default_run):
    outputs, _ = default_run
    # Hand-derived in tests/test_inference.py: 2,695,366,247 B of allowance / 623,616 B per token.
    assert "4,322 tokens" in lessons.output_text(outputs)


def test_decode_bound_is_bandwidth_over_bytes_read(default_run):
    _, defs = default_run
    # RTX 4090: 1,008 GB/s (NVIDIA datasheet); each step reads the weights and the KV cache.
    expected = 1008e9 / (2 * 13_015_864_320 + 2 * 40 * 40 * 128 * 8192 * 2)
    assert defs["per_sequence"] == pytest.approx(expected)


def test_every_control_at_both_ends():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(NAME):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        assert defs["memory"].total > 0
    assert {"model_dropdown", "context_slider", "batch_slider", "weights_format_dropdown", "kv_format_dropdown",
            "attention_radio", "gpu_dropdown", "unit_radio"} <= seen
