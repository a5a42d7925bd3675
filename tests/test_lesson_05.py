"""Lesson 5 (adapters): it runs, its numbers are the papers' and hand derivations, and its controls hold at their ends."""

import re

import pytest

import lessons

LESSON = "05_adapters"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_lesson_runs_clean(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_houlsby_count_for_bert_large_by_hand(default_run):
    # Houlsby et al. 2019: 2*m*h + m + h per adapter, two per block. BERT-large: h=1,024, 24 blocks, m=64:
    # 2*64*1024 + 64 + 1024 = 132,160 per adapter; 264,320 per block; 6,343,680 in the model.
    text = lessons.output_text(default_run[0])
    assert "132,160" in text and "264,320" in text and "6,343,680" in text


def test_paper_result_is_quoted(default_run):
    text = lessons.output_text(default_run[0])
    assert "0.4%" in text and "3.6%" in text  # Houlsby et al. 2019 abstract


def test_adapter_table_matches_hand_counts(default_run):
    counts = default_run[1]["adapter_counts"].set_index("model")["trainable params"]
    # m=64, 2 * (2*m*h + m + h) per block: BERT-large 1,024 x 24 blocks, BERT-base 768 x 12, Llama-2-7B 4,096 x 32.
    assert list(counts) == [2 * (2 * 64 * 1024 + 64 + 1024) * 24, 2 * (2 * 64 * 768 + 64 + 768) * 12,
                            2 * (2 * 64 * 4096 + 64 + 4096) * 32]
    assert list(counts) == [6_343_680, 2_379_264, 33_820_672]


# Llama-2-7B by hand (meta-llama/Llama-2-7b-hf config.json): h = 4,096, MLP width I = 11,008, 32 heads of 128,
# 32 blocks, vocabulary 32,000, 6,738,415,616 parameters; pure bf16 (e = 2 B), SDPA (transformers' default),
# no dropout (the config's 0.0). PyTorch's autograd keeps a tensor only where a gradient needs it: x @ W keeps x
# only when W trains; an RMSNorm keeps its fp32 input and rsqrt for the input's gradient and its normalized
# input only when its weight trains; SDPA keeps q, k, v, its output and a fp32 log-sum-exp; SwiGLU keeps the
# gate and up outputs and silu(gate). A Houlsby adapter (Houlsby et al. 2019) is two trainable linears with a
# GELU between: it keeps its b*s*h input, the GELU's b*s*m input and the up-projection's b*s*m input.
H, I, HEADS, D, V, BLOCKS, PARAMS = 4096, 11008, 32, 128, 32000, 32, 6_738_415_616


def llama_7b_activations(b, s, method, m=64):
    """Bytes Llama-2-7B saves for backward: (per block, first storing block, blocks storing, total)."""
    e, t = 2, b * s
    norm_for_input = 4 * t * H + 4 * t  # fp32 input and rsqrt, for the input's gradient
    attention = 4 * e * t * H + 4 * b * HEADS * s  # q, k, v, output; log-sum-exp
    swiglu = 3 * e * t * I
    adapter = e * t * H + 2 * e * t * m
    rotary = 2 * e * s * D  # cos and sin, shared by every block
    loss = 4 * t * V + 8 * t + 4  # fp32 log-softmax, int64 shifted labels, the total weight
    full_block = (2 * (norm_for_input + e * t * H) + e * t * H + attention + e * t * H + swiglu + e * t * I)
    if method == "full":  # + token ids, final norm (its weight trains), the head's input
        return full_block, full_block, BLOCKS, (BLOCKS * full_block + 8 * t + rotary + norm_for_input + e * t * H
                                                + e * t * H + loss)
    if method == "freeze":  # the last block, final norm and head train; the block's input needs no gradient
        first = full_block - norm_for_input
        return full_block, first, 1, first + rotary + norm_for_input + e * t * H + e * t * H + loss
    # adapters: no frozen linear keeps its input and no frozen norm its normalized input
    block = 2 * norm_for_input + attention + swiglu + 2 * adapter
    first = adapter + norm_for_input + swiglu + adapter  # its attention's input needs no gradient: nothing there
    return block, first, BLOCKS, first + (BLOCKS - 1) * block + rotary + norm_for_input + loss


def test_saving_is_gradients_and_states_of_the_frozen_weights(default_run):
    outputs, defs = default_run
    full, freeze, adapters = defs["scenarios"].values()
    # Pure bf16 + AdamW: 2 B gradient + 4 B of moments per trainable parameter (the article's recipe), and a
    # 4-byte step per trainable tensor: 291 in the model (32 x 9 + embeddings, final norm, head), 4 per adapter.
    adapter_params = 2 * (2 * 64 * H + 64 + H) * BLOCKS  # 33,820,672
    assert full.total_params == PARAMS and adapters.trainable_params == adapter_params
    assert full.gradients == 2 * PARAMS and adapters.gradients == 2 * adapter_params
    assert full.trainable_state == 6 * PARAMS + 4 * 291
    assert adapters.trainable_state == 6 * adapter_params + 4 * 4 * 2 * BLOCKS
    # The adapters' weights are the base model's plus 67,641,344 B, and they save 40,227,569,804 B.
    assert adapters.weights - full.weights == 2 * adapter_params == 67_641_344
    saved = 6 * (PARAMS - adapter_params) + 4 * (291 - 256)
    assert full.trainable_state - adapters.trainable_state == saved
    # Activations at the lesson's defaults (batch 2, 512 tokens), by hand: every block still stores with
    # adapters, but less than in full finetuning, since the frozen linears keep no input.
    for result, method in ((full, "full"), (freeze, "freeze"), (adapters, "adapters")):
        per_block, first, storing, total = llama_7b_activations(2, 512, method)
        assert result.activation_model == "transformers" and result.attention == "sdpa" and not result.dropout
        detail = result.activation_detail
        assert detail.per_layer == per_block and detail.layers_storing == storing, method
        assert detail.first_layer in (None, first) and result.activations == total, method
    assert llama_7b_activations(2, 512, "adapters")[0] == 152_182_784  # against 190,980,096 per block in full
    text = lessons.output_text(outputs)
    for number in ("67.64 MB", "40.23 GB", "4.97 GB", "6.28 GB", "0.34 GB", "152.18 MB", "190.98 MB"):
        assert number in text, number
    assert "79% of" in text  # 4,967,505,924 / 6,276,272,132
    assert "almost all of full finetuning" not in text


def test_problem_3_activations_by_hand(default_run):
    # Problem 3: Llama-2-7B, batch 8 x 1,024 tokens, pure bf16 + AdamW; adapters m = 64 against the last block.
    text = lessons.output_text(default_run[0])
    adapters, freeze = llama_7b_activations(8, 1024, "adapters")[3], llama_7b_activations(8, 1024, "freeze")[3]
    # t = 8,192: adapters 813,727,744 (first block) + 31 x 1,217,462,272 + 524,288 (rotary) + 134,250,496 (final
    # norm) + 1,048,641,540 (loss); the last block alone 1,393,590,272 + 524,288 + 268,468,224 (final norm, head
    # input) + 1,048,641,540.
    assert (adapters, freeze) == (39_738_474_500, 2_711_224_324)
    assert "Adapters: 39.74 GB of" in text and "last block: 2.71 GB." in text


def test_measured_adapters_match_memmath_to_the_byte(default_run):
    # The recorded PyTorch runs (memmath_lessons/reference/data/measured_cpu.json, validation/houlsby.py): the table
    # puts each measurement beside memmath's exact model, and the lesson says they match to the byte.
    from memmath_lessons.reference.measured import load_measured_adapters

    outputs, defs = default_run
    cases, table = load_measured_adapters(), defs["measured_adapters"]
    assert "match memmath to the byte" in lessons.output_text(outputs)
    assert len(table) == len(cases) == 35
    # The measured columns are the recording's, and memmath's equal them, row by row.
    assert list(table["adapter parameters (measured)"]) == list(cases["adapter_params"])
    assert list(table["gradients + states, measured (B)"]) == list(cases["grad_bytes"] + cases["optimizer_state_bytes"])
    assert list(table["activations saved, measured (B)"]) == list(cases["saved_bytes"])
    assert list(table["memmath"]) == list(table["adapter parameters (measured)"])
    assert list(table["memmath (B)"]) == list(table["gradients + states, measured (B)"])
    assert list(table["activations, memmath (B)"]) == list(table["activations saved, measured (B)"])


def test_timing_ran_both_variants(default_run):
    _, defs = default_run
    timings = defs["timings"]
    assert set(timings["variant"]) == {"base", "with adapters"}
    assert len(timings) >= 6 and (timings["seconds"] > 0).all()
    # FLOP overhead 2m/(6h+s) at h=256, s=128, m=64: 128 / 1,664.
    assert defs["predicted_overhead"] == pytest.approx(128 / 1664)


def test_every_control_at_both_ends():
    seen = set()
    for control, which, outputs, _defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        bad = lessons.bad_text(outputs)
        assert bad == [], f"{control} at its {which}: {bad}"
        assert not re.search(r"\binf\b", lessons.output_text(outputs)), f"{control} at its {which} shows inf"
    assert {"bottleneck_slider", "width_slider", "runs_slider", "seq_len_slider"} <= seen


def _downstream(app, names):
    """Every variable computed, directly or not, from the given variables (marimo's reactive graph)."""
    app._maybe_initialize()
    cells = list(app._graph.cells.values())
    reached, grew = set(names), True
    while grew:
        grew = False
        for cell in cells:
            if cell.refs & reached and not cell.defs <= reached:
                reached |= set(cell.defs)
                grew = True
    return reached


def test_timing_sliders_never_start_a_timing():
    # Moving a timing slider must not wait for a 0.8 s measurement: only the Measure button feeds the timings.
    app = lessons.load_app(LESSON)
    downstream = _downstream(app, {"width_slider", "toy_seq_slider", "toy_bottleneck_slider", "runs_slider"})
    assert not downstream & {"measurement", "timings", "timing_table", "measured_ratio", "fastest_ratio"}
    assert {"measurement", "timings"} <= _downstream(app, {"measure_button"})


def test_a_measurement_at_the_sliders_ends_reads_clean(default_run):
    import marimo as mo

    measure = default_run[1]["measure_adapter_timing"]
    # Pressing Measure with every slider at its maximum (h=512, s=256, m=256, 30 runs), as the second measurement.
    button = mo.ui.button(value=measure(512, 256, 256, 30, 2))
    outputs, defs = lessons.run_with(LESSON, measure_button=button, width_slider=mo.ui.slider(steps=[64, 512], value=512))
    text = lessons.output_text(outputs)
    assert lessons.bad_text(outputs) == []
    assert "Measurement 2" in text and set(defs["timings"]["variant"]) == {"base", "with adapters"}
    # FLOPs at the measured settings: 2m/(6h+s) = 512 / 3,328.
    assert defs["predicted_overhead"] == pytest.approx(512 / 3328)


def test_moved_sliders_say_the_shown_measurement_is_older(default_run):
    import marimo as mo

    outputs, _ = lessons.run_with(LESSON, width_slider=mo.ui.slider(steps=[64, 128, 256, 384, 512], value=512))
    text = lessons.output_text(outputs)
    assert "Press Measure" in text and "still the one for h = 256" in text
    assert "Press Measure" not in lessons.output_text(default_run[0])


def test_houlsby_adapters_measured_next_to_memmath(default_run):
    # The reference adapters of validation/houlsby.py, recorded with PyTorch: 2 x (2*m*h + m + h) per
    # block (Houlsby et al. 2019), here h = 64, m = 8, 3 blocks: 6,576 adapter parameters in BERT.
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    assert "Measured." in text
    assert "6576" in text.replace(",", "")



def test_a_slider_move_reruns_at_most_two_cells():
    # Every re-run cell costs ~6-10 ms of marimo's own; the bottleneck moved 4 cells before, now the
    # core number and the memory section; each memory or timing slider moves its section's one cell.
    assert len(lessons.cells_rerun_by(LESSON, "bottleneck_slider")) == 2
    for control in ("batch_slider", "seq_len_slider", "width_slider", "toy_seq_slider", "toy_bottleneck_slider",
                    "runs_slider"):
        assert len(lessons.cells_rerun_by(LESSON, control)) == 1, control


def test_the_core_path_comes_first(default_run):
    # The claim, the control, the number, the takeaway, then the sections that build it up.
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    claim, number, takeaway = text.index("The claim."), text.index("The number."), text.index("Takeaway.")
    assert claim < text.index("Bottleneck m (the adapter") < number < takeaway < text.index("<h2")


def test_fits_reserve_the_cuda_context_and_say_so(default_run):
    # The card's CUDA context is reserved where the lesson says whether a run fits a card. An RTX 4090 reports
    # 24,564 MiB (nvidia-smi); an Ada card's context is 426 MiB (measured on an RTX 6000 Ada, unslothai/unsloth-zoo
    # pull request 1053): 24,138 MiB = 25,310,527,488 B are left.
    outputs, defs = default_run
    assert defs["usable_bytes"] == (24_564 - 426) * 2**20 == 25_310_527_488
    text = lessons.output_text(outputs)
    assert "capacity less the CUDA context" in text and "426 MiB measured on an RTX 6000 Ada" in text
    assert "unsloth-zoo pull request 1053" in text
    # Freezing at the defaults is judged as the command line judges it: its step's peak, 5% of it kept free, and the
    # card's context reserved. That passes the 16,376 and 16,380 MiB of the RTX 4080 and 4060 Ti less their 426 MiB
    # (and the T4's 15,360 MiB less 1,343), so its smallest card is the next one up, the A10G (23,028 MiB, nvidia-smi,
    # less the 256 MiB of an Ampere GA10x card).
    freeze = defs["needs"]["Freeze: last block trains"]
    assert freeze.basis == "peak" and 16_380 * 2**20 < freeze.bytes * 1.05 + 426 * 2**20
    assert freeze.bytes * 1.05 + 256 * 2**20 < 23_028 * 2**20
    table = defs["memory_table"].set_index("scenario")
    assert table.loc["Freeze: last block trains", "smallest GPU"] == "A10G"
