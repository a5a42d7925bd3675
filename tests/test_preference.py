"""Preference training (DPO; Rafailov et al. 2023) with a frozen reference model: the method, its checks, what it
adds by hand, the command line, and the CPU measurements of validation/preference.py
(memmath_lessons/reference/data/measured_preference.json, every case recorded after memmath/preference.py was written:
held out), replayed without torch.

The loop (validation/preference.py): each prompt gives a chosen and a rejected sequence, so b prompts run 2b
sequences; logp = log_softmax(logits.float()), gathered at the labels, summed per sequence;
loss = -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))).mean().
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import memmath as mm
from memmath import cli
from memmath_lessons.reference.measured import (
    load_measured_preference, predict_case, predict_peak_case, predicted_saved_per_layer,
)
from memmath.validate import FieldError, FieldTypeError

CASES = load_measured_preference()
ROWS = {row["case_id"]: row for row in CASES.to_dict("records")}
STEP_COLUMN = {"first": "peak_step1_bytes", "steady": "peak_step2_bytes"}
GPT2_PARAMS = 124_439_808  # GPT-2 small as transformers counts it (GPT2LMHeadModel, tied head), Radford et al. 2019

# validation/measure.py's "gpt2" shape: 3 blocks, h 64, V 1,000.
TINY = mm.models.gpt2_model(n_layers=3, hidden_size=64, n_heads=4, intermediate_size=256, vocab_size=1000, max_positions=256)


def _run(method, **settings):
    return mm.Run(TINY, method=method, **{"batch_size": 2, "seq_len": 64, "device": "cpu", **settings})


# ---- the method ----------------------------------------------------------------------------------------------
def test_the_reference_defaults_to_what_trl_does_without_a_ref_model():
    # TRL's DPOTrainer with ref_model=None: a peft policy's adapters disabled, else a copy of the model
    assert mm.DPO().reference == "adapters_off" and mm.DPO().base == mm.LoRA()
    assert mm.DPO(base=mm.Full()).reference == "copy"
    assert mm.DPO(base=mm.QLoRA()).reference == "adapters_off"


def test_adapters_off_needs_adapters_and_bad_settings_are_refused_by_name():
    with pytest.raises(FieldError) as error:
        mm.DPO(base=mm.Full(), reference="adapters_off")
    assert error.value.field == "reference" and "disable_adapter" in str(error.value)
    with pytest.raises(FieldError) as error:
        mm.DPO(reference="ema")
    assert error.value.field == "reference" and "precomputed" in str(error.value)
    with pytest.raises(FieldError) as error:
        mm.DPO(beta=0)
    assert error.value.field == "beta"
    with pytest.raises(FieldTypeError):
        mm.DPO(base="lora")
    with pytest.raises(FieldTypeError):
        mm.DPO(base=mm.DPO())
    with pytest.raises(ValueError, match="causal language model"):
        mm.training_memory("bert-base-uncased", method=mm.DPO(base=mm.Full()), seq_len=128)


def test_the_reference_copy_is_in_the_weights_with_a_note():
    # bf16: 2 B per parameter, once for the policy and once for its frozen copy
    m = mm.training_memory("gpt2", method=mm.DPO(base=mm.Full(), reference="copy"), seq_len=512)
    assert int(m.weights) == 2 * 2 * GPT2_PARAMS
    assert any(n.kind == "dpo_reference_copy" and "weights include the frozen reference copy" in str(n) for n in m.notes)
    full = mm.training_memory("gpt2", method=mm.Full(), seq_len=512)
    # no gradients and no optimizer states for the copy
    assert (m.gradients, m.optimizer_states, m.trainable_params) == (full.gradients, full.optimizer_states,
                                                                     full.trainable_params)
    lora = mm.training_memory("gpt2", method=mm.LoRA(), seq_len=512)
    for reference in ("adapters_off", "precomputed"):
        assert mm.training_memory("gpt2", method=mm.DPO(reference=reference), seq_len=512).weights == lora.weights
    # a LoRA policy's copy is the base without adapters: 2 B x N more than the LoRA run
    copy = mm.training_memory("gpt2", method=mm.DPO(reference="copy"), seq_len=512)
    assert int(copy.weights - lora.weights) == 2 * GPT2_PARAMS
    assert set(mm.training_memory("gpt2", method=mm.DPO(), seq_len=512).parts()) == set(mm.training.PARTS)


def test_a_quantized_policy_s_copy_is_quantized_too():
    qlora = mm.training_memory("llama-3-8b", method=mm.QLoRA(), seq_len=512)
    copy = mm.training_memory("llama-3-8b", method=mm.DPO(base=mm.QLoRA(), reference="copy"), seq_len=512)
    adapters = 4 * mm.LoRA().trainable_params("llama-3-8b")  # fp32 adapters, not in the copy
    assert int(copy.weights - qlora.weights) == int(qlora.weights) - adapters
    assert int(copy.quantization_constants) == 2 * int(qlora.quantization_constants)


def test_the_loss_saves_what_the_dpo_loop_saves_by_hand():
    # The policy at 2b sequences with transformers' own loss saves the fp32 log-softmax (4 t V), the shifted labels
    # (8 t, new) and the loss's total weight (4 B). The DPO loop saves the log-softmax too, gathers at the labels
    # (8 t: a batch tensor, also saved) and logsigmoid keeps its input and, on the CPU, a buffer (b fp32 each):
    # 8 b - 4 bytes more on the CPU, 4 b - 4 on CUDA. b = 2 prompts here.
    for device, more in (("cpu", 8 * 2 - 4), ("cuda", 4 * 2 - 4)):
        dpo = mm.training_memory(_run(mm.DPO(base=mm.Full(), reference="precomputed"), device=device))
        sft = mm.training_memory(_run(mm.Full(), batch_size=4, device=device))
        assert int(dpo.activations - sft.activations) == more
    # the blocks see 2b sequences: twice the saved bytes of b (everything scales with t here)
    dpo = mm.training_memory(_run(mm.DPO(base=mm.Full())))
    half = mm.training_memory(_run(mm.Full()))
    assert dpo.activation_detail.per_layer == 2 * half.activation_detail.per_layer


def test_the_reference_forward_is_a_forward_moment_and_the_copy_is_resident():
    for reference in ("copy", "adapters_off"):
        peak = mm.peak_memory(_run(mm.DPO(reference=reference)))
        labels = [label for phase, label, _ in peak.moments if phase == "forward"]
        assert labels[0].startswith("reference forward") and len(peak.breakdown) == len(peak.moments)
        # nothing saved by the reference forward
        assert all(row["saved activations"] == 0 for (p, label, _), row in zip(peak.moments, peak.breakdown)
                   if label.startswith("reference forward"))
    pre = mm.peak_memory(_run(mm.DPO(reference="precomputed")))
    assert not any(label.startswith("reference forward") for _, label, _ in pre.moments)
    copy = mm.peak_memory(_run(mm.DPO(base=mm.Full(), reference="copy")))
    precomputed = mm.peak_memory(_run(mm.DPO(base=mm.Full(), reference="precomputed")))
    assert int(copy.resident - precomputed.resident) == 2 * TINY.n_params  # the bf16 copy (GPT-2: no buffers)


def test_the_planner_keeps_the_preference_training():
    from memmath.planner import suggest_changes

    run = mm.Run("llama-3-8b", method=mm.DPO(base=mm.Full()), batch_size=2, seq_len=1024)
    suggestions = suggest_changes(run, "RTX 4090")
    bases = {type(s.run.method.base).__name__ for s in suggestions if isinstance(s.run.method, mm.DPO)}
    assert all(isinstance(s.run.method, mm.DPO) and s.run.method.reference == "copy" for s in suggestions)
    assert {"LoRA", "QLoRA"} <= bases  # the method changes are the policy's


# ---- the command line ----------------------------------------------------------------------------------------
def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(list(argv))
        except SystemExit as exit:  # argparse's own refusals
            status = exit.code
    return status, out.getvalue(), err.getvalue()


def test_the_command_line_gives_the_api_s_answer():
    status, out, _ = _cli("train", "llama-3-8b", "--method", "dpo", "--dpo-base", "lora", "--reference",
                          "adapters_off", "--rank", "16", "--seq", "256", "--json")
    assert status == 0
    run = mm.Run("llama-3-8b", method=mm.DPO(base=mm.LoRA(rank=16), reference="adapters_off"), seq_len=256)
    got = json.loads(out)
    assert got["parts"]["activations"] == int(mm.training_memory(run).activations)
    assert got["parts"]["weights"] == int(mm.training_memory(run).weights)
    status, out, _ = _cli("train", "gpt2", "--method", "dpo", "--dpo-base", "full", "--seq", "256", "--json")
    assert status == 0 and json.loads(out)["parts"]["weights"] == 2 * 2 * GPT2_PARAMS


@pytest.mark.parametrize("argv, option", [
    (("--method", "dpo", "--dpo-base", "full", "--reference", "adapters_off"), "--reference"),
    (("--method", "lora", "--reference", "copy"), "--reference"),
    (("--method", "full", "--dpo-base", "lora"), "--dpo-base"),
    (("--method", "dpo", "--beta", "-1"), "--beta"),
    (("--method", "dpo", "--reference", "ema"), "--reference"),
    (("--method", "dpo", "--dpo-base", "full", "--rank", "8"), "--dpo-base lora or qlora"),
])
def test_the_command_line_refuses_bad_dpo_options_in_one_line(argv, option):
    status, _, err = _cli("train", "gpt2", "--seq", "256", *argv)
    assert status == 2 and option in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# ---- the measurements (validation/preference.py) -------------------------------------------------------------
def _relative(predicted, measured):
    return abs(int(predicted) - int(measured)) / int(measured)


def _policy_row(row):
    """The recorded case as the policy alone sees it: its method at 2 x batch_size sequences (the blocks' saved
    tensors do not depend on the loss)."""
    return {**row, "reference": None, "batch_size": 2 * row["batch_size"]}


@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_parameters_gradients_and_states_to_the_byte(case_id):
    row = ROWS[case_id]
    m = predict_case(row)
    assert int(m.weights) == row["param_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.trainable_params) == row["trainable_params"]
    assert row["sequences"] == 2 * row["batch_size"]


@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_saved_activations_to_the_byte_block_by_block(case_id):
    row = ROWS[case_id]
    assert int(predict_case(row).activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(_policy_row(row)) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_peak_within_five_percent_in_both_steps(case_id, step):
    row = ROWS[case_id]
    peak = predict_peak_case(row, step=step)
    assert _relative(peak.total, row[STEP_COLUMN[step]]) <= 0.05, (
        f"predicted {int(peak.total):,} B ({peak.phase}), measured {row[STEP_COLUMN[step]]:,} B")


def test_the_copy_s_parameters_are_the_policy_s_base():
    for row in ROWS.values():
        if row["reference"] == "copy":
            assert row["reference_param_bytes"] == int(mm.training_memory(
                **{"model": predict_case(row).run.model}, method=mm.Full(),
                precision=row["precision"]).weights)
        else:
            assert row["reference_param_bytes"] == 0


def test_the_recording_covers_the_issue():
    assert 12 <= len(ROWS) <= 24 and all(CASES["held_out"])
    assert set(CASES["reference"]) == {"copy", "adapters_off", "precomputed"}
    assert set(CASES["shape"]) == {"gpt2", "llama-gqa"} and set(CASES["precision"]) == {"bf16", "fp32"}
    assert {"full", "lora"} <= set(CASES["method"]) and set(CASES["group"]) == {"preference (DPO)"}
    assert set(CASES[CASES["method"] == "full"]["reference"]) >= {"copy", "precomputed"}
    assert set(CASES[CASES["method"] == "lora"]["reference"]) == {"copy", "adapters_off", "precomputed"}
