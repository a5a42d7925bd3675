"""Gradient accumulation (Run.grad_accum_steps): what the peak adds, the command line's --grad-accum, and the CPU
measurements of validation/grad_accum.py (memmath_lessons/reference/data/measured_grad_accum.json, every case recorded after
the prediction code: held out), replayed without torch.

The loop measured: for each of k micro-batches, loss = model(**batch).loss / k; loss.backward(); then
optimizer.step(); optimizer.zero_grad(set_to_none=True). From the second micro-batch on every .grad exists;
autograd still makes a fresh gradient for each parameter and adds it into .grad in place (AccumulateGrad).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import memmath as mm
from memmath import cli
from memmath_lessons.reference.measured import (
    load_measured_grad_accum, predict_case, predict_peak_case, predicted_saved_per_layer,
)

CASES = load_measured_grad_accum()
ROWS = {row["case_id"]: row for row in CASES.to_dict("records")}
STEP = {"first": 1, "steady": 2}


def _relative(predicted, measured):
    return abs(int(predicted) - int(measured)) / int(measured)


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(list(argv))
        except SystemExit as exit:  # argparse's own refusals
            status = exit.code
    return status, out.getvalue(), err.getvalue()


# ---- the peak, by hand ----------------------------------------------------------------------------------------
def test_a_later_micro_batch_holds_every_gradient_through_its_forward_and_backward():
    # GPT-2 (124,439,808 parameters) in pure bf16: 2 B of gradient each = 248,879,616 B held from the first
    # micro-batch's backward to the optimizer step. The second micro-batch's forward (its loss, fp32, replacing
    # the first's: 4 B) and its backward at the loss (no parameter has a new gradient yet) each hold all of them.
    gradients = 2 * 124_439_808
    one = mm.peak_memory("gpt2", batch_size=2, seq_len=512, step="first")
    two = mm.peak_memory("gpt2", batch_size=2, seq_len=512, grad_accum_steps=2, step="first")
    assert two.forward - one.forward == gradients + 4
    at_loss = {label.split(":")[0]: value for phase, label, value in one.moments if phase == "backward"}
    later = {label.split(":")[0]: value for phase, label, value in two.moments if phase == "backward"}
    assert later["at the loss"] - at_loss["at the loss"] == gradients
    # More micro-batches hold no more: the third and later are the second again.
    assert mm.peak_memory("gpt2", batch_size=2, seq_len=512, grad_accum_steps=8).parts() == \
        mm.peak_memory("gpt2", batch_size=2, seq_len=512, grad_accum_steps=2).parts()
    # The optimizer step sees the same gradients either way.
    assert two.optimizer_step == one.optimizer_step
    assert all(label.endswith("gradients held)") for phase, label, _ in two.moments if phase != "optimizer_step")


def test_lora_holds_only_the_adapters_gradients():
    # LoRA r8 on q, v of Llama-2-7B: 32 blocks x 2 modules x (4,096 x 8 + 8 x 4,096) = 4,194,304 adapter parameters,
    # fp32 adapters (peft's default on a 16-bit base): 16,777,216 B of gradient held by a later micro-batch.
    method = mm.LoRA(rank=8, targets=("q", "v"))
    one = mm.peak_memory("llama-2-7b", method=method, seq_len=1024, step="first")
    four = mm.peak_memory("llama-2-7b", method=method, seq_len=1024, grad_accum_steps=4, step="first")
    assert four.forward - one.forward == 32 * 2 * 2 * 4096 * 8 * 4 + 4


def test_the_effective_batch_is_said_where_a_user_reads_it():
    status, out, _ = _cli("train", "gpt2", "--batch", "4", "--grad-accum", "8", "--seq", "512")
    assert status == 0 and "8 micro-batches per optimizer step (effective batch 32)" in " ".join(out.split())
    status, out, _ = _cli("train", "gpt2", "--batch", "4", "--grad-accum", "8", "--seq", "512", "--json")
    report = json.loads(out)
    assert report["settings"]["grad_accum_steps"] == 8 and report["settings"]["effective_batch"] == 32
    assert "grad_accum_steps=8" in report["run"]
    assert any("effective batch of 32" in note for note in report["assumptions"]["notes"])
    assert report["peak"]["total"] == int(mm.peak_memory("gpt2", batch_size=4, seq_len=512, grad_accum_steps=8).total)


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "many"])
def test_the_command_line_refuses_a_bad_accumulation_by_its_option(value):
    status, out, err = _cli("train", "gpt2", "--grad-accum", value)
    assert status == 2 and out == "" and "--grad-accum" in err and "Traceback" not in err


def test_a_count_past_the_limit_is_refused_by_the_option_not_the_field():
    status, _, err = _cli("train", "gpt2", "--grad-accum", str(2**20 + 1))
    assert status == 2 and "--grad-accum:" in err and "grad_accum_steps" not in err


# ---- the measurements (validation/grad_accum.py) ----------------------------------------------------------------
@pytest.mark.parametrize("case_id", list(ROWS))
def test_parameters_gradients_states_and_saved_activations_to_the_byte(case_id):
    row = ROWS[case_id]
    m = predict_case(row)
    assert int(m.weights) == row["param_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.trainable_params) == row["trainable_params"]
    assert int(m.activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP))
@pytest.mark.parametrize("case_id", list(ROWS))
def test_peak_within_five_percent_in_both_steps(case_id, step):
    row = ROWS[case_id]
    peak = predict_peak_case(row, step=step)
    n = STEP[step]
    assert _relative(peak.total, row[f"peak_step{n}_bytes"]) <= 0.05, (
        f"predicted {int(peak.total):,} B ({peak.phase}), measured {row[f'peak_step{n}_bytes']:,} B")
    # The accumulation's own moments, forward and backward, not only the step's highest phase.
    for phase in ("forward", "backward"):
        assert _relative(getattr(peak, phase), row[f"peak_step{n}_{phase}_bytes"]) <= 0.05, phase


def test_what_a_later_micro_batch_adds_is_what_the_measurement_found():
    # Measured, not predicted: in every case the second and later micro-batches' forward peaks are the first's plus
    # the gradients' bytes and the previous micro-batch's loss (4 B, fp32); with checkpointing and frozen
    # embeddings also the leaf transformers makes of the embedding output and its gradient, 2 x t x h x e.
    checked = 0
    for row in ROWS.values():
        k = row["grad_accum_steps"]
        if k == 1:
            continue
        leaf = 0
        if row["checkpointing"] and row["method"] != "full":
            leaf = 2 * row["batch_size"] * row["seq_len"] * row["hidden_size"] * (4 if row["precision"] == "fp32"
                                                                                  else 2)
        for j in range(2, k + 1):
            added = row[f"peak_step1_micro{j}_forward_bytes"] - row["peak_step1_micro1_forward_bytes"]
            assert added == row["grad_bytes"] + 4 + leaf, (row["case_id"], j)
        checked += 1
    assert checked >= 20


def test_the_recording_covers_the_issue():
    assert 16 <= len(ROWS) <= 30 and CASES.held_out.all() and set(CASES.group) == {"gradient accumulation"}
    assert set(CASES["shape"]) == {"gpt2-256", "llama-256"} and set(CASES.hidden_size) == {256}
    assert {2, 4} <= set(CASES.grad_accum_steps) and 1 in set(CASES.grad_accum_steps)
    for shape in ("gpt2-256", "llama-256"):
        for k in (2, 4):
            for method in ("full", "lora"):
                for checkpointing in (False, True):
                    sub = CASES[(CASES["shape"] == shape) & (CASES.method == method)
                                & (CASES.checkpointing == checkpointing)]
                    assert len(sub), (shape, method, checkpointing)
                sub = CASES[(CASES["shape"] == shape) & (CASES.method == method) & (CASES.grad_accum_steps == k)]
                assert len(sub), (shape, method, k)
    # The planner's change, a batch of 1 accumulated: measured at b = 1 with k = 4 and 8.
    assert ((CASES.batch_size == 1) & (CASES.grad_accum_steps >= 4)).sum() >= 2
