"""memmath_lessons.recorded and memmath_lessons.sweeps: the views lessons 3 and 6 show of the recorded
measurements and of the activation sweep. Expected numbers are the recordings' own bytes and hand arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import memmath as mm
from memmath_lessons.reference import load_measured
from memmath_lessons.reference.measured import load_measured_quantized
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
    from memmath_lessons.reference import predict_case, predicted_saved_per_layer

    frame = recorded.saved_bytes_frame(case, predict_case(case).activation_detail,
                                       predict_case(case, activations="textbook").activation_detail,
                                       sum(predicted_saved_per_layer(case)))
    totals = frame.groupby("source", sort=False)["bytes"].sum()
    # The recording's own total, and memmath's replay, which equals it to the byte (validation/measure.py).
    assert totals["Measured (PyTorch, CPU)"] == int(case["saved_bytes"])
    assert totals['memmath, activations="transformers"'] == int(case["saved_bytes"])
    assert totals['memmath, activations="textbook"'] > 0
    assert list(frame["where"].unique()) == list(recorded.SAVED_PLACES)
    assert (frame["KB"] == frame["bytes"] / 1000).all()


def test_the_formula_with_checkpointing_is_the_block_input_alone():
    # Tiny LLaMA in bf16 at b = 2, s = 64, h = 64: s·b·h = 8,192 elements x 2 B = 16,384 B (Chen et al. 2016).
    cases = load_measured()
    case = recorded.full_finetuning_case(cases, shape="llama-mha", attention="eager", dropout=False, checkpointing=True)
    frame = recorded.formula_terms_frame(case)
    assert frame.to_dict("records") == [{recorded.FORMULA_COLUMN: "block input (checkpointed)", "bytes": 16_384}]


def test_the_formula_with_dropout_is_korthikantis_block_at_the_cases_element_size():
    # Korthikanti et al. 2022, section 4.1: one block keeps 34·s·b·h + 5·a·s²·b bytes with 2-byte activations and
    # 1-byte dropout masks: 16 activations of s·b·h elements (attention 5, MLP 9, the two LayerNorms' inputs 2) and 2
    # of a·s²·b (softmax output, dropped output), 2 masks of s·b·h and 1 of a·s²·b (2·16 + 2 = 34, 2·2 + 1 = 5).
    # The lesson counts activations and masks at the case's element size e (PyTorch keeps the masks in the
    # activations' dtype on the CPU): e·(16·s·b·h + 2·a·s²·b) + e·(2·s·b·h + a·s²·b). GPT-2 with dropout was
    # recorded in fp32 (e = 4): 72·8,192 + 12·32,768 = 983,040 B at s = 64, b = 2, h = 64, a = 4.
    case = recorded.full_finetuning_case(load_measured(), shape="gpt2", attention="eager", dropout=True,
                                         checkpointing=False)
    s, b, h, a = int(case["seq_len"]), int(case["batch_size"]), int(case["hidden_size"]), int(case["n_heads"])
    e = {"fp32": 4, "bf16": 2}[case["precision"]]
    frame = recorded.formula_terms_frame(case)
    assert frame["bytes"].sum() == e * (16 * s * b * h + 2 * a * s * s * b) + e * (2 * s * b * h + a * s * s * b)
    if (s, b, h, a, e) == (64, 2, 64, 4, 4):
        assert frame["bytes"].sum() == 983_040


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
    # A batch sweep: activations grow with b, the rest does not move.
    acts = np.broadcast_to(sweep.memory.activations, sweep.values.shape)
    rest = np.broadcast_to(sweep.memory.without_activations, sweep.values.shape)
    assert np.all(np.diff(acts) > 0) and np.all(rest == rest[0])
    # The crossing is the first batch whose activations pass the rest: more there, not more one point before.
    at = list(sweep.values).index(sweep.crossover)
    assert acts[at] > rest[at] and (at == 0 or acts[at - 1] <= rest[at - 1])
    assert frame[frame["kind"] == "cross"]["x"].tolist()[-1] == sweep.crossover
    sweep.values[0] = -1  # the caller's copy: the next sweep still starts at batch 1
    assert sweeps.activation_sweep(mm.PRESETS["gpt2"], over="batch size", seq_len=1024, batch_size=4,
                                   attention="eager", checkpointing=False, unit="GB").values[0] == 1
