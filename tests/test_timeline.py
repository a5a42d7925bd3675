"""A step's memory over time (memmath/timeline.py) against the peak model it reads and a measured CPU profile."""

from __future__ import annotations

import pytest

import memmath as mm
from memmath_lessons.reference.measured import case_arguments, case_model, load_measured_timelines
from memmath.sharded_peak import sharded_peak
from memmath.timeline import CATEGORIES

RUNS = [dict(), dict(checkpointing=True), dict(method=mm.LoRA(rank=8)), dict(method=mm.Freeze(trainable_layers=2)),
        dict(method=mm.QLoRA(rank=8)), dict(batch_size=4, seq_len=512, attention="eager")]


@pytest.mark.parametrize("settings", RUNS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
@pytest.mark.parametrize("step", ["steady", "first"])
def test_the_highest_point_is_the_steps_peak_and_each_point_adds_up(settings, step):
    run = mm.Run("gpt2", **settings)
    timeline = mm.step_timeline(run, step=step)
    assert timeline.peak.total == mm.peak_memory(run, step=step).total  # one run, one answer
    for point in timeline.points:
        assert set(point.parts) == set(CATEGORIES) and all(v >= 0 for v in point.parts.values()), point
    # The weights are alive at every moment; gradients only in backward and the optimizer step.
    memory = mm.training_memory(run)
    assert {p.parts["weights"] for p in timeline.points} == {memory.weights + memory.quantization_constants}
    assert all(p.parts["gradients"] == 0 for p in timeline.points if p.phase in ("before", "forward", "after"))


def test_the_step_rises_through_forward_and_leaves_the_states_behind():
    # GPT-2, pure bf16, AdamW, a step after the first (by hand: AdamW keeps exp_avg and exp_avg_sq, 2 + 2 bytes a
    # parameter in bf16, and a 4-byte step per trainable tensor; the weights are 2 bytes a parameter).
    run = mm.Run("gpt2", batch_size=2, seq_len=256)
    timeline = mm.step_timeline(run)
    n, tensors = 124_439_808, 148
    states = 4 * n + 4 * tensors
    assert timeline.points[0].parts["optimizer states"] == states
    assert timeline.points[-1].total == timeline.points[0].total  # zero_grad(set_to_none=True) frees the gradients
    first = mm.step_timeline(run, step="first")
    assert first.points[0].parts["optimizer states"] == 0  # no states exist before the first optimizer.step()
    assert [p.phase for p in timeline.points] == ["before", "forward", "forward", "backward", "backward", "backward",
                                                  "backward", "optimizer_step", "after"]


def test_checkpointing_recomputes_the_last_block_before_the_first():
    timeline = mm.step_timeline(mm.Run("gpt2", checkpointing=True))
    order = [p.short for p in timeline.points]
    assert order.index("recomputing the last block") < order.index("recomputing the first block") \
        < order.index("backward, first block")


def test_a_sweep_is_refused_by_name():
    import numpy as np

    with pytest.raises(ValueError, match="seq_len"):
        mm.step_timeline(mm.Run("gpt2", seq_len=np.array([128, 256])))


@pytest.mark.parametrize("recorded", load_measured_timelines(), ids=lambda r: r["row"]["case_id"])
def test_the_recorded_cpu_step_peaks_where_memmath_says(recorded):
    # validation/timeline.py recorded these after memmath/timeline.py was written (held out).
    timeline = mm.step_timeline(case_model(recorded["row"]), **case_arguments(recorded["row"]))
    assert timeline.peak.total == pytest.approx(recorded["peak_step2_bytes"], rel=0.05)
    # Before the step: what was resident plus the previous step's optimizer states. Nothing measured during the
    # step falls below it, and the lowest measured point (the forward's first allocation on top) is near it.
    lowest = min(nbytes for _, nbytes in recorded["series"])
    assert timeline.points[0].total <= lowest <= 1.1 * timeline.points[0].total
    # The measured highest point falls in the phase memmath names.
    top_time = max(recorded["series"], key=lambda p: p[1])[0]
    phase = next(name for name, (lo, hi) in recorded["phases"].items() if lo <= top_time <= hi)
    assert phase == timeline.peak.phase


DATA_PARALLEL = [dict(n_gpus=2), dict(n_gpus=2, gradient_as_bucket_view=True),
                 dict(n_gpus=2, zero_stage=1, sharding="zero_redundancy"), dict(n_gpus=2, zero_stage=3, sharding="fsdp2"),
                 dict(n_gpus=2, zero_stage=3, sharding="fsdp2", reshard_after_forward=False)]


@pytest.mark.parametrize("settings", DATA_PARALLEL, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("step", ["steady", "first"])
def test_a_data_parallel_ranks_timeline_peaks_at_the_requirement_its_verdict_reads(settings, step):
    # One run, one answer: the timeline of a DDP, ZeroRedundancyOptimizer or FSDP2 rank is drawn from the same
    # sharded peak (its buckets, shards and gathered blocks) that the planner's verdict judges.
    run = mm.Run("gpt2", batch_size=2, seq_len=256, **settings)
    timeline = mm.step_timeline(run, step=step)
    if step == "steady":
        need = mm.requirement(run)
        assert need.basis == "peak" and timeline.peak.total == need.bytes
    assert timeline.peak.total == max(v for _, _, v in sharded_peak(run, step=step).moments)


def test_ddp_bucket_views_are_alive_before_the_step():
    # DistributedDataParallel(gradient_as_bucket_view=True) makes its buckets when the model is wrapped and the
    # gradients are views into them: before the step a rank holds every trainable parameter's gradient, by hand
    # GPT-2's 124,439,808 parameters at 2 bytes (pure bf16), beside the weights (the same 2 bytes a parameter).
    timeline = mm.step_timeline(mm.Run("gpt2", batch_size=2, seq_len=256, n_gpus=2, gradient_as_bucket_view=True))
    assert timeline.points[0].parts["gradients"] == 2 * 124_439_808
    assert timeline.points[0].parts["weights"] == 2 * 124_439_808


def test_an_fsdp2_rank_rests_on_its_shards_and_gathers_in_forward():
    # Between steps an FSDP2 rank of 2 keeps half of GPT-2's 2-byte weights (each tensor's first dimension padded
    # to a multiple of the 2 ranks: a few hundred bytes more); in forward it gathers the root and running blocks.
    timeline = mm.step_timeline(mm.Run("gpt2", batch_size=2, seq_len=256, n_gpus=2, zero_stage=3, sharding="fsdp2"))
    half = 124_439_808
    assert half <= timeline.points[0].parts["weights"] < half * 1.0001
    forward = [p for p in timeline.points if p.phase == "forward"]
    assert forward and all(p.parts["weights"] > timeline.points[0].parts["weights"] for p in forward)


def test_every_moment_peak_py_prices_has_a_place_in_time():
    # Each moments.add(phase, label, ...) in memmath/peak.py, read from its source, maps to a point of the timeline's
    # order (a label no start matches would have no name on the axis).
    import re
    from pathlib import Path

    from memmath.timeline import _ORDER, _when

    source = (Path(mm.__file__).parent / "peak.py").read_text()
    added = re.findall(r'moments\.add\("(\w+)", "([^"]+)"', source)
    assert len(added) >= 12
    for phase, label in added:
        assert _when(phase, label) < len(_ORDER), (phase, label)
    # and the two recomputed backward moments come after their block's recomputation
    run = mm.Run("llama-3-8b", seq_len=512, checkpointing=True)
    order = [p.label for p in mm.step_timeline(run).points]
    assert order.index(next(l for l in order if l.startswith("recomputing the last"))) < order.index(
        next(l for l in order if l.startswith("in the last block's recomputed")))
