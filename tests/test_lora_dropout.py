"""LoRA dropout (peft's lora_dropout) and mixed precision with fp32 master weights: the field, its checks, what the
exact activation model and the peak add, by hand; and the CPU measurements of validation/lora_dropout.py
(memmath_lessons/reference/data/measured_lora_dropout.json, every case recorded after the prediction code: held out),
replayed without torch.

peft 0.21 (tuners/lora/layer.py, Linear.forward): result + lora_B(lora_A(dropout(x))) * scaling, with
dropout = nn.Dropout(lora_dropout) for lora_dropout > 0, else nn.Identity. On the CPU torch's dropout is
input * (a mask of the input's dtype, bernoulli(1 - p) / (1 - p)), whose backward keeps the mask when the input
needs a gradient; on CUDA native_dropout keeps a bool mask. lora_A trains, so it keeps its input: the dropped copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import pytest

import memmath as mm
from memmath import cli
from memmath.recipes import RECIPES
from memmath_lessons.reference.measured import (
    load_measured_lora_dropout, predict_case, predict_peak_case, predicted_saved_per_layer,
)
from memmath.validate import FieldError, FieldTypeError

CASES = load_measured_lora_dropout()
ROWS = {row["case_id"]: row for row in CASES.to_dict("records")}
STEP_COLUMN = {"first": "peak_step1_bytes", "steady": "peak_step2_bytes"}
GROUPS = ("LoRA dropout", "QLoRA dropout", "master weights")

# LLaMA at hidden 256 (validation/lora_dropout.py's llama-256): t = b x s = 2 x 64 = 128 tokens, h = 256.
LLAMA = mm.models.llama_model(n_layers=3, hidden_size=256, n_heads=4, n_kv_heads=2, intermediate_size=512, vocab_size=1024)
T, H = 128, 256


def _blocks(p, adapter_format, device="cpu", targets=("q", "v")):
    """(per block, first block) saved bytes of LoRA on LLAMA with dropout p, bf16 base, b 2, s 64."""
    d = mm.training_memory(LLAMA, method=mm.LoRA(targets=targets, adapter_format=adapter_format, dropout=p),
                           precision="bf16", seq_len=64, batch_size=2, activations="transformers",
                           device=device).activation_detail
    return int(d.per_layer), int(d.per_layer if d.first_layer is None else d.first_layer)


# ---- the field ---------------------------------------------------------------------------------------------
def test_the_default_is_peft_s_lora_dropout_default():
    # peft 0.21 LoraConfig: lora_dropout: float = 0.0 (an nn.Identity: nothing kept)
    assert mm.LoRA().dropout == 0.0 and mm.QLoRA().dropout == 0.0
    assert mm.LoRA() == mm.LoRA(dropout=0) and _blocks(0.0, "fp32") == _blocks(0, "fp32")


@pytest.mark.parametrize("bad", [1.0, 1, 1.5, -0.05, float("nan"), float("inf"), True])
def test_a_dropout_outside_0_to_1_is_refused_by_name(bad):
    with pytest.raises(FieldError) as error:
        mm.LoRA(dropout=bad)
    assert error.value.field == "LoRA dropout" and "dropout" in str(error.value) and "1" in str(error.value)
    with pytest.raises(FieldError):
        mm.QLoRA(dropout=bad)


@pytest.mark.parametrize("bad", ["0.1", None, [0.1], (0.1, 0.2)])
def test_a_dropout_that_is_no_number_is_refused_by_name(bad):
    with pytest.raises(FieldTypeError) as error:
        mm.LoRA(dropout=bad)
    assert error.value.field == "LoRA dropout" and "dropout" in str(error.value)


def test_a_dropout_sweep_is_refused():
    import numpy as np

    with pytest.raises(FieldTypeError, match="not an array"):
        mm.LoRA(dropout=np.array([0.05, 0.1]))
    assert mm.LoRA(dropout=np.float64(0.05)).dropout == 0.05


def test_the_description_says_the_dropout():
    assert "dropout 0.1 on the adapters' input" in mm.LoRA(dropout=0.1).describe()
    assert "dropout" not in mm.LoRA().describe()
    assert "dropout 0.05" in mm.QLoRA(dropout=0.05).describe()


def test_weights_gradients_and_states_do_not_change():
    runs = [mm.training_memory(LLAMA, method=mm.LoRA(targets="all", dropout=p), seq_len=64) for p in (0.0, 0.1)]
    for part in ("weights", "gradients", "optimizer_states", "master_weights"):
        assert getattr(runs[0], part) == getattr(runs[1], part)


def test_peft_s_param_wrapper_refuses_dropout_on_the_router_and_experts():
    # peft 0.21 ParamWrapper.__init__: "does not work with lora_dropout != 0" (it raises)
    mixtral = mm.resolve_model("mixtral-8x7b")
    with pytest.raises(FieldError, match="ParamWrapper") as error:
        mm.training_memory(mixtral, method=mm.LoRA(targets="all", dropout=0.1), seq_len=512)
    assert error.value.field == "LoRA dropout"
    attention = mm.training_memory(mixtral, method=mm.LoRA(targets=("q", "k", "v", "o"), dropout=0.1), seq_len=512)
    assert attention.activations > 0


# ---- the exact activation model, by hand --------------------------------------------------------------------
def test_fp32_adapters_keep_a_mask_and_a_dropped_copy_for_the_copy_they_kept():
    # q_proj and v_proj each kept its fp32 copy of x (4 t h); with dropout each keeps the mask (4 t h on the CPU,
    # the copy's dtype; 1 t h on CUDA) and the dropped copy (4 t h): + 4 t h (CPU) or + 1 t h (CUDA) per module.
    # The first block's input needs no gradient (frozen embeddings): its masks are not kept, so it keeps the same.
    on, off = _blocks(0.1, "fp32"), _blocks(0.0, "fp32")
    assert on[0] - off[0] == 2 * 4 * T * H == 262_144
    assert on[1] - off[1] == 0
    on, off = _blocks(0.1, "fp32", "cuda"), _blocks(0.0, "fp32", "cuda")
    assert on[0] - off[0] == 2 * 1 * T * H


def test_adapters_in_the_base_dtype_keep_a_copy_each_where_they_shared_the_input():
    # bf16 adapters on a bf16 base: q and v shared x itself (2 t h, kept once); with dropout each keeps its mask
    # (2 t h on the CPU, 1 t h on CUDA) and its dropped copy (2 t h), and x is kept by none:
    # CPU 2 x 4 t h - 2 t h = 6 t h; CUDA 2 x 3 t h - 2 t h = 4 t h; the first block (no masks) 2 x 2 t h - 2 t h.
    on, off = _blocks(0.1, "bf16"), _blocks(0.0, "bf16")
    assert (on[0] - off[0], on[1] - off[1]) == (6 * T * H, 2 * T * H)
    on, off = _blocks(0.1, "bf16", "cuda"), _blocks(0.0, "bf16", "cuda")
    assert (on[0] - off[0], on[1] - off[1]) == (4 * T * H, 2 * T * H)


def test_any_p_above_0_keeps_the_same_bytes():
    assert _blocks(0.05, "fp32", targets="all") == _blocks(0.1, "fp32", targets="all") != _blocks(0.0, "fp32",
                                                                                                   targets="all")


def test_amp_with_lora_dropout_falls_back_to_the_textbook_model_by_name():
    m = mm.training_memory(LLAMA, precision="amp", method=mm.LoRA(dropout=0.1), seq_len=64, batch_size=2)
    assert m.activation_detail.model == "textbook"
    assert any("LoRA dropout" in str(note) and "autocast" in str(note) for note in m.notes)
    with pytest.raises(ValueError, match="LoRA dropout"):
        mm.training_memory(LLAMA, precision="amp", method=mm.LoRA(dropout=0.1), seq_len=64, batch_size=2,
                           activations="transformers")


# ---- mixed precision: the master copy from step 1 ------------------------------------------------------------
def test_the_master_copy_is_alive_in_the_first_step():
    # The same recipe without its master copy: the first step's forward and backward peaks differ by exactly
    # 4 B per trainable 16-bit parameter (the fp32 copies frameworks build with the optimizer, before step 1).
    no_master = dataclasses.replace(RECIPES["mixed"], name="mixed without a master copy", master_bits=0)
    settings = dict(seq_len=64, batch_size=2, step="first")
    with_copy = mm.peak_memory(LLAMA, precision="mixed", **settings)
    without = mm.peak_memory(LLAMA, precision=no_master, **settings)
    master = 4 * mm.Full().trainable_params(LLAMA)
    assert int(with_copy.forward - without.forward) == master == int(with_copy.backward - without.backward)
    # The optimizer step holds it too and the 16-bit gradients copied up to fp32 for the masters (4 B each), and
    # steps the fp32 masters: Adam's temporaries twice as large as on the bf16 tensors.
    assert int(with_copy.optimizer_step - without.optimizer_step) > 2 * master


def test_the_steady_step_adds_only_the_states_to_the_first():
    first = mm.peak_memory(LLAMA, precision="mixed", seq_len=64, batch_size=2, step="first")
    steady = mm.peak_memory(LLAMA, precision="mixed", seq_len=64, batch_size=2)
    states = mm.training_memory(LLAMA, precision="mixed", seq_len=64, batch_size=2).optimizer_states
    assert int(steady.backward - first.backward) == int(states)


def test_the_recipes_say_which_keeps_a_master_copy():
    assert "no master copy" in RECIPES["amp"].description and "Trainer" in RECIPES["amp"].description
    assert RECIPES["amp"].master_bits == 0
    for name in ("mixed", "mixed_fp32_grads"):
        assert "master" in RECIPES[name].description and RECIPES[name].master_bits == 32
    assert "before the first step" in RECIPES["mixed"].description


# ---- the command line ----------------------------------------------------------------------------------------
def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(list(argv))
        except SystemExit as exit:  # argparse's own refusals
            status = exit.code
    return status, out.getvalue(), err.getvalue()


def test_the_command_line_option_gives_the_api_s_answer():
    status, out, _ = _cli("train", "llama-3-8b", "--method", "lora", "--lora-dropout", "0.1", "--seq", "256",
                          "--json")
    assert status == 0
    got = json.loads(out)["parts"]["activations"]
    want = mm.training_memory("llama-3-8b", method=mm.LoRA(dropout=0.1), seq_len=256).activations
    off = mm.training_memory("llama-3-8b", method=mm.LoRA(), seq_len=256).activations
    assert got == int(want) > int(off)


@pytest.mark.parametrize("argv, words", [
    (("--method", "lora", "--lora-dropout", "1"), "probability"),
    (("--method", "lora", "--lora-dropout", "-0.1"), "probability"),
    (("--method", "lora", "--lora-dropout", "a"), "probability"),
    (("--lora-dropout", "0.1"), "applies to --method lora or qlora"),
])
def test_the_command_line_refuses_a_bad_dropout_in_one_line(argv, words):
    status, _, err = _cli("train", "llama-3-8b", "--seq", "256", *argv)
    assert status == 2 and "--lora-dropout" in err and words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_command_line_names_the_option_for_peft_s_refusal():
    status, _, err = _cli("train", "mixtral-8x7b", "--method", "lora", "--targets", "all", "--lora-dropout", "0.1",
                          "--seq", "512")
    assert status == 2 and err.count("--lora-dropout:") == 1 and "ParamWrapper" in err


# ---- the measurements (validation/lora_dropout.py) -----------------------------------------------------------
def _ids(group=None):
    return [pytest.param(case_id, id=f"{row['group']}:{case_id}") for case_id, row in ROWS.items()
            if group is None or row["group"] == group]


def _relative(predicted, measured):
    return abs(int(predicted) - int(measured)) / int(measured)


@pytest.mark.parametrize("case_id", _ids())
def test_parameters_gradients_states_and_master_copy_to_the_byte(case_id):
    row = ROWS[case_id]
    m = predict_case(row)
    assert int(m.weights) == row["param_bytes"]
    assert int(m.quantization_constants) == (row["quantization_constant_bytes"] if isinstance(row["quant_type"], str) else 0)
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.trainable_params) == row["trainable_params"]
    assert int(m.master_weights) == (row["master_weight_bytes"] if row["master"] else 0)


@pytest.mark.parametrize("case_id", _ids())
def test_saved_activations_to_the_byte_block_by_block(case_id):
    row = ROWS[case_id]
    assert int(predict_case(row).activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", _ids())
def test_peak_within_five_percent_in_both_steps(case_id, step):
    row = ROWS[case_id]
    peak = predict_peak_case(row, step=step)
    assert _relative(peak.total, row[STEP_COLUMN[step]]) <= 0.05, (
        f"predicted {int(peak.total):,} B ({peak.phase}), measured {row[STEP_COLUMN[step]]:,} B")


def test_dropout_keeps_what_the_measurement_found():
    # Measured, not predicted: the same run with p = 0.1 and p = 0 (GPT-2 and LLaMA at hidden 256, every linear,
    # fp32 adapters on bf16): p > 0 saves more, and no two p > 0 of the same run differ.
    for shape in ("gpt2-256", "llama-256"):
        on = ROWS[f"loradrop0.1/{shape}/bf16/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b2s64"]["saved_bytes"]
        off = ROWS[f"loradrop0/{shape}/bf16/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b2s48"]["saved_bytes"]
        assert on * 48 > off * 64  # per token, more is kept with dropout


def test_the_master_cases_peak_above_a_model_without_the_copy_in_step_1():
    # The measured first-step peaks of the activation-bound master cases exceed the peak memmath gives the same
    # run without a master copy by more than 10%: the copy exists before the first forward.
    no_master = dataclasses.replace(RECIPES["mixed"], name="mixed without a master copy", master_bits=0)
    checked = 0
    for row in ROWS.values():
        if row["master"] and row["method"] == "full" and not row["checkpointing"] and row["seq_len"] >= 192:
            from memmath_lessons.reference.measured import case_arguments, case_model

            arguments = {k: v for k, v in case_arguments(row).items() if k != "activations"}
            arguments["precision"] = no_master
            without = mm.peak_memory(case_model(row), step="first", **arguments).total
            assert row["peak_step1_bytes"] > 1.10 * int(without)
            checked += 1
    assert checked == 2


def test_the_recording_covers_the_issue():
    assert len(ROWS) >= 20 and set(CASES.group) == set(GROUPS)
    assert CASES.held_out.all()
    lora = CASES[CASES.group != "master weights"]
    assert set(lora.lora_dropout) == {0.0, 0.05, 0.1}
    assert {"all", "q+k+v+o", "qv"} <= set(lora.lora_targets) and set(CASES["shape"]) == {"gpt2-256", "llama-256"}
    assert set(lora.adapter_format) == {"fp32", "bf16"} and set(lora.precision) == {"fp32", "bf16"}
    assert lora.checkpointing.any() and (lora.attention == "eager").any()
    assert set(CASES[CASES.group == "QLoRA dropout"].quant_type) == {"nf4"}
    master = CASES[CASES.group == "master weights"]
    assert set(master.precision) == {"mixed"} and set(master.method) == {"full", "freeze", "lora"}
    assert (master.master_weight_bytes > 0).sum() >= 6 and (master.master_weight_bytes == 0).any()
