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


def test_saving_is_gradients_and_states_of_the_frozen_weights(default_run):
    _, defs = default_run
    full, _freeze, adapters = defs["scenarios"].values()
    # Pure bf16 + AdamW: 2 B gradient + 4 B of moments per trainable parameter (the article's recipe).
    n = full.total_params
    assert full.gradients == 2 * n
    assert adapters.gradients == 2 * adapters.trainable_params
    # Activations still flow through every block: each of the 32 stores as much as in full finetuning
    # (only the embedding's dropout mask is gone, since the embeddings do not train).
    assert adapters.activation_detail.layers_storing == full.activation_detail.layers_storing == 32
    assert adapters.activation_detail.per_layer == full.activation_detail.per_layer
    assert adapters.activations > 0.99 * full.activations
    assert adapters.weights > full.weights


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
    # Issue 15: every re-run cell costs ~6-10 ms of marimo's own; the bottleneck moved 4 cells before, now the
    # core number and the memory section; each memory or timing slider moves its section's one cell.
    assert len(lessons.cells_rerun_by(LESSON, "bottleneck_slider")) == 2
    for control in ("batch_slider", "seq_len_slider", "width_slider", "toy_seq_slider", "toy_bottleneck_slider",
                    "runs_slider"):
        assert len(lessons.cells_rerun_by(LESSON, control)) == 1, control


def test_the_core_path_comes_first(default_run):
    # Issue 13: the claim, the control, the number, the takeaway, then the sections that build it up.
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    claim, number, takeaway = text.index("The claim."), text.index("The number."), text.index("Takeaway.")
    assert claim < text.index("Bottleneck m (the adapter") < number < takeaway < text.index("<h2")


def test_fits_reserve_the_cuda_context_and_say_so(default_run):
    # Issue 13: the CUDA context is reserved where the lesson says whether a run fits a card. An RTX 4090 reports
    # 24,564 MiB (nvidia-smi); the context is 1,343 MiB (measured on a V100, Hugging Face transformers docs,
    # "Model training anatomy"): 23,221 MiB = 24,348,983,296 B are left.
    outputs, defs = default_run
    assert defs["usable_bytes"] == (24_564 - 1_343) * 2**20 == 24_348_983_296
    text = lessons.output_text(outputs)
    assert "capacity less the CUDA context" in text and "1,343 MiB, measured on a V100" in text
    assert "Model training anatomy" in text
    # Freezing at the defaults needs more than a T4's 15,360 MiB less the context but less than its 15,360 MiB:
    # without the reserve the T4 would be its smallest card; with it, the next card that holds it (the RTX 4080
    # and 4060 Ti at 16,376 and 16,380 MiB do not, less 1,343 MiB) is the A10G (23,028 MiB).
    freeze = defs["scenarios"]["Freeze: last block trains"].total
    assert (15_360 - 1_343) * 2**20 < freeze < 15_360 * 2**20 and freeze > (16_380 - 1_343) * 2**20
    table = defs["memory_table"].set_index("scenario")
    assert table.loc["Freeze: last block trains", "smallest GPU"] == "A10G"
