"""Predicted versus measured, per part and case, with the worst error per part (no torch needed).

    python -m validation.report              # one line per case, then the summary
    python -m validation.report --summary    # the summary only (what the README quotes)
    python -m validation.report --only bert  # cases whose id contains "bert"

Reads memmath/data/measured_cpu.json (validation/measure.py recorded it) and asks memmath for each
case: training_memory(..., activations="transformers") and peak_memory(...) for both measured
steps (step="first" against step 1, the default steady step against step 2). The textbook column
shows how far Korthikanti et al.'s formula, the one the lessons teach first, lands from the same
measurement. Errors are (predicted - measured) / measured.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import memmath
import memmath_lessons.reference
from memmath.memory import training_memory
from memmath.sharded_peak import sharded_peak, why_no_sharded_peak
from memmath_lessons.reference.measured import case_arguments, case_model, measured_metadata

PARTS = {
    # part: (label, measured column, tolerance of tests/test_fidelity.py)
    "parameters": ("Parameters", "param_bytes", 0.0),
    "gradients": ("Gradients", "grad_bytes", 0.0),
    "optimizer_states": ("Optimizer states", "optimizer_state_bytes", 0.0),
    "activations": ("Saved activations (transformers)", "saved_bytes", 0.01),
    "activations_textbook": ("Saved activations (textbook)", "saved_bytes", None),
    "peak_first": ("Peak of step 1 (step=\"first\")", "peak_step1_bytes", 0.05),
    "peak": ("Peak of step 2 (steady, the default)", "peak_step2_bytes", 0.05),
    "peak_forward": ("Step 2: peak in the forward pass", "peak_step2_forward_bytes", None),
    "peak_backward": ("Step 2: peak in the backward pass", "peak_step2_backward_bytes", None),
    "peak_optimizer_step": ("Step 2: peak in the optimizer step", "peak_step2_optimizer_step_bytes", None),
}


def comparison(cases: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per case and part: measured bytes, predicted bytes, relative error."""
    cases = memmath_lessons.reference.load_measured() if cases is None else cases
    rows = []
    for _, case in cases.iterrows():
        m = memmath_lessons.reference.predict_case(case)
        textbook = memmath.training_memory(case_model(case), **case_arguments(case, "textbook"))
        detail = textbook.activation_detail
        peak = memmath_lessons.reference.predict_peak_case(case)
        first = memmath_lessons.reference.predict_peak_case(case, step="first")
        predicted = {
            "parameters": m.weights, "gradients": m.gradients, "optimizer_states": m.optimizer_states,
            "activations": m.activation_detail.saved_by_forward,
            # the textbook counts the recompute buffer too; the measurement is what the forward saved
            "activations_textbook": detail.total - detail.recompute_peak,
            "peak_first": first.total, "peak": peak.total, "peak_forward": peak.forward, "peak_backward": peak.backward,
            "peak_optimizer_step": peak.optimizer_step,
        }
        for part, (_, column, _) in PARTS.items():
            measured = int(case[column])
            value = int(predicted[part])
            rows.append({"case_id": case["case_id"], "part": part, "measured": measured, "predicted": value,
                         "error": (value - measured) / measured if measured else 0.0})
    return pd.DataFrame(rows)


def _group_label(case) -> str:
    """The report's group: method and library (and sharding, when there is one)."""
    library = "bitsandbytes" if "8bit" in str(case["optimizer"]) else ("peft" if case["method"] == "lora" else "torch")
    method = {"full": "full finetuning", "freeze": "freezing", "lora": "LoRA"}.get(case["method"], case["method"])
    return f"{case['group']}: {method}, {library}"


def grouped_summary(table: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """Per group (method, library), held-out or not, and step: cases, static parts exact, saved
    activations exact, each step's peak within 5%, worst peak error."""
    labels = {c["case_id"]: (_group_label(c), bool(c.get("held_out", False))) for _, c in cases.iterrows()}
    wide = table.pivot(index="case_id", columns="part", values="error")
    rows = []
    groups: dict = {}
    for case_id, key in labels.items():
        groups.setdefault(key, []).append(case_id)
    for (label, held_out), ids in groups.items():
        sub = wide.loc[ids]
        static = (sub[["parameters", "gradients", "optimizer_states"]] == 0).all(axis=1)
        for step, part in (("1", "peak_first"), ("2 (steady)", "peak")):
            rows.append({"group": label, "held out": "yes" if held_out else "no", "step": step,
                         "cases": len(sub), "static parts exact": f"{int(static.sum())}/{len(sub)}",
                         "saved exact": f"{int((sub.activations == 0).sum())}/{len(sub)}",
                         "peak within 5%": f"{int((sub[part].abs() <= 0.05).sum())}/{len(sub)}",
                         "worst peak error": f"{sub[part].iloc[sub[part].abs().argmax()]:+.2%}"})
    return pd.DataFrame(rows)


def sharded_summary(cases=None) -> pd.DataFrame:
    """Per sharded engine and world size: ranks whose parameters, gradients and optimizer states
    memmath predicts to the byte (training_memory(..., sharding=..., rank=r)), ranks whose step-1 and step-2
    peaks memmath.sharded_peak puts within 5%, and the measured steady-state peak per rank. cases: a frame like
    load_measured_sharded()'s (the default), e.g. validation/sharded_held_out.py's runs."""
    from memmath_lessons.reference.measured import load_measured_sharded

    cases = load_measured_sharded() if cases is None else cases
    if "checkpointing" not in cases:
        cases = cases.assign(checkpointing=False)
    rows = []
    for (engine, world, checkpointing), sub in cases.groupby(["engine", "world_size", "checkpointing"], sort=False):
        ranks = exact = 0
        peaks, within, refused = [], {"first": 0, "steady": 0}, ""
        for _, case in sub.iterrows():
            sharding, stage = ("zero_redundancy", 1) if engine == "zero1" else ("fsdp2", 3)
            for rank in range(int(world)):
                # the recorded ZeRO-1 runs all-reduce the gradients in place: no DDP bucket copy
                run = dict(n_gpus=int(world), zero_stage=stage, sharding=sharding, rank=rank,
                           reshard_after_forward=engine != "fsdp2-noreshard", gradient_as_bucket_view=True,
                           **case_arguments(case))
                m = training_memory(case_model(case), **run)
                ranks += 1
                exact += (int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
                    case["param_bytes_per_rank"][rank], case["grad_bytes_per_rank"][rank],
                    case["optimizer_state_bytes_per_rank"][rank])
                peaks.append(case["peak_step2_bytes_per_rank"][rank])
                refused = why_no_sharded_peak(memmath.Run(case_model(case), **run))
                if refused:
                    continue
                for step, column in (("first", "peak_step1_bytes_per_rank"), ("steady", "peak_step2_bytes_per_rank")):
                    predicted = sharded_peak(case_model(case), step=step, **run).total
                    within[step] += abs(predicted - case[column][rank]) <= 0.05 * case[column][rank]
        library = "torch FSDP2 (fully_shard)" if engine.startswith("fsdp2") else "torch ZeroRedundancyOptimizer"
        predicted_peaks = (f"{within['first']}/{ranks}, {within['steady']}/{ranks}" if not refused else
                           "not modelled (checkpointing): the upper bound")
        rows.append({"group": f"sharded: full finetuning, {library}",
                     "sharding": f"{engine} x {world}" + (", checkpointing" if checkpointing else ""),
                     "cases": len(sub), "ranks: static parts exact": f"{exact}/{ranks}",
                     "ranks: peak within 5% (step 1, step 2)": predicted_peaks,
                     "step 2 peak per rank (measured, B)": f"{min(peaks):,} to {max(peaks):,}"})
    return pd.DataFrame(rows)


def sharded_held_out() -> pd.DataFrame:
    """validation/sharded_held_out.py's runs as a frame like load_measured_sharded()'s."""
    import json

    path = Path(__file__).resolve().parent / "sharded_held_out.json"
    rows = []
    for record in json.loads(path.read_text(encoding="utf-8"))["sharded_cases"]:
        config = dict(record["config"])
        model = config.pop("model")
        rows.append({**config, **model, **record["measured"]})
    return pd.DataFrame(rows)


def parallel_summary() -> pd.DataFrame:
    """Per parallel engine and world size (validation/parallel.py, held out): ranks whose parameters, gradients
    and optimizer states memmath predicts to the byte, whose saved activations per micro-batch and step peaks
    (memmath.parallel.parallel_peak) are within 5%, and the worst errors."""
    from memmath import parallel
    from memmath_lessons.reference.measured import load_measured_parallel, predict_parallel_case, predict_parallel_peak

    try:
        cases = load_measured_parallel()
    except ValueError:  # the data file is not there
        return pd.DataFrame()
    rows = []
    if "peak_held_out" not in cases:
        cases["peak_held_out"] = False
    cases["peak_held_out"] = cases["peak_held_out"].fillna(False).astype(bool)
    cases["checkpointing"] = cases["checkpointing"].fillna(False).astype(bool)
    # The checkpointed runs without a pipeline showed two faults of the tensor-parallel share (the estimate's
    # total less the per-micro-batch bytes taken for sequence parallelism's cut, and the checkpointed block input
    # left out of that cut), mended after they were recorded: for peaks (and, with sequence parallelism, saved
    # activations) they are not held out.
    mended = cases["checkpointing"] & cases["engine"].isin(["tp", "tp-sp", "dp-tp"])
    cases["peak_held_out"] = cases["peak_held_out"] & ~mended
    for (peak_held_out, checkpointing, engine, schedule, world), sub in cases.groupby(
            ["peak_held_out", "checkpointing", "engine", "schedule", "world_size"], sort=False):
        ranks = exact = saved_ok = 0
        within = {"first": 0, "steady": 0}
        worst_saved, worst_peak = 0.0, 0.0
        for _, case in sub.iterrows():
            for rank in range(int(world)):
                m = predict_parallel_case(case, rank)
                ranks += 1
                exact += (int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
                    case["param_bytes_per_rank"][rank], case["grad_bytes_per_rank"][rank],
                    case["optimizer_state_bytes_per_rank"][rank])
                measured = case["saved_per_micro_batch_bytes_per_rank"][rank]
                error = parallel.stage_activations(m.run)["per_micro_batch"] / measured - 1
                saved_ok += abs(error) <= 0.05
                worst_saved = error if abs(error) > abs(worst_saved) else worst_saved
                for step, column in (("first", "peak_step1_bytes_per_rank"), ("steady", "peak_step2_bytes_per_rank")):
                    error = predict_parallel_peak(case, rank, step)["total"] / case[column][rank] - 1
                    within[step] += abs(error) <= 0.05
                    worst_peak = error if abs(error) > abs(worst_peak) else worst_peak
        label = {"tp": "tensor parallel (DTensor)", "tp-sp": "tensor + sequence parallel (DTensor)",
                 "pp": f"pipeline ({schedule})", "tp-pp": f"tensor x pipeline ({schedule})",
                 "dp-tp": "data x tensor"}[engine] + (", checkpointing" if checkpointing else "")
        rows.append({"group": f"parallel: {label}", "ranks": f"x {world}",
                     "held out": "yes" if peak_held_out else "parts yes, peak no", "cases": len(sub),
                     "ranks: static parts exact": f"{exact}/{ranks}",
                     "saved per micro-batch within 5%": f"{saved_ok}/{ranks} (worst {worst_saved:+.1%})",
                     "peak within 5% (step 1, step 2)": f"{within['first']}/{ranks}, {within['steady']}/{ranks} "
                                                        f"(worst {worst_peak:+.1%})"})
    return pd.DataFrame(rows)


def adapter_summary() -> pd.DataFrame:
    """Houlsby adapters per family, held out or not, and step: parameters, gradients and states to the
    byte (training_memory), saved activations exact (the exact model's trace of the adapters was
    written after the first 20 cases were recorded, the next 15 held out), each step's peak within 5%."""
    from memmath_lessons.reference.measured import load_measured_adapters

    cases = load_measured_adapters()
    rows = []
    for (family, held_out), sub in cases.groupby(["family", "held_out"], sort=False):
        exact = saved = 0
        peaks = {"1": [], "2 (steady)": []}
        for _, case in sub.iterrows():
            m = memmath_lessons.reference.predict_case(case)
            exact += (int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
                case["param_bytes"], case["grad_bytes"], case["optimizer_state_bytes"])
            saved += int(m.activation_detail.saved_by_forward) == case["saved_bytes"]
            for step, name, column in (("1", "first", "peak_step1_bytes"), ("2 (steady)", "steady", "peak_step2_bytes")):
                peaks[step].append((int(memmath_lessons.reference.predict_peak_case(case, step=name).total) - case[column])
                                   / case[column])
        for step, errors in peaks.items():
            rows.append({"group": f"Houlsby adapters: {family}, validation/houlsby.py",
                         "held out": "yes" if held_out else "no", "step": step, "cases": len(sub),
                         "static parts exact": f"{exact}/{len(sub)}", "saved exact": f"{saved}/{len(sub)}",
                         "peak within 5%": f"{sum(abs(e) <= 0.05 for e in errors)}/{len(errors)}",
                         "worst peak error": f"{max(errors, key=abs):+.2%}"})
    return pd.DataFrame(rows)


# Why a recorded peak of the QLoRA and AMP groups misses 5% (tests/test_fidelity.py lists the same).
QLORA_MISS_REASONS = {
    "ckpt": "checkpointing with LoRA on every linear: the recomputed block's 4-bit matmuls dequantize again and "
            "peft's 4-bit LoRA layer clones each result (peft/tuners/lora/bnb.py); the recompute moment counts "
            "one dequantized matrix",
    "other": "the largest dequantized matrix, added to every backward moment, is not alive where BERT's backward "
             "enters the last block (at b x s = 64 tokens it is a large share of the moment)",
}


def _quantized_label(case) -> str:
    base = "8-bit base (Linear8bitLt)" if case["quant_type"] == "int8" else (
        f"{case['quant_type'].upper()} {'with' if case['double_quant'] else 'without'} double quantization "
        "(Linear4bit)")
    return f"QLoRA: {base}, bitsandbytes + peft"


def quantized_summary() -> tuple[pd.DataFrame, list[str]]:
    """QLoRA (validation/quantized.py) per base kind, held out or not, and step: static parts exact
    (weights, quantization constants, gradients, states), saved activations exact (an 8-bit base's
    ctx.A inputs included), each step's peak within 5%; and one line per miss, with its reason."""
    from memmath_lessons.reference.measured import load_measured_quantized

    cases = load_measured_quantized()
    rows, misses, groups = [], [], {}
    for _, case in cases.iterrows():
        groups.setdefault((_quantized_label(case), bool(case["held_out"])), []).append(case)
    for (label, held_out), members in groups.items():
        static = saved = 0
        peaks = {"1": [], "2 (steady)": []}
        for case in members:
            m = memmath_lessons.reference.predict_case(case)
            static += (int(m.weights), int(m.quantization_constants), int(m.gradients), int(m.optimizer_states)) == (
                case["param_bytes"], case["quantization_constant_bytes"], case["grad_bytes"],
                case["optimizer_state_bytes"])
            saved += int(m.activation_detail.saved_by_forward) == case["saved_bytes"] + case["held_by_ctx_bytes"]
            for step, name, column in (("1", "first", "peak_step1_bytes"), ("2 (steady)", "steady", "peak_step2_bytes")):
                error = (int(memmath_lessons.reference.predict_peak_case(case, step=name).total) - case[column]) / case[column]
                peaks[step].append(error)
                if abs(error) > 0.05:
                    why = QLORA_MISS_REASONS["ckpt" if case["checkpointing"] else "other"]
                    misses.append(f"{case['case_id']} step {step[0]}: {error:+.1%} ({why})")
        for step, errors in peaks.items():
            worst = max(errors, key=abs)
            rows.append({"group": label, "held out": "yes" if held_out else "no", "step": step, "cases": len(members),
                         "static parts exact": f"{static}/{len(members)}", "saved exact": f"{saved}/{len(members)}",
                         "peak within 5%": f"{sum(abs(e) <= 0.05 for e in errors)}/{len(errors)}",
                         "worst peak error": f"{worst:+.2%}"})
    return pd.DataFrame(rows), misses


def amp_summary() -> pd.DataFrame:
    """AMP (validation/amp.py) per attention kind and whether recorded after memmath/amp_trace.py:
    static parts against precision="amp"; saved activations and peaks against the exact model
    (memmath/amp_trace.py: SDPA without dropout, eager attention)."""
    from memmath_lessons.reference.measured import load_measured_amp

    cases = load_measured_amp()
    after = cases.get("after_amp_trace", pd.Series(False, index=cases.index)).fillna(False).astype(bool)
    cases = cases.assign(after=after)
    rows = []
    for (attention, late), sub in cases.groupby(["attention", "after"], sort=False):
        exact = saved = peak1 = peak2 = 0
        for _, case in sub.iterrows():
            m = memmath_lessons.reference.predict_case(case, activations="textbook")
            exact += (int(m.weights), int(m.gradients), int(m.optimizer_states), int(m.master_weights)) == (
                case["param_bytes"], case["grad_bytes"], case["optimizer_state_bytes"], 0)
            # every recorded AMP case is SDPA without dropout or eager attention: the exact model takes them
            saved += int(memmath_lessons.reference.predict_case(case).activation_detail.saved_by_forward) == case["saved_bytes"]
            for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")):
                ok = abs(int(memmath_lessons.reference.predict_peak_case(case, step=step).total) - case[column]) <= 0.05 * case[column]
                peak1, peak2 = (peak1 + ok, peak2) if step == "first" else (peak1, peak2 + ok)
        n = len(sub)
        rows.append({"group": f"AMP (autocast bf16): {attention} attention, torch",
                     "recorded after the trace": "yes" if late else "no", "cases": n,
                     "static parts exact": f"{exact}/{n}",
                     "saved exact": f"{saved}/{n}", "peak within 5% (step 1, 2)": f"{peak1}/{n}, {peak2}/{n}"})
    return pd.DataFrame(rows)


def moe_lora_summary() -> pd.DataFrame:
    """LoRA on mixtures of experts (validation/moe_lora.py: routers and routed experts as peft 0.21 adapts them),
    per model type; every case was recorded after the prediction code (held out)."""
    from memmath_lessons.reference.measured import load_measured_moe_lora, predicted_saved_per_layer

    cases = load_measured_moe_lora()
    rows = []
    for arch, sub in cases.groupby("arch", sort=False):
        exact = saved = peak1 = peak2 = 0
        for _, case in sub.iterrows():
            m = memmath_lessons.reference.predict_case(case)
            exact += (int(m.weights), int(m.gradients), int(m.optimizer_states), int(m.trainable_params)) == (
                case["param_bytes"], case["grad_bytes"], case["optimizer_state_bytes"], case["trainable_params"])
            saved += (int(m.activation_detail.saved_by_forward) == case["saved_bytes"]
                      and predicted_saved_per_layer(case) == list(case["saved_per_layer"]))
            for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")):
                ok = abs(int(memmath_lessons.reference.predict_peak_case(case, step=step).total) - case[column]) \
                    <= 0.05 * case[column]
                peak1, peak2 = (peak1 + ok, peak2) if step == "first" else (peak1, peak2 + ok)
        n = len(sub)
        rows.append({"group": f"MoE LoRA: {arch}", "held out": "yes" if sub["held_out"].all() else "no", "cases": n,
                     "static parts exact": f"{exact}/{n}", "saved exact (per block)": f"{saved}/{n}",
                     "peak within 5% (step 1, 2)": f"{peak1}/{n}, {peak2}/{n}"})
    return pd.DataFrame(rows)


def timeline_summary() -> pd.DataFrame:
    """Step 2's measured profile (validation/timeline.py) against memmath.step_timeline: its peak, and the phase."""
    from memmath_lessons.reference.measured import case_arguments, case_model, load_measured_timelines
    from memmath.timeline import step_timeline

    rows = []
    for recorded in load_measured_timelines():
        timeline = step_timeline(case_model(recorded["row"]), **case_arguments(recorded["row"]))
        top = max(recorded["series"], key=lambda p: p[1])[0]
        phase = next(name for name, (lo, hi) in recorded["phases"].items() if lo <= top <= hi)
        measured = recorded["peak_step2_bytes"]
        rows.append({"timeline (held out)": recorded["row"]["case_id"], "measured peak": measured,
                     "memmath": timeline.peak.total, "error": f"{(timeline.peak.total - measured) / measured:+.2%}",
                     "peak phase (measured, memmath)": f"{phase}, {timeline.peak.phase}"})
    return pd.DataFrame(rows)


def lora_dropout_summary() -> tuple[pd.DataFrame, list[str]]:
    """LoRA dropout, QLoRA dropout and mixed precision with master weights (validation/lora_dropout.py, its own
    file; every case held out) per group and step: parameters, gradients, states (and the master copy) exact,
    saved activations exact block by block, each step's peak within 5%, worst error; and every miss."""
    from memmath_lessons.reference.measured import load_measured_lora_dropout, predicted_saved_per_layer

    cases = load_measured_lora_dropout()
    rows, misses = [], []
    for group, sub in cases.groupby("group", sort=False):
        exact = saved = 0
        errors = {"first": [], "steady": []}
        for _, case in sub.iterrows():
            m = memmath_lessons.reference.predict_case(case)
            constants = case["quantization_constant_bytes"] if isinstance(case["quant_type"], str) else 0
            master = case["master_weight_bytes"] if case["master"] else 0
            exact += (int(m.weights), int(m.quantization_constants), int(m.gradients), int(m.optimizer_states),
                      int(m.master_weights)) == (case["param_bytes"], constants, case["grad_bytes"],
                                                 case["optimizer_state_bytes"], master)
            saved += (int(m.activation_detail.saved_by_forward) == case["saved_bytes"]
                      and predicted_saved_per_layer(case) == list(case["saved_per_layer"]))
            for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")):
                error = (int(memmath_lessons.reference.predict_peak_case(case, step=step).total) - case[column]) / case[column]
                errors[step].append(error)
                if abs(error) > 0.05:
                    misses.append(f"{case['case_id']} ({step} step): {error:+.2%}")
        n = len(sub)
        for step, label in (("first", "1"), ("steady", "2 (steady)")):
            worst = max(errors[step], key=abs)
            rows.append({"group": f"{group}, validation/lora_dropout.py", "held out": "yes", "step": label, "cases": n,
                         "static parts exact": f"{exact}/{n}", "saved exact": f"{saved}/{n}",
                         "peak within 5%": f"{sum(abs(e) <= 0.05 for e in errors[step])}/{n}",
                         "worst peak error": f"{worst:+.2%}"})
    return pd.DataFrame(rows), misses


def _recorded_case(case, saved_per_block, saved_case=None) -> tuple:
    """One recorded single-GPU case against memmath: (parameters, gradients and states exact, saved activations exact
    in all and block by block, {"first": step 1's peak error, "steady": step 2's}). saved_per_block: measured.py's
    predicted_saved_per_layer or predicted_saved_per_block; saved_case: the case it is asked of, when not `case`."""
    m = memmath_lessons.reference.predict_case(case)
    static = (int(m.weights), int(m.gradients), int(m.optimizer_states)) == (
        case["param_bytes"], case["grad_bytes"], case["optimizer_state_bytes"])
    saved = (int(m.activation_detail.saved_by_forward) == case["saved_bytes"]
             and saved_per_block(case if saved_case is None else saved_case) == list(case["saved_per_layer"]))
    errors = {step: (int(memmath_lessons.reference.predict_peak_case(case, step=step).total) - case[column]) / case[column]
              for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes"))}
    return static, saved, errors


def preference_summary() -> tuple[pd.DataFrame, list[str]]:
    """Preference training (validation/preference.py, its own file; every case held out) per reference and step:
    parameters (the reference copy's too), gradients and states exact, saved activations exact block by block (the
    blocks as the policy's method at 2 x batch_size sequences), each step's peak within 5%, worst error; every miss."""
    from memmath_lessons.reference.measured import load_measured_preference, predicted_saved_per_layer

    cases = load_measured_preference()
    rows, misses = [], []
    for reference, sub in cases.groupby("reference", sort=False):
        exact = saved = 0
        errors = {"first": [], "steady": []}
        for _, case in sub.iterrows():
            policy = {**case.to_dict(), "reference": None, "batch_size": 2 * int(case["batch_size"])}
            static_ok, saved_ok, case_errors = _recorded_case(case, predicted_saved_per_layer, policy)
            exact, saved = exact + static_ok, saved + saved_ok
            for step, error in case_errors.items():
                errors[step].append(error)
                if abs(error) > 0.05:
                    misses.append(f"{case['case_id']} ({step} step): {error:+.2%}")
        n = len(sub)
        for step, label in (("first", "1"), ("steady", "2 (steady)")):
            worst = max(errors[step], key=abs)
            rows.append({"group": f"preference (DPO), reference {reference}", "held out": "yes", "step": label,
                         "cases": n, "static parts exact": f"{exact}/{n}", "saved exact": f"{saved}/{n}",
                         "peak within 5%": f"{sum(abs(e) <= 0.05 for e in errors[step])}/{n}",
                         "worst peak error": f"{worst:+.2%}"})
    return pd.DataFrame(rows), misses


def grad_accum_summary() -> tuple[pd.DataFrame, list[str]]:
    """Gradient accumulation (validation/grad_accum.py, its own file; every case held out) per number of
    micro-batches and step: parameters, gradients and states exact, saved activations exact block by block, each
    step's peak within 5%, worst error; and every miss."""
    from memmath_lessons.reference.measured import load_measured_grad_accum, predicted_saved_per_layer

    cases = load_measured_grad_accum()
    rows, misses = [], []
    for k, sub in cases.groupby("grad_accum_steps"):
        exact = saved = 0
        errors = {"first": [], "steady": []}
        for _, case in sub.iterrows():
            static_ok, saved_ok, case_errors = _recorded_case(case, predicted_saved_per_layer)
            exact, saved = exact + static_ok, saved + saved_ok
            for step, error in case_errors.items():
                errors[step].append(error)
                if abs(error) > 0.05:
                    misses.append(f"{case['case_id']} ({step} step): {error:+.2%}")
        n = len(sub)
        for step, label in (("first", "1"), ("steady", "2 (steady)")):
            worst = max(errors[step], key=abs)
            rows.append({"group": f"gradient accumulation, k = {k}{' (control)' if k == 1 else ''}",
                         "held out": "yes", "step": label, "cases": n, "static parts exact": f"{exact}/{n}",
                         "saved exact": f"{saved}/{n}",
                         "peak within 5%": f"{sum(abs(e) <= 0.05 for e in errors[step])}/{n}",
                         "worst peak error": f"{worst:+.2%}"})
    return pd.DataFrame(rows), misses


# Why a recorded sliding-window peak misses 5% (tests/test_sliding_window.py lists the same).
SLIDING_MISS_REASON = "not explained by memmath's model: a regression to find"


def sliding_summary() -> tuple[pd.DataFrame, list[str]]:
    """Sliding-window models (validation/sliding.py, all held out) per model type and attention, each side of the
    window: static parts, saved activations block by block, each step's peak within 5%; one line per miss."""
    from memmath_lessons.reference.measured import load_measured_sliding, predicted_saved_per_block

    cases = load_measured_sliding()
    rows, misses = [], []
    for (arch, attention), sub in cases.groupby(["arch", "attention"], sort=False):
        static = saved = peak1 = peak2 = 0
        for _, case in sub.iterrows():
            static_ok, saved_ok, case_errors = _recorded_case(case, predicted_saved_per_block)
            static, saved = static + static_ok, saved + saved_ok
            for step, error in case_errors.items():
                ok = abs(error) <= 0.05
                peak1, peak2 = (peak1 + ok, peak2) if step == "first" else (peak1, peak2 + ok)
                if not ok:
                    misses.append(f"{case['case_id']} step {1 if step == 'first' else 2}: {error:+.1%} "
                                  f"({SLIDING_MISS_REASON})")
        n = len(sub)
        sides = f"{(sub.seq_len < 64).sum()}, {(sub.seq_len == 64).sum()}, {(sub.seq_len > 64).sum()}"
        rows.append({"group": f"sliding window: {arch}, {attention}", "below, at, past the window": sides,
                     "held out": "yes",
                     "cases": n, "static parts exact": f"{static}/{n}", "saved exact (by block)": f"{saved}/{n}",
                     "peak within 5% (step 1, 2)": f"{peak1}/{n}, {peak2}/{n}"})
    return pd.DataFrame(rows), misses


def padding_summary() -> pd.DataFrame:
    """Right-padded batches and packed sequences (validation/padding.py) per group and attention kind: static parts, saved activations
    block by block, each step's peak within 5%."""
    from memmath_lessons.reference.measured import load_measured_padding, predicted_saved_per_block

    cases = load_measured_padding()
    rows = []
    for (group, attention), sub in cases.groupby(["group", "attention"], sort=False):
        static = saved = peak1 = peak2 = 0
        worst = 0.0
        for _, case in sub.iterrows():
            static_ok, saved_ok, case_errors = _recorded_case(case, predicted_saved_per_block)
            static, saved = static + static_ok, saved + saved_ok
            for step, error in case_errors.items():
                worst = max(worst, abs(error))
                ok = abs(error) <= 0.05
                peak1, peak2 = (peak1 + ok, peak2) if step == "first" else (peak1, peak2 + ok)
        n = len(sub)
        held = int(sub["held_out"].sum())
        rows.append({"group": f"{group}: {attention}", "held out": "yes" if held == n else f"{held} of {n}", "cases": n,
                     "static parts exact": f"{static}/{n}", "saved exact (by block)": f"{saved}/{n}",
                     "peak within 5% (step 1, 2)": f"{peak1}/{n}, {peak2}/{n}", "worst peak error": f"{worst:.1%}"})
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per part: cases, exact matches, cases within the test's tolerance, mean and worst error."""
    rows = []
    for part, (label, _, tolerance) in PARTS.items():
        sub = table[table.part == part]
        worst = sub.loc[sub.error.abs().idxmax()]
        rows.append({
            "part": label, "cases": len(sub), "exact": int((sub.measured == sub.predicted).sum()),
            "within tolerance": "-" if tolerance is None else f"{int((sub.error.abs() <= tolerance).sum())} "
                                                               f"(±{tolerance:.0%})",
            "mean |error|": f"{sub.error.abs().mean():.2%}", "worst error": f"{worst.error:+.2%}",
            "worst case": worst.case_id if worst.error else "-",
        })
    return pd.DataFrame(rows)


def _per_case(table: pd.DataFrame) -> pd.DataFrame:
    wide = table.pivot(index="case_id", columns="part", values="error")
    measured = table.pivot(index="case_id", columns="part", values="measured")
    out = pd.DataFrame(index=wide.index)
    out["params/grads/states"] = [
        "exact" if all(wide.loc[c, p] == 0 for p in ("parameters", "gradients", "optimizer_states")) else "DIFFER"
        for c in wide.index]
    out["saved B"] = measured["activations"].map("{:,}".format)
    out["transformers"] = wide["activations"].map("{:+.2%}".format)
    out["textbook"] = wide["activations_textbook"].map("{:+.1%}".format)
    out["step 1 B"] = measured["peak_first"].map("{:,}".format)
    out["step 1 err"] = wide["peak_first"].map("{:+.2%}".format)
    out["step 2 B"] = measured["peak"].map("{:,}".format)
    out["step 2 err"] = wide["peak"].map("{:+.2%}".format)
    for phase in ("forward", "backward", "optimizer_step"):
        out[phase.replace("optimizer_step", "step")] = wide[f"peak_{phase}"].map("{:+.1%}".format)
    order = memmath_lessons.reference.load_measured().case_id
    return out.loc[[c for c in order if c in out.index]]


def main(argv=None):
    parser = argparse.ArgumentParser(description="memmath's predictions against the recorded PyTorch measurements")
    parser.add_argument("--summary", action="store_true", help="print only the summary per part")
    parser.add_argument("--only", default=None, help="cases whose id contains this text")
    args = parser.parse_args(argv)

    cases = memmath_lessons.reference.load_measured()
    if args.only:
        cases = cases[cases.case_id.str.contains(args.only, regex=False)]
    if cases.empty:
        parser.error(f"no recorded case id contains {args.only!r}")
    table = comparison(cases)
    meta = measured_metadata()
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_colwidth", 80):
        if not args.summary:
            print(_per_case(table).to_string())
            print()
        print(f"{len(cases)} cases measured on the {meta['device']} ({meta['threads']} thread; {versions})")
        print(summary(table).to_string(index=False))
        for case_id in memmath_lessons.reference.measured.REFUSED_CASES:  # load_measured leaves them out
            print(f"recorded, refused by name, not compared: {case_id}")
        print()
        print("Per group (held out: recorded after the prediction code it tests was written):")
        print(grouped_summary(table, cases).to_string(index=False))
        adapters = adapter_summary()
        if len(adapters):
            print()
            print("Houlsby adapters (a reference module in BERT and LLaMA blocks). Their trace was written after the 20")
            print("not-held-out and 8 wide held-out cases were recorded (it matched them at once); the 15 with widths")
            print("4, 16 and 64 were measured after it.")
            print(adapters.to_string(index=False))
        quantized, misses = quantized_summary()
        if len(quantized):
            print()
            print("QLoRA (validation/quantized.py; bitsandbytes' Linear4bit / Linear8bitLt under peft's LoRA). The peak")
            print("terms for a quantized base were written after these cases were measured (183/200 step peaks within")
            print("5% before them), so for peaks the held-out flag overstates: only the static parts and the saved")
            print("activations were predicted before measuring.")
            print(quantized.to_string(index=False))
            for line in misses:
                print(f"  miss: {line}")
        amp = amp_summary()
        if len(amp):
            print()
            print("AMP (validation/amp.py; torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss). The AMP")
            print("trace (memmath/amp_trace.py) was written after the first 30 were recorded (its eager path found one miss")
            print("there, GPT-2's fp32-promoted scores); of the 20 SDPA cases recorded after it 17 were exact at first (RMSNorm")
            print("on a bf16 input and Phi-3's fused outputs were then fixed); the 8 eager ones recorded last were all exact.")
            print("SDPA with dropout (the CPU's math kernel) under AMP is refused by the exact model.")
            print(amp.to_string(index=False))
        moe = moe_lora_summary()
        if len(moe):
            print()
            print("LoRA on mixtures of experts (validation/moe_lora.py; peft 0.21's ParamWrapper on the routers and the 3-D")
            print("expert tensors), recorded after the prediction code: held out.")
            print(moe.to_string(index=False))
        timelines = timeline_summary()
        if len(timelines):
            print()
            print("A step over time (validation/timeline.py, recorded after memmath/timeline.py): held out.")
            print(timelines.to_string(index=False))
        dropout, dropout_misses = lora_dropout_summary()
        if len(dropout):
            print()
            print("LoRA dropout (peft's lora_dropout 0.05 and 0.1, and 0.0 as a control; QLoRA on an NF4 base) and mixed")
            print("precision with fp32 master weights built before step 1 (validation/lora_dropout.py, its own data file),")
            print("GPT-2 and LLaMA at hidden 256. Recorded after the prediction code; two peak terms were added after")
            print("(LoRA dropout's extra gradient in a block's backward, for two checkpointed cases 6.3% and 3.9% low")
            print("before it; no dequantized 4-bit matrix at the loss, for two QLoRA cases 9.2% and 5.4% high), so for")
            print("those peaks the held-out flag overstates.")
            print(dropout.to_string(index=False))
            for line in dropout_misses:
                print(f"  miss: {line}")
        accumulation, accumulation_misses = grad_accum_summary()
        if len(accumulation):
            print()
            print("Gradient accumulation over k micro-batches (validation/grad_accum.py, its own data file), GPT-2 and LLaMA")
            print("at hidden 256: a later micro-batch's forward and backward with the earlier ones' gradients held.")
            print("Recorded after the prediction code, which was not changed after: held out.")
            print(accumulation.to_string(index=False))
            for line in accumulation_misses:
                print(f"  miss: {line}")
        preference, preference_misses = preference_summary()
        if len(preference):
            print()
            print("Preference training, DPO (validation/preference.py, its own data file), GPT-2 and LLaMA at hidden 64: the")
            print("policy on chosen and rejected sequences (2 x batch), its reference a frozen copy, its own adapters off, or")
            print("precomputed log-probs. Recorded after memmath/preference.py, which was not changed after: held out.")
            print(preference.to_string(index=False))
            for line in preference_misses:
                print(f"  miss: {line}")
        sliding, sliding_misses = sliding_summary()
        if len(sliding):
            print()
            print("Sliding-window models (validation/sliding.py; measured_sliding.json), all held out: recorded after")
            print("the mask model was written. Two changes followed: one key/value head makes repeat_kv a view (Gemma")
            print("3's saved bytes had been 2 x t x (a - 1) x d x e per block high; one eager case at b = 2 was recorded")
            print("after that), and the forward peak holds the embedding output and peft's base result through its")
            print("add (Phi-3 with fp32 LoRA had been 5.1% low).")
            print(sliding.to_string(index=False))
            for line in sliding_misses:
                print(f"  miss: {line}")
        padded = padding_summary()
        if len(padded):
            print()
            print("Right-padded batches and packed sequences (validation/padding.py; measured_padding.json), LLaMA with")
            print("grouped-query attention, recorded after Run(padded=True) and Run(packed=True) were written. The packed")
            print("runs' rotary tables per sequence came from a probe of three packed settings first: those three cases")
            print("are not held out.")
            print(padded.to_string(index=False))
        sharded = sharded_summary()
        if len(sharded):
            print()
            print("Sharded runs, per rank (validation/sharded.py, gloo on one CPU). The peaks (memmath.sharded_peak) were")
            print("written after these runs were recorded and checked on them: for peaks they are the fitting set. Ranks")
            print("more than 5% below hold a collective buffer whose free the CPU profiler did not see.")
            print(sharded.to_string(index=False))
            print()
            print("Sharded runs recorded after memmath.sharded_peak was written (validation/sharded_held_out.py): held out;")
            print("the middle blocks' moments were added after them (no run here without checkpointing moved).")
            print(sharded_summary(sharded_held_out()).to_string(index=False))
        parallel_runs = parallel_summary()
        if len(parallel_runs):
            print()
            print("Tensor-, pipeline-, tensor x pipeline and data x tensor runs, per rank (validation/parallel.py, gloo on one")
            print("CPU; its own data file). The first round was recorded after memmath/parallel.py's parts were written (held")
            print("out for them, except the whole-vocabulary embedding gradient of DTensor's RowwiseParallel embedding and the")
            print("pipeline's receive buffers, added after the first runs); the peak model of split runs (the schedule replay,")
            print("torch's loss_parallel terms) was written after profiler traces of those runs, so for peaks they are not held")
            print("out. The second round (tensor x pipeline, data x tensor), the third (checkpointing) and the fourth")
            print("(interleaved 1F1B) were recorded after the model they test: held out, except the checkpointed runs")
            print("without a pipeline, whose tensor-parallel share was mended after they were recorded (not held out for peaks).")
            print(parallel_runs.to_string(index=False))


if __name__ == "__main__":
    main()
