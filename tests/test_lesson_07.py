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


def _plain(outputs):
    import html
    import re
    text = html.unescape(lessons.output_text(outputs))
    text = re.sub(r"<[^>]+>", " ", text.replace("data-html='", ">"))
    return re.sub(r"\s+", " ", html.unescape(text))


def _run(**controls):
    import marimo as mo
    made = {}
    if "context" in controls:
        made["context_slider"] = mo.ui.slider(steps=[2**k for k in range(7, 18)], value=controls["context"])
    if "batch" in controls:
        made["batch_slider"] = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=controls["batch"])
    if "attention" in controls:
        made["attention_radio"] = mo.ui.radio(["sdpa", "eager"], value=controls["attention"])
    if "model" in controls:
        made["model_dropdown"] = mo.ui.dropdown(list(mm.PRESETS), value=controls["model"])
    if "gpu" in controls:
        made["gpu_dropdown"] = mo.ui.dropdown(list(mm.GPUS), value=controls["gpu"])
    return lessons.run_with(NAME, **made)


def test_an_impossible_working_set_says_what_it_means():
    # Llama-2-13B, 131,072 tokens x 256 sequences, eager attention: 40 heads x 131,072^2 scores x 256
    # sequences x 10 B (bf16 scores plus LLaMA's fp32 softmax) = 1.76e15 B, about 11,700 H200s (150.75 GB).
    outputs, defs = _run(context=131072, batch=256, attention="eager")
    assert defs["memory"].working_set > 40 * 131072**2 * 256 * 10
    text = _plain(outputs)
    assert "No GPU holds this" in text and "H200" in text
    assert "eager attention's scores" in text and "40 heads x 131,072 x 131,072 scores x 256 sequences" in text


@pytest.mark.parametrize("model, trained", [
    # max_position_embeddings in meta-llama/Llama-2-13b-hf's config.json: 4096; GPT-3: 2,048 (Brown et al. 2020).
    ("llama-2-13b", 4096), ("gpt3-175b", 2048), ("mistral-7b", 32768),
])
def test_every_model_with_a_known_trained_context_warns_past_it(model, trained):
    outputs, _ = _run(model=model, context=65536)
    assert f"{model} was trained on at most {trained:,} tokens" in _plain(outputs)
    outputs, _ = _run(model=model, context=trained)
    assert "was trained on at most" not in _plain(outputs)


def test_decode_bound_only_for_cards_the_model_fits(default_run):
    # The default (Llama-2-13B, bf16, 8,192 tokens: 33.76 GB) does not fit a 4090's 25.76 GB.
    outputs, defs = default_run
    table = defs["fit_frame"]
    assert "does not decode there at all" in _plain(outputs)
    assert set(table["fits"]) == {"yes", "no"}
    for fits, bound in zip(table["fits"], table["decode bound (tokens/s)"]):
        assert (bound == "does not fit") == (fits == "no")
    outputs, _ = _run(gpu="A100 80GB")
    assert "does not decode there at all" not in _plain(outputs)


def test_fp8_weights_on_a_card_without_fp8_arithmetic_say_so():
    # The RTX 3090 is Ampere (compute capability 8.6): bf16 tensor cores, no fp8 (NVIDIA: fp8 from 8.9 on).
    import marimo as mo
    outputs, _ = lessons.run_with(NAME, gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 3090"),
                                  weights_format_dropdown=mo.ui.dropdown(["bf16", "fp8_e4m3"], value="fp8_e4m3"))
    assert "RTX 3090 (Ampere) has no fp8 arithmetic" in _plain(outputs)
    outputs, _ = lessons.run_with(NAME, gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 4090"),
                                  weights_format_dropdown=mo.ui.dropdown(["bf16", "fp8_e4m3"], value="fp8_e4m3"))
    assert "no fp8 arithmetic" not in _plain(outputs)


# ---- the core path, the CUDA reserve, what a slider move re-runs ----------------------------------
def test_core_path_comes_first_claim_control_number_takeaway(default_run):
    # Issue 13: the article's claim, the one control, the number with its recipe, the takeaway, then the sections.
    outputs, _ = default_run
    text = _plain(outputs)
    places = [text.index(s) for s in ("The claim.", "The control.", "The number.", "The takeaway.", "Three parts")]
    assert places == sorted(places), places
    # kipply 2022: 2 x 40 layers x 40 kv heads x 128 x 2 B x 8,192 tokens x 1 sequence = 6,710,886,400 B.
    assert ("6.71 GB = 2 (key and value) x 40 layers x 40 key/value heads x 128 x 2 B (bf16) x 8,192 tokens x 1 sequence"
            in text)


def test_the_verdict_keeps_the_cuda_context_back(default_run):
    # RTX 4090: 24,564 MiB reported (nvidia-smi); a CUDA context of 1,343 MiB, measured on a V100 (Hugging Face
    # transformers docs, "Model training anatomy"), leaves 23,221 MiB = 24,348,983,296 B = 24.35 GB usable.
    outputs, defs = default_run
    text = _plain(outputs)
    assert ("1,343 MiB (1.31 GiB) are kept back for the CUDA context, which the driver takes before PyTorch allocates "
            "anything") in text
    assert "Model training anatomy" in text and "24.35 GB are usable" in text
    row = defs["fit_frame"].set_index("gpu").loc["RTX 4090"]
    short = defs["memory"].total - 23_221 * 2**20
    assert row["headroom (GB)"] == f"{short / 1e9:,.2f} GB short"


def test_every_card_in_the_table_keeps_the_reserve():
    # Every card the table says holds the run keeps 1,343 MiB free beside it, and every "no" lacks room for both
    # (each card's memory as the driver reports it, from the catalog's sources).
    _, defs = _run(model="llama-2-7b", context=1024)
    for gpu, fits in zip(defs["fit_frame"]["gpu"], defs["fit_frame"]["fits"]):
        room = mm.get_gpu(gpu).memory_bytes - 1343 * 2**20 - defs["memory"].total
        assert (fits == "yes") == (room >= 0), gpu



@pytest.mark.parametrize("control", ["context_slider", "batch_slider"])
def test_a_slider_move_reruns_one_cell(control):
    # Issue 15: every re-run cell costs marimo 6-10 ms of its own; one cell computes the run and feeds both charts.
    assert len(lessons.cells_rerun_by(NAME, control)) == 1
