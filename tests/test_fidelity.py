"""memmath's predictions against what PyTorch really allocated, case by case (no torch needed).

The expected numbers are measurements, not memmath's own output: validation/measure.py ran two
training steps per case with torch, transformers and peft on the CPU (versions in the data file)
and recorded the bytes in memmath/data/measured_cpu.json. tests/test_fidelity_live.py checks that
the recording still matches PyTorch today.

Tolerances: parameters, gradients and optimizer states equal to the byte; activations
saved by the forward pass (activations="transformers") within 1% per case; the peak of each of
the two measured steps within 5% (at least 95% of the cases, every miss listed).

Two groups, reported apart: "fitted", the cases the activation and peak models were written
against, and "held-out", the cases measured only afterwards (the data's held_out column).
Every per-case test id starts with its group; test_group_summary prints and checks each group.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memmath
import memmath_lessons.reference
from memmath.hf_activations import transformers_activations
from memmath_lessons.reference.measured import (
    case_arguments, case_method, case_model, load_measured_adapters, load_measured_amp, load_measured_quantized,
    load_measured_sharded, measured_metadata, predict_sharded_peak,
    predict_sharded_case,
    predicted_saved_per_layer,
)

CASES = memmath_lessons.reference.load_measured()
ROWS = {row.case_id: row for row in CASES.itertuples(index=False)}
IDS = list(ROWS)
# Recorded cases that memmath refuses by name (left out of CASES): test_refused_cases_stay_refused
# checks each still raises.
REFUSED = memmath_lessons.reference.measured.REFUSED_CASES
REFUSED_ROWS = {row.case_id: row for row in memmath_lessons.reference.load_measured(refused=True).itertuples(index=False)
                if row.case_id in REFUSED}
GROUPS = ("fitted", "held-out")


def _group(case_id) -> str:
    return "held-out" if ROWS[case_id].held_out else "fitted"


# One pytest parameter per case, its id prefixed with the group: `-k held-out` runs that group alone.
CASE_PARAMS = [pytest.param(case_id, id=f"{_group(case_id)}:{case_id}") for case_id in IDS]
ROOT = Path(__file__).resolve().parent.parent

# Cases where the peak estimate misses by more than 5%, each with the reason, per step ("first":
# step 1, before the optimizer states exist; "steady": step 2, as every later step). They are
# expected failures; test_known_peak_misses_still_miss fails when one starts to pass.
_CKPT_DROPOUT = ("held-out case, estimate 6.4% low: with checkpointing and CPU attention dropout (PyTorch's math "
                 "kernel, fp32 s x s tensors) the backward peak falls while a block is recomputed, and the math "
                 "kernel's temporaries that overlap the block's gradients there are not all in the model")
_FROZEN_RECOMPUTE = ("held-out case, estimate 7.0-7.3% low in the backward pass: with checkpointing and frozen "
                     "embeddings transformers makes the embedding output a leaf that requires grad, so the three "
                     "frozen blocks are recomputed and run backward too, to give it a gradient; the model's "
                     "recompute moments count the trained blocks only. In step 1 the optimizer step (8.5-9.4% "
                     "above that backward) hid it; from step 2 on the states make backward the peak")
KNOWN_PEAK_MISSES = {
    ("first", "llama-wide/fp32/sgd_momentum/lora4-qv-fp32/sdpa/drop/ckpt/b2s112"): _CKPT_DROPOUT,
    ("steady", "llama-wide/fp32/sgd_momentum/lora4-qv-fp32/sdpa/drop/ckpt/b2s112"): _CKPT_DROPOUT,
    ("steady", "bert-wide/bf16/adamw/freeze3/sdpa/nodrop/ckpt/b3s48"): _FROZEN_RECOMPUTE,
}
STEP_COLUMN = {"first": "peak_step1_bytes", "steady": "peak_step2_bytes"}


def _row(case_id):
    return ROWS[case_id]._asdict()


def _relative(predicted, measured):
    return abs(int(predicted) - int(measured)) / int(measured)


@pytest.mark.parametrize("case_id", CASE_PARAMS)
def test_parameters_gradients_and_optimizer_states_to_the_byte(case_id):
    row = _row(case_id)
    m = memmath_lessons.reference.predict_case(row)
    assert int(m.weights) == row["param_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.total_params) == row["total_params"]
    assert int(m.trainable_params) == row["trainable_params"]


@pytest.mark.parametrize("case_id", CASE_PARAMS)
def test_saved_activations_within_one_percent(case_id):
    row = _row(case_id)
    detail = memmath_lessons.reference.predict_case(row).activation_detail
    assert detail.model == "transformers"
    assert _relative(detail.saved_by_forward, row["saved_bytes"]) <= 0.01, (
        f"predicted {int(detail.saved_by_forward):,} B, measured {row['saved_bytes']:,} B")


@pytest.mark.parametrize("case_id", CASE_PARAMS)
def test_saved_activations_block_by_block(case_id):
    # Lessons 3 and 4 show the blocks one by one: every block's measured bytes, frozen ones (0) included.
    row = _row(case_id)
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", CASE_PARAMS)
def test_peak_within_five_percent(case_id, step):
    if (step, case_id) in KNOWN_PEAK_MISSES:
        pytest.xfail(KNOWN_PEAK_MISSES[(step, case_id)])
    row = _row(case_id)
    peak = memmath_lessons.reference.predict_peak_case(row, step=step)
    measured = row[STEP_COLUMN[step]]
    assert _relative(peak.total, measured) <= 0.05, (
        f"predicted {int(peak.total):,} B ({peak.phase}), measured {measured:,} B in the {step} step")


@pytest.mark.parametrize("step, case_id", sorted(KNOWN_PEAK_MISSES))
def test_known_peak_misses_still_miss(step, case_id):
    """A listed miss that starts to pass must leave KNOWN_PEAK_MISSES (and the README's note)."""
    row = _row(case_id)
    predicted = memmath_lessons.reference.predict_peak_case(row, step=step).total
    assert _relative(predicted, row[STEP_COLUMN[step]]) > 0.05


def test_at_least_95_percent_of_peaks_within_five_percent():
    for step in STEP_COLUMN:
        misses = [c for s, c in KNOWN_PEAK_MISSES if s == step]
        assert len(misses) <= 0.05 * len(IDS), (step, misses)


@pytest.mark.parametrize("case_id", IDS[::5])
def test_the_second_step_adds_what_the_first_step_made(case_id):
    # Measured: step 2's forward and backward peaks exceed step 1's by the optimizer states (and the
    # previous step's loss, kept until the next forward ends); memmath's steady step adds the same.
    row = _row(case_id)
    first = memmath_lessons.reference.predict_peak_case(row, step="first")
    steady = memmath_lessons.reference.predict_peak_case(row)
    for phase in ("forward", "backward"):
        measured = row[f"peak_step2_{phase}_bytes"] - row[f"peak_step1_{phase}_bytes"]
        assert int(getattr(steady, phase) - getattr(first, phase)) == measured, phase
    # bitsandbytes' quantization maps exist from the optimizer's construction, before step 1.
    maps = row["optimizer_state_detail"].get("qmap1", 0) + row["optimizer_state_detail"].get("qmap2", 0)
    assert row["peak_step2_backward_bytes"] - row["peak_step1_backward_bytes"] == (
        row["optimizer_state_bytes"] - maps) * (row["trainable_params"] > 0)


def test_peak_memory_names_its_step():
    with pytest.raises(ValueError, match="step"):
        memmath.peak_memory("gpt2", seq_len=16, step="second")
    assert memmath.peak_memory("gpt2", seq_len=16).step == "steady"


def _summary(group):
    """Counts and worst errors of one group, from the predictions against the measurements."""
    ids = [case_id for case_id in IDS if _group(case_id) == group]
    exact = saved_ok = peak_ok = 0
    worst_saved = worst_peak = 0.0
    for case_id in ids:
        row = _row(case_id)
        m = memmath_lessons.reference.predict_case(row)
        exact += (int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
            row["param_bytes"], row["grad_bytes"], row["optimizer_state_bytes"])
        saved = _relative(m.activation_detail.saved_by_forward, row["saved_bytes"])
        peak = _relative(memmath_lessons.reference.predict_peak_case(row).total, row["peak_bytes"])
        saved_ok, peak_ok = saved_ok + (saved <= 0.01), peak_ok + (peak <= 0.05)
        worst_saved, worst_peak = max(worst_saved, saved), max(worst_peak, peak)
    return dict(cases=len(ids), exact=exact, saved_ok=saved_ok, peak_ok=peak_ok, worst_saved=worst_saved,
                worst_peak=worst_peak, known_misses=sum(("steady", case_id) in KNOWN_PEAK_MISSES for case_id in ids))


@pytest.mark.parametrize("group", GROUPS)
def test_group_summary(group, capsys):
    """Each group's record, printed with the test run: the held-out group is the honest one."""
    s = _summary(group)
    with capsys.disabled():
        print(f"\n{group}: {s['cases']} cases; parameters, gradients and states exact in {s['exact']}; saved "
              f"activations within 1% in {s['saved_ok']} (worst {s['worst_saved']:.2%}); peak within 5% in "
              f"{s['peak_ok']} (worst {s['worst_peak']:.1%})")
    assert s["cases"] > 0
    assert s["exact"] == s["saved_ok"] == s["cases"]
    # Only the listed misses miss: the fitted group has none, the held-out group its known one.
    assert s["peak_ok"] == s["cases"] - s["known_misses"]


def test_the_held_out_group_is_what_was_measured_after_the_model():
    # validation/measure.py: 5 cases on each of three wider shapes (step 6), the first model types
    # read from config.json (grid block 7: 4 cases each, 2 more for Phi-3 and OLMo 2), and the 8-bit Adam cases.
    held_out = CASES[CASES.held_out]
    wide = held_out[held_out["shape"].isin(["gpt2-wide", "llama-wide", "bert-wide"]) & (held_out["group"] != "8-bit Adam")]
    families = held_out[held_out["shape"].isin(["gpt2-tanh", "qwen2-gqa", "mistral-gqa", "qwen3-gqa", "phi3-gqa",
                                                "olmo2-gqa"])]
    # Grid block 8: the other model types read from config.json, 5 cases each, measured after their traces were
    # written; block 9: 5 GPT-NeoX cases measured after its b = 1 eager case had missed and was modelled;
    # block 10: 5 RoBERTa cases, measured after its trace was written; block 11: 3 Gemma 3 cases with
    # both layer types (two rotary pairs).
    more = held_out[held_out["shape"].isin(["gemma-gqa", "gemma2-gqa", "gemma3-gqa", "neox-mha", "mixtral-moe",
                                            "qwen2moe-moe", "qwen3moe-moe", "neox-serial", "roberta",
                                            "gemma3-mixed"])]
    # Block 12: 18 cases with use_cache=True (and 2 of Phi-3 without), measured after the training
    # forward's DynamicCache was modelled (test_use_cache_cases_were_measured_after_the_cache_was_modelled).
    cache = held_out[held_out["shape"].isin(CACHE_SHAPES)]
    families = pd.concat([families, more, cache])
    assert len(cache) == 18
    assert len(wide) == 15 and len(families) == 28 + 35 + 5 + 5 + 3 + 18 - len(REFUSED)  # the refused one is left out
    assert set(held_out[held_out["group"] == "8-bit Adam"].index) | set(wide.index) | set(families.index) == set(
        held_out.index)
    assert all(_group(case_id) == "held-out" for _step, case_id in KNOWN_PEAK_MISSES)


CACHE_SHAPES = ("neox-256", "phi3-256", "phi3-256-nocache", "gpt2-256")


def test_use_cache_cases_were_measured_after_the_cache_was_modelled():
    # GPT-NeoX and Phi-3 configs with transformers' defaults (use_cache=True) measured less than the
    # trace without the cache; grid block 12 was recorded after hf_activations._kv_cache was written. Every
    # case holds to the byte block by block (test_saved_activations_block_by_block) with its peak within 5%.
    cases = CASES[CASES["shape"].isin(CACHE_SHAPES)]
    assert len(cases) == 18 and cases.held_out.all()
    assert set(cases["shape"]) == set(CACHE_SHAPES) and cases.checkpointing.any() and cases.dropout.any()
    assert {"full", "lora", "freeze"} <= set(cases.method) and {"sdpa", "eager"} <= set(cases.attention)
    on = cases[cases["shape"] != "phi3-256-nocache"]
    assert all(case_model(row).use_cache for _, row in on.iterrows())
    assert not any(case_model(row).use_cache for _, row in cases[cases["shape"] == "phi3-256-nocache"].iterrows())
    # Every earlier case ran with use_cache=False, and is replayed so.
    assert not any(case_model(row).use_cache for _, row in CASES[~CASES["shape"].isin(CACHE_SHAPES)].iterrows())


@pytest.mark.parametrize("case_id", sorted(REFUSED))
def test_refused_cases_stay_refused(case_id):
    """A refused recorded case raises a ValueError that names why; once modelled, it joins IDS."""
    assert case_id not in ROWS and REFUSED_ROWS[case_id].held_out
    with pytest.raises(ValueError, match=REFUSED[case_id]):
        memmath_lessons.reference.predict_case(REFUSED_ROWS[case_id]._asdict())


def test_training_memory_reports_the_transformers_estimate():
    # activations in the breakdown = every saved byte plus the recompute buffer of checkpointing.
    for case_id in IDS[::7]:
        row = _row(case_id)
        m = memmath_lessons.reference.predict_case(row)
        detail = m.activation_detail
        assert int(m.activations) == int(detail.total) == int(detail.saved_by_forward + detail.recompute_peak)
        assert (int(detail.recompute_peak) > 0) == bool(row["checkpointing"])


def test_the_recording_covers_the_grid_of_issue_4():
    grid = CASES[CASES.group == "transformers"]
    assert len(grid) >= 100
    assert set(grid.family) == {"gpt2", "llama", "bert"}
    llama = grid[grid.family == "llama"]
    assert (llama.n_kv_heads < llama.n_heads).any() and (llama.n_kv_heads == llama.n_heads).any()  # GQA and MHA
    assert set(llama.tied_embeddings) == {True, False}
    assert set(grid.precision) == {"fp32", "bf16"}
    assert set(grid.optimizer) == {"adamw", "sgd_momentum", "adam_amsgrad"}
    assert set(grid.method) == {"full", "freeze", "lora"}
    lora = grid[grid.method == "lora"]
    assert set(lora.lora_targets) == {"qv", "all"}
    assert set(lora[lora.precision == "bf16"].adapter_format) == {"fp32", "bf16"}
    assert set(grid.attention) == {"eager", "sdpa"}
    assert set(grid.dropout) == {True, False} and set(grid.checkpointing) == {True, False}
    assert grid.batch_size.nunique() >= 3 and grid.seq_len.nunique() >= 3
    assert grid.case_id.is_unique


def test_the_8_bit_adam_group_has_tensors_on_both_sides_of_4096():
    # bitsandbytes keeps uint8 state1/state2 + absmax for tensors of 4,096 elements or more, fp32
    # states below: a case with 8-bit states only in some tensors and one (LoRA rank 8) with none.
    eight = CASES[CASES.group == "8-bit Adam"]
    assert len(eight) >= 40 and set(eight.optimizer) == {"adam8bit", "adamw8bit"} and eight.held_out.all()
    assert set(eight.method) == {"full", "lora", "freeze"}
    full = eight[eight.method == "full"].iloc[0]
    assert {"state1", "state2", "absmax1", "absmax2", "qmap1", "qmap2"} <= set(full.optimizer_state_detail)
    small = eight[(eight.method == "lora") & (eight.lora_rank == 8) & (eight.hidden_size == 64)].iloc[0]
    assert "absmax1" not in small.optimizer_state_detail  # every adapter is under 4,096 elements
    # Measured: the two quantization maps are one pair for the whole optimizer, 2 x 256 fp32 values.
    assert full.optimizer_state_detail["qmap1"] == full.optimizer_state_detail["qmap2"] == 256 * 4


def test_the_recording_is_self_consistent():
    for row in CASES.itertuples(index=False):
        assert row.saved_bytes == sum(row.saved_per_layer) + row.saved_outside_layers
        assert len(row.saved_per_layer) == row.n_layers
        for k in (1, 2):
            assert getattr(row, f"peak_step{k}_bytes") == max(getattr(row, f"peak_step{k}_{p}_bytes")
                                                               for p in ("forward", "backward", "optimizer_step"))
        assert row.peak_bytes == row.peak_step2_bytes
        assert row.optimizer_state_bytes == sum(row.optimizer_state_detail.values())


def test_the_recording_names_the_pinned_versions():
    pins = dict(line.split("==") for line in (ROOT / "requirements-validate.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    versions = measured_metadata()["versions"]
    assert versions["torch"].split("+")[0] == pins["torch"]
    assert versions["transformers"] == pins["transformers"]
    assert versions["peft"] == pins["peft"]
    assert versions["bitsandbytes"] == pins["bitsandbytes"]
    assert measured_metadata()["device"] == "cpu"


def test_amsgrad_keeps_a_third_state():
    # torch.optim.Adam(amsgrad=True) keeps exp_avg, exp_avg_sq and max_exp_avg_sq: 3 x 4 B in fp32.
    assert memmath.recipes.bytes_per_parameter("fp32", "adam_amsgrad")["optimizer_states"] == 12
    assert memmath.recipes.bytes_per_parameter("bf16", "adamw_amsgrad")["optimizer_states"] == 6
    amsgrad = CASES[CASES.optimizer == "adam_amsgrad"]
    assert all(set(d) == {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"} for d in amsgrad.optimizer_state_detail)


def test_gpt2_block_by_hand():
    # One GPT-2 block, bf16 (e = 2), SDPA without dropout, input needing a gradient, CPU:
    # ln_1 input + mean + rstd: e*t*h + 2*e*t; c_attn input e*t*h; q,k,v (one c_attn output) 3*e*t*h;
    # log-sum-exp 4*b*a*s; SDPA output (the c_proj input) e*t*h; ln_2: e*t*h + 2*e*t; c_fc input
    # e*t*h; gelu_new: x, tanh, 1 + tanh, 0.5*x = 4*e*t*I; mlp.c_proj input e*t*I.
    b, s, h, a, inner, e = 2, 64, 64, 4, 256, 2
    t = b * s
    by_hand = 8 * e * t * h + 4 * e * t + 4 * b * a * s + 5 * e * t * inner
    shape = memmath.models.gpt2_model(n_layers=3, hidden_size=h, n_heads=a, vocab_size=1000, max_positions=256)
    m = memmath.training_memory(shape, precision="bf16", batch_size=b, seq_len=s, attention="sdpa", dropout=False,
                                activations="transformers", device="cpu")
    assert m.activation_detail.per_layer == by_hand
    # The loss: fp32 log-softmax over the vocabulary, 4*t*V, and the shifted int64 labels, 8*t, plus 4 B.
    assert m.activation_detail.loss == 4 * t * 1000 + 8 * t + 4


def test_dropout_masks_take_the_element_size_on_the_cpu_and_a_byte_on_cuda():
    shape = memmath.models.gpt2_model(n_layers=2, hidden_size=64, n_heads=4, vocab_size=1000, max_positions=256)
    kw = dict(precision="fp32", batch_size=2, seq_len=32, attention="eager", activations="transformers")
    cpu = memmath.training_memory(shape, dropout=True, device="cpu", **kw).activation_detail.per_layer
    cuda = memmath.training_memory(shape, dropout=True, device="cuda", **kw).activation_detail.per_layer
    off = memmath.training_memory(shape, dropout=False, device="cpu", **kw).activation_detail.per_layer
    t, masks = 2 * 32, 2 * 2 * 32 * 64 + 2 * 4 * 32 * 32  # two t x h masks, one a x s x s mask per block
    assert cpu - cuda == masks * (4 - 1)
    # Dropout also keeps the dropped probabilities, a second s x s tensor (4 B each at fp32).
    assert cpu - off == masks * 4 + 2 * 4 * 32 * 32 * 4
    assert t == 64


def test_sweeps_broadcast_like_single_points():
    shape = case_model(_row(IDS[0]))
    batches, lengths = np.array([1, 2, 4]), np.array([16, 64])[:, None]
    kw = dict(precision="bf16", method=memmath.LoRA(rank=8, targets=("q", "v", "o", "up", "down")), attention="eager", dropout=True,
              activations="transformers", device="cpu")
    swept = memmath.training_memory(shape, batch_size=batches, seq_len=lengths, **kw).activations
    peak = memmath.peak_memory(shape, batch_size=batches, seq_len=lengths, **{k: v for k, v in kw.items()
                                                                              if k != "activations"}).total
    for i, s in enumerate(lengths.ravel()):
        for j, b in enumerate(batches):
            assert swept[i, j] == memmath.training_memory(shape, batch_size=int(b), seq_len=int(s), **kw).activations
            single = memmath.peak_memory(shape, batch_size=int(b), seq_len=int(s),
                                         **{k: v for k, v in kw.items() if k != "activations"})
            assert peak[i, j] == single.total


def test_freeze_sweep_over_trainable_layers():
    shape = case_model(ROWS["llama-gqa/bf16/adamw/freeze1/sdpa/nodrop/nockpt/b2s64"]._asdict())
    kw = dict(precision="bf16", batch_size=2, seq_len=64, attention="sdpa", dropout=False,
              activations="transformers", device="cpu")
    swept = memmath.training_memory(shape, method=memmath.Freeze(trainable_layers=np.array([0, 1, 2, 3])), **kw)
    for i, k in enumerate([0, 1, 2, 3]):
        single = memmath.training_memory(shape, method=memmath.Freeze(trainable_layers=k), **kw)
        assert swept.activations[i] == single.activations
    # Measured: freezing the first 2 of 3 blocks (1 trains) and the first 1 (2 train).
    for frozen in (1, 2):
        row = ROWS[f"llama-gqa/bf16/adamw/freeze{frozen}/sdpa/nodrop/nockpt/b2s64"]
        assert swept.activation_detail.saved_by_forward[3 - frozen] == row.saved_bytes


@pytest.mark.parametrize("bad, message", [
    (dict(method=memmath.Adapters(bottleneck=8)), "gpt2's blocks have no such place traced"),
    (dict(precision="amp", attention="sdpa", dropout=True, device="cpu"), "AMP with SDPA without dropout"),
    (dict(precision="amp", method=memmath.QLoRA(rank=8)), "AMP for Full"),
])
def test_transformers_model_refuses_what_it_does_not_model(bad, message):
    shape = memmath.PRESETS["gpt2"]
    kw = dict(precision="bf16", batch_size=1, seq_len=16, activations="transformers") | bad
    with pytest.raises(ValueError, match=message):
        memmath.training_memory(shape, **kw)


def test_transformers_model_needs_a_known_family():
    with pytest.raises(ValueError, match="gpt2, llama and bert"):
        memmath.training_memory(memmath.uniform_model(7e9, 32, hidden_size=4096, n_heads=32, vocab_size=32000),
                                seq_len=16, activations="transformers")


def test_peak_memory_needs_a_sequence_length():
    # Left out, the length is Run's default (2,048 tokens); a run without one has no activations to place.
    assert memmath.peak_memory("gpt2").total == memmath.peak_memory("gpt2", seq_len=2048).total
    with pytest.raises(ValueError, match="sequence length"):
        memmath.peak_memory("gpt2", seq_len=None)


def test_the_loader_and_the_predictions_work_without_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; import memmath_lessons.reference; "
            "df = memmath_lessons.reference.load_measured(); row = df.iloc[0]; "
            "assert int(memmath_lessons.reference.predict_case(row).weights) == row.param_bytes; "
            "memmath_lessons.reference.predict_peak_case(row); print(len(df))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(CASES)


def test_case_helpers_rebuild_the_call():
    row = _row("gpt2/bf16/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b2s64")
    method = case_method(row)
    assert isinstance(method, memmath.LoRA) and method.adapter_format == "fp32" and method.rank == 8
    assert case_arguments(row)["device"] == "cpu"
    direct = transformers_activations(case_model(row), plan=None, recipe=memmath.recipes.get_recipe("bf16"), method=method,
                                      seq_len=64, batch_size=2, dropout=False, attention="sdpa", checkpointing=False,
                                      device="cpu")
    assert direct.estimate.saved_by_forward == row["saved_bytes"]


# ---- sharded runs (validation/sharded.py: FSDP2 and ZeroRedundancyOptimizer over gloo, per rank) ----
SHARDED = load_measured_sharded()
SHARDED_IDS = list(SHARDED.case_id)


def _sharded_row(case_id):
    return SHARDED[SHARDED.case_id == case_id].iloc[0].to_dict()


@pytest.mark.parametrize("case_id", SHARDED_IDS)
def test_sharded_parameters_gradients_and_states_per_rank_to_the_byte(case_id):
    row = _sharded_row(case_id)
    for rank in range(int(row["world_size"])):
        m = predict_sharded_case(row, rank)
        assert int(m.weights) == row["param_bytes_per_rank"][rank], rank
        assert int(m.gradients) == row["grad_bytes_per_rank"][rank], rank
        assert int(m.optimizer_states) == row["optimizer_state_bytes_per_rank"][rank], rank


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", [c for c in SHARDED_IDS if c.endswith(("zero1x2", "zero1x4"))])
def test_zero1_peak_per_rank_within_five_percent(case_id, step):
    row = _sharded_row(case_id)
    column = {"first": "peak_step1", "steady": "peak_step2"}[step]
    for rank in range(int(row["world_size"])):
        predicted = predict_sharded_peak(row, rank, step)
        assert _relative(predicted["total"], row[f"{column}_bytes_per_rank"][rank]) <= 0.05, rank
        # the rank's own states and Adam temporaries: its optimizer step within 3%
        measured = row[f"{column}_optimizer_step_bytes_per_rank"][rank]
        assert _relative(predicted["optimizer_step"], measured) <= 0.03, rank


@pytest.mark.parametrize("case_id", SHARDED_IDS)
def test_the_requirement_of_a_sharded_rank_is_its_modelled_peak(case_id):
    # FSDP2 and ZeRO-1 ranks are judged on memmath/sharded_peak.py's modelled peak: within 5% of both steps' measured
    # peaks, or up to 10% below where the CPU profiler missed the free of a root-sized collective buffer
    # (tests/test_sharded_peak.py).
    row = _sharded_row(case_id)
    sharding, stage = ("zero_redundancy", 1) if row["engine"] == "zero1" else ("fsdp2", 3)
    for rank in range(int(row["world_size"])):
        need = memmath.requirement(case_model(row), n_gpus=int(row["world_size"]), zero_stage=stage,
                                   sharding=sharding, rank=rank, reshard_after_forward=row["engine"] == "fsdp2",
                                   gradient_as_bucket_view=True, **case_arguments(row))
        assert need.basis == "peak"
        measured = max(row["peak_step1_bytes_per_rank"][rank], row["peak_step2_bytes_per_rank"][rank])
        assert -0.10 <= need.bytes / measured - 1 <= 0.05, rank


def test_fsdp2_peaks_are_refused_by_name():
    row = _sharded_row(next(c for c in SHARDED_IDS if "fsdp2x" in c))
    with pytest.raises(ValueError, match="engine"):
        predict_sharded_peak(row, 0)


def test_the_sharded_recording_covers_both_engines_and_padding():
    assert set(SHARDED.engine) == {"fsdp2", "fsdp2-noreshard", "zero1"} and set(SHARDED.world_size) == {2, 4}
    # BERT's classifier (2 x 64) on 4 ranks: FSDP2 pads every rank to one row, so the ranks' weights add
    # up to more than the model's; ZeRO-1 gives whole tensors, so its ranks' states differ.
    bert = _sharded_row("bert/bf16/adamw/full/sdpa/nodrop/nockpt/b2s64/fsdp2x4") if (
        "bert/bf16/adamw/full/sdpa/nodrop/nockpt/b2s64/fsdp2x4" in SHARDED_IDS) else _sharded_row(
        "bert/fp32/adamw/full/sdpa/nodrop/nockpt/b2s64/fsdp2x4")
    single = predict_sharded_case(bert, 0)
    assert sum(bert["param_bytes_per_rank"]) > memmath.training_memory(case_model(bert), precision=bert["precision"]).weights
    assert int(single.weights) == bert["param_bytes_per_rank"][0]
    zero = SHARDED[SHARDED.engine == "zero1"]
    assert any(len(set(r)) > 1 for r in zero.optimizer_state_bytes_per_rank)


@pytest.mark.parametrize("bad, message", [
    (dict(sharding="fsdp2", n_gpus=2, zero_stage=1), "zero_stage=3"),
    (dict(sharding="zero_redundancy", n_gpus=2, zero_stage=3), "zero_stage=1"),
    (dict(sharding="fsdp2", n_gpus=2, zero_stage=3, method=memmath.LoRA(rank=8)), "Full"),
    (dict(sharding="fsdp2", n_gpus=2, zero_stage=3, precision="mixed"), "pure"),
    (dict(sharding="fsdp2", n_gpus=2, zero_stage=3, optimizer="adam8bit"), "optimizer"),
    (dict(sharding="fsdp2", n_gpus=2, zero_stage=3, rank=2), "rank"),
    (dict(sharding="deepspeed"), "sharding"),
])
def test_engine_sharding_refuses_what_it_does_not_model(bad, message):
    with pytest.raises(ValueError, match=message):
        memmath.training_memory("gpt2", **bad)


# ---- Houlsby adapters (validation/houlsby.py in BERT and LLaMA blocks) ----
ADAPTERS = load_measured_adapters()


@pytest.mark.parametrize("case_id", list(ADAPTERS.case_id))
def test_houlsby_adapters_counts_gradients_and_states_to_the_byte(case_id):
    row = ADAPTERS[ADAPTERS.case_id == case_id].iloc[0].to_dict()
    m = memmath_lessons.reference.predict_case(row, activations="textbook")
    assert int(m.weights) == row["param_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.trainable_params) == row["trainable_params"] == row["adapter_params"]
    assert int(m.total_params) == row["total_params"]


@pytest.mark.parametrize("case_id", list(ADAPTERS.case_id))
def test_houlsby_adapters_saved_activations_to_the_byte_block_by_block(case_id):
    row = ADAPTERS[ADAPTERS.case_id == case_id].iloc[0].to_dict()
    m = memmath_lessons.reference.predict_case(row)
    assert int(m.activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", list(ADAPTERS.case_id))
def test_houlsby_adapters_peak_within_five_percent(case_id, step):
    row = ADAPTERS[ADAPTERS.case_id == case_id].iloc[0].to_dict()
    assert _relative(memmath_lessons.reference.predict_peak_case(row, step=step).total, row[STEP_COLUMN[step]]) <= 0.05


def test_the_held_out_adapter_cases_were_measured_after_the_trace():
    # validation/houlsby.py's held_out_grid: 15 cases, widths 4, 16 and 64, eager attention with dropout,
    # checkpointing; the 20 earlier ones predate the traced adapters (8 of them wide shapes, flagged then).
    late = ADAPTERS[ADAPTERS.bottleneck.isin([4, 16, 64])]
    assert len(late) == 15 and late.held_out.all() and late.checkpointing.any() and late.dropout.any()


def test_the_adapter_recording_covers_bert_llama_and_two_widths():
    assert set(ADAPTERS.family) == {"bert", "llama"} and set(ADAPTERS.bottleneck) == {4, 8, 16, 32, 64}
    # Houlsby et al. 2019: each adapter 2*m*h + m + h, two per block: BERT, h = 64, m = 8, 3 blocks.
    row = ADAPTERS[ADAPTERS.case_id == "bert/fp32/adamw/houlsby8/sdpa/nodrop/nockpt/b2s64"].iloc[0]
    assert row.adapter_params == 3 * 2 * (2 * 8 * 64 + 8 + 64) == 6_576


# ---- QLoRA: bitsandbytes' 4-bit and 8-bit bases under peft's LoRA (validation/quantized.py) ----
QUANTIZED = load_measured_quantized()
QUANTIZED_IDS = list(QUANTIZED.case_id)
# Peaks that miss 5%, with why (the peak terms for a quantized base were written after these cases
# were measured; before them 17 of 200 step peaks missed).
_QLORA_BERT_SMALL = ("held-out case, estimate 5.1% high in step 1's backward entering the last block: the model adds "
                     "the largest dequantized matrix (256 x 64 in bf16, 32,768 B) to every backward moment, but in "
                     "BERT at b x s = 64 tokens it is not alive at that point (without it the moment is 0.8% high)")
KNOWN_QLORA_PEAK_MISSES = {
    # (the checkpointed llama-wide case, -6.5% before, is -4.5% since the 4-bit base's loss moments hold no
    # dequantized matrix: a change made to fit the LoRA-dropout cases, validation/lora_dropout.py)
    ("first", "qlora-nf4/bert/bf16/adamw/lora4-all-bf16/sdpa/nodrop/nockpt/b4s16"): _QLORA_BERT_SMALL,
}


def _quantized_row(case_id):
    return QUANTIZED[QUANTIZED.case_id == case_id].iloc[0].to_dict()


@pytest.mark.parametrize("case_id", QUANTIZED_IDS)
def test_qlora_weights_constants_gradients_and_states_to_the_byte(case_id):
    row = _quantized_row(case_id)
    m = memmath_lessons.reference.predict_case(row)
    assert int(m.weights) == row["param_bytes"]  # packed 4-bit (or int8) base + unquantized tensors + adapters
    assert int(m.quantization_constants) == row["quantization_constant_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.total_params) == row["total_params"] and int(m.trainable_params) == row["trainable_params"]


@pytest.mark.parametrize("case_id", QUANTIZED_IDS)
def test_qlora_saved_activations_to_the_byte(case_id):
    # An 8-bit base's matmul keeps its input as ctx.A, outside autograd's saved tensors: the
    # measurement counts those storages apart (held_by_ctx_bytes); memmath counts them as saved.
    row = _quantized_row(case_id)
    m = memmath_lessons.reference.predict_case(row)
    assert int(m.activation_detail.saved_by_forward) == row["saved_bytes"] + row["held_by_ctx_bytes"]
    assert (row["held_by_ctx_bytes"] > 0) == (row["quant_type"] == "int8")


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", QUANTIZED_IDS)
def test_qlora_peak_within_five_percent(case_id, step):
    if (step, case_id) in KNOWN_QLORA_PEAK_MISSES:
        pytest.xfail(KNOWN_QLORA_PEAK_MISSES[(step, case_id)])
    row = _quantized_row(case_id)
    predicted = memmath_lessons.reference.predict_peak_case(row, step=step).total
    assert _relative(predicted, row[STEP_COLUMN[step]]) <= 0.05


def test_qlora_known_peak_misses_are_at_most_5_percent_and_still_miss():
    assert len(KNOWN_QLORA_PEAK_MISSES) <= 0.05 * 2 * len(QUANTIZED_IDS)
    for step, case_id in KNOWN_QLORA_PEAK_MISSES:
        predicted = memmath_lessons.reference.predict_peak_case(_quantized_row(case_id), step=step).total
        assert _relative(predicted, _quantized_row(case_id)[STEP_COLUMN[step]]) > 0.05


def test_qlora_constants_of_one_case_by_hand():
    # llama-gqa (h = 64, 4 heads of 16, 2 kv heads, I = 176, 3 blocks), NF4 with double quantization:
    # 7 matrices a block of 4,096, 2,048, 2,048, 4,096 and 3 x 11,264 values, 21 in all.
    row = _quantized_row("qlora-nf4-dq/llama-gqa/fp32/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b1s48")
    blocks = 3 * (64 + 32 + 32 + 64 + 3 * 176)  # one uint8 absmax per 64 values
    assert row["quant_absmax_bytes"] == blocks == 2_160
    assert row["quant_nested_absmax_bytes"] == 21 * 4  # each matrix has <= 256 blocks: one fp32 constant
    assert row["quant_offset_bytes"] == 21 * 4  # QuantState.offset, an fp32 scalar per matrix
    assert row["quant_code_bytes"] == 21 * (16 * 4 + 256 * 4)  # NF4's 16 levels and the nested 256-value map
    assert row["quantized_matrices"] == 21
    # Without double quantization: fp32 absmax and the 16-level map only.
    plain = _quantized_row("qlora-nf4/llama-gqa/bf16/adamw/lora8-qv-bf16/sdpa/nodrop/nockpt/b3s32")
    assert plain["quantization_constant_bytes"] == 4 * blocks + 21 * 64
    # LLM.int8: one fp32 scale per output row: 3 x (64 + 32 + 32 + 64 + 176 + 176 + 64) rows.
    int8 = _quantized_row("qlora-int8/llama-gqa/bf16/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b2s64")
    assert int8["quantization_constant_bytes"] == 4 * 3 * (64 + 32 + 32 + 64 + 176 + 176 + 64) == 7_296


def test_the_qlora_recording_covers_both_4_bit_types_double_quantization_and_an_8_bit_base():
    kinds = set(zip(QUANTIZED.quant_type, QUANTIZED.double_quant))
    assert kinds == {("nf4", True), ("nf4", False), ("fp4", True), ("fp4", False), ("int8", False)}
    assert len(QUANTIZED) >= 100 and set(QUANTIZED.family) == {"gpt2", "llama", "bert"}
    assert QUANTIZED.held_out.sum() == len(QUANTIZED) - 6  # the six int8 cases the ctx.A inputs were written from
    assert measured_metadata()["versions"]["bitsandbytes"] == "0.50.2"


def test_the_paper_layout_leaves_out_the_code_maps_and_says_so():
    row = _quantized_row("qlora-nf4-dq/llama-gqa/fp32/adamw/lora8-all-fp32/sdpa/nodrop/nockpt/b1s48")
    paper = memmath.training_memory(case_model(row), **{**case_arguments(row), "method": memmath.QLoRA(
        rank=8, targets="all", adapter_format="fp32")})
    assert int(paper.quantization_constants) == row["quantization_constant_bytes"] - row["quant_code_bytes"] \
        - row["quant_offset_bytes"]
    assert any(note.kind == "quant_maps_not_counted" for note in paper.notes)


def test_measured_qlora_table_sets_measurement_beside_prediction():
    table = memmath_lessons.reference.measured.measured_qlora(quant_type="nf4", max_cases=2)
    assert len(table) == 2 * 4 and table.equal.all() and set(table.quant_type) == {"nf4"}
    assert (table.measured == table.predicted).all() and "bitsandbytes 0.50.2" in table.libraries.iloc[0]
    with pytest.raises(ValueError, match="quant_type"):
        memmath_lessons.reference.measured.measured_qlora(quant_type="nf2")


# ---- AMP: the forward under torch.autocast("cpu", dtype=torch.bfloat16) (validation/amp.py) ----
AMP = load_measured_amp()


@pytest.mark.parametrize("case_id", list(AMP.case_id))
def test_amp_weights_gradients_and_states_to_the_byte(case_id):
    row = AMP[AMP.case_id == case_id].iloc[0].to_dict()
    m = memmath_lessons.reference.predict_case(row, activations="textbook")
    assert int(m.weights) == row["param_bytes"] == 4 * (row["total_params"] + row["adapter_params"])
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]
    assert int(m.master_weights) == 0  # the fp32 weights are the master copy


def test_amp_keeps_bf16_weight_copies_for_backward():
    # Full finetuning of llama-gqa: every linear weight of the blocks and the untied head is cast to
    # bf16 by autocast and saved by its matmul: (3 x 46,080 + 64,000) x 2 B.
    row = AMP[AMP.case_id == "llama-gqa/amp/adamw/full/sdpa/nodrop/nockpt/b2s64"].iloc[0]
    assert row.saved_weight_cast_bytes == (3 * (4096 + 2048 + 2048 + 4096 + 3 * 64 * 176) + 64_000) * 2 == 404_480
    assert len(AMP) >= 30 and AMP.held_out.all()


AMP_SDPA = AMP  # SDPA without dropout and eager attention: all modelled (SDPA with dropout is refused)
AMP_AFTER_TRACE = set(AMP.case_id[AMP.get("after_amp_trace", False).fillna(False).astype(bool)])


def _amp_row(case_id):
    return AMP[AMP.case_id == case_id].iloc[0].to_dict()


@pytest.mark.parametrize("case_id", list(AMP_SDPA.case_id))
def test_amp_saved_activations_to_the_byte_block_by_block(case_id):
    # memmath/amp_trace.py: autocast's bf16 casts of every matmul's input and weight, fp32 norms.
    row = _amp_row(case_id)
    m = memmath_lessons.reference.predict_case(row)
    assert m.activation_model == "transformers"
    assert int(m.activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step", sorted(STEP_COLUMN))
@pytest.mark.parametrize("case_id", list(AMP_SDPA.case_id))
def test_amp_peak_within_five_percent(case_id, step):
    row = _amp_row(case_id)
    assert _relative(memmath_lessons.reference.predict_peak_case(row, step=step).total, row[STEP_COLUMN[step]]) <= 0.05


def test_the_amp_recording_has_cases_measured_after_the_trace():
    # validation/amp.py's held_out_grid (20, SDPA) and held_out_eager_grid (8), recorded after amp_trace.py.
    assert len(AMP_AFTER_TRACE) == 28 and len(AMP) == 58
    assert {"qwen3-gqa", "phi3-gqa", "olmo2-gqa", "gpt2-tanh"} <= set(AMP[AMP.case_id.isin(AMP_AFTER_TRACE)]["shape"])




def test_at_least_400_recorded_cases():
    assert len(CASES) + len(ADAPTERS) + len(SHARDED) + len(QUANTIZED) + len(AMP) >= 400
