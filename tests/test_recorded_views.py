"""memmath_lessons.recorded and memmath_lessons.sweeps: the views lessons 3 and 6 show of the recorded
measurements and of the activation sweep. Expected numbers are the recordings' own bytes and hand arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import memmath as mm
from memmath.reference import load_measured
from memmath.reference.measured import load_measured_quantized
from memmath_lessons import recorded, sweeps


def test_the_lessons_case_is_full_finetuning_at_2_x_64_in_bf16_where_both_were_recorded():
    cases = load_measured()
    case = recorded.full_finetuning_case(cases, shape="gpt2", attention="eager", dropout=False, checkpointing=False)
    assert (case["method"], case["optimizer"], int(case["batch_size"]), int(case["seq_len"])) == ("full", "adamw", 2, 64)
    assert case["precision"] == "bf16"
    with pytest.raises(KeyError, match="shape='gpt-9'"):
        recorded.full_finetuning_case(cases, shape="gpt-9", attention="eager", dropout=False, checkpointing=False)


def test_saved_bytes_frame_books_the_measurement_in_and_outside_the_blocks():
    cases = load_measured()
    case = recorded.full_finetuning_case(cases, shape="llama-mha", attention="sdpa", dropout=False, checkpointing=False)
    from memmath.reference import predict_case, predicted_saved_per_layer

    frame = recorded.saved_bytes_frame(case, predict_case(case).activation_detail,
                                       predict_case(case, activations="textbook").activation_detail,
                                       sum(predicted_saved_per_layer(case)))
    measured = frame[frame["source"] == "Measured (PyTorch, CPU)"]["bytes"].tolist()
    assert measured == [sum(case["saved_per_layer"]), int(case["saved_outside_layers"])]
    assert sum(measured) == int(case["saved_bytes"])  # the recording's own total
    assert (frame["KB"] == frame["bytes"] / 1000).all()


def test_the_formula_with_checkpointing_is_the_block_input_alone():
    # Tiny LLaMA in bf16 at b = 2, s = 64, h = 64: s·b·h = 8,192 elements x 2 B = 16,384 B (Chen et al. 2016).
    cases = load_measured()
    case = recorded.full_finetuning_case(cases, shape="llama-mha", attention="eager", dropout=False, checkpointing=True)
    frame = recorded.formula_terms_frame(case)
    assert frame.to_dict("records") == [{recorded.FORMULA_COLUMN: "block input (checkpointed)", "bytes": 16_384}]


def test_the_formula_without_checkpointing_sums_to_korthikantis_block():
    # Wiring only: the frame carries memmath.korthikanti_terms' terms at the case's sizes, each once (their values
    # are checked against Korthikanti et al.'s 34·s·b·h + 5·a·s²·b in tests/test_activations.py).
    case = recorded.full_finetuning_case(load_measured(), shape="gpt2", attention="eager", dropout=False,
                                         checkpointing=False)
    frame = recorded.formula_terms_frame(case)
    terms = mm.korthikanti_terms(seq_len=64, batch_size=2, hidden_size=int(case["hidden_size"]),
                                 n_heads=int(case["n_heads"]), element_bytes=2, mask_bytes=2, dropout=False)
    assert frame["bytes"].sum() == sum(int(t.bytes) for t in terms) and len(frame) == len(terms)


def test_every_recorded_qlora_part_but_the_peak_is_equal_to_the_byte():
    # validation/quantized.py's recordings: memmath's bitsandbytes layout counts every part exactly.
    cases = load_measured_quantized()
    for _, case in cases.iterrows():
        frame = recorded.quantized_parts_frame(case).set_index("part")
        assert (frame.drop(index="peak of step 2")["difference"] == "equal").all(), case["case_id"]
        assert frame.loc["weights (packed base, the rest, adapters)", "measured (B)"] == int(case["param_bytes"])


def test_the_sweep_refuses_an_unknown_axis_by_name():
    with pytest.raises(ValueError, match="over must be one of sequence length, batch size; got 'width'"):
        sweeps.activation_sweep(mm.PRESETS["gpt2"], over="width", seq_len=1024, batch_size=4, attention="eager",
                                checkpointing=False, unit="GB")


def test_the_sweeps_rows_mark_the_setting_and_the_crossings():
    sweep = sweeps.activation_sweep(mm.PRESETS["gpt2"], over="batch size", seq_len=1024, batch_size=4,
                                    attention="eager", checkpointing=False, unit="GB")
    frame = sweep.frame
    assert frame[frame["kind"] == "now"]["x"].tolist() == [4]
    assert set(frame[frame["kind"] == "line"]["what"]) == set(sweeps.SERIES)
    crossings = frame[frame["kind"] == "cross"]
    assert crossings["x"].tolist() == [x for x in (sweep.crossover_weights, sweep.crossover) if x]
    # A batch sweep: activations grow with b, the rest does not move.
    acts = np.broadcast_to(sweep.memory.activations, sweep.values.shape)
    rest = np.broadcast_to(sweep.memory.without_activations, sweep.values.shape)
    assert np.all(np.diff(acts) > 0) and np.all(rest == rest[0])
